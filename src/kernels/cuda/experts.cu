// The mixture-of-experts FFN's kernels (experts.h): the router's float logits and the top-k
// routing in one launch, the experts' matmuls pair by pair or grouped by expert (the grouped
// GEMM itself is in small_gemm.cu), and the weighted sum back into the residual.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/experts.h"
#include "kernels/cuda/gemv_q8.cuh"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {
namespace {

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

constexpr int kWarps = 4;              // warps of a thread block
constexpr int kPairRows = 2;           // weight rows a warp computes for one pair (sharing its x loads),
constexpr int kPairParts = 4;          // and 32-weight parts a lane loads before decoding any (long rows)
static_assert(kMostExperts <= 32 * 32);  // route_experts: a lane keeps a bit for each of its experts
constexpr int kMostUsed = kMostExpertsUsed;

// A warp's dot product of weight row `row` (a float type) with the float row x over the
// row's 32-weight blocks [first, last), each lane walking them 32 apart; every lane ends with
// the sum (the same order on every run).
template <GgmlType T>
__device__ __forceinline__ float warp_dot_float(const Rows<T>& w, int row, int first, int last,
                                                const float* x, int lane) {
  using B = Block<T>;
  float sum = 0.0f;
  for (int block = first + lane; block < last; block += 32) {
    Run a, b;
    B::decode(w.quants(row, block), w.header(row, block), 0, a, b);
    const float* xb = x + block * B::kElements;
#pragma unroll
    for (int j = 0; j < 16; ++j) sum = fmaf(a.q[j], xb[j], sum);
#pragma unroll
    for (int j = 0; j < 16; ++j) sum = fmaf(b.q[j], xb[16 + j], sum);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  return sum;
}

// One token's routing by one warp, from its row of logits (global or shared memory): the
// probabilities exp(logit - max) (the softmax's sum cancels in the renormalisation, as on
// the CPU), computed once into p (`experts` floats of shared memory the warp has to itself,
// or row itself: each lane reads and writes only its own experts' entries, lane + 32 i); then `used` rounds of a warp-wide
// arg max over the experts not yet taken. Each lane keeps a bit per expert of its own and
// its best one not yet taken as a key that orders like p (p >= 0, so its bits order as
// unsigned; + 1, so 0 means none left); a round is two warp reductions (the best key, then
// the lowest expert holding it), and only the lane that gave its expert looks for its next.
// Lane 0 writes the ids and weights.
__device__ __forceinline__ void route_token(const float* row, float* p, int experts, int used, int lane,
                                            int32_t* __restrict__ ids, float* __restrict__ weights) {
  auto logit = [&](int e) {
    const float v = row[e];
    return isnan(v) ? -INFINITY : v;
  };
  float top = -INFINITY;
  for (int e = lane; e < experts; e += 32) top = fmaxf(top, logit(e));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) top = fmaxf(top, __shfl_xor_sync(0xFFFFFFFFu, top, offset));
  // (a max of +-infinity would make exp's argument NaN: then the infinite ones, or all, alike)
  for (int e = lane; e < experts; e += 32)
    p[e] = top == -INFINITY ? 1.0f : top == INFINITY ? (logit(e) == INFINITY ? 1.0f : 0.0f) : expf(logit(e) - top);
  uint32_t taken = 0;
  unsigned key = 0;
  int key_e = experts;
  auto lane_best = [&] {
    key = 0, key_e = experts;
    for (int i = 0, e = lane; e < experts; ++i, e += 32) {
      if (taken >> i & 1u) continue;
      const unsigned k = __float_as_uint(p[e]) + 1u;
      if (k > key) key = k, key_e = e;  // (a lane's experts ascend: the first of equals stays)
    }
  };
  lane_best();
  float chosen[kMostUsed];
  float sum = 0.0f;
  for (int k = 0; k < used; ++k) {
    const unsigned best = __reduce_max_sync(0xFFFFFFFFu, key);
    const int best_e = static_cast<int>(__reduce_min_sync(0xFFFFFFFFu, key == best ? static_cast<unsigned>(key_e) : ~0u));
    if (best_e == key_e) taken |= 1u << (best_e / 32), lane_best();
    chosen[k] = __uint_as_float(best - 1u);
    sum += chosen[k];
    if (lane == 0) ids[k] = best_e;
  }
  if (lane != 0) return;
  for (int k = 0; k < used; ++k) weights[k] = chosen[k] / sum;
}

// A warp per token (route_experts).
__global__ void __launch_bounds__(kWarps * 32)
    route_kernel(const float* logits, int n, int experts, int used, int32_t* __restrict__ ids,
                 float* __restrict__ weights) {
  __shared__ float p[kWarps][kMostExperts];
  const int warp = threadIdx.x / 32, t = blockIdx.x * kWarps + warp, lane = threadIdx.x % 32;
  wait_for_inputs();
  if (t >= n) return;
  route_token(logits + static_cast<size_t>(t) * experts, p[warp], experts, used, lane,
              ids + static_cast<size_t>(t) * used, weights + static_cast<size_t>(t) * used);
}

// 16-byte loads of a float router row a lane keeps in flight at once (a 2048-wide F32 row
// is 16 a lane).
constexpr int kRouterLoads = 16;

// sum + the 16 bytes of weights w (4 F32 or 8 F16/BF16) . the floats at x (16-byte aligned).
template <GgmlType T>
__device__ __forceinline__ float dot_16_bytes(uint4 w, const float* x, float sum) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  if constexpr (T == GgmlType::F32) {
    const float4 v = *reinterpret_cast<const float4*>(x);
    const float xs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) sum = fmaf(__uint_as_float(words[j]), xs[j], sum);
  } else {
    const float4 v0 = reinterpret_cast<const float4*>(x)[0], v1 = reinterpret_cast<const float4*>(x)[1];
    const float xs[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t b = words[j];
      const float lo = T == GgmlType::F16 ? half_bits(b & 0xFFFF) : __uint_as_float(b << 16);
      const float hi = T == GgmlType::F16 ? half_bits(b >> 16) : __uint_as_float(b & 0xFFFF0000u);
      sum = fmaf(hi, xs[2 * j + 1], fmaf(lo, xs[2 * j], sum));
    }
  }
  return sum;
}

