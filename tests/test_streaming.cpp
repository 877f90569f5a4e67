// Tests of the streaming machinery (issue 4): the chunk pipeline that runs compress, decompress
// and verify (read on one thread, work on several, write in order), the direct-I/O output path,
// and the guarantee that what comes out does not depend on the number of threads.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "chunk_pipeline.hpp"
#include "pipeline_util.hpp"
#include "zip_writer.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/cores.hpp"
#include "dctchop/detail/run_parts.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/file_io.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/metrics.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using dctchop::formats::detail::chunk_stages;
using dctchop::formats::detail::run_chunks;
using dctchop::test::expect_error;
using dctchop::test::flip_byte;
using dctchop::test::read_bytes;
using dctchop::test::save_npy;
using dctchop::test::temp_dir;
using dctchop::test::write_bytes;
using u64 = std::uint64_t;
namespace fs = std::filesystem;

/** A failure that says which chunk and stage raised it. */
struct stage_failure : std::runtime_error {
  u64 chunk;
  stage_failure(const std::string& stage, u64 c)
      : std::runtime_error(stage + " failed at chunk " + std::to_string(c)), chunk(c) {}
};

void pause_us(unsigned us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

/** A pipeline over `total` chunks whose payload is the chunk number: read puts it in the slot,
 *  work squares it (after a chunk-dependent pause, so that workers finish out of order), write
 *  records it. */
struct counting_pipeline {
  u64 total;
  std::vector<u64> slot_value;
  std::vector<u64> written;  // writer thread only
  std::atomic<u64> reads{0};
  std::atomic<int> in_work{0}, most_in_work{0};
  chunk_stages stages;

  counting_pipeline(u64 n, std::size_t slots) : total(n), slot_value(slots) {
    stages.read = [this](u64 c, std::size_t s) {
      if (c >= total) return false;
      ++reads;
      slot_value[s] = c;
      return true;
    };
    stages.work = [this](u64 c, std::size_t s, unsigned) {
      const int now = ++in_work;
      int seen = most_in_work.load();
      while (now > seen && !most_in_work.compare_exchange_weak(seen, now)) {
      }
      pause_us(static_cast<unsigned>((c * 7919) % 13) * 150);
      slot_value[s] = c * c;
      --in_work;
    };
    stages.write = [this](u64 c, std::size_t s) {
      if (slot_value[s] != c * c) throw std::logic_error("slot holds another chunk");
      written.push_back(c);
    };
  }
};

TEST(ChunkPipeline, WritesEveryChunkOnceInOrderWhileWorkersFinishOutOfOrder) {
  for (unsigned workers : {1u, 2u, 4u}) {
    counting_pipeline p(97, workers + 2);
    const u64 n = run_chunks(workers + 2, workers, p.stages);
    EXPECT_EQ(n, 97u) << workers << " workers";
    ASSERT_EQ(p.written.size(), 97u) << workers << " workers";
    for (u64 i = 0; i < 97; ++i) EXPECT_EQ(p.written[i], i) << workers << " workers";
    // One worker never overlaps itself; several do overlap (the pauses make sure of it).
    if (workers == 1) {
      EXPECT_EQ(p.most_in_work.load(), 1);
    }
    if (workers == 4) {
      EXPECT_GT(p.most_in_work.load(), 1);
    }
  }
}

TEST(ChunkPipeline, OneSlotTakesEachChunkThroughEveryStageBeforeReadingTheNext) {
  counting_pipeline p(23, 1);
  auto read = p.stages.read;
  bool ahead = false;
  p.stages.read = [&](u64 c, std::size_t s) {
    if (p.written.size() != c) ahead = true;  // (the writer is idle while this runs)
    return read(c, s);
  };
  EXPECT_EQ(run_chunks(1, 1, p.stages), 23u);
  EXPECT_FALSE(ahead) << "a read while an earlier chunk was still in flight";
  ASSERT_EQ(p.written.size(), 23u);
  for (u64 i = 0; i < 23; ++i) EXPECT_EQ(p.written[i], i);
}

TEST(ChunkPipeline, ChunksTooLargeForThreeInTheBudgetTravelFewerAtATime) {
  // One slot holds every buffer of a chunk; the budget is 384 MiB. Small chunks: one per
  // worker, plus one read and one written. A 150 MiB chunk: two; a 512^3 f32 volume: one.
  // (A build without OpenMP, such as the TSan one, has one thread whatever is asked.)
  auto be = make_backend(backend_kind::cpu, {2});
  const unsigned workers = be->threads() > 1 ? 2u : 1u;
  const auto small = formats::detail::make_workers(*be, u64(4) << 20, 100);
  EXPECT_EQ(small.count(), workers);
  EXPECT_EQ(small.slots(), workers + 2u);
  const auto two = formats::detail::make_workers(*be, u64(150) << 20, 100);
  EXPECT_EQ(two.count(), 1u);
  EXPECT_EQ(two.slots(), 2u);
  const auto one = formats::detail::make_workers(*be, u64(512) << 20, 100);
  EXPECT_EQ(one.count(), 1u);
  EXPECT_EQ(one.slots(), 1u);
}

TEST(ChunkPipeline, NoMoreWorkersThanChunksOrTheCpusOfTheAffinityMask) {
  // 64 threads asked for, one chunk of work: one worker (each worker is a thread and a
  // backend of its own; --threads 1000 on a small file started a thousand threads, and
  // failed where the system allowed fewer). Eight chunks: at most eight. And no more than
  // the CPUs the process may run on: --threads 4096 on 2 of them started 600 workers, each
  // with a chunk's buffers, where 2 do the same work.
  auto be = make_backend(backend_kind::cpu, {64});
  if (be->threads() == 1) GTEST_SKIP() << "a build without OpenMP has one thread";
  const unsigned cpus = usable_cores().affinity;
  EXPECT_EQ(formats::detail::make_workers(*be, u64(1) << 10, 1).count(), 1u);
  EXPECT_EQ(formats::detail::make_workers(*be, u64(1) << 10, 8).count(), std::min(8u, cpus));
  EXPECT_EQ(formats::detail::make_workers(*be, u64(1) << 10, 1000).count(), std::min(64u, cpus));
  // The mask, not the machine: one CPU of it, one worker.
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  struct restore_mask {  // (whatever happens: this test's later checks run on every CPU)
    cpu_set_t mask;
    ~restore_mask() { sched_setaffinity(0, sizeof mask, &mask); }
  } restore{all};
  EXPECT_EQ(formats::detail::make_workers(*be, u64(1) << 10, 1000).count(), 1u);
}

TEST(RunParts, EveryPartRunsOnceOnQuietThreadsAndTheLowestFailingPartsErrorIsThrown) {
  // The HDF5 chunk decoder's and the loaders' threads: every part once, thread numbers below
  // min(parts, threads) (each thread's scratch), the started threads deaf to the signals the
  // tool handles, and the error a serial loop would have met first, whichever thread met it.
  constexpr std::size_t parts = 1000, threads = 4;
  std::vector<std::atomic<int>> runs(parts);
  std::mutex m;
  std::vector<std::thread::id> owner(threads);  // t's thread: one, for t's own scratch
  bool shared_t = false, t_out_of_range = false, hearing = false;
  std::atomic<bool> helped{false};
  const auto caller = std::this_thread::get_id();
  dctchop::detail::run_parts(parts, threads, [&](std::size_t i, std::size_t t) {
    runs[i].fetch_add(1);
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    {
      const std::lock_guard lock(m);
      if (t >= threads) {
        t_out_of_range = true;
        return;
      }
      if (owner[t] == std::thread::id()) owner[t] = std::this_thread::get_id();
      shared_t |= owner[t] != std::this_thread::get_id();
      hearing |= t > 0 && sigismember(&now, SIGINT) != 1;
    }
    if (t > 0) helped = true;
    // The caller waits (5 s at the most) for a started thread to take a part, so that some
    // part surely runs on one, however fast the caller would run them all.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (t == 0 && !helped && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  });
  for (std::size_t i = 0; i < parts; ++i) ASSERT_EQ(runs[i].load(), 1) << "part " << i;
  EXPECT_FALSE(t_out_of_range);
  EXPECT_FALSE(shared_t) << "a thread number given to two threads: their scratch would be shared";
  // (The started threads may take every part before the caller takes one.)
  EXPECT_TRUE(owner[0] == std::thread::id() || owner[0] == caller) << "thread 0 is the caller's";
  EXPECT_TRUE(helped) << "no part ran on a started thread";
  EXPECT_FALSE(hearing) << "parts on started threads that take SIGINT";
  std::atomic<std::size_t> top_thread{0};
  // More threads than parts: one a part at the most.
  dctchop::detail::run_parts(3, 64, [&](std::size_t, std::size_t t) {
    std::size_t seen = top_thread.load();
    while (t > seen && !top_thread.compare_exchange_weak(seen, t)) {
    }
  });
  EXPECT_LT(top_thread.load(), 3u);
  // Parts 300 and 700 fail: 300's error, on any number of threads; one thread stops there.
  for (std::size_t threads : {1u, 2u, 8u}) {
    std::vector<std::atomic<int>> ran(parts);
    try {
      dctchop::detail::run_parts(parts, threads, [&](std::size_t i, std::size_t) {
        ran[i].fetch_add(1);
        if (i == 300 || i == 700) throw std::runtime_error("part " + std::to_string(i));
      });
      ADD_FAILURE() << "no error on " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "part 300") << threads << " threads";
    }
    if (threads == 1) {
      EXPECT_EQ(ran[301].load(), 0) << "the serial loop went on after a failure";
    }
  }
}

TEST(ChunkPipeline, NoChunksMeansNoWorkAndNoWrites) {
  counting_pipeline p(0, 4);
  EXPECT_EQ(run_chunks(4, 2, p.stages), 0u);
  EXPECT_TRUE(p.written.empty());
}

TEST(ChunkPipeline, ReportsTheLowestFailingChunkEvenWhenAHigherOneFailsFirst) {
  // Chunk 30 fails at once; chunk 12 fails only after a long pause, so 30's failure comes
  // first in time. A sequential loop would meet 12 first, and so must the pipeline.
  for (int round = 0; round < 5; ++round) {
    counting_pipeline p(200, 6);
    p.stages.work = [&p](u64 c, std::size_t s, unsigned) {
      if (c == 12) {
        pause_us(20000);
        throw stage_failure("work", c);
      }
      if (c == 30) throw stage_failure("work", c);
      p.slot_value[s] = c * c;
    };
    try {
      run_chunks(6, 4, p.stages);
      FAIL() << "no failure reported";
    } catch (const stage_failure& e) {
      EXPECT_EQ(e.chunk, 12u) << e.what();
    }
    // Chunks before the failure were written, none from it on, and reading stopped early.
    ASSERT_EQ(p.written.size(), 12u);
    for (u64 i = 0; i < 12; ++i) EXPECT_EQ(p.written[i], i);
    EXPECT_LT(p.reads.load(), 200u);
  }
}

TEST(ChunkPipeline, AWorkFailureBeforeAReadFailureWins) {
  counting_pipeline p(100, 5);
  auto read = p.stages.read;
  p.stages.read = [&, read](u64 c, std::size_t s) {
    if (c == 9) throw stage_failure("read", c);
    return read(c, s);
  };
  p.stages.work = [&p](u64 c, std::size_t s, unsigned) {
    if (c == 7) {
      pause_us(10000);  // the read of chunk 9 fails meanwhile
      throw stage_failure("work", c);
    }
    p.slot_value[s] = c * c;
  };
  try {
    run_chunks(5, 3, p.stages);
    FAIL() << "no failure reported";
  } catch (const stage_failure& e) {
    EXPECT_EQ(e.chunk, 7u) << e.what();
    EXPECT_STREQ(e.what(), "work failed at chunk 7");
  }
}

TEST(ChunkPipeline, AWriteFailureStopsReadingAndIsRethrownAsItWas) {
  counting_pipeline p(1000, 4);
  p.stages.write = [&p](u64 c, std::size_t) {
    if (c == 5) throw error(errc::io, "disk full at chunk 5");
    p.written.push_back(c);
  };
  try {
    run_chunks(4, 2, p.stages);
    FAIL() << "no failure reported";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::io);
    EXPECT_STREQ(e.what(), "disk full at chunk 5");
  }
  EXPECT_EQ(p.written.size(), 5u);
  EXPECT_LE(p.reads.load(), 5u + 4u);  // at most one chunk per slot beyond the failure
}

/** What a cancel throws in these tests (the tool's own type is not an error either). */
struct cancel_asked {};

TEST(ChunkPipeline, ACancelBeforeAReadStopsEveryStageAndIsWhatRunChunksThrows) {
  // before_read throws before chunk 6's read: that chunk is never read, nothing from it on
  // is worked or written, and the cancel (not any error after it) comes out.
  counting_pipeline p(200, 4);
  std::atomic<int> calls{0};
  p.stages.before_read = [&] {
    if (++calls > 6) throw cancel_asked{};
  };
  std::atomic<bool> stop_writes{false}, stop_reads{false};
  p.stages.stop_writes = &stop_writes;
  p.stages.stop_reads = &stop_reads;
  EXPECT_THROW(run_chunks(4, 2, p.stages), cancel_asked);
  // (Six asks before the reads; a wait for a free slot of over 0.1 s asks too, so fewer.)
  EXPECT_LE(p.reads.load(), 6u);
  EXPECT_LE(p.written.size(), p.reads.load());
  for (u64 i = 0; i < p.written.size(); ++i) EXPECT_EQ(p.written[i], i);
  EXPECT_TRUE(stop_writes.load()) << "the outputs were told to give up";
  EXPECT_TRUE(stop_reads.load());
}

/** p's writer blocks on its first chunk (a pipe nobody reads) until `stop` is set, then gives
 *  up; one that never hears of it gives up after 20 s with another error, which fails the
 *  test instead of hanging it. */
void stall_writer(counting_pipeline& p, std::atomic<bool>& stop) {
  p.stages.stop_writes = &stop;
  p.stages.write = [&stop](u64, std::size_t) {
    for (int i = 0; i < 20000 && !stop.load(); ++i) pause_us(1000);
    if (!stop.load()) throw std::runtime_error("the writer was never told");
    throw error(errc::interrupted, "writing given up");
  };
}

TEST(ChunkPipeline, ACancelWhileTheWriterIsStalledTellsItToGiveUpAndWins) {
  // The writer stalls on chunk 0; the reading thread, out of free slots, asks before_read
  // every tenth of a second, and the third ask cancels.
  counting_pipeline p(100, 3);
  std::atomic<bool> stop_writes{false};
  stall_writer(p, stop_writes);
  std::atomic<int> asks{0};
  p.stages.before_read = [&] {
    if (p.reads.load() >= 3 && ++asks >= 3) throw cancel_asked{};
  };
  EXPECT_THROW(run_chunks(3, 1, p.stages), cancel_asked);
  EXPECT_TRUE(stop_writes.load());
  EXPECT_TRUE(p.written.empty());
}

TEST(ChunkPipeline, ACancelAfterEverythingIsReadStillReachesAStalledWriter) {
  // Two chunks, both read at once; the writer stalls on the first and the reading thread
  // waits for it to finish, still asking before_read.
  counting_pipeline p(2, 4);
  std::atomic<bool> stop_writes{false};
  stall_writer(p, stop_writes);
  std::atomic<int> asks{0};
  p.stages.before_read = [&] {
    if (p.reads.load() == 2 && ++asks >= 3) throw cancel_asked{};
  };
  EXPECT_THROW(run_chunks(4, 2, p.stages), cancel_asked);
  EXPECT_TRUE(stop_writes.load());
}

TEST(ChunkPipeline, AReadThatFailsWhileACancelIsPendingIsTheCancel) {
  // A watched read gives up on a cancel (or a signal interrupts it): the read's own error is
  // its consequence, and the cancel is what run_chunks throws.
  counting_pipeline p(50, 4);
  std::atomic<bool> pending{false};
  auto read = p.stages.read;
  p.stages.read = [&, read](u64 c, std::size_t s) {
    if (c == 4) {
      pending = true;
      throw error(errc::interrupted, "reading given up");
    }
    return read(c, s);
  };
  p.stages.before_read = [&] {
    if (pending.load()) throw cancel_asked{};
  };
  EXPECT_THROW(run_chunks(4, 2, p.stages), cancel_asked);
  // Without a cancel pending, the read's error is the failure, as before.
  counting_pipeline q(50, 4);
  auto qread = q.stages.read;
  q.stages.read = [&, qread](u64 c, std::size_t s) {
    if (c == 4) throw stage_failure("read", c);
    return qread(c, s);
  };
  q.stages.before_read = [] {};
  EXPECT_THROW(run_chunks(4, 2, q.stages), stage_failure);
  EXPECT_EQ(q.written.size(), 4u) << "the chunks before it were written";
}

TEST(ChunkPipeline, ExceptionsOfAnyTypePassThrough) {
  // The command-line tool's progress callback throws its own type on a signal.
  counting_pipeline p(50, 4);
  p.stages.write = [](u64 c, std::size_t) {
    if (c == 3) throw 42;
  };
  try {
    run_chunks(4, 2, p.stages);
    FAIL() << "no failure reported";
  } catch (int v) {
    EXPECT_EQ(v, 42);
  }
}

// ---- output_file: direct I/O and buffered writes give the same file

std::string pattern(std::size_t n, unsigned seed) {
  // splitmix64, 8 bytes a step: 100 MB of it took 30 s under ThreadSanitizer a byte at a time.
  std::string s(n, '\0');
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(s.data() + i, &z, std::min<std::size_t>(8, n - i));
  }
  return s;
}

