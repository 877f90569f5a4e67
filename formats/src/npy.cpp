// NumPy .npy reader and writer. Format:
// https://numpy.org/devdocs/reference/generated/numpy.lib.format.html
//
//   "\x93NUMPY" major minor  header_len (u16 LE for 1.x, u32 LE for 2.x/3.x)  header  data
//
// The header is a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), }
// padded with spaces and a newline so that the data starts at a multiple of 64 bytes.
#include "dctchop/formats/npy.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "byte_order.hpp"
#include "byte_source.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "file_magic.hpp"

namespace dctchop::formats {
namespace {

constexpr std::array<char, 6> k_magic = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t k_align = 64;
// numpy leaves room for the growing axis to reach this many digits (GROWTH_AXIS_MAX_DIGITS).
constexpr std::size_t k_growth_axis_max_digits = 21;
// A sanity bound on the header length: numpy's own headers are a few hundred bytes; this
// keeps a corrupt length from allocating gigabytes (stdin cannot be checked against a size).
constexpr std::uint64_t k_max_header_len = std::uint64_t{1} << 24;
/** The largest Fortran-order array of a deflated .npz member that is held whole to be read. */
constexpr std::uint64_t k_fortran_held_bytes = std::uint64_t{64} << 20;
constexpr bool k_native_big = std::endian::native == std::endian::big;

[[noreturn]] void fail(errc code, const std::string& name, const std::string& what) {
  throw error(code, name + ": " + what);
}

// Quote text from a file for a one-line message, bounded in length. Its bytes as they are
// (a '?' lost which one it was): the command prints a message's control characters and
// bytes that are not UTF-8 escaped, and --json gives its text, as for names from anywhere.
std::string bounded(std::string_view s, std::size_t max_len = 40) {
  std::string out(s.substr(0, max_len));
  if (s.size() > max_len) out += "...";
  return out;
}

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  out = a * b;
  return false;
}

std::string shape_repr(const std::vector<std::uint64_t>& shape) {
  // Python's repr of a tuple: (), (5,), (2, 3)
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ',';
  s += ')';
  return s;
}

void byteswap_in_place(void* data, std::uint64_t count, std::size_t itemsize) {
  auto* p = static_cast<unsigned char*>(data);
  switch (itemsize) {
    case 2:
      for (std::uint64_t i = 0; i < count; ++i, p += 2) std::swap(p[0], p[1]);
      break;
    case 4:
      for (std::uint64_t i = 0; i < count; ++i, p += 4) {
        std::uint32_t v;
        std::memcpy(&v, p, 4);
        v = __builtin_bswap32(v);
        std::memcpy(p, &v, 4);
      }
      break;
    case 8:
      for (std::uint64_t i = 0; i < count; ++i, p += 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        v = __builtin_bswap64(v);
        std::memcpy(p, &v, 8);
      }
      break;
    default:
      break;
  }
}

}  // namespace

std::string unsupported_descr_reason(const std::string& descr) {
  std::string_view d = descr;
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) d.remove_prefix(1);
  const char k = d.empty() ? '\0' : d[0];
  std::string why;
  switch (k) {
    case 'O':
      why = "object arrays (pickled Python objects) are not supported";
      break;
    case 'S':
    case 'a':
    case 'U':
      why = "string arrays are not supported";
      break;
    case 'V':
      why = "void (raw bytes) arrays are not supported";
      break;
    case 'c':
      why = "complex arrays are not supported";
      break;
    case 'M':
    case 'm':
      why = "datetime and timedelta arrays are not supported";
      break;
    case 'f':  // numpy's long double: 'f16' on x86-64 (80 bits in 16 bytes), 'f12' on i386
      if (d == "f16" || d == "f12") {
        why = "long double (np.longdouble, float128) arrays are not supported; convert to float64";
        break;
      }
      why = "this element type is not supported";
      break;
    default:
      why = "this element type is not supported";
      break;
  }
  return "dtype '" + bounded(descr) + "': " + why +
         " (data: " + k_dtype_numpy_names + "; labels: bool, int8..int64, uint8..uint64 or "
         "float16..float64)";
}

