// Quality figures: PSNR, RMSE and max error against hand-computed values; SSIM against a slow
// direct implementation written here and against values committed from scikit-image.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "dctchop/detail/scalar.hpp"
#include "dctchop/metrics.hpp"
#include "isa.hpp"
#include "metric_kernels.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using u64 = std::uint64_t;

// ---- a direct SSIM, one window at a time, two-pass statistics (scikit-image conventions) ----

double slow_ssim(const std::vector<double>& a, const std::vector<double>& b, u64 h, u64 w,
                 double range) {
  const int win = 7;
  const double n = win * win;
  const double c1 = std::pow(0.01 * range, 2), c2 = std::pow(0.03 * range, 2);
  double total = 0;
  u64 count = 0;
  for (u64 i = 0; i + win <= h; ++i)
    for (u64 j = 0; j + win <= w; ++j) {
      double ma = 0, mb = 0;
      for (int y = 0; y < win; ++y)
        for (int x = 0; x < win; ++x) {
          ma += a[(i + y) * w + j + x];
          mb += b[(i + y) * w + j + x];
        }
      ma /= n;
      mb /= n;
      double va = 0, vb = 0, cov = 0;
      for (int y = 0; y < win; ++y)
        for (int x = 0; x < win; ++x) {
          const double da = a[(i + y) * w + j + x] - ma, db = b[(i + y) * w + j + x] - mb;
          va += da * da;
          vb += db * db;
          cov += da * db;
        }
      va /= n - 1;  // sample covariance
      vb /= n - 1;
      cov /= n - 1;
      total += ((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma * ma + mb * mb + c1) * (va + vb + c2));
      ++count;
    }
  return total / static_cast<double>(count);
}

// ---- the images of tests/data/make_ssim_reference.py, by the same integer formulas ----------

std::vector<std::int64_t> lcg(std::int64_t seed, u64 n) {
  std::vector<std::int64_t> out(n);
  std::int64_t s = seed;
  for (auto& v : out) {
    s = (s * 1103515245 + 12345) % (std::int64_t(1) << 31);
    v = (s >> 16) & 0x7FFF;
  }
  return out;
}

struct image_pair {
  std::vector<double> a, b;
  double range = 255;
};

