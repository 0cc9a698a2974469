#include "server/agent_routes.h"

#include "common/error.h"
#include "api/anthropic_messages.h"
#include "api/openai_chat.h"
#include "api/openai_responses.h"
#include "server/body_budget.h"
#include "server/reply_stream.h"

namespace splash::server {

namespace {

void write_openai_error(http::Response& res, const api::ApiError& error) {
  res.status = error.status;
  res.set_content(api::dump_json(api::openai_error_body(error)), "application/json");
}

void write_anthropic_error(http::Response& res, const api::ApiError& error) {
  res.status = error.status;
  res.set_content(api::dump_json(api::anthropic_error_body(error)), "application/json");
}

// Counted until the last byte is written (for a stream: until its releaser runs).
std::shared_ptr<void> count_in_flight(const std::shared_ptr<std::atomic<int>>& counter) {
  counter->fetch_add(1);
  return std::shared_ptr<void>(nullptr, [counter](void*) { counter->fetch_sub(1); });
}

// What the server's flags say for a request that leaves it to the server.
void apply_server_defaults(const AgentRoutesContext& ctx, engine::ChatRequest& chat) {
  if (!chat.sampling.seed) chat.sampling.seed = ctx.default_seed;
  if (!chat.reasoning.requested && ctx.default_reasoning) chat.reasoning = *ctx.default_reasoning;
}

}  // namespace

void register_agent_routes(http::Router& http, const RouteGuard& guard, AgentRoutesContext context) {
  auto ctx = std::make_shared<AgentRoutesContext>(std::move(context));

  http.post("/v1/chat/completions", guard([ctx](const http::Request& req, http::Response& res) {
    auto in_flight = count_in_flight(ctx->in_flight);
    api::ServedModel served{ctx->model_id, ctx->vocab, ctx->model_aliases};
    auto parsed = api::parse_chat_completion_request(req.body, served);
    if (auto* error = std::get_if<api::ApiError>(&parsed)) return write_openai_error(res, *error);
    auto request = std::get<api::ChatCompletionRequest>(std::move(parsed));
    done_with_request_body(req);  // before the request may wait in the engine's queue
    apply_server_defaults(*ctx, request.chat);
    auto renderer = std::make_shared<api::ChatCompletionRenderer>(ctx->model_id, request.include_usage, request.logprobs);
    serve_reply(res, ctx->engine, std::move(request.chat), request.stream, renderer, write_openai_error, in_flight,
                ctx->keep_alive);
  }));

  http.post("/v1/messages", guard([ctx](const http::Request& req, http::Response& res) {
    auto in_flight = count_in_flight(ctx->in_flight);
    auto parsed = api::parse_messages_request(req.body);
    if (auto* error = std::get_if<api::ApiError>(&parsed)) return write_anthropic_error(res, *error);
    auto request = std::get<api::MessagesRequest>(std::move(parsed));
    done_with_request_body(req);  // before the request may wait in the engine's queue
    apply_server_defaults(*ctx, request.chat);
    auto renderer = std::make_shared<api::MessagesRenderer>(request.model);
    serve_reply(res, ctx->engine, std::move(request.chat), request.stream, renderer, write_anthropic_error, in_flight,
                ctx->keep_alive);
  }));

  // Answered by the tokenizer on this thread, never queued behind generation.
  http.post("/v1/messages/count_tokens", guard([ctx](const http::Request& req, http::Response& res) {
    auto parsed = api::parse_messages_request(req.body, /*for_counting=*/true);
    if (auto* error = std::get_if<api::ApiError>(&parsed)) return write_anthropic_error(res, *error);
    const auto& chat = std::get<api::MessagesRequest>(parsed).chat;
    std::vector<int32_t> tokens;
    try {
      tokens = ctx->engine.encode_chat(chat.messages, chat.tools);
    } catch (const Error& e) {  // an image that cannot be read
      return write_anthropic_error(res, api::ApiError::bad_request(e.what(), "messages"));
    }
    res.set_content(api::dump_json({{"input_tokens", tokens.size()}}), "application/json");
  }));

  http.post("/v1/responses", guard([ctx](const http::Request& req, http::Response& res) {
    auto in_flight = count_in_flight(ctx->in_flight);
    auto parsed = api::parse_responses_request(req.body, *ctx->responses);
    if (auto* error = std::get_if<api::ApiError>(&parsed)) return write_openai_error(res, *error);
    auto request = std::get<api::ResponsesRequest>(std::move(parsed));
    done_with_request_body(req);  // before the request may wait in the engine's queue
    apply_server_defaults(*ctx, request.chat);
    auto renderer = std::make_shared<api::ResponsesRenderer>(request, ctx->responses);
    serve_reply(res, ctx->engine, std::move(request.chat), request.stream, renderer, write_openai_error, in_flight,
                ctx->keep_alive);
  }));
  http.get("/v1/responses/{}", guard([ctx](const http::Request& req, http::Response& res) {
    auto stored = ctx->responses->get(req.params[0]);
    if (!stored)
      return write_openai_error(res, {404, "No response with id '" + req.params[0] + "' is stored",
                                      "invalid_request_error", "response_id", "not_found"});
    res.set_content(stored->response_json, "application/json");
  }));
  http.del("/v1/responses/{}", guard([ctx](const http::Request& req, http::Response& res) {
    const std::string& id = req.params[0];
    if (!ctx->responses->erase(id))
      return write_openai_error(res, {404, "No response with id '" + id + "' is stored", "invalid_request_error",
                                      "response_id", "not_found"});
    res.set_content(api::dump_json({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}), "application/json");
  }));
}

}  // namespace splash::server
