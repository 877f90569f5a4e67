// Reader and writer of the .dcz archive. The layout is specified in formats/ARCHIVE.md.
#include "dctchop/formats/archive.hpp"

#include <sys/stat.h>

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "byte_order.hpp"
#include "dctchop/error.hpp"
#include "dctchop/host_memory.hpp"
#include "dctchop/formats/json_number.hpp"
#include "dctchop/formats/npy.hpp"
#include "file_magic.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace dctchop::formats {

namespace detail {

using u64 = std::uint64_t;

/** Bytes appended in order and read back at any offset: in memory up to `in_memory` bytes,
 *  then all of them in an unnamed temporary file in $TMPDIR (or /tmp), which goes with the
 *  descriptor. For what follows a stream's last chunk: side arrays that can be as large as
 *  the data (per-sample masks as labels), then the footer. */
class byte_spool {
 public:
  byte_spool(u64 in_memory, std::string source) : limit_(in_memory), source_(std::move(source)) {}
  ~byte_spool() {
    if (fd_ >= 0) ::close(fd_);
  }
  byte_spool(const byte_spool&) = delete;
  byte_spool& operator=(const byte_spool&) = delete;

  u64 size() const noexcept { return size_; }

  void append(const std::byte* p, std::size_t n) {
    if (fd_ < 0 && size_ + n <= limit_) {
      mem_.insert(mem_.end(), p, p + n);
      size_ += n;
      return;
    }
    if (fd_ < 0) {
      open_file();
      write_all(mem_.data(), mem_.size());
      std::vector<std::byte>().swap(mem_);
    }
    write_all(p, n);
    size_ += n;
  }

  void read_at(u64 offset, void* dst, std::size_t n) const {
    if (offset > size_ || n > size_ - offset) throw error(errc::internal, "spool read out of range");
    if (n == 0) return;
    if (fd_ < 0) {
      std::memcpy(dst, mem_.data() + offset, n);
      return;
    }
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
      if (got <= 0) fail(got < 0 ? errno : EIO, "read back");
      out += got;
      offset += static_cast<u64>(got);
      n -= static_cast<std::size_t>(got);
    }
  }

 private:
  void open_file() {
    const char* t = std::getenv("TMPDIR");
    dir_ = t != nullptr && *t != '\0' ? t : "/tmp";
    fd_ = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {  // a file system without O_TMPFILE: a named one, unlinked at once
      std::string name = dir_ + "/dctchop-spool-XXXXXX";
      fd_ = ::mkostemp(name.data(), O_CLOEXEC);
      if (fd_ >= 0) ::unlink(name.c_str());
    }
    if (fd_ < 0) fail(errno, "make");
  }
  void write_all(const std::byte* p, std::size_t n) {
    while (n > 0) {
      const ssize_t put = ::write(fd_, p, n);
      if (put <= 0) fail(put < 0 ? errno : EIO, "write");
      p += put;
      n -= static_cast<std::size_t>(put);
    }
  }
  [[noreturn]] void fail(int e, const char* doing) const {
    if (e == EINTR) throw error(errc::interrupted, source_ + ": interrupted");
    throw error::from_os(errc::io,
                         source_ + ": cannot " + doing + " a temporary file in " + dir_ +
                             " for the side arrays after the last chunk (" +
                             std::strerror(e) + "; TMPDIR=DIR names another folder)",
                         e);
  }

  u64 limit_;
  std::string source_, dir_;
  u64 size_ = 0;
  std::vector<std::byte> mem_;
  int fd_ = -1;
};

}  // namespace detail

namespace {

using u64 = std::uint64_t;

constexpr const auto& k_magic = archive_magic;
constexpr char k_chunk_magic[9] = "DCZCHUNK";
constexpr char k_tail_magic[9] = "DCZINDEX";
constexpr char k_end_magic[9] = "DCZ-END.";
constexpr std::size_t k_preamble = 64, k_record = 64, k_tail = 64;
constexpr u64 k_max_json = 256ull << 20;  // header/footer sanity bound
constexpr u64 k_max_chunk_bytes = 16ull << 30;  // of a chunk of several samples
constexpr u64 k_max_chunk_decoded = u64(1) << 30;  // the same chunk decoded
constexpr u64 k_stream_tail_in_memory = 64ull << 20;  // a stream's tail beyond this: spooled
constexpr const char* k_transform = "dct2-orthonormal-blockwise";  // the only one of 1.0

// Fuzzing builds (scripts/fuzz.sh) skip the checksum comparisons, so that the fuzzer reaches the
// parsers and decoders behind them; every other build checks every checksum.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool k_check_sums = false;
#else
constexpr bool k_check_sums = true;
#endif

using detail::get_u16;
using detail::get_u32;
using detail::get_u64;
using detail::put_u16;
using detail::put_u32;
using detail::put_u64;

u64 align_up(u64 v, u64 a) { return (v + a - 1) / a * a; }

/** "is not valid JSON", with why where the parser said (a number past binary64, 1e400, is
 *  JSON that no double holds). */
std::string not_json_text(const std::string& why) {
  if (why.rfind("number overflow", 0) == 0) {
    return "holds a number past the range of a double (" + why + ")";
  }
  return why.empty() ? "is not valid JSON" : "is not valid JSON (" + why + ")";
}

/** The first field in which a chunk as its record gives it (`rec`; its place where `placed`)
 *  and its index entry differ, as words ("its first sample is 4, the index's 6"); "" where
 *  they agree. */
std::string chunk_difference(const chunk_info& rec, const chunk_info& entry, bool placed) {
  const struct {
    const char* field;
    u64 record, index;
  } fields[] = {{"offset", placed ? rec.offset : entry.offset, entry.offset},
                {"index", rec.index, entry.index},
                {"first sample", rec.first, entry.first},
                {"sample count", rec.count, entry.count},
                {"stored size", rec.stored_bytes, entry.stored_bytes},
                {"raw size", rec.raw_bytes, entry.raw_bytes},
                {"stages", rec.stages, entry.stages},
                {"checksum", rec.xxh64, entry.xxh64}};
  for (const auto& f : fields) {
    if (f.record == f.index) continue;
    const bool hex = f.field == std::string_view("checksum");
    const auto text = [hex](u64 v) {
      char t[24];
      std::snprintf(t, sizeof t, hex ? "%016llx" : "%llu", static_cast<unsigned long long>(v));
      return std::string(t);
    };
    return std::string("its ") + f.field + " is " + text(f.record) + ", the index's " +
           text(f.index);
  }
  return {};
}

/** What is wrong with chunk `c`'s sample count or raw size where `left` samples are still to
 *  come, at `cbps` coefficient bytes a sample, as words ("its raw size 99 is not 128 (1
 *  sample)"); "" where nothing is. The index's entries and a stream's records alike. */
std::string count_problem(const chunk_info& c, u64 left, u64 cbps) {
  const auto n = [](u64 v) { return std::to_string(v); };
  if (c.count == 0 || c.count > left) {
    return "its " + n(c.count) + " samples are not 1.." + n(left) + ", the samples left";
  }
  if (c.raw_bytes != c.count * cbps) {
    return "its raw size " + n(c.raw_bytes) + " is not " + n(c.count * cbps) + " (" +
           n(c.count) + (c.count == 1 ? " sample)" : " samples)");
  }
  return {};
}

/** A chunk record's fields (ARCHIVE.md; not its place, which the record does not say). */
chunk_info record_fields(const unsigned char* rec) {
  chunk_info r;
  r.index = get_u64(rec + 8);
  r.first = get_u64(rec + 16);
  r.count = get_u64(rec + 24);
  r.stored_bytes = get_u64(rec + 32);
  r.raw_bytes = get_u64(rec + 40);
  r.stages = get_u32(rec + 48);
  r.xxh64 = get_u64(rec + 56);
  return r;
}

/** Whether object `j` has member `key` with a value: an optional member given as null is
 *  absent (ARCHIVE.md). */
bool has(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

/** Read and drop n bytes of a stream (padding), in small pieces: the count comes from the
 *  file, so it must not size an allocation. */
void discard(input_file& f, u64 n, const char* what) {
  char buf[4096];
  while (n > 0) {
    const std::size_t k = static_cast<std::size_t>(std::min<u64>(n, sizeof buf));
    f.read_exact(buf, k, what);
    n -= k;
  }
}

std::string hex64(u64 v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/** Exactly 16 hexadecimal digits, either case (not "0x..", a sign or a space, which stoull
 *  would take; from_chars takes digits only, so all 16 consumed are 16 digits). */
u64 parse_hex64(const std::string& s) {
  u64 v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.size() != 16 || ec != std::errc() || end != s.data() + s.size()) {
    throw std::invalid_argument("checksum is not 16 hex digits");
  }
  return v;
}

/** XXH64 of bytes given in pieces; its state is freed however the caller leaves. */
class xxh64_stream {
 public:
  xxh64_stream() : st_(XXH64_createState()) {
    if (st_ == nullptr) throw error(errc::internal, "out of memory (xxhash state)");
    XXH64_reset(st_, 0);
  }
  ~xxh64_stream() { XXH64_freeState(st_); }
  xxh64_stream(const xxh64_stream&) = delete;
  xxh64_stream& operator=(const xxh64_stream&) = delete;
  void update(const void* data, std::size_t n) { XXH64_update(st_, data, n); }
  u64 digest() const { return XXH64_digest(st_); }

 private:
  XXH64_state_t* st_;
};

/** h.update of `bytes` bytes that `read(at, dst, n)` gives a MiB at a time, never holding them. */
template <typename Read>
void update_in_pieces(xxh64_stream& h, u64 bytes, Read&& read) {
  std::vector<std::byte> piece(static_cast<std::size_t>(std::min<u64>(bytes, u64(1) << 20)));
  for (u64 at = 0; at < bytes; at += piece.size()) {
    const auto n = static_cast<std::size_t>(std::min<u64>(piece.size(), bytes - at));
    read(at, piece.data(), n);
    h.update(piece.data(), n);
  }
}

u64 chunk_hash(const unsigned char* record, std::span<const std::byte> payload) {
  xxh64_stream h;
  h.update(record, 56);
  h.update(payload.data(), payload.size());
  return h.digest();
}

/** A side array's rows along its first axis (a scalar is one) and the bytes of each. */
std::pair<u64, u64> rows_of(const side_array_info& s) {
  const u64 rows = s.shape.empty() ? 1 : s.shape[0];
  return {rows, rows == 0 ? 0 : s.bytes / rows};
}

/** Why a header or index nested deeper than max_json_depth is refused. */
std::string too_deep_text() {
  return "nests arrays and objects more than " + std::to_string(max_json_depth) +
         " deep (deeper than any archive needs; ARCHIVE.md)";
}

[[noreturn]] void corrupt(const std::string& file, const std::string& what) {
  throw error(errc::corrupt, file + ": corrupt archive: " + what);
}

/** Readers size their buffers by samples_per_chunk: a chunk above it is corrupt. */
[[noreturn]] void too_many_samples(const std::string& file, const chunk_info& c, u64 most) {
  corrupt(file, "chunk " + std::to_string(c.index) + " holds " + std::to_string(c.count) +
                    " samples, more than the header's samples_per_chunk (" +
                    std::to_string(most) + ")");
}

/** Refuse bytes as corrupt unless their XXH64 `digest` is `expected` (`what` names them:
 *  "header" gives "header checksum mismatch"). Chunks, whose sum covers record and payload,
 *  are checked by archive_reader::verify_chunk; every other sum goes through here. */
void check_digest(u64 digest, u64 expected, const std::string& file, const std::string& what) {
  if (k_check_sums && digest != expected) corrupt(file, what + " checksum mismatch");
}

/** check_digest of the `n` bytes at `data`. */
void check_sum(const void* data, std::size_t n, u64 expected, const std::string& file,
               const std::string& what) {
  if (k_check_sums) check_digest(XXH64(data, n, 0), expected, file, what);
}

/** A header's string value for a message: quoted as JSON, cut after 40 bytes where it is
 *  longer (at a character's start, so that a name in UTF-8 is not shown as another). */
std::string shown_value(const nlohmann::json& v) {
  std::string t = v.get<std::string>();
  if (t.size() > 40) {
    std::size_t cut = 40;
    while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xc0) == 0x80) --cut;
    t = t.substr(0, cut) + "...";
  }
  return json_text(t);
}

