// Reading a deflated .npz member (np.savez_compressed), by each inflater this build has: GB/s
// of inflated bytes, CRC-32 included, on one thread (a member is one deflate stream). The .npz
// is named by DCTCHOP_BENCH_NPZ (scripts/bench.sh makes one); its first deflated member is read.
// And the parse of an archive footer of N chunk entries, which every reader does at open: it
// must stay linear in N (a parser callback made it quadratic: 18 s for 320k chunks).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/json_number.hpp"
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

/** A footer as the writer makes it, of `chunks` one-sample chunks 4 KiB apart. */
std::string footer_text(std::uint64_t chunks) {
  nlohmann::json f = {{"samples", chunks}, {"input_bytes", chunks * 64}};
  nlohmann::json list = nlohmann::json::array();
  for (std::uint64_t i = 0; i < chunks; ++i) {
    list.push_back({{"index", i}, {"first", i}, {"count", 1}, {"offset", 4096 * (i + 1)},
                    {"stored_bytes", 32}, {"raw_bytes", 32}, {"stages", 0},
                    {"xxh64", "0123456789abcdef"}});
  }
  f["chunks"] = std::move(list);
  return f.dump();
}

void BM_footer_parse(benchmark::State& state) {
  const auto chunks = static_cast<std::uint64_t>(state.range(0));
  const std::string text = footer_text(chunks);
  std::string twice;
  for (auto _ : state) {
    auto j = dctchop::formats::parse_json_naming_once(text, twice);
    benchmark::DoNotOptimize(j);
  }
  state.SetComplexityN(state.range(0));
  state.counters["chunks/s"] =
      benchmark::Counter(double(chunks) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_footer_parse)
    ->RangeMultiplier(4)
    ->Range(10000, 640000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oN);

}  // namespace

BENCHMARK_MAIN();
