#!/usr/bin/env bash
# The GPU checks of issue 5 in one command: build with CUDA, run the GPU tests (ctest label
# "gpu"), the GPU benchmark (bench/bench_cuda.cpp) and its summary against the targets
# (scripts/gpu_summary.py), and an end-to-end CLI run on a 4 GiB file with --backend cuda
# against --backend cpu. Results go to OUTDIR (six files; gpu-build.txt too where it builds).
#
#   scripts/gpu-check.sh OUTDIR      on a machine with an NVIDIA GPU and the build dependencies
#   scripts/gpu-check.sh --bundle    here: build for sm_90 and gather the programs and the
#                                    shared libraries they need into gpu-bundle/, and pack it
#                                    as gpu-bundle.tar.xz, for a GPU machine that has CUDA but
#                                    not dctchop's Debian packages; OUTDIR runs then unpack and
#                                    use it instead of building.
#   scripts/gpu-check.sh --profile OUTDIR   instead of the checks, what bounds the kernels:
#                                    Nsight Compute on a few benchmarks (scripts/gpu-profile.sh).
# Sized to finish in under 8 minutes on an H200 machine (16 cores): every step ends by a
# deadline 450 s after the start. Exits 1 if any check failed (or the bundle is stale), after
# running all of them. DCTCHOP_GPU_CHECK_IMAGES=200 shrinks the end-to-end file
# for a dry run of the script itself (on a machine without a GPU every GPU check fails).
# Rebuild the bundle right before a device run, and name gpu-bundle.tar.xz in the device tool's
# carry list (it is git-ignored). Packed, it is about 26 MB; the folder, about 53 MB, is too
# large for the tool's 64 MiB of carried files (three programs each hold the CUDA kernels).
# Its CUDA runtime is the toolkit's here (13.0): the GPU machine's driver must support that
# CUDA version (branch 580 or later for CUDA 13); gpu.txt says so first where it does not.
set -euo pipefail
usage() {
  cat <<'EOF'
Usage: scripts/gpu-check.sh OUTDIR     build with CUDA (or unpack gpu-bundle.tar.xz), run the GPU
                                       tests, benchmark, summary and end-to-end run; results
                                       in OUTDIR (a relative path is taken from the current
                                       folder). Exits 1 if any check failed.
       scripts/gpu-check.sh --bundle   build for sm_90 (CUDA_ARCH=NN for another) and pack
                                       gpu-bundle.tar.xz in the repository, for a GPU machine
                                       without dctchop's Debian packages
       scripts/gpu-check.sh --profile OUTDIR
                                       the same build or bundle, then Nsight Compute (ncu) on
                                       one launch of each of five benchmarks' kernels instead
                                       of the checks: OUTDIR/profile.txt, about 30 s
       scripts/gpu-check.sh -h|--help  this text
Environment: DCTCHOP_GPU_CHECK_IMAGES=N images of 256x256x3 in the end-to-end file (default
22000; fewer for a dry run), DCTCHOP_GPU_CHECK_SECONDS=S the script's deadline (default 450),
DCTCHOP_GPU_CHECK_OWN_LIBC=1 runs the bundle with its own C library, TMPDIR (where the
end-to-end files go when /dev/shm lacks room).
EOF
}
# Everything is checked before anything is built: a mistyped call must not cost a build.
bad() { echo "gpu-check.sh: $1" >&2; usage >&2; exit 2; }
PROFILE=0
if [ "${1:-}" = --profile ]; then
  PROFILE=1
  shift
  [ $# -ge 1 ] || bad "--profile needs OUTDIR"
fi
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --bundle) [ "$PROFILE" = 0 ] || bad "--profile takes OUTDIR, not --bundle" ;;
  "") if [ $# -eq 0 ]; then bad "OUTDIR or --bundle is required"; else bad "OUTDIR is empty"; fi ;;
  -*) bad "unknown option '$1'" ;;
