/** @file host_memory.hpp
 *  Host buffers whose memory comes from a chosen std::pmr::memory_resource: page-locked
 *  (pinned) memory from the CUDA backend (cuda::pinned_memory()) for bytes on their way to a
 *  GPU, the heap otherwise. A GPU copies from pinned memory directly and asynchronously; from
 *  pageable memory the driver first copies into a pinned buffer of its own, synchronously.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace dctchop {

/** An allocator over a shared memory resource (none: new and delete). It keeps the resource
 *  alive while a buffer uses it, and it travels with its memory on move and swap, so moving a
 *  buffer never copies its bytes (a std::pmr::polymorphic_allocator does not propagate, and
 *  std::vector copies element by element on a move between resources). A copy of a buffer goes
 *  to the heap. resize() default-initializes: new bytes are left unset, for buffers that are
 *  written whole right after (a batch of several megabytes need not be cleared first). Memory
 *  is aligned to 64 bytes at least, whatever T: a byte buffer holds values of any type. */
template <typename T>
class resource_allocator {
 public:
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using propagate_on_container_copy_assignment = std::false_type;
  using is_always_equal = std::false_type;

  /** Alignment asked of the resource. */
  static constexpr std::size_t alignment = alignof(T) > 64 ? alignof(T) : 64;

  resource_allocator() noexcept = default;
  explicit resource_allocator(std::shared_ptr<std::pmr::memory_resource> r) noexcept
      : r_(std::move(r)) {}
  // Declared, so that there is no move constructor: a moved-from allocator must still equal
  // the new one (and a moved-from buffer stay in its resource), which a moved shared_ptr
  // would not.
  resource_allocator(const resource_allocator&) noexcept = default;
  resource_allocator& operator=(const resource_allocator&) noexcept = default;
  template <typename U>
  resource_allocator(const resource_allocator<U>& other) noexcept : r_(other.resource()) {}

  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    auto* r = r_ ? r_.get() : std::pmr::new_delete_resource();
    return static_cast<T*>(r->allocate(n * sizeof(T), alignment));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    auto* r = r_ ? r_.get() : std::pmr::new_delete_resource();
    r->deallocate(p, n * sizeof(T), alignment);
  }
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(args)...);
  }
  resource_allocator select_on_container_copy_construction() const noexcept { return {}; }

  /** The resource (nullptr: the heap). */
  const std::shared_ptr<std::pmr::memory_resource>& resource() const noexcept { return r_; }

  template <typename U>
  friend bool operator==(const resource_allocator& a, const resource_allocator<U>& b) noexcept {
    const auto* x = a.resource().get();
    const auto* y = b.resource().get();
    return x == y || (x != nullptr && y != nullptr && x->is_equal(*y));
  }

 private:
  std::shared_ptr<std::pmr::memory_resource> r_;
};

/** Bytes in memory of a chosen resource; see resource_allocator. */
using byte_buffer = std::vector<std::byte, resource_allocator<std::byte>>;

/** Memory for large host buffers: blocks of 2 MiB or more mapped from the kernel, 2 MiB
 *  aligned and marked for transparent huge pages (one page fault per 2 MiB when first
 *  touched, not one per 4 KiB), and unmapped when freed; smaller blocks from the heap. Under
 *  AddressSanitizer the heap alone, whose blocks it guards. One for the process, stateless
 *  and thread-safe; it is never destroyed, so a buffer freed during exit still finds it. */
std::shared_ptr<std::pmr::memory_resource> large_page_memory();

/** A thread-safe resource that keeps the blocks given back to it and hands them out again for
 *  requests of the same size and alignment: a loader that makes one batch after another gets
 *  memory from its upstream (pinned memory is slow to get: the pages are locked and mapped for
 *  the device) only until its pipeline is full. At most `keep` free blocks are retained; the
 *  rest go back upstream at once, and all of them when the resource is destroyed, or when
 *  upstream has no room for a request (std::bad_alloc), which is then tried once more. In a
 *  process forked from the one that made it (a DataLoader worker freeing a batch made before
 *  the fork), blocks come from and go straight to upstream, past the lock, which a thread of
 *  the parent may have held at the fork. */
class recycling_resource final : public std::pmr::memory_resource {
 public:
  explicit recycling_resource(std::shared_ptr<std::pmr::memory_resource> upstream,
                              std::size_t keep = 16);
  ~recycling_resource() override;
  recycling_resource(const recycling_resource&) = delete;
  recycling_resource& operator=(const recycling_resource&) = delete;

  /** Give the retained blocks back upstream and keep none from now on: for an owner that is
   *  done making buffers while some are still out (a loader destroyed while its caller holds
   *  a batch), so that the blocks freed meanwhile do not wait for the last one. */
  void release_kept();

  struct counts {
    std::uint64_t from_upstream = 0;  ///< blocks obtained from upstream
    std::uint64_t reused = 0;         ///< requests served from a retained block
    std::uint64_t retained = 0;       ///< free blocks held now
  };
  counts statistics() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  struct block {
    void* p;
    std::size_t bytes, align;
  };
  /** Whether this is a process forked from the one that made the resource. */
  bool forked() const noexcept;

  std::shared_ptr<std::pmr::memory_resource> up_;
  std::size_t keep_;
  long pid_;  // the process that made it
  mutable std::mutex m_;
  std::vector<block> free_;
  counts n_;
};

/** A recycling_resource over large_page_memory(), for buffers that a component makes and frees
 *  again and again at a few sizes (a loader's batches and chunks): after the first of each,
 *  neither page faults nor the kernel's clearing of fresh pages. Under AddressSanitizer it
 *  keeps no block, so that a buffer used after it was freed is still found. */
std::shared_ptr<recycling_resource> recycled_large_pages(std::size_t keep = 16);

}  // namespace dctchop
