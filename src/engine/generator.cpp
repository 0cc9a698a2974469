#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.h"
#include "engine/output_constraints.h"
#include "engine/stop_matcher.h"
#include "tokenizer/streaming_detokenizer.h"

namespace splash::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::ToolCalls: return "tool_calls";
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
  ReplyShaper shaper(request.constraints, tokenizer, request.token_trie);
  if (shaper.active() && !request.token_trie) fail("constrained decoding needs the vocabulary's token trie");
  // The text stream hides stop strings and, when the model may call tools, the marker that
  // opens a call (from there on the shaper routes bytes to the tool-call stream).
  std::vector<std::string> stop_texts = request.stop;
  const std::string marker(shaper.tool_call_marker());
  if (shaper.calls_enabled()) stop_texts.push_back(marker);
  StopMatcher stops(stop_texts);
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
  std::vector<ToolCallUpdate> updates;
  auto emit_updates = [&]() {
    bool keep_going = true;
    for (const ToolCallUpdate& update : updates) {
      GenerationPiece piece{{}, pending_logprobs, &update};
      keep_going = (sink ? sink(piece) : true) && keep_going;
      pending_logprobs.clear();
    }
    updates.clear();
    return keep_going;
  };
  // Optimistic constrained sampling: draw from the whole distribution, and only when the
  // shaper refuses that token compute the mask and draw again from the allowed tokens.
  std::vector<uint8_t> allowed;
  auto next_token = [&]() -> int32_t {
    const int32_t token = sampler.sample(logits, history);
    if (!shaper.active() || shaper.allows(token)) return token;
    ++result.masked_tokens;
    shaper.fill_mask(allowed);
    return sampler.sample(logits, history, allowed);
  };

  result.finish = FinishReason::Length;
  bool in_text = shaper.in_text();
  std::string held;  // text held back while the reply may still open a bare JSON call
  while (static_cast<int>(result.tokens.size()) < request.max_tokens) {
    const int32_t token = next_token();
    if (token < 0) {  // the constraints allow nothing more (e.g. a complete structured reply)
      result.finish = FinishReason::Stop;
      break;
    }
    if (!request.ignore_end_of_generation && tokenizer.is_end_of_generation(token)) {
      result.finish = FinishReason::Stop;
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    if (request.top_logprobs >= 0) pending_logprobs.push_back(logprob_of(token, logits, request.top_logprobs, tokenizer));
    shaper.accept(token, updates);
    bool keep_going = true;
    if (in_text) {
      std::string shown = stops.push(detokenizer.push(token));
      if (!shaper.in_text()) {  // this token opened a tool call
        in_text = false;
        // After <tool_call> the stop matcher has hidden the marker; a bare JSON call's opening
        // (held back while undecided) belongs to the call, not to the text.
        if (shaper.bare_call()) shown.clear(), held.clear();
        keep_going = emit(held + shown + stops.flush());
        held.clear();
      } else if (shaper.undecided()) {  // may still become a bare JSON call: hold it back
        held += shown;
        keep_going = emit({});
      } else {
        keep_going = emit(held + shown);
        held.clear();
      }
    }
    keep_going = emit_updates() && keep_going;
    if (!keep_going || (stop_flag && stop_flag->load())) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (in_text && stops.stopped()) {
      result.finish = FinishReason::Stop;
      result.stop_sequence = stops.matched();
      break;
    }
    if (shaper.finished()) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (static_cast<int>(result.tokens.size()) >= request.max_tokens || model.position() >= context) break;
    logits = model.forward({&token, 1});
    if (cache) cache->tokens.push_back(token);
  }
  if (result.finish != FinishReason::Cancelled) {
    if (in_text) {
      std::string tail = std::move(held);
      if (!stops.stopped()) {
        tail += stops.push(detokenizer.flush());
        tail += stops.flush();
      }
      emit(tail);
    }
    shaper.finish(updates);
    emit_updates();
    if (!shaper.calls().empty() && result.finish == FinishReason::Stop) result.finish = FinishReason::ToolCalls;
  }
  result.tool_calls = shaper.calls();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  return result;
}

}  // namespace splash::engine
