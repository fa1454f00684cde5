# The emulated-link lab of bench/netns_train.sh and bench/race.sh, sourced by both (not run).
#
# lab_up N RATE     one bridge and N network namespaces; in namespace r, interface tg0 (the same
#                   name on every rank, so one comm.interface / GLOO_SOCKET_IFNAME value serves all)
#                   at 10.214.0.(r+1)/24, its veth pair shaped with tc tbf to RATE in both
#                   directions (as bench_comm --link does). Installs an EXIT trap that removes it.
# lab_down          stops ranks still running, removes the namespaces and the bridge (the trap
#                   calls it; safe to repeat).
# lab_ns R          the name of namespace R.
# LAB_RANKS_PER_NS  ranks per namespace (default 1): rank r runs in namespace r / LAB_RANKS_PER_NS,
#                   so a namespace is a "node" whose ranks talk over its loopback and reach the
#                   other nodes over its shaped tg0 only.
# lab_run_ranks P PREFIX TIMEOUT FN
#                   runs `FN r` for r = 0 .. P-1, rank r in its namespace, stdout and stderr to
#                   PREFIX<r>.out / .err. FN must end by `lab_exec "$1" command ...`. Each rank
#                   is killed after TIMEOUT seconds; when one rank fails, the others are stopped at
#                   once instead of waiting for their collectives to time out. The ranks' pids are
#                   in LAB_PIDS while they run and LAB_ON_START (a command, optional) is run with
#                   them as arguments once all are started. Returns 0, or the first failing rank's
#                   exit status (124 on a timeout).
# Needs root and iproute2 (ip, tc); bash >= 5.1 (wait -n -p).

LAB_TAG="tgl$$"
LAB_N=0
LAB_RANKS_PER_NS=${LAB_RANKS_PER_NS:-1}
LAB_PIDS=()
LAB_ON_START=

lab_ns() { echo "${LAB_TAG}_$1"; }

lab_down() {
  local r p
  for p in "${LAB_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for ((r = 0; r < LAB_N; ++r)); do ip netns del "$(lab_ns "$r")" 2>/dev/null || true; done
  ip link del "${LAB_TAG}br" 2>/dev/null || true
  LAB_N=0
}

lab_up() {
  local n_ranks="$1" rate="$2" r n burst=$((128 * 1024))
  trap lab_down EXIT
  trap 'exit 130' INT TERM
  ip link add "${LAB_TAG}br" type bridge
  ip link set "${LAB_TAG}br" up
  for ((r = 0; r < n_ranks; ++r)); do
    n=$(lab_ns "$r")
    LAB_N=$((r + 1))
    ip netns add "$n"
    ip link add "${LAB_TAG}i$r" type veth peer name "${LAB_TAG}h$r"
    ip link set "${LAB_TAG}i$r" netns "$n"
    ip -n "$n" link set "${LAB_TAG}i$r" name tg0
    ip link set "${LAB_TAG}h$r" master "${LAB_TAG}br" up
    ip -n "$n" addr add "10.214.0.$((r + 1))/24" dev tg0
    ip -n "$n" link set tg0 up
    ip -n "$n" link set lo up
    tc -n "$n" qdisc add dev tg0 root tbf rate "$rate" burst "$burst" latency 50ms
    tc qdisc add dev "${LAB_TAG}h$r" root tbf rate "$rate" burst "$burst" latency 50ms
  done
}

# Within FN: replaces FN's subshell by the rank's process in its namespace, under a timeout, so
# the pid the caller holds is the rank's (its /proc/PID/net/dev is the namespace's counters).
lab_exec() {
  local r="$1"
  shift
  exec ip netns exec "$(lab_ns $((r / LAB_RANKS_PER_NS)))" timeout -k 10 "$LAB_TIMEOUT" "$@"
}

lab_run_ranks() {
  local procs="$1" prefix="$2" fn="$4" r pid rc=0 st
  LAB_TIMEOUT="$3"
  LAB_PIDS=()
  for ((r = 0; r < procs; ++r)); do
    ("$fn" "$r") >"$prefix$r.out" 2>"$prefix$r.err" &
    LAB_PIDS+=($!)
  done
  local helper=
  if [[ -n "$LAB_ON_START" ]]; then
    $LAB_ON_START "${LAB_PIDS[@]}" &
    helper=$!
  fi
  local running=("${LAB_PIDS[@]}") still p
  while ((${#running[@]} > 0)); do
    st=0
    wait -n -p pid "${running[@]}" || st=$?
    still=()
    for p in "${running[@]}"; do [[ "$p" == "$pid" ]] || still+=("$p"); done
    running=("${still[@]}")
    if ((st != 0 && rc == 0)); then
      rc=$st
      for p in "${running[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    fi
  done
  if [[ -n "$helper" ]]; then wait "$helper" || true; fi
  LAB_PIDS=()
  return "$rc"
}
