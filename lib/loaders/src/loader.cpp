#include "dctchop/loader.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/detail/run_parts.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/json_number.hpp"
#include "dctchop/host_memory.hpp"

namespace dctchop::loaders {
namespace {

using u64 = std::uint64_t;

/** splitmix64: a well-mixed 64-bit value from any input (Steele, Lea, Flood 2014). */
u64 mix(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/** A small generator with a fixed algorithm, so that an order is the same on every platform
 *  and standard library (std::shuffle's is not specified). */
struct rng64 {
  u64 state;
  u64 next() { return mix(state++); }
  /** As `n` calls of next(): a counter, so skipping is free. */
  void skip(u64 n) { state += n; }
  /** Uniform in [0, n): the high half of a 64 x 64-bit product (Lemire's multiply-shift;
   *  the bias is below n / 2^64). */
  u64 below(u64 n) {
    const u64 x = next();
    const u64 xl = x & 0xffffffffu, xh = x >> 32, nl = n & 0xffffffffu, nh = n >> 32;
    const u64 lo = xl * nl, m1 = xh * nl, m2 = xl * nh, hi = xh * nh;
    const u64 mid = (lo >> 32) + (m1 & 0xffffffffu) + (m2 & 0xffffffffu);
    return hi + (m1 >> 32) + (m2 >> 32) + (mid >> 32);
  }
};

/** Draws that shuffle() takes of `r` for `n` values: one per step, no rejections. */
u64 shuffle_draws(u64 n) { return n > 1 ? n - 1 : 0; }

template <typename T>
void shuffle(std::vector<T>& v, rng64& r) {
  for (u64 i = v.size(); i > 1; --i) std::swap(v[i - 1], v[r.below(i)]);
}

}  // namespace

std::string loader_state::to_json() const {
  nlohmann::json j{{"epoch", epoch}, {"position", position}, {"seed", seed}};
  if (batches) {
    const auto& b = *batches;
    j["samples"] = b.samples;
    j["batch_size"] = b.batch_size;
    j["shuffle"] = b.shuffle;
    j["shuffle_window"] = b.shuffle_window;
    j["rank"] = b.rank;
    j["world"] = b.world;
    j["drop_last"] = b.drop_last;
    if (b.samples_per_chunk) j["samples_per_chunk"] = *b.samples_per_chunk;
    j["sharding"] = b.sliced ? "slices" : "strided";
  }
  return j.dump();
}

loader_state loader_state::from_json(const std::string& text) {
  const char* expected =
      "not a loader state (expected the JSON object that state() gives: epoch, position, seed";
  std::string twice;
  bool deep = false;
  const nlohmann::json j = formats::parse_json_naming_once(text, twice, nullptr, &deep);
  if (deep) {
    throw error(errc::invalid_argument,
                std::string(expected) + "; this nests arrays and objects more than " +
                    std::to_string(formats::max_json_depth) + " deep)");
  }
  if (j.is_discarded()) {
    throw error(errc::invalid_argument, std::string(expected) + "; this is not JSON)");
  }
  if (!twice.empty()) {
    throw error(errc::invalid_argument,
                std::string(expected) + "; it names " + twice + " twice)");
  }
  if (!j.is_object()) throw error(errc::invalid_argument, std::string(expected) + ")");
  auto integer = [&](const char* key) -> u64 {
    if (!j.contains(key)) throw error(errc::invalid_argument, std::string(expected) + "; no " + key + ")");
    try {
      return formats::json_integer<u64>(j.at(key));
    } catch (const std::exception&) {
      throw error(errc::invalid_argument,
                  std::string(expected) + "; " + key + " is not a count: " + j.at(key).dump() + ")");
    }
  };
  auto flag = [&](const char* key) {
    if (!j.contains(key) || !j.at(key).is_boolean()) {
      throw error(errc::invalid_argument,
                  std::string(expected) + "; " + key + " is not true or false)");
    }
    return j.at(key).get<bool>();
  };
  loader_state s;
  s.epoch = integer("epoch");
  s.position = integer("position");
  s.seed = integer("seed");
  // The three alone are a state saved before 2026-11-30; one that says part of its batches'
  // shape but not its batch size is not one (its shape was ignored: a state of 7 ranks
  // restored into a loader of one).
  bool shaped = false;
  for (const auto& [key, value] : j.items()) {
    shaped = shaped || (key != "epoch" && key != "position" && key != "seed");
  }
  if (j.contains("batch_size") || shaped) {
    shape_of_batches b;
    b.samples = integer("samples");
    b.batch_size = integer("batch_size");
    b.shuffle_window = integer("shuffle_window");
    const u64 rank = integer("rank"), world = integer("world");
    if (world > u64(std::numeric_limits<int>::max())) {
      throw error(errc::invalid_argument, std::string(expected) + "; world is too large)");
    }
    if (rank > u64(std::numeric_limits<int>::max())) {  // (was taken as 2^31 - 1)
      throw error(errc::invalid_argument, std::string(expected) + "; rank is too large)");
    }
    b.rank = static_cast<int>(rank);
    b.world = static_cast<int>(world);
    b.shuffle = flag("shuffle");
    b.drop_last = flag("drop_last");
    if (j.contains("samples_per_chunk")) b.samples_per_chunk = integer("samples_per_chunk");
    // One rank takes every sample either way; states without the key are older than slices.
    b.sliced = b.world == 1 || (j.contains("sharding") && j.at("sharding") == "slices");
    s.batches = b;
  }
  return s;
}

struct archive_loader::impl {
  loader_options o;
  std::shared_ptr<backend> be;
  // The chunks' buffers where the backend has no memory of its own (the CPU): recycled, in
  // huge pages. A chunk read or decoded into fresh pages paid for their faults and for the
  // kernel's clearing of them, each time the chunk came back into the cache.
  std::shared_ptr<std::pmr::memory_resource> chunk_memory;
  // The batches' memory where the caller gave none: its kept blocks go when the loader does.
  std::shared_ptr<recycling_resource> own_batch_memory;
  formats::archive_reader reader;
  formats::archive_header h;
  u64 label_row = 0;  // bytes of one sample's labels (0: none); read with their chunk
  std::string label_descr;
  std::vector<u64> label_shape;  // of one sample
  u64 sample_bytes = 0, coeff_bytes = 0;

