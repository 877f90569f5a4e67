// NaN and Inf in float input (issue 7): by default an error naming the first sample that holds
// one; with --nonfinite replace=V they are replaced by V, the value is recorded in the header
// and the count in the footer, and verify applies the same replacement to the original.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/formats/archive.hpp"
#include "test_util.hpp"

namespace dctchop {
namespace {

using test::cli;
using test::describe;
using test::temp_dir;

constexpr std::uint64_t k_n = 6, k_h = 16, k_w = 16;

/** dir/x.npy: 6 smooth f32 samples of 16x16 with a NaN in sample 2, +Inf in sample 4 and
 *  -Inf in sample 5; returns the positions of the three. */
std::vector<std::size_t> make_input(const temp_dir& dir, dtype type = dtype::f32) {
  std::vector<float> v = test::smooth_f32_nhw(k_n, k_h, k_w);
  const std::vector<std::size_t> at = {2 * 256 + 17, 4 * 256 + 100, 5 * 256 + 255};
  v[at[0]] = std::numeric_limits<float>::quiet_NaN();
  v[at[1]] = std::numeric_limits<float>::infinity();
  v[at[2]] = -std::numeric_limits<float>::infinity();
  if (type == dtype::f64) {
    test::save_npy(dir.file("x.npy"), dtype::f64, {k_n, k_h, k_w},
                   std::vector<double>(v.begin(), v.end()));
  } else if (type == dtype::f16) {  // (NaN and +-Inf stay such in f16)
    test::save_npy(dir.file("x.npy"), dtype::f16, {k_n, k_h, k_w}, test::to_half(v));
  } else {
    test::save_npy(dir.file("x.npy"), dtype::f32, {k_n, k_h, k_w}, v);
  }
  return at;
}

TEST(NonFinite, ByDefaultCompressRefusesNamingTheFirstSampleAndTheOption) {
  for (dtype t : {dtype::f16, dtype::f32, dtype::f64}) {
    temp_dir dir;
    make_input(dir, t);
    const auto r = cli(dir, "compress x.npy -o a.dcz");
    EXPECT_EQ(r.status, 3) << describe(r);
    EXPECT_NE(r.err.find("x.npy: sample 2: holds a NaN or Inf"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--nonfinite replace=V"), std::string::npos) << r.err;
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});
  }
}

TEST(NonFinite, ReplaceSubstitutesTheValueAndRecordsItAndTheCount) {
  temp_dir dir;
  const auto at = make_input(dir);
  // Chop 8 with f32 coefficients: every value decodes to within float rounding.
  auto r = cli(dir, "compress x.npy -o a.dcz --chop 8 --coeff f32 --nonfinite replace=-1.5 "
                    "--json");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(test::parse_json(r.out).at("nonfinite_replaced"), 3);
  r = cli(dir, "info a.dcz --json");
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto info = test::parse_json(r.out);
  EXPECT_EQ(info.at("nonfinite").at("replace"), -1.5);
  EXPECT_EQ(info.at("nonfinite_replaced"), 3);
  r = cli(dir, "info a.dcz");
  EXPECT_NE(r.out.find("non-finite:  NaN/Inf replaced by -1.5 (3 values)"), std::string::npos)
      << r.out;

  ASSERT_EQ(cli(dir, "decompress a.dcz -o y.npy").status, 0);
  const auto x = test::load_npy(dir.file("x.npy")).values;
  const auto y = test::load_npy(dir.file("y.npy")).values;
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool replaced = std::find(at.begin(), at.end(), i) != at.end();
    ASSERT_EQ(std::isfinite(x[i]), !replaced) << i;
    EXPECT_NEAR(y[i], replaced ? -1.5 : x[i], 1e-4) << "value " << i;
  }

