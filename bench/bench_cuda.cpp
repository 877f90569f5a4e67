// GPU codec throughput (Google Benchmark; built with the CUDA backend; needs a device).
// Run: ./build/bench/dctchop_gpu_bench --benchmark_counters_tabular=true (or scripts/gpu-check.sh).
//  - device: encode_device / decode_device from device memory to device memory, timed with
//    CUDA events around k_launches launches in a row (so that the host's launch work between
//    the first event and the first kernel weighs little), after k_warmup untimed runs of the
//    same operation and layout (each kernel's first launch loads it). GB/s counts
//    uncompressed bytes; "bw_frac" is the fraction of the H200's 4.8 TB/s counting the bytes
//    the kernels read plus the bytes they write (input and coefficients; the GEMM decode
//    moves f32 scratch besides, which it does not count).
//  - host: the backend's encode/decode of host memory (pinned staging, two streams), so the
//    figures include the copies over PCIe.
//  - encode/decode use the line kernels; encode_blocks/decode_blocks the one-thread-per-block
//    kernels (cuda::kernel_layout), to compare the two (the default, automatic, takes the
//    faster measured: blocks to encode at B = 8, lines to decode).
//  - decode_gemm: the matrix-form decode (cuda::gemm_decoder: two batched f32 GEMMs).
//  - loader: training ingest, what loaders::device_loader hands a training loop that takes
//    no time itself: batches of 256 images read from an archive in memory (/dev/shm), shuffled,
//    their coefficients copied over PCIe and decoded on the device (or, "host", decoded by
//    the loader's prefetch thread on one core, and not copied). GB/s counts the decoded bytes
//    handed out, "pcie_GB/s" the coefficients' bytes copied to the device.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/device_loader.hpp"
#include "dctchop/metrics.hpp"

namespace {

using namespace dctchop;
using u64 = std::uint64_t;
constexpr double peak_bytes_per_s = 4.8e12;  // H200 HBM3e
constexpr int k_launches = 10;  // timed launches per iteration (device figures)
constexpr int k_warmup = 3;     // untimed runs before the timed ones

struct workload {
  geometry g;
  dtype type;
  codec_params p;
};

/** RGB images at block size 8; the same at 16, whose chops 2, 4, 8 keep what 1, 2, 4 keep at
 *  B = 8 (where kernel_layout::automatic's choice, blocks to encode at B = 8 only, is to be
 *  checked), and at 32, whose chops 4, 8, 16 keep as much (the decode's compact kernel,
 *  compact_decode in lib/src/cuda_grid.hpp, which was made to cut compile time and had not
 *  been measured). */
workload images_u8(u64 n, int chop, int block = 8) {
  codec_params p;
  p.block = block;
  p.chop = chop;
  p.offset = 128;
  return {{layout::nhwc, n, 3, 256, 256}, dtype::u8, p};
}
workload fields_f32(u64 n, int chop) {
  codec_params p;
  p.chop = chop;
  p.coeff = coeff_type::f32;
  return {{layout::nhw, n, 1, 512, 512}, dtype::f32, p};
}

/** The workload's input, made once per process and shared by every benchmark of it: Google
 *  Benchmark calls a benchmark function again for each repetition, and 200 MB of random
 *  values take a while to make. */
const std::vector<std::byte>& input_of(const workload& w) {
  static std::map<std::pair<dtype, u64>, std::vector<std::byte>> made;
  const u64 n = w.g.samples * w.g.values_per_sample();
  auto& v = made[{w.type, n}];
  if (!v.empty()) return v;
  v.resize(n * size_of(w.type));
  std::mt19937_64 rng(3);
  if (w.type == dtype::u8) {
    for (u64 i = 0; i + 8 <= v.size(); i += 8) {
      const std::uint64_t r = rng();
      std::memcpy(v.data() + i, &r, 8);
    }
  } else {
    auto* f = reinterpret_cast<float*>(v.data());
    for (u64 i = 0; i < n; ++i) f[i] = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1p-52 - 1.0);
  }
  return v;
}

