#!/usr/bin/env bash
# ctest cmake_consumer: install the build into a fresh prefix, then configure, build and run
# tests/consumer against it. A dependency that the installed dctchopConfig.cmake forgets to
# find (a static library's private link dependencies travel with it) fails here.
# Usage: run.sh BUILD_DIR CONSUMER_SOURCE WORK_DIR SAMPLE.npy GENERATOR
set -euo pipefail
BUILD="$1" SRC="$2" WORK="$3" SAMPLE="$4" GEN="$5"
rm -rf "$WORK"
mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log"
cmake -S "$SRC" -B "$WORK/build" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" > "$WORK/configure.log" || { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/build"
"$WORK/build/consumer" "$SAMPLE" "$WORK"
# A component that is not one of the targets fails the configure, naming it.
mkdir -p "$WORK/unknown"
cat > "$WORK/unknown/CMakeLists.txt" <<'EOF_CMAKE'
cmake_minimum_required(VERSION 3.20)
project(dctchop_unknown_component LANGUAGES CXX)
find_package(dctchop REQUIRED COMPONENTS nosuch formats nothere)
EOF_CMAKE
if cmake -S "$WORK/unknown" -B "$WORK/unknown/build" -G "$GEN" \
    -DCMAKE_PREFIX_PATH="$WORK/prefix" > "$WORK/unknown.log" 2>&1; then
  echo "find_package(dctchop COMPONENTS nosuch) was found"; exit 1
fi
grep -q "no component nosuch, nothere:" "$WORK/unknown.log" ||
  { cat "$WORK/unknown.log"; echo "the unknown components are not named"; exit 1; }
