#include "dctchop/device_loader.hpp"

#include <dlpack/dlpack.h>

#include <condition_variable>
#include <cstring>
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
  }
  throw error(errc::internal, "unknown dtype");
}

}  // namespace

struct device_loader::impl {
  loader_options o;
  archive_loader coeffs;  // decode=false: the stored coefficients, prefetched
  int device;
  std::unique_ptr<cuda::device_ring> ring;  // nullptr on the host
  std::shared_ptr<backend> cpu;
  std::mutex m;
  std::condition_variable cv;
  std::vector<bool> held;                       // ring slots owned by tensors
  std::vector<std::vector<std::byte>> host_out; // the host path's buffers

  impl(const std::string& path, const loader_options& opt, int dev, int buffers)
      : o(opt), coeffs(path, [&] {
          auto c = opt;
          c.decode = false;
          return c;
        }()), device(dev) {
    if (buffers < 1) throw error(errc::invalid_argument, "a device loader needs a buffer");
    held.assign(static_cast<std::size_t>(buffers), false);
    const u64 batch_values = o.batch_size * coeffs.sample_geometry().values_per_sample();
    const u64 out_bytes = batch_values * size_of(coeffs.sample_type());
    if (device >= 0) {
      ring = std::make_unique<cuda::device_ring>(device, static_cast<std::size_t>(buffers),
                                                 o.batch_size * coeffs.sample_bytes(), out_bytes);
    } else {
      cpu = make_backend(backend_kind::cpu);
      host_out.assign(static_cast<std::size_t>(buffers), std::vector<std::byte>(out_bytes));
    }
  }
};

namespace {

/** What a handed-out tensor keeps alive: the loader's state, its ring slot, the shape. */
struct tensor_ctx {
  std::shared_ptr<device_loader::impl> owner;
  std::size_t slot;
  std::vector<int64_t> shape;
  DLManagedTensor t;
};

}  // namespace

device_loader::device_loader(const std::string& archive, const loader_options& options, int device,
                             int buffers)
    : impl_(std::make_shared<impl>(archive, options, device, buffers)) {}

device_loader::~device_loader() = default;

DLManagedTensor* device_loader::next(std::vector<u64>* samples, std::vector<std::byte>* labels) {
  impl& d = *impl_;
  batch b = d.coeffs.next();
  const u64 n = b.samples.size();
  std::size_t slot = 0;
  {
    std::unique_lock lock(d.m);
    d.cv.wait(lock, [&] {
      for (slot = 0; slot < d.held.size(); ++slot) {
        if (!d.held[slot]) return true;
      }
      return false;
    });
    d.held[slot] = true;
  }
  const geometry& g = d.coeffs.sample_geometry();
  const dtype t = d.coeffs.sample_type();
  void* data = nullptr;
  try {
    if (d.ring) {
      data = d.ring->decode(slot, d.coeffs.codec(), g, t, n, b.data.data(), b.data.size());
    } else {
      auto& out = d.host_out[slot];
      d.cpu->decode(d.coeffs.codec(), b.data, make_view(g, t, static_cast<void*>(out.data()), n));
      data = out.data();
    }
  } catch (...) {
    std::lock_guard lock(d.m);
    d.held[slot] = false;
    throw;
  }
  auto* ctx = new tensor_ctx{impl_, slot, {}, {}};
  ctx->shape.push_back(static_cast<int64_t>(n));
  const auto full = g.shape();
  for (std::size_t i = (g.lay == layout::hw ? 0 : 1); i < full.size(); ++i) {
    ctx->shape.push_back(static_cast<int64_t>(full[i]));
  }
  DLTensor& dl = ctx->t.dl_tensor;
  dl.data = data;
  dl.device = d.ring ? DLDevice{kDLCUDA, d.device} : DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(ctx->shape.size());
  dl.dtype = dl_type(t);
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;  // compact, row-major
  dl.byte_offset = 0;
  ctx->t.manager_ctx = ctx;
  ctx->t.deleter = [](DLManagedTensor* self) {
    auto* c = static_cast<tensor_ctx*>(self->manager_ctx);
    {
      std::lock_guard lock(c->owner->m);
      c->owner->held[c->slot] = false;
    }
    c->owner->cv.notify_all();
    delete c;
  };
  if (samples) *samples = std::move(b.samples);
  if (labels) *labels = std::move(b.labels);
  return &ctx->t;
}

std::uint64_t device_loader::batches_per_epoch() const noexcept { return impl_->coeffs.batches_per_epoch(); }
loader_state device_loader::state() const noexcept { return impl_->coeffs.state(); }
void device_loader::restore(const loader_state& s) { impl_->coeffs.restore(s); }
int device_loader::device() const noexcept { return impl_->ring ? impl_->device : -1; }

}  // namespace dctchop::loaders