esac
[ $# -le 1 ] || bad "too many arguments ($#; one: OUTDIR or --bundle)"
if [ "$1" != --bundle ]; then  # (--bundle reads neither)
  [[ "${DCTCHOP_GPU_CHECK_IMAGES:-22000}" =~ ^(0|[1-9][0-9]*)$ ]] ||
    bad "DCTCHOP_GPU_CHECK_IMAGES must be a whole number of images, not '$DCTCHOP_GPU_CHECK_IMAGES'"
  [[ "${DCTCHOP_GPU_CHECK_SECONDS:-450}" =~ ^[1-9][0-9]*$ ]] ||
    bad "DCTCHOP_GPU_CHECK_SECONDS must be a positive whole number, not '$DCTCHOP_GPU_CHECK_SECONDS'"
fi
# OUTDIR is the caller's: made absolute before the cd into the repository (by hand where the
# GPU machine has no GNU realpath).
case "$1" in
  --bundle|/*) OUT="$1" ;;
  *) OUT="$(realpath -m -- "$1" 2>/dev/null || printf '%s/%s\n' "$PWD" "$1")" ;;
esac
cd "$(dirname "$0")/.."
BUILD=build-gpu
BUNDLE=gpu-bundle
# The checks must be of this tree's code: a bundle built before the last change would report
# on old code. The stamp hashes the sources of the three programs (no git needed on the GPU
# machine; the device tool copies the tree without what .gitignore names, so neither does
# this): not the Python binding, Python tests or documents, which a later edit may change
# without making the bundle stale.
source_files() {
  find CMakeLists.txt cmake apps lib formats bench tests -type f -not -name '*.pyc' \
    -not -name '*.py' -not -name '*.md' -not -path 'lib/python/*' -not -path 'tests/python/*' \
    -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
}
source_stamp() { source_files | sha256sum | cut -c1-16; }

if [ "$1" = "--bundle" ]; then
  # Taken before the build: a source edited while it runs makes the bundle stale, not stamped.
  files=$(source_files)
  stamp=$(printf '%s\n' "$files" | sha256sum | cut -c1-16)
  # (DCTCHOP_CUDA_FAST_COMPILE off: kernels built for speed, whatever a folder had before.)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCTCHOP_WITH_CUDA=ON \
    -DDCTCHOP_CUDA_FAST_COMPILE=OFF -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >/dev/null
  cmake --build "$BUILD" -j2 --target dctchop_cli dctchop_gpu_tests dctchop_gpu_bench \
    dctchop_formats_bench
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/lib" "$BUNDLE/libc"
  cp "$BUILD/apps/dctchop" "$BUILD/tests/dctchop_gpu_tests" "$BUILD/bench/dctchop_gpu_bench" \
    "$BUILD/bench/dctchop_formats_bench" "$BUNDLE/"
  # Shared libraries from Debian packages (HDF5, spdlog, fmt, xxHash, Google Benchmark...) and
  # the CUDA runtime go to lib/. The C library and the C++ runtime go to libc/, used only where
  # the GPU machine's own are too old (see below). The driver (libcuda) is the machine's, and
  # cuBLAS (hundreds of MB, loaded at run time) too.
  for b in "$BUNDLE"/dctchop "$BUNDLE"/dctchop_gpu_tests "$BUNDLE"/dctchop_gpu_bench \
           "$BUNDLE"/dctchop_formats_bench; do
    ldd "$b" | awk '/=> \// {print $3}' | grep -vE 'libcuda\.so|libcublas' | while read -r lib; do
      if echo "$lib" | grep -qE '/(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+)\.so'; then
        cp -Lu "$lib" "$BUNDLE/libc/"
      else
        cp -Lu "$lib" "$BUNDLE/lib/"
      fi
    done
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$BUNDLE/libc/"
  echo "$stamp" > "$BUNDLE/STAMP"
  printf '%s\n' "$files" > "$BUNDLE/SOURCES"  # (which files differ, when it is stale)
  # The CUDA major version, whose cuBLAS (libcublas.so.MAJOR) dctchop loads at run time.
  /usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' > "$BUNDLE/CUBLAS_MAJOR"
  tar -cJf "$BUNDLE.tar.xz.part" "$BUNDLE" && mv "$BUNDLE.tar.xz.part" "$BUNDLE.tar.xz"
  du -sh "$BUNDLE" "$BUNDLE.tar.xz"
  exit 0
fi

mkdir -p "$OUT"
# One deadline for the whole script, under the device tool's 600 s per command: every step's
# own limit is cut to what is left of it, so that a hang late in the run still leaves the
# results of the steps before it (DCTCHOP_GPU_CHECK_SECONDS changes it).
DEADLINE=$((SECONDS + ${DCTCHOP_GPU_CHECK_SECONDS:-450}))
limit() {  # limit N: N seconds, or what is left before the deadline if that is less (>= 1)
  local left=$((DEADLINE - SECONDS))
  left=$(($1 < left ? $1 : left))
  echo $((left < 1 ? 1 : left))
}
# The toolkit's libraries (cudart; cuBLAS, which dctchop loads when the GEMM decode runs).
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# On a GPU machine a skipped GPU test is a failure (a broken driver or build would hide).
export DCTCHOP_REQUIRE_GPU=1
FAILED=0
if [ -f "$BUNDLE.tar.xz" ]; then  # the packed bundle wins over a folder left by an earlier run
  rm -rf "$BUNDLE"
  # Python's tarfile where the machine has no xz program.
  tar -xJf "$BUNDLE.tar.xz" 2>>"$OUT/gpu.txt" ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall()' "$BUNDLE.tar.xz"
fi
# cuBLAS: the toolkit's, else one that a Python package brought (PyTorch's wheels carry it).
# The major version dctchop was built against (it loads libcublas.so.MAJOR, or libcublas.so;
# the bundle records it): another major version's library is of no use to it.
major=$(cat "$BUNDLE/CUBLAS_MAJOR" 2>/dev/null || echo 13)
if ! ls /usr/local/cuda/lib64/libcublas.so."$major"* >/dev/null 2>&1; then
  found=$(timeout -k 5 "$(limit 30)" find /usr /opt -name 'libcublas.so.*' -not -path '*/proc/*' 2>/dev/null |
    awk -v want="libcublas.so.$major" '{ n = $0; sub(/.*\//, "", n) }
      index(n, want) == 1 { print; found = 1; exit } NR == 1 { first = $0 }
      END { if (!found && first != "") print first }' || true)
  [ -n "$found" ] && export LD_LIBRARY_PATH="$(dirname "$found"):$LD_LIBRARY_PATH"
  case "$(basename "${found:-none}")" in
    libcublas.so."$major"*) echo "cuBLAS: $found" ;;
    none) echo "cuBLAS: libcublas.so.$major not found (the GEMM decode will fail)" ;;
    *) echo "cuBLAS: only $found, not libcublas.so.$major (the GEMM decode will fail)" ;;
  esac | tee -a "$OUT/gpu.txt"
fi
if [ -x "$BUNDLE/dctchop_gpu_tests" ]; then
  stamp=$(source_stamp)
  if [ "$(cat "$BUNDLE/STAMP" 2>/dev/null)" = "$stamp" ]; then
    echo "bundle built from these sources ($stamp)" | tee -a "$OUT/gpu.txt"
  else
    { echo "STALE BUNDLE: built from sources $(cat "$BUNDLE/STAMP" 2>/dev/null || echo unknown)," \
        "this tree is $stamp; its results are of other code (rebuild with --bundle). Differ:"
      source_files | diff "$BUNDLE/SOURCES" - 2>/dev/null | sed -n 's/^[<>] [0-9a-f]*  //p' |
        sort -u | head -20 || true; } | tee -a "$OUT/gpu.txt"
    FAILED=1
  fi
  # The bundled Debian libraries go to the bundle's programs only, not to python3, awk and
  # the other tools of this machine, which may need newer ones.
  BUNDLE_LIBS="$PWD/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  RUN=(env "LD_LIBRARY_PATH=$BUNDLE_LIBS")
  # DCTCHOP_GPU_CHECK_OWN_LIBC=1 takes the bundled C library anyway (to try that path here).
  if [ -n "${DCTCHOP_GPU_CHECK_OWN_LIBC:-}" ] || ! timeout -k 5 "$(limit 20)" "${RUN[@]}" "$BUNDLE/dctchop" --version >/dev/null 2>&1; then
    # Built against a newer C library than this machine's: run it with the bundled one.
    { echo "the bundle does not run with this machine's C library:"
      timeout -k 5 "$(limit 20)" "${RUN[@]}" "$BUNDLE/dctchop" --version 2>&1 | head -3 || true
      echo "running it with the bundled C library instead"; } | tee -a "$OUT/gpu.txt"
    RUN=("$PWD/$BUNDLE/libc/ld-linux-x86-64.so.2" --library-path "$PWD/$BUNDLE/libc:$BUNDLE_LIBS")
  fi
  TESTS=("${RUN[@]}" "$BUNDLE/dctchop_gpu_tests")
  BENCH=("${RUN[@]}" "$BUNDLE/dctchop_gpu_bench")
  DCT=("${RUN[@]}" "$BUNDLE/dctchop")
  # (absent from a bundle made before 2026-12-06)
  READS=("${RUN[@]}" "$BUNDLE/dctchop_formats_bench")
  [ -x "$BUNDLE/dctchop_formats_bench" ] || READS=()
else
  # A machine with the build dependencies. One without them (the device tool's, say) fails
  # here with the reason in gpu.txt, not silently: carry gpu-bundle.tar.xz to it instead.
  echo "no gpu-bundle.tar.xz or gpu-bundle/ here: building in $BUILD (log: gpu-build.txt)" |
    tee -a "$OUT/gpu.txt"
  if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDCTCHOP_WITH_CUDA=ON \
           -DDCTCHOP_CUDA_FAST_COMPILE=OFF &&
         cmake --build "$BUILD" -j"$(nproc)"; } >"$OUT/gpu-build.txt" 2>&1; then
    { echo "BUILD FAILED: no checks ran; the end of gpu-build.txt:"
      tail -n 15 "$OUT/gpu-build.txt"; } | tee -a "$OUT/gpu.txt"
    exit 1
  fi
  TESTS=(ctest --test-dir "$BUILD" -L gpu --output-on-failure)
  BENCH=("$BUILD/bench/dctchop_gpu_bench")
  DCT=("$BUILD/apps/dctchop")
  READS=("$BUILD/bench/dctchop_formats_bench")
  [ -x "$BUILD/bench/dctchop_formats_bench" ] || READS=()
fi

if [ "$PROFILE" = 1 ]; then
  # What bounds the kernels: each benchmark in its own ncu process, which profiles the 4th
  # launch of its kernel (after the benchmark's 3 untimed runs) and lets the others run; at
  # most 60 s each. The benchmarks' figures say how fast; this says why: the share of the
  # memory's and the SMs' peak each kernel reaches, its stall reasons, occupancy and registers.
  REPORT="$OUT/profile.txt"
  NCU=$(command -v ncu 2>/dev/null ||
    ls -d /usr/local/cuda/bin/ncu /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu \
      /usr/local/cuda*/nsight-compute*/ncu 2>/dev/null | head -1 || true)
  { date -u +%Y-%m-%dT%H:%MZ
    grep -E "bundle built|STALE" "$OUT/gpu.txt" 2>/dev/null || true
    nvidia-smi -L 2>&1 | head -2 || true
    echo "ncu: ${NCU:-not found}"
    [ -z "$NCU" ] || "$NCU" --version 2>&1 | tail -1; } | tee -a "$REPORT"
  [ -n "$NCU" ] || { echo "nothing to profile with: no ncu here" | tee -a "$REPORT"; exit 1; }
  # benchmark (a regular expression of one) and the kernels it times
  for run in \
    "BM_device_decode_u8_256x256x3/chop:1/ decode_columns_kernel" \
    "BM_device_decode_u8_256x256x3/chop:4/ decode_columns_kernel" \
    "BM_device_decode_f32_512x512/chop:1/ decode_columns_kernel" \
    "BM_device_encode_u8_256x256x3/chop:4/ encode_rows_kernel" \
    "BM_device_encode_blocks_u8_256x256x3/chop:4/ encode_kernel"; do
    set -- $run
    echo "== $1 ($2)" | tee -a "$REPORT"
    timeout -k 5 "$(limit 60)" "$NCU" --kernel-name "regex:^$2" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
      "${BENCH[@]}" --benchmark_filter="$1" >>"$REPORT" 2>&1 ||
      { echo "ncu exit $? for $1" | tee -a "$REPORT"; FAILED=1; }
  done
  grep -E "^== |Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slots Busy|L1/TEX Hit|ERR" "$REPORT" | head -80
  exit "$FAILED"
