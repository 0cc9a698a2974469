#include "model/llama/llama_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_formats.h"
#include "model/llama/smollm2_shapes.h"

namespace splash::model::llama {
namespace {

using kernels::AlignedBuffer;
using kernels::PackedWeight;
using kernels::WeightSource;

// Tokens processed per forward chunk: bounds the scratch memory of long prompts.
constexpr int kChunkTokens = 512;

struct Hyperparameters {
  std::string architecture;
  RuntimeShapes shapes;
  int native_context = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  // The family's variants: Qwen2 adds q/k/v biases, Qwen3 normalises q and k per head; both
  // rotate the two halves of a head (NEOX RoPE) where llama GGUFs rotate adjacent pairs.
  bool neox_rope = false;
  bool qkv_bias = false;
  bool qk_norm = false;
};

Hyperparameters read_hyperparameters(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  Hyperparameters h;
  h.architecture = arch;
  h.neox_rope = arch == "qwen2" || arch == "qwen3";
  h.qkv_bias = arch == "qwen2";
  h.qk_norm = arch == "qwen3";
  h.shapes.n_layers = static_cast<int>(file.get_uint(key("block_count")));
  h.shapes.d_model = static_cast<int>(file.get_uint(key("embedding_length")));
  h.shapes.ffn = static_cast<int>(file.get_uint(key("feed_forward_length")));
  h.shapes.n_heads = static_cast<int>(file.get_uint(key("attention.head_count")));
  h.shapes.n_kv_heads = static_cast<int>(file.opt_uint(key("attention.head_count_kv")).value_or(h.shapes.n_heads));
  h.native_context = static_cast<int>(file.get_uint(key("context_length")));
  h.rope_base = file.opt_float(key("rope.freq_base")).value_or(10000.0f);
  h.rms_eps = file.opt_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5f);
  const auto& embedding = file.tensor("token_embd.weight");
  if (embedding.dims.size() != 2) fail("{}: token_embd.weight must be 2-dimensional", file.path());
  h.shapes.vocab = static_cast<int>(embedding.dims[1]);
  auto& s = h.shapes;
  if (s.n_layers <= 0 || s.n_layers > 512 || s.d_model <= 0 || s.d_model > 65536 || s.ffn <= 0 || s.ffn > 262144 ||
      s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0 || s.vocab <= 0 || h.native_context <= 0)
    fail("{}: inconsistent model hyperparameters", file.path());
  // Qwen3 states its head size; it need not be d_model / n_heads.
  const auto key_length = file.opt_uint(key("attention.key_length"));
  const auto value_length = file.opt_uint(key("attention.value_length"));
  if (key_length && value_length && *key_length != *value_length)
    fail("{}: different key and value head sizes are not supported", file.path());
  if (!key_length && s.d_model % s.n_heads != 0) fail("{}: d_model is not a multiple of the head count", file.path());
  s.head_dim = key_length ? static_cast<int>(*key_length) : s.d_model / s.n_heads;
  if (auto rope_dims = file.opt_uint(key("rope.dimension_count")); rope_dims && static_cast<int>(*rope_dims) != s.head_dim)
    fail("{}: partial rotary embeddings ({} of {} dims) are not supported", file.path(), *rope_dims, s.head_dim);
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256)
    fail("{}: head size {} is not supported (64, 128, 256)", file.path(), s.head_dim);
  if (s.d_model % 32 != 0 || s.ffn % 32 != 0) fail("{}: widths must be multiples of 32", file.path());
  return h;
}

// A tensor of the file, checked against the shape the architecture expects.
WeightSource weight(const gguf::File& file, const std::string& name, int rows, int cols) {
  const auto& t = file.tensor(name);
  if (t.dims.size() != 2 || static_cast<int>(t.dims[0]) != cols || static_cast<int>(t.dims[1]) != rows)
    fail("{}: tensor '{}' has shape [{}], expected [{}, {}]", file.path(), name, fmt::join(t.dims, ", "), cols, rows);
  if (!kernels::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' has type {}, which has no CPU kernel (supported: F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, "
         "Q4_K, Q6_K)",
         file.path(), name, type_name(t.type));
  return {t.type, t.data, rows, cols};
}

