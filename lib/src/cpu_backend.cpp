// CPU backend: picks the kernel copy for this processor and reports errors.

#include <atomic>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <string>

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "backends.hpp"
#include "cpu_kernels.hpp"
#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "isa.hpp"
#include "omp.hpp"

namespace dctchop::detail {
namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;


struct kernel_table {
  const char* isa;
  decltype(&generic::encode_batch) encode;
  decltype(&generic::decode_batch) decode;
};

kernel_table pick_kernels() {
#if defined(DCTCHOP_HAVE_AVX2_KERNELS)
  if (use_avx2_kernels()) return {"avx2", &avx2::encode_batch, &avx2::decode_batch};
#endif
  return {"generic", &generic::encode_batch, &generic::decode_batch};
}


class cpu_backend final : public backend {
 public:
  explicit cpu_backend(const backend_options& o)
      : threads_(resolve_threads(o.threads)), kernels_(pick_kernels()) {}
  std::string name() const override { return "cpu"; }
  int threads() const override { return threads_; }
  std::unique_ptr<backend> single_threaded() const override {
    return std::make_unique<cpu_backend>(backend_options{1});
  }

  void encode(const codec_params& p, const const_sample_view& v,
              std::span<std::byte> coeffs) override {
    validate(p);
    check_view(v);
    const u64 need = v.samples * v.planes * plane_bytes(p, v.height, v.width);
    check_coeffs(coeffs, need);
    if (v.samples == 0) return;
    std::atomic<u64> first_bad{std::numeric_limits<u64>::max()};
    kernels_.encode(p, v, coeffs.data(), threads_, first_bad);
    if (first_bad.load() != std::numeric_limits<u64>::max()) throw_bad_sample(p, v, first_bad);
  }

  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& v) override {
    validate(p);
    check_view(v);
    const u64 need = v.samples * v.planes * plane_bytes(p, v.height, v.width);
    check_coeffs(coeffs, need);
    if (v.samples == 0) return;
    kernels_.decode(p, coeffs.data(), v, threads_);
  }

 private:
  static u64 plane_bytes(const codec_params& p, u64 h, u64 w) {
    auto cs = coeff_shape(p, h, w);
    return cs.rows * cs.cols * size_of(p.coeff);
  }
  int threads_;
  kernel_table kernels_;
};

}  // namespace

#if defined(_OPENMP)
namespace {
// The process that loaded the library. Any process forked from it may have inherited a dead
// OpenMP pool: its own, or that of another library in the process (PyTorch shares
// libgomp), which dctchop cannot see. Process-wide state by nature, as the pool is: the one
// static of the library, set when it is loaded.
const pid_t loaded_in = ::getpid();
}  // namespace
#endif

}  // namespace dctchop::detail

namespace dctchop {

void release_thread_pool() noexcept {
// (OpenMP 5.0's; GCC's libgomp has it from GCC 10, whose _OPENMP still says 4.5)
#if defined(_OPENMP) && \
    (_OPENMP >= 201811 || (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10))
  (void)omp_pause_resource_all(omp_pause_soft);  // (libgomp: the calling thread's pool)
#endif
}

}  // namespace dctchop

namespace dctchop::detail {

int threads_that_start(int want) {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::thread> started;
  try {
    started.reserve(static_cast<std::size_t>(std::max(want, 0)));
    // (std::thread: pthreads of default attributes, as libgomp starts its team's)
    for (int i = 0; i < want; ++i) {
      started.push_back(start_quiet_thread([&] {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return open; });
      }));
    }
  } catch (...) {
    // the system's limit on threads or memory: the count is of those that started
  }
  {
    std::lock_guard<std::mutex> lock(m);
    open = true;
  }
  cv.notify_all();
  for (auto& t : started) t.join();
  return static_cast<int>(started.size());
}