  // verify compares with the original as compressed: the same replacement, a finite PSNR.
  // (A NaN left in the original would make the MSE NaN and the PSNR absent, which the gate
  // alone would not see: the figures are read.)
  r = cli(dir, "verify a.dcz --against x.npy --min-psnr 80 --json");
  EXPECT_EQ(r.status, 0) << describe(r);
  const auto v = test::parse_json(r.out);
  ASSERT_TRUE(v.at("quality").at("psnr_db").is_number()) << r.out;
  EXPECT_TRUE(std::isfinite(v.at("quality").at("psnr_db").get<double>())) << r.out;
  EXPECT_GE(v.at("quality").at("psnr_db").get<double>(), 80.0) << r.out;
  EXPECT_LT(v.at("quality").at("max_abs_error").get<double>(), 1e-3) << r.out;
  // ... and says so.
  const std::string notes = v.at("notes").dump();
  EXPECT_NE(notes.find("x.npy: its 3 NaN/Inf values were compared as -1.5, the replacement "
                       "a.dcz records"),
            std::string::npos) << notes;
  EXPECT_EQ(notes.find("unchanged?"), std::string::npos) << notes;

  // An original with other NaN/Inf than the archive's is not the data it was made from.
  std::vector<float> w = test::smooth_f32_nhw(k_n, k_h, k_w);
  w[at[0]] = std::numeric_limits<float>::quiet_NaN();  // one of the three, not all
  test::save_npy(dir.file("fewer.npy"), dtype::f32, {k_n, k_h, k_w}, w);
  r = cli(dir, "verify a.dcz --against fewer.npy --json");
  EXPECT_EQ(r.status, 0) << describe(r);
  const std::string fewer = test::parse_json(r.out).at("notes").dump();
  EXPECT_NE(fewer.find("fewer.npy holds 1 NaN/Inf value, but the data a.dcz was made from held "
                       "3: is fewer.npy that data, unchanged?"),
            std::string::npos) << fewer;
}

/** Replacement values for make_input's data: ten ranges above it, and amid it. */
struct replacements {
  double far, mid;
};
replacements replacements_for_the_input() {
  const std::vector<float> v = test::smooth_f32_nhw(k_n, k_h, k_w);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {*hi + 10.0 * (*hi - *lo), (double(*lo) + *hi) / 2};
}

TEST(NonFinite, AReplacementFarFromTheDataGetsANoteOnTheFigures) {
  temp_dir dir;
  make_input(dir);
  const auto [far, mid] = replacements_for_the_input();
  // compress and eval alike (eval's figures are compress's).
  for (const std::string command : {"compress x.npy -o a.dcz -f", "eval x.npy --chop 2,4"}) {
    auto note_in = [&](double value) {
      auto r = cli(dir, command + " --nonfinite replace=" + std::to_string(value));
      EXPECT_EQ(r.status, 0) << describe(r);
      const std::string note = "note: the quality figures count the 3 replaced values";
      const auto at = r.err.find(note);
      EXPECT_EQ(at == std::string::npos ? at : r.err.find(note, at + 1), std::string::npos)
          << "once: " << r.err;
      return at != std::string::npos;
    };
    EXPECT_TRUE(note_in(far)) << command << ": V far above the data: PSNR inflated, say so";
    EXPECT_FALSE(note_in(mid)) << command << ": V amid the data: nothing to say";
  }
}

TEST(NonFinite, AFarReplacementStretchesRAndSpreadsIntoItsNeighboursAtALowChopAsTheNoteSays) {
  temp_dir dir;
  const auto at = make_input(dir);
  const auto [far, mid] = replacements_for_the_input();
  // Where nothing is dropped (chop 8, f32), only R changes: elevenfold, so the PSNR rises.
  auto psnr = [&](double value) {
    auto r = cli(dir, "eval x.npy --chop 8 --json --nonfinite replace=" + std::to_string(value));
    EXPECT_EQ(r.status, 0) << describe(r);
    return test::parse_json(r.out).at("rows").at(0).at("quality").at("psnr_db").get<double>();
  };
  EXPECT_GT(psnr(far), psnr(mid));
  // At chop 1 a block decodes to its mean: V's 1/64 share lands on each other value of its
  // block, and on no other block (sample 0, whose mean is the offset, holds no NaN or Inf).
  auto decoded = [&](double value) {
    auto r = cli(dir, "compress x.npy -o v.dcz -f -q --chop 1 --nonfinite replace=" +
                          std::to_string(value) + " && " + test::dctchop_bin() +
                          " decompress v.dcz -o v.npy -f -q");
    EXPECT_EQ(r.status, 0) << describe(r);
    return test::load_npy(dir.file("v.npy")).values;
  };
  const auto yf = decoded(far), ym = decoded(mid);
  ASSERT_EQ(yf.size(), k_n * k_h * k_w);
  ASSERT_EQ(ym.size(), yf.size());
  auto block = [](std::size_t i) { return (i / (k_h * k_w)) * 4 + (i % (k_h * k_w)) / k_w / 8 * 2 + i % k_w / 8; };
  const double share = (far - mid) / 64;
  int beside = 0;
  for (std::size_t i = 0; i < yf.size(); ++i) {
    if (std::find(at.begin(), at.end(), i) != at.end()) continue;  // the replaced places
    const bool with_v = std::any_of(at.begin(), at.end(), [&](std::size_t j) { return block(j) == block(i); });
    if (with_v) {
      EXPECT_NEAR(yf[i] - ym[i], share, 1e-3 * share) << "value " << i;
      ++beside;
    } else {
      EXPECT_NEAR(yf[i], ym[i], 1e-6 * share) << "value " << i;
    }
  }
  EXPECT_EQ(beside, 3 * 63);
}

TEST(NonFinite, AFirstSampleAllNanTakesItsReplacementAsTheAutomaticOffset) {
  // A masked first tile: every value of sample 0 is NaN, the rest lie near 300. The automatic
  // offset is the first sample's mean as coded, 300: it was 0 (no finite value to average),
  // and bf16 coefficients of values 300 from the offset lost about 20 dB.
  temp_dir dir;
  std::vector<float> v = test::smooth_f32_nhw(k_n, k_h, k_w);
  for (auto& x : v) x += 300.0f;
  std::fill(v.begin(), v.begin() + k_h * k_w, std::numeric_limits<float>::quiet_NaN());
  test::save_npy(dir.file("m.npy"), dtype::f32, {k_n, k_h, k_w}, v);
  auto psnr_and_offset = [&](const std::string& extra) {
    auto r = cli(dir, "compress m.npy -o a.dcz -f -q --coeff bf16 --nonfinite replace=300 " + extra +
                          " && " + test::dctchop_bin() + " info a.dcz --json");
    EXPECT_EQ(r.status, 0) << describe(r);
    const auto j = test::parse_json(r.out);
    return std::make_pair(j.at("quality").at("psnr_db").get<double>(),
                          j.at("codec").at("offset").get<double>());
  };
  const auto [auto_psnr, auto_offset] = psnr_and_offset("");
  const auto [given_psnr, given_offset] = psnr_and_offset("--offset 300");
  EXPECT_EQ(auto_offset, 300.0);
  EXPECT_EQ(given_offset, 300.0);
  EXPECT_NEAR(auto_psnr, given_psnr, 1e-9);
  // The mean offset likewise (it averages the same values).
  EXPECT_EQ(psnr_and_offset("--offset mean").second, 300.0);
}

TEST(NonFinite, VerifyNamesTheSideThatHoldsTheNanTheOriginalOrTheArchive) {
  // An original with a NaN against an archive of clean data: the original is not what it
  // was made from (exit 3). An archive whose coefficient is NaN (no dctchop writer stores
  // one) against a clean original: the archive, corrupt (exit 4); it blamed the original.
  temp_dir dir;
  const std::vector<float> clean = test::smooth_f32_nhw(1, 8, 8);
  test::save_npy(dir.file("clean.npy"), dtype::f32, {1, 8, 8}, clean);
  std::vector<float> dirty = clean;
  dirty[9] = std::numeric_limits<float>::quiet_NaN();
  test::save_npy(dir.file("dirty.npy"), dtype::f32, {1, 8, 8}, dirty);
  ASSERT_EQ(cli(dir, "compress clean.npy -o a.dcz -q --chop 8 --coeff f32").status, 0);
  auto orig = cli(dir, "verify a.dcz --against dirty.npy");
  EXPECT_EQ(orig.status, 3) << describe(orig);
  EXPECT_NE(orig.err.find("dirty.npy: sample 0 holds a NaN or Inf, which a.dcz cannot have been "
                          "made from"),
            std::string::npos) << orig.err;
  {
    formats::archive_header h;
    h.type = dtype::f32;
    const std::vector<std::uint64_t> shape{1, 8, 8};
    h.geom = resolve_layout(shape, layout::nhw);
    h.codec = {8, 8, coeff_type::f32, 0.0};
    h.samples_per_chunk = 1;
    std::vector<float> c(64);
    make_backend(backend_kind::cpu, {1})
        ->encode(h.codec, make_view(h.geom, dtype::f32, static_cast<const void*>(clean.data()), 1),
                 std::as_writable_bytes(std::span<float>(c)));
    c[5] = std::numeric_limits<float>::quiet_NaN();
    formats::archive_writer w(formats::output_file::create(dir.file("nan.dcz"), false), h);
    w.write_chunk(0, 1, std::as_bytes(std::span<const float>(c)));
    w.finish();
  }
  auto arch = cli(dir, "verify nan.dcz --against clean.npy");
  EXPECT_EQ(arch.status, 4) << describe(arch);
  EXPECT_NE(arch.err.find("nan.dcz: corrupt archive: sample 0 decodes to NaN or Inf values"),
            std::string::npos) << arch.err;
  EXPECT_EQ(arch.err.find("clean.npy"), std::string::npos) << arch.err;
}

TEST(NonFinite, ReplaceWorksFromStdinAndInEval) {
  temp_dir dir;
  make_input(dir, dtype::f64);
  auto r = cli(dir, "compress - -o a.dcz --nonfinite replace=0 --json < x.npy");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(test::parse_json(r.out).at("nonfinite_replaced"), 3);
  // eval counts the replacements and predicts the archive compress writes, byte for byte.
  r = cli(dir, "eval x.npy --chop 4 --nonfinite replace=0 --json");
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto ej = test::parse_json(r.out);
  EXPECT_EQ(ej.at("nonfinite_replaced"), 3) << r.out;
  const auto rows = ej.at("rows");
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_TRUE(rows[0].at("quality").at("psnr_db").is_number()) << r.out;
  ASSERT_EQ(cli(dir, "compress x.npy -o b.dcz --chop 4 --nonfinite replace=0").status, 0);
  EXPECT_EQ(rows[0].at("archive_bytes"), test::fs::file_size(dir.file("b.dcz")));
  r = cli(dir, "eval x.npy --chop 4 --nonfinite replace=0");
  EXPECT_NE(r.err.find("3 NaN/Inf values replaced by 0"), std::string::npos) << describe(r);
}

TEST(NonFinite, IntegerInputIgnoresTheReplacementAndRecordsNothing) {
  temp_dir dir;
  test::save_npy(dir.file("u.npy"), dtype::u8, {2, 8, 8}, std::vector<std::uint8_t>(128, 7));
  ASSERT_EQ(cli(dir, "compress u.npy -o a.dcz --nonfinite replace=3").status, 0);
  const auto r = cli(dir, "info a.dcz --json");
  const auto info = test::parse_json(r.out);
  EXPECT_FALSE(info.contains("nonfinite")) << r.out;
  EXPECT_FALSE(info.contains("nonfinite_replaced")) << r.out;
}

TEST(NonFinite, AModeOtherThanErrorOrAFiniteReplacementIsAUsageError) {
  temp_dir dir;
  make_input(dir);
  for (const char* mode : {"replace=nan", "replace=inf", "replace=", "replace=1e999",
                           "replace=2x", "drop", "replace0", "errors"}) {
    const auto r = cli(dir, std::string("compress x.npy -o a.dcz --nonfinite ") + mode);
    EXPECT_EQ(r.status, 2) << mode << "\n" << describe(r);
    EXPECT_NE(r.err.find("--nonfinite"), std::string::npos) << r.err;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});
  // Finite, but not an f32 value: refused for f32 input (f64 input could hold it).
  const auto r = cli(dir, "compress x.npy -o a.dcz --nonfinite replace=1e300");
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("does not fit f32"), std::string::npos) << r.err;
  // The words in any case, as --coeff and --layout take theirs (--offset's too).
  const auto upper = cli(dir, "compress x.npy -o u.dcz --nonfinite REPLACE=0 --offset Mean --json -q");
  ASSERT_EQ(upper.status, 0) << describe(upper);
  EXPECT_GT(test::parse_json(upper.out).at("nonfinite_replaced").get<double>(), 0) << upper.out;
  EXPECT_EQ(cli(dir, "compress x.npy -o e.dcz --nonfinite Error -q").status, 3);
}

