// Tests of HDF5 and raw-binary datasets in and out: parse_dataset_spec, the HDF5 source and sink
// through the library, and round trips through the `dctchop` command. Every HDF5 file is made
// here with the HDF5 C API (a small RAII wrapper below), independently of formats/src/hdf5_io.cpp,
// and every decoded HDF5 file is read back the same way.
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <lz4.h>
#include <lzf.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <regex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/dataset_io.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "hdf5_filters.hpp"
#include "test_util.hpp"

#ifndef DCTCHOP_BINARY
#error "DCTCHOP_BINARY must name the built dctchop command"
#endif

namespace {

using namespace dctchop;
using dctchop::test::cli;
using dctchop::test::command_result;
using dctchop::test::describe;
using dctchop::test::expect_error;
using dctchop::test::load_npy;
using dctchop::test::parse_json;
using dctchop::test::psnr_of;
using dctchop::test::read_bytes;
using dctchop::test::save_npy;
using dctchop::test::sh;
using dctchop::test::sh_quote;
using dctchop::test::temp_dir;
using dctchop::test::value_range;
using dctchop::test::write_bytes;
using formats::dataset_spec;
using formats::file_kind;
using formats::parse_dataset_spec;
using u64 = std::uint64_t;
using json = nlohmann::json;

// The tests close every HDF5 file they open, as the dctchop command does, and leave HDF5's exit
// handler off as it does. With it on, HDF5 unloads its filter plugins at exit, and Debian's
// blosc plugin (libH5Zblosc) then leaves a context it allocated (and never frees)
// unreachable, which LeakSanitizer reports as a leak of dctchop_tests.
const bool k_no_hdf5_exit_handler = [] {
  formats::skip_hdf5_exit_handler();
  return true;
}();

// ---------------------------------------------------------------- HDF5 helpers (test side)

/** Owns one HDF5 identifier and closes it with the matching H5?close. */
class h5 {
 public:
  using closer = herr_t (*)(hid_t);
  h5() = default;
  h5(hid_t id, closer c, const std::string& what) : id_(id), close_(c) {
    if (id < 0) throw std::runtime_error("test: HDF5 call failed: " + what);
  }
  h5(h5&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  h5& operator=(h5&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  h5(const h5&) = delete;
  h5& operator=(const h5&) = delete;
  ~h5() { reset(); }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  closer close_ = nullptr;
};

void h5_check(herr_t s, const std::string& what) {
  if (s < 0) throw std::runtime_error("test: HDF5 call failed: " + what);
}

template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, std::int16_t>) return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else static_assert(!sizeof(T), "unhandled type");
}

/** An HDF5 file open for writing: created (truncated) or opened read-write. */
h5 h5_create(const std::string& path) {
  return h5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
            "create " + path);
}

h5 h5_open(const std::string& path, bool write = false) {
  return h5(H5Fopen(path.c_str(), write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose,
            "open " + path);
}

struct storage {
  std::vector<u64> chunk;  ///< empty: contiguous
  int gzip = -1;           ///< deflate level, or -1 for none
};

/** Create dataset `name` (intermediate groups made) of `file_type` holding `data`. */
template <typename T>
void h5_write(hid_t file, const std::string& name, hid_t file_type, const std::vector<u64>& shape,
              const std::vector<T>& data, const storage& st = {}) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  u64 n = 1;
  for (auto d : shape) n *= d;
  if (n != data.size()) throw std::runtime_error("test: h5_write: data does not fill the shape");
  h5 space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
           "dataspace");
  h5 lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "lcpl");
  h5_check(H5Pset_create_intermediate_group(lcpl.get(), 1), "intermediate groups");
  h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
  if (!st.chunk.empty()) {
    std::vector<hsize_t> c(st.chunk.begin(), st.chunk.end());
    h5_check(H5Pset_chunk(dcpl.get(), static_cast<int>(c.size()), c.data()), "chunk");
    if (st.gzip >= 0) h5_check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(st.gzip)), "gzip");
  }
  h5 d(H5Dcreate2(file, name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
       H5Dclose, "create dataset " + name);
  h5_check(H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
           "write " + name);
}

/** A dataset of a compound type {int32 a; float b} and the given shape, zero-filled. */
void h5_write_compound(hid_t file, const std::string& name, const std::vector<u64>& shape) {
  struct rec {
    std::int32_t a;
    float b;
  };
  h5 t(H5Tcreate(H5T_COMPOUND, sizeof(rec)), H5Tclose, "compound");
  h5_check(H5Tinsert(t.get(), "a", offsetof(rec, a), H5T_NATIVE_INT32), "insert a");
  h5_check(H5Tinsert(t.get(), "b", offsetof(rec, b), H5T_NATIVE_FLOAT), "insert b");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  u64 n = 1;
  for (auto d : shape) n *= d;
  std::vector<rec> data(n, rec{1, 2.0f});
  h5 space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "space");
  h5 d(H5Dcreate2(file, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
       H5Dclose, "create " + name);
  h5_check(H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "write");
}

/** A dataset of fixed-length 4-byte strings of the given shape. */
void h5_write_strings(hid_t file, const std::string& name, const std::vector<u64>& shape) {
  h5 t(H5Tcopy(H5T_C_S1), H5Tclose, "string type");
  h5_check(H5Tset_size(t.get(), 4), "string size");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  u64 n = 1;
  for (auto d : shape) n *= d;
  std::string data;
  for (u64 i = 0; i < n; ++i) data += "abcd";
  h5 space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "space");
  h5 d(H5Dcreate2(file, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
       H5Dclose, "create " + name);
  h5_check(H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "write");
}

/** What a dataset in a file is: shape, element type, storage. */
struct h5_info {
  std::vector<u64> shape;
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  H5T_sign_t sign = H5T_SGN_ERROR;
  H5T_order_t order = H5T_ORDER_ERROR;
  H5D_layout_t layout = H5D_LAYOUT_ERROR;
  std::vector<u64> chunk;
};

h5_info h5_describe(hid_t file, const std::string& name) {
  h5 d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + name);
  h5_info info;
  h5 space(H5Dget_space(d.get()), H5Sclose, "space");
  const int nd = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(nd, 0)));
  if (nd > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  info.shape.assign(dims.begin(), dims.end());
  h5 t(H5Dget_type(d.get()), H5Tclose, "type");
  info.cls = H5Tget_class(t.get());
  info.size = H5Tget_size(t.get());
  if (info.cls == H5T_INTEGER) info.sign = H5Tget_sign(t.get());
  info.order = H5Tget_order(t.get());
  h5 dcpl(H5Dget_create_plist(d.get()), H5Pclose, "dcpl");
  info.layout = H5Pget_layout(dcpl.get());
  if (info.layout == H5D_CHUNKED && nd > 0) {
    std::vector<hsize_t> c(static_cast<std::size_t>(nd));
    H5Pget_chunk(dcpl.get(), nd, c.data());
    info.chunk.assign(c.begin(), c.end());
  }
  return info;
}

/** The whole dataset converted by HDF5 to T. */
template <typename T>
std::vector<T> h5_read(hid_t file, const std::string& name) {
  const auto info = h5_describe(file, name);
  u64 n = 1;
  for (auto d : info.shape) n *= d;
  std::vector<T> v(n);
  h5 d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + name);
  h5_check(H5Dread(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
           "read " + name);
  return v;
}

bool h5_has_attr(hid_t file, const std::string& dset, const std::string& attr) {
  h5 d(H5Dopen2(file, dset.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + dset);
  return H5Aexists(d.get(), attr.c_str()) > 0;
}

/** A numeric attribute, converted by HDF5 to double. */
std::optional<double> h5_attr_number(hid_t file, const std::string& dset, const std::string& attr) {
  if (!h5_has_attr(file, dset, attr)) return std::nullopt;
  h5 d(H5Dopen2(file, dset.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + dset);
  h5 a(H5Aopen(d.get(), attr.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + attr);
  h5 t(H5Aget_type(a.get()), H5Tclose, "attribute type");
  const auto cls = H5Tget_class(t.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return std::nullopt;
  double x = 0;
  h5_check(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &x), "read attribute " + attr);
  return x;
}

/** A string attribute (fixed or variable length). */
std::optional<std::string> h5_attr_string(hid_t file, const std::string& dset, const std::string& attr) {
  if (!h5_has_attr(file, dset, attr)) return std::nullopt;
  h5 d(H5Dopen2(file, dset.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + dset);
  h5 a(H5Aopen(d.get(), attr.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + attr);
  h5 t(H5Aget_type(a.get()), H5Tclose, "attribute type");
  if (H5Tget_class(t.get()) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(t.get()) > 0) {
    char* p = nullptr;
    h5_check(H5Aread(a.get(), t.get(), &p), "read attribute " + attr);
    std::string s = p != nullptr ? p : "";
    H5free_memory(p);
    return s;
  }
  std::string s(H5Tget_size(t.get()), '\0');
  h5_check(H5Aread(a.get(), t.get(), s.data()), "read attribute " + attr);
  s.resize(std::strlen(s.c_str()));  // null padding
  return s;
}

bool h5_exists(hid_t file, const std::string& name) {
  return H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0;
}

// ---------------------------------------------------------------- data

/** u16 NCHW fields, n x c x h x w, covering much of the u16 range. */
std::vector<std::uint16_t> smooth_u16_nchw(int n, int c, int h, int w) {
  std::vector<std::uint16_t> v(static_cast<std::size_t>(n) * c * h * w);
  std::size_t i = 0;
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < c; ++k)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const double f = 30000 + 15000 * std::sin(0.13 * x + 0.5 * s + k) +
                           9000 * std::cos(0.09 * y - 0.3 * k) + 40.0 * s;
          v[i++] = static_cast<std::uint16_t>(std::lround(std::clamp(f, 0.0, 65535.0)));
        }
  return v;
}

template <typename T>
std::vector<double> as_doubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <typename T>
std::vector<std::byte> as_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::size_t count_lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::unique_ptr<backend> cpu() { return make_backend(backend_kind::cpu, {1}); }

const std::vector<u64> k_u8_shape = {6, 16, 16, 3};  // NHWC
const std::vector<u64> k_f32_shape = {5, 24, 18};    // NHW
const std::vector<u64> k_u16_shape = {5, 2, 20, 18};  // NCHW
const std::vector<std::int64_t> k_labels = {3, -1, 7, 1000000000000LL, 0, 42};

/** /train/images: u8 NHWC chunked (4,8,8,3) with gzip; /train/labels int64 (6,);
 *  /fields: f32 NHW contiguous; /extra/u16: u16 NCHW chunked (2,1,7,5), which does not divide
 *  the shape. Three datasets are image-like: the tests name the one they mean. */
void make_mixed_file(const std::string& path) {
  auto f = h5_create(path);
  h5_write(f.get(), "/train/images", H5T_STD_U8LE, k_u8_shape,
           dctchop::test::smooth_u8_nhwc(6, 16, 16, 3), storage{{4, 8, 8, 3}, 4});
  h5_write(f.get(), "/train/labels", H5T_STD_I64LE, {6}, k_labels);
  h5_write(f.get(), "/fields", H5T_IEEE_F32LE, k_f32_shape, dctchop::test::smooth_f32_nhw(5, 24, 18));
  h5_write(f.get(), "/extra/u16", H5T_STD_U16LE, k_u16_shape, smooth_u16_nchw(5, 2, 20, 18),
           storage{{2, 1, 7, 5}, 1});
}

/** A file with only /train/images (u8 NHWC, chunked, gzip) and /train/labels (int64, 1-D). */
void make_train_file(const std::string& path) {
  auto f = h5_create(path);
  h5_write(f.get(), "/train/images", H5T_STD_U8LE, k_u8_shape,
           dctchop::test::smooth_u8_nhwc(6, 16, 16, 3), storage{{4, 8, 8, 3}, 4});
  h5_write(f.get(), "/train/labels", H5T_STD_I64LE, {6}, k_labels);
}

/** Read a whole source through the library. */
std::vector<std::byte> read_all(formats::sample_source& s) {
  std::vector<std::byte> b(s.rows() * s.row_bytes());
  s.read_rows(0, s.rows(), b.data());
  return b;
}

// ---------------------------------------------------------------- parse_dataset_spec

TEST(Hdf5Spec, H5FileWithoutDatasetIsHdf5WithAnEmptyDataset) {
  for (const std::string name : {"a.h5", "dir/a.hdf5", "A.H5", "x.he5", "y.hdf"}) {
    const auto s = parse_dataset_spec(name);
    EXPECT_EQ(s.kind, file_kind::hdf5) << name;
    EXPECT_EQ(s.path, name);
    EXPECT_EQ(s.dataset, "") << name;
  }
}

TEST(Hdf5Spec, ColonSlashSeparatesTheDataset) {
  const auto s = parse_dataset_spec("a.h5:/g/d");
  EXPECT_EQ(s.kind, file_kind::hdf5);
  EXPECT_EQ(s.path, "a.h5");
  EXPECT_EQ(s.dataset, "/g/d");
  EXPECT_EQ(s.display(), "a.h5:/g/d");
  // A path with folders keeps them; the last ":/" is the separator.
  const auto t = parse_dataset_spec("runs/2024/b.hdf5:/train/images");
  EXPECT_EQ(t.kind, file_kind::hdf5);
  EXPECT_EQ(t.path, "runs/2024/b.hdf5");
  EXPECT_EQ(t.dataset, "/train/images");
}

TEST(Hdf5Spec, ADatasetNameWithAColonAndNoLeadingSlashSplitsAtTheHdf5FilesName) {
  // "f.h5:x:y": the file f.h5, dataset x:y (HDF5 allows ':' in names); the last ':' alone
  // took "f.h5:x" for the file, which was "cannot open: No such file" (exit 5).
  const auto s = parse_dataset_spec("f.h5:x:y");
  EXPECT_EQ(s.path, "f.h5");
  EXPECT_EQ(s.dataset, "/x:y");
  const auto g = parse_dataset_spec("f.h5:g/t:1");
  EXPECT_EQ(g.path, "f.h5");
  EXPECT_EQ(g.dataset, "/g/t:1");
  // Of two HDF5 names, the last whose file exists.
  temp_dir dir;
  const std::string a = dir.file("a.h5"), ab = a + ":b.h5";
  EXPECT_EQ(parse_dataset_spec(ab + ":x").path, ab);  // neither exists: the last
  write_bytes(a, "x");
  EXPECT_EQ(parse_dataset_spec(ab + ":x").path, a);
  EXPECT_EQ(parse_dataset_spec(ab + ":x").dataset, "/b.h5:x");
  write_bytes(ab, "x");
  EXPECT_EQ(parse_dataset_spec(ab + ":x").path, ab);
  // A .npy name that holds HDF5: said at once, as when it is named alone.
  {
    auto f = h5_create(dir.file("h.npy"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 1));
  }
  expect_error([&] { parse_dataset_spec(dir.file("h.npy") + ":images"); }, errc::bad_input,
               {"h.npy is an HDF5 file, not a .npy file (name it .h5)"});
  // Every spelling of a dataset in it, and a ZIP file of that name, likewise (exit 3, as the
  // file named alone; they were usage errors calling the file a .npy).
  expect_error([&] { parse_dataset_spec(dir.file("h.npy") + ":/images"); }, errc::bad_input,
               {"h.npy is an HDF5 file, not a .npy file (name it .h5)"});
  expect_error([&] { parse_dataset_spec(dir.file("h.npy"), "images"); }, errc::bad_input,
               {"h.npy is an HDF5 file, not a .npy file (name it .h5)"});
  write_bytes(dir.file("z.npy"), std::string("PK\x03\x04", 4) + std::string(60, '\0'));
  for (const std::string& name : {dir.file("z.npy") + ":images", dir.file("z.npy") + ":/images"}) {
    expect_error([&] { parse_dataset_spec(name); }, errc::bad_input,
                 {"z.npy is a ZIP file (numpy's .npz?), not a .npy file (name it .npz)"});
  }
  // HDF5 after a user block (MATLAB v7.3 files have one of 512 bytes): HDF5 too.
  {
    h5 fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "fcpl");
    h5_check(H5Pset_userblock(fcpl.get(), 512), "user block");
    h5 f(H5Fcreate(dir.file("ub.npy").c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose,
         "create ub.npy");
    h5_write(f.get(), "/images", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 1));
  }
  expect_error([&] { parse_dataset_spec(dir.file("ub.npy") + ":images"); }, errc::bad_input,
               {"ub.npy is an HDF5 file, not a .npy file (name it .h5)"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(dir.file("ub.npy"))); },
               errc::bad_input, {"is an HDF5 file (after a user block), not a .npy file"});
  std::filesystem::copy_file(dir.file("ub.npy"), dir.file("ub.dcz"));
  expect_error([&] { (void)formats::archive_info(dir.file("ub.dcz")); }, errc::bad_input,
               {"ub.dcz: is an HDF5 file, not a dctchop archive"});
  // A .npy name of a real .npy (or none there) stays the usage error it was.
  write_bytes(dir.file("n.npy"), "\x93NUMPY");
  expect_error([&] { parse_dataset_spec(dir.file("n.npy") + ":images"); },
               errc::invalid_argument, {"n.npy is a .npy file, which holds one array"});
  expect_error([&] { parse_dataset_spec(dir.file("gone.npy") + ":/images"); },
               errc::invalid_argument, {"gone.npy is a .npy name"});
}

TEST(Hdf5Spec, NpyAndStdinAreNpy) {
  for (const std::string name : {"a.npy", "-", "dir/b.NPY", "noext"}) {
    const auto s = parse_dataset_spec(name);
    EXPECT_EQ(s.kind, file_kind::npy) << name;
    EXPECT_EQ(s.path, name);
    EXPECT_EQ(s.dataset, "");
  }
}

TEST(Hdf5Spec, DatasetOptionFillsInTheDatasetAndAgreesOrIsRefused) {
  const auto s = parse_dataset_spec("a.h5", "/train/images");
  EXPECT_EQ(s.kind, file_kind::hdf5);
  EXPECT_EQ(s.path, "a.h5");
  EXPECT_EQ(s.dataset, "/train/images");
  const auto same = parse_dataset_spec("a.h5:/x", "/x");
  EXPECT_EQ(same.dataset, "/x");
  EXPECT_EQ(same.path, "a.h5");
  expect_error([] { parse_dataset_spec("a.h5:/x", "/y"); }, errc::invalid_argument,
               {"--dataset", "/y", "a.h5:/x"});
  // An extensionless file named with --dataset is HDF5.
  EXPECT_EQ(parse_dataset_spec("data", "/x").kind, file_kind::hdf5);
  // A .npy name with --dataset is a slip, not an HDF5 file to write under that name.
  expect_error([] { parse_dataset_spec("out.npy", "/x"); }, errc::invalid_argument,
               {"out.npy", ".npy name", "--dataset /x"});
  expect_error([] { parse_dataset_spec("OUT.NPY", "/x"); }, errc::invalid_argument,
               {"OUT.NPY", ".npy name"});
  // So is a dataset path after a .npy name (unless a folder "x.npy:" makes it a path).
  expect_error([] { parse_dataset_spec("out.npy:/a"); }, errc::invalid_argument,
               {"out.npy:/a", ".npy name", "FILE.h5:/path"});
}

TEST(Hdf5Spec, ADatasetWithoutItsSlashIsAbsoluteAndPathsThatNameNoDatasetAreRefused) {
  const auto s = parse_dataset_spec("a.h5:images");
  EXPECT_EQ(s.kind, file_kind::hdf5);
  EXPECT_EQ(s.path, "a.h5");
  EXPECT_EQ(s.dataset, "/images");
  EXPECT_EQ(parse_dataset_spec("a.h5", "train/x").dataset, "/train/x");
  EXPECT_EQ(parse_dataset_spec("a.h5:/x", "x").dataset, "/x");  // the same dataset
  for (const std::string bad : {"a.h5:", "a.h5:/", "a.h5:/.", "a.h5:/g/", "a.h5:/a//b",
                                "a.h5:/../x", "a.h5:g/./x"}) {
    try {
      parse_dataset_spec(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument) << bad;
      EXPECT_NE(std::string(e.what()).find("a.h5"), std::string::npos) << e.what();
    }
  }
  // Plain names with colons stay plain files.
  EXPECT_EQ(parse_dataset_spec("x.npy:3").kind, file_kind::npy);
  // --dataset does not apply to raw data.
  EXPECT_THROW(parse_dataset_spec("f.bin", "/x", true), error);
}

TEST(Hdf5Spec, ANameAfterAnExistingNpyFileIsRefusedAsNamingNoArrayNotAsAMissingFile) {
  temp_dir dir;
  write_bytes(dir.file("x.npy"), "x");
  expect_error([&] { parse_dataset_spec(dir.file("x.npy") + ":a"); }, errc::invalid_argument,
               {"x.npy:a", "is a .npy file, which holds one array"});
  // A file that has the whole name is that file.
  write_bytes(dir.file("x.npy:3"), "x");
  EXPECT_EQ(parse_dataset_spec(dir.file("x.npy:3")).path, dir.file("x.npy:3"));
}

TEST(Hdf5Spec, Hdf5CannotBeAPipe) {
  expect_error([] { parse_dataset_spec("-", "/images"); }, errc::invalid_argument, {"HDF5"});
}

TEST(Hdf5Spec, RawWinsOverExtensionAndColon) {
  const auto s = parse_dataset_spec("odd.h5:/x", "", true);
  EXPECT_EQ(s.kind, file_kind::raw);
  EXPECT_EQ(s.path, "odd.h5:/x");
  EXPECT_EQ(parse_dataset_spec("-", "", true).kind, file_kind::raw);
}

TEST(Hdf5Spec, H5FileInsideAFolderWhoseNameEndsWithAColonIsTheH5File) {
  // "data:/x.h5": the text as a whole names an HDF5 file; "data" is not one.
  const auto s = parse_dataset_spec("data:/x.h5");
  EXPECT_EQ(s.kind, file_kind::hdf5);
  EXPECT_EQ(s.path, "data:/x.h5");
  EXPECT_EQ(s.dataset, "");
}

TEST(Hdf5Spec, NpyFileInsideAFolderWhoseNameEndsWithAColonIsThatNpyFile) {
  // A folder "run:" holding x.npy: "run:/x.npy" names that file. The part before ":/" is
  // neither an HDF5 file name nor an existing path (parse_dataset_spec's own rule), so it must
  // not be split into file "run" and dataset "/x.npy".
  temp_dir dir;
  std::filesystem::create_directories(dir.file("run:"));
  const std::string path = dir.file("run:") + "/x.npy";
  save_npy(path, dtype::u8, {2, 8, 8}, std::vector<std::uint8_t>(128, 7));
  const auto s = parse_dataset_spec(path);
  EXPECT_EQ(s.kind, file_kind::npy) << "parsed as path " << s.path << " dataset " << s.dataset;
  EXPECT_EQ(s.path, path);
  EXPECT_EQ(s.dataset, "");
}

TEST(Hdf5Spec, ExtensionlessExistingHdf5FileWithDataset) {
  temp_dir dir;
  make_train_file(dir.file("plain"));
  const auto s = parse_dataset_spec(dir.file("plain") + ":/train/images");
  EXPECT_EQ(s.kind, file_kind::hdf5);
  EXPECT_EQ(s.path, dir.file("plain"));
  EXPECT_EQ(s.dataset, "/train/images");
  auto src = formats::open_dataset(s);
  EXPECT_EQ(src->shape(), k_u8_shape);
}

// ---------------------------------------------------------------- sources (library)

TEST(Hdf5Source, ChunkedGzipU8InAGroupReadsEveryRowRangeExactly) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  auto src = formats::open_dataset(parse_dataset_spec(dir.file("m.h5") + ":/train/images"));
  EXPECT_EQ(src->shape(), k_u8_shape);
  EXPECT_EQ(src->type().native_descr(), "|u1");
  EXPECT_EQ(src->preferred_rows(), 4u) << "the dataset's chunk extent along axis 0";
  EXPECT_TRUE(src->rereadable());
  EXPECT_TRUE(contains(src->name(), "m.h5")) << src->name();
  EXPECT_TRUE(contains(src->name(), "/train/images")) << src->name();
  EXPECT_EQ(src->note(), "") << "a named dataset needs no note";
  const auto orig = as_bytes(dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
  EXPECT_EQ(read_all(*src), orig);
  // Ranges that cross chunk boundaries, out of order.
  const u64 rb = src->row_bytes();
  ASSERT_EQ(rb, 16u * 16 * 3);
  for (auto [first, count] : std::vector<std::pair<u64, u64>>{{3, 2}, {1, 5}, {5, 1}, {0, 1}}) {
    std::vector<std::byte> part(count * rb);
    src->read_rows(first, count, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), orig.begin() + first * rb))
        << "rows " << first << "+" << count;
  }
}

TEST(Hdf5Cli, GzipChunksSpanningManyReadsAreDecodedOnceAndReadExactly) {
  // h5py's own chunks of images hold one channel of 128 of them: each read of a few images
  // decoded every chunk it touched again. Decoded chunks that hold rows past a read are kept
  // for the next: the data read must be the same whatever the read sizes and chunk shapes.
  temp_dir dir;
  const u64 n = 30, h = 16, w = 16, c = 3;
  std::vector<std::uint8_t> v(n * h * w * c);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 24);
  }
  save_npy(dir.file("x.npy"), dtype::u8, {n, h, w, c}, v);
  {
    auto f = h5_create(dir.file("x.h5"));
    h5_write(f.get(), "/a", H5T_STD_U8LE, {n, h, w, c}, v, storage{{7, 8, 8, 1}, 4});
    h5_write(f.get(), "/b", H5T_STD_U8LE, {n, h, w, c}, v, storage{{30, 16, 4, 3}, 1});
  }
  const auto must = [](const temp_dir& d, const std::string& args) {
    const auto r = cli(d, args);
    ASSERT_EQ(r.status, 0) << args << "\n" << describe(r);
  };
  must(dir, "compress x.npy -o ref.dcz --chop 8 --coeff f32 -q --chunk-mb 0.002");
  must(dir, "decompress ref.dcz -o ref.npy -q");
  const std::string ref = read_bytes(dir.file("ref.npy"));
  for (const std::string args : {"x.h5:/a --chunk-mb 0.002", "x.h5:/a --chunk-mb 0.005",
                                 "x.h5:/b --chunk-mb 0.002", "x.h5:/a --threads 1"}) {
    must(dir, "compress " + args + " -o h.dcz --chop 8 --coeff f32 -q -f");
    must(dir, "decompress h.dcz -o h.npy -q -f");
    EXPECT_EQ(read_bytes(dir.file("h.npy")), ref) << args;
  }
}

TEST(Hdf5Source, ContiguousF32AndNonDividingChunksU16ReadExactly) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  auto f = formats::open_dataset(parse_dataset_spec(dir.file("m.h5") + ":/fields"));
  EXPECT_EQ(f->shape(), k_f32_shape);
  EXPECT_EQ(f->type().native_descr(), "<f4");
  EXPECT_EQ(f->preferred_rows(), 1u) << "contiguous";
  EXPECT_EQ(read_all(*f), as_bytes(dctchop::test::smooth_f32_nhw(5, 24, 18)));

  auto u = formats::open_dataset(parse_dataset_spec(dir.file("m.h5"), "/extra/u16"));
  EXPECT_EQ(u->shape(), k_u16_shape);
  EXPECT_EQ(u->type().native_descr(), "<u2");
  EXPECT_EQ(u->preferred_rows(), 2u);
  const auto orig = as_bytes(smooth_u16_nchw(5, 2, 20, 18));
  EXPECT_EQ(read_all(*u), orig);
  std::vector<std::byte> part(3 * u->row_bytes());
  u->read_rows(1, 3, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), orig.begin() + u->row_bytes()));
}

TEST(Hdf5Source, BigEndianDatasetsAreReadAsNativeValues) {
  temp_dir dir;
  const auto u16v = smooth_u16_nchw(3, 1, 9, 11);
  const auto f32v = dctchop::test::smooth_f32_nhw(3, 10, 12);
  {
    auto f = h5_create(dir.file("be.h5"));
    h5_write(f.get(), "/u16be", H5T_STD_U16BE, {3, 1, 9, 11}, u16v, storage{{2, 1, 9, 11}, 2});
    h5_write(f.get(), "/f32be", H5T_IEEE_F32BE, {3, 10, 12}, f32v);
  }
  {
    auto f = h5_open(dir.file("be.h5"));
    ASSERT_EQ(h5_describe(f.get(), "/u16be").order, H5T_ORDER_BE) << "the file really is big-endian";
    ASSERT_EQ(h5_describe(f.get(), "/f32be").order, H5T_ORDER_BE);
  }
  auto u = formats::open_dataset(parse_dataset_spec(dir.file("be.h5") + ":/u16be"));
  EXPECT_EQ(u->type().native_descr(), "<u2");
  EXPECT_EQ(read_all(*u), as_bytes(u16v));
  auto g = formats::open_dataset(parse_dataset_spec(dir.file("be.h5") + ":/f32be"));
  EXPECT_EQ(g->type().native_descr(), "<f4");
  EXPECT_EQ(read_all(*g), as_bytes(f32v));
}

TEST(Hdf5Source, AContiguousDatasetIsReadDirectlyOnSeveralThreadsAndOthersThroughHdf5) {
  // 40 images of 256x256x3 (7.9 MB: a read of them all splits into 3 pieces on 4 threads).
  temp_dir dir;
  const std::vector<u64> shape = {40, 256, 256, 3};
  const auto images = dctchop::test::smooth_u8_nhwc(40, 256, 256, 3);
  std::vector<std::uint16_t> wide(images.begin(), images.end());
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = std::uint16_t(wide[i] * 251 + i % 7);
  {
    auto f = h5_create(dir.file("d.h5"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, shape, images);
    h5_write(f.get(), "/chunked", H5T_STD_U8LE, shape, images, storage{{4, 256, 256, 3}});
    h5_write(f.get(), "/u16be", H5T_STD_U16BE, shape, wide);  // contiguous, swapped on read
    h5_write(f.get(), "/u16le", H5T_STD_U16LE, shape, wide);
    // Contiguous and never written: no place in the file yet (HDF5 gives the fill value).
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    h5 space(H5Screate_simple(4, dims.data(), nullptr), H5Sclose, "dataspace");
    h5 d(H5Dcreate2(f.get(), "/unwritten", H5T_STD_U8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                    H5P_DEFAULT),
         H5Dclose, "create /unwritten");
    // The same dataset after a user block of 512 bytes (HDF5's addresses start after it).
    h5 fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "fcpl");
    h5_check(H5Pset_userblock(fcpl.get(), 512), "user block");
    h5 m(H5Fcreate(dir.file("ub.h5").c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose,
         "create ub.h5");
    h5_write(m.get(), "/images", H5T_STD_U8LE, shape, images);
    h5 u(H5Dcreate2(m.get(), "/unwritten", H5T_STD_U8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                    H5P_DEFAULT),
         H5Dclose, "create ub.h5:/unwritten");
    // An external link to d.h5's images from a file whose own dataset lies where theirs do in
    // d.h5: read from that file, the bytes would be its own.
    auto l = h5_create(dir.file("link.h5"));
    h5_write(l.get(), "/other", H5T_STD_U8LE, shape,
             std::vector<std::uint8_t>(images.size(), 77));
    ASSERT_GE(H5Lcreate_external(dir.file("d.h5").c_str(), "/images", l.get(), "/ext",
                                 H5P_DEFAULT, H5P_DEFAULT),
              0);
  }
  const std::string direct = "HDF5, contiguous: read directly on ";
  struct dataset {
    std::string name, reader;
    std::vector<std::byte> values;
  };
  const std::vector<dataset> cases = {
      {"d.h5:/images", direct, as_bytes(images)},
      {"ub.h5:/images", direct, as_bytes(images)},
      {"d.h5:/u16le", direct, as_bytes(wide)},
      {"d.h5:/chunked", "HDF5", as_bytes(images)},
      {"d.h5:/u16be", "HDF5", as_bytes(wide)},
      {"d.h5:/unwritten", "HDF5", std::vector<std::byte>(images.size())},
      {"ub.h5:/unwritten", "HDF5", std::vector<std::byte>(images.size())},
      {"link.h5:/ext", direct, as_bytes(images)},
      {"link.h5:/other", direct, std::vector<std::byte>(images.size(), std::byte{77})}};
  for (const auto& c : cases) {
    for (unsigned t : {1U, 4U}) {
      dataset_spec spec = parse_dataset_spec(dir.file(c.name));
      spec.read_threads = t;
      const auto src = formats::open_dataset(spec);
      const std::string threads = t == 1 ? "1 thread" : "up to " + std::to_string(t) + " threads";
      EXPECT_EQ(src->reader(), c.reader == direct ? direct + threads : c.reader) << c.name;
      EXPECT_EQ(read_all(*src), c.values) << c.name << " on " << threads;
      const u64 rb = src->row_bytes();
      std::vector<std::byte> part(31 * rb);
      src->read_rows(9, 31, part.data());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), c.values.begin() + 9 * rb))
          << c.name << " on " << threads;
    }
  }
  {
    // A file this process has open for writing is read through HDF5, which shares the open
    // file and its buffers: what was written is read, on disk or not yet.
    h5 w(H5Fopen(dir.file("d.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "open d.h5");
    h5 d(H5Dopen2(w.get(), "/images", H5P_DEFAULT), H5Dclose, "open /images");
    std::vector<std::uint8_t> now(images.size());
    for (std::size_t i = 0; i < now.size(); ++i) now[i] = std::uint8_t(images[i] ^ 0x5a);
    h5_check(H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, now.data()),
             "write /images");
    dataset_spec spec = parse_dataset_spec(dir.file("d.h5") + ":/images");
    spec.read_threads = 4;
    const auto src = formats::open_dataset(spec);
    EXPECT_EQ(src->reader(), "HDF5");
    EXPECT_EQ(read_all(*src), as_bytes(now));
  }
  // A file cut short after it was opened: the direct read finds its end, as bad input.
  std::filesystem::copy_file(dir.file("d.h5"), dir.file("cut.h5"));
  dataset_spec spec = parse_dataset_spec(dir.file("cut.h5") + ":/images");
  spec.read_threads = 4;
  const auto src = formats::open_dataset(spec);
  std::filesystem::resize_file(dir.file("cut.h5"), 4 << 20);
  std::vector<std::byte> all(images.size());
  expect_error([&] { src->read_rows(0, 40, all.data()); }, errc::bad_input,
               {"cut.h5", "truncated: end of file inside the rows"});
}

TEST(Hdf5Source, ChosenDatasetIsNamedInTheNote) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  auto src = formats::open_dataset(parse_dataset_spec(dir.file("t.h5")));
  EXPECT_EQ(src->shape(), k_u8_shape);
  EXPECT_TRUE(contains(src->note(), "using dataset")) << src->note();
  EXPECT_TRUE(contains(src->note(), "/train/images")) << src->note();
  EXPECT_TRUE(contains(src->name(), "/train/images")) << src->name();
}

