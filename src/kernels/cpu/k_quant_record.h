#pragma once
// Where the parts of one K-quant record lie: a tile's 16 rows over one 256-weight block
// (packed_weight.h, kinds U4_K and U6_K). Shared by the packer, unpack_row and the kernels
// of both instruction sets. "Lane" is the row within the tile; a k-group is 4 consecutive
// weights, and each 64-byte code vector holds one k-group's 4 bytes for each of the 16 lanes
// (lane * 4 + t), as the other integer kinds.
#include <cstddef>

namespace splash::kernels {

// Q4_K: 8 sub-blocks of 32 weights. w = d * scale[s] * q - dmin * min[s], q < 16.
struct Q4KRecord {
  static constexpr int kSubBlocks = 8, kSub = 32, kMaxCode = 15;
  // Sub-block s: 4 vectors of 64 bytes, vector v holding k-group 2v in the low nibbles and
  // 2v + 1 in the high ones (as U4_F16).
  static constexpr size_t codes(int s) { return 256 * static_cast<size_t>(s); }
  static constexpr size_t scales(int s) { return 2048 + 16 * static_cast<size_t>(s); }  // u8 per lane
  static constexpr size_t mins(int s) { return 2176 + 16 * static_cast<size_t>(s); }    // u8 per lane
  static constexpr size_t d = 2304, dmin = 2336;  // fp16 per lane
  static constexpr int kCodeBytes = 2048, kScaleBytes = 320;
};

// Q6_K: 16 sub-blocks of 16 weights. w = d * scale[s] * (q - 32), q < 64, stored as a plane
// of low nibbles (vector v: k-groups 2v and 2v + 1, as Q4) and a plane of high 2-bit pairs
// (vector u: k-groups 4u .. 4u + 3 in bits 0-1, 2-3, 4-5, 6-7 of each byte).
struct Q6KRecord {
  static constexpr int kSubBlocks = 16, kSub = 16, kMaxCode = 63;
  static constexpr size_t low(int v) { return 64 * static_cast<size_t>(v); }
  static constexpr size_t high(int u) { return 2048 + 64 * static_cast<size_t>(u); }
  static constexpr size_t scales(int s) { return 3072 + 16 * static_cast<size_t>(s); }  // int8 per lane
  static constexpr size_t d = 3328;  // fp16 per lane; 32 bytes of padding keep records 64-aligned
  static constexpr int kCodeBytes = 3072, kScaleBytes = 320;
};

}  // namespace splash::kernels
