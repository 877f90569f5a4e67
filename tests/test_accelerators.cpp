// Tests of the accelerator feeds (issue 6): the IPU feed driven by a simulated engine that
// calls it the way Poplar does (speculative prefetch, invalidation, fetch, complete), the CS-2
// worker feeds, and the exported decode matrices.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dctchop/accelerators.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/matrix_form.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using dctchop::test::temp_dir;
using u64 = std::uint64_t;

/** dir/a.dcz: samples that hold their own index; 4 samples per chunk. */
std::string make_archive(const temp_dir& dir, u64 n) {
  return dctchop::test::make_index_archive(dir, n, 4, false);
}

/** A loader of the batches that an IPU feed of options `o` hands over, in their order. */
std::unique_ptr<loaders::archive_loader> fed_batches(const std::string& a, const accel::ipu_options& o) {
  loaders::loader_options lo = o.loader;
  lo.batch_size = o.micro_batch;
  lo.decode = false;
  lo.prefetch = 0;
  lo.batch_memory = nullptr;
  return std::make_unique<loaders::archive_loader>(a, lo);
}

TEST(IpuFeed, AStepOfMoreBytesThanASizeHoldsIsRefused) {
  // 2^62 device iterations of 16 accumulated micro-batches made step_bytes() 0.
  temp_dir dir;
  const auto a = make_archive(dir, 16);
  accel::ipu_options o;
  o.micro_batch = 4;
  o.device_iterations = std::size_t(1) << 62;
  o.gradient_accumulation = 16;
  try {
    accel::ipu_feed feed(a, o);
    ADD_FAILURE() << "step_bytes " << feed.step_bytes();
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("more bytes than a size holds"), std::string::npos)
        << e.what();
  }
}

TEST(IpuFeed, ASimulatedEngineWithSpeculativePrefetchAndInvalidationGetsEveryBatchInOrder) {
  temp_dir dir;
  const auto a = make_archive(dir, 96);
  accel::ipu_options o;
  o.micro_batch = 4;
  o.device_iterations = 2;
  o.replicas = 2;
  o.loader.world = 2;  // this feed is replica 0's
  o.gradient_accumulation = 3;
  o.max_prefetched = 3;
  o.loader.seed = 17;
  o.loader.prefetch = 0;
  accel::ipu_feed feed(a, o);
  EXPECT_EQ(feed.micro_batch_bytes(), 4u * 128u);  // no labels in this archive
  EXPECT_EQ(feed.step_bytes(), feed.micro_batch_bytes() * 12u);
  // What the engine must receive: the loader's own sequence of micro-batches.
  auto ref_loader = fed_batches(a, o);
  loaders::archive_loader& ref = *ref_loader;

  std::mt19937 rng(5);
  std::deque<std::vector<std::byte>> engine_prefetched;  // in the engine's hands, not consumed
  std::vector<std::vector<std::byte>> consumed;
  u64 invalidations = 0, prefetches = 0;
  for (int step = 0; step < 60; ++step) {
    // Speculate a few micro-batches ahead.
    for (unsigned k = rng() % 4; k > 0; --k) {
      std::vector<std::byte> buf(feed.micro_batch_bytes());
      if (feed.prefetch(buf.data()) == accel::stream_callback::result::success) {
        engine_prefetched.push_back(std::move(buf));
        ++prefetches;
      }
    }
    // Sometimes the engine changes course and withdraws its speculation.
    if (rng() % 4 == 0 && !engine_prefetched.empty()) {
      feed.invalidate_prefetched();
      engine_prefetched.clear();
      ++invalidations;
    }
    // Consume one micro-batch: a prefetched one if held, else fetch now.
    std::vector<std::byte> buf(feed.micro_batch_bytes());
    if (!engine_prefetched.empty()) {
      buf = std::move(engine_prefetched.front());
      engine_prefetched.pop_front();
    } else {
      feed.fetch(buf.data());
    }
    feed.complete();
    consumed.push_back(std::move(buf));
  }
  feed.rethrow_error();
  EXPECT_GT(invalidations, 5u);
  EXPECT_GT(prefetches, 30u);
  EXPECT_EQ(feed.completed(), 60u);
  for (std::size_t i = 0; i < consumed.size(); ++i) {
    const auto want = ref.next();
    EXPECT_TRUE(std::equal(consumed[i].begin(), consumed[i].end(), want.data.begin(),
                           want.data.end()))
        << "micro-batch " << i;
  }
  // The state after the last completed micro-batch resumes the sequence.
  const auto s = feed.state();
  EXPECT_EQ(s.epoch * ref.batches_per_epoch() + s.position, 60u);
}