std::vector<float> vector_weight(const gguf::File& file, const std::string& name, int n) {
  const auto& t = file.tensor(name);
  if (t.n_elements != static_cast<uint64_t>(n) || t.type != GgmlType::F32)
    fail("{}: tensor '{}' must be F32 with {} elements", file.path(), name, n);
  std::vector<float> out(n);
  std::memcpy(out.data(), t.data, sizeof(float) * n);
  return out;
}

// Stacks matrices into one packed weight when their types allow, else packs them apart.
std::vector<PackedWeight> pack_group(std::initializer_list<WeightSource> sources) {
  std::vector<WeightSource> list(sources);
  const bool same_type = std::all_of(list.begin(), list.end(), [&](const WeightSource& s) { return s.type == list[0].type; });
  std::vector<PackedWeight> packed;
  if (same_type) {
    packed.push_back(kernels::pack_weights(list));
  } else {
    for (const auto& source : list) packed.push_back(kernels::pack_weight(source));
  }
  return packed;
}

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> qkv_bias;        // Qwen2: [q | k | v] biases, else empty
  std::vector<float> q_norm, k_norm;  // Qwen3: per-head RMSNorm weights [head_dim], else empty
  std::vector<PackedWeight> qkv;      // one stacked [q; k; v] matrix, or three
  PackedWeight attn_output;
  std::vector<PackedWeight> gate_up;  // one stacked [gate; up] matrix, or two
  PackedWeight down;
};

template <typename Shapes>
class LlamaModel final : public Model {
 public:
  LlamaModel(const gguf::File& file, const Hyperparameters& h, const LoadOptions& options)
      : file_(file), shapes_(make_shapes(h)), h_(h), pool_(options.threads) {
    const auto& s = shapes_;
    info_.architecture = file.get_string("general.architecture");
    info_.name = file.opt_string("general.name").value_or("unnamed");
    info_.n_layers = s.n_layers;
    info_.d_model = s.d_model;
    info_.n_heads = s.n_heads;
    info_.n_kv_heads = s.n_kv_heads;
    info_.head_dim = s.head_dim;
    info_.ffn = s.ffn;
    info_.vocab = s.vocab;
    info_.native_context = h.native_context;
    info_.context = options.max_context > 0 ? options.max_context : h.native_context;
    info_.isa = kernels::matmul_isa_name();
    info_.threads = pool_.size();
    info_.kernel_shapes = Shapes::name ? fmt::format("compile-time shapes of {}", Shapes::name)
                                       : std::string("run-time shapes (no specialised kernels for this model)");
    load_weights();
    allocate_cache();
  }

  const ModelInfo& info() const override { return info_; }
  int position() const override { return position_; }
  void truncate(int n) override {
    if (n < 0 || n > position_) fail("truncate({}) outside the sequence of {} tokens", n, position_);
    position_ = n;
  }

  std::span<const float> forward(std::span<const int32_t> tokens) override {
    if (tokens.empty()) fail("forward: no tokens");
    if (position_ + static_cast<int64_t>(tokens.size()) > info_.context)
      fail("the sequence of {} tokens does not fit the context of {} tokens", position_ + tokens.size(), info_.context);
    for (int32_t id : tokens)
      if (id < 0 || id >= shapes_.vocab) fail("token id {} is outside the vocabulary of {}", id, shapes_.vocab);
    for (size_t start = 0; start < tokens.size(); start += kChunkTokens) {
      const size_t count = std::min<size_t>(kChunkTokens, tokens.size() - start);
      forward_chunk(tokens.subspan(start, count), start + count == tokens.size());
    }
    return {logits_.as<float>(), static_cast<size_t>(shapes_.vocab)};
  }

 private:
  static Shapes make_shapes(const Hyperparameters& h) {
    if constexpr (std::is_same_v<Shapes, RuntimeShapes>) return h.shapes;
    else return Shapes{};
  }

