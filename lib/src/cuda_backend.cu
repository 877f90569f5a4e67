// CUDA backend: the per-block functions of detail/block.hpp, one thread per block.
//
// Host batches are streamed through pinned staging buffers on two CUDA streams: while the
// device encodes or decodes one part, the host copies the next part into the other staging
// buffer, and the copies to and from the device overlap the kernels of the other stream.
// The device-memory entry points (dctchop/cuda.hpp) run the same kernels on a caller's stream.
#include <cublas_v2.h>
#include <cuda.h>  // the driver API's types only: it is not linked
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "cuda_arch.hpp"
#include "cuda_errors.hpp"
#include "cuda_grid.hpp"
#include "cuda_measure.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/detail/block.hpp"
#include "dctchop/error.hpp"
#include "dctchop/host_memory.hpp"
#include "dctchop/matrix_form.hpp"
#include "dctchop/metrics.hpp"
#include "dispatch.hpp"
#include "starting_backend.hpp"

/** Every CUDA runtime call goes through this: a failure throws error(backend_unavailable)
 *  with the call, the place and CUDA's name for the error. */
#define DCTCHOP_CUDA_CHECK(call)                                                        \
  do {                                                                                  \
    const cudaError_t dctchop_e_ = (call);                                              \
    if (dctchop_e_ != cudaSuccess) ::dctchop::detail::throw_cuda(dctchop_e_, #call, __FILE__, __LINE__); \
  } while (0)

/** Every cuBLAS call likewise. */
#define DCTCHOP_CUBLAS_CHECK(call)                                                       \
  do {                                                                                   \
    const cublasStatus_t dctchop_s_ = (call);                                            \
    if (dctchop_s_ != CUBLAS_STATUS_SUCCESS) {                                           \
      throw ::dctchop::error(::dctchop::errc::backend_unavailable,                       \
                             std::string("cuBLAS: ") + #call + " failed (status " +      \
                                 std::to_string(static_cast<int>(dctchop_s_)) + ") at " + \
                                 __FILE__ + ":" + std::to_string(__LINE__));             \
    }                                                                                    \
  } while (0)

namespace dctchop::detail {

namespace {

/** Whether `e` says that the device has no code for a kernel that it can run: none of the
 *  architectures it was built for runs there (the launch's error, or cudaFuncGetAttributes's),
 *  or the driver cannot compile its PTX for it (older than the toolkit that made the PTX, or
 *  without its PTX compiler). */
bool no_code_for_device(cudaError_t e) {
  return e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
         e == cudaErrorUnsupportedPtxVersion || e == cudaErrorJitCompilerNotFound;
}

/** unrunnable_device_text for `device`, as the runtime describes it, and error `e`. */
std::string unrunnable_text(int device, cudaError_t e, std::string_view built_for) {
  cudaDeviceProp prop{};
  const bool known = cudaGetDeviceProperties(&prop, device) == cudaSuccess;
  if (!known) (void)cudaGetLastError();
  return unrunnable_device_text(device, known ? prop.name : "", known ? prop.major : 0,
                                known ? prop.minor : 0, built_for, cudaGetErrorName(e));
}

}  // namespace

[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  // The runtime keeps a failure as the thread's last error until it is read: left there, the
  // next launch check (cudaGetLastError) would report this one, after a caller that caught
  // it (an out-of-memory, say) went on. A sticky error keeps coming back whatever is done.
  (void)cudaGetLastError();
  std::string text = std::string("CUDA: ") + call + " failed (" + cudaGetErrorName(e) + ": " +
                     cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line);
  // A GPU that none of the kernels' architectures runs on (a T4 for a build for sm_80 and
  // sm_90, say): which one it is and what to build.
  if (int device = 0; no_code_for_device(e)) {
    if (cudaGetDevice(&device) == cudaSuccess) {
      text += "; " + unrunnable_text(device, e, DCTCHOP_CUDA_ARCHITECTURES);
    } else {
      (void)cudaGetLastError();
    }
  }
  throw error(errc::backend_unavailable, text);
}

/** cuBLAS, loaded when the first gemm_decoder is made: linking it would make every start of
 *  the command-line tool load hundreds of megabytes of libraries (70 ms), GPU or not. */
struct cublas_api {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*sgemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                          int, int, int, const float*, const float*, int,
                                          long long, const float*, int, long long, const float*,
                                          float*, int, long long, int) = nullptr;

  static const cublas_api& get() {
    static const cublas_api api = load();  // once per process, thread-safe
    if (api.create == nullptr) {
      throw error(errc::backend_unavailable,
                  std::string("cannot load cuBLAS (" DCTCHOP_CUBLAS_LIBRARY "): ") + api.why);
    }
    return api;
  }

 private:
  std::string why;
  static cublas_api load() {
    cublas_api a;
    void* lib = dlopen(DCTCHOP_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      a.why = e != nullptr ? e : "not found";
      return a;
    }
    a.create = reinterpret_cast<decltype(a.create)>(dlsym(lib, "cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(dlsym(lib, "cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    a.sgemm_strided_batched = reinterpret_cast<decltype(a.sgemm_strided_batched)>(
        dlsym(lib, "cublasSgemmStridedBatched"));
    if (!a.destroy || !a.set_stream || !a.sgemm_strided_batched) {
      a.create = nullptr;
      a.why = "a function is missing from it";
    }
    return a;  // the library stays loaded for the process's life
  }
};

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

/** For a call whose failure is deliberately let go (clean-up, and calls in destructors or on
 *  an error path): clears the error it leaves, which the next launch check would otherwise
 *  report as its own. */
void cuda_ignore(cudaError_t e) noexcept {
  if (e != cudaSuccess) (void)cudaGetLastError();
}

// ---- RAII for device memory and streams (pinned host memory: cuda::pinned_memory) ---------

struct device_free {
  void operator()(void* p) const noexcept { cuda_ignore(cudaFree(p)); }
};
using device_ptr = std::unique_ptr<void, device_free>;

device_ptr device_alloc(std::size_t bytes) {
  void* p = nullptr;
  DCTCHOP_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
  return device_ptr(p);
}

/** A device word for one call on `s`: allocated and freed in stream order where the device
 *  has memory pools, since cudaFree waits for the whole device, other callers' streams
 *  included. */
class stream_flag {
 public:
  explicit stream_flag(cudaStream_t s) : s_(s) {
    int device = 0, pools = 0;
    DCTCHOP_CUDA_CHECK(cudaGetDevice(&device));
    DCTCHOP_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    pooled_ = pools != 0;
    // A device may say it has pools and still refuse them (some virtualised drivers): then
    // the plain allocation, after clearing the error that the refusal left.
    if (pooled_ && cudaMallocAsync(&p_, sizeof(unsigned long long), s_) != cudaSuccess) {
      (void)cudaGetLastError();
      pooled_ = false;
    }
    if (!pooled_) DCTCHOP_CUDA_CHECK(cudaMalloc(&p_, sizeof(unsigned long long)));
  }
  ~stream_flag() {
    if (pooled_) {
      cuda_ignore(cudaFreeAsync(p_, s_));
    } else {
      cuda_ignore(cudaFree(p_));
    }
  }
  stream_flag(const stream_flag&) = delete;
  stream_flag& operator=(const stream_flag&) = delete;
  unsigned long long* get() const { return static_cast<unsigned long long*>(p_); }

 private:
  cudaStream_t s_;
  void* p_ = nullptr;
  bool pooled_ = false;
};

// The encode's cudaMemset of the bad-sample flag runs on the default stream, which the lanes'
// blocking streams wait for only when it is the legacy one.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "cuda_backend.cu relies on the legacy default stream: build it without --default-stream per-thread"
#endif

class stream {
 public:
  // Blocking by default: they wait for work on the legacy default stream, such as the
  // cudaMemset of the bad-sample flag that precedes the parts. A non-blocking stream runs
  // beside it: a loader's ring decodes the next batch while a framework's training step runs
  // on the default stream (a blocking one would take turns with it).
  explicit stream(bool non_blocking = false) {
    DCTCHOP_CUDA_CHECK(cudaStreamCreateWithFlags(
        &s_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
  }
  ~stream() { cuda_ignore(cudaStreamDestroy(s_)); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { DCTCHOP_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

/** Whether the calling thread has a current CUDA context. The runtime cannot tell (on a thread
 *  that chose no device, cudaGetDevice says 0), so this asks the driver, which the runtime has
 *  loaded by now. dctchop does not link the driver, so that it starts where none is installed;
 *  <cuda.h> gives only the function's type. True when the driver cannot be asked. */
bool thread_has_context() {
  using get_fn = decltype(&cuCtxGetCurrent);
  static std::atomic<get_fn> cached{nullptr};
  get_fn get = cached.load(std::memory_order_acquire);
  if (get == nullptr) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib != nullptr) get = reinterpret_cast<get_fn>(dlsym(lib, "cuCtxGetCurrent"));
    if (get == nullptr) return true;  // not loaded yet: ask again next time
    cached.store(get, std::memory_order_release);
  }
  CUcontext ctx = nullptr;
  return get(&ctx) == CUDA_SUCCESS && ctx != nullptr;
}

/** Makes `device` current for a scope and gives the caller's back (a framework's current
 *  device must not change under it). A thread that had no context stays on `device` instead:
 *  setting device 0 back would start a context there (cudaSetDevice does, since CUDA 12), on
 *  a GPU that another process may own, or that every rank of a job (each on its own GPU) would
 *  then hold memory on. Such threads are mostly dctchop's own (a pipeline's workers, a
 *  loader's prefetch thread, the background start) or a deleter's on whatever thread drops a
 *  tensor; a caller's thread that chose no device is left with the backend's current. */
class device_guard {
 public:
  explicit device_guard(int device) {
    DCTCHOP_CUDA_CHECK(cudaGetDevice(&old_));  // (first: the driver is loaded by now)
    const bool unbound = !thread_has_context();
    if (unbound) old_ = device;  // nothing to give back
    restore_ = old_ != device;
    if (unbound || restore_) DCTCHOP_CUDA_CHECK(cudaSetDevice(device));
  }
  ~device_guard() {
    if (restore_) cuda_ignore(cudaSetDevice(old_));
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int old_ = 0;
  bool restore_ = false;
};

/** For a destructor that frees `device`'s streams, memory or cuBLAS handle: that device made
 *  current (a thread without a context stays on it, rather than start one on device 0), or
 *  nothing when that fails (the device is gone: what can still be freed is). */
inline std::optional<device_guard> guard_for_release(int device) noexcept {
  try {
    return std::optional<device_guard>(std::in_place, device);
  } catch (...) {
    return std::nullopt;
  }
}

// ---- kernels: each thread runs its function of cuda_grid.hpp ------------------------------

template <int BT, typename In, typename Real, int SC>
__global__ void encode_kernel(dct_table<Real> tab, int b, int k, const In* in, batch_geometry g,
                              Real offset, coeff_code code, std::byte* coeffs,
                              unsigned long long* first_bad, u64 sample_base) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const u64 bad = encode_thread<BT, SC>(i, tab.t, b, k, in, g, offset, code, coeffs);
  if (bad != all_fit) atomicMin(first_bad, static_cast<unsigned long long>(sample_base + bad));
}

template <int BT, typename Out, typename Real>
__global__ void decode_kernel(dct_table<Real> tab, int b, int k, const std::byte* coeffs,
                              coeff_code code, Out* out, batch_geometry g, Real offset) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  decode_thread<BT>(i, tab.t, b, k, coeffs, code, out, g, offset);
}

template <int BT, typename In, typename Real>
__global__ void encode_rows_kernel(dct_table<Real> tab, int b, int k, const In* in,
                                   batch_geometry g, Real offset, coeff_code code,
                                   std::byte* coeffs, unsigned long long* first_bad,
                                   u64 sample_base) {
  const unsigned pos = blockIdx.y * blockDim.x + threadIdx.x;
  const u64 bad = encode_line_thread<BT>(blockIdx.x, pos, tab.t, b, k, in, g, offset, code, coeffs);
  if (bad != all_fit) atomicMin(first_bad, static_cast<unsigned long long>(sample_base + bad));
}

template <int BT, int KT, typename Out, typename Real, int P>
__global__ void decode_columns_kernel(dct_table<Real> tab, int b, int k, const std::byte* coeffs,
                                      coeff_code code, Out* out, batch_geometry g, Real offset) {
  const unsigned pos = blockIdx.y * blockDim.x + threadIdx.x;
  if constexpr (compact_decode<BT, KT>()) {
    // The compact kernel reads T at run-time indices, different in each thread (its column)
    // and the same in all (its rows): from shared memory, not the constant bank, which serves
    // a warp's different addresses one after another.
    __shared__ Real t[32 * 32];
    for (unsigned i = threadIdx.x; i < 32 * 32; i += blockDim.x) t[i] = tab.t[i];
    __syncthreads();
    decode_line_thread<BT, KT, Out, Real, P>(blockIdx.x, pos, t, b, k, coeffs, code, out, g,
                                             offset);
  } else {
    decode_line_thread<BT, KT, Out, Real, P>(blockIdx.x, pos, tab.t, b, k, coeffs, code, out,
                                             g, offset);
  }
}

/** Coefficients of any storage type to f32, for the GEMMs. */
__global__ void coeffs_to_f32(const std::byte* src, coeff_code code, u64 count, float* dst) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) dst[i] = load_coeff<float>(src, code, i);
}

template <typename Out>
__global__ void store_planes(const float* x, u64 first, u64 n, u64 hp, u64 wp, batch_geometry g,
                             double offset, Out* out) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  store_thread(i, x, first, n, hp, wp, g, offset, out);
}

using cuda::kernel_layout;

void launch_encode(const codec_params& p, const batch_geometry& g, dtype t, const void* d_in,
                   void* d_coeffs, unsigned long long* d_first_bad, cudaStream_t s,
                   u64 sample_base, kernel_layout kl) {
  if (g.samples == 0) return;
  with_dtype(t, [&](auto in, auto real) {
    using In = decltype(in);
    using Real = decltype(real);
    with_block(p.block, [&](auto bt) {
      constexpr int BT = decltype(bt)::value;
      static const auto tab = make_table<Real>(BT);  // once per instantiation
      const auto* src = static_cast<const In*>(d_in);
      const auto offset = static_cast<Real>(p.offset);
      const auto code = static_cast<coeff_code>(p.coeff);
      auto* dst = static_cast<std::byte*>(d_coeffs);
      const line_grid lg = row_grid(g, p.chop);
      if (uses_lines(chosen_layout(kl, true, p.block), lg)) {
        const dim3 grid(static_cast<unsigned>(lg.rows), ctas_for(lg.width));
        encode_rows_kernel<BT, In, Real><<<grid, threads_per_cta, 0, s>>>(
            tab, p.block, p.chop, src, g, offset, code, dst, d_first_bad, sample_base);
      } else {
        with_encode_stride<BT, In>(g, [&](auto sc) {
          constexpr int SC = decltype(sc)::value;
          encode_kernel<BT, In, Real, SC><<<ctas_for(block_threads(g)), threads_per_cta, 0, s>>>(
              tab, p.block, p.chop, src, g, offset, code, dst, d_first_bad, sample_base);
        });
      }
    });
  });
  DCTCHOP_CUDA_CHECK(cudaGetLastError());
}

void launch_decode(const codec_params& p, const batch_geometry& g, dtype t, const void* d_coeffs,
                   void* d_out, cudaStream_t s, kernel_layout kl) {
  if (g.samples == 0) return;
  with_dtype(t, [&](auto out, auto real) {
    using Out = decltype(out);
    using Real = decltype(real);
    with_block(p.block, [&](auto bt) {
      constexpr int BT = decltype(bt)::value;
      static const auto tab = make_table<Real>(BT);
      const auto* src = static_cast<const std::byte*>(d_coeffs);
      const auto code = static_cast<coeff_code>(p.coeff);
      auto* dst = static_cast<Out*>(d_out);
      const auto offset = static_cast<Real>(p.offset);
      with_decode_chop<BT, Real>(p.chop, code, src, [&](auto kt) {
        constexpr int KT = decltype(kt)::value;
        with_decode_planes<BT, KT, Out>(g, [&](auto pt) {
          constexpr int P = decltype(pt)::value;
          const line_grid lg = decode_line_grid<BT, KT, Out, Real, P>(g);
          if (uses_lines(chosen_layout(kl, false, p.block), lg)) {
            const dim3 grid(static_cast<unsigned>(lg.rows), ctas_for(lg.width));
            decode_columns_kernel<BT, KT, Out, Real, P><<<grid, threads_per_cta, 0, s>>>(
                tab, p.block, p.chop, src, code, dst, g, offset);
          } else {
            decode_kernel<BT, Out, Real><<<ctas_for(block_threads(g)), threads_per_cta, 0, s>>>(
                tab, p.block, p.chop, src, code, dst, g, offset);
          }
        });
      });
    });
  });
  DCTCHOP_CUDA_CHECK(cudaGetLastError());
}

geometry geometry_of_view(const const_sample_view& v, layout lay) {
  geometry g;
  g.lay = lay;
  g.samples = v.samples;
  g.planes = v.planes;
  g.height = v.height;
  g.width = v.width;
  return g;
}

/** The layout of a dense view (as make_view builds them); nullopt for other strides. */
template <typename View>
std::optional<layout> dense_layout_of(const View& v) {
  const i64 h = static_cast<i64>(v.height), w = static_cast<i64>(v.width),
            c = static_cast<i64>(v.planes);
  if (v.stride_sample == h * w * c) {
    if (v.stride_col == 1 && v.stride_row == w && (c == 1 || v.stride_plane == h * w)) {
      return c == 1 ? layout::nhw : layout::nchw;
    }
    if (v.stride_col == c && v.stride_row == w * c && v.stride_plane == 1) return layout::nhwc;
  }
  return std::nullopt;
}

/** The same; throws for other strides. */
template <typename View>
layout dense_layout(const View& v) {
  if (const auto lay = dense_layout_of(v)) return *lay;
  throw error(errc::invalid_argument, "the CUDA backend takes dense sample views only");
}

// ---- the backend ---------------------------------------------------------------------------

/** Does nothing: built with the kernels, for the architectures they are, so that
 *  make_cuda_backend can ask whether the device runs them. */
__global__ void arch_probe() {}

/** One call at a time (its staging buffers are kept between calls): calls from several
 *  threads (loaders sharing one backend) wait for each other. The chunk pipeline runs one
 *  worker on it (single_threaded() is nullptr). */
class cuda_backend final : public backend {
 public:
  explicit cuda_backend(int device)
      : device_(device),
        host_memory_(std::make_shared<recycling_resource>(cuda::pinned_memory(device))) {}
  ~cuda_backend() override {
    // Its streams and device memory freed with its device current, not the caller's; a
    // backend that never ran (made, then an error before any work) holds none, and must not
    // start a context on a thread that had none.
    bool held = static_cast<bool>(d_bad_);
    held |= static_cast<bool>(d_extremes_);
    for (const auto& l : lanes_) held |= l.s || l.d_in || l.d_out;
    if (!held) return;
    const auto on = guard_for_release(device_);
    for (auto& l : lanes_) l = lane{};
    d_bad_.reset();
    d_extremes_.reset();
  }
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;
  std::string name() const override { return "cuda"; }

  /** Pinned memory, recycled: chunks read into it are copied to the device without staging. */
  std::shared_ptr<std::pmr::memory_resource> host_memory() const override {
    return host_memory_;  // made with the backend: making it pins nothing
  }

  void encode(const codec_params& p, const const_sample_view& v,
              std::span<std::byte> coeffs) override {
    validate(p);
    check_view(v);
    if (v.samples == 0) return;
    const layout lay = dense_layout(v);
    const geometry g = geometry_of_view(v, lay);
    const u64 in_per_sample = g.values_per_sample() * size_of(v.type);
    const u64 out_per_sample = coeff_bytes_per_sample(p, g);
    check_coeffs(coeffs, v.samples * out_per_sample);
    const std::lock_guard<std::mutex> one_at_a_time(calls_);
    const device_guard on(device_);
    if (!d_bad_) d_bad_ = device_alloc(sizeof(unsigned long long));
    const device_ptr& d_bad = d_bad_;
    // The legacy stream; the lanes' streams are blocking, so they run after it.
    DCTCHOP_CUDA_CHECK(cudaMemset(d_bad.get(), 0xff, sizeof(unsigned long long)));
    stream_parts(v.samples, in_per_sample, out_per_sample,
                 static_cast<const std::byte*>(v.data), coeffs.data(),
                 [&](u64 first, u64 n, const void* d_in, void* d_out, cudaStream_t s, lane&) {
                   launch_encode(p, batch_of(p, g, n), v.type, d_in, d_out,
                                 static_cast<unsigned long long*>(d_bad.get()), s, first,
                                 kernel_layout::automatic);
                 });
    unsigned long long bad = 0;
    DCTCHOP_CUDA_CHECK(cudaMemcpy(&bad, d_bad.get(), sizeof bad, cudaMemcpyDeviceToHost));
    if (bad != all_fit) throw_bad_sample(p, v, bad);  // says what is wrong with it
  }

  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& v) override {
    validate(p);
    check_view(v);
    if (v.samples == 0) return;
    const const_sample_view cv = v;
    const layout lay = dense_layout(cv);
    const geometry g = geometry_of_view(cv, lay);
    const u64 in_per_sample = coeff_bytes_per_sample(p, g);
    const u64 out_per_sample = g.values_per_sample() * size_of(v.type);
    check_coeffs(coeffs, v.samples * in_per_sample);
    const std::lock_guard<std::mutex> one_at_a_time(calls_);
    const device_guard on(device_);
    stream_parts(v.samples, in_per_sample, out_per_sample, coeffs.data(),
                 static_cast<std::byte*>(v.data),
                 [&](u64, u64 n, const void* d_in, void* d_out, cudaStream_t s, lane&) {
                   launch_decode(p, batch_of(p, g, n), v.type, d_in, d_out, s,
                                 kernel_layout::automatic);
                 });
  }

  /** On the device (quality_grid.hpp: the CPU's figures, bit for bit): the coefficients and
   *  the original go up, two doubles a sample come back, and the decoded values stay on the
   *  device. */
  bool decode_measured(const codec_params& p, std::span<const std::byte> coeffs,
                       const const_sample_view& original, const quality_accumulator& acc,
                       quality_batch& into) override {
    // (a strided original, which the host measures: the decode then stages it densely)
    const std::optional<layout> lay = dense_layout_of(original);
    if (acc.type() != original.type || !lay) return false;
    validate(p);
    check_view(original);
    const geometry g = geometry_of_view(original, *lay);
    const u64 in_per_sample = coeff_bytes_per_sample(p, g);
    const u64 values_bytes = g.values_per_sample() * size_of(original.type);
    check_coeffs(coeffs, original.samples * in_per_sample);
    const double range = acc.known_range().value_or(0.0);
    const sample_view one = make_view(g, original.type, static_cast<void*>(nullptr), 1);
    if (!measures_on_device(measure_plan_of(one, acc.computes_ssim(), range))) return false;
    constexpr u64 out_per_sample = measure_outputs * sizeof(double);
    std::vector<double> figures(original.samples * measure_outputs);
    extremes batch_extremes = no_extremes();
    if (original.samples > 0) {
      const std::lock_guard<std::mutex> one_at_a_time(calls_);
      const device_guard on(device_);
      // Each lane merges its parts' extremes into its own on the device; both start empty (the
      // legacy stream: the lanes' blocking streams run after it) and are merged at the end.
      if (!d_extremes_) d_extremes_ = device_alloc(2 * sizeof(extremes));
      auto* lane_extremes = static_cast<extremes*>(d_extremes_.get());
      const extremes none[2] = {no_extremes(), no_extremes()};
      DCTCHOP_CUDA_CHECK(cudaMemcpy(lane_extremes, none, sizeof none, cudaMemcpyHostToDevice));
      stream_parts(
          original.samples, in_per_sample, out_per_sample, coeffs.data(),
          reinterpret_cast<std::byte*>(figures.data()),
          [&](u64, u64 n, const void* d_in, void* d_out, cudaStream_t s, lane& l) {
            const sample_view part_view = make_view(g, original.type, static_cast<void*>(nullptr), n);
            const measure_plan m = measure_plan_of(part_view, acc.computes_ssim(), range);
            grow(l.d_decoded, l.d_decoded_cap, n * values_bytes);
            grow(l.d_scratch, l.d_scratch_cap, measure_scratch_of(m).bytes);
            launch_decode(p, batch_of(p, g, n), original.type, d_in, l.d_decoded.get(), s,
                          kernel_layout::automatic);
            DCTCHOP_CUDA_CHECK(launch_measure(m, original.type, l.d_in2.get(), l.d_decoded.get(),
                                              l.d_scratch.get(), static_cast<double*>(d_out),
                                              lane_extremes + (&l - lanes_), s));
          },
          static_cast<const std::byte*>(original.data), values_bytes);
      extremes merged[2];  // (stream_parts has waited for both lanes)
      DCTCHOP_CUDA_CHECK(cudaMemcpy(merged, lane_extremes, sizeof merged, cudaMemcpyDeviceToHost));
      batch_extremes = merge_extremes(merged[0], merged[1]);
    }
    batch_of_outputs(measure_plan_of(original, acc.computes_ssim(), range), figures.data(),
                     batch_extremes, into);
    return true;
  }

 private:
  /** One of the two pipelines of stream_parts, kept between calls (grow-only buffers): a
   *  backend is used by one thread at a time, and every chunk of a file has the same size, so
   *  the staging and device memory is allocated once, not for every chunk. */
  struct lane {
    std::unique_ptr<stream> s;
    byte_buffer h_in, h_out, h_in2;  // staging in host_memory(), for callers' buffers that are not pinned
    device_ptr d_in, d_out, d_in2;
    u64 d_in_cap = 0, d_out_cap = 0, d_in2_cap = 0;
    device_ptr d_decoded, d_scratch;  // decode_measured's: the decoded part, the measure's sums
    u64 d_decoded_cap = 0, d_scratch_cap = 0;
    u64 first = 0, n = 0;
    bool busy = false;
  };

  /** `p` holds at least `bytes` of device memory (grow-only; the old contents are not kept). */
  static void grow(device_ptr& p, u64& cap, u64 bytes) {
    if (cap >= bytes) return;
    p.reset();
    cap = 0;
    p = device_alloc(bytes);
    cap = bytes;
  }
  /** Likewise for a staging buffer. */
  void grow(byte_buffer& b, u64 bytes) const {
    if (b.size() < bytes) b = host_buffer(*this, bytes);
  }

  /** Runs `run(first, n, d_in, d_out, stream, lane)` over parts of the batch: copy a part to
   *  the device, run, copy it back; two streams and two sets of device buffers, so one
   *  part's copies overlap the other's kernel. Pinned input or output (host_memory()) is
   *  copied directly; pageable memory goes through the lanes' pinned staging buffers. A
   *  second input, `in2` (in2_per_sample bytes a sample), goes up too, into the lane's d_in2. */
  template <typename Run>
  void stream_parts(u64 samples, u64 in_per_sample, u64 out_per_sample, const std::byte* in,
                    std::byte* out, Run&& run, const std::byte* in2 = nullptr,
                    u64 in2_per_sample = 0) {
    const u64 per_part =
        samples_per_part(samples, std::max({in_per_sample, out_per_sample, in2_per_sample}));
    const u64 n_parts = (samples + per_part - 1) / per_part;
    const u64 part = std::min(per_part, samples);
    const bool direct_in = cuda::is_pinned(in, samples * in_per_sample);
    const bool direct_out = cuda::is_pinned(out, samples * out_per_sample);
    const bool direct_in2 = in2 == nullptr || cuda::is_pinned(in2, samples * in2_per_sample);
    for (u64 i = 0; i < std::min<u64>(n_parts, 2); ++i) {
      lane& l = lanes_[i];
      if (!l.s) l.s = std::make_unique<stream>();
      grow(l.d_in, l.d_in_cap, part * in_per_sample);
      grow(l.d_out, l.d_out_cap, part * out_per_sample);
      if (in2 != nullptr) grow(l.d_in2, l.d_in2_cap, part * in2_per_sample);
      if (!direct_in) grow(l.h_in, part * in_per_sample);
      if (!direct_out) grow(l.h_out, part * out_per_sample);
      if (!direct_in2) grow(l.h_in2, part * in2_per_sample);
    }
    auto finish = [&](lane& l) {
      if (!l.busy) return;
      l.s->sync();
      if (!direct_out) {
        std::memcpy(out + l.first * out_per_sample, l.h_out.data(), l.n * out_per_sample);
      }
      l.busy = false;
    };
    try {
      for (u64 i = 0; i < n_parts; ++i) {
        lane& l = lanes_[i % 2];
        finish(l);  // its previous part is done (and copied out of staging)
        l.first = i * per_part;
        l.n = std::min(per_part, samples - l.first);
        // The part's input up: from where it lies if pinned, else through staging.
        const auto upload = [&](const std::byte* from, u64 per_sample, bool direct,
                                byte_buffer& staging, device_ptr& to) {
          const void* src = from + l.first * per_sample;
          if (!direct) {
            std::memcpy(staging.data(), src, l.n * per_sample);
            src = staging.data();
          }
          DCTCHOP_CUDA_CHECK(cudaMemcpyAsync(to.get(), src, l.n * per_sample,
                                             cudaMemcpyHostToDevice, l.s->get()));
          l.busy = true;
        };
        upload(in, in_per_sample, direct_in, l.h_in, l.d_in);
        if (in2 != nullptr) upload(in2, in2_per_sample, direct_in2, l.h_in2, l.d_in2);
        run(l.first, l.n, l.d_in.get(), l.d_out.get(), l.s->get(), l);
        void* dst = direct_out ? static_cast<void*>(out + l.first * out_per_sample) : l.h_out.data();
        DCTCHOP_CUDA_CHECK(cudaMemcpyAsync(dst, l.d_out.get(), l.n * out_per_sample,
                                           cudaMemcpyDeviceToHost, l.s->get()));
      }
      finish(lanes_[0]);
      finish(lanes_[1]);
    } catch (...) {
      // Copies still queued may read `in` or write `out`, which the caller frees once this
      // throws: let them finish first.
      for (auto& l : lanes_) {
        if (l.busy) cuda_ignore(cudaStreamSynchronize(l.s->get()));
        l.busy = false;
      }
      throw;
    }
  }

  lane lanes_[2];
  device_ptr d_bad_;  // the first bad sample of an encode
  device_ptr d_extremes_;  // decode_measured's: each lane's extremes
  int device_;
  std::shared_ptr<std::pmr::memory_resource> host_memory_;
  std::mutex calls_;  // encode and decode, one at a time
};

}  // namespace

