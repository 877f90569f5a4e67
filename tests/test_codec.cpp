// Codec tests: the transform against an independent naive DCT and against the matrix form,
// round trips at K = B, layouts, threads, coefficient types and their range errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "dctchop/codec.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/detail/block.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "dctchop/metrics.hpp"
#include "omp.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using u64 = std::uint64_t;

// An independent DCT-II matrix, written from the textbook formula (not dctchop::dct_matrix).
std::vector<double> naive_t(int b) {
  std::vector<double> t(b * b);
  const double pi = std::acos(-1.0);
  for (int u = 0; u < b; ++u)
    for (int x = 0; x < b; ++x)
      t[u * b + x] = (u == 0 ? std::sqrt(1.0 / b) : std::sqrt(2.0 / b)) *
                     std::cos((2 * x + 1) * u * pi / (2.0 * b));
  return t;
}

// Naive coefficients of one plane: C[iK+u][jK+v] = sum_x sum_y T[u][x] T[v][y] Xpad[iB+x][jB+y],
// with numpy "edge" padding, per element (no separability).
std::vector<double> naive_plane(const std::vector<double>& x, u64 h, u64 w, int b, int k) {
  auto t = naive_t(b);
  const u64 hb = (h + b - 1) / b, wb = (w + b - 1) / b;
  std::vector<double> c(hb * k * wb * k);
  for (u64 i = 0; i < hb; ++i)
    for (u64 j = 0; j < wb; ++j)
      for (int u = 0; u < k; ++u)
        for (int v = 0; v < k; ++v) {
          double s = 0;
          for (int r = 0; r < b; ++r)
            for (int q = 0; q < b; ++q) {
              u64 rr = std::min<u64>(i * b + r, h - 1), qq = std::min<u64>(j * b + q, w - 1);
              s += t[u * b + r] * t[v * b + q] * x[rr * w + qq];
            }
          c[(i * k + u) * (wb * k) + j * k + v] = s;
        }
  return c;
}

std::vector<float> as_floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

TEST(DctMatrix, IsOrthonormalForEveryBlockSize) {
  for (int b : {4, 8, 16, 32}) {
    auto t = dct_matrix(b);
    for (int i = 0; i < b; ++i)
      for (int j = 0; j < b; ++j) {
        double s = 0;
        for (int x = 0; x < b; ++x) s += t[i * b + x] * t[j * b + x];
        EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-12) << "B=" << b << " rows " << i << "," << j;
      }
  }
}

TEST(Encode, BlockwiseEqualsNaivePerElementDctOnRandomSizes) {
  std::mt19937_64 rng(42);
  auto be = make_backend(backend_kind::cpu, {1});
  struct case_t { u64 h, w; int b, k; };
  std::vector<case_t> cases = {{1, 1, 8, 4}, {1, 1, 4, 4}, {8, 8, 8, 8}, {13, 21, 8, 4},
                               {5, 3, 4, 2},  {33, 17, 16, 5}, {40, 70, 32, 7}, {9, 1, 8, 3},
                               {1, 30, 4, 1}, {16, 16, 8, 1}};
  for (int extra = 0; extra < 6; ++extra) {
    int b = std::vector<int>{4, 8, 16, 32}[rng() % 4];
    cases.push_back({1 + rng() % 50, 1 + rng() % 50, b, int(1 + rng() % b)});
  }
  for (const auto& cs : cases) {
    std::vector<float> x(cs.h * cs.w);
    std::uniform_real_distribution<float> d(-100.f, 100.f);
    for (auto& v : x) v = d(rng);
    codec_params p{cs.b, cs.k, coeff_type::f32, 0.0};
    geometry g{layout::hw, 1, 1, cs.h, cs.w};
    std::vector<std::byte> out(coeff_bytes_per_sample(p, g));
    be->encode(p, make_view(g, dtype::f32, static_cast<const void*>(x.data()), 1), out);
    auto got = as_floats(out);
    auto want = naive_plane(std::vector<double>(x.begin(), x.end()), cs.h, cs.w, cs.b, cs.k);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-3 + 1e-5 * std::fabs(want[i]))
          << "H=" << cs.h << " W=" << cs.w << " B=" << cs.b << " K=" << cs.k << " at " << i;
    }
  }
}

TEST(Encode, CoefficientPlaneEqualsMatrixFormLtXR) {
  // DESIGN.md step 5: Cplane = Lt * Xpad * R with Lt = M G (M keeps K of every B rows, G the
  // block-diagonal T), R likewise for the columns.
  const int b = 4, k = 2;
  const u64 h = 10, w = 7;  // padded to 12 x 8
  const u64 hp = 12, wp = 8, hc = 3 * k, wc = 2 * k;
  auto t = naive_t(b);
  auto lt_of = [&](u64 rows_c, u64 cols_p) {
    std::vector<double> m(rows_c * cols_p, 0.0);
    for (u64 i = 0; i < rows_c / k; ++i)
      for (int u = 0; u < k; ++u)
        for (int x = 0; x < b; ++x) m[(i * k + u) * cols_p + i * b + x] = t[u * b + x];
    return m;
  };
  auto lt = lt_of(hc, hp), rt = lt_of(wc, wp);  // R = rt^T
  std::vector<double> xpad(hp * wp);
  std::vector<std::uint8_t> img(h * w);
  for (u64 r = 0; r < h; ++r)
    for (u64 c = 0; c < w; ++c) img[r * w + c] = static_cast<std::uint8_t>((r * 37 + c * 11) % 256);
  for (u64 r = 0; r < hp; ++r)
    for (u64 c = 0; c < wp; ++c)
      xpad[r * wp + c] = img[std::min(r, h - 1) * w + std::min(c, w - 1)] - 128.0;
  std::vector<double> want(hc * wc, 0.0);
  for (u64 i = 0; i < hc; ++i)
    for (u64 j = 0; j < wc; ++j)
      for (u64 r = 0; r < hp; ++r)
        for (u64 c = 0; c < wp; ++c) want[i * wc + j] += lt[i * hp + r] * xpad[r * wp + c] * rt[j * wp + c];

  codec_params p{b, k, coeff_type::f32, 128.0};
  geometry g{layout::hw, 1, 1, h, w};
  std::vector<std::byte> out(coeff_bytes_per_sample(p, g));
  make_backend(backend_kind::cpu)->encode(p, make_view(g, dtype::u8, static_cast<const void*>(img.data()), 1), out);
  auto got = as_floats(out);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3) << i;
}

// ---- round trips at K = B --------------------------------------------------------------

template <typename T>
std::vector<T> random_data(std::size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, detail::half_value>) {
    std::normal_distribution<double> d(3.0, 50.0);
    for (auto& e : v) e = static_cast<T>(d(rng));
  } else {
    std::uniform_int_distribution<long long> d(std::numeric_limits<T>::min(),
                                               std::numeric_limits<T>::max());
    for (auto& e : v) e = static_cast<T>(d(rng));
  }
  return v;
}

double relative_eps(coeff_type c) {
  switch (c) {
    case coeff_type::f16: return std::ldexp(1.0, -11);
    case coeff_type::bf16: return std::ldexp(1.0, -8);
    case coeff_type::f32: return std::ldexp(1.0, -24);
    case coeff_type::i16: return 0.0;
  }
  return 0;
}

