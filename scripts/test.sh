#!/usr/bin/env bash
# Builds dctchop and runs the whole test suite (GoogleTest, Python clients, the fuzz corpus
# replays, under ctest), then:
#  - the same suite again in an AddressSanitizer + UndefinedBehaviorSanitizer build (leaks
#    and float-to-integer overflow included; CPU only, without the Python module and the
#    benchmarks);
#  - the tests of the threaded code (loaders, accelerator feeds, chunk pipeline, direct
#    writer) in a ThreadSanitizer build (without OpenMP, whose runtime TSan cannot see into).
# Usage: scripts/test.sh [build-dir]      (default: build; the sanitizer builds go to
#        <build-dir>-asan and <build-dir>-tsan). DCTCHOP_NO_SANITIZERS=1 skips both (about
#        8 minutes on 2 cores).
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
  SAN="-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer"
  SAN="$SAN -fno-sanitize-recover=undefined,float-cast-overflow"
  cmake -S . -B "$ASAN" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCTCHOP_WITH_CUDA=OFF \
    -DDCTCHOP_BUILD_BENCHMARKS=OFF -DDCTCHOP_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS="$SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN"
  cmake --build "$ASAN" -j"$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$ASAN" --output-on-failure -j"$JOBS"

  TSAN="$BUILD-tsan"
  GEN=()
  if command -v ninja >/dev/null 2>&1 && [ ! -f "$TSAN/Makefile" ]; then GEN=(-G Ninja); fi
  SAN="-fsanitize=thread -fno-omit-frame-pointer"
  cmake -S . -B "$TSAN" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCTCHOP_WITH_CUDA=OFF \
    -DDCTCHOP_WITH_OPENMP=OFF -DDCTCHOP_BUILD_BENCHMARKS=OFF -DDCTCHOP_BUILD_PYTHON=OFF \
    -DDCTCHOP_THREAD_TESTS_ONLY=ON -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
    -DCMAKE_SHARED_LINKER_FLAGS="$SAN"
  cmake --build "$TSAN" -j"$JOBS" --target dctchop_tests
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$TSAN/tests/dctchop_tests"
fi