image_pair make(const std::string& kind, u64 h, u64 w) {
  image_pair p;
  p.a.resize(h * w);
  p.b.resize(h * w);
  if (kind == "noise") {
    auto r1 = lcg(1, h * w), r2 = lcg(2, h * w);
    for (u64 k = 0; k < h * w; ++k) {
      p.a[k] = double(r1[k] % 256);
      p.b[k] = std::clamp(p.a[k] + double(r2[k] % 17) - 8, 0.0, 255.0);
    }
  } else if (kind == "pattern") {
    auto av = [&](std::int64_t i, std::int64_t j) { return (i * i + 3 * j * j + i * j) % 256; };
    for (u64 i = 0; i < h; ++i)
      for (u64 j = 0; j < w; ++j) {
        const std::int64_t left = av(i, (j + w - 1) % w);  // numpy roll by 1 along axis 1
        p.a[i * w + j] = double(av(i, j));
        p.b[i * w + j] = double((av(i, j) + left) / 2);
      }
  } else if (kind == "constant_same" || kind == "constant_shift") {
    std::fill(p.a.begin(), p.a.end(), 100.0);
    std::fill(p.b.begin(), p.b.end(), kind == "constant_same" ? 100.0 : 101.0);
  } else if (kind == "float_field") {
    double lo = 1e300, hi = -1e300;
    for (u64 i = 0; i < h; ++i)
      for (u64 j = 0; j < w; ++j) {
        const double v = double(i * i) * 0.01 - double(j) * 0.25 + double((i * j) % 5) * 0.5;
        p.a[i * w + j] = v;
        p.b[i * w + j] = v + 0.05 * double(std::int64_t((i + 2 * j) % 3) - 1);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    p.range = hi - lo;
  }
  return p;
}

TEST(Ssim, MatchesScikitImageOnCommittedReferenceCases) {
  std::ifstream f(std::string(DCTCHOP_TEST_DATA) + "/ssim_reference.json");
  ASSERT_TRUE(f) << "tests/data/ssim_reference.json missing";
  auto j = nlohmann::json::parse(f);
  ASSERT_GE(j["cases"].size(), 5u);
  for (const auto& c : j["cases"]) {
    const std::string kind = c["kind"];
    const u64 h = c["h"], w = c["w"];
    auto p = make(kind, h, w);
    ASSERT_NEAR(p.range, c["range"].get<double>(), 1e-9) << kind;
    auto got = ssim_plane(p.a.data(), p.b.data(), h, w, p.range);
    ASSERT_TRUE(got.has_value()) << kind;
    // README: u8 agrees with scikit-image to about 1e-15 (exact window sums), other data of
    // ordinary magnitude to about 1e-9.
    const double tol = p.range == 255.0 ? 1e-12 : 1e-9;
    EXPECT_NEAR(*got, c["ssim"].get<double>(), tol) << kind << " " << h << "x" << w;
  }
}

TEST(Ssim, SlidingImplementationEqualsDirectPerWindowComputation) {
  std::mt19937 rng(17);
  struct shape { u64 h, w; };
  for (auto s : {shape{7, 7}, shape{7, 40}, shape{33, 8}, shape{64, 48}, shape{19, 23}}) {
    std::vector<double> a(s.h * s.w), b(a.size());
    std::uniform_int_distribution<int> px(0, 255), noise(-20, 20);
    for (u64 k = 0; k < a.size(); ++k) {
      a[k] = px(rng);
      b[k] = std::clamp(a[k] + noise(rng), 0.0, 255.0);
    }
    auto got = ssim_plane(a.data(), b.data(), s.h, s.w, 255.0);
    ASSERT_TRUE(got);
    EXPECT_NEAR(*got, slow_ssim(a, b, s.h, s.w, 255.0), 1e-9) << s.h << "x" << s.w;
  }
}

TEST(Ssim, ConstantPlanesAndPlanesBelowSevenBySeven) {
  std::vector<double> a(100, 42.0), b(100, 42.0), c(100, 43.0);
  EXPECT_DOUBLE_EQ(*ssim_plane(a.data(), b.data(), 10, 10, 255.0), 1.0);
  // Both constant: SSIM reduces to the luminance term (2 m1 m2 + C1) / (m1^2 + m2^2 + C1).
  const double c1 = std::pow(0.01 * 255, 2);
  EXPECT_NEAR(*ssim_plane(a.data(), c.data(), 10, 10, 255.0),
              (2 * 42.0 * 43.0 + c1) / (42.0 * 42.0 + 43.0 * 43.0 + c1), 1e-12);
  EXPECT_FALSE(ssim_plane(a.data(), b.data(), 6, 16, 255.0).has_value());
  EXPECT_FALSE(ssim_plane(a.data(), b.data(), 16, 6, 255.0).has_value());
}

// ---- the u8 path: exact integer statistics, planes split from interleaved rows ----------

/** SSIM of a u8 batch through the accumulator (the path compress, eval and verify take). */
double u8_ssim(const const_sample_view& a, const const_sample_view& b, int threads = 1) {
  quality_accumulator q(dtype::u8, std::nullopt, true);
  q.add(a, b, threads);
  EXPECT_EQ(q.result().ssim_planes, a.samples * a.planes);
  return q.result().ssim.value_or(-1.0);
}

/** Plane c of sample n of a view, as doubles in row-major order. */
std::vector<double> plane_of(const const_sample_view& v, u64 n, u64 c) {
  std::vector<double> out;
  for (u64 r = 0; r < v.height; ++r)
    for (u64 x = 0; x < v.width; ++x)
      out.push_back(static_cast<const std::uint8_t*>(
          v.data)[n * v.stride_sample + c * v.stride_plane + r * v.stride_row + x * v.stride_col]);
  return out;
}

double slow_mean_ssim(const const_sample_view& a, const const_sample_view& b) {
  double sum = 0;
  for (u64 n = 0; n < a.samples; ++n)
    for (u64 c = 0; c < a.planes; ++c)
      sum += slow_ssim(plane_of(a, n, c), plane_of(b, n, c), a.height, a.width, 255.0);
  return sum / static_cast<double>(a.samples * a.planes);
}

TEST(Ssim, U8IntegerPathMatchesScikitImageOnCommittedReferenceCases) {
  std::ifstream f(std::string(DCTCHOP_TEST_DATA) + "/ssim_reference.json");
  ASSERT_TRUE(f) << "tests/data/ssim_reference.json missing";
  const auto j = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& c : j["cases"]) {
    if (c["range"].get<double>() != 255.0) continue;  // the u8 cases
    const u64 h = c["h"], w = c["w"];
    auto p = make(c["kind"], h, w);
    std::vector<std::uint8_t> a(p.a.begin(), p.a.end()), b(p.b.begin(), p.b.end());
    geometry g{layout::nhw, 1, 1, h, w};
    EXPECT_NEAR(u8_ssim(make_view(g, dtype::u8, static_cast<const void*>(a.data()), 1),
                        make_view(g, dtype::u8, static_cast<const void*>(b.data()), 1)),
                c["ssim"].get<double>(), 1e-12)
        << c["kind"] << " " << h << "x" << w;
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(Ssim, U8SsimEqualsTheDirectComputationInEveryLayoutAndOnACrop) {
  // Interleaved rows of 1 to 4 planes are split in one pass (3 planes by its own loop), planar
  // rows are used in place, and a crop (rows longer than the plane) takes the planar path.
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> px(0, 255), noise(-12, 12);
  auto pair_of = [&](u64 count) {
    std::pair<std::vector<std::uint8_t>, std::vector<std::uint8_t>> p;
    for (u64 k = 0; k < count; ++k) {
      p.first.push_back(static_cast<std::uint8_t>(px(rng)));
      p.second.push_back(static_cast<std::uint8_t>(std::clamp(p.first.back() + noise(rng), 0, 255)));
    }
    return p;
  };
  struct setting { layout lay; u64 planes, h, w; };
  for (auto s : {setting{layout::nhwc, 3, 19, 23}, setting{layout::nhwc, 2, 9, 30},
                 setting{layout::nhwc, 4, 12, 7}, setting{layout::nchw, 3, 16, 11},
                 setting{layout::nhw, 1, 40, 33}}) {
    geometry g{s.lay, 3, s.planes, s.h, s.w};
    auto [a, b] = pair_of(g.samples * g.values_per_sample());
    auto va = make_view(g, dtype::u8, static_cast<const void*>(a.data()), g.samples);
    auto vb = make_view(g, dtype::u8, static_cast<const void*>(b.data()), g.samples);
    EXPECT_NEAR(u8_ssim(va, vb, 2), slow_mean_ssim(va, vb), 1e-12)
        << to_string(s.lay) << " " << s.planes << " planes";
  }
  // The planes of an NHWC batch, as NCHW.
  auto planar = [](const std::vector<std::uint8_t>& v, const geometry& g) {
    std::vector<std::uint8_t> out(v.size());
    const u64 hw = g.height * g.width, c = g.planes;
    for (u64 n = 0; n < g.samples; ++n)
      for (u64 p = 0; p < c; ++p)
        for (u64 k = 0; k < hw; ++k) out[(n * c + p) * hw + k] = v[(n * hw + k) * c + p];
    return out;
  };
  // Many planes are measured in groups that keep their sums within u8_ssim_group_bytes: 7
  // planes of 1024 columns make groups of 5 and 2. Interleaved, planar, and one of each
  // (neither contiguous: the planar one is read plane by plane within each group).
  {
    geometry gi{layout::nhwc, 1, 7, 9, 1024}, gp{layout::nchw, 1, 7, 9, 1024};
    ASSERT_GT(7 * detail::u8_ssim_plane_bytes(1024), detail::u8_ssim_group_bytes)
        << "the case no longer splits";
    ASSERT_EQ(detail::u8_ssim_group_bytes / detail::u8_ssim_plane_bytes(1024), 5u)
        << "groups of 5 and 2, as said";
    auto [a, b] = pair_of(gi.values_per_sample());
    const auto ap = planar(a, gi), bp = planar(b, gi);
    auto ai = make_view(gi, dtype::u8, static_cast<const void*>(a.data()), 1);
    auto bi = make_view(gi, dtype::u8, static_cast<const void*>(b.data()), 1);
    auto apv = make_view(gp, dtype::u8, static_cast<const void*>(ap.data()), 1);
    auto bpv = make_view(gp, dtype::u8, static_cast<const void*>(bp.data()), 1);
    const double want = slow_mean_ssim(ai, bi);
    EXPECT_NEAR(u8_ssim(ai, bi), want, 1e-12) << "interleaved, in groups";
    EXPECT_NEAR(u8_ssim(apv, bpv), want, 1e-12) << "planar, in groups";
    EXPECT_NEAR(u8_ssim(ai, bpv), want, 1e-12) << "interleaved against planar, in groups";
  }
  {  // one view interleaved, the other planar, RGB
    geometry gi{layout::nhwc, 2, 3, 11, 13}, gp{layout::nchw, 2, 3, 11, 13};
    auto [a, b] = pair_of(gi.samples * gi.values_per_sample());
    const auto bp = planar(b, gi);
    auto va = make_view(gi, dtype::u8, static_cast<const void*>(a.data()), 2);
    auto vb = make_view(gp, dtype::u8, static_cast<const void*>(bp.data()), 2);
    auto vbi = make_view(gi, dtype::u8, static_cast<const void*>(b.data()), 2);
    EXPECT_NEAR(u8_ssim(va, vb), slow_mean_ssim(va, vbi), 1e-12) << "interleaved vs planar";
  }
  {  // every other column: neither contiguous nor interleaved
    geometry g{layout::nhw, 1, 1, 12, 30};
    auto [a, b] = pair_of(g.values_per_sample());
    auto va = make_view(g, dtype::u8, static_cast<const void*>(a.data()), 1);
    auto vb = make_view(g, dtype::u8, static_cast<const void*>(b.data()), 1);
    va.width = vb.width = 15;
    va.stride_col = vb.stride_col = 2;
    EXPECT_NEAR(u8_ssim(va, vb), slow_mean_ssim(va, vb), 1e-12) << "strided columns";
  }
  // The 10 x 9 top-left corner of 2 samples of 15 x 20.
  geometry full{layout::nhw, 2, 1, 15, 20};
  auto [a, b] = pair_of(full.samples * full.values_per_sample());
  auto va = make_view(full, dtype::u8, static_cast<const void*>(a.data()), 2);
  auto vb = make_view(full, dtype::u8, static_cast<const void*>(b.data()), 2);
  va.height = vb.height = 10;
  va.width = vb.width = 9;
  EXPECT_NEAR(u8_ssim(va, vb), slow_mean_ssim(va, vb), 1e-12);
}

TEST(Ssim, PlanesWiderThanAColumnTileMeasureAsTheDirectComputation) {
  // Rows of more than 8192 windows are measured in column tiles (a state of O(7 x 8192), not
  // O(7 x width): 900 MiB a thread for 8 x 4M f32 planes); the tiles' windows and their sums
  // are those of one pass. 9 x 16699 planes: tiles of 8192, 8192 and 309 windows (5 past the
  // lanes). (test_quality_grid holds the figures to the device's order bit for bit.)
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> px(0, 255), noise(-20, 20);
  const u64 h = 9, w = 16699;
  geometry gi{layout::nhwc, 1, 3, h, w}, gp{layout::nchw, 1, 3, h, w};
  std::vector<std::uint8_t> a(gi.values_per_sample()), b(a.size());
  for (u64 k = 0; k < a.size(); ++k) {
    a[k] = static_cast<std::uint8_t>(px(rng));
    b[k] = static_cast<std::uint8_t>(std::clamp(a[k] + noise(rng), 0, 255));
  }
  std::vector<std::uint8_t> ap(a.size()), bp(a.size());  // the same planes, planar
  for (u64 c = 0; c < 3; ++c)
    for (u64 i = 0; i < h * w; ++i) {
      ap[c * h * w + i] = a[i * 3 + c];
      bp[c * h * w + i] = b[i * 3 + c];
    }
  const auto vi = [&](const std::vector<std::uint8_t>& v) {
    return make_view(gi, dtype::u8, static_cast<const void*>(v.data()), 1);
  };
  const auto vp = [&](const std::vector<std::uint8_t>& v) {
    return make_view(gp, dtype::u8, static_cast<const void*>(v.data()), 1);
  };
  const double want = slow_mean_ssim(vi(a), vi(b));
  ASSERT_GT(want, 0.2);
  ASSERT_LT(want, 0.99);
  const double interleaved = u8_ssim(vi(a), vi(b)), planar = u8_ssim(vp(ap), vp(bp));
  EXPECT_NEAR(interleaved, want, 1e-12);
  EXPECT_EQ(interleaved, planar) << "a tile of strided columns against one of contiguous ones";

  // Floats: the dense path and an f64 view, each tiled, against the direct computation and
  // each other, bit for bit (the same shift, windows and order).
  const std::vector<double> fa(ap.begin(), ap.begin() + h * w), fb(bp.begin(), bp.begin() + h * w);
  const auto dense = ssim_plane(fa.data(), fb.data(), h, w, 255.0);
  ASSERT_TRUE(dense);
  EXPECT_NEAR(*dense, slow_ssim(fa, fb, h, w, 255.0), 1e-12);
  geometry g{layout::hw, 1, 1, h, w};
  quality_accumulator q(dtype::f64, 255.0, true);
  q.add(make_view(g, dtype::f64, static_cast<const void*>(fa.data()), 1),
        make_view(g, dtype::f64, static_cast<const void*>(fb.data()), 1));
  ASSERT_TRUE(q.result().ssim.has_value());
  EXPECT_EQ(*q.result().ssim, *dense);
}

TEST(Psnr, U8SquaredErrorsPastTheInt32RangeSumExactly) {
  // 400 x 400 values of error 255: the sum, 1.04e10, passes 2^31 many times over; u8 errors
  // are summed in 32-bit runs of 2^15 values and then in double.
  geometry g{layout::nhw, 1, 1, 400, 400};
  std::vector<std::uint8_t> a(160000, 255), b(160000, 0);
  b[7] = 254;  // one error of 1, to see that the sum is exact, not rounded
  quality_accumulator q(dtype::u8, std::nullopt, false);
  q.add(make_view(g, dtype::u8, static_cast<const void*>(a.data()), 1),
        make_view(g, dtype::u8, static_cast<const void*>(b.data()), 1));
  EXPECT_EQ(q.result().mse, (159999.0 * 65025.0 + 1.0) / 160000.0);
  EXPECT_EQ(q.result().max_abs_error, 255.0);
}

TEST(MetricKernels, BaselineAndAvx2CopiesGiveIdenticalFigures) {
#if !defined(DCTCHOP_HAVE_AVX2_KERNELS)
  GTEST_SKIP() << "no AVX2 kernel copy in this build";
#else
  if (!detail::use_avx2_kernels()) GTEST_SKIP() << "this processor has no AVX2/F16C";
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> val(0.0, 1.0);
  for (dtype t : {dtype::u8, dtype::i8, dtype::u16, dtype::i16, dtype::i32, dtype::u32,
                  dtype::f16, dtype::f32, dtype::f64}) {
    for (auto lay : {layout::nhwc, layout::nchw}) {
      geometry g{lay, 2, 3, 21, 37};
      const u64 count = g.samples * g.values_per_sample();
      std::vector<std::byte> a(count * size_of(t)), b(a.size());
      for (u64 k = 0; k < count; ++k) {  // values spread over the type's range, b near a
        const double x = val(rng), y = std::clamp(x + 0.05 * (val(rng) - 0.5), 0.0, 1.0);
        auto put = [&](auto tag) {
          using T = decltype(tag);
          const double lo = std::is_integral_v<T> ? double(std::numeric_limits<T>::min()) : 0.0;
          const double span = std::is_integral_v<T> ? double(std::numeric_limits<T>::max()) - lo : 1.0;
          reinterpret_cast<T*>(a.data())[k] = static_cast<T>(lo + x * span);
          reinterpret_cast<T*>(b.data())[k] = static_cast<T>(lo + y * span);
        };
        switch (t) {
          case dtype::u8: put(std::uint8_t{}); break;
          case dtype::u16: put(std::uint16_t{}); break;
          case dtype::i16: put(std::int16_t{}); break;
          case dtype::f32: put(float{}); break;
          case dtype::f64: put(double{}); break;
          case dtype::f16: put(detail::half_value{}); break;
          case dtype::i8: put(std::int8_t{}); break;
          case dtype::i32: put(std::int32_t{}); break;
          case dtype::u32: put(std::uint32_t{}); break;
        }
      }
      auto va = make_view(g, t, static_cast<const void*>(a.data()), g.samples);
      auto vb = make_view(g, t, static_cast<const void*>(b.data()), g.samples);
      const double range = integer_range(t).value_or(1.0);
      for (u64 n = 0; n < g.samples; ++n) {
        const auto s1 = detail::generic::sample_stats(va, vb, n);
        const auto s2 = detail::avx2::sample_stats(va, vb, n);
        EXPECT_EQ(s1.sse, s2.sse) << to_string(t);
        EXPECT_EQ(s1.max_abs, s2.max_abs) << to_string(t);
        EXPECT_EQ(s1.mn, s2.mn) << to_string(t);
        EXPECT_EQ(s1.mx, s2.mx) << to_string(t);
        EXPECT_GT(s1.sse, 0.0) << to_string(t);
        EXPECT_EQ(detail::generic::sample_ssim(va, vb, n, range),
                  detail::avx2::sample_ssim(va, vb, n, range))
            << to_string(t) << " " << to_string(lay);
      }
    }
  }
  // f32 and f64 statistics with NaN, infinities and signed zeros in either input (the AVX2
  // copy's intrinsics must pick the same operand as std::max and std::min), bit for bit.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> fa(45), fb(45);
  for (std::size_t k = 0; k < fa.size(); ++k) {
    fa[k] = static_cast<float>(val(rng)) - 0.5f;
    fb[k] = fa[k] + 0.01f;
  }
  fa[0] = -0.0f;
  fb[0] = 0.0f;
  fa[9] = nan;
  fb[17] = nan;
  fa[20] = inf;
  fa[21] = -inf;
  fb[30] = -0.0f;
  fa[31] = 0.0f;
  fa[40] = nan;  // in the scalar tail
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    const std::vector<double> da(a.begin(), a.end()), db(b.begin(), b.end());
    geometry g{layout::hw, 1, 1, 1, a.size()};
    for (dtype t : {dtype::f32, dtype::f64}) {
      const bool f = t == dtype::f32;
      auto va = make_view(g, t, f ? static_cast<const void*>(a.data()) : da.data(), 1);
      auto vb = make_view(g, t, f ? static_cast<const void*>(b.data()) : db.data(), 1);
      const auto s1 = detail::generic::sample_stats(va, vb, 0);
      const auto s2 = detail::avx2::sample_stats(va, vb, 0);
      for (auto [x, y] : {std::pair{s1.sse, s2.sse}, std::pair{s1.max_abs, s2.max_abs},
                          std::pair{s1.mn, s2.mn}, std::pair{s1.mx, s2.mx}})
        EXPECT_EQ(std::bit_cast<std::uint64_t>(x), std::bit_cast<std::uint64_t>(y))
            << what << ", " << to_string(t) << ", " << a.size() << " values: " << x << " vs " << y;
    }
  };
  for (u64 len : {u64(8), u64(16), u64(45)})
    same_bits({fa.begin(), fa.begin() + len}, {fb.begin(), fb.begin() + len}, "mixed");
  // Cases where a swapped operand shows. Signed zeros: lane 0 starts at -0.0 (the first
  // value) and then meets +0.0; which one a min or max keeps shows in the sign bit, and the
  // final reduction keeps lane 0's.
  std::vector<float> z(16, 0.0f), zb(16, 0.0f);
  z[0] = -0.0f;
  same_bits(z, zb, "signed zeros");
  // NaN between a large and a small value in the same lane (lanes 1..3: positions j, 8 + j,
  // 16 + j): std::max(l, NaN) keeps l, so the large value must survive, and the small one must
  // not replace it. In the original and in the difference.
  std::vector<float> na(24, 0.5f), nb(24, 0.5f);
  for (int j = 1; j < 4; ++j) {
    na[j] = 9.0f;
    na[8 + j] = nan;
    na[16 + j] = -9.0f;
    nb[j] = 0.0f;
    nb[8 + j] = 0.5f;
    nb[16 + j] = -9.0f;
  }
  same_bits(na, nb, "NaN between extremes");
#endif
}

// ---- PSNR, RMSE, max error --------------------------------------------------------------

TEST(Psnr, ThirtyTwoBitIntegersSquareErrorsPastTheInt64RangeAndUseTheirWholeRange) {
  // u32: errors of 2^32 - 1 (their square, 1.8e19, passes int64), R = 2^32 - 1: PSNR 0 dB
  // where every value is that far off. i32 likewise, from INT32_MIN to INT32_MAX.
  geometry g{layout::hw, 1, 1, 2, 2};
  std::vector<std::uint32_t> a{0, 0, 4294967295u, 7}, b{4294967295u, 4294967295u, 0, 7};
  quality_accumulator acc(dtype::u32, std::nullopt, false);
  acc.add(make_view(g, dtype::u32, static_cast<const void*>(a.data()), 1),
          make_view(g, dtype::u32, static_cast<const void*>(b.data()), 1));
  const double r = 4294967295.0;
  auto q = acc.result();
  EXPECT_DOUBLE_EQ(q.range, r);
  EXPECT_DOUBLE_EQ(q.max_abs_error, r);
  EXPECT_DOUBLE_EQ(q.mse, 3.0 * r * r / 4.0);
  ASSERT_TRUE(q.psnr_db);
  EXPECT_NEAR(*q.psnr_db, -10.0 * std::log10(0.75), 1e-9);
  std::vector<std::int32_t> c{-2147483647 - 1, 5, 2147483647, 0}, d{2147483647, 5, 2147483647, 0};
  quality_accumulator ai(dtype::i32, std::nullopt, false);
  ai.add(make_view(g, dtype::i32, static_cast<const void*>(c.data()), 1),
         make_view(g, dtype::i32, static_cast<const void*>(d.data()), 1));
  EXPECT_DOUBLE_EQ(ai.result().mse, r * r / 4.0);
  EXPECT_DOUBLE_EQ(ai.result().max_abs_error, r);
  EXPECT_NEAR(*ai.result().psnr_db, -10.0 * std::log10(0.25), 1e-9);
}

TEST(Psnr, U8FiguresEqualHandComputedValues) {
  // errors 1, 0, 0, 3: MSE = 10 / 4 = 2.5, RMSE = 1.58113883, max 3,
  // PSNR = 20 log10(255) - 10 log10(2.5) = 48.130803609 - 3.979400087 = 44.151403522 dB
  std::vector<std::uint8_t> a{0, 10, 20, 30}, b{1, 10, 20, 27};
  geometry g{layout::hw, 1, 1, 2, 2};
  quality_accumulator acc(dtype::u8, std::nullopt, true);
  acc.add(make_view(g, dtype::u8, static_cast<const void*>(a.data()), 1),
          make_view(g, dtype::u8, static_cast<const void*>(b.data()), 1));
  auto q = acc.result();
  EXPECT_DOUBLE_EQ(q.mse, 2.5);
  EXPECT_NEAR(q.rmse, 1.5811388300841898, 1e-12);
  EXPECT_DOUBLE_EQ(q.max_abs_error, 3.0);
  EXPECT_DOUBLE_EQ(q.range, 255.0);
  EXPECT_NEAR(*q.psnr_db, 44.15140352195871, 1e-9);
  EXPECT_NEAR(q.nrmse, 1.5811388300841898 / 255.0, 1e-12);
  EXPECT_FALSE(q.ssim.has_value()) << "a 2x2 plane has no 7x7 window";
}

TEST(Psnr, FloatRangeIsMaxMinusMinOfTheOriginal) {
  // R = 4 - 0 = 4, MSE = 0.25 / 4 = 0.0625: PSNR = 20 log10 4 + 10 log10 16 = 24.0823996531 dB
  std::vector<float> a{0, 1, 2, 4}, b{0, 1.5f, 2, 4};
  geometry g{layout::hw, 1, 1, 1, 4};
  quality_accumulator acc(dtype::f32, std::nullopt, false);
  acc.add(make_view(g, dtype::f32, static_cast<const void*>(a.data()), 1),
          make_view(g, dtype::f32, static_cast<const void*>(b.data()), 1));
  auto q = acc.result();
  EXPECT_DOUBLE_EQ(q.range, 4.0);
  EXPECT_NEAR(*q.psnr_db, 24.082399653118497, 1e-9);
  EXPECT_DOUBLE_EQ(q.max_abs_error, 0.5);
}

TEST(Psnr, PerSampleMinimumAndMeanAndLosslessSamples) {
  // Three 1x2 u8 samples: lossless; errors (1,1) -> MSE 1; errors (4,0) -> MSE 8.
  std::vector<std::uint8_t> a{5, 5, 10, 10, 50, 60}, b{5, 5, 11, 9, 54, 60};
  geometry g{layout::nhw, 3, 1, 1, 2};
  quality_accumulator acc(dtype::u8, std::nullopt, false);
  acc.add(make_view(g, dtype::u8, static_cast<const void*>(a.data()), 3),
          make_view(g, dtype::u8, static_cast<const void*>(b.data()), 3), 2);
  auto q = acc.result();
  const double l = 20 * std::log10(255.0);
  EXPECT_EQ(q.lossless_samples, 1u);
  EXPECT_NEAR(*q.sample_psnr_min, l - 10 * std::log10(8.0), 1e-9);
  EXPECT_NEAR(*q.sample_psnr_mean, l - 10 * (std::log10(1.0) + std::log10(8.0)) / 2, 1e-9);
  EXPECT_NEAR(*q.psnr_db, l - 10 * std::log10(18.0 / 6.0), 1e-9);
}

TEST(Psnr, LosslessIsReportedAsInfiniteNotAsANumber) {
  std::vector<std::uint8_t> a{1, 2, 3};
  geometry g{layout::hw, 1, 1, 1, 3};
  quality_accumulator acc(dtype::u8, std::nullopt, false);
  auto v = make_view(g, dtype::u8, static_cast<const void*>(a.data()), 1);
  acc.add(v, v);
  auto q = acc.result();
  EXPECT_FALSE(q.psnr_db.has_value());
  EXPECT_FALSE(q.sample_psnr_min.has_value());
  EXPECT_EQ(q.mse, 0.0);
}

// ---- the accumulator over batches ---------------------------------------------------------

TEST(QualityAccumulator, ChunksThreadsAndLayoutsGiveTheSameFigures) {
  // NHWC u8, 6 samples of 20x17x3: one batch on one thread, or three batches on two threads,
  // must give the same PSNR and SSIM; SSIM is the mean of the per-plane values.
  const u64 n = 6, h = 20, w = 17, c = 3;
  std::mt19937 rng(5);
  std::vector<std::uint8_t> a(n * h * w * c), b(a.size());
  std::uniform_int_distribution<int> px(0, 255), noise(-9, 9);
  for (u64 k = 0; k < a.size(); ++k) {
    a[k] = static_cast<std::uint8_t>(px(rng));
    b[k] = static_cast<std::uint8_t>(std::clamp(a[k] + noise(rng), 0, 255));
  }
  geometry g{layout::nhwc, n, c, h, w};
  quality_accumulator one(dtype::u8, std::nullopt, true), parts(dtype::u8, std::nullopt, true);
  one.add(make_view(g, dtype::u8, static_cast<const void*>(a.data()), n),
          make_view(g, dtype::u8, static_cast<const void*>(b.data()), n), 1);
  const u64 per = h * w * c;
  for (u64 s = 0; s < n; s += 2) {
    quality_accumulator chunk(dtype::u8, std::nullopt, true);
    chunk.add(make_view(g, dtype::u8, static_cast<const void*>(a.data() + s * per), 2),
              make_view(g, dtype::u8, static_cast<const void*>(b.data() + s * per), 2), 2);
    parts.merge(chunk);
  }
  auto q1 = one.result(), q2 = parts.result();
  EXPECT_NEAR(*q1.psnr_db, *q2.psnr_db, 1e-12);
  EXPECT_NEAR(*q1.ssim, *q2.ssim, 1e-12);
  EXPECT_EQ(q1.ssim_planes, n * c);
  double sum = 0;
  for (u64 s = 0; s < n; ++s)
    for (u64 ch = 0; ch < c; ++ch) {
      std::vector<double> pa(h * w), pb(h * w);
      for (u64 k = 0; k < h * w; ++k) {
        pa[k] = a[s * per + k * c + ch];
        pb[k] = b[s * per + k * c + ch];
      }
      sum += slow_ssim(pa, pb, h, w, 255.0);
    }
  EXPECT_NEAR(*q1.ssim, sum / double(n * c), 1e-9);
}

TEST(Ssim, FloatDataFarFromZeroKeepsItsPrecision) {
  // Fields near 1e3, 1e5 and 1e6 that vary by about 0.5 (f32 values, so exact in double): the
  // one-pass E[x^2] - E[x]^2 form lost 1e-8, 2e-4 and 3e-2 of the SSIM to cancellation (and
  // scikit-image loses as much). Sums of values minus one value of the plane keep it: the
  // figure equals the two-pass direct computation, in the dense path and through an f32 view.
  std::mt19937 rng(29);
  std::normal_distribution<double> step(0.0, 0.01), noise(0.0, 0.02);
  const u64 h = 40, w = 37;
  for (double offset : {1e3, 1e5, 1e6}) {
    std::vector<float> fa(h * w), fb(h * w);
    for (u64 r = 0; r < h; ++r) {
      double v = offset;
      for (u64 x = 0; x < w; ++x) {
        v += step(rng);
        fa[r * w + x] = static_cast<float>(v);
        fb[r * w + x] = static_cast<float>(v + noise(rng));
      }
    }
    const std::vector<double> a(fa.begin(), fa.end()), b(fb.begin(), fb.end());
    const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
    const double range = *hi - *lo;
    const double want = slow_ssim(a, b, h, w, range);
    auto dense = ssim_plane(a.data(), b.data(), h, w, range);
    ASSERT_TRUE(dense);
    EXPECT_NEAR(*dense, want, 1e-12) << "offset " << offset;
    geometry g{layout::hw, 1, 1, h, w};
    quality_accumulator q(dtype::f32, range, true);
    q.add(make_view(g, dtype::f32, static_cast<const void*>(fa.data()), 1),
          make_view(g, dtype::f32, static_cast<const void*>(fb.data()), 1));
    ASSERT_TRUE(q.result().ssim.has_value());
    EXPECT_NEAR(*q.result().ssim, want, 1e-12) << "offset " << offset;
  }
}

TEST(Ssim, TinyFloatDataHasTheSsimOfTheSameDataScaledUp) {
  // SSIM does not change when the data and R scale together. Of f64 data of range below
  // about 1e-77 the formula's products (R^4) fell below the smallest double: 0/0, a NaN
  // SSIM, which a --min-ssim gate let pass. Scaling by powers of two is exact, so the figures
  // agree to the last bits where both are computed in full precision.
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> value(0.0, 1.0), noise(-0.1, 0.1);
  const u64 h = 19, w = 23;
  std::vector<double> a(2 * h * w), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = value(rng);
    b[i] = a[i] + noise(rng);
  }
  const auto ssim_at = [&](double scale) {
    std::vector<double> sa(a), sb(b);
    for (auto& x : sa) x *= scale;
    for (auto& x : sb) x *= scale;
    geometry g{layout::nhw, 2, 1, h, w};
    quality_accumulator q(dtype::f64, 1.0 * scale, true);
    q.add(make_view(g, dtype::f64, static_cast<const void*>(sa.data()), 2),
          make_view(g, dtype::f64, static_cast<const void*>(sb.data()), 2));
    return q.result();
  };
  const quality one = ssim_at(1.0);
  ASSERT_TRUE(one.ssim.has_value());
  EXPECT_GT(*one.ssim, 0.3);
  EXPECT_LT(*one.ssim, 0.99);
  for (const double scale : {0x1p-200, 0x1p-300, 0x1p-400, 0x1p-480}) {  // to 3e-145
    const quality tiny = ssim_at(scale);
    ASSERT_TRUE(tiny.ssim.has_value()) << scale;
    EXPECT_NEAR(*tiny.ssim, *one.ssim, 1e-13) << scale;
    EXPECT_EQ(tiny.ssim_state, ssim_status::measured);
    EXPECT_NEAR(*tiny.psnr_db, *one.psnr_db, 1e-10) << scale;
  }
}