  int q_width() const { return shapes_.n_heads * shapes_.head_dim; }
  int kv_width() const { return shapes_.n_kv_heads * shapes_.head_dim; }
  int qkv_width() const { return q_width() + 2 * kv_width(); }

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
      WeightSource q, k, v, o, gate, up, down;
    };
    std::vector<LayerSources> sources(s.n_layers);
    layers_.resize(s.n_layers);
    for (int l = 0; l < s.n_layers; ++l) {
      const std::string p = fmt::format("blk.{}.", l);
      layers_[l].attn_norm = vector_weight(file_, p + "attn_norm.weight", s.d_model);
      layers_[l].ffn_norm = vector_weight(file_, p + "ffn_norm.weight", s.d_model);
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
      sources[l] = {weight(file_, p + "attn_q.weight", q_width(), s.d_model),
                    weight(file_, p + "attn_k.weight", kv_width(), s.d_model),
                    weight(file_, p + "attn_v.weight", kv_width(), s.d_model),
                    weight(file_, p + "attn_output.weight", s.d_model, q_width()),
                    weight(file_, p + "ffn_gate.weight", s.ffn, s.d_model),
                    weight(file_, p + "ffn_up.weight", s.ffn, s.d_model),
                    weight(file_, p + "ffn_down.weight", s.d_model, s.ffn)};
    }
    std::vector<std::exception_ptr> errors(s.n_layers);
    pool_.run(s.n_layers, [&](int l) {
      try {
        auto& layer = layers_[l];
        const auto& src = sources[l];
        layer.qkv = pack_group({src.q, src.k, src.v});
        layer.attn_output = kernels::pack_weight(src.o);
        layer.gate_up = pack_group({src.gate, src.up});
        layer.down = kernels::pack_weight(src.down);
      } catch (...) {
        errors[l] = std::current_exception();  // never let an exception escape a pool thread
      }
    });
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
    for (const auto& layer : layers_) {
      for (const auto& w : layer.qkv) info_.packed_weight_bytes += w.bytes();
      for (const auto& w : layer.gate_up) info_.packed_weight_bytes += w.bytes();
      info_.packed_weight_bytes += layer.attn_output.bytes() + layer.down.bytes();
    }
    output_norm_ = vector_weight(file_, "output_norm.weight", s.d_model);
    const bool tied = file_.find_tensor("output.weight") == nullptr;
    output_ = kernels::pack_weight(weight(file_, tied ? "token_embd.weight" : "output.weight", s.vocab, s.d_model));
    info_.decode_read_bytes = info_.packed_weight_bytes + output_.bytes();
    info_.packed_weight_bytes += output_.bytes() + (tied ? embedding.n_bytes : 0);
  }

  void allocate_cache() {
    const auto& s = shapes_;
    capacity_ = (info_.context + 15) / 16 * 16;
    const size_t per_layer = static_cast<size_t>(s.n_kv_heads) * capacity_ * s.head_dim;
    keys_.resize(s.n_layers);
    values_.resize(s.n_layers);
    for (int l = 0; l < s.n_layers; ++l) {
      keys_[l].resize(per_layer * sizeof(float));
      values_[l].resize(per_layer * sizeof(float));
    }
    info_.kv_cache_bytes = 2 * per_layer * sizeof(float) * s.n_layers;
    // cos/sin of every (position, frequency) pair, computed in double once.
    const int half = s.head_dim / 2;
    cos_.resize(static_cast<size_t>(capacity_) * half);
    sin_.resize(static_cast<size_t>(capacity_) * half);
    for (int p = 0; p < capacity_; ++p)
      for (int i = 0; i < half; ++i) {
        const double angle = p * std::pow(static_cast<double>(h_.rope_base), -2.0 * i / s.head_dim);
        cos_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
        sin_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
      }
    logits_.resize(static_cast<size_t>(s.vocab) * sizeof(float));
  }

  void ensure_scratch(int n) {
    const auto& s = shapes_;
    auto size = [&](AlignedBuffer& b, size_t floats) { b.resize(floats * sizeof(float)); };
    size(x_, static_cast<size_t>(n) * s.d_model);
    size(normed_, static_cast<size_t>(n) * s.d_model);
    size(qkv_, static_cast<size_t>(n) * qkv_width());
    size(attn_, static_cast<size_t>(n) * q_width());
    size(projected_, static_cast<size_t>(n) * s.d_model);
    size(gate_up_, static_cast<size_t>(n) * 2 * s.ffn);
    size(hidden_, static_cast<size_t>(n) * s.ffn);
  }

  // Runs matrices stacked row-wise (or apart, when their types differ) into one output row.
  void matmul_group(const std::vector<PackedWeight>& group, float* y, int ldy) {
    int column = 0;
    for (const auto& w : group) {
      kernels::matmul(w, activations_, y + column, ldy, pool_);
      column += w.rows;
    }
  }

  void store_kv(int layer, int n, const int* positions) {
    const auto& s = shapes_;
    float* keys = keys_[layer].as<float>();
    float* values = values_[layer].as<float>();
    const float* qkv = qkv_.as<float>();
    for (int t = 0; t < n; ++t) {
      const int p = positions[t];
      const float* k = qkv + static_cast<size_t>(t) * qkv_width() + q_width();
      const float* v = k + kv_width();
      for (int h = 0; h < s.n_kv_heads; ++h) {
        float* tile = keys + (static_cast<size_t>(h) * (capacity_ / 16) + p / 16) * s.head_dim * 16;
        for (int d = 0; d < s.head_dim; ++d) tile[d * 16 + p % 16] = k[h * s.head_dim + d];
        std::memcpy(values + (static_cast<size_t>(h) * capacity_ + p) * s.head_dim, v + h * s.head_dim,
                    sizeof(float) * s.head_dim);
      }
    }
  }

  void forward_chunk(std::span<const int32_t> tokens, bool want_logits) {
    const auto& s = shapes_;
    const int n = static_cast<int>(tokens.size());
    ensure_scratch(n);
    float* x = x_.as<float>();
    for (int t = 0; t < n; ++t)
      kernels::dequantize_row(embedding_->type, embedding_->data + embedding_row_bytes_ * tokens[t],
                              x + static_cast<size_t>(t) * s.d_model, s.d_model);
    std::vector<int> positions(n);
    for (int t = 0; t < n; ++t) positions[t] = position_ + t;

    for (int l = 0; l < s.n_layers; ++l) {
      const auto& layer = layers_[l];
      kernels::rms_norm(x, layer.attn_norm.data(), normed_.as<float>(), n, s.d_model, h_.rms_eps, pool_);
      activations_.quantize(normed_.as<float>(), n, s.d_model, pool_);
      matmul_group(layer.qkv, qkv_.as<float>(), qkv_width());
      float* qkv = qkv_.as<float>();
      if (!layer.qkv_bias.empty())
        for (int t = 0; t < n; ++t) add_into(qkv + static_cast<size_t>(t) * qkv_width(), layer.qkv_bias.data(), qkv_width());
      if (!layer.q_norm.empty())
        for (int t = 0; t < n; ++t) {  // each head's q and k normalised over head_dim, in place
          float* row = qkv + static_cast<size_t>(t) * qkv_width();
          kernels::rms_norm(row, layer.q_norm.data(), row, s.n_heads, s.head_dim, h_.rms_eps, pool_);
          kernels::rms_norm(row + q_width(), layer.k_norm.data(), row + q_width(), s.n_kv_heads, s.head_dim, h_.rms_eps,
                            pool_);
        }
      const auto rope = h_.neox_rope ? kernels::rope_neox : kernels::rope_adjacent;
      rope(qkv, n, qkv_width(), s.n_heads, s.head_dim, positions.data(), cos_.data(), sin_.data());
      rope(qkv + q_width(), n, qkv_width(), s.n_kv_heads, s.head_dim, positions.data(), cos_.data(), sin_.data());
      store_kv(l, n, positions.data());
      kernels::AttentionArgs args{qkv_.as<float>(), qkv_width(), keys_[l].as<float>(), values_[l].as<float>(),
                                  attn_.as<float>(), n, position_, s.n_heads, s.n_kv_heads, s.head_dim, capacity_,
                                  1.0f / std::sqrt(static_cast<float>(s.head_dim))};
      kernels::attention(args, pool_);
      activations_.quantize(attn_.as<float>(), n, q_width(), pool_);
      kernels::matmul(layer.attn_output, activations_, projected_.as<float>(), s.d_model, pool_);
      add_into(x, projected_.as<float>(), static_cast<size_t>(n) * s.d_model);

      kernels::rms_norm(x, layer.ffn_norm.data(), normed_.as<float>(), n, s.d_model, h_.rms_eps, pool_);
      activations_.quantize(normed_.as<float>(), n, s.d_model, pool_);
      matmul_group(layer.gate_up, gate_up_.as<float>(), 2 * s.ffn);
      kernels::silu_mul(gate_up_.as<float>(), hidden_.as<float>(), n, s.ffn, pool_);
      activations_.quantize(hidden_.as<float>(), n, s.ffn, pool_);
      kernels::matmul(layer.down, activations_, projected_.as<float>(), s.d_model, pool_);
      add_into(x, projected_.as<float>(), static_cast<size_t>(n) * s.d_model);
    }
    position_ += n;
    if (!want_logits) return;
    // Only the last position's logits are needed to pick the next token.
    const float* last = x + static_cast<size_t>(n - 1) * s.d_model;
    kernels::rms_norm(last, output_norm_.data(), normed_.as<float>(), 1, s.d_model, h_.rms_eps, pool_);
    activations_.quantize(normed_.as<float>(), 1, s.d_model, pool_);
    kernels::matmul(output_, activations_, logits_.as<float>(), s.vocab, pool_);
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
  int capacity_ = 0;
  int position_ = 0;
  std::vector<AlignedBuffer> keys_, values_;
  std::vector<float> cos_, sin_;
  AlignedBuffer x_, normed_, qkv_, attn_, projected_, gate_up_, hidden_, logits_;
  kernels::QuantizedActivations activations_;
};

