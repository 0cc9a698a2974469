#include "api/openai_chat.h"

#include "api/content_parts.h"
#include "api/json_fields.h"
#include "api/tool_fields.h"

#include <fmt/format.h>

#include <algorithm>
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
                                                          "prompt_cache_key", "safety_identifier", "verbosity",
                                                          "prompt_cache_retention"};
// Fields of the OpenAI API that this server cannot honour: a 400 names them.
const std::set<std::string, std::less<>> kUnsupportedFields = {"functions", "function_call", "audio", "prediction",
                                                                "web_search_options"};

std::string message_content(const json& content, const std::string& param, std::vector<chat::MessageImage>& images) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject(fmt::format("'{}' must be a string or an array of content parts", param), param);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    const std::string part_path = fmt::format("{}[{}]", param, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      reject(fmt::format("each part of '{}' must be an object with a 'type'", param), param);
    const auto type = part["type"].get<std::string>();
    if (type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        reject(fmt::format("text parts of '{}' need a string 'text'", param), param);
      text += part["text"].get<std::string>();
    } else if (type == "image_url" || type == "input_image") {
      // {"type": "image_url", "image_url": {"url": ..., "detail": ...}} or a bare URL string.
      const json& image = part.contains("image_url") ? part["image_url"] : json();
      const json& url = image.is_object() ? image.value("url", json()) : image;
      images.push_back({image_file_from_url(string_field(url, part_path + ".image_url.url"), part_path + ".image_url.url"),
                        text.size()});
    } else if (type == "file") {
      const json& file = part.contains("file") ? part["file"] : json();
      if (!file.is_object() || !file.contains("file_data"))
        reject(fmt::format("'{}.file' needs 'file_data' (a base64 data URL); uploaded file ids are not supported", part_path),
               part_path);
      const std::string title = file.contains("filename") ? string_field(file["filename"], part_path + ".file.filename") : "";
      if (!text.empty() && !text.ends_with('\n')) text += '\n';
      text += data_url_document_text(string_field(file["file_data"], part_path + ".file.file_data"), title,
                                     part_path + ".file.file_data");
      text += '\n';
    } else if (type == "refusal") {
      if (part.contains("refusal") && part["refusal"].is_string()) text += part["refusal"].get<std::string>();
    } else {
      reject(fmt::format("content parts of type '{}' are not supported (text, image_url and file are)", type), param);
    }
  }
  return text;
}

std::vector<chat::ToolCall> assistant_tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) reject(fmt::format("'{}' must be an array", param), param);
  std::vector<chat::ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& call = calls[i];
    const std::string path = fmt::format("{}[{}]", param, i);
    if (!call.is_object()) reject(fmt::format("'{}' must be an object", path), path);
    chat::ToolCall parsed;
    if (call.contains("id")) parsed.id = string_field(call["id"], path + ".id");
    const std::string type = call.contains("type") ? string_field(call["type"], path + ".type") : "function";
    if (type == "function") {
      if (!call.contains("function") || !call["function"].is_object())
        reject(fmt::format("'{}.function' must be an object", path), path + ".function");
      const auto& f = call["function"];
      parsed.name = string_field(f.value("name", json()), path + ".function.name");
      parsed.arguments = f.contains("arguments") ? string_field(f["arguments"], path + ".function.arguments") : "{}";
    } else if (type == "custom") {
      if (!call.contains("custom") || !call["custom"].is_object())
        reject(fmt::format("'{}.custom' must be an object", path), path + ".custom");
      const auto& c = call["custom"];
      parsed.name = string_field(c.value("name", json()), path + ".custom.name");
      parsed.arguments = c.contains("input") ? string_field(c["input"], path + ".custom.input") : "";
      parsed.custom = true;
    } else {
      reject(fmt::format("'{}.type' must be 'function' or 'custom'", path), path + ".type");
    }
    out.push_back(std::move(parsed));
  }
  return out;
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
    if (role == "function")
      reject(fmt::format("'{}' has the deprecated role 'function': use 'tool' messages", param), param + ".role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      reject(fmt::format("'{}.role' must be one of system, developer, user, assistant, tool; got '{}'", param, role),
             param + ".role");
    chat::ChatMessage message{role, {}};
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content" || key == "name") continue;
      if (key == "tool_calls" && role == "assistant") {
        if (!value.is_null()) message.tool_calls = assistant_tool_calls(value, param + ".tool_calls");
        continue;
      }
      if (key == "tool_call_id" && role == "tool") {
        message.tool_call_id = string_field(value, param + ".tool_call_id");
        continue;
      }
      if ((key == "reasoning_content" || key == "reasoning") && role == "assistant") {
        // A thinking model's reasoning, sent back (vLLM's and llama.cpp's names): the template
        // keeps it where the model expects it (after the last user query).
        if (!value.is_null()) message.reasoning = string_field(value, param + "." + key);
        continue;
      }
      if (key == "refusal" || key == "audio" || key == "annotations") continue;  // assistant echo fields
      if (key == "function_call")
        reject(fmt::format("'{}.function_call' is deprecated: use 'tool_calls'", param), param + "." + key);
      reject(fmt::format("unrecognized field '{}.{}'", param, key), param + "." + key);
    }
    if (!m.contains("content") && role != "assistant")
      reject(fmt::format("'{}.content' is required", param), param + ".content");
    if (role == "tool" && message.tool_call_id.empty())
      reject(fmt::format("'{}.tool_call_id' is required for tool messages", param), param + ".tool_call_id");
    message.content = message_content(m.contains("content") ? m["content"] : json(), param + ".content", message.images);
    out.push_back(std::move(message));
  }
  return out;
}

