#pragma once
// The GGUF weight types as the CUDA kernels read them. At load every integer-quantized
// matrix is repacked on the GPU (pack_kernel) into an aligned form that keeps each block's
// exact bytes and values, split per row into two streams so that every load is a 16-, 8- or
// 4-byte vector load:
//   [quants of block 0, 1, ... (kQuantBytes each)] [pad to 16] [headers (kHeaderBytes each)]
// The header holds a block's scales (and Q5's fifth bits). Float types are read as they come.
//
// A block is read in "parts" of 32 weights lying in two runs of 16 consecutive columns
// (a at column pa, b at pb, relative to the block), each run under one scale d and offset m:
// w = d * q + m with integer codes q (float types: q is the value, d = 1, m = 0). So a dot
// product over a run is d * sum(q x) + m * sum(x), and one GEMV, dequantize and embedding
// kernel serves every type:
//   Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/F32/F16/BF16: a block of 32 is one part (columns 0-15, 16-31);
//   Q4_K: 8 parts of a 256 super-block: quant bytes [32c + 16h, +16) hold columns
//         64c + 16h + i (low nibbles, sub-block 2c) and 64c + 32 + 16h + i (high nibbles);
//   Q6_K: 8 parts: half n, l0 in {0, 16}, and which of ql's two 32-byte rows; columns
//         128n + 32row + l0 + i, and the same + 64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "formats/ggml_types.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {

__device__ __forceinline__ float half_bits(uint32_t bits) { return __half2float(__ushort_as_half(static_cast<uint16_t>(bits))); }
__device__ __forceinline__ float half_at(const uint8_t* p) {  // any alignment
  return half_bits(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8);
}

// One run of 16 weights: w[j] = d * q[j] + m.
struct Run {
  float q[16];
  float d, m;
};

// The same run with its integer codes as bytes, four to a word (signed for Q8_0, else
// below 64): the operands of dp4a against int8 activations.
struct CodeRun {
  uint32_t q[4];
  float d, m;
};

// A small unsigned integer (below 2^23) as a float without the quarter-rate I2F unit: its
// bits under 2^23's exponent, less 2^23 (exact).
__device__ __forceinline__ float small_uint_to_float(uint32_t v) { return __uint_as_float(0x4B000000u | v) - 8388608.0f; }

// A weight load that streams past L1 (weights are read once per pass; L1 keeps the
// activations every warp of the SM reads).
__device__ __forceinline__ uint4 load_weights16(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <GgmlType T>
struct Block;

// The low and high nibbles of 16 bytes, as byte codes: lo holds the low nibbles in order.
__device__ __forceinline__ void nibble_codes(const uint4 raw, CodeRun& lo, CodeRun& hi) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) lo.q[k] = words[k] & 0x0F0F0F0Fu, hi.q[k] = (words[k] >> 4) & 0x0F0F0F0Fu;
}

// Bits 0-3 of v as bit 4 of bytes 0-3 (Q5's fifth bits).
__device__ __forceinline__ uint32_t spread_bits(uint32_t v) {
  return ((v & 1u) << 4) | ((v & 2u) << 11) | ((v & 4u) << 18) | ((v & 8u) << 25);
}

// Byte codes as floats (signed bytes for Q8_0).
template <bool kSigned>
__device__ __forceinline__ void to_floats(const CodeRun& c, Run& r) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t byte = (c.q[j / 4] >> (8 * (j % 4))) & 0xFF;
    if constexpr (kSigned) r.q[j] = __uint_as_float(0x4B000000u | (byte ^ 0x80)) - 8388736.0f;  // (b ^ 0x80) - 128
    else r.q[j] = small_uint_to_float(byte);
  }
  r.d = c.d, r.m = c.m;
}

// A run's 16 weights d * q + m, each rounded once to f16, as two 16-byte stores.
__device__ __forceinline__ void store_run_f16(const Run& r, __half* to) {
  uint32_t words[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const __half2 h = __floats2half2_rn(fmaf(r.d, r.q[2 * j], r.m), fmaf(r.d, r.q[2 * j + 1], r.m));
    words[j] = *reinterpret_cast<const uint32_t*>(&h);
  }
  reinterpret_cast<uint4*>(to)[0] = make_uint4(words[0], words[1], words[2], words[3]);
  reinterpret_cast<uint4*>(to)[1] = make_uint4(words[4], words[5], words[6], words[7]);
}

