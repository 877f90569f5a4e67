// Internal: threads that leave the command-line tool's signals to the thread that started them.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace dctchop::formats::detail {

/** Starts a thread that never takes SIGINT, SIGTERM, SIGHUP or SIGQUIT, so that they reach
 *  the calling thread and interrupt its blocking reads and writes (the tool installs its
 *  handlers without SA_RESTART). */
template <typename F>
std::thread start_quiet_thread(F&& f) {
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  std::thread t;
  try {
    t = std::thread(std::forward<F>(f));
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

}  // namespace dctchop::formats::detail