TEST(NonFinite, AnF64ReplacementNoCoefficientTypeHoldsIsNamedInTheErrorItCauses) {
  // f64 holds 1e300, so it is taken; the blocks of a sample with NaN then overflow f32: the
  // error said "rescale the data" of data within +-1, not naming the replacement.
  temp_dir dir;
  make_input(dir, dtype::f64);
  auto r = cli(dir, "compress x.npy -o a.dcz --nonfinite replace=1e300");
  EXPECT_EQ(r.status, 3) << describe(r);
  const std::string said =
      ": a DCT coefficient does not fit f32: the sample's values equal to the --nonfinite "
      "replacement 1e+300 (its NaN and Inf, if it held some) lie too far from its others "
      "(within [";
  EXPECT_NE(r.err.find("x.npy: sample 2" + said), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("]) for f32 to hold a block of both; where they are NaN and Inf, a "
                       "replacement among the others fits"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("rescale"), std::string::npos) << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});
  // eval's settings say so too.
  r = cli(dir, "eval x.npy --chop 4 --nonfinite replace=1e300");
  EXPECT_EQ(r.status, 3) << describe(r);
  EXPECT_NE(r.err.find("no setting tried can hold the data (sample 2: a DCT coefficient does not "
                       "fit f32: the sample's values equal to the --nonfinite replacement 1e+300"),
            std::string::npos)
      << r.err;
  // A NaN in the first sample, whose mean, the offset, the replacement then moves as well.
  std::vector<double> first(2 * 64, 0.25);
  first[3] = std::numeric_limits<double>::quiet_NaN();
  test::save_npy(dir.file("first.npy"), dtype::f64, {2, 8, 8}, first);
  r = cli(dir, "compress first.npy -o f.dcz --nonfinite replace=1e300");
  EXPECT_EQ(r.status, 3) << describe(r);
  EXPECT_NE(r.err.find("first.npy: sample 0" + said + "0.25, 0.25])"), std::string::npos) << r.err;
  // Where the data's own values do not fit either (an offset far from all of them), the
  // replacement is not named.
  r = cli(dir, "compress x.npy -o a.dcz --nonfinite replace=0 --coeff f16 --offset 1e9");
  EXPECT_EQ(r.status, 3) << describe(r);
  EXPECT_EQ(r.err.find("--nonfinite replacement"), std::string::npos) << r.err;
}

