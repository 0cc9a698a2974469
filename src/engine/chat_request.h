#pragma once
// The one internal request type: every API protocol (api/) translates its request into a
// ChatRequest, and renders the one internal event stream (ChatEvent) back into its own shape.
// Stop strings, sampling, tools, structured output, usage, cancellation and errors are
// therefore written once.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "chat/tool_spec.h"
#include "engine/generator.h"
#include "engine/sampler.h"

namespace splash::engine {

enum class ToolChoice {
  Auto,      // the model decides between text and calls
  None,      // no calls (the tools stay in the prompt, so its cached prefix stays valid)
  Required,  // at least one call, nothing else
  Named,     // exactly a call of ChatRequest::tool_choice_name
};

// The shape of the reply's text (tool calls are shaped by their own specs).
struct OutputFormat {
  enum class Kind { Text, JsonObject, JsonSchema, Lark };
  Kind kind = Kind::Text;
  nlohmann::json schema;  // JsonSchema
  std::string grammar;    // Lark
};

struct OutputConstraints;  // compiled grammars, see engine/output_constraints.h

// Reasoning, for a model whose replies think (ChatFormat::thinks()): off (its template's
// thinking-off opening), or on with at most `budget_tokens` thinking tokens, after which the
// engine closes the think block for the model (-1: no limit). A reply constrained from its
// first token (a response format, a required or named tool) does not think.
struct ReasoningSettings {
  bool enabled = true;
  int budget_tokens = -1;
  bool requested = false;  // the request said (else the server's default applies, ServerOptions)
};

struct ChatRequest {
  std::vector<chat::ChatMessage> messages;
  SamplingParams sampling;
  int max_tokens = 0;  // 0: as many as the context leaves
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no logprobs
  std::vector<chat::ToolSpec> tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // Named
  bool parallel_tool_calls = true;
  OutputFormat output_format;
  ReasoningSettings reasoning;
  // How the model writes tool calls (its chat format's, ChatFormat::tool_call_syntax): the
  // calls' grammar and parser follow it. Set by whoever holds the chat format.
  chat::ToolCallSyntax tool_syntax = chat::ToolCallSyntax::Json;
  // Compiled from tools / tool_choice / output_format by compile_output_constraints() before
  // submission (so schema errors are the caller's 400s); null when nothing is constrained.
  std::shared_ptr<const OutputConstraints> constraints;
};

struct ChatEvent {
  enum class Kind { Started, Reasoning, Text, ToolCallStarted, ToolCallArguments, ToolCallFinished, Finished, Failed };
  Kind kind = Kind::Text;
  std::string text;                    // Text, Reasoning (its next piece); ToolCallArguments: the next piece of the arguments
  std::vector<TokenLogprob> logprobs;  // Text: tokens behind this text, when requested
  int tool_index = 0;                  // ToolCall*: 0, 1, ... within this reply
  chat::ToolCall tool_call;            // ToolCallStarted: id, name, custom; ToolCallFinished: complete
  FinishReason finish = FinishReason::Stop;  // Finished
  std::string stop_sequence;           // Finished: the caller's stop string that ended the reply, if one did
  int prompt_tokens = 0;               // Started, Finished
  int completion_tokens = 0;           // Finished
  int reasoning_tokens = 0;            // Finished: of them, the think block's
  int cached_prompt_tokens = 0;        // Started, Finished: prompt tokens reused from the KV cache
  int draft_tokens = 0;                // Finished: drafted tokens the model verified (speculative decoding)
  int accepted_draft_tokens = 0;       // Finished: of them, the tokens the reply kept
  std::string error;                   // Failed: a message for the client (bad request)

  static ChatEvent failed(std::string message) {
    ChatEvent e;
    e.kind = Kind::Failed;
    e.error = std::move(message);
    return e;
  }
  static ChatEvent started(int prompt_tokens, int cached_prompt_tokens = 0) {
    ChatEvent e;
    e.kind = Kind::Started;
    e.prompt_tokens = prompt_tokens;
    e.cached_prompt_tokens = cached_prompt_tokens;
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