TEST(Hdf5Source, CompressedChunksLargerThanTheCacheAreNotedSinceEachReadDecodesThemAgain) {
  // A slab of rows that is one chunk is cached up to 1 GiB (256 MiB until 2026-12-07: a
  // chunk of 281 MiB was decoded again for each of 36 reads, 20 s); one larger is said,
  // where a chunk is stored at all. (A chunk of a few bytes, written as stored: only the
  // index is read here.)
  temp_dir dir;
  {
    auto f = h5_create(dir.file("big.h5"));
    const std::pair<const char*, hsize_t> sets[] = {
        {"/huge", 2}, {"/cached", 1}, {"/never", 2}, {"/narrow", 2}};
    for (const auto& [name, rows] : sets) {
      const bool narrow = std::string(name) == "/narrow";  // chunks of half a sample's width
      const hsize_t dims[3] = {2, 32768, 24576};
      const hsize_t chunk[3] = {rows, 32768, narrow ? 12288u : 24576u};
      h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
      h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
      h5_check(H5Pset_chunk(dcpl.get(), 3, chunk), "chunk");
      h5_check(H5Pset_deflate(dcpl.get(), 1), "gzip");
      h5 d(H5Dcreate2(f.get(), name, H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT),
           H5Dclose, "create");
      if (std::string(name) == "/never") continue;
      const hsize_t at[3] = {0, 0, 0};
      const char stored[16] = {};
      h5_check(H5Dwrite_chunk(d.get(), H5P_DEFAULT, 0, at, sizeof stored, stored), "chunk");
    }
  }
  const std::string b = dir.file("big.h5");
  auto huge = formats::open_dataset(parse_dataset_spec(b + ":/huge"));
  EXPECT_TRUE(contains(huge->note(), "big.h5:/huge: its compressed chunks, 1536 MiB each "
                                     "decoded, are more than the one chunk of up to 1024 MiB "
                                     "that dctchop lets HDF5 cache: HDF5 decodes a chunk again "
                                     "for each read of rows in it"))
      << huge->note();
  auto narrow = formats::open_dataset(parse_dataset_spec(b + ":/narrow"));
  EXPECT_TRUE(contains(narrow->note(), "big.h5:/narrow: its compressed chunks, 768 MiB each "
                                       "decoded, are more than dctchop lets HDF5 cache (64 MiB; "
                                       "one chunk of up to 1024 MiB where a chunk holds whole "
                                       "samples)"))
      << narrow->note();
  auto cached = formats::open_dataset(parse_dataset_spec(b + ":/cached"));
  EXPECT_FALSE(contains(cached->note(), "lets HDF5 cache")) << cached->note();
  auto never = formats::open_dataset(parse_dataset_spec(b + ":/never"));
  EXPECT_FALSE(contains(never->note(), "lets HDF5 cache")) << "nothing stored, nothing decoded";
  EXPECT_TRUE(contains(never->note(), "big.h5:/never: its one chunk was never written (a "
                                      "writer that stopped early?): its values read as the "
                                      "dataset's fill value"))
      << never->note();
}

