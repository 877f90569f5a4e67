// Baseline for scripts/bench_hdf5.sh: read a dataset along axis 0 with dctchop's own reader
// (formats::open_dataset), in pieces of ROWS rows, and nothing else: the speed that a
// compression streaming from this file could reach at best.
// Usage: h5_read_baseline FILE.h5:/dataset [ROWS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/dataset_io.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE.h5:/dataset [ROWS]\n", argv[0]);
    return 2;
  }
  try {
    auto src = dctchop::formats::open_dataset(dctchop::formats::parse_dataset_spec(argv[1]));
    const std::uint64_t rows = src->rows();
    const std::uint64_t step = argc > 2 ? std::strtoull(argv[2], nullptr, 10)
                                        : std::max<std::uint64_t>(1, (64ull << 20) / src->row_bytes());
    std::vector<std::byte> buf(step * src->row_bytes());
    const auto t0 = std::chrono::steady_clock::now();
    unsigned long long sum = 0;
    for (std::uint64_t r = 0; r < rows; r += step) {
      const std::uint64_t n = std::min(step, rows - r);
      src->read_rows(r, n, buf.data());
      sum += static_cast<unsigned char>(buf[0]);  // keep the read observable
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bytes = double(rows) * double(src->row_bytes());
    std::printf("{\"bytes\": %.0f, \"seconds\": %.3f, \"gbps\": %.3f, \"rows_per_read\": %llu, \"check\": %llu}\n",
                bytes, s, bytes / s / 1e9, static_cast<unsigned long long>(step), sum);
  } catch (const dctchop::error& e) {
    std::fprintf(stderr, "h5_read_baseline: %s\n", e.what());
    return 1;
  }
  return 0;
}
