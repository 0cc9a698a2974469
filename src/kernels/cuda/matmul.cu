// Weight matmuls over the GPU weight layout (quant_blocks.cuh): the load-time repacking, a
// GEMV family for decode-sized batches, and dequantize-to-f16 + cuBLAS (tensor cores, float
// accumulation) for prompt-sized batches.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/cuda/activation_q8.cuh"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/gemv_q8.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {
namespace {

constexpr int kRowsWarps = 4;         // gemv_rows: warps per thread block
constexpr int kRowsPerWarp = 2;       // gemv_rows: rows one warp computes, sharing its x loads
constexpr int kTokensWarps = 8;       // gemv_tokens: warps (rows) per thread block
constexpr int kGemvMaxTokens = 8;     // activations one weight pass serves
constexpr int kGemvWarps = 4;         // gemv_q8: warps per thread block

__device__ __forceinline__ void load16(const float* x, float (&v)[16]) {
  const auto* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float4 f = __ldg(x4 + j);
    v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
  }
}

__device__ __forceinline__ float sum16(const float (&v)[16]) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) s += v[j];
  return s;
}

// sum_j (d q_j + m) x_j = d * sum(q x) + m * sum(x).
template <typename B>
__device__ __forceinline__ float run_dot(const Run& r, const float (&x)[16], float sum_x) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) s = fmaf(r.q[j], x[j], s);
  if constexpr (B::kScaled) s *= r.d;
  if constexpr (B::kHasMin) s = fmaf(r.m, sum_x, s);
  return s;
}

// Sums each accumulator over the warp; lane 0 writes (or adds) the first `count` of them,
// the i-th at y[i * stride].
template <int N>
__device__ __forceinline__ void store_warp_sums(float (&acc)[N], int lane, int count, float* __restrict__ y,
                                                size_t stride, int accumulate) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[i] += __shfl_xor_sync(0xFFFFFFFFu, acc[i], offset);
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i < count) {
      float* out = y + i * stride;
      *out = accumulate ? *out + acc[i] : acc[i];
    }
}

// One activation row (decode at batch 1): a warp computes kRowsPerWarp rows, each lane
// walking the row's parts; a part's 32 activations are loaded once and serve every row.
template <GgmlType T>
__global__ void __launch_bounds__(kRowsWarps * 32)
    gemv_rows_kernel(Rows<T> w, int rows, int cols, const float* __restrict__ x, float* __restrict__ y, int accumulate) {
  using B = Block<T>;
  const int row0 = (blockIdx.x * kRowsWarps + threadIdx.x / 32) * kRowsPerWarp;
  const int lane = threadIdx.x % 32;
  if (row0 >= rows) return;
  const int parts = cols / B::kElements * B::kParts;
  float acc[kRowsPerWarp] = {};
  // Unrolled so that the next part's loads are issued before this part's arithmetic.
#pragma unroll 2
  for (int part = lane; part < parts; part += 32) {
    const int block = part / B::kParts, p = part % B::kParts;
    int pa, pb;
    B::columns(p, pa, pb);
    const float* xb = x + block * B::kElements;
    float xa[16], xv[16];
    load16(xb + pa, xa);
    load16(xb + pb, xv);
    const float sa = B::kHasMin ? sum16(xa) : 0.0f, sb = B::kHasMin ? sum16(xv) : 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = min(row0 + r, rows - 1);
      Run a, b;
      B::decode(w.quants(row, block), w.header(row, block), p, a, b);
      acc[r] += run_dot<B>(a, xa, sa) + run_dot<B>(b, xv, sb);
    }
  }
  store_warp_sums(acc, lane, rows - row0, y + row0, 1, accumulate);
}