template <typename T>
void round_trip_case(dtype dt, coeff_type ct, int b, std::mt19937_64& rng) {
  const u64 n = 2, h = 19, w = 13;
  geometry g{layout::nhw, n, 1, h, w};
  auto x = random_data<T>(n * h * w, rng);
  codec_params p{b, b, ct, default_offset(dt)};
  auto be = make_backend(backend_kind::cpu, {2});
  std::vector<std::byte> coeffs(n * coeff_bytes_per_sample(p, g));
  double xmax = 0;
  for (auto v : x) xmax = std::max(xmax, std::fabs(double(v) - p.offset));
  const double cmax = b * xmax;  // |C[u][v]| <= B max |x - offset|
  try {
    be->encode(p, make_view(g, dt, static_cast<const void*>(x.data()), n), coeffs);
  } catch (const error& e) {
    // Only a type that cannot hold the coefficients may refuse (f16 or i16, with data whose
    // bound passes its largest value: full-range u16 and i16 here), naming one that can.
    EXPECT_EQ(e.code(), errc::out_of_range) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
    EXPECT_TRUE(ct == coeff_type::f16 || ct == coeff_type::i16) << e.what();
    EXPECT_GT(cmax, ct == coeff_type::f16 ? 65504.0 : 32767.0)
        << "refused coefficients that fit: " << to_string(dt) << " B=" << b << ": " << e.what();
    return;
  }
  std::vector<T> y(x.size());
  be->decode(p, coeffs, make_view(g, dt, static_cast<void*>(y.data()), n));
  // Error bound: each stored coefficient errs by at most eps*|Cmax| (0.5 for i16); a pixel is
  // a sum of B*B basis functions whose absolute values sum to at most B.
  double coef_err = ct == coeff_type::i16 ? 0.5 : relative_eps(ct) * cmax;
  double bound = b * coef_err + 1e-5 * (xmax + 1.0);
  if (!is_float(dt)) bound = std::floor(bound + 0.5);  // outputs are rounded integers
  // f16 outputs are rounded to f16: half an ulp of the largest value more, at most
  if (dt == dtype::f16) bound += std::ldexp(xmax + std::fabs(p.offset), -11);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])));
  EXPECT_LE(worst, bound) << "dtype " << to_string(dt) << " coeff " << to_string(ct) << " B=" << b;
}

TEST(RoundTrip, ChopEqualsBlockIsWithinStoragePrecisionForEveryDtypeAndCoeffType) {
  std::mt19937_64 rng(7);
  for (int b : {4, 8, 16}) {
    for (auto ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
      round_trip_case<std::uint8_t>(dtype::u8, ct, b, rng);
      round_trip_case<std::uint16_t>(dtype::u16, ct, b, rng);
      round_trip_case<std::int16_t>(dtype::i16, ct, b, rng);
      round_trip_case<float>(dtype::f32, ct, b, rng);
      round_trip_case<double>(dtype::f64, ct, b, rng);
      round_trip_case<detail::half_value>(dtype::f16, ct, b, rng);
      round_trip_case<std::int8_t>(dtype::i8, ct, b, rng);
      round_trip_case<std::int32_t>(dtype::i32, ct, b, rng);
      round_trip_case<std::uint32_t>(dtype::u32, ct, b, rng);
    }
  }
}

TEST(RoundTrip, F32AndF64DataAtTheirLargestDecodeWithinTheirRangeNotToInf) {
  // 63 f32 values at the largest and one a little below, offset by their mean: the decode ran
  // past the largest value into +inf (half the values), which compress then called not
  // finite and verify a corrupt archive. Decoded values are clamped to the dtype's range,
  // as f16's are.
  const auto check = [](auto top, dtype type) {
    using T = decltype(top);
    std::vector<T> x(64, top);
    x[9] = static_cast<T>(0.99) * top;
    double mean = 0;
    for (const T v : x) mean += static_cast<double>(v) / 64;
    geometry g{layout::hw, 1, 1, 8, 8};
    for (const int chop : {2, 4, 8}) {
      const codec_params p{8, chop, coeff_type::f32, static_cast<double>(static_cast<T>(mean))};
      const auto be = make_backend(backend_kind::cpu, {1});
      std::vector<std::byte> c(coeff_bytes_per_sample(p, g));
      be->encode(p, make_view(g, type, static_cast<const void*>(x.data()), 1), c);
      std::vector<T> y(64);
      be->decode(p, c, make_view(g, type, static_cast<void*>(y.data()), 1));
      int at_top = 0;
      for (const T v : y) {
        ASSERT_TRUE(std::isfinite(v)) << chop;
        at_top += v == top;
      }
      EXPECT_GT(at_top, 0) << chop;
    }
  };
  check(std::numeric_limits<float>::max(), dtype::f32);
}

TEST(RoundTrip, U8WithF16AtBlock8IsExact) {
  // DESIGN.md: for u8 at B <= 16 every coefficient lies within +-2048 where f16 errs by at most
  // 0.5 ulp; at K = B the decoded bytes must equal the input.
  std::mt19937_64 rng(3);
  geometry g{layout::nhw, 3, 1, 24, 40};
  auto x = random_data<std::uint8_t>(3 * 24 * 40, rng);
  codec_params p{8, 8, coeff_type::f16, 128};
  auto be = make_backend(backend_kind::cpu);
  std::vector<std::byte> c(3 * coeff_bytes_per_sample(p, g));
  be->encode(p, make_view(g, dtype::u8, static_cast<const void*>(x.data()), 3), c);
  std::vector<std::uint8_t> y(x.size());
  be->decode(p, c, make_view(g, dtype::u8, static_cast<void*>(y.data()), 3));
  EXPECT_EQ(x, y);
}

TEST(RoundTrip, SmoothImageAtChop4HasHighPsnrAndChop1IsBlockMeans) {
  const u64 h = 32, w = 32;
  std::vector<float> x(h * w);
  for (u64 r = 0; r < h; ++r)
    for (u64 c = 0; c < w; ++c) x[r * w + c] = std::sin(r / 9.0) + std::cos(c / 7.0);
  geometry g{layout::hw, 1, 1, h, w};
  auto be = make_backend(backend_kind::cpu);
  codec_params p1{8, 1, coeff_type::f32, 0};
  std::vector<std::byte> c(coeff_bytes_per_sample(p1, g));
  be->encode(p1, make_view(g, dtype::f32, static_cast<const void*>(x.data()), 1), c);
  std::vector<float> y(h * w);
  be->decode(p1, c, make_view(g, dtype::f32, static_cast<void*>(y.data()), 1));
  // K = 1 keeps only the DC term: every pixel decodes to its block's mean.
  for (u64 bi = 0; bi < 4; ++bi)
    for (u64 bj = 0; bj < 4; ++bj) {
      double mean = 0;
      for (u64 r = 0; r < 8; ++r)
        for (u64 q = 0; q < 8; ++q) mean += x[(bi * 8 + r) * w + bj * 8 + q] / 64.0;
      EXPECT_NEAR(y[(bi * 8 + 3) * w + bj * 8 + 5], mean, 1e-5);
    }
  // K = 4: 48.890 dB (R = max - min), which a NumPy reference of DESIGN.md's codec computes
  // for this image (T X T^t per block, chop, T^t C T in float64); f32 storage adds nothing
  // visible at this precision. Chop 1 is far below it.
  codec_params p4{8, 4, coeff_type::f32, 0};
  std::vector<std::byte> c4(coeff_bytes_per_sample(p4, g));
  be->encode(p4, make_view(g, dtype::f32, static_cast<const void*>(x.data()), 1), c4);
  std::vector<float> y4(h * w);
  be->decode(p4, c4, make_view(g, dtype::f32, static_cast<void*>(y4.data()), 1));
  const std::vector<double> xd(x.begin(), x.end()), y1(y.begin(), y.end()), y4d(y4.begin(), y4.end());
  const double r = test::value_range(xd);
  EXPECT_NEAR(test::psnr_of(xd, y4d, r), 48.890, 0.01);
  EXPECT_LT(test::psnr_of(xd, y1, r), 40.0);
}

TEST(Layouts, NhwcAndNchwCopiesDecodeToTheSameValues) {
  const u64 n = 2, c = 3, h = 11, w = 14;
  std::vector<std::uint8_t> nhwc(n * h * w * c), nchw(n * c * h * w);
  for (u64 s = 0; s < n; ++s)
    for (u64 ch = 0; ch < c; ++ch)
      for (u64 r = 0; r < h; ++r)
        for (u64 q = 0; q < w; ++q) {
          auto v = static_cast<std::uint8_t>((s * 50 + ch * 80 + r * r + q * 7) % 256);
          nhwc[((s * h + r) * w + q) * c + ch] = v;
          nchw[((s * c + ch) * h + r) * w + q] = v;
        }
  auto be = make_backend(backend_kind::cpu);
  codec_params p{8, 3, coeff_type::f16, 128};
  geometry g1{layout::nhwc, n, c, h, w}, g2{layout::nchw, n, c, h, w};
  std::vector<std::byte> c1(n * coeff_bytes_per_sample(p, g1)), c2(c1.size());
  be->encode(p, make_view(g1, dtype::u8, static_cast<const void*>(nhwc.data()), n), c1);
  be->encode(p, make_view(g2, dtype::u8, static_cast<const void*>(nchw.data()), n), c2);
  EXPECT_EQ(c1, c2) << "the coefficient planes do not depend on the layout";
  std::vector<std::uint8_t> d1(nhwc.size()), d2(nchw.size());
  be->decode(p, c1, make_view(g1, dtype::u8, static_cast<void*>(d1.data()), n));
  be->decode(p, c2, make_view(g2, dtype::u8, static_cast<void*>(d2.data()), n));
  for (u64 s = 0; s < n; ++s)
    for (u64 ch = 0; ch < c; ++ch)
      for (u64 r = 0; r < h; ++r)
        for (u64 q = 0; q < w; ++q)
          ASSERT_EQ(d1[((s * h + r) * w + q) * c + ch], d2[((s * c + ch) * h + r) * w + q]);
}

