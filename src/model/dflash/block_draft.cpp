#include "model/dflash/block_draft.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_formats.h"
#include "model/llama/llama_hparams.h"

namespace splash::model::dflash {

using kernels::PackedWeight;
using kernels::WeightSource;

struct BlockDraft::Layer {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;
  int window = 0;  // a sliding-window layer's: a block row sees context positions less than this far back (0: all)
  PackedWeight qkv;      // rows [q | k | v]
  PackedWeight kv;       // rows [k | v]: the context rows' projections
  PackedWeight output;   // attn_output
  PackedWeight gate_up;  // rows [gate | up]
  PackedWeight down;
};

namespace {

WeightSource matrix(const gguf::File& file, const std::string& name, int rows, int cols) {
  const auto& t = llama::matrix_tensor(file, name, rows, cols);
  if (!kernels::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' has type {}, which has no CPU kernel", file.path(), name, type_name(t.type));
  return {t.type, t.data, rows, cols};
}

// A float matrix (the recipe writes F16) as Q8_0 blocks: the CPU's int8 kernels multiply it
// several times faster than the float kernels, and a draft's guesses only have to be likely
// (the model verifies each), so its 8-bit rounding costs nothing of the output.
struct Q8Matrix {
  std::vector<uint8_t> bytes;
  WeightSource source;
};
Q8Matrix to_q8_0(const WeightSource& w) {
  constexpr int kBlock = 32, kBlockBytes = 2 + kBlock;
  Q8Matrix out;
  if (w.type != GgmlType::F16 && w.type != GgmlType::F32 && w.type != GgmlType::BF16) {
    out.source = w;  // (already integer-quantized: packed as it is)
    return out;
  }
  if (w.cols % kBlock != 0) {
    out.source = w;
    return out;
  }
  const auto traits = *type_traits(static_cast<uint32_t>(w.type));
  const size_t row_bytes = static_cast<size_t>(w.cols) / traits.block_elements * traits.block_bytes;
  const size_t blocks = static_cast<size_t>(w.cols) / kBlock;
  out.bytes.resize(static_cast<size_t>(w.rows) * blocks * kBlockBytes);
  std::vector<float> row(w.cols);
  for (int r = 0; r < w.rows; ++r) {
    kernels::dequantize_row(w.type, w.data + r * row_bytes, row.data(), w.cols);
    for (size_t b = 0; b < blocks; ++b) {
      const float* x = row.data() + b * kBlock;
      float largest = 0.0f;
      for (int i = 0; i < kBlock; ++i) largest = std::max(largest, std::fabs(x[i]));
      const float scale = largest / 127.0f, inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
      uint8_t* block = out.bytes.data() + (static_cast<size_t>(r) * blocks + b) * kBlockBytes;
      const uint16_t half = kernels::fp32_to_fp16(scale);
      std::memcpy(block, &half, 2);
      for (int i = 0; i < kBlock; ++i)
        block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(std::clamp(x[i] * inverse, -127.0f, 127.0f))));
    }
  }
  out.source = {GgmlType::Q8_0, out.bytes.data(), w.rows, w.cols};
  return out;
}

// Matrices stacked row-wise into one packed weight (one matmul computes every part), as Q8_0.
PackedWeight stack(const gguf::File& file, std::initializer_list<WeightSource> parts, const std::string& what) {
  std::vector<Q8Matrix> quantized;
  std::vector<WeightSource> sources;
  for (const auto& part : parts) {
    quantized.push_back(to_q8_0(part));
    sources.push_back(quantized.back().source);
  }
  for (const auto& source : sources)
    if (source.type != sources.front().type) fail("{}: the draft's {} matrices must share one type", file.path(), what);
  return kernels::pack_weights(sources);
}
PackedWeight pack_q8(const WeightSource& w) {
  const Q8Matrix q = to_q8_0(w);
  return kernels::pack_weight(q.source);
}

int positive(const gguf::File& file, const std::string& key) {
  const uint64_t value = file.get_uint(key);
  if (value == 0 || value > (1u << 24)) fail("{}: {} = {} is out of range", file.path(), key, value);
  return static_cast<int>(value);
}

}  // namespace

