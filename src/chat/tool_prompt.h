#pragma once
// The tool-call format: how tools are shown to the model and how it calls them.
//
// One format serves every family this engine supports: Qwen2.5/Qwen3's own (the tool list
// as JSON lines inside <tools></tools> in the system prompt, each call a JSON object inside
// <tool_call></tool_call>, results inside <tool_response></tool_response> in a user turn),
// which is also the documented default for families whose template has no tool format
// (SmolLM2). Freeform (custom) tools use the same tags with the tool's name on the first
// line and the raw input after it, so a grammar can constrain the input byte for byte:
//
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
//   <tool_call>
//   apply_patch
//   *** Begin Patch ...
//   </tool_call>
//
// engine/tool_call_stream.h parses the model's output in this format back into calls, and
// engine/output_constraint.h builds the grammar that makes every call valid.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_spec.h"

namespace splash::chat {

struct ChatMessage;

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
// What follows kToolCallOpen before a function call's JSON, and what closes any call.
inline constexpr std::string_view kToolCallBodyStart = "\n";
inline constexpr std::string_view kToolCallEnd = "\n</tool_call>";
// The fixed JSON layout of a function call: {"name": "<name>", "arguments": <object>}
inline constexpr std::string_view kFunctionCallNamePrefix = "{\"name\": \"";
inline constexpr std::string_view kFunctionCallArgumentsPrefix = "\", \"arguments\": ";
inline constexpr std::string_view kFunctionCallSuffix = "}";

// How a template writes the example call in its tool block. Qwen2.5(-Coder)-0.5B's shows
// {"name": <function-name>, ...}; Qwen2.5-Coder-1.5B's Jinja source escapes those braces in a
// string literal, so the model was shown (and trained on) {{"name": <function-name>, ...}}.
enum class CallExampleBraces : uint8_t { Single, Doubled };

// The block appended to the system prompt that lists the tools and explains the format.
std::string tools_system_block(std::span<const ToolSpec> tools, CallExampleBraces braces = CallExampleBraces::Single);

// One tool as the JSON line the block lists it by (Qwen's templates' `tool | tojson`).
std::string tool_json_line(const ToolSpec& tool);

// One call as the model writes it, from <tool_call> to </tool_call>.
std::string render_tool_call(const ToolCall& call);

// Rewrites a conversation with tool calls and results into plain role/content turns in
// this format: `system_prompt_when_missing` (the template's default, possibly empty) is
// used when tools must be listed and the conversation has no system message; assistant
// calls follow the assistant's text; consecutive tool results become one user turn.
std::vector<ChatMessage> lower_tool_turns(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                          std::string_view system_prompt_when_missing,
                                          CallExampleBraces braces = CallExampleBraces::Single);

// JSON as Python's json.dumps writes it (", " and ": " separators, non-ASCII kept), which is
// what Qwen's templates' `tojson` wrote in the prompts the models were trained on.
std::string python_json(const nlohmann::ordered_json& value);

// Whether `name` can be written into the format unambiguously (letters, digits, _ - . :).
bool is_valid_tool_name(std::string_view name);

}  // namespace splash::chat
