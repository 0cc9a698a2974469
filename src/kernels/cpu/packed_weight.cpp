#include "kernels/cpu/packed_weight.h"

#include <cstring>

#include "common/error.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/k_quant_record.h"
#include "kernels/cpu/quant_formats.h"

namespace splash::kernels {
namespace {

PackedKind packed_kind_for(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: return PackedKind::U4_F16;
    case GgmlType::Q4_K: return PackedKind::U4_K;
    case GgmlType::Q8_0: case GgmlType::Q5_0: return PackedKind::U8_F16;
    case GgmlType::Q5_1: return PackedKind::U6_F32;
    case GgmlType::Q6_K: return PackedKind::U6_K;
    case GgmlType::F32: return PackedKind::F32;
    case GgmlType::F16: return PackedKind::F16;
    case GgmlType::BF16: return PackedKind::BF16;
    default: fail("no CPU kernel for weight type {}", type_name(type));
  }
}

size_t row_bytes(GgmlType type, int cols) {
  const auto traits = type_traits(static_cast<uint32_t>(type));
  return static_cast<size_t>(cols) / traits->block_elements * traits->block_bytes;
}

// Writes one row's canonical codes and scales into its lane of every record of its tile.
void scatter_integer_row(PackedWeight& w, const PackedKindInfo& info, int row, const uint8_t* codes,
                         const float* d, const float* m) {
  const int tile = row / kTileRows;
  const int lane = row % kTileRows;
  const int sub = info.sub_block;
  const int groups = sub / 4;  // k-groups of 4 weights per record
  const bool nibbles = w.kind == PackedKind::U4_F16;
  const bool half_scales = w.kind == PackedKind::U4_F16 || w.kind == PackedKind::U8_F16;
  for (int b = 0; b < w.cols / sub; ++b) {
    uint8_t* record = const_cast<uint8_t*>(w.record(tile, b));
    const uint8_t* block_codes = codes + static_cast<size_t>(b) * sub;
    for (int g = 0; g < groups; ++g) {
      for (int t = 0; t < 4; ++t) {
        const uint8_t code = block_codes[g * 4 + t];
        if (nibbles) {
          uint8_t& byte = record[(g / 2) * 64 + lane * 4 + t];
          byte = (g % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0) | code)
                              : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
        } else {
          record[g * 64 + lane * 4 + t] = code;
        }
      }
    }
    uint8_t* scales = record + info.code_bytes;
    if (half_scales) {
      const uint16_t dh = fp32_to_fp16(d[b]), mh = fp32_to_fp16(m[b]);
      std::memcpy(scales + lane * 2, &dh, 2);
      std::memcpy(scales + 32 + lane * 2, &mh, 2);
    } else {
      std::memcpy(scales + lane * 4, &d[b], 4);
      std::memcpy(scales + 64 + lane * 4, &m[b], 4);
    }
  }
}

// One row's 256-weight blocks into its lane of the tile's K-quant records: the codes as
// decode_block gives them (Q6_K split into its two bit planes) and the block's own scales.
void scatter_k_quant_row(PackedWeight& w, int row, const uint8_t* src) {
  const int tile = row / kTileRows, lane = row % kTileRows;
  const auto traits = *type_traits(static_cast<uint32_t>(w.source_type));
  uint8_t codes[256];
  float d[16], m[16];
  for (int b = 0; b < w.cols / 256; ++b) {
    const uint8_t* block = src + static_cast<size_t>(b) * traits.block_bytes;
    uint8_t* record = const_cast<uint8_t*>(w.record(tile, b));
    decode_block(w.source_type, block, codes, d, m);
    const KQuantScales scales = decode_kquant_scales(w.source_type, block);
    if (w.kind == PackedKind::U4_K) {
      for (int s = 0; s < Q4KRecord::kSubBlocks; ++s) {
        for (int i = 0; i < 32; ++i) {
          const int g = i / 4, t = i % 4;
          uint8_t& byte = record[Q4KRecord::codes(s) + (g / 2) * 64 + lane * 4 + t];
          const uint8_t code = codes[32 * s + i];
          byte = g % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | code) : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
        }
        record[Q4KRecord::scales(s) + lane] = static_cast<uint8_t>(scales.scale[s]);
        record[Q4KRecord::mins(s) + lane] = scales.min[s];
      }
      std::memcpy(record + Q4KRecord::d + 2 * lane, &scales.d, 2);
      std::memcpy(record + Q4KRecord::dmin + 2 * lane, &scales.dmin, 2);
      continue;
    }
    for (int i = 0; i < 256; ++i) {  // Q6_K
      const int g = i / 4, t = i % 4;
      const uint8_t code = codes[i];
      uint8_t& low = record[Q6KRecord::low(g / 2) + lane * 4 + t];
      low = g % 2 == 0 ? static_cast<uint8_t>((low & 0xF0) | (code & 0x0F)) : static_cast<uint8_t>((low & 0x0F) | (code << 4));
      uint8_t& high = record[Q6KRecord::high(g / 4) + lane * 4 + t];
      const int shift = 2 * (g % 4);
      high = static_cast<uint8_t>((high & ~(3 << shift)) | ((code >> 4) << shift));
    }
    for (int s = 0; s < Q6KRecord::kSubBlocks; ++s) record[Q6KRecord::scales(s) + lane] = static_cast<uint8_t>(scales.scale[s]);
    std::memcpy(record + Q6KRecord::d + 2 * lane, &scales.d, 2);
  }
}