// Up to M activation rows (batched decode, verify blocks): a warp per output row; each part
// is decoded once and applied to every activation row.
template <GgmlType T, int M>
__global__ void __launch_bounds__(kTokensWarps * 32)
    gemv_tokens_kernel(Rows<T> w, int rows, int cols, const float* __restrict__ x, int ldx, int n,
                       float* __restrict__ y, int ldy, int accumulate) {
  using B = Block<T>;
  const int row = blockIdx.x * kTokensWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int parts = cols / B::kElements * B::kParts;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int part = lane; part < parts; part += 32) {
    const int block = part / B::kParts, p = part % B::kParts;
    int pa, pb;
    B::columns(p, pa, pb);
    Run a, b;
    B::decode(w.quants(row, block), w.header(row, block), p, a, b);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float* xm = x + static_cast<size_t>(m < n ? m : 0) * ldx + block * B::kElements;
      float xa[16], xv[16];
      load16(xm + pa, xa);
      load16(xm + pb, xv);
      const float sa = B::kHasMin ? sum16(xa) : 0.0f, sb = B::kHasMin ? sum16(xv) : 0.0f;
      acc[m] += run_dot<B>(a, xa, sa) + run_dot<B>(b, xv, sb);
    }
  }
  store_warp_sums(acc, lane, n, y + row, static_cast<size_t>(ldy), accumulate);
}

// --- integer types: int8 activations and dp4a ------------------------------------------
// Activations are quantized per group of 16 (one run of a part; activation_q8.cuh): a run's
// dot product is then four dp4a instructions, d_w * d_x * sum(q_w q_x) + m_w * d_x * sum(q_x).
constexpr int kGroup = kQ8Group;

__global__ void quantize_kernel(const float* x, int ldx, int n, int cols, int8_t* __restrict__ codes,
                                float* __restrict__ scales, float* __restrict__ sums) {
  const int groups = cols / kGroup;
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(n) * groups) return;
  const int row = static_cast<int>(index / groups), g = static_cast<int>(index % groups);
  wait_for_inputs();
  allow_next_launch();
  float v[16];
  load16(x + static_cast<size_t>(row) * ldx + g * kGroup, v);
  store_q8_group(v, row, g, cols, codes, scales, sums);
}

// The GEMV of integer weight types: a warp computes R weight rows for M activation rows
// (gemv_q8.cuh), the rows of a block adjacent.
template <GgmlType T, int M, int R, int U>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_q8_kernel(Rows<T> w, int rows, QuantizedRows x, int n, float* __restrict__ y, int ldy, int accumulate) {
  const int row0 = (blockIdx.x * kGemvWarps + threadIdx.x / 32) * R;
  const int lane = threadIdx.x % 32;
  if (row0 >= rows) return;
  int row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row[r] = min(row0 + r, rows - 1);
  float acc[M][R];
  warp_dot_q8<T, M, R, U>(w, row, x, n, lane, acc);
  allow_next_launch();
  warp_sum_all(acc);
  float factor[M];
  pending_norm_factors(x, n, lane, factor);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (m < n && row0 + r < rows) {
        float* out = y + static_cast<size_t>(m) * ldy + row0 + r;
        const float value = acc[m][r] * factor[m];
        *out = accumulate ? *out + value : value;
      }
}

// One thread per GGUF block: its bytes into the quant and header streams of its row.
template <GgmlType T>
__global__ void pack_kernel(const uint8_t* __restrict__ gguf, int rows, int cols, uint8_t* __restrict__ packed) {
  using B = Block<T>;
  const int blocks = cols / B::kElements;
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(blocks) * rows) return;
  const int row = static_cast<int>(index / blocks), block = static_cast<int>(index % blocks);
  const size_t row_bytes = RowLayout<T>::row_bytes(cols), quant_bytes = RowLayout<T>::quant_bytes(cols);
  uint8_t* base = packed + row_bytes * row;
  B::repack(gguf + (static_cast<size_t>(row) * blocks + block) * B::kGgufBytes, base + block * B::kQuantBytes,
            base + quant_bytes + block * B::kHeaderBytes);
}

// Each thread decodes one part and writes its 32 weights as f16.
template <GgmlType T>
__global__ void dequantize_kernel(Rows<T> w, int rows, int cols, __half* __restrict__ out) {
  using B = Block<T>;
  const int parts = cols / B::kElements * B::kParts;
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(parts) * rows) return;
  const int row = static_cast<int>(index / parts), part = static_cast<int>(index % parts);
  const int block = part / B::kParts, p = part % B::kParts;
  int pa, pb;
  B::columns(p, pa, pb);
  Run a, b;
  B::decode(w.quants(row, block), w.header(row, block), p, a, b);
  __half* o = out + static_cast<size_t>(row) * cols + block * B::kElements;
  store_run_f16(a, o + pa);
  store_run_f16(b, o + pb);
}

