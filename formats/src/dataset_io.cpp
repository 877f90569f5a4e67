// Datasets in and out: format dispatch, and the NPY and raw-binary sources and sinks.
// HDF5 lives in hdf5_io.cpp.
#include "dctchop/formats/dataset_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "byte_source.hpp"
#include "dataset_choice.hpp"
#include "file_magic.hpp"
#include "dctchop/error.hpp"
#include "hdf5_io.hpp"
#include "zip_reader.hpp"
#include "zip_writer.hpp"

namespace dctchop::formats {
namespace {

using u64 = std::uint64_t;

bool hdf5_name(const std::string& path) {
  return name_ends_with(path, ".h5") || name_ends_with(path, ".hdf5") ||
         name_ends_with(path, ".he5") || name_ends_with(path, ".hdf");
}

/** The product of the shape times `itemsize` (values or bytes); bad_input if it overflows. */
u64 checked_count(const std::vector<u64>& shape, const std::string& name, u64 itemsize = 1) {
  u64 n = itemsize;
  for (u64 d : shape) {
    if (d != 0 && n > std::numeric_limits<u64>::max() / d) {
      throw error(errc::bad_input, name + ": shape " + shape_text(shape) + " is too large (its size passes 2^64)");
    }
    n *= d;
  }
  return n;
}

/** A pipe (`<(cmd)`, a named pipe) named as an HDF5 file: HDF5 reads and writes by seeking,
 *  which a pipe cannot do. Said before it is opened, instead of "not an HDF5 file" of a file
 *  that is one. (An .npz is written front to back, so into a pipe too; its reader says why
 *  it cannot read one.) */
void refuse_pipe(const dataset_spec& s) {
  if (s.kind != file_kind::hdf5) return;
  if (!refused_fifo(s.path)) return;
  // (The kind comes from a dataset named after the pipe: the name cannot tell which format.)
  throw error(errc::invalid_argument,
              s.path + ": is a pipe, and " +
                  (hdf5_name(s.path) ? std::string("an HDF5 file")
                                     : "a dataset of an HDF5 file or an array of a .npz") +
                  " is read and written by seeking, which a pipe cannot do: use a file");
}

/** An array's key, as np.load gives it: numpy's keys never start with '/' ("data.npz:/x" is
 *  the HDF5 habit for "x"), and the member x.npy is the array x. */
std::string npz_key(std::string n) {
  if (!n.empty() && n.front() == '/') n.erase(0, 1);
  if (n.size() > 4 && n.compare(n.size() - 4, 4, ".npy") == 0) n.erase(n.size() - 4);
  return n;
}

// ---- NPY ----------------------------------------------------------------------------------

/** reader() of rows read as they lie in a file (`what`: "NPY", "raw"), a read of 4 MiB or
 *  more split among `threads` (input_file::read_at), or from a stream in order. */
std::string direct_reader(const std::string& what, bool stream, unsigned threads) {
  if (stream) return what + " from a stream: read in order on 1 thread";
  return what + ": read directly on " +
         (threads <= 1 ? std::string("1 thread") : "up to " + std::to_string(threads) + " threads");
}

/** reader() of an array in Fortran order, which is gathered into C order a column at a time
 *  on one thread. */
std::string fortran_reader(const std::string& what) {
  return what + " in Fortran order: gathered into C order on 1 thread";
}

class npy_source final : public sample_source {
 public:
  explicit npy_source(const dataset_spec& spec)
      : stream_(reads_as_stream(spec.path)),
        r_(npy_reader::open(spec.path, spec.purpose == dataset_spec::role::labels
                                           ? "<stdin> (labels)"  // (the data's may be too)
                                           : "<stdin>")) {
    r_.set_read_threads(spec.read_threads);
    reader_ = r_.header().fortran_order ? fortran_reader("NPY")
                                        : direct_reader("NPY", stream_, spec.read_threads);
  }
  std::string name() const override { return r_.display_name(); }
  const npy_dtype& type() const override { return r_.header().type; }
  const std::vector<u64>& shape() const override { return r_.header().shape; }
  bool rereadable() const override { return !stream_; }
  void read_rows(u64 first, u64 count, void* dst) override { r_.read_rows(first, count, dst); }
  void watch(std::function<void()> check) override { r_.watch(std::move(check)); }
  std::string reader() const override { return reader_; }

 private:
  bool stream_;  // stdin, a FIFO, <(cmd): read once, in order
  npy_reader r_;
  std::string reader_;
};

class npy_sink final : public sample_sink {
 public:
  npy_sink(const std::string& path, const npy_dtype& t, const std::vector<u64>& shape, bool ow)
      : w_(npy_writer::create(path, t, shape, ow)) {}
  std::string name() const override { return w_.display_name(); }
  void write_rows(const void* src, u64 count) override { w_.write_rows(src, count); }
  bool add_side_dataset(const std::string&, const npy_dtype&, const std::vector<u64>&,
                        const row_source&) override {
    return false;
  }
  void prepare() override { w_.prepare(); }
  void finish() override { w_.finish(); }
  void defer_folder_sync() noexcept override { w_.defer_folder_sync(); }
  void sync_folder() noexcept override { w_.sync_folder(); }
  void withdraw() noexcept override { w_.withdraw(); }
  void watch(std::function<void()> check) override { w_.watch(std::move(check)); }
  std::optional<u64> bytes_written() const override { return w_.bytes_written(); }

