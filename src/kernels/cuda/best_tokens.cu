// The best tokens of logits rows, found on the GPU so that a decode step copies back a few
// hundred bytes a row instead of the whole vocabulary (ops.h: best_tokens).
//
// Two kernels. The first takes a row's segment of up to kBestSegment logits into shared
// memory as order-preserving integer keys, finds the kBest-th largest key by radix select
// (four 8-bit digits, a histogram each) and writes the segment's kBest best, in index
// order: the keys above the threshold, then as many equal to it as are needed, the lowest
// ids first. The second does the same over a row's segments' candidates and writes the row's
// kBest best, sorted. Equal logits rank by id at every stage (candidates stay in id order),
// so the result is exactly model::select_best_tokens's.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {
namespace {

cudaStream_t raw(Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

constexpr int kBest = kBestTokenCount;
constexpr int kSelectThreads = 256;
constexpr uint32_t kPaddingKey = 0;  // below every logit: fills a segment shorter than kBest
constexpr uint32_t kNanKey = 1;      // a NaN ranks below every number, -inf included

// Larger logit, larger key; -0 and +0 are one value (as the host compares them).
__device__ __forceinline__ uint32_t order_key(float logit) {
  if (logit != logit) return kNanKey;
  if (logit == 0.0f) logit = 0.0f;
  const uint32_t bits = __float_as_uint(logit);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

struct Threshold {
  uint32_t key;       // the kBest-th largest key
  int equal_needed;   // how many keys equal to it belong to the best
  int above;          // how many keys are larger
};

// Radix select over n keys in shared memory (n > kBest), the whole block together.
__device__ Threshold select_threshold(const uint32_t* keys, int n) {
  __shared__ int histogram[256];
  __shared__ uint32_t prefix_shared;
  __shared__ int remaining_shared;
  uint32_t prefix = 0, mask = 0;
  int remaining = kBest;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) histogram[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      if ((keys[i] & mask) == prefix) atomicAdd(&histogram[(keys[i] >> shift) & 255], 1);
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds digits 255 - 8l down to 248 - 8l: the larger digits in the lower lanes.
      const int lane = threadIdx.x;
      int counts[8], lane_total = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) lane_total += counts[j] = histogram[255 - 8 * lane - j];
      int before = lane_total;  // inclusive scan over lanes, then made exclusive
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int other = __shfl_up_sync(0xffffffffu, before, offset);
        if (lane >= offset) before += other;
      }
      before -= lane_total;
      if (before < remaining && remaining <= before + lane_total) {
        int seen = before;
        for (int j = 0; j < 8; ++j) {
          if (remaining <= seen + counts[j]) {
            prefix_shared = prefix | (static_cast<uint32_t>(255 - 8 * lane - j) << shift);
            remaining_shared = remaining - seen;
            break;
          }
          seen += counts[j];
        }
      }
    }
    __syncthreads();
    prefix = prefix_shared;
    remaining = remaining_shared;
    mask |= 255u << shift;
    __syncthreads();
  }
  return {prefix, remaining, kBest - remaining};
}

// Writes the best kBest of n keys (n > kBest) as slots of `out`: those above the threshold in
// index order, then the needed ones equal to it in index order. `emit(slot, index)`.
template <typename Emit>
__device__ void collect_best(const uint32_t* keys, int n, const Threshold& t, Emit emit) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int seen_shared[2];
  int above_seen = 0, equal_seen = 0;
  for (int base = 0; base < n; base += kSelectThreads) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? keys[i] : kPaddingKey;
    const bool above = i < n && key > t.key, equal = i < n && key == t.key;
    // Both counts in one scan: above in the low 16 bits, equal in the high.
    int packed = (above ? 1 : 0) | (equal ? 1 << 16 : 0), chunk_total = 0;
    Scan(scan_storage).ExclusiveSum(packed, packed, chunk_total);
    if (above) emit(above_seen + (packed & 0xffff), i);
    const int equal_rank = equal_seen + (packed >> 16);
    if (equal && equal_rank < t.equal_needed) emit(t.above + equal_rank, i);
    if (threadIdx.x == 0) {
      seen_shared[0] = above_seen + (chunk_total & 0xffff);
      seen_shared[1] = equal_seen + (chunk_total >> 16);
    }
    __syncthreads();
    above_seen = seen_shared[0];
    equal_seen = seen_shared[1];
    if (above_seen == t.above && equal_seen >= t.equal_needed) break;
    __syncthreads();
  }
}