  // The producer side (the prefetch thread, or next() itself without prefetch).
  u64 make_epoch = 0, make_pos = 0;
  /** Epochs count from 0 to this; the one after it would be 0 again. */
  static constexpr u64 last_epoch = std::numeric_limits<u64>::max() - 1;
  std::optional<u64> order_epoch;
  std::vector<u64> order;  // this rank's samples of order_epoch
  struct cached_chunk {
    std::size_t index;
    byte_buffer data;  // decoded values, or coefficients; in the backend's host memory
    std::vector<std::byte> labels;  // the chunk's samples' labels
  };
  std::list<cached_chunk> cache;  // most recently used first

  // The consumer side.
  u64 seed = 0;
  u64 used_epoch = 0, used_pos = 0;

  // Prefetch.
  std::mutex m;
  std::condition_variable cv;
  std::deque<batch> ready;
  std::exception_ptr err;
  bool stop = false;
  std::thread thread;
  pid_t owner = 0;  // the process whose thread `thread` is

  impl(const std::string& archive, const loader_options& opt, std::shared_ptr<backend> b)
      : impl(formats::archive_reader::open_seekable(archive), opt, std::move(b)) {}

  impl(formats::archive_reader r, const loader_options& opt, std::shared_ptr<backend> b)
      : o(opt), be(std::move(b)), reader(std::move(r)) {
    if (o.batch_size == 0) throw error(errc::invalid_argument, "batch size must be at least 1");
    if (o.threads < 1 || o.threads > loader_options::max_threads) {
      throw error(errc::invalid_argument, "threads " + std::to_string(o.threads) +
                                              ": expected 1 to " +
                                              std::to_string(loader_options::max_threads));
    }
    if (o.prefetch > loader_options::max_prefetch) {  // (each a whole batch in memory)
      throw error(errc::invalid_argument, "prefetch " + std::to_string(o.prefetch) + ": at most " +
                                              std::to_string(loader_options::max_prefetch) +
                                              " batches ahead");
    }
    if (o.world < 1) {
      throw error(errc::invalid_argument,
                  "world (the number of shards) must be at least 1, not " + std::to_string(o.world));
    }
    if (o.rank < 0 || o.rank >= o.world) {
      throw error(errc::invalid_argument, "rank " + std::to_string(o.rank) + " is outside 0.." +
                                              std::to_string(o.world - 1));
    }
    if (!reader.random_access()) {
      throw error(errc::invalid_argument,
                  reader.display_name() + ": a loader needs a file it can seek in, not a stream");
    }
    h = reader.header();
    seed = o.seed;
    if (o.shuffle_window == 0) o.shuffle_window = 1;
    if (!be) be = make_backend(backend_kind::cpu, {1});
    if (!o.batch_memory) {
      // As many blocks kept as the pipeline uses: the queue, the batch being made, the one
      // held and one being freed.
      own_batch_memory = recycled_large_pages(std::min<std::size_t>(16, o.prefetch + 3));
      o.batch_memory = own_batch_memory;
    }
    chunk_memory = be->host_memory();
    if (!chunk_memory) chunk_memory = recycled_large_pages(4);
    coeff_bytes = h.coeff_bytes_per_sample();
    sample_bytes = o.decode ? h.geom.values_per_sample() * size_of(h.type) : coeff_bytes;
    if (const auto* info = reader.find_side_array("labels")) {
      // Checked whole now, read chunk by chunk later: the loader never holds more labels
      // than its cached chunks' (per-sample masks as labels can be as large as the data).
      reader.verify_side_array("labels");
      label_row = info->bytes / std::max<u64>(h.geom.samples, 1);
      label_descr = info->descr;
      if (!info->shape.empty()) label_shape.assign(info->shape.begin() + 1, info->shape.end());
    }
    if (batches_per_epoch() == 0) {  // a training loop over an epoch would do nothing
      throw error(errc::invalid_argument,
                  reader.display_name() + ": too few samples for one batch: " +
                      std::to_string(h.geom.samples) +
                      (h.geom.samples == 1 ? " sample" : " samples") +
                      (o.world > 1 ? " over " + std::to_string(o.world) + " ranks" : "") +
                      ", batch size " + std::to_string(o.batch_size) +
                      (o.drop_last ? " and drop_last" : "") +
                      // (Fewer samples than ranks: no batch size helps; a feed for an
                      // accelerator keeps drop_last on, for static shapes.)
                      (!o.drop_last ? ""
                       : h.geom.samples < static_cast<u64>(o.world)
                           ? " (fewer ranks give a batch, or drop_last off where it may be)"
                           : " (a smaller batch size gives a batch, or drop_last off where it "
                             "may be)"));
    }
  }

