#include "dataset_choice.hpp"

#include "dctchop/error.hpp"

namespace dctchop::formats::detail {
namespace {

/** A shape as Python writes it: (10, 28, 28), (10,). */
std::string python_shape(const std::vector<std::uint64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

std::string leaf(const std::string& p) {
  const auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

}  // namespace

std::string listing(const std::vector<candidate>& arrays) {
  // A file of hundreds (one dataset per frame): the first ones, and how many more, in a line
  // a terminal shows.
  constexpr std::size_t k_listed = 24;
  std::string out;
  for (std::size_t i = 0; i < arrays.size() && i < k_listed; ++i) {
    const auto& c = arrays[i];
    out += (out.empty() ? "" : ", ") + c.path + " " +
           (c.refused.empty() ? python_shape(c.shape) : "(unreadable: " + c.refused + ")") +
           (c.labels_type.empty() ? "" : " " + c.labels_type);
  }
  if (arrays.size() > k_listed) out += ", and " + std::to_string(arrays.size() - k_listed) + " more";
  return out;
}

/** Keras's pairs (mnist.npz: x_train, y_train, x_test, y_test): the labels of images named
 *  x_NAME are y_NAME (X_NAME's Y_NAME; the other case where there is none), beside them
 *  first, then anywhere in the file; "" where there is no such array. A pair of another row
 *  count (or not numeric), where it would have been taken, is an error naming it, not a
 *  reason to take another array (another split's labels). */
std::string keras_pair(const std::string& file, const std::vector<candidate>& all,
                       const dataset_spec& spec, const choice_words& words) {
  const std::string data = leaf(spec.not_this);
  if (spec.purpose != dataset_spec::role::labels || data.size() < 3 ||
      (data[0] != 'x' && data[0] != 'X') || data[1] != '_') {
    return {};
  }
  const std::string same = (data[0] == 'x' ? "y" : "Y") + data.substr(1);
  const std::string other = (data[0] == 'x' ? "Y" : "y") + data.substr(1);
  const auto group = [](const std::string& p) { return p.substr(0, p.rfind('/') + 1); };
  for (const bool beside : {true, false}) {
    for (const std::string& want : {same, other}) {
      std::vector<const candidate*> named;
      for (const auto& c : all) {
        if (leaf(c.path) == want && c.path != spec.not_this &&
            (group(c.path) == group(spec.not_this)) == beside) {
          named.push_back(&c);
        }
      }
      if (named.empty()) continue;
      if (named.size() > 1) return {};  // (the usual choice lists them)
      const candidate& c = *named.front();
      if (c.numeric && !c.shape.empty() && (!spec.rows || c.shape[0] == *spec.rows)) {
        return c.path;
      }
      throw error(errc::bad_input,
                  file + ": " + c.path + ", the labels that " + spec.not_this +
                      "'s name pairs it with, " +
                      (!c.numeric || c.shape.empty()
                           ? std::string("is not numeric")
                           : "has " + std::to_string(c.shape[0]) + " rows, not " +
                                 std::to_string(*spec.rows) + ", one a sample") +
                      "; name the labels (" + words.name_labels + ")");
    }
  }
  return {};
}

std::string choose_array(const std::string& file, const std::vector<candidate>& all,
                         const dataset_spec& spec, const choice_words& words, std::string& note) {
  const bool labels = spec.purpose == dataset_spec::role::labels;
  const std::string& not_this = spec.not_this;
  const std::string paired = keras_pair(file, all, spec, words);
  std::vector<candidate> fit;
  for (const auto& c : all) {
    if (c.numeric && (labels || c.labels_type.empty()) && c.shape.size() >= (labels ? 1u : 2u) &&
        c.path != not_this &&
        (!spec.rows || c.shape[0] == *spec.rows))
      fit.push_back(c);
  }
  if (fit.empty() && paired.empty()) {
    const std::string rows =
        spec.rows ? ", " + std::to_string(*spec.rows) + (*spec.rows == 1 ? " row" : " rows") : "";
    throw error(errc::bad_input,
                file + (labels ? ": holds no " + words.what + " for labels (numeric, 1 or more axes" +
                                     rows +
                                     (not_this.empty() ? std::string(")")
                                                       : ", other than " + not_this + ")")
                               : ": holds no image-like " + words.what + " (numeric but not bool or enum, 2 or more axes" +
                                     rows + ")") +
                    (all.empty() ? "; the file holds no " + words.what + " at all"
                                 : "; " + words.what + "s: " + listing(all)));
  }
  // One array with a conventional name; two such names (/train/images, /test/images) are
  // as ambiguous as none.
  const auto names = labels ? std::vector<const char*>{"labels", "label", "y", "targets"}
                            : std::vector<const char*>{"images", "data", "x"};
  auto by_name = [&](const std::vector<candidate>& among) {
    for (const char* want : names) {
      std::vector<std::string> named;
      for (const auto& c : among)
        if (leaf(c.path) == want) named.push_back(c.path);
      if (named.size() == 1) return named[0];
      if (named.size() > 1) break;
    }
    return std::string();
  };
  auto group = [](const std::string& p) {
    const auto slash = p.rfind('/');
    return slash == std::string::npos ? std::string() : p.substr(0, slash);
  };
  // Labels in the images' own file: a conventional name beside the images (/train/y for
  // /train/images) before one of another group (/test/labels); then the one dataset beside
  // them, whatever its name.
  std::vector<candidate> beside;
  if (labels && !not_this.empty()) {
    for (const auto& c : fit)
      if (group(c.path) == group(not_this)) beside.push_back(c);
  }
  std::vector<candidate> pool = fit;  // what an error lists: the ones that could be meant
  std::string chosen = paired;
  if (chosen.empty() && fit.size() == 1) {
    chosen = fit[0].path;
  } else if (chosen.empty()) {
    if (!beside.empty()) chosen = by_name(beside);
    if (chosen.empty()) chosen = by_name(fit);
    if (chosen.empty() && beside.size() == 1) chosen = beside[0].path;
    if (chosen.empty() && beside.size() > 1) pool = beside;
    // Labels are class numbers (one axis) or one-hot rows (two): the only such array, when
    // the others are images (x_train beside y_train).
    if (labels && chosen.empty()) {
      std::vector<std::string> flat;
      for (const auto& c : pool)
        if (c.shape.size() <= 2) flat.push_back(c.path);
      if (flat.size() == 1) chosen = flat[0];
    }
  }
  if (chosen.empty()) {
    throw error(errc::invalid_argument,
                file + ": name the " + (labels ? "labels " + words.what + " (" + words.name_labels
                                               : words.what + " (" + words.name_data) +
                    "); candidates: " + listing(pool));  // the ones that could be meant
  }
  // (After what `note` holds already: the file's own note, a SWMR reader's, say.)
  std::string used =
      "using " + std::string(labels ? "labels " : words.what + " ") + chosen + " of " + file;
  // Those that could not be read, named: the file holds more than what it offered (naming
  // one says why).
  std::string unread;
  for (const auto& c : all)
    if (!c.refused.empty()) unread += (unread.empty() ? "" : ", ") + c.path;
  if (!unread.empty()) used += " (not readable as " + words.what + "s here: " + unread + ")";
  note += (note.empty() ? "" : "; ") + used;
  return chosen;
}

}  // namespace dctchop::formats::detail
