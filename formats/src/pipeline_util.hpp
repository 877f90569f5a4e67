// Internal helpers shared by the whole-file operations (pipeline.cpp, quality_tools.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/cores.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/npy.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/metrics.hpp"
#include "chunk_pipeline.hpp"

namespace dctchop::formats::detail {

using u64 = std::uint64_t;
using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/** acc.result() (or acc.result_at_data_range()), its errors naming the data `name`. */
inline quality measured(const quality_accumulator& acc, const std::string& name,
                        bool at_data_range = false) {
  try {
    return at_data_range ? acc.result_at_data_range() : acc.result();
  } catch (const error& e) {
    throw error(e.code(), name + ": " + e.what());
  }
}

/** The error for the buffers of `chunks` chunks of `samples` samples, `bytes` in all, that
 *  could not be had: bad_input where one sample needs more than the machine's memory ("NAME:
 *  1 chunk of 1 sample needs 10.0 PiB of memory, more than this machine has (23.4 GiB)"):
 *  one sample is the unit of work, and a sample larger than memory cannot be processed yet;
 *  else io, naming the process's address-space limit where it has one (ulimit -v). */
[[noreturn]] void refuse_memory(const std::string& name, u64 chunks, u64 samples, double bytes);

/** fn(), which allocates what refuse_memory describes; a std::bad_alloc from it is that error. */
template <typename Fn>
void allocate_for(const std::string& name, u64 chunks, u64 samples, double bytes, Fn&& fn) {
  try {
    fn();
  } catch (const std::bad_alloc&) {
    refuse_memory(name, chunks, samples, bytes);
  }
}

/** `v` as printf's %g writes it. */
std::string g_text(double v);

/** A warning where rounding the coefficients to `coeff`'s step near zero (i16: 1; f16, bf16
 *  and f32: their smallest numbers) may alone be a good part of the error (a tenth of it or
 *  more), naming the types that would not be; else "". For float data; of integer data, i16's
 *  whole numbers only (at chop = block they are the whole error: values off by one). */
std::string coefficient_rounding_note(dtype type, coeff_type coeff, int block, int chop,
                                      const quality& q);

struct input_source;

/** A note that a 2-D input taken with the automatic layout is one HW image (with a hint
 *  when its rows look like flattened square images), or "". */
std::string one_image_note(const input_source& src, layout asked);

/** A note that a --layout given outright makes planes with an axis of 4 or fewer values while
 *  the automatic layout reads the shape otherwise, with planes wider than that ("--layout NCHW
 *  makes planes of 32x3 ..."), or "". */
std::string narrow_planes_note(const input_source& src, layout asked);

/** A warning when `replaced` NaN/Inf values stored as `value` lie far from the data (more
 *  than 0.6 R from the offset), where they inflate R and so the PSNR; else "". */
std::string replaced_values_note(u64 replaced, double value, double offset, double range);

/** Whether the `values` values of `type` at `p` (native order) are all finite; integers
 *  always are. */
bool all_finite(const void* p, u64 values, dtype type);

/** --nonfinite asked of integer data, which it leaves alone. */
std::string nonfinite_on_integers_note(dtype type);

/** What compress warns of after its summary (compress_result::warnings). */
std::vector<std::string> compress_warnings(const compress_result& r, const std::string& output,
                                           std::optional<double> replacement);

/** An archive's side arrays as the JSON reports list them: name, descr, shape, bytes each. */
nlohmann::json side_arrays_json(const archive_reader& r);

/** The labels that `spec` names (compress's and verify's --labels; an array in memory, or a
 *  file resolved by its content) for the data `src` read from `input`, opened as labels: a
 *  search of an HDF5 or .npz file takes arrays of one row per sample only, and not the data's
 *  own array in the data's file. Refuses (invalid_argument) the data's own array named outright
 *  and, where `output` is not empty, labels that `output` would replace. Their row count is
 *  the caller's to check. */
std::unique_ptr<sample_source> open_labels(dataset_spec spec, const dataset_spec& input,
                                           const input_source& src, const std::string& output);

/** Rows of the NPY array per sample: HW arrays are one sample of H rows. */
inline u64 rows_per_sample(const geometry& g) { return g.lay == layout::hw ? g.height : 1; }

/** A dataset (NPY, HDF5 or raw) seen as samples of a codec dtype. */
struct input_source {
  dataset_spec spec;
  std::unique_ptr<sample_source> src;
  dtype type = dtype::u8;
  geometry geom;
  u64 bytes_per_sample = 0;
  /** When set, NaN and Inf in a float input read as this value (--nonfinite replace=V). */
  std::optional<double> nonfinite_replacement;
  std::string name() const { return src->name(); }
  bool rereadable() const { return src->rereadable(); }
  /** Read samples [first, first+n) into dst (C order, native); returns how many non-finite
   *  values were replaced (always 0 without nonfinite_replacement). */
  u64 read(u64 first, u64 n, void* dst);
  /** Sample 0 as stored (before any replacement), read ahead of read(): from a stream it is
   *  kept and handed to the first read(). Empty for a dataset of no samples. */
  const std::vector<std::byte>& first_sample();

