// ZIP members for .npz inputs (see zip_reader.hpp for the layout).
#include "zip_reader.hpp"

#include <zlib.h>
#include <libdeflate.h>
#if defined(DCTCHOP_HAVE_ISAL)
#include <isa-l/igzip_lib.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "byte_order.hpp"
#include "dctchop/error.hpp"

namespace dctchop::formats::detail {
namespace {

using u64 = std::uint64_t;
using detail::get_u16;
using detail::get_u32;
using detail::get_u64;

constexpr std::uint32_t k_local_sig = 0x04034b50, k_central_sig = 0x02014b50,
                        k_end_sig = 0x06054b50, k_end64_sig = 0x06064b50,
                        k_locator64_sig = 0x07064b50;
constexpr std::size_t k_local_size = 30, k_central_size = 46, k_end_size = 22,
                      k_end64_size = 56, k_locator64_size = 20;
constexpr std::uint16_t k_zip64_extra = 0x0001;
constexpr std::uint16_t k_flag_encrypted = 0x0001, k_flag_strong_encryption = 0x0040;
constexpr std::uint16_t k_flag_utf8 = 0x0800;  // the name is UTF-8 (else code page 437)

/** A ZIP name not flagged UTF-8 (bit 11) is code page 437, as Python's zipfile (and so
 *  np.load) reads it: "\x82.npy" is the array 'é', which dctchop looked up by its bytes. */
std::string cp437_to_utf8(const std::string& name) {
  static constexpr std::uint16_t high[128] = {
      0xc7,   0xfc,   0xe9,   0xe2,   0xe4,   0xe0,   0xe5,   0xe7,   0xea,   0xeb,   0xe8,
      0xef,   0xee,   0xec,   0xc4,   0xc5,   0xc9,   0xe6,   0xc6,   0xf4,   0xf6,   0xf2,
      0xfb,   0xf9,   0xff,   0xd6,   0xdc,   0xa2,   0xa3,   0xa5,   0x20a7, 0x192,  0xe1,
      0xed,   0xf3,   0xfa,   0xf1,   0xd1,   0xaa,   0xba,   0xbf,   0x2310, 0xac,   0xbd,
      0xbc,   0xa1,   0xab,   0xbb,   0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562,
      0x2556, 0x2555, 0x2563, 0x2551, 0x2557, 0x255d, 0x255c, 0x255b, 0x2510, 0x2514, 0x2534,
      0x252c, 0x251c, 0x2500, 0x253c, 0x255e, 0x255f, 0x255a, 0x2554, 0x2569, 0x2566, 0x2560,
      0x2550, 0x256c, 0x2567, 0x2568, 0x2564, 0x2565, 0x2559, 0x2558, 0x2552, 0x2553, 0x256b,
      0x256a, 0x2518, 0x250c, 0x2588, 0x2584, 0x258c, 0x2590, 0x2580, 0x3b1,  0xdf,   0x393,
      0x3c0,  0x3a3,  0x3c3,  0xb5,   0x3c4,  0x3a6,  0x398,  0x3a9,  0x3b4,  0x221e, 0x3c6,
      0x3b5,  0x2229, 0x2261, 0xb1,   0x2265, 0x2264, 0x2320, 0x2321, 0xf7,   0x2248, 0xb0,
      0x2219, 0xb7,   0x221a, 0x207f, 0xb2,   0x25a0, 0xa0};
  std::string out;
  out.reserve(name.size());
  for (const char ch : name) {
    const auto b = static_cast<unsigned char>(ch);
    if (b < 0x80) {
      out += ch;
      continue;
    }
    const std::uint16_t cp = high[b - 0x80];
    if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
    } else {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    }
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

[[noreturn]] void damaged(const std::string& name, const std::string& what) {
  throw error(errc::bad_input, name + ": " + what);
}

std::string hex32(std::uint32_t v) {
  char s[11];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

/** The CRC-32 of a member's bytes, accumulated while they are read in order from the first;
 *  checked once the last byte is in. Reads out of order leave it unchecked. */
class crc_check {
 public:
  crc_check(std::string name, std::uint32_t want, u64 size)
      : name_(std::move(name)), want_(want), size_(size) { finish_if_done(); }
  void seen(u64 offset, const void* p, std::size_t n) {
    if (checked_ || offset != next_ || n == 0) return;
    crc_ = static_cast<std::uint32_t>(libdeflate_crc32(crc_, p, n));
    next_ += n;
    finish_if_done();
  }
  void reset() {
    if (!checked_) crc_ = 0, next_ = 0;
  }
  bool checked() const { return checked_; }
  /** Where the bytes read in order end. */
  u64 next() const { return next_; }

 private:
  void finish_if_done() {
    if (next_ != size_) return;
    checked_ = true;
    if (crc_ != want_) {
      damaged(name_, "damaged: the member's bytes have CRC-32 " + hex32(crc_) + ", the ZIP "
                     "directory records " + hex32(want_) + " (the .npz file is corrupt)");
    }
  }
  std::string name_;
  std::uint32_t want_, crc_ = 0;
  u64 size_, next_ = 0;
  bool checked_ = false;
};

/** A stored member: a window of the file. */
class stored_member final : public byte_source {
 public:
  stored_member(std::shared_ptr<input_file> f, u64 start, const zip_member& m, std::string name)
      : f_(std::move(f)), start_(start), size_(m.size), name_(std::move(name)),
        crc_(name_, m.crc, m.size) {}
  std::string display_name() const override { return name_; }
  bool seekable() const override { return true; }
  u64 size() const override { return size_; }
  std::size_t read(void* dst, std::size_t n) override {
    const std::size_t got = static_cast<std::size_t>(std::min<u64>(n, size_ - pos_));
    read_at(pos_, dst, got, "npz member");
    pos_ += got;
    return got;
  }
  void read_at(u64 offset, void* dst, std::size_t n, const char* what) override {
    read_at(offset, dst, n, what, 1);
  }
  void read_at(u64 offset, void* dst, std::size_t n, const char* what,
               unsigned threads) override {
    if (offset > size_ || n > size_ - offset) {
      throw error(errc::internal, name_ + ": a read past the member's end");
    }
    f_->read_at(start_ + offset, dst, n, what, threads);
    crc_.seen(offset, dst, n);
  }
  void finish() override {
    std::vector<unsigned char> buf;
    while (!crc_.checked()) {
      const u64 at = crc_.next();
      buf.resize(static_cast<std::size_t>(std::min<u64>(size_ - at, u64(1) << 20)));
      read_at(at, buf.data(), buf.size(), "npz member");  // crc_ takes them
    }
  }

 private:
  std::shared_ptr<input_file> f_;
  u64 start_, size_, pos_ = 0;
  std::string name_;
  crc_check crc_;
};

/** What one step of an inflater did: bytes out, input consumed, and whether the stream ended
 *  or does not decode (why: the decoder's words). */
struct inflate_step {
  std::size_t produced = 0, consumed = 0;
  bool ended = false;
  const char* bad = nullptr;
};

/** zlib's inflate on a raw deflate stream. */
class zlib_inflater {
 public:
  zlib_inflater() {
    if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) throw std::bad_alloc();  // raw deflate
  }
  ~zlib_inflater() { inflateEnd(&z_); }
  zlib_inflater(const zlib_inflater&) = delete;
  zlib_inflater& operator=(const zlib_inflater&) = delete;
  void reset() {
    inflateReset(&z_);
    z_.avail_in = 0;
  }
  std::size_t input_left() const { return z_.avail_in; }
  void give(unsigned char* in, std::size_t n) {
    z_.next_in = in;
    z_.avail_in = static_cast<uInt>(n);
  }
  inflate_step step(unsigned char* out, std::size_t n) {
    const uInt in_before = z_.avail_in;
    z_.next_out = out;
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(n, std::numeric_limits<uInt>::max()));
    const uInt out_before = z_.avail_out;
    const int rc = inflate(&z_, Z_NO_FLUSH);
    inflate_step r;
    r.produced = out_before - z_.avail_out;
    r.consumed = in_before - z_.avail_in;
    r.ended = rc == Z_STREAM_END;
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) r.bad = z_.msg != nullptr ? z_.msg : "invalid data";
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc != Z_OK && rc != Z_BUF_ERROR && !r.ended && r.bad == nullptr) {
      throw error(errc::internal, "zlib's inflate returned " + std::to_string(rc));
    }
    return r;
  }
  static constexpr const char* name = "zlib";

