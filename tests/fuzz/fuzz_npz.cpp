// Fuzz target: .npz inputs. The ZIP reader (end records, Zip64, the directory, local headers),
// stored and deflated members (zlib, CRC-32 and size checks, restarts to read backwards), the
// .npy reader on each member, and the choice of an array when none is named. Any exception
// other than dctchop::error, any crash, hang or leak is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/npy.hpp"
#include "fuzz_util.hpp"
#include "zip_reader.hpp"

namespace {

constexpr std::uint64_t k_max_buffer = 1u << 20;

/** Every row in steps, then the first row again (a deflated member decodes from the start). */
void read_rows(dctchop::formats::npy_reader& r) {
  const std::uint64_t row = r.header().row_bytes();
  if (row == 0 || row > k_max_buffer) return;
  const std::uint64_t step = std::max<std::uint64_t>(1, k_max_buffer / row / 4);
  std::vector<std::byte> buf(step * row);
  for (std::uint64_t first = 0; first < r.rows(); first += step) {
    r.read_rows(first, std::min(step, r.rows() - first), buf.data());
  }
  if (r.rows() > 0) r.read_rows(0, 1, buf.data());
}

void read_npz(const std::string& path) {
  const auto z = dctchop::formats::detail::zip_reader::open(path);
  for (const auto& m : z.members()) {
    try {
      auto r = dctchop::formats::npy_reader::open(z.open_member(m, "member"));
      read_rows(r);
    } catch (const dctchop::error&) {
    }
  }
  dctchop::formats::dataset_spec s;
  s.path = path;
  s.kind = dctchop::formats::file_kind::npz;
  for (auto role : {dctchop::formats::dataset_spec::role::data,
                    dctchop::formats::dataset_spec::role::labels}) {
    s.purpose = role;
    try {
      auto src = dctchop::formats::open_dataset(s);
      (void)src->note();
    } catch (const dctchop::error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dctchop::fuzz::mem_file f(data, size);
  try {
    read_npz(f.path());
  } catch (const dctchop::error&) {
  }
  return 0;
}