bool matches(const RuntimeShapes& s, auto exact) {
  return s.n_layers == exact.n_layers && s.d_model == exact.d_model && s.n_heads == exact.n_heads &&
         s.n_kv_heads == exact.n_kv_heads && s.head_dim == exact.head_dim && s.ffn == exact.ffn &&
         s.vocab == exact.vocab;
}

}  // namespace

MemoryNeeds estimate_llama_memory(const gguf::File& file) {
  const Hyperparameters h = read_hyperparameters(file);
  const auto& s = h.shapes;
  const int q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  MemoryNeeds needs;
  auto packed = [&](const std::string& name, int rows, int cols) {
    needs.weight_bytes += kernels::packed_weight_bytes(weight(file, name, rows, cols).type, rows, cols);
  };
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    packed(p + "attn_q.weight", q, s.d_model);
    packed(p + "attn_k.weight", kv, s.d_model);
    packed(p + "attn_v.weight", kv, s.d_model);
    packed(p + "attn_output.weight", s.d_model, q);
    packed(p + "ffn_gate.weight", s.ffn, s.d_model);
    packed(p + "ffn_up.weight", s.ffn, s.d_model);
    packed(p + "ffn_down.weight", s.d_model, s.ffn);
    needs.weight_bytes += 2 * sizeof(float) * s.d_model;  // norms
  }
  const bool tied = file.find_tensor("output.weight") == nullptr;
  packed(tied ? "token_embd.weight" : "output.weight", s.vocab, s.d_model);
  needs.mapped_bytes = file.tensor("token_embd.weight").n_bytes;  // rows are read at lookup
  needs.kv_bytes_per_token = 2 * sizeof(float) * static_cast<size_t>(s.n_layers) * kv;
  const size_t floats_per_token = 2 * s.d_model + (q + 2 * kv) + q + s.d_model + 2 * s.ffn + s.ffn;
  needs.activation_bytes = kChunkTokens * (floats_per_token * sizeof(float) + std::max(s.d_model, s.ffn) * 2) +
                           sizeof(float) * s.vocab;
  needs.native_context = h.native_context;
  return needs;
}

std::unique_ptr<Model> load_llama(const gguf::File& file, const LoadOptions& options) {
  const Hyperparameters h = read_hyperparameters(file);
  if (h.architecture == "llama" && matches(h.shapes, SmolLM2_135M{}))
    return std::make_unique<LlamaModel<SmolLM2_135M>>(file, h, options);
  return std::make_unique<LlamaModel<RuntimeShapes>>(file, h, options);
}

}  // namespace splash::model::llama