TEST(Layouts, AutoPicksNhwcOrNchwAndRefusesAmbiguousShapes) {
  std::vector<u64> a{10, 32, 32, 3}, b{10, 3, 32, 32}, amb{10, 3, 32, 3}, none{10, 9, 32, 32};
  EXPECT_EQ(resolve_layout(a, layout::automatic).lay, layout::nhwc);
  EXPECT_EQ(resolve_layout(b, layout::automatic).lay, layout::nchw);
  EXPECT_EQ(resolve_layout(b, layout::automatic).planes, 3u);
  for (auto* s : {&amb, &none}) {
    try {
      resolve_layout(*s, layout::automatic);
      FAIL() << "ambiguous shape accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("--layout"), std::string::npos);
    }
  }
  std::vector<u64> hw{5, 6};
  EXPECT_EQ(resolve_layout(hw, layout::automatic).lay, layout::hw);
  EXPECT_THROW(resolve_layout(hw, layout::nhwc), error);
}

TEST(Layouts, AShapeNoLayoutTakesIsBadInputWhetherOrNotALayoutWasNamed) {
  // 1-D and 5-D arrays were bad input (exit 3) under auto but a usage error (exit 2) with
  // --layout NHWC: one file, one problem, two exit codes.
  for (const std::vector<u64>& s : {std::vector<u64>{10}, std::vector<u64>{2, 3, 8, 8, 1}}) {
    for (layout l : {layout::automatic, layout::nhwc, layout::hw}) {
      try {
        resolve_layout(s, l);
        FAIL() << "a shape of " << s.size() << " axes taken";
      } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::bad_input) << e.what();
        EXPECT_NE(std::string(e.what()).find("dctchop takes 2 (HW), 3 (NHW) or 4"),
                  std::string::npos) << e.what();
        if (s.size() == 5) {
          EXPECT_NE(std::string(e.what()).find("squeeze"), std::string::npos) << e.what();
        }
      }
    }
  }
  // A shape some layout takes, named with another: a usage error.
  try {
    resolve_layout(std::vector<u64>{4, 8, 8}, layout::nhwc);
    FAIL() << "3 axes taken as NHWC";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
  }
}

TEST(Layouts, ASampleShapeIsTheShapeAfterTheSampleAxis) {
  using shape = std::vector<u64>;
  EXPECT_EQ(resolve_layout(shape{10, 32, 24, 3}, layout::automatic).sample_shape(), (shape{32, 24, 3}));
  EXPECT_EQ(resolve_layout(shape{10, 3, 32, 24}, layout::automatic).sample_shape(), (shape{3, 32, 24}));
  EXPECT_EQ(resolve_layout(shape{10, 32, 24}, layout::automatic).sample_shape(), (shape{32, 24}));
  // HW is one sample of H x W: a batch of it is (1, H, W), as for NHW.
  EXPECT_EQ(resolve_layout(shape{32, 24}, layout::automatic).sample_shape(), (shape{32, 24}));
}

TEST(Threads, OneAndManyThreadsGiveIdenticalCoefficients) {
  std::mt19937_64 rng(11);
  geometry g{layout::nhwc, 5, 3, 37, 29};
  auto x = random_data<std::uint8_t>(5 * 3 * 37 * 29, rng);
  codec_params p{8, 4, coeff_type::f16, 128};
  std::vector<std::byte> c1(5 * coeff_bytes_per_sample(p, g)), c4(c1.size());
  make_backend(backend_kind::cpu, {1})->encode(p, make_view(g, dtype::u8, static_cast<const void*>(x.data()), 5), c1);
  make_backend(backend_kind::cpu, {4})->encode(p, make_view(g, dtype::u8, static_cast<const void*>(x.data()), 5), c4);
  EXPECT_EQ(c1, c4);
}

/** Runs child() in a forked process and returns its exit status; a child still running
 *  after a minute is killed and reported as hanging. */
template <typename Fn>
void expect_child_exits_0(Fn&& child) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(child() ? 0 : 1);  // no gtest assertions in the child
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) ::usleep(100000);
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the forked child hangs";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's results differ from the parent's";
}

TEST(Threads, AnExceptionInOneThreadOfARegionComesOutOfItAndStopsTheRest) {
  // An exception may not leave an OpenMP region (std::terminate): region_failure keeps the
  // first, the threads skip their remaining work, and the caller throws it after the region.
  for (const int threads : {4, 1}) {
    detail::region_failure failure;
    std::atomic<int> ran{0};
    DCTCHOP_OMP(omp parallel for num_threads(threads) schedule(dynamic, 1))
    for (int i = 0; i < 1000; ++i) {
      if (failure.failed()) continue;
      failure.run([&] {
        ++ran;
        if (i == 3) throw error(errc::io, "no memory for this thread's scratch");
      });
    }
    ASSERT_TRUE(failure.failed());
    test::expect_error([&] { failure.rethrow(); }, errc::io,
                       {"no memory for this thread's scratch"});
    // (With several threads, the others may finish many more before the throw is done.)
    if (threads == 1) {
      EXPECT_EQ(ran.load(), 4) << "work went on after the failure";
    }
  }
  detail::region_failure clean;
  clean.run([] {});
  EXPECT_FALSE(clean.failed());
  EXPECT_NO_THROW(clean.rethrow());
}

TEST(Threads, AProcessForkedAfterThreadedWorkEncodesDecodesAndMeasuresInsteadOfHanging) {
  // GNU libgomp's thread pool does not survive fork(): a child whose parent had run a
  // parallel region waited forever in its own first one. PyTorch's DataLoader workers are
  // such children (a dataset read once in the parent, then num_workers=2). The child must
  // do the same work, on one thread, with the same results.
  std::mt19937_64 rng(12);
  const u64 n = 6;
  geometry g{layout::nhwc, n, 3, 40, 24};
  auto x = random_data<std::uint8_t>(n * 3 * 40 * 24, rng);
  codec_params p{8, 4, coeff_type::f16, 128};
  auto be = make_backend(backend_kind::cpu, {2});
  const auto in = make_view(g, dtype::u8, static_cast<const void*>(x.data()), n);
  std::vector<std::byte> c(n * coeff_bytes_per_sample(p, g));
  std::vector<std::uint8_t> y(x.size());
  be->encode(p, in, c);  // the parent's parallel regions start the pool
  be->decode(p, c, make_view(g, dtype::u8, static_cast<void*>(y.data()), n));
  quality_accumulator parent_q(dtype::u8, 255.0, true);
  parent_q.add(in, make_view(g, dtype::u8, static_cast<const void*>(y.data()), n), 2);
  expect_child_exits_0([&] {
    std::vector<std::byte> c2(c.size());
    std::vector<std::uint8_t> y2(y.size());
    be->encode(p, in, c2);
    be->decode(p, c2, make_view(g, dtype::u8, static_cast<void*>(y2.data()), n));
    quality_accumulator q(dtype::u8, 255.0, true);
    q.add(in, make_view(g, dtype::u8, static_cast<const void*>(y2.data()), n), 2);
    return c2 == c && y2 == y && q.result().mse == parent_q.result().mse &&
           q.result().ssim == parent_q.result().ssim;
  });
}

