// dctchop: compress image and tensor datasets with blockwise DCT+Chop.
// This file parses arguments, prints reports and chooses exit codes; the codec and the formats
// live in lib/ and formats/.
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "dctchop/codec.hpp"
#include "dctchop/cores.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/file_io.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop_version.hpp"
#include "progress.hpp"
#include "terminal_text.hpp"

namespace {

using namespace dctchop;

// Exit codes, documented in README.md ("Exit codes").
enum exit_code : int {
  exit_ok = 0,
  exit_internal = 1,
  exit_usage = 2,
  exit_bad_input = 3,
  exit_corrupt = 4,
  exit_io = 5,
  exit_exists = 6,
  exit_backend = 7,
  exit_quality = 8,   // verify: a gate failed; compress --psnr/--ssim: target unreachable
  exit_mismatch = 9,  // verify: archive and input differ in shape or dtype, or labels differ
  exit_interrupted = 130,
};

int exit_for(errc c) {
  switch (c) {
    case errc::invalid_argument: return exit_usage;
    case errc::bad_input: case errc::out_of_range: case errc::unsupported_version:
      return exit_bad_input;
    case errc::corrupt: return exit_corrupt;
    case errc::io: return exit_io;
    case errc::output_exists: return exit_exists;
    case errc::backend_unavailable: return exit_backend;
    case errc::quality_not_met: return exit_quality;
    case errc::interrupted: return exit_interrupted;
    case errc::internal: return exit_internal;
  }
  return exit_internal;
}

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

struct interrupted {};

const char* k_examples = R"(
Examples:
  dctchop compress train.npy -o train.dcz --labels labels.npy   # u8: block 8, chop 4, f16
  dctchop compress train.npy -o t35.dcz --psnr 35      # the largest ratio with PSNR >= 35 dB
  dctchop compress fields.npy -o f.dcz --chop 2 --coeff bf16
  dctchop compress train.h5:/images --labels train.h5:/labels -o train_h5.dcz
  dctchop compress mnist.npz:x_train --labels mnist.npz:y_train -o mnist.dcz
  dctchop compress field.bin --raw --dtype f32 --shape 64,512,512 -o field.dcz
  dctchop compress sst.npy -o sst.dcz --nonfinite replace=0   # NaN/Inf (land) stored as 0
  dctchop compress xray.npy -o xray.dcz --coeff bf16 --offset mean  # 12-bit data in u16
  dctchop decompress train.dcz -o check.h5:/images
  dctchop decompress train.dcz -o check.npz            # np.load: check["data"] (and ["labels"])
  dctchop compress images.npy -o - --json | ssh host 'cat > images.dcz'
  dctchop eval train.npy --chop 1,2,4,6 --coeff f16,bf16 --csv > rd.csv
  dctchop info train.dcz --json
  dctchop info shards/*.dcz                            # one report each; verify takes several too
  dctchop eval train.npy --block 4,8,16 --chop 2,4     # block sizes compared
  dctchop eval train.npy --chop 4 --no-ssim --min-time 1   # speed: 1 s or 100 passes
  dctchop verify train.dcz --against train.npy --min-psnr 30 || echo "quality gate failed"
  dctchop verify train.dcz --against train.npy --labels labels.npy   # stored labels equal?
  dctchop decompress train.dcz -o check.npy --samples 0:100
  dctchop compress train.npy -o train.dcz --backend cuda --device 1   # the second GPU
  cat train.dcz | dctchop decompress - -o - > all.npy

Exit codes: 0 ok, 1 internal error, 2 usage, 3 bad input or format, 4 corrupt archive, 5 I/O error,
            6 output exists (use -f), 7 backend unavailable, 8 quality gate or target not met,
            9 archive and input (or their labels) differ, 130 interrupted.
)";

/** The help's footer for command `cmd`: the examples of k_examples that run it (a pipeline
 *  too), and the exit codes. */
std::string examples_for(std::string_view cmd) {
  const std::string runs = "dctchop " + std::string(cmd) + " ";
  std::istringstream in(k_examples);
  std::string out, line;
  while (std::getline(in, line)) {
    const bool example = line.find("dctchop ") != std::string::npos;
    if (!example || line.find(runs) != std::string::npos) out += line + "\n";
  }
  return out;
}

const char* k_offset_help =
    "subtracted from every value before the transform: auto (128 for u8, 32768 for u16, 0 for "
    "i8 and i16, the first sample's mean for float, i32 and u32 data), mean (the first "
    "sample's mean, any dtype: for integer data that fills little of its range, e.g. 12-bit "
    "values in u16), or a number";

/** Where a report says an output went: "<stdout>" for "-", else FILE or FILE:DATASET. */
std::string output_place(const std::string& path, const std::string& dataset) {
  if (path == "-") return "<stdout>";
  return dataset.empty() ? path : path + ":" + dataset;
}

/** An input as reports and messages name it: "<stdin>" for "-". */
std::string input_place(const std::string& path) { return path == "-" ? "<stdin>" : path; }

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string db_text(const std::optional<double>& p) {
  return p ? fmt::format("{:.2f} dB", *p) : std::string("inf (lossless)");
}

std::string ssim_text(const std::optional<double>& s) {
  return s ? fmt::format("{:.4f}", *s) : std::string("n/a");
}

/** SSIM, or n/a and why there is none. */
std::string ssim_text(const std::optional<double>& s, ssim_status why) {
  return s ? ssim_text(s) : fmt::format("n/a ({})", ssim_missing_note(why));
}

std::string ssim_text(const quality& q) { return ssim_text(q.ssim, q.ssim_state); }

/** NRMSE, or n/a where R is 0. */
std::string nrmse_text(const std::optional<double>& v) {
  return v ? fmt::format("{:.3g}", *v) : std::string("n/a");
}

/** The whole of `s` as a finite number, or nullopt. */
std::optional<double> finite_double(const std::string& s) {
  // Decimal only: strtod also reads hexadecimal ("0x10" is 16) and skips leading blanks.
  if (s.find_first_of("xXpP \t\n\v\f\r") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  // Overflow gives infinity; underflow (1e-320) the nearest value, a subnormal or 0: a
  // number all the same (std::stod refused it as out of range).
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x)) return std::nullopt;
  return x;
}

/** The whole of `s` as a count (decimal digits only), or nullopt. */
std::optional<std::uint64_t> parse_count(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return std::nullopt;  // out of range
  }
}

/** A whole number in decimal, rewritten as CLI11 reads it: CLI11 takes 0x10 as 16 and 010 as
 *  octal 8. */
const CLI::Validator decimal_count(
    [](std::string& s) -> std::string {
      if (s.empty()) return std::string("an empty value");
      const auto n = parse_count(s);
      // (Every option it reads is an int: CLI11 said "Could not convert" of a larger one.)
      const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
      if (!n && s.size() > 1 && s[0] == '-' && s.find_first_not_of("0123456789", 1) == s.npos) {
        return s + " is negative: expected a whole number";
      }
      if (!n && !digits) return "expected a whole number, got " + s;
      if (!n || *n > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
        return s + " is too large";
      }
      s = std::to_string(*n);
      return {};
    },
    "");

/** `s` as a block size B (decimal), or nullopt. */
std::optional<int> parse_block_size(const std::string& s) {
  const auto b = parse_count(s);
  if (!b || !is_block_size(static_cast<long long>(*b))) return std::nullopt;
  return static_cast<int>(*b);
}

/** compress's --block: one of the four sizes; a list is eval's. */
const CLI::Validator block_size(
    [](std::string& s) -> std::string {
      if (s.empty()) return "an empty value";
      if (const auto b = parse_block_size(s)) {
        s = std::to_string(*b);  // (016 would be read as octal)
        return {};
      }
      if (s.find(',') != std::string::npos) {
        return s + ": compress uses one block size (eval --block " + s + " compares them)";
      }
      return s + ": block sizes are 4, 8, 16 and 32";
    },
    "4|8|16|32");

/** numpy's type code (`a.dtype.str`: <f4, |u1, =i2, or f4 without the byte order). */
struct numpy_code {
  std::string name;    ///< dctchop's name for it; "" for no code dctchop takes
  bool big = false;    ///< big-endian, of a type wider than a byte
  bool wide = false;   ///< <i8, |u8...: numpy's 8-byte integers (bare, i8 and u8 are dctchop's)
};
numpy_code numpy_type_code(std::string_view s) {
  numpy_code c;
  const bool ordered =
      !s.empty() && std::string_view("<>=|").find(s.front()) != std::string_view::npos;
  const char order = ordered ? s.front() : '=';
  if (ordered) s.remove_prefix(1);
  c.wide = ordered && (s == "i8" || s == "u8");
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 9> codes{{
      {"i1", "i8"}, {"u1", "u8"}, {"i2", "i16"}, {"u2", "u16"}, {"i4", "i32"}, {"u4", "u32"},
      {"f2", "f16"}, {"f4", "f32"}, {"f8", "f64"}}};
  for (const auto& [code, name] : codes) {
    if (s != code) continue;
    c.big = order == '>' && code.back() != '1';
    c.name = name;
  }
  return c;
}

/** --dtype: dctchop's names, numpy's (uint8 ... float64) in any case, as parse_dtype reads them,
 *  or numpy's type codes (<f4, u1), which become dctchop's names. */
const CLI::Validator dtype_name(
    [](std::string& s) {
      if (s.empty()) return std::string("an empty value");
      if (parse_dtype(s)) return std::string();
      const numpy_code code = numpy_type_code(s);
      // numpy's i8 and u8 are 8-byte integers; dctchop's (taken above, bare) are 1-byte.
      if (code.wide) {
        return s + ": numpy's " + (s[1] == 'i' ? "int64" : "uint64") +
               ", which dctchop does not compress (dctchop's " + s.substr(1) + " is numpy's " +
               (s[1] == 'i' ? "int8, |i1)" : "uint8, |u1)");
      }
      std::string lower = s;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (lower == "int64" || lower == "uint64") {
        return s + ": dctchop does not compress 8-byte integers (labels may be int64): "
                   "convert them, to int32 or float64 say";
      }
      if (!code.name.empty()) {
        if (code.big) {
          return s + ": big-endian; --raw reads little-endian values (numpy writes them with "
                     "a.astype('<" + s.substr(1) + "').tofile(...))";
        }
        s = code.name;
        return std::string();
      }
      return fmt::format("{}: expected one of {} (numpy's {} too, or its codes: <f4, u1, ...)", s,
                         k_dtype_names, k_dtype_numpy_names);
    },
    "i8|u8|i16|u16|i32|u32|f16|f32|f64");

/** compress's --coeff: one coefficient type, dctchop's name or numpy's, as parse_coeff_type
 *  reads them; a list is eval's. */
/** Why `s` names no coefficient type ("" when it names one), as --coeff's message says it. */
std::string coeff_name_problem(const std::string& s) {
  if (parse_coeff_type(s)) return {};
  return s + ": expected f16, bf16, f32 or i16 (float16, bfloat16, float32, int16 too)";
}

const CLI::Validator coeff_name(
    [](std::string& s) {
      if (s.empty()) return std::string("an empty value");
      if (s.find(',') != std::string::npos) {
        return s + ": compress uses one coefficient type (eval --coeff " + s + " compares them)";
      }
      return coeff_name_problem(s);
    },
    "f16|bf16|f32|i16");

/** A CLI11 check that a file name is not empty ("" would read as ": cannot open"). */
const CLI::Validator non_empty_path(
    [](std::string& s) { return s.empty() ? std::string("an empty file name") : std::string(); },
    "");

/** A CLI11 check that a value is not empty ("" read as the option left out). */
const CLI::Validator non_empty_value(
    [](std::string& s) { return s.empty() ? std::string("an empty value") : std::string(); }, "");

/** A CLI11 check that a number is finite: a NaN passes every range check. */
const CLI::Validator finite_number(
    [](std::string& s) {
      if (s.empty()) return std::string("an empty value");
      return finite_double(s) ? std::string() : "expected a finite number, got " + s;
    },
    "FINITE");

/** A CLI11 check that a number lies in [lo, hi], worded as the others (CLI::Range says
 *  "Value 1.5 not in range -1.000000 to 1.000000"). */
CLI::Validator between(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) {
        return finite_double(s) && std::stod(s) >= lo && std::stod(s) <= hi
                   ? std::string()
                   : fmt::format("expected {:g} to {:g}, got {}", lo, hi, s);
      },
      fmt::format("{:g}..{:g}", lo, hi));
}

/** A CLI11 check that a number is 0 or more (CLI::NonNegativeNumber prints DBL_MAX in full). */
const CLI::Validator non_negative(
    [](std::string& s) {
      return finite_double(s) && std::stod(s) >= 0 ? std::string() : "expected 0 or more, got " + s;
    },
    "NUMBER >= 0");

/** --version's line on the threads that "--threads 0" takes, and what limits them. */
std::string cores_text(const core_limits& c) {
  std::string s = fmt::format("{} usable ({} online, {} in the affinity mask", c.usable, c.online,
                              c.affinity);
  if (c.quota) {
    s += fmt::format(", a cgroup CPU quota of {:.6g} in {}", *c.quota,
                     app::printable(c.quota_from));
  }
  if (c.omp_num_threads) s += fmt::format(", OMP_NUM_THREADS {}", *c.omp_num_threads);
  return s + ")";
}

