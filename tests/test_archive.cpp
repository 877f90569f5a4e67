// Tests of the .dcz archive (formats/ARCHIVE.md) through archive_writer / archive_reader, and of
// the whole-file pipeline (compress_npy / decompress_to_npy) on generated .npy files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/file_io.hpp"
#include "dctchop/formats/npy.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/loader.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using namespace dctchop::formats;
using dctchop::test::expect_error;
using dctchop::test::flip_byte;
using dctchop::test::load_npy;
using dctchop::test::read_bytes;
using dctchop::test::save_npy;
using dctchop::test::stdin_pipe;
using dctchop::test::temp_dir;
using dctchop::test::write_bytes;
using u64 = std::uint64_t;

std::uint64_t get_u64(const std::string& b, std::size_t at) {
  std::uint64_t v = 0;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

/** A header that differs from every default: u16 NHWC 10x8x12x2, block 4, chop 3, bf16 with a
 *  non-default offset, 3 samples per chunk, and a provenance object. */
archive_header test_header() {
  archive_header h;
  h.type = dtype::u16;
  const std::vector<u64> shape{10, 8, 12, 2};
  h.geom = resolve_layout(shape, layout::nhwc);
  h.codec.block = 4;
  h.codec.chop = 3;
  h.codec.coeff = coeff_type::bf16;
  h.codec.offset = 1234.5;
  h.samples_per_chunk = 3;
  h.provenance = {{"tool", "dctchop test"}, {"source", "synthetic"}, {"source_bytes", 3840}};
  return h;
}

/** Coefficient bytes of every sample: a pattern that differs per sample and per byte. */
std::vector<std::byte> pattern_bytes(u64 samples, u64 per_sample) {
  std::vector<std::byte> v(samples * per_sample);
  for (u64 s = 0; s < samples; ++s)
    for (u64 i = 0; i < per_sample; ++i)
      v[s * per_sample + i] = static_cast<std::byte>((s * 131 + i * 7 + 1) & 0xff);
  return v;
}

std::vector<std::byte> labels_bytes(u64 n) {
  std::vector<std::int64_t> l(n);
  for (u64 i = 0; i < n; ++i) l[i] = (static_cast<std::int64_t>(i) - 5) * 1000000007000LL;
  std::vector<std::byte> b(n * 8);
  std::memcpy(b.data(), l.data(), b.size());
  return b;
}

/** Writes test_header() with chunks of 3, 3, 3, 1 samples (and labels when asked, one per
 *  sample unless `label_rows` says otherwise); returns the coefficient bytes written. */
std::vector<std::byte> write_test_archive(const std::string& path, bool with_labels,
                                          u64 label_rows = 0) {
  const archive_header h = test_header();
  const u64 cbps = h.coeff_bytes_per_sample();
  const u64 n = h.geom.samples;
  auto coeffs = pattern_bytes(n, cbps);
  archive_writer w(output_file::create(path, false), h);
  for (u64 first = 0; first < n; first += h.samples_per_chunk) {
    const u64 count = std::min(h.samples_per_chunk, n - first);
    w.write_chunk(first, count, std::span<const std::byte>(coeffs).subspan(first * cbps, count * cbps));
  }
  if (label_rows == 0) label_rows = n;
  if (with_labels) w.write_side_array("labels", "<i8", {label_rows}, labels_bytes(label_rows));
  w.set_footer_extra({{"input_bytes", n * h.geom.values_per_sample() * 2}});
  w.finish();
  return coeffs;
}

/** The chunks of every sample of `h` (pattern_bytes), in chunks of its samples_per_chunk. */
void write_every_chunk(archive_writer& w, const archive_header& h) {
  const u64 cbps = h.coeff_bytes_per_sample(), n = h.geom.samples;
  const auto coeffs = pattern_bytes(n, cbps);
  for (u64 first = 0; first < n; first += h.samples_per_chunk) {
    const u64 count = std::min(h.samples_per_chunk, n - first);
    w.write_chunk(first, count, std::span(coeffs).subspan(first * cbps, count * cbps));
  }
}

std::vector<std::byte> slice(const std::vector<std::byte>& v, u64 from, u64 n) {
  return std::vector<std::byte>(v.begin() + static_cast<long>(from),
                                v.begin() + static_cast<long>(from + n));
}

// ================================================================ archive reader and writer

TEST(Archive, CoefficientPlaneSizeOfTheTestHeaderIsAsTheSpecSays) {
  // 8x12 planes at B=4, K=3: a 6x9 coefficient plane, 2 planes, 2 bytes (bf16) each.
  EXPECT_EQ(test_header().coeff_bytes_per_sample(), 2u * 6 * 9 * 2);
}

TEST(Archive, RoundTripReturnsEveryChunksBytesAndKeepsHeaderFields) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  const auto written = write_test_archive(path, false);
  const archive_header want = test_header();
  const u64 cbps = want.coeff_bytes_per_sample();

  auto r = archive_reader::open(path);
  EXPECT_TRUE(r.random_access());
  EXPECT_EQ(r.file_bytes(), std::filesystem::file_size(path));
  const auto& h = r.header();
  EXPECT_EQ(h.major, 1);
  EXPECT_EQ(h.minor, 0);
  EXPECT_EQ(h.type, dtype::u16);
  EXPECT_EQ(h.geom.lay, layout::nhwc);
  EXPECT_EQ(h.geom.samples, 10u);
  EXPECT_EQ(h.geom.planes, 2u);
  EXPECT_EQ(h.geom.height, 8u);
  EXPECT_EQ(h.geom.width, 12u);
  EXPECT_EQ(h.geom.shape(), (std::vector<u64>{10, 8, 12, 2}));
  EXPECT_EQ(h.codec.block, 4);
  EXPECT_EQ(h.codec.chop, 3);
  EXPECT_EQ(h.codec.coeff, coeff_type::bf16);
  EXPECT_EQ(h.codec.offset, 1234.5);
  EXPECT_EQ(h.samples_per_chunk, 3u);
  EXPECT_EQ(h.alignment, 4096u);
  EXPECT_EQ(h.provenance, want.provenance);
  EXPECT_EQ(r.footer().at("input_bytes").get<u64>(), 10u * 8 * 12 * 2 * 2);

  ASSERT_EQ(r.chunks().size(), 4u);
  const u64 counts[] = {3, 3, 3, 1};
  u64 first = 0;
  std::vector<std::byte> got;
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& c = r.chunks()[i];
    EXPECT_EQ(c.index, i);
    EXPECT_EQ(c.first, first);
    EXPECT_EQ(c.count, counts[i]);
    EXPECT_EQ(c.raw_bytes, counts[i] * cbps);
    EXPECT_EQ(c.stored_bytes, c.raw_bytes);
    EXPECT_EQ(c.stages, 0u);
    r.read_chunk(i, got);
    EXPECT_EQ(got, slice(written, first * cbps, counts[i] * cbps)) << "chunk " << i;
    first += counts[i];
  }

  // Sequential access over a file gives the same chunks in order, then false.
  auto s = archive_reader::open(path);
  chunk_info ci;
  std::vector<std::byte> all;
  std::size_t n = 0;
  while (s.next_chunk(ci, got)) {
    EXPECT_EQ(ci.index, n++);
    all.insert(all.end(), got.begin(), got.end());
  }
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(all, written);
}

