// Corruption sweep (issue 7): every single-byte flip and every truncation of a small archive
// either decodes to the same data as the original or is refused with a format error (corrupt,
// bad_input, unsupported_version); never a crash, never different data without an error.
// Both readers run: random access (a file) and streaming (a pipe, as for stdin).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../tests/fuzz/fuzz_util.hpp"
#include "byte_order.hpp"
#include "dctchop/formats/archive.hpp"
#include "test_util.hpp"

namespace dctchop {
namespace {

using formats::archive_reader;
using test::temp_dir;

/** What a reader returns for an archive: header facts, decoded samples, labels. */
struct decoded {
  std::string header;  // header_facts()
  std::vector<std::byte> samples;
  std::vector<std::byte> labels;
  bool operator==(const decoded&) const = default;
};

/** The header's description of the data. Not the provenance, and not the version: a reader
 *  accepts any minor version (ARCHIVE.md), and neither changes how the data decodes. */
std::string header_facts(const formats::archive_header& h) {
  nlohmann::json j = h.to_json();
  j.erase("provenance");
  j.erase("version");
  return j.dump();
}

void decode_into(const archive_reader& r, const std::vector<std::byte>& coeffs,
                 std::uint64_t count, decoded& d) {
  const auto& h = r.header();
  static const auto be = make_backend(backend_kind::cpu, {1});
  const std::uint64_t bps = h.geom.values_per_sample() * size_of(h.type);
  const std::size_t at = d.samples.size();
  d.samples.resize(at + count * bps);
  be->decode(h.codec, coeffs, make_view(h.geom, h.type, d.samples.data() + at, count));
}

decoded read_random(const std::string& path) {
  archive_reader r = archive_reader::open(path);
  decoded d;
  d.header = header_facts(r.header());
  std::vector<std::byte> coeffs;
  for (std::size_t i = 0; i < r.chunks().size(); ++i) {
    r.read_chunk(i, coeffs);
    decode_into(r, coeffs, r.chunks()[i].count, d);
  }
  if (auto l = r.read_side_array("labels")) d.labels = *l;
  return d;
}

decoded read_stream(const std::string& bytes) {
  fuzz::pipe_file p(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  if (!p.ok()) throw std::runtime_error("test: this system's pipes are too small for the archive");
  archive_reader r = archive_reader::open(p.path());
  decoded d;
  d.header = header_facts(r.header());
  formats::chunk_info c;
  std::vector<std::byte> coeffs;
  while (r.next_chunk(c, coeffs)) decode_into(r, coeffs, c.count, d);
  if (auto l = r.read_side_array("labels")) d.labels = *l;
  return d;
}

std::uint64_t u64_at(const std::string& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
void put_u64_at(std::string& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/** The archive `b` with its header JSON changed by `edit`, checksum and length rewritten (a
 *  writer's own archive, as far as any checksum can tell). The new header must still fit
 *  before data_offset. */
template <typename Edit>
std::string with_header_text(std::string b, Edit&& edit) {
  std::string text = b.substr(64, u64_at(b, 16));
  edit(text);
  if (64 + text.size() > u64_at(b, 32)) throw std::runtime_error("test: header too long");
  std::fill(b.begin() + 64, b.begin() + static_cast<long>(u64_at(b, 32)), '\0');
  b.replace(64, text.size(), text);
  put_u64_at(b, 16, text.size());
  put_u64_at(b, 24, XXH64(text.data(), text.size(), 0));
  return b;
}

/** with_header_text of the header as JSON. */
template <typename Edit>
std::string with_header(std::string b, Edit&& edit) {
  return with_header_text(std::move(b), [&](std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text);
    edit(j);
    text = j.dump();
  });
}

/** The archive `b` with its footer JSON changed by `edit`, the tail rewritten to match. */
template <typename Edit>
std::string with_footer_text(std::string b, Edit&& edit) {
  const std::size_t tail = b.size() - 64, at = u64_at(b, tail + 8);
  std::string text = b.substr(at, u64_at(b, tail + 16));
  edit(text);
  std::string t = b.substr(tail);
  put_u64_at(t, 16, text.size());
  put_u64_at(t, 24, XXH64(text.data(), text.size(), 0));
  return b.substr(0, at) + text + t;
}

/** with_footer_text of the footer as JSON. */
template <typename Edit>
std::string with_footer(std::string b, Edit&& edit) {
  return with_footer_text(std::move(b), [&](std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text);
    edit(j);
    text = j.dump();
  });
}

/** The archive `b` with chunk 0's record changed by `edit` (the 64 record bytes), its
 *  checksum recomputed over record and payload, and the footer's entry made to match. */
template <typename Edit>
std::string with_chunk0_record(std::string b, Edit&& edit) {
  const std::size_t rec = u64_at(b, 32);  // data_offset: chunk 0
  edit(&b[rec]);
  const std::uint64_t stored = u64_at(b, rec + 32);
  std::string hashed = b.substr(rec, 56) + b.substr(rec + 64, stored);
  const std::uint64_t h = XXH64(hashed.data(), hashed.size(), 0);
  put_u64_at(b, rec + 56, h);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  const std::uint32_t stages = static_cast<unsigned char>(b[rec + 48]);
  return with_footer(b, [&](nlohmann::json& j) {
    j["chunks"][0]["xxh64"] = hex;
    j["chunks"][0]["stages"] = stages;
  });
}

/** Outcomes of a sweep; `wrong` and `bad_error` must stay 0. */
struct tally {
  std::size_t cases = 0, identical = 0, refused = 0, wrong = 0, bad_error = 0;
  std::string problems;  // the first few
  void note(const std::string& what) {
    if (wrong + bad_error <= 8) problems += what + "\n";
  }
};

template <typename Read>
void judge(tally& t, const decoded& expect, const std::string& what, Read&& read) {
  ++t.cases;
  try {
    if (read() == expect) {
      ++t.identical;
    } else {
      ++t.wrong;
      t.note(what + ": different data returned without an error");
    }
  } catch (const error& e) {
    if (e.code() == errc::corrupt || e.code() == errc::bad_input ||
        e.code() == errc::unsupported_version) {
      ++t.refused;
    } else {
      ++t.bad_error;
      t.note(what + ": refused with " + to_string(e.code()) + ": " + e.what());
    }
  }
}

void report(const char* name, const tally& t) {
  std::printf("%s: %zu cases, %zu decode identically, %zu refused, %zu wrong, %zu other errors\n",
              name, t.cases, t.identical, t.refused, t.wrong, t.bad_error);
}

/** Whether a sanitizer build runs the sweeps (a case costs some 5 times as much there). */
#if defined(DCTCHOP_TEST_ASAN) || defined(DCTCHOP_TEST_TSAN)
constexpr bool k_sanitized = true;
#else
constexpr bool k_sanitized = false;
#endif

class CorruptionSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    // 3 samples of 16x16 in two chunks (2 + 1) and int32 labels: preamble, header, two chunk
    // records with payload and padding, a side array, the footer and the tail, 17 KiB in all.
    path_ = test::make_index_archive(dir_, 3, 2, true);
    bytes_ = test::read_bytes(path_);
    if (k_sanitized) padding_ = padding_of(bytes_);
    expect_ = read_random(path_);
    ASSERT_EQ(expect_, read_stream(bytes_)) << "the two readers disagree on the clean archive";
    ASSERT_EQ(expect_.samples.size(), 3u * 256);
    ASSERT_EQ(expect_.labels.size(), 3u * 4);
  }
  /** Whether a sweep takes byte (or length) i. All of them, except under a sanitizer, where a
   *  case costs some 5 times as much: there the inside of each run of 64 or more zero bytes
   *  (the padding that aligns chunks and the footer, which no reader reads), 8 bytes in from
   *  either end, is taken only at every 32nd byte. */
  bool swept(std::size_t i) const { return !k_sanitized || !padding_[i] || i % 32 == 0; }
  /** The inside of each run of 64 or more zero bytes of `b`, 8 bytes in from either end. */
  static std::vector<bool> padding_of(const std::string& b) {
    std::vector<bool> inside(b.size(), false);
    for (std::size_t a = 0; a < b.size();) {
      std::size_t e = a;
      while (e < b.size() && b[e] == '\0') ++e;
      if (e - a >= 64)
        std::fill(inside.begin() + static_cast<long>(a + 8),
                  inside.begin() + static_cast<long>(e - 8), true);
      a = e + 1;
    }
    return inside;
  }
  temp_dir dir_;
  std::string path_, bytes_;
  decoded expect_;
  std::vector<bool> padding_;  // padding_of(bytes_), under a sanitizer
};

/** A copy of the archive that a sweep changes in place, a byte (pwrite) or its length
 *  (ftruncate) at a time: rewriting 17 KiB for each of 100,000 cases was a third of the
 *  sweep's time, in the file system. */
class sweep_file {
 public:
  sweep_file(const std::string& path, const std::string& bytes) {
    test::write_bytes(path, bytes);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("test: cannot open " + path);
  }
  ~sweep_file() { ::close(fd_); }
  sweep_file(const sweep_file&) = delete;
  sweep_file& operator=(const sweep_file&) = delete;
  void put(std::size_t at, char c) {
    if (::pwrite(fd_, &c, 1, static_cast<off_t>(at)) != 1) throw std::runtime_error("test: pwrite");
  }
  void cut(std::size_t n) {
    if (::ftruncate(fd_, static_cast<off_t>(n)) != 0) throw std::runtime_error("test: ftruncate");
  }

