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

// One 16-row tile times NB activation rows. Per sub-block: unpack the codes once, then per
// token 4 or 8 VNNI dot products give the 16 rows' integer sums, which are scaled by
// d * dx and corrected by m * sum(x) in float.
template <PackedKind KIND, int KCT, int NB>
void int_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  using T = IntKind<KIND>;
  constexpr int kGroups = T::sub / 4;
  constexpr int kRecord = T::code_bytes + T::scale_bytes;
  const int k = KCT ? KCT : in.k;
  const int subs = k / T::sub;
  const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * subs * kRecord;
  const int8_t* codes[NB];
  const float* scales[NB];
  const float* sums[NB];
  for (int n = 0; n < NB; ++n) {
    codes[n] = in.codes + static_cast<size_t>(token0 + n) * k;
    scales[n] = in.scales + static_cast<size_t>(token0 + n) * (k / 32);
    sums[n] = in.sums + static_cast<size_t>(token0 + n) * (k / 16);
  }
  __m512 acc[NB];
  for (int n = 0; n < NB; ++n) acc[n] = _mm512_setzero_ps();
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < subs; ++b, record += kRecord) {
    __m512i wv[kGroups];
    if constexpr (T::nibbles) {
      for (int j = 0; j < kGroups / 2; ++j) {
        const __m512i packed = _mm512_load_si512(record + 64 * j);
        wv[2 * j] = _mm512_and_si512(packed, low_nibble);
        wv[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibble);
      }
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
    for (int n = 0; n < NB; ++n) {
      const int8_t* xq = codes[n] + b * T::sub;
      __m512i dot = _mm512_setzero_si512();
      for (int g = 0; g < kGroups; ++g) dot = _mm512_dpbusd_epi32(dot, wv[g], _mm512_set1_epi32(load_i32(xq + 4 * g)));
      const float dx = scales[n][(b * T::sub) / 32];
      const float sx = T::sub == 32 ? sums[n][2 * b] + sums[n][2 * b + 1] : sums[n][b];
      acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[n]);
      acc[n] = _mm512_fmadd_ps(m, _mm512_set1_ps(sx), acc[n]);
    }
  }
  const __mmask16 mask = row_mask(w, tile);
  for (int n = 0; n < NB; ++n)
    _mm512_mask_storeu_ps(y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows, mask, acc[n]);
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
                                avx512::gelu_tanh_impl, avx512::softmax_rows_impl};
  return table;
}

}  // namespace splash::kernels
