// Tests of the archive loader (issue 6, part 1): every sample once per epoch, shuffles that
// differ between epochs and repeat for a seed, chunk-aware order, shards that partition the
// dataset, prefetch that changes nothing, and a saved state that resumes at the same batch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/npy.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/loader.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using dctchop::test::temp_dir;
using u64 = std::uint64_t;

/** dir/a.dcz: samples that hold their own index; 5 samples per chunk, labels = index * 3. */
std::string make_archive(const temp_dir& dir, u64 n) {
  return dctchop::test::make_index_archive(dir, n, 5, true);
}

std::vector<u64> all_samples(loaders::archive_loader& l, u64 batches) {
  std::vector<u64> s;
  for (u64 i = 0; i < batches; ++i) {
    const auto b = l.next();
    s.insert(s.end(), b.samples.begin(), b.samples.end());
  }
  return s;
}

TEST(Loader, EveryEpochHoldsEverySampleOnceAndItsDataAndLabelsAreThatSample) {
  temp_dir dir;
  const auto a = make_archive(dir, 103);
  loaders::loader_options o;
  o.batch_size = 10;
  o.drop_last = false;
  o.seed = 7;
  loaders::archive_loader l(a, o);
  EXPECT_EQ(l.samples(), 103u);
  EXPECT_EQ(l.batches_per_epoch(), 11u);  // 10 full batches and one of 3
  EXPECT_EQ(l.sample_bytes(), 256u);
  EXPECT_EQ(l.label_bytes(), 4u);
  for (u64 epoch = 0; epoch < 2; ++epoch) {
    std::vector<u64> seen;
    for (u64 i = 0; i < l.batches_per_epoch(); ++i) {
      const auto b = l.next();
      EXPECT_EQ(b.epoch, epoch);
      EXPECT_EQ(b.index, i);
      EXPECT_EQ(b.samples.size(), i < 10 ? 10u : 3u);
      for (std::size_t k = 0; k < b.samples.size(); ++k) {
        const u64 s = b.samples[k];
        seen.push_back(s);
        // Decoded data: every value is s mod 256; label: s * 3.
        for (u64 x = 0; x < 256; ++x) {
          ASSERT_EQ(static_cast<u64>(b.data[k * 256 + x]), s % 256) << "sample " << s;
        }
        std::int32_t label = 0;
        std::memcpy(&label, b.labels.data() + k * 4, 4);
        EXPECT_EQ(label, static_cast<std::int32_t>(s * 3));
      }
    }
    std::sort(seen.begin(), seen.end());
    std::vector<u64> want(103);
    for (u64 i = 0; i < 103; ++i) want[i] = i;
    EXPECT_EQ(seen, want) << "epoch " << epoch;
  }
}

TEST(Loader, ShufflesDifferBetweenEpochsRepeatForASeedAndDifferBetweenSeeds) {
  temp_dir dir;
  const auto a = make_archive(dir, 60);
  loaders::loader_options o;
  o.batch_size = 6;
  o.seed = 11;
  loaders::archive_loader l1(a, o), l2(a, o);
  o.seed = 12;
  loaders::archive_loader l3(a, o);
  const auto e0 = l1.epoch_order(0), e1 = l1.epoch_order(1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, l2.epoch_order(0));
  EXPECT_EQ(e1, l2.epoch_order(1));
  EXPECT_NE(e0, l3.epoch_order(0));
  std::vector<u64> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(e0, sorted) << "not shuffled at all";
  // The batches follow the order.
  EXPECT_EQ(all_samples(l1, 10), e0);
  EXPECT_EQ(all_samples(l1, 10), e1);
  // Without shuffling: archive order every epoch.
  o.shuffle = false;
  loaders::archive_loader plain(a, o);
  EXPECT_EQ(plain.epoch_order(0), sorted);
  EXPECT_EQ(plain.epoch_order(3), sorted);
}

TEST(Loader, TheOrderIsChunkAwareSamplesStayWithinTheirWindowOfChunks) {
  // 5 samples per chunk and windows of 2 chunks: each run of 10 consecutive samples of the
  // order covers exactly two whole chunks.
  temp_dir dir;
  const auto a = make_archive(dir, 100);
  loaders::loader_options o;
  o.batch_size = 10;
  o.shuffle_window = 2;
  o.seed = 3;
  loaders::archive_loader l(a, o);
  const auto order = l.epoch_order(0);
  ASSERT_EQ(order.size(), 100u);
  for (u64 w = 0; w < 100; w += 10) {
    std::set<u64> chunks;
    for (u64 i = w; i < w + 10; ++i) chunks.insert(order[i] / 5);
    EXPECT_EQ(chunks.size(), 2u) << "window at " << w;
  }
}

TEST(Loader, ShardsPartitionTheDatasetAndEveryRankGetsTheSameNumberOfBatches) {
  temp_dir dir;
  const auto a = make_archive(dir, 103);
  for (bool drop : {false, true}) {
    std::vector<u64> together;
    std::vector<u64> batches;
    for (int rank = 0; rank < 4; ++rank) {
      loaders::loader_options o;
      o.batch_size = 5;
      o.seed = 21;
      o.world = 4;
      o.rank = rank;
      o.drop_last = drop;
      loaders::archive_loader l(a, o);
      batches.push_back(l.batches_per_epoch());
      const auto mine = all_samples(l, l.batches_per_epoch());
      EXPECT_EQ(mine, l.epoch_order(0));
      together.insert(together.end(), mine.begin(), mine.end());
    }
    std::sort(together.begin(), together.end());
    if (!drop) {
      // ceil(103 / 4) = 26 per rank, in 6 batches (5 of 5, one of 1) on every rank, as a
      // distributed training loop needs: every sample once, and the last rank's slice wraps
      // around to the start of the order, so one sample comes twice.
      for (auto b : batches) EXPECT_EQ(b, 6u);
      ASSERT_EQ(together.size(), 104u);
      const auto twice = std::adjacent_find(together.begin(), together.end());
      ASSERT_TRUE(twice != together.end());
      together.erase(twice);
      std::vector<u64> every(103);
      std::iota(every.begin(), every.end(), u64(0));
      EXPECT_EQ(together, every);
    } else {
      EXPECT_TRUE(std::adjacent_find(together.begin(), together.end()) == together.end())
          << "a sample in two shards";
      // 103 / 4 = 25 per rank, 5 batches of 5 each: the same count everywhere.
      EXPECT_EQ(together.size(), 100u);
      for (auto b : batches) EXPECT_EQ(b, 5u);
    }
  }
}

