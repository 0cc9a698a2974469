// The llama family (llama, qwen2, qwen3, qwen3moe, and the hybrids qwen35, qwen35moe and
// qwen3next) on the GPU. The same forward pass as
// llama_model.cpp, over kernels/cuda: weights uploaded once and repacked on the GPU into the
// kernels' layout (GGUF's exact values; the matrices of one type stacked as the CPU path
// stacks them), the paged KV pool in device memory, activations float32 on the device, and
// one copy of the logits back per pass.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/delta_net.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/experts.h"
#include "kernels/cuda/ops.h"
#include "kernels/cpu/quant_formats.h"
#include "model/cuda_gemv_tuning.h"
#include "model/llama/llama_hparams.h"
#include "model/llama/llama_model.h"

namespace splash::model::llama {
namespace {

namespace cu = kernels::cuda;

// The GPU's best tokens are copied back as the model layer's TokenLogit.
static_assert(cu::kBestTokenCount == kBestTokens);
static_assert(sizeof(cu::BestToken) == sizeof(TokenLogit) && offsetof(cu::BestToken, logit) == offsetof(TokenLogit, logit));

constexpr size_t kAlignment = 256;  // of every array in the weight arena
size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

cu::KvElement kv_element(KvType type) {
  switch (type) {
    case KvType::Q8: return cu::KvElement::I8;
    case KvType::F16: return cu::KvElement::F16;
    case KvType::F32: return cu::KvElement::F32;
  }
  return cu::KvElement::I8;
}

// The tensors of one layer, as the file names them: attention's four matrices (a hybrid's q
// with its gate rows), or a hybrid's Gated DeltaNet in- and out-projections; a dense FFN's
// three matrices, or a mixture of experts' router and stacks [experts][rows][cols] (each
// expert's gate and up apart, or as one [gate; up] stack).
struct LayerTensors {
  const gguf::TensorInfo *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  std::vector<kernels::WeightSource> delta_in;  // [qkv | z | beta | alpha] rows, in pieces
  const gguf::TensorInfo* delta_out = nullptr;
  bool recurrent() const { return delta_out != nullptr; }
  const gguf::TensorInfo *gate = nullptr, *up = nullptr, *down = nullptr;
  const gguf::TensorInfo *router = nullptr, *gate_exps = nullptr, *up_exps = nullptr, *gate_up_exps = nullptr,
                         *down_exps = nullptr;
  // Qwen3.5-MoE's and Qwen3-Next's shared expert beside the routed ones, and its gate's
  // vector [d_model] (any type: dequantized at load).
  const gguf::TensorInfo *shared_gate = nullptr, *shared_up = nullptr, *shared_down = nullptr,
                         *shared_gate_inp = nullptr;
  bool moe() const { return router != nullptr; }
  std::vector<const gguf::TensorInfo*> matrices() const {
    std::vector<const gguf::TensorInfo*> all;
    for (const auto* t : {q, k, v, o, delta_out, gate, up, down, router, gate_exps, up_exps, gate_up_exps, down_exps,
                          shared_gate, shared_up, shared_down})
      if (t) all.push_back(t);
    return all;
  }
};

LayerTensors layer_tensors(const gguf::File& file, const Hyperparameters& h, int layer) {
  const auto& s = h.shapes;
  const int q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  const std::string p = layer_prefix(layer);
  LayerTensors t;
  if (h.hybrid() && h.recurrent[layer]) {
    t.delta_in = delta_net_in_projection(file, p, h.delta_net, s.d_model);
    t.delta_out = &matrix_tensor(file, p + "ssm_out.weight", s.d_model, h.delta_net.value_width());
    for (const auto& piece : t.delta_in)
      if (!cu::is_supported_weight_type(piece.type))
        fail("{}: the Gated DeltaNet in-projection of {} has type {}, which has no CUDA kernel", file.path(), p,
             type_name(piece.type));
  } else {
    t.q = &matrix_tensor(file, p + "attn_q.weight", h.hybrid() ? 2 * q : q, s.d_model);  // (hybrid: [q | gate] a head)
    t.k = &matrix_tensor(file, p + "attn_k.weight", kv, s.d_model);
    t.v = &matrix_tensor(file, p + "attn_v.weight", kv, s.d_model);
    t.o = &matrix_tensor(file, p + "attn_output.weight", s.d_model, q);
  }
  if (h.n_experts > 0) {
    const int e = h.n_experts;
    t.router = &matrix_tensor(file, p + "ffn_gate_inp.weight", e, s.d_model);
    if (t.router->type != GgmlType::F32 && t.router->type != GgmlType::F16 && t.router->type != GgmlType::BF16)
      fail("{}: tensor '{}' has type {}; a router must be F32, F16 or BF16", file.path(), t.router->name,
           type_name(t.router->type));
    if (file.find_tensor(p + "ffn_gate_up_exps.weight")) {
      t.gate_up_exps = &matrix_stack_tensor(file, p + "ffn_gate_up_exps.weight", e, 2 * s.ffn, s.d_model);
    } else {
      t.gate_exps = &matrix_stack_tensor(file, p + "ffn_gate_exps.weight", e, s.ffn, s.d_model);
      t.up_exps = &matrix_stack_tensor(file, p + "ffn_up_exps.weight", e, s.ffn, s.d_model);
    }
    t.down_exps = &matrix_stack_tensor(file, p + "ffn_down_exps.weight", e, s.d_model, s.ffn);
    if (const int width = h.shared_expert_ffn; width > 0) {
      t.shared_gate = &matrix_tensor(file, p + "ffn_gate_shexp.weight", width, s.d_model);
      t.shared_up = &matrix_tensor(file, p + "ffn_up_shexp.weight", width, s.d_model);
      t.shared_down = &matrix_tensor(file, p + "ffn_down_shexp.weight", s.d_model, width);
      t.shared_gate_inp = &file.tensor(p + "ffn_gate_inp_shexp.weight");
      if (t.shared_gate_inp->n_elements != static_cast<uint64_t>(s.d_model) ||
          !kernels::is_supported_weight_type(t.shared_gate_inp->type))
        fail("{}: tensor '{}' must be a vector of {} elements", file.path(), t.shared_gate_inp->name, s.d_model);
    }
  } else {
    t.gate = &matrix_tensor(file, p + "ffn_gate.weight", s.ffn, s.d_model);
    t.up = &matrix_tensor(file, p + "ffn_up.weight", s.ffn, s.d_model);
    t.down = &matrix_tensor(file, p + "ffn_down.weight", s.d_model, s.ffn);
  }
  for (const auto* tensor : t.matrices())
    if (!cu::is_supported_weight_type(tensor->type))
      fail("{}: tensor '{}' has type {}, which has no CUDA kernel (supported: F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_0, "
           "Q4_1, Q4_K, Q6_K)",
           file.path(), tensor->name, type_name(tensor->type));
  return t;
}

// The rows of a matrix or of a stack of them (all experts' rows, one after another).
int stacked_rows(const gguf::TensorInfo& t) {
  return static_cast<int>(t.dims[1] * (t.dims.size() > 2 ? t.dims[2] : 1));
}

const gguf::TensorInfo& output_tensor(const gguf::File& file, const Hyperparameters& h) {
  const bool tied = file.find_tensor("output.weight") == nullptr;
  const auto& t = matrix_tensor(file, tied ? "token_embd.weight" : "output.weight", h.shapes.vocab, h.shapes.d_model);
  if (!cu::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' has type {}, which has no CUDA kernel", file.path(), t.name, type_name(t.type));
  return t;
}

// A matrix's bytes in the GPU layout, with the arena's alignment.
size_t gpu_bytes(const gguf::TensorInfo& t) {
  return aligned(cu::weight_row_bytes(t.type, static_cast<int>(t.dims[0])) * stacked_rows(t));
}

// Bytes of `rows` rows of a matrix as the file holds them.
size_t file_row_bytes(GgmlType type, int cols) {
  const auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits) fail("file_row_bytes: unknown weight type {}", static_cast<uint32_t>(type));
  return static_cast<size_t>(cols) / traits->block_elements * traits->block_bytes;
}

// The CPU's DeltaNet shape as the kernels' (the same numbers).
cu::DeltaNetDims delta_net_dims(const DeltaNetShape& d) {
  return {d.conv_kernel, d.k_heads, d.v_heads, d.head_k, d.head_v, d.tiled_key_heads};
}

// The most tokens of one pass on the GPU. Each prefill pass turns every quantized matrix
// into f16 once for cuBLAS (about a third of a 512-token pass at Qwen3-8B's shapes); 4096
// tokens share that among eight times as many. The scheduler still keeps a prompt's chunks
// near kMaxBatchTokens while other sequences decode.
constexpr int kCudaMaxBatchTokens = 4096;

// The logits rows one pass returns at most: a token of each of kMaxBatchSequences sequences,
// and verify rows beside them. The scheduler keeps a decode pass with guesses within
// ModelInfo::draft_pass_tokens rows (one exact pass, launch_exact_rows), so the guesses add
// at most that many rows to a pass of kMaxBatchSequences slices.
constexpr int kMostLogitsRows = kMaxBatchSequences + cu::kFusedLargestBatch;

// The rows a decode pass verifies (ModelInfo::draft_pass_tokens): 2-4 rows run the fused
// GEMVs' 4-row instances, 5-8 the 8-row ones (255 registers a thread, a block an SM), which
// cost far more where the weights bound a pass (H100, Qwen3-8B shape: a pass of 2 / 3 / 4 /
// 5 / 8 rows costs 1.46 / 1.74 / 1.84 / 2.90 / 3.37 decode steps).
constexpr int kVerifyRowsOfWeightBoundPasses = 4;

// The most sequences of one pass a hybrid model's DeltaNet slices are uploaded for (as many as
// a pass has logits rows for: the scheduler's kMaxBatchSequences).
constexpr int kMostDeltaNetSlices = kMaxBatchSequences;

// The device scratch of one forward pass, for kCudaMaxBatchTokens tokens; the memory plan
// counts exactly these bytes.
struct ScratchSizes {
  size_t activations = 0;  // float rows: x, normed, qkv, attn, gate_up, hidden, last rows, logits
  size_t weight_f16 = 0;       // the tensor-core path's f16 copy of the largest (stacked) matrix
  size_t activations_f16 = 0;  // and of its widest activations
  size_t activations_q8 = 0;   // the GEMV's int8 activations (the head: up to kMostLogitsRows rows of the widest)
  size_t split_k = 0;          // the small GEMM's partial sums
  size_t attention = 0;    // split partials
  size_t inputs = 0;       // token ids, positions, block tables
  size_t best_tokens = 0, best_tokens_scratch = 0;  // each wanted row's best tokens, their candidates
  size_t fused_q8 = 0;  // the fused layer's int8 copies (up to kFusedLargestBatch rows): normed (+ sums of squares), hidden
  size_t experts = 0;   // a mixture of experts' routing and its (token, expert) pairs' rows (ExpertScratch)
  size_t total() const {
    return activations + weight_f16 + activations_f16 + activations_q8 + split_k + attention + inputs + best_tokens +
           best_tokens_scratch + fused_q8 + experts;
  }
};

// A mixture of experts runs up to 32 (token, expert) pairs pair by pair (a GEMV of the
// pair's expert each: batch-1 decode's 8 pairs read 8 experts); more are grouped by expert
// on the device, each chosen expert read once. SPLASH_CUDA_MOE_PAIRS=N moves the boundary
// (to compare), up to kMaxPairsOneByOne (what the pairs' int8 scratch is sized for).
constexpr int kMaxPairsOneByOne = 512;
int pairs_one_by_one() {
  static const int most = [] {
    const char* value = std::getenv("SPLASH_CUDA_MOE_PAIRS");
    return value ? std::clamp(std::atoi(value), 0, kMaxPairsOneByOne) : 32;
  }();
  return most;
}

// A mixture of experts' scratch for a pass of `tokens` tokens: the router's logits and a
// counter a token (cu::RoutingScratch), each pair's expert and weight, the pairs grouped by expert (cu::ExpertGroups; tiles of 8 rows
// are the most), and the pairs' rows: gathered inputs, [gate | up], the SwiGLU's output (and
// its int8 copy, for the pairs taken one by one) and the expert's output.
struct ExpertScratchSizes {
  size_t logits, arrivals, ids, weights, groups, rows_in, gate_up, hidden, hidden_q8, out;
  size_t total() const {
    return logits + arrivals + ids + weights + groups + rows_in + gate_up + hidden + hidden_q8 + out;
  }
};
// (decode-sized passes quantize their rows into the matmuls' int8 scratch, sized for
// kMaxBatchSequences rows: a recorded pass must not grow it)
static_assert(cu::kSmallGemmLargestBatch <= kMaxBatchSequences);
ExpertScratchSizes expert_scratch_sizes(const Hyperparameters& h, int tokens) {
  const auto& s = h.shapes;
  const size_t pairs = static_cast<size_t>(tokens) * h.n_experts_used;
  return {aligned(sizeof(float) * tokens * h.n_experts),
          aligned(sizeof(unsigned) * tokens),
          aligned(sizeof(int32_t) * pairs),
          aligned(sizeof(float) * pairs),
          aligned(cu::expert_groups_bytes(static_cast<int>(pairs), h.n_experts, 8)),
          aligned(sizeof(float) * pairs * s.d_model),
          aligned(sizeof(float) * pairs * 2 * s.ffn),
          aligned(sizeof(float) * pairs * s.ffn),
          aligned(cu::quantized_activation_bytes(kMaxPairsOneByOne, s.ffn)),
          aligned(sizeof(float) * pairs * s.d_model)};
}

ScratchSizes scratch_sizes(const Hyperparameters& h, int context) {
  const auto& s = h.shapes;
  const size_t q = static_cast<size_t>(s.n_heads) * s.head_dim, kv = static_cast<size_t>(s.n_kv_heads) * s.head_dim;
  // (a hybrid's QKV rows hold the attention gates after v; its DeltaNet rows take mixed_ and
  // write their readout where attention writes its output)
  const size_t gates = h.hybrid() ? q : 0;
  const size_t mixed = h.hybrid() ? h.delta_net.mixed_width() : 0;
  const size_t attn = std::max<size_t>(q, h.hybrid() ? h.delta_net.value_width() : 0);
  const size_t ffn = std::max(s.ffn, h.shared_expert_ffn);  // (gate_up_ and hidden_ serve the shared expert too)
  const size_t per_token = 2 * s.d_model + (q + 2 * kv + gates) + attn + 2 * ffn + ffn + mixed;
  ScratchSizes sizes;
  sizes.activations = sizeof(float) * (kCudaMaxBatchTokens * per_token + kMostLogitsRows * (2 * s.d_model + s.vocab));
  const size_t largest = std::max({(q + 2 * kv + gates) * s.d_model, s.d_model * q, 2 * ffn * s.d_model,
                                   s.d_model * ffn, mixed * s.d_model, attn * s.d_model});
  sizes.weight_f16 = largest * 2;
  const int widest = static_cast<int>(std::max<size_t>({size_t(s.d_model), ffn, attn}));
  sizes.activations_f16 = static_cast<size_t>(kCudaMaxBatchTokens) * widest * 2;
  if (h.n_experts > 0)  // (the grouped expert matmul converts all pairs' rows at once)
    sizes.activations_f16 = std::max(sizes.activations_f16, static_cast<size_t>(kCudaMaxBatchTokens) * h.n_experts_used *
                                                                std::max(s.d_model, s.ffn) * 2);
  sizes.activations_q8 = cu::quantized_activation_bytes(kMostLogitsRows, widest);
  // (the output head is the widest matrix the small GEMM takes: batched decode's logits)
  sizes.split_k =
      cu::small_gemm_scratch_bytes(std::max({static_cast<int>(q + 2 * kv + gates), 2 * int(ffn), s.d_model, s.vocab, int(mixed)}));
  sizes.attention = cu::attention_scratch_bytes(s.n_heads, s.head_dim);
  const size_t table_entries = static_cast<size_t>(kMaxBatchSequences) * ((context + kKvBlockTokens - 1) / kKvBlockTokens);
  // ids, positions, table offsets, logits rows, attention's decode list and tiles, tables
  // (and a hybrid's DeltaNet slices, one a sequence)
  sizes.inputs = sizeof(int32_t) * (6 * kCudaMaxBatchTokens + kMostLogitsRows + table_entries +
                                    (h.hybrid() ? cu::kDeltaNetSliceInts * kMostDeltaNetSlices : 0));
  sizes.best_tokens = sizeof(TokenLogit) * kMostLogitsRows * kBestTokens;
  sizes.best_tokens_scratch = cu::best_tokens_scratch_bytes(kMostLogitsRows, s.vocab);
  const int fused_rows = cu::kFusedLargestBatch;
  sizes.fused_q8 = cu::quantized_activation_bytes(fused_rows, s.d_model) + sizeof(float) * fused_rows * (s.d_model / 16) +
                   cu::quantized_activation_bytes(fused_rows, s.ffn);
  if (h.n_experts > 0) sizes.experts = expert_scratch_sizes(h, kCudaMaxBatchTokens).total();
  return sizes;
}

struct CudaLayer {
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *qkv_bias = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  int kv_layer = -1;  // attention: the layer's part of the KV pool (a hybrid's DeltaNet layers have none)
  // [q; k; v] stacked, or runs of one type ([q; k], [v]); a hybrid's gated attention: [q; k; v;
  // gate], so that its QKV rows are the plain layer's with the gates after them (qkv_ld).
  std::vector<cu::DeviceWeight> qkv;
  bool gated = false;
  cu::DeviceWeight attn_output;
  std::vector<cu::DeviceWeight> gate_up;  // [gate; up] stacked, or apart when their types differ
  cu::DeviceWeight down;
  // A mixture of experts instead (qwen3moe): the router, each expert's [gate; up] (one stack
  // or two) and down.
  bool moe = false;
  cu::DeviceWeight router;
  std::vector<cu::ExpertWeights> gate_up_exps;
  cu::ExpertWeights down_exps;
  // and the hybrids' shared expert ([gate; up], down) with its gate vector (null: none)
  std::vector<cu::DeviceWeight> shared_gate_up;
  cu::DeviceWeight shared_down;
  const float* shared_gate = nullptr;
  // A hybrid's Gated DeltaNet layer instead of attention: the in-projection [qkv | z | beta |
  // alpha] (runs of one type), the out projection, the small weights; state_index: the
  // layer's place in a sequence's recurrent state.
  bool recurrent = false;
  int state_index = -1;
  std::vector<cu::DeviceWeight> delta_in;
  cu::DeviceWeight delta_out;
  cu::DeltaNetLayerWeights delta;
};

class LlamaCudaModel final : public Model {
 public:
  LlamaCudaModel(const gguf::File& file, const Hyperparameters& h, const LoadOptions& options,
                 const DeviceChoice& device)
      : file_(file), h_(h) {
    fill_model_info(file, h, options.max_context, info_);
    info_.isa = "cuda";
    info_.max_batch_tokens = kCudaMaxBatchTokens;
    info_.device = device.summary;
    info_.kernel_shapes = "run-time shapes (CUDA kernels for any GGUF of the family)";
    // SPLASH_CUDA_BEST_TOKENS=0: decoding sequences take whole rows back (to compare).
    const char* best = std::getenv("SPLASH_CUDA_BEST_TOKENS");
    info_.best_tokens_on_device = !best || std::string_view(best) != "0";
    load_weights();
    allocate(options);
    if (options.tune_kernels) tune(options.tuning_cache_dir);
    warm_up();
  }

