#pragma once
// Tools a conversation offers the model, and the calls the model made: the protocol-neutral
// shapes every API (Chat Completions, Responses, Messages) translates its own into.
#include <string>

#include <nlohmann/json.hpp>

namespace splash::chat {

struct ToolSpec {
  enum class Kind {
    Function,  // arguments are a JSON object matching `parameters`
    Custom,    // freeform: the input is raw text, constrained by `grammar` when one is given
  };
  Kind kind = Kind::Function;
  std::string name;
  std::string description;
  nlohmann::json parameters = nlohmann::json::object();  // Function: a JSON Schema
  std::string lark_grammar;                                // Custom: a Lark grammar, or empty (any text)
  // Function: a schema this engine cannot compile is an error when strict, and otherwise
  // constrains the arguments to any JSON object instead.
  bool strict = false;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // Function: the arguments as JSON text; Custom: the raw input
  bool custom = false;
};

}  // namespace splash::chat
