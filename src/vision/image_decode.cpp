#include "vision/image_decode.h"

#include <png.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include <cstring>
#include <string_view>

#include "common/error.h"

namespace splash::vision {
namespace {

bool starts_with(std::span<const uint8_t> bytes, std::string_view prefix, size_t at = 0) {
  return bytes.size() >= at + prefix.size() && std::memcmp(bytes.data() + at, prefix.data(), prefix.size()) == 0;
}

// Runs before any pixel buffer exists, so a tiny file that claims a huge image costs nothing.
// Both sides are at most 2^32 - 1 in every format read here, so the product fits in 64 bits.
void check_size(uint64_t width, uint64_t height, int64_t max_pixels) {
  if (width == 0 || height == 0) fail("image is {}x{}: an image with no pixels cannot be read", width, height);
  const uint64_t pixels = width * height;
  if (max_pixels < 0 || pixels > static_cast<uint64_t>(max_pixels)) {
    fail("image is {}x{} ({} pixels), more than the server's limit of {} pixels (--max-image-pixels)", width,
         height, pixels, max_pixels);
  }
}

RgbImage make_image(uint64_t width, uint64_t height, size_t channels, std::vector<uint8_t>& buffer) {
  RgbImage image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  buffer.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * channels);
  return image;
}

// RGBA -> RGB in place over white, as transformers' convert_to_rgb does (PIL's alpha_composite
// onto an opaque white background, which for an opaque destination is round((a*c + (255-a)*255)/255)).
void composite_onto_white(std::vector<uint8_t>& rgba, size_t pixel_count) {
  uint8_t* data = rgba.data();
  for (size_t i = 0; i < pixel_count; ++i) {
    const uint32_t a = data[i * 4 + 3];
    for (size_t c = 0; c < 3; ++c) {
      const uint32_t blended = data[i * 4 + c] * a + 255u * (255u - a);
      data[i * 3 + c] = static_cast<uint8_t>((blended + 127u) / 255u);
    }
  }
  rgba.resize(pixel_count * 3);
}

// --- PNG: libpng's simplified API (it handles palettes, gray, 16-bit and tRNS for us) ---

struct PngImageGuard {
  png_image image;
  PngImageGuard() {
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
  }
  ~PngImageGuard() { png_image_free(&image); }  // safe after libpng freed it itself on an error
  PngImageGuard(const PngImageGuard&) = delete;
  PngImageGuard& operator=(const PngImageGuard&) = delete;
};

RgbImage decode_png(std::span<const uint8_t> bytes, int64_t max_pixels, bool header_only) {
  PngImageGuard guard;
  png_image& png = guard.image;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    fail("image data is not a valid PNG file: {}", png.message);
  }
  check_size(png.width, png.height, max_pixels);
  if (header_only) return RgbImage{static_cast<int>(png.width), static_cast<int>(png.height), {}};
  const bool alpha = (png.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  png.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  std::vector<uint8_t> pixels;
  RgbImage image = make_image(png.width, png.height, alpha ? 4 : 3, pixels);
  // A null background: the alpha channel is kept and composited below in 8-bit sRGB values, as PIL
  // does (libpng would composite in linear light).
  if (!png_image_finish_read(&png, nullptr, pixels.data(), 0, nullptr)) {
    fail("image data is not a valid PNG file: {}", png.message);
  }
  if (alpha) composite_onto_white(pixels, static_cast<size_t>(png.width) * png.height);
  image.pixels = std::move(pixels);
  return image;
}

// --- JPEG: TurboJPEG (libjpeg-turbo 2.1) ---

struct TurboJpegHandle {
  tjhandle handle = tjInitDecompress();
  ~TurboJpegHandle() {
    if (handle) tjDestroy(handle);
  }
  TurboJpegHandle() = default;
  TurboJpegHandle(const TurboJpegHandle&) = delete;
  TurboJpegHandle& operator=(const TurboJpegHandle&) = delete;
};

RgbImage decode_jpeg(std::span<const uint8_t> bytes, int64_t max_pixels, bool header_only) {
  TurboJpegHandle tj;
  if (!tj.handle) fail("the JPEG decoder could not be started: {}", tjGetErrorStr2(nullptr));
  // TurboJPEG takes a non-const buffer and an unsigned long size in the 2.1 API; it only reads.
  auto* data = const_cast<unsigned char*>(bytes.data());
  const unsigned long size = bytes.size();
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.handle, data, size, &width, &height, &subsampling, &colorspace) != 0) {
    fail("image data is not a valid JPEG file: {}", tjGetErrorStr2(tj.handle));
  }
  // libjpeg-turbo 2.1 has no CMYK/YCCK -> RGB conversion ("Unsupported color conversion request").
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    fail("CMYK JPEG images are not supported; send the image as an RGB or grayscale JPEG, or as PNG");
  }
  check_size(static_cast<uint64_t>(width), static_cast<uint64_t>(height), max_pixels);
  if (header_only) return RgbImage{static_cast<int>(width), static_cast<int>(height), {}};
  std::vector<uint8_t> pixels;
  RgbImage image = make_image(width, height, 3, pixels);
  // LIMITSCANS: a progressive file with thousands of tiny scans would otherwise take minutes.
  // Default (accurate) DCT and fancy upsampling: what PIL's libjpeg decode uses.
  if (tjDecompress2(tj.handle, data, size, pixels.data(), width, 0, height, TJPF_RGB, TJFLAG_LIMITSCANS) != 0) {
    const std::string message = tjGetErrorStr2(tj.handle);
    // Warnings (e.g. extraneous bytes between markers) still give a whole image, and PIL accepts
    // them; a file cut short is only a warning to libjpeg (the rest filled with gray), but PIL
    // refuses it ("image file is truncated") and so do we.
    const bool warning = tjGetErrorCode(tj.handle) == TJERR_WARNING;
    if (!warning || message.find("Premature end") != std::string::npos) {
      fail("image data is not a valid JPEG file: {}", message);
    }
  }
  image.pixels = std::move(pixels);
  return image;
}

