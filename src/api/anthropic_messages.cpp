#include "api/anthropic_messages.h"

#include <fmt/format.h>

#include <limits>
#include <random>
#include <set>

#include "api/content_parts.h"
#include "api/json_fields.h"
#include "api/tool_fields.h"
#include "common/json_depth.h"

namespace splash::api {

namespace {

using nlohmann::json;

// Fields that do not change what this server generates: accepted and not used.
// (context_management edits old thinking blocks, which the thinking models' templates drop
// before the last user query anyway.)
const std::set<std::string, std::less<>> kInertFields = {
    "metadata", "context_management", "service_tier", "container", "mcp_servers", "cache_control",
    "inference_geo", "speed"};

// Claude Code's first system block is per-request metadata, not instructions: it stays out of
// the prompt so that the cached prefix survives from one turn to the next.
constexpr std::string_view kBillingHeader = "x-anthropic-billing-header:";

std::string block_type(const json& block, const std::string& path) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
    reject(fmt::format("'{}' must be a content block object with a 'type'", path), path);
  return block["type"].get<std::string>();
}

std::string block_text(const json& block, const std::string& path) {
  if (!block.contains("text")) reject(fmt::format("'{}.text' is required", path), path + ".text");
  return string_field(block["text"], path + ".text");
}

std::string document_block_text(const json& block, const std::string& path) {
  if (!block.contains("source") || !block["source"].is_object())
    reject(fmt::format("'{}.source' must be an object", path), path + ".source");
  const json& source = block["source"];
  const std::string title = block.contains("title") && block["title"].is_string() ? block["title"].get<std::string>() : "";
  const std::string type = source.contains("type") ? string_field(source["type"], path + ".source.type") : "";
  if (type == "base64") {
    const std::string media = source.contains("media_type") ? string_field(source["media_type"], path + ".source.media_type") : "";
    if (!source.contains("data")) reject(fmt::format("'{}.source.data' is required", path), path + ".source.data");
    return document_text(media, string_field(source["data"], path + ".source.data"), title, path + ".source");
  }
  if (type == "text") {
    if (!source.contains("data")) reject(fmt::format("'{}.source.data' is required", path), path + ".source.data");
    std::string text = "<document";
    if (!title.empty()) text += " title=\"" + title + "\"";
    return text + ">\n" + string_field(source["data"], path + ".source.data") + "\n</document>";
  }
  if (type == "content") {
    std::string text;
    const json& content = source.value("content", json());
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) reject(fmt::format("'{}.source.content' must be a string or blocks", path), path);
    for (size_t i = 0; i < content.size(); ++i) {
      const std::string inner = fmt::format("{}.source.content[{}]", path, i);
      if (block_type(content[i], inner) == "text") text += block_text(content[i], inner);
      else if (block_type(content[i], inner) == "image")
        reject(fmt::format("'{}': images inside documents are not supported; send the image as its own block", inner),
               inner);
    }
    return text;
  }
  if (type == "url" || type == "file")
    reject(fmt::format("'{}.source': documents by URL or file id are not fetched; send them inline (base64 or text)", path),
           path + ".source");
  reject(fmt::format("'{}.source.type' must be base64, text or content", path), path + ".source.type");
}

// An image block's file: {"type": "image", "source": {"type": "base64", "media_type": ..., "data": ...}}.
std::string image_block_file(const json& block, const std::string& path) {
  const json& source = block.value("source", json());
  if (!source.is_object()) reject(fmt::format("'{}.source' must be an object", path), path + ".source");
  const std::string type = string_field(source.value("type", json()), path + ".source.type");
  if (type == "url" || type == "file")
    reject(fmt::format("'{}.source': images by URL or file id are not fetched; send them as base64", path),
           path + ".source");
  if (type != "base64") reject(fmt::format("'{}.source.type' must be base64", path), path + ".source.type");
  return image_file_from_base64(string_field(source.value("data", json()), path + ".source.data"),
                                path + ".source.data");
}

