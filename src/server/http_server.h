#pragma once
// The HTTP face of splash: routes, API-key auth, Host allowlist, body limits, SSE, probes.
// It sees requests and events, never tensors: generation goes through engine::EngineService
// and each protocol's translation lives in api/.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "engine/engine_service.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace splash::server {
namespace http {
class Listener;
class Router;
struct Request;
struct Response;
}  // namespace http

class BodyBudget;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;                     // empty: no authentication
  std::vector<std::string> allowed_hosts;  // besides localhost, 127.0.0.1 and [::1]
  bool webui = true;
  size_t max_body_bytes = size_t{8} << 20;
  // Bodies being read and parsed at once (body_budget.h): eight at the largest size.
  size_t body_budget_bytes = size_t{64} << 20;
  int keep_alive_seconds = 15;  // silence before a stream gets a keep-alive (clients time out idle streams)
  int http_threads = 256;  // connections served at once (streams and idle keep-alives hold one each)
  int idle_seconds = 5;    // a keep-alive connection's wait for its next request
  // The sampling seed of every request that names none (unset: a fresh random seed each), so
  // the same request, alone on the server, gets the same reply.
  std::optional<uint64_t> default_seed;
  // A thinking model's reasoning for every request that says nothing of it (unset: the
  // template's default, e.g. Qwen3 thinks without a limit).
  std::optional<engine::ReasoningSettings> default_reasoning;
};

// What /v1/models and /status say about the served model.
struct ServedModelInfo {
  std::string id;
  int vocab = 0;
  int context = 0;
  nlohmann::json details;  // architecture, path, kernel path, memory plan...
};

// Checks that host:port can be bound now, so a bad --host or a port in use is reported in
// one line before the model is loaded (port 0 always passes).
void check_can_listen(const std::string& host, int port);

class HttpServer {
 public:
  HttpServer(ServerOptions options, engine::EngineService& engine, const tokenizer::Tokenizer& tokenizer,
             const chat::ChatFormat& chat, ServedModelInfo model);
  ~HttpServer();

  // Binds the port; throws splash::Error with a one-line reason (e.g. port in use).
  void bind();
  // Serves until stop(); returns after in-flight requests have ended.
  void run();
  // Stops accepting connections; safe from any thread.
  void stop();
  // Waits (up to timeout) for in-flight completions to write their last event, then stops.
  // Call after the engine has been told to shut down, so those completions are ending.
  void drain_and_stop(std::chrono::milliseconds timeout);

  const ServerOptions& options() const { return options_; }
  int bound_port() const { return bound_port_; }

 private:
  void register_routes();
  // The whole request, routed (404, 405 and a handler's exception answered here).
  void route(http::Request& req, http::Response& res) const;

  ServerOptions options_;
  engine::EngineService& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  const chat::ChatFormat& chat_;
  ServedModelInfo model_;
  std::unique_ptr<http::Router> routes_;
  std::unique_ptr<http::Listener> listener_;
  std::chrono::steady_clock::time_point started_;
  int bound_port_ = 0;
  std::shared_ptr<std::atomic<int>> completions_in_flight_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<RequestCounts> request_counts_ = std::make_shared<RequestCounts>();  // for /metrics
  std::shared_ptr<BodyBudget> bodies_;
};

}  // namespace splash::server
