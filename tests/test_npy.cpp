// Tests of the .npy reader and writer against files written by NumPy
// (sample_data/npy/make_npy_samples.py; the value formulas below are the script's).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/npy.hpp"

#ifndef DCTCHOP_SAMPLE_DIR
#error "DCTCHOP_SAMPLE_DIR must name the sample_data folder"
#endif

namespace fs = std::filesystem;
using dctchop::errc;
using dctchop::error;
using dctchop::formats::make_npy_header;
using dctchop::formats::npy_dtype;
using dctchop::formats::npy_reader;
using dctchop::formats::npy_writer;
using dctchop::formats::parse_npy_descr;

namespace {

std::string sample(const std::string& name) {
  return std::string(DCTCHOP_SAMPLE_DIR) + "/npy/" + name;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/** A fresh folder under the system temp folder, removed with everything in it. */
class temp_dir {
 public:
  temp_dir() {
    static int counter = 0;
    const char* base = std::getenv("DCTCHOP_TMP");  // set by ctest to a folder in the build tree
    path_ = (base != nullptr && *base != '\0' ? fs::path(base) : fs::temp_directory_path()) /
            ("dctchop_test_npy_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/** A .npy file from a header dict written verbatim (framed and padded like numpy) and data. */
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  const std::size_t hlen = header.size() + 1;
  header.append(64 - (6 + 2 + len_bytes + hlen) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < len_bytes; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::vector<T> read_all(npy_reader& r) {
  const auto& h = r.header();
  EXPECT_EQ(h.row_bytes() % sizeof(T), 0u);
  std::vector<T> v(h.count());
  r.read_rows(0, r.rows(), v.data());
  return v;
}

/** Expect `fn` to throw dctchop::error with `code` and a one-line message containing each of
 *  `texts`. */
template <typename Fn>
void expect_error(Fn fn, errc code, const std::vector<std::string>& texts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one containing \"" << texts.at(0) << "\"";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& text : texts) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

template <typename Fn>
void expect_error(Fn fn, errc code, const std::string& text) {
  expect_error(fn, code, std::vector<std::string>{text});
}

/** Standard input replaced by a pipe holding `bytes` (under 64 KiB) for the object's life. */
class stdin_from_bytes {
 public:
  explicit stdin_from_bytes(const std::string& bytes) {
    int p[2];
    if (::pipe(p) != 0) throw std::runtime_error("pipe failed");
    EXPECT_LT(bytes.size(), 60000u);  // must fit the pipe buffer: nobody reads yet
    const auto n = ::write(p[1], bytes.data(), bytes.size());
    EXPECT_EQ(n, static_cast<ssize_t>(bytes.size()));
    ::close(p[1]);
    saved_ = ::dup(STDIN_FILENO);
    ::dup2(p[0], STDIN_FILENO);
    ::close(p[0]);
  }
  ~stdin_from_bytes() {
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
  }
  stdin_from_bytes(const stdin_from_bytes&) = delete;
  stdin_from_bytes& operator=(const stdin_from_bytes&) = delete;

 private:
  int saved_ = -1;
};

// Value formulas shared with make_npy_samples.py.
std::uint8_t u8_nhwc_value(int n, int h, int w, int c) {
  return (n * 31 + h * 7 + w * 3 + c) % 256;
}
float f32_nhw_value(int n, int h, int w) {
  return (n * 100 + h * 10 + w) * 0.5f - 3.25f;
}
std::uint16_t u16_be_value(int r, int c) {
  return static_cast<std::uint16_t>(r * 4096 + c * 257 + 258);
}

}  // namespace

// ---------------------------------------------------------------- reading NumPy's files

TEST(NpyReader, ReadsU8NhwcValuesShapeAndDtype) {
  auto r = npy_reader::open(sample("u8_nhwc.npy"));
  const auto& h = r.header();
  EXPECT_EQ(h.major, 1);
  EXPECT_EQ(h.type.kind, 'u');
  EXPECT_EQ(h.type.itemsize, 1u);
  EXPECT_EQ(h.type.codec_dtype(), dctchop::dtype::u8);
  EXPECT_EQ(h.shape, (std::vector<std::uint64_t>{2, 8, 8, 3}));
  EXPECT_FALSE(h.fortran_order);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(r.rows(), 2u);
  EXPECT_EQ(h.row_bytes(), 8u * 8 * 3);
  const auto v = read_all<std::uint8_t>(r);
  std::size_t i = 0;
  for (int n = 0; n < 2; ++n)
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x)
        for (int c = 0; c < 3; ++c) ASSERT_EQ(v[i++], u8_nhwc_value(n, y, x, c)) << i;
}

TEST(NpyReader, ReadsARangeOfRowsFromTheMiddle) {
  auto r = npy_reader::open(sample("f32_nhw.npy"));
  EXPECT_EQ(r.header().shape, (std::vector<std::uint64_t>{2, 5, 7}));
  EXPECT_EQ(r.header().type.codec_dtype(), dctchop::dtype::f32);
  std::vector<float> row(5 * 7);
  r.read_rows(1, 1, row.data());
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x) EXPECT_EQ(row[y * 7 + x], f32_nhw_value(1, y, x));
  r.read_rows(0, 1, row.data());  // random access on a file: any order
  EXPECT_EQ(row[3], f32_nhw_value(0, 0, 3));
}

TEST(NpyReader, ConvertsBigEndianToNative) {
  auto r = npy_reader::open(sample("u16_be.npy"));
  EXPECT_TRUE(r.header().type.big_endian);
  EXPECT_EQ(r.header().type.native_descr(), "<u2");
  const auto v = read_all<std::uint16_t>(r);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_EQ(v[y * 4 + x], u16_be_value(y, x));
}

TEST(NpyReader, GathersFortranOrderIntoCOrder2d) {
  auto r = npy_reader::open(sample("f32_fortran.npy"));
  EXPECT_TRUE(r.header().fortran_order);
  const auto v = read_all<float>(r);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 5; ++x) EXPECT_EQ(v[y * 5 + x], y * 10 + x + 0.5f) << y << "," << x;
  std::vector<float> part(2 * 5);
  r.read_rows(1, 2, part.data());
  for (int y = 1; y < 3; ++y)
    for (int x = 0; x < 5; ++x) EXPECT_EQ(part[(y - 1) * 5 + x], y * 10 + x + 0.5f);
}

TEST(NpyReader, GathersFortranOrderIntoCOrder3d) {
  auto r = npy_reader::open(sample("f32_fortran_3d.npy"));
  EXPECT_TRUE(r.header().fortran_order);
  EXPECT_EQ(r.header().shape, (std::vector<std::uint64_t>{2, 3, 4}));
  const auto v = read_all<float>(r);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(v[(i * 3 + j) * 4 + k], i * 100 + j * 10 + k);
  std::vector<float> row(12);
  r.read_rows(1, 1, row.data());
  EXPECT_EQ(row[0], 100.0f);
  EXPECT_EQ(row[11], 123.0f);
}

TEST(NpyReader, AFortranOrderFileIsGatheredWithReadsNotThroughAMapOfTheFile) {
  // Through a map, every page that a gather touched (and the kernel's fault-around about
  // them) stayed in the process's resident set: 381 MB to compress a 300 MB array, where
  // a C-order one is read with pread in about 120. Nothing of the file is mapped now.
  temp_dir dir;
  const std::vector<std::uint64_t> shape{300, 7, 5};
  std::vector<std::uint16_t> fortran(300 * 7 * 5);
  for (std::size_t i = 0; i < fortran.size(); ++i) fortran[i] = static_cast<std::uint16_t>(i);
  const auto header = make_npy_header(npy_dtype{'u', 2, false}, shape, true);
  std::string bytes(header.begin(), header.end());
  bytes.append(reinterpret_cast<const char*>(fortran.data()), fortran.size() * 2);
  write_file_bytes(dir.file("f.npy"), bytes);
  auto r = npy_reader::open(dir.file("f.npy"));
  std::vector<std::uint16_t> rows(100 * 35);
  r.read_rows(150, 100, rows.data());
  for (std::uint64_t i = 0; i < 100; ++i)
    for (std::uint64_t j = 0; j < 35; ++j) {  // element (150 + i, a, b) at i0 + 300 (a + 7 b)
      const std::uint64_t a = j / 5, b = j % 5;
      ASSERT_EQ(rows[i * 35 + j], static_cast<std::uint16_t>(150 + i + 300 * (a + 7 * b)))
          << i << "," << j;
    }
  const std::string maps = read_file_bytes("/proc/self/maps");
  const std::string canonical = std::filesystem::canonical(dir.file("f.npy")).string();
  EXPECT_EQ(maps.find(canonical), std::string::npos) << maps;
}

TEST(NpyReader, FortranOrderGathersEqualCOrderForRunsCloseTogetherAndFarApart) {
  // Runs of a column's rows lie shape[0] values apart: read a MiB of the file at a time when
  // that is at most 16 KiB (a read per run of a few bytes was 10 to 30 times slower), one
  // read each when farther. Random shapes of 2 to 4 axes, random row ranges, both sides.
  temp_dir dir;
  std::mt19937_64 rng(11);
  struct case_t {
    std::vector<std::uint64_t> shape;
  };
  const std::vector<case_t> cases = {{{4, 3, 700}},  {{2, 1, 9000}}, {{5000, 3, 2}},
                                     {{4100, 2, 3}}, {{7, 5, 4, 3}}, {{3, 6000}}};
  for (const auto& c : cases) {
    std::uint64_t n = 1;
    for (auto d : c.shape) n *= d;
    std::vector<std::uint32_t> fortran(n);  // value = its C-order index
    // C index of Fortran position f: decompose f with axis 0 fastest.
    for (std::uint64_t f = 0; f < n; ++f) {
      std::uint64_t rest = f, cindex = 0, cstride = n;
      std::vector<std::uint64_t> ix(c.shape.size());
      for (std::size_t a = 0; a < c.shape.size(); ++a) {
        ix[a] = rest % c.shape[a];
        rest /= c.shape[a];
      }
      for (std::size_t a = 0; a < c.shape.size(); ++a) {
        cstride /= c.shape[a];
        cindex += ix[a] * cstride;
      }
      fortran[f] = static_cast<std::uint32_t>(cindex);
    }
    const auto header = make_npy_header(npy_dtype{'u', 4, false}, c.shape, true);
    std::string bytes(header.begin(), header.end());
    bytes.append(reinterpret_cast<const char*>(fortran.data()), n * 4);
    write_file_bytes(dir.file("f.npy"), bytes);
    auto r = npy_reader::open(dir.file("f.npy"));
    const std::uint64_t rows = c.shape[0], per_row = n / rows;
    for (int trial = 0; trial < 4; ++trial) {
      const std::uint64_t first = trial == 0 ? 0 : rng() % rows;
      const std::uint64_t count = trial == 0 ? rows : 1 + rng() % (rows - first);
      std::vector<std::uint32_t> got(count * per_row);
      r.read_rows(first, count, got.data());
      for (std::uint64_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], first * per_row + i) << "shape[0] " << rows << " rows " << first << "+"
                                               << count << " at " << i;
      }
    }
  }
}