TEST(QualityAccumulator, FloatSsimNeedsAKnownRange) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f);
  a[3] = 2.0f;
  geometry g{layout::hw, 1, 1, 8, 8};
  quality_accumulator unknown(dtype::f32, std::nullopt, true), known(dtype::f32, 1.0, true);
  auto va = make_view(g, dtype::f32, static_cast<const void*>(a.data()), 1);
  auto vb = make_view(g, dtype::f32, static_cast<const void*>(b.data()), 1);
  unknown.add(va, vb);
  known.add(va, vb);
  EXPECT_FALSE(unknown.result().ssim.has_value());
  ASSERT_TRUE(known.result().ssim.has_value());
  EXPECT_LT(*known.result().ssim, 1.0);
}

TEST(QualityAccumulator, ViewsOfOtherSampleCountsOrOfAnotherDtypeAreRefusedNotReadPast) {
  // add() split its views into batches by the original's sample count alone: a decoded view
  // of fewer samples was read past its end (ASan: heap-buffer-overflow in the SSIM kernel).
  std::vector<std::uint8_t> two(2 * 256, 1), one(256, 2);
  const geometry g{layout::nhw, 2, 1, 16, 16};
  quality_accumulator q(dtype::u8, std::nullopt, true);
  const auto v2 = make_view(g, dtype::u8, static_cast<const void*>(two.data()), 2);
  const auto v1 = make_view(g, dtype::u8, static_cast<const void*>(one.data()), 1);
  for (const bool add : {true, false}) {
    try {
      if (add) q.add(v2, v1);
      else (void)q.measure(v2, v1);
      ADD_FAILURE() << (add ? "add" : "measure") << " took 2 samples against 1";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_STREQ(e.what(), "quality_accumulator: views differ in shape or dtype");
    }
  }
  EXPECT_EQ(q.result().samples, 0u);
  quality_accumulator f(dtype::f32, 1.0, true);
  try {
    f.add(v1, v1);
    ADD_FAILURE() << "an f32 accumulator took u8 views";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "quality_accumulator: the views are u8, the accumulator measures f32");
  }
}

