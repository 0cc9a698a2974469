// The small GEMM: y = W x for a few to 64 activation rows (batched decode, a verify block of
// draft tokens) on the tensor cores, reading the quantized weights where they lie (the GPU
// layout of quant_blocks.cuh) once per pass. Between the GEMV (weights decoded once per 8
// rows, dot products on the ALUs) and dequantize + cuBLAS (the whole matrix written out as
// f16 every pass), it decodes each weight once into shared memory as f16 and lets mma.sync
// apply it to every activation row.
//
// A thread block owns 128 weight rows (a warp per 16) over a range of 128-column tiles (split
// K: enough blocks for every SM on short matrices; the last split of a row block to finish
// adds up the others' sums in a fixed order, so results do not vary from run to run).
// For each tile, each thread decodes 2 parts (32 weights each) into shared memory as f16 and
// converts its share of the tile's activations (x, float) to f16 beside them; each warp then
// runs 8 k-steps of m16n8k16 for its 16 rows against every 8 activation rows.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/experts.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_blocks.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace splash::kernels::cuda {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kBlockRows = 16 * kWarps;  // weight rows of a thread block
constexpr int kTileCols = 128;           // half a K-quant super-block, four 32-weight blocks
constexpr int kTileParts = kTileCols / 32;
constexpr int kPitch = kTileCols + 8;  // halves per shared row: ldmatrix's 8 rows fall in distinct banks
constexpr int kPartsPerThread = kBlockRows * kTileParts / kThreads;
constexpr int kRowsPerSweep = kThreads / kTileParts;  // rows whose parts one sweep of the threads covers

// Two stages, each a tile's weights [kBlockRows][kPitch] and activations [8 NT][kPitch], f16.
constexpr int stage_halves(int token_tiles) { return (kBlockRows + 8 * token_tiles) * kPitch; }
constexpr size_t shared_bytes(int token_tiles) { return 2 * sizeof(__half) * static_cast<size_t>(stage_halves(token_tiles)); }

// From 32 rows the activations are converted to f16 once (activations_to_f16_kernel) rather
// than by every row block: the thread blocks of one matmul read them n x cols x rows / 128
// times over, from L2.
template <int NT>
constexpr bool kHalfActivations = NT >= 4;

__global__ void activations_to_f16_kernel(const float* x, int ldx, int n, int cols,
                                          __half* __restrict__ out) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // 8 columns each
  const int eighths = cols / 8;
  wait_for_inputs();
  allow_next_launch();
  if (index >= static_cast<size_t>(n) * eighths) return;
  const int t = static_cast<int>(index / eighths), c = 8 * static_cast<int>(index % eighths);
  const float4 a = *reinterpret_cast<const float4*>(x + static_cast<size_t>(t) * ldx + c);
  const float4 b = *reinterpret_cast<const float4*>(x + static_cast<size_t>(t) * ldx + c + 4);
  *reinterpret_cast<uint4*>(out + static_cast<size_t>(t) * cols + c) =
      make_uint4(pack_half2(a.x, a.y), pack_half2(a.z, a.w), pack_half2(b.x, b.y), pack_half2(b.z, b.w));
}

// Part `q` (0-3) of tile `tile`: its block, the part within the block, and where the block's
// column 0 lies relative to the tile's (a super-block spans two tiles: the second half's
// parts 4-7 hold columns 128-255).
template <typename B>
__device__ __forceinline__ void tile_part(int tile, int q, int& block, int& part, int& column) {
  if constexpr (B::kElements == 2 * kTileCols) block = tile / 2, part = (tile % 2) * kTileParts + q, column = -kTileCols * (tile % 2);
  else block = tile * kTileParts + q, part = 0, column = 32 * q;
}

// A run's 16 codes as f16 weights d * q + m, in half2 arithmetic: each code byte becomes
// the half 1024 + q (its bits under 1024's exponent), 1024 is taken off exactly, then one
// fused multiply-add rounds d * q + m once (d and m held as halves: exact for the 32-weight
// types, whose scales are halves; K-quant sub-block scales d * s round to a half first).
template <bool kSigned>
__device__ __forceinline__ void store_codes_f16(const CodeRun& r, __half* to) {
  const __half2 d = __float2half2_rn(r.d), m = __float2half2_rn(r.m);
  const __half2 offset = __float2half2_rn(kSigned ? 1152.0f : 1024.0f);  // Q8_0: bytes ^ 0x80 = q + 128
  uint32_t words[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t codes = kSigned ? r.q[k] ^ 0x80808080u : r.q[k];
    const uint32_t lo = __byte_perm(codes, 0x64646464u, 0x5140), hi = __byte_perm(codes, 0x64646464u, 0x5342);
    const __half2 a = __hfma2(__hsub2(*reinterpret_cast<const __half2*>(&lo), offset), d, m);
    const __half2 b = __hfma2(__hsub2(*reinterpret_cast<const __half2*>(&hi), offset), d, m);
    words[2 * k] = *reinterpret_cast<const uint32_t*>(&a);
    words[2 * k + 1] = *reinterpret_cast<const uint32_t*>(&b);
  }
  reinterpret_cast<uint4*>(to)[0] = make_uint4(words[0], words[1], words[2], words[3]);
  reinterpret_cast<uint4*>(to)[1] = make_uint4(words[4], words[5], words[6], words[7]);
}

// A thread block's sums out of the warps' mma fragments (c0, c1 at row g, tokens 2t, 2t + 1;
// c2, c3 at row g + 8), warp w holding rows 16w .. 16w + 15 of the block's kRows: with one
// split stored (or added) into y; with split K left in `partials`, the last of a row
// block's splits to finish adding them up in split order (the same result every run) and
// writing y, then resetting the row block's arrival count for the next launch.
template <int kRows, int kBlockThreads, int NT>
__device__ __forceinline__ void finish_rows(const float (&acc)[NT][4], int row_base, int rows, int n, float* __restrict__ y,
                                            int ldy, int accumulate, int splits, float* __restrict__ partials,
                                            unsigned* __restrict__ arrivals) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t2 = 2 * (lane % 4);
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row_base + 16 * warp + g + 8 * (e / 2), token = 8 * j + t2 + e % 2;
        if (row >= rows || token >= n) continue;
        float* out = y + static_cast<size_t>(token) * ldy + row;
        *out = accumulate ? *out + acc[j][e] : acc[j][e];
      }
    return;
  }
  constexpr int kRegion = 8 * NT * kRows;  // floats of one block's partial sums: [token][row]
  float* mine = partials + (static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kRegion;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) mine[(8 * j + t2 + e % 2) * kRows + 16 * warp + g + 8 * (e / 2)] = acc[j][e];
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&arrivals[blockIdx.x], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int e = threadIdx.x; e < n * (kRows / 4); e += kBlockThreads) {  // four rows a thread
    const int token = e / (kRows / 4), r = 4 * (e % (kRows / 4));
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // (unrolled: eight splits' loads in flight before their adds, still added in split order;
    // a small matrix is split up to 32 ways, and one load at a time is one L2 round trip each)
#pragma unroll 8
    for (int split = 0; split < splits; ++split) {
      const float4 p = __ldcg(reinterpret_cast<const float4*>(
          partials + (static_cast<size_t>(split) * gridDim.x + blockIdx.x) * kRegion + token * kRows + r));
      sum.x += p.x, sum.y += p.y, sum.z += p.z, sum.w += p.w;
    }
    const float sums[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row_base + r + i;
      if (row >= rows) break;
      float* out = y + static_cast<size_t>(token) * ldy + row;
      *out = accumulate ? *out + sums[i] : sums[i];
    }
  }
  if (threadIdx.x == 0) arrivals[blockIdx.x] = 0;
}

