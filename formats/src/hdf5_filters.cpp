// HDF5 filters 32000 (LZF), 32004 (LZ4) and 32015 (Zstandard), and the check that every filter
// of an input dataset can be decoded. The stream formats are those of the reference plugins:
// - h5py's lzf_filter.c: one raw LZF block per chunk; client values {filter revision 4, LZF API
//   0x105, the chunk's size in bytes}, the size 0 in files of its revisions before 3;
// - HDF Group's H5Zlz4.c: the decoded size (8 bytes, big-endian) and the block size (4 bytes,
//   big-endian; client value 0 when set, else 1 GiB, at most the decoded size), then per block
//   its stored size (4 bytes, big-endian) and its bytes: one LZ4 block, or the block's bytes as
//   they are when the stored size equals the block's (LZ4 could not shrink it); the last block
//   holds the remainder;
// - HDF Group's registered Zstandard filter: one zstd frame per chunk, written with
//   ZSTD_compress, so the frame records its content size; client value 0 is the level.
#include "hdf5_filters.hpp"

#include <libdeflate.h>
#include <lz4.h>
#include <lzf.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "dctchop/error.hpp"

namespace dctchop::formats::detail {
namespace {

constexpr H5Z_filter_t k_lzf = filter_lzf;
constexpr H5Z_filter_t k_zstd = filter_zstd;
constexpr H5Z_filter_t k_lz4 = filter_lz4;
/** The reference LZ4 filter's block size when its client values set none. */
constexpr std::size_t k_lz4_default_block = std::size_t(1) << 30;
/** The LZ4 framing's header: the decoded size (8 bytes) and the block size (4). */
constexpr std::size_t k_lz4_header = 12;
constexpr unsigned k_lzf_revision = 4;  // h5py's H5PY_FILTER_LZF_VERSION

/** HDF5 limits a chunk to 2^32 - 1 bytes: no decoded chunk is larger. */
constexpr std::size_t k_max_chunk = std::size_t(UINT32_MAX);

/** The expected outputs of the dataset this thread is reading (decode_scope), or null. */
thread_local const std::vector<filter_output>* t_outputs = nullptr;

/** What filter `id` must decode a chunk to on this thread. */
filter_output wanted(H5Z_filter_t id) {
  if (t_outputs != nullptr)
    for (const auto& o : *t_outputs)
      if (o.id == id) return o;
  return {id, k_max_chunk, false};
}

/** Whether a decoded size is what the dataset's chunks decode to. */
bool fits(const filter_output& w, std::size_t n) { return w.exact ? n == w.bytes : n <= w.bytes; }

/** Hands a filter's output to HDF5 in place of its input, as a filter must: allocated by HDF5's
 *  allocator, *buf_size the allocation's size. Returns the output's size. */
std::size_t replace(void** buf, std::size_t* buf_size, void* out, std::size_t allocated,
                    std::size_t used) {
  H5free_memory(*buf);
  *buf = out;
  *buf_size = allocated;
  return used;
}

std::size_t lzf_encode(std::size_t nbytes, std::size_t* buf_size, void** buf) {
  // Into at most the input's size: data that LZF cannot shrink fails, and HDF5 stores that
  // chunk as it is (the filter is optional, as h5py's is).
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

/** Undoes filter `id` on HDF5's buffer into exactly `size` bytes (decode_chunk), in HDF5's
 *  allocator; 0 when the chunk does not decode to that size. */
std::size_t decode_known(H5Z_filter_t id, std::size_t size, std::size_t nbytes,
                         std::size_t* buf_size, void** buf) {
  void* out = H5allocate_memory(std::max<std::size_t>(size, 1), false);
  if (out == nullptr) return 0;
  if (!decode_chunk(id, *buf, nbytes, out, size)) {
    H5free_memory(out);
    return 0;
  }
  return replace(buf, buf_size, out, std::max<std::size_t>(size, 1), size);
}

std::size_t lzf_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[],
                       std::size_t nbytes, std::size_t* buf_size, void** buf) {
  if (nbytes == 0 || nbytes > UINT_MAX) return 0;  // liblzf would read a byte of an empty chunk
  if ((flags & H5Z_FLAG_REVERSE) == 0) return lzf_encode(nbytes, buf_size, buf);
  const filter_output w = wanted(k_lzf);
  const std::size_t recorded = cd_nelmts >= 3 ? cd_values[2] : 0;
  if (recorded != 0 && !fits(w, recorded)) return 0;  // the file contradicts itself
  // The size the dataset or the writer gives; otherwise a guess that grows.
  if (w.exact || recorded != 0) return decode_known(k_lzf, w.exact ? w.bytes : recorded, nbytes, buf_size, buf);
  for (std::size_t size = std::max<std::size_t>(*buf_size, 4096);; size *= 2) {
    size = std::min(size, w.bytes);
    void* out = H5allocate_memory(size, false);
    if (out == nullptr) return 0;
    errno = 0;
    const unsigned n = lzf_decompress(*buf, static_cast<unsigned>(nbytes), out,
                                      static_cast<unsigned>(size));
    if (n != 0) return replace(buf, buf_size, out, size, n);
    const int why = errno;
    H5free_memory(out);
    if (why != E2BIG || size >= w.bytes) return 0;  // EINVAL: not LZF data (damaged)
  }
}

/** An LZF filter's client values as h5py's set_local writes them, the chunk's size included,
 *  so that h5py's readers and ours can allocate exactly. */
herr_t lzf_set_local(hid_t dcpl, hid_t type, hid_t) {
  unsigned flags = 0, cd[3] = {0, 0, 0};
  std::size_t n = 3;
  if (H5Pget_filter_by_id2(dcpl, k_lzf, &flags, &n, cd, 0, nullptr, nullptr) < 0) return -1;
  hsize_t dims[H5S_MAX_RANK];
  const int nd = H5Pget_chunk(dcpl, H5S_MAX_RANK, dims);
  const std::size_t item = H5Tget_size(type);
  if (nd <= 0 || item == 0) return -1;
  std::size_t bytes = item;
  for (int i = 0; i < nd; ++i) bytes = dims[i] != 0 && bytes <= k_max_chunk / dims[i] ? bytes * dims[i] : 0;
  cd[0] = k_lzf_revision;
  cd[1] = LZF_VERSION;
  cd[2] = bytes <= k_max_chunk ? static_cast<unsigned>(bytes) : 0;
  return H5Pmodify_filter(dcpl, k_lzf, flags, 3, cd);
}

/** A frame that does not record its size (not written by the reference filter), streamed
 *  into a buffer that grows up to the size the dataset allows. */
std::size_t zstd_decode_unsized(const filter_output& w, std::size_t nbytes, std::size_t* buf_size,
                                void** buf) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) return 0;
  std::size_t size = w.exact ? w.bytes : std::max<std::size_t>(4 * nbytes, 1 << 16), used = 0;
  void* out = nullptr;
  ZSTD_inBuffer in{*buf, nbytes, 0};
  for (;;) {
    size = std::max<std::size_t>(std::min(size, w.bytes), 1);
    void* grown = H5resize_memory(out, size);
    if (grown == nullptr) break;
    out = grown;
    ZSTD_outBuffer o{out, size, used};
    const std::size_t result = ZSTD_decompressStream(dctx, &o, &in);
    used = o.pos;
    if (ZSTD_isError(result)) break;
    if (result == 0 && in.pos == in.size) {  // the frame is complete and every byte used
      if (!fits(w, used)) break;
      ZSTD_freeDCtx(dctx);
      return replace(buf, buf_size, out, size, used);
    }
    if (o.pos == o.size) {  // the buffer is full: grow it
      if (size >= w.bytes) break;  // more than a chunk of this dataset holds
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
  const filter_output w = wanted(k_zstd);
  const unsigned long long n = ZSTD_getFrameContentSize(*buf, nbytes);
  if (n == ZSTD_CONTENTSIZE_ERROR) return 0;
  if (n == ZSTD_CONTENTSIZE_UNKNOWN) return zstd_decode_unsized(w, nbytes, buf_size, buf);
  if (n > k_max_chunk || !fits(w, static_cast<std::size_t>(n))) return 0;  // before allocating
  return decode_known(k_zstd, static_cast<std::size_t>(n), nbytes, buf_size, buf);
}

std::uint64_t load_be(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

void store_be(std::uint64_t v, int bytes, unsigned char* p) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<unsigned char>(v & 0xff);
}

/** Undoes the LZ4 framing into exactly `out_bytes` bytes. LZ4_decompress_safe never reads or
 *  writes past the buffers it is given, unlike the reference plugin's LZ4_decompress_fast, and
 *  every stored size is checked against what is left of the input before it is used. */
bool lz4_decode(const unsigned char* in, std::size_t n, unsigned char* out, std::size_t out_bytes) {
  if (n < k_lz4_header || load_be(in, 8) != out_bytes) return false;
  std::uint64_t block = load_be(in + 8, 4);
  if (block == 0 && out_bytes != 0) return false;  // no block would ever end the chunk
  block = std::min<std::uint64_t>(block, out_bytes);
  std::size_t at = k_lz4_header, done = 0;
  while (done < out_bytes) {
    const std::size_t size = static_cast<std::size_t>(std::min<std::uint64_t>(block, out_bytes - done));
    if (n - at < 4) return false;
    const std::uint64_t stored = load_be(in + at, 4);
    at += 4;
    if (stored > n - at) return false;  // the block runs past the chunk
    if (stored == size) {
      std::memcpy(out + done, in + at, size);
    } else if (stored > INT_MAX || size > INT_MAX ||
               LZ4_decompress_safe(reinterpret_cast<const char*>(in + at),
                                   reinterpret_cast<char*>(out + done), static_cast<int>(stored),
                                   static_cast<int>(size)) != static_cast<int>(size)) {
      return false;
    }
    at += static_cast<std::size_t>(stored);
    done += size;
  }
  return at == n;  // the reference writer leaves nothing after the last block
}

std::size_t lz4_encode(std::size_t cd_nelmts, const unsigned cd_values[], std::size_t nbytes,
                       std::size_t* buf_size, void** buf) {
  // LZ4 takes at most LZ4_MAX_INPUT_SIZE bytes (LZ4_compressBound is 0 above it, which would
  // size the output for the headers alone); the reference plugin refuses above 2 GiB.
  if (nbytes > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE)) return 0;
  std::size_t block = cd_nelmts > 0 && cd_values[0] > 0 ? cd_values[0] : k_lz4_default_block;
  block = std::max<std::size_t>(std::min(block, nbytes), 1);
  const std::size_t blocks = (nbytes + block - 1) / block;
  const std::size_t bound =
      k_lz4_header + blocks * 4 + static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(nbytes)));
  auto* out = static_cast<unsigned char*>(H5allocate_memory(bound, false));
  if (out == nullptr) return 0;
  const auto* in = static_cast<const unsigned char*>(*buf);
  store_be(nbytes, 8, out);
  store_be(nbytes == 0 ? 0 : block, 4, out + 8);
  std::size_t at = k_lz4_header;
  for (std::size_t done = 0; done < nbytes; done += block) {
    const std::size_t size = std::min(block, nbytes - done);
    const int n = LZ4_compress_default(reinterpret_cast<const char*>(in + done),
                                       reinterpret_cast<char*>(out + at + 4), static_cast<int>(size),
                                       static_cast<int>(std::min<std::size_t>(bound - at - 4, INT_MAX)));
    std::size_t stored = static_cast<std::size_t>(n);
    if (n <= 0 || stored >= size) {  // stored as it is: the decoder tells by the size
      stored = size;
      std::memcpy(out + at + 4, in + done, size);
    }
    store_be(stored, 4, out + at);
    at += 4 + stored;
  }
  return replace(buf, buf_size, out, bound, at);
}

