// Internal: the HDF5 side of dataset_io (HDF5 C API; no HDF5 types leak out of this pair).
#pragma once

#include <memory>

#include "dctchop/formats/dataset_io.hpp"

namespace dctchop::formats::detail {

std::unique_ptr<sample_source> open_hdf5(const dataset_spec& spec);
std::unique_ptr<sample_sink> create_hdf5(const dataset_spec& spec, const npy_dtype& type,
                                         const std::vector<std::uint64_t>& shape, bool overwrite,
                                         const nlohmann::json& attributes);

}  // namespace dctchop::formats::detail
