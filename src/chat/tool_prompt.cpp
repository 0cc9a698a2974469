#include "chat/tool_prompt.h"

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "common/json_depth.h"

namespace splash::chat {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// JSON with ", " and ": " separators, the way Python's json.dumps writes the tool lines
// Qwen's templates were trained on.
template <typename Json>
std::string spaced_json(const Json& value) {
  std::string out;
  const std::string compact = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  out.reserve(compact.size() + compact.size() / 8);
  bool in_string = false;
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    out += c;
    if (in_string) {
      if (c == '\\' && i + 1 < compact.size()) out += compact[++i];
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':') {
      out += ' ';
    }
  }
  return out;
}

// Keys in the order Qwen's templates write them (ordered_json keeps insertion order).
ordered_json tool_line(const ToolSpec& tool) {
  if (tool.kind == ToolSpec::Kind::Custom) {
    ordered_json line = {{"type", "custom"}, {"name", tool.name}, {"description", tool.description}};
    if (!tool.lark_grammar.empty())
      line["format"] = {{"type", "grammar"}, {"syntax", "lark"}, {"definition", tool.lark_grammar}};
    return line;
  }
  const ordered_json parameters = ordered_json::parse(tool.parameters.dump(-1, ' ', false, json::error_handler_t::replace));
  return {{"type", "function"},
          {"function", {{"name", tool.name}, {"description", tool.description}, {"parameters", parameters}}}};
}

}  // namespace

std::string python_json(const ordered_json& value) { return spaced_json(value); }

std::string tool_json_line(const ToolSpec& tool) { return spaced_json(tool_line(tool)); }

bool is_valid_tool_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (unsigned char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                    c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::string tools_system_block(std::span<const ToolSpec> tools, CallExampleBraces braces) {
  // Qwen2.5's wording, byte for byte (tests/golden/chat_qwen25.json): the models trained on
  // this format see exactly what they were trained on.
  bool any_custom = false;
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
      "function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ToolSpec& tool : tools) {
    out += '\n';
    out += tool_json_line(tool);
    any_custom = any_custom || tool.kind == ToolSpec::Kind::Custom;
  }
  const bool doubled = braces == CallExampleBraces::Doubled;
  out +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n";
  out += doubled ? "{{" : "{";
  out += "\"name\": <function-name>, \"arguments\": <args-json-object>";
  out += doubled ? "}}" : "}";
  out += "\n</tool_call>";
  if (any_custom) {
    // Freeform tools are splash's extension of the format.
    out +=
        "\n\nA custom tool takes raw text instead of JSON: write its name on the first line inside the tags and its "
        "input, in the tool's format, after it:\n<tool_call>\n<tool-name>\n<input>\n</tool_call>";
  }
  return out;
}

std::string render_tool_call(const ToolCall& call) {
  std::string out(kToolCallOpen);
  out += kToolCallBodyStart;
  if (call.custom) {
    out += call.name;
    out += '\n';
    out += call.arguments;
  } else {
    // Arguments are re-serialised in the same layout the model is asked to write; text that
    // is not JSON (a client may echo anything back) is kept as it came.
    json arguments(json::value_t::discarded);
    if (json_nesting_depth(call.arguments) <= kMaxJsonDepth) arguments = json::parse(call.arguments, nullptr, false);
    out += kFunctionCallNamePrefix;
    out += call.name;
    out += kFunctionCallArgumentsPrefix;
    out += arguments.is_discarded() ? (call.arguments.empty() ? std::string("{}") : call.arguments) : spaced_json(arguments);
    out += kFunctionCallSuffix;
  }
  out += kToolCallEnd;
  return out;
}

std::vector<ChatMessage> lower_tool_turns(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                          std::string_view system_prompt_when_missing, CallExampleBraces braces) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size() + 1);
  if (!tools.empty()) {
    const std::string block = tools_system_block(tools, braces);
    if (!messages.empty() && messages.front().role == "system") {
      out.push_back({"system", messages.front().content + "\n\n" + block, {}, {}, messages.front().images});
      messages = messages.subspan(1);
    } else {
      std::string system(system_prompt_when_missing);
      out.push_back({"system", system.empty() ? block : system + "\n\n" + block});
    }
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      constexpr std::string_view kOpen = "<tool_response>\n";
      std::string response = std::string(kOpen) + m.content + "\n</tool_response>";
      // Consecutive results answer one assistant turn: they share one user turn.
      if (!out.empty() && out.back().role == "user" && out.back().content.ends_with("</tool_response>") &&
          out.back().tool_call_id == "tool_responses") {
        out.back().content += "\n";
      } else {
        out.push_back({"user", "", {}, "tool_responses"});
      }
      // A result's images (a screenshot a tool took) stay where they were in its content.
      const size_t shift = out.back().content.size() + kOpen.size();
      for (const MessageImage& image : m.images) out.back().images.push_back({image.file, image.offset + shift});
      out.back().content += response;
      continue;
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      std::string content = m.content;
      for (const ToolCall& call : m.tool_calls) {
        if (!content.empty()) content += '\n';
        content += render_tool_call(call);
      }
      out.push_back({"assistant", std::move(content), {}, {}, m.images});
      continue;
    }
    out.push_back({m.role, m.content, {}, {}, m.images});
  }
  for (auto& m : out) m.tool_call_id.clear();
  return out;
}

}  // namespace splash::chat