 private:
  int fd_ = -1;
};

TEST_F(CorruptionSweep, EveryByteFlipIsRefusedOrDecodesIdentically) {
  tally file_t, stream_t;
  const std::string flipped = dir_.file("flipped.dcz");
  sweep_file file(flipped, bytes_);
  std::string b = bytes_;
  // Under ASan a case costs some 5 times as much (17 s for one flip a byte; 3 minutes before
  // the stream reader stopped zero-filling 1 MiB for each archive's tail): one flip of all
  // its bits a byte, and the padding sampled (swept).
  const std::vector<unsigned char> masks =
      k_sanitized ? std::vector<unsigned char>{0xff} : std::vector<unsigned char>{0x01, 0x80, 0xff};
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < bytes_.size(); ++i) {
    if (!swept(i)) continue;
    ++bytes;
    for (const unsigned char mask : masks) {
      b[i] = static_cast<char>(static_cast<unsigned char>(bytes_[i]) ^ mask);
      const std::string what = "byte " + std::to_string(i) + " ^ " + std::to_string(mask);
      file.put(i, b[i]);
      judge(file_t, expect_, what + " (file)", [&] { return read_random(flipped); });
      judge(stream_t, expect_, what + " (stream)", [&] { return read_stream(b); });
    }
    b[i] = bytes_[i];
    file.put(i, b[i]);
  }
  ASSERT_EQ(test::read_bytes(flipped), bytes_) << "the sweep put every byte back";
  report("byte flips, file", file_t);
  report("byte flips, stream", stream_t);
  for (const tally* t : {&file_t, &stream_t}) {
    EXPECT_EQ(t->wrong, 0u) << t->problems;
    EXPECT_EQ(t->bad_error, 0u) << t->problems;
    EXPECT_EQ(t->cases, masks.size() * bytes);
    // The sweep must reach both outcomes: the checksums refuse data bytes, padding decodes.
    EXPECT_GT(t->refused, masks.size() * bytes / 12);
    EXPECT_GT(t->identical, 0u);
  }
}

