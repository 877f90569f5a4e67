/** @file test_util.hpp
 *  Helpers shared by the archive, pipeline and CLI tests: scratch folders, whole-file reads and
 *  writes, running a command through /bin/sh, feeding standard input from a pipe, and error
 *  figures computed independently of lib/metrics.
 */
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dctchop/error.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/formats/npy.hpp"
#include "dctchop/metrics.hpp"
#include "dctchop/formats/pipeline.hpp"

// Whether the tests run under AddressSanitizer or ThreadSanitizer: GCC says so with
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang (the TSan build's compiler where it is
// installed) only through __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define DCTCHOP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DCTCHOP_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DCTCHOP_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DCTCHOP_TEST_TSAN 1
#endif
#endif

#ifndef DCTCHOP_SAMPLE_DIR
#error "DCTCHOP_SAMPLE_DIR must name the sample_data folder"
#endif

namespace dctchop::test {

namespace fs = std::filesystem;

/** Every figure of two quality reports equal (as doubles: +0 equals -0, and a NaN equals
 *  nothing): the same data measured two ways (in batches or whole, on the host or on a
 *  device). */
inline void expect_same_figures(const quality& a, const quality& b) {
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.mse, b.mse);
  EXPECT_EQ(a.max_abs_error, b.max_abs_error);
  EXPECT_EQ(a.range, b.range);
  EXPECT_EQ(a.psnr_db, b.psnr_db);
  EXPECT_EQ(a.sample_psnr_min, b.sample_psnr_min);
  EXPECT_EQ(a.sample_psnr_mean, b.sample_psnr_mean);
  EXPECT_EQ(a.lossless_samples, b.lossless_samples);
  EXPECT_EQ(a.ssim, b.ssim);
  EXPECT_EQ(a.ssim_planes, b.ssim_planes);
}

inline std::string sample_npy(const std::string& name) {
  return std::string(DCTCHOP_SAMPLE_DIR) + "/npy/" + name;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("test: cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("test: cannot write " + path);
}

/** XOR one byte of a file in place with `mask`. */
inline void flip_byte(const std::string& path, std::uint64_t offset, unsigned char mask = 0x5a) {
  std::string b = read_bytes(path);
  if (offset >= b.size()) throw std::runtime_error("test: flip_byte past the end of " + path);
  b[offset] = static_cast<char>(static_cast<unsigned char>(b[offset]) ^ mask);
  write_bytes(path, b);
}

/** Base folder for scratch data: $DCTCHOP_TMP (created when missing), else a mkdtemp folder
 *  under /tmp made once per process and removed at exit (when the tests left it empty). */
inline fs::path scratch_base() {
  struct base_dir {
    fs::path path;
    bool owned = false;
    base_dir() {
      const char* env = std::getenv("DCTCHOP_TMP");
      if (env != nullptr && *env != '\0') {
        std::error_code ec;
        fs::create_directories(env, ec);
        if (fs::is_directory(env, ec)) {
          path = env;
          return;
        }
      }
      char templ[] = "/tmp/dctchop_tests_XXXXXX";
      if (::mkdtemp(templ) == nullptr) throw std::runtime_error("test: mkdtemp failed");
      path = templ;
      owned = true;
    }
    ~base_dir() {
      std::error_code ec;
      if (owned) fs::remove(path, ec);  // only removes an empty folder
    }
  };
  static const base_dir base;
  return base.path;
}

/** A fresh folder for the running test (named after it), removed with its contents. */
class temp_dir {
 public:
  temp_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name()
                                       : std::string("test");
    for (char& c : name)
      if (c == '/') c = '_';
    std::string templ = (scratch_base() / (name + ".XXXXXX")).string();
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("test: mkdtemp " + templ);
    path_ = buf.data();
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }
  /** Names of the entries in the folder, sorted. */
  std::vector<std::string> entries() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(path_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  fs::path path_;
};

/** Quote a word for /bin/sh. */
inline std::string sh_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

struct command_result {
  int status = -1;  ///< exit status, or 128 + signal number
  std::string out, err;
};

/** Run `command` with /bin/sh -c in folder `dir`, stdin from /dev/null, stdout and stderr
 *  captured through files in the scratch base folder (removed afterwards). */
inline command_result run_sh(const std::string& command, const fs::path& dir) {
  std::string out_s = (scratch_base() / "cmd_out_XXXXXX").string();
  std::string err_s = (scratch_base() / "cmd_err_XXXXXX").string();
  char* out_t = out_s.data();
  char* err_t = err_s.data();
  const int out_fd = ::mkstemp(out_t);
  const int err_fd = ::mkstemp(err_t);
  if (out_fd < 0 || err_fd < 0) throw std::runtime_error("test: mkstemp failed");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("test: fork failed");
  if (pid == 0) {
    const int in_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  command_result r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_bytes(out_t);
  r.err = read_bytes(err_t);
  ::unlink(out_t);
  ::unlink(err_t);
  return r;
}

/** Shell code that waits (up to 5 s) until the background command $P holds its output `name`
 *  open in the current folder, or has ended. The output is an unnamed file there (O_TMPFILE,
 *  "/folder/#inode (deleted)" in /proc), or a hidden ".name.tmp..." file (HDF5 outputs, and
 *  file systems without O_TMPFILE). Once it holds it, the command is at work with its signal
 *  handlers installed. */
inline std::string wait_for_output(const std::string& name) {
  return "D=$(pwd -P); for i in $(seq 500); do ls -l /proc/$P/fd 2>/dev/null | grep -q -F -e "
         "\"$D/#\" -e \"$D/." + name + ".tmp\" && break; kill -0 $P 2>/dev/null || "
         "break; sleep 0.01; done; ";
}

/** Shell code: `command < f` reading from a FIFO that gets the first `bytes` bytes of `feed`
 *  and then silence, so that the command is mid-way, its `output` begun (wait_for_output),
 *  when `pause` (shell code, e.g. "sleep 0.3; ") has passed and SIGNAL comes, whatever the
 *  machine's speed. Prints "rc=CODE". */
inline std::string signal_midway(const std::string& command, const std::string& feed,
                                 std::uint64_t bytes, const std::string& output,
                                 const std::string& signal, const std::string& pause = "") {
  return "mkfifo f; " + command + " < f & P=$!; exec 3>f; head -c " + std::to_string(bytes) +
         " " + feed + " >&3; " + wait_for_output(output) + pause + "kill -" + signal +
         " $P; wait $P; echo \"rc=$?\"; exec 3>&-; rm f";
}

/** Standard input replaced by the read end of a pipe that a thread fills with `bytes` in small
 *  pieces, for the object's life. The previous standard input comes back at destruction. */
class stdin_pipe {
 public:
  explicit stdin_pipe(std::string bytes, std::size_t piece = 1000) : bytes_(std::move(bytes)) {
    int p[2];
    if (::pipe(p) != 0) throw std::runtime_error("test: pipe failed");
    old_sigpipe_ = std::signal(SIGPIPE, SIG_IGN);  // a reader that stops early must not kill us
    saved_ = ::dup(STDIN_FILENO);
    ::dup2(p[0], STDIN_FILENO);
    ::close(p[0]);
    const int wfd = p[1];
    feeder_ = std::thread([this, wfd, piece] {
      std::size_t done = 0;
      while (done < bytes_.size()) {
        const std::size_t n = std::min(piece, bytes_.size() - done);
        const ssize_t w = ::write(wfd, bytes_.data() + done, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;  // the reader closed its end
        done += static_cast<std::size_t>(w);
      }
      ::close(wfd);
    });
  }
  ~stdin_pipe() {
    // Put the old stdin back first: that closes the pipe's read end, so a feeder still
    // writing gets EPIPE and stops.
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
    feeder_.join();
    std::signal(SIGPIPE, old_sigpipe_);
  }
  stdin_pipe(const stdin_pipe&) = delete;
  stdin_pipe& operator=(const stdin_pipe&) = delete;

 private:
  std::string bytes_;
  int saved_ = -1;
  std::thread feeder_;
  void (*old_sigpipe_)(int) = SIG_DFL;
};

/** Expect `fn` to throw dctchop::error with `code` and a one-line message containing each of
 *  `texts`. */
template <typename Fn>
void expect_error(Fn&& fn, errc code, const std::vector<std::string>& texts = {}) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected " << to_string(code);
  } catch (const error& e) {
    EXPECT_EQ(e.code(), code) << "got " << to_string(e.code()) << ": " << e.what();
    for (const auto& text : texts) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
          << "message lacks \"" << text << "\": " << e.what();
    }
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

/** A whole .npy file read with the library's reader, as doubles plus its header. */
struct npy_data {
  formats::npy_header header;
  std::vector<double> values;
  std::vector<std::byte> raw;  ///< native-endian C-order data bytes
};

inline npy_data load_npy(const std::string& path) {
  auto r = formats::npy_reader::open(path);
  npy_data d;
  d.header = r.header();
  d.raw.resize(d.header.count() * d.header.type.itemsize);
  if (!d.raw.empty()) r.read_rows(0, r.rows(), d.raw.data());
  const auto& t = d.header.type;
  d.values.resize(d.header.count());
  for (std::size_t i = 0; i < d.values.size(); ++i) {
    const std::byte* p = d.raw.data() + i * t.itemsize;
    auto get = [&](auto v) {
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(v);
    };
    if (t.kind == 'u' && t.itemsize == 1) d.values[i] = get(std::uint8_t{});
    else if (t.kind == 'u' && t.itemsize == 2) d.values[i] = get(std::uint16_t{});
    else if (t.kind == 'u' && t.itemsize == 4) d.values[i] = get(std::uint32_t{});
    else if (t.kind == 'u' && t.itemsize == 8) d.values[i] = get(std::uint64_t{});
    else if (t.kind == 'i' && t.itemsize == 1) d.values[i] = get(std::int8_t{});
    else if (t.kind == 'i' && t.itemsize == 2) d.values[i] = get(std::int16_t{});
    else if (t.kind == 'i' && t.itemsize == 4) d.values[i] = get(std::int32_t{});
    else if (t.kind == 'i' && t.itemsize == 8) d.values[i] = get(std::int64_t{});
    else if (t.kind == 'f' && t.itemsize == 2) d.values[i] = detail::half_to_float(get(std::uint16_t{}));
    else if (t.kind == 'f' && t.itemsize == 4) d.values[i] = get(float{});
    else if (t.kind == 'f' && t.itemsize == 8) d.values[i] = get(double{});
    else throw std::runtime_error("test: load_npy: unhandled dtype " + t.native_descr());
  }
  return d;
}

/** float values as f16 (round to nearest even), for save_npy(..., dtype::f16, ...). */
inline std::vector<detail::half_value> to_half(const std::vector<float>& v) {
  std::vector<detail::half_value> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = detail::half_value(v[i]);
  return h;
}

/** Write a .npy file of `type` and `shape` from native-endian C-order bytes. */
template <typename T>
void save_npy(const std::string& path, dtype type, const std::vector<std::uint64_t>& shape,
              const std::vector<T>& values) {
  auto w = formats::npy_writer::create(path, formats::npy_dtype_of(type), shape, false);
  w.write_rows(values.data(), shape.empty() ? 1 : shape[0]);
  w.finish();
}

/** A geometry of n samples of c planes of h x w, laid out per `lay`. */
inline geometry shape_of(layout lay, std::uint64_t n, std::uint64_t h, std::uint64_t w,
                         std::uint64_t c = 1) {
  return {lay, n, c, h, w};
}

/** Coefficients that no encode makes but a caller's memory may hold (a network's output, a
 *  damaged buffer read without its checksums): every 16-bit pattern for f16, bf16 and i16 (NaN,
 *  infinities, bf16 values near 3e38 whose sums overflow to inf and then give inf - inf), and
 *  for f32 finite values mixed with NaN, infinities and values past every integer type's
 *  range. For tests that the GPU and CPU decodes agree where nothing is finite too. */
inline std::vector<std::byte> extreme_coefficients(std::size_t bytes, coeff_type ct,
                                                   unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> c(bytes);
  if (ct != coeff_type::f32) {
    for (auto& x : c) x = static_cast<std::byte>(rng() & 0xff);
    return c;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float special[] = {nan, -nan, inf, -inf, 3e9f, -3e9f, 1e10f, -1e10f, 1e30f, -1e30f,
                           0.0f, -0.0f};
  std::uniform_real_distribution<float> finite(-3000.0f, 3000.0f);
  for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
    const float f = rng() % 5 == 0 ? special[rng() % std::size(special)] : finite(rng);
    std::memcpy(c.data() + i, &f, 4);
  }
  return c;
}

/** The first index where a and b differ bit for bit, except that any NaN equals any NaN (the
 *  GPU's arithmetic makes the canonical NaN where the CPU's keeps an operand's payload); the
 *  size where none does. */
template <typename T>
std::uint64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (std::uint64_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) == 0) continue;
    if constexpr (!std::numeric_limits<T>::is_integer) {
      if (std::isnan(static_cast<double>(a[i])) && std::isnan(static_cast<double>(b[i]))) continue;
    }
    return i;
  }
  return a.size();
}

