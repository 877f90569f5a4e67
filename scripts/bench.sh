#!/usr/bin/env bash
# CPU benchmarks: in-memory codec throughput (Google Benchmark) and, through the CLI, ratio,
# PSNR and end-to-end throughput on generated 256x256x3 u8 images and 512x512 f32 fields.
# Usage: scripts/bench.sh [results-dir]   (default: scripts/results; see --help)
# Writes bench-cpu-<date>.txt (human) and .json (raw) there. Takes about two minutes.
set -euo pipefail
usage() {
  cat <<'EOF'
Usage: scripts/bench.sh [RESULTS-DIR]
CPU benchmarks (codec, loader, .npz inflaters, CLI ratio/PSNR/throughput); about two minutes.
Writes bench-cpu-<date>.txt and .json to RESULTS-DIR (default: scripts/results; a relative
path is taken from the current folder). Builds the benchmark targets in $DCTCHOP_BUILD
(default: build, in the repository) first; the generated inputs go to $DCTCHOP_BUILD/bench-data.
  -h, --help   this text
EOF
}
. "$(dirname "$0")/args.sh"
parse_one_folder bench.sh RESULTS-DIR scripts/results "$@"
RESULTS="$FOLDER"
cd "$(dirname "$0")/.."
BUILD="${DCTCHOP_BUILD:-build}"
mkdir -p "$RESULTS"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target dctchop_bench dctchop_loader_bench dctchop_formats_bench \
  dctchop_cli >/dev/null
STAMP="$(date -u +%Y-%m-%d)"
OUT="$RESULTS/bench-cpu-$STAMP.txt"
DATA="$BUILD/bench-data"
/usr/bin/python3 scripts/make_bench_data.py "$DATA" 256 64
DCT="$BUILD/apps/dctchop"

{
  echo "# dctchop CPU benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  echo "# $("$DCT" --version | tr '\n' ' ')"
  echo
  echo "## In-memory codec, block 8 (GB/s of uncompressed input; batches of 25-32 MB)"
  "$BUILD/bench/dctchop_bench" --benchmark_counters_tabular=true --benchmark_min_time=0.5 \
    --benchmark_out="$RESULTS/bench-cpu-$STAMP.json" --benchmark_out_format=json 2>&1 |
    grep -E "^(BM_|Benchmark|---)" || true
  echo
  echo "## CPU loader: images/s and GB/s of batch data from archive_loader::next() (60000 u8"
  echo "## 28x28 in batches of 128; 256 u8 256x256x3 in batches of 16; chop 4; prefetch 2;"
  echo "## decode_threads 0: stored coefficients, no decode)"
  "$BUILD/bench/dctchop_loader_bench" --benchmark_counters_tabular=true 2>&1 |
    grep -E "^(BM_|Benchmark|---)" || true
  echo
  echo "## Deflated .npz member (np.savez_compressed of the 256x256x3 images below): GB/s of"
  echo "## inflated bytes read on one thread, CRC-32 included, by each inflater built in"
  /usr/bin/python3 -c "import numpy as np, sys; np.savez_compressed(sys.argv[1], x=np.load(sys.argv[2]))" \
    "$DATA/images_deflated.npz" "$DATA/images_256x256x3_u8.npy"
  DCTCHOP_BENCH_NPZ="$DATA/images_deflated.npz" "$BUILD/bench/dctchop_formats_bench" \
    --benchmark_filter=npz --benchmark_counters_tabular=true 2>&1 | grep -E "^(BM_|Benchmark|---)" || true
  echo
  echo "## Reads of a .npy's rows from /dev/shm split over 1-8 threads, and writes through"
  echo "## output_file (direct I/O asked for or not): GB/s"
  "$BUILD/bench/dctchop_formats_bench" --benchmark_filter='npy_read|output_write' \
    --benchmark_counters_tabular=true 2>&1 | grep -E "^(BM_|Benchmark|---)" || true
  echo
  echo "## Parsing an archive footer of N chunk entries (every reader, at open): linear in N"
  "$BUILD/bench/dctchop_formats_bench" --benchmark_filter=footer 2>&1 |
    grep -E "^(BM_|Benchmark|---)" || true
  echo
  echo "## CLI on generated data (256 images of 256x256x3 u8, 48 MiB; 64 fields of 512x512 f32,"
  echo "## 64 MiB; Fashion-MNIST test set, 10000x28x28 u8, 7.5 MiB, when installed)"
  echo "## ratio (archive bytes included), PSNR, end-to-end GB/s (best of 3; files on"
  echo "## local disk, output fsync'd; default threads: the codec on every core)"
  printf "%-28s %5s %6s %8s %9s %10s %12s %12s\n" input chop coeff ratio bits/val "PSNR dB" \
    "compress GB/s" "decompress GB/s"
  INPUTS=("$DATA/images_256x256x3_u8.npy" "$DATA/fields_512x512_f32.npy")
  if [ -f "$DATA/fashion_mnist_t10k_u8.npy" ]; then INPUTS+=("$DATA/fashion_mnist_t10k_u8.npy"); fi
  for IN in "${INPUTS[@]}"; do
    for K in 1 2 4 6; do
      J="$("$DCT" compress "$IN" -o "$DATA/b.dcz" --chop "$K" -f --json)"
      T=""; D=""
      for _ in 1 2 3; do  # best of three: the files are small enough for noise to matter
        T="$T $("$DCT" compress "$IN" -o "$DATA/b.dcz" --chop "$K" -f --json --no-quality | tr -d '\n')"
        D="$D $("$DCT" decompress "$DATA/b.dcz" -o "$DATA/b.npy" -f --json | tr -d '\n')"
      done
      /usr/bin/python3 - "$IN" "$K" "$J" "$T" "$D" <<'PY'
import json, os, sys
name, k, j, t, d = sys.argv[1:]
j = json.loads(j)
dec = json.JSONDecoder()
def best(text):
    text, out = text.strip(), []
    while text:
        obj, end = dec.raw_decode(text)
        out.append(obj["throughput_gbps"])
        text = text[end:].strip()
    return max(out)
print("%-28s %5s %6s %8.2f %9.3f %10.2f %12.2f %12.2f" % (
    os.path.basename(name), k, j["coeff"], j["ratio"], j["bits_per_value"],
    j["quality"]["psnr_db"], best(t), best(d)))
PY
    done
  done
} | tee "$OUT"
echo "wrote $OUT"
