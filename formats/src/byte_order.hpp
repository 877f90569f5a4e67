// Little-endian fields of the on-disk formats (the .dcz archive's records, ZIP headers), read
// and written byte by byte, so on any host. Internal header.
#pragma once

#include <cstdint>
#include <string>

namespace dctchop::formats::detail {

/** The `bytes` (at most 8) little-endian bytes at p. */
inline std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
inline std::uint16_t get_u16(const unsigned char* p) { return static_cast<std::uint16_t>(get_le(p, 2)); }
inline std::uint32_t get_u32(const unsigned char* p) { return static_cast<std::uint32_t>(get_le(p, 4)); }
inline std::uint64_t get_u64(const unsigned char* p) { return get_le(p, 8); }

/** v's low `bytes` bytes at p, little-endian. */
inline void put_le(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u16(unsigned char* p, std::uint16_t v) { put_le(p, v, 2); }
inline void put_u32(unsigned char* p, std::uint32_t v) { put_le(p, v, 4); }
inline void put_u64(unsigned char* p, std::uint64_t v) { put_le(p, v, 8); }

/** Append v's low `bytes` bytes to s, little-endian (records built field by field). */
inline void append_le(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace dctchop::formats::detail
