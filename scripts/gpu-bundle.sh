#!/usr/bin/env bash
# Packs everything a GPU check needs into one relocatable folder, to copy to a GPU machine that
# has the CUDA toolkit (or PyTorch's pip CUDA libraries) but none of our Debian libraries.
#
# Usage: bash scripts/gpu-bundle.sh [--out DIR] [--build-dir DIR] [--max-mib N]
#   --out DIR        the bundle folder (default gpu-bundle/, ignored by git); replaced if present
#   --build-dir DIR  the CUDA build to take the programs from (default build-cuda/); configured
#                    with -DTG_ENABLE_CUDA=ON if it is missing, built (just the targets needed)
#                    if stale (setup.sh's build/ compiles no CUDA on a machine without a GPU)
#   --max-mib N      refuse a bundle larger than N MiB (default 56: what travels to the GPU
#                    machine is 64 MiB in all, the bundle and the ~5 MiB tracked tree with it)
#
# The folder holds:
#   gpu-check.sh, gpu_check.py   run there: bash gpu-check.sh (see the README, "Running the GPU checks")
#   payload.tar.xz               bin/ (terngrad, bench_train, bench_ternary, bench_conv2d,
#                                bench_data, device_info), tests/ (every CUDA test executable),
#                                lib/ (every shared library they load that is not glibc, the
#                                CUDA driver or a CUDA toolkit/NCCL library: those come from the
#                                GPU machine),
#                                lib/compat/ (libstdc++, libgcc_s: used there only when the
#                                machine's own are missing or too old), bench/pytorch_step.py and pytorch_conv.py,
#                                bench/race.sh with netns_lab.sh, race_report.py, ddp_train.py
#                                and grace_terngrad_hook.py (step j),
#                                configs/, data/mnist/ (the four IDX files), dlopen-libraries.txt
#                                (the CUDA libraries opened on demand, which ldd does not show),
#                                src/ (what the TG_PYTHON_ONLY build of python/terngrad_torch
#                                reads: CMakeLists.txt, nn/, comm/, terngrad/, python/, and
#                                tests/python/gpu_hook_check.py), third_party/ (the headers that
#                                build needs and the GPU machine lacks: OpenBLAS's cblas.h,
#                                OpenSSL's, nlohmann-json's with its CMake package; lib/ holds
#                                the link names libopenblas.so, libcrypto.so -> ../../lib/)
#   MANIFEST.txt                 the commit, the toolchain, and every file with its size
# It prints the bundle's size and the file list, and exits 1 if the size is over --max-mib.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=$ROOT/gpu-bundle
BUILD_DIR=$ROOT/build-cuda
MAX_MIB=56
die() { echo "gpu-bundle: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT_DIR=$(realpath -m "${2:?--out needs a folder}"); shift 2 ;;
    --build-dir) BUILD_DIR=$(realpath -m "${2:?--build-dir needs a folder}"); shift 2 ;;
    --max-mib) MAX_MIB=${2:?--max-mib needs a number}; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $MAX_MIB =~ ^[0-9]+$ ]] || die "--max-mib: expected a whole number of MiB, got '$MAX_MIB'"
case $OUT_DIR in /|"$ROOT"|"$HOME") die "--out $OUT_DIR would replace a folder that is not a bundle" ;; esac
if [ -e "$OUT_DIR" ] && [ ! -f "$OUT_DIR/MANIFEST.txt" ] && [ -n "$(ls -A "$OUT_DIR")" ]; then
  die "--out $OUT_DIR exists and is not a bundle (no MANIFEST.txt); refusing to replace it"
fi
MNIST=${TG_MNIST_DIR:-$ROOT/../shared/data/mnist}
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [ -f "$MNIST/$f" ] || die "MNIST file $MNIST/$f is missing (set TG_MNIST_DIR to the IDX folder)"
done

# ---- build (only the targets the bundle holds) -------------------------------------------
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTG_ENABLE_CUDA=ON >&2
fi
grep -q '^TG_ENABLE_CUDA:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" ||
  die "$BUILD_DIR is a CPU-only build (TG_ENABLE_CUDA=OFF): a GPU bundle needs the CUDA toolkit here"