TEST(NpyReader, AMovedFromReaderThrowsOnUseNotANullDereference) {
  auto r = npy_reader::open(sample("f32_fortran.npy"));
  npy_reader moved = std::move(r);
  std::vector<float> row(5);
  try {
    r.read_rows(0, 1, row.data());  // NOLINT(bugprone-use-after-move): what is tested
    ADD_FAILURE() << "a moved-from reader read";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
  }
  moved.read_rows(0, 1, row.data());
  EXPECT_EQ(row[0], 0.5f);
}

TEST(NpyReader, GathersBigEndianFortranOrderAndSwaps) {
  // (3, 2, 4) '>i4' in Fortran order, built by hand: value = i*100 + j*10 + k - 50.
  temp_dir dir;
  const std::vector<std::uint64_t> shape{3, 2, 4};
  npy_dtype t{'i', 4, true};
  const auto header = make_npy_header(t, shape, true);
  std::string bytes(header.begin(), header.end());
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 3; ++i) {
        const auto v = static_cast<std::uint32_t>(i * 100 + j * 10 + k - 50);
        for (int b = 3; b >= 0; --b) bytes += static_cast<char>((v >> (8 * b)) & 0xff);
      }
  write_file_bytes(dir.file("f.npy"), bytes);
  auto r = npy_reader::open(dir.file("f.npy"));
  std::vector<std::int32_t> v(2 * 2 * 4);
  r.read_rows(1, 2, v.data());
  for (int i = 1; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(v[((i - 1) * 2 + j) * 4 + k], i * 100 + j * 10 + k - 50);
}

