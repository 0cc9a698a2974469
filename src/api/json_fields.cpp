#include "api/json_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "common/json_depth.h"

namespace splash::api {

using nlohmann::json;

void reject(std::string message, std::string param) {
  throw InvalidRequest{ApiError::bad_request(std::move(message), std::move(param))};
}

double number_field(const json& value, const std::string& name, double low, double high) {
  if (!value.is_number()) reject(fmt::format("'{}' must be a number", name), name);
  const double x = value.get<double>();
  if (!std::isfinite(x) || x < low || x > high) reject(fmt::format("'{}' must be between {} and {}", name, low, high), name);
  return x;
}

int64_t integer_field(const json& value, const std::string& name, int64_t low, int64_t high) {
  if (!value.is_number_integer()) reject(fmt::format("'{}' must be an integer", name), name);
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(high))
    reject(fmt::format("'{}' must be between {} and {}", name, low, high), name);
  const int64_t x = value.get<int64_t>();
  if (x < low || x > high) reject(fmt::format("'{}' must be between {} and {}", name, low, high), name);
  return x;
}

bool boolean_field(const json& value, const std::string& name) {
  if (!value.is_boolean()) reject(fmt::format("'{}' must be a boolean", name), name);
  return value.get<bool>();
}

bool optional_boolean(const json& object, const std::string& key, const std::string& path) {
  if (!object.contains(key) || object[key].is_null()) return false;
  return boolean_field(object[key], path + "." + key);
}

const std::string& string_field(const json& value, const std::string& name) {
  if (!value.is_string()) reject(fmt::format("'{}' must be a string", name), name);
  return value.get_ref<const std::string&>();
}

std::vector<std::string> stop_strings(const json& stop, const std::string& name) {
  if (stop.is_null()) return {};
  if (stop.is_string()) return stop.get<std::string>().empty() ? std::vector<std::string>{} : std::vector{stop.get<std::string>()};
  if (!stop.is_array()) reject(fmt::format("'{}' must be a string or an array of strings", name), name);
  if (stop.size() > 16) reject(fmt::format("'{}' takes at most 16 strings", name), name);
  std::vector<std::string> out;
  for (const auto& s : stop) {
    if (!s.is_string()) reject(fmt::format("'{}' must be a string or an array of strings", name), name);
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

json parse_body_object(std::string_view body) {
  if (body.find('\0') != std::string_view::npos) reject("the request body contains a NUL byte");
  if (json_nesting_depth(body) > kMaxJsonDepth)
    reject(fmt::format("the request body nests arrays and objects deeper than {} levels", kMaxJsonDepth));
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) reject("the request body is not valid JSON");
  if (!root.is_object()) reject("the request body must be a JSON object");
  return root;
}

uint64_t seed_field(const json& value, const std::string& name) {
  if (!value.is_number_integer()) reject(fmt::format("'{}' must be an integer", name), name);
  return value.is_number_unsigned() ? value.get<uint64_t>() : static_cast<uint64_t>(value.get<int64_t>());
}

bool sampling_field(const std::string& key, const json& value, engine::SamplingParams& sampling) {
  if (key == "temperature") {
    sampling.temperature = static_cast<float>(number_field(value, key, 0.0, 2.0));
  } else if (key == "top_p") {
    sampling.top_p = static_cast<float>(number_field(value, key, 0.0, 1.0));
    if (sampling.top_p <= 0.0f) reject("'top_p' must be greater than 0", key);
  } else if (key == "top_k") {
    sampling.top_k = static_cast<int>(integer_field(value, key, 0, 1 << 20));
  } else if (key == "min_p") {
    sampling.min_p = static_cast<float>(number_field(value, key, 0.0, 1.0));
  } else if (key == "repetition_penalty") {
    sampling.repetition_penalty = static_cast<float>(number_field(value, key, 0.01, 10.0));
  } else if (key == "presence_penalty") {
    sampling.presence_penalty = static_cast<float>(number_field(value, key, -2.0, 2.0));
  } else if (key == "frequency_penalty") {
    sampling.frequency_penalty = static_cast<float>(number_field(value, key, -2.0, 2.0));
  } else if (key == "seed") {
    sampling.seed = seed_field(value, key);
  } else {
    return false;
  }
  return true;
}

engine::ReasoningSettings reasoning_effort_field(const nlohmann::json& value, const std::string& name) {
  struct Effort {
    std::string_view name;
    int budget;  // -1: no limit; 0: thinking off
  };
  static constexpr Effort kEfforts[] = {{"none", 0},     {"minimal", 512}, {"low", 1024}, {"medium", 4096},
                                        {"high", 16384}, {"xhigh", -1},    {"max", -1}};
  const std::string& effort = string_field(value, name);
  for (const Effort& e : kEfforts)
    if (effort == e.name) return {e.budget != 0, e.budget == 0 ? -1 : e.budget, true};
  reject(fmt::format("'{}' must be one of none, minimal, low, medium, high, xhigh, max; got '{}'", name, effort), name);
}

}  // namespace splash::api
