#pragma once
// Hopper's warpgroup tensor-core operations (sm_90a only: compiled where
// SPLASH_WGMMA is 1): wgmma.mma_async with A in registers (four warps, 64 rows, the A
// fragments laid out as four m16n8k16 ones, warp w of the group holding rows 16w .. 16w + 15)
// and B in shared memory, K-major without swizzling: 8 x 16-byte core matrices (8 columns of
// B, 8 halves of k each), the two of a k-step's halves `lbo` bytes apart, each next 8 columns
// `sbo` bytes on. The accumulators come out as m16n8k16's do, tile by tile of 8 columns.
#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPLASH_WGMMA 1
#else
#define SPLASH_WGMMA 0
#endif

namespace splash::kernels::cuda {

#if SPLASH_WGMMA

// A shared-memory matrix descriptor: the start address, the two strides (each in 16-byte
// units, 14 bits), no base offset, no swizzling.
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* shared, uint32_t lbo, uint32_t sbo) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  return static_cast<uint64_t>((address >> 4) & 0x3FFF) | static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
}

// Orders this thread's register writes (A fragments, accumulators) before the wgmma that reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Shared memory written through the generic proxy (stores, cp.async) made visible to the
// async proxy wgmma reads it through; each writing thread, before the barrier.
__device__ __forceinline__ void fence_shared_for_async_proxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Keeps the compiler from moving accesses of an accumulator across the asynchronous wgmma.
template <int NT>
__device__ __forceinline__ void wgmma_pin(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[j][e])::"memory");
}

// acc (64 x 8 NT, f32) += A (64 x 16, f16, registers) . B (16 x 8 NT, f16, shared memory).
template <int NT>
__device__ __forceinline__ void wgmma_f16_rs(float (&acc)[NT][4], const uint32_t (&a)[4], uint64_t b);

#define SPLASH_WGMMA_ACC4(j) "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])

template <>
__device__ __forceinline__ void wgmma_f16_rs<2>(float (&acc)[2][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, 1, 1, 1, 0;"
      : SPLASH_WGMMA_ACC4(0), SPLASH_WGMMA_ACC4(1)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

template <>
__device__ __forceinline__ void wgmma_f16_rs<4>(float (&acc)[4][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;"
      : SPLASH_WGMMA_ACC4(0), SPLASH_WGMMA_ACC4(1), SPLASH_WGMMA_ACC4(2), SPLASH_WGMMA_ACC4(3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

template <>
__device__ __forceinline__ void wgmma_f16_rs<8>(float (&acc)[8][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;"
      : SPLASH_WGMMA_ACC4(0), SPLASH_WGMMA_ACC4(1), SPLASH_WGMMA_ACC4(2), SPLASH_WGMMA_ACC4(3),
        SPLASH_WGMMA_ACC4(4), SPLASH_WGMMA_ACC4(5), SPLASH_WGMMA_ACC4(6), SPLASH_WGMMA_ACC4(7)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

#undef SPLASH_WGMMA_ACC4

#endif  // SPLASH_WGMMA

}  // namespace splash::kernels::cuda