TEST(Hdf5Source, BadDatasetsThrowTheDocumentedErrorsNamingFileAndDataset) {
  temp_dir dir;
  {
    auto f = h5_create(dir.file("bad.h5"));
    h5_write_compound(f.get(), "/rec", {4, 8, 8});
    h5_write_strings(f.get(), "/names", {4, 8});
    h5_write(f.get(), "/vec", H5T_IEEE_F32LE, {40}, std::vector<float>(40, 1.0f));
    // Names that are there but lead to no dataset: a group, and links to nothing.
    H5Gclose(H5Gcreate2(f.get(), "/grp", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(H5Lcreate_soft("/gone", f.get(), "/soft", H5P_DEFAULT, H5P_DEFAULT), 0);
    // relative: /grp/vec, not /vec
    ASSERT_GE(H5Lcreate_soft("vec", f.get(), "/grp/rel", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/b", f.get(), "/a", H5P_DEFAULT, H5P_DEFAULT), 0);  // a circle
    ASSERT_GE(H5Lcreate_soft("/a", f.get(), "/b", H5P_DEFAULT, H5P_DEFAULT), 0);
    {  // h5py.Empty: a null dataspace
      h5 null_space(H5Screate(H5S_NULL), H5Sclose, "null space");
      h5 d(H5Dcreate2(f.get(), "/empty", H5T_STD_U8LE, null_space.get(), H5P_DEFAULT,
                      H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose, "create /empty");
    }
    {  // h5py's complex64: a compound of floats r and i
      h5 t(H5Tcreate(H5T_COMPOUND, 8), H5Tclose, "complex");
      h5_check(H5Tinsert(t.get(), "r", 0, H5T_IEEE_F32LE), "r");
      h5_check(H5Tinsert(t.get(), "i", 4, H5T_IEEE_F32LE), "i");
      const hsize_t dims[3] = {2, 8, 8};
      h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
      h5 d(H5Dcreate2(f.get(), "/z", t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose, "create /z");
    }
    ASSERT_GE(H5Lcreate_external("absent.h5", "/x", f.get(), "/ext", H5P_DEFAULT, H5P_DEFAULT), 0);
    // A bitfield (h5py reads it as unsigned integers), and a 3-byte integer: once named only
    // "an unsupported element type (1-byte elements)".
    {
      const hsize_t dims[3] = {2, 8, 8};
      h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
      h5 d(H5Dcreate2(f.get(), "/bits", H5T_STD_B8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           H5Dclose, "create /bits");
      const std::vector<std::uint8_t> v(128, 5);
      h5_check(H5Dwrite(d.get(), H5T_NATIVE_B8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "bits");
    }
    {
      h5 t(H5Tcopy(H5T_STD_I32LE), H5Tclose, "i24");
      h5_check(H5Tset_precision(t.get(), 24), "precision");
      h5_check(H5Tset_size(t.get(), 3), "size");
      const hsize_t dims[3] = {2, 8, 8};
      h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
      h5 d(H5Dcreate2(f.get(), "/i24", t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           H5Dclose, "create /i24");
    }
  }
  const std::string b = dir.file("bad.h5");
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/bits")); }, errc::bad_input,
               {"bad.h5:/bits: is a bitfield dataset (HDF5 class H5T_BITFIELD, 1-byte elements",
                "store its values as unsigned integers"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/i24")); }, errc::bad_input,
               {"bad.h5:/i24: is a 3-byte integer dataset; dctchop reads integers of 1, 2 and 4 "
                "bytes (and of 8 as labels)"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/grp")); }, errc::bad_input,
               {"bad.h5:/grp: is a group, not a dataset"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/soft")); }, errc::bad_input,
               {"bad.h5:/soft: is a soft link to /gone, which does not exist"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/grp/rel")); },
               errc::bad_input, {"bad.h5:/grp/rel: is a soft link to vec, which does not exist"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/a")); }, errc::bad_input,
               {"bad.h5:/a: is a link that HDF5 cannot follow to its end: links lead round in a "
                "circle: " + b + ":/a -> " + b + ":/b -> " + b + ":/a"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/empty")); }, errc::bad_input,
               {"bad.h5:/empty: is an empty dataset (a null dataspace, h5py.Empty)"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/z")); }, errc::bad_input,
               {"bad.h5:/z: is a complex dataset (h5py's compound of r and i)"});
  // (A file not there is an I/O error, exit 5, as a missing input is; 3 before 2026-12-07.)
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/ext")); }, errc::io,
               {"bad.h5:/ext: is an external link to absent.h5:/x, which cannot be opened: "
                "absent.h5 is missing"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/rec")); }, errc::bad_input,
               {"bad.h5", "/rec", "compound"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/names")); }, errc::bad_input,
               {"bad.h5", "/names", "string"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(b + ":/nope")); }, errc::bad_input,
               {"bad.h5", "/nope", "no such dataset", "/vec (40,)"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(dir.file("missing.h5"))); }, errc::io,
               {"missing.h5"});
  write_bytes(dir.file("text.h5"), "not an HDF5 file at all\n");
  expect_error([&] { formats::open_dataset(parse_dataset_spec(dir.file("text.h5"))); },
               errc::bad_input, {"text.h5", "not an HDF5 file"});
}

TEST(Hdf5Source, ExternalLinksInACircleOrPastHdf5sSixteenAreBadInputNamingTheWay) {
  // HDF5 follows 16 links on a way, then says only that the object is not there: a.h5 and
  // a2.h5 link to each other, c.h5 to itself, and a chain of 18 files ends in data that a
  // way of 17 links does not reach (but one of 16 does).
  temp_dir dir;
  const auto link = [&](const std::string& file, const std::string& to) {
    auto f = h5_create(dir.file(file));
    h5_check(H5Lcreate_external(dir.file(to).c_str(), "/img", f.get(), "/img", H5P_DEFAULT,
                                H5P_DEFAULT),
             "link");
  };
  link("a.h5", "a2.h5");
  link("a2.h5", "a.h5");
  link("c.h5", "c.h5");
  const auto ch = [](int i) { return "ch" + std::to_string(i) + ".h5"; };
  for (int i = 0; i < 17; ++i) link(ch(i), ch(i + 1));
  {
    auto f = h5_create(dir.file(ch(17)));
    h5_write(f.get(), "/img", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 7));
  }
  const auto open = [&](const std::string& file) {
    return formats::open_dataset(parse_dataset_spec(dir.file(file) + ":/img"));
  };
  const std::string a = dir.file("a.h5"), a2 = dir.file("a2.h5"), c = dir.file("c.h5");
  expect_error([&] { open("a.h5"); }, errc::bad_input,
               {a + ":/img: is a link that HDF5 cannot follow to its end: external links lead "
                    "round in a circle: " + a + ":/img -> " + a2 + ":/img -> " + a + ":/img"});
  expect_error([&] { open("c.h5"); }, errc::bad_input,
               {"external links lead round in a circle: " + c + ":/img -> " + c + ":/img"});
  expect_error([&] { open(ch(0)); }, errc::bad_input,
               {"ch0.h5:/img: is a link that HDF5 cannot follow to its end: a way of more than "
                "the 16 links HDF5 follows: " + dir.file(ch(0)) + ":/img -> " + dir.file(ch(1)),
                dir.file(ch(16)) + ":/img -> " + dir.file(ch(17)) + ":/img"});
  EXPECT_EQ(open(ch(1))->shape(), (std::vector<std::uint64_t>{2, 8, 8}));
  // Two links or more that end at nothing: the way is named (it said "x1.h5 holds no /img",
  // where x1.h5 holds /img, a link).
  link("x0.h5", "x1.h5");
  link("x1.h5", "x2.h5");  // (no x2.h5: a file not there, an I/O error as a missing input)
  expect_error([&] { open("x0.h5"); }, errc::io,
               {"x0.h5:/img: is a link that HDF5 cannot follow to its end: external links lead "
                "to a file that cannot be opened (" + dir.file("x2.h5") + " is missing): " +
                dir.file("x0.h5") + ":/img -> " + dir.file("x1.h5") + ":/img -> " +
                dir.file("x2.h5") + ":/img"});
  {
    auto f = h5_create(dir.file("soft.h5"));
    h5_check(H5Lcreate_soft("/b", f.get(), "/a", H5P_DEFAULT, H5P_DEFAULT), "link");
    h5_check(H5Lcreate_soft("/gone", f.get(), "/b", H5P_DEFAULT, H5P_DEFAULT), "link");
  }
  const std::string sf = dir.file("soft.h5");
  expect_error([&] { formats::open_dataset(parse_dataset_spec(sf + ":/a")); }, errc::bad_input,
               {"links lead to nothing (" + sf + " holds no /gone): " + sf + ":/a -> " + sf +
                ":/b -> " + sf + ":/gone"});
  // The same for a group on the way that is such a link (it was "the file is damaged").
  {
    auto f = h5_create(dir.file("g.h5"));
    h5_check(H5Lcreate_external("nofile.h5", "/g", f.get(), "/g", H5P_DEFAULT, H5P_DEFAULT),
             "link");
    h5_check(H5Lcreate_soft("/h", f.get(), "/h", H5P_DEFAULT, H5P_DEFAULT), "link");
    h5_check(H5Lcreate_external(a.c_str(), "/img", f.get(), "/c", H5P_DEFAULT, H5P_DEFAULT),
             "link");
  }
  const std::string g = dir.file("g.h5");
  expect_error([&] { formats::open_dataset(parse_dataset_spec(g + ":/g/img")); }, errc::io,
               {g + ":/g/img: /g, on the way to it, is an external link to nofile.h5:/g, which "
                    "cannot be opened: nofile.h5 is missing"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(g + ":/h/img")); }, errc::bad_input,
               {g + ":/h/img: /h, on the way to it, is a link that HDF5 cannot follow to its "
                    "end: links lead round in a circle: " + g + ":/h -> " + g + ":/h"});
  expect_error([&] { formats::open_dataset(parse_dataset_spec(g + ":/c/x")); }, errc::bad_input,
               {g + ":/c/x: /c, on the way to it, is a link that HDF5 cannot follow to its end: "
                    "external links lead round in a circle: " + g + ":/c -> " + a + ":/img -> " +
                    a2 + ":/img -> " + a + ":/img"});
}

TEST(Hdf5Source, ADatasetReachedByTwoExternalLinksAndASoftOneIsOneCandidate) {
  // Each external link opens the file anew, under another HDF5 file number: the one dataset
  // was three candidates ("name the dataset; candidates: /e, /e2, /s").
  temp_dir dir;
  {
    auto t = h5_create(dir.file("t.h5"));
    h5_write(t.get(), "/img", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 1));
    auto l = h5_create(dir.file("l.h5"));
    const std::string t_h5 = dir.file("t.h5");
    for (const char* name : {"/e", "/e2"}) {
      h5_check(H5Lcreate_external(t_h5.c_str(), "/img", l.get(), name, H5P_DEFAULT, H5P_DEFAULT),
               "link");
    }
    h5_check(H5Lcreate_soft("/e", l.get(), "/s", H5P_DEFAULT, H5P_DEFAULT), "link");
  }
  const auto src = formats::open_dataset(parse_dataset_spec(dir.file("l.h5")));
  EXPECT_EQ(src->dataset_path(), "/e");
}

TEST(Hdf5Source, ADatasetReachedByMoreThanOneLinkIsOneCandidateNamedByAHardLink) {
  // One dataset, four names: two hard links, a soft link and an external link to the file
  // itself. It is still the one dataset of the file, chosen without --dataset, under the
  // first hard link's name; "/a_soft" comes first in name order but is only a link.
  temp_dir dir;
  const auto v = dctchop::test::smooth_f32_nhw(3, 16, 16);
  {
    auto f = h5_create(dir.file("l.h5"));
    h5_write(f.get(), "/real", H5T_IEEE_F32LE, {3, 16, 16}, v);
    ASSERT_GE(H5Lcreate_soft("/real", f.get(), "/a_soft", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_external("l.h5", "/real", f.get(), "/b_ext", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_hard(f.get(), "/real", f.get(), "/z_hard", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  const auto run = dctchop::test::run_sh(dctchop::test::dctchop_bin() + " compress l.h5 -o l.dcz --json", dir.path());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(dctchop::test::parse_json(run.out).value("source", ""), "l.h5:/real") << run.out;
  // Two datasets, each with a second name: still two candidates, each named once.
  {
    auto f = h5_create(dir.file("two.h5"));
    h5_write(f.get(), "/p", H5T_IEEE_F32LE, {3, 16, 16}, v);
    h5_write(f.get(), "/q", H5T_IEEE_F32LE, {3, 16, 16}, v);
    ASSERT_GE(H5Lcreate_soft("/p", f.get(), "/p_link", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/q", f.get(), "/q_link", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  expect_error([&] { formats::open_dataset(parse_dataset_spec(dir.file("two.h5"))); },
               errc::invalid_argument, {"candidates: /p (3, 16, 16), /q (3, 16, 16)"});
}

// ---------------------------------------------------------------- sink (library)

TEST(Hdf5Sink, WritesContiguousDatasetWithAttributesAndSideDatasetOnlyAtFinish) {
  temp_dir dir;
  const auto v = dctchop::test::smooth_f32_nhw(5, 24, 18);
  const auto spec = parse_dataset_spec(dir.file("o.h5") + ":/deep/group/fields");
  {
    auto w = formats::create_dataset(spec, formats::npy_dtype_of(dtype::f32), k_f32_shape, false,
                                     json{{"k_int", 8}, {"k_real", 31.5}, {"k_text", "hello"}});
    const u64 row = 24 * 18;
    w->write_rows(v.data(), 2);
    w->write_rows(v.data() + 2 * row, 3);
    EXPECT_TRUE(w->add_side_dataset("/labels", *formats::parse_npy_descr("<i8"), {6},
                                    [&](u64 first, u64 n, void* dst) {
                                      std::memcpy(dst, k_labels.data() + first, n * 8);
                                    }));
    EXPECT_FALSE(std::filesystem::exists(dir.file("o.h5"))) << "nothing before finish()";
    w->finish();
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.h5"}) << "no temporary file left";
  auto f = h5_open(dir.file("o.h5"));
  const auto info = h5_describe(f.get(), "/deep/group/fields");
  EXPECT_EQ(info.shape, k_f32_shape);
  EXPECT_EQ(info.cls, H5T_FLOAT);
  EXPECT_EQ(info.size, 4u);
  EXPECT_EQ(info.layout, H5D_CONTIGUOUS);
  EXPECT_EQ(h5_read<float>(f.get(), "/deep/group/fields"), v);
  EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/labels"), k_labels);
  EXPECT_EQ(h5_attr_number(f.get(), "/deep/group/fields", "k_int"), 8.0);
  EXPECT_EQ(h5_attr_number(f.get(), "/deep/group/fields", "k_real"), 31.5);
  EXPECT_EQ(h5_attr_string(f.get(), "/deep/group/fields", "k_text"), "hello");
}

TEST(Hdf5Sink, UnfinishedOutputLeavesNothingAndExistingOutputIsRefusedUnlessOverwrite) {
  temp_dir dir;
  const auto spec = parse_dataset_spec(dir.file("o.h5"));
  {
    auto w = formats::create_dataset(spec, formats::npy_dtype_of(dtype::u8), {2, 8, 8}, false);
    std::vector<std::uint8_t> row(64, 1);
    w->write_rows(row.data(), 1);
  }  // abandoned
  EXPECT_TRUE(dir.entries().empty()) << "an abandoned output leaves no file";
  {
    auto w = formats::create_dataset(spec, formats::npy_dtype_of(dtype::u8), {2, 8, 8}, false);
    std::vector<std::uint8_t> rows(128, 2);
    w->write_rows(rows.data(), 2);
    w->finish();
  }
  {
    auto f = h5_open(dir.file("o.h5"));
    EXPECT_TRUE(h5_exists(f.get(), "/data")) << "the default output dataset is /data";
  }
  const std::string before = read_bytes(dir.file("o.h5"));
  expect_error([&] { formats::create_dataset(spec, formats::npy_dtype_of(dtype::u8), {2, 8, 8}, false); },
               errc::output_exists, {"o.h5"});
  EXPECT_EQ(read_bytes(dir.file("o.h5")), before);
  {
    auto w = formats::create_dataset(spec, formats::npy_dtype_of(dtype::u16), {1, 4, 4}, true);
    std::vector<std::uint16_t> rows(16, 3);
    w->write_rows(rows.data(), 1);
    w->finish();
  }
  auto f = h5_open(dir.file("o.h5"));
  EXPECT_EQ(h5_describe(f.get(), "/data").shape, (std::vector<u64>{1, 4, 4}));
  EXPECT_EQ(h5_describe(f.get(), "/data").size, 2u);
}

// ---------------------------------------------------------------- round trips (library)

TEST(Hdf5Lib, U8AtChopEqualToBlockRoundTripsExactlyToHdf5AndNpy) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  auto be = cpu();
  formats::compress_options o;
  o.chop = 8;
  o.labels_path = dir.file("t.h5") + ":/train/labels";
  o.chunk_mb = 0.002;  // several archive chunks
  const auto cr = formats::compress(parse_dataset_spec(dir.file("t.h5") + ":/train/images"),
                                    dir.file("a.dcz"), *be, o);
  EXPECT_EQ(cr.geom.lay, layout::nhwc);
  EXPECT_EQ(cr.type, dtype::u8);
  EXPECT_GT(cr.chunks, 1u);
  formats::decompress(dir.file("a.dcz"), parse_dataset_spec(dir.file("o.h5") + ":/images"), *be, {});
  formats::decompress(dir.file("a.dcz"), parse_dataset_spec(dir.file("o.npy")), *be, {});
  const auto orig = dctchop::test::smooth_u8_nhwc(6, 16, 16, 3);
  auto f = h5_open(dir.file("o.h5"));
  const auto info = h5_describe(f.get(), "/images");
  EXPECT_EQ(info.shape, k_u8_shape);
  EXPECT_EQ(info.cls, H5T_INTEGER);
  EXPECT_EQ(info.size, 1u);
  EXPECT_EQ(info.sign, H5T_SGN_NONE);
  EXPECT_EQ(info.layout, H5D_CONTIGUOUS);
  EXPECT_EQ(h5_read<std::uint8_t>(f.get(), "/images"), orig) << "chop 8 of 8 is exact for u8";
  EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/labels"), k_labels);
  const auto npy = load_npy(dir.file("o.npy"));
  EXPECT_EQ(npy.raw, as_bytes(orig));
}

TEST(Hdf5Lib, F32ContiguousRoundTripMeetsPsnrAndMatchesTheReportedFigure) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  auto be = cpu();
  formats::compress_options o;
  o.chop = 4;
  const auto cr = formats::compress(parse_dataset_spec(dir.file("m.h5") + ":/fields"),
                                    dir.file("f.dcz"), *be, o);
  ASSERT_TRUE(cr.q && cr.q->psnr_db);
  formats::decompress(dir.file("f.dcz"), parse_dataset_spec(dir.file("o.h5:/fields")), *be, {});
  formats::decompress(dir.file("f.dcz"), parse_dataset_spec(dir.file("o.npy")), *be, {});
  const auto orig = dctchop::test::smooth_f32_nhw(5, 24, 18);
  auto f = h5_open(dir.file("o.h5"));
  EXPECT_EQ(h5_describe(f.get(), "/fields").shape, k_f32_shape);
  const auto dec = h5_read<float>(f.get(), "/fields");
  const double p = psnr_of(as_doubles(orig), as_doubles(dec), value_range(as_doubles(orig)));
  EXPECT_GT(p, 30.0);
  EXPECT_NEAR(p, *cr.q->psnr_db, 1e-6);
  EXPECT_EQ(as_bytes(dec), load_npy(dir.file("o.npy")).raw) << "HDF5 and NPY outputs agree";
  EXPECT_NEAR(*h5_attr_number(f.get(), "/fields", "dctchop_psnr_db"), *cr.q->psnr_db, 1e-9);
}

TEST(Hdf5Lib, U16NchwWithNonDividingChunksRoundTripsAtHighPsnr) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  auto be = cpu();
  formats::compress_options o;
  o.chop = 6;
  o.chunk_mb = 0.004;
  const auto cr = formats::compress(parse_dataset_spec(dir.file("m.h5") + ":/extra/u16"),
                                    dir.file("u.dcz"), *be, o);
  EXPECT_EQ(cr.geom.lay, layout::nchw);
  EXPECT_EQ(cr.type, dtype::u16);
  formats::decompress(dir.file("u.dcz"), parse_dataset_spec(dir.file("o.h5")), *be, {});
  auto f = h5_open(dir.file("o.h5"));
  const auto info = h5_describe(f.get(), "/data");
  EXPECT_EQ(info.shape, k_u16_shape);
  EXPECT_EQ(info.size, 2u);
  EXPECT_EQ(info.sign, H5T_SGN_NONE);
  EXPECT_EQ(info.layout, H5D_CONTIGUOUS);
  const auto dec = h5_read<std::uint16_t>(f.get(), "/data");
  const double p = psnr_of(as_doubles(smooth_u16_nchw(5, 2, 20, 18)), as_doubles(dec), 65535.0);
  EXPECT_GT(p, 60.0);
  ASSERT_TRUE(cr.q && cr.q->psnr_db);
  EXPECT_NEAR(p, *cr.q->psnr_db, 1e-6);
}

TEST(Hdf5Lib, BigEndianInputRoundTripsLikeTheLittleEndianCopy) {
  temp_dir dir;
  const auto v = dctchop::test::smooth_f32_nhw(4, 16, 16);
  {
    auto f = h5_create(dir.file("e.h5"));
    h5_write(f.get(), "/be", H5T_IEEE_F32BE, {4, 16, 16}, v, storage{{3, 16, 16}, 1});
    h5_write(f.get(), "/le", H5T_IEEE_F32LE, {4, 16, 16}, v);
  }
  auto be = cpu();
  formats::compress_options o;
  o.chop = 5;
  const auto a = formats::compress(parse_dataset_spec(dir.file("e.h5:/be")), dir.file("be.dcz"), *be, o);
  const auto b = formats::compress(parse_dataset_spec(dir.file("e.h5:/le")), dir.file("le.dcz"), *be, o);
  formats::decompress(dir.file("be.dcz"), parse_dataset_spec(dir.file("be.npy")), *be, {});
  formats::decompress(dir.file("le.dcz"), parse_dataset_spec(dir.file("le.npy")), *be, {});
  const auto x = load_npy(dir.file("be.npy")), y = load_npy(dir.file("le.npy"));
  EXPECT_EQ(x.header.type.native_descr(), "<f4");
  EXPECT_EQ(x.raw, y.raw);
  ASSERT_TRUE(a.q && b.q && a.q->psnr_db && b.q->psnr_db);
  EXPECT_EQ(*a.q->psnr_db, *b.q->psnr_db);
  EXPECT_GT(psnr_of(as_doubles(v), x.values, value_range(as_doubles(v))), 30.0);
}

TEST(Hdf5Lib, VerifyAndEvalReadHdf5Inputs) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  auto be = cpu();
  formats::compress_options o;
  o.chop = 4;
  formats::compress(parse_dataset_spec(dir.file("m.h5:/train/images")), dir.file("a.dcz"), *be, o);
  formats::verify_options vo;
  vo.min_psnr = 25;
  const auto ok = formats::verify_archive(dir.file("a.dcz"),
                                          parse_dataset_spec(dir.file("m.h5:/train/images")), *be, vo);
  EXPECT_TRUE(ok.passed()) << ok.to_json().dump();
  const auto mm = formats::verify_archive(dir.file("a.dcz"),
                                          parse_dataset_spec(dir.file("m.h5:/fields")), *be, vo);
  EXPECT_FALSE(mm.mismatch.empty()) << "a different dataset is a mismatch";
  formats::eval_options eo;
  eo.chops = {2, 8};
  eo.ssim = false;
  const auto er = formats::eval(parse_dataset_spec(dir.file("m.h5:/train/images")), *be, eo);
  ASSERT_EQ(er.rows.size(), 2u);
  EXPECT_EQ(er.geom.shape(), k_u8_shape);
  EXPECT_FALSE(er.rows[1].q.psnr_db.has_value()) << "chop 8 of 8 is lossless for u8";
}

// ---------------------------------------------------------------- command line

/** Run `dctchop ARGS`, failing the test unless it exits 0. */
command_result must(const temp_dir& dir, const std::string& args) {
  auto r = cli(dir, args);
  EXPECT_EQ(r.status, 0) << "dctchop " << args << "\n" << describe(r);
  return r;
}

/** In `f`, /v: a u8 virtual dataset of 4 x 8 x 8, all of it `source`:/d. */
void add_whole_vds(hid_t f, const std::string& source) {
  const hsize_t dims[3] = {4, 8, 8}, top[3] = {0, 0, 0};
  const hid_t vspace = H5Screate_simple(3, dims, nullptr);
  const hid_t sspace = H5Screate_simple(3, dims, nullptr);
  H5Sselect_hyperslab(sspace, H5S_SELECT_SET, top, nullptr, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  EXPECT_GE(H5Pset_virtual(dcpl, vspace, source.c_str(), "/d", sspace), 0) << source;
  const hid_t d = H5Dcreate2(f, "/v", H5T_STD_U8LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(d, 0) << source;
  if (d >= 0) H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sspace);
  H5Sclose(vspace);
}

/** t.h5 (make_train_file) and a.dcz, its images compressed. */
void make_train_archive(const temp_dir& dir) {
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images -o a.dcz -q");
}

TEST(Hdf5Cli, U8GzipGroupToArchiveToHdf5AndNpyWithLabelsAndAttributes) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  auto c = must(dir, "compress t.h5:/train/images --labels t.h5:/train/labels -o a.dcz --chop 4 --json");
  const json j = parse_json(c.out);
  must(dir, "decompress a.dcz -o out.h5:/images -q");
  must(dir, "decompress a.dcz -o out.npy -q --labels-out l.npy");
  const auto orig = dctchop::test::smooth_u8_nhwc(6, 16, 16, 3);
  auto f = h5_open(dir.file("out.h5"));
  const auto info = h5_describe(f.get(), "/images");
  EXPECT_EQ(info.shape, k_u8_shape);
  EXPECT_EQ(info.cls, H5T_INTEGER);
  EXPECT_EQ(info.size, 1u);
  EXPECT_EQ(info.sign, H5T_SGN_NONE);
  EXPECT_EQ(info.layout, H5D_CONTIGUOUS);
  const auto dec = h5_read<std::uint8_t>(f.get(), "/images");
  const double p = psnr_of(as_doubles(orig), as_doubles(dec), 255.0);
  EXPECT_GT(p, 30.0);
  ASSERT_TRUE(j.at("quality").at("psnr_db").is_number()) << c.out;
  EXPECT_NEAR(p, j["quality"]["psnr_db"].get<double>(), 1e-9);
  EXPECT_EQ(as_bytes(dec), load_npy(dir.file("out.npy")).raw) << "HDF5 and NPY outputs agree";
  // Labels beside the data, equal to the input labels, and in --labels-out.
  ASSERT_TRUE(h5_exists(f.get(), "/labels"));
  EXPECT_EQ(h5_describe(f.get(), "/labels").shape, (std::vector<u64>{6}));
  EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/labels"), k_labels);
  const auto l = load_npy(dir.file("l.npy"));
  EXPECT_EQ(l.header.type.native_descr(), "<i8");
  EXPECT_EQ(l.raw, as_bytes(k_labels));
  // --labels-out naming a file of their own puts them there only: none beside the data, whose
  // dataset may then be called /labels.
  must(dir, "decompress a.dcz -o own.h5:/labels -q --labels-out own_labels.npy");
  {
    auto o = h5_open(dir.file("own.h5"));
    EXPECT_EQ(h5_describe(o.get(), "/labels").shape, k_u8_shape) << "the data, not the labels";
    EXPECT_EQ(load_npy(dir.file("own_labels.npy")).raw, as_bytes(k_labels));
  }
  // Attributes recording where it came from.
  EXPECT_EQ(h5_attr_number(f.get(), "/images", "dctchop_block"), 8.0);
  EXPECT_EQ(h5_attr_number(f.get(), "/images", "dctchop_chop"), 4.0);
  ASSERT_TRUE(h5_attr_number(f.get(), "/images", "dctchop_psnr_db"));
  EXPECT_NEAR(*h5_attr_number(f.get(), "/images", "dctchop_psnr_db"),
              j["quality"]["psnr_db"].get<double>(), 1e-9);
  EXPECT_EQ(h5_attr_string(f.get(), "/images", "dctchop_coeff"), "f16");
  EXPECT_EQ(h5_attr_string(f.get(), "/images", "dctchop_layout"), "NHWC");
  EXPECT_EQ(h5_attr_number(f.get(), "/images", "dctchop_first_sample"), 0.0);
  const auto archive = h5_attr_string(f.get(), "/images", "dctchop_archive");
  ASSERT_TRUE(archive);
  EXPECT_TRUE(contains(*archive, "a.dcz")) << *archive;
  const auto source = h5_attr_string(f.get(), "/images", "dctchop_source");
  ASSERT_TRUE(source);
  EXPECT_TRUE(contains(*source, "t.h5")) << *source;
  EXPECT_TRUE(contains(*source, "/train/images")) << *source;
  // The string attributes are UTF-8 (as flagged): a Latin-1 archive name's stray byte is
  // U+FFFD there, as in the JSON texts, not a byte that strict readers refuse.
  std::filesystem::copy_file(dir.file("a.dcz"), dir.file("caf\xe9.dcz"));
  must(dir, "decompress 'caf\xe9.dcz' -o latin.h5 -q");
  auto latin = h5_open(dir.file("latin.h5"));
  EXPECT_EQ(h5_attr_string(latin.get(), "/data", "dctchop_archive"), "caf\xef\xbf\xbd.dcz");
}

TEST(Hdf5Cli, NanStoredAsAValueIsRecordedInTheOutputsAttributesAndNoted) {
  // The HDF5 output cannot mark the places of NaN and Inf compressed as a value; its
  // attributes say that there were some, and what they became; decompress says so too.
  temp_dir dir;
  auto v = dctchop::test::smooth_f32_nhw(3, 16, 16);
  v[20] = std::numeric_limits<float>::quiet_NaN();
  v[300] = std::numeric_limits<float>::infinity();
  dctchop::test::save_npy(dir.file("x.npy"), dtype::f32, {3, 16, 16}, v);
  auto c = cli(dir, "compress x.npy -o a.dcz --nonfinite replace=-2 -q && " +
                        dctchop::test::dctchop_bin() + " decompress a.dcz -o y.h5");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_TRUE(contains(c.err, "a.dcz: its original held 2 NaN/Inf values, compressed as -2")) << c.err;
  EXPECT_TRUE(contains(c.err, "nothing in the output marks them")) << c.err;
  auto f = h5_open(dir.file("y.h5"));
  EXPECT_EQ(h5_attr_number(f.get(), "/data", "dctchop_nonfinite_replacement"), -2.0);
  EXPECT_EQ(h5_attr_number(f.get(), "/data", "dctchop_nonfinite_replaced"), 2.0);
  // From a stream, whose footer comes at its end: the same attributes, added once it is read.
  auto s = dctchop::test::run_sh("cat a.dcz | " + dctchop::test::dctchop_bin() +
                                     " decompress - -o s.h5 -q", dir.path());
  ASSERT_EQ(s.status, 0) << describe(s);
  auto fs = h5_open(dir.file("s.h5"));
  for (const char* a : {"dctchop_nonfinite_replacement", "dctchop_nonfinite_replaced",
                        "dctchop_psnr_db"}) {
    EXPECT_EQ(h5_attr_number(fs.get(), "/data", a), h5_attr_number(f.get(), "/data", a)) << a;
  }
  ASSERT_TRUE(h5_attr_number(fs.get(), "/data", "dctchop_psnr_db"));
  // Without a replacement, neither the attributes nor the note.
  for (auto& x : v)
    if (!std::isfinite(x)) x = 0.0f;
  dctchop::test::save_npy(dir.file("z.npy"), dtype::f32, {3, 16, 16}, v);
  auto p = cli(dir, "compress z.npy -o b.dcz -q && " + dctchop::test::dctchop_bin() +
                        " decompress b.dcz -o w.h5");
  ASSERT_EQ(p.status, 0) << describe(p);
  EXPECT_FALSE(contains(p.err, "NaN/Inf")) << p.err;
  auto g = h5_open(dir.file("w.h5"));
  EXPECT_FALSE(h5_attr_number(g.get(), "/data", "dctchop_nonfinite_replacement"));
}

TEST(Hdf5Cli, AnHdf5OutputUnderALimitOnOpenFilesSaysSoAndLeavesNoTemporaryFolder) {
  // Under `ulimit -n 4` the hidden temporary folder was made, its descriptor refused
  // (EMFILE), and the folder left behind, said to have "changed while it was being made;
  // try again": every retry left one more. Whatever the limit, an error names the cause, and
  // nothing is left but a finished output.
  temp_dir dir;
  make_train_archive(dir);
  std::filesystem::create_directory(dir.file("out"));
  int failed = 0;
  for (int limit = 4; limit <= 16; ++limit) {
    SCOPED_TRACE(limit);
    auto c = sh(dir, "ulimit -n " + std::to_string(limit) +
                         " && DCTCHOP decompress a.dcz -o out/x.h5 -f");
    if (c.status == 127) continue;  // (the loader's own: the libraries did not open)
    // (UBSan's own, in the sanitizer build: its check of a vptr tests memory through a pipe
    // of its own, which the limit refuses, and calls a virtual call "invalid vptr", ending the
    // run where it stands, as a kill would: what it left is cleared.)
    if (c.status == 1 && contains(c.err, "invalid vptr")) {
      for (const auto& e : std::filesystem::directory_iterator(dir.file("out"))) {
        if (e.path().filename() != "x.h5") std::filesystem::remove_all(e.path());
      }
      continue;
    }
    if (c.status != 0) {
      ++failed;
      EXPECT_EQ(c.status, 5) << describe(c);
      EXPECT_FALSE(contains(c.err, "changed while")) << describe(c);
      EXPECT_TRUE(contains(c.err, "Too many open files")) << describe(c);
    }
    for (const auto& e : std::filesystem::directory_iterator(dir.file("out"))) {
      EXPECT_EQ(e.path().filename(), "x.h5") << "left behind";
    }
  }
  EXPECT_GT(failed, 0) << "no limit was low enough to refuse a descriptor";
}

TEST(Hdf5Cli, U8AtChop8IsExactThroughHdf5AndOutputDefaultsToData) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images -o a.dcz --chop 8 -q");
  // The summary and the JSON report name the dataset it chose.
  auto said = must(dir, "decompress a.dcz -o out.h5");
  EXPECT_TRUE(contains(said.err, "a.dcz -> out.h5:/data: 6x16x16x3 u8")) << said.err;
  auto json_said = must(dir, "decompress a.dcz -o out.h5 -f --json");
  EXPECT_EQ(parse_json(json_said.out).value("dataset", ""), "/data") << json_said.out;
  must(dir, "decompress a.dcz -o out.npy -q");
  auto f = h5_open(dir.file("out.h5"));
  ASSERT_TRUE(h5_exists(f.get(), "/data"));
  EXPECT_EQ(h5_read<std::uint8_t>(f.get(), "/data"), dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
  EXPECT_FALSE(h5_exists(f.get(), "/labels")) << "no labels stored, none written";
  EXPECT_EQ(load_npy(dir.file("out.npy")).raw, as_bytes(dctchop::test::smooth_u8_nhwc(6, 16, 16, 3)));
  EXPECT_EQ(h5_attr_number(f.get(), "/data", "dctchop_chop"), 8.0);
}

TEST(Hdf5Cli, F32NhwContiguousAndU16NchwChunkedRoundTripKeepShapeAndDtype) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  // f32 NHW, contiguous.
  auto c = must(dir, "compress m.h5:/fields -o f.dcz --chop 4 --json");
  must(dir, "decompress f.dcz -o f.h5:/out/fields -q");
  must(dir, "decompress f.dcz -o f.npy -q");
  {
    auto f = h5_open(dir.file("f.h5"));
    const auto info = h5_describe(f.get(), "/out/fields");
    EXPECT_EQ(info.shape, k_f32_shape);
    EXPECT_EQ(info.cls, H5T_FLOAT);
    EXPECT_EQ(info.size, 4u);
    EXPECT_EQ(info.layout, H5D_CONTIGUOUS);
    const auto orig = dctchop::test::smooth_f32_nhw(5, 24, 18);
    const auto dec = h5_read<float>(f.get(), "/out/fields");
    const double p = psnr_of(as_doubles(orig), as_doubles(dec), value_range(as_doubles(orig)));
    EXPECT_GT(p, 30.0);
    EXPECT_NEAR(p, parse_json(c.out).at("quality").at("psnr_db").get<double>(), 1e-6);
    EXPECT_EQ(as_bytes(dec), load_npy(dir.file("f.npy")).raw);
    EXPECT_EQ(h5_attr_string(f.get(), "/out/fields", "dctchop_layout"), "NHW");
    EXPECT_EQ(h5_attr_string(f.get(), "/out/fields", "dctchop_coeff"), "f32");
  }
  // u16 NCHW with chunks (2,1,7,5) that do not divide (5,2,20,18), given with --dataset.
  must(dir, "compress m.h5 --dataset /extra/u16 -o u.dcz --chop 6 -q --chunk-mb 0.004");
  must(dir, "decompress u.dcz -o u.h5:/u16 -q");
  must(dir, "decompress u.dcz -o u.npy -q");
  auto f = h5_open(dir.file("u.h5"));
  const auto info = h5_describe(f.get(), "/u16");
  EXPECT_EQ(info.shape, k_u16_shape);
  EXPECT_EQ(info.cls, H5T_INTEGER);
  EXPECT_EQ(info.size, 2u);
  EXPECT_EQ(info.sign, H5T_SGN_NONE);
  const auto dec = h5_read<std::uint16_t>(f.get(), "/u16");
  EXPECT_GT(psnr_of(as_doubles(smooth_u16_nchw(5, 2, 20, 18)), as_doubles(dec), 65535.0), 60.0);
  EXPECT_EQ(as_bytes(dec), load_npy(dir.file("u.npy")).raw);
  EXPECT_EQ(h5_attr_string(f.get(), "/u16", "dctchop_layout"), "NCHW");
}

TEST(Hdf5Cli, BigEndianDatasetsCompressLikeTheirLittleEndianCopies) {
  temp_dir dir;
  const auto u = smooth_u16_nchw(4, 1, 16, 16);
  {
    auto f = h5_create(dir.file("e.h5"));
    h5_write(f.get(), "/be", H5T_STD_U16BE, {4, 1, 16, 16}, u, storage{{3, 1, 5, 16}, 3});
    h5_write(f.get(), "/le", H5T_STD_U16LE, {4, 1, 16, 16}, u);
  }
  must(dir, "compress e.h5:/be -o be.dcz --chop 4 -q");
  must(dir, "compress e.h5:/le -o le.dcz --chop 4 -q");
  must(dir, "decompress be.dcz -o be.npy -q");
  must(dir, "decompress le.dcz -o le.npy -q");
  const auto x = load_npy(dir.file("be.npy"));
  EXPECT_EQ(x.header.type.native_descr(), "<u2");
  EXPECT_EQ(x.raw, load_npy(dir.file("le.npy")).raw);
  EXPECT_GT(psnr_of(as_doubles(u), x.values, 65535.0), 40.0);
}

TEST(Hdf5Cli, LabelsFromHdf5RoundTripAndSampleRangesSliceThem) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images --labels t.h5:/train/labels -o a.dcz -q --chunk-mb 0.002");
  auto i = must(dir, "info a.dcz");
  EXPECT_TRUE(contains(i.out, "labels <i8 6")) << i.out;
  must(dir, "decompress a.dcz -o part.h5:/images -q --samples 1:4");
  auto f = h5_open(dir.file("part.h5"));
  EXPECT_EQ(h5_describe(f.get(), "/images").shape, (std::vector<u64>{3, 16, 16, 3}));
  EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/labels"),
            (std::vector<std::int64_t>(k_labels.begin() + 1, k_labels.begin() + 4)));
  EXPECT_EQ(h5_attr_number(f.get(), "/images", "dctchop_first_sample"), 1.0);
  // The same from a piped archive (no index: labels come at the end of the stream).
  auto p = sh(dir, "cat a.dcz | DCTCHOP decompress - -o piped.h5:/x -q");
  ASSERT_EQ(p.status, 0) << describe(p);
  auto g = h5_open(dir.file("piped.h5"));
  EXPECT_EQ(h5_read<std::int64_t>(g.get(), "/labels"), k_labels);
  must(dir, "decompress a.dcz -o all.h5:/x -q");
  auto a = h5_open(dir.file("all.h5"));
  EXPECT_EQ(h5_read<std::uint8_t>(g.get(), "/x"), h5_read<std::uint8_t>(a.get(), "/x"));
}

TEST(Hdf5Cli, LabelsFromNpyGoBesideHdf5Output) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  save_npy(dir.file("labels.npy"), dtype::f32, {6}, std::vector<float>{0.5f, 1, 2, 3, 4, 5});
  must(dir, "compress t.h5:/train/images --labels labels.npy -o a.dcz -q");
  must(dir, "decompress a.dcz -o out.h5:/images -q");
  auto f = h5_open(dir.file("out.h5"));
  EXPECT_EQ(h5_describe(f.get(), "/labels").cls, H5T_FLOAT);
  EXPECT_EQ(h5_read<float>(f.get(), "/labels"), (std::vector<float>{0.5f, 1, 2, 3, 4, 5}));
}

TEST(Hdf5Cli, LabelsFromAnHdf5FileWithoutADatasetPathAreFoundByTheLabelsRule) {
  temp_dir dir;
  // A labels-only file: its one dataset is 1-D, which the image rule would refuse.
  {
    auto f = h5_create(dir.file("l.h5"));
    h5_write(f.get(), "/y", H5T_STD_I64LE, {6}, k_labels);
  }
  make_train_file(dir.file("t.h5"));
  auto c = must(dir, "compress t.h5:/train/images --labels l.h5 -o a.dcz");
  EXPECT_TRUE(contains(c.err, "using labels /y of l.h5")) << c.err;
  must(dir, "decompress a.dcz -o out.npy -q --labels-out got.npy");
  EXPECT_EQ(load_npy(dir.file("got.npy")).raw, as_bytes(k_labels));
  // An HDF5 labels output named without a dataset holds them as /labels; with one, there.
  must(dir, "decompress a.dcz -o out2.npy -q --labels-out got.h5");
  must(dir, "decompress a.dcz -o out3.npy -q --labels-out got2.h5:/y");
  {
    auto g = h5_open(dir.file("got.h5"));
    EXPECT_EQ(h5_read<std::int64_t>(g.get(), "/labels"), k_labels);
    auto g2 = h5_open(dir.file("got2.h5"));
    EXPECT_EQ(h5_read<std::int64_t>(g2.get(), "/y"), k_labels);
  }
  // The images file itself: of its datasets, /train/labels is the one named like labels.
  auto t = must(dir, "compress t.h5:/train/images --labels t.h5 -o b.dcz -f");
  EXPECT_TRUE(contains(t.err, "using labels /train/labels of t.h5")) << t.err;
  // verify --labels finds them by the same rule, and compares them with those b.dcz stores.
  auto v = must(dir, "verify b.dcz --against t.h5:/train/images --labels t.h5");
  EXPECT_TRUE(contains(v.err, "labels equal t.h5:/train/labels's (6 rows)")) << v.err;
  // ... and refuses the images named as their own labels, as compress does.
  auto self = cli(dir, "verify b.dcz --against t.h5:/train/images --labels t.h5:/train/images");
  EXPECT_EQ(self.status, 2) << describe(self);
  EXPECT_TRUE(contains(self.err, "--labels names the images themselves")) << self.err;
  // A train/test file whose splits have as many rows: the labels beside the images.
  {
    auto f = h5_create(dir.file("split.h5"));
    for (const char* g : {"/train", "/test"}) {
      h5_write(f.get(), std::string(g) + "/images", H5T_STD_U8LE, k_u8_shape,
               dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
      std::vector<std::int64_t> y = k_labels;
      if (g[1] == 't' && g[2] == 'e') y[0] = -1;  // the test labels differ
      h5_write(f.get(), std::string(g) + "/labels", H5T_STD_I64LE, {6}, y);
    }
  }
  for (const std::string g : {"/train", "/test"}) {
    auto s = must(dir, "compress split.h5:" + g + "/images --labels split.h5 -o s.dcz -f");
    EXPECT_TRUE(contains(s.err, "using labels " + g + "/labels of split.h5")) << s.err;
  }
  // Keras's pair, y_NAME of x_NAME: beside the images first, then anywhere in the file (not
  // an unrelated dataset beside them).
  {
    auto f = h5_create(dir.file("pair.h5"));
    h5_write(f.get(), "/g/x_train", H5T_STD_U8LE, k_u8_shape,
             dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
    h5_write(f.get(), "/g/other", H5T_STD_I64LE, {6}, k_labels);
    h5_write(f.get(), "/y_train", H5T_STD_I64LE, {6}, k_labels);
  }
  auto pair = must(dir, "compress pair.h5:/g/x_train --labels pair.h5 -o p.dcz -f");
  EXPECT_TRUE(contains(pair.err, "using labels /y_train of pair.h5")) << pair.err;
  // ... whatever their name: /train/y beside /train/images, not /test/labels (which took it,
  // its name coming first among the labels' names).
  {
    auto f = h5_create(dir.file("cross.h5"));
    for (const char* g : {"/train", "/test"}) {
      h5_write(f.get(), std::string(g) + "/images", H5T_STD_U8LE, k_u8_shape,
               dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
    }
    h5_write(f.get(), "/train/y", H5T_STD_I64LE, {6}, k_labels);
    std::vector<std::int64_t> other = k_labels;
    other[0] = -1;
    h5_write(f.get(), "/test/labels", H5T_STD_I64LE, {6}, other);
  }
  auto cross = must(dir, "compress cross.h5:/train/images --labels cross.h5 -o x.dcz -f");
  EXPECT_TRUE(contains(cross.err, "using labels /train/y of cross.h5")) << cross.err;
  must(dir, "decompress x.dcz -o x.npy -q -f --labels-out xl.npy");
  EXPECT_EQ(load_npy(dir.file("xl.npy")).raw, as_bytes(k_labels));
  // A conventional name elsewhere before a dataset of another name beside the images.
  {
    auto f = h5_create(dir.file("ids.h5"));
    h5_write(f.get(), "/train/images", H5T_STD_U8LE, k_u8_shape,
             dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
    h5_write(f.get(), "/train/ids", H5T_STD_I64LE, {6}, std::vector<std::int64_t>(6, 9));
    h5_write(f.get(), "/labels", H5T_STD_I64LE, {6}, k_labels);
  }
  auto ids = must(dir, "compress ids.h5:/train/images --labels ids.h5 -o i.dcz -f");
  EXPECT_TRUE(contains(ids.err, "using labels /labels of ids.h5")) << ids.err;
  // None beside the images: another group's, by the rules.
  auto test_images = must(dir, "compress cross.h5:/test/images --labels cross.h5 -o t.dcz -f");
  EXPECT_TRUE(contains(test_images.err, "using labels /test/labels of cross.h5")) << test_images.err;
  // Several candidates and no conventional name: exit 2, and the hint names --labels, not
  // --dataset (which names the image input).
  {
    auto f = h5_create(dir.file("two.h5"));
    h5_write(f.get(), "/a", H5T_STD_I64LE, {6}, k_labels);
    h5_write(f.get(), "/b", H5T_STD_I64LE, {6}, k_labels);
  }
  auto two = cli(dir, "compress t.h5:/train/images --labels two.h5 -o c.dcz");
  EXPECT_EQ(two.status, 2) << describe(two);
  EXPECT_TRUE(contains(two.err, "--labels FILE.h5:/path")) << two.err;
  EXPECT_FALSE(contains(two.err, "--dataset")) << two.err;
  EXPECT_TRUE(contains(two.err, "/a (6,)")) << two.err;
  // The images' own file with one other dataset of no conventional name: that one, never the
  // images themselves (which have one row per sample too). With only the images, an error.
  {
    auto f = h5_create(dir.file("own.h5"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, k_u8_shape, dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
    h5_write(f.get(), "/classes", H5T_STD_I64LE, {6}, k_labels);
    auto g = h5_create(dir.file("alone.h5"));
    h5_write(g.get(), "/images", H5T_STD_U8LE, k_u8_shape, dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
  }
  auto own = must(dir, "compress own.h5 --labels own.h5 -o d.dcz");
  EXPECT_TRUE(contains(own.err, "using labels /classes of own.h5")) << own.err;
  // The JSON report names both, since -q hides the notes.
  const json oj = parse_json(must(dir, "compress own.h5 --labels own.h5 -o g.dcz --json -q").out);
  EXPECT_EQ(oj.at("source"), "own.h5:/images");
  EXPECT_EQ(oj.at("labels_source"), "own.h5:/classes");
  auto alone = cli(dir, "compress alone.h5 --labels alone.h5 -o e.dcz");
  EXPECT_EQ(alone.status, 3) << describe(alone);
  EXPECT_TRUE(contains(alone.err, "other than /images")) << alone.err;
  // Named outright, the images are no labels either (the archive would hold them twice).
  dctchop::test::save_npy(dir.file("in.npy"), dtype::u8, {2, 8, 8}, std::vector<std::uint8_t>(128, 3));
  for (const std::string in : {"alone.h5:/images", "in.npy"}) {
    auto same = cli(dir, "compress " + in + " --labels " + in + " -o e.dcz");
    EXPECT_EQ(same.status, 2) << describe(same);
    EXPECT_TRUE(contains(same.err, in + ": --labels names the images themselves")) << same.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("e.dcz")));
  }
}

TEST(Hdf5Cli, AVirtualDatasetWithAMissingSourceFileIsNotedSinceItsRowsReadAsFill) {
  temp_dir dir;
  {
    auto f = h5_create(dir.file("v.h5"));
    h5_write(f.get(), "/src", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 9));
    const hsize_t half[3] = {2, 8, 8}, whole[3] = {4, 8, 8};
    const hsize_t top[3] = {0, 0, 0}, bottom[3] = {2, 0, 0};
    // /ok maps /src of this file twice; /holes maps it and /src of a file that is not there.
    for (const char* name : {"/ok", "/holes"}) {
      const hid_t vspace = H5Screate_simple(3, whole, nullptr);
      const hid_t sspace = H5Screate_simple(3, half, nullptr);
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Sselect_hyperslab(vspace, H5S_SELECT_SET, top, nullptr, half, nullptr);
      ASSERT_GE(H5Pset_virtual(dcpl, vspace, ".", "/src", sspace), 0);
      H5Sselect_hyperslab(vspace, H5S_SELECT_SET, bottom, nullptr, half, nullptr);
      ASSERT_GE(H5Pset_virtual(dcpl, vspace, std::string(name) == "/ok" ? "." : "absent.h5",
                               "/src", sspace), 0);
      const hid_t d = H5Dcreate2(f.get(), name, H5T_STD_U8LE, vspace, H5P_DEFAULT, dcpl,
                                 H5P_DEFAULT);
      ASSERT_GE(d, 0) << name;
      H5Dclose(d);
      H5Pclose(dcpl);
      H5Sclose(sspace);
      H5Sclose(vspace);
    }
  }
  auto ok = must(dir, "compress v.h5:/ok -o ok.dcz");
  EXPECT_FALSE(contains(ok.err, "virtual")) << ok.err;
  auto holes = must(dir, "compress v.h5:/holes -o holes.dcz");
  EXPECT_TRUE(contains(holes.err, "v.h5:/holes: a virtual dataset whose source file absent.h5 is "
                                  "not found (beside it, or here): the rows mapped to it read as "
                                  "the fill value")) << holes.err;
  // The rows are there all the same: the fill value, 0.
  must(dir, "decompress holes.dcz -o holes.npy");
  const auto back = dctchop::test::load_npy(dir.file("holes.npy"));
  ASSERT_EQ(back.values.size(), 4u * 64);
  EXPECT_EQ(back.values[0], 9.0);
  EXPECT_EQ(back.values[3 * 64], 0.0);
}

TEST(Hdf5Cli, AVirtualDatasetWhoseSourceIsThereButGivesNoDataIsBadInputNamingIt) {
  // HDF5 reads the rows of a source it cannot read as the fill value, without a word (h5py
  // too): a source file that is damaged, not HDF5, without the dataset, or smaller than the
  // part mapped from it would go into the archive as fill. Each is exit 3 naming the source.
  temp_dir dir;
  const hsize_t half[3] = {2, 8, 8}, whole[3] = {4, 8, 8}, four[3] = {4, 8, 8};
  const hsize_t top[3] = {0, 0, 0}, bottom[3] = {2, 0, 0};
  {
    auto s = h5_create(dir.file("s.h5"));
    h5_write(s.get(), "/src", H5T_STD_U8LE, {4, 8, 8}, std::vector<std::uint8_t>(256, 5));
  }
  {
    auto f = h5_create(dir.file("v.h5"));
    h5_write(f.get(), "/here", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 9));
    // /v: rows 0..1 from /here of this file, rows 2..3 from all of s.h5:/src (2x8x8 expected);
    // /part: rows 0..3 from rows 0..3 of s.h5:/src (a part of it, by hyperslab); /self: rows
    // 2..3 from /gone of this file.
    struct mapping {
      const char* name;
      const char* file;
      const char* object;
      bool part;
    };
    for (const mapping& m : {mapping{"/v", "s.h5", "/src", false},
                             mapping{"/part", "s.h5", "/src", true},
                             mapping{"/self", ".", "/gone", false}}) {
      const hid_t vspace = H5Screate_simple(3, whole, nullptr);
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      const hid_t here = H5Screate_simple(3, half, nullptr);
      if (!m.part) {
        H5Sselect_hyperslab(vspace, H5S_SELECT_SET, top, nullptr, half, nullptr);
        ASSERT_GE(H5Pset_virtual(dcpl, vspace, ".", "/here", here), 0);
        H5Sselect_hyperslab(vspace, H5S_SELECT_SET, bottom, nullptr, half, nullptr);
      }
      const hid_t sspace = H5Screate_simple(3, m.part ? four : half, nullptr);
      if (m.part) H5Sselect_hyperslab(sspace, H5S_SELECT_SET, top, nullptr, four, nullptr);
      ASSERT_GE(H5Pset_virtual(dcpl, vspace, m.file, m.object, sspace), 0);
      const hid_t d = H5Dcreate2(f.get(), m.name, H5T_STD_U8LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      ASSERT_GE(d, 0) << m.name;
      for (hid_t id : {d}) H5Dclose(id);
      H5Pclose(dcpl);
      for (hid_t id : {sspace, here, vspace}) H5Sclose(id);
    }
  }
  // As made: s.h5:/src has 4 rows where /v maps all of it to 2.
  auto mismatch = cli(dir, "compress v.h5:/v -o a.dcz");
  EXPECT_EQ(mismatch.status, 3) << describe(mismatch);
  EXPECT_TRUE(contains(mismatch.err, "v.h5:/v: a virtual dataset whose source s.h5:/src cannot "
                                     "give the rows mapped to it: s.h5:/src has shape 4x8x8, 256 "
                                     "values where the part of the virtual dataset mapped to all "
                                     "of it takes 128")) << mismatch.err;
  must(dir, "compress v.h5:/part -o p.dcz --chop 8 -q");  // rows 0..3 of 4: there
  auto self = cli(dir, "compress v.h5:/self -o a.dcz");
  EXPECT_EQ(self.status, 3) << describe(self);
  EXPECT_TRUE(contains(self.err, "v.h5:/self: a virtual dataset whose source /gone (in this "
                                 "file) cannot give the rows mapped to it: ")) << self.err;
  EXPECT_TRUE(contains(self.err, "v.h5 holds no /gone")) << self.err;
  {
    std::filesystem::remove(dir.file("s.h5"));
    auto s = h5_create(dir.file("s.h5"));
    h5_write(s.get(), "/src", H5T_STD_U8LE, {3, 8, 8}, std::vector<std::uint8_t>(192, 5));
  }
  auto part = cli(dir, "compress v.h5:/part -o a.dcz");
  EXPECT_EQ(part.status, 3) << describe(part);
  EXPECT_TRUE(contains(part.err, "s.h5:/src has shape 3x8x8, smaller than the part mapped from "
                                 "it (4x8x8)")) << part.err;
  {
    std::filesystem::remove(dir.file("s.h5"));
    auto s = h5_create(dir.file("s.h5"));
    h5_write(s.get(), "/other", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 5));
  }
  auto none = cli(dir, "compress v.h5:/v -o a.dcz");
  EXPECT_EQ(none.status, 3) << describe(none);
  EXPECT_TRUE(contains(none.err, "s.h5 holds no /src")) << none.err;
  const std::string whole_file = read_bytes(dir.file("s.h5"));
  write_bytes(dir.file("s.h5"), whole_file.substr(0, whole_file.size() / 2));
  auto cut = cli(dir, "compress v.h5:/v -o a.dcz");
  EXPECT_EQ(cut.status, 3) << describe(cut);
  EXPECT_TRUE(contains(cut.err, "s.h5 is a truncated HDF5 file")) << cut.err;
  write_bytes(dir.file("s.h5"), "not HDF5\n");
  auto text = cli(dir, "compress v.h5:/v -o a.dcz");
  EXPECT_EQ(text.status, 3) << describe(text);
  EXPECT_TRUE(contains(text.err, "s.h5 is not an HDF5 file")) << text.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.dcz")));
  // An external link to the damaged file says what is wrong with it, not "missing".
  {
    auto f = h5_create(dir.file("l.h5"));
    ASSERT_GE(H5Lcreate_external("s.h5", "/src", f.get(), "/ext", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  write_bytes(dir.file("s.h5"), whole_file.substr(0, whole_file.size() / 2));
  auto link = cli(dir, "compress l.h5:/ext -o a.dcz");
  EXPECT_EQ(link.status, 3) << describe(link);
  EXPECT_TRUE(contains(link.err, "l.h5:/ext: is an external link to s.h5:/src, which cannot be "
                                 "opened: s.h5 is a truncated HDF5 file")) << link.err;
  EXPECT_FALSE(contains(link.err, "holds no dataset")) << link.err;
  // Without a dataset named, the link that leads nowhere is named beside "no dataset".
  auto chosen = cli(dir, "compress l.h5 -o a.dcz");
  EXPECT_EQ(chosen.status, 3) << describe(chosen);
  EXPECT_TRUE(contains(chosen.err, "the file holds no dataset at all; /ext is an external link to "
                                   "s.h5:/src, which cannot be opened: s.h5 is a truncated HDF5 "
                                   "file")) << chosen.err;
  // A directory in its place is named as one (it read "a pipe or device?").
  std::filesystem::remove(dir.file("s.h5"));
  std::filesystem::create_directory(dir.file("s.h5"));
  auto folder = cli(dir, "compress l.h5:/ext -o a.dcz");
  EXPECT_EQ(folder.status, 5) << describe(folder);  // (an I/O error, as an input named so)
  EXPECT_TRUE(contains(folder.err, "l.h5:/ext: is an external link to s.h5:/src, which cannot be "
                                   "opened: s.h5 is a directory, not a plain file, which HDF5 "
                                   "cannot read")) << folder.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.dcz")));
}

TEST(Hdf5Cli, AVirtualDatasetsSourceIsTheFileHdf5OpensBesideItBeforeTheWorkingFolder) {
  // HDF5 looks for a relative source name beside the VDS file first, then in the working
  // directory, and goes on past a file that does not open as HDF5; the check judges the
  // file HDF5 reads. (An absolute name that is gone is looked for by its last part.)
  temp_dir dir;
  std::filesystem::create_directory(dir.file("sub"));
  std::vector<std::uint8_t> v(4 * 64);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>(i % 251);
  {
    auto s = h5_create(dir.file("sub/src.h5"));  // beside the VDS: whole
    h5_write(s.get(), "/d", H5T_STD_U8LE, {4, 8, 8}, v);
  }
  {
    auto s = h5_create(dir.file("src.h5"));  // in the working folder: 2 rows
    h5_write(s.get(), "/d", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 1));
  }
  for (const std::string& source : {std::string("src.h5"), dir.file("gone/src.h5")}) {
    const std::string vds = source == "src.h5" ? "sub/v.h5" : "sub/w.h5";
    auto f = h5_create(dir.file(vds));
    add_whole_vds(f.get(), source);
  }
  for (const char* vds : {"sub/v.h5", "sub/w.h5"}) {
    auto c = must(dir, std::string("compress ") + vds + ":/v -o a.dcz -f --chop 8");
    EXPECT_FALSE(contains(c.err, "virtual")) << vds << ": " << c.err;
    must(dir, "decompress a.dcz -o a.npy -f -q");
    EXPECT_EQ(load_npy(dir.file("a.npy")).raw, as_bytes(v)) << vds;
  }
  // Beside it, a file that is not HDF5: HDF5 goes on to the working folder's, and so does
  // the check (whose 2 rows are too few).
  write_bytes(dir.file("sub/src.h5"), "not HDF5\n");
  auto c = cli(dir, "compress sub/v.h5:/v -o b.dcz");
  EXPECT_EQ(c.status, 3) << describe(c);
  EXPECT_TRUE(contains(c.err, "src.h5:/d has shape 2x8x8, smaller than the part mapped from it "
                              "(4x8x8)")) << c.err;
}

TEST(Hdf5Cli, AChunkedDatasetWithChunksNeverWrittenIsNotedSinceTheirRowsReadAsFill) {
  // A writer that made /part (6 rows in chunks of 2) and stopped after its first 2 rows.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("p.h5"));
    h5_write(f.get(), "/whole", H5T_STD_U8LE, {6, 8, 8}, std::vector<std::uint8_t>(384, 7),
             storage{{2, 8, 8}, 4});
    const hsize_t dims[3] = {6, 8, 8}, chunk[3] = {2, 8, 8}, start[3] = {0, 0, 0};
    h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
    h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
    h5_check(H5Pset_chunk(dcpl.get(), 3, chunk), "chunk");
    h5_check(H5Pset_deflate(dcpl.get(), 4), "gzip");
    h5 d(H5Dcreate2(f.get(), "/part", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                    H5P_DEFAULT),
         H5Dclose, "create");
    h5 mem(H5Screate_simple(3, chunk, nullptr), H5Sclose, "memory space");
    h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, chunk, nullptr),
             "select");
    const std::vector<std::uint8_t> rows(128, 9);
    h5_check(H5Dwrite(d.get(), H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT, rows.data()),
             "write");
    // 4 rows in chunks of 2, the first written: one chunk of two never written.
    const hsize_t half_dims[3] = {4, 8, 8};
    h5 half_space(H5Screate_simple(3, half_dims, nullptr), H5Sclose, "space");
    h5 half(H5Dcreate2(f.get(), "/half", H5T_STD_U8LE, half_space.get(), H5P_DEFAULT, dcpl.get(),
                       H5P_DEFAULT),
            H5Dclose, "create");
    h5_check(H5Sselect_hyperslab(half_space.get(), H5S_SELECT_SET, start, nullptr, chunk, nullptr),
             "select");
    h5_check(H5Dwrite(half.get(), H5T_NATIVE_UINT8, mem.get(), half_space.get(), H5P_DEFAULT,
                      rows.data()),
             "write");
  }
  auto half = must(dir, "compress p.h5:/half -o h.dcz");
  EXPECT_TRUE(contains(half.err, "p.h5:/half: 1 of its 2 chunks was never written (a writer that "
                                 "stopped early?): its values read as the dataset's fill value"))
      << half.err;
  auto whole = must(dir, "compress p.h5:/whole -o w.dcz");
  EXPECT_FALSE(contains(whole.err, "never written")) << whole.err;
  auto part = must(dir, "compress p.h5:/part -o p.dcz");
  EXPECT_TRUE(contains(part.err, "p.h5:/part: 2 of its 3 chunks were never written (a writer "
                                 "that stopped early?): their values read as the dataset's fill "
                                 "value"))
      << part.err;
  must(dir, "decompress p.dcz -o p.npy");
  const auto back = dctchop::test::load_npy(dir.file("p.npy"));
  ASSERT_EQ(back.values.size(), 6u * 64);
  EXPECT_EQ(back.values[0], 9.0);
  EXPECT_EQ(back.values[5 * 64], 0.0);
}

TEST(Hdf5Cli, AContiguousDatasetNeverWrittenIsNotedAsItsChunkedTwinIs) {
  // Created and never written: contiguous, it read as its fill value without a word.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("c.h5"));
    h5_write(f.get(), "/written", H5T_STD_U8LE, {3, 8, 8}, std::vector<std::uint8_t>(192, 7));
    const hsize_t dims[3] = {3, 8, 8};
    h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
    h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
    const std::uint8_t fill = 42;
    h5_check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_UINT8, &fill), "fill");
    h5 d(H5Dcreate2(f.get(), "/empty", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                    H5P_DEFAULT),
         H5Dclose, "create");
  }
  auto written = must(dir, "compress c.h5:/written -o w.dcz");
  EXPECT_FALSE(contains(written.err, "never written")) << written.err;
  auto empty = must(dir, "compress c.h5:/empty -o e.dcz --chop 8");
  EXPECT_TRUE(contains(empty.err, "c.h5:/empty: its data were never written (a writer that "
                                  "stopped early?): its values read as the dataset's fill value"))
      << empty.err;
  must(dir, "decompress e.dcz -o e.npy");
  const auto back = dctchop::test::load_npy(dir.file("e.npy"));
  ASSERT_EQ(back.values.size(), 3u * 64);
  EXPECT_EQ(back.values[100], 42.0);
}

TEST(Hdf5Cli, ANanFillValueOfValuesNeverWrittenIsNamedInTheErrorItCauses) {
  // f32 with fill value NaN, samples 0 and 1 written (chunked), or none (contiguous): the
  // NaN of sample 2 is the fill value, which the error says (the note came only on success).
  temp_dir dir;
  {
    auto f = h5_create(dir.file("n.h5"));
    const hsize_t dims[3] = {4, 8, 8}, chunk[3] = {1, 8, 8};
    h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    {
      h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
      h5_check(H5Pset_chunk(dcpl.get(), 3, chunk), "chunk");
      h5 d(H5Dcreate2(f.get(), "/own", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT),
           H5Dclose, "create");
      const hsize_t start[3] = {0, 0, 0}, two[3] = {2, 8, 8};
      h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, two, nullptr),
               "select");
      h5 mem(H5Screate_simple(3, two, nullptr), H5Sclose, "memory space");
      std::vector<float> rows(128, 1.5f);
      rows[70] = nan;  // sample 1's
      h5_check(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT,
                        rows.data()),
               "write");
    }
    {  // chunks of half a sample: sample 1's first half written, with a NaN; its second not
      h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
      const hsize_t half[3] = {1, 4, 8};
      h5_check(H5Pset_chunk(dcpl.get(), 3, half), "chunk");
      h5 d(H5Dcreate2(f.get(), "/split", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT),
           H5Dclose, "create");
      const hsize_t start[3] = {0, 0, 0}, two[3] = {2, 8, 8};
      h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, two, nullptr),
               "select");
      const hsize_t gap[3] = {1, 4, 0}, gap_size[3] = {1, 4, 8};
      h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_NOTB, gap, nullptr, gap_size, nullptr),
               "select");
      h5 mem(H5Screate_simple(1, std::array<hsize_t, 1>{96}.data(), nullptr), H5Sclose, "mem");
      std::vector<float> rows(96, 1.5f);
      rows[66] = nan;  // sample 1's first half
      h5_check(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT,
                        rows.data()),
               "write");
    }
    for (const bool chunked : {true, false}) {
      h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
      if (chunked) h5_check(H5Pset_chunk(dcpl.get(), 3, chunk), "chunk");
      h5_check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_FLOAT, &nan), "fill");
      h5 d(H5Dcreate2(f.get(), chunked ? "/part" : "/none", H5T_IEEE_F32LE, space.get(),
                      H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
           H5Dclose, "create");
      if (!chunked) continue;
      const hsize_t start[3] = {0, 0, 0}, two[3] = {2, 8, 8};
      h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, two, nullptr),
               "select");
      h5 mem(H5Screate_simple(3, two, nullptr), H5Sclose, "memory space");
      const std::vector<float> rows(128, 1.5f);
      h5_check(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT,
                        rows.data()),
               "write");
    }
  }
  for (const auto& [name, sample, said] : std::vector<std::tuple<std::string, int, std::string>>{
           {"part", 2, "n.h5:/part: 2 of its 4 chunks were never written"},
           {"none", 0, "n.h5:/none: its data were never written"}}) {
    for (const std::string command : {"compress", "eval"}) {
      auto r = cli(dir, command + " n.h5:/" + name + (command == "compress" ? " -o a.dcz" : ""));
      EXPECT_EQ(r.status, 3) << describe(r);
      EXPECT_TRUE(contains(r.err, "n.h5:/" + name + ": sample " + std::to_string(sample) +
                                      ": holds a NaN or Inf, which DCT+Chop cannot keep"))
          << r.err;
      EXPECT_TRUE(contains(r.err, said + " (a writer that stopped early?): their values read as "
                                         "the dataset's fill value (nan), in this sample too")
                  || contains(r.err, said + " (a writer that stopped early?): its values read as "
                                            "the dataset's fill value (nan), in this sample too"))
          << r.err;
    }
  }
  // A NaN of its own in a written sample of a dataset with chunks never written (fill 0): the
  // fill value is not blamed, nor where its rows lie partly in a chunk never written (a
  // finite fill value is no NaN's source).
  for (const std::string name : {"own", "split"}) {
    auto own = cli(dir, "compress n.h5:/" + name + " -o a.dcz");
    EXPECT_EQ(own.status, 3) << describe(own);
    EXPECT_TRUE(contains(own.err, "n.h5:/" + name + ": sample 1: holds a NaN or Inf")) << own.err;
    EXPECT_FALSE(contains(own.err, "never written")) << own.err;
  }
}

