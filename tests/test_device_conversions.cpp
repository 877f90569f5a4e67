// The device paths of the per-value conversions (scalar.hpp's float_to_half_on_device and
// round_clamp_to_on_device, cuda_grid.hpp's convert_out4_on_device), run on the host with the
// PTX instructions they take emulated as the ISA defines them (ptx_emulation.hpp), against
// the host paths that the CPU backend runs, on every value where the two could part: the
// ties, the ends of the range and past them, NaN, infinities, -0, huge and tiny values. The
// GPU tests (CudaEdges) check the same on a GPU, where the instructions are the hardware's.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda_grid.hpp"
#include "dctchop/detail/block.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "ptx_emulation.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using test::bits_text;
using test::edge_values;
using test::emulated_ptx;

/** round_clamp_to_on_device with the emulated instructions gives round_clamp_to's integer
 *  (the host's, the CPU backend's) for every edge value, Out's range as [lo, hi]. */
template <typename Out, typename Real>
void expect_round_clamp_agrees() {
  const Real lo = static_cast<Real>(std::numeric_limits<Out>::min());
  const Real hi = static_cast<Real>(std::numeric_limits<Out>::max());
  for (const Real v : edge_values<Real>(lo, hi)) {
    const Out want = detail::round_clamp_to<Out>(v, lo, hi);
    const Out got = detail::round_clamp_to_on_device<emulated_ptx, Out>(v, lo, hi);
    ASSERT_EQ(got, want) << "value " << bits_text(v) << ", " << sizeof(Out) << "-byte "
                         << (std::is_signed_v<Out> ? "signed" : "unsigned") << " output";
  }
}

TEST(DevicePaths, RoundClampToGivesTheHostsIntegerForEveryOutputTheDeviceDecodes) {
  // Sums in float for the 8- and 16-bit outputs, in double for the 32-bit ones (i32, u32).
  expect_round_clamp_agrees<std::uint8_t, float>();
  expect_round_clamp_agrees<std::int8_t, float>();
  expect_round_clamp_agrees<std::uint16_t, float>();
  expect_round_clamp_agrees<std::int16_t, float>();
  expect_round_clamp_agrees<std::int32_t, double>();
  expect_round_clamp_agrees<std::uint32_t, double>();
  // The cases that set the two apart, by name: a NaN gives the low end; ties go to even.
  EXPECT_EQ((detail::round_clamp_to_on_device<emulated_ptx, std::int8_t>(NAN, -128.0f, 127.0f)),
            -128);
  EXPECT_EQ((detail::round_clamp_to_on_device<emulated_ptx, std::uint8_t>(-NAN, 0.0f, 255.0f)), 0);
  EXPECT_EQ((detail::round_clamp_to_on_device<emulated_ptx, std::uint8_t>(2.5f, 0.0f, 255.0f)), 2);
  EXPECT_EQ((detail::round_clamp_to_on_device<emulated_ptx, std::uint8_t>(254.5f, 0.0f, 255.0f)),
            254);
  EXPECT_EQ((detail::round_clamp_to_on_device<emulated_ptx, std::uint32_t>(
                4294967295.5, 0.0, 4294967295.0)),
            4294967295u);
}

/** convert_out4_on_device's four bytes, with the emulated instructions, are convert_out's
 *  four (the host's), each in its place, for u8 or i8 (Out) at the given offsets. */
