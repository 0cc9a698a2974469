#include "kernels/cuda/gemv_tuner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_error.h"

namespace splash::kernels::cuda {
namespace {

constexpr int kRuns = 5;        // timed runs per variant (the median counts)
constexpr int kLaunches = 4;    // back-to-back launches per run, as inside a pass
constexpr int kBucketRows[kGemvBuckets] = {1, 2, 4, 8};

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) cuda_fail(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

std::array<int8_t, kGemvBuckets> tune_gemv(const DeviceWeight& w, MatmulScratch& scratch, Stream& stream) {
  std::array<int8_t, kGemvBuckets> choice{-1, -1, -1, -1};
  if (!is_supported_weight_type(w.type) || w.type == GgmlType::F32 || w.type == GgmlType::F16 ||
      w.type == GgmlType::BF16)
    return choice;
  const int max_rows = kBucketRows[kGemvBuckets - 1];
  DeviceBuffer x(sizeof(float) * static_cast<size_t>(max_rows) * w.cols), y(sizeof(float) * static_cast<size_t>(max_rows) * w.rows);
  stream.fill(x.data(), 0, x.size());  // the time does not depend on the values
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  const auto variants = gemv_variants();
  for (int bucket = 0; bucket < kGemvBuckets; ++bucket) {
    const int n = kBucketRows[bucket];
    const QuantizedRows q = quantize_rows(x.as<float>(), w.cols, n, w.cols, scratch.activations_q8, stream);
    double best = 0.0;
    for (int v = 0; v < static_cast<int>(variants.size()); ++v) {
      if (variants[v].tokens != n) continue;
      auto run = [&] {
        for (int k = 0; k < kLaunches; ++k) gemv(w, x.as<float>(), w.cols, n, y.as<float>(), w.rows, false, scratch, stream, &q, v);
      };
      run();  // warm-up
      std::vector<float> times;
      for (int r = 0; r < kRuns; ++r) {
        check(cudaEventRecord(start, s), "cudaEventRecord");
        run();
        check(cudaEventRecord(stop, s), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "timing a GEMV");
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      if (choice[bucket] < 0 || median < best) choice[bucket] = static_cast<int8_t>(v), best = median;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  stream.synchronize("tuning the GEMV");
  return choice;
}

}  // namespace splash::kernels::cuda
