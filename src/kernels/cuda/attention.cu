// Paged attention over the GPU KV pool. Decode tokens: a thread block per (token, kv head,
// context split), one warp per query head of the group, so the group's heads read each K/V
// row together; long contexts are split (Flash-Decoding) and merged by log-sum-exp. Tokens of
// longer slices (prompt chunks, verify blocks): tiles of consecutive tokens that share each
// K/V block through shared memory.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels/cuda/activation_q8.cuh"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/qkv_epilogue.cuh"

namespace splash::kernels::cuda {
namespace {

// The partial results a launch may keep: (token, head, split) triples.
constexpr size_t kMaxPartials = size_t{1} << 17;
constexpr int kMinSplitPositions = 64;  // short splits: decode is latency-bound per split
constexpr int kSmallestContextBucket = 256;
constexpr int kDecodeBlocksPerSm = 4;  // decode blocks that fill the GPU about once

// The positions of each of a decode token's `splits` splits: its own context shared out
// (whole KV blocks, at least kMinSplitPositions), worked out on the device from its length,
// so every split is busy at any context of the launch's bucket (splits shaped for the bucket
// itself left half of them empty just past a power of two: 32K + a few tokens is in the
// 64K bucket).
__device__ __forceinline__ int split_positions(int length, int splits) {
  const int even = (length + splits - 1) / splits;
  return max(kMinSplitPositions, (even + kKvBlockTokens - 1) / kKvBlockTokens * kKvBlockTokens);
}

// Decode: a thread block per (token, kv head, up to kDecodeHeads query heads of its group,
// context split). Every lane holds D dimensions of all those heads' queries; a K or V row is
// read by HD / D lanes (16-byte or smaller vector loads), so one warp load covers several
// positions and each K/V element is loaded and converted once for every head of the group
// (the grouped-query saving). Each warp walks its share of the split's positions, kUnroll
// loads in flight per lane, with an online softmax per (head, row group); row groups and
// warps are merged by log-sum-exp at the end.
constexpr int kDecodeWarps = 4;
constexpr int kDecodeHeads = 8;  // query heads one block holds (larger groups: more blocks)

template <int HD, int G>
constexpr int decode_dims() {  // dimensions per lane: q and acc registers stay near 2 x 32
  constexpr int d = G <= 2 ? 16 : G <= 4 ? 8 : 4;
  return d > HD / 32 ? d : HD / 32;
}

template <int Bytes>
struct Words {
  uint32_t w[Bytes / 4];
};
template <int Bytes>
__device__ __forceinline__ Words<Bytes> load_words(const uint8_t* p) {
  Words<Bytes> r;
  if constexpr (Bytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < Bytes / 16; ++i) reinterpret_cast<uint4*>(r.w)[i] = reinterpret_cast<const uint4*>(p)[i];
  } else if constexpr (Bytes == 8) {
    *reinterpret_cast<uint2*>(r.w) = *reinterpret_cast<const uint2*>(p);
  } else {
    r.w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
  return r;
}

// D elements as floats. int8: the byte under 2^23's exponent (a byte permute), less
// 2^23 + 128 (exact), instead of the quarter-rate integer-to-float unit.
template <KvElement E, int D>
__device__ __forceinline__ void kv_floats(const Words<D * sizeof(typename KvElementOf<E>::type)>& r, float (&f)[D]) {
  if constexpr (E == KvElement::I8) {
#pragma unroll
    for (int i = 0; i < D / 4; ++i) {
      const uint32_t biased = r.w[i] ^ 0x80808080u;
#pragma unroll
      for (int b = 0; b < 4; ++b) f[4 * i + b] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7440 | b)) - 8388736.0f;
    }
  } else if constexpr (E == KvElement::F16) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) {
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&r.w[i]));
      f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < D; ++i) f[i] = __uint_as_float(r.w[i]);
  }
}

// Merges running softmax state (max, sum, acc) with another's.
template <int D>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&acc)[D], float m2, float l2, const float (&acc2)[D]) {
  const float best = fmaxf(m, m2);
  const float f = best == -INFINITY ? 0.0f : __expf(m - best), f2 = best == -INFINITY ? 0.0f : __expf(m2 - best);
  l = l * f + l2 * f2;
#pragma unroll
  for (int d = 0; d < D; ++d) acc[d] = acc[d] * f + acc2[d] * f2;
  m = best;
}

template <int HD, KvElement E, int G>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    attention_decode_kernel(const float* qkv, int ld, int n_heads, BatchLayout batch, KvPool pool,
                            int layer, int splits, float scale, float* __restrict__ partials,
                            float* __restrict__ out) {
  constexpr int D = decode_dims<HD, G>(), kLanesPerRow = HD / D, kRows = 32 / kLanesPerRow;
  using Element = typename KvElementOf<E>::type;
  constexpr int kBytes = D * static_cast<int>(sizeof(Element));
  constexpr int kUnroll = kBytes >= 32 ? 2 : 4;  // loads in flight per lane (wide float rows: fewer)
  constexpr int kStep = kRows * kUnroll;          // positions one warp reads per step
  const int group = n_heads / pool.n_kv_heads, head_blocks = (group + G - 1) / G;
  const int index = blockIdx.x, kv_head = blockIdx.y / head_blocks, split = blockIdx.z;
  const int first_head = kv_head * group + (blockIdx.y % head_blocks) * G;
  const int heads = min(G, kv_head * group + group - first_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / kLanesPerRow, first_dim = (lane % kLanesPerRow) * D;
  // The batch's layout is the pass's input, not the kernel before's output: read before the wait.
  const int t = batch.decode_tokens[index];
  const int length = batch.positions[t] + 1;
  const int chunk = split_positions(length, splits);
  const int start = split * chunk, end = min(start + chunk, length);
  const int32_t* table = batch.block_tables + batch.table_offsets[t];
  wait_for_inputs();
  allow_next_launch();

  float q[G][D], acc[G][D], m[G], l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    const float* q_row = qkv + static_cast<size_t>(t) * ld + static_cast<size_t>(first_head + min(h, heads - 1)) * HD;
#pragma unroll
    for (int d = 0; d < D; ++d) q[h][d] = h < heads ? q_row[first_dim + d] * scale : 0.0f, acc[h][d] = 0.0f;
    m[h] = -INFINITY, l[h] = 0.0f;
  }

  for (int p0 = start + warp * kStep; p0 < end; p0 += kDecodeWarps * kStep) {
    Words<kBytes> kr[kUnroll], vr[kUnroll];
    float ks[kUnroll], vs[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * kRows + row;
      valid[u] = p < end;
      const int pc = valid[u] ? p : start;  // past the end: a repeat, masked below
      const int block = table[pc / kKvBlockTokens], slot = pc % kKvBlockTokens;
      const size_t k_index = kv_index(pool, layer, block, 0, kv_head, slot);
      const size_t v_index = kv_index(pool, layer, block, 1, kv_head, slot);
      kr[u] = load_words<kBytes>(pool.data + (k_index + first_dim) * sizeof(Element));
      vr[u] = load_words<kBytes>(pool.data + (v_index + first_dim) * sizeof(Element));
      if constexpr (E == KvElement::I8) {
        ks[u] = pool.scales[kv_scale_index(pool, layer, block, 0, kv_head, slot)];
        vs[u] = pool.scales[kv_scale_index(pool, layer, block, 1, kv_head, slot)];
      } else {
        ks[u] = vs[u] = 1.0f;
      }
    }
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[D];
      kv_floats<E, D>(kr[u], k);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d) dot = fmaf(q[h][d], k[d], dot);
#pragma unroll
        for (int offset = 1; offset < kLanesPerRow; offset *= 2) dot += __shfl_xor_sync(0xFFFFFFFFu, dot, offset);
        s[u][h] = valid[u] ? dot * ks[u] : -INFINITY;
      }
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float best = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) best = fmaxf(best, s[u][h]);
      if (best == -INFINITY) continue;  // nothing seen yet by this row group
      const float correction = __expf(m[h] - best);  // 0 on the first positions
      l[h] *= correction;
