// Internal: HDF5 compression filters of input datasets. HDF5 decodes a filtered chunk through
// the filter registered under its id, loading a plugin when none is registered. dctchop adds
// filters of its own for two common ones that Debian 12 ships no working plugin for, checks
// what they decode against the dataset being read (HDF5 1.10 does not check a filter's output
// size), and names a filter that cannot be loaded, with its package, when the dataset opens.
// It decodes LZ4 itself too: Debian's plugin reads past the end of a damaged chunk.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dctchop::formats::detail {

/** The ids of the filters dctchop registers itself. */
constexpr H5Z_filter_t filter_lzf = 32000;
constexpr H5Z_filter_t filter_lz4 = 32004;
constexpr H5Z_filter_t filter_zstd = 32015;

/** One filter of a dataset's pipeline: its id, flags, name (as the file records it) and first
 *  client values. */
struct filter_entry {
  H5Z_filter_t id = -1;
  unsigned index = 0;  ///< its place in the pipeline (its bit in a chunk's filter mask)
  unsigned flags = 0;
  std::string name;
  std::vector<unsigned> values;  ///< its client values (at most 8)
};

/** The filters of a dataset creation property list, in write order. */
std::vector<filter_entry> pipeline_of(hid_t dcpl);

/** The filters of a pipeline by their usual names, in write order: "shuffle, deflate",
 *  "blosc"; a filter of no known name is "filter N". */
std::string filter_names(const std::vector<filter_entry>& pipeline);

/** Registers dctchop's HDF5 filters 32000 (LZF, h5py's `compression="lzf"`; Debian 12's
 *  hdf5-plugin-lzf cannot be loaded: its library lacks liblzf), 32004 (LZ4; Debian's plugin
 *  decodes with LZ4_decompress_fast, which reads past the end of a damaged chunk) and 32015
 *  (Zstandard; no Debian plugin), in place of any other filter of those ids (same formats). Once per process, and
 *  again for one unregistered since; the registry is the HDF5 library's, shared with any other HDF5 user in the process, so each
 *  filter also encodes, as the reference plugins do (dctchop itself writes no filtered data).
 *  Serial HDF5 is not thread-safe: dctchop calls HDF5 from one thread at a time (its Python
 *  module reads no HDF5). Throws errc::internal if HDF5 refuses the registration. */
void register_builtin_filters();

/** What one of dctchop's filters in a dataset's pipeline must decode a chunk to: exactly
 *  `bytes` when the filters applied before it at write time have known sizes (shuffle keeps
 *  the size, fletcher32 adds 4), else at most `bytes`. */
struct filter_output {
  H5Z_filter_t id = 0;
  std::size_t bytes = 0;
  bool exact = false;
};

/** The outputs dctchop's filters must give for a dataset whose creation property list is
 *  `dcpl` and whose chunks hold `chunk_bytes` bytes. Empty when it uses neither filter. */
std::vector<filter_output> expected_outputs(hid_t dcpl, std::size_t chunk_bytes);

/** While alive, dctchop's filters on this thread check their output against `outputs` (those
 *  of the dataset being read) and fail, as for damaged data, on any other size. Elsewhere
 *  they only refuse outputs larger than an HDF5 chunk can be. */
class decode_scope {
 public:
  explicit decode_scope(const std::vector<filter_output>& outputs);
  ~decode_scope();
  decode_scope(const decode_scope&) = delete;
  decode_scope& operator=(const decode_scope&) = delete;

 private:
  const std::vector<filter_output>* previous_;
};

/** Undoes compressor `id` (H5Z_FILTER_DEFLATE, 32000 LZF, 32004 LZ4 or 32015 zstd) on one chunk's `n`
 *  stored bytes into exactly `out_bytes` bytes at `out`. False when they are not that
 *  filter's data or do not decode to exactly that size (a damaged chunk). Makes no HDF5 call:
 *  any thread may run it. */
bool decode_chunk(H5Z_filter_t id, const void* in, std::size_t n, void* out,
                  std::size_t out_bytes);

/** The most bytes compressor `f` can store a chunk of `chunk_bytes` bytes in, by its format;
 *  a chunk index that claims more is damaged. (LZ4's framing adds 12 bytes and 4 per block.) */
std::uint64_t max_stored_bytes(const filter_entry& f, std::uint64_t chunk_bytes);

/** Undoes HDF5's shuffle filter (byte j of every element, then byte j + 1, ...; a remainder of
 *  fewer bytes than an element left in place) on `bytes` bytes of `item`-byte elements. */
void unshuffle(const void* in, std::size_t bytes, std::size_t item, void* out);

/** A filter of a dataset that this process cannot decode. */
struct missing_filter {
  unsigned index = 0;     ///< its place in the pipeline (its bit in a chunk's filter mask)
  bool optional = false;  ///< a chunk may have been stored without it
  std::string message;    ///< "NAME: is compressed with HDF5 filter ..., which ...: install ..."
};

/** The filters of `dcpl` that cannot be decoded here, each with the message that names it and
 *  the Debian package (or HDF5_PLUGIN_PATH) that would provide it. `name` is the file and
 *  dataset, for the messages. */
std::vector<missing_filter> missing_filters(hid_t dcpl, const std::string& name);

/** What the HDF5 library said of the call that just failed: its innermost error's text (or
 *  empty), and whether it failed in the filter pipeline (a chunk that its filter could not
 *  decode). Call it with the library's printing of the stack turned off. */
struct hdf5_failure {
  std::string text;
  bool in_filter = false;
  /** The system failed (a read or open that set errno, memory): not the file's bytes. */
  bool system = false;
};
hdf5_failure last_hdf5_failure();

}  // namespace dctchop::formats::detail
