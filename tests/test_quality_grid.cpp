// The CUDA backend's quality measure (lib/src/quality_grid.hpp), every thread of its grids run
// on the CPU: the same figures as quality_accumulator::measure, bit for bit, for every type it
// measures, in every layout, for planes with and without SSIM, rows of one and several tiles,
// samples of one and several runs. The kernels' launches are tested on a GPU
// (tests/gpu/test_cuda.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/metrics.hpp"
#include "quality_grid.hpp"

namespace {

using namespace dctchop;
using u64 = std::uint64_t;

using detail::half_value;

/** The range that test data of type T spans: the integer types' own, +-1000 for floats. */
template <typename T>
constexpr double low_of() {
  if constexpr (std::is_integral_v<T>) return double(std::numeric_limits<T>::min());
  return -1000.0;
}
template <typename T>
constexpr double high_of() {
  if constexpr (std::is_integral_v<T>) return double(std::numeric_limits<T>::max());
  return 1000.0;
}

template <typename T>
T value_of(double v) {
  if constexpr (std::is_same_v<T, half_value>) return half_value(static_cast<float>(v));
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(std::round(v));
  else return static_cast<T>(v);
}

/** Random originals (uniform, or smooth with noise, so that SSIM is far from both 0 and 1)
 *  and copies off by a little (a few units for 8- and 16-bit integers, 1e-4 of the range
 *  otherwise), with the range's ends in places and a copy at the other end now and then. */
template <typename T>
void make_pair(u64 count, int seed, std::vector<T>& a, std::vector<T>& b) {
  std::mt19937 rng(seed);
  constexpr double lo = low_of<T>(), hi = high_of<T>();
  const double step = std::is_integral_v<T> && sizeof(T) <= 2 ? 1.0 : (hi - lo) * 1e-4;
  std::uniform_real_distribution<double> any(lo, hi);
  std::uniform_int_distribution<int> noise(-6, 6);
  a.resize(count);
  b.resize(count);
  const double base = any(rng);
  for (u64 i = 0; i < count; ++i) {
    const double smooth = base + (hi - lo) * 0.1 * std::sin(double(i) * 0.01);
    double v = seed % 2 == 0 ? any(rng) : smooth + step * noise(rng);
    if (i % 97 == 5) v = lo;
    if (i % 89 == 7) v = hi;
    a[i] = value_of<T>(std::clamp(v, lo, hi));
    const double d = i % 13 == 0 ? (hi - lo) : step * noise(rng);  // and a worst case
    b[i] = value_of<T>(std::clamp(detail::as_double(a[i]) + (i % 2 ? d : -d), lo, hi));
  }
}

template <typename T>
constexpr dtype type_of() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return dtype::u8;
  if constexpr (std::is_same_v<T, std::int8_t>) return dtype::i8;
  if constexpr (std::is_same_v<T, std::uint16_t>) return dtype::u16;
  if constexpr (std::is_same_v<T, std::int16_t>) return dtype::i16;
  if constexpr (std::is_same_v<T, half_value>) return dtype::f16;
  if constexpr (std::is_same_v<T, float>) return dtype::f32;
  if constexpr (std::is_same_v<T, double>) return dtype::f64;
  if constexpr (std::is_same_v<T, std::int32_t>) return dtype::i32;
  return dtype::u32;
}

/** Two doubles with the same bits, or both NaN (whose payloads the figures need not keep). */
bool same_double(double x, double y) {
  return std::bit_cast<u64>(x) == std::bit_cast<u64>(y) || (std::isnan(x) && std::isnan(y));
}