/** `parse` of the text, only as the spec spells it ("u8", not "UINT8" or "uint8", which
 *  the command line takes). */
template <typename Parse>
auto parse_exact(const nlohmann::json& v, Parse parse) {
  const auto text = v.get<std::string>();
  auto parsed = parse(text);
  if (parsed && to_string(*parsed) != text) parsed.reset();
  return parsed;
}

archive_header header_from_json(const nlohmann::json& j, const std::string& file) {
  archive_header h;
  std::string where;  // the member read last: a message about its value or type names it
  const auto m = [&](const nlohmann::json& o, const char* key,
                     const char* within = "") -> const nlohmann::json& {
    if (!o.is_object()) {  // ("cannot use at() with array", nlohmann said)
      where.assign(within, std::strlen(within) - 1);
      throw std::out_of_range("not an object");
    }
    where = std::string(within) + key;
    return o.at(key);
  };
  try {
    if (m(j, "format").get<std::string>() != "dctchop-archive") {
      corrupt(file, "header member format is " + shown_value(j.at("format")) +
                        ", not \"dctchop-archive\"");
    }
    // Required, though readers go by the preamble's version.
    if (json_integers<u64>(m(j, "version")).size() != 2) {
      corrupt(file, "header version is not [major, minor]");
    }
    auto t = parse_exact(m(j, "dtype"), parse_dtype);
    auto l = parse_exact(m(j, "layout"), parse_layout);
    const auto& c = m(j, "codec");
    if (const auto tr = m(c, "transform", "codec.").get<std::string>(); tr != k_transform) {
      // A later writer's transform: decoding it as this one would give wrong data silently.
      throw error(errc::unsupported_version,
                  file + ": codec transform " + json_text(tr.substr(0, 60)) +
                      " is not one this dctchop decodes (" + k_transform + "); upgrade dctchop");
    }
    auto ct = parse_exact(m(c, "coeff", "codec."), parse_coeff_type);
    // A name that no spelling of ours matches is a later writer's type (f16 data was new on
    // 2026-12-03); one of ours spelled otherwise ("uint8") breaks the spec.
    auto newer = [&](const nlohmann::json& v, const char* what, bool known, const char* ours) {
      if (known) return;
      throw error(errc::unsupported_version, file + ": header's " + what + " " + shown_value(v) +
                                                 " is not one this dctchop knows (" + ours +
                                                 "); upgrade dctchop");
    };
    if (!t) newer(m(j, "dtype"), "dtype", parse_dtype(m(j, "dtype").get<std::string>()).has_value(),
                  k_dtype_names);
    if (!ct) newer(m(c, "coeff", "codec."), "coefficient type",
                   parse_coeff_type(m(c, "coeff", "codec.").get<std::string>()).has_value(),
                   "f16, bf16, f32, i16");
    // One of ours in another spelling ("uint8", "nhw"), or a layout that is none (a new
    // layout would need a new geometry, and a new version).
    auto unknown = [&](const nlohmann::json& v, const char* what, const char* spelled) {
      corrupt(file, "header names an unknown " + std::string(what) + ", " + shown_value(v) +
                        " (ARCHIVE.md spells " + spelled + ")");
    };
    if (!t) unknown(m(j, "dtype"), "dtype", k_dtype_names);
    if (!ct) unknown(m(c, "coeff", "codec."), "coefficient type", "f16, bf16, f32, i16");
    if (!l || *l == layout::automatic) unknown(m(j, "layout"), "layout", "HW, NHW, NHWC, NCHW");
    h.type = *t;
    auto shape = json_integers<u64>(m(j, "shape"));
    for (u64 d : shape) {
      if (d > (u64(1) << 40)) corrupt(file, "header shape has an absurd axis");
    }
    h.geom = resolve_layout(shape, *l);
    if (json_integer<u64>(m(j, "samples")) != h.geom.samples ||
        json_integer<u64>(m(j, "planes")) != h.geom.planes ||
        json_integer<u64>(m(j, "height")) != h.geom.height ||
        json_integer<u64>(m(j, "width")) != h.geom.width) {
      corrupt(file, "header geometry disagrees with its shape");
    }
    h.codec.block = json_integer<int>(m(c, "block", "codec."));
    h.codec.chop = json_integer<int>(m(c, "chop", "codec."));
    h.codec.coeff = *ct;
    h.codec.offset = m(c, "offset", "codec.").get<double>();
    validate(h.codec);
    // Bounded so that no product of samples and bytes per sample can overflow: every check
    // of a chunk's or a range's size relies on it.
    if (const std::string why = archive_limit_passed(h.geom, &h.codec); !why.empty()) {
      corrupt(file, "header describes " + why);
    }
    auto cp = json_integers<u64>(m(c, "coeff_plane", "codec."));
    auto expect = coeff_shape(h.codec, h.geom.height, h.geom.width);
    if (cp.size() != 2 || cp[0] != expect.rows || cp[1] != expect.cols ||
        json_integer<u64>(m(c, "coeff_bytes_per_sample", "codec.")) !=
            h.coeff_bytes_per_sample()) {
      corrupt(file, "header coefficient plane disagrees with block, chop and shape");
    }
    h.samples_per_chunk = json_integer<u64>(m(m(j, "chunking"), "samples_per_chunk", "chunking."));
    // Readers size their chunk buffers by it, for the coefficients and for the decoded
    // samples: no more samples than there are, and no chunk of several samples above 16 GiB
    // of coefficients or 1 GiB decoded (a writer's chunks are at most 4 GiB and 64 MiB, or
    // one sample).
    const u64 decoded = h.geom.values_per_sample() * size_of(h.type);
    const std::string spc = "samples_per_chunk " + std::to_string(h.samples_per_chunk);
    if (h.samples_per_chunk == 0 || h.samples_per_chunk > h.geom.samples) {
      corrupt(file, spc + " is out of range (1.." + std::to_string(h.geom.samples) +
                        " samples, the archive's)");
    }
    if (h.samples_per_chunk > 1 &&
        (h.samples_per_chunk > k_max_chunk_bytes / h.coeff_bytes_per_sample() ||
         h.samples_per_chunk > k_max_chunk_decoded / decoded)) {
      // In GiB to 3 digits, or to as many as show a size past its limit to be past it.
      const auto gib = [](double bytes, double limit) {
        char t[64];
        for (int digits = 3; digits <= 12; ++digits) {
          std::snprintf(t, sizeof t, "%.*g", digits, bytes / 0x1p30);
          if (bytes <= limit || std::strtod(t, nullptr) * 0x1p30 > limit) break;
        }
        return std::string(t);
      };
      const double n = double(h.samples_per_chunk);
      corrupt(file, spc + " is too many: a chunk of that many samples would hold " +
                        gib(n * double(h.coeff_bytes_per_sample()), double(k_max_chunk_bytes)) +
                        " GiB of coefficients and " +
                        gib(n * double(decoded), double(k_max_chunk_decoded)) +
                        " GiB decoded, and a chunk of several samples holds at most 16 GiB of "
                        "coefficients and 1 GiB decoded");
    }
    // Checked against the preamble's by the reader.
    h.alignment = json_integer<std::uint32_t>(m(m(j, "chunking"), "alignment", "chunking."));
    // (An optional member given as null is absent: ARCHIVE.md.)
    if (has(j.at("chunking"), "side_bytes")) {
      h.side_bytes = json_integer<u64>(m(m(j, "chunking"), "side_bytes", "chunking."));
    }
    if (has(j, "provenance")) h.provenance = j.at("provenance");
    if (has(j, "nonfinite")) {
      const auto& nf = j.at("nonfinite");
      if (!nf.is_object() || !nf.contains("replace") || !nf.at("replace").is_number()) {
        corrupt(file, "header member nonfinite is not an object whose 'replace' is a number");
      }
      const double v = nf.at("replace").get<double>();
      if (!std::isfinite(v)) corrupt(file, "header nonfinite replacement is not finite");
      // Integer data holds no NaN or Inf: dctchop's writer leaves the member out for it, and
      // one that another writer (or a development build) put there means nothing. For float
      // data the writer checks it against the type: one it cannot hold was not written by it,
      // and would decode or compare as Inf.
      if (is_float(h.type)) {
        if (std::fabs(v) > max_finite(h.type)) {
          corrupt(file, "header nonfinite replacement " + j.at("nonfinite").at("replace").dump() +
                            " does not fit the dtype " + std::string(to_string(h.type)));
        }
        h.nonfinite_replacement = v;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    corrupt(file, "header" + (where.empty() ? "" : " member " + where) + ": " + json_error_text(e));
  } catch (const std::out_of_range& e) {
    corrupt(file, "header" + (where.empty() ? "" : " member " + where) + ": " + e.what());
  } catch (const error& e) {
    if (e.code() == errc::corrupt || e.code() == errc::unsupported_version) throw;
    corrupt(file, std::string("header: ") + e.what());
  }
  return h;
}

nlohmann::json make_footer(u64 samples, const std::vector<chunk_info>& chunks,
                           const std::vector<side_array_info>& sides, const nlohmann::json& extra) {
  nlohmann::json f = extra.is_object() ? extra : nlohmann::json::object();
  f["samples"] = samples;
  auto& cj = f["chunks"] = nlohmann::json::array();
  for (const auto& c : chunks) {
    cj.push_back({{"offset", c.offset}, {"first", c.first}, {"count", c.count},
                  {"stored_bytes", c.stored_bytes}, {"raw_bytes", c.raw_bytes},
                  {"stages", c.stages}, {"xxh64", hex64(c.xxh64)}});
  }
  auto& sj = f["side_arrays"] = nlohmann::json::array();
  for (const auto& s : sides) {
    sj.push_back({{"name", s.name}, {"descr", s.descr}, {"shape", s.shape}, {"offset", s.offset},
                  {"bytes", s.bytes}, {"xxh64", hex64(s.xxh64)}});
  }
  return f;
}

/** The index's JSON text, exactly json_text(make_footer(...)), a piece at a time to
 *  `put(std::string_view)`: the chunks' entries one by one, never all of them as JSON values
 *  (about 1 KB each: 2.5 GB at the end of a 10 TB compress in 4 MiB chunks) nor as one
 *  string. The rest is made by nlohmann, the chunk list standing in as a marker string that
 *  nothing else writes, and the entries are written as nlohmann writes them: members sorted,
 *  no spaces. */
template <typename Put>
void footer_pieces(u64 samples, const std::vector<chunk_info>& chunks,
                   const std::vector<side_array_info>& sides, const nlohmann::json& extra,
                   Put&& put) {
  nlohmann::json f = make_footer(samples, {}, sides, extra);
  f["chunks"] = "\u0001dctchop chunks\u0001";
  const std::string text = json_text(f);
  const std::string marker = "\"\\u0001dctchop chunks\\u0001\"";
  const std::size_t at = text.find(marker);
  put(std::string_view(text).substr(0, at));
  put("[");
  std::string entry;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const chunk_info& c = chunks[i];
    entry.assign(i == 0 ? "{\"count\":" : ",{\"count\":");
    entry.append(std::to_string(c.count)).append(",\"first\":").append(std::to_string(c.first));
    entry.append(",\"offset\":").append(std::to_string(c.offset));
    entry.append(",\"raw_bytes\":").append(std::to_string(c.raw_bytes));
    entry.append(",\"stages\":").append(std::to_string(c.stages));
    entry.append(",\"stored_bytes\":").append(std::to_string(c.stored_bytes));
    entry.append(",\"xxh64\":\"").append(hex64(c.xxh64)).append("\"}");
    put(std::string_view(entry));
  }
  put("]");
  put(std::string_view(text).substr(at + marker.size()));
}

/** The tail's index (`at`, `bytes` long) does not end where the tail begins (`tail`): a file
 *  cut short or with bytes cut out of it, or a damaged tail. */
std::string misplaced_index(u64 at, u64 bytes, u64 tail) {
  return "truncated or damaged: the tail puts the index at offset " + std::to_string(at) + " (" +
         std::to_string(bytes) + " bytes), which does not end where the tail begins (" +
         std::to_string(tail) + ")";
}

/** JSON text of exactly its recorded length: nlohmann skips a byte-order mark and stops at a
 *  NUL, which no writer puts there. */
bool plain_json_text(std::string_view text) {
  return text.find('\0') == std::string_view::npos && text.substr(0, 3) != "\xEF\xBB\xBF";
}

}  // namespace