TEST(Archive, ReadSamplesOfAnyRangeAcrossChunkBoundariesEqualsWrittenBytes) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  const auto written = write_test_archive(path, false);
  auto r = archive_reader::open(path);
  const u64 cbps = r.header().coeff_bytes_per_sample();
  for (u64 first = 0; first < 10; ++first) {
    for (u64 count = 1; first + count <= 10; ++count) {
      std::vector<std::byte> got(count * cbps, std::byte{0xEE});
      r.read_samples(first, count, got);
      ASSERT_EQ(got, slice(written, first * cbps, count * cbps))
          << "samples " << first << ".." << first + count - 1;
    }
  }
  // chunk_of: chunks hold 0-2, 3-5, 6-8, 9.
  const std::size_t expect_chunk[] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3};
  for (u64 s = 0; s < 10; ++s) EXPECT_EQ(r.chunk_of(s), expect_chunk[s]) << "sample " << s;
  expect_error([&] { (void)r.chunk_of(10); }, errc::invalid_argument);
  std::vector<std::byte> buf(2 * cbps);
  expect_error([&] { r.read_samples(9, 2, buf); }, errc::invalid_argument, {"out of range"});
}

TEST(Archive, ChunksStartOn4096ByteBoundariesAndFileEndsWithTailMagic) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, true);
  const std::string b = read_bytes(path);
  ASSERT_GE(b.size(), 64u * 2);
  EXPECT_EQ(b.substr(0, 8), std::string("\x89" "DCZ\r\n\x1a\n", 8));
  EXPECT_EQ(get_u64(b, 32) % 4096, 0u) << "data_offset";
  auto r = archive_reader::open(path);
  ASSERT_EQ(r.chunks().size(), 4u);
  EXPECT_EQ(r.chunks()[0].offset, get_u64(b, 32)) << "chunk 0 starts at data_offset";
  for (const auto& c : r.chunks()) {
    EXPECT_EQ(c.offset % 4096, 0u) << "chunk " << c.index << " at " << c.offset;
    EXPECT_EQ(b.substr(c.offset, 8), "DCZCHUNK") << "chunk " << c.index;
  }
  ASSERT_EQ(r.side_arrays().size(), 1u);
  EXPECT_EQ(r.side_arrays()[0].offset % 4096, 0u);
  EXPECT_EQ(b.substr(b.size() - 8), "DCZ-END.");
  EXPECT_EQ(b.substr(b.size() - 64, 8), "DCZINDEX");
}

TEST(Archive, FlippedPayloadByteIsCorruptWhenThatChunkIsReadAndNamesIt) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  u64 off1 = 0;
  {
    auto r = archive_reader::open(path);
    off1 = r.chunks()[1].offset;
  }
  flip_byte(path, off1 + 64 + 5);
  auto r = archive_reader::open(path);  // the index is intact: open succeeds
  std::vector<std::byte> got;
  r.read_chunk(0, got);                 // other chunks still read
  r.read_chunk(2, got);
  expect_error([&] { r.read_chunk(1, got); }, errc::corrupt, {"chunk 1", path});
  std::vector<std::byte> buf(3 * r.header().coeff_bytes_per_sample());
  expect_error([&] { r.read_samples(2, 3, buf); }, errc::corrupt, {"chunk 1"});
  // Samples read alone once their chunk was checked whole: never those of a chunk that failed.
  r.read_samples(0, 1, buf);  // chunk 0, checked above
  for (u64 s : {3u, 4u, 5u, 4u}) {
    expect_error([&] { r.read_samples(s, 1, buf); }, errc::corrupt, {"chunk 1"});
  }
}

TEST(Archive, FlippedChunkRecordByteIsCorruptWhenThatChunkIsRead) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  u64 off2 = 0;
  {
    auto r = archive_reader::open(path);
    off2 = r.chunks()[2].offset;
  }
  flip_byte(path, off2 + 16);  // "first sample" field of chunk 2's record
  auto r = archive_reader::open(path);
  std::vector<std::byte> got;
  expect_error([&] { r.read_chunk(2, got); }, errc::corrupt, {"chunk 2"});
}

TEST(Archive, FlippedHeaderJsonByteIsCorruptAtOpen) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  flip_byte(path, 64 + 20, 0x01);
  expect_error([&] { (void)archive_reader::open(path); }, errc::corrupt, {path, "header"});
}

TEST(Archive, FlippedFooterJsonByteIsCorruptAtOpen) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  const std::string b = read_bytes(path);
  const u64 footer_offset = get_u64(b, b.size() - 64 + 8);
  flip_byte(path, footer_offset + 10, 0x01);
  expect_error([&] { (void)archive_reader::open(path); }, errc::corrupt, {path});
}

