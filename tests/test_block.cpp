// Tests of the per-block arithmetic that the CUDA kernels run (lib/include/dctchop/detail/
// block.hpp), on the CPU: encoding and decoding whole datasets block by block with it must give
// the CPU backend's bytes exactly, for every block size, chop, coefficient type, dtype and
// layout, on sizes that are not multiples of the block. The CUDA tests (test_cuda.cpp, label
// gpu) then only have to show that the device runs the same functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_arch.hpp"
#include "cuda_grid.hpp"
#include "dctchop/codec.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/detail/block.hpp"
#include "dctchop/error.hpp"
#include "dctchop/matrix_form.hpp"
#include "dispatch.hpp"
#include "test_util.hpp"

namespace {

using namespace dctchop;
using detail::coeff_code;
using u64 = std::uint64_t;

static_assert(static_cast<int>(coeff_code::f16) == static_cast<int>(coeff_type::f16) &&
              static_cast<int>(coeff_code::bf16) == static_cast<int>(coeff_type::bf16) &&
              static_cast<int>(coeff_code::f32) == static_cast<int>(coeff_type::f32) &&
              static_cast<int>(coeff_code::i16) == static_cast<int>(coeff_type::i16));

template <typename T>
std::vector<T> random_values(u64 n, unsigned seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::numeric_limits<T>::is_integer ? std::floor(d(rng)) : d(rng));
  return v;
}

/** Every thread index of a CUDA grid of `threads` (rounded up to whole CTAs, as the
 *  launches are), last first: the result must not depend on the order threads run in. */
template <typename Fn>
void for_each_thread(u64 threads, Fn&& fn) {
  for (u64 i = u64(detail::ctas_for(threads)) * detail::threads_per_cta; i-- > 0;) fn(i);
}

/** Every (grid row, position) of a line kernel's two-dimensional grid, likewise. */
template <typename Fn>
void for_each_line_thread(const detail::line_grid& lg, Fn&& fn) {
  for (u64 row = lg.rows; row-- > 0;) {
    for_each_thread(lg.width, [&](u64 pos) { fn(row, static_cast<std::uint32_t>(pos)); });
  }
}

/** A CUDA encode kernel on the host (cuda_backend.cu's launch_encode): each thread's
 *  function of cuda_grid.hpp over the kernel's whole grid, past its last thread too (the
 *  kernels check the bound). Returns the first sample with a coefficient out of range, as the
 *  kernel's atomicMin records it, or -1. */
template <typename In, typename Real, int BT = 0>
long long encode_on_host(cuda::kernel_layout kl, const codec_params& p, const geometry& g,
                         const In* in, std::vector<std::byte>& out) {
  const auto tab = detail::make_table<Real>(p.block);
  const auto bg = detail::batch_of(p, g, g.samples);
  const auto offset = static_cast<Real>(p.offset);
  const auto code = static_cast<coeff_code>(p.coeff);
  out.assign(g.samples * coeff_bytes_per_sample(p, g), std::byte{0});
  u64 first_bad = detail::all_fit;  // the kernels' atomicMin
  const auto rows = detail::row_grid(bg, p.chop);
  if (detail::uses_lines(detail::chosen_layout(kl, true, p.block), rows)) {
    for_each_line_thread(rows, [&](u64 row, std::uint32_t pos) {
      first_bad = std::min(first_bad, detail::encode_line_thread<BT>(row, pos, tab.t, p.block, p.chop,
                                                                     in, bg, offset, code, out.data()));
    });
  } else {
    detail::with_encode_stride<BT, In>(bg, [&](auto sc) {
      constexpr int SC = decltype(sc)::value;
      for_each_thread(detail::block_threads(bg), [&](u64 i) {
        first_bad = std::min(first_bad, detail::encode_thread<BT, SC>(i, tab.t, p.block, p.chop,
                                                                      in, bg, offset, code,
                                                                      out.data()));
      });
    });
  }
  return first_bad == detail::all_fit ? -1 : static_cast<long long>(first_bad);
}

/** A CUDA decode kernel on the host (launch_decode). */
template <typename Out, typename Real, int BT = 0>
void decode_on_host(cuda::kernel_layout kl, const codec_params& p, const geometry& g,
                    const std::byte* coeffs, Out* out) {
  const auto tab = detail::make_table<Real>(p.block);
  const auto bg = detail::batch_of(p, g, g.samples);
  const auto offset = static_cast<Real>(p.offset);
  const auto code = static_cast<coeff_code>(p.coeff);
  detail::with_decode_chop<BT, Real>(p.chop, code, coeffs, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    detail::with_decode_planes<BT, KT, Out>(bg, [&](auto pt) {
      constexpr int P = decltype(pt)::value;
      const auto columns = detail::decode_line_grid<BT, KT, Out, Real, P>(bg);
      if (detail::uses_lines(detail::chosen_layout(kl, false, p.block), columns)) {
        for_each_line_thread(columns, [&](u64 row, std::uint32_t pos) {
          detail::decode_line_thread<BT, KT, Out, Real, P>(row, pos, tab.t, p.block, p.chop,
                                                           coeffs, code, out, bg, offset);
        });
      } else {
        for_each_thread(detail::block_threads(bg), [&](u64 i) {
          detail::decode_thread<BT>(i, tab.t, p.block, p.chop, coeffs, code, out, bg, offset);
        });
      }
    });
  });
}

/** One setting: random data of type T through the CPU backend and through the block
 *  functions; coefficients and decoded values must be identical bytes. */
template <typename T, typename Real>
void expect_same_as_cpu(dtype dt, layout lay, u64 n, u64 h, u64 w, u64 c, int b, int k,
                        coeff_type ct, double lo, double hi, unsigned seed) {
  const geometry g = test::shape_of(lay, n, h, w, c);
  codec_params p;
  p.block = b;
  p.chop = k;
  p.coeff = ct;
  p.offset = default_offset(dt);
  const auto in = random_values<T>(n * h * w * c, seed, lo, hi);
  const auto view = make_view(g, dt, static_cast<const void*>(in.data()), n);
  const std::string what = "dtype " + std::to_string(static_cast<int>(dt)) + " B=" +
                           std::to_string(b) + " K=" + std::to_string(k) + " coeff " +
                           std::to_string(static_cast<int>(ct)) + " " + std::to_string(h) + "x" +
                           std::to_string(w) + "x" + std::to_string(c);
  auto cpu = make_backend(backend_kind::cpu, {1});
  std::vector<std::byte> want(n * coeff_bytes_per_sample(p, g));
  cpu->encode(p, view, want);
  std::vector<T> dec_cpu(in.size());
  cpu->decode(p, want, make_view(g, dt, static_cast<void*>(dec_cpu.data()), n));
  // Both kernel layouts, with the block size at run time and at compile time (what the GPU
  // kernels instantiate, through the same with_block). These small grids fit, so the line
  // kernels do run.
  const auto bg = detail::batch_of(p, g, n);
  ASSERT_TRUE(detail::fits(detail::column_grid(bg)) && detail::fits(detail::row_grid(bg, k))) << what;
  for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
    for (bool compile_time : {false, true}) {
      const std::string how = what + (kl == cuda::kernel_layout::lines ? " lines" : " blocks") +
                              (compile_time ? ", compile-time B" : "");
      std::vector<std::byte> got;
      std::vector<T> dec(in.size(), T{});
      long long bad = 0;
      if (compile_time) {
        detail::with_block(b, [&](auto bt) {
          constexpr int BT = decltype(bt)::value;
          bad = encode_on_host<T, Real, BT>(kl, p, g, in.data(), got);
          decode_on_host<T, Real, BT>(kl, p, g, want.data(), dec.data());
        });
      } else {
        bad = encode_on_host<T, Real>(kl, p, g, in.data(), got);
        decode_on_host<T, Real>(kl, p, g, want.data(), dec.data());
      }
      ASSERT_EQ(bad, -1) << how;
      EXPECT_TRUE(got == want) << how << ": encode";
      EXPECT_EQ(std::memcmp(dec_cpu.data(), dec.data(), in.size() * sizeof(T)), 0) << how << ": decode";
      if (compile_time) {
        // The same coefficients at an address that is no multiple of 16 (a caller's device
        // pointer into a batch): at B = 8 the line decode then takes the chop at run time
        // (with_decode_chop), with the same result.
        std::vector<std::byte> shifted(want.size() + 16);
        std::byte* mis = shifted.data() + size_of(ct);
        ASSERT_NE(reinterpret_cast<std::uintptr_t>(mis) % 16, 0u);
        std::memcpy(mis, want.data(), want.size());
        std::fill(dec.begin(), dec.end(), T{});
        detail::with_block(b, [&](auto bt) {
          decode_on_host<T, Real, decltype(bt)::value>(kl, p, g, mis, dec.data());
        });
        EXPECT_EQ(std::memcmp(dec_cpu.data(), dec.data(), in.size() * sizeof(T)), 0)
            << how << ": decode from a coefficient address that is no multiple of 16";
      }
    }
  }
}

