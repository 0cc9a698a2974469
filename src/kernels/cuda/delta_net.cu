// Gated DeltaNet's two kernels (delta_net.h): the causal conv, a thread per (sequence,
// channel) walking the sequence's tokens; then the delta rule, a thread block per (sequence,
// value head) holding the head's fp32 state in registers for all of the sequence's tokens.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/delta_net.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/qkv_epilogue.cuh"

namespace splash::kernels::cuda {
namespace {

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
// ggml's softplus: exactly x once exp(x) would dwarf the 1.
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

constexpr int kConvThreads = 128;

// Channel c of one sequence: its last TAPS - 1 inputs come from the slot's state (zeros at
// position 0), each token's conv output replaces the token's value (SiLU applied), and the
// last TAPS - 1 inputs go back into the state.
template <int TAPS>
__global__ void __launch_bounds__(kConvThreads) delta_conv_kernel(DeltaNetDims d, const float* conv, DeltaNetPass p) {
  constexpr int kKept = TAPS - 1;
  const int c = blockIdx.x * kConvThreads + threadIdx.x;
  const int32_t* slice = p.slices + static_cast<size_t>(blockIdx.y) * kDeltaNetSliceInts;
  wait_for_inputs();
  allow_next_launch();
  if (c >= d.conv_channels()) return;
  const int first = slice[0], tokens = slice[1], slot = slice[2];
  const bool fresh = slice[3] == 0;
  float* history = p.states + static_cast<size_t>(slot) * p.slot_stride + d.rule_floats() + static_cast<size_t>(c) * kKept;
  float w[TAPS], window[TAPS];
#pragma unroll
  for (int i = 0; i < TAPS; ++i) w[i] = conv[static_cast<size_t>(c) * TAPS + i];
#pragma unroll
  for (int i = 0; i < kKept; ++i) window[i] = fresh ? 0.0f : history[i];
  for (int t = 0; t < tokens; ++t) {
    float* x = p.mixed + static_cast<size_t>(first + t) * p.mixed_stride + c;
    window[kKept] = *x;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < TAPS; ++i) acc += w[i] * window[i];
#pragma unroll
    for (int i = 0; i < kKept; ++i) window[i] = window[i + 1];
    *x = silu(acc);
  }
#pragma unroll
  for (int i = 0; i < kKept; ++i) history[i] = window[i];
}

constexpr int kRuleThreadsPerRow = 4;   // a state row (one value dim, HK key dims) over 4 threads
constexpr int kMostRuleThreads = 512;   // head_v up to 128

// Value head blockIdx.x of sequence blockIdx.y. Thread (row j, part p) holds S[j][p + 4m]
// for m < HK / 4 (interleaved, so that the four threads of a row read q and k from four
// banks); per token: q and k of the head's key head L2-normalised, the state decayed, the
// delta rule's correction along k, the readout along q, then the RMSNorm over the head's
// head_v outputs gated by SiLU(z).
template <int HK>
__global__ void __launch_bounds__(kMostRuleThreads) delta_rule_kernel(DeltaNetDims d, DeltaNetLayerWeights w,
                                                                      DeltaNetPass p) {
  constexpr int kPer = HK / kRuleThreadsPerRow;
  const int head = blockIdx.x;
  const int32_t* slice = p.slices + static_cast<size_t>(blockIdx.y) * kDeltaNetSliceInts;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  const int row = tid / kRuleThreadsPerRow, part = tid % kRuleThreadsPerRow;
  __shared__ float q[HK], k[HK];
  __shared__ float coefficients[4];  // q's and k's 1 / norm, beta, decay
  __shared__ float partial[kMostRuleThreads / 32];
  wait_for_inputs();
  allow_next_launch();
  const int first = slice[0], tokens = slice[1], slot = slice[2];
  const bool fresh = slice[3] == 0;
  const int key_head = d.tiled_key_heads ? head % d.k_heads : head / (d.v_heads / d.k_heads);
  const int z_at = d.conv_channels(), beta_at = z_at + d.value_width(), alpha_at = beta_at + d.v_heads;
  float* state = p.states + static_cast<size_t>(slot) * p.slot_stride +
                 (static_cast<size_t>(head) * d.head_v + row) * HK + part;
  float s[kPer];
#pragma unroll
  for (int m = 0; m < kPer; ++m) s[m] = fresh ? 0.0f : state[kRuleThreadsPerRow * m];
  const float scale = rsqrtf(static_cast<float>(HK));
  const float a = w.a[head], dt_bias = w.dt_bias[head], norm = w.norm[row];
  for (int t = 0; t < tokens; ++t) {
    const float* mixed = p.mixed + static_cast<size_t>(first + t) * p.mixed_stride;
    for (int i = tid; i < HK; i += blockDim.x) {
      q[i] = mixed[key_head * HK + i];
      k[i] = mixed[d.key_width() + key_head * HK + i];
    }
    __syncthreads();
    if (warp == 0) {
      float qq = 0.0f, kk = 0.0f;
      for (int i = lane; i < HK; i += 32) qq += q[i] * q[i], kk += k[i] * k[i];
      qq = warp_sum(qq), kk = warp_sum(kk);
      if (lane == 0) {
        coefficients[0] = 1.0f / sqrtf(qq + w.eps);
        coefficients[1] = 1.0f / sqrtf(kk + w.eps);
        coefficients[2] = sigmoid(mixed[beta_at + head]);
        coefficients[3] = expf(a * softplus(mixed[alpha_at + head] + dt_bias));
      }
    }
    __syncthreads();
    const float q_scale = coefficients[0], k_scale = coefficients[1], beta = coefficients[2], decay = coefficients[3];
    float predicted = 0.0f;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      s[m] *= decay;
      predicted += s[m] * (k[part + kRuleThreadsPerRow * m] * k_scale);
    }
    predicted += __shfl_xor_sync(0xFFFFFFFFu, predicted, 1);
    predicted += __shfl_xor_sync(0xFFFFFFFFu, predicted, 2);
    const float delta = (mixed[2 * d.key_width() + head * d.head_v + row] - predicted) * beta;
    float read = 0.0f;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      s[m] += delta * (k[part + kRuleThreadsPerRow * m] * k_scale);
      read += s[m] * (q[part + kRuleThreadsPerRow * m] * q_scale);
    }
    read += __shfl_xor_sync(0xFFFFFFFFu, read, 1);
    read += __shfl_xor_sync(0xFFFFFFFFu, read, 2);
    const float o = read * scale;
    const float square = warp_sum(part == 0 ? o * o : 0.0f);
    if (lane == 0) partial[warp] = square;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < warps; ++i) total += partial[i];
    if (part == 0) {
      const float z = mixed[z_at + head * d.head_v + row];
      const float rms = 1.0f / sqrtf(total / static_cast<float>(d.head_v) + w.eps);
      p.out[static_cast<size_t>(first + t) * p.out_stride + head * d.head_v + row] = o * rms * norm * silu(z);
    }
    __syncthreads();  // (q, k and the partial sums are the next token's)
  }
