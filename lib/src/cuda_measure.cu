// The quality measure on the device: three kernels whose threads run the functions of
// quality_grid.hpp (which tests/test_quality_grid.cpp runs on the CPU, thread by thread):
// each run's exact error statistics, each window row's SSIM sum, then each sample's figures.
#include "cuda_measure.hpp"

#include <algorithm>
#include <cstdint>

namespace dctchop::detail {
namespace {

using u64 = std::uint64_t;

/** CTAs of a grid that loops over `work` items a CTA at a time: one an item, up to a bound
 *  well within CUDA's grid (the loop takes the rest). */
unsigned ctas_over(u64 work) { return static_cast<unsigned>(std::clamp<u64>(work, 1, u64(1) << 20)); }

/** A CTA a run of a sample: its threads' parts merged in a tree (integers: in any order). */
template <typename T>
__global__ void __launch_bounds__(measure_threads)
    run_stats_kernel(measure_plan m, const T* a, const T* b, run_stats* runs) {
  __shared__ run_stats part[measure_threads];
  const u64 total = m.samples * m.runs;
  for (u64 i = blockIdx.x; i < total; i += gridDim.x) {
    part[threadIdx.x] = stats_thread(m, a, b, i / m.runs, i % m.runs, threadIdx.x, measure_threads);
    __syncthreads();
    for (unsigned half = measure_threads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) part[threadIdx.x] = merge_stats(part[threadIdx.x], part[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) runs[i] = part[0];
    __syncthreads();  // (part is written again for the next run)
  }
}

/** A CTA a window row (ssim_cta_of), a tile at a time, in the phases of quality_grid.hpp. */
template <typename T>
__global__ void __launch_bounds__(measure_threads)
    ssim_rows_kernel(measure_plan m, const T* a, const T* b, double* rows) {
  __shared__ column_sums cs[ssim_tile + ssim_window - 1];
  __shared__ double win[ssim_tile];
  __shared__ double lanes[8];
  const u64 total = m.samples * m.planes * m.rows;
  for (u64 cta = blockIdx.x; cta < total; cta += gridDim.x) {
    const ssim_cta at = ssim_cta_of(m, cta);
    const std::int32_t shift = plane_shift(m, a, at.sample, at.plane);
    double lane = 0;
    for (u64 x0 = 0; x0 < m.windows; x0 += ssim_tile) {
      const u64 n = std::min<u64>(ssim_tile, m.windows - x0);
      tile_columns(m, a, b, at, shift, x0, n, threadIdx.x, measure_threads, cs);
      __syncthreads();
      tile_windows<T>(m, cs, shift, n, threadIdx.x, measure_threads, win);
      __syncthreads();
      if (threadIdx.x < 8) add_tile_to_lane(win, x0, n, m.windows, threadIdx.x, lane);
      __syncthreads();  // (cs and win are written again for the next tile)
    }
    if (threadIdx.x < 8) lanes[threadIdx.x] = lane;
    __syncthreads();
    if (threadIdx.x == 0) rows[cta] = lane_total(lanes);
    __syncthreads();
  }
}

/** A thread a sample; its extremes merged into the batch's (integers: in any order). */
__global__ void finish_kernel(measure_plan m, const run_stats* runs, const double* rows,
                              double* out, run_stats* extremes) {
  const u64 s = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= m.samples) return;
  const run_stats e = finish_sample(m, runs + s * m.runs,
                                    m.ssim ? rows + s * m.planes * m.rows : nullptr,
                                    out + s * measure_outputs);
  atomicMax(&extremes->max_abs, e.max_abs);
  atomicMin(&extremes->lo, e.lo);
  atomicMax(&extremes->hi, e.hi);
}

template <typename T>
cudaError_t launch(const measure_plan& m, const void* a, const void* b, void* scratch, double* out,
                   run_stats* extremes, cudaStream_t s) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  auto* runs = static_cast<run_stats*>(scratch);
  auto* rows = reinterpret_cast<double*>(static_cast<unsigned char*>(scratch) + measure_runs_bytes(m));
  run_stats_kernel<T><<<ctas_over(m.samples * m.runs), measure_threads, 0, s>>>(m, pa, pb, runs);
  if (m.ssim) {
    ssim_rows_kernel<T><<<ctas_over(m.samples * m.planes * m.rows), measure_threads, 0, s>>>(
        m, pa, pb, rows);
  }
  const u64 ctas = (m.samples + measure_threads - 1) / measure_threads;
  finish_kernel<<<static_cast<unsigned>(ctas), measure_threads, 0, s>>>(m, runs, rows, out,
                                                                       extremes);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_measure(const measure_plan& m, dtype t, const void* a, const void* b,
                           void* scratch, double* out, run_stats* extremes, cudaStream_t s) {
  if (m.samples == 0) return cudaSuccess;
  switch (t) {
    case dtype::u8: return launch<std::uint8_t>(m, a, b, scratch, out, extremes, s);
    case dtype::i8: return launch<std::int8_t>(m, a, b, scratch, out, extremes, s);
    case dtype::u16: return launch<std::uint16_t>(m, a, b, scratch, out, extremes, s);
    case dtype::i16: return launch<std::int16_t>(m, a, b, scratch, out, extremes, s);
    default: return cudaErrorInvalidValue;  // (device_measures is false: the caller's mistake)
  }
}

}  // namespace dctchop::detail