fi

{
  date -u +%Y-%m-%dT%H:%MZ
  # MIG mode too: on a slice the bandwidth targets do not apply. The plain table's first lines
  # give the CUDA version the driver supports.
  timeout -k 5 "$(limit 20)" nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,mig.mode.current,persistence_mode,pstate --format=csv 2>&1 || true
  timeout -k 5 "$(limit 20)" nvidia-smi 2>&1 | head -12 || true
} | tee -a "$OUT/gpu.txt"
# Does it start at all, and does the driver take the bundle's CUDA runtime?
version=$(timeout -k 5 "$(limit 20)" "${DCT[@]}" --version 2>&1) || FAILED=1
printf '%s\n' "$version" | tee -a "$OUT/gpu.txt"
if printf '%s' "$version" | grep -q InsufficientDriver; then
  echo "NO USABLE DRIVER: none here, or one too old for the CUDA runtime dctchop was built with ($(cat "$BUNDLE/CUBLAS_MAJOR" 2>/dev/null || echo '?').x; CUDA 13 needs branch 580 or later): every GPU check below fails for that reason alone" |
    tee -a "$OUT/gpu.txt"
  FAILED=1
fi
if printf '%s' "$version" | grep -q 'kernels compiled for build speed'; then
  echo "KERNELS BUILT FOR BUILD SPEED (DCTCHOP_CUDA_FAST_COMPILE): the tests stand, the speeds" \
    "do not" | tee -a "$OUT/gpu.txt"
  FAILED=1