BlockDraft::BlockDraft(gguf::File owned, int threads) : file_(std::move(owned)), own_pool_(threads) {
  const gguf::File& file = file_;
  const std::string arch = file.opt_string("general.architecture").value_or("");
  if (arch != "dflash")
    fail("{}: a block draft is a GGUF of architecture 'dflash' (tools/dflash/train.py writes one), not '{}'",
         file.path(), arch);
  auto& n = info_;
  n.d_model = positive(file, "dflash.embedding_length");
  n.n_layers = positive(file, "dflash.block_count");
  n.ffn = positive(file, "dflash.feed_forward_length");
  n.n_heads = positive(file, "dflash.attention.head_count");
  n.n_kv_heads = positive(file, "dflash.attention.head_count_kv");
  n.head_dim = positive(file, "dflash.attention.key_length");
  n.block_size = positive(file, "dflash.block_size");
  n.vocab = positive(file, "dflash.vocab_size");
  n.rms_eps = file.opt_float("dflash.attention.layer_norm_rms_epsilon").value_or(1e-6f);
  n.rope_base = file.opt_float("dflash.rope.freq_base").value_or(10000.0f);
  n.mask_token = static_cast<int32_t>(file.opt_uint("tokenizer.ggml.mask_token_id").value_or(0));
  if (file.opt_uint("dflash.attention.value_length").value_or(n.head_dim) != static_cast<uint64_t>(n.head_dim))
    fail("{}: the draft's key and value heads must have one length", file.path());
  if (n.n_heads % n.n_kv_heads != 0 || n.head_dim % 2 != 0 || n.block_size < 2 || n.block_size > kMaxDraftTokens + 1 ||
      n.mask_token < 0 || n.mask_token >= n.vocab)
    fail("{}: inconsistent draft shape (heads {}/{}, head_dim {}, block {}, mask token {})", file.path(), n.n_heads,
         n.n_kv_heads, n.head_dim, n.block_size, n.mask_token);
  // llama.cpp names the layers whose *input* it reads: our tap is the layer before.
  for (const int32_t layer : file.get_int_array("dflash.target_layers")) {
    if (layer < 1) fail("{}: dflash.target_layers holds {}, not a layer past the first", file.path(), layer);
    n.target_taps.push_back(layer - 1);
  }
  if (n.target_taps.empty()) fail("{}: dflash.target_layers is empty", file.path());
  // What llama.cpp's converter may state beside: partial RoPE, sliding-window layers, a
  // causal block; the variants for other targets (scaled embeddings, values or logits, a
  // convolution selector) are refused, not run wrong.
  n.rope_dims = static_cast<int>(file.opt_uint("dflash.rope.dimension_count").value_or(n.head_dim));
  if (n.rope_dims <= 0 || n.rope_dims > n.head_dim || n.rope_dims % 2 != 0)
    fail("{}: {} rotary dims of a {}-dim head", file.path(), n.rope_dims, n.head_dim);
  if (file.opt_bool("dflash.attention.causal").value_or(false))
    fail("{}: a block draft with causal attention inside the block is not supported (DFlash's block is non-causal)",
         file.path());
  for (const char* key : {"dflash.attention.value_scale", "dflash.logit_scale", "dflash.final_logit_softcapping",
                          "dflash.embedding_scale", "dflash.conv_kernel_size", "dflash.selector_rank"})
    if (file.find(key)) fail("{}: {} is not supported in a block draft", file.path(), key);
  // (each product of the sizes above stays well inside int: a hostile file is refused here)
  for (const int64_t cells : {int64_t{n.n_heads} * n.head_dim, int64_t{n.n_kv_heads} * n.head_dim * 2,
                              int64_t{n.ffn} * 2, static_cast<int64_t>(n.target_taps.size()) * n.d_model,
                              int64_t{n.vocab} * n.block_size})
    if (cells > (int64_t{1} << 28)) fail("{}: the draft's shapes are out of range", file.path());

  for (int i = 0; i < n.rope_dims / 2; ++i)
    inv_freq_.push_back(std::pow(static_cast<double>(n.rope_base), -2.0 * i / n.rope_dims));
  const int window = static_cast<int>(file.opt_uint("dflash.attention.sliding_window").value_or(0));
  std::vector<bool> sliding(n.n_layers, window > 0);
  if (file.find("dflash.attention.sliding_window_pattern")) {
    sliding = file.get_bool_array("dflash.attention.sliding_window_pattern");
    if (static_cast<int>(sliding.size()) != n.n_layers)
      fail("{}: dflash.attention.sliding_window_pattern has {} entries for {} layers", file.path(), sliding.size(),
           n.n_layers);
  }

  const int d = n.d_model, q_width = n.n_heads * n.head_dim, kv_width = n.n_kv_heads * n.head_dim;
  const int taps = static_cast<int>(n.target_taps.size());
  fc_ = pack_q8(matrix(file, "fc.weight", d, taps * d));
  hidden_norm_ = llama::vector_weight(file, "enc.output_norm.weight", d);
  output_norm_ = llama::vector_weight(file, "output_norm.weight", d);
  for (int l = 0; l < n.n_layers; ++l) {
    const std::string p = llama::layer_prefix(l);
    Layer layer;
    layer.attn_norm = llama::vector_weight(file, p + "attn_norm.weight", d);
    layer.ffn_norm = llama::vector_weight(file, p + "ffn_norm.weight", d);
    layer.q_norm = llama::vector_weight(file, p + "attn_q_norm.weight", n.head_dim);
    layer.k_norm = llama::vector_weight(file, p + "attn_k_norm.weight", n.head_dim);
    const WeightSource q = matrix(file, p + "attn_q.weight", q_width, d);
    const WeightSource k = matrix(file, p + "attn_k.weight", kv_width, d);
    const WeightSource v = matrix(file, p + "attn_v.weight", kv_width, d);
    layer.qkv = stack(file, {q, k, v}, "attention");
    layer.kv = stack(file, {k, v}, "attention");
    layer.output = pack_q8(matrix(file, p + "attn_output.weight", d, q_width));
    layer.gate_up = stack(file, {matrix(file, p + "ffn_gate.weight", n.ffn, d), matrix(file, p + "ffn_up.weight", n.ffn, d)},
                          "feed-forward");
    layer.down = pack_q8(matrix(file, p + "ffn_down.weight", d, n.ffn));
    layer.window = sliding[l] ? window : 0;
    layers_.push_back(std::move(layer));
  }
  // The embedding table and the LM head: the file's own (tools/dflash/train.py writes the
  // target's table with the learned mask row, and the target's head as output.weight unless the
  // table is the head), or, where the file has no table (llama.cpp's converter writes none
  // without a learned mask embedding), the target's, taken when the draft is attached.
  if (file.find_tensor("token_embd.weight")) take_tables(file, file);
}