/** The grid's batch and the accumulator's for the same samples, field by field, bits. */
template <typename T>
void expect_same_batch(const geometry& g, u64 samples, const std::vector<T>& a,
                       const std::vector<T>& b, bool ssim,
                       std::optional<double> range = high_of<T>() - low_of<T>()) {
  const dtype t = type_of<T>();
  const auto va = make_view(g, t, static_cast<const void*>(a.data()), samples);
  const auto vb = make_view(g, t, static_cast<const void*>(b.data()), samples);
  const quality_accumulator acc(t, range, ssim);
  const quality_batch want = acc.measure(va, vb, 1);

  const detail::measure_plan m =
      detail::measure_plan_of(va, acc.computes_ssim(), acc.known_range().value_or(0.0));
  std::vector<double> out(samples * detail::measure_outputs);
  const detail::extremes extremes = detail::measure_on_host(m, a.data(), b.data(), out.data());
  quality_batch got;
  detail::batch_of_outputs(m, out.data(), extremes, got);

  const std::string what = std::string(to_string(t)) + " " + std::string(to_string(g.lay)) + " " +
                           std::to_string(g.height) + "x" + std::to_string(g.width) + "x" +
                           std::to_string(g.planes) + ", " + std::to_string(samples) + " samples";
  ASSERT_EQ(got.samples(), want.samples()) << what;
  ASSERT_EQ(got.ssim_sum.size(), want.ssim_sum.size()) << what;
  EXPECT_EQ(got.values_per_sample, want.values_per_sample) << what;
  EXPECT_EQ(got.ssim_planes, want.ssim_planes) << what;
  for (u64 s = 0; s < samples; ++s) {
    EXPECT_TRUE(same_double(got.sse[s], want.sse[s]))
        << what << ": sample " << s << " sse " << got.sse[s] << " against " << want.sse[s];
    if (!want.ssim_sum.empty()) {
      EXPECT_TRUE(same_double(got.ssim_sum[s], want.ssim_sum[s]))
          << what << ": sample " << s << " ssim " << got.ssim_sum[s] << " against " << want.ssim_sum[s];
    }
  }
  EXPECT_TRUE(same_double(got.max_abs, want.max_abs)) << what;
  EXPECT_TRUE(same_double(got.mn, want.mn)) << what;
  EXPECT_TRUE(same_double(got.mx, want.mx)) << what;
  if (!want.ssim_sum.empty() && std::isfinite(want.ssim_sum[0])) {  // SSIM neither 0 nor 1
    EXPECT_GT(want.ssim_sum[0], 0.01 * double(g.planes)) << what;
    EXPECT_LT(want.ssim_sum[0], 0.999 * double(g.planes)) << what;
  }
}

template <typename T>
void expect_same_batch(const geometry& g, u64 samples, int seed, bool ssim) {
  std::vector<T> a, b;
  make_pair(samples * g.values_per_sample(), seed, a, b);
  expect_same_batch(g, samples, a, b, ssim);
}

template <typename T>
void every_shape(int seed) {
  struct shape {
    layout lay;
    u64 planes, h, w, samples;
  };
  const shape shapes[] = {
      {layout::nhwc, 3, 20, 17, 3},    // RGB, one tile
      {layout::nchw, 3, 20, 17, 2},    // planar
      {layout::nhw, 1, 7, 7, 2},       // one window
      {layout::nhw, 1, 6, 30, 2},      // too short for SSIM
      {layout::nhwc, 2, 30, 6, 2},     // too narrow
      {layout::nhw, 1, 9, 300, 2},     // two tiles, 294 windows a row: 6 past the lanes' 288
      {layout::nhwc, 4, 8, 263, 1},    // a tile of one window
      {layout::nchw, 3, 120, 100, 1},  // 36000 values: two runs of an 8-bit type, 9 of floats
      {layout::nhw, 1, 65, 127, 2},    // 8255 values: 3 runs of floats, the last of 63 (7 past the lanes)
      {layout::nhw, 1, 41, 100, 2},    // 4100 values: a last run of 4, all past the lanes
      {layout::nhw, 1, 64, 64, 2},     // 4096 values: one whole run
      {layout::nhw, 1, 1, 1, 3},       // one value
      // Wider than the CPU's column tiles of 8192 windows (metric_kernels.cpp), whose sums
      // must be one pass's: 8192, 8192 and 307 windows a row; 8192 and 1
      {layout::nhwc, 3, 8, 16697, 1},
      {layout::nchw, 2, 9, 8199, 1},
  };
  for (const shape& s : shapes) {
    const geometry g{s.lay, s.samples, s.planes, s.h, s.w};
    expect_same_batch<T>(g, s.samples, seed, true);
    expect_same_batch<T>(g, s.samples, seed + 1, false);
  }
  expect_same_batch<T>(geometry{layout::nhwc, 0, 3, 20, 17}, 0, seed, true);  // no samples
}

TEST(QualityGrid, U8FiguresAreTheAccumulatorsBitForBit) { every_shape<std::uint8_t>(1); }
TEST(QualityGrid, I8FiguresAreTheAccumulatorsBitForBit) { every_shape<std::int8_t>(3); }
TEST(QualityGrid, U16FiguresAreTheAccumulatorsBitForBit) { every_shape<std::uint16_t>(5); }
TEST(QualityGrid, I16FiguresAreTheAccumulatorsBitForBit) { every_shape<std::int16_t>(7); }
TEST(QualityGrid, F32FiguresAreTheAccumulatorsBitForBit) { every_shape<float>(13); }
TEST(QualityGrid, F64FiguresAreTheAccumulatorsBitForBit) { every_shape<double>(15); }
TEST(QualityGrid, F16FiguresAreTheAccumulatorsBitForBit) { every_shape<half_value>(17); }
TEST(QualityGrid, I32FiguresAreTheAccumulatorsBitForBit) { every_shape<std::int32_t>(19); }
TEST(QualityGrid, U32FiguresAreTheAccumulatorsBitForBit) { every_shape<std::uint32_t>(21); }

