/** @file json_number.hpp
 *  JSON that came from a file or a user (archive headers and footers, loader states): its
 *  integers, and its parse. nlohmann's own get<T>() casts a floating-point member to T, which
 *  is undefined behaviour when it does not fit (found by the header fuzz target); the
 *  json_integer functions throw std::out_of_range for anything but an integer that T holds.
 */
#pragma once
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace dctchop::formats {

/** `v` as T: an integer JSON number that T holds, else std::out_of_range. */
template <typename T>
T json_integer(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T>);
  using lim = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const auto x = v.get<nlohmann::json::number_unsigned_t>();
    if (x <= static_cast<std::uint64_t>(lim::max())) return static_cast<T>(x);
  } else if (v.is_number_integer()) {
    const auto x = v.get<nlohmann::json::number_integer_t>();
    if (x >= static_cast<std::int64_t>(lim::min()) &&
        (x < 0 || static_cast<std::uint64_t>(x) <= static_cast<std::uint64_t>(lim::max()))) {
      return static_cast<T>(x);
    }
  }
  throw std::out_of_range("expected an integer in range, found " + v.dump());
}

/** `v` as an array of T, each as json_integer<T>. */
template <typename T>
std::vector<T> json_integers(const nlohmann::json& v) {
  if (!v.is_array()) throw std::out_of_range("expected an array of integers, found " + v.dump());
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& x : v) out.push_back(json_integer<T>(x));
  return out;
}

/** The deepest nesting of arrays and objects that parse_json_naming_once takes (ARCHIVE.md:
 *  the header and the index nest no deeper). nlohmann parses any depth, but copies, compares
 *  and prints a value recursively: 120,000 levels in an archive's provenance, a header of
 *  263 KB, overflowed the stack of `dctchop info`. */
inline constexpr std::size_t max_json_depth = 256;

/** nlohmann's message without its tag: "key 'x' not found", not
 *  "[json.exception.out_of_range.403] key 'x' not found". */
inline std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string_view w = e.what();
  const auto tag_end = w.find("] ");
  const bool tagged = !w.empty() && w.front() == '[' && tag_end != std::string_view::npos;
  return std::string(tagged ? w.substr(tag_end + 2) : w);
}

namespace detail {
/** SAX events of a parse that note the first member an object names twice, and stop at a
 *  nesting deeper than max_json_depth. (A parse with a callback does the same in one pass, but
 *  nlohmann 3.11's callback parser scans the whole enclosing array at the end of each object
 *  in it: a footer of 320k chunks took 18 s.) */
struct member_names_once : nlohmann::json_sax<nlohmann::json> {
  std::vector<std::set<std::string>> open;  // members of each object being read, outermost first
  std::string twice;
  std::size_t depth = 0;
  bool too_deep = false;
  bool enter() {
    too_deep = ++depth > max_json_depth;
    return !too_deep;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open.emplace_back();
    return enter();
  }
  bool key(string_t& name) override {  // (always within an object: start_object came first)
    if (!open.back().insert(name).second) {
      twice = name;
      return false;  // (stops the parse: one is enough)
    }
    return true;
  }
  bool end_object() override {
    open.pop_back();
    --depth;
    return true;
  }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override {
    --depth;
    return true;
  }
  std::string error;  ///< why the text is no JSON (nlohmann's words), when it is not
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = json_error_text(e);
    return false;
  }
};
}  // namespace detail

/** Parse `text` (a discarded value when it is not JSON), noting in `duplicate` the first
 *  member an object names twice ("" when none). The grammar allows that, and readers
 *  disagree on which one counts (nlohmann and Python's json take the last, others the
 *  first), so such a text has no one meaning: callers refuse it. A text that nests arrays
 *  and objects deeper than max_json_depth is a discarded value too, and `too_deep` (where
 *  given) says so, and `why` (where given) why a text is not JSON, in nlohmann's words. Two
 *  linear passes. `keep` is nlohmann's parser callback, which may take
 *  values as they are parsed and leave them out of the result. */
inline nlohmann::json parse_json_naming_once(std::string_view text, std::string& duplicate,
                                             nlohmann::json::parser_callback_t keep = nullptr,
                                             bool* too_deep = nullptr,
                                             std::string* why = nullptr) {
  duplicate.clear();
  if (too_deep) *too_deep = false;
  detail::member_names_once names;
  nlohmann::json::sax_parse(text.begin(), text.end(), &names);
  if (why) *why = names.error;
  if (names.too_deep) {
    if (too_deep) *too_deep = true;
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), std::move(keep), false);
  if (j.is_discarded()) return j;
  duplicate = std::move(names.twice);
  return j;
}

}  // namespace dctchop::formats