TEST_F(CorruptionSweep, EveryTruncationIsRefused) {
  tally file_t, stream_t;
  const std::string cut = dir_.file("cut.dcz");
  sweep_file file(cut, bytes_);
  std::size_t lengths = 0;
  for (std::size_t n = bytes_.size(); n-- > 0;) {  // shorter and shorter
    if (!swept(n)) continue;
    ++lengths;
    const std::string b = bytes_.substr(0, n);
    const std::string what = "first " + std::to_string(n) + " bytes";
    file.cut(n);
    judge(file_t, expect_, what + " (file)", [&] { return read_random(cut); });
    judge(stream_t, expect_, what + " (stream)", [&] { return read_stream(b); });
  }
  report("truncations, file", file_t);
  report("truncations, stream", stream_t);
  for (const tally* t : {&file_t, &stream_t}) {
    EXPECT_EQ(t->refused, lengths) << t->problems;
  }
}

TEST_F(CorruptionSweep, ExtraBytesAfterTheTailAreRefused) {
  // Appended data moves the tail: the file no longer ends with the index.
  const std::string longer = dir_.file("longer.dcz");
  test::write_bytes(longer, bytes_ + std::string(7, '\0'));
  tally t;
  judge(t, expect_, "7 zero bytes appended (file)", [&] { return read_random(longer); });
  judge(t, expect_, "7 zero bytes appended (stream)",
        [&] { return read_stream(bytes_ + std::string(7, '\0')); });
  EXPECT_EQ(t.refused, 2u) << t.problems;
}

TEST_F(CorruptionSweep, AFileWithBytesCutOutOfItsMiddleSaysTheIndexIsNotWhereTheTailPutsIt) {
  // 4 KiB cut out of chunk 1: the tail now points past the footer's place. The message was
  // "index position out of range", which said nothing of a truncated or damaged file.
  const std::string cut = bytes_.substr(0, 8192) + bytes_.substr(12288);
  const std::string path = dir_.file("cut.dcz");
  test::write_bytes(path, cut);
  test::expect_error([&] { read_random(path); }, errc::corrupt,
                     {"cut.dcz", "truncated or damaged: the tail puts the index at offset",
                      "which does not end where the tail begins (" +
                          std::to_string(cut.size() - 64) + ")"});
  // A stream reader meets the cut first, where chunk 1's record should be.
  test::expect_error([&] { read_stream(cut); }, errc::corrupt, {"chunk 1: bad record"});
}

TEST_F(CorruptionSweep, ATailWhoseCountsDisagreeWithTheIndexIsRefusedByBothReaders) {
  // The tail repeats the chunk count (+32) and the sample count (+40) and has no checksum of
  // its own: a flip there decodes identically in the sweep above, so each reader must compare
  // them with the index it parsed, or a damaged tail would pass unnoticed in one of them.
  const std::string bad = dir_.file("tail.dcz");
  for (const std::size_t field : {32u, 40u}) {
    std::string b = bytes_;
    const std::size_t at = b.size() - 64 + field;
    ASSERT_TRUE(b[at] == 2 || b[at] == 3) << "not the count expected at tail+" << field;
    b[at] = static_cast<char>(b[at] + 3);
    test::write_bytes(bad, b);
    for (bool stream : {false, true}) {
      test::expect_error([&] { stream ? read_stream(b) : read_random(bad); }, errc::corrupt,
                         {"tail disagrees with the index"});
    }
  }
}