 private:
  npy_writer w_;
};

// ---- NPZ: arrays in a ZIP archive (np.savez, np.savez_compressed) ---------------------------

class npz_source final : public sample_source {
 public:
  explicit npz_source(const dataset_spec& spec) : r_(open_member(spec)) {
    r_.set_read_threads(spec.read_threads);
    if (reader_.empty()) {
      reader_ = r_.header().fortran_order
                    ? fortran_reader("a stored .npz member")
                    : direct_reader("a stored .npz member", false, spec.read_threads);
    }
  }
  std::string name() const override { return r_.display_name(); }
  const npy_dtype& type() const override { return r_.header().type; }
  const std::vector<u64>& shape() const override { return r_.header().shape; }
  bool rereadable() const override { return true; }
  void read_rows(u64 first, u64 count, void* dst) override { r_.read_rows(first, count, dst); }
  std::string dataset_path() const override { return array_; }
  std::string note() const override { return note_; }
  std::string reader() const override { return reader_; }

 private:
  /** The array named `spec.dataset` ("x_train", or its member name "x_train.npy"), or the one
   *  chosen among the file's arrays when none is named. */
  npy_reader open_member(const dataset_spec& spec) {
    const auto zip = detail::zip_reader::open(spec.path);
    const std::string file = zip.display_name();
    // The members numpy reads as arrays: NAME.npy as NAME, and a member of another name that
    // holds NPY bytes under that name (`zip out.npz -` writes one named "-"); of two with one
    // name, the last (as numpy takes it).
    std::vector<const detail::zip_member*> arrays;
    std::unordered_map<std::string, std::size_t> last;  // name -> its last member
    for (std::size_t i = 0; i < zip.members().size(); ++i) last[zip.members()[i].name] = i;
    // NAME.npy is the array NAME, unless a member is named NAME itself: np.load's key NAME
    // reads that one, and NAME.npy stays reachable only by its whole name.
    auto array_name = [&last](const detail::zip_member& m) {
      if (!name_ends_with(m.name, ".npy")) return m.name;
      std::string stem = m.name.substr(0, m.name.size() - 4);
      return last.count(stem) != 0 ? m.name : stem;
    };
    {
      for (std::size_t i = 0; i < zip.members().size(); ++i) {
        const auto& m = zip.members()[i];
        if (last[m.name] != i || (!m.name.empty() && m.name.back() == '/')) continue;  // (a folder)
        arrays.push_back(&m);
      }
    }
    auto open_array = [&](const detail::zip_member& m) {
      return npy_reader::open(zip.open_member(m, file + ":" + array_name(m)));
    };
    const detail::zip_member* found = nullptr;
    if (spec.dataset.empty()) {
      std::vector<detail::candidate> all;
      std::vector<const detail::zip_member*> listed;
      for (const auto* m : arrays) {
        detail::candidate c;
        c.path = array_name(*m);
        try {
          const auto r = open_array(*m);
          c.shape = r.header().shape;
          c.numeric = true;
          if (r.header().type.kind == 'b') c.labels_type = "bool";
        } catch (const error& e) {
          if (e.code() != errc::bad_input) throw;
          // Another member (a README) that is no NPY data: numpy gives its bytes, not an array.
          if (!name_ends_with(m->name, ".npy")) continue;
          // listed with the reason, never chosen: "FILE.npz:name: dtype '<U5': ..." -> "dtype ..."
          std::string what = e.what();
          for (const std::string& prefix : {file + ":" + c.path + ": ", file + ": "})
            if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
          c.refused = what;
        }
        all.push_back(std::move(c));
        listed.push_back(m);
      }
      arrays = listed;
      try {
        array_ = detail::choose_array(file, all, spec,
                                      {"array", "FILE.npz:NAME or --dataset NAME",
                                       "--labels FILE.npz:NAME"},
                                      note_);
      } catch (const error& e) {
        // One array, which cannot be read: its own error says more than the listing.
        if (e.code() == errc::bad_input && arrays.size() == 1 && !all[0].refused.empty()) {
          (void)open_array(*arrays[0]);
        }
        throw;
      }
      for (const auto* m : arrays)
        if (array_name(*m) == array_) found = m;
    } else {
      // As np.load(file)[key]: the member named key itself, else the member key.npy (x is
      // x.npy, and x.npy.npy is x.npy.npy.npy); of two members with one name, the last.
      const detail::zip_member* with_npy = nullptr;
      for (const auto& m : zip.members()) {
        if (m.name == spec.dataset) found = &m;
        if (m.name == spec.dataset + ".npy") with_npy = &m;
      }
      if (found == nullptr) found = with_npy;
      if (found == nullptr) {
        // Every member, as np.load(file).files lists them (a member without .npy too).
        std::string names;
        for (const auto* m : arrays) names += (names.empty() ? "" : ", ") + array_name(*m);
        throw error(errc::bad_input,
                    file + ": holds no array named " + spec.dataset +
                        (names.empty() ? std::string(" (it holds no member at all)")
                                       : " (arrays: " + names + ")"));
      }
      array_ = array_name(*found);
    }
    // np.savez_compressed's arrays are one deflate stream each.
    if (found->method == detail::zip_member::deflated) {
      reader_ = std::string("a deflated .npz member, inflated by ") +
                detail::inflater_name(detail::fastest_inflater()) + " on one thread as it is read";
    }
    return npy_reader::open(zip.open_member(*found, file + ":" + array_));
  }