TEST(BlockFunctions, EncodeAndDecodeEqualTheCpuBackendBytesForEverySetting) {
  unsigned seed = 1;
  for (int b : {4, 8, 16, 32}) {
    for (int k : {1, b / 2, b}) {
      for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
        // u8 NHWC (3 channels), 2 samples of a size that is no multiple of the block, and of
        // 10 block rows: several groups of the rows a decode thread takes, the last partial.
        expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhwc, 2, 9 * b + 3, b + 5, 3,
                                                b, k, ct, 0, 256, seed++);
        // i8 planar, its full range (offset 0: coefficients within B * 128, as u8's)
        expect_same_as_cpu<std::int8_t, float>(dtype::i8, layout::nchw, 1, b + 5, b + 9, 2, b, k,
                                               ct, -128, 128, seed++);
        // f32 planar, and f64 (computed in double) planar, in every type: at B = 32 their
        // coefficients stay within 32 * 1000, which f16 and i16 hold too.
        expect_same_as_cpu<float, float>(dtype::f32, layout::nhw, 2, 4 * b + 1, 2 * b - 1, 1, b, k,
                                         ct, -100, 100, seed++);
        expect_same_as_cpu<double, double>(dtype::f64, layout::nhw, 1, b + 2, b + 3, 1, b, k, ct,
                                           -1e3, 1e3, seed++);
        if (ct == coeff_type::f32 || ct == coeff_type::bf16) {
          // f16 (as half_value, computed in float), interleaved: values near f16's limit
          // decode clamped to it, not to inf.
          expect_same_as_cpu<detail::half_value, float>(dtype::f16, layout::nhwc, 2, b + 3,
                                                        b + 2, 2, b, k, ct, -65504, 65504,
                                                        seed++);
          // i32 and u32 (computed in double) over their whole range, planar and interleaved.
          expect_same_as_cpu<std::int32_t, double>(dtype::i32, layout::nhw, 2, b + 3, b + 1, 1,
                                                   b, k, ct, -2147483648.0, 2147483648.0, seed++);
          expect_same_as_cpu<std::uint32_t, double>(dtype::u32, layout::nhwc, 1, b + 1, b + 6, 2,
                                                    b, k, ct, 0, 4294967296.0, seed++);
        }
        // u16 NCHW (2 channels) and i16, with values small enough for every type (at B = 32
        // coefficients within 32 * 400, f16 included).
        expect_same_as_cpu<std::uint16_t, float>(dtype::u16, layout::nchw, 1, 5 * b + 7, b + 1, 2, b,
                                                 k, ct, 32768 - 400, 32768 + 400, seed++);
        expect_same_as_cpu<std::int16_t, float>(dtype::i16, layout::nhw, 2, b, b + 9, 1, b, k, ct,
                                                -300, 300, seed++);
      }
    }
  }
}

TEST(BlockFunctions, OddChopsPastEightAndTallLastStripsEqualTheCpuBackendBytes) {
  // Chops past 8 take the CPU's vertical sums in passes (vertical_inverse's fallback) and the
  // GPU's kernels of a run-time chop (compact at B = 32); an odd chop ends on an even term,
  // which the chops of the test above (b/2 and b) never do. Heights of 2b - 3: a last strip
  // and block row of b - 3 rows, more than b/2, so that rows past its middle are stored from
  // the paired sums of rows before it.
  unsigned seed = 900;
  for (int b : {16, 32}) {
    for (int k : {b / 2 + 1, b - 1}) {
      for (coeff_type ct : {coeff_type::f16, coeff_type::f32}) {
        expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhwc, 1, 2 * b - 3, b + 5, 3,
                                                b, k, ct, 0, 256, seed++);
        expect_same_as_cpu<float, float>(dtype::f32, layout::nhw, 1, 2 * b - 3, 2 * b - 1, 1, b,
                                         k, ct, -100, 100, seed++);
      }
    }
  }
}

TEST(CudaGridOnHost, EveryEncodeGivesPlusZeroCoefficientsForAPlaneOfMinusZero) {
  // The encode's sums start from 0 on every path (forward_block, the CPU's stages, the line
  // kernel): 0 + -0 is +0, so a block of -0 gives +0 coefficients, bit for bit the same
  // everywhere. (Were one path to start from its first product, it would store -0.)
  const geometry g = test::shape_of(layout::nhw, 1, 16, 24, 1);
  const std::vector<float> in(16 * 24, -0.0f);
  for (int chop : {1, 4, 8}) {
    codec_params p;
    p.chop = chop;
    p.coeff = coeff_type::f32;
    p.offset = 0;
    std::vector<std::byte> want(coeff_bytes_per_sample(p, g)), got;
    make_backend(backend_kind::cpu, {1})
        ->encode(p, make_view(g, dtype::f32, static_cast<const void*>(in.data()), 1), want);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i], std::byte{0}) << "chop " << chop << ": the CPU stores +0";
    }
    for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
      EXPECT_EQ((encode_on_host<float, float, 8>(kl, p, g, in.data(), got)), -1);
      EXPECT_EQ(got, want) << "chop " << chop
                           << (kl == cuda::kernel_layout::lines ? ", lines" : ", blocks");
    }
  }
}

TEST(BlockFunctions, EveryChopAtBlockEightDecodesTheCpuBackendsBytesWithTheChopAtCompileTime) {
  // At B = 8 the line decode is compiled for each chop (with_decode_chop): every one of them,
  // in every coefficient type that has them (f16, bf16, f32; i16 and the dtypes computed in
  // double, f64 here, take the chop at run time, with the same result). Rows of a
  // multiple of 4 bytes (u8: 20 x 3 and 28; u16: 18) store whole words of elements; others
  // (63 bytes, and 9 u16) store elements one by one. f32 takes 4 elements (16 bytes): rows of
  // 28 values (the last block 4 wide), 12 x 3 interleaved and 20 store whole words, 30 not.
  unsigned seed = 500;
  for (int k = 1; k <= 8; ++k) {
    for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhwc, 2, 27, 21, 3, 8, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhwc, 2, 19, 20, 3, 8, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nchw, 1, 17, 28, 2, 8, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::uint16_t, float>(dtype::u16, layout::nhw, 2, 9, 18, 1, 8, k, ct,
                                               32768 - 400, 32768 + 400, seed++);
      // words across interleaved planes of 2 and 4, for 1- and 2-byte types
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhwc, 1, 11, 14, 2, 8, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::int8_t, float>(dtype::i8, layout::nhwc, 1, 9, 10, 4, 8, k, ct, -128,
                                             128, seed++);
      expect_same_as_cpu<std::int16_t, float>(dtype::i16, layout::nhwc, 1, 10, 6, 2, 8, k, ct,
                                              -300, 300, seed++);
      expect_same_as_cpu<float, float>(dtype::f32, layout::nhw, 1, 19, 30, 1, 8, k, ct, -100, 100,
                                       seed++);
      expect_same_as_cpu<float, float>(dtype::f32, layout::nhw, 2, 19, 28, 1, 8, k, ct, -100, 100,
                                       seed++);
      expect_same_as_cpu<float, float>(dtype::f32, layout::nhwc, 1, 17, 12, 3, 8, k, ct, -100,
                                       100, seed++);
      expect_same_as_cpu<float, float>(dtype::f32, layout::nchw, 1, 9, 20, 2, 8, k, ct, -100, 100,
                                       seed++);
      expect_same_as_cpu<std::uint16_t, float>(dtype::u16, layout::nchw, 1, 17, 9, 2, 8, k, ct,
                                               32768 - 400, 32768 + 400, seed++);
      expect_same_as_cpu<double, double>(dtype::f64, layout::nhw, 1, 10, 11, 1, 8, k, ct, -1e3,
                                         1e3, seed++);
    }
  }
}