// The router's logits, a warp per expert (kWarps experts a block, blockIdx.y the token): the
// lanes read the expert's row side by side in 16-byte loads, kRouterLoads of them each in
// flight, the first of them issued before waiting for the kernel before (the router is no
// kernel's output, so its read overlaps that kernel's tail). Then the token's routing in the
// last of its blocks to finish: each block counts itself in arrivals[t] after its logits are
// visible device-wide, and the one that brings the count to gridDim.x sets it back to 0 (for
// the next pass, or the next replay of a recorded one) and routes the token from its logits
// read past L1.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32)
    route_tokens_kernel(const uint8_t* w, size_t row_bytes, int experts, int cols, const float* x, int ldx,
                        float* logits, unsigned* __restrict__ arrivals, int used, int32_t* __restrict__ ids,
                        float* __restrict__ weights) {
  __shared__ float row[kMostExperts];
  __shared__ bool last;
  constexpr int kPerLoad = T == GgmlType::F32 ? 4 : 8;  // weights in 16 bytes
  const int t = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32, e = blockIdx.x * kWarps + warp;
  const int loads = cols / kPerLoad;
  const uint4* w_row = reinterpret_cast<const uint4*>(w + row_bytes * min(e, experts - 1));
  uint4 v[kRouterLoads];
  auto load = [&](int first) {
#pragma unroll
    for (int j = 0; j < kRouterLoads; ++j) {
      const int i = first + 32 * j;
      v[j] = e < experts && i < loads ? __ldg(w_row + i) : make_uint4(0, 0, 0, 0);
    }
  };
  load(lane);
  wait_for_inputs();
  float* token_logits = logits + static_cast<size_t>(t) * experts;
  if (e < experts) {
    const float* xt = x + static_cast<size_t>(t) * ldx;
    float sum = 0.0f;
    for (int first = lane;;) {
#pragma unroll
      for (int j = 0; j < kRouterLoads; ++j) {
        const int i = first + 32 * j;
        if (i < loads) sum = dot_16_bytes<T>(v[j], xt + kPerLoad * i, sum);
      }
      first += 32 * kRouterLoads;
      if (first - lane >= loads) break;
      load(first);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
    if (lane == 0) {
      token_logits[e] = sum;
      __threadfence();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&arrivals[t], 1u) == gridDim.x - 1;
    if (last) {
      __threadfence();  // (the other blocks' logits, fenced before their counts, are read after this one)
      arrivals[t] = 0;
    }
  }
  __syncthreads();
  if (!last) return;
  for (int i = threadIdx.x; i < experts; i += blockDim.x) row[i] = __ldcg(token_logits + i);
  __syncthreads();
  // (p may be row itself: each lane reads and writes only its own experts' entries)
  if (warp == 0)
    route_token(row, row, experts, used, lane, ids + static_cast<size_t>(t) * used,
                weights + static_cast<size_t>(t) * used);
}

// Integer types: a warp computes R rows of pair blockIdx.y's expert against its activation
// row's int8 copy (the GEMV's loop, gemv_q8.cuh, U parts a lane at a time). Short rows take
// more rows a warp and fewer parts a lane (expert_q8_shape): a lane's loads are the rows'
// parts, and a 768-wide Q4_K row has only 24 for 32 lanes. The sums do not depend on R or U.
template <GgmlType T, int R, int U>
__global__ void __launch_bounds__(kWarps * 32)
    expert_q8_kernel(const uint8_t* __restrict__ data, size_t expert_bytes, int rows, QuantizedRows x, int x_divisor,
                     const int32_t* ids, float* __restrict__ y, int ldy, int first_pair) {
  const int pair = first_pair + blockIdx.y, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * kWarps + threadIdx.x / 32) * R;
  if (row0 >= rows) return;
  wait_for_inputs();  // (the expert's id is an input: nothing can be loaded before it)
  const Rows<T> w{data + expert_bytes * ids[pair], RowLayout<T>::row_bytes(x.cols), RowLayout<T>::quant_bytes(x.cols)};
  int row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row[r] = min(row0 + r, rows - 1);
  float acc[1][R];
  warp_dot_q8<T, 1, R, U>(w, row, offset_rows(x, pair / x_divisor, 1), 1, lane, acc);
  warp_sum_all(acc);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (row0 + r < rows) y[static_cast<size_t>(pair) * ldy + row0 + r] = acc[0][r];
}

