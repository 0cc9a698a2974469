#pragma once
// Weights repacked at load into the layout the matmul kernels stream through.
//
// Rows are grouped in tiles of 16 (one 512-bit lane per row). Integer formats keep their
// own codes (4, 6 or 8 bits) and scales; for each tile and each sub-block of 16 or 32
// weights a record holds the codes "k-group major" — 4 consecutive weights of each of the
// 16 rows form one 64-byte vector, exactly what one VNNI dot-product instruction consumes
// against 4 broadcast activation bytes — followed by the 16 rows' d and m scales.
// 4-bit codes pack two k-groups in one vector (low and high nibbles).
// The K-quants (Q4_K, Q6_K) keep their two-level scales as the file has them — per
// sub-block a small integer scale (and min), per 256-weight block fp16 factors — so a
// decode step reads about the file's bytes: one record holds a whole 256-weight block of
// the tile's 16 rows (k_quant_record.h says where each part lies).
// Float formats (F32/F16/BF16) keep their element type in 16-row x 1 column vectors.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "kernels/cpu/aligned_buffer.h"

namespace splash::kernels {

inline constexpr int kTileRows = 16;

enum class PackedKind : uint8_t {
  U4_F16,   // Q4_0, Q4_1: 4-bit codes, sub-block 32, scales kept as fp16 (exact)
  U8_F16,   // Q8_0 (codes q+128), Q5_0 (codes q+112): sub-block 32, fp16 scales, m = -128 d
  U6_F32,   // Q5_1: 5-bit codes in bytes, sub-block 16, fp32 scales
  U4_K,     // Q4_K: 4-bit codes, 8 sub-blocks of 32 with 6-bit scales and mins, fp16 d, dmin
  U6_K,     // Q6_K: 6-bit codes as 4 + 2 bit planes, 16 sub-blocks of 16 with int8 scales, fp16 d
  F32,
  F16,
  BF16,
};

struct PackedKindInfo {
  int sub_block;      // weights per record of a tile: per (d, m) pair, 256 for K-quants; 1 for floats
  int code_bytes;     // bytes of codes per tile record
  int scale_bytes;    // bytes of scales per tile record (d[16] then m[16])
  bool integer;
};
PackedKindInfo packed_kind_info(PackedKind kind);

struct PackedWeight {
  GgmlType source_type = GgmlType::F32;
  PackedKind kind = PackedKind::F32;
  int rows = 0;  // output features
  int cols = 0;  // input features (the dot-product length K)
  int tiles = 0;
  size_t record_bytes = 0;  // one (tile, sub-block) record; float kinds: one (tile, column)
  AlignedBuffer data;

  size_t bytes() const { return data.size(); }
  const uint8_t* record(int tile, int sub_block_index) const {
    const size_t per_tile = static_cast<size_t>(cols / packed_kind_info(kind).sub_block) * record_bytes;
    return data.data() + static_cast<size_t>(tile) * per_tile + static_cast<size_t>(sub_block_index) * record_bytes;
  }
};

// One source matrix in GGUF order: rows x cols elements of `type`, row-major.
struct WeightSource {
  GgmlType type;
  const uint8_t* data;
  int rows;
  int cols;
};

// Packs one matrix, or several with the same type and column count stacked row-wise
// (Q, K and V become one matrix so one pass over the activations computes all three).
PackedWeight pack_weights(std::span<const WeightSource> sources);
// Rows first .. first + count - 1 of a source, as a source of their own (a file's fused
// matrix taken apart into the parts a layer stacks in its own order).
WeightSource row_range(const WeightSource& source, int first, int count);
inline PackedWeight pack_weight(const WeightSource& source) { return pack_weights({&source, 1}); }

// Bytes pack_weights() will use for a rows x cols matrix of `type` (for memory planning).
size_t packed_weight_bytes(GgmlType type, int rows, int cols);

// Row `row` back to floats, for tests and debugging.
std::vector<float> unpack_row(const PackedWeight& weight, int row);

}  // namespace splash::kernels