TEST(BlockFunctions, AtBlockFourEveryChopStoresWordsOfElementsAsTheCpuBackendDoes) {
  // B = 4 takes 4 u8 (2 i16, 4 f32) a thread too: rows of 24 and 12 bytes and of 12 f32 store
  // whole words, 15 bytes and 9 f32 not.
  unsigned seed = 900;
  for (int k = 1; k <= 4; ++k) {
    for (coeff_type ct : {coeff_type::f16, coeff_type::i16}) {
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhwc, 2, 10, 8, 3, 4, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nchw, 1, 7, 12, 2, 4, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::uint8_t, float>(dtype::u8, layout::nhw, 1, 6, 15, 1, 4, k, ct, 0,
                                              256, seed++);
      expect_same_as_cpu<std::int16_t, float>(dtype::i16, layout::nhw, 1, 9, 6, 1, 4, k, ct, -300,
                                              300, seed++);
      expect_same_as_cpu<float, float>(dtype::f32, layout::nhw, 1, 7, 12, 1, 4, k, ct, -100, 100,
                                       seed++);
      expect_same_as_cpu<float, float>(dtype::f32, layout::nhw, 1, 6, 9, 1, 4, k, ct, -100, 100,
                                       seed++);
    }
  }
}

TEST(CudaGridOnHost, TheLineDecodeStoresOneByOneWhereTheOutputIsNotWordAligned) {
  // An output address that is no multiple of 4 (a caller's pointer into a batch): the same
  // bytes as the CPU backend, stored element by element.
  codec_params p;  // B = 8, K = 4, f16
  for (int k : {1, 4}) {
    p.chop = k;
    const geometry g = test::shape_of(layout::nhwc, 2, 19, 20, 3);
    const auto in = random_values<std::uint8_t>(g.samples * g.values_per_sample(), 31, 0, 256);
    auto cpu = make_backend(backend_kind::cpu, {1});
    std::vector<std::byte> c(g.samples * coeff_bytes_per_sample(p, g));
    cpu->encode(p, make_view(g, dtype::u8, static_cast<const void*>(in.data()), g.samples), c);
    std::vector<std::uint8_t> want(in.size());
    cpu->decode(p, c, make_view(g, dtype::u8, static_cast<void*>(want.data()), g.samples));
    std::vector<std::uint8_t> shifted(in.size() + 4, 0);
    std::uint8_t* out = shifted.data() + 1;
    ASSERT_NE(reinterpret_cast<std::uintptr_t>(out) % 4, 0u);
    decode_on_host<std::uint8_t, float, 8>(cuda::kernel_layout::lines, p, g, c.data(), out);
    EXPECT_EQ(std::memcmp(out, want.data(), want.size()), 0) << "K=" << k;
    EXPECT_EQ(shifted[0], 0) << "nothing before the output";
    EXPECT_EQ(shifted[want.size() + 1], 0) << "nothing after it";
  }
}

TEST(CudaGridOnHost, EveryDecodeGivesPlusZeroWhereEveryProductIsMinusZeroAndTheOffsetToo) {
  // Every decode sums a value from its first product, not from 0, and a sum of -0 products
  // is -0 (at chop 1, where T's first row is positive, every value's; at larger chops, where
  // signs mix, e - o of the vertical stage may be too); x + offset is then -0 where the
  // offset is -0 too, unless the offset is taken plus 0, as every decode does. Coefficients
  // of -0, an offset of -0, f32 out: +0 from the CPU, the line and the block kernels.
  for (const auto& [ct, chop] : {std::pair{coeff_type::f32, 1}, {coeff_type::f32, 2},
                                 {coeff_type::f32, 4}, {coeff_type::f32, 8},
                                 {coeff_type::f16, 1}, {coeff_type::f16, 4}}) {
    SCOPED_TRACE(::testing::Message() << "chop " << chop << " " << to_string(ct));
    codec_params p;
    p.chop = chop;
    p.coeff = ct;
    p.offset = -0.0;
    const geometry g = test::shape_of(layout::nhw, 1, 16, 16, 1);
    std::vector<std::byte> c(coeff_bytes_per_sample(p, g));
    if (ct == coeff_type::f32) {
      const float minus_zero = -0.0f;
      for (std::size_t i = 0; i < c.size(); i += 4) std::memcpy(&c[i], &minus_zero, 4);
    } else {
      const std::uint16_t minus_zero = 0x8000;
      for (std::size_t i = 0; i < c.size(); i += 2) std::memcpy(&c[i], &minus_zero, 2);
    }
    auto cpu = make_backend(backend_kind::cpu, {1});
    std::vector<float> want(256, 1.0f), got(256, 1.0f);
    cpu->decode(p, c, make_view(g, dtype::f32, static_cast<void*>(want.data()), 1));
    for (float v : want) ASSERT_EQ(detail::float_bits(v), 0u) << "the CPU backend gives +0";
    for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
      std::fill(got.begin(), got.end(), 1.0f);
      decode_on_host<float, float, 8>(kl, p, g, c.data(), got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << (kl == cuda::kernel_layout::lines ? "lines" : "blocks");
    }
  }
}

TEST(CudaGridOnHost, TheGemmDecodesStoreGivesPlusZeroForMinusZeroPlusAnOffsetOfMinusZero) {
  // As every other decode (the test above): a -0 product of the GEMMs plus an offset of -0
  // is stored as +0, in float and in double outputs.
  EXPECT_EQ(detail::float_bits(detail::store_value<float>(-0.0f, -0.0)), 0u);
  const double d = detail::store_value<double>(-0.0f, -0.0);
  EXPECT_FALSE(std::signbit(d));
  EXPECT_EQ(detail::float_bits(detail::store_value<float>(-1.5f, -0.0)),
            detail::float_bits(-1.5f)) << "other values as they are";
}

TEST(BlockFunctions, WideCoefficientLoadsReadWhatElementLoadsRead) {
  // load_run<N> (16-, 8- or 4-byte loads where N elements fill whole words) against get, for
  // every type and run length up to 8, on every bit pattern of a random array (NaN excepted:
  // bf16 and f16 NaNs compare unequal as floats, so they are compared as bits).
  std::mt19937 rng(77);
  alignas(16) std::uint32_t words[64];
  for (auto& w : words) w = static_cast<std::uint32_t>(rng());
  const auto* array = reinterpret_cast<const std::byte*>(words);
  const auto same = [](float a, float b) { return detail::float_bits(a) == detail::float_bits(b); };
  const auto check = [&](auto tag, auto n) {
    using C = decltype(tag);
    constexpr int N = decltype(n)::value;
    for (u64 run = 0; (run + 1) * N * C::size <= sizeof words; ++run) {
      float got[N];
      detail::load_run<N, C>(array, run * N, got);
      for (int v = 0; v < N; ++v) {
        const float want = C::template get<float>(array, run * N + v);
        EXPECT_TRUE(same(got[v], want) || (got[v] != got[v] && want != want))
            << "size " << C::size << " N=" << N << " run " << run << " element " << v;
      }
    }
  };
  const auto each_n = [&](auto tag) {
    check(tag, std::integral_constant<int, 1>{});
    check(tag, std::integral_constant<int, 2>{});
    check(tag, std::integral_constant<int, 3>{});
    check(tag, std::integral_constant<int, 4>{});
    check(tag, std::integral_constant<int, 5>{});
    check(tag, std::integral_constant<int, 6>{});
    check(tag, std::integral_constant<int, 7>{});
    check(tag, std::integral_constant<int, 8>{});
  };
  each_n(detail::f16_coeffs{});
  each_n(detail::bf16_coeffs{});
  each_n(detail::i16_coeffs{});
  each_n(detail::f32_coeffs{});
}