std::size_t lz4_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[],
                       std::size_t nbytes, std::size_t* buf_size, void** buf) {
  if ((flags & H5Z_FLAG_REVERSE) == 0) return lz4_encode(cd_nelmts, cd_values, nbytes, buf_size, buf);
  if (nbytes < k_lz4_header) return 0;
  const std::uint64_t size = load_be(static_cast<const unsigned char*>(*buf), 8);
  // Checked before allocating: the header of a damaged chunk may say anything.
  if (size > k_max_chunk || !fits(wanted(k_lz4), static_cast<std::size_t>(size))) return 0;
  return decode_known(k_lz4, static_cast<std::size_t>(size), nbytes, buf_size, buf);
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
void register_filter(H5Z_filter_t id, const char* name, H5Z_set_local_func_t set_local,
                     H5Z_func_t f) {
  const H5Z_class2_t c{H5Z_CLASS_T_VERS, id, 1, 1, name, nullptr, set_local, f};
  const herr_t status = H5Zregister(&c);
  H5Eclear2(H5E_DEFAULT);
  if (status < 0) {
    throw error(errc::internal, "the HDF5 library refused to register filter " + std::to_string(id));
  }
}

struct known_filter {
  H5Z_filter_t id;
  const char* name;
  const char* package;  // Debian's package with its plugin; empty when Debian has none
};

// The registered third-party filters that ML and HPC datasets use most (HDF Group's list of
// registered filter plugins); another filter is named by id and the name in the file.
constexpr known_filter k_known[] = {
    {307, "bzip2", "hdf5-filter-plugin"},
    {32001, "blosc", "hdf5-filter-plugin-blosc-serial"},
    {32008, "bitshuffle", ""},
    {32013, "zfp", "hdf5-filter-plugin-zfp-serial"},
    {32017, "sz", ""},
    {32024, "sz3", ""},
    {32026, "blosc2", ""},
};

}  // namespace