/** Global PSNR: a number, infinite (lossless), or undefined (an error on constant data). */
std::string psnr_text(const quality& q) {
  if (q.psnr_undefined) return "n/a (constant data)";
  return db_text(q.psnr_db);
}

/** One line of quality figures. */
std::string quality_line(const quality& q) {
  return fmt::format("PSNR {} (worst sample {}), SSIM {}, max error {:g}, NRMSE {}",
                     psnr_text(q),
                     q.sample_psnr_min  ? db_text(q.sample_psnr_min)
                     : q.psnr_undefined ? std::string("n/a")
                                        : std::string("lossless"),
                     ssim_text(q), q.max_abs_error, nrmse_text(q.nrmse_defined()));
}

/** j[key] when it is a number (an archive's figures may be absent, or null for infinity). */
std::optional<double> opt_number(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

/** j[key] when it is a boolean, else false. */
bool opt_flag(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

/** Whether `s` is `word` (lower case) in any case. */
bool same_word(const std::string& s, std::string_view word) {
  return s.size() == word.size() &&
         std::equal(s.begin(), s.end(), word.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

/** Parse --nonfinite: "error" (nullopt) or "replace=V" with a finite number V. */
std::optional<double> parse_nonfinite(const std::string& s) {
  // Its words in any case, as --coeff, --dtype, --layout and --backend take theirs.
  if (same_word(s, "error")) return std::nullopt;
  const std::string prefix = "replace=";
  if (s.size() > prefix.size() && same_word(s.substr(0, prefix.size()), prefix)) {
    if (const auto x = finite_double(s.substr(prefix.size()))) return x;
  }
  throw error(errc::invalid_argument,
              "--nonfinite " + s + ": expected error or replace=V with a finite number V");
}

/** Parse --offset: "auto", "mean" (the first sample's mean), in any case, or a finite number. */
formats::offset_choice parse_offset(const std::string& s) {
  using rule = formats::offset_choice::rule;
  if (same_word(s, "auto")) return {};
  if (same_word(s, "mean")) return {rule::first_mean, 0.0};
  if (const auto x = finite_double(s)) return {rule::value, *x};
  throw error(errc::invalid_argument,
              "--offset " + s + ": expected auto, mean or a finite number");
}

/** "3 NaN/Inf values replaced by 0", for the reports of compress and eval. */
std::string replaced_text(std::uint64_t count, double value) {
  return fmt::format("{} NaN/Inf value{} replaced by {:g}", count, count == 1 ? "" : "s", value);
}

/** Parse "A:B", "A:", ":B" or "A" (one sample) into [first, end). */
void parse_range(const std::string& s, std::uint64_t& first, std::optional<std::uint64_t>& end) {
  auto num = [&](const std::string& t) -> std::uint64_t {
    if (const auto v = parse_count(t)) return *v;
    const bool digits = !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
    const bool negative = t.size() > 1 && t[0] == '-' &&
                          t.find_first_not_of("0123456789", 1) == std::string::npos;
    throw error(errc::invalid_argument,
                "--samples " + s +
                    (digits     ? ": number out of range"
                     : negative ? ": samples count from 0; a negative index (from the end) is "
                                  "not taken: name the sample by its number"
                                : ": expected A:B with A < B"));
  };
  auto colon = s.find(':');
  if (colon == std::string::npos) {
    first = num(s);
    if (first == std::numeric_limits<std::uint64_t>::max()) {  // no sample has it
      throw error(errc::invalid_argument, "--samples " + s + ": number out of range");
    }
    end = first + 1;
    return;
  }
  std::string a = s.substr(0, colon), b = s.substr(colon + 1);
  first = a.empty() ? 0 : num(a);
  if (!b.empty()) end = num(b);
}

/** Split "1,2,4" into items; an empty item ("1,,2", "1,") is a usage error of `option`. */
std::vector<std::string> split_list(const std::string& s, const std::string& option) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    out.push_back(first == std::string::npos ? std::string() : item.substr(first, last - first + 1));
  }
  if (!s.empty() && s.back() == ',') out.emplace_back();
  for (const auto& i : out) {
    if (i.empty()) throw error(errc::invalid_argument, option + " " + s + ": an empty item");
  }
  return out;
}

/** Keeps standard output for dctchop's own output (data with -o -, reports, --json): what a
 *  library or an HDF5 filter plugin prints with printf or puts (the lz4 plugin prints its
 *  failures so) goes to standard error instead. glibc documents `stdout` as an ordinary
 *  variable that a program may set; std::cout stays on the original stream, to which
 *  libstdc++ bound it at startup, and the formats library writes "-" to descriptor 1. */
void keep_stdout_for_dctchop() {
#ifdef __GLIBC__
  stdout = stderr;
#endif
}

/** Standard input was closed when dctchop started (`<&-`: it reads /dev/null instead). */
bool g_stdin_closed = false;
/** The descriptors below 64 open when dctchop started: an output named /dev/fd/N of one
 *  that was not took a descriptor dctchop opened itself (its temporary file), and wrote the
 *  labels into the data's file, exit 0. */
std::bitset<64> g_inherited;
void note_inherited_descriptors() {
  for (int fd = 0; fd < 64; ++fd) {
    g_inherited[static_cast<std::size_t>(fd)] = ::fcntl(fd, F_GETFD) != -1;
  }
}
/** Refuses a file named by a descriptor (/dev/fd/N, /proc/self/fd/N, any spelling or link
 *  that leads there) that was not open when dctchop started: an output there replaced the
 *  input (-o /dev/./fd/3 -f), an input read dctchop's own file. */
void refuse_descriptor_not_inherited(const std::string& out) {
  const int fd = formats::descriptor_named(out);
  if (fd < 0 || (fd < 64 && g_inherited[static_cast<std::size_t>(fd)])) return;
  throw error::from_os(errc::io, out + ": descriptor " + std::to_string(fd) +
                                     " is not open (open it: " + std::to_string(fd) + "> FILE)",
                       EBADF);
}
/** Opens descriptors 0, 1 and 2 where they are closed (`dctchop info x.dcz >&-`): the next
 *  file opened would take a closed one, and a report meant for stdout would be written into
 *  it. A closed stdout or stderr gets /dev/full, so that a report written there fails and is
 *  reported (in the exit code: messages on a closed stderr are dropped); stdin gets
 *  /dev/null (and g_stdin_closed). Returns whether stdout was closed. */
bool open_standard_descriptors() {
  bool stdout_closed = false;
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int got = ::open(fd == STDIN_FILENO ? "/dev/null" : "/dev/full",
                     fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (got < 0 && fd != STDIN_FILENO) got = ::open("/dev/null", O_WRONLY);  // (no /dev/full)
    if (got >= 0 && got != fd) {  // (open takes the lowest free descriptor: fd, normally)
      ::dup2(got, fd);
      ::close(got);
    }
    if (fd == STDOUT_FILENO) stdout_closed = true;
    if (fd == STDIN_FILENO) g_stdin_closed = true;
  }
  return stdout_closed;
}

/** Whether `path` is standard input's own pipe (or socket) by another name: a FIFO's name, or
 *  /dev/stdin read while stdin is that pipe. Reading both took each other's bytes; writing
 *  to it put an output into the input. */
bool is_stdins_pipe(const std::string& path) {
  struct stat in {};
  return ::fstat(STDIN_FILENO, &in) == 0 && (S_ISFIFO(in.st_mode) || S_ISSOCK(in.st_mode)) &&
         formats::names_descriptors_file(path, STDIN_FILENO);
}

/** "-", its other names (/dev/stdin, /dev/fd/0 and /proc/self/fd/0 share a pipe's bytes with
 *  -: the second reader found it drained), and standard input's pipe by its own name. */
bool names_stdin(const std::string& in) {
  return in == "-" || in == "/dev/stdin" || in == "/dev/fd/0" || in == "/proc/self/fd/0" ||
         is_stdins_pipe(in) || formats::descriptor_named(in) == STDIN_FILENO;  // (/dev/./stdin)
}

/** An output into the pipe that an input comes from (`decompress - --labels-out /dev/stdin`,
 *  `compress - -o /dev/stdin`): lost, or read back as the input; or into a closed stdin.
 *  (A file on stdin is an input that no output replaces: that check is the pipeline's.) */
void refuse_output_into_stdin(const std::vector<std::string>& ins,
                              const std::vector<std::string>& outs) {
  for (const auto& out : outs) {  // (/dev/null stands in for it: the data went nowhere, exit 0)
    if (g_stdin_closed && out != "-" && names_stdin(out)) {
      throw error(errc::io, "cannot write to " + out + ": standard input is closed (<&-)");
    }
    refuse_descriptor_not_inherited(out);
  }
  if (std::none_of(ins.begin(), ins.end(), names_stdin)) return;
  for (const auto& out : outs) {
    if (is_stdins_pipe(out)) {
      throw error(errc::invalid_argument,
                  out + " is standard input, which the input is read from: it cannot take an "
                        "output");
    }
  }
}

/** Refuse to read data typed at a terminal: "-" with stdin a TTY is almost always a mistake,
 *  and so is a terminal by its own name (/dev/tty, $(tty)), which waited for the keyboard. */
void refuse_tty_stdin(const std::string& path) {
  if (names_stdin(path) && g_stdin_closed) {  // (it read as an empty file)
    throw error(errc::io, "cannot read standard input: it is closed (<&-); pipe data in or "
                          "name a file instead of " + (path == "-" ? std::string("-") : path));
  }
  // (verify --against /dev/fd/3 read dctchop's own descriptor 3: the archive)
  refuse_descriptor_not_inherited(path);
  if (names_stdin(path) && ::isatty(STDIN_FILENO) == 1) {
    throw error(errc::invalid_argument,
                "standard input is a terminal; pipe data in or name a file instead of -");
  }
  struct stat st {};
  if (path.empty() || names_stdin(path) || ::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
    return;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  const bool terminal = fd >= 0 && ::isatty(fd) == 1;
  if (fd >= 0) ::close(fd);
  if (terminal) {
    throw error(errc::invalid_argument, path + " is a terminal; pipe data in or name a file");
  }
}

/** Standard output was closed when dctchop started (it writes to /dev/full instead). */
bool g_stdout_closed = false;
/** Why CLI11's own output (--help, --version, which it flushes) or a report failed to reach
 *  stdout, noted at the write that failed (stdout_fd_buf): once it has failed, later
 *  writes and the last flush do nothing, and errno by then says nothing. */
int g_stdout_errno = 0;
/** stdout carries help or version text (CLI11's, on a successful parse error): a reader that
 *  took what it wanted and closed the pipe (`dctchop --help | head`) is no failure. */
bool g_stdout_is_help = false;
/** std::cout's buffer, written to descriptor 1 itself (std::cout's stdio stream is left
 *  alone, which nothing else writes: plugins' printf goes to stderr), noting errno where a
 *  write fails: a report larger than the buffer is written while it is made, and where the
 *  pipe had closed by then, the failure was seen only at the end, errno gone ("write failed"
 *  for a large `eval --json | true`, "Broken pipe" for a small one). A stdout that its parent
 *  left non-blocking is waited on (stdio gave up at its first EAGAIN: a report into such a
 *  pipe stopped at 64 KiB, exit 5). After a signal, a stdout that takes nothing for a second
 *  (a stalled pipe: `info --json ... | stalled`) is given up, where it waited for its reader
 *  (or failed with EINTR, exit 5): main() makes the cut report the signal's (130). */
class stdout_fd_buf final : public std::streambuf {
 public:
  explicit stdout_fd_buf(std::streambuf* to) : to_(to) { setp(buf_, buf_ + sizeof buf_); }
  std::streambuf* target() const noexcept { return to_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  /** The buffer to descriptor 1, emptied whether or not it got there. */
  bool drain() {
    const bool ok = write_all(pbase(), static_cast<std::size_t>(pptr() - pbase()));
    setp(buf_, buf_ + sizeof buf_);
    return ok;
  }
  bool write_all(const char* p, std::size_t n) {
    while (n > 0) {
      if (failed_) return false;
      if (g_signal.load() != 0 && !room(1000)) return fail(EINTR);
      const ssize_t w = ::write(STDOUT_FILENO, p, std::min<std::size_t>(n, PIPE_BUF));
      if (w > 0) {
        p += w;
        n -= static_cast<std::size_t>(w);
      } else if (w < 0 && errno == EINTR) {
        continue;  // (the look for a signal above decides)
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        room(100);  // a non-blocking pipe, full: wait for room
      } else {
        return fail(w < 0 ? errno : EIO);
      }
    }
    return true;
  }
  /** Whether stdout takes a write within `ms` milliseconds. */
  static bool room(int ms) {
    pollfd p{STDOUT_FILENO, POLLOUT, 0};
    return ::poll(&p, 1, ms) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP)) != 0;
  }
  bool fail(int e) {
    if (g_stdout_errno == 0) g_stdout_errno = e;
    failed_ = true;
    return false;
  }
  std::streambuf* to_;  // (the stdio buffer it replaces, put back at the end)
  char buf_[PIPE_BUF];
  bool failed_ = false;
};

/** Where the command streams its data (standard output, a FIFO): an interruption cannot take
 *  back what went there. Empty for files, which are named only when complete. */
std::string g_stream_output;

/** Notes `path` as a stream output when it is one (a FIFO or device written in place). */
void note_stream_output(const std::string& path) {
  if (path.empty() || path == "-") return;  // ("-": refuse_tty_stdout)
  if (formats::reads_as_stream(path)) g_stream_output = path;
}

/** Refuse to write binary data to a terminal, or to a standard output that was closed. */
void refuse_tty_stdout(const std::string& path) {
  if (path != "-") return;
  if (::isatty(STDOUT_FILENO) == 1) {
    throw error(errc::invalid_argument, "refusing to write binary data to a terminal");
  }
  if (g_stdout_closed) {
    throw error::from_os(errc::io, "standard output is closed (>&-): name an output file instead",
                         EBADF);
  }
  g_stream_output = "standard output";
}

/** What an interruption leaves behind. */
std::string interrupted_text() {
  return g_stream_output.empty()
             ? "interrupted; no output was written"
             : "interrupted; data written to " + g_stream_output + ", if any, is incomplete";
}

/** /dev/fd/N, /proc/self/fd/N, /dev/stdin: a descriptor's name (`<(cmd)`), no file's. */
bool names_a_descriptor(const std::string& path) {
  return path.rfind("/dev/fd/", 0) == 0 || path.rfind("/proc/self/fd/", 0) == 0 ||
         path == "/dev/stdin";
}

void check_signal() {
  if (g_signal.load() != 0) throw interrupted{};
}

backend_kind parse_backend(const std::string& s) {
  if (s == "cpu") return backend_kind::cpu;
  if (s == "cuda") return backend_kind::cuda;
  return backend_kind::automatic;
}

/** What --backend, --threads and --device give (add_backend_options). */
struct backend_args {
  std::string name = "auto";
  int threads = 0;
  int device = -1;  ///< none given
};

/** The backend that `args` name. Where `auto` finds a GPU it cannot use (one that none of
 *  the kernels' architectures runs on), a note on stderr says so and why,
 *  unless `quiet` (-q, or a --json report that goes to stderr, which the note would break).
 *  CUDA starts in the background: the first chunks are read, and coded on the CPU (the same
 *  bytes), while the driver starts; the pipelines call wait_started() before they name an
 *  output, so that `--backend cuda` without a usable GPU is still exit 7. */
std::unique_ptr<backend> open_backend(const backend_args& args, bool quiet, spdlog::logger& log) {
  const backend_kind kind = parse_backend(args.name);
  // (The library refuses it too; this says it in the options' words.)
  if (kind == backend_kind::cpu && args.device >= 0) {
    throw error(errc::invalid_argument,
                fmt::format("--device {}: --backend cpu runs on no GPU (--device is for cuda "
                            "and auto)",
                            args.device));
  }
  backend_options o;
  o.threads = args.threads;
  o.device = args.device;
  // DCTCHOP_CUDA_BACKGROUND_START=0 waits for the start before the first chunk, as before:
  // for timing what starting beside it gains (scripts/gpu-check.sh runs both).
  const char* background = std::getenv("DCTCHOP_CUDA_BACKGROUND_START");
  o.start_in_background = background == nullptr || std::string_view(background) != "0";
  return make_backend(kind, o, [&log, quiet](const std::string& why) {
    if (!quiet) log.warn("note: --backend auto takes the CPU: {}", why);
  });
}

/** `work()` with `be`; where it throws, what kept a CUDA backend asked for by name from
 *  starting comes first (exit 7): the work ran on the CPU meanwhile, and its own error (a
 *  quality gate missed on a trial, say) may be a consequence. */
template <typename Work>
auto with_backend(backend& be, Work&& work) -> decltype(work()) {
  try {
    return work();
  } catch (...) {
    be.wait_started();  // throws the start's error, if any; else the work's goes on
    throw;
  }
}

formats::progress_fn progress_to(app::progress_bar& bar) {
  return [&bar](std::uint64_t d, std::uint64_t t) {
    check_signal();
    bar.update(d, t);
  };
}

/** How an input dataset is named: FILE.npy, -, FILE.h5[:/dset], FILE.npz[:array], or raw
 *  binary. */
struct input_options {
  std::string dataset;  ///< --dataset
  bool raw = false;     ///< --raw
  std::string dtype;    ///< --dtype (raw)
  std::string shape;    ///< --shape (raw), e.g. 64,512,512
  std::string samples;  ///< --samples A:B (compress, eval); empty: all
};

/** --samples of an input (compress, eval): rows A:B of axis 0, read as the whole dataset. */
void add_samples_option(CLI::App* cmd, input_options& in, bool labels) {
  cmd->add_option("--samples", in.samples,
                  std::string("take samples A:B of the input only (half-open; A:, :B, or A for "
                              "one), as if they were the whole dataset") +
                      (labels ? "; the labels' rows A:B too" : ""))
      ->check(non_empty_value);
}

void add_input_options(CLI::App* cmd, input_options& in) {
  cmd->add_option("--dataset", in.dataset,
                  "HDF5 dataset path or .npz array name (or write FILE.h5:/path, FILE.npz:name)")
      ->check(non_empty_value);
  auto* raw = cmd->add_flag("--raw", in.raw, "the input is raw little-endian binary (C order)");
  cmd->add_option("--dtype", in.dtype,
                  std::string("raw input element type: ") + k_dtype_names +
                      " (or NumPy's int8, uint8, ..., float64, or its codes <f4, u1, ...)")
      ->transform(dtype_name)
      ->needs(raw);
  cmd->add_option("--shape", in.shape, "raw input shape, e.g. 64,512,512")
      ->check(non_empty_value)
      ->needs(raw);
}

formats::dataset_spec input_spec(const std::string& path, const input_options& in) {
  auto spec = formats::parse_dataset_spec(path, in.dataset, in.raw);
  if (in.raw) {
    if (in.dtype.empty() || in.shape.empty()) {
      throw error(errc::invalid_argument, "--raw needs --dtype and --shape");
    }
    // `train.h5:/images --raw`: the whole text is a path (a name may hold a colon); where no
    // such file is there but the text names a dataset of a file that is, say what was meant.
    std::error_code ec;
    if (path != "-" && path.find(':') != std::string::npos &&
        !std::filesystem::exists(path, ec)) {
      std::optional<formats::dataset_spec> as_dataset;
      try {
        as_dataset = formats::parse_dataset_spec(path);
      } catch (const error&) {
        // no dataset name either ("x.h5:"): the open says there is no such file
      }
      if (as_dataset && as_dataset->kind != formats::file_kind::raw &&
          !as_dataset->dataset.empty() && std::filesystem::exists(as_dataset->path, ec)) {
        throw error(errc::invalid_argument,
                    fmt::format("{}: --raw reads this path as it is, and there is no such file; "
                                "without --raw it names the dataset {} of {}",
                                path, as_dataset->dataset, as_dataset->path));
      }
    }
    spec.raw_type = formats::npy_dtype_of(*parse_dtype(in.dtype));
    for (const auto& item : split_list(in.shape, "--shape")) {  // ("6,24," is refused)
      if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) {
        throw error(errc::invalid_argument, "--shape " + in.shape + ": expected numbers like 64,512,512");
      }
      try {
        spec.raw_shape.push_back(std::stoull(item));
      } catch (const std::exception&) {
        throw error(errc::invalid_argument, "--shape " + in.shape + ": number out of range");
      }
    }
    if (spec.raw_shape.empty()) throw error(errc::invalid_argument, "--shape is empty");
  }
  if (!in.samples.empty()) parse_range(in.samples, spec.first_row, spec.end_row);
  return spec;
}

void add_backend_options(CLI::App* cmd, backend_args& args, const char* threads_help) {
  cmd->add_option("--backend", args.name, "cpu, cuda or auto")
      ->transform(CLI::IsMember({"cpu", "cuda", "auto"}, CLI::ignore_case))
      ->capture_default_str();
  cmd->add_option("--threads", args.threads, threads_help)
      ->transform(decimal_count)
      ->check(between(0, max_threads))
      ->capture_default_str();
  cmd->add_option("--device", args.device,
                  "the GPU for cuda and auto: an index among those CUDA_VISIBLE_DEVICES shows "
                  "(default 0)")
      ->transform(decimal_count)
      ->check(between(0, 65535));
}

/** A --json report, with the input and output named; on stderr when stdout carries data. */
void print_json_report(nlohmann::json j, const std::string& in, const std::string& out,
                       bool stdout_has_data) {
  j["input"] = in;
  j["output"] = out;
  if (!stdout_has_data) {
    std::cout << formats::json_text(j, 2) << "\n";  // (a failure is found when it is flushed)
    return;
  }
  errno = 0;
  std::cerr << formats::json_text(j, 2) << "\n" << std::flush;
  if (!std::cerr) {  // (2>/dev/full: what was asked for is lost, and only the exit code says so)
    std::cerr.clear();
    throw error::from_os(errc::io, "cannot write the --json report to standard error",
                         errno != 0 ? errno : EIO);
  }
}

void print_info_text(const nlohmann::json& j) {
  const auto& c = j["codec"];
  std::cout << fmt::format("file:        {}\n", app::printable(j["file"].get<std::string>()));
  std::cout << fmt::format("format:      dctchop archive {}\n", j["version"].get<std::string>());
  std::cout << fmt::format("data:        {} {} {}\n",
                           shape_text(j["shape"].get<std::vector<std::uint64_t>>()),
                           j["dtype"].get<std::string>(), j["layout"].get<std::string>());
  std::cout << fmt::format("codec:       block {} chop {} coeff {} offset {}\n",
                           c["block"].get<int>(), c["chop"].get<int>(),
                           c["coeff"].get<std::string>(), c["offset"].get<double>());
  if (j.contains("nonfinite")) {
    std::cout << fmt::format("non-finite:  NaN/Inf replaced by {:g}{}\n",
                             j["nonfinite"]["replace"].get<double>(),
                             j.contains("nonfinite_replaced")
                                 ? fmt::format(" ({} values)",
                                               j["nonfinite_replaced"].get<std::uint64_t>())
                                 : std::string());
  }
  const auto per_chunk = j["chunking"]["samples_per_chunk"].get<std::uint64_t>();
  std::cout << fmt::format("chunks:      {} of up to {} sample{}\n", j["chunks"].get<std::uint64_t>(),
                           per_chunk, per_chunk == 1 ? "" : "s");
  if (j.contains("ratio")) {
    std::cout << fmt::format("size:        {} -> {}, ratio {:.2f}x, {:.3f} bits/value\n",
                             human_bytes(j["input_bytes"].get<std::uint64_t>()),
                             human_bytes(j["archive_bytes"].get<std::uint64_t>()),
                             j["ratio"].get<double>(), j["bits_per_value"].get<double>());
  }
  if (j.contains("quality") && j["quality"].is_object()) {
    const auto& q = j["quality"];
    const bool undefined = opt_flag(q, "psnr_undefined");
    // A figure the footer leaves out is not recorded (ARCHIVE.md's list is open and requires
    // none: an archive written before the per-sample figures were, or by another writer);
    // null is one recorded as infinite (lossless) or undefined.
    const std::string unrecorded = "not recorded";
    const bool recorded = q.contains("sample_psnr_min_db");
    auto per_sample = [&](const char* key) {
      if (undefined) return std::string("n/a");
      if (!q.contains(key)) return "n/a (" + unrecorded + ")";
      return db_text(opt_number(q, key));
    };
    auto figure = [&](const char* key, auto text) {
      return q.contains(key) ? text(opt_number(q, key)) : unrecorded;
    };
    const auto lossless = opt_number(q, "lossless_samples").value_or(0);
    const std::string psnr = !q.contains("psnr_db") ? unrecorded
                             : undefined ? std::string("n/a (constant data)")
                                         : db_text(opt_number(q, "psnr_db"));
    if (!undefined && recorded && lossless > 0 && lossless == opt_number(q, "samples")) {
      // (The mean is over the lossy samples: there is none to give one.)
      std::cout << fmt::format("quality:     PSNR {}, every sample lossless ({:.0f})\n", psnr,
                               lossless);
    } else {
      std::cout << fmt::format("quality:     PSNR {}, per-sample PSNR min {} mean {}{}\n", psnr,
                               per_sample("sample_psnr_min_db"),
                               per_sample("sample_psnr_mean_db"),
                               lossless > 0 ? fmt::format(" ({:.0f} lossless sample{})", lossless,
                                                          lossless == 1 ? "" : "s")
                                            : std::string());
    }
    const auto number_text = [](const std::optional<double>& v) {
      return v ? fmt::format("{:g}", *v) : std::string("n/a");
    };
    std::cout << fmt::format(
        "             SSIM {}, RMSE {}, NRMSE {}, max error {}\n",
        figure("ssim", [&](auto v) { return ssim_text(v, formats::recorded_ssim_status(j)); }),
        figure("rmse", number_text), figure("nrmse", nrmse_text),
        figure("max_abs_error", number_text));
  } else {
    std::cout << "quality:     not recorded in the archive (compress --no-quality leaves it out)\n";
  }
  for (const auto& s : j["side_arrays"]) {
    std::cout << fmt::format("side array:  {} {} {}\n", app::printable(s["name"].get<std::string>()),
                             app::printable(s["descr"].get<std::string>()),
                             shape_text(s["shape"].get<std::vector<std::uint64_t>>()));
  }
  // Informative fields (ARCHIVE.md): another writer's may be of any JSON type, or absent
  // (null too).
  const auto& p = j["provenance"];
  auto there = [&p](const char* key) {
    return p.is_object() && p.contains(key) && !p[key].is_null();
  };
  auto field = [&](const char* key) {
    if (!there(key)) return std::string("?");
    return app::printable(p[key].is_string() ? p[key].get<std::string>() : p[key].dump());
  };
  if (there("tool") || there("source") || there("created")) {
    std::cout << fmt::format("provenance:  {} from {} at {}\n", field("tool"), field("source"),
                             field("created"));
  }
}

/** `-o out.h5:/x --raw`: with --raw the whole text is a path (a name may hold a colon), so
 *  this one lies in a folder "out.h5:" that is not there. Said before anything is written,
 *  naming what was probably meant; a path whose folder exists is written as it is. */
void refuse_raw_dataset_name(const std::string& out, bool raw) {
  if (!raw || out == "-" || out.find(':') == std::string::npos) return;
  const auto as_dataset = formats::parse_dataset_spec(out);
  const bool named = as_dataset.kind != formats::file_kind::raw && !as_dataset.dataset.empty();
  const auto meant = formats::member_of_unwritable_container(out);  // (out.nc:/x)
  if (!named && !meant) return;
  std::error_code ec;
  const auto folder = std::filesystem::path(out).parent_path();
  if (folder.empty() || std::filesystem::is_directory(folder, ec)) return;
  throw error(errc::invalid_argument,
              fmt::format("{}: --raw writes raw binary to this path as it is, whose folder {} is "
                          "not there; without --raw {}",
                          out, folder.string(),
                          named ? fmt::format("it names the dataset {} of {}", as_dataset.dataset,
                                              as_dataset.path)
                                : fmt::format("write {} ({})", meant->meant, meant->why)));
}

/** The backend a report's figures came from: "backend", "device" (CUDA: --device's index, a
 *  fresh process's current device, 0, by default) and "threads" (CPU: --threads, or for 0
 *  what a CPU quota or OMP_NUM_THREADS leaves of the cores, so that a batch job's log shows
 *  what it got; never more than the CPUs it may run on, which no more threads ever use: it
 *  said 4096). */
void add_backend_json(nlohmann::json& j, const backend& be, int device) {
  j["backend"] = be.name();
  if (be.name() == "cuda") j["device"] = std::max(device, 0);
  if (be.name().rfind("cpu", 0) == 0) {
    j["threads"] = std::min<unsigned>(static_cast<unsigned>(std::max(be.threads(), 1)),
                                      std::max(dctchop::usable_cores().affinity, 1U));
  }
}

/** eval's report. `failure`: the error when every setting refused the data, which --json
 *  adds to the report as the "error" and "exit_code" of a failed command. `context`: keys
 *  the JSON report takes as they are (the backend, --min-time). */
void print_eval(const formats::eval_result& r, bool json, bool csv,
                const std::optional<std::string>& failure, const nlohmann::json& context) {
  if (json) {
    nlohmann::json j = context;
    if (failure) {
      j["error"] = *failure;
      j["exit_code"] = static_cast<int>(exit_bad_input);
    }
    j["shape"] = r.geom.shape();
    j["samples"] = r.geom.samples;
    j["dtype"] = std::string(to_string(r.type));
    j["layout"] = std::string(to_string(r.geom.lay));  // (auto's choice, as compress says it)
    j["offset"] = r.offset;
    j["rows"] = nlohmann::json::array();
    for (const auto& row : r.rows) j["rows"].push_back(row.to_json());
    if (r.nonfinite_replaced) j["nonfinite_replaced"] = *r.nonfinite_replaced;
    j["notes"] = r.notes;
    for (const auto& w : r.warnings) j["notes"].push_back(w);
    std::cout << formats::json_text(j, 2) << "\n";
    return;
  }
  // A PSNR: a number, inf (lossless), or n/a (constant data: undefined); empty in CSV.
  auto num = [csv](const std::optional<double>& v, const char* f, bool undefined) {
    return v ? fmt::format(fmt::runtime(f), *v) : std::string(csv ? "" : undefined ? "n/a" : "inf");
  };
  if (csv) {
    std::cout << "block,chop,coeff,ratio,bits_per_value,psnr_db,sample_psnr_min_db,ssim,"
                 "max_abs_error,compress_gbps,decompress_gbps,error\n";
  } else {
    std::cout << fmt::format("{:>5} {:>4} {:>5} {:>8} {:>9} {:>9} {:>10} {:>7} {:>9} {:>9} {:>9}\n",
                             "block", "chop", "coeff", "ratio", "bits/val", "PSNR dB", "min PSNR",
                             "SSIM", "max err", "comp GB/s", "dec GB/s");
  }
  for (const auto& row : r.rows) {
    const std::string ct(to_string(row.coeff));
    if (!row.error.empty()) {
      if (csv) {
        std::string quoted = app::printable(row.error);  // one CSV field: quotes doubled
        for (std::size_t q = 0; (q = quoted.find('"', q)) != std::string::npos; q += 2) quoted.insert(q, 1, '"');
        std::cout << fmt::format("{},{},{},,,,,,,,,\"{}\"\n", row.block, row.chop, ct, quoted);
      } else {
        std::cout << fmt::format("{:>5} {:>4} {:>5}  -- {}\n", row.block, row.chop, ct, app::printable(row.error));
      }
      continue;
    }
    const auto& q = row.q;
    if (csv) {
      std::cout << fmt::format("{},{},{},{:.6g},{:.6g},{},{},{},{:.6g},{:.4g},{:.4g},\n", row.block,
                               row.chop, ct, row.ratio(), row.bits_per_value(),
                               num(q.psnr_db, "{:.4f}", q.psnr_undefined),
                               num(q.sample_psnr_min, "{:.4f}", q.psnr_undefined),
                               q.ssim ? fmt::format("{:.6f}", *q.ssim) : std::string(),
                               q.max_abs_error, row.compress_gbps(), row.decompress_gbps());
    } else {
      std::cout << fmt::format(
          "{:>5} {:>4} {:>5} {:>8.2f} {:>9.3f} {:>9} {:>10} {:>7} {:>9.4g} {:>9.2f} {:>9.2f}\n",
          row.block, row.chop, ct, row.ratio(), row.bits_per_value(),
          num(q.psnr_db, "{:.2f}", q.psnr_undefined),
          num(q.sample_psnr_min, "{:.2f}", q.psnr_undefined), ssim_text(q.ssim), q.max_abs_error,
          row.compress_gbps(), row.decompress_gbps());
    }
  }
  if (csv) return;  // (an empty PSNR there: lossless or undefined, as the table and --json say)
  // The table has no room for why a figure is n/a: once each, under it.
  std::vector<std::string> why;
  auto once = [&why](std::string w) {
    if (std::find(why.begin(), why.end(), w) == why.end()) why.push_back(std::move(w));
  };
  for (const auto& row : r.rows) {
    if (!row.error.empty()) continue;
    if (row.q.psnr_undefined) once("PSNR n/a: constant data (R = 0)");
    if (!row.q.ssim) once(fmt::format("SSIM n/a: {}", ssim_missing_note(row.q.ssim_state)));
  }
  for (const auto& w : why) std::cout << w << "\n";
}

/** CLI11's words for an option given twice ("--chop: At Most 1 required but received 2")
 *  as ours; eval's lists are one comma-separated value. And for a value given to a flag
 *  ("raw was given a disallowed flag override"). Other messages as they are. */
std::string once_message(const std::string& what, int argc, char** argv) {
  const std::string flag_mark = " was given a disallowed flag override";
  const auto f = what.find(flag_mark);
  if (f != std::string::npos && f + flag_mark.size() == what.size()) {
    const std::string name = what.substr(0, f);
    return (name.size() == 1 ? "-" : "--") + name +
           " takes no value (a flag: give it, or leave it out)";
  }
  const std::string mark = ": At Most 1 required but received ";
  const auto at = what.find(mark);
  if (at == std::string::npos) return what;
  const std::string opt = what.substr(0, at), times = what.substr(at + mark.size());
  std::string text = opt + " is given " + times + " times; it takes one value";
  const bool eval = argc > 1 && std::string_view(argv[1]) == "eval";
  if (eval && (opt == "--chop" || opt == "--block" || opt == "--coeff")) {
    text += ": several as one comma-separated list (" + opt +
            (opt == "--coeff" ? " f16,bf16)" : opt == "--block" ? " 4,8)" : " 2,4)");
  }
  return text;
}

/** refuse_tty_stdin for each of several inputs, of which one at most may be stdin. */
void refuse_tty_stdins(const std::vector<std::string>& ins) {
  if (std::count_if(ins.begin(), ins.end(), names_stdin) > 1) {
    throw error(errc::invalid_argument,
                "- (stdin) can be given once (/dev/stdin, /dev/fd/0 and /proc/self/fd/0 are "
                "stdin too)");
  }
  for (const auto& in : ins) refuse_tty_stdin(in);
}

/** info's and verify's --json: the report of one archive (or its {"file", "error",
 *  "exit_code"} when it failed), or an array with an entry for each of several. */
void print_json_documents(bool json, std::size_t inputs, const nlohmann::json& docs) {
  if (!json) return;
  if (inputs > 1) {
    std::cout << formats::json_text(docs, 2) << "\n";
  } else if (!docs.empty()) {
    std::cout << formats::json_text(docs.at(0), 2) << "\n";
  }
}

/** Runs `each` on every archive of `ins` (info and verify of the shards of a dataset). A
 *  failure is logged and handed to `failed` with its exit code, and the next archive is
 *  tried; the result is the first failure's exit code, or exit_ok. Ctrl-C ends the loop. */
template <class Each, class Failed>
int for_each_archive(const std::vector<std::string>& ins, spdlog::logger& log, Each each,
                     Failed failed) {
  int rc = exit_ok;
  auto fail = [&](const std::string& in, const std::string& line, const std::string& what,
                  int code) {
    log.error("{}", line);
    failed(input_place(in), what, code);
    if (rc == exit_ok) rc = code;
  };
  for (const auto& in : ins) {
    check_signal();
    try {
      each(in);
    } catch (const error& e) {
      if (e.code() == errc::interrupted || g_signal.load() != 0) throw;  // (see run's catch)
      fail(in, std::string("error: ") + e.what(), e.what(), exit_for(e.code()));
    } catch (const std::bad_alloc&) {
      fail(in, "error: out of memory", "out of memory", exit_io);  // (a resource, as threads)
    } catch (const interrupted&) {
      throw;
    } catch (const std::exception& e) {
      fail(in, std::string("internal error: ") + e.what(), e.what(), exit_internal);
    }
  }
  check_signal();
  return rc;
}

/** A failed archive's entry in the JSON array of info or verify of several archives. */
nlohmann::json failure_json(const std::string& name, const std::string& what, int code) {
  return {{"file", name}, {"archive", name}, {"error", what}, {"exit_code", code}};
}

/** The words `sub` did not take, without the `--` that ends its options; a word after `--`
 *  is never an option. */
struct extra_words {
  std::vector<std::string> options, inputs;
};
extra_words extra_words_of(const CLI::App& sub) {
  extra_words x;
  bool options_ended = false;
  for (const auto& w : sub.remaining()) {
    if (w == "--" && !options_ended) {
      options_ended = true;
    } else if (!options_ended && w.size() > 1 && w[0] == '-') {
      x.options.push_back(w.substr(0, w.find('=')));
    } else {
      x.inputs.push_back(w);
    }
  }
  return x;
}

/** "compress takes one input; left over: b.npy c.npy". */
std::string left_over_message(const std::string& command, const std::vector<std::string>& words) {
  return fmt::format("{} takes one input; left over: {}", command, fmt::join(words, " "));
}

/** The edit distance of two words (insertions, deletions, substitutions, swaps of neighbours). */
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

/** "; did you mean --labels?" for an unknown option one or two edits from one of `sub`'s
 *  (the nearest, when one is nearest), else "". */
std::string option_suggestion(const CLI::App& sub, const std::string& unknown) {
  if (unknown.rfind("--", 0) != 0) return {};
  const std::string word = unknown.substr(2);
  std::size_t best = 2;  // at most two edits away
  std::vector<std::string> nearest;
  for (const CLI::Option* opt : sub.get_options()) {
    for (const auto& name : opt->get_lnames()) {
      const std::size_t d = edit_distance(word, name);
      if (d < best) nearest.clear(), best = d;
      if (d == best) nearest.push_back(name);
    }
  }
  if (nearest.size() != 1 || word.size() <= best) return {};
  return "; did you mean --" + nearest[0] + "?";
}

/** The first word before the command's name `command` that reads as an option
 *  (`dctchop --frob info x`: an option of no command), or nullptr. */
const char* option_before_command(int argc, char** argv, const std::string& command) {
  for (int k = 1; k < argc && command != argv[k]; ++k) {
    if (argv[k][0] == '-' && argv[k][1] != '\0') return argv[k];
  }
  return nullptr;
}

/** "; a file named -x.npy? ..." when `word`, taken for an option, names a file here: a name
 *  that starts with '-' reads as an option, as for every command-line tool. */
std::string dash_file_hint(const std::string& word) {
  if (word.size() < 2 || word[0] != '-' || word == "--" || ::access(word.c_str(), F_OK) != 0) return {};
  return "; to name the file " + word + ", write ./" + word + " (or put it after --)";
}

/** What is wrong with the words `sub` did not take, or "" when it took them all: the first
 *  unknown option, else the inputs beyond the one it reads. */
std::string extra_arguments_message(const CLI::App& sub) {
  const auto x = extra_words_of(sub);
  if (!x.options.empty()) {
    const auto near = option_suggestion(sub, x.options[0]);
    return fmt::format("{} has no option {}{}", sub.get_name(), x.options[0],
                       near.empty() ? dash_file_hint(x.options[0]) : near);
  }
  if (x.inputs.empty()) return {};
  return left_over_message(sub.get_name(), x.inputs);
}

}  // namespace

