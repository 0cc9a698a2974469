#pragma once
// Picks the tile kernel instantiation for a packed weight (its kind and, for the shipped
// widths, the compile-time K) and walks the tiles and token blocks of one matmul task.
// Included by each ISA translation unit inside its namespace, after it defines
//   template <PackedKind, int KCT, int NB> void int_tile(...);
//   template <PackedKind, int NB> void float_tile(...);
//   constexpr int kTokenBlocks[] = {...};  // token counts per kernel call, largest first
// Do not include it anywhere else.

using TileFn = void (*)(const PackedWeight&, int, const MatmulInput&, int, float*, int);
constexpr int kTokenBlockCount = static_cast<int>(std::size(kTokenBlocks));

struct TileSet {
  TileFn by_tokens[kTokenBlockCount];  // one kernel per entry of kTokenBlocks
};

template <PackedKind KIND, int KCT, size_t... I>
constexpr TileSet int_set(std::index_sequence<I...>) {
  return {{int_tile<KIND, KCT, kTokenBlocks[I]>...}};
}
template <PackedKind KIND, size_t... I>
constexpr TileSet float_set(std::index_sequence<I...>) {
  return {{float_tile<KIND, kTokenBlocks[I]>...}};
}

template <PackedKind KIND>
TileSet int_set_for_width(int k) {
  constexpr auto blocks = std::make_index_sequence<kTokenBlockCount>();
  static_assert(std::size(kShippedWidths) == 3 && kShippedWidths[0] == 576 && kShippedWidths[1] == 1536 &&
                    kShippedWidths[2] == 8960,
                "instantiate the new shipped widths here");
  if (k == 576) return int_set<KIND, 576>(blocks);
  if (k == 1536) return int_set<KIND, 1536>(blocks);
  if (k == 8960) return int_set<KIND, 8960>(blocks);
  return int_set<KIND, 0>(blocks);
}

inline TileSet tile_set(PackedKind kind, int k) {
  constexpr auto blocks = std::make_index_sequence<kTokenBlockCount>();
  switch (kind) {
    case PackedKind::U4_F16: return int_set_for_width<PackedKind::U4_F16>(k);
    case PackedKind::U8_F16: return int_set_for_width<PackedKind::U8_F16>(k);
    case PackedKind::U6_F32: return int_set_for_width<PackedKind::U6_F32>(k);
    case PackedKind::U4_K: return int_set_for_width<PackedKind::U4_K>(k);
    case PackedKind::U6_K: return int_set_for_width<PackedKind::U6_K>(k);
    case PackedKind::F32: return float_set<PackedKind::F32>(blocks);
    case PackedKind::F16: return float_set<PackedKind::F16>(blocks);
    case PackedKind::BF16: return float_set<PackedKind::BF16>(blocks);
  }
  return float_set<PackedKind::F32>(blocks);
}

void matmul_tiles(const PackedWeight& w, int tile_begin, int tile_end, const MatmulInput& in, float* y, int ldy) {
  const TileSet set = tile_set(w.kind, in.k);
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    int token = 0;
    for (int b = 0; b < kTokenBlockCount; ++b)
      while (in.n - token >= kTokenBlocks[b]) {
        set.by_tokens[b](w, tile, in, token, y, ldy);
        token += kTokenBlocks[b];
      }
  }
}