mapfile -t CUDA_TESTS < <(cd "$ROOT/tests" && find . -name '*_cuda_test.cpp' | sed 's|^\./||; s|\.cpp$||; s|/|_|g' | sort)
[ ${#CUDA_TESTS[@]} -gt 0 ] || die "no *_cuda_test.cpp under tests/"
PROGRAMS=(terngrad bench_train bench_ternary bench_conv2d bench_data device_info)
echo "gpu-bundle: building ${#PROGRAMS[@]} programs and ${#CUDA_TESTS[@]} CUDA tests in $BUILD_DIR" >&2
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${PROGRAMS[@]}" "${CUDA_TESTS[@]}" >&2

# ---- stage ---------------------------------------------------------------------------------
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/tg-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
P=$STAGE/payload
mkdir -p "$P/bin" "$P/tests" "$P/lib/compat" "$P/bench" "$P/configs" "$P/data/mnist"
exe_path() {  # the built executable of a target
  local t=$1
  for d in cmd bench tests; do
    [ -x "$BUILD_DIR/$d/$t" ] && { echo "$BUILD_DIR/$d/$t"; return; }
  done
  die "built executable of target '$t' not found under $BUILD_DIR"
}
for t in "${PROGRAMS[@]}"; do cp "$(exe_path "$t")" "$P/bin/"; done
for t in "${CUDA_TESTS[@]}"; do cp "$(exe_path "$t")" "$P/tests/"; done
cp "$ROOT/bench/pytorch_step.py" "$ROOT/bench/pytorch_conv.py" "$P/bench/"
# Step j's race over a shaped link (issue 33): the lab, the DDP baseline and the report.
cp "$ROOT/bench/race.sh" "$ROOT/bench/netns_lab.sh" "$ROOT/bench/race_report.py" \
  "$ROOT/bench/ddp_train.py" "$ROOT/bench/grace_terngrad_hook.py" "$P/bench/"
# The CUDA libraries the programs open with dlopen (cuBLAS, NCCL), one SONAME a line, written
# by CMake: gpu-check.sh puts their folders on LD_LIBRARY_PATH, as it does for linked ones.
[ -f "$BUILD_DIR/dlopen-libraries.txt" ] || die "$BUILD_DIR/dlopen-libraries.txt is missing (re-run cmake)"
cp "$BUILD_DIR/dlopen-libraries.txt" "$P/"
cp "$ROOT"/paper/configs/*.toml "$P/configs/"
cp "$MNIST"/*-ubyte.gz "$P/data/mnist/"

# The extension's source and build inputs (gpu_check.py step h builds python/terngrad_torch there
# against the machine's PyTorch). TG_PYTHON_ONLY configures only the top CMakeLists.txt, nn/,
# comm/ (tg_comm_core), terngrad/ and python/; nn/ needs OpenBLAS (cblas.h), OpenSSL's libcrypto
# (nn/core/hash.cpp) and nlohmann-json (nn/core/json.cpp), found where this build found them.
mkdir -p "$P/src/tests/python" "$P/third_party/include/openssl" "$P/third_party/lib" "$P/third_party/share/cmake"
tar -C "$ROOT" --exclude=build --exclude='*.egg-info' --exclude=__pycache__ -cf - \
    CMakeLists.txt nn comm terngrad python | tar -C "$P/src" -xf -
cp "$ROOT/tests/python/gpu_hook_check.py" "$ROOT/tests/python/hook_records.py" "$P/src/tests/python/"
cache_path() { sed -n "s|^$1:[A-Z]*=||p" "$BUILD_DIR/CMakeCache.txt"; }
blas_lib=$(cache_path TG_OPENBLAS_OPENMP)
cblas_dir=/usr/include/x86_64-linux-gnu/openblas-openmp  # the top CMakeLists.txt's, beside that library
[ -n "$blas_lib" ] && [ -f "$cblas_dir/cblas.h" ] || cblas_dir=$(dirname "$(find /usr/include -name cblas.h -print -quit)")
cp "$cblas_dir/cblas.h" "$cblas_dir/openblas_config.h" "$P/third_party/include/"
ssl_inc=$(cache_path OPENSSL_INCLUDE_DIR)
cp -r "${ssl_inc:-/usr/include}/openssl/." "$P/third_party/include/openssl/"
# Debian keeps the configuration headers per architecture.
for f in /usr/include/x86_64-linux-gnu/openssl/*.h; do [ -f "$f" ] && cp "$f" "$P/third_party/include/openssl/"; done
json_cfg=$(cache_path nlohmann_json_DIR)
[ -n "$json_cfg" ] && [ -f "$json_cfg/nlohmann_jsonConfig.cmake" ] || die "nlohmann_json_DIR not in $BUILD_DIR/CMakeCache.txt"
cp -r "$json_cfg" "$P/third_party/share/cmake/"
cp -r "$(cd "$json_cfg/../../.." && pwd)/include/nlohmann" "$P/third_party/include/"
ln -s ../../lib/libopenblas.so.0 "$P/third_party/lib/libopenblas.so"
ln -s ../../lib/libcrypto.so.3 "$P/third_party/lib/libcrypto.so"

# Shared libraries: the closure ldd resolves for every executable, less the ones the GPU machine
# must supply itself: glibc (its loader and libraries), the CUDA driver, and the CUDA toolkit and
# NCCL libraries (they must match that machine's driver).
system_lib() {
  case $1 in
    ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*|\
    libanl.so*|libnsl.so*|libBrokenLocale.so*|libmvec.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudart.so*|libcublas*|libcurand*|libnccl*|libnvrtc*|\
    libnvJitLink*|libcusparse*|libcusolver*|libcufft*) return 0 ;;
  esac
  return 1
}
declare -A SEEN=()
for exe in "$P"/bin/* "$P"/tests/*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    system_lib "$name" && continue
    [ -n "${SEEN[$name]:-}" ] && continue
    [ "$path" = "not" ] && die "$exe needs $name, which is not installed here"
    SEEN[$name]=$path
  done < <(ldd "$exe")
done
for name in "${!SEEN[@]}"; do
  case $name in
    libstdc++.so*|libgcc_s.so*) dest=$P/lib/compat ;;
    *) dest=$P/lib ;;
  esac
  cp -L "${SEEN[$name]}" "$dest/$name"
done
chmod u+w "$P"/lib/*.so* "$P"/lib/compat/*.so* 2>/dev/null || true
strip --strip-unneeded "$P"/lib/*.so* "$P"/lib/compat/*.so*
strip --strip-all "$P"/bin/* "$P"/tests/*

for l in "$P"/third_party/lib/*.so; do [ -e "$l" ] || die "$l: the bundle lacks $(readlink "$l")"; done

# ---- pack ----------------------------------------------------------------------------------
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
cp "$ROOT/scripts/gpu-check.sh" "$ROOT/scripts/gpu_check.py" "$OUT_DIR/"
chmod +x "$OUT_DIR/gpu-check.sh"
{
  echo "terngrad GPU bundle"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}")"
  echo "compiler: $(c++ --version | head -1); $(grep -o 'release [0-9.]*' < <(nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | head -1 | sed 's/^/nvcc /')"
  echo "cuda code: $(grep -oh 'arch=compute_[0-9a-z]*,code=\[[a-z_0-9]*\]' "$BUILD_DIR"/nn/CMakeFiles/tg_nn.dir/flags.make | sort -u | tr '\n' ' ')"
  echo "needs from the GPU machine: $(for e in "$P"/bin/* "$P"/tests/*; do ldd "$e"; done | awk '{print $1}' |
        grep -E '^lib(cuda|cudart|cublas|cublasLt|curand|nccl)\.so' | cat - "$P/dlopen-libraries.txt" |
        sort -u | tr '\n' ' ')"
  echo "files (payload.tar.xz, bytes):"
  (cd "$P" && find . -type f -printf '%s %P\n' | sort -k2)
} > "$OUT_DIR/MANIFEST.txt"
# One xz stream over the whole payload: the executables share most of their code.
tar -C "$P" -cf - . | xz -T"$(nproc)" -6 > "$OUT_DIR/payload.tar.xz"

bytes=$(du -sb "$OUT_DIR" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
raw=$(du -sb "$P" | cut -f1)
echo "gpu-bundle: $OUT_DIR: $mib MiB ($(awk -v b="$raw" 'BEGIN { printf "%.1f", b / 1048576 }') MiB unpacked), ${#PROGRAMS[@]} programs, ${#CUDA_TESTS[@]} CUDA tests, ${#SEEN[@]} libraries"
echo "  bin:   $(ls "$P/bin" | tr '\n' ' ')"
echo "  tests: $(ls "$P/tests" | tr '\n' ' ')"
echo "  lib:   $(cd "$P/lib" && find . -type f -printf '%P ' )"
echo "  src:   $(du -sh "$P/src" | cut -f1) (the extension's source), third_party: $(du -sh "$P/third_party" | cut -f1) (headers)"
echo "  data:  $(ls "$P/data/mnist" | tr '\n' ' '); configs: $(ls "$P/configs" | tr '\n' ' ')"
echo "  run there: bash $(basename "$OUT_DIR")/gpu-check.sh   (results in \$OUT or ./gpu-results)"
if [ "$bytes" -gt $((MAX_MIB * 1048576)) ]; then
  die "the bundle is $mib MiB, over the $MAX_MIB MiB limit"
fi
