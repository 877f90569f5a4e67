/** @file npy.hpp
 *  NumPy .npy files (format versions 1.0, 2.0 and 3.0): a streaming reader and writer.
 *  Spec: https://numpy.org/devdocs/reference/generated/numpy.lib.format.html
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dctchop/formats/file_io.hpp"
#include "dctchop/types.hpp"

namespace dctchop::formats {

namespace detail {
class byte_source;
}

/** A numeric NumPy element type. */
struct npy_dtype {
  char kind = 'u';           ///< 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  std::size_t itemsize = 1;  ///< bytes per element
  bool big_endian = false;   ///< byte order in the file (false for itemsize 1)
  /** The descr in native (little-endian) form, e.g. "<u2", "|u1", "<f4". */
  std::string native_descr() const;
  /** NumPy's name: "bool", "uint64", "float16" (its "<u8" is uint64, dctchop's u8 uint8). */
  std::string numpy_name() const;
  /** The codec dtype, when this is one the codec takes (i1, u1, i2, u2, i4, u4, f2, f4, f8). */
  std::optional<dtype> codec_dtype() const;
};

/** Parse a descr such as "<f4", ">u2", "|u1", "|b1"; nullopt for anything non-numeric. */
std::optional<npy_dtype> parse_npy_descr(const std::string& descr);
/** Why parse_npy_descr() refused a descr, for an error message: "dtype '<c8': complex arrays
 *  are not supported (numeric arrays only: ...)". */
std::string unsupported_descr_reason(const std::string& descr);
/** The little-endian npy_dtype of a codec dtype. */
npy_dtype npy_dtype_of(dtype t);

/** Parsed header of a .npy file. */
struct npy_header {
  int major = 1, minor = 0;
  npy_dtype type;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;  ///< empty for a 0-d array
  std::uint64_t data_offset = 0;     ///< byte offset of the data
  std::uint64_t count() const;       ///< number of elements
  std::uint64_t row_bytes() const;   ///< bytes of one index along axis 0 (itemsize for 1-D)
};

/** Reads a .npy file along axis 0, converting to native byte order and C order.
 *  Files are read with positioned reads (a Fortran-order file through a memory map); stdin is
 *  read sequentially in chunks (C order only).
 *  Refuses object/pickled arrays, structured and non-numeric dtypes, bad magic and truncated
 *  data with dctchop::error(bad_input) naming the file. */
class npy_reader {
 public:
  /** Open and parse the header; "-" reads standard input. Checks that a regular file holds
   *  all the data the header promises. */
  static npy_reader open(const std::string& path, const std::string& stdin_name = "<stdin>");
  /** Read the array held in `bytes` (a member of a .npz file), named by its display_name(). */
  static npy_reader open(std::unique_ptr<detail::byte_source> bytes);
  npy_reader(npy_reader&&) noexcept;
  npy_reader& operator=(npy_reader&&) noexcept;
  ~npy_reader();

  const npy_header& header() const noexcept { return header_; }
  std::string display_name() const;
  /** Rows along axis 0 (1 for a 0-d array). */
  std::uint64_t rows() const;
  /** Copy rows [first, first+count) into dst as native-endian C-order data
   *  (count * header().row_bytes() bytes). From stdin rows must be read in order, each once;
   *  a compressed .npz member reads them in any order, decoding it again from the start to
   *  go back. */
  void read_rows(std::uint64_t first, std::uint64_t count, void* dst);
  /** input_file::watch for a file or standard input read as a stream. */
  void watch(std::function<void()> check);
  /** Threads that read_rows splits a large read of C-order rows over, where the bytes lie in
   *  a file as they are (a .npy file, a stored .npz member); 1 (the default): one. */
  void set_read_threads(unsigned threads) noexcept { read_threads_ = threads; }

 private:
  explicit npy_reader(std::unique_ptr<detail::byte_source> src);
  /** Sequential sources: pass over `bytes` bytes. */
  void skip(std::uint64_t bytes);
  std::unique_ptr<detail::byte_source> src_;
  npy_header header_;
  const std::byte* data_ = nullptr;  // held_'s data, once read
  std::vector<std::byte> held_;      // a small Fortran-order array of a deflated member, whole
  bool hold_ = false;                // such an array: held_ is read at the first read_rows
  std::uint64_t next_row_ = 0;       // next row for sequential (stdin) reads
  unsigned read_threads_ = 1;
};

/** Writes a .npy file (version 1.0, or 2.0 when the header needs it) row by row, in C order,
 *  little-endian. The output appears only after finish() (see output_file). */
class npy_writer {
 public:
  /** Create `path` ("-" for stdout) for an array of `type` and `shape`. */
  static npy_writer create(const std::string& path, const npy_dtype& type,
                           const std::vector<std::uint64_t>& shape, bool overwrite);
  /** Append native-endian C-order rows; the total must reach shape[0] rows before finish(). */
  void write_rows(const void* src, std::uint64_t count);
  /** Check the row count and make the file durable (output_file::flush_to_disk): finish()
   *  then only names it. */
  void prepare();
  /** prepare() if not done, then move the file into place. */
  void finish();
  /** After finish(): output_file::withdraw. */
  void withdraw() noexcept;
  /** output_file::defer_folder_sync and sync_folder, for the file written. */
  void defer_folder_sync() noexcept { out_.defer_folder_sync(); }
  void sync_folder() noexcept { out_.sync_folder(); }
  std::string display_name() const { return out_.display_name(); }
  /** Bytes written so far, the header included. */
  std::uint64_t bytes_written() const noexcept { return out_.position(); }
  /** output_file::watch for the file written. */
  void watch(std::function<void()> check) { out_.watch(std::move(check)); }

 private:
  npy_writer(output_file out) : out_(std::move(out)) {}
  output_file out_;
  npy_header header_;
  std::uint64_t rows_written_ = 0;
  bool finished_ = false;
};

/** Serialize a .npy header (magic, version, length, dict, padding to 64 bytes). */
std::vector<char> make_npy_header(const npy_dtype& type, const std::vector<std::uint64_t>& shape,
                                  bool fortran_order = false);

}  // namespace dctchop::formats