/** Writes `bytes` through output_file in pieces of random sizes (some larger than the 8 MiB
 *  staging buffer) and commits. Returns whether direct I/O was in use. */
bool write_in_pieces(const std::string& path, const std::string& bytes, bool direct_io,
                     unsigned seed) {
  auto f = formats::output_file::create(path, true, direct_io);
  const bool direct = f.direct();
  std::mt19937 rng(seed);
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t most = (rng() % 4 == 0) ? (std::size_t(11) << 20) : 70000;
    const std::size_t k = std::min<std::size_t>(bytes.size() - at, 1 + rng() % most);
    f.write(bytes.data() + at, k);
    at += k;
    EXPECT_EQ(f.position(), at);
  }
  f.commit();
  return direct;
}

TEST(OutputFile, DirectAndBufferedWritesGiveTheSameBytesAtEverySizeAroundTheBlocks) {
  temp_dir dir;
  const std::size_t mib8 = std::size_t(8) << 20;
  bool any_direct = false;
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(4095), std::size_t(4096),
                        std::size_t(4097), mib8 - 1, mib8, mib8 + 1, 3 * mib8 + 12345}) {
    const std::string bytes = pattern(n, static_cast<unsigned>(n));
    for (bool direct_io : {true, false}) {
      const std::string path = dir.file(std::string("out_").append(std::to_string(n)).append(direct_io ? "_d" : "_b"));
      const bool direct = write_in_pieces(path, bytes, direct_io, static_cast<unsigned>(n) + 1);
      if (!direct_io) {
        EXPECT_FALSE(direct);
      }
      any_direct = any_direct || direct;
      EXPECT_EQ(fs::file_size(path), n);
      EXPECT_TRUE(read_bytes(path) == bytes) << n << " bytes, direct " << direct;
    }
  }
  // Which path ran depends on the file system; say it in the test's record.
  ::testing::Test::RecordProperty("direct_io_used", any_direct ? "yes" : "no (not supported here)");
  // Nothing but the outputs is left behind (no temporary names).
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().rfind("out_", 0), 0u) << e.path();
  }
  // Where the file system refuses O_DIRECT both ran buffered: what the name claims went
  // untested (the buffered results above still count).
  if (!any_direct) GTEST_SKIP() << "no direct I/O on this file system (DCTCHOP_TMP)";
}

