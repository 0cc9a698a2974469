#include "kernels/cpu/quant_formats.h"

#include <cstring>

#include "common/error.h"
#include "kernels/cpu/half.h"

namespace splash::kernels {
namespace {

// Q4_K packs eight 6-bit scales and eight 6-bit mins into 12 bytes.
void q4k_scale_min(int j, const uint8_t* scales, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = scales[j] & 63;
    min = scales[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace

bool is_supported_weight_type(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q4_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool is_integer_quantized(GgmlType type) {
  return is_supported_weight_type(type) && type != GgmlType::F32 && type != GgmlType::F16 &&
         type != GgmlType::BF16;
}

CanonicalLayout canonical_layout(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: return {32, 4};
    case GgmlType::Q8_0: return {32, 8};
    // 5-bit codes kept in bytes. Q5_0 in Q8_0's form (codes offset to q + 128 - 16, m = -128 d),
    // so the AVX2 kernel's signed path applies; Q5_1's own minimum needs the m term, which the
    // Q6_K form (sub-block 16, fp32 scales) has.
    case GgmlType::Q5_0: return {32, 8};
    case GgmlType::Q5_1: return {16, 6};
    case GgmlType::Q6_K: return {16, 6};
    default: fail("{} has no integer canonical form", type_name(type));
  }
}

void decode_block(GgmlType type, const uint8_t* block, uint8_t* codes, float* d, float* m) {
  switch (type) {
    case GgmlType::Q4_0: {
      const float scale = fp16_to_fp32(load_u16(block));
      const uint8_t* qs = block + 2;
      for (int j = 0; j < 16; ++j) {
        codes[j] = qs[j] & 0x0F;
        codes[j + 16] = qs[j] >> 4;
      }
      d[0] = scale;
      m[0] = -8.0f * scale;
      return;
    }
    case GgmlType::Q4_1: {
      d[0] = fp16_to_fp32(load_u16(block));
      m[0] = fp16_to_fp32(load_u16(block + 2));
      const uint8_t* qs = block + 4;
      for (int j = 0; j < 16; ++j) {
        codes[j] = qs[j] & 0x0F;
        codes[j + 16] = qs[j] >> 4;
      }
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      // 32 weights: the low 4 bits of weight j and j+16 share byte qs[j] (low, high nibble);
      // their fifth bits are bits j and j+16 of the little-endian 32-bit qh.
      // Q5_0: w = d (q - 16); Q5_1: w = d q + m.
      const bool with_min = type == GgmlType::Q5_1;
      const float scale = fp16_to_fp32(load_u16(block));
      const uint8_t* qh_bytes = block + (with_min ? 4 : 2);
      const uint32_t qh = static_cast<uint32_t>(qh_bytes[0]) | static_cast<uint32_t>(qh_bytes[1]) << 8 |
                          static_cast<uint32_t>(qh_bytes[2]) << 16 | static_cast<uint32_t>(qh_bytes[3]) << 24;
      const uint8_t* qs = qh_bytes + 4;
      const int offset = with_min ? 0 : 128 - 16;  // see canonical_layout
      for (int j = 0; j < 16; ++j) {
        codes[j] = static_cast<uint8_t>(((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) + offset);
        codes[j + 16] = static_cast<uint8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) + offset);
      }
      if (with_min) {  // two sub-blocks of 16 sharing the block's d and m
        d[0] = d[1] = scale;
        m[0] = m[1] = fp16_to_fp32(load_u16(block + 2));
      } else {
        d[0] = scale;
        m[0] = -128.0f * scale;
      }
      return;
    }
    case GgmlType::Q8_0: {
      // Signed codes become unsigned by adding 128, so the VNNI u8 x s8 product applies;
      // m = -128 d removes the offset again.
      const float scale = fp16_to_fp32(load_u16(block));
      const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
      for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>(qs[j] + 128);
      d[0] = scale;
      m[0] = -128.0f * scale;
      return;
    }
    case GgmlType::Q4_K: {
      const float dall = fp16_to_fp32(load_u16(block));
      const float dmin = fp16_to_fp32(load_u16(block + 2));
      const uint8_t* scales = block + 4;
      const uint8_t* qs = block + 16;
      for (int chunk = 0; chunk < 4; ++chunk) {  // 64 weights: low nibbles, then high nibbles
        for (int half = 0; half < 2; ++half) {
          const int sub = chunk * 2 + half;
          uint8_t sc, mn;
          q4k_scale_min(sub, scales, sc, mn);
          d[sub] = dall * sc;
          m[sub] = -dmin * mn;
          for (int l = 0; l < 32; ++l)
            codes[sub * 32 + l] = half == 0 ? (qs[chunk * 32 + l] & 0x0F) : (qs[chunk * 32 + l] >> 4);
        }
      }
      return;
    }
    case GgmlType::Q6_K: {
      const uint8_t* ql = block;
      const uint8_t* qh = block + 128;
      const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
      const float dall = fp16_to_fp32(load_u16(block + 208));
      for (int half = 0; half < 2; ++half) {  // two groups of 128 weights
        const uint8_t* l_base = ql + half * 64;
        const uint8_t* h_base = qh + half * 32;
        uint8_t* out = codes + half * 128;
        for (int l = 0; l < 32; ++l) {
          out[l] = static_cast<uint8_t>((l_base[l] & 0x0F) | (((h_base[l] >> 0) & 3) << 4));
          out[l + 32] = static_cast<uint8_t>((l_base[l + 32] & 0x0F) | (((h_base[l] >> 2) & 3) << 4));
          out[l + 64] = static_cast<uint8_t>((l_base[l] >> 4) | (((h_base[l] >> 4) & 3) << 4));
          out[l + 96] = static_cast<uint8_t>((l_base[l + 32] >> 4) | (((h_base[l] >> 6) & 3) << 4));
        }
      }
      for (int sub = 0; sub < 16; ++sub) {
        d[sub] = dall * scales[sub];
        m[sub] = -32.0f * d[sub];
      }
      return;
    }
    default:
      fail("{} has no integer canonical form", type_name(type));
  }
}

bool is_k_quant(GgmlType type) { return type == GgmlType::Q4_K || type == GgmlType::Q6_K; }

KQuantScales decode_kquant_scales(GgmlType type, const uint8_t* block) {
  KQuantScales out{};
  if (type == GgmlType::Q4_K) {
    out.d = load_u16(block);
    out.dmin = load_u16(block + 2);
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, mn;
      q4k_scale_min(sub, block + 4, sc, mn);
      out.scale[sub] = static_cast<int8_t>(sc);
      out.min[sub] = mn;
    }
    return out;
  }
  if (type == GgmlType::Q6_K) {
    std::memcpy(out.scale, block + 192, 16);
    out.d = load_u16(block + 208);
    return out;
  }
  fail("{} is not a K-quant type", type_name(type));
}

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, size_t n) {
  switch (type) {
    case GgmlType::F32:
      for (size_t i = 0; i < n; ++i) std::memcpy(dst + i, src + 4 * i, 4);
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(src + 2 * i));
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(src + 2 * i));
      return;
    default:
      break;
  }
  const auto traits = type_traits(static_cast<uint32_t>(type));
  const CanonicalLayout layout = canonical_layout(type);
  uint8_t codes[256];
  float d[16], m[16];
  for (size_t block = 0; block < n / traits->block_elements; ++block) {
    decode_block(type, src + block * traits->block_bytes, codes, d, m);
    float* out = dst + block * traits->block_elements;
    for (uint32_t i = 0; i < traits->block_elements; ++i) {
      const int sub = static_cast<int>(i) / layout.sub_block;
      out[i] = d[sub] * codes[i] + m[sub];
    }
  }
}

}  // namespace splash::kernels
