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

// Idefics3 (SmolVLM) with image splitting (do_image_splitting, the models' default), as
// transformers' Idefics3ImageProcessor does it: the longest edge resized to 4 x `size` as above,
// then each side rounded up to a multiple of `size` (Lanczos again), cut into `size` x `size`
// tiles; the whole rounded-up image resized to one more `size` x `size` view. Every image is
// split (the longest edge is always 4 tiles, so 1..4 x 4 or 4 x 1..4 tiles): the unsplit case
// (rows == cols == 0, only the whole view) would need an image no larger than one tile there.
struct Idefics3Views {
  int rows = 0, cols = 0;
  std::vector<std::vector<float>> views;  // rows * cols tiles row-major, then the whole image; each [3][size][size]
};
Idefics3Views idefics3_views(const RgbImage& image, int size, const PixelNormalization& norm);

// The tiles idefics3_views cuts an image of this size into, from its size alone (for counting
// an image's tokens before decoding its pixels).
ImageLayout idefics3_layout(int width, int height, int size);

}  // namespace splash::vision