namespace {

// ---- the header dict: a small parser for the Python literal numpy writes ----

struct header_dict {
  std::string descr;
  bool descr_is_list = false;  // structured dtype
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
};

class dict_parser {
 public:
  dict_parser(std::string_view text, std::string name) : s_(text), name_(std::move(name)) {}

  header_dict parse() {
    header_dict d;
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{', "the header does not start with '{'");
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = parse_string("a quoted key");
      skip_ws();
      expect(':', "expected ':' after key '" + bounded(key) + "'");
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad("duplicate key 'descr'");
        have_descr = true;
        if (peek() == '[') {
          d.descr_is_list = true;
          skip_balanced('[', ']');
        } else {
          d.descr = parse_string("a quoted descr string");
        }
      } else if (key == "fortran_order") {
        if (have_fortran) bad("duplicate key 'fortran_order'");
        have_fortran = true;
        d.fortran_order = parse_bool();
      } else if (key == "shape") {
        if (have_shape) bad("duplicate key 'shape'");
        have_shape = true;
        d.shape = parse_shape();
      } else {
        bad("unexpected key '" + bounded(key) + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != '}') {
        bad("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    skip_ws();
    if (i_ != s_.size()) bad("unexpected text after the closing '}'");
    if (!have_descr) bad("missing key 'descr'");
    if (!have_fortran) bad("missing key 'fortran_order'");
    if (!have_shape) bad("missing key 'shape'");
    return d;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(errc::bad_input, name_, "malformed .npy header: " + what);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' ||
                              s_[i_] == '\f' || s_[i_] == '\v')) {
      ++i_;
    }
  }
  void expect(char c, const std::string& what) {
    if (peek() != c) bad(what);
    ++i_;
  }
  std::string parse_string(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') bad(std::string("expected ") + what);
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\' || s_[i_] == '\n') bad("unsupported escape or newline in a string");
      out += s_[i_++];
    }
    if (i_ >= s_.size()) bad("unterminated string");
    ++i_;
    return out;
  }
  bool parse_bool() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    bad("'fortran_order' is not True or False");
  }
  std::uint64_t parse_uint() {
    if (!(peek() >= '0' && peek() <= '9')) bad("'shape' is not a tuple of non-negative integers");
    std::uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const auto digit = static_cast<std::uint64_t>(peek() - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
        bad("a dimension in 'shape' is too large");
      }
      v = v * 10 + digit;
      ++i_;
    }
    if (peek() == 'L' || peek() == 'l') ++i_;  // Python 2 long literal, e.g. (3L,)
    return v;
  }
  std::vector<std::uint64_t> parse_shape() {
    std::vector<std::uint64_t> shape;
    expect('(', "'shape' is not a tuple");
    skip_ws();
    while (peek() != ')') {
      shape.push_back(parse_uint());
      skip_ws();
      if (peek() == ',') {
        ++i_;
        skip_ws();
      } else if (peek() != ')') {
        bad("expected ',' or ')' in 'shape'");
      }
    }
    ++i_;
    return shape;
  }
  // Skip a bracketed value (a structured descr) so the other keys can still be checked.
  void skip_balanced(char open, char close) {
    int depth = 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '\'' || c == '"') {
        parse_string("a string");
        continue;
      }
      if (c == open || c == '(') ++depth;
      if (c == close || c == ')') --depth;
      ++i_;
      if (depth == 0) return;
    }
    bad("unterminated list in 'descr'");
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string name_;
};

/** A whole file, or stdin. */
class file_bytes final : public detail::byte_source {
 public:
  explicit file_bytes(input_file f) : f_(std::move(f)) {
    f_.set_truncation_code(errc::bad_input);  // a short .npy is bad input, not a corrupt archive
  }
  std::string display_name() const override { return f_.display_name(); }
  bool seekable() const override { return f_.seekable(); }
  std::uint64_t size() const override { return f_.size(); }
  std::size_t read(void* dst, std::size_t n) override { return f_.read(dst, n); }
  void read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what) override {
    f_.read_at(offset, dst, n, what);
  }
  void read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what,
               unsigned threads) override {
    f_.read_at(offset, dst, n, what, threads);
  }
  void watch(std::function<void()> check) override { f_.watch(std::move(check)); }

 private:
  input_file f_;
};