/** The direct kernels in either thread layout (cuda::kernel_layout), and the GEMM decode;
 *  copy and memset are the ceilings that the memory gives (cudaMemcpyAsync of the input to
 *  another device buffer, reading and writing it; cudaMemsetAsync of it, writing only). */
enum class op { encode, decode, encode_blocks, decode_blocks, decode_gemm, copy, memset };

/** Device memory, freed on every path (a benchmark that fails goes on to the next). */
struct device_buffer {
  void* p = nullptr;
  explicit device_buffer(std::size_t n) {
    if (cudaMalloc(&p, n) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/** `run` once a timed iteration; one that throws ends the benchmark with its message. */
template <typename F>
void each_iteration(benchmark::State& state, F&& run) {
  for (auto _ : state) {
    try {
      run();
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
}

void device_run(benchmark::State& state, const workload& w, op what) {
  if (!cuda::available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const auto& in = input_of(w);
  const u64 raw = in.size(), coeffs = w.g.samples * coeff_bytes_per_sample(w.p, w.g);
  try {
    device_buffer d_raw(raw), d_c(coeffs), d_flag(sizeof(unsigned long long));
    device_buffer d_copy(what == op::copy ? raw : 1);
    check(cudaMemcpy(d_raw.p, in.data(), raw, cudaMemcpyHostToDevice), "upload");
    cuda::encode_device(w.p, w.g, w.type, w.g.samples, d_raw.p, d_c.p);
    std::unique_ptr<cuda::gemm_decoder> gemm;
    if (what == op::decode_gemm) {
      // One untimed decode: the first uploads the tables and allocates the scratch.
      gemm = std::make_unique<cuda::gemm_decoder>();
      gemm->decode_async(w.p, w.g, w.type, w.g.samples, d_c.p, d_raw.p, nullptr);
      check(cudaDeviceSynchronize(), "the GEMM decode's first run");
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    const auto kl = what == op::encode_blocks || what == op::decode_blocks
                        ? cuda::kernel_layout::blocks
                        : cuda::kernel_layout::lines;
    // Only the device's work between the events: the encode's bad-sample word is the
    // caller's (allocated above), and its reading is left out, as a pipeline would.
    const auto launch = [&] {
      if (what == op::encode || what == op::encode_blocks) {
        cuda::encode_device_async(w.p, w.g, w.type, w.g.samples, d_raw.p, d_c.p,
                                  static_cast<unsigned long long*>(d_flag.p), nullptr, kl);
      } else if (what == op::decode || what == op::decode_blocks) {
        cuda::decode_device_async(w.p, w.g, w.type, w.g.samples, d_c.p, d_raw.p, nullptr, kl);
      } else if (what == op::copy) {
        check(cudaMemcpyAsync(d_copy.p, d_raw.p, raw, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
      } else if (what == op::memset) {
        check(cudaMemsetAsync(d_raw.p, 0x5a, raw), "cudaMemsetAsync");
      } else {
        gemm->decode_async(w.p, w.g, w.type, w.g.samples, d_c.p, d_raw.p, nullptr);
      }
    };
    for (int i = 0; i < k_warmup; ++i) launch();
    check(cudaDeviceSynchronize(), "the untimed runs");
    each_iteration(state, [&] {
      check(cudaEventRecord(start), "cudaEventRecord");
      for (int i = 0; i < k_launches; ++i) launch();
      check(cudaEventRecord(stop), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "the benchmark's work");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      state.SetIterationTime(ms / 1e3);
    });
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double runs = static_cast<double>(state.iterations()) * k_launches;
  // Bytes the work reads plus writes: the data and its coefficients; a copy, the data twice.
  const u64 moved = what == op::copy ? 2 * raw : what == op::memset ? raw : raw + coeffs;
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(raw) * runs / 1e9, benchmark::Counter::kIsRate);
  state.counters["bw_frac"] = benchmark::Counter(
      static_cast<double>(moved) * runs / peak_bytes_per_s, benchmark::Counter::kIsRate);
}

/** Host memory to device and back through the backend: from pageable buffers (staged through
 *  the backend's pinned buffers) or from buffers in its host memory (copied directly), as the
 *  CLI's pipelines give it. */
enum class host_op { encode, decode, measure };

void host_run(benchmark::State& state, const workload& w, host_op what, bool pinned) {
  if (!cuda::available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  try {
    auto be = make_backend(backend_kind::cuda);
    const auto& values = input_of(w);
    const u64 coeff_bytes = w.g.samples * coeff_bytes_per_sample(w.p, w.g);
    byte_buffer in = pinned ? host_buffer(*be, values.size()) : byte_buffer(values.size());
    std::memcpy(in.data(), values.data(), values.size());
    byte_buffer coeffs = pinned ? host_buffer(*be, coeff_bytes) : byte_buffer(coeff_bytes);
    if (pinned &&
        !(cuda::is_pinned(in.data(), in.size()) && cuda::is_pinned(coeffs.data(), coeffs.size()))) {
      state.SkipWithError("no pinned memory");
      return;
    }
    const auto view = make_view(w.g, w.type, static_cast<const void*>(in.data()), w.g.samples);
    // Untimed: the coefficients to decode, and the backend's buffers (device memory, pinned
    // staging) grown by the operation that is timed, not in its first timed run.
    // measure: the decode measured against the input on the device (PSNR's and SSIM's sums,
    // backend::decode_measured), as compress runs it by default; the input stays as it is.
    // (floats: SSIM at a range given, as compress's first pass would find one)
    const quality_accumulator acc(w.type, is_float(w.type) ? std::optional<double>(1.0) : std::nullopt,
                                  true);
    quality_batch figures;
    const auto run = [&] {
      switch (what) {
        case host_op::encode: be->encode(w.p, view, coeffs); break;
        case host_op::decode:
          be->decode(w.p, coeffs, make_view(w.g, w.type, static_cast<void*>(in.data()), w.g.samples));
          break;
        case host_op::measure:
          if (!be->decode_measured(w.p, coeffs, view, acc, figures)) {
            throw std::runtime_error("the backend does not measure this type on the device");
          }
          break;
      }
    };
    be->encode(w.p, view, coeffs);
    if (what != host_op::encode) run();
    each_iteration(state, run);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const u64 in_bytes = w.g.samples * w.g.values_per_sample() * size_of(w.type);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(in_bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

/** An archive of the workload's input (u8 images), made once per process and chop. The
 *  archives (about 530 MB) go to /dev/shm where it has 2 GiB free; gpu-check.sh removes what
 *  a run stopped by its time limit leaves. */
std::string archive_of(const workload& w) {
  static bench::scratch_dir dir("dctchop-gpu-bench", u64(2) << 30);
  static std::map<int, std::string> made;
  if (auto it = made.find(w.p.chop); it != made.end()) return it->second;
  const std::string path =
      (dir.path / ("images-chop" + std::to_string(w.p.chop) + ".dcz")).string();
  bench::compress_u8(path, {w.g.samples, w.g.height, w.g.width, w.g.planes}, input_of(w).data(),
                     w.p.chop, *make_backend(backend_kind::automatic));
  return made[w.p.chop] = path;
}

/** Batches handed out by a device_loader on device 0 (or -1: decoded on the host), one a
 *  timed iteration, each released at once (a training step that takes no time); each batch
 *  made (its chunks read, its coefficients gathered) on `threads` host threads. */
void loader_run(benchmark::State& state, const workload& w, int device, std::size_t threads) {
  if (device >= 0 && !cuda::available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  constexpr std::size_t batch = 256;
  u64 coeff_bytes = 0, images = 0;
  try {
    loaders::loader_options o;
    o.batch_size = batch;
    o.seed = 1;
    o.threads = threads;
    loaders::device_loader loader(archive_of(w), o, device, 2);
    coeff_bytes = loader.source().sample_bytes();
    const auto next = [&] {
      DLManagedTensor* t = loader.next();
      const auto n = static_cast<u64>(t->dl_tensor.shape[0]);
      t->deleter(t);
      return n;
    };
    for (int i = 0; i < 2; ++i) next();  // untimed: the prefetch under way, the kernels loaded
    each_iteration(state, [&] { images += next(); });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double values = static_cast<double>(images * w.g.values_per_sample());
  state.counters["GB/s"] = benchmark::Counter(values / 1e9, benchmark::Counter::kIsRate);
  state.counters["images/s"] =
      benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
  if (device >= 0) {
    state.counters["pcie_GB/s"] = benchmark::Counter(
        static_cast<double>(images * coeff_bytes) / 1e9, benchmark::Counter::kIsRate);
  }
}

// 4096 images of 256x256x3 (805 MB) and 1024 fields of 512x512 f32 (1.07 GB): many times the
// H200's 50 MB of L2 (so that the figures are HBM's), small enough for any recent GPU.
int chop(const benchmark::State& s) { return static_cast<int>(s.range(0)); }
void BM_device_encode_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, chop(s)), op::encode); }
void BM_device_decode_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, chop(s)), op::decode); }
void BM_device_encode_blocks_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, chop(s)), op::encode_blocks); }
void BM_device_decode_blocks_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, chop(s)), op::decode_blocks); }
void BM_device_decode_gemm_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, chop(s)), op::decode_gemm); }
void BM_device_encode_f32_512x512(benchmark::State& s) { device_run(s, fields_f32(1024, chop(s)), op::encode); }
void BM_device_decode_f32_512x512(benchmark::State& s) { device_run(s, fields_f32(1024, chop(s)), op::decode); }
void BM_device_encode_blocks_f32_512x512(benchmark::State& s) { device_run(s, fields_f32(1024, chop(s)), op::encode_blocks); }
void BM_device_decode_blocks_f32_512x512(benchmark::State& s) { device_run(s, fields_f32(1024, chop(s)), op::decode_blocks); }
void BM_device_decode_gemm_f32_512x512(benchmark::State& s) { device_run(s, fields_f32(1024, chop(s)), op::decode_gemm); }
void BM_device_encode_u8_256x256x3_b16(benchmark::State& s) { device_run(s, images_u8(4096, chop(s), 16), op::encode); }
void BM_device_decode_u8_256x256x3_b16(benchmark::State& s) { device_run(s, images_u8(4096, chop(s), 16), op::decode); }
void BM_device_encode_blocks_u8_256x256x3_b16(benchmark::State& s) { device_run(s, images_u8(4096, chop(s), 16), op::encode_blocks); }
void BM_device_decode_blocks_u8_256x256x3_b16(benchmark::State& s) { device_run(s, images_u8(4096, chop(s), 16), op::decode_blocks); }
void BM_device_encode_u8_256x256x3_b32(benchmark::State& s) { device_run(s, images_u8(4096, chop(s), 32), op::encode); }
void BM_device_decode_u8_256x256x3_b32(benchmark::State& s) { device_run(s, images_u8(4096, chop(s), 32), op::decode); }
void BM_device_copy_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, 4), op::copy); }
void BM_device_memset_u8_256x256x3(benchmark::State& s) { device_run(s, images_u8(4096, 4), op::memset); }
void BM_host_encode_u8_256x256x3(benchmark::State& s) { host_run(s, images_u8(4096, chop(s)), host_op::encode, false); }
void BM_host_decode_u8_256x256x3(benchmark::State& s) { host_run(s, images_u8(4096, chop(s)), host_op::decode, false); }
void BM_host_pinned_encode_u8_256x256x3(benchmark::State& s) { host_run(s, images_u8(4096, chop(s)), host_op::encode, true); }
void BM_host_pinned_decode_u8_256x256x3(benchmark::State& s) { host_run(s, images_u8(4096, chop(s)), host_op::decode, true); }
void BM_host_pinned_measure_u8_256x256x3(benchmark::State& s) { host_run(s, images_u8(4096, chop(s)), host_op::measure, true); }
void BM_host_pinned_measure_f32_512x512(benchmark::State& s) { host_run(s, fields_f32(1024, chop(s)), host_op::measure, true); }
std::size_t gather_threads(const benchmark::State& s) {
  return static_cast<std::size_t>(s.range(1));
}
void BM_loader_device_u8_256x256x3(benchmark::State& s) {
  loader_run(s, images_u8(4096, chop(s)), 0, gather_threads(s));
}
void BM_loader_host_u8_256x256x3(benchmark::State& s) {
  loader_run(s, images_u8(4096, chop(s)), -1, gather_threads(s));
}

