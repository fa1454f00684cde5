#!/usr/bin/env bash
# scripts/gpu-bundle.sh and scripts/gpu-check.sh, as far as a machine without a GPU allows:
#   1. the bundle is built from this build and holds what the GPU check needs, under 56 MiB
#      (gpu-bundle.sh's default limit: 64 MiB travel in all, the tracked tree beside it);
#   2. copied to a clean folder and run under `env -i` (no inherited library path), gpu-check.sh
#      unpacks it, resolves every library (each non-glibc, non-CUDA one from the bundle), checks
#      that every CUDA test executable starts, says "no CUDA device" for the GPU steps, and exits 3;
#   3. --rehearse-on-cpu runs steps c-h with the CPU in the GPU's place: each must pass (h builds
#      python/terngrad_torch from the bundle's src/ and third_party/ against /usr/bin/python3's
#      torch, CPU-only, about a minute on 2 cores, and runs gpu_hook_check.py's cases on CPU tensors);
#   4. broken input: a bundle without its payload exits 2 naming the file; a CPU-only build dir
#      is refused by gpu-bundle.sh with a one-line error.
# Usage: gpu_bundle_test.sh SOURCE_DIR BUILD_DIR   (ctest passes both; exit 77 = skipped)
set -uo pipefail
SRC=$1
BUILD=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! grep -q '^TG_ENABLE_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  echo "SKIP: a CPU-only build has no GPU bundle"
  exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-bundle-test.XXXXXX")
trap 'rm -rf "$T"' EXIT

# 1. Build the bundle.
bash "$SRC/scripts/gpu-bundle.sh" --out "$T/made/gpu-bundle" --build-dir "$BUILD" > "$T/bundle.out" 2> "$T/bundle.err" ||
  fail "gpu-bundle.sh exited $?: $(tail -3 "$T/bundle.err")"
B=$T/made/gpu-bundle
grep -q "^gpu-bundle: .*MiB" "$T/bundle.out" || fail "gpu-bundle.sh printed no size line: $(cat "$T/bundle.out")"
bytes=$(du -sb "$B" | cut -f1)
[ "$bytes" -le $((56 * 1048576)) ] || fail "bundle is $bytes bytes, over 56 MiB"
for f in gpu-check.sh gpu_check.py payload.tar.xz MANIFEST.txt; do
  [ -f "$B/$f" ] || fail "bundle lacks $f"
done
for f in bin/terngrad bin/bench_train bin/bench_ternary bin/bench_conv2d bin/device_info \
         bench/pytorch_step.py configs/lenet_mnist.toml data/mnist/train-images-idx3-ubyte.gz \
         lib/libopenblas.so.0 lib/libgloo.so.0 src/CMakeLists.txt src/python/setup.py \
         src/tests/python/gpu_hook_check.py third_party/include/cblas.h \
         third_party/include/openssl/evp.h third_party/include/nlohmann/json.hpp; do
  grep -q " $f\$" "$B/MANIFEST.txt" || fail "MANIFEST.txt does not list $f"
done
want=$(find "$SRC/tests" -name '*_cuda_test.cpp' | wc -l)
have=$(grep -c ' tests/.*_cuda_test$' "$B/MANIFEST.txt")
[ "$have" -eq "$want" ] || fail "bundle holds $have CUDA test executables, the tree has $want"
if grep -Eq ' lib/(libcuda|libcudart|libcublas|libcurand|libnccl|libc\.so|libm\.so)' "$B/MANIFEST.txt"; then
  fail "the bundle carries a glibc, driver or CUDA toolkit library: $(grep -E ' lib/(libcu|libnccl|libc\.|libm\.)' "$B/MANIFEST.txt")"
fi