// Read up to n bytes; fewer only at end of input.
std::size_t read_some(detail::byte_source& f, void* dst, std::size_t n) {
  auto* p = static_cast<char*>(dst);
  std::size_t got = 0;
  while (got < n) {
    const std::size_t r = f.read(p + got, n - got);
    if (r == 0) break;
    got += r;
  }
  return got;
}

}  // namespace

// ---- npy_dtype ----

std::string npy_dtype::numpy_name() const {
  if (kind == 'b') return "bool";
  return (kind == 'u' ? "uint" : kind == 'i' ? "int" : "float") + std::to_string(8 * itemsize);
}

std::string npy_dtype::native_descr() const {
  std::string s;
  s += itemsize == 1 ? '|' : (k_native_big ? '>' : '<');
  s += kind;
  s += std::to_string(itemsize);
  return s;
}

std::optional<dtype> npy_dtype::codec_dtype() const {
  if (kind == 'u' && itemsize == 1) return dtype::u8;
  if (kind == 'u' && itemsize == 2) return dtype::u16;
  if (kind == 'i' && itemsize == 2) return dtype::i16;
  if (kind == 'f' && itemsize == 4) return dtype::f32;
  if (kind == 'f' && itemsize == 8) return dtype::f64;
  if (kind == 'f' && itemsize == 2) return dtype::f16;
  if (kind == 'i' && itemsize == 1) return dtype::i8;
  if (kind == 'i' && itemsize == 4) return dtype::i32;
  if (kind == 'u' && itemsize == 4) return dtype::u32;
  return std::nullopt;
}

std::optional<npy_dtype> parse_npy_descr(const std::string& descr) {
  std::string_view d = descr;
  char order = '=';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    d.remove_prefix(1);
  }
  // numpy's names and type characters, which np.dtype() takes in a hand-written header
  // ('uint8', 'B'); numpy itself writes the kind and size ('|u1').
  static constexpr std::pair<std::string_view, std::string_view> k_aliases[] = {
      {"bool", "b1"},    {"?", "b1"},      {"int8", "i1"},    {"b", "i1"},    {"uint8", "u1"},
      {"B", "u1"},       {"int16", "i2"},  {"h", "i2"},       {"uint16", "u2"}, {"H", "u2"},
      {"int32", "i4"},   {"i", "i4"},      {"uint32", "u4"},  {"I", "u4"},    {"int64", "i8"},
      {"q", "i8"},       {"l", "i8"},      {"uint64", "u8"},  {"Q", "u8"},    {"L", "u8"},
      {"float16", "f2"}, {"e", "f2"},      {"float32", "f4"}, {"f", "f4"},    {"float64", "f8"},
      {"d", "f8"}};
  for (const auto& [alias, canonical] : k_aliases) {
    if (d == alias) {
      d = canonical;
      break;
    }
  }
  if (d.size() != 2) return std::nullopt;  // kind + one digit: all numeric types we take
  npy_dtype t;
  t.kind = d[0];
  if (d[1] < '1' || d[1] > '8') return std::nullopt;
  t.itemsize = static_cast<std::size_t>(d[1] - '0');
  switch (t.kind) {
    case 'b':
      if (t.itemsize != 1) return std::nullopt;
      break;
    case 'i':
    case 'u':
      if (t.itemsize != 1 && t.itemsize != 2 && t.itemsize != 4 && t.itemsize != 8) {
        return std::nullopt;
      }
      break;
    case 'f':
      if (t.itemsize != 2 && t.itemsize != 4 && t.itemsize != 8) return std::nullopt;
      break;
    default:
      return std::nullopt;
  }
  if (t.itemsize == 1) {
    t.big_endian = false;
  } else if (order == '>') {
    t.big_endian = true;
  } else if (order == '<') {
    t.big_endian = false;
  } else {
    // '=' native; '|' (not applicable) on a multi-byte type numpy takes as native too
    // (np.dtype('|u2') is uint16): a hand-made header's, which np.load reads.
    t.big_endian = k_native_big;
  }
  return t;
}

