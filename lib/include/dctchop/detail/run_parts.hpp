// Internal (detail): the parts of one call's work on a few threads, the caller's among them.
// Shared by the formats (HDF5 chunks that dctchop decodes) and the loaders (a batch's chunks
// and copies).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "dctchop/detail/quiet_thread.hpp"

namespace dctchop::detail {

/** part(i, t) for every i < parts, on up to `threads` threads: the caller's (t = 0) and up
 *  to threads - 1 started for the call (t = 1, 2, ...: below min(parts, threads), for a
 *  thread's own scratch), quiet (start_quiet_thread: the program's signals stay with its own
 *  threads), none kept between calls, so nothing to lose in a fork. One the system will not
 *  start leaves its share to the others. Once every thread is done, the error of the lowest
 *  i that failed is thrown: the one a serial loop would have met first, whichever thread met
 *  it. */
template <typename Part>
void run_parts(std::size_t parts, std::size_t threads, Part&& part) {
  const std::size_t n = std::min(parts, threads);
  if (n <= 1) {
    for (std::size_t i = 0; i < parts; ++i) part(i, std::size_t{0});
    return;
  }
  std::atomic<std::size_t> next{0};
  std::mutex m;
  std::exception_ptr first;
  std::size_t first_at = parts;
  auto work = [&](std::size_t t) {
    for (std::size_t i; (i = next.fetch_add(1)) < parts;) {
      try {
        part(i, t);
      } catch (...) {
        const std::lock_guard lock(m);
        if (i < first_at) {
          first = std::current_exception();
          first_at = i;
        }
      }
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(n - 1);  // (no allocation between a start and its keeping)
  for (std::size_t t = 1; t < n; ++t) {
    try {
      helpers.push_back(start_quiet_thread([&work, t] { work(t); }));
    } catch (...) {
      break;  // the system's limit on threads, or no memory for one: fewer threads
    }
  }
  work(0);
  for (auto& h : helpers) h.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace dctchop::detail
