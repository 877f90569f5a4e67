// Fuzz target: the archive reader, random access (a regular file) and streaming (a pipe), and
// the decode of what it returns. Any exception other than dctchop::error, any crash, hang or
// leak is a finding. Fuzzing builds skip the checksums (see archive.cpp) so the fuzzer reaches
// the index and the decoder; the replay under ctest runs the same inputs with checksums on.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "fuzz_util.hpp"

namespace {

using dctchop::formats::archive_reader;
using dctchop::formats::chunk_info;

constexpr std::uint64_t k_max_decode = 8u << 20;  // bytes of decoded output per chunk

dctchop::backend& cpu() {
  static auto be = [] {
    dctchop::backend_options o;
    o.threads = 1;
    return dctchop::make_backend(dctchop::backend_kind::cpu, o);
  }();
  return *be;
}

/** Decode a chunk's coefficients as dctchop decompress would (skipped when huge). */
void decode(const archive_reader& r, const chunk_info& c, const std::vector<std::byte>& coeffs) {
  const auto& h = r.header();
  const std::uint64_t bytes_per_sample = h.geom.values_per_sample() * dctchop::size_of(h.type);
  if (c.count == 0 || bytes_per_sample == 0 || c.count > k_max_decode / bytes_per_sample) return;
  std::vector<std::byte> out(c.count * bytes_per_sample);
  cpu().decode(h.codec, coeffs, dctchop::make_view(h.geom, h.type, out.data(), c.count));
}

void random_access(const std::string& path) {
  archive_reader r = archive_reader::open(path);
  std::vector<std::byte> coeffs;
  for (std::size_t i = 0; i < r.chunks().size(); ++i) {
    r.read_chunk(i, coeffs);
    decode(r, r.chunks()[i], coeffs);
  }
  const auto& h = r.header();
  const std::uint64_t n = std::min<std::uint64_t>(h.geom.samples, 2);
  const std::uint64_t cbps = h.coeff_bytes_per_sample();
  if (cbps > 0 && n <= k_max_decode / cbps) {
    std::vector<std::byte> some(n * cbps);
    r.read_samples(h.geom.samples - n, n, some);
  }
  for (const auto& s : r.side_arrays()) (void)r.read_side_array(s.name);
  (void)h.to_json().dump();
}

void stream(const std::string& path) {
  archive_reader r = archive_reader::open(path);
  chunk_info c;
  std::vector<std::byte> coeffs;
  while (r.next_chunk(c, coeffs)) decode(r, c, coeffs);
  for (const auto& s : r.side_arrays()) (void)r.read_side_array(s.name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dctchop::fuzz::as_file_and_pipe(data, size, [](const std::string& path, bool file) {
    file ? random_access(path) : stream(path);
  });
  return 0;
}
