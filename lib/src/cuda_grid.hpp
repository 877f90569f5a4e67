/** @file cuda_grid.hpp
 *  What one thread of each CUDA kernel does, as host-and-device functions, and the arguments
 *  of the GEMM decode's two cuBLAS calls. The kernels in cuda_backend.cu compute their
 *  thread's index and call these; the CPU tests (tests/test_block.cpp) run every index of the
 *  same grids on the host, and the same GEMM arguments through a column-major reference GEMM.
 *  So the index arithmetic (sample, plane, block, strides, the bounds check) and the row-major
 *  to column-major mapping are covered on machines without a GPU. Internal header.
 */
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/cuda.hpp"
#include "dctchop/detail/block.hpp"
#include "dctchop/error.hpp"
#include "dctchop/matrix_form.hpp"

#if defined(__CUDACC__)
#define DCTCHOP_UNROLL _Pragma("unroll")
#define DCTCHOP_ROLLED _Pragma("unroll 1")
#else
#define DCTCHOP_UNROLL
#define DCTCHOP_ROLLED
#endif

namespace dctchop::detail {

/** The DCT matrix, passed to a kernel by value: it lands in the constant bank, read by every
 *  thread. */
template <typename Real>
struct dct_table {
  Real t[32 * 32];
};

/** The table of `b`: T[u][x] at t[u * b + x]. Row 0 is one value, c(0) cos 0 = sqrt(1/B) in
 *  every column, bit for bit (dct_matrix multiplies by cos 0.0 = 1): decode_elements takes
 *  T[0][x] as t[0] (tests/test_block.cpp checks it). */
template <typename Real>
dct_table<Real> make_table(int b) {
  dct_table<Real> tab{};
  const auto t = dct_matrix(b);  // double, as the CPU kernels start from
  for (std::size_t i = 0; i < t.size(); ++i) tab.t[i] = static_cast<Real>(t[i]);
  return tab;
}

/** A dense batch: samples of `planes` planes of h x w, bh x bw blocks each, strides in
 *  elements; each plane's coefficients take plane_coeff_bytes. */
struct batch_geometry {
  std::uint64_t samples, planes, h, w, bh, bw;
  std::int64_t stride_sample, stride_plane, stride_row, stride_col;
  std::uint64_t plane_coeff_bytes;
};

inline batch_geometry batch_of(const codec_params& p, const geometry& g, std::uint64_t samples) {
  const auto v = make_view(g, dtype::u8, static_cast<const void*>(nullptr), samples);
  const auto cs = coeff_shape(p, g.height, g.width);
  const auto b = static_cast<std::uint64_t>(p.block);
  return {samples,
          g.planes,
          g.height,
          g.width,
          (g.height + b - 1) / b,
          (g.width + b - 1) / b,
          v.stride_sample,
          v.stride_plane,
          v.stride_row,
          v.stride_col,
          cs.rows * cs.cols * size_of(p.coeff)};
}

/** Threads per CTA of every kernel, and the CTAs that cover `threads` threads. */
constexpr unsigned threads_per_cta = 128;
inline unsigned ctas_for(std::uint64_t threads) {
  const std::uint64_t ctas = (threads + threads_per_cta - 1) / threads_per_cta;
  if (ctas > 0x7fffffffu) {  // CUDA's limit along x; a cut-short grid would skip work
    throw error(errc::invalid_argument,
                "a launch of " + std::to_string(threads) +
                    " threads is too large for one grid: pass fewer samples");
  }
  return static_cast<unsigned>(ctas);
}

/** Threads of the encode and decode grids: one per block of every plane. */
DCTCHOP_HD std::uint64_t block_threads(const batch_geometry& g) {
  return g.samples * g.planes * g.bh * g.bw;
}

/** What an encode thread returns when every coefficient fit its type; otherwise it returns
 *  the sample (within the batch), which the kernel's atomicMin keeps the first of. */
constexpr std::uint64_t all_fit = ~std::uint64_t(0);

/** Where block thread `i` works: block (bi, bj) of plane c of sample n, the `plane`-th plane
 *  of the batch. The block index runs fastest along a block row. */
struct block_place {
  std::uint64_t plane, n, c, bi, bj;
};

DCTCHOP_HD block_place block_place_of(std::uint64_t i, const batch_geometry& g) {
  const std::uint64_t per_plane = g.bh * g.bw;
  const std::uint64_t plane = i / per_plane, blk = i % per_plane;
  return {plane, plane / g.planes, plane % g.planes, blk / g.bw, blk % g.bw};
}

/** Encode thread `i` of the block grid: one block. An index past the last block does
 *  nothing. Returns all_fit, or the sample of a coefficient that does not fit `code`. */
template <int BT, int SC = 0, typename In, typename Real>
DCTCHOP_HD std::uint64_t encode_thread(std::uint64_t i, const Real* t, int b, int k, const In* in,
                                       const batch_geometry& g, Real offset, coeff_code code,
                                       std::byte* coeffs) {
  if (i >= block_threads(g)) return all_fit;
  const block_place at = block_place_of(i, g);
  const In* src = in + static_cast<std::int64_t>(at.n) * g.stride_sample +
                  static_cast<std::int64_t>(at.c) * g.stride_plane;
  const plane_geometry pg{g.h, g.w, g.stride_row, g.stride_col};
  return encode_block<In, Real, BT, SC>(t, b, k, src, pg, at.bi, at.bj, offset, code,
                                    coeffs + at.plane * g.plane_coeff_bytes)
             ? all_fit
             : at.n;
}

/** Calls fn with the column stride that the encode block kernel at block size BT for input
 *  In is compiled for (std::integral_constant<int, SC>): 3 for u8 RGB images (NHWC, 3
 *  planes) and 1 for planar u8 and f32, at B = 8 (encode_block reads a block inside the plane
 *  at constant offsets); otherwise 0, any stride. Only these, for compile time. */
template <int BT, typename In, typename Fn>
void with_encode_stride(const batch_geometry& g, Fn&& fn) {
  if constexpr (BT == 8 && std::is_same_v<In, std::uint8_t>) {
    if (g.stride_col == 3) return fn(std::integral_constant<int, 3>{});
  }
  if constexpr (BT == 8 && (std::is_same_v<In, std::uint8_t> || std::is_same_v<In, float>)) {
    if (g.stride_col == 1) return fn(std::integral_constant<int, 1>{});
  }
  fn(std::integral_constant<int, 0>{});
}

/** Decode thread `i`, the inverse of encode_thread. */
template <int BT, typename Out, typename Real>
DCTCHOP_HD void decode_thread(std::uint64_t i, const Real* t, int b, int k, const std::byte* coeffs,
                              coeff_code code, Out* out, const batch_geometry& g, Real offset) {
  if (i >= block_threads(g)) return;
  const block_place at = block_place_of(i, g);
  Out* dst = out + static_cast<std::int64_t>(at.n) * g.stride_sample +
             static_cast<std::int64_t>(at.c) * g.stride_plane;
  const plane_geometry pg{g.h, g.w, g.stride_row, g.stride_col};
  decode_block<Out, Real, BT>(t, b, k, coeffs + at.plane * g.plane_coeff_bytes, code, dst, pg,
                              at.bi, at.bj, offset);
}

// ---- the line kernels: a thread per S neighbouring columns of R block rows (decode;
// elements_per_thread, rows_per_thread) or per kept row of a block (encode). Neighbouring
// threads touch neighbouring values, so a warp's stores (decode) and loads (encode) are
// contiguous, and each thread holds lines, not whole blocks. The sums are the per-block
// functions' own, term for term, so the results are identical.

/** Whether a batch's planes are interleaved (NHWC with more than one plane): its threads then
 *  take the planes of a column one after another, as memory holds them. */
DCTCHOP_HD bool interleaved(const batch_geometry& g) {
  return g.planes > 1 && g.stride_plane == 1;
}

/** Where a line thread works: sample n, plane p, block row bi, and x, the column (decode)
 *  or the block column (encode); u, the kept row (encode). */
struct line_place {
  std::uint64_t n, p, bi, x;
  int u;
};

/** The line kernels' two-dimensional grid. Each grid row (blockIdx.x) is one block row (R for
 *  decode) of one plane, or of all of a sample's planes where they are interleaved; its
 *  `width` positions (blockIdx.y and threadIdx.x) are the threads along it. Decomposing the
 *  grid row takes 64-bit divisions, but the same ones in every thread of a CTA, which the
 *  compiler leaves to the uniform datapath; a position needs 32-bit arithmetic only. */
struct line_grid {
  std::uint64_t rows;
  std::uint64_t width;
};

/** Whether the grid fits CUDA's limits (1 to 2^31 - 1 CTAs along x, 1 to 65535 along y); the
 *  launches take the block kernels when it does not. */
inline bool fits(const line_grid& lg) {
  return lg.rows > 0 && lg.rows <= 0x7fffffffu && lg.width > 0 &&
         (lg.width + threads_per_cta - 1) / threads_per_cta <= 65535u;
}

/** The layout that kernel_layout::automatic stands for (cuda.hpp says why); others as
 *  they are. */
inline cuda::kernel_layout chosen_layout(cuda::kernel_layout kl, bool encode, int block) {
  if (kl != cuda::kernel_layout::automatic) return kl;
  return encode && block == 8 ? cuda::kernel_layout::blocks : cuda::kernel_layout::lines;
}

/** Whether a launch runs the line kernels on grid `lg`: asked for, and within the limits. */
inline bool uses_lines(cuda::kernel_layout kl, const line_grid& lg) {
  return kl == cuda::kernel_layout::lines && fits(lg);
}

/** Elements of a memory row that a decode thread takes, side by side, at block size BT and
 *  chop KT (0: known at run time only): as many as fill a 32-bit word (u8 and i8: 4; u16,
 *  i16 and f16: 2), four f32 (16 bytes), 1 for the types summed in double (i32, u32, f64);
 *  it stores them in one instruction where they are aligned. The u8 decode stored a byte a
 *  value, a quarter of its instructions at chop 1 with the address steps. The f32 decode,
 *  a value a thread, spent more on finding its place and loading its block's coefficients
 *  than on the sums (static count, sm_90, planar: 608 instructions a thread for 16 values
 *  at chop 4; four columns of a block share the loads: 736 for 32). 1 where the chop may
 *  pass 8 (B = 16 and 32 with the chop at run time): S times the sums of up to 32 x 32 terms
 *  in registers, unrolled, spilled and took the compiler over a quarter of an hour. */
template <int BT, int KT, typename Out, int P = 0>
constexpr int elements_per_thread() {
  constexpr int kmax = KT > 0 ? KT : (BT > 0 ? BT : 32);
  if constexpr (P > 0) {
    return 4 * P;  // 4 columns of P interleaved u8 planes (with_decode_planes)
  } else if constexpr (kmax > 8) {
    return 1;
  } else if constexpr (std::is_same_v<Out, float>) {
    return 4;
  } else {
    return sizeof(Out) < 4 ? 4 / static_cast<int>(sizeof(Out)) : 1;
  }
}

/** Block rows that a decode thread takes, one under another, so that their loads are in
 *  flight at once: a thread of one block row had too few bytes to move for the time a load
 *  takes (an H200 decoded u8, 8 bytes a thread, at 13% of its bandwidth, and f32, 32 bytes,
 *  at 57%). At most 64 bytes of output a thread, or one block row (at B = 8: two block rows
 *  of 4 u8 or 2 u16 elements, one of 4 f32 or of an 8-byte value), and the R x S x K sums
 *  within 128 bytes of registers (32 floats; 16 doubles, which i32, u32 and f64 sum in; K is
 *  B where the chop is known at run time only). 1 where the block size is known at run time
 *  only. */
template <int BT, int KT, typename Out, typename Real, int P = 0>
constexpr int rows_per_thread() {
  if constexpr (BT <= 0) {
    return 1;
  } else {
    constexpr int s = elements_per_thread<BT, KT, Out, P>();
    constexpr int kmax = KT > 0 ? KT : BT;
    constexpr int by_size = 64 / (BT * s * static_cast<int>(sizeof(Out)));
    constexpr int by_registers = 128 / (kmax * s * static_cast<int>(sizeof(Real)));
    return std::max(1, std::min(by_size, by_registers));
  }
}

/** Whether the decode line kernel at block size BT and chop KT is the compact one: at B = 32
 *  with the chop at run time (and where the block size too is known at run time only, on the
 *  host), its loops over the chop's terms and the block's rows run rolled instead of unrolled
 *  to 32 and T is read from memory (shared memory, on a GPU) instead of registers. Unrolled,
 *  up to 32 x 32 terms in each of four coefficient types, the B = 32 kernels were 60% of the
 *  CUDA backend's compile time (171 of 285 s for compute_90) for the largest block, which is
 *  not the published method's. Its sums are the same, term for term. */
template <int BT, int KT>
constexpr bool compact_decode() {
  return (BT == 32 || BT <= 0) && KT == 0;
}

/** Grid rows of a plane (or of a sample's interleaved planes): one per `r` block rows. */
DCTCHOP_HD std::uint64_t row_groups(const batch_geometry& g, std::uint64_t r) {
  return (g.bh + r - 1) / r;
}

/** Elements of a memory row of the decode grid: a plane's columns, or a sample's columns
 *  times its planes where they are interleaved. */
DCTCHOP_HD std::uint64_t row_elements(const batch_geometry& g) {
  return interleaved(g) ? g.w * g.planes : g.w;
}

/** Decode: one position per `s` elements of a memory row (row_elements), of `r` block rows. */
DCTCHOP_HD line_grid column_grid(const batch_geometry& g, std::uint64_t r = 1,
                                 std::uint64_t s = 1) {
  const std::uint64_t width = (row_elements(g) + s - 1) / s;
  if (interleaved(g)) return {g.samples * row_groups(g, r), width};
  return {g.samples * g.planes * row_groups(g, r), width};
}

/** Encode: one position per kept row of each block along the block row. */
DCTCHOP_HD line_grid row_grid(const batch_geometry& g, int k) {
  const auto kk = static_cast<std::uint64_t>(k);
  if (interleaved(g)) return {g.samples * g.bh, g.bw * g.planes * kk};
  return {g.samples * g.planes * g.bh, g.bw * kk};
}

/** Grid row `row` (block row bi of a plane, or of a sample's interleaved planes), position
 *  `pos` (of a row grid divided by k): where planes are interleaved, pos = x * planes + p, so
 *  that a warp covers memory in order. */
DCTCHOP_HD line_place line_place_of(std::uint64_t row, std::uint32_t pos, const batch_geometry& g) {
  line_place at{};
  at.bi = row % g.bh;
  if (interleaved(g)) {  // row = n * bh + bi
    const auto planes = static_cast<std::uint32_t>(g.planes);
    at.n = row / g.bh;
    at.p = pos % planes;
    at.x = pos / planes;
  } else {  // row = (n * planes + p) * bh + bi
    const std::uint64_t plane = row / g.bh;
    at.p = plane % g.planes;
    at.n = plane / g.planes;
    at.x = pos;
  }
  return at;
}

#if !defined(__CUDA_ARCH__)
/** A host run of a device path met an address that the device's wide load or store of
 *  `bytes` would take misaligned (on a GPU, a fault that loses the context): the path's own
 *  defect, which the host tests are there to find. */
[[noreturn]] inline void throw_misaligned(const char* access, std::size_t bytes) {
  throw error(errc::internal, std::string("CUDA grid on the host: a ") + access + " of " +
                                  std::to_string(bytes) +
                                  " bytes at an address that is no multiple of them");
}
#endif

/** Coefficients `first` to first + N - 1 of a coefficient array of tag C (block.hpp), as
 *  Real (exact), the values get reads. Where their bytes split into 32-bit words (N * size a
 *  multiple of 4), in loads of 16, 8 or 4 bytes: at chop 4, one 8-byte load of f16 where four
 *  2-byte loads took four instructions. The caller guarantees the alignment that takes:
 *  `first` a multiple of N, and the array's address a multiple of 16 (decode_chop). */
template <int N, typename C, typename Real>
DCTCHOP_HD void load_run(const std::byte* array, std::uint64_t first, Real* dst) {
  constexpr int bytes = N * C::size;
  constexpr int chunk = bytes % 16 == 0 ? 16 : (bytes % 8 == 0 ? 8 : (bytes % 4 == 0 ? 4 : 0));
  if constexpr (chunk == 0) {
    DCTCHOP_UNROLL
    for (int v = 0; v < N; ++v) dst[v] = C::template get<Real>(array, first + v);
  } else {
    struct alignas(chunk) words {
      std::uint32_t w[chunk / 4];
    };
    const std::byte* src = array + first * C::size;
#if !defined(__CUDA_ARCH__)
    // (the alignment that the device's loads take, checked: there a misaligned one faults)
    if (reinterpret_cast<std::uintptr_t>(src) % chunk != 0) throw_misaligned("load", chunk);
#endif
    DCTCHOP_UNROLL
    for (int c = 0; c < bytes / chunk; ++c) {
#if defined(__CUDA_ARCH__)
      // one load of `chunk` bytes (the alignment is known from the type; memcpy's would not be)
      const words ws = reinterpret_cast<const words*>(src)[c];
#else
      words ws;  // the host reads the bytes as they are (no aliasing through another type)
      std::memcpy(&ws, src + c * chunk, sizeof ws);
#endif
      DCTCHOP_UNROLL
      for (int q = 0; q < chunk / 4; ++q) {
        C::template unpack<Real>(ws.w[q], dst + (c * chunk + q * 4) / C::size);
      }
    }
  }
}

/** convert_out4 as the device computes it (the Ops of scalar.hpp: device_conversions on a
 *  GPU, an emulation of the same instructions in the host tests). Each value is rounded to
 *  an int (cvt.rni, which saturates, and gives 0 for a NaN: hence the max with the low end
 *  first for i8) and two cvt.pack.sat instructions clamp pairs of them to bytes and pack
 *  them, the first value in the lowest byte; the two clamps a value and three byte inserts
 *  took 11 instructions more. The same bytes as convert_out: rounding and then clamping to a
 *  range of integers gives what clamping and then rounding gives. */
template <typename Ops, typename Out>
DCTCHOP_HD void convert_out4_on_device(const float* v, float offset, Out* dst) {
  static_assert(sizeof(Out) == 1, "four bytes");
  std::int32_t i[4];
  DCTCHOP_UNROLL
  for (int j = 0; j < 4; ++j) {
    const float x = v[j] + offset;
    i[j] = Ops::rni_s32(std::is_signed_v<Out> ? Ops::max(x, -128.0f) : x);
  }
  std::uint32_t d = 0;
  if constexpr (std::is_signed_v<Out>) {
    d = Ops::pack_sat_s8(i[1], i[0], Ops::pack_sat_s8(i[3], i[2], 0));
  } else {
    d = Ops::pack_sat_u8(i[1], i[0], Ops::pack_sat_u8(i[3], i[2], 0));
  }
  std::memcpy(dst, &d, 4);
}

/** convert_out of four u8 or i8 values (v + offset, rounded to nearest even, clamped to Out's
 *  range; a NaN gives the range's low end): on a GPU by convert_out4_on_device. */
template <typename Out, typename Real>
DCTCHOP_HD void convert_out4(const Real* v, Real offset, Out* dst) {
  static_assert(sizeof(Out) == 1 && std::is_same_v<Real, float>, "u8 and i8 sum in float");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 720
  convert_out4_on_device<device_conversions>(v, offset, dst);
#else
  for (int j = 0; j < 4; ++j) dst[j] = convert_out<Out>(v[j], offset);
#endif
}

/** Decode S neighbouring elements of a memory row (position pos of grid row `row` of
 *  column_grid(g, R, S)) in R block rows, from the grid row's first down (those past the
 *  last skipped). Element e of the row is column e of the grid row's plane, or, where planes
 *  are interleaved, plane e % planes of column e / planes (P > 0: P planes, known at compile
 *  time, each plane's coefficients loaded once for the thread's columns of it). For each
 *  block row and element, the element's column's K vertical sums of the kept coefficients
 *  times T (inverse_block's first stage, for this column only), then its B (or fewer, at the
 *  bottom edge) values, the S elements of a row stored in one word (4, 12 or 16 bytes) where
 *  they lie side by side at an aligned address (else one by one; an element past the row's end is computed from the last column
 *  and not stored). Every block row's sums come before any store, so that the loads of all R
 *  are in flight at once. The columns of T it needs are read once into registers: the table
 *  lies in the constant bank, which serves a warp at once only where all its threads read one
 *  address. The loops run to the compile-time block size (BT) and chop (KT; 0: known at run
 *  time only) and stop at k, so that they unroll and the sums stay in registers; where the
 *  chop is known at compile time no test of k remains, and a row of K coefficients comes in
 *  load_run's wide loads. The compact kernel (compact_decode: B = 32) unrolls only the loop
 *  over the K sums, which stay in registers, and reads T from `t` as it goes. */
template <int BT, int KT, int R, int S, int P, typename Out, typename Real>
DCTCHOP_HD void decode_elements(std::uint64_t row, std::uint32_t pos, const Real* t, int b, int k,
                                const std::byte* coeffs, coeff_code code, Out* out,
                                const batch_geometry& g, Real offset) {
  constexpr int bmax = BT > 0 ? BT : 32;
  constexpr int kmax = KT > 0 ? KT : bmax;
  if constexpr (BT > 0) b = BT;
  if constexpr (KT > 0) k = KT;
  // The grid row: sample n, its first block row bi0, and its plane p0 unless interleaved.
  const bool inter = interleaved(g);
  const std::uint64_t groups = row_groups(g, R);
  const std::uint64_t bi0 = row % groups * R;
  std::uint64_t n = row / groups, p0 = 0;
  if (!inter) {
    p0 = n % g.planes;
    n /= g.planes;
  }
  // The elements: column x[s] of plane pl[s], at[s] elements from the row's start. 32-bit
  // arithmetic: a row's elements number fewer than 2^32 (fits).
  const auto width = static_cast<std::uint32_t>(row_elements(g));
  const auto planes = static_cast<std::uint32_t>(inter ? g.planes : 1);
  const std::uint32_t e0 = pos * static_cast<std::uint32_t>(S);
  std::uint32_t x[S], pl[S];
  std::int64_t at[S];
  if constexpr (P > 0) {
    // S / P columns of P interleaved planes (with_decode_planes): e0 is a multiple of P, so
    // element s is plane s % P of column e0 / P + s / P, and the columns lie in one block.
    static_assert(S % P == 0 && BT > 0 && BT % (S / P) == 0 && R == 1);
    DCTCHOP_UNROLL
    for (int s = 0; s < S; ++s) {
      pl[s] = static_cast<std::uint32_t>(s % P);
      x[s] = e0 / P + static_cast<std::uint32_t>(s / P);
    }
  } else {
    x[0] = e0 / planes;
    pl[0] = e0 % planes;
    DCTCHOP_UNROLL
    for (int s = 1; s < S; ++s) {
      const bool next = pl[s - 1] + 1 == planes;
      pl[s] = next ? 0 : pl[s - 1] + 1;
      x[s] = next ? x[s - 1] + 1 : x[s - 1];
    }
  }
  DCTCHOP_UNROLL
  for (int s = 0; s < S; ++s) {
    x[s] = x[s] < g.w ? x[s] : static_cast<std::uint32_t>(g.w - 1);  // past the end: not stored
    at[s] = static_cast<std::int64_t>(x[s]) * g.stride_col +
            (inter ? static_cast<std::int64_t>(pl[s]) * g.stride_plane : 0);
  }
  const std::byte* cplane = coeffs + (n * g.planes + p0) * g.plane_coeff_bytes;
  const std::uint64_t ccols = g.bw * static_cast<std::uint64_t>(k);
  // C[u][0] of block (bi, j) in a coefficient plane: its element index.
  const auto first_of = [&](std::uint64_t bi, int u, std::uint64_t j) {
    return (bi * k + static_cast<std::uint64_t>(u)) * ccols + j * k;
  };
  constexpr bool compact = compact_decode<BT, KT>();
  // Compact reads T's column from t as it goes: no shared coefficient rows (S = 1), one block
  // row.
  static_assert(!compact || (S == 1 && R == 1));
  [[maybe_unused]] Real tc[S][compact ? 1 : kmax];  // T[v][x[s] % b]; compact: read from t
  if constexpr (!compact) {
    DCTCHOP_UNROLL
    for (int s = 0; s < S; ++s) {
      const auto cb = static_cast<int>(x[s] % static_cast<std::uint32_t>(b));
      DCTCHOP_UNROLL
      for (int v = 0; v < kmax; ++v) {
        if (v >= k) break;
        tc[s][v] = t[v == 0 ? 0 : v * b + cb];  // (row 0: one value, read at one address)
      }
    }
  }
  // Neither array is zeroed: only the elements written are read (v, u < k; block rows
  // before bh), and zeroing them took about 6% of the instructions the u8 decode ran.
  Real y[R][S][kmax];  // y[i][s][u] = sum_v C[u][v] T[v][x[s] % b] of block row bi0 + i
  // One switch on the coefficient type around the unrolled sums, not one per load: the same
  // loads and sums, but straight-line code (a switch per load made B = 32's kernels 57,000
  // lines of PTX each and most of the CUDA backend's compile time).
  // A kernel for one chop is never run with i16 coefficients (with_decode_chop).
  with_coeff_type<KT == 0>(code, [&](auto type) {
    using C = decltype(type);
    // Row u of a block's kept coefficients, from the plane at `cp`, block column j.
    const auto coeff_row = [&](const std::byte* cp, std::uint64_t bi, int u, std::uint64_t j,
                               Real* c) {
      const std::uint64_t first = first_of(bi, u, j);
      if constexpr (KT > 0) {
        load_run<KT, C>(cp, first, c);
      } else {
        DCTCHOP_UNROLL
        for (int v = 0; v < kmax; ++v) {
          if (v >= k) break;
          c[v] = C::template get<Real>(cp, first + v);
        }
      }
    };
    const auto sum = [&](const Real* c, const Real* tcs) {
      Real acc = c[0] * tcs[0];
      DCTCHOP_UNROLL
      for (int v = 1; v < kmax; ++v) {
        if (v >= k) break;
        acc += c[v] * tcs[v];
      }
      return acc;
    };
    // Not interleaved, the S elements are columns of one block (S divides B, and e0 is a
    // multiple of S), so they share its coefficients: loaded once (G = 1). With P interleaved
    // planes known at compile time, the S / P columns of each plane lie in one block: each
    // plane's loaded once (G = P), element s taking plane s % P's. Otherwise (G = 0) each
    // element loads its own plane's.
    const auto sums = [&](auto groups) {
      constexpr int G = decltype(groups)::value;
      DCTCHOP_UNROLL
      for (int i = 0; i < R; ++i) {
        const std::uint64_t bi = bi0 + static_cast<std::uint64_t>(i);
        if (bi >= g.bh) break;
        DCTCHOP_UNROLL
        for (int u = 0; u < kmax; ++u) {
          if (u >= k) break;
          Real c[kmax];  // C[u][v]
          if constexpr (G > 0) {
            const std::uint64_t j = x[0] / static_cast<std::uint32_t>(b);
            DCTCHOP_UNROLL
            for (int q = 0; q < G; ++q) {
              coeff_row(cplane + static_cast<std::uint64_t>(q) * g.plane_coeff_bytes, bi, u, j,
                        c);
              DCTCHOP_UNROLL
              for (int s = q; s < S; s += G) y[i][s][u] = sum(c, tc[s]);
            }
          } else {
            DCTCHOP_UNROLL
            for (int s = 0; s < S; ++s) {
              const std::byte* cp = cplane + pl[s] * g.plane_coeff_bytes;
              const std::uint64_t j = x[s] / static_cast<std::uint32_t>(b);
              if constexpr (KT > 0) {
                coeff_row(cp, bi, u, j, c);
                y[i][s][u] = sum(c, tc[s]);
              } else if constexpr (compact) {
                // The same sum, a term at a time, the table's column read as it goes.
                const std::uint64_t first = first_of(bi, u, j);
                const Real* tv = t + x[s] % static_cast<std::uint32_t>(b);  // column x of T
                Real acc = C::template get<Real>(cp, first) * t[0];  // T[0][x] is t[0]
                DCTCHOP_ROLLED
                for (int v = 1; v < k; ++v) {
                  acc += C::template get<Real>(cp, first + v) * tv[v * b];
                }
                y[i][s][u] = acc;
              } else {
                // Each load beside its product, with one test of k, not two loops of
                // them: at B = 32 the two loops doubled the compile time.
                const std::uint64_t first = first_of(bi, u, j);
                Real acc = C::template get<Real>(cp, first) * tc[s][0];
                DCTCHOP_UNROLL
                for (int v = 1; v < kmax; ++v) {
                  if (v >= k) break;
                  acc += C::template get<Real>(cp, first + v) * tc[s][v];
                }
                y[i][s][u] = acc;
              }
            }
          }
        }
      }
    };
    if constexpr (P > 0) {
      sums(std::integral_constant<int, P>{});
    } else if constexpr (S == 1) {
      sums(std::integral_constant<int, 0>{});
    } else if (inter) {
      sums(std::integral_constant<int, 0>{});
    } else {
      sums(std::integral_constant<int, 1>{});
    }
  });
  // A value's sum starts from its first product (p0 + p1 ..., not 0 + p0 ...), and is -0
  // where every product is -0; x + offset then gives -0 only where the offset is -0 too: so
  // the offset is taken plus 0, which turns -0 into +0 and leaves every other value as it
  // is (as inverse_block's callers and the CPU do).
  const Real off = offset + Real(0);
  Out* base = out + static_cast<std::int64_t>(n) * g.stride_sample +
              static_cast<std::int64_t>(p0) * g.stride_plane + at[0];
  // One store a row where the S elements lie side by side (all within the row) at an address
  // that is, in every row, a multiple of the word's alignment: its size, or for 12 u8 (P = 3)
  // 4, the largest power of 2 that divides it.
  constexpr std::size_t word_bytes = S * sizeof(Out);
  struct alignas(word_bytes & (~word_bytes + 1)) word {
    Out v[S];
  };
  const bool whole_words =
      S > 1 && e0 + S <= width && at[S - 1] - at[0] == S - 1 && g.stride_row % S == 0 &&
      reinterpret_cast<std::uintptr_t>(base) % alignof(word) == 0;
  DCTCHOP_UNROLL
  for (int i = 0; i < R; ++i) {
    const std::uint64_t bi = bi0 + static_cast<std::uint64_t>(i);
    if (bi >= g.bh) break;
    const std::uint64_t top = bi * static_cast<std::uint64_t>(b);
    const int rows = g.h - top < static_cast<std::uint64_t>(b) ? static_cast<int>(g.h - top) : b;
    // The first term of a value's sum, T[0][r] * y[0], is the same in every row r: row 0 of
    // T holds one value (make_table), so it is one product a column, not one a value. At
    // chop 1 it is the whole sum, and the compiler converts a block row's first row only
    // and stores it B times (static count, sm_90: 648 instructions a thread to 496).
    Real first[S];
    DCTCHOP_UNROLL
    for (int s = 0; s < S; ++s) first[s] = t[0] * y[i][s][0];
    // Rows r and b-1-r of the block row (inverse_block's second stage): the sum of the even
    // terms e, from the first, and of the odd ones o; row r is e + o, row b-1-r e - o, since
    // T[u][b-1-r] = (-1)^u T[u][r] (half the products and sums of the two rows' own).
    const auto pair = [&](int r, Real* lo, Real* hi) {
      DCTCHOP_UNROLL
      for (int s = 0; s < S; ++s) {
        Real e = first[s];
        DCTCHOP_UNROLL
        for (int u = 2; u < kmax; u += 2) {
          if (u >= k) break;
          e += t[u * b + r] * y[i][s][u];
        }
        lo[s] = e;
        hi[s] = e;
        if constexpr (kmax > 1) {
          if (k > 1) {
            Real o = t[b + r] * y[i][s][1];
            DCTCHOP_UNROLL
            for (int u = 3; u < kmax; u += 2) {
              if (u >= k) break;
              o += t[u * b + r] * y[i][s][u];
            }
            lo[s] = e + o;
            hi[s] = e - o;
          }
        }
      }
    };
    // The S values `acc` of a row, converted and stored at p.
    const auto put = [&](const Real* acc, Out* p) {
      word w;
      if constexpr (S % 4 == 0 && sizeof(Out) == 1) {
        DCTCHOP_UNROLL
        for (int q = 0; q < S; q += 4) convert_out4(acc + q, off, w.v + q);
      } else {
        DCTCHOP_UNROLL
        for (int s = 0; s < S; ++s) w.v[s] = convert_out<Out>(acc[s], off);
      }
      if (whole_words) {
#if defined(__CUDA_ARCH__)
        // Aligned stores of integers of the word's alignment (one, or three for 12 bytes): a
        // struct of bytes is stored as st.v4.u8 of its bytes, taken apart (3 shifts and 4
        // conversions a word of u8) and put back together by ptxas (6 instructions a word
        // more than an integer's store, sm_90).
        using bits = std::conditional_t<
            alignof(word) == 4, std::uint32_t,
            std::conditional_t<alignof(word) == 2, std::uint16_t, word>>;
        bits wb[sizeof(word) / sizeof(bits)];
        std::memcpy(wb, &w, sizeof wb);
        DCTCHOP_UNROLL
        for (int q = 0; q < static_cast<int>(sizeof wb / sizeof(bits)); ++q) {
          reinterpret_cast<bits*>(p)[q] = wb[q];
        }
#else
        // (the alignment that the device's stores take, checked: there a misaligned one faults)
        if (reinterpret_cast<std::uintptr_t>(p) % alignof(word) != 0) {
          throw_misaligned("store", alignof(word));
        }
        std::memcpy(p, &w, sizeof w);
#endif
      } else {
        DCTCHOP_UNROLL
        for (int s = 0; s < S; ++s) {
          if (e0 + static_cast<std::uint32_t>(s) < width) p[at[s] - at[0]] = w.v[s];
        }
      }
    };
    // Row r at p, row b-1-r at p + (b-1-2r) rows (a pointer formed only where that row is
    // in the plane).
    Out* p = base + static_cast<std::int64_t>(top) * g.stride_row;
    const auto mirror = [&](int r) {
      return p + static_cast<std::int64_t>(b - 1 - 2 * r) * g.stride_row;
    };
    if constexpr (compact) {
      DCTCHOP_ROLLED
      for (int r = 0; r < b / 2 && r < rows; ++r) {  // (b is 4, 8, 16 or 32: no middle row)
        Real lo[S], hi[S];
        pair(r, lo, hi);
        put(lo, p);
        if (b - 1 - r < rows) put(hi, mirror(r));
        p += g.stride_row;
      }
    } else {
      // A whole block row (all but the bottom one) stores without a bound check a row, and
      // through pointers stepped a row at a time, not a 64-bit product a value.
      static_assert(BT > 0 && BT % 2 == 0);  // (a run-time b takes the compact kernel)
      const auto store = [&](auto whole) {
        constexpr bool all = decltype(whole)::value;
        if constexpr (kmax == 1) {  // every row is `first`: stored in order, one pointer
          DCTCHOP_UNROLL
          for (int r = 0; r < bmax; ++r) {
            if (!all && r >= rows) break;
            put(first, p);
            p += g.stride_row;
          }
        } else {
          Out* q = all ? mirror(0) : nullptr;  // row b-1-r of a whole block row
          DCTCHOP_UNROLL
          for (int r = 0; r < bmax / 2; ++r) {
            if (!all && r >= rows) break;
            Real lo[S], hi[S];
            pair(r, lo, hi);
            put(lo, p);
            if (all) {
              put(hi, q);
              q -= g.stride_row;
            } else if (b - 1 - r < rows) {
              put(hi, mirror(r));
            }
            p += g.stride_row;
          }
        }
      };
      if (rows == b) {
        store(std::true_type{});
      } else {
        store(std::false_type{});
      }
    }
  }
}

/** Position pos = (x * planes + p) * k + u where interleaved, else x * k + u. */
DCTCHOP_HD line_place row_place(std::uint64_t row, std::uint32_t pos, const batch_geometry& g,
                                int k) {
  const auto kk = static_cast<std::uint32_t>(k);
  line_place at = line_place_of(row, pos / kk, g);
  at.u = static_cast<int>(pos % kk);
  return at;
}

/** Encode kept row u of one block: row u of T X (forward_block's first stage, the block's
 *  rows r and b-1-r read in pairs, the last row and column replicated into the padding),
 *  then its K coefficients. Row u of T is read once into registers (see decode_elements).
 *  False when a coefficient does not fit `code`. */
template <int BT, typename In, typename Real>
DCTCHOP_HD bool encode_row(const line_place& at, const Real* t, int b, int k, const In* in,
                           const batch_geometry& g, Real offset, coeff_code code,
                           std::byte* coeffs) {
  constexpr int bmax = BT > 0 ? BT : 32;
  if constexpr (BT > 0) b = BT;
  const In* src = in + static_cast<std::int64_t>(at.n) * g.stride_sample +
                  static_cast<std::int64_t>(at.p) * g.stride_plane;
  // forward_block's sums: rows r and b-1-r paired (their sum for even u, their difference
  // for odd u), over r < b/2 in order from 0; then columns likewise for each v. (b is 4, 8,
  // 16 or 32: no middle row or column.)
  const int h = b / 2;
  Real tu[bmax / 2] = {};  // T[u][r], r < h
  Real y[bmax];            // y[col] = row u of T X
  DCTCHOP_UNROLL
  for (int i = 0; i < bmax; ++i) {
    if (i >= b) break;
    if (i < h) tu[i] = t[at.u * b + i];
    y[i] = 0;
  }
  const auto accumulate = [&](auto odd) {
    DCTCHOP_UNROLL
    for (int r = 0; r < bmax / 2; ++r) {
      if (r >= h) break;
      std::uint64_t top = at.bi * b + static_cast<std::uint64_t>(r);
      std::uint64_t bottom = at.bi * b + static_cast<std::uint64_t>(b - 1 - r);
      top = top < g.h ? top : g.h - 1;
      bottom = bottom < g.h ? bottom : g.h - 1;
      const In* l1 = src + static_cast<std::int64_t>(top) * g.stride_row;
      const In* l2 = src + static_cast<std::int64_t>(bottom) * g.stride_row;
      DCTCHOP_UNROLL
      for (int col = 0; col < bmax; ++col) {
        if (col >= b) break;
        std::uint64_t cc = at.x * b + static_cast<std::uint64_t>(col);
        cc = cc < g.w ? cc : g.w - 1;
        const auto e = static_cast<std::int64_t>(cc) * g.stride_col;
        const Real p = static_cast<Real>(l1[e]) - offset, q = static_cast<Real>(l2[e]) - offset;
        y[col] += tu[r] * (decltype(odd)::value ? p - q : p + q);
      }
    }
  };
  if (at.u % 2 != 0) {
    accumulate(std::true_type{});
  } else {
    accumulate(std::false_type{});
  }
  Real ys[bmax / 2], yd[bmax / 2];  // y's columns col and b-1-col, summed and differenced
  DCTCHOP_UNROLL
  for (int col = 0; col < bmax / 2; ++col) {
    if (col >= h) break;
    ys[col] = y[col] + y[b - 1 - col];
    yd[col] = y[col] - y[b - 1 - col];
  }
  void* cplane = coeffs + (at.n * g.planes + at.p) * g.plane_coeff_bytes;
  const std::uint64_t first = (at.bi * k + at.u) * (g.bw * k) + at.x * k;
  bool ok = true;
  const auto coeff = [&](int v, const Real* z) {
    Real acc = 0;
    DCTCHOP_UNROLL
    for (int col = 0; col < bmax / 2; ++col) {
      if (col >= h) break;
      acc += t[v * b + col] * z[col];  // (T's row v: the same address in every thread)
    }
    ok &= store_coeff(acc, code, cplane, first + v);
  };
  for (int v = 0; v < k; v += 2) {
    coeff(v, ys);
    if (v + 1 < k) coeff(v + 1, yd);
  }
  return ok;
}

/** Encode thread (row, pos) of the line grid row_grid(g, k): one kept row of one block.
 *  Positions past the grid's width do nothing. Returns as encode_thread. */
template <int BT, typename In, typename Real>
DCTCHOP_HD std::uint64_t encode_line_thread(std::uint64_t row, std::uint32_t pos, const Real* t,
                                            int b, int k, const In* in, const batch_geometry& g,
                                            Real offset, coeff_code code, std::byte* coeffs) {
  if (pos >= row_grid(g, k).width) return all_fit;
  const line_place at = row_place(row, pos, g, k);
  return encode_row<BT>(at, t, b, k, in, g, offset, code, coeffs) ? all_fit : at.n;
}

/** The grid of the decode line kernel for block size BT (0: known at run time only), chop
 *  KT (likewise), output type Out, sums in Real and P interleaved planes (with_decode_planes;
 *  0: any): column_grid(g, R, S) with R = rows_per_thread<BT, KT, Out, Real, P>() and S =
 *  elements_per_thread<BT, KT, Out, P>(). The launch and the host tests take it from here. */
template <int BT, int KT, typename Out, typename Real, int P = 0>
DCTCHOP_HD line_grid decode_line_grid(const batch_geometry& g) {
  return column_grid(g, rows_per_thread<BT, KT, Out, Real, P>(),
                     elements_per_thread<BT, KT, Out, P>());
}

/** Calls fn with the chop that the decode line kernel is compiled for
 *  (std::integral_constant<int, KT>): the chop itself at block size 8 (the published method's
 *  block, at every chop) for the outputs summed in float (u8, i8, u16, i16, f16, f32: what
 *  images and fields hold) from f16, bf16 or f32 coefficients whose address is a multiple of
 *  16, as load_run needs; otherwise 0, the kernel that takes the chop at run time. Each chop's
 *  kernels cost compile time, of the CUDA backend and of the host tests that run the same
 *  functions (without them the ASan build's test_block.cpp compiled in 58 s instead of 78),
 *  hence none for the outputs summed in double (f64, i32, u32) or from i16. */
template <int BT, typename Real, typename Fn>
void with_decode_chop(int k, coeff_code code, const void* coeffs, Fn&& fn) {
  if constexpr (BT == 8 && std::is_same_v<Real, float>) {
    if (code != coeff_code::i16 && reinterpret_cast<std::uintptr_t>(coeffs) % 16 == 0) {
      switch (k) {
        case 1: return fn(std::integral_constant<int, 1>{});
        case 2: return fn(std::integral_constant<int, 2>{});
        case 3: return fn(std::integral_constant<int, 3>{});
        case 4: return fn(std::integral_constant<int, 4>{});
        case 5: return fn(std::integral_constant<int, 5>{});
        case 6: return fn(std::integral_constant<int, 6>{});
        case 7: return fn(std::integral_constant<int, 7>{});
        case 8: return fn(std::integral_constant<int, 8>{});
      }
    }
  }
  fn(std::integral_constant<int, 0>{});
}

/** Calls fn with the interleaved planes that the decode line kernel at block size BT, chop
 *  KT (with_decode_chop) and output Out is compiled for (std::integral_constant<int, P>): 3
 *  for u8 RGB images (NHWC, 3 planes) at B = 8 and chops 1 to 4, the benchmark's images,
 *  whose threads then take 4 columns of all 3 planes (12 bytes a row) and load each plane's
 *  coefficients once for its 4 columns (the threads of S = 4 interleaved elements loaded
 *  them for each element: 2 conversions a decoded value at chop 4, where the planar threads
 *  shared them); otherwise 0, any planes. Only these, for compile time. */
template <int BT, int KT, typename Out, typename Fn>
void with_decode_planes(const batch_geometry& g, Fn&& fn) {
  if constexpr (BT == 8 && KT >= 1 && KT <= 4 && std::is_same_v<Out, std::uint8_t>) {
    if (interleaved(g) && g.planes == 3) return fn(std::integral_constant<int, 3>{});
  }
  fn(std::integral_constant<int, 0>{});
}

/** Decode thread (row, pos) of decode_line_grid<BT, KT, Out, Real>(g): S elements of R
 *  block rows (decode_elements), at chop KT (with_decode_chop; 0: k). Positions past the
 *  grid's width do nothing. */
template <int BT, int KT, typename Out, typename Real, int P = 0>
DCTCHOP_HD void decode_line_thread(std::uint64_t row, std::uint32_t pos, const Real* t, int b,
                                   int k, const std::byte* coeffs, coeff_code code, Out* out,
                                   const batch_geometry& g, Real offset) {
  constexpr int R = rows_per_thread<BT, KT, Out, Real, P>();
  constexpr int S = elements_per_thread<BT, KT, Out, P>();
  if (pos >= decode_line_grid<BT, KT, Out, Real, P>(g).width) return;
  decode_elements<BT, KT, R, S, P>(row, pos, t, b, k, coeffs, code, out, g, offset);
}

/** Threads of the GEMM decode's store grid for `n` planes: one per output value. */
DCTCHOP_HD std::uint64_t store_threads(std::uint64_t n, const batch_geometry& g) {
  return n * g.h * g.w;
}

/** A GEMM result plus the offset, as `Out`: in double for f64 outputs, whose offset (the
 *  mean of data far from zero, say 1e15) a float would round by 1e8, and for i32 and u32,
 *  whose range a float does not span (u32's offset 2^31 plus a value, rounded and clamped to
 *  2^32 - 1, which is 2^32 as a float); in float for the rest. The offset is taken plus 0, as
 *  the other decodes take it: a -0 value plus an offset of -0 gives +0. */
template <typename Out>
DCTCHOP_HD Out store_value(float v, double offset) {
  offset += 0.0;
  if constexpr (std::is_same_v<Out, double> ||
                (std::numeric_limits<Out>::is_integer && sizeof(Out) == 4)) {
    return convert_out<Out>(static_cast<double>(v), offset);
  } else {
    return convert_out<Out>(v, static_cast<float>(offset));
  }
}

/** Store thread `i` of planes [first, first + n): value i of the GEMM result `x` (n padded
 *  planes of hp x wp, row-major) cropped to h x w, plus the offset, converted, into the output
 *  batch at its strides. */
template <typename Out>
DCTCHOP_HD void store_thread(std::uint64_t i, const float* x, std::uint64_t first, std::uint64_t n,
                             std::uint64_t hp, std::uint64_t wp, const batch_geometry& g,
                             double offset, Out* out) {
  if (i >= store_threads(n, g)) return;
  const std::uint64_t per_plane = g.h * g.w;
  const std::uint64_t q = i / per_plane, rc = i % per_plane, r = rc / g.w, c = rc % g.w;
  const std::uint64_t plane = first + q, s = plane / g.planes, ch = plane % g.planes;
  out[static_cast<std::int64_t>(s) * g.stride_sample +
      static_cast<std::int64_t>(ch) * g.stride_plane + static_cast<std::int64_t>(r) * g.stride_row +
      static_cast<std::int64_t>(c) * g.stride_col] =
      store_value<Out>(x[q * hp * wp + r * wp + c], offset);
}

/** One strided-batched SGEMM in cuBLAS's convention: column-major, no transposes, alpha 1,
 *  beta 0; C_i = A_i * B_i (m x k times k x n) with X_i = x + i * stride_x. */
struct strided_gemm {
  int m, n, k;
  const float* a;
  int lda;
  long long stride_a;
  const float* b;
  int ldb;
  long long stride_b;
  float* c;
  int ldc;
  long long stride_c;
  int batch;
};

/** The blocks on the diagonals of R and Lt: T_K (K x B, row-major, T_K[v][y] = T[v][y]) and
 *  its transpose (B x K), in f32. */
struct block_matrices {
  std::vector<float> tk, tkt;
};

inline block_matrices make_block_matrices(int b, int k) {
  const auto t = dct_matrix(b);
  block_matrices m;
  m.tk.resize(static_cast<std::size_t>(k) * b);
  m.tkt.resize(m.tk.size());
  for (int v = 0; v < k; ++v) {
    for (int y = 0; y < b; ++y) {
      m.tk[v * b + y] = static_cast<float>(t[v * b + y]);
      m.tkt[y * k + v] = static_cast<float>(t[v * b + y]);
    }
  }
  return m;
}

/** The largest batch of the GEMM decode's second GEMM: beyond one grid axis (65535) cuBLAS
 *  has failed on some GPUs. */
constexpr std::uint64_t gemm_max_batch = 65535;

/** Planes per group of the GEMM decode: `per_plane_floats` of f32 scratch a plane within 256
 *  MiB, and the second GEMM's batch (`block_rows` a plane) at most gemm_max_batch; at least
 *  one plane. */
inline std::uint64_t gemm_group_planes(std::uint64_t planes, std::uint64_t per_plane_floats,
                                       std::uint64_t block_rows) {
  constexpr std::uint64_t scratch_bytes = std::uint64_t(256) << 20;
  std::uint64_t group = scratch_bytes / (per_plane_floats * sizeof(float));
  if (block_rows > 0) group = std::min(group, gemm_max_batch / block_rows);
  return std::max<std::uint64_t>(1, std::min(planes, group));
}

/** Samples per part of the CUDA backend's host-to-host calls, whose parts go through two
 *  streams so that one part's copies overlap the other's kernel: at most 32 MiB a part (of
 *  `sample_bytes`, the larger side of a sample), and at least four parts where each keeps 1 MiB
 *  or more. A chunk of the command line's default size (4 MiB of coefficients: 8 MiB of u8
 *  input at chop 4) would otherwise be one part, its copies and kernel one after the other. */
inline std::uint64_t samples_per_part(std::uint64_t samples, std::uint64_t sample_bytes) {
  constexpr std::uint64_t most = std::uint64_t(32) << 20, least = std::uint64_t(1) << 20;
  sample_bytes = std::max<std::uint64_t>(sample_bytes, 1);
  const std::uint64_t by_size = std::max<std::uint64_t>(1, most / sample_bytes);
  const std::uint64_t quarter = std::max(samples / 4, (least + sample_bytes - 1) / sample_bytes);
  return std::max<std::uint64_t>(1, std::min(by_size, quarter));
}

/** The two GEMMs that give X' = Lt * C * R for `planes` consecutive planes (the
 *  matrix form), all row-major: C (kh x kw each), T1 = C * R (kh x wp each), X' = Lt * T1
 *  (hp x wp each). R and Lt are block-diagonal, with blocks T_K and T_K^t, so the products
 *  skip their zeros:
 *  - C * R: each row of C is bw segments of K coefficients, and each segment times T_K gives
 *    the B values of its block's columns. So the planes' C, read as a (planes * kh * bw) x K
 *    matrix, times T_K is T1 read as a (planes * kh * bw) x B matrix: one GEMM.
 *  - Lt * T1: block row i of X' (B x wp) is T_K^t times rows iK..iK+K-1 of T1 (K x wp): one
 *    GEMM per block row of every plane, batched.
 *  cuBLAS is column-major, and a row-major m x n matrix is the column-major n x m transpose:
 *  so the first product runs as T_K^T * C^T and the second as T1_i^T * T_K. */
inline std::array<strided_gemm, 2> matrix_form_gemms(const decode_matrices& m, int b, int k,
                                                     const float* tk, const float* tkt,
                                                     const float* c, float* t1, float* x,
                                                     int planes) {
  const int wp = static_cast<int>(m.wp);
  const auto segments = static_cast<int>(static_cast<std::uint64_t>(planes) * m.kh * (m.kw / k));
  const auto block_rows = static_cast<int>(static_cast<std::uint64_t>(planes) * (m.hp / b));
  return {strided_gemm{b, segments, k, tk, b, 0, c, k, 0, t1, b, 0, 1},
          strided_gemm{wp, b, k, t1, wp, static_cast<long long>(k) * wp, tkt, k, 0, x, wp,
                       static_cast<long long>(b) * wp, block_rows}};
}

}  // namespace dctchop::detail
