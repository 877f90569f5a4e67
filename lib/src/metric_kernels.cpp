// The quality measurements' inner loops, compiled once per instruction set (see
// metric_kernels.hpp); DCTCHOP_KERNEL_NS names the copy. Loops are written over plain
// restrict pointers with fixed summation orders, so that they vectorise and every copy gives
// the same figures.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "dctchop/detail/scalar.hpp"
#include "metric_kernels.hpp"
#include "ssim_window.hpp"

namespace dctchop::detail::DCTCHOP_KERNEL_NS {
namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

constexpr int k_win = ssim_window;

/** One row of a plane as T values, minus `shift`. */
template <typename T>
void load_row_as(const const_sample_view& v, u64 n, u64 c, u64 r, T* out, T shift = T(0)) {
  auto run = [&](auto* base) {
    const auto* p = base + static_cast<i64>(n) * v.stride_sample +
                    static_cast<i64>(c) * v.stride_plane + static_cast<i64>(r) * v.stride_row;
    const i64 sc = v.stride_col;
    if (sc == 1) {
      for (u64 x = 0; x < v.width; ++x) out[x] = static_cast<T>(p[x]) - shift;
    } else {
      for (u64 x = 0; x < v.width; ++x) out[x] = static_cast<T>(p[static_cast<i64>(x) * sc]) - shift;
    }
  };
  switch (v.type) {
    case dtype::u8: return run(static_cast<const std::uint8_t*>(v.data));
    case dtype::u16: return run(static_cast<const std::uint16_t*>(v.data));
    case dtype::i16: return run(static_cast<const std::int16_t*>(v.data));
    case dtype::f32: return run(static_cast<const float*>(v.data));
    case dtype::f64: return run(static_cast<const double*>(v.data));
    case dtype::f16: return run(static_cast<const half_value*>(v.data));
    case dtype::i8: return run(static_cast<const std::int8_t*>(v.data));
    case dtype::i32: return run(static_cast<const std::int32_t*>(v.data));
    case dtype::u32: return run(static_cast<const std::uint32_t*>(v.data));
  }
}

/** Where row r of plane c of sample n starts. */
template <typename T>
const T* row_of(const const_sample_view& v, u64 n, u64 c, u64 r) {
  return static_cast<const T*>(v.data) + static_cast<i64>(n) * v.stride_sample +
         static_cast<i64>(c) * v.stride_plane + static_cast<i64>(r) * v.stride_row;
}

/** Row r of planes c0 <= c < c1 of sample n of a u8 view, one plane after another
 *  ((c1 - c0) x width): an interleaved row is split in one pass. */
void split_row(const const_sample_view& v, u64 n, u64 r, u64 c0, u64 c1,
               std::uint8_t* __restrict out) {
  const u64 w = v.width, planes = v.planes;
  if (v.stride_plane == 1 && v.stride_col == static_cast<i64>(planes)) {  // interleaved
    const std::uint8_t* __restrict in = row_of<std::uint8_t>(v, n, 0, r);
    if (planes == 3 && c0 == 0 && c1 == 3) {  // RGB, the common case: a loop that unrolls
      for (u64 x = 0; x < w; ++x) {
        out[x] = in[3 * x];
        out[w + x] = in[3 * x + 1];
        out[2 * w + x] = in[3 * x + 2];
      }
      return;
    }
    for (u64 x = 0; x < w; ++x)
      for (u64 c = c0; c < c1; ++c) out[(c - c0) * w + x] = in[x * planes + c];
    return;
  }
  for (u64 c = c0; c < c1; ++c) load_row_as(v, n, c, r, out + (c - c0) * w);
}

/** Squared error, max abs error and the original's range over `count` contiguous values.
 *  8- and 16-bit integer types sum exactly in integers; floats and 32-bit integers (whose
 *  squared differences reach 2^64) in eight double lanes in runs of float_sum_run values (a
 *  fixed summation order, which the CUDA backend's measure keeps: quality_grid.hpp). */
template <typename T>
error_stats contiguous_stats(const T* __restrict a, const T* __restrict b, u64 count) {
  error_stats st;
  if (count == 0) return st;
  if constexpr (std::is_integral_v<T> && sizeof(T) <= 2) {
    // u8: d*d <= 255^2, so 2^15 of them stay below 2^31 and sum in 32-bit lanes. 16-bit
    // types: d*d < 2^32, so 2^20 of them stay below 2^52, exact in int64 and then in double.
    using acc = std::conditional_t<sizeof(T) == 1, std::int32_t, std::int64_t>;
    constexpr u64 run = sizeof(T) == 1 ? (u64(1) << 15) : (u64(1) << 20);
    acc mx_abs = 0;
    T lo = a[0], hi = a[0];
    for (u64 start = 0; start < count; start += run) {
      const u64 end = std::min<u64>(count, start + run);
      acc sse = 0;
      for (u64 i = start; i < end; ++i) {
        const acc d = acc(a[i]) - acc(b[i]);
        sse += d * d;
        const acc ad = d < 0 ? -d : d;
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
    // Eight double lanes, lane j taking values j, j + 8, ... in runs of float_sum_run values:
    // a run's squared errors from 0 in each lane, the lanes added in order, then the runs in
    // order (the last count % 8 values on lane 0 of the last run, after its own). The
    // extremes' lanes go on across the runs.
    double l_max[8] = {}, l_mn[8], l_mx[8];
    for (int j = 0; j < 8; ++j) l_mn[j] = l_mx[j] = static_cast<double>(a[0]);
    for (u64 start = 0; start < count; start += float_sum_run) {
      const u64 end = std::min<u64>(count, start + float_sum_run);
      double l_sse[8] = {};
      u64 i = start;
#if defined(__AVX2__)
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, half_value> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::uint32_t>) {
        // The loop below in intrinsics (GCC does not vectorise it): the same eight lanes and
        // the same operations in the same order, so the same figures as the baseline copy.
        // max and min take their operands swapped: maxpd(x, l) returns l when either is NaN
        // or both are equal, as std::max(l, x) does.
        __m256d sse[2], mx_abs[2], mn[2], mx[2];
        for (int h = 0; h < 2; ++h) {
          sse[h] = _mm256_setzero_pd();
          mx_abs[h] = _mm256_loadu_pd(l_max + 4 * h);
          mn[h] = _mm256_loadu_pd(l_mn + 4 * h);
          mx[h] = _mm256_loadu_pd(l_mx + 4 * h);
        }
        const __m256d sign = _mm256_set1_pd(-0.0);
        auto load4 = [](const T* p) {
          if constexpr (std::is_same_v<T, float>) return _mm256_cvtps_pd(_mm_loadu_ps(p));
          else if constexpr (std::is_same_v<T, half_value>)
            return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
          else if constexpr (std::is_same_v<T, std::int32_t>)
            return _mm256_cvtepi32_pd(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
          else if constexpr (std::is_same_v<T, std::uint32_t>) {
            // As int32, then 2^32 added back where the top bit made it negative: exact.
            const __m256d s = _mm256_cvtepi32_pd(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
            const __m256d neg = _mm256_cmp_pd(s, _mm256_setzero_pd(), _CMP_LT_OQ);
            return _mm256_add_pd(s, _mm256_and_pd(neg, _mm256_set1_pd(4294967296.0)));
          }
          else return _mm256_loadu_pd(p);
        };
        for (; i + 8 <= end; i += 8) {
          for (int h = 0; h < 2; ++h) {
            const __m256d o = load4(a + i + 4 * h);
            const __m256d d = _mm256_sub_pd(o, load4(b + i + 4 * h));
            sse[h] = _mm256_add_pd(sse[h], _mm256_mul_pd(d, d));
            mx_abs[h] = _mm256_max_pd(_mm256_andnot_pd(sign, d), mx_abs[h]);
            mn[h] = _mm256_min_pd(o, mn[h]);
            mx[h] = _mm256_max_pd(o, mx[h]);
          }
        }
        for (int h = 0; h < 2; ++h) {
          _mm256_storeu_pd(l_sse + 4 * h, sse[h]);
          _mm256_storeu_pd(l_max + 4 * h, mx_abs[h]);
          _mm256_storeu_pd(l_mn + 4 * h, mn[h]);
          _mm256_storeu_pd(l_mx + 4 * h, mx[h]);
        }
      }
#endif
      for (; i + 8 <= end; i += 8) {
        for (int j = 0; j < 8; ++j) {
          const double o = static_cast<double>(a[i + j]);
          const double d = o - static_cast<double>(b[i + j]);
          l_sse[j] += d * d;
          l_max[j] = std::max(l_max[j], std::fabs(d));
          l_mn[j] = std::min(l_mn[j], o);
          l_mx[j] = std::max(l_mx[j], o);
        }
      }
      for (; i < end; ++i) {
        const double o = static_cast<double>(a[i]), d = o - static_cast<double>(b[i]);
        l_sse[0] += d * d;
        l_max[0] = std::max(l_max[0], std::fabs(d));
        l_mn[0] = std::min(l_mn[0], o);
        l_mx[0] = std::max(l_mx[0], o);
      }
      double run = 0;
      for (int j = 0; j < 8; ++j) run += l_sse[j];
      st.sse += run;
    }
    st.mn = l_mn[0];
    st.mx = l_mx[0];
    for (int j = 0; j < 8; ++j) {
      st.max_abs = std::max(st.max_abs, l_max[j]);
      st.mn = std::min(st.mn, l_mn[j]);
      st.mx = std::max(st.mx, l_mx[j]);
    }
  }
  return st;
}

/** Adds `n` values to eight lanes, lane j taking values j, j + 8, ... and lane 0 the last
 *  n % 8 after its own: a fixed order, whatever the vector width. Lanes that go on from an
 *  earlier call of a multiple of 8 values add as one call over both would. */
void lane_add(const double* __restrict v, u64 n, double* __restrict lane) {
  u64 x = 0;
  for (; x + 8 <= n; x += 8)
    for (int j = 0; j < 8; ++j) lane[j] += v[x + j];
  for (; x < n; ++x) lane[0] += v[x];
}

/** The eight lanes' sum, in order. */
double lanes_total(const double* lane) {
  double s = 0;
  for (int j = 0; j < 8; ++j) s += lane[j];
  return s;
}

/** The sum of `n` values in eight lanes, then the lanes in order. */
double lane_sum(const double* __restrict v, u64 n) {
  double lane[8] = {};
  lane_add(v, n, lane);
  return lanes_total(lane);
}

/** Box sums over 7 neighbours, written without running sums so that the loop vectorises. */
template <typename T>
void box7(const T* __restrict c, T* __restrict out, u64 n) {
  for (u64 x = 0; x < n; ++x)
    out[x] = static_cast<T>(c[x] + c[x + 1] + c[x + 2] + c[x + 3] + c[x + 4] + c[x + 5] + c[x + 6]);
}

/** Sliding-window SSIM over a plane fed row by row: keeps the last 7 rows (values of type V)
 *  and, per column, the sums over them of x and y (type S) and of xx + yy and xy (type Q);
 *  memory O(7W). The formula needs the two variances only as their sum, so xx and yy are
 *  summed together. F::window(Sx, Sy, Sxx + Syy, Sxy) gives one window's SSIM from its sums
 *  over 7x7 values.
 *
 *  Every array is padded with zero columns to a multiple of 16, so that each loop runs in
 *  whole vectors: with rows of 28 or 32 values, scalar tails took most of the time. A row is
 *  copied into a free slot of the ring first (the input may not be read past its width); the
 *  padded columns stay zero, and the windows they touch are computed but never summed. The
 *  rows are taken one push late: the vector loads of a row just copied in pieces would wait
 *  for those stores to complete. */
template <typename V, typename S, typename Q, typename F>
class ssim_rows {
  /** The ring: the 7 rows of the window, the row being taken, the row copied after it. */
  static constexpr u64 k_slots = ssim_ring_rows;

 public:
  ssim_rows(u64 w, F f) : w_(w), wp_(ssim_padded_width(w)), f_(f) {
    ring_a_.assign(k_slots * wp_, V(0));
    ring_b_.assign(k_slots * wp_, V(0));
    for (auto* s : {&sx_, &sy_, &bx_, &by_}) s->assign(ssim_sum_width(w), S(0));
    for (auto* s : {&sq_, &sxy_, &bq_, &bxy_}) s->assign(ssim_sum_width(w), Q(0));
    ssim_.assign(wp_, 0.0);
  }
  /** Add the next row of both planes (w values each, contiguous). */
  void push(const V* a, const V* b) {
    std::copy(a, a + w_, next_a());
    std::copy(b, b + w_, next_b());
    commit();
  }
  /** Where the next row's w values go, for a caller that writes them in place of push. */
  V* next_a() { return ring_a_.data() + (copied_ % k_slots) * wp_; }
  V* next_b() { return ring_b_.data() + (copied_ % k_slots) * wp_; }
  /** Take the row written at next_a() and next_b() (into the sums at the next commit). */
  void commit() {
    if (copied_ > rows_) take();
    ++copied_;
  }
  /** The mean SSIM of the windows, once every row has been pushed or committed. */
  double mean() {
    finish();
    return sum_ / static_cast<double>(windows_);
  }
  /** Instead of summing each row of windows, add it to that row's eight lanes at
   *  `lanes` + 8 * (its row): a plane measured in column tiles (tiled_mean). */
  void add_rows_to(double* lanes) { lanes_ = lanes; }
  /** Take the last row in. */
  void finish() {
    if (copied_ > rows_) take();
  }

 private:
  /** Add row `rows_` to the sums: slot (rows % 9) holds it, slot ((rows + 2) % 9) the row 7
   *  back, which leaves the window (zero while the ring fills: removing it removes nothing). */
  void take() {
    const u64 at = (rows_ % k_slots) * wp_, old = ((rows_ + 2) % k_slots) * wp_;
    slide(ring_a_.data() + at, ring_b_.data() + at, ring_a_.data() + old, ring_b_.data() + old);
    ++rows_;
    if (rows_ >= k_win && w_ >= k_win) emit_row();
  }

  /** Move the column sums down a row: add row (a, b), remove the leaving row (oa, ob). */
  void slide(const V* __restrict a, const V* __restrict b, const V* __restrict oa,
             const V* __restrict ob) {
    S* __restrict sx = sx_.data();
    S* __restrict sy = sy_.data();
    const u64 n = wp_;
    for (u64 x = 0; x < n; ++x) {
      sx[x] = static_cast<S>(sx[x] + (S(a[x]) - S(oa[x])));
      sy[x] = static_cast<S>(sy[x] + (S(b[x]) - S(ob[x])));
    }
    Q* __restrict sq = sq_.data();
    Q* __restrict sxy = sxy_.data();
    for (u64 x = 0; x < n; ++x) {
      const Q va = a[x], vb = b[x], wa = oa[x], wb = ob[x];
      sq[x] += (va * va + vb * vb) - (wa * wa + wb * wb);
      sxy[x] += va * vb - wa * wb;
    }
  }
  void emit_row() {
    const u64 nw = w_ - k_win + 1;
    const u64 np = ssim_padded_width(nw);  // <= wp_: whole vectors, reading at most wp_ + 6
    box7(sx_.data(), bx_.data(), np);
    box7(sy_.data(), by_.data(), np);
    box7(sq_.data(), bq_.data(), np);
    box7(sxy_.data(), bxy_.data(), np);
    const S* __restrict bx = bx_.data();
    const S* __restrict by = by_.data();
    const Q* __restrict bq = bq_.data();
    const Q* __restrict bxy = bxy_.data();
    double* __restrict s = ssim_.data();
    const F f = f_;
    // The formula, the costly part, in whole vectors of 8 only (4 doubles, unrolled twice)
    const u64 nf = (nw + 7) / 8 * 8;
    for (u64 x = 0; x < nf; ++x) s[x] = f.window(bx[x], by[x], bq[x], bxy[x]);
    if (lanes_ != nullptr) lane_add(s, nw, lanes_ + 8 * (rows_ - k_win));
    else sum_ += lane_sum(s, nw);  // the windows inside the plane only
    windows_ += nw;
  }
  u64 w_, wp_;
  F f_;
  u64 rows_ = 0, copied_ = 0;           // rows taken into the sums, rows copied in
  std::vector<V> ring_a_, ring_b_;
  std::vector<S> sx_, sy_, bx_, by_;     // column sums and the current window row's sums
  std::vector<Q> sq_, sxy_, bq_, bxy_;  // of x, y, xx + yy, xy
  std::vector<double> ssim_;
  double sum_ = 0;
  u64 windows_ = 0;
  double* lanes_ = nullptr;
};

/** Windows of a row that one pass of ssim_rows takes at most: a wider plane is measured in
 *  column tiles of this many windows (and the 6 columns more that their last ones reach), so
 *  that the state stays some 2 MiB whatever the width (a plane of 8 x 4M f32 values took
 *  900 MiB a thread). A multiple of the 8 lanes: a row's lanes go on from tile to tile, so
 *  that the figures are those of one pass, bit for bit (the CUDA backend's too). */
constexpr u64 ssim_tile_windows = 8192;
static_assert(ssim_tile_windows % 8 == 0);

/** The mean SSIM of an h x w plane (at least 7 x 7): `make(n)` makes the ssim_rows for rows of
 *  n values and `feed(r, x0, n, rows)` gives it row r's columns x0 <= x < x0 + n. */
template <typename Make, typename Feed>
double tiled_mean(u64 h, u64 w, Make make, Feed feed) {
  if (h < k_win || w < k_win || w - k_win + 1 <= ssim_tile_windows) {
    auto rows = make(w);
    for (u64 r = 0; r < h; ++r) feed(r, u64(0), w, rows);
    return rows.mean();
  }
  const u64 row_windows = w - k_win + 1, window_rows = h - k_win + 1;
  std::vector<double> lanes(8 * window_rows, 0.0);
  for (u64 x0 = 0; x0 < row_windows; x0 += ssim_tile_windows) {
    const u64 n = std::min(ssim_tile_windows, row_windows - x0) + k_win - 1;
    auto rows = make(n);
    rows.add_rows_to(lanes.data());
    for (u64 r = 0; r < h; ++r) feed(r, x0, n, rows);
    rows.finish();
  }
  double sum = 0;  // the rows in order, each its lanes in order: as one pass sums them
  for (u64 r = 0; r < window_rows; ++r) sum += lanes_total(lanes.data() + 8 * r);
  return sum / static_cast<double>(row_windows * window_rows);
}

/** Columns x0 <= x < x0 + n of a view. */
const_sample_view columns(const const_sample_view& v, u64 x0, u64 n) {
  const_sample_view c = v;
  c.data = static_cast<const unsigned char*>(v.data) +
           static_cast<i64>(x0) * v.stride_col * static_cast<i64>(size_of(v.type));
  c.width = n;
  return c;
}

/** The first value of plane c of sample n, as a double. */
double row_value(const const_sample_view& v, u64 n, u64 c) {
  double x = 0;
  const_sample_view one = v;
  one.width = 1;
  load_row_as(one, n, c, 0, &x);
  return x;
}

/** The shift for a plane whose first value is v: v itself, or 0 for NaN and infinities (the
 *  SSIM of such a plane is not a number either way, but a shift must not spread it). */
double shift_of(double v) { return std::isfinite(v) ? v : 0.0; }

/** dst[x] = src[x] - shift for n values. */
void copy_shifted(const double* __restrict src, u64 n, double shift, double* __restrict dst) {
  for (u64 x = 0; x < n; ++x) dst[x] = src[x] - shift;
}

using ssim_rows_f64 = ssim_rows<double, double, double, float_window>;
using ssim_rows_u8 = ssim_rows<std::uint8_t, std::int16_t, std::int32_t, u8_window>;

template <typename T>
error_stats stats_of(const const_sample_view& a, const const_sample_view& b, u64 n) {
  const i64 off = static_cast<i64>(n) * a.stride_sample;
  return contiguous_stats(static_cast<const T*>(a.data) + off, static_cast<const T*>(b.data) + off,
                          a.planes * a.height * a.width);
}

}  // namespace

error_stats sample_stats(const const_sample_view& a, const const_sample_view& b, u64 n) {
  switch (a.type) {
    case dtype::u8: return stats_of<std::uint8_t>(a, b, n);
    case dtype::u16: return stats_of<std::uint16_t>(a, b, n);
    case dtype::i16: return stats_of<std::int16_t>(a, b, n);
    case dtype::f32: return stats_of<float>(a, b, n);
    case dtype::f64: return stats_of<double>(a, b, n);
    case dtype::f16: return stats_of<half_value>(a, b, n);
    case dtype::i8: return stats_of<std::int8_t>(a, b, n);
    case dtype::i32: return stats_of<std::int32_t>(a, b, n);
    case dtype::u32: return stats_of<std::uint32_t>(a, b, n);
  }
  return {};
}

double sample_ssim(const const_sample_view& a, const const_sample_view& b, u64 n, double range) {
  const u64 w = a.width, planes = a.planes;
  if (planes == 0) return 0.0;
  double sum = 0;
  if (a.type == dtype::u8) {
    const u64 per_plane = u8_ssim_plane_bytes(w);  // ssim_rows_u8's arrays
    const u64 group = std::clamp<u64>(u8_ssim_group_bytes / per_plane, 1, planes);
    const bool contiguous = a.stride_col == 1 && b.stride_col == 1;
    if (group == 1) {  // a plane at a time, in column tiles where it is wide
      for (u64 c = 0; c < planes; ++c) {
        sum += tiled_mean(
            a.height, w, [&](u64 cols) { return ssim_rows_u8(cols, u8_window(range)); },
            [&](u64 r, u64 x0, u64 cols, ssim_rows_u8& rows) {
              if (contiguous) {  // used where it lies
                rows.push(row_of<std::uint8_t>(a, n, c, r) + x0,
                          row_of<std::uint8_t>(b, n, c, r) + x0);
                return;
              }
              load_row_as(columns(a, x0, cols), n, c, r, rows.next_a());
              load_row_as(columns(b, x0, cols), n, c, r, rows.next_b());
              rows.commit();
            });
      }
      return sum;
    }
    // Narrow planes, row by row, a group of planes at once: an interleaved row is split into
    // the group's planes in one pass, and a plane's row is used where it lies when its values
    // are contiguous. A group's running sums stay within u8_ssim_group_bytes.
    std::vector<std::uint8_t> ra(contiguous ? 0 : group * w), rb(ra.size());
    for (u64 c0 = 0; c0 < planes; c0 += group) {
      const u64 c1 = std::min(planes, c0 + group);
      std::vector<ssim_rows_u8> ss;
      ss.reserve(c1 - c0);
      for (u64 c = c0; c < c1; ++c) ss.emplace_back(w, u8_window(range));
      for (u64 r = 0; r < a.height; ++r) {
        if (contiguous) {
          for (u64 c = c0; c < c1; ++c)
            ss[c - c0].push(row_of<std::uint8_t>(a, n, c, r), row_of<std::uint8_t>(b, n, c, r));
        } else {
          split_row(a, n, r, c0, c1, ra.data());
          split_row(b, n, r, c0, c1, rb.data());
          for (u64 c = c0; c < c1; ++c)
            ss[c - c0].push(ra.data() + (c - c0) * w, rb.data() + (c - c0) * w);
        }
      }
      for (auto& s : ss) sum += s.mean();  // in plane order, as one group would
    }
    return sum;
  }
  for (u64 c = 0; c < planes; ++c) {
    const double shift = a.height > 0 && w > 0 ? shift_of(row_value(a, n, c)) : 0.0;
    sum += tiled_mean(
        a.height, w, [&](u64 cols) { return ssim_rows_f64(cols, float_window(range, shift)); },
        [&](u64 r, u64 x0, u64 cols, ssim_rows_f64& rows) {
          load_row_as(columns(a, x0, cols), n, c, r, rows.next_a(), shift);
          load_row_as(columns(b, x0, cols), n, c, r, rows.next_b(), shift);
          rows.commit();
        });
  }
  return sum;
}

void load_row(const const_sample_view& v, u64 n, u64 c, u64 r, double* out) {
  load_row_as(v, n, c, r, out);
}

double dense_ssim(const double* a, const double* b, u64 h, u64 w, double range) {
  const double shift = h > 0 && w > 0 ? shift_of(a[0]) : 0.0;
  return tiled_mean(
      h, w, [&](u64 cols) { return ssim_rows_f64(cols, float_window(range, shift)); },
      [&](u64 r, u64 x0, u64 cols, ssim_rows_f64& rows) {
        copy_shifted(a + r * w + x0, cols, shift, rows.next_a());
        copy_shifted(b + r * w + x0, cols, shift, rows.next_b());
        rows.commit();
      });
}

}  // namespace dctchop::detail::DCTCHOP_KERNEL_NS