std::uint64_t side_bytes_of(const std::vector<side_array_info>& sides, std::uint64_t alignment) {
  std::uint64_t total = 0;
  for (const auto& s : sides) total += align_up(s.bytes, alignment);
  return total;
}

std::uint64_t predict_archive_bytes(const archive_header& header,
                                    const std::vector<side_array_info>& sides,
                                    const nlohmann::json& footer_extra) {
  // Mirrors archive_writer: same header text, same chunking, same footer text (checksums have
  // a fixed width, so their values do not change the length).
  archive_header h = header;
  h.major = archive_major;
  h.minor = archive_minor;
  h.alignment = archive_alignment;
  const u64 a = h.alignment;
  h.side_bytes = side_bytes_of(sides, a);  // as the compress that writes them says
  u64 pos = align_up(k_preamble + json_text(h.to_json()).size(), a);
  const u64 cbps = h.coeff_bytes_per_sample();
  std::vector<chunk_info> chunks;
  for (u64 first = 0; first < h.geom.samples; first += h.samples_per_chunk) {
    chunk_info c;
    c.index = chunks.size();
    c.offset = pos;
    c.first = first;
    c.count = std::min(h.samples_per_chunk, h.geom.samples - first);
    c.stored_bytes = c.raw_bytes = c.count * cbps;
    chunks.push_back(c);
    pos = align_up(pos + k_record + c.stored_bytes, a);
  }
  std::vector<side_array_info> placed = sides;
  for (auto& sd : placed) {
    sd.offset = pos;
    pos = align_up(pos + sd.bytes, a);
  }
  u64 footer = 0;
  footer_pieces(h.geom.samples, chunks, placed, footer_extra,
                [&](std::string_view piece) { footer += piece.size(); });
  return pos + footer + k_tail;
}

nlohmann::json codec_json(const codec_params& p, const geometry& g) {
  const auto cs = coeff_shape(p, g.height, g.width);
  return {{"transform", k_transform},
          {"block", p.block},
          {"chop", p.chop},
          {"coeff", std::string(to_string(p.coeff))},
          {"offset", p.offset},
          {"coeff_plane", {cs.rows, cs.cols}},
          {"coeff_bytes_per_sample", dctchop::coeff_bytes_per_sample(p, g)}};
}