  loader_state::shape_of_batches shape() const {
    // The window matters only to a shuffled order: 0 without shuffling, so that loaders that
    // give the same batches take each other's states.
    // So does the chunking (the shuffle goes chunk by chunk).
    return {h.geom.samples, o.batch_size, o.shuffle ? o.shuffle_window : 0,
            o.rank,         o.world,      o.shuffle,
            o.drop_last,    o.shuffle ? h.samples_per_chunk : 0};
  }

  /** This rank's samples of `epoch`, in order: its slice of the epoch's order over every
   *  sample, a contiguous run, so that it reads about 1/world of the windows (taking every
   *  world-th sample read every chunk on every rank). Without drop_last the last ranks'
   *  slices wrap around to the start of the order, as PyTorch's DistributedSampler pads:
   *  every rank gets the same number of batches. The whole order is never made: a rank
   *  shuffles only the windows that hold its slice and skips the generator past the others
   *  (it is a counter), so it holds its slice and one window and spends time on its share,
   *  not 8 bytes and a shuffle step for every sample of the dataset. */
  std::vector<u64> rank_order(u64 epoch) const {
    const u64 n = h.geom.samples;
    const u64 per_rank = samples_per_rank();  // <= n
    const u64 start = static_cast<u64>(o.rank) *
                      (o.drop_last ? n / static_cast<u64>(o.world) : per_rank) % n;
    std::vector<u64> mine(per_rank);
    if (per_rank == 0) return mine;
    // Position p of the whole order is this rank's (p - start) mod n-th sample, if that is
    // below per_rank (the slice covers each position at most once).
    auto offset = [&](u64 p) { return p >= start ? p - start : p + n - start; };
    if (!o.shuffle) {
      for (u64 i = 0; i < per_rank; ++i) mine[i] = (start + i) % n;
      return mine;
    }
    rng64 r{mix(seed ^ mix(epoch))};
    const auto& chunks = reader.chunks();
    std::vector<u64> chunk_order(chunks.size());
    std::iota(chunk_order.begin(), chunk_order.end(), u64(0));
    shuffle(chunk_order, r);
    u64 p = 0;  // position in the whole order of the window's first sample
    std::vector<u64> window;
    for (std::size_t w = 0; w < chunk_order.size(); w += o.shuffle_window) {
      window.clear();
      const std::size_t end = std::min(chunk_order.size(), w + o.shuffle_window);
      u64 m = 0;  // the window's samples
      for (std::size_t i = w; i < end; ++i) m += chunks[chunk_order[i]].count;
      // Positions p..p+m-1 are this rank's offsets i0.. (mod n): some are below per_rank
      // if the first is, or if they wrap past n to 0.
      const u64 i0 = offset(p);
      if (i0 >= per_rank && i0 + m <= n) {
        r.skip(shuffle_draws(m));
        p += m;
        continue;
      }
      for (std::size_t i = w; i < end; ++i) {
        const auto& c = chunks[chunk_order[i]];
        for (u64 s = 0; s < c.count; ++s) window.push_back(c.first + s);
      }
      shuffle(window, r);
      for (u64 j = 0; j < m; ++j) {
        if (const u64 i = offset(p + j); i < per_rank) mine[i] = window[j];
      }
      p += m;
    }
    return mine;
  }

