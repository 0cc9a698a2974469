#include "engine/draft_state_store.h"

namespace splash::engine {

void DraftStateStore::put(cache::PrefixKey key, std::vector<float> state) {
  const size_t size = state.size() * sizeof(float);
  if (size == 0 || size > max_bytes_) return;
  if (const auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->state.size() * sizeof(float);
    entries_.erase(it->second);
    index_.erase(it);
  }
  while (!entries_.empty() && bytes_ + size > max_bytes_) {
    bytes_ -= entries_.back().state.size() * sizeof(float);
    index_.erase(entries_.back().key);
    entries_.pop_back();
  }
  entries_.push_front({key, std::move(state)});
  index_[key] = entries_.begin();
  bytes_ += size;
}

const std::vector<float>* DraftStateStore::find(cache::PrefixKey key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, it->second);
  return &entries_.front().state;
}

}  // namespace splash::engine
