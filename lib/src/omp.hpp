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

/** The threads a parallel region may use now: `threads`, but 1 in a process forked from one
 *  that had run a parallel region. GNU libgomp's thread pool does not survive fork(): the
 *  child's first parallel region of more than one thread waits forever for threads that
 *  only the parent has. PyTorch DataLoader workers are such children. A region asked for one
 *  thread does not touch the pool. (cpu_backend.cpp) */
int region_threads(int threads);

}  // namespace dctchop::detail
