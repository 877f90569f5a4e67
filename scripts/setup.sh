#!/usr/bin/env bash
# Installs every build and test dependency of dctchop from Debian packages,
# builds the project, and runs dctchop on the bundled sample.
# Idempotent: safe to run again. Run as root on Debian 12 (bookworm) or newer.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF_USAGE'
Usage: scripts/setup.sh
Installs dctchop's dependencies with apt-get (as root, or through sudo), configures and
builds build/ (Release), and runs dctchop on the bundled sample. Takes no arguments.
  DCTCHOP_SETUP_NO_BUILD=1  install the packages only
EOF_USAGE
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) echo "setup.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
  build-essential cmake ninja-build pkg-config git \
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev \
  libxxhash-dev libzstd-dev libdeflate-dev zlib1g-dev libisal-dev libhdf5-dev libdlpack-dev liblzf-dev liblz4-dev \
  hdf5-filter-plugin hdf5-filter-plugin-blosc-serial hdf5-filter-plugin-zfp-serial \
  libgtest-dev libgmock-dev googletest libbenchmark-dev \
  python3 python3-dev python3-numpy python3-matplotlib python3-skimage python3-h5py hdf5-tools \
  python3-hdf5plugin \
  pybind11-dev python3-pybind11 python3-torch \
  dataset-fashion-mnist time bc strace xz-utils \
  clang libclang-rt-dev util-linux e2fsprogs

if [ "${DCTCHOP_SETUP_NO_BUILD:-0}" = "1" ]; then exit 0; fi

GEN=(-G Ninja)
if [ -f build/Makefile ]; then GEN=(); fi  # keep the generator of an existing build folder
cmake -S . -B build "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
echo "== dctchop on the bundled sample =="
./build/apps/dctchop compress sample_data/images_u8_nhwc.npy -o build/sample.dcz -f
./build/apps/dctchop info build/sample.dcz