// Types stored as they come: no repacking, no scales.
template <GgmlType T>
struct FloatBlock {
  static constexpr bool kPacked = false, kHasMin = false, kScaled = false;
  static constexpr int kElements = 32, kParts = 1, kQuantBytes = T == GgmlType::F32 ? 128 : 64, kHeaderBytes = 0;
  __device__ static void columns(int, int& pa, int& pb) { pa = 0, pb = 16; }
  __device__ static void decode(const uint8_t* quants, const uint8_t*, int, Run& a, Run& b) {
    a.d = b.d = 1.0f, a.m = b.m = 0.0f;
    if constexpr (T == GgmlType::F32) {
      const auto* v = reinterpret_cast<const float4*>(quants);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 x = v[j], y = v[j + 4];
        a.q[4 * j] = x.x, a.q[4 * j + 1] = x.y, a.q[4 * j + 2] = x.z, a.q[4 * j + 3] = x.w;
        b.q[4 * j] = y.x, b.q[4 * j + 1] = y.y, b.q[4 * j + 2] = y.z, b.q[4 * j + 3] = y.w;
      }
    } else {
      const auto* v = reinterpret_cast<const uint4*>(quants);
      const uint4 r0 = v[0], r1 = v[1], r2 = v[2], r3 = v[3];
      const uint32_t w[16] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w,
                              r2.x, r2.y, r2.z, r2.w, r3.x, r3.y, r3.z, r3.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t x = w[j], y = w[j + 8];
        if constexpr (T == GgmlType::F16) {
          a.q[2 * j] = half_bits(x & 0xFFFF), a.q[2 * j + 1] = half_bits(x >> 16);
          b.q[2 * j] = half_bits(y & 0xFFFF), b.q[2 * j + 1] = half_bits(y >> 16);
        } else {
          a.q[2 * j] = __uint_as_float(x << 16), a.q[2 * j + 1] = __uint_as_float(x & 0xFFFF0000u);
          b.q[2 * j] = __uint_as_float(y << 16), b.q[2 * j + 1] = __uint_as_float(y & 0xFFFF0000u);
        }
      }
    }
  }
};
template <>
struct Block<GgmlType::F32> : FloatBlock<GgmlType::F32> {};
template <>
struct Block<GgmlType::F16> : FloatBlock<GgmlType::F16> {};
template <>
struct Block<GgmlType::BF16> : FloatBlock<GgmlType::BF16> {};

// The 32-weight block types. GGUF blocks: Q4_0 {d, qs[16]}, Q4_1 {d, m, qs[16]},
// Q5_0 {d, qh[4], qs[16]}, Q5_1 {d, m, qh[4], qs[16]}, Q8_0 {d, qs[32]}; weight j and j + 16
// share byte qs[j] (low, high nibble), their fifth bits are bits j and j + 16 of qh.
// Headers: Q4_0/Q8_0 {d}, Q4_1 {d, m}, Q5_0 {d, 0, qh}, Q5_1 {d, m, qh}.
template <GgmlType T>
struct SmallBlock {
  static constexpr bool kPacked = true, kScaled = true;
  static constexpr bool kHasMin = T != GgmlType::Q8_0;  // (Q4_0 and Q5_0: m = -8d, -16d)
  static constexpr int kElements = 32, kParts = 1;
  static constexpr int kGgufBytes = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22
                                    : T == GgmlType::Q5_1 ? 24 : 34;
  static constexpr int kQuantBytes = T == GgmlType::Q8_0 ? 32 : 16;
  static constexpr int kHeaderBytes = T == GgmlType::Q4_0 || T == GgmlType::Q8_0 ? 2 : T == GgmlType::Q4_1 ? 4 : 8;
  static constexpr bool kFifthBit = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  static constexpr bool kOwnMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;

