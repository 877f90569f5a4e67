#include "direct_writer.hpp"

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/magic.h>
#include <sys/vfs.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/file_io.hpp"

namespace dctchop::formats::detail {

std::unique_ptr<direct_writer> direct_writer::start(int fd, std::string name, std::uint64_t offset,
                                                    int buffers) {
#if defined(O_DIRECT)
  if (offset % align != 0) return nullptr;
#if defined(__linux__) && defined(TMPFS_MAGIC)
  // tmpfs takes O_DIRECT since Linux 6.6, as buffered writes: memory either way, but our
  // copy into the aligned buffers comes on top, and its writes ran at 1.7 GB/s where
  // buffered ones ran at 4.5 (BM_output_write, 2026-12-06). Buffered there.
  struct statfs fs {};
  if (::fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC) return nullptr;
#endif
  std::unique_ptr<direct_writer> w(new direct_writer(fd, std::move(name), offset));
  for (int i = 0; i < buffers; ++i) {
    auto* b = static_cast<std::byte*>(std::aligned_alloc(align, buffer_bytes));
    if (b == nullptr) return nullptr;
    w->owned_.push_back(b);
    w->free_.push_back(b);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) return nullptr;
  try {
    w->thread_ = dctchop::detail::start_quiet_thread([p = w.get()] { p->run(); });
  } catch (...) {  // no thread to be had: buffered writes, as where O_DIRECT is refused
    ::fcntl(fd, F_SETFL, flags);
    return nullptr;
  }
  return w;
#else
  (void)fd;
  (void)name;
  (void)offset;
  (void)buffers;
  return nullptr;
#endif
}

direct_writer::~direct_writer() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto* b : owned_) std::free(b);
}

void direct_writer::append(const void* data, std::size_t n) {
  const auto* p = static_cast<const std::byte*>(data);
  while (n > 0) {
    if (buf_ == nullptr) buf_ = acquire();
    const std::size_t k = std::min(n, buffer_bytes - fill_);
    std::memcpy(buf_ + fill_, p, k);
    fill_ += k;
    p += k;
    n -= k;
    if (fill_ == buffer_bytes) {
      submit(std::exchange(buf_, nullptr), fill_, next_);
      next_ += std::exchange(fill_, 0);
    }
  }
}

void direct_writer::finish() {
  const std::size_t whole = fill_ / align * align;
  std::byte* last = std::exchange(buf_, nullptr);
  if (last != nullptr && whole > 0) submit(last, whole, next_);
  drain();
  if (last != nullptr) {
    // The flusher has handed `last` back, and only this thread takes buffers: its partial
    // block is still there to write.
    write_tail(last + whole, fill_ - whole, next_ + whole);
    if (whole == 0) release(last);
  }
  next_ += std::exchange(fill_, 0);
}

void direct_writer::rethrow_locked() {
  if (err_) std::rethrow_exception(err_);
}

std::byte* direct_writer::acquire() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return !free_.empty() || err_; });
  rethrow_locked();
  std::byte* b = free_.back();
  free_.pop_back();
  return b;
}

void direct_writer::submit(std::byte* buffer, std::size_t size, std::uint64_t offset) {
  {
    std::lock_guard lock(m_);
    rethrow_locked();
    queue_.push_back({buffer, size, offset});
  }
  cv_.notify_all();
}

void direct_writer::release(std::byte* buffer) {
  {
    std::lock_guard lock(m_);
    free_.push_back(buffer);
  }
  cv_.notify_all();
}

void direct_writer::drain() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || err_; });
  rethrow_locked();
}

void direct_writer::write_tail(const std::byte* data, std::size_t size, std::uint64_t offset) {
  if (size == 0) return;
  if (direct_) buffered();
  pwrite_all(data, size, offset);
}

void direct_writer::buffered() {
#if defined(O_DIRECT)
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
    throw os_error(name_, "switch off direct I/O");
  }
#endif
  direct_ = false;
}

void direct_writer::pwrite_all(const std::byte* p, std::size_t n, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w =
        ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0) {
      if (errno == EINTR) continue;  // the flusher blocks the tool's signals; be safe anyway
      if (errno == EINVAL && direct_) {  // refused after all: buffered from now on
        buffered();
        continue;
      }
      throw os_error(name_, "write");
    }
    done += static_cast<std::size_t>(w);
  }
}

void direct_writer::run() {
  std::unique_lock lock(m_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
    if (stop_) return;
    const job j = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr err;
    try {
      pwrite_all(j.data, j.size, j.offset);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    free_.push_back(j.data);
    if (err && !err_) err_ = err;
    cv_.notify_all();
    if (err_) return;
  }
}

}  // namespace dctchop::formats::detail
