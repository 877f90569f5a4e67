/** @file cuda.hpp
 *  The CUDA backend's device-memory entry points, for loaders that already hold the
 *  coefficients on the GPU. No CUDA types here: a stream is passed as `void*` (a cudaStream_t;
 *  nullptr is the default stream). In a build without CUDA every call but built(),
 *  available(), device_count(), device_status() and is_pinned() (false) throws
 *  error(backend_unavailable).
 */
#pragma once

#include <cstdint>
#include <memory>
#include <memory_resource>
#include <string>

#include "dctchop/codec.hpp"
#include "dctchop/types.hpp"

namespace dctchop::cuda {

/** Whether this dctchop was built with the CUDA backend. */
bool built() noexcept;
/** CUDA devices present (0 without the backend, a driver or a device). */
int device_count() noexcept;
/** What the runtime says of the devices, for messages: "1 device: 0 NVIDIA H200 (sm_90, 140
 *  GiB, PCI 0000:1b:00)" (each by its index, as backend_options::device takes it; several
 *  separated by "; "), "no device" with the runtime's reason ("no device:
 *  cudaErrorInsufficientDriver, ..."), or "not built". Starts no context on the devices. */
std::string device_status();
/** built() and a device present: what `--backend auto` checks. */
inline bool available() noexcept { return device_count() > 0; }

/** How the direct kernels share the work among threads; all give identical results.
 *  `lines`: a thread per column of a few block rows, one under another (decode), or per kept
 *  row of a block (encode),
 *  so that neighbouring threads touch neighbouring values. `blocks`: a thread per block.
 *  `automatic` (the default): the faster measured (an H200, 2026-12-04: README), which is
 *  `blocks` to encode at block size 8 (up to 2.2 times `lines`), `lines` to encode at other
 *  block sizes (not measured; `blocks` keeps a whole block a thread in local memory) and
 *  `lines` to decode (2.4 to 6.3 times `blocks`). */
enum class kernel_layout { lines, blocks, automatic };

/** Decode `samples` samples of geometry `g` (layout, planes, height, width; g.samples is
 *  ignored) from coefficients in device memory to values of type `type` in device memory,
 *  densely laid out per g.lay. Queued on `stream`; returns before the work is done. Both
 *  pointers must stay valid until the stream has run it, and be aligned to their elements
 *  (2 or 4 bytes for the coefficients, the dtype's size for the output): a null or
 *  misaligned one is error(invalid_argument), before anything is queued. */
void decode_device_async(const codec_params& params, const geometry& g, dtype type,
                         std::uint64_t samples, const void* device_coeffs, void* device_out,
                         void* stream, kernel_layout layout = kernel_layout::automatic);
/** decode_device_async(), then wait for the stream. */
void decode_device(const codec_params& params, const geometry& g, dtype type,
                   std::uint64_t samples, const void* device_coeffs, void* device_out,
                   void* stream = nullptr, kernel_layout layout = kernel_layout::automatic);
/** Queue an encode from device memory to device memory on `stream`. `device_first_bad`, a
 *  device word the caller allocates, receives the first sample (within the batch) with a value
 *  the coefficient type cannot hold, NaN or Inf, or ~0 (all ones) when every sample fits:
 *  read it once the stream has run. Pointers as decode_device_async()'s (the word aligned to
 *  8 bytes). For callers that check later (a pipeline, a benchmark);
 *  encode_device() checks at once and says what is wrong with the sample. */
void encode_device_async(const codec_params& params, const geometry& g, dtype type,
                         std::uint64_t samples, const void* device_in, void* device_coeffs,
                         unsigned long long* device_first_bad, void* stream,
                         kernel_layout layout = kernel_layout::automatic);
/** Encode from device memory to device memory and wait; throws like backend::encode (a value
 *  the coefficient type cannot hold, NaN or Inf), naming the first such sample. */
void encode_device(const codec_params& params, const geometry& g, dtype type,
                   std::uint64_t samples, const void* device_in, void* device_coeffs,
                   void* stream = nullptr, kernel_layout layout = kernel_layout::automatic);

/** The portable matrix-form decode on the GPU (dctchop/matrix_form.hpp): per
 *  plane X' = Lt * Cplane * R as two f32 GEMMs with cuBLAS, then crop, offset and convert.
 *  Lt and R are block-diagonal, so the GEMMs multiply by their blocks (T_K^t and T_K) and skip
 *  the zeros: O(K) work per value instead of O(H + W). It holds a cuBLAS handle, the blocks
 *  of the last block size and chop, and scratch memory: keep one and reuse it. Calls on
 *  different streams take turns on the scratch (each waits, on the device, for the previous
 *  call's work), so give each stream that decodes at the same time a decoder of its own. Not
 *  thread-safe: calls from several host threads at once need a decoder each (or a lock). A
 *  stream may be destroyed as soon as its calls are queued. It belongs to the device current
 *  when it is made: its calls and its destruction run there whatever device is current then
 *  (and give the caller's back; a thread without a CUDA context is left on the decoder's
 *  device, rather than have a context started on device 0), so pass it streams and buffers
 *  of that device.
 *  Its sums run in another order than the direct kernel's, so float outputs agree to float
 *  rounding and integer outputs can differ by one where a value lies within rounding of a
 *  half; i32 and u32, which the direct kernel computes in double, agree to the float
 *  GEMMs' rounding, about 2^-24 of the largest magnitudes. Constructing one without the
 *  backend or a device
 *  throws error(backend_unavailable). */
class gemm_decoder {
 public:
  gemm_decoder();
  ~gemm_decoder();
  gemm_decoder(const gemm_decoder&) = delete;
  gemm_decoder& operator=(const gemm_decoder&) = delete;
  /** As decode_device_async(). */
  void decode_async(const codec_params& params, const geometry& g, dtype type,
                    std::uint64_t samples, const void* device_coeffs, void* device_out,
                    void* stream);
  /** decode_async(), then wait for the stream. */
  void decode(const codec_params& params, const geometry& g, dtype type, std::uint64_t samples,
              const void* device_coeffs, void* device_out, void* stream = nullptr);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/** Page-locked host memory (cudaHostAlloc, portable to every device), which the GPU copies
 *  from and to asynchronously and without staging. Getting it is slow (the pages are locked and
 *  mapped): put a recycling_resource (dctchop/host_memory.hpp) over it. `device` is the one
 *  whose context allocates. Thread-safe. Without the backend or the device:
 *  error(backend_unavailable). */
std::shared_ptr<std::pmr::memory_resource> pinned_memory(int device);
/** Whether the host range [p, p + bytes) is page-locked (pinned_memory(), cudaHostAlloc or
 *  cudaHostRegister), so that the device copies from and to it directly. Both ends are
 *  checked: for a range within one allocation or registration. It asks the CUDA runtime, which
 *  starts a context on the thread's current device if it has none: call it with the device
 *  in use current. False without the backend. */
bool is_pinned(const void* p, std::size_t bytes) noexcept;

/** Device memory for a loader (loaders::device_loader): `count` slots, each an output buffer
 *  of `out_bytes`, a device buffer of `in_bytes` for coefficients, and an event; one stream.
 *  Without the backend or the device: error(backend_unavailable). */
class device_ring {
 public:
  device_ring(int device, std::size_t count, std::uint64_t in_bytes, std::uint64_t out_bytes);
  ~device_ring();
  device_ring(const device_ring&) = delete;
  device_ring& operator=(const device_ring&) = delete;
  /** Queue: copy `bytes` of host coefficients to the device and decode `samples` samples into
   *  slot `slot`'s output buffer. Returns that buffer's device address; it holds the batch once
   *  wait(slot) has returned. `host_coeffs` must stay valid and unchanged until then; in
   *  pinned memory (pinned_memory()) the copy runs asynchronously, from pageable memory the
   *  driver stages it and the call returns only when it has been read. */
  void* decode_async(std::size_t slot, const codec_params& params, const geometry& g,
                     dtype type, std::uint64_t samples, const void* host_coeffs,
                     std::uint64_t bytes);
  /** Wait until slot `slot`'s queued decode has finished. */
  void wait(std::size_t slot);
  /** The consumer is done with slot `slot` once the work queued so far on `stream` (a
   *  cudaStream_t; nullptr: the default stream) has run: the next decode into the slot waits
   *  for that on the device, not on the host. Thread-safe (a DLPack deleter may call it). */
  void released(std::size_t slot, void* stream);
  /** decode_async(), then wait(). */
  void* decode(std::size_t slot, const codec_params& params, const geometry& g, dtype type,
               std::uint64_t samples, const void* host_coeffs, std::uint64_t bytes);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dctchop::cuda
