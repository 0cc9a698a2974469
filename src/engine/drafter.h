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

namespace splash::engine {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens guesses of the tokens after `tokens` (the prompt and the reply so far;
  // it only grows between calls for one sequence). Fewer, or none, when it has no guess.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) = 0;
};

// One drafter per request.
using DrafterFactory = std::function<std::unique_ptr<Drafter>()>;

// How many guesses a sequence's next step may verify: longer while its guesses are taken
// whole, shorter once the first is refused (a refused guess costs a verify row; on a GPU or
// a busy CPU batch those rows are not free).
class DraftBudget {
 public:
  static constexpr int kInitial = 8;
  int limit() const { return limit_; }  // at most model::kMaxDraftTokens
  void update(int drafted, int accepted);

 private:
  int limit_ = kInitial;
};

// Which drafts the engine verifies (`--draft`): auto picks the best the model has (today the
// lookup drafter wherever the backend verifies drafts), none decodes plainly (to compare, or
// to check).
enum class DraftMode { Auto, Lookup, None };
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
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override;

 private:
  // A kMatch-gram ending at `end` (exclusive) mapped to `end`, the position that followed it.
  static uint64_t gram_key(std::span<const int32_t> tokens, size_t end);
  std::unordered_map<uint64_t, uint32_t> next_after_;
  size_t indexed_end_ = 0;  // grams ending before this position are in the index
};

}  // namespace splash::engine