# 2. Copied elsewhere, run with an empty environment: no GPU here, so exit 3.
mkdir -p "$T/clean"
cp -r "$B" "$T/clean/"
(cd "$T/clean" && env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T" bash gpu-bundle/gpu-check.sh \
    --results "$T/res" > "$T/check.out" 2> "$T/check.err")
rc=$?
[ "$rc" -eq 3 ] || fail "gpu-check.sh without a GPU exited $rc, expected 3: $(tail -5 "$T/check.err")"
grep -q "NO CUDA DEVICE" "$T/res/summary.md" || fail "summary.md does not say NO CUDA DEVICE"
python3 - "$T/res/results.jsonl" "$want" <<'PY' || exit 1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
want = int(sys.argv[2])
def fail(m):
    print("FAIL:", m, file=sys.stderr); sys.exit(1)
libs = next(r for r in recs if r.get("kind") == "libraries")
if libs["unresolved"] or libs["loader_problems"]:
    fail(f"unresolved libraries: {libs['unresolved']} {libs['loader_problems']}")
glibc = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "libresolv.so",
         "libstdc++.so", "libgcc_s.so", "ld-linux", "linux-vdso")
outside = {n: p for n, p in libs["other_libs"].items() if not n.startswith(glibc)}
if outside:
    fail(f"libraries resolved outside the bundle (Debian's, not the bundle's): {outside}")
for n in ("libopenblas.so.0", "libgloo.so.0", "libtomlplusplus.so.3", "libgomp.so.1"):
    if n not in libs["bundle_libs"]:
        fail(f"{n} does not come from the bundle: {libs['bundle_libs']}")
steps = {r["step"]: r for r in recs if "status" in r and r.get("step") in "abcdef"}
for s in "acdef":
    if steps.get(s, {}).get("status") != "no-gpu":
        fail(f"step {s}: {steps.get(s)} (expected no-gpu)")
b = next(r for r in recs if r.get("kind") == "load_check")
if b["executables"] != want or b["failed"]:
    fail(f"load check: {b}")
if "no CUDA device" not in steps["a"]["note"]:
    fail(f"step a note: {steps['a']['note']}")
PY