TEST(CudaGridOnHost, TheDecodeTakesTheChopAtCompileTimeAtBlockEightWhereItsLoadsAreAligned) {
  alignas(16) std::byte buf[32];
  const auto chop_of = [](int b, int k, const void* c, coeff_code code = coeff_code::f16,
                          bool in_double = false) {
    int got = -1;
    detail::with_block(b, [&](auto bt) {
      const auto take = [&](auto kt) { got = decltype(kt)::value; };
      if (in_double) {
        detail::with_decode_chop<decltype(bt)::value, double>(k, code, c, take);
      } else {
        detail::with_decode_chop<decltype(bt)::value, float>(k, code, c, take);
      }
    });
    return got;
  };
  for (int k = 1; k <= 8; ++k) {
    EXPECT_EQ(chop_of(8, k, buf), k);
    EXPECT_EQ(chop_of(8, k, buf + 16), k);
    EXPECT_EQ(chop_of(8, k, buf, coeff_code::bf16), k);
    EXPECT_EQ(chop_of(8, k, buf, coeff_code::f32), k);
    EXPECT_EQ(chop_of(8, k, buf + 2), 0) << "an address that is no multiple of 16";
    EXPECT_EQ(chop_of(8, k, buf + 8), 0);
    EXPECT_EQ(chop_of(8, k, buf, coeff_code::i16), 0) << "i16 coefficients";
    EXPECT_EQ(chop_of(8, k, buf, coeff_code::f16, true), 0) << "sums in double";
  }
  EXPECT_EQ(chop_of(4, 2, buf), 0);
  EXPECT_EQ(chop_of(16, 4, buf), 0);
  EXPECT_EQ(chop_of(32, 8, buf), 0);
}

TEST(BlockFunctions, ForwardBlockMatchesADirectDctAndInverseUndoesIt) {
  // C[u][v] = sum_x sum_y T[u][x] X[x][y] T[v][y], computed in double straight from the
  // formula; forward_block in float agrees to float precision; the inverse of a full chop
  // returns the block.
  for (int b : {4, 8, 16, 32}) {
    const auto td = dct_matrix(b);
    std::vector<float> t(td.begin(), td.end());
    auto x = random_values<float>(static_cast<u64>(b) * b, static_cast<unsigned>(b), -128, 128);
    std::vector<float> c(static_cast<u64>(b) * b), back(c.size());
    detail::forward_block(t.data(), b, b, x.data(), c.data());
    double worst = 0;
    for (int u = 0; u < b; ++u)
      for (int v = 0; v < b; ++v) {
        double want = 0;
        for (int i = 0; i < b; ++i)
          for (int j = 0; j < b; ++j) {
            const double cu = u == 0 ? std::sqrt(1.0 / b) : std::sqrt(2.0 / b);
            const double cv = v == 0 ? std::sqrt(1.0 / b) : std::sqrt(2.0 / b);
            want += cu * std::cos((2 * i + 1) * u * M_PI / (2.0 * b)) * x[i * b + j] * cv *
                    std::cos((2 * j + 1) * v * M_PI / (2.0 * b));
          }
        worst = std::max(worst, std::fabs(want - c[u * b + v]));
      }
    EXPECT_LT(worst, 2e-3 * b) << "B=" << b;
    detail::inverse_block(t.data(), b, b, c.data(), back.data());
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 2e-3 * b) << "B=" << b;
  }
}

TEST(BlockFunctions, RowZeroOfTheDctTableIsOneValueBitForBitInEveryColumn) {
  // decode_elements (lib/src/cuda_grid.hpp) takes T[0][x] as t[0], and the first term of a
  // value's sum, T[0][r] * y[0], as one product for every row r; the CPU's decode_strip
  // (lib/src/cpu_kernels.cpp) computes a strip's one row at chop 1: the same bits only
  // while row 0 of the table is one value exactly, not merely to rounding.
  for (int b = 1; b <= 32; ++b) {
    const auto tf = detail::make_table<float>(b);
    const auto td = detail::make_table<double>(b);
    EXPECT_EQ(tf.t[0], static_cast<float>(std::sqrt(1.0 / b))) << "B=" << b;
    for (int x = 1; x < b; ++x) {
      EXPECT_EQ(std::memcmp(&tf.t[x], &tf.t[0], sizeof(float)), 0) << "B=" << b << " x=" << x;
      EXPECT_EQ(std::memcmp(&td.t[x], &td.t[0], sizeof(double)), 0) << "B=" << b << " x=" << x;
    }
  }
}

TEST(BlockFunctions, StoreCoeffRefusesWhatTheTypeCannotHoldAndRoundsI16TiesToEven) {
  std::int16_t i16[1];
  EXPECT_TRUE(detail::store_coeff(2.5f, coeff_code::i16, i16, 0));
  EXPECT_EQ(i16[0], 2);
  EXPECT_TRUE(detail::store_coeff(-3.5f, coeff_code::i16, i16, 0));
  EXPECT_EQ(i16[0], -4);
  EXPECT_TRUE(detail::store_coeff(32767.4f, coeff_code::i16, i16, 0));
  EXPECT_EQ(i16[0], 32767);
  EXPECT_FALSE(detail::store_coeff(32767.5f, coeff_code::i16, i16, 0));  // rounds to 32768
  EXPECT_FALSE(detail::store_coeff(-32768.6f, coeff_code::i16, i16, 0));
  EXPECT_FALSE(detail::store_coeff(std::numeric_limits<float>::quiet_NaN(), coeff_code::i16, i16, 0));
  std::uint16_t h[1];
  EXPECT_TRUE(detail::store_coeff(65504.0f, coeff_code::f16, h, 0));
  EXPECT_FALSE(detail::store_coeff(65536.0f, coeff_code::f16, h, 0));
  EXPECT_FALSE(detail::store_coeff(std::numeric_limits<float>::infinity(), coeff_code::bf16, h, 0));
  float f[1];
  EXPECT_FALSE(detail::store_coeff(std::numeric_limits<double>::max(), coeff_code::f32, f, 0));
  EXPECT_TRUE(detail::store_coeff(1e30, coeff_code::f32, f, 0));
  EXPECT_EQ(detail::load_coeff<double>(f, coeff_code::f32, 0), static_cast<double>(1e30f));
}

// The messages' "largest" of a coefficient type is what store_coeff keeps: it stores as
// itself, and the next value the type has past it (one unit in its last place) is refused.
TEST(BlockFunctions, MaxFiniteOfACoefficientTypeIsTheLargestValueStoreCoeffKeeps) {
  const std::pair<coeff_type, coeff_code> types[] = {{coeff_type::f16, coeff_code::f16},
                                                     {coeff_type::bf16, coeff_code::bf16},
                                                     {coeff_type::f32, coeff_code::f32},
                                                     {coeff_type::i16, coeff_code::i16}};
  for (const auto& [type, code] : types) {
    SCOPED_TRACE(std::string(to_string(type)));
    const double largest = max_finite(type);
    // The unit in the last place at the top: f16 keeps 11 significant bits (2^15 * 2^-10),
    // bf16 8 (2^127 * 2^-7), f32 24 (2^127 * 2^-23).
    const double step = type == coeff_type::f16    ? 0x1p5
                        : type == coeff_type::bf16 ? 0x1p120
                        : type == coeff_type::f32  ? 0x1p104
                                                   : 1.0;
    alignas(8) unsigned char out[8];
    for (const double sign : {1.0, -1.0}) {
      EXPECT_TRUE(detail::store_coeff(sign * largest, code, out, 0));
      EXPECT_EQ(detail::load_coeff<double>(out, code, 0), sign * largest);
      if (type == coeff_type::i16 && sign < 0) continue;  // (i16 holds -32768)
      EXPECT_FALSE(detail::store_coeff(sign * (largest + step), code, out, 0));
    }
  }
}

}  // namespace

