#pragma once
// A draft that guesses a model's next tokens from the model's own hidden states (issue 14):
// a block draft made for the model (model/dflash/block_draft.h) or the model's own
// multi-token-prediction block (model/llama/mtp_head.h). Both read the target's outputs of a
// few layers (their taps, LoadOptions::hidden_taps) at every committed position, keep a
// per-sequence context built from them, and run on the target's CPU threads. The engine's
// ModelDrafter (engine/drafter.h) drives either through this interface.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "formats/gguf.h"
#include "model/model.h"

namespace splash::model {

// What a draft holds in memory (the memory plan sets it aside beside the model's).
struct ModelDraftMemory {
  size_t weight_bytes = 0;   // its packed matrices and norms
  size_t mapped_bytes = 0;   // tables read in place from its own file
  size_t context_bytes = 0;  // one sequence's context at its fullest (most_context_positions)
};

// One sequence's conditioning, of the draft that made it.
class DraftContext {
 public:
  virtual ~DraftContext() = default;
};

class ModelDraft {
 public:
  virtual ~ModelDraft() = default;
  // What it is, for messages and the memory plan ("block draft", "MTP block").
  virtual const char* kind() const = 0;
  // The target's layers whose outputs it reads (LoadOptions::hidden_taps).
  virtual const std::vector<int>& target_taps() const = 0;
  // What it holds beside the target (target: the target's GGUF, whose tables it may share).
  virtual ModelDraftMemory memory(const gguf::File& target) const = 0;
  // The positions a context reaches back (its window) and the most it holds at once.
  virtual int window() const = 0;
  virtual int most_context_positions() const = 0;
  // Checks that it was made for this target, takes what it shares of the target's file, and
  // runs on the target's threads from now on.
  virtual void attach(Model& target, const gguf::File& target_file) = 0;

  virtual std::unique_ptr<DraftContext> new_context() const = 0;
  // The context from the tapped rows ([n][taps][d_model], Model::hidden_taps) of positions
  // first .. first + n - 1, committed; what it held from `first` on is replaced. first may lie
  // past what it holds (positions it never saw are simply missing).
  virtual void extend(DraftContext& context, int first, std::span<const float> taps) = 0;
  // Whether it can guess after `tokens` (it holds the state of the positions just before the
  // last token).
  virtual bool ready(const DraftContext& context, std::span<const int32_t> tokens) const = 0;
  // Greedy guesses of up to max_tokens tokens after `tokens` (the prompt and reply so far, the
  // last one sampled but not yet run through the target).
  virtual std::vector<int32_t> propose(DraftContext& context, std::span<const int32_t> tokens, int max_tokens) = 0;
  // The logits behind those guesses, a row a guess ([rows][vocab], valid until the next call):
  // for checks against a reference.
  virtual std::span<const float> guess_logits(DraftContext& context, std::span<const int32_t> tokens) = 0;
  // The context's state of positions first .. first + count - 1, to be kept for a sequence
  // that reuses this prefix (empty unless it holds every one of them), and such state taken
  // back in place of what the context held from `first` on.
  virtual std::vector<float> export_context(const DraftContext& context, int first, int count) const = 0;
  virtual void import_context(DraftContext& context, int first, std::span<const float> rows) = 0;
};

// The model's own draft, where its file carries one (Qwen3.5's MTP block); null where not.
// threads: as LoadOptions::threads (the model's own once attached).
std::shared_ptr<ModelDraft> open_own_draft(const gguf::File& model_file, int threads);

}  // namespace splash::model
