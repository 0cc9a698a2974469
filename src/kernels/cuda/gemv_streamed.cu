// The streamed batch-1 GEMV (gemv_streamed.h). One thread block per multiprocessor, each
// over a contiguous range of rows: a producer warp copies the range stage by stage (a few
// whole rows, one bulk copy each) into a ring of shared memory, signalling an mbarrier per
// stage; eight consumer warps first make the int8 activations in shared memory (copied, or
// computed from the row the kernel before wrote: RMSNorm, SwiGLU), then decode each stage
// against them and free the stage for the next copy.
#include "kernels/cuda/gemv_streamed.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/activation_q8.cuh"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/quant_blocks.cuh"

namespace splash::kernels::cuda {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
constexpr int kMaxDepth = 8;                         // ring stages
// Shared memory a block takes: two fit on a multiprocessor (228 KB), so the next matmul's
// blocks can start filling their rings beside this one's last stages.
constexpr size_t kSharedBytes = 100 * 1024;
constexpr size_t kBarrierBytes = 2 * kMaxDepth * sizeof(uint64_t);
constexpr size_t kActivationOffset = 256;  // after the barriers and the partial sums
constexpr int kConsumerBarrier = 1;        // named barrier of the consumer warps (0 is __syncthreads)
constexpr int kConsumerThreads = kConsumerWarps * 32;

// --- mbarriers and bulk copies (PTX) ----------------------------------------------------
__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
// The barriers' initialization visible to the bulk-copy unit.
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}
// Arrives and announces `bytes` that bulk copies will complete on this phase.
__device__ __forceinline__ void barrier_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}
// Until the barrier's phase of this parity has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      "  .reg .pred complete;\n"
      "retry:\n"
      "  mbarrier.try_wait.parity.shared::cta.b64 complete, [%0], %1;\n"
      "  @!complete bra retry;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy_to_shared(void* to, const void* from, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(to)),
               "l"(from), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync %0, %1;" ::"n"(kConsumerBarrier), "n"(kConsumerThreads) : "memory");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// The consumers' prologue: the block's int8 activations (codes, per group of 16 a scale and
// the scaled code sum) in shared memory. RMSNorm and SwiGLU compute each value with
// rms_norm's and silu_mul's expressions in their order (256 threads, the same reduction), so
// the codes are the bits those kernels would have written.
template <StreamedSource S>
__device__ __forceinline__ void make_activations(const StreamedInput& in, int cols, int8_t* codes, float* scales,
                                                 float* sums, float* reduction) {
  const int groups = cols / kQ8Group, thread = threadIdx.x;
  if constexpr (S == StreamedSource::Quantized) {
    for (int g = thread; g < groups; g += kConsumerThreads) {
      reinterpret_cast<uint4*>(codes)[g] = __ldg(reinterpret_cast<const uint4*>(in.quantized.codes) + g);
      scales[g] = __ldg(in.quantized.scales + g);
      sums[g] = __ldg(in.quantized.sums + g);
    }
    return;
  } else {
    float scale = 1.0f;
    if constexpr (S == StreamedSource::RmsNorm) {
      float sum = 0.0f;
      for (int i = thread; i < cols; i += kConsumerThreads) sum += in.x[i] * in.x[i];
      sum = warp_sum(sum);
      if (thread % 32 == 0) reduction[thread / 32] = sum;
      consumers_sync();
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) total += reduction[w];
      scale = rsqrtf(total / static_cast<float>(cols) + in.eps);
    }
    for (int g = thread; g < groups; g += kConsumerThreads) {
      float v[16];
      const float4* a4 = reinterpret_cast<const float4*>(in.x + g * kQ8Group);
      [[maybe_unused]] const float4* b4 = reinterpret_cast<const float4*>(
          S == StreamedSource::RmsNorm ? in.norm_weight + g * kQ8Group : in.x + cols + g * kQ8Group);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 a = a4[k], b = b4[k];
        if constexpr (S == StreamedSource::RmsNorm) {
          v[4 * k] = a.x * scale * b.x, v[4 * k + 1] = a.y * scale * b.y;
          v[4 * k + 2] = a.z * scale * b.z, v[4 * k + 3] = a.w * scale * b.w;
        } else {
          v[4 * k] = silu_times(a.x, b.x), v[4 * k + 1] = silu_times(a.y, b.y);
          v[4 * k + 2] = silu_times(a.z, b.z), v[4 * k + 3] = silu_times(a.w, b.w);
        }
      }
      const Q8Group q = quantize_q8_group(v);
      reinterpret_cast<uint4*>(codes)[g] = q.codes;
      scales[g] = q.scale;
      sums[g] = q.sum;
    }
  }
}

// How a matrix streams: `stage_rows` whole rows a stage (8, 4, 2 or 1: 8 / stage_rows
// consumer warps share a row), `depth` stages in the ring.
struct Plan {
  int stage_rows = 0, depth = 0;
  size_t stage_bytes = 0, ring_offset = 0, shared = 0;
};

