#pragma once
// Gated DeltaNet, the linear attention of Qwen3.5's hybrid layers, on the CPU: per sequence a
// causal depthwise conv over the [q | k | v] channels (SiLU after), q and k L2-normalised per
// head, and per value head a recurrent fp32 state updated by the gated delta rule, read out
// through an RMSNorm gated by SiLU(z). Token-sequential within a sequence, parallel over
// sequences x channels (conv) and sequences x value heads (the rule): the state of a head is
// 64 KB and stays in cache while its tokens stream through.
#include <cstddef>
#include <span>

#include "kernels/cpu/thread_pool.h"

namespace splash::kernels {

// A layer's sizes: v_heads value heads of head_v, value head j reading key head
// (tiled_key_heads ? j % k_heads : j / (v_heads / k_heads)) of head_k (llama.cpp's qwen35
// files store the value heads tiled, Qwen3-Next's grouped); a conv of conv_kernel taps.
struct DeltaNetShape {
  int conv_kernel = 0, k_heads = 0, v_heads = 0, head_k = 0, head_v = 0;
  bool tiled_key_heads = true;
  int key_width() const { return k_heads * head_k; }
  int value_width() const { return v_heads * head_v; }
  int conv_channels() const { return 2 * key_width() + value_width(); }
  // The in-projection's row: conv channels, then z [value_width], beta and alpha [v_heads].
  int mixed_width() const { return conv_channels() + value_width() + 2 * v_heads; }
  size_t rule_floats() const { return static_cast<size_t>(v_heads) * head_v * head_k; }
  // One sequence's state in one layer: the rule's [v_heads][head_v][head_k] (row j of a head
  // is column j of its S), then the conv's last conv_kernel - 1 inputs, [channels][taps - 1].
  size_t state_floats() const { return rule_floats() + static_cast<size_t>(conv_kernel - 1) * conv_channels(); }
};

// A layer's small weights, as llama.cpp's converter writes them.
struct DeltaNetWeights {
  const float* conv;     // [channels][conv_kernel]; tap conv_kernel - 1 takes the current token
  const float* dt_bias;  // [v_heads]
  const float* a;        // [v_heads]: -exp(A_log)
  const float* norm;     // [head_v]: the output RMSNorm (plain weights, not zero-centred)
  float eps;             // of the L2 norms and the output RMSNorm
};

struct DeltaNetSequence {
  float* mixed;  // [n_tokens][mixed_stride]: the in-projection's rows (conv channels overwritten)
  int n_tokens;
  float* state;  // state_floats(), carried from the sequence's previous tokens (zero at its start)
  float* out;    // [n_tokens][value_width]: the gated, normalised readout (before the out projection)
};

void gated_delta_net(const DeltaNetShape& shape, const DeltaNetWeights& weights, int mixed_stride,
                     std::span<const DeltaNetSequence> sequences, ThreadPool& pool);

}  // namespace splash::kernels
