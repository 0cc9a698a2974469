#include "api/openai_responses.h"

#include <fmt/format.h>

#include <chrono>
#include <limits>
#include <random>
#include <set>

#include "api/content_parts.h"
#include "api/json_fields.h"
#include "api/openai_chat.h"
#include "api/tool_fields.h"

namespace splash::api {

namespace {

using nlohmann::json;

// Accepted and not used: they cannot change what this server generates (include names extra
// output this server never has).
const std::set<std::string, std::less<>> kInertFields = {
    "metadata", "include", "prompt_cache_key", "client_metadata", "user", "service_tier",
    "safety_identifier", "truncation", "background", "prompt_cache_retention", "stream_options", "top_logprobs"};

// Hosted tools run by OpenAI's servers: accepted, never offered to the model.
const std::set<std::string, std::less<>> kHostedTools = {
    "web_search", "web_search_preview", "web_search_2025_08_26", "tool_search", "file_search", "code_interpreter",
    "image_generation", "computer_use_preview", "computer_use", "mcp", "local_shell", "shell", "apply_patch"};

std::string random_id(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

// Text of a message's content: a string or input_text / output_text / input_file parts; its
// input_image parts' files go to `images`.
std::string content_text(const json& content, const std::string& path, std::vector<chat::MessageImage>& images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject(fmt::format("'{}' must be a string or an array of content parts", path), path);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_path = fmt::format("{}[{}]", path, i);
    if (!part.is_object() || !part.contains("type")) reject(fmt::format("'{}' must be an object with a 'type'", part_path), part_path);
    const std::string& type = string_field(part["type"], part_path + ".type");
    if (type == "input_text" || type == "output_text" || type == "text") {
      text += string_field(part.value("text", json()), part_path + ".text");
    } else if (type == "refusal") {
      if (part.contains("refusal") && part["refusal"].is_string()) text += part["refusal"].get<std::string>();
    } else if (type == "input_image") {
      if (!part.contains("image_url"))
        reject(fmt::format("'{}' needs 'image_url' (a base64 data URL); file ids and URLs are not fetched", part_path),
               part_path);
      images.push_back(
          {image_file_from_url(string_field(part["image_url"], part_path + ".image_url"), part_path + ".image_url"),
           text.size()});
    } else if (type == "input_file") {
      if (!part.contains("file_data"))
        reject(fmt::format("'{}' needs 'file_data' (a base64 data URL); file ids and URLs are not fetched", part_path),
               part_path);
      const std::string title = part.contains("filename") ? string_field(part["filename"], part_path + ".filename") : "";
      if (!text.empty() && !text.ends_with('\n')) text += '\n';
      text += data_url_document_text(string_field(part["file_data"], part_path + ".file_data"), title,
                                     part_path + ".file_data");
      text += '\n';
    } else {
      reject(fmt::format("content parts of type '{}' are not supported", type), part_path + ".type");
    }
  }
  return text;
}

// The calls of an assistant turn follow its message: consecutive call items join it.
chat::ChatMessage& assistant_turn(std::vector<chat::ChatMessage>& messages) {
  if (messages.empty() || messages.back().role != "assistant") messages.push_back({"assistant", {}});
  return messages.back();
}

std::string output_text(const json& output, const std::string& path, std::vector<chat::MessageImage>& images) {
  if (output.is_string()) return output.get<std::string>();
  return content_text(output, path, images);
}

void parse_input_item(const json& item, const std::string& path, std::vector<chat::ChatMessage>& messages,
                      ResponseStore& store) {
  if (!item.is_object()) reject(fmt::format("'{}' must be an object", path), path);
  const std::string type = item.contains("type") ? string_field(item["type"], path + ".type") : "message";
  if (type == "message") {
    if (!item.contains("role")) reject(fmt::format("'{}.role' is required", path), path + ".role");
    std::string role = string_field(item["role"], path + ".role");
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      reject(fmt::format("'{}.role' must be user, assistant, system or developer", path), path + ".role");
    if (!item.contains("content")) reject(fmt::format("'{}.content' is required", path), path + ".content");
    chat::ChatMessage message{role, {}};
    message.content = content_text(item["content"], path + ".content", message.images);
    // The reply a reasoning item opened: its message joins that turn.
    if (role == "assistant" && !messages.empty() && messages.back().role == "assistant" &&
        messages.back().reasoning && messages.back().content.empty() && messages.back().tool_calls.empty()) {
      messages.back().content = std::move(message.content);
      messages.back().images = std::move(message.images);
    } else {
      messages.push_back(std::move(message));
    }
  } else if (type == "function_call" || type == "custom_tool_call") {
    const bool custom = type == "custom_tool_call";
    chat::ToolCall call;
    call.id = string_field(item.value("call_id", json()), path + ".call_id");
    call.name = string_field(item.value("name", json()), path + ".name");
    call.arguments = custom ? string_field(item.value("input", json()), path + ".input")
                            : string_field(item.value("arguments", json()), path + ".arguments");
    call.custom = custom;
    assistant_turn(messages).tool_calls.push_back(std::move(call));
  } else if (type == "function_call_output" || type == "custom_tool_call_output") {
    chat::ChatMessage result{"tool", {}};
    result.content = output_text(item.value("output", json()), path + ".output", result.images);
    result.tool_call_id = string_field(item.value("call_id", json()), path + ".call_id");
    messages.push_back(std::move(result));
  } else if (type == "item_reference") {
    const std::string id = string_field(item.value("id", json()), path + ".id");
    // Only whole stored responses can be referenced here: their conversation continues.
    auto stored = store.get(id);
    if (!stored) reject(fmt::format("'{}.id': no stored item or response '{}'", path, id), path + ".id");
    messages.insert(messages.end(), stored->conversation.begin(), stored->conversation.end());
  } else if (type == "reasoning") {
    // A thinking model's reasoning (its reasoning_text parts; summaries and encrypted content
    // are other models'): it opens the assistant turn that follows.
    std::string text;
    if (item.contains("content") && !item["content"].is_null()) {
      const json& content = item["content"];
      if (!content.is_array()) reject(fmt::format("'{}.content' must be an array", path), path + ".content");
      for (size_t i = 0; i < content.size(); ++i) {
        const std::string part = fmt::format("{}.content[{}]", path, i);
        if (!content[i].is_object()) reject(fmt::format("'{}' must be an object", part), part);
        if (content[i].value("type", "") == "reasoning_text") text += string_field(content[i].value("text", json()), part + ".text");
      }
    }
    if (!messages.empty() && messages.back().role == "assistant" && messages.back().content.empty() &&
        messages.back().tool_calls.empty())
      messages.back().reasoning = messages.back().reasoning.value_or("") + text;
    else
      messages.push_back({"assistant", {}, {}, {}, {}, text});
  } else if (type == "web_search_call" || type == "tool_search_call" ||
             type == "tool_search_output" || type == "file_search_call" || type == "compaction" ||
             type == "image_generation_call" || type == "code_interpreter_call") {
    // Records of reasoning and hosted tools: nothing this model can read back.
  } else {
    reject(fmt::format("'{}.type' '{}' is not a supported input item", path, type), path + ".type");
  }
}

void parse_function_tool(const json& t, const std::string& path, std::vector<chat::ToolSpec>& out) {
  const bool strict = optional_boolean(t, "strict", path);
  out.push_back(function_tool(t.value("name", json()), t.value("description", json()), t.value("parameters", json()),
                              strict, path));
}

std::vector<chat::ToolSpec> parse_tools(const json& tools) {
  if (!tools.is_array()) reject("'tools' must be an array", "tools");
  std::vector<chat::ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string path = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("type")) reject(fmt::format("'{}' must be an object with a 'type'", path), path);
    const std::string& type = string_field(t["type"], path + ".type");
    if (type == "function") {
      parse_function_tool(t, path, out);
    } else if (type == "custom") {
      out.push_back(custom_tool(t.value("name", json()), t.value("description", json()), t.value("format", json()), path));
    } else if (type == "namespace") {
      // A named group of functions: the model sees (and calls) its functions by their names.
      const json& inner = t.value("tools", json::array());
      if (!inner.is_array()) reject(fmt::format("'{}.tools' must be an array", path), path + ".tools");
      for (size_t j = 0; j < inner.size(); ++j) {
        const std::string inner_path = fmt::format("{}.tools[{}]", path, j);
        if (!inner[j].is_object()) reject(fmt::format("'{}' must be an object", inner_path), inner_path);
        const std::string inner_type = inner[j].value("type", std::string("function"));
        if (inner_type == "function") parse_function_tool(inner[j], inner_path, out);
        else if (inner_type == "custom")
          out.push_back(custom_tool(inner[j].value("name", json()), inner[j].value("description", json()),
                                    inner[j].value("format", json()), inner_path));
      }
    } else if (!kHostedTools.count(type)) {
      reject(fmt::format("'{}.type' '{}' is not a supported tool type", path, type), path + ".type");
    }
  }
  check_unique_tool_names(out, "tools");
  return out;
}

