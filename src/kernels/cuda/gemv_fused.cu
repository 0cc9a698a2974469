// GEMVs of integer weight types with the kernel that would follow them fused in (ops.h
// gemv_residual_norm, gemv_swiglu), for batch-1 decode and for verify rows (up to 8). At
// batch 1 a layer was nine launches, and each small kernel between two GEMVs costs a launch,
// a wait for the GEMV before it to drain and a trip of its rows through memory. Here a thread block finishes 16 consecutive outputs (one
// int8 group of the next input), so it can write that group's codes itself: after the
// output projection and the down projection, x += w . in and the next RMSNorm's input (its
// 1/rms left pending for the next GEMV: ops.h QuantizedRows::sumsq); after gate/up, SwiGLU.
// The main loop is the plain GEMV's (gemv_q8.cuh), in the weight's plain GEMV shape (its rows
// a warp and parts in flight). At 2-4 rows the fused kernels measured slower than the
// kernel-per-step layer (docs/PERF.md, 2026-12-04), so batched decode does not take them;
// verify rows do, as the bits of batch-1 decode (ops.h kFusedLargestBatch).
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/activation_q8.cuh"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/gemv_q8.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {
namespace {

constexpr int kUnits = kQ8Group;  // outputs a thread block finishes: one group of the next input

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

// What a block does with its 16 finished outputs.
struct FusedOut {
  float* x = nullptr;            // residual: the stream added to (units wide)
  const float* norm = nullptr;   // residual: the next RMSNorm's weight, or null
  QuantizedRowsBuffer codes{};   // the next input's int8 copy (+ sums of squares, residual)
};

// W warps of R rows each, up to M activation rows, a block per 16 outputs. Residual: the
// block's 16 rows, R = 16 / W consecutive ones a warp. SwiGLU: the block's units u, a warp
// R / 2 of them, each as its gate row u and up row units + u. Then the first warp finishes
// the block: lane j < 16 its output j of each activation row. Every activation row's outputs
// are the same bits whatever M and n are (warp_dot_q8 sums a row's parts in one order, and
// each row is finished alone): verify rows computed by these are batch-1 decode's bits.
template <GgmlType T, int M, int W, int R, int U, bool kSwiGlu>
__global__ void __launch_bounds__(W * 32) gemv_fused_kernel(Rows<T> w, int units, QuantizedRows in, FusedOut out) {
  static_assert(W * R == (kSwiGlu ? 2 : 1) * kUnits);
  constexpr int kWarpUnits = kSwiGlu ? R / 2 : R;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = blockIdx.x, unit0 = group * kUnits, n = in.n;
  int row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int unit = unit0 + warp * kWarpUnits + r % kWarpUnits;
    row[r] = kSwiGlu && r >= kWarpUnits ? units + unit : unit;
  }
  float acc[M][R];
  warp_dot_q8<T, M, R, U>(w, row, in, n, lane, acc);
  allow_next_launch();
  warp_sum_all(acc);
  __shared__ float finished[M][kSwiGlu ? 2 * kUnits : kUnits];  // [gate | up] for SwiGLU
  if (lane == 0)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r)
        finished[m][(r >= kWarpUnits ? kUnits : 0) + warp * kWarpUnits + r % kWarpUnits] = acc[m][r];
  __syncthreads();
  if (warp != 0) return;
  float factor[M];
  pending_norm_factors<M>(in, n, lane, factor);
  if (lane >= kUnits) return;
  const int unit = unit0 + lane;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m >= n) break;
    if constexpr (kSwiGlu) {
      const float gate = finished[m][lane] * factor[m], up = finished[m][kUnits + lane] * factor[m];
      store_q8_group_lanes(gate / (1.0f + expf(-gate)) * up, lane, m, group, units, out.codes.codes, out.codes.scales,
                           out.codes.sums);
    } else {
      float* x = out.x + static_cast<size_t>(m) * units;
      const float v = x[unit] + finished[m][lane] * factor[m];
      x[unit] = v;
      if (!out.norm) continue;
      store_q8_group_lanes(v * out.norm[unit], lane, m, group, units, out.codes.codes, out.codes.scales,
                           out.codes.sums);
      float sumsq = v * v;
#pragma unroll
      for (int offset = 8; offset > 0; offset /= 2) sumsq += __shfl_xor_sync(0xFFFFu, sumsq, offset);
      if (lane == 0) out.codes.sumsq[static_cast<size_t>(m) * (units / kUnits) + group] = sumsq;
    }
  }
}