// Float types: a warp per row of pair blockIdx.y's expert.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32)
    expert_float_kernel(const uint8_t* __restrict__ data, size_t expert_bytes, int rows, int cols,
                        const float* x, int ldx, int x_divisor, const int32_t* ids,
                        float* __restrict__ y, int ldy, int first_pair) {
  const int pair = first_pair + blockIdx.y, lane = threadIdx.x % 32, row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  wait_for_inputs();
  const Rows<T> w{data + expert_bytes * ids[pair], RowLayout<T>::row_bytes(cols), RowLayout<T>::quant_bytes(cols)};
  const float sum = warp_dot_float<T>(w, row, 0, cols / Block<T>::kElements, x + static_cast<size_t>(pair / x_divisor) * ldx,
                                      lane);
  if (lane == 0) y[static_cast<size_t>(pair) * ldy + row] = sum;
}

// A thread per (token, column): x += the pairs' weighted rows, in ascending expert order
// (equal ids, which routing never makes, in pair order): the block's first threads rank the
// token's pairs once, then each thread adds them up in that order.
__global__ void combine_kernel(const float* y, int ldy, const int32_t* y_rows,
                               const int32_t* ids, const float* weights, int used, int d,
                               float* __restrict__ x) {
  __shared__ int order[kMostUsed];
  const int t = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  wait_for_inputs();
  const int32_t* mine = ids + static_cast<size_t>(t) * used;
  if (threadIdx.x < used) {
    const int k = threadIdx.x, id = mine[k];
    int rank = 0;
    for (int i = 0; i < used; ++i) rank += mine[i] < id || (mine[i] == id && i < k);
    order[rank] = k;
  }
  __syncthreads();
  if (j >= d) return;
  float* out = x + static_cast<size_t>(t) * d + j;
  float acc = *out;
  for (int step = 0; step < used; ++step) {
    const int pair = t * used + order[step];
    acc = fmaf(weights[pair], y[static_cast<size_t>(y_rows ? y_rows[pair] : pair) * ldy + j], acc);
  }
  *out = acc;
}