namespace {

TEST(MatrixForm, LtTimesCoefficientsTimesRDecodesLikeTheCpuBackend) {
  // f32 data decoded by the CPU backend (no rounding) against Lt * C * R in double, cropped,
  // plus the offset: the portable decode that the GPU's GEMM path and the accelerators run.
  using namespace dctchop;
  for (int b : {4, 8, 16}) {
    for (int k : {1, 3, b}) {
      codec_params p;
      p.block = b;
      p.chop = std::min(k, b);
      p.coeff = coeff_type::f32;
      p.offset = 2.5;
      const std::uint64_t h = 2 * b + 3, w = b + 5;
      geometry g{layout::hw, 1, 1, h, w};
      const auto in = random_values<float>(h * w, static_cast<unsigned>(b * 10 + k), -50, 50);
      auto cpu = make_backend(backend_kind::cpu, {1});
      std::vector<std::byte> c(coeff_bytes_per_sample(p, g));
      cpu->encode(p, make_view(g, dtype::f32, static_cast<const void*>(in.data()), 1), c);
      std::vector<float> want(h * w);
      cpu->decode(p, c, make_view(g, dtype::f32, static_cast<void*>(want.data()), 1));
      const auto m = make_decode_matrices(p, h, w);
      ASSERT_EQ(m.lt.size(), m.hp * m.kh);
      ASSERT_EQ(m.r.size(), m.kw * m.wp);
      std::vector<float> cf(m.kh * m.kw);
      std::memcpy(cf.data(), c.data(), cf.size() * sizeof(float));
      std::vector<double> t1(m.kh * m.wp, 0.0);  // C * R
      for (std::uint64_t i = 0; i < m.kh; ++i)
        for (std::uint64_t v = 0; v < m.kw; ++v)
          for (std::uint64_t y = 0; y < m.wp; ++y) t1[i * m.wp + y] += cf[i * m.kw + v] * m.r[v * m.wp + y];
      for (std::uint64_t r = 0; r < h; ++r)
        for (std::uint64_t col = 0; col < w; ++col) {
          double x = 0;
          for (std::uint64_t i = 0; i < m.kh; ++i) x += m.lt[r * m.kh + i] * t1[i * m.wp + col];
          EXPECT_NEAR(x + p.offset, want[r * w + col], 1e-3) << "B=" << b << " K=" << k;
        }
    }
  }
}

TEST(CudaGridOnHost, TheEncodeGridNamesTheFirstSampleWithACoefficientOutOfRange) {
  // The kernel records min(sample) over the threads whose block fails (atomicMin); the CPU
  // backend names the same sample.
  geometry g{layout::nhwc, 5, 2, 13, 11};
  codec_params p;
  p.coeff = coeff_type::f16;
  auto in = random_values<float>(g.samples * g.values_per_sample(), 3, -1, 1);
  std::vector<std::byte> out;
  for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
    EXPECT_EQ((encode_on_host<float, float, 8>(kl, p, g, in.data(), out)), -1);
  }
  const u64 per_sample = g.values_per_sample();
  in[3 * per_sample + 200] = 1e30f;  // sample 3, second plane, far past f16's range
  in[1 * per_sample + 7] = std::numeric_limits<float>::quiet_NaN();
  for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
    EXPECT_EQ((encode_on_host<float, float, 8>(kl, p, g, in.data(), out)), 1);
  }
  try {
    std::vector<std::byte> scratch(g.samples * coeff_bytes_per_sample(p, g));
    make_backend(backend_kind::cpu, {1})->encode(
        p, make_view(g, dtype::f32, static_cast<const void*>(in.data()), g.samples), scratch);
    ADD_FAILURE() << "the CPU backend accepted a NaN";
  } catch (const error& e) {
    EXPECT_EQ(e.sample(), 1) << e.what();
  }
}

TEST(CudaGridOnHost, LineGridsFollowTheLayoutAndThoseBeyondCudasLimitsAreNotLaunched) {
  codec_params p;  // B = 8, K = 4
  // 1024 RGB images of 256 x 256: a grid row per block row of a sample, its planes
  // interleaved along it (768 positions).
  const auto rgb = detail::batch_of(p, {layout::nhwc, 1024, 3, 256, 256}, 1024);
  EXPECT_EQ(detail::column_grid(rgb).rows, 1024u * 32u);
  EXPECT_EQ(detail::column_grid(rgb).width, 768u);
  // A decode thread takes S elements of a memory row (a 32-bit word of them: 4 u8, 2 u16;
  // 4 f32, 16 bytes; 1 f64 or i32) of R block rows: at most 64 bytes or one block row, and
  // the R x S x K sums within 128 bytes of registers (K = B where the chop is known at run
  // time only): at B = 8, two block rows of u8 at chop 4 or less, one at chop 8; 2 for u16,
  // 1 for f32 and f64, 2 for i32, 1 for i32 at B = 16 and at B = 32; 1 where B is known at
  // run time only.
  EXPECT_EQ((detail::elements_per_thread<8, 4, std::uint8_t>()), 4);
  EXPECT_EQ((detail::elements_per_thread<8, 0, std::uint8_t>()), 4);
  EXPECT_EQ((detail::elements_per_thread<4, 0, std::uint8_t>()), 4);
  EXPECT_EQ((detail::elements_per_thread<16, 0, std::uint8_t>()), 1);  // chops past 8
  EXPECT_EQ((detail::elements_per_thread<0, 0, std::uint8_t>()), 1);
  EXPECT_EQ((detail::elements_per_thread<8, 2, std::int16_t>()), 2);
  EXPECT_EQ((detail::elements_per_thread<8, 0, detail::half_value>()), 2);
  EXPECT_EQ((detail::elements_per_thread<8, 1, float>()), 4);
  EXPECT_EQ((detail::elements_per_thread<8, 0, float>()), 4);
  EXPECT_EQ((detail::elements_per_thread<16, 0, float>()), 1);  // chops past 8
  EXPECT_EQ((detail::elements_per_thread<8, 4, std::int32_t>()), 1);  // summed in double
  EXPECT_EQ((detail::elements_per_thread<8, 1, double>()), 1);
  // u8 RGB at B = 8 and chops 1 to 4 takes its own kernel (with_decode_planes): 4 columns of
  // the 3 planes a thread (12 bytes, one block row), each plane's coefficients loaded once.
  const auto planes_of = [](const detail::batch_geometry& g, auto kt, auto out) {
    int planes = -1;
    detail::with_decode_planes<8, decltype(kt)::value, decltype(out)>(
        g, [&](auto pt) { planes = decltype(pt)::value; });
    return planes;
  };
  EXPECT_EQ(planes_of(rgb, std::integral_constant<int, 4>{}, std::uint8_t{}), 3);
  EXPECT_EQ(planes_of(rgb, std::integral_constant<int, 1>{}, std::uint8_t{}), 3);
  EXPECT_EQ(planes_of(rgb, std::integral_constant<int, 5>{}, std::uint8_t{}), 0);
  EXPECT_EQ(planes_of(rgb, std::integral_constant<int, 0>{}, std::uint8_t{}), 0);
  EXPECT_EQ(planes_of(rgb, std::integral_constant<int, 4>{}, std::int8_t{}), 0);
  EXPECT_EQ(planes_of(detail::batch_of(p, {layout::nhwc, 2, 4, 16, 16}, 2),
                      std::integral_constant<int, 4>{}, std::uint8_t{}),
            0);
  EXPECT_EQ(planes_of(detail::batch_of(p, {layout::nchw, 2, 3, 16, 16}, 2),
                      std::integral_constant<int, 4>{}, std::uint8_t{}),
            0);
  EXPECT_EQ((detail::elements_per_thread<8, 4, std::uint8_t, 3>()), 12);
  EXPECT_EQ((detail::rows_per_thread<8, 4, std::uint8_t, float, 3>()), 1);
  EXPECT_EQ((detail::decode_line_grid<8, 4, std::uint8_t, float, 3>(rgb).width), 256u / 4u);
  EXPECT_EQ((detail::rows_per_thread<8, 4, std::uint8_t, float>()), 2);
  EXPECT_EQ((detail::rows_per_thread<8, 1, std::uint8_t, float>()), 2);
  EXPECT_EQ((detail::rows_per_thread<8, 8, std::uint8_t, float>()), 1);
  EXPECT_EQ((detail::rows_per_thread<8, 0, std::uint8_t, float>()), 1);
  EXPECT_EQ((detail::rows_per_thread<4, 0, std::uint8_t, float>()), 2);
  EXPECT_EQ((detail::rows_per_thread<8, 4, std::uint16_t, float>()), 2);
  EXPECT_EQ((detail::rows_per_thread<8, 0, float, float>()), 1);
  EXPECT_EQ((detail::rows_per_thread<8, 4, float, float>()), 1);
  EXPECT_EQ((detail::rows_per_thread<8, 0, double, double>()), 1);
  EXPECT_EQ((detail::rows_per_thread<8, 0, std::int32_t, double>()), 2);
  EXPECT_EQ((detail::rows_per_thread<16, 0, std::int32_t, double>()), 1);
  EXPECT_EQ((detail::rows_per_thread<32, 0, std::uint8_t, float>()), 1);
  EXPECT_EQ((detail::rows_per_thread<0, 0, std::uint8_t, float>()), 1);
  EXPECT_EQ((detail::decode_line_grid<8, 4, std::uint8_t, float>(rgb).rows), 1024u * 16u);
  EXPECT_EQ((detail::decode_line_grid<8, 4, std::uint8_t, float>(rgb).width), 768u / 4u);
  EXPECT_EQ(detail::column_grid(rgb, 4).rows, 1024u * 8u);
  EXPECT_EQ(detail::column_grid(rgb, 3).rows, 1024u * 11u);  // the last of a sample's partial
  EXPECT_EQ(detail::column_grid(rgb, 1, 3).width, 256u);
  EXPECT_EQ(detail::column_grid(rgb, 1, 5).width, 154u);  // the last position's partial
  EXPECT_EQ(detail::line_place_of(1024u * 32u - 1, 767, rgb).bi, 31u);
  EXPECT_EQ(detail::line_place_of(1024u * 32u - 1, 767, rgb).n, 1023u);
  EXPECT_EQ(detail::line_place_of(1024u * 32u - 1, 767, rgb).p, 2u);
  EXPECT_EQ(detail::line_place_of(1024u * 32u - 1, 767, rgb).x, 255u);
  EXPECT_EQ(detail::row_grid(rgb, 4).width, 32u * 3u * 4u);
  EXPECT_TRUE(detail::fits(detail::column_grid(rgb)));
  // Planar: a grid row per block row of each plane.
  const auto planar = detail::batch_of(p, {layout::nchw, 2, 3, 20, 30}, 2);
  EXPECT_EQ(detail::column_grid(planar).rows, 2u * 3u * 3u);
  EXPECT_EQ(detail::column_grid(planar).width, 30u);
  // 9 million values in a row need more than 65535 CTAs along y for a decode of one thread
  // per column (f32), not for the encode (K threads per 8 columns); 20 million, for both. The
  // launches take the block kernels for grids that do not fit.
  const auto wide = detail::batch_of(p, {layout::hw, 1, 1, 8, 9000000}, 1);
  EXPECT_FALSE(detail::fits(detail::column_grid(wide)));
  EXPECT_TRUE(detail::fits(detail::row_grid(wide, 4)));
  const auto wider = detail::batch_of(p, {layout::hw, 1, 1, 8, 20000000}, 1);
  EXPECT_FALSE(detail::fits(detail::row_grid(wider, 4)));
}

