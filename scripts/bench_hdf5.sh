#!/usr/bin/env bash
# Bounded memory and streaming throughput on a large HDF5 dataset (issue 4's benchmark).
# Makes a 4 GiB u8 NHWC dataset (scripts/make_big_h5.py), then measures with GNU time:
#   baseline 1: the in-memory codec (bench/bench_codec.cpp, u8 256x256x3, chop 4, every core)
#   baseline 2: a plain read of the dataset with dctchop's HDF5 reader (bench/h5_read_baseline)
#   baseline 3: a plain write to the output disk (dd, direct I/O, 8 MiB blocks) of as many
#               bytes as the archive and as the decompressed dataset
#   compress HDF5 -> archive, and decompress archive -> HDF5 / NPY / stdout (wall, peak RSS)
# Usage: scripts/bench_hdf5.sh [GIB] [workdir]   (defaults: 4, build/bench-h5)
# Needs about 2.6 x GIB of free disk. Results: scripts/results/bench-hdf5-<date>.txt
set -euo pipefail
cd "$(dirname "$0")/.."
GIB="${1:-4}"
WORK="${2:-build/bench-h5}"
BUILD="${DCTCHOP_BUILD:-build}"
mkdir -p "$WORK" scripts/results
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target dctchop_cli dctchop_bench h5_read_baseline >/dev/null
DCT="$BUILD/apps/dctchop"
OUT="scripts/results/bench-hdf5-$(date -u +%Y-%m-%d).txt"
H5="$WORK/big.h5"
[ -f "$H5" ] || /usr/bin/python3 scripts/make_big_h5.py "$H5" "$GIB"

RUNS="${RUNS:-5}"
measure() {  # label, command...: best wall seconds of $RUNS runs, and the largest peak RSS (MiB)
  local label="$1"; shift
  local secs=999999 kib=0 s k
  for _ in $(seq "$RUNS"); do  # this machine's disk and page cache make single runs noisy
    case "$label" in *decompress*) cat "$WORK/big.dcz" > /dev/null ;; esac  # warm, like the input
    /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/err.txt" || {
      cat "$WORK/err.txt"; return 1; }
    read -r s k < "$WORK/time.txt"
    if (( $(echo "$s < $secs" | bc -l) )); then secs=$s; fi
    if (( k > kib )); then kib=$k; fi
  done
  local bytes
  bytes=$(stat -c %s "$H5")
  printf "%-44s %8.2f s %8.0f MiB peak RSS %7.2f GB/s of input\n" "$label" "$secs" \
    "$((kib / 1024))" "$(echo "$bytes / $secs / 1000000000" | bc -l)"
}

plain_write() {  # bytes: best GB/s of $RUNS direct writes of that many bytes (8 MiB blocks)
  local best=0 g
  for _ in $(seq "$RUNS"); do
    g=$(dd if=/dev/zero of="$WORK/dd.bin" bs=8M count=$(( ($1 + 8388607) / 8388608 )) \
          oflag=direct conv=fsync 2>&1 | awk '/copied/ {print $(NF-1)}')
    rm -f "$WORK/dd.bin"
    if (( $(echo "$g > $best" | bc -l) )); then best=$g; fi
  done
  echo "$best"
}

{
  echo "# dctchop streaming benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
  echo "# input: $H5, $(du -h "$H5" | cut -f1), u8 (N,256,256,3) chunked 16 images, no filter"
  echo "# page cache warm: the input (and, before each decompress, the archive) was read once"
  echo "# before (it fits in RAM); file outputs go to the same local disk and are fsync'd;"
  echo "# each figure is the best of $RUNS runs; default threads (every core)"
  cat "$H5" > /dev/null
  echo
  echo "## baselines"
  "$BUILD/bench/dctchop_bench" --benchmark_filter="BM_(en|de)code_u8_256x256x3/threads:$(nproc)/chop:4" \
    --benchmark_min_time=1 --benchmark_counters_tabular=true 2>/dev/null | grep BM_ |
    awk '{print "in-memory codec: " $1 "  " $(NF-1) " GB/s"}'
  echo "plain HDF5 read (h5_read_baseline): $("$BUILD/bench/h5_read_baseline" "$H5:/train/images")"
  echo
  echo "## dctchop (block 8, chop 4, f16)"
  measure "compress --no-quality" "$DCT" compress "$H5:/train/images" -o "$WORK/big.dcz" -f --no-quality -q
  measure "compress --no-quality -o - (to /dev/null)" "$DCT" compress "$H5:/train/images" -o - --no-quality -q
  measure "compress (PSNR, no SSIM)" "$DCT" compress "$H5:/train/images" -o "$WORK/big.dcz" -f --no-ssim -q
  measure "compress + labels (PSNR and SSIM)" "$DCT" compress "$H5:/train/images" \
    --labels "$H5:/train/labels" -o "$WORK/big.dcz" -f -q
  measure "decompress -> HDF5 (+ /labels)" "$DCT" decompress "$WORK/big.dcz" -o "$WORK/back.h5:/train/images" -f -q
  measure "decompress -> NPY" "$DCT" decompress "$WORK/big.dcz" -o "$WORK/back.npy" -f -q
  measure "decompress -o - (to /dev/null)" "$DCT" decompress "$WORK/big.dcz" -o - -q
  echo
  echo "archive: $(du -h "$WORK/big.dcz" | cut -f1); decompressed HDF5: $(du -h "$WORK/back.h5" | cut -f1)"
  echo
  echo "## baseline 3: plain direct write to the output disk (dd oflag=direct conv=fsync, 8 MiB blocks)"
  echo "archive-sized write ($(stat -c %s "$WORK/big.dcz") bytes): $(plain_write "$(stat -c %s "$WORK/big.dcz")") GB/s"
  echo "dataset-sized write ($(stat -c %s "$H5") bytes): $(plain_write "$(stat -c %s "$H5")") GB/s"
} | tee "$OUT"
rm -f "$WORK/back.h5" "$WORK/back.npy"
echo "wrote $OUT (the 4 GiB input stays in $WORK; delete it when done)"
