// A one-line progress bar on stderr, shown only on a terminal and only after a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dctchop::app {

class progress_bar {
 public:
  progress_bar(std::string label, bool enabled);
  ~progress_bar();
  /** Report `done` of `total` units; redraws at most ten times a second. */
  void update(std::uint64_t done, std::uint64_t total);
  /** Erase the bar (if drawn). */
  void clear();

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace dctchop::app
