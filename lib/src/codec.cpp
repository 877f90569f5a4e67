#include "dctchop/codec.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "backends.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/matrix_form.hpp"
#include "dctchop/error.hpp"

namespace dctchop {

void validate(const codec_params& p) {
  if (!is_block_size(p.block)) {
    throw error(errc::invalid_argument,
                "block size " + std::to_string(p.block) + " is not one of 4, 8, 16, 32");
  }
  if (p.chop < 1 || p.chop > p.block) {
    throw error(errc::invalid_argument, "chop " + std::to_string(p.chop) + " is outside 1.." +
                                            std::to_string(p.block) + " for block " +
                                            std::to_string(p.block));
  }
  if (!std::isfinite(p.offset)) throw error(errc::invalid_argument, "offset is not finite");
  switch (p.coeff) {  // (one out of the enum, a cast, was stored as f16's bytes and read so)
    case coeff_type::f16:
    case coeff_type::bf16:
    case coeff_type::f32:
    case coeff_type::i16: return;
  }
  throw error(errc::invalid_argument, "coefficient type " +
                                          std::to_string(static_cast<int>(p.coeff)) +
                                          " is not one of f16, bf16, f32, i16");
}

std::vector<double> dct_matrix(int block) {
  // (-3 gave 9 values, 0 none; 2^20 asked for 8 TiB, std::bad_alloc, not this error)
  if (block < 1 || block > max_dct_matrix_block) {
    throw error(errc::invalid_argument,
                "DCT matrix of block " + std::to_string(block) + ": the block is 1 to " +
                    std::to_string(max_dct_matrix_block) + " (the codec's are 4, 8, 16, 32)");
  }
  const int b = block;
  std::vector<double> t(static_cast<std::size_t>(b) * b);
  for (int u = 0; u < b; ++u) {
    const double c = u == 0 ? std::sqrt(1.0 / b) : std::sqrt(2.0 / b);
    for (int x = 0; x < b; ++x) {
      t[static_cast<std::size_t>(u) * b + x] =
          c * std::cos((2.0 * x + 1.0) * u * std::numbers::pi / (2.0 * b));
    }
  }
  return t;
}

decode_matrices decode_matrix_dims(const codec_params& p, std::uint64_t height,
                                   std::uint64_t width) {
  validate(p);
  if (height == 0 || width == 0) {
    throw error(errc::invalid_argument, "decode matrices of a " + std::to_string(height) + " x " +
                                            std::to_string(width) +
                                            " plane: a plane has at least one row and column");
  }
  constexpr std::uint64_t most = std::uint64_t(1) << 40;  // (no sums below can wrap)
  if (height > most || width > most) {
    throw error(errc::invalid_argument, "decode matrices of a " + std::to_string(height) + " x " +
                                            std::to_string(width) + " plane: too large");
  }
  const std::uint64_t b = static_cast<std::uint64_t>(p.block), k = static_cast<std::uint64_t>(p.chop);
  const std::uint64_t hb = (height + b - 1) / b, wb = (width + b - 1) / b;
  decode_matrices m;
  m.hp = hb * b;
  m.wp = wb * b;
  m.kh = hb * k;
  m.kw = wb * k;
  return m;
}

decode_matrices make_decode_matrices(const codec_params& p, std::uint64_t height,
                                     std::uint64_t width) {
  decode_matrices m = decode_matrix_dims(p, height, width);
  const std::uint64_t b = static_cast<std::uint64_t>(p.block), k = static_cast<std::uint64_t>(p.chop);
  const std::uint64_t hb = m.hp / b, wb = m.wp / b;
  // Dense matrices, O(H^2) and O(W^2) values: up to 2^30 values (8 GiB) each, which planes of
  // 32768 x 32768 at chop 4 and block 8 reach.
  constexpr std::uint64_t most = std::uint64_t(1) << 30;
  std::uint64_t lt_values = 0, r_values = 0;
  if (__builtin_mul_overflow(m.hp, m.kh, &lt_values) ||
      __builtin_mul_overflow(m.kw, m.wp, &r_values) || lt_values > most || r_values > most) {
    throw error(errc::invalid_argument,
                "decode matrices of a " + std::to_string(height) + " x " + std::to_string(width) +
                    " plane at block " + std::to_string(p.block) + ", chop " +
                    std::to_string(p.chop) + " would be too large (Lt " + std::to_string(m.hp) +
                    " x " + std::to_string(m.kh) + ", R " + std::to_string(m.kw) + " x " +
                    std::to_string(m.wp) + "; at most 2^30 values each)");
  }
  const auto t = dct_matrix(p.block);
  m.lt.assign(lt_values, 0.0);
  m.r.assign(r_values, 0.0);
  for (std::uint64_t i = 0; i < hb; ++i)
    for (std::uint64_t u = 0; u < k; ++u)
      for (std::uint64_t x = 0; x < b; ++x) m.lt[(i * b + x) * m.kh + i * k + u] = t[u * b + x];
  for (std::uint64_t j = 0; j < wb; ++j)
    for (std::uint64_t v = 0; v < k; ++v)
      for (std::uint64_t y = 0; y < b; ++y) m.r[(j * k + v) * m.wp + j * b + y] = t[v * b + y];
  return m;
}

coeff_plane_shape coeff_shape(const codec_params& p, std::uint64_t height, std::uint64_t width) {
  validate(p);  // (block 0 divided by zero: SIGFPE)
  const std::uint64_t b = static_cast<std::uint64_t>(p.block);
  const std::uint64_t k = static_cast<std::uint64_t>(p.chop);
  // (ceil(n / b) without n + b - 1, which wraps for n near 2^64)
  coeff_plane_shape s;
  if (__builtin_mul_overflow(height / b + (height % b != 0), k, &s.rows) ||
      __builtin_mul_overflow(width / b + (width % b != 0), k, &s.cols)) {
    throw error(errc::invalid_argument, "a plane of " + std::to_string(height) + " x " +
                                            std::to_string(width) +
                                            " has more coefficient rows or columns than 2^64");
  }
  return s;
}

std::uint64_t coeff_bytes_per_sample(const codec_params& p, const geometry& g) {
  auto s = coeff_shape(p, g.height, g.width);
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(s.rows, s.cols, &bytes) ||
      __builtin_mul_overflow(bytes, g.planes, &bytes) ||
      __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(size_of(p.coeff)), &bytes)) {
    throw error(errc::invalid_argument, "a sample of " + std::to_string(g.planes) + " planes of " +
                                            std::to_string(g.height) + " x " +
                                            std::to_string(g.width) +
                                            " has more coefficient bytes than 2^64");
  }
  return bytes;
}

