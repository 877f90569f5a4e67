// Compressed HDF5 chunks read as stored and decoded on several threads (see hdf5_chunks.hpp).
#include "hdf5_chunks.hpp"

#include <algorithm>
#include <cstring>

#include "dctchop/detail/run_parts.hpp"
#include "dctchop/error.hpp"
#include "hdf5_filters.hpp"

namespace dctchop::formats::detail {

using u64 = std::uint64_t;

namespace {
/** Whether two integer or floating-point types differ in byte order alone. */
bool byte_order_only(hid_t file_type, hid_t memory_type) {
  const H5T_class_t cls = H5Tget_class(file_type);
  if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || H5Tget_class(memory_type) != cls) return false;
  const H5T_order_t order = H5Tget_order(memory_type);
  if (order != H5T_ORDER_LE && order != H5T_ORDER_BE) return false;
  const hid_t t = H5Tcopy(file_type);
  if (t < 0) return false;
  const bool same = H5Tset_order(t, order) >= 0 && H5Tequal(t, memory_type) > 0;
  H5Tclose(t);
  return same;
}

/** Chunks larger than this are left to HDF5, whose chunk cache holds one at a time. */
constexpr u64 k_max_chunk_bytes = u64(64) << 20;
/** What the decoding threads may hold at once in decoded chunks (more threads take turns). */
constexpr u64 k_scratch_budget = u64(512) << 20;
/** The most decoded bytes kept from one read for the next (chunk_reader::kept_). */
constexpr u64 k_kept_budget = u64(128) << 20;
}  // namespace

std::unique_ptr<chunk_reader> chunk_reader::make(hid_t dset, hid_t dcpl, hid_t file_type,
                                                 hid_t memory_type,
                                                 const std::vector<u64>& shape,
                                                 unsigned threads) {
  const int nd = static_cast<int>(shape.size());
  if (threads < 1 || nd < 1 || nd > H5S_MAX_RANK || H5Pget_layout(dcpl) != H5D_CHUNKED) {
    return nullptr;
  }
  // Values that HDF5 would convert: only a change of byte order is done here.
  bool swap = false;
  if (H5Tequal(file_type, memory_type) <= 0) {
    swap = byte_order_only(file_type, memory_type);
    H5Eclear2(H5E_DEFAULT);
    if (!swap) return nullptr;
  }
  unsigned options = 0;  // edge chunks stored unfiltered, with a filter mask that says nothing
  if (H5Pget_chunk_opts(dcpl, &options) < 0 || (options & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)) {
    H5Eclear2(H5E_DEFAULT);
    return nullptr;
  }
  std::unique_ptr<chunk_reader> r(new chunk_reader());
  r->dset_ = dset;
  r->shape_ = shape;
  r->threads_ = threads;
  r->item_ = H5Tget_size(file_type);
  r->swap_ = swap;
  std::vector<hsize_t> chunk(static_cast<std::size_t>(nd));
  if (H5Pget_chunk(dcpl, nd, chunk.data()) != nd || r->item_ == 0) return nullptr;
  r->chunk_.assign(chunk.begin(), chunk.end());
  u64 bytes = r->item_;
  for (auto c : r->chunk_) {
    if (c == 0 || bytes > k_max_chunk_bytes / c) return nullptr;  // HDF5 reads larger ones
    bytes *= c;
  }
  r->chunk_bytes_ = static_cast<std::size_t>(bytes);
  // Each thread holds one or two decoded chunks: keep them within the scratch budget.
  r->threads_ = static_cast<unsigned>(
      std::clamp<u64>(k_scratch_budget / (2 * bytes), 1, threads));
  bool compressor = false;
  for (const auto& f : pipeline_of(dcpl)) {
    if (f.id == H5Z_FILTER_SHUFFLE && f.index == 0 && !f.values.empty() && f.values[0] == r->item_) {
      r->stages_.push_back({f.id, f.index});
    } else if ((f.id == H5Z_FILTER_DEFLATE || f.id == filter_lzf || f.id == filter_lz4 ||
                f.id == filter_zstd) &&
               !compressor) {
      r->stages_.push_back({f.id, f.index});
      r->max_stored_ = max_stored_bytes(f, bytes);
      compressor = true;
    } else {
      return nullptr;  // another filter, or a second compressor: HDF5 reads it
    }
  }
  // Unfiltered chunks HDF5 reads straight in, and shuffle alone costs little.
  if (!compressor) return nullptr;
  r->memory_type_ = memory_type;
  return r;
}

