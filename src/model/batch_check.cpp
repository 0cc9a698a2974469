// The batch checks every backend makes before it runs a forward pass.
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
    count.tokens += n;
    count.wanted += slice.logits;
  }
  if (count.tokens == 0) fail("forward: no tokens");
  if (count.tokens > info.max_batch_tokens)
    fail("forward: {} tokens in one pass (at most {})", count.tokens, info.max_batch_tokens);
  if (batch.size() > kMaxBatchSequences)
    fail("forward: {} sequences in one pass (at most {})", batch.size(), kMaxBatchSequences);
  return count;
}

}  // namespace splash::model