TEST(Loader, EachRanksOrderIsItsSliceOfTheOneRankOrder) {
  // A rank's order is a contiguous run of the epoch's order over every sample (the order of
  // world 1), from rank x its share, wrapping round to the start without drop_last. Shuffle
  // windows of 1, 2 and 3 chunks of 5 over 103 samples, so windows straddle the slices'
  // ends; more ranks than windows, and more ranks than samples.
  temp_dir dir;
  const u64 n = 103;
  const auto a = make_archive(dir, n);
  for (bool shuffle : {true, false}) {
    for (u64 window : {1, 2, 3}) {
      for (bool drop : {false, true}) {
        for (int world : {1, 2, 3, 4, 7, 9, 30, 110}) {
          const u64 batch = world > 9 ? 1 : 4;
          if (drop && n / static_cast<u64>(world) < batch) continue;  // no batch: refused
          loaders::loader_options o;
          o.batch_size = batch;
          o.seed = 77;
          o.shuffle = shuffle;
          o.shuffle_window = window;
          o.prefetch = 0;
          o.drop_last = drop;
          loaders::archive_loader one(a, o);
          o.world = world;
          const u64 share = n / static_cast<u64>(world);
          const u64 per_rank = drop ? share / batch * batch : (n + world - 1) / world;
          for (int rank = 0; rank < world; ++rank) {
            o.rank = rank;
            loaders::archive_loader l(a, o);
            for (u64 epoch : {0, 5}) {
              const auto all = one.epoch_order(epoch);
              const u64 start = static_cast<u64>(rank) * (drop ? share : per_rank);
              std::vector<u64> want(per_rank);
              for (u64 i = 0; i < per_rank; ++i) want[i] = all[(start + i) % n];
              ASSERT_EQ(l.epoch_order(epoch), want)
                  << "shuffle " << shuffle << " window " << window << " drop_last " << drop
                  << " world " << world << " rank " << rank << " epoch " << epoch;
            }
          }
        }
      }
    }
  }
}

TEST(Loader, EachRankReadsAboutItsShareOfTheChunksNotAllOfThem) {
  // 2000 samples in 400 chunks of 5, shuffled in windows of 4 chunks (20 samples), over 8
  // ranks: a rank's 250 samples lie in at most 14 windows, 56 chunks. (Taking every 8th
  // sample of the order, as this loader once did, touched all 400 on every rank.)
  temp_dir dir;
  const auto a = make_archive(dir, 2000);
  std::vector<u64> together;
  for (int rank = 0; rank < 8; ++rank) {
    loaders::loader_options o;
    o.batch_size = 10;
    o.seed = 4;
    o.world = 8;
    o.rank = rank;
    o.prefetch = 0;
    loaders::archive_loader l(a, o);
    for (u64 epoch = 0; epoch < 2; ++epoch) {
      const auto mine = l.epoch_order(epoch);
      ASSERT_EQ(mine.size(), 250u);
      std::set<u64> chunks;
      for (u64 s : mine) chunks.insert(s / 5);
      EXPECT_LE(chunks.size(), 56u) << "rank " << rank << " epoch " << epoch;
      if (epoch == 1) together.insert(together.end(), mine.begin(), mine.end());
    }
  }
  std::sort(together.begin(), together.end());
  std::vector<u64> every(2000);
  std::iota(every.begin(), every.end(), u64(0));
  EXPECT_EQ(together, every);
}

TEST(Loader, MoreRanksThanSamplesWithoutDropLastGiveEveryRankOneBatch) {
  temp_dir dir;
  const auto a = make_archive(dir, 3);
  std::set<u64> seen;
  for (int rank = 0; rank < 4; ++rank) {
    loaders::loader_options o;
    o.batch_size = 2;
    o.world = 4;
    o.rank = rank;
    o.drop_last = false;
    loaders::archive_loader l(a, o);
    ASSERT_EQ(l.batches_per_epoch(), 1u) << "rank " << rank;
    const auto b = l.next();
    ASSERT_EQ(b.samples.size(), 1u);
    seen.insert(b.samples[0]);
  }
  EXPECT_EQ(seen, (std::set<u64>{0, 1, 2}));
  // A batch larger than anything (the whole shard in one) is one batch: batch - 1 added to
  // the share wrapped around, and the loader said "too few samples".
  loaders::loader_options o;
  o.drop_last = false;
  o.batch_size = std::numeric_limits<std::size_t>::max();
  loaders::archive_loader whole(a, o);
  EXPECT_EQ(whole.batches_per_epoch(), 1u);
  EXPECT_EQ(whole.next().samples.size(), 3u);
}