  std::string array_, note_, reader_;
  npy_reader r_;
};

/** An .npz as np.savez writes one: the data as a stored member NAME.npy ("data.npy" unless the
 *  output names another), and any side datasets (the labels) as members after it. */
class npz_sink final : public sample_sink {
 public:
  npz_sink(const dataset_spec& spec, const npy_dtype& t, const std::vector<u64>& shape, bool ow)
      : out_(output_file::create(spec.path, ow)), zip_(out_),
        array_(spec.dataset.empty() ? std::string(npz_default_array) : npz_key(spec.dataset)),
        rows_wanted_(shape.empty() ? 1 : shape[0]), row_bytes_(checked_count(shape, spec.path, t.itemsize)) {
    if (rows_wanted_ > 0) row_bytes_ /= rows_wanted_;
    begin_array(array_, t, shape);
  }
  std::string name() const override { return out_.display_name() + ":" + array_; }
  void watch(std::function<void()> check) override { out_.watch(std::move(check)); }
  std::optional<u64> bytes_written() const override { return out_.position(); }
  void write_rows(const void* src, u64 count) override {
    zip_.write(src, count * row_bytes_);
    rows_ += count;
  }
  bool add_side_dataset(const std::string& name, const npy_dtype& t, const std::vector<u64>& shape,
                        const row_source& rows) override {
    end_data();
    const std::string key = npz_key(name);
    detail::check_member_key(key, out_.display_name());
    if (key == array_) {
      throw error(errc::invalid_argument, out_.display_name() + ": the labels cannot be written as '" +
                                              key + "', the data's own array");
    }
    const u64 bytes = checked_count(shape, name, t.itemsize);
    begin_array(key, t, shape);
    const u64 n = shape.empty() ? 1 : shape[0], row = n == 0 ? 0 : bytes / n;
    for_each_row_piece(n, row, rows, [&](const void* p, u64, u64 count) { zip_.write(p, count * row); });
    zip_.end_member();
    return true;
  }
  void prepare() override {
    if (prepared_) return;
    end_data();
    zip_.finish();
    out_.flush_to_disk();
    prepared_ = true;
  }
  void finish() override {
    prepare();
    out_.commit();
  }
  void defer_folder_sync() noexcept override { out_.defer_folder_sync(); }
  void sync_folder() noexcept override { out_.sync_folder(); }
  void withdraw() noexcept override { out_.withdraw(); }

 private:
  /** Start the member KEY.npy with its .npy header; its values follow. */
  void begin_array(const std::string& key, const npy_dtype& t, const std::vector<u64>& shape) {
    zip_.begin_member(key + ".npy");
    const auto h = make_npy_header(t, shape);
    zip_.write(h.data(), h.size());
  }
  void end_data() {
    if (!data_open_) return;
    if (rows_ != rows_wanted_) throw error(errc::invalid_argument, name() + ": wrote a wrong number of rows");
    zip_.end_member();
    data_open_ = false;
  }
  output_file out_;
  detail::zip_writer zip_;
  std::string array_;
  u64 rows_wanted_, row_bytes_, rows_ = 0;
  bool data_open_ = true, prepared_ = false;
};

// ---- an array in memory ---------------------------------------------------------------------

class memory_source final : public sample_source {
 public:
  memory_source(std::string name, const dataset_spec::memory_array& a)
      : name_(std::move(name)), a_(a) {
    if (a_.shape.empty()) throw error(errc::bad_input, name_ + ": a 0-d array holds no samples");
    if (a_.data == nullptr && row_bytes() * rows() > 0) {
      throw error(errc::invalid_argument, name_ + ": an array without memory");
    }
  }
  std::string name() const override { return name_; }
  const npy_dtype& type() const override { return a_.type; }
  const std::vector<u64>& shape() const override { return a_.shape; }
  bool rereadable() const override { return true; }
  void read_rows(u64 first, u64 count, void* dst) override {
    if (first > rows() || count > rows() - first) {
      throw error(errc::invalid_argument, name_ + ": rows past the end of the array");
    }
    if (count > 0) {
      std::memcpy(dst, static_cast<const std::byte*>(a_.data) + first * row_bytes(),
                  count * row_bytes());
    }
  }

 private:
  std::string name_;
  dataset_spec::memory_array a_;
};

// ---- raw binary: little-endian, C order, no header ----------------------------------------

class raw_source final : public sample_source {
 public:
  explicit raw_source(const dataset_spec& s)
      : f_(input_file::open(s.path)), read_threads_(s.read_threads) {
    f_.set_truncation_code(errc::bad_input);
    if (!s.raw_type || s.raw_shape.empty()) {
      throw error(errc::invalid_argument, "--raw needs --dtype and --shape");
    }
    type_ = *s.raw_type;
    shape_ = s.raw_shape;
    // Said before the size check, which would only say "describe 0 bytes"; as of an NPY's.
    if (std::find(shape_.begin(), shape_.end(), u64(0)) != shape_.end()) {
      std::string text;
      for (u64 d : shape_) {  // (appended in two steps: GCC 12 warned of a false overlap)
        if (!text.empty()) text += ',';
        text += std::to_string(d);
      }
      throw error(errc::bad_input, name() + ": --shape " + text + " has an empty axis");
    }
    bytes_ = checked_count(shape_, name(), type_.itemsize);
    if (f_.seekable() && f_.size() != bytes_) {
      throw error(errc::bad_input,
                  name() + ": holds " + std::to_string(f_.size()) + " bytes, but --shape and "
                  "--dtype describe " + std::to_string(bytes_) + " bytes");
    }
  }
  std::string name() const override { return f_.display_name(); }
  void watch(std::function<void()> check) override { f_.watch(std::move(check)); }
  std::string reader() const override {
    return direct_reader("raw", !f_.seekable(), read_threads_);
  }
  const npy_dtype& type() const override { return type_; }
  const std::vector<u64>& shape() const override { return shape_; }
  bool rereadable() const override { return f_.seekable(); }
  void read_rows(u64 first, u64 count, void* dst) override {
    const u64 rb = row_bytes();
    if (first + count > rows()) throw error(errc::invalid_argument, name() + ": rows out of range");
    if (f_.seekable()) {
      f_.read_at(first * rb, dst, count * rb, "raw data", read_threads_);
      return;
    }
    if (first != next_) throw error(errc::invalid_argument, name() + ": stdin is read in order");
    const std::size_t got = f_.read(dst, count * rb);
    if (got == 0 && first == 0 && count > 0) {
      throw error(errc::bad_input, name() + ": empty (0 bytes), but --shape and --dtype "
                                            "describe " +
                                       std::to_string(bytes_) +
                                       " bytes");
    }
    if (got != count * rb) {
      throw error(errc::bad_input, name() + ": truncated: the stream ended before the " +
                                       std::to_string(bytes_) +
                                       " bytes that --shape and --dtype describe");
    }
    next_ = first + count;
    if (next_ == rows()) {  // the stream must end here
      char extra;
      if (f_.read(&extra, 1) != 0) {
        throw error(errc::bad_input, name() + ": holds more data than --shape and --dtype describe");
      }
    }
  }

