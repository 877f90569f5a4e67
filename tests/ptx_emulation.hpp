/** @file ptx_emulation.hpp
 *  The device instructions that the CUDA paths of detail/scalar.hpp and cuda_grid.hpp take
 *  (an Ops type, as scalar.hpp's device_conversions), emulated on the host as the PTX ISA
 *  defines them, and written apart from the codec's own arithmetic: roundings by the C
 *  library (nearbyint, in the default round-to-nearest-even mode) and conversions to f16 by
 *  the compiler's _Float16. The tests run the device paths with it against the host paths
 *  that the CPU backend runs, so that the logic around the instructions (NaN, saturation,
 *  the order of packed bytes) is checked where no GPU is; whether a GPU's instructions do
 *  what the ISA says is for the GPU tests.
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

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

}  // namespace dctchop::test