TEST(NpyReader, ReadsFormatVersions2And3) {
  auto r2 = npy_reader::open(sample("v2.npy"));
  EXPECT_EQ(r2.header().major, 2);
  EXPECT_EQ(r2.header().data_offset % 64, 0u);
  const auto v2 = read_all<std::int16_t>(r2);
  ASSERT_EQ(v2.size(), 15u);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x) EXPECT_EQ(v2[y * 5 + x], (y * 5 + x) * -7 + 3);

  auto r3 = npy_reader::open(sample("v3.npy"));
  EXPECT_EQ(r3.header().major, 3);
  EXPECT_EQ(r3.header().type.codec_dtype(), dctchop::dtype::f64);
  const auto v3 = read_all<double>(r3);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) EXPECT_EQ(v3[y * 3 + x], y * 3 + x + 0.125);
}

TEST(NpyReader, OneDimensionalRowsAreElements) {
  auto r = npy_reader::open(sample("labels_i64.npy"));
  EXPECT_EQ(r.rows(), 10u);
  EXPECT_EQ(r.header().row_bytes(), 8u);
  EXPECT_FALSE(r.header().type.codec_dtype().has_value());
  std::vector<std::int64_t> v(3);
  r.read_rows(7, 3, v.data());
  for (int i = 7; i < 10; ++i) EXPECT_EQ(v[i - 7], (i - 5) * std::int64_t{1000000007000});
  std::int64_t first = 0;
  r.read_rows(0, 1, &first);
  EXPECT_EQ(first, -5 * std::int64_t{1000000007000});
}

TEST(NpyReader, ZeroDimensionalArrayIsOneRow) {
  auto r = npy_reader::open(sample("scalar_f64.npy"));
  EXPECT_TRUE(r.header().shape.empty());
  EXPECT_EQ(r.rows(), 1u);
  EXPECT_EQ(r.header().count(), 1u);
  double v = 0;
  r.read_rows(0, 1, &v);
  EXPECT_EQ(v, 2.5);
}

TEST(NpyReader, RefusesRowsOutOfRange) {
  auto r = npy_reader::open(sample("f32_nhw.npy"));
  std::vector<float> buf(5 * 7 * 2);
  expect_error([&] { r.read_rows(1, 2, buf.data()); }, errc::invalid_argument, "out of range");
  expect_error([&] { r.read_rows(3, 0, buf.data()); }, errc::invalid_argument, "out of range");
  expect_error([&] { r.read_rows(1, UINT64_MAX, buf.data()); }, errc::invalid_argument,
               "out of range");
}

TEST(NpyReader, MovedReaderKeepsWorking) {
  auto a = npy_reader::open(sample("u16_be.npy"));
  npy_reader b = std::move(a);
  std::uint16_t v[4];
  b.read_rows(2, 1, v);
  EXPECT_EQ(v[3], u16_be_value(2, 3));
  EXPECT_EQ(b.display_name(), sample("u16_be.npy"));
}

