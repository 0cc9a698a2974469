// AVX-512 (F, BW, VL, DQ) + VNNI kernels. Compiled with those target flags only; reached
// only through avx512_kernels() after cpu_features.cpp confirmed the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <iterator>
#include <utility>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/int_kind_traits.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/k_quant_record.h"
#include "kernels/cpu/shipped_shapes.h"

namespace splash::kernels::avx512 {
// 4 tokens x up to 4 heads = 16 score vectors, half of the 32 zmm registers.
constexpr int kQueryBlock = 4;
#include "kernels/cpu/portable_ops_impl.h"

namespace {

inline __mmask16 row_mask(const PackedWeight& w, int tile) {
  const int left = w.rows - tile * kTileRows;
  return left >= kTileRows ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// The activation rows one tile call reads: codes, per 32 a scale, per 16 the scaled code
// sum; token n's row at a fixed stride from the first, so with a compile-time K (KCT) every
// access is one base register and a constant displacement (no pointer per token to keep).
template <int NB, int KCT>
struct TokenRows {
  const int8_t* codes;
  const float *scales, *sums;
  int k;
  TokenRows(const MatmulInput& in, int k_, int token0)
      : codes(in.codes + static_cast<size_t>(token0) * k_),
        scales(in.scales + static_cast<size_t>(token0) * (k_ / 32)),
        sums(in.sums + static_cast<size_t>(token0) * (k_ / 16)),
        k(k_) {}
  int width() const { return KCT ? KCT : k; }
  const int8_t* code(int n, int col) const { return codes + static_cast<size_t>(n) * width() + col; }
  float scale(int n, int col) const { return scales[static_cast<size_t>(n) * (width() / 32) + col / 32]; }
  const float* sum(int n, int col) const { return sums + static_cast<size_t>(n) * (width() / 16) + col / 16; }
};

// kGroups k-groups of 4-bit codes from kGroups / 2 vectors: vector j holds k-group 2j in
// its low nibbles and 2j + 1 in its high ones.
template <int kGroups>
inline void nibble_codes(const uint8_t* p, __m512i low_nibble, __m512i (&wv)[kGroups]) {
  for (int j = 0; j < kGroups / 2; ++j) {
    const __m512i packed = _mm512_load_si512(p + 64 * j);
    wv[2 * j] = _mm512_and_si512(packed, low_nibble);
    wv[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibble);
  }
}

// acc += w (16 rows x 4 u8 codes) . x (4 s8 codes, broadcast from memory): vpdpbusd with its
// {1to16} memory operand, one instruction where set1 + dpbusd compile to a broadcast and a
// dot product (GCC 12 does not fold the broadcast), so prefill issues half as many.
using AliasedInt32 = int32_t __attribute__((may_alias));
[[gnu::always_inline]] inline __m512i dpbusd_broadcast(__m512i acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const AliasedInt32*>(x)));
  return acc;
}

// Sums per token of one tile call. Each sub-block's VNNI sums run as kChains interleaved
// integer chains when few tokens give the core little independent work (8 chained vpdpbusd
// are ~40 cycles of latency); integer sums are exact in any order, and the float steps are
// the same for every token count, so a token's result does not depend on its batch.
template <int NB>
constexpr int kDotChains = NB >= 4 ? 2 : NB == 2 ? 2 : 4;

// acc += d_w * d_x * dot + m_w * sum(x) over one sub-block of kGroups k-groups at column
// `col`, for each token: the integer sums of the 16 rows by VNNI, scaled in float. Each
// token's step is spelled out with a constant index (a fold over the tokens) so that the
// accumulators stay registers instead of an indexed array in memory.
template <int NB, int kGroups, int KCT>
[[gnu::always_inline]] inline void accumulate_sub_block(const __m512i (&wv)[kGroups], __m512 d, __m512 m,
                                                       const TokenRows<NB, KCT>& x, int col, __m512 (&acc)[NB]) {
  constexpr int kChains = std::min(kDotChains<NB>, kGroups);
  const auto token = [&]<int n>() __attribute__((always_inline)) {
    const int8_t* xq = x.code(n, col);
    __m512i dot[kChains];
    for (int c = 0; c < kChains; ++c) dot[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g) dot[g % kChains] = dpbusd_broadcast(dot[g % kChains], wv[g], xq + 4 * g);
    for (int width = kChains / 2; width > 0; width /= 2)
      for (int c = 0; c < width; ++c) dot[c] = _mm512_add_epi32(dot[c], dot[c + width]);
    const float* sx = x.sum(n, col);  // one per 16 columns: a 32-weight sub-block takes two
    acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[0]), _mm512_mul_ps(d, _mm512_set1_ps(x.scale(n, col))), acc[n]);
    acc[n] = _mm512_fmadd_ps(m, _mm512_set1_ps(sx[0]), acc[n]);
    if constexpr (kGroups == 8) acc[n] = _mm512_fmadd_ps(m, _mm512_set1_ps(sx[1]), acc[n]);
  };
  [&]<int... n>(std::integer_sequence<int, n...>) __attribute__((always_inline)) { (token.template operator()<n>(), ...); }(
      std::make_integer_sequence<int, NB>());
}

