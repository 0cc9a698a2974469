#pragma once
// Programmatic dependent launch: a kernel launched with launch_dependent may start while
// the kernel before it on the stream is still running (its launch and its first loads of
// data nothing writes — weights — overlap that kernel's tail); it calls wait_for_inputs()
// before it reads anything an earlier kernel wrote and before it writes anything, and reads
// such data with plain (coherent) loads: never __ldg or through a `const T* __restrict__`
// parameter, which the compiler turns into non-coherent loads of data it takes to be
// unchanged for the kernel's whole life (it is not: the kernel started before the one that
// wrote it ended; batch-1 decode read stale activations run-dependently so). A kernel
// calls allow_next_launch() once the next one may be scheduled beside it. Both are no-ops
// for a kernel launched plainly, and CUDA graphs record the dependency as it is.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/cuda/cuda_error.h"

namespace splash::kernels::cuda {

__device__ __forceinline__ void wait_for_inputs() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void allow_next_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Whether kernels of `family` (gemv, fused, attention, other) may overlap the kernel before
// them. SPLASH_CUDA_PDL=0 launches every kernel plainly, SPLASH_CUDA_PDL=<family> those of
// one family: to tell a race between overlapped kernels from other causes. Read once.
inline bool overlap_allowed(std::string_view family) {
  static const std::string off = [] {
    const char* v = std::getenv("SPLASH_CUDA_PDL");
    return std::string(v ? v : "");
  }();
  return off != "0" && off != family;
}

// launch_dependent for a kernel of `family` with `shared` bytes of dynamic shared memory.
template <typename... Params, typename... Args>
void launch_dependent_as(std::string_view family, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = overlap_allowed(family) ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) cuda_fail(std::string("kernel launch failed: ") + cudaGetErrorString(status));
}

// The same with `shared` bytes of dynamic shared memory.
template <typename... Params, typename... Args>
void launch_dependent_shared(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                             Args&&... args) {
  launch_dependent_as("other", kernel, grid, block, shared, stream, std::forward<Args>(args)...);
}

// Thread blocks of `threads` threads of the kernel one multiprocessor holds at once.
template <typename... Params>
int blocks_per_sm(void (*kernel)(Params...), int threads, size_t shared = 0) {
  int blocks = 0;
  const cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared);
  if (status != cudaSuccess) cuda_fail(std::string("occupancy query failed: ") + cudaGetErrorString(status));
  return std::max(blocks, 1);
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  launch_dependent_shared(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}

}  // namespace splash::kernels::cuda