TEST(IpuFeed, ReplicaFeedsOnTheirOwnThreadsTogetherCoverEverySampleOncePerEpoch) {
  // Two replicas, one feed each (rank = replica, world = 2), driven by two engine threads as
  // Poplar's streaming threads would, while the host reads each feed's progress and state.
  temp_dir dir;
  const u64 n = 24;
  const auto a = dctchop::test::make_index_archive(dir, n, 4, true);  // int32 labels 3 * i
  accel::ipu_options o;
  o.micro_batch = 3;
  o.replicas = 2;
  o.loader.seed = 9;
  std::vector<std::unique_ptr<accel::ipu_feed>> feeds;
  for (int r = 0; r < 2; ++r) {
    o.loader.rank = r;
    o.loader.world = 2;
    feeds.push_back(std::make_unique<accel::ipu_feed>(a, o));
  }
  constexpr u64 per_epoch = 24 / 2 / 3, epochs = 3;
  std::vector<std::vector<std::int32_t>> labels(2);
  std::atomic<int> running{2};
  std::vector<std::thread> engines;
  for (int r = 0; r < 2; ++r) {
    engines.emplace_back([&, r] {
      accel::ipu_feed& f = *feeds[static_cast<std::size_t>(r)];
      std::vector<std::byte> buf(f.micro_batch_bytes());
      for (u64 i = 0; i < per_epoch * epochs; ++i) {
        if (i % 2 == 0 && f.prefetch(buf.data()) == accel::stream_callback::result::success) {
          f.invalidate_prefetched();  // speculated, then withdrawn: it comes again
        }
        f.fetch(buf.data());
        f.complete();
        for (u64 j = 0; j < 3; ++j) {
          std::int32_t label = 0;
          std::memcpy(&label, buf.data() + 3 * 128 + j * 4, 4);
          labels[static_cast<std::size_t>(r)].push_back(label);
        }
      }
      --running;
    });
  }
  do {  // the host, meanwhile (at least once, however soon the engines finish)
    for (const auto& f : feeds) {
      EXPECT_LE(f->completed(), per_epoch * epochs);
      EXPECT_LE(f->state().epoch, epochs);
    }
    std::this_thread::yield();
  } while (running > 0);
  for (auto& t : engines) t.join();
  for (u64 e = 0; e < epochs; ++e) {
    std::vector<std::int32_t> seen;
    for (const auto& l : labels) {
      seen.insert(seen.end(), l.begin() + static_cast<std::ptrdiff_t>(e * per_epoch * 3),
                  l.begin() + static_cast<std::ptrdiff_t>((e + 1) * per_epoch * 3));
    }
    std::sort(seen.begin(), seen.end());
    std::vector<std::int32_t> want;
    for (u64 i = 0; i < n; ++i) want.push_back(static_cast<std::int32_t>(3 * i));
    EXPECT_EQ(seen, want) << "epoch " << e;
  }
  EXPECT_NE(labels[0], labels[1]);
  for (const auto& f : feeds) {
    EXPECT_EQ(f->completed(), per_epoch * epochs);
    f->rethrow_error();
  }
}

