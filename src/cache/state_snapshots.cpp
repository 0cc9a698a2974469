#include "cache/state_snapshots.h"

#include <algorithm>

namespace splash::cache {

// A prefix's key: a 64-bit hash chained over its tokens, to find candidates in one walk over
// a prompt; a candidate's tokens are then compared with the entry's own.
StateSnapshots::Key StateSnapshots::extend(Key key, int32_t token) {
  key ^= static_cast<uint32_t>(token) + 0x9e3779b97f4a7c15ull + (key << 6) + (key >> 2);
  key *= 0xff51afd7ed558ccdull;
  return key ^ (key >> 29);
}

StateSnapshots::Key StateSnapshots::key_of(std::span<const int32_t> prefix) {
  Key key = 0x243f6a8885a308d3ull;
  for (const int32_t token : prefix) key = extend(key, token);
  return key;
}

StateSnapshots::StateSnapshots(int count) : entries_(static_cast<size_t>(std::max(count, 0))) {
  for (auto& entry : entries_) entry.tokens = -1;
}

int StateSnapshots::find(std::span<const int32_t> prefix, Key key) const {
  const auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const Entry& entry = entries_[it->second];
  return std::equal(entry.prefix.begin(), entry.prefix.end(), prefix.begin(), prefix.end()) ? it->second : -1;
}

std::vector<StateSnapshots::Candidate> StateSnapshots::candidates(std::span<const int32_t> tokens, int limit) const {
  std::vector<Candidate> found;
  if (by_key_.empty()) return found;
  limit = std::min<int>(limit, static_cast<int>(tokens.size()));
  Key key = key_of({});
  for (int n = 1; n <= limit; ++n) {
    key = extend(key, tokens[n - 1]);
    if (by_key_.count(key) == 0) continue;  // (cheap: the tokens are compared only for a key found)
    if (const int snapshot = find(tokens.first(n), key); snapshot >= 0) found.push_back({snapshot, n});
  }
  std::reverse(found.begin(), found.end());
  return found;
}

void StateSnapshots::use(int snapshot) {
  entries_.at(snapshot).last_used = ++clock_;
  entries_[snapshot].interior = false;
  ++hits_;
}

void StateSnapshots::discard(int snapshot) {
  Entry& entry = entries_.at(snapshot);
  if (entry.tokens < 0) return;
  if (const auto it = by_key_.find(entry.key); it != by_key_.end() && it->second == snapshot) by_key_.erase(it);
  entry.tokens = -1;
  entry.interior = false;
  entry.last_used = 0;
  entry.prefix.clear();
}

bool StateSnapshots::holds(std::span<const int32_t> prefix) const { return find(prefix, key_of(prefix)) >= 0; }

int StateSnapshots::store(std::span<const int32_t> prefix, bool interior) {
  if (entries_.empty() || prefix.empty()) return -1;
  const Key key = key_of(prefix);
  if (const int held = find(prefix, key); held >= 0) {
    entries_[held].last_used = ++clock_;
    entries_[held].interior = entries_[held].interior && interior;
    return -1;
  }
  const auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    if ((a.tokens >= 0) != (b.tokens >= 0)) return a.tokens < 0;  // empty ones first,
    if (a.interior != b.interior) return a.interior;              // then interior ones,
    return a.last_used < b.last_used;                             // each least recently used first
  });
  const int snapshot = static_cast<int>(oldest - entries_.begin());
  if (oldest->tokens >= 0)
    if (const auto it = by_key_.find(oldest->key); it != by_key_.end() && it->second == snapshot) by_key_.erase(it);
  oldest->key = key;
  oldest->tokens = static_cast<int>(prefix.size());
  oldest->prefix.assign(prefix.begin(), prefix.end());
  oldest->interior = interior;
  oldest->last_used = ++clock_;
  by_key_[oldest->key] = snapshot;
  ++saved_;
  return snapshot;
}

SnapshotCounters StateSnapshots::counters() const {
  SnapshotCounters c;
  c.total = static_cast<int>(entries_.size());
  c.held = static_cast<int>(by_key_.size());
  c.saved = saved_;
  c.hits = hits_;
  return c;
}

}  // namespace splash::cache
