// GPU tests (ctest label "gpu"): the CUDA backend against the CPU backend on the same inputs.
// Every test is reported as skipped where no CUDA device is present (or the backend was not
// built); the arithmetic itself is covered on the CPU by test_block.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../ptx_emulation.hpp"
#include "../test_util.hpp"
#include "backends.hpp"
#include "cuda_errors.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/error.hpp"
#include "dctchop/host_memory.hpp"
#include "dctchop/metrics.hpp"
#include "device_conversions.hpp"
#include "foreign_arch.hpp"
#include "starting_backend.hpp"

namespace {

using namespace dctchop;
using u64 = std::uint64_t;

/** Skips without a device, unless DCTCHOP_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it on a
 *  GPU machine, where a skip would hide a broken driver or build). */
#define REQUIRE_DEVICE()                                                               \
  do {                                                                                 \
    if (!cuda::available()) {                                                          \
      const char* need = std::getenv("DCTCHOP_REQUIRE_GPU");                           \
      if (need != nullptr && std::string(need) == "1") FAIL() << "no CUDA device";     \
      GTEST_SKIP() << "no CUDA device (or CUDA not built)";                            \
    }                                                                                  \
  } while (0)

/** How two arrays differ: one summary instead of an assertion per value, so that a wrong
 *  result gives a few lines, not millions (the GPU check's output must come back whole). */
struct difference {
  u64 count = 0;        ///< values that differ by more than the tolerance
  u64 nonzero = 0;      ///< values that differ at all
  u64 first = 0;        ///< index of the first beyond the tolerance
  double largest = 0;   ///< largest absolute difference
};

template <typename T>
difference compare(const std::vector<T>& a, const std::vector<T>& b, double tolerance) {
  difference d;
  for (u64 i = 0; i < a.size(); ++i) {
    const double x = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    d.nonzero += x != 0;
    if (x > tolerance && d.count++ == 0) d.first = i;
    d.largest = std::max(d.largest, x);
  }
  return d;
}

std::ostream& operator<<(std::ostream& os, const difference& d) {
  return os << d.count << " values beyond the tolerance (first at " << d.first << "), "
            << d.nonzero << " differ, largest difference " << d.largest;
}

template <typename T>
std::vector<T> random_values(u64 n, unsigned seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    const double r = d(rng);
    x = static_cast<T>(std::numeric_limits<T>::is_integer ? std::floor(r) : r);
  }
  return v;
}

struct setting {
  dtype type;
  layout lay;
  u64 n, h, w, c;
  int b, k;
  coeff_type ct;
};

std::string describe(const setting& s) {
  return "dtype " + std::to_string(static_cast<int>(s.type)) + " layout " +
         std::to_string(static_cast<int>(s.lay)) + " " + std::to_string(s.n) + "x" +
         std::to_string(s.h) + "x" + std::to_string(s.w) + "x" + std::to_string(s.c) +
         " B=" + std::to_string(s.b) + " K=" + std::to_string(s.k) + " coeff " +
         std::to_string(static_cast<int>(s.ct));
}

codec_params params(int b, int k, coeff_type ct, dtype type) {
  codec_params p;
  p.block = b;
  p.chop = k;
  p.coeff = ct;
  p.offset = default_offset(type);
  return p;
}

/** A setting's codec parameters and random input (values in [lo, hi)) with its view. */
template <typename T>
struct setting_input {
  geometry g;
  codec_params p;
  std::vector<T> values;
  const_sample_view view;
};
template <typename T>
setting_input<T> input_of(const setting& s, unsigned seed, double lo, double hi) {
  setting_input<T> in{dctchop::test::shape_of(s.lay, s.n, s.h, s.w, s.c), params(s.b, s.k, s.ct, s.type),
                      random_values<T>(s.n * s.h * s.w * s.c, seed, lo, hi), {}};
  in.view = make_view(in.g, s.type, static_cast<const void*>(in.values.data()), s.n);
  return in;
}

/** CUDA and CPU encode the same random input to the same bytes, and decode them to the same
 *  values (the device runs detail/block.hpp with -fmad=false: bit-identical, stricter than
 *  the one-ulp rule of DESIGN.md). */
template <typename T>
void expect_cuda_equals_cpu(const setting& s, backend& gpu, backend& cpu, unsigned seed,
                            double lo, double hi) {
  const auto input = input_of<T>(s, seed, lo, hi);
  const geometry& g = input.g;
  const codec_params& p = input.p;
  const std::vector<T>& in = input.values;
  const auto& view = input.view;
  std::vector<std::byte> want(s.n * coeff_bytes_per_sample(p, g)), got(want.size());
  cpu.encode(p, view, want);
  gpu.encode(p, view, got);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size()), 0) << describe(s);
  std::vector<T> dc(in.size()), dg(in.size());
  cpu.decode(p, want, make_view(g, s.type, static_cast<void*>(dc.data()), s.n));
  gpu.decode(p, want, make_view(g, s.type, static_cast<void*>(dg.data()), s.n));
  EXPECT_EQ(std::memcmp(dc.data(), dg.data(), dc.size() * sizeof(T)), 0) << describe(s);
}

TEST(CudaBackend, EncodeAndDecodeEqualTheCpuOnEverySettingAndOddSizes) {
  REQUIRE_DEVICE();
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  EXPECT_EQ(gpu->name(), "cuda");
  unsigned seed = 1;
  for (int b : {4, 8, 16, 32}) {
    const u64 bb = static_cast<u64>(b);
    for (int k : {1, b / 2, b}) {
      for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
        expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhwc, 3, 2 * bb + 3, 3 * bb + 5, 3, b, k, ct},
                                             *gpu, *cpu, seed++, 0, 256);
        expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nchw, 2, bb + 1, bb - 1, 2, b, k, ct},
                                             *gpu, *cpu, seed++, 0, 256);
        expect_cuda_equals_cpu<std::int8_t>({dtype::i8, layout::nhw, 2, bb + 5, bb + 2, 1, b, k, ct},
                                            *gpu, *cpu, seed++, -128, 128);
        // u16 within 400 of its offset, i16 as one HW plane, f32 and f64: |x - offset| * B
        // stays within f16 and i16 at B = 32, so every coefficient type.
        expect_cuda_equals_cpu<std::uint16_t>({dtype::u16, layout::nhw, 2, bb + 7, 2 * bb + 1, 1, b, k, ct},
                                              *gpu, *cpu, seed++, 32368, 33168);
        expect_cuda_equals_cpu<std::int16_t>({dtype::i16, layout::hw, 1, 2 * bb + 5, bb + 3, 1, b, k, ct},
                                             *gpu, *cpu, seed++, -1000, 1000);
        expect_cuda_equals_cpu<float>({dtype::f32, layout::nhw, 2, 3 * bb - 1, bb + 2, 1, b, k, ct},
                                      *gpu, *cpu, seed++, -100, 100);
        expect_cuda_equals_cpu<double>({dtype::f64, layout::nhw, 1, bb + 3, bb + 3, 1, b, k, ct},
                                       *gpu, *cpu, seed++, -1e3, 1e3);
        if (ct == coeff_type::f32 || ct == coeff_type::bf16) {
          // f16 interleaved, up to its limits: decoded values clamp to them on both sides.
          expect_cuda_equals_cpu<detail::half_value>(
              {dtype::f16, layout::nhwc, 2, bb + 3, bb + 2, 2, b, k, ct}, *gpu, *cpu, seed++,
              -65504, 65504);
          // i32 and u32 (computed in double) over their whole range, clamped at both ends.
          expect_cuda_equals_cpu<std::int32_t>({dtype::i32, layout::nhw, 2, bb + 3, bb + 1, 1, b, k, ct},
                                               *gpu, *cpu, seed++, -2147483648.0, 2147483648.0);
          expect_cuda_equals_cpu<std::uint32_t>({dtype::u32, layout::nhwc, 1, bb + 1, bb + 6, 2, b, k, ct},
                                                *gpu, *cpu, seed++, 0, 4294967296.0);
        }
      }
    }
  }
}

TEST(CudaBackend, RowsStoredAsWholeWordsOfEveryShapeEqualTheCpu) {
  REQUIRE_DEVICE();
  // A decode thread stores its elements of a row in one word where they lie aligned: 4 u8 or
  // 2 u16 (32 bits), 4 f32 (16 bytes), 4 columns of 3 u8 planes (12 bytes as three 32-bit
  // stores: u8 RGB at B = 8 and chops 1 to 4, with_decode_planes). Rows of widths that are
  // multiples of 4 take them in every row. Device code only (the host tests store through
  // memcpy, and convert u8 words without cvt.pack): every chop at B = 4 and 8, in each
  // coefficient type that has per-chop kernels.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  unsigned seed = 300;
  for (int b : {4, 8}) {
    for (int k = 1; k <= b; ++k) {
      for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32}) {
        expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhwc, 2, 19, 20, 3, b, k, ct},
                                             *gpu, *cpu, seed++, 0, 256);
        expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhwc, 1, 17, 32, 3, b, k, ct},
                                             *gpu, *cpu, seed++, 0, 256);
        expect_cuda_equals_cpu<std::int8_t>({dtype::i8, layout::nchw, 1, 9, 24, 2, b, k, ct},
                                            *gpu, *cpu, seed++, -128, 128);
        expect_cuda_equals_cpu<std::uint16_t>({dtype::u16, layout::nhw, 1, 9, 18, 1, b, k, ct},
                                              *gpu, *cpu, seed++, 32368, 33168);
        expect_cuda_equals_cpu<float>({dtype::f32, layout::nhw, 2, 19, 28, 1, b, k, ct}, *gpu,
                                      *cpu, seed++, -100, 100);
        expect_cuda_equals_cpu<float>({dtype::f32, layout::nhwc, 1, 17, 12, 3, b, k, ct}, *gpu,
                                      *cpu, seed++, -100, 100);
        expect_cuda_equals_cpu<float>({dtype::f32, layout::nchw, 1, 9, 20, 2, b, k, ct}, *gpu,
                                      *cpu, seed++, -100, 100);
      }
    }
  }
}

TEST(CudaBackend, ABatchLargerThanOneStreamedPartEqualsTheCpu) {
  REQUIRE_DEVICE();
  // 400 images of 256x256x3 u8 = 79 MB of input: four parts of 100 images (samples_per_part),
  // so both streams and both staging buffers are used twice each.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhwc, 400, 256, 256, 3, 8, 4, coeff_type::f16},
                                       *gpu, *cpu, 99, 0, 256);
  expect_cuda_equals_cpu<float>({dtype::f32, layout::nhw, 40, 512, 512, 1, 8, 2, coeff_type::f32},
                                *gpu, *cpu, 98, -1, 1);
}

TEST(CudaBackend, PlanesTooWideForTheLineGridTakeTheBlockKernelsAndEqualTheCpu) {
  REQUIRE_DEVICE();
  // A line grid holds 65535 CTAs of 128 positions along y (8,388,480): wider lines go to the
  // block kernels without being asked (the choice is tested on the host, CudaGridOnHost).
  // At B = 16 with the chop at run time a decode thread takes one element: 9,000,000 values
  // a row fall back in the decode, and at chop 16 in the encode (562,500 blocks of 16 kept
  // rows) too; interleaved, 3,000,001 x 3 positions fall back in the decode. (At B = 8 a
  // decode thread takes 4 elements or more: these rows would fit.)
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhw, 1, 16, 9000000, 1, 16, 16, coeff_type::f32},
                                       *gpu, *cpu, 95, 0, 256);
  expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhwc, 1, 9, 3000001, 3, 16, 4, coeff_type::f16},
                                       *gpu, *cpu, 94, 0, 256);
}

