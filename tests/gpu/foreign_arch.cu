#include "foreign_arch.hpp"

namespace dctchop::test {
namespace {

__global__ void sm80_only(int* out) {
  if (out != nullptr) *out = 1;
}

}  // namespace

const void* sm80_only_kernel() {
  return reinterpret_cast<const void*>(&sm80_only);
}

cudaError_t launch_sm80_only() {
  sm80_only<<<1, 1>>>(nullptr);
  return cudaGetLastError();
}

}  // namespace dctchop::test
