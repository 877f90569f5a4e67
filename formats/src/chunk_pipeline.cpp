#include "chunk_pipeline.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/error.hpp"

namespace dctchop::formats::detail {
namespace {

using u64 = std::uint64_t;
constexpr u64 none = std::numeric_limits<u64>::max();

/** Shared state of one run, guarded by `m`. A slot is free while its chunk is `none`; it is
 *  taken from the read of a chunk until that chunk is written, and `worked` once work() is
 *  done with it. */
struct pipeline_state {
  std::mutex m;
  std::condition_variable cv;
  std::vector<u64> chunk;
  std::vector<char> worked;
  std::deque<std::size_t> queue;  // filled slots, in chunk order
  u64 read_total = none;          // chunks read, once reading has ended
  u64 next_write = 0;
  u64 failed_chunk = none;  // lowest chunk that failed
  std::exception_ptr error;
  bool writer_done = false;  // the writer thread has returned
  bool cancelled = false;    // before_read threw: nothing more is worked
  std::atomic<bool>* stop_reads = nullptr;  // chunk_stages::stop_reads

  bool failed() const { return failed_chunk != none; }
  void fail(u64 at, std::exception_ptr e) {  // with m held
    if (at < failed_chunk) {
      failed_chunk = at;
      error = std::move(e);
    }
    if (stop_reads != nullptr) stop_reads->store(true);
    cv.notify_all();
  }
};

}  // namespace

u64 run_chunks(std::size_t slots, unsigned workers, const chunk_stages& stages) {
  if (workers == 0) workers = 1;
  if (slots < 1) slots = 1;
  pipeline_state s;
  s.stop_reads = stages.stop_reads;
  s.chunk.assign(slots, none);
  s.worked.assign(slots, 0);

  auto worker_loop = [&s, &stages](unsigned w) {
    std::unique_lock lock(s.m);
    for (;;) {
      // After a failure, only chunks before the failed one are still worked.
      s.cv.wait(lock, [&] {
        return !s.queue.empty() || s.read_total != none || s.failed();
      });
      if (s.queue.empty()) return;  // reading has ended or failed, and nothing is left
      const std::size_t slot = s.queue.front();
      const u64 c = s.chunk[slot];
      if (s.cancelled || c > s.failed_chunk) return;
      s.queue.pop_front();
      lock.unlock();
      std::exception_ptr err;
      try {
        stages.work(c, slot, w);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err) {
        s.fail(c, err);
      } else {
        s.worked[slot] = 1;
        s.cv.notify_all();
      }
    }
  };

  auto writer_loop = [&s, &stages] {
    std::unique_lock lock(s.m);
    for (;;) {
      // Chunks before a failed one are still written, so that a write error there wins.
      std::size_t slot = 0;
      bool done = false;
      s.cv.wait(lock, [&] {
        done = (s.failed() && s.next_write >= s.failed_chunk) ||
               (s.read_total != none && s.next_write >= s.read_total);
        if (done) return true;
        for (slot = 0; slot < s.chunk.size(); ++slot) {
          if (s.chunk[slot] == s.next_write && s.worked[slot]) return true;
        }
        return false;
      });
      if (done) return;
      const u64 c = s.next_write;
      lock.unlock();
      std::exception_ptr err;
      try {
        stages.write(c, slot);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err) {
        s.fail(c, err);
        return;
      }
      s.worked[slot] = 0;
      s.chunk[slot] = none;
      ++s.next_write;
      s.cv.notify_all();
    }
  };

  std::vector<std::thread> threads;
  auto stop_and_join = [&] {
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  };
  u64 c = 0;
  try {
    threads.reserve(workers + 1);
    threads.push_back(dctchop::detail::start_quiet_thread([&] {
      writer_loop();
      const std::lock_guard lock(s.m);
      s.writer_done = true;
      s.cv.notify_all();
    }));
    for (unsigned w = 0; w < workers; ++w)
      threads.push_back(dctchop::detail::start_quiet_thread([&, w] { worker_loop(w); }));

    // A cancel (before_read threw): ahead of every other failure, with the writes told to
    // give up, and nothing more worked or written.
    auto cancel = [&](std::exception_ptr e) {  // with s.m held
      s.cancelled = true;
      s.failed_chunk = 0;
      s.error = std::move(e);
      if (stages.stop_writes != nullptr) stages.stop_writes->store(true);
      if (s.stop_reads != nullptr) s.stop_reads->store(true);
      s.cv.notify_all();
    };
    // before_read's exception, if it throws (without the lock held).
    auto ask_cancel = [&stages]() -> std::exception_ptr {
      try {
        if (stages.before_read) stages.before_read();
      } catch (...) {
        return std::current_exception();
      }
      return nullptr;
    };
    std::unique_lock lock(s.m);
    // Waits until `ready` (with the lock held), calling before_read every tenth of a second
    // meanwhile: the writer may be blocked on a stalled pipe. Its exception, if it threw.
    auto wait_watching = [&](auto&& ready) {
      std::exception_ptr cancelled;
      if (!stages.before_read) {
        s.cv.wait(lock, ready);
        return cancelled;
      }
      while (!s.cv.wait_for(lock, std::chrono::milliseconds(100), ready)) {
        lock.unlock();
        cancelled = ask_cancel();
        lock.lock();
        if (cancelled) break;
      }
      return cancelled;
    };
    for (;; ++c) {
      std::size_t slot = 0;
      std::exception_ptr cancelled = wait_watching([&] {
        if (s.failed()) return true;
        for (slot = 0; slot < s.chunk.size(); ++slot) {
          if (s.chunk[slot] == none) return true;
        }
        return false;
      });
      if (cancelled) {
        cancel(cancelled);
        break;
      }
      if (s.failed()) break;
      s.chunk[slot] = c;  // taken: not free for another read
      lock.unlock();
      bool more = false;
      std::exception_ptr err;
      cancelled = ask_cancel();
      if (!cancelled) {
        try {
          more = stages.read(c, slot);
        } catch (...) {
          err = std::current_exception();
        }
        if (err) cancelled = ask_cancel();  // a cancel pending is why the read failed
      }
      lock.lock();
      if (cancelled || err) {
        s.chunk[slot] = none;
        if (cancelled) {
          cancel(cancelled);
        } else {
          s.fail(c, err);
        }
        break;
      }
      if (!more) {
        s.chunk[slot] = none;
        break;
      }
      s.queue.push_back(slot);
      s.cv.notify_all();
    }
    s.read_total = c;
    s.cv.notify_all();
    // The last chunks drain through the writer; a cancel still counts meanwhile.
    if (auto cancelled = wait_watching([&] { return s.writer_done; })) cancel(cancelled);
    lock.unlock();
  } catch (...) {
    // Starting a thread failed: stop the others before leaving.
    {
      std::lock_guard lock(s.m);
      s.fail(0, std::current_exception());
      s.read_total = c;
    }
    stop_and_join();
    throw;
  }
  stop_and_join();
  if (s.error) std::rethrow_exception(s.error);
  return c;
}

}  // namespace dctchop::formats::detail
