// Paged attention over the GPU KV pool. Decode tokens: a thread block per (token, kv head,
// context split), one warp per query head of the group, so the group's heads read each K/V
// row together; long contexts are split (Flash-Decoding) and merged by log-sum-exp. Tokens of
// longer slices (prompt chunks, verify blocks): tiles of consecutive tokens that share each
// K/V block through shared memory.
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
constexpr int kMinSplitPositions = 64;  // short splits: decode is latency-bound per split
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

// Decode: a thread block per (token, kv head, context split), a warp per query head of the
// group; each step scores kPositionsPerStep positions with their K loads in flight together,
// then loads their V rows together.
template <int HD, KvElement E>
__global__ void attention_decode_kernel(const float* __restrict__ qkv, int ld, int n_heads, BatchLayout batch,
                                        KvPool pool, int layer, int chunk, int splits, float scale,
                                        float* __restrict__ partials, float* __restrict__ out) {
  constexpr int kPerLane = HD / 32;
  const int index = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int t = batch.decode_tokens[index];
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
    int block[kPositionsPerStep], slot[kPositionsPerStep];
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i) {
      const int p = min(p0 + i, end - 1);  // past the end: a repeat, masked below
      block[i] = table[p / kKvBlockTokens], slot[i] = p % kKvBlockTokens;
    }
    float s[kPositionsPerStep];
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i) {
      float k[kPerLane];
      load_row<E, kPerLane>(data, kv_index(pool, layer, block[i], 0, kv_head, slot[i]) + first, k);
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) dot = fmaf(q[j], k[j], dot);
      if constexpr (E == KvElement::I8) dot *= pool.scales[kv_scale_index(pool, layer, block[i], 0, kv_head, slot[i])];
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
    float v[kPositionsPerStep][kPerLane];
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i)
      load_row<E, kPerLane>(data, kv_index(pool, layer, block[i], 1, kv_head, slot[i]) + first, v[i]);
#pragma unroll
    for (int i = 0; i < kPositionsPerStep; ++i) {
      float weight = __expf(s[i] - step_max);  // 0 for the masked repeats
      running_sum += weight;
      if constexpr (E == KvElement::I8) weight *= pool.scales[kv_scale_index(pool, layer, block[i], 1, kv_head, slot[i])];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[j] = fmaf(weight, v[i][j], acc[j]);
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
  // Partial: [max, sum, acc[HD]] per (decode token, head, split).
  float* partial = partials + ((static_cast<size_t>(index) * n_heads + head) * splits + split) * (HD + 2);
  if (lane == 0) partial[0] = running_max, partial[1] = running_sum;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) partial[2 + first + j] = acc[j];
}

// Prompt chunks and verify blocks: a thread block per (tile of consecutive tokens of one
// sequence, kv head). Its 128 threads hold the tile's query rows (tokens x the group's heads),
// kSplit threads a row, 64 dimensions each; K/V are read one paged block (16 positions) at a
// time into shared memory, dequantized once, and serve every row of the tile.
constexpr int kTileThreads = 128;

template <int HD>
constexpr int tile_split() { return HD / 64; }

