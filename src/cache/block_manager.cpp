#include "cache/block_manager.h"

#include <algorithm>

#include "common/error.h"

namespace splash::cache {

PrefixKey extend_prefix(PrefixKey key, std::span<const int32_t> block_tokens) {
  // splitmix64-style mixing of each token into the running key.
  for (int32_t token : block_tokens) {
    uint64_t z = key ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull + (key << 6));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    key = z ^ (z >> 31);
  }
  return key;
}

BlockManager::BlockManager(int blocks, CopyBlock copy) : blocks_(blocks), copy_(std::move(copy)) {
  if (blocks <= 0) fail("the KV cache needs at least one block");
  free_.reserve(blocks);
  for (int b = blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out low ids first
}

void BlockManager::take(int block) {
  Block& b = blocks_[block];
  if (b.refs == 0 && b.indexed) evictable_.erase({b.last_used, -b.depth, block});
  ++b.refs;
}

void BlockManager::drop(int block) {
  Block& b = blocks_[block];
  if (b.refs <= 0) fail("KV block {} released more often than taken", block);
  if (--b.refs > 0) return;
  if (b.indexed) evictable_.insert({b.last_used, -b.depth, block});
  else free_.push_back(block);
}

void BlockManager::index(int block, PrefixKey parent, int depth, std::span<const int32_t> tokens) {
  Block& b = blocks_[block];
  b.indexed = true;
  b.parent = parent;
  b.depth = depth;
  b.filled = static_cast<int>(tokens.size());
  std::copy(tokens.begin(), tokens.end(), b.tokens);
  b.last_used = ++clock_;
  children_.emplace(parent, block);
}

void BlockManager::unindex(int block) {
  Block& b = blocks_[block];
  auto [first, last] = children_.equal_range(b.parent);
  for (auto it = first; it != last; ++it)
    if (it->second == block) {
      children_.erase(it);
      break;
    }
  b.indexed = false;
}

bool BlockManager::indexed_duplicate(PrefixKey parent, std::span<const int32_t> tokens) const {
  auto [first, last] = children_.equal_range(parent);
  for (auto it = first; it != last; ++it) {
    const Block& b = blocks_[it->second];
    if (b.filled >= static_cast<int>(tokens.size()) && std::equal(tokens.begin(), tokens.end(), b.tokens)) return true;
  }
  return false;
}

int BlockManager::allocate() {
  int block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    block = std::get<2>(*evictable_.begin());
    evictable_.erase(evictable_.begin());
    unindex(block);
    ++evictions_;
  } else {
    return -1;
  }
  Block& b = blocks_[block];
  b.refs = 1;
  b.filled = 0;
  b.indexed = false;
  return block;
}

PrefixMatch BlockManager::acquire_prefix(std::span<const int32_t> tokens, int limit) {
  PrefixMatch match;
  limit = std::clamp(limit, 0, static_cast<int>(tokens.size()));
  PrefixKey key = kEmptyPrefix;
  const uint64_t now = ++clock_;
  while (match.tokens < limit) {
    const int pos = match.tokens;
    const auto want = tokens.subspan(pos, std::min<size_t>(kBlockTokens, tokens.size() - pos));
    int best = -1, best_length = 0;
    auto [first, last] = children_.equal_range(key);
    for (auto it = first; it != last; ++it) {
      const Block& b = blocks_[it->second];
      const int n = std::min<int>(b.filled, static_cast<int>(want.size()));
      const int common = static_cast<int>(std::mismatch(b.tokens, b.tokens + n, want.begin()).first - b.tokens);
      if (common > best_length) best = it->second, best_length = common;
    }
    if (best < 0) break;
    if (best_length == kBlockTokens && pos + kBlockTokens <= limit) {  // a whole block: share it
      take(best);
      blocks_[best].last_used = now;
      match.blocks.push_back(best);
      match.tokens += kBlockTokens;
      key = extend_prefix(key, want);
      continue;
    }
    // The match ends inside this block: copy its matching positions into a block of our own.
    const int copied = std::min(best_length, limit - pos);
    take(best);  // keeps it from being evicted by the allocation below
    const int fresh = allocate();
    if (fresh >= 0) {
      copy_(best, fresh, copied);
      blocks_[best].last_used = now;
      match.blocks.push_back(fresh);
      match.tokens += copied;
    }
    drop(best);
    break;
  }
  return match;
}

void BlockManager::publish(int block, PrefixKey key, int depth, std::span<const int32_t> block_tokens) {
  if (blocks_[block].indexed || indexed_duplicate(key, block_tokens)) return;
  index(block, key, depth, block_tokens);
}

void BlockManager::release(std::span<const int32_t> blocks, std::span<const int32_t> tokens, bool keep) {
  PrefixKey key = kEmptyPrefix;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const size_t begin = std::min(tokens.size(), i * kBlockTokens);
    const auto held = tokens.subspan(begin, std::min<size_t>(kBlockTokens, tokens.size() - begin));
    const int block = blocks[i];
    if (keep && !blocks_[block].indexed && !held.empty() && !indexed_duplicate(key, held))
      index(block, key, static_cast<int>(i), held);
    key = extend_prefix(key, held);
    drop(block);
  }
}

BlockCounters BlockManager::counters() const {
  BlockCounters c;
  c.total = static_cast<int>(blocks_.size());
  c.free = static_cast<int>(free_.size());
  c.cached = static_cast<int>(evictable_.size());
  c.in_use = c.total - c.free - c.cached;
  c.evictions = evictions_;
  return c;
}

}  // namespace splash::cache
