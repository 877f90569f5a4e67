// Run-time dispatch to the compile-time instantiations of the kernels, shared by the CPU
// kernels (cpu_kernels.cpp) and the CUDA backend (cuda_backend.cu). Internal header.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "dctchop/types.hpp"

namespace dctchop::detail {

/** Calls fn(std::integral_constant<int, B>{}) for the block size: the kernels are compiled
 *  once per block size, with their loops unrolled. */
template <typename Fn>
void with_block(int b, Fn&& fn) {
  switch (b) {
    case 4: fn(std::integral_constant<int, 4>{}); return;
    case 8: fn(std::integral_constant<int, 8>{}); return;
    case 16: fn(std::integral_constant<int, 16>{}); return;
    case 32: fn(std::integral_constant<int, 32>{}); return;
  }
  throw error(errc::invalid_argument, "block size " + std::to_string(b) + " is not 4, 8, 16 or 32");
}

/** Calls fn(T{}, Real{}) for the element type T of dtype `t`: f64, i32 and u32 compute in
 *  double, the rest in float (f16 as half_value, converted to and from float at load and
 *  store). */
template <typename Fn>
void with_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::u8: fn(std::uint8_t{}, float{}); return;
    case dtype::u16: fn(std::uint16_t{}, float{}); return;
    case dtype::i16: fn(std::int16_t{}, float{}); return;
    case dtype::f32: fn(float{}, float{}); return;
    case dtype::f64: fn(double{}, double{}); return;
    case dtype::f16: fn(half_value{}, float{}); return;
    case dtype::i8: fn(std::int8_t{}, float{}); return;
    case dtype::i32: fn(std::int32_t{}, double{}); return;
    case dtype::u32: fn(std::uint32_t{}, double{}); return;
  }
  // A caller's view whose dtype is out of the enum (a cast): its data cannot be read.
  throw error(errc::invalid_argument,
              "dtype " + std::to_string(static_cast<int>(t)) + " is not one dctchop knows");
}

}  // namespace dctchop::detail