void BlockDraft::take_tables(const gguf::File& table_file, const gguf::File& head_file) {
  const int d = info_.d_model;
  const WeightSource embedding = matrix(table_file, "token_embd.weight", info_.vocab, d);
  embedding_ = &table_file.tensor("token_embd.weight");
  embedding_row_bytes_ = embedding_->n_bytes / info_.vocab;
  mask_row_.resize(d);
  kernels::dequantize_row(embedding.type, embedding.data + embedding_row_bytes_ * info_.mask_token, mask_row_.data(), d);
  head_ = kernels::pack_weight(head_file.find_tensor("output.weight") ? matrix(head_file, "output.weight", info_.vocab, d)
                                                                       : embedding);
}

bool BlockDraft::shares_target_tables() const { return !file_.find_tensor("token_embd.weight"); }

BlockDraft::~BlockDraft() = default;

void BlockDraft::check_target(const ModelInfo& target) const {
  if (target.d_model != info_.d_model || target.vocab != info_.vocab)
    fail("the block draft was made for a model of width {} and {} tokens, not this one ({}, {})", info_.d_model,
         info_.vocab, target.d_model, target.vocab);
  for (const int tap : info_.target_taps)
    if (tap >= target.n_layers)
      fail("the block draft reads layer {}'s output, past this model's {} layers", tap, target.n_layers);
}

void BlockDraft::attach(Model& target, const gguf::File& target_file) {
  check_target(target.info());
  if (shares_target_tables() && !embedding_) {
    target_file_ = std::make_unique<gguf::File>(target_file);  // (its mapping stays while the draft reads the table)
    take_tables(*target_file_, file_.find_tensor("output.weight") ? file_ : *target_file_);
  }
  if (kernels::ThreadPool* threads = target.cpu_threads()) pool_ = threads;
}

