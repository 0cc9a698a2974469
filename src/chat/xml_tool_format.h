#pragma once
// The qwen3_coder tool-call format (Qwen3-Coder's and Qwen3.5's templates): the tools listed
// as XML in the system prompt, and each call written as
//
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
//
// A value is written as its raw text when it is a string (and as JSON when it is an object
// or an array, as text otherwise: the template's `| string`); reading a call back, the
// tool's schema says which: a parameter the schema types as a string is text, any other is
// JSON. Results go back in <tool_response> blocks of a user turn, as in the JSON format
// (chat/tool_prompt.h). A freeform (custom) tool, splash's extension, is shown as a function
// of one string parameter, `input`, which holds its raw input.
//
// engine/tool_call_stream.h parses replies in this format too, and engine/
// output_constraints.h builds its call grammar (the parameters in the schema's order,
// required ones present).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "chat/tool_spec.h"

namespace splash::chat {

// Which tool-call format a chat format's model writes.
enum class ToolCallSyntax : uint8_t {
  Json,  // chat/tool_prompt.h: {"name": ..., "arguments": {...}} inside <tool_call>
  Xml,   // this file: <function=...><parameter=...> inside <tool_call>
};

// After "<tool_call>\n": kXmlFunctionOpen + name + ">\n", then each parameter as
// kXmlParameterOpen + name + ">\n" + value + kXmlParameterClose, then kXmlFunctionClose and
// "\n</tool_call>" (chat::kToolCallEnd).
inline constexpr std::string_view kXmlFunctionOpen = "<function=";
inline constexpr std::string_view kXmlParameterOpen = "<parameter=";
inline constexpr std::string_view kXmlParameterClose = "\n</parameter>\n";
inline constexpr std::string_view kXmlFunctionClose = "</function>";
inline constexpr std::string_view kCustomToolInput = "input";

// "# Tools ..." through "</IMPORTANT>": what the template appends to the system prompt.
std::string xml_tools_system_block(std::span<const ToolSpec> tools);

// One call as the model writes it, from <tool_call> to </tool_call>. A function call's
// arguments (JSON text) are written in the order the client sent them; arguments that are not
// a JSON object are written as no parameters.
std::string render_xml_tool_call(const ToolCall& call);

// Whether a function's parameter is read back as text (its schema allows strings and perhaps
// null only: a string type, an optional string, an enum or const of strings), as JSON (no
// string allowed), or by its value (strings and other types, or a schema that does not say:
// JSON when it parses, else text). Local $refs, anyOf/oneOf and type lists are followed.
enum class XmlValueKind : uint8_t { Text, Json, Either };
XmlValueKind xml_value_kind(const ToolSpec& tool, std::string_view parameter);

}  // namespace splash::chat