 private:
  z_stream z_{};
};

#if defined(DCTCHOP_HAVE_ISAL)
/** ISA-L's inflate (igzip) on a raw deflate stream: about 1.4 times zlib's speed here. */
class isal_inflater {
 public:
  isal_inflater() : st_(std::make_unique<inflate_state>()) { reset(); }
  void reset() {
    isal_inflate_init(st_.get());
    st_->crc_flag = ISAL_DEFLATE;  // raw deflate: the ZIP directory holds the CRC
    st_->avail_in = 0;
  }
  std::size_t input_left() const { return st_->avail_in; }
  void give(unsigned char* in, std::size_t n) {
    st_->next_in = in;
    st_->avail_in = static_cast<std::uint32_t>(n);
  }
  inflate_step step(unsigned char* out, std::size_t n) {
    const std::uint32_t in_before = st_->avail_in;
    st_->next_out = out;
    st_->avail_out = static_cast<std::uint32_t>(
        std::min<std::size_t>(n, std::numeric_limits<std::uint32_t>::max()));
    const std::uint32_t out_before = st_->avail_out;
    const int rc = isal_inflate(st_.get());
    inflate_step r;
    r.produced = out_before - st_->avail_out;
    r.consumed = in_before - st_->avail_in;
    r.ended = st_->block_state == ISAL_BLOCK_FINISH;
    switch (rc) {
      case ISAL_INVALID_BLOCK: r.bad = "invalid block"; break;
      case ISAL_INVALID_SYMBOL: r.bad = "invalid symbol"; break;
      case ISAL_INVALID_LOOKBACK: r.bad = "invalid distance too far back"; break;
      case ISAL_NEED_DICT: r.bad = "needs a preset dictionary"; break;
      default:
        if (rc < 0) throw error(errc::internal, "ISA-L's inflate returned " + std::to_string(rc));
    }
    return r;
  }
  static constexpr const char* name = "ISA-L";

