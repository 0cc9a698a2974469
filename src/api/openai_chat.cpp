#include "api/openai_chat.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace splash::api {
namespace {

using nlohmann::json;

// Fields that cannot change what the model generates, accepted and not used.
const std::set<std::string, std::less<>> kInertFields = {"user", "metadata", "store", "service_tier",
                                                          "prompt_cache_key", "safety_identifier"};
// Fields of the OpenAI API that this server cannot honour yet: a 400 names them.
const std::set<std::string, std::less<>> kUnsupportedFields = {
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "audio", "prediction",
    "web_search_options", "reasoning_effort", "verbosity"};

struct Invalid {
  ApiError error;
};

[[noreturn]] void reject(std::string message, std::string param = {}) {
  throw Invalid{ApiError::bad_request(std::move(message), std::move(param))};
}

double number(const json& value, const char* name, double low, double high) {
  if (!value.is_number()) reject(fmt::format("'{}' must be a number", name), name);
  const double x = value.get<double>();
  if (!std::isfinite(x) || x < low || x > high) reject(fmt::format("'{}' must be between {} and {}", name, low, high), name);
  return x;
}

int64_t integer(const json& value, const char* name, int64_t low, int64_t high) {
  if (!value.is_number_integer()) reject(fmt::format("'{}' must be an integer", name), name);
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(high))
    reject(fmt::format("'{}' must be between {} and {}", name, low, high), name);
  const int64_t x = value.get<int64_t>();
  if (x < low || x > high) reject(fmt::format("'{}' must be between {} and {}", name, low, high), name);
  return x;
}

bool boolean(const json& value, const char* name) {
  if (!value.is_boolean()) reject(fmt::format("'{}' must be a boolean", name), name);
  return value.get<bool>();
}

std::string message_content(const json& content, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject(fmt::format("'{}' must be a string or an array of content parts", param), param);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      reject(fmt::format("each part of '{}' must be an object with a 'type'", param), param);
    const auto type = part["type"].get<std::string>();
    if (type != "text")
      reject(fmt::format("content parts of type '{}' are not supported by this model (text only)", type), param);
    if (!part.contains("text") || !part["text"].is_string())
      reject(fmt::format("text parts of '{}' need a string 'text'", param), param);
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<chat::ChatMessage> parse_messages(const json& messages) {
  if (!messages.is_array()) reject("'messages' must be an array", "messages");
  if (messages.empty()) reject("'messages' must contain at least one message", "messages");
  std::vector<chat::ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) reject(fmt::format("'{}' must be an object", param), param);
    if (!m.contains("role") || !m["role"].is_string()) reject(fmt::format("'{}.role' must be a string", param), param);
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for system instructions
    if (role == "tool" || role == "function")
      reject(fmt::format("'{}' has role '{}': tool calls are not supported yet", param, role), param + ".role");
    if (role != "system" && role != "user" && role != "assistant")
      reject(fmt::format("'{}.role' must be one of system, developer, user, assistant; got '{}'", param, role),
             param + ".role");
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content" || key == "name") continue;
      if (key == "tool_calls" || key == "function_call" || key == "tool_call_id")
        reject(fmt::format("'{}.{}': tool calls are not supported yet", param, key), param + "." + key);
      if (key == "refusal" || key == "audio" || key == "annotations") continue;  // assistant echo fields
      reject(fmt::format("unrecognized field '{}.{}'", param, key), param + "." + key);
    }
    if (!m.contains("content") && role != "assistant")
      reject(fmt::format("'{}.content' is required", param), param + ".content");
    out.push_back({role, message_content(m.contains("content") ? m["content"] : json(), i)});
  }
  return out;
}