void parse_tool_choice(const json& value, engine::ChatRequest& chat) {
  if (openai_tool_choice_string(value, chat)) return;
  if (!value.is_object() || !value.contains("type")) reject("'tool_choice' must be a string or an object", "tool_choice");
  const std::string& type = string_field(value["type"], "tool_choice.type");
  if (type == "function" || type == "custom") {
    chat.tool_choice = engine::ToolChoice::Named;
    chat.tool_choice_name = string_field(value.value("name", json()), "tool_choice.name");
  } else if (type == "allowed_tools") {
    const std::string mode = value.value("mode", std::string("auto"));
    chat.tool_choice = mode == "required" ? engine::ToolChoice::Required : engine::ToolChoice::Auto;
  } else if (!kHostedTools.count(type)) {
    reject("'tool_choice.type' must be function, custom or allowed_tools", "tool_choice.type");
  }
}

void parse_text(const json& value, engine::ChatRequest& chat) {
  if (!value.is_object()) reject("'text' must be an object", "text");
  for (const auto& [key, v] : value.items()) {
    if (key == "verbosity") continue;  // a hint for reasoning models
    if (key != "format") reject(fmt::format("unrecognized field 'text.{}'", key), "text." + key);
    if (!v.is_object() || !v.contains("type")) reject("'text.format' must be an object with a 'type'", "text.format");
    const std::string& type = string_field(v["type"], "text.format.type");
    if (type == "text") continue;
    if (type == "json_object") {
      chat.output_format.kind = engine::OutputFormat::Kind::JsonObject;
    } else if (type == "json_schema") {
      if (!v.contains("schema")) reject("'text.format.schema' is required", "text.format.schema");
      chat.output_format = json_schema_format(v["schema"], "text.format.schema");
    } else {
      reject("'text.format.type' must be text, json_object or json_schema", "text.format.type");
    }
  }
}