// A tool_result's content: a string or text/image/document blocks (its images go to `images`).
std::string tool_result_text(const json& block, const std::string& path, std::vector<chat::MessageImage>& images) {
  std::string text;
  if (block.contains("content")) {
    const json& content = block["content"];
    if (content.is_string()) {
      text = content.get<std::string>();
    } else if (content.is_array()) {
      for (size_t i = 0; i < content.size(); ++i) {
        const std::string inner = fmt::format("{}.content[{}]", path, i);
        const std::string type = block_type(content[i], inner);
        if (type == "text") text += block_text(content[i], inner);
        else if (type == "image") images.push_back({image_block_file(content[i], inner), text.size()});
        else if (type == "document") text += document_block_text(content[i], inner);
        else if (type == "search_result" || type == "tool_reference") continue;
        else reject(fmt::format("'{}' of type '{}' is not supported in a tool result", inner, type), inner);
      }
    } else if (!content.is_null()) {
      reject(fmt::format("'{}.content' must be a string or an array of blocks", path), path + ".content");
    }
  }
  if (block.contains("is_error") && !block["is_error"].is_null() && boolean_field(block["is_error"], path + ".is_error")) {
    constexpr std::string_view kError = "Error: ";
    text = std::string(kError) + text;
    for (auto& image : images) image.offset += kError.size();  // they stay where they were in the text
  }
  return text;
}

void append_text(std::string& to, const std::string& text) {
  if (!to.empty() && !text.empty() && !to.ends_with('\n')) to += '\n';
  to += text;
}

// One Messages message becomes one or more internal messages: a user message's tool_result
// blocks are tool messages (in order), its other blocks user text.
void parse_message(const json& m, size_t index, std::vector<chat::ChatMessage>& out) {
  const std::string param = fmt::format("messages[{}]", index);
  if (!m.is_object()) reject(fmt::format("'{}' must be an object", param), param);
  if (!m.contains("role")) reject(fmt::format("'{}.role' is required", param), param + ".role");
  const std::string& role = string_field(m["role"], param + ".role");
  if (role != "user" && role != "assistant" && role != "system")
    reject(fmt::format("'{}.role' must be 'user' or 'assistant'; got '{}'", param, role), param + ".role");
  for (const auto& [key, value] : m.items())
    if (key != "role" && key != "content" && key != "cache_control")
      reject(fmt::format("unrecognized field '{}.{}'", param, key), param + "." + key);
  if (!m.contains("content")) reject(fmt::format("'{}.content' is required", param), param + ".content");
  const json& content = m["content"];
  if (content.is_string()) {
    out.push_back({role, content.get<std::string>()});
    return;
  }
  if (!content.is_array()) reject(fmt::format("'{}.content' must be a string or an array of blocks", param), param + ".content");
  chat::ChatMessage message{role, {}};
  auto flush_text = [&] {
    if (!message.content.empty() || !message.images.empty())
      out.push_back(std::exchange(message, chat::ChatMessage{role, {}}));
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string path = fmt::format("{}.content[{}]", param, i);
    const std::string type = block_type(content[i], path);
    const json& block = content[i];
    if (type == "text") {
      append_text(message.content, block_text(block, path));
    } else if (type == "image") {
      message.images.push_back({image_block_file(block, path), message.content.size()});
    } else if (type == "document") {
      append_text(message.content, document_block_text(block, path));
    } else if (type == "tool_use" && role == "assistant") {
      chat::ToolCall call;
      call.id = block.contains("id") ? string_field(block["id"], path + ".id") : "";
      call.name = string_field(block.value("name", json()), path + ".name");
      const json input = block.value("input", json::object());
      call.arguments = dump_json(input);
      message.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      flush_text();
      chat::ChatMessage result{"tool", {}};
      result.content = tool_result_text(block, path, result.images);
      if (!block.contains("tool_use_id")) reject(fmt::format("'{}.tool_use_id' is required", path), path + ".tool_use_id");
      result.tool_call_id = string_field(block["tool_use_id"], path + ".tool_use_id");
      out.push_back(std::move(result));
    } else if (type == "thinking" && role == "assistant") {
      // A thinking model's reasoning, sent back: its template keeps it where the model
      // expects it (in a tool loop after the last user query) and drops it elsewhere.
      message.reasoning = message.reasoning.value_or("") + string_field(block.value("thinking", json()), path + ".thinking");
    } else if (type == "thinking" || type == "redacted_thinking") {
      // Another model's (encrypted) reasoning: nothing this model can read.
    } else if (type == "server_tool_use" || type == "web_search_tool_result" || type == "web_fetch_tool_result" ||
               type == "search_result" || type == "container_upload") {
      // Hosted tools' records: this server runs none of them, so there is nothing to replay.
    } else {
      reject(fmt::format("'{}' has the unsupported block type '{}' for role '{}'", path, type, role), path + ".type");
    }
  }
  if (!message.content.empty() || !message.tool_calls.empty() || !message.images.empty() || message.reasoning)
    out.push_back(std::move(message));
}