namespace {
template <typename View, typename Ptr>
View view_of(const geometry& g, dtype t, Ptr data, std::uint64_t samples) {
  View v;
  v.data = data;
  v.type = t;
  v.samples = samples;
  v.planes = g.planes;
  v.height = g.height;
  v.width = g.width;
  const auto h = static_cast<std::int64_t>(g.height);
  const auto w = static_cast<std::int64_t>(g.width);
  const auto c = static_cast<std::int64_t>(g.planes);
  switch (g.lay) {
    case layout::nhwc:
      v.stride_sample = h * w * c; v.stride_plane = 1; v.stride_row = w * c; v.stride_col = c;
      break;
    case layout::nchw:
      v.stride_sample = c * h * w; v.stride_plane = h * w; v.stride_row = w; v.stride_col = 1;
      break;
    default:
      v.stride_sample = h * w; v.stride_plane = h * w; v.stride_row = w; v.stride_col = 1;
      break;
  }
  return v;
}
}  // namespace

const_sample_view make_view(const geometry& g, dtype t, const void* data, std::uint64_t samples) {
  return view_of<const_sample_view>(g, t, data, samples);
}
sample_view make_view(const geometry& g, dtype t, void* data, std::uint64_t samples) {
  return view_of<sample_view>(g, t, data, samples);
}

std::unique_ptr<backend> make_backend(backend_kind kind, const backend_options& options) {
  return make_backend(kind, options, nullptr);
}

namespace {
/** A CUDA error's text for `automatic`'s note: without the hint to use the CPU, which it does. */
[[maybe_unused]] std::string without_cpu_hint(std::string why) {
  if (why.ends_with(detail::use_cpu_hint)) why.resize(why.size() - detail::use_cpu_hint.size());
  return why;
}
}  // namespace

std::unique_ptr<backend> make_backend(
    backend_kind kind, const backend_options& options,
    [[maybe_unused]] const std::function<void(const std::string& why)>& on_cpu_fallback) {
  if (options.threads < 0 || options.threads > max_threads) {
    throw error(errc::invalid_argument, "threads " + std::to_string(options.threads) +
                                            ": expected 0 (every core) to " +
                                            std::to_string(max_threads));
  }
  if (options.device < -1) {
    throw error(errc::invalid_argument, "device " + std::to_string(options.device) +
                                            ": expected a CUDA device's index (0 or more), or "
                                            "-1 for the current one");
  }
  switch (kind) {
    case backend_kind::cpu:
      if (options.device != -1) {
        throw error(errc::invalid_argument,
                    "device " + std::to_string(options.device) +
                        ": the CPU backend runs on no CUDA device (a device is for the cuda "
                        "and auto backends)");
      }
      return detail::make_cpu_backend(options);
    case backend_kind::cuda:
#if defined(DCTCHOP_HAVE_CUDA)
      if (options.start_in_background) {
        if (auto b = detail::start_cuda_backend(options, nullptr)) return b;
      }
      return detail::make_cuda_backend(options);
#else
      throw error(errc::backend_unavailable,
                  "this dctchop was built without a CUDA backend; use --backend cpu");
#endif
    case backend_kind::automatic:
#if defined(DCTCHOP_HAVE_CUDA)
      if (options.start_in_background) {
        // Told on the thread of the call that finds the device unusable, or not at all.
        auto tell = [on_cpu_fallback](const std::string& what) {
          if (on_cpu_fallback) on_cpu_fallback(without_cpu_hint(what));
        };
        if (auto b = detail::start_cuda_backend(options, tell)) return b;
      }
      if (cuda::available()) {
        try {
          return detail::make_cuda_backend(options);
        } catch (const error& e) {  // a device that cannot be used (no code for it, no context)
          if (e.code() != errc::backend_unavailable) throw;
          if (on_cpu_fallback) on_cpu_fallback(without_cpu_hint(e.what()));
        }
      }
#endif
      return detail::make_cpu_backend(options);
  }
  throw error(errc::internal, "unknown backend kind");
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> v{detail::cpu_backend_description()};
#if defined(DCTCHOP_HAVE_CUDA)
  v.push_back(detail::cuda_backend_description() + " (" + cuda::device_status() + ")");
#endif
  return v;
}

}  // namespace dctchop