template <int NB>
[[gnu::always_inline]] inline void store_tile(const PackedWeight& w, int tile, const __m512 (&acc)[NB], int token0,
                                              float* y, int ldy) {
  const __mmask16 mask = row_mask(w, tile);
#pragma GCC unroll 8
  for (int n = 0; n < NB; ++n)
    _mm512_mask_storeu_ps(y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows, mask, acc[n]);
}

// The accumulators of one tile call, zeroed.
#define SPLASH_TILE_ACCUMULATORS(NB) \
  __m512 acc[NB];                    \
  _Pragma("GCC unroll 8") for (int n = 0; n < NB; ++n) acc[n] = _mm512_setzero_ps()

// Q4_K records (k_quant_record.h): per 256-weight block the 16 rows' fp16 d and dmin; per
// sub-block of 32 the 6-bit scales and mins widened and multiplied out (exact in float:
// 11 x 6 bits), then the codes as the 4-bit kinds.
// Records fetched ahead of use. One core's share of a decode step is a single stream of
// K-quant records that the hardware prefetcher alone leaves latency-bound (measured on the
// 2-core EPYC: one thread read 14 GB/s without, 18-34 GB/s with; docs/PERF.md).
constexpr int kPrefetchRecords = 4;

template <int KCT, int NB>
void q4k_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  constexpr int kRecord = Q4KRecord::kCodeBytes + Q4KRecord::kScaleBytes;
  const int k = KCT ? KCT : in.k;
  const int blocks = k / 256;
  const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * blocks * kRecord;
  const TokenRows<NB, KCT> x(in, k, token0);
  SPLASH_TILE_ACCUMULATORS(NB);
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < blocks; ++b, record += kRecord) {
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(record + Q4KRecord::d)));
    const __m512 neg_dmin = _mm512_sub_ps(
        _mm512_setzero_ps(), _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(record + Q4KRecord::dmin))));
    for (int s = 0; s < Q4KRecord::kSubBlocks; ++s) {
      for (int line = 0; line < 5; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchRecords * kRecord + 320 * s + 64 * line), _MM_HINT_T0);
      __m512i wv[8];
      nibble_codes(record + Q4KRecord::codes(s), low_nibble, wv);
      const auto widen = [&](size_t at) {
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(record + at))));
      };
      accumulate_sub_block<NB, 8, KCT>(wv, _mm512_mul_ps(d, widen(Q4KRecord::scales(s))),
                                  _mm512_mul_ps(neg_dmin, widen(Q4KRecord::mins(s))), x, b * 256 + s * 32, acc);
    }
  }
  store_tile(w, tile, acc, token0, y, ldy);
}

// Q6_K records: per sub-block of 16 the codes rebuilt from their two bit planes (low nibble
// | high pair << 4), the int8 scales widened and multiplied by d, m = -32 d scale.
template <int KCT, int NB>
void q6k_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  constexpr int kRecord = Q6KRecord::kCodeBytes + Q6KRecord::kScaleBytes;
  const int k = KCT ? KCT : in.k;
  const int blocks = k / 256;
  const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * blocks * kRecord;
  const TokenRows<NB, KCT> x(in, k, token0);
  SPLASH_TILE_ACCUMULATORS(NB);
  const __m512i low_nibble = _mm512_set1_epi8(0x0F), high_pair = _mm512_set1_epi8(0x30);
  const __m512 minus_32 = _mm512_set1_ps(-32.0f);
  for (int b = 0; b < blocks; ++b, record += kRecord) {
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(record + Q6KRecord::d)));
    for (int s = 0; s < Q6KRecord::kSubBlocks; ++s) {
      for (int line = 0; line < 4; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchRecords * kRecord + 256 * s + 64 * line), _MM_HINT_T0);
      const __m512i low0 = _mm512_load_si512(record + Q6KRecord::low(2 * s));
      const __m512i low1 = _mm512_load_si512(record + Q6KRecord::low(2 * s + 1));
      const __m512i high = _mm512_load_si512(record + Q6KRecord::high(s));
      const __m512i wv[4] = {
          _mm512_or_si512(_mm512_and_si512(low0, low_nibble), _mm512_and_si512(_mm512_slli_epi16(high, 4), high_pair)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low0, 4), low_nibble),
                          _mm512_and_si512(_mm512_slli_epi16(high, 2), high_pair)),
          _mm512_or_si512(_mm512_and_si512(low1, low_nibble), _mm512_and_si512(high, high_pair)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low1, 4), low_nibble),
                          _mm512_and_si512(_mm512_srli_epi16(high, 2), high_pair)),
      };
      const __m512 ds = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                             _mm_load_si128(reinterpret_cast<const __m128i*>(record + Q6KRecord::scales(s))))));
      accumulate_sub_block<NB, 4, KCT>(wv, ds, _mm512_mul_ps(ds, minus_32), x, b * 256 + s * 16, acc);
    }
  }
  store_tile(w, tile, acc, token0, y, ldy);
}

