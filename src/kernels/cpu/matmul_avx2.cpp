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
#include "kernels/cpu/k_quant_record.h"
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

// How many k-groups' maddubs products may be summed in 16 bits before they are widened: a
// product pair is at most 2 * max_code * 127 (activation codes are within +-127), and the sum
// must stay below 2^15. One vpmaddwd per that many groups instead of one per group: maddubs
// and maddwd share the multiply pipes, so this takes 7 of a Q4_K sub-block's 16 multiplies
// away (Qwen2.5-Coder-1.5B Q4_K_M on a 2-core Zen 3: prefill 1.4x, decode 1.1x; PERF.md).
// The sums are exact either way, so results are bit for bit those of one widening per group.
constexpr int groups_summed_in_16_bits(int max_code, int groups) {
  return std::min(groups, 32767 / (2 * max_code * 127));
}

// The 8 rows' integer sums (a tile half) against one token's codes over kGroups k-groups.
// Codes are at most kMaxCode, so maddubs cannot saturate; with kOffset128 (Q8_0, stored as
// q + 128) they are flipped back to signed and multiplied as |w| * sign(x, w) instead.
template <int kGroups, int kMaxCode, bool kOffset128 = false>
inline __m256i dot_groups(const __m256i (&wv)[kGroups], const int8_t* xq) {
  constexpr int kFold = kOffset128 ? 1 : groups_summed_in_16_bits(kMaxCode, kGroups);
  static_assert(kFold >= 1 && kGroups % kFold == 0);
  const __m256i ones = _mm256_set1_epi16(1);
  const auto products = [&](int g) {
    const __m256i xb = _mm256_set1_epi32(load_i32(xq + 4 * g));
    if constexpr (kOffset128) {
      const __m256i signed_w = _mm256_xor_si256(wv[g], _mm256_set1_epi8(static_cast<char>(0x80)));
      return _mm256_maddubs_epi16(_mm256_abs_epi8(signed_w), _mm256_sign_epi8(xb, signed_w));
    } else {
      return _mm256_maddubs_epi16(wv[g], xb);
    }
  };
  __m256i dot = _mm256_setzero_si256();
  for (int g0 = 0; g0 < kGroups; g0 += kFold) {
    __m256i sum16 = products(g0);
    for (int g = g0 + 1; g < g0 + kFold; ++g) sum16 = _mm256_add_epi16(sum16, products(g));
    dot = _mm256_add_epi32(dot, _mm256_madd_epi16(sum16, ones));
  }
  return dot;
}

// acc[n] += d_w * d_x * dot (+ m_w * sum(x) where kMins: not for kOffset128, whose m is folded
// into the signed codes, nor where the caller adds the mins itself) over one sub-block of
// kGroups k-groups at column `col`, for each token.
template <int NB, int kGroups, int kMaxCode, bool kOffset128 = false, bool kMins = !kOffset128>
inline void accumulate_sub_block(const __m256i (&wv)[kGroups], __m256 d, __m256 m, const MatmulInput& in, int k,
                                 int token0, int col, __m256 (&acc)[NB]) {
  // Offsets from the first token's rows, constant for each n where k is (GCC otherwise keeps
  // one induction pointer per token and stream, and spills them).
  const int8_t* codes = in.codes + static_cast<size_t>(token0) * k + col;
  const float* scales = in.scales + static_cast<size_t>(token0) * (k / 32) + col / 32;
  const float* sums = in.sums + static_cast<size_t>(token0) * (k / 16) + col / 16;
  for (int n = 0; n < NB; ++n) {
    const __m256i dot = dot_groups<kGroups, kMaxCode, kOffset128>(wv, codes + n * k);
    const float dx = scales[n * (k / 32)];
    acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[n]);
    if constexpr (kMins) {
      const float* s = sums + n * (k / 16);
      acc[n] = _mm256_fmadd_ps(m, _mm256_set1_ps(kGroups == 8 ? s[0] + s[1] : s[0]), acc[n]);
    }
  }
}

