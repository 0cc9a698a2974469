#pragma once
// Internal: compiles the regex subset shared by Lark terminals and JSON Schema `pattern`
// into builder expressions, matched in full (no search; ^ and $ are accepted and ignored).
//
// Supported: literals (UTF-8), escapes \n \t \r \f \v \0 \xHH \uHHHH and escaped punctuation,
// \d \w \s \D \W \S (ASCII classes; the negated ones include every non-ASCII character), .,
// classes [...] with ranges and negation (over Unicode code points, lowered to UTF-8 byte
// sequences), groups (...) (?:...) (?P<name>...), alternation, quantifiers * + ? {m} {m,}
// {m,n} (lazy/possessive suffixes tolerated). Anything else (backreferences, lookaround,
// \b, \p{..}, inline flags) throws splash::Error naming the construct and its offset.
#include <string_view>

#include "grammar/grammar_builder.h"

namespace splash::grammar {

struct RegexOptions {
  bool case_insensitive = false;  // flag i: ASCII letters match either case
  bool dot_all = false;           // flag s: . matches \n too (otherwise it does not, as in Lark)
  bool json_escape = false;       // match the JSON-escaped spelling (inside a JSON string):
                                  // ", \ and control characters appear as \" \\ \n \u00XX
};

GrammarBuilder::Id compile_regex_into(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options);

}  // namespace splash::grammar
