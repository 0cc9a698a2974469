#include "model/llama/llama_hparams.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace splash::model::llama {

namespace {

// llama.cpp's keys and their reading: rope.scaling.type (none, linear, yarn; a file without
// it but with a factor is linear), the factor as rope.scaling.factor or the older
// rope.scale_linear, .attn_factor (a multiplier on cos and sin), .original_context_length,
// .yarn_beta_fast and .yarn_beta_slow (0 or absent: 32 and 1, as transformers defaults them).
RopeScaling read_rope_scaling(const gguf::File& file, const std::string& arch, int native_context) {
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  const std::string type = file.opt_string(key("rope.scaling.type")).value_or("linear");
  const double factor = file.opt_float(key("rope.scaling.factor")).value_or(
      file.opt_float(key("rope.scale_linear")).value_or(1.0f));
  RopeScaling scaling;
  if (type == "none") return scaling;
  if (type == "linear") {
    scaling.kind = RopeScaling::Kind::Linear;
  } else if (type == "yarn") {
    scaling.kind = RopeScaling::Kind::Yarn;
    const uint64_t original = file.opt_uint(key("rope.scaling.original_context_length")).value_or(native_context);
    if (original == 0 || original > (1u << 24))
      fail("{}: RoPE scaling's original context length {} is out of range", file.path(), original);
    scaling.original_context = static_cast<int>(original);
    const float fast = file.opt_float(key("rope.scaling.yarn_beta_fast")).value_or(0.0f);
    const float slow = file.opt_float(key("rope.scaling.yarn_beta_slow")).value_or(0.0f);
    scaling.beta_fast = fast != 0.0f ? fast : 32.0;
    scaling.beta_slow = slow != 0.0f ? slow : 1.0;
  } else {
    fail("{}: RoPE scaling '{}' is not supported (none, linear, yarn)", file.path(), type);
  }
  if (!(factor >= 1.0 && factor <= 1024.0))
    fail("{}: RoPE scaling factor {} is out of range (1 to 1024)", file.path(), factor);
  scaling.factor = factor;
  scaling.attention_multiplier = file.opt_float(key("rope.scaling.attn_factor")).value_or(1.0f);
  if (!(scaling.attention_multiplier > 0.0 && scaling.attention_multiplier <= 16.0))
    fail("{}: RoPE scaling's attention factor {} is out of range", file.path(), scaling.attention_multiplier);
  if (factor == 1.0 && scaling.attention_multiplier == 1.0) return RopeScaling{};
  return scaling;
}

// The hybrids' linear-attention layers: which they are (attention.recurrent_layers, else all
// but every full_attention_interval-th) and their sizes, as llama.cpp's converter writes them.
void read_delta_net(const gguf::File& file, const std::string& arch, Hyperparameters& h) {
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  const int layers = h.shapes.n_layers;
  if (file.find(key("attention.recurrent_layers"))) {
    const auto flags = file.get_bool_array(key("attention.recurrent_layers"));
    if (static_cast<int>(flags.size()) < layers)  // MTP blocks may follow: they are attention
      fail("{}: attention.recurrent_layers has {} entries for {} layers", file.path(), flags.size(), layers);
    h.recurrent.assign(flags.begin(), flags.begin() + layers);
  } else {
    const uint64_t interval = file.opt_uint(key("full_attention_interval")).value_or(4);
    if (interval == 0 || interval > 1024) fail("{}: full_attention_interval {} is out of range", file.path(), interval);
    for (int l = 0; l < layers; ++l) h.recurrent.push_back((l + 1) % interval != 0);
  }
  auto& d = h.delta_net;
  d.conv_kernel = static_cast<int>(file.get_uint(key("ssm.conv_kernel")));
  d.head_k = static_cast<int>(file.get_uint(key("ssm.state_size")));
  d.k_heads = static_cast<int>(file.get_uint(key("ssm.group_count")));
  d.v_heads = static_cast<int>(file.get_uint(key("ssm.time_step_rank")));
  const uint64_t inner = file.get_uint(key("ssm.inner_size"));
  // Qwen3.5's converter reorders the value heads tiled; Qwen3-Next's keeps the model's grouped
  // order (llama.cpp repeats its keys interleaved for it).
  d.tiled_key_heads = arch != "qwen3next";
  if (d.conv_kernel < 2 || d.conv_kernel > 8 || d.k_heads <= 0 || d.k_heads > 1024 || d.v_heads <= 0 ||
      d.v_heads > 1024 || d.v_heads % d.k_heads != 0 || inner % d.v_heads != 0 || inner / d.v_heads > 1024)
    fail("{}: inconsistent Gated DeltaNet sizes (conv kernel {}, {} key heads, {} value heads, inner size {})",
         file.path(), d.conv_kernel, d.k_heads, d.v_heads, inner);
  d.head_v = static_cast<int>(inner / d.v_heads);
  // The delta rule's kernel works on heads of 16-float vectors; the projections on 32-wide rows.
  if (d.head_k % 16 != 0 || d.head_k > 256 || d.head_v % 16 != 0 || d.value_width() % 32 != 0)
    fail("{}: Gated DeltaNet heads of {} keys and {} values are not supported (multiples of 16, at most 256 keys)",
         file.path(), d.head_k, d.head_v);
}

}  // namespace