TEST(CudaGridOnHost, TheAutomaticLayoutEncodesWithBlocksAtBlockEightAndDecodesWithLines) {
  // What an H200 measured faster (README): the backend and the entry points' default.
  using cuda::kernel_layout;
  for (int b : {4, 8, 16, 32}) {
    EXPECT_EQ(detail::chosen_layout(kernel_layout::automatic, true, b),
              b == 8 ? kernel_layout::blocks : kernel_layout::lines) << b;
    EXPECT_EQ(detail::chosen_layout(kernel_layout::automatic, false, b), kernel_layout::lines) << b;
    for (auto asked : {kernel_layout::lines, kernel_layout::blocks}) {  // asked for: as asked
      EXPECT_EQ(detail::chosen_layout(asked, true, b), asked);
      EXPECT_EQ(detail::chosen_layout(asked, false, b), asked);
    }
  }
}

/** cublasSgemmStridedBatched with no transposes, alpha 1 and beta 0, on the host: element
 *  (i, j) of a column-major matrix with leading dimension ld is at i + j * ld. */
void column_major_gemm(const detail::strided_gemm& q) {
  for (int n = 0; n < q.batch; ++n) {
    const float* a = q.a + n * q.stride_a;
    const float* b = q.b + n * q.stride_b;
    float* c = q.c + n * q.stride_c;
    for (int j = 0; j < q.n; ++j)
      for (int i = 0; i < q.m; ++i) {
        float sum = 0;
        for (int l = 0; l < q.k; ++l) sum += a[i + l * q.lda] * b[l + j * q.ldb];
        c[i + j * q.ldc] = sum;
      }
  }
}

/** gemm_decoder::decode_async on the host: the coefficients to f32, then for each group of
 *  planes the two GEMMs of matrix_form_gemms and the store grid of store_thread. */
template <typename Out>
void decode_by_gemms(const codec_params& p, const geometry& g, const std::vector<std::byte>& coeffs,
                     Out* out, u64 group) {
  const auto m = decode_matrix_dims(p, g.height, g.width);
  const auto full = make_decode_matrices(p, g.height, g.width);  // the same dimensions
  EXPECT_TRUE(m.hp == full.hp && m.wp == full.wp && m.kh == full.kh && m.kw == full.kw);
  const auto bm = detail::make_block_matrices(p.block, p.chop);
  const auto bg = detail::batch_of(p, g, g.samples);
  const u64 planes = g.samples * g.planes, per_plane = m.kh * m.kw;
  std::vector<float> c32(planes * per_plane);
  for (u64 i = 0; i < c32.size(); ++i) {
    c32[i] = detail::load_coeff<float>(coeffs.data(), static_cast<coeff_code>(p.coeff), i);
  }
  std::vector<float> t1(group * m.kh * m.wp), x(group * m.hp * m.wp);
  for (u64 first = 0; first < planes; first += group) {
    const u64 n = std::min(group, planes - first);
    for (const auto& q : detail::matrix_form_gemms(m, p.block, p.chop, bm.tk.data(), bm.tkt.data(),
                                                   c32.data() + first * per_plane, t1.data(),
                                                   x.data(), static_cast<int>(n))) {
      column_major_gemm(q);
    }
    for_each_thread(detail::store_threads(n, bg), [&](u64 i) {
      detail::store_thread(i, x.data(), first, n, m.hp, m.wp, bg, p.offset, out);
    });
  }
}

