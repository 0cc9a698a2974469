#include "api/content_parts.h"

#include <fmt/format.h>

#include "api/json_fields.h"
#include "common/error.h"
#include "documents/document_text.h"

namespace splash::api {

std::string document_text(std::string_view media_type, std::string_view base64, std::string_view title,
                          const std::string& path) {
  try {
    const std::string bytes = documents::decode_base64(base64);
    if (media_type == "application/pdf") return documents::pdf_to_text(bytes, title);
    if (media_type.starts_with("text/")) return documents::text_document(bytes, title);
  } catch (const Error& e) {
    reject(fmt::format("'{}': {}", path, e.what()), path);
  }
  reject(fmt::format("'{}': documents of type '{}' are not supported (PDF and text are)", path, media_type), path);
}

std::string data_url_document_text(std::string_view url, std::string_view title, const std::string& path) {
  constexpr std::string_view kScheme = "data:";
  const size_t comma = url.find(',');
  if (!url.starts_with(kScheme) || comma == std::string_view::npos)
    reject(fmt::format("'{}' must be a base64 data URL (data:application/pdf;base64,...)", path), path);
  std::string_view header = url.substr(kScheme.size(), comma - kScheme.size());
  if (!header.ends_with(";base64")) reject(fmt::format("'{}' must be base64-encoded", path), path);
  header.remove_suffix(std::string_view(";base64").size());
  return document_text(header, url.substr(comma + 1), title, path);
}

std::string image_file_from_base64(std::string_view base64, const std::string& path) {
  try {
    std::string bytes = documents::decode_base64(base64);
    if (bytes.empty()) reject(fmt::format("'{}': the image is empty", path), path);
    return bytes;
  } catch (const Error& e) {
    reject(fmt::format("'{}': {}", path, e.what()), path);
  }
}

std::string image_file_from_url(std::string_view url, const std::string& path) {
  constexpr std::string_view kScheme = "data:";
  const size_t comma = url.find(',');
  if (!url.starts_with(kScheme) || comma == std::string_view::npos)
    reject(fmt::format("'{}' must be a base64 data URL (data:image/png;base64,...); the server does not fetch image URLs",
                       path),
           path);
  if (!url.substr(0, comma).ends_with(";base64")) reject(fmt::format("'{}' must be base64-encoded", path), path);
  return image_file_from_base64(url.substr(comma + 1), path);
}

}  // namespace splash::api
