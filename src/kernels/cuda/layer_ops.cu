// The small kernels between the matmuls: norms, SwiGLU, embedding rows, row gathers, and the
// QKV epilogue (bias, per-head norm, RoPE, KV append) fused into one pass.
#include <cuda_runtime.h>

#include "kernels/cuda/activation_q8.cuh"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/qkv_epilogue.cuh"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {
namespace {

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

constexpr int kNormThreads = 256;

// The sum of every thread's v over a block of kNormThreads, for every thread (once a kernel:
// its shared array is not reused).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[kNormThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  return total;
}

// A thread block per row. With codes (d a multiple of 16), each thread then normalises whole
// groups of 16 and writes their int8 copy as well.
__global__ void rms_norm_kernel(const float* x, const float* __restrict__ weight, float* __restrict__ out,
                                int d, float eps, QuantizedRowsBuffer q) {
  const float* row = x + static_cast<size_t>(blockIdx.x) * d;
  float* o = out + static_cast<size_t>(blockIdx.x) * d;
  wait_for_inputs();
  allow_next_launch();  // the next matmul may start streaming its weights
  float sum = 0.0f;
  for (int i = threadIdx.x; i < d; i += kNormThreads) sum += row[i] * row[i];
  const float total = block_sum(sum);
  const float scale = rsqrtf(total / static_cast<float>(d) + eps);
  if (!q.codes) {
    for (int i = threadIdx.x; i < d; i += kNormThreads) o[i] = row[i] * scale * weight[i];
    return;
  }
  for (int g = threadIdx.x; g < d / kQ8Group; g += kNormThreads) {
    float v[16];
    const float4* r4 = reinterpret_cast<const float4*>(row + g * kQ8Group);
    const float4* w4 = reinterpret_cast<const float4*>(weight + g * kQ8Group);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 a = r4[k], b = w4[k];
      v[4 * k] = a.x * scale * b.x, v[4 * k + 1] = a.y * scale * b.y;
      v[4 * k + 2] = a.z * scale * b.z, v[4 * k + 3] = a.w * scale * b.w;
      reinterpret_cast<float4*>(o + g * kQ8Group)[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    }
    store_q8_group(v, blockIdx.x, g, d, q.codes, q.scales, q.sums);
  }
}

__global__ void silu_mul_kernel(const float* gate_up, float* __restrict__ out, int n, int ffn) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(n) * ffn) return;
  wait_for_inputs();
  allow_next_launch();
  const size_t t = index / ffn, i = index % ffn;
  const float g = gate_up[t * 2 * ffn + i], u = gate_up[t * 2 * ffn + ffn + i];
  out[index] = g / (1.0f + expf(-g)) * u;
}

// A thread per group of 16 outputs, written with their int8 copy.
__global__ void silu_mul_q8_kernel(const float* gate_up, float* __restrict__ out, int n, int ffn,
                                   QuantizedRowsBuffer q) {
  const int groups = ffn / kQ8Group;
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(n) * groups) return;
  const int t = static_cast<int>(index / groups), g = static_cast<int>(index % groups);
  wait_for_inputs();
  allow_next_launch();
  const float4* gate = reinterpret_cast<const float4*>(gate_up + static_cast<size_t>(t) * 2 * ffn + g * kQ8Group);
  const float4* up = reinterpret_cast<const float4*>(gate_up + static_cast<size_t>(t) * 2 * ffn + ffn + g * kQ8Group);
  float v[16];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float4 a = gate[k], b = up[k];
    v[4 * k] = a.x / (1.0f + expf(-a.x)) * b.x, v[4 * k + 1] = a.y / (1.0f + expf(-a.y)) * b.y;
    v[4 * k + 2] = a.z / (1.0f + expf(-a.z)) * b.z, v[4 * k + 3] = a.w / (1.0f + expf(-a.w)) * b.w;
    reinterpret_cast<float4*>(out + static_cast<size_t>(t) * ffn + g * kQ8Group)[k] =
        make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
  }
  store_q8_group(v, t, g, ffn, q.codes, q.scales, q.sums);
}

template <GgmlType T>
__global__ void embed_kernel(const uint8_t* __restrict__ table, int cols, const int32_t* ids, float* __restrict__ x) {
  using B = Block<T>;
  const int parts = cols / B::kElements * B::kParts;
  const int part = blockIdx.y * blockDim.x + threadIdx.x;
  if (part >= parts) return;
  const int block = part / B::kParts, p = part % B::kParts;
  wait_for_inputs();
  allow_next_launch();
  const uint8_t* row = table + RowLayout<T>::row_bytes(cols) * ids[blockIdx.x];
  int pa, pb;
  B::columns(p, pa, pb);
  Run a, b;
  B::decode(row + block * B::kQuantBytes, row + RowLayout<T>::quant_bytes(cols) + block * B::kHeaderBytes, p, a, b);
  float* o = x + static_cast<size_t>(blockIdx.x) * cols + block * B::kElements;
#pragma unroll
  for (int j = 0; j < 16; ++j) o[pa + j] = fmaf(a.d, a.q[j], a.m), o[pb + j] = fmaf(b.d, b.q[j], b.m);
}

