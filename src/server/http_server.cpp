#include "server/http_server.h"

#include <fmt/format.h>


#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <thread>

#include "api/api_error.h"
#include "api/openai_chat.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "engine/constraint_cache.h"
#include "server/agent_routes.h"
#include "server/body_budget.h"
#include "server/http/listener.h"
#include "server/http/router.h"
#include "server/reply_stream.h"
#include "server/request_guard.h"
#include "server/web_routes.h"

namespace splash::server {
namespace {

using nlohmann::json;
constexpr auto kJson = "application/json";
// No real client sends more header fields than this (browsers ~20, SDKs ~15).
constexpr size_t kMaxHeaderCount = 100;
// A stable name for whatever model is served, so agent configurations need not change when
// the model does (Chat Completions refuses other names; Messages and Responses accept any,
// since Claude Code and Codex send their own model names).
constexpr std::string_view kModelAlias = "splash-model";

void send_error(http::Response& res, const api::ApiError& error) {
  res.status = error.status;
  res.set_content(api::dump_json(api::openai_error_body(error)), kJson);
}

void send_json(http::Response& res, const json& body) { res.set_content(api::dump_json(body), kJson); }

// Parses a JSON object body for the small utility routes.
std::optional<json> object_body(const http::Request& req, http::Response& res) {
  if (req.body.find('\0') != std::string::npos) {
    send_error(res, api::ApiError::bad_request("the request body contains a NUL byte"));
    return std::nullopt;
  }
  if (json_nesting_depth(req.body) > kMaxJsonDepth) {
    send_error(res, api::ApiError::bad_request("the request body nests too deeply"));
    return std::nullopt;
  }
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    send_error(res, api::ApiError::bad_request("the request body must be a JSON object"));
    return std::nullopt;
  }
  return body;
}

}  // namespace

void check_can_listen(const std::string& host, int port) {
  if (port == 0) return;
  http::Listener probe({}, {}, 1);  // bound, then closed when it goes
  if (std::string problem; probe.bind(host, port, problem) < 0)
    fail("cannot listen on {}:{}: {} (pick another with --port)", host, port, problem);
}

HttpServer::HttpServer(ServerOptions options, engine::EngineService& engine, const tokenizer::Tokenizer& tokenizer,
                       const chat::ChatFormat& chat, ServedModelInfo model)
    : options_(std::move(options)),
      engine_(engine),
      tokenizer_(tokenizer),
      chat_(chat),
      model_(std::move(model)),
      routes_(std::make_unique<http::Router>()),
      started_(std::chrono::steady_clock::now()),
      bodies_(std::make_shared<BodyBudget>(std::max(options_.body_budget_bytes, options_.max_body_bytes))) {
  register_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  if (options_.port < 0 || options_.port > 65535) fail("--port must be between 0 and 65535");
  std::string problem;
  bound_port_ = listener_->bind(options_.host, options_.port, problem);
  if (bound_port_ < 0) {
    if (options_.port == 0) fail("cannot listen on {}: {}", options_.host, problem);
    fail("cannot listen on {}:{}: {} (pick another with --port)", options_.host, options_.port, problem);
  }
}

void HttpServer::run() { listener_->run(); }

void HttpServer::stop() { listener_->stop(); }

