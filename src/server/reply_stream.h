#pragma once
// Serves one generation over HTTP for any protocol: submits the ChatRequest to the engine,
// answers errors before the first token with the protocol's error body and status, and then
// either streams the renderer's SSE events or collects them into one JSON body. Either way a
// client that disconnects cancels its generation (a long non-streaming reply probes the
// connection with leading whitespace).
#include <chrono>
#include <functional>
#include <memory>

#include "api/api_error.h"
#include "api/reply_renderer.h"
#include "engine/engine_service.h"

#include "server/http/message.h"

namespace splash::server {

// A non-streaming request that names no max_tokens gets this many at most.
inline constexpr int kDefaultReplyTokens = 4096;

// Writes an error in the route's protocol shape.
using ErrorWriter = std::function<void(http::Response&, const api::ApiError&)>;

// `in_flight` is held until the last byte is written (shutdown waits for it). A stream silent
// for `keep_alive` (a long prompt being read) gets the renderer's keep-alive.
void serve_reply(http::Response& res, engine::EngineService& engine, engine::ChatRequest request, bool stream,
                 std::shared_ptr<api::ReplyRenderer> renderer, const ErrorWriter& write_error,
                 std::shared_ptr<void> in_flight, std::chrono::seconds keep_alive);

// OpenAI's {"error": {...}} or Anthropic's {"type":"error",...}, chosen by the request path.
void send_api_error(const http::Request& req, http::Response& res, const api::ApiError& error);
bool is_anthropic_route(const std::string& path);

}  // namespace splash::server
