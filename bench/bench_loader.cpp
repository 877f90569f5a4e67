// Loader throughput on the CPU (Google Benchmark): the images per second and the GB/s of
// batch data that archive_loader::next() hands a training loop, with its default prefetch of
// two batches on a background thread. Archives are made once per run in a temporary folder:
// 60,000 MNIST-sized u8 images (28x28, batches of 128) and 256 u8 images of 256x256x3
// (batches of 16, and of 256: one batch of 50 MB an epoch, a training batch's size), block 8,
// chop 4, f16. Decode on 1 or 2 CPU threads, or off (batches of stored coefficients, as the
// device loaders take them: reading and gathering only); each batch made on 1 or 2 threads.
// Run: ./build/bench/dctchop_loader_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/loader.hpp"

namespace {

using namespace dctchop;
namespace fs = std::filesystem;
using u64 = std::uint64_t;

/** The temporary folder, removed when the run ends. */
const fs::path& scratch() {
  static bench::scratch_dir d("dctchop-loader-bench");
  return d.path;
}

/** An archive of n u8 samples of shape (h, w) or (h, w, c): smooth gradients plus noise. */
std::string archive_of(const std::string& name, u64 n, u64 h, u64 w, u64 c) {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(name); it != made.end()) return it->second;
  const fs::path dcz = scratch() / (name + ".dcz");
  std::vector<u64> shape{n, h, w};
  if (c > 1) shape.push_back(c);
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.f, 8.f);
  const u64 per = h * w * c;
  std::vector<std::uint8_t> data(n * per);  // compressed from memory, as dctchop.compress does
  for (u64 s = 0; s < n; ++s) {
    for (u64 i = 0; i < per; ++i) {
      const float base = 128.f + 60.f * std::sin(static_cast<float>(i % 997 + s) / 50.f);
      data[s * per + i] = static_cast<std::uint8_t>(std::clamp(base + noise(rng), 0.f, 255.f));
    }
  }
  bench::compress_u8(dcz.string(), shape, data.data(), 4, *make_backend(backend_kind::cpu));
  return made[name] = dcz.string();
}

/** Args: {data (0: 28x28, 1: 256x256x3 in batches of 16, 2: of 256), decode threads (0: no
 *  decode), threads that make a batch (loader_options::threads)}. */
void BM_loader(benchmark::State& state) {
  const bool small = state.range(0) == 0;
  const int threads = static_cast<int>(state.range(1));
  const std::string path = small ? archive_of("mnist", 60000, 28, 28, 1)
                                 : archive_of("images", 256, 256, 256, 3);
  loaders::loader_options o;
  o.batch_size = small ? 128 : state.range(0) == 1 ? 16 : 256;
  o.seed = 1;
  o.decode = threads > 0;
  o.threads = static_cast<std::size_t>(state.range(2));
  std::shared_ptr<backend> be;
  if (threads > 0) be = make_backend(backend_kind::cpu, {threads});
  loaders::archive_loader loader(path, o, be);
  double images = 0, bytes = 0;
  for (auto _ : state) {
    auto b = loader.next();
    benchmark::DoNotOptimize(b.data.data());
    images += static_cast<double>(b.samples.size());
    bytes += static_cast<double>(b.data.size());
  }
  state.counters["images/s"] = benchmark::Counter(images, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_loader)
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}, {1, 2}})
    ->ArgNames({"big", "decode_threads", "threads"})
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