npy_dtype npy_dtype_of(dtype t) {
  npy_dtype d;
  d.kind = is_float(t) ? 'f' : (t == dtype::u8 || t == dtype::u16 || t == dtype::u32) ? 'u' : 'i';
  d.itemsize = size_of(t);
  d.big_endian = false;
  return d;
}

// ---- npy_header ----

std::uint64_t npy_header::count() const {
  std::uint64_t n = 1;
  for (auto s : shape) {
    if (mul_overflows(n, s, n)) throw error(errc::invalid_argument, "npy shape is too large");
  }
  return n;
}

std::uint64_t npy_header::row_bytes() const {
  std::uint64_t n = type.itemsize;
  for (std::size_t i = 1; i < shape.size(); ++i) {
    if (mul_overflows(n, shape[i], n))
      throw error(errc::invalid_argument, "npy shape is too large");
  }
  return n;
}

// ---- npy_reader ----

npy_reader::npy_reader(std::unique_ptr<detail::byte_source> src) : src_(std::move(src)) {}
npy_reader::npy_reader(npy_reader&&) noexcept = default;
npy_reader& npy_reader::operator=(npy_reader&&) noexcept = default;
npy_reader::~npy_reader() = default;

npy_reader npy_reader::open(const std::string& path, const std::string& stdin_name) {
  return open(std::make_unique<file_bytes>(input_file::open(path, stdin_name)));
}