TEST(Archive, BadMagicTextFileAndEmptyFileAreBadInput) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  flip_byte(path, 1, 0x20);  // 'D' -> 'd'
  expect_error([&] { (void)archive_reader::open(path); }, errc::bad_input,
               {path, "not a dctchop archive"});
  const std::string text = dir.file("t.txt");
  write_bytes(text, "hello, this is not an archive at all\n");
  expect_error([&] { (void)archive_reader::open(text); }, errc::bad_input, {text});
  const std::string empty = dir.file("empty.dcz");
  write_bytes(empty, "");
  expect_error([&] { (void)archive_reader::open(empty); }, errc::bad_input, {empty});
}

TEST(Archive, MajorVersion2IsUnsupportedAndNamesBothVersions) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  std::string b = read_bytes(path);
  b[8] = 2;  // major, little-endian u16 at bytes 8..9
  b[9] = 0;
  write_bytes(path, b);
  expect_error([&] { (void)archive_reader::open(path); }, errc::unsupported_version,
               {path, "2.0", "1."});
}

TEST(Archive, NewerMinorVersionIsAccepted) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  const auto written = write_test_archive(path, false);
  std::string b = read_bytes(path);
  b[10] = 7;  // minor
  write_bytes(path, b);
  auto r = archive_reader::open(path);
  EXPECT_EQ(r.header().major, 1);
  EXPECT_EQ(r.header().minor, 7);
  std::vector<std::byte> all(written.size());
  r.read_samples(0, 10, all);
  EXPECT_EQ(all, written);
}

TEST(Archive, TruncatedArchiveIsRefusedAtOpenAtEveryCutPoint) {
  temp_dir dir;
  const std::string full = dir.file("full.dcz");
  write_test_archive(full, true);
  const std::string b = read_bytes(full);
  const u64 header_bytes = get_u64(b, 16), data_offset = get_u64(b, 32);
  std::vector<u64> cuts = {0, 4, 8, 40, 63, 64, 64 + header_bytes / 2, 64 + header_bytes,
                           data_offset, data_offset + 30, data_offset + 64 + 10,
                           data_offset + 4096 + 100, b.size() - 65, b.size() - 64,
                           b.size() - 8, b.size() - 1};
  for (u64 c = 1; c < b.size(); c += 509) cuts.push_back(c);  // and a sweep
  const std::string path = dir.file("cut.dcz");
  for (u64 cut : cuts) {
    ASSERT_LT(cut, b.size());
    write_bytes(path, b.substr(0, cut));
    try {
      (void)archive_reader::open(path);
      ADD_FAILURE() << "archive cut at " << cut << " of " << b.size() << " was accepted";
    } catch (const error& e) {
      EXPECT_TRUE(e.code() == errc::corrupt || e.code() == errc::bad_input)
          << "cut at " << cut << ": " << to_string(e.code()) << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cut at " << cut << ": not a dctchop::error: " << e.what();
    }
  }
}

TEST(Archive, StreamFromStdinPipeYieldsEveryChunkThenLabels) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  const auto written = write_test_archive(path, true);
  const u64 cbps = test_header().coeff_bytes_per_sample();
  stdin_pipe in(read_bytes(path), 777);
  auto r = archive_reader::open("-");
  EXPECT_FALSE(r.random_access());
  EXPECT_EQ(r.display_name(), "<stdin>");
  EXPECT_EQ(r.header().geom.samples, 10u);
  EXPECT_EQ(r.header().provenance, test_header().provenance);
  chunk_info c;
  std::vector<std::byte> got, all;
  u64 n = 0, next_first = 0;
  while (r.next_chunk(c, got)) {
    EXPECT_EQ(c.index, n);
    EXPECT_EQ(c.first, next_first);
    EXPECT_EQ(c.offset % 4096, 0u);
    EXPECT_EQ(got.size(), c.count * cbps);
    all.insert(all.end(), got.begin(), got.end());
    next_first += c.count;
    ++n;
  }
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(all, written);
  EXPECT_FALSE(r.next_chunk(c, got)) << "stays at the end";
  ASSERT_EQ(r.chunks().size(), 4u);
  ASSERT_EQ(r.side_arrays().size(), 1u);
  EXPECT_EQ(r.side_arrays()[0].name, "labels");
  const auto labels = r.read_side_array("labels");
  ASSERT_TRUE(labels.has_value());
  EXPECT_EQ(*labels, labels_bytes(10));
  EXPECT_FALSE(r.read_side_array("weights").has_value());
}

TEST(Archive, StreamWithFlippedPayloadByteIsCorruptAtThatChunk) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, false);
  u64 off2 = 0;
  {
    auto r = archive_reader::open(path);
    off2 = r.chunks()[2].offset;
  }
  flip_byte(path, off2 + 64 + 100);
  stdin_pipe in(read_bytes(path));
  auto r = archive_reader::open("-");
  chunk_info c;
  std::vector<std::byte> got;
  EXPECT_TRUE(r.next_chunk(c, got));
  EXPECT_TRUE(r.next_chunk(c, got));
  expect_error([&] { (void)r.next_chunk(c, got); }, errc::corrupt, {"chunk 2", "<stdin>"});
}

TEST(Archive, TruncatedStreamIsCorruptNeverSuccess) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, true);
  const std::string b = read_bytes(path);
  const u64 data_offset = get_u64(b, 32);
  for (u64 cut : {u64(40), u64(100), data_offset + 64 + 10, data_offset + 4096 * 2 + 3,
                  u64(b.size() - 64), u64(b.size() - 1)}) {
    stdin_pipe in(b.substr(0, cut));
    try {
      auto r = archive_reader::open("-");
      chunk_info c;
      std::vector<std::byte> got;
      while (r.next_chunk(c, got)) {
      }
      ADD_FAILURE() << "stream cut at " << cut << " of " << b.size() << " was accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::corrupt) << "cut at " << cut << ": " << e.what();
    }
  }
}