TEST(Loader, BatchCapacityIsTheLargestBatchThatTheRankIsHanded) {
  // The device loader sizes its buffers by it: a batch size past a rank's share is one batch
  // of that share (not of the archive, on every rank).
  temp_dir dir;
  const auto a = make_archive(dir, 10);
  struct setting {
    std::size_t batch;
    int world;
    bool drop_last;
    u64 want;
  };
  const std::size_t all = std::numeric_limits<std::size_t>::max();
  for (const setting& c : {setting{4, 1, true, 4}, setting{4, 1, false, 4}, setting{3, 2, true, 3},
                           setting{all, 1, false, 10}, setting{all, 4, false, 3},
                           setting{7, 2, false, 5}, setting{20, 3, false, 4}}) {
    for (int rank = 0; rank < c.world; ++rank) {
      loaders::loader_options o;
      o.batch_size = c.batch;
      o.world = c.world;
      o.rank = rank;
      o.drop_last = c.drop_last;
      o.seed = 5;
      loaders::archive_loader l(a, o);
      u64 largest = 0;
      for (u64 i = 0; i < l.batches_per_epoch(); ++i) {
        largest = std::max<u64>(largest, l.next().samples.size());
      }
      EXPECT_EQ(l.batch_capacity(), c.want)
          << "batch " << c.batch << ", world " << c.world << ", rank " << rank;
      EXPECT_EQ(largest, c.want) << "batch " << c.batch << ", world " << c.world;
    }
  }
}

TEST(Loader, TryNextDoesNotWaitForABatchThePrefetchThreadIsStillMaking) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  loaders::loader_options o;
  o.batch_size = 8;
  o.seed = 4;
  auto gate = std::make_shared<dctchop::test::gated_memory>();
  o.batch_memory = gate;  // the thread waits in its first batch's allocation
  loaders::archive_loader l(a, o);
  // A try_next that waited would wait for the gate, which opens by itself after 5 s, and
  // then return the batch.
  EXPECT_FALSE(l.try_next().has_value());
  gate->open();
  const auto b = l.next();
  EXPECT_EQ(b.index, 0u);
  const auto order = l.epoch_order(0);
  EXPECT_EQ(b.samples, std::vector<u64>(order.begin(), order.begin() + 8));
}

TEST(Loader, TryNextGivesTheSameBatchesAsNext) {
  temp_dir dir;
  const auto a = make_archive(dir, 60);
  loaders::loader_options o;
  o.batch_size = 7;
  o.seed = 9;
  o.prefetch = 0;
  loaders::archive_loader ref(a, o), unthreaded(a, o);
  o.prefetch = 2;
  loaders::archive_loader l(a, o);
  u64 misses = 0;
  for (int i = 0; i < 20; ++i) {
    const auto want = ref.next();
    std::optional<loaders::batch> got;
    if (i % 3 == 2) {
      got = l.next();  // the two mixed
    } else {
      while (!(got = l.try_next())) {
        ++misses;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    EXPECT_EQ(got->epoch, want.epoch);
    EXPECT_EQ(got->index, want.index);
    EXPECT_EQ(got->samples, want.samples) << "batch " << i;
    EXPECT_TRUE(got->data == want.data);
    // Without prefetch, try_next makes the batch itself: always one.
    const auto made = unthreaded.try_next();
    ASSERT_TRUE(made.has_value());
    EXPECT_EQ(made->samples, want.samples);
  }
  EXPECT_EQ(l.state().to_json(), ref.state().to_json());
  (void)misses;  // (how often the thread was behind depends on the machine: not a result)
}

TEST(Loader, ARestoredStateResumesAtTheSameBatch) {
  temp_dir dir;
  const auto a = make_archive(dir, 80);
  loaders::loader_options o;
  o.batch_size = 8;
  o.seed = 5;
  o.prefetch = 3;
  loaders::archive_loader l(a, o);
  for (int i = 0; i < 13; ++i) l.next();  // into the second epoch (10 batches an epoch)
  const auto saved = loaders::loader_state::from_json(l.state().to_json());
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_EQ(saved.position, 3u);
  std::vector<loaders::batch> want;
  for (int i = 0; i < 12; ++i) want.push_back(l.next());  // crosses into the third epoch
  // A fresh loader restored from the state gives the same batches.
  o.seed = 999;  // the state carries the seed
  loaders::archive_loader r(a, o);
  r.restore(saved);
  for (const auto& w : want) {
    const auto b = r.next();
    EXPECT_EQ(b.epoch, w.epoch);
    EXPECT_EQ(b.index, w.index);
    EXPECT_EQ(b.samples, w.samples);
    EXPECT_TRUE(b.data == w.data);
  }
  // And restoring the first loader rewinds it.
  l.restore(saved);
  EXPECT_EQ(l.next().samples, want[0].samples);
}

TEST(Loader, ThePrefetchThreadIsNamedAndLeavesTheProgramsSignalsToItsOwnThreads) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  loaders::loader_options o;
  o.batch_size = 8;
  o.prefetch = 2;
  loaders::archive_loader l(a, o);
  l.next();
  // Each thread's name and blocked signals, from /proc/self/task/TID/{comm,status}.
  int found = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string comm = test::read_bytes((t.path() / "comm").string());
    if (comm != "dctchop-loader\n") continue;
    ++found;
    std::istringstream status(test::read_bytes((t.path() / "status").string()));
    std::uint64_t blocked = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      EXPECT_NE(blocked & (std::uint64_t(1) << (sig - 1)), 0u) << "signal " << sig;
    }
  }
  EXPECT_EQ(found, 1);
}

