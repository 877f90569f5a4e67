// Reading a deflated .npz member (np.savez_compressed), by each inflater this build has: GB/s
// of inflated bytes, CRC-32 included, on one thread (a member is one deflate stream). The .npz
// is named by DCTCHOP_BENCH_NPZ (scripts/bench.sh makes one); its first deflated member is read.
// And the parse of an archive footer of N chunk entries, which every reader does at open: it
// must stay linear in N (a parser callback made it quadratic: 18 s for 320k chunks).
// And reads of a .npy file's rows as compress reads its chunks, one read at a time split over
// 1 to 8 threads (dataset_spec::read_threads): GB/s from the page cache. And writes of 8 MiB
// through output_file, direct I/O asked for or not.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/file_io.hpp"
#include "dctchop/formats/json_number.hpp"
#include "dctchop/formats/npy.hpp"
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

/** A .npy of `images` u8 images of 256x256x3 in DCTCHOP_BENCH_DIR (default /dev/shm, else the
 *  temporary folder), written once a run and removed at exit: in the page cache, as a file
 *  just written or read before is. */
class npy_file {
 public:
  static constexpr std::uint64_t images = 2048;  // 384 MiB
  static constexpr std::uint64_t image_bytes = 256 * 256 * 3;
  static const std::string& path() {
    static npy_file f;
    return f.path_;
  }
  ~npy_file() { std::filesystem::remove(path_); }

 private:
  npy_file() {
    const char* dir = std::getenv("DCTCHOP_BENCH_DIR");
    std::string d = dir != nullptr ? dir : (std::filesystem::is_directory("/dev/shm")
                                                ? "/dev/shm"
                                                : std::filesystem::temp_directory_path().string());
    path_ = d + "/dctchop_bench_read_" + std::to_string(::getpid()) + ".npy";
    auto w = dctchop::formats::npy_writer::create(path_, dctchop::formats::npy_dtype{},
                                                  {images, 256, 256, 3}, true);
    std::vector<unsigned char> row(image_bytes * 64);
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<unsigned char>(i * 7);
    for (std::uint64_t i = 0; i < images; i += 64) w.write_rows(row.data(), 64);
    w.finish();
  }
  std::string path_;
};

/** Args: MiB a read (compress's chunk: 8 MiB of u8 at chop 4 and the default --chunk-mb, 64
 *  at most), threads. Reads go round 4 buffers, as the pipeline's slots do. */
void BM_npy_read_rows(benchmark::State& state) {
  const std::uint64_t rows = static_cast<std::uint64_t>(state.range(0)) * (1 << 20) /
                             npy_file::image_bytes;
  try {
    dctchop::formats::dataset_spec spec = dctchop::formats::parse_dataset_spec(npy_file::path());
    spec.read_threads = static_cast<unsigned>(state.range(1));
    const auto src = dctchop::formats::open_dataset(spec);
    std::vector<std::vector<unsigned char>> slot(
        4, std::vector<unsigned char>(rows * npy_file::image_bytes, 1));
    std::uint64_t read = 0, next = 0;
    std::size_t s = 0;
    for (auto _ : state) {
      const std::uint64_t n = std::min(rows, npy_file::images - next);
      src->read_rows(next, n, slot[s].data());
      read += n * npy_file::image_bytes;
      next = next + n == npy_file::images ? 0 : next + n;
      s = (s + 1) % slot.size();
    }
    state.counters["GB/s"] = benchmark::Counter(double(read) / 1e9, benchmark::Counter::kIsRate);
  } catch (const dctchop::error& e) {
    state.SkipWithError(e.what());
  }
}

BENCHMARK(BM_npy_read_rows)
    ->ArgNames({"MiB", "threads"})
    ->ArgsProduct({{8, 64}, {1, 2, 4, 8}})
    ->MinWarmUpTime(0.5)  // the buffers' and the file's first touches, untimed
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/** Arg: direct I/O asked for (1; output_file takes it where the file system does) or not (0).
 *  256 MiB written in writes of 8 MiB (a chunk's rows of u8 images at chop 4) to a file in
 *  DCTCHOP_BENCH_DIR (default /dev/shm), flushed (direct: drained) and removed each time;
 *  the counter "direct" says which way it went. */
void BM_output_write(benchmark::State& state) {
  const bool direct_io = state.range(0) != 0;
  const char* dir = std::getenv("DCTCHOP_BENCH_DIR");
  const std::string path = std::string(dir != nullptr ? dir : "/dev/shm") +
                           "/dctchop_bench_write_" + std::to_string(::getpid()) + ".bin";
  const std::size_t total = std::size_t(256) << 20, step = std::size_t(8) << 20;
  std::vector<unsigned char> rows(step);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<unsigned char>(i * 13);
  bool direct = false;
  try {
    for (auto _ : state) {
      auto f = dctchop::formats::output_file::create(path, true, direct_io);
      direct = f.direct();
      for (std::size_t at = 0; at < total; at += step) f.write(rows.data(), step);
      f.flush_to_disk();
      state.PauseTiming();
      f.commit();
      std::filesystem::remove(path);
      state.ResumeTiming();
    }
    state.counters["GB/s"] =
        benchmark::Counter(double(total) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
    state.counters["direct"] = direct ? 1 : 0;
  } catch (const dctchop::error& e) {
    state.SkipWithError(e.what());
  }
}

BENCHMARK(BM_output_write)
    ->ArgName("direct")
    ->Arg(1)
    ->Arg(0)
    ->MinWarmUpTime(0.5)
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
