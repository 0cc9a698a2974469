#pragma once
// The mixture-of-experts FFN's kernels (experts.cu): the router's float logits, the top-k
// choice of experts, the experts' matmuls for each (token, expert) pair the choice makes,
// and the weighted sum of their outputs into the residual stream. All on the device (a
// recorded pass cannot wait for the host): a few pairs run as they come, one GEMV each;
// more are grouped by expert (group_pairs) and every expert's rows go through one launch of
// the small GEMM (grouped_expert_matmul), so each chosen expert is read once a pass.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {

// A stack of `experts` matrices [experts][rows][cols] of one type in the GPU layout (the
// file's tensor repacked as one matrix of experts x rows rows: expert e's rows start at
// e x rows).
struct ExpertWeights {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int experts = 0, rows = 0, cols = 0;
  size_t expert_bytes() const { return weight_row_bytes(type, cols) * rows; }
  DeviceWeight expert(int e) const { return {type, data + expert_bytes() * e, rows, cols}; }
};

constexpr int kMostExperts = 1024, kMostExpertsUsed = 32;

// For each of n rows of `experts` logits: the `used` largest (a NaN counts as -infinity;
// equal ones by the lower expert), their softmax renormalised over the chosen (weights sum
// to 1). ids[t * used + k] and weights[t * used + k], best first. The routing alone, on
// logits from elsewhere: route_tokens' second half, the tests' way to reach it.
void route_experts(const float* logits, int n, int experts, int used, int32_t* ids, float* weights, Stream& stream);

// Where route_tokens leaves each token's logits, and a counter per token its thread blocks
// meet at (zeroed once when allocated; every launch leaves them zero again), for up to
// `tokens` tokens.
struct RoutingScratch {
  float* logits = nullptr;       // [tokens][experts]
  unsigned* arrivals = nullptr;  // [tokens]
  int tokens = 0;
};
// The router and the routing in one launch: logits[t][e] = router[e] . x[t] in float
// (router: F32, F16 or BF16 [experts][cols]), then route_experts on each token's logits,
// by the last of the token's thread blocks to finish its logits. A warp reads a router row in
// 16-byte loads, so cols must be a multiple of 32 and each x row (x, ldx floats apart) 16-byte
// aligned: refused otherwise.
void route_tokens(const DeviceWeight& router, const float* x, int ldx, int n, int used, const RoutingScratch& scratch,
                  int32_t* ids, float* weights, Stream& stream);

// y[p] = w.expert(ids[p]) . x[p / x_divisor] for each pair p < pairs (x_divisor = `used`:
// the pairs of one token read its row; 1: pair p reads row p, e.g. the grouped rows with
// ExpertGroups::expert_of_row as the ids). Integer types read x's int8
// copy `xq` (quantize_rows; its rows are x's); float types read x itself. The ids must be
// experts of w (routing's are); the kernel waits for the kernel that wrote them before it
// reads them (nothing of the expert's can be loaded early).
void expert_matmul(const ExpertWeights& w, const float* x, int ldx, const QuantizedRows* xq, int x_divisor,
                   const int32_t* ids, int pairs, float* y, int ldy, Stream& stream);

// The pairs sorted by expert, on the device: expert e's rows are [start[e], start[e + 1]) of
// the sorted order, row r holds a pair of token token_of_row[r] and expert expert_of_row[r],
// pair p lands in row place[p]; the rows cut into tiles of at most `tile_rows` rows of one expert, each
// {expert, first row, rows, 0}, tile_count of them (the rest of `tiles` unused). The order
// of one expert's rows varies from run to run; nothing computed from them does (each row's
// sums are its own).
struct ExpertGroups {
  int32_t* start = nullptr;         // [experts + 1]
  int32_t* token_of_row = nullptr;  // [pairs]
  int32_t* expert_of_row = nullptr;  // [pairs]
  int32_t* place = nullptr;         // [pairs]
  int32_t* tiles = nullptr;         // [most_expert_tiles][4]
  int32_t* tile_count = nullptr;    // [1]
};
// Tiles any grouping of `pairs` pairs over `experts` experts can need.
inline int most_expert_tiles(int pairs, int experts, int tile_rows) { return pairs / tile_rows + experts; }
// Bytes of an ExpertGroups for up to `pairs` pairs (expert_groups_in lays them out).
size_t expert_groups_bytes(int pairs, int experts, int tile_rows);
ExpertGroups expert_groups_in(void* buffer, int pairs, int experts, int tile_rows);
// Sorts `pairs` pairs (ids as route_experts wrote them, `used` a token) by expert.
void group_pairs(const int32_t* ids, int pairs, int experts, int used, int tile_rows, const ExpertGroups& groups,
                 Stream& stream);
// The rows of a tile the grouped matmul takes: 8, 16, 32 or 64 (small_gemm.cu's token tiles).
int expert_tile_rows(int pairs, int experts);

// y[r] = w.expert(expert of row r) . x[r] for the `pairs` sorted rows, every tile of
// `groups` in one launch of the small GEMM's staged kernel (small_gemm.cu; integer weight
// types; x float rows, ldx a multiple of 4). `tile_rows` as groups were made with.
void grouped_expert_matmul(const ExpertWeights& w, const float* x, int ldx, int pairs, const ExpertGroups& groups,
                           int tile_rows, float* y, int ldy, MatmulScratch& scratch, Stream& stream);

// x[t] += sum over k of weights[t * used + k] * y[row of pair t * used + k], the pairs added
// in the order of their expert ids (as the CPU path adds them; equal ids, which routing never
// makes, in pair order), each step one fused multiply-add; `y_rows` maps a pair to its row
// of y (null: row p).
void combine_experts(const float* y, int ldy, const int32_t* y_rows, const int32_t* ids, const float* weights, int n,
                     int used, int d, float* x, Stream& stream);

}  // namespace splash::kernels::cuda
