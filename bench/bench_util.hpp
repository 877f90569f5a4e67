// Shared by the benchmarks that read archives (bench_loader.cpp, bench_cuda.cpp): a scratch
// folder of the run's own, and an archive compressed from an array in memory, as
// dctchop.compress does from NumPy.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/formats/npy.hpp"
#include "dctchop/formats/pipeline.hpp"

namespace dctchop::bench {

/** A folder of the run's own, `name`-PID, removed when the run ends: under /dev/shm where
 *  `memory_room` bytes are asked for and it has them free (the figures are then the reader's,
 *  not a disk's; a container's /dev/shm may hold 64 MiB), else in the system's temporary
 *  folder. */
struct scratch_dir {
  std::filesystem::path path;
  explicit scratch_dir(const std::string& name, std::uint64_t memory_room = 0) {
    std::error_code ec;
    const std::filesystem::path shm = "/dev/shm";
    const bool in_memory = memory_room > 0 && std::filesystem::is_directory(shm, ec) &&
                           ::access(shm.c_str(), W_OK) == 0 &&
                           std::filesystem::space(shm, ec).available > memory_room && !ec;
    path = (in_memory ? shm : std::filesystem::temp_directory_path()) /
           (name + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

/** The archive `path` of the u8 samples at `data`, of `shape` (samples first), at `chop`
 *  (block 8, f16 coefficients), without quality figures; an existing file is replaced. */
inline void compress_u8(const std::string& path, std::vector<std::uint64_t> shape, const void* data,
                        int chop, backend& be) {
  formats::dataset_spec in;
  // (built up by append: GCC 12 warns, wrongly, of "<" + string with -Wrestrict)
  in.path = std::string("<").append(std::filesystem::path(path).stem().string()).append(">");
  in.memory =
      formats::dataset_spec::memory_array{formats::npy_dtype_of(dtype::u8), std::move(shape), data};
  formats::compress_options o;
  o.chop = chop;
  o.measure_quality = false;
  o.overwrite = true;
  formats::compress(in, path, be, o);
}

}  // namespace dctchop::bench