# 3. The rehearsal: steps c-i with the CPU standing in (i: its training-step part, LeNet), each
#    must pass. A slow machine may spend gpu-check's time budget before a step or a run: what the
#    budget cut is recorded as skipped and not checked (a budget shortens the rehearsal, it never
#    fails it); everything that ran is.
(cd "$T/clean" && env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T" OMP_NUM_THREADS=1 bash gpu-bundle/gpu-check.sh \
    --results "$T/rehearsal" --rehearse-on-cpu --iterations 20 --only a,c,e,f,g,h,i > "$T/rh.out" 2> "$T/rh.err")
rc=$?
[ "$rc" -eq 3 ] || fail "the rehearsal exited $rc, expected 3 (no device): $(tail -5 "$T/rh.err")"
python3 - "$T/rehearsal/results.jsonl" <<'PY' || exit 1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def fail(m):
    print("FAIL:", m, file=sys.stderr); sys.exit(1)
steps = {r["step"]: r for r in recs if "status" in r and r.get("step") in "abcdefghi"}
ran = set()
for s in "cefghi":
    st = steps.get(s, {})
    if st.get("status") == "skipped" and "budget" in st.get("why", ""):
        print(f"rehearsal step {s}: skipped, the time budget was spent (not checked)")
        continue
    if st.get("status") != "pass":
        fail(f"rehearsal step {s}: {st or 'no record'}")
    ran.add(s)
train = [r for r in recs if r.get("kind") == "train"]
if "c" in ran and (len(train) != 2 or not all(r["cuda"]["ok"] and r["cpu"]["ok"] and r["gpu_deterministic"] for r in train)):
    fail(f"rehearsal training records: {train}")
one = [r for r in recs if r.get("kind") == "nccl_train"]
if "f" in ran and (len(one) != 2 or one[0]["params_sha256"] != one[1]["params_sha256"] or one[1]["comm_backend"] != "gloo"):
    fail(f"rehearsal one-rank runs: {one}")
loader = [r for r in recs if r.get("source") == "bench_data"]
alex = [r for r in recs if r.get("kind") == "alexnet_input"]
if "g" in ran and (len(loader) != 3 or not all(r["images_per_sec"] > 0 for r in loader) or len(alex) != 2):
    fail(f"rehearsal JPEG input records: {loader} {alex}")
build = [r for r in recs if r.get("kind") == "extension_build"]
if "h" in ran and (len(build) != 1 or not build[0]["ok"] or build[0]["cuda"] != "OFF" or
                  "third_party" not in build[0]["found"].get("nlohmann_json_DIR", "")):
    fail(f"rehearsal extension build (CPU-only, the bundle's nlohmann-json): {build}")
cases = {r["case"]: r for r in recs if r.get("step") == "h" and "case" in r}
for c in ("one_rank", "two_ranks_gloo") if "h" in ran else ():
    if cases.get(c, {}).get("status") != "pass" or cases[c]["bit_identical"] != cases[c]["of"]:
        fail(f"rehearsal hook case {c}: {cases.get(c)}")
# Debian's torch 1.13 Gloo has no bf16 broadcast: unsupported there, pass on a newer torch.
if "h" in ran and cases.get("bf16_autocast", {}).get("status") not in ("pass", "unsupported"):
    fail(f"rehearsal hook case bf16_autocast: {cases.get('bf16_autocast')}")
if "i" not in ran:
    sys.exit(0)
# Step i: the comparison lines, as bench/gpu-results/ keeps them (LeNet, both precisions; torch
# eager where a torch is found).
import os
lines = [json.loads(l) for l in open(os.path.join(os.path.dirname(sys.argv[1]), "gpu-compare.jsonl"))]
need = {"net", "batch", "precision", "terngrad_ms", "pytorch_eager_ms", "pytorch_compile_ms", "gpu",
        "commit"}
# Step i's runs go in a fixed order and stop where the budget is spent: what ran is a prefix.
if not set(l["precision"] for l in lines) <= {"fp32", "tf32"} or \
        not all(need <= set(l) and l["net"] == "lenet" and l["terngrad_ms"] > 0 and l["rehearsal"]
                for l in lines):
    fail(f"rehearsal gpu-compare.jsonl: {lines}")
order = ["fp32", "tf32", "tf32_igemm", "igemm", "igemm_rerun"]
prec = [r for r in recs if r.get("kind") == "lenet_precision"]
if len(prec) != 1 or list(prec[0]["accuracy"]) != order[:len(prec[0]["accuracy"])] or \
        ("igemm_rerun" in prec[0]["accuracy"] and not prec[0].get("igemm_deterministic")):
    fail(f"rehearsal LeNet precision runs: {prec}")
if len(prec[0]["accuracy"]) < len(order) or len(lines) < 2:
    print(f"rehearsal step i: {list(prec[0]['accuracy'])} and {len(lines)} comparison lines ran "
          "before the time budget was spent")
PY
[ -f "$T/rehearsal/runs.tar.gz" ] || fail "the rehearsal wrote no runs.tar.gz"

# 4. Broken input.
mkdir -p "$T/broken" && cp "$B/gpu-check.sh" "$B/gpu_check.py" "$T/broken/"
env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T" bash "$T/broken/gpu-check.sh" --results "$T/res-broken" > /dev/null 2> "$T/broken.err"
rc=$?
[ "$rc" -eq 2 ] || fail "a bundle without payload.tar.xz exited $rc, expected 2"
grep -q "payload.tar.xz is missing" "$T/broken.err" || fail "no message naming the missing payload: $(cat "$T/broken.err")"
mkdir -p "$T/cpu-build" && echo 'TG_ENABLE_CUDA:BOOL=OFF' > "$T/cpu-build/CMakeCache.txt"
bash "$SRC/scripts/gpu-bundle.sh" --out "$T/x" --build-dir "$T/cpu-build" > /dev/null 2> "$T/cpu.err"
rc=$?
[ "$rc" -eq 1 ] || fail "gpu-bundle.sh on a CPU-only build exited $rc, expected 1"
[ "$(wc -l < "$T/cpu.err")" -eq 1 ] && grep -q "CPU-only build" "$T/cpu.err" ||
  fail "gpu-bundle.sh on a CPU-only build: expected one line naming it, got: $(cat "$T/cpu.err")"
echo "PASS: bundle $((bytes / 1048576)) MiB; gpu-check: no device -> exit 3; rehearsal passed; broken inputs refused"