/** An archive (dir/a.dcz) of `n` u8 samples of 16x16 whose every value is the sample's index
 *  mod 256 (exact after the codec, so a decoded sample says which one it is), with
 *  `samples_per_chunk` samples per chunk (16x16 at chop 4 in f16 is 128 bytes a sample) and,
 *  when `labels`, an int32 labels side array of index * 3. For the loader tests. */
inline std::string make_index_archive(const temp_dir& dir, std::uint64_t n,
                                      std::uint64_t samples_per_chunk, bool labels) {
  std::vector<std::uint8_t> v(n * 256);
  for (std::uint64_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i / 256) % 256);
  save_npy(dir.file("x.npy"), dtype::u8, {n, 16, 16}, v);
  formats::compress_options o;
  o.chunk_mb = static_cast<double>(samples_per_chunk) * 128 / 1048576.0;
  o.measure_quality = false;
  if (labels) {
    std::vector<std::int32_t> y(n);
    for (std::uint64_t i = 0; i < n; ++i) y[i] = static_cast<std::int32_t>(i * 3);
    formats::npy_dtype i32;
    i32.kind = 'i';
    i32.itemsize = 4;
    auto w = formats::npy_writer::create(dir.file("y.npy"), i32, {n}, false);
    w.write_rows(y.data(), n);
    w.finish();
    o.labels_path = dir.file("y.npy");
  }
  auto be = make_backend(backend_kind::cpu, {1});
  formats::compress_npy(dir.file("x.npy"), dir.file("a.dcz"), *be, o);
  return dir.file("a.dcz");
}

