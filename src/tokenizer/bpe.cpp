#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

namespace splash::tokenizer {

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  ranks_.try_emplace(key(left, right), Merge{static_cast<int32_t>(ranks_.size()), merged});
}

const BpeMerges::Merge* BpeMerges::find(int32_t left, int32_t right) const {
  const auto it = ranks_.find(key(left, right));
  return it == ranks_.end() ? nullptr : &it->second;
}

namespace {

struct Candidate {
  int32_t rank;
  int32_t left;  // index of the left symbol; it keeps its index when it absorbs its neighbour
  int32_t left_id;
  int32_t right_id;
  int32_t merged;
  // std::priority_queue is a max-heap: "greater" here means "merged later".
  bool operator<(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : left > other.left;
  }
};

}  // namespace

void BpeMerges::apply_short(std::vector<int32_t>& symbols) const {
  // Most words are a few bytes long: rescanning all pairs after each merge costs less than
  // building the linked list and heap, and allocates nothing. Same order: lowest rank, leftmost.
  while (symbols.size() > 1) {
    const Merge* best = nullptr;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const Merge* m = find(symbols[i], symbols[i + 1]);
      if (m && (!best || m->rank < best->rank)) {
        best = m;
        best_at = i;
      }
    }
    if (!best) return;
    symbols[best_at] = best->merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
}

void BpeMerges::apply(std::vector<int32_t>& symbols) const {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  if (n <= kShortWord) {
    apply_short(symbols);
    return;
  }

  // Linked list over the original positions; a merged-away symbol is marked with id -1.
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<int32_t>& ids = symbols;

  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
  const auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const int32_t right = next[left];
    if (const Merge* m = find(ids[left], ids[right])) queue.push({m->rank, left, ids[left], ids[right], m->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = next[c.left];
    // Stale when either side has changed since the candidate was queued.
    if (ids[c.left] != c.left_id || right < 0 || ids[right] != c.right_id) continue;

    ids[c.left] = c.merged;
    ids[right] = -1;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    if (prev[c.left] >= 0) consider(prev[c.left]);
    consider(c.left);
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

}  // namespace splash::tokenizer
