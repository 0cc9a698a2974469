// libFuzzer target for image decoding (PNG, JPEG, WebP via the system decoders) and the
// preprocessing behind it: any byte string must decode or raise splash::Error, never crash,
// read out of bounds or hang (built with ASan+UBSan, see `make fuzz`; seeds: tests/golden/images).
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/error.h"
#include "vision/image_decode.h"
#include "vision/image_preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A small bound keeps each input fast under the sanitizers, and makes the fuzzer reach the
  // refusal of over-large headers often.
  constexpr int64_t kMaxPixels = 256 * 256;
  try {
    const auto image = splash::vision::decode_image(std::span<const uint8_t>(data, size), kMaxPixels);
    if (image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) __builtin_trap();
    // Odd shapes (1 x N, N x 1) through both resizes of the Idefics3 path.
    const auto pixels = splash::vision::idefics3_pixels(image, 8, {});
    if (pixels.size() != 3 * 8 * 8) __builtin_trap();
  } catch (const splash::Error&) {
  }
  return 0;
}
