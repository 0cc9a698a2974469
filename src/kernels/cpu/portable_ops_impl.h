#pragma once
// Element-wise and attention kernels written as plain loops the compiler vectorizes. This
// header is included by each ISA translation unit (matmul_avx2.cpp, matmul_avx512.cpp)
// inside its own namespace, so one source yields an AVX2 and an AVX-512 build of each.
// Do not include it anywhere else; the including file provides <bit>, <cmath>, <cstdint>,
// <cstring> and isa_kernels.h before opening its namespace, and defines
// kQueryBlock (query tokens whose heads share one pass over the key tiles).

namespace {

// std::fmax honours NaN rules that keep it from inlining; inputs here are never NaN.
inline float max_of(float a, float b) { return a > b ? a : b; }

// exp(x) for x in [-87, 0] on a float or a GCC vector: element-wise arithmetic and bit casts only,
// written without calls so loops over it vectorize.
template <typename F, typename I>
inline F exp_clamped(F x) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const F shifted = x * 1.44269504f + shifter;
  const F n = shifted - shifter;
  const F r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  F p = F{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  I bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  const I exponent = (bits - 0x4B400000 + 127) << 23;  // the integer n, as 2^n
  F scale;
  std::memcpy(&scale, &exponent, sizeof(scale));
  return p * scale;
}

// exp(x) for x <= 0 with ~2 ulp error.
inline float exp_nonpositive(float x) { return exp_clamped<float, int32_t>(x < -87.0f ? -87.0f : x); }

void quantize_rows_impl(const float* x, int n, int k, int8_t* codes, float* scales, float* sums) {
  for (int row = 0; row < n; ++row) {
    for (int b = 0; b < k / 32; ++b) {
      const float* v = x + static_cast<size_t>(row) * k + b * 32;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = max_of(amax, std::fabs(v[j]));
      const float d = amax / 127.0f;
      const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
      int8_t* q = codes + static_cast<size_t>(row) * k + b * 32;
      int32_t sum_low = 0, sum_high = 0;
      for (int j = 0; j < 32; ++j) {
        const float shifted = v[j] * inverse + 12582912.0f;  // round to nearest even
        const int32_t code = std::bit_cast<int32_t>(shifted) - 0x4B400000;
        q[j] = static_cast<int8_t>(code);
        if (j < 16) sum_low += code; else sum_high += code;
      }
      scales[static_cast<size_t>(row) * (k / 32) + b] = d;
      sums[static_cast<size_t>(row) * (k / 16) + 2 * b] = d * static_cast<float>(sum_low);
      sums[static_cast<size_t>(row) * (k / 16) + 2 * b + 1] = d * static_cast<float>(sum_high);
    }
  }
}

void rms_norm_impl(const float* x, const float* weight, float* out, int n, int dim, float eps) {
  for (int row = 0; row < n; ++row) {
    const float* v = x + static_cast<size_t>(row) * dim;
    float* o = out + static_cast<size_t>(row) * dim;
    float sum = 0.0f;
    for (int i = 0; i < dim; ++i) sum += v[i] * v[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) o[i] = v[i] * scale * weight[i];
  }
}

// Float lanes of one register (8 in the AVX2 build, 16 in the AVX-512 one) for the
// element-wise kernels below: GCC does not vectorize their scalar loops (the sign select and
// the division keep it out), so they are written on vectors, with the scalar form for the tail.
#if defined(__AVX512F__)
typedef float LaneF __attribute__((vector_size(64)));
typedef int32_t LaneI __attribute__((vector_size(64)));
#else
typedef float LaneF __attribute__((vector_size(32)));
typedef int32_t LaneI __attribute__((vector_size(32)));
#endif
constexpr int kLanes = sizeof(LaneF) / sizeof(float);

inline LaneF load_lanes(const float* p) {
  LaneF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store_lanes(float* p, LaneF v) { std::memcpy(p, &v, sizeof(v)); }

// sigmoid(t) = 1 / (1 + exp(-t)), from exp of -|t| (finite for any t): 1 / (1 + e) where
// t >= 0, else e / (1 + e); the vector form is the same formula lane by lane.
inline float sigmoid(float t) {
  const float e = exp_nonpositive(-std::fabs(t));
  return t >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
inline LaneF sigmoid(LaneF t) {
  const LaneF zero{}, one = zero + 1.0f, floor = zero - 87.0f;
  LaneF negative_abs = t < zero ? t : -t;
  negative_abs = negative_abs < floor ? floor : negative_abs;
  const LaneF e = exp_clamped<LaneF, LaneI>(negative_abs);
  return (t >= zero ? one : e) / (one + e);
}

void silu_mul_impl(const float* gate_up, float* out, int n, int ffn) {
  for (int row = 0; row < n; ++row) {
    const float* gate = gate_up + static_cast<size_t>(row) * 2 * ffn;
    const float* up = gate + ffn;
    float* o = out + static_cast<size_t>(row) * ffn;
    int i = 0;
    for (; i + kLanes <= ffn; i += kLanes) {
      const LaneF g = load_lanes(gate + i);
      store_lanes(o + i, g * sigmoid(g) * load_lanes(up + i));
    }
    for (; i < ffn; ++i) o[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
}

// GELU, tanh approximation (SigLIP's gelu_pytorch_tanh), in place:
// 0.5 u (1 + tanh(z)) = u * sigmoid(2 z), z = sqrt(2/pi) (u + 0.044715 u^3).
void gelu_tanh_impl(float* x, int n, int width) {
  for (int row = 0; row < n; ++row) {
    float* v = x + static_cast<size_t>(row) * width;
    int i = 0;
    for (; i + kLanes <= width; i += kLanes) {
      const LaneF u = load_lanes(v + i);
      store_lanes(v + i, u * sigmoid(1.5957691216057308f * (u + 0.044715f * u * u * u)));
    }
    for (; i < width; ++i) {
      const float u = v[i];
      v[i] = u * sigmoid(1.5957691216057308f * (u + 0.044715f * u * u * u));
    }
  }
}

// Row softmax of scale * x over the first `width` values of rows `stride` apart, in place;
// values [width, stride) become 0 (padding that must weigh nothing in a following matmul).
void softmax_rows_impl(float* x, int n, int width, int stride, float scale) {
  for (int row = 0; row < n; ++row) {
    float* v = x + static_cast<size_t>(row) * stride;
    float max = -3.0e38f;
    for (int i = 0; i < width; ++i) max = max_of(max, v[i] * scale);
    float sum = 0.0f;
    for (int i = 0; i < width; ++i) {
      v[i] = exp_nonpositive(v[i] * scale - max);
      sum += v[i];
    }
    const float inverse = 1.0f / sum;
    for (int i = 0; i < width; ++i) v[i] *= inverse;
    for (int i = width; i < stride; ++i) v[i] = 0.0f;
  }
}

// Sixteen floats (one key tile row, or a slice of a head) as one value the compiler keeps in
// registers: a GCC vector, i.e. one zmm, in the AVX-512 build; in the AVX2 build a pair of
// 8-float vectors, because GCC lowers 64-byte vectors poorly without AVX-512.
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

#if defined(__AVX512F__)
using Vec16 = f32x16;
inline Vec16 exp16(Vec16 x) { return exp_clamped<f32x16, i32x16>(x); }
#else
struct Vec16 {
  f32x8 lo, hi;
};
inline Vec16 operator+(Vec16 a, Vec16 b) { return {a.lo + b.lo, a.hi + b.hi}; }
inline Vec16 operator*(Vec16 a, float b) { return {a.lo * b, a.hi * b}; }
inline Vec16 operator*(Vec16 a, Vec16 b) { return {a.lo * b.lo, a.hi * b.hi}; }
inline Vec16 operator*(float a, Vec16 b) { return {a * b.lo, a * b.hi}; }
inline Vec16& operator+=(Vec16& a, Vec16 b) { return a = a + b; }
inline Vec16 exp16(Vec16 x) { return {exp_clamped<f32x8, i32x8>(x.lo), exp_clamped<f32x8, i32x8>(x.hi)}; }
#endif
static_assert(sizeof(Vec16) == 16 * sizeof(float));

inline Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 16 floats loaded and stored at any alignment.
typedef float f32x16u __attribute__((vector_size(64), aligned(4)));

inline float sum_lanes(const f32x16& v) {  // by reference: no vector-ABI question
  float s = 0.0f;
  for (int i = 0; i < 16; ++i) s += v[i];
  return s;
}

// The delta rule of one value head (isa_kernels.h): each state row is decayed, its error
// against the value learnt, and read out, in one pass over the row held in registers.
void delta_rule_impl(const DeltaRuleArgs& a) {
  constexpr int kMaxVectors = 16;  // head_k <= 256
  const int vectors = a.head_k / 16;
  f32x16 k[kMaxVectors], q[kMaxVectors], row[kMaxVectors];
  for (int t = 0; t < a.n_tokens; ++t) {
    const float* kt = a.k + static_cast<size_t>(t) * a.head_k;
    const float* qt = a.q + static_cast<size_t>(t) * a.head_k;
    for (int i = 0; i < vectors; ++i) {
      k[i] = *reinterpret_cast<const f32x16u*>(kt + 16 * i);
      q[i] = *reinterpret_cast<const f32x16u*>(qt + 16 * i);
    }
    const float decay = a.decay[t], beta = a.beta[t];
    const float* v = a.v + static_cast<size_t>(t) * a.v_stride;
    float* out = a.out + static_cast<size_t>(t) * a.out_stride;
    for (int j = 0; j < a.head_v; ++j) {
      float* s = a.state + static_cast<size_t>(j) * a.head_k;
      f32x16 predicted = {};
      for (int i = 0; i < vectors; ++i) {
        row[i] = *reinterpret_cast<const f32x16u*>(s + 16 * i) * decay;
        predicted += row[i] * k[i];
      }
      const float delta = (v[j] - sum_lanes(predicted)) * beta;
      f32x16 read = {};
      for (int i = 0; i < vectors; ++i) {
        row[i] += delta * k[i];
        *reinterpret_cast<f32x16u*>(s + 16 * i) = row[i];
        read += row[i] * q[i];
      }
      out[j] = sum_lanes(read) * a.scale;
    }
  }
}

typedef int8_t i8x8 __attribute__((vector_size(8)));
// Sixteen cached elements (a key tile row, or a slice of a value row) as floats.
template <KvType T>
inline Vec16 load_kv16(const uint8_t* p) {
  if constexpr (T == KvType::F32) {
    return load16(reinterpret_cast<const float*>(p));
  } else if constexpr (T == KvType::Q8) {
#if defined(__AVX512F__)
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
#endif
  } else {
#if defined(__AVX512F__)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#else
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)))};
#endif
  }
}

// Online-softmax attention for the query rows sharing one kv head: H heads of each of QB
// consecutive tokens (row r is head first_head + r % H of token first_token + r / H).
// Keys are stored transposed per block ([dim][16], kv_layout.h) so the scores of 16
// positions come out of plain vector FMAs with no horizontal sums, and each block's keys and
// values are loaded once for all H * QB rows; causality is per row (a row ignores keys past
// its own position). 8-bit blocks: the per-position key scales multiply the 16 scores, the
// value scales fold into the softmax weights.
// Blocks fetched ahead of the one being computed.
constexpr int kPrefetchTiles = 2;

template <int HD, int H, int QB, KvType T>
void attention_rows(const AttentionArgs& a, int kv_head, int first_head, int first_token, const AttentionSplit& split) {
  constexpr int R = H * QB;
  const KvHeadLayout layout{T, HD};
  const int last_keys = a.first_position + first_token + QB;  // keys seen by the last token
  const int tiles = (last_keys + 15) / 16;
  alignas(64) float q[HD][R];  // dimension-major: the R broadcasts of one d are adjacent
  alignas(64) float acc[R][HD];
  float running_max[R], running_sum[R];
  int n_keys[R];
  for (int r = 0; r < R; ++r) {
    const int token = first_token + r / H, head = first_head + r % H;
    const float* src = a.q + static_cast<size_t>(token) * a.q_stride + static_cast<size_t>(head) * HD;
    for (int d = 0; d < HD; ++d) {
      q[d][r] = src[d] * a.scale;
      acc[r][d] = 0.0f;
    }
    running_max[r] = -INFINITY;
    running_sum[r] = 0.0f;
    n_keys[r] = a.first_position + token + 1;
  }
  const int tile_end = split.tile_end < tiles ? split.tile_end : tiles;
  for (int t = split.tile_begin; t < tile_end; ++t) {
    const uint8_t* record = a.kv + static_cast<size_t>(a.block_table[t]) * a.block_stride +
                            static_cast<size_t>(kv_head) * a.head_stride;
    // The next block may lie anywhere in the pool: fetch it while this one is computed (the
    // hardware prefetchers do not follow a block table, and each block is read only once).
    for (int ahead = t == split.tile_begin ? 1 : kPrefetchTiles; ahead <= kPrefetchTiles; ++ahead) {
      if (t + ahead >= tile_end) break;
      const uint8_t* next = a.kv + static_cast<size_t>(a.block_table[t + ahead]) * a.block_stride +
                            static_cast<size_t>(kv_head) * a.head_stride;
      for (size_t offset = 0; offset < layout.bytes(); offset += 64) __builtin_prefetch(next + offset);
    }
    Vec16 scores[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) scores[r] = Vec16{};
    for (int d = 0; d < HD; ++d) {
      const Vec16 k = load_kv16<T>(record + d * 16 * layout.element_bytes());
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) scores[r] += q[d][r] * k;
    }
    if constexpr (T == KvType::Q8) {
      const Vec16 key_scales = load16(reinterpret_cast<const float*>(record + layout.key_scales_offset()));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) scores[r] = scores[r] * key_scales;
    }
    alignas(64) float p[R][16];
    float correction[R];
#if defined(__AVX512F__)
    // Masking, maxima and sums on whole vectors: compares and selects are single
    // instructions with AVX-512 mask registers.
    const i32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const i32x16 valid = lane < (n_keys[r] - t * 16);
      const f32x16 masked = valid ? scores[r] : f32x16{} - INFINITY;
      float tile_max = masked[0];
      for (int j = 1; j < 16; ++j) tile_max = max_of(tile_max, masked[j]);
      const float new_max = max_of(running_max[r], tile_max);
      correction[r] = exp_nonpositive(running_max[r] - new_max);
      f32x16 shifted = scores[r] - new_max;
      shifted = shifted < -87.0f ? f32x16{} - 87.0f : shifted;
      const f32x16 weights = valid ? exp16(shifted) : f32x16{};
      std::memcpy(p[r], &weights, sizeof(weights));
      float tile_sum = 0.0f;
      for (int j = 0; j < 16; ++j) tile_sum += weights[j];
      running_sum[r] = running_sum[r] * correction[r] + tile_sum;
      running_max[r] = new_max;
    }
