#pragma once
// OpenAI Responses (POST /v1/responses, GET/DELETE /v1/responses/{id}) <-> the internal
// ChatRequest / ChatEvent stream. Accepts what Codex and the openai SDK send (input items with
// function and custom tool calls and their outputs, developer messages, namespace tools
// (flattened), hosted tools (accepted, not offered to the model), reasoning / include /
// prompt_cache_key / client_metadata) and streams the typed event sequence with sequence
// numbers: response.created, response.in_progress, output_item.added, content_part.added,
// output_text.delta/done, function_call_arguments.delta/done, custom_tool_call_input.delta/
// done, output_item.done, response.completed (or response.incomplete / response.failed).
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "api/reply_renderer.h"
#include "api/response_store.h"
#include "engine/chat_request.h"

namespace splash::api {

struct ResponsesRequest {
  engine::ChatRequest chat;
  std::string model;
  bool stream = false;
  bool store = true;
  std::string previous_response_id;
  nlohmann::json echo;  // request fields the response object repeats (instructions, tools, ...)
  std::vector<chat::ChatMessage> conversation;  // input (with previous turns, without instructions)
};

// `store` resolves previous_response_id (and item_reference inputs).
std::variant<ResponsesRequest, ApiError> parse_responses_request(std::string_view body, ResponseStore& store);

class ResponsesRenderer : public ReplyRenderer {
 public:
  // The finished response is saved in `store` when request.store is true.
  ResponsesRenderer(const ResponsesRequest& request, std::shared_ptr<ResponseStore> store);
  std::string stream_event(const engine::ChatEvent& event) override;
  std::string stream_error(const ApiError& error) override;
  void collect(const engine::ChatEvent& event) override;
  nlohmann::json final_body() override;
  const std::string& id() const { return id_; }

 private:
  std::string sse(const std::string& type, nlohmann::json data);
  nlohmann::json response_object(const std::string& status) const;
  std::string finish_reasoning();  // closes the open reasoning item: its done events
  std::string finish_text();
  void finish(const engine::ChatEvent& event);

  std::string id_;
  int64_t created_;
  std::string model_;
  nlohmann::json echo_;
  bool store_;
  std::string previous_response_id_;
  std::vector<chat::ChatMessage> conversation_;
  std::shared_ptr<ResponseStore> store_ptr_;
  int sequence_ = 0;
  nlohmann::json output_ = nlohmann::json::array();  // items so far
  int reasoning_item_ = -1;                          // index in output_ of the open reasoning item
  std::string reasoning_;                            // its text
  int text_item_ = -1;                               // index in output_ of the open message item
  std::string text_;                                 // its text
  int tool_item_ = -1;                               // index in output_ of the open call item
  chat::ChatMessage assistant_{"assistant", {}};
  engine::ChatEvent finished_;
  bool done_ = false;
  std::string failure_;
};

}  // namespace splash::api
