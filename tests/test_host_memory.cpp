// Tests of host buffers from a chosen memory resource (dctchop/host_memory.hpp): the
// recycling resource that sits over pinned memory for the GPU loader, byte buffers that keep
// their memory when moved, and a loader whose batches are gathered into a given resource.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dctchop/cuda.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/host_memory.hpp"
#include "dctchop/loader.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using u64 = std::uint64_t;

/** The heap, watched (thread-safe): it counts what it hands out and gets back, remembers its
 *  blocks (to tell whether a range lies in one) and the smallest alignment asked of it, and
 *  refuses beyond `cap` bytes at a time, as page-locked memory is limited. */
class test_heap final : public std::pmr::memory_resource {
 public:
  explicit test_heap(std::size_t cap = ~std::size_t(0)) : cap_(cap) {}
  std::atomic<u64> allocations{0}, deallocations{0};
  std::atomic<std::int64_t> live_bytes{0};
  std::atomic<std::size_t> smallest{~std::size_t(0)};

  bool holds(const void* p, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(m_);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
  }

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    std::lock_guard lock(m_);
    if (static_cast<std::size_t>(live_bytes) + bytes > cap_) throw std::bad_alloc();
    void* p = std::pmr::new_delete_resource()->allocate(bytes, align);
    ++allocations;
    live_bytes += static_cast<std::int64_t>(bytes);
    smallest = std::min<std::size_t>(smallest, align);
    blocks_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    std::lock_guard lock(m_);
    ++deallocations;
    live_bytes -= static_cast<std::int64_t>(bytes);
    blocks_.erase(reinterpret_cast<std::uintptr_t>(p));
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override {
    return this == &o;
  }
  std::size_t cap_;
  mutable std::mutex m_;
  std::map<std::uintptr_t, std::size_t> blocks_;
};

TEST(RecyclingResource, NoUpstreamIsTheCallersMistakeNotABug) {
  try {
    recycling_resource pool(nullptr);
    ADD_FAILURE() << "no upstream taken";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();  // (was internal: "a bug")
  }
}

TEST(RecyclingResource, AFreedBlockIsHandedOutAgainForTheSameSizeAndAlignmentOnly) {
  auto up = std::make_shared<test_heap>();
  recycling_resource pool(up);
  void* a = pool.allocate(1000, 64);
  pool.deallocate(a, 1000, 64);
  EXPECT_EQ(pool.statistics().retained, 1u);
  EXPECT_EQ(pool.allocate(1000, 64), a);  // the same block, not a new one
  EXPECT_EQ(up->allocations, 1u);
  EXPECT_EQ(pool.statistics().reused, 1u);
  void* b = pool.allocate(999, 64);   // another size
  void* c = pool.allocate(1000, 128);  // another alignment
  EXPECT_EQ(up->allocations, 3u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c) % 128, 0u);
  pool.deallocate(a, 1000, 64);
  pool.deallocate(b, 999, 64);
  pool.deallocate(c, 1000, 128);
  EXPECT_EQ(up->deallocations, 0u);  // all kept
  EXPECT_EQ(pool.statistics().from_upstream, 3u);
}

TEST(RecyclingResource, KeepsAtMostItsLimitAndGivesEverythingBackWhenDestroyed) {
  auto up = std::make_shared<test_heap>();
  {
    recycling_resource pool(up, 2);
    std::vector<void*> p;
    for (int i = 0; i < 5; ++i) p.push_back(pool.allocate(256, 16));
    for (void* x : p) pool.deallocate(x, 256, 16);
    EXPECT_EQ(pool.statistics().retained, 2u);
    EXPECT_EQ(up->deallocations, 3u);  // beyond the limit: back upstream at once
    EXPECT_EQ(up->live_bytes, 2 * 256);
  }
  EXPECT_EQ(up->live_bytes, 0);
  EXPECT_EQ(up->allocations, up->deallocations);
}