  /** Samples that each rank takes in an epoch: with drop_last, whole batches of its n/world
   *  share; without, ceil(n/world), the same on every rank. */
  u64 samples_per_rank() const {
    const u64 n = h.geom.samples, world = static_cast<u64>(o.world);
    if (o.drop_last) return n / world / o.batch_size * o.batch_size;
    return n / world + (n % world != 0 ? 1 : 0);
  }

  u64 batches_per_epoch() const {
    const u64 n = samples_per_rank();  // ceil(n / batch), without n + batch - 1 wrapping
    return n / o.batch_size + (n % o.batch_size != 0 ? 1 : 0);
  }

  /** A chunk's buffer: in chunk_memory, or where that is the backend's and has no room
   *  (pinned memory is scarce), in large pages, as host_buffer does. */
  byte_buffer chunk_buffer(u64 bytes) {
    try {
      return byte_buffer(bytes, resource_allocator<std::byte>(chunk_memory));
    } catch (const std::bad_alloc&) {
      return byte_buffer(bytes, resource_allocator<std::byte>(large_page_memory()));
    }
  }

  /** Chunk `ci` read and checked, decoded (or as stored), with its labels. Thread-safe: the
   *  reader's positioned reads, the chunk memory and the backend take calls side by side. */
  cached_chunk load(std::size_t ci) {
    cached_chunk c{ci, {}, {}};
    const u64 count = reader.chunks()[ci].count;
    if (label_row > 0) {
      c.labels.resize(count * label_row);
      reader.read_side_array_rows("labels", reader.chunks()[ci].first, count, c.labels);
    }
    byte_buffer coeffs = chunk_buffer(count * coeff_bytes);
    reader.read_chunk(ci, coeffs);  // checks the checksum
    if (o.decode) {
      c.data = chunk_buffer(count * sample_bytes);
      be->decode(h.codec, coeffs, make_view(h.geom, h.type, static_cast<void*>(c.data.data()), count));
    } else {
      c.data = std::move(coeffs);
    }
    return c;
  }

