#pragma once
// Compile-time geometry of the integer packed kinds of one scale per sub-block (see
// packed_weight.h), for the kernels; the K-quant kinds are described by k_quant_record.h.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/packed_weight.h"

namespace splash::kernels {

// Four activation codes as one 32-bit lane, for the broadcast each dot-product step needs.
inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <PackedKind KIND>
struct IntKind;
template <>
struct IntKind<PackedKind::U4_F16> {
  static constexpr int sub = 32, code_bytes = 256, scale_bytes = 64, max_code = 15;
  static constexpr bool nibbles = true, half = true, offset128 = false;
};
template <>
struct IntKind<PackedKind::U8_F16> {  // codes are q + 128 (Q8_0)
  static constexpr int sub = 32, code_bytes = 512, scale_bytes = 64, max_code = 255;
  static constexpr bool nibbles = false, half = true, offset128 = true;
};
template <>
struct IntKind<PackedKind::U6_F32> {  // Q5_1's 5-bit codes
  static constexpr int sub = 16, code_bytes = 256, scale_bytes = 128, max_code = 31;
  static constexpr bool nibbles = false, half = false, offset128 = false;
};

}  // namespace splash::kernels