TEST(Threads, AProcessForkedAfterAnotherLibrarysOpenMpWorkDecodesInsteadOfHanging) {
#if defined(_OPENMP)
  // PyTorch runs its CPU operations on the same libgomp. A parent that ran only those, never
  // dctchop, leaves its child the same dead pool: the child's first dctchop work on two
  // threads must not wait for it. (ctest runs each test in a process of its own, so dctchop
  // has run nothing in this one before.)
  std::vector<int> hit(2, 0);
#pragma omp parallel num_threads(2)
  hit[static_cast<std::size_t>(omp_get_thread_num())] = 1;
  ASSERT_EQ(hit, (std::vector<int>{1, 1})) << "the pool did not start two threads";
  expect_child_exits_0([] {
    std::mt19937_64 rng(13);
    geometry g{layout::nhw, 4, 1, 32, 32};
    auto x = random_data<std::uint8_t>(4 * 32 * 32, rng);
    codec_params p{8, 8, coeff_type::f16, 128};
    auto be = make_backend(backend_kind::cpu, {2});
    std::vector<std::byte> c(4 * coeff_bytes_per_sample(p, g));
    std::vector<std::uint8_t> y(x.size());
    be->encode(p, make_view(g, dtype::u8, static_cast<const void*>(x.data()), 4), c);
    be->decode(p, c, make_view(g, dtype::u8, static_cast<void*>(y.data()), 4));
    return y == x;  // chop 8 with f16 is exact for u8
  });
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

TEST(SmallImages, ABatchEncodesAndDecodesExactlyAsEachImageAloneInEveryLayout) {
  // How a batch is split into jobs must not change a byte: what one job leaves in the
  // scratch rows (the vector tails of narrow rows read into their slack) must not reach the
  // next. A batch of 37 samples gives the coefficients and the decoded values of each sample
  // coded alone, in planar, NCHW and NHWC layouts, block sizes 4 to 32, on 1 and 2 threads,
  // also when the samples lie apart in memory (the gaps must be left untouched by the
  // decode).
  struct case_t { layout lay; u64 c, h, w; int b, k; };
  const std::vector<case_t> cases = {{layout::nhw, 1, 28, 28, 8, 4},  {layout::nchw, 3, 32, 32, 8, 2},
                                     {layout::nhwc, 3, 32, 32, 8, 4}, {layout::nhw, 1, 5, 3, 4, 1},
                                     {layout::nhwc, 2, 9, 17, 16, 16}, {layout::nhw, 1, 40, 33, 32, 7},
                                     {layout::nhwc, 4, 12, 6, 4, 3}};
  const u64 n = 37;
  std::mt19937_64 rng(5);
  for (const auto& cs : cases) {
    const geometry g{cs.lay, n, cs.c, cs.h, cs.w};
    const geometry one{cs.lay, 1, cs.c, cs.h, cs.w};
    const codec_params p{cs.b, cs.k, coeff_type::f16, 128};
    const u64 vals = g.values_per_sample(), cbytes = coeff_bytes_per_sample(p, g);
    for (u64 gap : {u64(0), u64(5)}) {
      const u64 stride = vals + gap;
      const auto x = random_data<std::uint8_t>(n * stride, rng);
      auto in = make_view(g, dtype::u8, static_cast<const void*>(x.data()), n);
      in.stride_sample = static_cast<std::int64_t>(stride);
      for (int threads : {1, 2}) {
        const std::string what = std::to_string(cs.c) + "x" + std::to_string(cs.h) + "x" +
                                 std::to_string(cs.w) + " B=" + std::to_string(cs.b) +
                                 " K=" + std::to_string(cs.k) + " gap " + std::to_string(gap) +
                                 " threads " + std::to_string(threads);
        auto be = make_backend(backend_kind::cpu, {threads});
        std::vector<std::byte> batch(n * cbytes), alone(cbytes);
        be->encode(p, in, batch);
        std::vector<std::uint8_t> y(n * stride, 0xAB), y1(vals);
        auto out = make_view(g, dtype::u8, static_cast<void*>(y.data()), n);
        out.stride_sample = static_cast<std::int64_t>(stride);
        be->decode(p, batch, out);
        for (u64 i = 0; i < n; ++i) {
          be->encode(p, make_view(one, dtype::u8, static_cast<const void*>(x.data() + i * stride), 1),
                     alone);
          ASSERT_EQ(std::memcmp(alone.data(), batch.data() + i * cbytes, cbytes), 0)
              << what << ": coefficients of sample " << i;
          be->decode(p, alone, make_view(one, dtype::u8, static_cast<void*>(y1.data()), 1));
          ASSERT_EQ(std::memcmp(y1.data(), y.data() + i * stride, vals), 0)
              << what << ": decoded sample " << i;
          for (u64 j = vals; j < stride; ++j) ASSERT_EQ(y[i * stride + j], 0xAB) << what;
        }
      }
    }
  }
}

// The inverse of naive_plane, per element: X'[iB+r][jB+q] = sum_{u,v<K} T[u][r] T[v][q] C, cropped.
std::vector<double> naive_decode(const std::vector<double>& c, u64 h, u64 w, int b, int k) {
  auto t = naive_t(b);
  const u64 wb = (w + b - 1) / b;
  std::vector<double> x(h * w);
  for (u64 y = 0; y < h; ++y)
    for (u64 z = 0; z < w; ++z) {
      const u64 i = y / b, j = z / b, r = y % b, q = z % b;
      double s = 0;
      for (int u = 0; u < k; ++u)
        for (int v = 0; v < k; ++v)
          s += t[u * b + r] * t[v * b + q] * c[(i * k + u) * (wb * k) + j * k + v];
      x[y * w + z] = s;
    }
  return x;
}

TEST(WidePlanes, PlanesWiderThanAThreadsTileEncodeAndDecodeAsPerElementMath) {
  // Planes are cut into tiles of columns (64 Ki values of a wide row, all planes of an NHWC
  // pixel together), so that a thread's scratch rows stay small: a 1 x 2^24 float32 plane
  // took B rows of 2^24 values a thread, 512 MiB, where its data was 64 MiB. Each tile
  // reads, pads (the last) and stores its own columns of the planes and of the coefficient
  // rows: the result is the per-element math of the whole plane.
  struct case_t { layout lay; u64 c, h, w; int b, k; };
  for (const auto& cs :
       {case_t{layout::hw, 1, 3, 70001, 8, 3}, case_t{layout::nhwc, 3, 9, 30001, 8, 2},
        case_t{layout::nchw, 2, 5, 140003, 4, 1}, case_t{layout::hw, 1, 1, 65601, 16, 16}}) {
    std::mt19937_64 rng(cs.w);
    const geometry g{cs.lay, 1, cs.c, cs.h, cs.w};
    const u64 vals = cs.c * cs.h * cs.w;
    std::vector<float> x(vals);
    std::uniform_real_distribution<float> d(-100.f, 100.f);
    for (auto& v : x) v = d(rng);
    const codec_params p{cs.b, cs.k, coeff_type::f32, 0.0};
    for (int threads : {1, 2}) {
      auto be = make_backend(backend_kind::cpu, {threads});
      std::vector<std::byte> out(coeff_bytes_per_sample(p, g));
      be->encode(p, make_view(g, dtype::f32, static_cast<const void*>(x.data()), 1), out);
      const auto got = as_floats(out);
      std::vector<float> back(vals);
      be->decode(p, out, make_view(g, dtype::f32, static_cast<void*>(back.data()), 1));
      const u64 per_plane = got.size() / cs.c;
      for (u64 c = 0; c < cs.c; ++c) {
        std::vector<double> plane(cs.h * cs.w);
        for (u64 i = 0; i < cs.h * cs.w; ++i) {
          plane[i] = cs.lay == layout::nhwc ? x[i * cs.c + c] : x[c * cs.h * cs.w + i];
        }
        const auto want = naive_plane(plane, cs.h, cs.w, cs.b, cs.k);
        ASSERT_EQ(want.size(), per_plane);
        const std::string what = "W=" + std::to_string(cs.w) + " plane " + std::to_string(c) +
                                 " threads " + std::to_string(threads);
        for (u64 i = 0; i < per_plane; ++i) {
          ASSERT_NEAR(got[c * per_plane + i], want[i], 2e-3 + 1e-5 * std::fabs(want[i]))
              << what << " coefficient " << i;
        }
        const auto decoded = naive_decode(want, cs.h, cs.w, cs.b, cs.k);
        for (u64 i = 0; i < cs.h * cs.w; ++i) {
          const float v = cs.lay == layout::nhwc ? back[i * cs.c + c] : back[c * cs.h * cs.w + i];
          ASSERT_NEAR(v, decoded[i], 2e-3 + 1e-5 * std::fabs(decoded[i])) << what << " value " << i;
        }
      }
    }
  }
}

TEST(SmallImages, TheFirstBadSampleIsNamedAmongMany) {
  // 40 samples of 8x8 u16; samples 15 and 29 overflow f16. On two threads each finds one
  // (the static schedule gives each half of the samples to one), and the lower must win.
  geometry g{layout::nhw, 40, 1, 8, 8};
  std::vector<std::uint16_t> x(40 * 64, 32768);
  for (u64 bad : {15, 29})
    for (u64 i = 0; i < 64; ++i) x[bad * 64 + i] = 65535;
  codec_params p{8, 2, coeff_type::f16, 32768};
  std::vector<std::byte> c(40 * coeff_bytes_per_sample(p, g));
  for (int threads : {1, 2}) {
    try {
      make_backend(backend_kind::cpu, {threads})
          ->encode(p, make_view(g, dtype::u16, static_cast<const void*>(x.data()), 40), c);
      FAIL() << "overflow not detected on " << threads << " threads";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::out_of_range);
      EXPECT_EQ(e.sample(), 15) << threads << " threads";
    }
  }
}

