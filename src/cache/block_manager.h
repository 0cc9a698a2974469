#pragma once
// Which KV blocks hold what: the paged cache's bookkeeping (the memory itself belongs to the
// model). Blocks hold kBlockTokens positions. A sequence owns a list of blocks (its block
// table); full blocks are published in a prefix index keyed by the hash chain of every token
// before them plus their own tokens, so a later request with the same prefix takes them by
// reference instead of computing them. Blocks are reference-counted: a shared block is read
// only; a partly filled block is shared by copying it (copy-on-write). Blocks nobody holds
// stay cached and are evicted least-recently-used, only when a fresh block is needed.
//
// Hybrid models publish their blocks too; their prefix hits end where a recurrent-state
// snapshot is kept (state_snapshots.h), which this index does not need to know.
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/model.h"

namespace splash::cache {

inline constexpr int kBlockTokens = model::kKvBlockTokens;

// The key of the prefix that ends at a block boundary: a hash chain over the tokens, so a
// block is found by (key of what precedes it, its own tokens).
using PrefixKey = uint64_t;
inline constexpr PrefixKey kEmptyPrefix = 0x9e3779b97f4a7c15ull;
PrefixKey extend_prefix(PrefixKey key, std::span<const int32_t> block_tokens);

struct BlockCounters {
  int total = 0;
  int in_use = 0;    // referenced by a running sequence
  int cached = 0;    // held by nobody, kept for reuse (evictable)
  int free = 0;
  uint64_t evictions = 0;
};

// The blocks a new sequence starts with: its reusable prefix.
struct PrefixMatch {
  std::vector<int32_t> blocks;  // shared full blocks, then possibly one private copied block
  int tokens = 0;               // positions they hold (the sequence computes from here on)
};

class BlockManager {
 public:
  // copy(from, to, tokens) copies a block's first positions (the model's copy_kv_block).
  using CopyBlock = std::function<void(int from, int to, int tokens)>;
  BlockManager(int blocks, CopyBlock copy);

  // The longest cached prefix of `tokens`, at most `limit` tokens: full blocks are taken by
  // reference; where the match ends inside a block, its matching positions are copied into
  // a fresh block the sequence owns. Marks what it uses as recently used.
  PrefixMatch acquire_prefix(std::span<const int32_t> tokens, int limit);
  // A fresh block for a sequence (a free one, else the least recently used cached one), or
  // -1 when every block is in use.
  int allocate();
  // Registers a sequence's block that has just been filled (kBlockTokens tokens after the
  // prefix `key`, the sequence's block number `depth`) so others can share it. A duplicate
  // of a published block stays private.
  void publish(int block, PrefixKey key, int depth, std::span<const int32_t> block_tokens);
  // Ends a sequence's claim on its blocks. `tokens` are what its blocks hold (its computed
  // positions); `keep` publishes the partly filled last block for later reuse (its contents
  // are final); without it (contents unknown after a failure) private blocks are freed.
  void release(std::span<const int32_t> blocks, std::span<const int32_t> tokens, bool keep);

  // Blocks a new sequence could get now: free plus evictable.
  int available() const { return static_cast<int>(free_.size() + evictable_.size()); }
  BlockCounters counters() const;

 private:
  struct Block {
    int refs = 0;
    bool indexed = false;
    PrefixKey parent = 0;
    int depth = 0;  // blocks before it in its prefix (deeper blocks are evicted first)
    int filled = 0;
    int32_t tokens[kBlockTokens] = {};
    uint64_t last_used = 0;
  };
  void take(int block);
  void drop(int block);
  void index(int block, PrefixKey parent, int depth, std::span<const int32_t> tokens);
  void unindex(int block);
  bool indexed_duplicate(PrefixKey parent, std::span<const int32_t> tokens) const;

  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::unordered_multimap<PrefixKey, int32_t> children_;  // prefix key -> blocks that continue it
  std::set<std::tuple<uint64_t, int, int32_t>> evictable_;  // (last used, -depth, block)
  CopyBlock copy_;
  uint64_t clock_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace splash::cache
