#include "dctchop/device_loader.hpp"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <mutex>

#include "dctchop/cuda.hpp"
#include "dctchop/error.hpp"

namespace dctchop::loaders {
namespace {

using u64 = std::uint64_t;

DLDataType dl_type(dtype t) {
  switch (t) {
    case dtype::u8: return {kDLUInt, 8, 1};
    case dtype::u16: return {kDLUInt, 16, 1};
    case dtype::i16: return {kDLInt, 16, 1};
    case dtype::f32: return {kDLFloat, 32, 1};
    case dtype::f64: return {kDLFloat, 64, 1};
    case dtype::f16: return {kDLFloat, 16, 1};
    case dtype::i8: return {kDLInt, 8, 1};
    case dtype::i32: return {kDLInt, 32, 1};
    case dtype::u32: return {kDLUInt, 32, 1};
  }
  throw error(errc::internal, "unknown dtype");
}

/** The buffers that batches are handed out in, and which of them tensors hold. Shared by the
 *  loader and its tensors: a tensor outlives the loader, whose file and prefetch thread go
 *  with it, and keeps only these. */
struct slot_pool {
  std::unique_ptr<cuda::device_ring> ring;  // nullptr on the host
  std::mutex m;
  std::vector<bool> held;             // slots owned by tensors (or the pending decode)
  std::vector<byte_buffer> host_out;  // the host path's batches

  /** A free slot; when every slot is held, -1, or an error if `required` (nothing waits: a
   *  single-threaded caller that holds every buffer would wait forever). */
  long take(bool required) {
    std::unique_lock lock(m);
    std::size_t slot = 0;
    auto free_one = [&] {
      for (slot = 0; slot < held.size(); ++slot) {
        if (!held[slot]) return true;
      }
      return false;
    };
    if (!free_one()) {
      if (!required) return -1;
      refuse();
    }
    held[slot] = true;
    return static_cast<long>(slot);
  }

  [[noreturn]] static void refuse() {
    throw error(errc::invalid_argument,
                "every buffer of the device loader is held by a batch still in use: free one "
                "(drop its tensor) before asking for the next, or give the loader more buffers");
  }

  /** Slots held, by tensors and the pending decode. */
  std::size_t held_count() {
    std::lock_guard lock(m);
    return static_cast<std::size_t>(std::count(held.begin(), held.end(), true));
  }

  void release(std::size_t slot) {
    std::lock_guard lock(m);
    held[slot] = false;
  }
};

}  // namespace

struct device_loader::impl {
  int device;
  archive_loader batches;  // coefficients for the device, decoded values on the host
  std::shared_ptr<slot_pool> pool = std::make_shared<slot_pool>();
  // The device path decodes one batch ahead: while the caller trains on batch i, batch i+1
  // is copied and decoded on the ring's stream.
  struct ahead {
    bool active = false;   // its decode is queued in `slot`
    bool fetched = false;  // b and after hold the loader's next batch (kept when a decode
                           // fails to queue: the next try decodes it, not the batch after)
    std::size_t slot = 0;
    batch b;
    loader_state after;  // the state once this batch is handed out
    void* data = nullptr;
  } pending;
  loader_state handed;  // the state after the batches handed out
  std::exception_ptr ahead_error;  // a read-ahead that failed: raised by the next next()

  static loader_options inner(const loader_options& opt, int dev) {
    if (dev < -1) {  // (-2 decoded on the host without a word)
      throw error(errc::invalid_argument, "device " + std::to_string(dev) +
                                              ": expected a CUDA device's index (0 or more), or "
                                              "-1 for the host");
    }
    auto c = opt;
    c.decode = dev < 0;  // the host decodes on the loader's prefetch thread
    if (dev >= 0 && !c.batch_memory) {
      // Batches are gathered into pinned memory, which the ring copies to the device
      // asynchronously; recycled, since pinning pages is slow.
      c.batch_memory = std::make_shared<recycling_resource>(cuda::pinned_memory(dev));
    }
    return c;
  }

  impl(const std::string& path, const loader_options& opt, int dev, int buffers)
      : device(dev), batches(path, inner(opt, dev)) {
    if (buffers < 1) throw error(errc::invalid_argument, "a device loader needs a buffer");
    if (buffers > max_buffers) {  // (each a whole decoded batch; and buffers + 1 is an int)
      throw error(errc::invalid_argument, "buffers " + std::to_string(buffers) + ": at most " +
                                              std::to_string(max_buffers) + " batches held at once");
    }
    pool->held.assign(static_cast<std::size_t>(buffers + (dev >= 0 ? 1 : 0)), false);
    handed = batches.state();
    if (device >= 0) {
      // Slots for the largest batch this rank gets: a batch size past the rank's share (SIZE_MAX,
      // "one batch of everything") is one batch of that share, and must not size (or, the
      // product wrapping, undersize) the device buffers, nor, sharded, size them for the
      // whole archive on every rank.
      const u64 most = batches.batch_capacity();
      const u64 out_bytes =
          most * batches.sample_geometry().values_per_sample() * size_of(batches.sample_type());
      pool->ring = std::make_unique<cuda::device_ring>(device, pool->held.size(),
                                                       most * batches.sample_bytes(), out_bytes);
    } else {
      pool->host_out.resize(pool->held.size());
    }
  }

