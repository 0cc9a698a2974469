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


struct Generation::State {
  State(const tokenizer::Tokenizer& tokenizer, GenerationRequest request, PieceSink sink, StopFlag stop_flag)
      : tokenizer(tokenizer),
        request(std::move(request)),
        sink(std::move(sink)),
        stop_flag(stop_flag),
        sampler(this->request.sampling),
        detokenizer(tokenizer),
        shaper(this->request.constraints, tokenizer, this->request.token_trie),
        stops(stop_texts_of(this->request, shaper)),
        reasoning(tokenizer, this->request.reasoning),
        history(this->request.prompt) {}

  // The text stream hides stop strings and, when the model may call tools, the marker that
  // opens a call (from there on the shaper routes bytes to the tool-call stream).
  static std::vector<std::string> stop_texts_of(const GenerationRequest& request, const ReplyShaper& shaper) {
    std::vector<std::string> texts = request.stop;
    if (shaper.calls_enabled()) texts.emplace_back(shaper.tool_call_marker());
    return texts;
  }

  bool emit(const std::string& text) {
    if (text.empty() && pending_logprobs.empty()) return true;
    result.text += text;
    const bool keep_going = sink ? sink(GenerationPiece{text, false, pending_logprobs}) : true;
    pending_logprobs.clear();
    return keep_going;
  }

  bool emit_reasoning(const std::string& text) {
    if (text.empty()) return true;
    result.reasoning += text;
    const bool keep_going = sink ? sink(GenerationPiece{text, true, pending_logprobs}) : true;
    pending_logprobs.clear();
    return keep_going;
  }

  bool emit_updates() {
    bool keep_going = true;
    for (const ToolCallUpdate& update : updates) {
      GenerationPiece piece{{}, false, pending_logprobs, &update};
      keep_going = (sink ? sink(piece) : true) && keep_going;
      pending_logprobs.clear();
    }
    updates.clear();
    return keep_going;
  }

  // Optimistic constrained sampling: draw from the whole distribution, and only when the
  // shaper refuses that token compute the mask and draw again from the allowed tokens.
  int32_t next_token(LogitsRow& logits) {
    const int32_t token = sampler.sample(logits, history);
    if (!shaper.active() || shaper.allows(token)) return token;
    ++result.masked_tokens;
    shaper.fill_mask(allowed);
    return sampler.sample(logits, history, allowed);
  }

