#include "dctchop/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "dctchop/error.hpp"
#include "omp.hpp"

namespace dctchop {
namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

constexpr int k_win = 7;                    // scikit-image default win_size
constexpr double k_np = k_win * k_win;      // values per window
constexpr double k_cov_norm = k_np / (k_np - 1.0);  // use_sample_covariance=True

/** One row of a plane as Acc values. */
template <typename Acc>
void load_row_as(const const_sample_view& v, u64 n, u64 c, u64 r, Acc* out) {
  auto run = [&](auto* base) {
    const auto* p = base + static_cast<i64>(n) * v.stride_sample +
                    static_cast<i64>(c) * v.stride_plane + static_cast<i64>(r) * v.stride_row;
    for (u64 x = 0; x < v.width; ++x) out[x] = static_cast<Acc>(p[static_cast<i64>(x) * v.stride_col]);
  };
  switch (v.type) {
    case dtype::u8: return run(static_cast<const std::uint8_t*>(v.data));
    case dtype::u16: return run(static_cast<const std::uint16_t*>(v.data));
    case dtype::i16: return run(static_cast<const std::int16_t*>(v.data));
    case dtype::f32: return run(static_cast<const float*>(v.data));
    case dtype::f64: return run(static_cast<const double*>(v.data));
  }
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

struct error_stats {
  double sse = 0, max_abs = 0, mn = 0, mx = 0;
};

/** Squared error, max abs error and the original's range over `count` contiguous values.
 *  Integer types sum exactly in 64-bit integers (vectorised, exact); floats in eight double
 *  lanes (a fixed summation order). */
template <typename T>
error_stats contiguous_stats(const T* a, const T* b, u64 count) {
  error_stats st;
  if (count == 0) return st;
  if constexpr (std::is_integral_v<T>) {
    std::int64_t mx_abs = 0;
    T lo = a[0], hi = a[0];
    // d*d < 2^32, so 2^20 of them stay below 2^52: exact in int64 and then in double.
    for (u64 start = 0; start < count; start += (u64(1) << 20)) {
      const u64 end = std::min<u64>(count, start + (u64(1) << 20));
      std::int64_t sse = 0;
      for (u64 i = start; i < end; ++i) {
        const std::int64_t d = std::int64_t(a[i]) - std::int64_t(b[i]);
        sse += d * d;
        const std::int64_t ad = d < 0 ? -d : d;
        mx_abs = ad > mx_abs ? ad : mx_abs;
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
      }
      st.sse += static_cast<double>(sse);
    }
    st.max_abs = static_cast<double>(mx_abs);
    st.mn = static_cast<double>(lo);
    st.mx = static_cast<double>(hi);
  } else {
    double l_sse[8] = {}, l_max[8] = {}, l_mn[8], l_mx[8];
    for (int j = 0; j < 8; ++j) l_mn[j] = l_mx[j] = static_cast<double>(a[0]);
    u64 i = 0;
    for (; i + 8 <= count; i += 8) {
      for (int j = 0; j < 8; ++j) {
        const double o = static_cast<double>(a[i + j]);
        const double d = o - static_cast<double>(b[i + j]);
        l_sse[j] += d * d;
        l_max[j] = std::max(l_max[j], std::fabs(d));
        l_mn[j] = std::min(l_mn[j], o);
        l_mx[j] = std::max(l_mx[j], o);
      }
    }
    for (; i < count; ++i) {
      const double o = static_cast<double>(a[i]), d = o - static_cast<double>(b[i]);
      l_sse[0] += d * d;
      l_max[0] = std::max(l_max[0], std::fabs(d));
      l_mn[0] = std::min(l_mn[0], o);
      l_mx[0] = std::max(l_mx[0], o);
    }
    st.mn = l_mn[0];
    st.mx = l_mx[0];
    for (int j = 0; j < 8; ++j) {
      st.sse += l_sse[j];
      st.max_abs = std::max(st.max_abs, l_max[j]);
      st.mn = std::min(st.mn, l_mn[j]);
      st.mx = std::max(st.mx, l_mx[j]);
    }
  }
  return st;
}

error_stats sample_stats(const const_sample_view& a, const const_sample_view& b, u64 n) {
  const u64 count = a.planes * a.height * a.width;
  const i64 off = static_cast<i64>(n) * a.stride_sample;
  switch (a.type) {
    case dtype::u8:
      return contiguous_stats(static_cast<const std::uint8_t*>(a.data) + off,
                              static_cast<const std::uint8_t*>(b.data) + off, count);
    case dtype::u16:
      return contiguous_stats(static_cast<const std::uint16_t*>(a.data) + off,
                              static_cast<const std::uint16_t*>(b.data) + off, count);
    case dtype::i16:
      return contiguous_stats(static_cast<const std::int16_t*>(a.data) + off,
                              static_cast<const std::int16_t*>(b.data) + off, count);
    case dtype::f32:
      return contiguous_stats(static_cast<const float*>(a.data) + off,
                              static_cast<const float*>(b.data) + off, count);
    case dtype::f64:
      return contiguous_stats(static_cast<const double*>(a.data) + off,
                              static_cast<const double*>(b.data) + off, count);
  }
  return {};
}

/** Slide the column sums of one plane down a row: remove the leaving row (when `full`), add
 *  the new one and keep it. A free function of plain pointers, so that it vectorises. */
template <typename Acc>
[[gnu::noinline]] void update_columns(Acc* __restrict sx, Acc* __restrict sy,
                                      Acc* __restrict sxx, Acc* __restrict syy,
                                      Acc* __restrict sxy, Acc* __restrict oa,
                                      Acc* __restrict ob, const Acc* __restrict a,
                                      const Acc* __restrict b, u64 w, bool full) {
  if (full) {
    for (u64 x = 0; x < w; ++x) {
      sx[x] -= oa[x];
      sy[x] -= ob[x];
      sxx[x] -= oa[x] * oa[x];
      syy[x] -= ob[x] * ob[x];
      sxy[x] -= oa[x] * ob[x];
    }
  }
  for (u64 x = 0; x < w; ++x) {
    sx[x] += a[x];
    sy[x] += b[x];
    sxx[x] += a[x] * a[x];
    syy[x] += b[x] * b[x];
    sxy[x] += a[x] * b[x];
    oa[x] = a[x];
    ob[x] = b[x];
  }
}

/** Sliding-window SSIM over a plane fed row by row: keeps the last 7 rows and the column sums
 *  of x, y, xx, yy, xy over them (memory O(7W)). Acc is the type of the sums: double, or
 *  float for u8 data, whose sums are integers below 2^24 and so exact in float (twice the
 *  values per vector, the same results). The window formula always runs in double. */
template <typename Acc>
class ssim_rows {
 public:
  ssim_rows(u64 w, double range) : w_(w) {
    c1_ = (0.01 * range) * (0.01 * range);
    c2_ = (0.03 * range) * (0.03 * range);
    ring_a_.assign(k_win * w, Acc(0));
    ring_b_.assign(k_win * w, Acc(0));
    for (auto* s : {&sx_, &sy_, &sxx_, &syy_, &sxy_}) s->assign(w, Acc(0));
    for (auto* s : {&bx_, &by_, &bxx_, &byy_, &bxy_}) s->assign(w, Acc(0));
  }
  /** Add the next row of both planes. */
  void push(const Acc* a, const Acc* b) {
    const u64 slot = rows_ % k_win;
    // Local restrict pointers: the compiler may then vectorise across x.
    Acc* __restrict oa = ring_a_.data() + slot * w_;
    Acc* __restrict ob = ring_b_.data() + slot * w_;
    Acc* __restrict sx = sx_.data();
    Acc* __restrict sy = sy_.data();
    Acc* __restrict sxx = sxx_.data();
    Acc* __restrict syy = syy_.data();
    Acc* __restrict sxy = sxy_.data();
    const Acc* __restrict pa = a;
    const Acc* __restrict pb = b;
    update_columns(sx, sy, sxx, syy, sxy, oa, ob, pa, pb, w_, rows_ >= k_win);
    ++rows_;
    if (rows_ >= k_win && w_ >= k_win) emit_row();
  }
  double sum() const { return sum_; }
  u64 windows() const { return windows_; }

 private:
  void emit_row() {
    // Box sums over 7 columns, written so that every loop vectorises (no running sums), then
    // the SSIM of each window, summed in 8 lanes (a fixed order: the same result every run).
    const u64 nw = w_ - k_win + 1;
    Acc* const box[5] = {bx_.data(), by_.data(), bxx_.data(), byy_.data(), bxy_.data()};
    const Acc* const col[5] = {sx_.data(), sy_.data(), sxx_.data(), syy_.data(), sxy_.data()};
    for (int s = 0; s < 5; ++s) {
      Acc* __restrict b = box[s];
      const Acc* __restrict c = col[s];
      for (u64 x = 0; x < nw; ++x) b[x] = c[x] + c[x + 1] + c[x + 2] + c[x + 3] + c[x + 4] + c[x + 5] + c[x + 6];
    }
    const Acc* __restrict bx = bx_.data();
    const Acc* __restrict by = by_.data();
    const Acc* __restrict bxx = bxx_.data();
    const Acc* __restrict byy = byy_.data();
    const Acc* __restrict bxy = bxy_.data();
    const double c1 = c1_, c2 = c2_;
    // Multiplying by 1/49 instead of dividing: five divisions per window were the bottleneck;
    // the results differ from division in the last bit only.
    constexpr double inv = 1.0 / k_np;
    auto window = [&](u64 x) {
      const double ux = double(bx[x]) * inv, uy = double(by[x]) * inv;
      const double vx = k_cov_norm * (double(bxx[x]) * inv - ux * ux);
      const double vy = k_cov_norm * (double(byy[x]) * inv - uy * uy);
      const double vxy = k_cov_norm * (double(bxy[x]) * inv - ux * uy);
      return ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2));
    };
    double lane[8] = {};
    u64 x = 0;
    for (; x + 8 <= nw; x += 8)
      for (int j = 0; j < 8; ++j) lane[j] += window(x + j);
    for (; x < nw; ++x) lane[0] += window(x);
    for (double v : lane) sum_ += v;
    windows_ += nw;
  }
  u64 w_;
  double c1_, c2_;
  u64 rows_ = 0;
  std::vector<Acc> ring_a_, ring_b_, sx_, sy_, sxx_, syy_, sxy_;
  std::vector<Acc> bx_, by_, bxx_, byy_, bxy_;  // box sums of the current window row
  double sum_ = 0;
  u64 windows_ = 0;
};

