#include "model/llama/llama_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gated_delta_net.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_formats.h"
#include "model/llama/llama_cpu_weights.h"
#include "model/llama/llama_hparams.h"
#include "model/llama/smollm2_shapes.h"

namespace splash::model::llama {
namespace {

using kernels::AlignedBuffer;
using kernels::PackedWeight;
using kernels::WeightSource;

// The shared in-projection pieces (llama_hparams.h), each of a type the CPU kernels read.
std::vector<WeightSource> cpu_delta_net_in_projection(const gguf::File& file, const std::string& p,
                                                      const kernels::DeltaNetShape& d, int d_model) {
  auto rows = delta_net_in_projection(file, p, d, d_model);
  for (const auto& piece : rows)
    if (!kernels::is_supported_weight_type(piece.type))
      fail("{}: a Gated DeltaNet in-projection of {} has type {}, which has no CPU kernel", file.path(), p,
           type_name(piece.type));
  return rows;
}

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> qkv_bias;        // Qwen2: [q | k | v] biases, else empty
  std::vector<float> q_norm, k_norm;  // Qwen3: per-head RMSNorm weights [head_dim], else empty
  std::vector<PackedWeight> qkv;      // [q; k; v] stacked, a matrix per run of one type (pack_group)
  PackedWeight attn_output;
  std::vector<PackedWeight> gate_up;  // [gate; up] stacked, one matrix or two
  PackedWeight down;
  // A mixture-of-experts FFN instead (Qwen3-MoE): the router and each expert's matrices.
  PackedWeight router;                              // [experts][d_model], a float type
  std::vector<std::vector<PackedWeight>> expert_gate_up;
  std::vector<PackedWeight> expert_down;
  // Qwen3.5-MoE's and Qwen3-Next's shared expert: every token's, scaled by sigmoid(x . shared_gate).
  std::vector<PackedWeight> shared_gate_up;
  PackedWeight shared_down;
  std::vector<float> shared_gate;  // [d_model]
  // The hybrids' Gated DeltaNet layers instead of attention: the in-projection [qkv | z | beta |
  // alpha] (stacked where the types allow), the out projection and the small weights
  // (gated_delta_net.h). state_index: the layer's place in a sequence's recurrent state.
  bool recurrent = false;
  int state_index = -1;
  int kv_layer = -1;  // attention layers: the layer's part of the KV pool
  std::vector<PackedWeight> delta_in;
  PackedWeight delta_out;
  std::vector<float> conv, dt_bias, ssm_a, ssm_norm;
};

// A hybrid sequence's room to take refused guesses back (LlamaModel::rewind_state): its state
// before a verify slice and the slice's in-projection rows in every recurrent layer.
size_t draft_rewind_bytes(const Hyperparameters& h) {
  if (!h.hybrid()) return 0;
  return h.recurrent_state_bytes() + sizeof(float) * static_cast<size_t>(h.recurrent_layer_count()) *
                                         (1 + kMaxDraftTokens) * h.delta_net.mixed_width();
}

template <typename Shapes>
class LlamaModel final : public Model {
 public:
  LlamaModel(const gguf::File& file, const Hyperparameters& h, const LoadOptions& options)
      : file_(file), shapes_(make_shapes(h)), h_(h), pool_(options.threads) {
    fill_model_info(file, h, options.max_context, info_);
    info_.isa = kernels::matmul_isa_name();
    info_.max_logits_per_slice = 1 + kMaxDraftTokens;  // verify blocks computed as decode steps
    // A decode step streams every weight once; on the project's 2-core machine a Qwen2.5-Coder-
    // 1.5B step (22 ms) costs as much compute as ~7 prompt tokens, and guesses are often
    // refused: beyond about 16 tokens a pass, a guess costs more than it is likely to save.
    info_.draft_pass_tokens = 16;
    info_.threads = pool_.size();
    info_.kernel_shapes = Shapes::name ? fmt::format("compile-time shapes of {}", Shapes::name)
                                       : std::string("run-time shapes (no specialised kernels for this model)");
    // (the taps are checked before the weights are packed: a bad layer is refused at once)
    tap_of_layer_.assign(shapes_.n_layers, -1);
    for (size_t i = 0; i < options.hidden_taps.size(); ++i) {
      const int l = options.hidden_taps[i];
      if (l < 0 || l >= shapes_.n_layers) fail("hidden tap at layer {}: the model has layers 0-{}", l, shapes_.n_layers - 1);
      if (tap_of_layer_[l] >= 0) fail("hidden tap at layer {} asked for twice", l);
      tap_of_layer_[l] = static_cast<int>(i);
    }
    taps_ = static_cast<int>(options.hidden_taps.size());
    load_weights();
    allocate_cache(options);
    allocate_states(options);
  }

  const ModelInfo& info() const override { return info_; }

  std::span<const float> forward(std::span<const SequenceSlice> batch) override {
    const auto count = check_batch(batch, info_);
    if (h_.hybrid()) {
      claim_states(batch);
      keep_rewind_points(batch);
    }
    forward_batch(batch, count.tokens, count.wanted);
    if (h_.hybrid())
      for (const auto& slice : batch)
        state_positions_[slice.state_slot] = slice.first_position + static_cast<int>(slice.tokens.size());
    const size_t vocab = shapes_.vocab;
    const std::span<const float> rows{logits_.as<float>(), count.wanted * vocab};
    best_.clear();
    best_rows_.clear();
    if (count.best_only == 0) return rows;
    // Rows of best_only slices leave the returned rows for their best tokens, selected here.
    whole_.clear();
    size_t row = 0;
    for (const auto& slice : batch)
      for (int i = 0; i < slice.logits; ++i, ++row) {
        const auto logits = rows.subspan(row * vocab, vocab);
        if (!slice.best_only) {
          whole_.insert(whole_.end(), logits.begin(), logits.end());
          continue;
        }
        best_rows_.push_back(row);
        best_.resize(best_.size() + kBestTokens);
        select_best_tokens(logits, std::span(best_).last(kBestTokens));
      }
    return whole_;
  }

  std::span<const TokenLogit> best_tokens() const override { return best_; }
  std::span<const float> hidden_taps() const override { return tapped_; }
  kernels::ThreadPool* cpu_threads() override { return &pool_; }
  const PackedWeight* cpu_output_head() const override { return &output_; }