ResponsesRequest parse(std::string_view body, ResponseStore& store) {
  const json root = parse_body_object(body);
  ResponsesRequest out;
  auto& chat = out.chat;
  chat.sampling = engine::SamplingParams{};
  chat.sampling.temperature = 1.0f;  // OpenAI's default
  std::string instructions;
  json echo = json::object();
  for (const auto& [key, value] : root.items()) {
    if (value.is_null()) continue;
    if (sampling_field(key, value, chat.sampling)) {
      echo[key] = value;
      continue;
    }
    if (key == "model") {
      out.model = string_field(value, "model");
    } else if (key == "input") {
      if (value.is_string()) {
        out.conversation.push_back({"user", value.get<std::string>()});
      } else if (value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i)
          parse_input_item(value[i], fmt::format("input[{}]", i), out.conversation, store);
      } else {
        reject("'input' must be a string or an array of items", "input");
      }
    } else if (key == "instructions") {
      instructions = string_field(value, "instructions");
      echo[key] = value;
    } else if (key == "max_output_tokens") {
      chat.max_tokens = static_cast<int>(integer_field(value, key, 1, std::numeric_limits<int32_t>::max()));
      echo[key] = value;
    } else if (key == "stream") {
      out.stream = boolean_field(value, "stream");
    } else if (key == "store") {
      out.store = boolean_field(value, "store");
    } else if (key == "previous_response_id") {
      out.previous_response_id = string_field(value, key);
    } else if (key == "tools") {
      chat.tools = parse_tools(value);
      echo[key] = value;
    } else if (key == "tool_choice") {
      parse_tool_choice(value, chat);
      echo[key] = value;
    } else if (key == "parallel_tool_calls") {
      chat.parallel_tool_calls = boolean_field(value, key);
      echo[key] = value;
    } else if (key == "text") {
      parse_text(value, chat);
      echo[key] = value;
    } else if (key == "reasoning") {
      if (!value.is_object()) reject("'reasoning' must be an object", "reasoning");
      for (const auto& [field, v] : value.items()) {
        if (field == "effort") {
          if (!v.is_null()) chat.reasoning = reasoning_effort_field(v, "reasoning.effort");
        } else if (field != "summary" && field != "generate_summary") {  // (summaries are other models')
          reject(fmt::format("unrecognized field 'reasoning.{}'", field), "reasoning." + field);
        }
      }
      echo[key] = value;
    } else if (key == "max_tool_calls") {
      integer_field(value, key, 0, 1 << 20);
    } else if (key == "conversation" || key == "prompt") {
      reject(fmt::format("'{}' (server-side conversations and prompt templates) is not supported", key), key);
    } else if (!kInertFields.count(key)) {
      reject(fmt::format("unrecognized request argument '{}'", key), key);
    }
  }
  if (out.model.empty()) reject("'model' is required", "model");
  if (!out.previous_response_id.empty()) {
    auto previous = store.get(out.previous_response_id);
    if (!previous)
      throw InvalidRequest{ApiError{404, fmt::format("Previous response with id '{}' not found.", out.previous_response_id),
                                    "invalid_request_error", "previous_response_id", "previous_response_not_found"}};
    out.conversation.insert(out.conversation.begin(), previous->conversation.begin(), previous->conversation.end());
  }
  if (out.conversation.empty()) reject("'input' is required", "input");
  chat.messages = out.conversation;
  if (!instructions.empty()) chat.messages.insert(chat.messages.begin(), chat::ChatMessage{"system", instructions});
  check_tool_choice(chat, "tool_choice");
  echo["parallel_tool_calls"] = chat.parallel_tool_calls;
  out.echo = std::move(echo);
  return out;
}

