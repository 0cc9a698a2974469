#pragma once
// The GEMV launch shapes of a model's matrices on this GPU, tuned once and remembered: each
// distinct (type, rows, cols) is timed with every candidate shape of every pass size
// (kernels/cuda/gemv_tuner.h) and the winners are stored as JSON in the cache directory,
// in a file keyed by the GPU, its driver and the model; a later start with the same key
// reads them instead of timing again. CUDA builds only.
#include <span>
#include <string>

#include "kernels/cuda/ops.h"

namespace splash::model {

struct GemvTuningKey {
  std::string gpu;     // "NVIDIA H200"
  int driver = 0;      // cudaDriverGetVersion
  std::string model;   // a hash of the model's tensor table (names, types, shapes) and size
};

// Sets each weight's gemv_choice; returns a line for the start-up summary (what was chosen,
// and whether it was timed now or read from the cache). An empty cache_dir tunes without
// remembering; a cache that cannot be read or written is tuned again (and said so).
std::string tune_gemvs(std::span<kernels::cuda::DeviceWeight* const> weights, const GemvTuningKey& key,
                       const std::string& cache_dir, kernels::cuda::MatmulScratch& scratch,
                       kernels::cuda::Stream& stream);

}  // namespace splash::model