// A grouped launch (grouped_expert_matmul): blockIdx.z is a tile of ExpertGroups, {expert,
// first row, rows}; the block's matrix is that expert's and its activation and output rows
// the tile's. Blocks past the tile count return at once.
struct ExpertTiles {
  const int4* tiles = nullptr;  // null: a plain launch
  const int* count = nullptr;
  size_t expert_bytes = 0;
};

// The pipeline: while the warps multiply tile t out of one stage, they decode tile t + 1
// (whose loads were issued two tiles earlier) into the other; a tile's raw loads are issued
// as soon as the registers they go to are decoded, so two tiles of weights are always in
// flight; tile t + 1's activations are loaded before the decoding and stored after the
// multiply (an L2 round trip that no longer stalls the warps); one barrier a tile.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kThreads, NT == 1 ? 3 : 2)  // as many as fit in shared memory
    small_gemm_kernel(Rows<T> w, int rows, int cols, const float* x, const __half* x16, int ldx, int n,
                      float* __restrict__ y, int ldy, int accumulate, int tiles_per_split, int splits,
                      float* __restrict__ partials, unsigned* __restrict__ arrivals, ExpertTiles grouped) {
  using B = Block<T>;
  using Raw = typename B::Raw;
  extern __shared__ uint4 shared[];
  if (grouped.tiles) {  // (the tiles come from the kernel before: wait for them first)
    wait_for_inputs();
    if (static_cast<int>(blockIdx.z) >= *grouped.count) return;
    const int4 tile = grouped.tiles[blockIdx.z];
    w.data += grouped.expert_bytes * tile.x;
    x += static_cast<size_t>(tile.y) * ldx;
    if (x16) x16 += static_cast<size_t>(tile.y) * cols;
    y += static_cast<size_t>(tile.y) * ldy;
    n = tile.z;
  }
  __half* const stages[2] = {reinterpret_cast<__half*>(shared), reinterpret_cast<__half*>(shared) + stage_halves(NT)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_base = blockIdx.x * kBlockRows;
  const int tiles = (cols + kTileCols - 1) / kTileCols, blocks_in_row = cols / B::kElements;
  const int first = blockIdx.y * tiles_per_split, end = min(tiles, first + tiles_per_split);
  const int q = threadIdx.x % kTileParts;  // this thread's part of every tile, in rows below
  int row_of[kPartsPerThread];
#pragma unroll
  for (int i = 0; i < kPartsPerThread; ++i)
    row_of[i] = min(row_base + threadIdx.x / kTileParts + kRowsPerSweep * i, rows - 1);

  auto load = [&](int tile, Raw (&raw)[kPartsPerThread]) {
    int block, part, column;
    tile_part<B>(tile, q, block, part, column);
    block = min(block, blocks_in_row - 1);  // past the row's end (a partial tile): zeros are stored instead
#pragma unroll
    for (int i = 0; i < kPartsPerThread; ++i) raw[i] = B::load(w.quants(row_of[i], block), w.header(row_of[i], block), part);
  };
  // A tile's activations, loaded into registers an iteration before they are stored into the
  // tile's stage (rows past n and columns past cols: zeros), so their L2 latency hides behind
  // a tile's decoding and multiplying: f16 rows 8 to a load (kHalfActivations), else floats 4
  // to a load, converted as they are stored.
  constexpr int kActLoads = kHalfActivations<NT> ? 8 * NT * (kTileCols / 8) / kThreads : 8 * NT * (kTileCols / 4) / kThreads;
  using ActLoad = std::conditional_t<kHalfActivations<NT>, uint4, float4>;
  constexpr int kActWidth = kHalfActivations<NT> ? 8 : 4;  // columns a load holds
  auto load_acts = [&](int tile, ActLoad (&v)[kActLoads]) {
#pragma unroll
    for (int i = 0; i < kActLoads; ++i) {
      const int e = threadIdx.x + kThreads * i;
      const int t = e / (kTileCols / kActWidth), column = tile * kTileCols + kActWidth * (e % (kTileCols / kActWidth));
      if constexpr (kHalfActivations<NT>)
        v[i] = t < n && column < cols ? *reinterpret_cast<const uint4*>(x16 + static_cast<size_t>(t) * cols + column)
                                      : make_uint4(0, 0, 0, 0);
      else
        v[i] = t < n && column < cols ? *reinterpret_cast<const float4*>(x + static_cast<size_t>(t) * ldx + column)
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  auto store_acts = [&](const ActLoad (&v)[kActLoads], __half* stage) {
    __half* acts = stage + kBlockRows * kPitch;
#pragma unroll
    for (int i = 0; i < kActLoads; ++i) {
      const int e = threadIdx.x + kThreads * i;
      __half* to = acts + (e / (kTileCols / kActWidth)) * kPitch + kActWidth * (e % (kTileCols / kActWidth));
      if constexpr (kHalfActivations<NT>)
        *reinterpret_cast<uint4*>(to) = v[i];
      else
        *reinterpret_cast<uint2*>(to) = make_uint2(pack_half2(v[i].x, v[i].y), pack_half2(v[i].z, v[i].w));
    }
  };
  // A tile's weights into a stage, decoded to f16 (past the row's end: zeros).
  auto fill_weights = [&](int tile, const Raw (&raw)[kPartsPerThread], __half* stage) {
    int block, part, column;
    tile_part<B>(tile, q, block, part, column);
    int pa, pb;
    B::columns(part, pa, pb);
    const bool inside = block < blocks_in_row;
#pragma unroll
    for (int i = 0; i < kPartsPerThread; ++i) {
      __half* to = stage + (threadIdx.x / kTileParts + kRowsPerSweep * i) * kPitch + column;
      if (inside) {
        CodeRun a, b;
        B::codes(raw[i], part, a, b);
        store_codes_f16<T == GgmlType::Q8_0>(a, to + pa);
        store_codes_f16<T == GgmlType::Q8_0>(b, to + pb);
      } else {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        reinterpret_cast<uint4*>(to + pa)[0] = reinterpret_cast<uint4*>(to + pa)[1] = zero;
        reinterpret_cast<uint4*>(to + pb)[0] = reinterpret_cast<uint4*>(to + pb)[1] = zero;
      }
    }
  };
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // The warp's 16 rows of a stage against every 8 activation rows.
  auto multiply = [&](const __half* stage) {
    const __half* a_rows = stage + (16 * warp + lane % 16) * kPitch + (lane / 16) * 8;
    const __half* b_rows = stage + kBlockRows * kPitch + (lane % 8) * kPitch + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int k = 0; k < kTileCols / 16; ++k) {
      uint32_t a[4];
      ldmatrix_x4(a, a_rows + 16 * k);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t b[2];
        ldmatrix_x2(b, b_rows + 8 * j * kPitch + 16 * k);
        mma_16x8x16(acc[j], a, b[0], b[1]);
      }
    }
  };

  Raw even[kPartsPerThread], odd[kPartsPerThread];  // the raw loads of even and odd tiles
  ActLoad acts[kActLoads];
  if (first < end) load(first, even);
  if (first + 1 < end) load(first + 1, odd);
  wait_for_inputs();  // weights are on their way; x comes from the kernel before
  if (first < end) {
    load_acts(first, acts);
    fill_weights(first, even, stages[0]);
    if (first + 2 < end) load(first + 2, even);
    store_acts(acts, stages[0]);
  }
  __syncthreads();
  for (int tile = first; tile < end; tile += 2) {  // tile is in stages[0] (relative to first)
    if (tile + 1 < end) {
      load_acts(tile + 1, acts);
      fill_weights(tile + 1, odd, stages[1]);
      if (tile + 3 < end) load(tile + 3, odd);
    }
    multiply(stages[0]);
    if (tile + 1 < end) store_acts(acts, stages[1]);  // (stages[1] was last read before the barrier above)
    __syncthreads();
    if (tile + 1 >= end) break;
    if (tile + 2 < end) {
      load_acts(tile + 2, acts);
      fill_weights(tile + 2, even, stages[0]);
      if (tile + 4 < end) load(tile + 4, even);
    }
    multiply(stages[1]);
    if (tile + 2 < end) store_acts(acts, stages[0]);
    __syncthreads();
  }
  allow_next_launch();
  finish_rows<kBlockRows, kThreads>(acc, row_base, rows, n, y, ldy, accumulate, splits, partials, arrivals);
}

// The streamed small GEMM, the K-quants at up to 64 rows: where the staged kernel above is
// bound by its barriers and shared-memory round trip (a few warps an SM decoding, then
// multiplying), here each warp streams its own 16 weight rows through registers with no
// barrier: every lane loads, one or two super-blocks ahead, its share of each of its two
// rows (g and g + 8) and decodes it straight into mma A fragments.
//
// The fragments' k order is free (a dot product does not care), so it is chosen to fit the
// bytes: of a super-block, lane c takes 64 weights whose codes lie in 32 bytes of low bits
// (Q4_K: chunk c, bytes 32c .. 32c + 31, the four lanes of a row reading its whole 128-byte
// line; Q6_K: half c / 2, ql row c % 2, and that half's 32 bytes of high bits), and k-step
// j = 8 p + 2 q + r takes word q of the lane's 16-byte half p, low (r = 0) or high (r = 1)
// nibbles: its bytes 0 and 2 give A's first half2, bytes 1 and 3 the second, one
// mask-and-or each (codes under 1024's exponent, as store_codes_f16); a run of 16 is (p, r),
// under one scale. The block's activations sit in shared memory as f16 in that same order
// (StreamedBlock::column), filled once for its K range: token t's super-block holds, per
// k-step j and lane c, the four halves of B's two registers, one 8-byte load.
constexpr int kStreamWarps = 8, kStreamThreads = 32 * kStreamWarps;
constexpr int kStreamRows = 16 * kStreamWarps;  // weight rows of a thread block
constexpr int kStreamCols = 256;                // a super-block: the unit of the K range
constexpr int kStreamLongest = 8;               // super-blocks a split takes at most: the activations' shared memory
constexpr int kStreamLargestBatch = kSmallGemmStreamedLargestBatch;
constexpr int kStreamPad = 16;  // halves after each token's row: the 8 tokens of a B load in distinct banks

constexpr size_t stream_shared_bytes(int token_tiles, int blocks) {
  return sizeof(__half) * 8 * token_tiles * static_cast<size_t>(blocks * kStreamCols + kStreamPad);
}

// From 32 rows (NT >= 4) a split's activations no longer fit in shared memory whole (8
// super-blocks of 64 tokens: 256 KB), and every row block converting them from float would
// read them from L2 a float a time: the matmul first writes them once as f16, permuted and
// laid out [super-block][token < 8 NT][256] (streamed_activations_kernel), and each block
// streams its K range of them through a ring of super-blocks, copied 16 bytes at a time with
// cp.async, kRingStages - 1 ahead; one barrier a super-block. From 9 rows (NT = 2) too: the
// ring is what wgmma reads B from, and at 16 rows NT mma.sync a k-step and their B loads from
// shared memory took as long as 32 rows' one wgmma (gate_up: 51.6 us against 49.1).
template <int NT>
constexpr bool kStreamRing = NT >= 2;
constexpr int kRingStages = 3;
// With wgmma (sm_90a) a stage is read by multiplies still running while the next super-block
// is decoded: a fourth stage, so that the one refilled (two ahead, as above) was last read
// two super-blocks back, whose multiplies every warp has waited for.
constexpr int kWgmmaRingStages = 4;
constexpr int kRingPitch = kStreamCols + kStreamPad;  // halves of a token's row in a stage
constexpr size_t ring_shared_bytes(int token_tiles) {  // (the larger of the two layouts: the host cannot tell)
  return sizeof(__half) * 8 * token_tiles *
         std::max(kRingStages * static_cast<size_t>(kRingPitch), kWgmmaRingStages * static_cast<size_t>(kStreamCols));
}

__device__ __forceinline__ void copy_async16(void* to_shared, const void* from_global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(to_shared)), "l"(from_global) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// A pair of codes (bits 0-5 and 16-21) as the half2 d * q + m.
__device__ __forceinline__ uint32_t code_pair_f16(uint32_t codes, __half2 d, __half2 m) {
  const uint32_t bits = codes | 0x64006400u;
  const __half2 w = __hfma2(__hsub2(*reinterpret_cast<const __half2*>(&bits), __float2half2_rn(1024.0f)), d, m);
  return *reinterpret_cast<const uint32_t*>(&w);
}
__device__ __forceinline__ uint32_t word_of(const uint4& v, int q) { return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w; }

// What the streamed kernel reads of a type: a lane's load of one row's super-block, the
// scales of its four runs, the code pairs of a k-step, and where a k-step's columns lie.
template <GgmlType T>
struct StreamedBlock;

template <>
struct StreamedBlock<GgmlType::Q4_K> {
  static constexpr int kDepth = 2;  // super-blocks of loads in flight, per lane (registers: two blocks an SM)
  struct Load {
    uint4 q[2], h;  // chunk c's 32 quant bytes; the super-block's header
  };
  __device__ static void load(const Rows<GgmlType::Q4_K>& w, int row, int block, int c, Load& l) {
    l.q[0] = load_weights16(w.quants(row, block) + 32 * c);
    l.q[1] = load_weights16(w.quants(row, block) + 32 * c + 16);
    l.h = *reinterpret_cast<const uint4*>(w.header(row, block));  // (the row's four lanes read the same 16 bytes)
  }
  // d, m of run (p, r): sub-block 2c (low nibbles) or 2c + 1, both halves p alike.
  __device__ static void scales(const Load& l, int c, __half2 (&d)[2][2], __half2 (&m)[2][2]) {
    const float dall = half_bits(l.h.x & 0xFFFF), dmin = half_bits(l.h.x >> 16);
    const uint32_t packed[3] = {l.h.y, l.h.z, l.h.w};
    uint32_t sc, mn;
    q4k_chunk_scales(c, packed, sc, mn);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      d[0][r] = d[1][r] = __float2half2_rn(dall * small_uint_to_float((sc >> (8 * r)) & 0xFF));
      m[0][r] = m[1][r] = __float2half2_rn(-dmin * small_uint_to_float((mn >> (8 * r)) & 0xFF));
    }
  }
  // Bytes 0 and 2 (s = 0) or 1 and 3 (s = 1) of word q of half p, nibbles r.
  __device__ static uint32_t codes(const Load& l, int, int p, int q, int r, int s) {
    return (word_of(l.q[p], q) >> (4 * r + 8 * s)) & 0x000F000Fu;
  }
  // Column of k-step j's first code for lane c: byte 16 p + 4 q of chunk c, + 32 for the high nibbles.
  __host__ __device__ static constexpr int column(int j, int c) { return 64 * c + 16 * (j / 8) + 32 * (j % 2) + 4 * ((j % 8) / 2); }
};

