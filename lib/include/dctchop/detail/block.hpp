/** @file detail/block.hpp
 *  The codec's per-block arithmetic as host-and-device functions: the forward transform of one
 *  B x B block to its K x K kept coefficients, the inverse, and the conversions to and from the
 *  stored coefficient types. The CUDA kernels run exactly this code, one block per thread;
 *  the CPU kernels (lib/src/cpu_kernels.cpp) run the same sums in the same order over whole
 *  strips, so that both give bit-identical coefficients when neither contracts a multiply and
 *  an add into one FMA (the CUDA backend is compiled with -fmad=false for that reason). The
 *  CPU tests check these functions against the CPU backend and against a direct DCT.
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "dctchop/detail/scalar.hpp"

namespace dctchop::detail {

/** Coefficient storage codes, the values of dctchop::coeff_type (usable in device code). */
enum class coeff_code : int { f16 = 0, bf16 = 1, f32 = 2, i16 = 3 };

/** C = (T X T^t) restricted to u, v < k. `t` is the B x B DCT matrix (row u, column x), `x`
 *  the block (row-major, offset already subtracted, edges already replicated), `c` the k x k
 *  result (row-major). Each sum pairs the values at r and b-1-r, since T[u][b-1-r] =
 *  (-1)^u T[u][r]: T[u][r] times their sum for even u, times their difference for odd u,
 *  over r < b/2 in ascending order from 0 (a middle value, odd b, last); half the
 *  multiplications and additions of the sum over every r. The CPU kernels and the line
 *  kernel sum in the same order. Rows and columns of even and odd index go in pairs, so
 *  that which of the two a sum takes is known at compile time where b is. */
template <int BT = 0, typename Real>
DCTCHOP_HD void forward_block(const Real* t, int b, int k, const Real* x, Real* c) {
  if constexpr (BT > 0) b = BT;
  constexpr int bmax = BT > 0 ? BT : 32;
  const int h = b / 2;
  Real sum[bmax / 2 * bmax], dif[bmax / 2 * bmax];  // x[r] + x[b-1-r], x[r] - x[b-1-r]
  for (int r = 0; r < h; ++r) {
    for (int col = 0; col < b; ++col) {
      const Real p = x[r * b + col], q = x[(b - 1 - r) * b + col];
      sum[r * b + col] = p + q;
      dif[r * b + col] = p - q;
    }
  }
  Real y[bmax];                     // row u of T X (b <= 32)
  Real ys[bmax / 2], yd[bmax / 2];  // its pairs, summed and differenced
  const auto row = [&](int u, const Real* w) {
    for (int col = 0; col < b; ++col) {
      Real acc = 0;
      for (int r = 0; r < h; ++r) acc += t[u * b + r] * w[r * b + col];
      if (b % 2 != 0) acc += t[u * b + h] * x[h * b + col];
      y[col] = acc;
    }
    for (int col = 0; col < h; ++col) {
      ys[col] = y[col] + y[b - 1 - col];
      yd[col] = y[col] - y[b - 1 - col];
    }
    const auto coeff = [&](int v, const Real* z) {
      Real acc = 0;
      for (int col = 0; col < h; ++col) acc += t[v * b + col] * z[col];
      if (b % 2 != 0) acc += t[v * b + h] * y[h];
      c[u * k + v] = acc;
    };
    for (int v = 0; v < k; v += 2) {
      coeff(v, ys);
      if (v + 1 < k) coeff(v + 1, yd);
    }
  };
  for (int u = 0; u < k; u += 2) {
    row(u, sum);
    if (u + 1 < k) row(u + 1, dif);
  }
}

/** X' = T^t C T with C zero beyond k x k: `c` is k x k (row-major), `x` the b x b result. The
 *  horizontal sums come first, then the vertical ones, in the CPU kernels' order. The vertical
 *  sums of rows r and b-1-r share their products, since T[u][b-1-r] = (-1)^u T[u][r]: with
 *  e = sum over even u of T[u][r] y[u][col] and o = sum over odd u (each in ascending u, from
 *  its first product), row r is e + o and row b-1-r is e - o, half the multiplications and
 *  additions of two sums. (A middle row, odd b, is e + o.) A value may be -0 where its
 *  products all are; decode_block adds the offset plus 0, which makes it +0. */
