/** @file dataset_io.hpp
 *  Datasets in and out, whatever the file format: NumPy .npy (or stdin/stdout), HDF5 datasets
 *  (`file.h5:/group/dset`), arrays of NumPy .npz files (`file.npz:x_train`), and raw
 *  little-endian binary (`--raw --dtype --shape`). Every
 *  source is read along axis 0 in row ranges, every sink written the same way, so no operation
 *  needs the whole dataset in memory. No HDF5 types appear here.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dctchop/formats/npy.hpp"

namespace dctchop::formats {

/** Which file format a path names. */
enum class file_kind { npy, npz, hdf5, raw };

/** The HDF5 dataset an output gets when none is named, and the one the labels get beside it. */
inline constexpr const char* hdf5_default_dataset = "/data";
inline constexpr const char* hdf5_labels_dataset = "/labels";
/** The same for .npz outputs: the arrays np.load gives as out["data"] and out["labels"]. */
inline constexpr const char* npz_default_array = "data";
inline constexpr const char* npz_labels_array = "labels";

/** Where a dataset lives. Built by parse_dataset_spec() from "file.npy", "-", "file.h5",
 *  "file.h5:/group/dset"; raw when the caller says so. */
struct dataset_spec {
  /** What an HDF5 input without a dataset path is searched for: image-like data (numeric,
   *  2 or more axes; one named images, data or x among several), or labels (numeric, 1 or
   *  more axes; one named labels, label, y or targets among several). */
  enum class role { data, labels };
  std::string path;       ///< file path, or "-" for stdin/stdout (npy and raw only)
  std::string dataset;    ///< HDF5 dataset path or .npz array name; empty: choose (input) or
                          ///< "/data" (HDF5 output)
  file_kind kind = file_kind::npy;
  role purpose = role::data;
  /** A dataset the search must not choose: the images, when labels come from their file. */
  std::string not_this;
  /** Rows (axis 0) that a dataset the search chooses must have: the labels' one per sample. */
  std::optional<std::uint64_t> rows;
  /** Input: rows [first_row, end_row) of the dataset only (compress and eval --samples), read
   *  as rows 0.. of a dataset of that many, named "NAME[A:B]"; end_row unset: to the end.
   *  open_dataset refuses a range past the end or empty, and one of data of fewer than 3
   *  axes (one image). */
  std::uint64_t first_row = 0;
  std::optional<std::uint64_t> end_row;
  bool has_row_range() const { return first_row != 0 || end_row.has_value(); }
  // raw binary only:
  std::optional<npy_dtype> raw_type;
  std::vector<std::uint64_t> raw_shape;
  /** An array in memory instead of a file (the Python binding's NumPy arrays): native-endian,
   *  C order, at least one axis. open_dataset() reads it, and `path` only names it in
   *  messages. The memory must stay valid, and unchanged, while anything reads it. */
  struct memory_array {
    npy_dtype type;
    std::vector<std::uint64_t> shape;
    const void* data = nullptr;
  };
  std::optional<memory_array> memory;
  /** HDF5 input: threads on which dctchop undoes the filters of deflate-, LZF- or
   *  zstd-compressed chunks, checking each chunk's size (HDF5 1.10's deflate filter does not).
   *  0 leaves them to HDF5, which undoes them on the reading thread, one chunk at a time. */
  unsigned decode_threads = 1;
  /** NPY, stored .npz members and raw files: threads that a large read of rows is split over
   *  (input_file's split read_at; pieces of 2 MiB or more). 1: one. */
  unsigned read_threads = 1;
  /** "path" or "path:/dataset", for messages. */
  std::string display() const;
};

/** The format that a file name's suffix says (.npy, .npz, .h5, .hdf5, .he5, .hdf), or nullopt;
 *  the name alone, without looking at the file system. */
std::optional<file_kind> format_named(const std::string& path);

/** Parse a command-line dataset name. HDF5 is recognised by the extension (.h5, .hdf5, .he5,
 *  .hdf) or by a ":/" that separates file and dataset; .npz by its extension, with an array
 *  name after the first ".npz:"; `dataset` (from --dataset) fills in the dataset or array
 *  when the text names none. */
dataset_spec parse_dataset_spec(const std::string& text, const std::string& dataset = {},
                                bool raw = false);

/** An output named like a member of a .npy file ("y.npy:images", "y.npy:", "y.npy:a:b":
 *  ".npy:" in the last component of the path), where no file has the whole name: a .npy holds
 *  one array, so FILE.npz:NAME or FILE.h5:NAME (or the .npy alone) was meant, and written as
 *  given it made a file of that name. error(invalid_argument) naming those, before anything
 *  is written; a file made beforehand under the whole name is written (with overwrite).
 *  `what`: "the output", "the labels". Raw outputs (--raw) and .npz members are not asked. */
void refuse_npy_member_output(const dataset_spec& out, const std::string& what);

