/** @file device_conversions.hpp
 *  Runs each instruction of detail::device_conversions (scalar.hpp) on the GPU, so that a GPU
 *  test (CudaConversions, test_cuda.cpp) can hold the hardware to tests/ptx_emulation.hpp,
 *  the emulation with which the host tests (DevicePaths) run the device paths. The test owns
 *  the device memory; this runs the kernel over it.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace dctchop::test {

/** Device arrays of n elements each: f and d are converted and are the first operands of
 *  max and min, f2 and d2 the second; a, b and c are the operands of cvt.pack.sat; the rest
 *  take what each instruction gives (the packs 0 before sm_72, which has no cvt.pack.sat). */
struct conversion_views {
  const float *f, *f2;
  const double *d, *d2;
  const std::int32_t *a, *b;
  const std::uint32_t* c;
  std::int32_t *rni_s32_f, *rni_s32_d;
  std::uint32_t *rni_u32_f, *rni_u32_d;
  float *max_f, *min_f;
  double *max_d, *min_d;
  std::uint16_t* rn_f16;
  std::uint32_t *pack_u8, *pack_s8;
};

/** Runs the instructions over the n elements on the current device and waits for them; the
 *  launch's or the run's CUDA error. */
cudaError_t run_conversions(const conversion_views& v, std::size_t n);

}  // namespace dctchop::test