std::string why_kernel_cannot_run(const void* kernel, int device, std::string_view built_for) {
  const device_guard on(device);
  cudaFuncAttributes attributes{};
  const cudaError_t e = cudaFuncGetAttributes(&attributes, kernel);
  if (e == cudaSuccess) return {};
  if (!no_code_for_device(e))
    throw_cuda(e, "cudaFuncGetAttributes(&attributes, kernel)", __FILE__, __LINE__);
  (void)cudaGetLastError();
  return unrunnable_text(device, e, built_for);
}

namespace {
/** ", of CUDA_VISIBLE_DEVICES=..." where that variable chooses what the indices count. */
std::string cuda_visible_devices_text() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? std::string() : std::string(", of CUDA_VISIBLE_DEVICES=") + v;
}
}  // namespace

std::unique_ptr<backend> make_cuda_backend(const backend_options& options) {
  const int n = cuda::device_count();
  if (n <= 0) {
    throw error(errc::backend_unavailable,
                "no CUDA device is available (the CUDA backend is built, but the runtime says: " +
                    cuda::device_status() + "); use --backend cpu");
  }
  int device = options.device;
  if (device >= n) {
    throw error(errc::invalid_argument,
                "CUDA device " + std::to_string(device) + " is not there: " +
                    (n == 1 ? std::string("1 device is visible (0)")
                            : std::to_string(n) + " devices are visible (0 to " +
                                  std::to_string(n - 1) + ")") +
                    cuda_visible_devices_text());
  }
  if (device < 0) DCTCHOP_CUDA_CHECK(cudaGetDevice(&device));
  // Said now, not at the first launch: `auto` then takes the CPU instead.
  if (const std::string why = why_kernel_cannot_run(reinterpret_cast<const void*>(&arch_probe),
                                                    device, DCTCHOP_CUDA_ARCHITECTURES);
      !why.empty()) {
    throw error(errc::backend_unavailable, why + std::string(use_cpu_hint));
  }
  return std::make_unique<cuda_backend>(device);
}

