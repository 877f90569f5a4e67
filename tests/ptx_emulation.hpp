/** @file ptx_emulation.hpp
 *  The device instructions that the CUDA paths of detail/scalar.hpp and cuda_grid.hpp take
 *  (an Ops type, as scalar.hpp's device_conversions), emulated on the host as the PTX ISA
 *  defines them, and written apart from the codec's own arithmetic: roundings by the C
 *  library (nearbyint, in the default round-to-nearest-even mode) and conversions to f16 by
 *  the compiler's _Float16. The tests run the device paths with it against the host paths
 *  that the CPU backend runs, so that the logic around the instructions (NaN, saturation,
 *  the order of packed bytes) is checked where no GPU is. Whether a GPU's instructions do
 *  what this emulation does is for the GPU test CudaConversions (tests/gpu), which runs them
 *  on the same kinds of input (edge_values, below).
 */
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace dctchop::test {

struct emulated_ptx {
  /** cvt.rni.s32.f32 and .f64: round to nearest, ties to even; "the result is clamped to
   *  the destination range by default" for float-to-integer conversions; NaN gives 0. */
  template <typename Real>
  static std::int32_t rni_s32(Real x) {
    return static_cast<std::int32_t>(rni(x, -2147483648.0, 2147483647.0));
  }
  /** cvt.rni.u32.f32 and .f64, the same to [0, 2^32 - 1]. */
  template <typename Real>
  static std::uint32_t rni_u32(Real x) {
    return static_cast<std::uint32_t>(rni(x, 0.0, 4294967295.0));
  }
  /** max.f32 / max.f64 and min: the other operand where one is NaN, quiet or signalling
   *  alike (C's fmax and fmin follow IEEE 754-2008's maxNum, which gives NaN for a
   *  signalling one). */
  template <typename Real>
  static Real max(Real a, Real b) {
    return std::isnan(a) ? b : (std::isnan(b) ? a : std::fmax(a, b));
  }
  template <typename Real>
  static Real min(Real a, Real b) {
    return std::isnan(a) ? b : (std::isnan(b) ? a : std::fmin(a, b));
  }
  /** cvt.rn.f16.f32: round to nearest even, overflow to infinity, subnormals kept. A NaN
   *  gives the canonical NaN (0x7fff): the payload is not kept, which is why the device
   *  path converts no NaN with it. */
  static std::uint16_t rn_f16(float f) {
    if (std::isnan(f)) return 0x7fff;
    const _Float16 h = static_cast<_Float16>(f);
    std::uint16_t bits;
    std::memcpy(&bits, &h, sizeof bits);
    return bits;
  }
  /** cvt.pack.sat.u8.s32.b32 d, a, b, c: a and b clamped to [0, 255]; d = c[15:0] in the
   *  upper half, a in byte 1, b in byte 0 (CUTLASS packs an array's four bytes in order with
   *  two of them: the last two first, as c of the other). */
  static std::uint32_t pack_sat_u8(std::int32_t a, std::int32_t b, std::uint32_t c) {
    return c << 16 | sat(a, 0, 255) << 8 | sat(b, 0, 255);
  }
  /** cvt.pack.sat.s8.s32.b32: the same, clamped to [-128, 127], each byte two's complement. */
  static std::uint32_t pack_sat_s8(std::int32_t a, std::int32_t b, std::uint32_t c) {
    return c << 16 | sat(a, -128, 127) << 8 | sat(b, -128, 127);
  }

 private:
  template <typename Real>
  static double rni(Real x, double lo, double hi) {
    if (std::isnan(x)) return 0.0;
    const double r = std::nearbyint(static_cast<double>(x));  // (float to double is exact)
    return r < lo ? lo : (r > hi ? hi : r);
  }
  static std::uint32_t sat(std::int32_t v, std::int32_t lo, std::int32_t hi) {
    return static_cast<std::uint32_t>(v < lo ? lo : (v > hi ? hi : v)) & 0xffu;
  }
};

/** A value and its bits, for failure messages. */
template <typename Real>
std::string bits_text(Real v) {
  std::ostringstream s;
  if constexpr (sizeof(Real) == 4) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    s << v << " (0x" << std::hex << bits << ")";
  } else {
    std::uint64_t u;
    std::memcpy(&u, &v, 8);
    s << v << " (0x" << std::hex << u << ")";
  }
  return s.str();
}

/** Real values where a conversion to an integer range [lo, hi] could go wrong: every integer
 *  from lo - 3 to hi + 3 where the range is 16 bits or less (else the ends' neighbourhoods
 *  and random integers between), and about each the halves (ties to even), the Reals next
 *  to them and to the integer; the type's ends, infinities, NaNs of both signs and several
 *  payloads, +-0, subnormals; and a sweep of `sweep` of the type's bit patterns. */
template <typename Real>
std::vector<Real> edge_values(double lo, double hi, std::size_t sweep = std::size_t(1) << 20) {
  using bits_t = std::conditional_t<sizeof(Real) == 4, std::uint32_t, std::uint64_t>;
  const auto from_bits = [](bits_t u) {
    Real v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  };
  std::vector<double> centres;
  if (hi - lo <= 65536) {
    for (double n = lo - 3; n <= hi + 3; n += 1) centres.push_back(n);
  } else {
    std::mt19937_64 rng(41);
    for (double d = -3; d <= 3; d += 1) {
      centres.push_back(lo + d);
      centres.push_back(hi + d);
      centres.push_back(d);
    }
    for (int i = 0; i < 20000; ++i) {
      centres.push_back(std::floor(lo + (hi - lo) * std::uniform_real_distribution<double>()(rng)));
    }
  }
  std::vector<Real> v;
  const Real inf = std::numeric_limits<Real>::infinity();
  for (const double c : centres) {
    for (const double d : {-0.5, -0.25, 0.0, 0.25, 0.5}) {
      const Real x = static_cast<Real>(c + d);
      v.push_back(x);
      v.push_back(std::nextafter(x, inf));
      v.push_back(std::nextafter(x, -inf));
    }
  }
  for (const Real x : {Real(0), -Real(0), inf, -inf, std::numeric_limits<Real>::max(),
                       std::numeric_limits<Real>::lowest(), std::numeric_limits<Real>::min(),
                       -std::numeric_limits<Real>::min(),
                       std::numeric_limits<Real>::denorm_min(),
                       -std::numeric_limits<Real>::denorm_min(), Real(1e30), Real(-1e30)}) {
    v.push_back(x);
  }
  constexpr bits_t sign = bits_t(1) << (8 * sizeof(Real) - 1);
  const bits_t exp_all = sizeof(Real) == 4 ? bits_t(0x7f800000u) : bits_t(0x7ff0000000000000ull);
  const bits_t quiet = (exp_all >> 1) & ~exp_all;  // the mantissa's top bit
  for (const bits_t payload : {bits_t(0), bits_t(1), bits_t(0x12345)}) {
    v.push_back(from_bits(exp_all | quiet | payload));
    v.push_back(from_bits(sign | exp_all | quiet | payload));
    if (payload != 0) v.push_back(from_bits(exp_all | payload));  // signalling
  }
  // a sweep of the bit patterns, in odd steps across all of them: both signs, and at 2^20
  // patterns every exponent of float and many mantissas
  const bits_t step = static_cast<bits_t>((static_cast<bits_t>(0) - 1) / sweep) | 1;
  for (bits_t u = 0, k = 0; k < sweep; ++k, u += step) v.push_back(from_bits(u));
  return v;
}

}  // namespace dctchop::test