fi

echo "== GPU tests" | tee "$OUT/gpu-tests.txt"
# Each step has a time limit, so that a hang (a stream that never completes, say) costs one
# step, not the whole device session; all of them end by the deadline above. A normal run
# takes 2 to 4 minutes. Device time is scarce: after a failure the script goes on.
if [ "${TESTS[0]}" = ctest ]; then
  timeout -k 5 "$(limit 150)" "${TESTS[@]}" 2>&1 | tee -a "$OUT/gpu-tests.txt" || FAILED=1
else
  # One process per test suite, as ctest would run them: a sticky CUDA fault (an illegal
  # address) then spoils its own suite only, and says which. 150 s for all of them, at most
  # 60 s a suite (a hang in one leaves time for the others).
  SUITES=$(timeout -k 5 "$(limit 30)" "${TESTS[@]}" --gtest_list_tests 2>>"$OUT/gpu-tests.txt" | grep -E '^[A-Za-z0-9_]+\.$' | tr -d '.' || true)
  [ -n "$SUITES" ] || { echo "no test suites listed" | tee -a "$OUT/gpu-tests.txt"; FAILED=1; }
  START=$SECONDS
  for suite in $SUITES; do
    left=$(limit $((150 - (SECONDS - START))))
    left=$((left < 60 ? left : 60))
    if [ "$left" -le 5 ]; then
      echo "$suite: NOT RUN (the tests' 150 s are spent)" | tee -a "$OUT/gpu-tests.txt"; FAILED=1
      continue
    fi
    timeout -k 5 "$left" "${TESTS[@]}" --gtest_filter="$suite.*" 2>&1 |
      tee -a "$OUT/gpu-tests.txt" || { echo "$suite: FAILED" | tee -a "$OUT/gpu-tests.txt"; FAILED=1; }
  done
