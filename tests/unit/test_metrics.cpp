// /metrics: route labels (hostile paths cannot grow the set), histogram buckets, and the
// text exposition format.
#include <gtest/gtest.h>

#include "engine/latency_histogram.h"
#include "server/metrics.h"

namespace splash::server {
namespace {

TEST(Metrics, RouteLabelsArePatterns) {
  EXPECT_EQ(route_label("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(route_label("/v1/responses/resp_123"), "/v1/responses/{id}");
  EXPECT_EQ(route_label("/v1/models/splash-model"), "/v1/models/{id}");
  EXPECT_EQ(route_label("/"), "/");
  for (const char* hostile : {"/v1/responses/", "/v1/models/", "", "/v1//models", "/STATUS", "/status/",
                              "/v1/chat/completions/x", "/%2e%2e/etc/passwd", "/a\"b\nc"})
    EXPECT_EQ(route_label(hostile), "other") << hostile;
  EXPECT_EQ(route_label(std::string(100000, 'a')), "other");
}

TEST(Metrics, RequestCountsFoldUnknownMethods) {
  RequestCounts counts;
  counts.add("GET", "/status", 200);
  counts.add("GET", "/status", 200);
  counts.add("BREW", "/status", 405);
  counts.add("GET", "/nope", 404);
  const auto snapshot = counts.snapshot();
  EXPECT_EQ(snapshot.at({"GET", "/status", 200}), 2u);
  EXPECT_EQ(snapshot.at({"other", "/status", 405}), 1u);
  EXPECT_EQ(snapshot.at({"GET", "other", 404}), 1u);
  EXPECT_EQ(snapshot.size(), 3u);
}

TEST(Metrics, HistogramBucketsAreUpperBoundsInclusive) {
  engine::LatencyHistogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0}) h.observe(v);
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 5}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 4.65);
}

TEST(Metrics, TextFormat) {
  MetricsInput input;
  input.engine.generated_tokens = 42;
  input.engine.blocks = {100, 3, 7, 90, 1};
  engine::LatencyHistogram ttft({0.5}), itl({0.01});
  ttft.observe(0.2);
  itl.observe(0.02);
  input.latencies = {ttft.snapshot(), itl.snapshot()};
  input.requests[{"POST", "/v1/messages", 200}] = 5;
  const std::string text = prometheus_text(input);
  for (const char* line : {"# TYPE splash_generated_tokens_total counter\n", "splash_generated_tokens_total 42\n",
                           "splash_http_requests_total{method=\"POST\",route=\"/v1/messages\",status=\"200\"} 5\n",
                           "splash_kv_blocks{state=\"in_use\"} 3\n", "splash_kv_blocks_total 100\n",
                           "# TYPE splash_time_to_first_token_seconds histogram\n",
                           "splash_time_to_first_token_seconds_bucket{le=\"0.5\"} 1\n",
                           "splash_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n",
                           "splash_inter_token_seconds_bucket{le=\"0.01\"} 0\n",
                           "splash_inter_token_seconds_count 1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace splash::server