template <int HD, KvElement E>
__global__ void __launch_bounds__(kTileThreads)
    attention_tile_kernel(const float* __restrict__ qkv, int ld, int n_heads, BatchLayout batch, KvPool pool,
                          int layer, float scale, float* __restrict__ out) {
  constexpr int kSplit = tile_split<HD>(), kDims = 64, kPad = kDims + 4;  // padded rows: fewer bank conflicts
  __shared__ __align__(16) float keys[kKvBlockTokens][kSplit][kPad];
  __shared__ __align__(16) float values[kKvBlockTokens][kSplit][kPad];
  const int group = n_heads / pool.n_kv_heads;
  const int first = batch.tiles[2 * blockIdx.x], count = batch.tiles[2 * blockIdx.x + 1];
  const int kv_head = blockIdx.y;
  const int row = threadIdx.x / kSplit, part = threadIdx.x % kSplit;
  const int token = row / group;
  const bool active = token < count;
  const int t = first + min(token, count - 1);
  const int head = kv_head * group + row % group;
  const int pos = batch.positions[t];
  const int last = batch.positions[first + count - 1];
  const int32_t* table = batch.block_tables + batch.table_offsets[first];

  float q[kDims], acc[kDims];
  const float* q_row = qkv + static_cast<size_t>(t) * ld + static_cast<size_t>(head) * HD + part * kDims;
#pragma unroll
  for (int i = 0; i < kDims; ++i) q[i] = q_row[i] * scale, acc[i] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

  const int n_blocks = last / kKvBlockTokens + 1;
  for (int b = 0; b < n_blocks; ++b) {
    const int block = table[b];
    __syncthreads();  // the previous block's rows are no longer read
    for (int i = threadIdx.x; i < kKvBlockTokens * HD; i += kTileThreads) {
      const int slot = i / HD, d = i % HD;
      float k = kv_load<E>(pool.data, kv_index(pool, layer, block, 0, kv_head, slot) + d);
      float v = kv_load<E>(pool.data, kv_index(pool, layer, block, 1, kv_head, slot) + d);
      if constexpr (E == KvElement::I8) {
        k *= pool.scales[kv_scale_index(pool, layer, block, 0, kv_head, slot)];
        v *= pool.scales[kv_scale_index(pool, layer, block, 1, kv_head, slot)];
      }
      keys[slot][d / kDims][d % kDims] = k;
      values[slot][d / kDims][d % kDims] = v;
    }
    __syncthreads();
    float s[kKvBlockTokens];
#pragma unroll
    for (int j = 0; j < kKvBlockTokens; ++j) {
      const float4* k4 = reinterpret_cast<const float4*>(keys[j][part]);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kDims / 4; ++i) {
        const float4 k = k4[i];
        dot = fmaf(q[4 * i], k.x, dot);
        dot = fmaf(q[4 * i + 1], k.y, dot);
        dot = fmaf(q[4 * i + 2], k.z, dot);
        dot = fmaf(q[4 * i + 3], k.w, dot);
      }
#pragma unroll
      for (int offset = 1; offset < kSplit; offset *= 2) dot += __shfl_xor_sync(0xFFFFFFFFu, dot, offset);
      s[j] = b * kKvBlockTokens + j <= pos ? dot : -INFINITY;  // causal
    }
    float step_max = running_max;
#pragma unroll
    for (int j = 0; j < kKvBlockTokens; ++j) step_max = fmaxf(step_max, s[j]);
    if (step_max == -INFINITY) continue;  // all masked (the row's position is earlier)
    const float correction = __expf(running_max - step_max);
    running_sum *= correction;
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[i] *= correction;
#pragma unroll
    for (int j = 0; j < kKvBlockTokens; ++j) {
      const float w = __expf(s[j] - step_max);
      running_sum += w;
      const float4* v4 = reinterpret_cast<const float4*>(values[j][part]);
#pragma unroll
      for (int i = 0; i < kDims / 4; ++i) {
        const float4 v = v4[i];
        acc[4 * i] = fmaf(w, v.x, acc[4 * i]);
        acc[4 * i + 1] = fmaf(w, v.y, acc[4 * i + 1]);
        acc[4 * i + 2] = fmaf(w, v.z, acc[4 * i + 2]);
        acc[4 * i + 3] = fmaf(w, v.w, acc[4 * i + 3]);
      }
    }
    running_max = step_max;
  }
  if (!active) return;
  float* o = out + static_cast<size_t>(t) * n_heads * HD + static_cast<size_t>(head) * HD + part * kDims;
  const float inverse = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
#pragma unroll
  for (int i = 0; i < kDims; ++i) o[i] = acc[i] * inverse;
}

template <int HD>
__global__ void merge_splits_kernel(const float* __restrict__ partials, int splits, int n_heads,
                                    const int32_t* __restrict__ decode_tokens, float* __restrict__ out) {
  const size_t row = blockIdx.x;  // decode token index * n_heads + head
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
  const size_t t = decode_tokens[row / n_heads], head = row % n_heads;
  out[t * n_heads * HD + head * HD + threadIdx.x] = total > 0.0f ? value / total : 0.0f;
}

}  // namespace