#pragma unroll
      for (int d = 0; d < D; ++d) acc[h][d] *= correction;
      m[h] = best;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[D];
      kv_floats<E, D>(vr[u], v);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float w = s[u][h] == -INFINITY ? 0.0f : __expf(s[u][h] - m[h]);
        l[h] += w;
        const float wv = w * vs[u];
#pragma unroll
        for (int d = 0; d < D; ++d) acc[h][d] = fmaf(wv, v[d], acc[h][d]);
      }
    }
  }

  // The warp's row groups (lanes kLanesPerRow apart hold the same dimensions), then the warps.
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int offset = kLanesPerRow; offset < 32; offset *= 2) {
      float other[D];
#pragma unroll
      for (int d = 0; d < D; ++d) other[d] = __shfl_xor_sync(0xFFFFFFFFu, acc[h][d], offset);
      const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m[h], offset), l2 = __shfl_xor_sync(0xFFFFFFFFu, l[h], offset);
      merge_state<D>(m[h], l[h], acc[h], m2, l2, other);
    }
  __shared__ float state[kDecodeWarps][G][HD + 2];
  if (row == 0)
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
      for (int d = 0; d < D; ++d) state[warp][h][first_dim + d] = acc[h][d];
      if (first_dim == 0) state[warp][h][HD] = m[h], state[warp][h][HD + 1] = l[h];
    }
  __syncthreads();
  for (int i = threadIdx.x; i < heads * HD; i += kDecodeWarps * 32) {
    const int h = i / HD, d = i % HD;
    float best = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) best = fmaxf(best, state[w][h][HD]);
    float total = 0.0f, value = 0.0f;
    if (best != -INFINITY)
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float f = __expf(state[w][h][HD] - best);
        total += f * state[w][h][HD + 1];
        value += f * state[w][h][d];
      }
    const int head = first_head + h;
    if (splits == 1) {
      out[static_cast<size_t>(t) * n_heads * HD + static_cast<size_t>(head) * HD + d] = total > 0.0f ? value / total : 0.0f;
      continue;
    }
    // Partial: [max, sum, acc[HD]] per (decode token, head, split), unnormalised.
    float* partial = partials + ((static_cast<size_t>(index) * n_heads + head) * splits + split) * (HD + 2);
    if (d == 0) partial[0] = best, partial[1] = total;
    partial[2 + d] = value;
  }
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

// --- prompt chunks on the tensor cores ----------------------------------------------------
// Flash attention with mma.sync (f16 operands, f32 accumulation) for f16 and int8 pools: a
// thread block per (tile, kv head), a warp per 16 query rows (the tile's tokens x the group's
// heads, as the SIMT kernel lays them out), K/V read 64 positions at a time into shared
// memory as f16 (int8 rows times their scale), scores and the softmax-weighted values kept in
// mma fragments, the softmax online in base 2. The f32 pool (exact checks) keeps the SIMT kernel.
constexpr int kMmaPositions = 64;  // K/V positions per step

template <int HD>
constexpr int mma_warps() { return HD == 64 ? 8 : 4; }  // 16 rows each: the SIMT tile's rows

