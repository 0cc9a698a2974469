#pragma once
// Composes grammars from small expressions, then lowers the expression reachable from a root
// into an immutable Grammar (grammar.h). Every method returns an expression id; ids are only
// meaningful for the builder that made them. JSON Schema (json_schema.h) and Lark (lark.h)
// compile into a builder, so a caller can mix them (e.g. a tool-call wrapper around a schema).
//
// Recursion goes through named rules: rule("x") declares one, define(x, body) gives its body,
// and a rule may be referenced before it is defined (that is how $ref and Lark names work).
// build() rejects left recursion (the recognizer is top-down), undefined rules and grammars
// over the size cap ("schema too large"), all as splash::Error.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace splash::grammar {

// Caps that keep hostile schemas/grammars bounded in time and memory.
inline constexpr size_t kMaxGrammarElements = 4'000'000;  // lowered elements (bytes of literals etc.)
inline constexpr size_t kMaxBuilderNodes = 4'000'000;
inline constexpr int kMaxNestingDepth = 2000;  // expression nesting while lowering

class GrammarBuilder {
 public:
  using Id = int32_t;

  GrammarBuilder();
  ~GrammarBuilder();
  GrammarBuilder(const GrammarBuilder&) = delete;
  GrammarBuilder& operator=(const GrammarBuilder&) = delete;

  Id literal(std::string_view bytes);                  // exactly these bytes ("" = empty)
  Id char_class(const ByteSet& set);                   // one byte from the set
  Id char_class(std::string_view ranges, bool negated = false);  // "a-zA-Z_" style, bytes
  Id any_byte();
  Id sequence(std::vector<Id> parts);
  Id choice(std::vector<Id> alternatives);              // no alternatives: matches nothing
  Id optional(Id item) { return repeat(item, 0, 1); }
  Id repeat(Id item, int min, int max /* -1 = unbounded */);
  Id rule(std::string name);                            // a named rule, body given by define()
  void define(Id rule, Id body);

  Id utf8_char_nonascii();  // one well-formed UTF-8 character of 2-4 bytes
  // From now on JSON whitespace is at most one space between tokens (no newlines): tool-call
  // arguments are written on one line, as models trained on tool calls write them, and a
  // small model cannot spend its tokens on indentation. Call before building any JSON.
  void single_line_json();
  Id json_value();          // any JSON value (limited whitespace, see json_schema.cpp)
  Id json_object();         // any JSON object
  Id json_string();         // any JSON string, quotes included
  Id json_schema(const nlohmann::json& schema);          // throws splash::Error naming any
  Id json_schema(const nlohmann::ordered_json& schema);  // unsupported keyword; ordered_json keeps
                                                         // the declared property order
  Id lark(std::string_view lark_grammar);  // throws splash::Error with line:col for bad grammar
  // A regex (Lark/JSON-Schema subset, see regex.h) matched in full.
  Id regex(std::string_view pattern, std::string_view flags = "");

  std::shared_ptr<const Grammar> build(Id root);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// A grammar for exactly the full matches of a regex (see regex.h for the subset).
std::shared_ptr<const Grammar> compile_regex(std::string_view pattern, std::string_view flags = "");

}  // namespace splash::grammar
