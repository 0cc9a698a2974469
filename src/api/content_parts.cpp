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

void reject_image(const std::string& path) {
  reject(fmt::format("'{}': this model has no vision encoder, so it cannot read images; send text instead", path), path);
}

}  // namespace splash::api