TEST(OutputFile, AnUncommittedDirectOutputLeavesNothingBehind) {
  temp_dir dir;
  {
    auto f = formats::output_file::create(dir.file("never.bin"), false, true);
    if (!f.direct()) GTEST_SKIP() << "no direct I/O on this file system (DCTCHOP_TMP)";
    const std::string bytes = pattern(std::size_t(20) << 20, 7);
    f.write(bytes.data(), bytes.size());
  }  // destroyed without commit()
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(OutputFile, OnTmpfsWritesAreBufferedWhereDirectIOWouldOnlyAddACopy) {
  // tmpfs takes O_DIRECT since Linux 6.6 (as buffered writes); an output there is buffered.
  struct statfs info {};
  if (::statfs("/dev/shm", &info) != 0 || info.f_type != TMPFS_MAGIC) {
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  }
  const std::string path = "/dev/shm/dctchop_test_" + std::to_string(::getpid()) + ".bin";
  // Before Linux 6.6 tmpfs refuses O_DIRECT, and the writer declines it anyway.
  const int probe = ::open(path.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (probe < 0) {
    ::unlink(path.c_str());  // (made before the open failed, on some kernels)
    GTEST_SKIP() << "this tmpfs takes no O_DIRECT: nothing to decline";
  }
  ::close(probe);
  const std::string bytes = pattern((std::size_t(9) << 20) + 5, 4);
  EXPECT_FALSE(write_in_pieces(path, bytes, true, 8));
  EXPECT_TRUE(read_bytes(path) == bytes);
  fs::remove(path);
}

// ---- reads split over several threads (input_file::read_at with threads)

TEST(InputFile, ASplitReadTakesPiecesBetweenPageBoundariesOfTheFileOnAtMostItsThreads) {
  using plan = formats::input_file;
  const std::size_t mib = std::size_t(1) << 20;
  for (std::uint64_t offset : {std::uint64_t(0), std::uint64_t(128), std::uint64_t(4095),
                               std::uint64_t(4096), (std::uint64_t(5) << 30) + 77}) {
    for (unsigned t : {0U, 1U, 2U, 3U, 4U, 8U, 100U, 4096U}) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), 2 * mib - 1, 2 * mib, 4 * mib - 1,
                            4 * mib, 8 * mib, 8 * mib + 1, 64 * mib - 7, 1024 * mib}) {
        const auto p = plan::plan_split(offset, n, t);
        const std::string at = std::to_string(n) + " bytes at " + std::to_string(offset) +
                               " on " + std::to_string(t) + " threads";
        ASSERT_GE(p.count, 1U) << at;
        EXPECT_LE(p.count, std::max(t, 1U)) << at;
        EXPECT_LE(p.count, 64U) << at;
        EXPECT_EQ(p.start(0), 0U) << at;
        EXPECT_EQ(p.start(p.count), n) << at;
        if (p.count == 1) {
          // Unsplit: no second thread for less than two pieces' worth.
          EXPECT_TRUE(t <= 1 || n < 2 * plan::split_piece) << at;
          continue;
        }
        // As many pieces as the threads, or as 2 MiB pieces fit.
        EXPECT_EQ(p.count, std::min<std::size_t>({t, n / plan::split_piece, 64})) << at;
        for (std::size_t i = 1; i < p.count; ++i) {
          EXPECT_EQ((offset + p.start(i)) % 4096, 0U) << at << ", piece " << i;
        }
        for (std::size_t i = 0; i < p.count; ++i) {  // each about a share, 2 MiB or nearly
          const std::size_t size = p.start(i + 1) - p.start(i);
          EXPECT_GE(size + 4096 * p.count, n / p.count) << at << ", piece " << i;
          EXPECT_LE(size, n / p.count + 4096) << at << ", piece " << i;
          EXPECT_GE(size, plan::split_piece - 4096 * p.count) << at << ", piece " << i;
        }
      }
    }
  }
  EXPECT_EQ(plan::plan_split(0, 8 * mib, 4).start(1), 2 * mib);
  EXPECT_EQ(plan::plan_split(128, 8 * mib, 4).start(1), 2 * mib + 4096 - 128);
  EXPECT_EQ(plan::plan_split(0, 8 * mib, 8).count, 4U);
}