npy_reader npy_reader::open(std::unique_ptr<detail::byte_source> bytes) {
  npy_reader r(std::move(bytes));
  detail::byte_source& f = *r.src_;
  const std::string name = f.display_name();
  npy_header& h = r.header_;

  // Magic and version.
  std::array<unsigned char, 8> pre{};
  const std::size_t got = read_some(f, pre.data(), pre.size());
  if (got == 0) fail(errc::bad_input, name, "empty (0 bytes), not a .npy file");
  if (got < k_magic.size() || std::memcmp(pre.data(), k_magic.data(), k_magic.size()) != 0) {
    // Name the files that users hand over by mistake.
    const detail::file_magic magic = detail::magic_of(pre.data(), got);
    if (magic == detail::file_magic::archive)
      fail(errc::bad_input, name, "is a dctchop archive, not a .npy file (decompress it first)");
    // Through a pipe, an HDF5 or ZIP file is fine data that cannot be read that way: a usage
    // error (2), as for a FIFO named FILE.h5 or FILE.npz, not bad input.
    const errc piped = f.seekable() ? errc::bad_input : errc::invalid_argument;
    if (magic == detail::file_magic::other && f.seekable() &&
        detail::hdf5_after_user_block(f.size(), [&f](std::uint64_t at, void* head) {
          try {  // (a short file: no signature there)
            f.read_at(at, head, 8, "a user block");
            return true;
          } catch (const error&) {
            return false;
          }
        })) {
      fail(errc::bad_input, name, "is an HDF5 file (after a user block), not a .npy file "
                                  "(name it .h5)");
    }
    if (magic == detail::file_magic::hdf5)
      fail(piped, name,
           f.seekable() ? detail::not_npy_text(magic)
                        : "is an HDF5 file, which is read by seeking: pass the file's name "
                          "(FILE.h5), not a pipe or standard input");
    if (magic == detail::file_magic::zip)
      fail(piped, name,
           f.seekable() ? detail::not_npy_text(magic)
                        : "is a ZIP file (numpy's .npz?), which is read from its end: pass the "
                          "file's name (FILE.npz), not a pipe or standard input");
    fail(errc::bad_input, name, "not a .npy file (bad magic; expected \\x93NUMPY)");
  }
  if (got < pre.size()) fail(errc::bad_input, name, "truncated .npy file (no version)");
  h.major = pre[6];
  h.minor = pre[7];
  if ((h.major != 1 && h.major != 2 && h.major != 3) || h.minor != 0) {
    fail(errc::bad_input, name,
         "unsupported .npy format version " + std::to_string(h.major) + "." +
             std::to_string(h.minor) + " (supported: 1.0, 2.0, 3.0)");
  }

  // Header length and header.
  const std::size_t len_bytes = h.major == 1 ? 2 : 4;
  std::array<unsigned char, 4> lb{};
  if (read_some(f, lb.data(), len_bytes) < len_bytes) {
    fail(errc::bad_input, name, "truncated .npy file (no header length)");
  }
  const std::uint64_t header_len = detail::get_le(lb.data(), static_cast<int>(len_bytes));
  const std::uint64_t prefix = pre.size() + len_bytes;
  if (header_len > k_max_header_len) {
    fail(errc::bad_input, name,
         "malformed .npy header: header length " + std::to_string(header_len) +
             " is implausibly large");
  }
  const bool sized = f.seekable() || f.restartable();  // size() known
  if (sized && header_len > f.size() - prefix) {
    fail(errc::bad_input, name,
         "truncated .npy file (header length " + std::to_string(header_len) +
             " is larger than the file)");
  }
  std::string text(static_cast<std::size_t>(header_len), '\0');
  if (read_some(f, text.data(), text.size()) < text.size()) {
    fail(errc::bad_input, name, "truncated .npy file (header cut short)");
  }
  h.data_offset = prefix + header_len;

  // The dict.
  header_dict d = dict_parser(text, name).parse();
  if (d.descr_is_list) {
    fail(errc::bad_input, name,
         "structured dtypes (records with named fields) are not supported; save one numeric "
         "field per file");
  }
  const auto type = parse_npy_descr(d.descr);
  if (!type) fail(errc::bad_input, name, unsupported_descr_reason(d.descr));
  h.type = *type;
  h.fortran_order = d.fortran_order;
  h.shape = std::move(d.shape);

  // Sizes, guarded against overflow.
  std::uint64_t count = 1;
  for (auto s : h.shape) {
    if (mul_overflows(count, s, count)) {
      fail(errc::bad_input, name, "shape " + shape_repr(h.shape) + " is too large");
    }
  }
  std::uint64_t data_bytes = 0;
  if (mul_overflows(count, h.type.itemsize, data_bytes) ||
      data_bytes > std::numeric_limits<std::uint64_t>::max() - h.data_offset ||
      data_bytes > std::numeric_limits<std::size_t>::max()) {
    fail(errc::bad_input, name, "shape " + shape_repr(h.shape) + " is too large");
  }

  std::size_t dims_over_one = 0;
  for (auto s : h.shape) dims_over_one += s > 1 ? 1 : 0;
  if (sized && f.size() - h.data_offset < data_bytes) {
    fail(errc::bad_input, name,
         "truncated .npy file: shape " + shape_repr(h.shape) + " of " + h.type.native_descr() +
             " needs " + std::to_string(data_bytes) + " data bytes, the file holds " +
             std::to_string(f.size() - h.data_offset));
  }
  // A file's rows are read with pread, a Fortran-order gather too, a run of each column at a
  // time (read_rows): through a map, the kernel's fault-around put pages from all over the
  // file in the resident set (200 MB for a 147 MB array, 381 for 300), no faster.
  if (!f.seekable() && h.fortran_order && dims_over_one > 1) {
    // A deflated .npz member (numpy writes labels of pandas' .values that way): a small one
    // is inflated whole and gathered in memory, its CRC checked now.
    if (f.restartable() && data_bytes <= k_fortran_held_bytes) {
      r.hold_ = true;  // (at the first read: opening members to list them reads no data)
      return r;
    }
    fail(errc::bad_input, name,
         f.restartable()
             ? "Fortran-order arrays above 64 MiB cannot be read from a compressed .npz member; "
               "save it with np.savez (uncompressed) or as a C-order array "
               "(np.ascontiguousarray)"
             : "Fortran-order arrays cannot be read from a pipe or standard input; save the "
               "array to a file and pass its path");
  }
  return r;
}

