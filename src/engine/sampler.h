#pragma once
// Turns logits into the next token: logit bias, repetition/presence/frequency penalties,
// then greedy, or top-k / top-p / min-p / temperature sampling from a seeded generator
// (same seed, same logits: same token on every machine).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/model.h"

namespace splash::engine {

struct SamplingParams {
  float temperature = 0.8f;       // <= 0: greedy
  int top_k = 40;                 // <= 0: off
  float top_p = 0.95f;            // >= 1: off
  float min_p = 0.05f;            // <= 0: off
  float repetition_penalty = 1.0f;  // 1: off; > 1 discourages tokens of the recent window
  int penalty_window = 64;        // tokens looked back for the three penalties (-1: all)
  float presence_penalty = 0.0f;  // subtracted once from every token present in the window
  float frequency_penalty = 0.0f; // subtracted per occurrence in the window
  std::map<int32_t, float> logit_bias;
  std::optional<uint64_t> seed;   // unset: a random seed

  bool greedy() const { return temperature <= 0.0f; }
};

// Checks ranges; returns an error message naming the offending parameter, or empty.
// vocab_size 0 skips the logit_bias id check (for validating flags before a model loads).
std::string validate(const SamplingParams& params, int vocab_size);

// The logits a sampler draws from: a whole row, or a row's best tokens (model::kBestTokens,
// best first, as a pass returns them for a best_only slice) with a way to read the whole
// row, fetched only when the best tokens cannot decide exactly.
class LogitsRow {
 public:
  explicit LogitsRow(std::span<const float> whole) : whole_(whole) {}
  LogitsRow(std::span<const model::TokenLogit> best, std::function<std::span<const float>()> read_whole)
      : best_(best), read_whole_(std::move(read_whole)) {}

  std::span<const model::TokenLogit> best() const { return best_; }
  std::span<const float> whole() {
    if (whole_.empty() && read_whole_) whole_ = read_whole_();
    return whole_;
  }

 private:
  std::span<const float> whole_;
  std::span<const model::TokenLogit> best_;
  std::function<std::span<const float>()> read_whole_;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // history: the tokens of the sequence so far (prompt and generated), for the penalties.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same, over only the tokens with allowed[id] != 0 (constrained decoding); -1 when the
  // mask allows none. The mask is applied before top-k/top-p/min-p, so they choose among
  // allowed tokens.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history, std::span<const uint8_t> allowed);
  // The same from a LogitsRow: from its best tokens alone when they decide the token exactly
  // (the same token and the same random draws as from the whole row), else from the whole row.
  int32_t sample(LogitsRow& row, std::span<const int32_t> history, std::span<const uint8_t> allowed = {});
  // Whether some adjustment can raise a token's logit (a positive bias, a repetition penalty
  // under 1, a negative presence or frequency penalty): then any token of the row may end up
  // first, and a row's best tokens cannot decide.
  bool raises_logits() const;
  uint64_t seed() const { return seed_; }

 private:
  using Candidate = model::TokenLogit;
  using Counts = std::unordered_map<int32_t, int>;
  double next_uniform();  // in [0, 1), identical across standard libraries
  bool penalizes() const;
  // How far below the best a token can be and still be drawn (its probability above e^-30).
  float window() const { return 30.0f * std::max(params_.temperature, 1.0f); }
  Counts penalty_counts(std::span<const int32_t> history) const;
  // A token's logit after its bias and penalties, the same float steps on both paths.
  float adjusted(int32_t id, float logit, const Counts& counts) const;
  // Top-k / top-p / min-p / temperature over candidates_ (the tokens within reach of the best).
  int32_t draw();
  std::optional<int32_t> sample_from_best(std::span<const model::TokenLogit> best, std::span<const int32_t> history,
                                          std::span<const uint8_t> allowed);

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<float> adjusted_;
  std::vector<Candidate> candidates_;
};

}  // namespace splash::engine