 private:
  input_file f_;
  unsigned read_threads_;
  u64 bytes_ = 0;  // what --shape and --dtype describe
  npy_dtype type_;
  std::vector<u64> shape_;
  u64 next_ = 0;
};

class raw_sink final : public sample_sink {
 public:
  raw_sink(const std::string& path, const npy_dtype& t, const std::vector<u64>& shape, bool ow)
      : out_(output_file::create(path, ow)), type_(t), shape_(shape) {}
  std::string name() const override { return out_.display_name(); }
  void watch(std::function<void()> check) override { out_.watch(std::move(check)); }
  std::optional<u64> bytes_written() const override { return out_.position(); }
  void write_rows(const void* src, u64 count) override {
    u64 rb = type_.itemsize;
    for (std::size_t i = 1; i < shape_.size(); ++i) rb *= shape_[i];
    out_.write(src, count * rb);
    rows_ += count;
  }
  bool add_side_dataset(const std::string&, const npy_dtype&, const std::vector<u64>&,
                        const row_source&) override {
    return false;
  }
  void prepare() override {
    const u64 want = shape_.empty() ? 1 : shape_[0];
    if (rows_ != want) throw error(errc::invalid_argument, name() + ": wrote a wrong number of rows");
    out_.flush_to_disk();
  }
  void finish() override {
    prepare();
    out_.commit();
  }
  void defer_folder_sync() noexcept override { out_.defer_folder_sync(); }
  void sync_folder() noexcept override { out_.sync_folder(); }
  void withdraw() noexcept override { out_.withdraw(); }

