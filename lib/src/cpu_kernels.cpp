// CPU kernels of the DCT+Chop codec, compiled once per instruction set (see lib/CMakeLists.txt):
// DCTCHOP_KERNEL_NS names the copy (generic: the compiler's baseline; avx2: AVX2 and F16C).
// cpu_backend.cpp picks one at run time. No FP contraction (-ffp-contract=off, the top
// CMakeLists.txt): every copy computes bit-identical results.
//
// A plane is processed one strip of B rows at a time. Encoding a strip:
//   stage 1 (vertical, vectorised along the row): Y[u][x] = sum_r T[u][r] * X[r][x], u < K
//   stage 2 (horizontal, per block j):            C[u][jK+v] = sum_c Y[u][jB+c] * T[v][c]
// Each sum pairs the values at r and B-1-r (columns c and B-1-c), since T[u][B-1-r] =
// (-1)^u T[u][r]: T[u][r] times their sum for even u, their difference for odd u, over r <
// B/2 (detail/block.hpp's forward_block): B/2 additions and (K + K*K/B)/2 multiply-adds per
// value (3 at B=8, K=4). Decoding runs the same stages backwards, its vertical one for rows r
// and B-1-r at once (the even terms' sum plus and minus the odd terms': vertical_inverse_k).
// Edge replication: rows past H repeat row H-1, columns past W repeat column W-1.
#include <algorithm>
#include <tuple>
#include <utility>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "cpu_kernels.hpp"
#include "dispatch.hpp"
#include "omp.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "dctchop stores little-endian coefficients and assumes a little-endian host");

namespace dctchop::detail::DCTCHOP_KERNEL_NS {
namespace {


using u64 = std::uint64_t;
using i64 = std::int64_t;

template <typename Real>
struct scratch {
  std::vector<Real> row;   // B wide rows (encode; decode: row r, and rows B/2..B-1 kept)
  std::vector<Real> y;     // K wide rows
  std::vector<Real> crow;  // coefficient rows, wb*K each
};

// ---- conversions between stored coefficients and Real -------------------------------------

/** Store n values as coefficient type ct; returns false when one does not fit. */
template <typename Real>
bool store_coeffs(const Real* src, std::size_t n, coeff_type ct, std::byte* dst) {
  bool ok = true;
  switch (ct) {
    case coeff_type::f32: {
      auto* d = reinterpret_cast<float*>(dst);
      for (std::size_t i = 0; i < n; ++i) {
        float f = static_cast<float>(src[i]);
        ok &= std::isfinite(f);
        d[i] = f;
      }
      break;
    }
    case coeff_type::f16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      std::size_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
      if constexpr (std::is_same_v<Real, float>) {
        // Eight at a time (the loop below is not vectorised: vcvtps2ph one value at a time),
        // rounding to nearest even as the scalar conversion; a value is too large when its
        // half has the all-ones exponent of Inf and NaN.
        const __m128i exponent = _mm_set1_epi16(0x7c00);
        __m128i nonfinite = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
          const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
          nonfinite = _mm_or_si128(nonfinite, _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent));
        }
        ok = _mm_testz_si128(nonfinite, nonfinite) != 0;
      }
#endif
#if defined(__F16C__) && defined(__FLT16_MAX__)  // _Float16: GCC 12, clang 15 and later
      // The hardware conversion (vcvtps2ph) rounds to nearest even like float_to_half.
      for (; i < n; ++i) {
        const _Float16 hf = static_cast<_Float16>(narrow_for_rounding(src[i]));
        std::uint16_t h;
        std::memcpy(&h, &hf, 2);
        ok &= !half_is_nonfinite(h);
        d[i] = h;
      }
#else
      for (; i < n; ++i) {
        std::uint16_t h = float_to_half(narrow_for_rounding(src[i]));
        ok &= !half_is_nonfinite(h);
        d[i] = h;
      }
#endif
      break;
    }
    case coeff_type::bf16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h = float_to_bf16(narrow_for_rounding(src[i]));
        ok &= !bf16_is_nonfinite(h);
        d[i] = h;
      }
      break;
    }
    case coeff_type::i16: {
      auto* d = reinterpret_cast<std::int16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) {
        Real r = std::nearbyint(src[i]);
        bool fits = r >= Real(-32768) && r <= Real(32767);  // false for NaN
        ok &= fits;
        d[i] = static_cast<std::int16_t>(fits ? r : Real(0));
      }
      break;
    }
  }
  return ok;
}

template <typename Real>
void load_coeffs(const std::byte* src, std::size_t n, coeff_type ct, Real* dst) {
  switch (ct) {
    case coeff_type::f32: {
      const auto* s = reinterpret_cast<const float*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Real>(s[i]);
      break;
    }
    case coeff_type::f16: {
      std::size_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
      if constexpr (std::is_same_v<Real, float>) {
        // Eight at a time: the loop below converts one value per instruction.
        for (; i + 8 <= n; i += 8) {
          _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                        reinterpret_cast<const __m128i*>(src + 2 * i))));
        }
      }
#endif
#if defined(__F16C__) && defined(__FLT16_MAX__)  // _Float16: GCC 12, clang 15 and later
      const auto* s = reinterpret_cast<const _Float16*>(src);
      for (; i < n; ++i) dst[i] = static_cast<Real>(static_cast<float>(s[i]));
#else
      const auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (; i < n; ++i) dst[i] = static_cast<Real>(half_to_float(s[i]));
#endif
      break;
    }
    case coeff_type::bf16: {
      const auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Real>(bf16_to_float(s[i]));
      break;
    }
    case coeff_type::i16: {
      const auto* s = reinterpret_cast<const std::int16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Real>(s[i]);
      break;
    }
  }
}

// ---- strips ------------------------------------------------------------------------------
//
// A strip job covers `ci` planes whose values are interleaved along the row (ci = C for NHWC
// input, 1 for planar input): the vertical stage does not care which plane a column belongs
// to, so it runs once over the whole interleaved row, contiguous and vectorised. Column X of a
// wide row holds plane X % ci at pixel X / ci.

