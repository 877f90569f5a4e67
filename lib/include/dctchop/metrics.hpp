/** @file metrics.hpp
 *  Quality figures as README.md ("What the figures mean") defines them, accumulated chunk by chunk in
 *  bounded memory: global PSNR, per-sample PSNR (minimum and mean), SSIM with scikit-image's
 *  default conventions, max abs error, RMSE, NRMSE.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/types.hpp"

namespace dctchop {

/** Whether SSIM was measured, and if not, why. */
enum class ssim_status {
  measured,      ///< quality::ssim holds the mean over the planes
  off,           ///< not asked for (--no-ssim, --no-quality)
  no_range,      ///< float data whose range R was not known in advance (read from stdin)
  small_planes,  ///< no plane of at least 7x7
  constant,      ///< float data of range 0 not decoded exactly: SSIM is 0/0
  other_range,   ///< figures at the data's own range, which is not the R that SSIM was given
  not_recorded,  ///< an archive's quality figures leave it out (another writer's, say)
};

/** "measured", "off", "no_range", "small_planes", "constant", "other_range", "not_recorded"
 *  (the JSON reports' words). */
const char* to_string(ssim_status s) noexcept;

/** Why there is no SSIM, as a phrase for messages ("the planes are smaller than 7x7"). */
const char* ssim_missing_reason(ssim_status s) noexcept;

/** The same, short, for tables and one-line reports ("planes below 7x7"). */
const char* ssim_missing_note(ssim_status s) noexcept;

/** The figures of one comparison of an original dataset with its decoded copy. */
struct quality {
  std::uint64_t samples = 0, values = 0;
  double mse = 0, rmse = 0, nrmse = 0, max_abs_error = 0;
  double range = 0;                       ///< R of the PSNR and SSIM formulas
  std::optional<double> psnr_db;          ///< global; nullopt: lossless, or psnr_undefined
  bool psnr_undefined = false;            ///< an error on data of range 0 (constant floats)
  std::optional<double> sample_psnr_min;  ///< worst sample; nullopt: every sample lossless
  std::optional<double> sample_psnr_mean; ///< mean over samples that are not lossless
  std::uint64_t lossless_samples = 0;     ///< samples decoded without any error
  std::optional<double> ssim;             ///< mean over planes of at least 7x7; nullopt: none
  std::uint64_t ssim_planes = 0;
  ssim_status ssim_state = ssim_status::off;  ///< why ssim is empty, when it is
  /** NRMSE = RMSE / R, when R > 0. */
  std::optional<double> nrmse_defined() const {
    return range > 0 ? std::optional<double>(nrmse) : std::nullopt;
  }
};

/** One batch's figures, measured but not yet added to the totals (see
 *  quality_accumulator::measure): each sample's squared error and SSIM sum, which the totals
 *  take in sample order, and the batch's extremes, which need no order. */
struct quality_batch {
  std::vector<double> sse;       ///< per sample
  std::vector<double> ssim_sum;  ///< per sample when SSIM is computed; else empty
  double max_abs = 0;            ///< over the batch
  double mn = 0, mx = 0;         ///< the original's extremes; +inf and -inf for no values
  std::uint64_t ssim_planes = 0;
  std::uint64_t values_per_sample = 0;
  /** The most bytes a batch holds per sample, for callers that budget memory by chunks. */
  static constexpr std::uint64_t bytes_per_sample = 2 * sizeof(double);
  std::uint64_t samples() const noexcept { return sse.size(); }
};

/** Accumulates the error between original and decoded samples.
 *
 *  R is the dtype's range for integer types (255 for u8 and i8, 65535 for u16 and i16,
 *  2^32 - 1 for i32 and u32). For float
 *  types it is max - min of the original over the whole dataset: pass it to the constructor
 *  when it is known beforehand (a first pass over the data); SSIM needs it while accumulating,
 *  so a float accumulator without a known range reports no SSIM, and its PSNR uses the range
 *  seen in the data added. */
class quality_accumulator {
 public:
  /** @param type     element type of the data
   *  @param range    R for float types when known; ignored for integer types. Below 0:
   *                  error(invalid_argument) here; NaN or infinite: from result()
   *  @param ssim     whether to compute SSIM (costs about as much as a decode) */
  quality_accumulator(dtype type, std::optional<double> range, bool ssim);

