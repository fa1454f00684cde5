#!/usr/bin/env bash
# Whole `terngrad train` runs of P processes under an emulated link, set against the performance
# model's prediction (issue 6: "--calibrate ... checked against measured multi-process runs under
# the emulated 1 Gbit/s link"). Each rank runs in its own network namespace, joined to one bridge
# by a veth pair shaped with tc tbf to RATE in both directions (as bench_comm --link does), and
# the ranks meet through a file store. For each compression method it runs the same config, reads
# rank 0's summary.json (seconds per iteration, the split into compute, compression and
# communication, wire bytes), and prints them beside `terngrad perf-model --calibrate`'s T_iter for
# one process per node on a link of the measured TCP rate.
#
#   bench/netns_train.sh [options] [-- extra terngrad train args]
#     --terngrad PATH    the binary (default build/cmd/terngrad)
#     --procs P          processes = nodes (default 2)
#     --rate RATE        tc rate (default 1gbit)
#     --link-gbit G      the link rate the model uses (default 0.957: TCP measured on 1gbit tbf)
#     --methods LIST     compression methods, comma-separated (default none,terngrad)
#     --net NET          model.name, also the perf-model network (default lenet)
#     --iterations N     timed iterations per run (default 60; the first 10 are excluded)
#     --batch B          total batch (default 64: LeNet's recipe)
#     --threads T        OMP/OpenBLAS threads per rank (default: cores / P, at least 1)
#     --out DIR          where runs and results.jsonl go (default: a temporary directory)
# Needs root (network namespaces, tc), iproute2 and bash >= 5.1. The lab is bench/netns_lab.sh's;
# bench/race.sh runs the same lab against PyTorch DDP. Data: synthetic (the timing does not depend on
# the pixels), so it runs anywhere. Prints a table; results.jsonl holds one JSON object per method.
set -euo pipefail

TERNGRAD=build/cmd/terngrad
PROCS=2
RATE=1gbit
LINK_GBIT=0.957
METHODS=none,terngrad
NET=lenet
ITERS=60
BATCH=64
THREADS=
OUT=
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --terngrad) TERNGRAD="$2"; shift 2 ;;
    --procs) PROCS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --link-gbit) LINK_GBIT="$2"; shift 2 ;;
    --methods) METHODS="$2"; shift 2 ;;
    --net) NET="$2"; shift 2 ;;
    --iterations) ITERS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "netns_train.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "netns_train.sh: error: $*" >&2; exit 2; }
[[ -x "$TERNGRAD" ]] || die "no terngrad binary at $TERNGRAD (build it, or pass --terngrad PATH)"
[[ "$PROCS" =~ ^[1-9][0-9]*$ ]] || die "--procs must be a positive integer, got '$PROCS'"
[[ "$ITERS" =~ ^[0-9]+$ && "$ITERS" -gt 10 ]] || die "--iterations must be > 10, got '$ITERS'"
(( BATCH % PROCS == 0 )) || die "--batch $BATCH is not a multiple of --procs $PROCS"
[[ $(id -u) -eq 0 ]] || die "needs root for network namespaces and tc (run it with sudo)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
TERNGRAD=$(realpath "$TERNGRAD")
[[ -n "$THREADS" ]] || THREADS=$(( $(nproc) / PROCS > 0 ? $(nproc) / PROCS : 1 ))
if [[ -z "$OUT" ]]; then OUT=$(mktemp -d /tmp/netns_train.XXXXXX); fi
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

# shellcheck source=bench/netns_lab.sh
source "$(dirname "$(realpath "$0")")/netns_lab.sh"
lab_up "$PROCS" "$RATE"
echo "netns_train: $PROCS namespaces, each veth shaped both ways to $RATE; $THREADS thread(s) per rank" >&2

CUR_M=
rank_cmd() {
  lab_exec "$1" env OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
    "$TERNGRAD" train --no-progress --rank "$1" --world-size "$PROCS" \
    --rendezvous "file://$OUT/store_$CUR_M" --job-id "netns_$CUR_M" \
    --set comm.interface=tg0 --set model.name="$NET" --set data.name=synthetic \
    --set train.batch_size="$BATCH" --set workers.count="$PROCS" \
    --set train.iterations="$ITERS" --set train.log_every=10 --set train.eval_every=0 \
    --set train.checkpoint_every=0 --set data.eval_limit=1 --set compression.method="$CUR_M" \
    "${EXTRA[@]}" --out "$OUT/$CUR_M"
}