// ---------------------------------------------------------------- broken inputs

struct broken_case {
  const char* file;
  const char* text;  // part of the message after the file name
};

class NpyBrokenFile : public ::testing::TestWithParam<broken_case> {};

TEST_P(NpyBrokenFile, IsRefusedAsBadInputNamingTheFile) {
  const std::string path = sample(std::string("broken/") + GetParam().file);
  ASSERT_TRUE(fs::exists(path)) << path;
  try {
    auto r = npy_reader::open(path);
    // Anything not caught at open must be caught when reading the data.
    std::vector<char> buf(r.header().count() * r.header().type.itemsize);
    r.read_rows(0, r.rows(), buf.data());
    ADD_FAILURE() << path << " was accepted";
  } catch (const error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), errc::bad_input) << msg;
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(GetParam().text), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(SampleData, NpyBrokenFile,
                         ::testing::Values(broken_case{"truncated.npy", "truncated"},
                                           broken_case{"object.npy", "object"},
                                           broken_case{"bad_magic.npy", "magic"},
                                           broken_case{"structured.npy", "structured"},
                                           broken_case{"bad_header.npy", "malformed"},
                                           broken_case{"bad_version.npy", "version 9.0"},
                                           broken_case{"complex.npy", "complex arrays are not supported (data: int8, uint8, int16, uint16, int32, uint32, float16, float32, float64; labels"}),
                         [](const auto& info) {
                           std::string n = info.param.file;
                           return n.substr(0, n.find('.'));
                         });

TEST(NpyReader, ALongDoubleArrayIsNamedForWhatItIsNotFloat16) {
  // numpy writes np.longdouble as '<f16' on x86-64: not float16, which dctchop reads as labels.
  temp_dir dir;
  const std::string p = dir.file("ld.npy");
  write_file_bytes(p, npy_bytes("{'descr': '<f16', 'fortran_order': False, 'shape': (1, 8, 8), }",
                                std::string(1024, '\0')));
  expect_error([&] { npy_reader::open(p); }, errc::bad_input,
               "dtype '<f16': long double (np.longdouble, float128) arrays are not supported");
}

TEST(NpyReader, RefusesAnEmptyOrTinyFile) {
  temp_dir dir;
  write_file_bytes(dir.file("empty.npy"), "");
  expect_error([&] { npy_reader::open(dir.file("empty.npy")); }, errc::bad_input, "empty (0 bytes)");
  write_file_bytes(dir.file("short.npy"), std::string("\x93NUMPY\x01", 7));
  expect_error([&] { npy_reader::open(dir.file("short.npy")); }, errc::bad_input, "truncated");
  write_file_bytes(dir.file("nohdr.npy"), std::string("\x93NUMPY\x01\x00\x76\x00{'de", 14));
  expect_error([&] { npy_reader::open(dir.file("nohdr.npy")); }, errc::bad_input, "truncated");
}

TEST(NpyReader, RefusesAShapeWhoseSizeOverflows) {
  temp_dir dir;
  const std::string p = dir.file("huge.npy");
  write_file_bytes(p, npy_bytes("{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (4294967296, 4294967296, 2), }",
                                ""));
  expect_error([&] { npy_reader::open(p); }, errc::bad_input, "too large");
  write_file_bytes(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, "
                                "'shape': (4611686018427387904,), }",
                                ""));
  expect_error([&] { npy_reader::open(p); }, errc::bad_input, "too large");
  write_file_bytes(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, "
                                "'shape': (99999999999999999999999,), }",
                                ""));
  expect_error([&] { npy_reader::open(p); }, errc::bad_input, "too large");
}

// ---------------------------------------------------------------- the header dict

TEST(NpyHeaderParse, AcceptsKeysInAnyOrderSpacingQuotesAndTrailingCommas) {
  temp_dir dir;
  const std::string data("\x01\x00\x02\x00\x03\x00", 6);
  const char* dicts[] = {
      "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }",
      "{'shape': (3,), 'fortran_order': False, 'descr': '<u2'}",
      "{ \"fortran_order\" :False ,\"shape\":( 3 , ),'descr':\"<u2\" , }",
      "{'descr':'<u2','fortran_order':False,'shape':(3L,)}",
      "{'descr': '<u2', 'fortran_order': False, 'shape': (3)}",
      "\n{'descr': '<u2',\n 'fortran_order': False,\n 'shape': (3,),\n}\t",
  };
  for (const char* d : dicts) {
    SCOPED_TRACE(d);
    write_file_bytes(dir.file("h.npy"), npy_bytes(d, data));
    auto r = npy_reader::open(dir.file("h.npy"));
    EXPECT_EQ(r.header().shape, (std::vector<std::uint64_t>{3}));
    const auto v = read_all<std::uint16_t>(r);
    EXPECT_EQ(v, (std::vector<std::uint16_t>{1, 2, 3}));
  }
}

