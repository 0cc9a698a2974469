#pragma once
// The one internal request type: every API protocol (api/) translates its request into a
// ChatRequest, and renders the one internal event stream (ChatEvent) back into its own shape.
// Stop strings, sampling, usage, cancellation and errors are therefore written once.
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "engine/generator.h"
#include "engine/sampler.h"

namespace splash::engine {

struct ChatRequest {
  std::vector<chat::ChatMessage> messages;
  SamplingParams sampling;
  int max_tokens = 0;  // 0: as many as the context leaves
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no logprobs
};

struct ChatEvent {
  enum class Kind { Started, Text, Finished, Failed };
  Kind kind = Kind::Text;
  std::string text;                    // Text
  std::vector<TokenLogprob> logprobs;  // Text: tokens behind this text, when requested
  FinishReason finish = FinishReason::Stop;  // Finished
  int prompt_tokens = 0;               // Started, Finished
  int completion_tokens = 0;           // Finished
  int cached_prompt_tokens = 0;        // Finished: prompt tokens reused from the KV cache
  std::string error;                   // Failed: a message for the client (bad request)

  static ChatEvent failed(std::string message) {
    ChatEvent e;
    e.kind = Kind::Failed;
    e.error = std::move(message);
    return e;
  }
  static ChatEvent started(int prompt_tokens) {
    ChatEvent e;
    e.kind = Kind::Started;
    e.prompt_tokens = prompt_tokens;
    return e;
  }
  static ChatEvent finished(FinishReason reason, int prompt_tokens, int completion_tokens, int cached_prompt_tokens = 0) {
    ChatEvent e;
    e.kind = Kind::Finished;
    e.finish = reason;
    e.prompt_tokens = prompt_tokens;
    e.completion_tokens = completion_tokens;
    e.cached_prompt_tokens = cached_prompt_tokens;
    return e;
  }
};

}  // namespace splash::engine