run_method() {
  local rc=0
  CUR_M="$1"
  rm -rf "$OUT/$CUR_M" "$OUT/store_$CUR_M"
  mkdir -p "$OUT/store_$CUR_M"
  lab_run_ranks "$PROCS" "$OUT/$CUR_M.rank" 3600 rank_cmd || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "netns_train.sh: '$CUR_M' failed (exit $rc); rank logs in $OUT/$CUR_M.rank*.err:" >&2
    tail -n 5 "$OUT/$CUR_M".rank*.err >&2
    exit 1
  fi
}

IFS=',' read -r -a METHOD_LIST <<<"$METHODS"
for m in "${METHOD_LIST[@]}"; do
  echo "netns_train: $NET, $PROCS processes, method $m, $ITERS iterations ..." >&2
  run_method "$m"
done

# The model: one process per node, both links at LINK_GBIT, compute and encode measured here with
# the same thread count.
cat >"$OUT/cluster.toml" <<T
name = "netns-$RATE"
gpus_per_node = 1
[intra]
bandwidth_gbit = $LINK_GBIT
[inter]
bandwidth_gbit = $LINK_GBIT
T
OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" "$TERNGRAD" perf-model --json \
  --calibrate --link-gbit "$LINK_GBIT" --networks "$NET" --batch "$NET=$((BATCH / PROCS))" \
  --gpus "$PROCS" --topology ring >"$OUT/model_calibrated.jsonl" 2>"$OUT/model.err" ||
  { cat "$OUT/model.err" >&2; die "perf-model --calibrate failed"; }

/usr/bin/python3 - "$OUT" "$PROCS" "$NET" "$ITERS" "${METHOD_LIST[@]}" <<'PY'
import json, os, sys
out, procs, net, iters, methods = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5:]
model = [json.loads(l) for l in open(os.path.join(out, "model_calibrated.jsonl")) if l.strip()]
m = next((r for r in model if r.get("network") == net and r.get("gpus") == procs), None)
if m is None:
    sys.exit(f"netns_train: perf-model printed no row for {net} at {procs} GPUs")
rows = []
print(f"{net}, {procs} processes (one per namespace), seconds per iteration; model: perf-model "
      f"--calibrate (T_c {m.get('compute_s', float('nan')):.4f} s, T_enc {m.get('encode_s', float('nan')):.4f} s)")
print(f"{'method':10} {'measured':>9} {'model':>9} {'meas/model':>10} {'compute':>9} {'compress':>9} {'comm':>9} {'wire B/it':>11}")
for meth in methods:
    recs = [json.loads(l) for l in open(os.path.join(out, meth, "metrics.jsonl")) if l.strip()]
    tr = [r for r in recs if r.get("type") == "train"]
    # seconds per iteration between the first and the last train record (skips warm-up)
    a, b = tr[0], tr[-1]
    per = (b["wall_seconds"] - a["wall_seconds"]) / (b["step"] - a["step"])
    key = "fp32_iter_s" if meth == "none" else "terngrad_iter_s"
    pred = m.get(key)
    s = json.load(open(os.path.join(out, meth, "summary.json")))
    row = {"network": net, "processes": procs, "method": meth, "measured_iter_s": per,
           "model_iter_s": pred, "compute_s": s["compute_seconds_per_iter"],
           "compression_s": s["compression_seconds_per_iter"],
           "communication_s": s["communication_seconds_per_iter"],
           "wire_bytes_sent_per_worker_per_iter": s["wire_bytes_sent_per_worker_per_iter"]}
    rows.append(row)
    ratio = per / pred if pred else float("nan")
    print(f"{meth:10} {per:9.4f} {pred if pred else float('nan'):9.4f} {ratio:10.2f} {row['compute_s']:9.4f} "
          f"{row['compression_s']:9.4f} {row['communication_s']:9.4f} {row['wire_bytes_sent_per_worker_per_iter']:11.0f}")
with open(os.path.join(out, "results.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(f"results: {os.path.join(out, 'results.jsonl')}")
PY