std::string cuda_backend_description() {
#if defined(DCTCHOP_CUDA_FAST_COMPILE)
  // DCTCHOP_CUDA_FAST_COMPILE (CMakeLists.txt): a build made to check that the code compiles.
  return "cuda [kernels compiled for build speed (-Ofc=max), slow to run]";
#else
  return "cuda";
#endif
}

namespace {

/** Large pages (large_page_memory()), page-locked for the device from pin() on, the blocks
 *  handed out before then included: a starting backend's host memory, whose buffers are made,
 *  and its first chunks read into them, while the driver starts. Blocks under 2 MiB (the
 *  heap's, whose pages other blocks share) and any the driver will not lock stay pageable:
 *  the backend stages those. */
class registering_resource final : public std::pmr::memory_resource {
 public:
  explicit registering_resource(std::shared_ptr<std::pmr::memory_resource> upstream)
      : up_(std::move(upstream)) {}
  ~registering_resource() override = default;  // every block was given back (each holds it)
  registering_resource(const registering_resource&) = delete;
  registering_resource& operator=(const registering_resource&) = delete;

  /** Lock the blocks held and every block made from now on, for `device`, which is current on
   *  the calling thread. */
  void pin(int device) {
    const std::lock_guard lock(m_);
    device_ = device;
    for (auto& [p, b] : blocks_) b.locked = lock_pages(p, b.bytes);
  }

