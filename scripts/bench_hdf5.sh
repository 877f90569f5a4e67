#!/usr/bin/env bash
# Bounded memory and streaming throughput on a large HDF5 dataset (issue 4's benchmark).
# Makes a 4 GiB u8 NHWC dataset (scripts/make_big_h5.py), then measures with GNU time:
#   baseline 1: the in-memory codec (bench/bench_codec.cpp, u8 256x256x3, chop 4, every core)
#   baseline 2: a plain read of the dataset with dctchop's HDF5 reader (bench/h5_read_baseline)
#   baseline 3: a plain write to the output disk (dd, direct I/O, 8 MiB blocks) of as many
#               bytes as the archive and as the decompressed dataset
#   compress HDF5 -> archive, and decompress archive -> HDF5 / NPY / stdout (wall, peak RSS)
# Usage: scripts/bench_hdf5.sh [GIB] [workdir]   (defaults: 4, build/bench-h5; see --help)
# Needs about 3.5 x GIB of free disk at its peak (14 GiB for 4): the input, the archive (half
# the input) and, while a decompress run replaces the previous run's output, two outputs (the
# new one is written beside the old and renamed over it). Each output is removed once measured.
# Results: scripts/results/bench-hdf5-<date>.txt
set -euo pipefail
usage() {
  cat <<'EOF'
Usage: scripts/bench_hdf5.sh [GIB] [WORKDIR]
Streaming benchmark on a GIB GiB u8 HDF5 dataset (default 4) made in WORKDIR (default:
build/bench-h5 in the repository; a relative path given is taken from the current folder).
An existing WORKDIR/big.h5 is reused only when it holds GIB GiB, unfiltered. Needs about
3.5 x GIB GiB of free disk; results in scripts/results/bench-hdf5-<date>.txt.
Environment: RUNS=N runs per figure (default 5); DCTCHOP_BUILD=DIR build folder (default build).
  -h, --help   this text
EOF
}
bad() { echo "bench_hdf5.sh: $1" >&2; usage >&2; exit 2; }
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --) shift; ARGS+=("$@"); break ;;
    -[0-9.]*) bad "GIB must be a positive number, not '$1'" ;;
    -*) bad "unknown option '$1'" ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[ ${#ARGS[@]} -le 2 ] || bad "too many arguments (${#ARGS[@]}; at most two: GIB WORKDIR)"
GIB="${ARGS[0]:-4}"
[[ "$GIB" =~ ^([0-9]+([.][0-9]*)?|[.][0-9]+)$ ]] && [[ "$GIB" =~ [1-9] ]] ||
  bad "GIB must be a positive number, not '$GIB'"
RUNS="${RUNS:-5}"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || bad "RUNS must be a positive whole number, not '$RUNS'"
[ ${#ARGS[@]} -lt 2 ] || [ -n "${ARGS[1]}" ] || bad "WORKDIR is empty"
for tool in /usr/bin/time bc; do
  command -v "$tool" >/dev/null || { echo "bench_hdf5.sh: needs $tool (scripts/setup.sh installs it)" >&2; exit 2; }
done
# A work folder given is the caller's: made absolute before the cd into the repository.
WORK="build/bench-h5"
if [ ${#ARGS[@]} -eq 2 ]; then WORK="$(realpath -m -- "${ARGS[1]}")"; fi
cd "$(dirname "$0")/.."
BUILD="${DCTCHOP_BUILD:-build}"
mkdir -p "$WORK" scripts/results
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target dctchop_cli dctchop_bench h5_read_baseline >/dev/null
DCT="$BUILD/apps/dctchop"
OUT="scripts/results/bench-hdf5-$(date -u +%Y-%m-%d).txt"
H5="$WORK/big.h5"
# The outputs and scratch files go whatever happens; the input stays for the next run.
trap 'rm -f "$WORK/big.dcz" "$WORK/back.h5" "$WORK/back.npy" "$WORK/dd.bin" "$WORK/time.txt" "$WORK/err.txt"' EXIT
# Made again unless it is complete and of this size, unfiltered (make_big_h5.py --reuse checks
# the file itself: image count, filter pipeline, and the stamp it writes last).
/usr/bin/python3 scripts/make_big_h5.py --reuse "$H5" "$GIB" none
# GB/s are of the dataset's uncompressed bytes (shape x item size), not of the file's.
SIZES=$(/usr/bin/python3 -c 'import sys, h5py
d = h5py.File(sys.argv[1], "r")["train/images"]
print(d.shape[0], d.size * d.dtype.itemsize)' "$H5")
read -r IMAGES BYTES <<< "$SIZES"

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
  printf "%-44s %8.2f s %8.0f MiB peak RSS %7.2f GB/s of uncompressed data\n" "$label" "$secs" \
    "$((kib / 1024))" "$(echo "$BYTES / $secs / 1000000000" | bc -l)"
}

plain_write() {  # bytes: best GB/s of $RUNS direct writes of that many bytes (8 MiB blocks)
  local best=0 g
  for _ in $(seq "$RUNS"); do
    # GB/s from dd's bytes and seconds: its own rate changes unit (kB/s, MB/s, GB/s).
    g=$(LC_ALL=C dd if=/dev/zero of="$WORK/dd.bin" bs=8M count=$(( ($1 + 8388607) / 8388608 )) \
          oflag=direct conv=fsync 2>&1 |
        awk '/copied/ { for (i = 2; i <= NF; i++) if ($i == "s,") printf "%.2f\n", $1 / $(i - 1) / 1e9 }')
    rm -f "$WORK/dd.bin"
    if (( $(echo "$g > $best" | bc -l) )); then best=$g; fi
  done
  echo "$best"
}

{
  echo "# dctchop streaming benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
  echo "# input: $H5, $(du -h "$H5" | cut -f1), u8 ($IMAGES,256,256,3) = $BYTES bytes," \
    "chunked 16 images, no filter"
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
  # Each output is removed once measured: at most the input, the archive and two outputs
  # (the previous run's and the new one beside it) are on the disk at once.
  measure "decompress -> HDF5 (+ /labels)" "$DCT" decompress "$WORK/big.dcz" -o "$WORK/back.h5:/train/images" -f -q
  back_h5=$(du -h "$WORK/back.h5" | cut -f1)
  rm -f "$WORK/back.h5"
  measure "decompress -> NPY" "$DCT" decompress "$WORK/big.dcz" -o "$WORK/back.npy" -f -q
  rm -f "$WORK/back.npy"
  measure "decompress -o - (to /dev/null)" "$DCT" decompress "$WORK/big.dcz" -o - -q
  archive=$(stat -c %s "$WORK/big.dcz")
  echo
  echo "archive: $(du -h "$WORK/big.dcz" | cut -f1); decompressed HDF5: $back_h5"
  rm -f "$WORK/big.dcz"  # dd needs only its size
  echo
  echo "## baseline 3: plain direct write to the output disk (dd oflag=direct conv=fsync, 8 MiB blocks)"
  echo "archive-sized write ($archive bytes): $(plain_write "$archive") GB/s"
  echo "dataset-sized write ($BYTES bytes): $(plain_write "$BYTES") GB/s"
} | tee "$OUT"
echo "wrote $OUT (the $GIB GiB input stays in $WORK; delete it when done)"