json usage_of(const engine::ChatEvent& finished) {
  return {{"input_tokens", finished.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", finished.cached_prompt_tokens}}},
          {"output_tokens", finished.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", finished.reasoning_tokens}}},
          {"total_tokens", finished.prompt_tokens + finished.completion_tokens}};
}

}  // namespace

std::variant<ResponsesRequest, ApiError> parse_responses_request(std::string_view body, ResponseStore& store) {
  try {
    return parse(body, store);
  } catch (const InvalidRequest& invalid) {
    return invalid.error;
  } catch (const json::exception& e) {
    return ApiError::bad_request(std::string("invalid request: ") + e.what());
  }
}

ResponsesRenderer::ResponsesRenderer(const ResponsesRequest& request, std::shared_ptr<ResponseStore> store)
    : id_(random_id("resp_")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      model_(request.model),
      echo_(request.echo),
      store_(request.store),
      previous_response_id_(request.previous_response_id),
      conversation_(request.conversation),
      store_ptr_(std::move(store)) {}

json ResponsesRenderer::response_object(const std::string& status) const {
  json response = {{"id", id_},
                   {"object", "response"},
                   {"created_at", created_},
                   {"status", status},
                   {"model", model_},
                   {"output", output_},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"instructions", echo_.value("instructions", json())},
                   {"max_output_tokens", echo_.value("max_output_tokens", json())},
                   {"parallel_tool_calls", echo_.value("parallel_tool_calls", true)},
                   {"previous_response_id", previous_response_id_.empty() ? json() : json(previous_response_id_)},
                   {"temperature", echo_.value("temperature", json(1.0))},
                   {"top_p", echo_.value("top_p", json(1.0))},
                   {"tool_choice", echo_.value("tool_choice", json("auto"))},
                   {"tools", echo_.value("tools", json::array())},
                   {"text", echo_.value("text", json{{"format", {{"type", "text"}}}})},
                   {"store", store_},
                   {"metadata", json::object()},
                   {"usage", nullptr}};
  if (done_) {
    response["usage"] = usage_of(finished_);
    if (finished_.finish == engine::FinishReason::Length)
      response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
  if (!failure_.empty()) response["error"] = {{"code", "server_error"}, {"message", failure_}};
  return response;
}

std::string ResponsesRenderer::sse(const std::string& type, json data) {
  data["type"] = type;
  data["sequence_number"] = sequence_++;
  return fmt::format("event: {}\ndata: {}\n\n", type, dump_json(data));
}

std::string ResponsesRenderer::finish_reasoning() {
  if (reasoning_item_ < 0) return {};
  const int index = reasoning_item_;
  reasoning_item_ = -1;
  json& item = output_[index];
  const json part = {{"type", "reasoning_text"}, {"text", reasoning_}};
  item["content"] = json::array({part});
  item["status"] = "completed";
  assistant_.reasoning = assistant_.reasoning.value_or("") + reasoning_;
  const std::string item_id = item["id"];
  std::string out = sse("response.reasoning_text.done",
                        {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"text", reasoning_}});
  out += sse("response.content_part.done", {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += sse("response.output_item.done", {{"output_index", index}, {"item", item}});
  reasoning_.clear();
  return out;
}

std::string ResponsesRenderer::finish_text() {
  if (text_item_ < 0) return {};
  const int index = text_item_;
  text_item_ = -1;
  json& item = output_[index];
  const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}, {"logprobs", json::array()}};
  item["content"] = json::array({part});
  item["status"] = "completed";
  assistant_.content += text_;
  const std::string item_id = item["id"];
  std::string out = sse("response.output_text.done", {{"item_id", item_id},
                                                      {"output_index", index},
                                                      {"content_index", 0},
                                                      {"text", text_},
                                                      {"logprobs", json::array()}});
  out += sse("response.content_part.done", {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += sse("response.output_item.done", {{"output_index", index}, {"item", item}});
  text_.clear();
  return out;
}

void ResponsesRenderer::finish(const engine::ChatEvent& event) {
  finished_ = event;
  done_ = true;
  if (store_ && store_ptr_) {
    StoredResponse stored;
    stored.conversation = conversation_;
    if (!assistant_.content.empty() || !assistant_.tool_calls.empty() || assistant_.reasoning)
      stored.conversation.push_back(assistant_);
    stored.response_json =
        dump_json(response_object(event.finish == engine::FinishReason::Length ? "incomplete" : "completed"));
    store_ptr_->put(id_, std::move(stored));
  }
}

std::string ResponsesRenderer::stream_event(const engine::ChatEvent& event) {
  using Kind = engine::ChatEvent::Kind;
  switch (event.kind) {
    case Kind::Started: {
      std::string out = sse("response.created", {{"response", response_object("in_progress")}});
      out += sse("response.in_progress", {{"response", response_object("in_progress")}});
      return out;
    }
    case Kind::Reasoning: {
      if (event.text.empty()) return {};
      std::string out;
      if (reasoning_item_ < 0) {
        reasoning_item_ = static_cast<int>(output_.size());
        json item = {{"type", "reasoning"}, {"id", random_id("rs_")}, {"status", "in_progress"},
                     {"summary", json::array()}, {"content", json::array()}};
        output_.push_back(item);
        out += sse("response.output_item.added", {{"output_index", reasoning_item_}, {"item", item}});
        out += sse("response.content_part.added", {{"item_id", item["id"]},
                                                   {"output_index", reasoning_item_},
                                                   {"content_index", 0},
                                                   {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
      }
      reasoning_ += event.text;
      out += sse("response.reasoning_text.delta", {{"item_id", output_[reasoning_item_]["id"]},
                                                   {"output_index", reasoning_item_},
                                                   {"content_index", 0},
                                                   {"delta", event.text}});
      return out;
    }
    case Kind::Text: {
      if (event.text.empty()) return {};
      std::string out = finish_reasoning();
      if (text_item_ < 0) {
        text_item_ = static_cast<int>(output_.size());
        json item = {{"type", "message"}, {"id", random_id("msg_")}, {"status", "in_progress"},
                     {"role", "assistant"}, {"content", json::array()}};
        output_.push_back(item);
        out += sse("response.output_item.added", {{"output_index", text_item_}, {"item", item}});
        out += sse("response.content_part.added",
                   {{"item_id", item["id"]},
                    {"output_index", text_item_},
                    {"content_index", 0},
                    {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}});
      }
      text_ += event.text;
      out += sse("response.output_text.delta", {{"item_id", output_[text_item_]["id"]},
                                                {"output_index", text_item_},
                                                {"content_index", 0},
                                                {"delta", event.text},
                                                {"logprobs", json::array()}});
      return out;
    }
    case Kind::ToolCallStarted: {
      std::string out = finish_reasoning() + finish_text();
      const auto& call = event.tool_call;
      tool_item_ = static_cast<int>(output_.size());
      json item = call.custom ? json{{"type", "custom_tool_call"}, {"id", random_id("ctc_")}, {"status", "in_progress"},
                                     {"call_id", call.id}, {"name", call.name}, {"input", ""}}
                              : json{{"type", "function_call"}, {"id", random_id("fc_")}, {"status", "in_progress"},
                                     {"call_id", call.id}, {"name", call.name}, {"arguments", ""}};
      output_.push_back(item);
      out += sse("response.output_item.added", {{"output_index", tool_item_}, {"item", item}});
      return out;
    }
    case Kind::ToolCallArguments: {
      if (tool_item_ < 0) return {};
      json& item = output_[tool_item_];
      const bool custom = item["type"] == "custom_tool_call";
      const char* field = custom ? "input" : "arguments";
      item[field] = item[field].get<std::string>() + event.text;
      return sse(custom ? "response.custom_tool_call_input.delta" : "response.function_call_arguments.delta",
                 {{"item_id", item["id"]}, {"output_index", tool_item_}, {"delta", event.text}});
    }
    case Kind::ToolCallFinished: {
      if (tool_item_ < 0) return {};
      json& item = output_[tool_item_];
      const bool custom = item["type"] == "custom_tool_call";
      item[custom ? "input" : "arguments"] = event.tool_call.arguments;
      item["status"] = "completed";
      assistant_.tool_calls.push_back(event.tool_call);
      std::string out;
      if (custom) {
        out += sse("response.custom_tool_call_input.done",
                   {{"item_id", item["id"]}, {"output_index", tool_item_}, {"input", event.tool_call.arguments}});
      } else {
        out += sse("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                             {"output_index", tool_item_},
                                                             {"name", event.tool_call.name},
                                                             {"arguments", event.tool_call.arguments}});
      }
      out += sse("response.output_item.done", {{"output_index", tool_item_}, {"item", item}});
      tool_item_ = -1;
      return out;
    }
    case Kind::Finished: {
      std::string out = finish_reasoning() + finish_text();
      if (tool_item_ >= 0) {  // a call cut short by max_output_tokens: done, but incomplete
        output_[tool_item_]["status"] = "incomplete";
        out += sse("response.output_item.done", {{"output_index", tool_item_}, {"item", output_[tool_item_]}});
        tool_item_ = -1;
      }
      finish(event);
      if (event.finish == engine::FinishReason::Length)
        return out + sse("response.incomplete", {{"response", response_object("incomplete")}});
      return out + sse("response.completed", {{"response", response_object("completed")}});
    }
    case Kind::Failed:
      return stream_error({500, event.error, "server_error", {}, {}});
  }
  return {};
}

std::string ResponsesRenderer::stream_error(const ApiError& error) {
  failure_ = error_excerpt(error.message, kErrorMessageBytes);
  return sse("response.failed", {{"response", response_object("failed")}});
}

void ResponsesRenderer::collect(const engine::ChatEvent& event) {
  // The same state machine as streaming; only the final object is kept.
  (void)stream_event(event);
}

json ResponsesRenderer::final_body() {
  return response_object(finished_.finish == engine::FinishReason::Length ? "incomplete" : "completed");
}

}  // namespace splash::api
