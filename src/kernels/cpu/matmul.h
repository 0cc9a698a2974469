#pragma once
// y = x * W^T for a packed weight W (rows x cols) and N activation rows x (N x cols):
// y is N x rows, row-major with leading dimension ldy. The work is split over the pool by
// row tiles; activations are quantized to int8 once per call (or once for several calls
// that share an input, via QuantizedActivations).
#include <cstdint>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/thread_pool.h"

namespace splash::kernels {

class QuantizedActivations {
 public:
  // Quantizes N rows of K floats (K a multiple of 32); keeps a pointer to x for float kernels.
  void quantize(const float* x, int n, int k, ThreadPool& pool);
  // Only keeps the pointer: for a caller whose next matmuls all have float weights (F32, F16,
  // BF16), which read the floats; integer weights then refuse these activations.
  void use_floats(const float* x, int n, int k);
  bool quantized() const { return quantized_; }
  const float* source() const { return x_; }
  int rows() const { return n_; }
  int cols() const { return k_; }
  const int8_t* codes() const { return codes_.as<int8_t>(); }
  const float* scales() const { return scales_.as<float>(); }
  const float* sums() const { return sums_.as<float>(); }

 private:
  const float* x_ = nullptr;
  int n_ = 0, k_ = 0;
  bool quantized_ = false;
  AlignedBuffer codes_, scales_, sums_;
};

void matmul(const PackedWeight& w, const QuantizedActivations& x, float* y, int ldy, ThreadPool& pool);

// Name of the kernel set in use ("avx512" or "avx2").
const char* matmul_isa_name();

}  // namespace splash::kernels
