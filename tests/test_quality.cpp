// Tests of the quality tools (issue 3): target-quality compression (--psnr, --ssim), eval,
// verify, and the quality figures that info shows. The --psnr search is checked against an
// input whose PSNR at every chop is known in closed form; everything else is checked against
// the files the library writes and against figures computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/metrics.hpp"
#include "pipeline_util.hpp"
#include "test_util.hpp"

#ifndef DCTCHOP_BINARY
#error "DCTCHOP_BINARY must name the built dctchop command"
#endif

namespace {

using namespace dctchop;
using dctchop::test::cli;
using dctchop::test::command_result;
using dctchop::test::describe;
using dctchop::test::parse_json;
using dctchop::test::sh;
using dctchop::test::expect_error;
using dctchop::test::expect_same_figures;
using dctchop::test::flip_byte;
using dctchop::test::load_npy;
using dctchop::test::read_bytes;
using dctchop::test::write_bytes;
using dctchop::test::save_npy;
using dctchop::test::sh_quote;
using dctchop::test::temp_dir;
using u64 = std::uint64_t;
using json = nlohmann::json;
namespace fs = std::filesystem;

/** One thread everywhere in the library calls: the cores are shared, the data is tiny, and the
 *  figures then do not depend on OpenMP's scheduling. */
std::unique_ptr<backend> cpu() { return make_backend(backend_kind::cpu, {1}); }

formats::verify_options one_thread() {
  formats::verify_options o;
  o.threads = 1;
  return o;
}

std::string num(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// ------------------------------------------------------------------ synthetic data

/** The orthonormal DCT-II matrix of size 8, from its formula:
 *  T[u][x] = c(u) cos(pi (2x + 1) u / 16), c(0) = sqrt(1/8), c(u > 0) = sqrt(2/8). */
struct dct8 {
  double t[8][8];
  dct8() {
    for (int u = 0; u < 8; ++u)
      for (int x = 0; x < 8; ++x)
        t[u][x] = (u == 0 ? std::sqrt(1.0 / 8) : std::sqrt(2.0 / 8)) *
                  std::cos(std::numbers::pi * (2 * x + 1) * u / 16.0);
  }
};

/** Float data whose 8x8 blocks each hold only the coefficients (v = 0, u = 0..7) with
 *  amplitudes s_b * g_b * a_u, a_u = 100 * 2^-u: keeping chop K drops exactly a_u for u >= K,
 *  so the MSE at chop K is mean_b(g_b^2) * sum_{u >= K} a_u^2 / 64. */
struct analytic_f32 {
  static constexpr int n = 4, h = 32, w = 32;
  std::vector<float> values;
  double mean_g2 = 0;
  double a[8];
  analytic_f32() {
    const dct8 T;
    for (int u = 0; u < 8; ++u) a[u] = 100.0 * std::pow(2.0, -u);
    values.assign(std::size_t(n) * h * w, 0.0f);
    int blocks = 0;
    for (int s = 0; s < n; ++s)
      for (int by = 0; by < h / 8; ++by)
        for (int bx = 0; bx < w / 8; ++bx) {
          const int b = blocks++;
          const double sign = (b % 2 == 0) ? 1.0 : -1.0;
          const double g = 1.0 + 0.5 * (b % 3);  // 1, 1.5, 2
          mean_g2 += g * g;
          for (int y = 0; y < 8; ++y)
            for (int x = 0; x < 8; ++x) {
              double f = 0;
              for (int u = 0; u < 8; ++u) f += sign * g * a[u] * T.t[u][x] * T.t[0][y];
              values[(std::size_t(s) * h + by * 8 + y) * w + bx * 8 + x] = static_cast<float>(f);
            }
        }
    mean_g2 /= blocks;
  }
  double mse_at(int k) const {
    double s = 0;
    for (int u = k; u < 8; ++u) s += a[u] * a[u];
    return mean_g2 * s / 64.0;
  }
  double range() const {
    auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    return double(*hi) - double(*lo);
  }
  double psnr_at(int k) const {
    return 20.0 * std::log10(range()) - 10.0 * std::log10(mse_at(k));
  }
  std::string save(const temp_dir& dir, const std::string& name = "analytic.npy") const {
    save_npy(dir.file(name), dtype::f32, {u64(n), u64(h), u64(w)}, values);
    return dir.file(name);
  }
};

/** A small deterministic pseudo-random generator (no dependence on <random>'s distributions). */
struct lcg {
  std::uint64_t s;
  explicit lcg(std::uint64_t seed) : s(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  std::uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(s >> 33);
  }
  double uniform() { return next() / double(1u << 31); }  // [0, 1)
};

/** Textured u8 images N x H x W (NHW): waves of several frequencies plus noise, so that every
 *  chop loses something and SSIM grows with the chop. */
std::vector<std::uint8_t> textured_u8(int n, int h, int w, std::uint64_t seed = 7) {
  lcg r(seed);
  std::vector<std::uint8_t> v(std::size_t(n) * h * w);
  std::size_t i = 0;
  for (int s = 0; s < n; ++s)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const double f = 128 + 45 * std::sin(0.8 * x + 0.5 * s) * std::cos(0.6 * y) +
                         25 * std::sin(0.21 * (x + 2 * y)) + 24 * (r.uniform() - 0.5);
        v[i++] = static_cast<std::uint8_t>(std::lround(std::clamp(f, 0.0, 255.0)));
      }
  return v;
}

std::string save_textured(const temp_dir& dir, const std::string& name = "tex.npy", int n = 4) {
  save_npy(dir.file(name), dtype::u8, {u64(n), 32, 32}, textured_u8(n, 32, 32));
  return dir.file(name);
}

/** u8 noise: every chop below 8 loses much of it. */
std::string save_noise_u8(const temp_dir& dir, const std::string& name = "noise.npy") {
  lcg r(11);
  std::vector<std::uint8_t> v(4 * 16 * 16);
  for (auto& x : v) x = static_cast<std::uint8_t>(r.next() & 0xff);
  save_npy(dir.file(name), dtype::u8, {4, 16, 16}, v);
  return dir.file(name);
}

/** u16 data over the whole range (constant 65535 blocks among others): its DC coefficients
 *  (8 * 32767 at block 8) overflow f16 but fit f32. */
std::string save_full_range_u16(const temp_dir& dir, const std::string& name = "u16.npy") {
  lcg r(5);
  std::vector<std::uint16_t> v(3 * 16 * 16);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t x = i % 16, y = (i / 16) % 16;
    v[i] = (x < 8 && y < 8) ? 65535 : (x >= 8 && y >= 8) ? 0 : static_cast<std::uint16_t>(r.next());
  }
  save_npy(dir.file(name), dtype::u16, {3, 16, 16}, v);
  return dir.file(name);
}

const formats::chop_trial* trial_for(const formats::compress_result& r, int chop) {
  for (const auto& t : r.trials)
    if (t.chop == chop) return &t;
  return nullptr;
}

// ============================================================ --psnr / --ssim (library)

TEST(QualityNotes, TheRoundingNoteComesWhereTheTypesStepIsAGoodPartOfTheErrorAndNeverForAnExactResult) {
  using formats::detail::coefficient_rounding_note;
  quality q;
  q.range = 1e-8;
  q.mse = 1e-18;  // RMSE 1e-9, a tenth of the range
  // f16's step near zero, 2^-24: (K/B)^2 step^2 / 12 = 7e-17 at chop 4, far above a tenth of
  // the error; f32's and bf16's steps are negligible.
  const auto f16 = coefficient_rounding_note(dtype::f32, coeff_type::f16, 8, 4, q);
  EXPECT_NE(f16.find("f16 holds coefficients near zero only to steps of 6e-08"), std::string::npos) << f16;
  EXPECT_NE(f16.find("f32 (the default for float input) or bf16 keep more of the detail"), std::string::npos) << f16;
  EXPECT_EQ(coefficient_rounding_note(dtype::f32, coeff_type::f32, 8, 4, q), "");
  EXPECT_EQ(coefficient_rounding_note(dtype::f32, coeff_type::bf16, 8, 4, q), "");
  const auto i16 = coefficient_rounding_note(dtype::f32, coeff_type::i16, 8, 4, q);
  EXPECT_NE(i16.find("f32 (the default for float input) or bf16 keep"), std::string::npos) << i16;
  // An exact result (mse 0, range > 0: blocks the codec holds exactly) has nothing to blame.
  q.mse = 0;
  for (coeff_type c : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16})
    EXPECT_EQ(coefficient_rounding_note(dtype::f32, c, 8, 4, q), "") << to_string(c);
  // Integer data: i16's whole numbers, where they are a good part of the error (at chop = block
  // the whole of it: values off by one, where f16 gives u8 data back exactly); never the float
  // types' steps near zero.
  quality u;
  u.range = 255;
  u.mse = 1.0 / 12;  // what i16 gives u8 data at chop 8: 8% of the values off by one
  EXPECT_EQ(coefficient_rounding_note(dtype::u8, coeff_type::i16, 8, 8, u),
            "i16 rounds every coefficient to a whole number (an error of up to 0.5 each): at chop "
            "8 that rounding is a good part of the error of u8 data (values off by one, where "
            "chop 8 keeps every coefficient); f16 or f32 keep more of the detail");
  EXPECT_NE(
      coefficient_rounding_note(dtype::u16, coeff_type::i16, 8, 8, u).find("; f32 keeps more"),
      std::string::npos);
  for (coeff_type c : {coeff_type::f16, coeff_type::bf16, coeff_type::f32})
    EXPECT_EQ(coefficient_rounding_note(dtype::u8, c, 8, 8, u), "") << to_string(c);
  u.mse = 30;  // chop 4's error: the rounding, (4/8)^2 / 12 at most, is no part of it
  EXPECT_EQ(coefficient_rounding_note(dtype::u8, coeff_type::i16, 8, 4, u), "");
  // No type reaches data of range 1e-44: the note says to scale it.
  q.range = 1e-44;
  q.mse = 1e-90;
  EXPECT_NE(
      coefficient_rounding_note(dtype::f32, coeff_type::f32, 8, 8, q).find("scale the data up"),
      std::string::npos);
  // Range 1e-40: f16's note offers f32 alone (bf16's steps, 2^-133, are too coarse here too),
  // and f32's own note, at its own smaller error, offers nothing finer. Neither says that f32
  // keeps all the detail.
  q.range = 1e-40;
  q.mse = 1e-82;  // what f16 gives: RMSE a tenth of the range
  const auto tiny_f16 = coefficient_rounding_note(dtype::f32, coeff_type::f16, 8, 8, q);
  EXPECT_NE(tiny_f16.find("; f32 (the default for float input) keeps more of the detail"),
            std::string::npos) << tiny_f16;
  q.mse = 1e-91;  // what f32 gives
  const auto tiny_f32 = coefficient_rounding_note(dtype::f32, coeff_type::f32, 8, 8, q);
  EXPECT_NE(tiny_f32.find("no coefficient type keeps more of the detail"), std::string::npos)
      << tiny_f32;
}

TEST(QualityPipeline, AnalyticInputHasTheExpectedPsnrsAtEveryChop) {
  // Checks the test's own closed form against the library's measurement at fixed chops, so
  // that the target tests below rest on figures known to be right.
  temp_dir dir;
  const analytic_f32 d;
  const std::string in = d.save(dir);
  auto be = cpu();
  for (int k : {1, 2, 3, 4, 5}) {
    formats::compress_options o;
    o.threads = 1;
    o.chop = k;
    o.overwrite = true;
    const auto r = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
    EXPECT_EQ(r.codec.coeff, coeff_type::f32) << "f32 data defaults to f32 coefficients";
    ASSERT_TRUE(r.q && r.q->psnr_db);
    EXPECT_NEAR(r.q->range, d.range(), 1e-9);
    EXPECT_NEAR(r.q->mse, d.mse_at(k), 1e-4 * d.mse_at(k)) << "chop " << k;
    EXPECT_NEAR(*r.q->psnr_db, d.psnr_at(k), 0.01) << "chop " << k;
  }
}

TEST(QualityPipeline, ANanTargetOrGateIsRefusedByTheLibraryAsByTheCommand) {
  // A NaN passes every comparison: a PSNR target of NaN searched up to chop 8, and a verify
  // gate of NaN passed whatever was measured (the command's FINITE checks kept it out).
  temp_dir dir;
  const analytic_f32 d;
  const std::string in = d.save(dir);
  auto be = cpu();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const bool ssim : {false, true}) {
    formats::compress_options o;
    o.threads = 1;
    (ssim ? o.target.ssim : o.target.psnr_db) = nan;
    expect_error([&] { formats::compress_npy(in, dir.file("n.dcz"), *be, o); },
                 errc::invalid_argument, {"a quality target must be a finite number"});
  }
  // An SSIM target outside [-1, 1] is no target either (it searched every chop first, then
  // said "try --coeff f32"), as the command's --ssim says.
  for (const double bad : {2.0, 1.0000001, -1.5}) {
    formats::compress_options o;
    o.threads = 1;
    o.target.ssim = bad;
    expect_error([&] { formats::compress_npy(in, dir.file("n.dcz"), *be, o); },
                 errc::invalid_argument, {"an SSIM target must be within -1 to 1, not "});
  }
  EXPECT_FALSE(fs::exists(dir.file("n.dcz")));
  formats::compress_options plain;
  plain.threads = 1;
  formats::compress_npy(in, dir.file("a.dcz"), *be, plain);
  for (int gate = 0; gate < 3; ++gate) {
    formats::verify_options v;
    (gate == 0 ? v.min_psnr : gate == 1 ? v.min_ssim : v.max_error) = nan;
    expect_error([&] { formats::verify_archive(dir.file("a.dcz"), in, *be, v); },
                 errc::invalid_argument, {"a verify gate must be a finite number"});
  }
}

TEST(QualityPipeline, PsnrTargetHalfwayBetweenChop3And4PicksChop4) {
  temp_dir dir;
  const analytic_f32 d;
  const std::string in = d.save(dir);
  const double p3 = d.psnr_at(3), p4 = d.psnr_at(4);
  ASSERT_GT(p4 - p3, 3.0) << "the chops must be well apart for this test to mean anything";
  formats::compress_options o;
  o.threads = 1;
  o.target.psnr_db = (p3 + p4) / 2;
  auto be = cpu();
  const auto r = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
  EXPECT_EQ(r.codec.chop, 4);
  ASSERT_TRUE(r.q && r.q->psnr_db);
  EXPECT_NEAR(*r.q->psnr_db, p4, 0.01);
  EXPECT_TRUE(fs::exists(dir.file("a.dcz")));
  EXPECT_EQ(r.archive_bytes, fs::file_size(dir.file("a.dcz")));
  // The search tried 1, 2, 3 (each short of the target, at its analytic PSNR) and then 4.
  ASSERT_FALSE(r.trials.empty());
  for (int k = 1; k <= 3; ++k) {
    const auto* t = trial_for(r, k);
    ASSERT_NE(t, nullptr) << "no trial of chop " << k;
    EXPECT_FALSE(t->meets) << "chop " << k;
    ASSERT_TRUE(t->q.psnr_db);
    EXPECT_LT(*t->q.psnr_db, *o.target.psnr_db);
    EXPECT_NEAR(*t->q.psnr_db, d.psnr_at(k), 0.01) << "chop " << k;
  }
  const auto* t4 = trial_for(r, 4);
  ASSERT_NE(t4, nullptr);
  EXPECT_TRUE(t4->meets);
  EXPECT_EQ(trial_for(r, 5), nullptr) << "the search stops at the first chop that meets";
  for (const auto& t : r.trials) EXPECT_LE(t.chop, 4);
  // The whole input (16 KiB) is the sample: the measurements are of all the data.
  EXPECT_FALSE(r.trials.back().on_sample);
  EXPECT_EQ(r.trials.back().chop, 4);
  // The archive holds chop 4.
  const json info = formats::archive_info(dir.file("a.dcz"));
  EXPECT_EQ(info.at("codec").at("chop"), 4);
}

TEST(QualityPipeline, ASampleKinderThanTheWholeDatasetMovesTheChopUpUntilTheWholeMeetsIt) {
  // 16 u8 samples of 16x16; the search measures 4 of them (search_bytes), one per run at
  // 0, 4, 8 and 12: those are flat, the others noise. Chop 1 meets 40 dB on them; the
  // whole dataset does not, so compress writes it again at 2, 3, ... until it does.
  temp_dir dir;
  const u64 n = 16, side = 16;
  std::vector<std::uint8_t> x(n * side * side);
  std::mt19937 rng(7);
  for (u64 s = 0; s < n; ++s)
    for (u64 i = 0; i < side * side; ++i)
      x[s * side * side + i] = s % 4 == 0 ? std::uint8_t(100 + s) : std::uint8_t(rng() % 256);
  save_npy(dir.file("in.npy"), dtype::u8, {n, side, side}, x);
  formats::compress_options o;
  o.threads = 1;
  o.target.psnr_db = 40.0;
  o.search_bytes = 4 * side * side;
  auto be = cpu();
  const auto r = formats::compress_npy(dir.file("in.npy"), dir.file("a.dcz"), *be, o);
  ASSERT_GE(r.trials.size(), 3u);
  EXPECT_TRUE(r.trials.front().on_sample);
  EXPECT_EQ(r.trials.front().chop, 1);
  EXPECT_TRUE(r.trials.front().meets) << "the flat samples are exact at chop 1";
  EXPECT_FALSE(r.trials.front().q.psnr_db) << "lossless on the sample";
  // Then the whole dataset, chop after chop, each short of 40 dB but the last.
  for (std::size_t i = 1; i < r.trials.size(); ++i) {
    const auto& t = r.trials[i];
    EXPECT_FALSE(t.on_sample) << i;
    EXPECT_EQ(t.chop, int(i)) << i;
    EXPECT_EQ(t.meets, i + 1 == r.trials.size()) << i;
  }
  EXPECT_EQ(r.codec.chop, r.trials.back().chop);
  EXPECT_GT(r.codec.chop, 1);
  // The archive written last holds that chop and meets the target on the whole data,
  // measured here from its decode.
  formats::decompress_options d;
  formats::decompress_to_npy(dir.file("a.dcz"), dir.file("back.npy"), *be, d);
  const auto back = test::load_npy(dir.file("back.npy"));
  const std::vector<double> xd(x.begin(), x.end());
  EXPECT_GE(test::psnr_of(xd, back.values, 255.0), 40.0);
  EXPECT_EQ(formats::archive_info(dir.file("a.dcz")).at("codec").at("chop"), r.codec.chop);
}

