#pragma once
// OpenAI Chat Completions <-> the internal ChatRequest / ChatEvent stream.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "engine/chat_request.h"

namespace splash::api {

// What the server serves, as requests may name or need it.
struct ServedModel {
  std::string id;
  int vocab = 0;
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
class ChatCompletionRenderer {
 public:
  ChatCompletionRenderer(std::string model_id, bool include_usage, bool logprobs);

  // SSE lines ("data: ...\n\n") for one event; empty when the event adds nothing.
  std::string stream_event(const engine::ChatEvent& event);
  static std::string stream_done() { return "data: [DONE]\n\n"; }

  // Non-streaming: feed every event, then take the chat.completion object.
  void collect(const engine::ChatEvent& event);
  nlohmann::json completion() const;

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
  std::vector<engine::TokenLogprob> all_logprobs_;
  engine::FinishReason finish_ = engine::FinishReason::Stop;
  int prompt_tokens_ = 0, completion_tokens_ = 0, cached_prompt_tokens_ = 0;
};

const char* openai_finish_reason(engine::FinishReason reason);
nlohmann::json usage_json(int prompt_tokens, int completion_tokens, int cached_prompt_tokens = 0);

}  // namespace splash::api
