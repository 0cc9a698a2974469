#pragma once
// Speculative decoding's guesses: a drafter proposes the tokens a sequence will generate
// next, and the scheduler has the model verify them in the sequence's next decode pass
// (model::SequenceSlice, a verify block). A guess costs compute, never output: the engine
// keeps a guessed token only where the sampler, run on the verified logits exactly as plain
// decoding would run it, produces that very token.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace splash::model {
class ModelDraft;
class DraftContext;
}  // namespace splash::model

namespace splash::engine {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens guesses of the tokens after `tokens` (the prompt and the reply so far;
  // it only grows between calls for one sequence). Fewer, or none, when it has no guess.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) = 0;
  // A drafter conditioned on the model's hidden states (a block draft) is handed every pass's
  // tapped rows (Model::hidden_taps, [n][taps][d_model]) of the sequence's positions
  // first .. first + n - 1 that the pass committed (a verify block's refused guesses are not
  // among them); others ignore them.
  virtual void observe_hidden(int /*first*/, std::span<const float> /*rows*/) {}
  // observe_hidden for a pass over positions first .. end - 1 whose tapped rows are `taps`
  // (every row of the pass): the first `committed` of them.
  void observe_committed(int first, int end, std::span<const float> taps, int committed) {
    if (taps.empty() || committed <= 0 || end <= first) return;
    observe_hidden(first, taps.first(taps.size() / (end - first) * committed));
  }
  // How its last guesses fared: `drafted` verified, the first `kept` of them kept (a drafter
  // sizes its next guesses by this: DraftBudget).
  virtual void verified(int /*drafted*/, int /*kept*/) {}
  // A drafter whose state follows the sequence's positions (a block draft's context) hands out
  // the state of positions first .. first + count - 1, kept beside the prefix cache, and takes
  // such state back for a sequence that reuses that prefix (whose hidden states it will never
  // see). Empty: it does not hold all of them.
  virtual std::vector<float> export_state(int /*first*/, int /*count*/) const { return {}; }
  virtual void import_state(int /*first*/, std::span<const float> /*state*/) {}
  // How many positions before the sequence's end its state reaches back (0: it keeps none).
  virtual int state_positions() const { return 0; }
};

// One drafter per request.
using DrafterFactory = std::function<std::unique_ptr<Drafter>()>;

// How many guesses a drafter's next proposal holds: longer while its guesses are taken whole,
// shorter once the first is refused (a refused guess costs a verify row; on a GPU or a busy
// CPU batch those rows are not free). Each source of guesses keeps its own, so one that
// guesses badly does not cut another's runs short.
class DraftBudget {
 public:
  static constexpr int kInitial = 8;
  int limit() const { return limit_; }  // at most model::kMaxDraftTokens
  void update(int drafted, int accepted);

 private:
  int limit_ = kInitial;
};

// Which drafts the engine verifies (`--draft`): auto picks the best the model has (its block
// draft where one is given, else its own MTP block where it has one, with lookup's long
// matches first; else the lookup drafter), model that draft (the model must have one), none
// decodes plainly (to compare, or to check).
enum class DraftMode { Auto, Lookup, Model, None };
DraftMode parse_draft_mode(std::string_view name);  // throws splash::Error naming the choices
const char* draft_mode_name(DraftMode mode);

// Prompt lookup: coding agents' replies repeat what the conversation holds (a file being
// edited, a diff, a tool call's arguments), so the tokens that followed the latest earlier
// occurrence of the sequence's last kMatch tokens are a good guess of what comes next (and
// where that copy runs into the sequence's end, text repeating with that period goes on
// repeating). The index of every kMatch-gram grows with the sequence, so each proposal costs
// the tokens added since the last one.
class LookupDrafter final : public Drafter {
 public:
  static constexpr int kMatch = 3;
  // The match's guesses, at most the budget's.
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override;
  void verified(int drafted, int kept) override { budget_.update(drafted, kept); }
  // The match's guesses, up to max_tokens whatever the budget (none: no match).
  std::vector<int32_t> match(std::span<const int32_t> tokens, int max_tokens);
  const DraftBudget& budget() const { return budget_; }

 private:
  DraftBudget budget_;
  // A kMatch-gram ending at `end` (exclusive) mapped to `end`, the position that followed it.
  static uint64_t gram_key(std::span<const int32_t> tokens, size_t end);
  std::unordered_map<uint64_t, uint32_t> next_after_;
  size_t indexed_end_ = 0;  // grams ending before this position are in the index
};

// The lookup drafter's long matches first (re-emitted code), else the guesses of the model's
// own draft (model/model_draft.h: a block draft made for it, or its MTP block), which the
// sequence's hidden states condition. The draft is shared by every sequence of an engine (one
// thread runs them); each sequence keeps its own context. A draft whose guesses are seldom
// kept costs more than it saves (each refused guess is a verified row): while the tokens it
// gets kept a proposal average under kPaysFrom, only every kProbeEvery-th step asks it (so it
// is taken up again once it guesses well).
class ModelDrafter final : public Drafter {
 public:
  // A lookup match at least this long (or as long as asked) is taken as it is.
  static constexpr int kLongMatch = 4;
  static constexpr double kPaysFrom = 1.0;
  static constexpr int kProbeEvery = 16;
  explicit ModelDrafter(std::shared_ptr<model::ModelDraft> draft);
  ~ModelDrafter() override;
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override;
  void observe_hidden(int first, std::span<const float> rows) override;
  std::vector<float> export_state(int first, int count) const override;
  void import_state(int first, std::span<const float> state) override;
  int state_positions() const override;
  void verified(int drafted, int kept) override;

 private:
  std::shared_ptr<model::ModelDraft> draft_;
  std::unique_ptr<model::DraftContext> context_;
  LookupDrafter lookup_;          // (and the budget of lookup's guesses)
  DraftBudget draft_budget_;      // the budget of the draft's guesses
  bool last_from_draft_ = false;  // the last guesses were the draft's
  double kept_per_block_ = 2.0;   // moving average of the tokens kept of its proposals (hopeful at first)
  int steps_since_asked_ = 0;
};

}  // namespace splash::engine
