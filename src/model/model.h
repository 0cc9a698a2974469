#pragma once
// What the engine sees of a model: load it from a GGUF file, run a batch of sequences'
// new tokens through it, read logits. The model owns the KV block pool's memory (its
// layout is the kernels'); which blocks belong to which sequence is decided above, by the
// cache layer, and arrives here as each sequence's block table.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "kernels/cpu/kv_layout.h"

namespace splash::kernels {
class ThreadPool;
struct PackedWeight;
}  // namespace splash::kernels

namespace splash::model {

// The tokens of a forward pass every backend takes (the CPU's largest pass; a model's own
// largest is ModelInfo::max_batch_tokens, never less). While other sequences decode, the
// scheduler keeps a prompt's chunks at about this size, so their next token waits for one
// short pass.
inline constexpr int kMaxBatchTokens = 512;

struct ModelInfo {
  std::string architecture;  // "llama"
  std::string name;          // general.name
  int n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int n_experts = 0, n_experts_used = 0;  // a mixture-of-experts FFN (ffn: each expert's width); 0: dense
  int shared_expert_ffn = 0;              // Qwen3.5-MoE: a shared expert of this width beside them
  int native_context = 0;    // the model's trained window
  int context = 0;           // what this instance's KV cache holds
  int rope_window = 0;       // how far its rotary embeddings reach (past native_context when stretched)
  std::string rope_scaling;  // how they are stretched ("YaRN x2 over ..."), "" when not
  size_t packed_weight_bytes = 0;
  size_t kv_cache_bytes = 0;  // the block pool
  int kv_blocks = 0;
  std::string kv_type;       // "q8" or "f16"
  size_t decode_read_bytes = 0;  // weight bytes one decode step streams from memory
  std::string weight_types;  // e.g. "Q4_1 (210), Q8_0 (1), F32 (61)"
  std::string kernel_shapes; // which kernel instantiation runs: exact compile-time shapes or run-time
  std::string isa;           // "avx512" or "avx2"; "cuda" on the GPU
  int threads = 0;
  std::string device = "cpu";  // "cpu", or the GPU's summary ("NVIDIA H200 (sm_90, ...)")
  // What the load spent running the kernels once so the first request does not pay for CUDA's
  // lazy loading (0: none ran).
  double warm_up_seconds = 0.0;
  // The most tokens one forward pass of this instance takes (its scratch is sized for it):
  // kMaxBatchTokens on the CPU, more on the GPU, where every prefill pass turns each quantized
  // matrix into f16 once and a longer pass shares that among more tokens.
  int max_batch_tokens = kMaxBatchTokens;
  // The most positions of one slice whose logits a pass returns: 1 where only each slice's
  // last token is read, 1 + drafted tokens where a backend verifies drafts (SequenceSlice).
  int max_logits_per_slice = 1;
  // The tokens a decode pass takes before it costs more than reading the weights once: the
  // scheduler keeps decoding sequences plus their drafted guesses within it, so guesses are
  // nearly free at small batches and vanish from full ones (where each would displace a token
  // another sequence needs). 0: no drafts.
  int draft_pass_tokens = 0;
  // The pass finds a row's best tokens where its logits are (the GPU): a decoding sequence
  // asks for those (SequenceSlice::best_only) instead of its whole row, which saves copying
  // the row back and scanning it on the host.
  bool best_tokens_on_device = false;
  // A hybrid model (Qwen3.5: Gated DeltaNet layers between full-attention ones) carries a
  // recurrent state per sequence besides its KV blocks: a pool of state_slots slots of
  // recurrent_state_bytes each, which the caller hands out like blocks (SequenceSlice::
  // state_slot). 0 slots: a pure attention model, whose sequences need none.
  int recurrent_layers = 0;
  int state_slots = 0;
  size_t recurrent_state_bytes = 0;
  // And snapshots of such states (Model::save_state / restore_state), fp32 like the states:
  // a sequence resumed from one gives the tokens one computed from the start gives.
  int state_snapshots = 0;
};

using kernels::KvType;
using kernels::kKvBlockTokens;

// Where a model runs. Auto picks the GPU when one is visible (and this build has the CUDA
// backend), else the CPU; resolve_device() turns it into Cpu or Cuda before loading.
enum class Device { Auto, Cpu, Cuda };
const char* device_name(Device device);

struct LoadOptions {
  Device device = Device::Cpu;
  int max_context = 0;  // 0: the model's native window
  int threads = 0;      // 0: all cores
  int kv_blocks = 0;    // blocks in the KV pool; 0: enough for one sequence of max_context
                        // (-1: for the app loader, the memory plan's pool)
  KvType kv_type = KvType::Q8;
  // GPU: time the kernels' launch shapes for this model's matrices at load (else built-in
  // choices), remembered in tuning_cache_dir (empty: not remembered).
  bool tune_kernels = false;
  std::string tuning_cache_dir = {};
  // Recurrent-state slots of a hybrid model (sequences that can run at once); 0: one. For
  // the app loader's memory plan (as kv_blocks = -1): the fewest a server-sized plan sets
  // aside where memory allows (engine::kServerStateSlots when fewer).
  int state_slots = 0;
  // Snapshots of those states the model keeps (0: none).
  int state_snapshots = 0;
  // For the app loader's memory plan (as kv_blocks = -1): a server's bytes for those
  // snapshots (--snapshot-memory); none: the plan's own share.
  std::optional<size_t> snapshot_memory = std::nullopt;
  // Whether drafted guesses will be verified (--draft): a hybrid model keeps room to take
  // refused ones back out of its states (MemoryNeeds::draft_rewind_bytes) only then, and
  // takes no verify slices without it.
  bool drafts = true;
  // Layers whose outputs (the residual stream after the layer) forward() keeps for every
  // token of a pass (Model::hidden_taps): the conditioning of a block draft (DFlash) and its
  // training data. Empty: none kept.
  std::vector<int> hidden_taps = {};
};

// The most sequences in one pass (bounds the logits buffer).
inline constexpr int kMaxBatchSequences = 64;

// The most drafted tokens one decoding sequence verifies in a pass (speculative decoding):
// its slice is the last sampled token and up to this many guesses of the next ones.
inline constexpr int kMaxDraftTokens = 16;

// A row's best tokens: what a sampler drawing among its top k (k <= kBestTokens, after
// adjustments that only lower logits) needs of a row, known exactly from them.
inline constexpr int kBestTokens = 64;
struct TokenLogit {
  int32_t id = 0;
  float logit = 0.0f;
  bool operator==(const TokenLogit&) const = default;
};
// The order of best tokens: higher logit first, the lower id first among equal logits (the
// order a sampler ranks tokens in, so the kBestTokens kept are the ones it would rank first).
inline bool ranks_before(const TokenLogit& a, const TokenLogit& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// One sequence's part of a batch: its new tokens, the position of the first, and its block
// table (block ids covering positions 0 .. first_position + tokens.size() - 1).
//
// `logits`: the positions at the slice's end whose logits the pass returns — 0 (a prompt
// chunk before the last), 1 (the last token: a prompt's end, a decode step), or more: a
// verify block, a decode step's sampled token followed by drafted guesses, every position
// wanted (at most ModelInfo::max_logits_per_slice). Each token of a slice wanting more than
// one row is computed exactly as a decode step of that token at its position would compute
// it (its attention included), so the verified logits are, bit for bit, those that plain
// decoding would have seen, and speculative decoding changes no output.
struct SequenceSlice {
  std::span<const int32_t> tokens;
  int first_position = 0;
  std::span<const int32_t> block_table;
  int logits = 1;
  // Empty, or one entry per token: where an entry is not null, the d_model floats it points
  // to replace that token's embedding (an image's features from the vision encoder stand
  // where the prompt holds the image token).
  std::span<const float* const> embeddings = {};
  // The pass returns each wanted row's kBestTokens best tokens (Model::best_tokens) instead
  // of the whole row; the whole row can still be read until the next pass (Model::whole_row).
  bool best_only = false;
  // A hybrid model's recurrent-state slot for this sequence (ModelInfo::state_slots > 0). A
  // slice at position 0 starts the slot afresh; any other continues the state the slot holds,
  // which must be the state after exactly first_position tokens (the model keeps count and
  // refuses a slice that does not follow on; Model::rewind_state takes a verify slice's
  // refused guesses back out first).
  int state_slot = -1;
};

// What a model needs in memory, known from its file before its weights are loaded (the
// engine's memory plan is built from this).
struct MemoryNeeds {
  size_t weight_bytes = 0;        // packed weights, resident
  size_t mapped_bytes = 0;        // file pages read at run time (e.g. a tied embedding table)
  size_t kv_bytes_per_block = 0;  // keys + values of every layer for kKvBlockTokens positions
  size_t recurrent_state_bytes = 0;  // a hybrid model's state per sequence (0: none)
  size_t draft_rewind_bytes = 0;     // and its room to take refused guesses back out of it (0: none)
  size_t activation_bytes = 0;    // scratch of one prefill chunk
  int max_batch_tokens = kMaxBatchTokens;  // the tokens of that chunk
  int native_context = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // Runs every slice's tokens (at most info().max_batch_tokens in all) in one pass, writing their
  // keys and values into their blocks, and returns the logits of the slices that want them,
  // [slices wanting logits][vocab], in batch order. Throws splash::Error on a token id out
  // of range, a position past the context or a block table too short.
  // Rows of slices that ask for their best tokens only are not among those logits.
  virtual std::span<const float> forward(std::span<const SequenceSlice> batch) = 0;
  // The last pass's best tokens: kBestTokens per wanted row of the slices that asked
  // (best_only), in batch order, each row best first (ranks_before). Valid until the next pass.
  virtual std::span<const TokenLogit> best_tokens() const = 0;
  // The whole logits row behind row `best_row` of best_tokens() (a sampler that cannot
  // decide from the best tokens alone reads it). Valid until the next pass.
  virtual std::span<const float> whole_row(int best_row) = 0;
  // Copies the first `tokens` positions of a block into another (copy-on-write of a shared,
  // partly filled block).
  virtual void copy_kv_block(int from, int to, int tokens) = 0;
  // A hybrid model's snapshots (ModelInfo::state_snapshots): save_state copies the state a
  // slot holds (after the positions its slices have run) into a snapshot, with that count;
  // restore_state copies a snapshot into a slot, which then continues at `positions`, which
  // must be the snapshot's count. Throw splash::Error for a model
  // without snapshots, an index out of range, a slot whose state is unknown, or a restore at
  // another position.
  virtual void save_state(int slot, int snapshot);
  virtual void restore_state(int snapshot, int slot, int positions);
  // After a verify slice (SequenceSlice::logits > 1) of a hybrid model, sets its slot back to
  // the state after `positions` tokens, anywhere from the slice's first position to its end:
  // the refused guesses are taken back out (the engine calls it when it keeps fewer tokens
  // than the slice ran). Throws splash::Error for a model without recurrent states or a slot
  // whose last slice was no verify slice or ended elsewhere.
  virtual void rewind_state(int slot, int positions);
  // The last pass's tapped hidden states (LoadOptions::hidden_taps): every token of the
  // batch in batch order, each the taps' rows in the order asked, [tokens][taps][d_model]
  // floats. Empty without taps. Valid until the next pass.
  virtual std::span<const float> hidden_taps() const { return {}; }
  // A CPU model's threads, for work that runs between its passes on the same thread (a block
  // draft): sharing them keeps two pools from spinning against each other. Null on the GPU.
  virtual kernels::ThreadPool* cpu_threads() { return nullptr; }
  // A CPU model's packed LM head, for a draft that reads the same head (the MTP block): one
  // copy of the largest matrix. Null on the GPU.
  virtual const kernels::PackedWeight* cpu_output_head() const { return nullptr; }
};

// The device a model will run on, with its memory when it is a GPU.
struct DeviceChoice {
  Device device = Device::Cpu;
  std::string summary;       // the GPU's name and properties; "cpu"
  size_t free_bytes = 0;     // GPU memory free now (Cuda only)
  size_t total_bytes = 0;
  std::string why_not_gpu;   // Auto that fell back to the CPU: why (no GPU, no CUDA build)
};
// Auto -> Cuda when a GPU is visible, else Cpu; Cuda without a usable GPU (or in a build
// without the CUDA backend) throws splash::Error saying why.
DeviceChoice resolve_device(Device requested);
// The same for this file's architecture: Auto stays on the CPU for a family that has no CUDA
// implementation yet (Cuda asked for explicitly is refused when it is loaded).
DeviceChoice resolve_device(Device requested, const gguf::File& file);

// Loads a GGUF of a supported architecture on options.device (Cpu or Cuda: resolve Auto
// first); refuses others with a message naming the supported architectures.
std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options);
MemoryNeeds estimate_memory(const gguf::File& file, KvType kv_type = KvType::Q8, Device device = Device::Cpu);

// The checks every backend's forward() makes of a batch (sizes, positions inside the
// context, block tables long enough and inside the pool, token ids in the vocabulary);
// throws splash::Error. Returns the total tokens and the slices wanting logits.
struct BatchCount {
  int tokens = 0, wanted = 0;
  int best_only = 0;  // of the wanted rows, those of best_only slices
};
BatchCount check_batch(std::span<const SequenceSlice> batch, const ModelInfo& info);
std::string supported_architectures();
// Throws splash::Error naming the supported architectures unless the file has one of them.
void require_supported_architecture(const gguf::File& file);

// The kBestTokens best tokens of a row (fewer when the row is shorter), best first: how a
// backend without a device-side selection answers best_only slices, and the reference the
// device's selection is tested against.
void select_best_tokens(std::span<const float> row, std::span<TokenLogit> best);

}  // namespace splash::model
