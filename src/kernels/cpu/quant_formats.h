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

// The two-level scales of a K-quant block (Q4_K, Q6_K) as the file stores them, for packed
// layouts that keep them compact: per sub-block an integer scale (and Q4_K's integer min),
// per block fp16 factors. With decode_block's codes q: w = d * scale * q - dmin * min (Q4_K,
// 8 sub-blocks of 32) and w = d * scale * (q - 32) (Q6_K, 16 sub-blocks of 16; dmin unused).
struct KQuantScales {
  int8_t scale[16];  // Q4_K: 0..63 in the first 8; Q6_K: signed, 16
  uint8_t min[8];    // Q4_K: 0..63
  uint16_t d = 0, dmin = 0;  // fp16 bits
};
bool is_k_quant(GgmlType type);
KQuantScales decode_kquant_scales(GgmlType type, const uint8_t* block);

}  // namespace splash::kernels