void npy_reader::skip(std::uint64_t bytes) {
  std::vector<unsigned char> scratch(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 1 << 20)));
  while (bytes > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, scratch.size()));
    if (read_some(*src_, scratch.data(), n) < n) {
      fail(errc::bad_input, display_name(), "truncated .npy data");
    }
    bytes -= n;
  }
}

std::string npy_reader::display_name() const {
  return src_ ? src_->display_name() : std::string("<a moved-from npy_reader>");
}

std::uint64_t npy_reader::rows() const {
  return header_.shape.empty() ? 1 : header_.shape[0];
}

void npy_reader::watch(std::function<void()> check) {
  if (src_) src_->watch(std::move(check));
}

void npy_reader::read_rows(std::uint64_t first, std::uint64_t count, void* dst) {
  if (!src_) {  // (as the other readers and writers: an error, not a null dereference)
    throw error(errc::invalid_argument, "npy_reader: read after it was moved from");
  }
  const std::uint64_t n_rows = rows();
  if (first > n_rows || count > n_rows - first) {
    throw error(errc::invalid_argument, display_name() + ": rows [" + std::to_string(first) + ", " +
                                            std::to_string(first + count) +
                                            ") are out of range (the array has " +
                                            std::to_string(n_rows) + " rows)");
  }
  const std::uint64_t row_bytes = header_.row_bytes();
  if (hold_ && data_ == nullptr) {
    // The whole array, inflated in order, its CRC checked; then gathered from memory.
    std::vector<std::byte> all(static_cast<std::size_t>(n_rows * row_bytes));
    if (read_some(*src_, all.data(), all.size()) < all.size()) {
      fail(errc::bad_input, display_name(),
           "truncated .npy data (shape " + shape_repr(header_.shape) + ")");
    }
    src_->finish();
    held_ = std::move(all);
    data_ = held_.data();
  }
  // A stream, read as it comes (unless its array is held whole in memory).
  const bool stream = !src_->seekable() && !hold_;
  if (stream && first != next_row_ && src_->restartable()) {
    // A deflated .npz member: decode again from the start to go back, and skip to go on.
    if (first < next_row_) {
      src_->restart();
      skip(header_.data_offset);
      next_row_ = 0;
    }
    skip((first - next_row_) * row_bytes);
    next_row_ = first;
  }
  if (stream && first != next_row_) {
    throw error(errc::invalid_argument,
                display_name() +
                    ": rows must be read in order, each once, from a stream "
                    "(asked for row " +
                    std::to_string(first) + ", next is " + std::to_string(next_row_) + ")");
  }
  const std::size_t itemsize = header_.type.itemsize;
  const std::size_t bytes = static_cast<std::size_t>(count * row_bytes);
  auto* out = static_cast<unsigned char*>(dst);

  if (stream) {
    if (read_some(*src_, out, bytes) < bytes) {
      fail(errc::bad_input, display_name(),
           "truncated .npy data: the stream ended inside rows " + std::to_string(first) + ".." +
               std::to_string(first + count - 1) + " of " + std::to_string(n_rows) + " (shape " +
               shape_repr(header_.shape) + ")");
    }
    next_row_ = first + count;
    if (next_row_ == n_rows && !src_->restartable()) {
      // A pipe ends with its array (`cat a.npy b.npy |` would lose b silently). A file may
      // hold more bytes after its data, which np.load ignores, and so does this reader.
      unsigned char extra;
      if (read_some(*src_, &extra, 1) != 0) {
        fail(errc::bad_input, display_name(),
             "more bytes follow the array's data (a second .npy?): one array is read from a "
             "stream; pass each file on its own");
      }
    }
  } else if (bytes == 0) {
    return;
  } else if (!header_.fortran_order) {
    // pread rather than a copy from the map: pages read through a map count in the process's
    // resident set until unmapped, so a long C-order read would grow it to the file's size.
    const std::uint64_t offset = first * row_bytes;
    src_->read_at(header_.data_offset + offset, out, bytes, "npy rows", read_threads_);
  } else {
    // Fortran order: axis 0 varies fastest in the file, so element (i0, i1, ..., in) sits at
    // i0 + shape[0] * k, k the Fortran index of (i1, ..., in) (i1 fastest). The requested
    // rows of each k are one run in the file, taken in file order and scattered into dst's
    // column of (i1, ..., in) in C order. Runs that lie close together (shape[0] values of
    // at most 16 KiB apart) are read a MiB of the file at a time; runs far apart, each with
    // a read of its own (a map of the file kept every page a gather touched resident, and
    // a read per run of a few bytes ran 10 to 30 times slower than either).
    const auto& shape = header_.shape;
    const std::uint64_t per_row = row_bytes / itemsize;  // elements in one row
    const std::uint64_t rows0 = shape.empty() ? 1 : shape[0];  // (a 0-d array: one value)
    const std::uint64_t run_bytes = count * itemsize, stride = rows0 * itemsize;
    std::vector<std::uint64_t> idx(shape.size(), 0);      // (i1, ..., in), i1 fastest
    std::vector<std::uint64_t> cstride(shape.size(), 1);  // of each axis in a C-order row
    for (std::size_t a = shape.size(); a-- > 2;) cstride[a - 1] = cstride[a] * shape[a];
    const bool blocks = data_ == nullptr && stride <= (std::uint64_t(16) << 10);
    const std::uint64_t per_block =
        blocks ? std::max<std::uint64_t>(1, (std::uint64_t(1) << 20) / stride) : 1;
    std::vector<unsigned char> buf(
        data_ != nullptr ? 0 : static_cast<std::size_t>((per_block - 1) * stride + run_bytes));
    std::uint64_t col = 0;  // dst's column of idx
    for (std::uint64_t k0 = 0; k0 < per_row; k0 += per_block) {
      const std::uint64_t k1 = std::min(per_row, k0 + per_block);
      const std::uint64_t at = k0 * stride + first * itemsize;  // (in the data)
      if (data_ == nullptr) {
        src_->read_at(header_.data_offset + at, buf.data(),
                      static_cast<std::size_t>((k1 - k0 - 1) * stride + run_bytes), "npy rows");
      }
      for (std::uint64_t k = k0; k < k1; ++k) {
        const unsigned char* src =
            data_ != nullptr ? reinterpret_cast<const unsigned char*>(data_) + k * stride +
                                   first * itemsize
                             : buf.data() + (k - k0) * stride;
        unsigned char* d = out + col * itemsize;
        for (std::uint64_t r = 0; r < count; ++r) {
          std::memcpy(d + r * row_bytes, src + r * itemsize, itemsize);
        }
        for (std::size_t a = 1; a < shape.size(); ++a) {  // advance, i1 fastest
          col += cstride[a];
          if (++idx[a] < shape[a]) break;
          col -= idx[a] * cstride[a];
          idx[a] = 0;
        }
      }
    }
  }

  if (first + count == n_rows && !hold_) src_->finish();  // (held: checked when read whole)

  if (itemsize > 1 && header_.type.big_endian != k_native_big) {
    byteswap_in_place(out, bytes / itemsize, itemsize);
  }
}