TEST(CudaGridOnHost, TheGemmDecodesCublasArgumentsGiveTheCpuBackendsValues) {
  auto cpu = make_backend(backend_kind::cpu, {1});
  unsigned seed = 40;
  for (int b : {4, 8, 16}) {
    for (int k : {1, b / 2, b}) {
      for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
        // u8 NHWC of odd size, in groups of 2 planes (groups split samples) and all at once.
        geometry g{layout::nhwc, 3, 3, static_cast<u64>(3 * b + 3), static_cast<u64>(2 * b + 1)};
        codec_params p;
        p.block = b;
        p.chop = k;
        p.coeff = ct;
        p.offset = 128;
        const u64 vals = g.samples * g.values_per_sample();
        const auto in = random_values<std::uint8_t>(vals, seed++, 0, 256);
        std::vector<std::byte> c(g.samples * coeff_bytes_per_sample(p, g));
        cpu->encode(p, make_view(g, dtype::u8, static_cast<const void*>(in.data()), g.samples), c);
        std::vector<std::uint8_t> want(vals);
        cpu->decode(p, c, make_view(g, dtype::u8, static_cast<void*>(want.data()), g.samples));
        for (u64 group : {u64(2), g.samples * g.planes}) {
          std::vector<std::uint8_t> got(vals, 0);
          decode_by_gemms(p, g, c, got.data(), group);
          u64 differ = 0;
          for (u64 i = 0; i < vals; ++i) {
            // The two paths round the same real value: at most one apart, and rarely.
            const int d = std::abs(int(want[i]) - int(got[i]));
            ASSERT_LE(d, 1) << "B=" << b << " K=" << k << " coeff " << int(ct) << " at " << i;
            differ += d != 0;
          }
          EXPECT_LT(differ, vals / 100 + 1) << "B=" << b << " K=" << k << " coeff " << int(ct);
        }
      }
      // f32 planar (NCHW, 2 planes) with f32 coefficients: equal to float rounding.
      geometry gf{layout::nchw, 2, 2, static_cast<u64>(2 * b + 1), static_cast<u64>(b + 5)};
      codec_params pf;
      pf.block = b;
      pf.chop = k;
      pf.coeff = coeff_type::f32;
      pf.offset = 0.5;
      const u64 fv = gf.samples * gf.values_per_sample();
      const auto fin = random_values<float>(fv, seed++, -10, 10);
      std::vector<std::byte> fc(gf.samples * coeff_bytes_per_sample(pf, gf));
      cpu->encode(pf, make_view(gf, dtype::f32, static_cast<const void*>(fin.data()), gf.samples), fc);
      std::vector<float> fwant(fv), fgot(fv, -1e9f);
      cpu->decode(pf, fc, make_view(gf, dtype::f32, static_cast<void*>(fwant.data()), gf.samples));
      decode_by_gemms(pf, gf, fc, fgot.data(), 3);
      for (u64 i = 0; i < fv; ++i) ASSERT_NEAR(fwant[i], fgot[i], 1e-4) << "B=" << b << " K=" << k << " at " << i;
      // f64 far from zero (1e15 +- 10, the offset its double mean): the GEMMs run in f32 on
      // values near zero and the offset is added in double, so the result is as close as for
      // data near zero, to a few of the doubles' steps there (0.125; a float offset would be
      // 1e8 off).
      codec_params pd = pf;
      pd.offset = 1e15 + 0.375;
      std::vector<double> din(fin.begin(), fin.end());
      for (auto& v : din) v += 1e15;
      cpu->encode(pd, make_view(gf, dtype::f64, static_cast<const void*>(din.data()), gf.samples), fc);
      std::vector<double> dwant(fv), dgot(fv, -1.0);
      cpu->decode(pd, fc, make_view(gf, dtype::f64, static_cast<void*>(dwant.data()), gf.samples));
      decode_by_gemms(pd, gf, fc, dgot.data(), 3);
      for (u64 i = 0; i < fv; ++i) ASSERT_NEAR(dwant[i], dgot[i], 0.5) << "f64 B=" << b << " K=" << k << " at " << i;
      // i32 and u32 over their whole range, first rows at the type's largest value: the
      // store adds the offset and rounds and clamps in double (in float, u32's largest value
      // is 2^32, past the type). The GEMMs' float products err by about 2^-24 of the largest
      // magnitudes, so the two decodes agree to 2^-18 of the range.
      auto wide = [&](auto zero, dtype dt) {
        using T = decltype(zero);
        codec_params pw = pf;
        pw.offset = default_offset(dt);
        auto win = random_values<T>(fv, seed++, double(std::numeric_limits<T>::min()),
                                    double(std::numeric_limits<T>::max()) + 1.0);
        for (u64 i = 0; i < gf.samples * gf.planes; ++i)
          std::fill_n(win.begin() + i * gf.height * gf.width, b * gf.width, std::numeric_limits<T>::max());
        std::vector<std::byte> wc(gf.samples * coeff_bytes_per_sample(pw, gf));
        cpu->encode(pw, make_view(gf, dt, static_cast<const void*>(win.data()), gf.samples), wc);
        std::vector<T> wwant(fv), wgot(fv, T{});
        cpu->decode(pw, wc, make_view(gf, dt, static_cast<void*>(wwant.data()), gf.samples));
        decode_by_gemms(pw, gf, wc, wgot.data(), 3);
        const double tol = std::ldexp(1.0, 32 - 18);
        for (u64 i = 0; i < fv; ++i)
          ASSERT_NEAR(double(wwant[i]), double(wgot[i]), tol) << to_string(dt) << " B=" << b << " K=" << k << " at " << i;
      };
      wide(std::int32_t{}, dtype::i32);
      wide(std::uint32_t{}, dtype::u32);
    }
  }
}

TEST(CudaGridOnHost, GemmGroupsKeepTheSecondGemmsBatchUnder65536AndTheScratchUnder256MiB) {
  // 28x28 planes at B=8, K=4: 7 KiB of scratch a plane would allow 37449 planes, a batch of
  // 149796 block rows; the batch bounds the group to 65535 / 4 planes.
  codec_params p;
  p.block = 8;
  p.chop = 4;
  const auto m = decode_matrix_dims(p, 28, 28);
  const u64 floats = m.kh * m.kw + m.kh * m.wp + m.hp * m.wp, rows = m.hp / 8;
  EXPECT_EQ(detail::gemm_group_planes(1000000, floats, rows), 65535u / 4);
  EXPECT_EQ(detail::gemm_group_planes(100, floats, rows), 100u);  // all the planes there are
  // Large planes: the scratch bounds it (4096x4096: 112 MiB a plane, two fit).
  const auto big = decode_matrix_dims(p, 4096, 4096);
  const u64 big_floats = big.kh * big.kw + big.kh * big.wp + big.hp * big.wp;
  const u64 g = detail::gemm_group_planes(1000, big_floats, big.hp / 8);
  EXPECT_EQ(g, (u64(256) << 20) / (big_floats * sizeof(float)));
  EXPECT_LE(g * (big.hp / 8), 65535u);
  // A plane above either bound is still a group of one.
  EXPECT_EQ(detail::gemm_group_planes(5, u64(1) << 30, 1), 1u);
  EXPECT_EQ(detail::gemm_group_planes(5, 16, 70000), 1u);
}

TEST(CudaGridOnHost, HostCallsSplitACommandLineChunkIntoFourPartsAndCapAPartAt32MiB) {
  // The CLI's default chunk of u8 256x256x3 at chop 4 (f16): 42 samples, 8 MiB of input.
  const u64 image = 256 * 256 * 3;
  const u64 part = detail::samples_per_part(42, image);
  EXPECT_EQ((42 + part - 1) / part, 5u) << part;  // 4 of 10 and the last 2
  for (u64 n : {6u, 9u, 13u}) {  // at least four, of 1 MiB or more (2 MiB samples)
    const u64 q = detail::samples_per_part(n, u64(2) << 20);
    EXPECT_GE((n + q - 1) / q, 4u) << n << " samples, parts of " << q;
  }
  // A large call: parts of 32 MiB at most, the most that fit.
  EXPECT_EQ(detail::samples_per_part(1024, image), (u64(32) << 20) / image);
  // Small calls are not cut below 1 MiB a part; one sample is one part.
  EXPECT_EQ(detail::samples_per_part(100, 1000), 1049u);
  EXPECT_EQ(detail::samples_per_part(1, u64(1) << 30), 1u);
}

}  // namespace