TEST(Archive, LabelsSideArrayRoundTripsWithItsDescription) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, true);
  auto r = archive_reader::open(path);
  ASSERT_EQ(r.side_arrays().size(), 1u);
  const auto& s = r.side_arrays()[0];
  EXPECT_EQ(s.name, "labels");
  EXPECT_EQ(s.descr, "<i8");
  EXPECT_EQ(s.shape, (std::vector<u64>{10}));
  EXPECT_EQ(s.bytes, 80u);
  const auto got = r.read_side_array("labels");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, labels_bytes(10));
  EXPECT_FALSE(r.read_side_array("nothing").has_value());
  // Rows read as needed are the whole array's, and the whole checks out read in pieces.
  r.verify_side_array("labels");
  std::vector<std::byte> rows(4 * 8);
  r.read_side_array_rows("labels", 3, 4, rows);
  EXPECT_EQ(rows, slice(labels_bytes(10), 3 * 8, 4 * 8));
  r.read_side_array_rows("labels", 10, 0, std::span<std::byte>());
  EXPECT_THROW(r.read_side_array_rows("labels", 8, 3, rows), error);
}

TEST(Archive, SideArrayPulledInPiecesIsNeverAskedForMoreThanAMebibyteAndReadsBackWhole) {
  // Labels as large as the data (10 per-sample masks of 300 KiB, 3 MiB) are pulled a piece at
  // a time: never more than 1 MiB asked for at once, every row exactly once, in order, and the
  // array reads back byte for byte with a good checksum.
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  const archive_header h = test_header();
  const u64 cbps = h.coeff_bytes_per_sample(), n = h.geom.samples, row = 300 * 1024;
  const auto coeffs = pattern_bytes(n, cbps);
  const auto masks = pattern_bytes(n, row);
  std::vector<std::pair<u64, u64>> asked;
  {
    archive_writer w(output_file::create(path, false), h);
    for (u64 first = 0; first < n; first += h.samples_per_chunk) {
      const u64 count = std::min(h.samples_per_chunk, n - first);
      w.write_chunk(first, count, std::span<const std::byte>(coeffs).subspan(first * cbps, count * cbps));
    }
    w.write_side_array("labels", "|u1", {n, 300, 1024}, row, [&](u64 first, u64 count, void* dst) {
      asked.emplace_back(first, count);
      std::memcpy(dst, masks.data() + first * row, count * row);
    });
    w.finish();
  }
  ASSERT_GT(asked.size(), 1u);
  u64 next = 0;
  for (const auto& [first, count] : asked) {
    EXPECT_EQ(first, next);
    EXPECT_LE(count * row, u64(1) << 20);
    next = first + count;
  }
  EXPECT_EQ(next, n);
  auto r = archive_reader::open(path);
  ASSERT_EQ(r.side_arrays().size(), 1u);
  EXPECT_EQ(r.side_arrays()[0].shape, (std::vector<u64>{n, 300, 1024}));
  r.verify_side_array("labels");
  EXPECT_EQ(r.read_side_array("labels").value(), masks);
}

TEST(Archive, SideArrayReadInOrderIsCheckedByItsLastPieceAndRefusesAnyOtherOrder) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, true);
  {
    auto r = archive_reader::open(path);
    auto rows = r.side_array_in_order("labels");
    std::vector<std::byte> got(10 * 8);
    rows(0, 4, got.data());
    rows(4, 6, got.data() + 4 * 8);
    EXPECT_EQ(got, labels_bytes(10));
    auto again = r.side_array_in_order("labels");
    expect_error([&] { again(2, 1, got.data()); }, errc::invalid_argument, {"out of order"});
  }
  // One flipped byte: the pieces before the last come back, the last one throws.
  u64 off = 0;
  {
    auto r = archive_reader::open(path);
    off = r.side_arrays().at(0).offset;
  }
  flip_byte(path, off + 3);
  auto r = archive_reader::open(path);
  auto rows = r.side_array_in_order("labels");
  std::vector<std::byte> got(10 * 8);
  rows(0, 9, got.data());
  expect_error([&] { rows(9, 1, got.data() + 9 * 8); }, errc::corrupt,
               {"side array 'labels': checksum mismatch", path});
}

TEST(Archive, FlippedLabelsByteIsCorruptWhenRead) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, true);
  u64 off = 0;
  {
    auto r = archive_reader::open(path);
    off = r.side_arrays().at(0).offset;
  }
  flip_byte(path, off + 17);
  auto r = archive_reader::open(path);
  expect_error([&] { (void)r.read_side_array("labels"); }, errc::corrupt, {"labels", path});
  expect_error([&] { r.verify_side_array("labels"); }, errc::corrupt,
               {"side array 'labels': checksum mismatch", path});
}

