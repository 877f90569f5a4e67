/** @file pipeline.hpp
 *  Whole-file operations that join the formats and the codec chunk by chunk, so that no
 *  operation holds more than a few chunks in memory: compress (optionally to a target quality),
 *  decompress, info, eval and verify.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dctchop/codec.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/metrics.hpp"
#include "dctchop/types.hpp"

namespace dctchop::formats {

class archive_reader;

/** Throughput in GB/s (1e9 bytes per second); 0 when no time was measured. */
inline double gb_per_s(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0;
}

/** Bits per value of the data: 8 x the archive's bytes, less the side arrays' (labels, stored
 *  as they are: no values of the data; with the padding that aligns them), per value; 0
 *  without values. */
inline double bits_per_value(std::uint64_t archive_bytes, std::uint64_t side_bytes,
                             std::uint64_t values) {
  return values ? 8.0 * double(archive_bytes - side_bytes) / double(values) : 0.0;
}

/** Called after each chunk with (samples done, samples in total), and with (0, total) during
 *  the passes that come before the first chunk (a float input's range, a target's trials).
 *  May throw to cancel. (0, 0) is only that chance to cancel: made before each chunk's read,
 *  every tenth of a second while a thread waits on a stalled pipe (the reading thread, for
 *  input or a free buffer; the writing thread, for room in the output) or for the writer to
 *  finish; it can come on two threads at once, and while another call runs, so it must touch
 *  nothing but what a cancel reads, and a cancel once asked for must be asked again by every
 *  later (0, 0) call. */
using progress_fn = std::function<void(std::uint64_t, std::uint64_t)>;

/** Quality targets: the smallest chop (largest ratio) whose measured quality meets all. */
struct quality_target {
  std::optional<double> psnr_db;  ///< global PSNR at least this
  std::optional<double> ssim;     ///< mean SSIM at least this
  bool any() const { return psnr_db || ssim; }
};

/** What compress and eval subtract from every value before the transform (ARCHIVE.md, "The
 *  codec" step 1; `--offset`). The header records the value used and decoders add it back. */
struct offset_choice {
  enum class rule {
    automatic,   ///< the dtype's (128 u8, 32768 u16, 0 i8 and i16); float data, i32 and u32:
                 ///< the first sample's mean
    first_mean,  ///< the mean of the first sample's finite values, for any dtype
    value,       ///< `value`, for any dtype
  };
  rule how = rule::automatic;
  double value = 0.0;  ///< with rule::value; must be finite
};

/** One measured setting during a target-quality search. */
struct chop_trial {
  int chop = 0;
  quality q;
  bool on_sample = true;  ///< measured on a sample of the data (false: the whole dataset)
  bool meets = false;
};

struct compress_options {
  int block = 8;
  int chop = 4;                         ///< ignored when target.any()
  std::optional<coeff_type> coeff;      ///< default: default_coeff_type(dtype, block)
  layout lay = layout::automatic;
  double chunk_mb = 4.0;                ///< target coefficient bytes per chunk, in MiB
  std::string labels_path;              ///< optional labels: a .npy, or FILE.h5:/labels
  std::optional<dataset_spec> labels;   ///< or labels from elsewhere (an array in memory);
                                        ///< not both
  bool overwrite = false;
  bool measure_quality = true;          ///< decode each chunk and accumulate the error
  bool ssim = true;                     ///< include SSIM in the measured quality
  quality_target target;                ///< choose the chop from measurements
  /** With a target: at most this many input bytes measured per chop before the whole
   *  dataset is written (all of it when smaller; else evenly spaced runs of samples). */
  std::uint64_t search_bytes = std::uint64_t(32) << 20;
  /** For the quality measurement, and the threads (at most 8) that split a large read of the
   *  input's rows (0: every core; 0..max_threads, else error(invalid_argument)). */
  int threads = 0;
  /** NaN and Inf in a float input: an error naming the first sample (nullopt, the default),
   *  or replaced by this finite value and counted in the archive (--nonfinite replace=V). */
  std::optional<double> nonfinite_replacement;
  offset_choice offset;                 ///< subtracted before the transform
  std::string tool_version;             ///< recorded in the header's provenance
  /** The header's creation time in seconds since 1970; nullopt: now. The command sets it from
   *  SOURCE_DATE_EPOCH, for archives that are the same bytes run after run. */
  std::optional<std::int64_t> created;
  progress_fn progress;
  /** With a target: called with each measurement as it is made (those of a search that fails
   *  too, which the result never carries); the result's `trials` holds the same list. */
  std::function<void(const chop_trial&)> on_trial;
};