 private:
  std::unique_ptr<inflate_state> st_;  // large (tens of KiB): on the heap
};
#endif

/** A deflated member, inflated by `Inflater` as it is read; from the start again on
 *  restart(). */
template <typename Inflater>
class deflated_member final : public byte_source {
 public:
  deflated_member(std::shared_ptr<input_file> f, u64 start, const zip_member& m, std::string name)
      : f_(std::move(f)), start_(start), compressed_(m.compressed), size_(m.size),
        name_(std::move(name)), crc_(name_, m.crc, m.size), in_(std::size_t(1) << 20) {}

  std::string display_name() const override { return name_; }
  bool seekable() const override { return false; }
  u64 size() const override { return size_; }
  std::size_t read(void* dst, std::size_t n) override {
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n && produced_ < size_) {
      const std::size_t want = static_cast<std::size_t>(std::min<u64>(n - done, size_ - produced_));
      const std::size_t got = inflate_into(out + done, want);
      const u64 at = produced_;
      produced_ += got;
      if (produced_ == size_ && !ended_) expect_end();  // a wrong size before a wrong CRC
      crc_.seen(at, out + done, got);
      done += got;
    }
    if (produced_ == size_ && !ended_) expect_end();
    return done;
  }
  using byte_source::read_at;  // (the split one reads through this one)
  void read_at(u64, void*, std::size_t, const char*) override {
    throw error(errc::internal, name_ + ": a deflated member is read in order");
  }
  bool restartable() const override { return true; }
  void finish() override {
    unsigned char rest[16384];
    while (read(rest, sizeof rest) > 0) {
    }
  }
  void restart() override {
    z_.reset();
    consumed_ = produced_ = 0;
    ended_ = false;
    crc_.reset();
  }

 private:
  /** Up to n bytes (n > 0) of output; at least one unless the stream is broken. */
  std::size_t inflate_into(unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      if (z_.input_left() == 0) feed();
      const inflate_step s = z_.step(out + done, n - done);
      done += s.produced;
      if (s.ended) {
        ended_ = true;
        if (produced_ + done != size_) {
          damaged(name_, "damaged: its deflate stream ends after " +
                             std::to_string(produced_ + done) + " bytes, the "
                             "ZIP directory records " + std::to_string(size_) + " (the .npz file is corrupt)");
        }
        break;
      }
      if (s.bad != nullptr) {
        damaged(name_, std::string("damaged: its deflate stream does not decode (") + Inflater::name +
                           ": " + s.bad + "; the .npz file is corrupt)");
      }
      // No progress with every compressed byte given: the stream stops short.
      if (s.produced == 0 && s.consumed == 0 && z_.input_left() == 0 && consumed_ == compressed_) {
        const u64 out = produced_ + done;
        damaged(name_, "damaged: its deflate stream stops " +
                           (out == size_ ? std::string("before its end marker, after all ")
                                         : "after " + std::to_string(out) + " of ") +
                           std::to_string(size_) + " bytes (the .npz file is truncated or corrupt)");
      }
    }
    return done;
  }
  /** The next piece of the compressed bytes into the input buffer. */
  void feed() {
    const std::size_t n = static_cast<std::size_t>(std::min<u64>(in_.size(), compressed_ - consumed_));
    if (n == 0) return;
    f_->read_at(start_ + consumed_, in_.data(), n, "npz member");
    consumed_ += n;
    z_.give(in_.data(), n);
  }
  /** All the recorded bytes are out: the stream must end here, with nothing more. */
  void expect_end() {
    unsigned char extra = 0;
    while (!ended_) {
      if (inflate_into(&extra, 1) != 0) {
        damaged(name_, "damaged: its deflate stream holds more than the " +
                           std::to_string(size_) + " bytes the ZIP directory records (the .npz file is corrupt)");
      }
    }
  }

  std::shared_ptr<input_file> f_;
  u64 start_, compressed_, size_;
  std::string name_;
  crc_check crc_;
  std::vector<unsigned char> in_;
  Inflater z_;
  u64 consumed_ = 0, produced_ = 0;
  bool ended_ = false;
};

