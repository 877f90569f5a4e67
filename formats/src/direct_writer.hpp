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

/** Writes bytes appended in order, from one file offset on, with direct I/O: they gather in
 *  aligned buffers, which a background thread writes to the file as each fills, so that
 *  filling the next one overlaps the disk's write of the last one and no page-cache copy is
 *  made. finish() writes the last partial buffer (its whole blocks directly, the rest through
 *  the page cache) and waits for all. Should the file system refuse a direct write after all
 *  (EINVAL), the flusher switches the descriptor to buffered writes and carries on. Errors
 *  come back to the caller, as error(io) naming the file, on its next call. One caller
 *  thread. The two writers of large outputs use it: output_file, and the HDF5 sink for its
 *  data block. */
class direct_writer {
 public:
  static constexpr std::size_t align = 4096;  // a multiple of every logical block size
  static constexpr std::size_t buffer_bytes = std::size_t(8) << 20;

  /** Switch `fd` (not owned; it must outlive this object) to O_DIRECT and start the flusher;
   *  appended bytes go to the file from `offset` (a multiple of align) on. nullptr when
   *  direct I/O cannot be had (no O_DIRECT here, the file system refuses it, or no memory
   *  for the buffers) or gains nothing (tmpfs, whose files are memory). */
  static std::unique_ptr<direct_writer> start(int fd, std::string name, std::uint64_t offset = 0,
                                              int buffers = 3);
  /** Stops the flusher once it has finished the write in progress; queued writes are
   *  dropped (call finish() first to keep them). */
  ~direct_writer();
  direct_writer(const direct_writer&) = delete;
  direct_writer& operator=(const direct_writer&) = delete;

  /** Append `n` bytes; a buffer goes to the flusher when full. */
  void append(const void* data, std::size_t n);
  /** Write what is gathered, the partial last block through the page cache (nothing after
   *  the appended bytes is written over: the HDF5 sink's data has HDF5's bytes after it),
   *  and wait until every write is on the disk's side of the kernel. Appending may go on
   *  after, from the next offset. */
  void finish();

 private:
  /** A free buffer of buffer_bytes, aligned; waits while all are queued. */
  std::byte* acquire();
  /** Queue `size` bytes of an acquired buffer for file offset `offset`. */
  void submit(std::byte* buffer, std::size_t size, std::uint64_t offset);
  /** Hand back an acquired buffer unused. */
  void release(std::byte* buffer);
  /** Wait until every queued write is on the disk's side of the kernel. */
  void drain();
  /** After drain(): write `size` bytes at `offset` through the page cache (any size and
   *  offset). */
  void write_tail(const std::byte* data, std::size_t size, std::uint64_t offset);

  struct job {
    std::byte* data;
    std::size_t size;
    std::uint64_t offset;
  };
  direct_writer(int fd, std::string name, std::uint64_t offset)
      : fd_(fd), name_(std::move(name)), next_(offset) {}
  void run();
  void pwrite_all(const std::byte* p, std::size_t n, std::uint64_t offset);
  void rethrow_locked();
  void buffered();

  int fd_;
  std::string name_;
  // The caller's side: buf_ (acquired) holds fill_ bytes that belong at file offset next_.
  std::uint64_t next_;
  std::byte* buf_ = nullptr;
  std::size_t fill_ = 0;
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
