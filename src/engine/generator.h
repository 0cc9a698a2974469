#pragma once
// One generation from a prompt: prefill, then sample / decode until an end-of-generation
// token, a stop string, max_tokens or the end of the context. Text is streamed to a sink
// as soon as it is valid UTF-8 and cannot be part of a stop string.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "engine/tool_call_stream.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace splash::grammar {
class TokenTrie;
}

namespace splash::engine {

enum class FinishReason {
  Stop,       // end of generation token, a stop string, or a structured reply that is complete
  Length,     // max_tokens or the end of the context
  ToolCalls,  // the reply ended after one or more tool calls
  Cancelled,
};
const char* finish_reason_name(FinishReason reason);

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 512;
  std::vector<std::string> stop;
  bool ignore_end_of_generation = false;  // benchmarks decode a fixed count
  int top_logprobs = -1;                  // -1: no logprobs; else also the n most likely
  // Tool calls and structured output (engine/output_constraints.h); null: free text. Shared
  // and immutable, so a cached compilation serves many requests.
  std::shared_ptr<const OutputConstraints> constraints;
  std::shared_ptr<const grammar::TokenTrie> token_trie;  // the vocabulary for constraints' masks
};

// A generated token's log-probability under the model (raw logits, before sampling
// adjustments), with the most likely alternatives when asked for.
struct TokenLogprob {
  int32_t id = 0;
  std::string token;  // its bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

// What the sink receives: text safe to show now, and the logprobs of the tokens generated
// since the previous piece (a piece can carry tokens but no text yet, e.g. half a character).
// A piece carries either text or one tool-call update.
struct GenerationPiece {
  std::string_view text;
  std::span<const TokenLogprob> logprobs;
  const ToolCallUpdate* tool = nullptr;
};

// The tokens whose keys and values the model's cache holds, in position order. Passed to
// generate(), it lets a request reuse the longest common prefix with what the previous one
// left (a conversation's next turn computes only its new tokens), and is kept up to date.
// (The scheduler issue replaces this single-sequence cache with a shared paged one.)
struct CachedSequence {
  std::vector<int32_t> tokens;
};

struct GenerationResult {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Stop;
  std::string stop_sequence;  // the request's stop string that ended it, if one did
  std::vector<chat::ToolCall> tool_calls;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // prompt tokens reused from the cache, not recomputed
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;  // from the first sampled token to the last
  int masked_tokens = 0;        // tokens whose constraint mask had to be computed (slow path)
  uint64_t seed = 0;
};

// Returns false to cancel the generation.
using PieceSink = std::function<bool(const GenerationPiece&)>;
// Stops a generation from outside between two tokens (e.g. server shutdown); may be null.
using StopFlag = const std::atomic<bool>*;

GenerationResult generate(model::Model& model, const tokenizer::Tokenizer& tokenizer, const GenerationRequest& request,
                          const PieceSink& sink, StopFlag stop_flag = nullptr, CachedSequence* cache = nullptr);

// How many leading tokens of `prompt` can be taken from `cached`: the common prefix, but
// never the whole prompt (the last prompt token is always recomputed for its logits).
size_t reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt);

}  // namespace splash::engine