TEST(RecyclingResource, ReleasingWhatItKeepsGivesItBackAndKeepsNoneAfter) {
  auto up = std::make_shared<test_heap>();
  recycling_resource pool(up, 4);
  void* a = pool.allocate(256, 16);
  void* b = pool.allocate(256, 16);
  pool.deallocate(a, 256, 16);
  EXPECT_EQ(pool.statistics().retained, 1u);
  pool.release_kept();
  EXPECT_EQ(pool.statistics().retained, 0u);
  EXPECT_EQ(up->deallocations, 1u);
  pool.deallocate(b, 256, 16);  // freed after: straight back upstream
  EXPECT_EQ(pool.statistics().retained, 0u);
  EXPECT_EQ(up->live_bytes, 0);
}

TEST(RecyclingResource, InAForkedChildBlocksComeFromAndGoStraightToUpstream) {
  // A DataLoader worker forked while a loader ran frees batches made before the fork: the
  // parent's lock may have been held at the fork (by its prefetch thread), so a child must
  // not take it, nor keep blocks in the parent's list.
  auto up = std::make_shared<test_heap>();
  recycling_resource pool(up, 4);
  void* kept = pool.allocate(4096, 64);
  void* out = pool.allocate(4096, 64);
  pool.deallocate(kept, 4096, 64);
  ASSERT_EQ(pool.statistics().retained, 1u);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // No gtest assertions in the child: its exit code says what it found.
    const u64 freed = up->deallocations, made = up->allocations;
    pool.deallocate(out, 4096, 64);         // upstream, not kept
    void* again = pool.allocate(4096, 64);  // upstream, not the block kept before
    const bool ok = up->deallocations == freed + 1 && up->allocations == made + 1 && again != kept;
    pool.deallocate(again, 4096, 64);
    ::_exit(ok && up->deallocations == freed + 2 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child kept or took blocks of the parent's list";
  pool.deallocate(out, 4096, 64);  // the parent's own: kept as before
  EXPECT_EQ(pool.statistics().retained, 2u);
}

TEST(RecyclingResource, AllocatingOnOneThreadAndFreeingOnAnotherIsSafe) {
  // The loader's prefetch thread allocates batches; the consumer frees them.
  auto up = std::make_shared<test_heap>();
  auto pool = std::make_shared<recycling_resource>(up, 4);
  std::vector<std::atomic<std::byte*>> handed(2000);  // value-initialized: nullptr
  std::atomic<std::size_t> freed{0};
  std::thread producer([&] {
    for (std::size_t i = 0; i < handed.size(); ++i) {
      while (i >= freed.load() + 3) std::this_thread::yield();  // at most 3 live, as a pipeline
      auto* p = static_cast<std::byte*>(pool->allocate(4096, 64));
      std::memset(p, static_cast<int>(i & 0xff), 4096);
      handed[i].store(p);
    }
  });
  for (std::size_t i = 0; i < handed.size(); ++i) {
    std::byte* p = nullptr;
    while ((p = handed[i].load()) == nullptr) std::this_thread::yield();
    ASSERT_EQ(p[4095], static_cast<std::byte>(i & 0xff));
    pool->deallocate(p, 4096, 64);
    freed.store(i + 1);
  }
  producer.join();
  EXPECT_LE(up->allocations, 8u);  // the pipeline's depth, not one per block
  pool.reset();
  EXPECT_EQ(up->live_bytes, 0);
}

TEST(RecyclingResource, WhenUpstreamIsFullItGivesBackWhatItKeepsAndTriesAgain) {
  auto up = std::make_shared<test_heap>(1000);
  recycling_resource pool(up);
  void* a = pool.allocate(400, 64);
  void* b = pool.allocate(400, 64);
  pool.deallocate(a, 400, 64);
  pool.deallocate(b, 400, 64);  // both kept: 800 of upstream's 1000 bytes
  void* c = pool.allocate(900, 64);  // fits only once the kept blocks are back
  EXPECT_EQ(up->live_bytes, 900);
  EXPECT_EQ(pool.statistics().retained, 0u);
  EXPECT_THROW((void)pool.allocate(200, 64), std::bad_alloc);  // nothing kept: a real refusal
  pool.deallocate(c, 900, 64);
}

TEST(HostBuffer, FallsBackToTheHeapWhenTheBackendsMemoryHasNoRoom) {
  // A backend whose host memory is full: host_buffer() still gives a buffer, on the heap.
  class full_backend final : public backend {
   public:
    std::shared_ptr<std::pmr::memory_resource> mem = std::make_shared<test_heap>(100);
    std::string name() const override { return "cpu"; }
    void encode(const codec_params&, const const_sample_view&, std::span<std::byte>) override {}
    void decode(const codec_params&, std::span<const std::byte>, const sample_view&) override {}
    std::shared_ptr<std::pmr::memory_resource> host_memory() const override { return mem; }
  } be;
  const byte_buffer fits = host_buffer(be, 64);
  EXPECT_EQ(fits.get_allocator().resource(), be.mem);
  const byte_buffer big = host_buffer(be, 4096);
  EXPECT_EQ(big.size(), 4096u);
  EXPECT_NE(big.get_allocator().resource(), be.mem);
  auto cpu = make_backend(backend_kind::cpu, {1});
  EXPECT_EQ(cpu->host_memory(), nullptr);  // the CPU's is the heap
  EXPECT_EQ(host_buffer(*cpu, 8).get_allocator(), big.get_allocator());
}

namespace {

/** The VmFlags of the mapping in /proc/self/smaps that holds `p` ("" when none does). */
[[maybe_unused]] std::string vm_flags_at(const void* p) {  // (unused under ASan)
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::istringstream smaps(test::read_bytes("/proc/self/smaps"));
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && (head >> std::hex >> lo >> dash >> hi) &&
        dash == '-') {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8) + " ";
    }
  }
  return "";
}

}  // namespace

