// Internal: the CPU kernels, compiled once per instruction set into namespaces generic and
// (on x86-64) avx2. The declarations are the same for every copy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "dctchop/codec.hpp"

#define DCTCHOP_DECLARE_CPU_KERNELS(ns)                                                      \
  namespace dctchop::detail::ns {                                                            \
  /** Encode every sample of v; on a value that does not fit, lowers first_bad to its      \
   *  sample index and carries on. */                                                        \
  void encode_batch(const codec_params& p, const const_sample_view& v, std::byte* coeffs,   \
                    int threads, std::atomic<std::uint64_t>& first_bad);                    \
  void decode_batch(const codec_params& p, const std::byte* coeffs, const sample_view& v,   \
                    int threads);                                                            \
  }

DCTCHOP_DECLARE_CPU_KERNELS(generic)
DCTCHOP_DECLARE_CPU_KERNELS(avx2)
