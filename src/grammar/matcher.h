#pragma once
// Per-generation parse state for constrained decoding over a Grammar.
//
// The recognizer keeps the set of all parse stacks consistent with the bytes so far (a
// pushdown "stack set", as llama.cpp's GBNF does), so ambiguity and nondeterminism (a regex
// /.+/ followed by LF, optional properties) need no lookahead or lexer. Stacks are persistent
// linked frames, hash-consed: equal stacks are the same frame id, so a set of stacks is a
// sorted vector of ints, cheap to dedupe and to intern. Tail calls do not push a frame, so
// repetition (right recursion) runs in constant stack depth.
//
// Each interned stack set gets a lazily filled 256-entry transition row, i.e. the Matcher
// builds the DFA of its grammar on the fly, only where decoding goes. Inside a JSON string the
// set after a character is the set before it, so fill_mask over 49k tokens is mostly table
// lookups. Bounded memory: a step that would leave more than kMaxStacks stacks is refused
// (fail safe: the bytes are rejected and overflowed() turns true), and the caches are rebuilt
// from the live state once they grow past a limit.
//
// Not thread-safe: const methods fill internal caches. One Matcher per generation.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace splash::grammar {

class Matcher {
 public:
  static constexpr size_t kMaxStacks = 4096;

  explicit Matcher(std::shared_ptr<const Grammar> grammar);
  ~Matcher();
  Matcher(const Matcher&);
  Matcher& operator=(const Matcher&);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // Advance over bytes; returns false and leaves the state unchanged if they are rejected.
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed (no state change). Cheap: cached transitions.
  bool can_accept(std::string_view bytes) const;
  // The bytes so far form a full sentence (generation may end here, e.g. allow EOS).
  bool is_complete() const;
  // Nothing more can be accepted (complete and no continuation, or a dead state).
  bool is_dead() const;
  // allowed[i] = 1 iff token i's bytes can be accepted next (resized to trie.vocab_size()).
  // End-of-generation tokens are the caller's business: allow them iff is_complete().
  void fill_mask(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
  // Bytes the grammar forces next whatever is chosen (up to max_bytes), e.g. `": "` after a
  // fixed key; empty when there is a choice or the sentence may end here.
  std::string forced_bytes(size_t max_bytes = 256) const;
  // Undo the last n successful accept() calls (speculative decoding); at most kHistory back.
  static constexpr size_t kHistory = 64;
  bool rollback(size_t n);
  void reset();
  // A step was refused because it would have exceeded kMaxStacks.
  bool overflowed() const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  struct Arena;
  int32_t step(int32_t set, uint8_t byte) const;
  void maybe_compact();

  std::shared_ptr<const Grammar> grammar_;
  mutable std::unique_ptr<Arena> arena_;
  int32_t current_ = 0;
  std::vector<int32_t> history_;  // set ids before each accept, newest last
  int32_t initial_ = 0;
};

}  // namespace splash::grammar
