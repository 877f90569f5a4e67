// Internal: the CUDA backend's quality measure (cuda_measure.cu), what each thread computes,
// as host-and-device functions. measure_on_host() runs every thread of the same grids on the
// CPU, phase after phase, so that the tests compare it with quality_accumulator::measure
// without a GPU.
//
// The figures are the CPU's (metric_kernels.cpp) bit for bit: whatever the CPU rounds, this
// rounds in the CPU's order, with the same operations (the window formula is one function
// for both, ssim_window.hpp; no multiply-add contraction on either side).
// - 8- and 16-bit integers (exact_sums): every sum of integers the CPU takes is exact in any
//   order, so the device sums them as it likes: a sample's squared errors in runs of 2^15
//   (8-bit) or 2^20 (16-bit) values, a CTA a run; an SSIM window's sums over its 7x7 values.
//   What rounds, the runs' sum in double and each window's formula, goes in the CPU's order.
// - The rest (f16, f32, f64, i32, u32): the CPU sums in double, so the order is everything.
//   A sample's squared errors: in runs of float_sum_run values, each in eight lanes, lane j
//   taking values j, j + 8, ... of the run in order (the last count % 8 of the sample on
//   lane 0 of the last run, after its own); the lanes in order, then the runs in order: a
//   thread a lane of a run. SSIM:
//   the CPU slides each column's sums down the plane, adding the new row and taking away the
//   row 7 above: a thread a column does the same, down the whole plane, and leaves each
//   window row's column sums in device memory for the window kernel.
// - Both: a window row's SSIM values summed in eight lanes in the CPU's order, then the rows,
//   then the planes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/detail/scalar.hpp"  // DCTCHOP_HD
#include "dctchop/metrics.hpp"
#include "dctchop/types.hpp"
#include "metric_kernels.hpp"  // float_sum_run
#include "ssim_window.hpp"