__global__ void to_f16_kernel(const float* __restrict__ x, int ldx, int n, int cols, __half* __restrict__ out) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(n) * cols) return;
  const int t = static_cast<int>(index / cols), c = static_cast<int>(index % cols);
  out[index] = __float2half_rn(x[static_cast<size_t>(t) * ldx + c]);
}

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

// The launch shapes gemv_q8_kernel is built in.
constexpr GemvVariant kVariants[] = {
    {1, 1, 4}, {1, 2, 4}, {1, 1, 8}, {1, 2, 2},  // one activation row (decode at batch 1)
    {2, 1, 4}, {2, 2, 2},                        // two
    {4, 1, 2}, {4, 2, 2},                        // up to four
    {8, 1, 2}, {8, 1, 1},                        // up to eight
};
constexpr int kVariantCount = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));
constexpr int kBucketTokens[kGemvBuckets] = {1, 2, 4, 8};

// Without a tuned choice: what measured best on the H200 at the Qwen3-8B matrices (docs/PERF.md):
// one activation row over tall matrices (gate_up, the head) keeps two rows per warp with two
// parts in flight, mid-sized ones two rows with four, others one row with four; passes of
// two and four rows share each activation load between two weight rows.
int default_variant(int bucket, const DeviceWeight& w) {
  if (bucket == 0) return w.rows >= 16384 ? 3 : w.rows >= 6144 && w.cols <= 4096 ? 1 : 0;
  return bucket == 1 ? 5 : bucket == 2 ? 7 : 8;
}

template <GgmlType T, int I>
void launch_q8_variant(const DeviceWeight& w, const QuantizedRows& x, float* y, int ldy, int accumulate, cudaStream_t s) {
  constexpr GemvVariant v = kVariants[I];
  const int per_block = kGemvWarps * v.rows;
  launch_dependent_as("gemv", gemv_q8_kernel<T, v.tokens, v.rows, v.parts>, dim3((w.rows + per_block - 1) / per_block),
                      dim3(kGemvWarps * 32), 0, s, rows_of<T>(w), w.rows, x, x.n, y, ldy, accumulate);
}

template <GgmlType T>
void launch_q8(int variant, const DeviceWeight& w, const QuantizedRows& x, float* y, int ldy, int accumulate,
               cudaStream_t s) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((variant == I ? launch_q8_variant<T, I>(w, x, y, ldy, accumulate, s) : void()), ...);
  }(std::make_integer_sequence<int, kVariantCount>{});
}

template <GgmlType T>
void launch_gemv(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                 MatmulScratch& scratch, Stream& stream, const QuantizedRows* xq, int variant) {
  const int acc = accumulate ? 1 : 0;
  if constexpr (Block<T>::kPacked) {  // integer types: int8 activations, dp4a
    const QuantizedRows q = xq ? *xq : quantize_rows(x, ldx, n, w.cols, scratch.activations_q8, stream);
    if (q.n < n || q.cols != w.cols) cuda_fail("gemv: the quantized activations do not match the matmul");
    for (int start = 0; start < n; start += kGemvMaxTokens) {
      const int count = std::min(kGemvMaxTokens, n - start);
      const int bucket = gemv_bucket(count);
      const int chosen = variant >= 0                 ? variant
                         : w.gemv_choice[bucket] >= 0 ? w.gemv_choice[bucket]
                                                      : default_variant(bucket, w);
      if (kVariants[chosen].tokens != kBucketTokens[bucket]) cuda_fail("gemv: the variant does not fit the pass size");
      launch_q8<T>(chosen, w, offset_rows(q, start, count), y + static_cast<size_t>(start) * ldy, ldy, acc, raw(stream));
    }
  } else {  // float types: float activations
    if (xq && xq->sumsq) cuda_fail("gemv: a float weight type cannot read rows whose norm is pending");
    for (int start = 0; start < n; start += kGemvMaxTokens) {
      const int count = std::min(kGemvMaxTokens, n - start);
      const float* xs = x + static_cast<size_t>(start) * ldx;
      float* ys = y + static_cast<size_t>(start) * ldy;
      if (count == 1) {
        const int per_block = kRowsWarps * kRowsPerWarp;
        gemv_rows_kernel<T><<<(w.rows + per_block - 1) / per_block, kRowsWarps * 32, 0, raw(stream)>>>(
            rows_of<T>(w), w.rows, w.cols, xs, ys, acc);
        continue;
      }
      const dim3 grid((w.rows + kTokensWarps - 1) / kTokensWarps);
      if (count == 2)
        gemv_tokens_kernel<T, 2><<<grid, kTokensWarps * 32, 0, raw(stream)>>>(rows_of<T>(w), w.rows, w.cols, xs, ldx, count, ys, ldy, acc);
      else if (count <= 4)
        gemv_tokens_kernel<T, 4><<<grid, kTokensWarps * 32, 0, raw(stream)>>>(rows_of<T>(w), w.rows, w.cols, xs, ldx, count, ys, ldy, acc);
      else
        gemv_tokens_kernel<T, 8><<<grid, kTokensWarps * 32, 0, raw(stream)>>>(rows_of<T>(w), w.rows, w.cols, xs, ldx, count, ys, ldy, acc);
    }
  }
}

}  // namespace