/** SSIM of plane c of sample n (at least 7x7), with sums in Acc. */
template <typename Acc>
double plane_ssim(const const_sample_view& a, const const_sample_view& b, u64 n, u64 c,
                  double range, std::vector<Acc>& ra, std::vector<Acc>& rb) {
  ssim_rows<Acc> ss(a.width, range);
  ra.resize(a.width);
  rb.resize(a.width);
  for (u64 r = 0; r < a.height; ++r) {
    load_row_as(a, n, c, r, ra.data());
    load_row_as(b, n, c, r, rb.data());
    ss.push(ra.data(), rb.data());
  }
  return ss.sum() / static_cast<double>(ss.windows());
}

using detail::resolve_threads;

}  // namespace

std::optional<double> integer_range(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return 255.0;
    case dtype::u16: return 65535.0;
    case dtype::i16: return 65535.0;
    default: return std::nullopt;
  }
}

std::optional<double> psnr(double range, double mse) {
  if (!(mse > 0.0) || !(range > 0.0)) return std::nullopt;
  return 20.0 * std::log10(range) - 10.0 * std::log10(mse);
}

std::optional<double> ssim_plane(const double* a, const double* b, u64 h, u64 w, double range) {
  if (h < static_cast<u64>(k_win) || w < static_cast<u64>(k_win)) return std::nullopt;
  ssim_rows<double> s(w, range);
  for (u64 r = 0; r < h; ++r) s.push(a + r * w, b + r * w);
  return s.sum() / static_cast<double>(s.windows());
}