/** The command; main() adds what surrounds it. */
/** Whether standard error is a regular file that an argument names (an input, or a file an
 *  option takes: `verify a.dcz --bogus 2>> a.dcz`). */
bool stderr_is_an_argument(int argc, char** argv) {
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::vector<std::string> names{a};
    if (const auto eq = a.find('='); a.rfind("-", 0) == 0 && eq != std::string::npos) {
      names.push_back(a.substr(eq + 1));  // --against=x.npy
    }
    for (const auto& n : names) {
      if (n.empty() || n == "-") continue;
      std::string file = n;
      try {
        file = formats::parse_dataset_spec(n).path;  // the file of FILE.h5:/x
      } catch (const error&) {
      }
      if (formats::names_descriptors_file(file, STDERR_FILENO) ||
          formats::names_descriptors_file(n, STDERR_FILENO)) {
        return true;
      }
    }
  }
  return false;
}

int run(int argc, char** argv) {
  // Standard error on a file that an argument names: a usage error's line would be written
  // into it (`verify a.dcz --bogus 2>> a.dcz` cut the archive's index off its end). Until the
  // command line is taken, stderr goes nowhere; afterwards the checks below refuse an input
  // there without a word (exit 2) and say when an output is one.
  int saved_stderr = -1;
  if (stderr_is_an_argument(argc, argv)) {
    saved_stderr = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved_stderr >= 0 && null >= 0) ::dup2(null, STDERR_FILENO);
    if (null >= 0) ::close(null);
  }
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe becomes an I/O error, not a silent death
  std::signal(SIGXFSZ, SIG_IGN);  // past `ulimit -f`, write() fails with EFBIG: an I/O error
  dctchop::formats::skip_hdf5_exit_handler();  // every HDF5 file is closed by its owner
  // No SA_RESTART: a read blocked on a pipe returns EINTR, the library throws
  // error(interrupted) and the destructors remove unfinished outputs.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  // A signal ignored when dctchop starts stays ignored, as the parent asked: `nohup` ignores
  // SIGHUP (a run that outlives its terminal), a shell without job control SIGINT and SIGQUIT
  // for the commands it starts with `&`.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction was {};
    if (sigaction(sig, nullptr, &was) == 0 && was.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }

  // "dctchop: " and the message, its control characters escaped (terminal_text.hpp).
  auto log = app::make_stderr_logger();

  CLI::App app{"dctchop: compress image and tensor datasets with blockwise DCT+Chop"};
  // A flag takes no value: `--raw=false` counted as given (its --dtype and --shape taken,
  // then ignored), and `--no-quality=false` still excluded --psnr.
  app.option_defaults()->disable_flag_override();
  // Usage errors as one line, like every other error.
  app.failure_message([argc, argv](const CLI::App*, const CLI::Error& e) {
    std::string hint;  // `compress -x.npy`: the input taken for an option, so "input is required"
    for (int k = 1; k < argc && hint.empty() && std::string_view(argv[k]) != "--"; ++k) {
      hint = dash_file_hint(argv[k]);
    }
    return "dctchop: error: " + app::printable(once_message(e.what(), argc, argv) + hint) +
           " (see --help)\n";
  });
  app.footer(k_examples);
  app.require_subcommand(1);
  // Made when asked for: the CUDA backend's line counts the devices, which starts the CUDA
  // driver (a tenth of a second and more on a GPU machine), not for every command.
  app.set_version_flag("--version", [] {
    return fmt::format(
        "dctchop {}\nbackends: {}\narchive format: {}.{}\nnpz inflate: {}\ncores: {}",
        DCTCHOP_VERSION_STRING, fmt::join(compiled_backends(), ", "), formats::archive_major,
        formats::archive_minor, formats::npz_inflater(), cores_text(usable_cores()));
  });

  // ---- compress
  std::string c_in, c_out, c_coeff, c_layout = "auto", c_labels;
  backend_args c_be;
  std::string c_nonfinite = "error";
  int c_block = 8, c_chop = 4;
  double c_chunk_mb = 4.0;
  std::optional<double> c_psnr, c_ssim;
  bool c_force = false, c_quiet = false, c_json = false, c_no_quality = false, c_no_ssim = false;
  std::vector<formats::chop_trial> c_trials;  // a target search's measurements, as made
  auto* cmp = app.add_subcommand("compress", "compress a dataset (NPY, NPZ, HDF5 or raw) into a .dcz archive");
  input_options c_io;
  cmp->add_option("input", c_in, "input: FILE.npy, - (stdin), FILE.h5[:/dataset], FILE.npz[:array], or raw with --raw; other names (.nc, .mat) are read as their bytes say")
      ->check(non_empty_path)
      ->required();
  add_input_options(cmp, c_io);
  add_samples_option(cmp, c_io, true);
  cmp->add_option("-o,--output", c_out,
                  "output archive, or - for stdout (default: INPUT.dcz; stdout for - input)")
      ->check(non_empty_path);
  cmp->add_option("--block", c_block, "block size B: 4, 8, 16 or 32")
      ->transform(block_size)
      ->capture_default_str();
  auto* chop_opt =
      cmp->add_option("--chop", c_chop, "coefficients kept per axis K, 1..B")
          ->transform(decimal_count)
          ->capture_default_str();
  auto* psnr_opt = cmp->add_option("--psnr", c_psnr,
                  "choose the smallest chop whose PSNR on this data is at least X dB")
      ->check(finite_number)
      ->excludes(chop_opt);
  auto* ssim_opt = cmp->add_option("--ssim", c_ssim, "choose the smallest chop whose SSIM is at least Y")
      ->check(finite_number)
      ->check(between(-1, 1))
      ->excludes(chop_opt);
  cmp->add_option("--coeff", c_coeff,
                  "coefficient type: f16, bf16, f32, i16 (default f16 for u8 and i8, f32 otherwise)")
      ->check(coeff_name);
  cmp->add_option("--layout", c_layout, "HW, NHW, NHWC, NCHW or auto")
      ->check(CLI::IsMember({"auto", "HW", "NHW", "NHWC", "NCHW"}, CLI::ignore_case))
      ->capture_default_str();
  cmp->add_option("--chunk-mb", c_chunk_mb, "coefficient MiB per chunk (more than 0, at most 4096)")
      ->check(finite_number)
      ->capture_default_str();
  cmp->add_option("--labels", c_labels,
                  "per-sample labels stored losslessly: FILE.npy, FILE.h5:/labels or FILE.npz:y_train")
      ->check(non_empty_path);
  cmp->add_option("--nonfinite", c_nonfinite,
                  "NaN and Inf in float input: error (naming the first sample), or replace=V "
                  "(counted in the archive)")
      ->capture_default_str();
  std::string c_offset = "auto";
  cmp->add_option("--offset", c_offset, k_offset_help)->capture_default_str();
  add_backend_options(cmp, c_be, "CPU threads (0: every core), one chunk each");
  cmp->add_flag("-f,--force", c_force, "overwrite an existing output");
  cmp->add_flag("-q,--quiet", c_quiet, "print nothing but errors");
  cmp->add_flag("--json", c_json, "print the report as JSON (stdout, or stderr with -o -)");
  cmp->add_flag("--no-quality", c_no_quality, "skip measuring PSNR and SSIM (faster)")
      ->excludes(psnr_opt)
      ->excludes(ssim_opt);
  cmp->add_flag("--no-ssim", c_no_ssim, "measure PSNR but not SSIM")->excludes(ssim_opt);

  // ---- decompress
  std::string d_in, d_out, d_samples, d_labels_out;
  backend_args d_be;
  bool d_force = false, d_quiet = false, d_json = false;
  auto* dec = app.add_subcommand("decompress", "decode a .dcz archive into NPY, NPZ, HDF5 or raw");
  dec->add_option("input", d_in, "input archive, or - for stdin")
      ->check(non_empty_path)->required();
  std::string d_dataset;
  bool d_raw = false;
  dec->add_option("-o,--output", d_out,
                  "output (required): FILE.npy, - (stdout), FILE.h5[:/dataset] (labels go "
                  "beside, in its group: /g/labels), FILE.npz[:array] (arrays data and "
                  "labels), or raw with --raw")
      ->check(non_empty_path);
  dec->add_option("--dataset", d_dataset,
                  "HDF5 dataset path (default /data) or .npz array name (default data) for the output");
  dec->add_flag("--raw", d_raw, "write raw little-endian binary (C order, no header)");
  dec->add_option("--samples", d_samples,
                  "sample range A:B (half-open; A:, :B, or A for one sample)");
  dec->add_option("--labels-out", d_labels_out, "write the stored labels to FILE.npy, FILE.h5[:/dataset] or FILE.npz[:array] (there only, not beside HDF5/.npz data)")
      ->check(non_empty_path);
  add_backend_options(dec, d_be, "CPU threads (0: every core), one chunk each");
  dec->add_flag("-f,--force", d_force, "overwrite an existing output");
  dec->add_flag("-q,--quiet", d_quiet, "print nothing but errors");
  dec->add_flag("--json", d_json, "print the report as JSON");

  // ---- info
  std::vector<std::string> i_in;
  bool i_json = false;
  auto* inf = app.add_subcommand("info", "describe .dcz archives");
  inf->add_option("input", i_in, "archives (shards/*.dcz), or - for stdin")
      ->check(non_empty_path)->required();
  inf->add_flag("--json", i_json, "print JSON (an array of reports for several archives)");

  // ---- eval
  std::string e_in, e_chops = "1,2,4,6", e_coeffs, e_layout = "auto";
  backend_args e_be;
  std::string e_blocks = "8";
  double e_chunk_mb = 4.0, e_min_time = formats::eval_options{}.min_seconds;
  bool e_json = false, e_csv = false, e_no_ssim = false, e_quiet = false;
  auto* evl = app.add_subcommand(
      "eval", "measure ratio, quality and speed of several settings in memory (writes nothing)");
  input_options e_io;
  evl->add_option("input", e_in, "input: FILE.npy, - (stdin), FILE.h5[:/dataset], FILE.npz[:array], or raw with --raw; other names (.nc, .mat) are read as their bytes say")
      ->check(non_empty_path)
      ->required();
  add_input_options(evl, e_io);
  add_samples_option(evl, e_io, false);
  evl->add_option("--block", e_blocks, "comma-separated block sizes B to try: 4, 8, 16, 32")
      ->capture_default_str();
  auto* e_chop_opt = evl->add_option("--chop", e_chops,
                                     "comma-separated chops to try (default: those of 1,2,4,6 "
                                     "that fit the block)");
  evl->add_option("--coeff", e_coeffs, "comma-separated coefficient types (default: the dtype's)")
      ->check(non_empty_value);
  evl->add_option("--layout", e_layout, "HW, NHW, NHWC, NCHW or auto")
      ->check(CLI::IsMember({"auto", "HW", "NHW", "NHWC", "NCHW"}, CLI::ignore_case))
      ->capture_default_str();
  evl->add_option("--chunk-mb", e_chunk_mb,
                  "coefficient MiB per chunk that the archive size assumes (more than 0, at most "
                  "4096)")
      ->check(finite_number)
      ->capture_default_str();
  add_backend_options(evl, e_be,
                      "CPU threads (0: every core) that each setting's codec and measurement "
                      "run on, one chunk at a time");
  evl->add_option("--min-time", e_min_time,
                  "seconds (0 to 3600) each setting's codec is timed for at least: a chunk "
                  "(64 MiB) that takes less goes through it again in memory, up to 100 "
                  "times, and its fastest pass counts; 0: one pass a chunk")
      ->check(finite_number)
      ->capture_default_str();
  auto* e_json_opt = evl->add_flag("--json", e_json, "print JSON");
  evl->add_flag("--csv", e_csv, "print CSV (for scripts/plot_eval.py)")->excludes(e_json_opt);
  evl->add_flag("--no-ssim", e_no_ssim, "skip SSIM (faster)");
  std::string e_nonfinite = "error";
  evl->add_option("--nonfinite", e_nonfinite, "NaN and Inf in float input: error, or replace=V")
      ->capture_default_str();
  std::string e_offset = "auto";
  evl->add_option("--offset", e_offset, k_offset_help)->capture_default_str();
  evl->add_flag("-q,--quiet", e_quiet, "no progress bar and no notes on stderr (the table is printed)");

  // ---- verify
  std::vector<std::string> v_ins;
  std::string v_against, v_labels;
  backend_args v_be;
  std::optional<double> v_min_psnr, v_min_ssim, v_max_error;
  bool v_json = false, v_quiet = false;
  auto* ver = app.add_subcommand(
      "verify", "check an archive's checksums and its quality against the original data");
  ver->add_option("archive", v_ins,
                  "archive, or - for stdin (several archives when there is no --against)")
      ->check(non_empty_path)
      ->required();
  input_options v_io;
  add_input_options(ver, v_io);
  ver->add_option("--against", v_against,
                  "the original: FILE.npy, - (stdin), FILE.h5[:/dataset], FILE.npz[:array], or raw with --raw; "
                  "without it only the checksums and the index are checked")
      ->check(non_empty_path);
  ver->add_option("--labels", v_labels,
                  "the original labels (FILE.npy, FILE.h5:/labels, FILE.npz:y_train): the "
                  "archive's must equal them (exit 9 otherwise); needs --against")
      ->check(non_empty_path);
  ver->add_option("--min-psnr", v_min_psnr, "fail (exit 8) when PSNR is below X dB")
      ->check(finite_number);
  ver->add_option("--min-ssim", v_min_ssim, "fail (exit 8) when SSIM is below Y (-1..1)")
      ->check(finite_number)
      ->check(between(-1, 1));
  ver->add_option("--max-error", v_max_error, "fail (exit 8) when an absolute error exceeds Z")
      ->check(finite_number)
      ->check(non_negative);
  add_backend_options(ver, v_be, "CPU threads (0: every core), one chunk each");
  ver->add_flag("--json", v_json, "print JSON");
  ver->add_flag("-q,--quiet", v_quiet, "print nothing but errors and failed gates");

  // Each command's help shows its own examples (and the exit codes); dctchop --help all.
  for (auto* sub : app.get_subcommands({})) sub->footer(examples_for(sub->get_name()));

  // A first word that is no command ("compres", "frobnicate"): CLI11 says only that a
  // subcommand is required.
  {
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
      known |= argc > 1 && sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (argc == 1) {
      log->error("error: name a command: {} (see --help)", names);
      return exit_usage;
    }
    if (!known && argv[1][0] != '-') {
      log->error("error: '{}' is not a command; the commands are {} (see --help)", argv[1], names);
      return exit_usage;
    }
    // `dctchop --versio`, `dctchop --json`: an option of no command and no command after it
    // (CLI11 said only that a subcommand is required).
    if (!known) {
      const std::string first = argv[1];
      bool command = false, ours = false, a_commands = false;
      for (int i = 2; i < argc; ++i) {
        for (const auto* sub : app.get_subcommands({})) command |= sub->get_name() == argv[i];
      }
      const std::string flag = first.substr(0, first.find('='));
      for (const CLI::Option* opt : app.get_options()) ours |= opt->check_name(flag);
      for (const auto* sub : app.get_subcommands({})) {
        for (const CLI::Option* opt : sub->get_options()) a_commands |= opt->check_name(flag);
      }
      if (!command && !ours) {
        if (a_commands) {
          log->error("error: {} is an option of a command, which comes first: dctchop COMMAND "
                     "{} ... ({}; see --help)", flag, flag, names);
        } else {
          const std::string near = option_suggestion(app, flag);  // ("; did you mean ...?")
          log->error("error: dctchop has no option {}{} (see --help)", flag,
                     near.empty() ? "; name a command: " + names : near);
        }
        return exit_usage;
      }
    }
  }
  // `--dataset=` took the next word as its value (`--dataset= /top -o t.dcz` read /top),
  // and `-f=no` read as an option "-": refused, before CLI11 reads them.
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    const std::string_view a = argv[i];
    if (a.size() > 3 && a.starts_with("--") && a.ends_with("=") && a.find('=') == a.size() - 1) {
      log->error("error: {}: an empty value (see --help)", a.substr(0, a.size() - 1));
      return exit_usage;
    }
    if (a.size() > 2 && a[0] == '-' && a[1] != '-' && a[1] != '=' && a[2] == '=') {
      log->error("error: {}: a short option takes no '=' (-{} VALUE, or -{} alone for a flag) "
                 "(see --help)", a, a[1], a[1]);
      return exit_usage;
    }
  }
  // Words a command does not take are ours to word: CLI11 lists them last first and does not
  // say which command took what.
  for (auto* sub : app.get_subcommands({})) sub->allow_extras();
  app.allow_extras();  // (words after a `--` that follows a command's input land here)
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // `compress --bogus`: the unknown option, not the input it left missing, is the slip.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !app.get_subcommands().empty()) {
      // (`dctchop --frob compress`: an option of no command, before the command's name.)
      if (const char* opt = option_before_command(argc, argv, app.get_subcommands().front()->get_name())) {
        log->error("error: dctchop has no option {} (see --help)", opt);
        return exit_usage;
      }
      for (const auto* sub : app.get_subcommands()) {
        if (const auto x = extra_words_of(*sub); !x.options.empty()) {
          log->error("error: {} (see dctchop {} --help)", extra_arguments_message(*sub),
                     sub->get_name());
          return exit_usage;
        }
      }
    }
    errno = 0;
    int rc = app.exit(e);
    if (!std::cout) g_stdout_errno = errno;  // (by the end, later calls may have changed it)
    g_stdout_is_help = rc == 0;
    return rc == 0 ? exit_ok : exit_usage;
  }
  // `decompress a.dcz out.npy`: the likeliest slip of all, so the message shows the fix
  // (after any unknown option, which may be the cause).
  if (const auto x = extra_words_of(*dec); *dec && dec->count("--output") == 0 && x.options.empty()) {
    const auto& extras = x.inputs;
    if (extras.size() == 1 && formats::name_ends_with(extras[0], ".dcz")) {
      // (-o y.dcz would write decoded values under an archive's name, over it with -f.)
      log->error("error: decompress takes one archive and writes to -o OUTPUT (FILE.npy, "
                 "FILE.h5, FILE.npz, - for stdout): {} is a second archive (see dctchop "
                 "decompress --help)", extras[0]);
    } else if (extras.size() == 1) {
      log->error("error: decompress writes to -o OUTPUT: did you mean -o {}? (see dctchop "
                 "decompress --help)", extras[0]);
    } else {
      log->error("error: decompress needs -o OUTPUT (FILE.npy, FILE.h5, FILE.npz, - for "
                 "stdout, or raw with --raw) (see dctchop decompress --help)");
    }
    return exit_usage;
  }
  // `compress in.npy out.dcz`: the same slip, told by the archive's name.
  if (const auto x = extra_words_of(*cmp); *cmp && cmp->count("--output") == 0 &&
                                           x.options.empty() && x.inputs.size() == 1 &&
                                           formats::name_ends_with(x.inputs[0], ".dcz")) {
    log->error("error: compress takes one input and writes to -o OUTPUT: did you mean -o {}? "
               "(see dctchop compress --help)", x.inputs[0]);
    return exit_usage;
  }
  // `info a.dcz -- b.dcz`: once a command's input is filled, CLI11 hands what follows `--`
  // to the top level. Inputs of info and verify; left over for the others.
  if (auto top = app.remaining(); !top.empty()) {
    // An option of no command (`dctchop --frob info x`) stands before the command's name;
    // the rest came after a `--`, where a word is never an option (`info a.dcz -- -b.dcz`).
    const std::string name = app.get_subcommands().front()->get_name();  // (one is required)
    if (const char* opt = option_before_command(argc, argv, name)) {
      log->error("error: dctchop has no option {} (see --help)", opt);
      return exit_usage;
    }
    if (top.front() == "--") top.erase(top.begin());
    if (*inf) {
      i_in.insert(i_in.end(), top.begin(), top.end());
    } else if (*ver) {
      v_ins.insert(v_ins.end(), top.begin(), top.end());
    } else if (!top.empty()) {
      log->error("error: {} (see dctchop {} --help)", left_over_message(name, top), name);
      return exit_usage;
    }
  }
  for (const auto* sub : app.get_subcommands()) {
    if (const auto extra = extra_arguments_message(*sub); !extra.empty()) {
      log->error("error: {} (see dctchop {} --help)", extra, sub->get_name());
      return exit_usage;
    }
  }

  // Standard output by its names is "-": the data streams there as with `-o -` (a file
  // stdout is redirected to needs no -f, its report says no file size of 0, and no note
  // says that /dev/stdout holds NPY data whatever its name says).
  for (std::string* out : {&c_out, &d_out, &d_labels_out}) {
    if (*out == "/dev/stdout" || *out == "/dev/fd/1" || *out == "/proc/self/fd/1") *out = "-";
  }
  // With --json, a command that fails prints {"error", "exit_code"} where its report would
  // have gone, when that is stdout (with `-o -` stdout carries the data: the line on stderr
  // says it all), as info and verify of several archives do for each one that fails.
  // Whether stdout carries the command's data (before compress's default output is set too:
  // stdin, or a descriptor's name, compresses to stdout).
  // An output named by stdout's own file (`-o /dev/stdout`, or the file stdout is redirected
  // to) carries data there as `-o -` does: the report goes to stderr, not into the data.
  // (Looked at once, before the work: a file output replaced by its new file is no longer
  // stdout's when the report is written.)
  const auto to_stdout = [](const std::string& out) { return formats::same_output("-", out); };
  const bool outputs_to_stdout = (*cmp && to_stdout(c_out)) ||
                                 (*dec && (to_stdout(d_out) || to_stdout(d_labels_out)));
  auto stdout_carries_data = [&] {
    if (*cmp) {
      // (c_out is "-" once the default for stdin's input is taken, further on)
      return outputs_to_stdout || c_out == "-" ||
             (c_out.empty() && (c_in == "-" || names_a_descriptor(c_in)));
    }
    return outputs_to_stdout;
  };
  auto json_on_stdout = [&] {
    return ((*cmp && c_json) || (*dec && d_json) || (*evl && e_json) || (*inf && i_json) ||
            (*ver && v_json)) &&
           !stdout_carries_data();
  };
  bool stdout_is_an_input = false;  // (the failure's report goes nowhere either)
  // info and verify of several archives: the reports so far, one an archive, whose array a
  // failure that ends the loop (a signal) completes with the archive it stopped in.
  nlohmann::json archive_docs = nlohmann::json::array();
  const std::vector<std::string>* archives_looped = nullptr;  // while in that loop
  auto json_failure = [&](const std::string& what, int code) {
    if (!json_on_stdout() || g_stdout_closed || stdout_is_an_input) return;
    if (archives_looped && archives_looped->size() > 1) {
      auto docs = archive_docs;
      if (docs.size() < archives_looped->size()) {
        const std::string& in = (*archives_looped)[docs.size()];
        docs.push_back(failure_json(input_place(in), what, code));
        if (*ver) docs.back()["passed"] = false;
      }
      std::cout << formats::json_text(docs, 2) << "\n";
      return;
    }
    nlohmann::json j{{"error", what}, {"exit_code", code}};
    if (*cmp && !c_trials.empty()) {  // a search that failed: what it measured
      auto& t = j["chop_search"] = nlohmann::json::array();
      for (const auto& tr : c_trials) t.push_back(formats::chop_trial_to_json(tr));
    }
    // The one archive of info or verify, as in their reports (and in failure_json's entries
    // for several); decompress's too, as `archive`, the key every report has.
    const auto named = [&j](const std::string& in, bool file) {
      j["archive"] = input_place(in);
      if (file) j["file"] = j["archive"];
    };
    if (*ver && v_ins.size() == 1) {
      named(v_ins.front(), true);
      j["passed"] = false;
    }
    if (*inf && i_in.size() == 1) named(i_in.front(), true);
    if (*dec && !d_in.empty()) named(d_in, false);
    std::cout << formats::json_text(j, 2) << "\n";
  };
  auto stopped_by_signal = [&] {
    json_failure(interrupted_text(), exit_interrupted);
    // (Said after the failure's report, which a stdout that takes nothing cuts short.)
    std::cout.flush();
    const bool cut = !std::cout && g_stdout_errno == EINTR;
    log->error("{}{}", interrupted_text(),
               cut ? " (the report on standard output is incomplete)" : "");
    return exit_interrupted;
  };

  if (saved_stderr >= 0) {  // (the command line taken: stderr back, for the checks below)
    ::dup2(saved_stderr, STDERR_FILENO);
    ::close(saved_stderr);
  }
  try {
    // A report for a closed stdout would be lost after the work (and the output) was done.
    if (g_stdout_closed && (json_on_stdout() || *evl || *inf)) {
      throw error(errc::io, "cannot write to standard output: it is closed, and the report goes "
                            "there");
    }
    // A report appended to an input (`dctchop info a.dcz >> a.dcz`): inputs are only read.
    // So are messages (`verify a.dcz 2>> a.dcz`: its report, and any error, go to stderr).
    {
      std::vector<std::string> ins;
      if (*cmp) ins = {c_in, c_labels};
      if (*dec) ins = {d_in};
      if (*evl) ins = {e_in};
      if (*inf) ins = i_in;
      if (*ver) {
        ins = v_ins;
        ins.push_back(v_against);
        ins.push_back(v_labels);
      }
      const bool report_on_stdout = json_on_stdout() || *evl || *inf;
      for (const auto& in : ins) {
        if (in.empty()) continue;
        std::string path = in;  // the file of FILE.h5:/x or FILE.npz:x
        try {
          path = formats::parse_dataset_spec(in).path;
        } catch (const error&) {
          // (a malformed name: refused where it is opened)
        }
        // And the files an HDF5 dataset reads besides its own (an external link's, external
        // raw files, a virtual dataset's sources): --psnr's lines went into the data.
        // (Looked into only where stdout or stderr is a regular file, which only then can be
        // one: HDF5 opens the file once more for it.)
        std::vector<std::string> also;
        const auto regular = [](int fd) {
          struct stat st {};
          return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
        };
        try {
          if (regular(STDOUT_FILENO) || regular(STDERR_FILENO)) {
            auto spec = formats::resolve_by_content(formats::parse_dataset_spec(in));
            // (Where none is named, the one chosen: compress's labels choose by their names.)
            if ((*cmp || *ver) && &in == &ins.back() && in == (*cmp ? c_labels : v_labels)) {
              spec.purpose = formats::dataset_spec::role::labels;
            }
            also = formats::files_read_by(spec);
          }
        } catch (const error&) {
        }
        // The file that `fd` is, in words ("" when it is none of the input's): the input
        // file itself, or one of those its dataset reads.
        const std::string named = in == "-" ? std::string("(standard input's)") : in;
        const auto is_stream = [&](int fd) -> std::string {
          if (formats::is_standard_output(path, fd) ||
              (path != in && formats::is_standard_output(in, fd))) {
            return "the input file " + named;
          }
          for (const auto& f : also) {
            if (formats::is_standard_output(f, fd)) return f + ", which the input " + in + " reads";
          }
          return {};
        };
        if (const std::string which = is_stream(STDERR_FILENO); !which.empty()) {
          // Refused without a word: the word would go into the input. (exit 2)
          const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
          if (null >= 0) ::dup2(null, STDERR_FILENO);
          if (null > STDERR_FILENO) ::close(null);
          throw error(errc::invalid_argument,
                      "standard error is " + which + ": messages would be written into it");
        }
        if (const std::string which = report_on_stdout ? is_stream(STDOUT_FILENO) : "";
            !which.empty()) {
          stdout_is_an_input = true;
          throw error(errc::invalid_argument,
                      "standard output is " + which + ": the report would be written into it");
        }
      }
    }
    // Messages into the data: an output that is stderr's file (`-o /dev/stderr`), or stdout
    // carrying data into the file or pipe stderr goes to (`-o - 2>&1`). The archive ended
    // with the report's lines, exit 0. (With -q and no --json only an error goes there, and
    // the exit status says the data is not whole.)
    if ((*cmp && (!c_quiet || c_json)) || (*dec && (!d_quiet || d_json))) {
      const auto is_stderr = [](const std::string& out) {
        return formats::names_descriptors_file(out, STDERR_FILENO);
      };
      const auto stdout_is_stderr = [] {
        struct stat out {}, err {};
        return ::fstat(STDOUT_FILENO, &out) == 0 && ::fstat(STDERR_FILENO, &err) == 0 &&
               !S_ISCHR(out.st_mode) && out.st_dev == err.st_dev && out.st_ino == err.st_ino;
      };
      const bool into = (*cmp && is_stderr(c_out)) ||
                        (*dec && (is_stderr(d_out) || is_stderr(d_labels_out))) ||
                        (stdout_carries_data() && stdout_is_stderr());
      if (into) {
        const bool json = (*cmp && c_json) || (*dec && d_json);  // (-q given or not)
        throw error(errc::invalid_argument,
                    std::string("standard error goes where the data goes (2>&1, or -o "
                                "/dev/stderr): ") +
                        (json ? "--json's report would be written into it; send it elsewhere, "
                                "or leave out --json"
                              : "messages would be written into it; send it elsewhere, or -q"));
      }
    }
    if (*cmp) {
      if (cmp->get_option("--output")->count() > 0 && c_out.empty()) {
        throw error(errc::invalid_argument, "-o: empty output path");
      }
      std::string named_array;  // of an input file that holds several, when -o was left out
      if (c_out.empty()) {
        if (c_in == "-" || names_a_descriptor(c_in)) {  // (`<(cmd)`: no name to follow)
          c_out = "-";
        } else {
          // train.npy -> train.dcz; train.h5:/images -> train.dcz
          const auto spec =
              formats::resolve_by_content(formats::parse_dataset_spec(c_in, c_io.dataset, c_io.raw));
          named_array = spec.dataset;
          // (two shards of one file, --samples 0:5 and 5:10, both default to its name)
          if (!c_io.samples.empty()) {
            named_array += (named_array.empty() ? "" : " ") + std::string("--samples ") +
                           c_io.samples;
          }
          std::string stem = spec.path;
          const auto dot = stem.rfind('.');
          if (dot != std::string::npos && stem.find('/', dot) == std::string::npos) stem.resize(dot);
          c_out = stem + ".dcz";
        }
      }
      if (names_stdin(c_in) && names_stdin(c_labels)) {
        throw error(errc::invalid_argument, "the input and --labels cannot both be stdin");
      }
      refuse_tty_stdin(c_in);
      refuse_tty_stdin(c_labels);
      refuse_output_into_stdin({c_in, c_labels}, {c_out});
      refuse_tty_stdout(c_out);
      note_stream_output(c_out);
      formats::compress_options o;
      o.block = c_block;
      o.chop = c_chop;
      if (!c_coeff.empty()) o.coeff = parse_coeff_type(c_coeff);
      o.lay = parse_layout(c_layout).value_or(layout::automatic);
      o.chunk_mb = c_chunk_mb;
      o.labels_path = c_labels;
      o.nonfinite_replacement = parse_nonfinite(c_nonfinite);
      o.offset = parse_offset(c_offset);
      o.overwrite = c_force;
      o.measure_quality = !c_no_quality;
      o.ssim = !c_no_ssim;
      o.target.psnr_db = c_psnr;
      o.target.ssim = c_ssim;
      o.threads = c_be.threads;
      o.tool_version = DCTCHOP_VERSION_STRING;
      o.created = formats::parse_source_date_epoch(std::getenv("SOURCE_DATE_EPOCH"));
      app::progress_bar bar("compressing", !c_quiet);
      o.progress = progress_to(bar);
      // Each measurement as it is made: a search that fails reports them too, before its
      // error (text) or in its failure report (--json).
      o.on_trial = [&](const formats::chop_trial& t) {
        c_trials.push_back(t);
        if (c_json || c_quiet) return;
        bar.clear();
        log->info("  chop {}: PSNR {}, SSIM {} on {}{}", t.chop, psnr_text(t.q), ssim_text(t.q),
                  t.on_sample ? "a sample" : "all the data", t.meets ? " - meets the target" : "");
      };
      auto be =
          open_backend(c_be, c_quiet || (c_json && stdout_carries_data()), *log);
      auto r = with_backend(*be, [&] {
        try {
          return formats::compress(input_spec(c_in, c_io), c_out, *be, o);
        } catch (const error& e) {
          // mnist.npz:x_train, then mnist.npz:x_test: both default to mnist.dcz.
          if (e.code() != errc::output_exists || named_array.empty()) throw;
          throw error(e.code(), fmt::format("{}; the default name comes from the input file, not "
                                            "from {}: name the output with -o",
                                            e.what(), named_array));
        }
      });
      bar.clear();
      if (c_json) {
        // Notes go into the report, not before it: with -o - it shares stderr with them.
        auto j = r.to_json();
        add_backend_json(j, *be, c_be.device);
        j["archive"] = output_place(c_out, "");  // (the key every command has)
        print_json_report(j, c_in, c_out, stdout_carries_data());
      } else if (!c_quiet) {
        for (const auto& n : r.notes) log->info("{}", n);
        if (!r.trials.empty()) log->info("chose chop {} for the target", r.codec.chop);
        log->info("{} -> {}: {} {} {}, block {} chop {} {}",
                  r.source.empty() ? input_place(c_in) : r.source,
                  c_out == "-" ? "<stdout>" : c_out, shape_text(r.geom.shape()),
                  to_string(r.type), to_string(r.geom.lay), r.codec.block, r.codec.chop,
                  to_string(r.codec.coeff));
        log->info("  {}{} -> {}: ratio {:.2f}x ({:.3f} bits/value)", human_bytes(r.input_bytes),
                  r.labels_source.empty() ? std::string()
                                          : " (labels " + human_bytes(r.labels_bytes) + ")",
                  human_bytes(r.archive_bytes), r.ratio(), r.bits_per_value());
        if (r.q) log->info("  {}", quality_line(*r.q));
        if (r.nonfinite_replaced) {
          log->info("  {}", replaced_text(*r.nonfinite_replaced, *o.nonfinite_replacement));
        }
        for (const auto& w : r.warnings) log->warn("  note: {}", w);
        log->info("  {:.3f} s, {:.3g} GB/s of input ({} chunk{} of up to {} sample{}, backend {})",
                  r.seconds, formats::gb_per_s(r.data_bytes(), r.seconds),
                  r.chunks, r.chunks == 1 ? "" : "s", r.samples_per_chunk,
                  r.samples_per_chunk == 1 ? "" : "s", be->name());
        if (!r.reader.empty()) log->info("  read: {}", r.reader);
      }
    } else if (*dec) {
      refuse_tty_stdin(d_in);
      refuse_output_into_stdin({d_in}, {d_out, d_labels_out});
      refuse_tty_stdout(d_out);
      note_stream_output(d_out);
      note_stream_output(d_labels_out);
      refuse_tty_stdout(d_labels_out);
      formats::decompress_options o;
      if (dec->count("--samples") > 0) parse_range(d_samples, o.first, o.end);  // ("" refused)
      o.labels_out = d_labels_out;
      o.overwrite = d_force;
      o.threads = d_be.threads;
      app::progress_bar bar("decompressing", !d_quiet);
      o.progress = progress_to(bar);
      auto be =
          open_backend(d_be, d_quiet || (d_json && stdout_carries_data()), *log);
      const auto spec = formats::parse_dataset_spec(d_out, d_dataset, d_raw);
      refuse_raw_dataset_name(d_out, d_raw);
      auto r = with_backend(*be, [&] { return formats::decompress(d_in, spec, *be, o); });
      bar.clear();
      // An NPY file under another name (out.raw without --raw, say) is worth a word; so are
      // labels under such a name, which are NPY whatever --raw says of the data.
      auto npy_elsewhere = [](const std::string& path, formats::file_kind kind) {
        return kind == formats::file_kind::npy && path != "-" && !path.empty() &&
               !formats::name_ends_with(path, ".npy") &&
               !formats::reads_as_stream(path) &&          // (/dev/null: no name to read)
               formats::descriptor_named(path) < 0;        // (/dev/fd/3: nor there)
      };
      std::vector<std::string> notes, hints;
      if (npy_elsewhere(d_out, spec.kind)) {
        notes.push_back(fmt::format("{} holds NPY data, whatever its name says", d_out));
        hints.push_back("--raw writes raw binary; FILE.h5 HDF5");
      }
      // ... and HDF5 under another name, which --dataset makes (out.bin --dataset x).
      if (spec.kind == formats::file_kind::hdf5 && d_out != "-" &&
          !formats::format_named(spec.path)) {
        notes.push_back(fmt::format("{} holds HDF5 data (--dataset names an HDF5 dataset), "
                                    "whatever its name says", spec.path));
        hints.push_back("FILE.npz:NAME writes an array of a .npz");
      }
      // ... and raw bytes under the name of a format that has a header (--raw given by habit).
      if (spec.kind == formats::file_kind::raw && d_out != "-" && !formats::reads_as_stream(d_out) &&
          formats::format_named(d_out)) {
        notes.push_back(fmt::format("{} holds raw binary data (--raw), whatever its name says",
                                    d_out));
        hints.push_back("without --raw, a .npy, .npz or .h5 name gets that format");
      }
      if (!d_labels_out.empty() &&  // (decompress refuses an archive without labels)
          npy_elsewhere(d_labels_out, formats::parse_dataset_spec(d_labels_out).kind)) {
        notes.push_back(fmt::format("{} holds the labels as NPY data, whatever its name says",
                                    d_labels_out));
        hints.push_back("labels are written as FILE.npy, FILE.h5 or FILE.npz");
      }
      if (d_json) {
        auto j = r.to_json();
        for (const auto& n : notes) j["notes"].push_back(n);
        // output_bytes counts the decoded values; the file written is larger by its format's
        // headers (and holds the labels too, in .h5 and .npz).
        // (The file's size where it is one: the HDF5 library's file too; else, to a pipe,
        // the bytes the writer gave it.)
        std::error_code ec;
        if (spec.path != "-" && std::filesystem::is_regular_file(spec.path, ec)) {
          const auto size = std::filesystem::file_size(spec.path, ec);
          if (!ec) j["file_bytes"] = size;
        }
        j["archive"] = input_place(d_in);
        print_json_report(j, d_in, d_out, stdout_carries_data());
      } else if (!d_quiet) {
        for (std::size_t i = 0; i < notes.size(); ++i) log->warn("note: {} ({})", notes[i], hints[i]);
        for (const auto& n : r.notes) log->warn("note: {}", n);
        log->info("{} -> {}: {} {}, {} in {:.3f} s ({:.3g} GB/s)", input_place(d_in),
                  output_place(r.dataset.empty() ? d_out : spec.path, r.dataset),
                  shape_text(r.geom.shape()),
                  to_string(r.type), human_bytes(r.output_bytes), r.seconds,
                  formats::gb_per_s(r.output_bytes, r.seconds));
        if (!r.labels_output.empty()) {
          log->info("  labels {} -> {}", shape_text(r.labels_shape),
                    output_place(r.labels_output, r.labels_dataset));
        }
      }
    } else if (*inf) {
      refuse_tty_stdins(i_in);
      // Several archives (the shards of a dataset): one failing does not hide the others'
      // reports. JSON: the report of one archive, an array of them for several.
      auto& docs = archive_docs;
      int printed = 0;
      archives_looped = &i_in;
      const int rc = for_each_archive(i_in, *log, [&](const std::string& in) {
        auto j = formats::archive_info(in);
        if (i_json) {
          docs.push_back(std::move(j));
        } else {
          if (printed++ > 0) std::cout << "\n";
          print_info_text(j);
        }
      }, [&](const std::string& name, const std::string& what, int code) {
        if (i_json) docs.push_back(failure_json(name, what, code));
      });
      archives_looped = nullptr;
      print_json_documents(i_json, i_in.size(), docs);
      return rc;
    } else if (*evl) {
      refuse_tty_stdin(e_in);
      formats::eval_options o;
      o.nonfinite_replacement = parse_nonfinite(e_nonfinite);
      o.offset = parse_offset(e_offset);
      // A setting given twice is tried once: the table has one row per setting.
      auto add_once = [](auto& list, auto v) {
        if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
      };
      o.blocks.clear();
      if (e_blocks.empty()) throw error(errc::invalid_argument, "--block: name a block size");
      for (const auto& s : split_list(e_blocks, "--block")) {
        const auto b = parse_block_size(s);
        if (!b) {
          throw error(errc::invalid_argument,
                      "--block " + e_blocks + ": block sizes are 4, 8, 16 and 32");
        }
        add_once(o.blocks, *b);
      }
      const int largest = *std::max_element(o.blocks.begin(), o.blocks.end());
      o.chops.clear();
      for (const auto& s : split_list(e_chops, "--chop")) {
        const auto count = parse_count(s);
        if (!count || *count > 999) {
          throw error(errc::invalid_argument, "--chop " + e_chops + ": expected numbers like 1,2,4");
        }
        const int k = static_cast<int>(*count);
        if (k > largest && e_chop_opt->count() == 0) continue;  // default list, small block
        if (k < 1 || k > largest) {
          throw error(errc::invalid_argument,
                      fmt::format("--chop {} is outside 1..{}{}", k, largest,
                                  o.blocks.size() > 1 ? " (the largest block size)" : ""));
        }
        add_once(o.chops, k);  // (each block size tries the chops that fit it)
      }
      for (const auto& s : split_list(e_coeffs, "--coeff")) {
        auto ct = parse_coeff_type(s);
        if (!ct) throw error(errc::invalid_argument, "--coeff: " + coeff_name_problem(s));
        add_once(o.coeffs, *ct);
      }
      o.lay = parse_layout(e_layout).value_or(layout::automatic);
      o.chunk_mb = e_chunk_mb;
      o.tool_version = DCTCHOP_VERSION_STRING;
      o.ssim = !e_no_ssim;
      o.threads = e_be.threads;
      if (e_min_time < 0 || e_min_time > 3600) {
        throw error(errc::invalid_argument,
                    fmt::format("--min-time {}: expected 0 to 3600 seconds", e_min_time));
      }
      o.min_seconds = e_min_time;
      app::progress_bar bar("evaluating", !e_quiet);
      o.progress = progress_to(bar);
      auto be = open_backend(e_be, e_quiet, *log);
      be->wait_started();  // eval times each setting: on the backend asked for, not the stopgap
      auto r = formats::eval(input_spec(e_in, e_io), *be, o);
      bar.clear();
      if (!e_quiet && !e_json) {
        for (const auto& n : r.notes) log->info("{}", n);
      }
      // Every setting refused the data (a coefficient type too small for it): a script reading
      // the table must not take it for figures.
      std::optional<std::string> failed;
      if (!r.rows.empty() && std::all_of(r.rows.begin(), r.rows.end(),
                                         [](const auto& row) { return !row.error.empty(); })) {
        // (Or data too small for its figures to be measured, whatever the setting.)
        const std::string& why = r.rows.front().error;
        failed = fmt::format("{}: {} ({})", input_place(e_in),
                             why.find("be measured") != std::string::npos
                                 ? "the figures of no setting tried can be measured"
                                 : "no setting tried can hold the data",
                             why);
      }
      nlohmann::json context = {{"min_time", o.min_seconds}};
      add_backend_json(context, *be, e_be.device);
      print_eval(r, e_json, e_csv, failed, context);
      if (failed) {
        log->error("error: {}", *failed);
        return exit_bad_input;
      }
      if (!e_quiet && !e_json) {
        for (const auto& w : r.warnings) log->warn("note: {}", w);
      }
      if (r.nonfinite_replaced && !e_quiet && !e_json) {
        log->info("{} in every setting",
                  replaced_text(*r.nonfinite_replaced, *o.nonfinite_replacement));
      }
    } else if (*ver) {
      if (names_stdin(v_against) && std::any_of(v_ins.begin(), v_ins.end(), names_stdin)) {
        throw error(errc::invalid_argument, "the archive and the input cannot both be stdin");
      }
      if (names_stdin(v_labels) &&
          (names_stdin(v_against) || std::any_of(v_ins.begin(), v_ins.end(), names_stdin))) {
        throw error(errc::invalid_argument,
                    fmt::format("the {} and --labels cannot both be stdin",
                                names_stdin(v_against) ? "input" : "archive"));
      }
      refuse_tty_stdins(v_ins);
      refuse_tty_stdin(v_against);
      refuse_tty_stdin(v_labels);
      if (v_ins.size() > 1 && !v_against.empty()) {
        throw error(errc::invalid_argument,
                    fmt::format("verify --against takes one archive, not {}", v_ins.size()));
      }
      const std::string& v_in = v_ins.front();
      if (v_against.empty()) {
        if (v_min_psnr || v_min_ssim || v_max_error) {
          throw error(errc::invalid_argument, "quality gates need --against ORIGINAL");
        }
        if (!v_labels.empty()) {
          throw error(errc::invalid_argument,
                      "--labels gives the original's labels: it needs --against ORIGINAL");
        }
        for (const char* name : {"--dataset", "--raw", "--dtype", "--shape"}) {  // the original's
          if (ver->count(name) > 0) {
            throw error(errc::invalid_argument,
                        fmt::format("{} describes the original: it needs --against ORIGINAL", name));
          }
        }
        // No codec runs here, but a backend asked for by name must exist (never a silent
        // fallback): `verify x.dcz --backend cuda` on a machine without a GPU is exit 7.
        if (ver->count("--backend") > 0 || ver->count("--device") > 0)
          open_backend(v_be, v_quiet, *log)->wait_started();
        auto report = [&](const nlohmann::json& j) {
          if (v_quiet || v_json) return;
          const auto chunks = j["chunks"].get<std::uint64_t>();
          const auto sides = j["side_arrays"].size();
          log->info("{}: {} chunk{} and {} side array{}, every checksum ok",
                    j["file"].get<std::string>(), chunks, chunks == 1 ? "" : "s", sides,
                    sides == 1 ? "" : "s");
        };
        auto& docs = archive_docs;
        archives_looped = &v_ins;
        const int rc = for_each_archive(v_ins, *log, [&](const std::string& in) {
          auto j = formats::check_archive(in, [](std::uint64_t, std::uint64_t) { check_signal(); });
          report(j);
          if (v_json) docs.push_back(std::move(j));
        }, [&](const std::string& name, const std::string& what, int code) {
          if (!v_json) return;
          docs.push_back(failure_json(name, what, code));
          docs.back()["passed"] = false;
        });
        archives_looped = nullptr;
        print_json_documents(v_json, v_ins.size(), docs);
        return rc;
      }
      formats::verify_options o;
      o.min_psnr = v_min_psnr;
      o.min_ssim = v_min_ssim;
      o.max_error = v_max_error;
      o.labels_path = v_labels;
      o.threads = v_be.threads;
      app::progress_bar bar("verifying", !v_quiet);
      o.progress = progress_to(bar);
      auto be = open_backend(v_be, v_quiet, *log);
      auto r = with_backend(
          *be, [&] { return formats::verify_archive(v_in, input_spec(v_against, v_io), *be, o); });
      be->wait_started();
      bar.clear();
      if (!v_quiet && !v_json) {
        for (const auto& n : r.notes) log->info("{}", n);
      }
      const std::string name = input_place(v_in);  // as verify without --against has it
      const int rc = !r.mismatch.empty() ? exit_mismatch : !r.passed() ? exit_quality : 0;
      if (v_json) {
        // A failed verify is a failed command: its report carries the error and exit code
        // that every other failure's JSON carries.
        nlohmann::json j = r.to_json();
        j["file"] = name;
        j["archive"] = name;
        j["against"] = input_place(v_against);  // (the original, by its name)
        if (rc != 0) {
          std::string why = "mismatch: " + r.mismatch;
          if (rc == exit_quality) {
            why = name + ": gate failed: ";
            for (std::size_t i = 0; i < r.failures.size(); ++i) why += (i ? "; " : "") + r.failures[i];
          }
          j["error"] = why;
          j["exit_code"] = rc;
        }
        std::cout << formats::json_text(j, 2) << "\n";
      }
      // (The labels differ: the data was measured, and its figures and gates are said too.)
      if (r.q) {
        if (!v_quiet && !v_json) log->info("{}: checksums ok; {}", name, quality_line(*r.q));
        if (r.labels && r.labels->rows_differing == 0u && !v_quiet && !v_json) {
          log->info("labels equal {}'s ({} rows)", r.labels->source, *r.labels->rows);
        }
        for (const auto& f : r.failures) log->error("{}: gate failed: {}", name, f);
        if (r.passed() && !v_quiet && !v_json && (v_min_psnr || v_min_ssim || v_max_error)) {
          log->info("every gate holds");
        }
        if (!v_quiet && !v_json) {
          for (const auto& w : r.warnings) log->warn("note: {}", w);
        }
      }
      if (!r.mismatch.empty()) log->error("mismatch: {}", r.mismatch);
      if (rc != 0) return rc;
    }
  } catch (const interrupted&) {
    return stopped_by_signal();
  } catch (const error& e) {
    // A failure after a signal came is the signal's doing, or beside the point: Ctrl-C on
    // `dctchop ... -o - | dctchop ...` stops the reader first, and the writer's next write
    // fails (EPIPE) before it looks for its own signal.
    if (e.code() == errc::interrupted || g_signal.load() != 0) return stopped_by_signal();
    log->error("error: {}", e.what());
    json_failure(e.what(), exit_for(e.code()));
    return exit_for(e.code());
  } catch (const std::bad_alloc&) {
    // Memory the system will not give (ulimit -v, overcommit off): a resource, as a thread
    // it will not start is (exit 5), not a bug.
    log->error("error: out of memory");
    json_failure("out of memory", exit_io);
    return exit_io;
  } catch (const std::exception& e) {
    log->error("internal error: {}", e.what());
    json_failure(std::string("internal error: ") + e.what(), exit_internal);
    return exit_internal;
  }
  return exit_ok;
}