TEST(CudaBackend, PinnedBuffersFromItsHostMemoryGiveTheSameBytesAsPageableOnes) {
  REQUIRE_DEVICE();
  // Buffers from backend::host_memory() are copied to and from the device directly (no
  // staging): four parts of 100 images (19.7 MB each), pinned input and output, then pinned
  // on one side only.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  const auto mem = gpu->host_memory();
  ASSERT_NE(mem, nullptr);
  const geometry g = dctchop::test::shape_of(layout::nhwc, 400, 256, 256, 3);
  codec_params p;
  p.chop = 4;
  p.coeff = coeff_type::f16;
  p.offset = 128;
  const auto values = random_values<std::uint8_t>(g.samples * g.values_per_sample(), 97, 0, 256);
  const resource_allocator<std::byte> pinned(mem);
  byte_buffer in(values.size(), pinned);
  ASSERT_TRUE(cuda::is_pinned(in.data(), in.size()));  // so the direct copies are what runs
  std::memcpy(in.data(), values.data(), values.size());
  const u64 cb = g.samples * coeff_bytes_per_sample(p, g);
  std::vector<std::byte> want(cb);
  cpu->encode(p, make_view(g, dtype::u8, static_cast<const void*>(values.data()), g.samples), want);
  byte_buffer got(cb, pinned);
  gpu->encode(p, make_view(g, dtype::u8, static_cast<const void*>(in.data()), g.samples), got);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << "pinned in, pinned out";
  std::vector<std::byte> got_pageable(cb);
  gpu->encode(p, make_view(g, dtype::u8, static_cast<const void*>(in.data()), g.samples),
              got_pageable);
  EXPECT_TRUE(got_pageable == want) << "pinned in, pageable out";
  std::vector<std::uint8_t> dc(values.size());
  cpu->decode(p, want, make_view(g, dtype::u8, static_cast<void*>(dc.data()), g.samples));
  byte_buffer dg(values.size(), pinned);
  gpu->decode(p, got, make_view(g, dtype::u8, static_cast<void*>(dg.data()), g.samples));
  EXPECT_EQ(std::memcmp(dc.data(), dg.data(), dc.size()), 0) << "pinned in, pinned out";
  std::vector<std::uint8_t> dp(values.size());
  gpu->decode(p, got, make_view(g, dtype::u8, static_cast<void*>(dp.data()), g.samples));
  EXPECT_TRUE(dp == dc) << "pinned in, pageable out";
}

// ---- the quality measure on the device (backend::decode_measured) ----------------------------

/** The figures of `original` against its decode: with `gpu` measuring on the device (it must,
 *  for the types it measures), and with the CPU decoding and measuring on the host. */
struct both_figures {
  quality_batch device, host;
  bool on_device = false;
};
both_figures measure_both(backend& gpu, backend& cpu, const codec_params& p, const geometry& g,
                          const const_sample_view& original, std::span<const std::byte> coeffs,
                          bool ssim, std::optional<double> range = std::nullopt) {
  const quality_accumulator acc(original.type, range, ssim);
  both_figures f;
  f.on_device = gpu.decode_measured(p, coeffs, original, acc, f.device);
  std::vector<std::byte> decoded(original.samples * g.values_per_sample() * size_of(original.type));
  decode_and_measure(cpu, p, coeffs, original,
                     make_view(g, original.type, static_cast<void*>(decoded.data()), original.samples),
                     acc, 1, f.host);
  return f;
}

/** The device's figures are the host's, bit for bit (doubles compared as bits). */
void expect_same_figures(const both_figures& f, const std::string& what) {
  EXPECT_TRUE(f.on_device) << what;
  ASSERT_EQ(f.device.samples(), f.host.samples()) << what;
  ASSERT_EQ(f.device.ssim_sum.size(), f.host.ssim_sum.size()) << what;
  u64 sse_differ = 0, ssim_differ = 0;
  for (u64 i = 0; i < f.host.samples(); ++i) {
    sse_differ += std::memcmp(&f.device.sse[i], &f.host.sse[i], sizeof(double)) != 0;
    if (!f.host.ssim_sum.empty())
      ssim_differ += std::memcmp(&f.device.ssim_sum[i], &f.host.ssim_sum[i], sizeof(double)) != 0;
  }
  EXPECT_EQ(sse_differ, 0u) << what << ": samples whose squared error differs";
  EXPECT_EQ(ssim_differ, 0u) << what << ": samples whose SSIM differs";
  EXPECT_EQ(f.device.max_abs, f.host.max_abs) << what;
  EXPECT_EQ(f.device.mn, f.host.mn) << what;
  EXPECT_EQ(f.device.mx, f.host.mx) << what;
  EXPECT_EQ(f.device.ssim_planes, f.host.ssim_planes) << what;
  EXPECT_EQ(f.device.values_per_sample, f.host.values_per_sample) << what;
}

template <typename T>
void expect_device_measures_as_host(const setting& s, backend& gpu, backend& cpu, unsigned seed,
                                    double lo, double hi) {
  // (floats: SSIM at the range the values span, as compress's first pass would find it)
  const auto in = input_of<T>(s, seed, lo, hi);
  std::vector<std::byte> coeffs(s.n * coeff_bytes_per_sample(in.p, in.g));
  cpu.encode(in.p, in.view, coeffs);
  for (bool ssim : {true, false}) {
    expect_same_figures(measure_both(gpu, cpu, in.p, in.g, in.view, coeffs, ssim, hi - lo),
                        describe(s) + (ssim ? " with SSIM" : " without SSIM"));
  }
}

TEST(CudaMeasure, DecodeMeasuredGivesTheHostsFiguresBitForBitInEveryType) {
  REQUIRE_DEVICE();
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  unsigned seed = 300;
  for (int k : {1, 4}) {
    // RGB and planar u8; planes below 7x7 (no SSIM); exactly one window; rows of two tiles
    // (300 wide: 294 windows, 6 past the lanes' whole 288) and of a tile of one window.
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nhwc, 5, 37, 45, 3, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nchw, 3, 29, 31, 2, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nhw, 4, 6, 40, 1, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nhw, 4, 7, 7, 1, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nhw, 2, 9, 300, 1, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nhwc, 1, 8, 263, 4, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::int8_t>({dtype::i8, layout::nhwc, 3, 20, 17, 3, 8, k, coeff_type::f16},
                                                *gpu, *cpu, seed++, -128, 128);
    expect_device_measures_as_host<std::uint16_t>({dtype::u16, layout::nhw, 3, 40, 33, 1, 8, k, coeff_type::f32},
                                                  *gpu, *cpu, seed++, 0, 65536);
    expect_device_measures_as_host<std::int16_t>({dtype::i16, layout::nchw, 2, 19, 23, 3, 16, k, coeff_type::f32},
                                                  *gpu, *cpu, seed++, -32768, 32768);
    // Samples of several runs of exact sums (2^15 values for 8-bit types, 2^20 for 16-bit).
    expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nchw, 2, 120, 100, 3, 8, k, coeff_type::f16},
                                                 *gpu, *cpu, seed++, 0, 256);
    expect_device_measures_as_host<std::uint16_t>({dtype::u16, layout::nhw, 1, 1100, 1000, 1, 8, k, coeff_type::f32},
                                                  *gpu, *cpu, seed++, 0, 65536);
    // The types the CPU sums in double, in its order: lanes of squared errors, columns slid
    // down the plane.
    expect_device_measures_as_host<float>({dtype::f32, layout::nhw, 3, 40, 300, 1, 8, k, coeff_type::f32},
                                          *gpu, *cpu, seed++, -100, 100);
    expect_device_measures_as_host<float>({dtype::f32, layout::nhwc, 2, 21, 19, 3, 8, k, coeff_type::f32},
                                          *gpu, *cpu, seed++, -1, 1);
    expect_device_measures_as_host<double>({dtype::f64, layout::nchw, 2, 17, 23, 2, 8, k, coeff_type::f32},
                                           *gpu, *cpu, seed++, -1e3, 1e3);
    expect_device_measures_as_host<detail::half_value>({dtype::f16, layout::nhw, 2, 15, 33, 1, 8, k, coeff_type::f32},
                                                       *gpu, *cpu, seed++, -500, 500);
    expect_device_measures_as_host<std::int32_t>({dtype::i32, layout::nhw, 2, 13, 29, 1, 8, k, coeff_type::f32},
                                                 *gpu, *cpu, seed++, -1e6, 1e6);
    expect_device_measures_as_host<std::uint32_t>({dtype::u32, layout::nhwc, 2, 11, 12, 2, 8, k, coeff_type::f32},
                                                  *gpu, *cpu, seed++, 0, 1e6);
    expect_device_measures_as_host<float>({dtype::f32, layout::nhw, 1, 300, 500, 1, 8, k, coeff_type::f32},
                                          *gpu, *cpu, seed++, -5, 5);
  }
}

TEST(CudaMeasure, ABatchOfSeveralStreamedPartsPinnedOrNotMeasuresAsTheHost) {
  REQUIRE_DEVICE();
  // 400 images of 96x96x3: parts of 100 on two streams; the original pageable (staged), then
  // in the backend's pinned memory (copied directly); then parts of other sizes.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  const setting s{dtype::u8, layout::nhwc, 400, 96, 96, 3, 8, 2, coeff_type::f16};
  expect_device_measures_as_host<std::uint8_t>(s, *gpu, *cpu, 320, 0, 256);
  const geometry g = dctchop::test::shape_of(s.lay, s.n, s.h, s.w, s.c);
  codec_params p;
  p.chop = s.k;
  const auto values = random_values<std::uint8_t>(s.n * s.h * s.w * s.c, 321, 0, 256);
  byte_buffer pinned(values.size(), resource_allocator<std::byte>(gpu->host_memory()));
  ASSERT_TRUE(cuda::is_pinned(pinned.data(), pinned.size()));
  std::memcpy(pinned.data(), values.data(), values.size());
  const auto view = make_view(g, dtype::u8, static_cast<const void*>(pinned.data()), s.n);
  std::vector<std::byte> coeffs(s.n * coeff_bytes_per_sample(p, g));
  cpu->encode(p, view, coeffs);
  expect_same_figures(measure_both(*gpu, *cpu, p, g, view, coeffs, true), "pinned original");
  // 2000 samples of 8x8 in one part (the batch's extremes merged by a CTA over more samples
  // than its threads), and 1003 f32 samples of 64x64 in parts of 250 and a last of 3.
  expect_device_measures_as_host<std::uint8_t>({dtype::u8, layout::nhw, 2000, 8, 8, 1, 8, 2, coeff_type::f16},
                                               *gpu, *cpu, 322, 0, 256);
  expect_device_measures_as_host<float>({dtype::f32, layout::nhw, 1003, 64, 64, 1, 8, 4, coeff_type::f32},
                                        *gpu, *cpu, 323, -10, 10);
}

TEST(CudaMeasure, AStridedOriginalIsMeasuredOnTheHost) {
  REQUIRE_DEVICE();
  // Samples 16 values apart beyond their own: decode_measured declines, having done nothing,
  // and decode_and_measure decodes on the device and measures on the host.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  const geometry g = dctchop::test::shape_of(layout::nhw, 3, 20, 20, 1);
  codec_params p;
  p.chop = 2;
  const auto values = random_values<std::uint8_t>(3 * 416, 330, 0, 256);
  auto strided = make_view(g, dtype::u8, static_cast<const void*>(values.data()), 3);
  strided.stride_sample = 416;
  std::vector<std::uint8_t> dense(3 * 400);
  for (u64 s = 0; s < 3; ++s) std::memcpy(dense.data() + s * 400, values.data() + s * 416, 400);
  const auto view = make_view(g, dtype::u8, static_cast<const void*>(dense.data()), 3);
  std::vector<std::byte> coeffs(3 * coeff_bytes_per_sample(p, g));
  cpu->encode(p, view, coeffs);
  const quality_accumulator acc(dtype::u8, std::nullopt, true);
  quality_batch b;
  EXPECT_FALSE(gpu->decode_measured(p, coeffs, strided, acc, b));
  EXPECT_EQ(b.samples(), 0u) << "declined, having done nothing";
  std::vector<std::uint8_t> decoded(dense.size());
  quality_batch on_gpu, on_cpu;
  decode_and_measure(*gpu, p, coeffs, strided,
                     make_view(g, dtype::u8, static_cast<void*>(decoded.data()), 3), acc, 1, on_gpu);
  on_cpu = acc.measure(strided, make_view(g, dtype::u8, static_cast<const void*>(decoded.data()), 3), 1);
  EXPECT_EQ(on_gpu.sse, on_cpu.sse);
  EXPECT_EQ(on_gpu.ssim_sum, on_cpu.ssim_sum);
  EXPECT_GT(on_gpu.sse[0], 0);
}