TEST(CoeffTypes, I16RoundsHalfToEven) {
  // A constant 4x4 block of value v has DC coefficient 4v: v = 0.625 -> 2.5 -> 2, v = 0.875 ->
  // 3.5 -> 4.
  for (auto [v, want] : {std::pair{0.625f, 2}, std::pair{0.875f, 4}, std::pair{-0.625f, -2}}) {
    std::vector<float> x(16, v);
    geometry g{layout::hw, 1, 1, 4, 4};
    codec_params p{4, 1, coeff_type::i16, 0};
    std::vector<std::byte> c(2);
    make_backend(backend_kind::cpu)->encode(p, make_view(g, dtype::f32, static_cast<const void*>(x.data()), 1), c);
    std::int16_t got;
    std::memcpy(&got, c.data(), 2);
    EXPECT_EQ(got, want) << v;
  }
}

TEST(CoeffTypes, ValueTooLargeForF16IsAnErrorNamingF32AndTheSample) {
  std::vector<std::uint16_t> x(2 * 64, 32768);  // sample 0 is 0 after the offset
  for (int i = 64; i < 128; ++i) x[i] = 65535;  // sample 1: DC = 8 * 32767 > 65504
  geometry g{layout::nhw, 2, 1, 8, 8};
  codec_params p{8, 2, coeff_type::f16, 32768};
  std::vector<std::byte> c(2 * coeff_bytes_per_sample(p, g));
  try {
    make_backend(backend_kind::cpu)->encode(p, make_view(g, dtype::u16, static_cast<const void*>(x.data()), 2), c);
    FAIL() << "overflow not detected";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::out_of_range);
    EXPECT_EQ(e.sample(), 1);
    EXPECT_NE(std::string(e.what()).find("--coeff f32"), std::string::npos) << e.what();
  }
}

TEST(CoeffTypes, ValueTooLargeForBf16ButNotForF32NamesF32) {
  // A constant 4x4 block: DC = 4 x = 3.399e38, past bf16's largest (3.3895e38) but below
  // f32's (3.4028e38), which holds it.
  std::vector<float> x(16, 8.4975e37f);
  geometry g{layout::hw, 1, 1, 4, 4};
  std::vector<std::byte> c(4);
  const auto view = make_view(g, dtype::f32, static_cast<const void*>(x.data()), 1);
  const auto be = make_backend(backend_kind::cpu);
  test::expect_error([&] { be->encode({4, 1, coeff_type::bf16, 0}, view, c); },
                     errc::out_of_range, {"does not fit bf16; use --coeff f32"});
  be->encode({4, 1, coeff_type::f32, 0}, view, c);
  float dc;
  std::memcpy(&dc, c.data(), 4);
  EXPECT_FLOAT_EQ(dc, 4 * 8.4975e37f);
  // Twice that passes f32's largest too: f32 refuses it with no type left to name.
  std::vector<float> y(16, 1.7e38f);
  const auto big = make_view(g, dtype::f32, static_cast<const void*>(y.data()), 1);
  test::expect_error([&] { be->encode({4, 1, coeff_type::f32, 0}, big, c); }, errc::out_of_range,
                     {"does not fit f32; no coefficient type can hold"});
  // bf16 says the same, not "use --coeff f32" (which would fail).
  test::expect_error([&] { be->encode({4, 1, coeff_type::bf16, 0}, big, c); }, errc::out_of_range,
                     {"does not fit bf16; no coefficient type can hold the transform of values this large"});
  // Values whose bound (B x max |x|: 4 x 1e38) passes f32's largest while the coefficients do
  // not: one value of 1e38 in a block of zeros, whose largest coefficient is 0.25 x 1e38
  // (each sum on the way at most 0.5 x 1e38). f32 holds them, which only encoding tells: f16
  // names f32 (it said "beyond f32's 3.4e+38 too").
  std::vector<float> z(16, 0.0f);
  z[0] = 1e38f;
  const auto corner = make_view(g, dtype::f32, static_cast<const void*>(z.data()), 1);
  std::vector<std::byte> c16(4 * 16 * 4);
  be->encode({4, 4, coeff_type::f32, 0}, corner, c16);  // fits f32
  test::expect_error([&] { be->encode({4, 4, coeff_type::f16, 0}, corner, c16); },
                     errc::out_of_range, {"does not fit f16; use --coeff f32"});
  // Beyond that bound the encode may refuse what the coefficients alone would fit: its sums
  // pair values r and B-1-r (forward_block), and those pairs may pass f32's largest first.
  // Columns alternating +-9e37: the largest coefficient is 2 x 1.848 x 9e37 = 3.33e38
  // (C[0][3]), but the difference of columns 0 and 3 after the vertical sums is 3.6e38.
  // Within the bound (B x max |x| below f32's largest) no sum on the way passes it.
  std::vector<float> a(16);
  for (int i = 0; i < 16; ++i) a[static_cast<std::size_t>(i)] = (i % 2 == 0 ? 1.0f : -1.0f) * 9e37f;
  const auto alt = make_view(g, dtype::f32, static_cast<const void*>(a.data()), 1);
  test::expect_error([&] { be->encode({4, 4, coeff_type::f32, 0}, alt, c16); },
                     errc::out_of_range, {"does not fit f32; no coefficient type can hold"});
}

TEST(CoeffTypes, NanInFloatInputIsABadInputErrorNamingTheSample) {
  std::vector<float> x(3 * 16, 1.0f);
  x[2 * 16 + 5] = std::nanf("");
  geometry g{layout::nhw, 3, 1, 4, 4};
  codec_params p{4, 2, coeff_type::f32, 0};
  std::vector<std::byte> c(3 * coeff_bytes_per_sample(p, g));
  try {
    make_backend(backend_kind::cpu)->encode(p, make_view(g, dtype::f32, static_cast<const void*>(x.data()), 3), c);
    FAIL() << "NaN not detected";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::bad_input);
    EXPECT_EQ(e.sample(), 2);
  }
}

TEST(Params, OutOfRangeBlockAndChopAreRefused) {
  EXPECT_THROW(validate({6, 2, coeff_type::f16, 0}), error);
  EXPECT_THROW(validate({8, 0, coeff_type::f16, 0}), error);
  EXPECT_THROW(validate({8, 9, coeff_type::f16, 0}), error);
  EXPECT_NO_THROW(validate({32, 32, coeff_type::f32, 0}));
}

