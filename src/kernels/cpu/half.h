#pragma once
// Scalar conversions for the 16-bit float formats stored in GGUF files.
#include <bit>
#include <cstdint>
#include <cstring>

namespace splash::kernels {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3FF) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round-to-nearest-even conversion, used when packing derived scales.
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);  // NaN
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // overflow -> inf
  if (abs < 0x38800000) {  // subnormal or zero in half precision
    const float magnitude = std::bit_cast<float>(abs) * 16777216.0f;  // * 2^24
    const uint32_t rounded = static_cast<uint32_t>(magnitude + 0.5f);
    // ties: nudge to even
    const bool tie = (magnitude + 0.5f) == static_cast<float>(rounded) && (rounded & 1) &&
                     magnitude - static_cast<float>(rounded - 1) == 0.5f;
    return static_cast<uint16_t>(sign | (tie ? rounded - 1 : rounded));
  }
  const uint32_t mantissa_odd = (abs >> 13) & 1;
  const uint32_t rounded = abs + 0xFFF + mantissa_odd;
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace splash::kernels
