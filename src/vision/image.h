#pragma once
// An image as the vision layer handles it: 8-bit RGB, row-major, no padding.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace splash::vision {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3 bytes: R, G, B per pixel, rows top to bottom

  const uint8_t* at(int x, int y) const { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
};

// How an image is shown to an encoder: rows x cols tiles (row-major), then the whole image
// as one more view; 0 x 0 when the image is a single view.
struct ImageLayout {
  int rows = 0;
  int cols = 0;
  int views() const { return rows * cols + 1; }
};

}  // namespace splash::vision
