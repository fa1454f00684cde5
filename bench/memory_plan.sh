#!/usr/bin/env bash
# The memory plan (train/memory_plan.h) against the peak it plans: short CPU training runs of
# LeNet (MNIST), CifarNet and AlexNet (synthetic data at their image sizes), two batches each,
# TernGrad over 2 emulated workers, each ending with its test-set evaluation. For every run,
# summary.json's planned_peak_mb beside peak_rss_mb (the process's peak resident set).
# Prints one JSON line per run on stdout and a table on stderr (issue 44 item 6: within 20%).
#
#   bench/memory_plan.sh [--build DIR] [--quick]
#     --build DIR  the build whose cmd/terngrad runs (default build/)
#     --quick      LeNet only (seconds; AlexNet's two runs take a few minutes on 2 cores)
# Exit 0, 1 when a run fails, 2 on usage errors.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "memory_plan.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
BIN=$BUILD/cmd/terngrad
[ -x "$BIN" ] || { echo "memory_plan.sh: no $BIN (build the terngrad target first)" >&2; exit 2; }
MNIST=$ROOT/../shared/data/mnist
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-memory-plan.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# run NET BATCH ITERATIONS [--set ...]: one run; its JSON line on stdout
run() {
  local net=$1 batch=$2 iters=$3
  shift 3
  rm -rf "$tmp/run"
  if ! "$BIN" train --no-progress --set model.name="$net" --set train.batch_size="$batch" \
    --set train.iterations="$iters" --set workers.count=2 --set compression.method=terngrad \
    "$@" --out "$tmp/run" >"$tmp/log" 2>&1; then
    echo "memory_plan.sh: $net batch $batch failed:" >&2
    tail -3 "$tmp/log" >&2
    exit 1
  fi
  python3 - "$tmp/run/summary.json" "$net" "$batch" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
peak, plan = s["peak_rss_mb"], s["planned_peak_mb"]
print(json.dumps({"kind": "memory_plan", "net": sys.argv[2], "batch": int(sys.argv[3]),
                  "workers": 2, "eval_batch": s["config"]["data"]["eval_batch_size"],
                  "peak_rss_mib": round(peak, 1), "planned_peak_mib": round(plan, 1),
                  "ratio": round(plan / peak, 3), "cpu": s["cpu"]["model"]}))
print(f"{sys.argv[2]:>9} batch {sys.argv[3]:>4}: planned {plan:7.0f} MiB, peak {peak:7.0f} MiB,"
      f" {plan / peak:.2f}x", file=sys.stderr)
PY
}

run lenet 64 20 --set data.path="$MNIST" --set data.eval_limit=1000
run lenet 512 20 --set data.path="$MNIST" --set data.eval_limit=1000
[ "$QUICK" = 1 ] && exit 0
syn() { echo --set data.name=synthetic --set data.synthetic_size=1024 --set data.image_size="$1" \
  --set data.synthetic_channels=3 --set data.eval_limit=100 --set data.eval_batch_size=50; }
# shellcheck disable=SC2046
run cifarnet 64 3 $(syn 24)
# shellcheck disable=SC2046
run cifarnet 256 3 $(syn 24)
# shellcheck disable=SC2046
run alexnet 16 2 $(syn 224)
# shellcheck disable=SC2046
run alexnet 64 2 $(syn 224)
