/** @file archive.hpp
 *  Reader and writer of the .dcz archive, version 1.0; the layout is in formats/ARCHIVE.md.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dctchop/codec.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/file_io.hpp"
#include "dctchop/types.hpp"

namespace dctchop::formats {

inline constexpr std::uint16_t archive_major = 1;
inline constexpr std::uint16_t archive_minor = 0;
inline constexpr std::uint32_t archive_alignment = 4096;
/** The first 8 bytes of every archive (ARCHIVE.md, "Preamble"). */
inline constexpr std::array<unsigned char, 8> archive_magic = {0x89, 'D', 'C', 'Z', '\r', '\n', 0x1a, '\n'};

/** JSON as text (`indent` as nlohmann's dump: -1 for one line). A string that is not UTF-8
 *  (a Latin-1 file name on Linux) has its stray bytes written as U+FFFD: JSON text is UTF-8,
 *  and neither an archive nor a report may fail for a file's name. */
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

/** What the archive header says about the dataset and the codec. */
struct archive_header {
  int major = archive_major, minor = archive_minor;
  dtype type = dtype::u8;
  geometry geom;
  codec_params codec;
  std::uint64_t samples_per_chunk = 1;
  std::uint32_t alignment = archive_alignment;
  /** The bytes the side arrays take after the last chunk, with their padding (header member
   *  chunking.side_bytes; 0: not said). A stream reader takes that much more after the last
   *  chunk than its bound for a stream that goes on past its archive. */
  std::uint64_t side_bytes = 0;
  nlohmann::json provenance = nlohmann::json::object();
  /** The value that replaced NaN and Inf in a float input (--nonfinite replace=V); how many
   *  were replaced is in the footer ("nonfinite_replaced"), known only at the end. */
  std::optional<double> nonfinite_replacement;
  std::uint64_t coeff_bytes_per_sample() const { return dctchop::coeff_bytes_per_sample(codec, geom); }
  nlohmann::json to_json() const;
};

/** One chunk as the index describes it. */
struct chunk_info {
  std::uint64_t index = 0, offset = 0, first = 0, count = 0;
  std::uint64_t stored_bytes = 0, raw_bytes = 0, xxh64 = 0;
  std::uint32_t stages = 0;
};

/** A lossless per-sample side array (e.g. labels). */
struct side_array_info {
  std::string name;
  std::string descr;  ///< NumPy descr, little-endian, e.g. "<i8"
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0, bytes = 0, xxh64 = 0;
};

/** The bytes `sides` take after an archive's last chunk, each padded to `alignment`: what a
 *  writer that knows its side arrays in advance says in the header (archive_header::side_bytes). */
std::uint64_t side_bytes_of(const std::vector<side_array_info>& sides, std::uint64_t alignment);

/** The exact size in bytes of the archive that archive_writer would write for `header`, these
 *  side arrays (name, descr, shape and bytes used) and this footer_extra, with chunks of
 *  header.samples_per_chunk samples. Used to report true ratios without writing anything. */
std::uint64_t predict_archive_bytes(const archive_header& header,
                                    const std::vector<side_array_info>& sides,
                                    const nlohmann::json& footer_extra);

/** Which of the limits formats/ARCHIVE.md sets on what a header describes `g` coded with `p`
 *  passes (any axis at most 2^40, height and width at most 2^24, at most 2^16 planes and
 *  2^36 values a sample, samples times the larger of the coefficient bytes and 8 bytes a
 *  value at most 2^62: no size computed from them wraps), as text for a message; empty when
 *  none does. Without `p`, the limits that hold whatever the codec. Readers call such a
 *  header corrupt; compress refuses such data up front. */
std::string archive_limit_passed(const geometry& g, const codec_params* p);

/** The header's "codec" object (transform, block, chop, coeff, offset, coeff_plane,
 *  coeff_bytes_per_sample) of data `g` coded with `p`: as `info` shows it, and as the
 *  report of compress repeats it, so that one script reads it from either. */
nlohmann::json codec_json(const codec_params& p, const geometry& g);

/** Writes an archive front to back (works on a pipe). The file appears at its path only after
 *  finish(); destroyed before, nothing is left behind. */