  std::span<const float> whole_row(int best_row) override {
    if (best_row < 0 || static_cast<size_t>(best_row) >= best_rows_.size())
      fail("whole_row({}): the last pass has {} best-token rows", best_row, best_rows_.size());
    return {logits_.as<float>() + best_rows_[best_row] * shapes_.vocab, static_cast<size_t>(shapes_.vocab)};
  }

  void copy_kv_block(int from, int to, int tokens) override {
    if (from < 0 || from >= kv_blocks_ || to < 0 || to >= kv_blocks_ || tokens < 0 || tokens > kKvBlockTokens)
      fail("copy_kv_block({}, {}, {}) outside the pool of {} blocks", from, to, tokens, kv_blocks_);
    // Whole records: the positions past `tokens` are garbage the new owner overwrites before
    // any query can see them.
    for (int l = 0; l < kv_layers_; ++l)
      for (int h = 0; h < shapes_.n_kv_heads; ++h)
        std::memcpy(layer_kv(l) + h * kv_head_stride() + static_cast<size_t>(to) * head_layout_.bytes(),
                    layer_kv(l) + h * kv_head_stride() + static_cast<size_t>(from) * head_layout_.bytes(),
                    head_layout_.bytes());
  }

 private:
  static Shapes make_shapes(const Hyperparameters& h) {
    if constexpr (std::is_same_v<Shapes, RuntimeShapes>) return h.shapes;
    else return Shapes{};
  }

  int q_width() const { return shapes_.n_heads * shapes_.head_dim; }
  int kv_width() const { return shapes_.n_kv_heads * shapes_.head_dim; }
  int qkv_width() const { return q_width() + 2 * kv_width(); }
  // Qwen3.5's attention: each head's query and output gate side by side in q's projection.
  bool gated_attention() const { return h_.hybrid(); }

  // A vector of n elements of any type the kernels read, as floats.
  std::vector<float> any_vector_weight(const std::string& name, int n) {
    const auto& t = file_.tensor(name);
    if (t.n_elements != static_cast<uint64_t>(n) || !kernels::is_supported_weight_type(t.type) ||
        (t.dims.size() != 1 && !(t.dims.size() == 2 && t.dims[1] == 1)))
      fail("{}: tensor '{}' must be a vector of {} elements", file_.path(), name, n);
    std::vector<float> out(n);
    kernels::dequantize_row(t.type, t.data, out.data(), n);
    return out;
  }

  // A Gated DeltaNet layer's tensors as llama.cpp's converter names and shapes them.
  void load_delta_net_layer(const std::string& p, LayerWeights& layer, std::vector<WeightSource>& in,
                            WeightSource& out) {
    const auto& d = h_.delta_net;
    const int d_model = shapes_.d_model;
    layer.recurrent = true;
    in = cpu_delta_net_in_projection(file_, p, d, d_model);
    out = weight(file_, p + "ssm_out.weight", d_model, d.value_width());
    layer.conv = vector_weight(file_, p + "ssm_conv1d.weight", d.conv_channels() * d.conv_kernel);
    layer.dt_bias = vector_weight(file_, p + "ssm_dt.bias", d.v_heads);
    layer.ssm_a = vector_weight(file_, p + "ssm_a", d.v_heads);
    layer.ssm_norm = vector_weight(file_, p + "ssm_norm.weight", d.head_v);
  }