TEST(Hdf5Cli, ValuesNeverWrittenOfADatasetWithoutFillReadAsZeroNotAsWhatTheBufferHeld) {
  // Fill time never (netCDF-4's NC_NOFILL): HDF5 leaves what it does not store alone in the
  // reader's buffer. dctchop's buffers are reused, and an archive held a previous read's
  // rows, or the process's memory (a black-box tester found text from /proc in it).
  temp_dir dir;
  const hsize_t dims[3] = {64, 16, 16}, one[3] = {1, 16, 16};
  {
    auto f = h5_create(dir.file("n.h5"));
    h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
    for (const bool chunked : {true, false}) {
      h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
      if (chunked) h5_check(H5Pset_chunk(dcpl.get(), 3, one), "chunk");
      h5_check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "fill time");
      const std::uint8_t five = 5;  // a fill value HDF5 does not give either
      if (chunked) h5_check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_UINT8, &five), "fill");
      h5 d(H5Dcreate2(f.get(), chunked ? "/sparse" : "/empty", H5T_STD_U8LE, space.get(),
                      H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
           H5Dclose, "create");
      if (!chunked) continue;
      h5 mem(H5Screate_simple(3, one, nullptr), H5Sclose, "memory space");
      const std::vector<std::uint8_t> row(256, 7);
      for (hsize_t r = 0; r < 64; r += 2) {  // the even rows only
        const hsize_t start[3] = {r, 0, 0};
        h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, one, nullptr),
                 "select");
        h5_check(H5Dwrite(d.get(), H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT,
                          row.data()),
                 "write");
      }
    }
  }
  // Small chunks of samples: each read's buffer held the one before.
  auto sparse = must(dir, "compress n.h5:/sparse -o s.dcz --chop 8 --coeff f32 --chunk-mb 0.002");
  EXPECT_TRUE(contains(sparse.err, "n.h5:/sparse: 32 of its 64 chunks were never written (a "
                                   "writer that stopped early?): their values read as 0"))
      << sparse.err;
  auto empty = must(dir, "compress n.h5:/empty -o e.dcz --chop 8 --coeff f32 --chunk-mb 0.002");
  EXPECT_TRUE(contains(empty.err, "n.h5:/empty: its values were never written, and it has no "
                                  "fill value to give (fill time never): they read as 0"))
      << empty.err;
  must(dir, "decompress s.dcz -o s.npy");
  must(dir, "decompress e.dcz -o e.npy");
  const auto s = load_npy(dir.file("s.npy"));
  const auto e = load_npy(dir.file("e.npy"));
  ASSERT_EQ(s.values.size(), 64u * 256);
  ASSERT_EQ(e.values.size(), 64u * 256);
  for (std::size_t i = 0; i < s.values.size(); ++i) {
    ASSERT_EQ(s.values[i], (i / 256) % 2 == 0 ? 7.0 : 0.0) << "value " << i;
    ASSERT_EQ(e.values[i], 0.0) << "value " << i;
  }
}

TEST(Hdf5Cli, FilesNamedForNoFormatAreReadAsTheirBytesSayHdf5AfterAUserBlockAndZipToo) {
  // netCDF-4 (.nc) is HDF5; MATLAB v7.3 (.mat) is HDF5 after a 512-byte user block; an .npz
  // renamed .zip is a ZIP of .npy members.
  temp_dir dir;
  const auto images = dctchop::test::smooth_u8_nhwc(6, 16, 16, 3);
  {
    auto f = h5_create(dir.file("sst.nc"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, k_u8_shape, images);
    h5_write(f.get(), "/labels", H5T_STD_I64LE, {6}, k_labels);
    h5 fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "fcpl");
    h5_check(H5Pset_userblock(fcpl.get(), 512), "user block");
    h5 m(H5Fcreate(dir.file("data.mat").c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose,
         "create data.mat");
    h5_write(m.get(), "/images", H5T_STD_U8LE, k_u8_shape, images);
  }
  // (chop 8 with f32 coefficients: the decoded values are the input's)
  for (const std::string in : {"sst.nc", "sst.nc:images", "data.mat", "data.mat:images"}) {
    must(dir, "compress " + in + " -o got.dcz -f -q --chop 8 --coeff f32");
    must(dir, "decompress got.dcz -o got.npy -f -q");
    EXPECT_EQ(load_npy(dir.file("got.npy")).raw, as_bytes(images)) << in;
  }
  auto l = must(dir, "compress sst.nc:images --labels sst.nc -o l.dcz -f --chop 8 --coeff f32");
  EXPECT_TRUE(contains(l.err, "using labels /labels of sst.nc")) << l.err;
  must(dir, "decompress l.dcz -o x.npz -q");
  std::filesystem::rename(dir.file("x.npz"), dir.file("x.zip"));
  must(dir, "compress x.zip:data -o z.dcz -q --chop 8 --coeff f32");
  must(dir, "decompress z.dcz -o z.npy -q");
  EXPECT_EQ(load_npy(dir.file("z.npy")).raw, as_bytes(images));
  // The input is the file, not a path named "sst.nc:images": -o sst.nc -f would replace it.
  auto own = cli(dir, "compress sst.nc:images -o sst.nc -f");
  EXPECT_EQ(own.status, 2) << describe(own);
  EXPECT_TRUE(std::filesystem::exists(dir.file("sst.nc")));
  auto reread = must(dir, "compress sst.nc:images -o again.dcz -q --chop 8 --coeff f32");
  // The same for the labels: not the images themselves.
  auto same = cli(dir, "compress sst.nc:images --labels sst.nc:images -o s.dcz");
  EXPECT_EQ(same.status, 2) << describe(same);
  EXPECT_TRUE(contains(same.err, "--labels names the images themselves")) << same.err;
  // A name that says a format is taken at its word.
  std::filesystem::copy_file(dir.file("sst.nc"), dir.file("sst.npy"));
  auto npy = cli(dir, "compress sst.npy -o n.dcz");
  EXPECT_EQ(npy.status, 3) << describe(npy);
  EXPECT_TRUE(contains(npy.err, "sst.npy: is an HDF5 file, not a .npy file (name it .h5)")) << npy.err;
}

TEST(Hdf5Cli, AFileAWriterHasOpenIsReadAsASwmrReaderOrRefusedSayingSoNotSuggestingH5clear) {
  temp_dir dir;
  const auto images = dctchop::test::smooth_u8_nhwc(6, 16, 16, 3);
  {  // The latest format, which SWMR needs.
    h5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "fapl");
    h5_check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "libver");
    h5 f(H5Fcreate(dir.file("s.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
         "create");
    h5_write(f.get(), "/images", H5T_STD_U8LE, k_u8_shape, images, storage{{1, 16, 16, 3}, -1});
  }
  {
    // A writer at work in SWMR mode (h5py's swmr_mode = True): read as a SWMR reader.
    h5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "fapl");
    h5_check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "libver");
    h5 writer(H5Fopen(dir.file("s.h5").c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose, "open");
    h5_check(H5Fstart_swmr_write(writer.get()), "SWMR write");
    auto c = must(dir, "compress s.h5:/images -o s.dcz --chop 8 --coeff f32");
    EXPECT_TRUE(contains(c.err, "s.h5: marked open for writing (by a writer at work, or one that "
                                "stopped without closing it): read as a SWMR reader"))
        << c.err;
    EXPECT_FALSE(contains(c.err, "h5clear")) << c.err;
    // The dataset not named, but chosen: the note still said (it was replaced by "using
    // dataset /images of s.h5"), on stderr and in --json's notes.
    auto chosen = must(dir, "compress s.h5 -o chosen.dcz --no-quality --json");
    EXPECT_TRUE(contains(chosen.out, "read as a SWMR reader, as the file stands now; using "
                                     "dataset /images of s.h5"))
        << chosen.out;
    auto said = must(dir, "eval s.h5 --chop 4");
    EXPECT_TRUE(contains(said.err, "read as a SWMR reader")) << said.err;
  }
  must(dir, "decompress s.dcz -o s.npy -q");
  EXPECT_EQ(load_npy(dir.file("s.npy")).raw, as_bytes(images));
  if (const char* l = std::getenv("HDF5_USE_FILE_LOCKING"); l && std::string(l) == "FALSE") {
    return;  // (no locks to meet)
  }
  {
    // A writer that holds the file's lock: refused, saying so.
    h5 writer(H5Fopen(dir.file("s.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "open");
    auto c = cli(dir, "compress s.h5:/images -o l.dcz");
    EXPECT_EQ(c.status, 5) << describe(c);
    EXPECT_TRUE(contains(c.err, "s.h5: cannot open the HDF5 file: another program has it open "
                                "for writing"))
        << c.err;
  }
}

/** `path`:/images, 6x8x8 u8 stored in the external raw file `raw` (h5py's external=[...]),
 *  which is not written here (HDF5 would write it in the working directory). */
void make_external_h5(const std::string& path, const std::string& raw) {
  auto f = h5_create(path);
  const hsize_t dims[3] = {6, 8, 8};
  h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
  h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
  h5_check(H5Pset_external(dcpl.get(), raw.c_str(), 0, 6 * 64), "external");
  h5 d(H5Dcreate2(f.get(), "/images", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                  H5P_DEFAULT),
       H5Dclose, "create");
}

/** Inputs that read other files: e.h5:/images stores `v` (6x8x8 u8) in the external raw
 *  file e.raw, and l.h5:/ext is an external link to s.h5:/src, which holds `v`. */
void make_linked_inputs(const temp_dir& dir, const std::vector<std::uint8_t>& v) {
  make_external_h5(dir.file("e.h5"), "e.raw");
  {
    auto s = h5_create(dir.file("s.h5"));
    h5_write(s.get(), "/src", H5T_STD_U8LE, {6, 8, 8}, v);
    auto l = h5_create(dir.file("l.h5"));
    h5_check(H5Lcreate_external("s.h5", "/src", l.get(), "/ext", H5P_DEFAULT, H5P_DEFAULT),
             "external link");
  }
  write_bytes(dir.file("e.raw"), std::string(v.begin(), v.end()));
}

TEST(Hdf5Cli, StandardErrorOnAFileThatTheDatasetReadsIsRefusedAsOnTheInputItself) {
  // The named input was checked, not the files its dataset reads: an external raw file, an
  // external link's target, a virtual dataset's source. Messages (and --psnr's lines, between
  // passes) went into the data (exit 0, wrong data).
  temp_dir dir;
  const std::vector<std::uint8_t> v(6 * 64, 7);
  make_linked_inputs(dir, v);
  const std::string raw = read_bytes(dir.file("e.raw")), src = read_bytes(dir.file("s.h5"));
  for (const std::string args : {"compress e.h5:/images -o a.dcz 2<> e.raw",
                                 "compress e.h5:/images -o a.dcz --psnr 30 2>> e.raw",
                                 "compress l.h5:/ext -o a.dcz 2<> s.h5"}) {
    auto c = cli(dir, args);
    EXPECT_EQ(c.status, 2) << args << "\n" << describe(c);
    EXPECT_EQ(read_bytes(dir.file("e.raw")), raw) << args;
    EXPECT_EQ(read_bytes(dir.file("s.h5")), src) << args;
  }
  auto json = cli(dir, "compress l.h5:/ext -o a.dcz --json 2<> s.h5");
  EXPECT_TRUE(contains(json.out, "standard error is s.h5, which the input l.h5:/ext reads"))
      << json.out;
  must(dir, "compress e.h5:/images -o a.dcz -q 2> log.txt");  // elsewhere, as before
}

TEST(Hdf5Cli, AnOutputOntoAFileThatTheDatasetReadsIsRefusedAsOneOntoTheInput) {
  // The README counts an HDF5 input's other files as inputs: standard error and --json's
  // report were refused there, but -o target.h5 -f replaced an external link's target (the
  // original data, gone) with the archive, exit 0.
  temp_dir dir;
  const std::vector<std::uint8_t> v(6 * 64, 7);
  make_linked_inputs(dir, v);
  std::filesystem::create_symlink("s.h5", dir.file("via.dcz"));
  save_npy(dir.file("x.npy"), dctchop::dtype::u8, {6, 8, 8}, v);
  const std::string raw = read_bytes(dir.file("e.raw")), src = read_bytes(dir.file("s.h5"));
  for (const std::string args :
       {"compress e.h5:/images -o e.raw -f", "compress l.h5:/ext -o s.h5 -f",
        "compress l.h5 -o s.h5 -f",  // the dataset chosen, not named
        "compress l.h5:/ext -o via.dcz -f", "compress l.h5:/ext -o - 1<> s.h5",
        "compress x.npy --labels l.h5:/ext -o s.h5 -f"}) {
    auto c = cli(dir, args);
    EXPECT_EQ(c.status, 2) << args << "\n" << describe(c);
    EXPECT_TRUE(contains(c.err, "which the input l.h5:/ext reads") ||
                contains(c.err, "which the input e.h5:/images reads"))
        << args << "\n" << c.err;
    EXPECT_TRUE(contains(c.err, "the output would replace it")) << c.err;
    EXPECT_EQ(read_bytes(dir.file("e.raw")), raw) << args;
    EXPECT_EQ(read_bytes(dir.file("s.h5")), src) << args;
  }
  must(dir, "compress l.h5:/ext -o a.dcz -q");  // elsewhere, as before
}

/** `path`:/v, a virtual dataset of 6x8x8 u8 whose one source is `file`:`object`. */
void make_vds(const std::string& path, const char* file, const char* object) {
  const hsize_t dims[3] = {6, 8, 8}, top[3] = {0, 0, 0};
  auto f = h5_create(path);
  h5 vspace(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
  h5 sspace(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
  h5_check(H5Sselect_hyperslab(sspace.get(), H5S_SELECT_SET, top, nullptr, dims, nullptr), "select");
  h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
  h5_check(H5Pset_virtual(dcpl.get(), vspace.get(), file, object, sspace.get()), "virtual");
  h5 d(H5Dcreate2(f.get(), "/v", H5T_STD_U8LE, vspace.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
       H5Dclose, "create");
}

TEST(Hdf5Cli, AVirtualDatasetsSourceThatIsALinkInACircleIsNamedSo) {
  // It said "src.h5 holds no /circ_a", which holds it, as a link.
  temp_dir dir;
  {
    auto s = h5_create(dir.file("src.h5"));
    h5_check(H5Lcreate_soft("/circ_b", s.get(), "/circ_a", H5P_DEFAULT, H5P_DEFAULT), "link");
    h5_check(H5Lcreate_soft("/circ_a", s.get(), "/circ_b", H5P_DEFAULT, H5P_DEFAULT), "link");
  }
  make_vds(dir.file("v.h5"), "src.h5", "/circ_a");
  const auto c = cli(dir, "compress v.h5:/v -o a.dcz");
  EXPECT_EQ(c.status, 3) << describe(c);
  EXPECT_NE(c.err.find("src.h5:/circ_a is a link that HDF5 cannot follow to its end: links lead "
                       "round in a circle: src.h5:/circ_a -> src.h5:/circ_b -> src.h5:/circ_a"),
            std::string::npos)
      << c.err;
}

TEST(Hdf5Cli, FilesFoundThroughHdf5sPrefixesOrByAGoneAbsoluteNamesLastPartAreInputs) {
  // HDF5 finds a source under HDF5_VDS_PREFIX's folders, a raw file under
  // HDF5_EXTFILE_PREFIX's, and a file whose absolute name is gone by its last part beside the
  // file naming it: -o ... -f replaced them all (the source then began with the archive's
  // magic), as they were not counted among the inputs.
  temp_dir dir;
  std::filesystem::create_directories(dir.path() / "V");
  std::filesystem::create_directories(dir.path() / "P");
  const std::vector<std::uint8_t> v(6 * 64, 9);
  {
    auto s = h5_create(dir.file("P/s.h5"));
    h5_write(s.get(), "/src", H5T_STD_U8LE, {6, 8, 8}, v);
    auto b = h5_create(dir.file("V/beside.h5"));
    h5_write(b.get(), "/src", H5T_STD_U8LE, {6, 8, 8}, v);
  }
  make_vds(dir.file("V/v.h5"), "s.h5", "/src");                          // found under P
  make_vds(dir.file("V/gone.h5"), "/no/such/folder/beside.h5", "/src");  // found beside
  make_external_h5(dir.file("V/e.h5"), "e.raw");                           // found under P
  write_bytes(dir.file("P/e.raw"), std::string(v.begin(), v.end()));
  const std::string src = read_bytes(dir.file("P/s.h5")), raw = read_bytes(dir.file("P/e.raw")),
                    beside = read_bytes(dir.file("V/beside.h5"));
  // They are read so (HDF5's own rules, not dctchop's)...
  EXPECT_EQ(sh(dir, "HDF5_VDS_PREFIX=P DCTCHOP compress V/v.h5:/v -o a.dcz -q").status, 0);
  EXPECT_EQ(sh(dir, "DCTCHOP compress V/gone.h5:/v -o b.dcz -q").status, 0);
  EXPECT_EQ(sh(dir, "HDF5_EXTFILE_PREFIX=P DCTCHOP compress V/e.h5 -o c.dcz -q").status, 0);
  // ...and so are inputs.
  for (const std::string cmd :
       {"HDF5_VDS_PREFIX=P DCTCHOP compress V/v.h5:/v -o P/s.h5 -f",
        "HDF5_VDS_PREFIX=/elsewhere:P DCTCHOP eval V/v.h5:/v --chop 4 1<> P/s.h5",
        "HDF5_VDS_PREFIX='${ORIGIN}/../P' DCTCHOP compress V/v.h5:/v -o P/s.h5 -f",
        "DCTCHOP compress V/gone.h5:/v -o V/beside.h5 -f",
        "HDF5_EXTFILE_PREFIX=P DCTCHOP compress V/e.h5 -o P/e.raw -f"}) {
    const auto c = sh(dir, cmd);
    EXPECT_EQ(c.status, 2) << cmd << "\n" << describe(c);
    EXPECT_EQ(read_bytes(dir.file("P/s.h5")), src) << cmd;
    EXPECT_EQ(read_bytes(dir.file("P/e.raw")), raw) << cmd;
    EXPECT_EQ(read_bytes(dir.file("V/beside.h5")), beside) << cmd;
  }
}

TEST(Hdf5Cli, ADatasetThatHdf5CannotOpenIsCalledDamagedWithHdf5sReasonNotNotADataset) {
  // A chunk side of 0 in the layout message: "is not a dataset", which sent the user looking
  // for a mistake in the name.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("bad.h5"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, {2, 16, 16}, std::vector<std::uint8_t>(512, 3),
             storage{{2, 16, 16}, -1});
  }
  std::string bytes = read_bytes(dir.file("bad.h5"));
  const std::uint32_t dims[4] = {2, 16, 16, 1};  // the layout message's chunk sides, item size
  const std::string pattern(reinterpret_cast<const char*>(dims), sizeof dims);
  const auto at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 0;
  write_bytes(dir.file("bad.h5"), bytes);
  const auto c = cli(dir, "compress bad.h5:/images -o a.dcz");
  EXPECT_EQ(c.status, 3) << describe(c);
  EXPECT_TRUE(contains(c.err, "bad.h5:/images: is a dataset that HDF5 cannot open: the file is "
                              "damaged (chunk dimension must be positive"))
      << c.err;
}

TEST(Hdf5Cli, AFileTheDatasetReadsThatIsAPipeIsRefusedWhereHdf5sOpenWouldWaitForAWriter) {
  // HDF5 opens an external link's target, a raw file and a virtual dataset's source with a
  // blocking open(): a FIFO there (without a writer) held dctchop for good, past SIGTERM.
  // Where HDF5 finds a plain file first (here under HDF5_EXT_PREFIX) it reads that one.
  temp_dir dir;
  const std::vector<std::uint8_t> v(6 * 64, 7);
  make_linked_inputs(dir, v);  // l.h5:/ext -> s.h5:/src; e.h5:/images in e.raw
  std::filesystem::create_directories(dir.path() / "P");
  std::filesystem::rename(dir.file("s.h5"), dir.file("P/s.h5"));
  ASSERT_EQ(::mkfifo(dir.file("s.h5").c_str(), 0600), 0);
  std::filesystem::remove(dir.file("e.raw"));
  ASSERT_EQ(::mkfifo(dir.file("e.raw").c_str(), 0600), 0);
  make_vds(dir.file("v.h5"), "s.h5", "/src");
  save_npy(dir.file("x.npy"), dctchop::dtype::u8, {6, 8, 8}, v);
  {
    auto c = h5_create(dir.file("chain.h5"));
    h5_check(H5Lcreate_external("l.h5", "/ext", c.get(), "/x", H5P_DEFAULT, H5P_DEFAULT), "link");
  }
  const std::string bound = "timeout -s KILL 60 ";
  struct refused {
    std::string cmd, says;
    int status;
  };
  for (const refused& r : std::vector<refused>{
           {"compress l.h5:/ext -o a.dcz", "l.h5:/ext is an external link to s.h5:/src, and "
                                           "s.h5 is a pipe (FIFO): HDF5 reads plain files only",
            2},
           {"compress chain.h5:/x -o a.dcz", "l.h5:/ext is an external link to s.h5:/src", 2},
           {"compress e.h5:/images -o a.dcz", "e.h5:/images keeps its values in the file "
                                              "e.raw, and e.raw is a pipe (FIFO)",
            2},
           {"eval v.h5:/v --chop 4", "v.h5:/v is a virtual dataset with a source in s.h5, "
                                     "and s.h5 is a pipe (FIFO)",
            2},
           // Chosen, not named: the same (it was exit 3, "holds no dataset at all").
           {"compress l.h5 -o a.dcz", "l.h5:/ext is an external link to s.h5:/src, and s.h5", 2},
           {"compress x.npy --labels l.h5 -o a.dcz", "l.h5:/ext is an external link", 2},
           // (chained: named by this file's link first, as where it is named)
           {"compress chain.h5 -o a.dcz",
            "chain.h5:/x: l.h5:/ext is an external link to s.h5:/src", 2},
           {"env HDF5_EXT_PREFIX=/no/such:. DCTCHOP compress P/../l.h5:/ext -o a.dcz",
            "s.h5 is a pipe",
            2}}) {
    const std::string cmd =
        bound + (r.cmd.find("DCTCHOP") == std::string::npos ? "DCTCHOP " + r.cmd : r.cmd);
    const auto c = sh(dir, cmd);
    EXPECT_EQ(c.status, r.status) << cmd << "\n" << describe(c);
    EXPECT_TRUE(contains(c.err, r.says)) << cmd << "\n" << c.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("a.dcz"))) << cmd;
  }
  // HDF5 looks under HDF5_EXT_PREFIX before beside the file: the plain P/s.h5.
  const auto c = sh(dir, bound + "env HDF5_EXT_PREFIX=P DCTCHOP compress l.h5:/ext -o a.dcz -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  const auto d = sh(dir, "DCTCHOP decompress a.dcz -o out.npy -q");
  ASSERT_EQ(d.status, 0) << describe(d);
  EXPECT_EQ(load_npy(dir.file("out.npy")).values, std::vector<double>(v.begin(), v.end()));
}

TEST(Hdf5Cli, AnExternalLinkOrVirtualSourceToASymbolicLinkInALoopIsExit5SayingSo) {
  temp_dir dir;
  std::filesystem::create_symlink("loop2.h5", dir.file("loop1.h5"));
  std::filesystem::create_symlink("loop1.h5", dir.file("loop2.h5"));
  {
    auto f = h5_create(dir.file("ext.h5"));
    h5_check(H5Lcreate_external("loop1.h5", "/img", f.get(), "/img", H5P_DEFAULT, H5P_DEFAULT),
             "link");
  }
  // A system error on the file a link leads to: an I/O error (5), as on the input itself.
  const auto c = cli(dir, "compress ext.h5:/img -o a.dcz");
  EXPECT_EQ(c.status, 5) << describe(c);
  EXPECT_TRUE(contains(c.err, "loop1.h5 cannot be read (Too many levels of symbolic links)"))
      << c.err;
  // A virtual dataset's source so, the same.
  {
    auto f = h5_create(dir.file("vds.h5"));
    add_whole_vds(f.get(), "loop1.h5");
  }
  const auto v = cli(dir, "compress vds.h5:/v -o a.dcz");
  EXPECT_EQ(v.status, 5) << describe(v);
  EXPECT_TRUE(contains(v.err, "vds.h5:/v: a virtual dataset whose source loop1.h5:/d cannot give "
                              "the rows mapped to it: loop1.h5 cannot be read (Too many levels "
                              "of symbolic links)")) << v.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.dcz")));
}

TEST(Hdf5Cli, APatternSourcesFilesAreInputsAndAPipeAmongThemIsRefused) {
  // An unlimited virtual dataset whose source is "src-%b.h5" (HDF5 reads block b from
  // src-b.h5): -o src-1.h5 -f replaced a source with the archive, and a FIFO src-1.h5 held
  // dctchop for good.
  temp_dir dir;
  for (int i = 0; i < 2; ++i) {
    auto f = h5_create(dir.file("src-" + std::to_string(i) + ".h5"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, {2, 16, 16},
             std::vector<std::uint8_t>(512, static_cast<std::uint8_t>(i)));
  }
  {
    const hsize_t dims[3] = {4, 16, 16}, max[3] = {H5S_UNLIMITED, 16, 16};
    const hsize_t start[3] = {0, 0, 0}, stride[3] = {2, 1, 1}, count[3] = {H5S_UNLIMITED, 1, 1};
    const hsize_t block[3] = {2, 16, 16}, one[3] = {1, 1, 1};
    h5 v(H5Screate_simple(3, dims, max), H5Sclose, "virtual space");
    h5_check(H5Sselect_hyperslab(v.get(), H5S_SELECT_SET, start, stride, count, block), "select");
    h5 src(H5Screate_simple(3, block, nullptr), H5Sclose, "source space");
    h5_check(H5Sselect_hyperslab(src.get(), H5S_SELECT_SET, start, nullptr, one, block), "select");
    h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
    h5_check(H5Pset_virtual(dcpl.get(), v.get(), "src-%b.h5", "/images", src.get()), "virtual");
    h5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "fapl");
    h5_check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "libver");
    h5 f(H5Fcreate(dir.file("vds.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
         "create");
    h5 space(H5Screate_simple(3, dims, max), H5Sclose, "space");
    h5 d(H5Dcreate2(f.get(), "/images", H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, dcpl.get(),
                    H5P_DEFAULT),
         H5Dclose, "create");
  }
  const std::string source = read_bytes(dir.file("src-1.h5"));
  const auto c = cli(dir, "compress vds.h5:/images -o src-1.h5 -f");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_TRUE(contains(c.err, "which the input vds.h5:/images reads")) << c.err;
  EXPECT_EQ(read_bytes(dir.file("src-1.h5")), source);
  std::filesystem::remove(dir.file("src-1.h5"));
  ASSERT_EQ(::mkfifo(dir.file("src-1.h5").c_str(), 0600), 0);
  const auto p = sh(dir, "timeout -s KILL 60 DCTCHOP compress vds.h5:/images -o a.dcz");
  EXPECT_EQ(p.status, 2) << describe(p);
  EXPECT_TRUE(contains(p.err, "a virtual dataset with a source in src-1.h5, and src-1.h5 is a "
                              "pipe (FIFO)"))
      << p.err;
  // Chosen, not named: listing the file asked HDF5 for its extent, which opened the FIFO.
  const auto q = sh(dir, "timeout -s KILL 60 DCTCHOP compress vds.h5 -o a.dcz");
  EXPECT_EQ(q.status, 2) << describe(q);
  EXPECT_TRUE(contains(q.err, "src-1.h5 is a pipe (FIFO)")) << q.err;
}

TEST(Hdf5Cli, AVirtualDatasetsSourceMissingUnderHdf5VdsPrefixTooIsNoted) {
  // With HDF5_VDS_PREFIX set, no note said that a source was found nowhere (its rows read
  // as the fill value without a word); the places looked in are HDF5's own, in its order.
  temp_dir dir;
  make_vds(dir.file("v.h5"), "gone.h5", "/src");
  const auto c = sh(dir, "HDF5_VDS_PREFIX=/nowhere DCTCHOP compress v.h5:/v -o a.dcz");
  EXPECT_EQ(c.status, 0) << describe(c);
  EXPECT_TRUE(contains(c.err, "v.h5:/v: a virtual dataset whose source file gone.h5 is not found "
                              "(under HDF5_VDS_PREFIX, beside it, or here)"))
      << c.err;
}

TEST(Hdf5Cli, FilesReadFurtherOnAreInputsTooChainsOfLinksAndSourcesOfSources) {
  // Only the first step was looked into: the middle of a chain of external links, a source
  // of a virtual dataset's source, and a file behind a source that is an external link were
  // replaced by -o ... -f; and where the dataset was chosen, not named, no file it reads was
  // looked into for reports and messages (eval ext.h5 1<> target.h5 wrote into it).
  temp_dir dir;
  const std::vector<std::uint8_t> v(6 * 64, 7);
  make_linked_inputs(dir, v);  // l.h5:/ext -> s.h5:/src
  {
    auto c = h5_create(dir.file("chain.h5"));
    h5_check(H5Lcreate_external("l.h5", "/ext", c.get(), "/x", H5P_DEFAULT, H5P_DEFAULT), "link");
  }
  make_vds(dir.file("inner.h5"), "s.h5", "/src");
  make_vds(dir.file("outer.h5"), "inner.h5", "/v");  // outer -> inner -> s.h5
  make_vds(dir.file("vl.h5"), "l.h5", "/ext");       // vl -> l.h5 (a link) -> s.h5
  const std::string src = read_bytes(dir.file("s.h5")), link = read_bytes(dir.file("l.h5"));
  for (const std::string args :
       {"compress chain.h5:/x -o l.h5 -f", "compress chain.h5 -o s.h5 -f",
        "compress outer.h5:/v -o s.h5 -f", "compress vl.h5 -o s.h5 -f",
        "eval chain.h5 --chop 4 1<> l.h5", "eval outer.h5 --chop 4 1<> s.h5",
        "compress l.h5 -o a.dcz --json >> s.h5", "eval vl.h5 --chop 4 2>> s.h5",
        "compress chain.h5 -o a.dcz 2>> l.h5"}) {
    auto c = cli(dir, args);
    EXPECT_EQ(c.status, 2) << args << "\n" << describe(c);
    EXPECT_EQ(read_bytes(dir.file("s.h5")), src) << args;
    EXPECT_EQ(read_bytes(dir.file("l.h5")), link) << args;
  }
  // No dataset named and no one to choose: the message ("name the dataset; candidates")
  // went into a file that one of the candidates reads.
  {
    auto amb = h5_create(dir.file("amb.h5"));
    h5_check(H5Lcreate_external("s.h5", "/src", amb.get(), "/img", H5P_DEFAULT, H5P_DEFAULT),
             "link");
    h5_write(amb.get(), "/b", H5T_STD_U8LE, {6, 8, 8}, v);
  }
  for (const std::string args :
       {"eval amb.h5 --chop 2 2>> s.h5", "compress amb.h5 -o x.dcz 2>> s.h5"}) {
    auto c = cli(dir, args);
    EXPECT_EQ(c.status, 2) << args << "\n" << describe(c);
    EXPECT_EQ(read_bytes(dir.file("s.h5")), src) << args;
  }
  // A virtual dataset of 70 sources: each is an input (those past the 63rd were not).
  {
    const hsize_t dims[3] = {70, 8, 8}, one[3] = {1, 8, 8};
    auto f = h5_create(dir.file("many.h5"));
    h5 vspace(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
    h5 sspace(H5Screate_simple(3, one, nullptr), H5Sclose, "space");
    h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
    for (hsize_t i = 0; i < 70; ++i) {
      const std::string name = "r" + std::to_string(i) + ".h5";
      auto r = h5_create(dir.file(name));
      h5_write(r.get(), "/d", H5T_STD_U8LE, {1, 8, 8}, std::vector<std::uint8_t>(64, 3));
      const hsize_t at[3] = {i, 0, 0};
      h5_check(H5Sselect_hyperslab(vspace.get(), H5S_SELECT_SET, at, nullptr, one, nullptr),
               "select");
      h5_check(H5Pset_virtual(dcpl.get(), vspace.get(), name.c_str(), "/d", sspace.get()),
               "virtual");
    }
    h5 d(H5Dcreate2(f.get(), "/v", H5T_STD_U8LE, vspace.get(), H5P_DEFAULT, dcpl.get(),
                    H5P_DEFAULT),
         H5Dclose, "create");
  }
  const std::string last = read_bytes(dir.file("r69.h5"));
  for (const std::string args : {"compress many.h5 -o r69.h5 -f", "eval many.h5 1<> r69.h5"}) {
    auto c = cli(dir, args);
    EXPECT_EQ(c.status, 2) << args << "\n" << describe(c);
    EXPECT_EQ(read_bytes(dir.file("r69.h5")), last) << args;
  }
  // A virtual dataset whose source is itself, or two that are each other's: HDF5 reads them
  // by recursing until the stack ends (a crash); refused as bad input, naming the cycle.
  make_vds(dir.file("self.h5"), "self.h5", "/v");
  make_vds(dir.file("va.h5"), "vb.h5", "/v");
  make_vds(dir.file("vb.h5"), "va.h5", "/v");
  for (const std::string in : {"self.h5", "va.h5:/v"}) {
    auto c = cli(dir, "compress " + in + " -o cyc.dcz");
    EXPECT_EQ(c.status, 3) << in << "\n" << describe(c);
    EXPECT_TRUE(contains(c.err, "a virtual dataset whose sources lead back to it (")) << c.err;
    EXPECT_TRUE(contains(c.err, "HDF5 would read it without end")) << c.err;
  }
  for (const char* in : {"chain.h5", "outer.h5", "vl.h5"}) {  // elsewhere, as before
    must(dir, std::string("compress ") + in + " -o a.dcz -f --chop 8 --coeff f32 -q");
    must(dir, "decompress a.dcz -o a.npy -f -q");
    EXPECT_EQ(load_npy(dir.file("a.npy")).raw, as_bytes(v)) << in;
  }
}

TEST(Hdf5Cli, ExternalRawFilesBesideTheFileAreReadFromAnotherFolderAndMissingOnesNamed) {
  // Values stored outside the HDF5 file (h5py's external=[...]): HDF5 looks for a relative
  // name in the working directory; dctchop looks beside the file too.
  temp_dir dir;
  const std::vector<std::uint8_t> v(6 * 64, 7);
  {
    make_external_h5(dir.file("e.h5"), "e.raw");
  }
  // (written here: HDF5 would write it in the test's working directory)
  dctchop::test::write_bytes(dir.file("e.raw"), std::string(v.begin(), v.end()));
  std::filesystem::create_directory(dir.file("sub"));
  auto away = sh(dir, "cd sub && DCTCHOP compress ../e.h5:/images -o a.dcz --chop 8 --coeff f32 -q");
  ASSERT_EQ(away.status, 0) << describe(away);
  must(dir, "decompress sub/a.dcz -o a.npy -q");
  EXPECT_EQ(load_npy(dir.file("a.npy")).raw, as_bytes(v));
  // Shorter than the data (a writer that stopped early: HDF5 writes no fill values there):
  // HDF5 reads zeros past its end, without a word; dctchop says so.
  dctchop::test::write_bytes(dir.file("e.raw"), std::string(v.begin(), v.end() - 65));
  auto short_file = must(dir, "compress e.h5:/images -o b.dcz --chop 8 --coeff f32");
  EXPECT_TRUE(contains(short_file.err, "e.h5:/images: the external raw file e.raw ends before "
                                       "the values stored in it (never written, or cut short?): "
                                       "those past the end read as 0")) << short_file.err;
  must(dir, "decompress b.dcz -o b.npy -q");
  std::vector<std::uint8_t> cut = v;
  std::fill(cut.end() - 65, cut.end(), std::uint8_t{0});
  EXPECT_EQ(load_npy(dir.file("b.npy")).raw, as_bytes(cut));
  dctchop::test::write_bytes(dir.file("e.raw"), std::string(v.begin(), v.end()));
  auto full = must(dir, "compress e.h5:/images -o d.dcz");
  EXPECT_FALSE(contains(full.err, "ends before")) << full.err;
  std::filesystem::remove(dir.file("e.raw"));
  auto gone = cli(dir, "compress e.h5:/images -o b.dcz");
  EXPECT_EQ(gone.status, 5) << describe(gone);
  EXPECT_TRUE(contains(gone.err, "e.h5:/images: its values are stored in the external raw file "
                                 "e.raw, not found beside the HDF5 file or here"))
      << gone.err;
  // A directory of that name, beside the file or here: said so (HDF5 opens it, and its read
  // failed as "the file is damaged").
  std::filesystem::create_directory(dir.file("e.raw"));
  for (const std::string at : {"", "cd sub && "}) {
    auto folder = sh(dir, at + "DCTCHOP compress " + (at.empty() ? "" : "../") +
                              "e.h5:/images -o c.dcz");
    EXPECT_EQ(folder.status, 5) << at << describe(folder);  // (as an input named so)
    EXPECT_TRUE(contains(folder.err, "e.h5:/images: its values are stored in the external raw "
                                     "file " + std::string(at.empty() ? "" : "../") +
                                     "e.raw, but that is a directory")) << at << folder.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("c.dcz")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("sub/c.dcz")));
  // A directory of that name in the working folder, the file beside the HDF5 file: read.
  std::filesystem::remove(dir.file("e.raw"));
  dctchop::test::write_bytes(dir.file("e.raw"), std::string(v.begin(), v.end()));
  std::filesystem::create_directory(dir.file("sub/e.raw"));
  auto beside = sh(dir, "cd sub && DCTCHOP compress ../e.h5:/images -o c.dcz --chop 8 "
                        "--coeff f32 -q && DCTCHOP decompress c.dcz -o c.npy -q");
  ASSERT_EQ(beside.status, 0) << describe(beside);
  EXPECT_EQ(load_npy(dir.file("sub/c.npy")).raw, as_bytes(v));
}

TEST(Hdf5Cli, OneImageLikeDatasetIsUsedWithoutNamingItAndSaidOnStderr) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));  // /train/labels is 1-D: not image-like
  auto c = must(dir, "compress t.h5 -o a.dcz");
  EXPECT_TRUE(contains(c.err, "using dataset /train/images")) << c.err;
  EXPECT_TRUE(contains(c.err, "t.h5")) << c.err;
  auto i = must(dir, "info a.dcz --json");
  EXPECT_EQ(parse_json(i.out).at("shape"), json({6, 16, 16, 3}));
  // Default output name: t.h5 -> t.dcz.
  must(dir, "compress t.h5:/train/images -q");
  EXPECT_TRUE(std::filesystem::exists(dir.file("t.dcz")));
}

TEST(Hdf5Cli, QuietSilencesTheDatasetNote) {
  // -q: "print nothing but errors".
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  auto q = must(dir, "compress t.h5 -o b.dcz -q");
  EXPECT_EQ(q.err, "") << "-q prints nothing but errors";
}

TEST(Hdf5Cli, ProvenanceOfAChosenDatasetNamesTheDataset) {
  // The archive records its source; when dctchop chose the dataset, "t.h5" alone does not say
  // which data was compressed.
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5 -o a.dcz -q");
  auto i = must(dir, "info a.dcz --json");
  const json j = parse_json(i.out);
  const std::string src = j.at("provenance").value("source", std::string());
  EXPECT_TRUE(contains(src, "/train/images")) << "provenance source: " << src;
}

TEST(Hdf5Cli, SeveralImageLikeDatasetsExit2ListingThemWithShapes) {
  temp_dir dir;
  {
    auto f = h5_create(dir.file("two.h5"));
    h5_write(f.get(), "/a", H5T_IEEE_F32LE, {4, 8, 8}, std::vector<float>(256, 1.0f));
    h5_write(f.get(), "/g/b", H5T_STD_U8LE, {3, 16, 16, 1}, std::vector<std::uint8_t>(768, 5));
  }
  auto c = cli(dir, "compress two.h5 -o a.dcz");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_EQ(count_lines(c.err), 1u) << c.err;
  EXPECT_TRUE(contains(c.err, "two.h5")) << c.err;
  EXPECT_TRUE(contains(c.err, "/a (4, 8, 8)")) << c.err;
  EXPECT_TRUE(contains(c.err, "/g/b (3, 16, 16, 1)")) << c.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"two.h5"});
  // One dataset per frame, 30 of them: the first 24, and how many more.
  {
    auto f = h5_create(dir.file("frames.h5"));
    for (int i = 0; i < 30; ++i) {
      h5_write(f.get(), "/f" + std::to_string(100 + i), H5T_STD_U8LE, {8, 8},
               std::vector<std::uint8_t>(64, 5));
    }
  }
  auto frames = cli(dir, "compress frames.h5 -o a.dcz");
  EXPECT_EQ(frames.status, 2) << describe(frames);
  EXPECT_TRUE(contains(frames.err, "/f123 (8, 8), and 6 more")) << frames.err;
  EXPECT_FALSE(contains(frames.err, "/f124")) << frames.err;
}

