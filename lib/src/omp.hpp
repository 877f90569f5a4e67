// Internal: OpenMP pragmas that vanish, without warnings, in a build without OpenMP.
#pragma once

#if defined(_OPENMP)
#include <omp.h>
#define DCTCHOP_OMP(directive) _Pragma(#directive)
#else
#define DCTCHOP_OMP(directive)
#endif

#include <atomic>
#include <cstdint>
#include <exception>
#include <utility>

#include "dctchop/cores.hpp"

namespace dctchop::detail {

/** The first exception thrown in any thread of a parallel region, carried out of it: an
 *  exception must not leave an OpenMP region (std::terminate ends the process). Threads run
 *  their work through run(), skip what is left once failed() says so, and the caller calls
 *  rethrow() after the region. */
class region_failure {
 public:
  /** fn(), keeping its exception (the first one of the region) rather than throwing. */
  template <typename Fn>
  void run(Fn&& fn) noexcept {
    try {
      std::forward<Fn>(fn)();
    } catch (...) {
      keep(std::current_exception());
    }
  }
  bool failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  /** After the region: its first exception, if a thread kept one. */
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  void keep(std::exception_ptr e) noexcept {
    DCTCHOP_OMP(omp critical(dctchop_region_failure))
    {
      if (!first_) first_ = std::move(e);
    }
    failed_.store(true, std::memory_order_relaxed);
  }
  std::exception_ptr first_;
  std::atomic<bool> failed_{false};
};

/** Thread count for a request: 0 means every core this process may use (its affinity, and no
 *  more than a cgroup's CPU quota: usable_cores); 1 without OpenMP. */
inline int resolve_threads(int requested) {
#if defined(_OPENMP)
  return requested > 0 ? requested : static_cast<int>(usable_cores().usable);
#else
  (void)requested;
  return 1;
#endif
}

/** The threads a parallel region over `work` items may use now: `threads`, but no more than
 *  the items or the processors (a team beyond either costs thread starts, and the system may
 *  refuse them: libgomp then ends the process), and 1 in a process forked from the one that
 *  loaded the library. GNU libgomp's thread pool does not survive fork(): a child
 *  whose parent had run a parallel region (dctchop's, or another library's on the same
 *  libgomp, such as PyTorch's) waits forever in its first region of more than one thread
 *  for threads that only the parent has. PyTorch DataLoader workers are such children. A
 *  region asked for one thread does not touch the pool. (cpu_backend.cpp) */
int region_threads(int threads, std::uint64_t work);

/** How many of `want` threads the system starts at once now (all held, then ended): pthreads
 *  with default attributes, as libgomp starts its team's. (cpu_backend.cpp) */
int threads_that_start(int want);

}  // namespace dctchop::detail