TEST(HostBuffer, LargeCpuBuffersLieOnTwoMiBBoundariesInMemoryMarkedForHugePages) {
  // A chunk's buffers in 2 MiB pages: one fault per 2 MiB when they are first filled, not
  // one per 4 KiB. (Under AddressSanitizer they stay on the heap, which it guards.)
  auto cpu = make_backend(backend_kind::cpu, {1});
  const std::size_t n = (std::size_t(8) << 20) + 5;
  byte_buffer big = host_buffer(*cpu, n);
  ASSERT_EQ(big.size(), n);
  for (std::size_t i = 0; i < n; i += 4096) big[i] = std::byte(i >> 12);
  big[n - 1] = std::byte{9};
  for (std::size_t i = 0; i < n; i += 4096) ASSERT_EQ(big[i], std::byte(i >> 12)) << i;
  EXPECT_EQ(big[n - 1], std::byte{9});
#if defined(DCTCHOP_TEST_ASAN)
  EXPECT_EQ(big.get_allocator().resource(), nullptr);
#else
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.data()) % (std::uintptr_t(2) << 20), 0u);
  {  // (a kernel without THP, or a process that may not use them, refuses the mark)
    const std::size_t len = std::size_t(2) << 20;
    void* probe = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool marks = ::madvise(probe, len, MADV_HUGEPAGE) == 0;
    ::munmap(probe, len);
    if (!marks) GTEST_SKIP() << "this kernel or process takes no MADV_HUGEPAGE";
  }
  EXPECT_NE(vm_flags_at(big.data()).find(" hg "), std::string::npos)
      << "not marked MADV_HUGEPAGE: " << vm_flags_at(big.data());
  const std::size_t whole = n / (std::size_t(2) << 20) * (std::size_t(2) << 20);
  EXPECT_NE(vm_flags_at(big.data() + whole - 1).find(" hg "), std::string::npos);
  // A short tail past the last whole huge page stays in small pages: a buffer just over a
  // multiple of 2 MiB takes no extra huge page's memory. A long one (half a huge page or
  // more) is in one more.
  EXPECT_EQ(vm_flags_at(big.data() + n - 1).find(" hg "), std::string::npos);
  const std::size_t m = (std::size_t(5) << 20) + (std::size_t(3) << 18);  // 5.75 MiB
  byte_buffer longer = host_buffer(*cpu, m);
  EXPECT_NE(vm_flags_at(longer.data() + m - 1).find(" hg "), std::string::npos);
  // A small buffer stays on the heap, unmarked.
  const byte_buffer small = host_buffer(*cpu, 64 << 10);
  EXPECT_EQ(vm_flags_at(small.data()).find(" hg "), std::string::npos) << vm_flags_at(small.data());
  // Grown past 2 MiB, a small buffer moves to the marked memory too.
  byte_buffer grows = host_buffer(*cpu, 16);
  grows.resize(std::size_t(3) << 20);
  EXPECT_NE(vm_flags_at(grows.data()).find(" hg "), std::string::npos);
