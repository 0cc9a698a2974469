#pragma once
// Hands one request's events from the engine's worker thread to the HTTP thread that
// writes them. If the HTTP side goes away (client disconnected), push() returns false,
// which cancels the generation.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/chat_request.h"

namespace splash::server {

class EventChannel {
 public:
  bool push(const engine::ChatEvent& event) {
    std::lock_guard lock(mutex_);
    if (abandoned_) return false;
    events_.push_back(event);
    ready_.notify_one();
    return true;
  }

  // The next event, or nullopt after `timeout` without one.
  std::optional<engine::ChatEvent> pop(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    engine::ChatEvent event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

  void abandon() {
    std::lock_guard lock(mutex_);
    abandoned_ = true;
    events_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<engine::ChatEvent> events_;
  bool abandoned_ = false;
};

}  // namespace splash::server