Plan plan_for(const DeviceWeight& w) {
  Plan plan;
  const size_t row_bytes = w.row_bytes();
  plan.ring_offset = (kActivationOffset + static_cast<size_t>(w.cols) * 3 / 2 + 127) / 128 * 128;  // codes, scales, sums
  if (plan.ring_offset >= kSharedBytes) return {};
  const size_t room = kSharedBytes - plan.ring_offset;
  // Rather more stages of fewer rows (in flight as one block streams) than fewer long ones.
  for (const int rows : {8, 4, 2, 1}) {
    const int depth = static_cast<int>(std::min<size_t>(kMaxDepth, room / (rows * row_bytes)));
    if (depth >= 4 || (rows == 1 && depth >= 2)) {
      plan.stage_rows = rows, plan.depth = depth, plan.stage_bytes = rows * row_bytes;
      plan.shared = plan.ring_offset + depth * plan.stage_bytes;
      return plan;
    }
  }
  return {};
}

template <GgmlType T, StreamedSource S>
__global__ void __launch_bounds__(kThreads)
    gemv_streamed_kernel(Rows<T> w, int rows, int cols, StreamedInput in, float* __restrict__ y, int accumulate,
                         int stage_rows, int depth, uint32_t stage_bytes, uint32_t ring_offset) {
  using B = Block<T>;
  extern __shared__ __align__(128) uint8_t shared[];
  uint64_t* full = reinterpret_cast<uint64_t*>(shared);  // a stage's bytes have landed
  uint64_t* empty = full + kMaxDepth;                     // its consumers are done with it
  float* partials = reinterpret_cast<float*>(shared + kBarrierBytes);  // [2][kConsumerWarps]
  const int groups = cols / kQ8Group;
  int8_t* x_codes = reinterpret_cast<int8_t*>(shared + kActivationOffset);
  float* x_scales = reinterpret_cast<float*>(x_codes + cols);
  float* x_sums = x_scales + groups;
  uint8_t* ring = shared + ring_offset;

  const int first_row = static_cast<int>(static_cast<long long>(rows) * blockIdx.x / gridDim.x);
  const int end_row = static_cast<int>(static_cast<long long>(rows) * (blockIdx.x + 1) / gridDim.x);
  const int stages = (end_row - first_row + stage_rows - 1) / stage_rows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < depth; ++s) barrier_init(&full[s], 1), barrier_init(&empty[s], 1);
    fence_barrier_init();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // the producer: weights only, so it never waits for the kernel before
    if (lane == 0) {
      for (int k = 0; k < stages; ++k) {
        const int slot = k % depth, row = first_row + k * stage_rows;
        if (k >= depth) barrier_wait(&empty[slot], (k / depth - 1) & 1);
        const uint32_t bytes = static_cast<uint32_t>(min(stage_rows, end_row - row) * w.row_bytes);
        barrier_arrive_expect(&full[slot], bytes);
        bulk_copy_to_shared(ring + static_cast<size_t>(slot) * stage_bytes, w.data + w.row_bytes * row, bytes, &full[slot]);
      }
    }
    allow_next_launch();  // the last stages are on their way: the next kernel may start filling
    return;
  }

  // Consumers: the activations, from what the kernel before wrote.
  wait_for_inputs();
  allow_next_launch();
  make_activations<S>(in, cols, x_codes, x_scales, x_sums, partials);
  consumers_sync();

  const int warps_per_row = kConsumerWarps / stage_rows;
  const int stage_row = warp / warps_per_row, share = warp % warps_per_row;
  const int parts = cols / B::kElements * B::kParts;
  for (int k = 0; k < stages; ++k) {
    const int slot = k % depth, row = first_row + k * stage_rows + stage_row;
    barrier_wait(&full[slot], (k / depth) & 1);
    float acc = 0.0f;
    if (row < end_row) {
      const uint8_t* weights = ring + static_cast<size_t>(slot) * stage_bytes + w.row_bytes * stage_row;
#pragma unroll 4
      for (int part = lane + 32 * share; part < parts; part += 32 * warps_per_row) {
        const int block = part / B::kParts, p = part % B::kParts;
        const auto raw = B::template load<true>(weights + block * B::kQuantBytes,
                                                weights + w.quant_bytes + block * B::kHeaderBytes, p);
        CodeRun a, b;
        B::codes(raw, p, a, b);
        int pa, pb;
        B::columns(p, pa, pb);
        const int ca = block * B::kElements + pa, cb = block * B::kElements + pb;
        const uint4 xa = *reinterpret_cast<const uint4*>(x_codes + ca);
        const uint4 xb = *reinterpret_cast<const uint4*>(x_codes + cb);
        acc += run_dp4a<B>(a, xa, x_scales[ca / kQ8Group], x_sums[ca / kQ8Group]) +
               run_dp4a<B>(b, xb, x_scales[cb / kQ8Group], x_sums[cb / kQ8Group]);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, offset);
    float* sums = partials + (k & 1) * kConsumerWarps;  // two sets: a stage's are read while the next's are written
    if (lane == 0) sums[warp] = acc;
    consumers_sync();  // every warp is done with the stage and its partial sum is in
    if (warp == 0 && lane == 0) barrier_arrive(&empty[slot]);
    if (share == 0 && lane == 0 && row < end_row) {
      float total = 0.0f;
      for (int j = 0; j < warps_per_row; ++j) total += sums[warp + j];  // in a fixed order: deterministic
      y[row] = accumulate ? y[row] + total : total;
    }
  }
}