#endif
}

TEST(ByteBuffer, MovingKeepsTheMemoryAndTheResourceAndACopyGoesToTheHeap) {
  auto up = std::make_shared<test_heap>();
  byte_buffer a(1 << 16, resource_allocator<std::byte>(up));
  a[0] = std::byte{7};
  const std::byte* where = a.data();
  EXPECT_EQ(up->allocations, 1u);
  byte_buffer b = std::move(a);
  EXPECT_EQ(b.data(), where);
  EXPECT_EQ(a.get_allocator().resource(), up);  // a moved-from buffer stays in its resource
  byte_buffer c;  // on the heap
  c.resize(10);
  c = std::move(b);  // a move assignment takes the memory and its resource over
  EXPECT_EQ(c.data(), where);
  EXPECT_EQ(c.get_allocator().resource(), up);
  EXPECT_EQ(up->allocations, 1u);  // no copy was made in the resource
  const byte_buffer d = c;           // a copy: on the heap
  EXPECT_EQ(d.get_allocator().resource(), nullptr);
  EXPECT_EQ(d[0], std::byte{7});
  EXPECT_EQ(up->allocations, 1u);
  a.resize(16);  // the moved-from buffer grows in its resource
  EXPECT_EQ(up->allocations, 2u);
  // The buffers keep their resource alive after every other owner let go.
  std::weak_ptr<test_heap> watch = up;
  up.reset();
  EXPECT_FALSE(watch.expired());
  a = byte_buffer();
  b = byte_buffer();
  c = byte_buffer();
  EXPECT_TRUE(watch.expired());
}

TEST(ByteBuffer, AsksForAlignmentFitForAnyValueType) {
  // A batch of bytes is read as f32, f64 or u16 (NumPy, DLPack, the decode views): a resource
  // that honours only what it is asked must still give aligned memory.
  auto r = std::make_shared<test_heap>();
  byte_buffer a(100, resource_allocator<std::byte>(r));
  EXPECT_EQ(r->smallest, 64u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u);
  byte_buffer heap(3);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(heap.data()) % 64, 0u);
}

/** dir/a.dcz: samples that hold their own index; 5 samples per chunk, labels. */
std::string make_archive(const dctchop::test::temp_dir& dir, u64 n) {
  return dctchop::test::make_index_archive(dir, n, 5, true);
}

TEST(LoaderBatchMemory, BatchesAreGatheredIntoTheGivenResourceWithTheSameBytes) {
  dctchop::test::temp_dir dir;
  const auto a = make_archive(dir, 60);
  auto up = std::make_shared<test_heap>();
  for (const bool decode : {true, false}) {
    loaders::loader_options o;
    o.batch_size = 7;
    o.seed = 3;
    o.decode = decode;
    o.prefetch = 3;
    loaders::archive_loader own(a, o);  // no batch_memory: the loader's own
    o.batch_memory = std::make_shared<recycling_resource>(up);
    {
      loaders::archive_loader pooled(a, o);
      for (int i = 0; i < 30; ++i) {
        const auto x = own.next(), y = pooled.next();
        EXPECT_EQ(x.samples, y.samples);
        EXPECT_TRUE(x.data == y.data) << "batch " << i;
        EXPECT_NE(x.data.get_allocator().resource(), nullptr);
        EXPECT_NE(x.data.get_allocator().resource(), o.batch_memory);
        EXPECT_EQ(y.data.get_allocator().resource(), o.batch_memory) << "batch " << i;
      }
      // Batches are recycled: the queue's depth plus the one being made and the one held.
      EXPECT_LE(std::static_pointer_cast<recycling_resource>(o.batch_memory)->statistics()
                    .from_upstream,
                o.prefetch + 3);
    }
    o.batch_memory.reset();
    EXPECT_EQ(up->live_bytes, 0) << "decode " << decode;  // the loader and its batches are gone
  }
  EXPECT_GT(up->allocations, 0u);
}