namespace {
BlockDraftContext& ours(DraftContext& context) { return dynamic_cast<BlockDraftContext&>(context); }
const BlockDraftContext& ours(const DraftContext& context) { return dynamic_cast<const BlockDraftContext&>(context); }
}  // namespace

std::unique_ptr<DraftContext> BlockDraft::new_context() const {
  const size_t floats = static_cast<size_t>(kMostContextRows) * info_.n_kv_heads * info_.head_dim;
  auto made = std::make_unique<BlockDraftContext>();
  BlockDraftContext& context = *made;
  context.positions_.reserve(kMostContextRows);
  context.keys_.resize(layers_.size());
  context.values_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) context.keys_[l].reserve(floats), context.values_[l].reserve(floats);
  return made;
}

ModelDraftMemory BlockDraft::memory(const gguf::File& target) const {
  const auto floats = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
  ModelDraftMemory memory;
  memory.weight_bytes = fc_.bytes() + head_.bytes() + floats(hidden_norm_) + floats(output_norm_) + floats(mask_row_);
  if (shares_target_tables() && !embedding_) {  // (before attach: the head it will pack from the target's file)
    const auto* head = target.find_tensor("output.weight");
    if (!head) head = target.find_tensor("token_embd.weight");
    if (head) memory.weight_bytes += kernels::packed_weight_bytes(head->type, info_.vocab, info_.d_model);
    memory.weight_bytes += sizeof(float) * info_.d_model;  // the mask row
  }
  for (const auto& layer : layers_)
    memory.weight_bytes += layer.qkv.bytes() + layer.kv.bytes() + layer.output.bytes() + layer.gate_up.bytes() +
                           layer.down.bytes() + floats(layer.attn_norm) + floats(layer.ffn_norm) +
                           floats(layer.q_norm) + floats(layer.k_norm);
  // (a table read from the target's file is the target's mapping, counted with the target)
  memory.mapped_bytes = shares_target_tables() ? 0 : embedding_row_bytes_ * static_cast<size_t>(info_.vocab);
  memory.context_bytes = static_cast<size_t>(kMostContextRows) *
                         (sizeof(int) + layers_.size() * 2 * info_.n_kv_heads * info_.head_dim * sizeof(float));
  return memory;
}

void BlockDraft::project(const PackedWeight& w, const float* x, int n, float* y, int ldy) {
  if (kernels::packed_kind_info(w.kind).integer)
    activations_.quantize(x, n, w.cols, *pool_);
  else
    activations_.use_floats(x, n, w.cols);
  kernels::matmul(w, activations_, y, ldy, *pool_);
}

void BlockDraft::rotate(float* rows, int n, int stride, int heads, const int* positions) {
  kernels::rope_neox_at(rows, n, stride, heads, info_.head_dim, positions, inv_freq_, 1.0, info_.rope_dims);
}

bool BlockDraft::ready(const DraftContext& context, std::span<const int32_t> tokens) const {
  return !tokens.empty() && ours(context).end() == static_cast<int>(tokens.size()) - 1;
}

