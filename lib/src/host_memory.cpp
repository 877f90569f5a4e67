#include "dctchop/host_memory.hpp"

#include <algorithm>
#include <new>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"

namespace dctchop {

recycling_resource::recycling_resource(std::shared_ptr<std::pmr::memory_resource> upstream,
                                       std::size_t keep)
    : up_(std::move(upstream)), keep_(keep) {
  if (!up_) throw error(errc::internal, "recycling_resource needs an upstream resource");
  free_.reserve(keep_);
}

recycling_resource::~recycling_resource() {
  for (const block& b : free_) up_->deallocate(b.p, b.bytes, b.align);
}

recycling_resource::counts recycling_resource::statistics() const {
  std::lock_guard lock(m_);
  counts c = n_;
  c.retained = free_.size();
  return c;
}

void* recycling_resource::do_allocate(std::size_t bytes, std::size_t align) {
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
    kept.reserve(keep_);  // becomes the free list: do_deallocate's push_back cannot throw
    {
      std::lock_guard lock(m_);
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
  {
    std::lock_guard lock(m_);
    if (free_.size() < keep_) {
      free_.push_back({p, bytes, align});  // reserved: cannot throw
      return;
    }
  }
  up_->deallocate(p, bytes, align);
}

byte_buffer host_buffer(const backend& be, std::uint64_t bytes) {
  if (auto mem = be.host_memory()) {
    try {
      return byte_buffer(bytes, resource_allocator<std::byte>(std::move(mem)));
    } catch (const std::bad_alloc&) {
      // Page-locked memory is scarcer than memory: the heap then.
    }
  }
  return byte_buffer(bytes);
}

}  // namespace dctchop
