#pragma once
// Image files from requests (base64 in Anthropic image blocks, data URLs in OpenAI parts) to
// RGB pixels, with Debian's maintained decoders: libpng, libjpeg-turbo (TurboJPEG), libwebp.
// The header is read first, so an image over the pixel bound (--max-image-pixels) is refused
// before any pixel memory is allocated or any pixel data is decoded.
#include <cstdint>
#include <span>
#include <string>

#include "vision/image.h"

namespace splash::vision {

// 4096 x 4096: above any screenshot an agent sends, far below what would exhaust memory
// (48 MiB of RGB), and far above what the encoders read (a 512 x 512 square per image).
inline constexpr int64_t kDefaultMaxImagePixels = 4096LL * 4096LL;

enum class ImageFormat { Unknown, Png, Jpeg, Webp, Gif };

// The format from the file's signature bytes (not from a claimed media type).
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);
std::string image_format_name(ImageFormat format);  // "PNG", "JPEG", ...

// Decodes a PNG, JPEG or WebP file to RGB. Transparency is composited onto white (what the
// Hugging Face image processors do when they convert RGBA to RGB). Throws splash::Error, with
// a message fit for the client, on an unsupported or corrupt file, a zero-sized image, or an
// image of more than max_pixels pixels (the message names the size and the bound).
RgbImage decode_image(std::span<const uint8_t> bytes, int64_t max_pixels);

// The size from the header alone (no pixel is decoded), with the same checks and errors as
// decode_image up to the pixel bound: what counting an image's tokens needs.
struct ImageSize {
  int width = 0;
  int height = 0;
};
ImageSize read_image_size(std::span<const uint8_t> bytes, int64_t max_pixels);

}  // namespace splash::vision
