/** @file loader.hpp
 *  Training-time batches from a .dcz archive: shuffled (reproducibly, differently each
 *  epoch, and chunk by chunk so that reads stay mostly sequential), sharded by (rank, world),
 *  prefetched on a background thread, and resumable from a saved state.
 *
 *  The order of an epoch is a pure function of (seed, epoch): the archive's chunks are put in
 *  a shuffled order, then the samples of each window of `shuffle_window` consecutive chunks
 *  (in that order) are shuffled together. Every rank computes the same global order and takes
 *  its own contiguous slice of it, so that it reads about 1/world of the chunks. Every rank
 *  gets the same number of batches, so the ranks step together: with drop_last, whole batches
 *  of its n/world samples; without, ceil(n/world) samples, the last ranks' slices wrapping
 *  around to the start of the order (as PyTorch's DistributedSampler pads): an epoch then
 *  holds up to world-1 repeats.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/host_memory.hpp"
#include "dctchop/types.hpp"

namespace dctchop::loaders {

struct loader_options {
  std::size_t batch_size = 32;
  bool shuffle = true;            ///< false: samples in archive order, every epoch
  std::uint64_t seed = 0;         ///< the order depends only on (seed, epoch)
  std::size_t shuffle_window = 4; ///< chunks whose samples are shuffled together (0 is taken as 1)
  int rank = 0;                   ///< this process's shard, 0..world-1
  int world = 1;                  ///< number of shards
  bool drop_last = true;          ///< drop the last partial batch of each rank; false: a
                                  ///< smaller last batch (sharded: see the file's comment)
  std::size_t prefetch = 2;       ///< batches prepared ahead on a background thread (0: none)
  static constexpr std::size_t max_prefetch = 1024;  ///< the most prefetch takes
  bool decode = true;             ///< true: batches hold decoded values; false: coefficients
  /** Threads that make one batch together: the thread that makes it (the prefetch thread, or
   *  next() without prefetch) and up to threads - 1 more, started for each step, read,
   *  check and decode the chunks it needs side by side (where the decoding backend has
   *  several threads, it takes the chunks one after another) and copy its samples in parts
   *  of a MiB or more. One thread copies at a few GB/s, which a
   *  GPU that decodes at hundreds outruns (the device loader, whose batches are gathered on
   *  the host). The batches are the same for any number. */
  std::size_t threads = 1;
  static constexpr std::size_t max_threads = 256;  ///< the most threads takes
  /** Where batch::data is allocated. nullptr: memory of the loader's own, recycled from one
   *  batch to the next, in huge pages (recycled_large_pages(), host_memory.hpp), keeping
   *  as many freed batches as the pipeline uses (prefetch + 3, at most 16) and none once
   *  the loader is gone: a batch of tens of megabytes taken from the heap each time came
   *  as fresh pages, and its gathering spent most of its time in page faults. The device
   *  loader, unless given one, takes pinned memory (cuda::pinned_memory() under a
   *  recycling_resource), so a batch is gathered straight into memory the GPU copies from.
   *  Allocated on the prefetch thread, freed wherever the batch goes: it must be
   *  thread-safe. */
  std::shared_ptr<std::pmr::memory_resource> batch_memory;
};

/** One batch: `samples` (global indices into the archive) in batch order, their data
 *  (decoded values in the archive's dtype and layout, or stored coefficients) and labels. */
struct batch {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;              ///< batch number within the epoch, for this rank
  std::vector<std::uint64_t> samples;
  byte_buffer data;                     ///< samples.size() * sample_bytes(), in batch_memory
  std::vector<std::byte> labels;        ///< samples.size() * label_bytes(), when the archive has labels
};

