#include "model/llama/mtp_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_formats.h"
#include "model/llama/llama_cpu_weights.h"

namespace splash::model::llama {

using kernels::PackedWeight;
using kernels::WeightSource;

// A mixture-of-experts FFN (Qwen3.5-MoE's MTP block is a layer of the model's kind).
struct MtpHead::Experts {
  PackedWeight router;
  std::vector<std::vector<PackedWeight>> gate_up;  // per expert, rows [gate | up]
  std::vector<PackedWeight> down;
  std::vector<PackedWeight> shared_gate_up;  // the shared expert (none: empty)
  PackedWeight shared_down;
  std::vector<float> shared_gate;  // [d_model]
  std::vector<float> router_logits;
};

namespace {

MtpContext& ours(DraftContext& context) { return dynamic_cast<MtpContext&>(context); }
const MtpContext& ours(const DraftContext& context) { return dynamic_cast<const MtpContext&>(context); }

size_t group_bytes(const std::vector<PackedWeight>& group) {
  size_t bytes = 0;
  for (const auto& w : group) bytes += w.bytes();
  return bytes;
}

// A vector of any type the kernels read, as floats.
std::vector<float> any_vector(const gguf::File& file, const std::string& name, int n) {
  const auto& t = file.tensor(name);
  if (t.n_elements != static_cast<uint64_t>(n) || !kernels::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' must be a vector of {} elements", file.path(), name, n);
  std::vector<float> out(n);
  kernels::dequantize_row(t.type, t.data, out.data(), n);
  return out;
}

int mtp_layer(const gguf::File& file, const std::string& arch) {
  const auto blocks = file.opt_uint(arch + ".block_count").value_or(0);
  const auto nextn = file.opt_uint(arch + ".nextn_predict_layers").value_or(0);
  return nextn == 0 || nextn > blocks ? -1 : static_cast<int>(blocks - nextn);
}

}  // namespace

int MtpContext::hidden_end() const {
  return hidden_first_ + static_cast<int>(hidden_.size() / std::max<size_t>(1, row_floats_));
}

bool MtpHead::present(const gguf::File& target) {
  const std::string arch = target.opt_string("general.architecture").value_or("");
  if (arch != "qwen35" && arch != "qwen35moe" && arch != "qwen3next") return false;
  const int layer = mtp_layer(target, arch);
  return layer > 0 && target.find_tensor(layer_prefix(layer) + "nextn.eh_proj.weight") != nullptr;
}

MtpHead::MtpHead(const gguf::File& target, int threads)
    : file_(target), h_(read_hyperparameters(file_)), own_pool_(threads) {
  const gguf::File& file = file_;
  if (!present(file))
    fail("{}: the model has no multi-token-prediction block (Qwen3.5's {}.nextn_predict_layers and blk.N.nextn.*)",
         file.path(), h_.architecture);
  const auto& s = h_.shapes;
  const int d = s.d_model;
  layer_ = mtp_layer(file, h_.architecture);
  if (layer_ != s.n_layers) fail("{}: only one MTP block is supported", file.path());
  taps_ = {s.n_layers - 1};
  const std::string p = layer_prefix(layer_);
  eh_proj_ = kernels::pack_weight(weight(file, p + "nextn.eh_proj.weight", d, 2 * d));
  enorm_ = vector_weight(file, p + "nextn.enorm.weight", d);
  hnorm_ = vector_weight(file, p + "nextn.hnorm.weight", d);
  output_norm_ = vector_weight(file, "output_norm.weight", d);
  head_norm_ = file.find_tensor(p + "nextn.shared_head_norm.weight")
                   ? vector_weight(file, p + "nextn.shared_head_norm.weight", d)
                   : output_norm_;
  attn_norm_ = vector_weight(file, p + "attn_norm.weight", d);
  post_norm_ = vector_weight(file, p + "post_attention_norm.weight", d);
  q_norm_ = vector_weight(file, p + "attn_q_norm.weight", s.head_dim);
  k_norm_ = vector_weight(file, p + "attn_k_norm.weight", s.head_dim);
  // [q | k | v | gate]: the gated query's rows (each head's query and gate side by side in
  // the file) apart, so the heads' queries and the keys lie together for the norms and RoPE.
  auto q_and_gate = gated_query_rows(file, p, s.n_heads, s.head_dim, d);
  check_cpu_type(file, file.tensor(p + "attn_q.weight"), p + "attn_q.weight");
  const WeightSource k = weight(file, p + "attn_k.weight", kv_width(), d);
  const WeightSource v = weight(file, p + "attn_v.weight", kv_width(), d);
  std::vector<WeightSource> rows(q_and_gate.begin(), q_and_gate.begin() + s.n_heads);
  rows.push_back(k);
  rows.push_back(v);
  rows.insert(rows.end(), q_and_gate.begin() + s.n_heads, q_and_gate.end());
  qkv_gate_ = pack_group(rows);
  kv_ = pack_group({k, v});
  attn_output_ = kernels::pack_weight(weight(file, p + "attn_output.weight", d, q_width()));
  if (h_.n_experts > 0) {
    experts_ = std::make_unique<Experts>();
    auto& x = *experts_;
    x.router = kernels::pack_weight(router_weight(file, p + "ffn_gate_inp.weight", h_.n_experts, d));
    std::vector<WeightSource> gate, up, gate_up;
    if (file.find_tensor(p + "ffn_gate_up_exps.weight")) {
      gate_up = expert_weights(file, p + "ffn_gate_up_exps.weight", h_.n_experts, 2 * s.ffn, d);
    } else {
      gate = expert_weights(file, p + "ffn_gate_exps.weight", h_.n_experts, s.ffn, d);
      up = expert_weights(file, p + "ffn_up_exps.weight", h_.n_experts, s.ffn, d);
    }
    const auto down = expert_weights(file, p + "ffn_down_exps.weight", h_.n_experts, d, s.ffn);
    x.gate_up.resize(h_.n_experts);
    x.down.resize(h_.n_experts);
    own_pool_.run(h_.n_experts, [&](int e) {  // (packing is the bulk of the load)
      x.gate_up[e] = gate_up.empty() ? pack_group({gate[e], up[e]}) : pack_group({gate_up[e]});
      x.down[e] = kernels::pack_weight(down[e]);
    });
    if (const int width = h_.shared_expert_ffn; width > 0) {
      x.shared_gate_up = pack_group({weight(file, p + "ffn_gate_shexp.weight", width, d),
                                     weight(file, p + "ffn_up_shexp.weight", width, d)});
      x.shared_down = kernels::pack_weight(weight(file, p + "ffn_down_shexp.weight", d, width));
      x.shared_gate = any_vector(file, p + "ffn_gate_inp_shexp.weight", d);
    }
  } else {
    gate_up_ = pack_group({weight(file, p + "ffn_gate.weight", s.ffn, d), weight(file, p + "ffn_up.weight", s.ffn, d)});
    down_ = kernels::pack_weight(weight(file, p + "ffn_down.weight", d, s.ffn));
  }
  // The embedding table (read in place) and, where the block has its own, the LM head;
  // else the model's head is shared once attached.
  const std::string table = file.find_tensor(p + "nextn.embed_tokens.weight") ? p + "nextn.embed_tokens.weight"
                                                                              : "token_embd.weight";
  matrix_source(file, table, s.vocab, d);  // (its shape checked)
  check_cpu_type(file, file.tensor(table), table);
  embedding_ = &file.tensor(table);
  embedding_row_bytes_ = embedding_->n_bytes / s.vocab;
  if (file.find_tensor(p + "nextn.shared_head_head.weight")) {
    own_head_ = kernels::pack_weight(weight(file, p + "nextn.shared_head_head.weight", s.vocab, d));
    head_ = &own_head_;
  }
  const RopeFrequencies rope = rope_frequencies(h_.rope_base, h_.rope_dims, h_.rope_scaling);
  inv_freq_ = rope.inv_freq;
  attention_factor_ = rope.attention_factor;
}

MtpHead::~MtpHead() = default;

ModelDraftMemory MtpHead::memory(const gguf::File& /*target*/) const {
  const auto floats = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
  ModelDraftMemory memory;
  memory.weight_bytes = eh_proj_.bytes() + group_bytes(qkv_gate_) + group_bytes(kv_) + attn_output_.bytes() +
                        group_bytes(gate_up_) + down_.bytes() + own_head_.bytes() + floats(enorm_) + floats(hnorm_) +
                        floats(output_norm_) + floats(head_norm_) + floats(attn_norm_) + floats(post_norm_) +
                        floats(q_norm_) + floats(k_norm_);
  if (experts_) {
    memory.weight_bytes += experts_->router.bytes() + group_bytes(experts_->shared_gate_up) +
                           experts_->shared_down.bytes() + floats(experts_->shared_gate);
    for (int e = 0; e < h_.n_experts; ++e)
      memory.weight_bytes += group_bytes(experts_->gate_up[e]) + experts_->down[e].bytes();
  }
  // (the embedding table is the model's mapping; the head, unless its own, the model's packed one)
  memory.context_bytes = static_cast<size_t>(most_context_positions()) * (sizeof(int) + 2 * kv_width() * sizeof(float)) +
                         static_cast<size_t>(kWindow + 1) * h_.shapes.d_model * sizeof(float);
  return memory;
}

void MtpHead::attach(Model& target, const gguf::File& /*target_file*/) {
  const ModelInfo& info = target.info();
  if (info.d_model != h_.shapes.d_model || info.vocab != h_.shapes.vocab || info.n_layers != h_.shapes.n_layers)
    fail("the MTP block is of a model of width {}, {} tokens and {} layers, not this one ({}, {}, {})",
         h_.shapes.d_model, h_.shapes.vocab, h_.shapes.n_layers, info.d_model, info.vocab, info.n_layers);
  if (!head_) {
    if (const PackedWeight* shared = target.cpu_output_head()) {
      head_ = shared;  // (no second copy of the largest matrix)
    } else {
      const bool tied = file_.find_tensor("output.weight") == nullptr;
      own_head_ = kernels::pack_weight(
          weight(file_, tied ? "token_embd.weight" : "output.weight", h_.shapes.vocab, h_.shapes.d_model));
      head_ = &own_head_;
    }
  }
  if (kernels::ThreadPool* threads = target.cpu_threads()) pool_ = threads;
}

std::unique_ptr<DraftContext> MtpHead::new_context() const {
  auto context = std::make_unique<MtpContext>();
  context->row_floats_ = static_cast<size_t>(h_.shapes.d_model);
  return context;
}

void MtpHead::forget_from(MtpContext& context, int first) const {
  const auto kept = static_cast<size_t>(std::lower_bound(context.positions_.begin(), context.positions_.end(), first) -
                                        context.positions_.begin());
  context.positions_.resize(kept);
  context.keys_.resize(kept * kv_width());
  context.values_.resize(kept * kv_width());
}

void MtpHead::append_entries(MtpContext& context, const float* kv, int n, int stride, int first_position) const {
  const int width = kv_width();
  for (int r = 0; r < n; ++r) {
    const float* row = kv + static_cast<size_t>(r) * stride;
    context.keys_.insert(context.keys_.end(), row, row + width);
    context.values_.insert(context.values_.end(), row + width, row + 2 * width);
    context.positions_.push_back(first_position + r);
  }
  // The oldest go, a chunk's worth at a time (so the move is paid rarely).
  const int held = static_cast<int>(context.positions_.size());
  if (held <= most_context_positions()) return;
  const size_t drop = static_cast<size_t>(held - kWindow);
  context.positions_.erase(context.positions_.begin(), context.positions_.begin() + drop);
  context.keys_.erase(context.keys_.begin(), context.keys_.begin() + drop * width);
  context.values_.erase(context.values_.begin(), context.values_.begin() + drop * width);
}

void MtpHead::extend(DraftContext& any_context, int first, std::span<const float> taps) {
  MtpContext& context = ours(any_context);
  const size_t d = static_cast<size_t>(h_.shapes.d_model);
  if (taps.size() % d != 0) fail("MTP block: {} hidden-state floats are not whole rows of {}", taps.size(), d);
  if (first < 0) fail("MTP block: position {} is negative", first);
  forget_from(context, first + 1);  // (the entries that read rows from `first` on)
  if (context.hidden_.empty() || first < context.hidden_first_ || first > context.hidden_end()) {
    context.hidden_.clear();
    context.hidden_first_ = first;
  } else {
    context.hidden_.resize((first - context.hidden_first_) * d);
  }
  context.hidden_.insert(context.hidden_.end(), taps.begin(), taps.end());
  // Rows further back than an entry's window are never read.
  const int rows = context.hidden_end() - context.hidden_first_;
  if (rows > kWindow + 1) {
    const size_t drop = static_cast<size_t>(rows - kWindow - 1);
    context.hidden_.erase(context.hidden_.begin(), context.hidden_.begin() + drop * d);
    context.hidden_first_ += static_cast<int>(drop);
  }
}

bool MtpHead::ready(const DraftContext& any_context, std::span<const int32_t> tokens) const {
  const MtpContext& context = ours(any_context);
  const int before = static_cast<int>(tokens.size()) - 2;  // the row of the position before the last token
  return before >= 0 && before >= context.hidden_first_ && before < context.hidden_end();
}

void MtpHead::project(const PackedWeight& w, const float* x, int n, float* y, int ldy) {
  activations_.quantize(x, n, w.cols, *pool_);
  kernels::matmul(w, activations_, y, ldy, *pool_);
}

void MtpHead::rotate(float* rows, int n, int stride, int heads, int first_position) {
  std::vector<int> positions(n);
  for (int r = 0; r < n; ++r) positions[r] = first_position + r;
  kernels::rope_neox_at(rows, n, stride, heads, h_.shapes.head_dim, positions.data(), inv_freq_, attention_factor_,
                        h_.rope_dims);
}

void MtpHead::entry_inputs(const int32_t* tokens, const float* hidden, const std::vector<float>* hidden_norm, int n) {
  const int d = h_.shapes.d_model;
  const float eps = h_.rms_eps;
  pair_.resize(static_cast<size_t>(n) * 2 * d);
  for (int r = 0; r < n; ++r) {
    if (tokens[r] < 0 || tokens[r] >= h_.shapes.vocab) fail("MTP block: token {} is outside the vocabulary", tokens[r]);
    float* e = pair_.data() + static_cast<size_t>(r) * 2 * d;
    float* hh = e + d;
    kernels::dequantize_row(embedding_->type, embedding_->data + embedding_row_bytes_ * tokens[r], e, d);
    kernels::rms_norm(e, enorm_.data(), e, 1, d, eps, *pool_);
    const float* row = hidden + static_cast<size_t>(r) * d;
    if (hidden_norm) {  // the model's raw last-layer output: its output norm first (what the head read)
      kernels::rms_norm(row, hidden_norm->data(), hh, 1, d, eps, *pool_);
      kernels::rms_norm(hh, hnorm_.data(), hh, 1, d, eps, *pool_);
    } else {
      kernels::rms_norm(row, hnorm_.data(), hh, 1, d, eps, *pool_);
    }
  }
  x_.resize(static_cast<size_t>(n) * d);
  project(eh_proj_, pair_.data(), n, x_.data(), d);
}

void MtpHead::catch_up(MtpContext& context, std::span<const int32_t> tokens, int end) {
  const int d = h_.shapes.d_model, width = 2 * kv_width();
  const int start = std::max({context.entries_end(), context.hidden_first_ + 1, end - kWindow, 1});
  for (int first = start; first < end; first += kChunk) {
    const int n = std::min(kChunk, end - first);
    entry_inputs(tokens.data() + first,
                 context.hidden_.data() + static_cast<size_t>(first - 1 - context.hidden_first_) * d, &output_norm_, n);
    normed_.resize(x_.size());
    kernels::rms_norm(x_.data(), attn_norm_.data(), normed_.data(), n, d, h_.rms_eps, *pool_);
    activations_.quantize(normed_.data(), n, d, *pool_);
    qkv_.resize(static_cast<size_t>(n) * width);
    matmul_group(kv_, activations_, qkv_.data(), width, *pool_);
    for (int r = 0; r < n; ++r) {
      float* row = qkv_.data() + static_cast<size_t>(r) * width;
      kernels::rms_norm(row, k_norm_.data(), row, h_.shapes.n_kv_heads, h_.shapes.head_dim, h_.rms_eps, *pool_);
    }
    rotate(qkv_.data(), n, width, h_.shapes.n_kv_heads, first);
    append_entries(context, qkv_.data(), n, width, first);
  }
}

void MtpHead::swiglu(const std::vector<PackedWeight>& gate_up, const PackedWeight& down, int width, float scale) {
  const int d = h_.shapes.d_model;
  activations_.quantize(normed_.data(), 1, d, *pool_);
  gate_up_rows_.resize(2 * static_cast<size_t>(width));
  ffn_rows_.resize(width);
  matmul_group(gate_up, activations_, gate_up_rows_.data(), 2 * width, *pool_);
  kernels::silu_mul(gate_up_rows_.data(), ffn_rows_.data(), 1, width, *pool_);
  scratch_.resize(d);
  project(down, ffn_rows_.data(), 1, scratch_.data(), d);
  for (int i = 0; i < d; ++i) x_[i] += scale * scratch_[i];
}

void MtpHead::feed_forward() {
  if (!experts_) return swiglu(gate_up_, down_, h_.shapes.ffn, 1.0f);
  // The router's softmax over every expert, its n_experts_used best renormalised to sum to 1
  // (as the model's layers route: llama_model.cpp).
  auto& x = *experts_;
  const int experts = h_.n_experts, used = h_.n_experts_used, d = h_.shapes.d_model;
  x.router_logits.resize(experts);
  project(x.router, normed_.data(), 1, x.router_logits.data(), experts);
  std::vector<float> probs = x.router_logits;
  for (auto& p : probs)
    if (!std::isfinite(p)) p = -std::numeric_limits<float>::infinity();  // (a broken logit routes nowhere)
  const float top = *std::max_element(probs.begin(), probs.end());
  for (auto& p : probs) p = top == -std::numeric_limits<float>::infinity() ? 1.0f : std::exp(p - top);
  std::vector<int> order(experts);
  for (int e = 0; e < experts; ++e) order[e] = e;
  std::partial_sort(order.begin(), order.begin() + used, order.end(),
                    [&](int a, int b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  float sum = 0.0f;
  for (int k = 0; k < used; ++k) sum += probs[order[k]];
  for (int k = 0; k < used; ++k) swiglu(x.gate_up[order[k]], x.down[order[k]], h_.shapes.ffn, probs[order[k]] / sum);
  if (!x.shared_gate_up.empty()) {
    float logit = 0.0f;
    for (int j = 0; j < d; ++j) logit += normed_[j] * x.shared_gate[j];
    swiglu(x.shared_gate_up, x.shared_down, h_.shared_expert_ffn, 1.0f / (1.0f + std::exp(-logit)));
  }
}

void MtpHead::step(MtpContext& context, int32_t token, int position, const float* hidden, int row) {
  const auto& s = h_.shapes;
  const int d = s.d_model, hd = s.head_dim, qw = q_width(), kw = kv_width();
  const int width = 2 * qw + 2 * kw;  // [q | k | v | gate]
  entry_inputs(&token, hidden, nullptr, 1);
  normed_.resize(d);
  kernels::rms_norm(x_.data(), attn_norm_.data(), normed_.data(), 1, d, h_.rms_eps, *pool_);
  activations_.quantize(normed_.data(), 1, d, *pool_);
  qkv_.resize(width);
  matmul_group(qkv_gate_, activations_, qkv_.data(), width, *pool_);
  kernels::rms_norm(qkv_.data(), q_norm_.data(), qkv_.data(), s.n_heads, hd, h_.rms_eps, *pool_);
  kernels::rms_norm(qkv_.data() + qw, k_norm_.data(), qkv_.data() + qw, s.n_kv_heads, hd, h_.rms_eps, *pool_);
  rotate(qkv_.data(), 1, width, s.n_heads, position);
  rotate(qkv_.data() + qw, 1, width, s.n_kv_heads, position);
  forget_from(context, position);
  append_entries(context, qkv_.data() + qw, 1, width, position);
  // Attention over the entries up to `position`, inside the window.
  const int held = static_cast<int>(context.positions_.size());
  const int from = static_cast<int>(std::lower_bound(context.positions_.begin(), context.positions_.end(),
                                                     position - kWindow + 1) -
                                    context.positions_.begin());
  const int group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  attended_.resize(qw);
  pool_->run(s.n_heads, [&](int head) {
    const int kv_head = head / group;
    const float* q = qkv_.data() + head * hd;
    std::vector<float> scores(held - from);
    float best = -std::numeric_limits<float>::infinity();
    for (int j = from; j < held; ++j) {
      const float* k = context.keys_.data() + static_cast<size_t>(j) * kw + kv_head * hd;
      float dot = 0.0f;
      for (int i = 0; i < hd; ++i) dot += q[i] * k[i];
      best = std::max(best, scores[j - from] = dot * scale);
    }
    float total = 0.0f;
    for (auto& score : scores) total += (score = std::exp(score - best));
    float* o = attended_.data() + head * hd;
    std::fill(o, o + hd, 0.0f);
    for (int j = from; j < held; ++j) {
      const float* v = context.values_.data() + static_cast<size_t>(j) * kw + kv_head * hd;
      const float weight = scores[j - from] / total;
      for (int i = 0; i < hd; ++i) o[i] += weight * v[i];
    }
  });
  const float* gate = qkv_.data() + qw + 2 * kw;
  for (int i = 0; i < qw; ++i) attended_[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
  scratch_.resize(d);
  project(attn_output_, attended_.data(), 1, scratch_.data(), d);
  for (int i = 0; i < d; ++i) x_[i] += scratch_[i];
  kernels::rms_norm(x_.data(), post_norm_.data(), normed_.data(), 1, d, h_.rms_eps, *pool_);
  feed_forward();
  out_hidden_.resize(d);
  kernels::rms_norm(x_.data(), head_norm_.data(), out_hidden_.data(), 1, d, h_.rms_eps, *pool_);
  if (!head_) fail("MTP block: it shares the model's LM head, and no model is attached");
  project(*head_, out_hidden_.data(), 1, logits_.data() + static_cast<size_t>(row) * s.vocab, s.vocab);
}

std::vector<int32_t> MtpHead::propose(DraftContext& any_context, std::span<const int32_t> tokens, int max_tokens) {
  MtpContext& context = ours(any_context);
  const int guesses = std::min(max_tokens, kMostGuesses);
  if (guesses <= 0 || !ready(context, tokens)) return {};
  const int last = static_cast<int>(tokens.size()) - 1;  // the sampled token, not yet run through the model
  const int d = h_.shapes.d_model, vocab = h_.shapes.vocab;
  forget_from(context, last);
  catch_up(context, tokens, last);
  // The model's row before the last token, output-normed as its head read it.
  std::vector<float> hidden(d);
  kernels::rms_norm(context.hidden_.data() + static_cast<size_t>(last - 1 - context.hidden_first_) * d,
                    output_norm_.data(), hidden.data(), 1, d, h_.rms_eps, *pool_);
  logits_.resize(static_cast<size_t>(guesses) * vocab);
  std::vector<int32_t> out;
  int32_t token = tokens[last];
  for (int i = 0; i < guesses; ++i) {
    step(context, token, last + i, hidden.data(), i);
    const float* row = logits_.data() + static_cast<size_t>(i) * vocab;
    token = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    out.push_back(token);
    hidden = out_hidden_;
  }
  forget_from(context, last + 1);  // (the last token's entry is real; the guesses' are not)
  // Rows before the last token's are read by no entry from now on.
  const int drop = last - 1 - context.hidden_first_;
  if (drop > 0) {
    context.hidden_.erase(context.hidden_.begin(), context.hidden_.begin() + static_cast<size_t>(drop) * d);
    context.hidden_first_ += drop;
  }
  return out;
}

std::span<const float> MtpHead::guess_logits(DraftContext& context, std::span<const int32_t> tokens) {
  if (!ready(context, tokens)) fail("MTP block: it has not seen the position before the last token");
  propose(context, tokens, kMostGuesses);
  return logits_;
}

std::vector<float> MtpHead::export_context(const DraftContext& any_context, int first, int count) const {
  const MtpContext& context = ours(any_context);
  const size_t width = kv_width();
  const auto& positions = context.positions_;
  const auto index = static_cast<size_t>(std::lower_bound(positions.begin(), positions.end(), first) - positions.begin());
  if (count <= 0 || index + count > positions.size() || positions[index + count - 1] != first + count - 1) return {};
  std::vector<float> rows;
  rows.reserve(static_cast<size_t>(count) * 2 * width);
  for (size_t r = index; r < index + count; ++r) {
    rows.insert(rows.end(), context.keys_.begin() + r * width, context.keys_.begin() + (r + 1) * width);
    rows.insert(rows.end(), context.values_.begin() + r * width, context.values_.begin() + (r + 1) * width);
  }
  return rows;
}

void MtpHead::import_context(DraftContext& any_context, int first, std::span<const float> rows) {
  MtpContext& context = ours(any_context);
  const int width = 2 * kv_width();
  if (first < 0 || rows.size() % width != 0)
    fail("MTP block: {} context floats at position {} are not whole positions of {}", rows.size(), first, width);
  const int count = static_cast<int>(rows.size() / width);
  // Positions it holds already (a sequence taken back after preemption) stay as they are.
  const auto at = std::lower_bound(context.positions_.begin(), context.positions_.end(), first);
  if (count > 0 && context.positions_.end() - at >= count && *at == first && at[count - 1] == first + count - 1) return;
  forget_from(context, first);
  for (int begin = 0; begin < count; begin += kChunk)
    append_entries(context, rows.data() + static_cast<size_t>(begin) * width, std::min(kChunk, count - begin), width,
                   first + begin);
}

}  // namespace splash::model::llama
