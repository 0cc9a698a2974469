#pragma once
// OpenAI Chat Completions <-> the internal ChatRequest / ChatEvent stream.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "api/reply_renderer.h"
#include "engine/chat_request.h"

namespace splash::api {

// What the server serves, as requests may name or need it.
struct ServedModel {
  std::string id;
  int vocab = 0;
  std::vector<std::string> aliases = {};  // other names requests may use for it
};

struct ChatCompletionRequest {
  engine::ChatRequest chat;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
};

// Parses and validates a request body. Every problem is a 400 (404 for an unknown model)
// that names the parameter; nothing is silently ignored except fields that cannot change
// the output (user, metadata, store, ...).
std::variant<ChatCompletionRequest, ApiError> parse_chat_completion_request(std::string_view body,
                                                                            const ServedModel& served);

// Renders the event stream of one completion, streaming (SSE chunks) or as one object.
class ChatCompletionRenderer : public ReplyRenderer {
 public:
  ChatCompletionRenderer(std::string model_id, bool include_usage, bool logprobs);

  // SSE lines ("data: ...\n\n") for one event; empty when the event adds nothing.
  std::string stream_event(const engine::ChatEvent& event) override;
  static std::string stream_done() { return "data: [DONE]\n\n"; }
  std::string stream_end() override { return stream_done(); }
  std::string stream_error(const ApiError& error) override;

  // Non-streaming: feed every event, then take the chat.completion object.
  void collect(const engine::ChatEvent& event) override;
  nlohmann::json completion() const;
  nlohmann::json final_body() override { return completion(); }

  const std::string& id() const { return id_; }

 private:
  nlohmann::json chunk(nlohmann::json choices) const;
  nlohmann::json logprobs_json(const std::vector<engine::TokenLogprob>& tokens) const;

  std::string id_;
  std::string model_id_;
  int64_t created_;
  bool include_usage_;
  bool logprobs_;
  std::string text_;
  std::string reasoning_;  // non-streaming: the think block's text
  int reasoning_tokens_ = 0;
  std::vector<engine::TokenLogprob> all_logprobs_;
  engine::FinishReason finish_ = engine::FinishReason::Stop;
  int prompt_tokens_ = 0, completion_tokens_ = 0, cached_prompt_tokens_ = 0;
  int draft_tokens_ = 0, accepted_draft_tokens_ = 0;  // speculative decoding's guesses, kept or not
  std::vector<chat::ToolCall> tool_calls_;  // non-streaming: the finished calls
  std::vector<bool> custom_calls_;          // streaming: which call index is a custom tool's
};

const char* openai_finish_reason(engine::FinishReason reason);
nlohmann::json chat_tool_call_json(const chat::ToolCall& call);
nlohmann::json usage_json(int prompt_tokens, int completion_tokens, int cached_prompt_tokens = 0, int draft_tokens = 0,
                          int accepted_draft_tokens = 0, int reasoning_tokens = 0);

}  // namespace splash::api
