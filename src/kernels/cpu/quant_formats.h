#pragma once
// The GGUF weight block formats the CPU kernels accept, as plain scalar code: a reference
// dequantizer (used for embedding lookups and as the tests' ground truth) and a decoder
// into the "canonical" form the packer works from: per sub-block of 16 or 32 weights,
// unsigned integer codes q and two floats with w = d * q + m.
#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.h"

namespace splash::kernels {

// True for the types this build has kernels for.
bool is_supported_weight_type(GgmlType type);

// Dequantizes n elements (a multiple of the type's block size) starting at a block boundary.
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, size_t n);

// Canonical form of integer-quantized types.
struct CanonicalLayout {
  int sub_block;  // weights sharing one (d, m) pair: 32, or 16 for Q6_K
  int code_bits;  // 4, 6 or 8: codes are below 2^code_bits
};
CanonicalLayout canonical_layout(GgmlType type);
bool is_integer_quantized(GgmlType type);
// Decodes one GGUF block (block_elements of the type) into codes and per-sub-block d, m.
void decode_block(GgmlType type, const uint8_t* block, uint8_t* codes, float* d, float* m);

}  // namespace splash::kernels