// The weight's plain GEMV shape at one row (gemv_shape), as a fused launch, for every number
// of activation rows (one row: M = 1; up to 4: M = 4; up to kFusedLargestBatch: M = 8; rows
// past n unused).
// Residual: rows a warp 1 or 2, parts in flight 2 or 4 (8 taken as 4), as the plain GEMV.
// SwiGLU: 8 warps of 4 rows (two gate rows and their up rows) with half the plain shape's
// parts in flight: the same bytes in flight a warp as 16 warps of 2 rows, in blocks half the
// size, which fill the SMs' waves more evenly (gate/up 2x12288x4096 Q4_K: 768 blocks of 256
// threads against 1.45 waves of 512-thread blocks; batch-1 decode +2.4%, docs/PERF.md
// 2026-12-04).
template <GgmlType T, int M, bool kSwiGlu>
void launch_fused_rows(const DeviceWeight& w, int units, const QuantizedRows& in, const FusedOut& out, cudaStream_t s) {
  const GemvVariant shape = gemv_shape(w, 1);
  const auto go = [&](auto kernel, int warps) {
    launch_dependent_as("fused", kernel, dim3(units / kUnits), dim3(warps * 32), 0, s, rows_of<T>(w), units, in, out);
  };
  const bool two_parts = shape.parts <= 2;
  if constexpr (kSwiGlu) {
    if (two_parts) return go(gemv_fused_kernel<T, M, 8, 4, 1, true>, 8);
    return go(gemv_fused_kernel<T, M, 8, 4, 2, true>, 8);
  } else {
    if (shape.rows == 1) return go(gemv_fused_kernel<T, M, 16, 1, 4, false>, 16);
    if (two_parts) return go(gemv_fused_kernel<T, M, 8, 2, 2, false>, 8);
    return go(gemv_fused_kernel<T, M, 8, 2, 4, false>, 8);
  }
}

template <GgmlType T, bool kSwiGlu>
void launch_fused(const DeviceWeight& w, int units, const QuantizedRows& in, const FusedOut& out, cudaStream_t s) {
  static_assert(kFusedLargestBatch == 8);
  if (in.n == 1) return launch_fused_rows<T, 1, kSwiGlu>(w, units, in, out, s);
  if (in.n <= 4) return launch_fused_rows<T, 4, kSwiGlu>(w, units, in, out, s);
  launch_fused_rows<T, 8, kSwiGlu>(w, units, in, out, s);
}

template <bool kSwiGlu>
void gemv_fused(const char* what, const DeviceWeight& w, int units, const QuantizedRows& in, const FusedOut& out,
                Stream& stream) {
  if (!gemv_fused_reads(w)) cuda_fail(std::string(what) + ": the weights are not an integer type in rows of 16");
  if (in.n < 1 || in.n > kFusedLargestBatch || in.cols != w.cols)
    cuda_fail(std::string(what) + ": 1 to kFusedLargestBatch activation rows of the weights' width");
  if (units % kUnits != 0 || w.rows != (kSwiGlu ? 2 * units : units))
    cuda_fail(std::string(what) + ": outputs must be whole groups of 16");
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    if constexpr (Block<T>::kPacked) launch_fused<T, kSwiGlu>(w, units, in, out, raw(stream));
  });
}

}  // namespace

bool gemv_fused_reads(const DeviceWeight& w) {
  bool packed = false;
  if (!is_supported_weight_type(w.type)) return false;
  dispatch_weight_type(w.type, [&]<GgmlType T>() { packed = Block<T>::kPacked; });
  return packed && w.rows % kUnits == 0 && w.cols % kQ8Group == 0;
}

void gemv_residual_norm(const DeviceWeight& w, const QuantizedRows& in, float* x, const float* norm,
                        const QuantizedRowsBuffer* next, Stream& stream) {
  if (norm && (!next || !next->sumsq)) cuda_fail("gemv_residual_norm: the next input needs normed_rows_in's room");
  FusedOut out;
  out.x = x;
  out.norm = norm;
  if (next) out.codes = *next;
  gemv_fused<false>("gemv_residual_norm", w, w.rows, in, out, stream);
}

void gemv_swiglu(const DeviceWeight& w, const QuantizedRows& in, const QuantizedRowsBuffer& out_codes, Stream& stream) {
  FusedOut out;
  out.codes = out_codes;
  gemv_fused<true>("gemv_swiglu", w, w.rows / 2, in, out, stream);
}

}  // namespace splash::kernels::cuda
