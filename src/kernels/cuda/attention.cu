// Paged attention over the GPU KV pool, one kernel for decode and prefill chunks: a thread
// block per (token, kv head, context split) with one warp per query head of the group, so
// the group's heads read each K/V row together (once from memory, then from L1). Long
// contexts are split (Flash-Decoding) and the splits merged by log-sum-exp.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {
namespace {

// The partial results a launch may keep: (token, head, split) triples.
constexpr size_t kMaxPartials = size_t{1} << 17;
constexpr int kMinSplitPositions = 256;
constexpr int kPositionsPerStep = 8;  // scores computed together (independent loads in flight)

// PerLane consecutive elements at `index` (aligned to their size) as floats.
template <KvElement E, int PerLane>
__device__ __forceinline__ void load_row(const uint8_t* data, size_t index, float (&out)[PerLane]) {
  using Element = typename KvElementOf<E>::type;
  constexpr int kBytes = PerLane * static_cast<int>(sizeof(Element));
  constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
  alignas(16) Element values[PerLane];
  const uint8_t* from = data + index * sizeof(Element);
#pragma unroll
  for (int c = 0; c < kBytes / kChunk; ++c) {
    if constexpr (kChunk == 16) reinterpret_cast<uint4*>(values)[c] = reinterpret_cast<const uint4*>(from)[c];
    else if constexpr (kChunk == 8) reinterpret_cast<uint2*>(values)[c] = reinterpret_cast<const uint2*>(from)[c];
    else if constexpr (kChunk == 4) reinterpret_cast<uint32_t*>(values)[c] = reinterpret_cast<const uint32_t*>(from)[c];
    else reinterpret_cast<uint16_t*>(values)[c] = reinterpret_cast<const uint16_t*>(from)[c];
  }
#pragma unroll
  for (int j = 0; j < PerLane; ++j) {
    if constexpr (E == KvElement::F16) out[j] = __half2float(values[j]);
    else out[j] = static_cast<float>(values[j]);
  }
}

template <int HD, KvElement E>
__global__ void attention_kernel(const float* __restrict__ qkv, int ld, int n_heads, BatchLayout batch, KvPool pool,
                                 int layer, int chunk, int splits, float scale, float* __restrict__ partials,
                                 float* __restrict__ out) {
  constexpr int kPerLane = HD / 32;
  const int t = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int group = n_heads / pool.n_kv_heads;
  const int head = kv_head * group + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, first = lane * kPerLane;
  const int length = batch.positions[t] + 1;
  const int start = split * chunk, end = min(start + chunk, length);
  const int32_t* table = batch.block_tables + batch.table_offsets[t];
  const uint8_t* data = pool.data;

  float q[kPerLane], acc[kPerLane];
  const float* q_row = qkv + static_cast<size_t>(t) * ld + static_cast<size_t>(head) * HD;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) q[j] = q_row[first + j] * scale, acc[j] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

  for (int p0 = start; p0 < end; p0 += kPositionsPerStep) {
    float s[kPositionsPerStep];
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i) {
      const int p = min(p0 + i, end - 1);  // past the end: a repeat, masked below
      const int block = table[p / kKvBlockTokens], slot = p % kKvBlockTokens;
      float k[kPerLane];
      load_row<E, kPerLane>(data, kv_index(pool, layer, block, 0, kv_head, slot) + first, k);
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) dot = fmaf(q[j], k[j], dot);
      if constexpr (E == KvElement::I8) dot *= pool.scales[kv_scale_index(pool, layer, block, 0, kv_head, slot)];
      s[i] = dot;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
#pragma unroll
      for (int i = 0; i < kPositionsPerStep; ++i) s[i] += __shfl_xor_sync(0xFFFFFFFFu, s[i], offset);
    float step_max = running_max;
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i) {
      if (p0 + i >= end) s[i] = -INFINITY;
      step_max = fmaxf(step_max, s[i]);
    }
    const float correction = __expf(running_max - step_max);  // 0 on the first step
    running_sum *= correction;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) acc[j] *= correction;
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i) {
      if (p0 + i >= end) break;
      const int p = p0 + i;
      const int block = table[p / kKvBlockTokens], slot = p % kKvBlockTokens;
      float weight = __expf(s[i] - step_max);
      running_sum += weight;
      if constexpr (E == KvElement::I8) weight *= pool.scales[kv_scale_index(pool, layer, block, 1, kv_head, slot)];
      float v[kPerLane];
      load_row<E, kPerLane>(data, kv_index(pool, layer, block, 1, kv_head, slot) + first, v);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[j] = fmaf(weight, v[j], acc[j]);
    }
    running_max = step_max;
  }

  if (splits == 1) {
    float* o = out + static_cast<size_t>(t) * n_heads * HD + static_cast<size_t>(head) * HD;
    const float inverse = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) o[first + j] = acc[j] * inverse;
    return;
  }
  // Partial: [max, sum, acc[HD]] per (token, head, split).
  float* partial = partials + ((static_cast<size_t>(t) * n_heads + head) * splits + split) * (HD + 2);
  if (lane == 0) partial[0] = running_max, partial[1] = running_sum;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) partial[2 + first + j] = acc[j];
}