void BlockDraft::extend(DraftContext& any_context, int first, std::span<const float> taps) {
  BlockDraftContext& context = ours(any_context);
  const int d = info_.d_model, kv_width = info_.n_kv_heads * info_.head_dim;
  const size_t row_floats = info_.target_taps.size() * static_cast<size_t>(d);
  if (taps.size() % row_floats != 0)
    fail("block draft: {} hidden-state floats are not whole rows of {} taps of {}", taps.size(),
         info_.target_taps.size(), d);
  if (first < 0) fail("block draft: context position {} is negative", first);
  forget_from(context, first);  // (a recomputed tail replaces what the context held from `first` on)
  int n = static_cast<int>(taps.size() / row_floats);
  const int skipped = std::max(0, n - kWindow);  // (rows the window would drop at once)
  std::vector<int> positions;
  std::vector<float> kv;
  for (int begin = skipped; begin < n; begin += kExtendChunk) {
    const int m = std::min(kExtendChunk, n - begin);
    positions.resize(m);
    for (int r = 0; r < m; ++r) positions[r] = first + begin + r;
    scratch_.resize(static_cast<size_t>(m) * d);
    project(fc_, taps.data() + begin * row_floats, m, scratch_.data(), d);
    kernels::rms_norm(scratch_.data(), hidden_norm_.data(), scratch_.data(), m, d, info_.rms_eps, *pool_);
    kv.resize(static_cast<size_t>(m) * 2 * kv_width);
    for (size_t l = 0; l < layers_.size(); ++l) {
      project(layers_[l].kv, scratch_.data(), m, kv.data(), 2 * kv_width);
      for (int r = 0; r < m; ++r) {
        float* row = kv.data() + static_cast<size_t>(r) * 2 * kv_width;
        kernels::rms_norm(row, layers_[l].k_norm.data(), row, info_.n_kv_heads, info_.head_dim, info_.rms_eps, *pool_);
      }
      rotate(kv.data(), m, 2 * kv_width, info_.n_kv_heads, positions.data());
      for (int r = 0; r < m; ++r) {
        const float* row = kv.data() + static_cast<size_t>(r) * 2 * kv_width;
        context.keys_[l].insert(context.keys_[l].end(), row, row + kv_width);
        context.values_[l].insert(context.values_[l].end(), row + kv_width, row + 2 * kv_width);
      }
    }
    context.positions_.insert(context.positions_.end(), positions.begin(), positions.end());
    keep_window(context);  // (a chunk at a time: the context stays inside its room)
  }
}

void BlockDraft::forget_from(BlockDraftContext& context, int first) const {
  const size_t kv_width = static_cast<size_t>(info_.n_kv_heads) * info_.head_dim;
  const auto kept = static_cast<size_t>(std::lower_bound(context.positions_.begin(), context.positions_.end(), first) -
                                        context.positions_.begin());
  context.positions_.resize(kept);
  for (size_t l = 0; l < layers_.size(); ++l) {
    context.keys_[l].resize(kept * kv_width);
    context.values_[l].resize(kept * kv_width);
  }
}

void BlockDraft::keep_window(BlockDraftContext& context) const {
  // The oldest rows go (a quarter of the window at a time, so the move is paid rarely).
  const size_t kv_width = static_cast<size_t>(info_.n_kv_heads) * info_.head_dim;
  const int held = context.positions();
  if (held <= kMostContextRows - kExtendChunk) return;
  const size_t drop = static_cast<size_t>(held - kWindow);
  context.positions_.erase(context.positions_.begin(), context.positions_.begin() + drop);
  for (size_t l = 0; l < layers_.size(); ++l) {
    context.keys_[l].erase(context.keys_[l].begin(), context.keys_[l].begin() + drop * kv_width);
    context.values_[l].erase(context.values_[l].begin(), context.values_[l].begin() + drop * kv_width);
  }
}

std::vector<float> BlockDraft::export_context(const DraftContext& any_context, int first, int count) const {
  const BlockDraftContext& context = ours(any_context);
  const size_t kv_width = static_cast<size_t>(info_.n_kv_heads) * info_.head_dim;
  const auto& positions = context.positions_;
  const auto at = std::lower_bound(positions.begin(), positions.end(), first);
  const auto index = static_cast<size_t>(at - positions.begin());
  if (count <= 0 || index + count > positions.size() || positions[index + count - 1] != first + count - 1) return {};
  std::vector<float> rows;
  rows.reserve(static_cast<size_t>(count) * layers_.size() * 2 * kv_width);
  for (size_t r = index; r < index + count; ++r)
    for (size_t l = 0; l < layers_.size(); ++l) {
      rows.insert(rows.end(), context.keys_[l].begin() + r * kv_width, context.keys_[l].begin() + (r + 1) * kv_width);
      rows.insert(rows.end(), context.values_[l].begin() + r * kv_width, context.values_[l].begin() + (r + 1) * kv_width);
    }
  return rows;
}