 private:
  static constexpr std::size_t smallest = std::size_t(2) << 20;
  struct block {
    std::size_t bytes;
    bool locked;
  };

  /** With m_ held. Whatever fails leaves the block pageable (staged), never fails its
   *  allocation. */
  bool lock_pages(void* p, std::size_t bytes) const noexcept {
    if (device_ < 0 || bytes < smallest) return false;
    try {
      const device_guard on(device_);
      if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return true;
      (void)cudaGetLastError();  // not sticky: clear it
    } catch (...) {  // the device cannot be made current
    }
    return false;
  }

  void* do_allocate(std::size_t bytes, std::size_t align) override {
    void* p = up_->allocate(bytes, align);
    try {
      const std::lock_guard lock(m_);
      auto& b = blocks_[p];
      b = block{bytes, false};
      b.locked = lock_pages(p, bytes);
    } catch (...) {
      {
        const std::lock_guard lock(m_);
        blocks_.erase(p);
      }
      up_->deallocate(p, bytes, align);
      throw;
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    {
      const std::lock_guard lock(m_);
      if (const auto it = blocks_.find(p); it != blocks_.end()) {
        if (it->second.locked) {
          // Before the pages are unmapped: a registration left behind could make a later
          // mapping at the same address look page-locked. (Registered portable, any context
          // unregisters it: where the device cannot be made current, the thread's own.)
          try {
            const device_guard on(device_);
            cuda_ignore(cudaHostUnregister(p));
          } catch (...) {
            cuda_ignore(cudaHostUnregister(p));
          }
        }
        blocks_.erase(it);
      }
    }
    up_->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  std::shared_ptr<std::pmr::memory_resource> up_;
  std::mutex m_;
  std::unordered_map<void*, block> blocks_;
  int device_ = -1;  // set by pin()
};

/** Whether this process may see an NVIDIA GPU, without starting the driver: a GPU's device
 *  file (/dev/nvidia0..., which a container holds only for the GPUs given to it; WSL's
 *  /dev/dxg), and CUDA_VISIBLE_DEVICES not set to hide them all. Where none is seen the
 *  backend is made as without start_in_background: the runtime then says at once that there
 *  is no device, and `automatic` keeps the CPU's worker per core. */
bool gpu_may_be_visible() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    const std::string_view s(v);
    if (s.empty() || s.front() == '-' || s == "NoDevFiles") return false;
  }
  std::error_code ec;
  if (std::filesystem::exists("/dev/dxg", ec)) return true;
  for (std::filesystem::directory_iterator it("/dev", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<backend> start_cuda_backend(
    const backend_options& options, const std::function<void(const std::string&)>& on_fallback,
    const std::function<void()>& before_pin) {
  if (!before_pin && !gpu_may_be_visible()) return nullptr;
  auto memory = std::make_shared<registering_resource>(large_page_memory());
  const bool by_name = !on_fallback;
  auto start = [options, memory, by_name, before_pin]() -> std::unique_ptr<backend> {
    if (!by_name && !cuda::available()) return nullptr;        // no device: the CPU, told nothing
    // options.device, or this new thread's current device: 0
    std::unique_ptr<backend> be = make_cuda_backend(options);
    int device = options.device;
    if (device < 0) DCTCHOP_CUDA_CHECK(cudaGetDevice(&device));
    if (before_pin) before_pin();
    memory->pin(device);
    return be;
  };
  return std::make_unique<starting_backend>(
      "cuda", 1, std::move(start), make_cpu_backend({options.threads}), memory, on_fallback);
}

}  // namespace dctchop::detail

namespace dctchop::cuda {

using detail::u64;

namespace {
/** The device entry points take a geometry from the caller: refuse one that cannot be. */
void check_geometry(const geometry& g) {
  if (g.height == 0 || g.width == 0 || g.planes == 0) {
    throw error(errc::invalid_argument, "CUDA decode/encode: empty plane geometry");
  }
  if (g.lay == layout::automatic) {
    throw error(errc::invalid_argument, "CUDA decode/encode: resolve the layout first");
  }
  if ((g.lay == layout::nhw || g.lay == layout::hw) && g.planes != 1) {
    throw error(errc::invalid_argument, "CUDA decode/encode: NHW and HW have one plane");
  }
}

/** A caller's device pointer must be set and aligned to its elements: a kernel that meets
 *  a misaligned or null address faults, and the fault is sticky (the context is lost to
 *  every later call of the process). Said before anything is queued. */
void check_device_pointer(const void* ptr, std::size_t align, const char* call, const char* what,
                          std::string_view type) {
  if (ptr == nullptr) {
    throw error(errc::invalid_argument, std::string(call) + ": the " + what + " pointer is null");
  }
  if (reinterpret_cast<std::uintptr_t>(ptr) % align != 0) {
    throw error(errc::invalid_argument,
                std::string(call) + ": the " + what + " pointer is not aligned to its " +
                    std::string(type) + " elements (a multiple of " + std::to_string(align) +
                    " bytes)");
  }
}

/** The pointers of a decode from device memory, when there is something to decode. */
void check_decode_pointers(const codec_params& p, dtype type, u64 samples, const void* coeffs,
                           const void* out, const char* call) {
  if (samples == 0) return;
  check_device_pointer(coeffs, size_of(p.coeff), call, "coefficient", to_string(p.coeff));
  check_device_pointer(out, size_of(type), call, "output", to_string(type));
}

/** The arguments of an encode from device memory but its first-bad-sample word. */
void check_encode_arguments(const codec_params& p, const geometry& g, dtype type, u64 samples,
                            const void* in, const void* coeffs) {
  validate(p);
  check_geometry(g);
  if (samples == 0) return;
  check_device_pointer(in, size_of(type), "encode_device", "input", to_string(type));
  check_device_pointer(coeffs, size_of(p.coeff), "encode_device", "coefficient",
                       to_string(p.coeff));
}

/** Queue an encode whose arguments are checked: the word set to all ones, then the kernel. */
void queue_encode(const codec_params& p, const geometry& g, dtype type, u64 samples,
                  const void* in, void* coeffs, unsigned long long* first_bad, cudaStream_t s,
                  kernel_layout layout) {
  DCTCHOP_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), s));
  detail::launch_encode(p, detail::batch_of(p, g, samples), type, in, coeffs, first_bad, s, 0,
                        layout);
}

/** cudaGetDeviceCount into `n` (0 on failure), its error cleared (not for the next check). */
cudaError_t count_devices(int& n) noexcept {
  n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  return e;
}
}  // namespace

bool built() noexcept { return true; }

int device_count() noexcept {
  int n = 0;
  (void)count_devices(n);
  return n;
}

std::string device_status() {
  int n = 0;
  const cudaError_t e = count_devices(n);
  if (e != cudaSuccess) {
    return std::string("no device: ") + cudaGetErrorName(e) + ", " + cudaGetErrorString(e);
  }
  if (n <= 0) return "no device";
  // Each by the index that --device takes, with what tells it apart in nvidia-smi (whose
  // order may differ). The properties start no context on the devices.
  std::string s = std::to_string(n) + (n == 1 ? " device: " : " devices: ");
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += "; ";
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();  // not for the next check
      s += std::to_string(i) + " (its properties could not be read)";
      continue;
    }
    char text[sizeof prop.name + 96];
    std::snprintf(text, sizeof text, "%d %s (sm_%d%d, %.0f GiB, PCI %04x:%02x:%02x)", i,
                  prop.name, prop.major, prop.minor,
                  static_cast<double>(prop.totalGlobalMem) / double(1ull << 30), prop.pciDomainID,
                  prop.pciBusID, prop.pciDeviceID);
    s += text;
  }
  return s;
}