  ~LlamaCudaModel() override {
    for (const auto& [tokens, timeline] : profiles_)
      std::fprintf(stderr, "passes of %d tokens: %s", tokens, timeline.report().c_str());
  }

  const ModelInfo& info() const override { return info_; }

  std::span<const float> forward(std::span<const SequenceSlice> batch) override {
    const auto count = check_batch(batch, info_);
    claim_states(batch);
    run(batch, count.tokens, count.wanted);
    settle_states(batch);
    return {logits_host_.as<float>(), static_cast<size_t>(count.wanted - count.best_only) * h_.shapes.vocab};
  }

  std::span<const TokenLogit> best_tokens() const override {
    return {best_host_.data(), best_host_.size()};
  }

  std::span<const float> whole_row(int best_row) override {
    if (best_row < 0 || static_cast<size_t>(best_row) >= best_rows_.size())
      fail("whole_row({}): the last pass has {} best-token rows", best_row, best_rows_.size());
    const size_t vocab = h_.shapes.vocab;
    // The pass's logits stay on the device until the next pass; one row comes back.
    float* row = whole_row_host_.as<float>();
    stream_.copy_to_host(row, logits_.as<float>() + best_rows_[best_row] * vocab, vocab * sizeof(float));
    stream_.synchronize("reading a logits row back");
    return {row, vocab};
  }

  void copy_kv_block(int from, int to, int tokens) override {
    if (from < 0 || from >= pool_.blocks || to < 0 || to >= pool_.blocks || tokens < 0 || tokens > kKvBlockTokens)
      fail("copy_kv_block({}, {}, {}) outside the pool of {} blocks", from, to, tokens, pool_.blocks);
    cu::copy_kv_block(pool_, from, to, stream_);  // ordered before the next pass on the stream
  }

 private:
  int q_width() const { return h_.shapes.n_heads * h_.shapes.head_dim; }
  int kv_width() const { return h_.shapes.n_kv_heads * h_.shapes.head_dim; }
  int qkv_width() const { return q_width() + 2 * kv_width(); }
  // A QKV row's floats: a hybrid's attention gates follow q, k and v.
  int qkv_ld() const { return qkv_width() + (h_.hybrid() ? q_width() : 0); }
  int attn_width() const { return std::max(q_width(), h_.hybrid() ? h_.delta_net.value_width() : 0); }

  // Weights: every array's place in one device arena is planned first, then the arena is
  // allocated once and filled from the file mapping; a matrix goes through a staging buffer
  // and is repacked from there into its place.
  struct Upload {
    size_t offset;
    const void* from;
    size_t bytes;         // in the file
    bool matrix = false;  // false: a float vector, copied as it is
    GgmlType type = GgmlType::F32;
    int rows = 0, cols = 0;  // a matrix's (a stack's: all its rows)
  };

