#pragma once
// Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens) <-> the internal
// ChatRequest / ChatEvent stream. Accepts what Claude Code and the anthropic SDKs send
// (system blocks, content blocks with cache_control, tool_use / tool_result, documents,
// thinking and context-management settings) and streams the event sequence their parsers
// expect: message_start, ping, content_block_start / delta / stop, message_delta,
// message_stop.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "api/reply_renderer.h"
#include "engine/chat_request.h"

namespace splash::api {

struct MessagesRequest {
  engine::ChatRequest chat;
  std::string model;  // echoed back: one server serves one model whatever the name
  bool stream = false;
};

// for_counting: the count_tokens body (no max_tokens, no sampling fields needed).
std::variant<MessagesRequest, ApiError> parse_messages_request(std::string_view body, bool for_counting = false);

// {"type":"error","error":{"type":...,"message":...}} with Anthropic's error type names.
nlohmann::json anthropic_error_body(const ApiError& error);

class MessagesRenderer : public ReplyRenderer {
 public:
  explicit MessagesRenderer(std::string model);
  std::string stream_event(const engine::ChatEvent& event) override;
  std::string stream_error(const ApiError& error) override;
  std::string keep_alive() override;  // Anthropic's own ping event
  void collect(const engine::ChatEvent& event) override;
  nlohmann::json final_body() override;

 private:
  std::string close_block();
  std::string open_block(const nlohmann::json& block);
  std::string delta(nlohmann::json delta);  // a content_block_delta of the open block
  nlohmann::json usage(int prompt_tokens, int cached_tokens, int output_tokens) const;

  std::string id_;
  std::string model_;
  // Streaming: the index of the open content block, and whether it is text or thinking.
  int next_block_ = 0;
  bool block_open_ = false;
  bool text_block_ = false;
  bool thinking_block_ = false;
  // Non-streaming.
  nlohmann::json content_ = nlohmann::json::array();
  std::vector<std::string> tool_arguments_;
  engine::ChatEvent finished_;
  int prompt_tokens_ = 0, cached_tokens_ = 0;
};

// "toolu_..." ids for calls (Anthropic clients expect that prefix).
std::string anthropic_tool_id(const std::string& call_id);
// The stop_reason for a finish: end_turn, max_tokens, stop_sequence, tool_use.
const char* anthropic_stop_reason(const engine::ChatEvent& finished);

}  // namespace splash::api