 private:
  output_file out_;
  npy_dtype type_;
  std::vector<u64> shape_;
  u64 rows_ = 0;
};

}  // namespace

std::string dataset_spec::display() const {
  const std::string p = path == "-" ? std::string("<stdin>") : path;
  return dataset.empty() ? p : p + ":" + dataset;
}

namespace {

/** An HDF5 dataset path as written ("images", "/train/images"), absolute; a path that cannot
 *  name a dataset ("/", "/a/", "/a//b", "/./a") is a usage error. */
std::string checked_dataset(const std::string& file, const std::string& d) {
  const std::string full = d.front() == '/' ? d : "/" + d;
  bool ok = full.size() > 1 && full.back() != '/' && full.find("//") == std::string::npos;
  for (std::size_t at = 0; ok && at != std::string::npos; at = full.find('/', at + 1)) {
    const std::size_t end = full.find('/', at + 1);
    const std::string part = full.substr(at + 1, end == std::string::npos ? end : end - at - 1);
    ok = part != "." && part != "..";
  }
  if (!ok) {
    throw error(errc::invalid_argument,
                file + ": HDF5 dataset path '" + d + "': expected a name like /images");
  }
  return full;
}

/** The spec as written, before its dataset path is checked. */
/** What a file of a .npy name holds instead, by its first bytes, as the NPY reader names it
 *  when the file is named alone ("" for anything else): a name that goes on to a dataset
 *  (`x.npy:images`, `x.npy:/images`, `x.npy --dataset images`) is refused with the same
 *  words and exit code (3), not as a usage error that calls the file a .npy. */
std::string other_than_npy(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return {};
  struct stat st {};
  unsigned char head[8];
  const bool read = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, head, 8, 0) == 8;
  const detail::file_magic magic = read ? detail::magic_of(head, 8) : detail::file_magic::other;
  const bool hdf5 = magic == detail::file_magic::hdf5 ||
                    (read && magic == detail::file_magic::other &&
                     detail::hdf5_after_user_block(
                         static_cast<std::uint64_t>(st.st_size), [fd](std::uint64_t at, void* h) {
                           return ::pread(fd, h, 8, static_cast<off_t>(at)) == 8;
                         }));
  ::close(fd);
  return detail::not_npy_text(hdf5 ? detail::file_magic::hdf5 : magic);
}

/** Refuses `text`, whose file `file` has a .npy name, where the file holds another format. */
void refuse_other_than_npy(const std::string& text, const std::string& file) {
  if (const std::string what = other_than_npy(file); !what.empty()) {
    throw error(errc::bad_input, text + ": " + file + " " + what);
  }
}

dataset_spec split_spec(const std::string& text, const std::string& dataset, bool raw) {
  dataset_spec s;
  s.path = text;
  s.dataset = dataset;
  if (raw) {
    if (!dataset.empty()) {
      throw error(errc::invalid_argument,
                  "--dataset " + dataset + " names an HDF5 dataset; it does not apply to --raw");
    }
    s.kind = file_kind::raw;
    return s;
  }
  // "data.npz:x_train": an array of a .npz file; the first ".npz:" ends the file's name.
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  const auto npz = lower.find(".npz:");
  if (npz != std::string::npos || name_ends_with(text, ".npz")) {
    s.kind = file_kind::npz;
    if (npz != std::string::npos) {
      s.path = text.substr(0, npz + 4);
      s.dataset = text.substr(npz + 5);
      if (s.dataset.empty() || s.dataset == "/") {
        throw error(errc::invalid_argument, text + ": no array after ':' (write FILE.npz:x_train)");
      }
    }
    // The key as given (np.load(file)[key] looks up the member key, then key.npy; a writer
    // names the array npz_key(key)), less a leading '/', the HDF5 habit.
    auto key = [](std::string k) { return !k.empty() && k.front() == '/' ? k.substr(1) : k; };
    s.dataset = key(s.dataset);
    if (!dataset.empty()) {
      if (!s.dataset.empty() && key(dataset) != s.dataset) {  // (y and y.npy: two members)
        throw error(errc::invalid_argument, "--dataset " + dataset + " contradicts " + text);
      }
      s.dataset = key(dataset);
    }
    if (s.dataset == "." || s.dataset == ".." || (!dataset.empty() && s.dataset.empty())) {
      throw error(errc::invalid_argument,
                  text + ": '" + (dataset.empty() ? s.dataset : dataset) +
                      "' names no array (write FILE.npz:x_train)");
    }
    return s;
  }
  // Where the file's name ends and its dataset's begins, if the text names one:
  // - "file.h5:/group/dset": the last ":/", when the part before it is an HDF5 name, or an
  //   existing file while the whole text is not (so "run:/x.npy", a file in a folder named
  //   "run:", stays a path);
  // - "file.h5:dset" (no slash): the last ':', after an HDF5 name; "file.h5:" names none.
  std::size_t split = std::string::npos;
  const auto colon = text.rfind(":/");
  if (colon != std::string::npos && colon > 0) {
    const std::string file = text.substr(0, colon);
    struct stat st {};
    const bool whole_exists = ::stat(text.c_str(), &st) == 0;
    // (A FIFO or <(cmd) too: split off, it is refused as a pipe, not as a missing file.)
    const bool file_exists = ::stat(file.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
    const bool folder_exists = ::stat((file + ":").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    if (name_ends_with(file, ".npy") && !whole_exists && !folder_exists) {
      // "x.npy:/a": a dataset path after a file that holds one array, not a folder "x.npy:"
      if (file_exists) refuse_other_than_npy(text, file);
      throw error(errc::invalid_argument, text + ": " + file + " is a .npy name; a dataset "
                                          "path needs an HDF5 file (FILE.h5:/path)");
    }
    if (hdf5_name(file) || (file_exists && !whole_exists)) split = colon;
  }
  const auto c = text.rfind(':');
  if (split == std::string::npos && c != std::string::npos && c > 0 &&
      name_ends_with(text.substr(0, c), ".npy")) {
    // "x.npy:a", where x.npy exists and no file has the whole name: not "cannot open x.npy:a"
    struct stat st {};
    if (::stat(text.c_str(), &st) != 0 && ::stat(text.substr(0, c).c_str(), &st) == 0 &&
        !S_ISDIR(st.st_mode)) {
      // (One that is HDF5 or ZIP inside: named alone, it is refused for that; say so at
      // once, as the same bad input, exit 3.)
      refuse_other_than_npy(text, text.substr(0, c));
      throw error(errc::invalid_argument,
                  text + ": " + text.substr(0, c) + " is a .npy file, which holds one array: "
                  "name it alone (a name after ':' picks an array of a .npz or a dataset of an "
                  "HDF5 file)");
    }
  }
  if (split == std::string::npos && c != std::string::npos && c > 0) {
    // The last ':' after an HDF5 name, or an earlier one ("f.h5:x:y", a dataset "x:y"); of
    // several, the last whose file is there.
    std::size_t last_named = std::string::npos;
    for (std::size_t at = c; at != std::string::npos && at > 0; at = text.rfind(':', at - 1)) {
      const std::string file = text.substr(0, at);
      if (!hdf5_name(file)) continue;
      if (last_named == std::string::npos) last_named = at;
      struct stat st {};
      if (::stat(file.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
        last_named = at;
        break;
      }
    }
    if (last_named == c && c + 1 == text.size()) {
      throw error(errc::invalid_argument, text + ": no dataset after ':' (write FILE.h5:/images)");
    }
    split = last_named;
  }
  if (split != std::string::npos) {
    s.path = text.substr(0, split);
    s.dataset = text.substr(split + 1);
    s.kind = file_kind::hdf5;
    if (!dataset.empty() &&
        checked_dataset(s.path, dataset) != checked_dataset(s.path, s.dataset)) {
      throw error(errc::invalid_argument, "--dataset " + dataset + " contradicts " + text);
    }
    return s;
  }
  if (!dataset.empty() && name_ends_with(text, ".npy")) {
    // --dataset makes a file HDF5 whatever its name; a .npy name is almost surely a slip, and
    // an HDF5 file written under it would mislead every later reader.
    refuse_other_than_npy(text, text);
    throw error(errc::invalid_argument, text + ": a .npy name, but --dataset " + dataset +
                                            " names a dataset in an HDF5 file (FILE.h5) or an "
                                            "array of a .npz (FILE.npz)");
  }
  if (hdf5_name(text) || !dataset.empty()) s.kind = file_kind::hdf5;
  if (s.kind == file_kind::hdf5 && s.path == "-") {
    throw error(errc::invalid_argument,
                "-: --dataset " + dataset + " names a dataset of an HDF5 file or an array of a "
                ".npz, which standard input or output cannot be (an HDF5 file is read and "
                "written by seeking, a .npz read so, and `-` has no name to tell which): use a "
                "file (a FIFO named FILE.npz takes a .npz)");
  }
  return s;
}

}  // namespace

bool name_ends_with(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  std::string tail = s.substr(s.size() - suffix.size());
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return std::tolower(c); });
  return tail == suffix;
}

void refuse_npy_member_output(const dataset_spec& out, const std::string& what) {
  if (out.memory || out.path == "-" || out.kind == file_kind::raw || out.kind == file_kind::npz)
    return;
  const std::string& text = out.path;  // (an HDF5 file named by --dataset: all of it)
  const auto base = text.find_last_of('/') + 1;  // (npos + 1: 0)
  std::string lower = text.substr(base);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (const auto m = member_of_unwritable_container(text)) {
    throw error(errc::invalid_argument, text + ": " + m->why + ": write " + m->meant + " for " +
                                            what);
  }
  struct stat st {};
  const auto at = lower.find(".npy:");
  if (at == std::string::npos) return;
  if (::lstat(text.c_str(), &st) == 0) return;  // that file: written as it is
  const std::string file = text.substr(0, base + at + 4), name = text.substr(base + at + 5);
  const std::string stem = file.substr(0, file.size() - 4);
  const bool plain = !name.empty() && name.find_first_of(": \t") == std::string::npos;
  throw error(errc::invalid_argument,
              text + ": " + file + " is a .npy name, and a .npy file holds one array, which " +
                  "is not named: write " + file + " alone for " + what + ", or " +
                  (plain ? stem + ".npz:" + name + " or " + stem + ".h5:" + name +
                               " for an array or dataset named " + name
                         : "FILE.npz:NAME or FILE.h5:NAME for a named array or dataset"));
}

std::optional<container_member> member_of_unwritable_container(const std::string& text) {
  std::string whole = text;  // (the dataset's path after the name may hold slashes)
  std::transform(whole.begin(), whole.end(), whole.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  struct stat st {};
  for (const auto& [ext, kind, as] :
       {std::tuple{".nc:", "HDF5", ".h5"}, std::tuple{".nc4:", "HDF5", ".h5"},
        std::tuple{".mat:", "HDF5", ".h5"}, std::tuple{".zip:", ".npz", ".npz"}}) {
    const auto c = whole.find(ext);
    if (c == std::string::npos || ::lstat(text.c_str(), &st) == 0) continue;
    // A path in a folder that is there ("runs.nc:2024/out.npy"), written as it is.
    const std::string folder = std::filesystem::path(text).parent_path().string();
    if (!folder.empty() && ::stat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    container_member m;
    m.file = text.substr(0, c + std::strlen(ext) - 1);
    m.meant = m.file.substr(0, m.file.rfind('.')) + as + text.substr(m.file.size());
    m.why = "only names ending " +
            std::string(std::strcmp(as, ".h5") == 0 ? ".h5, .hdf5, .hdf or .he5" : ".npz") +
            " are written as " + kind + " (" + m.file + " is read as " + kind +
            " by its bytes, but written as NPY)";
    return m;
  }
  return std::nullopt;
}

std::optional<file_kind> format_named(const std::string& path) {
  if (name_ends_with(path, ".npy")) return file_kind::npy;
  if (name_ends_with(path, ".npz")) return file_kind::npz;
  if (hdf5_name(path)) return file_kind::hdf5;
  return std::nullopt;
}

dataset_spec parse_dataset_spec(const std::string& text, const std::string& dataset, bool raw) {
  dataset_spec s = split_spec(text, dataset, raw);
  refuse_pipe(s);
  if (s.kind == file_kind::hdf5 && !s.dataset.empty()) s.dataset = checked_dataset(s.path, s.dataset);
  return s;
}


u64 sample_source::row_bytes() const {
  u64 b = type().itemsize;
  for (std::size_t i = 1; i < shape().size(); ++i) b *= shape()[i];
  return b;
}

namespace {

/** What an existing regular file holds by its bytes, for inputs named by neither extension:
 *  HDF5 (its signature at 0, or after a user block of 512, 1024, ... bytes, as in MATLAB
 *  v7.3 .mat files; netCDF-4 .nc files are HDF5 too), or ZIP (an .npz renamed). */
std::optional<file_kind> kind_by_content(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<file_kind> kind;
  unsigned char head[8];
  const auto size = static_cast<u64>(st.st_size);
  for (u64 at = 0; at + 8 <= size && at <= (u64(1) << 20) && !kind; at = at == 0 ? 512 : 2 * at) {
    if (::pread(fd, head, 8, static_cast<off_t>(at)) != 8) break;
    const auto m = detail::magic_of(head, 8);
    if (m == detail::file_magic::hdf5) kind = file_kind::hdf5;
    if (at == 0 && (m == detail::file_magic::zip || m == detail::file_magic::empty_zip)) {
      kind = file_kind::npz;
    }
    if (at == 0 && m != detail::file_magic::other) break;  // a .npy, an archive: not HDF5
  }
  ::close(fd);
  return kind;
}

}  // namespace

dataset_spec resolve_by_content(const dataset_spec& spec) {
  if (spec.memory || spec.path == "-" || format_named(spec.path) ||
      (spec.kind != file_kind::npy && spec.kind != file_kind::hdf5)) {
    return spec;
  }
  dataset_spec s = spec;
  auto as = [&](file_kind k, const std::string& path, std::string member) {
    s.path = path;
    s.kind = k;
    if (k == file_kind::npz && !member.empty() && member.front() == '/') member.erase(0, 1);
    if (k == file_kind::hdf5 && !member.empty()) member = checked_dataset(path, member);
    if (!member.empty()) s.dataset = member;
    return s;
  };
  if (const auto k = kind_by_content(spec.path)) {
    // A whole name ("data.mat"), or a file split off by ":/" whose bytes are ZIP.
    if (spec.kind == file_kind::npy || *k == file_kind::npz) return as(*k, spec.path, spec.dataset);
    return spec;
  }
  // "data.nc:images": a file and a member, which the name alone could not split (when no
  // file, FIFO or other has the whole name).
  struct stat whole {};
  if (::stat(spec.path.c_str(), &whole) == 0) return spec;
  const auto colon = spec.path.rfind(':');
  if (spec.kind == file_kind::npy && spec.dataset.empty() && colon != std::string::npos &&
      colon > 0 && colon + 1 < spec.path.size()) {
    const std::string file = spec.path.substr(0, colon);
    if (const auto k = kind_by_content(file)) return as(*k, file, spec.path.substr(colon + 1));
    struct stat part {};
    if (::stat(file.c_str(), &part) == 0 && S_ISFIFO(part.st_mode)) {
      throw error(errc::invalid_argument,
                  spec.path + ": " + file + " is a pipe, and a dataset of an HDF5 file or an "
                  "array of a .npz (FILE:NAME) is read by seeking, which a pipe cannot do: use a file");
    }
  }
  return spec;
}

namespace {

std::unique_ptr<sample_source> open_any(const dataset_spec& given) {
  if (given.memory) return std::make_unique<memory_source>(given.path, *given.memory);
  const dataset_spec spec = resolve_by_content(given);
  switch (spec.kind) {
    case file_kind::npy: return std::make_unique<npy_source>(spec);
    case file_kind::npz: return std::make_unique<npz_source>(spec);
    case file_kind::raw: return std::make_unique<raw_source>(spec);
    case file_kind::hdf5: return detail::open_hdf5(spec);
  }
  throw error(errc::internal, "unknown file kind");
}

}  // namespace

namespace {

/** Rows [first, end) of another source, as rows 0.. of its own (dataset_spec::first_row). */
class row_range_source final : public sample_source {
 public:
  row_range_source(std::unique_ptr<sample_source> inner, u64 first, u64 end)
      : inner_(std::move(inner)), first_(first), shape_(inner_->shape()),
        range_("samples " + std::to_string(first) + ":" + std::to_string(end)),
        name_(inner_->name() + "[" + std::to_string(first) + ":" + std::to_string(end) + "]") {
    shape_[0] = end - first;
  }
  std::string name() const override { return name_; }
  const npy_dtype& type() const override { return inner_->type(); }
  const std::vector<u64>& shape() const override { return shape_; }
  bool rereadable() const override { return inner_->rereadable(); }
  /** (The inner reads' size where the range starts on a boundary of them; else 1: shifted,
   *  each read would straddle two of an HDF5 dataset's chunks.) */
  u64 preferred_rows() const override {
    const u64 p = inner_->preferred_rows();
    return p > 1 && first_ % p != 0 ? 1 : p;
  }
  void read_rows(u64 first, u64 count, void* dst) override {
    if (!inner_->rereadable() && !skipped_) {
      skipped_ = true;
      pass_over(0, first_);  // a stream: the rows before the range
    }
    inner_->read_rows(first_ + first, count, dst);
    if (!inner_->rereadable() && first + count == shape_[0]) {
      pass_over(first_ + shape_[0], inner_->rows());  // and those after it
    }
  }
  std::string dataset_path() const override { return inner_->dataset_path(); }
  /** (The dataset's note, which may be about rows outside the range: said so.) */
  std::string note() const override {
    const std::string n = inner_->note();
    return n.empty() ? n : n + " (of the whole dataset, not only the " + range_ + " taken)";
  }
  std::string unwritten(u64 sample, bool nonfinite) const override {
    return inner_->unwritten(first_ + sample, nonfinite);
  }
  std::string reader() const override { return inner_->reader(); }
  void watch(std::function<void()> check) override { inner_->watch(std::move(check)); }
  u64 whole_rows() const override { return inner_->rows(); }

 private:
  /** A stream's rows [at, to), read and let go (in pieces: for_each_row_piece): those before
   *  the range, and those after it, so that the stream is read whole, as without a range (its
   *  checks of a truncated or overlong stream made, its writer not cut off by a broken pipe). */
  void pass_over(u64 at, u64 to) {
    if (at >= to) return;
    for_each_row_piece(
        to - at, row_bytes(),
        [&](u64 first, u64 count, void* dst) { inner_->read_rows(at + first, count, dst); },
        [](const void*, u64, u64) {});
  }

  std::unique_ptr<sample_source> inner_;
  u64 first_;
  std::vector<u64> shape_;
  std::string range_, name_;
  bool skipped_ = false;
};

}  // namespace

std::unique_ptr<sample_source> open_dataset(const dataset_spec& given) {
  auto s = open_any(given);
  // Whatever the file claims (an HDF5 dataset's extent costs nothing to declare), its bytes
  // must count in 64 bits: row_bytes() and every size made from the shape rely on it.
  (void)checked_count(s->shape(), s->name(), s->type().itemsize);
  return take_row_range(std::move(s), given);
}

namespace {

/** A range as typed: `7:` is "sample range 7:" (not "7:5", an end never given), `16` "sample
 *  16" (not "16:17"). */
std::string sample_range_text(u64 first, std::optional<u64> end) {
  if (end && *end == first + 1) return "sample " + std::to_string(first);
  return "sample range " + std::to_string(first) + ":" + (end ? std::to_string(*end) : "");
}

}  // namespace

std::string sample_range_problem(u64 first, std::optional<u64> end, u64 total) {
  const u64 last = end.value_or(total);
  if (first < last && last <= total) return {};
  return sample_range_text(first, end) + (first >= total ? " is past the end"
                                          : last > total ? " runs past the end"
                                                         : " is empty");
}

std::unique_ptr<sample_source> take_row_range(std::unique_ptr<sample_source> s,
                                              const dataset_spec& given) {
  if (!given.has_row_range()) return s;
  const u64 first = given.first_row;
  const auto& shape = s->shape();
  if (given.purpose == dataset_spec::role::data && (shape.size() < 2 || shape.size() > 4)) {
    // No layout takes it, range or not: the same error (exit 3) as without a range, of the
    // whole array's shape.
    try {
      (void)resolve_layout(shape, layout::automatic);
    } catch (const error& e) {
      throw error(e.code(), s->name() + ": " + e.what());
    }
  }
  if (shape.empty() || (given.purpose == dataset_spec::role::data && shape.size() < 3)) {
    throw error(errc::invalid_argument,
                s->name() + ": " + sample_range_text(first, given.end_row) + ": " +
                    (shape.empty() ? std::string("a 0-d array has no samples to choose")
                                   : "an array of " + std::to_string(shape.size()) +
                                         (shape.size() == 1 ? " axis" : " axes") +
                                         " is one image, not samples to choose from"));
  }
  const u64 total = shape[0];
  if (const std::string problem = sample_range_problem(first, given.end_row, total);
      !problem.empty()) {
    throw error(errc::invalid_argument, s->name() + ": " + problem + ": it holds " +
                                            std::to_string(total) +
                                            (total == 1 ? " sample" : " samples"));
  }
  return std::make_unique<row_range_source>(std::move(s), first, given.end_row.value_or(total));
}

namespace {

/** `e`, an existing output refused, as the error for `spec`: an HDF5 or .npz file named with
 *  a dataset or array (-o res.h5:/test, where res.h5 holds /train) reads as "add it", which
 *  "use -f to overwrite" would not do: say what -f would. */
error existing_output(const error& e, const dataset_spec& spec) {
  if (e.code() != errc::output_exists || spec.dataset.empty() ||
      (spec.kind != file_kind::hdf5 && spec.kind != file_kind::npz)) {
    return e;
  }
  return error(e.code(), spec.path + ": already exists; -f would replace the whole file, not "
                                     "add " + spec.dataset + " to it (dctchop writes whole files "
                                     "only)");
}

}  // namespace

void for_each_row_piece(u64 rows, u64 row_bytes, const row_source& from,
                        const std::function<void(const void*, u64, u64)>& put) {
  if (rows == 0) return;
  const u64 per = std::max<u64>(1, (u64(1) << 20) / std::max<u64>(row_bytes, 1));
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min(per, rows) * row_bytes));
  for (u64 first = 0; first < rows; first += per) {
    const u64 n = std::min(per, rows - first);
    from(first, n, buf.data());
    put(buf.data(), first, n);
  }
}

void check_dataset_output(const dataset_spec& spec, bool overwrite) {
  try {
    check_output_path(spec.path, overwrite, spec.kind == file_kind::hdf5);
  } catch (const error& e) {
    throw existing_output(e, spec);
  }
}

std::unique_ptr<sample_sink> create_dataset(const dataset_spec& spec, const npy_dtype& type,
                                            const std::vector<u64>& shape, bool overwrite,
                                            const nlohmann::json& attributes) {
  if (spec.memory) throw error(errc::invalid_argument, spec.path + ": an array in memory is an input only");
  try {
    switch (spec.kind) {
      case file_kind::npy: return std::make_unique<npy_sink>(spec.path, type, shape, overwrite);
      case file_kind::npz:
        if (!spec.dataset.empty()) detail::check_member_key(npz_key(spec.dataset), spec.path);
        return std::make_unique<npz_sink>(spec, type, shape, overwrite);
      case file_kind::raw: return std::make_unique<raw_sink>(spec.path, type, shape, overwrite);
      case file_kind::hdf5: return detail::create_hdf5(spec, type, shape, overwrite, attributes);
    }
  } catch (const error& e) {
    throw existing_output(e, spec);
  }
  throw error(errc::internal, "unknown file kind");
}

bool hdf5_available() noexcept { return true; }

const char* npz_inflater() noexcept { return detail::inflater_name(detail::fastest_inflater()); }

}  // namespace dctchop::formats
