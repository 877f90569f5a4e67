// The quality measure on the device: kernels whose threads run the functions of
// quality_grid.hpp (which tests/test_quality_grid.cpp runs on the CPU, thread by thread):
// each sample's statistics (exact: a CTA a run; floats: a thread a lane of a run), each
// column slid down its plane (floats), each window row's SSIM sum, each sample's figures, and
// the batch's extremes.
#include "cuda_measure.hpp"

#include <algorithm>
#include <cstdint>

namespace dctchop::detail {
namespace {

using u64 = std::uint64_t;

/** CTAs of a grid that loops over `work` items a CTA at a time: one an item, up to a bound
 *  well within CUDA's grid (the loop takes the rest). */
unsigned ctas_over(u64 work) { return static_cast<unsigned>(std::clamp<u64>(work, 1, u64(1) << 20)); }

/** (exact) A CTA a run of a sample: its threads' parts merged in a tree (integers: in any
 *  order). */
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

/** (floats) A thread a lane of a run of a sample. */
template <typename T>
__global__ void lane_kernel(measure_plan m, const T* a, const T* b, lane_stats* lanes) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < lane_threads(m)) lanes[i] = lane_thread(m, a, b, i);
}

/** (floats, SSIM) A thread a column of a plane, down the whole plane. */
template <typename T>
__global__ void slide_kernel(measure_plan m, const T* a, const T* b, column_sums<double>* slid) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < slide_threads(m)) slide_column(m, a, b, i, slid);
}

/** A CTA a window row (ssim_cta_of), a tile at a time, in the phases of quality_grid.hpp. */
template <typename T>
__global__ void __launch_bounds__(measure_threads)
    ssim_rows_kernel(measure_plan m, const T* a, const T* b, const column_sums<double>* slid,
                     double* rows) {
  __shared__ column_sums<sums_of<T>> cs[ssim_tile + ssim_window - 1];
  __shared__ double win[ssim_tile];
  __shared__ double lanes[sum_lanes];
  const u64 total = m.samples * m.planes * m.rows;
  for (u64 cta = blockIdx.x; cta < total; cta += gridDim.x) {
    const ssim_cta at = ssim_cta_of(m, cta);
    const sums_of<T> shift = plane_shift(m, a, at.sample, at.plane);
    double lane = 0;
    for (u64 x0 = 0; x0 < m.windows; x0 += ssim_tile) {
      const u64 n = std::min<u64>(ssim_tile, m.windows - x0);
      tile_columns(m, a, b, slid, at, shift, x0, n, threadIdx.x, measure_threads, cs);
      __syncthreads();
      tile_windows<T>(m, cs, shift, n, threadIdx.x, measure_threads, win);
      __syncthreads();
      if (threadIdx.x < sum_lanes) add_tile_to_lane(win, x0, n, m.windows, threadIdx.x, lane);
      __syncthreads();  // (cs and win are written again for the next tile)
    }
    if (threadIdx.x < sum_lanes) lanes[threadIdx.x] = lane;
    __syncthreads();
    if (threadIdx.x == 0) rows[cta] = lane_total(lanes);
    __syncthreads();
  }
}

/** A thread a sample: its figures, and its extremes for reduce_kernel. */
__global__ void finish_kernel(measure_plan m, const unsigned char* stats, const double* rows,
                              double* out, extremes* sample_extremes) {
  const u64 s = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= m.samples) return;
  sample_extremes[s] = finish_sample(m, stats + s * stats_bytes(m),
                                     m.ssim ? rows + s * m.planes * m.rows : nullptr,
                                     out + s * measure_outputs);
}

/** One CTA: the samples' extremes merged (thread t: samples t, t + 256, ...; then a tree),
 *  and into *batch. The same order every run; it differs from the CPU's sample order only
 *  for a least or greatest value of 0, whose sign may then differ. */