std::vector<std::string> parse_stop(const json& stop) {
  if (stop.is_null()) return {};
  if (stop.is_string()) return {stop.get<std::string>()};
  if (!stop.is_array()) reject("'stop' must be a string or an array of strings", "stop");
  if (stop.size() > 16) reject("'stop' takes at most 16 strings", "stop");
  std::vector<std::string> out;
  for (const auto& s : stop) {
    if (!s.is_string()) reject("'stop' must be a string or an array of strings", "stop");
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

ChatCompletionRequest parse(std::string_view body, const ServedModel& served) {
  if (body.find('\0') != std::string_view::npos) reject("the request body contains a NUL byte");
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) reject("the request body is not valid JSON");
  if (!root.is_object()) reject("the request body must be a JSON object");

  ChatCompletionRequest out;
  auto& sampling = out.chat.sampling;
  // Local-server defaults (llama.cpp's): a small model needs some truncation to stay coherent.
  sampling = engine::SamplingParams{};
  bool max_tokens_given = false;
  for (const auto& [key, value] : root.items()) {
    if (value.is_null() && key != "messages") continue;  // null means "default" in the OpenAI API
    if (key == "messages") {
      out.chat.messages = parse_messages(value);
    } else if (key == "model") {
      if (!value.is_string()) reject("'model' must be a string", "model");
      if (value.get<std::string>() != served.id) {
        ApiError error{404, fmt::format("The model '{}' does not exist; this server serves '{}'",
                                        value.get<std::string>(), served.id),
                       "invalid_request_error", "model", "model_not_found"};
        throw Invalid{error};
      }
    } else if (key == "stream") {
      out.stream = boolean(value, "stream");
    } else if (key == "stream_options") {
      if (!value.is_object()) reject("'stream_options' must be an object", "stream_options");
      for (const auto& [option, v] : value.items()) {
        if (option == "include_usage") out.include_usage = boolean(v, "stream_options.include_usage");
        else if (option != "include_obfuscation") reject(fmt::format("unrecognized stream option '{}'", option), "stream_options");
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      out.chat.max_tokens = static_cast<int>(integer(value, key.c_str(), 1, std::numeric_limits<int32_t>::max()));
      max_tokens_given = true;
    } else if (key == "temperature") {
      sampling.temperature = static_cast<float>(number(value, "temperature", 0.0, 2.0));
    } else if (key == "top_p") {
      sampling.top_p = static_cast<float>(number(value, "top_p", 0.0, 1.0));
      if (sampling.top_p <= 0.0f) reject("'top_p' must be greater than 0", "top_p");
    } else if (key == "top_k") {
      sampling.top_k = static_cast<int>(integer(value, "top_k", 0, 1 << 20));
    } else if (key == "min_p") {
      sampling.min_p = static_cast<float>(number(value, "min_p", 0.0, 1.0));
    } else if (key == "repetition_penalty") {
      sampling.repetition_penalty = static_cast<float>(number(value, "repetition_penalty", 0.01, 10.0));
    } else if (key == "presence_penalty") {
      sampling.presence_penalty = static_cast<float>(number(value, "presence_penalty", -2.0, 2.0));
    } else if (key == "frequency_penalty") {
      sampling.frequency_penalty = static_cast<float>(number(value, "frequency_penalty", -2.0, 2.0));
    } else if (key == "seed") {
      // Any 64-bit integer, signed or unsigned: only its bits seed the generator.
      if (!value.is_number_integer()) reject("'seed' must be an integer", "seed");
      sampling.seed = value.is_number_unsigned() ? value.get<uint64_t>() : static_cast<uint64_t>(value.get<int64_t>());
    } else if (key == "stop") {
      out.chat.stop = parse_stop(value);
    } else if (key == "logit_bias") {
      if (!value.is_object()) reject("'logit_bias' must be an object of token id -> bias", "logit_bias");
      for (const auto& [id_text, bias] : value.items()) {
        size_t used = 0;
        int64_t id = -1;
        try {
          id = std::stoll(id_text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != id_text.size() || id < 0 || id >= served.vocab)
          reject(fmt::format("logit_bias key '{}' is not a token id of this model (0..{})", id_text, served.vocab - 1),
                 "logit_bias");
        sampling.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(number(bias, "logit_bias", -100.0, 100.0));
      }
    } else if (key == "logprobs") {
      out.logprobs = boolean(value, "logprobs");
    } else if (key == "top_logprobs") {
      out.chat.top_logprobs = static_cast<int>(integer(value, "top_logprobs", 0, 20));
    } else if (key == "n") {
      if (integer(value, "n", 1, 128) != 1) reject("'n' must be 1: one choice per request is supported", "n");
    } else if (key == "response_format") {
      if (!value.is_object() || !value.contains("type") || value["type"] != "text")
        reject("'response_format' other than text is not supported yet", "response_format");
    } else if (key == "modalities") {
      if (value != json::array({"text"})) reject("only the text modality is supported", "modalities");
    } else if (kUnsupportedFields.count(key)) {
      reject(fmt::format("'{}' is not supported yet", key), key);
    } else if (!kInertFields.count(key)) {
      reject(fmt::format("unrecognized request argument '{}'", key), key);
    }
  }
  if (out.chat.messages.empty()) reject("'messages' is required", "messages");
  if (out.chat.top_logprobs >= 0 && !out.logprobs) reject("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  if (out.logprobs && out.chat.top_logprobs < 0) out.chat.top_logprobs = 0;
  if (!out.logprobs) out.chat.top_logprobs = -1;
  if (out.include_usage && !out.stream) reject("'stream_options' is only allowed with 'stream': true", "stream_options");
  (void)max_tokens_given;
  return out;
}

std::string new_completion_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("chatcmpl-{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

json bytes_of(const std::string& token) {
  json bytes = json::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

std::variant<ChatCompletionRequest, ApiError> parse_chat_completion_request(std::string_view body,
                                                                            const ServedModel& served) {
  try {
    return parse(body, served);
  } catch (const Invalid& invalid) {
    return invalid.error;
  } catch (const json::exception& e) {  // e.g. a string that is not valid UTF-8
    return ApiError::bad_request(std::string("invalid request: ") + e.what());
  }
}

const char* openai_finish_reason(engine::FinishReason reason) {
  return reason == engine::FinishReason::Length ? "length" : "stop";
}

nlohmann::json usage_json(int prompt_tokens, int completion_tokens, int cached_prompt_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_prompt_tokens}}}};
}

ChatCompletionRenderer::ChatCompletionRenderer(std::string model_id, bool include_usage, bool logprobs)
    : id_(new_completion_id()),
      model_id_(std::move(model_id)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      include_usage_(include_usage),
      logprobs_(logprobs) {}

nlohmann::json ChatCompletionRenderer::chunk(nlohmann::json choices) const {
  return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_id_},
          {"system_fingerprint", "splash"}, {"choices", std::move(choices)}};
}

nlohmann::json ChatCompletionRenderer::logprobs_json(const std::vector<engine::TokenLogprob>& tokens) const {
  json content = json::array();
  for (const auto& t : tokens) {
    json top = json::array();
    for (const auto& [text, logprob] : t.top)
      top.push_back({{"token", text}, {"logprob", logprob}, {"bytes", bytes_of(text)}});
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

std::string ChatCompletionRenderer::stream_event(const engine::ChatEvent& event) {
  using Kind = engine::ChatEvent::Kind;
  auto sse = [](const json& value) { return "data: " + dump_json(value) + "\n\n"; };
  switch (event.kind) {
    case Kind::Started:
      prompt_tokens_ = event.prompt_tokens;
      return sse(chunk(json::array({{{"index", 0},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}})));
    case Kind::Text: {
      if (event.text.empty() && event.logprobs.empty()) return {};
      json choice = {{"index", 0}, {"delta", {{"content", event.text}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (logprobs_) choice["logprobs"] = logprobs_json(event.logprobs);
      return sse(chunk(json::array({choice})));
    }
    case Kind::Finished: {
      std::string out = sse(chunk(json::array(
          {{{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(event.finish)}}})));
      if (include_usage_) {
        json last = chunk(json::array());
        last["usage"] = usage_json(event.prompt_tokens, event.completion_tokens, event.cached_prompt_tokens);
        out += sse(last);
      }
      return out;
    }
    case Kind::Failed:
      return sse(openai_error_body(ApiError{500, event.error, "server_error", {}, {}}));
  }
  return {};
}

void ChatCompletionRenderer::collect(const engine::ChatEvent& event) {
  using Kind = engine::ChatEvent::Kind;
  if (event.kind == Kind::Text) {
    text_ += event.text;
    all_logprobs_.insert(all_logprobs_.end(), event.logprobs.begin(), event.logprobs.end());
  } else if (event.kind == Kind::Finished) {
    finish_ = event.finish;
    prompt_tokens_ = event.prompt_tokens;
    completion_tokens_ = event.completion_tokens;
    cached_prompt_tokens_ = event.cached_prompt_tokens;
  } else if (event.kind == Kind::Started) {
    prompt_tokens_ = event.prompt_tokens;
  }
}

nlohmann::json ChatCompletionRenderer::completion() const {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", text_}, {"refusal", nullptr}}},
                 {"logprobs", nullptr},
                 {"finish_reason", openai_finish_reason(finish_)}};
  if (logprobs_) choice["logprobs"] = logprobs_json(all_logprobs_);
  return {{"id", id_},
          {"object", "chat.completion"},
          {"created", created_},
          {"model", model_id_},
          {"system_fingerprint", "splash"},
          {"choices", json::array({choice})},
          {"usage", usage_json(prompt_tokens_, completion_tokens_, cached_prompt_tokens_)}};
}

}  // namespace splash::api