template <int HD, KvElement E>
__global__ void __launch_bounds__(mma_warps<HD>() * 32)
    attention_tile_mma_kernel(const float* qkv, int ld, int n_heads, BatchLayout batch, KvPool pool,
                              int layer, float scale, float* __restrict__ out) {
  constexpr int kWarps = mma_warps<HD>(), kThreads = kWarps * 32, kRows = kWarps * 16;
  constexpr int kStride = HD + 8;  // halves per shared row: ldmatrix rows fall in distinct banks
  constexpr int kSteps = HD / 16;  // k-steps of q . k
  static_assert(kRows * kStride <= 2 * kMmaPositions * kStride, "q is staged where K and V go");
  __shared__ __align__(16) __half smem[2][kMmaPositions][kStride];  // K, V (q before them)
  __half(*keys)[kStride] = smem[0];
  __half(*values)[kStride] = smem[1];
  __half* staged_q = &smem[0][0][0];

  const int group = n_heads / pool.n_kv_heads;
  wait_for_inputs();
  allow_next_launch();
  const int first = batch.tiles[2 * blockIdx.x], count = batch.tiles[2 * blockIdx.x + 1];
  const int kv_head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int32_t* table = batch.block_tables + batch.table_offsets[first];
  const int last = batch.positions[first + count - 1];

  // The tile's q rows (token r / group, head r % group), scaled by 1/sqrt(d) and log2(e),
  // as f16 in shared memory, then each warp's 16 rows as A fragments in registers.
  for (int i = threadIdx.x; i < kRows * (HD / 4); i += kThreads) {
    const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
    const int token = min(r / group, count - 1), head = kv_head * group + r % group;
    const float4 v = *reinterpret_cast<const float4*>(qkv + static_cast<size_t>(first + token) * ld +
                                                      static_cast<size_t>(head) * HD + d);
    const float f = scale * 1.4426950408889634f;
    *reinterpret_cast<uint2*>(staged_q + r * kStride + d) = make_uint2(pack_half2(v.x * f, v.y * f), pack_half2(v.z * f, v.w * f));
  }
  __syncthreads();
  uint32_t qa[kSteps][4];
  {
    const int m = lane / 8, r = warp * 16 + (m % 2) * 8 + lane % 8;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) ldmatrix_x4(qa[k], staged_q + r * kStride + k * 16 + (m / 2) * 8);
  }
  // This thread's two rows (g and g + 8 of the warp's 16): their positions bound the causal mask.
  int row_pos[2];
  bool row_valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h, token = r / group;
    row_valid[h] = token < count;
    row_pos[h] = batch.positions[first + min(token, count - 1)];
  }
  float o[HD / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  for (int p0 = 0; p0 <= last; p0 += kMmaPositions) {
    __syncthreads();  // q staged, or the previous step's K/V read
    // K and V of positions p0.. as f16: a thread per 16 consecutive elements of a row.
    constexpr int kChunks = HD / 16;
    for (int i = threadIdx.x; i < 2 * kMmaPositions * kChunks; i += kThreads) {
      const int which = i / (kMmaPositions * kChunks), j = i % (kMmaPositions * kChunks);
      const int slot_in_step = j / kChunks, d = (j % kChunks) * 16;
      const int p = p0 + slot_in_step;
      uint32_t halves[8];
      if (p > last) {
#pragma unroll
        for (int k = 0; k < 8; ++k) halves[k] = 0;
      } else {
        const int block = table[p / kKvBlockTokens], slot = p % kKvBlockTokens;
        const size_t index = kv_index(pool, layer, block, which, kv_head, slot) + d;
        if constexpr (E == KvElement::I8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(pool.data + index);
          const float sc = pool.scales[kv_scale_index(pool, layer, block, which, kv_head, slot)];
          const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const uint32_t biased = words[k] ^ 0x80808080u;
            float f[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) f[b] = (__uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7440 | b)) - 8388736.0f) * sc;
            halves[2 * k] = pack_half2(f[0], f[1]), halves[2 * k + 1] = pack_half2(f[2], f[3]);
          }
        } else {
          const uint4* from = reinterpret_cast<const uint4*>(pool.data + index * 2);
          const uint4 a = from[0], b = from[1];
          halves[0] = a.x, halves[1] = a.y, halves[2] = a.z, halves[3] = a.w;
          halves[4] = b.x, halves[5] = b.y, halves[6] = b.z, halves[7] = b.w;
        }
      }
      __half* to = &smem[which][slot_in_step][d];
      reinterpret_cast<uint4*>(to)[0] = make_uint4(halves[0], halves[1], halves[2], halves[3]);
      reinterpret_cast<uint4*>(to)[1] = make_uint4(halves[4], halves[5], halves[6], halves[7]);
    }
    __syncthreads();

    // Scores of the warp's 16 rows against the 64 positions: 8 tiles of 8 positions.
    float sc[kMmaPositions / 8][4] = {};
#pragma unroll
    for (int nt = 0; nt < kMmaPositions / 8; nt += 2)
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4(b, &keys[(nt + m / 2) * 8 + lane % 8][k * 16 + (m % 2) * 8]);
        mma_16x8x16(sc[nt], qa[k], b[0], b[1]);
        mma_16x8x16(sc[nt + 1], qa[k], b[2], b[3]);
      }
    // Causal mask and the online softmax, per row (a row's 64 scores lie in the 4 threads
    // of a quad).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float best = row_max[h];
#pragma unroll
      for (int nt = 0; nt < kMmaPositions / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int p = p0 + nt * 8 + 2 * c + e;
          float& v = sc[nt][2 * h + e];
          if (p > row_pos[h]) v = -INFINITY;
          best = fmaxf(best, v);
        }
      best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, 1));
      best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, 2));
      const float correction = best == -INFINITY ? 1.0f : exp2f(row_max[h] - best);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kMmaPositions / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = sc[nt][2 * h + e];
          v = best == -INFINITY ? 0.0f : exp2f(v - best);
          sum += v;
        }
      row_sum[h] = row_sum[h] * correction + sum;  // the quad's partial sums, added up at the end
      row_max[h] = best;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) o[dt][2 * h] *= correction, o[dt][2 * h + 1] *= correction;
    }
    // o += p . v, the probabilities as A fragments straight from the score fragments.
#pragma unroll
    for (int kk = 0; kk < kMmaPositions / 16; ++kk) {
      const uint32_t pa[4] = {pack_half2(sc[2 * kk][0], sc[2 * kk][1]), pack_half2(sc[2 * kk][2], sc[2 * kk][3]),
                              pack_half2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              pack_half2(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < HD / 8; dt += 2) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4_trans(b, &values[kk * 16 + (m % 2) * 8 + lane % 8][(dt + m / 2) * 8]);
        mma_16x8x16(o[dt], pa, b[0], b[1]);
        mma_16x8x16(o[dt + 1], pa, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float total = row_sum[h];
    total += __shfl_xor_sync(0xFFFFFFFFu, total, 1);
    total += __shfl_xor_sync(0xFFFFFFFFu, total, 2);
    if (!row_valid[h]) continue;
    const int r = warp * 16 + g + 8 * h;
    const int t = first + r / group, head = kv_head * group + r % group;
    const float inverse = total > 0.0f ? 1.0f / total : 0.0f;
    float* row = out + static_cast<size_t>(t) * n_heads * HD + static_cast<size_t>(head) * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt)
      *reinterpret_cast<float2*>(row + dt * 8 + 2 * c) = make_float2(o[dt][2 * h] * inverse, o[dt][2 * h + 1] * inverse);
  }
}

