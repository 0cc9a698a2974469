#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa_kernels.h"

namespace splash::kernels {

const IsaKernels& selected_kernels() {
  static const IsaKernels& table = selected_cpu_path() == CpuPath::Avx512 ? avx512_kernels() : avx2_kernels();
  return table;
}

const char* matmul_isa_name() { return selected_kernels().name; }

void QuantizedActivations::quantize(const float* x, int n, int k, ThreadPool& pool) {
  if (k % 32 != 0) fail("activation width {} is not a multiple of 32", k);
  x_ = x;
  n_ = n;
  k_ = k;
  quantized_ = true;
  codes_.resize(static_cast<size_t>(n) * k);
  scales_.resize(static_cast<size_t>(n) * (k / 32) * sizeof(float));
  sums_.resize(static_cast<size_t>(n) * (k / 16) * sizeof(float));
  const IsaKernels& kernels = selected_kernels();
  auto quantize_rows = [&](int row_begin, int row_end) {
    kernels.quantize_rows(x + static_cast<size_t>(row_begin) * k, row_end - row_begin, k,
                          codes_.as<int8_t>() + static_cast<size_t>(row_begin) * k,
                          scales_.as<float>() + static_cast<size_t>(row_begin) * (k / 32),
                          sums_.as<float>() + static_cast<size_t>(row_begin) * (k / 16));
  };
  if (n < 16) {
    quantize_rows(0, n);
    return;
  }
  const int tasks = pool.size();
  pool.run(tasks, [&](int task) {
    const int begin = n * task / tasks, end = n * (task + 1) / tasks;
    if (begin < end) quantize_rows(begin, end);
  });
}

void QuantizedActivations::use_floats(const float* x, int n, int k) {
  if (k % 32 != 0) fail("activation width {} is not a multiple of 32", k);
  x_ = x;
  n_ = n;
  k_ = k;
  quantized_ = false;
}

void matmul(const PackedWeight& w, const QuantizedActivations& x, float* y, int ldy, ThreadPool& pool) {
  if (x.cols() != w.cols) fail("matmul: activation width {} does not match weight width {}", x.cols(), w.cols);
  if (!x.quantized() && packed_kind_info(w.kind).integer)
    fail("matmul: integer weights need quantized activations");
  const MatmulInput input{x.source(), x.codes(), x.scales(), x.sums(), x.rows(), x.cols()};
  const IsaKernels& kernels = selected_kernels();
  // A few tasks per thread so a slow thread does not hold the others at the barrier.
  const int tasks = std::min(w.tiles, pool.size() * 4);
  pool.run(tasks, [&](int task) {
    const int begin = w.tiles * task / tasks, end = w.tiles * (task + 1) / tasks;
    if (begin < end) kernels.matmul_tiles(w, begin, end, input, y, ldy);
  });
}

}  // namespace splash::kernels