nlohmann::json archive_header::to_json() const {
  nlohmann::json j;
  j["format"] = "dctchop-archive";
  j["version"] = {major, minor};
  j["dtype"] = std::string(to_string(type));
  j["shape"] = geom.shape();
  j["layout"] = std::string(to_string(geom.lay));
  j["samples"] = geom.samples;
  j["planes"] = geom.planes;
  j["height"] = geom.height;
  j["width"] = geom.width;
  j["codec"] = codec_json(codec, geom);
  j["chunking"] = {{"samples_per_chunk", samples_per_chunk}, {"alignment", alignment}};
  if (side_bytes > 0) j["chunking"]["side_bytes"] = side_bytes;
  if (nonfinite_replacement) j["nonfinite"] = {{"replace", *nonfinite_replacement}};
  j["provenance"] = provenance;
  return j;
}

// ------------------------------------------------------------------------------ writer

namespace {

/** What is wrong with a side array's description ("" when nothing): one entry per sample
 *  along axis 0, numeric, and as many bytes as its shape says: what the reader checks once
 *  (so that readers of a side array can trust its description), and the writer before it
 *  writes one. Little-endian (or single-byte) only: the bytes are read as they lie. Spelled
 *  as ARCHIVE.md writes them, "|" for one byte and "<" for more: not numpy's other names
 *  ("<u1", "uint8"). */
std::string side_array_problem(const side_array_info& s, u64 samples) {
  const auto type = parse_npy_descr(s.descr);
  if (!type) return "descr '" + s.descr + "' is not a numeric type ARCHIVE.md names";
  if (s.descr.size() != 3 || s.descr[0] != (type->itemsize == 1 ? '|' : '<')) {
    return "descr '" + s.descr + "' is not spelled as ARCHIVE.md spells it (" +
           (type->itemsize == 1 ? "'|' for one byte" : "'<', little-endian, for more") + ")";
  }
  if (s.shape.empty()) return "its shape has no axes";
  if (s.shape[0] != samples) {
    return "its shape's first axis is " + std::to_string(s.shape[0]) + ", not the " +
           std::to_string(samples) + " samples";
  }
  u64 bytes = type->itemsize;
  for (u64 d : s.shape) {
    if (d != 0 && bytes > UINT64_MAX / d) return "its shape's size passes 2^64 bytes";
    bytes *= d;
  }
  if (bytes != s.bytes) {
    return "its bytes are " + std::to_string(s.bytes) + ", where its shape and type take " +
           std::to_string(bytes);
  }
  return {};
}

}  // namespace

namespace {

/** What is wrong with a footer's informative members (ARCHIVE.md), as a message to follow
 *  "index: " ("" when nothing): nonfinite_replaced a count (and there where the
 *  header has a replacement), input_bytes a count, quality figures numbers, flags or null.
 *  The reader's rules, which the writer checks before it writes them. */
std::string footer_extra_problem(const nlohmann::json& f, bool replacement) {
  std::string where;
  try {
    if (replacement && !f.contains("nonfinite_replaced")) {
      return "no nonfinite_replaced, which the index of an archive whose header has nonfinite "
             "holds (beside quality, not in it): the count of the values replaced";
    }
    // Optional, informative, counts all the same.
    for (const char* count : {"nonfinite_replaced", "input_bytes"}) {
      where = count;
      if (f.contains(count)) (void)json_integer<u64>(f.at(count));
    }
  } catch (const nlohmann::json::exception& e) {
    return "member " + where + ": " + json_error_text(e);
  } catch (const std::invalid_argument& e) {
    return "member " + where + ": " + e.what();
  } catch (const std::out_of_range& e) {
    return "member " + where + ": " + e.what();
  }
  // The quality figures that `info` prints: numbers, flags, null (an infinite PSNR). (A NaN
  // or Inf is no JSON number: nlohmann writes it as null, which reads as lossless.)
  if (f.contains("quality")) {
    const auto& q = f.at("quality");
    if (!q.is_object()) return "quality is not an object";
    for (const auto& [key, v] : q.items()) {
      if (!v.is_number() && !v.is_boolean() && !v.is_null()) {
        return "quality figure " + key + " is not a number, a flag or null";
      }
      if (v.is_number_float() && !std::isfinite(v.get<double>())) {
        return "quality figure " + key + " is not finite";
      }
    }
  }
  return {};
}

}  // namespace

archive_writer::archive_writer(output_file out, archive_header header)
    : out_(std::move(out)), header_(std::move(header)) {
  try {
    validate(header_.codec);
  } catch (const error& e) {
    throw error(e.code(), out_.display_name() + ": " + e.what());
  }
  // (What the reader refuses, refused before anything is written.)
  const geometry& g = header_.geom;
  if (g.samples == 0 || g.planes == 0 || g.height == 0 || g.width == 0) {
    throw error(errc::invalid_argument,
                out_.display_name() + ": an archive of " + std::to_string(g.samples) +
                    " samples of " + std::to_string(g.planes) + " x " + std::to_string(g.height) +
                    " x " + std::to_string(g.width) + ": every axis holds at least one value");
  }
  if (header_.samples_per_chunk == 0) {
    throw error(errc::invalid_argument, out_.display_name() + ": samples per chunk is 0");
  }
  if (size_of(header_.type) == 0) {  // (to_json would write "?", which readers call newer)
    throw error(errc::invalid_argument,
                out_.display_name() + ": dtype " + std::to_string(static_cast<int>(header_.type)) +
                    " is not one dctchop knows");
  }
  header_.major = archive_major;
  header_.minor = archive_minor;
  header_.alignment = archive_alignment;
  const std::string text = json_text(header_.to_json());
  try {
    (void)parse_archive_header(text, "");  // every rule a reader keeps (one writer, one reader)
  } catch (const error& e) {
    // ": corrupt archive: samples_per_chunk 5 is out of range (1..2 samples, ...)"
    std::string why = e.what();
    for (const std::string tag : {": corrupt archive: ", ": "}) {
      if (why.rfind(tag, 0) == 0) {
        why.erase(0, tag.size());
        break;
      }
    }
    throw error(errc::invalid_argument,
                out_.display_name() + ": not written, as readers would refuse its header: " + why);
  }
  unsigned char pre[k_preamble] = {};
  std::memcpy(pre, k_magic.data(), 8);
  put_u16(pre + 8, archive_major);
  put_u16(pre + 10, archive_minor);
  put_u32(pre + 12, 0);
  put_u64(pre + 16, text.size());
  put_u64(pre + 24, XXH64(text.data(), text.size(), 0));
  put_u64(pre + 32, align_up(k_preamble + text.size(), archive_alignment));
  put_u32(pre + 40, archive_alignment);
  out_.write(pre, sizeof pre);
  out_.write(text.data(), text.size());
  pad_to_alignment();
}

void archive_writer::pad_to_alignment() {
  const u64 pos = out_.position();
  out_.write_zeros(static_cast<std::size_t>(align_up(pos, header_.alignment) - pos));
}

void archive_writer::write_chunk(u64 first, u64 count, std::span<const std::byte> coeffs) {
  const u64 cbps = header_.coeff_bytes_per_sample();
  if (first != next_sample_ || count == 0 || first + count > header_.geom.samples ||
      count > header_.samples_per_chunk || coeffs.size() != count * cbps || !sides_.empty()) {
    throw error(errc::invalid_argument, out_.display_name() + ": chunk out of order or of wrong size");
  }
  chunk_info c;
  c.index = chunks_.size();
  c.offset = out_.position();
  c.first = first;
  c.count = count;
  c.stored_bytes = c.raw_bytes = coeffs.size();
  c.stages = 0;
  unsigned char rec[k_record] = {};
  std::memcpy(rec, k_chunk_magic, 8);
  put_u64(rec + 8, c.index);
  put_u64(rec + 16, c.first);
  put_u64(rec + 24, c.count);
  put_u64(rec + 32, c.stored_bytes);
  put_u64(rec + 40, c.raw_bytes);
  put_u32(rec + 48, c.stages);
  put_u32(rec + 52, 0);
  c.xxh64 = chunk_hash(rec, coeffs);
  put_u64(rec + 56, c.xxh64);
  out_.write(rec, sizeof rec);
  out_.write(coeffs.data(), coeffs.size());
  pad_to_alignment();
  chunks_.push_back(c);
  next_sample_ += count;
}

void archive_writer::write_side_array(const std::string& name, const std::string& descr,
                                      const std::vector<u64>& shape,
                                      std::span<const std::byte> bytes) {
  const u64 rows = shape.empty() ? 0 : shape[0];
  if (rows == 0 ? !bytes.empty() : bytes.size() % rows != 0) {
    throw error(errc::invalid_argument, name + ": " + std::to_string(bytes.size()) +
                                    " bytes are not whole rows of its shape");
  }
  const u64 row = rows == 0 ? 0 : bytes.size() / rows;
  write_side_array(name, descr, shape, row, [&](u64 first, u64 n, void* dst) {
    std::memcpy(dst, bytes.data() + first * row, n * row);
  });
}