fi

echo "== GPU benchmark" | tee "$OUT/gpu-bench.txt"
# Fixed iteration counts (bench/bench_cuda.cpp): 64 kernel and copy benchmarks in about a
# minute, then 4 of the loader's training ingest (each chop's archive of 4096 images written
# when its first benchmark starts, in /dev/shm where it has room). At most 150 s, and 120 s
# of the deadline kept for the end-to-end run after it.
bench_left=$(( $(limit 150) < DEADLINE - SECONDS - 120 ? $(limit 150) : DEADLINE - SECONDS - 120 ))
timeout -k 5 "$((bench_left < 30 ? 30 : bench_left))" "${BENCH[@]}" --benchmark_counters_tabular=true \
  --benchmark_out="$OUT/gpu-bench.json" --benchmark_out_format=json 2>&1 |
  tee -a "$OUT/gpu-bench.txt" || FAILED=1
# (archives that a benchmark stopped by the time limit left behind)
rm -rf /dev/shm/dctchop-gpu-bench-* "${TMPDIR:-/tmp}"/dctchop-gpu-bench-* 2>/dev/null || true

# Against issue 5's targets, and which kernel layout is faster (the default should be). It
# exits 1 when a benchmark failed: Google Benchmark exits 0 after a SkipWithError.
# Each figure beside the newest recorded run's (scripts/results/gpu-*/, named by date): what
# the changes since did.
# (The newest by the start time that its gpu.txt records, 2026-12-04T13:40Z; OUTDIR itself,
# were it there, is not its own baseline.)
BASELINE=()
last_run="" last_when=""
for f in scripts/results/gpu-*/gpu-bench.json; do
  [ -f "$f" ] || continue
  d=$(dirname "$f")
  [ "$(cd "$d" && pwd -P)" != "$(cd "$OUT" && pwd -P)" ] || continue
  when=$(grep -m1 -E '^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}Z$' "$d/gpu.txt" 2>/dev/null || true)
  [ -n "$when" ] || continue
  if [ -z "$last_when" ] || [[ "$when" > "$last_when" ]]; then
    last_run=$f last_when=$when
  fi
done
[ -z "$last_run" ] || BASELINE=(--baseline "$last_run")
timeout -k 5 "$(limit 30)" python3 scripts/gpu_summary.py ${BASELINE[@]+"${BASELINE[@]}"} \
  "$OUT/gpu-bench.json" > "$OUT/gpu-summary.txt" 2>&1 || FAILED=1
cat "$OUT/gpu-summary.txt"

echo "== end to end: 4 GiB of u8 images, --backend cuda and cpu" | tee "$OUT/gpu-e2e.txt"
# In memory where there is room for the 17 GB of files (the input, two archives, two
# outputs): the figure is then the pipeline's and PCIe's, not the disk's. Said in the output.
WORK="${TMPDIR:-/tmp}/dctchop-gpu-check"
if [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')" -gt $((20 * 1024 * 1024)) ] 2>/dev/null; then
  WORK=/dev/shm/dctchop-gpu-check
fi
mkdir -p "$WORK"
echo "files in $WORK ($(df -P "$WORK" | awk 'NR == 2 {print $1}'))" | tee -a "$OUT/gpu-e2e.txt"
# 22000 images of 256x256x3 = 4.33 GB: offsets past 2^32 in the input, the archives and the
# outputs (fewer: a dry run).
N="${DCTCHOP_GPU_CHECK_IMAGES:-22000}"
# At most 3.5 x the input at once (the input, two decoded copies, one archive of half its
# size; each archive is removed once decoded): fewer images where the space is not there.
free_kb=$(df -Pk "$WORK" | awk 'NR == 2 {print $4}')
fit=$((free_kb * 1024 * 10 / 36 / 196608))
if [ "$fit" -lt "$N" ]; then
  echo "only room for $fit images in $WORK ($((free_kb / 1024 / 1024)) GiB free), not $N" |
    tee -a "$OUT/gpu-e2e.txt"
  N=$fit
fi
E2E=1
# 256 MiB of random bytes, repeated: /dev/urandom alone may take a minute for 4 GB.
make_input() {
  head -c $((256 << 20)) /dev/urandom > "$WORK/seed.raw" &&
    { while cat "$WORK/seed.raw"; do :; done 2>/dev/null | head -c $((N * 196608)) > "$WORK/big.raw"; } &&
    rm -f "$WORK/seed.raw" && [ "$(stat -c %s "$WORK/big.raw")" = $((N * 196608)) ]
}
if [ "$N" -lt 1 ] || ! timeout -k 5 "$(limit 60)" bash -c "$(declare -f make_input); WORK='$WORK' N=$N make_input"; then
  echo "cannot write the input in $WORK: end-to-end run skipped" | tee -a "$OUT/gpu-e2e.txt"
  E2E=0
  FAILED=1
fi
timed() {  # label, command...: wall seconds (no GNU time needed)
  local label="$1"; shift
  local t0 t1 lim
  lim=$(limit 60)
  if [ "$lim" -le 5 ]; then
    echo "$label: NOT RUN (the script's deadline)" | tee -a "$OUT/gpu-e2e.txt"; FAILED=1; return 0
  fi
  t0=$(date +%s.%N)
  local rc=0
  # (its error line goes to gpu-e2e.txt too: the console comes back cut to its end)
  timeout -k 5 "$lim" "$@" 2> >(tee -a "$OUT/gpu-e2e.txt" >&2) || rc=$?
  if [ "$rc" != 0 ]; then
    echo "$label: FAILED (exit $rc$([ "$rc" = 124 ] && echo ': timed out'))" | tee -a "$OUT/gpu-e2e.txt"
    FAILED=1; return 0
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v l="$label" -v n=$((N * 196608)) \
    'BEGIN {printf "%-38s %6.2f s  %6.2f GB/s of uncompressed data\n", l, b - a, n / (b - a) / 1e9}' |
    tee -a "$OUT/gpu-e2e.txt"
}
# Each run below includes the process's start (CUDA's initialisation among it: seconds where
# the driver is not kept loaded, persistence mode off): measured once, to tell apart.
# --help starts no CUDA (the --backend cpu runs neither), --version does (it counts the
# devices), and so does every --backend cuda run.
if [ "$E2E" = 1 ]; then
  for what in --help --version; do
    case $what in
      --version) note="CUDA initialised; the --backend cuda runs start it beside their first chunks" ;;
      *) note="no CUDA, within each time below" ;;
    esac
    t0=$(date +%s.%N)
    if timeout -k 5 "$(limit 30)" "${DCT[@]}" "$what" >/dev/null 2>&1; then
      t1=$(date +%s.%N)
      awk -v a="$t0" -v b="$t1" -v w="$what" -v note="$note" \
        'BEGIN {printf "start-up (dctchop %s, %s): %.2f s\n", w, note, b - a}' |
        tee -a "$OUT/gpu-e2e.txt"
    fi
  done
