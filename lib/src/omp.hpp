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

/** The threads a parallel region may use now: `threads`, but 1 in a process forked from the
 *  one that loaded the library. GNU libgomp's thread pool does not survive fork(): a child
 *  whose parent had run a parallel region (dctchop's, or another library's on the same
 *  libgomp, such as PyTorch's) waits forever in its first region of more than one thread
 *  for threads that only the parent has. PyTorch DataLoader workers are such children. A
 *  region asked for one thread does not touch the pool. (cpu_backend.cpp) */
int region_threads(int threads);

}  // namespace dctchop::detail
