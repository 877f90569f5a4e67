#include "dctchop/cores.hpp"

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dctchop {

namespace {

// Files of a few kilobytes from /proc and /sys (which report no size: read to the end). A
// read error is no text (a part of a file might parse as another quota).
bool read_small(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[4096];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fd);
      return got == 0;
    }
    out.append(buf, static_cast<std::size_t>(got));
  }
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t from = 0;
  for (;;) {
    const std::size_t at = s.find(sep, from);
    parts.push_back(s.substr(from, at == std::string_view::npos ? at : at - from));
    if (at == std::string_view::npos) return parts;
    from = at + 1;
  }
}

std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view s, std::int64_t& v) {
  s = trim(s);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

bool has(std::string_view list, std::string_view item) {
  for (std::string_view x : split(list, ',')) {
    if (x == item) return true;
  }
  return false;
}

// mountinfo writes a space, tab, newline or backslash in a path as \ and three octal digits.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](std::size_t at, char top) { return s[at] >= '0' && s[at] <= top; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1, '3') && octal(i + 2, '7') &&
        octal(i + 3, '7')) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct cgroup_mount {
  std::string root;   // the folder of the hierarchy that is mounted
  std::string point;  // where
};

// The mount of the hierarchy (v1: the one with the cpu controller; v2: the unified one)
// whose mounted folder holds `path`, the process's cgroup in that hierarchy.
std::optional<cgroup_mount> find_mount(const std::string& mountinfo, bool v2,
                                       const std::string& path) {
  std::istringstream lines(mountinfo);
  std::string line;
  while (std::getline(lines, line)) {
    // id parent major:minor root mount-point options [optional fields] - type source super
    const std::vector<std::string_view> f = split(line, ' ');
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 7 || dash + 1 >= f.size()) continue;
    const std::string_view type = f[dash + 1];
    const std::string_view super = dash + 3 < f.size() ? f[dash + 3] : std::string_view{};
    if (v2 ? type != "cgroup2" : (type != "cgroup" || !has(super, "cpu"))) continue;
    cgroup_mount m{unescape(f[3]), unescape(f[4])};
    // A cgroup outside the mounted folder has no files here.
    const bool under = m.root == "/" || path == m.root ||
                       (path.size() > m.root.size() &&
                        path.compare(0, m.root.size(), m.root) == 0 && path[m.root.size()] == '/');
    if (under) return m;
  }
  return std::nullopt;
}

// The CPUs' worth of time that one cgroup's files grant, if they set a quota.
std::optional<double> quota_of(const std::string& dir, bool v2, std::string& file) {
  std::string text;
  std::int64_t quota = 0;
  std::int64_t period = 0;
  if (v2) {
    file = dir + "/cpu.max";  // "max 100000" or "250000 100000"
    if (!read_small(file, text)) return std::nullopt;
    const std::vector<std::string_view> f = split(trim(text), ' ');
    if (f.size() != 2 || !parse_int(f[0], quota) || !parse_int(f[1], period)) return std::nullopt;
  } else {
    file = dir + "/cpu.cfs_quota_us";  // -1 where none
    if (!read_small(file, text) || !parse_int(text, quota)) return std::nullopt;
    if (!read_small(dir + "/cpu.cfs_period_us", text) || !parse_int(text, period)) {
      return std::nullopt;
    }
  }
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<double>(quota) / static_cast<double>(period);
}

// The tightest quota on the process's cgroup path in one hierarchy, from its own cgroup up to
// the mounted folder (the cgroups above that are not visible here).
void tightest_quota(const std::string& root, const std::string& mountinfo, bool v2,
                    const std::string& path, core_limits& out) {
  // A cgroup outside the root of this process's cgroup namespace shows as "/../x"
  // (cgroup_namespaces(7)): not below any folder mounted in the namespace, and the folders that
  // the path names from the mount point are not its ancestors. No quota is read for it.
  const std::string p = path + "/";
  if (p.find("/../") != std::string::npos || p.find("/./") != std::string::npos) return;
  const std::optional<cgroup_mount> m = find_mount(mountinfo, v2, path);
  if (!m) return;
  std::string rel = m->root == "/" ? path : path.substr(m->root.size());
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  std::string point = m->point;
  while (point.size() > 1 && point.back() == '/') point.pop_back();
  for (;;) {
    std::string file;
    const std::string dir = (point == "/" ? "" : point) + rel;
    if (const std::optional<double> q = quota_of(root + (dir.empty() ? "/" : dir), v2, file)) {
      if (!out.quota || *q < *out.quota) {
        out.quota = q;
        out.quota_from = file.substr(root.size());
      }
    }
    if (rel.empty()) return;
    const std::size_t up = rel.rfind('/');
    rel.erase(up == std::string::npos ? 0 : up);
  }
}

