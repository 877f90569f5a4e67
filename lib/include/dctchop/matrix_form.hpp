/** @file matrix_form.hpp
 *  The portable decode (formats/ARCHIVE.md, "The codec", the matrix form): a plane's padded
 *  values are X' = Lt * Cplane * R, two matrix products that every accelerator runs at full
 *  speed.
 *  L = M G is (Hb*K) x Hp, Hb = ceil(H/B) blocks down and Hp = Hb*B the padded height: G is
 *  the block-diagonal of the B x B DCT matrix T and M keeps the
 *  first K of every B rows, so L[i*K+u][i*B+x] = T[u][x]; Lt is its transpose. R is the same
 *  for the columns: R[j*K+v][j*B+y] = T[v][y]. The decoded value at (r, c), r < H and c < W,
 *  is X'[r][c] plus the offset, rounded and clamped for integer dtypes. The CUDA backend's
 *  GEMM decode and the accelerator adapters use these matrices.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "dctchop/codec.hpp"

namespace dctchop {

/** Lt (hp x kh) and R (kw x wp), row-major, in double: convert to the device's type. */
struct decode_matrices {
  std::uint64_t hp = 0, wp = 0;  ///< padded plane: H and W rounded up to multiples of B
  std::uint64_t kh = 0, kw = 0;  ///< coefficient plane: ceil(H/B)*K rows, ceil(W/B)*K columns
  std::vector<double> lt;        ///< hp x kh
  std::vector<double> r;         ///< kw x wp
};

/** The dimensions alone (hp, wp, kh, kw; lt and r left empty), for decoders that multiply by
 *  the blocks of Lt and R rather than by the whole matrices. error(invalid_argument) for an
 *  empty plane or a side above 2^40. */
decode_matrices decode_matrix_dims(const codec_params& p, std::uint64_t height,
                                   std::uint64_t width);

/** The decode matrices of an H x W plane under codec `p`. error(invalid_argument) when Lt or
 *  R would hold more than 2^30 values (8 GiB; dense, they grow as H^2 and W^2). */
decode_matrices make_decode_matrices(const codec_params& p, std::uint64_t height,
                                     std::uint64_t width);

}  // namespace dctchop
