#!/usr/bin/env bash
# Static instruction counts of the decode line kernel and the encode block kernel, on a machine
# without a GPU: what a change to lib/src/cuda_grid.hpp or the per-value functions does to the
# instructions a thread runs, before a device measures it (the kernels are bound by instruction
# issue: scripts/results/gpu-h200-2026-12-04b/profile.txt).
#
#   scripts/sass_probe.sh [TREE]     TREE: a checkout (default: this one); prints a table
#
# Each probe kernel is the real thread function with the chop and the coefficient type (f16)
# fixed at compile time and, for decode, the bottom-edge store path, the one-by-one element
# stores and the planar path taken out of a copy of cuda_grid.hpp, so that what remains is the
# straight-line code one thread of a 256x256x3 u8 batch runs (its index arithmetic's 64-bit
# division subroutines aside, which such a batch never calls). Compiled for sm_90 with the
# backend's flags; counted by scripts/sass_count.py. A count over the values a thread decodes
# (R block rows x S elements x 8 rows, or 64 a block for encode) is instructions a value.
# The last rows: the planar path that the benchmark's f32 fields take (32 values a thread),
# and the kernel of u8 RGB images at chops 1 to 4 (with_decode_planes; 96), where the tree
# has them.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(cd "${1:-$here}" && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
cp "$tree/lib/src/cuda_grid.hpp" "$work/src/"
take() {  # take PATTERN REPLACEMENT: in the copy, or fail (the probe would measure other code)
  grep -qF -- "$1" "$work/src/cuda_grid.hpp" || { echo "sass_probe.sh: '$1' is not in $tree/lib/src/cuda_grid.hpp" >&2; exit 1; }
  sed -i "s/$(printf '%s' "$1" | sed 's/[][\\/.*^$]/\\&/g')/$2/" "$work/src/cuda_grid.hpp"
}
# Decode: whole block rows, whole words, interleaved planes (the RGB batch's paths).
if grep -qF "whole_words" "$work/src/cuda_grid.hpp"; then
  take "if (rows == b) {" "if (true) {"
  take "if (whole_words) {" "if (true) {"
  take "} else if (inter) {" "} else if (true) {"
else
  take "if (rows == b) {" "if (true) {"
fi
cat > "$work/probe.cu" <<'CU'
#include "cuda_grid.hpp"
using namespace dctchop::detail;
template <int K, typename Out, typename Real>
__global__ void decode_probe(dct_table<Real> tab, const std::byte* coeffs, Out* out, batch_geometry g, Real offset) {
  const unsigned pos = blockIdx.y * blockDim.x + threadIdx.x;
#ifdef TWO_TEMPLATE_ARGS
  decode_line_thread<8, K>(blockIdx.x, pos, tab.t, 8, K, coeffs, coeff_code::f16, out, g, offset);
#else
  decode_line_thread<8>(blockIdx.x, pos, tab.t, 8, K, coeffs, coeff_code::f16, out, g, offset);
#endif
}
template <int K, typename In, typename Real>
__global__ void encode_probe(dct_table<Real> tab, const In* in, batch_geometry g, Real offset, std::byte* coeffs, unsigned long long* bad) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto r = encode_thread<8>(i, tab.t, 8, K, in, g, offset, coeff_code::f16, coeffs);
  if (r != all_fit) atomicMin(bad, static_cast<unsigned long long>(r));
}
#define D(K, T, R) template __global__ void decode_probe<K, T, R>(dct_table<R>, const std::byte*, T*, batch_geometry, R);
#define E(K, T, R) template __global__ void encode_probe<K, T, R>(dct_table<R>, const T*, batch_geometry, R, std::byte*, unsigned long long*);
D(1, std::uint8_t, float) D(2, std::uint8_t, float) D(4, std::uint8_t, float) D(8, std::uint8_t, float)
D(4, std::uint16_t, float) D(1, float, float) D(4, float, float)
E(1, std::uint8_t, float) E(4, std::uint8_t, float) E(4, float, float)
CU
two=""
grep -q "template <int BT, int KT, typename Out, typename Real" "$work/src/cuda_grid.hpp" && two=-DTWO_TEMPLATE_ARGS
"$nvcc" -std=c++20 -O3 -fmad=false --expt-relaxed-constexpr -arch=sm_90 -cubin $two \
  -I "$work/src" -I "$tree/lib/include" "$work/probe.cu" -o "$work/probe.cubin"
