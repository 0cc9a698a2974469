// Kernel timings at the Qwen3-8B shapes, against the measured copy bandwidth: a benchmark,
// not a test (nothing is asserted on speed). Disabled by default; tools/gpu_session.sh runs
// it with --gtest_also_run_disabled_tests and keeps its lines.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <tuple>

#include "gpu_fixture.h"
#include "kernels/cpu/kv_layout.h"
#include "kernels/cuda/ops.h"

namespace splash::testing {
namespace {

// Median time of fn in microseconds over `runs` runs, with CUDA events on the stream; with
// `inner` > 1 each run queues fn that many times back to back and the time is per call (what
// a kernel costs inside a pass, its launch overlapped with the previous kernel).
double time_us(cu::Stream& stream, const std::function<void()>& fn, int runs = 20, int inner = 1) {
  auto s = static_cast<cudaStream_t>(stream.handle());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(start, s);
    for (int k = 0; k < inner; ++k) fn();
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1000.0f / static_cast<float>(inner));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  stream.synchronize("benchmark");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

class CudaKernelBench : public GpuTest {};

// Every GEMV launch shape at the Qwen3-8B matrices, the weights rotated over copies that
// together exceed the 50 MB L2 (a decode step streams 5 GB: no matrix is ever cached), the
// activations quantized once outside the timing (as the model does), eight calls queued back
// to back per timing (as in a pass). The best variant of
// each line is marked; the quantization is timed on its own.
TEST_F(CudaKernelBench, DISABLED_Gemv) {
  const double bandwidth = cu::measure_copy_bandwidth();
  std::printf("[ bench ] copy bandwidth %.0f GB/s\n", bandwidth / 1e9);
  cu::Stream stream;
  cu::MatmulScratch scratch;
  struct Shape {
    const char* name;
    int rows, cols;
  };
  const Shape shapes[] = {{"q 4096x4096", 4096, 4096},   {"kv 2048x4096", 2048, 4096},
                          {"qkv 6144x4096", 6144, 4096}, {"gate_up 24576x4096", 24576, 4096},
                          {"down 4096x12288", 4096, 12288}, {"head 151936x4096", 151936, 4096}};
  const auto variants = cu::gemv_variants();
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0,
                              GgmlType::F16}) {
    for (const auto& shape : shapes) {
      const size_t bytes = cu::weight_row_bytes(type, shape.cols) * shape.rows;
      const int copies = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes + 1, 1, 16));
      cu::DeviceBuffer w(bytes * copies);
      stream.fill(w.data(), 0x11, bytes * copies);  // small codes and scales: finite results
      std::vector<cu::DeviceWeight> weights;
      for (int c = 0; c < copies; ++c) weights.push_back({type, w.as<uint8_t>() + bytes * c, shape.rows, shape.cols});
      const auto x = random_floats(rng_, static_cast<size_t>(8) * shape.cols);
      const auto dx = to_device(x);
      cu::DeviceBuffer y(static_cast<size_t>(8) * shape.rows * sizeof(float)), q8;
      int next = 0;
      for (const int n : {1, 2, 4, 8}) {
        const cu::QuantizedRows xq = cu::quantize_rows(dx.as<float>(), shape.cols, n, shape.cols, q8, stream);
        const bool integer = type != GgmlType::F16;
        std::vector<std::pair<int, double>> times;  // variant, us
        for (int v = 0; v < (integer ? static_cast<int>(variants.size()) : 1); ++v) {
          if (integer && variants[v].tokens != std::array{1, 2, 4, 8}[cu::gemv_bucket(n)]) continue;
          times.emplace_back(integer ? v : -1, time_us(stream, [&] {
            cu::gemv(weights[next++ % copies], dx.as<float>(), shape.cols, n, y.as<float>(), shape.rows, false,
                     scratch, stream, integer ? &xq : nullptr, integer ? v : -1);
          }, 10, 8));
        }
        const double best = std::min_element(times.begin(), times.end(), [](auto& a, auto& b) { return a.second < b.second; })->second;
        for (const auto& [v, us] : times)
          std::printf("[ bench ] gemv %-5s %-20s n=%d variant %2d (%d rows, %d parts) %8.1f us %5.0f GB/s %3.0f%% of copy%s\n",
                      std::string(type_name(type)).c_str(), shape.name, n, v, v >= 0 ? variants[v].rows : 0,
                      v >= 0 ? variants[v].parts : 0, us, bytes / us / 1e3, 100.0 * bytes / (us * 1e-6) / bandwidth,
                      us == best ? "  <- best" : "");
      }
    }
  }
  // Batched decode: the GEMV's passes of 8 rows, the small GEMM and dequantize-to-f16 +
  // cuBLAS, and the dequantization alone, at gate_up and at the small matrices.
  for (const auto& [name, type, rows, cols] : {std::tuple{"gate_up", GgmlType::Q4_K, 24576, 4096},
                                                std::tuple{"kv", GgmlType::Q4_K, 2048, 4096},
                                                std::tuple{"down", GgmlType::Q6_K, 4096, 12288},
                                                std::tuple{"head", GgmlType::Q6_K, 151936, 4096}}) {
    const size_t bytes = cu::weight_row_bytes(type, cols) * rows;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes + 1, 2, 16));  // past L2
    cu::DeviceBuffer w(bytes * copies);
    stream.fill(w.data(), 0x11, bytes * copies);
    std::vector<cu::DeviceWeight> weights;
    for (int c = 0; c < copies; ++c) weights.push_back({type, w.as<uint8_t>() + bytes * c, rows, cols});
    const auto x = random_floats(rng_, static_cast<size_t>(64) * cols);
    const auto dx = to_device(x);
    cu::DeviceBuffer y(static_cast<size_t>(64) * rows * sizeof(float));
    int next = 0;
    for (const int n : {2, 4, 8, 16, 32, 64}) {
      const double gemv_us = time_us(stream, [&] {
        cu::gemv(weights[next++ % copies], dx.as<float>(), cols, n, y.as<float>(), rows, false, scratch, stream);
      }, 10, 4);
      const double small_us = time_us(stream, [&] {
        cu::small_gemm(weights[next++ % copies], dx.as<float>(), cols, n, y.as<float>(), rows, false, scratch, stream);
      }, 10, 4);
      const double tc_us = rows > 32768 ? 0.0 : time_us(stream, [&] {
        cu::matmul_tensor_cores(weights[next++ % copies], dx.as<float>(), cols, n, y.as<float>(), rows, false, scratch,
                                stream);
      }, 10, 4);
      std::printf("[ bench ] %s %s %dx%d, %2d rows: GEMV passes %7.1f us, small GEMM %7.1f us (%3.0f%% of copy), "
                  "f16 + cuBLAS %7.1f us\n", name, std::string(type_name(type)).c_str(), rows, cols, n, gemv_us,
                  small_us, 100.0 * bytes / (small_us * 1e-6) / bandwidth, tc_us);
    }
    if (rows > 32768) continue;
    scratch.weight_f16.resize(static_cast<size_t>(rows) * cols * 2);
    const double dq_us = time_us(stream, [&] { cu::dequantize_to_f16(weights[next++ % copies], scratch.weight_f16.data(), stream); }, 10, 4);
    std::printf("[ bench ] dequantize %s to f16: %.1f us (%.0f GB/s read + written)\n", name, dq_us,
                (bytes + static_cast<double>(rows) * cols * 2) / dq_us / 1e3);
  }
  for (const int cols : {4096, 12288}) {
    const auto x = random_floats(rng_, static_cast<size_t>(8) * cols);
    const auto dx = to_device(x);
    cu::DeviceBuffer q8;
    for (const int n : {1, 8}) {
      const double us = time_us(stream, [&] { cu::quantize_rows(dx.as<float>(), cols, n, cols, q8, stream); }, 20, 8);
      std::printf("[ bench ] quantize_rows %d x %d: %.1f us\n", n, cols, us);
    }
  }
}