// One block of kGroupThreads: counts a row per pair in shared memory, turns the counts
// into starts and tiles (thread 0: a few hundred entries), then places every pair.
constexpr int kGroupThreads = 1024;
__global__ void __launch_bounds__(kGroupThreads)
    group_kernel(const int32_t* ids, int pairs, int experts, int used, int tile_rows, ExpertGroups g) {
  __shared__ int count[kMostExperts], cursor[kMostExperts];
  wait_for_inputs();
  for (int e = threadIdx.x; e < experts; e += kGroupThreads) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kGroupThreads) atomicAdd(&count[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int start = 0, tiles = 0;
    for (int e = 0; e < experts; ++e) {
      g.start[e] = cursor[e] = start;
      for (int r = 0; r < count[e]; r += tile_rows, ++tiles) {
        int32_t* tile = g.tiles + 4 * tiles;
        tile[0] = e, tile[1] = start + r, tile[2] = min(tile_rows, count[e] - r), tile[3] = 0;
      }
      start += count[e];
    }
    g.start[experts] = start;
    *g.tile_count = tiles;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kGroupThreads) {
    const int row = atomicAdd(&cursor[ids[p]], 1);
    g.place[p] = row;
    g.token_of_row[row] = p / used;
    g.expert_of_row[row] = ids[p];
  }
}

void check_routing(int experts, int used) {
  if (experts < 1 || experts > kMostExperts || used < 1 || used > kMostUsed || used > experts)
    cuda_fail("routing: " + std::to_string(used) + " of " + std::to_string(experts) + " experts (at most 32 of 1024)");
}

}  // namespace

size_t expert_groups_bytes(int pairs, int experts, int tile_rows) {
  return sizeof(int32_t) * (static_cast<size_t>(experts) + 1 + 3 * static_cast<size_t>(pairs) +
                            4 * static_cast<size_t>(most_expert_tiles(pairs, experts, tile_rows)) + 1);
}

ExpertGroups expert_groups_in(void* buffer, int pairs, int experts, int tile_rows) {
  auto* at = static_cast<int32_t*>(buffer);
  ExpertGroups g;
  g.tiles = at, at += 4 * static_cast<size_t>(most_expert_tiles(pairs, experts, tile_rows));  // (16-byte aligned)
  g.start = at, at += experts + 1;
  g.token_of_row = at, at += pairs;
  g.expert_of_row = at, at += pairs;
  g.place = at, at += pairs;
  g.tile_count = at;
  return g;
}

int expert_tile_rows(int pairs, int experts) {
  const int per_expert = (pairs + experts - 1) / std::max(experts, 1);
  return per_expert <= 8 ? 8 : per_expert <= 16 ? 16 : per_expert <= 32 ? 32 : 64;
}

void group_pairs(const int32_t* ids, int pairs, int experts, int used, int tile_rows, const ExpertGroups& groups,
                 Stream& stream) {
  if (pairs <= 0) return;
  if (experts < 1 || experts > kMostExperts || used < 1 || tile_rows < 1)
    cuda_fail("group_pairs: " + std::to_string(experts) + " experts (1 to 1024), " + std::to_string(used) +
              " a token, tiles of " + std::to_string(tile_rows) + " rows");
  launch_dependent(group_kernel, dim3(1), dim3(kGroupThreads), raw(stream), ids, pairs, experts, used, tile_rows, groups);
}