class archive_writer {
 public:
  /** Writes the preamble and `header` (its version and alignment set here). A header that a
   *  reader would refuse (parse_archive_header's rules: samples_per_chunk above the samples,
   *  an automatic layout, a dtype or coefficient type out of the enums, ...) is
   *  error(invalid_argument), and nothing is written. */
  archive_writer(output_file out, archive_header header);
  /** Append the coefficients of samples [first, first+count): count*coeff_bytes_per_sample,
   *  stored as given (ARCHIVE.md's "a writer never stores a NaN or an Inf coefficient" is the
   *  encoder's to keep: backend::encode refuses data that would make one). */
  void write_chunk(std::uint64_t first, std::uint64_t count, std::span<const std::byte> coeffs);
  /** Append a side array after the last chunk (raw C-order little-endian bytes). */
  void write_side_array(const std::string& name, const std::string& descr,
                        const std::vector<std::uint64_t>& shape,
                        std::span<const std::byte> bytes);
  /** The same, pulled from `rows` a piece at a time (shape[0] rows of row_bytes each): a side
   *  array can be as large as the data (per-sample masks) and is never held whole. */
  void write_side_array(const std::string& name, const std::string& descr,
                        const std::vector<std::uint64_t>& shape, std::uint64_t row_bytes,
                        const row_source& rows);
  /** Extra footer members, e.g. {"quality": {...}, "input_bytes": N}: a JSON object whose
   *  members ARCHIVE.md names keep its rules (quality figures numbers, flags or null; counts
   *  non-negative integers; `nonfinite_replaced` present where the header of float data has
   *  a replacement), which finish() checks (error(invalid_argument), nothing written). */
  void set_footer_extra(nlohmann::json extra) { footer_extra_ = std::move(extra); }
  /** Write footer and tail, check that every sample was written, move into place. */
  void finish();
  std::uint64_t bytes_written() const { return out_.position(); }
  std::string display_name() const { return out_.display_name(); }
  /** output_file::watch for the archive written. */
  void watch(std::function<void()> check) { out_.watch(std::move(check)); }

 private:
  void pad_to_alignment();
  output_file out_;
  archive_header header_;
  std::vector<chunk_info> chunks_;
  std::vector<side_array_info> sides_;
  std::uint64_t next_sample_ = 0;
  nlohmann::json footer_extra_ = nlohmann::json::object();
};

/** Parse and check a header JSON text (the bytes after the preamble); error(corrupt) naming
 *  `file` when it is not JSON, lacks a field, or disagrees with itself. */
archive_header parse_archive_header(std::string_view text, const std::string& file);

namespace detail {
class byte_spool;
}

/** Reads an archive: random access for regular files; chunk by chunk in order for stdin.
 *  One thread at a time (it remembers which chunks it has checked), but for read_chunk() of
 *  different chunks and read_side_array_rows() of a random-access reader, which several
 *  threads may call at once (positioned reads; a loader's threads reading the chunks of one
 *  batch) while no other call runs. Otherwise threads that read side by side open a reader
 *  each. */
class archive_reader {
 public:
  /** Open and validate preamble, header and (for files) the footer and index. */
  static archive_reader open(const std::string& path);
  /** open() for random access only: error(invalid_argument) for standard input, a FIFO, a
   *  character device or a socket, before opening (a FIFO would wait for a writer first). */
  static archive_reader open_seekable(const std::string& path);

  const archive_header& header() const noexcept { return header_; }
  std::string display_name() const { return file_.display_name(); }
  bool random_access() const noexcept { return file_.seekable(); }
  /** The archive's size: the file size, or for a stream the bytes read so far (the whole
   *  archive once next_chunk() has returned false). */
  std::uint64_t file_bytes() const noexcept {
    return file_.seekable() ? file_.size() : file_.position();
  }

  /** Index and footer: available at open for files, after the last chunk for streams. */
  const std::vector<chunk_info>& chunks() const noexcept { return chunks_; }
  const std::vector<side_array_info>& side_arrays() const noexcept { return sides_; }
  const nlohmann::json& footer() const noexcept { return footer_; }
  /** The XXH64 of the footer JSON, as the tail records it (0 until the footer is read). The
   *  footer lists every chunk's and side array's checksum: with the header, it tells whether
   *  a file opened again by its name is still the same archive. */
  std::uint64_t footer_digest() const noexcept { return footer_digest_; }

