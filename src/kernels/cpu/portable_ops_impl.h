#pragma once
// Element-wise and attention kernels written as plain loops the compiler vectorizes. This
// header is included by each ISA translation unit (matmul_avx2.cpp, matmul_avx512.cpp)
// inside its own namespace, so one source yields an AVX2 and an AVX-512 build of each.
// Do not include it anywhere else; the including file provides <bit>, <cmath>, <cstdint>,
// <cstring> and isa_kernels.h before opening its namespace.

namespace {

// exp(x) for x <= 0 with ~2 ulp error, written without calls so loops over it vectorize.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504f + shifter) - shifter;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(exponent);
}

void quantize_rows_impl(const float* x, int n, int k, int8_t* codes, float* scales, float* sums) {
  for (int row = 0; row < n; ++row) {
    for (int b = 0; b < k / 32; ++b) {
      const float* v = x + static_cast<size_t>(row) * k + b * 32;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(v[j]));
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

void silu_mul_impl(const float* gate_up, float* out, int n, int ffn) {
  for (int row = 0; row < n; ++row) {
    const float* gate = gate_up + static_cast<size_t>(row) * 2 * ffn;
    const float* up = gate + ffn;
    float* o = out + static_cast<size_t>(row) * ffn;
    for (int i = 0; i < ffn; ++i) {
      const float g = gate[i];
      // silu(g) = g * sigmoid(g); exp of a non-positive argument keeps it finite.
      const float e = exp_nonpositive(-std::fabs(g));
      const float sigmoid = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      o[i] = g * sigmoid * up[i];
    }
  }
}

// Online-softmax attention for the query heads sharing one kv head, over key tiles of 16
// positions. Keys are stored transposed per tile ([dim][16]) so scores for 16 positions
// come out of plain vector FMAs with no horizontal sums.
template <int HD>
void attention_item_fixed(const AttentionArgs& a, int kv_head, int token) {
  constexpr int kHeadsAtOnce = 4;
  const int group = a.n_heads / a.n_kv_heads;
  const int n_keys = a.first_position + token + 1;
  const int tiles = (n_keys + 15) / 16;
  const float* keys = a.k_tiles + static_cast<size_t>(kv_head) * (a.max_positions / 16) * HD * 16;
  const float* values = a.v + static_cast<size_t>(kv_head) * a.max_positions * HD;
  const int row_width = a.n_heads * HD;
  for (int h0 = 0; h0 < group; h0 += kHeadsAtOnce) {
    const int heads = group - h0 < kHeadsAtOnce ? group - h0 : kHeadsAtOnce;
    alignas(64) float q[kHeadsAtOnce][HD];
    alignas(64) float acc[kHeadsAtOnce][HD];
    float running_max[kHeadsAtOnce], running_sum[kHeadsAtOnce];
    for (int h = 0; h < kHeadsAtOnce; ++h) {
      const int head = kv_head * group + h0 + (h < heads ? h : 0);
      const float* src = a.q + static_cast<size_t>(token) * a.q_stride + static_cast<size_t>(head) * HD;
      for (int d = 0; d < HD; ++d) {
        q[h][d] = src[d] * a.scale;
        acc[h][d] = 0.0f;
      }
      running_max[h] = -INFINITY;
      running_sum[h] = 0.0f;
    }
    for (int t = 0; t < tiles; ++t) {
      const float* tile = keys + static_cast<size_t>(t) * HD * 16;
      const int valid = n_keys - t * 16 < 16 ? n_keys - t * 16 : 16;
      alignas(64) float scores[kHeadsAtOnce][16] = {};
      for (int d = 0; d < HD; ++d)
        for (int h = 0; h < kHeadsAtOnce; ++h)
          for (int j = 0; j < 16; ++j) scores[h][j] += q[h][d] * tile[d * 16 + j];
      for (int h = 0; h < heads; ++h) {
        float tile_max = -INFINITY;
        for (int j = 0; j < valid; ++j) tile_max = std::fmax(tile_max, scores[h][j]);
        const float new_max = std::fmax(running_max[h], tile_max);
        const float correction = exp_nonpositive(running_max[h] - new_max);
        alignas(64) float p[16];
        float tile_sum = 0.0f;
        for (int j = 0; j < 16; ++j) {
          p[j] = j < valid ? exp_nonpositive(scores[h][j] - new_max) : 0.0f;
          tile_sum += p[j];
        }
        running_sum[h] = running_sum[h] * correction + tile_sum;
        running_max[h] = new_max;
        for (int d = 0; d < HD; ++d) acc[h][d] *= correction;
        const float* v = values + static_cast<size_t>(t) * 16 * HD;
        for (int j = 0; j < valid; ++j)
          for (int d = 0; d < HD; ++d) acc[h][d] += p[j] * v[static_cast<size_t>(j) * HD + d];
      }
    }
    for (int h = 0; h < heads; ++h) {
      float* dst = a.out + static_cast<size_t>(token) * row_width + static_cast<size_t>(kv_head * group + h0 + h) * HD;
      const float inverse = 1.0f / running_sum[h];
      for (int d = 0; d < HD; ++d) dst[d] = acc[h][d] * inverse;
    }
  }
}

void attention_item_impl(const AttentionArgs& a, int kv_head, int token) {
  switch (a.head_dim) {
    case 64: return attention_item_fixed<64>(a, kv_head, token);
    case 128: return attention_item_fixed<128>(a, kv_head, token);
    case 256: return attention_item_fixed<256>(a, kv_head, token);
    default: return;  // the model loader accepts only head sizes 64, 128 and 256
  }
}

}  // namespace