TEST(Archive, TheWriterRefusesWhatItsReaderWouldCallCorruptAndLeavesNoFile) {
  // Side arrays that are not one row per sample, of a type the reader does not take, of
  // more or fewer bytes than their shape, or twice of one name; a header of no samples. The
  // writer finished all of them into archives that its reader then called corrupt (a
  // black-box tester of the C++ API); the reader's refusals are in test_corruption.cpp.
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  expect_error([&] { write_test_archive(path, true, 20); }, errc::invalid_argument,
               {"side array 'labels' (<i8, shape 20, 8 bytes a row): expected 10 rows"});
  struct bad {
    std::string name, descr;
    std::vector<u64> shape;
    u64 bytes;
    std::string says;
  };
  for (const bad& b :
       std::vector<bad>{{"labels", "<c16", {10}, 160, "'labels' (<c16"},
                        {"labels", "<i8", {10}, 21, "not whole rows"},
                        {"labels", "<i8", {10}, 20, "2 bytes a row"},
                        {"labels", "<i8", {10, 2}, 80, "the bytes its shape says"},
                        {"labels", "int64", {10}, 80, "(int64, shape 10"},
                        {"again", "|u1", {10}, 10, "two side arrays named 'again'"}}) {
    SCOPED_TRACE(b.descr);
    {
      archive_writer w(output_file::create(path, false), test_header());
      write_every_chunk(w, test_header());
      if (b.name == "again") w.write_side_array("again", "|u1", {10}, std::vector<std::byte>(10));
      expect_error(
          [&] { w.write_side_array(b.name, b.descr, b.shape, std::vector<std::byte>(b.bytes)); },
          errc::invalid_argument, {b.says});
    }
    EXPECT_TRUE(dir.entries().empty());
  }
  archive_header none = test_header();
  none.geom.samples = 0;
  expect_error([&] { archive_writer w(output_file::create(path, false), none); },
               errc::invalid_argument, {"an archive of 0 samples", "every axis holds"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Archive, TheIndexIsWrittenEntryByEntryAsNlohmannWouldWriteItWhole) {
  // The index's chunk entries are written one by one (as JSON values they took about 1 KB
  // each at the end of a compress): the text is the canonical one all the same (members
  // sorted, no spaces), and says what the reader reads.
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_test_archive(path, true);
  const std::string bytes = dctchop::test::read_bytes(path);
  ASSERT_GT(bytes.size(), 64u);
  const auto u64_at = [&](std::size_t at) {
    u64 v = 0;
    for (int b = 7; b >= 0; --b) v = v << 8 | static_cast<unsigned char>(bytes[at + b]);
    return v;
  };
  const std::size_t tail = bytes.size() - 64;
  const std::string text = bytes.substr(u64_at(tail + 8), u64_at(tail + 16));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(json_text(j), text);
  archive_reader r = archive_reader::open(path);
  ASSERT_EQ(j.at("chunks").size(), r.chunks().size());
  for (std::size_t i = 0; i < r.chunks().size(); ++i) {
    EXPECT_EQ(j["chunks"][i]["offset"].get<u64>(), r.chunks()[i].offset);
    EXPECT_EQ(j["chunks"][i]["count"].get<u64>(), r.chunks()[i].count);
  }
  EXPECT_EQ(j.at("input_bytes").get<u64>(), 10u * 8 * 12 * 2 * 2);
  EXPECT_EQ(j.at("side_arrays").size(), 1u);
  // And the size predicted without writing is the file's.
  const archive_header h = test_header();
  side_array_info labels;
  labels.name = "labels";
  labels.descr = "<i8";
  labels.shape = {10};
  labels.bytes = 80;
  EXPECT_EQ(predict_archive_bytes(h, {labels}, {{"input_bytes", 10u * 8 * 12 * 2 * 2}}),
            bytes.size());
}

TEST(Archive, TheHeaderSaysWhatTheSideArraysTakeAndTheWriterKeepsToIt) {
  // chunking.side_bytes: what follows the last chunk before the index, which a stream reader
  // takes on top of its bound for a stream that goes on (labels of 275 MiB beside small
  // images were refused from a pipe, read from the file). Read back as written; a writer
  // told it refuses side arrays past it.
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  archive_header h = test_header();
  h.side_bytes = 4096;
  {
    archive_writer w(output_file::create(path, false), h);
    write_every_chunk(w, h);
    w.write_side_array("labels", "<i8", {10}, labels_bytes(10));  // 80 bytes: one 4 KiB block
    expect_error([&] { w.write_side_array("more", "|u1", {10}, std::vector<std::byte>(10)); },
                 errc::invalid_argument,
                 {"more side array bytes than the header's side_bytes (4096)"});
    w.finish();
  }
  EXPECT_EQ(archive_reader::open(path).header().side_bytes, 4096u);
  EXPECT_EQ(side_bytes_of({side_array_info{"a", "<i8", {10}, 0, 80, 0},
                           side_array_info{"b", "|u1", {10}, 0, 4097, 0}}, 4096),
            4096u + 8192u);
  // What compress writes: its labels' bytes, padded (10 x 8 bytes here).
  const archive_header none = test_header();
  EXPECT_EQ(none.to_json().at("chunking").contains("side_bytes"), false);
}

TEST(Archive, WriterDestroyedBeforeFinishLeavesNoFileBehind) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  {
    const archive_header h = test_header();
    const u64 per = h.coeff_bytes_per_sample();
    const auto coeffs = pattern_bytes(10, per);
    archive_writer w(output_file::create(path, false), h);
    for (u64 first = 0; first < 10; first += 3) {  // chunks of samples_per_chunk (3)
      const u64 n = std::min<u64>(3, 10 - first);
      w.write_chunk(first, n, std::span(coeffs).subspan(first * per, n * per));
    }
    // Every sample written, but no finish(): an error elsewhere unwound past the writer.
  }
  EXPECT_TRUE(dir.entries().empty()) << "left: " << (dir.entries().empty() ? "" : dir.entries()[0]);
}

TEST(Archive, AFinishWithSamplesMissingThrowsAndLeavesNoFileBehind) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  {
    const archive_header h = test_header();
    const auto coeffs = pattern_bytes(3, h.coeff_bytes_per_sample());
    archive_writer w(output_file::create(path, false), h);
    w.write_chunk(0, 3, coeffs);
    expect_error([&] { w.finish(); }, errc::invalid_argument, {path, "finished with"});
  }
  EXPECT_TRUE(dir.entries().empty()) << "left: " << (dir.entries().empty() ? "" : dir.entries()[0]);
}