void archive_writer::write_side_array(const std::string& name, const std::string& descr,
                                      const std::vector<u64>& shape, u64 row_bytes,
                                      const row_source& rows) {
  if (next_sample_ != header_.geom.samples) {
    throw error(errc::invalid_argument, "side arrays go after the last chunk");
  }
  if (shape.empty()) throw error(errc::invalid_argument, name + ": a side array needs a first axis");
  side_array_info s;
  s.name = name;
  s.descr = descr;
  s.shape = shape;
  s.offset = out_.position();
  s.bytes = shape[0] * row_bytes;
  // What the reader would call corrupt: one name once, a row per sample, a numeric
  // little-endian descr spelled as ARCHIVE.md does, and the bytes its shape says.
  for (const auto& other : sides_) {
    if (other.name == name) {
      throw error(errc::invalid_argument, "two side arrays named '" + name + "'");
    }
  }
  if ((row_bytes != 0 && shape[0] > UINT64_MAX / row_bytes) ||
      !side_array_problem(s, header_.geom.samples).empty()) {
    throw error(errc::invalid_argument,
                "side array '" + name + "' (" + descr + ", shape " + shape_text(shape) + ", " +
                    std::to_string(row_bytes) + " bytes a row): expected " +
                    std::to_string(header_.geom.samples) +
                    " rows, one a sample, of a numeric little-endian type ('|u1', '<i8', ...) "
                    "and the bytes its shape says");
  }
  // No more than the header said, where it said: a stream reader takes that much.
  if (header_.side_bytes != 0 &&
      side_bytes_of(sides_, header_.alignment) + align_up(s.bytes, header_.alignment) >
          header_.side_bytes) {
    throw error(errc::invalid_argument,
                "side array '" + name + "': more side array bytes than the header's side_bytes (" +
                    std::to_string(header_.side_bytes) + ")");
  }
  xxh64_stream h;
  for_each_row_piece(shape[0], row_bytes, rows, [&](const void* p, u64, u64 n) {
    h.update(p, n * row_bytes);
    out_.write(p, n * row_bytes);
  });
  s.xxh64 = h.digest();
  pad_to_alignment();
  sides_.push_back(std::move(s));
}

void archive_writer::finish() {
  if (next_sample_ != header_.geom.samples) {
    throw error(errc::invalid_argument, out_.display_name() + ": finished with " +
                                    std::to_string(next_sample_) + " of " +
                                    std::to_string(header_.geom.samples) + " samples written");
  }
  const auto refused = [&](const std::string& why) {
    throw error(errc::invalid_argument,
                out_.display_name() + ": not finished, as readers would refuse its index: " + why);
  };
  if (!footer_extra_.is_null() && !footer_extra_.is_object()) {
    refused("the extra members are not a JSON object");
  }
  const nlohmann::json extra = footer_extra_.is_object() ? footer_extra_ : nlohmann::json::object();
  for (const char* own : {"samples", "chunks", "side_arrays"}) {  // (replaced by the writer's)
    if (extra.contains(own)) {
      refused(std::string("the extra member ") + own + " is the index's own");
    }
  }
  if (const std::string p = footer_extra_problem(
          extra, header_.nonfinite_replacement.has_value() && is_float(header_.type));
      !p.empty()) {
    refused(p);
  }
  {
    std::string twice;
    bool deep = false;
    (void)parse_json_naming_once(json_text(extra), twice, nullptr, &deep);
    if (deep) refused("the extra members " + too_deep_text());
  }
  const u64 footer_offset = out_.position();
  u64 footer_bytes = 0;
  xxh64_stream h;
  std::string buffered;  // (a write a MiB, not one an entry)
  const auto flush = [&] {
    out_.write(buffered.data(), buffered.size());
    h.update(buffered.data(), buffered.size());
    footer_bytes += buffered.size();
    buffered.clear();
  };
  footer_pieces(header_.geom.samples, chunks_, sides_, footer_extra_, [&](std::string_view piece) {
    buffered.append(piece);
    if (buffered.size() >= (std::size_t(1) << 20)) flush();
  });
  flush();
  unsigned char tail[k_tail] = {};
  std::memcpy(tail, k_tail_magic, 8);
  put_u64(tail + 8, footer_offset);
  put_u64(tail + 16, footer_bytes);
  put_u64(tail + 24, h.digest());
  put_u64(tail + 32, chunks_.size());
  put_u64(tail + 40, header_.geom.samples);
  std::memcpy(tail + 56, k_end_magic, 8);
  out_.write(tail, sizeof tail);
  out_.commit();
}

// ------------------------------------------------------------------------------ reader

std::string archive_limit_passed(const geometry& g, const codec_params* p) {
  for (const u64 d : g.shape()) {
    if (d > (u64(1) << 40)) return "an axis of " + std::to_string(d) + ", above 2^40";
  }
  constexpr u64 side = u64(1) << 24;
  if (g.height > side || g.width > side) {
    return "planes of " + std::to_string(g.height) + "x" + std::to_string(g.width) +
           ", above 2^24 (16777216) a side";
  }
  if (g.planes > (u64(1) << 16)) {
    return std::to_string(g.planes) + " planes a sample, above 2^16 (65536)";
  }
  if (g.height * g.width > (u64(1) << 36) / std::max<u64>(g.planes, 1)) {
    return "samples of more than 2^36 values";
  }
  const u64 per_sample =
      std::max<u64>({p ? coeff_bytes_per_sample(*p, g) : 0, g.values_per_sample() * 8, 1});
  if (g.samples > (u64(1) << 62) / per_sample) {
    return "more data than any file holds (the samples times 8 bytes a value, or times the "
           "coefficient bytes of a sample where more, above 2^62)";
  }
  return {};
}


archive_header parse_archive_header(std::string_view text, const std::string& file) {
  std::string twice, why;
  bool deep = false;
  nlohmann::json j = parse_json_naming_once(text, twice, nullptr, &deep, &why);
  if (deep) corrupt(file, "header " + too_deep_text());
  if (j.is_discarded() || !j.is_object() || !plain_json_text(text)) {
    corrupt(file, "header " + not_json_text(why));
  }
  if (!twice.empty()) corrupt(file, "header names member '" + twice + "' twice");
  return header_from_json(j, file);
}

archive_reader archive_reader::open_seekable(const std::string& path) {
  struct stat st {};
  if (path == "-" ||
      (::stat(path.c_str(), &st) == 0 &&
       (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)))) {
    throw error(errc::invalid_argument,
                (path == "-" ? std::string("standard input") : path) +
                    ": not a regular file; random access is needed (a stream is read by "
                    "`dctchop decompress`)");
  }
  return open(path);
}

archive_reader archive_reader::open(const std::string& path) {
  archive_reader r(input_file::open(path));
  const std::string name = r.display_name();
  unsigned char pre[k_preamble];
  std::size_t got = r.file_.seekable() ? 0 : r.file_.read(pre, sizeof pre);
  if (r.file_.seekable()) {
    got = static_cast<std::size_t>(std::min<u64>(r.file_.size(), sizeof pre));
    if (got > 0) r.file_.read_at(0, pre, got, "preamble");
  }
  if (got == 0) throw error(errc::bad_input, name + ": empty (0 bytes), not a dctchop archive");
  // The start of the magic and nothing more: an archive cut short, not another file.
  if (got < 8 && std::memcmp(pre, k_magic.data(), got) == 0) {
    corrupt(name, "truncated inside the preamble (" + std::to_string(got) +
                      (got == 1 ? " byte)" : " bytes)"));
  }
  if (got < 8 || std::memcmp(pre, k_magic.data(), 8) != 0) {
    // Inputs of compress handed to decompress, info or verify are worth naming.
    const detail::file_magic magic = detail::magic_of(pre, got);
    std::string what = "not a dctchop archive (bad magic)";
    if (magic == detail::file_magic::npy) {
      what = "is a .npy file, not a dctchop archive (compress makes one of it)";
    } else if (magic == detail::file_magic::hdf5 ||
               (magic == detail::file_magic::other && r.file_.seekable() &&
                detail::hdf5_after_user_block(r.file_.size(), [&r](u64 at, void* head) {
                  r.file_.read_at(at, head, 8, "a user block");
                  return true;
                }))) {
      what = "is an HDF5 file, not a dctchop archive (compress makes one of a dataset in it)";
    } else if (magic == detail::file_magic::zip || magic == detail::file_magic::empty_zip) {
      what = "is a ZIP file (.npz?), not a dctchop archive (compress makes one of an array in it)";
    }
    throw error(errc::bad_input, name + ": " + what);
  }
  if (got < k_preamble) corrupt(name, "truncated inside the preamble");
  const std::uint16_t major = get_u16(pre + 8), minor = get_u16(pre + 10);
  if (major > archive_major) {
    throw error(errc::unsupported_version,
                name + ": archive version " + std::to_string(major) + "." +
                    std::to_string(minor) + " is newer than this dctchop reads (" +
                    std::to_string(archive_major) + ".x); upgrade dctchop");
  }
  if (major == 0) corrupt(name, "version 0 in the preamble");
  const u64 header_bytes = get_u64(pre + 16), header_hash = get_u64(pre + 24);
  const u64 data_offset = get_u64(pre + 32);
  const std::uint32_t alignment = get_u32(pre + 40);
  {
    std::string bad;  // which field, and why
    const auto n = [](u64 v) { return std::to_string(v); };
    if (header_bytes == 0 || header_bytes > k_max_json) {
      bad = "header_bytes " + n(header_bytes) + " is not 1.." + n(k_max_json);
    } else if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      bad = "alignment " + n(alignment) + " is not a power of two";
    } else if (data_offset < k_preamble + header_bytes) {
      bad = "data_offset " + n(data_offset) + " is inside the header, which ends at " +
            n(k_preamble + header_bytes);
    } else if (data_offset % alignment != 0) {
      bad = "data_offset " + n(data_offset) + " is not a multiple of the alignment (" +
            n(alignment) + ")";
    } else if (data_offset != align_up(k_preamble + header_bytes, alignment)) {
      // (No gap: bytes between the header and chunk 0 would be read by no checksum.)
      bad = "data_offset " + n(data_offset) + " is past " +
            n(align_up(k_preamble + header_bytes, alignment)) +
            ", where the header ends, aligned (chunk 0 starts there)";
    }
    if (!bad.empty()) corrupt(name, "preamble fields out of range: " + bad);
  }
  std::string text(header_bytes, '\0');
  if (r.file_.seekable()) {
    if (r.file_.size() - k_preamble < header_bytes) corrupt(name, "truncated inside the header");
    r.file_.read_at(k_preamble, text.data(), text.size(), "header");
  } else if (r.file_.read(text.data(), text.size()) != text.size()) {
    corrupt(name, "truncated inside the header");
  }
  check_sum(text.data(), text.size(), header_hash, name, "header");
  r.header_ = parse_archive_header(text, name);
  if (r.header_.alignment != alignment) {
    corrupt(name, "header and preamble disagree on the alignment (" +
                      std::to_string(r.header_.alignment) + ", " + std::to_string(alignment) + ")");
  }
  r.header_.major = major;
  r.header_.minor = minor;
  r.header_.alignment = alignment;
  r.data_offset_ = data_offset;
  if (r.file_.seekable()) {
    r.read_footer_random();
  } else {
    discard(r.file_, data_offset - k_preamble - header_bytes, "header padding");
    r.stream_offset_ = data_offset;
  }
  return r;
}

