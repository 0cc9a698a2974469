#pragma once
// Addressing and element conversion of the GPU KV pool (see KvPool in ops.h): shared by
// the kernel that appends keys and values and the attention kernels that read them.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cpu/kv_layout.h"
#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {

// Index (in elements, or in scales for the I8 scale array divided by head_dim) of the first
// element of (layer, block, keys or values, kv head, slot).
__device__ __forceinline__ size_t kv_index(const KvPool& pool, int layer, int block, int which, int head, int slot) {
  return ((((static_cast<size_t>(layer) * pool.blocks + block) * 2 + which) * pool.n_kv_heads + head) *
              kKvBlockTokens +
          slot) *
         pool.head_dim;
}
__device__ __forceinline__ size_t kv_scale_index(const KvPool& pool, int layer, int block, int which, int head,
                                                 int slot) {
  return (((static_cast<size_t>(layer) * pool.blocks + block) * 2 + which) * pool.n_kv_heads + head) *
             kKvBlockTokens +
         slot;
}

template <KvElement E>
struct KvElementOf;
template <>
struct KvElementOf<KvElement::I8> {
  using type = int8_t;
};
template <>
struct KvElementOf<KvElement::F16> {
  using type = __half;
};
template <>
struct KvElementOf<KvElement::F32> {
  using type = float;
};

template <KvElement E>
__device__ __forceinline__ float kv_load(const void* data, size_t index) {
  if constexpr (E == KvElement::I8) return static_cast<float>(static_cast<const int8_t*>(data)[index]);
  else if constexpr (E == KvElement::F16) return __half2float(static_cast<const __half*>(data)[index]);
  else return static_cast<const float*>(data)[index];
}

// Calls fn.template operator()<E>() for the pool's element type.
template <typename Fn>
void dispatch_kv_element(KvElement element, Fn&& fn) {
  switch (element) {
    case KvElement::I8: return fn.template operator()<KvElement::I8>();
    case KvElement::F16: return fn.template operator()<KvElement::F16>();
    case KvElement::F32: return fn.template operator()<KvElement::F32>();
  }
}

}  // namespace splash::kernels::cuda
