// ZIP output for .npz files (see zip_writer.hpp).
#include "zip_writer.hpp"

#include <libdeflate.h>

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "byte_order.hpp"
#include "dctchop/error.hpp"

namespace dctchop::formats::detail {

namespace {

/** Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past
 *  U+10FFFF), as a reader that honours the UTF-8 flag (Python's zipfile) decodes it. */
bool well_formed_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
                : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
    if (n < 0 || i + n >= s.size()) return false;  // a stray byte, or cut short
    std::uint32_t cp = n == 0 ? c : n == 1 ? c & 0x1f : n == 2 ? c & 0x0f : c & 0x07;
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

void check_member_key(const std::string& key, const std::string& file) {
  // Flagged UTF-8 by begin_member: a name that is not would make numpy refuse the whole file.
  if (!well_formed_utf8(key)) {
    throw error(errc::invalid_argument, file + ": the array name '" + key +
                                            "' is not UTF-8, and numpy would refuse the whole "
                                            "file: name the array in UTF-8");
  }
  if (key.empty()) return;  // (the default name)
  // A ZIP name is at most 65,535 bytes, ".npy" added (the member is KEY.npy).
  if (key.size() + 4 > 0xffff) {
    throw error(errc::invalid_argument,
                file + ": the array name '" + key.substr(0, 40) + "...' is " +
                    std::to_string(key.size()) + " bytes long: a ZIP member's name, '.npy' "
                    "added, holds at most 65,535");
  }
  bool escapes = !key.empty() && (key.front() == '/' || key.front() == '\\');
  bool empty_part = false;  // "a/" (a member "a/.npy", hidden in a folder), "a//b"
  std::size_t start = 0;
  while (!escapes && start <= key.size()) {
    const std::size_t end = std::min(key.find_first_of("/\\", start), key.size());
    escapes = key.compare(start, end - start, "..") == 0;
    empty_part = empty_part || end == start;
    start = end + 1;
  }
  if (!escapes && empty_part) {
    throw error(errc::invalid_argument,
                file + ": the array name '" + key +
                    "' has an empty part (a trailing or doubled '/'): name an array, like "
                    "train/x");
  }
  if (escapes) {
    throw error(errc::invalid_argument,
                file + ": the array name '" + key +
                    "' would unzip outside the file's folder (no '..' part, no leading '/')");
  }
}
namespace {

using u64 = std::uint64_t;

constexpr u64 k_max32 = 0xffffffffu;
constexpr std::uint16_t k_version = 45;     // 4.5: Zip64
// "Version made by": 4.5 on Unix (3 << 8), as Python's zipfile writes, so that Info-ZIP's unzip
// honours the UTF-8 flag (made by MS-DOS, it took a name as code page 437) and the mode below.
constexpr std::uint16_t k_made_by = (3 << 8) | k_version;
constexpr std::uint32_t k_unix_file = 0100644u << 16;  // external attributes: a file, rw-r--r--
constexpr std::uint16_t k_descriptor = 0x0008;
constexpr std::uint16_t k_utf8 = 0x0800;  // the name is UTF-8 (else readers take it as cp437)
constexpr std::uint16_t k_dos_date = 0x21;  // 1980-01-01 00:00: the same bytes on every run


}  // namespace

void zip_writer::begin_member(const std::string& name) {
  if (open_) throw error(errc::internal, "zip_writer: a member is already open");
  if (name.empty() || name.size() > 0xffff) throw error(errc::invalid_argument, "bad ZIP member name '" + name + "'");
  const bool ascii = std::all_of(name.begin(), name.end(), [](char c) { return (c & 0x80) == 0; });
  // Callers check names first (check_member_key, naming the file): this is the last guard.
  if (!ascii && !well_formed_utf8(name)) {
    throw error(errc::invalid_argument, "ZIP member name '" + name + "' is not UTF-8");
  }
  const auto flags = static_cast<std::uint16_t>(k_descriptor | (ascii ? 0 : k_utf8));
  entries_.push_back({name, flags, 0, 0, out_.position()});
  std::string h;
  append_le(h, 0x04034b50, 4);
  append_le(h, k_version, 2);
  append_le(h, flags, 2);
  append_le(h, 0, 2);  // stored
  append_le(h, 0, 2);  // time
  append_le(h, k_dos_date, 2);
  append_le(h, 0, 4);        // CRC-32: in the descriptor
  append_le(h, k_max32, 4);  // sizes: in the Zip64 field, then the descriptor
  append_le(h, k_max32, 4);
  append_le(h, name.size(), 2);
  append_le(h, 20, 2);
  h += name;
  append_le(h, 0x0001, 2);  // Zip64 extra field: sizes, zero until the descriptor
  append_le(h, 16, 2);
  append_le(h, 0, 8);
  append_le(h, 0, 8);
  out_.write(h.data(), h.size());
  open_ = true;
}

void zip_writer::write(const void* data, std::size_t n) {
  if (!open_) throw error(errc::internal, "zip_writer: no member is open");
  if (n == 0) return;  // (libdeflate_crc32 of a null buffer is the initial value: the CRC lost)
  auto& e = entries_.back();
  e.crc = static_cast<std::uint32_t>(libdeflate_crc32(e.crc, data, n));
  e.size += n;
  out_.write(data, n);
}

void zip_writer::end_member() {
  if (!open_) throw error(errc::internal, "zip_writer: no member is open");
  const auto& e = entries_.back();
  std::string d;
  append_le(d, 0x08074b50, 4);
  append_le(d, e.crc, 4);
  append_le(d, e.size, 8);  // Zip64 descriptor: 8-byte sizes, compressed then uncompressed
  append_le(d, e.size, 8);
  out_.write(d.data(), d.size());
  open_ = false;
}

void zip_writer::finish() {
  if (open_) end_member();
  const u64 dir_at = out_.position();
  std::string dir;
  for (const auto& e : entries_) {
    const bool big_size = e.size >= zip64_at_, big_offset = e.offset >= zip64_at_;
    std::string extra;
    if (big_size || big_offset) {
      append_le(extra, 0x0001, 2);
      append_le(extra, (big_size ? 16 : 0) + (big_offset ? 8 : 0), 2);
      if (big_size) {
        append_le(extra, e.size, 8);
        append_le(extra, e.size, 8);
      }
      if (big_offset) append_le(extra, e.offset, 8);
    }
    append_le(dir, 0x02014b50, 4);
    append_le(dir, k_made_by, 2);
    append_le(dir, k_version, 2);
    append_le(dir, e.flags, 2);
    append_le(dir, 0, 2);
    append_le(dir, 0, 2);
    append_le(dir, k_dos_date, 2);
    append_le(dir, e.crc, 4);
    append_le(dir, big_size ? k_max32 : e.size, 4);
    append_le(dir, big_size ? k_max32 : e.size, 4);
    append_le(dir, e.name.size(), 2);
    append_le(dir, extra.size(), 2);
    append_le(dir, 0, 2);  // comment
    append_le(dir, 0, 2);  // disk
    append_le(dir, 0, 2);  // internal attributes
    append_le(dir, k_unix_file, 4);  // external attributes
    append_le(dir, big_offset ? k_max32 : e.offset, 4);
    dir += e.name + extra;
  }
  const u64 n = entries_.size();
  const bool zip64 = n >= std::min<u64>(0xffff, zip64_at_) || dir.size() >= zip64_at_ || dir_at >= zip64_at_;
  std::string end;
  if (zip64) {
    const u64 end64_at = dir_at + dir.size();
    append_le(end, 0x06064b50, 4);
    append_le(end, 44, 8);
    append_le(end, k_made_by, 2);
    append_le(end, k_version, 2);
    append_le(end, 0, 4);
    append_le(end, 0, 4);
    append_le(end, n, 8);
    append_le(end, n, 8);
    append_le(end, dir.size(), 8);
    append_le(end, dir_at, 8);
    append_le(end, 0x07064b50, 4);
    append_le(end, 0, 4);
    append_le(end, end64_at, 8);
    append_le(end, 1, 4);
  }
  append_le(end, 0x06054b50, 4);
  append_le(end, 0, 2);
  append_le(end, 0, 2);
  append_le(end, zip64 ? 0xffff : n, 2);
  append_le(end, zip64 ? 0xffff : n, 2);
  append_le(end, zip64 ? k_max32 : dir.size(), 4);
  append_le(end, zip64 ? k_max32 : dir_at, 4);
  append_le(end, 0, 2);
  out_.write(dir.data(), dir.size());
  out_.write(end.data(), end.size());
}

}  // namespace dctchop::formats::detail
