#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace dctchop::app {

progress_bar::progress_bar(std::string label, bool enabled)
    : label_(std::move(label)),
      enabled_(enabled && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

progress_bar::~progress_bar() { clear(); }

void progress_bar::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || total == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(1)) return;  // short jobs stay quiet
  if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done < total) return;
  last_ = now;
  const int width = 30;
  const double frac = static_cast<double>(done) / static_cast<double>(total);
  const int fill = static_cast<int>(frac * width);
  std::string bar(static_cast<std::size_t>(fill), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% (%llu/%llu samples)", label_.c_str(), bar.c_str(),
               frac * 100.0, static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total));
  std::fflush(stderr);
  drawn_ = true;
}

void progress_bar::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace dctchop::app