TEST(Loader, PrefetchChangesNothingAndCoefficientsCanBeHandedOutUndecoded) {
  temp_dir dir;
  const auto a = make_archive(dir, 50);
  loaders::loader_options o;
  o.batch_size = 7;
  o.seed = 1;
  o.prefetch = 0;
  loaders::archive_loader sync(a, o);
  o.prefetch = 4;
  loaders::archive_loader ahead(a, o);
  for (int i = 0; i < 15; ++i) {
    const auto x = sync.next(), y = ahead.next();
    EXPECT_EQ(x.samples, y.samples);
    EXPECT_TRUE(x.data == y.data);
  }
  o.decode = false;
  loaders::archive_loader raw(a, o);
  EXPECT_EQ(raw.sample_bytes(), 4u * 4u * 4u * 2u);  // 4x4 kept coefficients of 4 blocks, f16
  const auto b = raw.next();
  ASSERT_EQ(b.data.size(), b.samples.size() * raw.sample_bytes());
  // Each sample's bytes are the archive's stored coefficients of that sample.
  auto reader = formats::archive_reader::open(a);
  std::vector<std::byte> one(raw.sample_bytes());
  for (std::size_t i = 0; i < b.samples.size(); ++i) {
    reader.read_samples(b.samples[i], 1, one);
    EXPECT_EQ(std::memcmp(b.data.data() + i * one.size(), one.data(), one.size()), 0)
        << "sample " << b.samples[i];
  }
}

TEST(Loader, AForkedChildGoesOnWhereTheLoaderStoodAndCanDropIt) {
  // fork() copies only the calling thread: a loader's prefetch thread stayed behind, and the
  // child's next() waited for it forever (an IterableDataset in DataLoader workers).
#if defined(DCTCHOP_TEST_TSAN)
  GTEST_SKIP() << "ThreadSanitizer ends a child that starts a thread after a multi-threaded "
                  "fork (die_after_fork); the renewal does just that";
#endif
  temp_dir dir;
  const auto a = make_archive(dir, 60);
  loaders::loader_options o;
  o.batch_size = 4;
  o.seed = 2;
  o.prefetch = 3;
  auto l = std::make_unique<loaders::archive_loader>(a, o);
  auto idle = std::make_unique<loaders::archive_loader>(a, o);  // never used in the child
  for (int i = 0; i < 5; ++i) l->next();  // 5 of 15 batches of epoch 0; the thread works ahead
  // The child goes on with the file it had open, whatever became of the name.
  std::filesystem::rename(a, a + ".moved");
#if defined(DCTCHOP_TEST_ASAN)
  // GCC 12's AddressSanitizer takes no allocator lock around fork(), as glibc's malloc does:
  // a child forked while the prefetch thread is inside malloc waits on that lock forever. Let
  // the thread fill its queue and wait first (with glibc's malloc no such wait is needed).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
#endif
  const std::string got = dir.file("child.txt");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);  // a hang ends the child by a signal, which the parent sees
    int status = 0;
    try {
      std::string text;
      for (int i = 0; i < 12; ++i) {  // across the end of epoch 0
        const auto b = l->next();
        for (u64 s : b.samples) text += std::to_string(s) + " ";
        text += std::to_string(b.epoch) + ":" + std::to_string(b.index) + "\n";
      }
      dctchop::test::write_bytes(got, text);
      l.reset();  // neither may wait for a thread that is not in this process
      idle.reset();
    } catch (...) {
      status = 1;
    }
    ::_exit(status);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "the child was killed by signal " << WTERMSIG(st) << " (a hang?)";
  ASSERT_EQ(WEXITSTATUS(st), 0);
  // The child's batches are the ones the parent gets next.
  std::string text;
  for (int i = 0; i < 12; ++i) {
    const auto b = l->next();
    for (u64 s : b.samples) text += std::to_string(s) + " ";
    text += std::to_string(b.epoch) + ":" + std::to_string(b.index) + "\n";
  }
  EXPECT_EQ(dctchop::test::read_bytes(got), text);
}

TEST(Loader, BadOptionsAndStreamsAreRefused) {
  temp_dir dir;
  const auto a = make_archive(dir, 20);
  loaders::loader_options o;
  o.batch_size = 0;
  EXPECT_THROW(loaders::archive_loader(a, o), error);
  o.batch_size = 4;
  o.world = 2;
  o.rank = 2;
  EXPECT_THROW(loaders::archive_loader(a, o), error);
  EXPECT_THROW(loaders::loader_state::from_json("{\"epoch\": 1}"), error);
  // Epoch, position and seed alone are a state saved before 2026-11-30; one that says more of
  // its batches' shape (7 ranks, 999 samples) but not its batch size is refused, not taken as
  // one of those (its shape was ignored).
  EXPECT_FALSE(loaders::loader_state::from_json(R"({"epoch": 1, "position": 3, "seed": 5})")
                   .batches.has_value());
  dctchop::test::expect_error(
      [] {
        loaders::loader_state::from_json(
            R"({"epoch": 1, "position": 3, "seed": 5, "samples": 999, "world": 7, "rank": 3})");
      },
      errc::invalid_argument, {"not a loader state", "no batch_size"});
  o.rank = 0;
  o.world = 0;
  dctchop::test::expect_error([&] { loaders::archive_loader(a, o); }, errc::invalid_argument,
                              {"world", "at least 1"});
  o.world = 2;
  o.batch_size = 50;  // more than a rank's share: no batch at all, which a training loop
                      // over an epoch would not notice
  dctchop::test::expect_error([&] { loaders::archive_loader(a, o); }, errc::invalid_argument,
                              {"too few samples", "20 samples over 2 ranks", "batch size 50"});
  // Prefetch has a bound: SIZE_MAX filled memory with batches across epochs.
  o.batch_size = 4;
  o.world = 1;
  o.prefetch = loaders::loader_options::max_prefetch + 1;
  dctchop::test::expect_error([&] { loaders::archive_loader(a, o); }, errc::invalid_argument,
                              {"prefetch 1025", "at most 1024"});
}