namespace dctchop::detail {

/** Whether the CPU's sums over data of type t are exact (8- and 16-bit integers). */
constexpr bool exact_sums(dtype t) {
  return t == dtype::u8 || t == dtype::i8 || t == dtype::u16 || t == dtype::i16;
}
template <typename T>
constexpr bool exact_sums_of = std::is_integral_v<T> && sizeof(T) <= 2;

/** A batch to measure: its shape, where a value lies (in elements), and what to compute.
 *  Every sample's values are one contiguous run (planar or interleaved). */
struct measure_plan {
  std::uint64_t samples, planes, h, w;
  std::int64_t stride_sample, stride_plane, stride_row, stride_col;
  std::uint64_t values;   // a sample's: planes * h * w
  bool exact;             // exact_sums of the type
  std::uint64_t run;      // values a partial sum of squared errors takes: the CPU's runs
  std::uint64_t runs;     // runs a sample
  bool ssim_counted;      // planes of at least 7x7 whose SSIM was asked for (batch.ssim_planes)
  bool ssim;              // ... and measured: the range R is above 0
  std::uint64_t rows;     // window rows a plane, h - 6 (when ssim)
  std::uint64_t windows;  // windows a row, w - 6 (when ssim)
  double range;           // R of the SSIM formula
};

/** The plan of a batch `v` (dense samples) for an accumulator that computes SSIM (`ssim`:
 *  quality_accumulator::computes_ssim) at range `range` (its known range). */
inline measure_plan measure_plan_of(const const_sample_view& v, bool ssim, double range) {
  measure_plan m{};
  m.samples = v.samples;
  m.planes = v.planes;
  m.h = v.height;
  m.w = v.width;
  m.stride_sample = v.stride_sample;
  m.stride_plane = v.stride_plane;
  m.stride_row = v.stride_row;
  m.stride_col = v.stride_col;
  m.values = v.planes * v.height * v.width;
  m.exact = exact_sums(v.type);
  m.run = !m.exact ? float_sum_run
                    : size_of(v.type) == 1 ? std::uint64_t(1) << 15 : std::uint64_t(1) << 20;
  m.runs = (m.values + m.run - 1) / m.run;
  m.ssim_counted = ssim && v.height >= ssim_window && v.width >= ssim_window;
  m.ssim = m.ssim_counted && range > 0;
  m.rows = m.ssim ? v.height - (ssim_window - 1) : 0;
  m.windows = m.ssim ? v.width - (ssim_window - 1) : 0;
  m.range = range;
  return m;
}

/** Threads a CTA of the measure's kernels, and windows a tile of a row (a multiple of 8, so
 *  that a tile's windows start on lane 0). */
constexpr unsigned measure_threads = 256;
constexpr unsigned ssim_tile = 256;
/** The CPU's lanes: of a sample's squared errors (floats), of a window row's SSIM values. */
constexpr unsigned sum_lanes = 8;

/** The doubles a sample's figures take on the way back: squared error, SSIM sum (of the
 *  planes' means). Its extremes are merged into one for the batch. */
constexpr unsigned measure_outputs = 2;

/** Max abs error and the original's least and greatest value. */
struct extremes {
  double max_abs, mn, mx;
};
DCTCHOP_HD extremes no_extremes() {
  return {0.0, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
}
/** Merged with std::max and std::min, as the CPU merges them (the first operand kept unless
 *  the second is greater, or less: a NaN second operand never replaces it). */
DCTCHOP_HD extremes merge_extremes(const extremes& a, const extremes& b) {
  return {std::max(a.max_abs, b.max_abs), std::min(a.mn, b.mn), std::max(a.mx, b.mx)};
}

/** A value as the CPU reads it (f16 through float). */
template <typename T>
DCTCHOP_HD double as_double(T v) {
  if constexpr (std::is_same_v<T, half_value>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// ---- a sample's squared error and extremes ---------------------------------------------------

/** (exact) A run's, or a thread's part of a run's, statistics. */
struct run_stats {
  std::int64_t sse;
  std::int32_t max_abs, lo, hi;
};
DCTCHOP_HD run_stats no_stats() {
  return {0, 0, std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min()};
}
DCTCHOP_HD run_stats merge_stats(const run_stats& a, const run_stats& b) {
  return {a.sse + b.sse, a.max_abs > b.max_abs ? a.max_abs : b.max_abs, a.lo < b.lo ? a.lo : b.lo,
          a.hi > b.hi ? a.hi : b.hi};
}

/** (exact) Thread t of nt's part of run `run` of sample `s`: values run * m.run + t, + nt, ...
 *  of the run, in memory order. Integers, so the parts merge to the same run in any order. */
template <typename T>
DCTCHOP_HD run_stats stats_thread(const measure_plan& m, const T* a, const T* b, std::uint64_t s,
                                  std::uint64_t run, unsigned t, unsigned nt) {
  const std::uint64_t begin = run * m.run;
  const std::uint64_t end = begin + m.run < m.values ? begin + m.run : m.values;
  const T* pa = a + static_cast<std::int64_t>(s) * m.stride_sample;
  const T* pb = b + static_cast<std::int64_t>(s) * m.stride_sample;
  run_stats r = no_stats();
  for (std::uint64_t i = begin + t; i < end; i += nt) {
    const std::int32_t x = pa[i], d = x - std::int32_t(pb[i]);
    r.sse += std::int64_t(d) * d;
    const std::int32_t ad = d < 0 ? -d : d;
    r.max_abs = ad > r.max_abs ? ad : r.max_abs;
    r.lo = x < r.lo ? x : r.lo;
    r.hi = x > r.hi ? x : r.hi;
  }
  return r;
}

/** (floats) Lane j of a run of a sample's sums, as the CPU's contiguous_stats keeps it. */
struct lane_stats {
  double sse, max_abs, mn, mx;
};

/** (floats) Threads of the lane grid: a lane of a run of each sample. */
DCTCHOP_HD std::uint64_t lane_threads(const measure_plan& m) {
  return m.samples * m.runs * sum_lanes;
}

/** (floats) Thread i of the lane grid: lane j = i % 8 of run `run` = i / 8 % runs of sample
 *  s = i / 8 / runs. The run's values j, j + 8, ... below the sample's last multiple of 8,
 *  in order, and for lane 0 of the last run the rest after them (the runs are multiples of 8
 *  long); the squared errors from 0, and every lane's least and greatest from the sample's
 *  first value (merge_lanes takes each lane's over the runs in order, which gives what the
 *  CPU's lane, carried across the runs, gives). */
template <typename T>
DCTCHOP_HD lane_stats lane_thread(const measure_plan& m, const T* a, const T* b, std::uint64_t i) {
  const auto j = static_cast<unsigned>(i % sum_lanes);
  const std::uint64_t run = i / sum_lanes % m.runs, s = i / sum_lanes / m.runs;
  const T* pa = a + static_cast<std::int64_t>(s) * m.stride_sample;
  const T* pb = b + static_cast<std::int64_t>(s) * m.stride_sample;
  const double first = as_double(pa[0]);
  lane_stats l{0.0, 0.0, first, first};
  const auto take = [&](std::uint64_t i) {
    const double o = as_double(pa[i]);
    const double d = o - as_double(pb[i]);
    l.sse += d * d;
    l.max_abs = std::max(l.max_abs, std::fabs(d));
    l.mn = std::min(l.mn, o);
    l.mx = std::max(l.mx, o);
  };
  const std::uint64_t whole = m.values / sum_lanes * sum_lanes;
  const std::uint64_t begin = run * m.run;
  const std::uint64_t end = begin + m.run < whole ? begin + m.run : whole;
  // (unrolled on the device, so that a thread has several loads in flight; the additions
  // stay in order)
#if defined(__CUDA_ARCH__)
#pragma unroll 4
#endif
  for (std::uint64_t i = begin + j; i < end; i += sum_lanes) take(i);
  if (j == 0 && run + 1 == m.runs) {
    for (std::uint64_t i = whole; i < m.values; ++i) take(i);
  }
  return l;
}

/** (floats) The sample's squared error and extremes from the 8 lanes of each of its `runs`
 *  runs (l[run * 8 + j]), in the CPU's order: each run's lanes in order, then the runs in
 *  order; each lane's extremes over the runs in order, then the lanes in order. */
DCTCHOP_HD extremes merge_lanes(const lane_stats* l, std::uint64_t runs, double& sse) {
  lane_stats lane[sum_lanes] = {};  // (a sample has a value at least: runs >= 1)
  sse = 0;
  for (std::uint64_t r = 0; r < runs; ++r) {
    const lane_stats* lr = l + r * sum_lanes;
    double run = 0;
    for (unsigned j = 0; j < sum_lanes; ++j) {
      run += lr[j].sse;
      if (r == 0) {
        lane[j] = lr[j];
      } else {
        lane[j].max_abs = std::max(lane[j].max_abs, lr[j].max_abs);
        lane[j].mn = std::min(lane[j].mn, lr[j].mn);
        lane[j].mx = std::max(lane[j].mx, lr[j].mx);
      }
    }
    sse += run;
  }
  extremes e{0.0, lane[0].mn, lane[0].mx};
  for (unsigned j = 0; j < sum_lanes; ++j) {
    e.max_abs = std::max(e.max_abs, lane[j].max_abs);
    e.mn = std::min(e.mn, lane[j].mn);
    e.mx = std::max(e.mx, lane[j].mx);
  }
  return e;
}

// ---- SSIM --------------------------------------------------------------------------------

/** Where value (sample s, plane c, row r, column x) lies. */
DCTCHOP_HD std::int64_t value_at(const measure_plan& m, std::uint64_t s, std::uint64_t c,
                                 std::uint64_t r, std::uint64_t x) {
  return static_cast<std::int64_t>(s) * m.stride_sample +
         static_cast<std::int64_t>(c) * m.stride_plane + static_cast<std::int64_t>(r) * m.stride_row +
         static_cast<std::int64_t>(x) * m.stride_col;
}

/** A column's sums over the 7 rows of a window row: of x, y, x^2 + y^2, xy (values minus the
 *  plane's shift). Integers (exact: below 2^39 in magnitude) or doubles. */
template <typename S>
struct column_sums {
  S x, y, q, xy;
};
template <typename T>
using sums_of = std::conditional_t<exact_sums_of<T>, std::int64_t, double>;

/** The CPU's shift of a plane's values before its window sums: none for u8 (its formula is
 *  in integers); the plane's first value for the rest, or 0 where that is not finite
 *  (metric_kernels.cpp, shift_of). */
template <typename T>
DCTCHOP_HD sums_of<T> plane_shift(const measure_plan& m, const T* a, std::uint64_t s,
                                  std::uint64_t c) {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return 0;
  } else if constexpr (exact_sums_of<T>) {
    return a[value_at(m, s, c, 0, 0)];
  } else {
    const double v = as_double(a[value_at(m, s, c, 0, 0)]);
    return std::isfinite(v) ? v : 0.0;
  }
}

/** (exact) Column `col` of window row `row` of plane c of sample s, summed directly. */
template <typename T>
DCTCHOP_HD column_sums<std::int64_t> column_sum(const measure_plan& m, const T* a, const T* b,
                                                std::uint64_t s, std::uint64_t c,
                                                std::uint64_t row, std::uint64_t col,
                                                std::int64_t shift) {
  column_sums<std::int64_t> r{0, 0, 0, 0};
  for (int i = 0; i < ssim_window; ++i) {
    const std::int64_t at = value_at(m, s, c, row + static_cast<std::uint64_t>(i), col);
    const std::int64_t x = std::int64_t(a[at]) - shift, y = std::int64_t(b[at]) - shift;
    r.x += x;
    r.y += y;
    r.q += x * x + y * y;
    r.xy += x * y;
  }
  return r;
}

/** Where slide_column leaves column `col` of window row `row` of plane c of sample s. */
DCTCHOP_HD std::uint64_t slid_at(const measure_plan& m, std::uint64_t s, std::uint64_t c,
                                 std::uint64_t row, std::uint64_t col) {
  return ((s * m.planes + c) * m.rows + row) * m.w + col;
}

/** (floats, SSIM) Threads of the slide grid: a column of each plane of each sample. */
DCTCHOP_HD std::uint64_t slide_threads(const measure_plan& m) { return m.samples * m.planes * m.w; }

/** (floats) Thread i of the slide grid: column col = i % w of plane c = i / w % planes of
 *  sample s = i / (planes * w). The column sums of its every window row, slid down the
 *  plane as the CPU's ssim_rows does (the new row added, the row 7 above taken away,
 *  nothing taken away while the first 7 come in): into slid_at(m, s, c, r - 6, col) for
 *  rows r >= 6. */
template <typename T>
DCTCHOP_HD void slide_column(const measure_plan& m, const T* a, const T* b, std::uint64_t i,
                             column_sums<double>* slid) {
  const std::uint64_t s = i / (m.planes * m.w), c = i / m.w % m.planes, col = i % m.w;
  const double shift = plane_shift(m, a, s, c);
  column_sums<double>* out = slid + slid_at(m, s, c, 0, col);
  const std::uint64_t stride = m.w;  // (from one window row to the next)
  column_sums<double> r{0.0, 0.0, 0.0, 0.0};
  for (std::uint64_t row = 0; row < m.h; ++row) {
    const std::int64_t at = value_at(m, s, c, row, col);
    const double va = as_double(a[at]) - shift, vb = as_double(b[at]) - shift;
    double wa = 0.0, wb = 0.0;
    if (row >= static_cast<std::uint64_t>(ssim_window)) {
      const std::int64_t old = value_at(m, s, c, row - ssim_window, col);
      wa = as_double(a[old]) - shift;
      wb = as_double(b[old]) - shift;
    }
    r.x = r.x + (va - wa);
    r.y = r.y + (vb - wb);
    r.q += (va * va + vb * vb) - (wa * wa + wb * wb);
    r.xy += va * vb - wa * wb;
    if (row + 1 >= static_cast<std::uint64_t>(ssim_window)) out[(row + 1 - ssim_window) * stride] = r;
  }
}

/** The SSIM of the window whose 7 columns' sums start at cs: the CPU's formula for the type,
 *  on the sum of the 7 (left to right, from the first, as box7 adds them). */
template <typename T>
DCTCHOP_HD double window_value(const column_sums<sums_of<T>>* cs, double range,
                               sums_of<T> shift) {
  column_sums<sums_of<T>> w = cs[0];
  for (int i = 1; i < ssim_window; ++i) {
    w.x = w.x + cs[i].x;
    w.y = w.y + cs[i].y;
    w.q = w.q + cs[i].q;
    w.xy = w.xy + cs[i].xy;
  }
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return u8_window(range).window(static_cast<std::int16_t>(w.x), static_cast<std::int16_t>(w.y),
                                   static_cast<std::int32_t>(w.q), static_cast<std::int32_t>(w.xy));
  } else {
    return float_window(range, static_cast<double>(shift))
        .window(static_cast<double>(w.x), static_cast<double>(w.y), static_cast<double>(w.q),
                static_cast<double>(w.xy));
  }
}

/** A CTA of the SSIM kernel takes one window row (`cta` numbers them: row, then plane, then
 *  sample) a tile of ssim_tile windows at a time, in three phases with a barrier after each:
 *   1. tile_columns: the tile's n + 6 columns' sums into cs (thread t: columns t, t + nt, ...),
 *      summed (exact) or read from what slide_column left (floats, `slid`);
 *   2. tile_windows: the tile's n windows' SSIM into win;
 *   3. add_tile_to_lane: threads 0..7 add them to their lanes as the CPU's lane_sum does. */
struct ssim_cta {
  std::uint64_t sample, plane, row;
};
DCTCHOP_HD ssim_cta ssim_cta_of(const measure_plan& m, std::uint64_t cta) {
  const std::uint64_t sp = cta / m.rows;
  return {sp / m.planes, sp % m.planes, cta % m.rows};
}

template <typename T>
DCTCHOP_HD void tile_columns(const measure_plan& m, const T* a, const T* b,
                             const column_sums<double>* slid, const ssim_cta& at,
                             sums_of<T> shift, std::uint64_t x0, std::uint64_t n, unsigned t,
                             unsigned nt, column_sums<sums_of<T>>* cs) {
  for (std::uint64_t c = t; c < n + ssim_window - 1; c += nt) {
    if constexpr (exact_sums_of<T>) {
      cs[c] = column_sum(m, a, b, at.sample, at.plane, at.row, x0 + c, shift);
    } else {
      cs[c] = slid[slid_at(m, at.sample, at.plane, at.row, x0 + c)];
    }
  }
}

template <typename T>
DCTCHOP_HD void tile_windows(const measure_plan& m, const column_sums<sums_of<T>>* cs,
                             sums_of<T> shift, std::uint64_t n, unsigned t, unsigned nt,
                             double* win) {
  for (std::uint64_t i = t; i < n; i += nt) win[i] = window_value<T>(cs + i, m.range, shift);
}

/** Lane j (< 8) of the row's sum: the CPU adds window x to lane x % 8 for x below the row's
 *  last multiple of 8, in order, and the windows past it to lane 0 after its own. */
DCTCHOP_HD void add_tile_to_lane(const double* win, std::uint64_t x0, std::uint64_t n,
                                 std::uint64_t windows, unsigned j, double& lane) {
  const std::uint64_t whole = windows / sum_lanes * sum_lanes;
  for (std::uint64_t x = x0 + j; x < x0 + n && x < whole; x += sum_lanes) lane += win[x - x0];
  if (j == 0) {
    for (std::uint64_t x = x0 > whole ? x0 : whole; x < x0 + n; ++x) lane += win[x - x0];
  }
}

/** The row's sum from its 8 lanes, in order (the CPU's lane_sum). */
DCTCHOP_HD double lane_total(const double* lanes) {
  double s = 0;
  for (unsigned j = 0; j < sum_lanes; ++j) s += lanes[j];
  return s;
}

// ---- a sample's figures ------------------------------------------------------------------

/** The sum of sample s's SSIM means from its planes' row sums (plane after plane), in the
 *  CPU's order; 0 without SSIM. */
DCTCHOP_HD double sample_ssim_sum(const measure_plan& m, const double* rows) {
  double ssim = 0;
  if (m.ssim) {
    for (std::uint64_t c = 0; c < m.planes; ++c) {
      double plane = 0;
      for (std::uint64_t r = 0; r < m.rows; ++r) plane += rows[c * m.rows + r];
      ssim += plane / static_cast<double>(m.rows * m.windows);
    }
  }
  return ssim;
}

/** Sample s's figures (measure_outputs doubles) from its statistics: `stats` holds its runs'
 *  (exact) or lanes' (floats); `rows` its planes' row sums (with SSIM). Returns its
 *  extremes. */
DCTCHOP_HD extremes finish_sample(const measure_plan& m, const void* stats, const double* rows,
                                  double* out) {
  extremes e;
  if (m.exact) {
    const auto* runs = static_cast<const run_stats*>(stats);
    double sse = 0;
    run_stats all = no_stats();
    for (std::uint64_t r = 0; r < m.runs; ++r) {
      sse += static_cast<double>(runs[r].sse);
      all = merge_stats(all, runs[r]);
    }
    out[0] = sse;
    e = {static_cast<double>(all.max_abs), static_cast<double>(all.lo), static_cast<double>(all.hi)};
  } else {
    e = merge_lanes(static_cast<const lane_stats*>(stats), m.runs, out[0]);
  }
  out[1] = sample_ssim_sum(m, rows);
  return e;
}

// ---- device scratch ----------------------------------------------------------------------

/** The device scratch of a batch's measure, in this order: each sample's statistics (runs or
 *  lanes), each sample's extremes, each window row's SSIM sum, and (floats) the column sums
 *  of every window row. */
struct measure_scratch {
  std::uint64_t stats, sample_extremes, rows, slid, bytes;
};
/** Bytes of a sample's statistics: its runs' (exact) or its runs' lanes' (floats). */
DCTCHOP_HD std::uint64_t stats_bytes(const measure_plan& m) {
  return m.runs * (m.exact ? sizeof(run_stats) : sum_lanes * sizeof(lane_stats));
}
inline std::uint64_t round16(std::uint64_t n) { return (n + 15) / 16 * 16; }
inline measure_scratch measure_scratch_of(const measure_plan& m) {
  measure_scratch s{};
  s.stats = 0;
  s.sample_extremes = round16(m.samples * stats_bytes(m));
  s.rows = s.sample_extremes + round16(m.samples * sizeof(extremes));
  const std::uint64_t row_sums = m.ssim ? m.samples * m.planes * m.rows : 0;
  s.slid = s.rows + round16(row_sums * sizeof(double));
  s.bytes = s.slid + (m.ssim && !m.exact ? row_sums * m.w * sizeof(column_sums<double>) : 0);
  return s;
}

/** The most device memory one sample's measure may keep (float planes' window sums: 32 bytes
 *  a value with SSIM): a sample that needs more (f32 planes of more than 32 Mi values; f16,
 *  f32 and the rest alike) is measured on the host, as much as the CPU takes, where the
 *  device could run out. */
constexpr std::uint64_t most_sample_scratch = std::uint64_t(1) << 30;

/** Whether the device measures samples of `one` (the plan of one of them). */
inline bool measures_on_device(const measure_plan& one) {
  return measure_scratch_of(one).bytes <= most_sample_scratch;
}

/** The batch that quality_accumulator::measure gives, from the figures of the plan's samples
 *  (measure_outputs doubles each) and their extremes merged. */
inline void batch_of_outputs(const measure_plan& m, const double* out, const extremes& e,
                             quality_batch& b) {
  b.values_per_sample = m.values;
  b.sse.resize(m.samples);
  b.ssim_sum.resize(m.ssim ? m.samples : 0);
  b.ssim_planes = m.ssim_counted ? m.samples * m.planes : 0;
  for (std::uint64_t s = 0; s < m.samples; ++s) {
    b.sse[s] = out[s * measure_outputs];
    if (m.ssim) b.ssim_sum[s] = out[s * measure_outputs + 1];
  }
  b.max_abs = e.max_abs;
  b.mn = e.mn;
  b.mx = e.mx;
}

/** Every thread of the measure's grids on the CPU, phase by phase (the barriers between
 *  them as loops end), for the tests: `out` gets measure_outputs doubles a sample, and the
 *  result is the batch's extremes (merged in sample order). */
template <typename T>
extremes measure_on_host(const measure_plan& m, const T* a, const T* b, double* out) {
  std::vector<run_stats> runs(m.exact ? m.samples * m.runs : 0);
  std::vector<lane_stats> lanes(m.exact ? 0 : lane_threads(m));
  if constexpr (exact_sums_of<T>) {
    for (std::uint64_t i = 0; i < runs.size(); ++i) {
      run_stats r = no_stats();
      for (unsigned t = 0; t < measure_threads; ++t)
        r = merge_stats(r, stats_thread(m, a, b, i / m.runs, i % m.runs, t, measure_threads));
      runs[i] = r;
    }
  } else {
    for (std::uint64_t i = 0; i < lanes.size(); ++i) lanes[i] = lane_thread(m, a, b, i);
  }
  std::vector<double> rows(m.ssim ? m.samples * m.planes * m.rows : 0);
  std::vector<column_sums<double>> slid(!m.exact ? rows.size() * m.w : 0);
  if constexpr (!exact_sums_of<T>) {
    for (std::uint64_t i = 0; i < slide_threads(m) && m.ssim; ++i) {
      slide_column(m, a, b, i, slid.data());
    }
  }
  for (std::uint64_t cta = 0; cta < rows.size(); ++cta) {
    const ssim_cta at = ssim_cta_of(m, cta);
    const sums_of<T> shift = plane_shift(m, a, at.sample, at.plane);
    column_sums<sums_of<T>> cs[ssim_tile + ssim_window - 1];
    double win[ssim_tile], lane[sum_lanes] = {};
    for (std::uint64_t x0 = 0; x0 < m.windows; x0 += ssim_tile) {
      const std::uint64_t n = std::min<std::uint64_t>(ssim_tile, m.windows - x0);
      for (unsigned t = 0; t < measure_threads; ++t)
        tile_columns(m, a, b, slid.data(), at, shift, x0, n, t, measure_threads, cs);
      for (unsigned t = 0; t < measure_threads; ++t)
        tile_windows<T>(m, cs, shift, n, t, measure_threads, win);
      for (unsigned j = 0; j < sum_lanes; ++j) add_tile_to_lane(win, x0, n, m.windows, j, lane[j]);
    }
    rows[cta] = lane_total(lane);
  }
  extremes e = no_extremes();
  for (std::uint64_t s = 0; s < m.samples; ++s) {
    const void* stats = m.exact ? static_cast<const void*>(runs.data() + s * m.runs)
                                : static_cast<const void*>(lanes.data() + s * m.runs * sum_lanes);
    e = merge_extremes(e, finish_sample(m, stats, rows.data() + s * m.planes * m.rows,
                                        out + s * measure_outputs));
  }
  return e;
}

}  // namespace dctchop::detail
