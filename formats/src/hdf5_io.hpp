// Internal: the HDF5 side of dataset_io (HDF5 C API; no HDF5 types leak out of this pair).
#pragma once

#include <memory>
#include <string>

#include "dctchop/formats/dataset_io.hpp"

namespace dctchop::formats::detail {

std::unique_ptr<sample_source> open_hdf5(const dataset_spec& spec);

/** The first cycle of virtual datasets that reading `object` of the HDF5 file `path` meets,
 *  as "a.h5:/v -> b.h5:/v -> a.h5:/v" ("" when none): a source that leads back to a virtual
 *  dataset on its way, which HDF5 reads by recursing until the stack ends. */
std::string virtual_source_cycle(const std::string& path, const std::string& object);
std::unique_ptr<sample_sink> create_hdf5(const dataset_spec& spec, const npy_dtype& type,
                                         const std::vector<std::uint64_t>& shape, bool overwrite,
                                         const nlohmann::json& attributes);

}  // namespace dctchop::formats::detail
