// Fuzz target: the .npy reader (header parser, dtype and shape checks, byte-order and
// Fortran-order conversion), on a regular file and on a pipe as for stdin. Any exception other
// than dctchop::error, any crash, hang or leak is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/npy.hpp"
#include "fuzz_util.hpp"

namespace {

constexpr std::uint64_t k_max_buffer = 1u << 20;

void read_all(const std::string& path) {
  auto r = dctchop::formats::npy_reader::open(path);
  const std::uint64_t row = r.header().row_bytes();
  if (row == 0 || row > k_max_buffer) return;
  const std::uint64_t step = std::max<std::uint64_t>(1, k_max_buffer / row / 4);
  std::vector<std::byte> buf(step * row);
  for (std::uint64_t first = 0; first < r.rows(); first += step) {
    r.read_rows(first, std::min(step, r.rows() - first), buf.data());
  }
  (void)r.header().type.native_descr();
  (void)r.header().type.codec_dtype();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dctchop::fuzz::as_file_and_pipe(data, size,
                                  [](const std::string& path, bool) { read_all(path); });
  return 0;
}