TEST(IpuFeed, ReplicasWithALoaderWorldTheyDoNotDivideAreRefused) {
  temp_dir dir;
  const auto a = make_archive(dir, 24);
  accel::ipu_options o;
  o.replicas = 4;
  for (int world : {1, 2, 6}) {
    o.loader.world = world;
    try {
      accel::ipu_feed feed(a, o);
      ADD_FAILURE() << "world " << world << " accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("4 replicas with loader.world " + std::to_string(world)),
                std::string::npos) << e.what();
    }
  }
  o.loader.world = 8;  // two hosts of four replicas
  o.loader.rank = 5;
  accel::ipu_feed feed(a, o);
  EXPECT_EQ(feed.step_bytes(), feed.micro_batch_bytes() * 4);
}

TEST(IpuFeed, ACompleteWithNothingInFlightIsAnErrorRethrownAfterTheRun) {
  temp_dir dir;
  const auto a = make_archive(dir, 24);
  accel::ipu_options o;
  o.micro_batch = 4;
  o.loader.prefetch = 0;  // prefetch reads the micro-batch itself: never not_available
  accel::ipu_feed feed(a, o);
  std::vector<std::byte> buf(feed.micro_batch_bytes());
  feed.fetch(buf.data());
  feed.complete();
  feed.rethrow_error();  // one each: nothing to say
  ASSERT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
  feed.invalidate_prefetched();
  feed.complete();  // the withdrawn prefetch is not in flight: an adapter's mistake
  EXPECT_EQ(feed.completed(), 1u);
  try {
    feed.rethrow_error();
    ADD_FAILURE() << "a complete() with nothing in flight passed unseen";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("complete() with no micro-batch in flight"),
              std::string::npos) << e.what();
  }
  feed.restore(feed.state());  // between runs: cleared
  feed.rethrow_error();
}

TEST(IpuFeed, EachBufferHoldsTheCoefficientsThenTheLabelsAlsoAfterAnInvalidation) {
  temp_dir dir;
  const auto a = dctchop::test::make_index_archive(dir, 24, 4, true);  // int32 labels 3 * i
  accel::ipu_options o;
  o.micro_batch = 3;
  o.loader.seed = 2;
  o.loader.prefetch = 0;
  accel::ipu_feed feed(a, o);
  ASSERT_EQ(feed.micro_batch_bytes(), 3u * (128u + 4u));
  auto ref_loader = fed_batches(a, o);
  loaders::archive_loader& ref = *ref_loader;
  std::vector<std::byte> buf(feed.micro_batch_bytes());
  ASSERT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
  ASSERT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
  feed.invalidate_prefetched();  // both come again, from the next fetches
  for (int i = 0; i < 5; ++i) {
    std::fill(buf.begin(), buf.end(), std::byte{0xee});
    feed.fetch(buf.data());
    feed.complete();
    const auto want = ref.next();
    ASSERT_EQ(want.data.size(), 3u * 128u);
    EXPECT_EQ(std::memcmp(buf.data(), want.data.data(), want.data.size()), 0) << "batch " << i;
    for (u64 j = 0; j < 3; ++j) {
      std::int32_t label = 0;
      std::memcpy(&label, buf.data() + want.data.size() + j * 4, 4);
      EXPECT_EQ(label, static_cast<std::int32_t>(3 * want.samples[j])) << "batch " << i;
    }
  }
  feed.rethrow_error();
}

TEST(IpuFeed, AFetchThatFailsLeavesTheStateOfTheMicroBatchesBeforeItNotAnOlderOne) {
  // Two micro-batches in the engine's hands, then a fetch that fails (a corrupt chunk): once
  // all three complete, the state is the one after the second, from which training resumes.
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  {
    auto r = formats::archive_reader::open(a);
    dctchop::test::flip_byte(a, r.chunks()[2].offset + 64 + 10);  // chunk 2: micro-batch 2
  }
  accel::ipu_options o;
  o.micro_batch = 4;
  o.loader.shuffle = false;
  o.loader.prefetch = 0;
  accel::ipu_feed feed(a, o);
  std::vector<std::byte> buf(feed.micro_batch_bytes());
  feed.fetch(buf.data());
  feed.fetch(buf.data());
  feed.rethrow_error();
  feed.fetch(buf.data());
  EXPECT_THROW(feed.rethrow_error(), error);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0}; }));
  for (int i = 0; i < 3; ++i) feed.complete();
  EXPECT_EQ(feed.completed(), 3u);
  EXPECT_EQ(feed.state().epoch, 0u);
  EXPECT_EQ(feed.state().position, 2u) << "after the two micro-batches that were fed";
  // The error stays, as documented, until restore(state()): the engine was handed zeros.
  EXPECT_THROW(feed.rethrow_error(), error) << "the error is said again after the next run";
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::not_available);
  feed.restore(feed.state());
  feed.rethrow_error();  // cleared
  // Going on from there reads the damaged micro-batch again (not skipped): the error anew.
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::not_available);
  EXPECT_THROW(feed.rethrow_error(), error);
}