  __host__ __device__ static void repack(const uint8_t* gguf, uint8_t* quants, uint8_t* header) {
    const int scale_bytes = kOwnMin ? 4 : 2;
    const int qh_bytes = kFifthBit ? 4 : 0;
    for (int i = 0; i < kQuantBytes; ++i) quants[i] = gguf[scale_bytes + qh_bytes + i];
    for (int i = 0; i < kHeaderBytes; ++i) header[i] = 0;
    for (int i = 0; i < scale_bytes; ++i) header[i] = gguf[i];
    for (int i = 0; i < qh_bytes; ++i) header[4 + i] = gguf[scale_bytes + i];
  }
  __device__ static void columns(int, int& pa, int& pb) { pa = 0, pb = 16; }
  // A part's bytes as loaded (the GEMV issues every load of a pass before decoding any).
  struct Raw {
    uint4 q0, q1;  // q1: Q8_0's second 16 codes
    uint2 h;       // the header's bytes
  };
  __device__ static Raw load(const uint8_t* quants, const uint8_t* header, int) {
    Raw r;
    r.q0 = load_weights16(quants);
    if constexpr (T == GgmlType::Q8_0) r.q1 = load_weights16(quants + 16);
    else r.q1 = make_uint4(0, 0, 0, 0);
    if constexpr (kHeaderBytes == 8) r.h = *reinterpret_cast<const uint2*>(header);
    else if constexpr (kHeaderBytes == 4) r.h = make_uint2(*reinterpret_cast<const uint32_t*>(header), 0);
    else r.h = make_uint2(*reinterpret_cast<const uint16_t*>(header), 0);
    return r;
  }
  __device__ static void codes(const Raw& r, int, CodeRun& a, CodeRun& b) {
    float d, m = 0.0f;
    const uint32_t qh = r.h.y;
    if constexpr (kHeaderBytes == 8) {
      d = half_bits(r.h.x & 0xFFFF);
      m = kOwnMin ? half_bits(r.h.x >> 16) : -16.0f * d;
    } else if constexpr (kHeaderBytes == 4) {
      d = half_bits(r.h.x & 0xFFFF), m = half_bits(r.h.x >> 16);
    } else {
      d = half_bits(r.h.x & 0xFFFF);
      m = T == GgmlType::Q4_0 ? -8.0f * d : 0.0f;
    }
    a.d = b.d = d, a.m = b.m = m;
    if constexpr (T == GgmlType::Q8_0) {
      a.q[0] = r.q0.x, a.q[1] = r.q0.y, a.q[2] = r.q0.z, a.q[3] = r.q0.w;
      b.q[0] = r.q1.x, b.q[1] = r.q1.y, b.q[2] = r.q1.z, b.q[3] = r.q1.w;
    } else {
      nibble_codes(r.q0, a, b);
      if constexpr (kFifthBit) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          a.q[k] |= spread_bits(qh >> (4 * k));
          b.q[k] |= spread_bits(qh >> (16 + 4 * k));
        }
      }
    }
  }
  __device__ static void codes(const uint8_t* quants, const uint8_t* header, int part, CodeRun& a, CodeRun& b) {
    codes(load(quants, header, part), part, a, b);
  }
  __device__ static void decode(const uint8_t* quants, const uint8_t* header, int part, Run& a, Run& b) {
    CodeRun ca, cb;
    codes(quants, header, part, ca, cb);
    to_floats<T == GgmlType::Q8_0>(ca, a), to_floats<T == GgmlType::Q8_0>(cb, b);
  }
};
template <>
struct Block<GgmlType::Q4_0> : SmallBlock<GgmlType::Q4_0> {};
template <>
struct Block<GgmlType::Q4_1> : SmallBlock<GgmlType::Q4_1> {};
template <>
struct Block<GgmlType::Q5_0> : SmallBlock<GgmlType::Q5_0> {};
template <>
struct Block<GgmlType::Q5_1> : SmallBlock<GgmlType::Q5_1> {};
template <>
struct Block<GgmlType::Q8_0> : SmallBlock<GgmlType::Q8_0> {};

