#!/usr/bin/env bash
# What bounds the CUDA kernels: Nsight Compute (ncu) on one launch of each of a few GPU
# benchmarks (bench/bench_cuda.cpp), from the bundle of `scripts/gpu-check.sh --bundle` (its
# stamp checked as for the checks) or a CUDA build, on a GPU machine that has ncu (the CUDA
# toolkit's). The benchmarks' figures say how fast; this says why.
#
#   scripts/gpu-profile.sh OUTDIR     writes OUTDIR/profile.txt (and says where ncu is not)
#
# The same as `scripts/gpu-check.sh --profile OUTDIR`, which holds the bundle handling.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") echo "gpu-profile.sh: OUTDIR is required" >&2; exit 2 ;;
esac
exec "$(dirname "$0")/gpu-check.sh" --profile "$@"
