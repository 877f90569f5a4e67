// Tests of .npz inputs: files written by numpy (sample_data/npz/make_npz.py; the value formulas
// below are the script's), and ZIP files made here for what numpy does not write (Zip64
// directories, data descriptors, other methods, damaged members).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/npy.hpp"
#include "byte_order.hpp"
#include "test_util.hpp"
#include "zip_reader.hpp"
#include "zip_writer.hpp"

namespace {

using namespace dctchop;
using formats::dataset_spec;
using formats::file_kind;
using formats::open_dataset;
using formats::parse_dataset_spec;
using test::cli;
using test::describe;
using test::flip_byte;
using test::load_npy;
using test::read_bytes;
using test::sh_quote;
using test::temp_dir;
using test::write_bytes;
using u64 = std::uint64_t;

std::string sample_npz(const std::string& name) {
  return std::string(DCTCHOP_SAMPLE_DIR) + "/npz/" + name;
}

/** make_npz.py's images_u8: x[k, i, j] for sample k (first + index). */
std::vector<std::uint8_t> images_u8(u64 n, u64 first) {
  std::vector<std::uint8_t> v;
  for (u64 k = first; k < first + n; ++k)
    for (u64 i = 0; i < 28; ++i)
      for (u64 j = 0; j < 28; ++j) v.push_back(static_cast<std::uint8_t>((k * 37 + i * 11 + j * 5 + (i * j) % 13) % 256));
  return v;
}

std::vector<std::byte> bytes_of(const std::vector<std::uint8_t>& v) {
  std::vector<std::byte> b(v.size());
  std::memcpy(b.data(), v.data(), v.size());
  return b;
}

/** Every row of a source, read in one call. */
template <typename T>
std::vector<T> read_all(formats::sample_source& s) {
  std::vector<T> v(s.rows() * s.row_bytes() / sizeof(T));
  s.read_rows(0, s.rows(), v.data());
  return v;
}

std::unique_ptr<formats::sample_source> open_npz(const std::string& text,
                                                 dataset_spec::role role = dataset_spec::role::data) {
  auto spec = parse_dataset_spec(text);
  spec.purpose = role;
  return open_dataset(spec);
}

/** The error that `f` throws (a test failure when it throws none). */
template <typename F>
error error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e;
  }
  ADD_FAILURE() << "no dctchop::error thrown";
  return error(errc::internal, "none");
}

// ---- ZIP files made here ------------------------------------------------------------------

constexpr auto put = formats::detail::append_le;  // ZIP fields, little-endian

std::string raw_deflate(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

/** One member of a ZIP made by make_zip. */
struct zip_entry {
  std::string name, data;
  std::uint16_t method = 0;     // 0 stored, 8 deflated, others stored as they are
  std::uint16_t flags = 0;      // bit 0: encrypted (nothing is encrypted)
  bool descriptor = false;      // sizes and CRC after the data, zeros in the local header
  bool zip64 = false;           // the directory's sizes and offset in a Zip64 extra field
  bool zip64_offset = false;    // the offset only (as Python writes a member past 2 GiB)
  std::int64_t size_error = 0;  // recorded size minus the real one
  std::string stream{};         // method 8: these bytes in place of raw_deflate(data)
};

/** Which end records: the plain one; a Zip64 record and locator too, with 0xFFFF.. in the
 *  plain one; or with its real values there (as Python writes them where they fit). */
enum class zip_end { plain, zip64_max, zip64_real };

/** A ZIP archive of `entries`. */
std::string make_zip(const std::vector<zip_entry>& entries, zip_end end = zip_end::plain) {
  const bool zip64_end = end != zip_end::plain, end_max = end == zip_end::zip64_max;
  std::string out, dir;
  for (const auto& e : entries) {
    const std::string stored =
        e.method != 8 ? e.data : !e.stream.empty() ? e.stream : raw_deflate(e.data);
    const u64 crc = crc32(0, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size()));
    const u64 size = static_cast<u64>(static_cast<std::int64_t>(e.data.size()) + e.size_error);
    const std::uint16_t flags = static_cast<std::uint16_t>(e.flags | (e.descriptor ? 8 : 0));
    const u64 offset = out.size();
    put(out, 0x04034b50, 4);
    put(out, 45, 2);
    put(out, flags, 2);
    put(out, e.method, 2);
    put(out, 0, 2);
    put(out, 0x21, 2);
    put(out, e.descriptor ? 0 : crc, 4);
    put(out, e.descriptor ? 0 : stored.size(), 4);
    put(out, e.descriptor ? 0 : size, 4);
    put(out, e.name.size(), 2);
    put(out, 4, 2);  // an extra field the directory does not have: 4 bytes of unknown id
    out += e.name;
    put(out, 0xcafe, 2);
    put(out, 0, 2);
    out += stored;
    if (e.descriptor) {
      put(out, 0x08074b50, 4);
      put(out, crc, 4);
      put(out, stored.size(), 4);
      put(out, size, 4);
    }
    std::string extra;
    if (e.zip64) {
      put(extra, 1, 2);
      put(extra, 24, 2);
      put(extra, size, 8);
      put(extra, stored.size(), 8);
      put(extra, offset, 8);
    } else if (e.zip64_offset) {
      put(extra, 1, 2);
      put(extra, 8, 2);
      put(extra, offset, 8);
    }
    put(dir, 0x02014b50, 4);
    put(dir, 45, 2);
    put(dir, 45, 2);
    put(dir, flags, 2);
    put(dir, e.method, 2);
    put(dir, 0, 2);
    put(dir, 0x21, 2);
    put(dir, crc, 4);
    put(dir, e.zip64 ? 0xffffffffu : stored.size(), 4);
    put(dir, e.zip64 ? 0xffffffffu : size, 4);
    put(dir, e.name.size(), 2);
    put(dir, extra.size(), 2);
    put(dir, 0, 2);
    put(dir, 0, 2);
    put(dir, 0, 2);
    put(dir, 0, 4);
    put(dir, e.zip64 || e.zip64_offset ? 0xffffffffu : offset, 4);
    dir += e.name + extra;
  }
  const u64 dir_at = out.size();
  out += dir;
  if (zip64_end) {
    const u64 end64_at = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, entries.size(), 8);
    put(out, entries.size(), 8);
    put(out, dir.size(), 8);
    put(out, dir_at, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, end64_at, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, end_max ? 0xffff : entries.size(), 2);
  put(out, end_max ? 0xffff : entries.size(), 2);
  put(out, end_max ? 0xffffffffu : dir.size(), 4);
  put(out, end_max ? 0xffffffffu : dir_at, 4);
  put(out, 0, 2);
  return out;
}