TEST(IpuFeed, PrefetchStopsAtItsLimitAndAnswersNotAvailable) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  accel::ipu_options o;
  o.micro_batch = 2;
  o.max_prefetched = 2;
  o.loader.prefetch = 0;  // (with a prefetch thread, a batch not ready yet is not_available too)
  accel::ipu_feed feed(a, o);
  std::vector<std::byte> buf(feed.micro_batch_bytes());
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::not_available);
  feed.complete();
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
}

TEST(IpuFeed, WithTheLoadersPrefetchThreadPrefetchNeverWaitsAndTheEngineGetsEveryBatchInOrder) {
  // The loader's thread makes the batches; a speculative prefetch that finds none ready says
  // not_available at once (Poplar's streaming thread must not block there), and the engine
  // fetches instead. Whatever the timing, the engine consumes the loader's sequence.
  temp_dir dir;
  const auto a = make_archive(dir, 96);
  accel::ipu_options o;
  o.micro_batch = 4;
  o.max_prefetched = 3;
  o.loader.seed = 23;
  o.loader.prefetch = 2;
  accel::ipu_feed feed(a, o);
  auto ref_loader = fed_batches(a, o);
  loaders::archive_loader& ref = *ref_loader;
  std::mt19937 rng(8);
  std::deque<std::vector<std::byte>> engine_prefetched;
  for (int step = 0; step < 70; ++step) {
    for (unsigned k = rng() % 3; k > 0; --k) {
      std::vector<std::byte> buf(feed.micro_batch_bytes());
      if (feed.prefetch(buf.data()) == accel::stream_callback::result::success) {
        engine_prefetched.push_back(std::move(buf));
      }
    }
    if (rng() % 5 == 0) {
      feed.invalidate_prefetched();
      engine_prefetched.clear();
    }
    std::vector<std::byte> buf(feed.micro_batch_bytes());
    if (!engine_prefetched.empty()) {
      buf = std::move(engine_prefetched.front());
      engine_prefetched.pop_front();
    } else {
      feed.fetch(buf.data());
    }
    feed.complete();
    const auto want = ref.next();
    ASSERT_TRUE(std::equal(buf.begin(), buf.end(), want.data.begin(), want.data.end()))
        << "micro-batch " << step;
  }
  feed.rethrow_error();
  EXPECT_EQ(feed.completed(), 70u);
}

TEST(IpuFeed, PrefetchAnswersNotAvailableAtOnceWhileTheLoadersThreadIsStillReading) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  accel::ipu_options o;
  o.micro_batch = 4;
  o.loader.seed = 3;
  o.loader.prefetch = 2;
  auto gate = std::make_shared<dctchop::test::gated_memory>();
  o.loader.batch_memory = gate;  // the loader's thread waits in its first batch
  accel::ipu_feed feed(a, o);
  std::vector<std::byte> buf(feed.micro_batch_bytes());
  // A prefetch that waited would wait for the gate (open by itself after 5 s) and succeed.
  EXPECT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::not_available);
  gate->open();
  feed.fetch(buf.data());  // the engine fetches instead: micro-batch 0, nothing skipped
  feed.complete();
  auto ref_loader = fed_batches(a, o);
  loaders::archive_loader& ref = *ref_loader;
  const auto want = ref.next();
  EXPECT_TRUE(std::equal(buf.begin(), buf.end(), want.data.begin(), want.data.end()));
  feed.rethrow_error();
}