/** The Zip64 extra field's values for a central directory entry: each of size, compressed
 *  size and header offset that reads 0xFFFFFFFF is there, in that order. */
void apply_zip64(const unsigned char* extra, std::size_t len, zip_member& m, const std::string& file) {
  const bool need_size = m.size == 0xffffffffu, need_comp = m.compressed == 0xffffffffu,
             need_off = m.header_offset == 0xffffffffu;
  if (!need_size && !need_comp && !need_off) return;
  for (std::size_t at = 0; at + 4 <= len;) {
    const auto id = get_u16(extra + at);
    const auto n = static_cast<std::size_t>(get_u16(extra + at + 2));
    if (at + 4 + n > len) break;
    if (id == k_zip64_extra) {
      const unsigned char* p = extra + at + 4;
      std::size_t left = n;
      auto take = [&](u64& v) {
        if (left < 8) damaged(file, "damaged ZIP directory: a Zip64 field of " + m.name + " is cut short");
        v = get_u64(p);
        p += 8;
        left -= 8;
      };
      if (need_size) take(m.size);
      if (need_comp) take(m.compressed);
      if (need_off) take(m.header_offset);
      return;
    }
    at += 4 + n;
  }
  damaged(file, "damaged ZIP directory: " + m.name + " records 0xFFFFFFFF sizes without a Zip64 field");
}

}  // namespace

