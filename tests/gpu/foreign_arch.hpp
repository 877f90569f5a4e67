/** @file foreign_arch.hpp
 *  A kernel built for sm_80 only, as machine code and no PTX (tests/CMakeLists.txt builds
 *  foreign_arch.cu with CUDA_ARCHITECTURES 80-real): a GPU of another architecture has no
 *  code for it, as a T4 has none for the backend's kernels in a build for sm_80 and sm_90.
 *  For the GPU test that such a device is named, with what to build, before the launch and at
 *  it.
 */
#pragma once

#include <cuda_runtime_api.h>

namespace dctchop::test {

/** The kernel's address, for cudaFuncGetAttributes. */
const void* sm80_only_kernel();
/** Launch it (one thread, which writes nothing) and return the launch's error. */
cudaError_t launch_sm80_only();

}  // namespace dctchop::test