/** Memory whose allocations wait until open() (or until `limit` has passed, so that a test
 *  of code that should not wait fails rather than hangs): as a loader's batch_memory, it
 *  holds the prefetch thread back while a batch is being made. */
class gated_memory final : public std::pmr::memory_resource {
 public:
  explicit gated_memory(std::chrono::seconds limit = std::chrono::seconds(5)) : limit_(limit) {}
  void open() {
    {
      std::lock_guard lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    {
      std::unique_lock lock(m_);
      cv_.wait_for(lock, limit_, [&] { return open_; });
    }
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
  std::chrono::seconds limit_;
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

/** Mean squared error between two equally long value lists. */
inline double mse_of(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return a.empty() ? 0.0 : s / static_cast<double>(a.size());
}

/** PSNR in dB as DESIGN.md defines it; +inf when the MSE is 0. */
inline double psnr_of(const std::vector<double>& original, const std::vector<double>& decoded,
                      double range) {
  const double m = mse_of(original, decoded);
  if (m == 0) return INFINITY;
  return 20.0 * std::log10(range) - 10.0 * std::log10(m);
}

inline double value_range(const std::vector<double>& v) {
  if (v.empty()) return 0;
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

/** Smooth test images: N samples of H x W x C u8 values (NHWC), gentle gradients and waves. */
inline std::vector<std::uint8_t> smooth_u8_nhwc(int n, int h, int w, int c) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n) * h * w * c);
  std::size_t i = 0;
  for (int s = 0; s < n; ++s)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int k = 0; k < c; ++k) {
          const double f = 128 + 60 * std::sin(0.11 * x + 0.3 * s + k) +
                           40 * std::cos(0.07 * y - 0.2 * k) + 0.5 * s;
          v[i++] = static_cast<std::uint8_t>(std::lround(std::clamp(f, 0.0, 255.0)));
        }
  return v;
}

