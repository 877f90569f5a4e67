// CPU backend: separable block-by-block DCT+Chop, OpenMP across planes and block rows.
//
// A plane is processed one strip of B rows at a time. Encoding a strip:
//   stage 1 (vertical, vectorised along the row): Y[u][x] = sum_r T[u][r] * X[r][x], u < K
//   stage 2 (horizontal, per block j):            C[u][jK+v] = sum_c Y[u][jB+c] * T[v][c]
// which is K + K*K/B multiply-adds per value (6 at B=8, K=4). Decoding runs the same stages
// backwards. Edge replication: rows past H repeat row H-1, columns past W repeat column W-1.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "backends.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "dctchop stores little-endian coefficients and assumes a little-endian host");

namespace dctchop::detail {
namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

template <typename Real>
struct scratch {
  std::vector<Real> row;   // one image row, padded to wp
  std::vector<Real> y;     // K x wp intermediate
  std::vector<Real> crow;  // one coefficient row, wb*K
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
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h = float_to_half(static_cast<float>(src[i]));
        ok &= !half_is_nonfinite(h);
        d[i] = h;
      }
      break;
    }
    case coeff_type::bf16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h = float_to_bf16(static_cast<float>(src[i]));
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
      const auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Real>(half_to_float(s[i]));
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

// ---- input rows ----------------------------------------------------------------------------

template <typename In, typename Real>
void load_row(const In* src, i64 stride_col, u64 w, u64 wp, Real offset, Real* row) {
  if (stride_col == 1) {
    for (u64 x = 0; x < w; ++x) row[x] = static_cast<Real>(src[x]) - offset;
  } else {
    for (u64 x = 0; x < w; ++x) row[x] = static_cast<Real>(src[x * stride_col]) - offset;
  }
  const Real last = row[w - 1];
  for (u64 x = w; x < wp; ++x) row[x] = last;
}

template <typename Out, typename Real>
void store_row(const Real* row, u64 w, Real offset, i64 stride_col, Out* dst) {
  if constexpr (std::is_floating_point_v<Out>) {
    for (u64 x = 0; x < w; ++x) dst[x * stride_col] = static_cast<Out>(row[x] + offset);
  } else {
    const Real lo = static_cast<Real>(std::numeric_limits<Out>::min());
    const Real hi = static_cast<Real>(std::numeric_limits<Out>::max());
    if (stride_col == 1) {
      for (u64 x = 0; x < w; ++x) dst[x] = static_cast<Out>(round_clamp(row[x] + offset, lo, hi));
    } else {
      for (u64 x = 0; x < w; ++x)
        dst[x * stride_col] = static_cast<Out>(round_clamp(row[x] + offset, lo, hi));
    }
  }
}

// ---- one strip -----------------------------------------------------------------------------

template <int B, typename In, typename Real>
bool encode_strip(const In* plane, const const_sample_view& v, u64 strip, int k, const Real* t,
                  Real offset, coeff_type ct, std::byte* cplane, u64 ccols, scratch<Real>& s) {
  const u64 h = v.height, w = v.width;
  const u64 wb = (w + B - 1) / B, wp = wb * B;
  Real* y = s.y.data();
  Real* row = s.row.data();
  std::fill(y, y + static_cast<u64>(k) * wp, Real(0));
  for (int r = 0; r < B; ++r) {
    const u64 hr = std::min<u64>(strip * B + r, h - 1);
    load_row(plane + static_cast<i64>(hr) * v.stride_row, v.stride_col, w, wp, offset, row);
    for (int u = 0; u < k; ++u) {
      const Real tu = t[u * B + r];
      Real* yu = y + static_cast<u64>(u) * wp;
      for (u64 x = 0; x < wp; ++x) yu[x] += tu * row[x];
    }
  }
  bool ok = true;
  const std::size_t csize = size_of(ct);
  for (int u = 0; u < k; ++u) {
    const Real* yu = y + static_cast<u64>(u) * wp;
    Real* c = s.crow.data();
    for (u64 j = 0; j < wb; ++j) {
      const Real* blk = yu + j * B;
      for (int vv = 0; vv < k; ++vv) {
        const Real* tv = t + vv * B;
        Real acc = 0;
        for (int cc = 0; cc < B; ++cc) acc += blk[cc] * tv[cc];
        c[j * k + vv] = acc;
      }
    }
    const u64 crow_index = strip * k + u;
    ok &= store_coeffs(c, wb * k, ct, cplane + crow_index * ccols * csize);
  }
  return ok;
}