TEST(Params, TheShapeHelpersCheckTheirParametersAndSizes) {
  // A C++ API tester's finds: coeff_shape at block 0 divided by zero (SIGFPE), dct_matrix(-3)
  // gave 9 values, and a sample's coefficient bytes wrapped past 2^64 to a small count.
  const auto refused = [](auto&& call, const std::string& says) {
    try {
      call();
      ADD_FAILURE() << "no error: " << says;
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused([] { (void)coeff_shape({0, 1, coeff_type::f16, 0}, 16, 16); }, "block size 0");
  refused([] { (void)dct_matrix(0); }, "the block is 1 to 4096");
  refused([] { (void)dct_matrix(-3); }, "the block is 1 to 4096");
  // (2^20: 8 TiB asked for, std::bad_alloc rather than this error, in the next finds)
  refused([] { (void)dct_matrix(1 << 20); }, "DCT matrix of block 1048576: the block is 1 to");
  refused([] { (void)dct_matrix(max_dct_matrix_block + 1); }, "the block is 1 to 4096");
  EXPECT_EQ(dct_matrix(33).size(), 33u * 33);  // any block up to the bound, not the codec's only
  const u64 big = u64(1) << 40;
  refused(
      [&] {
        (void)coeff_bytes_per_sample({8, 8, coeff_type::f32, 0}, {layout::nchw, 1, 4, big, big});
      },
      "more coefficient bytes than 2^64");
  refused([] { (void)coeff_shape({4, 4, coeff_type::f32, 0}, ~u64(0), 1); }, "than 2^64");
  EXPECT_EQ(coeff_bytes_per_sample({8, 4, coeff_type::f16, 0}, {layout::nchw, 1, 3, 17, 9}),
            3u * 12 * 8 * 2);
}

TEST(Backends, AMutableViewEncodesAsItsConstViewAndAShortBufferIsTheCallersMistake) {
  // A view of a non-const buffer (make_view(..., void*)) is taken where a const view is;
  // a coefficient buffer too small for the call is invalid_argument, not a library bug.
  std::mt19937_64 rng(5);
  geometry g{layout::nhw, 2, 1, 16, 24};
  auto x = random_data<std::uint8_t>(2 * 16 * 24, rng);
  codec_params p{8, 4, coeff_type::f16, 128};
  auto be = make_backend(backend_kind::cpu, {1});
  std::vector<std::byte> a(2 * coeff_bytes_per_sample(p, g)), b(a.size());
  be->encode(p, make_view(g, dtype::u8, x.data(), 2), a);  // a sample_view of mutable bytes
  be->encode(p, make_view(g, dtype::u8, static_cast<const void*>(x.data()), 2), b);
  EXPECT_EQ(a, b);
  const std::span<std::byte> short_span(a.data(), a.size() - 1);
  test::expect_error([&] { be->encode(p, make_view(g, dtype::u8, x.data(), 2), short_span); },
                     errc::invalid_argument, {"coefficient buffer too small"});
  test::expect_error([&] { be->decode(p, short_span, make_view(g, dtype::u8, x.data(), 2)); },
                     errc::invalid_argument, {"coefficient buffer too small"});
  // A span of a null pointer and the right size crashed the encode; enums out of range (a
  // cast) were stored as f16 (a coefficient type) or called a library bug (a dtype).
  const std::span<std::byte> null_span(static_cast<std::byte*>(nullptr), a.size());
  test::expect_error([&] { be->encode(p, make_view(g, dtype::u8, x.data(), 2), null_span); },
                     errc::invalid_argument, {"null coefficient buffer"});
  codec_params bad = p;
  bad.coeff = static_cast<coeff_type>(9);
  test::expect_error([&] { validate(bad); }, errc::invalid_argument,
                     {"coefficient type 9 is not one of f16, bf16, f32, i16"});
  test::expect_error([&] { be->encode(bad, make_view(g, dtype::u8, x.data(), 2), a); },
                     errc::invalid_argument, {"coefficient type 9"});
  test::expect_error(
      [&] { be->encode(p, make_view(g, static_cast<dtype>(42), x.data(), 2), a); },
      errc::invalid_argument, {"dtype 42 is not one dctchop knows"});
}

TEST(Backends, CudaIsAnExplicitErrorWithoutTheBackendBuiltOrADevice) {
  bool built = false;
  for (const auto& b : compiled_backends()) built |= b.rfind("cuda", 0) == 0;
  if (built && cuda::available()) {  // a GPU machine: the backend is there to be had
    EXPECT_EQ(make_backend(backend_kind::cuda)->name(), "cuda");
    return;
  }
  test::expect_error([] { make_backend(backend_kind::cuda); }, errc::backend_unavailable,
                     {built ? "no CUDA device is available" : "built without a CUDA backend",
                      "use --backend cpu"});
}

TEST(Backends, ADeviceIndexIsForCudaAndMustBeThere) {
  backend_options o;
  o.device = -2;
  for (const auto kind : {backend_kind::cpu, backend_kind::cuda, backend_kind::automatic}) {
    test::expect_error([&] { make_backend(kind, o); }, errc::invalid_argument,
                       {"device -2: expected a CUDA device's index"});
  }
  // The CPU runs on no GPU: an index given to it is a mistake, not ignored.
  for (const int d : {0, 3}) {
    o.device = d;
    test::expect_error(
        [&] { make_backend(backend_kind::cpu, o); }, errc::invalid_argument,
        {"device " + std::to_string(d) + ": the CPU backend runs on no CUDA device"});
  }
  o.device = -1;
  EXPECT_EQ(make_backend(backend_kind::cpu, o)->name().rfind("cpu", 0), 0u);
  bool built = false;
  for (const auto& b : compiled_backends()) built |= b.rfind("cuda", 0) == 0;
  const int n = built ? cuda::device_count() : 0;
  // One past the last device: there is none of that index, also where there is no GPU.
  o.device = n;
  if (n == 0) {
    // Without a GPU, cuda says that there is none (whatever the index) and auto takes the CPU.
    test::expect_error([&] { make_backend(backend_kind::cuda, o); }, errc::backend_unavailable,
                       {built ? "no CUDA device is available" : "built without a CUDA backend"});
    EXPECT_EQ(make_backend(backend_kind::automatic, o)->name().rfind("cpu", 0), 0u);
    return;
  }
  const std::string there = "CUDA device " + std::to_string(n) + " is not there: ";
  for (const auto kind : {backend_kind::cuda, backend_kind::automatic}) {
    test::expect_error([&] { make_backend(kind, o); }, errc::invalid_argument, {there});
  }
  // The last device runs where the first does (a GPU the kernels were built for).
  bool runs = true;
  try {
    make_backend(backend_kind::cuda);
  } catch (const error&) {
    runs = false;
  }
  o.device = n - 1;
  if (runs) {
    EXPECT_EQ(make_backend(backend_kind::cuda, o)->name(), "cuda");
  }
}

// ---- scalar conversions against the compiler's own types ---------------------------------

TEST(Scalar, HalfConversionMatchesFloat16OnEveryPatternAndRandomFloats) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    _Float16 ref;
    auto hb = static_cast<std::uint16_t>(h);
    std::memcpy(&ref, &hb, 2);
    float want = static_cast<float>(ref);
    float got = detail::half_to_float(hb);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << h;
    }
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    float f = detail::bits_float(bits(rng));
    if (i % 2) f = std::ldexp(std::fmod(f, 2.0f), int(rng() % 40) - 26);  // in half's range
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    std::uint16_t want;
    std::memcpy(&want, &ref, 2);
    ASSERT_EQ(detail::float_to_half(f), want) << f;
  }
}

