#!/usr/bin/env bash
# CUDA on demand (issue 16 item 4): the terngrad binary names none of the CUDA toolkit or NCCL
# libraries as DT_NEEDED (it opens cuBLAS and NCCL with dlopen, and the static CUDA runtime opens
# the driver, when a CUDA device is first asked for), and `terngrad --help` opens none of them.
# In a CUDA build without a usable GPU (this machine), asking for one is a one-line error, exit 1.
# Usage: cuda_on_demand_test.sh TERNGRAD_BINARY CMAKE_CACHE   (about 0.1 s)
set -uo pipefail
BIN=$1
CACHE=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
CUDA_LIBS='lib(cuda|cudart|cublas|cublasLt|curand|nccl)\.so'

needed=$(readelf -d "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p') || fail "readelf -d $BIN failed"
[ -n "$needed" ] || fail "readelf found no NEEDED entries in $BIN"
if grep -Eq "^$CUDA_LIBS" <<< "$needed"; then
  fail "$BIN needs $(grep -E "^$CUDA_LIBS" <<< "$needed" | tr '\n' ' ')at start-up (expected none: they are opened on demand)"
fi

# What the loader opens for --help (LD_DEBUG=libs logs every library it looks for).
opened=$(LD_DEBUG=libs "$BIN" --help 2>&1 >/dev/null | grep -Eo "find library=$CUDA_LIBS[.0-9]*" | sort -u)
[ -z "$opened" ] || fail "terngrad --help opens $(tr '\n' ' ' <<< "$opened")"

if grep -q '^TG_ENABLE_CUDA:BOOL=ON' "$CACHE"; then
  out=$("$BIN" train --device cuda --set train.iterations=1 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "PASS (a CUDA device is present: the no-device path was not exercised)"
    exit 0
  fi
  [ "$rc" -eq 1 ] || fail "terngrad train --device cuda without a GPU exited $rc (expected 1): $out"
  [ "$(wc -l <<< "$out")" -eq 1 ] || fail "expected a one-line error, got: $out"
  grep -qi "cuda" <<< "$out" || fail "the error does not mention CUDA: $out"
fi
echo "PASS: no CUDA library NEEDED or opened by --help"