__global__ void __launch_bounds__(measure_threads)
    reduce_kernel(u64 samples, const extremes* sample_extremes, extremes* batch) {
  __shared__ extremes part[measure_threads];
  extremes e = no_extremes();
  for (u64 s = threadIdx.x; s < samples; s += measure_threads) e = merge_extremes(e, sample_extremes[s]);
  part[threadIdx.x] = e;
  __syncthreads();
  for (unsigned half = measure_threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] = merge_extremes(part[threadIdx.x], part[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *batch = merge_extremes(*batch, part[0]);
}

/** CTAs of a grid of a thread an item (`threads` of them), or 0 past CUDA's grid (2^31 - 1
 *  CTAs), which launch() refuses: the stream's parts keep far fewer (32 MiB of input). */
unsigned ctas_for_threads(u64 threads) {
  const u64 ctas = (threads + measure_threads - 1) / measure_threads;
  return ctas <= 0x7fffffffu ? static_cast<unsigned>(ctas) : 0u;
}

template <typename T>
cudaError_t launch(const measure_plan& m, const void* a, const void* b, void* scratch, double* out,
                   extremes* batch, cudaStream_t s) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  if (ctas_for_threads(std::max(lane_threads(m), slide_threads(m))) == 0) {
    return cudaErrorInvalidValue;  // (nothing queued)
  }
  const measure_scratch at = measure_scratch_of(m);
  auto* base = static_cast<unsigned char*>(scratch);
  auto* sample_extremes = reinterpret_cast<extremes*>(base + at.sample_extremes);
  auto* rows = reinterpret_cast<double*>(base + at.rows);
  auto* slid = reinterpret_cast<column_sums<double>*>(base + at.slid);
  if constexpr (exact_sums_of<T>) {
    run_stats_kernel<T><<<ctas_over(m.samples * m.runs), measure_threads, 0, s>>>(
        m, pa, pb, reinterpret_cast<run_stats*>(base + at.stats));
  } else {
    lane_kernel<T><<<ctas_for_threads(lane_threads(m)), measure_threads, 0, s>>>(
        m, pa, pb, reinterpret_cast<lane_stats*>(base + at.stats));
    if (m.ssim) {
      slide_kernel<T><<<ctas_for_threads(slide_threads(m)), measure_threads, 0, s>>>(
          m, pa, pb, slid);
    }
  }
  if (m.ssim) {
    ssim_rows_kernel<T><<<ctas_over(m.samples * m.planes * m.rows), measure_threads, 0, s>>>(
        m, pa, pb, slid, rows);
  }
  finish_kernel<<<ctas_for_threads(m.samples), measure_threads, 0, s>>>(m, base + at.stats, rows,
                                                                         out, sample_extremes);
  reduce_kernel<<<1, measure_threads, 0, s>>>(m.samples, sample_extremes, batch);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_measure(const measure_plan& m, dtype t, const void* a, const void* b,
                           void* scratch, double* out, extremes* batch, cudaStream_t s) {
  if (m.samples == 0) return cudaSuccess;
  switch (t) {
    case dtype::u8: return launch<std::uint8_t>(m, a, b, scratch, out, batch, s);
    case dtype::i8: return launch<std::int8_t>(m, a, b, scratch, out, batch, s);
    case dtype::u16: return launch<std::uint16_t>(m, a, b, scratch, out, batch, s);
    case dtype::i16: return launch<std::int16_t>(m, a, b, scratch, out, batch, s);
    case dtype::f16: return launch<half_value>(m, a, b, scratch, out, batch, s);
    case dtype::f32: return launch<float>(m, a, b, scratch, out, batch, s);
    case dtype::f64: return launch<double>(m, a, b, scratch, out, batch, s);
    case dtype::i32: return launch<std::int32_t>(m, a, b, scratch, out, batch, s);
    case dtype::u32: return launch<std::uint32_t>(m, a, b, scratch, out, batch, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace dctchop::detail