int main(int argc, char** argv) {
  note_inherited_descriptors();  // (before open_standard_descriptors fills the closed ones)
  const bool stdout_closed = open_standard_descriptors();
  g_stdout_closed = stdout_closed;
  keep_stdout_for_dctchop();
  stdout_fd_buf to_fd(std::cout.rdbuf());
  std::cout.rdbuf(&to_fd);
  const int rc = run(argc, argv);
  // Reports reach stdout through a buffer: a write that failed (a full disk, a closed pipe) is
  // seen here at the latest, and a script must not take a lost report for a success.
  errno = 0;
  std::cout.flush();
  const bool lost = !std::cout;
  std::cout.rdbuf(to_fd.target());  // (which clears the state: read first)
  if (lost) {
    const int e = g_stdout_errno != 0 ? g_stdout_errno : errno;
    // Help read in part (`| head`), as other commands' help is: quietly (exit 5 before
    // 2026-12-07). A report cut short still fails: a script must not take it for whole.
    if (g_stdout_is_help && e == EPIPE) return rc;
    if (g_signal.load() != 0 || e == EINTR) {
      // The signal cut the report short (or stopped it): the signal's failure, in one line
      // (the command's own, where it saw the signal first; "Interrupted system call", exit
      // 5, before 2026-12-07).
      if (rc != exit_interrupted) {
        std::fprintf(stderr, "dctchop: interrupted; the report on standard output is "
                             "incomplete\n");
      }
      return exit_interrupted;
    }
    std::fprintf(stderr, "dctchop: error: cannot write to standard output: %s\n",
                 stdout_closed ? "it is closed" : e != 0 ? std::strerror(e) : "write failed");
    return rc == exit_ok ? exit_io : rc;
  }
  return rc;
}