// Anthropic's thinking setting: {"type": "enabled", "budget_tokens": N} (thinking tokens at
// most N), "disabled" (no thinking), "adaptive" (the model decides: no limit).
engine::ReasoningSettings thinking_setting(const json& value) {
  if (!value.is_object() || !value.contains("type")) reject("'thinking' must be an object with a 'type'", "thinking");
  const std::string& type = string_field(value["type"], "thinking.type");
  for (const auto& [key, v] : value.items())
    if (key != "type" && key != "budget_tokens" && key != "display")
      reject(fmt::format("unrecognized field 'thinking.{}'", key), "thinking." + key);
  if (type == "disabled") return {false, -1, true};
  if (type == "adaptive") return {true, -1, true};
  if (type != "enabled") reject("'thinking.type' must be enabled, disabled or adaptive", "thinking.type");
  if (!value.contains("budget_tokens")) reject("'thinking.budget_tokens' is required", "thinking.budget_tokens");
  return {true,
          static_cast<int>(integer_field(value["budget_tokens"], "thinking.budget_tokens", 1,
                                         std::numeric_limits<int32_t>::max())),
          true};
}

std::string system_text(const json& system) {
  if (system.is_string()) return system.get<std::string>();
  if (!system.is_array()) reject("'system' must be a string or an array of text blocks", "system");
  std::string text;
  for (size_t i = 0; i < system.size(); ++i) {
    const std::string path = fmt::format("system[{}]", i);
    if (block_type(system[i], path) != "text") reject(fmt::format("'{}' must be a text block", path), path);
    const std::string block = block_text(system[i], path);
    if (std::string_view(block).starts_with(kBillingHeader)) continue;
    append_text(text, block);
  }
  return text;
}

std::vector<chat::ToolSpec> parse_tools(const json& tools) {
  if (!tools.is_array()) reject("'tools' must be an array", "tools");
  std::vector<chat::ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string path = fmt::format("tools[{}]", i);
    if (!t.is_object()) reject(fmt::format("'{}' must be an object", path), path);
    const std::string type = t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "custom";
    // Server tools (web_search_..., code_execution_..., ...) and Anthropic-defined client
    // tools with versioned types are not ours to run: accepted, left out of the prompt.
    if (type != "custom") continue;
    if (!t.contains("input_schema")) reject(fmt::format("'{}.input_schema' is required", path), path + ".input_schema");
    const bool strict = optional_boolean(t, "strict", path);
    out.push_back(function_tool(t.value("name", json()), t.value("description", json()), t["input_schema"], strict, path));
  }
  check_unique_tool_names(out, "tools");
  return out;
}

