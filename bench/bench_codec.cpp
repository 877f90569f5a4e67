// In-memory codec throughput (GB/s of uncompressed input), Google Benchmark.
// Run: ./build/bench/dctchop_bench --benchmark_counters_tabular=true (or scripts/bench.sh).
// Batches are 25-32 MB, larger than the caches, so the figures include memory traffic.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/metrics.hpp"

namespace {

using namespace dctchop;

// Smooth-ish synthetic images: a gradient plus noise, like natural images after resizing.
template <typename T>
std::vector<T> make_data(std::size_t n) {
  std::vector<T> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.f, 8.f);
  for (std::size_t i = 0; i < n; ++i) {
    float base = 128.f + 60.f * std::sin(static_cast<float>(i % 997) / 50.f);
    float x = base + noise(rng);
    if constexpr (std::is_integral_v<T>) {
      v[i] = static_cast<T>(std::clamp(x, 0.f, 255.f));
    } else {
      v[i] = static_cast<T>(x / 255.f);
    }
  }
  return v;
}

struct setup {
  geometry g;
  dtype type;
};

setup images_u8(std::uint64_t n) { return {{layout::nhwc, n, 3, 256, 256}, dtype::u8}; }
setup planes_u8(std::uint64_t n) { return {{layout::nhw, n, 1, 256, 256}, dtype::u8}; }
setup fields_f32(std::uint64_t n) { return {{layout::nhw, n, 1, 512, 512}, dtype::f32}; }
setup fields_f16(std::uint64_t n) { return {{layout::nhw, n, 1, 512, 512}, dtype::f16}; }
// Detector frames: uint32 counts, computed in double.
setup frames_u32(std::uint64_t n) { return {{layout::nhw, n, 1, 512, 512}, dtype::u32}; }
// The small images most training sets hold: MNIST-sized planes and CIFAR-sized RGB.
setup mnist_u8(std::uint64_t n) { return {{layout::nhw, n, 1, 28, 28}, dtype::u8}; }
setup cifar_u8(std::uint64_t n) { return {{layout::nhwc, n, 3, 32, 32}, dtype::u8}; }

template <typename T>
void run(benchmark::State& state, setup s, bool encode) {
  const int threads = static_cast<int>(state.range(0));
  const int chop = static_cast<int>(state.range(1));
  const std::uint64_t n = s.g.samples;
  auto x = make_data<T>(n * s.g.values_per_sample());
  codec_params p{8, chop, default_coeff_type(s.type, 8), default_offset(s.type)};
  auto be = make_backend(backend_kind::cpu, {threads});
  std::vector<std::byte> c(n * coeff_bytes_per_sample(p, s.g));
  std::vector<T> y(x.size());
  be->encode(p, make_view(s.g, s.type, static_cast<const void*>(x.data()), n), c);
  for (auto _ : state) {
    if (encode) {
      be->encode(p, make_view(s.g, s.type, static_cast<const void*>(x.data()), n), c);
      benchmark::DoNotOptimize(c.data());
    } else {
      be->decode(p, c, make_view(s.g, s.type, static_cast<void*>(y.data()), n));
      benchmark::DoNotOptimize(y.data());
    }
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(x.size() * sizeof(T));
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GB/s/thread"] = benchmark::Counter(
      bytes * state.iterations() / 1e9 / threads, benchmark::Counter::kIsRate);
}

void BM_encode_u8_256x256x3(benchmark::State& s) { run<std::uint8_t>(s, images_u8(128), true); }
void BM_decode_u8_256x256x3(benchmark::State& s) { run<std::uint8_t>(s, images_u8(128), false); }
void BM_encode_u8_NHW_256x256(benchmark::State& s) { run<std::uint8_t>(s, planes_u8(384), true); }
void BM_decode_u8_NHW_256x256(benchmark::State& s) { run<std::uint8_t>(s, planes_u8(384), false); }
void BM_encode_u8_28x28(benchmark::State& s) { run<std::uint8_t>(s, mnist_u8(32768), true); }
void BM_decode_u8_28x28(benchmark::State& s) { run<std::uint8_t>(s, mnist_u8(32768), false); }
void BM_encode_u8_32x32x3(benchmark::State& s) { run<std::uint8_t>(s, cifar_u8(8192), true); }
void BM_decode_u8_32x32x3(benchmark::State& s) { run<std::uint8_t>(s, cifar_u8(8192), false); }
void BM_encode_f32_512x512(benchmark::State& s) { run<float>(s, fields_f32(32), true); }
void BM_decode_f32_512x512(benchmark::State& s) { run<float>(s, fields_f32(32), false); }
// f16 fields (half the bytes of f32 a value): converted to f32 at load (F16C) and back at store.
using half = detail::half_value;
void BM_encode_f16_512x512(benchmark::State& s) { run<half>(s, fields_f16(64), true); }
void BM_decode_f16_512x512(benchmark::State& s) { run<half>(s, fields_f16(64), false); }
void BM_encode_u32_512x512(benchmark::State& s) { run<std::uint32_t>(s, frames_u32(32), true); }
void BM_decode_u32_512x512(benchmark::State& s) { run<std::uint32_t>(s, frames_u32(32), false); }