/** 16 u8 samples of 16x16 of which the search's sample (search_bytes of 4 samples: one per
 *  run at 0, 4, 8 and 12) holds the hard ones: a stripe pattern of one frequency plus noise,
 *  while the others are flat, exact at any chop. So the whole dataset is 6.02 dB better
 *  than the sample at every chop (a quarter of its MSE, the same R). */
std::string save_hard_sample(const temp_dir& dir) {
  const u64 n = 16, side = 16;
  std::vector<std::uint8_t> x(n * side * side);
  std::mt19937 rng(11);
  for (u64 s = 0; s < n; ++s)
    for (u64 i = 0; i < side * side; ++i) {
      const double stripes = 60.0 * std::cos(3.0 * 3.14159265358979 * double(i % side) / 8.0);
      const double hard = std::clamp(128.0 + stripes + double(rng() % 41) - 20.0, 0.0, 255.0);
      x[s * side * side + i] = std::uint8_t(s % 4 == 0 ? hard : double(100 + s));
    }
  save_npy(dir.file("in.npy"), dtype::u8, {n, side, side}, x);
  return dir.file("in.npy");
}

TEST(QualityPipeline, ASampleHarderThanTheWholeTriesTheChopsBelowOnTheWholeAndKeepsTheSmallest) {
  // The sample picks chop k; the whole dataset beats the sample at k by 6 dB, more than the
  // sample missed the target by at k - 1: the whole is tried at k - 1, and so on down while
  // it meets the target. The result is what eval of the whole dataset says is the smallest
  // chop that meets it: the largest ratio. It used to stay at the sample's k.
  temp_dir dir;
  const std::string in = save_hard_sample(dir);
  auto be = cpu();
  formats::eval_options eo;
  eo.threads = 1;
  eo.ssim = false;
  eo.chops = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto whole = formats::eval_npy(in, *be, eo);
  ASSERT_EQ(whole.rows.size(), 8u);
  formats::compress_options o;
  o.threads = 1;
  o.ssim = false;
  o.search_bytes = 4 * 16 * 16;
  std::vector<double> sample_psnr;  // eval of the sample alone
  {
    // The sample alone as a file: samples 0, 4, 8, 12.
    const auto all = test::load_npy(in);
    std::vector<std::uint8_t> s;
    for (u64 k = 0; k < 16; k += 4)
      for (u64 i = 0; i < 256; ++i) s.push_back(std::uint8_t(all.values[k * 256 + i]));
    save_npy(dir.file("sample.npy"), dtype::u8, {4, 16, 16}, s);
  }
  const auto sample = formats::eval_npy(dir.file("sample.npy"), *be, eo);
  for (const auto& row : sample.rows) sample_psnr.push_back(row.q.psnr_db.value_or(1e9));
  // A target between the sample's chops 5 and 6: the sample picks 6.
  ASSERT_LT(sample_psnr[4], sample_psnr[5]);
  const double target = (sample_psnr[4] + sample_psnr[5]) / 2;
  int smallest = 0;
  for (const auto& row : whole.rows) {
    if (smallest == 0 && row.q.psnr_db.value_or(1e9) >= target) smallest = row.chop;
  }
  ASSERT_GT(smallest, 0);
  ASSERT_LT(smallest, 5) << "the data do not set the case up: the whole must meet it lower down";
  ASSERT_GT(smallest, 1) << "the descent should stop above chop 1";
  o.target.psnr_db = target;
  const auto r = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
  EXPECT_EQ(r.codec.chop, smallest);
  // Trials: the sample's 1..6, then the whole at 6, 5, ... down to the one below the
  // smallest: each pass measures the chop below it on the whole too, and the pass at the
  // smallest finds the one below it short of the target (stripes that it drops).
  std::vector<std::pair<int, bool>> got, want;
  for (const auto& t : r.trials) got.emplace_back(t.chop, t.on_sample);
  for (int k = 1; k <= 6; ++k) want.emplace_back(k, true);
  for (int k = 6; k >= smallest - 1; --k) want.emplace_back(k, false);
  EXPECT_EQ(got, want);
  for (std::size_t i = 6; i < r.trials.size(); ++i) {
    EXPECT_EQ(r.trials[i].meets, i + 1 < r.trials.size()) << "chop " << r.trials[i].chop;
    ASSERT_TRUE(r.trials[i].q.psnr_db);
    EXPECT_NEAR(*r.trials[i].q.psnr_db,
                *whole.rows[std::size_t(r.trials[i].chop - 1)].q.psnr_db, 1e-9)
        << "the whole dataset's figure at chop " << r.trials[i].chop << ", as eval gives it";
  }
  EXPECT_EQ(formats::archive_info(dir.file("a.dcz")).at("codec").at("chop"), smallest);
  ASSERT_TRUE(r.q && r.q->psnr_db);
  EXPECT_NEAR(*r.q->psnr_db, *whole.rows[std::size_t(smallest - 1)].q.psnr_db, 1e-9);
  // Nothing else is left in the folder: the archives written for the chops not kept are gone.
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy", "sample.npy"}));
}

TEST(QualityPipeline, AChopBelowThatFallsShortOnTheWholeDatasetLeavesTheArchiveAboveIt) {
  // f32: the sample (samples 0, 4, 8, 12) is noise; the other samples hold one DCT basis
  // pattern of frequency 5, kept exactly from chop 6 up and lost below. At chop 6 the whole
  // beats the sample by 6 dB, so chop 5 looks worth a try, but there the others' pattern is
  // gone: it falls short, and the archive of chop 6, written before, is the one kept.
  temp_dir dir;
  const u64 n = 16, side = 16;
  std::vector<float> x(n * side * side);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> noise(-1.0f, 1.0f);
  for (u64 s = 0; s < n; ++s)
    for (u64 i = 0; i < side * side; ++i) {
      const double c = double(i % side % 8);
      x[s * side * side + i] =
          s % 4 == 0 ? noise(rng)
                     : float(1.5 * std::cos((2.0 * c + 1.0) * 5.0 * std::numbers::pi / 16.0));
    }
  save_npy(dir.file("in.npy"), dtype::f32, {n, side, side}, x);
  auto be = cpu();
  formats::compress_options o;
  o.threads = 1;
  o.ssim = false;
  o.search_bytes = 4 * side * side * sizeof(float);
  std::vector<formats::chop_trial> seen;
  o.on_trial = [&](const formats::chop_trial& t) { seen.push_back(t); };
  // The sample's chops 5 and 6 (the search's own trials, with a target nothing lossy meets).
  o.target.psnr_db = 1000.0;
  EXPECT_THROW(formats::compress_npy(dir.file("in.npy"), dir.file("x.dcz"), *be, o), error);
  ASSERT_GE(seen.size(), 6u);
  ASSERT_TRUE(seen[4].on_sample && seen[5].on_sample);
  const double s5 = *seen[4].q.psnr_db, s6 = *seen[5].q.psnr_db;
  ASSERT_GT(s6 - s5, 0.5);
  o.target.psnr_db = (s5 + s6) / 2;
  seen.clear();
  const auto r = formats::compress_npy(dir.file("in.npy"), dir.file("a.dcz"), *be, o);
  EXPECT_EQ(r.codec.chop, 6);
  ASSERT_EQ(r.trials.size(), 8u);
  EXPECT_EQ(r.trials[6].chop, 6);
  EXPECT_FALSE(r.trials[6].on_sample);
  EXPECT_TRUE(r.trials[6].meets);
  ASSERT_TRUE(r.trials[6].q.psnr_db);
  EXPECT_NEAR(*r.trials[6].q.psnr_db - s6, 10 * std::log10(4.0), 0.01) << "a quarter of the MSE";
  EXPECT_EQ(r.trials[7].chop, 5);
  EXPECT_FALSE(r.trials[7].on_sample);
  EXPECT_FALSE(r.trials[7].meets);
  EXPECT_EQ(seen.size(), r.trials.size()) << "every trial is reported as it is made";
  ASSERT_TRUE(r.q && r.q->psnr_db);
  EXPECT_DOUBLE_EQ(*r.q->psnr_db, *r.trials[6].q.psnr_db);
  EXPECT_EQ(formats::archive_info(dir.file("a.dcz")).at("codec").at("chop"), 6);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"}));
}

TEST(QualityPipeline, ASampleShortOfTheTargetEvenAtChopBStillLetsTheWholeDatasetMeetIt) {
  // The search gave up when the sample fell short at chop B ("cannot be reached", exit 8),
  // though the whole dataset meets the target there: now the whole is compressed at chop B
  // and kept where it meets the target, and only its shortfall is exit 8.
  temp_dir dir;
  const std::string in = save_hard_sample(dir);
  auto be = cpu();
  formats::compress_options o;
  o.threads = 1;
  o.ssim = false;
  o.search_bytes = 4 * 16 * 16;
  o.coeff = coeff_type::i16;  // u8 at chop 8 in i16: close to lossless, not quite
  formats::eval_options eo;
  eo.threads = 1;
  eo.ssim = false;
  eo.chops = {8};
  eo.coeffs = {coeff_type::i16};
  const auto whole = formats::eval_npy(in, *be, eo);
  ASSERT_TRUE(whole.rows.at(0).q.psnr_db);
  const double at_b = *whole.rows[0].q.psnr_db;  // the sample's is 6.02 dB lower
  o.target.psnr_db = at_b - 3.0;
  const auto r = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
  EXPECT_EQ(r.codec.chop, 8);
  ASSERT_GE(r.trials.size(), 9u);
  EXPECT_TRUE(r.trials[7].on_sample);
  EXPECT_FALSE(r.trials[7].meets) << "the sample falls short at chop 8";
  EXPECT_FALSE(r.trials[8].on_sample);
  EXPECT_TRUE(r.trials[8].meets);
  // The pass at chop 8 measured chop 7 on the whole dataset too: short of the target.
  ASSERT_EQ(r.trials.size(), 10u);
  EXPECT_EQ(r.trials[9].chop, 7);
  EXPECT_FALSE(r.trials[9].on_sample);
  EXPECT_FALSE(r.trials[9].meets);
  // Above what the whole gives: exit 8's error, naming the whole dataset, and no archive.
  o.target.psnr_db = at_b + 0.5;
  try {
    formats::compress_npy(in, dir.file("b.dcz"), *be, o);
    ADD_FAILURE() << "a target above chop 8 on the whole data was met";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::quality_not_met);
    EXPECT_NE(std::string(e.what()).find("on the whole dataset"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.dcz")));
}

TEST(QualityPipeline, PsnrTargetJustBelowChop2PicksChop2AndJustAbovePicksChop3) {
  temp_dir dir;
  const analytic_f32 d;
  const std::string in = d.save(dir);
  auto be = cpu();
  formats::compress_options o;
  o.threads = 1;
  o.overwrite = true;
  o.target.psnr_db = d.psnr_at(2) - 0.05;
  const auto r2 = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
  EXPECT_EQ(r2.codec.chop, 2);
  ASSERT_TRUE(r2.q && r2.q->psnr_db);
  EXPECT_NEAR(*r2.q->psnr_db, d.psnr_at(2), 0.01);
  ASSERT_NE(trial_for(r2, 1), nullptr);
  EXPECT_FALSE(trial_for(r2, 1)->meets);

  o.target.psnr_db = d.psnr_at(2) + 0.05;
  const auto r3 = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
  EXPECT_EQ(r3.codec.chop, 3);
  ASSERT_NE(trial_for(r3, 2), nullptr);
  EXPECT_FALSE(trial_for(r3, 2)->meets);
}

TEST(QualityPipeline, SsimTargetOnU8PicksAChopThatMeetsItWhileTheChopBelowDoesNot) {
  temp_dir dir;
  const std::string in = save_textured(dir);
  auto be = cpu();
  // SSIM of every chop on the whole data, from eval.
  formats::eval_options eo;
  eo.threads = 1;
  eo.chops = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto ev = formats::eval_npy(in, *be, eo);
  ASSERT_EQ(ev.rows.size(), 8u);
  std::vector<double> s;
  for (const auto& row : ev.rows) {
    ASSERT_TRUE(row.q.ssim) << "chop " << row.chop;
    s.push_back(*row.q.ssim);
  }
  // A target between chop 2 and chop 3, which the data makes far apart.
  ASSERT_GT(s[2] - s[1], 0.01) << "SSIM at chops 2, 3: " << s[1] << ", " << s[2];
  const double target = (s[1] + s[2]) / 2;

  formats::compress_options o;
  o.threads = 1;
  o.target.ssim = target;
  const auto r = formats::compress_npy(in, dir.file("a.dcz"), *be, o);
  const int k = r.codec.chop;
  EXPECT_EQ(k, 3);
  ASSERT_TRUE(r.q && r.q->ssim);
  EXPECT_GE(*r.q->ssim, target);
  EXPECT_NEAR(*r.q->ssim, s[2], 1e-9) << "compress measures what eval measures";
  const auto* below = trial_for(r, k - 1);
  ASSERT_NE(below, nullptr) << "the trials show the chop below the chosen one";
  EXPECT_FALSE(below->meets);
  ASSERT_TRUE(below->q.ssim);
  EXPECT_LT(*below->q.ssim, target);
  const auto* chosen = trial_for(r, k);
  ASSERT_NE(chosen, nullptr);
  EXPECT_TRUE(chosen->meets);
  // An independent check of the written archive: verify measures the same SSIM.
  formats::verify_options vo;
  vo.threads = 1;
  vo.min_ssim = target;
  const auto v = formats::verify_archive(dir.file("a.dcz"), in, *be, vo);
  EXPECT_TRUE(v.passed()) << v.to_json().dump();
}

// ============================================================ unreachable targets

TEST(QualityPipeline, EvalGivesAChanceToCancelBetweenTheSettingsOfAChunk) {
  // The progress function (the command's check for a signal) ran once a chunk: with many
  // settings of one chunk, Ctrl-C waited for all of them, 10 s and more, and then threw the
  // figures away. Now it runs before each setting too.
  temp_dir dir;
  const std::string in = save_noise_u8(dir);  // one chunk
  formats::eval_options o;
  o.threads = 1;
  o.chops = {1, 2, 3, 4, 5, 6, 7, 8};
  int calls = 0;
  o.progress = [&](std::uint64_t, std::uint64_t) { ++calls; };
  auto be = cpu();
  const auto all = formats::eval_npy(in, *be, o);
  ASSERT_EQ(all.rows.size(), 8u);
  EXPECT_GE(calls, 8) << "a call before each setting";
  calls = 0;
  o.progress = [&](std::uint64_t, std::uint64_t) {
    if (++calls == 3) throw error(errc::interrupted, "cancelled");
  };
  expect_error([&] { formats::eval_npy(in, *be, o); }, errc::interrupted, {"cancelled"});
  EXPECT_EQ(calls, 3) << "stopped at the third setting, not after the eighth";
}

TEST(QualityPipeline, UnreachablePsnrTargetThrowsQualityNotMetAndWritesNothing) {
  temp_dir dir;
  const std::string in = save_noise_u8(dir);
  auto be = cpu();
  // Precondition: even chop 8 with i16 coefficients (rounded to integers) leaves some error.
  formats::eval_options eo;
  eo.threads = 1;
  eo.chops = {8};
  eo.coeffs = {coeff_type::i16};
  const auto ev = formats::eval_npy(in, *be, eo);
  ASSERT_TRUE(ev.rows.at(0).error.empty());
  ASSERT_TRUE(ev.rows.at(0).q.psnr_db) << "chop 8 i16 happens to be lossless on this data";
  ASSERT_LT(*ev.rows.at(0).q.psnr_db, 200);

  formats::compress_options o;
  o.threads = 1;
  o.coeff = coeff_type::i16;
  o.target.psnr_db = 200;
  std::vector<formats::chop_trial> seen;
  o.on_trial = [&](const formats::chop_trial& t) { seen.push_back(t); };
  expect_error([&] { formats::compress_npy(in, dir.file("out.dcz"), *be, o); },
               errc::quality_not_met, {"chop 8"});
  // Each chop was measured and reported before the search gave up, the last as eval saw it.
  ASSERT_EQ(seen.size(), 8u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].chop, int(i) + 1);
    EXPECT_FALSE(seen[i].meets) << "chop " << seen[i].chop;
    EXPECT_FALSE(seen[i].on_sample) << "the input is smaller than the sample";
  }
  ASSERT_TRUE(seen.back().q.psnr_db);
  EXPECT_NEAR(*seen.back().q.psnr_db, *ev.rows.at(0).q.psnr_db, 1e-9);
  EXPECT_LT(*seen.front().q.psnr_db, *seen.back().q.psnr_db);
  EXPECT_FALSE(fs::exists(dir.file("out.dcz")));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"noise.npy"}) << "no temporary file left";
  // The same with an SSIM target above what chop 8 reaches.
  formats::compress_options os;
  os.threads = 1;
  os.coeff = coeff_type::i16;
  os.target.ssim = 1.0;
  expect_error([&] { formats::compress_npy(in, dir.file("out.dcz"), *be, os); },
               errc::quality_not_met);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"noise.npy"});
}

TEST(QualityPipeline, PsnrTargetOfU8WithF16IsMetLosslesslyByChop8) {
  // u8 noise with f16 coefficients decodes exactly at chop 8 (infinite PSNR), which meets any
  // PSNR target: the search ends there instead of failing.
  temp_dir dir;
  const std::string in = save_noise_u8(dir);
  auto be = cpu();
  formats::compress_options o;
  o.threads = 1;
  o.coeff = coeff_type::f16;
  o.target.psnr_db = 200;
  std::vector<int> seen;  // the chops reported as they were measured
  o.on_trial = [&](const formats::chop_trial& t) { seen.push_back(t.chop); };
  const auto r = formats::compress_npy(in, dir.file("out.dcz"), *be, o);
  EXPECT_EQ(r.codec.chop, 8);
  ASSERT_TRUE(r.q);
  EXPECT_FALSE(r.q->psnr_db) << "lossless";
  EXPECT_EQ(r.q->max_abs_error, 0);
  for (const auto& t : r.trials) EXPECT_EQ(t.meets, t.chop == 8) << "chop " << t.chop;
  std::vector<int> listed;
  for (const auto& t : r.trials) listed.push_back(t.chop);
  EXPECT_EQ(seen, listed) << "the callback saw what the result lists, once each";
}

