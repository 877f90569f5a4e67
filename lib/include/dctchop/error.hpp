/** @file error.hpp
 *  The one error type of dctchop. Library code throws it; only apps/ catches it and maps the
 *  code to an exit status (see README, "Exit codes").
 */
#pragma once

#include <stdexcept>
#include <string>

namespace dctchop {

/** What went wrong, coarse enough for a caller to choose a reaction (and an exit code). */
enum class errc {
  invalid_argument = 1,  ///< a parameter out of range or a bad combination of options; also a
                         ///< call the API does not allow (a buffer too small for what it must
                         ///< hold, rows out of order, a writer finished short)
  bad_input,             ///< input data or file not in a format or dtype we accept
  corrupt,               ///< a checksum mismatch or a truncated / inconsistent archive
  unsupported_version,   ///< an archive written by a newer major version, or naming a
                         ///< transform, dtype, coefficient type or chunk stage this version
                         ///< does not know
  out_of_range,          ///< a value the chosen coefficient type cannot hold
  io,                    ///< the operating system refused a read, write, open or rename
  output_exists,         ///< an output file exists and overwriting was not allowed
  backend_unavailable,   ///< a backend that was not built, or has no device
  quality_not_met,       ///< a quality target that no setting reaches
  interrupted,           ///< a read or write was interrupted by a signal (EINTR)
  internal,              ///< a broken invariant: a bug
};

/** Name of an error code, for messages and JSON. */
const char* to_string(errc code) noexcept;

/** Exception carrying an errc; what() is one line that names the file and the problem. */
class error : public std::runtime_error {
 public:
  error(errc code, const std::string& message)
      : std::runtime_error(message), code_(code), detail_(message) {}
  /** An error about one sample of a batch: what() reads "sample <sample>: <detail>". */
  error(errc code, const std::string& detail, long long sample)
      : std::runtime_error("sample " + std::to_string(sample) + ": " + detail),
        code_(code), detail_(detail), sample_(sample) {}
  /** An error that the operating system reported with errno value `os_errno`. */
  static error from_os(errc code, const std::string& message, int os_errno) {
    error e(code, message);
    e.os_errno_ = os_errno;
    return e;
  }
  errc code() const noexcept { return code_; }
  /** The errno value behind this error when the operating system reported it, else 0. */
  int os_errno() const noexcept { return os_errno_; }
  /** The message without the sample prefix. */
  const std::string& detail() const noexcept { return detail_; }
  /** Index of the offending sample within the batch given to the call, or -1. */
  long long sample() const noexcept { return sample_; }

 private:
  errc code_;
  std::string detail_;
  long long sample_ = -1;
  int os_errno_ = 0;
};

}  // namespace dctchop