TEST_F(CorruptionSweep, ArchivesThatBreakArchiveMdRulesBehindValidChecksumsAreRefused) {
  // Each case is consistent as far as every checksum goes; only a rule of ARCHIVE.md tells.
  struct bad_case {
    const char* what;
    std::string bytes;
    errc code;
    const char* text;
  };
  const std::vector<bad_case> cases = {
      // A member named twice: nlohmann and Python's json take the last, other readers the
      // first, so one reader would decode the archive as u16 and another as its own dtype.
      {"a header member named twice",
       with_header_text(bytes_, [](std::string& t) { t.insert(1, R"("dtype":"u16",)"); }),
       errc::corrupt, "header names member 'dtype' twice"},
      {"a nested header member named twice",
       with_header_text(bytes_, [](std::string& t) {
         const auto at = t.find(R"("codec":{)");
         ASSERT_NE(at, std::string::npos) << t;
         t.insert(at + 9, R"("offset":0,)");
       }),
       errc::corrupt, "header names member 'offset' twice"},
      {"a header after a byte-order mark",
       with_header_text(bytes_, [](std::string& t) { t.insert(0, "\xEF\xBB\xBF"); }),
       errc::corrupt, "header is not valid JSON"},
      {"a header with a NUL after it, within its length",
       with_header_text(bytes_, [](std::string& t) { t.push_back('\0'); }),
       errc::corrupt, "header is not valid JSON"},
      {"an index with a NUL after it, within its length",
       with_footer_text(bytes_, [](std::string& t) { t.push_back('\0'); }),
       errc::corrupt, "index is not valid JSON"},
      // Informative members nested past any use: copied and printed recursively, 120,000
      // levels (a header of 263 KB) overflowed the stack of every reader, a crash.
      {"a provenance nested 300 deep",
       with_header_text(bytes_,
                        [](std::string& t) {
                          t.insert(1, R"("provenance":{"source":)" + std::string(300, '[') +
                                          std::string(300, ']') + "},");
                        }),
       errc::corrupt, "header nests arrays and objects more than 256 deep"},
      {"an unknown index member nested 257 deep",
       with_footer_text(bytes_,
                        [](std::string& t) {
                          t.insert(1, R"("x":)" + std::string(256, '[') + std::string(256, ']') + ",");
                        }),
       errc::corrupt, "index nests arrays and objects more than 256 deep"},
      {"an index member named twice",
       with_footer_text(bytes_, [](std::string& t) { t.insert(1, R"("samples":3,)"); }),
       errc::corrupt, "index names member 'samples' twice"},
      {"input_bytes that is not a count",
       with_footer(bytes_, [](nlohmann::json& j) { j["input_bytes"] = "1"; }),
       errc::corrupt, "index: member input_bytes: expected an integer in range"},
      {"another transform",
       with_header(bytes_, [](nlohmann::json& j) { j["codec"]["transform"] = "dct4-lapped"; }),
       errc::unsupported_version, "codec transform \"dct4-lapped\" is not one this dctchop"},
      // The fixture's chunks hold 2 and 1 samples: samples_per_chunk 1 is a lie that would
      // let a chunk outgrow the buffers readers size by it.
      {"a chunk above samples_per_chunk",
       with_header(bytes_, [](nlohmann::json& j) { j["chunking"]["samples_per_chunk"] = 1; }),
       errc::corrupt, "chunk 0 holds 2 samples, more than the header's samples_per_chunk (1)"},
      {"big-endian labels",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"][0]["descr"] = ">i4"; }),
       errc::corrupt,
       "side array 'labels' is malformed: descr '>i4' is not spelled as ARCHIVE.md spells it "
       "('<', little-endian, for more)"},
      // (the reasons were "is malformed" alone)
      {"labels of a row too few",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"][0]["shape"][0] = 2; }),
       errc::corrupt,
       "side array 'labels' is malformed: its shape's first axis is 2, not the 3 samples"},
      {"labels of bytes their shape does not say",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"][0]["bytes"] = 15; }),
       errc::corrupt,
       "side array 'labels' is malformed: its bytes are 15, where its shape and type take 12"},
      // numpy reads 'int32' too, but ARCHIVE.md writes '<i4'
      {"a descr in numpy's other spelling",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"][0]["descr"] = "int32"; }),
       errc::corrupt, "side array 'labels' is malformed: descr 'int32' is not"},
      // A chunk of a later codec stage (zstd, say), consistent everywhere: never decoded as
      // dense coefficients.
      {"a chunk of a later stage",
       with_chunk0_record(bytes_, [](char* rec) { rec[48] = 1; }), errc::unsupported_version,
       "chunk 0 uses codec stages that this dctchop cannot decode; upgrade dctchop"},
      // A replacement the data's type cannot hold (f16: 65504 at most) would decode as Inf.
      {"a replacement beyond f16",
       with_header(bytes_,
                   [](nlohmann::json& j) {
                     j["dtype"] = "f16";
                     j["nonfinite"] = {{"replace", 9e4}};
                   }),
       errc::corrupt, "header nonfinite replacement 90000.0 does not fit the dtype f16"},
      // Its form is checked for every dtype (ARCHIVE.md), with a message of ours, not the
      // JSON library's type error.
      {"a replacement that is no number",
       with_header(bytes_, [](nlohmann::json& j) { j["nonfinite"] = {{"replace", "x"}}; }),
       errc::corrupt, "header member nonfinite is not an object whose 'replace' is a number"},
      {"a nonfinite member that is no object",
       with_header(bytes_, [](nlohmann::json& j) { j["nonfinite"] = 5; }), errc::corrupt,
       "header member nonfinite is not an object whose 'replace' is a number"},
      {"a replacement without its count",
       with_header(bytes_,
                   [](nlohmann::json& j) {
                     j["dtype"] = "f32";  // (of integer data, a replacement is left aside)
                     j["nonfinite"] = {{"replace", 0.0}};
                   }),
       errc::corrupt,
       "index: no nonfinite_replaced, which the index of an archive whose header has "
       "nonfinite holds (beside quality, not in it)"},
      // ARCHIVE.md places it beside quality: one in quality does not count for it.
      {"a replacement whose count is in quality",
       with_footer(with_header(bytes_,
                               [](nlohmann::json& j) {
                                 j["dtype"] = "f32";
                                 j["nonfinite"] = {{"replace", 0.0}};
                               }),
                   [](nlohmann::json& j) { j["quality"] = {{"nonfinite_replaced", 0}}; }),
       errc::corrupt, "index: no nonfinite_replaced"},
      {"a replacement count of null",
       with_footer(with_header(bytes_,
                               [](nlohmann::json& j) {
                                 j["dtype"] = "f32";
                                 j["nonfinite"] = {{"replace", 0.0}};
                               }),
                   [](nlohmann::json& j) { j["nonfinite_replaced"] = nullptr; }),
       errc::corrupt, "index: no nonfinite_replaced"},
      // JSON whose number no double holds: said so, not "not valid JSON".
      {"a header number past a double",
       with_header_text(bytes_,
                        [](std::string& t) { t.insert(1, R"("provenance":{"x":1e400},)"); }),
       errc::corrupt,
       "header holds a number past the range of a double (number overflow parsing '1e400')"},
      {"an index that is not JSON",
       with_footer_text(bytes_, [](std::string& t) { t.insert(1, "x"); }), errc::corrupt,
       "index is not valid JSON (parse error at line 1, column 2: syntax error"},
      // Readers size buffers by samples_per_chunk: a tiny archive claiming 2^20 made them
      // allocate gigabytes (and fail as "out of memory", naming no file).
      {"samples_per_chunk above the samples",
       with_header(bytes_, [](nlohmann::json& j) { j["chunking"]["samples_per_chunk"] = 1 << 20; }),
       errc::corrupt, "samples_per_chunk 1048576 is out of range (1..3 samples, the archive's)"},
      {"no version in the header",
       with_header(bytes_, [](nlohmann::json& j) { j.erase("version"); }), errc::corrupt,
       "key 'version' not found"},
      {"the header's alignment not the preamble's",
       with_header(bytes_, [](nlohmann::json& j) { j["chunking"]["alignment"] = 512; }),
       errc::corrupt, "header and preamble disagree on the alignment (512, 4096)"},
      // The command line takes "uint8" and "nhwc"; the spec's header spells "u8" and "NHW"
      {"a dtype in another spelling",
       with_header(bytes_, [](nlohmann::json& j) { j["dtype"] = "uint8"; }), errc::corrupt,
       "header names an unknown dtype, \"uint8\" (ARCHIVE.md spells i8, u8, "},
      // A member of another JSON type: named ("header: type must be string, but is number").
      {"a layout that is a number",
       with_header(bytes_, [](nlohmann::json& j) { j["layout"] = 5; }), errc::corrupt,
       "header member layout: type must be string, but is number"},
      {"a block that is text",
       with_header(bytes_, [](nlohmann::json& j) { j["codec"]["block"] = "8"; }), errc::corrupt,
       "header member codec.block: expected an integer in range"},
      {"a codec that is a list",
       with_header(bytes_, [](nlohmann::json& j) { j["codec"] = nlohmann::json::array(); }),
       errc::corrupt, "header member codec: not an object"},
      // A type no spelling of ours names is a newer writer's: upgrade, not corrupt.
      {"a dtype of a newer writer",
       with_header(bytes_, [](nlohmann::json& j) { j["dtype"] = "f8e4m3"; }),
       errc::unsupported_version,
       "header's dtype \"f8e4m3\" is not one this dctchop knows (i8, u8, i16, u16, i32, u32, f16, f32, "
       "f64); "
       "upgrade dctchop"},
      {"a coefficient type of a newer writer",
       with_header(bytes_, [](nlohmann::json& j) { j["codec"]["coeff"] = "u4"; }),
       errc::unsupported_version, "header's coefficient type \"u4\" is not one this dctchop knows"},
      {"a layout in lower case",
       with_header(bytes_, [](nlohmann::json& j) { j["layout"] = "nhw"; }), errc::corrupt,
       "header names an unknown layout, \"nhw\" (ARCHIVE.md spells HW, NHW, NHWC, NCHW)"},
      {"a coefficient type in another spelling",
       with_header(bytes_, [](nlohmann::json& j) { j["codec"]["coeff"] = "float16"; }),
       errc::corrupt,
       "header names an unknown coefficient type, \"float16\" (ARCHIVE.md spells f16, bf16, "},
      // Cut after 40 bytes, at a character's start: it showed as another name.
      {"a long name of a newer writer's dtype",
       with_header(bytes_,
                   [](nlohmann::json& j) {
                     std::string euros;
                     for (int i = 0; i < 15; ++i) euros += "\u20ac";
                     j["dtype"] = "xx" + euros;
                   }),
       errc::unsupported_version,
       "header's dtype \"xx\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac"
       "\u20ac\u20ac...\" is not one"},
      {"a four-byte descr marked as single-byte",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"][0]["descr"] = "|i4"; }),
       errc::corrupt, "side array 'labels' is malformed: descr '|i4' is not"},
      // verify checked arrays by name, so the second of two "labels" went unchecked
      {"two side arrays of one name",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"].push_back(j["side_arrays"][0]); }),
       errc::corrupt, "two side arrays named 'labels'"},
      {"the chunk list as an object",
       with_footer(bytes_,
                   [](nlohmann::json& j) {
                     nlohmann::json o = nlohmann::json::object();
                     for (std::size_t i = 0; i < j["chunks"].size(); ++i) o[std::to_string(i)] = j["chunks"][i];
                     j["chunks"] = o;
                   }),
       errc::corrupt, "index chunks are not a list"},
      // The entries are taken as the index is parsed (not kept as JSON): what is not one is
      // still refused.
      {"a chunk entry that is a number",
       with_footer(bytes_, [](nlohmann::json& j) { j["chunks"].push_back(5); }),
       errc::corrupt, "index chunks hold an entry that is not an object"},
      {"a chunk entry without its checksum",
       with_footer(bytes_, [](nlohmann::json& j) { j["chunks"][1].erase("xxh64"); }),
       errc::corrupt, "index: member chunks[1].xxh64: key 'xxh64' not found"},
      {"a chunk entry whose count is text",
       with_footer(bytes_, [](nlohmann::json& j) { j["chunks"][0]["count"] = "2"; }),
       errc::corrupt, "index: member chunks[0].count: expected an integer in range"},
      {"a side array entry whose checksum is null",
       with_footer(bytes_, [](nlohmann::json& j) { j["side_arrays"][0]["xxh64"] = nullptr; }),
       errc::corrupt, "index: member side_arrays[0].xxh64: type must be string, but is null"},
      // Where the stream reader finds the side array: at an aligned offset after the chunks.
      {"a side array off its alignment",
       with_footer(bytes_,
                   [](nlohmann::json& j) {
                     j["side_arrays"][0]["offset"] = j["side_arrays"][0]["offset"].get<std::uint64_t>() + 8;
                   }),
       errc::corrupt, "side array 'labels' is at offset"},
  };
  const std::string path = dir_.file("rule.dcz");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    test::write_bytes(path, c.bytes);
    test::expect_error([&] { read_random(path); }, c.code, {"rule.dcz", c.text});
    test::expect_error([&] { read_stream(c.bytes); }, c.code, {c.text});
  }
  // At the limit, 256 deep in all, an unknown member is taken and ignored, by both readers.
  {
    const auto nested = [](std::string& t) {
      t.insert(1, R"("x":)" + std::string(255, '[') + std::string(255, ']') + ",");
    };
    const std::string deep = with_footer_text(with_header_text(bytes_, nested), nested);
    test::write_bytes(path, deep);
    EXPECT_NO_THROW(read_random(path));
    EXPECT_NO_THROW(read_stream(deep));
  }
  // A later stage's chunk that is larger than dense coefficients (its record says 3x): the
  // stream reader hashes it in pieces to tell it from damage, as it does one of any size, and
  // both readers call it a later stage (the file's at open, from the index).
  {
    const std::string big = with_chunk0_record(bytes_, [](char* rec) {
      rec[48] = 1;
      auto* r = reinterpret_cast<unsigned char*>(rec);
      formats::detail::put_u64(r + 32, 3 * formats::detail::get_u64(r + 32));
    });
    test::write_bytes(path, big);
    test::expect_error([&] { read_random(path); }, errc::unsupported_version, {"chunk 0 uses codec stages"});
    test::expect_error([&] { read_stream(big); }, errc::unsupported_version, {"chunk 0 uses codec stages"});
  }
  // A header that claims one sample of 16 GiB of coefficients, and a chunk record that agrees,
  // in a stream of 17 KiB: the stream reader grows its buffer as bytes come and finds the
  // stream cut short, rather than allocate (and zero) 16 GiB first.
  {
    const std::uint64_t side = 65536, cbps = side * side * 4;
    std::string huge = with_header(bytes_, [&](nlohmann::json& j) {
      j["shape"] = {3, side, side};
      j["height"] = side;
      j["width"] = side;
      j["codec"]["coeff"] = "f32";
      j["codec"]["chop"] = 8;
      j["codec"]["coeff_plane"] = {side, side};
      j["codec"]["coeff_bytes_per_sample"] = cbps;
      j["chunking"]["samples_per_chunk"] = 1;
    });
    huge = with_chunk0_record(huge, [&](char* rec) {
      auto* r = reinterpret_cast<unsigned char*>(rec);
      formats::detail::put_u64(r + 24, 1);
      formats::detail::put_u64(r + 32, cbps);
      formats::detail::put_u64(r + 40, cbps);
    });
    test::expect_error([&] { read_stream(huge); }, errc::corrupt, {"truncated"});
  }
  // Chunks that are not where the writer puts them (back to back from the data offset): the
  // index's first two offsets swapped, so each record still lies whole in the file.
  {
    const std::string swapped = with_footer(bytes_, [](nlohmann::json& j) {
      auto& c = j["chunks"];
      std::swap(c[0]["offset"], c[1]["offset"]);
    });
    test::write_bytes(path, swapped);
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"rule.dcz", "chunk 0 is at offset", "not at 4096 (the data offset)"});
    test::expect_error([&] { read_stream(swapped); }, errc::corrupt,
                       {"index disagrees with chunk 0: its offset is 4096, the index's "});
  }
  // An index entry at odds with the ones before it says how; a side array entry that is no
  // object says so (not the JSON library's "cannot use at() with null").
  for (const auto& [edit, text] :
       std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& j) { j["chunks"][1]["first"] = 3; },
            "index entry 1 is inconsistent: its first sample is 3, where the one before ends at 2"},
           {[](nlohmann::json& j) { j["chunks"][1]["raw_bytes"] = 99; },
            "index entry 1 is inconsistent: its raw size 99 is not 128 (1 sample)"},
           {[](nlohmann::json& j) { j["chunks"][1]["stored_bytes"] = 129; },
            "index entry 1 is inconsistent: its stored size 129 is not its raw size 128 (it "
            "uses no codec stage)"},
           {[](nlohmann::json& j) { j["side_arrays"][0] = nullptr; },
            "index side_arrays hold an entry that is not an object"}}) {
    test::write_bytes(path, with_footer(bytes_, edit));
    test::expect_error([&] { read_random(path); }, errc::corrupt, {"rule.dcz", text});
  }
  // The footer moved 8 bytes on (off its alignment), the tail updated to match.
  {
    std::string moved = bytes_;
    const std::size_t tail = moved.size() - 64, at = u64_at(moved, tail + 8);
    moved.insert(at, 8, '\0');
    put_u64_at(moved, moved.size() - 64 + 8, at + 8);
    test::write_bytes(path, moved);
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"rule.dcz", "the index is at offset", "(where the data ends, aligned)"});
    test::expect_error([&] { read_stream(moved); }, errc::corrupt,
                       {"the index is at offset", "(where the data ends, aligned)"});
  }
  // A gap of one alignment (4 KiB of 0xAB, which no checksum reads) before the footer, and
  // one before the side array: each stayed aligned, and both readers took them.
  {
    const std::size_t tail = bytes_.size() - 64, at = u64_at(bytes_, tail + 8);
    std::string gap = bytes_;
    gap.insert(at, 4096, '\xAB');
    put_u64_at(gap, gap.size() - 64 + 8, at + 4096);
    test::write_bytes(path, gap);
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"rule.dcz", "the index is at offset " + std::to_string(at + 4096),
                        "not at " + std::to_string(at)});
    test::expect_error([&] { read_stream(gap); }, errc::corrupt,
                       {"the index is at offset " + std::to_string(at + 4096)});
    const nlohmann::json f = nlohmann::json::parse(bytes_.substr(at, u64_at(bytes_, tail + 16)));
    const std::size_t side = f["side_arrays"][0]["offset"].get<std::uint64_t>();
    std::string before = bytes_;
    before.insert(side, 4096, '\xAB');
    put_u64_at(before, before.size() - 64 + 8, at + 4096);
    before = with_footer(before, [](nlohmann::json& j) {
      j["side_arrays"][0]["offset"] = j["side_arrays"][0]["offset"].get<std::uint64_t>() + 4096;
    });
    test::write_bytes(path, before);
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"rule.dcz", "side array 'labels' is at offset " + std::to_string(side + 4096),
                        "not at " + std::to_string(side)});
    test::expect_error([&] { read_stream(before); }, errc::corrupt,
                       {"side array 'labels' is at offset " + std::to_string(side + 4096)});
  }
  // Preamble fields out of range say which (the same line for each, before): header_bytes
  // at +16, data_offset at +32, alignment at +40.
  {
    struct field_case {
      std::size_t at;
      std::uint64_t value;
      std::string text;
    };
    const std::uint64_t header_end = 64 + u64_at(bytes_, 16);
    for (const auto& f : std::vector<field_case>{
             {16, 0, "header_bytes 0 is not 1.."},
             {40, 3, "alignment 3 is not a power of two"},
             {32, 64,
              "data_offset 64 is inside the header, which ends at " + std::to_string(header_end)},
             {32, 4095, "data_offset 4095 is not a multiple of the alignment (4096)"}}) {
      std::string b = bytes_;
      if (f.at == 40) {
        for (int i = 0; i < 4; ++i) b[40 + i] = static_cast<char>((f.value >> (8 * i)) & 0xff);
      } else {
        put_u64_at(b, f.at, f.value);
      }
      test::write_bytes(path, b);
      const std::string text = "preamble fields out of range: " + f.text;
      test::expect_error([&] { read_random(path); }, errc::corrupt, {"rule.dcz", text});
      test::expect_error([&] { read_stream(b); }, errc::corrupt, {text});
    }
    // A data_offset an alignment unit or more past the header's end, aligned: bytes there
    // would be read by no checksum (ARCHIVE.md: no gap anywhere), from a file and a stream
    // alike; far past (one flipped bit), the same: the preamble is checked first.
    const std::uint64_t first = (header_end + 4095) / 4096 * 4096;
    for (const std::uint64_t at : {first + 4096, std::uint64_t(1) << 20}) {
      std::string b = bytes_;
      put_u64_at(b, 32, at);
      test::write_bytes(path, b);
      const std::string text = "preamble fields out of range: data_offset " + std::to_string(at) +
                               " is past " + std::to_string(first) + ", where the header ends";
      test::expect_error([&] { read_random(path); }, errc::corrupt, {"rule.dcz", text});
      test::expect_error([&] { read_stream(b); }, errc::corrupt, {text});
    }
  }
  // Cut inside the magic: truncated (exit 4), not "not an archive" (exit 3).
  for (std::size_t n = 1; n < 8; ++n) {
    test::write_bytes(path, bytes_.substr(0, n));
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"rule.dcz", "truncated inside the preamble (" + std::to_string(n) +
                                        (n == 1 ? " byte)" : " bytes)")});
    test::expect_error([&] { read_stream(bytes_.substr(0, n)); }, errc::corrupt,
                       {"truncated inside the preamble"});
  }
  // Cut anywhere in a stream past the header (its padding, a chunk's record, a chunk): said
  // as every cut of a file is, "corrupt archive: truncated ..." (a stream's said "<stdin>:
  // truncated: end of file inside a chunk").
  for (std::size_t n = 64 + u64_at(bytes_, 16); n < bytes_.size(); n += 997) {
    test::expect_error([&] { read_stream(bytes_.substr(0, n)); }, errc::corrupt,
                       {"corrupt archive: truncated"});
  }
  // Cut inside the header: said as every other cut is, "corrupt archive: truncated ...".
  for (const std::size_t n : {std::size_t(64), std::size_t(65),
                             static_cast<std::size_t>(64 + u64_at(bytes_, 16) - 1)}) {
    test::write_bytes(path, bytes_.substr(0, n));
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"rule.dcz: corrupt archive: truncated inside the header"});
    test::expect_error([&] { read_stream(bytes_.substr(0, n)); }, errc::corrupt,
                       {"corrupt archive: truncated inside the header"});
  }
  // The stages field damaged (the checksum no longer matches): corrupt, not a later stage,
  // from a file (the index disagrees) and from a stream (the checksum says so) alike.
  {
    std::string damaged = bytes_;
    damaged[u64_at(damaged, 32) + 48] = 1;
    test::write_bytes(path, damaged);
    test::expect_error([&] { read_random(path); }, errc::corrupt, {"rule.dcz", "chunk 0"});
    test::expect_error([&] { read_stream(damaged); }, errc::corrupt, {"chunk 0: checksum mismatch"});
  }
  // A chunk record that disagrees with where a stream is says which field does.
  for (const auto& [at, value, text] : std::vector<std::tuple<int, std::uint64_t, std::string>>{
           {8, 5, "its index is 5"},
           {16, 1, "its first sample is 1, not 0"},
           {24, 7, "its 7 samples are not 1..3, the samples left"},
           {40, 100, "its raw size 100 is not 256 (2 samples)"},
           {32, 100, "its stored size 100 is not its raw size 256 (it uses no codec stage)"}}) {
    const std::string b = with_chunk0_record(bytes_, [&](char* rec) {
      for (int i = 0; i < 8; ++i) rec[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
    });
    test::expect_error([&] { read_stream(b); }, errc::corrupt, {"chunk 0: bad record: " + text});
  }
  // From a file, the record is compared with the index, field by field: which one differs.
  for (const auto& [at, text] : std::vector<std::pair<int, std::string>>{
           {8, "its index is 5, the index's 0"},
           {48, "its stages is 5, the index's 0"}}) {
    std::string b = bytes_;  // (the record alone: the index keeps its own)
    b[u64_at(b, 32) + at] = 5;
    test::write_bytes(path, b);
    test::expect_error([&] { read_random(path); }, errc::corrupt,
                       {"chunk 0 (samples 0..1): record disagrees with the index: " + text});
  }
  // The rewriting itself keeps an archive readable: the same edits, undone, decode alike.
  const std::string same = with_footer(
      with_header(bytes_, [](nlohmann::json& j) { j["codec"]["transform"] = "dct2-orthonormal-blockwise"; }),
      [](nlohmann::json& j) { j["side_arrays"][0]["descr"] = "<i4"; });
  test::write_bytes(path, same);
  EXPECT_EQ(read_random(path), expect_);
  EXPECT_EQ(read_stream(same), expect_);
}