// --- decode tokens on the tensor cores ---------------------------------------------------
// A thread block per (decode token, kv head, context split), a warp per paged KV block (16
// positions) at a time, the warps of a block taking the split's blocks in turn. The group's
// query heads are the 16 rows of mma.sync m16n8k16's A operand: S = Q K^T over the block's
// two 8-position tiles, then O += P V with P straight from S's fragments. A dot product does
// not care in which order its dimensions are summed, so each thread's dimensions are
// permuted to be contiguous in memory: for K, a quarter of the row of one position of each
// tile (logical k 2c, 2c+1, 2c+8, 2c+9 of step s are its dimensions 4s..4s+3); for V, an
// eighth of the rows of its four positions (its output column n of tile t is dimension
// n * HD / 8 + t). So every load is a contiguous vector, and each K/V byte is read once for
// the whole group. int8 K enters the product as its integer codes (exact in f16), its scale
// multiplying the scores; int8 V is scaled into f16 as it is converted (as in the prefill
// kernel). The loads of the warp's next blocks are issued before the current one is
// computed (registers: cp.async through shared memory measured slower, 48 against 31 us at
// 32K positions).
constexpr int kMmaDecodeWarps = 4;

template <int Bytes>
struct Vec {  // Bytes of one contiguous run, as 32-bit words
  uint32_t w[Bytes / 4];
};
template <int Bytes>
__device__ __forceinline__ void load_vec(Vec<Bytes>& v, const uint8_t* p) {
  static_assert(Bytes % 8 == 0, "runs of 8 bytes or more");
  if constexpr (Bytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < Bytes / 16; ++i) reinterpret_cast<uint4*>(v.w)[i] = reinterpret_cast<const uint4*>(p)[i];
  } else {
    *reinterpret_cast<uint2*>(v.w) = *reinterpret_cast<const uint2*>(p);
  }
}

// Two int8 codes (bytes lo and lo + 1 of `word`, already biased by 128) as exact f16 values:
// each under 1024's exponent (1024 + code), less 1024 + 128.
__device__ __forceinline__ uint32_t biased_bytes_to_half2(uint32_t biased, int selector) {
  const uint32_t h = __byte_perm(biased, 0x64646464u, selector);
  const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)));
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <int HD, KvElement E>
struct DecodeBlockLoads {
  using Element = typename KvElementOf<E>::type;
  static constexpr int kKBytes = HD / 4 * static_cast<int>(sizeof(Element));  // one position's part of K
  static constexpr int kVBytes = HD / 8 * static_cast<int>(sizeof(Element));  // one position's part of V
  Vec<kKBytes> k[2];  // positions g and 8 + g
  Vec<kVBytes> v[4];  // positions 2c, 2c + 1, 8 + 2c, 9 + 2c
  float2 k_scale[2], v_scale[2];  // positions (2c, 2c + 1) and (8 + 2c, 9 + 2c)

  __device__ __forceinline__ void load(const KvPool& pool, int layer, int block, int kv_head, int g, int c) {
    const uint8_t* keys = pool.data + kv_index(pool, layer, block, 0, kv_head, 0) * sizeof(Element);
    const uint8_t* values = pool.data + kv_index(pool, layer, block, 1, kv_head, 0) * sizeof(Element);
    constexpr int kRow = HD * static_cast<int>(sizeof(Element));
#pragma unroll
    for (int j = 0; j < 2; ++j) load_vec(k[j], keys + (8 * j + g) * kRow + c * kKBytes);
#pragma unroll
    for (int j = 0; j < 4; ++j) load_vec(v[j], values + (8 * (j / 2) + 2 * c + j % 2) * kRow + g * kVBytes);
    if constexpr (E == KvElement::I8) {
      const float* ks = pool.scales + kv_scale_index(pool, layer, block, 0, kv_head, 0);
      const float* vs = pool.scales + kv_scale_index(pool, layer, block, 1, kv_head, 0);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        k_scale[j] = *reinterpret_cast<const float2*>(ks + 8 * j + 2 * c);
        v_scale[j] = *reinterpret_cast<const float2*>(vs + 8 * j + 2 * c);
      }
    }
  }
  // K's B fragment of q.k step s for the tile of position j * 8 + g.
  __device__ __forceinline__ void k_fragment(int j, int s, uint32_t& b0, uint32_t& b1) const {
    if constexpr (E == KvElement::I8) {
      const uint32_t biased = k[j].w[s] ^ 0x80808080u;
      b0 = biased_bytes_to_half2(biased, 0x4140);
      b1 = biased_bytes_to_half2(biased, 0x4342);
    } else {
      b0 = k[j].w[2 * s], b1 = k[j].w[2 * s + 1];
    }
  }
  // V's B fragments of p.v for every output tile: b[t][0] positions (2c, 2c + 1), b[t][1]
  // positions (8 + 2c, 9 + 2c), dimension g * HD / 8 + t.
  __device__ __forceinline__ void v_fragments(uint32_t (&b)[HD / 8][2]) const {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const Vec<kVBytes>&a = v[2 * j], &n = v[2 * j + 1];
      if constexpr (E == KvElement::I8) {
        const __half2 scale = __floats2half2_rn(v_scale[j].x, v_scale[j].y);
#pragma unroll
        for (int w = 0; w < kVBytes / 4; ++w) {
          const uint32_t x = a.w[w] ^ 0x80808080u, y = n.w[w] ^ 0x80808080u;
          const uint32_t lo = __byte_perm(x, y, 0x5140), hi = __byte_perm(x, y, 0x7362);  // (x, y) byte pairs
          const uint32_t pairs[4] = {biased_bytes_to_half2(lo, 0x4140), biased_bytes_to_half2(lo, 0x4342),
                                     biased_bytes_to_half2(hi, 0x4140), biased_bytes_to_half2(hi, 0x4342)};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const __half2 scaled = __hmul2(*reinterpret_cast<const __half2*>(&pairs[e]), scale);
            b[4 * w + e][j] = *reinterpret_cast<const uint32_t*>(&scaled);
          }
        }
      } else {
#pragma unroll
        for (int w = 0; w < kVBytes / 4; ++w) {
          b[2 * w][j] = __byte_perm(a.w[w], n.w[w], 0x5410);
          b[2 * w + 1][j] = __byte_perm(a.w[w], n.w[w], 0x7632);
        }
      }
    }
  }
};

// The splits of a (decode token, head), merged by one warp (the decode kernel's last split
// to finish does it: no merge kernel): each lane keeps HD / 32 dimensions; the weights as
// merge_splits_kernel works them out; with `codes`, the merged row's int8 copy too (a
// 16-dimension group is 16 / (HD / 32) lanes).
template <int HD>
__device__ __forceinline__ void merge_head_in_warp(const float* partials, int splits, size_t row, int t,
                                                   int n_heads, int head, float* __restrict__ out, int8_t* codes,
                                                   float* scales, float* sums) {
  constexpr int kPer = HD / 32, kGroupLanes = kQ8Group / kPer;
  const int lane = threadIdx.x % 32;
  const float* p = partials + row * splits * (HD + 2);
  float best = -INFINITY;
  for (int s = lane; s < splits; s += 32) best = fmaxf(best, __ldcg(p + s * (HD + 2)));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, offset));
  float total = 0.0f, value[kPer] = {};