void BlockDraft::import_context(DraftContext& any_context, int first, std::span<const float> rows) {
  BlockDraftContext& context = ours(any_context);
  const size_t kv_width = static_cast<size_t>(info_.n_kv_heads) * info_.head_dim;
  const size_t per_position = layers_.size() * 2 * kv_width;
  if (first < 0 || rows.size() % per_position != 0)
    fail("block draft: {} context floats at position {} are not whole positions of {}", rows.size(), first,
         per_position);
  // Positions it holds already (a sequence taken back after preemption) stay as they are: the
  // rows it computed itself are these, and dropping the tail would lose what follows.
  const int count_given = static_cast<int>(rows.size() / per_position);
  const auto at = std::lower_bound(context.positions_.begin(), context.positions_.end(), first);
  if (count_given > 0 && context.positions_.end() - at >= count_given && *at == first &&
      at[count_given - 1] == first + count_given - 1)
    return;
  forget_from(context, first);
  const int count = static_cast<int>(rows.size() / per_position);
  for (int r = 0; r < count; ++r) {
    const float* row = rows.data() + static_cast<size_t>(r) * per_position;
    for (size_t l = 0; l < layers_.size(); ++l, row += 2 * kv_width) {
      context.keys_[l].insert(context.keys_[l].end(), row, row + kv_width);
      context.values_[l].insert(context.values_[l].end(), row + kv_width, row + 2 * kv_width);
    }
    context.positions_.push_back(first + r);
    if ((r + 1) % kExtendChunk == 0) keep_window(context);
  }
  keep_window(context);
}

void BlockDraft::attend(const BlockDraftContext& context, int layer, const float* qkv, int n, int position,
                        float* out) {
  const int hd = info_.head_dim, heads = info_.n_heads, group = heads / info_.n_kv_heads;
  const int q_width = heads * hd, kv_width = info_.n_kv_heads * hd, stride = q_width + 2 * kv_width;
  // The context rows before the block (committed positions only ever precede it).
  const int seen = static_cast<int>(std::lower_bound(context.positions_.begin(), context.positions_.end(), position) -
                                    context.positions_.begin());
  const float* keys = context.keys_[layer].data();
  const float* values = context.values_[layer].data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int window = layers_[layer].window;
  pool_->run(heads * n, [&](int task) {
    const int head = task % heads, row = task / heads, kv_head = head / group;
    const float* q = qkv + static_cast<size_t>(row) * stride + head * hd;
    // A sliding-window layer: block row `row` (at position + row) sees context positions
    // less than `window` back; the block itself stays whole.
    const int from = window <= 0 ? 0
                                 : static_cast<int>(std::lower_bound(context.positions_.begin(),
                                                                     context.positions_.begin() + seen,
                                                                     position + row - window + 1) -
                                                    context.positions_.begin());
    std::vector<float> scores(static_cast<size_t>(seen) + n, 0.0f);
    float best = -std::numeric_limits<float>::infinity();
    auto dot = [&](const float* k) {
      float sum = 0.0f;
      for (int i = 0; i < hd; ++i) sum += q[i] * k[i];
      return sum * scale;
    };
    for (int j = from; j < seen; ++j) best = std::max(best, scores[j] = dot(keys + static_cast<size_t>(j) * kv_width + kv_head * hd));
    for (int j = 0; j < n; ++j)
      best = std::max(best, scores[seen + j] = dot(qkv + static_cast<size_t>(j) * stride + q_width + kv_head * hd));
    float total = 0.0f;
    for (int j = from; j < seen + n; ++j) total += (scores[j] = std::exp(scores[j] - best));
    float* o = out + static_cast<size_t>(row) * q_width + head * hd;
    std::fill(o, o + hd, 0.0f);
    auto add = [&](const float* v, float weight) {
      for (int i = 0; i < hd; ++i) o[i] += weight * v[i];
    };
    for (int j = from; j < seen; ++j) add(values + static_cast<size_t>(j) * kv_width + kv_head * hd, scores[j] / total);
    for (int j = 0; j < n; ++j)
      add(qkv + static_cast<size_t>(j) * stride + q_width + kv_width + kv_head * hd, scores[seen + j] / total);
  });
}

std::span<const float> BlockDraft::block_logits(const BlockDraftContext& context, int32_t token, int position,
                                                int first_row, int rows) {
  const auto& n = info_;
  if (first_row < 0 || rows < 1 || first_row + rows > n.block_size)
    fail("block draft: rows {} .. {} of a block of {}", first_row, first_row + rows - 1, n.block_size);
  if (token < 0 || token >= n.vocab) fail("block draft: token {} is outside the vocabulary", token);
  run_block(context, token, position);
  logits_.resize(static_cast<size_t>(rows) * n.vocab);
  project(head_, normed_.data() + static_cast<size_t>(first_row) * n.d_model, rows, logits_.data(), n.vocab);
  return logits_;
}

