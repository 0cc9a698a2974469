#include "api/tool_fields.h"

#include <fmt/format.h>

#include <set>

#include "api/json_fields.h"
#include "chat/tool_prompt.h"

namespace splash::api {

using nlohmann::json;

namespace {

std::string tool_name(const json& name, const std::string& path) {
  const std::string& text = string_field(name, path + ".name");
  if (!chat::is_valid_tool_name(text))
    reject(fmt::format("'{}.name' must be 1 to 128 letters, digits, '_', '-', '.' or ':'; got '{}'", path, text),
           path + ".name");
  return text;
}

std::string description_of(const json& description, const std::string& path) {
  if (description.is_null()) return {};
  return string_field(description, path + ".description");
}

}  // namespace

chat::ToolSpec function_tool(const json& name, const json& description, const json& parameters, bool strict,
                             const std::string& path) {
  chat::ToolSpec tool;
  tool.kind = chat::ToolSpec::Kind::Function;
  tool.name = tool_name(name, path);
  tool.description = description_of(description, path);
  tool.strict = strict;
  if (parameters.is_null()) {
    tool.parameters = {{"type", "object"}, {"properties", json::object()}};
  } else {
    if (!parameters.is_object()) reject(fmt::format("'{}' must be a JSON Schema object", path + ".parameters"), path);
    tool.parameters = parameters;
  }
  return tool;
}

chat::ToolSpec custom_tool(const json& name, const json& description, const json& format, const std::string& path) {
  chat::ToolSpec tool;
  tool.kind = chat::ToolSpec::Kind::Custom;
  tool.name = tool_name(name, path);
  tool.description = description_of(description, path);
  if (format.is_null()) return tool;
  const std::string format_path = path + ".format";
  if (!format.is_object() || !format.contains("type")) reject(fmt::format("'{}' must be an object with a 'type'", format_path), format_path);
  const std::string& type = string_field(format["type"], format_path + ".type");
  if (type == "text") return tool;
  if (type != "grammar") reject(fmt::format("'{}.type' must be 'text' or 'grammar'", format_path), format_path + ".type");
  // OpenAI nests the grammar ({"type":"grammar","grammar":{"syntax","definition"}}) in Chat
  // Completions and flattens it in Responses: both are read.
  const json& grammar = format.contains("grammar") ? format["grammar"] : format;
  if (!grammar.is_object()) reject(fmt::format("'{}.grammar' must be an object", format_path), format_path);
  const std::string syntax = grammar.contains("syntax") ? string_field(grammar["syntax"], format_path + ".syntax") : "lark";
  if (syntax != "lark")
    reject(fmt::format("'{}.syntax' '{}' is not supported: use 'lark'", format_path, syntax), format_path + ".syntax");
  if (!grammar.contains("definition")) reject(fmt::format("'{}.definition' is required", format_path), format_path);
  tool.lark_grammar = string_field(grammar["definition"], format_path + ".definition");
  return tool;
}

engine::OutputFormat json_schema_format(const json& schema, const std::string& path) {
  if (!schema.is_object() && !schema.is_boolean()) reject(fmt::format("'{}' must be a JSON Schema object", path), path);
  engine::OutputFormat format;
  format.kind = engine::OutputFormat::Kind::JsonSchema;
  format.schema = schema;
  return format;
}

void check_unique_tool_names(const std::vector<chat::ToolSpec>& tools, const std::string& path) {
  std::set<std::string> seen;
  for (const auto& tool : tools)
    if (!seen.insert(tool.name).second) reject(fmt::format("'{}' has two tools named '{}'", path, tool.name), path);
}

bool openai_tool_choice_string(const json& value, engine::ChatRequest& request) {
  if (!value.is_string()) return false;
  const auto& choice = value.get_ref<const std::string&>();
  if (choice == "auto") request.tool_choice = engine::ToolChoice::Auto;
  else if (choice == "none") request.tool_choice = engine::ToolChoice::None;
  else if (choice == "required") request.tool_choice = engine::ToolChoice::Required;
  else reject("'tool_choice' must be 'auto', 'none', 'required' or a tool object", "tool_choice");
  return true;
}

void check_tool_choice(const engine::ChatRequest& request, const std::string& path) {
  if (request.tool_choice != engine::ToolChoice::Named) return;
  for (const auto& tool : request.tools)
    if (tool.name == request.tool_choice_name) return;
  reject(fmt::format("'{}' names the tool '{}', which is not in 'tools'", path, request.tool_choice_name), path);
}

}  // namespace splash::api