  // Flushes what is held back and closes open tool calls.
  void finish() {
    done = true;
    if (result.finish != FinishReason::Cancelled) {
      emit_reasoning(reasoning.flush());
      for (const int32_t token : reasoning.take_opening()) {  // (it never became "<think>")
        --result.reasoning_tokens;
        reply_token(token);
      }
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
  }

  // The next token: forced (the close of a think block whose budget ran out), or sampled,
  // freely inside the block (no constraint applies to reasoning), else under the reply's
  // constraints (also while the reply may still open with "<think>").
  int32_t choose_token(LogitsRow& logits) {
    if (const auto forced = reasoning.take_forced()) return *forced;
    if (reasoning.phase() == ReasoningStream::Phase::Thinking) return sampler.sample(logits, history);
    return next_token(logits);
  }

  std::optional<int32_t> step(LogitsRow& logits) {
    if (done) return std::nullopt;
    const bool thinking = reasoning.phase() != ReasoningStream::Phase::Reply;
    const int32_t token = choose_token(logits);
    if (shaper.overflowed())
      fail("the response format or tool schema is too ambiguous to follow after {} tokens of the reply: it needs "
           "more than {} parse states at once; simplify it (fewer alternatives, optional parts or repetitions)",
           result.tokens.size(), grammar::Matcher::kMaxStacks);
    if (token < 0) {  // the constraints allow nothing more (e.g. a complete structured reply)
      result.finish = FinishReason::Stop;
      return finish(), std::nullopt;
    }
    if (!request.ignore_end_of_generation && tokenizer.is_end_of_generation(token)) {
      result.finish = FinishReason::Stop;
      return finish(), std::nullopt;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    if (request.top_logprobs >= 0) pending_logprobs.push_back(logprob_of(token, logits.whole(), request.top_logprobs, tokenizer));
    bool keep_going = true;
    if (thinking) {
      ++result.reasoning_tokens;
      ReasoningStream::Fed fed = reasoning.push(token);
      result.reasoning_tokens -= static_cast<int>(fed.reply_tokens.size());  // (held while opening: the reply's after all)
      keep_going = emit_reasoning(fed.reasoning);
      if (reasoning.phase() == ReasoningStream::Phase::Reply && result.reasoning_tokens > 0) strip_newlines = true;
      for (const int32_t reply : fed.reply_tokens) keep_going = reply_token(reply) && keep_going;
    } else {
      keep_going = reply_token(token);
    }
    if (!keep_going || (stop_flag && stop_flag->load())) {
      result.finish = FinishReason::Cancelled;
      return finish(), std::nullopt;
    }
    if (in_text && stops.stopped()) {
      result.finish = FinishReason::Stop;
      result.stop_sequence = stops.matched();
      return finish(), std::nullopt;
    }
    if (shaper.finished()) {
      result.finish = FinishReason::Stop;
      return finish(), std::nullopt;
    }
    if (static_cast<int>(result.tokens.size()) >= token_limit) return finish(), std::nullopt;  // Length
    return token;
  }

  // A token of the reply proper (after any think block): the shaper, tool calls, the text.
  bool reply_token(int32_t token) {
    shaper.accept(token, updates);
    bool keep_going = true;
    if (in_text) {
      std::string decoded = detokenizer.push(token);
      if (strip_newlines) {  // the newlines after "</think>" open no reply
        decoded.erase(0, std::min(decoded.size(), decoded.find_first_not_of('\n')));
        strip_newlines = decoded.empty();
      }
      std::string shown = stops.push(decoded);
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
    return emit_updates() && keep_going;
  }

  const tokenizer::Tokenizer& tokenizer;
  GenerationRequest request;
  PieceSink sink;
  StopFlag stop_flag;
  Sampler sampler;
  tokenizer::StreamingDetokenizer detokenizer;
  ReplyShaper shaper;
  StopMatcher stops;
  ReasoningStream reasoning;
  bool strip_newlines = false;  // the reply follows a think block: its leading newlines are dropped
  std::vector<int32_t> history;
  GenerationResult result;
  std::vector<TokenLogprob> pending_logprobs;
  std::vector<ToolCallUpdate> updates;
  std::vector<uint8_t> allowed;
  std::string held;  // text held back while the reply may still open a bare JSON call
  bool in_text = true;
  bool done = false;
  int token_limit = 0;  // max_tokens, and what the context leaves after the prompt
};

Generation::Generation(const tokenizer::Tokenizer& tokenizer, GenerationRequest request, PieceSink sink,
                       StopFlag stop_flag, int vocab, int context) {
  if (request.prompt.empty()) fail("the prompt is empty");
  if (static_cast<int>(request.prompt.size()) >= context)
    fail("the prompt has {} tokens but the context holds {}", request.prompt.size(), context);
  if (auto problem = validate(request.sampling, vocab); !problem.empty()) fail("{}", problem);
  state_ = std::make_unique<State>(tokenizer, std::move(request), std::move(sink), stop_flag);
  auto& s = *state_;
  if (s.shaper.active() && !s.request.token_trie) fail("constrained decoding needs the vocabulary's token trie");
  s.result.prompt_tokens = static_cast<int>(s.request.prompt.size());
  s.result.seed = s.sampler.seed();
  s.result.finish = FinishReason::Length;
  s.in_text = s.shaper.in_text();
  s.token_limit = std::min(s.request.max_tokens, context - static_cast<int>(s.request.prompt.size()) + 1);
  if (s.token_limit <= 0) {
    s.token_limit = 0;
    s.finish();
  }
}

Generation::~Generation() = default;
Generation::Generation(Generation&&) noexcept = default;
const GenerationRequest& Generation::request() const { return state_->request; }
std::optional<int32_t> Generation::step(std::span<const float> logits) {
  LogitsRow row(logits);
  return state_->step(row);
}
std::optional<int32_t> Generation::step(LogitsRow& logits) { return state_->step(logits); }
bool Generation::best_tokens_suffice() const {
  return state_->request.top_logprobs < 0 && !state_->sampler.raises_logits();
}
bool Generation::done() const { return state_->done; }
GenerationResult& Generation::result() { return state_->result; }

VerifiedGuesses verify_guesses(std::span<const int32_t> guesses, std::span<const float> rows, size_t vocab,
                               const std::function<std::optional<int32_t>(std::span<const float>)>& sample,
                               const std::function<void(int32_t)>& kept) {
  VerifiedGuesses out;
  for (size_t i = 0; i <= guesses.size(); ++i) {
    out.next = sample(rows.subspan(vocab * i, vocab));
    if (!out.next || i == guesses.size() || *out.next != guesses[i]) return out;
    kept(*out.next);
    ++out.kept;
    out.next.reset();
  }
  return out;
}

GenerationResult generate(model::Sequence& sequence, const tokenizer::Tokenizer& tokenizer,
                          const GenerationRequest& request, const PieceSink& sink, StopFlag stop_flag, int reuse,
                          Drafter* drafter, DecodeStats* stats) {
  using Clock = std::chrono::steady_clock;
  const model::ModelInfo& info = sequence.info();
  Generation generation(tokenizer, request, sink, stop_flag, info.vocab, info.context);
  reuse = std::clamp(reuse, 0, static_cast<int>(request.prompt.size()) - 1);
  generation.result().cached_prompt_tokens = reuse;
  reuse = std::min(reuse, sequence.position());
  // A hybrid model's recurrent state holds only the whole sequence so far: reused whole or not at all.
  if (info.state_slots > 0 && reuse != sequence.position()) reuse = 0;
  generation.result().cached_prompt_tokens = reuse;
  sequence.truncate(reuse);
  const auto prefill_start = Clock::now();
  if (info.max_logits_per_slice < 2 || info.draft_pass_tokens < 2) drafter = nullptr;
  // A block drafter reads the hidden states of the committed positions its state reaches back
  // to (none: no taps): the prompt's earlier part runs without keeping them.
  std::vector<float> prompt_hidden;
  const int reach = drafter ? drafter->state_positions() : 0;
  const int prompt_first =
      reach > 0 ? std::max(sequence.position(), static_cast<int>(request.prompt.size()) - reach) : sequence.position();
  if (prompt_first > sequence.position())
    sequence.forward(std::span(request.prompt).subspan(sequence.position(), prompt_first - sequence.position()));
  std::span<const float> logits =
      sequence.forward(std::span(request.prompt).subspan(prompt_first), {}, reach > 0 ? &prompt_hidden : nullptr);
  if (drafter && !prompt_hidden.empty()) drafter->observe_hidden(prompt_first, prompt_hidden);
  const auto hand_on_hidden = [&](int first, int committed) {
    if (drafter) drafter->observe_committed(first, sequence.position(), sequence.hidden_taps(), committed);
  };
  const auto decode_start = Clock::now();
  // One decode loop: each step feeds the sampled token and whatever guesses the drafter has
  // (none: a plain step), and samples what the verified rows allow.
  std::vector<int32_t> text = request.prompt;  // what the drafter reads: the prompt and the reply so far
  std::optional<int32_t> token = generation.step(logits);
  while (token) {
    text.push_back(*token);
    const int room = std::min({info.max_logits_per_slice - 1, info.draft_pass_tokens - 1,
                               generation.request().max_tokens - static_cast<int>(generation.result().tokens.size()) - 1,
                               info.context - sequence.position() - 1});
    std::vector<int32_t> block{*token};
    if (drafter && room > 0)
      for (const int32_t guess : drafter->propose(text, room)) {
        if (static_cast<int>(block.size()) > room || guess < 0 || guess >= info.vocab) break;
        block.push_back(guess);
      }
    if (block.size() == 1 && info.best_tokens_on_device && generation.best_tokens_suffice()) {
      // The row's best tokens, found where the logits are; the whole row only if they cannot decide.
      LogitsRow row(sequence.forward_best(*token), [&] { return sequence.whole_row(); });
      hand_on_hidden(sequence.position() - 1, 1);
      token = generation.step(row);
      continue;
    }
    if (block.size() == 1) {
      const auto row = sequence.forward(block);
      hand_on_hidden(sequence.position() - 1, 1);
      token = generation.step(row);
      continue;
    }
    const int fed = sequence.position();
    const auto rows = sequence.verify(block);
    const auto guesses = std::span(block).subspan(1);
    const VerifiedGuesses verified = verify_guesses(guesses, rows, static_cast<size_t>(info.vocab),
                                                    [&](std::span<const float> row) { return generation.step(row); },
                                                    [&](int32_t kept) { text.push_back(kept); });
    hand_on_hidden(fed, 1 + verified.kept);  // (before truncate: the rows are the block's)
    sequence.truncate(fed + 1 + verified.kept);  // the refused guesses' positions are forgotten
    drafter->verified(static_cast<int>(guesses.size()), verified.kept);
    if (stats) ++stats->verify_steps, stats->draft_tokens += static_cast<int>(guesses.size()),
               stats->accepted_draft_tokens += verified.kept;
    token = verified.next;
  }
  GenerationResult& result = generation.result();
  result.prefill_seconds = std::chrono::duration<double>(decode_start - prefill_start).count();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  return std::move(result);
}

}  // namespace splash::engine
