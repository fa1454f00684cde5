#!/usr/bin/env bash
# The race (issue 14): terngrad against PyTorch DistributedDataParallel (Gloo) on the same nets,
# batch, threads and emulated link, in one invocation. For each net, each process count P and
# each method it runs P ranks, one per network namespace of bench/netns_lab.sh (veth shaped with
# tc tbf to RATE both ways, the lab of bench/netns_train.sh):
#   none       terngrad train, compression.method=none (exact fp32: reduce-scatter + allgather;
#              at P = 2 one allgather, the same bytes)
#   terngrad   terngrad train, compression.method=terngrad
#   ddp        bench/ddp_train.py: DDP, fp32 bucketed allreduce (PyTorch's default)
#   ddp-fp16   bench/ddp_train.py: DDP with its fp16_compress_hook
#   ddp-terngrad  bench/ddp_train.py: DDP with terngrad_torch's TernGrad hook (python/)
#   ddp-terngrad-ef  the same with TernGradState(error_feedback=True)
#   ddp-grace  bench/ddp_train.py: DDP with a pure-PyTorch TernGrad hook written the way GRACE does
#              it (bench/grace_terngrad_hook.py: int8 codes, per-worker scalers, allgather)
# then prints a markdown table (ms/step, img/s, wire bytes per step per rank, speedup over DDP
# fp32, terngrad's compute / compression / communication split) with `terngrad perf-model
# --calibrate --link-gbit G --topology ring`'s prediction and the targets' verdicts, and writes
# OUT/results.jsonl. ms/step: between the train records of step W and the last step (rank 0's
# metrics.jsonl; ddp_train.py writes the same records). Wire bytes: tx bytes of every rank's
# tg0 over the same steps (bench/race_report.py watch), beside each system's own count.
#
#   bench/race.sh [options]
#     --terngrad PATH     the binary (default build/cmd/terngrad)
#     --python PATH       a python3 with torch (default /usr/bin/python3: Debian's python3-torch)
#     --procs LIST        process counts (default 2,4)
#     --nets LIST         nets (default lenet,alexnet; also cifarnet)
#     --methods LIST      any of none,terngrad,ddp,ddp-fp16,ddp-terngrad,ddp-terngrad-ef,ddp-grace
#                         (default none,terngrad,ddp,ddp-fp16)
#     --device cpu|cuda   where every rank computes (default cpu). cuda: every rank on GPU 0 (the
#                         GPU race of issue 33: ranks sharing one GPU, Gloo over the shaped link;
#                         terngrad with comm.backend=gloo, DDP with CUDA tensors over Gloo); the
#                         model then takes its compute and encode times from --bench-train on the
#                         GPU instead of perf-model --calibrate on the CPU
#     --bench-train PATH  bench_train, for --device cuda (default: beside --terngrad, then
#                         build/bench/bench_train)
#     --terngrad-torch DIR  where the terngrad_torch package is (default build/python)
#     --batch LIST        total batch per net, NET=B,... (default lenet=64,alexnet=16: LeNet's
#                         recipe; AlexNet small enough for 2 CPU cores, 8 per rank at P = 2)
#     --iterations LIST   steps per run, NET=N,... (default lenet=60,alexnet=8)
#     --warmup LIST       untimed first steps, NET=W,... (default lenet=10,alexnet=2); N % W == 0
#     --threads T         threads per rank, all systems (default: cores / P, at least 1)
#     --ranks-per-node G  G ranks per network namespace (default 1): P ranks as P / G "nodes",
#                         each node's ranks over its loopback, the nodes over their RATE veths
#                         (issue 42's 2 nodes of 4); terngrad is told the layout
#                         (comm.ranks_per_node), the netns tx bytes are then per node (what
#                         crosses between nodes), and no perf-model row is made (it models one
#                         rank per node)
#     --rate RATE         tc rate (default 1gbit)
#     --link-gbit G       the link rate perf-model uses (default 0.957: TCP measured on 1gbit tbf)
#     --timeout S         seconds one run may take before its ranks are killed (default 900)
#     --out DIR           runs, model.P*.jsonl, results.jsonl (default: a temporary directory)
#     --quick             development smoke run: lenet=20 / alexnet=4 iterations
# Needs root (network namespaces, tc), iproute2, bash >= 5.1; the DDP methods need torch in
# --python (apt-get install python3-torch: a bench-only dependency, never the product's). Data is
# synthetic for every system (MNIST- / ImageNet-shaped; the timing does not depend on the pixels).
# A failing rank stops its run (the others are killed), the race goes on, the table says
# "failed" and the exit status is 1. Exit 2: usage errors.
set -euo pipefail