void parse_tool_choice(const json& value, engine::ChatRequest& chat) {
  if (!value.is_object() || !value.contains("type")) reject("'tool_choice' must be an object with a 'type'", "tool_choice");
  const std::string& type = string_field(value["type"], "tool_choice.type");
  if (type == "auto") chat.tool_choice = engine::ToolChoice::Auto;
  else if (type == "any") chat.tool_choice = engine::ToolChoice::Required;
  else if (type == "none") chat.tool_choice = engine::ToolChoice::None;
  else if (type == "tool") {
    chat.tool_choice = engine::ToolChoice::Named;
    chat.tool_choice_name = string_field(value.value("name", json()), "tool_choice.name");
  } else {
    reject("'tool_choice.type' must be auto, any, tool or none", "tool_choice.type");
  }
  if (value.contains("disable_parallel_tool_use") && !value["disable_parallel_tool_use"].is_null())
    chat.parallel_tool_calls = !boolean_field(value["disable_parallel_tool_use"], "tool_choice.disable_parallel_tool_use");
}

// Structured outputs: {"type":"json_schema","schema":{...}} (output_format, or
// output_config.format).
void parse_output_format(const json& value, const std::string& path, engine::ChatRequest& chat) {
  if (value.is_null()) return;
  if (!value.is_object() || !value.contains("type")) reject(fmt::format("'{}' must be an object with a 'type'", path), path);
  const std::string& type = string_field(value["type"], path + ".type");
  if (type != "json_schema") reject(fmt::format("'{}.type' must be 'json_schema'", path), path + ".type");
  if (!value.contains("schema")) reject(fmt::format("'{}.schema' is required", path), path + ".schema");
  chat.output_format = json_schema_format(value["schema"], path + ".schema");
}

MessagesRequest parse(std::string_view body, bool for_counting) {
  const json root = parse_body_object(body);
  MessagesRequest out;
  auto& chat = out.chat;
  chat.sampling = engine::SamplingParams{};
  chat.sampling.temperature = 1.0f;  // Anthropic's default
  std::string system;
  bool have_max_tokens = false;
  for (const auto& [key, value] : root.items()) {
    if (key == "model") {
      out.model = string_field(value, "model");
    } else if (key == "messages") {
      if (!value.is_array()) reject("'messages' must be an array", "messages");
      for (size_t i = 0; i < value.size(); ++i) parse_message(value[i], i, chat.messages);
    } else if (key == "system") {
      system = system_text(value);
    } else if (key == "max_tokens") {
      chat.max_tokens = static_cast<int>(integer_field(value, "max_tokens", 1, std::numeric_limits<int32_t>::max()));
      have_max_tokens = true;
    } else if (key == "stop_sequences") {
      chat.stop = stop_strings(value, "stop_sequences");
    } else if (key == "temperature") {
      chat.sampling.temperature = static_cast<float>(number_field(value, "temperature", 0.0, 1.0));
    } else if (key == "top_p" || key == "top_k") {
      if (!value.is_null()) sampling_field(key, value, chat.sampling);
    } else if (key == "stream") {
      out.stream = boolean_field(value, "stream");
    } else if (key == "tools") {
      chat.tools = parse_tools(value);
    } else if (key == "tool_choice") {
      parse_tool_choice(value, chat);
    } else if (key == "output_format") {
      parse_output_format(value, "output_format", chat);
    } else if (key == "thinking") {
      chat.reasoning = thinking_setting(value);
    } else if (key == "output_config") {
      if (!value.is_object()) reject("'output_config' must be an object", "output_config");
      if (value.contains("format")) parse_output_format(value["format"], "output_config.format", chat);
      // "effort" (low, medium, high, max) bounds a thinking model's thinking, unless thinking
      // sets a budget of its own.
      if (value.contains("effort") && !root.contains("thinking"))
        chat.reasoning = reasoning_effort_field(value["effort"], "output_config.effort");
    } else if (!kInertFields.count(key)) {
      reject(fmt::format("unrecognized field '{}'", key), key);
    }
  }
  if (out.model.empty()) reject("'model' is required", "model");
  if (!root.contains("messages")) reject("'messages' is required", "messages");
  if (!for_counting && !have_max_tokens) reject("'max_tokens' is required", "max_tokens");
  if (!system.empty()) chat.messages.insert(chat.messages.begin(), chat::ChatMessage{"system", system});
  if (chat.messages.empty()) reject("'messages' must contain at least one message", "messages");
  check_tool_choice(chat, "tool_choice.name");
  return out;
}

