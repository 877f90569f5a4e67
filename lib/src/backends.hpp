// Internal: constructors of the compiled-in backends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"

namespace dctchop::detail {

/** Every backend's check of the views it is given: one with samples has data and non-empty
 *  planes. */
template <typename View>
void check_view(const View& v) {
  if (v.samples > 0 && (v.data == nullptr || v.height == 0 || v.width == 0 || v.planes == 0)) {
    throw error(errc::invalid_argument, "empty or null sample view");
  }
}

/** Every backend's check of the coefficient buffer it is given: at least `need` bytes, and
 *  memory where it has any (a span of a null pointer and a size crashed the encode). */
template <typename Span>
void check_coeffs(const Span& coeffs, std::uint64_t need) {
  if (coeffs.size() < need) throw error(errc::invalid_argument, "coefficient buffer too small");
  if (need > 0 && coeffs.data() == nullptr) {
    throw error(errc::invalid_argument, "null coefficient buffer");
  }
}

std::unique_ptr<backend> make_cpu_backend(const backend_options& options);
std::string cpu_backend_description();

/** Explain, as an error, why sample `n` of `v` could not be encoded: a NaN or Inf in it, or a
 *  coefficient too large for p.coeff (naming a type that can hold it). `v` is host memory. */
[[noreturn]] void throw_bad_sample(const codec_params& p, const const_sample_view& v,
                                   std::uint64_t n);

/** Ends the CUDA backend's message for a GPU that it cannot run on: what `--backend cuda`
 *  can do instead (`automatic`, which does so, drops it). */
inline constexpr std::string_view use_cpu_hint = "; or use --backend cpu";

/** The CUDA backend (cuda_backend.cu, when built): error(backend_unavailable) without a
 *  device, or with one that none of the kernels' architectures runs on. */
std::unique_ptr<backend> make_cuda_backend(const backend_options& options);
std::string cuda_backend_description();

/** backend_options::start_in_background: a starting_backend (starting_backend.hpp) that makes
 *  the CUDA backend, on device 0 (of CUDA_VISIBLE_DEVICES), and meanwhile runs the calls on
 *  the CPU backend; `on_fallback` empty for `cuda`, set for `automatic` (its note). nullptr
 *  where no GPU's device file is seen (or CUDA_VISIBLE_DEVICES hides them all): the runtime
 *  says so at once, so the caller makes the backend as without the option. `before_pin`
 *  (tests) runs on the start's thread once the device is up, before the buffers handed out
 *  so far are page-locked; given, the device files are not looked for. */
std::unique_ptr<backend> start_cuda_backend(
    const backend_options& options, const std::function<void(const std::string&)>& on_fallback,
    const std::function<void()>& before_pin = {});

}  // namespace dctchop::detail
