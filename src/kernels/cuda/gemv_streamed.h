#pragma once
// The batch-1 GEMV of the K-quant types as one long stream per multiprocessor (internal to
// kernels/cuda; matmul.cu picks it as a GEMV variant, and the fused matmuls of ops.h run on
// it). Why: the warp-per-row GEMV keeps a few hundred bytes a warp in flight and thousands of
// short thread blocks come and go, so the small matrices (q, k/v, o: 2-10 MB) read at 20-45%
// of the copy bandwidth and every launch pays the memory latency again. Here each thread
// block owns a contiguous range of rows — contiguous bytes in the GPU layout — and a producer
// warp streams it through a ring of shared-memory stages with bulk copies, issued before the
// kernel waits for the previous one, so a matrix's first bytes are on their way while the
// kernel before drains. Because every block reads the whole input row anyway, the kernel that
// made that row (RMSNorm, SwiGLU) can be folded into the block's prologue: one kernel fewer
// between two matmuls, and the prologue runs while the first stages land.
#include <cuda_runtime.h>

#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {

// What the consumer warps make the block's int8 activations from.
enum class StreamedSource : uint8_t {
  Quantized,  // the int8 copy an earlier kernel made (QuantizedRows of one row)
  RmsNorm,    // x * rsqrt(mean(x^2) + eps) * norm_weight, as rms_norm computes it
  SiluMul,    // silu(gate) * up over x = [gate | up], as silu_mul computes it
};

struct StreamedInput {
  StreamedSource source = StreamedSource::Quantized;
  QuantizedRows quantized;             // Quantized
  const float* x = nullptr;            // RmsNorm: the row (cols); SiluMul: gate then up (2 * cols)
  const float* norm_weight = nullptr;  // RmsNorm
  float eps = 0.0f;                    // RmsNorm
};

// Whether gemv_streamed reads this matrix (Q4_K or Q6_K, 16-byte aligned, two stages fit).
bool gemv_streamed_serves(const DeviceWeight& w);

// y[r] (+)= sum_c w[r][c] * a[c] for the one activation row `in` describes.
void gemv_streamed(const DeviceWeight& w, const StreamedInput& in, float* y, int accumulate, cudaStream_t stream);

}  // namespace splash::kernels::cuda