TEST(Hdf5Cli, DatasetNamedImagesAmongSeveralIsChosen) {
  temp_dir dir;
  {
    auto f = h5_create(dir.file("s.h5"));
    h5_write(f.get(), "/masks", H5T_STD_U8LE, {4, 8, 8}, std::vector<std::uint8_t>(256, 1));
    h5_write(f.get(), "/images", H5T_STD_U8LE, {4, 16, 16, 3}, dctchop::test::smooth_u8_nhwc(4, 16, 16, 3));
    h5_write(f.get(), "/zeta", H5T_IEEE_F32LE, {2, 8, 8}, std::vector<float>(128, 1.0f));
  }
  auto c = must(dir, "compress s.h5 -o a.dcz");
  EXPECT_TRUE(contains(c.err, "using dataset /images")) << c.err;
  auto i = must(dir, "info a.dcz --json");
  EXPECT_EQ(parse_json(i.out).at("shape"), json({4, 16, 16, 3}));
}

TEST(Hdf5Cli, TwoDatasetsNamedImagesAreAmbiguous) {
  // "one named images": with /train/images and /test/images nothing says which is meant; the
  // choice must not be made silently by alphabetical order.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("tt.h5"));
    h5_write(f.get(), "/train/images", H5T_STD_U8LE, {4, 8, 8}, std::vector<std::uint8_t>(256, 1));
    h5_write(f.get(), "/test/images", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 2));
    h5_write(f.get(), "/count", H5T_STD_I64LE, {1}, std::vector<std::int64_t>{6});  // 1-D: not images
    h5_write_strings(f.get(), "/names", {2});
  }
  auto c = cli(dir, "compress tt.h5 -o a.dcz");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_TRUE(contains(c.err, "/train/images (4, 8, 8)")) << c.err;
  EXPECT_TRUE(contains(c.err, "/test/images (2, 8, 8)")) << c.err;
  // The candidates are the datasets that could be meant, not every dataset in the file.
  EXPECT_FALSE(contains(c.err, "/count")) << c.err;
  EXPECT_FALSE(contains(c.err, "/names")) << c.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.dcz")));
}

TEST(Hdf5Cli, VerifyAndEvalAcceptHdf5Inputs) {
  temp_dir dir;
  make_mixed_file(dir.file("m.h5"));
  must(dir, "compress m.h5:/train/images -o a.dcz -q");
  auto v = must(dir, "verify a.dcz --against m.h5:/train/images --min-psnr 25 -q");
  auto mm = cli(dir, "verify a.dcz --against m.h5:/fields -q");
  EXPECT_EQ(mm.status, 9) << describe(mm);
  auto g = cli(dir, "verify a.dcz --against m.h5:/train/images --min-psnr 99 -q");
  EXPECT_EQ(g.status, 8) << describe(g);
  // A file with several candidates is a usage error, as for compress, not a mismatch.
  {
    auto f = h5_create(dir.file("two.h5"));
    h5_write(f.get(), "/train/images", H5T_STD_U8LE, k_u8_shape, dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
    h5_write(f.get(), "/test/images", H5T_STD_U8LE, k_u8_shape, dctchop::test::smooth_u8_nhwc(6, 16, 16, 3));
  }
  auto which = cli(dir, "verify a.dcz --against two.h5 -q");
  EXPECT_EQ(which.status, 2) << describe(which);
  EXPECT_TRUE(contains(which.err, "name the dataset")) << which.err;
  auto e = must(dir, "eval m.h5 --dataset /fields --chop 2,4 --no-ssim -q --json");
  const json j = parse_json(e.out);
  EXPECT_EQ(j.at("shape"), json({5, 24, 18}));
  EXPECT_EQ(j.at("rows").size(), 2u);
  // With SSIM, float data's range is found by a first pass; without, from the values as they
  // are measured. The PSNR must be the same either way.
  const json js = parse_json(must(dir, "eval m.h5 --dataset /fields --chop 2,4 -q --json").out);
  ASSERT_EQ(js.at("rows").size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const auto &a = j["rows"][r].at("quality"), &b = js["rows"][r].at("quality");
    EXPECT_EQ(a.at("range").get<double>(), b.at("range").get<double>());
    EXPECT_EQ(a.at("psnr_db").get<double>(), b.at("psnr_db").get<double>());
    EXPECT_TRUE(b.at("ssim").is_number());
  }
}

TEST(Hdf5Cli, OutputDatasetPathsThatCannotBeOrClashWithTheLabelsExit2AndLeaveNothing) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images --labels t.h5:/train/labels -o a.dcz -q");
  const auto before = dir.entries();
  for (const auto& [out, says] :
       {std::pair{"o.h5:/", "o.h5: HDF5 dataset path '/': expected a name like /images"},
        std::pair{"o.h5:/.", "o.h5: HDF5 dataset path '/.': expected a name like /images"},
        std::pair{"o.h5:/g/", "o.h5: HDF5 dataset path '/g/': expected a name like /images"},
        std::pair{"o.h5:", "o.h5:: no dataset after ':'"},
        std::pair{"o.h5:/labels", "would both be /labels"},
        std::pair{"o.h5:/g/labels", "would both be /g/labels"},
        std::pair{"o.h5:labels", "would both be /labels"}}) {
    auto r = cli(dir, std::string("decompress a.dcz -o ") + out);
    EXPECT_EQ(r.status, 2) << out << "\n" << describe(r);
    EXPECT_NE(r.err.find(says), std::string::npos) << out << "\n" << r.err;
    EXPECT_EQ(dir.entries(), before) << out << ": something was left behind";
  }
  auto l = cli(dir, "decompress a.dcz -o o.h5:/labels");
  EXPECT_NE(l.err.find("the data and the archive's labels would both be /labels"), std::string::npos) << l.err;
  // Paths inside one another are named as such, --labels-out's too.
  for (const auto& [args, says] :
       {std::pair{"-o o.h5:/y/images --labels-out o.h5:/y", "the data's path would lie inside "
                                                             "the labels' dataset /y"},
        std::pair{"-o o.h5:/x --labels-out o.h5:/x/y", "o.h5:/x: the labels' path /x/y would "
                                                       "lie inside the data's dataset"}}) {
    auto p = cli(dir, std::string("decompress a.dcz ") + args);
    EXPECT_EQ(p.status, 2) << describe(p);
    EXPECT_NE(p.err.find(says), std::string::npos) << args << "\n" << p.err;
  }
  // Without the slash the name is still a dataset, not a file named "o.h5:images".
  must(dir, "decompress a.dcz -o o.h5:images -q");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.h5:images")));
  const auto back = must(dir, "compress o.h5:/images -o b.dcz --json").out;
  EXPECT_EQ(parse_json(back).at("shape"), json({6, 16, 16, 3}));
  // The labels go beside the data, in its group (they went to /labels): where the input rule
  // finds them again, and a second split of the file would not collide with them.
  auto split = must(dir, "decompress a.dcz -o s.h5:/train/images");
  EXPECT_TRUE(contains(split.err, "labels 6 -> s.h5:/train/labels")) << split.err;
  auto again = must(dir, "compress s.h5:/train/images --labels s.h5 -o c.dcz");
  EXPECT_TRUE(contains(again.err, "using labels /train/labels of s.h5")) << again.err;
  // compress writes archives: an HDF5 dataset as its output is a usage error.
  auto c = cli(dir, "compress t.h5:/train/images -o z.h5:/x");
  EXPECT_EQ(c.status, 2) << describe(c);
  EXPECT_NE(c.err.find("writes a .dcz archive"), std::string::npos) << c.err;
  // A missing folder is named as the reason, for HDF5 outputs too.
  for (const std::string out : {"nodir/x.h5:/a", "nodir/x.npy", "t.h5/x.npy"}) {
    auto m = cli(dir, "decompress a.dcz -o " + out);
    EXPECT_EQ(m.status, 5) << describe(m);
    const std::string file = out.substr(0, out.find(':'));
    const std::string why = out[0] == 'n' ? "the folder nodir does not exist" : "t.h5 is not a folder";
    EXPECT_NE(m.err.find(file + ": cannot be written: " + why), std::string::npos) << m.err;
  }
  // A folder that is there but takes no new files (ENOENT on create, as /proc gives) is named
  // as that, not as "No such file or directory"; an existing file there the same, with -f.
  for (const std::string args : {"-o /proc/x.h5:/a", "-o /proc/x.npy", "-o /proc/x.npz",
                                 "-o x.npy --labels-out /proc/version -f"}) {
    auto m = cli(dir, "decompress a.dcz " + args);
    EXPECT_EQ(m.status, 5) << describe(m);
    EXPECT_NE(m.err.find(": cannot be written: its folder /proc takes no new files"),
              std::string::npos)
        << args << "\n" << m.err;
  }
  // --dataset with raw data is a usage error, not ignored.
  auto raw = cli(dir, "decompress a.dcz -o r.raw --raw --dataset /x");
  EXPECT_EQ(raw.status, 2) << describe(raw);
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.raw")));
}

TEST(Hdf5Cli, TheDataIsWrittenWithDirectIoAtTheAddressHdf5AllocatedForIt) {
  // 2500 rows of 33x35x3 (8.3 MiB): the dataset is one contiguous block that dctchop writes
  // itself, through a descriptor switched to O_DIRECT, in 8 MiB buffers starting at the
  // block's address (then the rest): strace shows the writes, H5Dget_offset the address.
  temp_dir dir;
  if (sh(dir, "strace -o /dev/null -f true").status != 0) {
    GTEST_SKIP() << "needs strace, allowed to trace its child";
  }
  const u64 n = 2500, row = 33 * 35 * 3;
  std::vector<std::uint8_t> v(n * row);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 131 + i / 977) % 256);
  dctchop::test::save_npy(dir.file("in.npy"), dtype::u8, {n, 33, 35, 3}, v);
  must(dir, "compress in.npy -o a.dcz -q --chop 8");
  // (LeakSanitizer cannot run under ptrace: off for these runs in the ASan build.)
  auto traced = [&](const std::string& output) {
    auto r = sh(dir, "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" "
                     "strace -o trace.txt -f -s 0 -e trace=fcntl,pwrite64 "
                     "DCTCHOP decompress a.dcz -o " + output + " -q");
    EXPECT_EQ(r.status, 0) << describe(r);
    return read_bytes(dir.file("trace.txt"));
  };
  const std::regex direct("F_SETFL, [A-Z_|]*O_DIRECT[A-Z_|]*\\) += 0");
  if (!std::regex_search(traced("out.npy"), direct)) {
    GTEST_SKIP() << "this file system refuses O_DIRECT (tmpfs?): outputs are written buffered";
  }
  const std::string trace = traced("out.h5");
  ASSERT_TRUE(std::regex_search(trace, direct)) << "an NPY output had direct I/O here:\n" << trace;
  auto f = h5_open(dir.file("out.h5"));
  h5 d(H5Dopen2(f.get(), "/data", H5P_DEFAULT), H5Dclose, "open /data");
  const haddr_t at = H5Dget_offset(d.get());
  ASSERT_NE(at, HADDR_UNDEF);
  EXPECT_EQ(at % 4096, 0u);
  // (Its result may come on a line of its own: "<unfinished ...>", the flusher is a thread.)
  EXPECT_TRUE(std::regex_search(trace, std::regex("pwrite64\\([0-9]+, \"\"\\.\\.\\., 8388608, " +
                                                  std::to_string(at) + "[ )]")))
      << "no 8 MiB write at the data's address " << at << ":\n" << trace.substr(0, 4000);
  std::vector<std::uint8_t> back(v.size());
  h5_check(H5Dread(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), "read");
  EXPECT_TRUE(back == v) << "chop 8 of 8 is exact for u8";
}

TEST(Hdf5Cli, ATruncatedHdf5InputIsBadInputThatSaysSo) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  const std::string whole = read_bytes(dir.file("t.h5"));
  write_bytes(dir.file("cut.h5"), whole.substr(0, whole.size() / 2));
  auto c = cli(dir, "compress cut.h5 -o a.dcz");
  EXPECT_EQ(c.status, 3) << describe(c);
  EXPECT_TRUE(contains(c.err, "cut.h5: a truncated HDF5 file")) << c.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.dcz")));
}

TEST(Hdf5Cli, UnfilteredChunksNarrowerThanTheRowsAreReadAChunkAReadNotAValueARead) {
  // h5py's automatic chunks of NHWC images hold one channel ((125, 16, 16, 1) for 64x64x3):
  // read straight into interleaved rows, HDF5 made a read of every value (12 MB in 10 s, a
  // hundred times what h5py takes). Chunks spanning whole rows are still read straight.
  temp_dir dir;
  if (sh(dir, "strace -o /dev/null -f true").status != 0) {
    GTEST_SKIP() << "needs strace, allowed to trace its child";
  }
  const std::vector<u64> shape{40, 32, 32, 3};
  std::vector<std::uint8_t> v(40 * 32 * 32 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 37) ^ (i >> 7));
  {
    auto f = h5_create(dir.file("c.h5"));
    h5_write(f.get(), "/narrow", H5T_STD_U8LE, shape, v, storage{{10, 16, 16, 1}});
    h5_write(f.get(), "/whole", H5T_STD_U8LE, shape, v, storage{{10, 32, 32, 3}});
  }
  const auto reads = [&](const std::string& dataset) {
    auto r = sh(dir, "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" "
                     "strace -o trace.txt -f -e trace=pread64,read "
                     "DCTCHOP compress c.h5:" + dataset + " -o " + dataset.substr(1) +
                     ".dcz --chop 8 -q");
    EXPECT_EQ(r.status, 0) << describe(r);
    const std::string trace = read_bytes(dir.file("trace.txt"));
    return static_cast<std::size_t>(std::count(trace.begin(), trace.end(), '\n'));
  };
  const std::size_t narrow = reads("/narrow"), whole = reads("/whole");
  // 122,880 values; 96 chunks. (The rest of the calls: the libraries, the file's structure.)
  EXPECT_LT(narrow, whole + 400) << "reads of /narrow against /whole";
  ASSERT_EQ(cli(dir, "decompress narrow.dcz -o n.npy -q").status, 0);
  ASSERT_EQ(cli(dir, "decompress whole.dcz -o w.npy -q").status, 0);
  const auto n = load_npy(dir.file("n.npy"));
  EXPECT_EQ(n.values, as_doubles(v)) << "chop 8 of 8 is exact for u8";
  EXPECT_EQ(read_bytes(dir.file("n.npy")), read_bytes(dir.file("w.npy")));
}

/** Where the little-endian u32 values `v` first lie in `bytes` (npos: nowhere). */
std::size_t find_u32s(const std::string& bytes, const std::vector<std::uint32_t>& v) {
  std::string pattern;
  for (const std::uint32_t x : v)
    for (int i = 0; i < 4; ++i) pattern += static_cast<char>((x >> (8 * i)) & 0xff);
  return bytes.find(pattern);
}