template <>
struct StreamedBlock<GgmlType::Q6_K> {
  static constexpr int kDepth = 1;  // (two spill: a lane loads 70 bytes of a row, against Q4_K's 48)
  struct Load {
    uint4 ql[2], qh[2];  // ql bytes 64 n + 32 o .. + 31 (half n = c / 2, o = c % 2); the half's 32 qh bytes
    uint32_t s0, s1, d;  // the scale words of runs 8 n + 2 o (+1) and 8 n + 4 + 2 o (+1); d
  };
  __device__ static void load(const Rows<GgmlType::Q6_K>& w, int row, int block, int c, Load& l) {
    const int n = c / 2, o = c % 2;
    const uint8_t* quants = w.quants(row, block);
    l.ql[0] = load_weights16(quants + 64 * n + 32 * o);
    l.ql[1] = load_weights16(quants + 64 * n + 32 * o + 16);
    l.qh[0] = load_weights16(quants + 128 + 32 * n);  // (both lanes of a half read these)
    l.qh[1] = load_weights16(quants + 128 + 32 * n + 16);
    const auto* h = reinterpret_cast<const uint32_t*>(w.header(row, block));  // 20-byte headers: word loads
    l.s0 = h[2 * n], l.s1 = h[2 * n + 1], l.d = h[4];
  }
  // d, m of run (p, r): scale byte 8 n + 4 r + 2 o + p; w = d sc (q - 32).
  __device__ static void scales(const Load& l, int c, __half2 (&d)[2][2], __half2 (&m)[2][2]) {
    const float dall = half_bits(l.d & 0xFFFF);
    const int o = c % 2;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const float scale = dall * static_cast<float>(static_cast<int8_t>((r == 0 ? l.s0 : l.s1) >> (8 * (2 * o + p))));
        d[p][r] = __float2half2_rn(scale), m[p][r] = __float2half2_rn(-32.0f * scale);
      }
  }
  // The low four bits from ql, the high two from qh (bits 2 o, 2 o + 1 of a byte for the low
  // nibbles, 2 o + 4, 2 o + 5 for the high ones).
  __device__ static uint32_t codes(const Load& l, int c, int p, int q, int r, int s) {
    const uint32_t low = (word_of(l.ql[p], q) >> (4 * r + 8 * s)) & 0x000F000Fu;
    const uint32_t high = (word_of(l.qh[p], q) >> (2 * (c % 2) + 4 * r + 8 * s)) & 0x00030003u;
    return low | (high << 4);
  }
  // Column of k-step j's first code for lane c: 128 n + 32 o + 16 p + 4 q, + 64 for the high nibbles.
  __host__ __device__ static constexpr int column(int j, int c) {
    return 128 * (c / 2) + 32 * (c % 2) + 16 * (j / 8) + 64 * (j % 2) + 4 * ((j % 8) / 2);
  }
};

