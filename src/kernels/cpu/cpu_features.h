#pragma once
// Which instruction-set path the kernels take, decided once from the CPU's features.
// SPLASH_CPU=avx2 or SPLASH_CPU=avx512 overrides the choice (tests run both paths).
#include <string>

namespace splash::kernels {

enum class CpuPath { Avx2, Avx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
};

CpuFeatures detect_cpu_features();
// Throws splash::Error when the CPU lacks AVX2+FMA+F16C or SPLASH_CPU asks for a missing path.
CpuPath selected_cpu_path();
std::string cpu_path_name(CpuPath path);

}  // namespace splash::kernels