#pragma unroll 8
  for (int s = 0; s < splits; ++s) {
    const float* split = p + s * (HD + 2);
    const float sum = __ldcg(split + 1);
    const float w = sum == 0.0f ? 0.0f : __expf(__ldcg(split) - best);  // (an empty split: weight 0)
    total += w * sum;
#pragma unroll
    for (int i = 0; i < kPer; i += 2) {
      const float2 v = __ldcg(reinterpret_cast<const float2*>(split + 2 + lane * kPer + i));
      value[i] += w * v.x, value[i + 1] += w * v.y;
    }
  }
  const size_t at = static_cast<size_t>(t) * n_heads * HD + static_cast<size_t>(head) * HD + lane * kPer;
  float merged[kPer];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    merged[i] = total > 0.0f ? value[i] / total : 0.0f;
    out[at + i] = merged[i];
    amax = fmaxf(amax, fabsf(merged[i]));
  }
  if (codes == nullptr) return;
#pragma unroll
  for (int offset = kGroupLanes / 2; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int q = __float2int_rn(merged[i] * inverse);
    codes[at + i] = static_cast<int8_t>(q);
    sum += q;
  }
#pragma unroll
  for (int offset = kGroupLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  if (lane % kGroupLanes == 0) {
    const size_t group = at / kQ8Group;
    const float group_scale = amax / 127.0f;
    scales[group] = group_scale;
    sums[group] = group_scale * static_cast<float>(sum);
  }
}

template <int HD, KvElement E, bool kTall, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_mma_kernel(const float* qkv, int ld, int n_heads, BatchLayout batch, KvPool pool,
                                int layer, int splits, float scale, float* __restrict__ partials,
                                float* __restrict__ out, unsigned* __restrict__ arrivals, int8_t* codes,
                                float* scales, float* sums, QkvPostArgs post) {
  constexpr int kSteps = HD / 16, kTiles = HD / 8, kKDims = HD / 4;
  constexpr int kRows = kTall ? 16 : 8;  // query heads a block holds (rows g + 8 only when tall)
  const int group = n_heads / pool.n_kv_heads;
  const int heads = min(group, kRows);
  const int index = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  // The batch's layout is the pass's input, not the kernel before's output: read before the wait.
  const int t = batch.decode_tokens[index];
  const int length = batch.positions[t] + 1;
  const int chunk = split_positions(length, splits);  // whole KV blocks
  const int start = split * chunk, end = min(start + chunk, length);
  const int32_t* table = batch.block_tables + batch.table_offsets[t];
  // With `post` (a pass of decode tokens only; attention_takes_qkv_post), the QKV epilogue
  // is done here instead of by qkv_post: every split its group's queries, into shared memory
  // (the QKV rows keep the raw values: other splits read them too), and the split that holds
  // the token's position its new key and value, into the pool before any of its warps loads
  // that block.
  const bool epilogue = post.qkv != nullptr;
  LaneRope<HD> rope;
  if (epilogue) rope.at(post, length - 1, lane);
  wait_for_inputs();
  allow_next_launch();
  __shared__ __align__(16) float queries[kRows][HD];
  if (epilogue) {
    const bool appends = (length - 1) / chunk == split;
    for (int item = warp; item < heads + (appends ? 2 : 0); item += kWarps) {
      const int head = item < heads ? kv_head * group + item : n_heads + (item - heads) * pool.n_kv_heads + kv_head;
      HeadLane<HD> v;
      qkv_epilogue<HD>(post, t, head, lane, rope, v);
      if (item >= heads) {
        append_kv<HD, E>(post, batch, pool, t, length - 1, head, lane, v);
        continue;
      }
#pragma unroll
      for (int j = 0; j < HD / 32; ++j) queries[item][lane * (HD / 32) + j] = v[j];
    }
    __syncthreads();
  }

  // The group's queries (scaled by 1/sqrt(d) and log2(e)) as A fragments: row g holds head g.
  uint32_t qa[kSteps][4];
  {
    const float f = scale * 1.4426950408889634f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g + 8 * h;
      const bool valid = r < group && (kTall || h == 0);
      const float* q = (epilogue ? queries[valid ? r : 0]
                                 : qkv + static_cast<size_t>(t) * ld + static_cast<size_t>(kv_head * group + (valid ? r : 0)) * HD) +
                       c * kKDims;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const float4 v = valid ? *reinterpret_cast<const float4*>(q + 4 * s) : make_float4(0.f, 0.f, 0.f, 0.f);
        qa[s][h] = pack_half2(v.x * f, v.y * f);
        qa[s][2 + h] = pack_half2(v.z * f, v.w * f);
      }
    }
  }

  float o[kTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int first_block = start / kKvBlockTokens, end_block = (end + kKvBlockTokens - 1) / kKvBlockTokens;
  // The loads of the warp's next blocks (kWarps apart) in flight while one is
  // computed: two ahead for int8, one for f16 (twice the bytes a block; more would spill).
  constexpr int kAhead = E == KvElement::I8 ? 2 : 1;
  // The warp's blocks are first_block + warp + i * kWarps, i = 0, 1, ...; lane l
  // holds the id of block i = 32 k + l of the current group of 32, read once for 32 blocks,
  // so a block's K/V loads never wait behind a read of the block table.
  const int warp_blocks = (end_block - first_block - warp + kWarps - 1) / kWarps;
  int ids = 0;
  auto load_block = [&](DecodeBlockLoads<HD, E>& to, int i) {  // i: warp-uniform, increasing
    if (i % 32 == 0) {
      const int mine = i + lane;
      ids = mine < warp_blocks ? table[first_block + warp + mine * kWarps] : 0;
    }
    to.load(pool, layer, __shfl_sync(0xFFFFFFFFu, ids, i % 32), kv_head, g, c);
  };
  DecodeBlockLoads<HD, E> current, next, after;
  if (warp_blocks > 0) load_block(current, 0);
  if (kAhead == 2 && warp_blocks > 1) load_block(next, 1);
  for (int i = 0; i < warp_blocks; ++i) {
    const int kb = first_block + warp + i * kWarps;
    if (i + kAhead < warp_blocks) load_block(kAhead == 2 ? after : next, i + kAhead);
    float sc[2][4] = {};
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        uint32_t b0, b1;
        current.k_fragment(j, s, b0, b1);
        mma_16x8x16(sc[j], qa[s], b0, b1);
      }
    // Scale (int8 keys), mask past the split's end, and the online softmax per row.
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int p = kb * kKvBlockTokens + 8 * j + 2 * c + e;
        const float key_scale = E == KvElement::I8 ? (e ? current.k_scale[j].y : current.k_scale[j].x) : 1.0f;
        sc[j][e] = p < end ? sc[j][e] * key_scale : -INFINITY;
        sc[j][2 + e] = p < end ? sc[j][2 + e] * key_scale : -INFINITY;
      }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float best = fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1]));
      best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, 1));
      best = fmaxf(fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, 2)), row_max[h]);  // finite: slot 0 is in range
      correction[h] = exp2f(row_max[h] - best);
      row_max[h] = best;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) sum += (sc[j][2 * h + e] = exp2f(sc[j][2 * h + e] - best));
      row_sum[h] = row_sum[h] * correction[h] + sum;  // the quad's partial sums, added up at the end
    }
    if (__any_sync(0xFFFFFFFFu, correction[0] != 1.0f || (kTall && correction[1] != 1.0f)))
