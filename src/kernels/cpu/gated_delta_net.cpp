#include "kernels/cpu/gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/isa_kernels.h"

namespace splash::kernels {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sigmoid(x); }
// ggml's softplus: exactly x once exp(x) would dwarf the 1.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x / sqrt(sum x^2 + eps) (llama.cpp's GDN L2 norm: rms_norm(x, eps / n) / sqrt(n)).
void l2_normalise(const float* x, float* out, int n, float eps) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale;
}

constexpr int kConvChannelsPerTask = 64;

// The causal conv of one sequence's channels [begin, end), SiLU applied, in place.
void conv_channels(const DeltaNetShape& s, const float* conv, int mixed_stride, const DeltaNetSequence& seq, int begin,
                   int end) {
  const int taps = s.conv_kernel, kept = taps - 1;
  float* history = seq.state + s.rule_floats();  // [channels][taps - 1]
  float window[8];
  for (int c = begin; c < end; ++c) {
    const float* w = conv + static_cast<size_t>(c) * taps;
    float* kept_inputs = history + static_cast<size_t>(c) * kept;
    std::copy(kept_inputs, kept_inputs + kept, window);
    for (int t = 0; t < seq.n_tokens; ++t) {
      float* x = seq.mixed + static_cast<size_t>(t) * mixed_stride + c;
      window[kept] = *x;
      float acc = 0.0f;
      for (int i = 0; i < taps; ++i) acc += w[i] * window[i];
      std::copy(window + 1, window + taps, window);
      *x = silu(acc);
    }
    std::copy(window, window + kept, kept_inputs);
  }
}

// One value head of one sequence: normalised q/k and gates gathered, the delta rule, then the
// gated RMSNorm of its readout.
void value_head(const DeltaNetShape& s, const DeltaNetWeights& w, int mixed_stride, const DeltaNetSequence& seq,
                int head) {
  const int group = s.v_heads / s.k_heads;
  const int key_head = s.tiled_key_heads ? head % s.k_heads : head / group;
  const int n = seq.n_tokens;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(n) * (2 * s.head_k + 2));
  float* q = scratch.data();
  float* k = q + static_cast<size_t>(n) * s.head_k;
  float* decay = k + static_cast<size_t>(n) * s.head_k;
  float* beta = decay + n;
  const int z_at = s.conv_channels(), beta_at = z_at + s.value_width(), alpha_at = beta_at + s.v_heads;
  for (int t = 0; t < n; ++t) {
    const float* row = seq.mixed + static_cast<size_t>(t) * mixed_stride;
    l2_normalise(row + key_head * s.head_k, q + static_cast<size_t>(t) * s.head_k, s.head_k, w.eps);
    l2_normalise(row + s.key_width() + key_head * s.head_k, k + static_cast<size_t>(t) * s.head_k, s.head_k, w.eps);
    beta[t] = sigmoid(row[beta_at + head]);
    decay[t] = std::exp(w.a[head] * softplus(row[alpha_at + head] + w.dt_bias[head]));
  }
  float* out = seq.out + static_cast<size_t>(head) * s.head_v;
  const DeltaRuleArgs args{seq.state + static_cast<size_t>(head) * s.head_v * s.head_k,
                           s.head_k,
                           s.head_v,
                           n,
                           q,
                           k,
                           seq.mixed + 2 * s.key_width() + head * s.head_v,
                           mixed_stride,
                           decay,
                           beta,
                           out,
                           s.value_width(),
                           1.0f / std::sqrt(static_cast<float>(s.head_k))};
  selected_kernels().delta_rule(args);
  for (int t = 0; t < n; ++t) {
    float* o = out + static_cast<size_t>(t) * s.value_width();
    const float* z = seq.mixed + static_cast<size_t>(t) * mixed_stride + z_at + head * s.head_v;
    float sum = 0.0f;
    for (int j = 0; j < s.head_v; ++j) sum += o[j] * o[j];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(s.head_v) + w.eps);
    for (int j = 0; j < s.head_v; ++j) o[j] = o[j] * scale * w.norm[j] * silu(z[j]);
  }
}

}  // namespace

void gated_delta_net(const DeltaNetShape& shape, const DeltaNetWeights& weights, int mixed_stride,
                     std::span<const DeltaNetSequence> sequences, ThreadPool& pool) {
  const int sequences_count = static_cast<int>(sequences.size());
  const int channel_tasks = (shape.conv_channels() + kConvChannelsPerTask - 1) / kConvChannelsPerTask;
  pool.run(sequences_count * channel_tasks, [&](int task) {
    const int begin = task % channel_tasks * kConvChannelsPerTask;
    conv_channels(shape, weights.conv, mixed_stride, sequences[task / channel_tasks], begin,
                  std::min(begin + kConvChannelsPerTask, shape.conv_channels()));
  });
  pool.run(sequences_count * shape.v_heads, [&](int task) {
    value_head(shape, weights, mixed_stride, sequences[task / shape.v_heads], task % shape.v_heads);
  });
}

}  // namespace splash::kernels
