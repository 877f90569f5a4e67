// HDF5 filters 32000 (LZF) and 32015 (Zstandard), and the check that every filter
// of an input dataset can be decoded. The stream formats are those of the reference plugins:
// h5py's lzf_filter.c (one raw LZF block per chunk; the chunk's size in bytes as the third
// client value since its revision 3, 0 before) and HDF Group's registered Zstandard filter (one
// zstd frame per chunk, written with ZSTD_compress, so its content size is in the frame).
#include "hdf5_filters.hpp"

#include <lzf.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "dctchop/error.hpp"

namespace dctchop::formats::detail {
namespace {

constexpr H5Z_filter_t k_lzf = 32000;
constexpr H5Z_filter_t k_zstd = 32015;

/** HDF5 limits a chunk to 2^32 - 1 bytes: no decoded chunk is larger. */
constexpr std::size_t k_max_chunk = std::size_t(UINT32_MAX);

/** Hands a filter's output to HDF5 in place of its input, as a filter must: allocated by HDF5's
 *  allocator, *buf_size the allocation's size. Returns the output's size. */
std::size_t replace(void** buf, std::size_t* buf_size, void* out, std::size_t allocated,
                    std::size_t used) {
  H5free_memory(*buf);
  *buf = out;
  *buf_size = allocated;
  return used;
}

std::size_t lzf_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[],
                       std::size_t nbytes, std::size_t* buf_size, void** buf) {
  if (nbytes > UINT_MAX) return 0;
  if ((flags & H5Z_FLAG_REVERSE) == 0) {
    // Encode into at most the input's size: data that LZF cannot shrink fails, and HDF5 stores
    // that chunk as it is (the filter is optional, as h5py's is).
    void* out = H5allocate_memory(nbytes, false);
    if (out == nullptr) return 0;
    const unsigned n = lzf_compress(*buf, static_cast<unsigned>(nbytes), out,
                                    static_cast<unsigned>(nbytes));
    if (n == 0) {
      H5free_memory(out);
      return 0;
    }
    return replace(buf, buf_size, out, nbytes, n);
  }
  // The exact size when the writer recorded it; otherwise a guess that grows.
  std::size_t size = cd_nelmts >= 3 && cd_values[2] != 0 ? cd_values[2] : std::max<std::size_t>(*buf_size, 4096);
  for (;;) {
    size = std::min(size, k_max_chunk);
    void* out = H5allocate_memory(size, false);
    if (out == nullptr) return 0;
    errno = 0;
    const unsigned n = lzf_decompress(*buf, static_cast<unsigned>(nbytes), out,
                                      static_cast<unsigned>(size));
    if (n != 0) return replace(buf, buf_size, out, size, n);
    const int why = errno;
    H5free_memory(out);
    if (why != E2BIG || size == k_max_chunk) return 0;  // EINVAL: not LZF data (damaged)
    size *= 2;
  }
}

/** A frame that does not record its size (not written by the reference filter), streamed
 *  into a buffer that grows. */
std::size_t zstd_decode_unsized(std::size_t nbytes, std::size_t* buf_size, void** buf) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) return 0;
  std::size_t size = std::max<std::size_t>(4 * nbytes, 1 << 16), used = 0;
  void* out = nullptr;
  ZSTD_inBuffer in{*buf, nbytes, 0};
  std::size_t result = 0;
  for (;;) {
    size = std::min(size, k_max_chunk);
    void* grown = H5resize_memory(out, size);
    if (grown == nullptr) break;
    out = grown;
    ZSTD_outBuffer o{out, size, used};
    result = ZSTD_decompressStream(dctx, &o, &in);
    used = o.pos;
    if (ZSTD_isError(result)) break;
    if (result == 0 && in.pos == in.size) {  // the frame is complete and every byte used
      ZSTD_freeDCtx(dctx);
      return replace(buf, buf_size, out, size, used);
    }
    if (o.pos == o.size) {  // the buffer is full: grow it
      if (size == k_max_chunk) break;
      size *= 2;
    } else if (in.pos == in.size) {
      break;  // truncated: the input ended inside a frame
    }
  }
  ZSTD_freeDCtx(dctx);
  H5free_memory(out);
  return 0;
}

