// The instructions of detail::device_conversions (scalar.hpp), each run on the GPU over the
// caller's inputs: see device_conversions.hpp.

#include "device_conversions.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "dctchop/detail/scalar.hpp"

namespace dctchop::test {
namespace {

struct views {
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

__global__ void conversions_kernel(views v, std::size_t n) {
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

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct device_free {
  void operator()(void* p) const { cudaFree(p); }
};

/** A device copy of `host`, or room for as many elements (upload false); kept in `held`. */
template <typename T>
T* on_device(const std::vector<T>& host, std::vector<std::unique_ptr<void, device_free>>& held,
             bool upload = true) {
  void* p = nullptr;
  check(cudaMalloc(&p, host.size() * sizeof(T) + 1), "cudaMalloc");
  held.emplace_back(p);
  if (upload) {
    check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  return static_cast<T*>(p);
}

template <typename T>
void download(std::vector<T>& host, const T* dev, std::size_t n) {
  host.resize(n);
  check(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace

conversion_outputs convert_on_device(const conversion_inputs& in) {
  const std::size_t n = in.f.size();
  for (std::size_t m : {in.f2.size(), in.d.size(), in.d2.size(), in.a.size(), in.b.size(),
                        in.c.size()}) {
    if (m != n) throw std::runtime_error("convert_on_device: inputs of different lengths");
  }
  conversion_outputs out;
  out.rni_s32_f.resize(n);
  out.rni_s32_d.resize(n);
  out.rni_u32_f.resize(n);
  out.rni_u32_d.resize(n);
  out.max_f.resize(n);
  out.min_f.resize(n);
  out.max_d.resize(n);
  out.min_d.resize(n);
  out.rn_f16.resize(n);
  out.pack_u8.resize(n);
  out.pack_s8.resize(n);
  std::vector<std::unique_ptr<void, device_free>> held;
  views v{};
  v.f = on_device(in.f, held);
  v.f2 = on_device(in.f2, held);
  v.d = on_device(in.d, held);
  v.d2 = on_device(in.d2, held);
  v.a = on_device(in.a, held);
  v.b = on_device(in.b, held);
  v.c = on_device(in.c, held);
  v.rni_s32_f = on_device(out.rni_s32_f, held, false);
  v.rni_s32_d = on_device(out.rni_s32_d, held, false);
  v.rni_u32_f = on_device(out.rni_u32_f, held, false);
  v.rni_u32_d = on_device(out.rni_u32_d, held, false);
  v.max_f = on_device(out.max_f, held, false);
  v.min_f = on_device(out.min_f, held, false);
  v.max_d = on_device(out.max_d, held, false);
  v.min_d = on_device(out.min_d, held, false);
  v.rn_f16 = on_device(out.rn_f16, held, false);
  v.pack_u8 = on_device(out.pack_u8, held, false);
  v.pack_s8 = on_device(out.pack_s8, held, false);
  conversions_kernel<<<256, 256>>>(v, n);
  check(cudaGetLastError(), "conversions_kernel");
  check(cudaDeviceSynchronize(), "conversions_kernel");
  download(out.rni_s32_f, v.rni_s32_f, n);
  download(out.rni_s32_d, v.rni_s32_d, n);
  download(out.rni_u32_f, v.rni_u32_f, n);
  download(out.rni_u32_d, v.rni_u32_d, n);
  download(out.max_f, v.max_f, n);
  download(out.min_f, v.min_f, n);
  download(out.max_d, v.max_d, n);
  download(out.min_d, v.min_d, n);
  download(out.rn_f16, v.rn_f16, n);
  download(out.pack_u8, v.pack_u8, n);
  download(out.pack_s8, v.pack_s8, n);
  return out;
}

}  // namespace dctchop::test
