#pragma once
// Activations as the GEMV of integer weight types reads them (ops.h QuantizedRows): int8
// per group of 16 with a float scale (symmetric, amax / 127) and the scale times the group's
// code sum (the m * sum(x) term of weights w = d q + m). Shared by quantize_rows and the
// kernels that write activation rows (rms_norm, silu_mul) so each input is quantized once.
#include <cstdint>

namespace splash::kernels::cuda {

constexpr int kQ8Group = 16;

// Group g of row `row`: v's 16 values into the codes, scale and sum arrays of `cols`-wide rows.
__device__ __forceinline__ void store_q8_group(const float (&v)[16], int row, int g, int cols, int8_t* __restrict__ codes,
                                               float* __restrict__ scales, float* __restrict__ sums) {
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
  const int groups = cols / kQ8Group;
  *reinterpret_cast<uint4*>(codes + static_cast<size_t>(row) * cols + g * kQ8Group) =
      make_uint4(words[0], words[1], words[2], words[3]);
  const float scale = amax / 127.0f;
  scales[static_cast<size_t>(row) * groups + g] = scale;
  sums[static_cast<size_t>(row) * groups + g] = scale * static_cast<float>(sum);
}

// The same group held by lanes 0-15 of a warp (lane j the value j; the other lanes must not
// call): byte for byte what store_q8_group writes.
__device__ __forceinline__ void store_q8_group_lanes(float v, int j, int row, int g, int cols,
                                                     int8_t* __restrict__ codes, float* __restrict__ scales,
                                                     float* __restrict__ sums) {
  constexpr unsigned kLanes = 0xFFFFu;
  float amax = fabsf(v);
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(kLanes, amax, offset));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  const int q = __float2int_rn(v * inverse);
  int sum = q;
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) sum += __shfl_xor_sync(kLanes, sum, offset);
  codes[static_cast<size_t>(row) * cols + g * kQ8Group + j] = static_cast<int8_t>(q);
  if (j != 0) return;
  const int groups = cols / kQ8Group;
  const float scale = amax / 127.0f;
  scales[static_cast<size_t>(row) * groups + g] = scale;
  sums[static_cast<size_t>(row) * groups + g] = scale * static_cast<float>(sum);
}

}  // namespace splash::kernels::cuda
