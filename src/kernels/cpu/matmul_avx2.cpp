// AVX2 + FMA + F16C kernels: the path for x86-64 CPUs without AVX-512/VNNI. Same packed
// layout as the AVX-512 kernels; each 16-row tile is processed as two 8-row halves, and the
// u8 x s8 products use maddubs (exact here: codes are small, or made signed for Q8_0).
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

namespace splash::kernels::avx2 {
// 2 tokens x up to 4 heads = 8 score vectors of two ymm each: the 16 ymm registers.
constexpr int kQueryBlock = 2;
#include "kernels/cpu/portable_ops_impl.h"

namespace {

inline void store_rows(const PackedWeight& w, int tile, int half, __m256 value, float* dst) {
  const int first_row = tile * kTileRows + half * 8;
  const int left = w.rows - first_row;
  if (left >= 8) {
    _mm256_storeu_ps(dst, value);
  } else if (left > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, value);
    std::memcpy(dst, tmp, sizeof(float) * left);
  }
}

template <PackedKind KIND, int KCT, int NB>
void int_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  using T = IntKind<KIND>;
  constexpr int kGroups = T::sub / 4;
  constexpr int kRecord = T::code_bytes + T::scale_bytes;
  const int k = KCT ? KCT : in.k;
  const int subs = k / T::sub;
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int half = 0; half < 2; ++half) {
    const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * subs * kRecord;
    __m256 acc[NB];
    for (int n = 0; n < NB; ++n) acc[n] = _mm256_setzero_ps();
    for (int b = 0; b < subs; ++b, record += kRecord) {
      __m256 d, m;
      if constexpr (T::half) {
        d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(record + T::code_bytes + 16 * half)));
        m = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(record + T::code_bytes + 32 + 16 * half)));
      } else {
        d = _mm256_load_ps(reinterpret_cast<const float*>(record + T::code_bytes + 32 * half));
        m = _mm256_load_ps(reinterpret_cast<const float*>(record + T::code_bytes + 64 + 32 * half));
      }
      for (int n = 0; n < NB; ++n) {
        const int8_t* xq = in.codes + static_cast<size_t>(token0 + n) * k + b * T::sub;
        __m256i dot = _mm256_setzero_si256();
        for (int g = 0; g < kGroups; ++g) {
          __m256i wg;
          if constexpr (T::nibbles) {
            const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(record + 64 * (g / 2) + 32 * half));
            wg = (g % 2 == 0) ? _mm256_and_si256(packed, low_nibble)
                              : _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble);
          } else {
            wg = _mm256_load_si256(reinterpret_cast<const __m256i*>(record + 64 * g + 32 * half));
          }
          const __m256i xb = _mm256_set1_epi32(load_i32(xq + 4 * g));
          __m256i products;
          if constexpr (T::offset128) {
            // Q8_0 codes were stored as q + 128; flip back to signed and use |w| * sign(x, w)
            // so maddubs cannot saturate. The m term then must not be applied.
            const __m256i signed_w = _mm256_xor_si256(wg, offset);
            products = _mm256_maddubs_epi16(_mm256_abs_epi8(signed_w), _mm256_sign_epi8(xb, signed_w));
          } else {
            products = _mm256_maddubs_epi16(wg, xb);
          }
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(products, ones));
        }
        const int t = token0 + n;
        const float dx = in.scales[static_cast<size_t>(t) * (k / 32) + (b * T::sub) / 32];
        acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[n]);
        if constexpr (!T::offset128) {
          const float* s = in.sums + static_cast<size_t>(t) * (k / 16);
          const float sx = T::sub == 32 ? s[2 * b] + s[2 * b + 1] : s[b];
          acc[n] = _mm256_fmadd_ps(m, _mm256_set1_ps(sx), acc[n]);
        }
      }
    }
    for (int n = 0; n < NB; ++n)
      store_rows(w, tile, half, acc[n], y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows + half * 8);
  }
}

template <PackedKind KIND, int NB>
void float_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  constexpr int kRecord = KIND == PackedKind::F32 ? 64 : 32;
  constexpr int kHalfBytes = kRecord / 2;
  const int k = in.k;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * k * kRecord + half * kHalfBytes;
    __m256 acc[NB];
    for (int n = 0; n < NB; ++n) acc[n] = _mm256_setzero_ps();
    for (int i = 0; i < k; ++i, record += kRecord) {
      __m256 wv;
      if constexpr (KIND == PackedKind::F32) {
        wv = _mm256_load_ps(reinterpret_cast<const float*>(record));
      } else if constexpr (KIND == PackedKind::F16) {
        wv = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(record)));
      } else {
        const __m256i widened = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(record)));
        wv = _mm256_castsi256_ps(_mm256_slli_epi32(widened, 16));
      }
      for (int n = 0; n < NB; ++n)
        acc[n] = _mm256_fmadd_ps(wv, _mm256_set1_ps(in.x[static_cast<size_t>(token0 + n) * k + i]), acc[n]);
    }
    for (int n = 0; n < NB; ++n)
      store_rows(w, tile, half, acc[n], y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows + half * 8);
  }
}

constexpr int kTokenBlocks[] = {4, 2, 1};
#include "kernels/cpu/tile_dispatch_impl.h"

}  // namespace
}  // namespace splash::kernels::avx2

namespace splash::kernels {

const IsaKernels& avx2_kernels() {
  static const IsaKernels table{"avx2", avx2::quantize_rows_impl, avx2::matmul_tiles, avx2::attention_item_impl,
                                avx2::rms_norm_impl, avx2::silu_mul_impl,
                                avx2::gelu_tanh_impl, avx2::softmax_rows_impl};
  return table;
}

}  // namespace splash::kernels
