#!/usr/bin/env bash
# What bounds the CUDA kernels: Nsight Compute (ncu) on one launch of each of a few GPU
# benchmarks (bench/bench_cuda.cpp), from the bundle of `scripts/gpu-check.sh --bundle`, on a
# GPU machine that has ncu (the CUDA toolkit's). The benchmarks' figures say how fast; this
# says why: the share of the memory's and the SMs' peak each kernel reaches, its stall reasons,
# occupancy and registers.
#
#   scripts/gpu-profile.sh OUTDIR     writes OUTDIR/profile.txt (and says where ncu is not)
#
# Each benchmark runs in its own ncu process, which profiles the 4th launch of its kernel
# (after the benchmark's 3 untimed runs) and lets the others run. At most 60 s each.
set -uo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") echo "gpu-profile.sh: OUTDIR is required" >&2; exit 2 ;;
esac
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd)
cd "$(dirname "$0")/.." || exit 2
if [ -f gpu-bundle.tar.xz ]; then
  rm -rf gpu-bundle
  tar -xJf gpu-bundle.tar.xz ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall()' gpu-bundle.tar.xz
fi
REPORT="$OUT/profile.txt"
NCU=$(command -v ncu 2>/dev/null ||
  ls -d /usr/local/cuda/bin/ncu /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu \
    /usr/local/cuda*/nsight-compute*/ncu 2>/dev/null | head -1)
{ date -u +%Y-%m-%dT%H:%MZ
  echo "bundle: $(cat gpu-bundle/STAMP 2>/dev/null || echo none)"
  nvidia-smi -L 2>&1 | head -2
  echo "ncu: ${NCU:-not found}"
  [ -n "$NCU" ] && "$NCU" --version 2>&1 | tail -1; } | tee "$REPORT"
if [ -z "$NCU" ] || [ ! -x gpu-bundle/dctchop_gpu_bench ]; then
  echo "nothing to profile with (ncu or the bundle missing)" | tee -a "$REPORT"
  exit 1
fi
export LD_LIBRARY_PATH="$PWD/gpu-bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FAILED=0
# benchmark (a regular expression of one) and the kernels it times
for run in \
  "BM_device_decode_u8_256x256x3/chop:1/ decode_columns_kernel" \
  "BM_device_decode_u8_256x256x3/chop:4/ decode_columns_kernel" \
  "BM_device_decode_f32_512x512/chop:1/ decode_columns_kernel" \
  "BM_device_encode_u8_256x256x3/chop:4/ encode_rows_kernel" \
  "BM_device_encode_blocks_u8_256x256x3/chop:4/ encode_kernel"; do
  set -- $run
  echo "== $1 ($2)" | tee -a "$REPORT"
  timeout -k 5 60 "$NCU" --kernel-name "regex:^$2" --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    gpu-bundle/dctchop_gpu_bench --benchmark_filter="$1" >>"$REPORT" 2>&1 ||
    { echo "ncu exit $? for $1" | tee -a "$REPORT"; FAILED=1; }
done
grep -E "^== |Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slots Busy|L1/TEX Hit|ERR" "$REPORT" | head -80
exit $FAILED
