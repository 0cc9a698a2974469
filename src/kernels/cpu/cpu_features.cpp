#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <string_view>

#include "common/error.h"

namespace splash::kernels {

CpuFeatures detect_cpu_features() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // F16C by CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  return f;
}

CpuPath selected_cpu_path() {
  static const CpuPath path = [] {
    const CpuFeatures f = detect_cpu_features();
    if (!(f.avx2 && f.fma && f.f16c)) fail("splash needs an x86-64 CPU with AVX2, FMA and F16C");
    const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
    const char* forced = std::getenv("SPLASH_CPU");
    if (forced && *forced) {
      const std::string_view want(forced);
      if (want == "avx2") return CpuPath::Avx2;
      if (want == "avx512") {
        if (!avx512) fail("SPLASH_CPU=avx512 but this CPU lacks AVX-512 with VNNI");
        return CpuPath::Avx512;
      }
      fail("SPLASH_CPU must be avx2 or avx512, not '{}'", want);
    }
    return avx512 ? CpuPath::Avx512 : CpuPath::Avx2;
  }();
  return path;
}

std::string cpu_path_name(CpuPath path) { return path == CpuPath::Avx512 ? "AVX-512/VNNI" : "AVX2+FMA"; }

}  // namespace splash::kernels
