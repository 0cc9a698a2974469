#pragma once
// A request error as a value: HTTP status plus the fields every protocol's error body
// carries. Each protocol renders it in its own shape (OpenAI's below).
#include <nlohmann/json.hpp>
#include <string>

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

// {"error": {"message", "type", "param", "code"}} as the OpenAI API writes it.
nlohmann::json openai_error_body(const ApiError& error);

// JSON text for output that may hold model-produced bytes: never throws on invalid UTF-8.
std::string dump_json(const nlohmann::json& value);

}  // namespace splash::api