/** The error `be.encode` throws for `v`, or none when every sample fits. */
std::optional<error> encode_error(backend& be, const codec_params& p, const const_sample_view& v,
                                  std::span<std::byte> out) {
  try {
    be.encode(p, v, out);
    return std::nullopt;
  } catch (const error& e) {
    return e;
  }
}

TEST(CudaBackend, TheFirstBadSampleIsNamedAsOnTheCpu) {
  REQUIRE_DEVICE();
  auto gpu = make_backend(backend_kind::cuda);
  const geometry g = dctchop::test::shape_of(layout::nhw, 12, 20, 20);
  std::vector<float> in(12 * 400, 1.0f);
  in[7 * 400 + 33] = std::numeric_limits<float>::quiet_NaN();
  in[9 * 400 + 1] = std::numeric_limits<float>::infinity();
  codec_params p;
  p.coeff = coeff_type::f32;
  std::vector<std::byte> out(12 * coeff_bytes_per_sample(p, g));
  const auto e =
      encode_error(*gpu, p, make_view(g, dtype::f32, static_cast<const void*>(in.data()), 12), out);
  ASSERT_TRUE(e) << "NaN accepted";
  EXPECT_EQ(e->code(), errc::bad_input) << e->what();
  EXPECT_EQ(e->sample(), 7) << e->what();
}

/** Device buffers for the device-memory entry points. */
struct device_bytes {
  void* p = nullptr;
  // Throws (a test failure) rather than leave p null: a null pointer plus a shift would pass
  // the entry points' checks and fault on the device, losing the context for the suite.
  explicit device_bytes(std::size_t n) {
    const cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaMalloc of ") + std::to_string(n) +
                               " bytes: " + cudaGetErrorString(e));
    }
  }
  ~device_bytes() { cudaFree(p); }
  // One owner: a copy would free p twice (a std::vector of them, say, when it grows).
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
};