void decode_device_async(const codec_params& p, const geometry& g, dtype type, u64 samples,
                         const void* device_coeffs, void* device_out, void* stream,
                         kernel_layout layout) {
  validate(p);
  check_geometry(g);
  check_decode_pointers(p, type, samples, device_coeffs, device_out, "decode_device");
  detail::launch_decode(p, detail::batch_of(p, g, samples), type, device_coeffs, device_out,
                        static_cast<cudaStream_t>(stream), layout);
}

void decode_device(const codec_params& p, const geometry& g, dtype type, u64 samples,
                   const void* device_coeffs, void* device_out, void* stream,
                   kernel_layout layout) {
  decode_device_async(p, g, type, samples, device_coeffs, device_out, stream, layout);
  DCTCHOP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void encode_device_async(const codec_params& p, const geometry& g, dtype type, u64 samples,
                         const void* device_in, void* device_coeffs,
                         unsigned long long* device_first_bad, void* stream,
                         kernel_layout layout) {
  check_encode_arguments(p, g, type, samples, device_in, device_coeffs);
  check_device_pointer(device_first_bad, alignof(unsigned long long), "encode_device",
                       "first-bad-sample word", "unsigned long long");
  queue_encode(p, g, type, samples, device_in, device_coeffs, device_first_bad,
               static_cast<cudaStream_t>(stream), layout);
}

void encode_device(const codec_params& p, const geometry& g, dtype type, u64 samples,
                   const void* device_in, void* device_coeffs, void* stream,
                   kernel_layout layout) {
  // The arguments before the flag's allocation: a bad one needs no device.
  check_encode_arguments(p, g, type, samples, device_in, device_coeffs);
  const auto s = static_cast<cudaStream_t>(stream);
  const detail::stream_flag d_bad(s);
  queue_encode(p, g, type, samples, device_in, device_coeffs, d_bad.get(), s, layout);
  unsigned long long bad = 0;
  DCTCHOP_CUDA_CHECK(cudaMemcpyAsync(&bad, d_bad.get(), sizeof bad, cudaMemcpyDeviceToHost, s));
  DCTCHOP_CUDA_CHECK(cudaStreamSynchronize(s));
  if (bad != detail::all_fit) {
    // Bring the sample to the host to say what is wrong with it.
    const u64 per_sample = g.values_per_sample() * size_of(type);
    std::vector<std::byte> host(per_sample);
    DCTCHOP_CUDA_CHECK(cudaMemcpy(host.data(),
                                  static_cast<const std::byte*>(device_in) + bad * per_sample,
                                  per_sample, cudaMemcpyDeviceToHost));
    geometry one = g;
    one.samples = 1;
    try {
      std::vector<std::byte> scratch(coeff_bytes_per_sample(p, one));
      detail::make_cpu_backend({1})->encode(p, make_view(one, type, static_cast<const void*>(host.data()), 1), scratch);
    } catch (const error& e) {
      throw error(e.code(), e.detail(), static_cast<long long>(bad));
    }
    throw error(errc::internal, "the CUDA encoder refused a sample the CPU accepts");
  }
}

}  // namespace dctchop::cuda

