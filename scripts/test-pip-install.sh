#!/usr/bin/env bash
# Installs python/terngrad_torch as README "Using TernGrad from PyTorch" says, and tests the
# installed package (ctest: python_pip_install, issue 33 item 4):
#   1. a fresh venv in a temporary directory that sees the system's torch
#      (python3 -m venv --system-site-packages), then `pip install --no-build-isolation ./python`
#      from the repository root: no network, nothing but the system's setuptools and torch;
#   2. the pip build's CMake found none of Gloo, toml++, CLI11, GoogleTest (its CMakeCache.txt);
#   3. the installed module needs neither libgloo nor libtomlplusplus: not among its own NEEDED
#      entries, and ldd lists no such library that torch's own libtorch_python does not already
#      bring (Debian's libtorch_cpu links libgloo itself, for torch.distributed's Gloo backend);
#   4. from outside the checkout, with no PYTHONPATH: `import terngrad_torch` loads the venv's copy,
#      and the use cases of tests/python/test_terngrad_torch.py and test_terngrad_torch_state.py
#      pass against it (a SKIPPED line there is a failure here): DDP training with the hook, bad
#      options, error feedback, saved state and resume, fp16/bf16 buckets. Not the bit-for-bit
#      sweep against the library (SameNumbersAsTheLibrary, 14 s of the ~25): the installed module
#      is compiled from the same sources, and ctest's python_terngrad_torch runs it on the build.
# The extension's build is CPU-only where torch has no CUDA (python/setup.py). ccache, when
# installed, serves the compiles (CMAKE_CXX_COMPILER_LAUNCHER).
#
# Usage: scripts/test-pip-install.sh [PYTHON]   (default /usr/bin/python3: a Python that imports
#        torch and is not itself a venv)
# Exit: 0 passed (or "SKIPPED: ..." when PYTHON cannot import torch), 1 a check failed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${1:-/usr/bin/python3}"

if ! env -u PYTHONPATH "$py" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: $py cannot import torch (Debian: apt-get install python3-torch libtorch-dev)"
  exit 0
fi
fail() {
  echo "test-pip-install: FAILED: $*" >&2
  exit 1
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tg-pip-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH PYTHONHOME
export TERNGRAD_BUILD_DIR="$tmp/build"
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi

# ---- 1. install ------------------------------------------------------------------------------
"$py" -m venv --system-site-packages "$tmp/venv"
vpy="$tmp/venv/bin/python"
start=$(date +%s)
(cd "$repo" && "$vpy" -m pip install --no-build-isolation --no-index --no-cache-dir ./python) \
  >"$tmp/pip.log" 2>&1 || {
  tail -n 60 "$tmp/pip.log" >&2
  fail "pip install ./python (log above)"
}
echo "test-pip-install: pip install ./python took $(($(date +%s) - start)) s"

# ---- 2. what CMake looked for ----------------------------------------------------------------
for pkg in Gloo tomlplusplus CLI11 GTest; do
  if grep -q "^${pkg}_DIR:PATH=/" "$tmp/build/CMakeCache.txt"; then
    fail "the pip build found $pkg ($(grep "^${pkg}_DIR:" "$tmp/build/CMakeCache.txt"))"
  fi
done

# ---- 3. what the installed module links ------------------------------------------------------
cd "$tmp"  # outside the checkout: nothing there shadows the installed package
so="$("$vpy" -c 'import terngrad_torch._C as c; print(c.__file__)')"
case "$so" in
  "$tmp/venv/"*) ;;
  *) fail "terngrad_torch._C was imported from $so, not from the venv $tmp/venv" ;;
esac
echo "test-pip-install: installed $so"
echo "NEEDED:"
readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/  \1/p' | tee "$tmp/needed"
if grep -Ei 'gloo|toml|cli11' "$tmp/needed"; then fail "the module links the libraries above"; fi
ldd "$so" >"$tmp/ldd" || fail "ldd $so"
echo "ldd:"
sed 's/^/  /' "$tmp/ldd"
torch_python="$(sed -n 's/^[[:space:]]*libtorch_python[^ ]* => \([^ ]*\).*/\1/p' "$tmp/ldd")"
[ -n "$torch_python" ] || fail "ldd does not list libtorch_python"
{ ldd "$torch_python" | awk '{print $1}'; basename "$torch_python"; } | sort -u >"$tmp/torch-libs"
awk '{print $1}' "$tmp/ldd" | sort -u | comm -23 - "$tmp/torch-libs" >"$tmp/ours"
ours="$(tr '\n' ' ' <"$tmp/ours")"
echo "libraries beyond those libtorch_python loads itself: ${ours:-none}"
if grep -Ei 'gloo|toml' "$tmp/ours"; then fail "the module brings the libraries above"; fi

# ---- 4. the package's tests against the installed copy ---------------------------------------
for t in "test_terngrad_torch ThroughDDP BadOptions" \
  "test_terngrad_torch_state ErrorFeedbackIsTheLibrarys Resume MismatchedState LowPrecisionBuckets"; do
  read -r file classes <<<"$t"
  echo "test-pip-install: $file $classes"
  # shellcheck disable=SC2086 # the class names are words
  OMP_WAIT_POLICY=passive "$vpy" "$repo/tests/python/$file.py" $classes 2>&1 | tee "$tmp/$file.log" ||
    fail "$file.py against the installed package"
  if grep -q 'SKIPPED:' "$tmp/$file.log"; then
    fail "$file.py skipped itself against the installed package"
  fi
done
echo "test-pip-install: passed"