std::vector<chat::ToolSpec> parse_tools(const json& tools) {
  if (!tools.is_array()) reject("'tools' must be an array", "tools");
  std::vector<chat::ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    const std::string path = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("type")) reject(fmt::format("'{}' must be an object with a 'type'", path), path);
    const std::string& type = string_field(t["type"], path + ".type");
    if (type == "function") {
      if (!t.contains("function") || !t["function"].is_object())
        reject(fmt::format("'{}.function' must be an object", path), path + ".function");
      const auto& f = t["function"];
      const bool strict = optional_boolean(f, "strict", path + ".function");
      out.push_back(function_tool(f.value("name", json()), f.value("description", json()), f.value("parameters", json()),
                                  strict, path + ".function"));
    } else if (type == "custom") {
      if (!t.contains("custom") || !t["custom"].is_object())
        reject(fmt::format("'{}.custom' must be an object", path), path + ".custom");
      const auto& c = t["custom"];
      out.push_back(custom_tool(c.value("name", json()), c.value("description", json()), c.value("format", json()),
                                path + ".custom"));
    } else {
      reject(fmt::format("'{}.type' must be 'function' or 'custom'; got '{}'", path, type), path + ".type");
    }
  }
  check_unique_tool_names(out, "tools");
  return out;
}

void parse_tool_choice(const json& value, engine::ChatRequest& chat) {
  if (openai_tool_choice_string(value, chat)) return;
  if (!value.is_object() || !value.contains("type")) reject("'tool_choice' must be a string or an object with a 'type'", "tool_choice");
  const std::string& type = string_field(value["type"], "tool_choice.type");
  if (type != "function" && type != "custom") reject("'tool_choice.type' must be 'function' or 'custom'", "tool_choice.type");
  if (!value.contains(type) || !value[type].is_object()) reject(fmt::format("'tool_choice.{}' must be an object", type), "tool_choice");
  chat.tool_choice = engine::ToolChoice::Named;
  chat.tool_choice_name = string_field(value[type].value("name", json()), fmt::format("tool_choice.{}.name", type));
}

engine::OutputFormat parse_response_format(const json& value) {
  if (!value.is_object() || !value.contains("type")) reject("'response_format' must be an object with a 'type'", "response_format");
  const std::string& type = string_field(value["type"], "response_format.type");
  engine::OutputFormat format;
  if (type == "text") return format;
  if (type == "json_object") {
    format.kind = engine::OutputFormat::Kind::JsonObject;
    return format;
  }
  if (type != "json_schema")
    reject("'response_format.type' must be 'text', 'json_object' or 'json_schema'", "response_format.type");
  if (!value.contains("json_schema") || !value["json_schema"].is_object())
    reject("'response_format.json_schema' must be an object", "response_format.json_schema");
  const auto& spec = value["json_schema"];
  if (!spec.contains("schema")) return engine::OutputFormat{engine::OutputFormat::Kind::JsonObject, {}, {}};
  return json_schema_format(spec["schema"], "response_format.json_schema.schema");
}