TEST(Loader, EpochsEndAtTheLastCountNotWrappingToZero) {
  temp_dir dir;
  const auto a = make_archive(dir, 16);
  loaders::loader_options o;
  o.batch_size = 8;
  o.prefetch = 0;
  loaders::archive_loader l(a, o);
  const u64 last = std::numeric_limits<u64>::max() - 1;
  auto s = l.state();
  s.epoch = last + 1;  // a state the loader never saves: refused
  dctchop::test::expect_error([&] { l.restore(s); }, errc::invalid_argument,
                              {"epoch, 18446744073709551615, is past the last"});
  s.epoch = last;  // its batches come, then an error, not epoch 0 again
  l.restore(s);
  EXPECT_EQ(l.next().epoch, last);
  EXPECT_EQ(l.next().epoch, last);
  dctchop::test::expect_error([&] { l.next(); }, errc::out_of_range,
                              {"epoch 18446744073709551614 was the last"});
  // What it saves then is the end of that epoch, which a loader restores (to end there too).
  const auto at_end = loaders::loader_state::from_json(l.state().to_json());
  EXPECT_EQ(at_end.epoch, last);
  EXPECT_EQ(at_end.position, l.batches_per_epoch());
  loaders::archive_loader m(a, o);
  m.restore(at_end);
  dctchop::test::expect_error([&] { m.next(); }, errc::out_of_range, {"was the last"});
}

TEST(Loader, AStateOfAnotherLoaderOrPastTheEpochIsRefusedAndAnOldStateIsTaken) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  loaders::loader_options o;
  o.batch_size = 4;
  o.seed = 3;
  loaders::archive_loader l(a, o);
  for (int i = 0; i < 3; ++i) l.next();
  const auto saved = loaders::loader_state::from_json(l.state().to_json());
  ASSERT_TRUE(saved.batches.has_value());
  EXPECT_EQ(saved.batches->batch_size, 4u);
  EXPECT_EQ(saved.batches->samples, 40u);
  // Another batch size, shard or shuffle would resume at other samples: refused.
  auto refused = [&](loaders::loader_options other, const std::string& names) {
    loaders::archive_loader m(a, other);
    dctchop::test::expect_error([&] { m.restore(saved); }, errc::invalid_argument,
                                {"batch_size 4", names, "other batches"});
  };
  auto o8 = o;
  o8.batch_size = 8;
  refused(o8, "batch_size 8");
  auto sharded = o;
  sharded.world = 2;
  refused(sharded, "rank 0 of 2");
  auto ordered = o;
  ordered.shuffle = false;
  refused(ordered, "shuffle off");
  // At an epoch's start nothing is lost: taken by any loader (a tester restarting a job with
  // another world was refused), which starts that epoch as its own.
  {
    auto at_start = saved;
    at_start.epoch = 2;
    at_start.position = 0;
    for (const auto& other : {o8, sharded, ordered}) {
      loaders::archive_loader m(a, other), fresh(a, other);
      m.restore(at_start);
      auto want = fresh.state();
      want.epoch = 2;
      want.seed = saved.seed;
      fresh.restore(want);
      const auto b = m.next();
      EXPECT_EQ(b.epoch, 2u);
      EXPECT_EQ(b.index, 0u);
      EXPECT_EQ(b.samples, fresh.next().samples);
    }
  }
  // The same samples chunked otherwise shuffle into another order: refused too.
  {
    temp_dir other_dir;
    const auto rechunked = dctchop::test::make_index_archive(other_dir, 40, 8, true);
    loaders::archive_loader m(rechunked, o);
    dctchop::test::expect_error([&] { m.restore(saved); }, errc::invalid_argument,
                                {"window 4 chunks of 5 samples", "window 4 chunks of 8 samples"});
    auto unshuffled = ordered;  // without a shuffle the chunking does not matter
    loaders::archive_loader u(a, unshuffled), v(rechunked, unshuffled);
    u.next();
    v.restore(u.state());
    EXPECT_EQ(v.next().samples, u.next().samples);
  }
  // The same kind of loader resumes at the same batch, whatever seed it was built with.
  auto reseeded = o;
  reseeded.seed = 99;
  loaders::archive_loader same(a, reseeded);
  same.restore(saved);
  const auto want = l.next();
  EXPECT_EQ(same.next().samples, want.samples);
  // A position past the epoch's 10 batches.
  auto past = saved;
  past.position = 11;
  dctchop::test::expect_error([&] { same.restore(past); }, errc::invalid_argument,
                              {"batch 11", "10 batches"});
  // A state saved before the chunking was recorded is taken as it is.
  auto no_chunking = saved;
  no_chunking.batches->samples_per_chunk.reset();
  const auto parsed = loaders::loader_state::from_json(no_chunking.to_json());
  EXPECT_FALSE(parsed.batches->samples_per_chunk.has_value());
  loaders::archive_loader before(a, o);
  before.restore(parsed);
  EXPECT_EQ(before.next().samples, want.samples);
  // A sharded state saved before the ranks took slices (each took every world-th sample)
  // would resume at other samples: refused. One rank's is the same either way.
  {
    auto j = nlohmann::json::parse(saved.to_json());
    ASSERT_EQ(j.at("sharding"), "slices");
    j.erase("sharding");
    EXPECT_TRUE(loaders::loader_state::from_json(j.dump()).batches->sliced);  // one rank
    // A rank beyond an int is refused as a world is (it was taken as 2^31 - 1).
    auto big = j;
    big["rank"] = 10000000000ULL;
    dctchop::test::expect_error([&] { loaders::loader_state::from_json(big.dump()); },
                                errc::invalid_argument, {"rank is too large"});
    j["world"] = 2;
    const auto strided = loaders::loader_state::from_json(j.dump());
    EXPECT_FALSE(strided.batches->sliced);
    auto two = o;
    two.world = 2;
    loaders::archive_loader m(a, two);
    dctchop::test::expect_error([&] { m.restore(strided); }, errc::invalid_argument,
                                {"every world-th sample", "other batches"});
    j["world"] = 1;
    loaders::archive_loader from_one(a, o);
    from_one.restore(loaders::loader_state::from_json(j.dump()));
    EXPECT_EQ(from_one.next().samples, want.samples);
  }
  // A state saved before the loader recorded its batches: epoch, position, seed only.
  const auto old = loaders::loader_state::from_json(R"({"epoch": 0, "position": 3, "seed": 3})");
  EXPECT_FALSE(old.batches.has_value());
  loaders::archive_loader from_old(a, o);
  from_old.restore(old);
  EXPECT_EQ(from_old.next().samples, want.samples);
  // ... which a sharded loader refuses within an epoch: such a state came from one rank of
  // one (another world) or from ranks that each took every world-th sample (before
  // 2026-12-02). At an epoch's start there is nothing to get wrong.
  {
    auto two = o;
    two.world = 2;
    loaders::archive_loader sharded(a, two);
    dctchop::test::expect_error([&] { sharded.restore(old); }, errc::invalid_argument,
                                {"does not say how", "batch 3", "other batches", "position 0"});
    auto start = old;
    start.position = 0;
    sharded.restore(start);
    EXPECT_EQ(sharded.state().epoch, 0u);
    EXPECT_EQ(sharded.state().position, 0u);
  }
  // Not a state: the messages say what one is.
  for (const char* bad : {"garbage", "[1, 2]", R"({"epoch": 0})", R"({"epoch": -1, "position": 0, "seed": 0})",
                          R"({"epoch": 0, "position": 0, "seed": 0, "batch_size": 4})",
                          R"({"epoch": 0, "position": 3, "seed": 3, "position": 0})"}) {
    dctchop::test::expect_error([&] { loaders::loader_state::from_json(bad); },
                                errc::invalid_argument, {"not a loader state"});
  }
  // JSON, but nested deeper than any state (or archive) is: said so, not "not JSON".
  const std::string deep = R"({"x":)" + std::string(256, '[') + std::string(256, ']') + "}";
  dctchop::test::expect_error([&] { loaders::loader_state::from_json(deep); },
                              errc::invalid_argument,
                              {"not a loader state",
                               "nests arrays and objects more than 256 deep"});
}

}  // namespace

