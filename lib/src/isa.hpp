// Internal: which copy of the kernels (cpu_kernels.hpp, metric_kernels.hpp) this processor
// runs: avx2 where it has AVX2 and F16C and that copy was built, generic otherwise.
#pragma once

#if defined(DCTCHOP_HAVE_AVX2_KERNELS)
#include <cpuid.h>
#endif

namespace dctchop::detail {

inline bool use_avx2_kernels() {
#if defined(DCTCHOP_HAVE_AVX2_KERNELS)
  // F16C by CPUID: clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

}  // namespace dctchop::detail