  ~impl() {
    // The batch decoded ahead is still being copied from: it goes only once that is done.
    if (pending.active) {
      try {
        pool->ring->wait(pending.slot);
      } catch (...) {
        // The device failed: nothing more will read the batch.
      }
      pool->release(pending.slot);
    }
  }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  /** Queue the decode of the loader's next batch into a free slot (device path). */
  void start_ahead(bool slot_required) {
    const long slot = pool->take(slot_required);
    if (slot < 0) return;  // every slot is held: decode when asked
    try {
      if (!pending.fetched) {
        pending.b = batches.next();
        pending.after = batches.state();
        pending.fetched = true;
      }
      pending.slot = static_cast<std::size_t>(slot);
      pending.data = pool->ring->decode_async(pending.slot, batches.codec(), batches.sample_geometry(),
                                        batches.sample_type(), pending.b.samples.size(),
                                        pending.b.data.data(), pending.b.data.size());
      pending.active = true;
    } catch (...) {
      pool->release(static_cast<std::size_t>(slot));
      throw;
    }
  }

  /** Drop a decode queued ahead (restore). */
  void drop_ahead() {
    if (pending.active) {
      pool->ring->wait(pending.slot);
      pool->release(pending.slot);
    }
    pending = ahead{};
  }
};

namespace {

/** What a handed-out tensor keeps alive: the loader's buffers (not the loader), its slot,
 *  the shape. */
struct tensor_ctx {
  std::shared_ptr<slot_pool> owner;
  std::size_t slot;
  void* stream;  // the consumer's stream (device path)
  std::vector<int64_t> shape;
  DLManagedTensor t;
};

}  // namespace

device_loader::device_loader(const std::string& archive, const loader_options& options, int device,
                             int buffers)
    : impl_(std::make_shared<impl>(archive, options, device, buffers)) {}

device_loader::~device_loader() = default;

DLManagedTensor* device_loader::next(std::vector<u64>* samples, std::vector<std::byte>* labels,
                                     void* consumer_stream) {
  impl& d = *impl_;
  if (d.ahead_error) std::rethrow_exception(std::exchange(d.ahead_error, nullptr));
  batch b;
  std::size_t slot = 0;
  void* data = nullptr;
  if (d.pool->ring) {
    // The ring's extra slot is the batch decoded ahead, not one more for the caller to hold:
    // as on the host, a caller that holds `buffers` tensors is refused (before anything moves).
    const std::size_t buffers = d.pool->held.size() - 1;
    if (d.pool->held_count() - (d.pending.active ? 1 : 0) >= buffers) slot_pool::refuse();
    if (!d.pending.active) d.start_ahead(true);
    d.pool->ring->wait(d.pending.slot);
    b = std::move(d.pending.b);
    slot = d.pending.slot;
    data = d.pending.data;
    d.handed = d.pending.after;
    d.pending = impl::ahead{};
    try {
      d.start_ahead(false);  // the next batch decodes while the caller uses this one
    } catch (...) {
      d.ahead_error = std::current_exception();  // this batch is fine: hand it out first
    }
  } else {
    slot = static_cast<std::size_t>(d.pool->take(true));  // first: a refusal loses no batch
    try {
      b = d.batches.next();  // decoded on the loader's prefetch thread
    } catch (...) {
      d.pool->release(slot);
      throw;
    }
    d.handed = d.batches.state();
    d.pool->host_out[slot] = std::move(b.data);
    data = d.pool->host_out[slot].data();
  }
  const u64 n = b.samples.size();
  const geometry& g = d.batches.sample_geometry();
  const dtype t = d.batches.sample_type();
  std::unique_ptr<tensor_ctx> owned;
  try {
    owned.reset(new tensor_ctx{d.pool, slot, consumer_stream, {}, {}});
  } catch (...) {
    d.pool->release(slot);
    throw;
  }
  tensor_ctx* ctx = owned.release();
  ctx->shape.push_back(static_cast<int64_t>(n));
  for (const u64 axis : g.sample_shape()) ctx->shape.push_back(static_cast<int64_t>(axis));
  DLTensor& dl = ctx->t.dl_tensor;
  dl.data = data;
  dl.device = d.pool->ring ? DLDevice{kDLCUDA, d.device} : DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(ctx->shape.size());
  dl.dtype = dl_type(t);
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;  // compact, row-major
  dl.byte_offset = 0;
  ctx->t.manager_ctx = ctx;
  ctx->t.deleter = [](DLManagedTensor* self) {
    auto* c = static_cast<tensor_ctx*>(self->manager_ctx);
    if (c->owner->ring) {
      try {
        c->owner->ring->released(c->slot, c->stream);
      } catch (...) {
        // A deleter cannot fail. released() waits for the consumer's stream when it cannot
        // record the event; this is when that wait failed too (the device is lost).
      }
    }
    c->owner->release(c->slot);
    delete c;
  };
  if (samples) *samples = std::move(b.samples);
  if (labels) *labels = std::move(b.labels);
  return &ctx->t;
}

std::uint64_t device_loader::batches_per_epoch() const noexcept { return impl_->batches.batches_per_epoch(); }
loader_state device_loader::state() const noexcept { return impl_->handed; }
void device_loader::restore(const loader_state& s) {
  // First the loader, which refuses another loader's state before it changes anything: the
  // batch decoded ahead is dropped only once the restore is sure to happen.
  impl_->batches.restore(s);
  impl_->drop_ahead();
  impl_->ahead_error = nullptr;
  impl_->handed = impl_->batches.state();
}
int device_loader::device() const noexcept { return impl_->pool->ring ? impl_->device : -1; }
const archive_loader& device_loader::source() const noexcept { return impl_->batches; }

}  // namespace dctchop::loaders