#pragma unroll
      for (int d = 0; d < kTiles; ++d) {
        o[d][0] *= correction[0], o[d][1] *= correction[0];
        if constexpr (kTall) o[d][2] *= correction[1], o[d][3] *= correction[1];
      }
    const uint32_t pa[4] = {pack_half2(sc[0][0], sc[0][1]), pack_half2(sc[0][2], sc[0][3]),
                            pack_half2(sc[1][0], sc[1][1]), pack_half2(sc[1][2], sc[1][3])};
    uint32_t vb[kTiles][2];
    current.v_fragments(vb);
#pragma unroll
    for (int d = 0; d < kTiles; ++d) mma_16x8x16(o[d], pa, vb[d][0], vb[d][1]);
    current = next;
    if constexpr (kAhead == 2) next = after;
  }

  // The block's warps, merged by log-sum-exp through shared memory: [warp][row][dims, max, sum].
  __shared__ float state[kWarps][kRows][HD + 2];
#pragma unroll
  for (int h = 0; h < (kTall ? 2 : 1); ++h) {
    float total = row_sum[h];
    total += __shfl_xor_sync(0xFFFFFFFFu, total, 1);
    total += __shfl_xor_sync(0xFFFFFFFFu, total, 2);
    float* row = state[warp][g + 8 * h];
#pragma unroll
    for (int d = 0; d < kTiles; ++d) {
      row[(2 * c) * kTiles + d] = o[d][2 * h];
      row[(2 * c + 1) * kTiles + d] = o[d][2 * h + 1];
    }
    if (c == 0) row[HD] = row_max[h], row[HD + 1] = total;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < heads * HD; i += kWarps * 32) {
    const int r = i / HD, d = i % HD;
    float best = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) best = fmaxf(best, state[w][r][HD]);
    float total = 0.0f, value = 0.0f;
    if (best != -INFINITY)
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(state[w][r][HD] - best);
        total += f * state[w][r][HD + 1];
        value += f * state[w][r][d];
      }
    const int head = kv_head * group + r;
    if (splits == 1) {
      out[static_cast<size_t>(t) * n_heads * HD + static_cast<size_t>(head) * HD + d] = total > 0.0f ? value / total : 0.0f;
      continue;
    }
    // The SIMT kernel's partials: [max (natural log), sum, acc[HD]] per (token, head, split).
    float* partial = partials + ((static_cast<size_t>(index) * n_heads + head) * splits + split) * (HD + 2);
    if (d == 0) partial[0] = best * 0.6931471805599453f, partial[1] = total;
    partial[2 + d] = value;
  }
  if (splits == 1 || arrivals == nullptr) return;
  // With `arrivals`, the last of the (token, kv head)'s splits to finish merges its heads, a
  // warp each, in place of merge_splits_kernel; then resets the count for the next launch.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  unsigned* arrived = arrivals + static_cast<size_t>(index) * gridDim.y + kv_head;
  if (threadIdx.x == 0) last = atomicAdd(arrived, 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int r = warp; r < heads; r += kWarps)
    merge_head_in_warp<HD>(partials, splits, static_cast<size_t>(index) * n_heads + kv_head * group + r, t, n_heads,
                           kv_head * group + r, out, codes, scales, sums);
  if (threadIdx.x == 0) *arrived = 0;
}

// Merges a (decode token, head)'s splits, a thread per dimension: each split's weight
// (its max and sum against the best) is worked out once, by one thread, into shared memory,
// so the loop over splits is independent loads of the values only, eight in flight (every
// thread reading every split's max in a dependent loop cost ~2 us a layer at 33 splits).
constexpr int kMaxMergeSplits = 1024;

// With `codes` (a pass of decode tokens only), the merged rows' int8 copy too, as
// quantize_rows makes it (activation_q8.cuh: a group of 16 dimensions never spans two heads),
// so the output projection's GEMV reads it without a kernel of its own.
template <int HD>
__global__ void merge_splits_kernel(const float* partials, int splits, int n_heads,
                                    const int32_t* __restrict__ decode_tokens, float* __restrict__ out,
                                    int8_t* __restrict__ codes, float* __restrict__ scales, float* __restrict__ sums) {
  __shared__ float weight[kMaxMergeSplits];
  __shared__ float warp_best[HD / 32], warp_total[HD / 32];
  const size_t row = blockIdx.x;  // decode token index * n_heads + head
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  wait_for_inputs();
  allow_next_launch();
  const float* p = partials + row * splits * (HD + 2);
  float best = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += HD) best = fmaxf(best, p[s * (HD + 2)]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, offset));
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < HD / 32; ++w) best = fmaxf(best, warp_best[w]);
  float total = 0.0f;
  for (int s = threadIdx.x; s < splits; s += HD) {
    const float* split = p + s * (HD + 2);
    // An empty split (past this token's context) has sum 0 and max -inf: weight 0.
    const float w = split[1] == 0.0f ? 0.0f : __expf(split[0] - best);
    weight[s] = w;
    total += w * split[1];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xFFFFFFFFu, total, offset);
  if (lane == 0) warp_total[warp] = total;
  __syncthreads();
  total = 0.0f;