void scatter_float_row(PackedWeight& w, int row, const uint8_t* src) {
  const int tile = row / kTileRows;
  const int lane = row % kTileRows;
  const int element = w.kind == PackedKind::F32 ? 4 : 2;
  for (int k = 0; k < w.cols; ++k)
    std::memcpy(const_cast<uint8_t*>(w.record(tile, k)) + lane * element, src + static_cast<size_t>(k) * element,
                element);
}

}  // namespace

PackedKindInfo packed_kind_info(PackedKind kind) {
  switch (kind) {
    case PackedKind::U4_F16: return {32, 256, 64, true};
    case PackedKind::U8_F16: return {32, 512, 64, true};
    case PackedKind::U6_F32: return {16, 256, 128, true};
    case PackedKind::U4_K: return {256, Q4KRecord::kCodeBytes, Q4KRecord::kScaleBytes, true};
    case PackedKind::U6_K: return {256, Q6KRecord::kCodeBytes, Q6KRecord::kScaleBytes, true};
    case PackedKind::F32: return {1, 64, 0, false};
    case PackedKind::F16: return {1, 32, 0, false};
    case PackedKind::BF16: return {1, 32, 0, false};
  }
  return {1, 64, 0, false};
}

size_t packed_weight_bytes(GgmlType type, int rows, int cols) {
  const PackedKindInfo info = packed_kind_info(packed_kind_for(type));
  const size_t tiles = static_cast<size_t>(rows + kTileRows - 1) / kTileRows;
  return tiles * static_cast<size_t>(cols / info.sub_block) * static_cast<size_t>(info.code_bytes + info.scale_bytes);
}

WeightSource row_range(const WeightSource& source, int first, int count) {
  if (first < 0 || count < 0 || first + count > source.rows)
    fail("row_range: rows {} .. {} of a {}-row matrix", first, first + count, source.rows);
  return {source.type, source.data + static_cast<size_t>(first) * row_bytes(source.type, source.cols), count,
          source.cols};
}