/** A .npy file's bytes: u16 values 0, 1, 2, ... of `shape`. */
std::string npy_u16(const std::vector<u64>& shape) {
  const auto h = formats::make_npy_header(formats::npy_dtype{'u', 2, false}, shape);
  std::string s(h.begin(), h.end());
  u64 n = 1;
  for (u64 d : shape) n *= d;
  for (u64 i = 0; i < n; ++i) put(s, i & 0xffff, 2);
  return s;
}

std::vector<std::uint16_t> iota_u16(u64 n) {
  std::vector<std::uint16_t> v(n);
  for (u64 i = 0; i < n; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

// ---- files numpy wrote -----------------------------------------------------------------------

TEST(Npz, NamesParseAsNpzWithTheirArray) {
  auto s = parse_dataset_spec("data/mnist.npz:x_train");
  EXPECT_EQ(s.kind, file_kind::npz);
  EXPECT_EQ(s.path, "data/mnist.npz");
  EXPECT_EQ(s.dataset, "x_train");
  s = parse_dataset_spec("MNIST.NPZ:/x_train");  // the HDF5 habit: the slash is dropped
  EXPECT_EQ(s.kind, file_kind::npz);
  EXPECT_EQ(s.dataset, "x_train");
  s = parse_dataset_spec("mnist.npz", "y_test");
  EXPECT_EQ(s.kind, file_kind::npz);
  EXPECT_EQ(s.dataset, "y_test");
  EXPECT_EQ(parse_dataset_spec("mnist.npz").dataset, "");
  EXPECT_EQ(error_of([] { parse_dataset_spec("mnist.npz:"); }).code(), errc::invalid_argument);
  EXPECT_EQ(error_of([] { parse_dataset_spec("mnist.npz:x", "y"); }).code(), errc::invalid_argument);
}

TEST(Npz, StoredAndDeflatedArraysReadAsNumpyWroteThem) {
  for (const std::string f : {"mnist_like.npz", "mnist_like_compressed.npz"}) {
    SCOPED_TRACE(f);
    auto x = open_npz(sample_npz(f) + ":x_train");
    EXPECT_EQ(x->shape(), (std::vector<u64>{10, 28, 28}));
    EXPECT_EQ(x->type().codec_dtype(), dtype::u8);
    EXPECT_EQ(x->name(), sample_npz(f) + ":x_train");
    EXPECT_EQ(x->dataset_path(), "x_train");
    EXPECT_TRUE(x->rereadable());
    EXPECT_EQ(read_all<std::uint8_t>(*x), images_u8(10, 0));
    EXPECT_EQ(read_all<std::uint8_t>(*open_npz(sample_npz(f) + ":x_test.npy")), images_u8(4, 100));
    EXPECT_EQ(read_all<std::uint8_t>(*open_npz(sample_npz(f) + ":y_train")),
              (std::vector<std::uint8_t>{0, 3, 6, 9, 2, 5, 8, 1, 4, 7}));
  }
  for (const std::string f : {"misc.npz", "misc_compressed.npz"}) {
    SCOPED_TRACE(f);
    std::vector<float> want_f;
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 20; ++i)
        for (int j = 0; j < 24; ++j) want_f.push_back(static_cast<float>(((k * 7 + i * 3 + j) % 50) * 0.25 - 3.0));
    EXPECT_EQ(read_all<float>(*open_npz(sample_npz(f) + ":images")), want_f);
    std::vector<std::uint16_t> want_big;
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) want_big.push_back(static_cast<std::uint16_t>(k * 1000 + i * 64 + j));
    EXPECT_EQ(read_all<std::uint16_t>(*open_npz(sample_npz(f) + ":big")), want_big) << "byte-swapped";
  }
  // Fortran order: gathered from a stored member, and from a deflated one (read in order)
  // held whole up to 64 MiB
  std::vector<std::uint8_t> want_fortran;
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) want_fortran.push_back(static_cast<std::uint8_t>((k * 13 + i * 5 + j * 9) % 251));
  EXPECT_EQ(read_all<std::uint8_t>(*open_npz(sample_npz("misc.npz") + ":fortran")), want_fortran);
  EXPECT_EQ(read_all<std::uint8_t>(*open_npz(sample_npz("misc_compressed.npz") + ":fortran")),
            want_fortran);
}

TEST(Npz, AFortranOrderArrayOfADeflatedMemberIsHeldWholeUpTo64MiBAndRefusedAbove) {
  temp_dir dir;
  // 2 x 1024 x 32769 u8: just above 64 MiB, zeros (deflated to little).
  const auto h = formats::make_npy_header(formats::npy_dtype{'u', 1, false}, {2, 1024, 32769}, true);
  write_bytes(dir.file("big.npz"),
              make_zip({{"x.npy", std::string(h.begin(), h.end()) + std::string(2 * 1024 * 32769, '\0'), 8}}));
  const auto e = error_of([&] { open_npz(dir.file("big.npz") + ":x"); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("Fortran-order arrays above 64 MiB cannot be read from a "
                                       "compressed .npz member; save it with np.savez"),
            std::string::npos)
      << e.what();
  // A small one reads; damaged (its bytes not those its CRC-32 was taken of), it is refused
  // at its first read: its CRC is checked once it is held.
  const auto s = formats::make_npy_header(formats::npy_dtype{'u', 2, false}, {3, 4}, true);
  const std::string npy = std::string(s.begin(), s.end()) + std::string(24, '\1');
  write_bytes(dir.file("ok.npz"), make_zip({{"y.npy", npy, 8}}));
  EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("ok.npz") + ":y")),
            std::vector<std::uint16_t>(12, 0x0101));
  zip_entry damaged{"y.npy", npy, 8};
  std::string other = npy;
  other.back() = '\2';
  damaged.stream = raw_deflate(other);
  // A name not flagged UTF-8 is code page 437, as np.load reads it ("\x82" is 'é').
  write_bytes(dir.file("cp.npz"), make_zip({{"\x82\xe1.npy", npy_u16({6, 8, 8})}}));
  EXPECT_EQ(open_npz(dir.file("cp.npz") + ":\u00e9\u00df")->dataset_path(), "\u00e9\u00df");
  write_bytes(dir.file("utf.npz"),
              make_zip({{"\xc3\xa9.npy", npy_u16({6, 8, 8}), 0, 0x0800}}));  // flagged: as it is
  EXPECT_EQ(open_npz(dir.file("utf.npz") + ":\u00e9")->dataset_path(), "\u00e9");
  write_bytes(dir.file("bad.npz"), make_zip({damaged}));
  const auto crc = error_of([&] { read_all<std::uint16_t>(*open_npz(dir.file("bad.npz") + ":y")); });
  EXPECT_EQ(crc.code(), errc::bad_input);
  EXPECT_NE(std::string(crc.what()).find("bad.npz:y"), std::string::npos) << crc.what();
  EXPECT_NE(std::string(crc.what()).find("CRC-32"), std::string::npos) << crc.what();
}