fi
# --device: the GPU named runs (device 0), and one that is not there is exit 2 saying how many
# there are (the host's CLI tests have no GPU to check this with).
if [ "$E2E" = 1 ]; then
  dev_out=$(timeout -k 5 "$(limit 30)" "${DCT[@]}" compress sample_data/images_u8_nhwc.npy \
    -o "$WORK/dev0.dcz" -f -q --json --backend cuda --device 0 2>&1) && dev_rc=0 || dev_rc=$?
  if [ "$dev_rc" = 0 ] && printf '%s' "$dev_out" | grep -q '"backend": "cuda"' &&
     printf '%s' "$dev_out" | grep -q '"device": 0'; then
    echo "--device 0: ran on the GPU, which --json names" | tee -a "$OUT/gpu-e2e.txt"
  else
    { echo "FAILED: --device 0 --backend cuda (exit $dev_rc):"; printf '%s\n' "$dev_out" | tail -3; } |
      tee -a "$OUT/gpu-e2e.txt"
    FAILED=1
  fi
  dev_out=$(timeout -k 5 "$(limit 30)" "${DCT[@]}" compress sample_data/images_u8_nhwc.npy \
    -o "$WORK/dev1.dcz" -f -q --device 4096 2>&1) && dev_rc=0 || dev_rc=$?
  if [ "$dev_rc" = 2 ] && printf '%s' "$dev_out" | grep -q 'CUDA device 4096 is not there' &&
     [ ! -e "$WORK/dev1.dcz" ]; then
    echo "--device 4096: exit 2, $(printf '%s' "$dev_out" | sed -n 's/.*is not there: //p' | head -1)" |
      tee -a "$OUT/gpu-e2e.txt"
  else
    { echo "FAILED: --device 4096 gave exit $dev_rc (2 expected, no output):"
      printf '%s\n' "$dev_out" | tail -3; } | tee -a "$OUT/gpu-e2e.txt"
    FAILED=1
  fi
  rm -f "$WORK/dev0.dcz" "$WORK/dev1.dcz"
fi
# The floor that the files set, whatever the backend: reading the input, and copying it
# (reading and writing as much; compress writes half of that at chop 4, decompress all).
if [ "$E2E" = 1 ]; then
  timed "read (cat > /dev/null)" sh -c 'cat "$1" > /dev/null' sh "$WORK/big.raw"
  # (--reflink=never: on btrfs or XFS, GNU cp 9 shares the blocks and copies nothing)
  timed "copy (cp)" sh -c 'cp --reflink=never "$1" "$2" 2>/dev/null || cp "$1" "$2"' sh \
    "$WORK/big.raw" "$WORK/copy.raw"
  rm -f "$WORK/copy.raw"