TEST(Hdf5Cli, DamagedHdf5StructureIsBadInputNotAnIoErrorOrACrash) {
  temp_dir dir;
  {
    auto f = h5_create(dir.file("c.h5"));
    h5_write(f.get(), "/images", H5T_STD_U8LE, {8, 16, 16, 3},
             dctchop::test::smooth_u8_nhwc(8, 16, 16, 3), storage{{1, 8, 8, 3}, 4});
    h5_write(f.get(), "/flat", H5T_STD_U8LE, {8, 16, 16, 3},
             dctchop::test::smooth_u8_nhwc(8, 16, 16, 3));
    // h5py chunks an empty axis by 1024, past its fixed size 0, which HDF5 allows.
    h5_write(f.get(), "/empty", H5T_STD_U8LE, {0, 8, 8}, std::vector<std::uint8_t>{},
             storage{{1024, 8, 8}, 4});
  }
  auto e = cli(dir, "compress c.h5:/empty -o e.dcz");
  EXPECT_EQ(e.status, 3) << describe(e);
  EXPECT_FALSE(contains(e.err, "damaged")) << e.err;
  const std::string whole = read_bytes(dir.file("c.h5"));
  ASSERT_EQ(cli(dir, "compress c.h5:/images -o ok.dcz -q --no-quality --threads 1").status, 0);
  // The layout message's chunk dimensions (1, 8, 8, 3, then the item size 1): the last axis
  // made 262147 long. With one more byte changed in the chunk index, libhdf5 read past its
  // buffers (a crash, exit 139); alone, the read failed and exited 5, an I/O error.
  const std::size_t dims = find_u32s(whole, {1, 8, 8, 3, 1});
  ASSERT_NE(dims, std::string::npos);
  std::string wide = whole;
  wide[dims + 14] = 4;  // 3 + 4 * 65536
  write_bytes(dir.file("wide.h5"), wide);
  auto w = cli(dir, "compress wide.h5:/images -o w.dcz --threads 1");
  EXPECT_EQ(w.status, 3) << describe(w);
  EXPECT_TRUE(contains(w.err, "wide.h5:/images: its chunks are 262147 long on axis 3 of at most 3")) << w.err;
  EXPECT_TRUE(contains(w.err, "the file is damaged")) << w.err;
  // (Chunks 0 long on an axis: libhdf5 itself refuses to open the dataset, exit 3, and leaks
  // 64 bytes doing so, which fails the AddressSanitizer run: not tested here.)
  // The contiguous dataset's data moved past the end of the file: HDF5 fails the read with
  // no system error ("addr overflow"), which is the file's fault.
  {
    auto f = h5_open(dir.file("c.h5"));
    h5 d(H5Dopen2(f.get(), "/flat", H5P_DEFAULT), H5Dclose, "open /flat");
    const haddr_t at = H5Dget_offset(d.get());
    ASSERT_NE(at, HADDR_UNDEF);
    std::string moved = whole;
    std::string address(8, '\0');
    for (int i = 0; i < 8; ++i) address[static_cast<std::size_t>(i)] = static_cast<char>((at >> (8 * i)) & 0xff);
    const std::size_t msg = moved.find(address);
    ASSERT_NE(msg, std::string::npos);
    const std::uint64_t past = whole.size() + 4096;
    for (int i = 0; i < 8; ++i) moved[msg + static_cast<std::size_t>(i)] = static_cast<char>((past >> (8 * i)) & 0xff);
    write_bytes(dir.file("moved.h5"), moved);
  }
  auto m = cli(dir, "compress moved.h5:/flat -o m.dcz --threads 1");
  EXPECT_EQ(m.status, 3) << describe(m);
  EXPECT_TRUE(contains(m.err, "moved.h5:/flat")) << m.err;
  EXPECT_TRUE(contains(m.err, "the file is damaged")) << m.err;
  for (const char* out : {"w.dcz", "m.dcz"}) EXPECT_FALSE(std::filesystem::exists(dir.file(out)));
}

TEST(Hdf5Cli, DecompressOntoAnExistingHdf5FileExits6UnlessForced) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images --labels t.h5:/train/labels -o a.dcz -q");
  must(dir, "decompress a.dcz -o out.h5:/images -q");
  const std::string before = read_bytes(dir.file("out.h5"));
  auto again = cli(dir, "decompress a.dcz -o out.h5:/other -q");
  EXPECT_EQ(again.status, 6) << describe(again);
  // Naming a dataset reads as adding it: the message says what -f would do instead.
  EXPECT_TRUE(contains(again.err, "out.h5: already exists; -f would replace the whole file, not "
                                  "add /other to it"))
      << again.err;
  EXPECT_EQ(read_bytes(dir.file("out.h5")), before);
  auto labels = cli(dir, "decompress a.dcz -o new.h5 --labels-out out.h5:/y -q");
  EXPECT_EQ(labels.status, 6) << describe(labels);
  EXPECT_TRUE(contains(labels.err, "not add /y to it")) << labels.err;
  must(dir, "decompress a.dcz -o out.h5:/other -q -f");
  auto f = h5_open(dir.file("out.h5"));
  EXPECT_TRUE(h5_exists(f.get(), "/other"));
  EXPECT_FALSE(h5_exists(f.get(), "/images")) << "-f replaces the file whole";
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "out.h5", "t.h5"}));
}

TEST(Hdf5Cli, AnHdf5OutputIsWrittenUnderAUmaskThatLeavesItsOwnerOnlyReadingAndKeepsThatMode) {
  // umask 0277 makes new files 0400. HDF5 opens its temporary file by name to read and write
  // it, which such a mode refused to anyone but root ("Permission denied", exit 5), where an
  // NPY output of the same command was written. Root passes every permission check, so as
  // root the command runs as nobody.
  temp_dir dir;
  make_train_archive(dir);
  std::string as_owner;
  if (::geteuid() == 0) {
    if (sh(dir, "setpriv --reuid=65534 --regid=65534 --clear-groups true").status != 0) {
      GTEST_SKIP() << "needs setpriv, to run dctchop as another user than root";
    }
    std::filesystem::permissions(dir.path(), std::filesystem::perms(0777));
    std::filesystem::permissions(dir.file("a.dcz"), std::filesystem::perms(0644));
    as_owner = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  for (const std::string out : {"out.h5:/x", "out.npy"}) {
    const auto r = sh(dir, "umask 0277 && ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}"
                           "detect_leaks=0\" " + as_owner + "DCTCHOP decompress a.dcz -o " +
                               out + " -q");
    ASSERT_EQ(r.status, 0) << out << "\n" << describe(r);
  }
  for (const char* name : {"out.h5", "out.npy"}) {
    const auto mode = std::filesystem::status(dir.file(name)).permissions();
    EXPECT_EQ(mode, std::filesystem::perms::owner_read) << name << " keeps the umask's mode";
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "out.h5", "out.npy", "t.h5"}));
  must(dir, "compress out.h5:/x -o b.dcz -q");
  must(dir, "compress out.npy -o c.dcz -q");
  must(dir, "decompress b.dcz -o b.npy -q");
  must(dir, "decompress c.dcz -o c.npy -q");
  EXPECT_EQ(read_bytes(dir.file("b.npy")), read_bytes(dir.file("c.npy")))
      << "the HDF5 output holds the data the NPY output holds";
  // A umask that takes the owner's bits from folders too (0477, 0700, 0777) made the private
  // temporary folder d-wx------ or d---------: refused as "changed while it was being made",
  // and the folder left behind.
  for (const int mask : {0477, 0700, 0777}) {
    std::filesystem::remove(dir.file("out.h5"));
    char m[8];
    std::snprintf(m, sizeof m, "%04o", mask);
    const auto r = sh(dir, std::string("umask ") + m + " && ASAN_OPTIONS=\"${ASAN_OPTIONS:+" +
                               "$ASAN_OPTIONS:}detect_leaks=0\" " + as_owner +
                               "DCTCHOP decompress a.dcz -o out.h5:/x -q");
    ASSERT_EQ(r.status, 0) << m << "\n" << describe(r);
    EXPECT_EQ(std::filesystem::status(dir.file("out.h5")).permissions(),
              std::filesystem::perms(0666 & ~mask)) << m;
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "b.dcz", "b.npy", "c.dcz", "c.npy",
                                                        "out.h5", "out.npy", "t.h5"})) << m;
  }
}

TEST(Hdf5Cli, TheSameArchiveDecodesToTheSameHdf5BytesRunAfterRun) {
  // Each dataset's header held the time it was made (HDF5's default; not h5py's): a decoded
  // file's checksum changed every second. Datasets and the groups made for them now hold
  // none, nested ones and labels too.
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images --labels t.h5:/train/labels -o a.dcz -q");
  must(dir, "decompress a.dcz -o one.h5:/g/h/images -q");
  const auto later = sh(dir, "sleep 1.1 && DCTCHOP decompress a.dcz -o two.h5:/g/h/images -q");
  ASSERT_EQ(later.status, 0) << describe(later);
  EXPECT_TRUE(read_bytes(dir.file("one.h5")) == read_bytes(dir.file("two.h5")));
  auto f = h5_open(dir.file("one.h5"));
  for (const char* object : {"/g", "/g/h", "/g/h/images", "/g/h/labels"}) {
    H5O_info_t info{};
    ASSERT_GE(H5Oget_info_by_name2(f.get(), object, &info, H5O_INFO_TIME, H5P_DEFAULT), 0)
        << object;
    EXPECT_EQ(info.mtime, 0) << object << " holds no time";
  }
}

TEST(Hdf5Cli, AFileAnotherProgramHoldsOpenForWritingIsNotReplacedWithForce) {
  // -f replaced an HDF5 file that h5py held open for writing: what it wrote after went to
  // the old file, lost without a word (an input so held is refused, exit 5). Its lock says
  // so: refused the same way, and replaced once the writer has closed it. So is any file a
  // program holds an exclusive lock on (flock -x).
  temp_dir dir;
  make_train_archive(dir);
  const char* locking = std::getenv("HDF5_USE_FILE_LOCKING");
  if (locking == nullptr || (std::string(locking) != "FALSE" && std::string(locking) != "0")) {
    auto held = h5_create(dir.file("held.h5"));  // (HDF5 locks a file it writes)
    const auto r = cli(dir, "decompress a.dcz -o held.h5 -f");
    EXPECT_EQ(r.status, 5) << describe(r);
    EXPECT_EQ(r.err, "dctchop: error: held.h5: a program holds it locked for writing (an "
                     "exclusive flock, which HDF5 takes on a file it writes): replaced, what it "
                     "writes next would be lost; replace it once that program has closed it\n");
  }
  must(dir, "decompress a.dcz -o held.h5 -f -q");
  write_bytes(dir.file("held.npy"), "old");
  // The shell locks the file (flock on its descriptor 9) before dctchop starts, and lets go
  // after: no timing.
  const auto locked = sh(dir, "exec 9<held.npy; flock -x 9; DCTCHOP decompress a.dcz -o "
                              "held.npy -f 9<&-; echo \"rc=$?\"; exec 9<&-");
  EXPECT_TRUE(contains(locked.out, "rc=5")) << describe(locked);
  EXPECT_TRUE(contains(locked.err, "held.npy: a program holds it locked for writing"))
      << describe(locked);
  EXPECT_EQ(read_bytes(dir.file("held.npy")), "old");
  must(dir, "decompress a.dcz -o held.npy -f -q");
  EXPECT_EQ(read_bytes(dir.file("held.npy")).substr(0, 6), "\x93NUMPY");
}

TEST(Hdf5Cli, AnHdf5OutputInASetGroupIdFolderTakesTheFoldersGroupAsEveryOutputDoes) {
  // A new file in a set-group-ID folder (a team's shared folder) takes the folder's group.
  // The HDF5 output, made in a private folder of its own first, took the user's group: its
  // folder's mode, set to 0700, dropped the bit it inherited. As root, the folder is given
  // nobody's group (65534); as another user, one of its other groups, else the test skips.
  temp_dir dir;
  make_train_archive(dir);
  std::filesystem::create_directory(dir.file("team"));
  gid_t other = 65534;
  if (::geteuid() != 0) {
    std::vector<gid_t> groups(static_cast<std::size_t>(std::max(::getgroups(0, nullptr), 0)));
    groups.resize(static_cast<std::size_t>(
        std::max(::getgroups(static_cast<int>(groups.size()), groups.data()), 0)));
    const auto it = std::find_if(groups.begin(), groups.end(),
                                 [](gid_t g) { return g != ::getegid(); });
    if (it == groups.end()) GTEST_SKIP() << "needs root, or a second group to give a folder";
    other = *it;
  }
  ASSERT_EQ(::chown(dir.file("team").c_str(), static_cast<uid_t>(-1), other), 0);
  ASSERT_EQ(::chmod(dir.file("team").c_str(), 02777), 0);
  ASSERT_NE(other, ::getegid()) << "the folder's group must differ from the user's";
  for (const std::string out : {"team/x.h5", "team/x.npy", "team/x.npz", "team/y.h5:/images"}) {
    const auto r = sh(dir, "DCTCHOP decompress a.dcz -o " + out + " -q");
    ASSERT_EQ(r.status, 0) << out << "\n" << describe(r);
  }
  // A umask that takes the owner's bits (0277) makes the private folder 0500 and the bit
  // it inherited, whose mode is then set (the bit kept); and -f over an output there.
  for (const std::string args : {"umask 0277 && DCTCHOP decompress a.dcz -o team/z.h5 -q",
                                 "DCTCHOP decompress a.dcz -o team/x.h5 -f -q"}) {
    const auto r = sh(dir, args);
    ASSERT_EQ(r.status, 0) << args << "\n" << describe(r);
  }
  for (const char* name : {"x.h5", "x.npy", "x.npz", "y.h5", "z.h5"}) {
    struct stat st {};
    ASSERT_EQ(::stat(dir.file(std::string("team/") + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_gid, other) << name << " takes the folder's group";
  }
  // Nothing else there: the private folders are gone.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("team"))) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"x.h5", "x.npy", "x.npz", "y.h5", "z.h5"}));
}

// ---------------------------------------------------------------- bad inputs

struct bad_case {
  std::string args;      ///< after "dctchop"
  int status;            ///< documented exit code
  std::vector<std::string> names;  ///< texts stderr must contain
};

/** Each case: the exit code, a one-line message naming what is wrong, no output left. */
void check_bad_cases(const temp_dir& dir, const std::vector<bad_case>& cases) {
  const auto before = dir.entries();
  for (const auto& bc : cases) {
    auto r = cli(dir, bc.args);
    EXPECT_EQ(r.status, bc.status) << "dctchop " << bc.args << "\n" << describe(r);
    EXPECT_EQ(count_lines(r.err), 1u) << "dctchop " << bc.args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "error")) << "dctchop " << bc.args << ": " << r.err;
    for (const auto& n : bc.names) {
      EXPECT_TRUE(contains(r.err, n)) << "dctchop " << bc.args << ": stderr lacks \"" << n
                                      << "\": " << r.err;
    }
    EXPECT_EQ(r.out, "") << "dctchop " << bc.args;
    EXPECT_EQ(dir.entries(), before) << "dctchop " << bc.args << " left files behind";
  }
}

/** Dataset `name` of u8 and `shape` in chunks of one value, none written: a few hundred
 *  bytes of file, whatever the shape. */
void h5_declare(hid_t file, const std::string& name, const std::vector<u64>& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end()), chunk(shape.size(), 1);
  h5 space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
           "dataspace");
  h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
  h5_check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "chunk");
  h5 d(H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                  H5P_DEFAULT),
       H5Dclose, "create dataset " + name);
}

TEST(Hdf5Cli, AGroupThatCannotBeReadIsADamagedFileNotOneWithoutTheDataset) {
  // The root group's symbol table node damaged: "holds no image-like dataset ... the file
  // holds no dataset at all", and for t.h5:/images "no such dataset", where h5py says "bad
  // symbol table node signature". A group that is not there, or a name past a dataset, is
  // still no such dataset.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("t.h5"));
    h5_write(f.get(), "/g/images", H5T_STD_U8LE, {4, 16, 16}, std::vector<std::uint8_t>(1024, 9));
  }
  std::string bytes = read_bytes(dir.file("t.h5"));
  const auto at = bytes.find("SNOD");  // the root group's node: the first
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 4, "XXXX");
  write_bytes(dir.file("bad.h5"), bytes);
  check_bad_cases(dir, {{"compress bad.h5 -o a.dcz", 3,
                         {"bad.h5: the file is damaged: its groups cannot be read (bad symbol "
                          "table node signature)"}},
                        {"compress bad.h5:/g/images -o a.dcz", 3,
                         {"bad.h5:/g/images: the file is damaged: the groups on the way to the "
                          "dataset cannot be read (bad symbol table node signature)"}},
                        {"compress t.h5:/h/images -o a.dcz", 3,
                         {"t.h5:/h/images: no such dataset in the file (datasets: /g/images"}},
                        {"compress t.h5:/g/images/x -o a.dcz", 3,
                         {"t.h5:/g/images/x: no such dataset in the file"}}});
  EXPECT_EQ(cli(dir, "compress t.h5:/g/images -o a.dcz -q").status, 0);
  // Only /g's node damaged: a name not there (/h) is no such dataset, with a word on the rest
  // (it was "the file is damaged", the name left out).
  std::string inner = read_bytes(dir.file("t.h5"));
  const auto last = inner.rfind("SNOD");
  ASSERT_NE(last, inner.find("SNOD")) << "a node for the root and one for /g";
  inner.replace(last, 4, "XXXX");
  write_bytes(dir.file("inner.h5"), inner);
  check_bad_cases(dir, {{"compress inner.h5:/h/images -o a2.dcz", 3,
                         {"inner.h5:/h/images: no such dataset in the file (and some of its "
                          "groups cannot be read: the file is damaged)"}}});
}

TEST(Hdf5BadInput, ShapesWhoseSizesWrapOrPassTheArchiveLimitsAreRefusedUpFront) {
  // An HDF5 extent costs nothing to declare: sizes computed from it wrapped round 2^64 (a
  // division by zero, SIGFPE; buffers of 64 bytes for 2^64 values), and shapes past the
  // archive's limits made archives that every reader refused. Each is now a bad input that
  // names the shape, for compress, eval and as labels, before anything is written.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("big.h5"));
    const u64 t40 = u64(1) << 40;
    h5_declare(f.get(), "/cube", {t40, t40, t40});            // 2^120 values
    h5_declare(f.get(), "/wraps", {1, 4294705160, 4295229448});  // H x W = 2^64 + 64
    h5_declare(f.get(), "/planes", {2, 65537, 2, 2});          // NCHW: 65537 planes
    h5_declare(f.get(), "/wide", {2, 4, 16777217});            // NHW: wider than 2^24
    h5_declare(f.get(), "/labels", {6, u64(1) << 61, 8});       // rows of 2^64 bytes
  }
  make_train_file(dir.file("t.h5"));
  check_bad_cases(dir, {
      {"compress big.h5:/cube -o o.dcz", 3,
       {"big.h5:/cube: shape 1099511627776x1099511627776x1099511627776 is too large (its size "
        "passes 2^64)"}},
      {"eval big.h5:/cube", 3, {"big.h5:/cube", "is too large"}},
      {"compress big.h5:/wraps -o o.dcz --chop 8", 3, {"big.h5:/wraps", "is too large"}},
      {"eval big.h5:/wraps", 3, {"big.h5:/wraps", "is too large"}},
      {"compress big.h5:/planes --layout NCHW -o o.dcz", 3,
       {"big.h5:/planes: shape 2x65537x2x2 is too large for an archive: 65537 planes a sample, "
        "above 2^16 (65536)"}},
      {"compress big.h5:/wide -o o.dcz", 3,
       {"big.h5:/wide", "planes of 4x16777217, above 2^24 (16777216) a side"}},
      {"compress t.h5:/train/images --labels big.h5:/labels -o o.dcz", 3,
       {"big.h5:/labels: shape 6x2305843009213693952x8 is too large"}},
  });
}

TEST(Hdf5BadInput, EachBadHdf5InputExitsWithItsCodeAndOneClearLine) {
  temp_dir dir;
  {
    auto f = h5_create(dir.file("bad.h5"));
    h5_write_compound(f.get(), "/rec", {4, 8, 8});
    h5_write_strings(f.get(), "/names", {4, 8});
    h5_write(f.get(), "/vec", H5T_IEEE_F32LE, {40}, std::vector<float>(40, 1.0f));
    h5_write(f.get(), "/images", H5T_STD_U8LE, {2, 8, 8}, std::vector<std::uint8_t>(128, 3));
  }
  make_train_file(dir.file("t.h5"));
  write_bytes(dir.file("text.h5"), "these are notes, not HDF5\n");
  // Files users mix up, under an HDF5 name: each named for what it is.
  dctchop::test::save_npy(dir.file("npy.h5"), dtype::u8, {2, 8, 8}, std::vector<std::uint8_t>(128, 3));
  dctchop::test::save_npy(dir.file("p.npy"), dtype::u8, {2, 8, 8}, std::vector<std::uint8_t>(128, 3));
  must(dir, "compress p.npy -o dcz.h5 -q");  // an archive named .h5
  check_bad_cases(dir, {
      {"compress npy.h5 -o out.dcz", 3, {"npy.h5: is a .npy file, not an HDF5 file (name it .npy)"}},
      {"compress dcz.h5 -o out.dcz", 3,
       {"dcz.h5: is a dctchop archive, not an HDF5 file (decompress it first)"}},
      {"compress missing.h5 -o out.dcz", 5, {"missing.h5"}},
      {"compress missing.h5:/images -o out.dcz", 5, {"missing.h5"}},
      {"compress t.h5:/train/nope -o out.dcz", 3, {"t.h5", "/train/nope", "/train/images"}},
      {"compress t.h5 --dataset /nope -o out.dcz", 3, {"t.h5", "/nope"}},
      {"compress bad.h5:/rec -o out.dcz", 3, {"bad.h5", "/rec", "compound"}},
      {"compress bad.h5:/names -o out.dcz", 3, {"bad.h5", "/names", "string"}},
      {"compress bad.h5:/vec -o out.dcz", 3, {"bad.h5", "/vec", "(40,)"}},
      {"compress text.h5 -o out.dcz", 3, {"text.h5", "not an HDF5 file"}},
      {"compress text.h5:/images -o out.dcz", 3, {"text.h5"}},
      {"compress t.h5:/train/images --dataset /other -o out.dcz", 2, {"--dataset", "/other"}},
      {"compress t.h5:/train/images --labels t.h5:/nope -o out.dcz", 3, {"t.h5", "/nope"}},
      {"compress t.h5:/train/images --labels bad.h5:/vec -o out.dcz", 3, {"bad.h5", "/vec"}},
      {"eval bad.h5:/rec -q", 3, {"bad.h5", "/rec"}},
      {"eval missing.h5 -q", 5, {"missing.h5"}},
  });
  // An HDF5 file through a pipe: its name cannot help, so the message names the pipe; a usage
  // error, as for a FIFO named .h5 (the data is fine, the way it comes is not). A .npz alike.
  auto piped = dctchop::test::run_sh("cat t.h5 | " + dctchop::test::dctchop_bin() +
                                         " compress - -o out.dcz", dir.path());
  EXPECT_EQ(piped.status, 2) << describe(piped);
  EXPECT_TRUE(contains(piped.err, "is an HDF5 file, which is read by seeking: pass the file's "
                                  "name (FILE.h5), not a pipe or standard input")) << piped.err;
  auto zip = dctchop::test::run_sh("cat " + std::string(DCTCHOP_SAMPLE_DIR) + "/npz/mnist_like.npz | " +
                                       dctchop::test::dctchop_bin() + " eval -", dir.path());
  EXPECT_EQ(zip.status, 2) << describe(zip);
  EXPECT_TRUE(contains(zip.err,
                       "is a ZIP file (numpy's .npz?), which is read from its end: pass "
                       "the file's name (FILE.npz), not a pipe or standard input"))
      << zip.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.dcz")));
}

TEST(Hdf5BadInput, FileWithOnlyOneDimensionalDataIsRefusedNamingTheDataset) {
  // Named, a 1-D dataset is bad input (3). Unnamed, the file has no image-like dataset: also
  // bad input (3), and the error says so and lists what the file holds.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("v.h5"));
    h5_write(f.get(), "/vec", H5T_IEEE_F64LE, {50}, std::vector<double>(50, 1.0));
  }
  check_bad_cases(dir, {
      {"compress v.h5:/vec -o out.dcz", 3, {"v.h5", "/vec", "(50,)"}},
      {"compress v.h5 -o out.dcz", 3, {"v.h5", "no image-like dataset", "/vec (50,)"}},
  });
}

TEST(Hdf5BadInput, DecompressToAnUnwritableHdf5PlaceExits5AndLeavesNothing) {
  temp_dir dir;
  make_train_archive(dir);
  check_bad_cases(dir, {
      {"decompress a.dcz -o nodir/out.h5:/x", 5, {"nodir/out.h5"}},
      {"decompress a.dcz -o - --dataset /x", 2, {"HDF5"}},
  });
}

// ---------------------------------------------------------------- raw binary

TEST(RawCli, RawToArchiveToRawIsByteIdenticalToTheNpyData) {
  temp_dir dir;
  const auto v = dctchop::test::smooth_f32_nhw(4, 24, 18);
  const auto bytes = as_bytes(v);
  write_bytes(dir.file("f.bin"), std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  auto c = must(dir, "compress f.bin --raw --dtype f32 --shape 4,24,18 -o f.dcz --chop 4 --json");
  const json j = parse_json(c.out);
  EXPECT_EQ(j.at("layout"), "NHW");
  must(dir, "decompress f.dcz -o out.bin --raw -q");
  must(dir, "decompress f.dcz -o out.npy -q");
  const auto npy = load_npy(dir.file("out.npy"));
  EXPECT_EQ(npy.header.shape, (std::vector<u64>{4, 24, 18}));
  EXPECT_EQ(npy.header.type.native_descr(), "<f4");
  const std::string raw = read_bytes(dir.file("out.bin"));
  ASSERT_EQ(raw.size(), npy.raw.size());
  EXPECT_EQ(std::memcmp(raw.data(), npy.raw.data(), raw.size()), 0);
  const double p = psnr_of(as_doubles(v), npy.values, value_range(as_doubles(v)));
  EXPECT_GT(p, 30.0);
  EXPECT_NEAR(p, j.at("quality").at("psnr_db").get<double>(), 1e-6);
  // Raw to stdout gives the same bytes.
  auto s = sh(dir, "DCTCHOP decompress f.dcz -o - --raw -q > stdout.bin");
  ASSERT_EQ(s.status, 0) << describe(s);
  EXPECT_EQ(read_bytes(dir.file("stdout.bin")), raw);
}

TEST(RawCli, RawU8AtChop8IsExactAndRawU16KeepsItsType) {
  temp_dir dir;
  const auto u8v = dctchop::test::smooth_u8_nhwc(3, 16, 16, 3);
  write_bytes(dir.file("u8.raw"), std::string(u8v.begin(), u8v.end()));
  must(dir, "compress u8.raw --raw --dtype u8 --shape 3,16,16,3 -o u8.dcz --chop 8 -q");
  must(dir, "decompress u8.dcz -o u8.out --raw -q");
  EXPECT_EQ(read_bytes(dir.file("u8.out")), read_bytes(dir.file("u8.raw")));
  const auto u16v = smooth_u16_nchw(2, 1, 16, 16);
  const auto b = as_bytes(u16v);
  write_bytes(dir.file("u16.raw"), std::string(reinterpret_cast<const char*>(b.data()), b.size()));
  must(dir, "compress u16.raw --raw --dtype u16 --shape 2,1,16,16 -o u16.dcz -q");
  must(dir, "decompress u16.dcz -o u16.npy -q");
  const auto n = load_npy(dir.file("u16.npy"));
  EXPECT_EQ(n.header.type.native_descr(), "<u2");
  EXPECT_EQ(n.header.shape, (std::vector<u64>{2, 1, 16, 16}));
  EXPECT_GT(psnr_of(as_doubles(u16v), n.values, 65535.0), 40.0);
}

TEST(RawCli, RawFromStdinDecodesLikeRawFromAFile) {
  temp_dir dir;
  const auto v = dctchop::test::smooth_f32_nhw(4, 24, 18);
  const auto bytes = as_bytes(v);
  write_bytes(dir.file("f.bin"), std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  must(dir, "compress f.bin --raw --dtype f32 --shape 4,24,18 -o file.dcz -q --chunk-mb 0.001");
  auto p = sh(dir, "cat f.bin | DCTCHOP compress - --raw --dtype f32 --shape 4,24,18 -o pipe.dcz -q "
                   "--chunk-mb 0.001");
  ASSERT_EQ(p.status, 0) << describe(p);
  must(dir, "decompress file.dcz -o file.bin --raw -q");
  must(dir, "decompress pipe.dcz -o pipe.bin --raw -q");
  EXPECT_EQ(read_bytes(dir.file("pipe.bin")), read_bytes(dir.file("file.bin")));
  EXPECT_EQ(read_bytes(dir.file("pipe.bin")).size(), bytes.size());
  // And the whole way through pipes.
  auto q = sh(dir, "cat f.bin | DCTCHOP compress - --raw --dtype f32 --shape 4,24,18 -o - -q "
                   "--chunk-mb 0.001 | DCTCHOP decompress - -o - --raw -q > all.bin");
  ASSERT_EQ(q.status, 0) << describe(q);
  EXPECT_EQ(read_bytes(dir.file("all.bin")), read_bytes(dir.file("file.bin")));
}

TEST(RawBadInput, RawSizeMismatchAndMissingOptionsExitWithTheirCodes) {
  temp_dir dir;
  write_bytes(dir.file("f.bin"), std::string(4 * 24 * 18 * 4, '\0'));
  write_bytes(dir.file("f.h5"), std::string(4 * 24 * 18 * 4, '\0'));
  check_bad_cases(dir, {
      {"compress f.bin --raw --dtype f32 --shape 4,24,19 -o out.dcz", 3, {"f.bin", "6912", "7296"}},
      {"compress f.bin --raw --dtype u16 --shape 4,24,18 -o out.dcz", 3, {"f.bin"}},
      {"compress f.bin --raw --shape 4,24,18 -o out.dcz", 2, {"--dtype"}},
      {"compress f.bin --raw --dtype f32 -o out.dcz", 2, {"--shape"}},
      {"compress f.bin --raw --dtype f32 --shape 4,x,18 -o out.dcz", 2, {"--shape"}},
      {"compress missing.bin --raw --dtype f32 --shape 4,24,18 -o out.dcz", 5, {"missing.bin"}},
      {"eval f.bin --raw --dtype f32 --shape 4,24,19 -q", 3, {"f.bin"}},
      // A dataset's name given with --raw (the whole text is a path; no such file is there).
      {"compress f.h5:/x --raw --dtype f32 --shape 4,24,18 -o out.dcz", 2,
       {"f.h5:/x: --raw reads this path as it is, and there is no such file; without --raw it "
        "names the dataset /x of f.h5"}},
      // ... and one that names no dataset either: no such file.
      {"compress nofile.h5: --raw --dtype f32 --shape 4,24,18 -o out.dcz", 5, {"nofile.h5:"}},
  });
  // --dtype without --raw is a usage error (CLI11's message may span lines).
  auto r = cli(dir, "compress f.bin --dtype f32 --shape 4,24,18 -o out.dcz");
  EXPECT_EQ(r.status, 2) << describe(r);
  auto u = cli(dir, "compress f.bin --raw --dtype u64 --shape 4,24,18 -o out.dcz");
  EXPECT_EQ(u.status, 2) << describe(u);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"f.bin", "f.h5"}));
}

TEST(RawBadInput, ShortOrLongRawStreamOnStdinExits3AndLeavesNoOutput) {
  temp_dir dir;
  write_bytes(dir.file("short.bin"), std::string(4 * 24 * 18 * 4 - 10, '\1'));
  write_bytes(dir.file("long.bin"), std::string(4 * 24 * 18 * 4 + 10, '\1'));
  write_bytes(dir.file("empty.bin"), "");
  struct want { const char* name; const char* says; };
  for (auto w : {want{"short.bin", "truncated"}, want{"long.bin", "more data"},
                 want{"empty.bin", "empty (0 bytes)"}}) {
    const std::string name = w.name;
    auto r = sh(dir, "cat " + name + " | DCTCHOP compress - --raw --dtype f32 --shape 4,24,18 -o out.dcz");
    EXPECT_EQ(r.status, 3) << name << "\n" << describe(r);
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "stdin")) << r.err;
    EXPECT_TRUE(contains(r.err, w.says)) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.dcz"))) << name;
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"empty.bin", "long.bin", "short.bin"}));
}