TEST(QualityCli, UnreachablePsnrTargetExits8AndLeavesNoOutput) {
  temp_dir dir;
  save_noise_u8(dir);
  auto c = cli(dir, "compress noise.npy -o out.dcz --psnr 200 --coeff i16");
  EXPECT_EQ(c.status, 8) << describe(c);
  EXPECT_TRUE(contains(c.err, "chop 8")) << c.err;
  // The measurements come before the error, one line per chop.
  const auto error_at = c.err.find("error:");
  ASSERT_NE(error_at, std::string::npos) << c.err;
  for (int k = 1; k <= 8; ++k) {
    const auto at = c.err.find("chop " + std::to_string(k) + ": PSNR ");
    EXPECT_LT(at, error_at) << "chop " << k << ":\n" << c.err;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"noise.npy"});
  auto j = cli(dir, "compress noise.npy -o out.dcz --psnr 200 --coeff i16 --json");
  EXPECT_EQ(j.status, 8) << describe(j);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"noise.npy"});
  // The failure report carries them too.
  const auto r = nlohmann::json::parse(j.out);
  EXPECT_EQ(r.at("exit_code"), 8);
  ASSERT_EQ(r.at("chop_search").size(), 8u) << j.out;
  for (int k = 1; k <= 8; ++k) {
    const auto& t = r["chop_search"][k - 1];
    EXPECT_EQ(t.at("chop"), k);
    EXPECT_FALSE(t.at("meets").get<bool>());
    EXPECT_LT(t.at("psnr_db").get<double>(), 200);
  }
}

TEST(QualityCli, UnreachablePsnrTargetOnF32DataExits8AndAdvisesF32OnlyWhereItHelps) {
  // Float data is never decoded exactly from f16 coefficients, so 200 dB is out of reach;
  // f32 coefficients may help there. 300 dB is beyond even f32, which has nothing to advise.
  temp_dir dir;
  const analytic_f32 d;
  d.save(dir, "f.npy");
  auto c = cli(dir, "compress f.npy -o f.dcz --psnr 200 --coeff f16");
  EXPECT_EQ(c.status, 8) << describe(c);
  EXPECT_TRUE(contains(c.err, "chop 8")) << c.err;
  EXPECT_TRUE(contains(c.err, "try --coeff f32")) << c.err;
  EXPECT_TRUE(contains(c.err, "on all the data")) << c.err;  // 16 KiB: the sample is all of it
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f.npy"});
  auto f = cli(dir, "compress f.npy -o f.dcz --psnr 300 --coeff f32");
  EXPECT_EQ(f.status, 8) << describe(f);
  EXPECT_FALSE(contains(f.err, "try --coeff f32")) << f.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f.npy"});
}

TEST(QualityCli, TheTargetSearchMeasuresAllOfASmallInputOfTinyPlanesAndPicksTheSmallestChop) {
  // 32768 samples of 2x2 u8 (128 KiB) at block 32, f32: each sample's coefficients at chop
  // 32 are 4 KiB, 128 MiB in all. The sample was cut to fit them (a quarter of the data),
  // and a harder quarter chose a larger chop than the data needed. Now all of an input under
  // the search's 32 MiB is measured, coded in pieces.
  temp_dir dir;
  const std::uint64_t n = 32768;
  std::vector<std::uint8_t> v(n * 4, 128);
  std::uint32_t x = 9;
  for (std::uint64_t i = 0; i < n * 4; ++i) {
    x = x * 1664525u + 1013904223u;
    if ((i / 4) % 4 == 0) v[i] = static_cast<std::uint8_t>(x >> 24);  // a quarter noisy
  }
  save_npy(dir.file("t.npy"), dtype::u8, {n, 2, 2}, v);
  const std::string common = " --layout NHW --block 32 --coeff f32 --no-ssim --json -q";
  auto one = cli(dir, "compress t.npy -o one.dcz --chop 1" + common);
  ASSERT_EQ(one.status, 0) << describe(one);
  const double psnr1 = parse_json(one.out).at("quality").at("psnr_db").get<double>();
  auto c = cli(dir, "compress t.npy -o s.dcz --psnr " + num(psnr1 - 0.01, 6) + common);
  ASSERT_EQ(c.status, 0) << describe(c);
  const json j = parse_json(c.out);
  EXPECT_EQ(j.at("chop"), 1) << c.out;
  ASSERT_FALSE(j.at("chop_search").empty()) << c.out;
  EXPECT_EQ(j["chop_search"][0].at("measured_on"), "all") << c.out;
  EXPECT_NEAR(j["chop_search"][0].at("psnr_db").get<double>(), psnr1, 1e-9) << c.out;
}

TEST(QualityCli, AnUnreachableSsimTargetIsReportedInSsimWithItsTarget) {
  temp_dir dir;
  const analytic_f32 d;
  d.save(dir, "f.npy");
  auto c = cli(dir, "compress f.npy -o f.dcz --ssim 1.5e-1 --psnr 300 --coeff f32");
  EXPECT_EQ(c.status, 8) << describe(c);
  EXPECT_TRUE(contains(c.err, "gives PSNR ")) << c.err;
  EXPECT_TRUE(contains(c.err, "(target 300), SSIM ")) << c.err;
  EXPECT_TRUE(contains(c.err, "(target 0.15) on all the data, short of the target")) << c.err;
  save_textured(dir);
  auto s = cli(dir, "compress tex.npy -o t.dcz --ssim 1 --coeff i16");
  EXPECT_EQ(s.status, 8) << describe(s);
  EXPECT_TRUE(contains(s.err, "(every coefficient) gives SSIM ")) << s.err;
  EXPECT_TRUE(contains(s.err, "(target 1)")) << s.err;
  // (The measurements before it list PSNR too; the error speaks of the target given.)
  const auto at = s.err.find("error:");
  ASSERT_NE(at, std::string::npos) << s.err;
  EXPECT_FALSE(contains(s.err.substr(at), "PSNR")) << s.err;
}

TEST(QualityCli, PsnrTargetWithStdinInputIsAUsageError) {
  temp_dir dir;
  save_textured(dir);
  auto c = sh(dir, "cat tex.npy | DCTCHOP compress - -o out.dcz --psnr 30");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_TRUE(contains(c.err, "stdin")) << c.err;
  EXPECT_FALSE(fs::exists(dir.file("out.dcz")));
}

TEST(QualityCli, AnOutputThatCannotBeWrittenIsRefusedBeforeTheSearchMeasuresAnything) {
  // The search (and a float input's range pass) came first, the refusal only after it.
  temp_dir dir;
  save_textured(dir);
  write_bytes(dir.file("old.dcz"), "old");
  for (const std::string args : {"-o old.dcz --psnr 30", "-o old.dcz --ssim 0.5",
                                 "-o nodir/x.dcz --psnr 30"}) {
    auto c = cli(dir, "compress tex.npy " + args);
    EXPECT_EQ(c.status, args.find("old") != std::string::npos ? 6 : 5) << args << describe(c);
    EXPECT_FALSE(contains(c.err, "chop 1:")) << args << ": the search ran first\n" << c.err;
    EXPECT_TRUE(contains(c.err, args.find("old") != std::string::npos
                                    ? "old.dcz: already exists (use -f to overwrite)"
                                    : "the folder nodir does not exist")) << c.err;
  }
  EXPECT_EQ(read_bytes(dir.file("old.dcz")), "old");
  // Float data (a first pass over the file for its range, before the search): refused with
  // no measurement printed.
  save_npy(dir.file("f.npy"), dtype::f32, {3, 16, 16}, dctchop::test::smooth_f32_nhw(3, 16, 16));
  auto fl = cli(dir, "compress f.npy -o old.dcz --ssim 0.5");
  EXPECT_EQ(fl.status, 6) << describe(fl);
  EXPECT_FALSE(contains(fl.err, "chop 1:")) << fl.err;
  EXPECT_EQ(read_bytes(dir.file("old.dcz")), "old");
  auto f = cli(dir, "compress tex.npy -o old.dcz --psnr 30 -f -q");
  EXPECT_EQ(f.status, 0) << describe(f);
}

TEST(QualityCli, PsnrTogetherWithChopIsAUsageError) {
  temp_dir dir;
  save_textured(dir);
  auto c = cli(dir, "compress tex.npy -o out.dcz --psnr 30 --chop 4");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_TRUE(contains(c.err, "--chop excludes --psnr")) << c.err;
  EXPECT_FALSE(fs::exists(dir.file("out.dcz")));
  auto s = cli(dir, "compress tex.npy -o out.dcz --ssim 0.9 --chop 4");
  EXPECT_EQ(s.status, 2) << describe(s);
  EXPECT_TRUE(contains(s.err, "--chop excludes --ssim")) << s.err;
  EXPECT_FALSE(fs::exists(dir.file("out.dcz")));
}