fi
for be in cuda cpu; do
  [ "$E2E" = 1 ] || break
  timed "compress --backend $be" "${DCT[@]}" compress "$WORK/big.raw" --raw --dtype u8 \
    --shape "$N,256,256,3" -o "$WORK/big-$be.dcz" -f --no-quality -q --backend "$be"
  timed "decompress --backend $be" "${DCT[@]}" decompress "$WORK/big-$be.dcz" -o "$WORK/back-$be.raw" \
    --raw -f -q --backend "$be"
  # The same to stdout, into /dev/null: a pipeline's consumer (a training job) takes the data,
  # not a file system, whose writes bound the run above (cp's floor) for either backend.
  timed "decompress to stdout, $be" sh -c 'exec "$@" > /dev/null' sh \
    "${DCT[@]}" decompress "$WORK/big-$be.dcz" -o - --raw -q --backend "$be"
  rm -f "$WORK/big-$be.dcz"
done
# The same compress with the driver's start waited for before the first chunk is read (as
# before 2026-12-05; DCTCHOP_CUDA_BACKGROUND_START=0): what starting it beside them gains.
if [ "$E2E" = 1 ]; then
  timed "compress --backend cuda, start waited" env DCTCHOP_CUDA_BACKGROUND_START=0 \
    "${DCT[@]}" compress "$WORK/big.raw" --raw --dtype u8 --shape "$N,256,256,3" \
    -o "$WORK/big-w.dcz" -f --no-quality -q --backend cuda
  rm -f "$WORK/big-w.dcz"
  # And with the input read on one thread, as every compress read it before 2026-12-06, the
  # start waited for too (--threads 1 also holds the CPU backend that codes the first chunks
  # while CUDA starts to one thread): against "start waited", what the split reads gain.
  timed "compress --backend cuda, 1 read thread" env DCTCHOP_CUDA_BACKGROUND_START=0 \
    "${DCT[@]}" compress "$WORK/big.raw" --raw --dtype u8 --shape "$N,256,256,3" \
    -o "$WORK/big-r.dcz" -f --no-quality -q --backend cuda --threads 1
  rm -f "$WORK/big-r.dcz"
fi
# compress's default measures PSNR and SSIM on every value: the command users run, where the
# host's arithmetic and not the files may bound it. The CUDA backend decodes and measures u8
# on the device (backend::decode_measured), the CPU backend on the host's cores beside the
# codec's own work. Both must report the same figures, to the last digit of the JSON.
for be in cuda cpu; do
  [ "$E2E" = 1 ] || break
  timed "compress, quality, $be" sh -c 'o=$1; shift; exec "$@" > "$o"' sh "$OUT/quality-$be.json" \
    "${DCT[@]}" compress "$WORK/big.raw" --raw --dtype u8 \
    --shape "$N,256,256,3" -o "$WORK/big-q-$be.dcz" -f -q --json --backend "$be"
  rm -f "$WORK/big-q-$be.dcz"
done
if [ "$E2E" = 1 ] && [ -s "$OUT/quality-cuda.json" ] && [ -s "$OUT/quality-cpu.json" ]; then
  python3 - "$OUT/quality-cuda.json" "$OUT/quality-cpu.json" <<'PY' 2>&1 | tee -a "$OUT/gpu-e2e.txt" || FAILED=1
import json, sys
try:
    a, b = (json.load(open(f))["quality"] for f in sys.argv[1:3])
except (OSError, ValueError, KeyError, TypeError):  # a run above failed: its JSON is an error
    print("quality figures of compress: not compared (a run above gave no figures)")
    sys.exit(0)
if a == b:
    print("quality figures of compress: cuda == cpu (psnr %.6f dB, ssim %.6f)" % (a["psnr_db"], a["ssim"]))
else:
    print("MISMATCH: quality figures of compress, cuda against cpu:")
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            print("  %s: %r against %r" % (k, a.get(k), b.get(k)))
    sys.exit(1)
PY
fi
# A host with few cores a GPU (8 GPUs sharing 32 cores, say): the same compress runs held to
# 4 cores (taskset, and --threads 4 for the codec's and the measures' threads).
if [ "$E2E" = 1 ] && [ "$(nproc)" -gt 4 ] && command -v taskset >/dev/null 2>&1; then
  for be in cuda cpu; do
    for q in no-quality quality; do
      timed "4 cores, compress, $q, $be" taskset -c 0-3 "${DCT[@]}" compress "$WORK/big.raw" \
        --raw --dtype u8 --shape "$N,256,256,3" -o "$WORK/big-4-$be.dcz" -f -q --backend "$be" \
        --threads 4 $([ "$q" = quality ] || echo --no-quality)
      # (the last one kept: the archive that the decompress runs below read)
      [ "$be$q" = cpuquality ] || rm -f "$WORK/big-4-$be.dcz"
    done
  done
  for be in cuda cpu; do
    [ -f "$WORK/big-4-cpu.dcz" ] || break
    timed "4 cores, decompress to stdout, $be" sh -c 'exec "$@" > /dev/null' sh \
      taskset -c 0-3 "${DCT[@]}" decompress "$WORK/big-4-cpu.dcz" -o - --raw -q --backend "$be" \
      --threads 4
  done
  rm -f "$WORK/big-4-cpu.dcz"