TEST(NonFinite, AReplacementBeyondF32IsRefusedNamingItsLargestExactly) {
  // "+-3.40282e+38" was below 3.4028234e38, which fits.
  temp_dir dir;
  make_input(dir, dtype::f32);
  auto r = cli(dir, "compress x.npy -o a.dcz --nonfinite replace=3.4028235e38");
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("does not fit f32 (whose finite values lie within "
                       "+-3.4028234663852886e+38)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(cli(dir, "compress x.npy -o a.dcz --nonfinite replace=3.4028234e38 -q").status, 0);
}

TEST(NonFinite, F16InputReplacesWithAnF16ValueAndRefusesOneBeyondIt) {
  temp_dir dir;
  const auto at = make_input(dir, dtype::f16);
  auto r = cli(dir, "compress x.npy -o a.dcz --nonfinite replace=70000");
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("does not fit f16 (whose finite values lie within +-65504)"), std::string::npos)
      << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});
  r = cli(dir, "compress x.npy -o a.dcz --chop 8 --nonfinite replace=-1.5 --json -q");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(test::parse_json(r.out).at("nonfinite_replaced"), 3);
  ASSERT_EQ(cli(dir, "decompress a.dcz -o y.npy -q").status, 0);
  const auto x = test::load_npy(dir.file("x.npy"));
  const auto y = test::load_npy(dir.file("y.npy"));
  EXPECT_EQ(y.header.type.native_descr(), "<f2");
  ASSERT_EQ(x.values.size(), y.values.size());
  for (std::size_t i = 0; i < x.values.size(); ++i) {
    const bool replaced = std::find(at.begin(), at.end(), i) != at.end();
    ASSERT_EQ(std::isfinite(x.values[i]), !replaced) << i;
    // f16 keeps 11 bits: half an ulp of values below 8 is 2^-9
    EXPECT_NEAR(y.values[i], replaced ? -1.5 : x.values[i], 0.004) << "value " << i;
  }
}

}  // namespace
}  // namespace dctchop