namespace {

template <typename T, typename Real>
void expect_extreme_coefficients_decode_as_cpu(dtype dt, layout lay, u64 h, u64 w, u64 c, int b,
                                               int k, coeff_type ct, unsigned seed) {
  const geometry g = test::shape_of(lay, 2, h, w, c);
  codec_params p;
  p.block = b;
  p.chop = k;
  p.coeff = ct;
  p.offset = default_offset(dt);
  const auto coeffs =
      test::extreme_coefficients(g.samples * coeff_bytes_per_sample(p, g), ct, seed);
  const u64 vals = g.samples * g.values_per_sample();
  std::vector<T> want(vals), got(vals);
  make_backend(backend_kind::cpu, {1})
      ->decode(p, coeffs, make_view(g, dt, static_cast<void*>(want.data()), g.samples));
  // Aligned (the decode with the chop at compile time, at B = 8) and not (at run time).
  std::vector<std::byte> shifted(coeffs.size() + 16);
  std::byte* mis = shifted.data() + size_of(ct);
  std::memcpy(mis, coeffs.data(), coeffs.size());
  for (auto kl : {cuda::kernel_layout::lines, cuda::kernel_layout::blocks}) {
    for (const std::byte* from : {static_cast<const std::byte*>(coeffs.data()),
                                  static_cast<const std::byte*>(mis)}) {
      std::fill(got.begin(), got.end(), T{});
      detail::with_block(b, [&](auto bt) {
        decode_on_host<T, Real, decltype(bt)::value>(kl, p, g, from, got.data());
      });
      const u64 at = test::first_difference(want, got);
      EXPECT_EQ(at, vals) << "dtype " << static_cast<int>(dt) << " B=" << b << " K=" << k
                          << " coeff " << static_cast<int>(ct)
                          << (kl == cuda::kernel_layout::lines ? " lines" : " blocks")
                          << (from == mis ? ", coefficients not 16-byte aligned" : "")
                          << ": first difference at value " << at;
    }
  }
}

TEST(CudaGridOnHost, NanInfiniteAndHugeCoefficientsDecodeAsTheCpuBackendDoesInEveryDtype) {
  unsigned seed = 4000;
  for (int b : {8, 16}) {
    for (int k : {1, b / 2, b}) {
      for (coeff_type ct : {coeff_type::f16, coeff_type::bf16, coeff_type::f32, coeff_type::i16}) {
        const u64 ub = static_cast<u64>(b);
        // u8 interleaved RGB (its own kernel), and planar rows of whole words (32 values)
        expect_extreme_coefficients_decode_as_cpu<std::uint8_t, float>(
            dtype::u8, layout::nhwc, ub + 3, 2 * ub + 5, 3, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<std::uint8_t, float>(
            dtype::u8, layout::nhw, ub + 1, 32, 1, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<std::int8_t, float>(
            dtype::i8, layout::nchw, ub + 2, 24, 2, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<std::uint16_t, float>(
            dtype::u16, layout::nhw, ub + 5, 18, 1, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<std::int16_t, float>(
            dtype::i16, layout::nhwc, ub, ub + 2, 2, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<detail::half_value, float>(
            dtype::f16, layout::nhw, ub + 3, 18, 1, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<float, float>(
            dtype::f32, layout::nhw, ub + 1, ub + 4, 1, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<double, double>(
            dtype::f64, layout::nhw, ub + 2, ub + 1, 1, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<std::int32_t, double>(
            dtype::i32, layout::nhw, ub + 1, ub + 3, 1, b, k, ct, seed++);
        expect_extreme_coefficients_decode_as_cpu<std::uint32_t, double>(
            dtype::u32, layout::nhwc, ub + 2, ub + 1, 2, b, k, ct, seed++);
      }
    }
  }
}

TEST(CudaEntryPoints, NullOrMisalignedDevicePointersAreRefusedBeforeAnythingIsQueued) {
  if (!cuda::built()) GTEST_SKIP() << "the CUDA backend is not built";
  // Addresses that are never dereferenced: each call must throw before it queues anything,
  // with a device or without one (so this runs on the GPU machine too, faulting nothing).
  auto at = [](std::uintptr_t a) { return reinterpret_cast<void*>(a); };
  void* const even = at(0x10000);
  auto* const flag = static_cast<unsigned long long*>(even);  // aligned: 8 | 0x10000
  const geometry g{layout::nhw, 1, 1, 8, 8};
  codec_params half, single;
  single.coeff = coeff_type::f32;
  auto expect_refused = [](auto&& f, const std::string& what, const std::string& says) {
    SCOPED_TRACE(what);
    test::expect_error(f, errc::invalid_argument, {says});
  };
  expect_refused([&] { cuda::decode_device_async(half, g, dtype::u16, 1, even, at(0x10001), nullptr); },
                 "u16 output at an odd address", "output pointer is not aligned to its u16");
  expect_refused([&] { cuda::decode_device(single, g, dtype::u8, 1, at(0x10002), even); },
                 "f32 coefficients at 2 mod 4", "coefficient pointer is not aligned to its f32");
  expect_refused([&] { cuda::decode_device(half, g, dtype::u8, 1, nullptr, even); },
                 "null coefficients", "coefficient pointer is null");
  expect_refused([&] { cuda::decode_device(half, g, dtype::u8, 1, even, nullptr); },
                 "null output", "output pointer is null");
  expect_refused([&] { cuda::encode_device_async(single, g, dtype::f32, 1, at(0x10002), even, flag, nullptr); },
                 "f32 input at 2 mod 4", "input pointer is not aligned to its f32");
  expect_refused([&] { cuda::encode_device(half, g, dtype::f32, 1, even, at(0x10001)); },
                 "f16 coefficients at an odd address", "coefficient pointer is not aligned to its f16");
  expect_refused([&] { cuda::encode_device_async(half, g, dtype::u8, 0, even, even,
                                                 static_cast<unsigned long long*>(at(0x10004)), nullptr); },
                 "a first-bad-sample word at 4 mod 8 (no samples)",
                 "first-bad-sample word pointer is not aligned");
  expect_refused([&] { cuda::encode_device_async(half, g, dtype::u8, 1, even, even, nullptr, nullptr); },
                 "a null first-bad-sample word", "first-bad-sample word pointer is null");
  if (cuda::available()) {
    cuda::gemm_decoder gemm;
    expect_refused([&] { gemm.decode_async(half, g, dtype::f32, 1, even, at(0x10002), nullptr); },
                   "the GEMM decode's f32 output at 2 mod 4", "output pointer is not aligned to its f32");
  }
}

TEST(CudaWithoutDevice, EveryEntryPointIsAClearErrorNotASilentFallback) {
  using namespace dctchop;
  if (cuda::available()) GTEST_SKIP() << "a CUDA device is present: the gpu-labelled tests cover it";
  auto expect_unavailable = [](auto&& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << " did not throw";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::backend_unavailable) << what << ": " << e.what();
    }
  };
  codec_params p;
  geometry g{layout::nhw, 1, 1, 8, 8};
  std::vector<std::byte> host(64);
  expect_unavailable([] { make_backend(backend_kind::cuda); }, "make_backend(cuda)");
  expect_unavailable([] { cuda::gemm_decoder d; }, "gemm_decoder");
  expect_unavailable([&] { cuda::decode_device(p, g, dtype::u8, 1, host.data(), host.data()); },
                     "decode_device");
  expect_unavailable([&] { cuda::encode_device(p, g, dtype::u8, 1, host.data(), host.data()); },
                     "encode_device");
  EXPECT_EQ(make_backend(backend_kind::automatic)->name(), "cpu");
}

TEST(CudaWithoutDevice, AutoTakesTheCpuWithoutANoteWhereNoDeviceIsPresent) {
  using namespace dctchop;
  if (cuda::available())
    GTEST_SKIP() << "a CUDA device is present: the gpu-labelled tests cover it";
  // The note is for a GPU that is there but cannot be used; no GPU at all is no news.
  std::vector<std::string> notes;
  const auto note = [&](const std::string& why) { notes.push_back(why); };
  EXPECT_EQ(make_backend(backend_kind::automatic, {1}, note)->name(), "cpu");
  EXPECT_TRUE(notes.empty()) << notes.front();
}

TEST(CudaArch, AGpuTheKernelsWereNotBuiltForIsNamedWithTheSettingThatBuildsForIt) {
  using dctchop::detail::unrunnable_device_text;
  // A T4 (sm_75) under the default build (sm_80, sm_90): its architecture is added to the
  // list, written as CMake takes it.
  const std::string t4 =
      unrunnable_device_text(0, "Tesla T4", 7, 5, "80,90", "cudaErrorNoKernelImageForDevice");
  EXPECT_NE(t4.find("CUDA device 0 (Tesla T4, compute capability 7.5)"), std::string::npos) << t4;
  EXPECT_NE(t4.find("built for the CUDA architectures 80,90 (cudaErrorNoKernelImageForDevice)"),
            std::string::npos)
      << t4;
  EXPECT_NE(t4.find("-DCMAKE_CUDA_ARCHITECTURES=\"80;90;75\""), std::string::npos) << t4;
  // Suffixed items are kept; a word such as "native" is replaced by the number.
  const std::string real = unrunnable_device_text(1, "", 8, 6, "90-real;100-virtual", "e");
  EXPECT_NE(real.find("CUDA device 1 (compute capability 8.6)"), std::string::npos) << real;
  EXPECT_NE(real.find("=\"90-real;100-virtual;86\""), std::string::npos) << real;
  const std::string native = unrunnable_device_text(0, "GPU", 12, 0, "native", "e");
  EXPECT_NE(native.find("-DCMAKE_CUDA_ARCHITECTURES=120"), std::string::npos) << native;
  EXPECT_EQ(native.find('"'), std::string::npos) << native;
  // Built for it already (its PTX, which the driver could not compile): the driver, not the
  // build, is what to change.
  const std::string built = unrunnable_device_text(0, "GPU", 9, 0, "80,90-virtual", "e");
  EXPECT_NE(built.find("update the NVIDIA driver"), std::string::npos) << built;
  EXPECT_EQ(built.find("-DCMAKE_CUDA_ARCHITECTURES"), std::string::npos) << built;
  // PTX newer than the driver: the driver first, and a build for the GPU where it lacks one.
  const std::string ptx =
      unrunnable_device_text(0, "GPU", 10, 0, "80,90", "cudaErrorUnsupportedPtxVersion");
  EXPECT_NE(ptx.find("update the driver, or build dctchop for this GPU with "
                     "-DCMAKE_CUDA_ARCHITECTURES=\"80;90;100\""),
            std::string::npos)
      << ptx;
  // The device not known: no capability, and a build for the machine's own GPU.
  const std::string unknown = unrunnable_device_text(2, "", 0, 0, "80,90", "e");
  EXPECT_NE(unknown.find("CUDA device 2 cannot run"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("-DCMAKE_CUDA_ARCHITECTURES=native"), std::string::npos) << unknown;
}

}  // namespace
