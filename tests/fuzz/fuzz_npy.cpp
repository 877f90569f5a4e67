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

void read_all(const std::string& path) {
  auto r = dctchop::formats::npy_reader::open(path);
  if (!dctchop::fuzz::read_rows_in_steps(r)) return;
  (void)r.header().type.native_descr();
  (void)r.header().type.codec_dtype();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dctchop::fuzz::as_file_and_pipe(data, size,
                                  [](const std::string& path, bool) { read_all(path); });
  return 0;
}
