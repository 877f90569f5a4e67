// Reading members of a ZIP archive, as numpy's .npz files are (np.savez: stored members;
// np.savez_compressed: deflated). Spec: PKWARE's APPNOTE.TXT, sections 4.3 (layout), 4.4
// (fields) and 4.5.3 (the Zip64 extra field). Internal header.
//
//   [local header 30 B + name + extra][member data] ...   central directory   [zip64 end record
//   and locator]   end of central directory record (22 B + comment)
//
// The central directory is the authority on names, sizes, methods and CRCs (a member written
// with a data descriptor has zeros in its local header); a member's data start after its local
// header's own name and extra fields, whose lengths may differ from the central directory's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "byte_source.hpp"
#include "dctchop/formats/file_io.hpp"

namespace dctchop::formats::detail {

/** One member as the central directory describes it. */
struct zip_member {
  /** The methods numpy writes: np.savez stores, np.savez_compressed deflates. */
  static constexpr std::uint16_t stored = 0, deflated = 8;
  std::string name;
  std::uint16_t flags = 0, method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, size = 0;  ///< bytes stored, bytes once inflated
  std::uint64_t header_offset = 0;         ///< where its local header starts
};

/** Who inflates deflated members: ISA-L (about 1.4 times zlib's speed here) where it was found at
 *  configure time, else zlib, which is always built in; the tests run each that is. */
enum class inflater { zlib, isal };
/** ISA-L where it was built in, else zlib. */
inflater fastest_inflater() noexcept;
/** Whether `with` was built in. */
bool inflater_built(inflater with) noexcept;
/** "zlib" or "ISA-L". */
const char* inflater_name(inflater with) noexcept;

/** A ZIP archive's table of contents; members are read through open_member(). Errors are
 *  dctchop::error(bad_input) naming the file: not a ZIP archive, damaged or truncated tables,
 *  split archives, encrypted members. */
class zip_reader {
 public:
  static zip_reader open(const std::string& path);
  const std::vector<zip_member>& members() const noexcept { return members_; }
  std::string display_name() const { return file_->display_name(); }
  /** The member's bytes, named `name` in messages. Stored members read with random access;
   *  deflated ones (inflated as they are read) in order, from the start again when asked
   *  (restart()), by `with` (an inflater that was not built in is an error). Either checks the
   *  member's CRC-32 once its bytes have been read in order to the end, and refuses other
   *  methods. */
  std::unique_ptr<byte_source> open_member(const zip_member& m, const std::string& name,
                                           inflater with = fastest_inflater()) const;

 private:
  explicit zip_reader(std::shared_ptr<input_file> f) : file_(std::move(f)) {}
  std::shared_ptr<input_file> file_;
  std::vector<zip_member> members_;
};

}  // namespace dctchop::formats::detail
