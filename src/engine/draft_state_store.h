#pragma once
// What a drafter knew of a prefix, kept beside the prefix cache (Drafter::export_state): a
// block draft's context of each full KV block, keyed like the block (its prefix key). A
// request that reuses a cached prefix computes no hidden states for it, so its drafter takes
// the prefix's context from here instead (a key collision, or an entry gone, costs guesses,
// never output). Least recently used entries go first past the byte budget.
#include <cstddef>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_manager.h"

namespace splash::engine {

// The store's byte budget unless the engine is given another (EngineOptions).
inline constexpr size_t kDraftStateBytes = size_t{128} << 20;

class DraftStateStore {
 public:
  explicit DraftStateStore(size_t max_bytes) : max_bytes_(max_bytes) {}
  void put(cache::PrefixKey key, std::vector<float> state);
  // The state kept under this key (marked recently used), or null. Valid until the next put().
  const std::vector<float>* find(cache::PrefixKey key);
  size_t bytes() const { return bytes_; }
  size_t entries() const { return index_.size(); }

 private:
  struct Entry {
    cache::PrefixKey key;
    std::vector<float> state;
  };
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<cache::PrefixKey, std::list<Entry>::iterator> index_;
};

}  // namespace splash::engine