TEST(Scalar, Bf16RoundsToNearestEven) {
  EXPECT_EQ(detail::float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0
  EXPECT_EQ(detail::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even) -> even
  EXPECT_EQ(detail::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  std::mt19937 rng(9);
  for (int i = 0; i < 100000; ++i) {
    float f = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng);
    float back = detail::bf16_to_float(detail::float_to_bf16(f));
    ASSERT_LE(std::fabs(back - f), std::fabs(f) * std::ldexp(1.0f, -8)) << f;
  }
  EXPECT_TRUE(detail::bf16_is_nonfinite(detail::float_to_bf16(std::numeric_limits<float>::infinity())));
}

/** The binary16 (or bfloat16: `to` and `back` its conversions) nearest to `d`, ties to even,
 *  found by comparing `d` with the neighbours of its conversion through float (exact: the
 *  values and their differences from `d` fit a long double). */
template <typename To, typename Back>
std::uint16_t nearest_narrow(double d, To to, Back back) {
  const std::uint16_t h = to(static_cast<float>(d));
  std::uint16_t best = h;
  long double best_error = std::fabs(static_cast<long double>(back(h)) - d);
  for (const int step : {-1, 1}) {
    const auto c = static_cast<std::uint16_t>(h + step);
    const float v = back(c);
    if (!std::isfinite(v) || std::signbit(v) != std::signbit(back(h))) continue;
    const long double e = std::fabs(static_cast<long double>(v) - d);
    if (e < best_error || (e == best_error && (c & 1u) == 0)) {
      best = c;
      best_error = e;
    }
  }
  return best;
}

TEST(Scalar, DoublesRoundOnceToHalfAndBf16NotTwiceThroughFloat) {
  // f64, i32 and u32 data are transformed in double. Rounded to the nearest float first, a
  // value just past a half-way point of f16 or bf16 can land on it and then go to even: one
  // unit below the nearest (and 65519.998, whose nearest f16 is 65504, became 65520: Inf).
  const auto half = [](float f) { return detail::float_to_half(f); };
  const auto bf16 = [](float f) { return detail::float_to_bf16(f); };
  const auto half_back = [](std::uint16_t h) { return detail::half_to_float(h); };
  const auto bf16_back = [](std::uint16_t h) { return detail::bf16_to_float(h); };
  const auto to_half = [](double d) {
    return detail::float_to_half(detail::narrow_for_rounding(d));
  };
  const auto to_bf16 = [](double d) {
    return detail::float_to_bf16(detail::narrow_for_rounding(d));
  };
  const double eps = std::ldexp(1.0, -30);
  EXPECT_EQ(to_half(1 + std::ldexp(1.0, -11) + eps), 0x3c01);   // was 0x3c00
  EXPECT_EQ(to_half(-1 - std::ldexp(1.0, -11) - eps), 0xbc01);
  EXPECT_EQ(to_half(1 + std::ldexp(1.0, -11)), 0x3c00);         // a tie: to even
  EXPECT_EQ(to_half(65519.998), 0x7bff);                        // was Inf
  EXPECT_EQ(to_half(65520.0), 0x7c00);                          // a tie past the largest: Inf
  EXPECT_EQ(to_bf16(1 + std::ldexp(1.0, -8) + eps), 0x3f81);    // was 0x3f80
  EXPECT_EQ(to_bf16(1 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(to_bf16(67371012.0), detail::float_to_bf16(67633152.0f));  // 2^24 + 2^16 + 4
  EXPECT_EQ(to_bf16(1e300), 0x7f80);                            // too large: Inf, refused
  EXPECT_EQ(to_half(-1e-300), 0x8000);
  EXPECT_EQ(to_half(0.0), 0x0000);
  // Half-way points of every kind (normal, subnormal, either sign), a hair either side, and
  // random doubles across the range.
  std::mt19937_64 rng(23);
  std::uniform_int_distribution<std::uint32_t> pattern(0, 0xfffe);
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int i = 0; i < 400000; ++i) {
    const bool is_bf16 = i % 2 == 1;
    const auto& back = is_bf16 ? +bf16_back : +half_back;
    const auto h = static_cast<std::uint16_t>(pattern(rng));
    const float lo = back(h), hi = back(static_cast<std::uint16_t>(h + 1));
    if (!std::isfinite(lo) || !std::isfinite(hi) || std::signbit(lo) != std::signbit(hi)) continue;
    const double mid = (static_cast<double>(lo) + hi) / 2;
    const double d = i % 3 == 0 ? mid + mid * unit(rng) * std::ldexp(1.0, -26)
                   : i % 3 == 1 ? mid * (1 + unit(rng) * std::ldexp(1.0, -40))
                                : lo + (hi - static_cast<double>(lo)) * (unit(rng) + 1) / 2;
    if (is_bf16) {
      ASSERT_EQ(to_bf16(d), nearest_narrow(d, bf16, bf16_back)) << std::hexfloat << d;
    } else {
      ASSERT_EQ(to_half(d), nearest_narrow(d, half, half_back)) << std::hexfloat << d;
    }
  }
  // A float is taken as it is.
  EXPECT_EQ(detail::narrow_for_rounding(1.5f), 1.5f);
  EXPECT_TRUE(std::isnan(detail::narrow_for_rounding(std::nan(""))));
}

TEST(CoeffTypes, F64AndI32DataStoreTheNearestF16AndBf16Coefficient) {
  // Through the encoders: a constant 4x4 block of value v has DC coefficient 4v exactly.
  const auto be = make_backend(backend_kind::cpu, {1});
  geometry g{layout::hw, 1, 1, 4, 4};
  const auto dc = [&](auto v, dtype type, coeff_type coeff) {
    std::vector<decltype(v)> x(16, v);
    std::vector<std::byte> c(2);
    be->encode({4, 1, coeff, 0}, make_view(g, type, static_cast<const void*>(x.data()), 1), c);
    std::uint16_t bits;
    std::memcpy(&bits, c.data(), 2);
    return bits;
  };
  const double eps = std::ldexp(1.0, -30);
  EXPECT_EQ(dc((1 + std::ldexp(1.0, -8) + eps) / 4, dtype::f64, coeff_type::bf16), 0x3f81);
  EXPECT_EQ(dc((1 + std::ldexp(1.0, -11) + eps) / 4, dtype::f64, coeff_type::f16), 0x3c01);
  EXPECT_EQ(dc(65519.998 / 4, dtype::f64, coeff_type::f16), 0x7bff);  // was refused
  EXPECT_EQ(dc(std::int32_t((1 << 24) + (1 << 16) + 1), dtype::i32, coeff_type::bf16),
            detail::float_to_bf16(67633152.0f));
  // And the per-block store the CUDA kernels share.
  std::uint16_t out = 0;
  const double past_tie = 1 + std::ldexp(1.0, -8) + eps;
  EXPECT_TRUE(detail::store_coeff(past_tie, detail::coeff_code::bf16, &out, 0));
  EXPECT_EQ(out, 0x3f81);
  EXPECT_TRUE(detail::store_coeff(65519.998, detail::coeff_code::f16, &out, 0));
  EXPECT_EQ(out, 0x7bff);
  EXPECT_FALSE(detail::store_coeff(65520.0, detail::coeff_code::f16, &out, 0));
}

TEST(Scalar, RoundClampSaturatesAndRoundsHalfToEven) {
  EXPECT_EQ(detail::round_clamp(2.5f, 0.f, 255.f), 2.f);
  EXPECT_EQ(detail::round_clamp(3.5f, 0.f, 255.f), 4.f);
  EXPECT_EQ(detail::round_clamp(-3.f, 0.f, 255.f), 0.f);
  EXPECT_EQ(detail::round_clamp(300.f, 0.f, 255.f), 255.f);
  EXPECT_EQ(detail::round_clamp(std::nanf(""), 0.f, 255.f), 0.f);
}

}  // namespace

// ---- the per-ISA kernel copies must agree bit for bit ---------------------------------------

#include "cpu_kernels.hpp"
#include "isa.hpp"

#if defined(DCTCHOP_HAVE_AVX2_KERNELS)
#include <immintrin.h>
#endif

namespace {

#if defined(DCTCHOP_HAVE_AVX2_KERNELS)
/** F16C's conversion of one float (round to nearest even), as the AVX2 kernels store f16. */
__attribute__((target("f16c"))) std::uint16_t hardware_half(float f) {
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}
#endif

TEST(Kernels, F16StoresOfBothCopiesAgreeOnNanInfAndEveryRounding) {
#if !defined(DCTCHOP_HAVE_AVX2_KERNELS)
  GTEST_SKIP() << "no AVX2 kernel copy in this build";
#else
  if (!detail::use_avx2_kernels()) GTEST_SKIP() << "this processor has no AVX2/F16C";
  // float_to_half (the baseline copy, CUDA) and vcvtps2ph (the AVX2 copy) on NaNs of every
  // payload and sign, infinities, and random floats across f16's range and beyond.
  std::mt19937 rng(17);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = rng();
    if (i % 4 == 0) u = (u & 0x807fffffu) | 0x7f800000u;  // NaN (or Inf where the payload is 0)
    if (i % 4 == 1) u = (u & 0x81ffffffu) | 0x37000000u;  // around f16's smallest numbers
    const float f = detail::bits_float(u);
    ASSERT_EQ(detail::float_to_half(f), hardware_half(f)) << std::hex << u;
  }
  // Decoding f16 data from f32 coefficients with a NaN and an Inf (a hand-made archive: no
  // writer stores them): NaN where the copies' clamps could have made -65504 or 65504.
  geometry g{layout::nhw, 1, 1, 16, 44};
  codec_params p{8, 8, coeff_type::f32, 0.0};
  std::vector<float> c(coeff_bytes_per_sample(p, g) / 4, 1.0f);
  c[0] = detail::bits_float(0x7fc12345u);                 // block (0, 0): a NaN with a payload
  c[5 * 8] = -std::numeric_limits<float>::infinity();     // block (0, 5): -Inf
  c[8 * 48 + 8] = detail::bits_float(0xffc00001u);        // block (1, 1): a negative NaN
  std::vector<detail::half_value> y1(16 * 44), y2(y1.size());
  const auto* cb = reinterpret_cast<const std::byte*>(c.data());
  detail::generic::decode_batch(p, cb, make_view(g, dtype::f16, static_cast<void*>(y1.data()), 1), 1);
  detail::avx2::decode_batch(p, cb, make_view(g, dtype::f16, static_cast<void*>(y2.data()), 1), 1);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 2), 0);
  for (u64 r : {0u, 7u}) {
    for (u64 x : {0u, 7u}) EXPECT_TRUE(std::isnan(float(y2[r * 44 + x]))) << r << " " << x;
    // -Inf in every value of block (0, 5), clamped to f16's range like any overshoot (x = 43:
    // past the last whole vector, the scalar tail)
    for (u64 x : {40u, 43u}) EXPECT_EQ(float(y2[r * 44 + x]), -65504.0f) << r << " " << x;
    EXPECT_TRUE(std::isfinite(float(y2[r * 44 + 20]))) << r;
  }
  for (u64 r : {8u, 15u})
    for (u64 x : {8u, 15u}) EXPECT_TRUE(std::isnan(float(y2[r * 44 + x]))) << r << " " << x;
