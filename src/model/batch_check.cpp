// The batch checks every backend makes before it runs a forward pass.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "model/model.h"

namespace splash::model {

BatchCount check_batch(std::span<const SequenceSlice> batch, const ModelInfo& info) {
  BatchCount count;
  for (const auto& slice : batch) {
    const int n = static_cast<int>(slice.tokens.size());
    if (n == 0) fail("forward: a sequence without tokens");
    if (slice.first_position < 0 || slice.first_position + static_cast<int64_t>(n) > info.context)
      fail("the sequence of {} tokens does not fit the context of {} tokens", slice.first_position + n, info.context);
    if (static_cast<int64_t>(slice.block_table.size()) * kKvBlockTokens < slice.first_position + n)
      fail("forward: the block table of {} blocks is too short for {} positions", slice.block_table.size(),
           slice.first_position + n);
    for (int32_t block : slice.block_table)
      if (block < 0 || block >= info.kv_blocks) fail("forward: block {} outside the pool of {}", block, info.kv_blocks);
    for (int32_t id : slice.tokens)
      if (id < 0 || id >= info.vocab) fail("token id {} is outside the vocabulary of {}", id, info.vocab);
    if (!slice.embeddings.empty() && slice.embeddings.size() != slice.tokens.size())
      fail("forward: {} embedding entries for {} tokens", slice.embeddings.size(), n);
    if (slice.logits < 0 || slice.logits > n || slice.logits > info.max_logits_per_slice)
      fail("forward: logits of {} positions of a {}-token slice (this model returns at most {} a slice)", slice.logits, n,
           info.max_logits_per_slice);
    if (info.state_slots > 0 && (slice.state_slot < 0 || slice.state_slot >= info.state_slots))
      fail("forward: recurrent-state slot {} outside the {} slots of this hybrid model", slice.state_slot,
           info.state_slots);
    count.tokens += n;
    count.wanted += slice.logits;
    if (slice.best_only) count.best_only += slice.logits;
  }
  if (count.tokens == 0) fail("forward: no tokens");
  if (count.tokens > info.max_batch_tokens)
    fail("forward: {} tokens in one pass (at most {})", count.tokens, info.max_batch_tokens);
  if (batch.size() > kMaxBatchSequences)
    fail("forward: {} sequences in one pass (at most {})", batch.size(), kMaxBatchSequences);
  if (info.state_slots > 0)
    for (size_t i = 0; i < batch.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (batch[i].state_slot == batch[j].state_slot)
          fail("forward: two sequences of one pass share recurrent-state slot {}", batch[i].state_slot);
  return count;
}

namespace {
// Larger logit, larger key; -0 and +0 one value; a NaN below every number (as the GPU's
// selection orders them).
uint32_t order_key(float logit) {
  if (std::isnan(logit)) return 1;
  if (logit == 0.0f) logit = 0.0f;
  const auto bits = std::bit_cast<uint32_t>(logit);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
}  // namespace

void select_best_tokens(std::span<const float> row, std::span<TokenLogit> best) {
  struct Keyed {
    uint32_t key;
    int32_t id;
  };
  // Orders the better token first: the larger key, then the lower id.
  const auto better = [](const Keyed& a, const Keyed& b) { return a.key != b.key ? a.key > b.key : a.id < b.id; };
  const size_t keep = std::min(best.size(), row.size());
  // A bounded heap whose front is the worst token kept so far.
  std::vector<Keyed> heap;
  heap.reserve(keep);
  for (size_t i = 0; i < row.size() && keep > 0; ++i) {
    const Keyed token{order_key(row[i]), static_cast<int32_t>(i)};
    if (heap.size() < keep) {
      heap.push_back(token);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(token, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = token;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (size_t i = 0; i < best.size(); ++i)
    best[i] = i < heap.size() ? TokenLogit{heap[i].id, row[heap[i].id]}
                              : TokenLogit{-1, -std::numeric_limits<float>::infinity()};
}

}  // namespace splash::model