// Q4_K's 6-bit scales and mins of sub-blocks 2c and 2c + 1 (chunk c) from the 12 packed
// bytes (as three words), as two bytes each, without branches: all four
// scales (or mins) of sub-blocks 0-3 or 4-7 come out of the three words at once, one byte
// each; the GEMV's lanes hold different chunks, so a branch would run both ways.
__device__ __forceinline__ void q4k_chunk_scales(int c, const uint32_t (&s)[3], uint32_t& scales, uint32_t& mins) {
  const uint32_t low_scales = s[0] & 0x3F3F3F3Fu, low_mins = s[1] & 0x3F3F3F3Fu;
  const uint32_t high_scales = (s[2] & 0x0F0F0F0Fu) | ((s[0] >> 2) & 0x30303030u);
  const uint32_t high_mins = ((s[2] >> 4) & 0x0F0F0F0Fu) | ((s[1] >> 2) & 0x30303030u);
  const int shift = 16 * (c & 1);  // sub-blocks 2c, 2c + 1: bytes 2(c % 2), + 1
  scales = ((c < 2 ? low_scales : high_scales) >> shift) & 0xFFFFu;
  mins = ((c < 2 ? low_mins : high_mins) >> shift) & 0xFFFFu;
}

// Q4_K: GGUF {d, dmin, scales[12], qs[128]} (144 bytes); quants qs, header the first 16.
template <>
struct Block<GgmlType::Q4_K> {
  static constexpr bool kPacked = true, kHasMin = true, kScaled = true;
  static constexpr int kElements = 256, kParts = 8, kGgufBytes = 144, kQuantBytes = 128, kHeaderBytes = 16;
  __host__ __device__ static void repack(const uint8_t* gguf, uint8_t* quants, uint8_t* header) {
    for (int i = 0; i < 16; ++i) header[i] = gguf[i];
    for (int i = 0; i < 128; ++i) quants[i] = gguf[16 + i];
  }
  __device__ static void columns(int part, int& pa, int& pb) {
    pa = 64 * (part >> 1) + 16 * (part & 1);
    pb = pa + 32;
  }
  struct Raw {
    uint4 q, h;  // the part's 16 quant bytes; the block's header
  };
  __device__ static Raw load(const uint8_t* quants, const uint8_t* header, int part) {
    return {load_weights16(quants + 16 * part), *reinterpret_cast<const uint4*>(header)};
  }
  __device__ static void codes(const Raw& r, int part, CodeRun& a, CodeRun& b) {
    const float dall = half_bits(r.h.x & 0xFFFF), dmin = half_bits(r.h.x >> 16);
    const uint32_t scales[3] = {r.h.y, r.h.z, r.h.w};
    uint32_t sc, mn;
    q4k_chunk_scales(part >> 1, scales, sc, mn);
    a.d = dall * small_uint_to_float(sc & 0xFF), a.m = -dmin * small_uint_to_float(mn & 0xFF);
    b.d = dall * small_uint_to_float(sc >> 8), b.m = -dmin * small_uint_to_float(mn >> 8);
    nibble_codes(r.q, a, b);
  }
  __device__ static void codes(const uint8_t* quants, const uint8_t* header, int part, CodeRun& a, CodeRun& b) {
    codes(load(quants, header, part), part, a, b);
  }
  __device__ static void decode(const uint8_t* quants, const uint8_t* header, int part, Run& a, Run& b) {
    CodeRun ca, cb;
    codes(quants, header, part, ca, cb);
    to_floats<false>(ca, a), to_floats<false>(cb, b);
  }
};

