// Internal: what to tell a user whose GPU cannot run the CUDA kernels built into dctchop. No
// CUDA types: compiled in every build, so that the host tests cover it.
#pragma once

#include <string>
#include <string_view>

namespace dctchop::detail {

/** Why CUDA device `device` (`name`, compute capability major.minor; a major of 0 or less:
 *  not known) cannot run kernels built for the CUDA architectures `built_for` (CMake's
 *  CUDA_ARCHITECTURES, "80,90" or "native"), CUDA's name for the error being `cuda_error`
 *  (cudaErrorNoKernelImageForDevice, say), and what to do: build for the device's
 *  architecture (the CMake setting that adds it), or, where the kernels were built for it
 *  already (the driver cannot compile their PTX, say), update the driver. One line, no
 *  trailing period. */
std::string unrunnable_device_text(int device, std::string_view name, int major, int minor,
                                   std::string_view built_for, std::string_view cuda_error);

}  // namespace dctchop::detail