template <int BT = 0, typename Real>
DCTCHOP_HD void inverse_block(const Real* t, int b, int k, const Real* c, Real* x) {
  if constexpr (BT > 0) b = BT;
  Real y[BT > 0 ? BT * BT : 32 * 32];  // y[u][col] = sum_v C[u][v] T[v][col], for u < k
  for (int u = 0; u < k; ++u) {
    for (int col = 0; col < b; ++col) {
      Real acc = c[u * k] * t[col];
      for (int v = 1; v < k; ++v) acc += c[u * k + v] * t[v * b + col];
      y[u * b + col] = acc;
    }
  }
  for (int r = 0; r < (b + 1) / 2; ++r) {
    const int r2 = b - 1 - r;
    for (int col = 0; col < b; ++col) {
      Real e = t[r] * y[col];
      for (int u = 2; u < k; u += 2) e += t[u * b + r] * y[u * b + col];
      Real o = 0;
      if (k > 1) {
        o = t[b + r] * y[b + col];
        for (int u = 3; u < k; u += 2) o += t[u * b + r] * y[u * b + col];
      }
      x[r * b + col] = k > 1 ? e + o : e;
      if (r2 != r) x[r2 * b + col] = k > 1 ? e - o : e;
    }
  }
}

/** Store v as element i of a coefficient array of type `code`; false when it does not fit
 *  (out of range, or not finite). i16 rounds to nearest, ties to even. */
template <typename Real>
DCTCHOP_HD bool store_coeff(Real v, coeff_code code, void* dst, std::uint64_t i) {
  switch (code) {
    case coeff_code::f32: {
      const float f = static_cast<float>(v);
      static_cast<float*>(dst)[i] = f;
      return (float_bits(f) & 0x7f800000u) != 0x7f800000u;
    }
    case coeff_code::f16: {
      const std::uint16_t h = float_to_half(narrow_for_rounding(v));
      static_cast<std::uint16_t*>(dst)[i] = h;
      return !half_is_nonfinite(h);
    }
    case coeff_code::bf16: {
      const std::uint16_t h = float_to_bf16(narrow_for_rounding(v));
      static_cast<std::uint16_t*>(dst)[i] = h;
      return !bf16_is_nonfinite(h);
    }
    case coeff_code::i16: {
      // Round to nearest, ties to even, like std::nearbyint: adding and subtracting
      // 1.5 * 2^mantissa does it for |v| < 2^22, and anything larger does not fit anyway.
      const Real magic = sizeof(Real) == 4 ? Real(12582912.0) : Real(6755399441055744.0);
      const bool small = v > Real(-4194304) && v < Real(4194304);  // false for NaN
      const Real r = small ? (v + magic) - magic : Real(0);
      const bool in_range = small && r >= Real(-32768) && r <= Real(32767);
      static_cast<std::int16_t*>(dst)[i] = static_cast<std::int16_t>(in_range ? r : Real(0));
      return in_range;
    }
  }
  return false;
}

/** The stored coefficient types as tags, for code that chooses the type once around a loop
 *  (with_coeff_type) instead of at every element (load_coeff). get<Real>(p, i) is element i
 *  of array p, as Real (exact); `size` is an element's bytes, and unpack<Real>(w, dst) writes
 *  the 4 / size elements that the 32-bit word w holds (as read from the array, the element at
 *  the lower address first) to dst, as get would. */