size_t attention_scratch_bytes(int /*n_heads*/, int head_dim) { return kMaxPartials * (head_dim + 2) * sizeof(float); }

namespace {
// Query tokens a tile holds: 128 / kSplit query rows, over the group's heads.
int tile_tokens(int n_heads, int n_kv_heads, int head_dim) {
  const int rows = kTileThreads / (head_dim / 64);
  return std::max(1, rows / (n_heads / n_kv_heads));
}
}  // namespace

AttentionWork attention_work(std::span<const SliceSpan> slices, int n_heads, int n_kv_heads, int head_dim) {
  AttentionWork work;
  const int per_tile = tile_tokens(n_heads, n_kv_heads, head_dim);
  for (const auto& slice : slices) {
    if (slice.count == 1) {
      work.decode.push_back(slice.first_token);
      work.decode_context = std::max(work.decode_context, slice.first_position + 1);
      continue;
    }
    for (int start = 0; start < slice.count; start += per_tile) {
      work.tiles.push_back(slice.first_token + start);
      work.tiles.push_back(std::min(per_tile, slice.count - start));
    }
  }
  return work;
}

void attention(const float* qkv, int ld, float* out, int n_heads, const BatchLayout& batch, const KvPool& pool,
               int layer, AttentionScratch& scratch, Stream& stream) {
  if (batch.n_tokens == 0) return;
  if (n_heads % pool.n_kv_heads != 0 || n_heads / pool.n_kv_heads > 32)
    cuda_fail("attention: " + std::to_string(n_heads) + " query heads over " + std::to_string(pool.n_kv_heads) +
              " kv heads has no CUDA kernel");
  const int group = n_heads / pool.n_kv_heads;
  if (group > kTileThreads / (pool.head_dim / 64))
    cuda_fail("attention: a group of " + std::to_string(group) + " query heads does not fit a tile");
  const float scale = 1.0f / std::sqrt(static_cast<float>(pool.head_dim));
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  float* partials = scratch.partials.as<float>();
  // Decode splits: as many as keep every split at least kMinSplitPositions long, within the
  // partials the scratch holds.
  int splits = 1, chunk = std::max(batch.decode_context, 1);
  if (batch.n_decode > 0) {
    const size_t rows = static_cast<size_t>(batch.n_decode) * n_heads;
    const int budget_splits = static_cast<int>(std::max<size_t>(1, kMaxPartials / rows));
    splits = std::max(1, std::min((batch.decode_context + kMinSplitPositions - 1) / kMinSplitPositions, budget_splits));
    chunk = (batch.decode_context + splits - 1) / splits;
    splits = (batch.decode_context + chunk - 1) / chunk;
    if (splits > 1) {
      scratch.partials.resize(attention_scratch_bytes(n_heads, pool.head_dim));
      partials = scratch.partials.as<float>();
    }
  }
  auto launch = [&]<int HD>() {
    dispatch_kv_element(pool.element, [&]<KvElement E>() {
      if (batch.n_decode > 0) {
        const dim3 grid(batch.n_decode, pool.n_kv_heads, splits);
        attention_decode_kernel<HD, E><<<grid, group * 32, 0, s>>>(qkv, ld, n_heads, batch, pool, layer, chunk, splits,
                                                                   scale, partials, out);
        if (splits > 1)
          merge_splits_kernel<HD><<<static_cast<unsigned>(batch.n_decode * n_heads), HD, 0, s>>>(
              partials, splits, n_heads, batch.decode_tokens, out);
      }
      if (batch.n_tiles > 0) {
        const dim3 grid(batch.n_tiles, pool.n_kv_heads);
        attention_tile_kernel<HD, E><<<grid, kTileThreads, 0, s>>>(qkv, ld, n_heads, batch, pool, layer, scale, out);
      }
    });
  };
  switch (pool.head_dim) {
    case 64: return launch.template operator()<64>();
    case 128: return launch.template operator()<128>();
    case 256: return launch.template operator()<256>();
    default: cuda_fail("attention: head size " + std::to_string(pool.head_dim) + " has no CUDA kernel (64, 128, 256)");
  }
}

}  // namespace splash::kernels::cuda
