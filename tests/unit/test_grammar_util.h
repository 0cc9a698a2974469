#pragma once
// Helpers shared by the grammar tests: random walks through a grammar (byte by byte, or token
// by token over a small vocabulary) and the exhaustive mask check.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace splash::grammar::testing {

// A vocabulary of the 256 single bytes: fill_mask over it lists the allowed next bytes.
inline const TokenTrie& byte_trie() {
  static const TokenTrie trie = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    return TokenTrie(v);
  }();
  return trie;
}

struct Walk {
  std::string text;
  bool complete = false;
};

// Picks random allowed bytes until the text is complete and a coin says stop (or nothing else
// is allowed), giving up at max_bytes. `closers` are favoured so that strings and containers
// end in reasonable time.
inline Walk random_byte_walk(const std::shared_ptr<const Grammar>& g, uint64_t seed, size_t max_bytes = 400,
                             std::string_view closers = "\"]}\n") {
  std::mt19937_64 rng(seed);
  Matcher m(g);
  Walk w;
  std::vector<uint8_t> allowed;
  while (w.text.size() < max_bytes) {
    if (m.is_complete() && (m.is_dead() || rng() % 2 == 0)) break;
    m.fill_mask(byte_trie(), allowed);
    std::vector<int> options, close;
    for (int b = 0; b < 256; ++b) {
      if (!allowed[static_cast<size_t>(b)]) continue;
      options.push_back(b);
      if (closers.find(static_cast<char>(b)) != std::string_view::npos) close.push_back(b);
    }
    if (options.empty()) break;
    const auto& pool = (!close.empty() && rng() % 100 < 15) ? close : options;
    const char c = static_cast<char>(pool[rng() % pool.size()]);
    EXPECT_TRUE(m.accept(std::string_view(&c, 1)));
    w.text += c;
  }
  w.complete = m.is_complete();
  return w;
}

// Checks fill_mask against can_accept for every token (the exactness property).
inline void expect_mask_exact(const Matcher& m, const TokenTrie& trie, const std::vector<std::string>& vocab,
                              const std::string& where) {
  std::vector<uint8_t> mask;
  m.fill_mask(trie, mask);
  ASSERT_EQ(mask.size(), vocab.size());
  size_t bad = 0;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const bool expect = !vocab[i].empty() && m.can_accept(vocab[i]);
    if ((mask[i] != 0) != expect && bad++ < 5) {
      ADD_FAILURE() << where << ": token " << i << " '" << vocab[i] << "' mask=" << int(mask[i]) << " can_accept=" << expect;
    }
  }
  EXPECT_EQ(bad, 0u) << where;
}

}  // namespace splash::grammar::testing
