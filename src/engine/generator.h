#pragma once
// One generation from a prompt: prefill, then sample / decode until an end-of-generation
// token, a stop string, max_tokens or the end of the context. Text is streamed to a sink
// as soon as it is valid UTF-8 and cannot be part of a stop string.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/drafter.h"
#include "engine/reasoning_stream.h"
#include "engine/sampler.h"
#include "engine/tool_call_stream.h"
#include "model/model.h"
#include "model/sequence.h"
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
  // A thinking model's reply: its opening <think> block streams as reasoning (reasoning_stream.h).
  ReasoningControl reasoning;
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
  bool reasoning = false;  // the text is the reply's reasoning (its <think> block), not the reply
  std::span<const TokenLogprob> logprobs;
  const ToolCallUpdate* tool = nullptr;
};

struct GenerationResult {
  std::string text;
  std::string reasoning;     // a thinking model's reasoning (its <think> block's text)
  int reasoning_tokens = 0;  // tokens of the <think> block
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

// The decoding side of one request, one token at a time, independent of how the model is
// run: the scheduler feeds many of these from one batched forward pass. Each step takes
// the logits after the sequence's last token, samples (with constraints), streams text and
// tool-call updates to the sink, and returns the token to feed next, or nothing when the
// generation has ended (end-of-generation token, stop string, max_tokens, the context,
// complete structured output, cancellation).
class Generation {
 public:
  // Throws splash::Error on a request the model cannot run (empty prompt, no room, bad
  // sampling parameters). `context` is the model's context: prompt + reply fit in it.
  Generation(const tokenizer::Tokenizer& tokenizer, GenerationRequest request, PieceSink sink, StopFlag stop_flag,
             int vocab, int context);
  ~Generation();
  Generation(Generation&&) noexcept;

  const GenerationRequest& request() const;
  std::optional<int32_t> step(std::span<const float> logits);
  // The same from a row's best tokens (the whole row read only if they cannot decide).
  std::optional<int32_t> step(LogitsRow& logits);
  // Whether a row's best tokens usually decide this generation's next token (no logprobs,
  // no adjustment that raises a logit): worth asking the model for them instead of whole rows.
  bool best_tokens_suffice() const;
  bool done() const;
  // The outcome so far (complete once done()); prefill/decode times are the caller's.
  GenerationResult& result();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Takes a verify block's logits through the sampler (speculative decoding): row i holds the
// logits after the fed token and guesses[0, i), which plain decoding would have seen only if
// every one of those guesses was the token it sampled. So rows are sampled in order while
// the sampled token is the guess; `kept` hears each kept guess. Returns how many guesses were
// kept and the last sampled token, to feed next (nothing: the generation ended).
struct VerifiedGuesses {
  int kept = 0;
  std::optional<int32_t> next;
};
VerifiedGuesses verify_guesses(std::span<const int32_t> guesses, std::span<const float> rows, size_t vocab,
                               const std::function<std::optional<int32_t>(std::span<const float>)>& sample,
                               const std::function<void(int32_t)>& kept);

// Runs one request on a single sequence of the model, reusing the sequence's first
// `reuse` tokens (the caller knows they equal the prompt's). With a drafter (and a model
// that verifies drafts), each step verifies its guesses in one pass: the reply is the same.
struct DecodeStats {
  int verify_steps = 0, draft_tokens = 0, accepted_draft_tokens = 0;
};
GenerationResult generate(model::Sequence& sequence, const tokenizer::Tokenizer& tokenizer,
                          const GenerationRequest& request, const PieceSink& sink, StopFlag stop_flag = nullptr,
                          int reuse = 0, Drafter* drafter = nullptr, DecodeStats* stats = nullptr);

}  // namespace splash::engine
