// An HDF5 filter plugin for tests only: filter 256 (HDF5 sets 256-511 aside for testing) fails
// every chunk after printing to stdout, with printf and puts, as some third-party plugins do
// (Debian's lz4 plugin did). dctchop must keep such lines off its own stdout.
#include <H5PLextern.h>

#include <cstdio>

namespace {

std::size_t noisy_filter(unsigned, std::size_t, const unsigned[], std::size_t nbytes, std::size_t*,
                         void**) {
  std::printf("noisy filter: cannot decode %zu bytes\n", nbytes);
  std::puts("noisy filter: giving up");
  return 0;
}

const H5Z_class2_t k_noisy = {H5Z_CLASS_T_VERS, 256, 1, 1, "noisy test filter", nullptr, nullptr,
                              noisy_filter};

}  // namespace

extern "C" {
H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }
const void* H5PLget_plugin_info(void) { return &k_noisy; }
}
