#include "dctchop/host_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"

namespace dctchop {

recycling_resource::recycling_resource(std::shared_ptr<std::pmr::memory_resource> upstream,
                                       std::size_t keep)
    : up_(std::move(upstream)), keep_(keep), pid_(static_cast<long>(::getpid())) {
  if (!up_) throw error(errc::invalid_argument, "recycling_resource needs an upstream resource");
  free_.reserve(keep_);
}

recycling_resource::~recycling_resource() {
  if (forked()) return;  // (the kept blocks are the parent's, copied: left as they are)
  for (const block& b : free_) up_->deallocate(b.p, b.bytes, b.align);
}

bool recycling_resource::forked() const noexcept {
  return static_cast<long>(::getpid()) != pid_;
}

void recycling_resource::release_kept() {
  if (forked()) return;
  std::vector<block> kept;
  {
    std::lock_guard lock(m_);
    kept.swap(free_);
    keep_ = 0;
  }
  for (const block& b : kept) up_->deallocate(b.p, b.bytes, b.align);
}

recycling_resource::counts recycling_resource::statistics() const {
  std::lock_guard lock(m_);
  counts c = n_;
  c.retained = free_.size();
  return c;
}

void* recycling_resource::do_allocate(std::size_t bytes, std::size_t align) {
  if (forked()) return up_->allocate(bytes, align);
  {
    std::lock_guard lock(m_);
    const auto it = std::find_if(free_.begin(), free_.end(), [&](const block& b) {
      return b.bytes == bytes && b.align == align;
    });
    if (it != free_.end()) {
      void* p = it->p;
      free_.erase(it);
      ++n_.reused;
      return p;
    }
  }
  void* p = nullptr;
  try {
    p = up_->allocate(bytes, align);  // outside the lock: it may be slow
  } catch (const std::bad_alloc&) {
    // Upstream has no room (page-locked memory is limited): give it the blocks kept for
    // other sizes, and ask once more.
    std::vector<block> kept;
    {
      std::lock_guard lock(m_);  // (keep_ too: release_kept may change it)
      kept.reserve(keep_);       // becomes the free list: do_deallocate's push_back cannot throw
      kept.swap(free_);
    }
    if (kept.empty()) throw;
    for (const block& b : kept) up_->deallocate(b.p, b.bytes, b.align);
    p = up_->allocate(bytes, align);
  }
  std::lock_guard lock(m_);
  ++n_.from_upstream;
  return p;
}

void recycling_resource::do_deallocate(void* p, std::size_t bytes, std::size_t align) {
  if (forked()) return up_->deallocate(p, bytes, align);
  {
    std::lock_guard lock(m_);
    if (free_.size() < keep_) {
      free_.push_back({p, bytes, align});  // reserved: cannot throw
      return;
    }
  }
  up_->deallocate(p, bytes, align);
}

#if defined(__SANITIZE_ADDRESS__)  // (GCC's spelling)
#define DCTCHOP_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // (Clang's)
#define DCTCHOP_UNDER_ASAN 1
#endif
#endif
#ifndef DCTCHOP_UNDER_ASAN
#define DCTCHOP_UNDER_ASAN 0
#endif

namespace {

constexpr std::size_t k_huge_page = std::size_t(2) << 20;

/** Blocks of 2 MiB or more mapped straight from the kernel, 2 MiB aligned and marked for
 *  transparent huge pages (MADV_HUGEPAGE; the default THP setting, `madvise`, gives them
 *  only to memory so marked); smaller ones from the heap. A chunk's buffers are touched
 *  first by the read or the transform that fills them: in 4 KiB pages that was one page
 *  fault per 4 KiB, a third of `decompress`'s time on a 75 MiB archive here (a virtual
 *  machine, where faults are dear) and a tenth of `compress`'s on 300 MiB; the codec's
 *  loops also take fewer TLB misses. Unmapped when freed, so memory goes back at once, as
 *  glibc does with its own large blocks. Stateless. */
class large_page_resource final : public std::pmr::memory_resource {
  static bool large(std::size_t bytes, std::size_t align) {
    return bytes >= k_huge_page && align <= k_huge_page;
  }
  /** The part in huge pages: the whole ones, and the last one too when the buffer fills at
   *  least half of it (so a huge page is never more than half unused). */
  static std::size_t huge_part(std::size_t bytes) {
    const std::size_t whole = bytes / k_huge_page * k_huge_page;
    return bytes - whole >= k_huge_page / 2 ? whole + k_huge_page : whole;
  }
  /** The mapping's length: the huge part, or whole pages of the system's size past it. */
  static std::size_t mapped(std::size_t bytes) {
    static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return std::max(huge_part(bytes), (bytes + page - 1) / page * page);
  }
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (!large(bytes, align)) return std::pmr::new_delete_resource()->allocate(bytes, align);
    if (bytes > std::size_t(-1) - 2 * k_huge_page) throw std::bad_alloc();
    const std::size_t len = mapped(bytes), slack = len + k_huge_page;
    void* m = ::mmap(nullptr, slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    // Mapped a huge page longer, then trimmed to start on a 2 MiB boundary.
    const auto at = reinterpret_cast<std::uintptr_t>(m);
    const std::uintptr_t start = (at + k_huge_page - 1) & ~std::uintptr_t(k_huge_page - 1);
    if (start > at) ::munmap(m, start - at);
    if (at + slack > start + len) ::munmap(reinterpret_cast<void*>(start + len), at + slack - (start + len));
    // A short tail stays in small pages: a buffer just over 2 MiB takes no second huge page's
    // memory. (A hint: EINVAL without THP.)
    ::madvise(reinterpret_cast<void*>(start), huge_part(bytes), MADV_HUGEPAGE);
    return reinterpret_cast<void*>(start);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    if (!large(bytes, align)) return std::pmr::new_delete_resource()->deallocate(p, bytes, align);
    ::munmap(p, mapped(bytes));
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};

/** Where a backend without memory of its own keeps large buffers. Under AddressSanitizer the
 *  heap, whose blocks it guards (it does not see inside mappings). */
std::shared_ptr<std::pmr::memory_resource> large_pages() {
#if DCTCHOP_UNDER_ASAN
  return nullptr;
#else
  // One for the process, never destroyed: a buffer freed during exit (a Python object, a
  // thread still running) must still find it.
  static large_page_resource* const r = new large_page_resource;
  return std::shared_ptr<std::pmr::memory_resource>(std::shared_ptr<void>(), r);
#endif
}

}  // namespace

std::shared_ptr<std::pmr::memory_resource> large_page_memory() {
  if (auto r = large_pages()) return r;
  // (AddressSanitizer: the heap, not owned)
  return std::shared_ptr<std::pmr::memory_resource>(std::shared_ptr<void>(),
                                                    std::pmr::new_delete_resource());
}

std::shared_ptr<recycling_resource> recycled_large_pages(std::size_t keep) {
  return std::make_shared<recycling_resource>(large_page_memory(), DCTCHOP_UNDER_ASAN ? 0 : keep);
}

byte_buffer host_buffer(const backend& be, std::uint64_t bytes) {
  if (auto mem = be.host_memory()) {
    try {
      return byte_buffer(bytes, resource_allocator<std::byte>(std::move(mem)));
    } catch (const std::bad_alloc&) {
      // Page-locked memory is scarcer than memory: the heap then.
    }
  }
  return byte_buffer(bytes, resource_allocator<std::byte>(large_pages()));
}

}  // namespace dctchop