void HttpServer::drain_and_stop(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (completions_in_flight_->load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop();
}

namespace {

// At most 64 printable characters of a value quoted in an error message.
std::string excerpt(const std::string& value) {
  std::string out;
  for (const unsigned char c : value.substr(0, 64)) out += std::isprint(c) ? static_cast<char>(c) : '?';
  return value.size() > 64 ? out + "..." : out;
}

// A Host outside the allowlist (403) or a missing or wrong API key on an API route (401).
std::optional<api::ApiError> access_refusal(const http::Request& req, const HostAllowlist& allowlist,
                                            const std::string& api_key) {
  if (!allowlist.allows(req.header("Host")))
    return api::ApiError{403,
                         fmt::format("Host '{}' is not allowed (allowed: {}; add one with --allowed-host)",
                                     excerpt(req.header("Host")), allowlist.describe()),
                         "permission_error", {}, "host_not_allowed"};
  if (!api_key.empty() && !is_public_route(req.path)) {
    const auto key = presented_api_key(req.header("Authorization"), req.header("x-api-key"));
    if (!key || !api_key_matches(api_key, *key))
      return api::ApiError{401, "invalid or missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                           "authentication_error", {}, "invalid_api_key"};
  }
  return std::nullopt;
}

}  // namespace

void HttpServer::register_routes() {
  auto& http = *routes_;
  auto allowlist = std::make_shared<HostAllowlist>(options_.allowed_hosts);
  const std::string api_key = options_.api_key;

  // Host allowlist and API key, checked again once the body is read (on_head below checks
  // them first for a request with a body), then room to parse the body.
  auto guarded = [allowlist, api_key, bodies = bodies_](http::Handler handler) {
    return [allowlist, api_key, bodies, handler](const http::Request& req, http::Response& res) {
      // However the handler ends, it is done with the body (the generation routes say so
      // earlier, once parsed, before their request may wait in the engine's queue).
      struct DoneWithBody {
        const http::Request& req;
        ~DoneWithBody() { done_with_request_body(req); }
      } done{req};
      if (const auto refusal = access_refusal(req, *allowlist, api_key)) return send_api_error(req, res, *refusal);
      switch (hold_room_to_parse(req)) {
        case ParseRoom::Held: break;
        case ParseRoom::NeverFits:
          return send_api_error(req, res, {413, fmt::format("the request body is too large to parse within the "
                                                            "server's {} MiB for request bodies (its JSON values "
                                                            "take several times its text)",
                                                            bodies->capacity() >> 20),
                                           "invalid_request_error", {}, {}});
        case ParseRoom::Busy:
          res.set_header("Retry-After", "1");
          return send_api_error(req, res, {503, fmt::format("the server is parsing as many request bodies as it holds at "
                                                            "once ({} MiB); retry in a moment", bodies->capacity() >> 20),
                                           "overloaded_error", {}, {}});
      }
      handler(req, res);
    };
  };

  // Before the body is read: refuse what must not be read at all (the connection is then
  // closed, the body unread).
  const size_t max_body = options_.max_body_bytes;
  http::ConnectionHooks hooks;
  hooks.on_head = [max_body, allowlist, api_key, bodies = bodies_](const http::Request& req, http::Response& res) {
    release_request_body();  // an earlier request's on this thread, should one be left
    auto refuse = [&](const api::ApiError& error) {
      send_api_error(req, res, error);
      res.close_connection = true;
      return true;
    };
    if (!req.has_header("Host")) return refuse(api::ApiError::bad_request("the request has no Host header"));
    if (req.header_count("Host") != 1)
      return refuse(api::ApiError::bad_request("the request has more than one Host header"));
    // Claude Code checks that the server is there with HEAD / before anything else: it gets a
    // 200 whether or not the chat page is served (from an allowed Host only, as every route).
    if (req.method == "HEAD" && req.path == "/") {
      res.status = allowlist->allows(req.header("Host")) ? 200 : 403;
      return true;
    }
    if (req.has_header("Transfer-Encoding"))
      return refuse({411, "chunked request bodies are not accepted; send a Content-Length", "invalid_request_error", {}, {}});
    // Bodies are taken as sent: a compressed one would inflate past every limit on its length.
    if (req.has_header("Content-Encoding") && !http::iequals(req.header("Content-Encoding"), "identity"))
      return refuse({415, fmt::format("compressed request bodies are not accepted (Content-Encoding: {})",
                                      excerpt(req.header("Content-Encoding"))),
                     "invalid_request_error", {}, {}});
    // A body without a length would be read until the client closes: 411 at once.
    if (!req.has_header("Content-Length") && (req.method == "POST" || req.method == "PUT" || req.method == "PATCH"))
      return refuse({411, fmt::format("a {} request needs a Content-Length", req.method), "invalid_request_error", {}, {}});
    if (req.has_header("Content-Length")) {
      const std::string length = req.header("Content-Length");
      const bool digits = !length.empty() && length.size() <= 18 &&
                          std::all_of(length.begin(), length.end(), [](unsigned char c) { return std::isdigit(c); });
      if (!digits) return refuse(api::ApiError::bad_request("invalid Content-Length"));
      const size_t bytes = std::stoull(length);
      if (bytes > max_body)
        return refuse({413, fmt::format("the request body is larger than {} bytes", max_body), "invalid_request_error", {}, {}});
      // Who may not send a body holds none of the budget, not even while sending it slowly.
      if (bytes > 0)
        if (const auto refusal = access_refusal(req, *allowlist, api_key)) return refuse(*refusal);
      if (!hold_request_body(bodies, bytes)) {
        res.set_header("Retry-After", "1");
        return refuse({503,
                       fmt::format("the server is reading as many request bodies as it holds at once ({} MiB); retry "
                                   "in a moment",
                                   bodies->capacity() >> 20),
                       "overloaded_error", {}, {}});
      }
    }
    return false;
  };
  hooks.on_request = [this](http::Request& req, http::Response& res) { route(req, res); };
  // Errors the transport finds (malformed requests, 408, 413, 431, 500) in the OpenAI shape
  // (Anthropic's on /v1/messages).
  hooks.on_error = [](const http::Request& req, http::Response& res, int status, std::string_view message) {
    send_api_error(req, res, {status, std::string(message), status >= 500 ? "server_error" : "invalid_request_error", {}, {}});
  };
  // Every answered request is counted, errors too.
  hooks.on_answered = [counts = request_counts_](const http::Request& req, const http::Response& res) {
    release_request_body();  // a request no route ran for (an unknown route, a refused head)
    counts->add(req.method, req.path, res.status);
  };
  hooks.on_closed = [] { release_request_body(); };  // a body cut short by its client
  http::ConnectionOptions connection;
  connection.max_header_fields = kMaxHeaderCount;
  connection.max_body = max_body;
  connection.idle_timeout = std::chrono::seconds(options_.idle_seconds);
  listener_ = std::make_unique<http::Listener>(std::move(hooks), connection, options_.http_threads);

  http.get("/health", guarded([](const http::Request&, http::Response& res) { send_json(res, {{"status", "ok"}}); }));
  http.get("/ready", guarded([this](const http::Request&, http::Response& res) {
    if (engine_.accepting()) return send_json(res, {{"status", "ready"}, {"model", model_.id}});
    res.status = 503;
    send_json(res, {{"status", "shutting_down"}});
  }));

  // A model object with the served context window, under the names agents read it by
  // (Hermes refuses windows it cannot learn; vLLM's clients read max_model_len).
  const auto model_object = [this](std::string_view id) {
    return json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "splash"},
                {"context_length", model_.context}, {"max_model_len", model_.context}};
  };
  http.get("/v1/models", guarded([model_object, this](const http::Request&, http::Response& res) {
    send_json(res, {{"object", "list"}, {"data", json::array({model_object(model_.id), model_object(kModelAlias)})}});
  }));
  http.get("/v1/models/{}", guarded([model_object, this](const http::Request& req, http::Response& res) {
    if (req.params[0] != model_.id && req.params[0] != kModelAlias)
      return send_error(res, {404, fmt::format("The model '{}' does not exist", req.params[0]),
                              "invalid_request_error", "model", "model_not_found"});
    send_json(res, model_object(model_.id));
  }));

  http.get("/status", guarded([this](const http::Request&, http::Response& res) {
    const auto counters = engine_.counters();
    const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    json status = model_.details;
    status["model"] = model_.id;
    status["maximum_context_tokens"] = model_.context;
    status["requests_running"] = counters.requests_running;
    status["requests_queued"] = counters.requests_queued;
    status["requests_completed"] = counters.requests_completed;
    status["tokens_processed"] = {{"prompt", counters.prompt_tokens}, {"generated", counters.generated_tokens}};
    status["prefix_cache"] = {{"hits", counters.cache_hits},
                              {"reused_prompt_tokens", counters.reused_prompt_tokens},
                              {"replays_from_logits", counters.replays_from_logits},
                              {"evictions", counters.blocks.evictions}};
    if (counters.snapshots.total > 0)  // a hybrid model's recurrent-state snapshots (prefix hits resume from them)
      status["state_snapshots"] = {{"total", counters.snapshots.total},
                                   {"held", counters.snapshots.held},
                                   {"bytes_each", counters.snapshot_bytes},
                                   {"saved", counters.snapshots.saved},
                                   {"hits", counters.snapshots.hits}};
    status["kv_blocks"] = {{"total", counters.blocks.total},
                           {"in_use", counters.blocks.in_use},
                           {"cached", counters.blocks.cached},
                           {"free", counters.blocks.free}};
    status["scheduler"] = {{"batch_size", counters.batch_size},
                           {"batch_tokens", counters.batch_tokens},
                           {"steps", counters.steps},
                           {"preemptions", counters.preemptions},
                           {"running", counters.requests_running},
                           {"queued", counters.requests_queued}};
    // Speculative decoding overall: of the guesses verified, how many replies kept, and the
    // tokens a verifying step yields on average (a plain step yields one).
    auto& speculative = status["speculative_decoding"];
    speculative["verify_steps"] = counters.verify_steps;
    speculative["draft_tokens"] = counters.draft_tokens;
    speculative["accepted_draft_tokens"] = counters.accepted_draft_tokens;
    speculative["acceptance_rate"] =
        counters.draft_tokens > 0 ? static_cast<double>(counters.accepted_draft_tokens) / counters.draft_tokens : 0.0;
    speculative["tokens_per_verify_step"] =
        counters.verify_steps > 0 ? 1.0 + static_cast<double>(counters.accepted_draft_tokens) / counters.verify_steps
                                  : 0.0;
    // Decode steps sampled from the best tokens the model found on its device (the GPU), and
    // how many of them still needed their whole logits row.
    status["sampling"] = {{"best_token_rows", counters.best_token_rows}, {"whole_rows_read", counters.whole_rows_read}};
    if (status.contains("vision")) {
      const auto images = engine_.image_cache_counters();
      status["vision"]["feature_cache"] = {
          {"hits", images.hits}, {"misses", images.misses}, {"images", images.images}, {"bytes", images.bytes}};
    }
    const auto grammars = engine::constraint_cache().stats();
    status["constraint_cache"] = {{"entries", grammars.entries},
                                  {"bytes", grammars.bytes},
                                  {"budget_bytes", engine::kConstraintCacheBytes},
                                  {"hits", grammars.hits},
                                  {"misses", grammars.misses}};
    status["request_bodies"] = {
        {"in_use_bytes", bodies_->in_use()}, {"budget_bytes", bodies_->capacity()}, {"refused", bodies_->refused()}};
    status["uptime_seconds"] = uptime;
    status["accepting_requests"] = engine_.accepting();
    send_json(res, status);
  }));

  http.get("/metrics", guarded([this](const http::Request&, http::Response& res) {
    MetricsInput input{engine_.counters(), engine_.latencies(), request_counts_->snapshot(),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()};
    res.set_content(prometheus_text(input), "text/plain; version=0.0.4; charset=utf-8");
  }));

  http.post("/tokenize", guarded([this](const http::Request& req, http::Response& res) {
    auto body = object_body(req, res);
    if (!body) return;
    if (!body->contains("content") || !(*body)["content"].is_string())
      return send_error(res, api::ApiError::bad_request("'content' must be a string", "content"));
    // add_special / parse_special (llama.cpp's names): recognise special-token text.
    bool special = true;
    for (const char* flag : {"add_special", "parse_special"}) {
      if (!body->contains(flag)) continue;
      if (!(*body)[flag].is_boolean())
        return send_error(res, api::ApiError::bad_request(fmt::format("'{}' must be a boolean", flag), flag));
      special = special && (*body)[flag].get<bool>();
    }
    send_json(res, {{"tokens", tokenizer_.encode((*body)["content"].get<std::string>(), special)}});
  }));
  http.post("/detokenize", guarded([this](const http::Request& req, http::Response& res) {
    auto body = object_body(req, res);
    if (!body) return;
    const auto& tokens = (*body)["tokens"];
    if (!tokens.is_array()) return send_error(res, api::ApiError::bad_request("'tokens' must be an array", "tokens"));
    std::vector<int32_t> ids;
    for (const auto& t : tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= static_cast<int64_t>(tokenizer_.size()))
        return send_error(res, api::ApiError::bad_request(
                                   fmt::format("'tokens' must hold token ids from 0 to {}", tokenizer_.size() - 1), "tokens"));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    send_json(res, {{"content", tokenizer_.decode(ids)}});
  }));
  http.post("/apply-template", guarded([this](const http::Request& req, http::Response& res) {
    // Same validation as a chat completion, but nothing is generated.
    if (json_nesting_depth(req.body) > kMaxJsonDepth)
      return send_error(res, api::ApiError::bad_request("the request body nests too deeply"));
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("messages"))
      return send_error(res, api::ApiError::bad_request("the body must be a JSON object with 'messages'", "messages"));
    json minimal = {{"messages", body["messages"]}};
    if (body.contains("tools")) minimal["tools"] = body["tools"];
    auto parsed = api::parse_chat_completion_request(api::dump_json(minimal), {model_.id, model_.vocab});
    if (auto* error = std::get_if<api::ApiError>(&parsed)) return send_error(res, *error);
    const auto& chat = std::get<api::ChatCompletionRequest>(parsed).chat;
    std::vector<int32_t> tokens;
    try {
      tokens = engine_.encode_chat(chat.messages, chat.tools);
    } catch (const Error& e) {  // an image that cannot be read
      return send_error(res, api::ApiError::bad_request(e.what(), "messages"));
    }
    send_json(res, {{"prompt", chat_.render_conversation(chat.messages, chat.tools, true).text}, {"tokens", tokens}});
  }));

  register_agent_routes(http, guarded,
                        {engine_, model_.id, {std::string(kModelAlias)}, model_.vocab,
                         std::make_shared<api::ResponseStore>(), completions_in_flight_,
                         std::chrono::seconds(options_.keep_alive_seconds), options_.default_seed, options_.default_reasoning});

  if (options_.webui) register_web_routes(http, guarded);
}

void HttpServer::route(http::Request& req, http::Response& res) const {
  auto found = routes_->find(req.method, req.path);
  switch (found.outcome) {
    case http::Router::Outcome::Found:
      req.params = std::move(found.params);
      (*found.handler)(req, res);
      break;
    case http::Router::Outcome::WrongMethod:
      res.set_header("Allow", found.allowed);
      send_api_error(req, res, {405, fmt::format("method {} is not allowed on {} (allowed: {})", excerpt(req.method),
                                                 excerpt(req.path), found.allowed),
                                "invalid_request_error", {}, {}});
      break;
    case http::Router::Outcome::NotFound:
      res.status = 404;
      break;
  }
  // A status without a body (an unknown route, a file the page does not have) gets one in the
  // protocol's shape.
  if (res.status >= 400 && res.body.empty() && !res.produce)
    send_api_error(req, res, {res.status, res.status == 404 ? fmt::format("no route for {} {}", excerpt(req.method),
                                                                          excerpt(req.path))
                                                            : fmt::format("HTTP error {}", res.status),
                              res.status == 404 ? "not_found_error" : "invalid_request_error", {}, {}});
}

}  // namespace splash::server
