#include "dctchop/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <vector>

#include "backends.hpp"
#include "dctchop/error.hpp"
#include "isa.hpp"
#include "metric_kernels.hpp"
#include "omp.hpp"

namespace dctchop {
namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

constexpr u64 k_win = detail::ssim_window;

/** The kernels' copy for this processor, chosen once. */
struct metric_kernels {
  decltype(&detail::generic::sample_stats) sample_stats;
  decltype(&detail::generic::sample_ssim) sample_ssim;
  decltype(&detail::generic::dense_ssim) dense_ssim;
  decltype(&detail::generic::load_row) load_row;
};

const metric_kernels& kernels() {
  static const metric_kernels k = [] {
#if defined(DCTCHOP_HAVE_AVX2_KERNELS)
    if (detail::use_avx2_kernels())
      return metric_kernels{&detail::avx2::sample_stats, &detail::avx2::sample_ssim,
                            &detail::avx2::dense_ssim, &detail::avx2::load_row};
#endif
    return metric_kernels{&detail::generic::sample_stats, &detail::generic::sample_ssim,
                          &detail::generic::dense_ssim, &detail::generic::load_row};
  }();
  return k;
}

/** Whether each sample of the view is one contiguous run of planes*height*width values (true
 *  for every layout make_view produces), so that error statistics can skip the row walk. */
bool dense_samples(const const_sample_view& v) {
  const i64 h = static_cast<i64>(v.height), w = static_cast<i64>(v.width),
            c = static_cast<i64>(v.planes);
  if (v.stride_sample != c * h * w) return false;
  const bool planar = v.stride_plane == h * w && v.stride_row == w && v.stride_col == 1;
  const bool interleaved = v.stride_plane == 1 && v.stride_row == w * c && v.stride_col == c;
  return planar || (c == 1 && v.stride_row == w && v.stride_col == 1) || interleaved;
}

using detail::resolve_threads;

}  // namespace

std::optional<double> integer_range(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return 255.0;
    case dtype::u16: return 65535.0;
    case dtype::i16: return 65535.0;
    case dtype::i8: return 255.0;
    case dtype::i32: case dtype::u32: return 4294967295.0;
    default: return std::nullopt;
  }
}

