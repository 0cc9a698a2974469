#include "model/sequence.h"

#include <algorithm>

#include "common/error.h"

namespace splash::model {

Sequence::Sequence(Model& model, int first_block, int state_slot) : model_(model) {
  if (model.info().state_slots > 0) {
    if (state_slot < 0 || state_slot >= model.info().state_slots)
      fail("recurrent-state slot {} outside the model's {}", state_slot, model.info().state_slots);
    state_slot_ = state_slot;
  }
  const int blocks = (model.info().context + kKvBlockTokens - 1) / kKvBlockTokens;
  if (first_block < 0 || first_block + blocks > model.info().kv_blocks)
    fail("a sequence of {} tokens needs {} KV blocks from block {}; the pool has {}", model.info().context, blocks,
         first_block, model.info().kv_blocks);
  for (int b = 0; b < blocks; ++b) blocks_.push_back(first_block + b);
}

std::span<const float> Sequence::forward(std::span<const int32_t> tokens, std::span<const float* const> embeddings,
                                         std::vector<float>* hidden) {
  if (tokens.empty()) fail("forward: no tokens");
  if (!embeddings.empty() && embeddings.size() != tokens.size())
    fail("forward: {} embedding entries for {} tokens", embeddings.size(), tokens.size());
  std::span<const float> logits;
  const size_t chunk = static_cast<size_t>(model_.info().max_batch_tokens);
  for (size_t start = 0; start < tokens.size(); start += chunk) {
    const size_t count = std::min(chunk, tokens.size() - start);
    SequenceSlice slice{tokens.subspan(start, count), position_, blocks_, start + count == tokens.size(),
                        embeddings.empty() ? embeddings : embeddings.subspan(start, count)};
    slice.state_slot = state_slot_;
    logits = model_.forward({&slice, 1});
    position_ += static_cast<int>(count);
    if (hidden) {
      const auto taps = model_.hidden_taps();
      hidden->insert(hidden->end(), taps.begin(), taps.end());
    }
  }
  return logits;
}

std::span<const float> Sequence::verify(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("verify: no tokens");
  SequenceSlice slice{tokens, position_, blocks_, static_cast<int>(tokens.size())};
  slice.state_slot = state_slot_;
  const auto logits = model_.forward({&slice, 1});
  position_ += static_cast<int>(tokens.size());
  return logits;
}

std::span<const TokenLogit> Sequence::forward_best(int32_t token) {
  SequenceSlice slice{{&token, 1}, position_, blocks_, 1};
  slice.best_only = true;
  slice.state_slot = state_slot_;
  model_.forward({&slice, 1});
  ++position_;
  return model_.best_tokens();
}

void Sequence::truncate(int n) {
  if (n < 0 || n > position_) fail("truncate({}) outside the sequence of {} tokens", n, position_);
  if (state_slot_ >= 0 && n != 0 && n != position_) model_.rewind_state(state_slot_, n);  // (inside the last verify block)
  position_ = n;
}

}  // namespace splash::model