int region_threads(int threads, std::uint64_t work) {
#if defined(_OPENMP)
  if (threads <= 1 || work <= 1 || ::getpid() != loaded_in) return 1;
  // No more than the processors either: more would only take turns on them, and --threads
  // 1000 on a large input asked libgomp for a thousand threads, whose refusal ends the process.
  const auto procs = static_cast<std::uint64_t>(std::max(omp_get_num_procs(), 1));
  int n = static_cast<int>(std::min({static_cast<std::uint64_t>(threads), work, procs}));
  // libgomp ends the process ("Thread creation failed", exit 1, no cleanup) when the system
  // will not start a team's thread (ulimit -v, a pids cgroup, RLIMIT_NPROC). Each thread that
  // starts regions keeps a pool of the largest team it has had: before a larger one, the
  // threads it needs are started (and ended) here, and a team of those that start runs.
  thread_local int pool = 1;
  if (n > pool) {
    n = std::min(n, threads_that_start(n - 1) + 1);
    pool = std::max(pool, n);
  }
  return n;
#else
  (void)threads;
  (void)work;
  return 1;
#endif
}

/** Whether `q`'s coefficient type holds every coefficient of sample `n` of `v` under `q`:
 *  the bound below (B x max |x - offset|) is loose, so only encoding the sample tells. False
 *  where there is no memory to try (the message then suggests less, not a different error). */
bool sample_holds(const codec_params& q, const const_sample_view& v, u64 n) {
  const_sample_view one = v;
  one.data = static_cast<const std::byte*>(v.data) +
             static_cast<i64>(n) * v.stride_sample * static_cast<i64>(size_of(v.type));
  one.samples = 1;
  const auto cs = coeff_shape(q, v.height, v.width);
  try {
    std::vector<std::byte> c(v.planes * cs.rows * cs.cols * size_of(q.coeff));
    std::atomic<u64> bad{std::numeric_limits<u64>::max()};
    pick_kernels().encode(q, one, c.data(), 1, bad);
    return bad.load() == std::numeric_limits<u64>::max();
  } catch (const std::bad_alloc&) {
    return false;
  }
}

