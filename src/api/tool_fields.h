#pragma once
// Tool definitions, tool choices and structured-output formats as the protocols spell them,
// read into the internal shapes (chat::ToolSpec, engine::ToolChoice, engine::OutputFormat).
// Problems throw InvalidRequest naming the field.
#include <string>

#include <nlohmann/json.hpp>

#include "chat/tool_spec.h"
#include "engine/chat_request.h"

namespace splash::api {

// A function tool: a valid name, a description, a JSON Schema object for its arguments.
chat::ToolSpec function_tool(const nlohmann::json& name, const nlohmann::json& description,
                             const nlohmann::json& parameters, bool strict, const std::string& path);

// A freeform tool; `format` is absent, {"type":"text"} or {"type":"grammar","syntax":"lark",
// "definition":...} (OpenAI's custom tool format).
chat::ToolSpec custom_tool(const nlohmann::json& name, const nlohmann::json& description, const nlohmann::json& format,
                           const std::string& path);

// A JSON Schema output format; `schema` must be an object (or boolean).
engine::OutputFormat json_schema_format(const nlohmann::json& schema, const std::string& path);

// Refuses duplicate tool names (a call must identify its tool).
void check_unique_tool_names(const std::vector<chat::ToolSpec>& tools, const std::string& path);

// OpenAI's string tool choices ("auto", "none", "required"), shared by Chat Completions and
// Responses; returns false when `value` is not a string (the object forms differ).
bool openai_tool_choice_string(const nlohmann::json& value, engine::ChatRequest& request);

// A named tool_choice must name one of the tools.
void check_tool_choice(const engine::ChatRequest& request, const std::string& path);

}  // namespace splash::api