// The small GEMM's split of K at the Qwen3-8B matrices: the automatic choice against every
// forced split, weights rotated past L2, four calls queued back to back per timing.
TEST_F(CudaKernelBench, DISABLED_SmallGemmSplits) {
  const double bandwidth = cu::measure_copy_bandwidth();
  cu::Stream stream;
  cu::MatmulScratch scratch;
  for (const auto& [name, type, rows, cols] : {std::tuple{"gate_up", GgmlType::Q4_K, 24576, 4096},
                                                std::tuple{"qkv", GgmlType::Q4_K, 6144, 4096},
                                                std::tuple{"o", GgmlType::Q4_K, 4096, 4096},
                                                std::tuple{"down", GgmlType::Q6_K, 4096, 12288},
                                                std::tuple{"v", GgmlType::Q6_K, 1024, 4096}}) {
    const size_t bytes = cu::weight_row_bytes(type, cols) * rows;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes + 1, 2, 16));
    cu::DeviceBuffer w(bytes * copies);
    stream.fill(w.data(), 0x11, bytes * copies);
    std::vector<cu::DeviceWeight> weights;
    for (int c = 0; c < copies; ++c) weights.push_back({type, w.as<uint8_t>() + bytes * c, rows, cols});
    const auto dx = to_device(random_floats(rng_, static_cast<size_t>(64) * cols));
    cu::DeviceBuffer y(static_cast<size_t>(64) * rows * sizeof(float));
    int next = 0;
    for (const int n : {2, 4, 8, 16, 32, 64}) {
      std::string line;
      for (const int splits : {0, 1, 2, 3, 4, 6, 8, 12, 16}) {
        const double us = time_us(stream, [&] {
          cu::small_gemm(weights[next++ % copies], dx.as<float>(), cols, n, y.as<float>(), rows, false, scratch, stream,
                         splits);
        }, 10, 4);
        char cell[64];
        if (splits == 0)
          std::snprintf(cell, sizeof(cell), " auto %6.1f us (%3.0f%% of copy) |", us, 100.0 * bytes / (us * 1e-6) / bandwidth);
        else
          std::snprintf(cell, sizeof(cell), " %d: %6.1f", splits, us);
        line += cell;
      }
      const double staged_us = time_us(stream, [&] {
        cu::small_gemm(weights[next++ % copies], dx.as<float>(), cols, n, y.as<float>(), rows, false, scratch, stream, 0,
                       cu::SmallGemmKernel::Staged);
      }, 10, 4);
      std::printf("[ bench ] small GEMM %s %s %dx%d, %2d rows:%s | staged kernel, auto split %6.1f us (%3.0f%% of copy)\n",
                  name, std::string(type_name(type)).c_str(), rows, cols, n, line.c_str(), staged_us,
                  100.0 * bytes / (staged_us * 1e-6) / bandwidth);
    }
  }
}