TEST(InputFile, ASplitReadGivesTheBytesOfOneReadAtAnyOffsetSizeAndThreadCount) {
  temp_dir dir;
  const std::string bytes = pattern((std::size_t(13) << 20) + 4321, 11);
  write_bytes(dir.file("in.bin"), bytes);
  const auto f = formats::input_file::open(dir.file("in.bin"));
  const std::size_t mib = std::size_t(1) << 20;
  std::string got;
  got.reserve(bytes.size());
  for (std::size_t offset : {std::size_t(0), std::size_t(1), std::size_t(4095), 3 * mib + 17}) {
    for (std::size_t n : {std::size_t(0), std::size_t(100), 4 * mib, 4 * mib + 3, 9 * mib + 1,
                          bytes.size() - offset}) {
      for (unsigned t : {1U, 2U, 3U, 4U, 8U}) {
        got.assign(n, '\0');  // (one buffer: fresh pages for each read took most of the time)
        f.read_at(offset, got.data(), n, "rows", t);
        EXPECT_TRUE(std::memcmp(got.data(), bytes.data() + offset, n) == 0)
            << n << " bytes at " << offset << " on " << t << " threads";
      }
    }
  }
}

// The split reads' threads in this process (named dctchop-read in /proc/self/task).
std::size_t read_threads() {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == "dctchop-read") ++n;
  }
  return n;
}

