#!/usr/bin/env bash
# The test command: installs what is needed, builds everything, runs every test, then the
# sanitizer and fuzzing pass (scripts/sanitize.sh: ASan + UBSan and TSan trees, each fuzz target
# for a few seconds).
# Tests labelled `cuda` (CUDA-vs-CPU parity) skip themselves when no GPU is present;
# on a GPU machine `ctest --test-dir build -L cuda` runs just them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test-tools
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
bash scripts/sanitize.sh all --fuzz-seconds "${TG_FUZZ_SECONDS:-3}"