  void load_weights() {
    const auto& s = h_.shapes;
    std::vector<Upload> uploads;
    size_t arena = 0;
    auto place = [&](const void* from, size_t bytes) {
      const size_t offset = arena;
      uploads.push_back({offset, from, bytes});
      arena += aligned(bytes);
      return offset;
    };
    // Matrices of one type stacked row-wise into one (as the CPU path packs them), else apart.
    struct Planned {
      GgmlType type;
      size_t offset;
      int rows, cols;
    };
    size_t staging = 0;  // the largest matrix as the file holds it
    auto place_rows = [&](GgmlType type, const void* data, int rows, int cols) {
      const size_t offset = arena;
      const size_t file_bytes = file_row_bytes(type, cols) * rows;
      uploads.push_back({offset, data, file_bytes, true, type, rows, cols});
      staging = std::max(staging, file_bytes);
      arena += cu::weight_row_bytes(type, cols) * rows;  // a whole number of 16-byte rows
      return offset;
    };
    auto place_matrix = [&](const gguf::TensorInfo* t) {
      return place_rows(t->type, t->data, stacked_rows(*t), static_cast<int>(t->dims[0]));
    };
    // Consecutive row ranges of one type (q and k when v differs, as Q4_K_M mixes them) are
    // stacked into one matrix: one GEMV launch for each run.
    auto place_sources = [&](std::span<const kernels::WeightSource> sources) {
      std::vector<Planned> group;
      for (size_t i = 0; i < sources.size();) {
        const auto& first = sources[i];
        const size_t offset = arena;
        int rows = 0;
        for (; i < sources.size() && sources[i].type == first.type; ++i) {
          place_rows(sources[i].type, sources[i].data, sources[i].rows, sources[i].cols);
          rows += sources[i].rows;
        }
        arena = offset + aligned(arena - offset);
        group.push_back({first.type, offset, rows, first.cols});
      }
      return group;
    };
    auto source_of = [](const gguf::TensorInfo* t) {
      return kernels::WeightSource{t->type, t->data, static_cast<int>(t->dims[1]), static_cast<int>(t->dims[0])};
    };
    auto place_group = [&](std::initializer_list<const gguf::TensorInfo*> tensors) {
      std::vector<kernels::WeightSource> sources;
      for (const auto* t : tensors) sources.push_back(source_of(t));
      return place_sources(sources);
    };
    // A stack of experts' matrices, repacked as one matrix of all their rows (rows: one expert's).
    auto place_stack = [&](const gguf::TensorInfo* t) {
      const size_t offset = arena;
      place_matrix(t);
      arena = offset + aligned(arena - offset);
      return Planned{t->type, offset, static_cast<int>(t->dims[1]), static_cast<int>(t->dims[0])};
    };

    struct PlannedLayer {
      size_t attn_norm, ffn_norm, bias = 0, q_norm = 0, k_norm = 0;
      size_t conv = 0, dt_bias = 0, ssm_a = 0, ssm_norm = 0, shared_gate = 0;
      std::vector<Planned> qkv, gate_up, gate_up_exps, delta_in, shared_gate_up;
      Planned o, down, router, down_exps, delta_out, shared_down;
    };
    std::vector<PlannedLayer> planned(s.n_layers);
    std::vector<std::vector<float>> vectors;  // norms and biases, kept alive until uploaded
    auto place_vector = [&](std::vector<float> v) {
      vectors.push_back(std::move(v));
      return place(vectors.back().data(), vectors.back().size() * sizeof(float));
    };
    vectors.reserve(static_cast<size_t>(s.n_layers) * 7 + 1);
    for (int l = 0; l < s.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      const LayerTensors t = layer_tensors(file_, h_, l);
      auto& pl = planned[l];
      pl.attn_norm = place_vector(vector_weight(file_, p + "attn_norm.weight", s.d_model));
      pl.ffn_norm =
          place_vector(vector_weight(file_, p + (h_.hybrid() ? "post_attention_norm.weight" : "ffn_norm.weight"), s.d_model));
      if (t.recurrent()) {
        const auto& d = h_.delta_net;
        pl.delta_in = place_sources(t.delta_in);
        pl.delta_out = place_group({t.delta_out})[0];
        pl.conv = place_vector(vector_weight(file_, p + "ssm_conv1d.weight", d.conv_channels() * d.conv_kernel));
        pl.dt_bias = place_vector(vector_weight(file_, p + "ssm_dt.bias", d.v_heads));
        pl.ssm_a = place_vector(vector_weight(file_, p + "ssm_a", d.v_heads));
        pl.ssm_norm = place_vector(vector_weight(file_, p + "ssm_norm.weight", d.head_v));
      } else if (h_.qkv_bias) {
        std::vector<float> bias;
        for (const auto& [name, width] : {std::pair{"attn_q.bias", q_width()}, std::pair{"attn_k.bias", kv_width()},
                                          std::pair{"attn_v.bias", kv_width()}}) {
          const auto part = vector_weight(file_, p + name, width);
          bias.insert(bias.end(), part.begin(), part.end());
        }
        pl.bias = place_vector(std::move(bias));
      }
      if (h_.qk_norm && !t.recurrent()) {
        pl.q_norm = place_vector(vector_weight(file_, p + "attn_q_norm.weight", s.head_dim));
        pl.k_norm = place_vector(vector_weight(file_, p + "attn_k_norm.weight", s.head_dim));
      }
      if (h_.hybrid() && !t.recurrent()) {  // [q; k; v; gate]: the gates after the plain layer's rows
        const auto query = gated_query_rows(file_, p, s.n_heads, s.head_dim, s.d_model);
        std::vector<kernels::WeightSource> rows(query.begin(), query.begin() + s.n_heads);
        rows.push_back(source_of(t.k));
        rows.push_back(source_of(t.v));
        rows.insert(rows.end(), query.begin() + s.n_heads, query.end());
        pl.qkv = place_sources(rows);
      } else if (!t.recurrent()) {
        pl.qkv = place_group({t.q, t.k, t.v});
      }
      if (!t.recurrent()) pl.o = place_group({t.o})[0];
      if (t.moe()) {
        pl.router = place_group({t.router})[0];
        if (t.gate_up_exps)
          pl.gate_up_exps = {place_stack(t.gate_up_exps)};
        else
          pl.gate_up_exps = {place_stack(t.gate_exps), place_stack(t.up_exps)};
        pl.down_exps = place_stack(t.down_exps);
        if (t.shared_gate) {
          pl.shared_gate_up = place_group({t.shared_gate, t.shared_up});
          pl.shared_down = place_group({t.shared_down})[0];
          std::vector<float> gate(s.d_model);
          kernels::dequantize_row(t.shared_gate_inp->type, t.shared_gate_inp->data, gate.data(), s.d_model);
          pl.shared_gate = place_vector(std::move(gate));
        }
      } else {
        pl.gate_up = place_group({t.gate, t.up});
        pl.down = place_group({t.down})[0];
      }
    }
    const size_t output_norm = place_vector(vector_weight(file_, "output_norm.weight", s.d_model));
    const auto& embedding = file_.tensor("token_embd.weight");
    if (!cu::is_supported_weight_type(embedding.type))
      fail("{}: token_embd.weight has type {}, which has no CUDA kernel", file_.path(), type_name(embedding.type));
    matrix_tensor(file_, "token_embd.weight", s.vocab, s.d_model);
    const size_t embedding_offset = place_matrix(&embedding);
    arena = aligned(arena);
    const auto& output = output_tensor(file_, h_);
    const bool tied = &output == &embedding;
    const size_t output_offset = tied ? embedding_offset : place_matrix(&output);
    arena = aligned(arena);

    weights_.resize(arena);
    {
      cu::DeviceBuffer stage(staging);
      for (const auto& u : uploads) {
        if (!u.matrix) {
          stream_.copy_to_device(weights_.as<uint8_t>() + u.offset, u.from, u.bytes);
          continue;
        }
        stream_.copy_to_device(stage.data(), u.from, u.bytes);
        cu::pack_weight(u.type, u.rows, u.cols, stage.data(), weights_.as<uint8_t>() + u.offset, stream_);
      }
      stream_.synchronize("uploading the weights");
    }

    auto* base = weights_.as<uint8_t>();
    auto vec = [&](size_t offset) { return reinterpret_cast<const float*>(base + offset); };
    auto mat = [&](const Planned& p) { return cu::DeviceWeight{p.type, base + p.offset, p.rows, p.cols}; };
    layers_.resize(s.n_layers);
    int kv_layers = 0, state_layers = 0;
    for (int l = 0; l < s.n_layers; ++l) {
      const auto& pl = planned[l];
      auto& layer = layers_[l];
      layer.attn_norm = vec(pl.attn_norm);
      layer.ffn_norm = vec(pl.ffn_norm);
      layer.recurrent = !pl.delta_in.empty();
      if (layer.recurrent) {
        layer.state_index = state_layers++;
        for (const auto& m : pl.delta_in) layer.delta_in.push_back(mat(m));
        layer.delta_out = mat(pl.delta_out);
        layer.delta = {vec(pl.conv), vec(pl.dt_bias), vec(pl.ssm_a), vec(pl.ssm_norm), h_.rms_eps};
        for (const auto& w : layer.delta_in) info_.decode_read_bytes += w.bytes();
        info_.decode_read_bytes += layer.delta_out.bytes();
      } else {
        layer.kv_layer = kv_layers++;
        layer.gated = h_.hybrid();
        if (h_.qkv_bias) layer.qkv_bias = vec(pl.bias);
        if (h_.qk_norm) layer.q_norm = vec(pl.q_norm), layer.k_norm = vec(pl.k_norm);
        for (const auto& m : pl.qkv) layer.qkv.push_back(mat(m));
        layer.attn_output = mat(pl.o);
        for (const auto& w : layer.qkv) info_.decode_read_bytes += w.bytes();
        info_.decode_read_bytes += layer.attn_output.bytes();
      }
      layer.moe = !pl.gate_up_exps.empty();
      if (layer.moe) {
        auto stack = [&](const Planned& p) { return cu::ExpertWeights{p.type, base + p.offset, h_.n_experts, p.rows, p.cols}; };
        layer.router = mat(pl.router);
        for (const auto& m : pl.gate_up_exps) layer.gate_up_exps.push_back(stack(m));
        layer.down_exps = stack(pl.down_exps);
        if (!pl.shared_gate_up.empty()) {
          for (const auto& m : pl.shared_gate_up) layer.shared_gate_up.push_back(mat(m));
          layer.shared_down = mat(pl.shared_down);
          layer.shared_gate = vec(pl.shared_gate);
          for (const auto& w : layer.shared_gate_up) info_.decode_read_bytes += w.bytes();
          info_.decode_read_bytes += layer.shared_down.bytes();
        }
        // A token reads its n_experts_used experts of each layer.
        size_t expert_bytes = layer.down_exps.expert_bytes();
        for (const auto& w : layer.gate_up_exps) expert_bytes += w.expert_bytes();
        info_.decode_read_bytes += layer.router.bytes() + expert_bytes * h_.n_experts_used;
      } else {
        for (const auto& m : pl.gate_up) layer.gate_up.push_back(mat(m));
        layer.down = mat(pl.down);
        for (const auto& w : layer.gate_up) info_.decode_read_bytes += w.bytes();
        info_.decode_read_bytes += layer.down.bytes();
      }
    }
    output_norm_ = vec(output_norm);
    embedding_ = {embedding.type, base + embedding_offset, s.vocab, s.d_model};
    output_ = {output.type, base + output_offset, s.vocab, s.d_model};
    info_.decode_read_bytes += output_.bytes();
    info_.packed_weight_bytes = arena;

    std::map<std::string, int> type_counts;
    for (const auto& t : file_.tensors()) ++type_counts[std::string(type_name(t.type))];
    std::vector<std::string> parts;
    for (const auto& [name, count] : type_counts) parts.push_back(fmt::format("{} ({})", name, count));
    info_.weight_types = fmt::format("{}", fmt::join(parts, ", "));
  }

