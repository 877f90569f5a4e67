// Fuzz target: the decoders dctchop runs on compressed HDF5 chunks as stored in a file
// (decode_chunk: deflate by libdeflate, LZF, the LZ4 filter's framing with liblz4, zstd; and
// unshuffle). The input's first byte picks the filter, the next three the decoded size the
// dataset expects (at most 1 MiB), the rest is the chunk's stored bytes. The output buffer
// is exactly that size, so AddressSanitizer sees any write past it, and the input exactly the
// chunk's, so it sees any read past it. A crash, a hang or a leak is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hdf5_filters.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  namespace d = dctchop::formats::detail;
  const std::size_t out_bytes =
      (std::size_t(data[1]) | std::size_t(data[2]) << 8 | std::size_t(data[3]) << 16) & 0xFFFFF;
  const std::vector<std::uint8_t> in(data + 4, data + size);  // exactly the chunk's bytes
  std::vector<std::uint8_t> out(out_bytes);
  switch (data[0] % 5) {
    case 0: d::decode_chunk(H5Z_FILTER_DEFLATE, in.data(), in.size(), out.data(), out.size()); break;
    case 1: d::decode_chunk(d::filter_lzf, in.data(), in.size(), out.data(), out.size()); break;
    case 2: d::decode_chunk(d::filter_lz4, in.data(), in.size(), out.data(), out.size()); break;
    case 3: d::decode_chunk(d::filter_zstd, in.data(), in.size(), out.data(), out.size()); break;
    default: {
      std::vector<std::uint8_t> back(in.size());
      d::unshuffle(in.data(), in.size(), 1 + data[1] % 16, back.data());
    }
  }
  return 0;
}