  /** The cached chunk `ci`, moved to the front (most recently used); nullptr if not cached. */
  const cached_chunk* touch(std::size_t ci) {
    for (auto it = cache.begin(); it != cache.end(); ++it) {
      if (it->index == ci) {
        cache.splice(cache.begin(), cache, it);
        return &cache.front();
      }
    }
    return nullptr;
  }

  /** The chunks the cache keeps: shuffle_window + 1 (a window may be SIZE_MAX: all). */
  std::size_t cache_chunks() const {
    return o.shuffle_window == std::numeric_limits<std::size_t>::max() ? o.shuffle_window
                                                                       : o.shuffle_window + 1;
  }

  void trim_cache() {
    while (cache.size() > cache_chunks()) cache.pop_back();
  }

  /** Chunk `ci`, decoded (or as stored), with its labels, through a cache of
   *  shuffle_window + 1 chunks. */
  const cached_chunk& chunk(std::size_t ci) {
    if (const cached_chunk* c = touch(ci)) return *c;
    cache.push_front(load(ci));
    trim_cache();
    return cache.front();
  }

  /** Copy sample `s` (at `at` in chunk `c`) to place `i` of `b`. */
  void copy_sample(const cached_chunk& c, u64 at, batch& b, u64 i) const {
    std::copy_n(c.data.begin() + static_cast<std::ptrdiff_t>(at * sample_bytes), sample_bytes,
                b.data.begin() + static_cast<std::ptrdiff_t>(i * sample_bytes));
    if (label_row > 0) {
      std::copy_n(c.labels.begin() + static_cast<std::ptrdiff_t>(at * label_row), label_row,
                  b.labels.begin() + static_cast<std::ptrdiff_t>(i * label_row));
    }
  }

  /** make()'s samples on o.threads threads: the batch's chunks a cacheful at a time, in the
   *  order the batch first needs them; the missing ones of each read side by side, then the
   *  samples they hold copied in parts. The cache ends as the serial path may leave it. */
  void gather_in_parallel(batch& b) {
    const u64 count = b.samples.size();
    std::vector<std::size_t> of(count);     // each sample's chunk
    std::vector<std::size_t> place(count);  // its chunk's place in `needed`
    std::vector<std::size_t> needed;        // the chunks, in the order first needed
    {
      std::unordered_map<std::size_t, std::size_t> first_need;
      for (u64 i = 0; i < count; ++i) {
        of[i] = reader.chunk_of(b.samples[i]);
        const auto [at, fresh] = first_need.try_emplace(of[i], needed.size());
        if (fresh) needed.push_back(of[i]);
        place[i] = at->second;
      }
    }
    const std::size_t per_group = cache_chunks();
    // The batch's places by the group (a cacheful of `needed`) whose chunks hold them.
    std::vector<std::vector<u64>> places_of_group;
    for (u64 i = 0; i < count; ++i) {
      const std::size_t g = place[i] / per_group;
      if (g >= places_of_group.size()) places_of_group.resize(g + 1);
      places_of_group[g].push_back(i);
    }
    // A backend that decodes on several threads has the cores already: its chunks one at a
    // time (each helper's decode would start a team of its own, threads times over).
    const std::size_t load_threads = !o.decode || be->threads() <= 1 ? o.threads : 1;
    std::vector<const cached_chunk*> cached(needed.size());  // by place, once in the cache
    for (std::size_t g0 = 0, g = 0; g0 < needed.size();
         g0 += std::min(per_group, needed.size() - g0), ++g) {
      const std::size_t g1 = g0 + std::min(per_group, needed.size() - g0);
      std::vector<std::size_t> missing;
      for (std::size_t k = g0; k < g1; ++k) {
        if (!touch(needed[k])) missing.push_back(needed[k]);
      }
      // Room first, as the serial path makes it: the group's cached chunks are at the front.
      while (cache.size() > cache_chunks() - missing.size()) cache.pop_back();
      std::vector<cached_chunk> loaded(missing.size());
      dctchop::detail::run_parts(missing.size(), load_threads,
                                 [&](std::size_t k, std::size_t) { loaded[k] = load(missing[k]); });
      for (auto& c : loaded) cache.push_front(std::move(c));
      // The group's chunks first (at most a cacheful), so that the trim keeps every one.
      for (std::size_t k = g0; k < g1; ++k) cached[k] = touch(needed[k]);
      trim_cache();
      const std::vector<u64>& mine = places_of_group[g];
      // Parts of a MiB or more: a thread is not started to copy a few samples.
      constexpr u64 part_bytes = u64(1) << 20;
      const std::size_t parts = static_cast<std::size_t>(
          std::min<u64>({mine.size(), u64(4) * o.threads,
                         std::max<u64>(1, mine.size() * sample_bytes / part_bytes)}));
      dctchop::detail::run_parts(parts, o.threads, [&](std::size_t p, std::size_t) {
        const std::size_t from = mine.size() * p / parts, to = mine.size() * (p + 1) / parts;
        for (std::size_t k = from; k < to; ++k) {
          const u64 i = mine[k];
          copy_sample(*cached[place[i]], b.samples[i] - reader.chunks()[of[i]].first, b, i);
        }
      });
    }
  }