const unsigned char* chunk_reader::decode(const stored_chunk& c, unsigned char* a,
                                          unsigned char* b) const {
  const unsigned char* data = c.bytes.data();
  std::size_t size = c.bytes.size();
  for (auto s = stages_.rbegin(); s != stages_.rend(); ++s) {  // read order: the last first
    if ((c.mask >> s->index) & 1u) continue;  // stored without this filter
    if (s->id == H5Z_FILTER_SHUFFLE) {
      if (size != chunk_bytes_) return nullptr;
      unshuffle(data, size, item_, b);
      data = b;
    } else {
      if (!decode_chunk(s->id, data, size, a, chunk_bytes_)) return nullptr;
      data = a;
      size = chunk_bytes_;
    }
  }
  if (size != chunk_bytes_) return nullptr;
  if (swap_) {  // in place in our buffer; a chunk stored without filters is copied to `a`
    unsigned char* out = data == a || data == b ? const_cast<unsigned char*>(data) : a;
    if (out != data) std::memcpy(out, data, size);
    for (std::size_t i = 0; i < size; i += item_) std::reverse(out + i, out + i + item_);
    data = out;
  }
  return data;
}

bool chunk_reader::fill_value(const std::vector<hsize_t>& at) {
  if (!fill_.empty()) return true;
  // One value of a chunk never written, read by HDF5: the fill value as HDF5 gives it (in
  // the memory type; where the fill time is never, what the buffer held: zeros, as the
  // reader zeroes its buffer). H5Pget_fill_value crashed on a damaged fill-value message
  // (HDF5 1.10.8), where a read fails cleanly.
  std::vector<unsigned char> one(item_, 0);
  const hsize_t count = 1;
  const hid_t file_space = H5Dget_space(dset_);
  const hid_t memory_space = H5Screate_simple(1, &count, nullptr);
  std::vector<hsize_t> ones(at.size(), 1);
  const bool ok = file_space >= 0 && memory_space >= 0 &&
                  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, at.data(), nullptr,
                                      ones.data(), nullptr) >= 0 &&
                  H5Dread(dset_, memory_type_, memory_space, file_space, H5P_DEFAULT,
                          one.data()) >= 0;
  if (memory_space >= 0) H5Sclose(memory_space);
  if (file_space >= 0) H5Sclose(file_space);
  if (!ok) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  fill_ = std::move(one);
  return true;
}

void missing_chunk(const std::string& name, std::uint64_t row) {
  throw error(errc::bad_input, name + ": the chunk at row " + std::to_string(row) +
                                   " is not where the file's chunk index should hold it, though "
                                   "the index counts every chunk of the dataset as stored: the "
                                   "file is damaged");
}

bool next_chunk(std::vector<hsize_t>& offset, const std::vector<std::uint64_t>& chunk,
                const std::vector<std::uint64_t>& shape, std::uint64_t end) {
  for (std::size_t j = offset.size(); j-- > 0;) {
    offset[j] += chunk[j];
    if (offset[j] < (j == 0 ? end : shape[j])) return true;
    if (j > 0) offset[j] = 0;
  }
  return false;
}

chunk_state look_up_chunk(hid_t dset, const std::vector<hsize_t>& offset, hsize_t& size) {
  // The index's own lookup (a B-tree's, log n), which fails for a chunk never written
  // ("chunk storage is not allocated", HDF5 1.10) as for a damaged index. Anything but that
  // asks H5Dget_chunk_info_by_coord, which tells the two apart but walks the index's every
  // chunk to find one (HDF5 1.10): asked for each chunk, it made a read of n chunks take
  // n^2 steps (60000 gzip chunks of one 28x28 image each: 40 s, 2026-12-07).
  size = 0;
  if (H5Dget_chunk_storage_size(dset, offset.data(), &size) >= 0) {
    // (Later HDF5 versions say 0 bytes for a chunk never written, where 1.10 fails.)
    return size == 0 ? chunk_state::never_written : chunk_state::stored;
  }
  const bool never_written = last_hdf5_failure().text == "chunk storage is not allocated";
  H5Eclear2(H5E_DEFAULT);
  if (never_written) return chunk_state::never_written;
  haddr_t address = HADDR_UNDEF;
  unsigned mask = 0;
  if (H5Dget_chunk_info_by_coord(dset, offset.data(), &mask, &address, &size) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return chunk_state::unknown;
  }
  if (address == HADDR_UNDEF) {
    size = 0;
    return chunk_state::never_written;
  }
  return chunk_state::stored;
}

