#include "engine/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace splash::engine {

std::string validate(const SamplingParams& p, int vocab_size) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f || p.temperature > 100.0f)
    return "temperature must be between 0 and 100";
  if (p.top_k < 0) return "top_k must be >= 0";
  if (!std::isfinite(p.top_p) || p.top_p <= 0.0f || p.top_p > 1.0f) return "top_p must be in (0, 1]";
  if (!std::isfinite(p.min_p) || p.min_p < 0.0f || p.min_p > 1.0f) return "min_p must be in [0, 1]";
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f || p.repetition_penalty > 10.0f)
    return "repetition_penalty must be in (0, 10]";
  if (!std::isfinite(p.presence_penalty) || std::fabs(p.presence_penalty) > 2.0f)
    return "presence_penalty must be between -2 and 2";
  if (!std::isfinite(p.frequency_penalty) || std::fabs(p.frequency_penalty) > 2.0f)
    return "frequency_penalty must be between -2 and 2";
  if (p.penalty_window < -1) return "penalty window must be >= -1";
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) return fmt::format("logit_bias token {} is outside the vocabulary", id);
    if (!std::isfinite(bias) || std::fabs(bias) > 100.0f) return "logit_bias values must be between -100 and 100";
  }
  return {};
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : std::random_device{}()), rng_(seed_) {}

double Sampler::next_uniform() {
  // 53 random bits -> [0, 1): std::uniform_real_distribution is implementation-defined.
  return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  return sample(logits, history, {});
}

bool Sampler::penalizes() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
}

bool Sampler::raises_logits() const {
  for (const auto& [id, bias] : params_.logit_bias)
    if (bias > 0.0f) return true;
  return params_.repetition_penalty < 1.0f || params_.presence_penalty < 0.0f || params_.frequency_penalty < 0.0f;
}

Sampler::Counts Sampler::penalty_counts(std::span<const int32_t> history) const {
  Counts counts;
  if (!penalizes() || history.empty()) return counts;
  const size_t window = params_.penalty_window < 0 ? history.size()
                                                   : std::min<size_t>(history.size(), params_.penalty_window);
  for (int32_t id : history.subspan(history.size() - window)) ++counts[id];
  return counts;
}

float Sampler::adjusted(int32_t id, float logit, const Counts& counts) const {
  if (const auto bias = params_.logit_bias.find(id); bias != params_.logit_bias.end()) logit += bias->second;
  if (const auto count = counts.find(id); count != counts.end()) {
    if (params_.repetition_penalty != 1.0f)
      logit = logit > 0.0f ? logit / params_.repetition_penalty : logit * params_.repetition_penalty;
    logit -= params_.frequency_penalty * static_cast<float>(count->second) + params_.presence_penalty;
  }
  return logit;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history,
                        std::span<const uint8_t> allowed) {
  adjusted_.assign(logits.begin(), logits.end());
  const Counts counts = penalty_counts(history);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= 0 && static_cast<size_t>(id) < adjusted_.size()) adjusted_[id] = adjusted(id, adjusted_[id], counts);
  for (const auto& [id, count] : counts)
    if (id >= 0 && static_cast<size_t>(id) < adjusted_.size() && !params_.logit_bias.contains(id))
      adjusted_[id] = adjusted(id, adjusted_[id], counts);

  if (!allowed.empty()) {
    bool any = false;
    for (size_t i = 0; i < adjusted_.size(); ++i) {
      if (i < allowed.size() && allowed[i]) any = true;
      else adjusted_[i] = -std::numeric_limits<float>::infinity();
    }
    if (!any) return -1;
  }
  if (params_.greedy())
    return static_cast<int32_t>(std::max_element(adjusted_.begin(), adjusted_.end()) - adjusted_.begin());

  // Candidates: with top-k, only the k best; otherwise every token within 30 nats of the
  // best (the rest have probability below e^-30 each and cannot change top-p/min-p choices).
  candidates_.clear();
  const float best = *std::max_element(adjusted_.begin(), adjusted_.end());
  for (size_t i = 0; i < adjusted_.size(); ++i)
    if (std::isfinite(adjusted_[i]) && adjusted_[i] >= best - window())
      candidates_.push_back({static_cast<int32_t>(i), adjusted_[i]});
  return draw();
}

// From the best tokens, ranked by their adjusted logits. Every token outside them has an
// unadjusted logit ranking at or below the last of them (`edge`), and no adjustment raises a
// logit, so a candidate ranking above the edge outranks every token outside: when enough
// of them do (the best one; top_k of them, or every token within reach of the best), the
// token and the random draw are those of the whole row. Otherwise nothing is drawn.
std::optional<int32_t> Sampler::sample_from_best(std::span<const model::TokenLogit> best,
                                                 std::span<const int32_t> history, std::span<const uint8_t> allowed) {
  if (best.empty() || raises_logits()) return std::nullopt;
  const model::TokenLogit edge = best.back();
  const bool complete = edge.id < 0;  // a row shorter than kBestTokens: padded, every token here
  const auto above_edge = [&](const Candidate& c) { return complete || !model::ranks_before(edge, c); };
  const Counts counts = penalty_counts(history);
  candidates_.clear();
  for (const model::TokenLogit& token : best) {
    if (token.id < 0) break;
    if (!allowed.empty() && (static_cast<size_t>(token.id) >= allowed.size() || !allowed[token.id])) continue;
    candidates_.push_back({token.id, adjusted(token.id, token.logit, counts)});
  }
  if (candidates_.empty()) return std::nullopt;
  const Candidate first = *std::min_element(candidates_.begin(), candidates_.end(), model::ranks_before);
  if (!above_edge(first)) return std::nullopt;
  if (params_.greedy()) return first.id;
  if (!std::isfinite(first.logit)) return std::nullopt;
  const float reach = first.logit - window();
  std::erase_if(candidates_, [&](const Candidate& c) { return !(std::isfinite(c.logit) && c.logit >= reach); });
  const bool all_within_reach = complete || edge.logit < reach;
  const auto ranked_above = std::count_if(candidates_.begin(), candidates_.end(), above_edge);
  if (!all_within_reach && !(params_.top_k > 0 && ranked_above >= params_.top_k)) return std::nullopt;
  return draw();
}

int32_t Sampler::sample(LogitsRow& row, std::span<const int32_t> history, std::span<const uint8_t> allowed) {
  if (!row.best().empty())
    if (const auto token = sample_from_best(row.best(), history, allowed)) return *token;
  return sample(row.whole(), history, allowed);
}

int32_t Sampler::draw() {
  auto by_logit = model::ranks_before;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_logit);
    candidates_.resize(params_.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }

  // Probabilities at the requested temperature.
  std::vector<double> probs(candidates_.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs[i] = std::exp(static_cast<double>(candidates_[i].logit - candidates_[0].logit) / params_.temperature);
    total += probs[i];
  }
  size_t keep = candidates_.size();
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += probs[i] / total;
      if (cumulative >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const double threshold = params_.min_p * probs[0];
    size_t above = 1;
    while (above < keep && probs[above] >= threshold) ++above;
    keep = above;
  }
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += probs[i];
  const double target = next_uniform() * kept_total;
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) return candidates_[i].id;
  }
  return candidates_[keep - 1].id;
}

}  // namespace splash::engine