#pragma unroll
  for (int w = 0; w < HD / 32; ++w) total += warp_total[w];
  float value = 0.0f;
#pragma unroll 8
  for (int s = 0; s < splits; ++s) value += weight[s] * p[s * (HD + 2) + 2 + threadIdx.x];
  const size_t t = decode_tokens[row / n_heads], head = row % n_heads;
  const float merged = total > 0.0f ? value / total : 0.0f;
  const size_t at = t * n_heads * HD + head * HD + threadIdx.x;
  out[at] = merged;
  if (codes == nullptr) return;
  // Group threadIdx.x / 16: its 16 lanes' amax and code sum by shuffles (store_q8_group's
  // arithmetic, so the bytes are quantize_rows' bytes).
  float amax = fabsf(merged);
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  const int q = __float2int_rn(merged * inverse);
  int sum = q;
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  codes[at] = static_cast<int8_t>(q);
  if (lane % kQ8Group == 0) {
    const size_t group = at / kQ8Group;
    const float group_scale = amax / 127.0f;
    scales[group] = group_scale;
    sums[group] = group_scale * static_cast<float>(sum);
  }
}

}  // namespace

// The partials, and an arrival count per (decode token, kv head) for the merge inside the decode kernel.
size_t attention_scratch_bytes(int /*n_heads*/, int head_dim) {
  return kMaxPartials * (head_dim + 2) * sizeof(float) + kMaxPartials * sizeof(unsigned);
}

void reserve_attention(AttentionScratch& scratch, int head_dim, Stream& stream) {
  scratch.partials.resize(kMaxPartials * (head_dim + 2) * sizeof(float));
  if (scratch.arrivals.size() < kMaxPartials * sizeof(unsigned)) {
    scratch.arrivals.resize(kMaxPartials * sizeof(unsigned));
    stream.fill(scratch.arrivals.data(), 0, scratch.arrivals.size());
  }
}

namespace {

// Query tokens a tile holds: 128 / kSplit query rows, over the group's heads.
int tile_tokens(int n_heads, int n_kv_heads, int head_dim) {
  const int rows = kTileThreads / (head_dim / 64);
  return std::max(1, rows / (n_heads / n_kv_heads));
}
}  // namespace

int decode_context_bucket(int context) {
  int bucket = kSmallestContextBucket;
  while (bucket < context) bucket *= 2;
  return bucket;
}

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

namespace {

// The tensor-core decode's launch shape, chosen by tools/gpu_session.sh depth-sweep on an
// H100 (docs/PERF.md, 2026-12-05; Qwen3-8B shape, int8 KV): 8 warps a block for int8 pools
// of head size 128 (+3% at 8K and 32K positions against 4), and the splits merged by the
// kernel's last block instead of a merge kernel (+3% after 512 positions: one launch less).
// Read once; SPLASH_CUDA_DECODE_WARPS=4 and SPLASH_CUDA_FOLD_MERGE=0 give the previous shape
// back (for the next sweep).
struct DecodeShape {
  int warps = 8;
  bool fold_merge = true;
};
const DecodeShape& decode_shape() {
  static const DecodeShape shape = [] {
    DecodeShape e;
    if (const char* v = std::getenv("SPLASH_CUDA_DECODE_WARPS")) e.warps = std::atoi(v) == 4 ? kMmaDecodeWarps : 8;
    if (const char* v = std::getenv("SPLASH_CUDA_FOLD_MERGE")) e.fold_merge = std::atoi(v) != 0;
    return e;
  }();
  return shape;
}

}  // namespace

bool attention_takes_qkv_post(const BatchLayout& batch, const KvPool& pool, int n_heads) {
  static const bool enabled = [] {
    const char* v = std::getenv("SPLASH_CUDA_FOLD_QKV");
    return v == nullptr || std::atoi(v) != 0;
  }();
  // The tensor-core decode kernel's passes (see launch below): decode tokens only, an int8 or
  // f16 pool, head size 64 or 128, groups of up to 16 query heads.
  return enabled && batch.n_tokens > 0 && batch.n_tiles == 0 && batch.n_decode == batch.n_tokens &&
         pool.element != KvElement::F32 && (pool.head_dim == 64 || pool.head_dim == 128) &&
         n_heads % pool.n_kv_heads == 0 && n_heads / pool.n_kv_heads <= 16;
}