// --- WebP: libwebp ---

const char* webp_status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "decoding suspended";
    case VP8_STATUS_USER_ABORT: return "decoding aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "the file is truncated";
    default: return "unknown error";
  }
}

RgbImage decode_webp(std::span<const uint8_t> bytes, int64_t max_pixels, bool header_only) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) fail("the WebP decoder could not be started (library version mismatch)");
  const VP8StatusCode header = WebPGetFeatures(bytes.data(), bytes.size(), &config.input);
  if (header != VP8_STATUS_OK) fail("image data is not a valid WebP file: {}", webp_status_text(header));
  if (config.input.has_animation) fail("animated WebP images are not supported; send a single still image");
  check_size(static_cast<uint64_t>(config.input.width), static_cast<uint64_t>(config.input.height), max_pixels);
  if (header_only) return RgbImage{static_cast<int>(config.input.width), static_cast<int>(config.input.height), {}};
  const bool alpha = config.input.has_alpha != 0;
  std::vector<uint8_t> pixels;
  RgbImage image = make_image(config.input.width, config.input.height, alpha ? 4 : 3, pixels);
  // Decode straight into our buffer (external memory): nothing for libwebp to free afterwards.
  config.output.colorspace = alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pixels.data();
  config.output.u.RGBA.stride = config.input.width * (alpha ? 4 : 3);
  config.output.u.RGBA.size = pixels.size();
  const VP8StatusCode status = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);  // a no-op for external memory, kept for symmetry with the docs
  if (status != VP8_STATUS_OK) fail("image data is not a valid WebP file: {}", webp_status_text(status));
  if (alpha) composite_onto_white(pixels, static_cast<size_t>(image.width) * image.height);
  image.pixels = std::move(pixels);
  return image;
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return ImageFormat::Png;
  if (starts_with(bytes, "\xFF\xD8\xFF")) return ImageFormat::Jpeg;
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return ImageFormat::Webp;
  if (starts_with(bytes, "GIF87a") || starts_with(bytes, "GIF89a")) return ImageFormat::Gif;
  return ImageFormat::Unknown;
}

std::string image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Webp: return "WebP";
    case ImageFormat::Gif: return "GIF";
    case ImageFormat::Unknown: break;
  }
  return "unknown";
}

namespace {

RgbImage decode(std::span<const uint8_t> bytes, int64_t max_pixels, bool header_only) {
  switch (sniff_image_format(bytes)) {
    case ImageFormat::Png: return decode_png(bytes, max_pixels, header_only);
    case ImageFormat::Jpeg: return decode_jpeg(bytes, max_pixels, header_only);
    case ImageFormat::Webp: return decode_webp(bytes, max_pixels, header_only);
    case ImageFormat::Gif: fail("GIF images are not supported; send the image as PNG, JPEG or WebP");
    case ImageFormat::Unknown: break;
  }
  fail("the image format is not recognized; send the image as PNG, JPEG or WebP");
}

}  // namespace

RgbImage decode_image(std::span<const uint8_t> bytes, int64_t max_pixels) { return decode(bytes, max_pixels, false); }

ImageSize read_image_size(std::span<const uint8_t> bytes, int64_t max_pixels) {
  const RgbImage header = decode(bytes, max_pixels, true);
  return {header.width, header.height};
}

}  // namespace splash::vision