#else
    // The same in scalar loops over the 16 lanes: vector compares and selects on 64-byte
    // vectors compile badly without AVX-512.
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) std::memcpy(p[r], &scores[r], sizeof(Vec16));
    for (int r = 0; r < R; ++r) {
      const int left = n_keys[r] - t * 16;
      const int valid = left < 16 ? (left > 0 ? left : 0) : 16;
      float tile_max = -INFINITY;
      for (int j = 0; j < valid; ++j) tile_max = max_of(tile_max, p[r][j]);
      const float new_max = max_of(running_max[r], tile_max);
      correction[r] = exp_nonpositive(running_max[r] - new_max);
      // Shift and clamp to exp's range; masked lanes become exp(-87) ~ 1e-38, zeroed after.
      for (int j = 0; j < 16; ++j) p[r][j] = j < valid ? max_of(p[r][j] - new_max, -87.0f) : -87.0f;
      const Vec16 weights = exp16(load16(p[r]));
      std::memcpy(p[r], &weights, sizeof(weights));
      for (int j = valid; j < 16; ++j) p[r][j] = 0.0f;
      float tile_sum = 0.0f;
      for (int j = 0; j < 16; ++j) tile_sum += p[r][j];
      running_sum[r] = running_sum[r] * correction[r] + tile_sum;
      running_max[r] = new_max;
    }