ChatCompletionRequest parse(std::string_view body, const ServedModel& served) {
  json root = parse_body_object(body);

  ChatCompletionRequest out;
  auto& sampling = out.chat.sampling;
  // Local-server defaults (llama.cpp's): a small model needs some truncation to stay coherent.
  sampling = engine::SamplingParams{};
  std::optional<bool> thinking_switch;  // chat_template_kwargs.enable_thinking
  for (const auto& [key, value] : root.items()) {
    if (value.is_null() && key != "messages") continue;  // null means "default" in the OpenAI API
    if (sampling_field(key, value, sampling)) continue;
    if (key == "messages") {
      out.chat.messages = parse_messages(value);
    } else if (key == "model") {
      if (!value.is_string()) reject("'model' must be a string", "model");
      const auto& name = value.get_ref<const std::string&>();
      if (name != served.id && std::find(served.aliases.begin(), served.aliases.end(), name) == served.aliases.end()) {
        ApiError error{404, fmt::format("The model '{}' does not exist; this server serves '{}'",
                                        value.get<std::string>(), served.id),
                       "invalid_request_error", "model", "model_not_found"};
        throw InvalidRequest{error};
      }
    } else if (key == "stream") {
      out.stream = boolean_field(value, "stream");
    } else if (key == "stream_options") {
      if (!value.is_object()) reject("'stream_options' must be an object", "stream_options");
      for (const auto& [option, v] : value.items()) {
        if (option == "include_usage") out.include_usage = boolean_field(v, "stream_options.include_usage");
        else if (option != "include_obfuscation") reject(fmt::format("unrecognized stream option '{}'", option), "stream_options");
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      out.chat.max_tokens = static_cast<int>(integer_field(value, key, 1, std::numeric_limits<int32_t>::max()));
    } else if (key == "stop") {
      out.chat.stop = stop_strings(value, "stop");
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
        sampling.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(number_field(bias, "logit_bias", -100.0, 100.0));
      }
    } else if (key == "logprobs") {
      out.logprobs = boolean_field(value, "logprobs");
    } else if (key == "top_logprobs") {
      out.chat.top_logprobs = static_cast<int>(integer_field(value, "top_logprobs", 0, 20));
    } else if (key == "n") {
      if (integer_field(value, "n", 1, 128) != 1) reject("'n' must be 1: one choice per request is supported", "n");
    } else if (key == "tools") {
      out.chat.tools = parse_tools(value);
    } else if (key == "tool_choice") {
      parse_tool_choice(value, out.chat);
    } else if (key == "parallel_tool_calls") {
      out.chat.parallel_tool_calls = boolean_field(value, "parallel_tool_calls");
    } else if (key == "response_format") {
      out.chat.output_format = parse_response_format(value);
    } else if (key == "reasoning_effort") {
      out.chat.reasoning = reasoning_effort_field(value, "reasoning_effort");
    } else if (key == "chat_template_kwargs") {
      // vLLM's, SGLang's and llama.cpp's extension: Qwen3 clients switch thinking off with
      // {"enable_thinking": false}. Other template variables cannot change this server's
      // renderers, so they are refused rather than ignored.
      if (!value.is_object()) reject("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      for (const auto& [name, v] : value.items()) {
        if (name != "enable_thinking")
          reject(fmt::format("chat_template_kwargs '{}' is not supported (only enable_thinking)", name),
                 "chat_template_kwargs");
        thinking_switch = boolean_field(v, "chat_template_kwargs.enable_thinking");
      }
    } else if (key == "modalities") {
      if (value != json::array({"text"})) reject("only the text modality is supported", "modalities");
    } else if (kUnsupportedFields.count(key)) {
      reject(fmt::format("'{}' is not supported", key), key);
    } else if (!kInertFields.count(key)) {
      reject(fmt::format("unrecognized request argument '{}'", key), key);
    }
  }
  if (thinking_switch) {  // (over reasoning_effort's on/off; its budget stays)
    out.chat.reasoning.enabled = *thinking_switch;
    out.chat.reasoning.requested = true;
  }
  if (out.chat.messages.empty()) reject("'messages' is required", "messages");
  if (out.chat.top_logprobs >= 0 && !out.logprobs) reject("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  if (out.logprobs && out.chat.top_logprobs < 0) out.chat.top_logprobs = 0;
  if (!out.logprobs) out.chat.top_logprobs = -1;
  if (out.include_usage && !out.stream) reject("'stream_options' is only allowed with 'stream': true", "stream_options");
  if (out.chat.tools.empty() && root.contains("tool_choice") && !root["tool_choice"].is_null() &&
      out.chat.tool_choice != engine::ToolChoice::None && out.chat.tool_choice != engine::ToolChoice::Auto)
    reject("'tool_choice' requires 'tools'", "tool_choice");
  check_tool_choice(out.chat, "tool_choice");
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
  } catch (const InvalidRequest& invalid) {
    return invalid.error;
  } catch (const json::exception& e) {  // e.g. a string that is not valid UTF-8
    return ApiError::bad_request(std::string("invalid request: ") + e.what());
  }
}

const char* openai_finish_reason(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::ToolCalls: return "tool_calls";
    default: return "stop";
  }
}

