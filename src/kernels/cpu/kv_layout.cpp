#include "kernels/cpu/kv_layout.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/cpu/half.h"

namespace splash::kernels {

const char* kv_type_name(KvType type) {
  switch (type) {
    case KvType::Q8: return "q8";
    case KvType::F16: return "f16";
    case KvType::F32: return "f32";
  }
  return "q8";
}

namespace {

// Symmetric int8 of one head's vector (n <= 256): returns the scale (amax / 127). Written
// as plain loops that vectorize: prefill stores every new position of every layer.
float quantize_head(const float* x, int n, int8_t* codes, int stride) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  int8_t rounded[256];
  for (int i = 0; i < n; ++i) {
    // Adding 1.5 * 2^23 rounds to the nearest integer (ties to even) in the low mantissa bits.
    const float shifted = x[i] * inverse + 12582912.0f;
    rounded[i] = static_cast<int8_t>(std::bit_cast<int32_t>(shifted) - 0x4B400000);
  }
  if (stride == 1) std::memcpy(codes, rounded, n);
  else for (int i = 0; i < n; ++i) codes[static_cast<size_t>(i) * stride] = rounded[i];
  return amax / 127.0f;
}

}  // namespace

void store_kv_position(const KvHeadLayout& layout, uint8_t* record, size_t head_stride, int n_kv_heads, int slot,
                       const float* keys, const float* values) {
  const int hd = layout.head_dim;
  for (int h = 0; h < n_kv_heads; ++h) {
    uint8_t* head = record + static_cast<size_t>(h) * head_stride;
    const float* k = keys + static_cast<size_t>(h) * hd;
    const float* v = values + static_cast<size_t>(h) * hd;
    if (layout.type == KvType::Q8) {
      auto* key_codes = reinterpret_cast<int8_t*>(head);
      auto* value_codes = reinterpret_cast<int8_t*>(head + layout.values_offset()) + static_cast<size_t>(slot) * hd;
      const float key_scale = quantize_head(k, hd, key_codes + slot, kKvBlockTokens);
      const float value_scale = quantize_head(v, hd, value_codes, 1);
      std::memcpy(head + layout.key_scales_offset() + sizeof(float) * slot, &key_scale, sizeof(float));
      std::memcpy(head + layout.value_scales_offset() + sizeof(float) * slot, &value_scale, sizeof(float));
    } else if (layout.type == KvType::F32) {
      auto* key_floats = reinterpret_cast<float*>(head);
      for (int d = 0; d < hd; ++d) key_floats[d * kKvBlockTokens + slot] = k[d];
      std::memcpy(head + layout.values_offset() + sizeof(float) * slot * hd, v, sizeof(float) * hd);
    } else {
      auto* key_halves = reinterpret_cast<uint16_t*>(head);
      auto* value_halves = reinterpret_cast<uint16_t*>(head + layout.values_offset()) + static_cast<size_t>(slot) * hd;
      for (int d = 0; d < hd; ++d) {
        key_halves[d * kKvBlockTokens + slot] = fp32_to_fp16(k[d]);
        value_halves[d] = fp32_to_fp16(v[d]);
      }
    }
  }
}

void load_kv_position(const KvHeadLayout& layout, const uint8_t* record, size_t head_stride, int n_kv_heads, int slot,
                      float* keys, float* values) {
  const int hd = layout.head_dim;
  for (int h = 0; h < n_kv_heads; ++h) {
    const uint8_t* head = record + static_cast<size_t>(h) * head_stride;
    float* k = keys + static_cast<size_t>(h) * hd;
    float* v = values + static_cast<size_t>(h) * hd;
    if (layout.type == KvType::Q8) {
      float key_scale, value_scale;
      std::memcpy(&key_scale, head + layout.key_scales_offset() + sizeof(float) * slot, sizeof(float));
      std::memcpy(&value_scale, head + layout.value_scales_offset() + sizeof(float) * slot, sizeof(float));
      const auto* key_codes = reinterpret_cast<const int8_t*>(head);
      const auto* value_codes = reinterpret_cast<const int8_t*>(head + layout.values_offset()) + static_cast<size_t>(slot) * hd;
      for (int d = 0; d < hd; ++d) {
        k[d] = key_scale * key_codes[d * kKvBlockTokens + slot];
        v[d] = value_scale * value_codes[d];
      }
    } else if (layout.type == KvType::F32) {
      const auto* key_floats = reinterpret_cast<const float*>(head);
      for (int d = 0; d < hd; ++d) k[d] = key_floats[d * kKvBlockTokens + slot];
      std::memcpy(v, head + layout.values_offset() + sizeof(float) * slot * hd, sizeof(float) * hd);
    } else {
      const auto* key_halves = reinterpret_cast<const uint16_t*>(head);
      const auto* value_halves =
          reinterpret_cast<const uint16_t*>(head + layout.values_offset()) + static_cast<size_t>(slot) * hd;
      for (int d = 0; d < hd; ++d) {
        k[d] = fp16_to_fp32(key_halves[d * kKvBlockTokens + slot]);
        v[d] = fp16_to_fp32(value_halves[d]);
      }
    }
  }
}

}  // namespace splash::kernels

#include <sys/mman.h>

#include <new>

#include "kernels/cpu/aligned_buffer.h"

namespace splash::kernels {

LazyMemory::LazyMemory(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(memory);
}

LazyMemory::~LazyMemory() {
  if (data_) munmap(data_, size_);
}

}  // namespace splash::kernels
