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

/** Parse `text` (a discarded value when it is not JSON), noting in `duplicate` the first
 *  member an object names twice ("" when none). The grammar allows that, and readers
 *  disagree on which one counts (nlohmann and Python's json take the last, others the
 *  first), so such a text has no one meaning: callers refuse it. */
inline nlohmann::json parse_json_naming_once(std::string_view text, std::string& duplicate) {
  duplicate.clear();
  std::vector<std::set<std::string>> members;  // of each object being read, outermost first
  bool twice = false;
  const nlohmann::json::parser_callback_t note =
      [&](int, nlohmann::json::parse_event_t e, nlohmann::json& parsed) {
        using ev = nlohmann::json::parse_event_t;
        if (e == ev::object_start) {
          members.emplace_back();
        } else if (e == ev::object_end) {
          if (!members.empty()) members.pop_back();
        } else if (e == ev::key && !members.empty() && !twice && parsed.is_string()) {
          const auto& name = parsed.get_ref<const std::string&>();
          if (!members.back().insert(name).second) {
            duplicate = name;
            twice = true;
          }
        }
        return true;
      };
  return nlohmann::json::parse(text, note, false);
}

}  // namespace dctchop::formats