struct f32_coeffs {
  static constexpr int size = 4;
  template <typename Real>
  DCTCHOP_HD static void unpack(std::uint32_t w, Real* dst) {
    dst[0] = static_cast<Real>(bits_float(w));
  }
  template <typename Real>
  DCTCHOP_HD static Real get(const void* p, std::uint64_t i) {
    return static_cast<Real>(static_cast<const float*>(p)[i]);
  }
};
struct f16_coeffs {
  static constexpr int size = 2;
  template <typename Real>
  DCTCHOP_HD static void unpack(std::uint32_t w, Real* dst) {
    float lo, hi;
    halves_to_float(w, lo, hi);
    dst[0] = static_cast<Real>(lo);
    dst[1] = static_cast<Real>(hi);
  }
  template <typename Real>
  DCTCHOP_HD static Real get(const void* p, std::uint64_t i) {
    return static_cast<Real>(half_to_float(static_cast<const std::uint16_t*>(p)[i]));
  }
};
struct bf16_coeffs {
  static constexpr int size = 2;
  template <typename Real>
  DCTCHOP_HD static void unpack(std::uint32_t w, Real* dst) {
    dst[0] = static_cast<Real>(bf16_to_float(static_cast<std::uint16_t>(w & 0xffffu)));
    dst[1] = static_cast<Real>(bf16_to_float(static_cast<std::uint16_t>(w >> 16)));
  }
  template <typename Real>
  DCTCHOP_HD static Real get(const void* p, std::uint64_t i) {
    return static_cast<Real>(bf16_to_float(static_cast<const std::uint16_t*>(p)[i]));
  }
};
struct i16_coeffs {
  static constexpr int size = 2;
  template <typename Real>
  DCTCHOP_HD static void unpack(std::uint32_t w, Real* dst) {
    dst[0] = static_cast<Real>(static_cast<std::int16_t>(w & 0xffffu));
    dst[1] = static_cast<Real>(static_cast<std::int16_t>(w >> 16));
  }
  template <typename Real>
  DCTCHOP_HD static Real get(const void* p, std::uint64_t i) {
    return static_cast<Real>(static_cast<const std::int16_t*>(p)[i]);
  }
};

/** Calls fn with the tag of coefficient type `code` (an unknown code calls nothing, and so
 *  does i16 where I16 is false: for code that is never reached with i16 coefficients, which
 *  is then not compiled for them). */
template <bool I16 = true, typename Fn>
DCTCHOP_HD void with_coeff_type(coeff_code code, Fn&& fn) {
  switch (code) {
    case coeff_code::f32:
      fn(f32_coeffs{});
      return;
    case coeff_code::f16:
      fn(f16_coeffs{});
      return;
    case coeff_code::bf16:
      fn(bf16_coeffs{});
      return;
    case coeff_code::i16:
      if constexpr (I16) fn(i16_coeffs{});
      return;
  }
}

/** Element i of a coefficient array of type `code`, as Real (exact). */
template <typename Real>
DCTCHOP_HD Real load_coeff(const void* src, coeff_code code, std::uint64_t i) {
  Real v(0);
  with_coeff_type(code, [&](auto type) { v = decltype(type)::template get<Real>(src, i); });
  return v;
}

/** A decoded value: the offset added back, then rounded (ties to even) and clamped for integer
 *  outputs, and clamped to the finite range for f16 (rounded to nearest even), f32 and f64
 *  (f32 data at its largest, offset by its mean, decoded past it: +inf; a NaN stays NaN). */
template <typename Out, typename Real>
DCTCHOP_HD Out convert_out(Real v, Real offset) {
  if constexpr (std::is_same_v<Out, half_value>) {
    const float x = static_cast<float>(v + offset);
    return half_value(x < -k_half_max ? -k_half_max : (x > k_half_max ? k_half_max : x));
  } else if constexpr (std::numeric_limits<Out>::is_integer) {
    constexpr Real lo = static_cast<Real>(std::numeric_limits<Out>::min());
    constexpr Real hi = static_cast<Real>(std::numeric_limits<Out>::max());
    return round_clamp_to<Out>(v + offset, lo, hi);
  } else {
    constexpr Out top = std::numeric_limits<Out>::max();
    const Out x = static_cast<Out>(v + offset);
    return x < -top ? -top : (x > top ? top : x);
  }
}

/** Where one plane lies: element (r, c) is at data[r * stride_row + c * stride_col]. */
struct plane_geometry {
  std::uint64_t height, width;
  std::int64_t stride_row, stride_col;
};