/** compress_options::created from the value of SOURCE_DATE_EPOCH (seconds since 1970, the
 *  reproducible-builds convention): nullopt for nullptr or "" (unset: the time of the run),
 *  error(invalid_argument) for anything but a whole number of seconds. */
std::optional<std::int64_t> parse_source_date_epoch(const char* value);

struct compress_result {
  geometry geom;
  dtype type = dtype::u8;
  codec_params codec;
  std::uint64_t samples_per_chunk = 0, chunks = 0;
  /** input_bytes: everything the archive holds, as read: the data and the labels (which
   *  are stored as they are; per-pixel masks can be as large as the images, and a ratio of
   *  the data alone to an archive that holds both would say the archive grew). */
  std::uint64_t input_bytes = 0, archive_bytes = 0, values = 0;
  std::uint64_t labels_bytes = 0;       ///< the labels' part of input_bytes
  std::uint64_t labels_stored_bytes = 0;  ///< what they take in the archive, padding included
  std::optional<quality> q;             ///< when measured
  std::vector<chop_trial> trials;       ///< the target-quality search, in the order tried
  std::vector<std::string> notes;       ///< things to tell the user (e.g. the dataset chosen)
  /** Doubts about the result, told after it (the archive is larger than the input, i16 on
   *  float data, ...). to_json() puts them after `notes` in "notes". */
  std::vector<std::string> warnings;
  std::string source;                   ///< what was read: "x.npy", "t.h5:/images", "<stdin>"
  std::string reader;                   ///< how it was read (sample_source::reader); may be empty
  std::string labels_source;            ///< the labels read, as source; empty without labels
  std::optional<std::uint64_t> nonfinite_replaced;  ///< with nonfinite_replacement on float data
  double seconds = 0.0;                 ///< wall time of the whole operation
  double ratio() const { return archive_bytes ? double(input_bytes) / double(archive_bytes) : 0; }
  /** Of the data alone: the labels' bytes are no values of it (nor the padding that aligns
   *  them: the figure is eval's, which stores no labels, but for their index entry). */
  double bits_per_value() const {
    return formats::bits_per_value(archive_bytes, labels_stored_bytes, values);
  }
  /** The data's bytes, which the codec read (throughput is of these; labels are copied). */
  std::uint64_t data_bytes() const { return input_bytes - labels_bytes; }
  nlohmann::json to_json() const;
};

/** Compress a .npy file (or "-") into an archive (or "-"). With options.target set, the chop
 *  is chosen by measuring a sample of the data first, then checked on the whole result; an
 *  unreachable target throws error(quality_not_met). Target mode needs a file input. */
compress_result compress(const dataset_spec& input, const std::string& output, backend& be,
                         const compress_options& options);
/** compress() of parse_dataset_spec(input). */
compress_result compress_npy(const std::string& input, const std::string& output,
                             backend& be, const compress_options& options);

struct decompress_options {
  std::uint64_t first = 0;                ///< first sample
  std::optional<std::uint64_t> end;       ///< one past the last sample; default: all
  std::string labels_out;  ///< write the labels here only (.npy, FILE.h5[:/dataset], FILE.npz[:array])
  bool overwrite = false;
  /** Threads (at most 8) that split a large read of the archive's chunks (0: every core;
   *  0..max_threads, else error(invalid_argument)). */
  int threads = 0;
  progress_fn progress;
};

