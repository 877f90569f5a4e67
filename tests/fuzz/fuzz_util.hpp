// Helpers for the fuzz targets: hand the fuzzer's bytes to the readers as a file, either a
// regular file (random access) or a pipe (the stream readers used for stdin).
#pragma once
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "dctchop/error.hpp"

namespace dctchop::fuzz {

/** Writes all of [p, p+n) to fd; false on error. */
inline bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

/** The bytes as an anonymous regular file (memfd), opened by path like any file. */
class mem_file {
 public:
  mem_file(const std::uint8_t* data, std::size_t size) {
    fd_ = ::memfd_create("dctchop-fuzz", MFD_CLOEXEC);
    if (fd_ < 0 || !write_all(fd_, data, size)) std::abort();
  }
  ~mem_file() { ::close(fd_); }
  mem_file(const mem_file&) = delete;
  mem_file& operator=(const mem_file&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

/** The bytes in a pipe whose writing end is closed, so a reader sees a stream that ends.
 *  The writes happen up front, on this thread, so the pipe must hold them all: ok() is false
 *  (and the pipe empty) when the system gives a pipe less than `size` bytes. */
class pipe_file {
 public:
  static constexpr std::size_t pipe_capacity = 1 << 16;
  pipe_file(const std::uint8_t* data, std::size_t size) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) std::abort();
    if (size > 0 && ::fcntl(fds[1], F_GETPIPE_SZ) < static_cast<int>(size)) {
      ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(std::max(size, pipe_capacity)));
    }
    ok_ = size == 0 || ::fcntl(fds[1], F_GETPIPE_SZ) >= static_cast<int>(size);
    if (ok_ && !write_all(fds[1], data, size)) std::abort();
    ::close(fds[1]);
    fd_ = fds[0];
  }
  bool ok() const { return ok_; }
  ~pipe_file() { ::close(fd_); }
  pipe_file(const pipe_file&) = delete;
  pipe_file& operator=(const pipe_file&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

/** The two halves of the archive and NPY targets: `read(path)` on the bytes as a regular
 *  file, then (when the system's pipes hold them) as a pipe. A dctchop::error is the expected
 *  refusal of a bad input; anything else escapes to libFuzzer as a finding. */
template <typename Read>
void as_file_and_pipe(const std::uint8_t* data, std::size_t size, Read&& read) {
  {
    mem_file f(data, size);
    try {
      read(f.path(), true);
    } catch (const dctchop::error&) {
    }
  }
  if (size <= pipe_file::pipe_capacity) {
    pipe_file p(data, size);
    if (!p.ok()) return;  // the system gives small pipes: the file half ran
    try {
      read(p.path(), false);
    } catch (const dctchop::error&) {
    }
  }
}

/** Every row of an npy_reader in steps of at most 1/4 MiB; false (nothing read) when one row
 *  is over 1 MiB or empty. */
template <typename Reader>
bool read_rows_in_steps(Reader& r) {
  constexpr std::uint64_t max_buffer = 1u << 20;
  const std::uint64_t row = r.header().row_bytes();
  if (row == 0 || row > max_buffer) return false;
  const std::uint64_t step = std::max<std::uint64_t>(1, max_buffer / row / 4);
  std::vector<std::byte> buf(step * row);
  for (std::uint64_t first = 0; first < r.rows(); first += step) {
    r.read_rows(first, std::min(step, r.rows() - first), buf.data());
  }
  return true;
}

}  // namespace dctchop::fuzz
