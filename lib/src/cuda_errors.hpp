// Internal: the CUDA backend's errors (cuda_backend.cu), for its sources and the GPU tests.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

namespace dctchop::detail {

/** Throws error(backend_unavailable) for CUDA error `e` of `call` at file:line, with CUDA's
 *  name and text for it, having cleared it (see the definition). Where it says that the
 *  device has no code for a kernel (cudaErrorNoKernelImageForDevice,
 *  cudaErrorInvalidDeviceFunction), the message also says which GPU it is and what to build
 *  for it (unrunnable_device_text). */
[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);

/** Why `kernel` (the address of a __global__ function), built for the CUDA architectures
 *  `built_for`, cannot run on `device` (unrunnable_device_text), or "" when it can. Asking
 *  makes the device's context, where none was: the runtime loads the kernel's code for it.
 *  Other failures (the context cannot be made, say) throw as throw_cuda does. */
std::string why_kernel_cannot_run(const void* kernel, int device, std::string_view built_for);

}  // namespace dctchop::detail