void archive_reader::check_tail_counts(const unsigned char* tail) const {
  if (chunks_.size() != get_u64(tail + 32) || header_.geom.samples != get_u64(tail + 40)) {
    corrupt(display_name(), "tail disagrees with the index");
  }
}

void archive_reader::read_footer_random() {
  const std::string name = display_name();
  const u64 size = file_.size();
  if (size < k_tail) corrupt(name, "truncated (no index at the end)");
  unsigned char tail[k_tail];
  file_.read_at(size - k_tail, tail, k_tail, "tail");
  const bool tail_there =
      std::memcmp(tail, k_tail_magic, 8) == 0 && std::memcmp(tail + 56, k_end_magic, 8) == 0;
  if (size - k_tail < data_offset_) {
    // With an index at the end, the file is whole and its preamble damaged.
    if (!tail_there) corrupt(name, "truncated (no index at the end)");
    corrupt(name, "the preamble's data_offset (" + std::to_string(data_offset_) +
                      ") lies past the index at the end of the file (" +
                      std::to_string(size - k_tail) + "): the preamble is damaged");
  }
  if (!tail_there) corrupt(name, "truncated or damaged: no index at the end of the file");
  const u64 foff = get_u64(tail + 8), fbytes = get_u64(tail + 16), fhash = get_u64(tail + 24);
  if (fbytes == 0 || fbytes > k_max_json || foff < data_offset_ || foff > size - k_tail ||
      fbytes != size - k_tail - foff) {
    corrupt(name, misplaced_index(foff, fbytes, size - k_tail));
  }
  std::string text(fbytes, '\0');
  file_.read_at(foff, text.data(), text.size(), "footer");
  check_sum(text.data(), text.size(), fhash, name, "index");
  parse_footer(text);
  check_tail_counts(tail);
  check_placement(foff);
  footer_digest_ = fhash;
}

void archive_reader::check_placement(u64 footer_offset) const {
  // As the writer places them, and as a stream reader (which cannot seek) finds them: chunk 0
  // at the data offset and each next one where the one before ends, rounded up to the
  // alignment; then the side arrays, each where the one before (or the last chunk) ends,
  // aligned; then the footer, aligned, where the last of them ends. No gap: its bytes would
  // be read by no checksum. (The values come from the file: sizes are compared by subtraction.
  // stored_bytes < 2^62 by the header's size bound, so the sums here do not wrap.)
  const std::string name = display_name();
  const u64 align = header_.alignment;
  u64 at = data_offset_;  // where the next chunk must start
  for (const auto& c : chunks_) {
    if (c.offset != at) {
      corrupt(name, "chunk " + std::to_string(c.index) + " is at offset " +
                        std::to_string(c.offset) + ", not at " + std::to_string(at) +
                        (c.index == 0 ? " (the data offset)"
                                      : " (where chunk " + std::to_string(c.index - 1) +
                                            " ends, aligned)"));
    }
    if (k_record + c.stored_bytes > footer_offset - std::min(footer_offset, c.offset)) {
      corrupt(name, "chunk " + std::to_string(c.index) + " runs into the index");
    }
    at = align_up(c.offset + k_record + c.stored_bytes, align);
  }
  for (const auto& s : sides_) {
    if (s.offset != at || s.offset > footer_offset || s.bytes > footer_offset - s.offset) {
      corrupt(name, "side array '" + s.name + "' is at offset " + std::to_string(s.offset) +
                        ", not at " + std::to_string(at) +
                        " (where the chunks, or the side array before it, end, aligned) "
                        "before the index");
    }
    at = align_up(s.offset + s.bytes, align);
  }
  if (footer_offset != at) {
    corrupt(name, "the index is at offset " + std::to_string(footer_offset) + ", not at " +
                      std::to_string(at) + " (where the data ends, aligned)");
  }
}

