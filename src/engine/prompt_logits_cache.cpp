#include "engine/prompt_logits_cache.h"

#include <algorithm>

#include "cache/block_manager.h"

namespace splash::engine {

uint64_t PromptLogitsCache::key_of(std::span<const int32_t> prompt) {
  return cache::extend_prefix(cache::kEmptyPrefix, prompt) ^ prompt.size();
}

void PromptLogitsCache::store(std::span<const int32_t> prompt, std::span<const float> logits) {
  if (capacity_ == 0) return;
  const uint64_t key = key_of(prompt);
  entries_.remove_if([&](const Entry& e) { return e.key == key && std::equal(e.prompt.begin(), e.prompt.end(), prompt.begin(), prompt.end()); });
  if (entries_.size() >= capacity_) entries_.pop_back();
  entries_.push_front({key, {prompt.begin(), prompt.end()}, {logits.begin(), logits.end()}});
}

const std::vector<float>* PromptLogitsCache::find(std::span<const int32_t> prompt) {
  const uint64_t key = key_of(prompt);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->key == key && std::equal(it->prompt.begin(), it->prompt.end(), prompt.begin(), prompt.end())) {
      entries_.splice(entries_.begin(), entries_, it);  // most recently used
      return &entries_.front().logits;
    }
  return nullptr;
}

}  // namespace splash::engine
