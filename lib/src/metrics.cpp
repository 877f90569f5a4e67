#include "dctchop/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dctchop/error.hpp"

namespace dctchop {
namespace {

template <typename T>
void accumulate(const const_sample_view& a, const const_sample_view& b, std::uint64_t& count,
                double& sse, double& max_abs, double& mn, double& mx) {
  const auto* pa = static_cast<const T*>(a.data);
  const auto* pb = static_cast<const T*>(b.data);
  double local_sse = 0, local_max = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (std::uint64_t n = 0; n < a.samples; ++n)
    for (std::uint64_t c = 0; c < a.planes; ++c)
      for (std::uint64_t r = 0; r < a.height; ++r) {
        const T* ra = pa + static_cast<std::int64_t>(n) * a.stride_sample +
                      static_cast<std::int64_t>(c) * a.stride_plane +
                      static_cast<std::int64_t>(r) * a.stride_row;
        const T* rb = pb + static_cast<std::int64_t>(n) * b.stride_sample +
                      static_cast<std::int64_t>(c) * b.stride_plane +
                      static_cast<std::int64_t>(r) * b.stride_row;
        for (std::uint64_t x = 0; x < a.width; ++x) {
          const double va = static_cast<double>(ra[static_cast<std::int64_t>(x) * a.stride_col]);
          const double vb = static_cast<double>(rb[static_cast<std::int64_t>(x) * b.stride_col]);
          const double d = va - vb;
          local_sse += d * d;
          local_max = std::max(local_max, std::fabs(d));
          lo = std::min(lo, va);
          hi = std::max(hi, va);
        }
      }
  const std::uint64_t n = a.samples * a.planes * a.height * a.width;
  if (n == 0) return;
  mn = count == 0 ? lo : std::min(mn, lo);
  mx = count == 0 ? hi : std::max(mx, hi);
  count += n;
  sse += local_sse;
  max_abs = std::max(max_abs, local_max);
}

}  // namespace

void error_accumulator::add(const const_sample_view& a, const const_sample_view& b) {
  if (a.type != b.type || a.samples != b.samples || a.planes != b.planes ||
      a.height != b.height || a.width != b.width) {
    throw error(errc::internal, "error_accumulator: views differ in shape or dtype");
  }
  switch (a.type) {
    case dtype::u8: accumulate<std::uint8_t>(a, b, count_, sse_, max_abs_, min_, max_); break;
    case dtype::u16: accumulate<std::uint16_t>(a, b, count_, sse_, max_abs_, min_, max_); break;
    case dtype::i16: accumulate<std::int16_t>(a, b, count_, sse_, max_abs_, min_, max_); break;
    case dtype::f32: accumulate<float>(a, b, count_, sse_, max_abs_, min_, max_); break;
    case dtype::f64: accumulate<double>(a, b, count_, sse_, max_abs_, min_, max_); break;
  }
}

void error_accumulator::merge(const error_accumulator& o) {
  if (o.count_ == 0) return;
  min_ = count_ == 0 ? o.min_ : std::min(min_, o.min_);
  max_ = count_ == 0 ? o.max_ : std::max(max_, o.max_);
  count_ += o.count_;
  sse_ += o.sse_;
  max_abs_ = std::max(max_abs_, o.max_abs_);
}

double error_accumulator::mse() const noexcept {
  return count_ == 0 ? 0.0 : sse_ / static_cast<double>(count_);
}
double error_accumulator::rmse() const noexcept { return std::sqrt(mse()); }

double data_range(dtype t, const error_accumulator& acc) {
  switch (t) {
    case dtype::u8: return 255.0;
    case dtype::u16: return 65535.0;
    case dtype::i16: return 65535.0;
    default: return acc.original_max() - acc.original_min();
  }
}

std::optional<double> psnr(double range, double mse) {
  if (!(mse > 0.0)) return std::nullopt;
  if (!(range > 0.0)) return 0.0;  // constant float data with an error: no meaningful range
  return 20.0 * std::log10(range) - 10.0 * std::log10(mse);
}

quality summarize(dtype t, const error_accumulator& acc) {
  quality q;
  q.mse = acc.mse();
  q.rmse = acc.rmse();
  q.max_abs_error = acc.max_abs_error();
  q.range = data_range(t, acc);
  q.nrmse = q.range > 0 ? q.rmse / q.range : 0.0;
  q.psnr_db = psnr(q.range, q.mse);
  return q;
}

}  // namespace dctchop
