#pragma once
// Lark grammar -> grammar (the subset Codex's freeform tools use, e.g. apply_patch).
//
// Supported: rules `name: alt | alt` (with ?name / !name), terminals `NAME: ...` (priorities
// .N ignored), "literals" with escapes and the i flag, /regex/ with flags i and s (subset, see
// regex.h; `.` excludes \n unless s), "a".."z" ranges, grouping ( ), [optional], ? * +,
// ~ N and ~ N..M, `-> alias` (ignored), alternatives continued on lines starting with |,
// // comments, %import common.X (and `%import common (A, B)`) for the usual common terminals.
// Parsing is character level with no separate lexer, so terminals behave as if lexed in
// context. %ignore, %declare, %override, templates are rejected with a line:col error.
// The start symbol is `start`.
#include <memory>
#include <string_view>

#include "grammar/grammar.h"

namespace splash::grammar {

std::shared_ptr<const Grammar> compile_lark(std::string_view text);

}  // namespace splash::grammar