echo "static SASS instructions a thread (sm_90) of $tree ($(git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo '?'))"
python3 "$here/scripts/sass_count.py" "$work/probe.cubin" | sed -E 's/\(dctchop::detail::dct_table.*//; s/unsigned char/u8/; s/unsigned short/u16/'
# The f32 fields of the GPU benchmark are planar (NHW): their threads share a block's
# coefficient loads (the shared path, which the probe above takes out). The same probe of it.
if grep -qF "} else if (true) {" "$work/src/cuda_grid.hpp"; then
  take "} else if (true) {" "} else if (false) {"
  cat > "$work/planar.cu" <<'CU'
#include "cuda_grid.hpp"
using namespace dctchop::detail;
template <int K>
__global__ void decode_planar_probe(dct_table<float> tab, const std::byte* coeffs, float* out, batch_geometry g, float offset) {
  const unsigned pos = blockIdx.y * blockDim.x + threadIdx.x;
#ifdef TWO_TEMPLATE_ARGS
  decode_line_thread<8, K>(blockIdx.x, pos, tab.t, 8, K, coeffs, coeff_code::f16, out, g, offset);
#else
  decode_line_thread<8>(blockIdx.x, pos, tab.t, 8, K, coeffs, coeff_code::f16, out, g, offset);
#endif
}
template __global__ void decode_planar_probe<1>(dct_table<float>, const std::byte*, float*, batch_geometry, float);
template __global__ void decode_planar_probe<4>(dct_table<float>, const std::byte*, float*, batch_geometry, float);
CU
  "$nvcc" -std=c++20 -O3 -fmad=false --expt-relaxed-constexpr -arch=sm_90 -cubin $two \
    -I "$work/src" -I "$tree/lib/include" "$work/planar.cu" -o "$work/planar.cubin"
  python3 "$here/scripts/sass_count.py" "$work/planar.cubin" | sed -E 's/\(dctchop::detail::dct_table.*//; s/<1>/<1, float>/; s/<4>/<4, float>/'
fi
# u8 RGB images at B = 8 and chops 1 to 4 take their own kernel (with_decode_planes: 4 columns
# of the 3 planes a thread, 96 values): the benchmark's images, where the tree has it.
if grep -qF "with_decode_planes" "$work/src/cuda_grid.hpp"; then
  cat > "$work/rgb.cu" <<'CU'
#include "cuda_grid.hpp"
using namespace dctchop::detail;
template <int K>
__global__ void decode_rgb_probe(dct_table<float> tab, const std::byte* coeffs, std::uint8_t* out, batch_geometry g, float offset) {
  const unsigned pos = blockIdx.y * blockDim.x + threadIdx.x;
  decode_line_thread<8, K, std::uint8_t, float, 3>(blockIdx.x, pos, tab.t, 8, K, coeffs, coeff_code::f16, out, g, offset);
}
template __global__ void decode_rgb_probe<1>(dct_table<float>, const std::byte*, std::uint8_t*, batch_geometry, float);
template __global__ void decode_rgb_probe<2>(dct_table<float>, const std::byte*, std::uint8_t*, batch_geometry, float);
template __global__ void decode_rgb_probe<4>(dct_table<float>, const std::byte*, std::uint8_t*, batch_geometry, float);
CU
  "$nvcc" -std=c++20 -O3 -fmad=false --expt-relaxed-constexpr -arch=sm_90 -cubin \
    -I "$work/src" -I "$tree/lib/include" "$work/rgb.cu" -o "$work/rgb.cubin"
  python3 "$here/scripts/sass_count.py" "$work/rgb.cubin" | sed -E 's/\(dctchop::detail::dct_table.*//; s/<([124])>/<\1, u8>/'
fi