bool is_supported_weight_type(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q6_K: case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
      return true;
    default:
      return false;
  }
}

size_t gguf_row_bytes(GgmlType type, int cols) {
  const auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits || cols % traits->block_elements != 0)
    cuda_fail("a " + std::string(type_name(type)) + " row of " + std::to_string(cols) + " columns is not whole blocks");
  return static_cast<size_t>(cols) / traits->block_elements * traits->block_bytes;
}

size_t weight_row_bytes(GgmlType type, int cols) {
  gguf_row_bytes(type, cols);  // whole blocks
  size_t bytes = 0;
  dispatch_weight_type(type, [&]<GgmlType T>() { bytes = RowLayout<T>::row_bytes(cols); });
  return bytes;
}

size_t DeviceWeight::row_bytes() const { return weight_row_bytes(type, cols); }

void pack_weight(GgmlType type, int rows, int cols, const void* gguf, void* packed, Stream& stream) {
  const size_t bytes = weight_row_bytes(type, cols) * rows;
  dispatch_weight_type(type, [&]<GgmlType T>() {
    if constexpr (!Block<T>::kPacked) {
      stream.copy_on_device(packed, gguf, bytes);
    } else {
      stream.fill(packed, 0, bytes);  // the padding
      const size_t blocks = static_cast<size_t>(rows) * (cols / Block<T>::kElements);
      pack_kernel<T><<<static_cast<unsigned>((blocks + 255) / 256), 256, 0, raw(stream)>>>(
          static_cast<const uint8_t*>(gguf), rows, cols, static_cast<uint8_t*>(packed));
    }
  });
}

std::span<const GemvVariant> gemv_variants() { return kVariants; }

GemvVariant gemv_shape(const DeviceWeight& w, int tokens) {
  const int bucket = gemv_bucket(tokens);
  return kVariants[w.gemv_choice[bucket] >= 0 ? w.gemv_choice[bucket] : default_variant(bucket, w)];
}

int gemv_bucket(int tokens) { return tokens <= 1 ? 0 : tokens == 2 ? 1 : tokens <= 4 ? 2 : 3; }

QuantizedRowsBuffer quantized_rows_in(DeviceBuffer& buffer, int n, int cols) {
  const size_t code_bytes = (static_cast<size_t>(n) * cols + 15) / 16 * 16;
  buffer.resize(quantized_activation_bytes(n, cols));
  auto* scales = reinterpret_cast<float*>(buffer.as<uint8_t>() + code_bytes);
  return {buffer.as<int8_t>(), scales, scales + static_cast<size_t>(n) * (cols / kGroup)};
}

