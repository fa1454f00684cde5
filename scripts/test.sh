#!/usr/bin/env bash
# The test command: installs what is needed, builds everything, runs the tests, then the
# sanitizer and fuzzing pass (scripts/sanitize.sh: ASan + UBSan and TSan trees, each fuzz target
# for a few seconds).
# Tests labelled `cuda` (CUDA-vs-CPU parity) skip themselves when no GPU is present;
# on a GPU machine `ctest --test-dir build -L cuda` runs just them.
# Each phase ends with a line "test: PHASE took M min S s (total ...)", so a slow machine's
# minutes can be read off the log.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
phase_start=$t0
phase() {  # name: report the phase that just ended
  local now
  now=$(date +%s)
  printf 'test: %s took %d min %02d s (total %d min %02d s)\n' "$1" $(((now - phase_start) / 60)) \
    $(((now - phase_start) % 60)) $(((now - t0) / 60)) $(((now - t0) % 60))
  phase_start=$now
}
# ccache's depend mode for every build below (setup.sh's, the pip test's, the sanitizer trees'):
# no preprocessor run on a miss.
export CCACHE_DEPEND=${CCACHE_DEPEND-1}
bash scripts/setup.sh --test-tools
phase "set-up (packages, configure, the terngrad command)"
cmake --build "${BUILD_DIR:-build}" -j "$(nproc)"  # the tests and benches setup.sh leaves out
phase "build (tests, benches)"
# Every test but those labelled `extended` (tests/CMakeLists.txt: a paper-accuracy training whose
# claim another one checks for less); `ctest --test-dir build -L extended` runs them.
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" -LE extended
phase "ctest"
bash scripts/sanitize.sh all --fuzz-seconds "${TG_FUZZ_SECONDS:-3}"
phase "sanitizers and fuzzing"