TEST(QualityGrid, FloatsWithoutAKnownRangeOrOfRangeZeroOrWithNanAndInfinityMeasureAsTheCpu) {
  const geometry g{layout::nhwc, 3, 3, 12, 10};
  std::vector<float> a, b;
  make_pair(3 * 360, 23, a, b);
  expect_same_batch(g, 3, a, b, true, std::nullopt);  // no SSIM: the range is not known
  expect_same_batch(g, 3, a, b, true, 0.0);           // planes counted, SSIM not measured
  a[5] = std::numeric_limits<float>::quiet_NaN();     // sample 0: NaN within
  a[360] = std::numeric_limits<float>::quiet_NaN();   // sample 1: NaN first (its shift 0)
  b[800] = std::numeric_limits<float>::infinity();    // sample 2: an infinite decoded value
  expect_same_batch(g, 3, a, b, true);
  // The largest error first in its lane, then a NaN in the original: the NaN is passed over,
  // not taken for the largest (the CPU keeps the first operand of std::max unless the second
  // is greater).
  const geometry small{layout::nhw, 1, 1, 4, 4};
  std::vector<float> x(16, 1.0f), y(16, 1.0f);
  y[0] = 101.0f;
  x[8] = std::numeric_limits<float>::quiet_NaN();
  expect_same_batch(small, 1, x, y, false);
}

TEST(QualityGrid, SixteenBitSamplesOfSeveralRunsSumAsTheCpuDoes) {
  // 5 runs of 2^20 u16 values whose copies are far off: the runs' squared errors, each exact,
  // pass 2^53 together, so that their sum in double rounds, and rounding the exact total once
  // gives another figure. The grid must sum them as the CPU does, run after run.
  const geometry g{layout::nhw, 1, 1, 2560, 2048};
  std::vector<std::uint16_t> a(g.values_per_sample()), b(a.size());
  std::mt19937 rng(13);  // (a seed whose sum shows the order: about one in three does)
  std::uniform_int_distribution<int> any(0, 7999);
  u64 exact = 0;
  // Values within 8000 of either end, copies at the other; errors of either parity, so that
  // the runs' sums are not all multiples of 4.
  for (u64 i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::uint16_t>(i % 2 ? any(rng) : 65535 - any(rng));
    b[i] = static_cast<std::uint16_t>(65535 - a[i] - (a[i] > 30000 ? 0 : int(rng() % 2)));
    const u64 d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
    exact += d * d;
  }
  expect_same_batch(g, 1, a, b, false);
  const quality_accumulator acc(dtype::u16, std::nullopt, false);
  const quality_batch cpu = acc.measure(make_view(g, dtype::u16, static_cast<const void*>(a.data()), 1),
                                        make_view(g, dtype::u16, static_cast<const void*>(b.data()), 1), 1);
  EXPECT_NE(cpu.sse[0], static_cast<double>(exact)) << "the data no longer shows the order";
}

