// ZIP output for .npz files (see zip_writer.hpp).
#include "zip_writer.hpp"

#include <libdeflate.h>

#include <algorithm>

#include "dctchop/error.hpp"

namespace dctchop::formats::detail {
namespace {

using u64 = std::uint64_t;

constexpr u64 k_max32 = 0xffffffffu;
constexpr std::uint16_t k_version = 45;     // 4.5: Zip64
constexpr std::uint16_t k_descriptor = 0x0008;
constexpr std::uint16_t k_utf8 = 0x0800;  // the name is UTF-8 (else readers take it as cp437)
constexpr std::uint16_t k_dos_date = 0x21;  // 1980-01-01 00:00: the same bytes on every run

void put(std::string& s, u64 v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

void zip_writer::begin_member(const std::string& name) {
  if (open_) throw error(errc::internal, "zip_writer: a member is already open");
  if (name.empty() || name.size() > 0xffff) throw error(errc::invalid_argument, "bad ZIP member name '" + name + "'");
  const bool ascii = std::all_of(name.begin(), name.end(), [](char c) { return (c & 0x80) == 0; });
  const auto flags = static_cast<std::uint16_t>(k_descriptor | (ascii ? 0 : k_utf8));
  entries_.push_back({name, flags, 0, 0, out_.position()});
  std::string h;
  put(h, 0x04034b50, 4);
  put(h, k_version, 2);
  put(h, flags, 2);
  put(h, 0, 2);  // stored
  put(h, 0, 2);  // time
  put(h, k_dos_date, 2);
  put(h, 0, 4);        // CRC-32: in the descriptor
  put(h, k_max32, 4);  // sizes: in the Zip64 field, then the descriptor
  put(h, k_max32, 4);
  put(h, name.size(), 2);
  put(h, 20, 2);
  h += name;
  put(h, 0x0001, 2);  // Zip64 extra field: sizes, zero until the descriptor
  put(h, 16, 2);
  put(h, 0, 8);
  put(h, 0, 8);
  out_.write(h.data(), h.size());
  open_ = true;
}

void zip_writer::write(const void* data, std::size_t n) {
  if (!open_) throw error(errc::internal, "zip_writer: no member is open");
  auto& e = entries_.back();
  e.crc = static_cast<std::uint32_t>(libdeflate_crc32(e.crc, data, n));
  e.size += n;
  out_.write(data, n);
}

void zip_writer::end_member() {
  if (!open_) throw error(errc::internal, "zip_writer: no member is open");
  const auto& e = entries_.back();
  std::string d;
  put(d, 0x08074b50, 4);
  put(d, e.crc, 4);
  put(d, e.size, 8);  // Zip64 descriptor: 8-byte sizes, compressed then uncompressed
  put(d, e.size, 8);
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
      put(extra, 0x0001, 2);
      put(extra, (big_size ? 16 : 0) + (big_offset ? 8 : 0), 2);
      if (big_size) {
        put(extra, e.size, 8);
        put(extra, e.size, 8);
      }
      if (big_offset) put(extra, e.offset, 8);
    }
    put(dir, 0x02014b50, 4);
    put(dir, k_version, 2);
    put(dir, k_version, 2);
    put(dir, e.flags, 2);
    put(dir, 0, 2);
    put(dir, 0, 2);
    put(dir, k_dos_date, 2);
    put(dir, e.crc, 4);
    put(dir, big_size ? k_max32 : e.size, 4);
    put(dir, big_size ? k_max32 : e.size, 4);
    put(dir, e.name.size(), 2);
    put(dir, extra.size(), 2);
    put(dir, 0, 2);  // comment
    put(dir, 0, 2);  // disk
    put(dir, 0, 2);  // internal attributes
    put(dir, 0, 4);  // external attributes
    put(dir, big_offset ? k_max32 : e.offset, 4);
    dir += e.name + extra;
  }
  const u64 n = entries_.size();
  const bool zip64 = n >= std::min<u64>(0xffff, zip64_at_) || dir.size() >= zip64_at_ || dir_at >= zip64_at_;
  std::string end;
  if (zip64) {
    const u64 end64_at = dir_at + dir.size();
    put(end, 0x06064b50, 4);
    put(end, 44, 8);
    put(end, k_version, 2);
    put(end, k_version, 2);
    put(end, 0, 4);
    put(end, 0, 4);
    put(end, n, 8);
    put(end, n, 8);
    put(end, dir.size(), 8);
    put(end, dir_at, 8);
    put(end, 0x07064b50, 4);
    put(end, 0, 4);
    put(end, end64_at, 8);
    put(end, 1, 4);
  }
  put(end, 0x06054b50, 4);
  put(end, 0, 2);
  put(end, 0, 2);
  put(end, zip64 ? 0xffff : n, 2);
  put(end, zip64 ? 0xffff : n, 2);
  put(end, zip64 ? k_max32 : dir.size(), 4);
  put(end, zip64 ? k_max32 : dir_at, 4);
  put(end, 0, 2);
  out_.write(dir.data(), dir.size());
  out_.write(end.data(), end.size());
}

}  // namespace dctchop::formats::detail