const unsigned char* chunk_reader::filled(unsigned char* a) const {
  if (std::all_of(fill_.begin(), fill_.end(), [](unsigned char v) { return v == 0; })) {
    std::memset(a, 0, chunk_bytes_);
  } else {
    for (std::size_t i = 0; i < chunk_bytes_; i += item_) std::memcpy(a + i, fill_.data(), item_);
  }
  return a;
}

void chunk_reader::scatter(const std::vector<hsize_t>& offset, const unsigned char* c, u64 first,
                           u64 count, unsigned char* dst) const {
  const std::size_t nd = shape_.size();
  // The box of the dataset that this chunk holds, within the rows asked for.
  std::vector<u64> lo(nd), hi(nd), cs(nd), ds(nd);
  for (std::size_t j = 0; j < nd; ++j) {
    lo[j] = offset[j];
    hi[j] = std::min<u64>(offset[j] + chunk_[j], shape_[j]);
  }
  lo[0] = std::max<u64>(lo[0], first);
  hi[0] = std::min<u64>(hi[0], first + count);
  if (lo[0] >= hi[0]) return;
  cs[nd - 1] = ds[nd - 1] = item_;  // byte strides in the chunk and in dst
  for (std::size_t j = nd - 1; j > 0; --j) {
    cs[j - 1] = cs[j] * chunk_[j];
    ds[j - 1] = ds[j] * shape_[j];
  }
  // Axes after k that the chunk holds whole, as dst does, are one contiguous run with axis k.
  std::size_t k = nd - 1;
  u64 run = (hi[k] - lo[k]) * item_;
  while (k > 0 && lo[k] == 0 && hi[k] == shape_[k] && chunk_[k] == shape_[k]) {
    --k;
    run *= hi[k] - lo[k];
  }
  std::vector<u64> at(lo.begin(), lo.begin() + static_cast<std::ptrdiff_t>(k));  // axes before k
  for (;;) {
    u64 from = (lo[k] - offset[k]) * cs[k], to = (k == 0 ? lo[0] - first : lo[k]) * ds[k];
    for (std::size_t j = 0; j < k; ++j) {
      from += (at[j] - offset[j]) * cs[j];
      to += (j == 0 ? at[0] - first : at[j]) * ds[j];
    }
    std::memcpy(dst + to, c + from, run);
    if (k == 0) return;
    std::size_t j = k;  // the next index of axes 0..k-1, the last fastest
    for (;;) {
      --j;
      if (++at[j] < hi[j]) break;
      at[j] = lo[j];
      if (j == 0) return;
    }
  }
}

