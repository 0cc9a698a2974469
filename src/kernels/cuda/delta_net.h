#pragma once
// Gated DeltaNet on the GPU: the linear attention of the hybrid layers (Qwen3.5, Qwen3-Next),
// the same computation as the CPU's kernels/cpu/gated_delta_net.h. Per sequence a causal
// depthwise conv over the [q | k | v] channels (SiLU after), q and k L2-normalised per head,
// and per value head an fp32 state updated by the gated delta rule, read out through an
// RMSNorm gated by SiLU(z). Token-sequential within a sequence: one thread block per
// (sequence, value head) keeps the head's state in registers while its tokens stream through,
// so a prompt chunk reads and writes each state once.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device.h"

namespace splash::kernels::cuda {

// A layer's sizes (as the CPU's DeltaNetShape): value head j reads key head
// (tiled_key_heads ? j % k_heads : j / (v_heads / k_heads)).
struct DeltaNetDims {
  int conv_kernel = 0, k_heads = 0, v_heads = 0, head_k = 0, head_v = 0;
  bool tiled_key_heads = true;
  constexpr int key_width() const { return k_heads * head_k; }
  constexpr int value_width() const { return v_heads * head_v; }
  constexpr int conv_channels() const { return 2 * key_width() + value_width(); }
  constexpr int mixed_width() const { return conv_channels() + value_width() + 2 * v_heads; }
  constexpr size_t rule_floats() const { return static_cast<size_t>(v_heads) * head_v * head_k; }
  // One sequence's state in one layer: the rule's [v_heads][head_v][head_k], then the conv's
  // last conv_kernel - 1 inputs [channels][conv_kernel - 1] (the CPU's layout, so a state
  // means the same on both).
  constexpr size_t state_floats() const { return rule_floats() + static_cast<size_t>(conv_kernel - 1) * conv_channels(); }
};

// A layer's small weights on the device.
struct DeltaNetLayerWeights {
  const float* conv = nullptr;     // [channels][conv_kernel]; the last tap takes the current token
  const float* dt_bias = nullptr;  // [v_heads]
  const float* a = nullptr;        // [v_heads]: -exp(A_log)
  const float* norm = nullptr;     // [head_v]: the output RMSNorm
  float eps = 1e-6f;               // of the L2 norms and the output RMSNorm
};

// The pass's sequences, on the device: kDeltaNetSliceInts int32 each, {first row of the pass,
// tokens, state slot, position of the first token}. A slice at position 0 starts from a zero
// state (what the slot held before is ignored); any other continues the slot's.
inline constexpr int kDeltaNetSliceInts = 4;

struct DeltaNetPass {
  const int32_t* slices = nullptr;
  int n_slices = 0;
  float* mixed = nullptr;  // [rows][mixed_stride]: the in-projection's rows; the conv's channels are overwritten
  int mixed_stride = 0;
  float* states = nullptr;  // slot s's state of this layer at states + s * slot_stride
  size_t slot_stride = 0;   // floats
  float* out = nullptr;     // [rows][out_stride]: the gated, normalised readout
  int out_stride = 0;
};

// Whether the kernels take these sizes (head_k 64, 128 or 256; head_v up to 256; a conv of
// 2 to 8 taps).
bool delta_net_supported(const DeltaNetDims& dims);

void gated_delta_net(const DeltaNetDims& dims, const DeltaNetLayerWeights& weights, const DeltaNetPass& pass,
                     Stream& stream);

}  // namespace splash::kernels::cuda