  /** Read and verify chunk `i` (random access only); returns its raw coefficient bytes.
   *  `coeffs` is a std::vector<std::byte> or a byte_buffer (dctchop/host_memory.hpp: memory
   *  the backend that decodes it reads fastest, backend::host_memory()). */
  template <typename Alloc>
  void read_chunk(std::size_t i, std::vector<std::byte, Alloc>& coeffs);
  /** Sequential access (files and streams): the next chunk in order; false after the last.
   *  For a stream, the footer is read and checked when this returns false, and the side
   *  arrays are kept (verify_side_array checks them). */
  template <typename Alloc>
  bool next_chunk(chunk_info& info, std::vector<std::byte, Alloc>& coeffs);
  /** Read and verify the coefficients of samples [first, first+count) (random access only).
   *  A chunk is read whole to check its checksum the first time; once checked, its dense
   *  samples are read alone (a dataset's random access reads one sample, not 4 MiB). */
  void read_samples(std::uint64_t first, std::uint64_t count, std::span<std::byte> coeffs);
  /** A side array's description by name (checked at open: numeric, one row per sample, the
   *  byte count its shape implies); nullptr when absent. For streams, complete only after the
   *  last chunk. */
  const side_array_info* find_side_array(const std::string& name) const;
  /** Read and verify a side array by name, whole; nullopt when absent. (Side arrays can be
   *  as large as the data: verify_side_array and read_side_array_rows hold none of it.)
   *  For a stream, after the last chunk. */
  std::optional<std::vector<std::byte>> read_side_array(const std::string& name);
  /** Verify side array `name` (an error(corrupt) on a wrong checksum) reading it in pieces,
   *  without holding it: for readers that then read its rows as they need them. For a
   *  stream, after the last chunk (a stream's side arrays are kept, in memory up to 64 MiB
   *  and beyond that in an unnamed temporary file in $TMPDIR or /tmp). */
  void verify_side_array(const std::string& name);
  /** Rows [first, first + count) of side array `name` into `dst` (count rows of its row
   *  bytes), as they lie in the file (verify_side_array checks them). For a stream, after
   *  the last chunk. */
  void read_side_array_rows(const std::string& name, std::uint64_t first, std::uint64_t count,
                            std::span<std::byte> dst);
  /** Side array `name`'s rows for one copy front to back, checked on the way: the source
   *  must be asked for rows 0, 1, ... in order (error invalid_argument otherwise), and the request
   *  that reaches the last row checks the checksum (error corrupt) before it returns, so the
   *  copy reads the array once where verify_side_array and then read_side_array_rows read it
   *  twice. The reader must outlive it. For a stream, after the last chunk. */
  row_source side_array_in_order(const std::string& name);
  /** Index of the chunk holding `sample`. */
  std::size_t chunk_of(std::uint64_t sample) const;
  /** How many NaN/Inf values the archive's input held, stored as
   *  header().nonfinite_replacement (the footer's count); nullopt without a replacement, or
   *  before a stream's footer is read. */
  std::optional<std::uint64_t> nonfinite_replaced() const;
  /** input_file::watch for an archive read as a stream. */
  void watch(std::function<void()> check) { file_.watch(std::move(check)); }
  /** Threads that read_chunk() and next_chunk() split a large chunk's read over (input_file's
   *  split read_at, random access only); 1, the default: one. */
  void set_read_threads(unsigned threads) noexcept { read_threads_ = threads; }

 private:
  explicit archive_reader(input_file f) : file_(std::move(f)) {}
  void read_footer_random();
  /** The tail's chunk and sample counts (at +32 and +40) against the parsed index. */
  void check_tail_counts(const unsigned char* tail) const;
  /** Chunks, side arrays and the footer (at `footer_offset`) where ARCHIVE.md places them:
   *  chunks back to back from the data offset, each aligned, then the side arrays in order,
   *  then the footer, aligned. */
  void check_placement(std::uint64_t footer_offset) const;
  void parse_footer(const std::string& text);
  void verify_chunk(const chunk_info& expect, const unsigned char* record,
                    std::span<const std::byte> payload) const;
  input_file file_;
  archive_header header_;
  std::uint64_t data_offset_ = 0;
  std::vector<chunk_info> chunks_;
  std::vector<side_array_info> sides_;
  nlohmann::json footer_ = nlohmann::json::object();
  std::uint64_t footer_digest_ = 0;
  // sequential state
  std::size_t next_index_ = 0;
  std::uint64_t next_sample_ = 0;
  /** `n` bytes at archive offset `offset`: from the file, or for a stream from what was
   *  kept after its last chunk. */
  void read_bytes_at(std::uint64_t offset, void* dst, std::size_t n, const char* what) const;
  // side arrays + footer + tail of a stream (shared_ptr: the type is complete only in
  // archive.cpp, and the reader is movable)
  std::shared_ptr<detail::byte_spool> stream_tail_;
  std::uint64_t stream_offset_ = 0;     // archive offset of the next unread byte of a stream;
                                        // once done, of the first byte in stream_tail_
  bool stream_done_ = false;
  unsigned read_threads_ = 1;
  // Chunks read whole and verified since open (random access). Bytes, not bits: chunks read
  // on several threads at once (a loader's) set their own.
  std::vector<unsigned char> checked_;
};

}  // namespace dctchop::formats