TEST(LoaderBatchMemory, WithoutOneGivenBatchesAreRecycledInLargePagesOfTheLoadersOwn) {
  // Batches of 2.25 MiB (9216 samples of 256 bytes), each released before the next is asked
  // for: from the heap, a batch past glibc's largest mapping threshold (32 MiB, a training
  // batch of 256 images of 256x256x3 is 50 MB) came as fresh pages every time, and gathering
  // it spent most of its time in page faults. Now the loader recycles its own blocks, in huge
  // pages, and they go with the loader and its last batch.
  dctchop::test::temp_dir dir;
  const auto a = dctchop::test::make_index_archive(dir, 20000, 4096, false);
  loaders::loader_options o;
  o.batch_size = 9216;
  o.seed = 5;
  loaders::loader_options heap_options = o;
  heap_options.batch_memory = std::make_shared<test_heap>();  // the bytes to compare with
  loaders::archive_loader heap(a, heap_options);
  std::shared_ptr<std::pmr::memory_resource> used;
  loaders::batch kept;
  {
    loaders::archive_loader l(a, o);
    for (int i = 0; i < 12; ++i) {  // 6 epochs of 2 batches
      auto b = l.next();
      const auto want = heap.next();
      ASSERT_EQ(b.data.size(), 9216u * 256u);
      EXPECT_EQ(b.samples, want.samples) << "batch " << i;
      EXPECT_TRUE(b.data == want.data) << "batch " << i;
      if (i == 0) used = b.data.get_allocator().resource();
      EXPECT_EQ(b.data.get_allocator().resource(), used) << "batch " << i;
#if !defined(DCTCHOP_TEST_ASAN)
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data.data()) % (std::uintptr_t(2) << 20), 0u)
          << "batch " << i;
#endif
      if (i == 11) kept = std::move(b);
    }
    const auto pool = std::dynamic_pointer_cast<recycling_resource>(used);
    ASSERT_NE(pool, nullptr);
    // The prefetch queue's batches, the one being made, the one held (and one being freed):
    // the rest reused.
    const auto n = pool->statistics();
#if defined(DCTCHOP_TEST_ASAN)
    EXPECT_EQ(n.reused, 0u);  // none kept, so that AddressSanitizer sees each batch freed
#else
    EXPECT_LE(n.from_upstream, o.prefetch + 3);
    EXPECT_GE(n.reused, 12u - (o.prefetch + 3));
#endif
  }
  // The loader is gone; its memory stays with the batch still held, but keeps no freed block
  // for reuse (the batches of the prefetch queue went back as the loader stopped).
  EXPECT_GT(used.use_count(), 1);
  EXPECT_EQ(std::static_pointer_cast<recycling_resource>(used)->statistics().retained, 0u);
  for (u64 k = 0; k < kept.samples.size(); k += 1000) {
    EXPECT_EQ(static_cast<u64>(kept.data[k * 256 + 7]), kept.samples[k] % 256) << k;
  }
  kept = loaders::batch();
  EXPECT_EQ(used.use_count(), 1);
}

TEST(LoaderBatchMemory, ABatchOutlivesItsLoader) {
  dctchop::test::temp_dir dir;
  const auto a = make_archive(dir, 20);
  auto up = std::make_shared<test_heap>();
  loaders::batch kept;
  {
    loaders::loader_options o;
    o.batch_size = 4;
    o.shuffle = false;
    o.batch_memory = std::make_shared<recycling_resource>(up);
    loaders::archive_loader l(a, o);
    kept = l.next();
  }
  ASSERT_EQ(kept.data.size(), 4u * 256u);
  for (u64 k = 0; k < 4; ++k) EXPECT_EQ(static_cast<u64>(kept.data[k * 256 + 9]), k);
  EXPECT_GT(up->live_bytes, 0);
  kept = loaders::batch();
  EXPECT_EQ(up->live_bytes, 0);
}

