// Internal: the HDF5 side of dataset_io (HDF5 C API; no HDF5 types leak out of this pair).
#pragma once

#include <memory>
#include <string>

#include "dctchop/formats/dataset_io.hpp"

namespace dctchop::formats::detail {

std::unique_ptr<sample_source> open_hdf5(const dataset_spec& spec);

/** What reading `object` of the HDF5 file `path` would meet that HDF5 cannot get through. */
struct way_problems {
  /** The first cycle of virtual datasets, as "a.h5:/v -> b.h5:/v -> a.h5:/v" ("" when
   *  none): a source that leads back to a virtual dataset on its way, which HDF5 reads by
   *  recursing until the stack ends. */
  std::string cycle;
  /** The first file on the way (an external link's target, a raw file, a virtual dataset's
   *  source) that HDF5 would find as a pipe, character device or socket, whose open or read
   *  would wait (a FIFO without a writer), as "a.h5:/img is an external link to b.h5:/img,
   *  and b.h5 is a pipe (FIFO)"; "" when none. */
  std::string waits;
};
way_problems problems_on_way(const std::string& path, const std::string& object);
std::unique_ptr<sample_sink> create_hdf5(const dataset_spec& spec, const npy_dtype& type,
                                         const std::vector<std::uint64_t>& shape, bool overwrite,
                                         const nlohmann::json& attributes);

}  // namespace dctchop::formats::detail
