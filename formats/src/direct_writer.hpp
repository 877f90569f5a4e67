// Internal: direct I/O (O_DIRECT) writes through a pool of aligned buffers and a flusher thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dctchop::formats::detail {

/** Writes aligned buffers to a file with direct I/O on a background thread, so that filling
 *  the next buffer overlaps the disk's write of the last one and no page-cache copy is made.
 *  The caller acquires a buffer, fills it, and submits it with its file offset; the flusher
 *  writes submitted buffers in order and hands them back. Sizes and offsets of submitted
 *  writes must be multiples of `align` (the last piece of a file goes through write_tail()).
 *  Should the file system refuse a direct write after all (EINVAL), the flusher switches the
 *  descriptor to buffered writes and carries on. Errors come back to the caller, as
 *  error(io) naming the file, on its next call. One caller thread. */
class direct_writer {
 public:
  static constexpr std::size_t align = 4096;  // a multiple of every logical block size
  static constexpr std::size_t buffer_bytes = std::size_t(8) << 20;

  /** Switch `fd` (not owned; it must outlive this object) to O_DIRECT and start the flusher;
   *  nullptr when direct I/O cannot be had (no O_DIRECT here, the file system refuses it,
   *  or no memory for the buffers). */
  static std::unique_ptr<direct_writer> start(int fd, std::string name, int buffers = 3);
  /** Stops the flusher once it has finished the write in progress; queued writes are
   *  dropped (call drain() first to keep them). */
  ~direct_writer();
  direct_writer(const direct_writer&) = delete;
  direct_writer& operator=(const direct_writer&) = delete;

  /** A free buffer of buffer_bytes, aligned; waits while all are queued. */
  std::byte* acquire();
  /** Queue `size` bytes of an acquired buffer for file offset `offset`. */
  void submit(std::byte* buffer, std::size_t size, std::uint64_t offset);
  /** Hand back an acquired buffer unused. */
  void release(std::byte* buffer);
  /** Wait until every queued write is on the disk's side of the kernel. */
  void drain();
  /** After drain(): write `size` bytes at `offset` through the page cache (for the partial
   *  last block of a file; any size and offset). */
  void write_tail(const std::byte* data, std::size_t size, std::uint64_t offset);

 private:
  struct job {
    std::byte* data;
    std::size_t size;
    std::uint64_t offset;
  };
  direct_writer(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  void run();
  void pwrite_all(const std::byte* p, std::size_t n, std::uint64_t offset);
  void rethrow_locked();
  void buffered();

  int fd_;
  std::string name_;
  bool direct_ = true;  // flusher thread, or the caller after drain()
  std::vector<std::byte*> owned_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::byte*> free_;
  std::deque<job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr err_;
  std::thread thread_;
};

}  // namespace dctchop::formats::detail