// A fixed number of iterations: each call of a benchmark function sets up its buffers again
// (device memory, an upload, pinned memory), and Google Benchmark's search for an iteration
// count would call it four or five times. 20 iterations of k_launches kernel runs of about
// 1 GB are timed by CUDA events; 5 host round trips are about 4 GB over PCIe.
#define DCTCHOP_CHOPS Arg(1)->Arg(2)->Arg(4)->ArgName("chop")
#define DCTCHOP_TIMED UseManualTime()->Iterations(20)
#define DCTCHOP_DEVICE DCTCHOP_CHOPS->DCTCHOP_TIMED
#define DCTCHOP_DEVICE_B16 Arg(2)->Arg(4)->Arg(8)->ArgName("chop")->DCTCHOP_TIMED
#define DCTCHOP_DEVICE_B32 Arg(4)->Arg(8)->Arg(16)->ArgName("chop")->DCTCHOP_TIMED
#define DCTCHOP_HOST DCTCHOP_CHOPS->UseRealTime()->Iterations(5)
BENCHMARK(BM_device_encode_u8_256x256x3)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_decode_u8_256x256x3)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_encode_blocks_u8_256x256x3)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_decode_blocks_u8_256x256x3)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_decode_gemm_u8_256x256x3)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_encode_f32_512x512)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_decode_f32_512x512)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_encode_blocks_f32_512x512)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_decode_blocks_f32_512x512)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_decode_gemm_f32_512x512)->DCTCHOP_DEVICE;
BENCHMARK(BM_device_encode_u8_256x256x3_b16)->DCTCHOP_DEVICE_B16;
BENCHMARK(BM_device_decode_u8_256x256x3_b16)->DCTCHOP_DEVICE_B16;
BENCHMARK(BM_device_encode_blocks_u8_256x256x3_b16)->DCTCHOP_DEVICE_B16;
BENCHMARK(BM_device_decode_blocks_u8_256x256x3_b16)->DCTCHOP_DEVICE_B16;
BENCHMARK(BM_device_encode_u8_256x256x3_b32)->DCTCHOP_DEVICE_B32;
BENCHMARK(BM_device_decode_u8_256x256x3_b32)->DCTCHOP_DEVICE_B32;
BENCHMARK(BM_device_copy_u8_256x256x3)->UseManualTime()->Iterations(20);
BENCHMARK(BM_device_memset_u8_256x256x3)->UseManualTime()->Iterations(20);
BENCHMARK(BM_host_encode_u8_256x256x3)->DCTCHOP_HOST;
BENCHMARK(BM_host_decode_u8_256x256x3)->DCTCHOP_HOST;
BENCHMARK(BM_host_pinned_encode_u8_256x256x3)->DCTCHOP_HOST;
BENCHMARK(BM_host_pinned_decode_u8_256x256x3)->DCTCHOP_HOST;
BENCHMARK(BM_host_pinned_measure_u8_256x256x3)->Arg(4)->ArgName("chop")->UseRealTime()->Iterations(5);
BENCHMARK(BM_host_pinned_measure_f32_512x512)->Arg(4)->ArgName("chop")->UseRealTime()->Iterations(5);
// 48 batches of 256: three epochs of the 4096 images (their archives written once, untimed).
// Chops 1, 2 and 4 with one thread making each batch; chop 4 with 4 and 8 too.
BENCHMARK(BM_loader_device_u8_256x256x3)
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({4, 1})
    ->Args({4, 4})
    ->Args({4, 8})
    ->ArgNames({"chop", "threads"})
    ->UseRealTime()
    ->Iterations(48);
BENCHMARK(BM_loader_host_u8_256x256x3)
    ->Args({4, 1})
    ->ArgNames({"chop", "threads"})
    ->UseRealTime()
    ->Iterations(48);

}  // namespace

BENCHMARK_MAIN();