#endif
    if constexpr (T == KvType::Q8) {  // the value scales, folded into the weights
      const Vec16 value_scales = load16(reinterpret_cast<const float*>(record + layout.value_scales_offset()));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const Vec16 scaled = load16(p[r]) * value_scales;
        std::memcpy(p[r], &scaled, sizeof(scaled));
      }
    }
    const int tile_valid = last_keys - t * 16 < 16 ? last_keys - t * 16 : 16;
    const uint8_t* v = record + layout.values_offset();
    for (int dc = 0; dc < HD; dc += 16) {
      Vec16 out[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) out[r] = load16(&acc[r][dc]) * correction[r];
      for (int j = 0; j < tile_valid; ++j) {
        const Vec16 value = load_kv16<T>(v + (static_cast<size_t>(j) * HD + dc) * layout.element_bytes());
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) out[r] += p[r][j] * value;
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) std::memcpy(&acc[r][dc], &out[r], sizeof(Vec16));
    }
  }
  if (split.partial) {  // one part of a split key range: the unnormalised state, merged later
    for (int r = 0; r < R; ++r) {
      float* dst = split.partial + static_cast<size_t>(first_head + r % H) * (HD + 2);
      dst[0] = running_max[r];
      dst[1] = running_sum[r];
      for (int d = 0; d < HD; ++d) dst[2 + d] = acc[r][d];
    }
    return;
  }
  const int row_width = a.n_heads * HD;
  for (int r = 0; r < R; ++r) {
    const int token = first_token + r / H, head = first_head + r % H;
    float* dst = a.out + static_cast<size_t>(token) * row_width + static_cast<size_t>(head) * HD;
    const float inverse = 1.0f / running_sum[r];
    for (int d = 0; d < HD; ++d) dst[d] = acc[r][d] * inverse;
  }
}

