#pragma once
// A compiled grammar over BYTES, immutable once built and shared between generations as
// std::shared_ptr<const Grammar>. GrammarBuilder makes one; Matcher runs one.
//
// The form is a flat context-free grammar: each rule is a list of alternatives, each
// alternative a sequence of elements ending in `end`; an element is either a terminal (a set
// of bytes, one byte wide) or a reference to another rule. A multi-byte UTF-8 character is a
// sequence of terminals, so tokens that split a character are handled for free.
#include <cstdint>
#include <string>
#include <vector>

namespace splash::grammar {

// A set of byte values (a character class), 256 bits.
struct ByteSet {
  uint64_t words[4] = {0, 0, 0, 0};

  bool has(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
  }
  ByteSet inverted() const {
    ByteSet r;
    for (int i = 0; i < 4; ++i) r.words[i] = ~words[i];
    return r;
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  int count() const;
  bool operator==(const ByteSet&) const = default;
};

class Grammar {
 public:
  enum class Op : uint8_t { term, rule, end };
  struct Elem {
    Op op;
    int32_t arg;  // term: index into classes; rule: rule index; end: unused
  };

  // All alternatives, each a run of elements closed by Op::end.
  std::vector<Elem> code;
  std::vector<ByteSet> classes;
  // Rule r's alternatives start at code[alt_starts[i]] for i in [rule_begin[r], rule_begin[r+1]).
  std::vector<int32_t> rule_begin;
  std::vector<int32_t> alt_starts;
  std::vector<std::string> rule_names;  // for error messages and debugging; may be empty strings
  int32_t root = 0;

  int32_t rule_count() const { return static_cast<int32_t>(rule_begin.size()) - 1; }
  // Whether any byte string matches: the root derives some string of terminals (a grammar
  // that admits nothing — a JSON Schema `false` where a value must be — cannot be honoured).
  bool admits_output() const;
  size_t memory_bytes() const;  // what the grammar holds (its vectors' capacity and names)
  // A readable dump (one rule per line), for debugging and tests.
  std::string to_string() const;
};

}  // namespace splash::grammar