TEST(Archive, WriterRefusesAHeaderOrAnIndexThatReadersWouldRefuseAndWritesNothing) {
  // It finished archives that its reader then called corrupt (or "upgrade dctchop").
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  struct bad_header {
    void (*edit)(archive_header&);
    const char* text;
  };
  for (const auto& c : std::vector<bad_header>{
           {[](archive_header& h) { h.samples_per_chunk = 11; },
            "samples_per_chunk 11 is out of range (1..10 samples"},
           {[](archive_header& h) { h.geom.lay = layout::automatic; }, "unknown layout"},
           {[](archive_header& h) { h.type = static_cast<dtype>(42); }, "dtype"},
           {[](archive_header& h) { h.codec.coeff = static_cast<coeff_type>(9); },
            "coefficient type 9"}}) {
    archive_header h = test_header();
    c.edit(h);
    expect_error([&] { archive_writer w(output_file::create(path, false), h); },
                 errc::invalid_argument, {path, c.text});
    EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  }
  const archive_header h = test_header();
  const auto coeffs = pattern_bytes(10, h.coeff_bytes_per_sample());
  for (const nlohmann::json& extra :
       {nlohmann::json{{"quality", {{"psnr_db", "high"}}}}, nlohmann::json{{"input_bytes", -1}},
        nlohmann::json{{"quality", 5}}, nlohmann::json::array(),
        // NaN and Inf were written as null (read back as a lossless PSNR); a member of the
        // index's own was dropped; one nested past readers' limit was written.
        nlohmann::json{{"quality", {{"psnr_db", std::numeric_limits<double>::quiet_NaN()}}}},
        nlohmann::json{{"quality", {{"mse", std::numeric_limits<double>::infinity()}}}},
        nlohmann::json{{"samples", 3}}, nlohmann::json::parse(R"({"x":)" + std::string(300, '[') +
                                                               std::string(300, ']') + "}")}) {
    archive_writer w(output_file::create(path, false), h);
    const u64 cb = h.coeff_bytes_per_sample();
    for (u64 first = 0; first < 10; first += 3) {
      const u64 n = std::min<u64>(3, 10 - first);
      w.write_chunk(first, n, std::span<const std::byte>(coeffs.data() + first * cb, n * cb));
    }
    w.set_footer_extra(extra);
    expect_error([&] { w.finish(); }, errc::invalid_argument,
                 {path, ": not finished, as readers would refuse its index: "});
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(Archive, WriterRefusesAnExistingOutputAndLeavesItUntouched) {
  temp_dir dir;
  const std::string path = dir.file("a.dcz");
  write_bytes(path, "precious");
  expect_error([&] { (void)output_file::create(path, false); }, errc::output_exists, {path});
  EXPECT_EQ(read_bytes(path), "precious");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.dcz"});
}

TEST(Archive, AnOutputWhoseFolderIsRemovedMeanwhileSaysSoAndNamesTheFolder) {
  // The folder removed while the output was written (an unnamed temporary file, which rmdir
  // does not see): "cannot link the finished output into: No such file...", its object cut.
  temp_dir dir;
  std::filesystem::create_directory(dir.file("sub"));
  const std::string path = dir.file("sub/a.dcz");
  auto out = output_file::create(path, false);
  out.write("data", 4);
  if (!std::filesystem::is_empty(dir.file("sub"))) {
    GTEST_SKIP() << "no unnamed temporary files here";
  }
  std::filesystem::remove(dir.file("sub"));
  expect_error([&] { out.commit(); }, errc::io,
               {path, "cannot link the finished output into its folder: No such file or "
                      "directory"});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

// ================================================================ pipeline

constexpr int k_n = 7, k_h = 16, k_w = 16, k_c = 3;

/** Writes smooth u8 NHWC images (7 x 16 x 16 x 3) to `path`. */
std::vector<std::uint8_t> write_u8_input(const std::string& path) {
  auto v = dctchop::test::smooth_u8_nhwc(k_n, k_h, k_w, k_c);
  save_npy(path, dtype::u8, {k_n, k_h, k_w, k_c}, v);
  return v;
}

/** Options giving chunks of 2 samples for the u8 input (384 coefficient bytes per sample). */
compress_options small_chunks(int chop = 4) {
  compress_options o;
  o.chop = chop;
  o.chunk_mb = 800.0 / 1048576.0;
  o.tool_version = "test";
  return o;
}

std::unique_ptr<backend> cpu() { return make_backend(backend_kind::cpu, {1}); }

TEST(Pipeline, U8RoundTripKeepsShapeAndDtypeAndPsnrEqualsReportedQuality) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz"), out = dir.file("out.npy");
  write_u8_input(in);
  auto be = cpu();
  const auto cr = compress_npy(in, dcz, *be, small_chunks());
  EXPECT_EQ(cr.type, dtype::u8);
  EXPECT_EQ(cr.geom.lay, layout::nhwc);
  EXPECT_EQ(cr.codec.coeff, coeff_type::f16);
  EXPECT_EQ(cr.samples_per_chunk, 2u);
  EXPECT_EQ(cr.chunks, 4u);
  EXPECT_EQ(cr.input_bytes, u64(k_n) * k_h * k_w * k_c);
  EXPECT_EQ(cr.archive_bytes, std::filesystem::file_size(dcz));
  ASSERT_TRUE(cr.q.has_value());
  ASSERT_TRUE(cr.q->psnr_db.has_value());

  const auto dr = decompress_to_npy(dcz, out, *be, {});
  EXPECT_EQ(dr.type, dtype::u8);
  EXPECT_EQ(dr.geom.shape(), (std::vector<u64>{k_n, k_h, k_w, k_c}));
  const auto a = load_npy(in), b = load_npy(out);
  EXPECT_EQ(b.header.shape, a.header.shape);
  EXPECT_EQ(b.header.type.native_descr(), "|u1");
  const double p = dctchop::test::psnr_of(a.values, b.values, 255.0);
  EXPECT_GT(p, 30.0) << "chop 4 of 8 on smooth images";
  EXPECT_TRUE(std::isfinite(p));
  EXPECT_NEAR(p, *cr.q->psnr_db, 1e-9);
  EXPECT_NEAR(dctchop::test::mse_of(a.values, b.values), cr.q->mse, 1e-12);
  EXPECT_EQ(cr.q->range, 255.0);
}

TEST(Pipeline, EveryOperationRefusesAThreadCountOutsideWhatMakeBackendTakes) {
  // A C++ tester's find: -3 ran as every core and 100000 as 8, where make_backend refuses both.
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  for (const int t : {-3, max_threads + 1, std::numeric_limits<int>::min()}) {
    const std::string says = "::threads " + std::to_string(t) + ": expected 0 (every core) to 4096";
    auto c = small_chunks();
    c.threads = t;
    expect_error([&] { compress_npy(in, dir.file("b.dcz"), *be, c); }, errc::invalid_argument,
                 {"compress_options" + says});
    decompress_options d;
    d.threads = t;
    expect_error([&] { decompress_to_npy(dcz, dir.file("o.npy"), *be, d); },
                 errc::invalid_argument, {"decompress_options" + says});
    verify_options v;
    v.threads = t;
    expect_error([&] { verify_archive(dcz, in, *be, v); }, errc::invalid_argument,
                 {"verify_options" + says});
    eval_options e;
    e.threads = t;
    expect_error([&] { eval_npy(in, *be, e); }, errc::invalid_argument, {"eval_options" + says});
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.dcz")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.npy")));
  auto c = small_chunks();
  c.threads = max_threads;  // the bound itself is taken
  EXPECT_NO_THROW(compress_npy(in, dir.file("b.dcz"), *be, c));
}

