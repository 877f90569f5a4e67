// Internal: OpenMP pragmas that vanish, without warnings, in a build without OpenMP.
#pragma once

#if defined(_OPENMP)
#include <omp.h>
#define DCTCHOP_OMP(directive) _Pragma(#directive)
#else
#define DCTCHOP_OMP(directive)
#endif

namespace dctchop::detail {

/** Thread count for a request: 0 means every core; 1 without OpenMP. */
inline int resolve_threads(int requested) {
#if defined(_OPENMP)
  return requested > 0 ? requested : omp_get_num_procs();
#else
  (void)requested;
  return 1;
#endif
}

}  // namespace dctchop::detail
