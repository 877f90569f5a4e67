#!/usr/bin/env bash
# Builds dctchop and runs the whole test suite (GoogleTest, Python clients, under ctest), then
# the same suite again in an AddressSanitizer + UndefinedBehaviorSanitizer build (leaks
# included; CPU only, without the Python module and the benchmarks).
# Usage: scripts/test.sh [build-dir]      (default: build; the sanitizer build goes to
#        <build-dir>-asan). DCTCHOP_NO_SANITIZERS=1 skips the second pass (about 6 minutes
#        on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
JOBS="${DCTCHOP_JOBS:-2}"
GEN=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD/Makefile" ]; then GEN=(-G Ninja); fi
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j"$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS"

if [ "${DCTCHOP_NO_SANITIZERS:-0}" != "1" ]; then
  ASAN="$BUILD-asan"
  GEN=()
  if command -v ninja >/dev/null 2>&1 && [ ! -f "$ASAN/Makefile" ]; then GEN=(-G Ninja); fi
  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  cmake -S . -B "$ASAN" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCTCHOP_WITH_CUDA=OFF \
    -DDCTCHOP_BUILD_BENCHMARKS=OFF -DDCTCHOP_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS="$SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN"
  cmake --build "$ASAN" -j"$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$ASAN" --output-on-failure -j"$JOBS"
fi
