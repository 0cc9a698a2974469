#include "server/metrics.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace splash::server {
namespace {

constexpr std::array<std::string_view, 13> kRoutes = {
    "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/models",
    "/tokenize", "/detokenize", "/apply-template", "/status", "/health", "/ready", "/metrics", "/"};

// Label values as the format wants them: backslash, double quote and newline escaped.
std::string escaped(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// A float as the format writes it (integral values without a fraction, +Inf).
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string& out, std::string_view name, std::string_view type, std::string_view help, double value) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, number(value));
}

void histogram(std::string& out, std::string_view name, std::string_view help,
               const engine::LatencyHistogram::Snapshot& h) {
  header(out, name, "histogram", help);
  for (size_t i = 0; i < h.cumulative.size(); ++i) {
    const double bound = i < h.bounds.size() ? h.bounds[i] : INFINITY;
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, number(bound), h.cumulative[i]);
  }
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, number(h.sum), name, h.count);
}

}  // namespace

std::string_view route_label(std::string_view path) {
  for (std::string_view route : kRoutes)
    if (path == route) return route;
  if (path.starts_with("/v1/responses/") && path.size() > 14) return "/v1/responses/{id}";
  if (path.starts_with("/v1/models/") && path.size() > 11) return "/v1/models/{id}";
  return "other";
}

void RequestCounts::add(std::string_view method, std::string_view path, int status) {
  // Methods outside the usual set are one label too: a client must not grow the set.
  constexpr std::array<std::string_view, 6> kMethods = {"GET", "POST", "HEAD", "DELETE", "OPTIONS", "PUT"};
  std::string_view m = "other";
  for (std::string_view known : kMethods)
    if (method == known) m = known;
  std::lock_guard lock(mutex_);
  ++counts_[{std::string(m), std::string(route_label(path)), status}];
}

std::map<RequestCounts::Key, uint64_t> RequestCounts::snapshot() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

std::string prometheus_text(const MetricsInput& in) {
  const auto& e = in.engine;
  std::string out;
  header(out, "splash_http_requests_total", "counter", "HTTP requests answered, by method, route and status.");
  for (const auto& [key, count] : in.requests) {
    const auto& [method, route, status] = key;
    out += fmt::format("splash_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{}\"}} {}\n", escaped(method),
                       escaped(route), status, count);
  }
  scalar(out, "splash_requests_completed_total", "counter", "Generation requests that ran to their end.",
         static_cast<double>(e.requests_completed));
  scalar(out, "splash_requests_running", "gauge", "Requests generating now.", e.requests_running);
  scalar(out, "splash_requests_queued", "gauge", "Requests waiting for a place in the batch.", e.requests_queued);
  scalar(out, "splash_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
         static_cast<double>(e.prompt_tokens));
  scalar(out, "splash_cached_prompt_tokens_total", "counter",
         "Prompt tokens taken from the prefix cache instead of computed.", static_cast<double>(e.reused_prompt_tokens));
  scalar(out, "splash_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(e.generated_tokens));
  scalar(out, "splash_prefix_cache_hits_total", "counter", "Requests that reused part of a cached sequence.",
         static_cast<double>(e.cache_hits));
  scalar(out, "splash_preemptions_total", "counter", "Sequences paused to free KV blocks (resumed later).",
         static_cast<double>(e.preemptions));
  scalar(out, "splash_engine_steps_total", "counter", "Forward passes of the model.", static_cast<double>(e.steps));
  scalar(out, "splash_verify_steps_total", "counter", "Decode steps that verified drafted tokens (speculative decoding).",
         static_cast<double>(e.verify_steps));
  scalar(out, "splash_draft_tokens_total", "counter", "Drafted tokens the model verified.",
         static_cast<double>(e.draft_tokens));
  scalar(out, "splash_accepted_draft_tokens_total", "counter", "Drafted tokens the replies kept.",
         static_cast<double>(e.accepted_draft_tokens));
  scalar(out, "splash_best_token_rows_total", "counter",
         "Decode steps sampled from the best tokens the model found on its device.",
         static_cast<double>(e.best_token_rows));
  scalar(out, "splash_whole_rows_read_total", "counter",
         "Of those, steps whose best tokens could not decide (the whole logits row was read).",
         static_cast<double>(e.whole_rows_read));
  scalar(out, "splash_batch_tokens", "gauge", "Tokens in the last forward pass.", e.batch_tokens);
  header(out, "splash_kv_blocks", "gauge", "Blocks of the paged KV cache, by state.");
  out += fmt::format("splash_kv_blocks{{state=\"in_use\"}} {}\nsplash_kv_blocks{{state=\"cached\"}} {}\n"
                     "splash_kv_blocks{{state=\"free\"}} {}\n",
                     e.blocks.in_use, e.blocks.cached, e.blocks.free);
  scalar(out, "splash_kv_blocks_total", "gauge", "Blocks in the paged KV cache.", e.blocks.total);
  scalar(out, "splash_kv_block_evictions_total", "counter", "Cached blocks evicted to make room.",
         static_cast<double>(e.blocks.evictions));
  histogram(out, "splash_time_to_first_token_seconds", "From a request's arrival to its first sampled token.",
            in.latencies.time_to_first_token);
  histogram(out, "splash_inter_token_seconds", "Between consecutive sampled tokens of one request.",
            in.latencies.inter_token);
  scalar(out, "splash_uptime_seconds", "gauge", "Seconds since the server started.", in.uptime_seconds);
  return out;
}

}  // namespace splash::server