std::vector<filter_entry> pipeline_of(hid_t dcpl) {
  std::vector<filter_entry> out;
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    filter_entry e;
    e.index = static_cast<unsigned>(i);
    unsigned config = 0, values[8] = {};
    std::size_t nvalues = 8;
    char text[128] = {};
    e.id = H5Pget_filter2(dcpl, e.index, &e.flags, &nvalues, values, sizeof text, text, &config);
    e.name = text;
    e.values.assign(values, values + std::min<std::size_t>(nvalues, 8));
    out.push_back(std::move(e));
  }
  return out;
}

std::string filter_names(const std::vector<filter_entry>& pipeline) {
  std::string out;
  for (const auto& e : pipeline) {
    std::string name;
    switch (e.id) {
      case H5Z_FILTER_DEFLATE: name = "deflate"; break;
      case H5Z_FILTER_SHUFFLE: name = "shuffle"; break;
      case H5Z_FILTER_FLETCHER32: name = "fletcher32"; break;
      case H5Z_FILTER_SZIP: name = "szip"; break;
      case H5Z_FILTER_NBIT: name = "nbit"; break;
      case H5Z_FILTER_SCALEOFFSET: name = "scaleoffset"; break;
      case filter_lzf: name = "lzf"; break;
      case filter_lz4: name = "lz4"; break;
      case filter_zstd: name = "zstd"; break;
      default:
        for (const auto& f : k_known)
          if (f.id == e.id) name = f.name;
        if (name.empty()) name = "filter " + std::to_string(e.id);
    }
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

void register_builtin_filters() {
  // Once per process, and again for a filter that was unregistered since (H5Zunregister).
  static std::mutex m;
  static bool done = false;
  const std::lock_guard<std::mutex> lock(m);
  if (!done || H5Zfilter_avail(k_lzf) <= 0) register_filter(k_lzf, "lzf (dctchop)", lzf_set_local, lzf_filter);
  if (!done || H5Zfilter_avail(k_zstd) <= 0) register_filter(k_zstd, "zstd (dctchop)", nullptr, zstd_filter);
  if (!done || H5Zfilter_avail(k_lz4) <= 0) register_filter(k_lz4, "lz4 (dctchop)", nullptr, lz4_filter);
  H5Eclear2(H5E_DEFAULT);
  done = true;
}

std::vector<filter_output> expected_outputs(hid_t dcpl, std::size_t chunk_bytes) {
  std::vector<filter_output> out;
  std::size_t size = chunk_bytes;  // what enters filter i at write time, at most
  bool exact = true;
  for (const auto& f : pipeline_of(dcpl)) {
    const H5Z_filter_t id = f.id;
    if (id == k_lzf || id == k_zstd || id == k_lz4) out.push_back({id, std::min(size, k_max_chunk), exact});
    if (id == H5Z_FILTER_SHUFFLE) continue;
    if (id == H5Z_FILTER_FLETCHER32) {
      size += 4;
      continue;
    }
    // A compressor before ours (unusual): its output may exceed its input a little.
    size += size / 8 + 1024;
    exact = false;
  }
  return out;
}

decode_scope::decode_scope(const std::vector<filter_output>& outputs) : previous_(t_outputs) {
  t_outputs = &outputs;
}

decode_scope::~decode_scope() { t_outputs = previous_; }

bool decode_chunk(H5Z_filter_t id, const void* in, std::size_t n, void* out,
                  std::size_t out_bytes) {
  if (id == H5Z_FILTER_DEFLATE) {
    // A zlib stream, as HDF5's deflate filter writes it, inflated by libdeflate (whole-buffer
    // decoding, about twice zlib's speed); one decompressor per thread.
    struct free_decompressor {
      void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
    };
    thread_local std::unique_ptr<libdeflate_decompressor, free_decompressor> d(
        libdeflate_alloc_decompressor());
    std::size_t got = 0;
    return d != nullptr &&
           libdeflate_zlib_decompress(d.get(), in, n, out, out_bytes, &got) == LIBDEFLATE_SUCCESS &&
           got == out_bytes;
  }
  if (id == k_lzf) {
    // liblzf reads a first byte before it checks the input's end: never hand it none.
    if (n == 0 || n > UINT_MAX || out_bytes > UINT_MAX) return false;
    return lzf_decompress(in, static_cast<unsigned>(n), out, static_cast<unsigned>(out_bytes)) ==
           out_bytes;
  }
  if (id == k_zstd) {
    const std::size_t got = ZSTD_decompress(out, out_bytes, in, n);
    return !ZSTD_isError(got) && got == out_bytes;
  }
  if (id == k_lz4) {
    return lz4_decode(static_cast<const unsigned char*>(in), n, static_cast<unsigned char*>(out),
                      out_bytes);
  }
  return false;
}

std::uint64_t max_stored_bytes(const filter_entry& f, std::uint64_t chunk_bytes) {
  // A compressor stores a chunk it cannot shrink as it is, give or take its framing.
  const std::uint64_t any = chunk_bytes + chunk_bytes / 8 + 4096;
  if (f.id != k_lz4) return any;
  // Blocks of the filter's first client value (else one block), each stored raw at worst.
  const std::uint64_t block = std::clamp<std::uint64_t>(
      f.values.empty() || f.values[0] == 0 ? chunk_bytes : f.values[0], 1, std::max<std::uint64_t>(chunk_bytes, 1));
  return std::max(any, k_lz4_header + 4 * ((chunk_bytes + block - 1) / block) + chunk_bytes);
}

void unshuffle(const void* in, std::size_t bytes, std::size_t item, void* out) {
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  const std::size_t elements = item > 1 ? bytes / item : 0;
  for (std::size_t b = 0; b < (elements > 0 ? item : 0); ++b) {
    const unsigned char* plane = src + b * elements;
    for (std::size_t e = 0; e < elements; ++e) dst[e * item + b] = plane[e];
  }
  const std::size_t done = elements * item;
  if (bytes > done) std::memcpy(dst + done, src + done, bytes - done);
}

std::vector<missing_filter> missing_filters(hid_t dcpl, const std::string& name) {
  std::vector<missing_filter> out;
  for (const auto& e : pipeline_of(dcpl)) {
    if (e.id < 0 || decodable(e.id)) continue;
    const known_filter* k = nullptr;
    for (const auto& f : k_known)
      if (f.id == e.id) k = &f;
    std::string what = "HDF5 filter " + std::to_string(e.id);
    if (k != nullptr) {
      what += " (" + std::string(k->name) + ")";
    } else if (!e.name.empty()) {
      what += " (\"" + e.name + "\")";
    }
    const std::string fix =
        k != nullptr && *k->package != '\0'
            ? "install Debian's " + std::string(k->package) +
                  ", or set HDF5_PLUGIN_PATH to a folder that holds its plugin"
            : "set HDF5_PLUGIN_PATH to a folder that holds a plugin for it";
    out.push_back({e.index, (e.flags & H5Z_FLAG_OPTIONAL) != 0,
                   name + ": is compressed with " + what +
                       ", which this HDF5 library cannot load: " + fix});
  }
  return out;
}

hdf5_failure last_hdf5_failure() {
  hdf5_failure f;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto* f = static_cast<hdf5_failure*>(out);
        if (e->desc != nullptr && *e->desc != '\0') {
          f->text = e->desc;
          // The sec2 driver's messages of a failed system call carry its errno.
          if (std::strstr(e->desc, "errno = ") != nullptr) f->system = true;
        }
        if (e->maj_num == H5E_PLINE) f->in_filter = true;
        if (e->maj_num == H5E_RESOURCE) f->system = true;
        return 0;
      },
      &f);
  return f;
}

}  // namespace dctchop::formats::detail
