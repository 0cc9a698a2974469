#pragma once
// Non-text content shared by the protocols: documents become text the model reads
// (documents/document_text.h); images become their files' bytes, which the engine decodes
// and encodes when the model has a vision encoder (and refuses otherwise). Problems throw
// InvalidRequest naming the field.
#include <string>
#include <string_view>

namespace splash::api {

// A base64 document of `media_type` (application/pdf, text/plain, ...) as prompt text.
std::string document_text(std::string_view media_type, std::string_view base64, std::string_view title,
                          const std::string& path);
// A "data:<media type>;base64,<data>" URL's document as prompt text.
std::string data_url_document_text(std::string_view url, std::string_view title, const std::string& path);

// An image part's file (PNG, JPEG or WebP: the format is checked when it is decoded), from
// base64 data or from a "data:image/...;base64," URL. Remote URLs are refused: the server
// never fetches anything a request names.
std::string image_file_from_base64(std::string_view base64, const std::string& path);
std::string image_file_from_url(std::string_view url, const std::string& path);

}  // namespace splash::api