namespace dctchop::cuda {

struct gemm_decoder::impl {
  int device = 0;  // current when it was made: its handle, tables and scratch live there
  cublasHandle_t handle = nullptr;
  int block = 0, chop = 0;  // of d_tk and d_tkt
  detail::device_ptr d_tk, d_tkt, scratch;
  std::size_t scratch_bytes = 0;
  // Recorded on the caller's stream after each call's work: the next call waits for it
  // before reusing the scratch, on the device, and the host waits for it before replacing the
  // tables or the scratch. An event, not the stream itself: the caller may have destroyed
  // that stream since (cudaStreamSynchronize on it would be an error).
  cudaEvent_t done = nullptr;
  bool used = false;  // `done` has been recorded
  void drain() const {
    if (used) DCTCHOP_CUDA_CHECK(cudaEventSynchronize(done));
  }
};

gemm_decoder::gemm_decoder() : impl_(std::make_unique<impl>()) {
  if (!available()) {
    throw error(errc::backend_unavailable, "no CUDA device for the GEMM decoder");
  }
  DCTCHOP_CUDA_CHECK(cudaGetDevice(&impl_->device));
  DCTCHOP_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->done, cudaEventDisableTiming));
  try {
    DCTCHOP_CUBLAS_CHECK(detail::cublas_api::get().create(&impl_->handle));
  } catch (...) {
    detail::cuda_ignore(cudaEventDestroy(impl_->done));
    throw;
  }
}

