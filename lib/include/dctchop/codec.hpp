/** @file codec.hpp
 *  Blockwise DCT+Chop (formats/ARCHIVE.md, "The codec", restates the design): parameters, sample views and the backend
 *  interface that every execution backend (CPU serial/OpenMP, CUDA) implements.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/host_memory.hpp"
#include "dctchop/types.hpp"

namespace dctchop {

/** Settings of the transform. */
struct codec_params {
  int block = 8;                        ///< B: 4, 8, 16 or 32
  int chop = 4;                         ///< K: 1..B coefficients kept per axis
  coeff_type coeff = coeff_type::f16;   ///< storage type of the kept coefficients
  double offset = 0.0;                  ///< o, subtracted before the transform
};

/** The block sizes B the codec takes: 4, 8, 16 and 32. */
constexpr bool is_block_size(long long b) { return b == 4 || b == 8 || b == 16 || b == 32; }

/** Throws error(invalid_argument) when B or K is out of range. */
void validate(const codec_params& p);

/** The largest block dct_matrix() makes (a 4096 x 4096 matrix takes 128 MiB). */
inline constexpr int max_dct_matrix_block = 4096;

/** The orthonormal DCT-II matrix T (B x B, row-major): T[u][x] = c(u) cos((2x+1)u pi / 2B).
 *  error(invalid_argument) for a block below 1 or above max_dct_matrix_block. */
std::vector<double> dct_matrix(int block);

/** Size of the coefficient plane of an H x W plane: (ceil(H/B)*K, ceil(W/B)*K). */
struct coeff_plane_shape {
  std::uint64_t rows = 0, cols = 0;
};
coeff_plane_shape coeff_shape(const codec_params& p, std::uint64_t height, std::uint64_t width);

/** Bytes of coefficients for one sample of `g`. Both check `p` (validate) first;
 *  error(invalid_argument) for a count past 2^64. */
std::uint64_t coeff_bytes_per_sample(const codec_params& p, const geometry& g);

/** A strided view of `samples` samples, each of `planes` planes of height x width values.
 *  Strides count elements, not bytes. */
template <typename Ptr>
struct basic_sample_view {
  Ptr data = nullptr;
  dtype type = dtype::u8;
  std::uint64_t samples = 0, planes = 1, height = 0, width = 0;
  std::int64_t stride_sample = 0, stride_plane = 0, stride_row = 0, stride_col = 1;
  /** A view of mutable data is a view of the same data read only (encode takes one). (A
   *  template whose type depends on P: nvcc and clang warn of a conversion to the class
   *  itself in the const view otherwise.) */
  template <typename P = Ptr, typename = std::enable_if_t<std::is_same_v<P, void*>>>
  operator basic_sample_view<std::add_pointer_t<const std::remove_pointer_t<P>>>() const {
    return {data, type, samples, planes, height, width,
            stride_sample, stride_plane, stride_row, stride_col};
  }
};
using sample_view = basic_sample_view<void*>;
using const_sample_view = basic_sample_view<const void*>;

/** View of `samples` consecutive samples laid out per `g.lay` (C order) starting at `data`. */
const_sample_view make_view(const geometry& g, dtype t, const void* data, std::uint64_t samples);
sample_view make_view(const geometry& g, dtype t, void* data, std::uint64_t samples);

class quality_accumulator;  // metrics.hpp
struct quality_batch;

/** An execution backend. Coefficients are laid out [sample][plane][row][col], each plane of
 *  coeff_shape(), little-endian values of params.coeff. Calls may come from several threads
 *  (loaders may share one backend): the CPU backend runs them side by side, the CUDA backend
 *  one at a time. A buffer or view too small for its call is error(invalid_argument). */