TEST(Hdf5Cli, LabelsOutNamingADatasetOfTheHdf5OutputPutsTheLabelsThere) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  must(dir, "compress t.h5:/train/images --labels t.h5:/train/labels -o a.dcz -q");
  must(dir, "decompress a.dcz -o out.h5:/x -q --labels-out out.h5:/y/labels");
  {
    auto f = h5_open(dir.file("out.h5"));
    EXPECT_TRUE(h5_exists(f.get(), "/x"));
    ASSERT_TRUE(h5_exists(f.get(), "/y/labels"));
    EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/y/labels"), k_labels);
    EXPECT_FALSE(h5_exists(f.get(), "/labels")) << "the labels are where --labels-out says";
  }
  // The same file named another way (the output does not exist yet to compare inodes).
  must(dir, "decompress a.dcz -o three.h5 -q --labels-out ./three.h5:/y");
  {
    auto f = h5_open(dir.file("three.h5"));
    ASSERT_TRUE(h5_exists(f.get(), "/y"));
    EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/y"), k_labels);
  }
  // The file alone: the labels go to /labels beside the data, as without --labels-out.
  must(dir, "decompress a.dcz -o two.h5 -q --labels-out two.h5");
  {
    auto f = h5_open(dir.file("two.h5"));
    EXPECT_EQ(h5_read<std::int64_t>(f.get(), "/labels"), k_labels);
  }
  // The data's own dataset, or one inside it, cannot take the labels.
  for (const char* clash : {"-o c.h5:/data --labels-out c.h5:/data", "-o c.h5 --labels-out c.h5:/data",
                            "-o c.h5:/g --labels-out c.h5:/g/l"}) {
    auto r = cli(dir, std::string("decompress a.dcz ") + clash);
    EXPECT_EQ(r.status, 2) << clash << "\n" << describe(r);
  }
  // An NPY output and labels in the same file stay refused.
  auto npy = cli(dir, "decompress a.dcz -o o.npy --labels-out o.npy");
  EXPECT_EQ(npy.status, 2) << describe(npy);
  EXPECT_FALSE(std::filesystem::exists(dir.file("c.h5")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.npy")));
}

TEST(Hdf5Cli, JsonReportWithAChosenDatasetKeepsTheNoteInsideIt) {
  temp_dir dir;
  make_train_file(dir.file("t.h5"));
  // With -o -, the report shares stderr with the messages: it must be the only thing there.
  auto c = sh(dir, "DCTCHOP compress t.h5 -o - --json > a.dcz");
  ASSERT_EQ(c.status, 0) << describe(c);
  const json j = parse_json(c.err);
  ASSERT_TRUE(j.contains("notes") && j["notes"].is_array()) << c.err;
  bool named = false;
  for (const auto& n : j["notes"]) named |= contains(n.get<std::string>(), "using dataset /train/images");
  EXPECT_TRUE(named) << c.err;
}

TEST(Hdf5Cli, Uint32AndInt32DatasetsCompressWithF32CoefficientsAndComeBackAsTheirType) {
  // Detector counts: a big-endian uint32 dataset (as HDF5 files from other machines hold
  // them) and a little-endian int32 one, spread over most of their range. Offset the first
  // sample's mean, f32 coefficients (f16's range is far too small), R = 2^32 - 1; at chop 8
  // every value within f32's precision of the coefficients, 8 * 8 * 2^31 * 2^-24.
  temp_dir dir;
  constexpr u64 n = 2, h = 20, w = 18;
  std::vector<std::uint32_t> u(n * h * w);
  std::vector<std::int32_t> s(u.size());
  for (u64 i = 0; i < u.size(); ++i) {
    u[i] = static_cast<std::uint32_t>((i * 2654435761u) % 4000000000u + (i % 7 == 0 ? 294967295u : 0u));
    s[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(u[i]) - 2147483648LL);
  }
  {
    auto f = h5_create(dir.file("d.h5"));
    h5_write(f.get(), "/counts", H5T_STD_U32BE, {n, h, w}, u);
    h5_write(f.get(), "/signed", H5T_STD_I32LE, {n, h, w}, s);
  }
  for (const char* name : {"counts", "signed"}) {
    const bool unsigned_ = std::string(name) == "counts";
    SCOPED_TRACE(name);
    auto c = cli(dir, std::string("compress d.h5:/") + name + " -o " + name + ".dcz --chop 8 -q && " +
                          test::dctchop_bin() + " info " + name + ".dcz --json && " +
                          test::dctchop_bin() + " decompress " + name + ".dcz -o " + name +
                          "_back.h5:/back -q && " + test::dctchop_bin() + " verify " + name +
                          ".dcz --against d.h5:/" + name + " --min-psnr 100 -q");
    ASSERT_EQ(c.status, 0) << describe(c);
    const auto j = parse_json(c.out);
    EXPECT_EQ(j.at("dtype"), unsigned_ ? "u32" : "i32");
    EXPECT_EQ(j.at("codec").at("coeff"), "f32");
    double mean = 0;
    for (u64 i = 0; i < h * w; ++i) mean += unsigned_ ? double(u[i]) : double(s[i]);
    EXPECT_EQ(j.at("codec").at("offset").get<double>(), mean / double(h * w));
    EXPECT_EQ(j.at("quality").at("range"), 4294967295.0);
    auto f = h5_open(dir.file(std::string(name) + "_back.h5"));
    const auto info = h5_describe(f.get(), "/back");
    EXPECT_EQ(info.cls, H5T_INTEGER);
    EXPECT_EQ(info.size, 4u);
    EXPECT_EQ(info.sign, unsigned_ ? H5T_SGN_NONE : H5T_SGN_2);
    EXPECT_EQ(info.shape, (std::vector<u64>{n, h, w}));
    double worst = 0;
    if (unsigned_) {
      const auto back = h5_read<std::uint32_t>(f.get(), "/back");
      for (u64 i = 0; i < u.size(); ++i) worst = std::max(worst, std::fabs(double(back[i]) - double(u[i])));
    } else {
      const auto back = h5_read<std::int32_t>(f.get(), "/back");
      for (u64 i = 0; i < s.size(); ++i) worst = std::max(worst, std::fabs(double(back[i]) - double(s[i])));
    }
    EXPECT_GT(worst, 0.0) << "f32 coefficients hold 24 bits: not lossless at this range";
    EXPECT_LE(worst, 8192.0);
  }
  // The same counts as raw binary, read as --dtype uint32, give the same archive data.
  auto r = cli(dir, "decompress counts.dcz -o c.npy -q && " + test::dctchop_bin() +
                        " compress c.npy -o c2.dcz --chop 8 --json -q");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out).at("dtype"), "u32");
  const auto back = test::load_npy(dir.file("c.npy"));
  EXPECT_EQ(back.header.type.native_descr(), "<u4");
  {
    std::string raw(u.size() * 4, '\0');
    std::memcpy(raw.data(), u.data(), raw.size());
    write_bytes(dir.file("c.bin"), raw);
  }
  auto rb = cli(dir, "compress c.bin --raw --dtype uint32 --shape 2,20,18 -o c3.dcz --chop 8 -q && " +
                         test::dctchop_bin() + " verify c3.dcz --against d.h5:/counts --json");
  ASSERT_EQ(rb.status, 0) << describe(rb);
  EXPECT_EQ(parse_json(rb.out).at("passed"), true);
}

TEST(Hdf5Cli, AFloat16DatasetCompressesAndDecompressesAsFloat16) {
  // h5py's float16 (a 2-byte IEEE float, no predefined HDF5 type) is data like any other: f16
  // in the archive, f16 again in a decompressed HDF5 file, the values within f16's precision
  // at chop 8 of 8.
  temp_dir dir;
  constexpr u64 n = 2, h = 12, cols = 10;
  std::vector<float> v(n * h * cols);
  for (u64 i = 0; i < v.size(); ++i) {
    // values that f16 holds exactly: multiples of 1/8 up to 200
    v[i] = static_cast<float>(static_cast<int>((i * 37) % 1601) - 800) / 8.0f;
  }
  {
    // h5py writes float16 as a 2-byte IEEE float; make one from f32 by changing the size.
    auto f = h5_create(dir.file("h.h5"));
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    ASSERT_GE(H5Tset_fields(t, 15, 10, 5, 0, 10), 0);
    ASSERT_GE(H5Tset_size(t, 2), 0);
    ASSERT_GE(H5Tset_ebias(t, 15), 0);
    const hsize_t dims[3] = {n, h, cols};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t d = H5Dcreate2(f.get(), "/half", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(t);
  }
  auto c = cli(dir, "compress h.h5:/half -o a.dcz --chop 8 -q && " + test::dctchop_bin() +
                        " info a.dcz --json && " + test::dctchop_bin() +
                        " decompress a.dcz -o out.h5:/back -q");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(parse_json(c.out).at("dtype"), "f16");
  EXPECT_EQ(parse_json(c.out).at("codec").at("coeff"), "f32");  // a float input's default
  auto f = h5_open(dir.file("out.h5"));
  const auto info = h5_describe(f.get(), "/back");
  EXPECT_EQ(info.cls, H5T_FLOAT);
  EXPECT_EQ(info.size, 2u);
  EXPECT_EQ(info.shape, (std::vector<u64>{n, h, cols}));
  const auto back = h5_read<float>(f.get(), "/back");
  ASSERT_EQ(back.size(), v.size());
  for (u64 i = 0; i < v.size(); ++i) {
    // rounded to f16 (half an ulp: 2^-11 of the value) after an f32 transform
    EXPECT_NEAR(back[i], v[i], std::ldexp(std::fabs(v[i]), -11) + 1e-3) << i;
  }
  // NumPy's "<u8" is uint64, dctchop's u8 uint8: the refusal says uint64, not "<u8".
  {
    formats::npy_dtype u64t;
    u64t.kind = 'u';
    u64t.itemsize = 8;
    auto npy = formats::npy_writer::create(dir.file("w.npy"), u64t, {2, 8, 8}, false);
    const std::vector<std::uint64_t> v(2 * 8 * 8, 7);
    npy.write_rows(v.data(), 2);
    npy.finish();
  }
  auto w = cli(dir, "compress w.npy -o w.dcz");
  EXPECT_EQ(w.status, 3) << describe(w);
  EXPECT_TRUE(contains(w.err, "w.npy: dtype uint64 is not supported; dctchop compresses int8, "
                              "uint8, int16, uint16, int32, uint32, float16, float32, float64 "
                              "arrays")) << w.err;
}


// ---------------------------------------------------------------- compression filters

/** The filter ids of a dataset's pipeline, in the order they were applied. */
std::vector<H5Z_filter_t> h5_filters(hid_t file, const std::string& name) {
  h5 d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + name);
  h5 dcpl(H5Dget_create_plist(d.get()), H5Pclose, "dcpl");
  std::vector<H5Z_filter_t> ids;
  for (int i = 0; i < H5Pget_nfilters(dcpl.get()); ++i) {
    unsigned flags = 0, config = 0;
    std::size_t n = 0;
    ids.push_back(H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &n, nullptr, 0,
                                 nullptr, &config));
  }
  return ids;
}

/** The filter masks of a chunked dataset's chunks: bit i set where filter i was skipped. */
std::vector<unsigned> h5_chunk_masks(hid_t file, const std::string& name) {
  h5 d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + name);
  h5 space(H5Dget_space(d.get()), H5Sclose, "space");
  hsize_t n = 0;
  h5_check(H5Dget_num_chunks(d.get(), space.get(), &n), "chunks of " + name);
  std::vector<unsigned> masks;
  for (hsize_t i = 0; i < n; ++i) {
    std::vector<hsize_t> offset(8);
    unsigned mask = 0;
    haddr_t at = 0;
    hsize_t size = 0;
    h5_check(H5Dget_chunk_info(d.get(), space.get(), i, offset.data(), &mask, &at, &size), "chunk");
    masks.push_back(mask);
  }
  return masks;
}

using filter_list = std::vector<std::pair<H5Z_filter_t, std::vector<unsigned>>>;

/** An empty chunked dataset whose pipeline is `filters` (each optional, with its client values),
 *  in the order given. */
h5 h5_create_chunked(hid_t file, const std::string& name, hid_t type, const std::vector<u64>& shape,
                     const std::vector<u64>& chunk, const filter_list& filters,
                     unsigned chunk_options = 0) {
  std::vector<hsize_t> dims(shape.begin(), shape.end()), c(chunk.begin(), chunk.end());
  h5 space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "space");
  h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
  h5_check(H5Pset_chunk(dcpl.get(), static_cast<int>(c.size()), c.data()), "chunk");
  if (chunk_options != 0) h5_check(H5Pset_chunk_opts(dcpl.get(), chunk_options), "chunk options");
  for (const auto& [id, cd] : filters) {
    h5_check(H5Pset_filter(dcpl.get(), id, H5Z_FLAG_OPTIONAL, cd.size(), cd.data()), "filter");
  }
  return h5(H5Dcreate2(file, name.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
            H5Dclose, "create " + name);
}

/** A chunked dataset of `data` with the given pipeline, written through HDF5's filters (and
 *  dctchop's LZF and zstd, registered in this process). `only_rows` > 0 writes only that
 *  many leading rows: the chunks after them are never allocated. */
template <typename T>
void h5_write_filtered(hid_t file, const std::string& name, hid_t type, const std::vector<u64>& shape,
                       const std::vector<u64>& chunk, const std::vector<T>& data,
                       const filter_list& filters,
                       u64 only_rows = 0, unsigned chunk_options = 0) {
  h5 d = h5_create_chunked(file, name, type, shape, chunk, filters, chunk_options);
  if (only_rows == 0) {
    h5_check(H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "write");
    return;
  }
  std::vector<hsize_t> start(shape.size(), 0), count(shape.begin(), shape.end());
  count[0] = only_rows;
  h5 fs(H5Dget_space(d.get()), H5Sclose, "file space");
  h5_check(H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
           "rows");
  h5 ms(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose, "mem");
  h5_check(H5Dwrite(d.get(), native_type<T>(), ms.get(), fs.get(), H5P_DEFAULT, data.data()), "write rows");
}

/** A chunked dataset of `shape` (u8, or `type` of as many bytes per row) whose pipeline is
 *  filter `id` (optional, client values `cd`), with each chunk along axis 0 (extent 1) stored
 *  as the bytes encode(chunk's values) returns,
 *  written straight to the file (H5Dwrite_chunk): neither dctchop's filters nor any plugin
 *  makes them. */
template <typename Encode>
void h5_write_encoded(hid_t file, const std::string& name, const std::vector<u64>& shape,
                      const std::vector<std::uint8_t>& data, H5Z_filter_t id,
                      const std::vector<unsigned>& cd, Encode encode, hid_t type = H5T_STD_U8LE) {
  std::vector<u64> chunk = shape;
  chunk[0] = 1;
  h5 d = h5_create_chunked(file, name, type, shape, chunk, {{id, cd}});
  const u64 per = data.size() / shape[0];
  for (u64 i = 0; i < shape[0]; ++i) {
    const std::vector<std::uint8_t> part(data.begin() + static_cast<std::ptrdiff_t>(i * per),
                                         data.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
    const std::vector<std::uint8_t> bytes = encode(part, i);
    std::vector<hsize_t> at(shape.size(), 0);
    at[0] = i;
    h5_check(H5Dwrite_chunk(d.get(), H5P_DEFAULT, 0, at.data(), bytes.size(), bytes.data()),
             "write chunk of " + name);
  }
}

std::vector<std::uint8_t> zstd_frame(const std::vector<std::uint8_t>& v, bool with_size) {
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> c(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(c.get(), ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(c.get(), ZSTD_c_contentSizeFlag, with_size ? 1 : 0);
  std::vector<std::uint8_t> out(ZSTD_compressBound(v.size()));
  const std::size_t n = ZSTD_compress2(c.get(), out.data(), out.size(), v.data(), v.size());
  if (ZSTD_isError(n)) throw std::runtime_error("test: ZSTD_compress2 failed");
  out.resize(n);
  if (ZSTD_getFrameContentSize(out.data(), out.size()) !=
      (with_size ? v.size() : ZSTD_CONTENTSIZE_UNKNOWN)) {
    throw std::runtime_error("test: the zstd frame does not record its size as asked");
  }
  return out;
}

/** Chunk bytes in the LZ4 filter's framing (HDF5's H5Zlz4.c): the total size and the block
 *  size, big-endian, then each block's stored size and its bytes, compressed by liblz4, or as
 *  they are where LZ4 cannot shrink them. */
std::vector<std::uint8_t> lz4_framed(const std::vector<std::uint8_t>& v, std::uint32_t block) {
  std::vector<std::uint8_t> out;
  auto put = [&](std::uint64_t x, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(x >> (8 * i)));
  };
  put(v.size(), 8);
  put(block, 4);
  for (std::size_t at = 0; at < v.size(); at += block) {
    const int size = static_cast<int>(std::min<std::size_t>(block, v.size() - at));
    std::vector<char> c(static_cast<std::size_t>(LZ4_compressBound(size)));
    const int n = LZ4_compress_default(reinterpret_cast<const char*>(v.data() + at), c.data(), size,
                                       static_cast<int>(c.size()));
    if (n <= 0) throw std::runtime_error("test: LZ4_compress_default failed");
    if (n >= size) {
      put(static_cast<std::uint64_t>(size), 4);
      out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(at),
                 v.begin() + static_cast<std::ptrdiff_t>(at) + size);
    } else {
      put(static_cast<std::uint64_t>(n), 4);
      out.insert(out.end(), c.begin(), c.begin() + n);
    }
  }
  return out;
}

std::vector<std::uint8_t> lzf_block(const std::vector<std::uint8_t>& v) {
  std::vector<std::uint8_t> out(v.size());
  const unsigned n = lzf_compress(v.data(), static_cast<unsigned>(v.size()), out.data(),
                                  static_cast<unsigned>(out.size()));
  if (n == 0) throw std::runtime_error("test: lzf_compress found the data incompressible");
  out.resize(n);
  return out;
}

/** u8 NHWC images of flat 4x4 tiles: repeats that LZF finds (it leaves smooth gradients and
 *  noise as they are, as chunks it cannot shrink). */
std::vector<std::uint8_t> tiled_u8_nhwc(int n, int h, int w, int c) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n) * h * w * c);
  std::size_t i = 0;
  for (int s = 0; s < n; ++s)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int k = 0; k < c; ++k) v[i++] = static_cast<std::uint8_t>((x / 4) * 21 + (y / 4) * 13 + k * 40 + s * 7);
  return v;
}

const std::string k_filters_h5 = std::string(DCTCHOP_SAMPLE_DIR) + "/hdf5/filters.h5";

/** A copy of filters.h5 at `path` whose /gzip_shuffle has 16 bytes changed in the middle of
 *  its second chunk (rows 2 and 3): zlib's checksum of that deflate stream fails. */
void damage_second_gzip_chunk(const std::string& path) {
  std::filesystem::copy_file(k_filters_h5, path);
  haddr_t at = 0;
  hsize_t size = 0;
  {
    auto f = h5_open(path);
    h5 d(H5Dopen2(f.get(), "/gzip_shuffle", H5P_DEFAULT), H5Dclose, "open");
    h5 space(H5Dget_space(d.get()), H5Sclose, "space");
    unsigned mask = 0;
    std::vector<hsize_t> offset(4);
    h5_check(H5Dget_chunk_info(d.get(), space.get(), 1, offset.data(), &mask, &at, &size),
             "chunk info");
    if (offset[0] != 2 || size < 40) throw std::runtime_error("test: filters.h5 is not as expected");
  }
  auto bytes = read_bytes(path);
  for (hsize_t i = size / 2; i < size / 2 + 16; ++i) bytes[at + i] = static_cast<char>(bytes[at + i] ^ 0x5a);
  write_bytes(path, bytes);
}

TEST(Hdf5Filters, DatasetsThatH5pyWroteWithEachFilterReadAsTheirUnfilteredCopy) {
  // sample_data/hdf5/filters.h5 (make_filters.py): the same values stored with the filters
  // of HDF5 itself, h5py's LZF and the Debian plugins of hdf5plugin's filters.
  struct filtered {
    std::string name;
    std::vector<H5Z_filter_t> filters;
  };
  const std::vector<filtered> u8_sets = {
      {"gzip_shuffle", {H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE}},
      {"lzf", {32000}},
      {"lzf_shuffle", {H5Z_FILTER_SHUFFLE, 32000}},
      {"blosc_lz4", {32001}},
      {"blosc_zstd", {32001}},
      {"lz4", {32004}},
      {"bzip2", {307}},
      {"fletcher32", {H5Z_FILTER_FLETCHER32}},
      {"scaleoffset", {H5Z_FILTER_SCALEOFFSET}},
      {"szip", {H5Z_FILTER_SZIP}},
  };
  const std::vector<filtered> f32_sets = {
      {"f32_lzf", {H5Z_FILTER_SHUFFLE, 32000}},
      {"f32_zfp_reversible", {32013}},
  };
  std::vector<std::byte> raw_u8, raw_f32;
  {
    auto f = h5_open(k_filters_h5);
    const auto u8 = h5_read<std::uint8_t>(f.get(), "/raw_u8");
    ASSERT_EQ(u8.size(), 4u * 12 * 12 * 3);
    ASSERT_GT(*std::max_element(u8.begin(), u8.end()) - *std::min_element(u8.begin(), u8.end()), 100);
    raw_u8 = as_bytes(u8);
    raw_f32 = as_bytes(h5_read<float>(f.get(), "/raw_f32"));
    ASSERT_EQ(raw_f32.size(), 3u * 12 * 12 * 4);
    EXPECT_TRUE(h5_filters(f.get(), "/raw_u8").empty());
    for (const auto& sets : {u8_sets, f32_sets}) {
      for (const auto& d : sets) {  // the file holds what the test claims it does
        ASSERT_EQ(h5_filters(f.get(), "/" + d.name), d.filters) << d.name;
        const auto masks = h5_chunk_masks(f.get(), "/" + d.name);
        ASSERT_FALSE(masks.empty()) << d.name;
        for (auto m : masks) ASSERT_EQ(m, 0u) << d.name << ": a chunk stored without a filter";
      }
    }
  }
  for (const auto& d : u8_sets) {
    auto src = formats::open_dataset(parse_dataset_spec(k_filters_h5 + ":/" + d.name));
    EXPECT_EQ(src->type().native_descr(), "|u1") << d.name;
    EXPECT_EQ(read_all(*src), raw_u8) << d.name;
    const u64 rb = src->row_bytes();
    std::vector<std::byte> part(2 * rb);  // rows 1 and 2: the end of one chunk, the next's start
    src->read_rows(1, 2, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), raw_u8.begin() + static_cast<std::ptrdiff_t>(rb)))
        << d.name;
  }
  for (const auto& d : f32_sets) {
    auto src = formats::open_dataset(parse_dataset_spec(k_filters_h5 + ":/" + d.name));
    EXPECT_EQ(src->type().native_descr(), "<f4") << d.name;
    EXPECT_EQ(read_all(*src), raw_f32) << d.name;
  }
}

TEST(Hdf5Filters, ZstdFramesAndLzfBlocksWithoutARecordedSizeDecode) {
  // Chunks encoded here with libzstd and liblzf and written as they are: frames with and
  // without their content size (HDF Group's filter 32015 writes them with), and LZF blocks
  // under the client values of h5py's filter before its revision 3, which record no size.
  // A 48x48x3 chunk (6,912 bytes) is larger than the first output buffer LZF is given.
  temp_dir dir;
  const std::vector<u64> shape = {3, 48, 48, 3};
  const auto values = tiled_u8_nhwc(3, 48, 48, 3);
  // With an LZF filter registered, HDF5 lets it record the chunk's size when a dataset is
  // made (set_local; dctchop's does, as h5py's does). Files of old h5py versions have none.
  H5Zunregister(32000);
  H5Eclear2(H5E_DEFAULT);
  {
    auto f = h5_create(dir.file("z.h5"));
    h5_write_encoded(f.get(), "/zstd", shape, values, 32015, {3},
                     [](const std::vector<std::uint8_t>& v, u64 i) { return zstd_frame(v, i != 1); });
    h5_write_encoded(f.get(), "/lzf_no_size", shape, values, 32000, {4, 261, 0},
                     [](const std::vector<std::uint8_t>& v, u64) { return lzf_block(v); });
  }
  {
    auto f = h5_open(dir.file("z.h5"));
    h5 d(H5Dopen2(f.get(), "/lzf_no_size", H5P_DEFAULT), H5Dclose, "open");
    h5 dcpl(H5Dget_create_plist(d.get()), H5Pclose, "dcpl");
    unsigned flags = 0, values3[3] = {};
    std::size_t nv = 3;
    h5_check(H5Pget_filter_by_id2(dcpl.get(), 32000, &flags, &nv, values3, 0, nullptr, nullptr),
             "filter values");
    ASSERT_EQ(nv, 3u);
    ASSERT_EQ(values3[2], 0u) << "the file records no chunk size";
  }
  for (const std::string name : {"/zstd", "/lzf_no_size"}) {
    for (unsigned t : {0u, 1u}) {  // HDF5 calling dctchop's filters; dctchop's chunk reader
      auto spec = parse_dataset_spec(dir.file("z.h5") + ":" + name);
      spec.decode_threads = t;
      auto src = formats::open_dataset(spec);
      EXPECT_EQ(read_all(*src), as_bytes(values)) << name << ", decode_threads " << t;
    }  // closed, with the chunks HDF5 holds in its cache for any other open of the dataset
    // Read by another HDF5 user of the process, without dctchop's expected chunk size: the
    // decoders find the size themselves (LZF from 4 KiB up, zstd by streaming).
    auto f = h5_open(dir.file("z.h5"));
    EXPECT_EQ(h5_read<std::uint8_t>(f.get(), name), values) << name;
  }
  // And through the command, whose process has no other decoder of either.
  auto c = cli(dir, "compress z.h5:/zstd -o z.dcz --chop 8 && "
                    + dctchop::test::dctchop_bin() + " decompress z.dcz -o z.npy");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(load_npy(dir.file("z.npy")).raw, as_bytes(values)) << "chop 8 is exact for u8";
}

TEST(Hdf5Filters, Lz4ChunksOfSmallBlocksThatDoNotShrinkReadBothWays) {
  // Noise in LZ4 blocks of 16 bytes (hdf5plugin.LZ4(nbytes=16)): every block stored raw with its
  // 4-byte size, a chunk of 64 KiB stored as 80 KiB. The threaded reader's bound on stored
  // sizes, which refuses a damaged chunk index, must allow it.
  formats::detail::register_builtin_filters();
  temp_dir dir;
  std::vector<std::uint8_t> values(2 * 65536);
  std::mt19937 rng(5);
  for (auto& v : values) v = static_cast<std::uint8_t>(rng() >> 24);
  {
    auto f = h5_create(dir.file("b16.h5"));
    h5_write_filtered(f.get(), "/x", H5T_STD_U8LE, {2, 128, 128, 4}, {1, 128, 128, 4}, values,
                      {{32004, {16}}});
    h5 d(H5Dopen2(f.get(), "/x", H5P_DEFAULT), H5Dclose, "open");
    const hsize_t at[4] = {0, 0, 0, 0};
    hsize_t stored = 0;
    h5_check(H5Dget_chunk_storage_size(d.get(), at, &stored), "chunk size");
    ASSERT_EQ(stored, 12u + 4 * 4096 + 65536) << "every block stored raw";
  }
  for (unsigned t : {0u, 1u, 2u}) {
    auto spec = parse_dataset_spec(dir.file("b16.h5") + ":/x");
    spec.decode_threads = t;
    EXPECT_EQ(read_all(*formats::open_dataset(spec)), as_bytes(values)) << "decode_threads " << t;
  }
}

TEST(Hdf5Filters, DctchopsLzfLz4AndZstdFiltersEncodeWhatTheReferenceLibrariesDecode) {
  // HDF5's filter registry is the process's: another HDF5 user beside dctchop may write with
  // the filters dctchop registers. Its chunks, read raw, are what liblzf and libzstd decode,
  // and for LZ4 the framing of HDF Group's plugin around liblz4's blocks.
  formats::detail::register_builtin_filters();
  temp_dir dir;
  const std::vector<u64> shape = {2, 48, 48, 3};
  auto values = tiled_u8_nhwc(2, 48, 48, 3);
  const u64 per = values.size() / 2;
  std::mt19937 rng(4);  // the last 912 bytes of each chunk noise: LZ4's last block stored raw
  for (u64 i : {per - 912, 2 * per - 912})
    for (u64 j = i; j < i + 912; ++j) values[j] = static_cast<std::uint8_t>(rng() >> 24);
  for (const auto& [id, cd] : filter_list{
           {32000, {}}, {32015, {5}}, {32004, {1000}}, {32004, {}}}) {
    const std::string name = "/f" + std::to_string(id) + (cd.empty() ? "" : "_" + std::to_string(cd[0]));
    {
      auto f = h5_create(dir.file("w.h5"));
      h5_write_filtered(f.get(), name, H5T_STD_U8LE, shape, {1, 48, 48, 3}, values, {{id, cd}});
    }
    auto f = h5_open(dir.file("w.h5"));
    h5 d(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose, "open");
    {
      // LZF's client values as h5py records them: its filter revision, the LZF API version,
      // the chunk's size in bytes.
      h5 dcpl(H5Dget_create_plist(d.get()), H5Pclose, "dcpl");
      unsigned flags = 0, values[4] = {};
      std::size_t nv = 4;
      h5_check(H5Pget_filter_by_id2(dcpl.get(), id, &flags, &nv, values, 0, nullptr, nullptr),
               "filter values");
      const std::vector<unsigned> got(values, values + nv);
      const std::vector<unsigned> want =
          id == 32000 ? std::vector<unsigned>{4, 261, static_cast<unsigned>(per)} : cd;
      EXPECT_EQ(got, want);
    }
    for (u64 i = 0; i < 2; ++i) {
      const hsize_t at[4] = {i, 0, 0, 0};
      hsize_t stored = 0;
      h5_check(H5Dget_chunk_storage_size(d.get(), at, &stored), "chunk size");
      ASSERT_GT(stored, 0u);
      ASSERT_LT(stored, per) << name << ": the chunk was stored compressed";
      std::vector<std::uint8_t> raw(stored), out(per);
      std::uint32_t mask = ~0u;
      h5_check(H5Dread_chunk(d.get(), H5P_DEFAULT, at, &mask, raw.data()), "read chunk");
      EXPECT_EQ(mask, 0u) << name << ": the filter was applied";
      std::size_t n = 0;
      if (id == 32000) {
        n = lzf_decompress(raw.data(), static_cast<unsigned>(raw.size()), out.data(),
                           static_cast<unsigned>(out.size()));
      } else if (id == 32004) {  // blocks of 1000 (the last 912, noise: stored raw), or one
        const std::vector<std::uint8_t> chunk(values.begin() + static_cast<std::ptrdiff_t>(i * per),
                                              values.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
        EXPECT_EQ(raw, lz4_framed(chunk, cd.empty() ? static_cast<std::uint32_t>(per) : cd[0])) << name;
        // ... and liblz4 decodes the blocks, read from the framing here.
        auto be = [&](std::size_t at, int bytes) {
          u64 v = 0;
          for (int k = 0; k < bytes; ++k) v = (v << 8) | raw.at(at + static_cast<std::size_t>(k));
          return v;
        };
        ASSERT_EQ(be(0, 8), per) << name;
        const u64 block = std::min<u64>(be(8, 4), per);
        std::size_t at = 12;
        for (u64 done = 0; done < per; done += block) {
          const u64 size = std::min(block, per - done);
          const u64 stored = be(at, 4);
          at += 4;
          ASSERT_LE(at + stored, raw.size()) << name;
          if (stored == size) {
            std::memcpy(out.data() + done, raw.data() + at, size);
          } else {
            ASSERT_EQ(LZ4_decompress_safe(reinterpret_cast<const char*>(raw.data() + at),
                                          reinterpret_cast<char*>(out.data() + done),
                                          static_cast<int>(stored), static_cast<int>(size)),
                      static_cast<int>(size)) << name;
          }
          at += stored;
        }
        n = at == raw.size() ? per : 0;
      } else {
        EXPECT_EQ(ZSTD_getFrameContentSize(raw.data(), raw.size()), per) << "the frame's size";
        n = ZSTD_decompress(out.data(), out.size(), raw.data(), raw.size());
      }
      ASSERT_EQ(n, per) << name;
      EXPECT_TRUE(std::equal(out.begin(), out.end(), values.begin() + static_cast<std::ptrdiff_t>(i * per)))
          << name << " chunk " << i;
    }
  }
}

TEST(Hdf5Filters, ChunksDecodedOnSeveralThreadsReadExactlyAsHdf5ReadsThem) {
  // Compressed chunks are read as stored and decoded by dctchop, on one thread or several
  // (decode_threads > 0), where HDF5 would decode them one at a time. Every dataset below is read
  // both ways, whole and in row ranges that start and end inside chunks: chunks that split the
  // other axes too, edge chunks that reach past an axis's end, chunks that a filter could not
  // shrink (stored without it), never-written chunks (HDF5's fill value), big-endian values
  // (their bytes swapped by dctchop) and pipelines HDF5 reads alone (fletcher32, scale-offset).
  formats::detail::register_builtin_filters();
  temp_dir dir;
  const filter_list::value_type shuffle{H5Z_FILTER_SHUFFLE, {}},
      gzip{H5Z_FILTER_DEFLATE, {4}}, lzf{32000, {}}, zstd{32015, {3}},
      fletcher{H5Z_FILTER_FLETCHER32, {}};
  auto u8 = tiled_u8_nhwc(7, 20, 18, 3);
  std::mt19937 rng(5);
  for (std::size_t i = 3 * 20 * 18 * 3; i < 4 * 20 * 18 * 3; ++i) {
    u8[i] = static_cast<std::uint8_t>(rng() >> 24);  // image 3 is noise
  }
  const auto u16 = smooth_u16_nchw(5, 2, 20, 18);
  const auto f32 = dctchop::test::smooth_f32_nhw(6, 24, 18);
  {
    auto f = h5_create(dir.file("p.h5"));
    const std::vector<u64> s8 = {7, 20, 18, 3};
    h5_write_filtered(f.get(), "/gzip_shuffle", H5T_STD_U8LE, s8, {3, 20, 18, 3}, u8, {shuffle, gzip});
    h5_write_filtered(f.get(), "/gzip_split", H5T_STD_U8LE, s8, {2, 8, 7, 2}, u8, {gzip});
    h5_write_filtered(f.get(), "/lzf_edges", H5T_STD_U8LE, s8, {1, 16, 16, 3}, u8, {lzf});
    h5_write_filtered(f.get(), "/lzf_noise_raw", H5T_STD_U8LE, s8, {1, 20, 18, 3}, u8, {shuffle, lzf});
    h5_write_filtered(f.get(), "/zstd_partial", H5T_STD_U8LE, s8, {2, 20, 18, 3}, u8, {zstd}, 3);
    h5_write_filtered(f.get(), "/u16_gzip", H5T_STD_U16LE, {5, 2, 20, 18}, {2, 1, 7, 18}, u16, {shuffle, gzip});
    h5_write_filtered(f.get(), "/u16_be_gzip", H5T_STD_U16BE, {5, 2, 20, 18}, {2, 1, 7, 18}, u16, {gzip});
    h5_write_filtered(f.get(), "/f32_zstd", H5T_IEEE_F32LE, {6, 24, 18}, {4, 24, 18}, f32, {shuffle, zstd});
    h5_write_filtered(f.get(), "/f32_be_shuffle_lzf", H5T_IEEE_F32BE, {6, 24, 18}, {4, 24, 18}, f32,
                      {shuffle, lzf});
    h5_write_filtered(f.get(), "/f32_fletcher", H5T_IEEE_F32LE, {6, 24, 18}, {4, 24, 18}, f32, {fletcher, gzip});
    h5_write_filtered(f.get(), "/u16_shuffle_only", H5T_STD_U16LE, {5, 2, 20, 18}, {2, 1, 7, 18}, u16, {shuffle});
    h5_write_filtered(f.get(), "/hw_gzip", H5T_STD_U8LE, {20, 54}, {6, 16},
                      std::vector<std::uint8_t>(u8.begin(), u8.begin() + 20 * 54), {gzip});
  }
  {
    // Edge chunks stored without their filters (a newer-format option whose chunks' filter
    // masks do not say so): HDF5 reads those.
    h5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "fapl");
    h5_check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "libver");
    h5 f(H5Fcreate(dir.file("q.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, "create q.h5");
    h5_write_filtered(f.get(), "/u16_partial_raw", H5T_STD_U16LE, {5, 2, 20, 18}, {2, 1, 7, 18}, u16,
                      {shuffle, gzip}, 0, H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS);
  }
  {
    auto f = h5_open(dir.file("p.h5"));
    const auto masks = h5_chunk_masks(f.get(), "/lzf_noise_raw");
    ASSERT_EQ(masks.size(), 7u);
    EXPECT_EQ(masks[3], 2u) << "the noisy image's chunk was stored without LZF";
    EXPECT_EQ(masks[0], 0u);
    EXPECT_EQ(h5_chunk_masks(f.get(), "/zstd_partial").size(), 2u) << "chunks 2 and 3 never written";
  }
  // Each dataset with its filters and whether dctchop decodes its chunks (else HDF5 does: a
  // type HDF5 converts, fletcher32, shuffle alone, edge chunks stored unfiltered).
  struct read_case {
    std::string name, filters;
    bool by_dctchop;
  };
  for (const auto& [name, filters, by_dctchop] : std::vector<read_case>{
           {"p.h5:/gzip_shuffle", "shuffle, deflate", true},
           {"p.h5:/gzip_split", "deflate", true},
           {"p.h5:/lzf_edges", "lzf", true},
           {"p.h5:/lzf_noise_raw", "shuffle, lzf", true},
           {"p.h5:/zstd_partial", "zstd", true},
           {"p.h5:/u16_gzip", "shuffle, deflate", true},
           {"p.h5:/u16_be_gzip", "deflate", true},  // big-endian: swapped by dctchop
           {"p.h5:/f32_zstd", "shuffle, zstd", true},
           {"p.h5:/f32_be_shuffle_lzf", "shuffle, lzf", true},
           {"p.h5:/f32_fletcher", "fletcher32, deflate", false},
           {"p.h5:/u16_shuffle_only", "shuffle", false},
           {"p.h5:/hw_gzip", "deflate", true},
           {"q.h5:/u16_partial_raw", "shuffle, deflate", false}}) {
    auto spec = parse_dataset_spec(dir.file(name));
    spec.decode_threads = 0;  // HDF5 undoes the filters
    auto hdf5 = formats::open_dataset(spec);
    const std::string by_hdf5 = "HDF5 (" + filters + ", decoded by HDF5 on one thread)";
    EXPECT_EQ(hdf5->reader(), by_hdf5) << name;
    const u64 rb = hdf5->row_bytes(), rows = hdf5->rows();
    const auto whole = read_all(*hdf5);
    for (unsigned t : {1u, 3u}) {
      spec.decode_threads = t;
      auto threads = formats::open_dataset(spec);
      // The comparisons below would pass as well if HDF5 read everything: this says who did.
      EXPECT_EQ(threads->reader(), by_dctchop ? "HDF5 chunks (" + filters + ") decoded by dctchop on " +
                                                    std::to_string(t) + (t == 1 ? " thread" : " threads")
                                              : by_hdf5)
          << name;
      ASSERT_EQ(read_all(*threads), whole) << name << ", " << t << " threads";
      for (auto [first, count] : std::vector<std::pair<u64, u64>>{{1, 3}, {2, 1}, {0, rows}, {rows - 2, 2}, {3, 2}}) {
        std::vector<std::byte> part(count * rb, std::byte{0x5a});
        threads->read_rows(first, count, part.data());
        EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + static_cast<std::ptrdiff_t>(first * rb)))
            << name << " rows " << first << "+" << count << ", " << t << " threads";
      }
    }
  }
  auto plain = parse_dataset_spec(dir.file("p.h5") + ":/u16_gzip");
  plain.decode_threads = 0;
  EXPECT_EQ(read_all(*formats::open_dataset(plain)), as_bytes(u16)) << "and HDF5 reads what was written";
}