/** Smooth f32 fields: N samples of H x W values (NHW). */
inline std::vector<float> smooth_f32_nhw(int n, int h, int w) {
  std::vector<float> v(static_cast<std::size_t>(n) * h * w);
  std::size_t i = 0;
  for (int s = 0; s < n; ++s)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        v[i++] = static_cast<float>(3.0 * std::sin(0.15 * x + 0.4 * s) * std::cos(0.1 * y) +
                                    0.01 * x * y - 1.5);
  return v;
}


#ifdef DCTCHOP_BINARY
/** The built dctchop command, quoted for the shell; where DCTCHOP_TEST_COMMAND_ASAN_OPTIONS
 *  is set, run with those ASAN_OPTIONS (scripts/test.sh: the ASan stage's commands without
 *  their leak check at exit, 45 ms of each of some 1,500 starts; its own pass checks the
 *  command for leaks). */
inline const std::string& dctchop_bin() {
  static const std::string bin = [] {
    const char* asan = std::getenv("DCTCHOP_TEST_COMMAND_ASAN_OPTIONS");
    const std::string quoted = sh_quote(DCTCHOP_BINARY);
    // (Unquoted: tests nest the command in quotes of their own, `bash -c 'DCTCHOP ...'`.)
    const std::string_view plain = "abcdefghijklmnopqrstuvwxyz_0123456789=:,.";
    if (asan == nullptr || std::string_view(asan).find_first_not_of(plain) != std::string::npos) {
      return quoted;
    }
    return "env ASAN_OPTIONS=" + std::string(asan) + " " + quoted;
  }();
  return bin;
}

