// Internal (detail): threads that leave the command-line tool's signals to the thread that
// started them. Shared by the library (a CUDA backend's start), the formats (the chunk
// pipeline, the direct writer) and the loaders.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "dctchop/error.hpp"

namespace dctchop::detail {

/** Starts a thread that never takes SIGINT, SIGTERM, SIGHUP or SIGQUIT, so that they reach
 *  the calling thread and interrupt its blocking reads and writes (the tool installs its
 *  handlers without SA_RESTART). A thread the system will not start is error(io). */
template <typename F>
std::thread start_quiet_thread(F&& f) {
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  std::thread t;
  try {
    t = std::thread(std::forward<F>(f));
  } catch (const std::system_error& e) {  // the system's limit on threads, or on memory
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw error(errc::io, std::string("cannot start a thread: ") + e.code().message() +
                              " (the system's limit on threads or on memory: ulimit -u, a pids "
                              "cgroup, ulimit -v)");
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

}  // namespace dctchop::detail
