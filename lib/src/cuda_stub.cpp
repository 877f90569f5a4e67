// The dctchop::cuda entry points in a build without the CUDA backend.
#include "dctchop/cuda.hpp"
#include "dctchop/error.hpp"

namespace dctchop::cuda {
namespace {
[[noreturn]] void unavailable() {
  throw error(errc::backend_unavailable, "this dctchop was built without the CUDA backend");
}
}  // namespace

bool built() noexcept { return false; }
int device_count() noexcept { return 0; }
std::string device_status() { return "not built"; }

void decode_device_async(const codec_params&, const geometry&, dtype, std::uint64_t, const void*,
                         void*, void*, kernel_layout) {
  unavailable();
}
void decode_device(const codec_params&, const geometry&, dtype, std::uint64_t, const void*, void*,
                   void*, kernel_layout) {
  unavailable();
}
void encode_device_async(const codec_params&, const geometry&, dtype, std::uint64_t, const void*,
                         void*, unsigned long long*, void*, kernel_layout) {
  unavailable();
}
void encode_device(const codec_params&, const geometry&, dtype, std::uint64_t, const void*, void*,
                   void*, kernel_layout) {
  unavailable();
}

struct gemm_decoder::impl {};
gemm_decoder::gemm_decoder() { unavailable(); }
gemm_decoder::~gemm_decoder() = default;
void gemm_decoder::decode_async(const codec_params&, const geometry&, dtype, std::uint64_t,
                                const void*, void*, void*) {
  unavailable();
}
void gemm_decoder::decode(const codec_params&, const geometry&, dtype, std::uint64_t, const void*,
                          void*, void*) {
  unavailable();
}

std::shared_ptr<std::pmr::memory_resource> pinned_memory(int) { unavailable(); }
bool is_pinned(const void*, std::size_t) noexcept { return false; }

struct device_ring::impl {};
device_ring::device_ring(int, std::size_t, std::uint64_t, std::uint64_t) { unavailable(); }
device_ring::~device_ring() = default;
void* device_ring::decode(std::size_t, const codec_params&, const geometry&, dtype, std::uint64_t,
                          const void*, std::uint64_t) {
  unavailable();
}
void* device_ring::decode_async(std::size_t, const codec_params&, const geometry&, dtype,
                                std::uint64_t, const void*, std::uint64_t) {
  unavailable();
}
void device_ring::wait(std::size_t) { unavailable(); }
void device_ring::released(std::size_t, void*) { unavailable(); }

}  // namespace dctchop::cuda