// Four activations of token t at k-step j, lane c of a super-block (from its column 0), as
// the two f16 pairs of B's registers: columns (0, 2) and (1, 3) of StreamedBlock::column.
template <GgmlType T>
__device__ __forceinline__ uint2 permuted_quad(const float* block_row, int j, int c, bool inside) {
  const float4 v = inside ? *reinterpret_cast<const float4*>(block_row + StreamedBlock<T>::column(j, c))
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return make_uint2(pack_half2(v.x, v.z), pack_half2(v.y, v.w));
}

// x (n float rows) as the ring's activations, f16, tokens past n zeros, a super-block's
// [tokens x 256] after another. With mma.sync (before sm_90a): token by token, each row in
// the streamed order. With wgmma: as the B operand of 16 k-steps, k-step after k-step, each
// [tokens x 16] in 8 x 8 core matrices (wgmma.cuh): token t's logical k of k-step j at
// 128 (t / 8) + 64 (k / 8) + 8 (t % 8) + k % 8 halves, where logical k = 2 c + e (+ 8 for
// the second half) is what the A fragments put there: StreamedBlock::column(j, c) + 2 e
// (+ 1), as in permuted_quad. A thread per (super-block, token, place of 4 halves).
template <GgmlType T>
__global__ void streamed_activations_kernel(const float* x, int ldx, int n, int tokens, int blocks,
                                            __half* __restrict__ out) {
  constexpr int kPlaces = kStreamCols / 4;
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  wait_for_inputs();
  allow_next_launch();
  if (index >= static_cast<size_t>(blocks) * tokens * kPlaces) return;
  const int place = static_cast<int>(index % kPlaces);
  const size_t row = index / kPlaces;  // super-block * tokens + token
  const int t = static_cast<int>(row % tokens), block = static_cast<int>(row / tokens);
  const float* from = x + static_cast<size_t>(t) * ldx + static_cast<size_t>(block) * kStreamCols;
#if SPLASH_WGMMA
  // place = 4 j + 2 (k / 8) + (k % 8) / 4: halves k .. k + 3 of k-step j, lanes c and c + 1
  const int j = place / 4, high = (place / 2) % 2, c0 = 2 * (place % 2);
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (t < n)
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = from[StreamedBlock<T>::column(j, c0 + i / 2) + 2 * (i % 2) + high];
  __half* to = out + static_cast<size_t>(block) * tokens * kStreamCols + static_cast<size_t>(j) * tokens * 16 +
               128 * (t / 8) + 64 * high + 8 * (t % 8) + 4 * (place % 2);
  *reinterpret_cast<uint2*>(to) = make_uint2(pack_half2(v[0], v[1]), pack_half2(v[2], v[3]));
#else
  *reinterpret_cast<uint2*>(out + row * kStreamCols + 4 * place) = permuted_quad<T>(from, place / 4, place % 4, t < n);
#endif
}

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kStreamThreads, kStreamRing<NT> ? 1 : 2)  // (registers: the ring's two halves' A fragments, one block an SM; two spill)
    small_gemm_streamed_kernel(Rows<T> w, int rows, int cols, const float* x, const __half* x16,
                               int ldx, int n, float* __restrict__ y, int ldy, int accumulate, int blocks_per_split,
                               int splits, float* __restrict__ partials, unsigned* __restrict__ arrivals) {
  using S = StreamedBlock<T>;
  constexpr bool kRing = kStreamRing<NT>;
  constexpr int kTokens = 8 * NT;
  extern __shared__ uint4 shared[];
  __half* const acts = reinterpret_cast<__half*>(shared);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int row_base = blockIdx.x * kStreamRows;
  const int blocks = cols / kStreamCols;
  const int first = blockIdx.y * blocks_per_split, count = min(blocks, first + blocks_per_split) - first;
  const int pitch = kRing ? kRingPitch : count * kStreamCols + kStreamPad;  // halves of a token's row
  const int r0 = min(row_base + 16 * warp + g, rows - 1), r1 = min(row_base + 16 * warp + g + 8, rows - 1);

  struct RowsLoad {
    typename S::Load row[2];  // rows r0 and r1
  };
  auto load = [&](int block, RowsLoad& t) {
    S::load(w, r0, block, c, t.row[0]);
    S::load(w, r1, block, c, t.row[1]);
  };
  RowsLoad ring[S::kDepth];
#pragma unroll
  for (int i = 0; i < S::kDepth; ++i)
    if (i < count) load(first + i, ring[i]);
  wait_for_inputs();  // weights are on their way; x comes from the kernel before

  // Super-block `local` of the range into ring stage `stage` (a commit group, empty past the range).
  auto fill_stage = [&](int local, int stage) {
    if (local < count) {
      constexpr int kCopies = kTokens * kStreamCols / 8 / kStreamThreads;  // 16 bytes each
      const __half* from = x16 + static_cast<size_t>(first + local) * kTokens * kStreamCols;
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int e = threadIdx.x + kStreamThreads * i;
#if SPLASH_WGMMA
        copy_async16(acts + stage * kTokens * kStreamCols + 8 * e, from + 8 * e);  // (k-step tiles as they lie)
#else
        const int t = e / (kStreamCols / 8), column = 8 * (e % (kStreamCols / 8));
        copy_async16(acts + stage * kTokens * kRingPitch + t * kRingPitch + column, from + t * kStreamCols + column);
#endif
      }
    }
    copy_async_commit();
  };
  if constexpr (kRing) {
#pragma unroll
    for (int s = 0; s < kRingStages - 1; ++s) fill_stage(s, s);
  } else {
    // The range's activations, permuted (above), f16; tokens past n: zeros. A thread keeps one
    // (k-step j, lane c) place of every super-block and token (the loops divide by nothing:
    // the fill is a share of the kernel's instructions).
    constexpr int kPlaces = kStreamCols / 4, kStride = kStreamThreads / kPlaces;  // 64 places, 4 at once
    const int place = threadIdx.x % kPlaces;
    const float* from = x + static_cast<size_t>(first) * kStreamCols;
    __half* to = acts + 4 * place;
#pragma unroll
    for (int t = 0; t < kTokens; ++t)
      for (int block = threadIdx.x / kPlaces; block < count; block += kStride)
        *reinterpret_cast<uint2*>(to + t * pitch + block * kStreamCols) =
            permuted_quad<T>(from + static_cast<size_t>(t) * ldx + block * kStreamCols, place / 4, place % 4, t < n);
    __syncthreads();
  }

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // The warp's two rows of a super-block against its activations (token 0's row at `block_acts`).
  auto multiply = [&](const RowsLoad& t, const __half* block_acts) {
    __half2 d[2][2][2], m[2][2][2];  // [row][p][r]
    S::scales(t.row[0], c, d[0], m[0]);
    S::scales(t.row[1], c, d[1], m[1]);
    const __half* b_rows = block_acts + g * pitch + 4 * c;
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int q = i / 2, r = i % 2;
        const uint32_t a[4] = {code_pair_f16(S::codes(t.row[0], c, p, q, r, 0), d[0][p][r], m[0][p][r]),
                               code_pair_f16(S::codes(t.row[1], c, p, q, r, 0), d[1][p][r], m[1][p][r]),
                               code_pair_f16(S::codes(t.row[0], c, p, q, r, 1), d[0][p][r], m[0][p][r]),
                               code_pair_f16(S::codes(t.row[1], c, p, q, r, 1), d[1][p][r], m[1][p][r])};
#pragma unroll
        for (int jt = 0; jt < NT; ++jt) {
          const uint2 b = *reinterpret_cast<const uint2*>(b_rows + 8 * jt * pitch + 16 * (8 * p + i));
          mma_16x8x16(acc[jt], a, b.x, b.y);
        }
      }
  };
