#pragma once
// Device-side decoders of the GGUF block formats. Every type is read in "parts" of 32
// weights that lie in two runs of 16 consecutive columns (a at column pa, b at pb, relative
// to the block's first column), each run under one scale, so one GEMV, dequantize and
// embedding kernel serves them all:
//   Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/F32/F16/BF16: a block of 32 is one part (columns 0-15, 16-31);
//   Q4_K: 8 parts of a 256 super-block: bytes qs[32c + 16h ..] hold columns 64c + 16h + i
//         (low nibbles, sub-block 2c) and 64c + 32 + 16h + i (high nibbles, sub-block 2c+1);
//   Q6_K: 8 parts: half n, l0 in {0, 16}, and which of ql's two 32-byte rows; columns
//         128n + l0 + i (+64), or 128n + 32 + l0 + i (+64) for the second row.
// The arithmetic is GGUF's own (w = d * q + m in float), so values match the CPU path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include <string>

#include "kernels/cuda/cuda_error.h"
#include "formats/ggml_types.h"

namespace splash::kernels::cuda {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ uint32_t u32_at(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

struct Part {
  float a[16], b[16];
  int pa, pb;
};

template <GgmlType T>
struct Block;

template <>
struct Block<GgmlType::Q4_0> {
  static constexpr int kElements = 32, kBytes = 18, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const float d = half_at(block);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint8_t q = block[2 + j];
      p.a[j] = d * static_cast<float>((q & 0x0F) - 8);
      p.b[j] = d * static_cast<float>((q >> 4) - 8);
    }
    p.pa = 0, p.pb = 16;
  }
};

template <>
struct Block<GgmlType::Q4_1> {
  static constexpr int kElements = 32, kBytes = 20, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const float d = half_at(block), m = half_at(block + 2);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint8_t q = block[4 + j];
      p.a[j] = d * static_cast<float>(q & 0x0F) + m;
      p.b[j] = d * static_cast<float>(q >> 4) + m;
    }
    p.pa = 0, p.pb = 16;
  }
};

template <bool kWithMin>
struct Q5Block {
  static constexpr int kElements = 32, kBytes = kWithMin ? 24 : 22, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const float d = half_at(block);
    const float m = kWithMin ? half_at(block + 2) : -16.0f * d;
    const uint8_t* qh_bytes = block + (kWithMin ? 4 : 2);
    const uint32_t qh = u32_at(qh_bytes);
    const uint8_t* qs = qh_bytes + 4;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
      if (kWithMin) {
        p.a[j] = d * static_cast<float>(lo) + m;
        p.b[j] = d * static_cast<float>(hi) + m;
      } else {  // w = d (q - 16), as GGUF computes it
        p.a[j] = d * static_cast<float>(lo - 16);
        p.b[j] = d * static_cast<float>(hi - 16);
      }
    }
    p.pa = 0, p.pb = 16;
  }
};
template <>
struct Block<GgmlType::Q5_0> : Q5Block<false> {};
template <>
struct Block<GgmlType::Q5_1> : Q5Block<true> {};

template <>
struct Block<GgmlType::Q8_0> {
  static constexpr int kElements = 32, kBytes = 34, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const float d = half_at(block);
    const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      p.a[j] = d * static_cast<float>(qs[j]);
      p.b[j] = d * static_cast<float>(qs[j + 16]);
    }
    p.pa = 0, p.pb = 16;
  }
};

// Q4_K's 6-bit scale and min of sub-block j from its 12 packed bytes.
__device__ __forceinline__ void q4k_scale_min(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <>
struct Block<GgmlType::Q4_K> {
  static constexpr int kElements = 256, kBytes = 144, kParts = 8;
  __device__ static void decode(const uint8_t* block, int part, Part& p) {
    const float dall = half_at(block), dmin = half_at(block + 2);
    const int chunk = part >> 1, half = part & 1;
    int sc0, mn0, sc1, mn1;
    q4k_scale_min(2 * chunk, block + 4, sc0, mn0);
    q4k_scale_min(2 * chunk + 1, block + 4, sc1, mn1);
    const float d0 = dall * static_cast<float>(sc0), m0 = -dmin * static_cast<float>(mn0);
    const float d1 = dall * static_cast<float>(sc1), m1 = -dmin * static_cast<float>(mn1);
    // 16 bytes at a 16-byte boundary of the block (blocks are 144 bytes, rows 16-aligned).
    const uint4 raw = *reinterpret_cast<const uint4*>(block + 16 + 32 * chunk + 16 * half);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = (words[j / 4] >> (8 * (j % 4))) & 0xFF;
      p.a[j] = d0 * static_cast<float>(q & 0x0F) + m0;
      p.b[j] = d1 * static_cast<float>(q >> 4) + m1;
    }
    p.pa = 64 * chunk + 16 * half;
    p.pb = p.pa + 32;
  }
};