TEST(Pipeline, DecompressRefusesAMemberNamedAfterANpyNameAsTheCommandDoes) {
  // A tester's find: the command refused `-o y.npy:images`, the library wrote that file.
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  expect_error([&] { decompress_to_npy(dcz, dir.file("y.npy:images"), *be, {}); },
               errc::invalid_argument, {"y.npy is a .npy name", "y.npz:images or"});
  decompress_options o;
  o.labels_out = dir.file("l.npy:x");
  expect_error([&] { decompress_to_npy(dcz, dir.file("y.npy"), *be, o); },
               errc::invalid_argument, {"l.npy is a .npy name", "for the labels"});
  // A spec made by hand with a dataset for a .npy (the name alone never gives one).
  dataset_spec by_hand;
  by_hand.path = dir.file("w.npy");
  by_hand.dataset = "x";
  expect_error([&] { decompress(dcz, by_hand, *be, {}); }, errc::invalid_argument,
               {"w.npy: a .npy file holds one array", "dataset x"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("y.npy:images")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("y.npy")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.npy")));
}

TEST(Pipeline, F32RoundTripUsesMaxMinusMinAsRangeAndMatchesReportedPsnr) {
  temp_dir dir;
  const std::string in = dir.file("f.npy"), dcz = dir.file("f.dcz"), out = dir.file("o.npy");
  const auto v = dctchop::test::smooth_f32_nhw(5, 20, 13);  // 20x13: padding in both axes
  save_npy(in, dtype::f32, {5, 20, 13}, v);
  auto be = cpu();
  compress_options o;
  o.chop = 4;
  const auto cr = compress_npy(in, dcz, *be, o);
  EXPECT_EQ(cr.codec.coeff, coeff_type::f32);
  EXPECT_EQ(cr.geom.lay, layout::nhw);
  decompress_to_npy(dcz, out, *be, {});
  const auto a = load_npy(in), b = load_npy(out);
  EXPECT_EQ(b.header.shape, (std::vector<u64>{5, 20, 13}));
  EXPECT_EQ(b.header.type.native_descr(), "<f4");
  const double range = dctchop::test::value_range(a.values);
  ASSERT_TRUE(cr.q && cr.q->psnr_db);
  EXPECT_NEAR(cr.q->range, range, 1e-6 * range);
  const double p = dctchop::test::psnr_of(a.values, b.values, range);
  EXPECT_GT(p, 30.0);
  EXPECT_NEAR(p, *cr.q->psnr_db, 1e-6);
}

TEST(Pipeline, U8AtChop8WithF16IsLossless) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz"), out = dir.file("out.npy");
  write_u8_input(in);
  auto be = cpu();
  const auto cr = compress_npy(in, dcz, *be, small_chunks(8));
  ASSERT_TRUE(cr.q.has_value());
  EXPECT_FALSE(cr.q->psnr_db.has_value()) << "PSNR " << cr.q->psnr_db.value_or(0);
  EXPECT_EQ(cr.q->max_abs_error, 0.0);
  decompress_to_npy(dcz, out, *be, {});
  EXPECT_EQ(load_npy(out).raw, load_npy(in).raw);
}

TEST(Pipeline, SampleRangeDecodeEqualsSliceOfFullDecode) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz"), full = dir.file("full.npy");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  decompress_to_npy(dcz, full, *be, {});
  const auto all = load_npy(full);
  const u64 per = u64(k_h) * k_w * k_c;
  const std::pair<u64, u64> ranges[] = {{0, 1}, {1, 3}, {2, 5}, {3, 7}, {6, 7}, {0, 7}, {1, 6}};
  for (auto [first, end] : ranges) {
    const std::string part = dir.file("part_" + std::to_string(first) + "_" + std::to_string(end) + ".npy");
    decompress_options o;
    o.first = first;
    o.end = end;
    const auto dr = decompress_to_npy(dcz, part, *be, o);
    EXPECT_EQ(dr.geom.samples, end - first);
    const auto p = load_npy(part);
    EXPECT_EQ(p.header.shape, (std::vector<u64>{end - first, k_h, k_w, k_c}));
    EXPECT_EQ(p.raw, slice(all.raw, first * per, (end - first) * per))
        << "range " << first << ":" << end;
  }
  // Open-ended range: first only.
  decompress_options o;
  o.first = 4;
  decompress_to_npy(dcz, dir.file("tail.npy"), *be, o);
  EXPECT_EQ(load_npy(dir.file("tail.npy")).raw, slice(all.raw, 4 * per, 3 * per));
  // Empty and out-of-range requests are refused, and write nothing.
  for (auto [first, end] : {std::pair<u64, u64>{3, 3}, {5, 8}, {7, 8}, {4, 2}}) {
    decompress_options bad;
    bad.first = first;
    bad.end = end;
    expect_error([&] { decompress_to_npy(dcz, dir.file("bad.npy"), *be, bad); },
                 errc::invalid_argument);
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad.npy")));
  }
}

TEST(Pipeline, StreamDecodeOfARangeFromStdinEqualsFileDecode) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  decompress_options o;
  o.first = 1;
  o.end = 6;
  decompress_to_npy(dcz, dir.file("file.npy"), *be, o);
  {
    stdin_pipe pipe_in(read_bytes(dcz), 1500);
    decompress_to_npy("-", dir.file("stream.npy"), *be, o);
  }
  EXPECT_EQ(read_bytes(dir.file("stream.npy")), read_bytes(dir.file("file.npy")));
}