TEST(QualityCli, PsnrTargetPicksChop4OnTheAnalyticInputAndReportsTheSearch) {
  temp_dir dir;
  const analytic_f32 d;
  d.save(dir, "f.npy");
  const double target = (d.psnr_at(3) + d.psnr_at(4)) / 2;
  auto c = cli(dir, "compress f.npy -o f.dcz --psnr " + num(target, 4) + " --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json j = parse_json(c.out);
  EXPECT_EQ(j.at("chop"), 4);
  EXPECT_NEAR(j.at("quality").at("psnr_db").get<double>(), d.psnr_at(4), 0.01);
  ASSERT_TRUE(j.contains("chop_search")) << c.out;
  const auto& search = j["chop_search"];
  ASSERT_EQ(search.size(), 4u) << c.out;
  for (int k = 1; k <= 4; ++k) {
    EXPECT_EQ(search[k - 1].at("chop"), k);
    EXPECT_EQ(search[k - 1].at("meets").get<bool>(), k == 4);
    EXPECT_NEAR(search[k - 1].at("psnr_db").get<double>(), d.psnr_at(k), 0.01);
  }
  // The text report names the choice.
  auto t = cli(dir, "compress f.npy -o g.dcz --psnr " + num(target, 4));
  ASSERT_EQ(t.status, 0) << describe(t);
  EXPECT_TRUE(contains(t.err, "chose chop 4")) << t.err;
}

// ============================================================ eval

struct eval_setting {
  dtype type;
  int block, chop;
  coeff_type coeff;
  double chunk_mb;
};

TEST(QualityPipeline, EvalArchiveBytesEqualTheFileCompressWritesAndQualityAgrees) {
  temp_dir dir;
  const std::string u8in = save_textured(dir, "tex.npy", 6);
  const analytic_f32 d;
  const std::string f32in = d.save(dir, "f.npy");
  auto be = cpu();
  const std::vector<eval_setting> settings = {
      {dtype::u8, 8, 4, coeff_type::f16, 4.0},
      {dtype::u8, 8, 2, coeff_type::bf16, 0.003},  // several chunks of 2 samples
      {dtype::u8, 16, 5, coeff_type::f32, 4.0},
      {dtype::f32, 4, 3, coeff_type::f32, 0.005},  // several chunks
      {dtype::f32, 8, 6, coeff_type::f16, 4.0},
  };
  for (const auto& s : settings) {
    SCOPED_TRACE("dtype " + std::string(to_string(s.type)) + " block " + std::to_string(s.block) +
                 " chop " + std::to_string(s.chop) + " coeff " + std::string(to_string(s.coeff)) +
                 " chunk_mb " + std::to_string(s.chunk_mb));
    const std::string& in = s.type == dtype::u8 ? u8in : f32in;
    formats::eval_options eo;
    eo.threads = 1;
    eo.blocks = {s.block};
    eo.chops = {s.chop};
    eo.coeffs = {s.coeff};
    eo.chunk_mb = s.chunk_mb;
    const auto ev = formats::eval_npy(in, *be, eo);
    ASSERT_EQ(ev.rows.size(), 1u);
    const auto& row = ev.rows[0];
    ASSERT_TRUE(row.error.empty()) << row.error;

    formats::compress_options co;
    co.threads = 1;
    co.block = s.block;
    co.chop = s.chop;
    co.coeff = s.coeff;
    co.chunk_mb = s.chunk_mb;
    co.overwrite = true;
    const std::string out = dir.file("a.dcz");
    const auto cr = formats::compress_npy(in, out, *be, co);
    const u64 file_bytes = fs::file_size(out);
    EXPECT_EQ(row.archive_bytes, file_bytes);
    EXPECT_EQ(cr.archive_bytes, file_bytes);
    EXPECT_EQ(row.input_bytes, cr.input_bytes);
    EXPECT_NEAR(row.ratio(), cr.ratio(), 1e-12);
    ASSERT_TRUE(cr.q && cr.q->psnr_db && row.q.psnr_db);
    EXPECT_NEAR(*row.q.psnr_db, *cr.q->psnr_db, 1e-9);
    ASSERT_TRUE(row.q.sample_psnr_min && cr.q->sample_psnr_min);
    EXPECT_NEAR(*row.q.sample_psnr_min, *cr.q->sample_psnr_min, 1e-9);
    ASSERT_TRUE(row.q.ssim && cr.q->ssim);
    EXPECT_NEAR(*row.q.ssim, *cr.q->ssim, 1e-9);
    EXPECT_NEAR(row.q.max_abs_error, cr.q->max_abs_error, 1e-9);
  }
}

TEST(QualityPipeline, EvalArchiveBytesAreExactWhenCompressWritesSeveralChunks) {
  // The footer of an archive holds the quality figures as JSON numbers, so the archive size
  // depends on their last digits: eval (which measures the input in one piece) must arrive at
  // the very figures compress accumulates chunk by chunk, or its "true" size is off by a byte
  // or two. One thread: nothing here depends on OpenMP's scheduling.
  temp_dir dir;
  auto be = cpu();
  std::vector<std::string> wrong;
  int several = 0;
  for (int seed = 1; seed <= 12; ++seed) {
    const int n = 3 + seed % 7;
    const std::string in = dir.file(std::to_string(seed) + "_t.npy");
    save_npy(in, dtype::u8, {u64(n), 32, 32}, textured_u8(n, 32, 32, seed));
    for (int chop : {3, 5})
      for (double chunk_mb : {0.001, 0.0025}) {
        formats::eval_options eo;
        eo.threads = 1;
        eo.chops = {chop};
        eo.coeffs = {coeff_type::bf16};
        eo.chunk_mb = chunk_mb;
        const auto row = formats::eval_npy(in, *be, eo).rows.at(0);
        formats::compress_options co;
        co.threads = 1;
        co.chop = chop;
        co.coeff = coeff_type::bf16;
        co.chunk_mb = chunk_mb;
        co.overwrite = true;
        const auto cr = formats::compress_npy(in, dir.file("a.dcz"), *be, co);
        several += cr.chunks > 1 ? 1 : 0;
        const u64 file_bytes = fs::file_size(dir.file("a.dcz"));
        if (row.archive_bytes != file_bytes) {
          char b[400];
          std::snprintf(b, sizeof b,
                        "seed %d (%d samples) chop %d bf16 chunk_mb %g: eval %llu, file %llu; "
                        "sample_psnr_mean %.17g vs %.17g, ssim %.17g vs %.17g",
                        seed, n, chop, chunk_mb, (unsigned long long)row.archive_bytes,
                        (unsigned long long)file_bytes, row.q.sample_psnr_mean.value_or(0),
                        cr.q->sample_psnr_mean.value_or(0), row.q.ssim.value_or(0),
                        cr.q->ssim.value_or(0));
          wrong.push_back(b);
        }
      }
  }
  EXPECT_GE(several, 30) << "most settings must write several chunks";
  std::string all;
  for (const auto& w : wrong) {
    all += w;
    all += '\n';
  }
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " of 48 settings differ:\n" << all;
}

TEST(QualityPipeline, EvalSkipsDefaultChopsAboveTheBlock) {
  // eval_options::chops defaults to {1, 2, 4, 6}; "values above the block are skipped".
  temp_dir dir;
  const std::string in = save_textured(dir);
  auto be = cpu();
  formats::eval_options eo;
  eo.threads = 1;
  eo.blocks = {4};
  formats::eval_result ev;
  ASSERT_NO_THROW(ev = formats::eval_npy(in, *be, eo));
  std::vector<int> chops;
  for (const auto& r : ev.rows) chops.push_back(r.chop);
  EXPECT_EQ(chops, (std::vector<int>{1, 2, 4}));
}

TEST(QualityPipeline, EvalReportsAnErrorRowForF16OnFullRangeU16WhileF32RowsAreFine) {
  temp_dir dir;
  const std::string in = save_full_range_u16(dir);
  auto be = cpu();
  formats::eval_options eo;
  eo.threads = 1;
  eo.chops = {2, 4};
  eo.coeffs = {coeff_type::f16, coeff_type::f32};
  formats::eval_result ev;
  ASSERT_NO_THROW(ev = formats::eval_npy(in, *be, eo));
  ASSERT_EQ(ev.rows.size(), 4u);
  for (const auto& row : ev.rows) {
    SCOPED_TRACE("chop " + std::to_string(row.chop) + " " + std::string(to_string(row.coeff)));
    if (row.coeff == coeff_type::f16) {
      EXPECT_FALSE(row.error.empty());
      EXPECT_TRUE(contains(row.error, "f16")) << row.error;
      EXPECT_EQ(row.to_json().value("error", std::string()), row.error);
    } else {
      EXPECT_TRUE(row.error.empty()) << row.error;
      EXPECT_GT(row.archive_bytes, 0u);
      EXPECT_TRUE(row.q.psnr_db);
      EXPECT_EQ(row.q.samples, 3u);
    }
  }
}

TEST(QualityCli, EvalWritesNothingToDisk) {
  temp_dir dir;
  save_textured(dir);
  const auto before = dir.entries();
  auto c = cli(dir, "eval tex.npy --chop 1,2,4 --coeff f16,bf16 -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(dir.entries(), before);
  // A table: a header plus one line per setting.
  EXPECT_EQ(std::count(c.out.begin(), c.out.end(), '\n'), 1 + 6) << c.out;
  auto e = cli(dir, "eval tex.npy --csv -q");
  ASSERT_EQ(e.status, 0) << describe(e);
  EXPECT_EQ(dir.entries(), before);
  // Nor anywhere else ($TMPDIR, a cache): no file opened for writing, made, renamed or
  // removed, as strace sees it.
  if (sh(dir, "strace -o /dev/null -f true").status != 0) {
    GTEST_SKIP() << "the rest needs strace, allowed to trace its child";
  }
  temp_dir traces;
  // (?NAME: a call this strace does not know is left out, not an error; --backend cpu: a
  // CUDA driver may write its cache of compiled kernels.)
  // (LeakSanitizer cannot run under ptrace: off in a sanitizer build.)
  auto t = sh(dir, "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" strace -o " +
                       sh_quote(traces.file("t.txt")) +
                       " -f -e 'trace=open,openat,?openat2,creat,mkdir,mkdirat,rename,renameat,"
                       "?renameat2,link,linkat,unlink,unlinkat' DCTCHOP eval tex.npy --chop 1,2 "
                       "--backend cpu -q");
  ASSERT_EQ(t.status, 0) << describe(t);
  const auto calls = test::read_strace(traces.file("t.txt"));
  std::size_t opens = 0;
  for (const auto& c : calls) {
    if (c.resumed) continue;  // (its arguments were on its first line)
    const std::string path = c.path();
    if (path == "/dev/null" || path == "/dev/tty" || path.rfind("/dev/nvidia", 0) == 0) continue;
    const bool open = c.name == "open" || c.name == "openat" || c.name == "openat2";
    if (open) ++opens;
    const std::string flags = open ? c.after_path() : std::string();
    const bool writes = open ? contains(flags, "O_WRONLY") || contains(flags, "O_RDWR") ||
                                   contains(flags, "O_CREAT") || contains(flags, "O_TRUNC")
                             : true;  // creat, mkdir, rename, link, unlink: any call
    if (writes) ADD_FAILURE() << "eval wrote: " << c.name << c.rest;
  }
  EXPECT_GT(opens, 0u) << "strace saw no open at all";  // (the input, at least)
}

// ============================================================ figures measured by a backend

/** Bytes of a view's values: the pipelines' views are dense (the test refuses others). */
std::size_t dense_bytes(const const_sample_view& v) {
  const auto per_sample = v.planes * v.height * v.width;
  if (v.samples > 1 && v.stride_sample != static_cast<std::int64_t>(per_sample)) {
    throw std::logic_error("measuring_backend: a view whose samples are not dense");
  }
  return v.samples * per_sample * size_of(v.type);
}

/** The CPU backend, but one that measures on its "device" (backend::decode_measured: it decodes
 *  into memory of its own and measures there) and whose decode() writes zeros, each counting
 *  its calls. A pipeline that measured what decode() gave, instead of or beside the figures of
 *  decode_measured, would report other figures than the CPU backend's. */
class measuring_backend final : public backend {
 public:
  int calls = 0, decodes = 0;  // of decode_measured, of decode
  std::string name() const override { return "measuring"; }
  void encode(const codec_params& p, const const_sample_view& in,
              std::span<std::byte> coeffs) override {
    inner_->encode(p, in, coeffs);
  }
  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& out) override {
    ++decodes;
    inner_->decode(p, coeffs, out);
    std::memset(out.data, 0, dense_bytes(out));
  }
  bool decode_measured(const codec_params& p, std::span<const std::byte> coeffs,
                       const const_sample_view& original, const quality_accumulator& acc,
                       quality_batch& into) override {
    ++calls;
    std::vector<std::byte> mine(dense_bytes(original));
    sample_view decoded{mine.data(), original.type, original.samples, original.planes,
                        original.height, original.width, original.stride_sample,
                        original.stride_plane, original.stride_row, original.stride_col};
    inner_->decode(p, coeffs, decoded);
    acc.measure(original, decoded, 1, into);
    return true;
  }

 private:
  std::unique_ptr<backend> inner_ = cpu();
};

TEST(QualityPipeline, CompressVerifyEvalAndTheSearchTakeTheFiguresTheBackendMeasures) {
  temp_dir dir;
  const std::string u8in = save_textured(dir, "tex.npy", 6);
  const analytic_f32 d;
  const std::string f32in = d.save(dir, "f.npy");
  for (const std::string& in : {u8in, f32in}) {
    SCOPED_TRACE(in);
    auto plain = cpu();
    measuring_backend be;
    // compress, in several chunks: decode_measured once a chunk, and never decode().
    formats::compress_options co;
    co.threads = 1;
    co.chunk_mb = 0.002;
    co.overwrite = true;
    const auto rc = formats::compress_npy(in, dir.file("c.dcz"), *plain, co);
    const auto rm = formats::compress_npy(in, dir.file("m.dcz"), be, co);
    ASSERT_GT(rm.chunks, 1u);
    EXPECT_EQ(be.calls, static_cast<int>(rm.chunks));
    EXPECT_EQ(be.decodes, 0);
    ASSERT_TRUE(rc.q && rm.q);
    expect_same_figures(*rm.q, *rc.q);
    EXPECT_EQ(read_bytes(dir.file("m.dcz")).size(), read_bytes(dir.file("c.dcz")).size());
    // verify: likewise.
    be.calls = 0;
    const auto vc = formats::verify_archive(dir.file("c.dcz"), in, *plain, one_thread());
    const auto vm = formats::verify_archive(dir.file("c.dcz"), in, be, one_thread());
    EXPECT_EQ(be.calls, static_cast<int>(rm.chunks));
    EXPECT_EQ(be.decodes, 0);
    ASSERT_TRUE(vc.q && vm.q);
    expect_same_figures(*vm.q, *vc.q);
    expect_same_figures(*vc.q, *rc.q);  // (verify measures what compress measured)
    // eval: decode() is timed (its zeros are not measured), then decode_measured measures.
    be.calls = 0;
    formats::eval_options eo;
    eo.threads = 1;
    eo.chops = {1, 3, 6};
    eo.min_seconds = 0;  // one pass a chunk: decode() once a setting
    const auto ec = formats::eval_npy(in, *plain, eo);
    const auto em = formats::eval_npy(in, be, eo);
    ASSERT_EQ(em.rows.size(), 3u);
    ASSERT_EQ(ec.rows.size(), 3u);
    EXPECT_EQ(be.calls, 3);  // (one chunk: 64 MiB of input)
    EXPECT_EQ(be.decodes, 3 + 1);  // timed, and the first chunk's untimed warm-up
    for (std::size_t i = 0; i < em.rows.size(); ++i) {
      SCOPED_TRACE(em.rows[i].chop);
      ASSERT_TRUE(em.rows[i].error.empty()) << em.rows[i].error;
      EXPECT_EQ(em.rows[i].passes, 1u);
      ASSERT_TRUE(em.rows[i].q.psnr_db.has_value());
      expect_same_figures(em.rows[i].q, ec.rows[i].q);
    }
    // The chop search: the same trials and the same chop.
    be.calls = 0;
    co.target.psnr_db = *ec.rows[1].q.psnr_db - 0.01;  // chop 3 meets it, chop 2 does not
    const auto sc = formats::compress_npy(in, dir.file("c.dcz"), *plain, co);
    const auto sm = formats::compress_npy(in, dir.file("m.dcz"), be, co);
    EXPECT_GT(be.calls, 0);
    EXPECT_EQ(be.decodes, 3 + 1);  // (eval's, above: the search and compress call none)
    EXPECT_EQ(sm.codec.chop, sc.codec.chop);
    ASSERT_EQ(sm.trials.size(), sc.trials.size());
    for (std::size_t i = 0; i < sm.trials.size(); ++i) {
      EXPECT_EQ(sm.trials[i].chop, sc.trials[i].chop);
      expect_same_figures(sm.trials[i].q, sc.trials[i].q);
    }
    ASSERT_TRUE(sc.q && sm.q);
    expect_same_figures(*sm.q, *sc.q);
  }
}

/** The CPU backend, whose timed encodes and decodes (not the untimed first pass of eval's
 *  first chunk) sleep for `slow` seconds: the first `slow_calls` of them, or every one. */
class sleepy_backend final : public backend {
 public:
  sleepy_backend(double slow, int slow_calls) : slow_(slow), slow_calls_(slow_calls) {}
  int encodes = 0, decodes = 0;
  std::string name() const override { return "sleepy"; }
  void encode(const codec_params& p, const const_sample_view& in,
              std::span<std::byte> coeffs) override {
    inner_->encode(p, in, coeffs);
    nap(encodes++);
  }
  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& out) override {
    inner_->decode(p, coeffs, out);
    nap(decodes++);
  }

 private:
  void nap(int call) const {  // (call 0: the warm-up)
    if (call > 0 && (slow_calls_ < 0 || call <= slow_calls_)) {
      std::this_thread::sleep_for(std::chrono::duration<double>(slow_));
    }
  }
  double slow_;
  int slow_calls_;
  std::unique_ptr<backend> inner_ = cpu();
};

TEST(QualityPipeline, EvalInPartsOnSeveralThreadsGivesOneThreadsFiguresAndFirstBadSample) {
  // 24 samples of 256 x 256 u16 (1.5 Mi values): on 2 threads eval runs each pass in parts,
  // one thread a part. The figures are one thread's, and where f16 cannot hold a sample's
  // coefficients the row names the first such sample, 17, which lies in a later part.
  temp_dir dir;
  const u64 n = 24, side = 256;
  std::vector<std::uint16_t> v(n * side * side);
  lcg r(3);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<std::uint16_t>(30000 + (i % side) * 8 + (r.next() & 63));
  }
  for (const u64 bad : {u64(17), u64(21)}) {  // full-range blocks: DC 8 x 32767 > f16's 65504
    for (u64 k = 0; k < side * 8; ++k) v[bad * side * side + k] = 65535;
  }
  save_npy(dir.file("u16.npy"), dtype::u16, {n, side, side}, v);
  formats::eval_options eo;
  eo.chops = {4};
  eo.coeffs = {coeff_type::f16, coeff_type::f32};
  eo.ssim = true;
  eo.min_seconds = 0;
  eo.threads = 1;
  const auto one = formats::eval_npy(dir.file("u16.npy"), *cpu(), eo);
  eo.threads = 2;
  const auto two =
      formats::eval_npy(dir.file("u16.npy"), *make_backend(backend_kind::cpu, {2}), eo);
  ASSERT_EQ(one.rows.size(), 2u);
  ASSERT_EQ(two.rows.size(), 2u);
  for (const auto* res : {&one, &two}) {
    EXPECT_TRUE(contains(res->rows[0].error, "sample 17: ")) << res->rows[0].error;
    ASSERT_TRUE(res->rows[1].error.empty()) << res->rows[1].error;
  }
  expect_same_figures(two.rows[1].q, one.rows[1].q);
}

TEST(QualityPipeline, EvalTimesEachSettingForItsMinimumTimeAndCountsEachChunksFastestPass) {
  temp_dir dir;
  const std::string in = save_textured(dir, "tex.npy", 6);  // 6 KiB: microseconds a pass
  formats::eval_options eo;
  eo.threads = 1;
  eo.chops = {2};
  const auto plain = formats::eval_npy(in, *cpu(), [&] {
    auto o = eo;
    o.min_seconds = 0;
    return o;
  }());
  {
    // The first timed encode and decode take 0.1 s each, the others microseconds: the chunk
    // goes through again until 0.3 s were timed, or 100 times (here), and the fastest counts.
    sleepy_backend be(0.1, 1);
    eo.min_seconds = 0.3;
    const auto r = formats::eval_npy(in, be, eo);
    ASSERT_EQ(r.rows.size(), 1u);
    EXPECT_EQ(r.rows[0].passes, formats::eval_options::max_passes);
    EXPECT_EQ(be.encodes, 1 + 100);  // (the warm-up, then the passes)
    EXPECT_LT(r.rows[0].encode_seconds, 0.05);
    EXPECT_LT(r.rows[0].decode_seconds, 0.05);
    // The same figures as one pass: each pass gives the same bytes.
    expect_same_figures(r.rows[0].q, plain.rows[0].q);
  }
  {
    // 0: one pass, the slow one, counts.
    sleepy_backend be(0.1, 1);
    eo.min_seconds = 0;
    const auto r = formats::eval_npy(in, be, eo);
    EXPECT_EQ(r.rows[0].passes, 1u);
    EXPECT_GE(r.rows[0].encode_seconds, 0.1);
    EXPECT_GE(r.rows[0].decode_seconds, 0.1);
  }
  {
    // Every call 10 ms: the passes stop once 0.035 s were timed, after 2 (20 ms or more a
    // pass; 1 where a sleep ran 17.5 ms past), not 100.
    sleepy_backend be(0.01, -1);
    eo.min_seconds = 0.035;
    const auto r = formats::eval_npy(in, be, eo);
    EXPECT_EQ(r.rows[0].passes, static_cast<u64>(be.encodes - 1));
    EXPECT_GE(r.rows[0].passes, 1u);
    EXPECT_LE(r.rows[0].passes, 2u);
  }
  // Out of range: refused before anything is read.
  for (double bad : {-0.5, 3601.0, std::numeric_limits<double>::quiet_NaN()}) {
    eo.min_seconds = bad;
    test::expect_error([&] { (void)formats::eval_npy(dir.file("absent.npy"), *cpu(), eo); },
                       errc::invalid_argument, {"eval_options::min_seconds"});
  }
}

TEST(QualityCli, EvalAndTheTargetSearchOfTinyPlanesSizeTheirChunksByTheCoefficients) {
  // 4 Mi samples of one 1x1 u8 plane: each pads to an 8x8 block, 128 f16 bytes at chop 8.
  // eval's chunk of 64 MiB of input was 512 MiB of coefficients, past 400 MB of address
  // space, and so was compress --psnr's sample of 32 MiB (which tries chops up to 8). Two
  // threads: an OpenMP team's stacks (8 MiB each) on a many-core machine would pass it too.
#if defined(DCTCHOP_TEST_ASAN) || defined(DCTCHOP_TEST_TSAN)
  GTEST_SKIP() << "the sanitizers reserve more address space than the limit";
#endif
  temp_dir dir;
  const std::uint64_t n = std::uint64_t(4) << 20;
  std::vector<std::uint8_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 37 % 251);
  save_npy(dir.file("tiny.npy"), dtype::u8, {n, 1, 1}, v);
  auto c = sh(dir, "ulimit -v 400000; DCTCHOP eval tiny.npy --layout NHW --chop 8 --json -q "
                   "--threads 2");
  ASSERT_EQ(c.status, 0) << describe(c);
  const auto q = parse_json(c.out).at("rows").at(0).at("quality");
  EXPECT_EQ(q.at("samples").get<std::uint64_t>(), n) << c.out;
  EXPECT_EQ(q.at("max_abs_error").get<double>(), 0.0) << c.out;  // chop 8 of 8 keeps all
  // Constant 8x8 blocks: chop 1 is lossless, and the search stops there.
  auto t = sh(dir, "ulimit -v 400000; DCTCHOP compress tiny.npy --layout NHW --psnr 40 "
                   "--threads 2 -o t.dcz --json");
  ASSERT_EQ(t.status, 0) << describe(t);
  EXPECT_EQ(parse_json(t.out).at("chop"), 1) << t.out;
}

TEST(QualityCli, TheFiguresOfMillionsOfTinySamplesFitTheMemoryOfTheirChunks) {
  // 8 Mi samples of one 1x1 u8 plane at block 4, chop 1: 2 coefficient bytes a sample, so
  // chunks of 2 Mi samples (4 MiB). The per-sample figures were 48 bytes a sample and not in
  // the chunk budget: compress and verify held 100 MiB of them per chunk in flight and eval
  // 400 MiB for its chunk, past 400 MB of address space (650 MB resident for 16 Mi samples).
#if defined(DCTCHOP_TEST_ASAN) || defined(DCTCHOP_TEST_TSAN)
  GTEST_SKIP() << "the sanitizers reserve more address space than the limit";
#endif
  temp_dir dir;
  const std::uint64_t n = std::uint64_t(8) << 20;
  std::vector<std::uint8_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 37 % 251);
  save_npy(dir.file("tiny.npy"), dtype::u8, {n, 1, 1}, v);
  const std::string limit = "ulimit -v 400000; ";
  auto c = sh(dir, limit + "DCTCHOP compress tiny.npy --layout NHW --block 4 --chop 1 "
                           "--threads 2 -o t.dcz --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  const auto j = parse_json(c.out);
  EXPECT_EQ(j.at("samples_per_chunk").get<std::uint64_t>(), std::uint64_t(2) << 20) << c.out;
  // A 1x1 plane padded by edge replication is one constant block: its DC alone is exact.
  EXPECT_EQ(j.at("quality").at("samples").get<std::uint64_t>(), n) << c.out;
  EXPECT_EQ(j.at("quality").at("max_abs_error").get<double>(), 0.0) << c.out;
  EXPECT_EQ(j.at("quality").at("lossless_samples").get<std::uint64_t>(), n) << c.out;
  auto ver = sh(dir, limit + "DCTCHOP verify t.dcz --against tiny.npy --threads 2 --json");
  ASSERT_EQ(ver.status, 0) << describe(ver);
  EXPECT_EQ(parse_json(ver.out).at("quality").at("samples").get<std::uint64_t>(), n) << ver.out;
  auto e = sh(dir, limit + "DCTCHOP eval tiny.npy --layout NHW --block 4 --chop 1 --json -q "
                           "--threads 2");
  ASSERT_EQ(e.status, 0) << describe(e);
  EXPECT_EQ(parse_json(e.out).at("rows").at(0).at("quality").at("samples").get<std::uint64_t>(),
            n)
      << e.out;
}