nlohmann::json chat_tool_call_json(const chat::ToolCall& call) {
  if (call.custom)
    return {{"id", call.id}, {"type", "custom"}, {"custom", {{"name", call.name}, {"input", call.arguments}}}};
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

nlohmann::json usage_json(int prompt_tokens, int completion_tokens, int cached_prompt_tokens, int draft_tokens,
                          int accepted_draft_tokens, int reasoning_tokens) {
  // Speculative decoding's guesses in OpenAI's fields for predicted tokens: those the reply
  // kept and those it did not.
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_prompt_tokens}}},
          {"completion_tokens_details",
           {{"reasoning_tokens", reasoning_tokens},
            {"accepted_prediction_tokens", accepted_draft_tokens},
            {"rejected_prediction_tokens", draft_tokens - accepted_draft_tokens}}}};
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
    case Kind::Reasoning:
      // (as vLLM, llama.cpp and DeepSeek's API stream a thinking model's reasoning)
      return sse(chunk(json::array({{{"index", 0},
                                     {"delta", {{"reasoning_content", event.text}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}})));
    case Kind::ToolCallStarted: {
      const auto& call = event.tool_call;
      json delta = call.custom ? json{{"index", event.tool_index}, {"id", call.id}, {"type", "custom"},
                                      {"custom", {{"name", call.name}, {"input", ""}}}}
                               : json{{"index", event.tool_index}, {"id", call.id}, {"type", "function"},
                                      {"function", {{"name", call.name}, {"arguments", ""}}}};
      custom_calls_.push_back(call.custom);
      return sse(chunk(json::array({{{"index", 0},
                                     {"delta", {{"tool_calls", json::array({delta})}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}})));
    }
    case Kind::ToolCallArguments: {
      const bool custom = event.tool_index < static_cast<int>(custom_calls_.size()) && custom_calls_[event.tool_index];
      json delta = custom ? json{{"index", event.tool_index}, {"custom", {{"input", event.text}}}}
                          : json{{"index", event.tool_index}, {"function", {{"arguments", event.text}}}};
      return sse(chunk(json::array({{{"index", 0},
                                     {"delta", {{"tool_calls", json::array({delta})}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}})));
    }
    case Kind::ToolCallFinished:
      return {};
    case Kind::Finished: {
      std::string out = sse(chunk(json::array(
          {{{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(event.finish)}}})));
      if (include_usage_) {
        json last = chunk(json::array());
        last["usage"] = usage_json(event.prompt_tokens, event.completion_tokens, event.cached_prompt_tokens,
                                   event.draft_tokens, event.accepted_draft_tokens, event.reasoning_tokens);
        out += sse(last);
      }
      return out;
    }
    case Kind::Failed:
      return sse(openai_error_body(ApiError{500, event.error, "server_error", {}, {}}));
  }
  return {};
}

std::string ChatCompletionRenderer::stream_error(const ApiError& error) {
  return "data: " + dump_json(openai_error_body(error)) + "\n\n";
}

void ChatCompletionRenderer::collect(const engine::ChatEvent& event) {
  using Kind = engine::ChatEvent::Kind;
  if (event.kind == Kind::Text) {
    text_ += event.text;
    all_logprobs_.insert(all_logprobs_.end(), event.logprobs.begin(), event.logprobs.end());
  } else if (event.kind == Kind::Reasoning) {
    reasoning_ += event.text;
  } else if (event.kind == Kind::Finished) {
    reasoning_tokens_ = event.reasoning_tokens;
    finish_ = event.finish;
    prompt_tokens_ = event.prompt_tokens;
    completion_tokens_ = event.completion_tokens;
    cached_prompt_tokens_ = event.cached_prompt_tokens;
    draft_tokens_ = event.draft_tokens;
    accepted_draft_tokens_ = event.accepted_draft_tokens;
  } else if (event.kind == Kind::Started) {
    prompt_tokens_ = event.prompt_tokens;
  } else if (event.kind == Kind::ToolCallFinished) {
    tool_calls_.push_back(event.tool_call);
  }
}

nlohmann::json ChatCompletionRenderer::completion() const {
  json message = {{"role", "assistant"}, {"content", text_}, {"refusal", nullptr}};
  if (!reasoning_.empty()) message["reasoning_content"] = reasoning_;
  if (!tool_calls_.empty()) {
    json calls = json::array();
    for (const auto& call : tool_calls_) calls.push_back(chat_tool_call_json(call));
    message["tool_calls"] = std::move(calls);
    if (text_.empty()) message["content"] = nullptr;
  }
  json choice = {{"index", 0}, {"message", std::move(message)}, {"logprobs", nullptr},
                 {"finish_reason", openai_finish_reason(finish_)}};
  if (logprobs_) choice["logprobs"] = logprobs_json(all_logprobs_);
  return {{"id", id_},
          {"object", "chat.completion"},
          {"created", created_},
          {"model", model_id_},
          {"system_fingerprint", "splash"},
          {"choices", json::array({choice})},
          {"usage", usage_json(prompt_tokens_, completion_tokens_, cached_prompt_tokens_, draft_tokens_,
                               accepted_draft_tokens_, reasoning_tokens_)}};
}

}  // namespace splash::api
