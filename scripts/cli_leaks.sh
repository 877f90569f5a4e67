#!/usr/bin/env bash
# The command's leak check: every command of an AddressSanitizer build of dctchop (DCTCHOP),
# on the bundled sample data, down its usual paths and its error paths (bad options, missing,
# damaged and newer-format inputs, an existing output, a failed gate, differing labels), with
# LeakSanitizer's check at exit on. Each run must exit with the code the README documents and
# print no sanitizer report. scripts/test.sh runs it after the ASan stage's unit tests, whose
# commands run without that check (45 ms of each of some 1,500 starts).
# Usage: scripts/cli_leaks.sh DCTCHOP
set -euo pipefail
usage() {
  cat <<'EOF'
Usage: scripts/cli_leaks.sh DCTCHOP
Runs DCTCHOP (a dctchop built with -fsanitize=address) over the sample data with leak checks
on; fails on a sanitizer report or an exit code other than the documented one.
  -h, --help   this text
EOF
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") echo "cli_leaks.sh: DCTCHOP is missing" >&2; usage >&2; exit 2 ;;
esac
if [ $# -ne 1 ]; then echo "cli_leaks.sh: one argument, DCTCHOP" >&2; usage >&2; exit 2; fi
bin="$(realpath -- "$1")"
samples="$(realpath -- "$(dirname "$0")/../sample_data")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
cp "$samples/images_u8_nhwc.npy" "$samples/labels.npy" "$samples/fields_f32.npy" .
cp "$samples"/archives/broken/*.dcz "$samples/npz/mnist_like_compressed.npz" .
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

failed=0
runs=0
# check CODE SHELL-COMMAND: DCTCHOP in the command is the binary.
check() {
  local want="$1" cmd="${2//DCTCHOP/$bin}" rc=0
  runs=$((runs + 1))
  bash -c "$cmd" > out.txt 2> err.txt || rc=$?
  if [ "$rc" -ne "$want" ] || grep -q "Sanitizer" err.txt; then
    failed=1
    echo "cli_leaks.sh: exit $rc (want $want): $2" >&2
    cat err.txt >&2
  fi
}
check 0 "DCTCHOP compress images_u8_nhwc.npy -o a.dcz --labels labels.npy"
check 0 "DCTCHOP verify a.dcz --against images_u8_nhwc.npy --labels labels.npy --min-psnr 20"
check 8 "DCTCHOP verify a.dcz --against images_u8_nhwc.npy --min-psnr 99 --json"
check 9 "DCTCHOP verify a.dcz --against fields_f32.npy"
check 0 "DCTCHOP decompress a.dcz -o o.npy --labels-out l.npy"
check 0 "DCTCHOP decompress a.dcz -o o.h5:/train/images && DCTCHOP decompress a.dcz -o o.npz"
check 0 "DCTCHOP compress o.h5:/train/images --labels o.h5 -o h.dcz"
check 0 "DCTCHOP compress mnist_like_compressed.npz:x_train --labels mnist_like_compressed.npz -o z.dcz"
check 0 "DCTCHOP eval images_u8_nhwc.npy --chop 1,4 --coeff f16,bf16 --csv"
check 0 "DCTCHOP compress images_u8_nhwc.npy -o t.dcz --psnr 35"
check 0 "DCTCHOP compress fields_f32.npy -o fields.dcz --chop 6 && DCTCHOP eval fields_f32.npy"
check 0 "DCTCHOP info a.dcz && DCTCHOP info a.dcz fields.dcz --json"
check 0 "cat images_u8_nhwc.npy | DCTCHOP compress - -o - | DCTCHOP decompress - -o - > p.npy"
check 9 "DCTCHOP verify a.dcz --against o.npy --labels fields_f32.npy"
check 2 "DCTCHOP compress images_u8_nhwc.npy -o x.dcz --chop 9"
check 2 "DCTCHOP frobnicate"
check 3 "DCTCHOP info bad_magic.dcz"
check 3 "DCTCHOP info version_2.dcz"
check 4 "DCTCHOP verify flipped_chunk.dcz"
check 4 "DCTCHOP decompress truncated.dcz -o t.npy"
check 4 "cat flipped_chunk.dcz | DCTCHOP decompress - -o - > /dev/null"
check 5 "DCTCHOP compress missing.npy -o m.dcz"
check 6 "DCTCHOP compress images_u8_nhwc.npy -o a.dcz"
check 3 "DCTCHOP compress a.dcz -o n.dcz"
echo "cli_leaks.sh: $runs runs of $bin: $([ "$failed" = 0 ] && echo "no leaks" || echo FAILED)"
exit "$failed"