TEST_F(CorruptionSweep, AHeaderWhoseSizesWouldWrapAround2To64IsRefused) {
  // 2^39 samples of 4096x4096 (8 MiB of coefficients each): samples x bytes per sample
  // passes 2^62, so sizes computed from it could wrap. A writer never makes such a header.
  nlohmann::json j = archive_reader::open(path_).header().to_json();
  const std::uint64_t n = std::uint64_t(1) << 39;
  j["shape"] = {n, 4096, 4096};
  j["samples"] = n;
  j["planes"] = 1;
  j["height"] = 4096;
  j["width"] = 4096;
  j["codec"]["coeff_plane"] = {2048, 2048};
  j["codec"]["coeff_bytes_per_sample"] = 2048 * 2048 * 2;
  test::expect_error([&] { formats::parse_archive_header(j.dump(), "big.dcz"); }, errc::corrupt,
                     {"big.dcz", "more data than any file holds"});
  // The same header with 2^20 samples is fine.
  j["shape"][0] = 1 << 20;
  j["samples"] = 1 << 20;
  EXPECT_EQ(formats::parse_archive_header(j.dump(), "big.dcz").geom.samples, 1u << 20);
}

TEST_F(CorruptionSweep, ANonfiniteReplacementOfIntegerDataIsLeftAsideAndOfFloatDataChecked) {
  // Integer data holds no NaN or Inf, so dctchop writes no replacement for it: one from
  // another writer is left aside (it made decompress say "compressed as 1e+300" of u8 data).
  nlohmann::json j = archive_reader::open(path_).header().to_json();
  j["nonfinite"] = {{"replace", 1e300}};
  EXPECT_FALSE(formats::parse_archive_header(j.dump(), "u8.dcz").nonfinite_replacement);
  // Of float data it is kept, within the type's finite values (f32: FLT_MAX).
  j["dtype"] = "f32";
  test::expect_error([&] { formats::parse_archive_header(j.dump(), "f.dcz"); }, errc::corrupt,
                     {"f.dcz", "nonfinite replacement 1e+300 does not fit the dtype f32"});
  j["nonfinite"]["replace"] = -2.5;
  EXPECT_EQ(formats::parse_archive_header(j.dump(), "f.dcz").nonfinite_replacement, -2.5);
}

