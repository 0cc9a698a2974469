// Image decoding and Idefics3 preprocessing (src/vision/) against Pillow: the fixtures in
// tests/golden/images/ and their manifest.json are made by tools/make_image_golden.py.
// Tolerances (measured with Pillow 13.0.0 and Debian's libpng 1.6.39, libjpeg-turbo 2.1.5,
// libwebp 1.2.4 on x86-64): every decode is byte-exact, JPEG and lossy WebP included (the
// same decoders with the same default DCT and upsampling); resize_lanczos is byte-exact (the
// same fixed-point arithmetic as Pillow's); idefics3_pixels is within float rounding;
// idefics3_views is bit-exact against transformers' own Idefics3ImageProcessorPil.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "model_fixture.h"
#include "vision/image_decode.h"
#include "vision/image_preprocess.h"

namespace {

using splash::vision::ImageSize;
using splash::vision::read_image_size;
using splash::vision::decode_image;
using splash::vision::ImageFormat;
using splash::vision::kDefaultMaxImagePixels;
using splash::vision::RgbImage;
using Bytes = std::vector<uint8_t>;

std::string image_path(const std::string& name) { return splash::testing::golden_path("images/" + name); }

Bytes read_file(const std::string& name) {
  std::ifstream in(image_path(name), std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing " << name << "; run tools/make_image_golden.py";
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json manifest() {
  std::ifstream in(image_path("manifest.json"));
  EXPECT_TRUE(in.good()) << "missing manifest; run tools/make_image_golden.py";
  return nlohmann::json::parse(in);
}

RgbImage decode_file(const std::string& name) { return decode_image(read_file(name), kDefaultMaxImagePixels); }

int max_abs_diff(const Bytes& a, const Bytes& b) {
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
  return worst;
}

// The decode outcome the hostile-input tests accept: a splash::Error, or a whole image (some
// truncations only cut what follows the pixel data). Anything else -- another exception, a
// crash, a hang -- fails the test (and the ASan/fuzz builds).
enum class Outcome { Refused, Decoded };
Outcome try_decode(std::span<const uint8_t> bytes, int64_t max_pixels = kDefaultMaxImagePixels) {
  try {
    const RgbImage image = decode_image(bytes, max_pixels);
    EXPECT_GT(image.width, 0);
    EXPECT_GT(image.height, 0);
    EXPECT_EQ(image.pixels.size(), size_t(image.width) * image.height * 3);
    return Outcome::Decoded;
  } catch (const splash::Error& e) {
    EXPECT_GT(std::strlen(e.what()), 0u);
    return Outcome::Refused;
  }
}

std::string error_of(std::span<const uint8_t> bytes, int64_t max_pixels = kDefaultMaxImagePixels) {
  try {
    decode_image(bytes, max_pixels);
  } catch (const splash::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "decode_image did not throw";
  return "";
}

// PNG chunks for hand-made headers (CRC-32 as the PNG spec defines it).
uint32_t crc32(const uint8_t* data, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= data[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

Bytes png_with_ihdr(uint32_t width, uint32_t height) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes chunk = {'I', 'H', 'D', 'R'};
  put_be32(chunk, width);
  put_be32(chunk, height);
  chunk.insert(chunk.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter variant, not interlaced
  put_be32(png, 13);
  png.insert(png.end(), chunk.begin(), chunk.end());
  put_be32(png, crc32(chunk.data(), chunk.size()));
  // The start of an IDAT chunk that claims 64 KiB and holds 4 bytes: libpng reads the header up
  // to here, and reading any pixel row would fail.
  png.insert(png.end(), {0, 1, 0, 0, 'I', 'D', 'A', 'T', 0x78, 0x9c, 0x01, 0x02});
  return png;
}

// Whether bytes [begin, end) of a PNG overlap a chunk whose damage libpng must catch: the
// critical chunks before IEND (IHDR, PLTE, IDAT). Damage in an ancillary chunk (tRNS, ...) is
// only a warning to libpng (the chunk is dropped), and IEND is never read back.
bool overlaps_checked_png_chunk(const Bytes& png, size_t begin, size_t end) {
  for (size_t at = 8; at + 12 <= png.size();) {
    const size_t length = (size_t(png[at]) << 24) | (png[at + 1] << 16) | (png[at + 2] << 8) | png[at + 3];
    const size_t chunk_end = at + 12 + length;
    const bool critical = std::isupper(png[at + 4]) && std::memcmp(&png[at + 4], "IEND", 4) != 0;
    if (critical && begin < chunk_end && at < end) return true;
    at = chunk_end;
  }
  return false;
}

// --- decoding the golden files ---

TEST(ImageDecode, GoldenFilesMatchPillow) {
  const auto m = manifest();
  ASSERT_GE(m.at("decode").size(), 8u);
  for (const auto& c : m.at("decode")) {
    const std::string file = c.at("file");
    SCOPED_TRACE(file);
    const RgbImage image = decode_file(file);
    ASSERT_EQ(image.width, c.at("width").get<int>());
    ASSERT_EQ(image.height, c.at("height").get<int>());
    const Bytes expected = read_file(c.at("rgb"));
    ASSERT_EQ(image.pixels.size(), expected.size());
    EXPECT_EQ(max_abs_diff(image.pixels, expected), 0);  // exact for every format, see the top
  }
}

TEST(ImageDecode, RefusedFormatsSayWhatIsSupported) {
  const auto m = manifest();
  for (const auto& c : m.at("refuse")) {
    SCOPED_TRACE(c.at("file").get<std::string>());
    const std::string message = error_of(read_file(c.at("file")));
    EXPECT_NE(message.find(c.at("message_contains").get<std::string>()), std::string::npos) << message;
  }
  const std::string gif = error_of(read_file("gif_8x8.gif"));
  EXPECT_NE(gif.find("PNG, JPEG or WebP"), std::string::npos) << gif;
  const Bytes text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  EXPECT_NE(error_of(text).find("not recognized"), std::string::npos);
}

TEST(ImageDecode, SniffsSignatures) {
  using splash::vision::sniff_image_format;
  EXPECT_EQ(sniff_image_format(read_file("rgb_37x23.png")), ImageFormat::Png);
  EXPECT_EQ(sniff_image_format(read_file("rgb_50x30.jpg")), ImageFormat::Jpeg);
  EXPECT_EQ(sniff_image_format(read_file("lossless_33x21.webp")), ImageFormat::Webp);
  EXPECT_EQ(sniff_image_format(read_file("gif_8x8.gif")), ImageFormat::Gif);
  const Bytes riff_wave = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E'};
  EXPECT_EQ(sniff_image_format(riff_wave), ImageFormat::Unknown);
  EXPECT_EQ(sniff_image_format(Bytes{}), ImageFormat::Unknown);
  EXPECT_EQ(sniff_image_format(Bytes{0x89, 'P', 'N'}), ImageFormat::Unknown);
  EXPECT_EQ(splash::vision::image_format_name(ImageFormat::Webp), "WebP");
}

// --- the pixel bound: read from the header, checked before any pixel is decoded ---

// Counting an image's tokens reads only its header: the same size as decoding, the same
// refusals, and a header bomb costs nothing.
TEST(ImageDecode, HeaderSizeAgreesWithDecoding) {
  const auto m = manifest();  // kept alive: the loop walks inside it
  for (const auto& c : m.at("decode")) {
    const std::string file = c.at("file");
    SCOPED_TRACE(file);
    const Bytes bytes = read_file(file);
    const ImageSize size = read_image_size(bytes, kDefaultMaxImagePixels);
    EXPECT_EQ(size.width, c.at("width").get<int>());
    EXPECT_EQ(size.height, c.at("height").get<int>());
  }
  EXPECT_THROW(read_image_size(png_with_ihdr(100000, 100000), kDefaultMaxImagePixels), splash::Error);
  EXPECT_THROW(read_image_size(read_file("gif_8x8.gif"), kDefaultMaxImagePixels), splash::Error);
  EXPECT_THROW(read_image_size(Bytes{0x89, 'P', 'N', 'G'}, kDefaultMaxImagePixels), splash::Error);
}

TEST(ImageDecode, PixelBoundRefusedFromThePngHeader) {
  // The file ends after IHDR: a decode attempt would fail with a libpng message instead, so the
  // bound message shows the check ran first (and nothing of 100000^2 * 4 bytes was allocated).
  const Bytes png = png_with_ihdr(100000, 100000);
  EXPECT_EQ(error_of(png, 16777216),
            "image is 100000x100000 (10000000000 pixels), more than the server's limit of 16777216 pixels "
            "(--max-image-pixels)");
  // At the bound itself an image is accepted (a real one: 37 x 23 = 851 pixels).
  EXPECT_EQ(try_decode(read_file("rgb_37x23.png"), 851), Outcome::Decoded);
  EXPECT_NE(error_of(read_file("rgb_37x23.png"), 850).find("37x23 (851 pixels)"), std::string::npos);
}

TEST(ImageDecode, PixelBoundRefusedFromTheJpegHeader) {
  Bytes jpeg = read_file("rgb_50x30.jpg");
  // SOF0: FF C0, length (2), precision (1), height (2), width (2).
  size_t sof = 0;
  while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, jpeg.size());
  jpeg[sof + 5] = 0xEA, jpeg[sof + 6] = 0x60;  // height 60000
  jpeg[sof + 7] = 0xEA, jpeg[sof + 8] = 0x60;  // width 60000
  size_t sos = sof;
  while (sos + 1 < jpeg.size() && !(jpeg[sos] == 0xFF && jpeg[sos + 1] == 0xDA)) ++sos;
  jpeg.resize(sos + 16);  // headers and the scan header only, no entropy-coded data
  const std::string message = error_of(jpeg);
  EXPECT_NE(message.find("image is 60000x60000 (3600000000 pixels), more than the server's limit of 16777216"),
            std::string::npos)
      << message;
}

TEST(ImageDecode, PixelBoundRefusedFromTheWebpHeader) {
  Bytes webp = read_file("lossless_33x21.webp");
  ASSERT_EQ(std::memcmp(webp.data() + 12, "VP8L", 4), 0) << "expected a simple lossless WebP";
  // VP8L header after the 0x2f signature byte: 14 bits width - 1, 14 bits height - 1, LSB first.
  const uint32_t w = 16384 - 1, h = 16384 - 1;
  const uint32_t bits = w | (h << 14) | (uint32_t(webp[21 + 3] >> 4) << 28);  // keep alpha hint and version
  for (int i = 0; i < 4; ++i) webp[21 + i] = uint8_t(bits >> (8 * i));
  webp.resize(40);
  const std::string message = error_of(webp);
  EXPECT_NE(message.find("image is 16384x16384 (268435456 pixels), more than the server's limit"), std::string::npos)
      << message;
}

TEST(ImageDecode, ZeroSizedImagesRefused) {
  EXPECT_EQ(try_decode(png_with_ihdr(0, 10)), Outcome::Refused);
  EXPECT_EQ(try_decode(png_with_ihdr(10, 0)), Outcome::Refused);
  Bytes jpeg = read_file("rgb_50x30.jpg");
  size_t sof = 0;
  while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, jpeg.size());
  jpeg[sof + 7] = 0, jpeg[sof + 8] = 0;  // width 0
  EXPECT_EQ(try_decode(jpeg), Outcome::Refused);
}

// --- hostile and malformed input: a splash::Error, never a crash or a hang ---

const char* const kDecodable[] = {"rgb_37x23.png", "rgba_40x40.png", "gray_64x48.png", "palette_trns_20x12.png",
                                  "rgb_50x30.jpg", "gray_24x16.jpg", "lossless_33x21.webp", "lossy_alpha_30x20.webp"};

TEST(ImageDecodeHostile, EmptyAndTinyInputs) {
  EXPECT_EQ(try_decode(Bytes{}), Outcome::Refused);
  EXPECT_EQ(try_decode(Bytes{0x89}), Outcome::Refused);
  EXPECT_EQ(try_decode(Bytes{0xFF, 0xD8, 0xFF}), Outcome::Refused);
  EXPECT_EQ(try_decode(Bytes{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}), Outcome::Refused);
  const Bytes riff = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  EXPECT_EQ(try_decode(riff), Outcome::Refused);
}

TEST(ImageDecodeHostile, TruncatedAtEveryLength) {
  for (const char* name : kDecodable) {
    SCOPED_TRACE(name);
    const Bytes full = read_file(name);
    size_t decoded = 0;
    for (size_t n = 0; n < full.size(); ++n) {
      if (try_decode(std::span(full.data(), n)) == Outcome::Decoded) {
        ++decoded;
        // Only what follows the pixel data may be missing (a PNG's IEND, a JPEG's EOI).
        EXPECT_GE(n + 12, full.size()) << "decoded with " << full.size() - n << " bytes missing";
      }
    }
    EXPECT_LE(decoded, 12u);
  }
}

TEST(ImageDecodeHostile, RandomBytesBehindEachSignature) {
  std::mt19937 rng(1234);
  const Bytes prefixes[] = {{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'},
                            {0xFF, 0xD8, 0xFF},
                            {'R', 'I', 'F', 'F', 0x40, 0, 0, 0, 'W', 'E', 'B', 'P'},
                            {}};
  for (const Bytes& prefix : prefixes) {
    for (int trial = 0; trial < 300; ++trial) {
      Bytes data = prefix;
      const size_t n = rng() % 600;
      for (size_t i = 0; i < n; ++i) data.push_back(uint8_t(rng()));
      EXPECT_EQ(try_decode(data), Outcome::Refused);
    }
  }
}

TEST(ImageDecodeHostile, CorruptBodiesBehindValidHeaders) {
  std::mt19937 rng(99);
  for (const char* name : kDecodable) {
    SCOPED_TRACE(name);
    const Bytes full = read_file(name);
    const bool checksummed = std::string(name).ends_with(".png");
    for (int trial = 0; trial < 200; ++trial) {
      Bytes data = full;
      // Keep the first 40 bytes (signature and size header), scramble a run after them.
      const size_t at = 40 + rng() % (full.size() - 48);
      const size_t len = 1 + rng() % 16;
      for (size_t i = at; i < std::min(at + len, data.size()); ++i) data[i] = uint8_t(rng());
      const Outcome outcome = try_decode(data);
      // PNG chunks carry CRCs, so damage to a critical chunk is caught; JPEG and WebP
      // entropy-coded data has no checksum and damage there can decode to wrong pixels, as it
      // does in Pillow -- all we require is no crash and either an Error or a whole image.
      if (checksummed && data != full && overlaps_checked_png_chunk(full, at, at + len)) {
        EXPECT_EQ(outcome, Outcome::Refused) << "at " << at;
      }
    }
  }
}

// --- resizing and Idefics3 preprocessing against Pillow ---

TEST(ImageLanczos, MatchesPillowResize) {
  const auto m = manifest();
  ASSERT_GE(m.at("resize").size(), 4u);
  for (const auto& c : m.at("resize")) {
    const int w = c.at("width"), h = c.at("height");
    SCOPED_TRACE(c.at("source").get<std::string>() + " to " + std::to_string(w) + "x" + std::to_string(h));
    const RgbImage out = splash::vision::resize_lanczos(decode_file(c.at("source")), w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    // Byte-exact: the same fixed-point weights and rounding, and the same pass order, as Pillow
    // 13. (Pillow <= 12 ran the horizontal pass first always: up to 2 apart on some sizes.)
    EXPECT_EQ(max_abs_diff(out.pixels, read_file(c.at("rgb"))), 0);
  }
}

TEST(ImageLanczos, SameSizeIsACopyAndBadSizesThrow) {
  const RgbImage image = decode_file("rgb_37x23.png");
  EXPECT_EQ(splash::vision::resize_lanczos(image, 37, 23).pixels, image.pixels);
  EXPECT_THROW(splash::vision::resize_lanczos(image, 0, 5), splash::Error);
  EXPECT_THROW(splash::vision::resize_lanczos(image, 5, -1), splash::Error);
}

TEST(Idefics3Pixels, MatchesPillowPipeline) {
  const auto m = manifest();
  ASSERT_GE(m.at("idefics3").size(), 3u);
  for (const auto& c : m.at("idefics3")) {
    SCOPED_TRACE(c.at("source").get<std::string>());
    const int size = c.at("size");
    const std::vector<float> out = splash::vision::idefics3_pixels(decode_file(c.at("source")), size, {});
    const Bytes raw = read_file(c.at("f32"));
    ASSERT_EQ(out.size(), size_t(3) * size * size);
    ASSERT_EQ(raw.size(), out.size() * sizeof(float));
    std::vector<float> expected(out.size());
    std::memcpy(expected.data(), raw.data(), raw.size());  // little-endian float32, as on x86-64 and arm64
    float worst = 0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - expected[i]));
    // The resized bytes are exact (see ImageLanczos), so only float rounding of the normalization
    // remains; one 8-bit step after normalization would be 2/255 = 0.0078.
    EXPECT_LE(worst, 1e-6f);
  }
}

std::vector<float> read_floats(const std::string& name) {
  const Bytes raw = read_file(name);
  std::vector<float> out(raw.size() / sizeof(float));
  std::memcpy(out.data(), raw.data(), out.size() * sizeof(float));  // little-endian float32, as on x86-64 and arm64
  return out;
}

TEST(Idefics3Views, MatchesTransformersSplitting) {
  const auto m = manifest();
  ASSERT_GE(m.at("idefics3_views").size(), 4u);
  for (const auto& c : m.at("idefics3_views")) {
    SCOPED_TRACE(c.at("rgb").get<std::string>());
    RgbImage image;
    image.width = c.at("width");
    image.height = c.at("height");
    image.pixels = read_file(c.at("rgb"));
    const int size = c.at("size");
    const auto out = splash::vision::idefics3_views(image, size, {});
    EXPECT_EQ(out.rows, c.at("rows").get<int>());
    EXPECT_EQ(out.cols, c.at("cols").get<int>());
    const std::vector<float> expected = read_floats(c.at("f32"));
    const size_t view = size_t(3) * size * size;
    ASSERT_EQ(out.views.size(), size_t(out.rows * out.cols + 1));
    ASSERT_EQ(expected.size(), out.views.size() * view);
    for (size_t v = 0; v < out.views.size(); ++v) {
      ASSERT_EQ(out.views[v].size(), view);
      // Bit-exact: three byte-exact Lanczos resizes, a crop, then the same float64 rescale and
      // float32 normalize as numpy (nothing to fuse or reorder).
      EXPECT_EQ(std::memcmp(out.views[v].data(), expected.data() + v * view, view * sizeof(float)), 0)
          << "view " << v << " (the last is the whole image)";
    }
  }
}

TEST(Idefics3Views, LayoutsMatchTransformersAtModelSizes) {
  const auto m = manifest();
  ASSERT_GE(m.at("idefics3_layouts").size(), 4u);
  for (const auto& c : m.at("idefics3_layouts")) {
    const int w = c.at("width"), h = c.at("height"), size = c.at("size");
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " at " + std::to_string(size));
    const auto layout = splash::vision::idefics3_layout(w, h, size);
    EXPECT_EQ(layout.rows, c.at("rows").get<int>());
    EXPECT_EQ(layout.cols, c.at("cols").get<int>());
  }
  // idefics3_views cuts what idefics3_layout says, at a real size (SmolVLM-Instruct's 384).
  RgbImage image;
  image.width = 1280;
  image.height = 800;
  image.pixels.assign(size_t(1280) * 800 * 3, 0);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t(i * 7 % 251);
  const auto views = splash::vision::idefics3_views(image, 384, {});
  EXPECT_EQ(views.rows, 3);
  EXPECT_EQ(views.cols, 4);
  ASSERT_EQ(views.views.size(), 13u);
  for (const auto& v : views.views) EXPECT_EQ(v.size(), size_t(3) * 384 * 384);
}

TEST(Idefics3Views, BadSizesThrow) {
  const RgbImage image = decode_file("rgb_37x23.png");
  EXPECT_THROW(splash::vision::idefics3_views(image, 0, {}), splash::Error);
  EXPECT_THROW(splash::vision::idefics3_layout(0, 10, 16), splash::Error);
}

TEST(Idefics3Pixels, NormalizationPerChannel) {
  RgbImage image;
  image.width = image.height = 1;
  image.pixels = {255, 0, 51};
  splash::vision::PixelNormalization norm;
  norm.mean = {0.0f, 0.5f, 0.1f};
  norm.std = {1.0f, 0.25f, 2.0f};
  const std::vector<float> out = splash::vision::idefics3_pixels(image, 2, norm);
  ASSERT_EQ(out.size(), 12u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(out[i], 1.0f, 1e-6f);       // R plane
    EXPECT_NEAR(out[4 + i], -2.0f, 1e-6f);  // G plane
    EXPECT_NEAR(out[8 + i], 0.05f, 1e-6f);  // B plane: (0.2 - 0.1) / 2
  }
}

}  // namespace