// ---- the header and npy_writer ----

std::vector<char> make_npy_header(const npy_dtype& type, const std::vector<std::uint64_t>& shape,
                                  bool fortran_order) {
  std::string descr;
  descr += type.itemsize == 1 ? '|' : (type.big_endian ? '>' : '<');
  descr += type.kind;
  descr += std::to_string(type.itemsize);

  // Exactly what numpy.lib.format._write_array_header produces: sorted keys, repr() values,
  // spaces so the growing axis can be rewritten in place, then padding and a newline.
  std::string dict = "{'descr': '" + descr +
                     "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                     ", 'shape': " + shape_repr(shape) + ", }";
  if (!shape.empty()) {
    const std::size_t digits = std::to_string(fortran_order ? shape.back() : shape.front()).size();
    if (digits < k_growth_axis_max_digits) dict.append(k_growth_axis_max_digits - digits, ' ');
  }

  int major = 1;
  std::size_t len_bytes = 2;
  auto padded_len = [&]() {
    const std::size_t hlen = dict.size() + 1;  // + newline
    const std::size_t pad = k_align - (k_magic.size() + 2 + len_bytes + hlen) % k_align;
    return hlen + pad;
  };
  std::size_t total = padded_len();
  if (total > 0xffff) {
    major = 2;
    len_bytes = 4;
    total = padded_len();
  }

  std::vector<char> out(k_magic.begin(), k_magic.end());
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (std::size_t i = 0; i < len_bytes; ++i) {
    out.push_back(static_cast<char>((total >> (8 * i)) & 0xff));
  }
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), total - dict.size() - 1, ' ');
  out.push_back('\n');
  return out;
}