  void load_weights() {
    const auto& s = shapes_;
    const auto& embedding = file_.tensor("token_embd.weight");
    if (!kernels::is_supported_weight_type(embedding.type))
      fail("{}: token_embd.weight has unsupported type {}", file_.path(), type_name(embedding.type));
    embedding_ = &embedding;
    embedding_row_bytes_ = embedding.n_bytes / s.vocab;
    std::map<std::string, int> type_counts;
    for (const auto& t : file_.tensors()) ++type_counts[std::string(type_name(t.type))];
    std::vector<std::string> parts;
    for (const auto& [name, count] : type_counts) parts.push_back(fmt::format("{} ({})", name, count));
    info_.weight_types = fmt::format("{}", fmt::join(parts, ", "));

    // Check every tensor first (errors surface here, on the calling thread), then repack
    // the layers in parallel: packing is the bulk of the load time.
    struct LayerSources {
      WeightSource q, k, v, o, gate, up, down, router;
      std::vector<WeightSource> expert_gate, expert_up, expert_down;
      std::vector<WeightSource> expert_gate_up;  // newer files: each expert's [gate; up] as one matrix
      WeightSource shared_gate, shared_up, shared_down;
      std::vector<WeightSource> delta_in;  // [qkv | z | beta | alpha] rows, in pieces
      WeightSource delta_out;
    };
    std::vector<LayerSources> sources(s.n_layers);
    layers_.resize(s.n_layers);
    int state_layers = 0;
    for (int l = 0; l < s.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      layers_[l].attn_norm = vector_weight(file_, p + "attn_norm.weight", s.d_model);
      layers_[l].ffn_norm = vector_weight(file_, p + (h_.hybrid() ? "post_attention_norm.weight" : "ffn_norm.weight"),
                                          s.d_model);
      auto& src = sources[l];
      if (h_.hybrid() && h_.recurrent[l]) {
        load_delta_net_layer(p, layers_[l], src.delta_in, src.delta_out);
        layers_[l].state_index = state_layers++;
      } else {
        layers_[l].kv_layer = kv_layers_++;
        if (h_.qkv_bias) {
          auto& bias = layers_[l].qkv_bias;
          for (const auto& [name, width] : {std::pair{"attn_q.bias", q_width()}, std::pair{"attn_k.bias", kv_width()},
                                            std::pair{"attn_v.bias", kv_width()}}) {
            const auto part = vector_weight(file_, p + name, width);
            bias.insert(bias.end(), part.begin(), part.end());
          }
        }
        if (h_.qk_norm) {
          layers_[l].q_norm = vector_weight(file_, p + "attn_q_norm.weight", s.head_dim);
          layers_[l].k_norm = vector_weight(file_, p + "attn_k_norm.weight", s.head_dim);
        }
        src.q = weight(file_, p + "attn_q.weight", gated_attention() ? 2 * q_width() : q_width(), s.d_model);
        src.k = weight(file_, p + "attn_k.weight", kv_width(), s.d_model);
        src.v = weight(file_, p + "attn_v.weight", kv_width(), s.d_model);
        src.o = weight(file_, p + "attn_output.weight", s.d_model, q_width());
      }
      if (h_.n_experts > 0) {
        src.router = router_weight(file_, p + "ffn_gate_inp.weight", h_.n_experts, s.d_model);
        if (file_.find_tensor(p + "ffn_gate_up_exps.weight")) {
          src.expert_gate_up = expert_weights(file_, p + "ffn_gate_up_exps.weight", h_.n_experts, 2 * s.ffn, s.d_model);
        } else {
          src.expert_gate = expert_weights(file_, p + "ffn_gate_exps.weight", h_.n_experts, s.ffn, s.d_model);
          src.expert_up = expert_weights(file_, p + "ffn_up_exps.weight", h_.n_experts, s.ffn, s.d_model);
        }
        src.expert_down = expert_weights(file_, p + "ffn_down_exps.weight", h_.n_experts, s.d_model, s.ffn);
        if (const int width = h_.shared_expert_ffn; width > 0) {
          src.shared_gate = weight(file_, p + "ffn_gate_shexp.weight", width, s.d_model);
          src.shared_up = weight(file_, p + "ffn_up_shexp.weight", width, s.d_model);
          src.shared_down = weight(file_, p + "ffn_down_shexp.weight", s.d_model, width);
          layers_[l].shared_gate = any_vector_weight(p + "ffn_gate_inp_shexp.weight", s.d_model);
        }
      } else {
        src.gate = weight(file_, p + "ffn_gate.weight", s.ffn, s.d_model);
        src.up = weight(file_, p + "ffn_up.weight", s.ffn, s.d_model);
        src.down = weight(file_, p + "ffn_down.weight", s.d_model, s.ffn);
      }
    }
    std::vector<std::exception_ptr> errors(s.n_layers);
    pool_.run(s.n_layers, [&](int l) {
      try {
        auto& layer = layers_[l];
        const auto& src = sources[l];
        if (layer.recurrent) {
          layer.delta_in = pack_group(src.delta_in);
          layer.delta_out = kernels::pack_weight(src.delta_out);
        } else {
          layer.qkv = pack_group({src.q, src.k, src.v});
          layer.attn_output = kernels::pack_weight(src.o);
        }
        if (h_.n_experts > 0) {
          layer.router = kernels::pack_weight(src.router);
          for (int e = 0; e < h_.n_experts; ++e) {  // expert-major, each expert's gate and up stacked
            if (src.expert_gate_up.empty())
              layer.expert_gate_up.push_back(pack_group({src.expert_gate[e], src.expert_up[e]}));
            else
              layer.expert_gate_up.emplace_back().push_back(kernels::pack_weight(src.expert_gate_up[e]));
            layer.expert_down.push_back(kernels::pack_weight(src.expert_down[e]));
          }
          if (h_.shared_expert_ffn > 0) {
            layer.shared_gate_up = pack_group({src.shared_gate, src.shared_up});
            layer.shared_down = kernels::pack_weight(src.shared_down);
          }
        } else {
          layer.gate_up = pack_group({src.gate, src.up});
          layer.down = kernels::pack_weight(src.down);
        }
      } catch (...) {
        errors[l] = std::current_exception();  // never let an exception escape a pool thread
      }
    });
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
    size_t expert_bytes = 0;  // of all experts; a token reads n_experts_used of them per layer
    for (const auto& layer : layers_) {
      for (const auto& w : layer.qkv) info_.packed_weight_bytes += w.bytes();
      for (const auto& w : layer.delta_in) info_.packed_weight_bytes += w.bytes();
      for (const auto& w : layer.gate_up) info_.packed_weight_bytes += w.bytes();
      for (const auto& w : layer.shared_gate_up) info_.packed_weight_bytes += w.bytes();
      info_.packed_weight_bytes +=
          layer.attn_output.bytes() + layer.delta_out.bytes() + layer.down.bytes() + layer.shared_down.bytes();
      for (const auto& group : layer.expert_gate_up)
        for (const auto& w : group) expert_bytes += w.bytes();
      for (const auto& w : layer.expert_down) expert_bytes += w.bytes();
      if (h_.n_experts > 0) info_.packed_weight_bytes += layer.router.bytes();
    }
    output_norm_ = vector_weight(file_, "output_norm.weight", s.d_model);
    const bool tied = file_.find_tensor("output.weight") == nullptr;
    output_ = kernels::pack_weight(weight(file_, tied ? "token_embd.weight" : "output.weight", s.vocab, s.d_model));
    info_.decode_read_bytes = info_.packed_weight_bytes + output_.bytes() +
                              (h_.n_experts > 0 ? expert_bytes / h_.n_experts * h_.n_experts_used : 0);
    info_.packed_weight_bytes += expert_bytes + output_.bytes() + (tied ? embedding.n_bytes : 0);
  }

