// Replay driver: runs a fuzz target's LLVMFuzzerTestOneInput on every file of the folders (or
// files) named on the command line, without libFuzzer. ctest runs it on the committed corpus
// in every build, the sanitizer builds included; a crash or an escaped exception fails it.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
    std::exit(2);
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> entries;
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file()) entries.push_back(e.path());
      }
      std::sort(entries.begin(), entries.end());
      for (const auto& p : entries) {
        run_file(p);
        ++files;
      }
    } else {
      run_file(arg);
      ++files;
    }
  }
  if (files == 0) {
    std::fprintf(stderr, "replay: no inputs (an empty corpus proves nothing)\n");
    return 2;
  }
  std::printf("replay: %zu inputs, no crash\n", files);
  return 0;
}
