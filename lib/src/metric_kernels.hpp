// Internal: the quality measurements' inner loops (error statistics, SSIM), compiled once per
// instruction set like the codec kernels (cpu_kernels.hpp): namespaces generic and, on
// x86-64, avx2. metrics.cpp picks a copy at run time.
#pragma once

#include <cstdint>

#include "dctchop/codec.hpp"
#include "ssim_window.hpp"

namespace dctchop::detail {

/** The memory for the running sums of the u8 planes whose SSIM is measured together (the
 *  planes of an interleaved row are split once for all of them). */
constexpr std::uint64_t u8_ssim_group_bytes = std::uint64_t(256) << 10;

/** The SSIM state's layout (metric_kernels.cpp, ssim_rows): rows padded to a multiple of 16
 *  columns, column sums 16 wider than that, and a ring of 9 rows (the window's 7, the row
 *  being taken, the row copied after it). */
constexpr std::uint64_t ssim_padded_width(std::uint64_t w) { return (w + 15) / 16 * 16; }
constexpr std::uint64_t ssim_sum_width(std::uint64_t w) { return ssim_padded_width(w) + 16; }
constexpr std::uint64_t ssim_ring_rows = ssim_window + 2;

/** The memory one u8 plane's SSIM state takes for rows of w values: two rings of u8 rows,
 *  4 column sums of int16 and 4 of int32, the window values in double. */
constexpr std::uint64_t u8_ssim_plane_bytes(std::uint64_t w) {
  return 2 * ssim_ring_rows * ssim_padded_width(w) + 4 * ssim_sum_width(w) * (2 + 4) +
         ssim_padded_width(w) * 8;
}

/** Values a partial sum of a sample's squared errors takes where the sums round (floats,
 *  32-bit integers): the sample's sum is its runs' sums in order, each run's its eight
 *  lanes' in order, so that a GPU sums the runs side by side and still in this order
 *  (quality_grid.hpp); over a whole sample, eight lanes left eight threads to sum a million
 *  values each. A multiple of the lanes, so that only the last run has values past them. */
constexpr std::uint64_t float_sum_run = 4096;
static_assert(float_sum_run % 8 == 0);

/** Squared error and max abs error between two samples, and the original's range. */
struct error_stats {
  double sse = 0, max_abs = 0, mn = 0, mx = 0;
};

}  // namespace dctchop::detail

#define DCTCHOP_DECLARE_METRIC_KERNELS(ns)                                                   \
  namespace dctchop::detail::ns {                                                            \
  /** Error statistics of sample n, whose planes*height*width values are contiguous in both \
   *  views (dense_samples). */                                                              \
  error_stats sample_stats(const const_sample_view& a, const const_sample_view& b,          \
                           std::uint64_t n);                                                 \
  /** The sum over the planes of sample n of each plane's mean SSIM (planes of at least  \
   *  7 x 7). */                                                                             \
  double sample_ssim(const const_sample_view& a, const const_sample_view& b,                \
                     std::uint64_t n, double range);                                         \
  /** Row r of plane c of sample n as doubles. */                                          \
  void load_row(const const_sample_view& v, std::uint64_t n, std::uint64_t c,               \
                std::uint64_t r, double* out);                                               \
  /** Mean SSIM of two row-major h x w planes of doubles (at least 7 x 7). */              \
  double dense_ssim(const double* a, const double* b, std::uint64_t h, std::uint64_t w,     \
                    double range);                                                           \
  }

DCTCHOP_DECLARE_METRIC_KERNELS(generic)
DCTCHOP_DECLARE_METRIC_KERNELS(avx2)