TEST(PinnedMemory, WithoutACudaDeviceIsAClearError) {
  if (cuda::available()) GTEST_SKIP() << "a CUDA device is present";
  std::vector<std::byte> v(64);
  EXPECT_FALSE(cuda::is_pinned(v.data(), v.size()));
  try {
    (void)cuda::pinned_memory(0);
    FAIL() << "pinned memory without a device";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::backend_unavailable) << e.what();
  }
}

/** The CPU backend, offering a watched heap as its host memory (as the CUDA backend
 *  offers pinned memory) and counting the calls whose buffers lie outside it. */
class host_memory_backend final : public backend {
 public:
  std::shared_ptr<test_heap> mem = std::make_shared<test_heap>();
  std::atomic<int> encodes{0}, decodes{0}, outside{0};

  std::string name() const override { return "cpu"; }
  void encode(const codec_params& p, const const_sample_view& in,
              std::span<std::byte> coeffs) override {
    ++encodes;
    if (!mem->holds(in.data, bytes_of(in)) || !mem->holds(coeffs.data(), coeffs.size())) {
      ++outside;
    }
    cpu_->encode(p, in, coeffs);
  }
  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& out) override {
    ++decodes;
    if (!mem->holds(coeffs.data(), coeffs.size()) || !mem->holds(out.data, bytes_of(out))) {
      ++outside;
    }
    cpu_->decode(p, coeffs, out);
  }
  std::shared_ptr<std::pmr::memory_resource> host_memory() const override { return mem; }

 private:
  template <typename View>
  static std::size_t bytes_of(const View& v) {
    return v.samples * v.planes * v.height * v.width * size_of(v.type);
  }
  std::unique_ptr<backend> cpu_ = make_backend(backend_kind::cpu, {1});
};

TEST(BackendHostMemory, EveryPipelineHandsTheBackendBuffersInItsHostMemory) {
  // Compress (with the quality measurement and with a target search), decompress, verify and
  // eval: every encode and decode sees only buffers from backend::host_memory(), so that the
  // CUDA backend copies them to and from the device without staging. Results are the CPU's.
  dctchop::test::temp_dir dir;
  const u64 n = 37;
  std::vector<std::uint8_t> v(n * 20 * 12 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 37) ^ (i >> 5));
  dctchop::test::save_npy(dir.file("x.npy"), dtype::u8, {n, 20, 12, 3}, v);
  host_memory_backend be;
  auto cpu = make_backend(backend_kind::cpu, {1});
  formats::compress_options co;
  co.chunk_mb = 0.004;  // several chunks
  formats::compress_npy(dir.file("x.npy"), dir.file("a.dcz"), be, co);
  formats::compress_npy(dir.file("x.npy"), dir.file("c.dcz"), *cpu, co);
  co.target.psnr_db = 30;
  formats::compress_npy(dir.file("x.npy"), dir.file("t.dcz"), be, co);
  formats::decompress_to_npy(dir.file("a.dcz"), dir.file("a.npy"), be, {});
  formats::decompress_to_npy(dir.file("c.dcz"), dir.file("c.npy"), *cpu, {});
  const auto vr = formats::verify_archive(dir.file("a.dcz"), dir.file("x.npy"), be, {});
  EXPECT_TRUE(vr.passed());
  formats::eval_options eo;
  eo.chops = {2, 4};
  (void)formats::eval_npy(dir.file("x.npy"), be, eo);
  EXPECT_GT(be.encodes, 4);
  EXPECT_GT(be.decodes, 4);
  EXPECT_EQ(be.outside, 0) << "calls with a buffer outside the backend's host memory";
  EXPECT_EQ(dctchop::test::read_bytes(dir.file("a.npy")), dctchop::test::read_bytes(dir.file("c.npy")));
}

}  // namespace