  void allocate(const LoadOptions& options) {
    const auto& s = h_.shapes;
    pool_.element = kv_element(options.kv_type);
    pool_.blocks = options.kv_blocks > 0 ? options.kv_blocks : (info_.context + kKvBlockTokens - 1) / kKvBlockTokens;
    pool_.n_layers = h_.attention_layer_count();
    pool_.n_kv_heads = s.n_kv_heads;
    pool_.head_dim = s.head_dim;
    kv_data_.resize(pool_.bytes());
    pool_.data = kv_data_.as<uint8_t>();
    if (pool_.element == cu::KvElement::I8) {
      kv_scales_.resize(pool_.scale_bytes());
      pool_.scales = kv_scales_.as<float>();
    }
    info_.kv_cache_bytes = pool_.bytes() + pool_.scale_bytes();
    info_.kv_blocks = pool_.blocks;
    info_.kv_type = kernels::kv_type_name(options.kv_type);

    // Scratch for the largest pass, allocated now so a pass never allocates (and the plan's
    // numbers are what is held).
    const size_t n = kCudaMaxBatchTokens;
    auto floats = [](cu::DeviceBuffer& b, size_t count) { b.resize(count * sizeof(float)); };
    floats(x_, n * s.d_model);
    floats(normed_, n * s.d_model);
    floats(qkv_, n * qkv_ld());
    floats(attn_, n * attn_width());
    if (h_.hybrid()) allocate_states(options);
    const size_t ffn = std::max(s.ffn, h_.shared_expert_ffn);  // (the shared expert's rows go through these too)
    floats(gate_up_, n * 2 * ffn);
    floats(hidden_, n * ffn);
    floats(last_, static_cast<size_t>(kMostLogitsRows) * s.d_model);
    floats(last_normed_, static_cast<size_t>(kMostLogitsRows) * s.d_model);
    floats(logits_, static_cast<size_t>(kMostLogitsRows) * s.vocab);
    const ScratchSizes sizes = scratch_sizes(h_, info_.context);
    inputs_.resize(sizes.inputs);
    inputs_host_.resize(sizes.inputs);
    logits_host_.resize(static_cast<size_t>(kMostLogitsRows) * s.vocab * sizeof(float));
    whole_row_host_.resize(static_cast<size_t>(s.vocab) * sizeof(float));
    best_scratch_.resize(sizes.best_tokens_scratch);
    best_.resize(sizes.best_tokens);
    best_pinned_.resize(sizes.best_tokens);
    matmul_scratch_.weight_f16.resize(sizes.weight_f16);
    matmul_scratch_.activations_f16.resize(sizes.activations_f16);
    matmul_scratch_.activations_q8.resize(sizes.activations_q8);
    cu::reserve_small_gemm(matmul_scratch_,
                           std::max({qkv_ld(), 2 * std::max(s.ffn, h_.shared_expert_ffn), s.d_model, s.vocab,
                                     h_.hybrid() ? h_.delta_net.mixed_width() : 0}),
                           stream_);
    if (h_.n_experts > 0) allocate_experts();
    cu::reserve_attention(attention_scratch_, s.head_dim, stream_);
    // RoPE's frequencies (plain or stretched), computed once on the host as the CPU path does.
    const RopeFrequencies rope = rope_frequencies(h_.rope_base, h_.rope_dims, h_.rope_scaling);
    rope_inv_freq_.resize(rope.inv_freq.size() * sizeof(double));
    stream_.copy_to_device(rope_inv_freq_.data(), rope.inv_freq.data(), rope.inv_freq.size() * sizeof(double));
    rope_attention_factor_ = rope.attention_factor;
    fused_ = fused_decode_layers();
    if (fused_) {
      info_.kernel_shapes += "; batch-1 decode and verify rows: fused layers (norms and SwiGLU inside the GEMVs)";
      fused_normed_ = cu::normed_rows_in(fused_normed_q8_, cu::kFusedLargestBatch, s.d_model);
      fused_hidden_ = cu::quantized_rows_in(fused_hidden_q8_, cu::kFusedLargestBatch, s.ffn);
      // Drafted guesses are verified where verify rows can be computed as batch-1 decode
      // computes a token (launch_exact_rows): up to kFusedLargestBatch rows read the weights
      // once, so a decode pass takes guesses up to that many rows.
      if (verify_rows_enabled()) {
        info_.max_logits_per_slice = cu::kFusedLargestBatch;
        info_.draft_pass_tokens = kVerifyRowsOfWeightBoundPasses;
        info_.kernel_shapes += fmt::format("; drafted guesses verified ({} rows a pass)", info_.draft_pass_tokens);
      }
    }
    stream_.synchronize("allocating the KV cache and scratch");
  }

  // Whether one-token passes take the fused layer (launch_fused_layers): every matrix an
  // integer type the fused GEMVs read, gate and up stacked as one. SPLASH_CUDA_FUSED=0 keeps
  // the kernel-per-step layer (to compare).
  bool fused_decode_layers() const {
    const char* value = std::getenv("SPLASH_CUDA_FUSED");
    if (value && std::string_view(value) == "0") return false;
    if (h_.hybrid()) return false;  // (its DeltaNet and gated layers run kernel by kernel)
    const auto& s = h_.shapes;
    if (s.d_model % 16 != 0 || s.ffn % 16 != 0) return false;
    for (const auto& layer : layers_) {
      if (layer.gate_up.size() != 1 || !cu::gemv_fused_reads(layer.gate_up[0]) ||
          !cu::gemv_fused_reads(layer.attn_output) || !cu::gemv_fused_reads(layer.down))
        return false;
      for (const auto& w : layer.qkv)
        if (!cu::gemv_fused_reads(w)) return false;
    }
    return true;
  }

  // The matrices of one input (q, k, v or gate, up when not stacked): x is quantized once.
  void matmul_group(const std::vector<cu::DeviceWeight>& group, const float* x, int ldx, int n, float* y, int ldy,
                    const cu::QuantizedRows* xq) {
    int column = 0;
    for (const auto& w : group) {
      cu::matmul(w, x, ldx, n, y + column, ldy, false, matmul_scratch_, stream_, xq);
      column += w.rows;
    }
  }

  // Where rms_norm / silu_mul write the int8 copy of their rows for the GEMVs that read them
  // (decode-sized batches only; the tensor-core path reads floats).
  std::optional<cu::QuantizedRowsBuffer> quantized_rows(int n, int cols) {
    if (n > cu::kGemvLargestBatch) return std::nullopt;
    return cu::quantized_rows_in(matmul_scratch_.activations_q8, n, cols);
  }

  // Each token's id, position and block-table offset, and each slice's block table (the blocks
  // its positions use) from `tables` on, in the staging buffer; returns the tables' entries.
  size_t stage_tokens(std::span<const SequenceSlice> batch, int32_t* ids, int32_t* positions, int32_t* offsets,
                      int32_t* tables) {
    const int32_t* end = inputs_host_.as<int32_t>() + inputs_host_.size() / sizeof(int32_t);
    size_t table_size = 0;
    int row = 0;
    for (const auto& slice : batch) {
      const int count = static_cast<int>(slice.tokens.size());
      const size_t used_blocks = (slice.first_position + count + kKvBlockTokens - 1) / kKvBlockTokens;
      if (tables + table_size + used_blocks > end)
        fail("forward: the batch's block tables exceed the {}-token context", info_.context);
      std::memcpy(tables + table_size, slice.block_table.data(), used_blocks * sizeof(int32_t));
      for (int t = 0; t < count; ++t, ++row) {
        ids[row] = slice.tokens[t];
        positions[row] = slice.first_position + t;
        offsets[row] = static_cast<int32_t>(table_size);
      }
      table_size += used_blocks;
    }
    return table_size;
  }

  // Lays the batch's integers out in one staging buffer and sends them in one copy:
  // [ids | positions | table offsets | logits rows | decode tokens | tiles | a hybrid's
  // DeltaNet slices | block tables] (the tables last: their length alone varies between the
  // passes one recorded decode pass replays),
  // from int32 `at` of the inputs on (a pass with verify rows uploads its two parts one after
  // the other: the staging buffer is read by copies still queued). upload_end_: where it ended.
  cu::BatchLayout upload_batch(std::span<const SequenceSlice> batch, int n, int wanted, size_t at = 0) {
    std::vector<cu::SliceSpan> spans;
    int first_token = 0;
    for (const auto& slice : batch) {
      spans.push_back({first_token, static_cast<int>(slice.tokens.size()), slice.first_position});
      first_token += static_cast<int>(slice.tokens.size());
    }
    const auto& s = h_.shapes;
    const cu::AttentionWork work = cu::attention_work(spans, s.n_heads, s.n_kv_heads, s.head_dim);
    int32_t* host = inputs_host_.as<int32_t>() + at;
    int32_t *ids = host, *positions = host + n, *offsets = host + 2 * n, *rows = host + 3 * n;
    int32_t* decode = rows + wanted;
    int32_t* tiles = decode + work.decode.size();
    int32_t* slices = tiles + work.tiles.size();
    int32_t* tables = slices + (h_.hybrid() ? cu::kDeltaNetSliceInts * batch.size() : 0);
    if (h_.hybrid()) {
      if (batch.size() > static_cast<size_t>(kMostDeltaNetSlices))
        fail("forward: {} sequences in one pass (a hybrid model's GPU pass takes at most {})", batch.size(),
             kMostDeltaNetSlices);
      int first = 0;
      for (size_t i = 0; i < batch.size(); ++i) {
        const int count = static_cast<int>(batch[i].tokens.size());
        const int32_t slice[cu::kDeltaNetSliceInts] = {first, count, batch[i].state_slot, batch[i].first_position};
        std::copy(slice, slice + cu::kDeltaNetSliceInts, slices + cu::kDeltaNetSliceInts * i);
        first += count;
      }
    }
    std::copy(work.decode.begin(), work.decode.end(), decode);
    std::copy(work.tiles.begin(), work.tiles.end(), tiles);
    const size_t table_size = stage_tokens(batch, ids, positions, offsets, tables);
    int row = 0, out = 0;
    for (const auto& slice : batch) {
      row += static_cast<int>(slice.tokens.size());
      if (slice.logits > 0) rows[out++] = row - 1;  // (one a slice: verify slices take launch_exact_rows)
    }
    const size_t bytes = ((tables - host) + table_size) * sizeof(int32_t);
    int32_t* device = inputs_.as<int32_t>() + at;
    stream_.copy_to_device(device, host, bytes);
    upload_end_ = at + bytes / sizeof(int32_t);
    ids_ = device;
    rows_ = device + 3 * n;
    delta_slices_ = device + (slices - host);
    n_delta_slices_ = h_.hybrid() ? static_cast<int>(batch.size()) : 0;
    cu::BatchLayout layout;
    layout.positions = device + n;
    layout.table_offsets = device + 2 * n;
    layout.block_tables = device + (tables - host);
    layout.n_tokens = n;
    layout.decode_tokens = device + (decode - host);
    layout.n_decode = static_cast<int>(work.decode.size());
    layout.decode_context = work.decode_context;
    layout.tiles = device + (tiles - host);
    layout.n_tiles = static_cast<int>(work.tiles.size() / 2);
    return layout;
  }

