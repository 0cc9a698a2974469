#pragma once
// Images to the pixel tensor a vision encoder reads, the way the model's Hugging Face image
// processor prepares them (so an encoder sees what it was trained on).
#include <array>
#include <vector>

#include "vision/image.h"

namespace splash::vision {

// Lanczos resampling (a = 3) as PIL's Image.resize(..., LANCZOS) computes it: separable,
// horizontal pass first (vertical first when the height shrinks much more, as Pillow 13 does),
// the kernel widened by the scale factor when shrinking (antialiasing), each pass rounded and
// clamped to 8 bits. Byte-exact with the Pillow pinned in requirements-test.txt.
RgbImage resize_lanczos(const RgbImage& image, int width, int height);

struct PixelNormalization {
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
};

// Idefics3 (SmolVLM) without image splitting: the longest edge resized to 4 x `size` (the
// aspect ratio kept), then the whole image to a `size` x `size` square, both with Lanczos;
// then (v / 255 - mean) / std per channel. Returns [3][size][size] floats (channel planes).
std::vector<float> idefics3_pixels(const RgbImage& image, int size, const PixelNormalization& norm);

}  // namespace splash::vision
