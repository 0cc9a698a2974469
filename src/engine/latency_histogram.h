#pragma once
// A histogram of durations in the Prometheus sense: fixed upper bounds in seconds, a count
// per bucket, the sum and the count of all observations. The engine thread observes; HTTP
// threads read snapshots (GET /metrics).
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

namespace splash::engine {

class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void observe(double seconds) {
    const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
    std::lock_guard lock(mutex_);
    ++counts_[bucket];
    sum_ += seconds;
    ++count_;
  }

  struct Snapshot {
    std::vector<double> bounds;       // upper bounds, ascending (+Inf implied after the last)
    std::vector<uint64_t> cumulative; // observations <= each bound, then all of them
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const {
    std::lock_guard lock(mutex_);
    Snapshot s{bounds_, {}, sum_, count_};
    uint64_t running = 0;
    for (uint64_t c : counts_) s.cumulative.push_back(running += c);
    return s;
  }

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, the last one past every bound
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

}  // namespace splash::engine