template <int B, typename Out, typename Real>
void decode_strip(const std::byte* cplane, u64 ccols, coeff_type ct, u64 strip, int k,
                  const Real* t, Real offset, const sample_view& v, Out* plane,
                  scratch<Real>& s) {
  const u64 h = v.height, w = v.width;
  const u64 wb = (w + B - 1) / B, wp = wb * B;
  Real* y = s.y.data();
  Real* row = s.row.data();
  const std::size_t csize = size_of(ct);
  for (int u = 0; u < k; ++u) {
    Real* c = s.crow.data();
    load_coeffs(cplane + (strip * k + u) * ccols * csize, wb * k, ct, c);
    Real* yu = y + static_cast<u64>(u) * wp;
    // Inner loops over the B columns of a block: fixed length, vectorised.
    for (u64 j = 0; j < wb; ++j) {
      const Real* cj = c + j * k;
      Real* out = yu + j * B;
      for (int cc = 0; cc < B; ++cc) out[cc] = cj[0] * t[cc];
      for (int vv = 1; vv < k; ++vv) {
        const Real cv = cj[vv];
        const Real* tv = t + vv * B;
        for (int cc = 0; cc < B; ++cc) out[cc] += cv * tv[cc];
      }
    }
  }
  const u64 rows = std::min<u64>(B, h - strip * B);
  for (u64 r = 0; r < rows; ++r) {
    const Real t0 = t[r];
    for (u64 x = 0; x < w; ++x) row[x] = t0 * y[x];
    for (int u = 1; u < k; ++u) {
      const Real tu = t[u * B + r];
      const Real* yu = y + static_cast<u64>(u) * wp;
      for (u64 x = 0; x < w; ++x) row[x] += tu * yu[x];
    }
    store_row(row, w, offset, v.stride_col, plane + static_cast<i64>(strip * B + r) * v.stride_row);
  }
}

// ---- whole batches -------------------------------------------------------------------------

int resolve_threads(int requested) {
#if defined(_OPENMP)
  return requested > 0 ? requested : omp_get_num_procs();
#else
  (void)requested;
  return 1;
#endif
}

template <typename Real>
std::vector<Real> matrix_as(int block) {
  auto d = dct_matrix(block);
  return std::vector<Real>(d.begin(), d.end());
}

template <typename Real>
scratch<Real> make_scratch(int block, int k, u64 w) {
  const u64 wb = (w + block - 1) / block, wp = wb * block;
  scratch<Real> s;
  s.row.resize(wp);
  s.y.resize(static_cast<u64>(k) * wp);
  s.crow.resize(wb * k);
  return s;
}

template <int B, typename In, typename Real>
void encode_all(const codec_params& p, const const_sample_view& v, std::byte* coeffs,
                int threads, std::atomic<u64>& first_bad) {
  const auto t = matrix_as<Real>(B);
  const auto cs = coeff_shape(p, v.height, v.width);
  const u64 plane_bytes = cs.rows * cs.cols * size_of(p.coeff);
  const u64 hb = (v.height + B - 1) / B;
  const u64 items = v.samples * v.planes * hb;
  const auto* base = static_cast<const In*>(v.data);
  const Real offset = static_cast<Real>(p.offset);
#pragma omp parallel num_threads(threads) if (threads > 1 && items > 1)
  {
    auto s = make_scratch<Real>(B, p.chop, v.width);
#pragma omp for schedule(static)
    for (i64 it = 0; it < static_cast<i64>(items); ++it) {
      const u64 item = static_cast<u64>(it);
      const u64 strip = item % hb;
      const u64 plane_index = item / hb;  // sample * planes + plane
      const u64 n = plane_index / v.planes, c = plane_index % v.planes;
      const In* plane = base + static_cast<i64>(n) * v.stride_sample +
                        static_cast<i64>(c) * v.stride_plane;
      bool ok = encode_strip<B, In, Real>(plane, v, strip, p.chop, t.data(), offset, p.coeff,
                                          coeffs + plane_index * plane_bytes, cs.cols, s);
      if (!ok) {
        u64 cur = first_bad.load();
        while (n < cur && !first_bad.compare_exchange_weak(cur, n)) {
        }
      }
    }
  }
}

template <int B, typename Out, typename Real>
void decode_all(const codec_params& p, const std::byte* coeffs, const sample_view& v,
                int threads) {
  const auto t = matrix_as<Real>(B);
  const auto cs = coeff_shape(p, v.height, v.width);
  const u64 plane_bytes = cs.rows * cs.cols * size_of(p.coeff);
  const u64 hb = (v.height + B - 1) / B;
  const u64 items = v.samples * v.planes * hb;
  auto* base = static_cast<Out*>(v.data);
  const Real offset = static_cast<Real>(p.offset);
#pragma omp parallel num_threads(threads) if (threads > 1 && items > 1)
  {
    auto s = make_scratch<Real>(B, p.chop, v.width);
#pragma omp for schedule(static)
    for (i64 it = 0; it < static_cast<i64>(items); ++it) {
      const u64 item = static_cast<u64>(it);
      const u64 strip = item % hb;
      const u64 plane_index = item / hb;
      const u64 n = plane_index / v.planes, c = plane_index % v.planes;
      Out* plane = base + static_cast<i64>(n) * v.stride_sample +
                   static_cast<i64>(c) * v.stride_plane;
      decode_strip<B, Out, Real>(coeffs + plane_index * plane_bytes, cs.cols, p.coeff, strip,
                                 p.chop, t.data(), offset, v, plane, s);
    }
  }
}