class backend {
 public:
  virtual ~backend() = default;
  /** "cpu" or "cuda". */
  virtual std::string name() const = 0;
  /** Transform and chop. Throws error(out_of_range) naming a wider coefficient type when a
   *  value does not fit params.coeff, error(bad_input) for NaN or Inf input. */
  virtual void encode(const codec_params& params, const const_sample_view& in,
                      std::span<std::byte> coeffs) = 0;
  /** Invert: pad the kept coefficients with zeros, inverse transform, crop, add the offset
   *  back, then round and clamp to out.type. */
  virtual void decode(const codec_params& params, std::span<const std::byte> coeffs,
                      const sample_view& out) = 0;
  /** CPU threads that one encode() or decode() call runs on. */
  virtual int threads() const { return 1; }
  /** A backend of the same kind whose calls run on the calling thread alone, so that a
   *  pipeline can run threads() of them at once, one chunk each, with no barrier inside a
   *  chunk; nullptr when this backend does not split that way (the pipeline then makes one
   *  call at a time). Encode and decode results are the same as this backend's. */
  virtual std::unique_ptr<backend> single_threaded() const { return nullptr; }
  /** Where host buffers that encode() and decode() read and write should live (nullptr: the
   *  heap, which the CPU backend reads as fast as any). The CUDA backend gives page-locked
   *  memory: its copies to and from the device then start straight from the caller's buffers,
   *  without a staging copy. Any buffer works with any backend; this is only the fast one.
   *  Thread-safe; the resource recycles freed blocks, so asking again is cheap. */
  virtual std::shared_ptr<std::pmr::memory_resource> host_memory() const { return nullptr; }
  /** Decode `coeffs` and measure the result against `original` into `into`, with the figures
   *  that `acc.measure(original, decoded, threads, into)` gives, bit for bit, on the backend's
   *  device: the decoded values need not come back to the host, nor the host's cores measure
   *  them. Returns false, having done nothing, where the backend does not (the CPU backend;
   *  CUDA for views whose samples are not dense, and for samples whose measure would keep
   *  more than 1 GiB of device memory): dctchop::decode_and_measure (metrics.hpp) then
   *  decodes and measures on the host. */
  virtual bool decode_measured(const codec_params& params, std::span<const std::byte> coeffs,
                               const const_sample_view& original, const quality_accumulator& acc,
                               quality_batch& into) {
    (void)params, (void)coeffs, (void)original, (void)acc, (void)into;
    return false;
  }
  /** Waits until a backend started in the background (backend_options::start_in_background)
   *  is up, and throws what kept it from starting: error(backend_unavailable) for a CUDA
   *  backend asked for by name on a machine where it cannot run, even where every call so far
   *  ran on the CPU while it started. Call it before trusting a job's output. Other backends
   *  return at once. */
  virtual void wait_started() {}
};

/** `bytes` (unset) in the memory that `be` reads and writes fastest (backend::host_memory():
 *  page-locked for CUDA), or when it has none or no room there, from the heap (2 MiB and
 *  more: mapped, 2 MiB aligned, in transparent huge pages where the system gives them):
 *  any buffer works with any backend. Size it for its largest use at once; growing it later allocates from the
 *  backend's memory without this fallback. */
byte_buffer host_buffer(const backend& be, std::uint64_t bytes = 0);

/** Which backend to run. `automatic` takes CUDA when built and a device is present. */
enum class backend_kind { cpu, cuda, automatic };

/** The most CPU threads a backend takes: more is a mistake (OpenMP fails to start them, or
 *  worse), not a machine. */
inline constexpr int max_threads = 4096;

struct backend_options {
  int threads = 0;  ///< CPU threads, 0..max_threads; 0 means every core (OpenMP)
  /** CUDA (`cuda`, or `automatic`, where a GPU's device file is seen): start `device` (0
   *  where it is -1, not the calling thread's current device) on a thread of its own,
   *  and meanwhile run the calls on the CPU backend, which gives the same bytes, rather than
   *  wait the quarter of a second or more that the driver takes to start. Calls that come
   *  before the start run on the CPU, those after it on the device; a pipeline makes one at
   *  a time (threads() is 1, as for CUDA). host_memory() is pageable until the start, then
   *  page-locked, the blocks of 2 MiB and more handed out before it included. Where the
   *  device cannot start, `cuda` throws its error from the next call and from
   *  backend::wait_started(), and `automatic` goes on with the CPU (one call at a time). The
   *  command-line tool sets it; a library caller that sets it calls wait_started() before
   *  trusting the output, and after an error, which may come of a start that failed. */
  bool start_in_background = false;
  /** The CUDA device (`cuda`, or `automatic` where it takes CUDA): an index among the devices
   *  that CUDA_VISIBLE_DEVICES shows, or -1 for the calling thread's current device (device 0
   *  where it chose none, and with start_in_background). A device that does not exist
   *  is error(invalid_argument), with `automatic` too where any GPU is present; the CPU backend
   *  refuses any index but -1. Each call of a CUDA backend makes its device current and gives
   *  the calling thread's back, but a thread that had no CUDA context (that chose no device)
   *  is left with the backend's device current: setting device 0 back would start a context
   *  on GPU 0 for it. */
  int device = -1;
};

/** Construct a backend; error(backend_unavailable) when it was not built or has no device it
 *  can run on (CUDA: a GPU that none of the architectures the kernels were built for runs
 *  on), error(invalid_argument) for threads outside 0..max_threads or a device index that is
 *  not there (see backend_options::device). `automatic` takes CUDA when that works, else the
 *  CPU. */
std::unique_ptr<backend> make_backend(backend_kind kind, const backend_options& options = {});
/** As above; where `automatic` takes the CPU although a CUDA device is present (one that the
 *  kernels were not built for, or whose context cannot be made), `on_cpu_fallback` is told
 *  why, for a note to the user. */
std::unique_ptr<backend> make_backend(
    backend_kind kind, const backend_options& options,
    const std::function<void(const std::string& why)>& on_cpu_fallback);

/** Names of the backends compiled in, e.g. {"cpu (OpenMP)"}. */
std::vector<std::string> compiled_backends();

}  // namespace dctchop
