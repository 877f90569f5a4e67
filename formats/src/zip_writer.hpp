// Writing a ZIP archive front to back, as np.savez does (stored members, Zip64 where needed),
// for .npz outputs. Spec: PKWARE's APPNOTE.TXT; the same layout zip_reader.hpp reads.
//
// Each member is written as Python's zipfile writes one to a stream: a local header that
// defers its CRC and sizes (flag bit 3, 0xFFFFFFFF sizes and a Zip64 extra field), the bytes,
// then a Zip64 data descriptor with the CRC-32 and the sizes. So nothing is written twice or
// seeked back to, and a member can be of any size, to a pipe too. The central directory and
// the end records follow the last member. Internal header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dctchop/formats/file_io.hpp"

namespace dctchop::formats::detail {

/** Refuses (invalid_argument, naming `file`) an array name whose member would unzip outside
 *  the folder an unzip writes into ("../x", "/x", "a/../../x"; a backslash counts as a
 *  separator, as it does for Windows tools), which np.savez would write as given, or that is
 *  not UTF-8 (a .npz flags its names UTF-8, and numpy refuses a file whose flagged name is
 *  not). Folders within the file ("train/x") are fine. */
void check_member_key(const std::string& key, const std::string& file);

class zip_writer {
 public:
  /** Members go to `out`, which must outlive the writer (and is committed by its owner).
   *  Sizes and offsets from `zip64_at` on go into Zip64 fields (the format's limit; tests
   *  lower it to write Zip64 files of a few bytes). */
  explicit zip_writer(output_file& out, std::uint64_t zip64_at = 0xffffffffu)
      : out_(out), zip64_at_(zip64_at) {}
  /** Start a stored member named `name`; the previous one must have ended. */
  void begin_member(const std::string& name);
  /** The member's next bytes. */
  void write(const void* data, std::size_t n);
  /** End the current member (its data descriptor). */
  void end_member();
  /** Write the central directory and the end records: the archive is complete. */
  void finish();
  bool in_member() const noexcept { return open_; }

 private:
  struct entry {
    std::string name;
    std::uint16_t flags = 0;
    std::uint32_t crc = 0;
    std::uint64_t size = 0, offset = 0;
  };
  output_file& out_;
  std::uint64_t zip64_at_;
  std::vector<entry> entries_;
  bool open_ = false;
};

}  // namespace dctchop::formats::detail