  /** Batch `pos` of `epoch`. */
  batch make(u64 epoch, u64 pos) {
    if (!order_epoch || *order_epoch != epoch) {
      order = rank_order(epoch);
      order_epoch = epoch;
    }
    batch b;
    b.epoch = epoch;
    b.index = pos;
    const u64 first = pos * o.batch_size;
    const u64 count = std::min<u64>(o.batch_size, order.size() - std::min<u64>(first, order.size()));
    b.samples.assign(order.begin() + static_cast<std::ptrdiff_t>(first),
                     order.begin() + static_cast<std::ptrdiff_t>(first + count));
    b.data = byte_buffer(count * sample_bytes, resource_allocator<std::byte>(o.batch_memory));
    if (label_row > 0) b.labels.resize(count * label_row);
    if (o.threads > 1 && count > 1) {
      gather_in_parallel(b);
      return b;
    }
    for (u64 i = 0; i < count; ++i) {
      const u64 s = b.samples[i];
      const std::size_t ci = reader.chunk_of(s);
      copy_sample(chunk(ci), s - reader.chunks()[ci].first, b, i);
    }
    return b;
  }

  /** The next batch to make, in order; epochs roll over. */
  batch make_next() {
    const u64 per_epoch = batches_per_epoch();  // at least 1: the constructor refuses 0
    if (make_pos >= per_epoch) {
      if (make_epoch >= last_epoch) {  // (only a restored state comes near: it would wrap to 0)
        throw error(errc::out_of_range,
                    "epoch " + std::to_string(make_epoch) + " was the last a loader counts");
      }
      ++make_epoch;
      make_pos = 0;
    }
    batch b = make(make_epoch, make_pos);  // a batch that fails is tried again next time
    ++make_pos;
    return b;
  }

  /** True in a child forked from the process that started the prefetch thread: fork() copies
   *  only the calling thread, so the child has no prefetch thread, and the lock and state it
   *  shared may have been copied in the middle of its work. */
  bool forked() const { return thread.joinable() && owner != ::getpid(); }

  void start() {
    if (o.prefetch == 0) return;
    stop = false;
    owner = ::getpid();
    // A library thread: the program's signals go to its own threads (as the command's
    // threads leave them to its main thread), and `top -H` names it.
    thread = dctchop::detail::start_quiet_thread([this] {
      pthread_setname_np(pthread_self(), "dctchop-loader");
      std::unique_lock lock(m);
      for (;;) {
        cv.wait(lock, [&] { return stop || ready.size() < o.prefetch; });
        if (stop) return;
        lock.unlock();
        const u64 epoch = make_epoch, pos = make_pos;
        std::optional<batch> b;
        std::exception_ptr e;
        try {
          b = make_next();
        } catch (...) {
          e = std::current_exception();
        }
        lock.lock();
        if (!e) {
          try {
            ready.push_back(std::move(*b));
          } catch (...) {  // (no memory for the queue): this batch is made again, as any
            e = std::current_exception();  // that failed
            make_epoch = epoch;
            make_pos = pos;
          }
        }
        if (e) {
          err = e;
          cv.notify_all();
          return;
        }
        cv.notify_all();
      }
    });
  }