unsigned affinity_count(unsigned online) {
#if defined(__linux__)
  // A mask of more CPUs than cpu_set_t holds (1024) where the machine has them.
  for (std::size_t cpus = std::max(1024U, online); cpus <= (1U << 20); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (!set) return online;
    const std::size_t size = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(size, set);
    const int got = ::sched_getaffinity(0, size, set);
    const int why = errno;  // (before free, which may set it)
    const int count = got == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (got == 0) return static_cast<unsigned>(std::max(count, 1));
    if (why != EINVAL) return online;
  }
#endif
  return online;
}

// OMP_NUM_THREADS's first number ("8", or "8,2" for nested teams), where it is one of 1 or more;
// anything else is no limit, as OpenMP runtimes ignore it.
std::optional<unsigned> first_count(const char* text) {
  if (!text) return std::nullopt;
  std::string_view s = trim(text);
  s = s.substr(0, s.find(','));
  std::int64_t n = 0;
  if (!parse_int(s, n) || n < 1) return std::nullopt;
  return static_cast<unsigned>(std::min<std::int64_t>(n, 1 << 20));
}

}  // namespace

core_limits usable_cores_under(const std::string& root, unsigned online, unsigned affinity,
                               const char* omp_num_threads) noexcept {
  core_limits out;
  out.online = std::max(online, 1U);
  out.affinity = std::max(affinity, 1U);
  out.usable = out.affinity;
  out.omp_num_threads = first_count(omp_num_threads);
  if (out.omp_num_threads) out.usable = std::min(out.usable, *out.omp_num_threads);
  try {
    std::string cgroups;
    std::string mountinfo;
    if (!read_small(root + "/proc/self/cgroup", cgroups) ||
        !read_small(root + "/proc/self/mountinfo", mountinfo)) {
      return out;
    }
    // Lines "hierarchy:controllers:path"; v2's is "0::path". Where the cpu controller is in a
    // v1 hierarchy (a hybrid system mounts v2 beside it, without that controller), its quota
    // is the one that holds.
    std::optional<std::string> v1_path;
    std::optional<std::string> v2_path;
    std::istringstream lines(cgroups);
    std::string line;
    while (std::getline(lines, line)) {
      const std::size_t a = line.find(':');
      const std::size_t b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      const std::string_view id = std::string_view(line).substr(0, a);
      const std::string_view controllers = std::string_view(line).substr(a + 1, b - a - 1);
      std::string path = line.substr(b + 1);
      if (path.empty() || path.front() != '/') continue;
      if (id == "0" && controllers.empty()) {
        v2_path = std::move(path);
      } else if (has(controllers, "cpu")) {
        v1_path = std::move(path);
      }
    }
    if (v1_path) {
      tightest_quota(root, mountinfo, false, *v1_path, out);
    } else if (v2_path) {
      tightest_quota(root, mountinfo, true, *v2_path, out);
    }
  } catch (...) {
    out.quota.reset();  // (out of memory: no quota rather than an error)
    out.quota_from.clear();
  }
  if (out.quota) {
    const double cap = std::ceil(std::min(*out.quota, static_cast<double>(out.usable)));
    out.usable = std::clamp(static_cast<unsigned>(cap), 1U, out.usable);
  }
  return out;
}

core_limits usable_cores() noexcept {
  const unsigned online = std::max(std::thread::hardware_concurrency(), 1U);
  return usable_cores_under("", online, affinity_count(online), std::getenv("OMP_NUM_THREADS"));
}

}  // namespace dctchop