  // Every GEMV-read matrix gets its tuned launch shapes (cuda_gemv_tuning.h), keyed by the
  // GPU, its driver and a hash of the tensor table.
  void tune(const std::string& cache_dir) {
    std::vector<cu::DeviceWeight*> weights;
    for (auto& layer : layers_) {
      for (auto& w : layer.qkv) weights.push_back(&w);
      for (auto& w : layer.delta_in) weights.push_back(&w);
      for (auto& w : layer.gate_up) weights.push_back(&w);
      for (auto& w : layer.shared_gate_up) weights.push_back(&w);
      if (layer.shared_gate) weights.push_back(&layer.shared_down);
      weights.push_back(layer.recurrent ? &layer.delta_out : &layer.attn_output);
      if (!layer.moe) weights.push_back(&layer.down);
    }
    weights.push_back(&output_);
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over names, types and shapes
    auto mix = [&](const void* data, size_t bytes) {
      for (size_t i = 0; i < bytes; ++i) hash = (hash ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
    };
    const uint64_t size = file_.file_size();
    mix(&size, sizeof(size));
    for (const auto& t : file_.tensors()) {
      mix(t.name.data(), t.name.size());
      mix(&t.type, sizeof(t.type));
      for (const uint64_t d : t.dims) mix(&d, sizeof(d));
    }
    const auto device = cu::find_device();
    const GemvTuningKey key{device ? device->name : "unknown", device ? device->driver_version : 0,
                            fmt::format("{:016x}", hash)};
    info_.kernel_shapes += "; " + tune_gemvs(weights, key, cache_dir, matmul_scratch_, stream_);
  }

  // A process's first passes pay once for what CUDA does lazily: loading each kernel's module
  // at its first launch, cuBLAS choosing its GEMM kernels for a shape, recording the decode
  // graphs. Paid here, at load, rather than by the first requests: prefill chunks of the
  // largest pass and of 512 tokens, each followed by a decode step, then decode steps of 2 to
  // 64 sequences (the small GEMM's widths), from position 0 in the pool's first blocks
  // (nothing is cached yet; what they write is overwritten before anything reads it).
  // SPLASH_CUDA_WARM_UP=0 skips it (to measure what it saves).
  void warm_up() {
    if (const char* env = std::getenv("SPLASH_CUDA_WARM_UP"); env && std::string_view(env) == "0") return;
    const auto start = std::chrono::steady_clock::now();
    const int room = std::min(info_.context, pool_.blocks * kKvBlockTokens) - 1;  // (a decode step after)
    std::vector<int32_t> table(pool_.blocks);
    std::iota(table.begin(), table.end(), 0);
    const std::vector<int32_t> ids(std::max(room, 1), 0);
    int last = 0;
    for (const int tokens : {std::min(kCudaMaxBatchTokens, room), std::min(512, room)}) {
      if (tokens < 1 || tokens == last) continue;
      last = tokens;
      const auto blocks = std::span(table).first((tokens + 1 + kKvBlockTokens - 1) / kKvBlockTokens);
      const int slot = h_.hybrid() ? 0 : -1;  // (a hybrid's sequence i takes state slot i)
      const SequenceSlice prefill{std::span(ids).first(tokens), 0, blocks, 1, {}, /*best_only=*/true, slot};
      forward({&prefill, 1});
      const SequenceSlice decode{std::span(ids).first(1), tokens, blocks, 1, {}, true, slot};
      forward({&decode, 1});
    }
    for (const int n : {2, 4, 8, 16, 32, 64}) {  // sequence i decodes its first token into block i
      if (n > pool_.blocks || n > kMaxBatchSequences || (h_.hybrid() && n > info_.state_slots)) break;
      std::vector<SequenceSlice> batch;
      for (int i = 0; i < n; ++i)
        batch.push_back({std::span(ids).first(1), 0, std::span(table).subspan(i, 1), 1, {}, true, h_.hybrid() ? i : -1});
      forward(batch);
    }
    // Verify blocks (the fused kernels' passes of several rows).
    for (const int rows : {info_.draft_pass_tokens, info_.max_logits_per_slice}) {
      if (rows <= 1 || room < rows) continue;
      const SequenceSlice verify{std::span(ids).first(rows), 0,
                                 std::span(table).first((rows + kKvBlockTokens - 1) / kKvBlockTokens), rows, {}, true};
      forward({&verify, 1});
    }
    profiles_.clear();  // (SPLASH_CUDA_PROFILE reports the passes that follow)
    timeline_ = nullptr;
    std::fill(state_positions_.begin(), state_positions_.end(), 0);  // (what the slots hold is no sequence's)
    info_.warm_up_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // A pass of decode tokens only (one per sequence, each wanting logits, no image features)
  // is the same launches for every pass of that many tokens whose contexts share a bucket:
  // it is recorded once as a CUDA graph and replayed. Other passes launch kernel by kernel.
  static bool is_decode_pass(std::span<const SequenceSlice> batch, int n, int wanted) {
    if (n > cu::kSmallGemmLargestBatch || wanted != n) return false;
    return std::all_of(batch.begin(), batch.end(),
                       [](const SequenceSlice& s) { return s.tokens.size() == 1 && s.embeddings.empty(); });
  }

  void run(std::span<const SequenceSlice> batch, int n, int wanted) {
    if (wanted > kMostLogitsRows)
      fail("forward: {} logits rows in one pass (at most {} on the GPU)", wanted, kMostLogitsRows);
    timeline_ = profile_ ? &profiles_[n] : nullptr;
    std::vector<int> first_rows;  // each slice's first row among the pass's logits rows
    if (std::any_of(batch.begin(), batch.end(), [](const SequenceSlice& slice) { return slice.logits > 1; })) {
      first_rows = run_with_verify_rows(batch);
    } else {
      const cu::BatchLayout layout = upload_batch(batch, n, wanted);
      run_pass(batch, layout, n, wanted);
      int row = 0;
      for (const auto& slice : batch) first_rows.push_back(row), row += slice.logits;
    }
    copy_back(batch, first_rows, wanted);
    stream_.synchronize("the forward pass on the GPU");
    if (timeline_) timeline_->collect();
    // The best tokens of best_only slices' rows, in batch order (all rows' were copied).
    best_host_.clear();
    for (const size_t row : best_rows_) {
      const auto* from = best_pinned_.as<TokenLogit>() + row * kBestTokens;
      best_host_.insert(best_host_.end(), from, from + kBestTokens);
    }
  }

  // One uploaded pass, replayed from its recording where it is a decode pass.
  void run_pass(std::span<const SequenceSlice> batch, const cu::BatchLayout& layout, int n, int wanted) {
    if (use_graphs_ && !profile_ && is_decode_pass(batch, n, wanted)) {
      const std::pair<int, int> key{n, cu::decode_context_bucket(layout.decode_context)};
      auto graph = decode_graphs_.find(key);
      if (graph == decode_graphs_.end()) {
        stream_.begin_capture();
        try {
          launch_pass(batch, layout, n, wanted, 0);
        } catch (...) {
          stream_.abort_capture();
          throw;
        }
        graph = decode_graphs_.emplace(key, stream_.end_capture()).first;
      }
      graph->second.launch(stream_);
    } else {
      launch_pass(batch, layout, n, wanted, 0);
    }
  }

  // A pass with verify slices (SequenceSlice::logits > 1): the slices whose every token wants
  // its row (verify blocks, and the decode tokens beside them) are computed as batch-1 decode
  // computes a token (launch_exact_rows), after the rest (prompt chunks) as a pass of their
  // own. Their logits rows: the rest's first, then the verify rows. Returns each slice's
  // first row.
  std::vector<int> run_with_verify_rows(std::span<const SequenceSlice> batch) {
    std::vector<SequenceSlice> exact, rest;
    int exact_tokens = 0, rest_tokens = 0, rest_wanted = 0;
    for (const auto& slice : batch) {
      const int count = static_cast<int>(slice.tokens.size());
      if (slice.logits > 1 && slice.logits < count)
        fail("forward: a slice of {} tokens wanting {} rows (the GPU verifies slices whose every token wants its row)",
             count, slice.logits);
      if (slice.logits == count) {
        exact.push_back(slice), exact_tokens += count;
      } else {
        rest.push_back(slice), rest_tokens += count, rest_wanted += slice.logits;
      }
    }
    std::vector<int> first_rows;
    int rest_row = 0, exact_row = rest_wanted;
    for (const auto& slice : batch) {
      const bool is_exact = slice.logits == static_cast<int>(slice.tokens.size());
      int& row = is_exact ? exact_row : rest_row;
      first_rows.push_back(row);
      row += slice.logits;
    }
    size_t at = 0;
    if (!rest.empty()) {
      const cu::BatchLayout layout = upload_batch(rest, rest_tokens, rest_wanted);
      launch_pass(rest, layout, rest_tokens, rest_wanted, 0);
      at = upload_end_;
    }
    const ExactRows plan = upload_exact_rows(exact, exact_tokens, at);
    const bool features = std::any_of(exact.begin(), exact.end(), [](const auto& slice) { return !slice.embeddings.empty(); });
    if (rest.empty() && use_graphs_ && !profile_ && !features) {
      // Alone in its pass (the inputs at the start of their buffer), an exact pass is the
      // same launches for every pass of its shape: recorded once, like a decode pass.
      auto graph = exact_graphs_.find(plan.shape);
      if (graph == exact_graphs_.end()) {
        stream_.begin_capture();
        try {
          launch_exact_rows(exact, plan, 0);
        } catch (...) {
          stream_.abort_capture();
          throw;
        }
        graph = exact_graphs_.emplace(plan.shape, stream_.end_capture()).first;
      }
      graph->second.launch(stream_);
    } else {
      launch_exact_rows(exact, plan, rest_wanted);
    }
    return first_rows;
  }

  // Queues the copies back: every wanted row's best tokens (a few hundred bytes each), and
  // the whole rows of slices that want them, in runs of consecutive rows.
  void copy_back(std::span<const SequenceSlice> batch, std::span<const int> first_rows, int wanted) {
    best_rows_.clear();
    if (wanted == 0) return;
    const size_t vocab = h_.shapes.vocab, row_bytes = vocab * sizeof(float);
    stream_.copy_to_host(best_pinned_.data(), best_.data(), static_cast<size_t>(wanted) * kBestTokens * sizeof(TokenLogit));
    size_t whole = 0;
    auto* host = logits_host_.as<uint8_t>();
    const auto* device = logits_.as<uint8_t>();
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto& slice = batch[i];
      const size_t rows = slice.logits, row = first_rows[i];
      if (rows == 0) continue;
      if (slice.best_only) {
        for (size_t r = 0; r < rows; ++r) best_rows_.push_back(row + r);
      } else {
        stream_.copy_to_host(host + whole * row_bytes, device + row * row_bytes, rows * row_bytes);
        whole += rows;
      }
    }
  }

  cu::QkvPostArgs qkv_post_args(int l) {
    const auto& s = h_.shapes;
    const auto& layer = layers_[l];
    cu::QkvPostArgs post;
    post.qkv = qkv_.as<float>();
    post.ld = qkv_ld();
    post.n_heads = s.n_heads;
    post.n_kv_heads = s.n_kv_heads;
    post.head_dim = s.head_dim;
    post.bias = layer.qkv_bias;
    post.q_norm = layer.q_norm;
    post.k_norm = layer.k_norm;
    post.norm_eps = h_.rms_eps;
    post.neox_rope = h_.neox_rope;
    post.rope_inv_freq = rope_inv_freq_.as<double>();
    post.rope_attention_factor = rope_attention_factor_;
    post.rope_dims = h_.rope_dims == s.head_dim ? 0 : h_.rope_dims;
    post.layer = layer.kv_layer;
    return post;
  }

  // Layer l's attention block, both layer kinds alike: the QKV matmul (from `normed`, or its
  // int8 copy `in`), qkv_post (inside the attention kernel in a pass of decode tokens only),
  // attention into attn_. Returns whether the attention also
  // wrote attn_'s int8 copy into attn_q8 (a decode pass whose splits it merged).
  bool launch_attention_block(int l, const cu::BatchLayout& layout, int n, const float* normed,
                              const cu::QuantizedRows* in, const std::optional<cu::QuantizedRowsBuffer>& attn_q8) {
    const auto& s = h_.shapes;
    matmul_group(layers_[l].qkv, normed, s.d_model, n, qkv_.as<float>(), qkv_ld(), in);
    mark("qkv matmul");
    const cu::QkvPostArgs post = qkv_post_args(l);
    const bool epilogue_in_attention =
        cu::attention_takes_qkv_post(layout, pool_, s.n_heads) && cu::rope_dims_supported(post);
    if (!epilogue_in_attention) {
      cu::qkv_post(post, layout, pool_, stream_);
      mark("qkv_post (rope, kv)");
    }
    const bool quantized = cu::attention(qkv_.as<float>(), qkv_ld(), attn_.as<float>(), s.n_heads, layout, pool_,
                                         layers_[l].kv_layer, attention_scratch_, stream_, attn_q8 ? &*attn_q8 : nullptr,
                                         epilogue_in_attention ? &post : nullptr);
    mark(epilogue_in_attention ? "attention (with rope, kv)" : "attention");
    return quantized;
  }

  // The layers of a one-token pass (decode at batch 1) in six or seven launches each instead
  // of nine or ten: each RMSNorm is left pending by the GEMV that adds to the residual
  // stream (gemv_residual_norm: x += w . in, then the int8 copy of x * the next norm's weight)
  // and applied by the GEMV that reads it; SwiGLU runs in gate/up's GEMV (gemv_swiglu).
  void launch_fused_layers(const cu::BatchLayout& layout) {
    const int n = 1;
    const auto& s = h_.shapes;
    float *x = x_.as<float>(), *attn = attn_.as<float>();
    const auto attn_q8 = quantized_rows(n, q_width());
    // Layer 0's input is normed here; every later one's by the down projection before it.
    cu::rms_norm(x, layers_[0].attn_norm, normed_.as<float>(), n, s.d_model, h_.rms_eps, stream_, &fused_normed_);
    mark("attn_norm");
    cu::QuantizedRows attn_in_rows = fused_normed_.view(n, s.d_model);
    for (int l = 0; l < s.n_layers; ++l) {
      const bool attn_quantized = launch_attention_block(l, layout, n, nullptr, &attn_in_rows, attn_q8);
      const cu::QuantizedRows attn_rows =
          attn_quantized ? attn_q8->view(n, q_width())
                         : cu::quantize_rows(attn, q_width(), n, q_width(), matmul_scratch_.activations_q8, stream_);
      launch_fused_ffn(l, attn_rows, x);
      attn_in_rows = fused_normed_.pending_norm(n, s.d_model, h_.rms_eps);
    }
  }

  // The fused layer after its attention, for batch-1 decode and verify rows alike (so that
  // their rows are the same bits): x += o . attn with the ffn norm left pending; SwiGLU in
  // gate/up's GEMV; x += down . hidden with the next layer's attn norm left pending. x: the
  // attention rows' residual rows.
  void launch_fused_ffn(int l, const cu::QuantizedRows& attn_rows, float* x) {
    const auto& s = h_.shapes;
    const auto& layer = layers_[l];
    const int n = attn_rows.n;
    cu::gemv_residual_norm(layer.attn_output, attn_rows, x, layer.ffn_norm, &fused_normed_, stream_);
    mark("attn_output matmul + ffn_norm");
    cu::gemv_swiglu(layer.gate_up[0], fused_normed_.pending_norm(n, s.d_model, h_.rms_eps), fused_hidden_, stream_);
    mark("gate_up matmul + silu_mul");
    const bool last = l + 1 == s.n_layers;
    cu::gemv_residual_norm(layer.down, fused_hidden_.view(n, s.ffn), x, last ? nullptr : layers_[l + 1].attn_norm,
                           last ? nullptr : &fused_normed_, stream_);
    mark("down matmul + attn_norm");
  }

  // SPLASH_CUDA_PROFILE=1: an event after each step, for where the time goes.
  void mark(const char* step) {
    if (timeline_) timeline_->mark(stream_, step);
  }

  // The batch's token embeddings into x_ (ids_: the uploaded ids); image features replace
  // their tokens' embeddings.
  void embed_tokens(std::span<const SequenceSlice> batch, int n) {
    const auto& s = h_.shapes;
    float* x = x_.as<float>();
    cu::embed(embedding_, ids_, n, x, stream_);
    int row = 0;
    for (const auto& slice : batch)
      for (size_t t = 0; t < slice.tokens.size(); ++t, ++row)
        if (!slice.embeddings.empty() && slice.embeddings[t])
          stream_.copy_to_device(x + static_cast<size_t>(row) * s.d_model, slice.embeddings[t], sizeof(float) * s.d_model);
    mark("embed");
  }

  // Every kernel of one pass, queued on the stream (or recorded into a graph); its logits
  // rows from `first_row` on.
  void launch_pass(std::span<const SequenceSlice> batch, const cu::BatchLayout& layout, int n, int wanted,
                   int first_row) {
    const auto& s = h_.shapes;
    mark("start");
    embed_tokens(batch, n);
    if (fused_ && n == 1)
      launch_fused_layers(layout);
    else
      launch_layers(layout, n);
    if (wanted > 0) {
      // Only each wanting slice's last position needs logits.
      const size_t row = first_row;
      float* normed = last_normed_.as<float>() + row * s.d_model;
      float* logits = logits_.as<float>() + row * s.vocab;
      cu::gather_rows(x_.as<float>(), rows_, wanted, s.d_model, last_.as<float>() + row * s.d_model, stream_);
      cu::rms_norm(last_.as<float>() + row * s.d_model, output_norm_, normed, wanted, s.d_model, h_.rms_eps, stream_);
      cu::matmul(output_, normed, s.d_model, wanted, logits, s.vocab, false, matmul_scratch_, stream_, /*xq=*/nullptr,
                 /*always_gemv=*/true);
      mark("head (norm, matmul)");
      cu::best_tokens(logits, wanted, s.vocab, best_scratch_.as<int32_t>(), best_.as<cu::BestToken>() + row * kBestTokens,
                      stream_);
      mark("best tokens");
    }
  }

  // --- verify rows: each token computed as batch-1 decode computes one -------------------
  //
  // Speculative decoding changes no output only if a verified row is the very row plain
  // decoding would have computed for that token, bit for bit. On the GPU plain decoding is
  // not batch-invariant (a token's row depends on the kernels its pass size takes), so the
  // row of reference is the sequence decoding alone: the fused batch-1 layer
  // (launch_fused_layers). Verify rows take the same kernels in groups of up to
  // kFusedLargestBatch rows, which read the weights once a group:
  //   - the fused GEMVs and the QKV GEMV give each activation row the bits it gets alone
  //     (gemv_q8.cuh: a row's parts are summed in one order whatever the pass size);
  //   - RMSNorm, the int8 copies, the head's GEMV and the best-token selection work row by row;
  //   - attention takes each token as a decode token split along its context as a pass of
  //     it alone would be (BatchLayout::splits_as_alone; a launch per context bucket), after
  //     qkv_post has appended the group's keys and values (the epilogue inside batch-1's
  //     attention writes the same bits: CudaAttentionTest).
  // A group's tokens run every layer before the next group's (a later token of a slice reads
  // the keys and values of the earlier ones). A pass of verify rows alone is recorded as a
  // graph per shape (its groups' rows and context buckets).
  struct ExactGroup {
    int first = 0, count = 0;  // tokens of the exact pass's rows
    struct Bucket {
      int first = 0, count = 0, context = 0;  // entries of the decode list; the longest context
    };
    std::vector<Bucket> buckets;
  };
  struct ExactRows {
    cu::BatchLayout layout;  // every row's position and table; decode_tokens: the list by group and bucket
    std::vector<ExactGroup> groups;
    int n = 0;
    // What the launches depend on: each group's rows and its buckets' tokens and contexts.
    std::vector<int> shape;
  };

  ExactRows upload_exact_rows(std::span<const SequenceSlice> batch, int n, size_t at) {
    ExactRows plan;
    plan.n = n;
    int32_t* host = inputs_host_.as<int32_t>() + at;
    int32_t *ids = host, *positions = host + n, *offsets = host + 2 * n, *decode = host + 3 * n;
    int32_t* tables = host + 4 * n;
    const size_t table_size = stage_tokens(batch, ids, positions, offsets, tables);
    // Groups of consecutive rows; within one, the decode list ordered by context bucket.
    int listed = 0;
    for (int first = 0; first < n; first += cu::kFusedLargestBatch) {
      ExactGroup group{first, std::min(cu::kFusedLargestBatch, n - first), {}};
      std::vector<int32_t> order(group.count);
      std::iota(order.begin(), order.end(), first);
      const auto bucket = [&](int32_t t) { return cu::decode_context_bucket(positions[t] + 1); };
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bucket(a) < bucket(b); });
      for (const int32_t t : order) {
        if (group.buckets.empty() || cu::decode_context_bucket(group.buckets.back().context) != bucket(t))
          group.buckets.push_back({listed, 0, 0});
        auto& b = group.buckets.back();
        ++b.count;
        b.context = std::max(b.context, positions[t] + 1);
        decode[listed++] = t;
      }
      plan.shape.push_back(group.count);
      for (const auto& b : group.buckets) plan.shape.insert(plan.shape.end(), {b.count, cu::decode_context_bucket(b.context)});
      plan.shape.push_back(-1);
      plan.groups.push_back(std::move(group));
    }
    const size_t bytes = ((tables - host) + table_size) * sizeof(int32_t);
    int32_t* device = inputs_.as<int32_t>() + at;
    stream_.copy_to_device(device, host, bytes);
    ids_ = device;
    plan.layout.positions = device + n;
    plan.layout.table_offsets = device + 2 * n;
    plan.layout.decode_tokens = device + 3 * n;
    plan.layout.block_tables = device + (tables - host);
    plan.layout.n_tokens = n;
    return plan;
  }

