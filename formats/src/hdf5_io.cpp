// HDF5 datasets in and out, through the HDF5 C API. Every handle is owned by an h5_id (RAII);
// HDF5's own error printing is switched off while we call it and restored afterwards, and its
// failures become dctchop::error naming the file and dataset.
#include "hdf5_io.hpp"
#include "dataset_choice.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <string_view>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/formats/file_io.hpp"
#include "direct_writer.hpp"
#include "file_magic.hpp"
#include "hdf5_chunks.hpp"
#include "hdf5_filters.hpp"

namespace dctchop::formats::detail {
namespace {

using u64 = std::uint64_t;

/** File names for a message: "a, b, c". */
std::string name_list(const std::set<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

/** Owns one HDF5 identifier and closes it with the right H5?close. */
class h5_id {
 public:
  using closer = herr_t (*)(hid_t);
  h5_id() = default;
  h5_id(hid_t id, closer c) : id_(id), close_(c) {}
  h5_id(h5_id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  h5_id& operator=(h5_id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  h5_id(const h5_id&) = delete;
  h5_id& operator=(const h5_id&) = delete;
  ~h5_id() { reset(); }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  /** Give up ownership without closing. */
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  closer close_ = nullptr;
};

/** Silences HDF5's automatic error stack printing for the current scope. */
class quiet_hdf5 {
 public:
  quiet_hdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  quiet_hdf5(const quiet_hdf5&) = delete;
  quiet_hdf5& operator=(const quiet_hdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/** Whether the first chunk of a chunked dataset was stored through filter `index` of its
 *  pipeline (its bit of the chunk's filter mask is clear). True when HDF5 cannot tell. */
bool first_chunk_uses(hid_t dset, unsigned index) {
  h5_id space(H5Dget_space(dset), H5Sclose);
  hsize_t chunks = 0;
  if (!space.valid() || H5Dget_num_chunks(dset, space.get(), &chunks) < 0) return true;
  if (chunks == 0) return false;  // nothing written: nothing to decode
  const int nd = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> offset(static_cast<std::size_t>(std::max(nd, 1)));
  unsigned mask = 0;
  haddr_t address = 0;
  hsize_t size = 0;
  if (H5Dget_chunk_info(dset, space.get(), 0, offset.data(), &mask, &address, &size) < 0) {
    return true;
  }
  return (mask & (1u << index)) == 0;
}

/** HDF5 writes chunks of at least 1 and, along an axis of fixed size (other than 0: h5py
 *  chunks an empty axis by 1024), at most that size, and of under 4 GiB (H5Pset_chunk,
 *  H5Dcreate). Other chunk dimensions come from damaged bytes, and libhdf5 1.10/1.14 reads
 *  past its buffers on some of them (a crash, found by flipping bytes of a small file): such
 *  a dataset is refused before any read. */
void check_chunk_shape(const std::vector<hsize_t>& chunk, const std::vector<hsize_t>& dims,
                       const std::vector<hsize_t>& max_dims, u64 item, const std::string& name) {
  u64 bytes = std::max<u64>(item, 1);
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    const bool fixed = max_dims[i] != H5S_UNLIMITED && dims[i] > 0;
    if (chunk[i] == 0 || (fixed && chunk[i] > max_dims[i]) || chunk[i] > (u64(1) << 32)) {
      throw error(errc::bad_input,
                  name + ": its chunks are " + std::to_string(chunk[i]) + " long on axis " +
                      std::to_string(i) + (fixed ? " of at most " + std::to_string(max_dims[i])
                                                 : std::string()) +
                      ", which HDF5 never writes: the file is damaged");
    }
    bytes = bytes > (u64(1) << 32) / chunk[i] ? (u64(1) << 33) : bytes * chunk[i];
  }
  if (bytes >= (u64(1) << 32)) {
    throw error(errc::bad_input, name + ": its chunks would hold 4 GiB or more, which HDF5 "
                                        "never writes: the file is damaged");
  }
}

/** Bytes of a chunk's values that lie together in rows read whole (C order): the chunk's
 *  trailing axes as far as they span the dataset, times the first that does not. A chunk
 *  narrower than the rows splits them into runs this long. */
u64 run_bytes(const std::vector<hsize_t>& chunk, const std::vector<hsize_t>& dims, u64 item) {
  u64 run = item;
  for (std::size_t i = chunk.size(); i-- > 0;) {
    run *= std::min<u64>(chunk[i], std::max<u64>(dims[i], 1));  // (chunk shapes are checked)
    if (chunk[i] < dims[i]) break;
  }
  return run;
}

/** Runs at least this long are read straight from the file, a read each; shorter ones through
 *  HDF5's chunk cache, a chunk a read (and a copy). */
constexpr u64 straight_run_bytes = 64 * 1024;

h5_id check(hid_t id, h5_id::closer c, errc code, const std::string& what) {
  if (id < 0) throw error(code, what);
  return h5_id(id, c);
}

void check(herr_t status, errc code, const std::string& what) {
  if (status < 0) throw error(code, what);
}

/** IEEE half precision, little-endian: HDF5 1.10 has no predefined type for it, so it is made
 *  as h5py makes it (sign bit 15, exponent 10..14 with bias 15, mantissa 0..9), which h5py and
 *  NumPy read as float16. One per process, never closed (predefined types are not either). */
hid_t ieee_f16le() {
  static const hid_t t = [] {
    const hid_t f = H5Tcopy(H5T_IEEE_F32LE);
    if (f < 0 || H5Tset_fields(f, 15, 10, 5, 0, 10) < 0 || H5Tset_size(f, 2) < 0 ||
        H5Tset_ebias(f, 15) < 0 || H5Tlock(f) < 0) {
      throw error(errc::internal, "HDF5: cannot make the float16 type");
    }
    return f;
  }();
  return t;
}

/** NumPy's bool as h5py stores it: the enum {FALSE = 0, TRUE = 1} of int8, which h5py reads
 *  back as bool (a plain uint8 would come back as uint8). One per process, never closed. */
hid_t h5py_bool() {
  static const hid_t t = [] {
    const hid_t e = H5Tenum_create(H5T_NATIVE_INT8);
    signed char no = 0, yes = 1;
    if (e < 0 || H5Tenum_insert(e, "FALSE", &no) < 0 || H5Tenum_insert(e, "TRUE", &yes) < 0 ||
        H5Tlock(e) < 0) {
      throw error(errc::internal, "HDF5: cannot make the bool type");
    }
    return e;
  }();
  return t;
}

/** True when `type` is a 2-byte IEEE half (the fields of ieee_f16le), whatever its order. */
bool is_ieee_half(hid_t type) {
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  return H5Tget_size(type) == 2 &&
         H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos == 15 &&
         epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type) == 15;
}

/** The numeric type of an HDF5 datatype, or an error naming what it is instead. */
npy_dtype numeric_type(hid_t type, const std::string& name) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  npy_dtype t;
  t.itemsize = size;
  t.big_endian = false;  // read into native little-endian memory
  if (cls == H5T_INTEGER) {
    t.kind = H5Tget_sign(type) == H5T_SGN_NONE ? 'u' : 'i';
    if (size == 1 || size == 2 || size == 4 || size == 8) return t;
  } else if (cls == H5T_FLOAT) {
    t.kind = 'f';
    if (size == 4 || size == 8) return t;
    if (is_ieee_half(type)) return t;  // h5py's float16
    if (size == 2) {
      throw error(errc::bad_input, name + ": is a 2-byte float dataset other than IEEE float16 "
                                          "(bfloat16?); convert it to float32 first");
    }
  }
  if (cls == H5T_ENUM) {
    // An enum of integers reads as its values. h5py stores NumPy's bool as the enum
    // {FALSE = 0, TRUE = 1} of int8: that one is bool again, as h5py gives it back.
    h5_id base(H5Tget_super(type), H5Tclose);
    if (base.valid() && H5Tget_class(base.get()) == H5T_INTEGER &&
        (size == 1 || size == 2 || size == 4 || size == 8)) {
      t.kind = H5Tget_sign(base.get()) == H5T_SGN_NONE ? 'u' : 'i';
      signed char v = -1;
      if (size == 1 && H5Tget_nmembers(type) == 2 &&
          H5Tenum_valueof(type, "FALSE", &v) >= 0 && v == 0 &&
          H5Tenum_valueof(type, "TRUE", &v) >= 0 && v == 1) {
        t.kind = 'b';
      }
      return t;
    }
  }
  // h5py writes complex numbers as a compound of two floats named r and i.
  auto member_named = [type](unsigned i, const char* want) {
    char* n = H5Tget_member_name(type, i);
    const bool same = n != nullptr && std::strcmp(n, want) == 0;
    if (n != nullptr) H5free_memory(n);
    return same;
  };
  const bool complex = cls == H5T_COMPOUND && H5Tget_nmembers(type) == 2 &&
                       H5Tget_member_class(type, 0) == H5T_FLOAT &&
                       H5Tget_member_class(type, 1) == H5T_FLOAT && member_named(0, "r") &&
                       member_named(1, "i");
  const std::string sized = std::to_string(size) + "-byte";
  const std::string odd = cls == H5T_INTEGER ? "a " + sized + " integer dataset"  // 3 bytes, say
                          : cls == H5T_FLOAT ? "a " + sized + " float dataset"
                                             : std::string();
  if (cls == H5T_BITFIELD) {  // (h5py reads it as unsigned integers, which hides the class)
    throw error(errc::bad_input,
                name + ": is a bitfield dataset (HDF5 class H5T_BITFIELD, " + sized +
                    " elements: bits, not numbers); dctchop reads integer and float arrays: "
                    "store its values as unsigned integers (h5py reads them so) to compress "
                    "them as numbers");
  }
  if (!odd.empty()) {
    throw error(errc::bad_input, name + ": is " + odd + "; dctchop reads integers of 1, 2 "
                                        "and 4 bytes (and of 8 as labels) and floats of 2, 4 "
                                        "and 8");
  }
  const char* what = complex ? "a complex dataset (h5py's compound of r and i)"
                     : cls == H5T_COMPOUND ? "a compound (structured) dataset"
                     : cls == H5T_STRING ? "a string dataset"
                     : cls == H5T_ENUM   ? "an enum dataset of non-integer values"
                     : cls == H5T_ARRAY  ? "an array-typed dataset"
                     : cls == H5T_VLEN   ? "a variable-length dataset"
                     : cls == H5T_OPAQUE ? "an opaque dataset"
                     : cls == H5T_REFERENCE ? "a reference dataset"
                                             : "a dataset of an unsupported element type";
  throw error(errc::bad_input, name + ": is " + what + " (" + std::to_string(size) +
                                   "-byte elements); dctchop reads integer and float arrays");
}

/** The in-memory (native) HDF5 type for a numeric type. */
hid_t memory_type(const npy_dtype& t) {
  if (t.kind == 'f' && t.itemsize == 2) return ieee_f16le();  // (x86 and Arm: little-endian)
  if (t.kind == 'b') return h5py_bool();
  if (t.kind == 'f') return t.itemsize == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  const bool u = t.kind == 'u';
  switch (t.itemsize) {
    case 1: return u ? H5T_NATIVE_UINT8 : H5T_NATIVE_INT8;
    case 2: return u ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT16;
    case 4: return u ? H5T_NATIVE_UINT32 : H5T_NATIVE_INT32;
    default: return u ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
  }
}

/** The little-endian file type for a numeric type. */
hid_t file_type(const npy_dtype& t) {
  if (t.kind == 'f' && t.itemsize == 2) return ieee_f16le();
  if (t.kind == 'b') return h5py_bool();
  if (t.kind == 'f') return t.itemsize == 4 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
  const bool u = t.kind == 'u';
  switch (t.itemsize) {
    case 1: return u ? H5T_STD_U8LE : H5T_STD_I8LE;
    case 2: return u ? H5T_STD_U16LE : H5T_STD_I16LE;
    case 4: return u ? H5T_STD_U32LE : H5T_STD_I32LE;
    default: return u ? H5T_STD_U64LE : H5T_STD_I64LE;
  }
}

/** File and memory dataspaces for rows [first, first+count) of a dataset of `shape`. */
struct row_selection {
  h5_id file_space, mem_space;
};

row_selection select_rows(hid_t dset, const std::vector<u64>& shape, u64 first, u64 count,
                          const std::string& name) {
  const std::size_t nd = shape.size();
  std::vector<hsize_t> start(nd, 0), cnt(shape.begin(), shape.end());
  start[0] = first;
  cnt[0] = count;
  row_selection sel;
  sel.file_space = h5_id(H5Dget_space(dset), H5Sclose);
  check(H5Sselect_hyperslab(sel.file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                            cnt.data(), nullptr),
        errc::internal, name + ": bad hyperslab");
  sel.mem_space = h5_id(H5Screate_simple(static_cast<int>(nd), cnt.data(), nullptr), H5Sclose);
  return sel;
}

/** What two links to one object share (its file and place in it); "" when HDF5 cannot say.
 *  The file by its device and inode where it can be found by its name: two external links
 *  to one file open it twice, under two HDF5 file numbers. */
std::string object_identity(hid_t obj) {
  std::string file;
  {
    h5_id f(H5Iget_file_id(obj), H5Fclose);
    char name[4096];
    const ssize_t n = f.valid() ? H5Fget_name(f.get(), name, sizeof name) : -1;
    struct stat st {};
    if (n > 0 && static_cast<std::size_t>(n) < sizeof name && ::stat(name, &st) == 0) {
      file = std::to_string(st.st_dev) + "/" + std::to_string(st.st_ino);
    }
  }
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t oi;
  if (H5Oget_info3(obj, &oi, H5O_INFO_BASIC) < 0) return {};
  if (file.empty()) file = std::to_string(oi.fileno);
  return file + ":" + std::string(reinterpret_cast<const char*>(&oi.token), sizeof oi.token);
#else
  H5O_info_t oi;
  if (H5Oget_info2(obj, &oi, H5O_INFO_BASIC) < 0) return {};
  if (file.empty()) file = std::to_string(oi.fileno);
  return file + ":" + std::to_string(oi.addr);
#endif
}

/** Every dataset in the file, with its shape and whether it is numeric: each once, however
 *  many links lead to it (by its first hard link's name, else its first link's). A group that
 *  cannot be read is a damaged file (`name`'s), not one without datasets. */
std::vector<candidate> list_datasets(hid_t file, const std::string& name,
                                     std::vector<std::string>* broken_external = nullptr) {
  struct listing {
    std::vector<candidate> out;
    std::map<std::string, std::pair<std::size_t, bool>> seen;  // identity: index, by a hard link
    std::vector<std::string> broken;  // external links that lead to no dataset; and datasets
                                      // that lead to a FIFO (problems_on_way)
    const std::string* file;          // its name
  } all;
  all.file = &name;
  auto visit = [](hid_t group, const char* name, const H5L_info_t* link, void* data) -> herr_t {
    auto* l = static_cast<listing*>(data);
    auto* list = &l->out;
    // (A link that leads to a FIFO: HDF5's open of it would wait for a writer.)
    if (link != nullptr && link->type != H5L_TYPE_HARD &&
        !problems_on_way(*l->file, std::string("/") + name).waits.empty()) {
      if (link->type == H5L_TYPE_EXTERNAL) l->broken.push_back(std::string("/") + name);
      return 0;
    }
    const hid_t d = H5Dopen2(group, name, H5P_DEFAULT);
    if (d < 0) {  // a group or a dangling link
      H5Eclear2(H5E_DEFAULT);
      if (link != nullptr && link->type == H5L_TYPE_EXTERNAL) l->broken.push_back(std::string("/") + name);
      return 0;
    }
    h5_id ds(d, H5Dclose);
    // A virtual dataset with a pattern source opens its files to learn its extent (at
    // H5Dget_space, below): one that is a FIFO waited there for good.
    if (link != nullptr && link->type == H5L_TYPE_HARD) {
      h5_id dcpl(H5Dget_create_plist(d), H5Pclose);
      if (dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_VIRTUAL &&
          !problems_on_way(*l->file, std::string("/") + name).waits.empty()) {
        l->broken.push_back(std::string("/") + name);
        return 0;
      }
    }
    const bool hard = link != nullptr && link->type == H5L_TYPE_HARD;
    const std::string id = object_identity(d);
    H5Eclear2(H5E_DEFAULT);
    if (!id.empty()) {
      const auto [at, fresh] = l->seen.try_emplace(id, list->size(), hard);
      if (!fresh) {  // another name of a dataset listed already
        if (hard && !at->second.second) {
          (*list)[at->second.first].path = std::string("/") + name;
          at->second.second = true;
        }
        return 0;
      }
    }
    candidate c;
    c.path = std::string("/") + name;
    h5_id space(H5Dget_space(d), H5Sclose);
    const int nd = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(nd, 0)));
    if (nd > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    c.shape.assign(dims.begin(), dims.end());
    h5_id type(H5Dget_type(d), H5Tclose);
    try {  // what the reader reads as numbers: integers, floats, enums of integers (bool)
      const bool boolean = numeric_type(type.get(), c.path).kind == 'b';
      c.numeric = true;
      if (H5Tget_class(type.get()) == H5T_ENUM) c.labels_type = boolean ? "bool" : "enum";
    } catch (const error&) {
      c.numeric = false;
    }
    list->push_back(std::move(c));
    return 0;
  };
  if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit, &all) < 0) {  // (visit never fails)
    const std::string why = last_hdf5_failure().text;
    throw error(errc::bad_input, name + ": the file is damaged: its groups cannot be read" +
                                     (why.empty() ? std::string() : " (" + why + ")"));
  }
  if (broken_external != nullptr) *broken_external = std::move(all.broken);
  return all.out;
}

// ---- source -------------------------------------------------------------------------------

/** Why a file that problems_on_way finds waiting cannot be read. */
constexpr const char* hdf5_reads_files =
    ": HDF5 reads plain files only (by seeking), and its open or read of this one could wait "
    "without end: use a plain file";

/** What a file that is not HDF5 is instead, when it is one of the files users mix up. */
std::string not_hdf5_what(const std::string& path) {
  char head[8] = {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  const std::size_t got = f != nullptr ? std::fread(head, 1, sizeof head, f) : 0;
  if (f != nullptr) std::fclose(f);
  switch (magic_of(head, got)) {
    case file_magic::npy: return "is a .npy file, not an HDF5 file (name it .npy)";
    case file_magic::archive: return "is a dctchop archive, not an HDF5 file (decompress it first)";
    case file_magic::zip:
    case file_magic::empty_zip: return "is a ZIP file (numpy's .npz?), not an HDF5 file (name it .npz)";
    default: return "not an HDF5 file";
  }
}

/** The names by which HDF5 may find `name`, a file named from within `from` (an external
 *  link's target, a raw file, a virtual dataset's source). First those HDF5 1.10 tries, in
 *  its order (H5F_prefix_open_file; for raw files H5D__efl_read), `tried` of them: an
 *  absolute name as it is; then the name (an absolute one's last part) under each folder that
 *  the environment variable `prefixes` lists (HDF5_EXT_PREFIX, HDF5_VDS_PREFIX or
 *  HDF5_EXTFILE_PREFIX: separated by ':', with ${ORIGIN} for from's folder), beside `from`,
 *  from the working folder, and beside the file that `from` is a symbolic link to (a raw
 *  file's: under the prefix, else from the working folder). Then the rest of the places
 *  named: more than HDF5 opens, on purpose, as any file it may read is an input, which no
 *  output may replace. */
struct named_places {
  std::vector<std::string> names;
  std::size_t tried = 0;
};
named_places names_from(const std::string& name, const std::string& from, const char* prefixes) {
  namespace fs = std::filesystem;
  named_places out;
  auto& names = out.names;
  const auto add = [&](const std::string& n) {  // each once
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  if (name.empty() || name == ".") return out;  // (a virtual dataset's "this file")
  const bool absolute = name.front() == '/';
  const fs::path folder = fs::path(from).parent_path();
  const fs::path rel = absolute ? fs::path(name).filename() : fs::path(name);
  if (absolute) add(name);
  if (rel.empty()) {
    out.tried = names.size();
    return out;
  }
  std::vector<std::string> under;  // the name under each prefix
  const char* listed = std::getenv(prefixes);
  std::string_view rest = listed != nullptr ? listed : "";
  while (!rest.empty()) {
    const std::size_t colon = std::min(rest.find(':'), rest.size());
    std::string prefix(rest.substr(0, colon));
    rest.remove_prefix(std::min(colon + 1, rest.size()));
    if (const auto at = prefix.find("${ORIGIN}"); at != std::string::npos) {
      prefix.replace(at, 9, folder.empty() ? std::string(".") : folder.string());
    }
    if (!prefix.empty()) under.push_back((fs::path(prefix) / rel).string());
  }
  const std::string beside = folder.empty() ? rel.string() : (folder / rel).string();
  if (std::string_view(prefixes) == "HDF5_EXTFILE_PREFIX") {  // a raw file: one place
    if (!absolute) add(under.empty() ? name : under.front());
    out.tried = names.size();
    if (absolute) add(rel.string());
    for (const auto& u : under) add(u);
    add(beside);
    if (!absolute) add(name);
    return out;
  }
  for (const auto& u : under) add(u);
  add(beside);
  add(rel.string());
  std::error_code ec;
  const fs::path real = fs::canonical(from, ec);
  if (!ec) add((real.parent_path() / rel).string());
  out.tried = names.size();
  return out;
}

/** What a virtual dataset takes from a source dataset: the last index on each axis of a
 *  selection of part of it (`reach`), or, for a selection of all of it, `values` (as many
 *  as the virtual dataset maps it to). Neither: nothing to check. */
struct source_need {
  std::vector<hsize_t> reach;
  std::optional<hsize_t> values;
};

std::string link_way_problem(hid_t f, const std::string& file, const std::string& object,
                             int* os_error = nullptr);

/** Why the open HDF5 file `f` (named `file`) holds no dataset `object`, or (with `need`) none
 *  that gives what need asks: "" when it does. */
std::string missing_dataset(hid_t f, const std::string& file, const std::string& object,
                            const source_need* need) {
  quiet_hdf5 quiet;
  if (H5Oexists_by_name(f, object.c_str(), H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    // (A virtual dataset's source that is a link in a circle is there, as a link.)
    if (const std::string way = link_way_problem(f, file, object); !way.empty()) {
      return file + ":" + object + " is a link that HDF5 cannot follow to its end: " + way;
    }
    return file + " holds no " + object;
  }
  h5_id d(H5Dopen2(f, object.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) return file + ":" + object + " is not a dataset";
  if (need == nullptr) return {};
  h5_id space(H5Dget_space(d.get()), H5Sclose);
  const int nd = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (nd < 0) return {};
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  if (nd > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const std::vector<std::uint64_t> have(dims.begin(), dims.end());
  if (need->values) {
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0 || static_cast<hsize_t>(n) == *need->values) return {};
    return file + ":" + object + " has shape " + shape_text(have) + ", " + std::to_string(n) +
           " values where the part of the virtual dataset mapped to all of it takes " +
           std::to_string(*need->values);
  }
  bool inside = dims.size() == need->reach.size();
  for (std::size_t i = 0; inside && i < dims.size(); ++i) inside = need->reach[i] < dims[i];
  if (inside) return {};
  std::vector<std::uint64_t> end(need->reach.begin(), need->reach.end());
  for (auto& e : end) ++e;
  return file + ":" + object + " has shape " + shape_text(have) +
         ", smaller than the part mapped from it (" + shape_text(end) + ")";
}

/** An existing file named by another, opened as HDF5 (`f`), or why it cannot be (`why`; both
 *  empty: a file a writer holds open, which HDF5 reads but this check leaves alone). */
struct named_hdf5 {
  h5_id f;
  std::string why;
  int os_error = 0;  ///< where `why` is a system error (errno): an I/O error, not damage
};
/** 0 where `file` opens for reading now, else why not (errno): checked before HDF5 opens
 *  it, since H5Fis_hdf5 calls a file it cannot open (out of descriptors: ulimit -n) "not an
 *  HDF5 file". */
int open_errno(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // (a FIFO: no wait)
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

named_hdf5 open_named_hdf5(const std::string& file) {
  quiet_hdf5 quiet;
  if (const int e = open_errno(file); e != 0) {
    return {{}, file + " cannot be read (" + std::strerror(e) + ")", e};
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {  // (HDF5's open of a FIFO waits)
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a pipe"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    // A directory cannot be opened as a file: an I/O error (EISDIR), as for an input named so.
    return {{}, file + " is " + what + ", not a plain file, which HDF5 cannot read",
            S_ISDIR(st.st_mode) ? EISDIR : 0};
  }
  if (H5Fis_hdf5(file.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    const std::string what = not_hdf5_what(file);
    return {{}, file + (what.rfind("not ", 0) == 0 ? " is " : " ") + what};
  }
  h5_id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.valid()) return {std::move(f), {}};
  const std::string why = last_hdf5_failure().text;
  if (why.find("already open for write") != std::string::npos) return {};
  return {{}, file + (why.find("truncated") != std::string::npos ? " is a truncated HDF5 file"
                                                                  : " cannot be opened as HDF5 (damaged?)") +
                  (why.empty() ? std::string() : " (" + why + ")")};
}

/** The file that HDF5 opens for one that another names (names_from, `prefixes` its
 *  environment variable): the first of the places it tries that opens as HDF5, as HDF5 goes
 *  on past one that does not; else the first there, with why it does not open. `file` is
 *  empty when there is none at all. */
struct named_source {
  std::string file;
  named_hdf5 opened;
};
named_source open_named_source(const std::string& name, const std::string& from,
                               const char* prefixes) {
  named_source first;
  const named_places places = names_from(name, from, prefixes);
  for (std::size_t i = 0; i < places.tried; ++i) {
    const std::string& place = places.names[i];
    struct stat st {};  // (a symbolic link in a loop is there, and says why it cannot be read)
    if (::stat(place.c_str(), &st) != 0 && errno != ELOOP) continue;
    named_hdf5 n = open_named_hdf5(place);
    if (n.f.valid() || n.why.empty()) return {place, std::move(n)};
    if (first.file.empty()) first = {place, std::move(n)};
  }
  return first;
}

/** Why the source `src` (found: a file is there) gives no dataset `object` meeting `need`
 *  (see missing_dataset): "" when it does, or when the check leaves it alone. */
std::string missing_in(const named_source& src, const std::string& object, const source_need* need) {
  return src.opened.f.valid() ? missing_dataset(src.opened.f.get(), src.file, object, need)
                              : src.opened.why;
}

/** What the link `name` of `loc` says: `there` where HDF5 knows the link; its type, HARD for
 *  a hard link (no value), ERROR where HDF5 cannot give its value (or it is empty, or over 4
 *  KiB); for a soft link the path it names as written (`as_written`) and from the root
 *  (`object`: a relative one is from the link's group); for an external link its `file` and
 *  `object` as written. */
struct link_value {
  bool there = false;
  H5L_type_t type = H5L_TYPE_ERROR;
  std::string file, object, as_written;
};
link_value read_link(hid_t loc, const std::string& name) {
  link_value v;
  H5L_info_t li{};
  if (H5Lget_info(loc, name.c_str(), &li, H5P_DEFAULT) < 0) return v;
  v.there = true;
  if (li.type == H5L_TYPE_HARD) {
    v.type = H5L_TYPE_HARD;
    return v;
  }
  if (li.u.val_size == 0 || li.u.val_size > 4096) return v;
  std::vector<char> text(li.u.val_size + 1, '\0');
  if (H5Lget_val(loc, name.c_str(), text.data(), text.size(), H5P_DEFAULT) < 0) return v;
  if (li.type == H5L_TYPE_SOFT) {
    v.as_written.assign(text.data(), strnlen(text.data(), li.u.val_size));
    if (v.as_written.empty()) return v;
    v.object = v.as_written.front() == '/' ? v.as_written
                                           : name.substr(0, name.rfind('/') + 1) + v.as_written;
    v.type = H5L_TYPE_SOFT;
    return v;
  }
  const char *file = nullptr, *object = nullptr;
  if (li.type == H5L_TYPE_EXTERNAL &&
      H5Lunpack_elink_val(text.data(), li.u.val_size, nullptr, &file, &object) >= 0 &&
      file != nullptr && object != nullptr) {
    v.type = H5L_TYPE_EXTERNAL;
    v.file = file;
    v.object = object;
  }
  return v;
}

/** The most links (soft and external) that HDF5 follows on one way: H5Pset_nlinks's default. */
constexpr int hdf5_link_limit = 16;

/** Where the soft and external links from `object` of the open file `f` (named `file`) lead,
 *  followed as HDF5 follows them: why HDF5 finds nothing at the end of them when they go round
 *  in a circle or past hdf5_link_limit ("external links lead round in a circle: a.h5:/x ->
 *  b.h5:/x -> a.h5:/x"), else "" (the way ends at something, or at nothing, which the caller
 *  says). Only a whole name that is a link is followed, not links among its groups. */
/** (`os_error`, where given: the errno of a system error on a file the way leads to, behind
 *  the problem returned, else left alone.) */
std::string link_way_problem(hid_t f, const std::string& file, const std::string& object,
                             int* os_error) {
  quiet_hdf5 quiet;
  std::string here_file = file, here = object;
  h5_id opened;  // the file `f` is for the first step, then the one the last link led to
  std::vector<std::tuple<dev_t, ino_t, std::string>> seen;
  std::string way;
  bool external = false;
  for (int links = 0;; ++links) {
    const hid_t at = opened.valid() ? opened.get() : f;
    struct stat st {};
    if (::stat(here_file.c_str(), &st) != 0) return {};
    const auto key = std::make_tuple(st.st_dev, st.st_ino, here);
    const bool again = std::find(seen.begin(), seen.end(), key) != seen.end();
    way += (way.empty() ? "" : " -> ") + here_file + ":" + here;
    const std::string kind = external ? "external links" : "links";
    if (again) return kind + " lead round in a circle: " + way;
    if (links > hdf5_link_limit) {
      return "a way of more than the " + std::to_string(hdf5_link_limit) +
             " links HDF5 follows: " + way;
    }
    seen.push_back(key);
    const link_value link = read_link(at, here);
    H5Eclear2(H5E_DEFAULT);
    if (!link.there) {
      // Past two links or more, where it ends is named with the way (one link to nothing:
      // the caller says so).
      return links >= 2 ? kind + " lead to nothing (" + here_file + " holds no " + here +
                              "): " + way
                        : std::string();
    }
    if (link.type == H5L_TYPE_SOFT) {  // within this file
      here = link.object;
      continue;
    }
    if (link.type != H5L_TYPE_EXTERNAL) return {};
    named_source next = open_named_source(link.file, here_file, "HDF5_EXT_PREFIX");
    if (!next.opened.f.valid()) {  // missing or not HDF5: after one link, the caller says so
      if (links == 0) return {};
      const std::string why = next.file.empty() ? link.file + " is missing" : next.opened.why;
      if (why.empty()) return {};  // (a file a writer holds open: HDF5 reads it)
      if (os_error != nullptr && next.opened.os_error != 0) *os_error = next.opened.os_error;
      if (os_error != nullptr && next.file.empty()) *os_error = ENOENT;
      return "external links lead to a file that cannot be opened (" + why + "): " + way +
             " -> " + link.file + ":" + link.object;
    }
    external = true;
    opened = std::move(next.opened.f);
    here_file = next.file;
    here = link.object;
    if (here.empty() || here.front() != '/') here = "/" + here;
  }
}

class hdf5_source final : public sample_source {
  /** The errno of a system error that not_a_dataset() met on a file a link leads to (out of
   *  descriptors, no permission), or 0: such an error is an I/O error (exit 5), not damage. */
  mutable int system_errno_ = 0;
  /** error(bad_input, what), or an I/O error where not_a_dataset() met a system error. */
  error diagnosed(const std::string& what) const {
    return system_errno_ != 0 ? error::from_os(errc::io, what, system_errno_)
                              : error(errc::bad_input, what);
  }
  /** What dataset_ names instead of a dataset: a group, or a link to nothing (the name is
   *  there, so "no such dataset" would puzzle). */
  std::string not_a_dataset() const { return not_a_dataset(dataset_); }
  std::string not_a_dataset(const std::string& path) const {
    if (const std::string waits = problems_on_way(path_, path).waits; !waits.empty()) {
      return "cannot be read: " + waits + hdf5_reads_files;
    }
    const char* at = path.c_str();
    if (H5Oexists_by_name(file_.get(), at, H5P_DEFAULT) > 0) {
      H5O_info_t oi{};
      if (H5Oget_info_by_name(file_.get(), at, &oi, H5P_DEFAULT) >= 0 &&
          oi.type == H5O_TYPE_GROUP) {
        return "is a group, not a dataset";
      }
      if (oi.type == H5O_TYPE_DATASET) {  // (a chunk side of 0, say: HDF5 says why)
        h5_id d(H5Dopen2(file_.get(), at, H5P_DEFAULT), H5Dclose);
        const std::string why = d.valid() ? std::string() : last_hdf5_failure().text;
        H5Eclear2(H5E_DEFAULT);
        return "is a dataset that HDF5 cannot open: the file is damaged" +
               (why.empty() ? std::string() : " (" + why + ")");
      }
      return "is not a dataset";
    }
    const link_value link = read_link(file_.get(), path);
    H5Eclear2(H5E_DEFAULT);
    if (link.type != H5L_TYPE_SOFT && link.type != H5L_TYPE_EXTERNAL) {
      return "is a link to nothing this file or its links hold";
    }
    if (const std::string way = link_way_problem(file_.get(), path_, path, &system_errno_);
        !way.empty()) {
      return "is a link that HDF5 cannot follow to its end: " + way;
    }
    if (link.type == H5L_TYPE_SOFT) {
      // The target's own name is there (a link itself) but leads nowhere.
      const bool named = H5Lexists(file_.get(), link.object.c_str(), H5P_DEFAULT) > 0;
      H5Eclear2(H5E_DEFAULT);
      return "is a soft link to " + link.as_written +
             (named ? ", a link that leads to nothing (or back round to this one)"
                    : ", which does not exist");
    }
    const named_source src = open_named_source(link.file, path_, "HDF5_EXT_PREFIX");
    if (src.opened.os_error != 0) system_errno_ = src.opened.os_error;
    // A file that is not there, as a missing input, raw file or source is: an I/O error.
    if (src.file.empty()) system_errno_ = ENOENT;
    const std::string why =
        src.file.empty() ? link.file + " is missing" : missing_in(src, link.object, nullptr);
    return "is an external link to " + link.file + ":" + link.object +
           ", which cannot be opened: " +
           (why.empty() ? link.file + " is missing or holds no " + link.object : why);
  }

 public:
  explicit hdf5_source(const dataset_spec& spec) : path_(spec.path) {
    quiet_hdf5 quiet;
    struct stat st {};
    if (::stat(spec.path.c_str(), &st) != 0) {
      const int e = errno;
      throw error::from_os(errc::io, spec.path + ": cannot open: " +
                                         (e == ENOENT ? std::string("no such file") : std::strerror(e)),
                           e);
    }
    if (S_ISREG(st.st_mode) && st.st_size == 0) {
      throw error(errc::bad_input, spec.path + ": empty (0 bytes), not an HDF5 file");
    }
    if (S_ISDIR(st.st_mode)) {  // as every other input says it
      throw error::from_os(errc::io, spec.path + ": is a directory", EISDIR);
    }
    if (const int e = open_errno(spec.path); e != 0) {
      throw error::from_os(errc::io, spec.path + ": cannot open: " + std::strerror(e), e);
    }
    if (H5Fis_hdf5(spec.path.c_str()) <= 0) {
      throw error(errc::bad_input, spec.path + ": " + not_hdf5_what(spec.path));
    }
    register_builtin_filters();
    file_ = h5_id(H5Fopen(spec.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) {
      // An HDF5 signature, but the library cannot open it: say why, where it says.
      const auto failure = last_hdf5_failure();
      const std::string why = failure.text;
      if (why.find("truncated") != std::string::npos) {
        throw error(errc::bad_input, spec.path + ": a truncated HDF5 file (" + why + ")");
      }
      if (why.find("unable to lock file") != std::string::npos) {
        if (why.find("errno = 11,") != std::string::npos) {  // EAGAIN: someone holds the lock
          throw error(errc::io, spec.path + ": cannot open the HDF5 file: another program has "
                                            "it open for writing (its HDF5 file lock); read it "
                                            "once that program has closed it");
        }
        // No locks on this file system (NFS without a lock daemon, say).
        throw error(errc::io, spec.path + ": cannot open the HDF5 file: " + why +
                                  " (where the file system has no locks, "
                                  "HDF5_USE_FILE_LOCKING=FALSE reads without one)");
      }
      if (why.find("already open for write") == std::string::npos) {
        // The file was there and readable (H5Fis_hdf5 read its signature): a failure without
        // a system error is in its bytes.
        if (!failure.system) {
          throw error(errc::bad_input,
                      spec.path + ": cannot open the HDF5 file: it is damaged, or written in a "
                                  "newer HDF5 format than this dctchop's libhdf5 reads" +
                          (why.empty() ? std::string() : " (" + why + ")"));
        }
        throw error(errc::io, spec.path + ": cannot open the HDF5 file" +
                                  (why.empty() ? std::string() : " (" + why + ")"));
      }
      // Marked open by a writer: one at work in SWMR mode, which readers open as SWMR readers
      // (h5py's swmr=True), or one that stopped without closing the file. (HDF5's own advice,
      // h5clear, would damage the file of a writer at work.)
      file_ = h5_id(H5Fopen(spec.path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT),
                    H5Fclose);
      if (!file_.valid()) {
        throw error(errc::io, spec.path + ": cannot open the HDF5 file: it is marked open for "
                                          "writing (by a writer at work, or one that stopped "
                                          "without closing it; once none has it open, "
                                          "h5clear -s clears the mark)");
      }
      swmr_ = true;
      note_ = spec.path + ": marked open for writing (by a writer at work, or one that stopped "
                          "without closing it): read as a SWMR reader, as the file stands now";
    }
    dataset_ = spec.dataset.empty() ? choose(spec) : spec.dataset;
    if (dataset_.front() != '/') dataset_ = "/" + dataset_;
    const std::string nm = name();
    const way_problems way = problems_on_way(spec.path, dataset_);
    if (!way.waits.empty()) {
      const bool named = way.waits.rfind(nm + " ", 0) == 0;  // (it says where it starts)
      throw error(errc::invalid_argument, (named ? "" : nm + ": ") + way.waits + hdf5_reads_files);
    }
    // Each group on the way in turn: HDF5 fails alike on a missing group ("component not
    // found") and on one that cannot be read (damaged).
    htri_t there = 1;
    std::string on_the_way = "/", why;  // the last part found; why the next one failed
    for (std::size_t at = 1; there > 0 && at <= dataset_.size(); ++at) {
      at = std::min(dataset_.find('/', at), dataset_.size());
      const std::string part = dataset_.substr(0, at);
      there = H5Lexists(file_.get(), part.c_str(), H5P_DEFAULT);
      if (there > 0) on_the_way = part;
      if (there < 0) why = last_hdf5_failure().text;
    }
    if (there < 0) {  // (past a dataset, /images/x: no group to look in, so not there)
      H5O_info_t oi{};
      if (H5Oget_info_by_name(file_.get(), on_the_way.c_str(), &oi, H5P_DEFAULT) >= 0 &&
          oi.type != H5O_TYPE_GROUP) {
        there = 0;
      }
    }
    if (there <= 0) {
      // A group on the way that is a link HDF5 cannot follow (to itself, to a missing file)
      // is no damage: said as for the dataset itself.
      H5L_info_t li{};
      if (there < 0 && on_the_way != "/" &&
          H5Lget_info(file_.get(), on_the_way.c_str(), &li, H5P_DEFAULT) >= 0 &&
          li.type != H5L_TYPE_HARD) {
        const std::string how = not_a_dataset(on_the_way);
        if (how.rfind("is a group", 0) != 0 && how.rfind("is not a", 0) != 0) {
          throw diagnosed(nm + ": " + on_the_way + ", on the way to it, " + how);
        }
      }
      H5Eclear2(H5E_DEFAULT);
      if (there < 0) {  // (a group on the way that cannot be read)
        throw error(errc::bad_input, nm + ": the file is damaged: the groups on the way to the "
                                          "dataset cannot be read" +
                                          (why.empty() ? std::string() : " (" + why + ")"));
      }
      throw error(errc::bad_input, nm + ": no such dataset in the file" + list_hint());
    }
    h5_id probe(H5Dopen2(file_.get(), dataset_.c_str(), H5P_DEFAULT), H5Dclose);
    if (!probe.valid()) {
      // (An external link's message is about the file it leads to: this one's list would
      // mislead.)
      const std::string why = not_a_dataset();
      throw diagnosed(nm + ": " + why +
                      (why.rfind("is an external link", 0) == 0 ? "" : list_hint()));
    }
    {
      h5_id type(H5Dget_type(probe.get()), H5Tclose);
      type_ = numeric_type(type.get(), nm);
      if (H5Tget_class(type.get()) == H5T_ENUM) {  // read as the enum, in native order
        enum_memory_ = h5_id(H5Tget_native_type(type.get(), H5T_DIR_ASCEND), H5Tclose);
      }
    }
    h5_id space(H5Dget_space(probe.get()), H5Sclose);
    const int nd = H5Sget_simple_extent_ndims(space.get());
    if (nd < 0) throw error(errc::bad_input, nm + ": has no simple dataspace");
    if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) {  // h5py.Empty
      throw error(errc::bad_input, nm + ": is an empty dataset (a null dataspace, h5py.Empty): "
                                        "it holds no values");
    }
    std::vector<hsize_t> dims(static_cast<std::size_t>(nd)), max_dims(dims.size());
    if (nd > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), max_dims.data());
    shape_.assign(dims.begin(), dims.end());
    // Chunked datasets: read whole chunks along axis 0, with a cache that holds one slab of
    // chunks (all chunks that share an axis-0 range), so that no chunk is read twice.
    std::size_t cache_bytes = 1 << 20;
    bool external_beside = false;  // external raw files beside the file, not here
    {
      h5_id dcpl(H5Dget_create_plist(probe.get()), H5Pclose);
      // A filter that cannot be loaded, before any output is made. A chunk may have been
      // stored without an optional filter (HDF5 does so when the filter cannot shrink it):
      // that one is refused when the first chunk used it, else when a chunk that did is read.
      for (auto& m : missing_filters(dcpl.get(), nm)) {
        if (!m.optional || first_chunk_uses(probe.get(), m.index)) {
          throw error(errc::bad_input, m.message);
        }
        if (missing_.empty()) missing_ = std::move(m.message);
      }
      {
        u64 data_bytes = type_.itemsize;  // (at most 2^64 - 1: a larger one is refused later)
        for (u64 d : shape_) {
          data_bytes = d != 0 && data_bytes > ~u64(0) / d ? ~u64(0) : data_bytes * d;
        }
        std::string short_note;
        external_beside = external_files_beside(dcpl.get(), nm, data_bytes, short_note);
        if (!short_note.empty()) note_ += (note_.empty() ? "" : "; ") + short_note;
      }
      zero_first_ = gives_no_fill_value(dcpl.get());
      if (zero_first_ && H5Pget_layout(dcpl.get()) != H5D_CHUNKED &&
          H5Pget_external_count(dcpl.get()) == 0) {
        H5D_space_status_t status{};
        if (H5Dget_space_status(probe.get(), &status) >= 0 &&
            status == H5D_SPACE_STATUS_NOT_ALLOCATED && !shape_.empty()) {
          note_ += (note_.empty() ? "" : "; ") + nm +
                   ": its values were never written, and it has no fill value to give (fill "
                   "time never): they read as 0, as in h5py";
        }
        H5Eclear2(H5E_DEFAULT);
      }
      if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL) {
        if (const std::string& c = way.cycle; !c.empty()) {
          throw error(errc::bad_input, nm + ": a virtual dataset whose sources lead back to it (" +
                                           c + "): HDF5 would read it without end");
        }
        if (auto v = missing_virtual_sources(dcpl.get(), nm); !v.empty()) {
          note_ += (note_.empty() ? "" : "; ") + nm + ": " + v;
        }
      }
      if (nd > 0 && H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
        std::vector<hsize_t> chunk(static_cast<std::size_t>(nd));
        H5Pget_chunk(dcpl.get(), nd, chunk.data());
        check_chunk_shape(chunk, dims, max_dims, type_.itemsize, nm);
        preferred_ = std::max<u64>(1, chunk[0]);
        u64 chunk_bytes = type_.itemsize, per_slab = 1;
        for (int i = 0; i < nd; ++i) {
          chunk_bytes *= chunk[static_cast<std::size_t>(i)];
          if (i > 0) per_slab *= (dims[static_cast<std::size_t>(i)] + chunk[static_cast<std::size_t>(i)] - 1) /
                                 chunk[static_cast<std::size_t>(i)];
        }
        // At most 64 MiB; but where a slab of rows is one chunk larger than that (up to 1
        // GiB), one chunk: HDF5 caches none larger than its cache, and decoded such a chunk
        // again for every read of a few MiB (0.013 GB/s for gzip chunks of 512 images; a
        // 281 MiB chunk, past the 256 MiB this was until 2026-12-07, took 20 s, now 1 s).
        constexpr u64 largest_cached = u64(1) << 30;
        const u64 cap = per_slab == 1 && chunk_bytes <= largest_cached
                            ? std::max<u64>(u64(64) << 20, chunk_bytes + (u64(1) << 20))
                            : u64(64) << 20;
        const chunk_counts counted = count_chunks(probe.get(), space.get(), dims, chunk);
        // (Equal: an index that also holds chunks outside the extent, which H5Dget_num_chunks
        // counts in HDF5 1.10, says nothing of the chunks inside.)
        every_chunk_stored_ = counted.known && counted.stored == counted.total;
        if (chunk_bytes > cap && H5Pget_nfilters(dcpl.get()) > 0 &&
            (!counted.known || counted.stored > 0)) {  // (none stored: none decoded)
          const auto mib_text = [](u64 b) {
            return std::to_string((b + (u64(1) << 20) - 1) >> 20) + " MiB";
          };
          note_ += (note_.empty() ? "" : "; ") + nm + ": its compressed chunks, " +
                   mib_text(chunk_bytes) + " each decoded," +
                   (per_slab == 1 ? " are more than the one chunk of up to " +
                                        mib_text(largest_cached) +
                                        " that dctchop lets HDF5 cache"
                                  : " are more than dctchop lets HDF5 cache (" + mib_text(cap) +
                                        "; one chunk of up to " + mib_text(largest_cached) +
                                        " where a chunk holds whole samples)") +
                   ": HDF5 decodes a chunk again for each read of rows in it (a larger "
                   "--chunk-mb reads fewer times; smaller chunks, h5repack -l CHUNK=..., read "
                   "at the speed of the filter)";
        }
        cache_bytes = static_cast<std::size_t>(
            std::min<u64>(std::max<u64>(cache_bytes, chunk_bytes * per_slab + chunk_bytes), cap));
        outputs_ = expected_outputs(dcpl.get(), static_cast<std::size_t>(chunk_bytes));
        if (auto u = unwritten_chunks(counted, zero_first_); !u.empty()) {
          unwritten_ = nm + ": " + u;
          note_ += (note_.empty() ? "" : "; ") + unwritten_;
        }
        // Without filters HDF5 reads a chunk straight into our buffer when it bypasses the
        // cache, and reads a part of one without reading it whole: a cache would only add a
        // copy of every byte. But straight means a read for each run of the chunk's values
        // that lies together in our rows too: a chunk narrower than the rows (h5py's chunks
        // of RGB images hold one channel, (125, 16, 16, 1)) took one read a value, 100 times
        // slower than the data is read through the cache, a chunk a read.
        if (H5Pget_nfilters(dcpl.get()) == 0 &&
            run_bytes(chunk, dims, type_.itemsize) >= straight_run_bytes) {
          cache_bytes = 0;
        }
        hdf5_chunk_.assign(chunk.begin(), chunk.end());
      } else if (nd > 0 && !zero_first_ && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS &&
                 H5Pget_external_count(dcpl.get()) == 0) {  // (no fill value: noted above)
        // Contiguous data are allocated when first written (HDF5's default): none at all is
        // a dataset created and never written, which reads as its fill value without a word,
        // where the same dataset chunked has its unwritten chunks counted above.
        H5D_space_status_t status{};
        if (H5Dget_space_status(probe.get(), &status) >= 0 &&
            status == H5D_SPACE_STATUS_NOT_ALLOCATED) {
          unwritten_ = nm +
                       ": its data were never written (a writer that stopped early?): its "
                       "values read as " + fill_words(zero_first_);
          note_ += (note_.empty() ? "" : "; ") + unwritten_;
        }
        H5Eclear2(H5E_DEFAULT);
      }
    }
    probe.reset();
    h5_id dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    H5Pset_chunk_cache(dapl.get(), 12421, cache_bytes, 1.0);
    if (external_beside) H5Pset_efile_prefix(dapl.get(), "${ORIGIN}");
    dset_ = check(H5Dopen2(file_.get(), dataset_.c_str(), dapl.get()), H5Dclose, errc::bad_input,
                  nm + ": cannot open the dataset");
    h5_id dcpl(H5Dget_create_plist(dset_.get()), H5Pclose);
    if (spec.decode_threads > 0 && !shape_.empty()) {
      h5_id file_type(H5Dget_type(dset_.get()), H5Tclose);
      chunks_ = chunk_reader::make(dset_.get(), dcpl.get(), file_type.get(), read_type(),
                                   shape_, spec.decode_threads);
      if (chunks_) chunks_->expect_every_chunk(every_chunk_stored_);
    }
    const std::string filters = filter_names(pipeline_of(dcpl.get()));
    if (!chunks_) find_contiguous(dcpl.get(), spec.read_threads);
    if (direct_) {
      // (A read splits where it has two pieces or more: input_file::plan_split.)
      reader_ = "HDF5, contiguous: read directly on " +
                (read_threads_ == 1 ? std::string("1 thread")
                                    : "up to " + std::to_string(read_threads_) + " threads");
    } else if (chunks_) {
      const unsigned t = chunks_->threads();
      reader_ = "HDF5 chunks (" + filters + ") decoded by dctchop on " + std::to_string(t) +
                (t == 1 ? " thread" : " threads");
    } else {
      reader_ = filters.empty() ? "HDF5" : "HDF5 (" + filters + ", decoded by HDF5 on one thread)";
    }
  }

  std::string name() const override { return path_ + ":" + dataset_; }
  std::string dataset_path() const override { return dataset_; }
  const npy_dtype& type() const override { return type_; }
  const std::vector<u64>& shape() const override { return shape_; }
  bool rereadable() const override { return true; }
  u64 preferred_rows() const override { return preferred_; }
  std::string note() const override { return note_; }
  std::string unwritten(u64 sample, bool nonfinite) const override {
    if (unwritten_.empty() || sample >= shape_[0]) return {};
    // Where: chunks never written among those of the sample's rows (a 2-D dataset is one
    // image of every row); data never written at all (contiguous) everywhere.
    std::vector<hsize_t> at(shape_.size(), 0);
    if (!hdf5_chunk_.empty()) {
      const u64 first = shape_.size() == 2 ? 0 : sample;
      const u64 end = shape_.size() == 2 ? shape_[0] : sample + 1;
      at[0] = first / hdf5_chunk_[0] * hdf5_chunk_[0];
      for (;;) {
        hsize_t size = 0;
        // (Not look_up_chunk: after a read, HDF5 1.10's H5Dget_chunk_storage_size gives a
        // chunk never written, which its cache then holds filled, a size. This walks the
        // index; an error's path, once.)
        haddr_t address = 0;
        unsigned mask = 0;
        const bool found =
            H5Dget_chunk_info_by_coord(dset_.get(), at.data(), &mask, &address, &size) >= 0;
        H5Eclear2(H5E_DEFAULT);
        if (found && address == HADDR_UNDEF) break;
        if (!next_chunk(at, hdf5_chunk_, shape_, end)) return {};
      }
      at[0] = std::max<hsize_t>(at[0], first);
    }
    if (zero_first_) {  // (the value is said: 0)
      return nonfinite ? std::string() : unwritten_ + ", in this sample too";
    }
    // The value, as HDF5 reads it there (H5Pget_fill_value crashed on a damaged fill-value
    // message, where a read fails cleanly; chunk_reader::fill_value).
    double value = 0;
    const hsize_t one = 1;
    std::vector<hsize_t> ones(at.size(), 1);
    h5_id file_space(H5Dget_space(dset_.get()), H5Sclose);
    h5_id memory_space(H5Screate_simple(1, &one, nullptr), H5Sclose);
    const bool read = file_space.get() >= 0 && memory_space.get() >= 0 &&
                      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, at.data(), nullptr,
                                          ones.data(), nullptr) >= 0 &&
                      H5Dread(dset_.get(), H5T_NATIVE_DOUBLE, memory_space.get(),
                              file_space.get(), H5P_DEFAULT, &value) >= 0;
    H5Eclear2(H5E_DEFAULT);
    if (nonfinite && read && std::isfinite(value)) return {};  // (not the NaN's source)
    char text[40] = "";
    if (read) std::snprintf(text, sizeof text, " (%.9g)", value);
    return unwritten_ + text + ", in this sample too";
  }
  std::string reader() const override { return reader_; }

  void read_rows(u64 first, u64 count, void* dst) override {
    if (count == 0) return;
    quiet_hdf5 quiet;
    const std::size_t nd = shape_.size();
    if (nd == 0) {
      if (zero_first_) std::memset(dst, 0, type_.itemsize);
      check(H5Dread(dset_.get(), read_type(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst),
            errc::io, name() + ": read failed");
      return;
    }
    if (first + count > shape_[0]) throw error(errc::invalid_argument, name() + ": rows out of range");
    if (direct_) {
      direct_->read_at(direct_at_ + first * row_bytes(), dst, count * row_bytes(), "the rows",
                       read_threads_);
      return;
    }
    if (chunks_ && chunks_->read_rows(first, count, dst, name())) return;
    check_hdf5_chunks(first, count);
    const auto sel = select_rows(dset_.get(), shape_, first, count, name());
    decode_scope expect(outputs_);  // dctchop's filters check what they decode against it
    if (zero_first_) std::memset(dst, 0, count * row_bytes());
    errno = 0;
    if (H5Dread(dset_.get(), read_type(), sel.mem_space.get(), sel.file_space.get(),
                H5P_DEFAULT, dst) < 0) {
      const int read_errno = errno;  // (HDF5's open of an external raw file leaves open's)
      const auto [why, in_filter, system] = last_hdf5_failure();
      const std::string rows =
          "read of rows " + std::to_string(first) + ".." + std::to_string(first + count - 1);
      // A chunk stored with an optional filter that cannot be loaded here.
      if (!missing_.empty() && why.find("not registered") != std::string::npos) {
        throw error(errc::bad_input, missing_ + " (" + rows + ")");
      }
      if (in_filter) {  // the file's bytes, not the system, are at fault
        throw error(errc::bad_input, name() + ": " + rows +
                                         " failed: a chunk does not decode through its filters (" +
                                         (why.empty() ? std::string("filter failed") : why) +
                                         "); the file is damaged");
      }
      // An external raw data file (h5py's external=) that the system will not open now: out of
      // descriptors, no permission. An I/O error, not damage.
      if (why.find("external raw data file") != std::string::npos &&
          (read_errno == EMFILE || read_errno == ENFILE || read_errno == EACCES ||
           read_errno == EPERM || read_errno == ENOMEM || read_errno == ELOOP)) {
        throw error::from_os(errc::io,
                             name() + ": " + rows + " failed: an external raw data file " +
                                 "cannot be opened: " + std::strerror(read_errno),
                             read_errno);
      }
      if (!system) {  // no system call failed: the file's structure is at fault
        throw error(errc::bad_input, name() + ": " + rows + " failed: the file is damaged" +
                                         (why.empty() ? std::string() : " (" + why + ")"));
      }
      throw error(errc::io, name() + ": " + rows + " failed" +
                                (why.empty() ? std::string() : " (" + why + ")"));
    }
  }

 private:
  /** A contiguous dataset whose bytes are what a read gives (the memory type equals the
   *  file's: no conversion, no byte swap), stored in its HDF5 file (not in external files),
   *  its place allocated and inside the file: its rows are read with pread, split over
   *  `threads` (input_file's split read_at), where H5Dread copies them on one thread. The
   *  file is the one HDF5 reads the dataset from (an external link's target, not the file
   *  named), through HDF5's plain POSIX driver (sec2: file addresses are offsets in it),
   *  opened again and checked to be the same file. Not for a file opened as a SWMR reader (a
   *  writer at work), or open for writing in this process. Anything else is left to HDF5. */
  void find_contiguous(hid_t dcpl, unsigned threads) {
    if (swmr_ || shape_.empty() || H5Pget_layout(dcpl) != H5D_CONTIGUOUS ||
        H5Pget_external_count(dcpl) != 0) {
      return;
    }
    const h5_id file_type(H5Dget_type(dset_.get()), H5Tclose);
    if (!file_type.valid() || H5Tequal(file_type.get(), read_type()) <= 0) return;
    const u64 bytes = rows() * row_bytes();
    H5D_space_status_t status{};
    // (Unallocated, H5Dget_offset's HADDR_UNDEF plus a user block's size would pass for an
    // address.)
    if (bytes == 0 || H5Dget_space_status(dset_.get(), &status) < 0 ||
        status != H5D_SPACE_STATUS_ALLOCATED || H5Dget_storage_size(dset_.get()) != bytes) {
      return;
    }
    const haddr_t at = H5Dget_offset(dset_.get());  // from the file's first byte (user block too)
    if (at == HADDR_UNDEF) return;
    const h5_id file(H5Iget_file_id(dset_.get()), H5Fclose);  // the dataset's own file
    if (!file.valid()) return;
    // Not a file this process also has open for writing (h5py beside dctchop's Python
    // module, on the same HDF5): HDF5 shares the open file, whose raw data may still be in
    // its buffers, unwritten.
    unsigned intent = 0;
    if (H5Fget_intent(file.get(), &intent) < 0 || (intent & H5F_ACC_RDWR) != 0) return;
    const h5_id fapl(H5Fget_access_plist(file.get()), H5Pclose);
    void* handle = nullptr;
    if (!fapl.valid() || H5Pget_driver(fapl.get()) != H5FD_SEC2 ||
        H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
      return;
    }
    const int hdf5_fd = *static_cast<int*>(handle);
    const ssize_t name_len = H5Fget_name(file.get(), nullptr, 0);
    if (name_len <= 0) return;
    std::string name(static_cast<std::size_t>(name_len) + 1, '\0');
    if (H5Fget_name(file.get(), name.data(), name.size()) != name_len) return;
    name.resize(static_cast<std::size_t>(name_len));
    // (A name that leads elsewhere now, a FIFO say, whose open would wait: HDF5 reads it.)
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    try {
      input_file f = input_file::open(name);
      if (!f.seekable() || !f.same_file_as(hdf5_fd) || at > f.size() || bytes > f.size() - at) {
        return;
      }
      f.set_truncation_code(errc::bad_input);  // a file cut short while read is bad input
      direct_ = std::move(f);
      direct_at_ = at;
      read_threads_ = std::max(threads, 1U);
    } catch (const error&) {
      // Not to be opened a second time (permissions changed since HDF5 opened it): HDF5
      // reads it.
    }
  }

  /** No dataset named: see choose_array. */
  std::string choose(const dataset_spec& spec) {
    std::vector<std::string> broken;
    auto all = list_datasets(file_.get(), path_, &broken);
    // One that leads to a FIFO is refused, as where it is named (it was "holds no dataset at
    // all", exit 3, or another dataset chosen in its place).
    for (const auto& link : broken) {
      if (const auto way = problems_on_way(path_, link); !way.waits.empty()) {
        // Named by this file's own link first, as where it is named (the walk names the
        // last link of a chain).
        const std::string here = path_ + ":" + link;
        const bool said = way.waits.rfind(here + " ", 0) == 0;
        throw error(errc::invalid_argument,
                    (said ? "" : here + ": ") + way.waits + hdf5_reads_files);
      }
    }
    try {
      return choose_array(path_, std::move(all), spec,
                          {"dataset", "FILE.h5:/path or --dataset", "--labels FILE.h5:/path"}, note_);
    } catch (const error& e) {
      // None fits: an external link that leads nowhere may be where the data was meant to be.
      if (e.code() != errc::bad_input || broken.empty()) throw;
      std::string why = e.what();
      for (const auto& link : broken) why += "; " + link + " " + not_a_dataset(link);
      throw diagnosed(why);
    }
  }

  /** A virtual dataset's source files that cannot be found where HDF5 looks (names_from:
   *  under HDF5_VDS_PREFIX, beside this file, in the working directory), as a note: HDF5
   *  reads their rows as the fill value without a word, and h5py too. "" when all are
   *  there. A source that is there but gives no data
   *  (not HDF5, damaged, without the dataset, or smaller than the part mapped from it),
   *  which HDF5 would also read as the fill value, is an error(bad_input) naming it. */
  std::string missing_virtual_sources(hid_t dcpl, const std::string& nm) const {
    std::size_t count = 0;
    if (H5Pget_virtual_count(dcpl, &count) < 0) return {};
    std::set<std::string> missing;
    // The source file of the last mapping, kept open for the next: a VDS may map thousands
    // of parts from one file, one after another (and thousands of files: one at a time).
    std::optional<std::string> open_name;
    named_source open_file;
    auto text_of = [&](auto get, std::size_t i) {
      const ssize_t n = get(dcpl, i, nullptr, 0);
      if (n <= 0) return std::string();
      std::string t(static_cast<std::size_t>(n) + 1, '\0');
      if (get(dcpl, i, t.data(), t.size()) < 0) return std::string();
      t.resize(static_cast<std::size_t>(n));
      return t;
    };
    for (std::size_t i = 0; i < count; ++i) {
      const std::string name = text_of(H5Pget_virtual_filename, i);
      const std::string object = text_of(H5Pget_virtual_dsetname, i);
      // A printf-like pattern of an unlimited mapping (%b) names no one file.
      if (name.empty() || name.find('%') != std::string::npos || object.find('%') != std::string::npos) {
        continue;
      }
      if (name != "." && open_name != name) {
        open_file = named_source{};  // (closed before the next opens)
        open_file = open_named_source(name, path_, "HDF5_VDS_PREFIX");
        open_name = name;
      }
      if (name != "." && open_file.file.empty()) {
        missing.insert(name);
        continue;
      }
      // This file by its own name (opened again, it might not open as this one did: SWMR).
      const bool here = name == "." || same_file(open_file.file, path_);
      // What the mapping takes from the source: a selection of all of it (whose extent HDF5
      // may have set to the source's own by now) takes as many values as the virtual
      // selection has; one of part of it reaches its last index on each axis. (Unlimited
      // selections: nothing to check.)
      source_need need;
      h5_id sel(H5Pget_virtual_srcspace(dcpl, i), H5Sclose);
      h5_id vsel(H5Pget_virtual_vspace(dcpl, i), H5Sclose);
      if (sel.valid() && vsel.valid() && H5Sget_select_npoints(sel.get()) > 0) {
        const int nd = H5Sget_simple_extent_ndims(sel.get());
        std::vector<hsize_t> lo(static_cast<std::size_t>(std::max(nd, 0))), hi(lo.size());
        const hssize_t mapped = H5Sget_select_npoints(vsel.get());
        if (H5Sget_select_type(sel.get()) == H5S_SEL_ALL) {
          if (mapped > 0) need.values = static_cast<hsize_t>(mapped);
        } else if (nd > 0 && H5Sget_select_bounds(sel.get(), lo.data(), hi.data()) >= 0 &&
                   std::none_of(hi.begin(), hi.end(), [](hsize_t h) { return h == H5S_UNLIMITED; })) {
          need.reach = hi;
        }
      }
      H5Eclear2(H5E_DEFAULT);
      const auto* r = need.reach.empty() && !need.values ? nullptr : &need;
      const std::string why =
          here ? missing_dataset(file_.get(), path_, object, r) : missing_in(open_file, object, r);
      if (!why.empty()) {
        const std::string what =
            nm + ": a virtual dataset whose source " +
            (name == "." ? object + " (in this file)" : name + ":" + object) +
            " cannot give the rows mapped to it: " + why;
        // (a file it cannot open for a system error: out of descriptors, no permission)
        const int e = here ? 0 : open_file.opened.os_error;
        if (e != 0) throw error::from_os(errc::io, what, e);
        throw error(errc::bad_input, what);
      }
    }
    if (missing.empty()) return {};
    const char* prefix = std::getenv("HDF5_VDS_PREFIX");
    const bool prefixed = prefix != nullptr && *prefix != '\0';
    return "a virtual dataset whose source file" + std::string(missing.size() > 1 ? "s " : " ") +
           name_list(missing) + (missing.size() > 1 ? " are" : " is") +
           " not found (" + (prefixed ? "under HDF5_VDS_PREFIX, " : "") +
           "beside it, or here): the rows mapped to " +
           (missing.size() > 1 ? "them" : "it") + " read as the fill value";
  }

  /** A chunked dataset's chunks: how many its shape has, how many its index holds. */
  struct chunk_counts {
    bool known = false;  // (false: HDF5 cannot say)
    u64 total = 0, stored = 0;
  };
  static chunk_counts count_chunks(hid_t dset, hid_t space, const std::vector<hsize_t>& dims,
                                   const std::vector<hsize_t>& chunk) {
    chunk_counts c;
    c.total = 1;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (chunk[i] == 0) return {};
      c.total *= (dims[i] + chunk[i] - 1) / chunk[i];
    }
    hsize_t stored = 0;
    if (c.total == 0 || H5Dget_num_chunks(dset, space, &stored) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
    c.stored = stored;
    c.known = true;
    return c;
  }

  /** Chunks of a chunked dataset that were never written (a writer that preallocated the
   *  dataset and stopped early), as a note: HDF5 reads their values as the fill value without
   *  a word, and h5py too. "" when every chunk is stored (or HDF5 cannot say). */
  static std::string unwritten_chunks(const chunk_counts& c, bool no_fill) {
    if (!c.known || c.stored >= c.total) return {};
    const u64 missing = c.total - c.stored;
    return (c.total == 1 ? std::string("its one chunk was")
                         : std::to_string(missing) + " of its " + std::to_string(c.total) +
                               (missing == 1 ? " chunks was" : " chunks were")) +
           " never written (a writer that stopped early?): " +
           (missing == 1 ? "its values read as " : "their values read as ") + fill_words(no_fill);
  }

  /** What values HDF5 does not store read as. */
  static std::string fill_words(bool no_fill) {
    return no_fill ? "0 (it has no fill value to give: fill time never, or no fill value), as "
                     "in h5py"
                   : "the dataset's fill value";
  }

  /** Whether HDF5 leaves the values it does not store (unwritten chunks, unallocated data)
   *  as they were in the reader's buffer: fill time never (netCDF-4's NC_NOFILL), or no fill
   *  value defined. dctchop's buffers are reused: they are zeroed before such a read, as h5py
   *  reads those values (into numpy.zeros), where they were a previous read's data, or
   *  memory of the process, written into the archive. */
  static bool gives_no_fill_value(hid_t dcpl) {
    H5D_fill_time_t when{};
    H5D_fill_value_t value{};
    if (H5Pget_fill_time(dcpl, &when) < 0 || H5Pfill_value_defined(dcpl, &value) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return true;  // (zeroing first is right whatever HDF5 does)
    }
    return when == H5D_FILL_TIME_NEVER || value == H5D_FILL_VALUE_UNDEFINED;
  }

  /** A dataset stored in external raw files (H5Pset_external): HDF5 looks for relative names
   *  in the working directory, so one run from another folder fails to read the file beside
   *  its HDF5 file. True when they are there and not here (to be read with the prefix
   *  ${ORIGIN}); an error naming them when they are in neither place. False otherwise, and
   *  when HDF5_EXTFILE_PREFIX says where to look. */
  bool external_files_beside(hid_t dcpl, const std::string& nm, u64 data_bytes,
                             std::string& note) const {
    namespace fs = std::filesystem;
    const int count = H5Pget_external_count(dcpl);
    if (count <= 0) return false;
    if (const char* prefix = std::getenv("HDF5_EXTFILE_PREFIX"); prefix && *prefix) return false;
    const fs::path here = fs::path(path_).parent_path();
    bool all_here = true, all_beside = true;
    std::set<std::string> missing, all, folders;
    struct segment {
      std::string name;
      u64 offset, need;  // the data's bytes in this file, from offset
    };
    std::vector<segment> segments;
    u64 left = data_bytes;  // the data fills the segments in order
    for (int i = 0; i < count; ++i) {
      char name[4096] = {};
      off_t offset = 0;
      hsize_t size = 0;
      if (H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof name, name, &offset, &size) < 0) {
        return false;
      }
      const u64 need = std::min<u64>(left, size);  // (H5F_UNLIMITED: as much as is left)
      left -= need;
      if (need > 0) segments.push_back({name, static_cast<u64>(offset), need});
      std::error_code ec;
      // A directory of that name is no file to read (HDF5 opens it, and its read fails as
      // "damaged"): a file in the other place is read instead, else the directory named.
      const bool relative = fs::path(name).is_relative();
      const bool cwd_dir = fs::is_directory(name, ec);
      const bool beside_dir = relative && fs::is_directory(here / name, ec);
      const bool at_cwd = !cwd_dir && fs::exists(name, ec);
      const bool beside = relative && !beside_dir && fs::exists(here / name, ec);
      all_here = all_here && at_cwd;
      all_beside = all_beside && beside;
      if (!at_cwd && !beside && (cwd_dir || beside_dir)) {
        folders.insert(cwd_dir ? name : (here / name).string());
      } else if (!at_cwd && !beside) {
        missing.insert(name);
      }
      all.insert(name);
    }
    if (!folders.empty()) {  // (an I/O error, EISDIR, as for an input named so)
      throw error::from_os(errc::io,
                           nm + ": its values are stored in the external raw file" +
                               (folders.size() > 1 ? "s " : " ") + name_list(folders) + ", but " +
                               (folders.size() > 1 ? "these are directories"
                                                   : "that is a directory"),
                           EISDIR);
    }
    if (missing.empty() && !all_here && !all_beside) {
      // Some only here, some only beside the file: one prefix cannot reach them all.
      throw error(errc::io, nm + ": its values are stored in the external raw files " +
                                name_list(all) +
                                ", some found only here and some only beside the HDF5 file; "
                                "put them in one folder (HDF5_EXTFILE_PREFIX names it)");
    }
    if (!missing.empty()) {
      throw error(errc::io, nm + ": its values are stored in the external raw file" +
                                (missing.size() > 1 ? "s " : " ") + name_list(missing) +
                                ", not found beside the HDF5 file or here (HDF5_EXTFILE_PREFIX "
                                "names the folder that holds " +
                                (missing.size() > 1 ? "them)" : "it)"));
    }
    // A file shorter than the data it holds: HDF5 reads zeros past its end, without a word.
    // (A writer that stopped early leaves one so: HDF5 writes no fill values there.)
    std::set<std::string> short_files;
    for (const segment& g : segments) {
      std::error_code ec;
      const fs::path at = all_here ? fs::path(g.name) : here / g.name;
      const auto size = fs::file_size(at, ec);
      if (!ec && size < g.offset + g.need) short_files.insert(g.name);
    }
    if (!short_files.empty()) {
      note = nm + ": the external raw file" + (short_files.size() > 1 ? "s " : " ") +
             name_list(short_files) + (short_files.size() > 1 ? " end" : " ends") +
             " before the values stored in " + (short_files.size() > 1 ? "them" : "it") +
             " (never written, or cut short?): those past the end read as 0";
    }
    return !all_here;  // (then all beside the file)
  }

  std::string list_hint() const {
    try {
      const auto all = list_datasets(file_.get(), path_);
      return all.empty() ? std::string(" (the file holds no dataset)")
                         : " (datasets: " + listing(all) + ")";
    } catch (const error&) {  // (a damaged group elsewhere: the name is still not there)
      return " (and some of its groups cannot be read: the file is damaged)";
    }
  }

  /** The type values are read as: the native numeric type, or an enum's own. */
  hid_t read_type() const {
    return enum_memory_.valid() ? enum_memory_.get() : memory_type(type_);
  }

  std::string path_, dataset_, note_, reader_;
  h5_id enum_memory_;
  std::string missing_;  // an optional filter that cannot be loaded: the message naming it
  std::vector<filter_output> outputs_;  // what dctchop's filters decode a chunk to
  h5_id file_, dset_;
  std::unique_ptr<chunk_reader> chunks_;  // compressed chunks decoded on several threads
  npy_dtype type_;
  std::vector<u64> shape_;
  u64 preferred_ = 1;
  bool swmr_ = false;                 // opened as a SWMR reader
  std::string unwritten_;  // the part of note_ that says values were never written
  bool zero_first_ = false;           // HDF5 leaves unstored values alone: gives_no_fill_value
  bool every_chunk_stored_ = false;   // the chunk index counts as many chunks as the shape has
  std::vector<u64> hdf5_chunk_;       // a chunked dataset's chunk shape

  /** The chunks that rows [first, first + count) of a chunked dataset that HDF5 reads touch
   *  (no filters, or ones dctchop does not decode: shuffle alone, fletcher32, szip, ...),
   *  where the index counts every chunk as stored: one its lookup does not find (a key whose
   *  coordinate was damaged) read as the fill value, exit 0. (A key whose size was damaged
   *  to fewer bytes than an unfiltered chunk HDF5 reads as it says, into its chunk cache,
   *  and copies the rest of that buffer too, as h5py gets it: no lookup but one that walks
   *  the whole index shows the size in HDF5 1.10, so that is left.) */
  void check_hdf5_chunks(u64 first, u64 count) const {
    if (hdf5_chunk_.empty() || !every_chunk_stored_) return;
    const std::size_t nd = shape_.size();
    std::vector<hsize_t> offset(nd, 0);
    offset[0] = first / hdf5_chunk_[0] * hdf5_chunk_[0];
    for (;;) {
      hsize_t size = 0;
      if (look_up_chunk(dset_.get(), offset, size) == chunk_state::never_written) {
        missing_chunk(name(), offset[0]);
      }
      if (!next_chunk(offset, hdf5_chunk_, shape_, first + count)) return;
    }
  }
  std::optional<input_file> direct_;  // a contiguous dataset, read with pread (find_contiguous)
  u64 direct_at_ = 0;                 // its first byte in the file
  unsigned read_threads_ = 1;
};

// ---- sink ---------------------------------------------------------------------------------

class hdf5_sink final : public sample_sink {
 public:
  hdf5_sink(const dataset_spec& spec, const npy_dtype& type, const std::vector<u64>& shape,
            bool overwrite, const nlohmann::json& attributes)
      : path_(spec.path), dataset_(spec.dataset.empty() ? hdf5_default_dataset : spec.dataset), type_(type),
        shape_(shape), overwrite_(overwrite) {
    if (dataset_.front() != '/') dataset_ = "/" + dataset_;
    target_ = check_output_path(path_, overwrite, /*regular_only=*/true);
    refuse_locked_output(target_, path_);  // (a file another program writes, as output_file)
    quiet_hdf5 quiet;
    // The output appears complete or not at all: written under a temporary name and named by
    // finish(). Large objects (the data) start on 4 KiB boundaries, for direct I/O.
    h5_id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_alignment(fapl.get(), direct_min_bytes, direct_writer::align);
    // HDF5 opens its file by name (an unnamed O_TMPFILE cannot be opened with O_CREAT through
    // /proc), so the file is made in a folder of its own beside the output, ".NAME.tmpXXXX/",
    // that only this user may enter, and HDF5 and we reach it through our descriptor of that
    // folder (/proc/self/fd/N/NAME): names that someone else could change are never used. A
    // temporary file beside the output, reopened by its name, could be swapped for a symlink
    // in a shared folder: HDF5 truncated and wrote the file the link named.
    // Without /proc there is no name for the folder that only its descriptor reaches: the
    // file would be opened through a name others may change, which is refused (before
    // anything is made).
    if (::access("/proc/self/fd", X_OK) != 0) {
      throw error::from_os(errc::io, path_ + ": an HDF5 output needs /proc (HDF5 opens its "
                                             "file by name, here through /proc/self/fd), which "
                                             "is not mounted",
                           errno);
    }
    temp_ = create_temp_beside(target_.path, [&](const std::string& candidate) {
      if (::mkdir(candidate.c_str(), 0700) == 0) return true;
      if (errno != EEXIST) refuse_temp_file(path_, target_.path);
      return false;  // taken: another name
    });
    struct stat made {};
    // An O_PATH descriptor first, which needs no permission on the folder: a umask that
    // takes the owner's bits (0477, 0700) made it d-wx------ or d---------, which could not
    // be opened to be given them (refused as "changed", and the folder left behind).
    dir_fd_ = ::open(temp_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    // (Ours, and for no one else: not another's folder put in its place. 0700 whatever the
    // umask.)
    const bool ours = dir_fd_ >= 0 && ::fstat(dir_fd_, &made) == 0 &&
                      made.st_uid == ::geteuid() && (made.st_mode & 0077) == 0;
    int opened = -1;
    // 0700, and the set-group-ID bit that a folder made in a set-group-ID folder inherits:
    // the file made in it then takes that folder's group, as any output made there does (a
    // chmod to 0700 dropped it: the HDF5 output took the user's group). Not changed when it
    // already is so: a chmod by a user outside the folder's group drops the bit.
    const mode_t want = 0700 | (made.st_mode & S_ISGID);
    if (ours && ((made.st_mode & 07777) == want ||
                 ::chmod(descriptor_path(dir_fd_).c_str(), want) == 0)) {
      opened = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (opened < 0) {
      const int e = errno;
      const std::string folder = temp_;  // (abandon() clears it)
      // A limit on open files or memory, not a change: the folder is ours, and where no
      // descriptor of it could be had, it goes by its name (empty: just made). Each retry of
      // a job under `ulimit -n 4` left one behind, "changed while it was being made".
      const bool limit = (ours || dir_fd_ < 0) && (e == EMFILE || e == ENFILE || e == ENOMEM);
      const bool by_name = dir_fd_ < 0;  // (with a descriptor, abandon() removes it)
      // Another's folder in its place is left alone (abandon() would remove it, empty).
      if (!ours && dir_fd_ >= 0) ::close(std::exchange(dir_fd_, -1));
      abandon();
      if (limit) {
        if (by_name) ::rmdir(folder.c_str());
        throw error::from_os(errc::io, path_ + ": cannot open its temporary folder " + folder +
                                           ": " + std::strerror(e),
                             e);
      }
      throw error::from_os(errc::io, path_ + ": its temporary folder " + folder +
                                         " changed while it was being made; try again", e);
    }
    ::close(std::exchange(dir_fd_, opened));
    leaf_ = std::filesystem::path(target_.path).filename().string();
    own_fd_ = ::openat(dir_fd_, leaf_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    if (own_fd_ < 0) {
      const std::string action = "create its temporary file in " + temp_;
      const error e = os_error(path_, action.c_str());
      abandon();
      throw e;
    }
    // HDF5 opens the file by name for reading and writing: a umask that leaves the owner no
    // write or read bit (0277 gives 0400) refused that to anyone but root. The file is ours to
    // write meanwhile, and gets the umask's mode back once HDF5 holds it open.
    struct stat created {};
    const bool lend_access = ::fstat(own_fd_, &created) == 0 &&
                             (created.st_mode & 0600) != 0600 &&
                             ::fchmod(own_fd_, (created.st_mode & 07777) | 0600) == 0;
    errno = 0;
    const hid_t f = H5Fcreate(temp_file().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
    if (f < 0) {
      const int e = errno;
      abandon();
      errno = e;  // (the clean-up's own is not the reason)
      write_failed(path_ + ": cannot create a temporary HDF5 file beside it");
    }
    file_ = h5_id(f, H5Fclose);
    if (lend_access) (void)::fchmod(own_fd_, created.st_mode & 07777);
    keep_mode_and_owner(own_fd_, target_);  // from the start: a temporary file is named
    try {
      behind_ = write_behind(own_fd_);
      dset_ = make_dataset(dataset_, type_, shape_, true);
      for (const auto& [key, value] : attributes.items()) write_attribute(dset_.get(), key, value);
      if (direct_data_) find_data_address();
    } catch (...) {
      abandon();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  ~hdf5_sink() override {
    if (!finished_) {
      abandon();
    } else if (own_fd_ >= 0) {
      ::close(own_fd_);
    }
  }

  /** Drop an unfinished output: close everything and delete the temporary file. */
  /** error(io) `what`, with why: errno of a failed write() (a full disk), else HDF5's text. */
  [[noreturn]] static void write_failed(const std::string& what) {
    const int e = errno;
    std::string why = e != 0 ? std::strerror(e) : last_hdf5_failure().text;
    why = why.substr(0, why.find_first_of(",\n"));  // HDF5's text goes on over lines
    throw error::from_os(errc::io, what + (why.empty() ? std::string() : ": " + why), e);
  }

  void abandon() noexcept {
    direct_.reset();  // stops its thread before the descriptor closes
    behind_ = {};
    if (own_fd_ >= 0) ::close(own_fd_);
    own_fd_ = -1;
    quiet_hdf5 quiet;
    divert_abandoned_file();
    dset_.reset();
    file_.reset();
    if (dir_fd_ >= 0 && !leaf_.empty()) ::unlinkat(dir_fd_, leaf_.c_str(), 0);
    remove_temp_folder();
  }

  /** The temporary file, by a name that reaches it through our descriptor of its folder. */
  std::string temp_file() const { return descriptor_path(dir_fd_) + "/" + leaf_; }

  /** Removes the (empty) temporary folder, when its name is still ours: another's folder
   *  put in its place is left alone. */
  void remove_temp_folder() noexcept {
    struct stat ours {}, named {};
    if (dir_fd_ >= 0 && ::fstat(dir_fd_, &ours) == 0 && ::lstat(temp_.c_str(), &named) == 0 &&
        ours.st_dev == named.st_dev && ours.st_ino == named.st_ino) {
      ::rmdir(temp_.c_str());
    }
    if (dir_fd_ >= 0) ::close(std::exchange(dir_fd_, -1));
    temp_.clear();
  }

  std::string name() const override { return path_ + ":" + dataset_; }

  /** HDF5 writes its metadata when a dataset and file close. An abandoned output is deleted
   *  anyway, so its descriptor is first pointed at an anonymous memory file: the close then
   *  does not fail on the full disk that may have stopped us. (A failed close leaves HDF5 1.10
   *  in a state that crashes in its exit handler. Past `ulimit -f` the memory file is limited
   *  too, and the close can still fail: the dctchop command also turns the handler off.) */
  void divert_abandoned_file() noexcept {
    void* handle = nullptr;
    if (!file_.valid() || H5Fget_vfd_handle(file_.get(), H5P_DEFAULT, &handle) < 0 ||
        handle == nullptr) {
      return;
    }
    const int hdf5_fd = *static_cast<int*>(handle);  // the sec2 driver's handle is its fd
    const int mem = ::memfd_create("dctchop-abandoned-hdf5", MFD_CLOEXEC);
    if (mem < 0) return;
    ::dup3(mem, hdf5_fd, O_CLOEXEC);
    ::close(mem);
  }

  void write_rows(const void* src, u64 count) override {
    if (count == 0) return;
    quiet_hdf5 quiet;
    const std::size_t nd = shape_.size();
    if (nd == 0 || rows_ + count > shape_[0]) {
      throw error(errc::invalid_argument, name() + ": more rows written than the shape holds");
    }
    if (direct_) {
      direct_->append(src, count * row_bytes_);
      rows_ += count;
      return;
    }
    const auto sel = select_rows(dset_.get(), shape_, rows_, count, name());
    errno = 0;
    if (H5Dwrite(dset_.get(), memory_type(type_), sel.mem_space.get(), sel.file_space.get(),
                 H5P_DEFAULT, src) < 0) {
      write_failed(name() + ": cannot write");
    }
    rows_ += count;
    struct stat st {};
    if (::fstat(own_fd_, &st) == 0) behind_.advance(static_cast<u64>(st.st_size));
  }

  // ---- the direct path: the rows written by us at the address HDF5 allocated

  /** With early allocation the data has its place in the file from the start (one
   *  contiguous block: found at once, where the chunks of a chunked dataset each took a
   *  lookup that HDF5 1.10 answers by walking its whole index, quadratic in their number).
   *  Any surprise (no address, an unaligned one) leaves the writing to HDF5. */
  void find_data_address() {
    const haddr_t a = H5Dget_offset(dset_.get());
    if (a != HADDR_UNDEF) direct_ = direct_writer::start(own_fd_, path_, a);
  }

  bool add_side_dataset(const std::string& name, const npy_dtype& type,
                        const std::vector<u64>& shape, const row_source& rows) override {
    quiet_hdf5 quiet;
    const std::string full = name.front() == '/' ? name : "/" + name;
    h5_id d = make_dataset(full, type, shape, false);
    if (shape.empty()) {  // a scalar: one value
      std::vector<std::byte> one(type.itemsize);
      rows(0, 1, one.data());
      errno = 0;
      if (H5Dwrite(d.get(), memory_type(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, one.data()) < 0) {
        write_failed(path_ + ":" + full + ": cannot write");
      }
      close_dataset(d, path_ + ":" + full + ": cannot write");
      return true;
    }
    u64 row = type.itemsize;
    for (std::size_t i = 1; i < shape.size(); ++i) row *= shape[i];
    std::vector<hsize_t> start(shape.size(), 0), count(shape.begin(), shape.end());
    const h5_id file_space =
        check(H5Dget_space(d.get()), H5Sclose, errc::io, path_ + ":" + full + ": no dataspace");
    for_each_row_piece(shape[0], row, rows, [&](const void* p, u64 first, u64 n) {
      start[0] = first;
      count[0] = n;
      check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            errc::internal, full + ": hyperslab");
      h5_id mem(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
      errno = 0;
      if (H5Dwrite(d.get(), memory_type(type), mem.get(), file_space.get(), H5P_DEFAULT, p) < 0) {
        write_failed(path_ + ":" + full + ": cannot write");
      }
    });
    close_dataset(d, path_ + ":" + full + ": cannot write");
    return true;
  }

  /** Close a dataset that was written: HDF5 writes the data it kept in its sieve buffer (less
   *  than 64 KiB) then, and a failure there (a full disk) would otherwise go unseen. H5Dclose
   *  frees the identifier even when the write fails. */
  static void close_dataset(h5_id& d, const std::string& what) {
    errno = 0;
    if (d.valid() && H5Dclose(d.release()) < 0) write_failed(what);
  }

  void prepare() override {
    if (prepared_) return;
    const u64 want = shape_.empty() ? 1 : shape_[0];
    if (!shape_.empty() && rows_ != want) {
      throw error(errc::invalid_argument, name() + ": finished with " + std::to_string(rows_) + " of " +
                                      std::to_string(want) + " rows");
    }
    if (direct_) {
      direct_->finish();  // the bytes after the data are HDF5's, never written over
      direct_.reset();
    }
    {
      quiet_hdf5 quiet;
      close_dataset(dset_, name() + ": cannot write");
      // The data is written; what fails here is HDF5's metadata (a full disk, `ulimit -f`):
      // say what HDF5 says, as it is the only one that knows.
      errno = 0;  // set by a failed write(), else HDF5's own text
      if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) {
        write_failed(path_ + ": cannot write the HDF5 file's metadata");
      }
      const hid_t f = file_.release();
      if (H5Fclose(f) < 0) {
        throw error(errc::io, path_ + ": closing the HDF5 file failed");
      }
    }
    // EINVAL: nothing to flush. (On failure the destructor removes the temporary file.)
    flush_written(own_fd_, behind_, path_);
    prepared_ = true;
  }

  void finish() override {
    prepare();
    // (publish_temp removes the file when it fails; the destructor then the folder.)
    publish_temp(-1, temp_file(), target_.path, path_, overwrite_, own_fd_, sync_folder_);
    finished_ = true;
    remove_temp_folder();
  }
  void defer_folder_sync() noexcept override { sync_folder_ = false; }
  void sync_folder() noexcept override {
    // (own_fd_ is open until the destructor: the file synced once more where the folder
    // cannot be, as publish_temp does.)
    if (finished_ && !sync_folder_of(target_.path) && own_fd_ >= 0) (void)::fsync(own_fd_);
  }
  void withdraw() noexcept override {
    if (finished_ && !target_.replaces) {
      ::unlink(target_.path.c_str());
      sync_folder_of(target_.path);
    }
  }

 private:
  h5_id make_dataset(const std::string& name, const npy_dtype& type, const std::vector<u64>& shape,
                     bool for_direct) {
    const std::size_t nd = shape.size();
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    h5_id space(nd == 0 ? H5Screate(H5S_SCALAR)
                        : H5Screate_simple(static_cast<int>(nd), dims.data(), nullptr),
                H5Sclose);
    // No modification times in the objects (h5py's default too): the same archive decodes to
    // the same bytes, run after run (each dataset's header held the time it was made).
    h5_id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
    H5Pset_obj_track_times(gcpl.get(), false);
    for (auto slash = name.find('/', 1); slash != std::string::npos;
         slash = name.find('/', slash + 1)) {  // "/train/images" makes /train
      const std::string group = name.substr(0, slash);
      if (H5Lexists(file_.get(), group.c_str(), H5P_DEFAULT) > 0) continue;
      H5Eclear2(H5E_DEFAULT);
      h5_id g(H5Gcreate2(file_.get(), group.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
              H5Gclose);
    }
    H5Eclear2(H5E_DEFAULT);
    h5_id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl.get(), 1);  // (what the loop above could not make)
    h5_id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_obj_track_times(dcpl.get(), false);
    u64 bytes = type.itemsize;
    for (auto d : shape) bytes *= d;  // (the sources' shapes are checked against overflow)
    if (for_direct && name == dataset_ && nd > 0 && bytes >= direct_min_bytes) {
      // Contiguous, its place allocated now, nothing written into it but our data: the
      // direct path (find_data_address). Rows stream into it in order, and a reader's
      // slice of samples is one read.
      H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
      H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
      H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
      direct_data_ = true;
      row_bytes_ = bytes / shape[0];
    }
    return check(H5Dcreate2(file_.get(), name.c_str(), file_type(type), space.get(), lcpl.get(),
                            dcpl.get(), H5P_DEFAULT),
                 H5Dclose, errc::io, path_ + ":" + name + ": cannot create the dataset");
  }

  void add_attributes(const nlohmann::json& attributes) override {
    quiet_hdf5 quiet;
    for (const auto& [key, value] : attributes.items()) write_attribute(dset_.get(), key, value);
  }

  /** One attribute of obj (the data), from a JSON string or number; others are skipped. */
  void write_attribute(hid_t obj, const std::string& key, const nlohmann::json& v) {
    h5_id space(H5Screate(H5S_SCALAR), H5Sclose);
    const auto put = [&](hid_t file_type, hid_t memory_type, const void* value) {
      errno = 0;
      h5_id a(H5Acreate2(obj, key.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose);
      if (!a.valid() || H5Awrite(a.get(), memory_type, value) < 0) {
        write_failed(name() + ": cannot write its attribute " + key);
      }
    };
    if (v.is_string()) {
      // Variable-length UTF-8, as h5py writes a str: h5py 3 reads it back as str, while a
      // fixed-length string comes back as bytes (b'NHW' != 'NHW'). Flagged UTF-8, so a file
      // name's stray bytes (Latin-1) become U+FFFD, as in the JSON texts (json_text).
      const std::string s =
          nlohmann::json::parse(nlohmann::json(v.get<std::string>())
                                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
              .get<std::string>();
      h5_id t(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(t.get(), H5T_VARIABLE);
      H5Tset_cset(t.get(), H5T_CSET_UTF8);
      const char* p = s.c_str();
      put(t.get(), t.get(), &p);
    } else if (v.is_number_integer()) {
      const long long x = v.get<long long>();
      put(H5T_STD_I64LE, H5T_NATIVE_LLONG, &x);
    } else if (v.is_number()) {
      const double x = v.get<double>();
      put(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &x);
    }
  }

  std::string path_, dataset_;
  std::string temp_;  // the temporary folder beside the output (its name)
  std::string leaf_;  // the file in it: the output's own name
  int dir_fd_ = -1;   // that folder, through which the file is reached
  output_target target_;  // where the finished file goes: path_, or the file its symlink names
  npy_dtype type_;
  std::vector<u64> shape_;
  bool overwrite_;  // -f: the finished file may replace one that appeared since
  h5_id file_, dset_;
  u64 rows_ = 0;
  bool prepared_ = false, finished_ = false;
  bool sync_folder_ = true;  // finish() syncs the folder (defer_folder_sync)
  int own_fd_ = -1;
  write_behind behind_;
  // The direct path (see find_data_address): rows of row_bytes_ from the data's address on.
  static constexpr u64 direct_min_bytes = u64(64) << 10;
  bool direct_data_ = false;  // the dataset was made for it
  u64 row_bytes_ = 1;
  std::unique_ptr<direct_writer> direct_;
};

}  // namespace

std::unique_ptr<sample_source> open_hdf5(const dataset_spec& spec) {
  return std::make_unique<hdf5_source>(spec);
}

std::unique_ptr<sample_sink> create_hdf5(const dataset_spec& spec, const npy_dtype& type,
                                         const std::vector<u64>& shape, bool overwrite,
                                         const nlohmann::json& attributes) {
  return std::make_unique<hdf5_sink>(spec, type, shape, overwrite, attributes);
}

}  // namespace dctchop::formats::detail

namespace dctchop::formats {

void skip_hdf5_exit_handler() noexcept { H5dont_atexit(); }

namespace {

/** What a file found by one of `places` (names_from) would do to HDF5 when it opens it: ""
 *  where the first that HDF5 would open (one that is there, not a folder, and, but for a raw
 *  file, an HDF5 file: it goes on past others) is a plain file or none is there; else the
 *  first that is a pipe, character device or socket, whose open would wait (a FIFO without
 *  a writer, a terminal) or fail, said as "NAME is a pipe (FIFO)". */
std::string waiting_place(const detail::named_places& places, bool raw) {
  for (std::size_t i = 0; i < places.tried; ++i) {
    const std::string& n = places.names[i];
    struct stat st {};
    if (::stat(n.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    if (S_ISFIFO(st.st_mode)) return n + " is a pipe (FIFO)";
    if (S_ISCHR(st.st_mode)) return n + " is a character device";
    if (S_ISSOCK(st.st_mode)) return n + " is a socket";
    if (raw || !S_ISREG(st.st_mode)) return {};
    detail::quiet_hdf5 quiet;
    const htri_t hdf5 = H5Fis_hdf5(n.c_str());
    H5Eclear2(H5E_DEFAULT);
    if (hdf5 > 0) return {};
  }
  return {};
}

/** The blocks of a virtual dataset's pattern source ("src-%b.h5") looked for: up to this
 *  many, stopping at this many missing in a row. */
constexpr std::uint64_t k_pattern_blocks = 4096, k_pattern_gap = 16;

/** What files_read_by's walk found: the files, and the first cycle of virtual datasets. */
struct read_walk {
  std::vector<std::string> files;
  /** Files opened at most: a virtual dataset of thousands of sources gives all their names,
   *  and the files that its first sources read in turn. */
  int opens = 256;
  /** The virtual datasets on the way, (device, inode, dataset), with their names: a source
   *  that leads back to one is a cycle, which HDF5 reads by recursing without end. */
  std::vector<std::pair<std::tuple<dev_t, ino_t, std::string>, std::string>> way;
  std::string cycle;  // "a.h5:/v -> b.h5:/v -> a.h5:/v"; "" when none
  /** The first file on the way that HDF5 would find as a pipe, device or socket, as "X.h5:/l
   *  is an external link to f.h5:/img, and f.h5 is a pipe (FIFO)"; "" when none. */
  std::string waits;
};

/** files_read_by's walk: the files that reading `object` of `path` reads besides `path`,
 *  each link of its way followed (external links into the files they name, soft links within
 *  the file), then the dataset's raw files and virtual sources, each source walked in turn.
 *  `depth` bounds a way, as HDF5 bounds a chain of links to 16. */
void walk_reads(const std::string& path, std::string object, read_walk& w, int depth) {
  using detail::h5_id;
  if (depth > 16 || w.opens <= 0) return;
  if (object.empty()) return;
  if (object.front() != '/') object = "/" + object;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // (a FIFO's open waits)
  --w.opens;
  h5_id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) return;
  std::vector<char> text(4096);
  // The way to the object, a component at a time: where one is a link to elsewhere, the
  // rest of the way goes on from where it leads.
  for (std::size_t at = 1; at <= object.size(); ++at) {
    at = std::min(object.find('/', at), object.size());
    const std::string part = object.substr(0, at), rest = object.substr(at);
    const detail::link_value link = detail::read_link(file.get(), part);
    if (link.type == H5L_TYPE_HARD) continue;
    if (link.type == H5L_TYPE_SOFT) {  // a path within this file
      walk_reads(path, link.object + rest, w, depth + 1);
      return;
    }
    if (link.type != H5L_TYPE_EXTERNAL) return;
    const std::string obj = link.object + rest;
    const detail::named_places places = detail::names_from(link.file, path, "HDF5_EXT_PREFIX");
    if (const std::string why = waiting_place(places, false); !why.empty() && w.waits.empty()) {
      w.waits = path + ":" + part + " is an external link to " + link.file + ":" + link.object +
                ", and " + why;
    }
    for (const auto& f : places.names) {
      w.files.push_back(f);
      walk_reads(f, obj, w, depth + 1);
    }
    return;
  }
  h5_id d(H5Dopen2(file.get(), object.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) return;
  h5_id dcpl(H5Dget_create_plist(d.get()), H5Pclose);
  if (!dcpl.valid()) return;
  const int external = H5Pget_external_count(dcpl.get());
  for (int i = 0; i < external; ++i) {
    off_t offset = 0;
    hsize_t size = 0;
    if (H5Pget_external(dcpl.get(), static_cast<unsigned>(i), text.size(), text.data(), &offset,
                        &size) >= 0) {
      const std::string name(text.data(), strnlen(text.data(), text.size()));
      const detail::named_places places = detail::names_from(name, path, "HDF5_EXTFILE_PREFIX");
      if (const std::string why = waiting_place(places, true); !why.empty() && w.waits.empty()) {
        w.waits = path + ":" + object + " keeps its values in the file " + name + ", and " + why;
      }
      for (const auto& f : places.names) w.files.push_back(f);
    }
  }
  std::size_t sources = 0;
  if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL || H5Pget_virtual_count(dcpl.get(), &sources) < 0) {
    return;
  }
  const std::string here = path + ":" + object;
  auto key = std::make_tuple(st.st_dev, st.st_ino, object);
  for (std::size_t k = 0; k < w.way.size(); ++k) {
    if (w.way[k].first != key) continue;
    if (w.cycle.empty()) {
      for (std::size_t j = k; j < w.way.size(); ++j) w.cycle += w.way[j].second + " -> ";
      w.cycle += here;
    }
    return;
  }
  w.way.emplace_back(std::move(key), here);
  std::set<std::pair<std::string, std::string>> walked;  // (a VDS maps many parts of one file)
  for (std::size_t i = 0; i < sources; ++i) {
    const ssize_t n = H5Pget_virtual_filename(dcpl.get(), i, text.data(), text.size());
    if (n <= 0) continue;
    const std::string name(text.data(), std::min<std::size_t>(n, text.size() - 1));
    const ssize_t m = H5Pget_virtual_dsetname(dcpl.get(), i, text.data(), text.size());
    const std::string dset =
        m > 0 ? std::string(text.data(), std::min<std::size_t>(m, text.size() - 1)) : "";
    if (!walked.insert({name, dset}).second) continue;
    if (name == ".") {  // a dataset of this same file
      if (!dset.empty() && dset.find('%') == std::string::npos) {
        walk_reads(path, dset, w, depth + 1);
      }
      continue;
    }
    const auto source = [&](const std::string& file, const std::string& object) {
      const detail::named_places places = detail::names_from(file, path, "HDF5_VDS_PREFIX");
      if (const std::string why = waiting_place(places, false); !why.empty() && w.waits.empty()) {
        w.waits = here + " is a virtual dataset with a source in " + file + ", and " + why;
      }
      bool there = false;
      for (const auto& f : places.names) {
        w.files.push_back(f);  // every source named, whatever the budget
        struct stat fs {};
        there = there || ::stat(f.c_str(), &fs) == 0;
        if (!object.empty()) walk_reads(f, object, w, depth + 1);
      }
      return there;
    };
    if (name.find('%') == std::string::npos && dset.find('%') == std::string::npos) {
      source(name, dset);
      continue;
    }
    // A pattern (an unlimited mapping's "src-%b.h5"): HDF5 reads block b from the name with
    // %b as b (and %% as %), for b from 0 while they are there. Those that are there, and
    // a few past a gap, are inputs too.
    const auto expand = [](const std::string& pattern, std::uint64_t b) {
      std::string out;
      for (std::size_t k = 0; k < pattern.size(); ++k) {
        if (pattern[k] == '%' && k + 1 < pattern.size() && pattern[k + 1] == 'b') {
          out += std::to_string(b);
          ++k;
        } else if (pattern[k] == '%' && k + 1 < pattern.size() && pattern[k + 1] == '%') {
          out += '%';
          ++k;
        } else {
          out += pattern[k];
        }
      }
      return out;
    };
    for (std::uint64_t b = 0, misses = 0; b < k_pattern_blocks && misses < k_pattern_gap; ++b) {
      misses = source(expand(name, b), expand(dset, b)) ? 0 : misses + 1;
    }
  }
  w.way.pop_back();
}

}  // namespace

detail::way_problems detail::problems_on_way(const std::string& path, const std::string& object) {
  detail::quiet_hdf5 quiet;
  read_walk w;
  walk_reads(path, object, w, 0);
  H5Eclear2(H5E_DEFAULT);
  return {std::move(w.cycle), std::move(w.waits)};
}

std::vector<std::string> files_read_by(const dataset_spec& spec) {
  using detail::quiet_hdf5;
  if (spec.kind != file_kind::hdf5 || spec.path == "-" || spec.memory) return {};
  std::vector<std::string> objects;
  if (!spec.dataset.empty()) {
    objects.push_back(spec.dataset);
  } else {  // the one the reader chooses (for spec.purpose); where it cannot, every one
    try {
      objects.push_back(open_dataset(spec)->dataset_path());
    } catch (const error&) {
      // (Its message, "name the dataset; candidates: ...", goes to stderr, which may be a
      // file that one of them reads.)
      quiet_hdf5 quiet;
      detail::h5_id file(H5Fopen(spec.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
      try {
        if (file.valid()) {
          for (const auto& c : detail::list_datasets(file.get(), spec.path)) {
            objects.push_back(c.path);
          }
        }
      } catch (const error&) {  // (a damaged group: its datasets are not read either)
      }
      H5Eclear2(H5E_DEFAULT);
    }
  }
  using detail::h5_id;
  quiet_hdf5 quiet;
  read_walk w;
  h5_id file(H5Fopen(spec.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  std::vector<char> text(4096);
  for (const auto& object : objects) {
    walk_reads(spec.path, object, w, 0);
    if (!w.waits.empty()) continue;  // (HDF5's open would wait; the reader refuses it)
    // And the file the dataset is in, as HDF5 found it (HDF5_EXT_PREFIX may lead elsewhere).
    h5_id d(file.valid() ? H5Dopen2(file.get(), object.c_str(), H5P_DEFAULT) : H5I_INVALID_HID,
            H5Dclose);
    h5_id in(d.valid() ? H5Iget_file_id(d.get()) : H5I_INVALID_HID, H5Fclose);
    const ssize_t n = in.valid() ? H5Fget_name(in.get(), text.data(), text.size()) : 0;
    if (n > 0) w.files.emplace_back(text.data(), std::min<std::size_t>(n, text.size() - 1));
  }
  H5Eclear2(H5E_DEFAULT);
  return std::move(w.files);
}

}  // namespace dctchop::formats