TEST(Hdf5Filters, ADamagedChunkDecodedOnSeveralThreadsIsBadInputNamingItsRow) {
  temp_dir dir;
  damage_second_gzip_chunk(dir.file("f.h5"));
  auto spec = parse_dataset_spec(dir.file("f.h5") + ":/gzip_shuffle");
  spec.decode_threads = 2;
  auto src = formats::open_dataset(spec);
  std::vector<std::byte> rows(2 * src->row_bytes());
  src->read_rows(0, 2, rows.data());  // the first chunk is sound
  expect_error([&] { read_all(*src); }, errc::bad_input,
               {"f.h5:/gzip_shuffle", "rows 0..3", "does not decode", "the chunk at row 2", "damaged"});
  // LZF and zstd chunks take the same path; of two damaged chunks the first is named.
  {
    const std::vector<std::uint8_t> nines(6 * 64, 9);
    auto f = h5_create(dir.file("z.h5"));
    auto broken = [](std::vector<u64> bad, auto encode) {
      return [bad, encode](const std::vector<std::uint8_t>& v, u64 i) {
        return std::find(bad.begin(), bad.end(), i) != bad.end() ? v : encode(v);
      };
    };
    h5_write_encoded(f.get(), "/zstd", {6, 8, 8}, nines, 32015, {3},
                     broken({3, 1}, [](const std::vector<std::uint8_t>& v) { return zstd_frame(v, true); }));
    h5_write_encoded(f.get(), "/lzf", {6, 8, 8}, nines, 32000, {4, 261, 64},
                     broken({4}, [](const std::vector<std::uint8_t>& v) { return lzf_block(v); }));
  }
  for (const auto& [name, row] : std::vector<std::pair<std::string, std::string>>{{"/zstd", "1"}, {"/lzf", "4"}}) {
    auto z = parse_dataset_spec(dir.file("z.h5") + ":" + name);
    z.decode_threads = 2;
    auto zs = formats::open_dataset(z);
    expect_error([&] { read_all(*zs); }, errc::bad_input, {name, "the chunk at row " + row + ")"});
  }
}

TEST(Hdf5Filters, CompressingAFilteredDatasetGivesTheArchiveOfItsUnfilteredCopy) {
  temp_dir dir;
  for (const std::string name : {"raw_u8", "lzf_shuffle", "blosc_lz4"}) {
    auto c = cli(dir, "compress " + sh_quote(k_filters_h5 + ":/" + name) + " -o " + name +
                          ".dcz -q && " + dctchop::test::dctchop_bin() + " decompress " + name +
                          ".dcz -o " + name + ".npy -q");
    ASSERT_EQ(c.status, 0) << name << "\n" << describe(c);
  }
  const auto raw = read_bytes(dir.file("raw_u8.npy"));
  EXPECT_EQ(read_bytes(dir.file("lzf_shuffle.npy")), raw);
  EXPECT_EQ(read_bytes(dir.file("blosc_lz4.npy")), raw);
}

TEST(Hdf5Filters, CompressSaysWhoDecodedTheChunksInItsReportAndLastLine) {
  // h5py's files: LZF after shuffle and gzip on the codec's threads, blosc by its HDF5 plugin,
  // an unfiltered dataset by HDF5. The last line of the report says the same.
  temp_dir dir;
  for (const auto& [name, reader] : std::vector<std::pair<std::string, std::string>>{
           {"lzf_shuffle", "HDF5 chunks (shuffle, lzf) decoded by dctchop on 2 threads"},
           {"gzip_shuffle", "HDF5 chunks (shuffle, deflate) decoded by dctchop on 2 threads"},
           {"blosc_lz4", "HDF5 (blosc, decoded by HDF5 on one thread)"},
           {"raw_u8", "HDF5"}}) {
    const std::string in = sh_quote(k_filters_h5 + ":/" + name);
    auto c = cli(dir, "compress " + in + " -o x.dcz -f --threads 2 --json");
    ASSERT_EQ(c.status, 0) << name << "\n" << describe(c);
    EXPECT_EQ(nlohmann::json::parse(c.out).value("reader", ""), reader) << name;
    auto t = cli(dir, "compress " + in + " -o x.dcz -f --threads 2");
    ASSERT_EQ(t.status, 0) << name << "\n" << describe(t);
    EXPECT_NE(t.err.find("dctchop:   read: " + reader + "\n"), std::string::npos) << describe(t);
  }
}

TEST(Hdf5Filters, AFilterThatCannotBeLoadedIsBadInputNamingItAndWhatProvidesIt) {
  // With an empty plugin folder HDF5 finds no blosc plugin: dctchop says so when it opens the
  // dataset, before any output exists. An unregistered id is named by number. LZF and
  // Zstandard need no plugin.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("odd.h5"));
    h5_write_encoded(f.get(), "/odd", {2, 8, 8}, std::vector<std::uint8_t>(128, 9), 32999, {},
                     [](const std::vector<std::uint8_t>& v, u64) { return v; });
  }
  std::filesystem::create_directory(dir.file("no_plugins"));
  const std::string env = "HDF5_PLUGIN_PATH=" + sh_quote(dir.file("no_plugins")) + " ";
  const auto before = dir.entries();
  struct refused {
    std::string input;
    std::vector<std::string> names;
  };
  for (const auto& r : std::vector<refused>{
           {sh_quote(k_filters_h5 + ":/blosc_lz4"),
            {"filters.h5:/blosc_lz4", "32001 (blosc)", "hdf5-filter-plugin-blosc-serial"}},
           {sh_quote(k_filters_h5 + ":/bzip2"), {"/bzip2", "307 (bzip2)", "hdf5-filter-plugin"}},
           {"odd.h5:/odd", {"odd.h5:/odd", "filter 32999", "HDF5_PLUGIN_PATH"}}}) {
    auto c = sh(dir, env + "DCTCHOP compress " + r.input + " -o out.dcz");
    EXPECT_EQ(c.status, 3) << r.input << "\n" << describe(c);
    EXPECT_EQ(count_lines(c.err), 1u) << c.err;
    for (const auto& n : r.names) EXPECT_TRUE(contains(c.err, n)) << "lacks " << n << ": " << c.err;
    EXPECT_EQ(dir.entries(), before) << r.input << " left files behind";
  }
  for (const std::string name : {"lzf", "lz4"}) {  // dctchop's own filters need no plugin
    auto ok = sh(dir, env + "DCTCHOP compress " + sh_quote(k_filters_h5 + ":/" + name) + " -o " +
                          name + ".dcz -q");
    EXPECT_EQ(ok.status, 0) << name << "\n" << describe(ok);
  }
  // Blosc is optional, and every chunk of this dataset was stored without it (its filter
  // mask says so): it reads without the plugin, as its unfiltered copy does.
  {
    auto f = h5_open(k_filters_h5);
    ASSERT_EQ(h5_filters(f.get(), "/noise_blosc_stored_raw"), std::vector<H5Z_filter_t>{32001});
    for (auto m : h5_chunk_masks(f.get(), "/noise_blosc_stored_raw")) ASSERT_EQ(m, 1u);
  }
  for (const std::string name : {"noise_blosc_stored_raw", "noise_u8"}) {
    auto c = sh(dir, env + "DCTCHOP compress " + sh_quote(k_filters_h5 + ":/" + name) + " -o " +
                         name + ".dcz --chop 8 -q && DCTCHOP decompress " + name + ".dcz -o " +
                         name + ".npy -q");
    ASSERT_EQ(c.status, 0) << name << "\n" << describe(c);
  }
  EXPECT_EQ(read_bytes(dir.file("noise_blosc_stored_raw.npy")), read_bytes(dir.file("noise_u8.npy")));
  // A first chunk stored without blosc and a second stored with it (this process loads the
  // plugin to write them): the dataset opens, and the read of the second chunk stops the
  // command with the same message.
  {
    auto values = tiled_u8_nhwc(2, 12, 12, 3);
    std::mt19937 rng(9);
    for (std::size_t i = 0; i < values.size() / 2; ++i) values[i] = static_cast<std::uint8_t>(rng() >> 24);
    auto f = h5_create(dir.file("mixed.h5"));
    h5_write_filtered(f.get(), "/images", H5T_STD_U8LE, {2, 12, 12, 3}, {1, 12, 12, 3}, values,
                      {{32001, {}}});
    ASSERT_EQ(h5_chunk_masks(f.get(), "/images"), (std::vector<unsigned>{1, 0}))
        << "noise stored raw, tiles through blosc";
  }
  auto late = sh(dir, env + "DCTCHOP compress mixed.h5:/images -o late.dcz --chunk-mb 0.001");
  EXPECT_EQ(late.status, 3) << describe(late);
  EXPECT_EQ(count_lines(late.err), 1u) << late.err;
  for (const std::string n : {"mixed.h5:/images", "32001 (blosc)", "hdf5-filter-plugin-blosc-serial", "rows"}) {
    EXPECT_TRUE(contains(late.err, n)) << "lacks " << n << ": " << late.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("late.dcz")));
}

TEST(Hdf5Filters, APluginsOwnFailureLinesGoToStderrAndNeverToStdout) {
  // Some plugins print their failures with printf (Debian's lz4 plugin did). On stdout, that
  // line would land in front of a --json report or in the data of -o -; dctchop sends it to
  // stderr. The test plugin (tests/plugins/noisy_filter.cpp, filter 256) prints two lines with
  // printf and puts and fails.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("z.h5"));
    h5_write_encoded(f.get(), "/noisy", {2, 8, 8}, std::vector<std::uint8_t>(128, 9), 256, {},
                     [](const std::vector<std::uint8_t>& v, u64) { return v; });
  }
  const std::string env = "HDF5_PLUGIN_PATH=" + sh_quote(DCTCHOP_TEST_PLUGIN_DIR) + " ";
  for (const std::string args : {"compress z.h5:/noisy -o out.dcz --json",
                                 "eval z.h5:/noisy --chop 2 --json",
                                 "compress z.h5:/noisy -o - -q"}) {
    auto r = sh(dir, env + "DCTCHOP " + args);
    EXPECT_EQ(r.status, 3) << args << "\n" << describe(r);
    EXPECT_FALSE(contains(r.out, "noisy filter")) << args;
    // With --json stdout holds the failure's JSON alone, no plugin line in front of it.
    if (contains(args, "--json")) {
      const auto j = dctchop::test::parse_json(r.out);
      EXPECT_EQ(j.value("exit_code", 0), 3) << args;
      EXPECT_TRUE(contains(j.value("error", ""), "z.h5:/noisy")) << args << ": " << r.out;
    }
    EXPECT_TRUE(contains(r.err, "dctchop: error: z.h5:/noisy")) << args << ": " << r.err;
    // The plugin's own lines are there, on stderr (without them, nothing here is tested).
    EXPECT_TRUE(contains(r.err, "noisy filter: cannot decode 64 bytes\n")) << args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "noisy filter: giving up\n")) << args << ": " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.dcz")));
}

TEST(Hdf5Filters, ChunksNeverWrittenBesideCompressedOnesReadAsTheFillValueInTheMemoryOrder) {
  // dctchop's reader decodes the compressed chunks and gives those never written the fill
  // value itself (it handed such reads to HDF5): big-endian u16 with fill 0x0102, u8 with
  // fill 5, and fill time never (zeros), each with the chunk at row 1 never written.
  temp_dir dir;
  const hsize_t dims[3] = {3, 8, 8}, one[3] = {1, 8, 8};
  {
    auto f = h5_create(dir.file("fill.h5"));
    h5 space(H5Screate_simple(3, dims, nullptr), H5Sclose, "space");
    h5 mem(H5Screate_simple(3, one, nullptr), H5Sclose, "memory space");
    struct variant {
      const char* name;
      hid_t type, native;
      std::uint16_t fill;
      bool never;
    };
    for (const variant& v : {variant{"/u16be", H5T_STD_U16BE, H5T_NATIVE_UINT16, 0x0102, false},
                             variant{"/u8", H5T_STD_U8LE, H5T_NATIVE_UINT16, 5, false},
                             variant{"/never", H5T_STD_U8LE, H5T_NATIVE_UINT16, 5, true}}) {
      h5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dcpl");
      h5_check(H5Pset_chunk(dcpl.get(), 3, one), "chunk");
      h5_check(H5Pset_deflate(dcpl.get(), 6), "deflate");
      h5_check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_UINT16, &v.fill), "fill");
      if (v.never) h5_check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "fill time");
      h5 d(H5Dcreate2(f.get(), v.name, v.type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
           H5Dclose, "create");
      const std::vector<std::uint16_t> sevens(64, 7);
      for (hsize_t r : {0, 2}) {
        const hsize_t start[3] = {r, 0, 0};
        h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, one, nullptr),
                 "select");
        h5_check(H5Dwrite(d.get(), v.native, mem.get(), space.get(), H5P_DEFAULT, sevens.data()),
                 "write");
      }
    }
  }
  for (const auto& [name, fill] : {std::pair{"/u16be", 0x0102}, {"/u8", 5}, {"/never", 0}}) {
    auto spec = parse_dataset_spec(dir.file("fill.h5") + ":" + name);
    spec.decode_threads = 2;
    auto src = formats::open_dataset(spec);
    EXPECT_TRUE(contains(src->reader(), "decoded by dctchop")) << name << ": " << src->reader();
    const auto bytes = read_all(*src);
    const std::size_t item = bytes.size() / (3 * 64);
    for (std::size_t i = 0; i < 3 * 64; ++i) {
      std::uint16_t value = 0;
      std::memcpy(&value, bytes.data() + i * item, item);  // (little-endian host)
      ASSERT_EQ(value, i / 64 == 1 ? fill : 7) << name << " value " << i;
    }
  }
}

TEST(Hdf5Filters, ADamagedFillValueMessageBesideAChunkNeverWrittenIsBadInputNotACrash) {
  // H5Pget_fill_value (HDF5 1.10.8) crashed (SIGSEGV) on a fill-value message whose size
  // lies; the reader now has HDF5 read one value of the chunk, which fails cleanly.
  temp_dir dir;
  {
    auto f = h5_create(dir.file("f.h5"));
    h5 d = h5_create_chunked(f.get(), "/images", H5T_STD_U8LE, {2, 16, 16}, {1, 16, 16},
                             {{H5Z_FILTER_DEFLATE, {6}}});
    const std::vector<std::uint8_t> row(256, 5);
    h5 space(H5Dget_space(d.get()), H5Sclose, "space");
    const hsize_t start[3] = {0, 0, 0}, one[3] = {1, 16, 16};
    h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, one, nullptr),
             "select");
    h5 mem(H5Screate_simple(3, one, nullptr), H5Sclose, "memory space");
    h5_check(H5Dwrite(d.get(), H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT, row.data()),
             "write");  // (the chunk at row 1 never written)
  }
  std::string bytes = read_bytes(dir.file("f.h5"));
  // The fill-value message (type 5, 8 bytes, version 2): its value's size, 0, made 0xff000000.
  const std::string head("\x05\x00\x08\x00\x01\x00\x00\x00\x02", 9);
  const auto at = bytes.find(head);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.substr(at + 12, 4), std::string(4, '\0'));
  bytes[at + 15] = '\xff';
  write_bytes(dir.file("f.h5"), bytes);
  const auto c = cli(dir, "compress f.h5:/images -o a.dcz");
  EXPECT_EQ(c.status, 3) << describe(c);
  EXPECT_TRUE(contains(c.err, "f.h5:/images: read of rows 0..1 failed: the file is damaged"))
      << c.err;
}

TEST(Hdf5Filters, AChunkKeyDamagedInAVersion1BTreeIsBadInputNotAChunkReadAsFill) {
  // h5py's default file format indexes chunks in a version 1 B-tree whose keys hold each
  // chunk's coordinates. One flipped, the chunk is no longer found where it belongs, and it
  // read as the fill value: zeros, exit 0, "lossless" (h5py reads the same). The index still
  // counts every chunk of the dataset, so a chunk not found is damage: in gzip chunks, which
  // dctchop decodes itself, and in chunks without filters, which HDF5 reads.
  temp_dir dir;
  std::vector<std::uint8_t> x(400 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint8_t>(i * 7 % 251 + 1);
  const std::pair<std::string, filter_list> kinds[] = {
      {"gzip", {{H5Z_FILTER_DEFLATE, {6}}}},
      {"unfiltered", {}},
      {"shuffle", {{H5Z_FILTER_SHUFFLE, {}}}},  // (HDF5 reads these two itself)
      {"fletcher32", {{H5Z_FILTER_FLETCHER32, {}}}}};
  for (const auto& [kind, filters] : kinds) {
    hsize_t size = 0;
    {
      auto f = h5_create(dir.file("o.h5"));
      h5 d = h5_create_chunked(f.get(), "/x", H5T_STD_U8LE, {400, 8, 8}, {2, 8, 8}, filters);
      h5_check(H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()),
               "write");
      const hsize_t at[3] = {124, 0, 0};
      unsigned mask = 0;
      haddr_t address = 0;
      h5_check(H5Dget_chunk_info_by_coord(d.get(), at, &mask, &address, &size), "chunk info");
    }
    must(dir, "compress o.h5:/x -o good.dcz --chop 8 -f");  // (whole, it reads)
    const std::string bytes = read_bytes(dir.file("o.h5"));
    // The key of the chunk at row 124: its stored size (u32), filter mask (u32), then its
    // offset in each of the 3 axes and a 4th of 0 (u64 each).
    std::string key(40, '\0');
    const std::uint32_t size32 = static_cast<std::uint32_t>(size);
    const std::uint64_t row = 124;
    std::memcpy(key.data(), &size32, 4);
    std::memcpy(key.data() + 8, &row, 8);
    const auto pos = bytes.find(key);
    ASSERT_NE(pos, std::string::npos) << kind;
    ASSERT_EQ(bytes.find(key, pos + 1), std::string::npos) << kind;
    for (const auto& [what, byte] : {std::pair{"column", std::size_t(8 + 16 + 3)},
                                     std::pair{"row", std::size_t(8 + 1)}}) {
      std::string bad = bytes;
      bad[pos + byte] = static_cast<char>(bad[pos + byte] ^ 1);  // column 0 -> 2^24; row 380
      write_bytes(dir.file("bad.h5"), bad);
      const auto c = cli(dir, "compress bad.h5:/x -o bad.dcz --chop 8");
      EXPECT_EQ(c.status, 3) << kind << " " << what << ": " << describe(c);
      EXPECT_TRUE(contains(c.err, "bad.h5:/x: the chunk at row 124 is not where the file's "
                                  "chunk index should hold it, though the index counts every "
                                  "chunk of the dataset as stored: the file is damaged"))
          << kind << " " << what << ": " << c.err;
      EXPECT_FALSE(std::filesystem::exists(dir.file("bad.dcz"))) << kind << " " << what;
    }
  }
}

TEST(Hdf5Filters, ADamagedCompressedChunkIsBadInputSayingSoAndLeavesNothing) {
  temp_dir dir;
  // A deflate stream with bytes changed in its middle (zlib's checksum fails).
  damage_second_gzip_chunk(dir.file("f.h5"));
  // Chunks of 64 bytes under dctchop's two filters that do not decode to 64 bytes: HDF5 1.10
  // takes whatever size a filter returns, so the filters check it themselves.
  {
    const std::vector<std::uint8_t> nines(128, 9);
    const auto frame = zstd_frame(std::vector<std::uint8_t>(64, 9), true);
    auto f = h5_create(dir.file("z.h5"));
    auto each = [&](const char* name, H5Z_filter_t id, const std::vector<unsigned>& cd,
                    std::vector<std::uint8_t> chunk) {
      h5_write_encoded(f.get(), name, {2, 8, 8}, nines, id, cd,
                       [&](const std::vector<std::uint8_t>&, u64) { return chunk; });
    };
    each("/zstd_garbage", 32015, {3}, nines);  // no zstd frame at all
    each("/zstd_truncated", 32015, {3}, {frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(frame.size() / 2)});
    each("/zstd_short", 32015, {3}, zstd_frame(std::vector<std::uint8_t>(1, 9), true));
    each("/zstd_short_unsized", 32015, {3}, zstd_frame(std::vector<std::uint8_t>(32, 9), false));
    each("/zstd_long", 32015, {3}, zstd_frame(std::vector<std::uint8_t>(1000, 9), true));
    // Valid zlib streams of 32 and 1000 bytes where 64 belong (HDF5's own filter would take
    // the short one and leave half the chunk unset; dctchop's reader refuses both).
    auto zlib_stream = [](std::size_t n) {
      const std::vector<std::uint8_t> v(n, 9);
      uLongf len = compressBound(static_cast<uLong>(n));
      std::vector<std::uint8_t> out(len);
      if (compress2(out.data(), &len, v.data(), static_cast<uLong>(n), 6) != Z_OK) {
        throw std::runtime_error("test: compress2 failed");
      }
      out.resize(len);
      return out;
    };
    each("/deflate_short", H5Z_FILTER_DEFLATE, {6}, zlib_stream(32));
    each("/deflate_long", H5Z_FILTER_DEFLATE, {6}, zlib_stream(1000));
    // A long one beside a chunk never written: the read went to HDF5, whose deflate filter
    // (and LZF's, h5py's too) cut it to size: wrong values, exit 0.
    for (const auto& [name, id, cd, stream] :
         {std::tuple{"/deflate_long_sparse", H5Z_FILTER_DEFLATE, std::vector<unsigned>{6},
                     zlib_stream(128)},
          std::tuple{"/lzf_long_sparse", H5Z_filter_t{32000}, std::vector<unsigned>{4, 261, 0},
                     lzf_block(std::vector<std::uint8_t>(128, 9))}}) {
      h5 d = h5_create_chunked(f.get(), name, H5T_STD_U8LE, {2, 8, 8}, {1, 8, 8}, {{id, cd}});
      const hsize_t at[3] = {0, 0, 0};  // (the chunk at row 1 never written)
      h5_check(H5Dwrite_chunk(d.get(), H5P_DEFAULT, 0, at, stream.size(), stream.data()), name);
    }
    // Big-endian u16 (2 x 4 x 8): HDF5 would convert them, and read a short chunk unchecked;
    // dctchop decodes them and swaps their bytes.
    h5_write_encoded(f.get(), "/deflate_short_be", {2, 4, 8}, nines, H5Z_FILTER_DEFLATE, {6},
                     [&](const std::vector<std::uint8_t>&, u64) { return zlib_stream(32); },
                     H5T_STD_U16BE);
    each("/lzf_garbage", 32000, {4, 261, 64}, {0x20, 0x00});  // a reference before the start
    each("/lzf_short", 32000, {4, 261, 0}, lzf_block(std::vector<std::uint8_t>(32, 9)));
    each("/lzf_long", 32000, {4, 261, 0}, lzf_block(std::vector<std::uint8_t>(200, 9)));
    // LZ4: Debian's plugin reads past the end of the first two (LZ4_decompress_fast), asks
    // for what the third's header says, and takes the short, long and trailing ones.
    const auto lz4 = lz4_framed(std::vector<std::uint8_t>(64, 9), 64);
    std::vector<std::uint8_t> overrun = {0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 64, 0, 0, 0, 3, 0xF0, 49, 9};
    each("/lz4_overrun", 32004, {}, overrun);  // an LZ4 block cut short: 64 literals said, 1 there
    each("/lz4_truncated", 32004, {}, {lz4.begin(), lz4.end() - 2});
    auto huge = lz4;
    huge[0] = 0x7f;  // a total size of petabytes
    each("/lz4_huge", 32004, {}, huge);
    auto zero_block = lz4;
    zero_block[11] = 0;
    each("/lz4_zero_block", 32004, {}, zero_block);
    each("/lz4_short", 32004, {}, lz4_framed(std::vector<std::uint8_t>(32, 9), 32));
    each("/lz4_long", 32004, {}, lz4_framed(std::vector<std::uint8_t>(1000, 9), 1000));
    auto trailing = lz4;
    trailing.push_back(0);
    each("/lz4_trailing", 32004, {}, trailing);
    auto bad_offset = lz4;  // a match whose offset points before the block's start
    ASSERT_EQ(bad_offset[16], 0x1f) << "the block opens with 1 literal and a match (LZ4 1.9.4)";
    bad_offset[18] = bad_offset[19] = 0xff;
    each("/lz4_bad_offset", 32004, {}, bad_offset);
  }
  std::vector<bad_case> cases = {
      {"compress f.h5:/gzip_shuffle -o out.dcz", 3,
       {"f.h5:/gzip_shuffle", "rows 0..3", "compressed chunk does not decode", "damaged"}}};
  const std::vector<std::string> damaged = {
      "zstd_garbage", "zstd_truncated", "zstd_short",   "zstd_short_unsized", "zstd_long",
      "lzf_garbage",  "lzf_short",      "lzf_long",     "lz4_overrun",        "lz4_truncated",
      "lz4_huge",     "lz4_zero_block", "lz4_short",    "lz4_long",           "lz4_trailing",
      "lz4_bad_offset"};
  for (const std::string& name : damaged) {
    cases.push_back({"compress z.h5:/" + name + " -o out.dcz", 3, {"z.h5:/" + name, "does not decode"}});
  }
  // (dctchop's reader only)
  for (const std::string name : {"deflate_short", "deflate_long", "deflate_short_be",
                                 "deflate_long_sparse", "lzf_long_sparse"}) {
    cases.push_back({"compress z.h5:/" + name + " -o out.dcz", 3, {"z.h5:/" + name, "does not decode"}});
  }
  check_bad_cases(dir, cases);
  // Where HDF5 undoes the filters (decode_threads 0), dctchop's LZF, LZ4 and zstd filters,
  // called by HDF5, refuse the same chunks.
  for (const std::string& name : damaged) {
    auto spec = parse_dataset_spec(dir.file("z.h5") + ":/" + name);
    spec.decode_threads = 0;
    auto src = formats::open_dataset(spec);
    expect_error([&] { read_all(*src); }, errc::bad_input, {name, "does not decode through its filters"});
  }
  // The same chunks, right: 64 nines each (for LZ4, 48 nines and 16 different values).
  std::vector<std::uint8_t> lz4_values(128, 9);
  for (std::size_t c : {0u, 64u}) std::iota(lz4_values.begin() + c + 48, lz4_values.begin() + c + 64, std::uint8_t{100});
  {
    auto f = h5_create(dir.file("ok.h5"));
    h5_write_encoded(f.get(), "/zstd", {2, 8, 8}, std::vector<std::uint8_t>(128, 9), 32015, {3},
                     [](const std::vector<std::uint8_t>& v, u64) { return zstd_frame(v, true); });
    h5_write_encoded(f.get(), "/lzf", {2, 8, 8}, std::vector<std::uint8_t>(128, 9), 32000,
                     {4, 261, 64}, [](const std::vector<std::uint8_t>& v, u64) { return lzf_block(v); });
    // Blocks of 24 bytes: two that LZ4 shrinks and a last one of 16 that it cannot.
    h5_write_encoded(f.get(), "/lz4", {2, 8, 8}, lz4_values, 32004, {24},
                     [](const std::vector<std::uint8_t>& v, u64) {
                       auto framed = lz4_framed(v, 24);
                       if (framed.size() != 12 + 2 * (4 + 10) + 4 + 16) {  // LZ4 1.9.4's sizes
                         throw std::runtime_error("test: LZ4 blocks are not as expected");
                       }
                       return framed;
                     });
  }
  for (const std::string name : {"/zstd", "/lzf", "/lz4"}) {
    for (unsigned t : {0u, 1u}) {
      auto spec = parse_dataset_spec(dir.file("ok.h5") + ":" + name);
      spec.decode_threads = t;
      EXPECT_EQ(read_all(*formats::open_dataset(spec)),
                as_bytes(name == "/lz4" ? lz4_values : std::vector<std::uint8_t>(128, 9)))
          << name << ", decode_threads " << t;
    }
  }
}

}  // namespace