  // The exact pass (upload_exact_rows) through the fused layers, group by group, then the
  // head over all its rows, logits rows from `first_row` on.
  void launch_exact_rows(std::span<const SequenceSlice> batch, const ExactRows& plan, int first_row) {
    const auto& s = h_.shapes;
    mark("start");
    embed_tokens(batch, plan.n);
    for (const auto& group : plan.groups) launch_exact_group(plan.layout, group);
    const size_t row = first_row;
    float* normed = last_normed_.as<float>() + row * s.d_model;
    float* logits = logits_.as<float>() + row * s.vocab;
    cu::rms_norm(x_.as<float>(), output_norm_, normed, plan.n, s.d_model, h_.rms_eps, stream_);
    const bool float_type = output_.type == GgmlType::F32 || output_.type == GgmlType::F16 || output_.type == GgmlType::BF16;
    if (!float_type) {
      cu::gemv(output_, normed, s.d_model, plan.n, logits, s.vocab, false, matmul_scratch_, stream_);
    } else {  // (a float type's GEMV takes one row apart from several: as batch-1 does, row by row)
      for (int r = 0; r < plan.n; ++r)
        cu::gemv(output_, normed + static_cast<size_t>(r) * s.d_model, s.d_model, 1, logits + static_cast<size_t>(r) * s.vocab,
                 s.vocab, false, matmul_scratch_, stream_);
    }
    mark("head (norm, matmul)");
    cu::best_tokens(logits, plan.n, s.vocab, best_scratch_.as<int32_t>(), best_.as<cu::BestToken>() + row * kBestTokens,
                    stream_);
    mark("best tokens");
  }

  // One group's rows through every layer, as launch_fused_layers takes one row.
  void launch_exact_group(const cu::BatchLayout& all, const ExactGroup& group) {
    const auto& s = h_.shapes;
    const int n = group.count;
    const size_t first = group.first;
    float* x = x_.as<float>() + first * s.d_model;
    float* qkv = qkv_.as<float>();
    float* attn = attn_.as<float>();
    cu::BatchLayout rows = all;  // the group's rows, for qkv_post
    rows.positions += first;
    rows.table_offsets += first;
    rows.n_tokens = n;
    rows.decode_tokens = nullptr;
    cu::rms_norm(x, layers_[0].attn_norm, normed_.as<float>() + first * s.d_model, n, s.d_model, h_.rms_eps, stream_,
                 &fused_normed_);
    mark("attn_norm");
    cu::QuantizedRows attn_in = fused_normed_.view(n, s.d_model);
    for (int l = 0; l < s.n_layers; ++l) {
      const auto& layer = layers_[l];
      int column = 0;
      for (const auto& w : layer.qkv) {
        cu::gemv(w, nullptr, s.d_model, n, qkv + first * qkv_ld() + column, qkv_ld(), false, matmul_scratch_,
                 stream_, &attn_in);
        column += w.rows;
      }
      mark("qkv matmul");
      cu::QkvPostArgs post = qkv_post_args(l);
      post.qkv = qkv + first * qkv_ld();
      cu::qkv_post(post, rows, pool_, stream_);
      mark("qkv_post (rope, kv)");
      for (const auto& bucket : group.buckets) {
        cu::BatchLayout tokens = all;
        tokens.decode_tokens = all.decode_tokens + bucket.first;
        tokens.n_decode = bucket.count;
        tokens.n_tokens = bucket.count;
        tokens.decode_context = bucket.context;
        tokens.splits_as_alone = true;
        cu::attention(qkv, qkv_ld(), attn, s.n_heads, tokens, pool_, layer.kv_layer, attention_scratch_, stream_);
      }
      mark("attention");
      const cu::QuantizedRows attn_rows = cu::quantize_rows(attn + first * q_width(), q_width(), n, q_width(),
                                                            matmul_scratch_.activations_q8, stream_);
      launch_fused_ffn(l, attn_rows, x);
      attn_in = fused_normed_.pending_norm(n, s.d_model, h_.rms_eps);
    }
  }