int Hyperparameters::recurrent_layer_count() const {
  return static_cast<int>(std::count(recurrent.begin(), recurrent.end(), true));
}

void fit_rope_to_context(Hyperparameters& h, int context) {
  // Qwen's recipe (the Qwen2.5 7B-72B and Qwen3 model cards): YaRN over the 32K pre-training
  // window (Qwen3 files say 40960, its post-training window), at most factor 4. The small
  // Qwen2.5 cards state 32K without it; asked explicitly for more, they get the family's
  // recipe too, and the summary says so.
  constexpr int kQwenOriginal = 32768, kQwenMaxFactor = 4;
  const bool qwen = h.architecture == "qwen2" || h.architecture == "qwen3" || h.architecture == "qwen3moe";
  if (context <= h.rope_window || h.rope_scaling.kind != RopeScaling::Kind::None || !qwen) return;
  const int original = std::min(h.native_context, kQwenOriginal);
  const int64_t reach = std::min<int64_t>(context, static_cast<int64_t>(kQwenMaxFactor) * original);
  h.rope_scaling.kind = RopeScaling::Kind::Yarn;
  h.rope_scaling.original_context = original;
  h.rope_scaling.factor = static_cast<double>(reach) / original;
  h.rope_window = static_cast<int>(reach);
}

