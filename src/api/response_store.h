#pragma once
// The Responses API's server-side state: responses created with store != false are kept so
// that GET /v1/responses/{id} can return them and a later request can continue from one
// with previous_response_id. Bounded: least recently used responses are dropped once
// kMaxResponses or kMaxBytes is exceeded (clients that need more keep the history themselves,
// as Codex does with store: false). The response is kept serialized, so the bytes counted
// are the bytes held (a parsed JSON tree takes several times its text).
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"

namespace splash::api {

struct StoredResponse {
  std::string response_json;                     // the response object as returned, serialized
  std::vector<chat::ChatMessage> conversation;  // its input (without instructions) and output
};

class ResponseStore {
 public:
  static constexpr size_t kMaxResponses = 1000;
  static constexpr size_t kMaxBytes = 256u << 20;  // the memory plan sets it aside for a server

  void put(const std::string& id, StoredResponse stored);
  std::optional<StoredResponse> get(const std::string& id);
  bool erase(const std::string& id);
  size_t size() const;

 private:
  static size_t footprint(const StoredResponse& stored);
  void evict_locked();

  mutable std::mutex mutex_;
  std::list<std::pair<std::string, StoredResponse>> order_;  // most recently used first
  std::unordered_map<std::string, decltype(order_)::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace splash::api
