// Internal: one SSIM window's formula from its sums over 7 x 7 values, as host-and-device
// functions. The CPU's sliding sums (metric_kernels.cpp) and the CUDA backend's measure
// (cuda_measure.cu, quality_grid.hpp) both call them, so that where the two give a window the
// same sums (exact integer sums: 8- and 16-bit integer data) they give it the same SSIM, bit
// for bit.
#pragma once

#include <cstdint>

#include "dctchop/detail/scalar.hpp"  // DCTCHOP_HD

namespace dctchop::detail {

/** scikit-image's default SSIM window: 7 x 7. */
constexpr int ssim_window = 7;

// Internal linkage: metric_kernels.cpp is compiled once per instruction set, and a copy
// compiled for AVX2 must not stand in for the baseline one where the linker merges inline
// functions of the same name (see cpu_kernels.cpp).
namespace {

constexpr double ssim_values = ssim_window * ssim_window;            // values per window
constexpr double ssim_cov_norm = ssim_values / (ssim_values - 1.0);  // use_sample_covariance=True

/** scikit-image's formula on sums of doubles: means, then variances and covariance with the
 *  sample normalisation 49/48. The sums are of values minus `shift` (one value of the plane,
 *  so every shifted value lies within the data range R of zero): variances and covariance do
 *  not change under a shift, and their E[x^2] - E[x]^2 form then loses nothing to
 *  cancellation when the data sit far from zero (values near 1e5 that vary by 0.5 lost four
 *  digits of the SSIM to it, and scikit-image loses them too). The means get the shift back
 *  for the luminance term. `sq` is the sum of x^2 + y^2: the formula needs the two variances
 *  only as their sum. */
struct float_window {
  double c1, c2, shift;
  DCTCHOP_HD float_window(double range, double shift_by)
      : c1((0.01 * range) * (0.01 * range)), c2((0.03 * range) * (0.03 * range)),
        shift(shift_by) {}
  DCTCHOP_HD double window(double sx, double sy, double sq, double sxy) const {
    // Multiplying by 1/49 instead of dividing: five divisions per window were the
    // bottleneck; the results differ from division in the last bit only.
    constexpr double inv = 1.0 / ssim_values;
    const double dx = sx * inv, dy = sy * inv;  // shifted means
    const double vq = ssim_cov_norm * (sq * inv - (dx * dx + dy * dy));  // vx + vy
    const double vxy = ssim_cov_norm * (sxy * inv - dx * dy);
    const double ux = dx + shift, uy = dy + shift;
    const double uxy = ux * uy, uq = ux * ux + uy * uy;
    const double n1 = 2 * uxy + c1, n2 = 2 * vxy + c2, d1 = uq + c1, d2 = vq + c2;
    // Data of a range below about 1e-77 (f64) has terms whose products (R^4) fall below the
    // smallest double: 0/0 gave a NaN SSIM. There the two ratios, each of terms near R^2;
    // elsewhere the products, as scikit-image computes them (the two forms differ in the
    // last bit).
    const double d = d1 * d2;
    if (d < 0x1p-960) return (n1 / d1) * (n2 / d2);
    return (n1 * n2) / d;
  }
};

/** The same formula for u8 planes, in exact integer arithmetic. Over a 7x7 window the sums
 *  Sx, Sy stay below 2^14 (16 bits hold them: twice as many per vector) and Sxx + Syy, Sxy
 *  below 2^23, and the statistics the formula needs, scaled by 49^2 or 49*48, are integers
 *  below 2^29:
 *    2 Sx Sy,  Sx^2 + Sy^2,  2 (49 Sxy - Sx Sy),  49 (Sxx + Syy) - Sx^2 - Sy^2.
 *  So the means, variances and covariance are exact, and the one formula per window takes
 *  four roundings in double (scikit-image's float64 arithmetic takes about twenty):
 *    SSIM = (2 Sx Sy + 49^2 C1) (2 (49 Sxy - Sx Sy) + 49*48 C2)
 *         / ((Sx^2 + Sy^2 + 49^2 C1) (49 (Sxx + Syy) - Sx^2 - Sy^2 + 49*48 C2)). */
struct u8_window {
  double c1, c2;  // C1 * 49^2, C2 * 49 * 48
  DCTCHOP_HD explicit u8_window(double range)
      : c1((0.01 * range) * (0.01 * range) * (ssim_values * ssim_values)),
        c2((0.03 * range) * (0.03 * range) * (ssim_values * (ssim_values - 1))) {}
  DCTCHOP_HD double window(std::int16_t bx, std::int16_t by, std::int32_t bq,
                           std::int32_t bxy) const {
    constexpr std::int32_t np = ssim_window * ssim_window;
    const std::int32_t sx = bx, sy = by;
    const std::int32_t sxy = sx * sy, sq = sx * sx + sy * sy;
    const std::int32_t cov = np * bxy - sxy, var = np * bq - sq;
    return ((double(2 * sxy) + c1) * (double(2 * cov) + c2)) /
           ((double(sq) + c1) * (double(var) + c2));
  }
};

}  // namespace

}  // namespace dctchop::detail
