#pragma once
// Non-text content shared by the protocols: documents become text the model reads
// (documents/document_text.h); images are refused, since no supported model has a vision
// encoder. Problems throw InvalidRequest naming the field.
#include <string>
#include <string_view>

namespace splash::api {

// A base64 document of `media_type` (application/pdf, text/plain, ...) as prompt text.
std::string document_text(std::string_view media_type, std::string_view base64, std::string_view title,
                          const std::string& path);
// A "data:<media type>;base64,<data>" URL's document as prompt text.
std::string data_url_document_text(std::string_view url, std::string_view title, const std::string& path);

[[noreturn]] void reject_image(const std::string& path);

}  // namespace splash::api
