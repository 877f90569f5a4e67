// Where the bytes of a .npy array come from: a whole file (or stdin), or one member of a .npz
// (a ZIP archive, zip_reader.hpp). npy_reader reads through this interface. Internal header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace dctchop::formats::detail {

class byte_source {
 public:
  virtual ~byte_source() = default;
  /** For messages: "train.npy", "<stdin>", "mnist.npz:x_train". */
  virtual std::string display_name() const = 0;
  /** True when size() and read_at() work (a regular file, a stored .npz member). */
  virtual bool seekable() const = 0;
  /** Bytes in all (seekable sources). */
  virtual std::uint64_t size() const = 0;
  /** Sequential read from where the last one ended; fewer than n bytes only at the end. */
  virtual std::size_t read(void* dst, std::size_t n) = 0;
  /** Exactly n bytes at `offset` (seekable sources); a short read throws. */
  virtual void read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what) = 0;
  /** read_at on up to `threads` threads (input_file's split read) where the bytes lie in a
   *  file as they are; else read_at. */
  virtual void read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what,
                       unsigned threads) {
    (void)threads;
    read_at(offset, dst, n, what);
  }
  /** Whether a source that is not seekable can start again from its first byte (a deflated
   *  .npz member: decoded again from the start; stdin cannot). */
  virtual bool restartable() const { return false; }
  /** Start the sequential reads again from the first byte. */
  virtual void restart() {}
  /** The array's last row has been read: a .npz member checks its CRC-32 and size now, reading
   *  whatever was not read in order from its first byte (the bytes after the array, or all of
   *  a Fortran-order array, which is gathered out of order). Throws error(bad_input). */
  virtual void finish() {}
  /** input_file::watch, for a source read from a stream. */
  virtual void watch(std::function<void()> check) { (void)check; }
};

}  // namespace dctchop::formats::detail