TEST(Npz, RowsReadInAnyOrderComeFromTheirPlace) {
  const auto all = images_u8(10, 0);
  for (const std::string f : {"mnist_like.npz", "mnist_like_compressed.npz"}) {
    SCOPED_TRACE(f);
    auto x = open_npz(sample_npz(f) + ":x_train");
    const u64 rb = x->row_bytes();
    for (auto [first, count] : std::vector<std::pair<u64, u64>>{{6, 2}, {1, 3}, {9, 1}, {0, 10}, {4, 1}, {4, 1}}) {
      std::vector<std::uint8_t> got(count * rb);
      x->read_rows(first, count, got.data());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + static_cast<std::ptrdiff_t>(first * rb)))
          << "rows " << first << "+" << count;
    }
  }
}

TEST(Npz, WithoutANameTheOneFittingArrayIsChosenAndSeveralAreListed) {
  // keras's layout: x_train and x_test fit as images, y_train and y_test as labels; none has a
  // conventional name, so the user must choose.
  auto e = error_of([] { open_npz(sample_npz("mnist_like.npz")); });
  EXPECT_EQ(e.code(), errc::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("x_train (10, 28, 28), x_test (4, 28, 28)"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("FILE.npz:NAME"), std::string::npos) << e.what();
  e = error_of([] { open_npz(sample_npz("mnist_like_compressed.npz"), dataset_spec::role::labels); });
  EXPECT_EQ(e.code(), errc::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("y_train (10,), "), std::string::npos) << e.what();
  // labels need one row per sample, which tells y_train from y_test (the command sets rows, and
  // not_this when the images come from the same file)
  auto labels = parse_dataset_spec(sample_npz("mnist_like_compressed.npz"));
  labels.purpose = dataset_spec::role::labels;
  labels.rows = 10;
  labels.not_this = "x_train";
  EXPECT_EQ(open_dataset(labels)->dataset_path(), "y_train");
  labels.rows = 4;
  labels.not_this = "x_test";
  EXPECT_EQ(open_dataset(labels)->note(), "using labels y_test of " + sample_npz("mnist_like_compressed.npz"));
  labels.rows = 10;  // labels from another file: the one array of 1 or 2 axes among those that fit
  labels.not_this.clear();
  EXPECT_EQ(open_dataset(labels)->dataset_path(), "y_train");
  labels.rows = 7;
  e = error_of([&] { open_dataset(labels); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("(numeric, 1 or more axes, 7 rows); arrays: x_train (10, 28, 28), y_train (10,)"), std::string::npos) << e.what();
  // misc.npz: "images" is the conventional name among three arrays that fit; names is a string
  // array, which never fits
  auto s = open_npz(sample_npz("misc.npz"));
  EXPECT_EQ(s->dataset_path(), "images");
  EXPECT_EQ(s->note(), "using array images of " + sample_npz("misc.npz") +
                          " (not readable as arrays here: names)");
  // the labels are never the images themselves
  temp_dir dir;
  // Keras's pairs whose splits are of one size (rows tell nothing): x_test's are y_test,
  // X_val's Y_val; labels from another file, or of data with no pair, stay a choice.
  write_bytes(dir.file("k.npz"),
              make_zip({{"x_train.npy", npy_u16({6, 8, 8})}, {"y_train.npy", npy_u16({6})},
                        {"x_test.npy", npy_u16({6, 8, 8})}, {"y_test.npy", npy_u16({6})},
                        {"X_val.npy", npy_u16({6, 8, 8})}, {"Y_val.npy", npy_u16({6})}}));
  auto k = parse_dataset_spec(dir.file("k.npz"));
  k.purpose = dataset_spec::role::labels;
  k.rows = 6;
  for (const auto& [data, want] : std::vector<std::pair<std::string, std::string>>{
           {"x_train", "y_train"}, {"x_test", "y_test"}, {"X_val", "Y_val"}}) {
    k.not_this = data;
    EXPECT_EQ(open_dataset(k)->dataset_path(), want);
  }
  k.not_this.clear();
  EXPECT_EQ(error_of([&] { open_dataset(k); }).code(), errc::invalid_argument);
  // A pair of another row count beside an array that fits: said, not passed over for it.
  write_bytes(dir.file("w.npz"),
              make_zip({{"x_train.npy", npy_u16({6, 8, 8})}, {"y_train.npy", npy_u16({4})},
                        {"labels.npy", npy_u16({6})}}));
  auto w = parse_dataset_spec(dir.file("w.npz"));
  w.purpose = dataset_spec::role::labels;
  w.rows = 6;
  w.not_this = "x_train";
  const auto wrong = error_of([&] { open_dataset(w); });
  EXPECT_EQ(wrong.code(), errc::bad_input);
  EXPECT_NE(std::string(wrong.what()).find("y_train, the labels that x_train's name pairs it with, "
                                           "has 4 rows, not 6"),
            std::string::npos)
      << wrong.what();
  // ... and beside a pair of the right count elsewhere (another split's labels): said too. The
  // pair of the same case is x's (y_test beside Y_test); alone, the other case is.
  write_bytes(dir.file("o.npz"),
              make_zip({{"g/x_test.npy", npy_u16({6, 8, 8})}, {"g/y_test.npy", npy_u16({4})},
                        {"h/y_test.npy", npy_u16({6})}, {"Y_test.npy", npy_u16({6})},
                        {"y_test.npy", npy_u16({6})}, {"x_test.npy", npy_u16({6, 8, 8})}}));
  auto o = parse_dataset_spec(dir.file("o.npz"));
  o.purpose = dataset_spec::role::labels;
  o.rows = 6;
  o.not_this = "g/x_test";
  EXPECT_NE(std::string(error_of([&] { open_dataset(o); }).what())
                .find("g/y_test, the labels that g/x_test's name pairs it with, has 4 rows"),
            std::string::npos);
  o.not_this = "x_test";
  EXPECT_EQ(open_dataset(o)->dataset_path(), "y_test");
  write_bytes(dir.file("one.npz"), make_zip({{"y.npy", npy_u16({6})}, {"x.npy", npy_u16({6, 8, 8})}}));
  s = open_npz(dir.file("one.npz"));
  EXPECT_EQ(s->dataset_path(), "x");
  auto spec = parse_dataset_spec(dir.file("one.npz"));
  spec.purpose = dataset_spec::role::labels;
  spec.not_this = "x";
  EXPECT_EQ(open_dataset(spec)->dataset_path(), "y");
  // A member of another name that holds NPY data is the array numpy gives under that name
  // (`zip out.npz -` names one "-"); one that holds other bytes (a README) is no array.
  write_bytes(dir.file("plain.npz"), make_zip({{"README", std::string("not an array")},
                                                {"x", npy_u16({6, 8, 8})}}));
  s = open_npz(dir.file("plain.npz"));
  EXPECT_EQ(s->dataset_path(), "x");
  EXPECT_EQ(s->shape(), (std::vector<u64>{6, 8, 8}));
  write_bytes(dir.file("readme.npz"), make_zip({{"README", std::string("not an array")}}));
  e = error_of([&] { open_npz(dir.file("readme.npz")); });
  EXPECT_NE(std::string(e.what()).find("the file holds no array at all"), std::string::npos) << e.what();
}

TEST(Npz, AMissingOrNonNumericArrayIsRefusedNamingTheArraysThere) {
  auto e = error_of([] { open_npz(sample_npz("mnist_like.npz") + ":x_val"); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("no array named x_val (arrays: x_train, y_train, x_test, y_test)"),
            std::string::npos)
      << e.what();
  e = error_of([] { open_npz(sample_npz("misc.npz") + ":names"); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("misc.npz:names: dtype '<U5'"), std::string::npos) << e.what();
  // Every member is listed, one without .npy too, as np.load(file).files lists them; and
  // when one is chosen, one that cannot be read is said.
  temp_dir dir;
  write_bytes(dir.file("two.npz"),
              make_zip({{"a.npy", npy_u16({6, 8, 8})}, {"b", npy_u16({6, 8, 8})}}));
  e = error_of([&] { open_npz(dir.file("two.npz") + ":c"); });
  EXPECT_NE(std::string(e.what()).find("no array named c (arrays: a, b)"), std::string::npos)
      << e.what();
  write_bytes(dir.file("bad.npz"),
              make_zip({{"x.npy", std::string("garbage")}, {"a.npy", npy_u16({6, 8, 8})}}));
  auto s = open_npz(dir.file("bad.npz"));
  EXPECT_EQ(s->dataset_path(), "a");
  EXPECT_NE(s->note().find("(not readable as arrays here: x)"), std::string::npos) << s->note();
}

TEST(Npz, DamagedMembersAreRefusedOnceReadToTheEnd) {
  temp_dir dir;
  for (const std::string f : {"mnist_like.npz", "mnist_like_compressed.npz"}) {
    SCOPED_TRACE(f);
    const std::string copy = dir.file(f);
    write_bytes(copy, read_bytes(sample_npz(f)));
    // a byte three quarters into x_train's stored bytes (past the .npy header)
    const auto z = formats::detail::zip_reader::open(copy);
    const auto& m = z.members().at(0);
    ASSERT_EQ(m.name, "x_train.npy");
    const std::string local = read_bytes(copy).substr(m.header_offset, 30);
    const u64 data_at = m.header_offset + 30 + (std::uint8_t(local[26]) | std::uint8_t(local[27]) << 8) +
                        (std::uint8_t(local[28]) | std::uint8_t(local[29]) << 8);
    flip_byte(copy, data_at + m.compressed * 3 / 4, 0x10);
    auto x = open_npz(copy + ":x_train");
    std::vector<std::uint8_t> v(x->rows() * x->row_bytes());
    const auto e = error_of([&] { x->read_rows(0, x->rows(), v.data()); });
    EXPECT_EQ(e.code(), errc::bad_input);
    EXPECT_NE(std::string(e.what()).find(copy + ":x_train: damaged"), std::string::npos) << e.what();
  }
}

TEST(Npz, TruncatedAndForeignFilesAreRefusedWithTheirReason) {
  temp_dir dir;
  const std::string whole = read_bytes(sample_npz("mnist_like.npz"));
  auto why = [&](const std::string& bytes) {
    write_bytes(dir.file("f.npz"), bytes);
    const auto e = error_of([&] { open_npz(dir.file("f.npz") + ":x_train"); });
    EXPECT_EQ(e.code(), errc::bad_input) << e.what();
    return std::string(e.what());
  };
  EXPECT_NE(why(whole.substr(0, whole.size() - 30)).find("truncated .npz (ZIP) file"), std::string::npos);
  EXPECT_NE(why("").find("empty"), std::string::npos);
  EXPECT_NE(why(read_bytes(test::sample_npy("u8_nhwc.npy"))).find("is a .npy file"), std::string::npos);
  EXPECT_NE(why(std::string(100, 'z')).find("not a .npz file"), std::string::npos);
  // 200 bytes gone from the middle: the directory points past its own entries
  std::string cut = whole;
  cut.erase(whole.size() / 2, 200);
  EXPECT_NE(why(cut).find("ZIP"), std::string::npos);
}

// ---- ZIP files made here -------------------------------------------------------------------

TEST(Npz, Zip64DirectoriesAndDataDescriptorsAreRead) {
  temp_dir dir;
  const std::string a = npy_u16({4, 8, 8}), b = npy_u16({3, 5});
  for (zip_end end : {zip_end::plain, zip_end::zip64_max, zip_end::zip64_real}) {
    for (std::uint16_t method : {0, 8}) {
      SCOPED_TRACE(std::to_string(int(end)) + " " + std::to_string(method));
      zip_entry ea{"a.npy", a, method};
      ea.zip64 = true;
      zip_entry eb{"b.npy", b, method};
      eb.descriptor = true;
      zip_entry ec{"c.npy", b, method};
      ec.zip64_offset = true;
      std::string bytes = make_zip({ea, eb, ec}, end);
      if (method == 8) bytes += std::string(40, '\0');  // appended after the archive
      write_bytes(dir.file("z.npz"), bytes);
      EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("z.npz") + ":a")), iota_u16(256));
      EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("z.npz") + ":b")), iota_u16(15));
      EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("z.npz") + ":c")), iota_u16(15));
    }
  }
  // 65535 members fill the 16-bit count without a Zip64 record (Python writes none)
  std::vector<zip_entry> many(65534, zip_entry{"", ""});
  for (std::size_t i = 0; i < many.size(); ++i) many[i].name = std::to_string(i) + ".txt";
  many.push_back({"a.npy", a});
  write_bytes(dir.file("many.npz"), make_zip(many));
  EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("many.npz") + ":a")), iota_u16(256));
}