/** Explain why sample `n` could not be stored: a non-finite input, or a coefficient too big. */
[[noreturn]] void throw_bad_sample(const codec_params& p, const const_sample_view& v, u64 n) {
  // Scan the sample: a NaN or Inf is the input's fault; otherwise find the largest |x - o|,
  // which bounds every coefficient by B * max|x - o| (the DC term's bound).
  bool nonfinite = false;
  double max_dev = 0, lo = HUGE_VAL, hi = -HUGE_VAL;
  for (u64 c = 0; c < v.planes; ++c)
    for (u64 r = 0; r < v.height; ++r)
      for (u64 x = 0; x < v.width; ++x) {
        const i64 off = static_cast<i64>(n) * v.stride_sample + static_cast<i64>(c) * v.stride_plane +
                        static_cast<i64>(r) * v.stride_row + static_cast<i64>(x) * v.stride_col;
        double val = 0;
        switch (v.type) {
          case dtype::u8: val = static_cast<const std::uint8_t*>(v.data)[off]; break;
          case dtype::u16: val = static_cast<const std::uint16_t*>(v.data)[off]; break;
          case dtype::i16: val = static_cast<const std::int16_t*>(v.data)[off]; break;
          case dtype::f32: val = static_cast<const float*>(v.data)[off]; break;
          case dtype::f64: val = static_cast<const double*>(v.data)[off]; break;
          case dtype::i8: val = static_cast<const std::int8_t*>(v.data)[off]; break;
          case dtype::i32: val = static_cast<const std::int32_t*>(v.data)[off]; break;
          case dtype::u32: val = static_cast<const std::uint32_t*>(v.data)[off]; break;
          case dtype::f16:
            val = static_cast<float>(static_cast<const half_value*>(v.data)[off]);
            break;
        }
        if (!std::isfinite(val)) nonfinite = true;
        else {
          max_dev = std::max(max_dev, std::fabs(val - p.offset));
          lo = std::min(lo, val);
          hi = std::max(hi, val);
        }
      }
  if (nonfinite) {
    throw error(errc::bad_input,
                "holds a NaN or Inf, which DCT+Chop cannot keep (--nonfinite replace=V "
                "substitutes V)",
                static_cast<long long>(n));
  }
  const double bound = p.block * max_dev;
  const bool offset_outside = hi >= lo && (p.offset < lo || p.offset > hi);  // (hi < lo: none finite)
  std::string suggestion;
  // |C[u][v]| <= B * max |x - offset| (orthonormal rows: sum_x |T[u][x]| <= sqrt(B)), so
  // below f32's largest value f32 holds every coefficient of this sample.
  const double f32_max = max_finite(coeff_type::f32);
  auto with = [&p](coeff_type coeff, double offset) {  // p as the suggestion would change it
    codec_params q = p;
    q.coeff = coeff;
    q.offset = offset;
    return q;
  };
  if (bound < f32_max && p.coeff != coeff_type::f32) {
    suggestion = "use --coeff f32";
    // Values that lie outside the offset's side of them but close together (12-bit data in
    // u16, say) fit this type once the offset is among them: the DC bound is then at most
    // B * (hi - lo).
    const double largest = max_finite(p.coeff);
    // Or, beyond the bound's promise, where this sample fits with the offset amid its values
    // (smooth data spread wider than the bound allows).
    if (offset_outside && (p.block * (hi - lo) < 0.9 * largest ||
                           sample_holds(with(p.coeff, (lo + hi) / 2), v, n))) {
      char b[256];
      std::snprintf(b, sizeof b,
                    ", or an offset among the values (--offset V; --offset mean takes the "
                    "first sample's mean): this sample's lie in [%.9g, %.9g], away from the "
                    "offset %.9g",
                    lo, hi, p.offset);
      suggestion += b;
    }
  } else if (p.coeff != coeff_type::f32 && sample_holds(with(coeff_type::f32, p.offset), v, n)) {
    suggestion = "use --coeff f32";  // (beyond the bound's promise, but they do fit)
  } else {
    char b[200];
    std::snprintf(b, sizeof b,
                  "no coefficient type can hold the transform of values this large "
                  "(|x - offset| up to %.3g, f32's largest is 3.4e+38); ",
                  max_dev);
    suggestion = b;
    // The offset far outside values that would fit (--offset 1e39, say) is the thing to change;
    // values close together far from zero (1e60 +- 1e30) fit about their middle.
    if (offset_outside && p.block * std::max(std::fabs(lo), std::fabs(hi)) < f32_max) {
      char o[160];
      std::snprintf(o, sizeof o,
                    "the offset %.3g lies far from the values, which lie in [%.9g, %.9g]; choose "
                    "one among them (--offset mean)",
                    p.offset, lo, hi);
      suggestion += o;
    } else if (offset_outside && p.block * (hi / 2 - lo / 2) < f32_max) {
      char o[200];
      std::snprintf(o, sizeof o,
                    "the offset %.17g lies outside the values, which lie in [%.17g, %.17g]; "
                    "choose one among them (--offset %.17g, their middle)",
                    p.offset, lo, hi, lo / 2 + hi / 2);
      suggestion += o;
    } else {
      suggestion += "rescale the data";
    }
  }
  throw error(errc::out_of_range,
              "a DCT coefficient does not fit " + std::string(to_string(p.coeff)) + "; " +
                  suggestion,
              static_cast<long long>(n));
}

std::unique_ptr<backend> make_cpu_backend(const backend_options& options) {
  if (options.threads < 0) {
    throw error(errc::invalid_argument, "thread count must be 0 (all cores) or positive");
  }
  return std::make_unique<cpu_backend>(options);
}

std::string cpu_backend_description() {
#if defined(_OPENMP)
  std::string s = "cpu (OpenMP, ";
#else
  std::string s = "cpu (serial, ";
#endif
  return s + pick_kernels().isa + " kernels)";
}

}  // namespace dctchop::detail