// Dispatch on block size, then element type (f64 computes in double, the rest in float).
template <typename Fn>
void with_block(int block, Fn&& fn) {
  switch (block) {
    case 4: fn(std::integral_constant<int, 4>{}); break;
    case 8: fn(std::integral_constant<int, 8>{}); break;
    case 16: fn(std::integral_constant<int, 16>{}); break;
    case 32: fn(std::integral_constant<int, 32>{}); break;
    default: throw error(errc::invalid_argument, "unsupported block size");
  }
}

template <typename Fn>
void with_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::u8: fn(std::uint8_t{}, float{}); break;
    case dtype::u16: fn(std::uint16_t{}, float{}); break;
    case dtype::i16: fn(std::int16_t{}, float{}); break;
    case dtype::f32: fn(float{}, float{}); break;
    case dtype::f64: fn(double{}, double{}); break;
  }
}

/** Explain why sample `n` could not be stored: a non-finite input, or a coefficient too big. */
[[noreturn]] void throw_bad_sample(const codec_params& p, const const_sample_view& v, u64 n) {
  if (is_float(v.type)) {
    bool nonfinite = false;
    for (u64 c = 0; c < v.planes && !nonfinite; ++c)
      for (u64 r = 0; r < v.height && !nonfinite; ++r)
        for (u64 x = 0; x < v.width && !nonfinite; ++x) {
          i64 off = static_cast<i64>(n) * v.stride_sample + static_cast<i64>(c) * v.stride_plane +
                    static_cast<i64>(r) * v.stride_row + static_cast<i64>(x) * v.stride_col;
          double val = v.type == dtype::f32 ? static_cast<const float*>(v.data)[off]
                                            : static_cast<const double*>(v.data)[off];
          nonfinite = !std::isfinite(val);
        }
    if (nonfinite) {
      throw error(errc::bad_input, "holds a NaN or Inf, which DCT+Chop cannot keep",
                  static_cast<long long>(n));
    }
  }
  const std::string suggestion = p.coeff == coeff_type::f32 ? "no coefficient type can hold it"
                                                             : "use --coeff f32";
  throw error(errc::out_of_range,
              "a DCT coefficient does not fit " + std::string(to_string(p.coeff)) + "; " +
                  suggestion,
              static_cast<long long>(n));
}

class cpu_backend final : public backend {
 public:
  explicit cpu_backend(const backend_options& o) : threads_(resolve_threads(o.threads)) {}
  std::string name() const override { return "cpu"; }

  void encode(const codec_params& p, const const_sample_view& v,
              std::span<std::byte> coeffs) override {
    validate(p);
    check_view(v);
    const u64 need = v.samples * v.planes * plane_bytes(p, v.height, v.width);
    if (coeffs.size() < need) throw error(errc::internal, "coefficient buffer too small");
    if (v.samples == 0) return;
    std::atomic<u64> first_bad{std::numeric_limits<u64>::max()};
    with_block(p.block, [&](auto b) {
      with_dtype(v.type, [&](auto in, auto real) {
        encode_all<decltype(b)::value, decltype(in), decltype(real)>(p, v, coeffs.data(),
                                                                    threads_, first_bad);
      });
    });
    if (first_bad.load() != std::numeric_limits<u64>::max()) throw_bad_sample(p, v, first_bad);
  }

  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& v) override {
    validate(p);
    check_view(v);
    const u64 need = v.samples * v.planes * plane_bytes(p, v.height, v.width);
    if (coeffs.size() < need) throw error(errc::internal, "coefficient buffer too small");
    if (v.samples == 0) return;
    with_block(p.block, [&](auto b) {
      with_dtype(v.type, [&](auto out, auto real) {
        decode_all<decltype(b)::value, decltype(out), decltype(real)>(p, coeffs.data(), v,
                                                                     threads_);
      });
    });
  }

 private:
  static u64 plane_bytes(const codec_params& p, u64 h, u64 w) {
    auto cs = coeff_shape(p, h, w);
    return cs.rows * cs.cols * size_of(p.coeff);
  }
  template <typename View>
  static void check_view(const View& v) {
    if (v.samples > 0 && (v.data == nullptr || v.height == 0 || v.width == 0 || v.planes == 0)) {
      throw error(errc::internal, "empty or null sample view");
    }
  }
  int threads_;
};

}  // namespace

std::unique_ptr<backend> make_cpu_backend(const backend_options& options) {
  if (options.threads < 0) {
    throw error(errc::invalid_argument, "thread count must be 0 (all cores) or positive");
  }
  return std::make_unique<cpu_backend>(options);
}

std::string cpu_backend_description() {
#if defined(_OPENMP)
  return "cpu (OpenMP)";
#else
  return "cpu (serial)";
#endif
}

}  // namespace dctchop::detail