/** A name that reads as a member of a file that dctchop reads by its bytes but writes only
 *  under its own names ("out.nc:/x", "m.mat:x": HDF5; "a.zip:x": .npz), where no file has the
 *  whole name. Written as given, it went to a folder "out.nc:" (exit 5) or made an NPY file of
 *  that name. */
struct container_member {
  std::string file;   ///< "out.nc"
  std::string meant;  ///< the name that writes it: "out.h5:/x"
  std::string why;    ///< "only names ending .h5, ... are written as HDF5 (out.nc is read ...)"
};
/** The container_member that `text` names, if any. */
std::optional<container_member> member_of_unwritable_container(const std::string& text);

/** Whether a file name ends with `suffix` (".npy"), in any case: how names tell formats apart. */
bool name_ends_with(const std::string& path, const std::string& suffix);

/** Rows along axis 0 of a dataset, read in order or (when rereadable) anywhere. */
class sample_source {
 public:
  virtual ~sample_source() = default;
  /** For messages: "train.h5:/images", "<stdin>". */
  virtual std::string name() const = 0;
  virtual const npy_dtype& type() const = 0;
  virtual const std::vector<std::uint64_t>& shape() const = 0;
  /** True when rows can be read again and in any order (files; not stdin). */
  virtual bool rereadable() const = 0;
  /** The natural read size in rows (an HDF5 dataset's chunk extent along axis 0), or 1. */
  virtual std::uint64_t preferred_rows() const { return 1; }
  /** Copy rows [first, first+count) to dst as native-endian C-order values. */
  virtual void read_rows(std::uint64_t first, std::uint64_t count, void* dst) = 0;
  /** The HDF5 dataset or .npz array read, e.g. "/train/images", "x_train"; empty for other
   *  formats. */
  virtual std::string dataset_path() const { return {}; }
  /** Something the user should be told, e.g. which dataset was chosen; empty if nothing. */
  virtual std::string note() const { return {}; }
  /** The part of note() that says some values were never written and read as a fill value
   *  (HDF5 chunks or data a writer never wrote), with the value, for an error about the
   *  values of sample `sample` (row `sample`; of a 2-D dataset, one HW image, every row) that
   *  lies where they were never written (a NaN fill value is "a NaN in sample 2"); empty
   *  where the sample's values were all written, and, for an error about a NaN or Inf
   *  (`nonfinite`), where the fill value is finite. */
  virtual std::string unwritten(std::uint64_t sample, bool nonfinite) const {
    (void)sample;
    (void)nonfinite;
    return {};
  }
  /** How the rows are read, for a user who asks why a read is slow: "HDF5 chunks (shuffle,
   *  deflate) decoded by dctchop on 2 threads", "HDF5 (blosc, decoded by HDF5 on one
   *  thread)"; empty where there is nothing to tell (an NPY file). */
  virtual std::string reader() const { return {}; }
  /** input_file::watch for a source read from a stream (standard input, a FIFO). */
  virtual void watch(std::function<void()> check) { (void)check; }
  /** Rows along axis 0 (1 for a 0-d array). */
  std::uint64_t rows() const { return shape().empty() ? 1 : shape()[0]; }
  /** Rows of the whole dataset, where a range (dataset_spec::first_row) reads part of it. */
  virtual std::uint64_t whole_rows() const { return rows(); }
  /** Bytes of one row. */
  std::uint64_t row_bytes() const;
};

/** An input named for no format (a .nc, .mat or .zip file, "data.nc:images", which the name
 *  alone cannot split): the spec of what its bytes say, HDF5 (signature at 0 or after a user
 *  block) or ZIP (.npz); else `spec` as it is. Names that say a format (.npy, .npz, .h5...)
 *  are taken at their word. Commands resolve their inputs so before comparing paths;
 *  open_dataset() does it too. */
dataset_spec resolve_by_content(const dataset_spec& spec);

/** The files besides `spec.path` that reading its HDF5 dataset (the one named, else the one
 *  open_dataset chooses for spec.purpose) reads: each file an external link on the way leads
 *  to (a chain of them too), the dataset's external raw files, a virtual dataset's source
 *  files and in turn the files each source reads (a relative name both beside the file that
 *  names it and from here, as HDF5 may look in either). For the commands' check that no
 *  output, report or message is written into one. Best effort and quiet: none for other
 *  formats, or a file or dataset that does not open. */
std::vector<std::string> files_read_by(const dataset_spec& spec);

/** Open a dataset for reading. Errors name the file and dataset: missing file (io), missing
 *  dataset, compound or string data, raw size mismatch (bad_input). */
std::unique_ptr<sample_source> open_dataset(const dataset_spec& spec);

/** A sample range A:B as given (`first`, `end`; "sample A" for one, "sample range A:" without
 *  an end) and what is wrong with it among `total` samples ("... is past the end", "... runs
 *  past the end", "... is empty"), or "" where it lies within them. For messages. */
std::string sample_range_problem(std::uint64_t first, std::optional<std::uint64_t> end,
                                 std::uint64_t total);