TEST(QualityAccumulator, ANanErrorANullViewAndAMergeOfTwoRangesAreRefused) {
  // A NaN in the decoded copy (an archive's NaN coefficient decodes to NaN) counted the
  // sample as lossless; a null view crashed; a merge of two ranges mixed SSIM constants.
  std::vector<float> a(64, 0.5f), b(64, 0.5f);
  b[3] = std::numeric_limits<float>::quiet_NaN();
  b[9] = 1.5f;
  const geometry g{layout::hw, 1, 1, 8, 8};
  const auto va = make_view(g, dtype::f32, static_cast<const void*>(a.data()), 1);
  const auto vb = make_view(g, dtype::f32, static_cast<const void*>(b.data()), 1);
  quality_accumulator q(dtype::f32, 1.0, true);
  test::expect_error([&] { q.add(va, vb); }, errc::bad_input,
                     {"sample 0 of the measured data has an error that is not a number"});
  EXPECT_EQ(q.result().samples, 0u);
  EXPECT_EQ(q.result().lossless_samples, 0u);
  // An Inf, at a range given: an infinite error (PSNR -inf, MSE inf) and a SSIM that is not
  // a number, refused, not returned inside the optional.
  b[3] = std::numeric_limits<float>::infinity();
  q.add(va, vb);
  test::expect_error([&] { (void)q.result(); }, errc::bad_input,
                     {"quality: the data hold an infinity (in the original or the decoded "
                      "copy)"});
  quality_accumulator psnr_only(dtype::f32, 1.0, false);
  psnr_only.add(va, vb);
  test::expect_error([&] { (void)psnr_only.result(); }, errc::bad_input,
                     {"the data hold an infinity (in the original or the decoded copy): its "
                      "error is infinite"});
  // Ranges given that no data have: below 0 at once; NaN or Inf at the figures; one whose
  // SSIM constants pass the largest double, there too.
  test::expect_error([] { quality_accumulator(dtype::f32, -1.0, true); }, errc::invalid_argument,
                     {"a range R of -1; R is max - min, 0 or more"});
  for (const double r : {std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}) {
    quality_accumulator odd(dtype::f32, r, true);
    odd.add(va, va);
    test::expect_error([&] { (void)odd.result(); }, errc::invalid_argument,
                       {"quality: the range R given", "is not a finite number"});
  }
  quality_accumulator vast(dtype::f32, std::numeric_limits<double>::max(), true);
  std::vector<float> c = a;
  c[9] = 1.5f;
  vast.add(va, make_view(g, dtype::f32, static_cast<const void*>(c.data()), 1));
  test::expect_error([&] { (void)vast.result(); }, errc::out_of_range,
                     {"is too large for SSIM, whose formula multiplies terms of R^2"});
  // Finite errors whose squares pass the largest double: PSNR read -inf.
  const std::vector<double> big{0.0, 1e160, 2e160, 3e160}, off{0.0, 1.01e160, 2e160, 3e160};
  const geometry g4{layout::hw, 1, 1, 2, 2};
  quality_accumulator huge(dtype::f64, std::nullopt, false);
  huge.add(make_view(g4, dtype::f64, static_cast<const void*>(big.data()), 1),
           make_view(g4, dtype::f64, static_cast<const void*>(off.data()), 1));
  test::expect_error([&] { (void)huge.result(); }, errc::out_of_range,
                     {"quality: errors this large (up to 1e+158) have a sum of squares past "
                      "the largest double"});
  // Two accumulators given the same NaN range have the same settings.
  quality_accumulator n1(dtype::f32, std::numeric_limits<double>::quiet_NaN(), false),
      n2(dtype::f32, std::numeric_limits<double>::quiet_NaN(), false);
  n2.add(va, va);
  n1.merge(n2);
  quality_accumulator zero(dtype::f32, 0.0, false), minus_zero(dtype::f32, -0.0, false);
  zero.merge(minus_zero);  // (0 and -0 are one range)
  // ... at a range given. Taken from the data, an infinity in the original made R infinite
  // and the PSNR inf - inf: a NaN inside the optional, neither a figure nor "undefined".
  quality_accumulator from_data(dtype::f32, std::nullopt, true);
  from_data.add(vb, va);
  test::expect_error([&] { (void)from_data.result(); }, errc::bad_input,
                     {"the original holds an infinity, so its range (max - min) is infinite"});
  test::expect_error([&] { (void)from_data.result_at_data_range(); }, errc::bad_input,
                     {"infinite"});
  const std::vector<double> far{-1e308, 1e308, 0.0, 1.0};  // max - min overflows
  const std::vector<double> near_far{-1e308, 1e308, 0.5, 1.0};
  quality_accumulator wide(dtype::f64, std::nullopt, false);
  wide.add(make_view(g4, dtype::f64, static_cast<const void*>(far.data()), 1),
           make_view(g4, dtype::f64, static_cast<const void*>(near_far.data()), 1));
  test::expect_error([&] { (void)wide.result(); }, errc::out_of_range, {"max - min overflows"});
  const auto null = make_view(g, dtype::f32, static_cast<const void*>(nullptr), 1);
  test::expect_error([&] { q.add(null, null); }, errc::invalid_argument,
                     {"empty or null sample view"});
  test::expect_error([] { quality_accumulator(static_cast<dtype>(99), 1.0, true); },
                     errc::invalid_argument, {"dtype 99 is not one dctchop knows"});
  quality_accumulator other(dtype::f32, 1000.0, true);
  other.add(va, va);
  test::expect_error([&] { q.merge(other); }, errc::invalid_argument,
                     {"merging different settings"});
}

}  // namespace