template <int HD>
__global__ void merge_splits_kernel(const float* __restrict__ partials, int splits, int n_heads, float* __restrict__ out) {
  const size_t row = blockIdx.x;  // token * n_heads + head
  const float* p = partials + row * splits * (HD + 2);
  float best = -INFINITY;
  for (int s = 0; s < splits; ++s) best = fmaxf(best, p[s * (HD + 2)]);
  float total = 0.0f, value = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float* split = p + s * (HD + 2);
    if (split[1] == 0.0f) continue;  // an empty split (past this token's context)
    const float w = __expf(split[0] - best);
    total += w * split[1];
    value += w * split[2 + threadIdx.x];
  }
  const size_t t = row / n_heads, head = row % n_heads;
  out[t * n_heads * HD + head * HD + threadIdx.x] = total > 0.0f ? value / total : 0.0f;
}

}  // namespace

size_t attention_scratch_bytes(int /*n_heads*/, int head_dim) { return kMaxPartials * (head_dim + 2) * sizeof(float); }

void attention(const float* qkv, int ld, float* out, int n_heads, const BatchLayout& batch, const KvPool& pool,
               int layer, AttentionScratch& scratch, Stream& stream) {
  if (batch.n_tokens == 0) return;
  if (n_heads % pool.n_kv_heads != 0 || n_heads / pool.n_kv_heads > 32)
    cuda_fail("attention: " + std::to_string(n_heads) + " query heads over " + std::to_string(pool.n_kv_heads) +
              " kv heads has no CUDA kernel");
  const int group = n_heads / pool.n_kv_heads;
  // Splits: as many as keep every split at least kMinSplitPositions long, within the
  // partials the scratch holds.
  const size_t rows = static_cast<size_t>(batch.n_tokens) * n_heads;
  const int budget_splits = static_cast<int>(std::max<size_t>(1, kMaxPartials / rows));
  int splits = std::min((batch.max_context + kMinSplitPositions - 1) / kMinSplitPositions, budget_splits);
  splits = std::max(splits, 1);
  const int chunk = (batch.max_context + splits - 1) / splits;
  splits = (batch.max_context + chunk - 1) / chunk;
  if (splits > 1) scratch.partials.resize(attention_scratch_bytes(n_heads, pool.head_dim));
  const float scale = 1.0f / std::sqrt(static_cast<float>(pool.head_dim));
  const dim3 grid(batch.n_tokens, pool.n_kv_heads, splits);
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  float* partials = scratch.partials.as<float>();
  auto launch = [&]<int HD>() {
    dispatch_kv_element(pool.element, [&]<KvElement E>() {
      attention_kernel<HD, E><<<grid, group * 32, 0, s>>>(qkv, ld, n_heads, batch, pool, layer, chunk, splits, scale,
                                                          partials, out);
    });
    if (splits > 1) merge_splits_kernel<HD><<<static_cast<unsigned>(rows), HD, 0, s>>>(partials, splits, n_heads, out);
  };
  switch (pool.head_dim) {
    case 64: return launch.template operator()<64>();
    case 128: return launch.template operator()<128>();
    case 256: return launch.template operator()<256>();
    default: cuda_fail("attention: head size " + std::to_string(pool.head_dim) + " has no CUDA kernel (64, 128, 256)");
  }
}

}  // namespace splash::kernels::cuda