  void halt() {
    {
      std::lock_guard lock(m);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    ready.clear();
    err = nullptr;
  }

  /** halt(), for good: the batches the caller still holds free their memory as they go. */
  void close() {
    halt();
    if (own_batch_memory) own_batch_memory->release_kept();
  }
};

archive_loader::archive_loader(const std::string& archive, const loader_options& options,
                               std::shared_ptr<backend> be)
    : impl_(std::make_unique<impl>(archive, options, std::move(be))) {
  impl_->start();
}

archive_loader::~archive_loader() {
  // In a forked child there is no thread to stop, and the lock may be held for good.
  if (impl_->forked()) {
    (void)impl_.release();  // (its memory is the parent's pages, copied: left as it is)
    return;
  }
  impl_->close();
}

void archive_loader::renew_if_forked() {
  if (!impl_->forked()) return;
  // A fresh loader in this process, at the same place, and the parent's copy (its thread
  // gone, its lock maybe held, its cache maybe half updated) left as it is, as the destructor
  // does. The fresh one takes over the reader: the same open file, whatever became of its
  // name since (a reader keeps no state between its positioned reads). Its backend and batch
  // memory are new: the parent's thread may have held their locks. (A CUDA backend does not
  // survive fork() at all; it stays, to fail as CUDA does in a child.)
  impl& old = *impl_;
  auto o = old.o;
  o.batch_memory = nullptr;
  std::shared_ptr<backend> be = old.be;
  if (be->name().rfind("cpu", 0) == 0) be = make_backend(backend_kind::cpu, {be->threads()});
  auto fresh = std::make_unique<impl>(std::move(old.reader), o, std::move(be));
  fresh->seed = old.seed;
  fresh->make_epoch = fresh->used_epoch = old.used_epoch;
  fresh->make_pos = fresh->used_pos = old.used_pos;
  (void)impl_.release();
  impl_ = std::move(fresh);
  impl_->start();
}

std::uint64_t archive_loader::samples() const noexcept { return impl_->h.geom.samples; }
std::uint64_t archive_loader::batches_per_epoch() const noexcept { return impl_->batches_per_epoch(); }
std::uint64_t archive_loader::batch_capacity() const noexcept {
  return std::min<std::uint64_t>(impl_->o.batch_size, impl_->samples_per_rank());
}
std::uint64_t archive_loader::sample_bytes() const noexcept { return impl_->sample_bytes; }
std::uint64_t archive_loader::label_bytes() const noexcept { return impl_->label_row; }
const std::string& archive_loader::label_descr() const noexcept { return impl_->label_descr; }
const std::vector<std::uint64_t>& archive_loader::label_shape() const noexcept {
  return impl_->label_shape;
}
const geometry& archive_loader::sample_geometry() const noexcept { return impl_->h.geom; }
dtype archive_loader::sample_type() const noexcept { return impl_->h.type; }
const codec_params& archive_loader::codec() const noexcept { return impl_->h.codec; }

batch archive_loader::next() { return *take(true); }

std::optional<batch> archive_loader::try_next() { return take(false); }

std::optional<batch> archive_loader::take(bool wait) {
  renew_if_forked();
  impl& d = *impl_;
  batch b;
  if (d.o.prefetch == 0) {
    b = d.make_next();
  } else {
    // No prefetch thread: it stopped at a failed batch (below), or could not be started
    // again after a restore or in a forked child. Another start tries that batch again; a
    // thread that cannot be had is this call's error, not a wait for ever.
    if (!d.thread.joinable()) d.start();
    std::unique_lock lock(d.m);
    if (!wait && d.ready.empty() && !d.err) return std::nullopt;
    d.cv.wait(lock, [&] { return !d.ready.empty() || d.err; });
    if (d.ready.empty()) {
      // The thread stored its error and returned: the batch is made again at the next call,
      // as without prefetch. This one reports the error once.
      const std::exception_ptr e = std::exchange(d.err, nullptr);
      lock.unlock();
      d.thread.join();
      std::rethrow_exception(e);
    }
    b = std::move(d.ready.front());
    d.ready.pop_front();
    d.cv.notify_all();
  }
  d.used_epoch = b.epoch;
  d.used_pos = b.index + 1;
  return b;
}

loader_state archive_loader::state() const noexcept {
  const impl& d = *impl_;
  loader_state s{d.used_epoch, d.used_pos, d.seed, d.shape()};
  // The epoch is complete: the next one is due; after the last, the state stays at its end
  // (restored, the loader ends there with next()'s error, as this one does).
  if (s.position >= d.batches_per_epoch() && s.epoch < impl::last_epoch) {
    ++s.epoch;
    s.position = 0;
  }
  return s;
}

void archive_loader::restore(const loader_state& s) {
  renew_if_forked();
  impl& d = *impl_;
  std::optional<loader_state::shape_of_batches> saved = s.batches;
  if (!saved && d.shape().world > 1 && s.position > 0) {
    // Before 2026-11-30: one rank of one (another world), or ranks that each took every
    // world-th sample (before 2026-12-02); within an epoch neither resumes at this loader's
    // batches (some samples skipped, others repeated). An epoch's start has nothing to lose,
    // as the CS-2 feed's old states have it.
    throw error(errc::invalid_argument,
                "this loader state (epoch, position and seed alone: saved before 2026-11-30) "
                "does not say how its loader was sharded, and this one is rank " +
                    std::to_string(d.shape().rank) + " of " + std::to_string(d.shape().world) +
                    ": resumed at batch " + std::to_string(s.position) +
                    " it would give other batches (sharded loaders then took every world-th "
                    "sample); resume from the start of its epoch (position 0) instead");
  }
  if (saved && !saved->samples_per_chunk) saved->samples_per_chunk = d.shape().samples_per_chunk;
  // At an epoch's start (position 0) nothing is skipped or repeated, whatever cut the
  // epochs before: a job restarted with another world or batch size goes on from there.
  if (saved && *saved != d.shape() && s.position > 0) {
    const auto& a = *saved;
    const auto b = d.shape();
    auto text = [](const loader_state::shape_of_batches& x) {
      return std::to_string(x.samples) + " samples, batch_size " + std::to_string(x.batch_size) +
             ", rank " + std::to_string(x.rank) + " of " + std::to_string(x.world) +
             ", shuffle " +
             (x.shuffle ? "on (window " + std::to_string(x.shuffle_window) + " chunks of " +
                              std::to_string(x.samples_per_chunk.value_or(0)) + " samples)"
                        : std::string("off")) +
             ", drop_last " + (x.drop_last ? "on" : "off") +
             (x.sliced ? "" : ", each rank taking every world-th sample (before 2026-12-02)");
    };
    throw error(errc::invalid_argument,
                "this loader state is of a loader with " + text(a) + "; this one has " + text(b) +
                    ": it would resume at other batches");
  }
  if (s.epoch > impl::last_epoch) {
    throw error(errc::invalid_argument,
                "this loader state's epoch, " + std::to_string(s.epoch) +
                    ", is past the last a loader counts, " + std::to_string(impl::last_epoch) +
                    " (the count would wrap to 0)");
  }
  if (s.position > d.batches_per_epoch()) {
    throw error(errc::invalid_argument,
                "this loader state's position, batch " + std::to_string(s.position) +
                    ", is past the end of an epoch of " + std::to_string(d.batches_per_epoch()) +
                    " batches");
  }
  d.halt();
  if (s.seed != d.seed) d.order_epoch.reset();  // the order depends on (seed, epoch) only
  d.seed = s.seed;
  d.make_epoch = s.epoch;
  d.make_pos = s.position;
  d.used_epoch = s.epoch;
  d.used_pos = s.position;
  d.start();
}

std::vector<std::uint64_t> archive_loader::epoch_order(std::uint64_t epoch) const {
  return impl_->rank_order(epoch);
}

}  // namespace dctchop::loaders