  // --- a hybrid's recurrent states (Qwen3.5: Gated DeltaNet layers) ------------------------
  //
  // [slot][recurrent layer][DeltaNetDims::state_floats()] floats on the device, the CPU path's
  // layout, and as many snapshots. The kernels start a slice at position 0 from zeros and
  // continue any other from its slot; the host keeps each slot's position, as the CPU path
  // does, to refuse a slice that does not follow on. Drafted guesses are not verified here
  // (no verify rows for a hybrid on the GPU), so a state never goes back.
  void allocate_states(const LoadOptions& options) {
    const auto dims = delta_net_dims(h_.delta_net);
    if (!cu::delta_net_supported(dims))
      fail("{}: a Gated DeltaNet of key heads {} and value heads {} ({} conv taps) has no CUDA kernel", file_.path(),
           dims.head_k, dims.head_v, dims.conv_kernel);
    dims_ = dims;
    info_.recurrent_layers = h_.recurrent_layer_count();
    info_.state_slots = std::max(1, options.state_slots);
    info_.recurrent_state_bytes = h_.recurrent_state_bytes();
    info_.state_snapshots = std::max(0, options.state_snapshots);
    states_.resize(info_.recurrent_state_bytes * info_.state_slots);
    if (info_.state_snapshots > 0) snapshots_.resize(info_.recurrent_state_bytes * info_.state_snapshots);
    state_positions_.assign(info_.state_slots, 0);
    snapshot_positions_.assign(info_.state_snapshots, -1);
    info_.decode_read_bytes += 2 * info_.recurrent_state_bytes;  // a decode step reads and writes its state
    floats_of(mixed_, static_cast<size_t>(kCudaMaxBatchTokens) * h_.delta_net.mixed_width());
    info_.kernel_shapes += "; Gated DeltaNet: token-sequential (a thread block per sequence and value head)";
  }
  static void floats_of(cu::DeviceBuffer& b, size_t count) { b.resize(count * sizeof(float)); }

  uint8_t* slot_bytes(int slot) {
    if (slot < 0 || slot >= info_.state_slots) fail("recurrent-state slot {} outside the model's {}", slot, info_.state_slots);
    return states_.as<uint8_t>() + static_cast<size_t>(slot) * info_.recurrent_state_bytes;
  }
  uint8_t* snapshot_bytes(int snapshot) {
    if (snapshot < 0 || snapshot >= info_.state_snapshots)
      fail("state snapshot {} outside the model's {}", snapshot, info_.state_snapshots);
    return snapshots_.as<uint8_t>() + static_cast<size_t>(snapshot) * info_.recurrent_state_bytes;
  }

 public:
  void save_state(int slot, int snapshot) override {
    if (!h_.hybrid()) return Model::save_state(slot, snapshot);
    uint8_t* to = snapshot_bytes(snapshot);
    const uint8_t* from = slot_bytes(slot);
    if (state_positions_[slot] < 0) fail("save_state: slot {} holds no known state (its last pass failed)", slot);
    stream_.copy_on_device(to, from, info_.recurrent_state_bytes);  // (ordered before the next pass)
    snapshot_positions_[snapshot] = state_positions_[slot];
  }

  void restore_state(int snapshot, int slot, int positions) override {
    if (!h_.hybrid()) return Model::restore_state(snapshot, slot, positions);
    const uint8_t* from = snapshot_bytes(snapshot);
    uint8_t* to = slot_bytes(slot);
    if (positions != snapshot_positions_[snapshot])
      fail("restore_state: snapshot {} holds the state after {} tokens, not {}", snapshot, snapshot_positions_[snapshot],
           positions);
    stream_.copy_on_device(to, from, info_.recurrent_state_bytes);
    state_positions_[slot] = positions;
  }

  void rewind_state(int slot, int positions) override {
    if (!h_.hybrid()) return Model::rewind_state(slot, positions);
    slot_bytes(slot);
    if (positions != state_positions_[slot])
      fail("rewind_state: slot {} holds the state after {} tokens; the GPU verifies no drafts of a hybrid model, so a "
           "state does not go back",
           slot, state_positions_[slot]);
  }

 private:
  // Each slice's slot starts afresh at position 0, else must hold the state after exactly
  // first_position tokens; until the pass completes the slots hold no known position.
  void claim_states(std::span<const SequenceSlice> batch) {
    if (!h_.hybrid()) return;
    for (const auto& slice : batch)
      if (slice.first_position != 0 && state_positions_[slice.state_slot] != slice.first_position)
        fail("forward: recurrent-state slot {} holds the state after {} tokens; a slice at position {} cannot follow on "
             "(start the sequence again at position 0)",
             slice.state_slot, state_positions_[slice.state_slot], slice.first_position);
    for (const auto& slice : batch) state_positions_[slice.state_slot] = -1;
  }
  void settle_states(std::span<const SequenceSlice> batch) {
    if (!h_.hybrid()) return;
    for (const auto& slice : batch)
      state_positions_[slice.state_slot] = slice.first_position + static_cast<int>(slice.tokens.size());
  }

  // A Gated DeltaNet layer on the n rows of normed_ (or its int8 copy): the in-projection into
  // mixed_, the conv and the delta rule over each slice's state (the readout into attn_), then
  // the out projection added into x_.
  void launch_delta_net(const CudaLayer& layer, int n, const float* normed, const cu::QuantizedRows* normed_in) {
    const auto& s = h_.shapes;
    const int width = dims_.mixed_width();
    matmul_group(layer.delta_in, normed, s.d_model, n, mixed_.as<float>(), width, normed_in);
    mark("DeltaNet in-projection");
    cu::DeltaNetPass pass;
    pass.slices = delta_slices_;
    pass.n_slices = n_delta_slices_;
    pass.mixed = mixed_.as<float>();
    pass.mixed_stride = width;
    pass.states = states_.as<float>() + static_cast<size_t>(layer.state_index) * dims_.state_floats();
    pass.slot_stride = info_.recurrent_state_bytes / sizeof(float);
    pass.out = attn_.as<float>();
    pass.out_stride = dims_.value_width();
    cu::gated_delta_net(dims_, layer.delta, pass, stream_);
    mark("DeltaNet conv, rule, gated norm");
    cu::matmul(layer.delta_out, attn_.as<float>(), dims_.value_width(), n, x_.as<float>(), s.d_model, true,
               matmul_scratch_, stream_, nullptr);
    mark("DeltaNet out-projection");
  }

  // The mixture of experts' scratch (expert_scratch_sizes), carved out of one buffer.
  void allocate_experts() {
    const ExpertScratchSizes sizes = expert_scratch_sizes(h_, kCudaMaxBatchTokens);
    experts_.resize(sizes.total() - sizes.hidden_q8);  // (the int8 copy has a buffer of its own, below)
    auto* at = experts_.as<uint8_t>();
    auto take = [&](size_t bytes) {
      auto* here = at;
      at += bytes;
      return here;
    };
    routing_.logits = reinterpret_cast<float*>(take(sizes.logits));
    routing_.arrivals = reinterpret_cast<unsigned*>(take(sizes.arrivals));
    routing_.tokens = kCudaMaxBatchTokens;
    stream_.fill(routing_.arrivals, 0, sizes.arrivals);  // (every launch of route_tokens leaves them 0)
    route_ids_ = reinterpret_cast<int32_t*>(take(sizes.ids));
    route_weights_ = reinterpret_cast<float*>(take(sizes.weights));
    groups_ = cu::expert_groups_in(take(sizes.groups), kCudaMaxBatchTokens * h_.n_experts_used, h_.n_experts, 8);
    pair_in_ = reinterpret_cast<float*>(take(sizes.rows_in));
    pair_gate_up_ = reinterpret_cast<float*>(take(sizes.gate_up));
    pair_hidden_ = reinterpret_cast<float*>(take(sizes.hidden));
    pair_out_ = reinterpret_cast<float*>(take(sizes.out));
    pair_hidden_q8_.resize(sizes.hidden_q8);  // (apart: quantize_rows writes into a buffer of its own)
    info_.kernel_shapes += fmt::format(
        "; mixture of experts: up to {} (token, expert) pairs one by one, more grouped by expert (on the device)",
        pairs_one_by_one());
  }

  // Layer l's mixture of experts on the n rows of normed_, added into x_: the router's
  // logits in float, each token's n_experts_used experts and weights (route_tokens), then
  // each (token, expert) pair's SwiGLU expert and the weighted sum, all on the device (a
  // recorded pass cannot wait for the host). A few pairs run one by one, each a GEMV of its
  // expert's rows; more are grouped by expert and each expert's rows go through one tile of
  // the small GEMM, all tiles in one launch (cu::grouped_expert_matmul).
  void launch_experts(const CudaLayer& layer, int n, const cu::QuantizedRows* normed_in) {
    const auto& s = h_.shapes;
    const int used = h_.n_experts_used, pairs = n * used;
    const float* normed = normed_.as<float>();
    float* x = x_.as<float>();
    cu::route_tokens(layer.router, normed, s.d_model, n, used, routing_, route_ids_, route_weights_, stream_);
    mark("router, top-k");
    if (n <= cu::kSmallGemmLargestBatch && pairs <= pairs_one_by_one()) {
      // (the ffn_norm wrote normed's int8 copy where the pass is small enough; else it is made here)
      std::optional<cu::QuantizedRows> normed_q8;
      if (normed_in)
        normed_q8 = *normed_in;
      else if (cu::small_gemm_reads(layer.gate_up_exps[0].type) || cu::small_gemm_reads(layer.gate_up_exps.back().type))
        normed_q8 = cu::quantize_rows(normed, s.d_model, n, s.d_model, matmul_scratch_.activations_q8, stream_);
      int column = 0;
      for (const auto& w : layer.gate_up_exps) {
        cu::expert_matmul(w, normed, s.d_model, normed_q8 ? &*normed_q8 : nullptr, used, route_ids_, pairs,
                          pair_gate_up_ + column, 2 * s.ffn, stream_);
        column += w.rows;
      }
      mark("experts' gate_up");
      // SwiGLU writing the int8 copy the down matmul reads (integer types)
      std::optional<cu::QuantizedRowsBuffer> hidden_q8;
      if (cu::small_gemm_reads(layer.down_exps.type)) hidden_q8 = cu::quantized_rows_in(pair_hidden_q8_, pairs, s.ffn);
      cu::silu_mul(pair_gate_up_, pair_hidden_, pairs, s.ffn, stream_, hidden_q8 ? &*hidden_q8 : nullptr);
      const auto hidden_rows = hidden_q8 ? std::optional<cu::QuantizedRows>(hidden_q8->view(pairs, s.ffn)) : std::nullopt;
      cu::expert_matmul(layer.down_exps, pair_hidden_, s.ffn, hidden_rows ? &*hidden_rows : nullptr, 1, route_ids_,
                        pairs, pair_out_, s.d_model, stream_);
      mark("experts' silu_mul, down");
      cu::combine_experts(pair_out_, s.d_model, nullptr, route_ids_, route_weights_, n, used, s.d_model, x, stream_);
      mark("experts' sum");
      return;
    }
    const int tile_rows = cu::expert_tile_rows(pairs, h_.n_experts);
    cu::group_pairs(route_ids_, pairs, h_.n_experts, used, tile_rows, groups_, stream_);
    cu::gather_rows(normed, groups_.token_of_row, pairs, s.d_model, pair_in_, stream_);
    mark("experts' grouping");
    // One matrix over the sorted rows: an integer type as tiles of the small GEMM; a float
    // type (no such kernel) row by row, each row's expert read from the grouping.
    auto grouped = [&](const cu::ExpertWeights& w, const float* in, int ld_in, float* out, int ld_out) {
      if (cu::small_gemm_reads(w.type))
        cu::grouped_expert_matmul(w, in, ld_in, pairs, groups_, tile_rows, out, ld_out, matmul_scratch_, stream_);
      else
        cu::expert_matmul(w, in, ld_in, nullptr, 1, groups_.expert_of_row, pairs, out, ld_out, stream_);
    };
    int column = 0;
    for (const auto& w : layer.gate_up_exps) {
      grouped(w, pair_in_, s.d_model, pair_gate_up_ + column, 2 * s.ffn);
      column += w.rows;
    }
    mark("experts' gate_up");
    cu::silu_mul(pair_gate_up_, pair_hidden_, pairs, s.ffn, stream_);
    grouped(layer.down_exps, pair_hidden_, s.ffn, pair_out_, s.d_model);
    mark("experts' silu_mul, down");
    cu::combine_experts(pair_out_, s.d_model, groups_.place, route_ids_, route_weights_, n, used, s.d_model, x,
                        stream_);
    mark("experts' sum");
  }

