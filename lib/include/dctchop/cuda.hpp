/** @file cuda.hpp
 *  The CUDA backend's device-memory entry points, for loaders that already hold the
 *  coefficients on the GPU. No CUDA types here: a stream is passed as `void*` (a cudaStream_t;
 *  nullptr is the default stream). In a build without CUDA every call but available() and
 *  device_count() throws error(backend_unavailable).
 */
#pragma once

#include <cstdint>

#include "dctchop/codec.hpp"
#include "dctchop/types.hpp"

namespace dctchop::cuda {

/** Whether this dctchop was built with the CUDA backend. */
bool built() noexcept;
/** CUDA devices present (0 without the backend, a driver or a device). */
int device_count() noexcept;
/** built() and a device present: what `--backend auto` checks. */
inline bool available() noexcept { return device_count() > 0; }

/** Decode `samples` samples of geometry `g` (layout, planes, height, width; g.samples is
 *  ignored) from coefficients in device memory to values of type `type` in device memory,
 *  densely laid out per g.lay. Queued on `stream`; returns before the work is done. Both
 *  pointers must stay valid until the stream has run it. */
void decode_device_async(const codec_params& params, const geometry& g, dtype type,
                         std::uint64_t samples, const void* device_coeffs, void* device_out,
                         void* stream);
/** decode_device_async(), then wait for the stream. */
void decode_device(const codec_params& params, const geometry& g, dtype type,
                   std::uint64_t samples, const void* device_coeffs, void* device_out,
                   void* stream = nullptr);
/** Encode from device memory to device memory and wait; throws like backend::encode (a value
 *  the coefficient type cannot hold, NaN or Inf), naming the first such sample. */
void encode_device(const codec_params& params, const geometry& g, dtype type,
                   std::uint64_t samples, const void* device_in, void* device_coeffs,
                   void* stream = nullptr);

}  // namespace dctchop::cuda