#if SPLASH_WGMMA
  // On Hopper the ring's super-blocks go to wgmma: each warpgroup's four warps decode their 16
  // rows' A fragments, then issue asynchronous multiplies of 64 rows by the stage's 8 NT tokens
  // (one instruction where mma.sync takes NT, B read by the tensor cores from shared memory).
  // A super-block in two halves of 8 k-steps, each its own commit group in its own registers:
  // a half is decoded while the half before it multiplies (waiting first for the one before
  // that, the last reader of those registers), so the tensor cores and the decoding overlap.
  auto multiply_wgmma = [&](const RowsLoad& t, const __half* stage) {
    if constexpr (kRing) {  // (instances for the ring's widths only)
      __half2 d[2][2][2], m[2][2][2];  // [row][p][r]
      S::scales(t.row[0], c, d[0], m[0]);
      S::scales(t.row[1], c, d[1], m[1]);
      // k-step tiles of [8 NT tokens x 16] one after another: core matrices 128 bytes apart
      // along k, 256 along the tokens (the activations' layout, streamed_activations_kernel)
      const uint64_t first_step = wgmma_descriptor(stage, 128, 256);
      auto half = [&](int p, uint32_t (&a)[8][4]) {
        wgmma_wait<1>();  // this half's registers were last read two halves back
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int q = i / 2, r = i % 2;
          a[i][0] = code_pair_f16(S::codes(t.row[0], c, p, q, r, 0), d[0][p][r], m[0][p][r]);
          a[i][1] = code_pair_f16(S::codes(t.row[1], c, p, q, r, 0), d[1][p][r], m[1][p][r]);
          a[i][2] = code_pair_f16(S::codes(t.row[0], c, p, q, r, 1), d[0][p][r], m[0][p][r]);
          a[i][3] = code_pair_f16(S::codes(t.row[1], c, p, q, r, 1), d[1][p][r], m[1][p][r]);
        }
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < 8; ++i)
          wgmma_f16_rs<NT>(acc, a[i], first_step + static_cast<uint64_t>((8 * p + i) * kTokens * 16 * 2 / 16));
        wgmma_commit();
      };
      uint32_t low[8][4], high[8][4];
      half(0, low);
      half(1, high);
    }
  };