/** A strip job's columns: the whole plane's width, or one tile of it (column_tiles). */
struct strip_geometry {
  u64 h, w, wb, wp;  // plane height, width, blocks per row, padded width (of the tile)
  u64 ci;            // interleaved planes in this job
  i64 stride_row, stride_col, stride_plane;
  u64 plane_wb = 0;  // blocks per row of the whole plane: a coefficient row has plane_wb*K
  u64 j0 = 0;        // the tile's first block in its row
};

template <int B>
strip_geometry make_strip_geometry(u64 h, u64 w, u64 ci, i64 stride_row, i64 stride_col,
                                   i64 stride_plane) {
  const u64 wb = (w + B - 1) / B;
  return {h, w, wb, wb * B, ci, stride_row, stride_col, stride_plane, wb, 0};
}

/** Columns of a wide row that a strip job takes at most (all planes of an interleaved
 *  group): wider planes are cut into tiles of whole blocks, so that a thread's scratch, B
 *  such rows in Real, stays near 2 MiB, where a plane of 1 x 2^24 float32 values took 512
 *  MiB a thread (B rows of its padded width) and ran out of memory. */
constexpr u64 k_tile_values = u64(1) << 16;

/** Tiles per row of a plane of wb blocks of B columns of ci values, and blocks per tile. */
template <int B>
std::pair<u64, u64> column_tiles(u64 wb, u64 ci) {
  const u64 per = std::max<u64>(1, k_tile_values / (static_cast<u64>(B) * ci));
  if (wb <= per) return {1, wb};
  return {(wb + per - 1) / per, per};
}

/** The geometry of tile `tile` (of `per` blocks) of a plane's strip geometry g. */
template <int B>
strip_geometry tile_of(const strip_geometry& g, u64 tile, u64 per) {
  strip_geometry t = g;
  t.j0 = tile * per;
  t.wb = std::min(per, g.wb - t.j0);
  t.wp = t.wb * B;
  t.w = std::min(t.wp, g.w - t.j0 * B);  // the last tile's real columns: the rest is padding
  return t;
}

#if defined(__AVX2__)
/** Eight values of a row as floats. */
template <typename In>
__m256 load8(const In* p) {
  if constexpr (std::is_same_v<In, std::uint8_t>) {
    std::uint64_t b;
    std::memcpy(&b, p, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(b))));
  } else if constexpr (std::is_same_v<In, std::uint16_t>) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (std::is_same_v<In, std::int16_t>) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (std::is_same_v<In, std::int8_t>) {
    std::uint64_t b;
    std::memcpy(&b, p, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(static_cast<long long>(b))));
  } else if constexpr (std::is_same_v<In, half_value>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_loadu_ps(p);
  }
}

/** load_wide_row for one contiguous plane row of w >= 8 values, padded to wp (a multiple of
 *  8), in float: whole vectors only. The last one is read as the 8 values that end the row and
 *  moved into place with the padding repeated, all in registers: scalar stores of the tail and
 *  the padding would stall the vertical stage's vector loads of them. */
template <typename In>
void load_plane_row8(const In* src, u64 w, u64 wp, float offset, float* dst) {
  const __m256 off = _mm256_set1_ps(offset);
  u64 x = 0;
  for (; x + 8 <= w; x += 8) _mm256_storeu_ps(dst + x, _mm256_sub_ps(load8(src + x), off));
  if (x == wp) return;
  const __m256 last = _mm256_sub_ps(load8(src + w - 8), off);
  for (; x < wp; x += 8) {
    // lane i takes value min(x + i, w - 1), which is lane min(x + i, w - 1) - (w - 8) of last
    const __m256i want = _mm256_min_epi32(
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(x)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
        _mm256_set1_epi32(static_cast<int>(w - 1)));
    const __m256i lane = _mm256_sub_epi32(want, _mm256_set1_epi32(static_cast<int>(w - 8)));
    _mm256_storeu_ps(dst + x, _mm256_permutevar8x32_ps(last, lane));
  }
}
#endif

/** Load image row `src` (all ci planes) into the wide row `dst` of wp*ci values, minus the
 *  offset, replicating the last pixel of each plane into the padding. */
template <typename In, typename Real>
void load_wide_row(const In* src, const strip_geometry& g, Real offset, Real* dst) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<Real, float> && !std::is_same_v<In, double>) {
    // (the lane arithmetic is in 32-bit integers)
    if (g.ci == 1 && g.stride_col == 1 && g.w >= 8 && g.wp % 8 == 0 &&
        g.wp <= static_cast<u64>(std::numeric_limits<std::int32_t>::max()))
      return load_plane_row8(src, g.w, g.wp, offset, dst);
  }
#endif
  const u64 n = g.w * g.ci;
  if (g.ci > 1 || g.stride_col == 1) {
    // contiguous: planar rows, or interleaved pixels (stride_col == ci, stride_plane == 1)
    for (u64 x = 0; x < n; ++x) dst[x] = static_cast<Real>(src[x]) - offset;
  } else {
    for (u64 x = 0; x < n; ++x) dst[x] = static_cast<Real>(src[x * g.stride_col]) - offset;
  }
  for (u64 x = g.w; x < g.wp; ++x)
    for (u64 c = 0; c < g.ci; ++c) dst[x * g.ci + c] = dst[(g.w - 1) * g.ci + c];
}

#if defined(__AVX2__)
/** Copy t < 32 bytes with at most two overlapping stores of 16, 8, 4 or 2 bytes, not a
 *  library call of variable length. */
inline void store_overlapping(const std::uint8_t* src, u64 t, std::uint8_t* dst) {
  auto pair = [&](auto word) {
    constexpr u64 size = sizeof(word);
    std::memcpy(&word, src, size);
    std::memcpy(dst, &word, size);
    std::memcpy(&word, src + t - size, size);
    std::memcpy(dst + t - size, &word, size);
  };
  if (t >= 16) {
    pair(__m128i{});
  } else if (t >= 8) {
    pair(std::uint64_t{});
  } else if (t >= 4) {
    pair(std::uint32_t{});
  } else if (t >= 2) {
    pair(std::uint16_t{});
  } else if (t == 1) {
    dst[0] = src[0];
  }
}
#endif