TEST(IpuFeed, AnInvalidationKeepsAFetchedMicroBatchNotYetCompleteAndReplaysThePrefetchedOnes) {
  temp_dir dir;
  const auto a = make_archive(dir, 40);
  accel::ipu_options o;
  o.micro_batch = 2;
  o.loader.seed = 6;
  o.loader.prefetch = 0;
  accel::ipu_feed feed(a, o);
  auto ref_loader = fed_batches(a, o);
  loaders::archive_loader& ref = *ref_loader;
  std::vector<loaders::batch> want;
  for (int i = 0; i < 5; ++i) want.push_back(ref.next());
  auto same = [&](const std::vector<std::byte>& buf, int i) {
    return std::equal(buf.begin(), buf.end(), want[i].data.begin(), want[i].data.end());
  };
  std::vector<std::byte> fetched(feed.micro_batch_bytes()), p1(fetched.size()), p2(fetched.size());
  feed.fetch(fetched.data());  // in transfer: not complete yet
  ASSERT_EQ(feed.prefetch(p1.data()), accel::stream_callback::result::success);
  ASSERT_EQ(feed.prefetch(p2.data()), accel::stream_callback::result::success);
  EXPECT_TRUE(same(fetched, 0));
  EXPECT_TRUE(same(p1, 1));
  EXPECT_TRUE(same(p2, 2));
  feed.invalidate_prefetched();  // withdraws micro-batches 1 and 2, not the fetched 0
  feed.complete();               // micro-batch 0 is done: the state moves past it alone
  EXPECT_EQ(feed.state().position, 1u);
  for (int i = 1; i < 5; ++i) {
    std::vector<std::byte> buf(fetched.size());
    if (i == 2) {
      ASSERT_EQ(feed.prefetch(buf.data()), accel::stream_callback::result::success);
    } else {
      feed.fetch(buf.data());
    }
    feed.complete();
    EXPECT_TRUE(same(buf, i)) << "micro-batch " << i;
  }
  EXPECT_EQ(feed.state().position, 5u);
  feed.rethrow_error();
}

