#include "terminal_text.hpp"

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include <cstdio>

namespace dctchop::app {
namespace {

/** The length of the valid UTF-8 sequence at s[i] (2 to 4 bytes), or 0. */
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  unsigned cp = 0;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2, cp = c & 0x1fu;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3, cp = c & 0x0fu;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4, cp = c & 0x07u;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3fu);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return n;
}

class escaping_stderr_sink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string line =
        "dctchop: " + printable(std::string_view(msg.payload.data(), msg.payload.size())) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char esc[8];
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (const std::size_t n = c >= 0x80 ? utf8_length(s, i) : 0; n > 0) {
      const auto c2 = static_cast<unsigned char>(s[i + 1]);
      // U+202A..U+202E and U+2066..U+2069 reorder the text shown after them (a name that
      // reads otherwise than it is): the bidirectional embeddings, overrides and isolates.
      const auto c3 = n == 3 ? static_cast<unsigned char>(s[i + 2]) : 0u;
      const bool bidi = n == 3 && c == 0xe2 && ((c2 == 0x80 && c3 >= 0xaa && c3 <= 0xae) ||
                                                (c2 == 0x81 && c3 >= 0xa6 && c3 <= 0xa9));
      if (n == 2 && c == 0xc2 && c2 < 0xa0) {  // U+0080..U+009F: C1 controls (0x9b is CSI)
        std::snprintf(esc, sizeof esc, "\\u%04x", 0x80u + (c2 & 0x1fu));
        out += esc;
      } else if (bidi) {
        std::snprintf(esc, sizeof esc, "\\u%04x", ((c & 0x0fu) << 12) | ((c2 & 0x3fu) << 6) | (c3 & 0x3fu));
        out += esc;
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
    } else {  // C0 controls, DEL, and bytes that are not UTF-8
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
      ++i;
    }
  }
  return out;
}

std::shared_ptr<spdlog::logger> make_stderr_logger() {
  return std::make_shared<spdlog::logger>("dctchop", std::make_shared<escaping_stderr_sink>());
}

}  // namespace dctchop::app
