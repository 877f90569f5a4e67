/** @file device_loader.hpp
 *  The GPU loader: batches of an archive decoded on a CUDA device (or, without one, on the
 *  host) and handed out as DLPack tensors, which PyTorch, JAX and CuPy take without a copy.
 *
 *  Compressed batches come from an archive_loader (read, shuffled and sharded on its
 *  prefetch thread, decode=false): only the coefficients cross PCIe, through a pinned buffer,
 *  and the decode runs on the device into a ring of `buffers` + 1 device buffers (one for the
 *  batch decoded ahead), so that a batch is decoded while the training step uses the
 *  previous one. A tensor's buffer
 *  returns to the ring when its DLPack deleter is called; asking for a batch while the caller
 *  still holds `buffers` tensors is an error (it would wait forever in a single thread).
 *  Tensors outlive the loader: destroying it stops the prefetch thread and closes the file,
 *  and the buffers go with the last tensor that holds one.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dctchop/loader.hpp"

struct DLManagedTensor;

namespace dctchop::loaders {

class device_loader {
 public:
  /** The most batches a caller may hold at once (`buffers`). */
  static constexpr int max_buffers = 1024;
  /** `device`: a CUDA device number, or -1 for the host (decode on the CPU). A device asked
   *  for in a build without CUDA, or without that device, is error(backend_unavailable).
   *  options.decode is ignored (the decode happens here). `buffers` is 1..max_buffers, else
   *  error(invalid_argument). */
  device_loader(const std::string& archive, const loader_options& options, int device = -1,
                int buffers = 2);
  ~device_loader();
  device_loader(const device_loader&) = delete;
  device_loader& operator=(const device_loader&) = delete;

  /** The next batch as a DLPack tensor of shape (N, *sample shape) and the archive's dtype,
   *  on the device (kDLCUDA) or the host (kDLCPU), ready to use (its decode has finished).
   *  The caller owns it and must call its deleter. `samples` and `labels`, when given, get the
   *  batch's sample indices and label bytes. `consumer_stream` (a cudaStream_t) is the stream
   *  that uses the tensor: when the tensor is deleted, its buffer is reused only after the
   *  work queued on that stream by then has run (nullptr: the default stream). */
  DLManagedTensor* next(std::vector<std::uint64_t>* samples = nullptr,
                        std::vector<std::byte>* labels = nullptr,
                        void* consumer_stream = nullptr);
  std::uint64_t batches_per_epoch() const noexcept;
  loader_state state() const noexcept;
  void restore(const loader_state& s);
  /** -1 for the host, else the CUDA device. */
  int device() const noexcept;
  /** The batches' source: its label_descr() and label_shape() interpret the label bytes.
   *  Compressed (decode=false) for a device; with device -1 the host decodes there, and
   *  its sample_bytes() are decoded ones. */
  const archive_loader& source() const noexcept;

  struct impl;  // opaque; shared with the tensors still out, which return their buffers to it

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace dctchop::loaders
