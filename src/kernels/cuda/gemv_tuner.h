#pragma once
// Timing the GEMV's launch shapes on this GPU, for the tuner of the model layer: each pass
// size's candidates (ops.h gemv_variants) run on the matrix itself, and the fastest wins.
#include <array>
#include <cstdint>

#include "kernels/cuda/ops.h"

namespace splash::kernels::cuda {

// The fastest variant of each bucket (an index into gemv_variants(); -1 for float types,
// which have one GEMV) over the median of a few timed runs of back-to-back launches.
std::array<int8_t, kGemvBuckets> tune_gemv(const DeviceWeight& w, MatmulScratch& scratch, Stream& stream);

}  // namespace splash::kernels::cuda