  /** Add whole samples: `original` and `decoded` must have the same geometry and dtype
   *  (error(invalid_argument) otherwise), the accumulator's.
   *  Runs on `threads` OpenMP threads (0: every core). Measures at most add_batch_samples
   *  samples at a time, so its memory does not grow with the batch (16 bytes a sample). */
  void add(const const_sample_view& original, const const_sample_view& decoded, int threads = 1);
  static constexpr std::uint64_t add_batch_samples = std::uint64_t(1) << 16;
  /** The first half of add(): measure a batch without touching the totals. It is const, so
   *  several batches may be measured at once on different threads; adding the batches in
   *  order then gives exactly the totals of add() on the whole. The batch holds
   *  quality_batch::bytes_per_sample bytes a sample at most. */
  quality_batch measure(const const_sample_view& original, const const_sample_view& decoded,
                        int threads = 1) const;
  /** measure() into `into`, reusing its memory (a pipeline slot's batch, chunk after chunk). */
  void measure(const const_sample_view& original, const const_sample_view& decoded, int threads,
               quality_batch& into) const;
  /** The second half of add(): sum a measured batch into the totals, sample by sample. A
   *  sample whose squared error is NaN (a NaN in the original or the decoded copy, or an
   *  infinity in both) has no figures: error(bad_input), and nothing of the batch is added
   *  (it counted as a lossless sample). */
  void add(const quality_batch& batch);
  /** Combine another accumulator's totals (same dtype, range R and SSIM setting: else
   *  error(invalid_argument)). */
  void merge(const quality_accumulator& other);
  /** The figures so far; error(out_of_range) for data whose errors or range are too small
   *  to square in double precision (below about 1e-150), which would read as lossless, or
   *  whose range (max - min) overflows a double, errors whose squares do, or a range too
   *  large for SSIM's formula; error(bad_input) where the range is taken from data with an
   *  infinity in it (its PSNR would be inf - inf), or SSIM is measured of data with one;
   *  error(invalid_argument) for a range given that is NaN or infinite. No figure is a NaN. */
  quality result() const;
  /** As result(), but with R = max - min of the original values added, also for a float
   *  accumulator given another R: the PSNR, NRMSE and per-sample figures at the data's own
   *  range; SSIM, whose windows took the given R, only where the two are equal (else
   *  ssim_status::other_range). For a check of data against a range recorded elsewhere. */
  quality result_at_data_range() const;
  /** max - min of the original values added; nullopt before any. */
  std::optional<double> data_range() const noexcept {
    return values_ ? std::optional<double>(max_ - min_) : std::nullopt;
  }

  /** The element type of the data it measures. */
  dtype type() const noexcept { return type_; }
  /** R where it is known in advance: the dtype's range for integer types, the one given to the
   *  constructor for floats. */
  std::optional<double> known_range() const noexcept { return known_range_; }

  /** SSIM was asked for and R is known in advance (always for integer types). */
  bool computes_ssim() const noexcept { return ssim_asked_ && known_range_.has_value(); }

 private:
  quality figures(double range, bool ssim_valid) const;
  /** error(invalid_argument) unless the views match each other and this accumulator's dtype. */
  void check_views(const const_sample_view& a, const const_sample_view& b) const;
  dtype type_;
  std::optional<double> known_range_;
  bool ssim_asked_;
  std::uint64_t samples_ = 0, values_ = 0, lossless_ = 0;
  double sse_ = 0, max_abs_ = 0, min_ = 0, max_ = 0;
  double max_sample_mse_ = 0, sum_log_sample_mse_ = 0;
  std::uint64_t lossy_samples_ = 0;
  double ssim_sum_ = 0;
  std::uint64_t ssim_planes_ = 0;
};

/** Decode `coeffs` with `be` and measure the result against `original` into `into`
 *  (acc.measure): on the backend's device where it measures there (backend::decode_measured),
 *  leaving `decoded` unwritten; else decoded into `decoded` and measured on `threads` host
 *  threads. The same figures either way. */
void decode_and_measure(backend& be, const codec_params& params, std::span<const std::byte> coeffs,
                        const const_sample_view& original, const sample_view& decoded,
                        const quality_accumulator& acc, int threads, quality_batch& into);

/** The dtype's range R for integer types; nullopt for float types. */
std::optional<double> integer_range(dtype t) noexcept;

/** PSNR = 20 log10(R) - 10 log10(MSE) in dB; nullopt when MSE is 0 (infinite PSNR) or when R
 *  is 0 (constant float data: undefined). */
std::optional<double> psnr(double range, double mse);

/** SSIM of one plane pair (scikit-image defaults: 7x7 uniform window, K1 = 0.01, K2 = 0.03,
 *  sample covariance, mean over the windows that lie inside the plane); nullopt when the plane
 *  is smaller than 7x7. `a` and `b` are row-major h x w. A `range` of 0 leaves flat windows
 *  no index (0/0: NaN, or 0 where rounding leaves their variances a few ulps above 0;
 *  quality_accumulator reports such data as constant, and as 1 where it came back exactly). */
std::optional<double> ssim_plane(const double* a, const double* b, std::uint64_t h,
                                 std::uint64_t w, double range);

/** Minimum and maximum of a batch of samples (for the float range R). */
struct value_range {
  double min = 0, max = 0;
  bool empty = true;
  void add(const const_sample_view& v);
  void merge(const value_range& o);
};

}  // namespace dctchop