TEST(IpuFeed, ARestoredFeedResumesAfterTheLastCompletedMicroBatchAndRefusesAnotherLoadersState) {
  temp_dir dir;
  const auto a = make_archive(dir, 48);
  accel::ipu_options o;
  o.micro_batch = 4;
  o.loader.seed = 12;
  o.loader.prefetch = 2;
  accel::ipu_feed feed(a, o);
  std::vector<std::byte> buf(feed.micro_batch_bytes());
  for (int i = 0; i < 15; ++i) {  // into the second epoch (12 micro-batches an epoch)
    feed.fetch(buf.data());
    feed.complete();
  }
  std::vector<std::byte> spec(buf.size());
  // In flight when the state is taken, and not part of it (the loader's thread may not have
  // it ready at once).
  auto prefetch_one = [&](accel::ipu_feed& f) {
    while (f.prefetch(spec.data()) != accel::stream_callback::result::success) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  prefetch_one(feed);
  const auto saved = loaders::loader_state::from_json(feed.state().to_json());
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_EQ(saved.position, 3u);
  std::vector<std::vector<std::byte>> want;
  feed.invalidate_prefetched();
  for (int i = 0; i < 14; ++i) {
    feed.fetch(buf.data());
    feed.complete();
    want.push_back(buf);
  }
  // A new feed (a restarted job), and the first one rewound with things in flight.
  accel::ipu_feed fresh(a, o);
  fresh.restore(saved);
  prefetch_one(feed);
  feed.restore(saved);
  for (auto* f : {&fresh, &feed}) {
    for (int i = 0; i < 14; ++i) {
      f->fetch(buf.data());
      f->complete();
      EXPECT_EQ(buf, want[i]) << "micro-batch " << i;
    }
    f->rethrow_error();
  }
  auto other = o;
  other.micro_batch = 3;
  accel::ipu_feed wrong(a, other);
  dctchop::test::expect_error([&] { wrong.restore(saved); }, errc::invalid_argument,
                              {"batch_size 4", "batch_size 3"});
}

TEST(Cs2Feed, WorkersTogetherCoverEverySampleOncePerEpochWithStaticShapes) {
  temp_dir dir;
  const auto a = make_archive(dir, 60);  // 3 workers x 4 batches x 5
  std::multiset<u64> seen;
  for (int w = 0; w < 3; ++w) {
    accel::cs2_options o;
    o.batch_size = 5;
    o.num_workers = 3;
    o.worker_id = w;
    o.loader.seed = 8;
    accel::cs2_worker_feed f(a, o);
    ASSERT_EQ(f.batches_per_epoch(), 4u);
    for (u64 b = 0; b < f.batches_per_epoch(); ++b) {
      const auto batch = f.next();
      ASSERT_EQ(batch.samples.size(), 5u);
      ASSERT_EQ(batch.data.size(), 5u * 128u);
      seen.insert(batch.samples.begin(), batch.samples.end());
    }
  }
  ASSERT_EQ(seen.size(), 60u);
  for (u64 s = 0; s < 60; ++s) EXPECT_EQ(seen.count(s), 1u) << "sample " << s;
}

TEST(Cs2Feed, UnevenSizesGiveEveryWorkerTheSameWholeBatchesOfDistinctSamplesEachEpoch) {
  // 67 samples over 3 workers in batches of 5: 22 each, 4 whole batches (20); 7 samples are
  // left out of each epoch, different ones as the order changes.
  temp_dir dir;
  const auto a = make_archive(dir, 67);
  std::vector<std::unique_ptr<accel::cs2_worker_feed>> feeds;
  for (int w = 0; w < 3; ++w) {
    accel::cs2_options o;
    o.batch_size = 5;
    o.num_workers = 3;
    o.worker_id = w;
    o.loader.seed = 30;
    feeds.push_back(std::make_unique<accel::cs2_worker_feed>(a, o));
    ASSERT_EQ(feeds.back()->batches_per_epoch(), 4u);
  }
  std::vector<std::set<u64>> left_out;
  for (u64 epoch = 0; epoch < 3; ++epoch) {
    std::multiset<u64> seen;
    for (auto& f : feeds) {
      for (u64 b = 0; b < 4; ++b) {
        const auto batch = f->next();
        ASSERT_EQ(batch.epoch, epoch);
        ASSERT_EQ(batch.samples.size(), 5u);
        seen.insert(batch.samples.begin(), batch.samples.end());
      }
    }
    ASSERT_EQ(seen.size(), 60u) << "epoch " << epoch;
    std::set<u64> missing;
    for (u64 s = 0; s < 67; ++s) {
      EXPECT_LE(seen.count(s), 1u) << "sample " << s << " in epoch " << epoch;
      if (seen.count(s) == 0) missing.insert(s);
    }
    EXPECT_EQ(missing.size(), 7u);
    left_out.push_back(missing);
  }
  EXPECT_NE(left_out[0], left_out[1]);
  EXPECT_NE(left_out[1], left_out[2]);
}

TEST(Cs2Feed, BadWorkerOptionsAndTooFewSamplesAreRefusedInTheFeedsOwnTerms) {
  // The loader's words were "world (the number of shards) must be at least 1" and "rank 2
  // is outside 0..1", of options the caller never set, and "a smaller batch size, or
  // drop_last off, gives a batch" where the feed keeps drop_last on and no batch size helps.
  temp_dir dir;
  const auto a = make_archive(dir, 6);
  accel::cs2_options o;
  o.batch_size = 1;
  o.num_workers = 0;
  dctchop::test::expect_error([&] { accel::cs2_worker_feed f(a, o); }, errc::invalid_argument,
                              {"CS-2 feed: num_workers must be at least 1, not 0"});
  o.num_workers = 2;
  o.worker_id = 2;
  dctchop::test::expect_error([&] { accel::cs2_worker_feed f(a, o); }, errc::invalid_argument,
                              {"CS-2 feed: worker_id 2 is outside 0..1"});
  o.num_workers = 7;
  o.worker_id = 0;
  dctchop::test::expect_error([&] { accel::cs2_worker_feed f(a, o); }, errc::invalid_argument,
                              {"6 samples over 7 ranks", "(fewer ranks give a batch"});
  o.num_workers = 2;
  o.batch_size = 4;
  dctchop::test::expect_error([&] { accel::cs2_worker_feed f(a, o); }, errc::invalid_argument,
                              {"batch size 4 and drop_last (a smaller batch size gives a batch"});
}

TEST(Cs2Feed, AStateDictRestartsTheWorkerAndIsRefusedByAnother) {
  temp_dir dir;
  const auto a = make_archive(dir, 60);
  accel::cs2_options o;
  o.batch_size = 5;
  o.num_workers = 3;
  o.worker_id = 1;
  o.loader.seed = 8;
  accel::cs2_worker_feed f(a, o);
  f.next();
  f.next();
  const std::string saved = f.state_dict();
  const auto want = f.next();
  accel::cs2_worker_feed g(a, o);
  g.load_state_dict(saved);
  EXPECT_EQ(g.next().samples, want.samples);
  o.worker_id = 2;
  accel::cs2_worker_feed other(a, o);
  EXPECT_THROW(other.load_state_dict(saved), error);
  // The same worker with another shuffle window would resume at other samples: refused.
  o.worker_id = 1;
  o.loader.shuffle_window = 2;
  accel::cs2_worker_feed rewindowed(a, o);
  dctchop::test::expect_error([&] { rewindowed.load_state_dict(saved); },
                              errc::invalid_argument, {"window 4", "window 2", "other batches"});
  // A state saved before the loader's state was part of it (epoch, position and seed), when
  // each of several workers took every num_workers-th sample: refused mid-epoch, where it
  // would resume at other samples, and taken at an epoch's start.
  o.loader.shuffle_window = 4;
  accel::cs2_worker_feed old(a, o);
  dctchop::test::expect_error(
      [&] {
        old.load_state_dict(R"({"epoch": 0, "position": 2, "seed": 8, "worker_id": 1,)"
                            R"( "num_workers": 3, "batch_size": 5})");
      },
      errc::invalid_argument, {"saved before 2026-12-02", "position 0"});
  old.load_state_dict(R"({"epoch": 1, "position": 0, "seed": 8, "worker_id": 1,)"
                      R"( "num_workers": 3, "batch_size": 5})");
  const auto first = old.next();
  EXPECT_EQ(first.epoch, 1u);
  EXPECT_EQ(first.index, 0u);
  // What a batch holds, for the decode matrices.
  EXPECT_EQ(old.loader().codec().chop, 4);
  EXPECT_EQ(old.loader().sample_geometry().height, 16u);
}

TEST(DecodeMatrices, ACs2BatchDecodedWithTheExportedMatricesEqualsTheLoadersDecode) {
  // What a device does with a feed's batch: for each coefficient plane C, Lt C R plus the
  // codec's offset, cropped and rounded. u8 NHWC of odd size (21x13, 3 channels), f16
  // coefficients, f32 matrices: equal to the loader's own decode within one unit.
  temp_dir dir;
  const int n = 12, h = 21, w = 13, c = 3;
  test::save_npy(dir.file("x.npy"), dtype::u8, {u64(n), u64(h), u64(w), u64(c)},
                 test::smooth_u8_nhwc(n, h, w, c));
  formats::compress_options co;
  co.chunk_mb = 0.002;  // several chunks
  co.measure_quality = false;
  auto be = make_backend(backend_kind::cpu, {1});
  formats::compress_npy(dir.file("x.npy"), dir.file("a.dcz"), *be, co);
  accel::cs2_options o;
  o.batch_size = 5;
  o.loader.seed = 3;
  accel::cs2_worker_feed feed(dir.file("a.dcz"), o);
  loaders::loader_options lo = o.loader;
  lo.batch_size = o.batch_size;
  loaders::archive_loader decoded(dir.file("a.dcz"), lo);  // decode = true, the same order
  const codec_params& p = feed.loader().codec();
  ASSERT_EQ(p.coeff, coeff_type::f16);
  const auto d = accel::export_decode_matrices(p, h, w, coeff_type::f32);
  auto f32 = [](const std::vector<std::byte>& b, u64 i) {
    float x;
    std::memcpy(&x, b.data() + i * 4, 4);
    return double(x);
  };
  u64 differ = 0, values = 0;
  for (int k = 0; k < 2; ++k) {
    const auto cb = feed.next();
    const auto want = decoded.next();
    ASSERT_EQ(cb.samples, want.samples);
    const u64 plane_coeffs = d.kh * d.kw;
    for (u64 s = 0; s < cb.samples.size(); ++s) {
      for (u64 pl = 0; pl < u64(c); ++pl) {
        const std::byte* cp = cb.data.data() + ((s * c + pl) * plane_coeffs) * 2;
        std::vector<double> cr(d.kh * d.wp, 0.0);  // C R
        for (u64 i = 0; i < d.kh; ++i)
          for (u64 j = 0; j < d.kw; ++j) {
            std::uint16_t hbits;
            std::memcpy(&hbits, cp + (i * d.kw + j) * 2, 2);
            const double cij = detail::half_to_float(hbits);
            for (u64 x = 0; x < d.wp; ++x) cr[i * d.wp + x] += cij * f32(d.r, j * d.wp + x);
          }
        for (u64 y = 0; y < u64(h); ++y)
          for (u64 x = 0; x < u64(w); ++x) {
            double v = p.offset;
            for (u64 i = 0; i < d.kh; ++i) v += f32(d.lt, y * d.kh + i) * cr[i * d.wp + x];
            const double got = std::clamp(std::nearbyint(v), 0.0, 255.0);
            const auto ref = static_cast<double>(
                static_cast<std::uint8_t>(want.data[((s * h + y) * w + x) * c + pl]));
            ASSERT_LE(std::fabs(got - ref), 1.0) << "sample " << cb.samples[s] << " plane " << pl;
            differ += got != ref;
            ++values;
          }
      }
    }
  }
  EXPECT_LT(differ, values / 100 + 1);
}

TEST(DecodeMatrices, ExportedInF16Bf16AndF32MatchTheDoubleOnes) {
  codec_params p;
  p.block = 8;
  p.chop = 4;
  const auto m = make_decode_matrices(p, 28, 30);
  EXPECT_EQ(m.hp, 32u);
  EXPECT_EQ(m.wp, 32u);
  EXPECT_EQ(m.kh, 16u);
  EXPECT_EQ(m.kw, 16u);
  for (coeff_type f : {coeff_type::f16, coeff_type::bf16, coeff_type::f32}) {
    const auto d = accel::export_decode_matrices(p, 28, 30, f);
    ASSERT_EQ(d.lt.size(), m.lt.size() * size_of(f));
    ASSERT_EQ(d.r.size(), m.r.size() * size_of(f));
    const double tol = f == coeff_type::f32 ? 1e-7 : (f == coeff_type::f16 ? 1e-3 : 4e-3);
    auto value = [&](const std::vector<std::byte>& bytes, std::size_t i) -> double {
      if (f == coeff_type::f32) {
        float x;
        std::memcpy(&x, bytes.data() + i * 4, 4);
        return x;
      }
      std::uint16_t h;
      std::memcpy(&h, bytes.data() + i * 2, 2);
      return f == coeff_type::f16 ? detail::half_to_float(h) : detail::bf16_to_float(h);
    };
    for (std::size_t i = 0; i < m.lt.size(); ++i) EXPECT_NEAR(value(d.lt, i), m.lt[i], tol) << "lt " << i;
    for (std::size_t i = 0; i < m.r.size(); ++i) EXPECT_NEAR(value(d.r, i), m.r[i], tol) << "r " << i;
  }
  EXPECT_THROW(accel::export_decode_matrices(p, 28, 30, coeff_type::i16), error);
}

}  // namespace
