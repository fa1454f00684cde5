#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz/ as libFuzzer binaries (clang, ASan + UBSan, CPU only) in
# build-fuzz/ and runs each for a bounded time from its seed corpus, printing per target the
# executions and the coverage reached (libFuzzer's cov: edges and ft: features). Exits non-zero
# if any target crashed, leaked, hit undefined behaviour or let an exception other than
# tg::Error escape; the reproducer is left in build-fuzz/artifacts/ (minimise it with
# `<binary> -minimize_crash=1 -runs=10000 FILE` and add it to tests/fuzz/corpus/<name>/ as
# crash_<what> so the replay test keeps it fixed). New inputs collect in build-fuzz/corpus/<name>/;
# tests/fuzz/pick_inputs.py copies the few that add the most coverage into the seed corpus.
#
# Usage: scripts/fuzz.sh [--seconds N] [--runs N] [--jobs J] [--build-dir DIR] [TARGET...]
#   --seconds N   run each target N seconds (default 10)
#   --runs N      stop each target after N executions instead (whichever comes first)
#   --jobs J      build parallelism, and how many targets fuzz at once (default 2)
#   TARGET        config, idx, checkpoint, ... (default: every tests/fuzz/*_fuzz.cpp)
# Needs clang++ with libFuzzer (Debian: clang libclang-rt-14-dev libomp-14-dev); exits 77 when
# clang++ is missing, so CI can skip it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=10
runs=-1
jobs=2
build=build-fuzz
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev libomp-14-dev)" >&2
  exit 77
fi
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cpp; do
    n=$(basename "$f" _fuzz.cpp)
    targets+=("$n")
  done
fi

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# A tree made earlier (by this script, or by scripts/sanitize.sh with its unit tests) is reused.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DTG_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DTG_ENABLE_CUDA=OFF \
    -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${launcher[@]}" >/dev/null
fi
grep -q '^TG_FUZZ:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "fuzz.sh: $build is not a TG_FUZZ=ON tree" >&2; exit 2; }
build_targets=()
for t in "${targets[@]}"; do build_targets+=(--target "${t}_fuzz"); done
cmake --build "$build" -j"$jobs" "${build_targets[@]}"

mkdir -p "$build/artifacts" "$build/logs"
# One target: runs it and writes its table row to $build/logs/<target>.row ("!" first when it
# failed). Up to --jobs targets run at once (each one thread); the rows print in target order.
fuzz_one() {
  local t=$1 work="$build/corpus/$1" log="$build/logs/$1.log" start rc=0 took execs last cov ft
  mkdir -p "$work"  # new inputs go here, never into the checked-in seeds
  start=$(date +%s)
  # One thread per process: OpenMP's pool would only add noise to coverage.
  OMP_NUM_THREADS=1 "$build/tests/fuzz/${t}_fuzz" -max_total_time="$seconds" -runs="$runs" \
    -print_final_stats=1 -rss_limit_mb=2048 -timeout=20 \
    -artifact_prefix="$build/artifacts/$t-" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  took=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  last=$(grep -E '#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
  local result=ok mark=""
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc; see $log)"
    mark="!"
  fi
  printf '%s%-14s %12s %8s %8s %8s  %s\n' "$mark" "$t" "${execs:-?}" "$took" "${cov:-?}" \
    "${ft:-?}" "$result" >"$build/logs/$t.row"
}
for t in "${targets[@]}"; do
  rm -f "$build/logs/$t.row"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=0
printf '%-14s %12s %8s %8s %8s  %s\n' target executions seconds cov ft result
for t in "${targets[@]}"; do
  row=$(cat "$build/logs/$t.row" 2>/dev/null || echo "!$t (no result)")
  if [ "${row:0:1}" = "!" ]; then
    failed=1
    row=${row:1}
  fi
  echo "$row"
done
exit $failed