TEST(Npz, TrailingBytesInAMemberAreReadAndChecked) {
  temp_dir dir;
  const std::string a = npy_u16({4, 8, 8}) + "12345678";
  for (std::uint16_t method : {0, 8}) {
    SCOPED_TRACE(method);
    write_bytes(dir.file("z.npz"), make_zip({{"a.npy", a, method}}));
    EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("z.npz") + ":a")), iota_u16(256));
  }
  // a stored member damaged after its array: the CRC, once the last row is read
  std::string bytes = make_zip({{"a.npy", a, 0}});
  const auto at = bytes.find("12345678");
  bytes[at + 3] = 'x';
  write_bytes(dir.file("z.npz"), bytes);
  auto s = open_npz(dir.file("z.npz") + ":a");
  std::vector<std::uint16_t> v(256);
  s->read_rows(0, 3, v.data());
  const auto e = error_of([&] { s->read_rows(3, 1, v.data()); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("CRC-32"), std::string::npos) << e.what();
}

TEST(Npz, AFortranOrderArrayGatheredOutOfOrderStillHasItsCrcChecked) {
  temp_dir dir;
  const std::string copy = dir.file("misc.npz");
  write_bytes(copy, read_bytes(sample_npz("misc.npz")));
  const auto z = formats::detail::zip_reader::open(copy);
  const formats::detail::zip_member* m = nullptr;
  for (const auto& x : z.members())
    if (x.name == "fortran.npy") m = &x;
  ASSERT_NE(m, nullptr);
  flip_byte(copy, m->header_offset + m->compressed / 2 + 100, 0x01);  // in its data
  auto s = open_npz(copy + ":fortran");
  std::vector<std::uint8_t> v(s->rows() * s->row_bytes());
  const auto e = error_of([&] { s->read_rows(0, s->rows(), v.data()); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("fortran: damaged"), std::string::npos) << e.what();
}

TEST(Npz, DuplicateNamesTakeTheLastMemberAsNumpyDoes) {
  temp_dir dir;
  write_bytes(dir.file("d.npz"), make_zip({{"x.npy", npy_u16({2, 8, 8})}, {"x.npy", npy_u16({3, 8, 8})}}));
  EXPECT_EQ(open_npz(dir.file("d.npz") + ":x")->shape(), (std::vector<u64>{3, 8, 8}));
  EXPECT_EQ(open_npz(dir.file("d.npz") + ":x.npy")->shape(), (std::vector<u64>{3, 8, 8}));
  EXPECT_EQ(open_npz(dir.file("d.npz"))->shape(), (std::vector<u64>{3, 8, 8}));
}

TEST(Npz, AKeyFindsItsMemberAsNpLoadDoes) {
  // np.load(f)[key] is the member named key, else key.npy: np.savez(f, x=.., **{"x.npy.npy": ..})
  // writes x.npy and x.npy.npy.npy, and "x.npy.npy" is the second, not x.
  temp_dir dir;
  write_bytes(dir.file("k.npz"), make_zip({{"x.npy", npy_u16({2, 8, 8})},
                                           {"x.npy.npy.npy", npy_u16({3, 8, 8})},
                                           {"y", npy_u16({4, 8, 8})},
                                           {"y.npy", npy_u16({5, 8, 8})}}));
  const std::string f = dir.file("k.npz");
  EXPECT_EQ(open_npz(f + ":x")->shape(), (std::vector<u64>{2, 8, 8}));
  EXPECT_EQ(open_npz(f + ":x.npy")->shape(), (std::vector<u64>{2, 8, 8}));
  EXPECT_EQ(open_npz(f + ":x.npy.npy")->shape(), (std::vector<u64>{3, 8, 8}));
  EXPECT_EQ(open_npz(f + ":/x.npy.npy")->shape(), (std::vector<u64>{3, 8, 8}));
  EXPECT_EQ(open_npz(f + ":y")->shape(), (std::vector<u64>{4, 8, 8}));  // the member y itself
  EXPECT_EQ(open_npz(f + ":y.npy")->shape(), (std::vector<u64>{5, 8, 8}));
  // So y and y.npy are two names, and --dataset y.npy contradicts FILE.npz:y.
  EXPECT_THROW(formats::parse_dataset_spec(f + ":y", "y.npy"), error);
  EXPECT_EQ(formats::parse_dataset_spec(f + ":y", "/y").dataset, "y");
  // Unnamed, the arrays are listed as np.load's keys: y.npy by its whole name beside y, not
  // as a second "y" (which read the member y.npy when chosen, not the y a user names).
  write_bytes(dir.file("y.npz"), make_zip({{"y", npy_u16({4, 8, 8})}, {"y.npy", npy_u16({5, 8, 8})}}));
  const auto e = error_of([&] { open_npz(dir.file("y.npz")); });
  EXPECT_NE(std::string(e.what()).find("candidates: y (4, 8, 8), y.npy (5, 8, 8)"), std::string::npos) << e.what();
  EXPECT_EQ(open_npz(dir.file("y.npz") + ":y.npy")->dataset_path(), "y.npy");
  EXPECT_EQ(open_npz(dir.file("y.npz") + ":y")->dataset_path(), "y");
}

TEST(Npz, AnArrayThatCannotBeReadIsListedWithItsReason) {
  temp_dir dir;
  // numpy's void type ('|V1', written over the header's '|u1'), which is no number
  const auto h = formats::make_npy_header(formats::npy_dtype{'u', 1, false}, {4, 6, 6}, false);
  std::string voids = std::string(h.begin(), h.end()) + std::string(4 * 36, '\1');
  voids.replace(voids.find("|u1"), 3, "|V1");
  write_bytes(dir.file("f.npz"), make_zip({{"xf.npy", voids, 8}, {"xg.npy", voids, 8}}));
  auto e = error_of([&] { open_npz(dir.file("f.npz")); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_NE(std::string(e.what()).find("arrays: xf (unreadable: dtype '|V1'"),
            std::string::npos)
      << e.what();
  // the only array: its own error
  write_bytes(dir.file("f.npz"), make_zip({{"xf.npy", voids, 8}}));
  e = error_of([&] { open_npz(dir.file("f.npz")); });
  EXPECT_EQ(e.code(), errc::bad_input);
  EXPECT_EQ(std::string(e.what()).find(dir.file("f.npz") + ":xf: dtype '|V1'"), 0u) << e.what();
  // and a .npz handed over as a .npy says what it is
  write_bytes(dir.file("f.npy"), read_bytes(dir.file("f.npz")));
  const auto e2 = error_of([&] { formats::npy_reader::open(dir.file("f.npy")); });
  EXPECT_NE(std::string(e2.what()).find("is a ZIP file"), std::string::npos) << e2.what();
}

TEST(Npz, OtherMethodsEncryptionAndWrongSizesAreRefused) {
  temp_dir dir;
  const std::string a = npy_u16({4, 8, 8});
  auto why = [&](const zip_entry& e) {
    write_bytes(dir.file("z.npz"), make_zip({e}));
    try {
      auto s = open_npz(dir.file("z.npz") + ":a");
      std::vector<std::uint16_t> v(256);
      s->read_rows(0, 4, v.data());
    } catch (const error& err) {
      EXPECT_EQ(err.code(), errc::bad_input) << err.what();
      return std::string(err.what());
    }
    return std::string("no error");
  };
  zip_entry bz{"a.npy", a, 12};
  EXPECT_NE(why(bz).find("ZIP method 12"), std::string::npos);
  zip_entry enc{"a.npy", a, 0, 1};
  EXPECT_NE(why(enc).find("encrypted"), std::string::npos);
  zip_entry longer{"a.npy", a, 8};
  longer.size_error = 16;  // the directory records more than the stream holds
  EXPECT_NE(why(longer).find("ends after " + std::to_string(a.size())), std::string::npos);
  zip_entry shorter{"a.npy", a + std::string(16, 'x'), 8};
  shorter.size_error = -16;  // less: the stream holds more
  EXPECT_NE(why(shorter).find("holds more than"), std::string::npos);
  zip_entry stored_longer{"a.npy", a, 0};
  stored_longer.size_error = 16;
  EXPECT_NE(why(stored_longer).find("stored"), std::string::npos);
  // a recorded size that deflate cannot reach from the bytes stored: refused at open, before
  // it sizes anything
  zip_entry impossible{"a.npy", a, 8};
  impossible.size_error = std::int64_t(1) << 40;
  impossible.zip64 = true;
  EXPECT_NE(why(impossible).find("more than deflate can produce"), std::string::npos);
}

TEST(Npz, EachInflaterReadsDeflatedMembersAndRefusesDamagedOnes) {
  // Whichever inflater this build has besides zlib (ISA-L, the default where it is built in)
  // reads what zlib reads and refuses what zlib refuses. Over 1 MiB of compressed bytes, so
  // that the stream is fed in several pieces, and read in odd pieces.
  namespace zd = formats::detail;
  temp_dir dir;
  std::string data = npy_u16({64, 64, 64});  // 512 KiB that deflate shrinks
  std::uint64_t x = 7;
  for (int i = 0; i < (3 << 19); ++i) {  // 1.5 MiB that it cannot
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    data += static_cast<char>(x >> 56);
  }
  const std::string stream = raw_deflate(data);
  ASSERT_GT(stream.size(), std::size_t(1) << 20);
  std::vector<zd::inflater> built;
  for (auto w : {zd::inflater::zlib, zd::inflater::isal})
    if (zd::inflater_built(w)) built.push_back(w);
  ASSERT_EQ(built.front(), zd::inflater::zlib);
  EXPECT_EQ(zd::fastest_inflater(), built.back());
  for (const auto with : built) {
    SCOPED_TRACE(zd::inflater_name(with));
    const auto open = [&](const zip_entry& e) {
      write_bytes(dir.file("z.npz"), make_zip({e}));
      const auto z = zd::zip_reader::open(dir.file("z.npz"));
      return z.open_member(z.members().at(0), "z.npz:a", with);
    };
    const auto read_all_bytes = [](formats::detail::byte_source& src) {
      std::string got;
      const std::size_t pieces[] = {1, 7, 65537, 300000, 4096};
      for (int i = 0;; ++i) {
        std::string buf(pieces[i % 5], '\0');
        const std::size_t n = src.read(buf.data(), buf.size());
        got.append(buf, 0, n);
        if (n < buf.size()) return got;
      }
    };
    auto m = open({"a.npy", data, 8});
    EXPECT_EQ(read_all_bytes(*m), data);
    m->restart();  // from the start again: the same bytes, the CRC checked again
    EXPECT_EQ(read_all_bytes(*m), data);
    m->finish();
    const auto why = [&](const zip_entry& e) {
      try {
        auto src = open(e);
        read_all_bytes(*src);
        src->finish();
      } catch (const error& err) {
        EXPECT_EQ(err.code(), errc::bad_input) << err.what();
        EXPECT_EQ(std::string(err.what()).find("z.npz:a: damaged"), 0u) << err.what();
        return std::string(err.what());
      }
      return std::string("no error");
    };
    zip_entry longer{"a.npy", data, 8};
    longer.size_error = 16;  // the directory records more than the stream holds
    EXPECT_NE(why(longer).find("ends after " + std::to_string(data.size())), std::string::npos);
    zip_entry shorter{"a.npy", data, 8};
    shorter.size_error = -16;  // less: the stream holds more
    EXPECT_NE(why(shorter).find("holds more than"), std::string::npos);
    // The stream stops midway: in the random part (stored blocks), at its last byte, and in
    // a stream of compressible data only (Huffman-coded blocks, which each inflater reads
    // bits at a time).
    const std::string smooth = npy_u16({64, 64, 64});
    const std::string smooth_stream = raw_deflate(smooth);
    for (const auto& [values, whole, keep] :
         std::vector<std::tuple<std::string, std::string, std::size_t>>{
             {data, stream, stream.size() / 2},
             {data, stream, stream.size() - 1},
             {smooth, smooth_stream, smooth_stream.size() / 2}}) {
      zip_entry cut{"a.npy", values, 8};
      cut.stream = whole.substr(0, keep);
      EXPECT_NE(why(cut).find("its deflate stream stops "), std::string::npos) << keep << ": " << why(cut);
    }
    // A damaged stream: a block that does not decode, or decodes to other bytes (the CRC).
    for (const std::size_t at : {std::size_t(0), std::size_t(3), stream.size() / 3, stream.size() - 5}) {
      zip_entry bad{"a.npy", data, 8};
      bad.stream = stream;
      bad.stream[at] = static_cast<char>(bad.stream[at] ^ 0x55);
      EXPECT_NE(why(bad), "no error") << "a byte changed at " << at;
    }
    zip_entry garbage{"a.npy", data, 8};
    garbage.stream = std::string(4096, '\xff');  // not deflate at all
    EXPECT_NE(why(garbage).find("does not decode (" + std::string(zd::inflater_name(with))),
              std::string::npos) << why(garbage);
  }
}

// ---- the command ---------------------------------------------------------------------------

TEST(Npz, CommandCompressesImagesAndLabelsOfANpzAndTheyComeBackExactAtChop8) {
  temp_dir dir;
  for (const std::string f : {"mnist_like.npz", "mnist_like_compressed.npz"}) {
    SCOPED_TRACE(f);
    const std::string in = sh_quote(sample_npz(f));
    // the labels named, or found: the one array of 10 rows besides the images
    const std::string labels = f == "mnist_like.npz" ? in + ":y_train" : in;
    auto c = cli(dir, "compress " + in + ":x_train --labels " + labels + " -o a.dcz -f --chop 8 --json");
    ASSERT_EQ(c.status, 0) << describe(c);
    const auto j = nlohmann::json::parse(c.out);
    EXPECT_EQ(j["source"], sample_npz(f) + ":x_train");
    EXPECT_EQ(j["labels_source"], sample_npz(f) + ":y_train");
    if (f == "mnist_like.npz") {
      // (read as a file is: on the threads that --threads leaves, 2 where there are 2 cores)
      EXPECT_TRUE(j.value("reader", "").starts_with("a stored .npz member: read directly on "))
          << c.out;
    } else {
      EXPECT_EQ(j.value("reader", ""),
                std::string("a deflated .npz member, inflated by ") +
                    formats::detail::inflater_name(formats::detail::fastest_inflater()) +
                    " on one thread as it is read");
    }
    auto d = cli(dir, "decompress a.dcz -o x.npy --labels-out y.npy -f -q");
    ASSERT_EQ(d.status, 0) << describe(d);
    const auto x = load_npy(dir.file("x.npy"));
    EXPECT_EQ(x.header.shape, (std::vector<u64>{10, 28, 28}));
    const auto want = images_u8(10, 0);
    EXPECT_EQ(x.raw, bytes_of(want));
    EXPECT_EQ(load_npy(dir.file("y.npy")).raw, bytes_of({0, 3, 6, 9, 2, 5, 8, 1, 4, 7}));
  }
  // no array named among several: exit 2 with the candidates; a damaged member: exit 3
  auto c = cli(dir, "compress " + sh_quote(sample_npz("mnist_like.npz")) + " -o b.dcz");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_NE(c.err.find("candidates: x_train (10, 28, 28), x_test (4, 28, 28)"), std::string::npos) << c.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.dcz")));
  write_bytes(dir.file("bad.npz"), read_bytes(sample_npz("mnist_like.npz")));
  flip_byte(dir.file("bad.npz"), 4000, 0x10);
  c = cli(dir, "compress bad.npz:x_train -o b.dcz");
  EXPECT_EQ(c.status, 3) << describe(c);
  EXPECT_NE(c.err.find("bad.npz:x_train: damaged"), std::string::npos) << c.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.dcz")));
  // f32 in a deflated member: a pass for the range (SSIM needs it first), then the codec's pass,
  // each decoding the member from its start
  c = cli(dir, "compress " + sh_quote(sample_npz("misc_compressed.npz")) + ":images -o f.dcz --chop 8 --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  const auto jf = nlohmann::json::parse(c.out);
  EXPECT_GT(jf["quality"]["psnr_db"].get<double>(), 120.0);
  EXPECT_EQ(jf["quality"]["range"].get<double>(), 12.25);  // (49 * 0.25 - 3) - (-3)
  EXPECT_EQ(jf["quality"]["ssim_status"], "measured");
  // eval and verify read .npz too, and say which array they chose
  c = cli(dir, "eval " + sh_quote(sample_npz("mnist_like_compressed.npz")) + ":x_test --chop 2,4 --json");
  EXPECT_EQ(c.status, 0) << describe(c);
  c = cli(dir, "eval " + sh_quote(sample_npz("misc.npz")) + " --chop 4 --json");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(
      nlohmann::json::parse(c.out)["notes"][0],
      "using array images of " + sample_npz("misc.npz") + " (not readable as arrays here: names)");
  c = cli(dir, "compress " + sh_quote(sample_npz("misc.npz")) + " -o m.dcz -q && " + test::dctchop_bin() +
                   " verify m.dcz --against " + sh_quote(sample_npz("misc.npz")));
  EXPECT_EQ(c.status, 0) << describe(c);
  EXPECT_NE(c.err.find("using array images of"), std::string::npos) << c.err;
}

TEST(Npz, LabelsOfZeroBytesARowKeepTheirMembersCrc) {
  // Labels of shape (6, 0): every piece of rows is empty, and an empty write made the CRC
  // start over (libdeflate_crc32 of a null buffer), so numpy refused the member (BadZipFile).
  temp_dir dir;
  test::save_npy(dir.file("x.npy"), dtype::u8, {6, 8, 8}, std::vector<std::uint8_t>(384, 7));
  auto w = formats::npy_writer::create(dir.file("y.npy"), *formats::parse_npy_descr("<i8"), {6, 0},
                                       false);
  const std::int64_t none = 0;
  w.write_rows(&none, 6);  // (no bytes)
  w.finish();
  auto c = cli(dir, "compress x.npy --labels y.npy -o a.dcz -q");
  ASSERT_EQ(c.status, 0) << test::describe(c);
  c = cli(dir, "decompress a.dcz -o o.npz -q");
  ASSERT_EQ(c.status, 0) << test::describe(c);
  auto py = test::run_sh("/usr/bin/python3 -c \"import numpy as np, zipfile; "
                         "assert zipfile.ZipFile('o.npz').testzip() is None; "
                         "l = np.load('o.npz')['labels']; assert l.shape == (6, 0), l.shape\"",
                         dir.path());
  EXPECT_EQ(py.status, 0) << test::describe(py);
  auto back = cli(dir, "compress o.npz:data --labels o.npz:labels -o b.dcz -q");
  EXPECT_EQ(back.status, 0) << test::describe(back);
}

TEST(Npz, DecompressWritesAnNpzThatNumpyLoadsWithDataAndLabels) {
  temp_dir dir;
  const std::string in = sh_quote(sample_npz("mnist_like.npz"));
  auto c = cli(dir, "compress " + in + ":x_train --labels " + in + ":y_train -o a.dcz --chop 8 -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  c = cli(dir, "decompress a.dcz -o back.npz -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  c = cli(dir, "decompress a.dcz -o named.npz:x_train --labels-out named.npz:y_train -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  // --labels-out naming a file of their own puts them there only, not in the data's .npz too.
  c = cli(dir, "decompress a.dcz -o own.npz -q --labels-out own_labels.npz");
  ASSERT_EQ(c.status, 0) << describe(c);
  // numpy (through zipfile, which checks each member's CRC-32) reads what was written
  const std::string check =
      "import numpy as np, zipfile, sys\n"
      "src = np.load(sys.argv[1])\n"
      "for f, x, y in (('back.npz', 'data', 'labels'), ('named.npz', 'x_train', 'y_train')):\n"
      "    assert zipfile.ZipFile(f).testzip() is None, f\n"
      "    d = np.load(f)\n"
      "    assert sorted(d.files) == sorted([x, y]), d.files\n"
      "    assert d[x].dtype == np.uint8 and np.array_equal(d[x], src['x_train']), f\n"
      "    assert np.array_equal(d[y], src['y_train']), f\n"
      "assert np.load('own.npz').files == ['data'], np.load('own.npz').files\n"
      "assert np.array_equal(np.load('own_labels.npz')['labels'], src['y_train'])\n"
      "print('ok')\n";
  write_bytes(dir.file("check.py"), check);
  c = test::run_sh("/usr/bin/python3 check.py " + in, dir.path());
  EXPECT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(c.out, "ok\n");
  // and dctchop reads it back
  EXPECT_EQ(read_all<std::uint8_t>(*open_npz(dir.file("back.npz") + ":data")), images_u8(10, 0));
  // the labels cannot take the data's name; a sample range; an existing output needs -f
  c = cli(dir, "decompress a.dcz -o c.npz --labels-out c.npz:data");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_FALSE(std::filesystem::exists(dir.file("c.npz")));
  c = cli(dir, "decompress a.dcz -o back.npz --samples 3:5");
  EXPECT_EQ(c.status, 6) << describe(c);
  c = cli(dir, "decompress a.dcz -o back.npz --samples 3:5 -f -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  auto part = open_npz(dir.file("back.npz") + ":labels");
  EXPECT_EQ(read_all<std::uint8_t>(*part), (std::vector<std::uint8_t>{9, 2}));
  // output names are keys as input names are (x.npy and /y are x and y), so a clash is seen
  // through them; a name that is not ASCII is flagged UTF-8, which numpy decodes
  c = cli(dir, "decompress a.dcz -o n.npz:x.npy --labels-out n.npz:/y -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  c = cli(dir, "decompress a.dcz -o m.npz:a --labels-out m.npz:a.npy -q");
  EXPECT_EQ(c.status, 2) << describe(c);
  c = cli(dir, "decompress a.dcz -o m.npz:. -q");
  EXPECT_EQ(c.status, 2) << describe(c);
  // a name with an empty part (a trailing '/': a member "a/.npy", hidden in a folder) names
  // no array
  for (const char* bad : {"-o m.npz:a/", "-o m.npz --labels-out m.npz:y//z", "-o 'm.npz:a\\'"}) {
    c = cli(dir, std::string("decompress a.dcz ") + bad + " -q");
    EXPECT_EQ(c.status, 2) << bad << ": " << describe(c);
    EXPECT_NE(c.err.find("has an empty part"), std::string::npos) << describe(c);
    EXPECT_FALSE(std::filesystem::exists(dir.file("m.npz"))) << bad;
  }
  // a member that would unzip outside the file's folder is refused before any work, data or
  // labels, in a file of their own too; a folder inside the file is a name like another
  for (const char* bad : {"-o m.npz:../x", "-o m.npz:/../x", "-o 'm.npz:a\\..\\..\\x'",
                          "-o m.npz --labels-out m.npz:a/../../y",
                          "-o m.npy --labels-out l.npz:../y"}) {
    c = cli(dir, std::string("decompress a.dcz ") + bad + " -q");
    EXPECT_EQ(c.status, 2) << bad << ": " << describe(c);
    EXPECT_NE(c.err.find("would unzip outside the file's folder"), std::string::npos) << describe(c);
    EXPECT_FALSE(std::filesystem::exists(dir.file("m.npz")) ||
                 std::filesystem::exists(dir.file("m.npy")) ||
                 std::filesystem::exists(dir.file("l.npz"))) << bad;
  }
  c = cli(dir, "decompress a.dcz -o f.npz:train/x..y --labels-out f.npz:train/y -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(read_all<std::uint8_t>(*open_npz(dir.file("f.npz") + ":train/y")),
            read_all<std::uint8_t>(*open_npz(dir.file("named.npz") + ":y_train")));
  c = cli(dir, "decompress a.dcz -o 'u.npz:\xc3\xbcn\xc3\xaf' -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  write_bytes(dir.file("keys.py"),
              "import numpy as np, zipfile\n"
              "print(sorted(np.load('n.npz').files), sorted(np.load('u.npz').files) == ['labels', '\xc3\xbcn\xc3\xaf'])\n"
              // Made on Unix, as Python's zipfile says, so that Info-ZIP's unzip honours the
              // UTF-8 flag (made on MS-DOS, it unzipped the name as code page 437), as a file
              // of mode 644.
              "print(sorted({(i.create_system, oct(i.external_attr >> 16)) for i in zipfile.ZipFile('u.npz').infolist()}))\n");
  c = test::run_sh("/usr/bin/python3 keys.py", dir.path());
  EXPECT_EQ(c.out, "['x', 'y'] True\n[(3, '0o100644')]\n") << describe(c);
  // A name that is not UTF-8 (Latin-1 bytes, an overlong form, a surrogate, past U+10FFFF,
  // cut short) is refused before any work, for the data and the labels: flagged UTF-8, it
  // made numpy refuse the whole file, labels and all.
  for (const char* bad : {"\xe9t\xe9", "a\xc0\xaf" "b", "\xed\xa0\x80", "x\xf4\x90\x80\x80",
                          "y\xe2\x82"}) {
    for (const std::string& out : {"-o 'l.npz:" + std::string(bad) + "'",
                                  "-o l.npz --labels-out 'l.npz:" + std::string(bad) + "'",
                                  "-o m.npy --labels-out 'l.npz:" + std::string(bad) + "'"}) {
      c = cli(dir, "decompress a.dcz " + out + " -q");
      EXPECT_EQ(c.status, 2) << describe(c);
      EXPECT_NE(c.err.find("l.npz: the array name '"), std::string::npos) << describe(c);
      EXPECT_NE(c.err.find("' is not UTF-8, and numpy would refuse the whole file"),
                std::string::npos) << describe(c);
      EXPECT_FALSE(std::filesystem::exists(dir.file("l.npz")) ||
                   std::filesystem::exists(dir.file("m.npy"))) << out;
    }
  }
  // a --labels-out file appears only after the data's output: when the data cannot be written
  // (past ulimit -f), neither is left
  c = test::run_sh("ulimit -f 8; " + test::dctchop_bin() +
                       " decompress a.dcz -o big.npy --labels-out l.npy -q",
                   dir.path());
  EXPECT_EQ(c.status, 5) << describe(c);
  EXPECT_FALSE(std::filesystem::exists(dir.file("big.npy")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("l.npy")));
}

TEST(Npz, TheWritersZip64FieldsAreReadByDctchopAndByNumpy) {
  temp_dir dir;
  // Zip64 sizes, offsets and end records from 100 bytes on, so a small file has them all
  {
    auto out = formats::output_file::create(dir.file("z64.npz"), false);
    formats::detail::zip_writer z(out, 100);
    for (const char* name : {"a.npy", "b.npy"}) {
      z.begin_member(name);
      const std::string a = npy_u16({4, 8, 8});
      z.write(a.data(), a.size());
      z.end_member();
    }
    z.finish();
    out.commit();
  }
  const std::string bytes = read_bytes(dir.file("z64.npz"));
  EXPECT_NE(bytes.find(std::string("PK\6\6", 4)), std::string::npos) << "a Zip64 end record";
  EXPECT_EQ(read_all<std::uint16_t>(*open_npz(dir.file("z64.npz") + ":b")), iota_u16(256));
  write_bytes(dir.file("check.py"),
              "import numpy as np, zipfile\n"
              "z = zipfile.ZipFile('z64.npz')\n"
              "assert z.testzip() is None\n"
              "assert [i.header_offset > 0 for i in z.infolist()] == [False, True]\n"
              "d = np.load('z64.npz')\n"
              "assert np.array_equal(d['b'].ravel(), np.arange(256, dtype=np.uint16))\n"
              "print('ok')\n");
  const auto c = test::run_sh("/usr/bin/python3 check.py", dir.path());
  EXPECT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(c.out, "ok\n");
}

}  // namespace