HERE=$(dirname "$(realpath "$0")")
TERNGRAD=build/cmd/terngrad
PY=/usr/bin/python3
TORCH_EXT=build/python
PROCS=2,4
NETS=lenet,alexnet
METHODS=none,terngrad,ddp,ddp-fp16
declare -A BATCH=([lenet]=64 [alexnet]=16 [cifarnet]=128)
declare -A ITERS=([lenet]=60 [alexnet]=8 [cifarnet]=40)
declare -A WARM=([lenet]=10 [alexnet]=2 [cifarnet]=10)
THREADS=
RPN=1
DEVICE=cpu
BENCH_TRAIN=
RATE=1gbit
LINK_GBIT=0.957
TIMEOUT=900
OUT=

die() { echo "race.sh: error: $*" >&2; exit 2; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
set_map() { # set_map NAME "net=v,net=v"
  local -n map="$1"
  local kv
  IFS=',' read -r -a kvs <<<"$2"
  for kv in "${kvs[@]}"; do
    [[ "$kv" =~ ^([a-z_]+)=([1-9][0-9]*)$ ]] || die "expected NET=POSITIVE_INT, got '$kv'"
    map[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  done
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --terngrad) need "$@"; TERNGRAD="$2"; shift 2 ;;
    --python) need "$@"; PY="$2"; shift 2 ;;
    --terngrad-torch) need "$@"; TORCH_EXT="$2"; shift 2 ;;
    --procs) need "$@"; PROCS="$2"; shift 2 ;;
    --nets) need "$@"; NETS="$2"; shift 2 ;;
    --methods) need "$@"; METHODS="$2"; shift 2 ;;
    --batch) need "$@"; set_map BATCH "$2"; shift 2 ;;
    --iterations) need "$@"; set_map ITERS "$2"; shift 2 ;;
    --warmup) need "$@"; set_map WARM "$2"; shift 2 ;;
    --threads) need "$@"; THREADS="$2"; shift 2 ;;
    --device) need "$@"; DEVICE="$2"; shift 2 ;;
    --bench-train) need "$@"; BENCH_TRAIN="$2"; shift 2 ;;
    --rate) need "$@"; RATE="$2"; shift 2 ;;
    --ranks-per-node) need "$@"; RPN="$2"; shift 2 ;;
    --link-gbit) need "$@"; LINK_GBIT="$2"; shift 2 ;;
    --timeout) need "$@"; TIMEOUT="$2"; shift 2 ;;
    --out) need "$@"; OUT="$2"; shift 2 ;;
    --quick) ITERS[lenet]=20; ITERS[alexnet]=4; ITERS[cifarnet]=20; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# Validate everything before touching the network.
IFS=',' read -r -a PROC_LIST <<<"$PROCS"
IFS=',' read -r -a NET_LIST <<<"$NETS"
IFS=',' read -r -a METHOD_LIST <<<"$METHODS"
MAXP=0
for p in "${PROC_LIST[@]}"; do
  [[ "$p" =~ ^[1-9][0-9]?$ && "$p" -le 64 ]] || die "--procs: '$p' is not in 1 .. 64"
  ((p > MAXP)) && MAXP=$p
done
for n in "${NET_LIST[@]}"; do
  [[ "$n" =~ ^(lenet|alexnet|cifarnet)$ ]] || die "--nets: '$n' is not one of lenet, alexnet, cifarnet (the nets bench/pytorch_step.py builds)"
  [[ -n "${BATCH[$n]:-}" && -n "${ITERS[$n]:-}" && -n "${WARM[$n]:-}" ]] || die "no batch/iterations/warmup for '$n'"
  ((ITERS[$n] > WARM[$n] && ITERS[$n] % WARM[$n] == 0)) ||
    die "$n: --iterations ${ITERS[$n]} must be a multiple of --warmup ${WARM[$n]} and larger"
  for p in "${PROC_LIST[@]}"; do
    ((BATCH[$n] % p == 0)) || die "$n: total batch ${BATCH[$n]} is not a multiple of P = $p"
  done
