// libFuzzer target for the agent protocols' request paths: any byte string given to the
// Anthropic Messages and OpenAI Responses parsers comes back as a request or an ApiError,
// never a crash, exception, hang or out-of-bounds read (ASan+UBSan, see `make fuzz`). An
// accepted request's tools and output format then go through the grammar compiler
// (compile_output_constraints), which must either compile them or refuse with splash::Error
// within bounded time and memory; and the renderers turn arbitrary events into JSON text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "api/anthropic_messages.h"
#include "api/openai_responses.h"
#include "common/error.h"
#include "engine/output_constraints.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_agent_request: invariant violated: %s\n", what);
  std::abort();
}

void check_error(const splash::api::ApiError& error) {
  if (error.status != 400 && error.status != 404) fail("error status is neither 400 nor 404");
  if (error.message.empty()) fail("error without a message");
}

void check_chat(const splash::engine::ChatRequest& chat) {
  if (chat.messages.empty()) fail("accepted a request without messages");
  for (const auto& m : chat.messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") fail("unknown role");
  try {
    (void)splash::engine::compile_output_constraints(chat);
  } catch (const splash::Error&) {
    // A schema or grammar this engine refuses: the server answers 400.
  }
}

// Arbitrary bytes as model output, reasoning and a tool call included, rendered by the protocol.
void render(splash::api::ReplyRenderer& renderer, std::string_view raw, bool stream) {
  using splash::engine::ChatEvent;
  ChatEvent text;
  text.text = std::string(raw.substr(0, 128));
  ChatEvent call_started;
  call_started.kind = ChatEvent::Kind::ToolCallStarted;
  call_started.tool_call = {"call_1", std::string(raw.substr(0, 16)), {}, raw.size() % 2 == 0};
  ChatEvent call_arguments = call_started;
  call_arguments.kind = ChatEvent::Kind::ToolCallArguments;
  call_arguments.text = text.text;
  ChatEvent call_finished = call_started;
  call_finished.kind = ChatEvent::Kind::ToolCallFinished;
  call_finished.tool_call.arguments = text.text;
  ChatEvent reasoning = text;  // a thinking model's reasoning first
  reasoning.kind = ChatEvent::Kind::Reasoning;
  reasoning.text = std::string(raw.substr(raw.size() / 2, 64));
  const ChatEvent events[] = {ChatEvent::started(3, 1), reasoning, reasoning, text, call_started, call_arguments,
                              call_finished, ChatEvent::finished(splash::engine::FinishReason::ToolCalls, 3, 2, 1)};
  std::string sse;
  for (const auto& event : events) {
    if (stream) sse += renderer.stream_event(event);
    else renderer.collect(event);
  }
  if (stream ? sse.rfind("event: ", 0) != 0 : splash::api::dump_json(renderer.final_body()).empty())
    fail("rendering produced no output");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto messages = splash::api::parse_messages_request(body);
  if (auto* error = std::get_if<splash::api::ApiError>(&messages)) {
    check_error(*error);
  } else {
    const auto& request = std::get<splash::api::MessagesRequest>(messages);
    check_chat(request.chat);
    splash::api::MessagesRenderer renderer(request.model);
    render(renderer, body, request.stream);
  }
  auto store = std::make_shared<splash::api::ResponseStore>();
  auto responses = splash::api::parse_responses_request(body, *store);
  if (auto* error = std::get_if<splash::api::ApiError>(&responses)) {
    check_error(*error);
  } else {
    const auto& request = std::get<splash::api::ResponsesRequest>(responses);
    check_chat(request.chat);
    splash::api::ResponsesRenderer renderer(request, store);
    render(renderer, body, request.stream);
  }
  return 0;
}
