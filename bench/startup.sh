#!/usr/bin/env bash
# What loading terngrad costs (issue 16 item 4, "CUDA on demand"): a CUDA-enabled build and a
# CPU-only build of the same tree, side by side on this machine:
#   help_ms        `terngrad --help` wall time, the median of --runs runs (fork + exec + dynamic
#                  loading + relocation + static initialisers: what every process pays first)
#   help_rss_mib   its peak RSS (VmHWM via /usr/bin/time -f %M), the largest of 3 runs
#   train_rss_mib  the peak RSS of the README's main job, shortened: LeNet on Fashion-MNIST with
#                  TernGrad over 2 emulated workers (paper/configs/lenet_fashion_mnist.toml,
#                  compression.method=terngrad, workers.count=2) for --iterations iterations (the
#                  test-set evaluation at the end included), on the CPU
#   cuda_needed    the CUDA toolkit/NCCL libraries the binary names as DT_NEEDED (loaded by every
#                  process, GPU or not); none when they are opened on demand
# Prints one JSON line on stdout and a table on stderr. The CUDA build must not cost more than
# the CPU-only one (README: help under 20 ms and 20 MiB, training within 10% of CPU-only).
#
#   bench/startup.sh [--cuda-build DIR] [--cpu-build DIR] [--runs N] [--iterations N] [--quick]
#     --cuda-build DIR  the CUDA-enabled build (default build/); "" to leave it out
#     --cpu-build DIR   the CPU-only build (default build-cpu/); "" to leave it out
#     --runs N          --help runs to take the median of (default 20)
#     --iterations N    training iterations (default 200; 0 leaves the training out)
#     --quick           --runs 5 --iterations 20 (a smoke test, a few seconds)
# Exit 0, 1 when a run fails, 2 on usage errors, 77 when no build or /usr/bin/time is present.
set -euo pipefail

die() {
  echo "startup.sh: $*" >&2
  exit 2
}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CUDA_BUILD=$ROOT/build
CPU_BUILD=$ROOT/build-cpu
RUNS=20
ITERS=200
while [ $# -gt 0 ]; do
  case $1 in
    --cuda-build) CUDA_BUILD=${2?--cuda-build needs a folder}; shift 2 ;;
    --cpu-build) CPU_BUILD=${2?--cpu-build needs a folder}; shift 2 ;;
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --iterations) ITERS=${2:?--iterations needs a number}; shift 2 ;;
    --quick) RUNS=5; ITERS=20; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs: expected a positive whole number, got '$RUNS'"
[[ $ITERS =~ ^[0-9]+$ ]] || die "--iterations: expected a whole number, got '$ITERS'"
if [ ! -x /usr/bin/time ]; then
  echo "startup.sh: skipped: /usr/bin/time is missing (apt-get install time)" >&2
  exit 77
fi
FASHION=/usr/share/datasets/fashion-mnist
if [ "$ITERS" -gt 0 ] && [ ! -d "$FASHION" ]; then
  echo "startup.sh: $FASHION is missing (apt-get install dataset-fashion-mnist); no training runs" >&2
  ITERS=0
fi

BUILDS=()
[ -n "$CUDA_BUILD" ] && [ -x "$CUDA_BUILD/cmd/terngrad" ] && BUILDS+=("cuda:$CUDA_BUILD")
[ -n "$CPU_BUILD" ] && [ -x "$CPU_BUILD/cmd/terngrad" ] && BUILDS+=("cpu:$CPU_BUILD")
if [ ${#BUILDS[@]} -eq 0 ]; then
  echo "startup.sh: skipped: no terngrad under '$CUDA_BUILD/cmd' or '$CPU_BUILD/cmd'" >&2
  exit 77
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/tg-startup.XXXXXX")
trap 'rm -rf "$T"' EXIT
peak_kib() {  # peak RSS in KiB of the command "$@" (its output discarded)
  /usr/bin/time -f %M -o "$T/rss" "$@" > /dev/null 2> "$T/err" ||
    { echo "startup.sh: '$*' failed: $(tail -3 "$T/err")" >&2; exit 1; }
  tail -1 "$T/rss"
}

json="{\"bench\":\"startup\",\"runs\":$RUNS,\"iterations\":$ITERS"
rows=()
for b in "${BUILDS[@]}"; do
  kind=${b%%:*}
  bin=${b#*:}/cmd/terngrad
  "$bin" --help > /dev/null  # warm the page cache
  times=()  # microseconds, from bash 5's EPOCHREALTIME: forking `date` would cost as much as --help
  for ((i = 0; i < RUNS; i++)); do
    t0=$EPOCHREALTIME
    "$bin" --help > /dev/null
    t1=$EPOCHREALTIME
    times+=($((10#${t1//[^0-9]/} - 10#${t0//[^0-9]/})))
  done
  help_ms=$(printf '%s\n' "${times[@]}" | sort -n |
            awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                                      printf "%.1f", m / 1000 }')
  help_kib=0
  for i in 1 2 3; do
    k=$(peak_kib "$bin" --help)
    if [ "$k" -gt "$help_kib" ]; then help_kib=$k; fi
  done
  help_mib=$(awk -v k="$help_kib" 'BEGIN { printf "%.1f", k / 1024 }')
  train_mib=null
  if [ "$ITERS" -gt 0 ]; then
    k=$(peak_kib "$bin" train --config "$ROOT/paper/configs/lenet_fashion_mnist.toml" \
          --set compression.method=terngrad --set workers.count=2 \
          --set train.iterations="$ITERS" --set train.log_every="$ITERS" \
          --set train.eval_every=0 --set train.checkpoint_every=0 --out "$T/run-$kind")
    train_mib=$(awk -v k="$k" 'BEGIN { printf "%.1f", k / 1024 }')
  fi
  needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
           { grep -E '^lib(cudart|cublas|cublasLt|curand|nccl)\.so' || true; } | tr '\n' ' ' | sed 's/ $//')
  json+=",\"$kind\":{\"binary\":\"$bin\",\"help_ms\":$help_ms,\"help_rss_mib\":$help_mib,"
  json+="\"train_rss_mib\":$train_mib,\"cuda_needed\":\"$needed\"}"
  rows+=("$(printf '%-5s %10s %14s %15s  %s' "$kind" "$help_ms" "$help_mib" "$train_mib" "${needed:-none}")")
done
json+=",\"machine\":\"$(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)\""
json+=",\"date\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
echo "$json"
{
  printf '%-5s %10s %14s %15s  %s\n' build "help ms" "help RSS MiB" "train RSS MiB" "CUDA libraries NEEDED"
  printf '%s\n' "${rows[@]}"
  echo "(help: median of $RUNS runs; RSS: peak, /usr/bin/time; train: $ITERS iterations of the README's main job)"
} >&2
