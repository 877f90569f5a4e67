/** @file accelerators.hpp
 *  Feeds for AI accelerators that decode on the device with two matrix products
 *  (dctchop/matrix_form.hpp): a host-side feed with the Poplar StreamCallback contract for
 *  Graphcore IPUs, and per-worker feeds for Cerebras CS-2. Both hand over compressed batches
 *  (the stored coefficients) and export the decode matrices L and R in the device's number
 *  format. Neither needs the vendor SDK: the IPU contract is mirrored here as an interface, and
 *  an adapter of a few lines binds it to poplar::StreamCallback.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dctchop/loader.hpp"
#include "dctchop/types.hpp"

namespace dctchop::accel {

using loaders::archive_loader;
using loaders::batch;
using loaders::loader_options;
using loaders::loader_state;

/** The decode matrices of a plane shape in a device number format: Lt (hp x kh) and R
 *  (kw x wp), row-major, as f16, bf16 (raw 16-bit patterns) or f32 bytes. A plane decodes as
 *  Lt C R plus p.offset (nonzero for float data too), cropped to height x width. */
struct device_matrices {
  std::uint64_t hp = 0, wp = 0, kh = 0, kw = 0;
  coeff_type format = coeff_type::f32;
  std::vector<std::byte> lt, r;
};
/** `format` must be f16, bf16 or f32. */
device_matrices export_decode_matrices(const codec_params& p, std::uint64_t height,
                                       std::uint64_t width, coeff_type format);

// ---- Graphcore IPU ----------------------------------------------------------------------

/** Mirror of poplar::StreamCallback: the engine asks for the next micro-batch either
 *  speculatively (prefetch, which it may later withdraw with invalidate_prefetched) or for
 *  real (fetch), and says when a transfer is complete. */
class stream_callback {
 public:
  enum class result { success, not_available };
  virtual ~stream_callback() = default;
  /** Fill `dst` with the next micro-batch if one is ready (it does not wait for the loader's
   *  prefetch thread: a micro-batch still being read answers not_available; with
   *  loader.prefetch 0 there is no thread, and it reads the micro-batch itself); the engine
   *  may withdraw it. */
  virtual result prefetch(void* dst) noexcept = 0;
  /** Fill `dst` with the next micro-batch now. */
  virtual void fetch(void* dst) noexcept = 0;
  /** The oldest fetched or prefetched micro-batch has been transferred for good. (ipu_feed
   *  keeps a call with none in flight as an error for rethrow_error().) */
  virtual void complete() noexcept = 0;
  /** Every prefetched micro-batch not yet complete is withdrawn: they come again, in the same
   *  order, from the next prefetch or fetch calls. */
  virtual void invalidate_prefetched() noexcept = 0;
};

struct ipu_options {
  std::size_t micro_batch = 1;
  std::size_t device_iterations = 1;
  std::size_t replicas = 1;
  std::size_t gradient_accumulation = 1;
  std::size_t max_prefetched = 8;  ///< prefetch answers not_available beyond this
  /** shuffle, seed...; batch_size, decode and drop_last (on: every micro-batch has the
   *  static shape) are set here. */
  loader_options loader;
};

/** Compressed micro-batches for an IPU input stream. Each callback buffer receives one
 *  micro-batch: micro_batch samples of coefficient bytes, then their labels (when the archive
 *  has them). A host step moves micro_batch x device_iterations x replicas x gradient
 *  accumulation samples (step_bytes()). Poplar calls a stream's callback per replica
 *  (Engine::connectStreamToCallback(handle, replica, callback)): give each replica its own
 *  feed, with loader.rank the replica's index and loader.world the replicas, so that each
 *  gets its shard in an order that does not depend on how the engine interleaves them
 *  (across several hosts, world is every host's replicas; replicas > 1 with a world they do not
 *  divide is error(invalid_argument)). */
class ipu_feed final : public stream_callback {
 public:
  ipu_feed(const std::string& archive, const ipu_options& options);
  ~ipu_feed() override;
  std::size_t micro_batch_bytes() const noexcept;  ///< one callback buffer
  std::size_t step_bytes() const noexcept;         ///< one host step, every replica
  std::uint64_t completed() const noexcept;  ///< micro-batches completed since construction
  /** The resumable state: the micro-batch after the last completed one. */
  loader_state state() const;
  const geometry& sample_geometry() const noexcept;
  const codec_params& codec() const noexcept;

  result prefetch(void* dst) noexcept override;
  void fetch(void* dst) noexcept override;
  void complete() noexcept override;
  void invalidate_prefetched() noexcept override;
  /** Continue from a saved state(): the next micro-batch handed out is the one after the
   *  last completed one. Micro-batches in flight or withdrawn are dropped and an error held
   *  from a callback is cleared: call it between engine runs. error(invalid_argument), with
   *  nothing changed, for a state of another loader (archive_loader::restore). */
  void restore(const loader_state& s);
  /** An error met inside a callback (which must not throw), rethrown here; call it after each
   *  engine run. The error stays (rethrown by every call, and prefetch() answers
   *  not_available) until restore(state()), which goes on after the last micro-batch
   *  completed: a fetch that failed handed the engine zeros in place of its micro-batch, and
   *  a run should not go on as if it had trained on data. */
  void rethrow_error();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// ---- Cerebras CS-2 ----------------------------------------------------------------------

struct cs2_options {
  std::size_t batch_size = 32;  ///< per worker; every batch has this static shape
  int num_workers = 1;
  int worker_id = 0;
  loader_options loader;  ///< shuffle, seed, window, prefetch; drop_last is forced on
};

/** One input worker's feed: static-shape compressed batches of this worker's shard, and a
 *  state dict to restart from. */
class cs2_worker_feed {
 public:
  cs2_worker_feed(const std::string& archive, const cs2_options& options);
  /** The next batch (coefficients, decode=false), always batch_size samples. */
  batch next();
  std::uint64_t batches_per_epoch() const noexcept;
  /** The loader behind the feed: the archive's geometry, dtype, codec (for
   *  export_decode_matrices) and labels, what a batch holds. */
  const archive_loader& loader() const noexcept;
  /** JSON: the loader's state (loader_state::to_json) with the worker's id and count, so that
   *  a state is not restored into another worker or a feed that cuts other batches. */
  std::string state_dict() const;
  void load_state_dict(const std::string& json);

 private:
  cs2_options o_;
  archive_loader l_;
};

}  // namespace dctchop::accel
