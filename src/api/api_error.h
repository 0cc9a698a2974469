#pragma once
// A request error as a value: HTTP status plus the fields every protocol's error body
// carries. Each protocol renders it in its own shape (OpenAI's below).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace splash::api {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending parameter, when there is one
  std::string code;

  static ApiError bad_request(std::string message, std::string param = {}) {
    return {400, std::move(message), "invalid_request_error", std::move(param), {}};
  }
};

// An error's text as sent: messages quote what the request held (a field name, a model
// name), so they are cut to `limit` bytes (at a UTF-8 boundary) with the full length noted —
// a 7 MB name never comes back as a 7 MB error.
std::string error_excerpt(std::string_view text, size_t limit);
inline constexpr size_t kErrorMessageBytes = 1024, kErrorParamBytes = 200;

// {"error": {"message", "type", "param", "code"}} as the OpenAI API writes it.
nlohmann::json openai_error_body(const ApiError& error);

// JSON text for output that may hold model-produced bytes: never throws on invalid UTF-8.
std::string dump_json(const nlohmann::json& value);

}  // namespace splash::api