void archive_reader::parse_footer(const std::string& text) {
  const std::string name = display_name();
  std::string twice, why;
  // The chunks' entries are taken as they are parsed, and left out of the tree: an entry
  // held as JSON took about 1 KB (200,000 chunks: 215 MB for `info`), a chunk_info 64 bytes.
  std::vector<chunk_info> chunks;
  std::string bad_entry;  // what was wrong with the first entry that was
  bool in_chunks = false, deep = false;
  using event = nlohmann::json::parse_event_t;
  nlohmann::json f =
      parse_json_naming_once(text, twice, [&](int depth, event e, nlohmann::json& v) {
        if (depth == 1 && e == event::key) in_chunks = v == "chunks";
        if (!in_chunks || depth != 2 || e != event::object_end) return true;
        if (!bad_entry.empty()) return false;
        // (A message about a member's value or type names it: "member chunks[3].stages".)
        const std::string at = "member chunks[" + std::to_string(chunks.size()) + "].";
        const char* key = "";
        const auto member = [&](const char* k) -> const nlohmann::json& { return v.at(key = k); };
        try {
          chunk_info c;
          c.index = chunks.size();
          c.offset = json_integer<u64>(member("offset"));
          c.first = json_integer<u64>(member("first"));
          c.count = json_integer<u64>(member("count"));
          c.stored_bytes = json_integer<u64>(member("stored_bytes"));
          c.raw_bytes = json_integer<u64>(member("raw_bytes"));
          c.stages = json_integer<std::uint32_t>(member("stages"));
          c.xxh64 = parse_hex64(member("xxh64").get<std::string>());
          chunks.push_back(c);
        } catch (const nlohmann::json::exception& x) {
          bad_entry = at + key + ": " + json_error_text(x);
        } catch (const std::invalid_argument& x) {
          bad_entry = at + key + ": " + x.what();
        } catch (const std::out_of_range& x) {
          bad_entry = at + key + ": " + x.what();
        }
        return false;
      },
      &deep, &why);
  if (deep) corrupt(name, "index " + too_deep_text());
  if (f.is_discarded() || !f.is_object() || !plain_json_text(text)) {
    corrupt(name, "index " + not_json_text(why));
  }
  if (!twice.empty()) corrupt(name, "index names member '" + twice + "' twice");
  if (!bad_entry.empty()) corrupt(name, "index: " + bad_entry);
  // An optional member given as null is absent (ARCHIVE.md): dropped here, for every reader
  // of footer() after.
  for (const char* optional : {"side_arrays", "input_bytes", "quality", "nonfinite_replaced"}) {
    if (const auto it = f.find(optional); it != f.end() && it->is_null()) f.erase(it);
  }
  std::vector<side_array_info> sides;
  std::string where;  // the member read last: a message about its value or type names it
  const auto member = [&](const nlohmann::json& o, const char* key,
                          const std::string& within = "") -> const nlohmann::json& {
    where = within + key;
    return o.at(key);
  };
  try {
    if (json_integer<u64>(member(f, "samples")) != header_.geom.samples) {
      corrupt(name, "index and header disagree on the sample count");
    }
    const u64 cbps = header_.coeff_bytes_per_sample();
    u64 next = 0;
    if (!member(f, "chunks").is_array()) corrupt(name, "index chunks are not a list");
    if (f.contains("side_arrays") && !f.at("side_arrays").is_array()) {
      corrupt(name, "index side_arrays are not a list");
    }
    // (The entries that were objects were taken; anything left is not an entry.)
    if (!f.at("chunks").empty()) {
      corrupt(name, "index chunks hold an entry that is not an object");
    }
    for (const chunk_info& c : chunks) {
      const std::string why = c.first != next ? "its first sample is " + std::to_string(c.first) +
                                                    ", where the one before ends at " +
                                                    std::to_string(next)
                                              : count_problem(c, header_.geom.samples - next, cbps);
      if (!why.empty()) {
        corrupt(name, "index entry " + std::to_string(c.index) + " is inconsistent: " + why);
      }
      if (c.count > header_.samples_per_chunk) too_many_samples(name, c, header_.samples_per_chunk);
      if (c.stages != 0) {
        throw error(errc::unsupported_version,
                    name + ": chunk " + std::to_string(c.index) +
                        " uses codec stages that this dctchop cannot decode; upgrade dctchop");
      }
      if (c.stored_bytes != c.raw_bytes) {
        corrupt(name, "index entry " + std::to_string(c.index) +
                          " is inconsistent: its stored size " + std::to_string(c.stored_bytes) +
                          " is not its raw size " + std::to_string(c.raw_bytes) +
                          " (it uses no codec stage)");
      }
      next += c.count;
    }
    if (next != header_.geom.samples) corrupt(name, "index does not cover every sample");
    if (f.contains("side_arrays")) {
      for (const auto& sj : f.at("side_arrays")) {
        side_array_info s;
        const std::string within = "side_arrays[" + std::to_string(sides.size()) + "].";
        if (!sj.is_object()) corrupt(name, "index side_arrays hold an entry that is not an object");
        s.name = member(sj, "name", within).get<std::string>();
        for (const auto& other : sides) {  // looked up by name: one array per name
          if (other.name == s.name) corrupt(name, "two side arrays named '" + s.name + "'");
        }
        s.descr = member(sj, "descr", within).get<std::string>();
        s.shape = json_integers<u64>(member(sj, "shape", within));
        s.offset = json_integer<u64>(member(sj, "offset", within));
        s.bytes = json_integer<u64>(member(sj, "bytes", within));
        s.xxh64 = parse_hex64(member(sj, "xxh64", within).get<std::string>());
        if (const std::string why = side_array_problem(s, header_.geom.samples); !why.empty()) {
          corrupt(name, "side array '" + s.name + "' is malformed: " + why);
        }
        sides.push_back(std::move(s));
      }
    }
    where.clear();  // (footer_extra_problem names its members itself)
    if (const std::string p = footer_extra_problem(f, header_.nonfinite_replacement.has_value());
        !p.empty()) {
      corrupt(name, "index: " + p);
    }
  } catch (const nlohmann::json::exception& e) {
    corrupt(name, "index: " + (where.empty() ? "" : "member " + where + ": ") + json_error_text(e));
  } catch (const std::invalid_argument& e) {
    corrupt(name, "index: " + (where.empty() ? "" : "member " + where + ": ") + e.what());
  } catch (const std::out_of_range& e) {
    corrupt(name, "index: " + (where.empty() ? "" : "member " + where + ": ") + e.what());
  }
  chunks_ = std::move(chunks);
  checked_.assign(chunks_.size(), false);
  sides_ = std::move(sides);
  footer_ = std::move(f);
}

void archive_reader::verify_chunk(const chunk_info& c, const unsigned char* rec,
                                  std::span<const std::byte> payload) const {
  const std::string where = "chunk " + std::to_string(c.index) + " (samples " +
                            std::to_string(c.first) + ".." +
                            std::to_string(c.first + c.count - 1) + ")";
  if (std::memcmp(rec, k_chunk_magic, 8) != 0) {
    corrupt(display_name(), where + ": bad record: no chunk magic");
  }
  // Which field, as the stream reader says (its own checks name them).
  if (const std::string why = chunk_difference(record_fields(rec), c, false); !why.empty()) {
    corrupt(display_name(), where + ": record disagrees with the index: " + why);
  }
  if (k_check_sums && chunk_hash(rec, payload) != c.xxh64) {
    corrupt(display_name(), where + ": checksum mismatch");
  }
}

template <typename Alloc>
void archive_reader::read_chunk(std::size_t i, std::vector<std::byte, Alloc>& coeffs) {
  if (!file_.seekable()) throw error(errc::invalid_argument, "random access on a stream");
  if (i >= chunks_.size()) throw error(errc::invalid_argument, "chunk index out of range");
  const chunk_info& c = chunks_[i];
  // The record and the payload in two reads, so the payload lands where it stays.
  unsigned char rec[k_record];
  file_.read_at(c.offset, rec, k_record, "chunk");
  coeffs.resize(c.stored_bytes);
  file_.read_at(c.offset + k_record, coeffs.data(), coeffs.size(), "chunk", read_threads_);
  verify_chunk(c, rec, std::span<const std::byte>(coeffs.data(), coeffs.size()));
  checked_[i] = true;
}

template <typename Alloc>
bool archive_reader::next_chunk(chunk_info& info, std::vector<std::byte, Alloc>& coeffs) {
  if (file_.seekable()) {
    if (next_index_ >= chunks_.size()) return false;
    read_chunk(next_index_, coeffs);
    info = chunks_[next_index_++];
    return true;
  }
  if (stream_done_) return false;
  const std::string name = display_name();
  const u64 align = header_.alignment;
  // Stream offsets are counted from the start of the archive.
  const u64 offset = stream_offset_;
  if (next_sample_ < header_.geom.samples) {
    unsigned char rec[k_record];
    file_.read_exact(rec, k_record, "a chunk record");
    chunk_info c = record_fields(rec);
    const u64 said_index = c.index;
    c.index = next_index_;
    c.offset = offset;
    const u64 cbps = header_.coeff_bytes_per_sample();
    const bool sane = std::memcmp(rec, k_chunk_magic, 8) == 0 && said_index == next_index_ &&
                      c.first == next_sample_ && c.count > 0 &&
                      c.count <= header_.geom.samples - next_sample_ &&
                      c.raw_bytes == c.count * cbps;
    if (sane && c.stages != 0) {
      // A stage this reader does not know (decoded as dense coefficients it would be wrong
      // data, with a valid checksum), or a damaged record: the checksum over the record and
      // the payload tells them apart. Hashed in pieces, whatever size the record claims.
      xxh64_stream h;
      h.update(rec, 56);
      update_in_pieces(h, c.stored_bytes,
                       [&](u64, std::byte* dst, std::size_t n) { file_.read_exact(dst, n, "a chunk"); });
      check_digest(h.digest(), c.xxh64, name, "chunk " + std::to_string(next_index_) + ":");
      throw error(errc::unsupported_version,
                  name + ": chunk " + std::to_string(next_index_) +
                      " uses codec stages that this dctchop cannot decode; upgrade dctchop");
    }
    if (!sane || c.stored_bytes != c.raw_bytes) {
      const auto n = [](u64 v) { return std::to_string(v); };
      std::string why =
          std::memcmp(rec, k_chunk_magic, 8) != 0 ? "no chunk magic"
          : said_index != next_index_             ? "its index is " + n(said_index)
          : c.first != next_sample_
              ? "its first sample is " + n(c.first) + ", not " + n(next_sample_)
              : count_problem(c, header_.geom.samples - next_sample_, cbps);
      if (why.empty()) {
        why = "its stored size " + n(c.stored_bytes) + " is not its raw size " +
              n(c.raw_bytes) + " (it uses no codec stage)";
      }
      corrupt(name, "chunk " + n(next_index_) + ": bad record: " + why);
    }
    if (c.count > header_.samples_per_chunk) too_many_samples(name, c, header_.samples_per_chunk);
    // Grown as the bytes come, 64 MiB at a time: a record's size is believed only as far as
    // the stream bears it out (a header can claim a sample of 64 GiB; a chunk of one sample
    // has no bound but the header's). A buffer already large enough (the chunk before) is
    // only trimmed at the end, not cleared and zero-filled again for every chunk.
    for (u64 got = 0; got < c.stored_bytes;) {
      const auto n = static_cast<std::size_t>(std::min<u64>(c.stored_bytes - got, u64(64) << 20));
      if (coeffs.size() < got + n) coeffs.resize(static_cast<std::size_t>(got) + n);
      file_.read_exact(coeffs.data() + got, n, "a chunk");
      got += n;
    }
    coeffs.resize(c.stored_bytes);
    verify_chunk(c, rec, std::span<const std::byte>(coeffs.data(), coeffs.size()));
    const u64 end = offset + k_record + c.stored_bytes;
    discard(file_, align_up(end, align) - end, "chunk padding");
    stream_offset_ = align_up(end, align);
    chunks_.push_back(c);
    info = c;
    ++next_index_;
    next_sample_ += c.count;
    return true;
  }
  // After the last chunk: side arrays, footer and tail, kept (in memory, and past 64 MiB in a
  // temporary file) for the side arrays' readers.
  auto tail_bytes = std::make_shared<detail::byte_spool>(k_stream_tail_in_memory, name);
  {
    // Bounded, so that a stream that goes on (archives concatenated, a mistaken pipe) does
    // not fill the temporary folder: side arrays larger than the decoded data itself (as f64),
    // plus 256 MiB, are no labels a writer stores.
    // The header's side_bytes (what the writer said its side arrays take) comes on top, and
    // the padding of the first two (labels of 275 MiB beside small images, or an alignment of
    // 2^29, passed the bound of an archive that the file reader reads).
    const u64 values = header_.geom.samples * header_.geom.values_per_sample();  // < 2^59
    const u64 most = values * 8 + (u64(256) << 20) +
                     std::min<u64>(header_.side_bytes, u64(1) << 62) + 2 * u64(header_.alignment);
    // 64 KiB at a time (a pipe's default capacity): a buffer of 1 MiB, zero-filled and paged
    // in anew for every archive read as a stream, cost more than a small archive's whole tail.
    std::vector<std::byte> buf(std::size_t(64) << 10);
    for (;;) {
      const std::size_t n = file_.read(buf.data(), buf.size());
      if (n == 0) break;
      if (tail_bytes->size() + n > most) {
        corrupt(name, "more than " + std::to_string(most >> 20) +
                          " MiB follow the last chunk, more than any side arrays and index of "
                          "this archive: not one archive, or not its end");
      }
      tail_bytes->append(buf.data(), n);
    }
  }
  if (tail_bytes->size() < k_tail) corrupt(name, "truncated (no index at the end)");
  unsigned char t[k_tail];
  tail_bytes->read_at(tail_bytes->size() - k_tail, t, k_tail);
  if (std::memcmp(t, k_tail_magic, 8) != 0 || std::memcmp(t + 56, k_end_magic, 8) != 0) {
    corrupt(name, "truncated or damaged: no index at the end of the stream");
  }
  const u64 base = offset;  // archive offset of the first byte kept
  const u64 foff = get_u64(t + 8), fbytes = get_u64(t + 16), fhash = get_u64(t + 24);
  const u64 before_tail = tail_bytes->size() - k_tail;  // side arrays and footer
  if (foff < base || foff - base > before_tail || fbytes != before_tail - (foff - base) ||
      fbytes == 0 || fbytes > k_max_json) {
    corrupt(name, misplaced_index(foff, fbytes, base + before_tail));
  }
  std::string text(fbytes, '\0');
  tail_bytes->read_at(foff - base, text.data(), fbytes);
  check_sum(text.data(), text.size(), fhash, name, "index");
  std::vector<chunk_info> seen = std::move(chunks_);
  parse_footer(text);
  check_tail_counts(t);
  footer_digest_ = fhash;
  if (seen.size() != chunks_.size()) corrupt(name, "index disagrees with the chunks read");
  for (std::size_t i = 0; i < seen.size(); ++i) {
    const auto &a = seen[i], &b = chunks_[i];
    if (const std::string why = chunk_difference(a, b, true); !why.empty()) {
      corrupt(name, "index disagrees with chunk " + std::to_string(i) + ": " + why);
    }
  }
  check_placement(foff);
  stream_tail_ = std::move(tail_bytes);
  stream_done_ = true;
  return false;
}