  void allocate_cache(const LoadOptions& options) {
    const auto& s = shapes_;
    head_layout_ = {options.kv_type, s.head_dim};
    layer_block_bytes_ = head_layout_.bytes() * s.n_kv_heads;
    kv_blocks_ = options.kv_blocks > 0 ? options.kv_blocks : (info_.context + kKvBlockTokens - 1) / kKvBlockTokens;
    kv_pool_ = std::make_unique<kernels::LazyMemory>(layer_block_bytes_ * kv_layers_ * kv_blocks_);
    info_.kv_cache_bytes = kv_pool_->size();
    info_.kv_blocks = kv_blocks_;
    info_.kv_type = kernels::kv_type_name(options.kv_type);
    // cos/sin of every (position, frequency) pair, computed in double once.
    const int half = h_.rope_dims / 2;
    const RopeFrequencies rope = rope_frequencies(h_.rope_base, h_.rope_dims, h_.rope_scaling);
    cos_.resize(static_cast<size_t>(info_.context) * half);
    sin_.resize(static_cast<size_t>(info_.context) * half);
    for (int p = 0; p < info_.context; ++p)
      for (int i = 0; i < half; ++i) {
        const double angle = p * rope.inv_freq[i];
        cos_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle) * rope.attention_factor);
        sin_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle) * rope.attention_factor);
      }
  }

  // A hybrid model's recurrent states: [slot][recurrent layer][DeltaNetShape::state_floats()].
  void allocate_states(const LoadOptions& options) {
    if (!h_.hybrid()) return;
    info_.recurrent_layers = h_.recurrent_layer_count();
    info_.state_slots = std::max(1, options.state_slots);
    info_.recurrent_state_bytes = h_.recurrent_state_bytes();
    states_ = std::make_unique<kernels::LazyMemory>(info_.recurrent_state_bytes * info_.state_slots);
    info_.decode_read_bytes += 2 * info_.recurrent_state_bytes;  // a decode step reads and writes its state
    state_positions_.assign(info_.state_slots, 0);
    info_.state_snapshots = std::max(0, options.state_snapshots);
    if (info_.state_snapshots > 0)
      snapshots_ = std::make_unique<kernels::LazyMemory>(info_.recurrent_state_bytes * info_.state_snapshots);
    snapshot_positions_.assign(info_.state_snapshots, -1);
    if (!options.drafts) {  // no verify slices, so no room to take refused guesses back
      info_.max_logits_per_slice = 1;
      info_.draft_pass_tokens = 0;
    }
    rewinds_ = std::make_unique<kernels::LazyMemory>(options.drafts ? draft_rewind_bytes(h_) * info_.state_slots : 0);
    rewind_from_.assign(info_.state_slots, -1);
    rewind_tokens_.assign(info_.state_slots, 0);
  }

  // Taking refused guesses back out of a recurrent state. A verify slice (drafted guesses,
  // logits > 1) first copies its slot's state aside (rewind_state_of) and, layer by layer, the
  // in-projection rows of its tokens before the DeltaNet consumes them (rewind_rows_of); a
  // rewind to fewer positions restores the copy and runs the DeltaNet again over the rows of
  // the tokens kept, the same code in the same order, so the state is bit for bit the one a
  // pass of those tokens alone leaves.
  uint8_t* rewind_state_of(int slot) { return rewinds_->data() + static_cast<size_t>(slot) * draft_rewind_bytes(h_); }
  float* rewind_rows_of(int slot, int state_index) {
    return reinterpret_cast<float*>(rewind_state_of(slot) + info_.recurrent_state_bytes) +
           static_cast<size_t>(state_index) * (1 + kMaxDraftTokens) * h_.delta_net.mixed_width();
  }
  void keep_rewind_points(std::span<const SequenceSlice> batch) {
    for (const auto& slice : batch)
      if (slice.logits > 1 && slice.tokens.size() > 1 + kMaxDraftTokens)
        fail("forward: a hybrid model's slice wanting {} rows is {} tokens long; a verify slice is at most {}",
             slice.logits, slice.tokens.size(), 1 + kMaxDraftTokens);
    for (const auto& slice : batch) {
      const int slot = slice.state_slot;
      rewind_from_[slot] = -1;
      if (slice.logits <= 1) continue;
      std::memcpy(rewind_state_of(slot), slot_bytes(slot), info_.recurrent_state_bytes);
      rewind_from_[slot] = slice.first_position;
      rewind_tokens_[slot] = static_cast<int>(slice.tokens.size());
    }
  }

  void rewind_state(int slot, int positions) override {
    uint8_t* state = slot_bytes(slot);
    const int from = rewind_from_[slot], end = from + rewind_tokens_[slot];
    if (positions == state_positions_[slot]) return;
    if (from < 0 || state_positions_[slot] != end || positions < from || positions > end)
      fail("rewind_state: slot {} holds the state after {} tokens and can go back to {} .. {} only, not {}", slot,
           state_positions_[slot], from < 0 ? state_positions_[slot] : from, state_positions_[slot], positions);
    std::memcpy(state, rewind_state_of(slot), info_.recurrent_state_bytes);
    rewind_from_[slot] = -1;
    state_positions_[slot] = -1;  // (until the replay below completes)
    const int kept = positions - from;
    if (kept > 0) {
      const auto& d = h_.delta_net;
      ensure_scratch(kept);
      for (const auto& layer : layers_) {
        if (!layer.recurrent) continue;
        const kernels::DeltaNetSequence replay{rewind_rows_of(slot, layer.state_index), kept,
                                               layer_state(slot, layer.state_index), attn_.as<float>()};
        const kernels::DeltaNetWeights weights{layer.conv.data(), layer.dt_bias.data(), layer.ssm_a.data(),
                                               layer.ssm_norm.data(), h_.rms_eps};
        kernels::gated_delta_net(d, weights, d.mixed_width(), std::span(&replay, 1), pool_);
      }
    }
    state_positions_[slot] = positions;
  }

  uint8_t* snapshot_bytes(int snapshot) {
    if (snapshot < 0 || snapshot >= info_.state_snapshots)
      fail("state snapshot {} outside the model's {}", snapshot, info_.state_snapshots);
    return snapshots_->data() + static_cast<size_t>(snapshot) * info_.recurrent_state_bytes;
  }
  uint8_t* slot_bytes(int slot) {
    if (slot < 0 || slot >= info_.state_slots) fail("recurrent-state slot {} outside the model's {}", slot, info_.state_slots);
    return states_->data() + static_cast<size_t>(slot) * info_.recurrent_state_bytes;
  }

  void save_state(int slot, int snapshot) override {
    uint8_t* to = snapshot_bytes(snapshot);
    const uint8_t* from = slot_bytes(slot);
    if (state_positions_[slot] < 0) fail("save_state: slot {} holds no known state (its last pass failed)", slot);
    std::memcpy(to, from, info_.recurrent_state_bytes);
    snapshot_positions_[snapshot] = state_positions_[slot];
  }

  void restore_state(int snapshot, int slot, int positions) override {
    const uint8_t* from = snapshot_bytes(snapshot);
    if (positions != snapshot_positions_[snapshot])
      fail("restore_state: snapshot {} holds the state after {} tokens, not {}", snapshot, snapshot_positions_[snapshot],
           positions);
    std::memcpy(slot_bytes(slot), from, info_.recurrent_state_bytes);
    state_positions_[slot] = positions;
    rewind_from_[slot] = -1;
  }

  float* layer_state(int slot, int state_index) {
    return reinterpret_cast<float*>(states_->data() + static_cast<size_t>(slot) * info_.recurrent_state_bytes) +
           static_cast<size_t>(state_index) * h_.delta_net.state_floats();
  }

  // Each slice's slot starts afresh at position 0, else must hold the state after exactly
  // first_position tokens. Until the pass completes the slots hold no known position (a pass
  // that throws leaves them half-updated).
  void claim_states(std::span<const SequenceSlice> batch) {
    for (const auto& slice : batch)
      if (slice.first_position != 0 && state_positions_[slice.state_slot] != slice.first_position)
        fail("forward: recurrent-state slot {} holds the state after {} tokens; a slice at position {} cannot follow "
             "on (a recurrent state goes back only inside its last verify slice, by rewind_state: start the sequence again at position 0)",
             slice.state_slot, state_positions_[slice.state_slot], slice.first_position);
    for (const auto& slice : batch) {
      if (slice.first_position == 0) std::memset(layer_state(slice.state_slot, 0), 0, info_.recurrent_state_bytes);
      state_positions_[slice.state_slot] = -1;
    }
  }

  // The pool is [attention layer][kv head][block]: one kv head's blocks of a sequence
  // allocated in order lie one after another, which the hardware prefetchers follow.
  uint8_t* layer_kv(int kv_layer) {
    return kv_pool_->data() + static_cast<size_t>(kv_layer) * kv_blocks_ * layer_block_bytes_;
  }
  size_t kv_head_stride() const { return static_cast<size_t>(kv_blocks_) * head_layout_.bytes(); }

  void ensure_scratch(int n) {
    const auto& s = shapes_;
    auto size = [&](AlignedBuffer& b, size_t floats) { b.resize(floats * sizeof(float)); };
    size(x_, static_cast<size_t>(n) * s.d_model);
    size(normed_, static_cast<size_t>(n) * s.d_model);
    size(qkv_, static_cast<size_t>(n) * (qkv_width() + (gated_attention() ? q_width() : 0)));
    size(attn_, static_cast<size_t>(n) * std::max(q_width(), h_.hybrid() ? h_.delta_net.value_width() : 0));
    if (h_.hybrid()) {
      size(attn_gate_, static_cast<size_t>(n) * q_width());
      size(mixed_, static_cast<size_t>(n) * h_.delta_net.mixed_width());
    }
    size(projected_, static_cast<size_t>(n) * s.d_model);
    const int widest_ffn = std::max(s.ffn, h_.shared_expert_ffn);
    size(gate_up_, static_cast<size_t>(n) * 2 * widest_ffn);
    size(hidden_, static_cast<size_t>(n) * widest_ffn);
    if (h_.n_experts > 0) {
      size(expert_rows_, static_cast<size_t>(n) * s.d_model);
      size(router_logits_, static_cast<size_t>(n) * h_.n_experts);
    }
  }

  // Runs matrices stacked row-wise (or apart, when their types differ) into one output row.
  void matmul_group(const std::vector<PackedWeight>& group, float* y, int ldy) {
    llama::matmul_group(group, activations_, y, ldy, pool_);
  }

  // Writes the new tokens' keys and values into their sequences' blocks.
  void store_kv(int layer, std::span<const SequenceSlice> batch) {
    const float* qkv = qkv_.as<float>();
    uint8_t* kv = layer_kv(layer);
    int row = 0;
    for (const auto& slice : batch)
      for (size_t t = 0; t < slice.tokens.size(); ++t, ++row) {
        const int p = slice.first_position + static_cast<int>(t);
        const float* k = qkv + static_cast<size_t>(row) * qkv_width() + q_width();
        uint8_t* record = kv + static_cast<size_t>(slice.block_table[p / kKvBlockTokens]) * head_layout_.bytes();
        kernels::store_kv_position(head_layout_, record, kv_head_stride(), shapes_.n_kv_heads, p % kKvBlockTokens, k,
                                   k + kv_width());
      }
  }

  void forward_batch(std::span<const SequenceSlice> batch, int n, int wanted) {
    const auto& s = shapes_;
    ensure_scratch(n);
    float* x = x_.as<float>();
    std::vector<int> positions;
    positions.reserve(n);
    for (const auto& slice : batch)
      for (size_t t = 0; t < slice.tokens.size(); ++t) {
        float* row = x + positions.size() * s.d_model;
        if (!slice.embeddings.empty() && slice.embeddings[t])
          std::memcpy(row, slice.embeddings[t], sizeof(float) * s.d_model);
        else
          kernels::dequantize_row(embedding_->type, embedding_->data + embedding_row_bytes_ * slice.tokens[t], row,
                                  s.d_model);
        positions.push_back(slice.first_position + static_cast<int>(t));
      }
    tapped_.resize(static_cast<size_t>(n) * taps_ * s.d_model);
    for (int l = 0; l < s.n_layers; ++l) {
      const auto& layer = layers_[l];
      kernels::rms_norm(x, layer.attn_norm.data(), normed_.as<float>(), n, s.d_model, h_.rms_eps, pool_);
      activations_.quantize(normed_.as<float>(), n, s.d_model, pool_);
      if (layer.recurrent) {
        delta_net(layer, batch, n);
      } else {
        attention(layer, batch, positions, n);
      }
      kernels::rms_norm(x, layer.ffn_norm.data(), normed_.as<float>(), n, s.d_model, h_.rms_eps, pool_);
      if (h_.n_experts > 0) {
        mixture_of_experts(layer, n);
      } else {
        activations_.quantize(normed_.as<float>(), n, s.d_model, pool_);
        matmul_group(layer.gate_up, gate_up_.as<float>(), 2 * s.ffn);
        kernels::silu_mul(gate_up_.as<float>(), hidden_.as<float>(), n, s.ffn, pool_);
        activations_.quantize(hidden_.as<float>(), n, s.ffn, pool_);
        kernels::matmul(layer.down, activations_, projected_.as<float>(), s.d_model, pool_);
        add_into(x_.as<float>(), projected_.as<float>(), static_cast<size_t>(n) * s.d_model);
      }
      if (const int tap = tap_of_layer_[l]; tap >= 0)
        for (int t = 0; t < n; ++t)
          std::memcpy(tapped_.data() + (static_cast<size_t>(t) * taps_ + tap) * s.d_model,
                      x + static_cast<size_t>(t) * s.d_model, sizeof(float) * s.d_model);
    }
    if (wanted == 0) return;
    // Only the wanted positions (each slice's last `logits`) need logits: gather those rows,
    // then one output matmul over all of them.
    float* last_rows = projected_.as<float>();
    int row = 0, out = 0;
    for (const auto& slice : batch) {
      row += static_cast<int>(slice.tokens.size());
      std::memcpy(last_rows + static_cast<size_t>(out) * s.d_model, x + static_cast<size_t>(row - slice.logits) * s.d_model,
                  sizeof(float) * s.d_model * slice.logits);
      out += slice.logits;
    }
    kernels::rms_norm(last_rows, output_norm_.data(), normed_.as<float>(), wanted, s.d_model, h_.rms_eps, pool_);
    activations_.quantize(normed_.as<float>(), wanted, s.d_model, pool_);
    logits_.resize(static_cast<size_t>(wanted) * s.vocab * sizeof(float));
    kernels::matmul(output_, activations_, logits_.as<float>(), s.vocab, pool_);
  }

  // An attention layer on the n rows whose normalised, quantized activations are ready; its
  // output projection added into x_.
  void attention(const LayerWeights& layer, std::span<const SequenceSlice> batch, const std::vector<int>& positions,
                 int n) {
    const auto& s = shapes_;
    float* qkv = qkv_.as<float>();
    if (gated_attention()) {
      // [q0 | gate0 | q1 | gate1 | ... | k | v]: the gates move out, q and k/v close up.
      const int projected = qkv_width() + q_width();
      float* gates = attn_gate_.as<float>();
      matmul_group(layer.qkv, qkv, projected);
      std::vector<float> row(projected);
      for (int t = 0; t < n; ++t) {
        float* r = qkv + static_cast<size_t>(t) * projected;
        std::copy(r, r + projected, row.begin());
        float* out = qkv + static_cast<size_t>(t) * qkv_width();
        for (int h = 0; h < s.n_heads; ++h) {
          std::copy_n(row.begin() + 2 * h * s.head_dim, s.head_dim, out + h * s.head_dim);
          std::copy_n(row.begin() + (2 * h + 1) * s.head_dim, s.head_dim,
                      gates + static_cast<size_t>(t) * q_width() + h * s.head_dim);
        }
        std::copy(row.begin() + 2 * q_width(), row.end(), out + q_width());
      }
    } else {
      matmul_group(layer.qkv, qkv, qkv_width());
    }
    if (!layer.qkv_bias.empty())
      for (int t = 0; t < n; ++t) add_into(qkv + static_cast<size_t>(t) * qkv_width(), layer.qkv_bias.data(), qkv_width());
    if (!layer.q_norm.empty())
      for (int t = 0; t < n; ++t) {  // each head's q and k normalised over head_dim, in place
        float* row = qkv + static_cast<size_t>(t) * qkv_width();
        kernels::rms_norm(row, layer.q_norm.data(), row, s.n_heads, s.head_dim, h_.rms_eps, pool_);
        kernels::rms_norm(row + q_width(), layer.k_norm.data(), row + q_width(), s.n_kv_heads, s.head_dim, h_.rms_eps,
                          pool_);
      }
    if (h_.neox_rope) {
      kernels::rope_neox(qkv, n, qkv_width(), s.n_heads, s.head_dim, positions.data(), cos_.data(), sin_.data(),
                         h_.rope_dims);
      kernels::rope_neox(qkv + q_width(), n, qkv_width(), s.n_kv_heads, s.head_dim, positions.data(), cos_.data(),
                         sin_.data(), h_.rope_dims);
    } else {
      kernels::rope_adjacent(qkv, n, qkv_width(), s.n_heads, s.head_dim, positions.data(), cos_.data(), sin_.data());
      kernels::rope_adjacent(qkv + q_width(), n, qkv_width(), s.n_kv_heads, s.head_dim, positions.data(), cos_.data(),
                             sin_.data());
    }
    store_kv(layer.kv_layer, batch);
    attention_args_.clear();
    int row = 0;
    for (const auto& slice : batch) {
      const int count = static_cast<int>(slice.tokens.size());
      const auto args = [&](int first, int tokens) {
        return kernels::AttentionArgs{qkv + static_cast<size_t>(row + first) * qkv_width(), qkv_width(),
                                      attn_.as<float>() + static_cast<size_t>(row + first) * q_width(), tokens,
                                      slice.first_position + first, s.n_heads, s.n_kv_heads, s.head_dim,
                                      1.0f / std::sqrt(static_cast<float>(s.head_dim)), head_layout_.type,
                                      layer_kv(layer.kv_layer), head_layout_.bytes(), kv_head_stride(),
                                      slice.block_table.data()};
      };
      if (slice.logits > 1) {
        // A verify block: each token's attention as a decode step of it (model.h), so
        // the split of a long context is the one plain decoding makes.
        for (int t = 0; t < count; ++t) attention_args_.push_back(args(t, 1));
      } else {
        attention_args_.push_back(args(0, count));
      }
      row += count;
    }
    kernels::attention(attention_args_, pool_);
    if (gated_attention()) {  // out *= sigmoid(gate), a row a task
      float* out = attn_.as<float>();
      const float* gates = attn_gate_.as<float>();
      pool_.run(n, [&](int t) {
        const size_t begin = static_cast<size_t>(t) * q_width();
        for (size_t i = begin; i < begin + q_width(); ++i) out[i] *= 1.0f / (1.0f + std::exp(-gates[i]));
      });
    }
    activations_.quantize(attn_.as<float>(), n, q_width(), pool_);
    kernels::matmul(layer.attn_output, activations_, projected_.as<float>(), s.d_model, pool_);
    add_into(x_.as<float>(), projected_.as<float>(), static_cast<size_t>(n) * s.d_model);
  }

  // A Gated DeltaNet layer (gated_delta_net.h) on the n rows whose normalised, quantized
  // activations are ready: each slice continues the state of its slot; the out projection
  // is added into x_.
  void delta_net(const LayerWeights& layer, std::span<const SequenceSlice> batch, int n) {
    const auto& d = h_.delta_net;
    const int width = d.mixed_width();
    matmul_group(layer.delta_in, mixed_.as<float>(), width);
    delta_sequences_.clear();
    int row = 0;
    for (const auto& slice : batch) {
      if (rewind_from_[slice.state_slot] >= 0)  // a verify slice: its rows kept for a rewind (the DeltaNet overwrites them)
        std::memcpy(rewind_rows_of(slice.state_slot, layer.state_index), mixed_.as<float>() + static_cast<size_t>(row) * width,
                    sizeof(float) * width * slice.tokens.size());
      delta_sequences_.push_back({mixed_.as<float>() + static_cast<size_t>(row) * width,
                                  static_cast<int>(slice.tokens.size()), layer_state(slice.state_slot, layer.state_index),
                                  attn_.as<float>() + static_cast<size_t>(row) * d.value_width()});
      row += static_cast<int>(slice.tokens.size());
    }
    const kernels::DeltaNetWeights weights{layer.conv.data(), layer.dt_bias.data(), layer.ssm_a.data(),
                                           layer.ssm_norm.data(), h_.rms_eps};
    kernels::gated_delta_net(d, weights, width, delta_sequences_, pool_);
    activations_.quantize(attn_.as<float>(), n, d.value_width(), pool_);
    kernels::matmul(layer.delta_out, activations_, projected_.as<float>(), shapes_.d_model, pool_);
    add_into(x_.as<float>(), projected_.as<float>(), static_cast<size_t>(n) * shapes_.d_model);
  }

  // The FFN of a Qwen3-MoE layer on the n normalised rows in normed_, added into x_: each
  // token's router softmax over all experts, its n_experts_used best renormalised to sum to
  // 1; then expert by expert, the rows routed to it gathered into one small batch through
  // the packed-weight matmuls, and the outputs scattered back in float, scaled by the weights.
  void mixture_of_experts(const LayerWeights& layer, int n) {
    const auto& s = shapes_;
    const int experts = h_.n_experts, used = h_.n_experts_used;
    const float* normed = normed_.as<float>();
    activations_.quantize(normed, n, s.d_model, pool_);
    kernels::matmul(layer.router, activations_, router_logits_.as<float>(), experts, pool_);
    // routed[e]: (token, weight) of the rows expert e takes.
    routed_.resize(experts);
    for (auto& list : routed_) list.clear();
    std::vector<float> probs(experts);
    std::vector<int> order(experts);
    for (int t = 0; t < n; ++t) {
      const float* logits = router_logits_.as<float>() + static_cast<size_t>(t) * experts;
      probs.assign(logits, logits + experts);
      for (auto& p : probs)  // a NaN would break the ordering below; it routes nowhere
        if (std::isnan(p)) p = -std::numeric_limits<float>::infinity();
      const float top = *std::max_element(probs.begin(), probs.end());
      // The softmax's sum cancels in the renormalisation. An infinite maximum would make
      // exp's argument NaN: then the infinite logits share the weight (all logits, when every
      // one is -infinity or NaN), as the GPU's route_experts does.
      constexpr float kInfinity = std::numeric_limits<float>::infinity();
      for (auto& p : probs) p = top == -kInfinity ? 1.0f : top == kInfinity ? (p == kInfinity ? 1.0f : 0.0f) : std::exp(p - top);
      for (int e = 0; e < experts; ++e) order[e] = e;
      std::partial_sort(order.begin(), order.begin() + used, order.end(),
                        [&](int a, int b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
      float sum = 0.0f;
      for (int k = 0; k < used; ++k) sum += probs[order[k]];
      for (int k = 0; k < used; ++k) routed_[order[k]].push_back({t, probs[order[k]] / sum});
    }
    float* x = x_.as<float>();
    float* rows = expert_rows_.as<float>();
    for (int e = 0; e < experts; ++e) {
      const auto& list = routed_[e];
      if (list.empty()) continue;
      const int m = static_cast<int>(list.size());
      for (int i = 0; i < m; ++i)
        std::memcpy(rows + static_cast<size_t>(i) * s.d_model, normed + static_cast<size_t>(list[i].token) * s.d_model,
                    sizeof(float) * s.d_model);
      activations_.quantize(rows, m, s.d_model, pool_);
      matmul_group(layer.expert_gate_up[e], gate_up_.as<float>(), 2 * s.ffn);
      kernels::silu_mul(gate_up_.as<float>(), hidden_.as<float>(), m, s.ffn, pool_);
      activations_.quantize(hidden_.as<float>(), m, s.ffn, pool_);
      kernels::matmul(layer.expert_down[e], activations_, projected_.as<float>(), s.d_model, pool_);
      for (int i = 0; i < m; ++i) {
        float* out = x + static_cast<size_t>(list[i].token) * s.d_model;
        const float* y = projected_.as<float>() + static_cast<size_t>(i) * s.d_model;
        for (int j = 0; j < s.d_model; ++j) out[j] += list[i].weight * y[j];
      }
    }
    if (h_.shared_expert_ffn > 0) shared_expert(layer, n);
  }

  // Qwen3.5-MoE's shared expert on every row, scaled by sigmoid(x . shared_gate), added into x_.
  void shared_expert(const LayerWeights& layer, int n) {
    const auto& s = shapes_;
    const int width = h_.shared_expert_ffn;
    const float* normed = normed_.as<float>();
    activations_.quantize(normed, n, s.d_model, pool_);
    matmul_group(layer.shared_gate_up, gate_up_.as<float>(), 2 * width);
    kernels::silu_mul(gate_up_.as<float>(), hidden_.as<float>(), n, width, pool_);
    activations_.quantize(hidden_.as<float>(), n, width, pool_);
    kernels::matmul(layer.shared_down, activations_, projected_.as<float>(), s.d_model, pool_);
    float* x = x_.as<float>();
    for (int t = 0; t < n; ++t) {
      const float* row = normed + static_cast<size_t>(t) * s.d_model;
      float logit = 0.0f;
      for (int j = 0; j < s.d_model; ++j) logit += row[j] * layer.shared_gate[j];
      const float scale = 1.0f / (1.0f + std::exp(-logit));
      const float* y = projected_.as<float>() + static_cast<size_t>(t) * s.d_model;
      float* out = x + static_cast<size_t>(t) * s.d_model;
      for (int j = 0; j < s.d_model; ++j) out[j] += scale * y[j];
    }
  }

  static void add_into(float* x, const float* delta, size_t count) {
    for (size_t i = 0; i < count; ++i) x[i] += delta[i];
  }

  const gguf::File& file_;
  Shapes shapes_;
  Hyperparameters h_;
  kernels::ThreadPool pool_;
  ModelInfo info_;
  const gguf::TensorInfo* embedding_ = nullptr;
  size_t embedding_row_bytes_ = 0;
  std::vector<LayerWeights> layers_;
  std::vector<float> output_norm_;
  PackedWeight output_;
  kernels::KvHeadLayout head_layout_;
  size_t layer_block_bytes_ = 0;  // one block's records of one layer (all kv heads)
  int kv_blocks_ = 0;
  std::unique_ptr<kernels::LazyMemory> kv_pool_;  // [layer][kv head][block] records
  std::vector<float> cos_, sin_;
  AlignedBuffer x_, normed_, qkv_, attn_, projected_, gate_up_, hidden_, logits_;
  std::vector<kernels::AttentionArgs> attention_args_;
  std::vector<kernels::DeltaNetSequence> delta_sequences_;
  AlignedBuffer attn_gate_;       // Qwen3.5: [tokens][q_width], each head's output gate
  AlignedBuffer mixed_;           // Qwen3.5: [tokens][mixed_width], a DeltaNet layer's in-projection
  int kv_layers_ = 0;             // layers with attention (all but a hybrid's recurrent ones)
  std::unique_ptr<kernels::LazyMemory> states_;  // a hybrid's recurrent states, per slot
  std::unique_ptr<kernels::LazyMemory> snapshots_;  // and its snapshots of them
  std::vector<int> snapshot_positions_;             // the tokens each snapshot's state has seen (-1: none)
  std::vector<int> state_positions_;             // the tokens each slot's state has seen (-1: unknown)
  std::unique_ptr<kernels::LazyMemory> rewinds_;  // per slot: its state before a verify slice, and the slice's rows
  std::vector<int> rewind_from_;                  // the position that state is at (-1: no rewind possible)
  std::vector<int> rewind_tokens_;                // the verify slice's tokens
  AlignedBuffer expert_rows_;     // the rows routed to one expert, gathered
  AlignedBuffer router_logits_;   // [tokens][experts]
  struct Routed {
    int token;
    float weight;
  };
  std::vector<std::vector<Routed>> routed_;  // per expert, the rows of this layer it takes
  std::vector<float> whole_;         // the last pass's whole rows when some slices were best_only
  std::vector<int> tap_of_layer_;    // per layer: its index among the hidden taps (-1: not tapped)
  int taps_ = 0;
  std::vector<float> tapped_;        // the last pass's taps, [tokens][taps][d_model]
  std::vector<TokenLogit> best_;     // their best tokens
  std::vector<size_t> best_rows_;    // and where their rows lie in logits_
  kernels::QuantizedActivations activations_;
};

bool matches(const RuntimeShapes& s, auto exact) {
  return s.n_layers == exact.n_layers && s.d_model == exact.d_model && s.n_heads == exact.n_heads &&
         s.n_kv_heads == exact.n_kv_heads && s.head_dim == exact.head_dim && s.ffn == exact.ffn &&
         s.vocab == exact.vocab;
}

}  // namespace