// kGroups k-groups of 4-bit codes of one tile half: vector j (64 bytes, this half's 32 at
// 32 * half) holds k-group 2j in its low nibbles and 2j + 1 in its high ones.
template <int kGroups>
inline void nibble_codes(const uint8_t* p, int half, __m256i (&wv)[kGroups]) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  for (int j = 0; j < kGroups / 2; ++j) {
    const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 64 * j + 32 * half));
    wv[2 * j] = _mm256_and_si256(packed, low_nibble);
    wv[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble);
  }
}

// 8 bytes of one tile half (its lanes' u8 or int8 values at `at`) as floats.
template <bool kSigned>
inline __m256 widen8(const uint8_t* at) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at));
  return _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
}
inline __m256 half_floats(const uint8_t* at) { return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(at))); }

// Records fetched ahead of use (as the AVX-512 kernels: a decode step's K-quant stream is
// latency-bound on one core without).
constexpr int kPrefetchRecords = 4;

// Q4_K records (k_quant_record.h), one tile half at a time: per block fp16 d and dmin, per
// sub-block of 32 the 6-bit scales and mins widened and multiplied out (exact in float).
template <int KCT, int NB>
void q4k_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  constexpr int kRecord = Q4KRecord::kCodeBytes + Q4KRecord::kScaleBytes;
  const int k = KCT ? KCT : in.k;
  const int blocks = k / 256;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * blocks * kRecord;
    __m256 acc[NB];
    for (int n = 0; n < NB; ++n) acc[n] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; ++b, record += kRecord) {
      const __m256 d = half_floats(record + Q4KRecord::d + 16 * half);
      const __m256 neg_dmin = _mm256_sub_ps(_mm256_setzero_ps(), half_floats(record + Q4KRecord::dmin + 16 * half));
      for (int s = 0; s < Q4KRecord::kSubBlocks; ++s) {
        if (half == 0)  // the second half reads the tile again from the cache
          for (int line = 0; line < 5; ++line)
            _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchRecords * kRecord + 320 * s + 64 * line), _MM_HINT_T0);
        __m256i wv[8];
        nibble_codes(record + Q4KRecord::codes(s), half, wv);
        const __m256 scale = _mm256_mul_ps(d, widen8<false>(record + Q4KRecord::scales(s) + 8 * half));
        accumulate_sub_block<NB, 8, Q4KRecord::kMaxCode, false, /*kMins=*/false>(wv, scale, _mm256_setzero_ps(), in, k,
                                                                               token0, b * 256 + s * 32, acc);
      }
      // The block's min terms after its codes', so neither a min vector nor the sums is live
      // beside the eight code vectors: GCC then keeps the 4-token loop's accumulators in
      // registers (10% on a 64-token matmul, Zen 3).
      const float* sums = in.sums + static_cast<size_t>(token0) * (k / 16) + b * 16;
      for (int s = 0; s < Q4KRecord::kSubBlocks; ++s) {
        const __m256 min = _mm256_mul_ps(neg_dmin, widen8<false>(record + Q4KRecord::mins(s) + 8 * half));
        for (int n = 0; n < NB; ++n) {
          const float* pair = sums + n * (k / 16) + 2 * s;
          acc[n] = _mm256_fmadd_ps(min, _mm256_set1_ps(pair[0] + pair[1]), acc[n]);
        }
      }
    }
    for (int n = 0; n < NB; ++n)
      store_rows(w, tile, half, acc[n], y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows + half * 8);
  }
}