TEST_F(CorruptionSweep, AChunkOfSeveralSamplesAboveAGibibyteDecodedIsRefused) {
  // 2^23 samples of 16x16 u8 in one chunk: its coefficients are within 16 GiB, but readers
  // (the loader, decompress) would decode 2 GiB for a batch of one. A writer makes at most
  // 64 MiB; 2^22 samples a chunk (1 GiB) is allowed, and so is one huge sample a chunk.
  nlohmann::json j = archive_reader::open(path_).header().to_json();
  const std::uint64_t n = std::uint64_t(1) << 23;
  j["shape"][0] = n;
  j["samples"] = n;
  j["chunking"]["samples_per_chunk"] = n;
  test::expect_error([&] { formats::parse_archive_header(j.dump(), "big.dcz"); }, errc::corrupt,
                     {"big.dcz",
                      "samples_per_chunk 8388608 is too many: a chunk of that many samples would "
                      "hold 1 GiB of coefficients and 2 GiB decoded, and a chunk of several "
                      "samples holds at most 16 GiB of coefficients and 1 GiB decoded"});
  j["chunking"]["samples_per_chunk"] = n / 2;
  EXPECT_EQ(formats::parse_archive_header(j.dump(), "big.dcz").samples_per_chunk, n / 2);
  // One sample past it: 256 bytes past the limit, said with the digits that show it past.
  j["chunking"]["samples_per_chunk"] = n / 2 + 1;
  test::expect_error([&] { formats::parse_archive_header(j.dump(), "big.dcz"); }, errc::corrupt,
                     {"big.dcz", "would hold 0.5 GiB of coefficients and 1.0000002 GiB decoded"});
}