std::size_t zstd_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[],
                        std::size_t nbytes, std::size_t* buf_size, void** buf) {
  if ((flags & H5Z_FLAG_REVERSE) == 0) {
    // One frame that records its size, at the level of the first client value (the
    // reference filter's convention), else zstd's default.
    const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : ZSTD_CLEVEL_DEFAULT;
    const std::size_t bound = ZSTD_compressBound(nbytes);
    void* out = H5allocate_memory(bound, false);
    if (out == nullptr) return 0;
    const std::size_t n = ZSTD_compress(out, bound, *buf, nbytes, level);
    if (ZSTD_isError(n)) {
      H5free_memory(out);
      return 0;
    }
    return replace(buf, buf_size, out, bound, n);
  }
  const unsigned long long n = ZSTD_getFrameContentSize(*buf, nbytes);
  if (n == ZSTD_CONTENTSIZE_ERROR || (n != ZSTD_CONTENTSIZE_UNKNOWN && n > k_max_chunk)) return 0;
  if (n == ZSTD_CONTENTSIZE_UNKNOWN) return zstd_decode_unsized(nbytes, buf_size, buf);
  const std::size_t size = std::max<std::size_t>(static_cast<std::size_t>(n), 1);
  void* out = H5allocate_memory(size, false);
  if (out == nullptr) return 0;
  const std::size_t got = ZSTD_decompress(out, size, *buf, nbytes);
  if (ZSTD_isError(got) || got != n) {
    H5free_memory(out);
    return 0;
  }
  return replace(buf, buf_size, out, size, got);
}

/** Whether this process can decode filter `id` (registered, or loadable as a plugin). */
bool decodable(H5Z_filter_t id) {
  unsigned info = 0;
  const bool ok = H5Zfilter_avail(id) > 0 && H5Zget_filter_info(id, &info) >= 0 &&
                  (info & H5Z_FILTER_CONFIG_DECODE_ENABLED) != 0;
  H5Eclear2(H5E_DEFAULT);  // a plugin that failed to load leaves its errors on the stack
  return ok;
}

/** Registers filter `id`, in place of any other of that id: whether a plugin of it would load
 *  depends on the machine (Debian's LZF plugin loads only in a process that already holds
 *  liblzf), and the stream format is the same. */
void register_filter(H5Z_filter_t id, const char* name, H5Z_func_t f) {
  const H5Z_class2_t c{H5Z_CLASS_T_VERS, id, 1, 1, name, nullptr, nullptr, f};
  H5Zregister(&c);
  H5Eclear2(H5E_DEFAULT);
}

struct known_filter {
  H5Z_filter_t id;
  const char* name;
  const char* package;  // Debian's package with its plugin; empty when Debian has none
};

// The registered third-party filters that ML and HPC datasets use most (HDF Group's list of
// registered filter plugins); a dataset with another filter is named by id.
constexpr known_filter k_known[] = {
    {307, "bzip2", "hdf5-filter-plugin"},
    {32001, "blosc", "hdf5-filter-plugin-blosc-serial"},
    {32004, "lz4", "hdf5-filter-plugin"},
    {32008, "bitshuffle", ""},
    {32013, "zfp", "hdf5-filter-plugin-zfp-serial"},
    {32017, "sz", ""},
    {32024, "sz3", ""},
    {32026, "blosc2", ""},
};

}  // namespace

void register_builtin_filters() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_filter(k_lzf, "lzf (dctchop)", lzf_filter);
    register_filter(k_zstd, "zstd (dctchop)", zstd_filter);
  });
}

void check_filters_available(hid_t dcpl, const std::string& name) {
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t nvalues = 0;
    char text[128] = {};
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nvalues, nullptr, sizeof text,
                       text, &config);
    if (id < 0 || decodable(id)) continue;
    const known_filter* k = nullptr;
    for (const auto& f : k_known)
      if (f.id == id) k = &f;
    std::string what = "HDF5 filter " + std::to_string(id);
    if (k != nullptr) what += " (" + std::string(k->name) + ")";
    const std::string fix =
        k != nullptr && *k->package != '\0'
            ? "install Debian's " + std::string(k->package) + ", or set HDF5_PLUGIN_PATH to a "
                                                              "folder that holds its plugin"
            : "set HDF5_PLUGIN_PATH to a folder that holds a plugin for it";
    throw error(errc::bad_input, name + ": is compressed with " + what +
                                     ", which this HDF5 library cannot load: " + fix);
  }
}

}  // namespace dctchop::formats::detail
