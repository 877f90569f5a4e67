#!/usr/bin/env bash
# Runs one libFuzzer target for a number of minutes, with AddressSanitizer and
# UndefinedBehaviorSanitizer, starting from the committed corpus.
# Usage: scripts/fuzz.sh TARGET MINUTES [extra libFuzzer flags...]
#   TARGET: archive | npy | archive_header | npz | hdf5_chunk   (tests/fuzz/fuzz_TARGET.cpp)
# Builds build-fuzz/ with Debian's clang (setup.sh installs clang and libclang-rt-dev).
# New corpus entries go to build-fuzz/corpus/TARGET (not committed: copy the interesting ones
# to tests/fuzz/corpus/TARGET); crashes, leaks and timeouts to build-fuzz/findings/TARGET/.
# The last lines printed are the run's figures: executions, corpus size, findings.
# Relative paths in the extra flags are taken from the repository root.
set -euo pipefail
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if [ $# -lt 2 ]; then
  echo "fuzz.sh: TARGET and MINUTES are required" >&2
  usage >&2
  exit 2
fi
TARGET="$1"
MINUTES="$2"
shift 2
case "$TARGET" in archive|npy|archive_header|npz|hdf5_chunk) ;; *)
  echo "fuzz.sh: unknown target '$TARGET' (archive, npy, archive_header, npz, hdf5_chunk)" >&2; exit 2 ;;
esac
# Before the build: libFuzzer takes -max_total_time=0 (or less) as no limit at all.
if ! [[ "$MINUTES" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: MINUTES must be a positive whole number, not '$MINUTES'" >&2; exit 2
fi
cd "$(dirname "$0")/.."
BUILD=build-fuzz
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -g -O1"
SAN="$SAN -fno-omit-frame-pointer -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION"
GEN=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD/Makefile" ]; then GEN=(-G Ninja); fi
CC=clang CXX=clang++ cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDCTCHOP_FUZZ=ON -DDCTCHOP_BUILD_TESTS=OFF -DDCTCHOP_BUILD_BENCHMARKS=OFF \
  -DDCTCHOP_BUILD_PYTHON=OFF -DDCTCHOP_WITH_CUDA=OFF -DDCTCHOP_WITH_OPENMP=OFF \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$BUILD" -j"${DCTCHOP_JOBS:-2}" --target "fuzz_$TARGET"

CORPUS="$BUILD/corpus/$TARGET"
FINDINGS="$BUILD/findings/$TARGET"
mkdir -p "$CORPUS" "$FINDINGS"
LOG="$BUILD/fuzz-$TARGET.log"
# -max_len: the stream half of the archive and NPY targets takes inputs up to a pipe's 64 KiB.
# -rss_limit_mb / -malloc_limit_mb: an allocation the input asks for above 1 GiB is a finding.
set +e
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1 \
  "$BUILD/tests/fuzz/fuzz_$TARGET" "$CORPUS" "tests/fuzz/corpus/$TARGET" \
  -max_total_time=$((MINUTES * 60)) -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=1024 -artifact_prefix="$FINDINGS/" -print_final_stats=1 "$@" 2>"$LOG"
RC=$?
set -e
tail -n 40 "$LOG" | grep -E '^(stat::|Done|==|SUMMARY|artifact_prefix|Test unit written)' || true
FOUND=$(find "$FINDINGS" -type f | wc -l)
echo "fuzz.sh: target $TARGET, $MINUTES min, exit $RC, corpus $(find "$CORPUS" -type f | wc -l)" \
     "entries, findings in $FINDINGS: $FOUND (log: $LOG)"
exit $RC
