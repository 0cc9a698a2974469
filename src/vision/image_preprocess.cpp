#include "vision/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>

#include "common/error.h"

namespace splash::vision {
namespace {

// PIL's 8-bit resampler works in fixed point: weights scaled by 2^22 and rounded away from zero,
// sums started at one half, shifted back and clamped. Doing the same (rather than in floating
// point) gives PIL's exact bytes, not just bytes within one.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr double kLanczosSupport = 3.0;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= std::numbers::pi;
  return std::sin(x) / x;
}

// Half-open on the right, as PIL's filter is.
double lanczos(double x) { return (x >= -kLanczosSupport && x < kLanczosSupport) ? sinc(x) * sinc(x / 3.0) : 0.0; }

// For each output position along one axis: the first input index and the fixed-point weights of
// the window that starts there.
struct AxisWeights {
  int window = 0;                // weights per output position (the widest window)
  std::vector<int> first;        // first input index per output position
  std::vector<int> count;        // input pixels actually used per output position
  std::vector<int32_t> weights;  // out_size * window
};

AxisWeights axis_weights(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widen the kernel when shrinking (antialiasing)
  const double support = kLanczosSupport * filter_scale;
  AxisWeights axis;
  axis.window = static_cast<int>(std::ceil(support)) * 2 + 1;
  axis.first.resize(out_size);
  axis.count.resize(out_size);
  axis.weights.assign(static_cast<size_t>(out_size) * axis.window, 0);
  std::vector<double> w(axis.window);
  const double inverse_scale = 1.0 / filter_scale;  // multiplied, not divided: PIL's exact doubles
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // Truncation toward zero, then clamping: PIL's (int) casts.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::min(hi - lo, axis.window);
    double total = 0.0;
    for (int k = 0; k < n; ++k) {
      w[k] = lanczos((k + lo - center + 0.5) * inverse_scale);
      total += w[k];
    }
    for (int k = 0; k < n; ++k) {
      const double v = (total != 0.0 ? w[k] / total : 0.0) * (1 << kPrecisionBits);
      axis.weights[static_cast<size_t>(i) * axis.window + k] = static_cast<int32_t>(v < 0 ? v - 0.5 : v + 0.5);
    }
    axis.first[i] = lo;
    axis.count[i] = std::max(n, 0);
  }
  return axis;
}

uint8_t clip8(int64_t sum) {
  const int64_t v = sum >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

RgbImage resize_horizontal(const RgbImage& in, int width) {
  const AxisWeights axis = axis_weights(in.width, width);
  RgbImage out;
  out.width = width;
  out.height = in.height;
  out.pixels.resize(static_cast<size_t>(width) * in.height * 3);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* row = in.at(0, y);
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      const int32_t* k = axis.weights.data() + static_cast<size_t>(x) * axis.window;
      for (int c = 0; c < 3; ++c) {
        int64_t sum = int64_t{1} << (kPrecisionBits - 1);
        for (int j = 0; j < axis.count[x]; ++j) sum += int64_t{row[(axis.first[x] + j) * 3 + c]} * k[j];
        dst[x * 3 + c] = clip8(sum);
      }
    }
  }
  return out;
}

RgbImage resize_vertical(const RgbImage& in, int height) {
  const AxisWeights axis = axis_weights(in.height, height);
  RgbImage out;
  out.width = in.width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(in.width) * height * 3);
  const size_t stride = static_cast<size_t>(in.width) * 3;
  for (int y = 0; y < height; ++y) {
    const int32_t* k = axis.weights.data() + static_cast<size_t>(y) * axis.window;
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * stride;
    for (size_t i = 0; i < stride; ++i) {
      int64_t sum = int64_t{1} << (kPrecisionBits - 1);
      for (int j = 0; j < axis.count[y]; ++j) sum += int64_t{in.pixels[(axis.first[y] + j) * stride + i]} * k[j];
      dst[i] = clip8(sum);
    }
  }
  return out;
}

// transformers' _resize_output_size_rescale_to_max_len followed by
// _resize_output_size_scale_below_upper_bound (Idefics3ImageProcessor and its PIL backend): the
// longest edge becomes `longest`; the other is truncated (Python int()), not rounded, from a float
// aspect ratio, then bumped to the next even number if odd; then both are kept under 4096.
std::pair<int, int> idefics3_longest_edge_size(int width, int height, int longest) {
  constexpr int kMaxImageSize = 4096;  // transformers' MAX_IMAGE_SIZE for Idefics3
  double aspect = static_cast<double>(width) / height;
  int w = width, h = height;
  if (w >= h) {
    w = longest;
    h = static_cast<int>(w / aspect);
    if (h % 2 != 0) ++h;
  } else {
    h = longest;
    w = static_cast<int>(h * aspect);
    if (w % 2 != 0) ++w;
  }
  w = std::max(w, 1);
  h = std::max(h, 1);
  aspect = static_cast<double>(w) / h;
  if (w >= h && w > kMaxImageSize) {
    w = kMaxImageSize;
    h = static_cast<int>(w / aspect);
  } else if (h > w && h > kMaxImageSize) {
    h = kMaxImageSize;
    w = static_cast<int>(h * aspect);
  }
  return {std::max(w, 1), std::max(h, 1)};
}

