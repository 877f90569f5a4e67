#!/usr/bin/env bash
# Builds dctchop and runs the whole test suite (GoogleTest under ctest).
# Usage: scripts/test.sh [build-dir]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
GEN=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD/Makefile" ]; then GEN=(-G Ninja); fi
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j"${DCTCHOP_JOBS:-2}"
ctest --test-dir "$BUILD" --output-on-failure -j"${DCTCHOP_JOBS:-2}"