// Q6_K: GGUF {ql[128], qh[64], scales[16] (int8), d} (210 bytes); quants ql and qh (192),
// header the scales and d (20, two of them padding).
template <>
struct Block<GgmlType::Q6_K> {
  static constexpr bool kPacked = true, kHasMin = true, kScaled = true;
  static constexpr int kElements = 256, kParts = 8, kGgufBytes = 210, kQuantBytes = 192, kHeaderBytes = 20;
  __host__ __device__ static void repack(const uint8_t* gguf, uint8_t* quants, uint8_t* header) {
    for (int i = 0; i < 192; ++i) quants[i] = gguf[i];
    for (int i = 0; i < 18; ++i) header[i] = gguf[192 + i];
    header[18] = header[19] = 0;
  }
  __device__ static void columns(int part, int& pa, int& pb) {
    const int n = part >> 2, l0 = ((part >> 1) & 1) * 16, row = part & 1;
    pa = 128 * n + 32 * row + l0;
    pb = pa + 64;
  }
  struct Raw {
    uint4 ql, qh;      // the part's low four bits and its high two
    uint32_t sa, sb, d;  // the header words holding its two runs' scales, and d
  };
  __device__ static Raw load(const uint8_t* quants, const uint8_t* header, int part) {
    const int n = part >> 2, l0 = ((part >> 1) & 1) * 16, row = part & 1;
    const auto* h = reinterpret_cast<const uint32_t*>(header);
    const int col_a = 128 * n + 32 * row + l0;  // runs a and b: scales col_a / 16 and + 4
    return {load_weights16(quants + 64 * n + 32 * row + l0), load_weights16(quants + 128 + 32 * n + l0),
            h[col_a / 64], h[col_a / 64 + 1], h[4]};
  }
  __device__ static void codes(const Raw& r, int part, CodeRun& a, CodeRun& b) {
    const int l0 = ((part >> 1) & 1) * 16, row = part & 1;
    const int index_a = (32 * row + l0) / 16;  // of its scale byte in word sa (b's: in sb)
    const float dall = half_bits(r.d & 0xFFFF);
    a.d = dall * static_cast<float>(static_cast<int8_t>(r.sa >> (8 * index_a)));
    b.d = dall * static_cast<float>(static_cast<int8_t>(r.sb >> (8 * index_a)));
    a.m = -32.0f * a.d, b.m = -32.0f * b.d;
    const uint32_t lw[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w}, hw[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
    const int shift = 2 * row;  // qh bits 0-1 and 4-5 for row 0, 2-3 and 6-7 for row 1
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      a.q[k] = (lw[k] & 0x0F0F0F0Fu) | (((hw[k] >> shift) & 0x03030303u) << 4);
      b.q[k] = ((lw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> (shift + 4)) & 0x03030303u) << 4);
    }
  }
  __device__ static void codes(const uint8_t* quants, const uint8_t* header, int part, CodeRun& a, CodeRun& b) {
    codes(load(quants, header, part), part, a, b);
  }
  __device__ static void decode(const uint8_t* quants, const uint8_t* header, int part, Run& a, Run& b) {
    CodeRun ca, cb;
    codes(quants, header, part, ca, cb);
    to_floats<false>(ca, a), to_floats<false>(cb, b);
  }
};

// Where a row's streams lie in the GPU layout.
template <GgmlType T>
struct RowLayout {
  using B = Block<T>;
  __host__ __device__ static size_t quant_bytes(int cols) { return (static_cast<size_t>(cols) / B::kElements * B::kQuantBytes + 15) / 16 * 16; }
  __host__ __device__ static size_t row_bytes(int cols) {
    return (quant_bytes(cols) + static_cast<size_t>(cols) / B::kElements * B::kHeaderBytes + 15) / 16 * 16;
  }
};

// A matrix in that layout, as kernels address it.
template <GgmlType T>
struct Rows {
  using B = Block<T>;
  const uint8_t* data;
  size_t row_bytes, quant_bytes;
  __device__ const uint8_t* quants(int row, int block) const {
    return data + row_bytes * row + static_cast<size_t>(block) * B::kQuantBytes;
  }
  __device__ const uint8_t* header(int row, int block) const {
    return data + row_bytes * row + quant_bytes + static_cast<size_t>(block) * B::kHeaderBytes;
  }
};

template <GgmlType T>
Rows<T> rows_of(const DeviceWeight& w) {
  return {w.data, RowLayout<T>::row_bytes(w.cols), RowLayout<T>::quant_bytes(w.cols)};
}

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