// One 16-row tile times NB activation rows. Per sub-block: unpack the codes once, then per
// token 4 or 8 VNNI dot products give the 16 rows' integer sums, which are scaled by
// d * dx and corrected by m * sum(x) in float.
template <PackedKind KIND, int KCT, int NB>
void flat_int_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  using T = IntKind<KIND>;
  constexpr int kGroups = T::sub / 4;
  constexpr int kRecord = T::code_bytes + T::scale_bytes;
  const int k = KCT ? KCT : in.k;
  const int subs = k / T::sub;
  const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * subs * kRecord;
  const TokenRows<NB, KCT> x(in, k, token0);
  SPLASH_TILE_ACCUMULATORS(NB);
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < subs; ++b, record += kRecord) {
    __m512i wv[kGroups];
    if constexpr (T::nibbles) {
      nibble_codes(record, low_nibble, wv);
    } else {
      for (int g = 0; g < kGroups; ++g) wv[g] = _mm512_load_si512(record + 64 * g);
    }
    __m512 d, m;
    if constexpr (T::half) {
      d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(record + T::code_bytes)));
      m = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(record + T::code_bytes + 32)));
    } else {
      d = _mm512_load_ps(record + T::code_bytes);
      m = _mm512_load_ps(record + T::code_bytes + 64);
    }
    accumulate_sub_block<NB, kGroups, KCT>(wv, d, m, x, b * T::sub, acc);
  }
  store_tile(w, tile, acc, token0, y, ldy);
}

template <PackedKind KIND, int KCT, int NB>
void int_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  if constexpr (KIND == PackedKind::U4_K) q4k_tile<KCT, NB>(w, tile, in, token0, y, ldy);
  else if constexpr (KIND == PackedKind::U6_K) q6k_tile<KCT, NB>(w, tile, in, token0, y, ldy);
  else flat_int_tile<KIND, KCT, NB>(w, tile, in, token0, y, ldy);
}

// Float weights: one 16-row column vector per k, times NB broadcast activations.
template <PackedKind KIND, int NB>
void float_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  constexpr int kRecord = KIND == PackedKind::F32 ? 64 : 32;
  const int k = in.k;
  const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * k * kRecord;
  __m512 acc[NB];
  for (int n = 0; n < NB; ++n) acc[n] = _mm512_setzero_ps();
  for (int i = 0; i < k; ++i, record += kRecord) {
    __m512 wv;
    if constexpr (KIND == PackedKind::F32) {
      wv = _mm512_load_ps(record);
    } else if constexpr (KIND == PackedKind::F16) {
      wv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(record)));
    } else {
      const __m512i widened = _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(record)));
      wv = _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
    }
    for (int n = 0; n < NB; ++n)
      acc[n] = _mm512_fmadd_ps(wv, _mm512_set1_ps(in.x[static_cast<size_t>(token0 + n) * k + i]), acc[n]);
  }
  const __mmask16 mask = row_mask(w, tile);
  for (int n = 0; n < NB; ++n)
    _mm512_mask_storeu_ps(y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows, mask, acc[n]);
}

constexpr int kTokenBlocks[] = {8, 4, 2, 1};
#include "kernels/cpu/tile_dispatch_impl.h"

}  // namespace
}  // namespace splash::kernels::avx512

namespace splash::kernels {

const IsaKernels& avx512_kernels() {
  static const IsaKernels table{"avx512", avx512::quantize_rows_impl, avx512::matmul_tiles,
                                avx512::attention_item_impl, avx512::rms_norm_impl, avx512::silu_mul_impl,
                                avx512::gelu_tanh_impl, avx512::softmax_rows_impl, avx512::delta_rule_impl};
  return table;
}

}  // namespace splash::kernels
