#pragma once
// The next-token logits after the last few prompts, keyed by their exact tokens. An exact
// replay of a cached prompt (an agent retrying, a client re-sending the same conversation)
// then samples its first token without any forward pass: the time to first token is the
// tokenizer's. The last prompt token's keys and values are still computed, together with
// the first generated token, in the next step.
#include <cstdint>
#include <list>
#include <span>
#include <vector>

namespace splash::engine {

class PromptLogitsCache {
 public:
  explicit PromptLogitsCache(size_t capacity = 8) : capacity_(capacity) {}

  void store(std::span<const int32_t> prompt, std::span<const float> logits);
  // The logits stored for exactly this prompt, or null. Valid until the next store().
  const std::vector<float>* find(std::span<const int32_t> prompt);

 private:
  struct Entry {
    uint64_t key;
    std::vector<int32_t> prompt;  // compared in full: the key only narrows the search
    std::vector<float> logits;
  };
  static uint64_t key_of(std::span<const int32_t> prompt);
  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace splash::engine