// transformers' Idefics3ImageProcessor.resize_for_vision_encoder: the longest side rounded up
// to a multiple of `size` (math.ceil), the other recomputed from the float aspect ratio and the
// NEW longest side, truncated (int()), then rounded up too. get_number_of_image_patches rounds
// each side up on its own instead; the two agree for even sizes (all of 1..400 squared checked
// at 364, 384, 512) but not for some odd ones (truncation can lose a tile), and this is what runs.
std::pair<int, int> idefics3_tiled_size(int width, int height, int size) {
  // ceil(v / size) * size; exact in integers where Python divides floats (sides are < 2^31).
  const auto round_up = [size](int v) { return static_cast<int>((int64_t{v} + size - 1) / size * size); };
  const double aspect = static_cast<double>(width) / height;
  if (width >= height) {
    width = round_up(width);
    height = round_up(static_cast<int>(width / aspect));
  } else {
    height = round_up(height);
    width = round_up(static_cast<int>(height * aspect));
  }
  return {width, height};
}

// Both steps before the split: the longest edge to 4 x size, then the tile-multiple size.
struct TiledSize {
  int resized_width, resized_height;  // after the longest-edge resize
  int width, height;                  // after resize_for_vision_encoder
};

TiledSize idefics3_tiled(int width, int height, int size) {
  if (size <= 0) fail("invalid vision encoder image size {}", size);
  if (width <= 0 || height <= 0) fail("invalid image size {}x{}", width, height);
  const auto [w, h] = idefics3_longest_edge_size(width, height, 4 * size);
  const auto [tw, th] = idefics3_tiled_size(w, h, size);
  return {w, h, tw, th};
}

// The size x size square at (x0, y0) of `image` as [3][size][size] floats, rescaled and
// normalized the way transformers does it after the resizes (rescale, then normalize).
std::vector<float> normalized_square(const RgbImage& image, int x0, int y0, int size, const PixelNormalization& norm) {
  const size_t plane = static_cast<size_t>(size) * size;
  std::vector<float> out(3 * plane);
  for (int y = 0; y < size; ++y) {
    const uint8_t* row = image.at(x0, y0 + y);
    for (int x = 0; x < size; ++x) {
      const size_t i = static_cast<size_t>(y) * size + x;
      for (size_t c = 0; c < 3; ++c) {
        // transformers rescales in float64 and casts to float32, then normalizes in float32.
        const float v = static_cast<float>(row[x * 3 + c] * (1.0 / 255.0));
        out[c * plane + i] = (v - norm.mean[c]) / norm.std[c];
      }
    }
  }
  return out;
}

}  // namespace

RgbImage resize_lanczos(const RgbImage& image, int width, int height) {
  if (width <= 0 || height <= 0 || image.width <= 0 || image.height <= 0) {
    fail("cannot resize a {}x{} image to {}x{}", image.width, image.height, width, height);
  }
  // PIL skips a pass whose size does not change (and returns a copy when neither does). Each pass
  // rounds to 8 bits, so the order matters (up to 2 per channel): Pillow 13.0 runs the vertical
  // pass first when the height shrinks by more than twice what the width does, the horizontal
  // first otherwise (Pillow <= 12.3 always ran it first). We follow the pinned Pillow
  // (requirements-test.txt), against which tests/golden/images was made.
  const bool need_horizontal = width != image.width;
  const bool need_vertical = height != image.height;
  const int64_t shrink_x = int64_t{image.width} - width;
  const int64_t shrink_y = int64_t{image.height} - height;
  const bool vertical_first = shrink_y > 0 && shrink_y > shrink_x * 2;
  if (vertical_first) {
    RgbImage out = resize_vertical(image, height);
    return need_horizontal ? resize_horizontal(out, width) : out;
  }
  RgbImage out = need_horizontal ? resize_horizontal(image, width) : image;
  return need_vertical ? resize_vertical(out, height) : out;
}

std::vector<float> idefics3_pixels(const RgbImage& image, int size, const PixelNormalization& norm) {
  if (size <= 0) fail("invalid vision encoder image size {}", size);
  const auto [w, h] = idefics3_longest_edge_size(image.width, image.height, 4 * size);
  const RgbImage square = resize_lanczos(resize_lanczos(image, w, h), size, size);
  return normalized_square(square, 0, 0, size, norm);
}

ImageLayout idefics3_layout(int width, int height, int size) {
  const TiledSize t = idefics3_tiled(width, height, size);
  // split_images: tiles only when the image is larger than one tile; the sides are multiples
  // of size, so (side - size) // size + 1 there is side / size.
  if (t.width <= size && t.height <= size) return {};
  return {t.height / size, t.width / size};
}

Idefics3Views idefics3_views(const RgbImage& image, int size, const PixelNormalization& norm) {
  // _preprocess with do_resize and do_image_splitting: resize (longest edge), then
  // resize_for_vision_encoder, then split_images, then rescale and normalize every frame. Each
  // resize is PIL's LANCZOS on 8-bit pixels (the PIL backend keeps uint8 until the rescale).
  const TiledSize t = idefics3_tiled(image.width, image.height, size);
  const RgbImage tiled = resize_lanczos(resize_lanczos(image, t.resized_width, t.resized_height), t.width, t.height);
  const ImageLayout layout = idefics3_layout(image.width, image.height, size);
  Idefics3Views out;
  out.rows = layout.rows;
  out.cols = layout.cols;
  if (layout.rows == 0) {
    // Not split: the one frame is the image itself, already size x size (a multiple of size
    // and no larger), not resized again.
    out.views.push_back(normalized_square(tiled, 0, 0, size, norm));
    return out;
  }
  out.views.reserve(static_cast<size_t>(layout.views()));
  for (int r = 0; r < layout.rows; ++r)  // split_images: crops row by row, left to right
    for (int c = 0; c < layout.cols; ++c) out.views.push_back(normalized_square(tiled, c * size, r * size, size, norm));
  // The global view comes last, resized from the rounded-up image (not from the original nor
  // from the longest-edge one). With one image there is no padding: every frame is size x size.
  out.views.push_back(normalized_square(resize_lanczos(tiled, size, size), 0, 0, size, norm));
  return out;
}

}  // namespace splash::vision
