// Internal: HDF5 compression filters of input datasets. HDF5 decodes a filtered chunk through
// the filter registered under its id, loading a plugin when none is registered. dctchop adds
// filters of its own for two common filters that Debian 12 ships no working plugin for, and
// refuses a dataset whose filter cannot be loaded at open, naming the filter and its package,
// instead of failing at the first read.
#pragma once

#include <hdf5.h>

#include <string>

namespace dctchop::formats::detail {

/** Registers dctchop's HDF5 filters 32000 (LZF, h5py's `compression="lzf"`; Debian 12's
 *  hdf5-plugin-lzf cannot be loaded: its library lacks liblzf) and 32015 (Zstandard; no Debian
 *  plugin), in place of any other filter of those ids (same formats). Once per process; the
 *  registry is the HDF5 library's, shared with any other HDF5 user in the process, so each
 *  filter also encodes, as the reference plugins do (dctchop itself writes no filtered data). */
void register_builtin_filters();

/** Throws errc::bad_input naming the first filter of a dataset's creation property list `dcpl`
 *  that this process cannot decode: its id and name, and the Debian package (or
 *  HDF5_PLUGIN_PATH) that would provide it. `name` is the file and dataset, for the message. */
void check_filters_available(hid_t dcpl, const std::string& name);

}  // namespace dctchop::formats::detail