 private:
  std::vector<std::byte> head_;  // sample 0, read ahead
  bool head_pending_ = false;    // a stream's sample 0 is in head_, not yet read()
};

/** The offset o that compress and eval subtract (ARCHIVE.md, "The codec" step 1). By default the
 *  dtype's for integer data, and for float data the mean of the first sample's finite values,
 *  rounded to f32 (0 when it has none). Data far from zero then keeps small DC coefficients,
 *  which f16 and bf16 coefficients (and f32 ones, for data that varies little) could not
 *  otherwise hold precisely. `choice` can ask for that mean for any dtype, or for a value.
 *  The header records it. */
double codec_offset(input_source& src, const offset_choice& choice = {});

/** The significant bits a coefficient type keeps of a large value: f16 11, bf16 8, f32 24;
 *  i16, which rounds to whole numbers whatever the size, 24 too (as f32's arithmetic). */
int significant_bits(coeff_type c);

/** A note when a `--offset V` lies so far from the first sample's values that f32 arithmetic,
 *  or the precision of `coeff` (f16 and bf16 keep 11 and 8 significant bits), at |x - V|
 *  costs the decode more than rounding would (integers: 1/4; floats: 0.1% of the spread),
 *  or "". */
std::string far_offset_note(input_source& src, const offset_choice& choice, double offset,
                            int block, coeff_type coeff);

/** progress(0, 0), progress_fn's bare chance to cancel, as chunk_stages::before_read; empty
 *  without a progress function. */
inline std::function<void()> cancel_point(const progress_fn& progress) {
  if (!progress) return {};
  return [&progress] { progress(0, 0); };
}

/** The check of a watched stream (input_file::watch, output_file::watch): give up once
 *  `stop` is set (error interrupted, "NAME: DOING given up: the work stopped"), then let
 *  `cancel` throw if a cancel is pending. `stop` must outlive the check. */
inline std::function<void()> stop_check(const std::atomic<bool>& stop, std::function<void()> cancel,
                                        std::string name, const char* doing) {
  return [&stop, cancel = std::move(cancel), what = std::move(name) + ": " + doing] {
    if (stop.load()) throw error(errc::interrupted, what + " given up: the work stopped");
    if (cancel) cancel();
  };
}

/** The check of an output watched while a pipeline writes it, until it is finished: a write
 *  waiting on a stalled pipe gives up once the run was cancelled (`stop`,
 *  chunk_stages::stop_writes) or a cancel is pending (progress(0, 0) throws). `stop` and
 *  `progress` must outlive the output's writes. */
inline std::function<void()> write_check(const std::atomic<bool>& stop, const progress_fn& progress,
                                         std::string name) {
  return stop_check(stop, cancel_point(progress), std::move(name), "writing");
}

/** While alive, reads of `watched` (a sample_source or an archive_reader) that wait on a
 *  stalled stream look every tenth of a second for the end of the run: they give up once it
 *  failed (stages.stop_reads, which must be set: the failure is then reported without
 *  waiting for the input) and see a cancel (stages.before_read). */
template <typename Watched>
class watch_reads {
 public:
  watch_reads(Watched& watched, const chunk_stages& stages, std::string name) : w_(watched) {
    w_.watch(stop_check(*stages.stop_reads, stages.before_read, std::move(name), "reading"));
  }
  ~watch_reads() { w_.watch({}); }
  watch_reads(const watch_reads&) = delete;
  watch_reads& operator=(const watch_reads&) = delete;

