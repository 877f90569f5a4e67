// The instructions of detail::device_conversions (scalar.hpp), each run on the GPU over the
// caller's device arrays: see device_conversions.hpp.

#include "device_conversions.hpp"

#include "dctchop/detail/scalar.hpp"

namespace dctchop::test {
namespace {

__global__ void conversions_kernel(conversion_views v, std::size_t n) {
#if defined(__CUDA_ARCH__)  // (device_conversions exists in device code only)
  using ops = detail::device_conversions;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    v.rni_s32_f[i] = ops::rni_s32(v.f[i]);
    v.rni_u32_f[i] = ops::rni_u32(v.f[i]);
    v.rni_s32_d[i] = ops::rni_s32(v.d[i]);
    v.rni_u32_d[i] = ops::rni_u32(v.d[i]);
    v.max_f[i] = ops::max(v.f[i], v.f2[i]);
    v.min_f[i] = ops::min(v.f[i], v.f2[i]);
    v.max_d[i] = ops::max(v.d[i], v.d2[i]);
    v.min_d[i] = ops::min(v.d[i], v.d2[i]);
    v.rn_f16[i] = ops::rn_f16(v.f[i]);
#if __CUDA_ARCH__ >= 720  // (the instruction's first architecture; the test skips it before)
    v.pack_u8[i] = ops::pack_sat_u8(v.a[i], v.b[i], v.c[i]);
    v.pack_s8[i] = ops::pack_sat_s8(v.a[i], v.b[i], v.c[i]);
#else
    v.pack_u8[i] = 0;
    v.pack_s8[i] = 0;
#endif
  }
#endif
}

}  // namespace

cudaError_t run_conversions(const conversion_views& v, std::size_t n) {
  conversions_kernel<<<256, 256>>>(v, n);
  const cudaError_t launched = cudaGetLastError();
  return launched != cudaSuccess ? launched : cudaDeviceSynchronize();
}

}  // namespace dctchop::test
