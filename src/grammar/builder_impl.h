#pragma once
// Internal: the expression graph behind GrammarBuilder, shared by the builder's .cpp files
// (grammar_builder.cpp lowers it; json_schema.cpp, lark.cpp, regex.cpp only add to it).
#include <string>
#include <vector>

#include "grammar/grammar_builder.h"

namespace splash::grammar {

struct GrammarBuilder::Impl {
  enum class Kind : uint8_t { literal, cls, seq, choice, repeat, rule };
  struct Node {
    Kind kind = Kind::literal;
    int32_t min = 0, max = 0;  // repeat
    Id body = -1;              // rule: its definition (-1 until define())
    std::string text;          // literal bytes; rule name
    ByteSet set;               // cls
    std::vector<Id> kids;      // seq, choice; repeat: {item}
  };
  std::vector<Node> nodes;
  std::vector<std::string> nothing_at;  // where a schema admits no value (`false`), for the message

  // Shared sub-grammars, made once per builder.
  Id json_value = -1, json_object = -1, json_string = -1, json_ws = -1, utf8 = -1;

  Id add(Node node);
  const Node& at(Id id) const;
};

}  // namespace splash::grammar
