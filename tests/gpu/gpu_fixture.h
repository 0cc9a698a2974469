#pragma once
// What the GPU tests share: a skip when no GPU is visible, device buffers filled from host
// vectors, fresh random inputs per check, and the error measure every check states its
// tolerance in, ||out - ref|| / ||ref||.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace splash::testing {

namespace cu = kernels::cuda;

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cu::find_device(&why)) GTEST_SKIP() << "no GPU: " << why;
  }
  std::mt19937_64 rng_{std::random_device{}()};  // fresh inputs every run
};

template <typename T>
cu::DeviceBuffer to_device(const std::vector<T>& host) {
  cu::DeviceBuffer buffer(std::max<size_t>(host.size() * sizeof(T), 1));
  cu::Stream stream;
  stream.copy_to_device(buffer.data(), host.data(), host.size() * sizeof(T));
  stream.synchronize("test upload");
  return buffer;
}

template <typename T>
std::vector<T> to_host(const cu::DeviceBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  cu::Stream stream;
  stream.copy_to_host(host.data(), buffer.data(), count * sizeof(T));
  stream.synchronize("test download");
  return host;
}

// The same from a device pointer into a larger buffer.
template <typename T>
std::vector<T> to_host_at(const T* device, size_t count) {
  std::vector<T> host(count);
  cu::Stream stream;
  stream.copy_to_host(host.data(), device, count * sizeof(T));
  stream.synchronize("test download");
  return host;
}

// Relative L2 error; NaN anywhere (an unwritten, poisoned output) gives +inf.
inline double relative_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// A batch layout with attention's work lists, over device copies the holder keeps alive.
struct DeviceBatch {
  cu::DeviceBuffer positions, offsets, tables, decode, tiles;
  cu::BatchLayout layout;
  DeviceBatch(const std::vector<int32_t>& pos, const std::vector<int32_t>& table_offsets,
              const std::vector<int32_t>& block_tables, const std::vector<cu::SliceSpan>& slices, int n_heads,
              int n_kv_heads, int head_dim)
      : positions(to_device(pos)), offsets(to_device(table_offsets)), tables(to_device(block_tables)) {
    const auto work = cu::attention_work(slices, n_heads, n_kv_heads, head_dim);
    decode = to_device(work.decode.empty() ? std::vector<int32_t>{0} : work.decode);
    tiles = to_device(work.tiles.empty() ? std::vector<int32_t>{0, 0} : work.tiles);
    layout.positions = positions.as<int32_t>();
    layout.table_offsets = offsets.as<int32_t>();
    layout.block_tables = tables.as<int32_t>();
    layout.n_tokens = static_cast<int>(pos.size());
    layout.decode_tokens = decode.as<int32_t>();
    layout.n_decode = static_cast<int>(work.decode.size());
    layout.decode_context = work.decode_context;
    layout.tiles = tiles.as<int32_t>();
    layout.n_tiles = static_cast<int>(work.tiles.size() / 2);
  }
};

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float deviation = 1.0f) {
  std::normal_distribution<float> normal(0.0f, deviation);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

}  // namespace splash::testing