TEST(CudaDevice, AGpuWithoutCodeForAKernelIsNamedBeforeItsLaunchAndAtItAndStaysUsable) {
  REQUIRE_DEVICE();
  int device = 0;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
  if (prop.major == 8) GTEST_SKIP() << "this GPU (sm_8x) runs the test kernel's sm_80 code";
  const std::string capability =
      "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor);
  // Before the launch, as make_backend asks of the backend's kernels: which GPU, built for
  // what, and the setting that builds for it.
  const std::string why =
      detail::why_kernel_cannot_run(test::sm80_only_kernel(), device, "80-real");
  EXPECT_NE(why.find("CUDA device " + std::to_string(device) + " (" + prop.name + ", " +
                     capability + ")"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("built for the CUDA architectures 80-real"), std::string::npos) << why;
  EXPECT_NE(why.find("-DCMAKE_CUDA_ARCHITECTURES=\"80-real;" + std::to_string(prop.major) +
                     std::to_string(prop.minor) + "\""),
            std::string::npos)
      << why;
  // At the launch: the error the backend throws for it names the GPU too (against the
  // backend's own architectures, which include this GPU's: so no setting to add).
  const cudaError_t e = test::launch_sm80_only();
  ASSERT_TRUE(e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
      << cudaGetErrorName(e);
  dctchop::test::expect_error(
      [&] { detail::throw_cuda(e, "sm80_only<<<1, 1>>>", __FILE__, __LINE__); },
      errc::backend_unavailable,
      {"sm80_only<<<1, 1>>>", cudaGetErrorName(e), capability,
       "cannot run this dctchop's CUDA kernels"});
  // Not a sticky error: the backend runs on the device after it, and gives the CPU's bytes.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  expect_cuda_equals_cpu<std::uint8_t>(
      {dtype::u8, layout::nhwc, 2, 19, 21, 3, 8, 4, coeff_type::f16}, *gpu, *cpu, 7, 0, 256);
}

TEST(CudaDevice, EncodeDeviceNamesTheFirstBadSample) {
  REQUIRE_DEVICE();
  geometry g{layout::nhw, 10, 1, 16, 16};
  codec_params p;
  p.coeff = coeff_type::f32;
  std::vector<float> in(10 * 256, 0.5f);
  in[6 * 256 + 9] = std::numeric_limits<float>::infinity();
  device_bytes d_in(in.size() * 4), d_c(10 * coeff_bytes_per_sample(p, g));
  ASSERT_EQ(cudaMemcpy(d_in.p, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
    try {
      cuda::encode_device(p, g, dtype::f32, 10, d_in.p, d_c.p, nullptr, kl);
      ADD_FAILURE() << "Inf accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::bad_input) << e.what();
      EXPECT_EQ(e.sample(), 6) << e.what();
    }
    // The asynchronous form leaves the sample in the caller's word, and ~0 when all fit.
    device_bytes d_flag(sizeof(unsigned long long));
    auto* flag = static_cast<unsigned long long*>(d_flag.p);
    unsigned long long bad = 0;
    cuda::encode_device_async(p, g, dtype::f32, 10, d_in.p, d_c.p, flag, nullptr, kl);
    ASSERT_EQ(cudaMemcpy(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(bad, 6u);
    cuda::encode_device_async(p, g, dtype::f32, 6, d_in.p, d_c.p, flag, nullptr, kl);
    ASSERT_EQ(cudaMemcpy(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(bad, ~0ull) << "the first six samples fit";
  }
}

/** Encode and decode in device memory with both kernel layouts: identical bytes. */
template <typename T>
void expect_layouts_agree(dtype type, geometry g, int b, int k, coeff_type ct, double lo,
                          double hi, unsigned seed) {
  codec_params p;
  p.block = b;
  p.chop = k;
  p.coeff = ct;
  p.offset = type == dtype::u8 ? 128.0 : (type == dtype::u16 ? 32768.0 : 0.0);
  const u64 vals = g.samples * g.values_per_sample(), cbytes = g.samples * coeff_bytes_per_sample(p, g);
  const auto in = random_values<T>(vals, seed, lo, hi);
  device_bytes d_in(vals * sizeof(T)), d_c1(cbytes), d_c2(cbytes), d_o1(vals * sizeof(T)),
      d_o2(vals * sizeof(T));
  ASSERT_EQ(cudaMemcpy(d_in.p, in.data(), vals * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  cuda::encode_device(p, g, type, g.samples, d_in.p, d_c1.p, nullptr, cuda::kernel_layout::lines);
  cuda::encode_device(p, g, type, g.samples, d_in.p, d_c2.p, nullptr, cuda::kernel_layout::blocks);
  cuda::decode_device(p, g, type, g.samples, d_c1.p, d_o1.p, nullptr, cuda::kernel_layout::lines);
  cuda::decode_device(p, g, type, g.samples, d_c1.p, d_o2.p, nullptr, cuda::kernel_layout::blocks);
  std::vector<std::byte> c1(cbytes), c2(cbytes), o1(vals * sizeof(T)), o2(vals * sizeof(T));
  ASSERT_EQ(cudaMemcpy(c1.data(), d_c1.p, cbytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c2.data(), d_c2.p, cbytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(o1.data(), d_o1.p, o1.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(o2.data(), d_o2.p, o2.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  const std::string what = "dtype " + std::to_string(static_cast<int>(type)) + " B=" +
                           std::to_string(b) + " K=" + std::to_string(k);
  EXPECT_TRUE(c1 == c2) << what << ": encode";
  EXPECT_TRUE(o1 == o2) << what << ": decode";
  // And both equal the CPU's bytes (the backend test above goes through the default layout).
  auto cpu = make_backend(backend_kind::cpu, {1});
  std::vector<std::byte> want(cbytes), back(o1.size());
  cpu->encode(p, make_view(g, type, static_cast<const void*>(in.data()), g.samples), want);
  EXPECT_TRUE(c2 == want) << what << ": block kernels' encode against the CPU";
  cpu->decode(p, c1, make_view(g, type, static_cast<void*>(back.data()), g.samples));
  EXPECT_TRUE(o2 == back) << what << ": block kernels' decode against the CPU";
}

TEST(CudaDevice, LineAndBlockKernelsGiveIdenticalBytes) {
  REQUIRE_DEVICE();
  unsigned seed = 60;
  for (int b : {4, 8, 16, 32}) {
    // Odd chops past 2 at B = 16 and 32 too: the rolled loops of a run-time chop there end
    // on an even term, which chops of B / 2 and B never do.
    std::vector<int> chops{1, b / 2, b};
    if (b >= 16) chops.insert(chops.end(), {3, b - 1});
    for (int k : chops) {
      const u64 ub = static_cast<u64>(b);
      expect_layouts_agree<std::uint8_t>(dtype::u8, {layout::nhwc, 5, 3, 3 * ub + 1, 2 * ub + 3},
                                         b, k, coeff_type::f16, 0, 256, seed++);
      expect_layouts_agree<float>(dtype::f32, {layout::nhw, 3, 1, 2 * ub + 5, 4 * ub - 1}, b, k,
                                  coeff_type::f32, -50, 50, seed++);
      expect_layouts_agree<std::uint16_t>(dtype::u16, {layout::nchw, 2, 2, ub + 3, ub + 7}, b, k,
                                          coeff_type::f32, 30000, 36000, seed++);
    }
  }
}

/** decode_device into `d_out` + `shift` bytes of device memory: the CPU's values. */
template <typename T>
void expect_shifted_output_decodes(dtype type, const geometry& g, int b, int k, double lo,
                                   double hi, std::size_t shift, unsigned seed) {
  codec_params p;
  p.block = b;
  p.chop = k;
  p.coeff = coeff_type::f16;
  p.offset = default_offset(type);
  const u64 vals = g.samples * g.values_per_sample();
  const auto in = random_values<T>(vals, seed, lo, hi);
  auto cpu = make_backend(backend_kind::cpu, {1});
  std::vector<std::byte> c(g.samples * coeff_bytes_per_sample(p, g));
  cpu->encode(p, make_view(g, type, static_cast<const void*>(in.data()), g.samples), c);
  std::vector<T> want(vals), got(vals);
  cpu->decode(p, c, make_view(g, type, static_cast<void*>(want.data()), g.samples));
  device_bytes d_c(c.size()), d_out(vals * sizeof(T) + 16);
  ASSERT_EQ(cudaMemcpy(d_c.p, c.data(), c.size(), cudaMemcpyHostToDevice), cudaSuccess);
  auto* out = static_cast<std::byte*>(d_out.p) + shift;
  cuda::decode_device(p, g, type, g.samples, d_c.p, out, nullptr);
  ASSERT_EQ(cudaMemcpy(got.data(), out, vals * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), vals * sizeof(T)), 0)
      << "dtype " << static_cast<int>(type) << " K=" << k << ", output shifted by " << shift;
}

TEST(CudaDevice, AnOutputAddressNotAlignedForTheWordStoresDecodesTheCpusValues) {
  REQUIRE_DEVICE();
  // A caller's device pointer into a batch: where it is no multiple of a word's alignment (16
  // bytes for 4 f32, 4 for u8 words, of 4 or of 12 bytes), the decode stores element by
  // element. Rows of 32 values, which store whole words where the address allows.
  unsigned seed = 700;
  for (int k : {1, 4, 6}) {
    for (std::size_t shift : {0, 4, 8, 12}) {
      expect_shifted_output_decodes<float>(dtype::f32, {layout::nhw, 3, 1, 17, 32}, 8, k, -50,
                                           50, shift, seed++);
    }
    for (std::size_t shift : {0, 1, 2, 3}) {
      expect_shifted_output_decodes<std::uint8_t>(dtype::u8, {layout::nhwc, 3, 3, 17, 32}, 8, k,
                                                  0, 256, shift, seed++);
    }
  }
}

TEST(CudaDevice, AsyncDecodesOnTwoStreamsEqualTheSynchronousAndTheHostPaths) {
  REQUIRE_DEVICE();
  const geometry g = dctchop::test::shape_of(layout::nhwc, 64, 64, 48, 3);
  codec_params p;
  p.offset = 128;
  const u64 vals = g.samples * g.values_per_sample();
  const auto in = random_values<std::uint8_t>(vals, 5, 0, 256);
  const u64 cbytes = g.samples * coeff_bytes_per_sample(p, g);
  device_bytes d_in(vals), d_c(cbytes), d_sync(vals), d_async(vals);
  ASSERT_EQ(cudaMemcpy(d_in.p, in.data(), vals, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::encode_device(p, g, dtype::u8, g.samples, d_in.p, d_c.p);
  cuda::decode_device(p, g, dtype::u8, g.samples, d_c.p, d_sync.p);
  // Two halves on two streams at once.
  cudaStream_t s[2];
  for (auto& x : s) ASSERT_EQ(cudaStreamCreate(&x), cudaSuccess);
  const u64 half = g.samples / 2, vhalf = half * g.values_per_sample(),
            chalf = half * coeff_bytes_per_sample(p, g);
  cuda::decode_device_async(p, g, dtype::u8, half, d_c.p, d_async.p, s[0]);
  cuda::decode_device_async(p, g, dtype::u8, half, static_cast<std::byte*>(d_c.p) + chalf,
                            static_cast<std::byte*>(d_async.p) + vhalf, s[1]);
  for (auto& x : s) {
    ASSERT_EQ(cudaStreamSynchronize(x), cudaSuccess);
    cudaStreamDestroy(x);
  }
  std::vector<std::uint8_t> a(vals), b(vals), host(vals);
  ASSERT_EQ(cudaMemcpy(a.data(), d_sync.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.data(), d_async.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(a, b);
  // And the host path of the CPU backend gives the same values.
  std::vector<std::byte> coeffs(cbytes);
  ASSERT_EQ(cudaMemcpy(coeffs.data(), d_c.p, cbytes, cudaMemcpyDeviceToHost), cudaSuccess);
  make_backend(backend_kind::cpu, {1})->decode(p, coeffs, make_view(g, dtype::u8, static_cast<void*>(host.data()), g.samples));
  EXPECT_EQ(a, host);
}

// ---- CudaEdges: device-only paths that the suites above do not reach ------------------------
// Each compares the device with the CPU backend. In a suite of its own: the GPU check runs a
// suite a process, so that a fault here (a sticky one loses the context) spoils only these.

/** Coefficients of `bytes` bytes at `shift` bytes past a 256-byte aligned device allocation:
 *  the per-chop decode kernels need 16-byte aligned ones, the others take the chop at run time. */
struct shifted_coefficients {
  device_bytes d;
  const std::byte* at;
  shifted_coefficients(const std::vector<std::byte>& c, std::size_t shift)
      : d(c.size() + 16), at(static_cast<const std::byte*>(d.p) + shift) {
    EXPECT_EQ(cudaMemcpy(const_cast<std::byte*>(at), c.data(), c.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
};

/** decode_device of `coeffs` (at `shift` bytes past an aligned address), in layout `kl`,
 *  against the CPU backend's decode of the same coefficients. */
template <typename T>
void expect_device_decode_equals_cpu(const codec_params& p, const geometry& g, dtype type,
                                     const std::vector<std::byte>& coeffs, std::size_t shift,
                                     cuda::kernel_layout kl, const std::string& what) {
  const u64 vals = g.samples * g.values_per_sample();
  std::vector<T> want(vals), got(vals);
  make_backend(backend_kind::cpu, {1})
      ->decode(p, coeffs, make_view(g, type, static_cast<void*>(want.data()), g.samples));
  shifted_coefficients c(coeffs, shift);
  device_bytes d_out(vals * sizeof(T));
  ASSERT_EQ(cudaMemset(d_out.p, 0xA5, vals * sizeof(T)), cudaSuccess);
  cuda::decode_device(p, g, type, g.samples, c.at, d_out.p, nullptr, kl);
  ASSERT_EQ(cudaMemcpy(got.data(), d_out.p, vals * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  const u64 at = dctchop::test::first_difference(want, got);
  EXPECT_EQ(at, vals) << what << " B=" << p.block << " K=" << p.chop << " coeff "
                      << static_cast<int>(p.coeff) << " shift " << shift
                      << (kl == cuda::kernel_layout::blocks ? " blocks" : " lines")
                      << ": first difference at value " << at;
}

/** Coefficients that an encode of random values of T gives (the CPU's), for decode tests. */
template <typename T>
std::vector<std::byte> encoded(const codec_params& p, const geometry& g, dtype type, double lo,
                               double hi, unsigned seed) {
  const auto in = random_values<T>(g.samples * g.values_per_sample(), seed, lo, hi);
  std::vector<std::byte> c(g.samples * coeff_bytes_per_sample(p, g));
  make_backend(backend_kind::cpu, {1})
      ->encode(p, make_view(g, type, static_cast<const void*>(in.data()), g.samples), c);
  return c;
}

TEST(CudaEdges, CoefficientsNotSixteenByteAlignedTakeTheRunTimeChopKernelsWithTheCpusValues) {
  REQUIRE_DEVICE();
  // A caller's pointer into a batch of coefficients, at a sample whose coefficient bytes are
  // no multiple of 16: at B = 8 the per-chop kernels (16-byte loads) give way to the kernels
  // of a run-time chop. Every chop, each coefficient type, aligned and not.
  unsigned seed = 5000;
  for (int k = 1; k <= 8; ++k) {
    for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32}) {
      const std::size_t e = size_of(ct);
      for (std::size_t shift : {std::size_t{0}, e, std::size_t{8}}) {
        for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
          {
            const geometry g{layout::nhwc, 2, 3, 19, 21};
            const auto p = params(8, k, ct, dtype::u8);
            expect_device_decode_equals_cpu<std::uint8_t>(
                p, g, dtype::u8, encoded<std::uint8_t>(p, g, dtype::u8, 0, 256, seed++), shift,
                kl, "u8 NHWC 19x21x3");
          }
          {
            const geometry g{layout::nhw, 3, 1, 28, 28};
            const auto p = params(8, k, ct, dtype::u8);
            expect_device_decode_equals_cpu<std::uint8_t>(
                p, g, dtype::u8, encoded<std::uint8_t>(p, g, dtype::u8, 0, 256, seed++), shift,
                kl, "u8 NHW 28x28");
          }
          {
            const geometry g{layout::nhw, 2, 1, 17, 32};
            const auto p = params(8, k, ct, dtype::f32);
            expect_device_decode_equals_cpu<float>(
                p, g, dtype::f32, encoded<float>(p, g, dtype::f32, -100, 100, seed++), shift, kl,
                "f32 NHW 17x32");
          }
          {
            const geometry g{layout::nchw, 1, 2, 9, 18};
            const auto p = params(8, k, ct, dtype::u16);
            expect_device_decode_equals_cpu<std::uint16_t>(
                p, g, dtype::u16, encoded<std::uint16_t>(p, g, dtype::u16, 32368, 33168, seed++),
                shift, kl, "u16 NCHW 9x18x2");
          }
        }
      }
    }
  }
}

template <typename T>
void expect_extremes_decode_as_cpu(dtype type, layout lay, u64 h, u64 w, u64 c, int b, int k,
                                   coeff_type ct, unsigned seed, const std::string& what) {
  const geometry g = dctchop::test::shape_of(lay, 2, h, w, c);
  const auto p = params(b, k, ct, type);
  const auto coeffs =
      dctchop::test::extreme_coefficients(g.samples * coeff_bytes_per_sample(p, g), ct, seed);
  for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
    for (std::size_t shift : {std::size_t{0}, size_of(ct)}) {
      expect_device_decode_equals_cpu<T>(p, g, type, coeffs, shift, kl, what);
    }
  }
}

TEST(CudaEdges, NanInfiniteAndHugeCoefficientsDecodeAsOnTheCpuInEveryDtype) {
  REQUIRE_DEVICE();
  // The device clamps with min/max and rounds with the hardware's conversions (cvt.rni, and
  // cvt.pack.sat for words of u8 and i8): NaN must give the low end as on the CPU, values past
  // 2^31 must saturate, not wrap. Host tests cover the same on the host's branch
  // (CudaGridOnHost.NanInfiniteAndHugeCoefficients...).
  unsigned seed = 6000;
  const std::pair<int, int> settings[] = {{8, 1}, {8, 4}, {8, 8}, {16, 8}};
  for (const auto& [b, k] : settings) {
    for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
      const u64 ub = static_cast<u64>(b);
      expect_extremes_decode_as_cpu<std::uint8_t>(dtype::u8, layout::nhwc, ub + 3, 20, 3, b, k, ct,
                                                  seed++, "u8 NHWC 3 planes");
      expect_extremes_decode_as_cpu<std::uint8_t>(dtype::u8, layout::nhw, ub + 1, 32, 1, b, k, ct,
                                                  seed++, "u8 NHW w=32");
      expect_extremes_decode_as_cpu<std::int8_t>(dtype::i8, layout::nchw, ub + 2, 24, 2, b, k, ct,
                                                 seed++, "i8 NCHW w=24");
      expect_extremes_decode_as_cpu<std::uint16_t>(dtype::u16, layout::nhw, ub + 5, 18, 1, b, k,
                                                   ct, seed++, "u16 NHW w=18");
      expect_extremes_decode_as_cpu<std::int16_t>(dtype::i16, layout::nhwc, ub, ub + 2, 2, b, k,
                                                  ct, seed++, "i16 NHWC 2 planes");
      expect_extremes_decode_as_cpu<detail::half_value>(dtype::f16, layout::nhw, ub + 3, 18, 1, b,
                                                        k, ct, seed++, "f16 NHW w=18");
      expect_extremes_decode_as_cpu<float>(dtype::f32, layout::nhw, ub + 1, 32, 1, b, k, ct,
                                           seed++, "f32 NHW w=32");
      expect_extremes_decode_as_cpu<double>(dtype::f64, layout::nhw, ub + 2, ub + 1, 1, b, k, ct,
                                            seed++, "f64 NHW");
      expect_extremes_decode_as_cpu<std::int32_t>(dtype::i32, layout::nhw, ub + 1, ub + 3, 1, b,
                                                  k, ct, seed++, "i32 NHW");
      expect_extremes_decode_as_cpu<std::uint32_t>(dtype::u32, layout::nhwc, ub + 2, ub + 1, 2, b,
                                                   k, ct, seed++, "u32 NHWC 2 planes");
    }
  }
}

TEST(CudaEdges, InterleavedPlanesOtherThanRgbPlanarU8WordsAndOddWidthsEqualTheCpu) {
  REQUIRE_DEVICE();
  // u8 with 2 and 4 interleaved planes (RGBA) at the chops of the per-chop kernels; planar u8
  // rows of whole words (28x28: Fashion-MNIST's shape); i16 and f16 rows of whole 32-bit words
  // (width 18) and of a partial last word (17), at every chop of B = 8.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  unsigned seed = 7000;
  for (int k = 1; k <= 8; ++k) {
    for (coeff_type ct : {coeff_type::f16, coeff_type::f32}) {
      for (u64 c : {2, 4}) {
        for (u64 w : {20, 21}) {
          expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhwc, 2, 11, w, c, 8, k, ct},
                                               *gpu, *cpu, seed++, 0, 256);
        }
      }
      expect_cuda_equals_cpu<float>({dtype::f32, layout::nhwc, 1, 9, 12, 4, 8, k, ct}, *gpu,
                                    *cpu, seed++, -100, 100);
      expect_cuda_equals_cpu<std::uint8_t>({dtype::u8, layout::nhw, 5, 28, 28, 1, 8, k, ct},
                                           *gpu, *cpu, seed++, 0, 256);
      for (u64 w : {17, 18}) {
        expect_cuda_equals_cpu<std::int16_t>({dtype::i16, layout::nhw, 2, 9, w, 1, 8, k, ct},
                                             *gpu, *cpu, seed++, -300, 300);
        expect_cuda_equals_cpu<detail::half_value>({dtype::f16, layout::nhw, 2, 9, w, 1, 8, k, ct},
                                                   *gpu, *cpu, seed++, -100, 100);
      }
    }
  }
}

TEST(CudaEdges, U16AndI16OverTheirWholeRangeClampAsOnTheCpu) {
  REQUIRE_DEVICE();
  // Values at both ends decode past them (the chop drops detail) and clamp; f32 coefficients,
  // which hold what f16 cannot at these magnitudes.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  unsigned seed = 7500;
  for (int k : {1, 2, 3}) {
    expect_cuda_equals_cpu<std::uint16_t>({dtype::u16, layout::nhw, 2, 19, 24, 1, 8, k, coeff_type::f32},
                                          *gpu, *cpu, seed++, 0, 65536);
    expect_cuda_equals_cpu<std::int16_t>({dtype::i16, layout::nhw, 2, 19, 24, 1, 8, k, coeff_type::f32},
                                         *gpu, *cpu, seed++, -32768, 32768);
  }
}

TEST(CudaEdges, OutputsAtAddressesNotAlignedForWordsInEveryNarrowDtypeDecodeTheCpusValues) {
  REQUIRE_DEVICE();
  // Output pointers aligned to their elements but not to a word of them: element by element
  // stores, byte for byte the CPU's.
  unsigned seed = 8000;
  for (int k : {1, 3, 4, 8}) {
    for (std::size_t shift : {0, 2}) {
      expect_shifted_output_decodes<std::uint16_t>(dtype::u16, {layout::nhw, 2, 1, 9, 32}, 8, k,
                                                   32368, 33168, shift, seed++);
      expect_shifted_output_decodes<std::int16_t>(dtype::i16, {layout::nhw, 2, 1, 9, 32}, 8, k,
                                                  -300, 300, shift, seed++);
    }
    for (std::size_t shift : {0, 1, 2, 3}) {
      expect_shifted_output_decodes<std::uint8_t>(dtype::u8, {layout::nhw, 2, 1, 9, 32}, 8, k, 0,
                                                  256, shift, seed++);
      expect_shifted_output_decodes<std::int8_t>(dtype::i8, {layout::nhw, 2, 1, 9, 32}, 8, k,
                                                 -128, 128, shift, seed++);
    }
  }
  for (int k : {1, 2, 4}) {
    for (std::size_t shift : {0, 4, 8, 12}) {
      expect_shifted_output_decodes<float>(dtype::f32, {layout::nhw, 2, 1, 9, 32}, 4, k, -50, 50,
                                           shift, seed++);
    }
  }
}

TEST(CudaEdges, CoefficientsPastWhatTheTypeHoldsNameTheSameSampleAsTheCpuOrGiveItsBytes) {
  REQUIRE_DEVICE();
  // The device converts to f16 with cvt.rn.f16.f32: at the overflow boundary (a constant
  // block's DC is 8x at B = 8; f16 holds up to 65504 and rounds 65520 up to inf) and for
  // subnormal coefficients it must decide as the CPU does. i16 past 32767 and bf16 past its
  // largest value likewise. Sample 0 fits; sample 1 holds the edge value.
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu, {1});
  struct edge {
    coeff_type ct;
    float value;
  };
  const edge edges[] = {{coeff_type::f16, 8187.9f}, {coeff_type::f16, 8189.9f},
                        {coeff_type::f16, 8190.0f}, {coeff_type::f16, 8190.1f},
                        {coeff_type::f16, -8190.0f}, {coeff_type::f16, 1e-5f},
                        {coeff_type::f16, -3e-7f},  {coeff_type::i16, 4095.9f},
                        {coeff_type::i16, 4096.0f},  {coeff_type::i16, -4096.1f},
                        {coeff_type::bf16, 1e37f},   {coeff_type::bf16, 1e38f}};
  const geometry g{layout::nhw, 2, 1, 16, 16};
  for (const auto& e : edges) {
    codec_params p;
    p.coeff = e.ct;
    std::vector<float> in(512, 0.25f);
    std::fill(in.begin() + 256, in.end(), e.value);
    const std::string what = "coeff " + std::to_string(static_cast<int>(e.ct)) + " value " +
                             std::to_string(e.value);
    const auto view = make_view(g, dtype::f32, static_cast<const void*>(in.data()), 2);
    std::vector<std::byte> want(2 * coeff_bytes_per_sample(p, g), std::byte{0}), got(want.size());
    const auto cpu_error = encode_error(*cpu, p, view, want),
               gpu_error = encode_error(*gpu, p, view, got);
    const long long cpu_bad = cpu_error ? cpu_error->sample() : -1,
                    gpu_bad = gpu_error ? gpu_error->sample() : -1;
    EXPECT_EQ(gpu_bad, cpu_bad) << what << ": the first sample that does not fit (-1: none)";
    if (cpu_bad < 0 && gpu_bad < 0) {
      EXPECT_TRUE(got == want) << what << ": coefficients";
    }
    // The device-memory entry point, in both layouts, decides the same.
    device_bytes d_in(in.size() * 4), d_c(want.size()), d_flag(8);
    ASSERT_EQ(cudaMemcpy(d_in.p, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
      auto* flag = static_cast<unsigned long long*>(d_flag.p);
      cuda::encode_device_async(p, g, dtype::f32, 2, d_in.p, d_c.p, flag, nullptr, kl);
      unsigned long long bad = 0;
      ASSERT_EQ(cudaMemcpy(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(bad == ~0ull ? -1LL : static_cast<long long>(bad), cpu_bad)
          << what << (kl == cuda::kernel_layout::lines ? " lines" : " blocks");
      if (cpu_bad < 0) {
        std::vector<std::byte> dev(want.size());
        ASSERT_EQ(cudaMemcpy(dev.data(), d_c.p, dev.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_TRUE(dev == want) << what << (kl == cuda::kernel_layout::lines ? " lines" : " blocks")
                                 << ": coefficients";
      }
    }
  }
  // At least one edge must fall on each side, or the test says nothing.
  codec_params p;
  std::vector<float> fits(256, 8187.9f), overflows(256, 8190.1f);
  const geometry one{layout::nhw, 1, 1, 16, 16};
  std::vector<std::byte> out(coeff_bytes_per_sample(p, one));
  EXPECT_NO_THROW(cpu->encode(p, make_view(one, dtype::f32, static_cast<const void*>(fits.data()), 1), out));
  EXPECT_THROW(cpu->encode(p, make_view(one, dtype::f32, static_cast<const void*>(overflows.data()), 1), out),
               error);
}

TEST(CudaEdges, TheFirstBadSampleInALaterStreamedPartIsNamed) {
  REQUIRE_DEVICE();
  // 40 fields of 512x512 f32 (42 MB): several streamed parts; the bad sample lies in a later
  // one, whose kernel reports it relative to the batch, not to its part.
  auto gpu = make_backend(backend_kind::cuda);
  const geometry g{layout::nhw, 40, 1, 512, 512};
  std::vector<float> in(40 * 512 * 512, 0.5f);
  in[27 * 512 * 512 + 1000] = std::numeric_limits<float>::infinity();
  in[33 * 512 * 512 + 7] = std::numeric_limits<float>::quiet_NaN();
  codec_params p;
  p.coeff = coeff_type::f32;
  std::vector<std::byte> out(40 * coeff_bytes_per_sample(p, g));
  const auto e =
      encode_error(*gpu, p, make_view(g, dtype::f32, static_cast<const void*>(in.data()), 40), out);
  ASSERT_TRUE(e) << "Inf accepted";
  EXPECT_EQ(e->code(), errc::bad_input) << e->what();
  EXPECT_EQ(e->sample(), 27) << e->what();
}

TEST(CudaEdges, MinusZeroEverywhereDecodesToPlusZeroAsOnTheCpu) {
  REQUIRE_DEVICE();
  // -0 coefficients and an offset of -0: every product and sum is -0, and the offset is taken
  // plus 0, so every decode gives +0 (the CPU's bytes), in both layouts and every chop.
  const geometry g{layout::nhw, 2, 1, 9, 32};
  for (int k = 1; k <= 8; ++k) {
    codec_params p;
    p.chop = k;
    p.coeff = coeff_type::f32;
    p.offset = -0.0;
    std::vector<std::byte> c(2 * coeff_bytes_per_sample(p, g));
    for (std::size_t i = 0; i + 4 <= c.size(); i += 4) {
      const float z = -0.0f;
      std::memcpy(c.data() + i, &z, 4);
    }
    for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
      expect_device_decode_equals_cpu<float>(p, g, dtype::f32, c, 0, kl, "f32 of -0");
    }
    std::vector<float> back(2 * 9 * 32);
    make_backend(backend_kind::cpu, {1})
        ->decode(p, c, make_view(g, dtype::f32, static_cast<void*>(back.data()), 2));
    EXPECT_FALSE(std::signbit(back[0])) << "the CPU's decode gives +0";
  }
}

/** u8 input `in` of geometry `g` encoded on the device, then decoded by the direct kernel and
 *  by `gemm` (its output first filled with 0xA5, so that nothing left over passes for it): in
 *  `d`, how the two differ beyond one unit. */
void gemm_against_direct(cuda::gemm_decoder& gemm, const codec_params& p, const geometry& g,
                         const std::vector<std::uint8_t>& in, difference* d) {
  const u64 vals = g.samples * g.values_per_sample();
  const u64 cbytes = g.samples * coeff_bytes_per_sample(p, g);
  device_bytes d_in(vals), d_c(cbytes), d_direct(vals), d_gemm(vals);
  ASSERT_EQ(cudaMemcpy(d_in.p, in.data(), vals, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::encode_device(p, g, dtype::u8, g.samples, d_in.p, d_c.p);
  cuda::decode_device(p, g, dtype::u8, g.samples, d_c.p, d_direct.p);
  ASSERT_EQ(cudaMemset(d_gemm.p, 0xA5, vals), cudaSuccess);
  gemm.decode(p, g, dtype::u8, g.samples, d_c.p, d_gemm.p);
  std::vector<std::uint8_t> a(vals), c(vals);
  ASSERT_EQ(cudaMemcpy(a.data(), d_direct.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.data(), d_gemm.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  *d = compare(a, c, 1);
}

TEST(CudaGemm, MatrixFormDecodeEqualsTheDirectKernelWithinStoragePrecision) {
  REQUIRE_DEVICE();
  cuda::gemm_decoder gemm;
  for (int b : {4, 8, 16, 32}) {
    for (int k : {1, b / 2, b}) {
      // u8 NHWC (odd sizes): the two paths round the same real value, so they differ by at
      // most one, and only where it lies within float rounding of a half.
      geometry g{layout::nhwc, 16, 3, static_cast<u64>(5 * b + 3), static_cast<u64>(3 * b + 1)};
      codec_params p;
      p.block = b;
      p.chop = k;
      p.offset = 128;
      const u64 vals = g.samples * g.values_per_sample();
      const auto in = random_values<std::uint8_t>(vals, static_cast<unsigned>(b + k), 0, 256);
      difference du8;
      ASSERT_NO_FATAL_FAILURE(gemm_against_direct(gemm, p, g, in, &du8));
      EXPECT_EQ(du8.count, 0u) << "B=" << b << " K=" << k << ": " << du8;
      EXPECT_LT(du8.nonzero, vals / 100 + 1) << "B=" << b << " K=" << k << ": " << du8;
      // f32 planar with f32 coefficients: equal to float rounding.
      geometry gf{layout::nhw, 8, 1, static_cast<u64>(4 * b + 1), static_cast<u64>(2 * b + 5)};
      codec_params pf = p;
      pf.offset = 0;
      pf.coeff = coeff_type::f32;
      const u64 fv = gf.samples * gf.values_per_sample();
      const auto fin = random_values<float>(fv, 7, -10, 10);
      const u64 fc = gf.samples * coeff_bytes_per_sample(pf, gf);
      device_bytes f_in(fv * 4), f_c(fc), f_direct(fv * 4), f_gemm(fv * 4);
      ASSERT_EQ(cudaMemcpy(f_in.p, fin.data(), fv * 4, cudaMemcpyHostToDevice), cudaSuccess);
      cuda::encode_device(pf, gf, dtype::f32, gf.samples, f_in.p, f_c.p);
      cuda::decode_device(pf, gf, dtype::f32, gf.samples, f_c.p, f_direct.p);
      gemm.decode(pf, gf, dtype::f32, gf.samples, f_c.p, f_gemm.p);
      std::vector<float> fa(fv), fg(fv);
      ASSERT_EQ(cudaMemcpy(fa.data(), f_direct.p, fv * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(fg.data(), f_gemm.p, fv * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const difference df = compare(fa, fg, 1e-4);
      EXPECT_EQ(df.count, 0u) << "B=" << b << " K=" << k << ": " << df;
      // u32 over its whole range, first rows at its largest value: the GEMM store rounds and
      // clamps in double (as CudaGridOnHost checks on the host); the float GEMMs err by about
      // 2^-24 of the largest magnitudes, so within 2^-18 of the range.
      codec_params pu = pf;
      pu.offset = default_offset(dtype::u32);
      auto uin = random_values<std::uint32_t>(fv, 9, 0, 4294967296.0);
      for (u64 i = 0; i < gf.samples; ++i)
        std::fill_n(uin.begin() + i * gf.height * gf.width, b * gf.width, 4294967295u);
      device_bytes u_in(fv * 4), u_c(fc), u_direct(fv * 4), u_gemm(fv * 4);
      ASSERT_EQ(cudaMemcpy(u_in.p, uin.data(), fv * 4, cudaMemcpyHostToDevice), cudaSuccess);
      cuda::encode_device(pu, gf, dtype::u32, gf.samples, u_in.p, u_c.p);
      cuda::decode_device(pu, gf, dtype::u32, gf.samples, u_c.p, u_direct.p);
      gemm.decode(pu, gf, dtype::u32, gf.samples, u_c.p, u_gemm.p);
      std::vector<std::uint32_t> ua(fv), ug(fv);
      ASSERT_EQ(cudaMemcpy(ua.data(), u_direct.p, fv * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(ug.data(), u_gemm.p, fv * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const difference du = compare(ua, ug, std::ldexp(1.0, 32 - 18));
      EXPECT_EQ(du.count, 0u) << "u32 B=" << b << " K=" << k << ": " << du;
    }
  }
}

/** The GEMM decode of coefficients of type `ct` (the CPU's encode of random values of T)
 *  to dtype `type`, against the direct kernel on the same coefficients: within `tolerance`. */
template <typename T>
void expect_gemm_near_direct(cuda::gemm_decoder& gemm, dtype type, layout lay, coeff_type ct,
                             double lo, double hi, double tolerance, unsigned seed) {
  const geometry g = dctchop::test::shape_of(lay, 3, 21, 19, 2);
  const auto p = params(8, 4, ct, type);
  const auto c = encoded<T>(p, g, type, lo, hi, seed);
  const u64 vals = g.samples * g.values_per_sample();
  device_bytes d_c(c.size()), d_direct(vals * sizeof(T)), d_gemm(vals * sizeof(T));
  ASSERT_EQ(cudaMemcpy(d_c.p, c.data(), c.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_gemm.p, 0xA5, vals * sizeof(T)), cudaSuccess);
  cuda::decode_device(p, g, type, g.samples, d_c.p, d_direct.p);
  gemm.decode(p, g, type, g.samples, d_c.p, d_gemm.p);
  std::vector<T> a(vals), b(vals);
  ASSERT_EQ(cudaMemcpy(a.data(), d_direct.p, vals * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.data(), d_gemm.p, vals * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  const difference d = compare(a, b, tolerance);
  EXPECT_EQ(d.count, 0u) << "dtype " << static_cast<int>(type) << " coeff "
                         << static_cast<int>(ct) << ": " << d;
}

TEST(CudaGemm, EveryDtypeAndCoefficientTypeDecodesNearTheDirectKernel) {
  REQUIRE_DEVICE();
  // The GEMM's coefficient conversion to f32 and its final store, for the types the test
  // above leaves out. Integer outputs within one (both round a real value near a half);
  // f16 within one of its units between 128 and 256; f64 and i32 within the f32 GEMMs'
  // rounding.
  cuda::gemm_decoder gemm;
  unsigned seed = 9000;
  for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
    expect_gemm_near_direct<std::int8_t>(gemm, dtype::i8, layout::nchw, ct, -128, 128, 1, seed++);
    expect_gemm_near_direct<std::uint16_t>(gemm, dtype::u16, layout::nchw, ct, 32368, 33168, 1,
                                           seed++);
    expect_gemm_near_direct<std::int16_t>(gemm, dtype::i16, layout::nhwc, ct, -1000, 1000, 1,
                                          seed++);
    expect_gemm_near_direct<detail::half_value>(gemm, dtype::f16, layout::nchw, ct, -100, 100,
                                                0.125, seed++);  // (decoded values pass 128)
    expect_gemm_near_direct<double>(gemm, dtype::f64, layout::nchw, ct, -1e3, 1e3, 1e-3, seed++);
    if (ct == coeff_type::f32 || ct == coeff_type::bf16) {  // (8e6 fits neither f16 nor i16)
      expect_gemm_near_direct<std::int32_t>(gemm, dtype::i32, layout::nchw, ct, -1e6, 1e6, 4,
                                            seed++);
    }
  }
}

TEST(CudaGemm, OneDecoderOnAStreamDestroyedSinceThenOnAnotherGivesTheSameValues) {
  // The decoder waits for its previous call's work before reusing its scratch: through an
  // event, which stays valid when the caller destroys the previous stream (it used to
  // synchronise that stream, an error once it was destroyed).
  REQUIRE_DEVICE();
  cuda::gemm_decoder gemm;
  const geometry g = dctchop::test::shape_of(layout::nhwc, 32, 40, 56, 3);
  codec_params p;
  p.offset = 128;
  const u64 vals = g.samples * g.values_per_sample();
  const auto in = random_values<std::uint8_t>(vals, 11, 0, 256);
  const u64 cbytes = g.samples * coeff_bytes_per_sample(p, g);
  device_bytes d_in(vals), d_c(cbytes), d_first(vals), d_second(vals), d_third(vals);
  ASSERT_EQ(cudaMemcpy(d_in.p, in.data(), vals, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::encode_device(p, g, dtype::u8, g.samples, d_in.p, d_c.p);
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  gemm.decode_async(p, g, dtype::u8, g.samples, d_c.p, d_first.p, a);
  ASSERT_EQ(cudaStreamDestroy(a), cudaSuccess);  // its queued work still runs
  gemm.decode_async(p, g, dtype::u8, g.samples, d_c.p, d_second.p, b);
  // Another chop: new tables, after the host waits for the calls before.
  codec_params p2 = p;
  p2.chop = 2;
  device_bytes d_c2(g.samples * coeff_bytes_per_sample(p2, g));
  cuda::encode_device(p2, g, dtype::u8, g.samples, d_in.p, d_c2.p, b);
  gemm.decode(p2, g, dtype::u8, g.samples, d_c2.p, d_third.p, b);
  ASSERT_EQ(cudaStreamDestroy(b), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint8_t> first(vals), second(vals), third(vals), direct(vals), direct2(vals);
  ASSERT_EQ(cudaMemcpy(first.data(), d_first.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(second.data(), d_second.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(third.data(), d_third.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(first, second);
  // Each as the direct kernel decodes, to within the one unit that the GEMM's other order of
  // sums allows (CudaGemm.MatrixFormDecodeEqualsTheDirectKernelWithinStoragePrecision).
  device_bytes d_direct(vals);
  cuda::decode_device(p, g, dtype::u8, g.samples, d_c.p, d_direct.p);
  ASSERT_EQ(cudaMemcpy(direct.data(), d_direct.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  cuda::decode_device(p2, g, dtype::u8, g.samples, d_c2.p, d_direct.p);
  ASSERT_EQ(cudaMemcpy(direct2.data(), d_direct.p, vals, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(compare(direct, first, 1).count, 0u);
  EXPECT_EQ(compare(direct2, third, 1).count, 0u);
  EXPECT_NE(first, third) << "the second chop decoded as the first";
}

TEST(CudaGemm, ABatchOfSeveralPlaneGroupsEqualsTheDirectKernel) {
  // 600 images of 256x256x3: 1800 planes, in groups of 585 (256 MiB of scratch), so the later
  // groups start at planes 585, 1170 and 1755 (the last one short): their coefficients and
  // output are found by offset, which every smaller test leaves at 0.
  REQUIRE_DEVICE();
  cuda::gemm_decoder gemm;
  const geometry g = dctchop::test::shape_of(layout::nhwc, 600, 256, 256, 3);
  codec_params p;
  p.offset = 128;
  const u64 vals = g.samples * g.values_per_sample();
  std::vector<std::uint8_t> in(vals);
  std::uint32_t r = 12345;
  for (auto& v : in) v = static_cast<std::uint8_t>((r = r * 1664525u + 1013904223u) >> 24);
  difference d;
  ASSERT_NO_FATAL_FAILURE(gemm_against_direct(gemm, p, g, in, &d));
  EXPECT_EQ(d.count, 0u) << d;
  EXPECT_LT(d.nonzero, vals / 100 + 1) << d;
}

TEST(CudaGemm, PlanesTooTallForOneGridAxisAreRefusedWithTheDirectKernelNamed) {
  // More than 65535 block rows in one plane: the second GEMM's batch would pass the grid
  // axis where cuBLAS has failed. Refused before any work, naming the way that works.
  REQUIRE_DEVICE();
  cuda::gemm_decoder gemm;
  const geometry g{layout::hw, 1, 1, 65536 * 8 + 1, 8};
  codec_params p;
  p.offset = 128;
  device_bytes d_c(coeff_bytes_per_sample(p, g)), d_out(g.values_per_sample());
  try {
    gemm.decode(p, g, dtype::u8, 1, d_c.p, d_out.p);
    ADD_FAILURE() << "decoded a plane of 65537 block rows";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("decode_device"), std::string::npos) << e.what();
  }
}

TEST(CudaSelection, AutoTakesTheDeviceAndCudaAsksForIt) {
  REQUIRE_DEVICE();
  EXPECT_EQ(make_backend(backend_kind::automatic)->name(), "cuda");
  EXPECT_EQ(make_backend(backend_kind::cuda)->name(), "cuda");
  // A GPU whose architecture the kernels were built for: no note of a fallback either.
  std::vector<std::string> notes;
  const auto note = [&](const std::string& why) { notes.push_back(why); };
  EXPECT_EQ(make_backend(backend_kind::automatic, {}, note)->name(), "cuda");
  EXPECT_TRUE(notes.empty()) << notes.front();
  // --version names each device by the index that --device takes.
  const int n = cuda::device_count();
  const std::string status = cuda::device_status();
  EXPECT_EQ(status.rfind(std::to_string(n) + (n == 1 ? " device: 0 " : " devices: 0 "), 0), 0u)
      << status;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, n - 1), cudaSuccess);
  EXPECT_NE(status.find(std::to_string(n - 1) + " " + prop.name + " (sm_" +
                        std::to_string(prop.major) + std::to_string(prop.minor) + ", "),
            std::string::npos)
      << status;
}

TEST(CudaSelection, StartedInTheBackgroundItCodesAsTheCpuThenPinsTheBuffersItGaveBefore) {
  REQUIRE_DEVICE();
  // The command-line tool's backend: buffers made and coded while the driver starts, on the
  // CPU; once up, the device codes the same bytes from the same buffers, now page-locked. The
  // start is held (before it pins) until the buffers exist and the first call has run: in this
  // process the runtime is up already, and the start would otherwise beat them.
  const geometry g = dctchop::test::shape_of(layout::nhwc, 64, 256, 256, 3);  // 12.6 MB
  codec_params p;
  p.chop = 4;
  p.coeff = coeff_type::f16;
  p.offset = 128;
  const auto values = random_values<std::uint8_t>(g.samples * g.values_per_sample(), 5, 0, 256);
  const u64 cb = g.samples * coeff_bytes_per_sample(p, g);
  std::vector<std::byte> want(cb);
  std::vector<std::uint8_t> cpu_decoded(values.size());
  {
    auto cpu = make_backend(backend_kind::cpu);
    cpu->encode(p, make_view(g, dtype::u8, static_cast<const void*>(values.data()), g.samples),
                want);
    cpu->decode(p, want,
                make_view(g, dtype::u8, static_cast<void*>(cpu_decoded.data()), g.samples));
  }
  for (const bool held : {true, false}) {
    std::promise<void> go;
    std::shared_future<void> gate = go.get_future().share();
    backend_options o;
    o.start_in_background = true;
    std::vector<std::string> notes;
    const auto note = [&](const std::string& why) { notes.push_back(why); };
    std::unique_ptr<backend> be =
        held ? detail::start_cuda_backend(o, nullptr, [gate] { gate.get(); })
             : make_backend(backend_kind::automatic, o, note);
    ASSERT_NE(be, nullptr);
    struct opener {  // before the backend goes (its destructor waits for the start): no hang
      std::promise<void>& go;
      bool opened = false;
      void open() {
        if (!opened) go.set_value();
        opened = true;
      }
      ~opener() { open(); }
    } gate_opener{go};
    byte_buffer in = host_buffer(*be, values.size());
    byte_buffer coeffs = host_buffer(*be, cb);
    std::memcpy(in.data(), values.data(), values.size());
    const auto view = make_view(g, dtype::u8, static_cast<const void*>(in.data()), g.samples);
    if (held) {
      EXPECT_FALSE(cuda::is_pinned(in.data(), in.size())) << "before the start";
    }
    be->encode(p, view, coeffs);  // held: on the CPU
    EXPECT_TRUE(std::equal(want.begin(), want.end(), coeffs.begin())) << "first call";
    if (held) {
      EXPECT_EQ(dynamic_cast<detail::starting_backend&>(*be).stopgap_calls(), 1u);
      gate_opener.open();
    }
    be->wait_started();
    EXPECT_EQ(be->name(), "cuda");
    EXPECT_TRUE(notes.empty()) << notes.front();
    EXPECT_TRUE(cuda::is_pinned(in.data(), in.size())) << "a buffer made before the start";
    EXPECT_TRUE(cuda::is_pinned(coeffs.data(), coeffs.size()));
    byte_buffer later = host_buffer(*be, values.size());
    EXPECT_TRUE(cuda::is_pinned(later.data(), later.size())) << "a buffer made after it";
    std::fill(coeffs.begin(), coeffs.end(), std::byte{0});
    be->encode(p, view, coeffs);  // on the device
    EXPECT_TRUE(std::equal(want.begin(), want.end(), coeffs.begin())) << "on the device";
    byte_buffer decoded = host_buffer(*be, values.size());
    be->decode(p, coeffs, make_view(g, dtype::u8, static_cast<void*>(decoded.data()), g.samples));
    EXPECT_EQ(std::memcmp(decoded.data(), cpu_decoded.data(), values.size()), 0);
    if (held) {
      EXPECT_EQ(dynamic_cast<detail::starting_backend&>(*be).stopgap_calls(), 1u);
    }
  }
}

TEST(CudaSelection, ADeviceByIndexCodesAsTheCpuAndOneThatIsNotThereIsAnError) {
  REQUIRE_DEVICE();
  const int n = cuda::device_count();
  const geometry g = dctchop::test::shape_of(layout::nhwc, 4, 40, 56, 3);
  codec_params p;
  p.chop = 4;
  p.coeff = coeff_type::f16;
  p.offset = 128;
  const auto values = random_values<std::uint8_t>(g.samples * g.values_per_sample(), 9, 0, 256);
  const auto view = make_view(g, dtype::u8, static_cast<const void*>(values.data()), g.samples);
  std::vector<std::byte> want(g.samples * coeff_bytes_per_sample(p, g)), got(want.size());
  make_backend(backend_kind::cpu)->encode(p, view, want);
  int before = -1;
  ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
  for (const bool background : {false, true}) {
    backend_options o;
    o.start_in_background = background;
    o.device = n - 1;  // the last one (the only one on a machine of one GPU)
    for (const auto kind : {backend_kind::cuda, backend_kind::automatic}) {
      auto be = make_backend(kind, o);
      be->wait_started();
      EXPECT_EQ(be->name(), "cuda");
      std::fill(got.begin(), got.end(), std::byte{0});
      be->encode(p, view, got);
      EXPECT_EQ(got, want) << "device " << o.device << (background ? ", started beside" : "");
      int now = -1;
      ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
      EXPECT_EQ(now, before) << "the caller's current device is its own";
    }
    if (n >= 2) {
      // Device 1 from a thread of its own, which chose no device (its runtime says 0): it
      // codes there and is left there (set back to 0, it would start a context on device 0).
      int on_thread = -1;
      std::thread([&] {
        backend_options one = o;
        one.device = 1;
        auto be = make_backend(backend_kind::cuda, one);
        be->wait_started();
        std::vector<std::byte> mine(want.size());
        be->encode(p, view, mine);
        EXPECT_EQ(mine, want) << "device 1";
        (void)cudaGetDevice(&on_thread);
      }).join();
      EXPECT_EQ(on_thread, 1);
    }
    o.device = n;  // one past the last
    for (const auto kind : {backend_kind::cuda, backend_kind::automatic}) {
      try {
        auto be = make_backend(kind, o);
        be->wait_started();  // (started beside: the start's error comes here)
        ADD_FAILURE() << "a backend on device " << n << " of " << n;
      } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
        EXPECT_NE(std::string(e.what()).find("CUDA device " + std::to_string(n) + " is not there"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

}  // namespace

// ---- the device loader on a GPU -----------------------------------------------------------

#include <dlpack/dlpack.h>

#include "dctchop/device_loader.hpp"
#include "dctchop/formats/pipeline.hpp"

namespace {

/** dir/x.npy: n random u8 images of h x w x 3. */
void save_random_images(const dctchop::test::temp_dir& dir, u64 n, u64 h, u64 w, unsigned seed) {
  const auto x = random_values<std::uint8_t>(n * h * w * 3, seed, 0, 256);
  dctchop::test::save_npy(dir.file("x.npy"), dtype::u8, {n, h, w, 3}, x);
}

/** dir/a.dcz: 50 random u8 images of 32x24x3 in chunks of a few images, made on the CPU;
 *  returns the options of a loader of batches of 8 in the order of `order_seed`. */
loaders::loader_options make_small_archive(const dctchop::test::temp_dir& dir, unsigned seed,
                                           std::uint64_t order_seed) {
  save_random_images(dir, 50, 32, 24, seed);
  auto cpu = make_backend(backend_kind::cpu, {1});
  formats::compress_options co;
  co.measure_quality = false;
  co.chunk_mb = 0.01;
  formats::compress_npy(dir.file("x.npy"), dir.file("a.dcz"), *cpu, co);
  loaders::loader_options o;
  o.batch_size = 8;
  o.seed = order_seed;
  return o;
}

TEST(CudaDeviceLoader, DlpackBatchesOnTheDeviceEqualTheHostLoader) {
  REQUIRE_DEVICE();
  dctchop::test::temp_dir dir;
  const auto o = make_small_archive(dir, 8, 6);
  for (const std::size_t threads : {1u, 3u}) {  // each batch's coefficients gathered on 3 too
    SCOPED_TRACE("threads " + std::to_string(threads));
    auto od = o;
    od.threads = threads;
    loaders::archive_loader host(dir.file("a.dcz"), o);
    loaders::device_loader dev(dir.file("a.dcz"), od, 0, 2);
    EXPECT_EQ(dev.device(), 0);
    for (int i = 0; i < 9; ++i) {  // more batches than buffers, across an epoch boundary
      std::vector<u64> samples;
      DLManagedTensor* t = dev.next(&samples);
      const auto want = host.next();
      ASSERT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
      ASSERT_EQ(t->dl_tensor.ndim, 4);
      EXPECT_EQ(samples, want.samples);
      byte_buffer got(want.data.size());
      ASSERT_EQ(cudaMemcpy(got.data(), t->dl_tensor.data, got.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_TRUE(got == want.data) << "batch " << i;
      t->deleter(t);
    }
  }
}

TEST(CudaDeviceLoader, ABatchSizePastTheArchiveIsOneBatchOfEverySampleInBuffersItsSize) {
  // SIZE_MAX samples a batch, drop_last off: one batch of all 50. Its device buffers are sized
  // for those 50 (SIZE_MAX times the sample's bytes wrapped to a small ring, or asked for
  // exabytes). (drop_last on, the default, refuses the archive: no batch; a host test says so.)
  REQUIRE_DEVICE();
  dctchop::test::temp_dir dir;
  auto o = make_small_archive(dir, 10, 4);
  o.batch_size = SIZE_MAX;
  o.drop_last = false;
  loaders::archive_loader host(dir.file("a.dcz"), o);
  loaders::device_loader dev(dir.file("a.dcz"), o, 0, 1);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<u64> samples;
    DLManagedTensor* t = dev.next(&samples);
    const auto want = host.next();
    ASSERT_EQ(want.samples.size(), 50u);
    EXPECT_EQ(samples, want.samples);
    ASSERT_EQ(t->dl_tensor.ndim, 4);
    EXPECT_EQ(t->dl_tensor.shape[0], 50);
    byte_buffer got(want.data.size());
    ASSERT_EQ(cudaMemcpy(got.data(), t->dl_tensor.data, got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(got == want.data) << "epoch " << epoch;
    t->deleter(t);
  }
}

TEST(CudaDeviceLoader, TensorsHeldOnAConsumerStreamKeepTheirValuesUntilReleased) {
  // Two tensors held at once (every buffer), used on the caller's own stream behind a long
  // queue of other work: a third is refused (the ring's extra slot is the batch decoded
  // ahead, not one more to hold), and a buffer given back is decoded into again only after
  // the work queued on that stream has read it.
  REQUIRE_DEVICE();
  dctchop::test::temp_dir dir;
  const auto o = make_small_archive(dir, 9, 3);
  loaders::archive_loader host(dir.file("a.dcz"), o);
  loaders::device_loader dev(dir.file("a.dcz"), o, 0, 2);
  cudaStream_t cs = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
  DLManagedTensor* t1 = dev.next(nullptr, nullptr, cs);
  DLManagedTensor* t2 = dev.next(nullptr, nullptr, cs);
  const auto w1 = host.next(), w2 = host.next(), w3 = host.next(), w4 = host.next();
  for (DLManagedTensor* t : {t1, t2}) {
    const DLTensor& x = t->dl_tensor;
    EXPECT_EQ(x.device.device_type, kDLCUDA);
    EXPECT_EQ(x.device.device_id, 0);
    EXPECT_EQ(x.dtype.code, kDLUInt);
    EXPECT_EQ(x.dtype.bits, 8);
    EXPECT_EQ(x.dtype.lanes, 1);
    ASSERT_EQ(x.ndim, 4);
    EXPECT_EQ(std::vector<std::int64_t>(x.shape, x.shape + 4), (std::vector<std::int64_t>{8, 32, 24, 3}));
  }
  try {
    DLManagedTensor* extra = dev.next();
    extra->deleter(extra);
    ADD_FAILURE() << "a third batch while both buffers are held";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
  }
  // 8 GiB of memset ahead of the copy on the consumer's stream, then t1 given back: the batch
  // after the next is decoded into t1's buffer, which must wait for the copy.
  const u64 bytes = w1.data.size();
  device_bytes busy(u64(1) << 30), copy(bytes);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(cudaMemsetAsync(busy.p, i, u64(1) << 30, cs), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(copy.p, t1->dl_tensor.data, bytes, cudaMemcpyDeviceToDevice, cs),
            cudaSuccess);
  t1->deleter(t1);
  DLManagedTensor* t3 = dev.next(nullptr, nullptr, cs);  // decoded ahead; batch 4 goes into t1's
  auto back = [&](const void* d) {
    byte_buffer b(w1.data.size());
    EXPECT_EQ(cudaMemcpy(b.data(), d, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return b;
  };
  EXPECT_TRUE(back(t2->dl_tensor.data) == w2.data);
  t2->deleter(t2);
  DLManagedTensor* t4 = dev.next(nullptr, nullptr, cs);
  ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
  EXPECT_TRUE(back(copy.p) == w1.data) << "the first batch was overwritten before it was read";
  EXPECT_TRUE(back(t3->dl_tensor.data) == w3.data);
  EXPECT_TRUE(back(t4->dl_tensor.data) == w4.data);
  t3->deleter(t3);
  t4->deleter(t4);
  ASSERT_EQ(cudaStreamDestroy(cs), cudaSuccess);
}

TEST(CudaPinnedMemory, BlocksArePageLockedAndRecycled) {
  REQUIRE_DEVICE();
  auto pool = std::make_shared<recycling_resource>(cuda::pinned_memory(0));
  const std::size_t bytes = std::size_t(3) << 20;
  void* p = pool->allocate(bytes, 64);
  cudaPointerAttributes at{};
  ASSERT_EQ(cudaPointerGetAttributes(&at, p), cudaSuccess);
  EXPECT_EQ(at.type, cudaMemoryTypeHost);  // page-locked, not pageable (cudaMemoryTypeUnregistered)
  EXPECT_TRUE(cuda::is_pinned(p, bytes));
  std::vector<std::byte> pageable(bytes);
  EXPECT_FALSE(cuda::is_pinned(pageable.data(), pageable.size()));
  pool->deallocate(p, bytes, 64);
  void* q = pool->allocate(bytes, 64);
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool->statistics().from_upstream, 1u);
  // An asynchronous round trip through the device from and to the pinned block.
  auto* h = static_cast<std::uint8_t*>(q);
  for (std::size_t i = 0; i < bytes; ++i) h[i] = static_cast<std::uint8_t>(i * 7);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, q, bytes, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  std::vector<std::uint8_t> back(bytes);
  ASSERT_EQ(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (std::size_t i = 0; i < bytes; i += 4099) ASSERT_EQ(back[i], static_cast<std::uint8_t>(i * 7));
  pool->deallocate(q, bytes, 64);
}

TEST(CudaPipelines, CompressAndDecompressOnTheDeviceEqualTheCpu) {
  REQUIRE_DEVICE();
  // The chunk pipelines hand the CUDA backend buffers in its pinned host memory.
  dctchop::test::temp_dir dir;
  save_random_images(dir, 61, 40, 36, 11);
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  formats::compress_options co;
  co.chunk_mb = 0.05;  // several chunks
  const auto rg = formats::compress_npy(dir.file("x.npy"), dir.file("g.dcz"), *gpu, co);
  const auto rc = formats::compress_npy(dir.file("x.npy"), dir.file("c.dcz"), *cpu, co);
  ASSERT_GT(rg.chunks, 2u);
  // The figures measured on the device (u8) are the host's, to the bit.
  ASSERT_TRUE(rg.q && rc.q);
  dctchop::test::expect_same_figures(*rg.q, *rc.q);
  formats::decompress_to_npy(dir.file("g.dcz"), dir.file("g.npy"), *gpu, {});
  formats::decompress_to_npy(dir.file("c.dcz"), dir.file("c.npy"), *cpu, {});
  EXPECT_EQ(dctchop::test::read_bytes(dir.file("g.npy")), dctchop::test::read_bytes(dir.file("c.npy")));
  const auto v = formats::verify_archive(dir.file("g.dcz"), dir.file("x.npy"), *gpu, {});
  EXPECT_TRUE(v.passed());
  ASSERT_TRUE(v.q);
  dctchop::test::expect_same_figures(*v.q, *rc.q);
}

TEST(CudaPipelines, EvalMeasuresOnTheDeviceAsTheCpu) {
  REQUIRE_DEVICE();
  // eval times the decode to the host, then measures on the device: every row's figures are
  // the CPU's, to the bit, for u8 images and for f32 fields (their range from a first pass).
  dctchop::test::temp_dir dir;
  save_random_images(dir, 23, 40, 36, 12);
  const auto f = random_values<float>(9 * 45 * 50, 13, -3.0, 7.0);
  dctchop::test::save_npy(dir.file("f.npy"), dtype::f32, {9, 45, 50}, f);
  auto gpu = make_backend(backend_kind::cuda);
  auto cpu = make_backend(backend_kind::cpu);
  formats::eval_options eo;
  eo.chops = {1, 4, 8};
  for (const char* name : {"x.npy", "f.npy"}) {
    SCOPED_TRACE(name);
    const auto rg = formats::eval_npy(dir.file(name), *gpu, eo);
    const auto rc = formats::eval_npy(dir.file(name), *cpu, eo);
    ASSERT_EQ(rg.rows.size(), 3u);
    ASSERT_EQ(rc.rows.size(), 3u);
    for (std::size_t i = 0; i < rg.rows.size(); ++i) {
      SCOPED_TRACE(rg.rows[i].chop);
      ASSERT_TRUE(rg.rows[i].error.empty()) << rg.rows[i].error;
      ASSERT_TRUE(rg.rows[i].q.ssim.has_value());
      dctchop::test::expect_same_figures(rg.rows[i].q, rc.rows[i].q);
    }
  }
}

// ---- the device's conversion instructions, against the host's emulation of them ------------

TEST(CudaConversions, EachInstructionGivesWhatTheHostsEmulationOfItGives) {
  REQUIRE_DEVICE();
  // The host tests (DevicePaths) run the device paths with these instructions emulated
  // (ptx_emulation.hpp): here the GPU's own, on the same kinds of input: every integer of the
  // 8- and 16-bit ranges and past them with ties and neighbours, NaNs, infinities, -0, bit
  // sweeps; the ends of i32 and u32 in double; bytes' edges and random integers to pack.
  struct {
    std::vector<float> f, f2;
    std::vector<double> d, d2;
    std::vector<std::int32_t> a, b;
    std::vector<std::uint32_t> c;
  } in;
  for (const auto& [lo, hi, sweep] : {std::tuple{-128.0, 127.0, 1u << 14}, {0.0, 255.0, 1u << 14},
                                      {-32768.0, 32767.0, 1u << 14}, {0.0, 65535.0, 1u << 20}}) {
    const std::vector<float> part = test::edge_values<float>(lo, hi, sweep);
    in.f.insert(in.f.end(), part.begin(), part.end());
  }
  const std::vector<double> d = test::edge_values<double>(-2147483648.0, 4294967295.0);
  const std::size_t n = in.f.size();
  in.f2.resize(n);
  in.d.resize(n);
  in.d2.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    in.d[i] = d[i % d.size()];
    in.f2[i] = in.f[(i * 7919 + 13) % n];  // (NaN beside numbers, numbers beside NaN)
    in.d2[i] = d[(i * 7919 + 13) % d.size()];
  }
  std::mt19937 rng(3);
  const std::int32_t edges[] = {std::numeric_limits<std::int32_t>::min(), -129, -128, -127, -1, 0,
                                1, 126, 127, 128, 254, 255, 256, 1 << 20,
                                std::numeric_limits<std::int32_t>::max()};
  const auto some_int = [&](std::size_t i) {
    return i % 2 ? edges[rng() % std::size(edges)] : static_cast<std::int32_t>(rng());
  };
  for (std::size_t i = 0; i < n; ++i) {
    in.a.push_back(some_int(i));
    in.b.push_back(some_int(i / 2));
    in.c.push_back(static_cast<std::uint32_t>(rng()));
  }
  // The inputs copied to the device, room there for the outputs, and the outputs back, in
  // device_bytes (as the device-memory tests above).
  std::deque<device_bytes> held;  // (a deque: its elements never move)
  const auto up = [&](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    void* p = held.emplace_back(host.size() * sizeof(T) + 1).p;
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return static_cast<const T*>(p);
  };
  const auto room = [&](auto*& dev) {
    dev = static_cast<std::remove_reference_t<decltype(dev)>>(held.emplace_back(n * sizeof(*dev) + 1).p);
  };
  struct {
    std::vector<std::int32_t> rni_s32_f, rni_s32_d;
    std::vector<std::uint32_t> rni_u32_f, rni_u32_d;
    std::vector<float> max_f, min_f;
    std::vector<double> max_d, min_d;
    std::vector<std::uint16_t> rn_f16;
    std::vector<std::uint32_t> pack_u8, pack_s8;
  } got;
  const auto down = [&](auto& host, const auto* dev) {
    host.resize(n);
    EXPECT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(*dev), cudaMemcpyDeviceToHost), cudaSuccess);
  };
  test::conversion_views v{};
  v.f = up(in.f);
  v.f2 = up(in.f2);
  v.d = up(in.d);
  v.d2 = up(in.d2);
  v.a = up(in.a);
  v.b = up(in.b);
  v.c = up(in.c);
  room(v.rni_s32_f);
  room(v.rni_s32_d);
  room(v.rni_u32_f);
  room(v.rni_u32_d);
  room(v.max_f);
  room(v.min_f);
  room(v.max_d);
  room(v.min_d);
  room(v.rn_f16);
  room(v.pack_u8);
  room(v.pack_s8);
  ASSERT_EQ(test::run_conversions(v, n), cudaSuccess);
  down(got.rni_s32_f, v.rni_s32_f);
  down(got.rni_s32_d, v.rni_s32_d);
  down(got.rni_u32_f, v.rni_u32_f);
  down(got.rni_u32_d, v.rni_u32_d);
  down(got.max_f, v.max_f);
  down(got.min_f, v.min_f);
  down(got.max_d, v.max_d);
  down(got.min_d, v.min_d);
  down(got.rn_f16, v.rn_f16);
  down(got.pack_u8, v.pack_u8);
  down(got.pack_s8, v.pack_s8);
  ASSERT_FALSE(HasFailure()) << "the copies to and from the device";
  // cvt.pack.sat is sm_72's and later (device_conversions.cu stores 0 before it)
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  const bool packs = major * 10 + minor >= 72;

  // Per instruction, how many elements differ and the first of them (not an assertion each).
  struct tally {
    u64 count = 0;
    std::string first;
  };
  std::map<std::string, tally> differ;
  // (inputs: a function that says them, called for the first difference only)
  const auto note = [&](const char* what, bool same, std::size_t i, const auto& got_value,
                        const auto& want_value, const auto& inputs) {
    if (same) return;
    tally& t = differ[what];
    if (t.count++ == 0) {
      std::ostringstream s;
      s << "element " << i << " (" << inputs() << "): GPU " << +got_value << ", emulation "
        << +want_value;
      t.first = s.str();
    }
  };
  const auto same_real = [](auto x, auto y) { return x == y || (x != x && y != y); };
  using emu = test::emulated_ptx;
  for (std::size_t i = 0; i < n; ++i) {
    const float f = in.f[i], f2 = in.f2[i];
    const double x = in.d[i], x2 = in.d2[i];
    const auto fs = [&] { return test::bits_text(f); };
    const auto xs = [&] { return test::bits_text(x); };
    note("cvt.rni.s32.f32", got.rni_s32_f[i] == emu::rni_s32(f), i, got.rni_s32_f[i],
         emu::rni_s32(f), fs);
    note("cvt.rni.u32.f32", got.rni_u32_f[i] == emu::rni_u32(f), i, got.rni_u32_f[i],
         emu::rni_u32(f), fs);
    note("cvt.rni.s32.f64", got.rni_s32_d[i] == emu::rni_s32(x), i, got.rni_s32_d[i],
         emu::rni_s32(x), xs);
    note("cvt.rni.u32.f64", got.rni_u32_d[i] == emu::rni_u32(x), i, got.rni_u32_d[i],
         emu::rni_u32(x), xs);
    const auto fs2 = [&] { return test::bits_text(f) + ", " + test::bits_text(f2); };
    const auto xs2 = [&] { return test::bits_text(x) + ", " + test::bits_text(x2); };
    note("max.f32", same_real(got.max_f[i], emu::max(f, f2)), i, got.max_f[i], emu::max(f, f2), fs2);
    note("min.f32", same_real(got.min_f[i], emu::min(f, f2)), i, got.min_f[i], emu::min(f, f2), fs2);
    note("max.f64", same_real(got.max_d[i], emu::max(x, x2)), i, got.max_d[i], emu::max(x, x2), xs2);
    note("min.f64", same_real(got.min_d[i], emu::min(x, x2)), i, got.min_d[i], emu::min(x, x2), xs2);
    // A NaN: any NaN (the device path converts none; the ISA does not say which NaN it gives)
    const std::uint16_t h = got.rn_f16[i], want_h = emu::rn_f16(f);
    const bool h_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    note("cvt.rn.f16.f32", f != f ? h_nan : h == want_h, i, h, want_h, fs);
    const auto abc = [&] {
      return std::to_string(in.a[i]) + ", " + std::to_string(in.b[i]) + ", " +
             std::to_string(in.c[i]);
    };
    if (!packs) continue;
    note("cvt.pack.sat.u8.s32.b32", got.pack_u8[i] == emu::pack_sat_u8(in.a[i], in.b[i], in.c[i]),
         i, got.pack_u8[i], emu::pack_sat_u8(in.a[i], in.b[i], in.c[i]), abc);
    note("cvt.pack.sat.s8.s32.b32", got.pack_s8[i] == emu::pack_sat_s8(in.a[i], in.b[i], in.c[i]),
         i, got.pack_s8[i], emu::pack_sat_s8(in.a[i], in.b[i], in.c[i]), abc);
  }
  for (const auto& [what, t] : differ) {
    ADD_FAILURE() << what << ": " << t.count << " of " << n << " elements differ; first "
                  << t.first;
  }
  EXPECT_GT(n, 1000000u);
}

}  // namespace