TEST(NpyHeaderParse, AcceptsEmptyAndMultiAxisShapes) {
  temp_dir dir;
  write_file_bytes(dir.file("a.npy"),
                   npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", "A"));
  EXPECT_TRUE(npy_reader::open(dir.file("a.npy")).header().shape.empty());
  write_file_bytes(dir.file("b.npy"),
                   npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 0, 3), }", ""));
  auto r = npy_reader::open(dir.file("b.npy"));
  EXPECT_EQ(r.header().shape, (std::vector<std::uint64_t>{2, 0, 3}));
  EXPECT_EQ(r.header().count(), 0u);
  EXPECT_EQ(r.header().row_bytes(), 0u);
  r.read_rows(0, 2, nullptr);  // zero bytes to copy
}

TEST(NpyHeaderParse, RefusesMalformedDicts) {
  temp_dir dir;
  const std::string p = dir.file("bad.npy");
  const std::string data(64, '\0');
  struct {
    const char* dict;
    const char* text;
  } cases[] = {
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'descr': '<f4', 'shape': (2,)}", "missing key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (2,)}", "missing key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "unexpected key"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", "duplicate"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}", "malformed"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "malformed"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "after the closing"},
      {"['descr', '<f4']", "malformed"},
      {"{'descr: '<f4', 'fortran_order': False, 'shape': (2,)}", "malformed"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "malformed"},
      {"", "malformed"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.dict);
    write_file_bytes(p, npy_bytes(c.dict, data));
    expect_error([&] { npy_reader::open(p); }, errc::bad_input, {p + ": ", c.text});
  }
}

TEST(NpyHeaderParse, RefusesNonNumericDescrs) {
  temp_dir dir;
  const std::string p = dir.file("d.npy");
  for (const char* descr :
       {"|O", "<U5", "|S3", "|V8", "<c16", "<M8[ns]", "<m8[s]", "<f16", "<i3", "xyz", ""}) {
    SCOPED_TRACE(descr);
    write_file_bytes(p, npy_bytes(std::string("{'descr': '") + descr +
                                      "', 'fortran_order': False, 'shape': (1,), }",
                                  std::string(16, '\0')));
    expect_error([&] { npy_reader::open(p); }, errc::bad_input, "dtype");
  }
}

TEST(NpyHeaderParse, MessagesQuoteAHeadersBytesAsTheyAreNotAsQuestionMarks) {
  // '<f4\x1b[31m' was shown as '<f4?[31m', and a key caf\xe9 as 'caf?': which byte was there
  // was lost. The message holds the bytes; the command prints them escaped (test_cli) and
  // --json as they are, as it does names from anywhere.
  temp_dir dir;
  const std::string p = dir.file("e.npy");
  write_file_bytes(p, npy_bytes("{'descr': '<f4\x1b[31m', 'fortran_order': False, 'shape': (1,), }",
                                std::string(16, '\0')));
  expect_error([&] { npy_reader::open(p); }, errc::bad_input, "dtype '<f4\x1b[31m'");
  write_file_bytes(p, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                "'caf\xe9': 1}",
                                std::string(16, '\0')));
  expect_error([&] { npy_reader::open(p); }, errc::bad_input, "unexpected key 'caf\xe9'");
}

TEST(NpyDescr, ParsesEveryNumericDtype) {
  struct {
    const char* descr;
    char kind;
    std::size_t size;
    bool big;
  } cases[] = {{"|b1", 'b', 1, false}, {"|i1", 'i', 1, false}, {"|u1", 'u', 1, false},
               {"<i2", 'i', 2, false}, {">u2", 'u', 2, true},  {"<i4", 'i', 4, false},
               {">u4", 'u', 4, true},  {"<i8", 'i', 8, false}, {">u8", 'u', 8, true},
               {"<f2", 'f', 2, false}, {">f4", 'f', 4, true},  {"<f8", 'f', 8, false},
               {"u1", 'u', 1, false},  {">u1", 'u', 1, false},
               // numpy's names and type characters, which np.dtype() takes
               {"uint8", 'u', 1, false}, {"B", 'u', 1, false},  {"b", 'i', 1, false},
               {"?", 'b', 1, false},     {"float32", 'f', 4, false}, {"d", 'f', 8, false},
               {">H", 'u', 2, true},     {"int16", 'i', 2, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.descr);
    const auto t = parse_npy_descr(c.descr);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->kind, c.kind);
    EXPECT_EQ(t->itemsize, c.size);
    EXPECT_EQ(t->big_endian, c.big);
  }
  EXPECT_EQ(parse_npy_descr(">f4")->native_descr(), "<f4");
  EXPECT_EQ(parse_npy_descr("|u1")->native_descr(), "|u1");
  // '|' on a multi-byte type is native order, as np.dtype('|u2') is (np.load reads such a
  // hand-made header).
  EXPECT_EQ(parse_npy_descr("|u2")->native_descr(), "<u2");
  EXPECT_EQ(parse_npy_descr("|f4")->native_descr(), "<f4");
  for (const char* bad : {"|O", "O", "<c8", "<U1", "|S1", "|V4", "<f16", "<b2", "|i3", "<M8[s]"}) {
    EXPECT_FALSE(parse_npy_descr(bad).has_value()) << bad;
  }
}