PackedWeight pack_weights(std::span<const WeightSource> sources) {
  if (sources.empty()) fail("pack_weights: nothing to pack");
  PackedWeight w;
  w.source_type = sources[0].type;
  w.kind = packed_kind_for(w.source_type);
  w.cols = sources[0].cols;
  for (const auto& source : sources) {
    if (source.type != w.source_type || source.cols != w.cols)
      fail("pack_weights: stacked matrices must share type and width");
    w.rows += source.rows;
  }
  const PackedKindInfo info = packed_kind_info(w.kind);
  const auto traits = type_traits(static_cast<uint32_t>(w.source_type));
  if (w.cols % static_cast<int>(traits->block_elements) != 0 || w.cols % 32 != 0)
    fail("pack_weights: row length {} is not a multiple of the {} block", w.cols, type_name(w.source_type));
  w.tiles = (w.rows + kTileRows - 1) / kTileRows;
  w.record_bytes = static_cast<size_t>(info.code_bytes + info.scale_bytes);
  w.data.resize(static_cast<size_t>(w.tiles) * (w.cols / info.sub_block) * w.record_bytes);

  std::vector<uint8_t> codes(w.cols);
  std::vector<float> d(w.cols / 16 + 1), m(w.cols / 16 + 1);
  int row = 0;
  for (const auto& source : sources) {
    const size_t bytes_per_row = row_bytes(source.type, source.cols);
    for (int r = 0; r < source.rows; ++r, ++row) {
      const uint8_t* src = source.data + static_cast<size_t>(r) * bytes_per_row;
      if (!info.integer) {
        scatter_float_row(w, row, src);
        continue;
      }
      if (w.kind == PackedKind::U4_K || w.kind == PackedKind::U6_K) {
        scatter_k_quant_row(w, row, src);
        continue;
      }
      const int subs_per_block = static_cast<int>(traits->block_elements) / info.sub_block;
      for (int block = 0; block < w.cols / static_cast<int>(traits->block_elements); ++block)
        decode_block(source.type, src + static_cast<size_t>(block) * traits->block_bytes,
                     codes.data() + static_cast<size_t>(block) * traits->block_elements,
                     d.data() + block * subs_per_block, m.data() + block * subs_per_block);
      scatter_integer_row(w, info, row, codes.data(), d.data(), m.data());
    }
  }
  return w;
}

std::vector<float> unpack_row(const PackedWeight& w, int row) {
  const PackedKindInfo info = packed_kind_info(w.kind);
  const int tile = row / kTileRows, lane = row % kTileRows;
  std::vector<float> out(w.cols);
  for (int k = 0; k < w.cols; ++k) {
    if (!info.integer) {
      const uint8_t* p = w.record(tile, k);
      if (w.kind == PackedKind::F32) std::memcpy(&out[k], p + lane * 4, 4);
      else if (w.kind == PackedKind::F16) out[k] = fp16_to_fp32(load_u16(p + lane * 2));
      else out[k] = bf16_to_fp32(load_u16(p + lane * 2));
      continue;
    }
    const int b = k / info.sub_block, within = k % info.sub_block;
    const int g = within / 4, t = within % 4;
    const uint8_t* record = w.record(tile, b);
    if (w.kind == PackedKind::U4_K) {
      const int s = within / 32, gs = (within % 32) / 4;
      const uint8_t byte = record[Q4KRecord::codes(s) + (gs / 2) * 64 + lane * 4 + t];
      const int code = gs % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
      const float d = fp16_to_fp32(load_u16(record + Q4KRecord::d + 2 * lane));
      const float dmin = fp16_to_fp32(load_u16(record + Q4KRecord::dmin + 2 * lane));
      out[k] = d * record[Q4KRecord::scales(s) + lane] * code - dmin * record[Q4KRecord::mins(s) + lane];
      continue;
    }
    if (w.kind == PackedKind::U6_K) {
      const uint8_t low = record[Q6KRecord::low(g / 2) + lane * 4 + t];
      const uint8_t high = record[Q6KRecord::high(g / 4) + lane * 4 + t];
      const int code = (g % 2 == 0 ? (low & 0x0F) : (low >> 4)) | (((high >> (2 * (g % 4))) & 3) << 4);
      const float d = fp16_to_fp32(load_u16(record + Q6KRecord::d + 2 * lane));
      const float scaled = d * static_cast<int8_t>(record[Q6KRecord::scales(within / 16) + lane]);
      out[k] = scaled * code - 32.0f * scaled;
      continue;
    }
    uint8_t code;
    if (w.kind == PackedKind::U4_F16) {
      const uint8_t byte = record[(g / 2) * 64 + lane * 4 + t];
      code = (g % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
    } else {
      code = record[g * 64 + lane * 4 + t];
    }
    const uint8_t* scales = record + info.code_bytes;
    float d, m;
    if (w.kind == PackedKind::U4_F16 || w.kind == PackedKind::U8_F16) {
      d = fp16_to_fp32(load_u16(scales + lane * 2));
      m = fp16_to_fp32(load_u16(scales + 32 + lane * 2));
    } else {
      std::memcpy(&d, scales + lane * 4, 4);
      std::memcpy(&m, scales + 64 + lane * 4, 4);
    }
    out[k] = d * code + m;
  }
  return out;
}

}  // namespace splash::kernels
