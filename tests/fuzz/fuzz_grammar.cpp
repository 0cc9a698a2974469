// libFuzzer target for the grammar engine's outside input: JSON Schemas and Lark grammars
// come from requests. Any bytes compile or are refused with splash::Error (never a crash,
// hang or unbounded allocation); a compiled grammar's matcher then consumes the rest of the
// input byte by byte and builds a token mask, keeping can_accept and fill_mask consistent.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/lark.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_grammar: invariant violated: %s\n", what);
  std::abort();
}

// A small vocabulary of JSON-ish and patch-ish pieces.
const std::vector<std::string> kTokens = {
    "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "ab", "1", "12", "-", ".", "e", "true", "false", "null",
    "\\", "\\n", "*** Begin Patch", "*** End Patch", "+", "@@", "é", "\xff", "x\"", "\"a\": "};

const splash::grammar::TokenTrie& vocabulary() {
  static const splash::grammar::TokenTrie trie(kTokens);
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // First byte: which compiler; up to the first NUL: the grammar; the rest: text to match.
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = input.find('\0');
  const std::string_view source = input.substr(0, split);
  const std::string_view text = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  std::shared_ptr<const splash::grammar::Grammar> grammar;
  try {
    if (data[0] % 2 == 0) {
      const auto schema = nlohmann::json::parse(source, nullptr, false);
      if (schema.is_discarded()) return 0;
      grammar = splash::grammar::compile_json_schema(schema);
    } else {
      grammar = splash::grammar::compile_lark(source);
    }
  } catch (const splash::Error&) {
    return 0;
  }
  splash::grammar::Matcher matcher(grammar);
  std::vector<uint8_t> allowed;
  for (size_t i = 0; i < text.size() && i < 256; ++i) {
    const std::string_view byte = text.substr(i, 1);
    const bool can = matcher.can_accept(byte);
    if (matcher.accept(byte) != can) fail("can_accept and accept disagree");
    if (i % 16 == 0) {
      matcher.fill_mask(vocabulary(), allowed);
      for (size_t id = 0; id < kTokens.size(); ++id)
        if ((allowed[id] != 0) != matcher.can_accept(kTokens[id])) fail("fill_mask and can_accept disagree");
    }
  }
  return 0;
}
