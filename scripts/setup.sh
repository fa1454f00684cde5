#!/usr/bin/env bash
# Installs every Debian package terngrad needs, then configures ./build and builds the `terngrad`
# command in it (README command 1 needs nothing else; scripts/test.sh builds the tests and benches).
# Usage: bash scripts/setup.sh [--test-tools]   (as root, or with sudo available)
#   --test-tools  also the tools scripts/test.sh needs beyond the build: clang with libFuzzer and
#                 its sanitizer runtimes, LLVM's OpenMP, Ninja (scripts/sanitize.sh, scripts/fuzz.sh),
#                 nftables (bench/faults.sh's lossy link where the kernel has no netem),
#                 and the `tensorboard` Python package in .venv-test/ (pip; the TensorBoard tests
#                 read event files back with it); and PyTorch with its C++ headers (python3-torch,
#                 libtorch-dev, pybind11-dev, python3-setuptools), so python/terngrad_torch, the DDP
#                 hook, is built, pip-installed
#                 and tested (the core never needs PyTorch)
# Environment: BUILD_DIR (default build), TG_CMAKE_ARGS (extra cmake flags, e.g. -DTG_ENABLE_CUDA=OFF),
#   TG_BUILD_CUDA=1 (compile the CUDA backend on a machine without a GPU; see below)
# The CUDA toolkit is optional: when /usr/local/cuda (or nvcc on PATH) exists and this machine has
# an NVIDIA GPU, the CUDA backend is built too (CMakeLists.txt, TG_ENABLE_CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git
  libopenblas-dev libopenblas-openmp-dev  # CPU BLAS; the OpenMP build shares our thread pool
  libgtest-dev libgmock-dev  # tests
  libgloo-dev libhiredis-dev # CPU collectives (Gloo, TCP; Redis rendezvous store)
  redis-server               # Redis rendezvous: multi-node runs and its tests
  libtomlplusplus-dev        # TOML configs
  nlohmann-json3-dev         # JSON parsing (nn/core/json.cpp)
  libcli11-dev               # command line
  libprotobuf-dev            # TensorBoard event files (protobuf wire format)
  zlib1g-dev                 # gzipped IDX files
  libarchive-dev             # `terngrad data fetch cifar10` extracts its .tar.gz
  libcurl4-openssl-dev       # `terngrad data fetch` downloads
  libssl-dev                 # SHA-256 and MD5 (nn/core/hash.cpp, OpenSSL's libcrypto)
  libsimgrid-dev             # `terngrad perf-model --simulate` (optional: built when found)
  libjpeg62-turbo-dev        # JPEG image folders
  dataset-fashion-mnist      # Fashion-MNIST, /usr/share/datasets/fashion-mnist
  python3-matplotlib         # paper/ figure scripts (run with /usr/bin/python3)
  xz-utils                   # scripts/gpu-bundle.sh packs the GPU-check bundle with xz
)

if [ "${1:-}" = --test-tools ]; then
  PACKAGES+=(clang libclang-rt-14-dev libomp-14-dev ninja-build python3-venv nftables
             python3-torch libtorch-dev pybind11-dev python3-setuptools ccache)
elif [ $# -gt 0 ]; then
  echo "setup.sh: unknown argument '$1' (expected --test-tools or nothing)" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# The `tensorboard` Python package, for tests only (tests/train/check_tensorboard.py reads the
# event files back with it): Debian has none, and Debian's python3-protobuf (3.21) is too old for
# tensorboard 2.21's generated code, so a venv of the checkout gets pinned wheels of just what its
# event reader imports (no grpcio, no web server; about 110 MB). Nothing of the build uses it.
if [ "${1:-}" = --test-tools ]; then
  venv=.venv-test
  if ! "$venv/bin/python3" -c 'import tensorboard.backend.event_processing.event_accumulator' \
      2>/dev/null; then
    echo "setup: installing the tensorboard Python package into $venv (test-only)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
      tensorboard==2.21.0 protobuf==7.36.2 numpy==2.4.6 absl-py==2.5.1
    "$venv/bin/python3" -c 'import tensorboard.backend.event_processing.event_accumulator'
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
# ccache, where installed (--test-tools installs it), serves the compiles again: a rebuild after
# a checkout, and the test command's `pip install ./python` (scripts/test-pip-install.sh), whose
# library files compile with the same commands as here (66 s -> 9 s). Depend mode takes the
# compiler's own -MD output instead of running the preprocessor on a miss (1% over no ccache).
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_DEPEND=${CCACHE_DEPEND-1}
fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${TG_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)" --target terngrad