template <>
struct Block<GgmlType::Q6_K> {
  static constexpr int kElements = 256, kBytes = 210, kParts = 8;
  __device__ static void decode(const uint8_t* block, int part, Part& p) {
    const int n = part >> 2, l0 = ((part >> 1) & 1) * 16, row = part & 1;
    const uint8_t* ql = block + 64 * n + 32 * row + l0;
    const uint8_t* qh = block + 128 + 32 * n + l0;
    const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
    const float dall = half_at(block + 208);
    const int col_a = 128 * n + 32 * row + l0, col_b = col_a + 64;
    const float da = dall * static_cast<float>(scales[col_a / 16]);
    const float db = dall * static_cast<float>(scales[col_b / 16]);
    const int shift = 2 * row;  // bits of qh: 0-1 and 4-5 for row 0, 2-3 and 6-7 for row 1
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int lo = (ql[j] & 0x0F) | (((qh[j] >> shift) & 3) << 4);
      const int hi = (ql[j] >> 4) | (((qh[j] >> (shift + 4)) & 3) << 4);
      p.a[j] = da * static_cast<float>(lo - 32);
      p.b[j] = db * static_cast<float>(hi - 32);
    }
    p.pa = col_a, p.pb = col_b;
  }
};

template <>
struct Block<GgmlType::F32> {
  static constexpr int kElements = 32, kBytes = 128, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const auto* v = reinterpret_cast<const float4*>(block);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 x = v[j], y = v[j + 4];
      p.a[4 * j] = x.x, p.a[4 * j + 1] = x.y, p.a[4 * j + 2] = x.z, p.a[4 * j + 3] = x.w;
      p.b[4 * j] = y.x, p.b[4 * j + 1] = y.y, p.b[4 * j + 2] = y.z, p.b[4 * j + 3] = y.w;
    }
    p.pa = 0, p.pb = 16;
  }
};

template <>
struct Block<GgmlType::F16> {
  static constexpr int kElements = 32, kBytes = 64, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const auto* v = reinterpret_cast<const __half2*>(block);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 x = __half22float2(v[j]), y = __half22float2(v[j + 8]);
      p.a[2 * j] = x.x, p.a[2 * j + 1] = x.y;
      p.b[2 * j] = y.x, p.b[2 * j + 1] = y.y;
    }
    p.pa = 0, p.pb = 16;
  }
};

template <>
struct Block<GgmlType::BF16> {
  static constexpr int kElements = 32, kBytes = 64, kParts = 1;
  __device__ static void decode(const uint8_t* block, int, Part& p) {
    const auto* v = reinterpret_cast<const uint32_t*>(block);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t x = v[j], y = v[j + 8];
      p.a[2 * j] = __uint_as_float(x << 16), p.a[2 * j + 1] = __uint_as_float(x & 0xFFFF0000u);
      p.b[2 * j] = __uint_as_float(y << 16), p.b[2 * j + 1] = __uint_as_float(y & 0xFFFF0000u);
    }
    p.pa = 0, p.pb = 16;
  }
};

// Calls fn.template operator()<Type>() for the weight type at run time (fn: a lambda with a
// template parameter list); throws splash::Error for a type without kernels.
template <typename Fn>
void dispatch_weight_type(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::Q4_0: return fn.template operator()<GgmlType::Q4_0>();
    case GgmlType::Q4_1: return fn.template operator()<GgmlType::Q4_1>();
    case GgmlType::Q5_0: return fn.template operator()<GgmlType::Q5_0>();
    case GgmlType::Q5_1: return fn.template operator()<GgmlType::Q5_1>();
    case GgmlType::Q8_0: return fn.template operator()<GgmlType::Q8_0>();
    case GgmlType::Q4_K: return fn.template operator()<GgmlType::Q4_K>();
    case GgmlType::Q6_K: return fn.template operator()<GgmlType::Q6_K>();
    case GgmlType::F32: return fn.template operator()<GgmlType::F32>();
    case GgmlType::F16: return fn.template operator()<GgmlType::F16>();
    case GgmlType::BF16: return fn.template operator()<GgmlType::BF16>();
    default: break;
  }
  cuda_fail("the CUDA kernels do not read weight type " + std::string(type_name(type)));
}

}  // namespace splash::kernels::cuda
