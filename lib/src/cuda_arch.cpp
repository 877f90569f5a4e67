#include "cuda_arch.hpp"

#include <cctype>
#include <string>
#include <vector>

namespace dctchop::detail {
namespace {

/** The items of a CMake list written with ',' or ';' between them. */
std::vector<std::string_view> list_items(std::string_view list) {
  std::vector<std::string_view> items;
  while (!list.empty()) {
    const auto end = list.find_first_of(",;");
    if (end != 0) items.push_back(list.substr(0, end));
    if (end == std::string_view::npos) break;
    list.remove_prefix(end + 1);
  }
  return items;
}

/** The number an architecture item starts with ("90" of "90-real"); "" for "native", "all"
 *  and the like. */
std::string_view arch_number(std::string_view item) {
  std::size_t n = 0;
  while (n < item.size() && std::isdigit(static_cast<unsigned char>(item[n]))) ++n;
  return item.substr(0, n);
}

}  // namespace

std::string unrunnable_device_text(int device, std::string_view name, int major, int minor,
                                   std::string_view built_for, std::string_view cuda_error) {
  std::string t = "CUDA device " + std::to_string(device);
  const std::string arch = major > 0 ? std::to_string(major) + std::to_string(minor) : "";
  if (!name.empty() || !arch.empty()) {
    t += " (";
    t += name;
    if (!arch.empty()) {
      t += name.empty() ? "" : ", ";
      t += "compute capability " + std::to_string(major) + "." + std::to_string(minor);
    }
    t += ")";
  }
  t += " cannot run this dctchop's CUDA kernels, built for the CUDA architectures ";
  t += built_for.empty() ? std::string_view("(not known)") : built_for;
  if (!cuda_error.empty()) {
    t += " (";
    t += cuda_error;
    t += ")";
  }
  if (arch.empty())
    return t + ": build dctchop with -DCMAKE_CUDA_ARCHITECTURES=native on this machine";
  // A list of numbers gets the device's added; "native", "all" and the like are replaced.
  const auto items = list_items(built_for);
  bool numbers = !items.empty(), has_arch = false;
  std::string list;
  for (const auto item : items) {
    numbers = numbers && !arch_number(item).empty();
    has_arch = has_arch || arch_number(item) == arch;
    list += std::string(item) + ";";
  }
  const std::string setting = numbers ? "\"" + list + arch + "\"" : arch;
  const std::string build = "build dctchop for this GPU with -DCMAKE_CUDA_ARCHITECTURES=" + setting;
  // PTX that the driver cannot compile: made by a newer toolkit than the driver knows.
  if (cuda_error == "cudaErrorUnsupportedPtxVersion") {
    const std::string driver =
        ": the NVIDIA driver is older than the CUDA toolkit that built them: update the driver";
    return t + driver + (has_arch ? "" : ", or " + build);
  }
  if (has_arch) {
    return t + ": they were built for its architecture (" + arch +
           "), so the driver may be older than the CUDA toolkit that built them: update the "
           "NVIDIA driver";
  }
  return t + ": " + build;
}

}  // namespace dctchop::detail