Hyperparameters read_hyperparameters(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  Hyperparameters h;
  h.architecture = arch;
  // The hybrids: Qwen3.5's and Qwen3-Next, alike but for the DeltaNet's head order and how
  // its in-projection is stored (llama_model.cpp, delta_net_in_projection).
  const bool hybrid = arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next";
  h.neox_rope = arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe" || hybrid;
  h.qkv_bias = arch == "qwen2";
  h.qk_norm = arch == "qwen3" || arch == "qwen3moe" || hybrid;
  h.shapes.n_layers = static_cast<int>(file.get_uint(key("block_count")));
  // Qwen3.5's multi-token-prediction blocks come after the trunk's (read by speculative
  // decoding, not by the forward pass).
  if (hybrid) h.shapes.n_layers -= static_cast<int>(file.opt_uint(key("nextn_predict_layers")).value_or(0));
  h.shapes.d_model = static_cast<int>(file.get_uint(key("embedding_length")));
  if (arch == "qwen3moe" || arch == "qwen35moe" || arch == "qwen3next") {
    h.n_experts = static_cast<int>(file.get_uint(key("expert_count")));
    h.n_experts_used = static_cast<int>(file.get_uint(key("expert_used_count")));
    h.shapes.ffn = static_cast<int>(file.get_uint(key("expert_feed_forward_length")));
    if (h.n_experts <= 0 || h.n_experts > 1024 || h.n_experts_used <= 0 || h.n_experts_used > h.n_experts)
      fail("{}: inconsistent expert counts ({} experts, {} used per token)", file.path(), h.n_experts,
           h.n_experts_used);
    if (arch == "qwen35moe" || arch == "qwen3next") {  // and a shared expert beside the routed ones
      h.shared_expert_ffn = static_cast<int>(file.opt_uint(key("expert_shared_feed_forward_length"))
                                                 .value_or(file.opt_uint(key("feed_forward_length")).value_or(0)));
      if (h.shared_expert_ffn <= 0 || h.shared_expert_ffn > 262144 || h.shared_expert_ffn % 32 != 0)
        fail("{}: shared expert width {} is not supported", file.path(), h.shared_expert_ffn);
    }
  } else {
    h.shapes.ffn = static_cast<int>(file.get_uint(key("feed_forward_length")));
  }
  h.shapes.n_heads = static_cast<int>(file.get_uint(key("attention.head_count")));
  h.shapes.n_kv_heads = static_cast<int>(file.opt_uint(key("attention.head_count_kv")).value_or(h.shapes.n_heads));
  h.native_context = static_cast<int>(file.get_uint(key("context_length")));
  h.rope_base = file.opt_float(key("rope.freq_base")).value_or(10000.0f);
  h.rope_scaling = read_rope_scaling(file, arch, h.native_context);
  h.rope_window = h.native_context;
  // A file that states YaRN may give its pre-training window as context_length or the
  // stretched one; it reaches whichever is larger. A linear factor is taken as already in
  // context_length (position interpolation is fine-tuned at the stretched window).
  if (h.rope_scaling.kind == RopeScaling::Kind::Yarn)
    h.rope_window = static_cast<int>(std::clamp<double>(h.rope_scaling.factor * h.rope_scaling.original_context,
                                                        h.native_context, 1 << 30));
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
  h.rope_dims = static_cast<int>(file.opt_uint(key("rope.dimension_count")).value_or(s.head_dim));
  if (h.rope_dims != s.head_dim && !hybrid)
    fail("{}: partial rotary embeddings ({} of {} dims) are not supported", file.path(), h.rope_dims, s.head_dim);
  if (h.rope_dims <= 0 || h.rope_dims > s.head_dim || h.rope_dims % 2 != 0)
    fail("{}: {} rotary dims of a {}-dim head", file.path(), h.rope_dims, s.head_dim);
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256)
    fail("{}: head size {} is not supported (64, 128, 256)", file.path(), s.head_dim);
  if (s.d_model % 32 != 0 || s.ffn % 32 != 0) fail("{}: widths must be multiples of 32", file.path());
  if (hybrid) read_delta_net(file, arch, h);
  return h;
}

const gguf::TensorInfo& matrix_tensor(const gguf::File& file, const std::string& name, int rows, int cols) {
  const auto& t = file.tensor(name);
  if (t.dims.size() != 2 || static_cast<int>(t.dims[0]) != cols || static_cast<int>(t.dims[1]) != rows)
    fail("{}: tensor '{}' has shape [{}], expected [{}, {}]", file.path(), name, fmt::join(t.dims, ", "), cols, rows);
  return t;
}

const gguf::TensorInfo& matrix_stack_tensor(const gguf::File& file, const std::string& name, int count, int rows,
                                            int cols) {
  const auto& t = file.tensor(name);
  if (t.dims.size() != 3 || static_cast<int>(t.dims[0]) != cols || static_cast<int>(t.dims[1]) != rows ||
      static_cast<int>(t.dims[2]) != count)
    fail("{}: tensor '{}' has shape [{}], expected [{}, {}, {}]", file.path(), name, fmt::join(t.dims, ", "), cols, rows,
         count);
  return t;
}

kernels::WeightSource matrix_source(const gguf::File& file, const std::string& name, int rows, int cols) {
  const auto& t = matrix_tensor(file, name, rows, cols);
  return {t.type, t.data, rows, cols};
}

