#include "api/response_store.h"

namespace splash::api {

size_t ResponseStore::footprint(const StoredResponse& stored) {
  size_t bytes = stored.response_json.capacity() + sizeof(StoredResponse);
  for (const auto& m : stored.conversation) {
    bytes += m.role.size() + m.content.size() + m.tool_call_id.size() + m.reasoning.value_or("").size() + 64;
    for (const auto& call : m.tool_calls) bytes += call.id.size() + call.name.size() + call.arguments.size() + 32;
    for (const auto& image : m.images) bytes += image.file.size();
  }
  return bytes;
}

void ResponseStore::put(const std::string& id, StoredResponse stored) {
  const size_t bytes = footprint(stored);
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= footprint(it->second->second);
    order_.erase(it->second);
    index_.erase(it);
  }
  order_.emplace_front(id, std::move(stored));
  index_[id] = order_.begin();
  bytes_ += bytes;
  evict_locked();
}

void ResponseStore::evict_locked() {
  while (order_.size() > 1 && (order_.size() > kMaxResponses || bytes_ > kMaxBytes)) {
    bytes_ -= footprint(order_.back().second);
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= footprint(it->second->second);
  order_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

}  // namespace splash::api