std::optional<std::uint64_t> archive_reader::nonfinite_replaced() const {
  // (parse_footer checked that a header with a replacement has a whole-number count.)
  if (!header_.nonfinite_replacement || !footer_.contains("nonfinite_replaced")) return std::nullopt;
  return footer_["nonfinite_replaced"].get<std::uint64_t>();
}

std::size_t archive_reader::chunk_of(u64 sample) const {
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), sample,
                             [](u64 s, const chunk_info& c) { return s < c.first; });
  if (it == chunks_.begin() || sample >= header_.geom.samples) {
    throw error(errc::invalid_argument, "sample " + std::to_string(sample) + " out of range");
  }
  return static_cast<std::size_t>(it - chunks_.begin() - 1);
}

void archive_reader::read_samples(u64 first, u64 count, std::span<std::byte> coeffs) {
  const u64 cbps = header_.coeff_bytes_per_sample();
  if (count == 0) return;
  if (first + count > header_.geom.samples || first + count < first) {
    throw error(errc::invalid_argument, display_name() + ": samples " + std::to_string(first) +
                                            ".." + std::to_string(first + count - 1) +
                                            " out of range (archive holds " +
                                            std::to_string(header_.geom.samples) + ")");
  }
  if (coeffs.size() < count * cbps) throw error(errc::invalid_argument, "read_samples buffer too small");
  std::vector<std::byte> buf;
  u64 s = first;
  while (s < first + count) {
    const std::size_t ci = chunk_of(s);
    const chunk_info& c = chunks_[ci];
    const u64 from = s - c.first;
    const u64 n = std::min(c.first + c.count, first + count) - s;
    std::byte* dst = coeffs.data() + (s - first) * cbps;
    if (checked_[ci] && c.stages == 0) {
      // Checked whole before, by this reader: the samples' bytes alone. (A change made to the
      // file after that check goes unseen, as it would for data already read.)
      file_.read_at(c.offset + k_record + from * cbps, dst, n * cbps, "chunk");
    } else {
      read_chunk(ci, buf);
      std::memcpy(dst, buf.data() + from * cbps, n * cbps);
    }
    s += n;
  }
}

const side_array_info* archive_reader::find_side_array(const std::string& name) const {
  for (const auto& s : sides_)
    if (s.name == name) return &s;
  return nullptr;
}

void archive_reader::read_bytes_at(u64 offset, void* dst, std::size_t n, const char* what) const {
  if (file_.seekable()) {
    file_.read_at(offset, dst, n, what);
    return;
  }
  if (!stream_done_ || !stream_tail_ || offset < stream_offset_) {
    throw error(errc::invalid_argument, "a stream's side arrays come after its last chunk");
  }
  stream_tail_->read_at(offset - stream_offset_, dst, n);
}

std::optional<std::vector<std::byte>> archive_reader::read_side_array(const std::string& name) {
  const side_array_info* s = find_side_array(name);
  if (s == nullptr) return std::nullopt;
  std::vector<std::byte> out(s->bytes);
  read_bytes_at(s->offset, out.data(), out.size(), "side array");
  check_sum(out.data(), out.size(), s->xxh64, display_name(), "side array '" + name + "':");
  return out;
}

void archive_reader::verify_side_array(const std::string& name) {
  const side_array_info* s = find_side_array(name);
  if (s == nullptr) throw error(errc::invalid_argument, "no side array named " + name);
  xxh64_stream h;
  update_in_pieces(h, s->bytes, [&](u64 at, std::byte* dst, std::size_t n) {
    read_bytes_at(s->offset + at, dst, n, "side array");
  });
  check_digest(h.digest(), s->xxh64, display_name(), "side array '" + name + "':");
}

void archive_reader::read_side_array_rows(const std::string& name, u64 first, u64 count,
                                          std::span<std::byte> dst) {
  const side_array_info* s = find_side_array(name);
  if (s == nullptr) throw error(errc::invalid_argument, "no side array named " + name);
  const auto [rows, row] = rows_of(*s);
  if (first > rows || count > rows - first || dst.size() != count * row) {
    throw error(errc::invalid_argument, "side array rows out of range");
  }
  if (count > 0) read_bytes_at(s->offset + first * row, dst.data(), dst.size(), "side array");
}

row_source archive_reader::side_array_in_order(const std::string& name) {
  const side_array_info* s = find_side_array(name);
  if (s == nullptr) throw error(errc::invalid_argument, "no side array named " + name);
  // Not a structured binding: clang before 16 cannot capture one in a lambda.
  const std::pair<u64, u64> shape = rows_of(*s);
  const u64 rows = shape.first, row = shape.second;
  const std::string what = "side array '" + name + "':";
  struct progress {
    xxh64_stream hash;
    u64 next = 0;  // the row asked for next
  };
  // Shared, not captured by value: a copy of the source made midway goes on where it is.
  auto at = std::make_shared<progress>();
  if (s->bytes == 0) check_digest(at->hash.digest(), s->xxh64, display_name(), what);
  return [this, name, what, rows, row, expected = s->xxh64, at](u64 first, u64 count, void* dst) {
    if (first != at->next) throw error(errc::invalid_argument, what + " rows asked for out of order");
    read_side_array_rows(name, first, count, std::span(static_cast<std::byte*>(dst), count * row));
    at->hash.update(dst, count * row);
    at->next += count;
    if (at->next == rows && count > 0) check_digest(at->hash.digest(), expected, display_name(), what);
  };
}

// The two kinds of chunk buffer: the heap, and a backend's host memory.
template void archive_reader::read_chunk(std::size_t, std::vector<std::byte>&);
template void archive_reader::read_chunk(std::size_t, byte_buffer&);
template bool archive_reader::next_chunk(chunk_info&, std::vector<std::byte>&);
template bool archive_reader::next_chunk(chunk_info&, byte_buffer&);

}  // namespace dctchop::formats
