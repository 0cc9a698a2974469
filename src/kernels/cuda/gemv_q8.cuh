#pragma once
// The main loop of the GEMV of integer weight types, shared by the plain GEMV (matmul.cu)
// and the GEMVs with their consumer fused in (gemv_fused.cu): a warp's dot products of R
// weight rows with up to M int8 activation rows (activation_q8.cuh), each lane holding its
// share until the caller sums them over the warp.
#include <cuda_runtime.h>

#include "kernels/cuda/activation_q8.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {

template <typename B>
__device__ __forceinline__ float run_dp4a(const CodeRun& r, const uint4 x, float x_scale, float x_sum) {
  int dot = __dp4a(static_cast<int>(r.q[0]), static_cast<int>(x.x), 0);
  dot = __dp4a(static_cast<int>(r.q[1]), static_cast<int>(x.y), dot);
  dot = __dp4a(static_cast<int>(r.q[2]), static_cast<int>(x.z), dot);
  dot = __dp4a(static_cast<int>(r.q[3]), static_cast<int>(x.w), dot);
  float s = r.d * x_scale * static_cast<float>(dot);
  if constexpr (B::kHasMin) s = fmaf(r.m, x_sum, s);
  return s;
}

// Each lane walks the rows' parts (32 weights each) 32 apart, U parts at a time: all U x R
// parts' weight loads are issued before any is decoded, so enough bytes are in flight to
// cover the memory latency; each part's codes are decoded once and serve all M activation
// rows, whose int8 codes every warp of the SM reads through L1. The rows need not be
// adjacent (a SwiGLU block pairs gate and up rows). Returns having waited for the kernel's
// inputs (griddepcontrol.wait): the first weights are loaded before, the activations after.
template <GgmlType T, int M, int R, int U>
__device__ __forceinline__ void warp_dot_q8(const Rows<T>& w, const int (&row)[R], const QuantizedRows& x, int n,
                                            int lane, float (&acc)[M][R]) {
  using B = Block<T>;
  const int parts = x.cols / B::kElements * B::kParts, groups = x.cols / kQ8Group;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  bool waited = false;
  for (int base = lane; base < parts; base += 32 * U) {
    typename B::Raw raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int part = min(base + 32 * u, parts - 1);  // past the end: a repeat, not used
      const int block = part / B::kParts, p = part % B::kParts;
#pragma unroll
      for (int r = 0; r < R; ++r) raw[u][r] = B::load(w.quants(row[r], block), w.header(row[r], block), p);
    }
    if (!waited) wait_for_inputs(), waited = true;  // the first weights are on their way: now x
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int part = base + 32 * u;
      if (part >= parts) break;
      const int block = part / B::kParts, p = part % B::kParts;
      int pa, pb;
      B::columns(p, pa, pb);
      const int ca = block * B::kElements + pa, cb = block * B::kElements + pb;
      CodeRun a[R], b[R];
#pragma unroll
      for (int r = 0; r < R; ++r) B::codes(raw[u][r], p, a[r], b[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int t = m < n ? m : 0;
        const int8_t* codes = x.codes + static_cast<size_t>(t) * x.cols;
        const float* scales = x.scales + static_cast<size_t>(t) * groups;
        const float* sums = x.sums + static_cast<size_t>(t) * groups;
        // Plain loads, not __ldg: the kernel before wrote these while this one was already
        // running (launch.cuh), and the non-coherent read-only path is only for data that
        // stays unchanged for a kernel's whole life (with it, batch-1 decode read stale codes
        // run-dependently: CudaModelTest.BatchOneDecodeIsRepeatable).
        const uint4 xa = *reinterpret_cast<const uint4*>(codes + ca);
        const uint4 xb = *reinterpret_cast<const uint4*>(codes + cb);
        const float da = scales[ca / kQ8Group], db = scales[cb / kQ8Group];
        const float sa = B::kHasMin ? sums[ca / kQ8Group] : 0.0f;
        const float sb = B::kHasMin ? sums[cb / kQ8Group] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] += run_dp4a<B>(a[r], xa, da, sa) + run_dp4a<B>(b[r], xb, db, sb);
      }
    }
  }
  if (!waited) wait_for_inputs();  // (a row shorter than one pass)
}

// Rows first .. first + count - 1 of a quantized copy, as a copy of their own.
__host__ __device__ inline QuantizedRows offset_rows(QuantizedRows q, int first, int count) {
  const int groups = q.cols / kQ8Group;
  return {q.codes + static_cast<size_t>(first) * q.cols, q.scales + static_cast<size_t>(first) * groups,
          q.sums + static_cast<size_t>(first) * groups, count, q.cols,
          q.sumsq ? q.sumsq + static_cast<size_t>(first) * groups : nullptr, q.norm_eps};
}

// Sums each lane's shares over the warp (every lane ends with the sums).
template <int M, int R>
__device__ __forceinline__ void warp_sum_all(float (&acc)[M][R]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[m][r] += __shfl_xor_sync(0xFFFFFFFFu, acc[m][r], offset);
}

// Activations whose RMSNorm is pending (QuantizedRows::sumsq): 1 / rms of each of the M rows,
// from the groups' sums of squares (summed in the same order by every warp); 1 otherwise.
template <int M>
__device__ __forceinline__ void pending_norm_factors(const QuantizedRows& x, int n, int lane, float (&factor)[M]) {
  const int groups = x.cols / kQ8Group;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    factor[m] = 1.0f;
    if (!x.sumsq || m >= n) continue;
    float sum = 0.0f;
    for (int g = lane; g < groups; g += 32) sum += x.sumsq[static_cast<size_t>(m) * groups + g];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
    factor[m] = rsqrtf(sum / static_cast<float>(x.cols) + x.norm_eps);
  }
}

}  // namespace splash::kernels::cuda