// Grid (segments, rows): candidates [rows][segments][kBest] ids (-1: padding).
__global__ void __launch_bounds__(kSelectThreads)
    segment_best_kernel(const float* logits, int vocab, int segment, int32_t* __restrict__ candidates) {
  __shared__ uint32_t keys[kBestSegment];
  wait_for_inputs();
  allow_next_launch();
  const int row = blockIdx.y, first = blockIdx.x * segment;
  const int n = min(segment, vocab - first);
  const float* in = logits + static_cast<size_t>(row) * vocab + first;
  int32_t* out = candidates + (static_cast<size_t>(row) * gridDim.x + blockIdx.x) * kBest;
  if (n <= kBest) {  // the whole segment, padded
    for (int i = threadIdx.x; i < kBest; i += blockDim.x) out[i] = i < n ? first + i : -1;
    return;
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) keys[i] = order_key(in[i]);
  __syncthreads();
  const Threshold t = select_threshold(keys, n);
  collect_best(keys, n, t, [&](int slot, int i) { out[slot] = first + i; });
}

// One block a row: its segments' candidates -> its kBest best, best first.
__global__ void __launch_bounds__(kSelectThreads)
    merge_best_kernel(const float* logits, int vocab, int segments, const int32_t* candidates,
                      BestToken* __restrict__ best) {
  extern __shared__ uint32_t shared[];
  const int n = segments * kBest;
  uint32_t* keys = shared;
  int32_t* ids = reinterpret_cast<int32_t*>(shared + n);
  __shared__ int32_t chosen[kBest];
  __shared__ uint32_t chosen_keys[kBest];
  wait_for_inputs();
  allow_next_launch();
  const int row = blockIdx.x;
  const float* in = logits + static_cast<size_t>(row) * vocab;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t id = candidates[static_cast<size_t>(row) * n + i];
    ids[i] = id;
    keys[i] = id < 0 ? kPaddingKey : order_key(in[id]);
  }
  __syncthreads();
  const Threshold t = select_threshold(keys, n);
  collect_best(keys, n, t, [&](int slot, int i) {
    chosen[slot] = ids[i];
    chosen_keys[slot] = keys[i];
  });
  __syncthreads();
  // Sorted: by key, and among equal keys in collection order (which is id order).
  if (threadIdx.x < kBest) {
    const int me = threadIdx.x;
    const uint32_t key = chosen_keys[me];
    int rank = 0;
    for (int j = 0; j < kBest; ++j) rank += chosen_keys[j] > key || (chosen_keys[j] == key && j < me);
    const int32_t id = chosen[me];
    best[static_cast<size_t>(row) * kBest + rank] = {id, id < 0 ? __int_as_float(0xff800000) : in[id]};
  }
}

}  // namespace

int best_token_segments(int vocab) { return (vocab + kBestSegment - 1) / kBestSegment; }

size_t best_tokens_scratch_bytes(int rows, int vocab) {
  return sizeof(int32_t) * static_cast<size_t>(rows) * best_token_segments(vocab) * kBest;
}

void best_tokens(const float* logits, int rows, int vocab, int32_t* scratch, BestToken* best, Stream& stream) {
  if (rows == 0) return;
  const int segments = best_token_segments(vocab);
  const int segment = (vocab + segments - 1) / segments;  // balanced, at most kBestSegment
  launch_dependent(segment_best_kernel, dim3(segments, rows), dim3(kSelectThreads), raw(stream), logits, vocab, segment,
                   scratch);
  const size_t shared = 2 * sizeof(uint32_t) * segments * kBest;  // keys and ids of the candidates
  if (shared > 40 * 1024) cuda_fail("best_tokens: a vocabulary of " + std::to_string(vocab) + " is too large for the merge");
  launch_dependent_shared(merge_best_kernel, dim3(rows), dim3(kSelectThreads), shared, raw(stream), logits, vocab,
                          segments, scratch, best);
}

}  // namespace splash::kernels::cuda