/** dst[x] = round_clamp(row[x] + offset, 0, 255) for a contiguous row. The AVX2 copy converts
 *  with cvtps2dq (round to nearest even, like round_clamp) after clamping, then packs: the
 *  same bytes as the scalar loop, four times fewer instructions than the auto-vectorised one.
 *  `row` must be readable up to n rounded up to 32 (the scratch rows are). */
inline void store_u8_row(const float* row, u64 n, float offset, std::uint8_t* dst) {
  u64 x = 0;
#if defined(__AVX2__)
  const __m256 off = _mm256_set1_ps(offset), lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  auto cvt = [&](const float* p) {
    // max_ps(v, lo) returns lo for NaN v, as round_clamp does
    __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(_mm256_loadu_ps(p), off), lo), hi);
    return _mm256_cvtps_epi32(v);
  };
  auto pack32 = [&](const float* p) {  // 32 values to 32 bytes, in order
    const __m256i ab = _mm256_packs_epi32(cvt(p), cvt(p + 8));
    const __m256i cd = _mm256_packs_epi32(cvt(p + 16), cvt(p + 24));
    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
  };
  for (; x + 32 <= n; x += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), pack32(row + x));
  if (x < n) {
    // The tail (rows of 28 or 100 pixels end here) in one more vector step, so that narrow
    // images do not fall back to one scalar rounding per pixel: it reads up to 31 values
    // past n (the scratch rows have that slack; what lies there is never stored) and writes
    // exactly n - x bytes, in two overlapping stores. Plain loads, not masked ones: a masked
    // load cannot take its data from the stores that just wrote the row, and stalls.
    alignas(32) std::uint8_t out[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), pack32(row + x));
    store_overlapping(out, n - x, dst + x);
    return;
  }
#endif
  for (; x < n; ++x) dst[x] = static_cast<std::uint8_t>(round_clamp(row[x] + offset, 0.f, 255.f));
}

/** y[u][x] = sum_{r<B} T[u][r] rows[r][x] for u < K, x < n, as forward_block sums it (rows r
 *  and B-1-r paired: their sum for even u, their difference for odd u). With K known at
 *  compile time each x loads its B row values once and writes K outputs, all in registers;
 *  K > 8 runs in passes of at most 8 rows of T (of the same parity as their index here). */
template <int B, int K, typename Real>
void vertical_forward_k(const Real* __restrict t, const Real* __restrict rows, u64 n,
                        Real* __restrict y) {
  static_assert(B % 2 == 0);
  constexpr int H = B / 2;
  for (u64 x = 0; x < n; ++x) {
    Real sum[H], dif[H];
    for (int r = 0; r < H; ++r) {
      const Real p = rows[r * n + x], q = rows[(B - 1 - r) * n + x];
      sum[r] = p + q;
      dif[r] = p - q;
    }
    for (int u = 0; u < K; ++u) {
      const Real* w = u % 2 == 0 ? sum : dif;
      Real acc = 0;
      for (int r = 0; r < H; ++r) acc += t[u * B + r] * w[r];
      y[static_cast<u64>(u) * n + x] = acc;
    }
  }
}

template <int B, typename Real>
void vertical_forward(const Real* t, int k, const Real* rows, u64 n, Real* y) {
  for (int u0 = 0; u0 < k; u0 += 8) {
    const Real* tu = t + u0 * B;
    Real* yu = y + static_cast<u64>(u0) * n;
    switch (std::min(k - u0, 8)) {
      case 1: vertical_forward_k<B, 1>(tu, rows, n, yu); break;
      case 2: vertical_forward_k<B, 2>(tu, rows, n, yu); break;
      case 3: vertical_forward_k<B, 3>(tu, rows, n, yu); break;
      case 4: vertical_forward_k<B, 4>(tu, rows, n, yu); break;
      case 5: vertical_forward_k<B, 5>(tu, rows, n, yu); break;
      case 6: vertical_forward_k<B, 6>(tu, rows, n, yu); break;
      case 7: vertical_forward_k<B, 7>(tu, rows, n, yu); break;
      default: vertical_forward_k<B, 8>(tu, rows, n, yu); break;
    }
  }
}

#if defined(__AVX2__)
/** encode_strip's horizontal stage for 8 blocks at once, one block per lane: the B values of
 *  block l lie at base[at[l] + cc], and coefficient v of each is the same sum, in the same
 *  order, as the scalar loop's. The coefficients go to out[l*k + v]. */
