#pragma once
// Asynchronous copies from global into shared memory (cp.async, sm_80 and later): a thread
// issues them, groups them with commit(), and wait<N>() returns once at most N of its groups
// are still in flight. The copies bypass the registers, so a kernel can keep several loads
// deep of data in flight without holding it in registers.
#include <cstdint>

#include "kernels/cuda/mma.cuh"

namespace splash::kernels::cuda::async_copy {

template <int Bytes>
__device__ __forceinline__ void copy(void* shared, const void* global) {
  static_assert(Bytes == 16 || Bytes == 8 || Bytes == 4, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (Bytes == 16)  // past L1: streamed data is read once
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(shared)), "l"(global));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(shared_address(shared)), "l"(global), "n"(Bytes));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

}  // namespace splash::kernels::cuda::async_copy
