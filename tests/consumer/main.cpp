// Compresses an .npy file, decodes it again and reads one epoch of it through the training
// loader, with the installed library's public headers alone; exits 0 when every value came
// back within the error compress reported, and every sample once through the loader.
// Usage: consumer IN.npy WORKDIR (a u8 .npy)
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/npy.hpp"
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
    // The decoded values against the input: the error compress measured, value for value.
    auto read_u8 = [](const std::string& path) {
      auto f = dctchop::formats::npy_reader::open(path);
      std::vector<unsigned char> v(f.header().count());
      f.read_rows(0, f.rows(), v.data());
      return v;
    };
    const auto a = read_u8(argv[1]), b = read_u8(dir + "/consumer.npy");
    double sse = 0, worst = 0;
    for (std::size_t i = 0; i < a.size() && a.size() == b.size(); ++i) {
      const double e = double(a[i]) - double(b[i]);
      sse += e * e;
      worst = std::fmax(worst, std::fabs(e));
    }
    const bool values = a.size() == b.size() && !a.empty() && r.q &&
                        worst == r.q->max_abs_error &&
                        std::fabs(sse / double(a.size()) - r.q->mse) <= 1e-9 * r.q->mse;
    std::printf("values: max error %g (reported %g)\n", worst, r.q ? r.q->max_abs_error : -1.0);
    return back.output_bytes == r.data_bytes() && r.ratio() > 1 && values &&
                   seen == loader.samples()
               ? 0
               : 1;
  } catch (const dctchop::error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