 private:
  Watched& w_;
};

/** error(invalid_argument) for an options struct's `threads` outside 0..max_threads, as
 *  make_backend refuses them (-3 ran as every core, 100000 as 8). `what`: "compress_options". */
inline void check_threads(int threads, const char* what) {
  if (threads < 0 || threads > max_threads) {
    throw error(errc::invalid_argument,
                std::string(what) + "::threads " + std::to_string(threads) +
                    ": expected 0 (every core) to " + std::to_string(max_threads));
  }
}

/** Threads that split each large read of a file (input_file's split read_at): `threads`, the
 *  command's --threads (0: all), but no more than the cores this process may use (its
 *  affinity and a cgroup's CPU quota), and at most 8: more copy no faster from the page cache
 *  (one thread's copies run at about 6 GB/s, the memory at tens). */
inline unsigned read_threads_for(int threads) {
  const unsigned cores = usable_cores().usable;
  return std::min({threads > 0 ? static_cast<unsigned>(threads) : cores, cores, 8U});
}

/** `spec` read with the backend's threads undoing the filters of compressed HDF5 chunks, and
 *  read_threads_for(threads) splitting each large read of a file's rows. */
inline dataset_spec read_with_threads_of(const backend& be, dataset_spec spec, int threads) {
  spec.decode_threads = static_cast<unsigned>(std::max(be.threads(), 1));
  spec.read_threads = read_threads_for(threads);
  return spec;
}

/** Open an input, check its dtype and resolve the layout; errors name the file. `replace`
 *  sets input_source::nonfinite_replacement. */
input_source open_input(const dataset_spec& spec, layout lay,
                        std::optional<double> replace = std::nullopt);

/** open_input's first half: the dataset opened and its dtype checked, no geometry yet. */
input_source open_input_source(const dataset_spec& spec, std::optional<double> replace);

/** open_input's second half: the geometry of `in` in layout `lay`; a shape that cannot have
 *  it is an invalid_argument error naming the file. */
void apply_layout(input_source& in, layout lay);

/** Samples per chunk for a target of chunk_mb MiB of coefficients, the input side capped at
 *  64 MiB, at least one sample; rounded to whole read units of `preferred_rows` samples
 *  (an HDF5 chunk) when that is not smaller than one unit. */
u64 samples_per_chunk(u64 coeff_bytes_per_sample, u64 input_bytes_per_sample, double chunk_mb,
                      u64 samples, u64 preferred_rows = 1);

/** The header compress writes for `src` with codec `p`: geometry, chunking (chunk_mb MiB of
 *  coefficients, aligned to the source's read unit) and provenance. eval builds the same one to
 *  predict archive sizes exactly. */
archive_header make_archive_header(const input_source& src, const codec_params& p,
                                   double chunk_mb, const std::string& tool_version,
                                   const std::string& created);

/** A UTC time as ISO 8601 ("2026-11-29T18:00:00Z"), the provenance's "created": `seconds`
 *  since 1970, or now. */
std::string utc_text(std::optional<std::int64_t> seconds = std::nullopt);

/** R for float data, by a first pass over a rereadable input (nullopt for stdin and integer
 *  types). `progress`, when set, is called with (0, samples) after each part read. */
std::optional<double> float_range(const dataset_spec& spec, layout lay,
                                  std::optional<double> replace = std::nullopt,
                                  const progress_fn& progress = {});

/** The footer members compress adds beside the index (ARCHIVE.md): the input's size, the
 *  measured quality when there is one, and the count of replaced NaN/Inf values when the
 *  input had them replaced. eval uses it too, to predict the archive's size exactly. */
nlohmann::json footer_extra(u64 input_bytes, const quality* q, std::optional<u64> replaced);

/** Re-throw an error from a batch of `src` with its name and the absolute sample index, and
 *  for a sample's error, what the source says of values never written (a NaN fill value). */
[[noreturn]] void rethrow_in(const error& e, const sample_source& src, u64 first);

/** The detail of `e`, a coefficient too large for `p.coeff` in a sample of `view`: where the
 *  sample's NaN and Inf, counted as the --nonfinite `replacement`, lie too far from its other
 *  values for the type (which fit it among themselves; f32 and f64 data), it names the
 *  replacement (the advice was to rescale data within +-1); else e.detail(). */
std::string overflow_detail(const error& e, const codec_params& p,
                            std::optional<double> replacement, const const_sample_view& view);

/** be.encode(), with a sample-level error re-thrown naming the file and absolute sample
 *  (`first` is the batch's first sample). */
inline void encode_batch(backend& be, const codec_params& p, const const_sample_view& view,
                         std::span<std::byte> coeffs, const input_source& src, u64 first) {
  try {
    be.encode(p, view, coeffs);
  } catch (const error& e) {
    const std::string detail = overflow_detail(e, p, src.nonfinite_replacement, view);
    if (detail == e.detail()) rethrow_in(e, *src.src, first);
    rethrow_in(error(e.code(), detail, e.sample()), *src.src, first);  // (sample >= 0 there)
  }
}

/** The backends of a chunk pipeline's workers (run_chunks): be.threads() single-threaded
 *  copies of `be`, or `be` alone when it does not split that way; fewer when workers + 2
 *  chunks in flight of `slot_bytes` each would pass the pipeline's memory budget (384 MiB). */
struct pipeline_workers {
  std::vector<std::unique_ptr<backend>> owned;
  std::vector<backend*> be;
  unsigned count() const { return static_cast<unsigned>(be.size()); }
  /** Chunks in flight: one per worker, one being read and one being written; fewer (one at
   *  the least: read, work and write in turn) when three chunks would not fit the budget. */
  std::size_t slots() const { return slot_count; }
  std::size_t slot_count = 3;
};
/** The workers and slots for `chunks` chunks of `slot_bytes` each (every buffer a chunk
 *  travels in), within a budget of 384 MiB where the backend's threads allow: no more
 *  workers than chunks. */
pipeline_workers make_workers(backend& be, u64 slot_bytes, u64 chunks);

/** Single-threaded copies of `be` (backend::single_threaded) for as many workers as its
 *  threads(), `most` and the CPUs this process may run on allow; none where that is one, or
 *  where `be` does not split so. (The chunk pipelines' workers, eval's passes in parts.) */
std::vector<std::unique_ptr<backend>> single_threaded_copies(backend& be, u64 most);

/** Samples for a buffer of at most `bytes` on its larger side, the input (`ibps` a sample)
 *  or the coefficients (`cbps`: tiny planes pad to whole blocks and outgrow their input):
 *  at least 1, at most `samples`. (eval's chunks and a target search's trial sample.) */
inline u64 samples_within(u64 bytes, u64 ibps, u64 cbps, u64 samples) {
  return std::max<u64>(1, std::min<u64>(samples, bytes / std::max<u64>({ibps, cbps, 1})));
}

/** The chunks that `samples` samples make at `per_chunk` (> 0) a chunk. */
inline u64 chunk_count(u64 samples, u64 per_chunk) { return (samples + per_chunk - 1) / per_chunk; }

/** Whether q meets every target. A target whose figure is undefined on this data (PSNR of
 *  constant float data, SSIM of planes below 7x7, ...) is an error(quality_not_met) naming
 *  `name` and the reason. */
bool meets(const quality& q, const quality_target& t, const std::string& name);

}  // namespace dctchop::formats::detail