template <int HD, int QB, KvType T>
void attention_group(const AttentionArgs& a, int kv_head, int first_token, const AttentionSplit& split) {
  const int group = a.n_heads / a.n_kv_heads;
  const int first = kv_head * group;
  int h = 0;
  for (; h + 4 <= group; h += 4) attention_rows<HD, 4, QB, T>(a, kv_head, first + h, first_token, split);
  switch (group - h) {
    case 3: attention_rows<HD, 3, QB, T>(a, kv_head, first + h, first_token, split); break;
    case 2: attention_rows<HD, 2, QB, T>(a, kv_head, first + h, first_token, split); break;
    case 1: attention_rows<HD, 1, QB, T>(a, kv_head, first + h, first_token, split); break;
    default: break;
  }
}

template <int HD, KvType T>
void attention_item_typed(const AttentionArgs& a, int kv_head, int first_token, int tokens, const AttentionSplit& split) {
  int t = first_token;
  for (; t + kQueryBlock <= first_token + tokens; t += kQueryBlock)
    attention_group<HD, kQueryBlock, T>(a, kv_head, t, split);
  for (; t < first_token + tokens; ++t) attention_group<HD, 1, T>(a, kv_head, t, split);
}

template <int HD>
void attention_item_fixed(const AttentionArgs& a, int kv_head, int first_token, int tokens, const AttentionSplit& split) {
  switch (a.kv_type) {
    case KvType::Q8: return attention_item_typed<HD, KvType::Q8>(a, kv_head, first_token, tokens, split);
    case KvType::F16: return attention_item_typed<HD, KvType::F16>(a, kv_head, first_token, tokens, split);
    case KvType::F32: return attention_item_typed<HD, KvType::F32>(a, kv_head, first_token, tokens, split);
  }
}

void attention_item_impl(const AttentionArgs& a, int kv_head, int first_token, int tokens, const AttentionSplit& split) {
  switch (a.head_dim) {
    case 64: return attention_item_fixed<64>(a, kv_head, first_token, tokens, split);
    case 128: return attention_item_fixed<128>(a, kv_head, first_token, tokens, split);
    case 256: return attention_item_fixed<256>(a, kv_head, first_token, tokens, split);
    default: return;  // the model loader accepts only head sizes 64, 128 and 256
  }
}

}  // namespace