#endif
  for (int base = 0; base < count; base += S::kDepth) {
#pragma unroll
    for (int k = 0; k < S::kDepth; ++k) {
      const int local = base + k;
      if (local >= count) break;
      const RowsLoad t = ring[k];
      if (local + S::kDepth < count) load(first + local + S::kDepth, ring[k]);
      if constexpr (kRing) {
        // Stage `local` has landed (for every thread: the barrier), and the stage it refills
        // was last read by the super-block before, which every warp has finished (with wgmma,
        // four stages: the super-block two back, whose multiplies every warp has waited for
        // before decoding the second half of the one before).
#if SPLASH_WGMMA
        copy_async_wait<kRingStages - 2>();
        fence_shared_for_async_proxy();
        __syncthreads();
        fill_stage(local + kRingStages - 1, (local + kRingStages - 1) % kWgmmaRingStages);
        multiply_wgmma(t, acts + (local % kWgmmaRingStages) * kTokens * kStreamCols);
#else
        copy_async_wait<kRingStages - 2>();
        __syncthreads();
        fill_stage(local + kRingStages - 1, (local + kRingStages - 1) % kRingStages);
        multiply(t, acts + (local % kRingStages) * kTokens * kRingPitch);
#endif
      } else {
        multiply(t, acts + local * kStreamCols);
      }
    }
  }
#if SPLASH_WGMMA
  if constexpr (kRing) {
    wgmma_wait<0>();
    wgmma_pin(acc);
  }
#endif
  allow_next_launch();
  finish_rows<kStreamRows, kStreamThreads>(acc, row_base, rows, n, y, ldy, accumulate, splits, partials, arrivals);
}

// Split K's partial sums, [split][row block][token][row], in all: the budget of the split choice.
constexpr size_t kSplitPartialBytes = size_t{32} << 20;

// The split of K. A pass takes about (waves of resident thread blocks) x (tiles a block
// walks): latency-bound at few rows, where a block's speed barely depends on its neighbours,
// tensor-bound at 64, where an SM's blocks share its tensor cores and more, shorter blocks
// balance the SMs. The split making that least (the fewest splits among equals), within the
// partial sums' budget and `longest` tiles (of `tile_cols` columns) a split; `splits` > 0
// forces one (tests, the benchmark; still within `longest`). `overhead`: what a block costs
// besides its tiles, in tiles (the streamed kernel's activation fill and pipeline start:
// measured, qkv at 8 rows took 14.2 us in 4 splits and 20.9 us in the 16 the bare count chose).
// `partial_tiles`: what a split block's partial sums cost besides, written and read back, in
// tiles of weights (their bytes over a tile's): at 64 rows a block's partials are 32 KB against
// a Q4_K tile's 18 KB, and the 8B's gate_up took 66.0 us in one split, 74.8 in the two a count
// without them chose.
struct SplitK {
  int splits, tiles_per_split, row_blocks;
};
SplitK split_k(int rows, int cols, int token_tiles, int splits, int resident_blocks, int block_rows = kBlockRows,
               int longest = 1 << 30, int tile_cols = kTileCols, double overhead = 0.0, double partial_tiles = 0.0) {
  const int tiles = (cols + tile_cols - 1) / tile_cols;
  const int row_blocks = (rows + block_rows - 1) / block_rows;
  const long slots = static_cast<long>(resident_blocks) * multiprocessor_count();
  const size_t region_bytes = sizeof(float) * 8 * token_tiles * block_rows * row_blocks;  // one split's partials
  const int fewest = (tiles + longest - 1) / longest;
  // (the last split reads splits x 8 NT x rows partial sums alone: at most 512 x rows)
  const int most = std::max(fewest, std::min({tiles, std::max(1, 64 / token_tiles),
                                              static_cast<int>(kSplitPartialBytes / region_bytes)}));
  if (splits <= 0) {
    double best_cost = -1.0;
    for (int s = fewest; s <= std::max(1, most); ++s) {
      const int per_split = (tiles + s - 1) / s, used = (tiles + per_split - 1) / per_split;
      const long waves = (static_cast<long>(row_blocks) * used + slots - 1) / slots;
      const double cost = static_cast<double>(waves) * (per_split + overhead + (used > 1 ? partial_tiles : 0.0));
      if (best_cost < 0.0 || cost < best_cost) best_cost = cost, splits = used;
    }
  }
  splits = std::clamp(splits, std::max(1, fewest), tiles);
  const int per_split = (tiles + splits - 1) / splits;
  return {(tiles + per_split - 1) / per_split, per_split, row_blocks};
}

