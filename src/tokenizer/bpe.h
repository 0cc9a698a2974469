#pragma once
// The merge step of byte-level BPE. A word starts as one symbol per byte; repeatedly the
// adjacent pair with the best (lowest) merge rank is replaced by its merged token, the leftmost
// pair winning a tie, until no adjacent pair has a merge. This is the order Hugging Face's BPE
// model uses, and equivalent to GPT-2's reference loop.
//
// Implementation: symbols form a doubly linked list over an array and candidate pairs wait in a
// min-heap keyed by (rank, position); a candidate made stale by an earlier merge is dropped when
// popped. That is O(n log n) per word, so a 1 MB word (one long run of letters) stays cheap.
// Short words (the vast majority) use a plain rescan instead, which allocates nothing.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace splash::tokenizer {

class BpeMerges {
 public:
  // Merges are added best first: the rank is the order of addition. A pair added twice keeps
  // its first (better) rank.
  void add(int32_t left, int32_t right, int32_t merged);
  size_t size() const { return ranks_.size(); }

  // Merges `symbols` (token ids) in place until no adjacent pair has a merge.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find(int32_t left, int32_t right) const;
  static constexpr int32_t kShortWord = 24;  // up to this many symbols, a plain rescan is faster
  void apply_short(std::vector<int32_t>& symbols) const;

  std::unordered_map<uint64_t, Merge> ranks_;
};

}  // namespace splash::tokenizer