  // The hybrids' shared expert on every row of normed_, added into x_ scaled by
  // sigmoid(normed . shared_gate). Its matmuls quantize normed themselves (the int8 copy the
  // ffn_norm wrote may be gone: the routed experts' scratch shares its buffer).
  void launch_shared_expert(const CudaLayer& layer, int n) {
    const auto& s = h_.shapes;
    const int width = h_.shared_expert_ffn;
    const float* normed = normed_.as<float>();
    matmul_group(layer.shared_gate_up, normed, s.d_model, n, gate_up_.as<float>(), 2 * width, nullptr);
    cu::silu_mul(gate_up_.as<float>(), hidden_.as<float>(), n, width, stream_);
    cu::matmul(layer.shared_down, hidden_.as<float>(), width, n, pair_out_, s.d_model, false, matmul_scratch_, stream_,
               nullptr);
    cu::add_gated_rows(x_.as<float>(), pair_out_, normed, layer.shared_gate, n, s.d_model, stream_);
    mark("shared expert");
  }

  // The layers kernel by kernel (any pass): RMSNorm; the QKV matmul; qkv_post (biases, q/k
  // norms, RoPE, KV append); attention; the output matmul into the residual; RMSNorm;
  // gate/up; SwiGLU; down into the residual.
  void launch_layers(const cu::BatchLayout& layout, int n) {
    const auto& s = h_.shapes;
    float* x = x_.as<float>();
    float *normed = normed_.as<float>(), *attn = attn_.as<float>();
    const auto normed_q8 = quantized_rows(n, s.d_model), hidden_q8 = quantized_rows(n, s.ffn);
    const auto attn_q8 = quantized_rows(n, q_width());  // written by the attention's split merge
    const auto view = [n](const std::optional<cu::QuantizedRowsBuffer>& q, int cols) {
      return q ? std::optional<cu::QuantizedRows>(q->view(n, cols)) : std::nullopt;
    };
    const auto normed_view = view(normed_q8, s.d_model), hidden_view = view(hidden_q8, s.ffn);
    const cu::QuantizedRows* normed_in = normed_view ? &*normed_view : nullptr;
    const cu::QuantizedRows* hidden_in = hidden_view ? &*hidden_view : nullptr;
    const cu::QuantizedRowsBuffer* normed_out = normed_q8 ? &*normed_q8 : nullptr;
    const cu::QuantizedRowsBuffer* hidden_out = hidden_q8 ? &*hidden_q8 : nullptr;
    for (int l = 0; l < s.n_layers; ++l) {
      const auto& layer = layers_[l];
      cu::rms_norm(x, layer.attn_norm, normed, n, s.d_model, h_.rms_eps, stream_, normed_out);
      mark("attn_norm");
      if (layer.recurrent) {
        launch_delta_net(layer, n, normed, normed_in);
      } else {
        // (a gated layer's output is multiplied by its gates first: no int8 copy from the attention)
        const bool attn_quantized =
            launch_attention_block(l, layout, n, normed, normed_in, layer.gated ? std::nullopt : attn_q8);
        if (layer.gated) {
          cu::sigmoid_gate(attn, q_width(), qkv_.as<float>() + qkv_width(), qkv_ld(), n, q_width(), stream_);
          mark("attention gates");
        }
        const auto attn_in = attn_quantized ? std::optional<cu::QuantizedRows>(attn_q8->view(n, q_width())) : std::nullopt;
        cu::matmul(layer.attn_output, attn, q_width(), n, x, s.d_model, true, matmul_scratch_, stream_,
                   attn_in ? &*attn_in : nullptr);
        mark("attn_output matmul");
      }
      cu::rms_norm(x, layer.ffn_norm, normed, n, s.d_model, h_.rms_eps, stream_, normed_out);
      mark("ffn_norm");
      if (layer.moe) {
        launch_experts(layer, n, normed_in);
        if (layer.shared_gate) launch_shared_expert(layer, n);
        continue;
      }
      matmul_group(layer.gate_up, normed, s.d_model, n, gate_up_.as<float>(), 2 * s.ffn, normed_in);
      mark("gate_up matmul");
      cu::silu_mul(gate_up_.as<float>(), hidden_.as<float>(), n, s.ffn, stream_, hidden_out);
      mark("silu_mul");
      cu::matmul(layer.down, hidden_.as<float>(), s.ffn, n, x, s.d_model, true, matmul_scratch_, stream_, hidden_in);
      mark("down matmul");
    }
  }

  const gguf::File& file_;
  Hyperparameters h_;
  ModelInfo info_;
  cu::Stream stream_;
  cu::DeviceBuffer weights_;
  std::vector<CudaLayer> layers_;
  const float* output_norm_ = nullptr;
  cu::DeviceWeight embedding_, output_;
  cu::KvPool pool_;
  cu::DeviceBuffer kv_data_, kv_scales_;
  cu::DeviceBuffer x_, normed_, qkv_, attn_, gate_up_, hidden_, last_, last_normed_, logits_, inputs_;
  cu::PinnedBuffer inputs_host_, logits_host_;
  // Every wanted row's best tokens (cu::best_tokens), on the device and copied back; those
  // of best_only slices, in batch order; where those rows lie among the pass's logits rows.
  cu::DeviceBuffer best_scratch_, best_;
  cu::DeviceBuffer rope_inv_freq_;  // doubles, head_dim / 2
  double rope_attention_factor_ = 1.0;
  cu::PinnedBuffer best_pinned_, whole_row_host_;
  std::vector<TokenLogit> best_host_;
  std::vector<size_t> best_rows_;
  const int32_t *ids_ = nullptr, *rows_ = nullptr;  // the uploaded pass's token ids, its logits rows' tokens
  size_t upload_end_ = 0;                            // int32 past the last upload's inputs
  cu::MatmulScratch matmul_scratch_;
  cu::AttentionScratch attention_scratch_;
  // The fused batch-1 layer (launch_fused_layers) and its int8 copies, apart from the
  // matmuls' own (a fused GEMV reads one while it writes the other).
  bool fused_ = false;
  cu::DeviceBuffer fused_normed_q8_, fused_hidden_q8_;
  cu::QuantizedRowsBuffer fused_normed_{}, fused_hidden_{};
  // A mixture of experts' scratch (allocate_experts).
  cu::DeviceBuffer experts_;
  cu::RoutingScratch routing_;
  float *route_weights_ = nullptr, *pair_in_ = nullptr, *pair_gate_up_ = nullptr,
        *pair_hidden_ = nullptr, *pair_out_ = nullptr;
  int32_t* route_ids_ = nullptr;
  cu::ExpertGroups groups_;
  cu::DeviceBuffer pair_hidden_q8_;
  // A hybrid's recurrent states (allocate_states), the DeltaNet's rows, and the uploaded pass's
  // slices (cu::kDeltaNetSliceInts each).
  cu::DeltaNetDims dims_;
  cu::DeviceBuffer states_, snapshots_, mixed_;
  std::vector<int> state_positions_, snapshot_positions_;
  const int32_t* delta_slices_ = nullptr;
  int n_delta_slices_ = 0;
  // Recorded decode passes by (tokens, context bucket); SPLASH_CUDA_GRAPHS=0 turns them off
  // (to compare, or to debug kernel by kernel).
  bool use_graphs_ = graphs_enabled();
  // SPLASH_CUDA_PROFILE=1: passes run kernel by kernel with an event after each step, their
  // times kept by pass size (decode passes of n sequences, prompt chunks of n tokens) and
  // printed when the model is unloaded.
  bool profile_ = profile_requested();
  std::map<int, cu::Timeline> profiles_;
  cu::Timeline* timeline_ = nullptr;  // this pass's, when profiled
  std::map<std::pair<int, int>, cu::Graph> decode_graphs_;
  std::map<std::vector<int>, cu::Graph> exact_graphs_;  // recorded exact passes by ExactRows::shape

  static bool profile_requested() {
    const char* value = std::getenv("SPLASH_CUDA_PROFILE");
    return value && std::string_view(value) == "1";
  }
  // Drafted guesses verified on the GPU (launch_exact_rows); SPLASH_CUDA_VERIFY=0 turns them
  // off (plain decoding, to compare).
  static bool verify_rows_enabled() {
    const char* value = std::getenv("SPLASH_CUDA_VERIFY");
    return !value || std::string_view(value) != "0";
  }
  static bool graphs_enabled() {
    const char* value = std::getenv("SPLASH_CUDA_GRAPHS");
    return !value || std::string_view(value) != "0";
  }
};

}  // namespace

MemoryNeeds estimate_llama_memory_cuda(const gguf::File& file, KvType kv_type) {
  const Hyperparameters h = read_hyperparameters(file);
  const auto& s = h.shapes;
  MemoryNeeds needs;
  const auto& d = h.delta_net;
  for (int l = 0; l < s.n_layers; ++l) {
    const LayerTensors t = layer_tensors(file, h, l);
    for (const auto* tensor : t.matrices()) needs.weight_bytes += gpu_bytes(*tensor);
    for (const auto& piece : t.delta_in)  // (each run of one type aligned: one more alignment a piece at most)
      needs.weight_bytes += cu::weight_row_bytes(piece.type, piece.cols) * piece.rows + kAlignment;
    if (t.shared_gate) needs.weight_bytes += aligned(sizeof(float) * s.d_model);
    if (t.recurrent())
      needs.weight_bytes += (2 * s.d_model + static_cast<size_t>(d.conv_channels()) * d.conv_kernel + 2 * d.v_heads + d.head_v) *
                                sizeof(float) + 6 * kAlignment;
    else
      needs.weight_bytes += (2 * s.d_model + (h.qkv_bias ? s.n_heads + 2 * s.n_kv_heads : 0) * s.head_dim +
                             (h.qk_norm ? 2 * s.head_dim : 0)) * sizeof(float) + (h.hybrid() ? 2 * s.n_heads : 0) * kAlignment +
                            5 * kAlignment;
  }
  const auto& embedding = file.tensor("token_embd.weight");
  const auto& output = output_tensor(file, h);
  needs.weight_bytes += gpu_bytes(embedding) + (&output == &embedding ? 0 : gpu_bytes(output)) +
                        aligned(s.d_model * sizeof(float));
  // The staging buffer of the upload (the largest matrix as the file holds it) is freed
  // before serving; while loading it takes room the KV pool gets later.
  needs.mapped_bytes = 0;  // nothing is read from the file after loading
  needs.kv_bytes_per_block =
      cu::kv_pool_bytes_per_block(kv_element(kv_type), h.attention_layer_count(), s.n_kv_heads, s.head_dim);
  needs.recurrent_state_bytes = h.recurrent_state_bytes();  // (on the device; no rewind room: no verify rows)
  // The block tables' share of the inputs grows with the context; the native window bounds it
  // well enough (a few hundred KiB at 128K).
  needs.activation_bytes = scratch_sizes(h, h.native_context).total();
  needs.max_batch_tokens = kCudaMaxBatchTokens;
  needs.native_context = h.native_context;
  return needs;
}

std::unique_ptr<Model> load_llama_cuda(const gguf::File& file, const LoadOptions& options) {
  const DeviceChoice device = resolve_device(Device::Cuda);
  Hyperparameters h = read_hyperparameters(file);
  if (h.n_experts_used > cu::kMostExpertsUsed || h.n_experts > cu::kMostExperts)
    fail("{}: {} of {} experts a token; the CUDA kernels route at most {} of {}", file.path(), h.n_experts_used,
         h.n_experts, cu::kMostExpertsUsed, cu::kMostExperts);
  if (h.hybrid() && !cu::delta_net_supported(delta_net_dims(h.delta_net)))
    fail("{}: this Gated DeltaNet's head sizes have no CUDA kernel; run it with --device cpu", file.path());
  fit_rope_to_context(h, options.max_context);
  return std::make_unique<LlamaCudaModel>(file, h, options, device);
}

}  // namespace splash::model::llama