// The partial sums and arrival counts split K needs, grown (counts zeroed) when short.
void reserve_splits(MatmulScratch& scratch, size_t partial_bytes, int row_blocks, Stream& stream) {
  if (scratch.split_partials.size() < partial_bytes) scratch.split_partials.resize(partial_bytes);
  const size_t count_bytes = sizeof(unsigned) * static_cast<size_t>(row_blocks);
  if (scratch.split_arrivals.size() < count_bytes) {
    scratch.split_arrivals.resize(count_bytes);
    stream.fill(scratch.split_arrivals.data(), 0, scratch.split_arrivals.size());
    stream.synchronize("small_gemm: clearing its arrival counts");  // (never while a pass is recorded)
  }
}

template <GgmlType T, int NT>
void launch_small_gemm(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                       int splits, MatmulScratch& scratch, Stream& stream) {
  static const bool configured = [] {  // more than the default 48 KB of shared memory
    return cudaFuncSetAttribute(small_gemm_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(shared_bytes(NT))) == cudaSuccess;
  }();
  if (!configured) cuda_fail("small_gemm: the shared memory the kernel needs is not available");
  static const int resident = blocks_per_sm(small_gemm_kernel<T, NT>, kThreads, shared_bytes(NT));
  const SplitK k = split_k(w.rows, w.cols, NT, splits, resident);
  if (k.splits > 1)
    reserve_splits(scratch, sizeof(float) * k.splits * k.row_blocks * 8 * NT * kBlockRows, k.row_blocks, stream);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const __half* x16 = nullptr;
  if constexpr (kHalfActivations<NT>) {
    scratch.activations_f16.resize(sizeof(__half) * static_cast<size_t>(n) * w.cols);
    const size_t threads = static_cast<size_t>(n) * (w.cols / 8);
    launch_dependent(activations_to_f16_kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), s, x, ldx,
                     n, w.cols, scratch.activations_f16.as<__half>());
    x16 = scratch.activations_f16.as<__half>();
  }
  launch_dependent_shared(small_gemm_kernel<T, NT>, dim3(k.row_blocks, k.splits), dim3(kThreads), shared_bytes(NT), s,
                          rows_of<T>(w), w.rows, w.cols, x, x16, ldx, n, y, ldy,
                          accumulate ? 1 : 0, k.tiles_per_split, k.splits, scratch.split_partials.as<float>(),
                          scratch.split_arrivals.as<unsigned>(), ExpertTiles{});
}

// Every tile of an expert grouping in one launch of the staged kernel: no split of K (the
// tiles fill the GPU), a z block per possible tile.
template <GgmlType T, int NT>
void launch_grouped(const ExpertWeights& w, const float* x, int ldx, int pairs, const ExpertGroups& groups,
                    int tile_rows, float* y, int ldy, MatmulScratch& scratch, Stream& stream) {
  static const bool configured = [] {
    return cudaFuncSetAttribute(small_gemm_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(shared_bytes(NT))) == cudaSuccess;
  }();
  if (!configured) cuda_fail("small_gemm: the shared memory the kernel needs is not available");
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const __half* x16 = nullptr;
  if constexpr (kHalfActivations<NT>) {
    const size_t bytes = sizeof(__half) * static_cast<size_t>(pairs) * w.cols;
    if (scratch.activations_f16.size() < bytes) cuda_fail("grouped_expert_matmul: the f16 activations' scratch is short");
    const size_t threads = static_cast<size_t>(pairs) * (w.cols / 8);
    launch_dependent(activations_to_f16_kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), s, x, ldx,
                     pairs, w.cols, scratch.activations_f16.as<__half>());
    x16 = scratch.activations_f16.as<__half>();
  }
  const int k_tiles = (w.cols + kTileCols - 1) / kTileCols;
  const dim3 grid((w.rows + kBlockRows - 1) / kBlockRows, 1, most_expert_tiles(pairs, w.experts, tile_rows));
  const ExpertTiles tiles{reinterpret_cast<const int4*>(groups.tiles), groups.tile_count, w.expert_bytes()};
  launch_dependent_shared(small_gemm_kernel<T, NT>, grid, dim3(kThreads), shared_bytes(NT), s, rows_of<T>(w.expert(0)),
                          w.rows, w.cols, x, x16, ldx, pairs, y, ldy, 0, k_tiles, 1, scratch.split_partials.as<float>(),
                          scratch.split_arrivals.as<unsigned>(), tiles);
}

// The streamed kernel's shared memory: enough for a forced split of up to 11 super-blocks at 16 rows.
constexpr size_t kStreamMostShared = 96 << 10;
constexpr int stream_longest_fitting(int token_tiles) {
  return static_cast<int>((kStreamMostShared / (sizeof(__half) * 8 * token_tiles) - kStreamPad) / kStreamCols);
}

// Whether the streamed kernel takes this matmul: a K-quant, up to kStreamLargestBatch rows,
// and the fewest splits it needs within the partial sums' budget (else the staged kernel).
bool streamed_serves(const DeviceWeight& w, int n) {
  if ((w.type != GgmlType::Q4_K && w.type != GgmlType::Q6_K) || n > kStreamLargestBatch || w.cols % kStreamCols != 0)
    return false;
  const int blocks = w.cols / kStreamCols;
  const int fewest = n > 8 ? 1 : (blocks + kStreamLongest - 1) / kStreamLongest;  // (the ring holds any range)
  const size_t row_blocks = (w.rows + kStreamRows - 1) / kStreamRows;
  return fewest == 1 || sizeof(float) * fewest * row_blocks * 8 * ((n + 7) / 8) * kStreamRows <= kSplitPartialBytes;
}

