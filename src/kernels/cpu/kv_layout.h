#pragma once
// How the paged KV cache lays out one block: kKvBlockTokens positions of every layer and
// kv head. Within a block, each (layer, kv head) holds
//   keys   transposed, [head_dim][16] elements (a row of 16 positions per dimension, so the
//          scores of 16 positions are plain vector FMAs),
//   values [16][head_dim] elements,
// and, for 8-bit blocks, one float scale per position for the keys and one for the values
// (symmetric int8 per position and head: the scale folds into the scores and into the
// softmax weights, so dequantising costs one multiply per 16 positions).
#include <cstddef>
#include <cstdint>

namespace splash::kernels {

inline constexpr int kKvBlockTokens = 16;

enum class KvType : uint8_t {
  Q8,   // int8 codes + a float scale per position (default: a quarter of fp32's memory)
  F16,  // IEEE half precision
  F32,  // exact: for checks against a float reference, not for serving
};

const char* kv_type_name(KvType type);

struct KvHeadLayout {
  KvType type = KvType::Q8;
  int head_dim = 64;

  size_t element_bytes() const { return type == KvType::Q8 ? 1 : type == KvType::F16 ? 2 : 4; }
  size_t keys_bytes() const { return element_bytes() * head_dim * kKvBlockTokens; }
  size_t scales_bytes() const { return type == KvType::Q8 ? sizeof(float) * kKvBlockTokens : 0; }
  // Offsets inside one (layer, kv head) record of a block.
  size_t key_scales_offset() const { return keys_bytes(); }
  size_t values_offset() const { return keys_bytes() + scales_bytes(); }
  size_t value_scales_offset() const { return values_offset() + keys_bytes(); }
  size_t bytes() const { return 2 * (keys_bytes() + scales_bytes()); }
};

// Writes one position's keys and values (n_kv_heads heads of head_dim floats each) into a
// block: `record` points at the block's first kv head of this layer, `head_stride` bytes apart.
void store_kv_position(const KvHeadLayout& layout, uint8_t* record, size_t head_stride, int n_kv_heads, int slot,
                       const float* keys, const float* values);

// Reads a position back as floats (tests and block copies that change nothing need no reader;
// this is the reference the accuracy tests compare against).
void load_kv_position(const KvHeadLayout& layout, const uint8_t* record, size_t head_stride, int n_kv_heads, int slot,
                      float* keys, float* values);

}  // namespace splash::kernels