/** Where a loader stands: the next batch it returns is batch `position` of `epoch`. */
struct loader_state {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  std::uint64_t seed = 0;  ///< restore takes it: the state's seed, not the loader's, goes on
  /** How the loader that saved it cuts the archive into batches, so that restore refuses a
   *  state of another loader (another batch size, shard or shuffle would resume elsewhere).
   *  States saved before these were recorded lack them and are taken as they are. */
  struct shape_of_batches {
    std::uint64_t samples = 0, batch_size = 0, shuffle_window = 0;
    int rank = 0, world = 1;
    bool shuffle = true, drop_last = true;
    /** The archive's samples per chunk, which a shuffled order depends on (0 unshuffled);
     *  absent from states saved before 2026-12-01, which then match any. */
    std::optional<std::uint64_t> samples_per_chunk;
    /** Ranks take slices of the order; false in states of world > 1 saved before
     *  2026-12-02, when each rank took every world-th sample (restore refuses those). */
    bool sliced = true;
    bool operator==(const shape_of_batches&) const = default;
  };
  std::optional<shape_of_batches> batches;
  /** As JSON text, to save beside a training checkpoint. */
  std::string to_json() const;
  /** Parse to_json()'s text; error(invalid_argument) when it is not one. */
  static loader_state from_json(const std::string& text);
};

/** Batches from one archive. Not thread-safe: one consumer thread. A loader copied into a
 *  child by fork() (a DataLoader worker, say) goes on in the child where it stood: the
 *  prefetch thread, which fork does not copy, is started again there. */
class archive_loader {
 public:
  /** Opens `archive` (a regular file: random access is needed). `be` decodes when
   *  options.decode; nullptr uses a CPU backend. Errors: error(invalid_argument) for bad
   *  options, the archive reader's errors for the file. */
  archive_loader(const std::string& archive, const loader_options& options,
                 std::shared_ptr<backend> be = nullptr);
  ~archive_loader();
  archive_loader(const archive_loader&) = delete;
  archive_loader& operator=(const archive_loader&) = delete;

  /** Samples in the archive. */
  std::uint64_t samples() const noexcept;
  /** Batches per epoch for this rank. */
  std::uint64_t batches_per_epoch() const noexcept;
  /** The most samples a batch of this rank holds: the batch size, or this rank's samples of
   *  an epoch where they are fewer (drop_last off). For sizing buffers. */
  std::uint64_t batch_capacity() const noexcept;
  /** Bytes of one sample in batch::data (decoded values or coefficients). */
  std::uint64_t sample_bytes() const noexcept;
  /** Bytes of one sample's labels (0: the archive has none). */
  std::uint64_t label_bytes() const noexcept;
  /** The labels' NumPy descr ("<i8"...) and the axes of one sample's labels (empty for one
   *  scalar label per sample): to interpret batch::labels. Empty descr: no labels. */
  const std::string& label_descr() const noexcept;
  const std::vector<std::uint64_t>& label_shape() const noexcept;
  /** The archive's geometry, dtype and codec, to interpret batch::data. */
  const geometry& sample_geometry() const noexcept;
  dtype sample_type() const noexcept;
  const codec_params& codec() const noexcept;

  /** The next batch; after the last batch of an epoch comes batch 0 of the next. Errors of the
   *  background thread (a corrupt chunk) are rethrown here. */
  batch next();
  /** The next batch if it is ready, without waiting for the prefetch thread (std::nullopt:
   *  it is still being made; try again, or call next()). Without prefetch (options.prefetch
   *  0) it makes the batch, as next() does. Errors as next(). */
  std::optional<batch> try_next();
  /** The state after the batches returned so far. */
  loader_state state() const noexcept;
  /** Continue from a saved state: the next batch is batch `position` of `epoch`, in the order
   *  of `seed`. error(invalid_argument), with nothing changed, for a state of a loader that
   *  cuts the archive into other batches (loader_state::batches) or a position past the
   *  epoch. */
  void restore(const loader_state& s);

  /** This rank's samples of an epoch, in order (before batching): for tests and tools. */
  std::vector<std::uint64_t> epoch_order(std::uint64_t epoch) const;

 private:
  void renew_if_forked();
  std::optional<batch> take(bool wait);
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dctchop::loaders
