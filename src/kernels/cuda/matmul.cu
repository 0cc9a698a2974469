// Weight matmuls: a GEMV family over the GGUF block formats for decode-sized batches, and
// dequantize-to-f16 + cuBLAS (tensor cores, float accumulation) for prompt-sized batches.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {
namespace {

constexpr int kGemvWarps = 8;           // rows per thread block: one warp a row
constexpr int kGemvMaxTokens = 8;       // activations one weight pass serves
constexpr int kGemvLargestBatch = 32;   // above this, the f16 + cuBLAS path

__device__ __forceinline__ float dot16(const float (&w)[16], const float* x) {
  const auto* x4 = reinterpret_cast<const float4*>(x);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float4 v = __ldg(x4 + j);
    s = fmaf(w[4 * j], v.x, s);
    s = fmaf(w[4 * j + 1], v.y, s);
    s = fmaf(w[4 * j + 2], v.z, s);
    s = fmaf(w[4 * j + 3], v.w, s);
  }
  return s;
}

// One warp per output row: lanes walk the row's parts, each part's 32 weights decoded once
// and applied to up to M activation rows; a warp reduction gives the dot products.
template <GgmlType T, int M>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows, int cols, const float* __restrict__ x,
                int ldx, int n, float* __restrict__ y, int ldy, int accumulate) {
  using B = Block<T>;
  const int row = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const uint8_t* w_row = w + row_bytes * row;
  const int parts = cols / B::kElements * B::kParts;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int part = lane; part < parts; part += 32) {
    const int block = part / B::kParts;
    Part p;
    B::decode(w_row + static_cast<size_t>(block) * B::kBytes, part % B::kParts, p);
    const int column = block * B::kElements;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float* xm = x + static_cast<size_t>(m < n ? m : 0) * ldx + column;
      acc[m] += dot16(p.a, xm + p.pa) + dot16(p.b, xm + p.pb);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[m] += __shfl_xor_sync(0xFFFFFFFFu, acc[m], offset);
  if (lane == 0)
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (m < n) {
        float* out = y + static_cast<size_t>(m) * ldy + row;
        *out = accumulate ? *out + acc[m] : acc[m];
      }
}

// Each thread decodes one part and writes its 32 weights as f16.
template <GgmlType T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows, int cols,
                                  __half* __restrict__ out) {
  using B = Block<T>;
  const int parts = cols / B::kElements * B::kParts;
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(parts) * rows) return;
  const int row = static_cast<int>(index / parts), part = static_cast<int>(index % parts);
  const int block = part / B::kParts;
  Part p;
  B::decode(w + row_bytes * row + static_cast<size_t>(block) * B::kBytes, part % B::kParts, p);
  __half* o = out + static_cast<size_t>(row) * cols + block * B::kElements;
#pragma unroll
  for (int j = 0; j < 16; j += 2) {
    *reinterpret_cast<__half2*>(o + p.pa + j) = __floats2half2_rn(p.a[j], p.a[j + 1]);
    *reinterpret_cast<__half2*>(o + p.pb + j) = __floats2half2_rn(p.b[j], p.b[j + 1]);
  }
}

__global__ void to_f16_kernel(const float* __restrict__ x, int ldx, int n, int cols, __half* __restrict__ out) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(n) * cols) return;
  const int t = static_cast<int>(index / cols), c = static_cast<int>(index % cols);
  out[index] = __float2half_rn(x[static_cast<size_t>(t) * ldx + c]);
}

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

template <int M>
void launch_gemv(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                 Stream& stream) {
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    const dim3 grid((w.rows + kGemvWarps - 1) / kGemvWarps);
    gemv_kernel<T, M><<<grid, kGemvWarps * 32, 0, raw(stream)>>>(w.data, w.row_bytes(), w.rows, w.cols, x, ldx, n, y,
                                                                  ldy, accumulate ? 1 : 0);
  });
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

size_t weight_row_bytes(GgmlType type, int cols) {
  const auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits || cols % traits->block_elements != 0)
    cuda_fail("a " + std::string(type_name(type)) + " row of " + std::to_string(cols) + " columns is not whole blocks");
  return static_cast<size_t>(cols) / traits->block_elements * traits->block_bytes;
}

size_t DeviceWeight::row_bytes() const { return weight_row_bytes(type, cols); }

void gemv(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate, Stream& stream) {
  if (ldx % 4 != 0) cuda_fail("gemv: activation rows must be 16-byte aligned");
  for (int start = 0; start < n; start += kGemvMaxTokens) {
    const int count = std::min(kGemvMaxTokens, n - start);
    const float* xs = x + static_cast<size_t>(start) * ldx;
    float* ys = y + static_cast<size_t>(start) * ldy;
    if (count == 1) launch_gemv<1>(w, xs, ldx, count, ys, ldy, accumulate, stream);
    else if (count == 2) launch_gemv<2>(w, xs, ldx, count, ys, ldy, accumulate, stream);
    else if (count <= 4) launch_gemv<4>(w, xs, ldx, count, ys, ldy, accumulate, stream);
    else launch_gemv<8>(w, xs, ldx, count, ys, ldy, accumulate, stream);
  }
}

void dequantize_to_f16(const DeviceWeight& w, void* out_f16, Stream& stream) {
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    const size_t threads = static_cast<size_t>(w.cols) / Block<T>::kElements * Block<T>::kParts * w.rows;
    const int per_block = 256;
    dequantize_kernel<T><<<static_cast<unsigned>((threads + per_block - 1) / per_block), per_block, 0, raw(stream)>>>(
        w.data, w.row_bytes(), w.rows, w.cols, static_cast<__half*>(out_f16));
  });
}

void matmul(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
            MatmulScratch& scratch, Stream& stream, bool always_gemv) {
  if (n <= kGemvLargestBatch || always_gemv) return gemv(w, x, ldx, n, y, ldy, accumulate, stream);
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
