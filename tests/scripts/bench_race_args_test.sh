#!/usr/bin/env bash
# bench/race.sh, bench/netns_train.sh, bench/ddp_train.py and bench/race_report.py without root,
# torch or a network: --help exits 0 and documents the options; usage errors exit 2 with a
# one-line message naming the bad value, before any namespace is touched.
# Usage: bench_race_args_test.sh SOURCE_DIR
set -uo pipefail
SRC=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }

expect() { # expect RC PATTERN command...: the exit status and a pattern in stdout+stderr
  local want=$1 pat=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want: $out"
  grep -q -- "$pat" <<<"$out" || fail "'$*' printed no '$pat': $out"
}

R="bash $SRC/bench/race.sh"
expect 0 "--methods LIST" $R --help
expect 0 "ddp-fp16" $R -h
expect 2 "unknown argument '--bogus'" $R --bogus
expect 2 "--procs needs a value" $R --procs
expect 2 "'0' is not in 1 .. 64" $R --procs 0
expect 2 "not a multiple of P = 3" $R --procs 3 --nets lenet
expect 2 "'vgg' is not one of" $R --nets vgg
expect 2 "'fp8' is not one of" $R --methods fp8
expect 2 "expected NET=POSITIVE_INT, got 'lenet=x'" $R --batch lenet=x
expect 2 "must be a multiple of --warmup" $R --nets lenet --iterations lenet=25
expect 2 "--threads must be a positive integer" $R --threads 0
expect 2 "no terngrad binary" $R --nets lenet --methods none --terngrad /nonexistent/terngrad
expect 0 "ddp-grace" $R --help
expect 0 "--terngrad-torch DIR" $R --help
# The hook's package is looked for before anything runs (where torch is installed at all).
if /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  expect 2 "no terngrad_torch in /nonexistent" $R --nets lenet --methods ddp-terngrad \
    --terngrad /bin/true --python /usr/bin/python3 --terngrad-torch /nonexistent
fi

N="bash $SRC/bench/netns_train.sh"
expect 0 "--methods LIST" $N --help
expect 2 "unknown argument '--bogus'" $N --bogus
expect 2 "no terngrad binary" $N --terngrad /nonexistent/terngrad

expect 2 "is not in 0 .. --world-size" "$PY" "$SRC/bench/ddp_train.py" --rank 2 --world-size 2 --store /nonexistent
expect 2 "--warmup" "$PY" "$SRC/bench/ddp_train.py" --rank 0 --world-size 1 --store x --iterations 5 --warmup 5
expect 2 "race_report.py watch" "$PY" "$SRC/bench/race_report.py"
echo "PASS"