// Q6_K records, one tile half at a time: per sub-block of 16 the codes rebuilt from their two
// bit planes, the int8 scales widened and multiplied by d, m = -32 d scale.
template <int KCT, int NB>
void q6k_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  constexpr int kRecord = Q6KRecord::kCodeBytes + Q6KRecord::kScaleBytes;
  const int k = KCT ? KCT : in.k;
  const int blocks = k / 256;
  const __m256i low_nibble = _mm256_set1_epi8(0x0F), high_pair = _mm256_set1_epi8(0x30);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * blocks * kRecord;
    __m256 acc[NB];
    for (int n = 0; n < NB; ++n) acc[n] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; ++b, record += kRecord) {
      const __m256 d = half_floats(record + Q6KRecord::d + 16 * half);
      for (int s = 0; s < Q6KRecord::kSubBlocks; ++s) {
        if (half == 0)
          for (int line = 0; line < 4; ++line)
            _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchRecords * kRecord + 256 * s + 64 * line), _MM_HINT_T0);
        const auto load = [&](size_t at) {
          return _mm256_load_si256(reinterpret_cast<const __m256i*>(record + at + 32 * half));
        };
        const __m256i low0 = load(Q6KRecord::low(2 * s)), low1 = load(Q6KRecord::low(2 * s + 1));
        const __m256i high = load(Q6KRecord::high(s));
        const __m256i wv[4] = {
            _mm256_or_si256(_mm256_and_si256(low0, low_nibble), _mm256_and_si256(_mm256_slli_epi16(high, 4), high_pair)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), low_nibble),
                            _mm256_and_si256(_mm256_slli_epi16(high, 2), high_pair)),
            _mm256_or_si256(_mm256_and_si256(low1, low_nibble), _mm256_and_si256(high, high_pair)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), low_nibble),
                            _mm256_and_si256(_mm256_srli_epi16(high, 2), high_pair)),
        };
        const __m256 ds = _mm256_mul_ps(d, widen8<true>(record + Q6KRecord::scales(s) + 8 * half));
        accumulate_sub_block<NB, 4, Q6KRecord::kMaxCode>(wv, ds, _mm256_mul_ps(ds, _mm256_set1_ps(-32.0f)), in, k,
                                                         token0, b * 256 + s * 16, acc);
      }
    }
    for (int n = 0; n < NB; ++n)
      store_rows(w, tile, half, acc[n], y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows + half * 8);
  }
}

// The kinds of one scale pair per sub-block, one tile half at a time.
template <PackedKind KIND, int KCT, int NB>
void flat_int_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  using T = IntKind<KIND>;
  constexpr int kGroups = T::sub / 4;
  constexpr int kRecord = T::code_bytes + T::scale_bytes;
  const int k = KCT ? KCT : in.k;
  const int subs = k / T::sub;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* record = w.data.data() + static_cast<size_t>(tile) * subs * kRecord;
    __m256 acc[NB];
    for (int n = 0; n < NB; ++n) acc[n] = _mm256_setzero_ps();
    for (int b = 0; b < subs; ++b, record += kRecord) {
      __m256 d, m;
      if constexpr (T::half) {
        d = half_floats(record + T::code_bytes + 16 * half);
        m = half_floats(record + T::code_bytes + 32 + 16 * half);
      } else {
        d = _mm256_load_ps(reinterpret_cast<const float*>(record + T::code_bytes + 32 * half));
        m = _mm256_load_ps(reinterpret_cast<const float*>(record + T::code_bytes + 64 + 32 * half));
      }
      __m256i wv[kGroups];
      if constexpr (T::nibbles) {
        nibble_codes(record, half, wv);
      } else {
        for (int g = 0; g < kGroups; ++g) wv[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(record + 64 * g + 32 * half));
      }
      accumulate_sub_block<NB, kGroups, T::max_code, T::offset128>(wv, d, m, in, k, token0, b * T::sub, acc);
    }
    for (int n = 0; n < NB; ++n)
      store_rows(w, tile, half, acc[n], y + static_cast<size_t>(token0 + n) * ldy + tile * kTileRows + half * 8);
  }
}

template <PackedKind KIND, int KCT, int NB>
void int_tile(const PackedWeight& w, int tile, const MatmulInput& in, int token0, float* y, int ldy) {
  if constexpr (KIND == PackedKind::U4_K) q4k_tile<KCT, NB>(w, tile, in, token0, y, ldy);
  else if constexpr (KIND == PackedKind::U6_K) q6k_tile<KCT, NB>(w, tile, in, token0, y, ldy);
  else flat_int_tile<KIND, KCT, NB>(w, tile, in, token0, y, ldy);
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
                                avx2::gelu_tanh_impl, avx2::softmax_rows_impl, avx2::delta_rule_impl};
  return table;
}

}  // namespace splash::kernels
