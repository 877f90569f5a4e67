/** @file device_conversions.hpp
 *  Runs each instruction of detail::device_conversions (scalar.hpp) on the GPU over given
 *  inputs, so that a GPU test can hold the hardware to tests/ptx_emulation.hpp, the
 *  emulation with which the host tests (DevicePaths) run the device paths. No CUDA types here:
 *  the test file that calls it is plain C++.
 */
#pragma once

#include <cstdint>
#include <vector>

namespace dctchop::test {

/** Inputs, all of one length: f and d are converted and are the first operands of max and
 *  min, f2 and d2 the second; a, b and c are the operands of cvt.pack.sat. */
struct conversion_inputs {
  std::vector<float> f, f2;
  std::vector<double> d, d2;
  std::vector<std::int32_t> a, b;
  std::vector<std::uint32_t> c;
};

/** What each instruction gave, element by element. */
struct conversion_outputs {
  std::vector<std::int32_t> rni_s32_f, rni_s32_d;
  std::vector<std::uint32_t> rni_u32_f, rni_u32_d;
  std::vector<float> max_f, min_f;
  std::vector<double> max_d, min_d;
  std::vector<std::uint16_t> rn_f16;
  std::vector<std::uint32_t> pack_u8, pack_s8;
};

/** Runs the instructions on the current CUDA device; throws std::runtime_error when a CUDA
 *  call fails or the inputs' lengths differ. */
conversion_outputs convert_on_device(const conversion_inputs& in);

}  // namespace dctchop::test