// Qwen3.5's gated attention: x[t][i] *= sigmoid(gate[t][i]).
__global__ void sigmoid_gate_kernel(float* x, int ldx, const float* gate, int ldg, int n, int width) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  wait_for_inputs();
  allow_next_launch();
  if (index >= static_cast<size_t>(n) * width) return;
  const size_t t = index / width, i = index % width;
  x[t * ldx + i] *= 1.0f / (1.0f + expf(-gate[t * ldg + i]));
}

// The shared expert's rows added in: a block per row, x += sigmoid(normed . gate) * y.
__global__ void add_gated_rows_kernel(float* x, const float* y, const float* normed, const float* gate, int d) {
  const size_t row = static_cast<size_t>(blockIdx.x) * d;
  wait_for_inputs();
  allow_next_launch();
  float dot = 0.0f;
  for (int i = threadIdx.x; i < d; i += kNormThreads) dot += normed[row + i] * gate[i];
  const float scale = 1.0f / (1.0f + expf(-block_sum(dot)));
  for (int i = threadIdx.x; i < d; i += kNormThreads) x[row + i] += scale * y[row + i];
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int d, float* __restrict__ out) {
  wait_for_inputs();
  allow_next_launch();
  const float* from = x + static_cast<size_t>(rows[blockIdx.x]) * d;
  float* to = out + static_cast<size_t>(blockIdx.x) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) to[i] = from[i];
}

constexpr int kQkvWarps = 4;  // heads per thread block

// One warp per (token, head of q, k or v); each lane holds head_dim / 32 consecutive values
// (qkv_epilogue.cuh).
template <int HD, KvElement E>
__global__ void __launch_bounds__(kQkvWarps * 32)
    qkv_post_kernel(QkvPostArgs a, BatchLayout batch, KvPool pool) {
  const int lane = threadIdx.x % 32;
  const int head = blockIdx.y * kQkvWarps + threadIdx.x / 32;
  if (head >= a.n_heads + 2 * a.n_kv_heads) return;
  const int t = blockIdx.x;
  // The rotation before the wait: the double-precision sincos would otherwise sit between
  // the QKV matmul's end and the attention.
  const int pos = batch.positions[t];
  LaneRope<HD> rope;
  if (head < a.n_heads + a.n_kv_heads) rope.at(a, pos, lane);
  wait_for_inputs();
  allow_next_launch();
  HeadLane<HD> v;
  qkv_epilogue<HD>(a, t, head, lane, rope, v);
  if (head >= a.n_heads) return append_kv<HD, E>(a, batch, pool, t, pos, head, lane, v);
  float* row = a.qkv + static_cast<size_t>(t) * a.ld + static_cast<size_t>(head) * HD + lane * (HD / 32);
#pragma unroll
  for (int j = 0; j < HD / 32; ++j) row[j] = v[j];
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* out, int n, int d, float eps, Stream& stream,
              const QuantizedRowsBuffer* quantized) {
  if (n == 0) return;
  if (quantized && (d % kQ8Group != 0 || n > kFusedLargestBatch))
    cuda_fail("rms_norm: an int8 copy needs at most kFusedLargestBatch rows whose width is a multiple of 16");
  launch_dependent(rms_norm_kernel, dim3(n), dim3(kNormThreads), raw(stream), x, weight, out, d, eps,
                   quantized ? *quantized : QuantizedRowsBuffer{});
}

void silu_mul(const float* gate_up, float* out, int n, int ffn, Stream& stream, const QuantizedRowsBuffer* quantized) {
  const size_t elements = static_cast<size_t>(n) * ffn;
  if (elements == 0) return;
  if (quantized) {
    if (ffn % kQ8Group != 0) cuda_fail("silu_mul: an int8 copy needs rows whose width is a multiple of 16");
    const size_t threads = elements / kQ8Group;
    launch_dependent(silu_mul_q8_kernel, dim3(static_cast<unsigned>((threads + 127) / 128)), dim3(128), raw(stream),
                     gate_up, out, n, ffn, *quantized);
    return;
  }
  launch_dependent(silu_mul_kernel, dim3(static_cast<unsigned>((elements + 255) / 256)), dim3(256), raw(stream), gate_up,
                   out, n, ffn);
}

void embed(const DeviceWeight& table, const int32_t* ids, int n, float* x, Stream& stream) {
  if (n == 0) return;
  dispatch_weight_type(table.type, [&]<GgmlType T>() {
    const int parts = table.cols / Block<T>::kElements * Block<T>::kParts;
    const dim3 grid(n, (parts + 127) / 128);
    launch_dependent(embed_kernel<T>, grid, dim3(128), raw(stream), table.data, table.cols, ids, x);
  });
}

