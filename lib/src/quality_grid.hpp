// Internal: the CUDA backend's quality measure (cuda_measure.cu), what each thread computes,
// as host-and-device functions. measure_on_host() runs every thread of the same grids on the
// CPU, phase after phase, so that the tests compare it with quality_accumulator::measure
// without a GPU.
//
// The device measures 8- and 16-bit integer data only (device_measures). There every sum
// the CPU takes is exact whatever its order: a sample's squared errors in runs of 2^15 (8-bit)
// or 2^20 (16-bit) values, each an integer below 2^52, and an SSIM window's sums over its 7x7
// values. What is rounded, the CPU's sum of the runs in double, each window's formula
// (ssim_window.hpp) and the sums of a plane's window values (eight lanes along a row, then
// the rows), is done here in the CPU's order. So the figures are the CPU's bit for bit.
// Floats and 32-bit integers, whose sums round, are measured on the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/detail/scalar.hpp"  // DCTCHOP_HD
#include "dctchop/metrics.hpp"
#include "dctchop/types.hpp"
#include "ssim_window.hpp"

namespace dctchop::detail {

/** Whether the CUDA backend measures data of type t on the device. */
constexpr bool device_measures(dtype t) {
  return t == dtype::u8 || t == dtype::i8 || t == dtype::u16 || t == dtype::i16;
}

/** A batch to measure: its shape, where a value lies (in elements), and what to compute.
 *  Every sample's values are one contiguous run (planar or interleaved). */
struct measure_plan {
  std::uint64_t samples, planes, h, w;
  std::int64_t stride_sample, stride_plane, stride_row, stride_col;
  std::uint64_t values;   // a sample's: planes * h * w
  std::uint64_t run;      // values a partial sum of squared errors takes (the CPU's runs)
  std::uint64_t runs;     // runs a sample
  bool ssim;              // SSIM measured (planes of at least 7x7)
  std::uint64_t rows;     // window rows a plane, h - 6 (when ssim)
  std::uint64_t windows;  // windows a row, w - 6 (when ssim)
  double range;           // R of the SSIM formula
};

/** The plan of a batch `v` (dense samples; a type that device_measures): SSIM where `ssim`
 *  asks for it and the planes are at least 7x7, at data range `range`. */
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
  m.run = size_of(v.type) == 1 ? std::uint64_t(1) << 15 : std::uint64_t(1) << 20;
  m.runs = (m.values + m.run - 1) / m.run;
  m.ssim = ssim && v.height >= ssim_window && v.width >= ssim_window;
  m.rows = m.ssim ? v.height - (ssim_window - 1) : 0;
  m.windows = m.ssim ? v.width - (ssim_window - 1) : 0;
  m.range = range;
  return m;
}

/** Threads a CTA of the measure's kernels, and windows a tile of a row (a multiple of 8, so
 *  that a tile's windows start on lane 0). */
constexpr unsigned measure_threads = 256;
constexpr unsigned ssim_tile = 256;

/** The doubles a sample's figures take on the way back: squared error, SSIM sum (of the
 *  planes' means). Its extremes (max abs error, the original's least and greatest value)
 *  are merged into one run_stats for the batch. */
constexpr unsigned measure_outputs = 2;

/** A run's (or a thread's part of a run's) exact statistics. */
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

/** Thread t of nt's part of run `run` of sample `s`: values run * m.run + t, + nt, ... of the
 *  run, in memory order. Integers, so the parts merge to the same run in any order. */
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

/** Where value (sample s, plane c, row r, column x) lies. */
DCTCHOP_HD std::int64_t value_at(const measure_plan& m, std::uint64_t s, std::uint64_t c,
                                 std::uint64_t r, std::uint64_t x) {
  return static_cast<std::int64_t>(s) * m.stride_sample +
         static_cast<std::int64_t>(c) * m.stride_plane + static_cast<std::int64_t>(r) * m.stride_row +
         static_cast<std::int64_t>(x) * m.stride_col;
}

/** The CPU's shift of a plane's values before its window sums: none for u8 (its formula is
 *  in integers), the plane's first value for the rest (metric_kernels.cpp, shift_of). */
