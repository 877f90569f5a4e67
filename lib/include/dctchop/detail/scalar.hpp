/** @file detail/scalar.hpp
 *  Per-value arithmetic shared by every backend: f16 and bf16 conversions with round to
 *  nearest even, rounding and clamping to an integer dtype. Written as host-and-device
 *  functions so that the CUDA backend compiles the very same code the CPU tests cover.
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__CUDACC__)
#define DCTCHOP_HD __host__ __device__ __forceinline__
#else
#define DCTCHOP_HD inline
#endif

namespace dctchop::detail {

DCTCHOP_HD std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
DCTCHOP_HD float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/** float -> IEEE binary16, round to nearest even; overflow gives +-inf, NaN stays NaN. */
DCTCHOP_HD std::uint16_t float_to_half(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint32_t sign = x & 0x80000000u;
  x ^= sign;
  std::uint32_t o;
  if (x >= 0x47800000u) {                // |f| >= 65536, inf or NaN
    o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < 0x38800000u) {          // |f| < 2^-14: subnormal half or zero
    // Adding 0.5 aligns the half's subnormal ulp with the float's last mantissa bit, so the
    // FPU does the round to nearest even for us.
    const float magic = bits_float(126u << 23);
    o = float_bits(bits_float(x) + magic) - float_bits(magic);
  } else {
    const std::uint32_t mant_odd = (x >> 13) & 1u;
    x += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu;  // rebias, round half up...
    x += mant_odd;                                               // ...then to even
    o = x >> 13;
  }
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

/** IEEE binary16 -> float (exact). */
DCTCHOP_HD float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t o = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exp = o & 0x0f800000u;
  o += static_cast<std::uint32_t>(127 - 15) << 23;
  if (exp == 0x0f800000u) {
    o += static_cast<std::uint32_t>(128 - 16) << 23;  // inf or NaN
  } else if (exp == 0) {
    o += 1u << 23;  // subnormal: renormalise through the FPU
    o = float_bits(bits_float(o) - bits_float(113u << 23));
  }
  return bits_float(o | sign);
}

/** True when a binary16 bit pattern is inf or NaN. */
DCTCHOP_HD bool half_is_nonfinite(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

/** float -> bfloat16, round to nearest even; NaN stays a quiet NaN. */
DCTCHOP_HD std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

/** bfloat16 -> float (exact). */
DCTCHOP_HD float bf16_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

DCTCHOP_HD bool bf16_is_nonfinite(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u; }

/** Round to nearest, ties to even, then clamp into [lo, hi]. NaN maps to 0. */
template <typename Real>
DCTCHOP_HD Real round_clamp(Real v, Real lo, Real hi) {
  Real r = std::nearbyint(v);
  // Written so that NaN compares false everywhere and ends as 0.
  if (!(r >= lo)) r = (r < lo) ? lo : Real(0);
  if (r > hi) r = hi;
  return r;
}

}  // namespace dctchop::detail