npy_writer npy_writer::create(const std::string& path, const npy_dtype& type,
                              const std::vector<std::uint64_t>& shape, bool overwrite) {
  npy_dtype le = type;
  le.big_endian = false;
  if (!parse_npy_descr(le.native_descr())) {
    throw error(errc::invalid_argument, path + ": cannot write a .npy of element type '" +
                                            std::string(1, type.kind) +
                                            std::to_string(type.itemsize) + "'");
  }
  npy_header h;
  h.type = le;
  h.shape = shape;
  std::uint64_t count = 1;
  std::uint64_t bytes = 0;
  for (auto s : shape) {
    if (mul_overflows(count, s, count)) {
      throw error(errc::invalid_argument, path + ": shape " + shape_repr(shape) + " is too large");
    }
  }
  if (mul_overflows(count, le.itemsize, bytes)) {
    throw error(errc::invalid_argument, path + ": shape " + shape_repr(shape) + " is too large");
  }
  const std::vector<char> header = make_npy_header(le, shape, false);
  npy_writer w(output_file::create(path, overwrite));
  w.out_.write(header.data(), header.size());
  h.major = header[6];
  h.data_offset = header.size();
  w.header_ = std::move(h);
  return w;
}

void npy_writer::write_rows(const void* src, std::uint64_t count) {
  const std::uint64_t n_rows = header_.shape.empty() ? 1 : header_.shape[0];
  if (finished_ || count > n_rows - rows_written_) {
    throw error(errc::invalid_argument, display_name() + ": writing " + std::to_string(count) +
                                    " rows after " + std::to_string(rows_written_) + " of " +
                                    std::to_string(n_rows) +
                                    (finished_ ? " (already finished)" : ""));
  }
  if (count == 0) return;
  const std::uint64_t row_bytes = header_.row_bytes();
  const std::size_t itemsize = header_.type.itemsize;
  const auto* p = static_cast<const unsigned char*>(src);
  const std::uint64_t bytes = count * row_bytes;
  if (!k_native_big || itemsize == 1) {
    out_.write(p, static_cast<std::size_t>(bytes));
  } else {
    // Big-endian host: swap through a bounded buffer.
    constexpr std::size_t k_buf = std::size_t{1} << 20;
    std::vector<unsigned char> buf(std::min<std::uint64_t>(bytes, k_buf));
    for (std::uint64_t done = 0; done < bytes;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, k_buf));
      std::memcpy(buf.data(), p + done, n);
      byteswap_in_place(buf.data(), n / itemsize, itemsize);
      out_.write(buf.data(), n);
      done += n;
    }
  }
  rows_written_ += count;
}

void npy_writer::prepare() {
  const std::uint64_t n_rows = header_.shape.empty() ? 1 : header_.shape[0];
  if (finished_) throw error(errc::invalid_argument, display_name() + ": finish() called twice");
  if (rows_written_ != n_rows) {
    throw error(errc::invalid_argument, display_name() + ": " + std::to_string(rows_written_) + " of " +
                                    std::to_string(n_rows) + " rows written at finish()");
  }
  out_.flush_to_disk();
}

void npy_writer::withdraw() noexcept { out_.withdraw(); }

void npy_writer::finish() {
  prepare();
  out_.commit();
  finished_ = true;
}

}  // namespace dctchop::formats