TEST(NpyDescr, CodecDtypesMapBothWays) {
  using dctchop::dtype;
  for (dtype t : {dtype::u8, dtype::i8, dtype::u16, dtype::i16, dtype::i32, dtype::u32,
                  dtype::f16, dtype::f32, dtype::f64}) {
    const auto n = dctchop::formats::npy_dtype_of(t);
    EXPECT_FALSE(n.big_endian);
    EXPECT_EQ(n.codec_dtype(), t);
    EXPECT_EQ(parse_npy_descr(n.native_descr())->codec_dtype(), t);
  }
  EXPECT_EQ(parse_npy_descr("<i4")->codec_dtype(), dtype::i32);
  EXPECT_EQ(parse_npy_descr(">u4")->codec_dtype(), dtype::u32);  // (read with its byte order)
  EXPECT_EQ(parse_npy_descr("<i8")->codec_dtype(), std::nullopt);
  EXPECT_EQ(parse_npy_descr("<u8")->codec_dtype(), std::nullopt);
  EXPECT_EQ(parse_npy_descr("|b1")->codec_dtype(), std::nullopt);
}

TEST(NpyReader, ReadsOtherNumericDtypesAndSwapsEachSize) {
  temp_dir dir;
  const std::string p = dir.file("x.npy");
  // '>f8' 1.5 and -2.0; '>i4' -2; '<f2' 1.0 (bits 0x3c00); '>f2' 1.0; '|b1' true/false.
  write_file_bytes(p, npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }",
                                std::string("\x3f\xf8\0\0\0\0\0\0\xc0\0\0\0\0\0\0\0", 16)));
  auto rf8 = npy_reader::open(p);
  EXPECT_EQ(read_all<double>(rf8), (std::vector<double>{1.5, -2.0}));
  write_file_bytes(p, npy_bytes("{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }",
                                std::string("\xff\xff\xff\xfe", 4)));
  auto ri4 = npy_reader::open(p);
  EXPECT_EQ(read_all<std::int32_t>(ri4), (std::vector<std::int32_t>{-2}));
  write_file_bytes(p, npy_bytes("{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }",
                                std::string("\x3c\x00", 2)));
  auto rf2 = npy_reader::open(p);
  EXPECT_EQ(read_all<std::uint16_t>(rf2), (std::vector<std::uint16_t>{0x3c00}));
  write_file_bytes(p, npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                                std::string("\x01\x00", 2)));
  auto rb = npy_reader::open(p);
  EXPECT_EQ(rb.header().type.kind, 'b');
  EXPECT_EQ(read_all<std::uint8_t>(rb), (std::vector<std::uint8_t>{1, 0}));
}

TEST(NpyReader, AFileCutShortAfterItOpenedIsBadInputNotACorruptArchive) {
  // Another program truncated the input while dctchop read it: the rows past the new end
  // were "corrupt archive" (exit 4), as for an archive, where a short .npy is bad input (3).
  temp_dir dir;
  const std::string p = dir.file("x.npy");
  write_file_bytes(p, npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2), }",
                                std::string("\1\2\3\4\5\6\7\10", 8)));
  auto r = npy_reader::open(p);
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 4);
  unsigned char row[2] = {};
  r.read_rows(0, 1, row);
  EXPECT_EQ(row[1], 2);
  expect_error([&] { r.read_rows(2, 1, row); }, errc::bad_input,
               std::vector<std::string>{"x.npy", "truncated"});
}

// ---------------------------------------------------------------- make_npy_header

TEST(NpyHeaderWrite, MatchesNumpyBytesExactly) {
  struct {
    const char* file;
    npy_dtype type;
    std::vector<std::uint64_t> shape;
    bool fortran;
  } cases[] = {
      {"u8_nhwc.npy", {'u', 1, false}, {2, 8, 8, 3}, false},
      {"f32_nhw.npy", {'f', 4, false}, {2, 5, 7}, false},
      {"u16_be.npy", {'u', 2, true}, {3, 4}, false},
      {"f32_fortran.npy", {'f', 4, false}, {4, 5}, true},
      {"labels_i64.npy", {'i', 8, false}, {10}, false},
      {"scalar_f64.npy", {'f', 8, false}, {}, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const auto h = make_npy_header(c.type, c.shape, c.fortran);
    const std::string file = read_file_bytes(sample(c.file));
    ASSERT_GE(file.size(), h.size());
    EXPECT_EQ(std::string(h.begin(), h.end()), file.substr(0, h.size()));
    EXPECT_EQ(npy_reader::open(sample(c.file)).header().data_offset, h.size());
  }
}

TEST(NpyHeaderWrite, DataStartsAtAMultipleOf64AndEndsWithNewline) {
  for (std::uint64_t n : {0ull, 1ull, 9ull, 123456ull, 18446744073709551615ull}) {
    for (std::size_t axes = 0; axes < 9; ++axes) {
      const std::vector<std::uint64_t> shape(axes, n);
      const auto h = make_npy_header({'f', 4, false}, shape);
      EXPECT_EQ(h.size() % 64, 0u);
      EXPECT_EQ(h.back(), '\n');
      EXPECT_EQ(h[6], 1);
      const std::size_t len =
          static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8);
      EXPECT_EQ(len + 10, h.size());
    }
  }
  const std::string one_d = [] {
    const auto h = make_npy_header({'u', 2, false}, {5});
    return std::string(h.begin(), h.end());
  }();
  EXPECT_NE(one_d.find("{'descr': '<u2', 'fortran_order': False, 'shape': (5,), }"),
            std::string::npos);
}

