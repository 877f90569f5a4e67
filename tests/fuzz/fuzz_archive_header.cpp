// Fuzz target: the archive header (the JSON after the preamble). The fuzzer's bytes are the
// header text; a header that parses must survive a round trip through to_json() unchanged, and
// must pass the same checks when wrapped in a preamble with a correct checksum and opened as a
// file. Any exception other than dctchop::error, a crash, or a failed round trip is a finding.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "fuzz_util.hpp"

namespace {

using dctchop::formats::archive_header;

/** Preamble (ARCHIVE.md) + header + padding to the data offset, and nothing after. */
std::vector<std::uint8_t> wrap(std::string_view text) {
  std::vector<std::uint8_t> f(64, 0);
  const unsigned char magic[8] = {0x89, 'D', 'C', 'Z', '\r', '\n', 0x1a, '\n'};
  std::memcpy(f.data(), magic, 8);
  const std::uint16_t major = 1, minor = 0;
  const std::uint64_t bytes = text.size(), hash = XXH64(text.data(), text.size(), 0);
  const std::uint64_t data_offset = (64 + bytes + 4095) / 4096 * 4096;
  const std::uint32_t alignment = 4096;
  std::memcpy(&f[8], &major, 2);
  std::memcpy(&f[10], &minor, 2);
  std::memcpy(&f[16], &bytes, 8);
  std::memcpy(&f[24], &hash, 8);
  std::memcpy(&f[32], &data_offset, 8);
  std::memcpy(&f[40], &alignment, 4);
  f.insert(f.end(), text.begin(), text.end());
  f.resize(data_offset, 0);
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bool parsed = false;
  try {
    const archive_header h = dctchop::formats::parse_archive_header(text, "fuzz");
    parsed = true;
    const std::string again = h.to_json().dump();
    const archive_header h2 = dctchop::formats::parse_archive_header(again, "fuzz");
    if (h2.to_json() != h.to_json()) std::abort();  // the round trip changed the header
    (void)dctchop::formats::predict_archive_bytes(h, {}, nlohmann::json::object());
  } catch (const dctchop::error&) {
    if (parsed) std::abort();  // a header we accepted, written back, must be accepted again
  }
  if (size > 0 && size < (1u << 20)) {
    const auto file = wrap(text);
    dctchop::fuzz::mem_file f(file.data(), file.size());
    try {
      (void)dctchop::formats::archive_reader::open(f.path());
    } catch (const dctchop::error&) {
    }
  }
  return 0;
}
