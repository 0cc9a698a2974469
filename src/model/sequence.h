#pragma once
// One sequence on a model's KV pool, for callers that run a single sequence at a time
// (`splash run`, `bench`, `eval`, tests): it owns blocks [first_block, first_block + n) in
// order, feeds long inputs in kMaxBatchTokens chunks and can forget its tail. The server
// never uses this: its sequences get their blocks from the cache layer.
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace splash::model {

class Sequence {
 public:
  // Takes blocks first_block.. of the pool, enough for the model's whole context (and a
  // hybrid model's recurrent-state slot state_slot).
  explicit Sequence(Model& model, int first_block = 0, int state_slot = 0);

  const ModelInfo& info() const { return model_.info(); }
  // Appends tokens and returns the logits after the last one. `embeddings` (empty, or one
  // entry per token) replaces the embedding of tokens whose entry is not null.
  // With `hidden`, the tokens' tapped hidden states (LoadOptions::hidden_taps) are appended to it.
  std::span<const float> forward(std::span<const int32_t> tokens, std::span<const float* const> embeddings = {},
                                 std::vector<float>* hidden = nullptr);
  // Appends a verify block (a sampled token and drafted guesses, at most
  // info().max_logits_per_slice) and returns every position's logits, [tokens][vocab].
  std::span<const float> verify(std::span<const int32_t> tokens);
  // Appends one token and returns its row's best tokens (kBestTokens, best first: found on
  // the device where the model does that, else selected from the row); whole_row() reads the
  // row itself, until the next pass.
  std::span<const TokenLogit> forward_best(int32_t token);
  std::span<const float> whole_row() { return model_.whole_row(0); }
  // The last pass's tapped hidden states (Model::hidden_taps): the rows of the tokens it appended.
  std::span<const float> hidden_taps() const { return model_.hidden_taps(); }
  int position() const { return position_; }
  // Forgets everything after the first n tokens (n <= position()). A hybrid model's
  // recurrent state goes back only inside the last verify block (Model::rewind_state), else
  // forgets all (n = 0) or nothing (n = position()).
  void truncate(int n);

 private:
  Model& model_;
  std::vector<int32_t> blocks_;
  int state_slot_ = -1;
  int position_ = 0;
};

}  // namespace splash::model
