#pragma once
// The mixture-of-experts FFN's kernels (experts.cu): the router's float logits, the top-k
// choice of experts, the experts' matmuls for each (token, expert) pair the choice makes,
// and the weighted sum of their outputs into the residual stream. A decode pass runs the
// pairs as they come, all on the device (a recorded pass cannot wait for the host); a
// prompt pass groups them by expert on the host and runs each expert's rows through
// matmul() (ops.h) as one batch.
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

// logits[t][e] = router[e] . x[t] in float (router: F32, F16 or BF16 [experts][cols]), for t < n.
void router_logits(const DeviceWeight& router, const float* x, int ldx, int n, float* logits, Stream& stream);

// For each of n rows of `experts` logits: the `used` largest (a NaN counts as -infinity;
// equal ones by the lower expert), their softmax renormalised over the chosen (weights sum
// to 1). ids[t * used + k] and weights[t * used + k], best first. experts <= 1024, used <= 32.
void route_experts(const float* logits, int n, int experts, int used, int32_t* ids, float* weights, Stream& stream);

// y[p] = w.expert(ids[p]) . x[p / x_divisor] for each pair p < pairs (x_divisor = `used`:
// the pairs of one token read its row; 1: pair p reads row p). Integer types read x's int8
// copy `xq` (quantize_rows; its rows are x's); float types read x itself.
void expert_matmul(const ExpertWeights& w, const float* x, int ldx, const QuantizedRows* xq, int x_divisor,
                   const int32_t* ids, int pairs, float* y, int ldy, Stream& stream);

// x[t] += sum over k of weights[t * used + k] * y[row of pair t * used + k], the pairs added
// in the order of their expert ids (as the CPU path adds them); `y_rows` maps a pair to its
// row of y (null: row p).
void combine_experts(const float* y, int ldy, const int32_t* y_rows, const int32_t* ids, const float* weights, int n,
                     int used, int d, float* x, Stream& stream);

}  // namespace splash::kernels::cuda
