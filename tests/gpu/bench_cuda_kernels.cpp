// Kernel timings at the Qwen3-8B shapes, against the measured copy bandwidth: a benchmark,
// not a test (nothing is asserted on speed). Disabled by default; tools/gpu_session.sh runs
// it with --gtest_also_run_disabled_tests and keeps its lines.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "gpu_fixture.h"
#include "kernels/cpu/kv_layout.h"
#include "kernels/cuda/ops.h"

namespace splash::testing {
namespace {

// Median time of fn in microseconds over `runs` runs, with CUDA events on the stream.
double time_us(cu::Stream& stream, const std::function<void()>& fn, int runs = 20) {
  auto s = static_cast<cudaStream_t>(stream.handle());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(start, s);
    fn();
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1000.0f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  stream.synchronize("benchmark");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

class CudaKernelBench : public GpuTest {};

TEST_F(CudaKernelBench, DISABLED_Gemv) {
  const double bandwidth = cu::measure_copy_bandwidth();
  std::printf("[ bench ] copy bandwidth %.0f GB/s\n", bandwidth / 1e9);
  cu::Stream stream;
  cu::MatmulScratch scratch;
  struct Shape {
    const char* name;
    int rows, cols;
  };
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096}, {"o 4096x4096", 4096, 4096},
                          {"gate_up 24576x4096", 24576, 4096}, {"down 4096x12288", 4096, 12288},
                          {"head 151936x4096", 151936, 4096}};
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16}) {
    for (const auto& shape : shapes) {
      const size_t bytes = cu::weight_row_bytes(type, shape.cols) * shape.rows;
      cu::DeviceBuffer w(bytes);
      stream.fill(w.data(), 0x11, bytes);  // small codes and scales: finite results
      const cu::DeviceWeight weight{type, w.as<uint8_t>(), shape.rows, shape.cols};
      const auto x = random_floats(rng_, static_cast<size_t>(8) * shape.cols);
      const auto dx = to_device(x);
      cu::DeviceBuffer y(static_cast<size_t>(8) * shape.rows * sizeof(float));
      for (const int n : {1, 4}) {
        const double us = time_us(stream, [&] {
          cu::gemv(weight, dx.as<float>(), shape.cols, n, y.as<float>(), shape.rows, false, scratch, stream);
        });
        std::printf("[ bench ] gemv %-5s %-20s n=%d %8.1f us %7.0f GB/s (%3.0f%% of copy)\n",
                    std::string(type_name(type)).c_str(), shape.name, n, us, bytes / us / 1e3,
                    100.0 * bytes / (us * 1e-6) / bandwidth);
      }
    }
  }
}

TEST_F(CudaKernelBench, DISABLED_Attention) {
  cu::Stream stream;
  const int n_heads = 32, n_kv = 8, hd = 128, layers = 1;
  for (const int context : {512, 8192, 32768}) {
    const int blocks = context / kernels::kKvBlockTokens;
    cu::KvPool pool;
    pool.element = cu::KvElement::I8;
    pool.blocks = blocks, pool.n_layers = layers, pool.n_kv_heads = n_kv, pool.head_dim = hd;
    cu::DeviceBuffer data(pool.bytes()), scales(pool.scale_bytes());
    stream.fill(data.data(), 1, pool.bytes());
    stream.fill(scales.data(), 0, pool.scale_bytes());
    pool.data = data.as<uint8_t>(), pool.scales = scales.as<float>();
    std::vector<int32_t> table(blocks);
    for (int i = 0; i < blocks; ++i) table[i] = i;
    cu::AttentionScratch scratch;
    const int qkv_w = (n_heads + 2 * n_kv) * hd;
    for (const int tokens : {1, 512}) {
      std::vector<int32_t> positions(tokens), offsets(tokens, 0);
      for (int t = 0; t < tokens; ++t) positions[t] = context - tokens + t;
      const std::vector<cu::SliceSpan> slices{{0, tokens, context - tokens}};
      const DeviceBatch batch(positions, offsets, table, slices, n_heads, n_kv, hd);
      const auto q = random_floats(rng_, static_cast<size_t>(tokens) * qkv_w);
      const auto dq = to_device(q);
      cu::DeviceBuffer out(static_cast<size_t>(tokens) * n_heads * hd * sizeof(float));
      const cu::BatchLayout& layout = batch.layout;
      const double us = time_us(stream, [&] {
        cu::attention(dq.as<float>(), qkv_w, out.as<float>(), n_heads, layout, pool, 0, scratch, stream);
      }, 10);
      const double kv_bytes = static_cast<double>(context) * n_kv * hd * 2;  // int8 keys + values
      std::printf("[ bench ] attention q8 context %6d, %3d tokens: %9.1f us (KV %.1f MB: %.0f GB/s once read)\n",
                  context, tokens, us, kv_bytes / 1e6, kv_bytes / us / 1e3);
    }
  }
}

}  // namespace
}  // namespace splash::testing
