#include "chat/xml_tool_format.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "chat/prompt_writer.h"
#include "chat/tool_prompt.h"
#include "common/json_depth.h"

namespace splash::chat {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Python's repr of a JSON value, for `| string` of a list or a dict (a schema's type list).
std::string python_repr(const ordered_json& value) {
  switch (value.type()) {
    case json::value_t::string: {
      std::string out = "'";
      for (const char c : value.get_ref<const std::string&>()) {
        if (c == '\\' || c == '\'') out += '\\';
        out += c;
      }
      return out + "'";
    }
    case json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + python_repr(value[i]);
      return out + "]";
    }
    case json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        out += (first ? "'" : ", '") + key + "': " + python_repr(item);
        first = false;
      }
      return out + "}";
    }
    case json::value_t::boolean: return value.get<bool>() ? "True" : "False";
    case json::value_t::null: return "None";
    default: return value.dump();
  }
}

// Jinja's `| string` of a value (Python's str): strings as they are.
std::string python_str(const ordered_json& value) {
  return value.is_string() ? value.get<std::string>() : python_repr(value);
}

// The template's render_extra_keys: every key not handled elsewhere, as <key>value</key>
// lines (objects and arrays as JSON).
void extra_keys(std::string& out, const ordered_json& fields, std::initializer_list<std::string_view> handled) {
  if (!fields.is_object()) return;
  for (const auto& [key, value] : fields.items()) {
    bool skip = false;
    for (std::string_view h : handled) skip = skip || key == h;
    if (skip) continue;
    out += "\n<" + key + ">";
    out += value.is_object() || value.is_array() ? python_json(value) : python_str(value);
    out += "</" + key + ">";
  }
}

void append_tool(std::string& out, const ToolSpec& tool) {
  out += "\n<function>\n<name>" + tool.name + "</name>";
  if (!tool.description.empty()) out += "\n<description>" + std::string(jinja_trim(tool.description)) + "</description>";
  out += "\n<parameters>";
  if (tool.kind == ToolSpec::Kind::Custom) {
    out += "\n<parameter>\n<name>" + std::string(kCustomToolInput) +
           "</name>\n<type>string</type>\n<description>The tool's raw input";
    out += tool.lark_grammar.empty() ? "" : ", in this Lark grammar:\n" + tool.lark_grammar;
    out += "</description>\n</parameter>\n<required>[\"" + std::string(kCustomToolInput) + "\"]</required>";
  } else {
    const ordered_json parameters =
        ordered_json::parse(tool.parameters.dump(-1, ' ', false, json::error_handler_t::replace));
    if (parameters.is_object() && parameters.contains("properties") && parameters["properties"].is_object()) {
      for (const auto& [name, fields] : parameters["properties"].items()) {
        out += "\n<parameter>\n<name>" + name + "</name>";
        if (fields.is_object() && fields.contains("type")) out += "\n<type>" + python_str(fields["type"]) + "</type>";
        if (fields.is_object() && fields.contains("description") && fields["description"].is_string())
          out += "\n<description>" + std::string(jinja_trim(fields["description"].get_ref<const std::string&>())) +
                 "</description>";
        extra_keys(out, fields, {"name", "type", "description"});
        out += "\n</parameter>";
      }
    }
    extra_keys(out, parameters, {"type", "properties"});
  }
  out += "\n</parameters>";
  // The function's own other keys: of what splash keeps of a tool, `strict` (when set).
  if (tool.strict) out += "\n<strict>True</strict>";
  out += "\n</function>";
}

}  // namespace

std::string xml_tools_system_block(std::span<const ToolSpec> tools) {
  // Qwen3-Coder's wording, byte for byte (tests/golden/chat_qwen3_coder.json).
  std::string out = "# Tools\n\nYou have access to the following tools:\n\n<tools>";
  for (const ToolSpec& tool : tools) append_tool(out, tool);
  out +=
      "\n</tools>\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
      "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
      "<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
      "- Function calls MUST follow the specified format: the tool calling block MUST begin with an opening <tool_call> "
      "tag and end with a closing </tool_call> tag.\n- Required parameters MUST be specified\n- You may provide "
      "optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If "
      "there is no function call available, answer the question like normal with your current knowledge and do not "
      "tell the user about function calls\n</IMPORTANT>";
  return out;
}

