#pragma once
// Turns logits into the next token: logit bias, repetition/presence/frequency penalties,
// then greedy, or top-k / top-p / min-p / temperature sampling from a seeded generator
// (same seed, same logits: same token on every machine).
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

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

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // history: the tokens of the sequence so far (prompt and generated), for the penalties.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same, over only the tokens with allowed[id] != 0 (constrained decoding); -1 when the
  // mask allows none. The mask is applied before top-k/top-p/min-p, so they choose among
  // allowed tokens.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history, std::span<const uint8_t> allowed);
  uint64_t seed() const { return seed_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  double next_uniform();  // in [0, 1), identical across standard libraries

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<float> adjusted_;
  std::vector<Candidate> candidates_;
};

}  // namespace splash::engine