/** Run `dctchop ARGS` (ARGS is shell text) in `dir`. */
inline command_result cli(const temp_dir& dir, const std::string& args) {
  return run_sh(dctchop_bin() + " " + args, dir.path());
}

/** Run a shell pipeline in `dir`; "DCTCHOP" in it is replaced by the binary. */
inline command_result sh(const temp_dir& dir, std::string cmd) {
  for (std::size_t p; (p = cmd.find("DCTCHOP")) != std::string::npos;) {
    cmd.replace(p, 7, dctchop_bin());
  }
  return run_sh(cmd, dir.path());
}
#endif

/** One system call in a trace of `strace -f -o FILE`: its name ("openat"), the rest of its line
 *  (arguments and result), and whether the line is the "<... NAME resumed>" end of a call
 *  whose arguments were on an earlier "<unfinished ...>" line (another thread's call came
 *  between). Lines that are no call ("+++ exited", "--- SIGCHLD") are left out. */
struct traced_call {
  std::string tid;  ///< the thread that made it (strace -f's first column)
  std::string name, rest;
  bool resumed = false;
  /** The call's result (the number after the last " = "); std::nullopt for an unfinished
   *  call's first line, or a result that is no number ("?"). */
  std::optional<long long> result() const {
    const auto eq = rest.rfind(" = ");
    if (eq == std::string::npos) return std::nullopt;
    const char* p = rest.c_str() + eq + 3;
    char* end = nullptr;
    const long long v = std::strtoll(p, &end, 10);
    if (end == p) return std::nullopt;
    return v;
  }
  /** The first quoted argument (a path), unescaped only as far as strace leaves it. */
  std::string path() const {
    const auto a = rest.find('"');
    if (a == std::string::npos) return {};
    auto b = a + 1;
    while (b < rest.size() && rest[b] != '"') b += rest[b] == '\\' ? 2 : 1;
    return rest.substr(a + 1, b - a - 1);
  }
  /** The arguments after the first quoted one (an open's flags). */
  std::string after_path() const {
    const auto a = rest.find('"');
    if (a == std::string::npos) return rest;
    auto b = a + 1;
    while (b < rest.size() && rest[b] != '"') b += rest[b] == '\\' ? 2 : 1;
    return b < rest.size() ? rest.substr(b + 1) : std::string();
  }
};

/** The calls of an strace -f trace file, in order. */
inline std::vector<traced_call> read_strace(const std::string& path) {
  std::vector<traced_call> calls;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto sp = line.find(' ');  // after the thread's id
    if (sp == std::string::npos) continue;
    std::string body = line.substr(sp + 1);
    while (!body.empty() && body[0] == ' ') body.erase(0, 1);
    traced_call c;
    c.tid = line.substr(0, sp);
    if (body.rfind("<... ", 0) == 0) {
      const auto name_end = body.find(' ', 5);
      if (name_end == std::string::npos) continue;
      c.name = body.substr(5, name_end - 5);
      c.rest = body.substr(name_end + 1);
      c.resumed = true;
    } else {
      const auto paren = body.find('(');
      if (paren == std::string::npos || paren == 0) continue;
      c.name = body.substr(0, paren);
      if (c.name.find_first_of(" +-") != std::string::npos) continue;
      c.rest = body.substr(paren);
    }
    calls.push_back(std::move(c));
  }
  return calls;
}

/** A command's exit status and output, for failure messages. */
inline std::string describe(const command_result& r) {
  return "exit " + std::to_string(r.status) + "\nstdout: " + r.out.substr(0, 3000) +
         "\nstderr: " + r.err.substr(0, 3000);
}

/** Parse JSON, failing the test (not crashing) on bad text. */
inline nlohmann::json parse_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << text;
  return j;
}

}  // namespace dctchop::test