#endif
}

TEST(Kernels, BaselineAndAvx2CopiesGiveIdenticalCoefficientsAndOutputs) {
#if !defined(DCTCHOP_HAVE_AVX2_KERNELS)
  GTEST_SKIP() << "no AVX2 kernel copy in this build";
#else
  if (!detail::use_avx2_kernels()) GTEST_SKIP() << "this processor has no AVX2/F16C";
  std::mt19937_64 rng(99);
  for (auto lay : {layout::nhwc, layout::nchw, layout::nhw}) {
    for (int b : {4, 8, 16, 32}) {
      unsigned turn = 0;
      for (auto ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
        const int k = 1 + static_cast<int>(rng() % b);
        // 2, 3 and 4 planes: the AVX2 copy splits and interleaves pixels of each count its own way
        const unsigned planes = lay == layout::nhw ? 1u : 2u + turn++ % 3;
        geometry g{lay, 3, planes, 1 + rng() % 40, 1 + rng() % 90};
        auto x = random_data<std::uint8_t>(g.samples * g.values_per_sample(), rng);
        codec_params p{b, k, ct, 128};
        std::vector<std::byte> c1(g.samples * coeff_bytes_per_sample(p, g)), c2(c1.size());
        std::atomic<std::uint64_t> bad1{~0ull}, bad2{~0ull};
        auto in = make_view(g, dtype::u8, static_cast<const void*>(x.data()), g.samples);
        detail::generic::encode_batch(p, in, c1.data(), 1, bad1);
        detail::avx2::encode_batch(p, in, c2.data(), 1, bad2);
        ASSERT_EQ(c1, c2) << "B=" << b << " K=" << k << " " << to_string(ct) << " " << to_string(lay);
        ASSERT_EQ(bad1.load(), bad2.load());
        std::vector<std::uint8_t> y1(x.size()), y2(x.size());
        detail::generic::decode_batch(p, c1.data(), make_view(g, dtype::u8, static_cast<void*>(y1.data()), g.samples), 1);
        detail::avx2::decode_batch(p, c1.data(), make_view(g, dtype::u8, static_cast<void*>(y2.data()), g.samples), 1);
        ASSERT_EQ(y1, y2) << "B=" << b << " K=" << k << " " << to_string(ct);
      }
    }
  }
  // The other input types' row loads (planar, random widths) in both copies.
  auto same = [&](auto zero, dtype dt, double offset, coeff_type ct) {
    using T = decltype(zero);
    for (int b : {4, 8, 16, 32}) {
      const int k = 1 + static_cast<int>(rng() % b);
      geometry g{layout::nhw, 4, 1, 1 + rng() % 40, 1 + rng() % 90};
      auto x = random_data<T>(g.samples * g.values_per_sample(), rng);
      if constexpr (std::is_same_v<T, std::uint16_t>)
        for (auto& v : x) v = static_cast<T>(32768 + v % 1024);  // within f32 and i16
      codec_params p{b, k, ct, offset};
      std::vector<std::byte> c1(g.samples * coeff_bytes_per_sample(p, g)), c2(c1.size());
      std::atomic<std::uint64_t> bad1{~0ull}, bad2{~0ull};
      auto in = make_view(g, dt, static_cast<const void*>(x.data()), g.samples);
      detail::generic::encode_batch(p, in, c1.data(), 1, bad1);
      detail::avx2::encode_batch(p, in, c2.data(), 1, bad2);
      const std::string what = std::string(to_string(dt)) + " B=" + std::to_string(b) + " " +
                               std::to_string(g.height) + "x" + std::to_string(g.width);
      ASSERT_EQ(c1, c2) << what;
      ASSERT_EQ(bad1.load(), bad2.load()) << what;
      std::vector<T> y1(x.size()), y2(x.size());
      detail::generic::decode_batch(p, c1.data(), make_view(g, dt, static_cast<void*>(y1.data()), g.samples), 1);
      detail::avx2::decode_batch(p, c1.data(), make_view(g, dt, static_cast<void*>(y2.data()), g.samples), 1);
      ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(T)), 0) << what;
    }
  };
  for (int rep = 0; rep < 4; ++rep) {
    same(float{}, dtype::f32, 0.0, coeff_type::f32);
    same(std::uint16_t{}, dtype::u16, 32768.0, coeff_type::f32);
    same(std::int16_t{}, dtype::i16, 0.0, coeff_type::f32);
    same(detail::half_value{}, dtype::f16, 3.0, coeff_type::f32);  // F16C loads in AVX2
    same(std::int8_t{}, dtype::i8, 0.0, coeff_type::f16);
    same(std::int32_t{}, dtype::i32, 0.0, coeff_type::f32);  // (computed in double)
    same(std::uint32_t{}, dtype::u32, 2147483648.0, coeff_type::f32);
  }
  // Coefficients too large for f16 (u16 data near its extremes: DC up to 8 x 32767) are found
  // by both copies, in the same sample, with the same bytes stored: the AVX2 copy stores f16
  // eight at a time, and checks them so.
  for (int rep = 0; rep < 8; ++rep) {
    geometry g{layout::nhw, 6, 1, 8 + rng() % 24, 8 + rng() % 60};
    std::vector<std::uint16_t> x(g.samples * g.values_per_sample(), 40000);
    const u64 bad_sample = 1 + rng() % (g.samples - 1);
    for (u64 i = 0; i < g.values_per_sample(); ++i) x[bad_sample * g.values_per_sample() + i] = 65535;
    codec_params p{8, 4, coeff_type::f16, 32768};
    std::vector<std::byte> c1(g.samples * coeff_bytes_per_sample(p, g)), c2(c1.size());
    std::atomic<std::uint64_t> bad1{~0ull}, bad2{~0ull};
    auto in = make_view(g, dtype::u16, static_cast<const void*>(x.data()), g.samples);
    detail::generic::encode_batch(p, in, c1.data(), 1, bad1);
    detail::avx2::encode_batch(p, in, c2.data(), 1, bad2);
    EXPECT_EQ(bad1.load(), bad_sample);
    EXPECT_EQ(bad2.load(), bad_sample);
    EXPECT_EQ(c1, c2);
  }
#endif
}

}  // namespace