TEST(Pipeline, LabelsRoundTripThroughLabelsOutWholeAndSliced) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), lab = dir.file("labels.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  std::vector<std::int32_t> labels(k_n * 2);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i * 1000 - 3);
  {
    auto w = npy_writer::create(lab, *parse_npy_descr("<i4"), {k_n, 2}, false);
    w.write_rows(labels.data(), k_n);
    w.finish();
  }
  auto be = cpu();
  auto co = small_chunks();
  co.labels_path = lab;
  compress_npy(in, dcz, *be, co);

  decompress_options o;
  o.labels_out = dir.file("labels_out.npy");
  decompress_to_npy(dcz, dir.file("out.npy"), *be, o);
  EXPECT_EQ(read_bytes(o.labels_out), read_bytes(lab)) << "whole labels come back byte for byte";

  decompress_options r;
  r.first = 2;
  r.end = 5;
  r.labels_out = dir.file("labels_part.npy");
  decompress_to_npy(dcz, dir.file("part.npy"), *be, r);
  const auto part = load_npy(r.labels_out);
  EXPECT_EQ(part.header.shape, (std::vector<u64>{3, 2}));
  EXPECT_EQ(part.header.type.native_descr(), "<i4");
  std::vector<std::int32_t> got(6);
  std::memcpy(got.data(), part.raw.data(), 24);
  EXPECT_EQ(got, std::vector<std::int32_t>(labels.begin() + 4, labels.begin() + 10));
}

TEST(Pipeline, LabelsOutOnTheSamePathAsTheOutputIsRefused) {
  // Both files would be renamed onto one path and one of them silently lost.
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  auto co = small_chunks();
  co.labels_path = dir.file("labels.npy");
  save_npy(co.labels_path, dtype::f64, {k_n}, std::vector<double>(k_n, 1.5));
  compress_npy(in, dcz, *be, co);
  decompress_options o;
  o.labels_out = dir.file("out.npy");
  o.overwrite = true;
  expect_error([&] { decompress_to_npy(dcz, dir.file("out.npy"), *be, o); },
               errc::invalid_argument, {"out.npy"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy", "labels.npy"}));
}

TEST(Pipeline, LabelsOutOfAnArchiveWithoutLabelsIsBadInputAndWritesNothing) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  decompress_options o;
  o.labels_out = dir.file("labels.npy");
  expect_error([&] { decompress_to_npy(dcz, dir.file("out.npy"), *be, o); }, errc::bad_input,
               {"labels"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"}));
}

TEST(Pipeline, LabelsWithWrongRowCountAreRefusedBeforeAnyOutput) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  auto co = small_chunks();
  co.labels_path = dctchop::test::sample_npy("labels_i64.npy");  // 10 rows, input has 7
  expect_error([&] { compress_npy(in, dcz, *be, co); }, errc::bad_input, {"labels"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"in.npy"}));
}

TEST(Pipeline, ExistingOutputIsRefusedAndLeftUntouchedUnlessOverwrite) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz"), out = dir.file("out.npy");
  write_u8_input(in);
  auto be = cpu();
  write_bytes(dcz, "an older archive");
  expect_error([&] { compress_npy(in, dcz, *be, small_chunks()); }, errc::output_exists, {dcz});
  EXPECT_EQ(read_bytes(dcz), "an older archive");
  auto co = small_chunks();
  co.overwrite = true;
  compress_npy(in, dcz, *be, co);
  EXPECT_NO_THROW((void)archive_reader::open(dcz));

  write_bytes(out, "an older output");
  expect_error([&] { decompress_to_npy(dcz, out, *be, {}); }, errc::output_exists, {out});
  EXPECT_EQ(read_bytes(out), "an older output");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy", "out.npy"}))
      << "no temporary file is left";
  decompress_options o;
  o.overwrite = true;
  decompress_to_npy(dcz, out, *be, o);
  EXPECT_EQ(load_npy(out).header.shape, (std::vector<u64>{k_n, k_h, k_w, k_c}));
}

TEST(Pipeline, CompressOntoItsOwnInputIsRefusedEvenWithOverwrite) {
  temp_dir dir;
  const std::string in = dir.file("in.npy");
  write_u8_input(in);
  const std::string before = read_bytes(in);
  auto be = cpu();
  auto co = small_chunks();
  co.overwrite = true;
  expect_error([&] { compress_npy(in, in, *be, co); }, errc::invalid_argument, {in});
  const std::string other_spelling = (dir.path() / "." / "in.npy").string();
  expect_error([&] { compress_npy(in, other_spelling, *be, co); }, errc::invalid_argument);
  EXPECT_EQ(read_bytes(in), before);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"in.npy"}));
}

TEST(Pipeline, DecompressOntoItsOwnInputIsRefusedEvenWithOverwrite) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  const std::string before = read_bytes(dcz);
  decompress_options o;
  o.overwrite = true;
  expect_error([&] { decompress_to_npy(dcz, dcz, *be, o); }, errc::invalid_argument);
  EXPECT_EQ(read_bytes(dcz), before);
}

TEST(Pipeline, CorruptChunkMidwayFailsDecompressAndLeavesNoOutputOrTempFile) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  compress_npy(in, dcz, *be, small_chunks());
  u64 off = 0;
  {
    auto r = archive_reader::open(dcz);
    ASSERT_EQ(r.chunks().size(), 4u);
    off = r.chunks()[2].offset;
  }
  flip_byte(dcz, off + 64 + 3);
  expect_error([&] { decompress_to_npy(dcz, dir.file("out.npy"), *be, {}); }, errc::corrupt,
               {"chunk 2"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"}));
}

TEST(Pipeline, ArchiveInfoReportsTrueRatioAndStoredQuality) {
  temp_dir dir;
  const std::string in = dir.file("in.npy"), dcz = dir.file("a.dcz");
  write_u8_input(in);
  auto be = cpu();
  const auto cr = compress_npy(in, dcz, *be, small_chunks());
  const auto j = archive_info(dcz);
  EXPECT_EQ(j.at("archive_bytes").get<u64>(), std::filesystem::file_size(dcz));
  EXPECT_EQ(j.at("input_bytes").get<u64>(), cr.input_bytes);
  EXPECT_NEAR(j.at("ratio").get<double>(),
              double(cr.input_bytes) / double(std::filesystem::file_size(dcz)), 1e-12);
  EXPECT_NEAR(j.at("quality").at("psnr_db").get<double>(), *cr.q->psnr_db, 1e-9);
  EXPECT_EQ(j.at("chunks").get<u64>(), 4u);
  EXPECT_EQ(j.at("provenance").at("source").get<std::string>(), in);
}

}  // namespace