zip_reader zip_reader::open(const std::string& path) {
  const auto refuse_pipe = [](const std::string& name) {
    throw error(errc::invalid_argument, name + ": a .npz is read from its end (its table of "
                                               "contents); pass a file, not a pipe");
  };
  if (refused_fifo(path)) refuse_pipe(path);  // before an open() that would wait for a writer
  auto f = std::make_shared<input_file>(input_file::open(path));
  f->set_truncation_code(errc::bad_input);
  const std::string name = f->display_name();
  if (!f->seekable()) refuse_pipe(name);
  zip_reader z(f);
  const u64 size = f->size();
  if (size == 0) damaged(name, "empty (0 bytes), not a .npz (ZIP) file");

  // The end record: the last signature within the last 22 + 65535 bytes whose comment reaches
  // exactly to the end of the file, else (bytes appended after the archive, which Python's
  // zipfile accepts too) the last signature there.
  const u64 tail_len = std::min<u64>(size, k_end_size + 0xffff);
  std::vector<unsigned char> tail(static_cast<std::size_t>(tail_len));
  f->read_at(size - tail_len, tail.data(), tail.size(), "ZIP end record");
  std::size_t end_at = std::string::npos, last_sig = std::string::npos;
  for (std::size_t i = tail.size() >= k_end_size ? tail.size() - k_end_size + 1 : 0; i-- > 0;) {
    if (get_u32(tail.data() + i) != k_end_sig) continue;
    if (last_sig == std::string::npos) last_sig = i;
    if (i + k_end_size + get_u16(tail.data() + i + 20) == tail.size()) {
      end_at = i;
      break;
    }
  }
  if (end_at == std::string::npos) end_at = last_sig;
  if (end_at == std::string::npos) {
    unsigned char head[4] = {};
    f->read_at(0, head, std::min<u64>(4, size), "file start");
    if (get_u32(head) == k_local_sig) damaged(name, "truncated .npz (ZIP) file: its table of contents is missing");
    if (std::memcmp(head, "\x93NUM", 4) == 0) damaged(name, "is a .npy file, not a .npz (name it .npy)");
    damaged(name, "not a .npz file (no ZIP end record; numpy writes .npz with np.savez)");
  }
  const unsigned char* e = tail.data() + end_at;
  const u64 end_pos = size - tail_len + end_at;
  u64 disk = get_u16(e + 4), cd_disk = get_u16(e + 6), entries_here = get_u16(e + 8),
      entries = get_u16(e + 10), cd_size = get_u32(e + 12), cd_offset = get_u32(e + 16);
  // Zip64: a locator right before the end record points at the Zip64 end record, whose values
  // replace these (which Python's zipfile leaves below their maxima where they fit). Without
  // a locator the values stand: 65535 members fill the 16-bit count without needing Zip64.
  unsigned char loc[k_locator64_size] = {};
  if (end_pos >= k_locator64_size) {
    f->read_at(end_pos - k_locator64_size, loc, sizeof loc, "Zip64 locator");
  }
  if (get_u32(loc) == k_locator64_sig) {
    const u64 at = get_u64(loc + 8);
    if (at > end_pos - k_locator64_size || end_pos - k_locator64_size - at < k_end64_size) {
      damaged(name, "damaged Zip64 locator (it points outside the file)");
    }
    unsigned char r[k_end64_size];
    f->read_at(at, r, sizeof r, "Zip64 end record");
    if (get_u32(r) != k_end64_sig) damaged(name, "damaged Zip64 end record");
    disk = get_u32(r + 16);  // (a locator's own disk fields are not checked: Python's neither)
    cd_disk = get_u32(r + 20);
    entries_here = get_u64(r + 24);
    entries = get_u64(r + 32);
    cd_size = get_u64(r + 40);
    cd_offset = get_u64(r + 48);
  }
  if (disk != 0 || cd_disk != 0 || entries_here != entries) {
    throw error(errc::bad_input, name + ": a ZIP archive split over several files is not supported");
  }
  if (cd_offset > end_pos || cd_size > end_pos - cd_offset) {
    damaged(name, "truncated or damaged .npz (ZIP) file: its table of contents lies outside it");
  }
  if (entries > cd_size / k_central_size) {
    damaged(name, "damaged ZIP directory: " + std::to_string(entries) + " entries cannot fit in " +
                      std::to_string(cd_size) + " bytes");
  }

  std::vector<unsigned char> cd(static_cast<std::size_t>(cd_size));
  if (!cd.empty()) f->read_at(cd_offset, cd.data(), cd.size(), "ZIP directory");
  std::size_t at = 0;
  for (u64 i = 0; i < entries; ++i) {
    if (cd.size() - at < k_central_size || get_u32(cd.data() + at) != k_central_sig) {
      damaged(name, "damaged ZIP directory (entry " + std::to_string(i) + ")");
    }
    const unsigned char* c = cd.data() + at;
    const auto n_name = static_cast<std::size_t>(get_u16(c + 28)),
               n_extra = static_cast<std::size_t>(get_u16(c + 30)),
               n_comment = static_cast<std::size_t>(get_u16(c + 32));
    if (cd.size() - at - k_central_size < n_name + n_extra + n_comment) {
      damaged(name, "damaged ZIP directory (entry " + std::to_string(i) + " is cut short)");
    }
    zip_member m;
    m.flags = get_u16(c + 8);
    m.method = get_u16(c + 10);
    m.crc = get_u32(c + 16);
    m.compressed = get_u32(c + 20);
    m.size = get_u32(c + 24);
    m.header_offset = get_u32(c + 42);
    m.name.assign(reinterpret_cast<const char*>(c + k_central_size), n_name);
    if ((m.flags & k_flag_utf8) == 0) m.name = cp437_to_utf8(m.name);  // as numpy reads it
    apply_zip64(c + k_central_size + n_name, n_extra, m, name);
    z.members_.push_back(std::move(m));
    at += k_central_size + n_name + n_extra + n_comment;
  }
  return z;
}