#include <dlpack/dlpack.h>

#include "dctchop/cuda.hpp"
#include "dctchop/device_loader.hpp"

namespace {

TEST(DeviceLoader, HostTensorsAreDlpackBatchesEqualToTheLoaderAndReturnTheirBuffers) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  loaders::loader_options o;
  o.batch_size = 6;
  o.seed = 2;
  loaders::archive_loader ref(a, o);
  loaders::device_loader dl(a, o, -1, 2);
  EXPECT_EQ(dl.device(), -1);
  EXPECT_EQ(dl.batches_per_epoch(), ref.batches_per_epoch());
  for (int i = 0; i < 8; ++i) {  // more batches than buffers: the deleters give them back
    std::vector<u64> samples;
    std::vector<std::byte> labels;
    DLManagedTensor* t = dl.next(&samples, &labels);
    const auto want = ref.next();
    ASSERT_NE(t, nullptr);
    const DLTensor& x = t->dl_tensor;
    EXPECT_EQ(x.device.device_type, kDLCPU);
    EXPECT_EQ(x.dtype.code, kDLUInt);
    EXPECT_EQ(x.dtype.bits, 8);
    ASSERT_EQ(x.ndim, 3);
    EXPECT_EQ(x.shape[0], 6);
    EXPECT_EQ(x.shape[1], 16);
    EXPECT_EQ(x.shape[2], 16);
    EXPECT_EQ(samples, want.samples);
    EXPECT_TRUE(labels == want.labels);
    EXPECT_EQ(std::memcmp(x.data, want.data.data(), want.data.size()), 0);
    t->deleter(t);
  }
  const auto saved = dl.state();
  EXPECT_EQ(saved.epoch, 1u);  // 40 / 6 = 6 batches an epoch
  EXPECT_EQ(saved.position, 2u);
}

TEST(DeviceLoader, ABatchSizePastTheArchiveIsOneBatchOfEverySampleOnTheHostToo) {
  // The host twin of CudaDeviceLoader.ABatchSizePastTheArchive...: SIZE_MAX samples a batch
  // with drop_last off is one batch of all 40, every epoch (with drop_last on, the default,
  // the loader refuses the archive: Loader.* above).
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  loaders::loader_options o;
  o.batch_size = std::numeric_limits<std::size_t>::max();
  o.drop_last = false;
  o.seed = 3;
  loaders::archive_loader ref(a, o);
  loaders::device_loader dl(a, o, -1, 2);
  EXPECT_EQ(dl.batches_per_epoch(), 1u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<u64> samples;
    DLManagedTensor* t = dl.next(&samples);
    const auto want = ref.next();
    ASSERT_EQ(want.samples.size(), 40u);
    EXPECT_EQ(samples, want.samples);
    ASSERT_EQ(t->dl_tensor.ndim, 3);
    EXPECT_EQ(t->dl_tensor.shape[0], 40);
    EXPECT_EQ(std::memcmp(t->dl_tensor.data, want.data.data(), want.data.size()), 0)
        << "epoch " << epoch;
    t->deleter(t);
  }
}

