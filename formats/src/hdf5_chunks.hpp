// Internal: reading a compressed HDF5 dataset's chunks on several threads. HDF5 undoes a chunk's
// filters on the thread that reads it, one chunk after another: a gzip-compressed input then
// runs at the speed of one core's inflate, far below the codec's. This reader takes the
// chunks as stored (H5Dread_chunk, on the calling thread: serial HDF5 is not thread-safe) and
// undoes the filters itself on several threads (libdeflate, liblzf, libzstd), checking that
// each chunk decodes to its size, which HDF5 1.10's deflate filter does not.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dctchop::formats::detail {

/** What a chunked dataset's index says of the chunk at `offset` (its first element). */
enum class chunk_state {
  stored,         ///< `size` bytes stored
  never_written,  ///< not in the index
  unknown         ///< HDF5 cannot say (a damaged index: its own read then says why)
};
/** Looks the chunk up by the index's own search (log n), and only where that fails for
 *  another reason than a chunk never written, by H5Dget_chunk_info_by_coord, which walks
 *  every chunk of the index (HDF5 1.10). */
chunk_state look_up_chunk(hid_t dset, const std::vector<hsize_t>& offset, hsize_t& size);

/** Steps `offset` to the next chunk of a dataset of `shape` in chunks of `chunk`, among
 *  those that hold rows below `end` (every chunk of the other axes; the last axis fastest):
 *  false past the last. */
bool next_chunk(std::vector<hsize_t>& offset, const std::vector<std::uint64_t>& chunk,
                const std::vector<std::uint64_t>& shape, std::uint64_t end);

/** The error for a chunk (at row `row`) that the chunk index does not hold, though it counts
 *  every chunk of the dataset as stored: a damaged key, not a chunk never written. */
[[noreturn]] void missing_chunk(const std::string& name, std::uint64_t row);

class chunk_reader {
 public:
  /** A reader for the chunked dataset `dset` (creation property list `dcpl`, `file_type`, read
   *  as `memory_type`, of `shape`) on up to `threads` threads (1: the calling thread), or null
   *  where HDF5 reads it: no thread; a pipeline other than one of deflate, LZF or zstd, alone or
   *  after shuffle (as h5py writes them); edge chunks stored unfiltered
   *  (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS); a file type that HDF5 would convert other than
   *  by swapping each value's bytes (big-endian data: swapped here); chunks over 64 MiB. The threads hold at most 512 MiB of decoded chunks. */
  static std::unique_ptr<chunk_reader> make(hid_t dset, hid_t dcpl, hid_t file_type,
                                            hid_t memory_type,
                                            const std::vector<std::uint64_t>& shape,
                                            unsigned threads);

  /** Rows [first, first + count) into dst, C order; a chunk never written as the fill value
   *  (which HDF5's read took as a reason to decode every chunk of the read itself, through
   *  filters that cut a chunk that decodes long to size). False, having written nothing,
   *  where HDF5 cannot say whether a chunk is stored (its read then says why). Throws
   *  errc::bad_input naming `name` and the rows for a chunk that does not decode (to exactly
   *  its size), errc::io when HDF5 cannot read a chunk. */
  bool read_rows(std::uint64_t first, std::uint64_t count, void* dst, const std::string& name);

  /** The threads that decode chunks (fewer than asked for when large chunks would pass the
   *  scratch budget). */
  unsigned threads() const noexcept { return threads_; }

  /** The file's chunk index counts every chunk of the dataset as stored: a chunk that a
   *  lookup does not find is then a damaged index (a flipped coordinate in a B-tree key),
   *  an error, not a chunk never written that reads as the fill value. */
  void expect_every_chunk(bool every) { every_chunk_ = every; }

 private:
  struct stage {
    H5Z_filter_t id = 0;
    unsigned index = 0;  // its bit in a chunk's filter mask
  };
  struct stored_chunk {
    std::vector<hsize_t> offset;
    unsigned mask = 0;
    bool written = true;  // false: never written, read as the fill value
    std::vector<unsigned char> bytes;
  };
  chunk_reader() = default;
  /** Undoes the filters of `c` into `a` or `b` (chunk_bytes_ each); the decoded chunk. */
  const unsigned char* decode(const stored_chunk& c, unsigned char* a, unsigned char* b) const;
  /** Reads fill_, at `at`, a chunk never written, once; false where HDF5 cannot. */
  bool fill_value(const std::vector<hsize_t>& at);
  /** A chunk of the fill value, in `a` (chunk_bytes_); a. */
  const unsigned char* filled(unsigned char* a) const;
  /** Copies the part of decoded chunk `c` within rows [first, first + count) to dst. */
  void scatter(const std::vector<hsize_t>& offset, const unsigned char* c, std::uint64_t first,
               std::uint64_t count, unsigned char* dst) const;

  hid_t dset_ = H5I_INVALID_HID;  // owned by the caller
  std::vector<std::uint64_t> shape_, chunk_;
  std::size_t item_ = 0, chunk_bytes_ = 0;
  /** The most stored bytes a chunk of this pipeline can take; more is a damaged file. */
  std::uint64_t max_stored_ = 0;
  unsigned threads_ = 1;
  bool every_chunk_ = false;  // expect_every_chunk
  bool swap_ = false;  // the file's values are in the other byte order
  hid_t memory_type_ = H5I_INVALID_HID;  // the values' type in memory (the caller's)
  /** One value as a chunk that was never written reads (the fill value, in the memory type;
   *  zeros where the fill time is never, as the reader zeroes its buffer first); empty
   *  until fill_value() reads it. */
  std::vector<unsigned char> fill_;
  std::vector<stage> stages_;  // in write order: shuffle first, then the compressor
  std::vector<stored_chunk> stored_;  // the chunks of the last read, kept for their buffers
  std::vector<std::pair<std::vector<unsigned char>, std::vector<unsigned char>>> scratch_;
  /** Decoded chunks of the last read that hold rows past its end, by offset: the next read
   *  in order takes them from here, not decoding them again (h5py's own chunks of images
   *  span 128 of them, a read of 4 MiB 21: each was inflated six times). Within
   *  k_kept_budget; none where a slab of chunks is larger. */
  std::vector<std::pair<std::vector<hsize_t>, std::vector<unsigned char>>> kept_;
};

}  // namespace dctchop::formats::detail