TEST(NpyHeaderWrite, LeavesNumpysRoomForTheGrowingAxis) {
  // numpy pads the dict so that shape[0] can grow to 21 digits in place; for this shape that
  // pushes the header from 128 to 192 bytes (numpy 1.24 writes 192).
  std::vector<std::uint64_t> shape(15, 1);
  shape[0] = 7;
  EXPECT_EQ(make_npy_header({'f', 4, false}, shape).size(), 192u);
}

TEST(NpyHeaderWrite, SwitchesToVersion2WhenTheHeaderExceeds65535Bytes) {
  const std::vector<std::uint64_t> shape(22000, 1);  // "1, " * 22000 > 65535
  const auto h = make_npy_header({'u', 1, false}, shape);
  EXPECT_EQ(h[6], 2);
  EXPECT_EQ(h.size() % 64, 0u);
  std::uint64_t len = 0;
  for (int i = 3; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(h[8 + i]);
  EXPECT_EQ(len + 12, h.size());
  EXPECT_GT(len, 65535u);
}

// ---------------------------------------------------------------- npy_writer

TEST(NpyWriter, RoundTripsU16InSeveralCalls) {
  temp_dir dir;
  const std::string p = dir.file("out.npy");
  const std::vector<std::uint64_t> shape{5, 3, 2};
  std::vector<std::uint16_t> data(30);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint16_t>(i * 2111 + 7);
  {
    auto w = npy_writer::create(p, {'u', 2, false}, shape, false);
    w.write_rows(data.data(), 2);
    w.write_rows(data.data() + 12, 0);
    w.write_rows(data.data() + 12, 3);
    EXPECT_FALSE(fs::exists(p)) << "the output must appear only at finish()";
    w.finish();
  }
  ASSERT_TRUE(fs::exists(p));
  auto r = npy_reader::open(p);
  EXPECT_EQ(r.header().major, 1);
  EXPECT_EQ(r.header().data_offset % 64, 0u);
  EXPECT_EQ(r.header().shape, shape);
  EXPECT_EQ(r.header().type.native_descr(), "<u2");
  EXPECT_EQ(read_all<std::uint16_t>(r), data);
  EXPECT_EQ(fs::file_size(p), r.header().data_offset + 60);
  // Nothing else (no temporary file) is left in the folder.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(NpyWriter, RoundTripsFloatScalarsAndVectors) {
  temp_dir dir;
  {
    auto w = npy_writer::create(dir.file("s.npy"), {'f', 8, false}, {}, false);
    const double v = -0.75;
    w.write_rows(&v, 1);
    w.finish();
  }
  auto rs = npy_reader::open(dir.file("s.npy"));
  EXPECT_TRUE(rs.header().shape.empty());
  EXPECT_EQ(read_all<double>(rs), (std::vector<double>{-0.75}));
  {
    auto w = npy_writer::create(dir.file("v.npy"), {'f', 4, false}, {4}, false);
    const float v[4] = {1.0f, -2.5f, 3.25f, 1e30f};
    w.write_rows(v, 4);
    w.finish();
  }
  auto rv = npy_reader::open(dir.file("v.npy"));
  EXPECT_EQ(read_all<float>(rv), (std::vector<float>{1.0f, -2.5f, 3.25f, 1e30f}));
}

TEST(NpyWriter, WritesLittleEndianEvenWhenAskedForBigEndian) {
  temp_dir dir;
  {
    auto w = npy_writer::create(dir.file("b.npy"), {'u', 2, true}, {2}, false);
    const std::uint16_t v[2] = {0x0102, 0x0304};
    w.write_rows(v, 2);
    w.finish();
  }
  auto r = npy_reader::open(dir.file("b.npy"));
  EXPECT_FALSE(r.header().type.big_endian);
  EXPECT_EQ(read_all<std::uint16_t>(r), (std::vector<std::uint16_t>{0x0102, 0x0304}));
}

TEST(NpyWriter, LongShapeUsesVersion2AndReadsBack) {
  temp_dir dir;
  const std::vector<std::uint64_t> shape(22000, 1);
  {
    auto w = npy_writer::create(dir.file("l.npy"), {'i', 2, false}, shape, false);
    const std::int16_t v = -1234;
    w.write_rows(&v, 1);
    w.finish();
  }
  auto r = npy_reader::open(dir.file("l.npy"));
  EXPECT_EQ(r.header().major, 2);
  EXPECT_EQ(r.header().data_offset % 64, 0u);
  EXPECT_EQ(r.header().shape.size(), 22000u);
  EXPECT_EQ(read_all<std::int16_t>(r), (std::vector<std::int16_t>{-1234}));
}

TEST(NpyWriter, RefusesAnExistingFileUnlessOverwriting) {
  temp_dir dir;
  const std::string p = dir.file("exists.npy");
  write_file_bytes(p, "keep me");
  expect_error([&] { npy_writer::create(p, {'u', 1, false}, {1}, false); }, errc::output_exists, p);
  EXPECT_EQ(read_file_bytes(p), "keep me");
  {
    auto w = npy_writer::create(p, {'u', 1, false}, {1}, true);
    const std::uint8_t v = 42;
    w.write_rows(&v, 1);
    EXPECT_EQ(read_file_bytes(p), "keep me");
    w.finish();
  }
  auto r = npy_reader::open(p);
  EXPECT_EQ(read_all<std::uint8_t>(r), (std::vector<std::uint8_t>{42}));
}

TEST(NpyWriter, DestroyedWithoutFinishLeavesNoFile) {
  temp_dir dir;
  const std::string p = dir.file("never.npy");
  {
    auto w = npy_writer::create(p, {'u', 1, false}, {2, 2}, false);
    const std::uint8_t v[4] = {1, 2, 3, 4};
    w.write_rows(v, 2);
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(NpyWriter, FinishChecksTheRowCount) {
  temp_dir dir;
  const std::string p = dir.file("short.npy");
  const std::uint8_t v[6] = {};
  {
    auto w = npy_writer::create(p, {'u', 1, false}, {3, 2}, false);
    w.write_rows(v, 2);
    expect_error([&] { w.finish(); }, errc::invalid_argument, "2 of 3 rows");
    expect_error([&] { w.write_rows(v, 2); }, errc::invalid_argument, p);
  }
  EXPECT_FALSE(fs::exists(p));
  {
    auto w = npy_writer::create(p, {'u', 1, false}, {3, 2}, false);
    w.write_rows(v, 3);
    w.finish();
    expect_error([&] { w.finish(); }, errc::invalid_argument, p);
    expect_error([&] { w.write_rows(v, 1); }, errc::invalid_argument, p);
  }
  EXPECT_TRUE(fs::exists(p));
}

TEST(NpyWriter, RefusesNonNumericTypesAndOverflowingShapes) {
  temp_dir dir;
  expect_error(
      [&] {
        npy_writer::create(dir.file("c.npy"), {'c', 8, false}, {1}, false);
      },
      errc::invalid_argument, "element type");
  expect_error(
      [&] {
        npy_writer::create(dir.file("o.npy"), {'u', 8, false}, {1ull << 40, 1ull << 40}, false);
      },
      errc::invalid_argument, "too large");
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ---------------------------------------------------------------- standard input

TEST(NpyStdin, ReadsRowsSequentially) {
  stdin_from_bytes in(read_file_bytes(sample("u16_be.npy")));
  auto r = npy_reader::open("-");
  EXPECT_EQ(r.display_name(), "<stdin>");
  EXPECT_EQ(r.header().shape, (std::vector<std::uint64_t>{3, 4}));
  std::uint16_t row[8];
  r.read_rows(0, 1, row);
  for (int x = 0; x < 4; ++x) EXPECT_EQ(row[x], u16_be_value(0, x));
  r.read_rows(1, 2, row);
  for (int y = 1; y < 3; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_EQ(row[(y - 1) * 4 + x], u16_be_value(y, x));
}

TEST(NpyStdin, BytesAfterTheArrayAreRefusedNotDropped) {
  // `cat a.npy b.npy | dctchop compress -` compressed a alone and dropped b without a word.
  const std::string one = read_file_bytes(sample("u16_be.npy"));
  stdin_from_bytes in(one + one);
  auto r = npy_reader::open("-");
  std::uint16_t rows[12];
  r.read_rows(0, 2, rows);  // (the check comes with the last row)
  expect_error([&] { r.read_rows(2, 1, rows); }, errc::bad_input,
               std::vector<std::string>{"<stdin>", "more bytes follow the array's data"});
  // A file may hold bytes after its data, as np.load allows.
  temp_dir dir;
  write_file_bytes(dir.file("tail.npy"), one + "junk");
  auto f = npy_reader::open(dir.file("tail.npy"));
  f.read_rows(0, 3, rows);
  EXPECT_EQ(rows[11], u16_be_value(2, 3));
}

TEST(NpyStdin, RefusesRowsOutOfOrder) {
  stdin_from_bytes in(read_file_bytes(sample("f32_nhw.npy")));
  auto r = npy_reader::open("-");
  std::vector<float> row(35);
  expect_error([&] { r.read_rows(1, 1, row.data()); }, errc::invalid_argument, "in order");
  r.read_rows(0, 1, row.data());
  expect_error([&] { r.read_rows(0, 1, row.data()); }, errc::invalid_argument, "in order");
  r.read_rows(1, 1, row.data());
  EXPECT_EQ(row[34], f32_nhw_value(1, 4, 6));
}

TEST(NpyStdin, RefusesFortranOrderSuggestingAFile) {
  stdin_from_bytes in(read_file_bytes(sample("f32_fortran.npy")));
  expect_error([] { npy_reader::open("-"); }, errc::bad_input,
               std::vector<std::string>{"<stdin>: Fortran-order", "save the array to a file"});
}

TEST(NpyStdin, ReportsTruncatedData) {
  stdin_from_bytes in(read_file_bytes(sample("broken/truncated.npy")));
  auto r = npy_reader::open("-");
  std::vector<std::uint8_t> buf(192);
  r.read_rows(0, 1, buf.data());
  expect_error([&] { r.read_rows(1, 1, buf.data()); }, errc::bad_input, "<stdin>: truncated");
}

TEST(NpyStdin, RefusesObjectArrays) {
  stdin_from_bytes in(read_file_bytes(sample("broken/object.npy")));
  expect_error([] { npy_reader::open("-"); }, errc::bad_input, "<stdin>: dtype '|O'");
}