bool chunk_reader::read_rows(u64 first, u64 count, void* dst, const std::string& name) {
  if (count == 0) return true;
  const std::size_t nd = shape_.size();
  // Every chunk that holds a row in range: chunk rows along axis 0, every chunk of the others.
  // The buffers stay from call to call: fresh ones cost page faults on every byte.
  std::vector<stored_chunk>& chunks = stored_;
  std::size_t used = 0;
  std::vector<std::size_t> from_kept;  // indices into kept_ of chunks decoded already
  std::vector<hsize_t> offset(nd, 0);
  offset[0] = first / chunk_[0] * chunk_[0];
  for (;;) {
    const auto kept = std::find_if(kept_.begin(), kept_.end(),
                                   [&](const auto& k) { return k.first == offset; });
    if (kept != kept_.end()) {
      from_kept.push_back(static_cast<std::size_t>(kept - kept_.begin()));
    } else {
      hsize_t size = 0;
      const chunk_state state = look_up_chunk(dset_, offset, size);
      if (state == chunk_state::unknown) return false;  // HDF5 reads it, and says why it cannot
      if (state == chunk_state::never_written) size = 0;
      if (size == 0 && every_chunk_) missing_chunk(name, offset[0]);
      if (size > max_stored_) {
        throw error(errc::bad_input, name + ": the chunk at row " + std::to_string(offset[0]) +
                                         " claims " + std::to_string(size) +
                                         " stored bytes for " + std::to_string(chunk_bytes_) +
                                         " of data; the file is damaged");
      }
      if (used == chunks.size()) chunks.emplace_back();
      stored_chunk& c = chunks[used++];
      c.offset = offset;
      c.written = size > 0;  // (never written: the fill value)
      if (!c.written && !fill_value(offset)) return false;  // HDF5 reads it, and says why
      c.bytes.resize(size);
      uint32_t mask = 0;
      if (c.written &&
          H5Dread_chunk(dset_, H5P_DEFAULT, offset.data(), &mask, c.bytes.data()) < 0) {
        const hdf5_failure why = last_hdf5_failure();
        const std::string at = name + ": cannot read the chunk at row " + std::to_string(offset[0]);
        if (!why.system) {  // no system call failed: the file's structure is at fault
          const std::string said = why.text.empty() ? std::string() : " (" + why.text + ")";
          throw error(errc::bad_input, at + ": the file is damaged" + said);
        }
        throw error(errc::io, at + (why.text.empty() ? std::string() : " (" + why.text + ")"));
      }
      c.mask = mask;
    }
    if (!next_chunk(offset, chunk_, shape_, first + count)) break;
  }
  // The chunks that hold rows past this read's end are kept decoded for the next read, where
  // all of them fit the budget (a read in order then decodes each chunk once).
  const u64 end = first + count;
  const bool past = end < shape_[0];  // (after the last row, no read in order follows)
  std::size_t spanning = 0;
  for (std::size_t i = 0; i < used; ++i) spanning += chunks[i].offset[0] + chunk_[0] > end;
  for (const std::size_t k : from_kept) spanning += kept_[k].first[0] + chunk_[0] > end;
  const bool keep = past && spanning > 0 && u64(spanning) * chunk_bytes_ <= k_kept_budget;
  std::vector<std::vector<unsigned char>> next_kept(keep ? used : 0);
  // Decode and place them on up to threads_ threads, one chunk at a time each; the kept ones
  // are only placed.
  const std::size_t jobs = used + from_kept.size();
  const std::size_t crew_size = std::min<std::size_t>(threads_, jobs);
  if (scratch_.size() < crew_size) scratch_.resize(crew_size);
  dctchop::detail::run_parts(jobs, crew_size, [&](std::size_t i, std::size_t t) {
    if (i >= used) {
      const auto& k = kept_[from_kept[i - used]];
      scatter(k.first, k.second.data(), first, count, static_cast<unsigned char*>(dst));
      return;
    }
    auto& [a, b] = scratch_[t];
    a.resize(chunk_bytes_);
    if (stages_.front().id == H5Z_FILTER_SHUFFLE) b.resize(chunk_bytes_);
    const unsigned char* c =
        chunks[i].written ? decode(chunks[i], a.data(), b.data()) : filled(a.data());
    if (c == nullptr) {
      throw error(errc::bad_input,
                  name + ": read of rows " + std::to_string(first) + ".." +
                      std::to_string(first + count - 1) + " failed: a compressed chunk does " +
                      "not decode (the chunk at row " + std::to_string(chunks[i].offset[0]) +
                      "); the file is damaged");
    }
    scatter(chunks[i].offset, c, first, count, static_cast<unsigned char*>(dst));
    if (keep && chunks[i].offset[0] + chunk_[0] > end) next_kept[i].assign(c, c + chunk_bytes_);
  });
  // What the next read takes: the chunks kept before that still hold rows past this end, and
  // the ones decoded now that do.
  std::vector<std::pair<std::vector<hsize_t>, std::vector<unsigned char>>> kept;
  if (keep) {
    for (const std::size_t k : from_kept) {
      if (kept_[k].first[0] + chunk_[0] > end) kept.push_back(std::move(kept_[k]));
    }
    for (std::size_t i = 0; i < used; ++i) {
      if (!next_kept[i].empty()) kept.emplace_back(chunks[i].offset, std::move(next_kept[i]));
    }
  }
  kept_ = std::move(kept);
  return true;
}

}  // namespace dctchop::formats::detail