template <typename Out>
void expect_four_bytes_agree(std::initializer_list<float> offsets) {
  const std::vector<float> edges = edge_values<float>(-300.0, 300.0, 1u << 14);
  std::mt19937 rng(std::is_signed_v<Out> ? 8 : 9);
  std::uniform_int_distribution<std::size_t> pick(0, edges.size() - 1);
  for (const float offset : offsets) {
    const auto check = [&](const float (&v)[4]) {
      Out got[4], want[4];
      detail::convert_out4_on_device<emulated_ptx>(v, offset, got);
      for (int j = 0; j < 4; ++j) want[j] = detail::convert_out<Out>(v[j], offset);
      for (int j = 0; j < 4; ++j) {
        ASSERT_EQ(+got[j], +want[j]) << "byte " << j << " of " << bits_text(v[0]) << ", "
                                     << bits_text(v[1]) << ", " << bits_text(v[2]) << ", "
                                     << bits_text(v[3]) << " at offset " << offset;
      }
    };
    // each edge value in each place, beside three others of distinct bytes
    for (const float e : edges) {
      for (int at = 0; at < 4; ++at) {
        float v[4] = {10.0f - offset, 20.0f - offset, 30.0f - offset, 40.0f - offset};
        v[at] = e;
        check(v);
        if (::testing::Test::HasFatalFailure()) return;  // (the first difference says enough)
      }
    }
    for (int i = 0; i < 200000; ++i) {
      const float v[4] = {edges[pick(rng)], edges[pick(rng)], edges[pick(rng)], edges[pick(rng)]};
      check(v);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(DevicePaths, FourBytesConvertedAndPackedTogetherAreTheFourConvertedAlone) {
  // u8's offset is 128, i8's 0 (taken plus 0, as the decode does, so -0 as +0)
  expect_four_bytes_agree<std::uint8_t>({128.0f, 0.0f, 0.5f});
  expect_four_bytes_agree<std::int8_t>({0.0f, 128.0f, -0.5f});
  // the order in memory: the first value in the lowest address
  const float v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  std::uint8_t b[4];
  detail::convert_out4_on_device<emulated_ptx>(v, 0.0f, b);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 2);
  EXPECT_EQ(b[2], 3);
  EXPECT_EQ(b[3], 4);
  const float w[4] = {-1.0f, NAN, 300.0f, -300.0f};
  std::int8_t s[4];
  detail::convert_out4_on_device<emulated_ptx>(w, 0.0f, s);
  EXPECT_EQ(s[0], -1);
  EXPECT_EQ(s[1], -128) << "NaN gives i8's low end, as on the CPU (cvt.rni alone gives 0)";
  EXPECT_EQ(s[2], 127);
  EXPECT_EQ(s[3], -128);
}

TEST(DevicePaths, TheHalfConversionIsTheHostsOnEdgesAndSweepsAndANanKeepsItsPayload) {
  std::vector<float> v = edge_values<float>(-70000.0, 70000.0);
  // f16's own edges: its largest finite, the tie to infinity, its smallest normal and
  // subnormal, the tie below the smallest subnormal
  for (const float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 6.103515625e-05f,
                        5.9604644775390625e-08f, 2.98023223876953125e-08f, 2.9802326e-08f}) {
    v.push_back(f);
    v.push_back(-f);
    v.push_back(std::nextafter(f, 0.0f));
    v.push_back(std::nextafter(f, 1e9f));
  }
  for (const float f : v) {
    ASSERT_EQ(detail::float_to_half_on_device<emulated_ptx>(f), detail::float_to_half(f))
        << bits_text(f);
  }
  // a NaN keeps its payload's top bits on the device too (the bit arithmetic's path)
  EXPECT_EQ(detail::float_to_half_on_device<emulated_ptx>(detail::bits_float(0x7fc12345u)),
            detail::float_to_half_bits(detail::bits_float(0x7fc12345u)));
}

TEST(DevicePaths, WideLoadsAtAddressesTheDeviceCannotTakeAreRefusedOnTheHost) {
  // load_run's 8-byte load of four f16 (chop 4): the device's faults at an address that is
  // no multiple of 8; the host's run of the same path says so instead of reading bytes.
  alignas(16) std::byte buf[48] = {};
  float got[4];
  detail::load_run<4, detail::f16_coeffs>(buf, 0, got);
  detail::load_run<4, detail::f16_coeffs>(buf + 8, 0, got);
  test::expect_error([&] { detail::load_run<4, detail::f16_coeffs>(buf + 2, 0, got); },
                     errc::internal);
  // 16 bytes of f32
  test::expect_error([&] { detail::load_run<4, detail::f32_coeffs>(buf + 4, 0, got); },
                     errc::internal);
  detail::load_run<3, detail::f16_coeffs>(buf + 2, 0, got);  // 6 bytes: element by element
}

}  // namespace