std::vector<kernels::WeightSource> delta_net_in_projection(const gguf::File& file, const std::string& p,
                                                           const DeltaNetShape& d, int d_model) {
  std::vector<kernels::WeightSource> rows;
  const int per_key = d.v_heads / d.k_heads;  // value heads of a key head's group
  // (the fused tensors' rows are grouped by key head: Qwen3-Next's layout, not Qwen3.5's tiled one)
  for (const char* fused : {"ssm_in.weight", "ssm_ba.weight"})
    if (d.tiled_key_heads && file.find_tensor(p + fused))
      fail("{}: tensor '{}{}' is Qwen3-Next's layout (value heads grouped by key head), not this architecture's",
           file.path(), p, fused);
  if (file.find_tensor(p + "attn_qkv.weight") || !file.find_tensor(p + "ssm_in.weight")) {
    rows.push_back(matrix_source(file, p + "attn_qkv.weight", d.conv_channels(), d_model));
    rows.push_back(matrix_source(file, p + "attn_gate.weight", d.value_width(), d_model));
  } else {
    const int group = 2 * d.head_k + 2 * per_key * d.head_v;
    const kernels::WeightSource qkvz = matrix_source(file, p + "ssm_in.weight", d.k_heads * group, d_model);
    const int part_first[] = {0, d.head_k, 2 * d.head_k, 2 * d.head_k + per_key * d.head_v};
    const int part_rows[] = {d.head_k, d.head_k, per_key * d.head_v, per_key * d.head_v};
    for (int part = 0; part < 4; ++part)
      for (int g = 0; g < d.k_heads; ++g)
        rows.push_back(kernels::row_range(qkvz, g * group + part_first[part], part_rows[part]));
  }
  if (file.find_tensor(p + "ssm_beta.weight") || !file.find_tensor(p + "ssm_ba.weight")) {
    rows.push_back(matrix_source(file, p + "ssm_beta.weight", d.v_heads, d_model));
    rows.push_back(matrix_source(file, p + "ssm_alpha.weight", d.v_heads, d_model));
  } else {
    const kernels::WeightSource ba = matrix_source(file, p + "ssm_ba.weight", 2 * d.v_heads, d_model);
    for (int part = 0; part < 2; ++part)
      for (int g = 0; g < d.k_heads; ++g) rows.push_back(kernels::row_range(ba, 2 * per_key * g + part * per_key, per_key));
  }
  return rows;
}

std::vector<kernels::WeightSource> gated_query_rows(const gguf::File& file, const std::string& p, int n_heads,
                                                    int head_dim, int d_model) {
  const kernels::WeightSource q = matrix_source(file, p + "attn_q.weight", 2 * n_heads * head_dim, d_model);
  std::vector<kernels::WeightSource> rows;
  for (const int part : {0, 1})  // the queries, then the gates
    for (int h = 0; h < n_heads; ++h) rows.push_back(kernels::row_range(q, (2 * h + part) * head_dim, head_dim));
  return rows;
}

std::vector<float> vector_weight(const gguf::File& file, const std::string& name, int n) {
  const auto& t = file.tensor(name);
  if (t.n_elements != static_cast<uint64_t>(n) || t.type != GgmlType::F32)
    fail("{}: tensor '{}' must be F32 with {} elements", file.path(), name, n);
  std::vector<float> out(n);
  std::memcpy(out.data(), t.data, sizeof(float) * n);
  return out;
}

void fill_model_info(const gguf::File& file, const Hyperparameters& h, int max_context, ModelInfo& info) {
  const auto& s = h.shapes;
  info.architecture = h.architecture;
  info.name = file.opt_string("general.name").value_or("unnamed");
  info.n_layers = s.n_layers;
  info.d_model = s.d_model;
  info.n_heads = s.n_heads;
  info.n_kv_heads = s.n_kv_heads;
  info.head_dim = s.head_dim;
  info.ffn = s.ffn;
  info.n_experts = h.n_experts;
  info.n_experts_used = h.n_experts_used;
  info.shared_expert_ffn = h.shared_expert_ffn;
  info.vocab = s.vocab;
  info.native_context = h.native_context;
  info.context = max_context > 0 ? max_context : h.native_context;
  info.rope_window = h.rope_window;
  info.rope_scaling = h.rope_scaling.describe();
}

std::string layer_prefix(int layer) { return fmt::format("blk.{}.", layer); }

}  // namespace splash::model::llama
