// Internal: what a file's first bytes say it is, for messages about the files users mix up
// (a .npy given as an archive, an HDF5 file given as a .npy, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "dctchop/formats/archive.hpp"

namespace dctchop::formats::detail {

enum class file_magic { npy, archive, hdf5, zip, empty_zip, other };

/** The kind of file whose first `n` bytes are `head` (8 are enough). */
inline file_magic magic_of(const void* head, std::size_t n) {
  const auto starts = [&](std::string_view m) {
    return n >= m.size() && std::memcmp(head, m.data(), m.size()) == 0;
  };
  if (starts("\x93NUMPY")) return file_magic::npy;
  if (starts({reinterpret_cast<const char*>(archive_magic.data()), archive_magic.size()})) {
    return file_magic::archive;
  }
  if (starts(std::string_view("\x89HDF\r\n\x1a\n", 8))) return file_magic::hdf5;
  if (starts("PK\x03\x04")) return file_magic::zip;        // a ZIP file's first local header
  if (starts("PK\x05\x06")) return file_magic::empty_zip;  // an empty ZIP: its directory's end
  return file_magic::other;
}

/** What a seekable file named as a .npy holds instead ("" for anything else): the NPY
 *  reader's words, which a name that goes on to a dataset (`x.npy:images`) repeats. */
inline const char* not_npy_text(file_magic m) {
  switch (m) {
    case file_magic::hdf5: return "is an HDF5 file, not a .npy file (name it .h5)";
    case file_magic::zip:
    case file_magic::empty_zip:
      return "is a ZIP file (numpy's .npz?), not a .npy file (name it .npz)";
    default: return "";
  }
}

/** Whether an HDF5 signature follows a user block (512, 1024, 2048, ... bytes: MATLAB v7.3
 *  files have one), in a file of `size` bytes whose first 8 were no signature;
 *  `read8(offset, head)` reads 8 bytes there, false where it cannot. */
template <typename Read8>
bool hdf5_after_user_block(std::uint64_t size, Read8 read8) {
  for (std::uint64_t at = 512; at + 8 <= size && at <= (std::uint64_t(1) << 30); at *= 2) {
    unsigned char head[8];
    if (read8(at, head) && magic_of(head, 8) == file_magic::hdf5) return true;
  }
  return false;
}

}  // namespace dctchop::formats::detail
