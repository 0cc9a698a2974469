#pragma once
// The generation routes of the three protocols coding agents speak: OpenAI Chat Completions
// (/v1/chat/completions), Anthropic Messages (/v1/messages, /v1/messages/count_tokens) and
// OpenAI Responses (/v1/responses, GET/DELETE /v1/responses/{id}). Each parses into the one
// internal ChatRequest and serves it through serve_reply (reply_stream.h).
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "api/response_store.h"
#include "engine/engine_service.h"
#include "server/web_routes.h"

namespace splash::server {

struct AgentRoutesContext {
  engine::EngineService& engine;
  std::string model_id;
  std::vector<std::string> model_aliases;  // other names Chat Completions answers to
  int vocab = 0;
  std::shared_ptr<api::ResponseStore> responses;
  std::shared_ptr<std::atomic<int>> in_flight;  // generations still writing (shutdown waits)
  std::chrono::seconds keep_alive{15};           // see ServerOptions::keep_alive_seconds
  std::optional<uint64_t> default_seed;          // see ServerOptions::default_seed
  std::optional<engine::ReasoningSettings> default_reasoning;  // see ServerOptions::default_reasoning
};

void register_agent_routes(http::Router& http, const RouteGuard& guard, AgentRoutesContext context);

}  // namespace splash::server