void value_range::add(const const_sample_view& v) {
  std::vector<double> row(v.width);
  for (u64 n = 0; n < v.samples; ++n)
    for (u64 c = 0; c < v.planes; ++c)
      for (u64 r = 0; r < v.height; ++r) {
        load_row_as(v, n, c, r, row.data());
        for (double x : row) {
          if (empty) {
            min = max = x;
            empty = false;
          }
          min = std::min(min, x);
          max = std::max(max, x);
        }
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

quality_accumulator::quality_accumulator(dtype type, std::optional<double> range, bool ssim)
    : type_(type) {
  known_range_ = integer_range(type);
  if (!known_range_ && range) known_range_ = range;
  ssim_enabled_ = ssim && known_range_.has_value();
}

quality_batch quality_accumulator::measure(const const_sample_view& a,
                                           const const_sample_view& b, int threads) const {
  if (a.type != b.type || a.type != type_ || a.samples != b.samples || a.planes != b.planes ||
      a.height != b.height || a.width != b.width) {
    throw error(errc::internal, "quality_accumulator: views differ in shape or dtype");
  }
  [[maybe_unused]] const int nt = resolve_threads(threads);
  const i64 samples = static_cast<i64>(a.samples);
  const u64 per_sample = a.planes * a.height * a.width;
  const double range = known_range_.value_or(0.0);
  const bool do_ssim = ssim_enabled_ && range > 0;  // range 0: SSIM is 0/0, undefined
  const bool dense = dense_samples(a) && dense_samples(b);
  // One record per sample, filled in parallel; add(batch) sums them in sample order, so the
  // figures do not depend on the thread count or on how the data was split into batches.
  quality_batch batch;
  batch.values_per_sample = per_sample;
  batch.samples.resize(a.samples);
  auto& recs = batch.samples;
  DCTCHOP_OMP(omp parallel num_threads(nt) if (nt > 1 && samples > 1))
  {
    std::vector<double> ra(a.width), rb(a.width);
    std::vector<float> fa, fb;
    DCTCHOP_OMP(omp for schedule(dynamic, 1))
    for (i64 si = 0; si < samples; ++si) {
      const u64 n = static_cast<u64>(si);
      quality_batch::sample& rec = recs[n];
      rec.mn = std::numeric_limits<double>::infinity();
      rec.mx = -rec.mn;
      if (dense) {
        const error_stats st = sample_stats(a, b, n);
        rec.sse = st.sse;
        rec.max_abs = st.max_abs;
        rec.mn = st.mn;
        rec.mx = st.mx;
      }
      const bool want_ssim =
          do_ssim && a.height >= static_cast<u64>(k_win) && a.width >= static_cast<u64>(k_win);
      if (!dense) {  // a strided view: walk the rows
        for (u64 c = 0; c < a.planes; ++c)
          for (u64 r = 0; r < a.height; ++r) {
            load_row_as(a, n, c, r, ra.data());
            load_row_as(b, n, c, r, rb.data());
            for (u64 x = 0; x < a.width; ++x) {
              const double d = ra[x] - rb[x];
              rec.sse += d * d;
              rec.max_abs = std::max(rec.max_abs, std::fabs(d));
              rec.mn = std::min(rec.mn, ra[x]);
              rec.mx = std::max(rec.mx, ra[x]);
            }
          }
      }
      if (want_ssim) {
        for (u64 c = 0; c < a.planes; ++c) {
          rec.ssim_sum += a.type == dtype::u8 ? plane_ssim<float>(a, b, n, c, range, fa, fb)
                                              : plane_ssim<double>(a, b, n, c, range, ra, rb);
          ++rec.ssim_planes;
        }
      }
    }
  }
  return batch;
}

void quality_accumulator::add(const quality_batch& batch) {
  const u64 per_sample = batch.values_per_sample;
  for (const auto& rec : batch.samples) {
    min_ = values_ == 0 ? rec.mn : std::min(min_, rec.mn);
    max_ = values_ == 0 ? rec.mx : std::max(max_, rec.mx);
    values_ += per_sample;
    sse_ += rec.sse;
    max_abs_ = std::max(max_abs_, rec.max_abs);
    if (rec.sse > 0) {
      const double m = rec.sse / static_cast<double>(per_sample);
      max_sample_mse_ = std::max(max_sample_mse_, m);
      sum_log_sample_mse_ += std::log10(m);
      ++lossy_samples_;
    } else {
      ++lossless_;
    }
    ssim_sum_ += rec.ssim_sum;
    ssim_planes_ += rec.ssim_planes;
  }
  samples_ += batch.samples.size();
}

void quality_accumulator::add(const const_sample_view& a, const const_sample_view& b,
                              int threads) {
  add(measure(a, b, threads));
}

void quality_accumulator::merge(const quality_accumulator& o) {
  if (o.type_ != type_ || o.ssim_enabled_ != ssim_enabled_) {
    throw error(errc::internal, "quality_accumulator: merging different settings");
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
  quality q;
  q.samples = samples_;
  q.values = values_;
  q.mse = values_ ? sse_ / static_cast<double>(values_) : 0.0;
  q.rmse = std::sqrt(q.mse);
  q.max_abs_error = max_abs_;
  q.range = known_range_.value_or(values_ ? max_ - min_ : 0.0);
  q.nrmse = q.range > 0 ? q.rmse / q.range : 0.0;
  q.psnr_db = psnr(q.range, q.mse);
  q.psnr_undefined = q.mse > 0 && !(q.range > 0);
  if (lossy_samples_ > 0 && q.range > 0) {
    q.sample_psnr_min = psnr(q.range, max_sample_mse_);
    const double lr = q.range > 0 ? 20.0 * std::log10(q.range) : 0.0;
    q.sample_psnr_mean = lr - 10.0 * sum_log_sample_mse_ / static_cast<double>(lossy_samples_);
  }
  q.lossless_samples = lossless_;
  if (ssim_enabled_ && ssim_planes_ > 0 && q.range > 0) {
    q.ssim = ssim_sum_ / static_cast<double>(ssim_planes_);
  }
  q.ssim_planes = ssim_planes_;
  return q;
}

}  // namespace dctchop