struct decompress_result {
  geometry geom;       ///< of the output (samples = the range written)
  dtype type = dtype::u8;
  /** The HDF5 dataset or .npz array written (by default "/data", "data"); "" for others. */
  std::string dataset;
  /** Where the stored labels went: the file ("-": standard output) and, in an HDF5 or .npz
   *  file, the dataset or array; both "" where none were written. */
  std::string labels_output, labels_dataset;
  std::vector<std::uint64_t> labels_shape;  ///< of the labels written
  std::uint64_t output_bytes = 0;
  /** Bytes the output took, its format's headers (and labels beside the data) included:
   *  to_json's "file_bytes"; nullopt for HDF5. */
  std::optional<std::uint64_t> written_bytes;
  double seconds = 0.0;
  std::vector<std::string> notes;  ///< things to tell the user (labels left out, ...)
  nlohmann::json to_json() const;
};

/** Decode an archive (or "-") into a dataset of the original dtype and layout: .npy (or "-"),
 *  an HDF5 dataset (with attributes saying where it came from, and the labels beside it as
 *  /labels), or raw binary. */
decompress_result decompress(const std::string& input, const dataset_spec& output, backend& be,
                             const decompress_options& options);
/** decompress() to parse_dataset_spec(output). */
decompress_result decompress_to_npy(const std::string& input, const std::string& output,
                                    backend& be, const decompress_options& options);

/** Everything `dctchop info` shows: header, index summary, footer figures (with
 *  quality.ssim_status; no "quality" for an archive written without measuring it). */
nlohmann::json archive_info(const std::string& input);
/** The same of an open archive: a random-access reader, or a stream reader that has read
 *  every chunk (whose footer and size are known only then). */
nlohmann::json archive_info(const archive_reader& r);

/** Why the quality recorded in archive_info(...) has no SSIM, as far as the archive tells:
 *  the footer keeps numbers only (ARCHIVE.md), so the reason comes from the figures, the plane
 *  size and the provenance (compress never measures SSIM of float data read from stdin). */
ssim_status recorded_ssim_status(const nlohmann::json& info);

// ---------------------------------------------------------------------------------- eval

struct eval_options {
  std::vector<int> blocks = {8};             ///< block sizes to try, each with every chop
  std::vector<int> chops = {1, 2, 4, 6};     ///< values above a block size are skipped for it
  std::vector<coeff_type> coeffs;            ///< empty: the default for the dtype
  layout lay = layout::automatic;
  double chunk_mb = 4.0;                     ///< chunking used for the true archive size
  std::string tool_version;                  ///< as compress_options: the header's provenance
  bool ssim = true;
  std::optional<double> nonfinite_replacement;  ///< as compress_options
  offset_choice offset;                         ///< as compress_options
  int threads = 0;                              ///< as compress_options
  /** Each setting's codec is timed for at least this many seconds in all (its encodes and
   *  decodes together): a chunk goes through it again, in memory, until then (at most
   *  `max_passes` times a chunk), and the chunk's fastest encode and fastest decode count,
   *  as lzbench and `zstd -b` time. A pass of a few milliseconds, which a small dataset
   *  takes, varied several times over between runs on a busy host. 0: one pass a chunk. */
  double min_seconds = 0.1;
  static constexpr std::uint64_t max_passes = 100;
  progress_fn progress;
};

/** One row of `dctchop eval`. */
struct eval_row {
  int block = 8, chop = 4;
  coeff_type coeff = coeff_type::f16;
  std::uint64_t archive_bytes = 0, input_bytes = 0, values = 0;
  quality q;
  /** Over the chunks, each chunk's fastest encode and decode (eval_options::min_seconds). */
  double encode_seconds = 0, decode_seconds = 0;
  std::uint64_t passes = 0;  ///< chunks through the codec, timed (repeats included)
  std::string error;  ///< non-empty when this setting cannot hold the data (e.g. f16 overflow)
  double ratio() const { return archive_bytes ? double(input_bytes) / double(archive_bytes) : 0; }
  double bits_per_value() const { return formats::bits_per_value(archive_bytes, 0, values); }
  double compress_gbps() const { return gb_per_s(input_bytes, encode_seconds); }
  double decompress_gbps() const { return gb_per_s(input_bytes, decode_seconds); }
  nlohmann::json to_json() const;
};