std::unique_ptr<byte_source> zip_reader::open_member(const zip_member& m,
                                                     const std::string& name,
                                                     inflater with) const {
  const std::string file = display_name();
  if ((m.flags & (k_flag_encrypted | k_flag_strong_encryption)) != 0) {
    throw error(errc::bad_input, name + ": the member is encrypted; dctchop reads plain .npz files");
  }
  if (m.method != zip_member::stored && m.method != zip_member::deflated) {
    throw error(errc::bad_input, name + ": the member is compressed with ZIP method " +
                                     std::to_string(m.method) +
                                     "; numpy's .npz members are stored (np.savez) or deflated "
                                     "(np.savez_compressed), which dctchop reads");
  }
  const u64 size = file_->size();
  if (m.header_offset > size || size - m.header_offset < k_local_size) {
    damaged(file, "truncated or damaged: the local header of " + m.name + " lies outside the file");
  }
  unsigned char h[k_local_size];
  file_->read_at(m.header_offset, h, sizeof h, "ZIP local header");
  if (get_u32(h) != k_local_sig) damaged(file, "damaged ZIP file: no local header where " + m.name + " starts");
  const u64 start = m.header_offset + k_local_size + get_u16(h + 26) + get_u16(h + 28);
  if (start > size || m.compressed > size - start) {
    damaged(file, "truncated .npz file: " + m.name + " needs " + std::to_string(m.compressed) +
                      " bytes from offset " + std::to_string(start) + ", the file holds " +
                      std::to_string(size));
  }
  // Deflate expands at most 1032:1; a larger recorded size is damage (and must not size the
  // reader's buffers).
  if (m.method == zip_member::deflated && m.size / 1032 > m.compressed + 1) {
    damaged(file, "damaged ZIP directory: " + m.name + " records " + std::to_string(m.size) +
                      " bytes from " + std::to_string(m.compressed) + " deflated, more than "
                      "deflate can produce");
  }
  if (m.method == zip_member::stored) {
    if (m.compressed != m.size) {
      damaged(file, "damaged ZIP directory: stored member " + m.name + " has " +
                        std::to_string(m.compressed) + " bytes stored and " +
                        std::to_string(m.size) + " recorded");
    }
    return std::make_unique<stored_member>(file_, start, m, name);
  }
#if defined(DCTCHOP_HAVE_ISAL)
  if (with == inflater::isal) return std::make_unique<deflated_member<isal_inflater>>(file_, start, m, name);
#endif
  if (with == inflater::zlib) return std::make_unique<deflated_member<zlib_inflater>>(file_, start, m, name);
  throw error(errc::backend_unavailable, name + ": " + std::string(inflater_name(with)) + " was not built in");
}

bool inflater_built(inflater with) noexcept {
#if defined(DCTCHOP_HAVE_ISAL)
  return with == inflater::zlib || with == inflater::isal;
#else
  return with == inflater::zlib;
#endif
}

inflater fastest_inflater() noexcept {
  return inflater_built(inflater::isal) ? inflater::isal : inflater::zlib;
}

const char* inflater_name(inflater with) noexcept {
  return with == inflater::isal ? "ISA-L" : "zlib";
}

}  // namespace dctchop::formats::detail