// read_threads() once it is `want`: a joined thread leaves /proc/self/task a moment after
// pthread_join returns. At most 10 s.
std::size_t read_threads_settled(std::size_t want) {
  std::size_t n = read_threads();
  for (int i = 0; i < 1000 && n != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = read_threads();
  }
  return n;
}

TEST(InputFile, ASplitReadsThreadsAreTheFilesOwnKeptFromReadToReadUntilItCloses) {
  temp_dir dir;
  const std::string bytes = pattern(std::size_t(13) << 20, 8);  // 6 pieces of 2 MiB or more
  write_bytes(dir.file("in.bin"), bytes);
  ASSERT_EQ(read_threads_settled(0), 0U);
  {
    auto f = formats::input_file::open(dir.file("in.bin"));
    EXPECT_EQ(read_threads(), 0U);  // none until a read needs them
    std::string got(bytes.size(), '\0');
    f.read_at(0, got.data(), got.size(), "rows", 1);
    EXPECT_EQ(read_threads(), 0U);
    f.read_at(0, got.data(), got.size(), "rows", 4);
    EXPECT_TRUE(got == bytes);
    EXPECT_EQ(read_threads(), 3U);  // the caller reads one piece
    for (unsigned t : {4U, 2U, 3U, 4U, 2U, 4U}) {  // the same three, read after read
      std::string again(bytes.size(), '\0');
      f.read_at(4096, again.data(), again.size() - 4096, "rows", t);
      EXPECT_TRUE(again.substr(0, again.size() - 4096) == bytes.substr(4096)) << t;
      EXPECT_EQ(read_threads(), 3U) << t;
    }
    f.read_at(0, got.data(), got.size(), "rows", 6);  // more pieces, more threads
    EXPECT_TRUE(got == bytes);
    EXPECT_EQ(read_threads(), 5U);
    // A file moved to another takes them along, and they read for it; the file moved from
    // reads nothing, and says so.
    formats::input_file moved = std::move(f);
    got.assign(got.size(), '\0');
    moved.read_at(0, got.data(), got.size(), "rows", 6);
    EXPECT_TRUE(got == bytes);
    EXPECT_EQ(read_threads(), 5U);
    expect_error([&] { f.read_at(0, got.data(), got.size(), "rows", 6); },
                 errc::io, {"cannot read"});
    // Another file put in its place: the old one's threads end with it.
    moved = formats::input_file::open(dir.file("in.bin"));
    EXPECT_EQ(read_threads_settled(0), 0U);
    moved.read_at(0, got.data(), got.size(), "rows", 2);
    EXPECT_TRUE(got == bytes);
    EXPECT_EQ(read_threads(), 1U);
  }
  EXPECT_EQ(read_threads_settled(0), 0U);  // joined when the files closed
}