struct eval_result {
  geometry geom;
  dtype type = dtype::u8;
  double offset = 0.0;  ///< subtracted before the transform, in every row (offset_choice)
  std::vector<eval_row> rows;
  std::optional<std::uint64_t> nonfinite_replaced;  ///< with nonfinite_replacement on float data
  std::vector<std::string> notes;  ///< things to tell the user (e.g. the dataset chosen)
  std::vector<std::string> warnings;  ///< doubts about the figures, told after them
};

/** Compress and decompress `input` in memory, chunk by chunk, with every combination of block
 *  size, chop and coefficient type, and measure each. Reads the input once (twice for float data, whose
 *  range R is found first); writes nothing. */
eval_result eval(const dataset_spec& input, backend& be, const eval_options& options);
/** eval() of parse_dataset_spec(input). */
eval_result eval_npy(const std::string& input, backend& be, const eval_options& options);

// -------------------------------------------------------------------------------- verify

struct verify_options {
  std::optional<double> min_psnr, min_ssim, max_error;
  /** The original labels (FILE.npy, FILE.h5:/labels, FILE.npz:y_train, as compress's
   *  --labels): the archive's stored labels must equal them, byte for byte, else a mismatch. */
  std::string labels_path;
  int threads = 0;  ///< as compress_options
  progress_fn progress;
};

struct verify_result {
  /** Non-empty: archive and input differ in shape or dtype, or the labels differ. */
  std::string mismatch;
  std::optional<quality> q;           ///< when the shapes match (the labels may not)
  std::vector<std::string> failures;  ///< gates that did not hold, one line each
  std::vector<std::string> notes;     ///< things to tell the user (e.g. the dataset chosen)
  /** Doubts about the result, told after it: the quality is far from the one recorded when
   *  the archive was made (another original?). In to_json() they follow "notes". */
  std::vector<std::string> warnings;
  /** The archive's samples, and the chunks read (checksums checked): 0 on a mismatch of the
   *  data. In to_json() as verify without an original gives them. */
  std::uint64_t samples = 0, chunks = 0;
  /** With verify_options::labels_path: the labels given, by the name they were read under (as
   *  given where the data does not match and they were not read), their rows, and how many of
   *  those differ from the archive's (0: equal; the mismatch says which first): nullopt where
   *  they were not compared (the data does not match, their dtype or shape differ from the
   *  stored labels', or the archive holds none). */
  struct labels_check {
    std::string source;
    std::optional<std::uint64_t> rows, rows_differing;
  };
  std::optional<labels_check> labels;  ///< nullopt without verify_options::labels_path
  bool passed() const { return mismatch.empty() && failures.empty(); }
  nlohmann::json to_json() const;
};

/** Check every checksum of `archive`, compare its shape and dtype with `input`, decode and
 *  measure the quality against `input`, apply the gates, and compare the stored labels with
 *  options.labels_path where given. Corruption throws
 *  error(corrupt); a failed gate or a mismatch is reported in the result. */
verify_result verify_archive(const std::string& archive, const dataset_spec& input, backend& be,
                             const verify_options& options);
/** verify_archive() against parse_dataset_spec(input). */
verify_result verify_archive(const std::string& archive, const std::string& input, backend& be,
                             const verify_options& options);

/** Read every chunk and side array of `archive`, checking each checksum and the index;
 *  throws error(corrupt) on the first fault. `progress` (samples checked, of all) is called
 *  after each chunk, and may throw to stop. Returns {"file": its name ("<stdin>" for "-"),
 *  "passed": true, "chunks": n, "side_arrays": [{name, descr, shape, bytes}, ...] (as `info`
 *  lists them), "samples": N}. */
nlohmann::json check_archive(const std::string& archive, const progress_fn& progress = {});

/** JSON of a quality record, as stored in the archive footer and printed by --json. */
nlohmann::json quality_to_json(const quality& q);
/** One entry of a report's "chop_search": chop, psnr_db, ssim, measured_on, meets. */
nlohmann::json chop_trial_to_json(const chop_trial& t);

}  // namespace dctchop::formats
