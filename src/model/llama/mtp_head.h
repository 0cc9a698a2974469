#pragma once
// Qwen3.5's multi-token-prediction block (MTP, issue 14's draft the model brings itself): one
// more decoder layer shipped inside the model's GGUF as blk.<n_layers>.* in llama.cpp's layout
// (`<arch>.nextn_predict_layers` = 1; nextn.eh_proj, nextn.enorm, nextn.hnorm, and where the
// checkpoint has them its own nextn.embed_tokens, nextn.shared_head_head and
// nextn.shared_head_norm, else the model's), trained to guess the token after next.
//
// Its entry at position q reads the token x_q and the model's final hidden state at q - 1
// (h_{q-1}, after the output norm: what predicted x_q): [enorm(embed(x_q)) | hnorm(h_{q-1})]
// projected by eh_proj into one row, then a gated full-attention layer of the model's shape
// (per-head q/k norms, partial NEOX RoPE, a sigmoid gate on the output) over the entries up
// to q, the FFN (dense, or the mixture of experts with its shared expert), the shared head
// norm and the LM head: logits of x_{q+1}. Chained, its own normed output stands in for h:
// the entry at q + 1 reads the guessed x_{q+1} beside the MTP's own output at q.
//
// CPU only, like the block draft. A context holds the entries' keys and values (a window of
// kWindow positions) and the model's tapped rows (its last layer's output) not yet made into
// entries: an entry needs the token after the row, which arrives with the next proposal.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "formats/gguf.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/thread_pool.h"
#include "model/llama/llama_hparams.h"
#include "model/model_draft.h"

namespace splash::model::llama {

class MtpContext final : public DraftContext {
 private:
  friend class MtpHead;
  int entries_end() const { return positions_.empty() ? 0 : positions_.back() + 1; }
  int hidden_end() const;
  std::vector<int> positions_;        // the entries' positions, ascending
  std::vector<float> keys_, values_;  // [entries][kv_width], keys normed and rotated
  int hidden_first_ = 0;              // the position of hidden_'s first row
  std::vector<float> hidden_;         // the model's tapped rows from there on, [rows][d_model]
  size_t row_floats_ = 0;             // d_model
};

class MtpHead final : public ModelDraft {
 public:
  // The positions an entry's attention reaches back, and so a context's entries.
  static constexpr int kWindow = 2048;
  // Rows a catch-up computes at once.
  static constexpr int kChunk = 256;
  // Guesses of one proposal at most (each reads the whole LM head once).
  static constexpr int kMostGuesses = 8;

  // Whether the model's file carries an MTP block (nextn_predict_layers > 0 with its tensors).
  static bool present(const gguf::File& target);
  // Reads and packs the block of the model's file (kept: its tables are read in place);
  // throws splash::Error for a file without one this build can run. threads: as
  // LoadOptions::threads (the model's own once attached).
  MtpHead(const gguf::File& target, int threads);
  ~MtpHead() override;

  const char* kind() const override { return "MTP block"; }
  const std::vector<int>& target_taps() const override { return taps_; }
  ModelDraftMemory memory(const gguf::File& target) const override;
  int window() const override { return kWindow; }
  int most_context_positions() const override { return kWindow + kChunk; }
  void attach(Model& target, const gguf::File& target_file) override;

  std::unique_ptr<DraftContext> new_context() const override;
  // Keeps the rows (each the last layer's output of one position); entries that read rows from
  // `first` on are dropped, to be made again.
  void extend(DraftContext& context, int first, std::span<const float> taps) override;
  // It holds the model's row of the position before the last token.
  bool ready(const DraftContext& context, std::span<const int32_t> tokens) const override;
  // Makes the entries the held rows and `tokens` allow, then chains: the entry of the last
  // token, its best token, the entry of that guess, ...
  std::vector<int32_t> propose(DraftContext& context, std::span<const int32_t> tokens, int max_tokens) override;
  // Every step's logits of a proposal of kMostGuesses.
  std::span<const float> guess_logits(DraftContext& context, std::span<const int32_t> tokens) override;
  // Per position, the entry's key and value.
  std::vector<float> export_context(const DraftContext& context, int first, int count) const override;
  void import_context(DraftContext& context, int first, std::span<const float> rows) override;

 private:
  struct Experts;
  int q_width() const { return h_.shapes.n_heads * h_.shapes.head_dim; }
  int kv_width() const { return h_.shapes.n_kv_heads * h_.shapes.head_dim; }
  void project(const kernels::PackedWeight& w, const float* x, int n, float* y, int ldy);
  // eh_proj's rows of entries of `tokens` at positions first .. first + n - 1, each beside
  // `hidden` (its row before: [n][d_model], normed by `hidden_norm` first when not null).
  void entry_inputs(const int32_t* tokens, const float* hidden, const std::vector<float>* hidden_norm, int n);
  void rotate(float* rows, int n, int stride, int heads, int first_position);
  void append_entries(MtpContext& context, const float* kv, int n, int stride, int first_position) const;
  void forget_from(MtpContext& context, int first) const;
  // Entries of the positions before `end` the held rows allow (a window's worth at most).
  void catch_up(MtpContext& context, std::span<const int32_t> tokens, int end);
  // The entry of `token` at `position` beside `hidden` (normed), through the whole layer: its
  // key and value join the context, its normed output lands in out_hidden_, its logits in
  // logits_ + row * vocab.
  void step(MtpContext& context, int32_t token, int position, const float* hidden, int row);
  void feed_forward();  // the FFN of the row in normed_, added into x_
  void swiglu(const std::vector<kernels::PackedWeight>& gate_up, const kernels::PackedWeight& down, int width,
              float scale);  // one SwiGLU FFN of normed_, scaled, added into x_

  gguf::File file_;
  Hyperparameters h_;
  std::vector<int> taps_;
  int layer_ = 0;  // its blk index
  kernels::ThreadPool own_pool_;
  kernels::ThreadPool* pool_ = &own_pool_;
  kernels::PackedWeight eh_proj_, attn_output_, down_;
  std::vector<kernels::PackedWeight> qkv_gate_, kv_, gate_up_;  // rows [q | k | v | gate], [k | v], [gate | up]
  std::unique_ptr<Experts> experts_;  // a mixture-of-experts FFN instead of gate_up_/down_
  kernels::PackedWeight own_head_;
  const kernels::PackedWeight* head_ = nullptr;  // own_head_, or the model's packed head once attached
  std::vector<float> enorm_, hnorm_, output_norm_, head_norm_, attn_norm_, post_norm_, q_norm_, k_norm_;
  const gguf::TensorInfo* embedding_ = nullptr;
  size_t embedding_row_bytes_ = 0;
  std::vector<double> inv_freq_;
  double attention_factor_ = 1.0;
  kernels::QuantizedActivations activations_;
  std::vector<float> pair_, x_, normed_, qkv_, attended_, gate_up_rows_, ffn_rows_, scratch_, out_hidden_, logits_;
};

}  // namespace splash::model::llama