namespace {
/** Two ranges R as one setting: equal (0 and -0 too), or both NaN. */
bool same_range(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

/** A number as %g prints it (to_string's %f gives DBL_MAX 309 digits). */
std::string g6(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace

std::optional<double> psnr(double range, double mse) {
  if (!(mse > 0.0) || !(range > 0.0)) return std::nullopt;
  return 20.0 * std::log10(range) - 10.0 * std::log10(mse);
}

std::optional<double> ssim_plane(const double* a, const double* b, u64 h, u64 w, double range) {
  if (h < k_win || w < k_win) return std::nullopt;
  return kernels().dense_ssim(a, b, h, w, range);
}

void value_range::add(const const_sample_view& v) {
  const metric_kernels& k = kernels();
  auto take = [&](double lo, double hi) {
    if (empty) {
      min = lo;
      max = hi;
      empty = false;
    }
    min = std::min(min, lo);
    max = std::max(max, hi);
  };
  if (dense_samples(v)) {  // the error statistics' vectorised loop finds the range too
    for (u64 n = 0; n < v.samples; ++n) {
      if (v.planes * v.height * v.width == 0) continue;
      const detail::error_stats st = k.sample_stats(v, v, n);
      take(st.mn, st.mx);
    }
    return;
  }
  std::vector<double> row(v.width);
  for (u64 n = 0; n < v.samples; ++n)
    for (u64 c = 0; c < v.planes; ++c)
      for (u64 r = 0; r < v.height; ++r) {
        k.load_row(v, n, c, r, row.data());
        for (double x : row) take(x, x);
      }
}

void value_range::merge(const value_range& o) {
  if (o.empty) return;
  if (empty) {
    *this = o;
    return;
  }
  min = std::min(min, o.min);
  max = std::max(max, o.max);
}

namespace {

/** Each ssim_status's word (JSON), reason (messages) and note (tables), in enum order. */
struct ssim_status_texts {
  const char *word, *reason, *note;
};
constexpr ssim_status_texts k_ssim_status[] = {
    {"measured", "SSIM was measured", "measured"},
    {"off", "SSIM was not measured (--no-ssim or --no-quality)", "not measured"},
    {"no_range", "float data read from stdin or a pipe has no range known in advance, which SSIM needs",
     "float data from a stream: range unknown"},
    {"small_planes", "the planes are smaller than 7x7", "planes below 7x7"},
    {"constant", "the data is constant (range 0), so SSIM is 0/0", "constant data"},
    {"other_range",
     "the original's range is not the one recorded with the archive, which SSIM was measured with",
     "original's range is not the recorded one"},
    {"not_recorded", "the archive's quality figures do not record SSIM", "not recorded"},
};
static_assert(std::size(k_ssim_status) == static_cast<std::size_t>(ssim_status::not_recorded) + 1);

const ssim_status_texts& texts_of(ssim_status s) noexcept {
  return k_ssim_status[static_cast<int>(s)];
}

}  // namespace

const char* to_string(ssim_status s) noexcept { return texts_of(s).word; }
const char* ssim_missing_reason(ssim_status s) noexcept { return texts_of(s).reason; }
const char* ssim_missing_note(ssim_status s) noexcept { return texts_of(s).note; }

quality_accumulator::quality_accumulator(dtype type, std::optional<double> range, bool ssim)
    : type_(type), ssim_asked_(ssim) {
  if (size_of(type) == 0) {  // (a cast out of the enum: its views cannot be read)
    throw error(errc::invalid_argument, "quality_accumulator: dtype " +
                                            std::to_string(static_cast<int>(type)) +
                                            " is not one dctchop knows");
  }
  known_range_ = integer_range(type);
  // (A range of NaN or Inf, data's with NaN or Inf in it, is taken: the encode that follows
  // names the sample that holds one, which says more than a refusal here could; the figures
  // refuse it. No data have a range below 0: that one is the caller's slip.)
  if (!known_range_ && range && *range < 0) {
    throw error(errc::invalid_argument, "quality_accumulator: a range R of " + g6(*range) +
                                            "; R is max - min, 0 or more");
  }
  if (!known_range_ && range) known_range_ = range;
}

quality_batch quality_accumulator::measure(const const_sample_view& a,
                                           const const_sample_view& b, int threads) const {
  quality_batch batch;
  measure(a, b, threads, batch);
  return batch;
}

void quality_accumulator::measure(const const_sample_view& a, const const_sample_view& b,
                                  int threads, quality_batch& batch) const {
  check_views(a, b);
  const i64 samples = static_cast<i64>(a.samples);
  // (One sample takes one thread: no need to read the cgroup files for "every core".) A
  // thread takes 64 Ki values or more (about 0.2 ms of one core's SSIM of u8): a team for
  // fewer spent more on its start and barrier than it saved (as the codec's, cpu_kernels.cpp).
  const u64 all_values = a.samples * a.planes * a.height * a.width;
  [[maybe_unused]] const int nt =
      a.samples <= 1 ? 1
                     : detail::region_threads(resolve_threads(threads),
                                              std::min<u64>(a.samples, all_values >> 16));
  const metric_kernels& k = kernels();
  const u64 per_sample = a.planes * a.height * a.width;
  const double range = known_range_.value_or(0.0);
  // Range 0 (constant float data): SSIM is 0/0 unless the data came back exactly, which
  // result() can tell only at the end; the planes are counted here, not measured.
  const bool want_ssim = computes_ssim() && a.height >= k_win && a.width >= k_win;
  const bool measure_ssim = want_ssim && range > 0;
  const bool dense = dense_samples(a) && dense_samples(b);
  // Each sample's squared error and SSIM sum, filled in parallel; add(batch) sums them in
  // sample order, so the figures do not depend on the thread count or on how the data was
  // split into batches. The extremes need no order: each thread keeps its own.
  constexpr double inf = std::numeric_limits<double>::infinity();
  batch.values_per_sample = per_sample;
  batch.sse.assign(a.samples, 0.0);
  if (measure_ssim) batch.ssim_sum.assign(a.samples, 0.0);
  else batch.ssim_sum.clear();
  batch.max_abs = 0;
  batch.mn = inf;
  batch.mx = -inf;
  batch.ssim_planes = want_ssim ? a.samples * a.planes : 0;
  double* const sse = batch.sse.data();
  double* const ssim = batch.ssim_sum.data();
  // (An exception, such as memory for a row or the SSIM windows, ends every thread's work
  // and is thrown after the region.)
  detail::region_failure failure;
  DCTCHOP_OMP(omp parallel num_threads(nt) if (nt > 1 && samples > 1))
  {
    std::vector<double> ra, rb;
    failure.run([&] {
      ra.resize(a.width);
      rb.resize(a.width);
    });
    double max_abs = 0, mn = inf, mx = -inf;
    DCTCHOP_OMP(omp for schedule(dynamic, 1))
    for (i64 si = 0; si < samples; ++si) {
      if (failure.failed()) continue;
      failure.run([&] {
        const u64 n = static_cast<u64>(si);
        if (dense) {
          const detail::error_stats st = k.sample_stats(a, b, n);
          sse[n] = st.sse;
          max_abs = std::max(max_abs, st.max_abs);
          if (per_sample > 0) {
            mn = std::min(mn, st.mn);
            mx = std::max(mx, st.mx);
          }
        } else {  // a strided view: walk the rows
          double e = 0;
          for (u64 c = 0; c < a.planes; ++c)
            for (u64 r = 0; r < a.height; ++r) {
              k.load_row(a, n, c, r, ra.data());
              k.load_row(b, n, c, r, rb.data());
              for (u64 x = 0; x < a.width; ++x) {
                const double d = ra[x] - rb[x];
                e += d * d;
                max_abs = std::max(max_abs, std::fabs(d));
                mn = std::min(mn, ra[x]);
                mx = std::max(mx, ra[x]);
              }
            }
          sse[n] = e;
        }
        if (measure_ssim) ssim[n] = k.sample_ssim(a, b, n, range);
      });
    }
    DCTCHOP_OMP(omp critical(dctchop_quality_extremes))
    {
      batch.max_abs = std::max(batch.max_abs, max_abs);
      batch.mn = std::min(batch.mn, mn);
      batch.mx = std::max(batch.mx, mx);
    }
  }
  failure.rethrow();
}

void decode_and_measure(backend& be, const codec_params& params, std::span<const std::byte> coeffs,
                        const const_sample_view& original, const sample_view& decoded,
                        const quality_accumulator& acc, int threads, quality_batch& into) {
  if (be.decode_measured(params, coeffs, original, acc, into)) return;
  be.decode(params, coeffs, decoded);
  acc.measure(original, decoded, threads, into);
}

void quality_accumulator::add(const quality_batch& batch) {
  const u64 n = batch.samples();
  if (n == 0) return;
  for (u64 i = 0; i < n; ++i) {
    if (std::isnan(batch.sse[i])) {
      throw error(errc::bad_input,
                  "quality: sample " + std::to_string(samples_ + i) +
                      " of the measured data has an error that is not a number (a NaN in the "
                      "original or in the decoded copy, or an infinity in both): it has no PSNR "
                      "or SSIM");
    }
  }
  const u64 per_sample = batch.values_per_sample;
  if (per_sample > 0) {
    min_ = values_ == 0 ? batch.mn : std::min(min_, batch.mn);
    max_ = values_ == 0 ? batch.mx : std::max(max_, batch.mx);
  }
  values_ += n * per_sample;
  max_abs_ = std::max(max_abs_, batch.max_abs);
  for (u64 i = 0; i < n; ++i) {
    const double e = batch.sse[i];
    sse_ += e;
    if (e > 0) {
      const double m = e / static_cast<double>(per_sample);
      max_sample_mse_ = std::max(max_sample_mse_, m);
      sum_log_sample_mse_ += std::log10(m);
      ++lossy_samples_;
    } else {
      ++lossless_;
    }
  }
  for (const double v : batch.ssim_sum) ssim_sum_ += v;
  ssim_planes_ += batch.ssim_planes;
  samples_ += n;
}

void quality_accumulator::check_views(const const_sample_view& a,
                                      const const_sample_view& b) const {
  if (a.type != b.type || a.samples != b.samples || a.planes != b.planes ||
      a.height != b.height || a.width != b.width) {
    throw error(errc::invalid_argument, "quality_accumulator: views differ in shape or dtype");
  }
  detail::check_view(a);  // (a null view of samples crashed the measurement)
  detail::check_view(b);
  if (a.type != type_) {
    throw error(errc::invalid_argument, "quality_accumulator: the views are " +
                                            std::string(to_string(a.type)) +
                                            ", the accumulator measures " +
                                            std::string(to_string(type_)));
  }
}

void quality_accumulator::add(const const_sample_view& a, const const_sample_view& b,
                              int threads) {
  check_views(a, b);  // (the batches below take a's sample count for both)
  // A batch at a time: the same sums in the same order as one measure() of the whole.
  quality_batch batch;
  const u64 step = add_batch_samples;
  for (u64 first = 0; first < a.samples; first += step) {
    const u64 n = std::min(step, a.samples - first);
    const_sample_view pa = a, pb = b;
    pa.data = static_cast<const std::byte*>(a.data) +
              static_cast<i64>(first) * a.stride_sample * static_cast<i64>(size_of(a.type));
    pb.data = static_cast<const std::byte*>(b.data) +
              static_cast<i64>(first) * b.stride_sample * static_cast<i64>(size_of(b.type));
    pa.samples = pb.samples = n;
    measure(pa, pb, threads, batch);
    add(batch);
  }
}

void quality_accumulator::merge(const quality_accumulator& o) {
  // (The range too: SSIM sums made with two R mix two sets of constants.)
  if (o.type_ != type_ || o.computes_ssim() != computes_ssim() ||
      o.known_range_.has_value() != known_range_.has_value() ||
      (known_range_ && !same_range(*o.known_range_, *known_range_))) {
    throw error(errc::invalid_argument, "quality_accumulator: merging different settings");
  }
  if (o.values_ == 0) return;
  min_ = values_ == 0 ? o.min_ : std::min(min_, o.min_);
  max_ = values_ == 0 ? o.max_ : std::max(max_, o.max_);
  samples_ += o.samples_;
  values_ += o.values_;
  sse_ += o.sse_;
  max_abs_ = std::max(max_abs_, o.max_abs_);
  max_sample_mse_ = std::max(max_sample_mse_, o.max_sample_mse_);
  sum_log_sample_mse_ += o.sum_log_sample_mse_;
  lossy_samples_ += o.lossy_samples_;
  lossless_ += o.lossless_;
  ssim_sum_ += o.ssim_sum_;
  ssim_planes_ += o.ssim_planes_;
}

quality quality_accumulator::result() const {
  return figures(known_range_.value_or(data_range().value_or(0.0)), true);
}

quality quality_accumulator::result_at_data_range() const {
  if (!is_float(type_)) return result();  // R is the dtype's, whatever the values
  const double seen = data_range().value_or(0.0);
  return figures(seen, !known_range_ || *known_range_ == seen);
}

quality quality_accumulator::figures(const double range, const bool ssim_valid) const {
  // Below about 1e-154 a square is no longer a double (it underflows to a subnormal or 0):
  // an error of 1e-170 would sum to an MSE of 0 and read as lossless, and SSIM's (0.01 R)^2
  // as 0/0. Such data has to be scaled up to be measured (or coded: f32 coefficients end
  // near 1e-45).
  const double smallest = std::sqrt(std::numeric_limits<double>::min()) * 1e4;
  if ((max_abs_ > 0 && max_abs_ < smallest) || (range > 0 && range < smallest)) {
    char b[160];
    std::snprintf(b, sizeof b, "values this small (range %.3g, errors up to %.3g) ", range,
                  max_abs_);
    // (A factor that brings the range near 1: 1e150 left data of range 1e-300 still
    // too small.)
    const double size = range > 0 ? range : max_abs_;
    char by[32];
    std::snprintf(by, sizeof by, "1e%d", static_cast<int>(-std::floor(std::log10(size))));
    throw error(errc::out_of_range,
                std::string(b) + "have squares too near the smallest double for their PSNR "
                                 "and SSIM to be measured: rescale the data (times " + by +
                                 ", say)");
  }
  // Data with an infinity in it: no figure (inf - inf) where a number or nullopt is promised.
  const bool infinity = values_ > 0 && (!std::isfinite(min_) || !std::isfinite(max_) ||
                                        !std::isfinite(max_abs_));
  const bool given = is_float(type_) && known_range_ && same_range(range, *known_range_);
  if (given && !std::isfinite(range)) {
    throw error(errc::invalid_argument, "quality: the range R given (" + g6(range) +
                                            ") is not a finite number");
  }
  if (!std::isfinite(range)) {
    // max - min of data with an infinity in it (or of values more than the largest double
    // apart): 20 log10(R) - 10 log10(MSE) was inf - inf, a NaN PSNR that read as a figure.
    throw error(infinity ? errc::bad_input : errc::out_of_range,
                infinity ? std::string("quality: the original holds an infinity, so its range "
                                       "(max - min) is infinite and PSNR, NRMSE and SSIM have "
                                       "no value; replace the infinities, or measure at a "
                                       "range given")
                         : std::string("quality: the original's values lie further apart than "
                                       "the largest double (max - min overflows), so PSNR, "
                                       "NRMSE and SSIM have no value; rescale the data"));
  }
  if (!std::isfinite(sse_)) {
    // An infinite error (an infinity in the data, at a range given), or finite errors past
    // about 1.3e154, whose squares pass the largest double: PSNR read -inf, MSE inf.
    throw error(infinity ? errc::bad_input : errc::out_of_range,
                infinity ? std::string("quality: the data hold an infinity (in the original or "
                                       "the decoded copy): its error is infinite, and PSNR, "
                                       "MSE and NRMSE have no value")
                         : "quality: errors this large (up to " + g6(max_abs_) +
                               ") have a sum of squares past the largest double, so PSNR and "
                               "NRMSE cannot be measured; rescale the data");
  }
  quality q;
  q.samples = samples_;
  q.values = values_;
  q.mse = values_ ? sse_ / static_cast<double>(values_) : 0.0;
  q.rmse = std::sqrt(q.mse);
  q.max_abs_error = max_abs_;
  q.range = range;
  q.nrmse = q.range > 0 ? q.rmse / q.range : 0.0;
  q.psnr_db = psnr(q.range, q.mse);
  q.psnr_undefined = q.mse > 0 && !(q.range > 0);
  if (lossy_samples_ > 0 && q.range > 0) {
    q.sample_psnr_min = psnr(q.range, max_sample_mse_);
    const double lr = q.range > 0 ? 20.0 * std::log10(q.range) : 0.0;
    q.sample_psnr_mean = lr - 10.0 * sum_log_sample_mse_ / static_cast<double>(lossy_samples_);
  }
  q.lossless_samples = lossless_;
  if (computes_ssim() && ssim_valid && ssim_planes_ > 0 && q.range > 0) {
    q.ssim = ssim_sum_ / static_cast<double>(ssim_planes_);
  } else if (computes_ssim() && ssim_planes_ > 0 && values_ && max_abs_ == 0) {
    // Constant data that came back exactly: the index is 0/0 at R = 0, but it is 1 for
    // identical planes at every R > 0, as PSNR is infinite at MSE 0 whatever R is.
    q.ssim = 1.0;
  }
  if (q.ssim && std::isnan(*q.ssim)) {
    // An infinity in the data (at a range given: PSNR is then -inf, a figure), or a range
    // whose (0.03 R)^2 passes the largest double: the index is inf / inf in every window.
    throw error(infinity ? errc::bad_input : errc::out_of_range,
                infinity ? std::string("quality: the data hold an infinity (in the original or "
                                       "the decoded copy), whose SSIM is not a number")
                         : "quality: a range R of " + g6(q.range) +
                               " is too large for SSIM, whose formula multiplies terms of "
                               "R^2 (their products pass the largest double for R above "
                               "about 1e77); rescale the data");
  }
  q.ssim_planes = ssim_planes_;
  q.ssim_state = q.ssim                    ? ssim_status::measured
                 : !ssim_asked_            ? ssim_status::off
                 : !computes_ssim()        ? ssim_status::no_range
                 : !ssim_valid && ssim_planes_ > 0 ? ssim_status::other_range
                 : !(q.range > 0) && values_ ? ssim_status::constant
                                             : ssim_status::small_planes;
  return q;
}

}  // namespace dctchop