gemm_decoder::~gemm_decoder() {
  if (impl_ && impl_->handle != nullptr) {
    // cuBLAS frees a handle's resources on the current device: make it the decoder's.
    const auto on = detail::guard_for_release(impl_->device);
    if (impl_->used) detail::cuda_ignore(cudaEventSynchronize(impl_->done));
    // The handle is still bound to the last call's stream, which the caller may have
    // destroyed since: unbind it first, and leave no error behind for the next launch check.
    const auto& blas = detail::cublas_api::get();
    blas.set_stream(impl_->handle, nullptr);
    blas.destroy(impl_->handle);
    (void)cudaGetLastError();
    detail::cuda_ignore(cudaEventDestroy(impl_->done));
    impl_->d_tk.reset();
    impl_->d_tkt.reset();
    impl_->scratch.reset();
  }
}

void gemm_decoder::decode_async(const codec_params& p, const geometry& g, dtype type,
                                u64 samples, const void* device_coeffs, void* device_out,
                                void* stream) {
  validate(p);
  check_geometry(g);
  check_decode_pointers(p, type, samples, device_coeffs, device_out, "gemm_decoder::decode");
  impl& d = *impl_;
  const auto s = static_cast<cudaStream_t>(stream);
  if (samples == 0) return;
  // The caller's current device may be another (given back after); a thread with none stays
  // on the decoder's, rather than start a context on device 0 when it is given back.
  const detail::device_guard on(d.device);
  // The blocks of Lt and R (T_K^t and T_K) in f32 on the device, uploaded when the block or
  // the chop changes; the previous call's stream is drained first, as it may still read them.
  if (!d.d_tk || d.block != p.block || d.chop != p.chop) {
    d.drain();
    const auto bm = detail::make_block_matrices(p.block, p.chop);
    const std::size_t bytes = bm.tk.size() * sizeof(float);
    auto tk = detail::device_alloc(bytes), tkt = detail::device_alloc(bytes);
    // On the caller's stream, and waited for: the vectors are pageable and go out of scope.
    DCTCHOP_CUDA_CHECK(cudaMemcpyAsync(tk.get(), bm.tk.data(), bytes, cudaMemcpyHostToDevice, s));
    DCTCHOP_CUDA_CHECK(cudaMemcpyAsync(tkt.get(), bm.tkt.data(), bytes, cudaMemcpyHostToDevice, s));
    DCTCHOP_CUDA_CHECK(cudaStreamSynchronize(s));
    // Only now, so that a failed upload leaves no half-made tables under the old key.
    d.d_tk = std::move(tk);
    d.d_tkt = std::move(tkt);
    d.block = p.block;
    d.chop = p.chop;
  }
  const decode_matrices m = decode_matrix_dims(p, g.height, g.width);
  // cuBLAS takes int dimensions and leading dimensions; groups of planes keep the products
  // within that, down to one plane.
  constexpr u64 int_max = static_cast<u64>(std::numeric_limits<int>::max());
  if (m.hp * m.wp > int_max) {
    throw error(errc::invalid_argument,
                "planes of " + std::to_string(g.height) + " x " + std::to_string(g.width) +
                    " are too large for the GEMM decode (cuBLAS takes int sizes); use "
                    "cuda::decode_device");
  }
  // The second GEMM's batch is a plane's block rows at least (gemm_group_planes).
  if (m.hp / p.block > detail::gemm_max_batch) {
    throw error(errc::invalid_argument,
                "planes of " + std::to_string(g.height) + " rows are too tall for the GEMM "
                    "decode (more than 65535 blocks high); use cuda::decode_device");
  }
  const u64 planes = samples * g.planes;
  // f32 coefficients feed the GEMMs where they lie; other types are converted first.
  const bool convert = p.coeff != coeff_type::f32;
  const u64 per_plane = (convert ? m.kh * m.kw : 0) + m.kh * m.wp + m.hp * m.wp;  // C, C*R, X'
  const u64 group = detail::gemm_group_planes(planes, per_plane, m.hp / p.block);
  const std::size_t need = group * per_plane * sizeof(float);
  if (d.scratch_bytes < need) {
    d.drain();
    d.scratch = detail::device_alloc(need);
    d.scratch_bytes = need;
  }
  // The previous call may have been on another stream and still be reading or writing the
  // scratch: this stream waits for it (on the same stream the wait costs nothing). Whatever is
  // queued from here on, a failure halfway included, is covered by the event recorded when
  // this call returns or throws.
  if (d.used) DCTCHOP_CUDA_CHECK(cudaStreamWaitEvent(s, d.done, 0));
  struct done_marker {
    impl& d;
    cudaStream_t s;
    ~done_marker() {
      const cudaError_t e = cudaEventRecord(d.done, s);
      detail::cuda_ignore(e);
      if (e == cudaSuccess) d.used = true;
    }
  } const mark_done{d, s};
  auto* t1 = static_cast<float*>(d.scratch.get());
  float* x = t1 + group * m.kh * m.wp;
  float* c32 = x + group * m.hp * m.wp;  // used when converting
  const auto bg = detail::batch_of(p, g, samples);
  const u64 cplane_bytes = bg.plane_coeff_bytes;
  const auto& blas = detail::cublas_api::get();
  DCTCHOP_CUBLAS_CHECK(blas.set_stream(d.handle, s));
  const float one = 1.0f, zero = 0.0f;
  for (u64 first = 0; first < planes; first += group) {
    const u64 n = std::min(group, planes - first);
    const auto* src = static_cast<const std::byte*>(device_coeffs) + first * cplane_bytes;
    const float* c = reinterpret_cast<const float*>(src);
    if (convert) {
      const u64 count = n * m.kh * m.kw;
      detail::coeffs_to_f32<<<detail::ctas_for(count), detail::threads_per_cta, 0, s>>>(
          src, static_cast<detail::coeff_code>(p.coeff), count, c32);
      DCTCHOP_CUDA_CHECK(cudaGetLastError());
      c = c32;
    }
    for (const auto& q : detail::matrix_form_gemms(m, p.block, p.chop,
                                                   static_cast<const float*>(d.d_tk.get()),
                                                   static_cast<const float*>(d.d_tkt.get()), c,
                                                   t1, x, static_cast<int>(n))) {
      DCTCHOP_CUBLAS_CHECK(blas.sgemm_strided_batched(d.handle, CUBLAS_OP_N, CUBLAS_OP_N, q.m,
                                                      q.n, q.k, &one, q.a, q.lda, q.stride_a,
                                                      q.b, q.ldb, q.stride_b, &zero, q.c, q.ldc,
                                                      q.stride_c, q.batch));
    }
    const u64 values = detail::store_threads(n, bg);
    detail::with_dtype(type, [&](auto out, auto) {
      using Out = decltype(out);
      detail::store_planes<Out><<<detail::ctas_for(values), detail::threads_per_cta, 0, s>>>(
          x, first, n, m.hp, m.wp, bg, p.offset, static_cast<Out*>(device_out));
    });
    DCTCHOP_CUDA_CHECK(cudaGetLastError());
  }
}

