#include "engine/generator.h"

#include <chrono>

#include "common/error.h"
#include "engine/stop_matcher.h"
#include "tokenizer/streaming_detokenizer.h"

namespace splash::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "stop";
}

GenerationResult generate(model::Model& model, const tokenizer::Tokenizer& tokenizer, const GenerationRequest& request,
                          const TextSink& sink) {
  using Clock = std::chrono::steady_clock;
  if (request.prompt.empty()) fail("the prompt is empty");
  const int context = model.info().context;
  if (static_cast<int>(request.prompt.size()) >= context)
    fail("the prompt has {} tokens but the context holds {}", request.prompt.size(), context);
  if (auto problem = validate(request.sampling, model.info().vocab); !problem.empty()) fail("{}", problem);

  GenerationResult result;
  result.prompt_tokens = static_cast<int>(request.prompt.size());
  Sampler sampler(request.sampling);
  result.seed = sampler.seed();
  tokenizer::StreamingDetokenizer detokenizer(tokenizer);
  StopMatcher stops(request.stop);
  std::vector<int32_t> history = request.prompt;

  model.truncate(0);
  const auto prefill_start = Clock::now();
  std::span<const float> logits = model.forward(request.prompt);
  const auto decode_start = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(decode_start - prefill_start).count();

  auto emit = [&](const std::string& text) {
    if (text.empty()) return true;
    result.text += text;
    return sink ? sink(text) : true;
  };

  result.finish = FinishReason::Length;
  while (static_cast<int>(result.tokens.size()) < request.max_tokens) {
    const int32_t token = sampler.sample(logits, history);
    if (!request.ignore_end_of_generation && tokenizer.is_end_of_generation(token)) {
      result.finish = FinishReason::Stop;
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    if (!emit(stops.push(detokenizer.push(token)))) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (stops.stopped()) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (static_cast<int>(result.tokens.size()) >= request.max_tokens || model.position() >= context) break;
    logits = model.forward({&token, 1});
  }
  if (result.finish != FinishReason::Cancelled && !stops.stopped()) {
    std::string tail = stops.push(detokenizer.flush());
    tail += stops.flush();
    emit(tail);
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  return result;
}

}  // namespace splash::engine