elif [ "$E2E" = 1 ]; then
  echo "4 cores: not run ($(command -v taskset >/dev/null 2>&1 && echo "$(nproc) cores here" || echo "no taskset"))" |
    tee -a "$OUT/gpu-e2e.txt"
fi
echo "input bytes: $((N * 196608))" | tee -a "$OUT/gpu-e2e.txt"
# Each timed step that ran with both backends, side by side (the label without its backend
# word is the pair's key; the times include the process's start).
if [ "$E2E" = 1 ]; then
  pairs=$(awk 'substr($0, 40, 8) ~ /^ *[0-9.]+ s$/ {
         label = substr($0, 1, 38); sub(/ +$/, "", label); t = substr($0, 40, 6) + 0
         key = label; be = ""
         if (sub(/cuda/, "BACKEND", key)) be = "cuda"; else if (sub(/cpu/, "BACKEND", key)) be = "cpu"
         if (be == "") next
         if (!(key in seen)) { seen[key] = 1; order[++n] = key }
         time[key, be] = t
       }
       END {
         for (i = 1; i <= n; ++i) {
           k = order[i]
           if (!((k, "cuda") in time) || !((k, "cpu") in time) || time[k, "cuda"] <= 0) continue
           if (!header++) print "cuda against cpu: the cuda time, the cpu time, and the second over the first (above 1: the GPU is faster):"
           name = k; sub(/BACKEND/, "*", name)
           printf "  %-38s %6.2f s  %6.2f s  %5.2fx\n", name, time[k, "cuda"], time[k, "cpu"], time[k, "cpu"] / time[k, "cuda"]
         }
       }' "$OUT/gpu-e2e.txt")
  [ -z "$pairs" ] || printf '%s\n' "$pairs" | tee -a "$OUT/gpu-e2e.txt"
fi
if [ "$E2E" != 1 ]; then
  echo "end-to-end comparison: skipped" | tee -a "$OUT/gpu-e2e.txt"
elif [ ! -f "$WORK/back-cuda.raw" ] || [ ! -f "$WORK/back-cpu.raw" ]; then
  echo "end-to-end comparison: not made (a run above FAILED)" | tee -a "$OUT/gpu-e2e.txt"
  FAILED=1
else
  same=0
  timeout -k 5 "$(limit 60)" cmp -s "$WORK/back-cuda.raw" "$WORK/back-cpu.raw" || same=$?
  if [ "$same" = 0 ]; then
    echo "decoded by cuda == decoded by cpu" | tee -a "$OUT/gpu-e2e.txt"
  elif [ "$same" != 1 ]; then  # (124: out of time; 2: a read error)
    echo "end-to-end comparison: not made (cmp exit $same)" | tee -a "$OUT/gpu-e2e.txt"
    FAILED=1
  else
    { echo "MISMATCH: decoded by cuda != decoded by cpu"
      # (cmp exits 1 on a difference: not a failure of this script, which is under set -e.)
      timeout -k 5 "$(limit 20)" cmp "$WORK/back-cuda.raw" "$WORK/back-cpu.raw" | head -1 || true
      echo "bytes that differ: $( (timeout -k 5 "$(limit 60)" cmp -l "$WORK/back-cuda.raw" \
        "$WORK/back-cpu.raw" || true) | wc -l) (of $((N * 196608)); fewer if the count ran out" \
        "of time)"; } | tee -a "$OUT/gpu-e2e.txt"
    FAILED=1
  fi
fi
timeout -k 5 "$(limit 60)" rm -rf "$WORK" || true
# The host's reads, which bound compress end to end where the codec keeps up: a .npy's rows
# read from /dev/shm as compress reads its chunks (8 MiB: u8 at chop 4), on 1 to 8 threads
# (how far the split reads scale with this host's cores; 8 is the most a command takes).
# 15 s on the 2-core development machine (the 64 MiB reads too: 74 s).
if [ "${#READS[@]}" -gt 0 ] && [ "$(limit 40)" -gt 20 ]; then
  echo "== host reads of a .npy's rows, split over threads (GB/s)" | tee "$OUT/host-reads.txt"
  timeout -k 5 "$(limit 40)" "${READS[@]}" --benchmark_filter='npy_read_rows/MiB:8/' \
    --benchmark_counters_tabular=true 2>&1 | grep -E "^(BM_|Benchmark|---)" |
    tee -a "$OUT/host-reads.txt" || true
  # (the file it reads, left behind where the time limit stopped it)
  rm -f /dev/shm/dctchop_bench_read_*.npy "${TMPDIR:-/tmp}"/dctchop_bench_read_*.npy 2>/dev/null || true
fi
echo "results in $OUT; $([ "$FAILED" = 0 ] && echo "all checks passed" || echo "SOME CHECKS FAILED")"
exit "$FAILED"
