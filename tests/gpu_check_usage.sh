#!/usr/bin/env bash
# scripts/gpu-check.sh and scripts/gpu-profile.sh refuse a mistyped call before building or
# unpacking anything (device time is scarce: a wrong call must cost nothing), and say how to
# call them. Usage: gpu_check_usage.sh REPO
set -u
repo=$1
fails=0
expect() {  # expect CODE TEXT COMMAND...: exit status CODE, and TEXT in its output
  local code=$1 text=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$code" ] || ! printf '%s' "$out" | grep -qF -- "$text"; then
    echo "FAILED: $* gave $rc (want $code) and output without '$text':"
    printf '%s\n' "$out" | head -5
    fails=1
  fi
}
expect 0 "--profile OUTDIR" "$repo/scripts/gpu-check.sh" --help
expect 2 "OUTDIR or --bundle is required" "$repo/scripts/gpu-check.sh"
expect 2 "--profile needs OUTDIR" "$repo/scripts/gpu-check.sh" --profile
expect 2 "--profile takes OUTDIR, not --bundle" "$repo/scripts/gpu-check.sh" --profile --bundle
expect 2 "too many arguments" "$repo/scripts/gpu-check.sh" --profile a b
expect 2 "unknown option '--bogus'" "$repo/scripts/gpu-check.sh" --bogus
expect 2 "OUTDIR is required" "$repo/scripts/gpu-profile.sh"
expect 0 "gpu-check.sh --profile OUTDIR" "$repo/scripts/gpu-profile.sh" --help
exit $fails