std::string new_message_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("msg_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

std::string sse(std::string_view event, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", event, dump_json(data));
}

json parse_arguments(const std::string& text) {
  if (json_nesting_depth(text) > kMaxJsonDepth) return json::object();
  json input = json::parse(text, nullptr, false);
  return input.is_discarded() ? json::object() : input;
}

}  // namespace

std::variant<MessagesRequest, ApiError> parse_messages_request(std::string_view body, bool for_counting) {
  try {
    return parse(body, for_counting);
  } catch (const InvalidRequest& invalid) {
    return invalid.error;
  } catch (const json::exception& e) {
    return ApiError::bad_request(std::string("invalid request: ") + e.what());
  }
}

json anthropic_error_body(const ApiError& error) {
  std::string type;
  switch (error.status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: type = error.status >= 500 ? "api_error" : "invalid_request_error"; break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", error_excerpt(error.message, kErrorMessageBytes)}}}};
}

std::string anthropic_tool_id(const std::string& call_id) {
  if (call_id.starts_with("call_")) return "toolu_" + call_id.substr(5);
  return call_id;
}

const char* anthropic_stop_reason(const engine::ChatEvent& finished) {
  switch (finished.finish) {
    case engine::FinishReason::Length: return "max_tokens";
    case engine::FinishReason::ToolCalls: return "tool_use";
    default: return finished.stop_sequence.empty() ? "end_turn" : "stop_sequence";
  }
}

MessagesRenderer::MessagesRenderer(std::string model) : id_(new_message_id()), model_(std::move(model)) {}

json MessagesRenderer::usage(int prompt_tokens, int cached_tokens, int output_tokens) const {
  // Anthropic counts cache reads apart: input_tokens are the ones computed for this request.
  return {{"input_tokens", prompt_tokens - cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached_tokens},
          {"output_tokens", output_tokens}};
}

// splash does not sign reasoning: a thinking block's signature is this fixed marker (clients
// send it back with the block; it is not checked).
constexpr std::string_view kThinkingSignature = "splash-unsigned";

std::string MessagesRenderer::close_block() {
  if (!block_open_) return {};
  block_open_ = false;
  std::string out;
  if (thinking_block_) out = delta({{"type", "signature_delta"}, {"signature", kThinkingSignature}});
  thinking_block_ = false;
  return out + sse("content_block_stop", {{"type", "content_block_stop"}, {"index", next_block_++}});
}

// Closes the open block and opens `block` (text or thinking) as the next one.
std::string MessagesRenderer::open_block(const json& block) {
  std::string out = close_block();
  out += sse("content_block_start", {{"type", "content_block_start"}, {"index", next_block_}, {"content_block", block}});
  block_open_ = true;
  text_block_ = block["type"] == "text";
  thinking_block_ = block["type"] == "thinking";
  return out;
}

std::string MessagesRenderer::delta(json delta) {
  return sse("content_block_delta", {{"type", "content_block_delta"}, {"index", next_block_}, {"delta", std::move(delta)}});
}

std::string MessagesRenderer::stream_event(const engine::ChatEvent& event) {
  using Kind = engine::ChatEvent::Kind;
  switch (event.kind) {
    case Kind::Started: {
      prompt_tokens_ = event.prompt_tokens;
      cached_tokens_ = event.cached_prompt_tokens;
      json message = {{"id", id_},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"model", model_},
                      {"content", json::array()},
                      {"stop_reason", nullptr},
                      {"stop_sequence", nullptr},
                      {"usage", usage(prompt_tokens_, cached_tokens_, 0)}};
      return sse("message_start", {{"type", "message_start"}, {"message", message}}) + sse("ping", {{"type", "ping"}});
    }
    case Kind::Reasoning: {
      if (event.text.empty()) return {};
      std::string out;
      if (!block_open_ || !thinking_block_)
        out += open_block({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      return out + delta({{"type", "thinking_delta"}, {"thinking", event.text}});
    }
    case Kind::Text: {
      if (event.text.empty()) return {};
      std::string out;
      if (!block_open_ || !text_block_) out += open_block({{"type", "text"}, {"text", ""}});
      return out + delta({{"type", "text_delta"}, {"text", event.text}});
    }
    case Kind::ToolCallStarted: {
      std::string out = close_block();
      out += sse("content_block_start",
                 {{"type", "content_block_start"},
                  {"index", next_block_},
                  {"content_block",
                   {{"type", "tool_use"}, {"id", anthropic_tool_id(event.tool_call.id)}, {"name", event.tool_call.name},
                    {"input", json::object()}}}});
      block_open_ = true;
      text_block_ = false;
      return out;
    }
    case Kind::ToolCallArguments:
      return delta({{"type", "input_json_delta"}, {"partial_json", event.text}});
    case Kind::ToolCallFinished:
      return close_block();
    case Kind::Finished: {
      std::string out = close_block();
      json delta = {{"stop_reason", anthropic_stop_reason(event)},
                    {"stop_sequence", event.stop_sequence.empty() ? json(nullptr) : json(event.stop_sequence)}};
      out += sse("message_delta", {{"type", "message_delta"},
                                   {"delta", delta},
                                   {"usage", usage(event.prompt_tokens, event.cached_prompt_tokens, event.completion_tokens)}});
      out += sse("message_stop", {{"type", "message_stop"}});
      return out;
    }
    case Kind::Failed:
      return stream_error({500, event.error, "api_error", {}, {}});
  }
  return {};
}

std::string MessagesRenderer::keep_alive() { return sse("ping", {{"type", "ping"}}); }

std::string MessagesRenderer::stream_error(const ApiError& error) { return sse("error", anthropic_error_body(error)); }

void MessagesRenderer::collect(const engine::ChatEvent& event) {
  using Kind = engine::ChatEvent::Kind;
  switch (event.kind) {
    case Kind::Started:
      prompt_tokens_ = event.prompt_tokens;
      cached_tokens_ = event.cached_prompt_tokens;
      break;
    case Kind::Reasoning:
      if (event.text.empty()) break;
      if (content_.empty() || content_.back()["type"] != "thinking")
        content_.push_back({{"type", "thinking"}, {"thinking", ""}, {"signature", kThinkingSignature}});
      content_.back()["thinking"] = content_.back()["thinking"].get<std::string>() + event.text;
      break;
    case Kind::Text:
      if (event.text.empty()) break;
      if (content_.empty() || content_.back()["type"] != "text") content_.push_back({{"type", "text"}, {"text", ""}});
      content_.back()["text"] = content_.back()["text"].get<std::string>() + event.text;
      break;
    case Kind::ToolCallFinished:
      content_.push_back({{"type", "tool_use"},
                          {"id", anthropic_tool_id(event.tool_call.id)},
                          {"name", event.tool_call.name},
                          {"input", parse_arguments(event.tool_call.arguments)}});
      break;
    case Kind::Finished:
      finished_ = event;
      break;
    default:
      break;
  }
}

json MessagesRenderer::final_body() {
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", content_},
          {"stop_reason", anthropic_stop_reason(finished_)},
          {"stop_sequence", finished_.stop_sequence.empty() ? json(nullptr) : json(finished_.stop_sequence)},
          {"usage", usage(finished_.prompt_tokens, finished_.cached_prompt_tokens, finished_.completion_tokens)}};
}

}  // namespace splash::api
