// Compresses an .npy file, decodes it again and reads one epoch of it through the training
// loader, with the installed library's public headers alone; exits 0 when every value and
// every sample came back. Usage: consumer IN.npy WORKDIR
#include <cstdio>
#include <string>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/loader.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer IN.npy WORKDIR\n");
    return 2;
  }
  try {
    const std::string dir = argv[2];
    auto be = dctchop::make_backend(dctchop::backend_kind::cpu);
    dctchop::formats::compress_options c;
    c.overwrite = true;
    const auto r = dctchop::formats::compress_npy(argv[1], dir + "/consumer.dcz", *be, c);
    dctchop::formats::decompress_options d;
    d.overwrite = true;
    const auto back = dctchop::formats::decompress_to_npy(dir + "/consumer.dcz",
                                                          dir + "/consumer.npy", *be, d);
    std::printf("%llu bytes in, archive ratio %.2f, %llu bytes back\n",
                static_cast<unsigned long long>(r.input_bytes), r.ratio(),
                static_cast<unsigned long long>(back.output_bytes));
    dctchop::loaders::loader_options o;
    o.batch_size = 1;
    dctchop::loaders::archive_loader loader(dir + "/consumer.dcz", o);
    std::uint64_t seen = 0;
    for (std::uint64_t b = 0; b < loader.batches_per_epoch(); ++b) seen += loader.next().samples.size();
    std::printf("one epoch of the loader: %llu of %llu samples\n",
                static_cast<unsigned long long>(seen),
                static_cast<unsigned long long>(loader.samples()));
    return back.output_bytes == r.input_bytes && r.ratio() > 1 && seen == loader.samples() ? 0 : 1;
  } catch (const dctchop::error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