TEST_F(CorruptionSweep, AnOptionalMemberGivenAsNullIsReadAsAbsent) {
  // ARCHIVE.md: an optional member given as null is absent (compress --json prints
  // "quality": null where it measured none; another writer may copy that).
  const std::string b = with_footer(
      with_header(bytes_, [](nlohmann::json& j) {
        j["nonfinite"] = nullptr;
        j["chunking"]["side_bytes"] = nullptr;
        j["provenance"] = nullptr;
      }),
      [](nlohmann::json& j) {
        j["quality"] = nullptr;
        j["input_bytes"] = nullptr;
      });
  const std::string path = dir_.file("null.dcz");
  test::write_bytes(path, b);
  for (const decoded& d : {read_random(path), read_stream(b)}) {
    EXPECT_EQ(d.samples, expect_.samples);
    EXPECT_EQ(d.labels, expect_.labels);
  }
  const auto r = archive_reader::open(path);
  EXPECT_FALSE(r.header().nonfinite_replacement);
  EXPECT_EQ(r.header().side_bytes, 0u);
  EXPECT_FALSE(r.footer().contains("quality"));
  EXPECT_FALSE(r.footer().contains("input_bytes"));
  // A required member as null is not absent but wrong.
  test::write_bytes(path, with_footer(bytes_, [](nlohmann::json& j) { j["samples"] = nullptr; }));
  test::expect_error([&] { read_random(path); }, errc::corrupt,
                     {"null.dcz",
                      "index: member samples: expected an integer in range, found null"});
}

TEST_F(CorruptionSweep, AStreamThatEndsAfterAHeaderClaimingATerabyteFailsAtOnceIntoHdf5) {
  // The header (2^32 samples of 16x16 u8: 1 TiB decoded), then nothing: decompress to HDF5
  // makes its dataset (its place in the file allocated at creation, found with one lookup:
  // a chunked dataset's million chunk lookups took HDF5 1.10 hours), then finds the stream
  // cut short (corrupt) and leaves no file.
  const std::string big = with_header(bytes_, [](nlohmann::json& j) {
    const std::uint64_t n = std::uint64_t(1) << 32;
    j["shape"][0] = n;
    j["samples"] = n;
  });
  auto be = make_backend(backend_kind::cpu, {1});
  temp_dir out;
  test::stdin_pipe in(big.substr(0, u64_at(big, 32)));
  test::expect_error(
      [&] { formats::decompress("-", formats::parse_dataset_spec(out.file("o.h5")), *be, {}); },
      errc::corrupt, {"truncated"});
  EXPECT_TRUE(out.entries().empty());
}

}  // namespace
}  // namespace dctchop