#pragma unroll
  for (int m = 0; m < kPer; ++m) state[kRuleThreadsPerRow * m] = s[m];
}

}  // namespace

bool delta_net_supported(const DeltaNetDims& d) {
  return (d.head_k == 64 || d.head_k == 128 || d.head_k == 256) && d.head_v > 0 &&
         d.head_v * kRuleThreadsPerRow <= kMostRuleThreads && d.head_v % 8 == 0 && d.conv_kernel >= 2 &&
         d.conv_kernel <= 8 && d.k_heads > 0 && d.v_heads % d.k_heads == 0;
}

void gated_delta_net(const DeltaNetDims& d, const DeltaNetLayerWeights& w, const DeltaNetPass& p, Stream& stream) {
  if (p.n_slices == 0) return;
  if (!delta_net_supported(d))
    cuda_fail("gated_delta_net: key heads of " + std::to_string(d.head_k) + ", value heads of " +
              std::to_string(d.head_v) + " and a conv of " + std::to_string(d.conv_kernel) + " taps have no CUDA kernel");
  cudaStream_t s = raw(stream);
  const dim3 conv_grid((d.conv_channels() + kConvThreads - 1) / kConvThreads, p.n_slices);
  auto conv = [&]<int TAPS>() { launch_dependent(delta_conv_kernel<TAPS>, conv_grid, dim3(kConvThreads), s, d, w.conv, p); };
  switch (d.conv_kernel) {
    case 2: conv.template operator()<2>(); break;
    case 3: conv.template operator()<3>(); break;
    case 4: conv.template operator()<4>(); break;
    case 5: conv.template operator()<5>(); break;
    case 6: conv.template operator()<6>(); break;
    case 7: conv.template operator()<7>(); break;
    default: conv.template operator()<8>(); break;
  }
  const dim3 rule_grid(d.v_heads, p.n_slices), rule_block(d.head_v * kRuleThreadsPerRow);
  switch (d.head_k) {
    case 64: launch_dependent(delta_rule_kernel<64>, rule_grid, rule_block, s, d, w, p); break;
    case 128: launch_dependent(delta_rule_kernel<128>, rule_grid, rule_block, s, d, w, p); break;
    default: launch_dependent(delta_rule_kernel<256>, rule_grid, rule_block, s, d, w, p); break;
  }
}

}  // namespace splash::kernels::cuda