void BlockDraft::run_block(const BlockDraftContext& context, int32_t token, int position) {
  const auto& n = info_;
  const int rows = n.block_size;  // (always whole: the rows see each other, as in training)
  const int d = n.d_model, q_width = n.n_heads * n.head_dim, kv_width = n.n_kv_heads * n.head_dim;
  const int stride = q_width + 2 * kv_width;
  const size_t cells = static_cast<size_t>(rows) * d;
  hidden_.resize(cells);
  normed_.resize(cells);
  scratch_.resize(cells);
  qkv_.resize(static_cast<size_t>(rows) * stride);
  attended_.resize(static_cast<size_t>(rows) * q_width);
  gate_up_.resize(static_cast<size_t>(rows) * 2 * n.ffn);
  ffn_out_.resize(static_cast<size_t>(rows) * n.ffn);
  if (!embedding_) fail("block draft: it shares the target's embedding table, and no target is attached");
  kernels::dequantize_row(embedding_->type, embedding_->data + embedding_row_bytes_ * token, hidden_.data(), d);
  for (int r = 1; r < rows; ++r) std::copy(mask_row_.begin(), mask_row_.end(), hidden_.begin() + static_cast<size_t>(r) * d);
  std::vector<int> positions(rows);
  for (int r = 0; r < rows; ++r) positions[r] = position + r;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    kernels::rms_norm(hidden_.data(), layer.attn_norm.data(), normed_.data(), rows, d, n.rms_eps, *pool_);
    project(layer.qkv, normed_.data(), rows, qkv_.data(), stride);
    for (int r = 0; r < rows; ++r) {
      float* row = qkv_.data() + static_cast<size_t>(r) * stride;
      kernels::rms_norm(row, layer.q_norm.data(), row, n.n_heads, n.head_dim, n.rms_eps, *pool_);
      kernels::rms_norm(row + q_width, layer.k_norm.data(), row + q_width, n.n_kv_heads, n.head_dim, n.rms_eps, *pool_);
    }
    rotate(qkv_.data(), rows, stride, n.n_heads, positions.data());
    rotate(qkv_.data() + q_width, rows, stride, n.n_kv_heads, positions.data());
    attend(context, static_cast<int>(l), qkv_.data(), rows, position, attended_.data());
    project(layer.output, attended_.data(), rows, scratch_.data(), d);
    for (size_t i = 0; i < cells; ++i) hidden_[i] += scratch_[i];
    kernels::rms_norm(hidden_.data(), layer.ffn_norm.data(), normed_.data(), rows, d, n.rms_eps, *pool_);
    project(layer.gate_up, normed_.data(), rows, gate_up_.data(), 2 * n.ffn);
    kernels::silu_mul(gate_up_.data(), ffn_out_.data(), rows, n.ffn, *pool_);
    project(layer.down, ffn_out_.data(), rows, scratch_.data(), d);
    for (size_t i = 0; i < cells; ++i) hidden_[i] += scratch_[i];
  }
  kernels::rms_norm(hidden_.data(), output_norm_.data(), normed_.data(), rows, d, n.rms_eps, *pool_);
}

std::span<const float> BlockDraft::guess_logits(DraftContext& context, std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("block draft: no token to start a block at");
  return block_logits(ours(context), tokens.back(), static_cast<int>(tokens.size()) - 1, 0, info_.block_size);
}

std::vector<int32_t> BlockDraft::propose(DraftContext& context, std::span<const int32_t> tokens, int max_tokens) {
  const int guesses = std::min(max_tokens, info_.block_size - 1);
  if (guesses <= 0 || tokens.empty()) return {};
  // (slot 0 is the token given: the head runs over the guessing slots only)
  const auto logits = block_logits(ours(context), tokens.back(), static_cast<int>(tokens.size()) - 1, 1, guesses);
  std::vector<int32_t> out;
  for (int slot = 0; slot < guesses; ++slot) {
    const auto row = logits.subspan(static_cast<size_t>(slot) * info_.vocab, info_.vocab);
    out.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
  }
  return out;
}

}  // namespace splash::model::dflash
