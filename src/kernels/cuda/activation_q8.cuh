#pragma once
// Activations as the GEMV of integer weight types reads them (ops.h QuantizedRows): int8
// per group of 16 with a float scale (symmetric, amax / 127) and the scale times the group's
// code sum (the m * sum(x) term of weights w = d q + m). Shared by quantize_rows and the
// kernels that write activation rows (rms_norm, silu_mul) so each input is quantized once.
#include <cstdint>

namespace splash::kernels::cuda {

constexpr int kQ8Group = 16;

// 16 values as int8 codes (four to a word), their scale and the scale times the codes' sum.
struct Q8Group {
  uint4 codes;
  float scale, sum;
};
__device__ __forceinline__ Q8Group quantize_q8_group(const float (&v)[16]) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) amax = fmaxf(amax, fabsf(v[j]));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t words[4] = {};
  int sum = 0;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int q = __float2int_rn(v[j] * inverse);
    sum += q;
    words[j / 4] |= (static_cast<uint32_t>(q) & 0xFF) << (8 * (j % 4));
  }
  const float scale = amax / 127.0f;
  return {make_uint4(words[0], words[1], words[2], words[3]), scale, scale * static_cast<float>(sum)};
}

// Group g of row `row`: v's 16 values into the codes, scale and sum arrays of `cols`-wide rows.
__device__ __forceinline__ void store_q8_group(const float (&v)[16], int row, int g, int cols, int8_t* __restrict__ codes,
                                               float* __restrict__ scales, float* __restrict__ sums) {
  const Q8Group q = quantize_q8_group(v);
  const int groups = cols / kQ8Group;
  *reinterpret_cast<uint4*>(codes + static_cast<size_t>(row) * cols + g * kQ8Group) = q.codes;
  scales[static_cast<size_t>(row) * groups + g] = q.scale;
  sums[static_cast<size_t>(row) * groups + g] = q.sum;
}

// SwiGLU's product for one element: silu(g) * u (the same expression wherever it is made, so
// a fused matmul reads the bits silu_mul writes).
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace splash::kernels::cuda