QuantizedRowsBuffer normed_rows_in(DeviceBuffer& buffer, int n, int cols) {
  const size_t code_bytes = (static_cast<size_t>(n) * cols + 15) / 16 * 16;
  const size_t groups = static_cast<size_t>(n) * (cols / kGroup);
  buffer.resize(quantized_activation_bytes(n, cols) + groups * sizeof(float));
  auto* scales = reinterpret_cast<float*>(buffer.as<uint8_t>() + code_bytes);
  return {buffer.as<int8_t>(), scales, scales + groups, scales + 2 * groups};
}

QuantizedRows quantize_rows(const float* x, int ldx, int n, int cols, DeviceBuffer& into, Stream& stream) {
  if (cols % kGroup != 0 || ldx % 4 != 0) cuda_fail("quantize_rows: rows must be 16-byte aligned groups of 16");
  const QuantizedRowsBuffer q = quantized_rows_in(into, n, cols);
  const size_t threads = static_cast<size_t>(n) * (cols / kGroup);
  if (threads > 0)
    launch_dependent(quantize_kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), raw(stream), x, ldx,
                     n, cols, q.codes, q.scales, q.sums);
  return q.view(n, cols);
}

void gemv(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
          MatmulScratch& scratch, Stream& stream, const QuantizedRows* xq, int variant) {
  if (ldx % 4 != 0) cuda_fail("gemv: activation rows must be 16-byte aligned");
  if (n == 0) return;
  if (variant >= kVariantCount) cuda_fail("gemv: no variant " + std::to_string(variant));
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    launch_gemv<T>(w, x, ldx, n, y, ldy, accumulate, scratch, stream, xq, variant);
  });
}

void dequantize_to_f16(const DeviceWeight& w, void* out_f16, Stream& stream) {
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    const size_t threads = static_cast<size_t>(w.cols) / Block<T>::kElements * Block<T>::kParts * w.rows;
    const int per_block = 256;
    dequantize_kernel<T><<<static_cast<unsigned>((threads + per_block - 1) / per_block), per_block, 0, raw(stream)>>>(
        rows_of<T>(w), w.rows, w.cols, static_cast<__half*>(out_f16));
  });
}

void matmul(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
            MatmulScratch& scratch, Stream& stream, const QuantizedRows* xq, bool always_gemv) {
  if (xq && xq->sumsq && n > kGemvLargestBatch) cuda_fail("matmul: rows whose norm is pending feed GEMVs only");
  if (n <= kGemvLargestBatch) return gemv(w, x, ldx, n, y, ldy, accumulate, scratch, stream, xq);
  if (n <= kSmallGemmLargestBatch && small_gemm_reads(w.type)) return small_gemm(w, x, ldx, n, y, ldy, accumulate, scratch, stream);
  if (always_gemv) return gemv(w, x, ldx, n, y, ldy, accumulate, scratch, stream, xq);
  matmul_tensor_cores(w, x, ldx, n, y, ldy, accumulate, scratch, stream);
}

void matmul_tensor_cores(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                         MatmulScratch& scratch, Stream& stream) {
  scratch.weight_f16.resize(static_cast<size_t>(w.rows) * w.cols * sizeof(__half));
  scratch.activations_f16.resize(static_cast<size_t>(n) * w.cols * sizeof(__half));
  dequantize_to_f16(w, scratch.weight_f16.data(), stream);
  const size_t elements = static_cast<size_t>(n) * w.cols;
  to_f16_kernel<<<static_cast<unsigned>((elements + 255) / 256), 256, 0, raw(stream)>>>(
      x, ldx, n, w.cols, scratch.activations_f16.as<__half>());
  // Row-major y[n][rows] = x[n][cols] . w[rows][cols]^T is, column-major, y^T = w^T' x^T:
  // A = the weights (cols x rows, transposed), B = the activations (cols x n).
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t status = cublasGemmEx(
      static_cast<cublasHandle_t>(stream.blas()), CUBLAS_OP_T, CUBLAS_OP_N, w.rows, n, w.cols, &alpha,
      scratch.weight_f16.data(), CUDA_R_16F, w.cols, scratch.activations_f16.data(), CUDA_R_16F, w.cols, &beta, y,
      CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) cuda_fail(std::string("cublasGemmEx failed: ") + cublasGetStatusString(status));
}

}  // namespace splash::kernels::cuda
