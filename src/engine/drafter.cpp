#include "engine/drafter.h"

#include <algorithm>

#include "common/error.h"
#include "model/model.h"
#include "model/model_draft.h"

namespace splash::engine {

DraftMode parse_draft_mode(std::string_view name) {
  if (name == "auto") return DraftMode::Auto;
  if (name == "lookup") return DraftMode::Lookup;
  if (name == "model") return DraftMode::Model;
  if (name == "none") return DraftMode::None;
  fail("--draft: '{}' is not a draft mode (auto, lookup, model or none)", name);
}

const char* draft_mode_name(DraftMode mode) {
  switch (mode) {
    case DraftMode::Auto: return "auto";
    case DraftMode::Lookup: return "lookup";
    case DraftMode::Model: return "model";
    case DraftMode::None: return "none";
  }
  return "auto";
}

void DraftBudget::update(int drafted, int accepted) {
  if (drafted <= 0) return;
  if (accepted == drafted) limit_ = std::min(model::kMaxDraftTokens, 2 * limit_);
  else if (accepted == 0) limit_ = std::max(1, limit_ / 2);
}

uint64_t LookupDrafter::gram_key(std::span<const int32_t> tokens, size_t end) {
  uint64_t key = 1469598103934665603ull;  // FNV-1a over the gram's token ids
  for (size_t i = end - kMatch; i < end; ++i) {
    const auto id = static_cast<uint32_t>(tokens[i]);
    for (int byte = 0; byte < 4; ++byte) key = (key ^ ((id >> (8 * byte)) & 0xFF)) * 1099511628211ull;
  }
  return key;
}

std::vector<int32_t> LookupDrafter::propose(std::span<const int32_t> tokens, int max_tokens) {
  return match(tokens, std::min(max_tokens, budget_.limit()));
}

std::vector<int32_t> LookupDrafter::match(std::span<const int32_t> tokens, int max_tokens) {
  const size_t size = tokens.size();
  if (size < indexed_end_) next_after_.clear(), indexed_end_ = 0;  // not the same sequence: start over
  if (max_tokens <= 0 || size <= kMatch) return {};
  // Index every gram with a token after it: those ending at kMatch .. size - 1. The gram at
  // the end (the one looked up) stays out until a token follows it, so it never finds itself.
  for (size_t end = std::max<size_t>(indexed_end_, kMatch); end < size; ++end) next_after_[gram_key(tokens, end)] = end;
  indexed_end_ = std::max<size_t>(indexed_end_, size);
  const auto found = next_after_.find(gram_key(tokens, size));
  if (found == next_after_.end()) return {};
  const size_t next = found->second;
  if (!std::equal(tokens.begin() + (next - kMatch), tokens.begin() + next, tokens.end() - kMatch)) return {};  // a collision
  // The tokens from `next` on, and past the end the guesses themselves: text that repeats
  // with period size - next goes on repeating (an overlapping copy, as LZ77's).
  std::vector<int32_t> guesses;
  guesses.reserve(max_tokens);
  for (size_t from = next; guesses.size() < static_cast<size_t>(max_tokens); ++from)
    guesses.push_back(from < size ? tokens[from] : guesses[from - size]);
  return guesses;
}

ModelDrafter::ModelDrafter(std::shared_ptr<model::ModelDraft> draft)
    : draft_(std::move(draft)), context_(draft_->new_context()) {}

ModelDrafter::~ModelDrafter() = default;

std::vector<int32_t> ModelDrafter::propose(std::span<const int32_t> tokens, int max_tokens) {
  last_from_draft_ = false;
  std::vector<int32_t> guesses = lookup_.match(tokens, max_tokens);
  const bool long_match = static_cast<int>(guesses.size()) >= std::min(max_tokens, kLongMatch);
  if (guesses.size() > static_cast<size_t>(lookup_.budget().limit())) guesses.resize(lookup_.budget().limit());
  if (long_match || tokens.empty()) return guesses;
  // The guesses follow the last token, sampled but not yet run: the context must hold what precedes it.
  if (!draft_->ready(*context_, tokens)) return guesses;  // (a gap: the draft has not seen the positions just before)
  if (kept_per_block_ < kPaysFrom && ++steps_since_asked_ < kProbeEvery) return guesses;
  steps_since_asked_ = 0;
  last_from_draft_ = true;
  return draft_->propose(*context_, tokens, std::min(max_tokens, draft_budget_.limit()));
}

void ModelDrafter::verified(int drafted, int kept) {
  if (!last_from_draft_) return lookup_.verified(drafted, kept);
  draft_budget_.update(drafted, kept);
  if (drafted > 0) kept_per_block_ = 0.8 * kept_per_block_ + 0.2 * kept;
}

void ModelDrafter::observe_hidden(int first, std::span<const float> rows) { draft_->extend(*context_, first, rows); }

std::vector<float> ModelDrafter::export_state(int first, int count) const {
  return draft_->export_context(*context_, first, count);
}

void ModelDrafter::import_state(int first, std::span<const float> state) {
  draft_->import_context(*context_, first, state);
}

int ModelDrafter::state_positions() const { return draft_->window(); }

}  // namespace splash::engine