TEST(QualityGrid, FloatSamplesOfSeveralRunsSumAsTheCpuDoes) {
  // 20300 f32 values: 4 runs of float_sum_run and one of 3916, 4 of them past the lanes.
  // Errors of very different sizes, so that the order of the sums shows in the figure: the
  // eight lanes summed over the whole sample give another one. The grid must sum a run's
  // lanes, then the runs, as the CPU does.
  static_assert(detail::float_sum_run == 4096);
  const geometry g{layout::nhw, 1, 1, 100, 203};
  const u64 n = g.values_per_sample();
  std::vector<float> a(n), b(n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> any(-1.0f, 1.0f);
  for (u64 i = 0; i < n; ++i) {
    a[i] = 100.0f * any(rng);
    b[i] = a[i] + (i % 3 == 0 ? 7.0f : 1e-3f) * any(rng);
  }
  expect_same_batch(g, 1, a, b, false);
  double lane[8] = {}, whole_lanes = 0;
  for (u64 i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    lane[i < n / 8 * 8 ? i % 8 : 0] += d * d;
  }
  for (double l : lane) whole_lanes += l;
  const quality_accumulator acc(dtype::f32, std::nullopt, false);
  const quality_batch cpu = acc.measure(make_view(g, dtype::f32, static_cast<const void*>(a.data()), 1),
                                        make_view(g, dtype::f32, static_cast<const void*>(b.data()), 1), 1);
  EXPECT_NE(cpu.sse[0], whole_lanes) << "the data no longer shows the order";
  // The extremes of lanes carried across the runs, where the order shows: values above 0
  // after a first value of 1, then a +0 on lane 5 of run 0 and a -0 on lane 3 of run 1. The
  // CPU's lanes end at +0 (lane 5) and -0 (lane 3), and the lanes merged in order give -0;
  // the runs merged first (+0, then -0 not less) would give +0.
  std::vector<float> p(n), q(n);
  for (u64 i = 0; i < n; ++i) {
    p[i] = 1.0f + std::fabs(a[i]);
    q[i] = p[i] + 1e-3f * any(rng);
  }
  p[0] = 1.0f;
  p[5] = 0.0f;
  p[4099] = -0.0f;
  expect_same_batch(g, 1, p, q, false);
  {
    const quality_batch on_cpu = acc.measure(make_view(g, dtype::f32, static_cast<const void*>(p.data()), 1),
                                             make_view(g, dtype::f32, static_cast<const void*>(q.data()), 1), 1);
    EXPECT_TRUE(on_cpu.mn == 0.0 && std::signbit(on_cpu.mn)) << "the data no longer shows the order";
  }
  // A NaN in a later run passed over by the extremes (the squared error is NaN); a NaN
  // first value stays in them.
  p[9000] = std::numeric_limits<float>::quiet_NaN();
  expect_same_batch(g, 1, p, q, false);
  p[0] = std::numeric_limits<float>::quiet_NaN();
  expect_same_batch(g, 1, p, q, false);
}

TEST(QualityGrid, DecodedImagesMeasureAsOnTheHost) {
  // Real errors: u8 RGB images through the codec at chop 2.
  const geometry g{layout::nhwc, 4, 3, 33, 45};
  std::vector<std::uint8_t> a, b;
  make_pair(4 * 33 * 45 * 3, 11, a, b);  // smooth originals; b is decoded below
  const auto be = make_backend(backend_kind::cpu);
  codec_params p;
  p.chop = 2;
  std::vector<std::byte> coeffs(4 * coeff_bytes_per_sample(p, g));
  const auto va = make_view(g, dtype::u8, static_cast<const void*>(a.data()), 4);
  be->encode(p, va, coeffs);
  be->decode(p, coeffs, make_view(g, dtype::u8, static_cast<void*>(b.data()), 4));
  expect_same_batch(g, 4, a, b, true);
  EXPECT_NE(a, b);
}

TEST(QualityGrid, ASampleWhoseWindowSumsPassAGibIsLeftToTheHost) {
  // Float planes keep 32 bytes of window sums a value on the device while SSIM is measured:
  // up to 1 GiB a sample there; beyond it, the host measures (decode_measured declines).
  const auto plan = [](dtype t, u64 h, u64 w, bool ssim, double range = 1.0) {
    const geometry g{layout::nhw, 1, 1, h, w};
    return detail::measure_plan_of(make_view(g, t, static_cast<const void*>(nullptr), 1), ssim, range);
  };
  EXPECT_TRUE(detail::measures_on_device(plan(dtype::f32, 4096, 4096, true)));  // 512 MiB
  EXPECT_FALSE(detail::measures_on_device(plan(dtype::f32, 5800, 5800, true)));
  EXPECT_FALSE(detail::measures_on_device(plan(dtype::f16, 5800, 5800, true)));
  EXPECT_TRUE(detail::measures_on_device(plan(dtype::f32, 5800, 5800, false)));  // no SSIM
  EXPECT_TRUE(detail::measures_on_device(plan(dtype::f32, 5800, 5800, true, 0.0)));  // not measured
  EXPECT_TRUE(detail::measures_on_device(plan(dtype::u8, 5800, 5800, true)));  // exact: no sums kept
}

TEST(QualityGrid, EightAndSixteenBitIntegersTakeTheExactSums) {
  for (dtype t : {dtype::u8, dtype::i8, dtype::u16, dtype::i16}) EXPECT_TRUE(detail::exact_sums(t));
  for (dtype t : {dtype::f16, dtype::f32, dtype::f64, dtype::i32, dtype::u32})
    EXPECT_FALSE(detail::exact_sums(t));
}

}  // namespace