/** The quality figures that compress, eval and verify measure by default: PSNR (and the error
 *  figures) alone, or with SSIM; a decoded copy at chop 4 against the original. */
template <typename T>
void quality(benchmark::State& state, setup s) {
  const int threads = static_cast<int>(state.range(0));
  const bool ssim = state.range(1) != 0;
  const std::uint64_t n = s.g.samples;
  auto x = make_data<T>(n * s.g.values_per_sample());
  codec_params p{8, 4, default_coeff_type(s.type, 8), default_offset(s.type)};
  auto be = make_backend(backend_kind::cpu, {threads});
  std::vector<std::byte> c(n * coeff_bytes_per_sample(p, s.g));
  std::vector<T> y(x.size());
  be->encode(p, make_view(s.g, s.type, static_cast<const void*>(x.data()), n), c);
  be->decode(p, c, make_view(s.g, s.type, static_cast<void*>(y.data()), n));
  const auto a = make_view(s.g, s.type, static_cast<const void*>(x.data()), n);
  const auto b = make_view(s.g, s.type, static_cast<const void*>(y.data()), n);
  for (auto _ : state) {
    quality_accumulator q(s.type, 1.0, ssim);
    q.add(a, b, threads);
    benchmark::DoNotOptimize(q.result());
  }
  const double bytes = static_cast<double>(x.size() * sizeof(T));
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

void BM_quality_u8_256x256x3(benchmark::State& s) { quality<std::uint8_t>(s, images_u8(128)); }
void BM_quality_f32_512x512(benchmark::State& s) { quality<float>(s, fields_f32(32)); }
void BM_quality_f16_512x512(benchmark::State& s) { quality<half>(s, fields_f16(64)); }
void BM_quality_u32_512x512(benchmark::State& s) { quality<std::uint32_t>(s, frames_u32(32)); }
void BM_quality_u8_28x28(benchmark::State& s) { quality<std::uint8_t>(s, mnist_u8(32768)); }
void BM_quality_u8_32x32x3(benchmark::State& s) { quality<std::uint8_t>(s, cifar_u8(8192)); }

/** 1, 2 and every core: the streaming benchmark compares with the last. */
std::vector<std::int64_t> thread_counts() {
  std::vector<std::int64_t> t{1, 2};
  const auto n = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  if (n > 2) t.push_back(n);
  return t;
}

// Args: {threads, chop}
#define DCTCHOP_ARGS \
  ArgsProduct({thread_counts(), {1, 2, 4}})->ArgNames({"threads", "chop"})->UseRealTime()
BENCHMARK(BM_encode_u8_256x256x3)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_u8_256x256x3)->DCTCHOP_ARGS;
BENCHMARK(BM_encode_u8_NHW_256x256)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_u8_NHW_256x256)->DCTCHOP_ARGS;
BENCHMARK(BM_encode_u8_28x28)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_u8_28x28)->DCTCHOP_ARGS;
BENCHMARK(BM_encode_u8_32x32x3)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_u8_32x32x3)->DCTCHOP_ARGS;
BENCHMARK(BM_encode_f32_512x512)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_f32_512x512)->DCTCHOP_ARGS;
BENCHMARK(BM_encode_f16_512x512)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_f16_512x512)->DCTCHOP_ARGS;
BENCHMARK(BM_encode_u32_512x512)->DCTCHOP_ARGS;
BENCHMARK(BM_decode_u32_512x512)->DCTCHOP_ARGS;
BENCHMARK(BM_quality_u8_256x256x3)
    ->ArgsProduct({thread_counts(), {0, 1}})->ArgNames({"threads", "ssim"})->UseRealTime();
BENCHMARK(BM_quality_f32_512x512)
    ->ArgsProduct({thread_counts(), {0, 1}})->ArgNames({"threads", "ssim"})->UseRealTime();
BENCHMARK(BM_quality_f16_512x512)
    ->ArgsProduct({thread_counts(), {0, 1}})->ArgNames({"threads", "ssim"})->UseRealTime();
BENCHMARK(BM_quality_u32_512x512)
    ->ArgsProduct({thread_counts(), {0, 1}})->ArgNames({"threads", "ssim"})->UseRealTime();
BENCHMARK(BM_quality_u8_28x28)
    ->ArgsProduct({thread_counts(), {0, 1}})->ArgNames({"threads", "ssim"})->UseRealTime();
BENCHMARK(BM_quality_u8_32x32x3)
    ->ArgsProduct({thread_counts(), {0, 1}})->ArgNames({"threads", "ssim"})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
