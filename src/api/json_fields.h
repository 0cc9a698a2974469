#pragma once
// Reading request fields with errors that name them: shared by every protocol's parser.
// A problem throws InvalidRequest, which each parser turns into its own error shape.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "engine/chat_request.h"
#include "engine/sampler.h"

namespace splash::api {

struct InvalidRequest {
  ApiError error;
};

[[noreturn]] void reject(std::string message, std::string param = {});

double number_field(const nlohmann::json& value, const std::string& name, double low, double high);
int64_t integer_field(const nlohmann::json& value, const std::string& name, int64_t low, int64_t high);
bool boolean_field(const nlohmann::json& value, const std::string& name);
// object[key] as a boolean; false when absent or null.
bool optional_boolean(const nlohmann::json& object, const std::string& key, const std::string& path);
const std::string& string_field(const nlohmann::json& value, const std::string& name);
// A string or an array of strings (empty ones dropped), at most 16.
std::vector<std::string> stop_strings(const nlohmann::json& value, const std::string& name);
// The request body as a JSON object (NUL bytes and other JSON refused).
nlohmann::json parse_body_object(std::string_view body);
// Any 64-bit integer seed, signed or unsigned.
uint64_t seed_field(const nlohmann::json& value, const std::string& name);

// The sampling fields the protocols share (temperature, top_p, top_k, min_p, penalties,
// seed); returns false when `key` is not one of them.
bool sampling_field(const std::string& key, const nlohmann::json& value, engine::SamplingParams& sampling);

// A reasoning effort (OpenAI's reasoning_effort, Responses' reasoning.effort) as a thinking
// budget: "none" switches thinking off; minimal, low, medium and high allow 512, 1,024, 4,096
// and 16,384 thinking tokens; xhigh and max set no limit.
engine::ReasoningSettings reasoning_effort_field(const nlohmann::json& value, const std::string& name);

}  // namespace splash::api
