// libFuzzer target for the OpenAI Chat Completions request path: any byte string must come
// back from parse_chat_completion_request as a request or as an ApiError, never crash,
// throw, hang or read out of bounds (built with ASan+UBSan, see `make fuzz`). What it
// accepts must be a request the engine accepts too, and rendering model output (which may
// be any bytes) back into chunks must never throw.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "api/api_error.h"
#include "api/openai_chat.h"
#include "chat/chat_format.h"
#include "common/error.h"
#include "chat/xml_tool_format.h"
#include "engine/chat_request.h"
#include "engine/sampler.h"
#include "engine/tool_call_stream.h"

namespace {

constexpr int kVocab = 49152;  // SmolLM2's, so logit_bias ids have a real bound

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_chat_request: invariant violated: %s\n", what);
  std::abort();
}

void check_error(const splash::api::ApiError& error) {
  if (error.status != 400 && error.status != 404) fail("error status is neither 400 nor 404");
  if (error.message.empty()) fail("error without a message");
  const std::string body = splash::api::dump_json(splash::api::openai_error_body(error));
  if (body.empty() || body.front() != '{') fail("error body is not a JSON object");
}

void check_request(const splash::api::ChatCompletionRequest& request, std::string_view raw) {
  const auto& chat = request.chat;
  if (chat.messages.empty()) fail("accepted a request without messages");
  for (const auto& m : chat.messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      fail("accepted an unknown role");
  }
  if (chat.max_tokens < 0) fail("negative max_tokens");
  if (chat.top_logprobs < -1 || chat.top_logprobs > 20) fail("top_logprobs out of range");
  if (chat.top_logprobs >= 0 && !request.logprobs) fail("top_logprobs without logprobs");
  if (request.include_usage && !request.stream) fail("include_usage without stream");
  const auto& s = chat.sampling;
  if (!std::isfinite(s.temperature) || !std::isfinite(s.top_p) || !std::isfinite(s.min_p) ||
      !std::isfinite(s.presence_penalty) || !std::isfinite(s.frequency_penalty) ||
      !std::isfinite(s.repetition_penalty))
    fail("non-finite sampling parameter");
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= kVocab) fail("logit_bias id outside the vocabulary");
    if (!std::isfinite(bias)) fail("non-finite logit_bias");
  }
  // Whatever the API accepts, the engine must accept too.
  if (!splash::engine::validate(s, kVocab).empty()) fail("parser accepted sampling the engine refuses");

  // Render a completion whose "model output" is the raw input: arbitrary bytes, invalid
  // UTF-8 included, must come out as JSON text without an exception.
  using splash::engine::ChatEvent;
  using splash::engine::FinishReason;
  splash::api::ChatCompletionRenderer renderer("fuzz-model", request.include_usage, request.logprobs);
  ChatEvent text;
  text.kind = ChatEvent::Kind::Text;
  text.text = std::string(raw.substr(0, 256));
  if (request.logprobs) {
    splash::engine::TokenLogprob lp;
    lp.id = 1;
    lp.token = text.text;
    lp.logprob = -0.5f;
    for (int i = 0; i < chat.top_logprobs; ++i) lp.top.emplace_back(text.text.substr(0, static_cast<size_t>(i)), -1.0f);
    text.logprobs.push_back(lp);
  }
  ChatEvent reasoning;  // a thinking model's reasoning before the text
  reasoning.kind = ChatEvent::Kind::Reasoning;
  reasoning.text = std::string(raw.substr(raw.size() / 2, 64));
  const ChatEvent events[] = {ChatEvent::started(3), reasoning, text, ChatEvent::finished(FinishReason::Length, 3, 1)};
  std::string sse;
  for (const auto& event : events) {
    if (request.stream) sse += renderer.stream_event(event);
    else renderer.collect(event);
  }
  if (request.stream) {
    if (sse.rfind("data: ", 0) != 0) fail("stream does not start with an SSE data line");
  } else {
    const std::string out = splash::api::dump_json(renderer.completion());
    if (out.empty()) fail("empty completion");
  }
  // The XML tool syntax (Qwen3-Coder): the client's calls and tools rendered into a prompt,
  // and the raw input read back as a reply in that syntax, in two chunks, against the
  // request's tools. Any JSON a call's finished arguments hold must parse.
  static const splash::chat::Qwen3CoderFormat coder;
  (void)coder.render_conversation(chat.messages, chat.tools, true);
  // Qwen3.5's template refuses some conversations (splash::Error, in its words); any other
  // exception escapes and is a finding.
  static const splash::chat::Qwen35Format qwen35;
  try {
    for (const bool thinking : {true, false}) (void)qwen35.render_reply_prompt(chat.messages, chat.tools, thinking);
  } catch (const splash::Error&) {
  }
  splash::engine::ToolCallStream stream(splash::chat::ToolCallSyntax::Xml, chat.tools);
  std::vector<splash::engine::ToolCallUpdate> updates;
  stream.push(raw.substr(0, raw.size() / 3), updates);
  stream.push(raw.substr(raw.size() / 3), updates);
  stream.finish(false, updates);
  for (const auto& call : stream.calls())
    if (!call.custom && !call.name.empty() && !nlohmann::json::accept(call.arguments))
      fail("an XML call's finished arguments are not JSON");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const splash::api::ServedModel served{"fuzz-model", kVocab};
  auto result = splash::api::parse_chat_completion_request(body, served);
  if (auto* error = std::get_if<splash::api::ApiError>(&result)) {
    check_error(*error);
  } else {
    check_request(std::get<splash::api::ChatCompletionRequest>(result), body);
  }
  return 0;
}
