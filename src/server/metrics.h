#pragma once
// GET /metrics: the server's and the engine's counters in the Prometheus text exposition
// format (version 0.0.4), for an operator's scraper. Routes are labelled by their pattern
// (/v1/responses/{id}), never by the raw path, so a client cannot grow the label set.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

#include "engine/engine_service.h"

namespace splash::server {

// The route pattern a path belongs to, or "other".
std::string_view route_label(std::string_view path);

// Requests answered, by method, route pattern and status (every response, errors included).
class RequestCounts {
 public:
  void add(std::string_view method, std::string_view path, int status);
  using Key = std::tuple<std::string, std::string, int>;  // method, route, status
  std::map<Key, uint64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<Key, uint64_t> counts_;
};

struct MetricsInput {
  engine::EngineCounters engine;
  engine::LatencySnapshots latencies;
  std::map<RequestCounts::Key, uint64_t> requests;
  double uptime_seconds = 0.0;
};

std::string prometheus_text(const MetricsInput& input);

}  // namespace splash::server
