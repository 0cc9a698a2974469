#include "api/api_error.h"

namespace splash::api {

std::string error_excerpt(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

nlohmann::json openai_error_body(const ApiError& error) {
  nlohmann::json body = {{"message", error_excerpt(error.message, kErrorMessageBytes)}, {"type", error.type},
                         {"param", nullptr}, {"code", nullptr}};
  if (!error.param.empty()) body["param"] = error_excerpt(error.param, kErrorParamBytes);
  if (!error.code.empty()) body["code"] = error.code;
  return {{"error", body}};
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace splash::api