template <typename T>
DCTCHOP_HD std::int32_t plane_shift(const measure_plan& m, const T* a, std::uint64_t s,
                                    std::uint64_t c) {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return 0;
  } else {
    return a[value_at(m, s, c, 0, 0)];
  }
}

/** A column's sums over the 7 rows of a window row: of x, y, x^2 + y^2, xy (values minus the
 *  shift). Below 2^39 in magnitude, exact. */
struct column_sums {
  std::int64_t x, y, q, xy;
};

/** Column `col` of window row `row` of plane c of sample s. */
template <typename T>
DCTCHOP_HD column_sums column_sum(const measure_plan& m, const T* a, const T* b, std::uint64_t s,
                                  std::uint64_t c, std::uint64_t row, std::uint64_t col,
                                  std::int32_t shift) {
  column_sums r{0, 0, 0, 0};
  for (int i = 0; i < ssim_window; ++i) {
    const std::int64_t at = value_at(m, s, c, row + static_cast<std::uint64_t>(i), col);
    const std::int64_t x = std::int32_t(a[at]) - shift, y = std::int32_t(b[at]) - shift;
    r.x += x;
    r.y += y;
    r.q += x * x + y * y;
    r.xy += x * y;
  }
  return r;
}

/** The SSIM of the window whose 7 columns' sums start at cs: the CPU's formula for the type. */
template <typename T>
DCTCHOP_HD double window_value(const column_sums* cs, double range, std::int32_t shift) {
  column_sums w{0, 0, 0, 0};
  for (int i = 0; i < ssim_window; ++i) {
    w.x += cs[i].x;
    w.y += cs[i].y;
    w.q += cs[i].q;
    w.xy += cs[i].xy;
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
 *   1. tile_columns: the tile's n + 6 columns' sums into cs (thread t: columns t, t + nt, ...);
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
DCTCHOP_HD void tile_columns(const measure_plan& m, const T* a, const T* b, const ssim_cta& at,
                             std::int32_t shift, std::uint64_t x0, std::uint64_t n, unsigned t,
                             unsigned nt, column_sums* cs) {
  for (std::uint64_t c = t; c < n + ssim_window - 1; c += nt) {
    cs[c] = column_sum(m, a, b, at.sample, at.plane, at.row, x0 + c, shift);
  }
}

template <typename T>
DCTCHOP_HD void tile_windows(const measure_plan& m, const column_sums* cs, std::int32_t shift,
                             std::uint64_t n, unsigned t, unsigned nt, double* win) {
  for (std::uint64_t i = t; i < n; i += nt) win[i] = window_value<T>(cs + i, m.range, shift);
}

/** Lane j (< 8) of the row's sum: the CPU adds window x to lane x % 8 for x below the row's
 *  last multiple of 8, in order, and the windows past it to lane 0 after its own. */
DCTCHOP_HD void add_tile_to_lane(const double* win, std::uint64_t x0, std::uint64_t n,
                                 std::uint64_t windows, unsigned j, double& lane) {
  const std::uint64_t whole = windows / 8 * 8;
  for (std::uint64_t x = x0 + j; x < x0 + n && x < whole; x += 8) lane += win[x - x0];
  if (j == 0) {
    for (std::uint64_t x = x0 > whole ? x0 : whole; x < x0 + n; ++x) lane += win[x - x0];
  }
}

/** The row's sum from its 8 lanes, in order (the CPU's lane_sum). */
DCTCHOP_HD double lane_total(const double* lanes) {
  double s = 0;
  for (int j = 0; j < 8; ++j) s += lanes[j];
  return s;
}

/** Sample s's figures (measure_outputs doubles) from its runs' statistics and, with SSIM,
 *  its planes' row sums (plane after plane): sums in the CPU's order. Returns its extremes. */
DCTCHOP_HD run_stats finish_sample(const measure_plan& m, const run_stats* runs,
                                   const double* rows, double* out) {
  double sse = 0;
  run_stats all = no_stats();
  for (std::uint64_t r = 0; r < m.runs; ++r) {
    sse += static_cast<double>(runs[r].sse);
    all = merge_stats(all, runs[r]);
  }
  double ssim = 0;
  if (m.ssim) {
    for (std::uint64_t c = 0; c < m.planes; ++c) {
      double plane = 0;
      for (std::uint64_t r = 0; r < m.rows; ++r) plane += rows[c * m.rows + r];
      ssim += plane / static_cast<double>(m.rows * m.windows);
    }
  }
  out[0] = sse;
  out[1] = ssim;
  return all;
}

/** The scratch a batch's measure takes on the device: each run's statistics, then each
 *  window row's sum. */
inline std::uint64_t measure_runs_bytes(const measure_plan& m) {
  return (m.samples * m.runs * sizeof(run_stats) + 15) / 16 * 16;
}
inline std::uint64_t measure_scratch_bytes(const measure_plan& m) {
  return measure_runs_bytes(m) + (m.ssim ? m.samples * m.planes * m.rows * sizeof(double) : 0);
}

/** The batch that quality_accumulator::measure gives, from the figures of the plan's samples
 *  (measure_outputs doubles each) and their extremes merged (in any order: integers). */
inline void batch_of_outputs(const measure_plan& m, const double* out, const run_stats& extremes,
                             quality_batch& b) {
  b.values_per_sample = m.values;
  b.sse.resize(m.samples);
  b.ssim_sum.resize(m.ssim ? m.samples : 0);
  b.ssim_planes = m.ssim ? m.samples * m.planes : 0;
  for (std::uint64_t s = 0; s < m.samples; ++s) {
    b.sse[s] = out[s * measure_outputs];
    if (m.ssim) b.ssim_sum[s] = out[s * measure_outputs + 1];
  }
  const bool any = m.samples > 0 && m.values > 0;
  b.max_abs = any ? static_cast<double>(extremes.max_abs) : 0.0;
  b.mn = any ? static_cast<double>(extremes.lo) : std::numeric_limits<double>::infinity();
  b.mx = any ? static_cast<double>(extremes.hi) : -std::numeric_limits<double>::infinity();
}

/** Every thread of the measure's grids on the CPU, phase by phase (the barriers between
 *  them as loops end), for the tests: `out` gets measure_outputs doubles a sample, and the
 *  result is the batch's extremes. */
template <typename T>
run_stats measure_on_host(const measure_plan& m, const T* a, const T* b, double* out) {
  std::vector<run_stats> runs(m.samples * m.runs);
  for (std::uint64_t i = 0; i < runs.size(); ++i) {
    run_stats r = no_stats();
    for (unsigned t = 0; t < measure_threads; ++t)
      r = merge_stats(r, stats_thread(m, a, b, i / m.runs, i % m.runs, t, measure_threads));
    runs[i] = r;
  }
  std::vector<double> rows(m.ssim ? m.samples * m.planes * m.rows : 0);
  for (std::uint64_t cta = 0; cta < rows.size(); ++cta) {
    const ssim_cta at = ssim_cta_of(m, cta);
    const std::int32_t shift = plane_shift(m, a, at.sample, at.plane);
    column_sums cs[ssim_tile + ssim_window - 1];
    double win[ssim_tile], lanes[8] = {};
    for (std::uint64_t x0 = 0; x0 < m.windows; x0 += ssim_tile) {
      const std::uint64_t n = std::min<std::uint64_t>(ssim_tile, m.windows - x0);
      for (unsigned t = 0; t < measure_threads; ++t)
        tile_columns(m, a, b, at, shift, x0, n, t, measure_threads, cs);
      for (unsigned t = 0; t < measure_threads; ++t)
        tile_windows<T>(m, cs, shift, n, t, measure_threads, win);
      for (unsigned j = 0; j < 8; ++j) add_tile_to_lane(win, x0, n, m.windows, j, lanes[j]);
    }
    rows[cta] = lane_total(lanes);
  }
  run_stats extremes = no_stats();
  for (std::uint64_t s = 0; s < m.samples; ++s)
    extremes = merge_stats(extremes, finish_sample(m, runs.data() + s * m.runs,
                                                   rows.data() + s * m.planes * m.rows,
                                                   out + s * measure_outputs));
  return extremes;
}

}  // namespace dctchop::detail