/** Split one CSV line; fields may be double-quoted (with "" for a quote inside). */
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      f.emplace_back();
    } else {
      f.back() += c;
    }
  }
  EXPECT_FALSE(quoted) << "unterminated quote: " << line;
  return f;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) v.push_back(l);
  return v;
}

TEST(QualityCli, EvalWithBlock4AndTheDefaultChopListSucceeds) {
  // The default --chop is 1,2,4,6; with --block 4 the 6 cannot apply, and should not turn a
  // plain "dctchop eval IN --block 4" into a usage error.
  temp_dir dir;
  save_textured(dir);
  auto c = cli(dir, "eval tex.npy --block 4 --csv -q");
  EXPECT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(lines_of(c.out).size(), 1u + 3u) << c.out;
}

TEST(QualityCli, F16FiguresAreThoseOfTheDecodedF16ValuesClampedToTheirRange) {
  // f16 data decodes to f16, and the figures compress reports are those of what decompress
  // gives back, measured here independently. Sample 3 is a step from +65504 to -65504 (f16's
  // limits): chop 2 overshoots it, and the overshoot is clamped to the limits, not inf.
  temp_dir dir;
  constexpr u64 n = 4, h = 24, w = 18, per = h * w;
  std::vector<float> v(n * per);
  for (u64 i = 0; i < v.size(); ++i) v[i] = static_cast<float>(100.0 * std::sin(0.05 * double(i)));
  for (u64 i = 3 * per; i < 4 * per; ++i) v[i] = (i - 3 * per) % w < w / 2 ? 65504.f : -65504.f;
  test::save_npy(dir.file("x.npy"), dtype::f16, {n, h, w}, test::to_half(v));
  auto c = cli(dir, "compress x.npy -o a.dcz --chop 2 --json -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json q = parse_json(c.out).at("quality");
  ASSERT_EQ(cli(dir, "decompress a.dcz -o y.npy -q").status, 0);
  const auto x = test::load_npy(dir.file("x.npy"));
  const auto y = test::load_npy(dir.file("y.npy"));
  EXPECT_EQ(y.header.type.native_descr(), "<f2");
  ASSERT_EQ(y.values.size(), x.values.size());
  double sse = 0, max_abs = 0;
  bool clamped = false;
  for (u64 i = 0; i < x.values.size(); ++i) {
    ASSERT_TRUE(std::isfinite(y.values[i])) << i;
    ASSERT_LE(std::fabs(y.values[i]), 65504.0) << i;
    clamped |= std::fabs(y.values[i]) == 65504.0;
    const double d = x.values[i] - y.values[i];
    sse += d * d;
    max_abs = std::max(max_abs, std::fabs(d));
  }
  EXPECT_TRUE(clamped) << "the step's overshoot did not reach the limits: no clamp was tested";
  const double mse = sse / double(x.values.size());
  EXPECT_EQ(q.at("range"), 131008.0);
  EXPECT_NEAR(q.at("mse").get<double>(), mse, 1e-9 * mse);
  EXPECT_EQ(q.at("max_abs_error"), max_abs);
  EXPECT_NEAR(q.at("psnr_db").get<double>(), 20 * std::log10(131008.0) - 10 * std::log10(mse), 1e-9);
  EXPECT_EQ(q.at("ssim_planes"), 4);
  // eval reports the same figures as compress
  auto e = cli(dir, "eval x.npy --chop 2 --json -q");
  ASSERT_EQ(e.status, 0) << describe(e);
  EXPECT_EQ(parse_json(e.out).at("rows").at(0).at("quality").at("mse"), q.at("mse"));
}

TEST(QualityCli, I8DataRoundTripsExactlyAtChopEightAndMeasuresWithRange255) {
  // int8 is u8 shifted: offset 0, coefficients within B * 128, so f16 by default and exact
  // at chop = block; R is 255, its type's range.
  temp_dir dir;
  constexpr u64 n = 3, h = 20, w = 17, c = 3;
  std::vector<std::int8_t> v(n * h * w * c);
  for (u64 i = 0; i < v.size(); ++i) v[i] = static_cast<std::int8_t>(int((i * 97) % 256) - 128);
  test::save_npy(dir.file("x.npy"), dtype::i8, {n, h, w, c}, v);
  auto c8 = cli(dir, "compress x.npy -o a.dcz --chop 8 --json -q && " + test::dctchop_bin() +
                         " decompress a.dcz -o y.npy -q");
  ASSERT_EQ(c8.status, 0) << describe(c8);
  const json j = parse_json(c8.out);
  EXPECT_EQ(j.at("dtype"), "i8");
  EXPECT_EQ(j.at("coeff"), "f16");
  EXPECT_EQ(j.at("layout"), "NHWC");
  EXPECT_EQ(j.at("quality").at("lossless"), true);
  const auto x = test::load_npy(dir.file("x.npy"));
  const auto y = test::load_npy(dir.file("y.npy"));
  EXPECT_EQ(y.header.type.native_descr(), "|i1");
  EXPECT_EQ(y.values, x.values);
  // at chop 2: the figures are those of the decoded int8 values, R = 255
  auto c2 = cli(dir, "compress x.npy -o b.dcz --chop 2 --json -q && " + test::dctchop_bin() +
                         " decompress b.dcz -o z.npy -q");
  ASSERT_EQ(c2.status, 0) << describe(c2);
  const json q = parse_json(c2.out).at("quality");
  const auto z = test::load_npy(dir.file("z.npy"));
  double sse = 0;
  for (u64 i = 0; i < x.values.size(); ++i) {
    ASSERT_GE(z.values[i], -128.0);
    ASSERT_LE(z.values[i], 127.0);
    sse += (x.values[i] - z.values[i]) * (x.values[i] - z.values[i]);
  }
  const double mse = sse / double(x.values.size());
  EXPECT_EQ(q.at("range"), 255.0);
  EXPECT_NEAR(q.at("mse").get<double>(), mse, 1e-9 * mse);
  EXPECT_NEAR(q.at("psnr_db").get<double>(), 20 * std::log10(255.0) - 10 * std::log10(mse), 1e-9);
}

TEST(QualityCli, EvalTriesEveryBlockSizeWithTheChopsThatFitItAndEachSettingOnce) {
  temp_dir dir;
  save_textured(dir);
  auto c = cli(dir, "eval tex.npy --block 4,8,4 --chop 2,6,2 --coeff f16,f16 --json -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json rows = parse_json(c.out).at("rows");
  std::vector<std::pair<int, int>> settings;
  for (const auto& r : rows) settings.emplace_back(r.at("block").get<int>(), r.at("chop").get<int>());
  EXPECT_EQ(settings, (std::vector<std::pair<int, int>>{{4, 2}, {8, 2}, {8, 6}})) << c.out;
  // Each row is the setting's own: the same figures as eval of that setting alone.
  for (const auto& r : rows) {
    auto one = cli(dir, "eval tex.npy --json -q --block " + std::to_string(r.at("block").get<int>()) +
                            " --chop " + std::to_string(r.at("chop").get<int>()));
    ASSERT_EQ(one.status, 0) << describe(one);
    const json alone = parse_json(one.out).at("rows").at(0);
    EXPECT_EQ(alone.at("archive_bytes"), r.at("archive_bytes"));
    EXPECT_EQ(alone.at("quality").at("mse"), r.at("quality").at("mse"));
    EXPECT_EQ(alone.at("quality").at("ssim"), r.at("quality").at("ssim"));
  }
  EXPECT_NE(rows[0].at("quality").at("mse"), rows[1].at("quality").at("mse"));  // 4 vs 8
}

TEST(QualityCli, DataTooSmallToSquareIsRefusedNotReportedLossless) {
  // Errors of 1e-170 square to 0 in double precision: the figures would say "lossless" of
  // data whose every value decoded to 0. 1e-100 squares fine and is measured.
  temp_dir dir;
  lcg r(3);
  for (const double scale : {1e-170, 1e-100}) {
    std::vector<double> v(4 * 16 * 16);
    for (auto& x : v) x = scale * (double(r.next() % 1000) / 500.0 - 1.0);
    fs::remove(dir.file("t.npy"));
    save_npy(dir.file("t.npy"), dtype::f64, {4, 16, 16}, v);
    auto c = cli(dir, "compress t.npy -o t.dcz -f --json");
    auto e = cli(dir, "eval t.npy --chop 4 --json");
    if (scale < 1e-150) {
      EXPECT_EQ(c.status, 3) << describe(c);
      EXPECT_TRUE(contains(c.err, "t.npy: values this small")) << c.err;
      EXPECT_TRUE(contains(c.err, "rescale the data (times 1e170, say), or compress it "
                                  "unmeasured (--no-quality)")) << c.err;
      EXPECT_FALSE(fs::exists(dir.file("t.dcz")));
      EXPECT_EQ(e.status, 3) << describe(e);
      EXPECT_FALSE(contains(e.err, "--no-quality")) << e.err;  // (eval has no such option)
      // A target on such data cannot be measured: exit 8, as the README's table has it (3).
      auto target = cli(dir, "compress t.npy -o t.dcz -f --psnr 5");
      EXPECT_EQ(target.status, 8) << describe(target);
      EXPECT_TRUE(contains(target.err, "so --psnr and --ssim cannot")) << target.err;
      auto u = cli(dir, "compress t.npy -o t.dcz -f --no-quality -q");  // stored, unmeasured
      EXPECT_EQ(u.status, 0) << describe(u);
      fs::remove(dir.file("t.dcz"));
      EXPECT_TRUE(contains(parse_json(e.out).at("rows").at(0).at("error").get<std::string>(),
                           "values this small")) << e.out;
    } else {
      ASSERT_EQ(c.status, 0) << describe(c);
      const json q = parse_json(c.out).at("quality");
      EXPECT_FALSE(q.at("lossless").get<bool>()) << c.out;
      EXPECT_GT(q.at("mse").get<double>(), 0.0);
      EXPECT_EQ(e.status, 0) << describe(e);
      // Its SSIM was NaN (the formula's R^4 underflowed), and --min-ssim passed on it.
      ASSERT_TRUE(q.at("ssim").is_number()) << c.out;
      EXPECT_LT(q.at("ssim").get<double>(), 0.99);
      auto v = cli(dir, "verify t.dcz --against t.npy --min-ssim 0.99");
      EXPECT_EQ(v.status, 8) << describe(v);
    }
  }
}

TEST(QualityCli, AnArchiveLargerThanItsInputIsExplainedByItsCause) {
  temp_dir dir;
  const u64 n = 2000;
  auto note_of = [&](const std::string& name, u64 h, u64 w, const std::string& args) {
    save_npy(dir.file(name), dtype::u8, {n, h, w}, std::vector<std::uint8_t>(n * h * w, 7));
    auto r = cli(dir, "compress " + name + " -o " + name + ".dcz --no-quality --json " + args);
    EXPECT_EQ(r.status, 0) << describe(r);
    const json j = parse_json(r.out);
    EXPECT_GT(j.at("archive_bytes").get<u64>(), j.at("input_bytes").get<u64>()) << r.out;
    return j.at("notes").dump();
  };
  // Planes smaller than a block: padded, and each block keeps K x K (32 bytes for 9 here).
  EXPECT_TRUE(contains(note_of("small.npy", 3, 3, ""),
                       "planes of 3x3 are padded to whole 8x8 blocks (8x8), each of which keeps "
                       "4x4 coefficients; use a smaller block or chop"));
  // Only what can be smaller is named: block 4 and chop 1 are the least.
  EXPECT_TRUE(contains(note_of("one.npy", 1, 1, "--block 4 --chop 1 -f"),
                       "planes of 1x1 are padded to whole 4x4 blocks (4x4), each of which keeps "
                       "1x1 coefficients (block 4, chop 1: the least there is); planes this "
                       "small do not shrink"));
  EXPECT_TRUE(contains(note_of("four.npy", 1, 1, "--block 4 --chop 2 -f"),
                       "keeps 2x2 coefficients; use a smaller chop"));
  // More coefficient bytes than value bytes per block.
  EXPECT_TRUE(contains(note_of("big.npy", 16, 16, "--chop 7"),
                       "f16 coefficients at chop 7 take more bytes than the u8 values"));
  // As many (f32 at chop 4 of u8): the chop, not the header, is the cause.
  EXPECT_TRUE(contains(note_of("even.npy", 16, 16, "--coeff f32"),
                       "f32 coefficients at chop 4 take as many bytes as the u8 values, and "
                       "the header and alignment add to them; use a smaller chop or a 2-byte "
                       "coefficient type"));
}

TEST(QualityCli, NonfiniteOnIntegerDataIsSaidToHaveNoEffect) {
  temp_dir dir;
  save_textured(dir);  // u8
  const std::string note = "--nonfinite has no effect: u8 data holds no NaN or Inf";
  auto c = cli(dir, "compress tex.npy -o a.dcz --nonfinite replace=0");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_TRUE(contains(c.err, "note: " + note)) << c.err;
  auto j = cli(dir, "compress tex.npy -o b.dcz --nonfinite replace=0 --json");
  const json notes = parse_json(j.out).at("notes");  // (then: larger than the tiny input)
  ASSERT_FALSE(notes.empty()) << j.out;
  EXPECT_EQ(notes[0], note) << j.out;
  auto e = cli(dir, "eval tex.npy --chop 4 --nonfinite replace=0");
  ASSERT_EQ(e.status, 0) << describe(e);
  EXPECT_TRUE(contains(e.err, "note: " + note)) << e.err;
  auto plain = cli(dir, "compress tex.npy -o c.dcz");
  EXPECT_FALSE(contains(plain.err, "--nonfinite")) << plain.err;
}

TEST(QualityCli, EvalOfStdinGivesTheSameFiguresAsEvalOfTheFile) {
  temp_dir dir;
  save_textured(dir);
  auto f = cli(dir, "eval tex.npy --chop 2,5 --json -q");
  auto p = sh(dir, "cat tex.npy | DCTCHOP eval - --chop 2,5 --json -q");
  ASSERT_EQ(f.status, 0) << describe(f);
  ASSERT_EQ(p.status, 0) << describe(p);
  const json jf = parse_json(f.out), jp = parse_json(p.out);
  ASSERT_EQ(jf.at("rows").size(), 2u);
  ASSERT_EQ(jp.at("rows").size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(jp["rows"][i].at("quality").at("psnr_db"), jf["rows"][i].at("quality").at("psnr_db"));
    EXPECT_EQ(jp["rows"][i].at("quality").at("ssim"), jf["rows"][i].at("quality").at("ssim"));
  }
}

TEST(QualityCli, EvalMinTimeSetsTheTimedPassesThatJsonCountsAndIsRefusedOutOfRange) {
  temp_dir dir;
  save_textured(dir);  // 4 KiB: microseconds a pass, so 1 s of timing stops at 100 passes
  for (const auto& [opt, passes] : std::vector<std::pair<std::string, int>>{
           {"--min-time 0", 1}, {"--min-time 1", 100}}) {
    auto j = cli(dir, "eval tex.npy --chop 2,4 --json -q " + opt);
    ASSERT_EQ(j.status, 0) << describe(j);
    const json jr = parse_json(j.out);
    ASSERT_EQ(jr.at("rows").size(), 2u) << j.out;
    // What the figures were timed on, and for how long.
    EXPECT_EQ(jr.at("backend"), "cpu") << j.out;
    EXPECT_GE(jr.at("threads").get<int>(), 1) << j.out;
    EXPECT_EQ(jr.at("min_time").get<double>(), passes == 1 ? 0.0 : 1.0) << j.out;
    for (const auto& row : jr["rows"]) {
      EXPECT_EQ(row.at("passes").get<int>(), passes) << opt;
      EXPECT_GT(row.at("compress_gbps").get<double>(), 0) << opt;
    }
  }
  for (const std::string bad : {"-1", "3601", "nan", "inf", "x"}) {
    auto c = cli(dir, "eval tex.npy --min-time " + bad);
    EXPECT_EQ(c.status, 2) << describe(c);
    EXPECT_TRUE(contains(c.err, "--min-time")) << describe(c);
    EXPECT_TRUE(c.out.empty()) << describe(c);
  }
}

TEST(QualityCli, EvalCsvHasAHeaderAndOneParseableRowPerSettingMatchingTheJson) {
  temp_dir dir;
  save_textured(dir);
  auto c = cli(dir, "eval tex.npy --chop 1,3,8 --coeff f16,bf16 --csv -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  const auto lines = lines_of(c.out);
  ASSERT_EQ(lines.size(), 1u + 6u) << c.out;
  const auto header = csv_fields(lines[0]);
  ASSERT_GE(header.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(header.begin(), header.begin() + 4),
            (std::vector<std::string>{"block", "chop", "coeff", "ratio"}));
  auto col = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << "no column " << name << " in " << lines[0];
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t c_psnr = col("psnr_db"), c_ssim = col("ssim"), c_ratio = col("ratio");

  auto j = cli(dir, "eval tex.npy --chop 1,3,8 --coeff f16,bf16 --json -q");
  ASSERT_EQ(j.status, 0) << describe(j);
  const json jr = parse_json(j.out);
  ASSERT_TRUE(jr.contains("rows") && jr["rows"].is_array()) << j.out;
  ASSERT_EQ(jr["rows"].size(), 6u);

  std::vector<std::pair<int, std::string>> seen;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto f = csv_fields(lines[i]);
    ASSERT_EQ(f.size(), header.size()) << lines[i];
    EXPECT_EQ(f[0], "8");
    seen.emplace_back(std::stoi(f[1]), f[2]);
    const double ratio = std::stod(f[c_ratio]);
    const double ssim = std::stod(f[c_ssim]);
    EXPECT_GT(ratio, 0);
    EXPECT_GT(ssim, 0);
    EXPECT_LE(ssim, 1);
    // The same row in the JSON.
    const json& row = jr["rows"][i - 1];
    EXPECT_EQ(row.at("chop").get<int>(), std::stoi(f[1]));
    EXPECT_EQ(row.at("coeff").get<std::string>(), f[2]);
    EXPECT_NEAR(ratio, row.at("ratio").get<double>(), 1e-5 * ratio);
    // An empty PSNR is a lossless setting (infinite PSNR): null in the JSON.
    if (f[c_psnr].empty()) {
      EXPECT_TRUE(row.at("quality").at("psnr_db").is_null()) << row.dump();
      EXPECT_EQ(row.at("quality").at("max_abs_error").get<double>(), 0.0);
    } else {
      EXPECT_NEAR(std::stod(f[c_psnr]), row.at("quality").at("psnr_db").get<double>(), 1e-3);
    }
    EXPECT_NEAR(ssim, row.at("quality").at("ssim").get<double>(), 1e-5);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<int, std::string>>{
                      {1, "bf16"}, {1, "f16"}, {3, "bf16"}, {3, "f16"}, {8, "bf16"}, {8, "f16"}}));
}

TEST(QualityCli, EvalCsvAndJsonCarryTheErrorRowOfF16OnFullRangeU16) {
  temp_dir dir;
  save_full_range_u16(dir);
  auto c = cli(dir, "eval u16.npy --chop 2,4 --coeff f16,f32 --csv -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  const auto lines = lines_of(c.out);
  ASSERT_EQ(lines.size(), 5u) << c.out;
  const auto header = csv_fields(lines[0]);
  const std::size_t c_err =
      static_cast<std::size_t>(std::find(header.begin(), header.end(), "error") - header.begin());
  ASSERT_LT(c_err, header.size()) << lines[0];
  int errors = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto f = csv_fields(lines[i]);
    ASSERT_EQ(f.size(), header.size()) << lines[i];
    if (f[2] == "f16") {
      ++errors;
      EXPECT_TRUE(contains(f[c_err], "f16")) << lines[i];
    } else {
      EXPECT_EQ(f[c_err], "") << lines[i];
      EXPECT_GT(std::stod(f[3]), 0) << lines[i];
    }
  }
  EXPECT_EQ(errors, 2);
  auto j = cli(dir, "eval u16.npy --chop 2,4 --coeff f16,f32 --json -q");
  ASSERT_EQ(j.status, 0) << describe(j);
  const json jr = parse_json(j.out);
  ASSERT_EQ(jr.at("rows").size(), 4u);
  for (const auto& row : jr["rows"]) {
    if (row.at("coeff") == "f16") {
      EXPECT_TRUE(row.contains("error")) << row.dump();
    } else {
      EXPECT_FALSE(row.contains("error")) << row.dump();
      EXPECT_TRUE(row.at("quality").at("psnr_db").is_number()) << row.dump();
    }
  }
}

TEST(QualityCli, EvalJsonArchiveBytesEqualTheSizeOfTheCompressedFile) {
  temp_dir dir;
  save_textured(dir, "tex.npy", 6);
  auto j = cli(dir, "eval tex.npy --chop 3 --coeff bf16 --chunk-mb 0.003 --threads 1 --json -q");
  ASSERT_EQ(j.status, 0) << describe(j);
  const json jr = parse_json(j.out);
  ASSERT_EQ(jr.at("rows").size(), 1u);
  auto c = cli(dir, "compress tex.npy -o a.dcz --chop 3 --coeff bf16 --chunk-mb 0.003 --threads 1 --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json cj = parse_json(c.out);
  EXPECT_EQ(jr["rows"][0].at("archive_bytes").get<u64>(), fs::file_size(dir.file("a.dcz")));
  EXPECT_NEAR(jr["rows"][0].at("quality").at("psnr_db").get<double>(),
              cj.at("quality").at("psnr_db").get<double>(), 1e-9);
  EXPECT_NEAR(jr["rows"][0].at("quality").at("ssim").get<double>(),
              cj.at("quality").at("ssim").get<double>(), 1e-9);
}

// ============================================================ verify

struct verified_archive {
  std::string in, archive;
  quality q;
};

/** Textured u8 compressed at chop 3 with f16, and its quality as verify measures it. */
verified_archive make_verified(const temp_dir& dir) {
  verified_archive v;
  v.in = save_textured(dir, "x.npy");
  v.archive = dir.file("a.dcz");
  auto be = cpu();
  formats::compress_options o;
  o.threads = 1;
  o.chop = 3;
  const auto cr = formats::compress_npy(v.in, v.archive, *be, o);
  const auto r = formats::verify_archive(v.archive, v.in, *be, one_thread());
  EXPECT_TRUE(r.passed()) << r.to_json().dump();
  EXPECT_TRUE(r.q.has_value());
  if (r.q) v.q = *r.q;
  EXPECT_TRUE(v.q.psnr_db && v.q.ssim && v.q.max_abs_error > 0);
  // verify measures what compress measured.
  EXPECT_TRUE(cr.q && cr.q->psnr_db && cr.q->ssim) << "compress measured no PSNR or SSIM";
  if (cr.q && cr.q->psnr_db && cr.q->ssim && v.q.psnr_db && v.q.ssim) {
    EXPECT_NEAR(*v.q.psnr_db, *cr.q->psnr_db, 1e-9);
    EXPECT_NEAR(*v.q.ssim, *cr.q->ssim, 1e-9);
  }
  return v;
}

TEST(QualityPipeline, VerifyGatesPassJustBelowTheMeasuredValuesAndFailJustAbove) {
  temp_dir dir;
  const auto v = make_verified(dir);
  ASSERT_TRUE(v.q.psnr_db && v.q.ssim);
  auto be = cpu();
  auto run = [&](formats::verify_options o) {
    return formats::verify_archive(v.archive, v.in, *be, o);
  };
  formats::verify_options pass;
  pass.threads = 1;
  pass.min_psnr = *v.q.psnr_db - 0.001;
  pass.min_ssim = *v.q.ssim - 1e-6;
  pass.max_error = v.q.max_abs_error;  // "exceeds" fails, equal holds
  const auto rp = run(pass);
  EXPECT_TRUE(rp.passed()) << rp.to_json().dump();
  EXPECT_TRUE(rp.failures.empty());

  formats::verify_options fp;
  fp.threads = 1;
  fp.min_psnr = *v.q.psnr_db + 0.001;
  const auto r1 = run(fp);
  EXPECT_FALSE(r1.passed());
  ASSERT_EQ(r1.failures.size(), 1u);
  EXPECT_TRUE(contains(r1.failures[0], "--min-psnr")) << r1.failures[0];

  formats::verify_options fs_;
  fs_.threads = 1;
  fs_.min_ssim = *v.q.ssim + 1e-6;
  const auto r2 = run(fs_);
  EXPECT_FALSE(r2.passed());
  ASSERT_EQ(r2.failures.size(), 1u);
  EXPECT_TRUE(contains(r2.failures[0], "--min-ssim")) << r2.failures[0];

  formats::verify_options fe;
  fe.threads = 1;
  fe.max_error = v.q.max_abs_error - 0.001;
  const auto r3 = run(fe);
  EXPECT_FALSE(r3.passed());
  ASSERT_EQ(r3.failures.size(), 1u);
  EXPECT_TRUE(contains(r3.failures[0], "--max-error")) << r3.failures[0];

  // Round gates read as typed, not "3e+01" (and large measured errors without an exponent).
  formats::verify_options round;
  round.threads = 1;
  round.min_psnr = 300;
  round.max_error = 0;
  const auto r4 = run(round);
  ASSERT_EQ(r4.failures.size(), 2u);
  EXPECT_TRUE(contains(r4.failures[0], "below --min-psnr 300")) << r4.failures[0];
  EXPECT_TRUE(r4.failures[1].ends_with("exceeds --max-error 0")) << r4.failures[1];
  for (const auto& f : r4.failures) EXPECT_EQ(f.find("e+"), std::string::npos) << f;

  // All three failing at once: one line each.
  formats::verify_options all = fp;
  all.min_ssim = fs_.min_ssim;
  all.max_error = fe.max_error;
  EXPECT_EQ(run(all).failures.size(), 3u);
}

TEST(QualityCli, VerifyExitsZeroJustBelowAndEightJustAboveEachGateNamingIt) {
  temp_dir dir;
  const auto v = make_verified(dir);
  ASSERT_TRUE(v.q.psnr_db && v.q.ssim);
  const std::string base = "verify a.dcz --against x.npy";
  struct gate {
    std::string flag, pass, fail;
  };
  const std::vector<gate> gates = {
      {"--min-psnr", num(*v.q.psnr_db - 0.001, 6), num(*v.q.psnr_db + 1e-5, 9)},
      {"--min-ssim", num(*v.q.ssim - 1e-5, 8), num(*v.q.ssim + 1e-8, 10)},
      {"--max-error", num(v.q.max_abs_error + 0.001, 6), num(v.q.max_abs_error - 1e-5, 9)},
  };
  for (const auto& g : gates) {
    auto p = cli(dir, base + " " + g.flag + " " + g.pass);
    EXPECT_EQ(p.status, 0) << g.flag << " " << g.pass << "\n" << describe(p);
    auto f = cli(dir, base + " " + g.flag + " " + g.fail);
    EXPECT_EQ(f.status, 8) << g.flag << " " << g.fail << "\n" << describe(f);
    EXPECT_TRUE(contains(f.err, g.flag)) << describe(f);
    EXPECT_TRUE(contains(f.err, "gate failed")) << describe(f);
    auto fj = cli(dir, base + " " + g.flag + " " + g.fail + " --json -q");
    EXPECT_EQ(fj.status, 8) << describe(fj);
    const json j = parse_json(fj.out);
    EXPECT_EQ(j.value("passed", true), false) << fj.out;
    ASSERT_TRUE(j.contains("failures") && j["failures"].size() == 1) << fj.out;
    const std::string why = j["failures"][0].get<std::string>();
    EXPECT_TRUE(contains(why, g.flag)) << fj.out;
    // A failed command's JSON, as every other failure's: the error and the exit code, and
    // the line on stderr too, -q or not.
    EXPECT_EQ(j.value("exit_code", 0), 8) << fj.out;
    EXPECT_EQ(j.value("error", ""), "a.dcz: gate failed: " + why) << fj.out;
    EXPECT_TRUE(contains(fj.err, "a.dcz: gate failed: " + why)) << describe(fj);
    // The gate as given, and the figure on its side of it, however close the two are.
    const std::string gate_text = why.substr(why.rfind(' ') + 1);
    EXPECT_EQ(std::stod(gate_text), std::stod(g.fail)) << why;
    std::istringstream words(why);
    std::string w;
    double figure = std::nan("");
    while (words >> w) {
      if (std::isdigit(static_cast<unsigned char>(w[0]))) {  // (the figures are not negative)
        figure = std::stod(w);
        break;
      }
    }
    if (g.flag == "--max-error") {
      EXPECT_GT(figure, std::stod(gate_text)) << why;
    } else {
      EXPECT_LT(figure, std::stod(gate_text)) << why;
    }
  }
  auto all = cli(dir, base + " --min-psnr " + gates[0].pass + " --min-ssim " + gates[1].pass +
                          " --max-error " + gates[2].pass + " --json");
  EXPECT_EQ(all.status, 0) << describe(all);
  const json j = parse_json(all.out);
  EXPECT_EQ(j.value("passed", false), true) << all.out;
  EXPECT_FALSE(j.contains("exit_code") || j.contains("error")) << all.out;
  EXPECT_NEAR(j.at("quality").at("psnr_db").get<double>(), *v.q.psnr_db, 1e-9);
}

TEST(QualityPipeline, VerifyOfACorruptedChunkThrowsCorrupt) {
  temp_dir dir;
  const auto v = make_verified(dir);
  flip_byte(v.archive, 4096 + 64 + 10);
  auto be = cpu();
  expect_error([&] { formats::verify_archive(v.archive, v.in, *be, one_thread()); }, errc::corrupt);
}

TEST(QualityCli, VerifyOfACorruptedChunkExits4) {
  temp_dir dir;
  const auto v = make_verified(dir);
  flip_byte(v.archive, 4096 + 64 + 10);
  auto c = cli(dir, "verify a.dcz --against x.npy");
  EXPECT_EQ(c.status, 4) << describe(c);
  EXPECT_TRUE(contains(c.err, "a.dcz: corrupt archive: chunk 0 (samples ")) << c.err;
  EXPECT_TRUE(contains(c.err, "checksum mismatch")) << c.err;
  auto p = sh(dir, "cat a.dcz | DCTCHOP verify - --against x.npy");
  EXPECT_EQ(p.status, 4) << describe(p);
  EXPECT_TRUE(contains(p.err, "<stdin>: corrupt archive: chunk 0 (samples ")) << p.err;
  EXPECT_TRUE(contains(p.err, "checksum mismatch")) << p.err;
}

TEST(QualityPipeline, VerifyAgainstAnotherShapeOrDtypeReportsAMismatch) {
  temp_dir dir;
  const auto v = make_verified(dir);
  auto be = cpu();
  save_npy(dir.file("more.npy"), dtype::u8, {5, 32, 32}, textured_u8(5, 32, 32));
  const auto r1 = formats::verify_archive(v.archive, dir.file("more.npy"), *be, one_thread());
  EXPECT_FALSE(r1.passed());
  EXPECT_FALSE(r1.mismatch.empty());
  EXPECT_TRUE(contains(r1.mismatch, "4x32x32")) << r1.mismatch;
  EXPECT_TRUE(contains(r1.mismatch, "5x32x32")) << r1.mismatch;
  EXPECT_FALSE(r1.q.has_value());
  std::vector<float> f(4 * 32 * 32, 1.0f);
  save_npy(dir.file("f.npy"), dtype::f32, {4, 32, 32}, f);
  const auto r2 = formats::verify_archive(v.archive, dir.file("f.npy"), *be, one_thread());
  EXPECT_FALSE(r2.passed());
  EXPECT_TRUE(contains(r2.mismatch, "f32")) << r2.mismatch;
}

TEST(QualityCli, VerifyAgainstAnotherShapeOrDtypeExits9) {
  temp_dir dir;
  make_verified(dir);
  save_npy(dir.file("more.npy"), dtype::u8, {5, 32, 32}, textured_u8(5, 32, 32));
  auto a = cli(dir, "verify a.dcz --against more.npy");
  EXPECT_EQ(a.status, 9) << describe(a);
  EXPECT_TRUE(contains(a.err, "mismatch")) << a.err;
  std::vector<float> f(4 * 32 * 32, 1.0f);
  save_npy(dir.file("f.npy"), dtype::f32, {4, 32, 32}, f);
  auto b = cli(dir, "verify a.dcz --against f.npy");
  EXPECT_EQ(b.status, 9) << describe(b);
  // A 4-d array cannot have the archive's NHW layout at all: still a mismatch.
  save_npy(dir.file("nhwc.npy"), dtype::u8, {4, 32, 32, 1}, textured_u8(4, 32, 32));
  auto c = cli(dir, "verify a.dcz --against nhwc.npy");
  EXPECT_EQ(c.status, 9) << describe(c);
  // ... and of another dtype too: the line says both.
  save_npy(dir.file("nhwc16.npy"), dtype::u16, {4, 32, 32, 1}, std::vector<std::uint16_t>(4 * 32 * 32, 7));
  auto c16 = cli(dir, "verify a.dcz --against nhwc16.npy");
  EXPECT_EQ(c16.status, 9) << describe(c16);
  EXPECT_TRUE(contains(c16.err, "axes") && contains(c16.err, "its values are u16")) << c16.err;
  auto j = cli(dir, "verify a.dcz --against more.npy --json");
  EXPECT_EQ(j.status, 9) << describe(j);
  const json jj = parse_json(j.out);
  EXPECT_EQ(jj.value("passed", true), false);
  ASSERT_TRUE(jj.contains("mismatch")) << j.out;
  EXPECT_EQ(jj.value("exit_code", 0), 9) << j.out;
  EXPECT_EQ(jj.value("error", ""), "mismatch: " + jj["mismatch"].get<std::string>()) << j.out;
  EXPECT_TRUE(contains(j.err, "mismatch: " + jj["mismatch"].get<std::string>())) << describe(j);
}

TEST(QualityCli, VerifyReadsTheArchiveFromStdin) {
  temp_dir dir;
  const auto v = make_verified(dir);
  ASSERT_TRUE(v.q.psnr_db);
  auto p = sh(dir, "cat a.dcz | DCTCHOP verify - --against x.npy --min-psnr " +
                       num(*v.q.psnr_db - 0.001, 6));
  EXPECT_EQ(p.status, 0) << describe(p);
  auto f = sh(dir, "cat a.dcz | DCTCHOP verify - --against x.npy --min-psnr " +
                       num(*v.q.psnr_db + 0.001, 6));
  EXPECT_EQ(f.status, 8) << describe(f);
  auto j = sh(dir, "cat a.dcz | DCTCHOP verify - --against x.npy --json");
  ASSERT_EQ(j.status, 0) << describe(j);
  EXPECT_NEAR(parse_json(j.out).at("quality").at("psnr_db").get<double>(), *v.q.psnr_db, 1e-9);
}

TEST(QualityCli, VerifyTakesTheOriginalFromStdinButNotBothFromStdin) {
  temp_dir dir;
  const auto v = make_verified(dir);
  ASSERT_TRUE(v.q.psnr_db);
  auto p = sh(dir, "cat x.npy | DCTCHOP verify a.dcz --against - --min-psnr " +
                       num(*v.q.psnr_db - 0.001, 6));
  EXPECT_EQ(p.status, 0) << describe(p);
  auto f = sh(dir, "cat x.npy | DCTCHOP verify a.dcz --against - --min-psnr " +
                       num(*v.q.psnr_db + 0.001, 6));
  EXPECT_EQ(f.status, 8) << describe(f);
  auto j = sh(dir, "cat x.npy | DCTCHOP verify a.dcz --against - --json");
  ASSERT_EQ(j.status, 0) << describe(j);
  EXPECT_NEAR(parse_json(j.out).at("quality").at("psnr_db").get<double>(), *v.q.psnr_db, 1e-9);
  auto both = sh(dir, "cat a.dcz | DCTCHOP verify - --against -");
  EXPECT_EQ(both.status, 2) << describe(both);
  EXPECT_TRUE(contains(both.err, "the archive and the input cannot both be stdin")) << both.err;
}

// ============================================================ info

TEST(QualityCli, InfoShowsSsimAndPerSamplePsnrMeasuredAtCompression) {
  temp_dir dir;
  save_textured(dir, "x.npy");
  auto c = cli(dir, "compress x.npy -o a.dcz --chop 3 --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json cj = parse_json(c.out);
  auto t = cli(dir, "info a.dcz");
  ASSERT_EQ(t.status, 0) << describe(t);
  const double ssim = cj.at("quality").at("ssim").get<double>();
  const double smin = cj.at("quality").at("sample_psnr_min_db").get<double>();
  EXPECT_TRUE(contains(t.out, "SSIM " + num(ssim, 4))) << t.out;
  EXPECT_TRUE(contains(t.out, "per-sample PSNR min " + num(smin, 2) + " dB")) << t.out;
  EXPECT_FALSE(contains(t.out, "not measured")) << t.out;

  auto j = cli(dir, "info a.dcz --json");
  ASSERT_EQ(j.status, 0) << describe(j);
  const json ij = parse_json(j.out);
  ASSERT_TRUE(ij.contains("quality")) << j.out;
  EXPECT_NEAR(ij["quality"].at("ssim").get<double>(), ssim, 1e-12);
  EXPECT_NEAR(ij["quality"].at("sample_psnr_min_db").get<double>(), smin, 1e-12);

  // The per-sample minimum, computed here from the decoded data.
  ASSERT_EQ(cli(dir, "decompress a.dcz -o out.npy -q").status, 0);
  const auto a = load_npy(dir.file("x.npy")), b = load_npy(dir.file("out.npy"));
  const std::size_t per = 32 * 32;
  double worst = INFINITY, global_sse = 0;
  for (std::size_t s = 0; s < 4; ++s) {
    std::vector<double> sa(a.values.begin() + s * per, a.values.begin() + (s + 1) * per);
    std::vector<double> sb(b.values.begin() + s * per, b.values.begin() + (s + 1) * per);
    worst = std::min(worst, dctchop::test::psnr_of(sa, sb, 255.0));
    global_sse += dctchop::test::mse_of(sa, sb) * per;
  }
  EXPECT_NEAR(smin, worst, 1e-9);
  EXPECT_LE(smin, ij["quality"].at("psnr_db").get<double>());
  EXPECT_NEAR(ij["quality"].at("psnr_db").get<double>(),
              20 * std::log10(255.0) - 10 * std::log10(global_sse / (4 * per)), 1e-9);
}

TEST(QualityCli, InfoOfAnArchiveMadeWithNoQualitySaysNoQualityIsRecorded) {
  temp_dir dir;
  save_textured(dir, "x.npy");
  auto c = cli(dir, "compress x.npy -o a.dcz --chop 3 --no-quality -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  auto t = cli(dir, "info a.dcz");
  ASSERT_EQ(t.status, 0) << describe(t);
  EXPECT_TRUE(contains(t.out, "quality:     not recorded in the archive (compress --no-quality leaves it out)")) << t.out;
  EXPECT_FALSE(contains(t.out, "SSIM")) << t.out;
  auto j = cli(dir, "info a.dcz --json");
  ASSERT_EQ(j.status, 0) << describe(j);
  const json ij = parse_json(j.out);
  EXPECT_TRUE(!ij.contains("quality") || ij["quality"].is_null()) << j.out;
  // verify still measures it, with the float-free u8 range.
  auto v = cli(dir, "verify a.dcz --against x.npy --json");
  ASSERT_EQ(v.status, 0) << describe(v);
  EXPECT_TRUE(parse_json(v.out).at("quality").at("ssim").is_number()) << v.out;
}

// ---- figures that do not exist for the data, and targets and gates that make no sense -----

/** dir/c.npy: 4 f64 planes of 16x16, every value 0.1 (range 0: PSNR and SSIM undefined).
 *  Compressed with --offset 0 (k_off0), its DC coefficients, 0.8, are rounded to f32 and the
 *  values come back off by about 1e-9: an error on data of range 0. (With its own mean as the
 *  offset, constant data comes back exactly, f32 or f64.) */
constexpr const char* k_off0 = " --offset 0";
void save_constant_f64(const temp_dir& dir) {
  save_npy(dir.file("c.npy"), dtype::f64, {4, 16, 16}, std::vector<double>(4 * 16 * 16, 0.1));
}

TEST(QualityCli, ConstantFloatDataReportsUndefinedFiguresAsSuchEverywhere) {
  temp_dir dir;
  save_constant_f64(dir);
  // The figures: n/a with the reason in text, null with ssim_status in JSON; NRMSE too.
  auto c = cli(dir, std::string("compress c.npy -o c.dcz --chop 2 --json") + k_off0);
  ASSERT_EQ(c.status, 0) << describe(c);
  const json q = parse_json(c.out).at("quality");
  EXPECT_TRUE(q.at("psnr_undefined").get<bool>()) << c.out;
  EXPECT_TRUE(q.at("nrmse").is_null()) << c.out;
  EXPECT_TRUE(q.at("ssim").is_null()) << c.out;
  EXPECT_EQ(q.at("ssim_status"), "constant") << c.out;
  auto t = cli(dir, std::string("compress c.npy -o d.dcz --chop 2") + k_off0);
  ASSERT_EQ(t.status, 0) << describe(t);
  EXPECT_TRUE(contains(t.err, "SSIM n/a (constant data)")) << t.err;
  EXPECT_TRUE(contains(t.err, "NRMSE n/a")) << t.err;
  auto e = cli(dir, std::string("eval c.npy --chop 2") + k_off0);
  ASSERT_EQ(e.status, 0) << describe(e);
  EXPECT_FALSE(contains(e.out, "inf")) << "undefined is not lossless:\n" << e.out;
  EXPECT_TRUE(contains(e.out, "n/a")) << e.out;
  // A PSNR or SSIM target cannot choose a chop here: exit 8, saying why; nothing written.
  for (const char* target : {"--psnr 30", "--ssim 0.5"}) {
    auto r = cli(dir, std::string("compress c.npy -o t.dcz ") + target + k_off0);
    EXPECT_EQ(r.status, 8) << target << "\n" << describe(r);
    EXPECT_TRUE(contains(r.err, "c.npy")) << r.err;
    EXPECT_TRUE(contains(r.err, "constant")) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("t.dcz"))) << target;
  }
  // Both gates fail alike, with the reason.
  for (const char* gate : {"--min-psnr 20", "--min-ssim 0.5"}) {
    auto v = cli(dir, std::string("verify c.dcz --against c.npy ") + gate);
    EXPECT_EQ(v.status, 8) << gate << "\n" << describe(v);
    EXPECT_TRUE(contains(v.err, "c.dcz: gate failed")) << v.err;
    EXPECT_TRUE(contains(v.err, "constant")) << v.err;
  }
}

TEST(QualityCli, ConstantFloatDataDecodedExactlyHasInfinitePsnrAndSsimOneSoGatesPass) {
  temp_dir dir;
  // f32 planes of one value: the offset is the constant, so every chop decodes exactly.
  save_npy(dir.file("z.npy"), dtype::f32, {3, 16, 16}, std::vector<float>(3 * 16 * 16, 2.5f));
  auto c = cli(dir, "compress z.npy -o z.dcz --chop 1 --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json q = parse_json(c.out).at("quality");
  EXPECT_EQ(q.at("max_abs_error").get<double>(), 0.0) << c.out;
  EXPECT_FALSE(q.at("psnr_undefined").get<bool>()) << c.out;
  EXPECT_EQ(q.at("ssim").get<double>(), 1.0) << c.out;
  EXPECT_EQ(q.at("ssim_status"), "measured") << c.out;
  // Both gates hold, as PSNR's always did; and info reads the SSIM back.
  auto v = cli(dir, "verify z.dcz --against z.npy --min-psnr 60 --min-ssim 0.999");
  EXPECT_EQ(v.status, 0) << describe(v);
  auto i = cli(dir, "info --json z.dcz");
  ASSERT_EQ(i.status, 0) << describe(i);
  EXPECT_EQ(parse_json(i.out).at("quality").at("ssim").get<double>(), 1.0) << i.out;
  // An SSIM target is met by the first chop.
  auto t = cli(dir, "compress z.npy -o t.dcz --ssim 0.99 --json");
  ASSERT_EQ(t.status, 0) << describe(t);
  EXPECT_EQ(parse_json(t.out).at("chop").get<int>(), 1) << t.out;
}

TEST(QualityCli, InfoSaysWhyAnArchiveHasNoSsim) {
  temp_dir dir;
  // Constant f64 data that comes back off by about 1e-9 (k_off0): SSIM is 0/0, and the
  // range tells.
  save_npy(dir.file("z.npy"), dtype::f64, {4, 16, 16}, std::vector<double>(4 * 16 * 16, 0.1));
  save_npy(dir.file("s.npy"), dtype::u8, {4, 6, 6}, test::smooth_u8_nhwc(4, 6, 6, 1));
  save_textured(dir);
  ASSERT_EQ(cli(dir, std::string("compress z.npy -o z.dcz -q") + k_off0).status, 0);
  ASSERT_EQ(cli(dir, "compress s.npy -o s.dcz -q").status, 0);
  ASSERT_EQ(cli(dir, "compress tex.npy -o t.dcz -q --no-ssim").status, 0);
  // Float data from a pipe: compress could not know its range, and info says so too.
  save_npy(dir.file("f.npy"), dtype::f32, {4, 24, 18}, test::smooth_f32_nhw(4, 24, 18));
  auto p = sh(dir, "cat f.npy | DCTCHOP compress - -o p.dcz");
  ASSERT_EQ(p.status, 0) << describe(p);
  EXPECT_TRUE(contains(p.err, "SSIM n/a (float data from a stream: range unknown)")) << p.err;
  struct want { const char* archive; const char* text; const char* status; };
  for (auto w : {want{"z.dcz", "SSIM n/a (constant data)", "constant"},
                 want{"s.dcz", "SSIM n/a (planes below 7x7)", "small_planes"},
                 want{"t.dcz", "SSIM n/a (not measured)", "off"},
                 want{"p.dcz", "SSIM n/a (float data from a stream: range unknown)", "no_range"}}) {
    auto i = cli(dir, std::string("info ") + w.archive);
    ASSERT_EQ(i.status, 0) << describe(i);
    EXPECT_TRUE(contains(i.out, w.text)) << w.archive << "\n" << i.out;
    // --json says the same as the other reports do, in ssim_status.
    auto j = cli(dir, std::string("info --json ") + w.archive);
    ASSERT_EQ(j.status, 0) << describe(j);
    const auto q = nlohmann::json::parse(j.out).at("quality");
    EXPECT_TRUE(q.at("ssim").is_null()) << w.archive;
    EXPECT_EQ(q.at("ssim_status"), w.status) << w.archive;
  }
  // Measured, and not measured at all.
  ASSERT_EQ(cli(dir, "compress tex.npy -o m.dcz -q").status, 0);
  EXPECT_EQ(nlohmann::json::parse(cli(dir, "info --json m.dcz").out).at("quality").at("ssim_status"),
            "measured");
  ASSERT_EQ(cli(dir, "compress tex.npy -o n.dcz -q --no-quality").status, 0);
  EXPECT_FALSE(nlohmann::json::parse(cli(dir, "info --json n.dcz").out).contains("quality"));
}

TEST(QualityCli, SsimTargetOnPlanesBelow7x7Exits8NamingTheFileAndTheReason) {
  temp_dir dir;
  save_npy(dir.file("s.npy"), dtype::u8, {4, 6, 6}, test::smooth_u8_nhwc(4, 6, 6, 1));
  auto r = cli(dir, "compress s.npy -o s.dcz --ssim 0.5");
  EXPECT_EQ(r.status, 8) << describe(r);
  EXPECT_TRUE(contains(r.err, "s.npy")) << r.err;
  EXPECT_TRUE(contains(r.err, "smaller than 7x7")) << r.err;
  auto c = cli(dir, "compress s.npy -o s.dcz --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(parse_json(c.out).at("quality").at("ssim_status"), "small_planes") << c.out;
  auto n = cli(dir, "compress s.npy -o n.dcz --json --no-ssim");
  ASSERT_EQ(n.status, 0) << describe(n);
  EXPECT_EQ(parse_json(n.out).at("quality").at("ssim_status"), "off") << n.out;
}

// verify --labels compares the labels an archive stores with the original's, byte for byte:
// their values, dtype and shape, from a file or a stream, and says which rows differ.
TEST(QualityCli, VerifyWithLabelsPassesOnTheStoredLabelsAndExits9WhereTheyDiffer) {
  temp_dir dir;
  make_verified(dir);  // x.npy (4 samples) and a.dcz, which stores no labels
  const auto save_i64 = [&](const std::string& name, std::vector<std::uint64_t> shape,
                            std::vector<std::int64_t> v) {
    auto w = formats::npy_writer::create(dir.file(name), *formats::parse_npy_descr("<i8"),
                                         shape, false);
    w.write_rows(v.data(), shape[0]);
    w.finish();
  };
  save_i64("y.npy", {4}, {3, 1, 4, 1});
  save_i64("other.npy", {4}, {3, 1, 5, 9});
  save_i64("column.npy", {4, 1}, {3, 1, 4, 1});
  save_i64("five.npy", {5}, {3, 1, 4, 1, 5});
  save_npy(dir.file("y32.npy"), dtype::i32, {4}, std::vector<std::int32_t>{3, 1, 4, 1});
  ASSERT_EQ(cli(dir, "compress x.npy -o l.dcz -q --labels y.npy").status, 0);

  auto ok = cli(dir, "verify l.dcz --against x.npy --labels y.npy");
  EXPECT_EQ(ok.status, 0) << describe(ok);
  EXPECT_TRUE(contains(ok.err, "labels equal y.npy's (4 rows)")) << ok.err;
  const json j = parse_json(cli(dir, "verify l.dcz --against x.npy --labels y.npy --json").out);
  EXPECT_EQ(j.value("passed", false), true) << j.dump();
  EXPECT_EQ(j.at("labels"), json({{"source", "y.npy"}, {"rows", 4}, {"rows_differing", 0}}));
  // Without --labels the stored labels are only checked (their checksum), not compared.
  const auto plain = cli(dir, "verify l.dcz --against x.npy --json");
  ASSERT_EQ(plain.status, 0) << describe(plain);
  EXPECT_EQ(parse_json(plain.out).value("passed", false), true) << plain.out;
  EXPECT_FALSE(parse_json(plain.out).contains("labels")) << plain.out;

  // Values that differ: exit 9 after the data's figures and a failed gate (9 where 8 would
  // be), saying how many rows differ and which first.
  auto diff = cli(dir, "verify l.dcz --against x.npy --labels other.npy --min-psnr 99");
  EXPECT_EQ(diff.status, 9) << describe(diff);
  const auto figures = diff.err.find("checksums ok; PSNR");
  const auto gate = diff.err.find("gate failed: PSNR");
  const auto labels_line = diff.err.find("mismatch: l.dcz's labels and other.npy differ in 2 of "
                                         "4 rows, the first row 2");
  EXPECT_TRUE(figures < gate && gate < labels_line && labels_line != std::string::npos)
      << diff.err;
  EXPECT_FALSE(contains(diff.err, "labels equal")) << diff.err;
  const auto dj = cli(dir, "verify l.dcz --against x.npy --labels other.npy --json");
  EXPECT_EQ(dj.status, 9) << describe(dj);
  const json d = parse_json(dj.out);
  EXPECT_EQ(d.value("passed", true), false);
  EXPECT_EQ(d.value("exit_code", 0), 9);
  EXPECT_TRUE(d.at("quality").is_object()) << dj.out;  // the data was measured
  EXPECT_EQ(d.at("labels").at("rows_differing"), 2);
  EXPECT_EQ(d.value("error", ""), "mismatch: " + d.value("mismatch", "?"));
  // Another dtype or shape of the same numbers, more rows, or an archive without labels.
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"l.dcz --labels y32.npy", "l.dcz's labels are 4 int64, but y32.npy is 4 int32"},
           {"l.dcz --labels column.npy", "l.dcz's labels are 4 int64, but column.npy is 4x1 int64"},
           {"l.dcz --labels five.npy", "l.dcz's labels are 4 int64, but five.npy is 5 int64"},
           {"a.dcz --labels y.npy", "a.dcz holds no labels, but --labels y.npy is 4 int64"}}) {
    auto r = cli(dir, "verify " + args + " --against x.npy");
    EXPECT_EQ(r.status, 9) << args << "\n" << describe(r);
    EXPECT_TRUE(contains(r.err, "mismatch: " + says)) << args << "\n" << r.err;
    // Not compared: no count of differing rows that a script could read as "equal".
    const json rj = parse_json(cli(dir, "verify " + args + " --against x.npy --json").out);
    EXPECT_TRUE(rj.at("labels").at("rows_differing").is_null()) << rj.dump();
    EXPECT_EQ(rj.at("labels").at("rows"), json(args.find("five") != std::string::npos ? 5 : 4));
  }
  // Labels of no rows at all are no dataset's labels: bad input, as compress says.
  save_npy(dir.file("scalar.npy"), dtype::i32, {}, std::vector<std::int32_t>{3});
  for (const char* cmd : {"verify l.dcz --against x.npy --labels scalar.npy",
                          "compress x.npy -o s.dcz --labels scalar.npy"}) {
    auto r = cli(dir, cmd);
    EXPECT_EQ(r.status, 3) << cmd << "\n" << describe(r);
    EXPECT_TRUE(contains(r.err, "scalar.npy: labels need one row per sample (4), found a 0-d "
                                "array")) << cmd << "\n" << r.err;
  }
  // Data that does not match: the labels are not read, and a note says so.
  save_npy(dir.file("more.npy"), dtype::u8, {5, 32, 32}, textured_u8(5, 32, 32));
  auto data = cli(dir, "verify l.dcz --against more.npy --labels other.npy --json");
  EXPECT_EQ(data.status, 9) << describe(data);
  const json dm = parse_json(data.out);
  EXPECT_EQ(dm.at("labels"), json({{"source", "other.npy"}, {"rows", nullptr},
                                   {"rows_differing", nullptr}})) << data.out;
  EXPECT_TRUE(contains(dm.at("notes").dump(), "the labels other.npy were not compared: the data "
                                              "does not match")) << data.out;
  // ... but the archive is still read whole: damaged, it is corrupt (4), not a mismatch (9).

  // The archive from a stream, whose labels come after its chunks; the labels from stdin.
  EXPECT_EQ(sh(dir, "cat l.dcz | DCTCHOP verify - --against x.npy --labels y.npy").status, 0);
  auto sdiff = sh(dir, "cat l.dcz | DCTCHOP verify - --against x.npy --labels other.npy");
  EXPECT_EQ(sdiff.status, 9) << describe(sdiff);
  EXPECT_TRUE(contains(sdiff.err, "<stdin>'s labels and other.npy differ")) << sdiff.err;
  EXPECT_EQ(sh(dir, "cat y.npy | DCTCHOP verify l.dcz --against x.npy --labels -").status, 0);
  EXPECT_EQ(sh(dir, "cat other.npy | DCTCHOP verify l.dcz --against x.npy --labels -").status, 9);

  // Usage: --labels without an original, or two inputs from stdin; a labels file that is not
  // there is said before anything is decoded.
  for (const auto& [cmd, says] : std::vector<std::pair<std::string, std::string>>{
           {"DCTCHOP verify l.dcz --labels y.npy",
            "--labels gives the original's labels: it needs --against ORIGINAL"},
           {"cat l.dcz | DCTCHOP verify - --against x.npy --labels -",
            "the archive and --labels cannot both be stdin"},
           {"cat x.npy | DCTCHOP verify l.dcz --against - --labels -",
            "the input and --labels cannot both be stdin"}}) {
    auto r = sh(dir, cmd);
    EXPECT_EQ(r.status, 2) << cmd << "\n" << describe(r);
    EXPECT_TRUE(contains(r.err, says)) << cmd << "\n" << r.err;
  }
  auto missing = cli(dir, "verify l.dcz --against x.npy --labels nowhere.npy");
  EXPECT_EQ(missing.status, 5) << describe(missing);
  EXPECT_TRUE(contains(missing.err, "nowhere.npy")) << missing.err;
  EXPECT_FALSE(contains(missing.err, "checksums ok")) << missing.err;

  // Stored labels damaged on disk: the comparison reads them checking their checksum (exit 4).
  const auto reader = formats::archive_reader::open(dir.file("l.dcz"));
  const auto* side = reader.find_side_array("labels");
  ASSERT_NE(side, nullptr);
  const std::uint64_t at = side->offset;
  std::string bytes = read_bytes(dir.file("l.dcz"));
  bytes[at] = char(bytes[at] ^ 0x40);
  write_bytes(dir.file("bad.dcz"), bytes);
  for (const char* labels : {"y.npy", "y32.npy"}) {  // (compared or not: checked)
    auto bad = cli(dir, std::string("verify bad.dcz --against x.npy --labels ") + labels);
    EXPECT_EQ(bad.status, 4) << labels << "\n" << describe(bad);
    EXPECT_TRUE(contains(bad.err, "labels")) << bad.err;
  }
  auto stream = sh(dir, "cat bad.dcz | DCTCHOP verify - --against x.npy --labels y.npy");
  EXPECT_EQ(stream.status, 4) << describe(stream);
  // A data mismatch still reads the archive whole, checking every checksum (4 before 9).
  for (const char* cmd : {"DCTCHOP verify bad.dcz --against more.npy",
                          "cat bad.dcz | DCTCHOP verify - --against more.npy --labels y.npy"}) {
    auto r = sh(dir, cmd);
    EXPECT_EQ(r.status, 4) << cmd << "\n" << describe(r);
  }
}

TEST(QualityCli, FloatDataFromStdinHasNoSsimInCompressButVerifyTakesTheRangeFromTheArchive) {
  temp_dir dir;
  const analytic_f32 d;
  d.save(dir, "f.npy");
  auto c = sh(dir, "DCTCHOP compress - -o f.dcz --json < f.npy");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json q = parse_json(c.out).at("quality");
  EXPECT_TRUE(q.at("ssim").is_null()) << c.out;
  EXPECT_EQ(q.at("ssim_status"), "no_range") << c.out;
  auto v = sh(dir, "DCTCHOP verify f.dcz --against - --json < f.npy");
  ASSERT_EQ(v.status, 0) << describe(v);
  EXPECT_TRUE(parse_json(v.out).at("quality").at("ssim").is_number()) << v.out;
}

TEST(QualityCli, EvalSaysUnderItsTableWhyAFigureIsNa) {
  temp_dir dir;
  save_textured(dir);
  auto e = cli(dir, "eval tex.npy --chop 2,4 --no-ssim -q");
  ASSERT_EQ(e.status, 0) << describe(e);
  EXPECT_TRUE(contains(e.out, "\nSSIM n/a: not measured\n")) << e.out;
  EXPECT_EQ(e.out.find("SSIM n/a"), e.out.rfind("SSIM n/a")) << "once, not per row: " << e.out;
  auto m = cli(dir, "eval tex.npy --chop 2 -q");
  ASSERT_EQ(m.status, 0) << describe(m);
  EXPECT_FALSE(contains(m.out, "n/a")) << m.out;
}

TEST(QualityCli, VerifyWithoutAnOriginalChecksTheArchiveAndRefusesTheOriginalsOptions) {
  temp_dir dir;
  save_textured(dir);
  ASSERT_EQ(cli(dir, "compress tex.npy -o a.dcz --chop 4 -q").status, 0);
  auto ok = cli(dir, "verify a.dcz");
  EXPECT_EQ(ok.status, 0) << describe(ok);
  EXPECT_TRUE(contains(ok.err, "a.dcz: 1 chunk and 0 side arrays, every checksum ok")) << ok.err;
  EXPECT_TRUE(parse_json(cli(dir, "verify a.dcz --json").out).at("passed").get<bool>());
  // What describes the original, or gates on it, needs the original.
  for (const std::string args : {"verify a.dcz --dataset x", "verify a.dcz --raw --dtype u8 --shape 1,2",
                                 "verify a.dcz --min-psnr 3"}) {
    auto r = cli(dir, args);
    EXPECT_EQ(r.status, 2) << args << "\n" << describe(r);
    EXPECT_TRUE(contains(r.err, "--against ORIGINAL")) << args << ": " << r.err;
  }
  // A backend asked for by name must exist, even where no codec runs.
  bool have_cuda = true;
  try {
    make_backend(backend_kind::cuda);
  } catch (const error&) {
    have_cuda = false;
  }
  auto cuda = cli(dir, "verify a.dcz --backend cuda -q");
  EXPECT_EQ(cuda.status, have_cuda ? 0 : 7) << describe(cuda);
  // With an original and no gate, nothing claims that gates hold.
  auto plain = cli(dir, "verify a.dcz --against tex.npy");
  EXPECT_EQ(plain.status, 0) << describe(plain);
  EXPECT_FALSE(contains(plain.err, "gate")) << plain.err;
  auto gated = cli(dir, "verify a.dcz --against tex.npy --min-psnr 3");
  EXPECT_TRUE(contains(gated.err, "every gate holds")) << gated.err;
}

TEST(QualityCli, VerifyAgainstOtherDataOrTheDecodedOutputSaysSoAfterItsFigures) {
  temp_dir dir;
  save_textured(dir);
  ASSERT_EQ(cli(dir, "compress tex.npy -o a.dcz --chop 4 -q").status, 0);
  ASSERT_EQ(cli(dir, "decompress a.dcz -o dec.npy -q").status, 0);
  // The original: no note, from any backend's decode (the recorded MSE is the same decode's).
  auto same = cli(dir, "verify a.dcz --against tex.npy");
  EXPECT_EQ(same.status, 0) << describe(same);
  EXPECT_FALSE(contains(same.err, "note:")) << same.err;
  // The decoded output in place of the original passes every gate, exactly: worth a word.
  auto dec = cli(dir, "verify a.dcz --against dec.npy --min-psnr 40");
  EXPECT_EQ(dec.status, 0) << describe(dec);
  EXPECT_TRUE(contains(dec.err, "every gate holds\ndctchop: note: dec.npy equals the decoded data "
                                "exactly, but a.dcz recorded PSNR ")) << dec.err;
  EXPECT_TRUE(contains(dec.err, "is dec.npy the decompressed output rather than the original?"))
      << dec.err;
  // Other data of the same shape and dtype (the samples in another order).
  auto a = load_npy(dir.file("tex.npy"));
  const std::size_t per = a.values.size() / a.header.shape[0];
  std::vector<std::uint8_t> other(a.values.size());
  for (std::size_t i = 0; i < a.header.shape[0]; ++i) {
    const std::size_t from = (a.header.shape[0] - 1 - i) * per;
    for (std::size_t k = 0; k < per; ++k) other[i * per + k] = static_cast<std::uint8_t>(a.values[from + k]);
  }
  save_npy(dir.file("other.npy"), dtype::u8, a.header.shape, other);
  auto o = cli(dir, "verify a.dcz --against other.npy --json");
  EXPECT_EQ(o.status, 0) << describe(o);
  const auto notes = parse_json(o.out).at("notes");
  ASSERT_EQ(notes.size(), 1u) << o.out;
  EXPECT_TRUE(contains(notes[0].get<std::string>(), "a.dcz decoded at PSNR ")) << notes[0];
  EXPECT_TRUE(contains(notes[0].get<std::string>(), "against other.npy: is other.npy that data, "
                                                    "unchanged?")) << notes[0];
}

TEST(QualityCli, VerifyOfFloatDataTakesROfTheOriginalGivenNotTheRecordedOne) {
  // R of float data is max - min of the original. verify took the R recorded with the
  // archive, so other data of the same shape was measured with the archive's R: PSNR off by
  // 20 log10 of their ratio, and against an archive of constant data "PSNR n/a (constant
  // data)" without the note that says the original is other data.
  temp_dir dir;
  save_constant_f64(dir);  // c.npy: 4 x 16 x 16 of 0.1
  std::vector<double> ramp(4 * 16 * 16), scaled(ramp.size());
  for (std::size_t i = 0; i < ramp.size(); ++i) {
    ramp[i] = static_cast<double>((i * 37) % 101) / 7.0;  // 0 .. 100/7, textured
    scaled[i] = ramp[i] * 1000.0;
  }
  save_npy(dir.file("r.npy"), dtype::f64, {4, 16, 16}, ramp);
  save_npy(dir.file("s.npy"), dtype::f64, {4, 16, 16}, scaled);
  ASSERT_EQ(cli(dir, "compress c.npy -o c.dcz --chop 1 -q").status, 0);
  ASSERT_EQ(cli(dir, "compress r.npy -o r.dcz --chop 4 -q").status, 0);
  // The PSNR each original's own R gives, from the MSE verify reports.
  auto psnr_of = [](const json& q) {
    return 20 * std::log10(q.at("range").get<double>()) - 10 * std::log10(q.at("mse").get<double>());
  };
  struct check_case {
    const char *archive, *original;
    double range;  // max - min of the original
  };
  for (const check_case k : {check_case{"c.dcz", "r.npy", 100.0 / 7.0},
                             check_case{"r.dcz", "s.npy", 100000.0 / 7.0}}) {
    const std::string what = std::string(k.archive) + " against " + k.original;
    auto v = cli(dir, std::string("verify ") + k.archive + " --against " + k.original + " --json");
    ASSERT_EQ(v.status, 0) << what << "\n" << describe(v);
    const json j = parse_json(v.out);
    EXPECT_EQ(j.at("file"), k.archive) << v.out;
    const json& q = j.at("quality");
    EXPECT_NEAR(q.at("range").get<double>(), k.range, 1e-9 * k.range) << what << "\n" << v.out;
    ASSERT_TRUE(q.at("psnr_db").is_number()) << what << "\n" << v.out;
    EXPECT_NEAR(q.at("psnr_db").get<double>(), psnr_of(q), 1e-9) << what;
    EXPECT_FALSE(q.at("psnr_undefined").get<bool>()) << what;
    EXPECT_NEAR(q.at("nrmse").get<double>(), q.at("rmse").get<double>() / k.range, 1e-12) << what;
    EXPECT_TRUE(q.at("ssim").is_null()) << what << "\n" << v.out;
    EXPECT_EQ(q.at("ssim_status"), "other_range") << what;
    ASSERT_EQ(j.at("notes").size(), 1u) << what << "\n" << v.out;
    const std::string note = j.at("notes")[0].get<std::string>();
    EXPECT_TRUE(contains(note, std::string(k.original) + "'s values span ")) << note;
    EXPECT_TRUE(contains(note, "is " + std::string(k.original) + " that data, unchanged?")) << note;
  }
  // A PSNR gate is judged at the original's R (not "the data is constant"); an SSIM gate
  // fails saying why there is none.
  auto g = cli(dir, "verify c.dcz --against r.npy --min-psnr 1");
  EXPECT_EQ(g.status, 0) << describe(g);
  auto s = cli(dir, "verify c.dcz --against r.npy --min-ssim 0.1");
  EXPECT_EQ(s.status, 8) << describe(s);
  EXPECT_TRUE(contains(s.err, "the original's range is not the one recorded with the archive"))
      << s.err;
  // The data the archive was made from: the recorded R, SSIM measured, no note.
  auto same = cli(dir, "verify r.dcz --against r.npy --json");
  ASSERT_EQ(same.status, 0) << describe(same);
  const json sj = parse_json(same.out);
  EXPECT_EQ(sj.at("quality").at("ssim_status"), "measured") << same.out;
  EXPECT_TRUE(sj.at("notes").empty()) << same.out;
}

TEST(QualityCli, NonFiniteOrOutOfRangeTargetsAndGatesAreUsageErrors) {
  temp_dir dir;
  save_textured(dir);
  ASSERT_EQ(cli(dir, "compress tex.npy -o a.dcz --chop 4 -q").status, 0);
  for (const char* args :
       {"compress tex.npy -o t.dcz --psnr nan", "compress tex.npy -o t.dcz --psnr inf",
        "compress tex.npy -o t.dcz --ssim nan",
        "compress tex.npy -o t.dcz --psnr 30 --no-quality",
        "compress tex.npy -o t.dcz --ssim 0.9 --no-quality",
        "compress tex.npy -o t.dcz --ssim 0.9 --no-ssim",
        "verify a.dcz --against tex.npy --min-psnr nan",
        "verify a.dcz --against tex.npy --min-ssim nan",
        "verify a.dcz --against tex.npy --min-ssim 2",
        "verify a.dcz --against tex.npy --max-error nan",
        "verify a.dcz --against tex.npy --max-error -1",
        "eval tex.npy --chop 1-3", "eval tex.npy --chop 2.5", "eval tex.npy --chop 2x",
        "eval tex.npy --chop 2,,3", "eval tex.npy --chop 2,", "eval tex.npy --coeff f16,,f32"}) {
    auto r = cli(dir, args);
    EXPECT_EQ(r.status, 2) << args << "\n" << describe(r);
    EXPECT_FALSE(fs::exists(dir.file("t.dcz"))) << args;
    EXPECT_LT(r.err.size(), 200u) << args << ": one short line: " << r.err;  // (no DBL_MAX in full)
  }
  // The same options with sensible values work (spaces around list items too).
  EXPECT_EQ(cli(dir, "verify a.dcz --against tex.npy --min-ssim -0.5 --max-error 255 -q").status, 0);
  EXPECT_EQ(cli(dir, "eval tex.npy --chop '2, 3' -q").status, 0);
}

TEST(QualityCli, VerifyRefusesAnOriginalWithNanWhereTheArchiveRecordedNoReplacement) {
  temp_dir dir;
  const analytic_f32 d;
  d.save(dir, "f.npy");
  ASSERT_EQ(cli(dir, "compress f.npy -o f.dcz -q").status, 0);
  std::vector<float> bad = d.values;
  bad[3 * 32 * 32 + 40] = std::numeric_limits<float>::quiet_NaN();
  save_npy(dir.file("bad.npy"), dtype::f32, {u64(analytic_f32::n), 32, 32}, bad);
  auto v = cli(dir, "verify f.dcz --against bad.npy --min-psnr 10");
  EXPECT_EQ(v.status, 3) << describe(v);
  EXPECT_TRUE(contains(v.err, "bad.npy: sample 3")) << v.err;
  EXPECT_TRUE(contains(v.err, "NaN or Inf")) << v.err;
}

TEST(QualityCli, InfoTextCountsLosslessSamplesAndVerifyMismatchDescribesTheArchive) {
  temp_dir dir;
  // Two samples of noise and two constant ones: at chop 1 the constant ones are exact.
  std::vector<std::uint8_t> v(4 * 16 * 16, 77);
  lcg r(3);
  for (std::size_t k = 0; k < 2 * 16 * 16; ++k) v[k] = static_cast<std::uint8_t>(r.next() & 0xff);
  save_npy(dir.file("m.npy"), dtype::u8, {4, 16, 16}, v);
  ASSERT_EQ(cli(dir, "compress m.npy -o m.dcz --chop 1 -q").status, 0);
  auto i = cli(dir, "info m.dcz");
  ASSERT_EQ(i.status, 0) << describe(i);
  EXPECT_TRUE(contains(i.out, "(2 lossless samples)")) << i.out;
  // One: "sample".
  save_npy(dir.file("one.npy"), dtype::u8, {3, 16, 16},
           std::vector<std::uint8_t>(v.begin(), v.begin() + 3 * 16 * 16));
  ASSERT_EQ(cli(dir, "compress one.npy -o one.dcz --chop 1 -q").status, 0);
  auto one = cli(dir, "info one.dcz");
  ASSERT_EQ(one.status, 0) << describe(one);
  EXPECT_TRUE(contains(one.out, "(1 lossless sample)")) << one.out;
  // An original whose shape cannot take the archive's layout: exit 9, the archive described.
  save_npy(dir.file("flat.npy"), dtype::f32, {4, 16}, std::vector<float>(64, 0.f));
  auto m = cli(dir, "verify m.dcz --against flat.npy");
  EXPECT_EQ(m.status, 9) << describe(m);
  EXPECT_TRUE(contains(m.err, "m.dcz holds 4x16x16 u8")) << m.err;
}

}  // namespace
