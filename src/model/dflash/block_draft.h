#pragma once
// A block draft (DFlash, arXiv 2602.06036; issue 14): a small model that guesses a whole
// block of the target model's next tokens in one pass, conditioned on the target's own
// hidden states. Read from a GGUF in llama.cpp's `dflash` layout, as tools/dflash/train.py
// writes it.
//
// The target's outputs of a few layers (its taps, LoadOptions::hidden_taps) at every
// committed position are concatenated, projected by `fc` and RMS-normed into one context row
// per position; each draft layer keeps its own keys and values of those rows (the context,
// bounded by a sliding window). A block is [the last sampled token, MASK x (block - 1)] at
// positions a .. a + block - 1; each draft layer (Qwen3-style: pre-norm, per-head q/k
// RMSNorm, NEOX RoPE, SwiGLU) lets every block row attend, without a causal mask, to the
// context before a and to the whole block, and slot k's logits (the draft's final norm, the
// target's LM head) guess the token at a + k.
//
// CPU only for now: the weights are packed for the CPU kernels.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "formats/gguf.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model.h"
#include "model/model_draft.h"

namespace splash::model::dflash {

struct BlockDraftInfo {
  int d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int block_size = 0;            // tokens a pass guesses, the last sampled one included
  std::vector<int> target_taps;  // the target's layers whose outputs it reads (LoadOptions::hidden_taps)
  int32_t mask_token = 0;        // the id whose embedding row holds the learned mask vector
  float rms_eps = 1e-6f, rope_base = 10000.0f;
  int rope_dims = 0;  // NEOX RoPE on each head's first rope_dims (= head_dim: all)
};

// One sequence's conditioning: each draft layer's keys and values of the context rows of its
// last committed positions (at most BlockDraft::kWindow of them).
class BlockDraftContext final : public DraftContext {
 public:
  int positions() const { return static_cast<int>(positions_.size()); }
  // The position after the last one held (0: none).
  int end() const { return positions_.empty() ? 0 : positions_.back() + 1; }

 private:
  friend class BlockDraft;
  std::vector<int> positions_;
  std::vector<std::vector<float>> keys_, values_;  // per layer: [positions][kv_heads * head_dim]
};

class BlockDraft final : public ModelDraft {
 public:
  // Context rows a sequence keeps: its memory and each block's attention stay bounded at any
  // context length (the draft is trained on what comes just before a block).
  static constexpr int kWindow = 2048;
  // Rows an extend computes at once, and the most a context holds: its window, the quarter
  // past it that is dropped at once, and one chunk taken in before the window is kept.
  static constexpr int kExtendChunk = 256;
  static constexpr int kMostContextRows = kWindow + kWindow / 4 + kExtendChunk;

  // Reads and packs the draft (keeping the file: its embedding table is read in place);
  // throws splash::Error for a file that is not a dflash draft this build can run.
  // threads: as LoadOptions::threads.
  BlockDraft(gguf::File file, int threads);
  ~BlockDraft() override;
  const BlockDraftInfo& info() const { return info_; }
  const char* kind() const override { return "block draft"; }
  const std::vector<int>& target_taps() const override { return info_.target_taps; }
  // What it holds beside the target (whose file gives the head it will pack where the draft
  // shares the target's tables).
  ModelDraftMemory memory(const gguf::File& target) const override;
  int window() const override { return kWindow; }
  int most_context_positions() const override { return kMostContextRows; }
  // The file has no embedding table (llama.cpp's converter writes none without a learned mask
  // embedding): the target's table, its mask token's row as the mask vector, and the target's
  // LM head are taken when it is attached.
  bool shares_target_tables() const;
  // Throws splash::Error unless the draft was made for a target of this shape (width,
  // vocabulary, tapped layers inside its layers).
  void check_target(const ModelInfo& target) const;
  // Checks the model (check_target), takes the target's tables where the draft shares them
  // (from target_file, the target's GGUF), and runs on its threads from now on (its passes and
  // the draft's alternate on one thread: two pools would spin against each other).
  void attach(Model& target, const gguf::File& target_file) override;

  // A context with room for kMostContextRows (it never grows past them).
  std::unique_ptr<DraftContext> new_context() const override;
  // Appends the context rows of positions first .. first + n - 1 from their tapped hidden
  // states ([n][taps][d_model], Model::hidden_taps); what the context held from `first` on
  // (a recomputed tail) is replaced. first may lie past end() (positions the draft never saw,
  // such as a reused prefix's, are simply missing).
  void extend(DraftContext& context, int first, std::span<const float> taps) override;
  // The block starts at the last token: the context must end just before it.
  bool ready(const DraftContext& context, std::span<const int32_t> tokens) const override;
  // Each draft layer's keys and values of positions first .. first + count - 1
  // ([count][layers][keys, values]), to be kept for a sequence that reuses this prefix; empty
  // unless the context holds every one of them.
  std::vector<float> export_context(const DraftContext& context, int first, int count) const override;
  // Takes such rows back: the context then holds them in place of what it held from `first` on.
  void import_context(DraftContext& context, int first, std::span<const float> rows) override;
  // The logits of rows first_row .. first_row + rows - 1 of the block [token, MASK ...] at
  // positions position .. position + block_size - 1, seeing the context rows before
  // `position`: [rows][vocab], valid until the next call.
  std::span<const float> block_logits(const BlockDraftContext& context, int32_t token, int position, int first_row,
                                      int rows);
  // Greedy guesses of the tokens after the last one (at position tokens.size() - 1): the best
  // token of slots 1 .. min(max_tokens, block_size - 1).
  std::vector<int32_t> propose(DraftContext& context, std::span<const int32_t> tokens, int max_tokens) override;
  // The whole block's logits at the last token (slot 0's included).
  std::span<const float> guess_logits(DraftContext& context, std::span<const int32_t> tokens) override;

 private:
  struct Layer;
  // The embedding table (and its mask row) of table_file, and the head: head_file's
  // output.weight, else the table.
  void take_tables(const gguf::File& table_file, const gguf::File& head_file);
  void project(const kernels::PackedWeight& w, const float* x, int n, float* y, int ldy);
  void rotate(float* rows, int n, int stride, int heads, const int* positions);
  void forget_from(BlockDraftContext& context, int first) const;  // positions from `first` on
  void keep_window(BlockDraftContext& context) const;              // the oldest past kWindow
  // The block through every layer and the final norm (into normed_).
  void run_block(const BlockDraftContext& context, int32_t token, int position);
  void attend(const BlockDraftContext& context, int layer, const float* qkv, int n, int position, float* out);

  gguf::File file_;
  std::unique_ptr<gguf::File> target_file_;  // where the draft shares the target's tables
  BlockDraftInfo info_;
  kernels::ThreadPool own_pool_;
  kernels::ThreadPool* pool_ = &own_pool_;  // the model's once attached
  kernels::PackedWeight fc_, head_;
  std::vector<float> hidden_norm_, output_norm_, mask_row_;
  std::vector<Layer> layers_;
  const gguf::TensorInfo* embedding_ = nullptr;
  size_t embedding_row_bytes_ = 0;
  kernels::QuantizedActivations activations_;
  std::vector<float> scratch_, hidden_, normed_, qkv_, attended_, gate_up_, ffn_out_, logits_;
  std::vector<double> inv_freq_;  // RoPE: base^(-2i / rope_dims) of each pair i
};

}  // namespace splash::model::dflash
