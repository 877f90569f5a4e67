/** @file metrics.hpp
 *  Error figures as DESIGN.md ("Quality figures") defines them, accumulated chunk by chunk.
 */
#pragma once

#include <cstdint>
#include <optional>

#include "dctchop/codec.hpp"
#include "dctchop/types.hpp"

namespace dctchop {

/** Accumulates squared and absolute error between original and decoded values, and the range
 *  of the original, over as many chunks as the dataset has. */
class error_accumulator {
 public:
  /** Add the values of `original` and `decoded` (same geometry and dtype). */
  void add(const const_sample_view& original, const const_sample_view& decoded);
  /** Combine another accumulator's totals into this one. */
  void merge(const error_accumulator& other);

  std::uint64_t count() const noexcept { return count_; }
  double sum_squared_error() const noexcept { return sse_; }
  double max_abs_error() const noexcept { return max_abs_; }
  double original_min() const noexcept { return min_; }
  double original_max() const noexcept { return max_; }
  double mse() const noexcept;
  double rmse() const noexcept;

 private:
  std::uint64_t count_ = 0;
  double sse_ = 0.0;
  double max_abs_ = 0.0;
  double min_ = 0.0, max_ = 0.0;
};

/** Data range R: the dtype's range for integer types (255 for u8), max - min of the original
 *  for float types. */
double data_range(dtype t, const error_accumulator& acc);

/** PSNR = 20 log10(R) - 10 log10(MSE) in dB; nullopt when MSE is 0 (infinite PSNR). */
std::optional<double> psnr(double range, double mse);

/** The figures that compress reports and the archive records. */
struct quality {
  double mse = 0, rmse = 0, nrmse = 0, max_abs_error = 0, range = 0;
  std::optional<double> psnr_db;  ///< nullopt: lossless (infinite PSNR)
};
quality summarize(dtype t, const error_accumulator& acc);

}  // namespace dctchop