std::string render_xml_tool_call(const ToolCall& call) {
  std::string out(kToolCallOpen);
  out += kToolCallBodyStart;
  out += kXmlFunctionOpen;
  out += call.name + ">\n";
  auto parameter = [&](std::string_view name, std::string_view value) {
    out += kXmlParameterOpen;
    out += name;
    out += ">\n";
    out += value;
    out += kXmlParameterClose;
  };
  if (call.custom) {
    parameter(kCustomToolInput, call.arguments);
  } else {
    ordered_json arguments(json::value_t::discarded);
    if (json_nesting_depth(call.arguments) <= kMaxJsonDepth)
      arguments = ordered_json::parse(call.arguments, nullptr, false);
    if (arguments.is_object())
      for (const auto& [name, value] : arguments.items())
        parameter(name, value.is_object() || value.is_array() ? python_json(value) : python_str(value));
  }
  out += kXmlFunctionClose;
  out += kToolCallEnd;
  return out;
}

namespace {

// The JSON types a schema allows ("string", "integer", ...; "any" when it says nothing it
// can be read for), through local $refs, anyOf/oneOf and type lists.
void allowed_types(const json& root, const json& schema, std::vector<std::string>& out, int depth = 0) {
  if (depth > 8 || !schema.is_object()) return out.push_back("any");
  if (const auto ref = schema.find("$ref"); ref != schema.end() && ref->is_string()) {
    const std::string& target = ref->get_ref<const std::string&>();
    if (target.starts_with("#/")) {
      try {
        const json::json_pointer pointer(target.substr(1));
        if (root.contains(pointer)) return allowed_types(root, root.at(pointer), out, depth + 1);
      } catch (const json::exception&) {
        // a malformed pointer: nothing can be read from it
      }
    }
    return out.push_back("any");
  }
  if (const auto type = schema.find("type"); type != schema.end()) {
    if (type->is_string()) return out.push_back(type->get<std::string>());
    if (type->is_array()) {
      for (const auto& t : *type) out.push_back(t.is_string() ? t.get<std::string>() : "any");
      return;
    }
  }
  if (const auto only = schema.find("const"); only != schema.end()) return out.push_back(only->is_string() ? "string" : "other");
  if (const auto choices = schema.find("enum"); choices != schema.end() && choices->is_array() && !choices->empty()) {
    for (const auto& c : *choices) out.push_back(c.is_string() ? "string" : c.is_null() ? "null" : "other");
    return;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (const auto branches = schema.find(key); branches != schema.end() && branches->is_array() && !branches->empty()) {
      for (const auto& branch : *branches) allowed_types(root, branch, out, depth + 1);
      return;
    }
  }
  out.push_back("any");
}

}  // namespace

XmlValueKind xml_value_kind(const ToolSpec& tool, std::string_view parameter) {
  if (tool.kind == ToolSpec::Kind::Custom) return XmlValueKind::Text;
  const auto properties = tool.parameters.find("properties");
  if (properties == tool.parameters.end() || !properties->is_object()) return XmlValueKind::Either;
  const auto fields = properties->find(std::string(parameter));
  if (fields == properties->end()) return XmlValueKind::Either;
  std::vector<std::string> types;
  allowed_types(tool.parameters, *fields, types);
  const bool any = std::find(types.begin(), types.end(), "any") != types.end();
  const bool strings = std::find(types.begin(), types.end(), "string") != types.end();
  const bool others = std::any_of(types.begin(), types.end(), [](const std::string& t) {
    return t != "string" && t != "null" && t != "any";
  });
  // Strings (and perhaps null: an optional string, whose null the model writes as text too):
  // text. No string: JSON. Both, or a schema that does not say: JSON when it parses, else text.
  if (strings && !others && !any) return XmlValueKind::Text;
  if (!strings && !any) return XmlValueKind::Json;
  return XmlValueKind::Either;
}

}  // namespace splash::chat