/** Encode block (bi, bj) of a plane into its coefficient plane (rows of ceil(W/B)*K values):
 *  gather B x B values minus the offset, replicating the last row and column into the
 *  padding, transform, store. Returns false when a coefficient does not fit `code` (which a
 *  NaN or Inf input also causes). SC > 0: the plane's column stride is SC, known at compile
 *  time (the caller's promise), so that a block inside the plane is read at constant
 *  offsets from a row pointer (on a GPU, the offsets in the load instructions; the 64-bit
 *  address arithmetic a value was about a sixth of what the u8 RGB encode ran). */
template <typename In, typename Real, int BT = 0, int SC = 0>
DCTCHOP_HD bool encode_block(const Real* t, int b, int k, const In* plane, const plane_geometry& g,
                             std::uint64_t bi, std::uint64_t bj, Real offset, coeff_code code,
                             void* cplane) {
  if constexpr (BT > 0) b = BT;
  Real x[BT > 0 ? BT * BT : 32 * 32];
  Real c[BT > 0 ? BT * BT : 32 * 32];
  const auto ub = static_cast<std::uint64_t>(b);
  if (SC > 0 && (bi + 1) * ub <= g.height && (bj + 1) * ub <= g.width) {
    const In* p = plane + static_cast<std::int64_t>(bi * ub) * g.stride_row +
                  static_cast<std::int64_t>(bj * ub) * SC;
    for (int r = 0; r < b; ++r) {
      for (int col = 0; col < b; ++col) x[r * b + col] = static_cast<Real>(p[col * SC]) - offset;
      p += g.stride_row;
    }
  } else {
    for (int r = 0; r < b; ++r) {
      std::uint64_t row = bi * b + static_cast<std::uint64_t>(r);
      row = row < g.height ? row : g.height - 1;
      for (int col = 0; col < b; ++col) {
        std::uint64_t cc = bj * b + static_cast<std::uint64_t>(col);
        cc = cc < g.width ? cc : g.width - 1;
        x[r * b + col] = static_cast<Real>(plane[static_cast<std::int64_t>(row) * g.stride_row +
                                                 static_cast<std::int64_t>(cc) * g.stride_col]) -
                         offset;
      }
    }
  }
  forward_block<BT>(t, b, k, x, c);
  const std::uint64_t ccols = (g.width + b - 1) / b * k;
  bool ok = true;
  for (int u = 0; u < k; ++u) {
    for (int v = 0; v < k; ++v) {
      const std::uint64_t at = (bi * k + u) * ccols + bj * k + v;
      ok &= store_coeff(c[u * k + v], code, cplane, at);
    }
  }
  return ok;
}

/** Decode block (bi, bj) of a plane from its coefficient plane: load K x K, inverse
 *  transform, crop to the plane, add the offset back and convert. */
template <typename Out, typename Real, int BT = 0>
DCTCHOP_HD void decode_block(const Real* t, int b, int k, const void* cplane, coeff_code code,
                             Out* plane, const plane_geometry& g, std::uint64_t bi,
                             std::uint64_t bj, Real offset) {
  if constexpr (BT > 0) b = BT;
  Real c[BT > 0 ? BT * BT : 32 * 32];
  Real x[BT > 0 ? BT * BT : 32 * 32];
  const std::uint64_t ccols = (g.width + b - 1) / b * k;
  for (int u = 0; u < k; ++u) {
    for (int v = 0; v < k; ++v) {
      c[u * k + v] = load_coeff<Real>(cplane, code, (bi * k + u) * ccols + bj * k + v);
    }
  }
  inverse_block<BT>(t, b, k, c, x);
  const Real off = offset + Real(0);  // -0 becomes +0 (inverse_block): values as the CPU's
  for (int r = 0; r < b; ++r) {
    const std::uint64_t row = bi * b + static_cast<std::uint64_t>(r);
    if (row >= g.height) break;
    for (int col = 0; col < b; ++col) {
      const std::uint64_t cc = bj * b + static_cast<std::uint64_t>(col);
      if (cc >= g.width) break;
      plane[static_cast<std::int64_t>(row) * g.stride_row +
            static_cast<std::int64_t>(cc) * g.stride_col] =
          convert_out<Out>(x[r * b + col], off);
    }
  }
}

}  // namespace dctchop::detail