void sigmoid_gate(float* x, int ldx, const float* gate, int ldg, int n, int width, Stream& stream) {
  const size_t elements = static_cast<size_t>(n) * width;
  if (elements == 0) return;
  launch_dependent(sigmoid_gate_kernel, dim3(static_cast<unsigned>((elements + 255) / 256)), dim3(256), raw(stream), x,
                   ldx, gate, ldg, n, width);
}

void add_gated_rows(float* x, const float* y, const float* normed, const float* gate, int n, int d, Stream& stream) {
  if (n == 0) return;
  launch_dependent(add_gated_rows_kernel, dim3(n), dim3(kNormThreads), raw(stream), x, y, normed, gate, d);
}

void gather_rows(const float* x, const int32_t* rows, int n, int d, float* out, Stream& stream) {
  if (n == 0) return;
  launch_dependent(gather_rows_kernel, dim3(n), dim3(256), raw(stream), x, rows, d, out);
}

bool rope_dims_supported(const QkvPostArgs& args) {
  // A lane holds head_dim / 32 values: a NEOX pair's partner must sit a power of two lanes away.
  const int rotated = args.rotated_dims(args.head_dim), per_lane = args.head_dim / 32;
  if (rotated <= 0 || rotated > args.head_dim || rotated % 2 != 0) return false;
  if (rotated == args.head_dim) return true;
  if (!args.neox_rope || (rotated / 2) % per_lane != 0) return false;
  const int away = rotated / 2 / per_lane;
  return (away & (away - 1)) == 0;
}

size_t KvPool::half_block_elements() const {
  return static_cast<size_t>(n_kv_heads) * kKvBlockTokens * head_dim;
}
size_t KvPool::bytes() const { return static_cast<size_t>(n_layers) * blocks * block_elements() * element_bytes(); }
size_t KvPool::scale_bytes() const {
  return element == KvElement::I8 ? static_cast<size_t>(n_layers) * blocks * 2 * n_kv_heads * kKvBlockTokens * sizeof(float)
                                  : 0;
}

size_t kv_pool_bytes_per_block(KvElement element, int n_layers, int n_kv_heads, int head_dim) {
  KvPool pool;
  pool.element = element;
  pool.blocks = 1, pool.n_layers = n_layers, pool.n_kv_heads = n_kv_heads, pool.head_dim = head_dim;
  return pool.bytes() + pool.scale_bytes();
}

void copy_kv_block(const KvPool& pool, int from, int to, Stream& stream) {
  // One layer's block (keys then values, every kv head) is contiguous in the pool.
  const size_t block_bytes = pool.block_elements() * pool.element_bytes();
  const size_t scale_floats = 2 * static_cast<size_t>(pool.n_kv_heads) * kKvBlockTokens;
  for (int layer = 0; layer < pool.n_layers; ++layer) {
    const size_t base = static_cast<size_t>(layer) * pool.blocks;
    stream.copy_on_device(pool.data + (base + to) * block_bytes, pool.data + (base + from) * block_bytes, block_bytes);
    if (pool.element == KvElement::I8)
      stream.copy_on_device(pool.scales + (base + to) * scale_floats, pool.scales + (base + from) * scale_floats,
                            scale_floats * sizeof(float));
  }
}

void qkv_post(const QkvPostArgs& args, const BatchLayout& batch, const KvPool& pool, Stream& stream) {
  if (batch.n_tokens == 0) return;
  if (args.ld % 4 != 0) cuda_fail("qkv_post: rows must be 16-byte aligned");
  if (!rope_dims_supported(args)) cuda_fail("qkv_post: partial RoPE of " + std::to_string(args.rope_dims) +
                                            " dims of a " + std::to_string(args.head_dim) + "-dim head has no kernel");
  const int total_heads = args.n_heads + 2 * args.n_kv_heads;
  const dim3 grid(batch.n_tokens, (total_heads + kQkvWarps - 1) / kQkvWarps);
  cudaStream_t s = raw(stream);
  dispatch_kv_element(pool.element, [&]<KvElement E>() {
    switch (args.head_dim) {
      case 64: return launch_dependent(qkv_post_kernel<64, E>, grid, dim3(kQkvWarps * 32), s, args, batch, pool);
      case 128: return launch_dependent(qkv_post_kernel<128, E>, grid, dim3(kQkvWarps * 32), s, args, batch, pool);
      case 256: return launch_dependent(qkv_post_kernel<256, E>, grid, dim3(kQkvWarps * 32), s, args, batch, pool);
      default: cuda_fail("qkv_post: head size " + std::to_string(args.head_dim) + " has no CUDA kernel (64, 128, 256)");
    }
  });
}

}  // namespace splash::kernels::cuda