MemoryNeeds estimate_llama_memory(const gguf::File& file, KvType kv_type) {
  const Hyperparameters h = read_hyperparameters(file);
  const auto& s = h.shapes;
  const int q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  MemoryNeeds needs;
  auto packed = [&](const std::string& name, int rows, int cols) {
    needs.weight_bytes += kernels::packed_weight_bytes(weight(file, name, rows, cols).type, rows, cols);
  };
  const auto& d = h.delta_net;
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = layer_prefix(l);
    if (h.hybrid() && h.recurrent[l]) {
      needs.weight_bytes += packed_group_bytes(cpu_delta_net_in_projection(file, p, d, s.d_model));
      packed(p + "ssm_out.weight", s.d_model, d.value_width());
      needs.weight_bytes += sizeof(float) * (static_cast<size_t>(d.conv_channels()) * d.conv_kernel + 2 * d.v_heads + d.head_v);
    } else {
      packed(p + "attn_q.weight", h.hybrid() ? 2 * q : q, s.d_model);  // Qwen3.5: [q | gate] per head
      packed(p + "attn_k.weight", kv, s.d_model);
      packed(p + "attn_v.weight", kv, s.d_model);
      packed(p + "attn_output.weight", s.d_model, q);
    }
    if (h.n_experts > 0) {
      auto experts = [&](const std::string& name, int rows, int cols) {
        const auto& sources = expert_weights(file, name, h.n_experts, rows, cols);
        needs.weight_bytes += kernels::packed_weight_bytes(sources[0].type, rows, cols) * sources.size();
      };
      if (file.find_tensor(p + "ffn_gate_up_exps.weight")) {
        experts(p + "ffn_gate_up_exps.weight", 2 * s.ffn, s.d_model);
      } else {
        experts(p + "ffn_gate_exps.weight", s.ffn, s.d_model);
        experts(p + "ffn_up_exps.weight", s.ffn, s.d_model);
      }
      experts(p + "ffn_down_exps.weight", s.d_model, s.ffn);
      packed(p + "ffn_gate_inp.weight", h.n_experts, s.d_model);  // the router
      if (h.shared_expert_ffn > 0) {
        packed(p + "ffn_gate_shexp.weight", h.shared_expert_ffn, s.d_model);
        packed(p + "ffn_up_shexp.weight", h.shared_expert_ffn, s.d_model);
        packed(p + "ffn_down_shexp.weight", s.d_model, h.shared_expert_ffn);
        needs.weight_bytes += sizeof(float) * s.d_model;
      }
    } else {
      packed(p + "ffn_gate.weight", s.ffn, s.d_model);
      packed(p + "ffn_up.weight", s.ffn, s.d_model);
      packed(p + "ffn_down.weight", s.d_model, s.ffn);
    }
    needs.weight_bytes += 2 * sizeof(float) * s.d_model;  // norms
  }
  const bool tied = file.find_tensor("output.weight") == nullptr;
  packed(tied ? "token_embd.weight" : "output.weight", s.vocab, s.d_model);
  needs.mapped_bytes = file.tensor("token_embd.weight").n_bytes;  // rows are read at lookup
  needs.kv_bytes_per_block =
      kernels::KvHeadLayout{kv_type, s.head_dim}.bytes() * s.n_kv_heads * h.attention_layer_count();
  needs.recurrent_state_bytes = h.recurrent_state_bytes();
  needs.draft_rewind_bytes = draft_rewind_bytes(h);
  const int widest_ffn = std::max(s.ffn, h.shared_expert_ffn);
  const size_t floats_per_token = 2 * s.d_model + (q + 2 * kv) + q + s.d_model + 3 * widest_ffn +
                                  (h.n_experts > 0 ? s.d_model + h.n_experts : 0) +  // gathered rows, router logits
                                  (h.hybrid() ? 2 * q + d.mixed_width() + d.value_width() : 0);  // gates, DeltaNet rows
  needs.activation_bytes = kMaxBatchTokens * (floats_per_token * sizeof(float) + std::max(s.d_model, widest_ffn) * 2) +
                           kMaxBatchSequences * sizeof(float) * s.vocab;  // logits, a row per sequence
  needs.native_context = h.native_context;
  return needs;
}

std::unique_ptr<Model> load_llama(const gguf::File& file, const LoadOptions& options) {
  Hyperparameters h = read_hyperparameters(file);
  fit_rope_to_context(h, options.max_context);
  if (h.architecture == "llama" && matches(h.shapes, SmolLM2_135M{}))
    return std::make_unique<LlamaModel<SmolLM2_135M>>(file, h, options);
  if (h.architecture == "qwen2" && matches(h.shapes, Qwen25Coder_1_5B{}))
    return std::make_unique<LlamaModel<Qwen25Coder_1_5B>>(file, h, options);
  return std::make_unique<LlamaModel<RuntimeShapes>>(file, h, options);
}

}  // namespace splash::model::llama
