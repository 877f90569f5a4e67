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

/** The device's own instructions that its paths below take (float_to_half, round_clamp_to,
 *  cuda_grid.hpp's convert_out4), as the PTX ISA defines them: on a GPU each is one
 *  instruction (device_conversions). Those paths are templates of an Ops type, so that the
 *  host tests run them too, with an emulation written from the ISA
 *  (tests/ptx_emulation.hpp): the logic around the instructions (NaN, saturation, the order
 *  of packed bytes) is then covered where no GPU is. An Ops type has, static:
 *  - rni_s32(x), rni_u32(x), x float or double: cvt.rni.{s32,u32}, round to nearest even,
 *    clamped to the integer's range, NaN to 0;
 *  - max(a, b), min(a, b), float or double: the number where one operand is NaN;
 *  - rn_f16(float): cvt.rn.f16.f32, round to nearest even, overflow to inf, subnormals kept;
 *  - pack_sat_u8(a, b, c), pack_sat_s8(a, b, c): cvt.pack.sat.{u8,s8}.s32.b32, a and b
 *    clamped to a byte's range, c's low half above them: c << 16 | a << 8 | b. */
#if defined(__CUDA_ARCH__)
struct device_conversions {
  static __device__ __forceinline__ int rni_s32(float x) { return __float2int_rn(x); }
  static __device__ __forceinline__ unsigned rni_u32(float x) { return __float2uint_rn(x); }
  static __device__ __forceinline__ int rni_s32(double x) { return __double2int_rn(x); }
  static __device__ __forceinline__ unsigned rni_u32(double x) { return __double2uint_rn(x); }
  static __device__ __forceinline__ float max(float a, float b) { return fmaxf(a, b); }
  static __device__ __forceinline__ float min(float a, float b) { return fminf(a, b); }
  static __device__ __forceinline__ double max(double a, double b) { return fmax(a, b); }
  static __device__ __forceinline__ double min(double a, double b) { return fmin(a, b); }
  static __device__ __forceinline__ std::uint16_t rn_f16(float f) {
    std::uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
#if __CUDA_ARCH__ >= 720
  static __device__ __forceinline__ unsigned pack_sat_u8(int a, int b, unsigned c) {
    unsigned d;
    asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
  }
  static __device__ __forceinline__ unsigned pack_sat_s8(int a, int b, unsigned c) {
    unsigned d;
    asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
  }
#endif
};
#endif

/** float -> IEEE binary16, round to nearest even; overflow gives +-inf, NaN stays NaN (quiet,
 *  the payload's top bits kept: what F16C's vcvtps2ph gives, so the AVX2 kernels store the
 *  same bits). Branch-free (every path computed, one selected) so that loops over it
 *  vectorise. The host's conversion, and the device's for NaN. */
DCTCHOP_HD std::uint16_t float_to_half_bits(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint32_t sign = x & 0x80000000u;
  x ^= sign;
  // |f| >= 65536, inf or NaN
  const std::uint32_t o_big = x > 0x7f800000u ? 0x7e00u | ((x >> 13) & 0x3ffu) : 0x7c00u;
  // |f| < 2^-14: adding 0.5 aligns the half's subnormal ulp with the float's last mantissa
  // bit, so the FPU does the round to nearest even.
  const float magic = bits_float(126u << 23);
  const std::uint32_t o_sub = float_bits(bits_float(x) + magic) - float_bits(magic);
  // normal: rebias the exponent, round half up, then to even
  const std::uint32_t o_norm =
      (x + (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u)) >> 13;
  const std::uint32_t o = x >= 0x47800000u ? o_big : (x < 0x38800000u ? o_sub : o_norm);
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

/** float_to_half as the device computes it: the hardware's conversion (round to nearest
 *  even, overflow to inf, subnormal results kept: one instruction where the bit arithmetic
 *  takes about fifteen, as many as the rest of an encode's work on a coefficient), except
 *  for NaN, whose payload it does not keep. */
template <typename Ops>
DCTCHOP_HD std::uint16_t float_to_half_on_device(float f) {
  if (f == f) return Ops::rn_f16(f);
  return float_to_half_bits(f);
}

/** float -> IEEE binary16, round to nearest even; overflow gives +-inf, NaN stays NaN with
 *  its payload's top bits (float_to_half_bits; on the device float_to_half_on_device, the
 *  same bits). */
DCTCHOP_HD std::uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return float_to_half_on_device<device_conversions>(f);
#else
  return float_to_half_bits(f);
#endif
}

/** IEEE binary16 -> float (exact). Branch-free. On the device, the hardware's conversion
 *  (one instruction, where the bit arithmetic takes about fourteen: a third of what the u8
 *  decode ran at K = 4 in an H200 profile); the same value for every finite and infinite
 *  input, NaN staying NaN. */
DCTCHOP_HD float half_to_float(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t o = (static_cast<std::uint32_t>(h & 0x7fffu) << 13) +
                          (static_cast<std::uint32_t>(127 - 15) << 23);
  const std::uint32_t exp = static_cast<std::uint32_t>(h & 0x7c00u);
  const std::uint32_t o_inf = o + (static_cast<std::uint32_t>(128 - 16) << 23);
  // subnormal: renormalise through the FPU
  const std::uint32_t o_sub = float_bits(bits_float(o + (1u << 23)) - bits_float(113u << 23));
  const std::uint32_t r = exp == 0x7c00u ? o_inf : (exp == 0 ? o_sub : o);
  return bits_float(r | sign);
#endif
}

/** The two binary16 values of a 32-bit word, the low half first (the one at the lower address
 *  of a little-endian array), as floats (exact). On the device, a register holding both halves
 *  converts each with one instruction, as CUDA's own __low2float and __high2float do. */
DCTCHOP_HD void halves_to_float(std::uint32_t w, float& lo, float& hi) {
#if defined(__CUDA_ARCH__)
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "r"(w));
#else
  lo = half_to_float(static_cast<std::uint16_t>(w & 0xffffu));
  hi = half_to_float(static_cast<std::uint16_t>(w >> 16));
#endif
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

/** `v` as a float to be rounded on to binary16 or bfloat16 (float_to_half, float_to_bf16): a
 *  float as it is; a double rounded to odd (toward zero, and the last bit set where any were
 *  lost), so that rounding that float to nearest gives what rounding the double once would.
 *  (Rounded to nearest float first, a double just past a half-way point of the narrower type
 *  can land on it, and then go to even: one unit below the nearest. f64, i32 and u32 data
 *  are transformed in double.) */
DCTCHOP_HD float narrow_for_rounding(float v) { return v; }
DCTCHOP_HD float narrow_for_rounding(double v) {
  const float f = static_cast<float>(v);
  const double back = static_cast<double>(f);
  if (back == v || v != v) return f;
  std::uint32_t u = float_bits(f);
  if ((back < 0 ? -back : back) > (v < 0 ? -v : v)) --u;  // toward zero: sign and magnitude
  return bits_float(u | 1u);
}

/** One IEEE binary16 value as it lies in memory: the element type of f16 datasets in the
 *  kernels. Reads as float (exact, implicitly: it takes part in arithmetic as a float, as the
 *  codec computes f16 data in binary32); made from a float explicitly, rounded to nearest
 *  even. */
struct half_value {
  std::uint16_t bits;
  half_value() = default;
  DCTCHOP_HD explicit half_value(float f) : bits(float_to_half(f)) {}
  DCTCHOP_HD operator float() const { return half_to_float(bits); }
};
static_assert(sizeof(half_value) == 2, "half_value is read straight from f16 arrays");

/** The largest finite binary16 value: decoded f16 data is clamped to +-this (ARCHIVE.md, "The
 *  codec": the original dtype's range), where a plain conversion would give +-inf. */
inline constexpr float k_half_max = 65504.0f;

/** Clamp into [lo, hi], then round to nearest, ties to even. lo and hi must lie within +-2^22
 *  (float) or +-2^51 (double): adding and subtracting 1.5 * 2^mantissa makes the FPU round in
 *  its default mode, without a libm call, so loops over it vectorise. NaN input is not
 *  expected (stored coefficients are finite); it maps to a value within [lo, hi]. */
template <typename Real>
DCTCHOP_HD Real round_clamp(Real v, Real lo, Real hi) {
  Real r = v < lo ? lo : v;
  r = r > hi ? hi : r;
  const Real magic = sizeof(Real) == 4 ? Real(12582912.0) : Real(6755399441055744.0);
  r = (r + magic) - magic;
  return r == r ? r : lo;
}

/** round_clamp_to as the device computes it: the value clamped with min/max (two
 *  instructions where the compares and selects take five) and converted with the hardware's
 *  round-to-nearest-even conversion (one instruction where the 1.5 * 2^mantissa addition and
 *  the truncating conversion take three). The same integer, since the clamped value lies
 *  within Out's range; a NaN gives lo (max takes the number). */
template <typename Ops, typename Out, typename Real>
DCTCHOP_HD Out round_clamp_to_on_device(Real v, Real lo, Real hi) {
  static_assert(sizeof(Out) <= 4, "the device conversions give 32-bit integers");
  const Real r = Ops::min(Ops::max(v, lo), hi);
  if constexpr (std::numeric_limits<Out>::is_signed) {
    return static_cast<Out>(Ops::rni_s32(r));
  } else {
    return static_cast<Out>(Ops::rni_u32(r));
  }
}

/** round_clamp(v, lo, hi) as an integer type Out whose range is [lo, hi] (what the device
 *  decodes with, through round_clamp_to_on_device; no device code calls round_clamp). */
template <typename Out, typename Real>
DCTCHOP_HD Out round_clamp_to(Real v, Real lo, Real hi) {
#if defined(__CUDA_ARCH__)
  return round_clamp_to_on_device<device_conversions, Out>(v, lo, hi);
#else
  return static_cast<Out>(round_clamp(v, lo, hi));
#endif
}

}  // namespace dctchop::detail