bool attention(const float* qkv, int ld, float* out, int n_heads, const BatchLayout& batch, const KvPool& pool,
               int layer, AttentionScratch& scratch, Stream& stream, const QuantizedRowsBuffer* quantized,
               const QkvPostArgs* post) {
  if (batch.n_tokens == 0) return false;
  if (post && !attention_takes_qkv_post(batch, pool, n_heads))
    cuda_fail("attention: asked to do the QKV epilogue in a pass it does not take it in");
  if (post && (post->qkv != qkv || post->ld != ld || post->head_dim != pool.head_dim || post->n_heads != n_heads ||
               !rope_dims_supported(*post)))
    cuda_fail("attention: the QKV epilogue's rows are not the attention's");
  bool epilogue_done = false;
  if (n_heads % pool.n_kv_heads != 0 || n_heads / pool.n_kv_heads > 32)
    cuda_fail("attention: " + std::to_string(n_heads) + " query heads over " + std::to_string(pool.n_kv_heads) +
              " kv heads has no CUDA kernel");
  const int group = n_heads / pool.n_kv_heads;
  if (group > kTileThreads / (pool.head_dim / 64))
    cuda_fail("attention: a group of " + std::to_string(group) + " query heads does not fit a tile");
  const float scale = 1.0f / std::sqrt(static_cast<float>(pool.head_dim));
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  // Decode splits: for the context's bucket (so the launch is the same for every context of
  // the bucket; each token's splits share out its own context, split_positions), as many
  // as keep a split of the bucket at least kMinSplitPositions long, within the partials the
  // scratch holds, and enough thread blocks to fill the GPU about once.
  const int context = decode_context_bucket(batch.decode_context);
  if (batch.splits_as_alone && (batch.n_decode > kFusedLargestBatch || batch.n_tiles > 0 || quantized || post))
    cuda_fail("attention: splits as alone for at most kFusedLargestBatch decode tokens, no tiles, no epilogue");
  if (batch.splits_as_alone && batch.n_decode > 1) {
    // Where the tokens' partials could pass the scratch (many query heads at a long
    // context: up to kMaxMergeSplits splits each), one token a launch.
    const size_t most_splits =
        std::min((decode_context_bucket(batch.decode_context) + kMinSplitPositions - 1) / kMinSplitPositions,
                 kMaxMergeSplits);
    if (most_splits * batch.n_decode * n_heads > kMaxPartials) {
      BatchLayout one = batch;
      one.n_decode = one.n_tokens = 1;
      for (int i = 0; i < batch.n_decode; ++i) {
        one.decode_tokens = batch.decode_tokens + i;
        attention(qkv, ld, out, n_heads, one, pool, layer, scratch, stream);
      }
      return false;
    }
  }
  // (as alone: the thread blocks a split asks for and the partials' budget are one token's)
  const int sized_for = batch.splits_as_alone ? 1 : batch.n_decode;
  auto decode_splits = [&](int blocks_per_token_split, int blocks_per_sm) {
    const int blocks_per_split = sized_for * blocks_per_token_split;
    const size_t rows = static_cast<size_t>(sized_for) * n_heads;
    const int budget_splits = static_cast<int>(std::max<size_t>(1, kMaxPartials / rows));
    const int wanted_splits = std::max(1, blocks_per_sm * multiprocessor_count() / blocks_per_split);
    const int splits = std::max(1, std::min({(context + kMinSplitPositions - 1) / kMinSplitPositions, budget_splits,
                                             wanted_splits, kMaxMergeSplits}));
    if (splits > 1 && static_cast<size_t>(splits) * batch.n_decode * n_heads > kMaxPartials)
      cuda_fail("attention: " + std::to_string(batch.n_decode) + " tokens of " + std::to_string(splits) +
                " splits pass the partials' scratch");
    if (splits > 1) reserve_attention(scratch, pool.head_dim, stream);
    return splits;
  };
  // The int8 copy comes with the merge, in a pass of decode tokens only.
  const bool quantize = quantized != nullptr && batch.n_tiles == 0;
  bool quantized_out = false;
  auto merge = [&]<int HD>(int splits) {
    if (splits <= 1) return;
    launch_dependent(merge_splits_kernel<HD>, dim3(static_cast<unsigned>(batch.n_decode * n_heads)), dim3(HD), s,
                     scratch.partials.as<float>(), splits, n_heads, batch.decode_tokens, out,
                     quantize ? quantized->codes : nullptr, quantize ? quantized->scales : nullptr,
                     quantize ? quantized->sums : nullptr);
    quantized_out = quantize;
  };
  auto launch = [&]<int HD>() {
    dispatch_kv_element(pool.element, [&]<KvElement E>() {
      // Decode tokens: the tensor cores for int8 and f16 pools (groups up to 16 heads, head
      // sizes up to 128); the SIMT kernel for the rest.
      bool decoded = batch.n_decode == 0;
      if constexpr (E != KvElement::F32 && HD <= 128) {
        auto decode = [&]<bool kTall, int kWarps>() {
          static const int per_sm = blocks_per_sm(attention_decode_mma_kernel<HD, E, kTall, kWarps>, kWarps * 32);
          const int splits = decode_splits(pool.n_kv_heads, per_sm);
          const dim3 grid(batch.n_decode, pool.n_kv_heads, splits);
          const bool fold = splits > 1 && decode_shape().fold_merge;
          launch_dependent_as("attention", attention_decode_mma_kernel<HD, E, kTall, kWarps>, grid, dim3(kWarps * 32), 0,
                              s, qkv, ld,
                           n_heads, batch, pool, layer, splits, scale, scratch.partials.as<float>(), out,
                           fold ? scratch.arrivals.as<unsigned>() : nullptr,
                           fold && quantize ? quantized->codes : nullptr, fold && quantize ? quantized->scales : nullptr,
                           fold && quantize ? quantized->sums : nullptr, post ? *post : QkvPostArgs{});
          if (post) epilogue_done = true;
          if (fold) quantized_out = quantize;
          else merge.template operator()<HD>(splits);
        };
        if (!decoded && group <= 8 && E == KvElement::I8 && HD == 128 && decode_shape().warps == 8)
          decode.template operator()<false, 8>(), decoded = true;
        else if (!decoded && group <= 8) decode.template operator()<false, kMmaDecodeWarps>(), decoded = true;
        else if (!decoded && group <= 16) decode.template operator()<true, kMmaDecodeWarps>(), decoded = true;
      }
      if (!decoded) {
        auto decode = [&]<int G>() {
          const int head_blocks = (group + G - 1) / G;
          const int splits = decode_splits(pool.n_kv_heads * head_blocks, kDecodeBlocksPerSm);
          const dim3 grid(batch.n_decode, pool.n_kv_heads * head_blocks, splits);
          launch_dependent(attention_decode_kernel<HD, E, G>, grid, dim3(kDecodeWarps * 32), s, qkv, ld, n_heads, batch,
                           pool, layer, splits, scale, scratch.partials.as<float>(), out);
          merge.template operator()<HD>(splits);
        };
        if (group == 1) decode.template operator()<1>();
        else if (group == 2) decode.template operator()<2>();
        else if (group <= 4) decode.template operator()<4>();
        else decode.template operator()<kDecodeHeads>();
      }
      if (batch.n_tiles > 0) {
        const dim3 grid(batch.n_tiles, pool.n_kv_heads);
        if constexpr (E != KvElement::F32 && HD <= 128)
          launch_dependent(attention_tile_mma_kernel<HD, E>, grid, dim3(mma_warps<HD>() * 32), s, qkv, ld, n_heads,
                           batch, pool, layer, scale, out);
        else
          attention_tile_kernel<HD, E><<<grid, kTileThreads, 0, s>>>(qkv, ld, n_heads, batch, pool, layer, scale, out);
      }
    });
  };
  switch (pool.head_dim) {
    case 64: launch.template operator()<64>(); break;
    case 128: launch.template operator()<128>(); break;
    case 256: launch.template operator()<256>(); break;
    default: cuda_fail("attention: head size " + std::to_string(pool.head_dim) + " has no CUDA kernel (64, 128, 256)");
  }
  if (post && !epilogue_done) cuda_fail("attention: the QKV epilogue was not done");
  return quantized_out;
}

}  // namespace splash::kernels::cuda