/** `s`, or the rows of it that `range`'s first_row and end_row name (what open_dataset does
 *  with a spec's range); error(invalid_argument) for a range past its end or empty, and for a
 *  range of data (range.purpose) of fewer than 3 axes. */
std::unique_ptr<sample_source> take_row_range(std::unique_ptr<sample_source> s,
                                              const dataset_spec& range);

/** Rows [first, first + count) of an array into `dst` (count rows, C order). */
using row_source = std::function<void(std::uint64_t first, std::uint64_t count, void* dst)>;

/** Rows [0, rows) of `row_bytes` each, read from `from` into a buffer of about 1 MiB (at least
 *  a row) and handed to `put(data, first, count)` piece by piece: for arrays that can be as
 *  large as the data (labels that are per-sample masks). */
void for_each_row_piece(std::uint64_t rows, std::uint64_t row_bytes, const row_source& from,
                        const std::function<void(const void* data, std::uint64_t first,
                                                 std::uint64_t count)>& put);

/** Writes rows along axis 0; the output appears only after finish(). */
class sample_sink {
 public:
  virtual ~sample_sink() = default;
  virtual std::string name() const = 0;
  /** Append native-endian C-order rows. */
  virtual void write_rows(const void* src, std::uint64_t count) = 0;
  /** Add a second dataset beside the main one (HDF5: e.g. "/labels"; .npz: an array, after
   *  all the rows), its shape[0] rows taken from `rows` in pieces; false, taking none, when
   *  the format holds one array only (the caller then writes it elsewhere). */
  virtual bool add_side_dataset(const std::string& name, const npy_dtype& type,
                                const std::vector<std::uint64_t>& shape, const row_source& rows) = 0;
  /** More attributes, before finish(): numbers and strings, as create_dataset's (HDF5; the
   *  other formats have no place for them and ignore them). For what an input says only at
   *  its end, such as a streamed archive's footer. */
  virtual void add_attributes(const nlohmann::json& attributes) { (void)attributes; }
  /** Check the row count and make everything written durable (flushed, fsync'd), short of
   *  giving the output its name: finish() then only names it. For outputs that must appear
   *  together (data and a labels file): both are prepared before either is named, so that no
   *  write can fail (a full disk) once one of them is in place. */
  virtual void prepare() = 0;
  /** prepare() if not done, then move the output into place. */
  virtual void finish() = 0;
  /** finish() names the output without syncing its folder, which sync_folder() does after
   *  (output_file::defer_folder_sync): for the first of two outputs that must appear
   *  together, named one right after the other. Outputs that are no file ignore both. */
  virtual void defer_folder_sync() noexcept {}
  virtual void sync_folder() noexcept {}
  /** After finish(): remove the output it named, when that replaced nothing (no file was at
   *  its path; one replaced with -f is gone already). For the first of two outputs that must
   *  appear together, when the second cannot be named (a file appeared at its path). */
  virtual void withdraw() noexcept = 0;
  /** output_file::watch for an output that may be a pipe (NPY, .npz, raw; an HDF5 output
   *  is a regular file). */
  virtual void watch(std::function<void()> check) { (void)check; }
  /** Bytes written so far, its format's headers included (NPY, .npz, raw: what a pipe
   *  took); nullopt where the library writing it does not say (HDF5). */
  virtual std::optional<std::uint64_t> bytes_written() const { return std::nullopt; }
};

/** check_output_path for the file of an output dataset, before the work that fills it; an
 *  existing .h5 or .npz named with a dataset or array is refused saying that -f would replace
 *  the whole file (as create_dataset does). */
void check_dataset_output(const dataset_spec& spec, bool overwrite);

/** Create an output for an array of `type` and `shape`. `attributes` (HDF5 only) are written
 *  as attributes of the dataset: numbers and strings. An existing output is refused unless
 *  `overwrite` (an HDF5 file is then replaced whole). */
std::unique_ptr<sample_sink> create_dataset(const dataset_spec& spec, const npy_dtype& type,
                                            const std::vector<std::uint64_t>& shape,
                                            bool overwrite,
                                            const nlohmann::json& attributes = nlohmann::json::object());

/** What inflates deflated .npz members (np.savez_compressed) in this build: "ISA-L" or
 *  "zlib" (for the CLI's --version). */
const char* npz_inflater() noexcept;

/** Whether this build reads and writes HDF5 (it always does; kept for the CLI's --version). */
bool hdf5_available() noexcept;

/** For a program that closes every HDF5 file itself (the dctchop command): turn off the HDF5
 *  library's exit handler, before any other HDF5 call. HDF5 1.10's handler crashes on a file
 *  whose close failed, which an output abandoned past `ulimit -f` leaves behind. A library
 *  user whose own code leaves HDF5 files for the exit handler to close must not call it. */
void skip_hdf5_exit_handler() noexcept;

}  // namespace dctchop::formats