template <GgmlType T, int NT>
void launch_streamed(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                     int splits, MatmulScratch& scratch, Stream& stream) {
  constexpr bool kRing = kStreamRing<NT>;
  constexpr size_t kMostShared = kRing ? ring_shared_bytes(NT) : kStreamMostShared;
  static const bool configured = [] {
    return cudaFuncSetAttribute(small_gemm_streamed_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kMostShared)) == cudaSuccess;
  }();
  if (!configured) cuda_fail("small_gemm: the shared memory the streamed kernel needs is not available");
  static const int resident = blocks_per_sm(small_gemm_streamed_kernel<T, NT>, kStreamThreads,
                                            kRing ? kMostShared : stream_shared_bytes(NT, kStreamLongest));
  // (the ring holds any K range; the whole-range fill at most kStreamLongest super-blocks)
  const int longest = kRing ? 1 << 30 : splits > 0 ? stream_longest_fitting(NT) : kStreamLongest;
  // A block's start: the activations' fill (8 rows: 2 tiles, above); the ring's three stages
  // in flight before its first multiply, 4 (measured at 32 and 64 rows: a block of half the
  // gate_up's 16 super-blocks took 3.4 to 4.2 tiles' time more than half a block of all).
  const double overhead = kRing ? 4.0 : 2.0;
  const double tile_bytes = static_cast<double>(w.row_bytes()) / (w.cols / kStreamCols) * kStreamRows;
  const double partial_tiles = 2.0 * sizeof(float) * 8 * NT * kStreamRows / tile_bytes;
  const SplitK k = split_k(w.rows, w.cols, NT, splits, resident, kStreamRows, longest, kStreamCols, overhead, partial_tiles);
  if (k.splits > 1)
    reserve_splits(scratch, sizeof(float) * k.splits * k.row_blocks * 8 * NT * kStreamRows, k.row_blocks, stream);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const __half* x16 = nullptr;
  if constexpr (kRing) {
    const int blocks = w.cols / kStreamCols;
    scratch.activations_f16.resize(sizeof(__half) * static_cast<size_t>(8 * NT) * w.cols);
    const size_t threads = static_cast<size_t>(blocks) * 8 * NT * (kStreamCols / 4);
    launch_dependent(streamed_activations_kernel<T>, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), s, x,
                     ldx, n, 8 * NT, blocks, scratch.activations_f16.as<__half>());
    x16 = scratch.activations_f16.as<__half>();
  }
  launch_dependent_shared(small_gemm_streamed_kernel<T, NT>, dim3(k.row_blocks, k.splits), dim3(kStreamThreads),
                          kRing ? kMostShared : stream_shared_bytes(NT, k.tiles_per_split), s, rows_of<T>(w), w.rows,
                          w.cols, x, x16, ldx, n, y, ldy, accumulate ? 1 : 0, k.tiles_per_split, k.splits,
                          scratch.split_partials.as<float>(), scratch.split_arrivals.as<unsigned>());
}

template <GgmlType T>
void streamed(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate, int splits,
              MatmulScratch& scratch, Stream& stream) {
  if (n <= 8) return launch_streamed<T, 1>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
  if (n <= 16) return launch_streamed<T, 2>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
  if (n <= 32) return launch_streamed<T, 4>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
  launch_streamed<T, 8>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
}

}  // namespace

void grouped_expert_matmul(const ExpertWeights& w, const float* x, int ldx, int pairs, const ExpertGroups& groups,
                           int tile_rows, float* y, int ldy, MatmulScratch& scratch, Stream& stream) {
  if (pairs <= 0) return;
  if (ldx % 4 != 0) cuda_fail("grouped_expert_matmul: activation rows must be 16-byte aligned");
  if (most_expert_tiles(pairs, w.experts, tile_rows) > 65535) cuda_fail("grouped_expert_matmul: too many tiles");
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    if constexpr (!Block<T>::kPacked) {
      cuda_fail("grouped_expert_matmul: float experts take expert_matmul");
    } else {
      switch (tile_rows) {
        case 8: return launch_grouped<T, 1>(w, x, ldx, pairs, groups, tile_rows, y, ldy, scratch, stream);
        case 16: return launch_grouped<T, 2>(w, x, ldx, pairs, groups, tile_rows, y, ldy, scratch, stream);
        case 32: return launch_grouped<T, 4>(w, x, ldx, pairs, groups, tile_rows, y, ldy, scratch, stream);
        case 64: return launch_grouped<T, 8>(w, x, ldx, pairs, groups, tile_rows, y, ldy, scratch, stream);
        default: cuda_fail("grouped_expert_matmul: tiles of 8, 16, 32 or 64 rows");
      }
    }
  });
}

bool small_gemm_reads(GgmlType type) {
  bool packed = false;
  if (is_supported_weight_type(type)) dispatch_weight_type(type, [&]<GgmlType T>() { packed = Block<T>::kPacked; });
  return packed;
}

// Split K's partials stay within kSplitPartialBytes; an arrival count per row block (both
// kernels' blocks hold 128 rows).
size_t small_gemm_scratch_bytes(int widest_rows) {
  return kSplitPartialBytes + sizeof(unsigned) * static_cast<size_t>((widest_rows + kStreamRows - 1) / kStreamRows);
}

void reserve_small_gemm(MatmulScratch& scratch, int widest_rows, Stream& stream) {
  reserve_splits(scratch, kSplitPartialBytes, (widest_rows + kStreamRows - 1) / kStreamRows, stream);
}

void small_gemm(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                MatmulScratch& scratch, Stream& stream, int splits, SmallGemmKernel kernel) {
  if (n <= 0) return;
  if (n > kSmallGemmLargestBatch) cuda_fail("small_gemm: more than " + std::to_string(kSmallGemmLargestBatch) + " rows");
  if (ldx % 4 != 0) cuda_fail("small_gemm: activation rows must be 16-byte aligned");
  if (kernel == SmallGemmKernel::Auto && streamed_serves(w, n)) {
    if (w.type == GgmlType::Q4_K) return streamed<GgmlType::Q4_K>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
    return streamed<GgmlType::Q6_K>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
  }
  dispatch_weight_type(w.type, [&]<GgmlType T>() {
    if constexpr (!Block<T>::kPacked) {
      cuda_fail("small_gemm: float weights go to cuBLAS as they are");
    } else if (n <= 8) {
      launch_small_gemm<T, 1>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
    } else if (n <= 16) {
      launch_small_gemm<T, 2>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
    } else if (n <= 32) {
      launch_small_gemm<T, 4>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
    } else {
      launch_small_gemm<T, 8>(w, x, ldx, n, y, ldy, accumulate, splits, scratch, stream);
    }
  });
}

}  // namespace splash::kernels::cuda