TEST(DeviceLoader, F16ArchivesGiveFloat16TensorsOfTheDecodedValues) {
  // Sample i holds i + x / 64 (exact in f16): at chop 8 each decodes to within f16 rounding.
  temp_dir dir;
  constexpr u64 n = 9;
  std::vector<float> v(n * 256);
  for (u64 i = 0; i < v.size(); ++i) v[i] = float(i / 256) + float(i % 16) / 64.f;
  dctchop::test::save_npy(dir.file("x.npy"), dtype::f16, {n, 16, 16}, dctchop::test::to_half(v));
  formats::compress_options co;
  co.chop = 8;
  auto be = make_backend(backend_kind::cpu, {1});
  formats::compress_npy(dir.file("x.npy"), dir.file("a.dcz"), *be, co);
  loaders::loader_options o;
  o.batch_size = 4;
  o.seed = 5;
  loaders::archive_loader ref(dir.file("a.dcz"), o);
  EXPECT_EQ(ref.sample_type(), dtype::f16);
  loaders::device_loader dl(dir.file("a.dcz"), o, -1, 2);
  for (int i = 0; i < 3; ++i) {
    std::vector<u64> samples;
    DLManagedTensor* t = dl.next(&samples, nullptr);
    const auto want = ref.next();
    ASSERT_NE(t, nullptr);
    const DLTensor& x = t->dl_tensor;
    EXPECT_EQ(x.dtype.code, kDLFloat);
    EXPECT_EQ(x.dtype.bits, 16);
    EXPECT_EQ(samples, want.samples);
    ASSERT_EQ(want.data.size(), samples.size() * 256 * 2);
    EXPECT_EQ(std::memcmp(x.data, want.data.data(), want.data.size()), 0);
    const auto* h = static_cast<const detail::half_value*>(x.data);
    for (u64 j = 0; j < samples.size() * 256; ++j) {
      const float expect = float(samples[j / 256]) + float(j % 16) / 64.f;
      ASSERT_NEAR(float(h[j]), expect, 0.004) << "sample " << samples[j / 256] << " value " << j % 256;
    }
    t->deleter(t);
  }
}

TEST(DeviceLoader, ADeviceBelowMinusOneIsRefusedNotTakenForTheHost) {
  temp_dir dir;
  const auto a = make_archive(dir, 10);
  loaders::loader_options o;
  o.batch_size = 2;
  for (int device : {-2, -100}) {
    try {
      loaders::device_loader dl(a, o, device);
      ADD_FAILURE() << "device " << device << " decoded on the host";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("-1 for the host"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceLoader, ACudaDeviceWithoutCudaIsAClearError) {
  if (dctchop::cuda::available()) GTEST_SKIP() << "a CUDA device is present";
  temp_dir dir;
  const auto a = make_archive(dir, 10);
  loaders::loader_options o;
  o.batch_size = 2;
  try {
    loaders::device_loader dl(a, o, 0);
    FAIL() << "a CUDA device loader without a device";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::backend_unavailable) << e.what();
  }
}

}  // namespace

#include "dctchop/formats/archive.hpp"

namespace {

TEST(Loader, ABatchThatFailsIsTriedAgainNotSkippedWithOrWithoutPrefetch) {
  // A corrupt chunk makes every batch that needs it fail, each time it is asked for, and the
  // state does not move past it. Once the chunk reads again (a file system back, here the
  // byte put back), the same batch comes: a prefetch thread's failure is not for good.
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  u64 off = 0;
  {
    auto r = formats::archive_reader::open(a);
    off = r.chunks()[0].offset + 64 + 10;  // inside chunk 0's coefficients
  }
  // With threads, a batch of two chunks: chunk 0 read beside chunk 1, on either thread.
  for (const auto& [prefetch, threads] :
       {std::pair<std::size_t, std::size_t>{0, 1}, {2, 1}, {0, 4}, {2, 3}}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch) + ", threads " + std::to_string(threads));
    dctchop::test::flip_byte(a, off);
    loaders::loader_options o;
    o.batch_size = threads > 1 ? 10 : 5;
    o.shuffle = false;
    o.prefetch = prefetch;
    o.threads = threads;
    loaders::archive_loader l(a, o);
    test::expect_error([&] { l.next(); }, errc::corrupt, {"corrupt"});
    test::expect_error([&] { l.next(); }, errc::corrupt, {"corrupt"});  // the same batch again
    EXPECT_EQ(l.state().position, 0u);
    // Past it (restored to batch 1), the rest reads fine; back at it, it fails again.
    l.restore({0, 1, 0, std::nullopt});
    EXPECT_EQ(l.next().samples.front(), o.batch_size);
    l.restore({0, 0, 0, std::nullopt});
    test::expect_error([&] { l.next(); }, errc::corrupt, {"corrupt"});
    dctchop::test::flip_byte(a, off);  // sound again
    EXPECT_EQ(l.next().samples.front(), 0u) << "the failed batch, tried again";
    EXPECT_EQ(l.next().samples.front(), o.batch_size);
    EXPECT_EQ(l.state().position, 2u);
  }
}