template <GgmlType T, StreamedSource S>
constexpr auto kernel_of = gemv_streamed_kernel<T, S>;

// Every instance may take more than the default 48 KB of shared memory; set once for all
// of them, before any launch (a launch may be recorded into a graph).
bool configure_kernels() {
  static const bool configured = [] {
    bool ok = true;
    for (const auto kernel : {kernel_of<GgmlType::Q4_K, StreamedSource::Quantized>,
                              kernel_of<GgmlType::Q4_K, StreamedSource::RmsNorm>,
                              kernel_of<GgmlType::Q4_K, StreamedSource::SiluMul>})
      ok = ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)) ==
                     cudaSuccess;
    for (const auto kernel : {kernel_of<GgmlType::Q6_K, StreamedSource::Quantized>,
                              kernel_of<GgmlType::Q6_K, StreamedSource::RmsNorm>,
                              kernel_of<GgmlType::Q6_K, StreamedSource::SiluMul>})
      ok = ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)) ==
                     cudaSuccess;
    return ok;
  }();
  return configured;
}

template <GgmlType T, StreamedSource S>
void launch(const DeviceWeight& w, const Plan& plan, const StreamedInput& in, float* y, int accumulate, cudaStream_t s) {
  const int grid = std::min(multiprocessor_count(), w.rows);
  launch_dependent_shared(kernel_of<T, S>, dim3(grid), dim3(kThreads), plan.shared, s, rows_of<T>(w), w.rows, w.cols, in,
                          y, accumulate, plan.stage_rows, plan.depth, static_cast<uint32_t>(plan.stage_bytes),
                          static_cast<uint32_t>(plan.ring_offset));
}

template <GgmlType T>
void launch_source(const DeviceWeight& w, const Plan& plan, const StreamedInput& in, float* y, int accumulate,
                   cudaStream_t s) {
  switch (in.source) {
    case StreamedSource::Quantized: return launch<T, StreamedSource::Quantized>(w, plan, in, y, accumulate, s);
    case StreamedSource::RmsNorm: return launch<T, StreamedSource::RmsNorm>(w, plan, in, y, accumulate, s);
    case StreamedSource::SiluMul: return launch<T, StreamedSource::SiluMul>(w, plan, in, y, accumulate, s);
  }
}

}  // namespace

bool gemv_streamed_serves(const DeviceWeight& w) {
  if (w.type != GgmlType::Q4_K && w.type != GgmlType::Q6_K) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.rows <= 0) return false;
  return plan_for(w).depth > 0 && configure_kernels();
}

void gemv_streamed(const DeviceWeight& w, const StreamedInput& in, float* y, int accumulate, cudaStream_t stream) {
  if (!gemv_streamed_serves(w)) cuda_fail("gemv_streamed: does not read this matrix");
  if (in.source == StreamedSource::Quantized && (in.quantized.cols != w.cols || in.quantized.n < 1))
    cuda_fail("gemv_streamed: the activations do not match the matrix");
  if (in.source != StreamedSource::Quantized && !in.x) cuda_fail("gemv_streamed: no input row");
  if (in.source == StreamedSource::RmsNorm && !in.norm_weight) cuda_fail("gemv_streamed: no norm weight");
  const Plan plan = plan_for(w);
  if (w.type == GgmlType::Q4_K) launch_source<GgmlType::Q4_K>(w, plan, in, y, accumulate, stream);
  else launch_source<GgmlType::Q6_K>(w, plan, in, y, accumulate, stream);
}

bool fused_matmul_reads(const DeviceWeight& w) { return gemv_streamed_serves(w); }

void rms_norm_matmul(const DeviceWeight& w, const float* x, const float* norm_weight, float eps, float* y,
                     bool accumulate, Stream& stream) {
  StreamedInput in;
  in.source = StreamedSource::RmsNorm, in.x = x, in.norm_weight = norm_weight, in.eps = eps;
  gemv_streamed(w, in, y, accumulate, static_cast<cudaStream_t>(stream.handle()));
}

void silu_mul_matmul(const DeviceWeight& w, const float* gate_up, float* y, bool accumulate, Stream& stream) {
  StreamedInput in;
  in.source = StreamedSource::SiluMul, in.x = gate_up;
  gemv_streamed(w, in, y, accumulate, static_cast<cudaStream_t>(stream.handle()));
}

}  // namespace splash::kernels::cuda