TEST(InputFile, SplitReadsOfOneFileFromSeveralThreadsAtOnceEachGetTheirBytes) {
  temp_dir dir;
  const std::size_t mib = std::size_t(1) << 20;
  const std::string bytes = pattern(24 * mib + 400, 9);
  write_bytes(dir.file("in.bin"), bytes);
  const auto f = formats::input_file::open(dir.file("in.bin"));
  std::vector<std::string> got(4);
  std::vector<std::thread> readers;
  for (std::size_t r = 0; r < got.size(); ++r) {
    readers.emplace_back([&, r] {
      for (int k = 0; k < 5; ++k) {  // 4 readers of 6 MiB at different places, 5 times each
        std::string part(6 * mib, '\0');
        const std::size_t at = r * 6 * mib + 77 * static_cast<std::size_t>(k);
        try {
          f.read_at(at, part.data(), part.size(), "rows", 3 + static_cast<unsigned>(r % 2));
        } catch (const std::exception& e) {
          got[r] = e.what();
          return;
        }
        if (part != bytes.substr(at, part.size())) return;
      }
      got[r] = "ok";
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(got, std::vector<std::string>(4, "ok"));
}

TEST(InputFile, AProcessForkedAfterSplitReadsReadsOnItsOwnThread) {
  temp_dir dir;
  const std::string bytes = pattern(std::size_t(10) << 20, 6);
  write_bytes(dir.file("in.bin"), bytes);
  auto f = formats::input_file::open(dir.file("in.bin"));
  std::string got(bytes.size(), '\0');
  f.read_at(0, got.data(), got.size(), "rows", 4);  // the crew is started in this process
  ASSERT_TRUE(got == bytes);
  // The child inherits the file and its crew's state but none of its threads (a PyTorch
  // DataLoader worker forked after the main process read): its split reads must not wait for
  // them, nor its closing of the file.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string mine(bytes.size(), '\0');
    f.read_at(0, mine.data(), mine.size(), "rows", 4);
    const bool same = mine == bytes;
    mine.assign(mine.size(), '\0');
    f.read_at(0, mine.data(), mine.size(), "rows", 8);
    { const formats::input_file closed = std::move(f); }  // (its crew's waiters are the parent's)
    ::_exit(same && mine == bytes ? 0 : 1);
  }
  int status = 0;
  for (int waited = 0; waited < 300; ++waited) {  // 30 s at most: a hang is the failure
    if (::waitpid(child, &status, WNOHANG) == child) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waited == 299) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL() << "the forked child's split read hung";
    }
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(InputFile, ASplitReadPastTheEndOrOfAFileThatShrankIsTruncatedAsOneReadIs) {
  temp_dir dir;
  const std::size_t n = std::size_t(12) << 20;
  write_bytes(dir.file("in.bin"), pattern(n, 5));
  auto f = formats::input_file::open(dir.file("in.bin"));
  f.set_truncation_code(errc::bad_input);
  std::string got(n, '\0');
  expect_error([&] { f.read_at(100, got.data(), n, "rows", 4); }, errc::bad_input,
               {"in.bin", "truncated: rows lies past the end"});
  // The file loses its second half after the open: the pieces there find its end.
  fs::resize_file(dir.file("in.bin"), n / 2 + 12345);
  expect_error([&] { f.read_at(0, got.data(), n, "rows", 4); }, errc::bad_input,
               {"in.bin", "truncated: end of file inside rows"});
  expect_error([&] { f.read_at(0, got.data(), n, "rows", 1); }, errc::bad_input,
               {"in.bin", "truncated: end of file inside rows"});
  // Where the pieces that remain lie, the split read still reads them.
  f.read_at(0, got.data(), n / 2, "rows", 4);
  EXPECT_TRUE(got.substr(0, n / 2) == pattern(n, 5).substr(0, n / 2));
}

TEST(SplitReads, RowsOfNpyNpzAndRawFilesReadOnSeveralThreadsAreTheRowsReadOnOne) {
  temp_dir dir;
  const std::vector<u64> shape = {60, 256, 256, 3};  // 11.8 MB: 5 pieces of 2 MiB or more
  const u64 image = 256 * 256 * 3;
  const std::string values = pattern(60 * image, 3);
  save_npy(dir.file("x.npy"), dtype::u8, shape,
           std::vector<std::uint8_t>(values.begin(), values.end()));
  write_bytes(dir.file("x.raw"), values);
  auto make_npz = [&](const std::string& name) {
    auto out = formats::output_file::create(dir.file(name), true);
    formats::detail::zip_writer z(out);
    z.begin_member("x.npy");
    const std::string npy = read_bytes(dir.file("x.npy"));
    z.write(npy.data(), npy.size());
    z.end_member();
    z.finish();
    out.commit();
  };
  make_npz("x.npz");
  for (const char* name : {"x.npy", "x.npz", "x.raw"}) {
    formats::dataset_spec spec =
        formats::parse_dataset_spec(dir.file(name), {}, std::string(name) == "x.raw");
    if (spec.kind == formats::file_kind::raw) {
      spec.raw_type = formats::npy_dtype_of(dtype::u8);
      spec.raw_shape = shape;
    }
    for (unsigned t : {1U, 2U, 4U, 8U}) {
      spec.read_threads = t;
      const auto src = formats::open_dataset(spec);
      std::string got(50 * image, '\0');
      src->read_rows(7, 50, got.data());  // 9.8 MB from an offset that is no page's
      EXPECT_TRUE(got == values.substr(7 * image, 50 * image)) << name << " on " << t;
      got.resize(60 * image);
      src->read_rows(0, 60, got.data());  // to the end: a .npz member checks its CRC-32 now
      EXPECT_TRUE(got == values) << name << " on " << t;
    }
  }
  // A stored member whose bytes changed fails its CRC-32 however its rows were read.
  make_npz("bad.npz");
  flip_byte(dir.file("bad.npz"), 5 << 20);
  for (unsigned t : {1U, 4U}) {
    formats::dataset_spec spec = formats::parse_dataset_spec(dir.file("bad.npz"));
    spec.read_threads = t;
    const auto src = formats::open_dataset(spec);
    std::string got(60 * image, '\0');
    expect_error([&] { src->read_rows(0, 60, got.data()); }, errc::bad_input,
                 {"bad.npz", "CRC"});
  }
}

// ---- the results do not depend on the number of threads

/** f32 fields with a deterministic pattern, 24 samples of 40x36. */
std::vector<float> fields(u64 n, u64 h, u64 w) {
  std::vector<float> v(n * h * w);
  for (u64 i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(std::sin(0.013 * double(i)) * 50.0 + double(i % 17));
  }
  return v;
}

TEST(StreamingThreads, ArchivesAndFiguresAreTheSameForOneTwoAndFiveThreads) {
  temp_dir dir;
  const std::string in = dir.file("in.npy");
  save_npy(in, dtype::f32, {24, 40, 36}, fields(24, 40, 36));
  std::vector<std::string> chunks_seen;
  std::vector<std::string> footers, decoded;
  for (int threads : {1, 2, 5}) {
    auto be = make_backend(backend_kind::cpu, {threads});
    formats::compress_options o;
    o.chop = 3;
    o.chunk_mb = 0.003;  // three samples per chunk: many chunks in flight
    o.threads = threads;
    const std::string out = dir.file(std::to_string(threads).append("t.dcz"));
    const auto r = formats::compress_npy(in, out, *be, o);
    EXPECT_GT(r.chunks, 4u);
    auto ar = formats::archive_reader::open(out);
    std::string payload;
    std::vector<std::byte> buf;
    for (std::size_t c = 0; c < ar.chunks().size(); ++c) {
      ar.read_chunk(c, buf);
      payload.append(reinterpret_cast<const char*>(buf.data()), buf.size());
    }
    chunks_seen.push_back(payload);
    footers.push_back(ar.footer().dump());
    const std::string back = dir.file(std::to_string(threads).append("t.npy"));
    formats::decompress_to_npy(out, back, *be, {});
    decoded.push_back(read_bytes(back));
    EXPECT_TRUE(formats::verify_archive(out, in, *be, {}).passed());
  }
  for (std::size_t i = 1; i < chunks_seen.size(); ++i) {
    EXPECT_TRUE(chunks_seen[i] == chunks_seen[0]) << "coefficients differ, run " << i;
    EXPECT_EQ(footers[i], footers[0]) << "footer (quality figures) differs, run " << i;
    EXPECT_TRUE(decoded[i] == decoded[0]) << "decoded data differs, run " << i;
  }
}

TEST(StreamingThreads, TheFirstBadSampleIsNamedWhateverTheThreadCount) {
  // NaN in samples 5 and 19: each thread count must name sample 5, the first.
  temp_dir dir;
  const std::string in = dir.file("nan.npy");
  auto v = fields(24, 40, 36);
  v[5 * 40 * 36 + 100] = std::numeric_limits<float>::quiet_NaN();
  v[19 * 40 * 36 + 7] = std::numeric_limits<float>::quiet_NaN();
  save_npy(in, dtype::f32, {24, 40, 36}, v);
  for (int threads : {1, 3, 6}) {
    auto be = make_backend(backend_kind::cpu, {threads});
    formats::compress_options o;
    o.chunk_mb = 0.006;
    o.measure_quality = false;
    const std::string out = dir.file(std::to_string(threads).append("nan.dcz"));
    try {
      formats::compress_npy(in, out, *be, o);
      ADD_FAILURE() << "NaN input accepted with " << threads << " threads";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::bad_input);
      EXPECT_NE(std::string(e.what()).find("sample 5"), std::string::npos)
          << threads << " threads: " << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
  }
}

/** The CPU backend of one thread, that says it runs on `n` and splits into single-threaded
 *  copies, as the OpenMP build's does: so that eval's kept threads (pass_crew) run in the
 *  ThreadSanitizer build too, which has no OpenMP. */
class split_backend final : public backend {
 public:
  explicit split_backend(int n) : n_(n) {}
  std::string name() const override { return "cpu"; }
  void encode(const codec_params& p, const const_sample_view& in,
              std::span<std::byte> coeffs) override {
    inner_->encode(p, in, coeffs);
  }
  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& out) override {
    inner_->decode(p, coeffs, out);
  }
  int threads() const override { return n_; }
  std::unique_ptr<backend> single_threaded() const override {
    return make_backend(backend_kind::cpu, {1});
  }

 private:
  int n_;
  std::unique_ptr<backend> inner_ = make_backend(backend_kind::cpu, {1});
};

TEST(StreamingThreads, EvalsPassesInPartsOnKeptThreadsGiveOneThreadsFiguresAndFirstBadSample) {
  // 24 samples of 256 x 192 f32 (1.1 Mi values): each of eval's passes goes in parts to the
  // threads it keeps (where the process may use 2 CPUs or more), many passes a setting. The
  // figures are one thread's; a NaN in samples 19 and 22 is named at 19.
  temp_dir dir;
  const std::string in = dir.file("in.npy");
  auto v = fields(24, 256, 192);
  save_npy(in, dtype::f32, {24, 256, 192}, v);
  formats::eval_options o;
  o.chops = {2, 4};
  o.min_seconds = 0.05;
  const auto one = formats::eval_npy(in, *make_backend(backend_kind::cpu, {1}), o);
  split_backend three(3);
  const auto split = formats::eval_npy(in, three, o);
  ASSERT_EQ(split.rows.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(split.rows[i].error.empty()) << split.rows[i].error;
    EXPECT_GE(split.rows[i].passes, 1u);
    EXPECT_EQ(split.rows[i].q.psnr_db, one.rows[i].q.psnr_db);
    EXPECT_EQ(split.rows[i].q.ssim, one.rows[i].q.ssim);
    EXPECT_EQ(split.rows[i].q.max_abs_error, one.rows[i].q.max_abs_error);
  }
  v[19 * 256 * 192 + 5] = std::numeric_limits<float>::quiet_NaN();
  v[22 * 256 * 192 + 9] = std::numeric_limits<float>::quiet_NaN();
  save_npy(dir.file("nan.npy"), dtype::f32, {24, 256, 192}, v);
  o.ssim = false;  // (no range pass: the NaN is met by the codec)
  try {
    (void)formats::eval_npy(dir.file("nan.npy"), three, o);
    ADD_FAILURE() << "NaN input accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::bad_input);
    EXPECT_NE(std::string(e.what()).find("sample 19"), std::string::npos) << e.what();
  }
}

/** Dataset `name` of an HDF5 file, whole, as u8, read with the C API; its layout and the
 *  file offset of its data (HADDR_UNDEF when it has none of its own). */
std::vector<std::uint8_t> read_h5_u8(const std::string& file, const std::string& name,
                                     H5D_layout_t& layout, haddr_t& offset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << name;
  const hid_t sp = H5Dget_space(d);
  hsize_t dims[8] = {};
  const int nd = H5Sget_simple_extent_dims(sp, dims, nullptr);
  u64 n = 1;
  for (int i = 0; i < nd; ++i) n *= dims[i];
  std::vector<std::uint8_t> v(n);
  EXPECT_GE(H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  const hid_t dcpl = H5Dget_create_plist(d);
  layout = H5Pget_layout(dcpl);
  offset = H5Dget_offset(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

TEST(StreamingHdf5, DecodedHdf5EqualsDecodedNpyWrittenDirectlyInWholeBlocksAndATailOrThroughHdf5) {
  // The data goes into one contiguous block that HDF5 allocates, 4 KiB-aligned, at its
  // creation, and dctchop writes there itself (direct path): 200 rows of 64x64x3 (12 KiB,
  // whole 4 KiB blocks); 150 rows of 33x35 (the last block partial, written through the page
  // cache, never past the data); 2500 rows of 33x35x3 (8.3 MiB: several 8 MiB buffers, then a
  // partial block). Under 64 KiB (20 rows of 16x16) HDF5 writes it. Each must read back,
  // through the HDF5 C API, equal to the NPY output.
  struct shape_case {
    std::vector<u64> shape;
    layout lay;
  };
  for (const auto& c : {shape_case{{200, 64, 64, 3}, layout::nhwc},
                        shape_case{{150, 33, 35}, layout::nhw},
                        shape_case{{2500, 33, 35, 3}, layout::nhwc},
                        shape_case{{20, 16, 16}, layout::nhw}}) {
    temp_dir dir;
    u64 n = 1;
    for (auto d : c.shape) n *= d;
    std::vector<std::uint8_t> v(n);
    for (u64 i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 131 + i / 977) % 256);
    const std::string in = dir.file("in.npy");
    save_npy(in, dtype::u8, c.shape, v);
    auto be = make_backend(backend_kind::cpu, {2});
    formats::compress_options o;
    o.chunk_mb = 0.1;  // several archive chunks, not aligned with the 4 KiB blocks
    o.measure_quality = false;
    const std::string dcz = dir.file("a.dcz");
    formats::compress_npy(in, dcz, *be, o);
    formats::decompress_to_npy(dcz, dir.file("back.npy"), *be, {});
    formats::decompress(dcz, formats::parse_dataset_spec(dir.file("back.h5") + ":/x/images"), *be,
                        {});
    const auto npy = dctchop::test::load_npy(dir.file("back.npy"));
    H5D_layout_t layout = H5D_LAYOUT_ERROR;
    haddr_t offset = HADDR_UNDEF;
    const auto h5 = read_h5_u8(dir.file("back.h5"), "/x/images", layout, offset);
    ASSERT_EQ(h5.size(), npy.raw.size());
    EXPECT_TRUE(std::memcmp(h5.data(), npy.raw.data(), h5.size()) == 0) << c.shape[0] << " rows";
    EXPECT_EQ(layout, H5D_CONTIGUOUS) << c.shape[0] << " rows";
    if (n >= 65536) {
      ASSERT_NE(offset, HADDR_UNDEF);
      EXPECT_EQ(offset % 4096, 0u) << c.shape[0] << " rows: the data starts on a 4 KiB block";
    }
  }
}

TEST(QualityAccumulator, MeasuringBatchesApartThenAddingThemInOrderEqualsOneAdd) {
  const u64 n = 9, h = 20, w = 18;
  std::vector<std::uint8_t> a(n * h * w), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::uint8_t>((i * 37) % 251);
    b[i] = static_cast<std::uint8_t>(a[i] + (i % 5) - 2);
  }
  geometry g;
  g.lay = layout::nhw;
  g.samples = n;
  g.height = h;
  g.width = w;
  g.planes = 1;
  quality_accumulator whole(dtype::u8, std::nullopt, true), parts(dtype::u8, std::nullopt, true);
  whole.add(make_view(g, dtype::u8, static_cast<const void*>(a.data()), n),
            make_view(g, dtype::u8, static_cast<const void*>(b.data()), n), 1);
  // Batches of 4, 1 and 4 samples, measured in reverse order, added in sample order.
  std::vector<quality_batch> batches(3);
  const u64 starts[] = {0, 4, 5}, counts[] = {4, 1, 4};
  for (int k = 2; k >= 0; --k) {
    const u64 off = starts[k] * h * w;
    batches[static_cast<std::size_t>(k)] = parts.measure(
        make_view(g, dtype::u8, static_cast<const void*>(a.data() + off), counts[k]),
        make_view(g, dtype::u8, static_cast<const void*>(b.data() + off), counts[k]), 1);
  }
  for (const auto& bt : batches) parts.add(bt);
  const quality x = whole.result(), y = parts.result();
  dctchop::test::expect_same_figures(x, y);
  ASSERT_TRUE(x.ssim.has_value());
  EXPECT_GT(x.mse, 0.0);
}

}  // namespace

namespace {

TEST(MemoryInput, AnArrayInMemoryCompressesAsTheSameArrayInAFileWithLabels) {
  // The Python binding's dctchop.compress(array) reads the caller's memory through
  // dataset_spec::memory: the archive must decode as that of the same data as .npy.
  temp_dir dir;
  const u64 n = 9;
  const auto x = dctchop::test::smooth_u8_nhwc(static_cast<int>(n), 20, 18, 3);
  std::vector<std::int32_t> y(n);
  for (u64 i = 0; i < n; ++i) y[i] = static_cast<std::int32_t>(i * 5);
  save_npy(dir.file("x.npy"), dtype::u8, {n, 20, 18, 3}, x);
  auto be = make_backend(backend_kind::cpu, {2});
  formats::compress_options o;
  o.chunk_mb = 0.002;  // several chunks
  const auto from_file = formats::compress(formats::parse_dataset_spec(dir.file("x.npy")),
                                           dir.file("file.dcz"), *be, o);
  formats::dataset_spec mem;
  mem.path = "<array>";
  mem.memory = formats::dataset_spec::memory_array{formats::npy_dtype_of(dtype::u8), {n, 20, 18, 3},
                                                   x.data()};
  formats::dataset_spec labels;
  labels.path = "<labels>";
  labels.memory = formats::dataset_spec::memory_array{*formats::parse_npy_descr("<i4"), {n}, y.data()};
  o.labels = labels;
  const auto from_memory = formats::compress(mem, dir.file("mem.dcz"), *be, o);
  EXPECT_EQ(from_memory.source, "<array>");
  EXPECT_EQ(from_memory.labels_source, "<labels>");
  EXPECT_EQ(from_memory.chunks, from_file.chunks);
  ASSERT_TRUE(from_memory.q && from_file.q);
  EXPECT_EQ(from_memory.q->mse, from_file.q->mse);
  auto a = formats::archive_reader::open(dir.file("mem.dcz"));
  auto b = formats::archive_reader::open(dir.file("file.dcz"));
  std::vector<std::byte> ca(n * a.header().coeff_bytes_per_sample()), cb(ca.size());
  a.read_samples(0, n, ca);
  b.read_samples(0, n, cb);
  EXPECT_EQ(ca, cb) << "the same coefficients";
  const auto stored = a.read_side_array("labels");
  ASSERT_TRUE(stored.has_value());
  ASSERT_EQ(stored->size(), n * sizeof(std::int32_t));
  EXPECT_EQ(std::memcmp(stored->data(), y.data(), stored->size()), 0);
  // A 0-d array holds no samples: an error naming it.
  formats::dataset_spec scalar = mem;
  scalar.memory->shape.clear();
  dctchop::test::expect_error([&] { formats::compress(scalar, dir.file("s.dcz"), *be, o); },
                              errc::bad_input, {"<array>", "0-d"});
}

}  // namespace