void gemm_decoder::decode(const codec_params& p, const geometry& g, dtype type, u64 samples,
                          const void* device_coeffs, void* device_out, void* stream) {
  decode_async(p, g, type, samples, device_coeffs, device_out, stream);
  DCTCHOP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

}  // namespace dctchop::cuda

namespace dctchop::cuda {

namespace {

/** cudaHostAlloc'd memory: page-aligned, so any alignment up to a page. Failure is
 *  std::bad_alloc, as for any memory resource. */
class pinned_resource final : public std::pmr::memory_resource {
 public:
  explicit pinned_resource(int device) : device_(device) {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (align > 4096) throw std::bad_alloc();
    const detail::device_guard on(device_);  // on a loader's prefetch thread, say
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      throw std::bad_alloc();
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override {
    // Whatever thread lets a buffer go: on one without a context, this binds ours rather than
    // starting one on device 0.
    try {
      const detail::device_guard on(device_);
      detail::cuda_ignore(cudaFreeHost(p));  // not for the next check
    } catch (...) {
      // The device is gone (a deallocation cannot fail): the memory goes with the process.
    }
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return dynamic_cast<const pinned_resource*>(&other) != nullptr;  // any can free any
  }
  int device_;
};

}  // namespace

bool is_pinned(const void* p, std::size_t bytes) noexcept {
  auto host = [](const void* q) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, q) != cudaSuccess) {
      (void)cudaGetLastError();  // an unknown pointer: not pinned, and not an error
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  };
  // Both ends: a range within one allocation or registration.
  return p != nullptr && bytes > 0 && host(p) && host(static_cast<const std::byte*>(p) + (bytes - 1));
}

std::shared_ptr<std::pmr::memory_resource> pinned_memory(int device) {
  if (device < 0 || device >= device_count()) {
    throw error(errc::backend_unavailable, "no CUDA device " + std::to_string(device));
  }
  return std::make_shared<pinned_resource>(device);
}

struct device_ring::impl {
  int device = -1;  // set once the constructor has checked it
  struct slot {
    detail::device_ptr out, d_in;
    cudaEvent_t done = nullptr;
    cudaEvent_t free = nullptr;  // recorded on the consumer's stream when it lets go
  };
  std::vector<slot> slots;
  u64 in_bytes = 0, out_bytes = 0;
  std::unique_ptr<detail::stream> s;
  ~impl() {
    if (device < 0) return;  // the constructor refused the device: nothing was made
    const auto on = detail::guard_for_release(device);  // not the consumer's current device
    if (s) detail::cuda_ignore(cudaStreamSynchronize(s->get()));
    for (auto& x : slots) {
      // The consumer's last work on this slot's output (the event its release recorded on
      // the consumer's stream) must end before the buffer is freed.
      if (x.free != nullptr) detail::cuda_ignore(cudaEventSynchronize(x.free));
      if (x.done != nullptr) detail::cuda_ignore(cudaEventDestroy(x.done));
      if (x.free != nullptr) detail::cuda_ignore(cudaEventDestroy(x.free));
    }
    slots.clear();
    s.reset();
  }
};

device_ring::device_ring(int device, std::size_t count, u64 in_bytes, u64 out_bytes)
    : impl_(std::make_unique<impl>()) {
  if (device < 0 || device >= device_count()) {
    throw error(errc::backend_unavailable, "no CUDA device " + std::to_string(device));
  }
  const detail::device_guard on(device);
  impl& d = *impl_;
  d.device = device;
  d.in_bytes = in_bytes;
  d.out_bytes = out_bytes;
  d.slots.resize(count);
  for (auto& x : d.slots) {
    x.out = detail::device_alloc(out_bytes);
    x.d_in = detail::device_alloc(in_bytes);
    DCTCHOP_CUDA_CHECK(cudaEventCreateWithFlags(&x.done, cudaEventDisableTiming));
    DCTCHOP_CUDA_CHECK(cudaEventCreateWithFlags(&x.free, cudaEventDisableTiming));
  }
  // Non-blocking: ordered by the slots' events alone (decode_async waits for `free`; the
  // consumer waits for `done`), never by the consumer's default stream.
  d.s = std::make_unique<detail::stream>(true);
}

device_ring::~device_ring() = default;


void* device_ring::decode_async(std::size_t slot, const codec_params& p, const geometry& g,
                                dtype type, u64 samples, const void* host_coeffs, u64 bytes) {
  impl& d = *impl_;
  if (slot >= d.slots.size() || bytes > d.in_bytes ||
      samples * g.values_per_sample() * size_of(type) > d.out_bytes) {
    throw error(errc::invalid_argument, "device_ring: batch larger than its buffers");
  }
  // The kernel reads every sample's coefficients: `bytes` must hold them (else it would read
  // past what was copied, or past d_in for other settings than the ring was sized for).
  if (samples * coeff_bytes_per_sample(p, g) > bytes) {
    throw error(errc::invalid_argument, "device_ring: fewer coefficient bytes than the batch's samples need");
  }
  auto& x = d.slots[slot];
  const detail::device_guard on(d.device);
  // The slot's earlier work ran on the same stream, so its d_in is free by stream order.
  DCTCHOP_CUDA_CHECK(cudaMemcpyAsync(x.d_in.get(), host_coeffs, bytes, cudaMemcpyHostToDevice,
                                     d.s->get()));
  try {
    // The consumer's last use of this slot's output must have run (an event never recorded
    // is already complete).
    DCTCHOP_CUDA_CHECK(cudaStreamWaitEvent(d.s->get(), x.free, 0));
    decode_device_async(p, g, type, samples, x.d_in.get(), x.out.get(), d.s->get());
    DCTCHOP_CUDA_CHECK(cudaEventRecord(x.done, d.s->get()));
  } catch (...) {
    detail::cuda_ignore(cudaStreamSynchronize(d.s->get()));  // the caller may free host_coeffs once we throw
    throw;
  }
  return x.out.get();
}

void device_ring::wait(std::size_t slot) {
  DCTCHOP_CUDA_CHECK(cudaEventSynchronize(impl_->slots.at(slot).done));
}

void device_ring::released(std::size_t slot, void* stream) {
  // A tensor's deleter calls this, on whatever thread drops the last reference: one with no
  // context stays on the ring's device rather than start one on device 0.
  const detail::device_guard on(impl_->device);
  const auto s = static_cast<cudaStream_t>(stream);
  const cudaError_t e = cudaEventRecord(impl_->slots.at(slot).free, s);
  if (e == cudaSuccess) return;
  // Without the event nothing orders the next decode into this slot after the consumer's
  // use of it (the ring's stream does not wait for the default stream): wait here instead.
  detail::cuda_ignore(e);
  DCTCHOP_CUDA_CHECK(cudaStreamSynchronize(s));
}

void* device_ring::decode(std::size_t slot, const codec_params& p, const geometry& g, dtype type,
                          u64 samples, const void* host_coeffs, u64 bytes) {
  void* out = decode_async(slot, p, g, type, samples, host_coeffs, bytes);
  wait(slot);
  return out;
}

}  // namespace dctchop::cuda
