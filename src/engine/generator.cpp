#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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

namespace {

TokenLogprob logprob_of(int32_t token, std::span<const float> logits, int top_n, const tokenizer::Tokenizer& tokenizer) {
  // log_softmax in double: logsumexp over the whole vocabulary.
  const float best = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (float logit : logits) total += std::exp(static_cast<double>(logit - best));
  const double log_total = std::log(total) + best;
  TokenLogprob result{token, tokenizer.token_bytes(token), static_cast<float>(logits[token] - log_total), {}};
  if (top_n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t n = std::min<size_t>(top_n, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (size_t i = 0; i < n; ++i)
      result.top.emplace_back(tokenizer.token_bytes(ids[i]), static_cast<float>(logits[ids[i]] - log_total));
  }
  return result;
}

}  // namespace

size_t reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt) {
  const size_t limit = std::min(cached.size(), prompt.empty() ? 0 : prompt.size() - 1);
  size_t common = 0;
  while (common < limit && cached[common] == prompt[common]) ++common;
  return common;
}

GenerationResult generate(model::Model& model, const tokenizer::Tokenizer& tokenizer, const GenerationRequest& request,
                          const PieceSink& sink, StopFlag stop_flag, CachedSequence* cache) {
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

  // Reuse what the cache holds, if it really is what the model holds.
  size_t reused = 0;
  if (cache && static_cast<size_t>(model.position()) == cache->tokens.size())
    reused = reusable_prefix(cache->tokens, request.prompt);
  result.cached_prompt_tokens = static_cast<int>(reused);
  model.truncate(static_cast<int>(reused));
  if (cache) cache->tokens.assign(request.prompt.begin(), request.prompt.begin() + static_cast<std::ptrdiff_t>(reused));
  const auto prefill_start = Clock::now();
  std::span<const float> logits = model.forward(std::span(request.prompt).subspan(reused));
  if (cache) cache->tokens = request.prompt;
  const auto decode_start = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(decode_start - prefill_start).count();

  std::vector<TokenLogprob> pending_logprobs;
  auto emit = [&](const std::string& text) {
    if (text.empty() && pending_logprobs.empty()) return true;
    result.text += text;
    const bool keep_going = sink ? sink(GenerationPiece{text, pending_logprobs}) : true;
    pending_logprobs.clear();
    return keep_going;
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
    if (request.top_logprobs >= 0) pending_logprobs.push_back(logprob_of(token, logits, request.top_logprobs, tokenizer));
    if (!emit(stops.push(detokenizer.push(token))) || (stop_flag && stop_flag->load())) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (stops.stopped()) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (static_cast<int>(result.tokens.size()) >= request.max_tokens || model.position() >= context) break;
    logits = model.forward({&token, 1});
    if (cache) cache->tokens.push_back(token);
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
