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

/** Every row in steps, then the first row again (a deflated member decodes from the start). */
void read_rows(dctchop::formats::npy_reader& r) {
  if (!dctchop::fuzz::read_rows_in_steps(r) || r.rows() == 0) return;
  std::vector<std::byte> row(r.header().row_bytes());
  r.read_rows(0, 1, row.data());
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
