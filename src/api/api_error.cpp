#include "api/api_error.h"

namespace splash::api {

nlohmann::json openai_error_body(const ApiError& error) {
  nlohmann::json body = {{"message", error.message}, {"type", error.type}, {"param", nullptr}, {"code", nullptr}};
  if (!error.param.empty()) body["param"] = error.param;
  if (!error.code.empty()) body["code"] = error.code;
  return {{"error", body}};
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace splash::api