done
WANT_DDP=0
WANT_EXT=0
for m in "${METHOD_LIST[@]}"; do
  case "$m" in
    none|terngrad) ;;
    ddp|ddp-fp16|ddp-grace) WANT_DDP=1 ;;
    ddp-terngrad|ddp-terngrad-ef) WANT_DDP=1; WANT_EXT=1 ;;
    *) die "--methods: '$m' is not one of none, terngrad, ddp, ddp-fp16, ddp-terngrad, ddp-terngrad-ef, ddp-grace" ;;
  esac
done
[[ -z "$THREADS" || "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$THREADS'"
[[ "$RPN" =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-node must be a positive integer, got '$RPN'"
for p in "${PROC_LIST[@]}"; do
  ((p % RPN == 0)) || die "--procs: $p is not a multiple of --ranks-per-node $RPN"
done
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer, got '$TIMEOUT'"
[[ -x "$TERNGRAD" ]] || die "no terngrad binary at $TERNGRAD (build it, or pass --terngrad PATH)"
TERNGRAD=$(realpath "$TERNGRAD")
[[ "$DEVICE" == cpu || "$DEVICE" == cuda ]] || die "--device must be cpu or cuda, got '$DEVICE'"
if [[ "$DEVICE" == cuda ]]; then
  if [[ -z "$BENCH_TRAIN" ]]; then
    for c in "$(dirname "$TERNGRAD")/bench_train" "$(dirname "$TERNGRAD")/../bench/bench_train" build/bench/bench_train; do
      [[ -x "$c" ]] && { BENCH_TRAIN=$c; break; }
    done
  fi
  [[ -n "$BENCH_TRAIN" && -x "$BENCH_TRAIN" ]] || die "--device cuda needs bench_train (pass --bench-train PATH)"
  BENCH_TRAIN=$(realpath "$BENCH_TRAIN")
  if ((WANT_DDP)); then
    "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
      die "$PY has no torch with CUDA (--device cuda)"
  fi
fi
if ((WANT_DDP)); then
  "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
    die "$PY has no torch with Gloo (apt-get install python3-torch, or pass --python PATH)"
fi
if ((WANT_EXT)); then
  TORCH_EXT=$(realpath -m "$TORCH_EXT")
  PYTHONPATH="$TORCH_EXT" "$PY" -c 'import terngrad_torch' 2>/dev/null ||
    die "no terngrad_torch in $TORCH_EXT for $PY (build it with PyTorch found, or pass --terngrad-torch DIR)"
fi
((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) || die "needs bash >= 5.1"
[[ $(id -u) -eq 0 ]] || die "needs root for network namespaces and tc (run it with sudo)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
[[ -n "$OUT" ]] || OUT=$(mktemp -d /tmp/race.XXXXXX)
mkdir -p "$OUT/runs"
OUT=$(realpath "$OUT")

# shellcheck source=bench/netns_lab.sh
source "$HERE/netns_lab.sh"
LAB_RANKS_PER_NS=$RPN
lab_up $((MAXP / RPN)) "$RATE"
CORES=$(nproc)
echo "race: $((MAXP / RPN)) namespaces of $RPN rank(s), veths shaped both ways to $RATE; $CORES cores; out $OUT" >&2

# The rank functions (lab_run_ranks calls them with the rank) read the current run's settings.
CUR_NET= CUR_P= CUR_T= CUR_M= CUR_DIR= CUR_B=
tg_rank() {
  local r="$1" data=(--set data.synthetic_channels=1 --set data.synthetic_classes=10)
  local dev=(--device "$DEVICE")
  # Two ranks on one GPU: Gloo (NCCL refuses a GPU shared by ranks), over the shaped veth.
  if [[ "$DEVICE" == cuda ]]; then dev+=(--set comm.backend=gloo); fi
  if [[ "$CUR_NET" == alexnet ]]; then
    data=(--set data.synthetic_channels=3 --set data.synthetic_classes=1001 --set data.image_size=224
          --set data.synthetic_size=$((2 * BATCH[alexnet])))
  elif [[ "$CUR_NET" == cifarnet ]]; then
    data=(--set data.synthetic_channels=3 --set data.image_size=24)
  fi
  lab_exec "$r" env OMP_NUM_THREADS="$CUR_T" OPENBLAS_NUM_THREADS="$CUR_T" \
    "$TERNGRAD" train --no-progress --rank "$r" --world-size "$CUR_P" \
    --rendezvous "file://$CUR_DIR/store" --job-id race --threads "$CUR_T" \
    --set comm.interface=tg0 --set comm.ranks_per_node="$RPN" --set model.name="$CUR_NET" --set data.name=synthetic "${data[@]}" \
    --set data.augment=false --set train.batch_size="${BATCH[$CUR_NET]}" --set workers.count="$CUR_P" \
    --set train.iterations="${ITERS[$CUR_NET]}" --set train.log_every="${WARM[$CUR_NET]}" \
    --set train.eval_every=0 --set train.checkpoint_every=0 --set data.eval_limit=1 \
    --set compression.method="$CUR_M" "${dev[@]}" --out "$CUR_DIR/train"
}
ddp_rank() {
  local r="$1" hook=none
  [[ "$CUR_M" == ddp-fp16 ]] && hook=fp16
  local ef=()
  [[ "$CUR_M" == ddp-terngrad || "$CUR_M" == ddp-terngrad-ef ]] && hook=terngrad
  [[ "$CUR_M" == ddp-terngrad-ef ]] && ef=(--error-feedback)
  [[ "$CUR_M" == ddp-terngrad* ]] && ef+=(--ranks-per-node "$RPN")
  [[ "$CUR_M" == ddp-grace ]] && hook=grace
  lab_exec "$r" env OMP_NUM_THREADS="$CUR_T" "$PY" "$HERE/ddp_train.py" --rank "$r" \
    --world-size "$CUR_P" --store "$CUR_DIR/store/ddp" --ifname tg0 --net "$CUR_NET" \
    --batch "$CUR_B" --threads "$CUR_T" --iterations "${ITERS[$CUR_NET]}" \
    --warmup "${WARM[$CUR_NET]}" --hook "$hook" "${ef[@]}" --device "$DEVICE" --terngrad-torch "$TORCH_EXT" \
    --log "$CUR_DIR/train/metrics.jsonl"
}
start_watch() {
  "$PY" "$HERE/race_report.py" watch "$CUR_DIR/train/metrics.jsonl" "${WARM[$CUR_NET]}" \
    "${ITERS[$CUR_NET]}" "$CUR_DIR/window.json" "$@" || true
}
LAB_ON_START=start_watch

FAILED=0
net_order=0
T0=$SECONDS
for CUR_NET in "${NET_LIST[@]}"; do
  for CUR_P in "${PROC_LIST[@]}"; do
    CUR_T=${THREADS:-$((CORES / CUR_P > 0 ? CORES / CUR_P : 1))}
    CUR_B=$((BATCH[$CUR_NET] / CUR_P))
    for CUR_M in "${METHOD_LIST[@]}"; do
      CUR_DIR="$OUT/runs/$CUR_NET.P$CUR_P.$CUR_M"
      rm -rf "$CUR_DIR"
      mkdir -p "$CUR_DIR/store"
      [[ "$CUR_M" == ddp* ]] && mkdir -p "$CUR_DIR/train"
      fn=tg_rank
      [[ "$CUR_M" == ddp* ]] && fn=ddp_rank
      echo "race: $CUR_NET, P = $CUR_P, $CUR_M: ${ITERS[$CUR_NET]} steps of batch $CUR_B per rank, $CUR_T thread(s) ..." >&2
      rc=0
      lab_run_ranks "$CUR_P" "$CUR_DIR/rank" "$TIMEOUT" "$fn" || rc=$?
      if ((rc != 0)); then
        FAILED=1
        echo "race.sh: $CUR_NET P=$CUR_P $CUR_M failed (exit $rc$( ((rc == 124)) && echo ': timed out')); last lines of the rank logs:" >&2
        tail -n 3 "$CUR_DIR"/rank*.err >&2 || true
      fi
      cat >"$CUR_DIR/meta.json" <<J
{"net": "$CUR_NET", "net_order": $net_order, "procs": $CUR_P, "ranks_per_node": $RPN, "method": "$CUR_M", "threads": $CUR_T,
 "batch_total": ${BATCH[$CUR_NET]}, "batch_per_rank": $CUR_B, "iterations": ${ITERS[$CUR_NET]},
 "warmup": ${WARM[$CUR_NET]}, "rate": "$RATE", "device": "$DEVICE", "rc": $rc, "dir": "$CUR_DIR"}
J
    done
  done
  net_order=$((net_order + 1))
done

# The model: one process per node, both links at LINK_GBIT, T_c and T_enc measured here with the
# same threads per process and per-rank batch (a single process: P = 4 on 2 cores oversubscribes
# the runs, not the model).
if [[ "$DEVICE" == cuda && "$RPN" -eq 1 ]]; then
  # On the GPU: one rank per "node" on a LINK_GBIT link (a cluster file), the compute and encode
  # times of the per-rank batch measured by bench_train on the same GPU (forward + backward +
  # update; TernGrad's compression of one worker).
  cat >"$OUT/cluster.toml" <<T
name = "race"
description = "one rank per node on the emulated $LINK_GBIT Gbit/s link, compute measured on this GPU"
gpus_per_node = 1
full_duplex = true
[intra]
bandwidth_gbit = 100.0
latency_us = 5.0
[inter]
bandwidth_gbit = $LINK_GBIT
latency_us = 50.0
T
  for p in "${PROC_LIST[@]}"; do
    : >"$OUT/model.P$p.jsonl"
    for n in "${NET_LIST[@]}"; do
      b=$((BATCH[$n] / p))
      fp=$("$BENCH_TRAIN" --device cuda --net "$n" --batch "$b" --seconds 1 2>/dev/null | grep '"kind": "step"' | head -1) || true
      tg=$("$BENCH_TRAIN" --device cuda --net "$n" --batch "$b" --seconds 1 --compression terngrad 2>/dev/null | grep '"kind": "step"' | head -1) || true
      ct=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["step_ms"] / 1e3)' "$fp" 2>/dev/null) || ct=
      et=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["compress_ms"] / 1e3)' "$tg" 2>/dev/null) || et=
      if [[ -z "$ct" || -z "$et" ]]; then
        FAILED=1
        echo "race.sh: bench_train on the GPU gave no step time for $n (batch $b)" >&2
        continue
      fi
      "$TERNGRAD" perf-model --json --cluster "$OUT/cluster.toml" --networks "$n" --batch "$n=$b" \
        --gpus "$p" --topology ring --compute-time "$n=$ct" --encode-time "$n=$et" \
        >>"$OUT/model.P$p.jsonl" 2>"$OUT/model.P$p.err" ||
        { FAILED=1; echo "race.sh: perf-model failed for $n P = $p:" >&2; tail -n 3 "$OUT/model.P$p.err" >&2; }
    done
  done
fi
for p in "${PROC_LIST[@]}"; do
  [[ "$DEVICE" == cuda || "$RPN" -gt 1 ]] && break
  t=${THREADS:-$((CORES / p > 0 ? CORES / p : 1))}
  args=()
  for n in "${NET_LIST[@]}"; do args+=(--batch "$n=$((BATCH[$n] / p))"); done
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$TERNGRAD" perf-model --json --calibrate \
    --link-gbit "$LINK_GBIT" --networks "$NETS" "${args[@]}" --gpus "$p" --topology ring \
    >"$OUT/model.P$p.jsonl" 2>"$OUT/model.P$p.err" ||
    { FAILED=1; echo "race.sh: perf-model --calibrate failed for P = $p:" >&2; tail -n 3 "$OUT/model.P$p.err" >&2; }
done
echo "race: runs took $((SECONDS - T0)) s" >&2

"$PY" "$HERE/race_report.py" table "$OUT" || FAILED=1
exit "$FAILED"
