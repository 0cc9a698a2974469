#pragma once
// The QKV epilogue of one (token, head), done by one warp: bias, the per-head RMSNorm
// (qwen3), RoPE, and for keys and values the append into the KV pool. qkv_post_kernel runs
// it for every head of a pass; the tensor-core decode attention runs it itself in a pass of
// decode tokens only (its own group's queries, and the new key and value by the split that
// holds their position), which saves a launch a layer. One code for both, so both give the
// same bits.
#include <cuda_fp16.h>

#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// A lane's HD / 32 consecutive values of a head, from lane * HD / 32.
template <int HD>
using HeadLane = float[HD / 32];

// The rotation's cosines and sines of a lane's values at one position: the angle of
// frequency i at position p is p * inv_freq[i] (model/rope_scaling.h), in double as the CPU
// path's table; lane value j turns by frequency (first + j) % (HD / 2) (NEOX pairs i,
// i + HD/2) or (first + j) / 2 (adjacent pairs, the even j of each). They depend on the
// pass's inputs only, so kernels work them out before waiting for the kernel before.
template <int HD>
struct LaneRope {
  HeadLane<HD> cosines, sines;

  __device__ __forceinline__ void at(const QkvPostArgs& a, int pos, int lane) {
    const int first = lane * (HD / 32), rotated = a.rotated_dims(HD);
#pragma unroll
    for (int j = 0; j < HD / 32; ++j) {
      if (!a.neox_rope && j % 2 == 1) continue;  // an adjacent pair's second value: its first's
      if (first + j >= rotated) {                 // partial RoPE: the head's tail is not turned
        cosines[j] = 1.0f, sines[j] = 0.0f;
        continue;
      }
      const int i = a.neox_rope ? (first + j) % (rotated / 2) : (first + j) / 2;
      double s, c;
      sincos(static_cast<double>(pos) * a.rope_inv_freq[i], &s, &c);
      cosines[j] = static_cast<float>(c * a.rope_attention_factor), sines[j] = static_cast<float>(s * a.rope_attention_factor);
    }
  }
};

// Head `head` of token t (q heads first, then k, then v, as the QKV rows hold them) after
// bias, norm and RoPE (q and k), read from the QKV rows: the lane's values into v.
template <int HD>
__device__ __forceinline__ void qkv_epilogue(const QkvPostArgs& a, int t, int head, int lane, const LaneRope<HD>& rope,
                                             HeadLane<HD>& v) {
  constexpr int kPerLane = HD / 32;
  const int first = lane * kPerLane;
  const bool rotated = head < a.n_heads + a.n_kv_heads;  // q or k
  const float* row = a.qkv + static_cast<size_t>(t) * a.ld + static_cast<size_t>(head) * HD;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) v[j] = row[first + j];
  if (a.bias)
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] += a.bias[static_cast<size_t>(head) * HD + first + j];
  if (!rotated) return;
  const float* norm = head < a.n_heads ? a.q_norm : a.k_norm;
  if (norm) {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) sum += v[j] * v[j];
    const float scale = rsqrtf(warp_sum(sum) / static_cast<float>(HD) + a.norm_eps);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] = v[j] * scale * norm[first + j];
  }
  if (a.neox_rope) {
    // Pairs (i, i + R/2) of the R rotated values (R = HD, or Qwen3.5's 64 of 256): the
    // partner's values sit (R/2) / kPerLane lanes away (qkv_post checks that this is a power
    // of two); lanes past the rotated values keep theirs (cosine 1, sine 0).
    const int away = a.rotated_dims(HD) / 2 / kPerLane;
    const bool first_half = (lane & away) == 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const float partner = __shfl_xor_sync(0xFFFFFFFFu, v[j], away);
      v[j] = first_half ? v[j] * rope.cosines[j] - partner * rope.sines[j] : partner * rope.sines[j] + v[j] * rope.cosines[j];
    }
  } else {  // adjacent pairs (2i, 2i + 1), inside one lane
#pragma unroll
    for (int j = 0; j < kPerLane; j += 2) {
      const float x0 = v[j], x1 = v[j + 1];
      v[j] = x0 * rope.cosines[j] - x1 * rope.sines[j];
      v[j + 1] = x0 * rope.sines[j] + x1 * rope.cosines[j];
    }
  }
}

// Writes a key or value head (head >= n_heads, from qkv_epilogue) of token t at position
// pos into the pool: int8 symmetric per (position, kv head), f16 or f32.
template <int HD, KvElement E>
__device__ __forceinline__ void append_kv(const QkvPostArgs& a, const BatchLayout& batch, const KvPool& pool, int t,
                                          int pos, int head, int lane, const HeadLane<HD>& v) {
  constexpr int kPerLane = HD / 32;
  const int first = lane * kPerLane;
  const int which = head < a.n_heads + a.n_kv_heads ? 0 : 1;  // keys, values
  const int kv_head = head - a.n_heads - which * a.n_kv_heads;
  const int block = batch.block_tables[batch.table_offsets[t] + pos / kKvBlockTokens];
  const int slot = pos % kKvBlockTokens;
  const size_t index = kv_index(pool, a.layer, block, which, kv_head, slot) + first;
  using Element = typename KvElementOf<E>::type;
  auto* data = reinterpret_cast<Element*>(pool.data);
  if constexpr (E == KvElement::I8) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) amax = fmaxf(amax, fabsf(v[j]));
    amax = warp_max(amax);
    const float scale = amax / 127.0f, inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) data[index + j] = static_cast<int8_t>(__float2int_rn(v[j] * inverse));
    if (lane == 0) pool.scales[kv_scale_index(pool, a.layer, block, which, kv_head, slot)] = scale;
  } else if constexpr (E == KvElement::F16) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) data[index + j] = __float2half_rn(v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) data[index + j] = v[j];
  }
}

}  // namespace splash::kernels::cuda
