// Internal: the CUDA backend's quality measure on the device (cuda_measure.cu), whose threads
// run the functions of quality_grid.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include "dctchop/types.hpp"
#include "quality_grid.hpp"

namespace dctchop::detail {

/** Queue on stream s the measure of `a` (original) against `b` (decoded), both device
 *  memory laid out as `m` says, of type t, with measure_scratch_of(m).bytes of device
 *  scratch: measure_outputs doubles a sample into `out`, and the samples' extremes merged
 *  into `*batch` (device memory, which the caller sets to no_extremes() before the first
 *  batch it merges). Returns the launches' error (cudaGetLastError), for the caller's check. */
cudaError_t launch_measure(const measure_plan& m, dtype t, const void* a, const void* b,
                           void* scratch, double* out, extremes* batch, cudaStream_t s);

}  // namespace dctchop::detail