void route_tokens(const DeviceWeight& router, const float* x, int ldx, int n, int used, const RoutingScratch& scratch,
                  int32_t* ids, float* weights, Stream& stream) {
  if (n <= 0) return;
  if (router.type != GgmlType::F32 && router.type != GgmlType::F16 && router.type != GgmlType::BF16)
    cuda_fail("route_tokens: a router must be F32, F16 or BF16");
  check_routing(router.rows, used);
  if (n > scratch.tokens) cuda_fail("route_tokens: " + std::to_string(n) + " tokens, scratch for " + std::to_string(scratch.tokens));
  if (router.cols % 32 != 0 || ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    cuda_fail("route_tokens: router rows of " + std::to_string(router.cols) + " (a multiple of 32) over 16-byte-aligned rows of x");
  const dim3 grid((router.rows + kWarps - 1) / kWarps, n);
  dispatch_weight_type(router.type, [&]<GgmlType T>() {
    if constexpr (!Block<T>::kPacked)
      launch_dependent(route_tokens_kernel<T>, grid, dim3(kWarps * 32), raw(stream), router.data,
                       RowLayout<T>::row_bytes(router.cols), router.rows, router.cols, x, ldx, scratch.logits,
                       scratch.arrivals, used, ids, weights);
  });
}

void route_experts(const float* logits, int n, int experts, int used, int32_t* ids, float* weights, Stream& stream) {
  if (n <= 0) return;
  check_routing(experts, used);
  launch_dependent(route_kernel, dim3((n + kWarps - 1) / kWarps), dim3(kWarps * 32), raw(stream), logits, n, experts,
                   used, ids, weights);
}

void expert_matmul(const ExpertWeights& w, const float* x, int ldx, const QuantizedRows* xq, int x_divisor,
                   const int32_t* ids, int pairs, float* y, int ldy, Stream& stream) {
  constexpr int kMostGridY = 65535;  // pairs a launch takes (grid.y)
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    for (int first = 0; first < pairs; first += kMostGridY) {
      const int count = std::min(kMostGridY, pairs - first);
      if constexpr (Block<T>::kPacked) {
        if (!xq || xq->cols != w.cols || xq->sumsq) cuda_fail("expert_matmul: the int8 activations do not match");
        // Rows a warp and parts a lane at a time by the row's parts (32 weights each): a
        // lane's loads in flight are R x U, with few of them repeats past the row's end.
        const int parts = w.cols / Block<T>::kElements * Block<T>::kParts;
        auto launch = [&]<int R, int U>() {
          const int per_block = kWarps * R;
          launch_dependent(expert_q8_kernel<T, R, U>, dim3((w.rows + per_block - 1) / per_block, count),
                           dim3(kWarps * 32), raw(stream), w.data, w.expert_bytes(), w.rows, *xq, x_divisor, ids, y,
                           ldy, first);
        };
        if (parts <= 32)
          launch.template operator()<8, 1>();
        else if (parts <= 64)
          launch.template operator()<4, 2>();
        else
          launch.template operator()<kPairRows, kPairParts>();
      } else {
        launch_dependent(expert_float_kernel<T>, dim3((w.rows + kWarps - 1) / kWarps, count), dim3(kWarps * 32),
                         raw(stream), w.data, w.expert_bytes(), w.rows, w.cols, x, ldx, x_divisor, ids, y, ldy, first);
      }
    }
  });
}

void combine_experts(const float* y, int ldy, const int32_t* y_rows, const int32_t* ids, const float* weights, int n,
                     int used, int d, float* x, Stream& stream) {
  if (n <= 0) return;
  if (used < 1 || used > kMostUsed) cuda_fail("combine_experts: " + std::to_string(used) + " pairs a token (1 to 32)");
  constexpr int kThreads = 256;
  launch_dependent(combine_kernel, dim3((d + kThreads - 1) / kThreads, n), dim3(kThreads), raw(stream), y, ldy, y_rows,
                   ids, weights, used, d, x);
}

}  // namespace splash::kernels::cuda