// The small GEMM alone at gate_up Q4_K, 8 and 64 rows, a few launches: what ncu profiles
// (tools/gpu_session.sh ncu).
TEST_F(CudaKernelBench, DISABLED_SmallGemmForProfiler) {
  cu::Stream stream;
  cu::MatmulScratch scratch;
  const int rows = 24576, cols = 4096;
  const size_t bytes = cu::weight_row_bytes(GgmlType::Q4_K, cols) * rows;
  cu::DeviceBuffer w(bytes);
  stream.fill(w.data(), 0x11, bytes);
  const cu::DeviceWeight weight{GgmlType::Q4_K, w.as<uint8_t>(), rows, cols};
  const auto dx = to_device(random_floats(rng_, static_cast<size_t>(64) * cols));
  cu::DeviceBuffer y(static_cast<size_t>(64) * rows * sizeof(float));
  for (const int n : {8, 64})
    for (int i = 0; i < 2; ++i) cu::small_gemm(weight, dx.as<float>(), cols, n, y.as<float>(), rows, false, scratch, stream);
  stream.synchronize("small_gemm");
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
      }, 10, tokens == 1 ? 4 : 1);
      const double kv_bytes = static_cast<double>(context) * n_kv * hd * 2;  // int8 keys + values
      std::printf("[ bench ] attention q8 context %6d, %3d tokens: %9.1f us (KV %.1f MB: %.0f GB/s once read)\n",
                  context, tokens, us, kv_bytes / 1e6, kv_bytes / us / 1e3);
    }
  }
}

}  // namespace
}  // namespace splash::testing