template <int B>
void horizontal_forward8(const float* base, const std::int32_t* at, int k, const float* t,
                         float* out) {
  __m256 blk[B];
  if constexpr (B == 8) {  // 8 x 8 values transposed in registers, block l to lane l
    __m256 r[8];
    for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(base + at[l]);
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    blk[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    blk[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    blk[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    blk[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    blk[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    blk[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    blk[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    blk[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
  } else {
    const __m256i offsets = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
    for (int cc = 0; cc < B; ++cc) blk[cc] = _mm256_i32gather_ps(base + cc, offsets, 4);
  }
  constexpr int H = B / 2;  // columns cc and B-1-cc paired, as forward_block does
  __m256 sum[H], dif[H];
  for (int cc = 0; cc < H; ++cc) sum[cc] = _mm256_add_ps(blk[cc], blk[B - 1 - cc]);
  if (k > 1) {  // (chop 1 takes sums only)
    for (int cc = 0; cc < H; ++cc) dif[cc] = _mm256_sub_ps(blk[cc], blk[B - 1 - cc]);
  }
  alignas(32) float lanes[8];
  for (int v = 0; v < k; ++v) {
    const float* tv = t + v * B;
    const __m256* w = v % 2 == 0 ? sum : dif;
    __m256 acc = _mm256_setzero_ps();
    for (int cc = 0; cc < H; ++cc)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(w[cc], _mm256_set1_ps(tv[cc])));
    _mm256_store_ps(lanes, acc);
    for (int l = 0; l < 8; ++l) out[l * k + v] = lanes[l];
  }
}
#endif

/** Split the K wide rows y of interleaved planes (n = wp*ci values each; column X holds plane
 *  X % ci at pixel X / ci) into rows of planar ones, out[u*n + c*wp + x]: the horizontal stage
 *  then finds each block's values contiguous. Done after the vertical stage, on K rows rather
 *  than the strip's B rows of input. */
template <typename Real>
void split_planes(const Real* y, int k, const strip_geometry& g, Real* out) {
  const u64 ci = g.ci, wp = g.wp, n = wp * ci;
  for (int u = 0; u < k; ++u) {
    const Real* row = y + static_cast<u64>(u) * n;
    Real* dst = out + static_cast<u64>(u) * n;
    u64 x0 = 0;
#if defined(__AVX2__)
    if constexpr (std::is_same_v<Real, float>) {
      if (ci == 3) {
        // 8 pixels (24 values) at a time: each plane's values picked by two blends (lanes
        // 3i + c of the three vectors fall in distinct lanes) and put in order by a permute.
        const __m256i order0 = _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5);
        const __m256i order1 = _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6);
        const __m256i order2 = _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7);
        for (; x0 + 8 <= wp; x0 += 8) {
          const __m256 a = _mm256_loadu_ps(row + 3 * x0), b = _mm256_loadu_ps(row + 3 * x0 + 8),
                       c = _mm256_loadu_ps(row + 3 * x0 + 16);
          // plane 0: lanes 0,3,6 of a, 1,4,7 of b, 2,5 of c
          const __m256 p0 = _mm256_blend_ps(_mm256_blend_ps(a, b, 0x92), c, 0x24);
          // plane 1: lanes 1,4,7 of a, 2,5 of b, 0,3,6 of c
          const __m256 p1 = _mm256_blend_ps(_mm256_blend_ps(a, b, 0x24), c, 0x49);
          // plane 2: lanes 2,5 of a, 0,3,6 of b, 1,4,7 of c
          const __m256 p2 = _mm256_blend_ps(_mm256_blend_ps(a, b, 0x49), c, 0x92);
          _mm256_storeu_ps(dst + x0, _mm256_permutevar8x32_ps(p0, order0));
          _mm256_storeu_ps(dst + wp + x0, _mm256_permutevar8x32_ps(p1, order1));
          _mm256_storeu_ps(dst + 2 * wp + x0, _mm256_permutevar8x32_ps(p2, order2));
        }
      }
    }
#endif
    for (u64 c = 0; c < ci; ++c)
      for (u64 x = x0; x < wp; ++x) dst[c * wp + x] = row[x * ci + c];
  }
}

/** encode_strip's horizontal stage for one plane of a strip, whose K rows start at y with a
 *  distance of n: C[u][jK+v] = sum_cc y[u*n + jB+cc] T[v][cc] for every u < K and block j,
 *  into out as the strip's K coefficient rows (out[(u*wb + j)*K + v]). The K*wb blocks are
 *  taken 8 at a time whatever their row, so that narrow planes (28x28: 4 blocks a row) are
 *  vectorised too. */
template <int B, typename Real>
void horizontal_forward(const Real* y, u64 n, const strip_geometry& g, int k, const Real* t,
                        Real* out) {
  const u64 wb = g.wb, total = static_cast<u64>(k) * wb;
  // Block i is block j of row u; (u, j) steps along with i, without divisions.
  u64 i = 0, u = 0, j = 0;
  auto step = [&] {
    if (++j == wb) j = 0, ++u;
  };
#if defined(__AVX2__)
  if constexpr (std::is_same_v<Real, float>) {
    // (the offsets are 32-bit)
    if (static_cast<u64>(k) * n <= static_cast<u64>(std::numeric_limits<std::int32_t>::max())) {
      for (; i + 8 <= total; i += 8) {
        std::int32_t at[8];
        for (int l = 0; l < 8; ++l) {
          at[l] = static_cast<std::int32_t>(u * n + j * B);
          step();
        }
        horizontal_forward8<B>(y, at, k, t, out + i * k);
      }
    }
  }
#endif
  for (; i < total; ++i, step()) {
    const Real* yb = y + u * n + j * B;
    constexpr int H = B / 2;  // columns cc and B-1-cc paired, as forward_block does
    Real sum[H], dif[H];
    for (int cc = 0; cc < H; ++cc) {
      sum[cc] = yb[cc] + yb[B - 1 - cc];
      dif[cc] = yb[cc] - yb[B - 1 - cc];
    }
    for (int vv = 0; vv < k; ++vv) {
      const Real* tv = t + vv * B;
      const Real* w = vv % 2 == 0 ? sum : dif;
      Real acc = 0;
      for (int cc = 0; cc < H; ++cc) acc += w[cc] * tv[cc];
      out[i * k + vv] = acc;
    }
  }
}

/** Encode one strip of B rows for the ci planes starting at `plane0`; the coefficient plane of
 *  plane c starts at cplanes + c * plane_bytes. Returns false when a value does not fit. */
template <int B, typename In, typename Real>
bool encode_strip(const In* plane0, const strip_geometry& g, u64 strip, int k, const Real* t,
                  Real offset, coeff_type ct, std::byte* cplanes, u64 plane_bytes,
                  scratch<Real>& s) {
  const u64 n = g.wp * g.ci;  // wide row length
  Real* rows = s.row.data();  // B wide rows
  Real* y = s.y.data();       // K wide rows
  for (int r = 0; r < B; ++r) {
    const u64 hr = std::min<u64>(strip * B + r, g.h - 1);
    load_wide_row(plane0 + static_cast<i64>(hr) * g.stride_row, g, offset, rows + r * n);
  }
  // Vertical stage: y[u][X] = sum_r T[u][r] rows[r][X].
  vertical_forward<B>(t, k, rows, n, y);
  // Horizontal stage, per plane and block: C[u][jK+v] = sum_c y[u][(jB+c)*ci + plane] T[v][c].
  bool ok = true;
  const std::size_t csize = size_of(ct);
  const u64 ccols = g.wb * k, plane_ccols = g.plane_wb * k;
  const Real* planar = y;  // plane c of row u at planar[u*n + c*wp]
  if (g.ci > 1) {
    split_planes(y, k, g, rows);  // (the input rows are no longer needed)
    planar = rows;
  }
  for (u64 c = 0; c < g.ci; ++c) {
    horizontal_forward<B>(planar + c * g.wp, n, g, k, t, s.crow.data());
    std::byte* first = cplanes + c * plane_bytes + (strip * k * plane_ccols + g.j0 * k) * csize;
    if (ccols == plane_ccols) {
      // The strip's K coefficient rows of plane c are contiguous: stored at once.
      ok &= store_coeffs(s.crow.data(), k * ccols, ct, first);
    } else {  // a tile's part of each
      for (int u = 0; u < k; ++u) {
        ok &= store_coeffs(s.crow.data() + static_cast<u64>(u) * ccols, ccols, ct,
                           first + static_cast<u64>(u) * plane_ccols * csize);
      }
    }
  }
  return ok;
}

/** Rows r and B-1-r of a strip (B is even), x < m, from the even and odd halves of the
 *  vertical sum (detail/block.hpp's inverse_block, whose order this keeps): e = sum over even
 *  u < K of T[u][r] y[u][x], o = sum over odd u, both in ascending u; row = e + o, mirror =
 *  e - o, since T[u][B-1-r] = (-1)^u T[u][r]. A compile-time K keeps the sums in registers. */
template <int K, typename Real>
void vertical_inverse_k(const Real* __restrict t, int b, u64 r, const Real* __restrict y, u64 n,
                        u64 m, Real* __restrict row, Real* __restrict mirror) {
  Real tc[K];
  for (int u = 0; u < K; ++u) tc[u] = t[u * b + static_cast<int>(r)];
  for (u64 x = 0; x < m; ++x) {
    Real e = tc[0] * y[x];
    for (int u = 2; u < K; u += 2) e += tc[u] * y[static_cast<u64>(u) * n + x];
    if constexpr (K == 1) {
      row[x] = e;  // (chop 1: every row of the strip is this one; decode_strip stores it)
    } else {
      Real o = tc[1] * y[n + x];
      for (int u = 3; u < K; u += 2) o += tc[u] * y[static_cast<u64>(u) * n + x];
      row[x] = e + o;
      mirror[x] = e - o;
    }
  }
}

template <typename Real>
void vertical_inverse(const Real* t, int b, u64 r, int k, const Real* y, u64 n, u64 m, Real* row,
                      Real* mirror) {
  switch (k) {  // (k > 1: chop 1 takes vertical_inverse_k<1> for its one row)
    case 2: return vertical_inverse_k<2>(t, b, r, y, n, m, row, mirror);
    case 3: return vertical_inverse_k<3>(t, b, r, y, n, m, row, mirror);
    case 4: return vertical_inverse_k<4>(t, b, r, y, n, m, row, mirror);
    case 5: return vertical_inverse_k<5>(t, b, r, y, n, m, row, mirror);
    case 6: return vertical_inverse_k<6>(t, b, r, y, n, m, row, mirror);
    case 7: return vertical_inverse_k<7>(t, b, r, y, n, m, row, mirror);
    case 8: return vertical_inverse_k<8>(t, b, r, y, n, m, row, mirror);
    default: break;
  }
  // Larger K: the even sums into row and the odd ones into mirror, a term per pass, then
  // combined.
  const auto pass = [&](Real* sum, int u0) {
    const Real* tu = t + u0 * b + static_cast<int>(r);
    for (u64 x = 0; x < m; ++x) sum[x] = tu[0] * y[static_cast<u64>(u0) * n + x];
    for (int u = u0 + 2; u < k; u += 2) {
      const Real tv = t[u * b + static_cast<int>(r)];
      const Real* yu = y + static_cast<u64>(u) * n;
      for (u64 x = 0; x < m; ++x) sum[x] += tv * yu[x];
    }
  };
  pass(row, 0);
  pass(mirror, 1);
  for (u64 x = 0; x < m; ++x) {
    const Real e = row[x], o = mirror[x];
    row[x] = e + o;
    mirror[x] = e - o;
  }
}

/** y[jB+c] = sum_{v<K} C[jK+v] T[v][c] for every block j of one coefficient row; the B-long
 *  loops vectorise. */
template <int B, typename Real>
void horizontal_inverse(const Real* __restrict cr, u64 wb, int k, const Real* __restrict t,
                        Real* __restrict y) {
  for (u64 j = 0; j < wb; ++j) {
    const Real* cj = cr + j * k;
    Real blk[B];  // a local block keeps the sum in registers
    for (int cc = 0; cc < B; ++cc) blk[cc] = cj[0] * t[cc];
    for (int vv = 1; vv < k; ++vv) {
      const Real cv = cj[vv];
      const Real* tv = t + vv * B;
      for (int cc = 0; cc < B; ++cc) blk[cc] += cv * tv[cc];
    }
    for (int cc = 0; cc < B; ++cc) y[j * B + cc] = blk[cc];
  }
}

/** One decoded value: add the offset back, then round and clamp for integer outputs. The same
 *  as detail::convert_out (block.hpp), kept here on purpose: this file is compiled once per
 *  instruction set, and only functions with internal linkage keep an AVX2 instantiation out
 *  of the baseline copy when the linker merges identical templates. */
template <typename Out, typename Real>
inline Out convert_out(Real v, Real offset) {
  if constexpr (std::is_same_v<Out, half_value>) {
    const float x = static_cast<float>(v + offset);
    return half_value(x < -k_half_max ? -k_half_max : (x > k_half_max ? k_half_max : x));
  } else if constexpr (std::is_floating_point_v<Out>) {
    constexpr Out top = std::numeric_limits<Out>::max();  // clamped, as detail::convert_out
    const Out x = static_cast<Out>(v + offset);
    return x < -top ? -top : (x > top ? top : x);
  } else {
    constexpr Real lo = static_cast<Real>(std::numeric_limits<Out>::min());
    constexpr Real hi = static_cast<Real>(std::numeric_limits<Out>::max());
    return static_cast<Out>(round_clamp(v + offset, lo, hi));
  }
}

/** dst[x] = convert_out<half_value>(row[x], offset) for a contiguous row: clamped to
 *  +-65504 and rounded to nearest even. The AVX2 copy converts eight at a time with F16C's
 *  vcvtps2ph, which rounds to nearest even as float_to_half does: the same bits. A NaN (from
 *  NaN or Inf coefficients, which only a hand-made archive holds) stays NaN in both: maxps
 *  and minps return their second operand when either is NaN. */
inline void store_half_row(const float* row, u64 n, float offset, half_value* dst) {
  u64 x = 0;
#if defined(__AVX2__)
  const __m256 off = _mm256_set1_ps(offset), lo = _mm256_set1_ps(-k_half_max),
               hi = _mm256_set1_ps(k_half_max);
  for (; x + 8 <= n; x += 8) {
    const __m256 v =
        _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_add_ps(_mm256_loadu_ps(row + x), off)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + x),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; x < n; ++x) dst[x] = convert_out<half_value>(row[x], offset);
}

/** Convert a contiguous row of decoded values to Out (u8 and f16 from float: the AVX2
 *  paths). */
template <typename Out, typename Real>
void convert_row(const Real* row, u64 n, Real offset, Out* dst) {
  if constexpr (std::is_same_v<Out, std::uint8_t> && std::is_same_v<Real, float>) {
    store_u8_row(row, n, offset, dst);
  } else if constexpr (std::is_same_v<Out, half_value> && std::is_same_v<Real, float>) {
    store_half_row(row, n, offset, dst);
  } else {
    for (u64 x = 0; x < n; ++x) dst[x] = convert_out<Out>(row[x], offset);
  }
}

/** Store one decoded row of a single plane (planar layouts; stride_col may exceed 1). */
template <typename Out, typename Real>
void store_wide_row(const Real* row, const strip_geometry& g, Real offset, Out* dst) {
  if (g.stride_col == 1) return convert_row(row, g.w, offset, dst);
  for (u64 x = 0; x < g.w; ++x)
    dst[static_cast<i64>(x) * g.stride_col] = convert_out<Out>(row[x], offset);
}

#if defined(__AVX2__)
/** The byte shuffles that interleave 16 pixels of CI (2..4) byte planes: output vector v takes
 *  from plane c the bytes at mask[v][c] (-1 gives 0, to be or-ed with the other planes'). */
template <int CI>
struct interleave_table {
  alignas(16) std::int8_t mask[CI][CI][16] = {};
  constexpr interleave_table() {
    for (int v = 0; v < CI; ++v)
      for (int c = 0; c < CI; ++c)
        for (int i = 0; i < 16; ++i) {
          const int at = 16 * v + i;  // byte of the output: pixel at / CI, plane at % CI
          mask[v][c][i] = static_cast<std::int8_t>(at % CI == c ? at / CI : -1);
        }
  }
};

/** Interleave 16 pixels of CI byte planes (planes[c * stride + x]) into dst[x*CI + c]. */
template <int CI>
inline void interleave16(const std::uint8_t* planes, u64 stride, std::uint8_t* dst) {
  static constexpr interleave_table<CI> table{};
  __m128i p[CI];
  for (int c = 0; c < CI; ++c)
    p[c] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes + c * stride));
  for (int v = 0; v < CI; ++v) {
    __m128i out = _mm_setzero_si128();
    for (int c = 0; c < CI; ++c)
      out = _mm_or_si128(out, _mm_shuffle_epi8(p[c], _mm_load_si128(reinterpret_cast<const __m128i*>(
                                                          table.mask[v][c]))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * v), out);
  }
}
#endif

/** Store ci planar rows (row + c*wp) into one interleaved image row (NHWC pixels). CI is the
 *  plane count when known at compile time (so the interleave vectorises), 0 otherwise. */
template <int CI, typename Out, typename Real>
void store_interleaved(const Real* row, const strip_geometry& g, Real offset, Out* dst) {
  const u64 ci = CI > 0 ? static_cast<u64>(CI) : g.ci;
  const u64 wp = g.wp;
  // Convert each plane's row contiguously (vectorised), then interleave the converted values.
  Out tmp[4 * 256];
  for (u64 x0 = 0; x0 < g.w; x0 += 256) {
    const u64 len = std::min<u64>(256, g.w - x0);
    if (ci > 4) {
      for (u64 x = x0; x < x0 + len; ++x)
        for (u64 c = 0; c < ci; ++c) dst[x * ci + c] = convert_out<Out>(row[c * wp + x], offset);
      continue;
    }
    for (u64 c = 0; c < ci; ++c) convert_row(row + c * wp + x0, len, offset, tmp + c * 256);
    Out* d = dst + x0 * ci;
    u64 x = 0;
#if defined(__AVX2__)
    if constexpr (std::is_same_v<Out, std::uint8_t> && CI >= 2 && CI <= 4)
      for (; x + 16 <= len; x += 16) interleave16<CI>(tmp + x, 256, d + x * CI);
#endif
    for (; x < len; ++x)
      for (u64 c = 0; c < ci; ++c) d[x * ci + c] = tmp[c * 256 + x];
  }
}

/** Decode one strip of B rows for the ci planes starting at `plane0` (the inverse of
 *  encode_strip). */
template <int B, typename Out, typename Real>
void decode_strip(const std::byte* cplanes, u64 plane_bytes, coeff_type ct, u64 strip, int k,
                  const Real* t, Real offset, const strip_geometry& g, Out* plane0,
                  scratch<Real>& s) {
  // A sum is -0 where its products all are (they start from the first, not from 0): the
  // offset plus 0 turns such a value into +0 (an offset of -0 is +0) and leaves the rest.
  offset += Real(0);
  Real* y = s.y.data();
  Real* row = s.row.data();
  const std::size_t csize = size_of(ct);
  const u64 ccols = g.wb * k, plane_ccols = g.plane_wb * k;
  const u64 wp = g.wp, n = g.ci * wp;
  // Horizontal stage, planar: y[u*n + plane*wp + jB+c] = sum_v C[u][jK+v] T[v][c].
  for (u64 c = 0; c < g.ci; ++c) {
    for (int u = 0; u < k; ++u) {
      Real* cr = s.crow.data();
      load_coeffs(cplanes + c * plane_bytes + ((strip * k + u) * plane_ccols + g.j0 * k) * csize,
                  ccols, ct, cr);
      horizontal_inverse<B>(cr, g.wb, k, t, y + static_cast<u64>(u) * n + c * wp);
    }
  }
  // Vertical stage over the planes' rows at once: row[plane*wp + x] =
  // sum_u T[u][r] y[u][plane*wp + x]; the store crops to the width and interleaves the planes
  // again. One loop, up to the last plane's width rounded up to a whole vector of 8 (at most
  // its padded width): a scalar tail would write a row's last values one by one, and the
  // store's vector loads of them would stall (a load cannot take its data from several
  // smaller stores). The earlier planes' padding is computed too, which costs at most B - 1
  // columns per plane.
  const u64 rows = std::min<u64>(B, g.h - strip * B);
  const u64 m = (g.ci - 1) * wp + std::min<u64>(wp, (g.w + 7) / 8 * 8);
  const auto out_row = [&](u64 r) {
    return plane0 + static_cast<i64>(strip * B + r) * g.stride_row;
  };
  const auto store = [&](u64 r, const Real* values) {
    Out* dst = out_row(r);
    switch (g.ci) {
      case 1: store_wide_row(values, g, offset, dst); break;
      case 2: store_interleaved<2>(values, g, offset, dst); break;
      case 3: store_interleaved<3>(values, g, offset, dst); break;
      case 4: store_interleaved<4>(values, g, offset, dst); break;
      default: store_interleaved<0>(values, g, offset, dst); break;
    }
  };
  // At chop 1 row r is T[0][r] y[0][x], and row 0 of T is one value, sqrt(1/B) in every
  // column bit for bit (dct_matrix multiplies by cos 0.0 = 1): every row of the strip is the
  // first, the same bits, computed once (one thread: u8 RGB decoded 1.2 times as fast, u8
  // planar 1.4; scripts/results/bench-cpu-decode-chop1-2026-12-04.txt), and stored once.
  if (k == 1) {
    vertical_inverse_k<1>(t, B, 0, y, n, m, row, static_cast<Real*>(nullptr));
    store(0, row);
    // The same values in every row: where a row's elements lie side by side and storing
    // them costs more than a copy (a conversion to a narrower type, or an interleave), the
    // first row's output is copied to the others. One thread: u8 RGB 256x256 1.85 times as
    // fast, u8 planar 1.56; f32 planar, whose store is an addition, ran 0.76 times as fast
    // copied, and is stored row by row
    // (scripts/results/bench-cpu-decode-chop1-copy-2026-12-05.txt).
    const bool copy = g.ci > 1 || (g.stride_col == 1 && sizeof(Out) < sizeof(Real));
    for (u64 r = 1; r < rows; ++r) {
      if (copy) {
        std::memcpy(out_row(r), out_row(0), g.w * g.ci * sizeof(Out));
      } else {
        store(r, row);
      }
    }
    return;
  }
  // Rows r and B-1-r are computed together: row r is stored at once, in order, and row
  // B-1-r kept (past the first row of s.row) until the first half is out, then they go in
  // order too (in the last strip, rows past the plane are computed and not stored).
  static_assert(B % 2 == 0, "rows pair up");
  const auto later = [&](u64 r) { return row + (B - r) * n; };  // rows B/2..B-1 of the strip
  for (u64 r = 0; r < B / 2 && r < rows; ++r) {
    vertical_inverse(t, B, r, k, y, n, m, row, later(B - 1 - r));
    store(r, row);
  }
  for (u64 r = B / 2; r < rows; ++r) store(r, later(r));
}

template <typename Real>
std::vector<Real> matrix_as(int block) {
  auto d = dct_matrix(block);
  return std::vector<Real>(d.begin(), d.end());
}

template <typename Real>
scratch<Real> make_scratch(int block, int k, const strip_geometry& g, bool encode) {
  scratch<Real> s;
  const u64 n = g.wp * g.ci;
  // 32 values of slack: store_u8_row reads its last vector step whole
  s.row.resize(static_cast<u64>(block) * n + 32);
  s.y.resize(static_cast<u64>(k) * n);
  s.crow.resize(g.wb * k * (encode ? k : 1));  // encode: a strip's K coefficient rows; decode: one
  return s;
}

/** How a view splits into strip jobs: interleaved planes (NHWC) go together. */
template <typename View>
u64 interleave_of(const View& v) {
  const bool interleaved = v.planes > 1 && v.stride_plane == 1 &&
                           v.stride_col == static_cast<i64>(v.planes);
  return interleaved ? v.planes : 1;
}

/** How a batch splits into strip jobs: (sample, group of interleaved planes, block row,
 *  column tile). */
struct batch_plan {
  u64 plane_bytes, hb, ci, groups, tiles, per_tile, items;
  strip_geometry g;  // of the whole plane
};

template <int B, typename View>
batch_plan plan_batch(const codec_params& p, const View& v) {
  const auto cs = coeff_shape(p, v.height, v.width);
  batch_plan bp{};
  bp.plane_bytes = cs.rows * cs.cols * size_of(p.coeff);
  bp.hb = (v.height + B - 1) / B;
  bp.ci = interleave_of(v);
  bp.groups = v.planes / bp.ci;
  bp.g = make_strip_geometry<B>(v.height, v.width, bp.ci, v.stride_row, v.stride_col,
                                v.stride_plane);
  std::tie(bp.tiles, bp.per_tile) = column_tiles<B>(bp.g.wb, bp.ci);
  bp.items = v.samples * bp.groups * bp.hb * bp.tiles;
  return bp;
}

/** Values that a thread of a codec team takes at least (for_each_strip). */
constexpr u64 k_values_a_thread = u64(512) << 10;

/** Run fn(strip, sample, element offset of the group's first plane (of the tile's first
 *  column), byte offset of its first coefficient plane, the tile's geometry, scratch) for
 *  every strip job, on `threads` OpenMP threads. */
template <int B, typename Real, typename View, typename Fn>
void for_each_strip(const codec_params& p, const View& v, const batch_plan& bp, int threads,
                    Fn&& fn) {
  // No more threads than the strips, nor than 512 Ki values each (about 0.2 ms of one core's
  // encode of u8): a team for less spent more on its start and barrier than it saved, and
  // beside another busy process it waited at the barrier for the thread that shared a core, a
  // scheduler tick or more (an eval pass of 786 KB of u8: 24 ms where one thread took 0.1).
  // 1 in a forked child.
  const u64 values = v.samples * v.planes * v.height * v.width;
  threads = region_threads(threads, std::min<u64>(bp.items, values / k_values_a_thread));
  (void)threads;  // unused in a build without OpenMP
  // A thread's scratch memory that cannot be had (or any other exception) ends the work of
  // every thread and is thrown after the region.
  region_failure failure;
  using scratch_t = decltype(make_scratch<Real>(B, p.chop, bp.g, true));
  const auto make = [&](std::optional<scratch_t>& s) {
    failure.run([&] {  // (encoding reads a const view)
      s.emplace(make_scratch<Real>(B, p.chop, tile_of<B>(bp.g, 0, bp.per_tile),
                                   std::is_same_v<View, const_sample_view>));
    });
  };
  const auto item = [&](i64 it, std::optional<scratch_t>& s) {
    if (!s || failure.failed()) return;
    const u64 at = static_cast<u64>(it);
    const u64 tile = at % bp.tiles;
    const u64 strip = at / bp.tiles % bp.hb;
    const u64 group = at / bp.tiles / bp.hb;  // sample * groups + group within the sample
    const u64 n = group / bp.groups, c0 = (group % bp.groups) * bp.ci;
    const strip_geometry g = bp.tiles == 1 ? bp.g : tile_of<B>(bp.g, tile, bp.per_tile);
    const i64 elem = static_cast<i64>(n) * v.stride_sample +
                     static_cast<i64>(c0) * v.stride_plane +
                     static_cast<i64>(g.j0 * B) * v.stride_col;
    failure.run([&] { fn(strip, n, elem, (n * v.planes + c0) * bp.plane_bytes, g, *s); });
  };
  if (threads <= 1 || bp.items <= 1) {
    // On this thread, outside OpenMP: a region of one thread still ends at libgomp's barrier,
    // two futex calls (a Dataset's read of one 28x28 sample: 9.3 us, 3 of them decoding).
    std::optional<scratch_t> s;
    make(s);
    for (i64 it = 0; it < static_cast<i64>(bp.items); ++it) item(it, s);
  } else {
    DCTCHOP_OMP(omp parallel num_threads(threads))
    {
      std::optional<scratch_t> s;
      make(s);
      DCTCHOP_OMP(omp for schedule(static))
      for (i64 it = 0; it < static_cast<i64>(bp.items); ++it) item(it, s);
    }
  }
  failure.rethrow();
}

template <int B, typename In, typename Real>
void encode_all(const codec_params& p, const const_sample_view& v, std::byte* coeffs,
                int threads, std::atomic<u64>& first_bad) {
  const auto t = matrix_as<Real>(B);
  const batch_plan bp = plan_batch<B>(p, v);
  const auto* base = static_cast<const In*>(v.data);
  const Real offset = static_cast<Real>(p.offset);
  for_each_strip<B, Real>(p, v, bp, threads,
                          [&](u64 strip, u64 n, i64 elem, u64 cbyte, const strip_geometry& g,
                              scratch<Real>& s) {
    const bool ok = encode_strip<B, In, Real>(base + elem, g, strip, p.chop, t.data(), offset,
                                              p.coeff, coeffs + cbyte, bp.plane_bytes, s);
    if (!ok) {
      u64 cur = first_bad.load();
      while (n < cur && !first_bad.compare_exchange_weak(cur, n)) {
      }
    }
  });
}

template <int B, typename Out, typename Real>
void decode_all(const codec_params& p, const std::byte* coeffs, const sample_view& v,
                int threads) {
  const auto t = matrix_as<Real>(B);
  const batch_plan bp = plan_batch<B>(p, v);
  auto* base = static_cast<Out*>(v.data);
  const Real offset = static_cast<Real>(p.offset);
  for_each_strip<B, Real>(p, v, bp, threads,
                          [&](u64 strip, u64, i64 elem, u64 cbyte, const strip_geometry& g,
                              scratch<Real>& s) {
    decode_strip<B, Out, Real>(coeffs + cbyte, bp.plane_bytes, p.coeff, strip, p.chop, t.data(),
                               offset, g, base + elem, s);
  });
}

}  // namespace

void encode_batch(const codec_params& p, const const_sample_view& v, std::byte* coeffs,
                  int threads, std::atomic<std::uint64_t>& first_bad) {
  with_block(p.block, [&](auto b) {
    with_dtype(v.type, [&](auto in, auto real) {
      encode_all<decltype(b)::value, decltype(in), decltype(real)>(p, v, coeffs, threads,
                                                                  first_bad);
    });
  });
}

void decode_batch(const codec_params& p, const std::byte* coeffs, const sample_view& v,
                  int threads) {
  with_block(p.block, [&](auto b) {
    with_dtype(v.type, [&](auto out, auto real) {
      decode_all<decltype(b)::value, decltype(out), decltype(real)>(p, coeffs, v, threads);
    });
  });
}

}  // namespace dctchop::detail::DCTCHOP_KERNEL_NS
