#pragma once
// One generation from a prompt: prefill, then sample / decode until an end-of-generation
// token, a stop string, max_tokens or the end of the context. Text is streamed to a sink
// as soon as it is valid UTF-8 and cannot be part of a stop string.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {

enum class FinishReason { Stop, Length, Cancelled };
const char* finish_reason_name(FinishReason reason);

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 512;
  std::vector<std::string> stop;
  bool ignore_end_of_generation = false;  // benchmarks decode a fixed count
};

struct GenerationResult {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Stop;
  int prompt_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;  // from the first sampled token to the last
  uint64_t seed = 0;
};

// Returns false to cancel the generation.
using TextSink = std::function<bool(std::string_view)>;

GenerationResult generate(model::Model& model, const tokenizer::Tokenizer& tokenizer, const GenerationRequest& request,
                          const TextSink& sink);

}  // namespace splash::engine
