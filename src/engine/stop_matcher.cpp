#include "engine/stop_matcher.h"

#include <algorithm>

namespace splash::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& stop : stops)
    if (!stop.empty()) stops_.push_back(std::move(stop));
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  size_t first = std::string::npos;
  for (const auto& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at < first) {
      first = at;
      matched_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string shown = pending_.substr(0, first);
    pending_.clear();
    return shown;
  }
  // Hold back the longest tail of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t length = longest; length > hold; --length)
      if (pending_.compare(pending_.size() - length, length, stop, 0, length) == 0) {
        hold = length;
        break;
      }
  }
  std::string shown = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return shown;
}

std::string StopMatcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return stopped_ ? std::string() : rest;
}

}  // namespace splash::engine
