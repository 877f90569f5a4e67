// Reading a deflated .npz member (np.savez_compressed), by each inflater this build has: GB/s
// of inflated bytes, CRC-32 included, on one thread (a member is one deflate stream). The .npz
// is named by DCTCHOP_BENCH_NPZ (scripts/bench.sh makes one); its first deflated member is read.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

#include "dctchop/error.hpp"
#include "zip_reader.hpp"

namespace {

namespace zd = dctchop::formats::detail;

void BM_npz_inflate(benchmark::State& state, zd::inflater with) {
  const char* path = std::getenv("DCTCHOP_BENCH_NPZ");
  if (path == nullptr) {
    state.SkipWithError("set DCTCHOP_BENCH_NPZ to a .npz with a deflated member");
    return;
  }
  if (!zd::inflater_built(with)) {
    state.SkipWithError("this inflater was not built in");
    return;
  }
  try {
    const auto z = zd::zip_reader::open(path);
    const zd::zip_member* m = nullptr;
    for (const auto& x : z.members())
      if (m == nullptr && x.method == zd::zip_member::deflated) m = &x;
    if (m == nullptr) {
      state.SkipWithError("the .npz holds no deflated member");
      return;
    }
    std::vector<unsigned char> buf(std::size_t(4) << 20);  // as the reader asks: rows at a time
    for (auto _ : state) {
      auto src = z.open_member(*m, m->name, with);
      while (src->read(buf.data(), buf.size()) > 0) {
      }
      benchmark::DoNotOptimize(buf.data());
    }
    state.counters["GB/s"] =
        benchmark::Counter(double(m->size) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
    state.counters["ratio"] = double(m->size) / double(m->compressed);
  } catch (const dctchop::error& e) {
    state.SkipWithError(e.what());
  }
}

BENCHMARK_CAPTURE(BM_npz_inflate, zlib, zd::inflater::zlib)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_npz_inflate, isal, zd::inflater::isal)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