TEST(Loader, BatchesMadeOnSeveralThreadsAreThoseOfOneInEveryOrderWindowAndShard) {
  // 103 samples in 21 chunks of 5; batches within one chunk, across a window, past a
  // cacheful (a window of 1 keeps 2 chunks: a batch of 40 needs 8), of the whole archive.
  temp_dir dir;
  const auto a = make_archive(dir, 103);
  struct setting {
    std::size_t batch, window;
    bool shuffle, decode, drop_last;
    int rank, world;
  };
  const std::size_t all = std::numeric_limits<std::size_t>::max();
  for (const setting& c : std::vector<setting>{{7, 4, true, true, true, 0, 1},
                                               {40, 1, true, true, false, 0, 1},
                                               {40, 1, true, false, true, 1, 2},
                                               {23, 3, false, true, false, 0, 1},
                                               {200, all, true, false, false, 0, 1},
                                               {12, all, true, true, true, 2, 3},
                                               {9, 2, true, false, false, 1, 2}}) {
    loaders::loader_options o;
    o.batch_size = c.batch;
    o.shuffle_window = c.window;
    o.shuffle = c.shuffle;
    o.decode = c.decode;
    o.drop_last = c.drop_last;
    o.rank = c.rank;
    o.world = c.world;
    o.seed = 3;
    loaders::archive_loader one(a, o);
    for (const std::size_t threads : {2u, 5u}) {
      SCOPED_TRACE("batch " + std::to_string(c.batch) + ", window " + std::to_string(c.window) +
                   ", threads " + std::to_string(threads));
      auto ot = o;
      ot.threads = threads;
      ot.prefetch = threads == 2 ? 0 : 3;
      loaders::archive_loader many(a, ot);
      for (u64 i = 0; i < 2 * one.batches_per_epoch() + 1; ++i) {
        const auto want = one.next();
        const auto got = many.next();
        ASSERT_EQ(got.samples, want.samples) << "batch " << i;
        EXPECT_TRUE(got.data == want.data) << "batch " << i;
        EXPECT_EQ(got.labels, want.labels) << "batch " << i;
        EXPECT_EQ(got.epoch, want.epoch);
        EXPECT_EQ(got.index, want.index);
      }
      one.restore({0, 0, 3, std::nullopt});
    }
  }
  {
    // Batches of megabytes, whose copy is shared out in parts (a part is a MiB or more): 48
    // images of 256x256x3, three to a chunk, batches of 24 (4.5 MiB decoded, 2.25 MiB of f16
    // coefficients: four parts and two).
    temp_dir big;
    const auto px = dctchop::test::smooth_u8_nhwc(48, 256, 256, 3);
    dctchop::test::save_npy(big.file("x.npy"), dtype::u8, {48, 256, 256, 3}, px);
    formats::compress_options co;
    co.measure_quality = false;
    co.chunk_mb = 0.3;
    formats::compress_npy(big.file("x.npy"), big.file("b.dcz"), *make_backend(backend_kind::cpu),
                          co);
    for (const bool decode : {true, false}) {
      loaders::loader_options o;
      o.batch_size = 24;
      o.seed = 2;
      o.decode = decode;
      loaders::archive_loader one(big.file("b.dcz"), o);
      o.threads = 4;
      loaders::archive_loader many(big.file("b.dcz"), o);
      for (int i = 0; i < 5; ++i) {
        const auto want = one.next();
        const auto got = many.next();
        ASSERT_EQ(got.samples, want.samples) << "batch " << i;
        EXPECT_TRUE(got.data == want.data) << "batch " << i << (decode ? " decoded" : "");
      }
    }
  }
  {
    // A decoding backend of two threads (which decodes the chunks one after another).
    loaders::loader_options o;
    o.batch_size = 40;
    o.shuffle_window = 1;
    o.seed = 5;
    const std::shared_ptr<backend> be = make_backend(backend_kind::cpu, {2});
    loaders::archive_loader one(a, o, be);
    o.threads = 3;
    loaders::archive_loader many(a, o, be);
    for (int i = 0; i < 7; ++i) {
      const auto want = one.next();
      const auto got = many.next();
      ASSERT_EQ(got.samples, want.samples) << "batch " << i;
      EXPECT_TRUE(got.data == want.data) << "batch " << i;
      EXPECT_EQ(got.labels, want.labels) << "batch " << i;
    }
  }
  // Out of range: a clear error, as the other options.
  for (const std::size_t bad : {std::size_t{0}, loaders::loader_options::max_threads + 1}) {
    loaders::loader_options o;
    o.threads = bad;
    test::expect_error([&] { loaders::archive_loader l(a, o); }, errc::invalid_argument,
                       {"threads " + std::to_string(bad) + ": expected 1 to 256"});
  }
}

TEST(Loader, DamagedLabelsAreRefusedWhenTheLoaderIsMadeThoughItReadsThemChunkByChunk) {
  // The loader checks the labels' checksum whole, in pieces, then reads each chunk's labels
  // with the chunk: a damaged byte is refused up front, not handed out in a batch.
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  u64 off = 0;
  {
    auto r = formats::archive_reader::open(a);
    off = r.find_side_array("labels")->offset + 4 * 17;  // sample 17's label
  }
  dctchop::test::flip_byte(a, off);
  loaders::loader_options o;
  o.batch_size = 5;
  test::expect_error([&] { loaders::archive_loader l(a, o); }, errc::corrupt,
                     {"side array 'labels': checksum mismatch"});
  dctchop::test::flip_byte(a, off);  // sound again: each batch's labels are its samples'
  loaders::archive_loader l(a, o);
  for (int i = 0; i < 8; ++i) {
    const auto b = l.next();
    for (std::size_t k = 0; k < b.samples.size(); ++k) {
      std::int32_t label = 0;
      std::memcpy(&label, b.labels.data() + k * 4, 4);
      EXPECT_EQ(label, static_cast<std::int32_t>(b.samples[k] * 3));
    }
  }
}

TEST(DeviceLoader, HoldingEveryBufferIsAnErrorNotAHang) {
  temp_dir dir;
  const auto a = make_archive(dir, 30);
  loaders::loader_options o;
  o.batch_size = 3;
  loaders::device_loader dl(a, o, -1, 2);
  DLManagedTensor* t1 = dl.next();
  DLManagedTensor* t2 = dl.next();
  try {
    dl.next();
    ADD_FAILURE() << "a third batch while two buffers are held";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
  }
  t1->deleter(t1);
  DLManagedTensor* t3 = dl.next();  // a buffer is free again
  EXPECT_EQ(dl.state().position, 3u);
  t2->deleter(t2);
  t3->deleter(t3);
}

}  // namespace
