#!/usr/bin/env python3
"""terngrad GPU check: runs from an unpacked bundle (scripts/gpu-bundle.sh) on a GPU machine.

Usage: bash gpu-check.sh [--results DIR] [--work DIR] [--budget SECONDS] [--iterations N]
                         [--only a,b,c,d,e,f,g,h,i,j]

Steps, in order, each under its own time limit (and all under --budget, default 510 s) so one
hang cannot eat the rest; a failed step is recorded with why, and the next one runs:
  a  nvidia-smi; the driver, runtime, cuBLAS, cuRAND and NCCL versions and the device properties
     as terngrad reads them (bin/device_info); whether network namespaces and tc shaping can be
     made (for issue 33's race over a shaped link), in a namespace of its own
  b  every CUDA test executable (GoogleTest XML, pass/fail/skip counts)
  c  LeNet/MNIST on --device cuda, fp32 and TernGrad with 8 emulated workers: accuracy, img/s,
     params_sha256 against the same runs on this machine's CPU (equal, or the first step whose
     loss differs), and a second GPU run of each (run-to-run determinism, and img/s without the
     per-step loss read-back)
  d  bench_train --device cuda (LeNet, CifarNet, AlexNet) beside bench/pytorch_step.py on the same
     GPU, eager and torch.compile'd: ms/step each
  e  bench_ternary --device cuda: ternarize+pack and unpack-accumulate GB/s against a device copy,
     and each net's gradient as one batch against per-tensor calls
  f  a one-rank NCCL training run (--rank 0 --world-size 1 --rendezvous), whose params_sha256
     must equal the one-process run's, with the reducer's buckets overlapped with backward on
     the side stream (comm_overlap true); with several GPUs also --nproc <GPUs> over NCCL
  g  JPEG input (issue 32): a synthetic ImageNet-layout folder (terngrad data synth-folder),
     bench_data --image-folder on 1 thread and on every core (full and fast decode; target
     >= 8,000 img/s with alexnet preprocessing), then AlexNet b128 on the GPU fed from that folder
     beside the same run on synthetic data (target: step time within 5%)
  h  the PyTorch extension (python/terngrad_torch) on this machine: first what it has for the
     build (gcc/g++/c++, nvcc, cmake, the Python with torch, torch.version.cuda, CUDA available,
     torch's CMake package, pybind11 and Python headers); then python/setup.py builds it from the
     bundle's src/ against that torch (CUDA when torch has CUDA and nvcc is found, as setup.py
     decides; OpenBLAS/OpenSSL/nlohmann-json from the bundle's third_party/); then
     src/tests/python/gpu_hook_check.py runs the DDP hook on CUDA tensors: one rank over NCCL
     against the library's CPU aggregation, two processes sharing the GPU over Gloo, a bf16 model
     under autocast. On a GPU machine h comes last and may find the --budget spent: --only a,h
     runs it alone (a build of ~1-3 min with every core, the hook cases under a minute)
  i  (issue 31; only with --only, e.g. --only a,i, as a-h fill the default budget) the GPU
     engine against PyTorch: LeNet/MNIST trained in strict fp32, in TF32 with cuBLAS and with the
     implicit GEMM's tensor-core twins (target: accuracy within 0.1 point) and twice with
     cuda.conv_algo = igemm (same params_sha256); bench_conv2d --algos times every convolution algorithm on every
     conv layer and pass of the five nets beside bench/pytorch_conv.py's cuDNN (fp32 and TF32);
     then bench_train with cuda.conv_algo = autotune on LeNet, CifarNet, AlexNet, GoogLeNet and
     VGG-A beside bench/pytorch_step.py eager and torch.compile, strict fp32 and TF32 on both
     sides; gpu-compare.jsonl has one line per net and precision (net, batch, precision,
     terngrad_ms, pytorch_eager_ms, pytorch_compile_ms, gpu, commit, the conv choices): commit
     it as bench/gpu-results/<date>-<gpu>.jsonl
  j  (issue 33 item 6; only with --only, best --only a,h,j so terngrad_torch is built) the GPU
     race: bench/race.sh --device cuda, AlexNet b128 as two ranks sharing the GPU, Gloo over
     veths shaped to 1 Gbit/s: terngrad fp32 and TernGrad, DDP fp32, DDP's fp16 hook,
     terngrad_torch with and without error feedback, and perf-model's figure for the setting from
     times measured on the GPU; as root directly, else in a user namespace when step a found one
     can shape a link; "not-possible" with why when neither

Results go to --results (default $OUT if set, else ./gpu-results), at most eight files:
results.jsonl (one JSON object per finding), summary.md, log.txt (every command and its output),
gpu-compare.jsonl (step i),
gtest-xml.tar.gz, runs.tar.gz (each training run's summary.json and metrics.jsonl).

Exit status: 0 every step passed; 1 a step failed; 2 the bundle is broken (cannot unpack, a
library missing); 3 no usable CUDA device (the GPU steps are skipped, start-up still checked).
"""

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

EXIT_OK, EXIT_FAILED, EXIT_BUNDLE, EXIT_NO_GPU = 0, 1, 2, 3

# Libraries the GPU machine supplies: the CUDA driver, the toolkit's runtime/cuBLAS/cuRAND, NCCL.
MACHINE_LIBS = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|curand|nccl|nvidia-[\w-]+)\.so")


def now():
    return time.monotonic()


def kill_group(p):
    """SIGKILL p's whole process group (it was started in a session of its own)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def json_lines(text):
    """The JSON objects among a program's output lines (others, e.g. notes, are skipped)."""
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


class Check:
    def __init__(self, args):
        self.t0 = now()
        self.budget = args.budget
        self.bundle = os.path.dirname(os.path.abspath(__file__))
        self.results = os.path.abspath(args.results)
        os.makedirs(self.results, exist_ok=True)
        for name in ("results.jsonl", "summary.md", "log.txt", "gtest-xml.tar.gz", "runs.tar.gz",
                 "gpu-compare.jsonl"):
            p = os.path.join(self.results, name)
            if os.path.exists(p):
                os.remove(p)
        self.own_work = not args.work  # a temp folder of ours is removed at the end
        self.work = args.work or tempfile.mkdtemp(prefix="tg-gpu-check.")
        os.makedirs(self.work, exist_ok=True)
        self.iterations = args.iterations
        self.only = set(args.only.split(",")) if args.only else set("abcdefgh")  # i: --only
        self.log_f = open(os.path.join(self.results, "log.txt"), "w")
        self.jsonl = open(os.path.join(self.results, "results.jsonl"), "w")
        self.steps = []  # (letter, title, status, seconds, one-line note)
        self.summary = {}  # per step: markdown lines
        self.failed = False
        self.no_gpu = False
        self.env = dict(os.environ)
        self.python = None
        self.gpus = 0
        # --rehearse-on-cpu: steps c-h with the CPU standing in for the GPU (Gloo for NCCL), so
        # this script's own logic is tested on a machine without one. Never a GPU result.
        self.rehearsal = args.rehearse_on_cpu
        self.dev = "cpu" if self.rehearsal else "cuda"
        self.gpu_name = "cpu (rehearsal)" if self.rehearsal else ""
        self.netns = {}  # step a's probe
        self.ext_pythonpath = None  # step h's terngrad_torch build, for step j
        self.commit = "unknown"

    # ---- output ---------------------------------------------------------------------------------
    def log(self, text):
        self.log_f.write(text if text.endswith("\n") else text + "\n")
        self.log_f.flush()

    def say(self, text):
        print(f"[gpu-check {now() - self.t0:6.1f}s] {text}", file=sys.stderr, flush=True)
        self.log(f"## {text}")

    def record(self, **rec):
        rec.setdefault("t", round(now() - self.t0, 2))
        self.jsonl.write(json.dumps(rec, sort_keys=False) + "\n")
        self.jsonl.flush()

    def left(self):
        return self.budget - (now() - self.t0)

    # ---- processes ------------------------------------------------------------------------------
    def run(self, cmd, timeout, env=None, cwd=None, tag=""):
        """Runs cmd (list) in its own session; on timeout kills the whole group.
        Returns dict(rc, out, err, seconds, timed_out)."""
        timeout = max(1.0, min(timeout, self.left() - 5))
        t = now()
        self.log(f"$ {' '.join(cmd)}   [limit {timeout:.0f}s]{(' ' + tag) if tag else ''}")
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or self.env,
                                 cwd=cwd or self.work, start_new_session=True, text=True,
                                 errors="replace")
        except OSError as e:
            self.log(f"  cannot start: {e}")
            return {"rc": 127, "out": "", "err": str(e), "seconds": 0.0, "timed_out": False}
        timed_out = False
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(p)
            out, err = p.communicate()
        r = {"rc": p.returncode, "out": out, "err": err, "seconds": now() - t, "timed_out": timed_out}
        self.log(f"  -> rc {r['rc']}{' (TIMED OUT)' if timed_out else ''} in {r['seconds']:.1f}s")
        if out.strip():
            self.log("  stdout:\n" + out[-20000:])
        if err.strip():
            self.log("  stderr:\n" + err[-20000:])
        return r

    def start_bg(self, cmd, env, tag):
        self.log(f"$ {' '.join(cmd)} &   [{tag}, background]")
        out = open(os.path.join(self.work, tag + ".out"), "w")
        err = open(os.path.join(self.work, tag + ".err"), "w")
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=self.work,
                             start_new_session=True)
        return {"p": p, "tag": tag, "t": now(), "out": out, "err": err}

    def wait_bg(self, bg, timeout):
        timeout = max(1.0, min(timeout, self.left() - 5))
        timed_out = False
        try:
            bg["p"].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(bg["p"])
            bg["p"].wait()
        bg["out"].close()
        bg["err"].close()
        with open(os.path.join(self.work, bg["tag"] + ".err"), errors="replace") as f:
            err = f.read()
        with open(os.path.join(self.work, bg["tag"] + ".out"), errors="replace") as f:
            out = f.read()
        self.log(f"  [{bg['tag']}] rc {bg['p'].returncode}{' (TIMED OUT)' if timed_out else ''} "
                 f"after {now() - bg['t']:.1f}s\n  stderr:\n{err[-5000:]}")
        return {"rc": bg["p"].returncode, "out": out, "err": err, "seconds": now() - bg["t"],
                "timed_out": timed_out}

    def step(self, letter, title, fn):
        if letter not in self.only:
            return
        if self.left() < 15:
            self.steps.append((letter, title, "skipped", 0.0, "the time budget is spent"))
            self.record(step=letter, status="skipped", why="time budget spent")
            return
        self.say(f"step {letter}: {title}")
        t = now()
        try:
            status, note = fn()
        except Exception as e:  # a bug here must not stop the other steps
            status, note = "fail", f"{type(e).__name__}: {e}"
            self.log(f"  step {letter} raised {type(e).__name__}: {e}")
        if status == "fail":
            self.failed = True
        self.steps.append((letter, title, status, now() - t, note))
        self.record(step=letter, title=title, status=status, seconds=round(now() - t, 1), note=note)
        self.say(f"step {letter}: {status.upper()} ({now() - t:.0f}s) {note}")

    # ---- set-up: unpack, find libraries ---------------------------------------------------------
    def unpack(self):
        payload = os.path.join(self.bundle, "payload.tar.xz")
        self.root = os.path.join(self.work, "bundle")
        if os.path.isdir(os.path.join(self.root, "bin")):
            return None
        if not os.path.isfile(payload):
            return f"{payload} is missing: copy the whole folder that scripts/gpu-bundle.sh made"
        os.makedirs(self.root, exist_ok=True)
        if shutil.which("tar") and shutil.which("xz"):
            r = self.run(["tar", "-xJf", payload, "-C", self.root], 120)
            if r["rc"] == 0:
                return None
            self.log("tar failed; trying Python's tarfile")
        try:
            with tarfile.open(payload, "r:xz") as t:
                t.extractall(self.root)
        except (tarfile.TarError, OSError, EOFError) as e:
            return f"cannot unpack {payload}: {e}"
        return None

    def find_python(self):
        """A python3 that imports torch (the GPU machine's), else any python3."""
        cands = []
        for c in [os.environ.get("TG_PYTHON"), "python3", "/opt/torch/.venv/bin/python3",
                  sys.executable, "/usr/bin/python3"]:
            if c and (shutil.which(c) or os.path.isfile(c)) and c not in cands:
                cands.append(shutil.which(c) or c)
        for c in cands:
            try:
                r = subprocess.run([c, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, timeout=60)
                if r.returncode == 0:
                    return c, r.stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                pass
        return (cands[0] if cands else None), None

    def site_dirs(self):
        dirs = []
        for py in {self.python, sys.executable} - {None}:
            try:
                r = subprocess.run([py, "-c", "import site,sys,json; print(json.dumps("
                                    "site.getsitepackages()+[site.getusersitepackages()]+sys.path))"],
                                   capture_output=True, text=True, timeout=30)
                for d in json.loads(r.stdout):
                    if d.endswith("-packages") and os.path.isdir(d) and d not in dirs:
                        dirs.append(d)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        return dirs

    def ldd(self, exe, ld_path):
        env = {"PATH": self.env.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": ld_path}
        try:
            r = subprocess.run(["ldd", exe], capture_output=True, text=True, env=env, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return {}, [f"ldd: {e}"]
        found, problems = {}, []
        for line in (r.stdout + r.stderr).splitlines():
            m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
            if m:
                found[m.group(1)] = m.group(2).strip()
            if "version `" in line or "not found" in line and "=>" not in line:
                problems.append(line.strip())
        return found, problems

    def find_libraries(self):
        """LD_LIBRARY_PATH for our programs: the bundle's libraries, then the machine's CUDA/NCCL."""
        lib = os.path.join(self.root, "lib")
        exes = sorted(glob.glob(os.path.join(self.root, "bin", "*")) +
                      glob.glob(os.path.join(self.root, "tests", "*")))
        needed = set()
        for e in exes:
            found, _ = self.ldd(e, lib)
            needed |= {n for n, p in found.items() if p == "not found"}
        # The libraries terngrad opens with dlopen when a CUDA device is first used (cuBLAS,
        # NCCL): ldd cannot see them, gpu-bundle.sh lists them.
        dlopened = []
        listed = os.path.join(self.root, "dlopen-libraries.txt")
        if os.path.exists(listed):
            with open(listed) as f:
                dlopened = [l.strip() for l in f if l.strip()]
        needed |= set(dlopened)
        cuda_dirs = []
        for base in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"] + \
                sorted(glob.glob("/usr/local/cuda-*"), reverse=True):
            if base:
                for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
                    cuda_dirs.append(os.path.join(base, sub))
        pip_dirs = []
        for sp in self.site_dirs():
            pip_dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))  # cu13/ too
            pip_dirs.append(os.path.join(sp, "torch", "lib"))
        system_dirs = ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
                       "/usr/lib64", "/usr/lib/wsl/lib"]
        chosen, where = [], {}
        for name in sorted(needed):
            for d in cuda_dirs + pip_dirs + system_dirs:
                if os.path.exists(os.path.join(d, name)):
                    where[name] = d
                    if d not in chosen:
                        chosen.append(d)
                    break
        missing = sorted(needed - set(where))
        if missing and shutil.which("find"):
            for name in list(missing):
                r = subprocess.run(["find", "/usr", "/opt", "/usr/local", "-xdev", "-name", name],
                                   capture_output=True, text=True, timeout=60)
                hits = [h for h in r.stdout.split() if os.path.exists(h)]
                if hits:
                    d = os.path.dirname(hits[0])
                    where[name] = d
                    chosen.append(d)
                    missing.remove(name)
        ld = ":".join([lib] + chosen)
        # libstdc++/libgcc_s: the machine's own unless missing or older than our programs need.
        compat = os.path.join(lib, "compat")
        found, problems = self.ldd(os.path.join(self.root, "bin", "terngrad"), ld)
        use_compat = any("GLIBCXX" in p or "GCC_" in p or "CXXABI" in p for p in problems) or \
            found.get("libstdc++.so.6") == "not found" or found.get("libgcc_s.so.1") == "not found"
        if use_compat:
            ld = ":".join([lib, compat] + chosen)
        prev = os.environ.get("LD_LIBRARY_PATH")
        if prev:
            ld += ":" + prev
        # Where every library of every program now comes from.
        origin, unresolved, problems_all = {}, set(), set()
        for e in exes:
            found, probs = self.ldd(e, ld)
            problems_all |= set(probs)
            for n, p in found.items():
                if p == "not found":
                    unresolved.add(f"{os.path.basename(e)}: {n}")
                else:
                    origin[n] = p
        self.env = dict(os.environ)
        self.env["LD_LIBRARY_PATH"] = ld
        self.env.setdefault("OMP_WAIT_POLICY", "passive")
        self.record(step="setup", kind="libraries", ld_library_path=ld, compat_libstdcxx=use_compat,
                    machine_libs={n: p for n, p in sorted(origin.items()) if MACHINE_LIBS.match(n)},
                    bundle_libs=sorted(n for n, p in origin.items() if p.startswith(self.root)),
                    other_libs={n: p for n, p in sorted(origin.items())
                                if not p.startswith(self.root) and not MACHINE_LIBS.match(n)},
                    unresolved=sorted(unresolved), loader_problems=sorted(problems_all),
                    dlopen_libs={n: where.get(n) for n in dlopened})
        return sorted(unresolved), sorted(problems_all), origin

    # ---- step a ---------------------------------------------------------------------------------
    def probe_network(self, md):
        """Issue 33 item 6 (a race over a shaped link between ranks sharing the GPU) needs network
        namespaces and tc on the GPU machine: record whether they can be made here, in a
        namespace of our own (nothing outside it is touched)."""
        path = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
        env = dict(self.env, PATH=path)
        tools = {t: shutil.which(t, path=path) is not None for t in ("unshare", "ip", "tc")}
        rec = {"step": "a", "kind": "netns_probe", "root": os.geteuid() == 0, **tools}
        if all(tools.values()):
            shaped = ("ip link set lo up && tc qdisc add dev lo root tbf rate 1gbit burst 128kb "
                      "latency 50ms && tc qdisc show dev lo")
            for key, cmd in (("user_netns_tbf", ["unshare", "--net", "--map-root-user", "sh", "-c", shaped]),
                             ("user_netns_netem", ["unshare", "--net", "--map-root-user", "sh", "-c",
                                                   "ip link set lo up && tc qdisc add dev lo root "
                                                   "netem delay 1ms"])):
                r = self.run(cmd, 20, env=env, tag="netns probe")
                rec[key] = r["rc"] == 0
                if r["rc"] != 0:
                    rec[key + "_error"] = (r["err"].strip().splitlines() or [""])[-1][:200]
            if rec["root"]:
                name = f"tg-probe-{os.getpid()}"
                r = self.run(["ip", "netns", "add", name], 20, env=env, tag="netns probe")
                rec["ip_netns"] = r["rc"] == 0
                if r["rc"] == 0:
                    self.run(["ip", "netns", "del", name], 20, env=env, tag="netns probe")
                else:
                    rec["ip_netns_error"] = (r["err"].strip().splitlines() or [""])[-1][:200]
        self.record(**rec)
        self.netns = rec
        can = rec.get("user_netns_tbf") or rec.get("ip_netns")
        md.append(f"- network namespaces for a shaped-link race: {'**possible**' if can else 'not possible'} "
                  f"({', '.join(f'{k} {v}' for k, v in rec.items() if k not in ('step', 'kind'))})")

    def step_a(self):
        notes = []
        md, net_md = [], []
        self.probe_network(net_md)
        if shutil.which("nvidia-smi"):
            r = self.run(["nvidia-smi"], 30)
            q = self.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,"
                          "compute_cap,clocks.max.sm,power.limit", "--format=csv,noheader"], 30)
            for line in q["out"].strip().splitlines():
                f = [x.strip() for x in line.split(",")]
                if len(f) >= 5:
                    self.record(step="a", kind="nvidia_smi", index=f[0], name=f[1], driver=f[2],
                                memory=f[3], compute_cap=f[4], max_sm_clock=f[5] if len(f) > 5 else "",
                                power_limit=f[6] if len(f) > 6 else "")
                    md.append(f"- nvidia-smi: GPU {f[0]} **{f[1]}**, driver {f[2]}, {f[3]}, "
                              f"compute capability {f[4]}")
            if r["rc"] != 0:
                notes.append(f"nvidia-smi exited {r['rc']}")
        else:
            notes.append("no nvidia-smi on PATH")
            self.record(step="a", kind="nvidia_smi", error="nvidia-smi not found")
        r = self.run([os.path.join(self.root, "bin", "device_info")], 60)
        stack = None
        for rec in json_lines(r["out"]):
            self.record(step="a", **rec)
            if rec.get("kind") == "cuda_stack":
                stack = rec
            elif rec.get("kind") == "cuda_device":
                if rec.get("index") in (0, "0"):
                    self.gpu_name = rec.get("name", "")
                md.append(f"- device {rec['index']}: {rec['name']}, cc {rec['cc']}, {rec['sms']} SMs, "
                          f"{rec['total_mem_mib']} MiB ({rec['free_mem_mib']} free), L2 "
                          f"{rec['l2_kib']} KiB, PCI {rec['pci_bus_id']}")
        if stack is None:
            self.no_gpu = True
            self.summary["a"] = md + net_md
            return "fail", f"device_info failed (rc {r['rc']}): {r['err'].strip()[-300:]}"
        self.gpus = int(stack.get("device_count", 0))
        md.insert(0, f"- CUDA stack as terngrad loads it: driver {stack.get('driver')}, runtime "
                     f"{stack.get('runtime')}, cuBLAS {stack.get('cublas')}, cuRAND "
                     f"{stack.get('curand')}, NCCL {stack.get('nccl')}; devices: {self.gpus}")
        self.summary["a"] = md + net_md
        if self.gpus == 0:
            self.no_gpu = True
            return "no-gpu", f"no CUDA device: {stack.get('unavailable_reason')}"
        return "pass", "; ".join([f"{self.gpus} device(s)"] + [l.lstrip("- ") for l in md[1:2]] + notes)

    # ---- step b ---------------------------------------------------------------------------------
    def step_b(self):
        tests = sorted(glob.glob(os.path.join(self.root, "tests", "*")))
        xml_dir = os.path.join(self.work, "xml")
        os.makedirs(xml_dir, exist_ok=True)
        if self.no_gpu:
            # Start-up only: every executable loads and lists its tests.
            bad = []
            for t in tests:
                r = self.run([t, "--gtest_list_tests"], 30)
                if r["rc"] != 0:
                    bad.append(f"{os.path.basename(t)} (rc {r['rc']}: {r['err'].strip()[-200:]})")
            self.record(step="b", kind="load_check", executables=len(tests), failed=bad)
            if bad:
                return "fail", f"{len(bad)} of {len(tests)} test executables do not start: " + "; ".join(bad)
            return "no-gpu", f"no CUDA device: all {len(tests)} test executables load and list their tests; none run"

        def one(t):
            name = os.path.basename(t)
            xml = os.path.join(xml_dir, name + ".xml")
            r = self.run([t, f"--gtest_output=xml:{xml}", "--gtest_color=no"], 180, tag=name)
            counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "disabled": 0}
            failed_names, skipped_names = [], []
            if os.path.exists(xml):
                try:
                    root = ET.parse(xml).getroot()
                    for k in counts:
                        counts[k] = int(root.get(k, 0) or 0)
                    for tc in root.iter("testcase"):
                        full = f"{tc.get('classname')}.{tc.get('name')}"
                        if tc.find("failure") is not None or tc.find("error") is not None:
                            failed_names.append(full)
                        elif tc.find("skipped") is not None or tc.get("result") == "skipped":
                            skipped_names.append(full)
                    counts["skipped"] = max(counts["skipped"], len(skipped_names))
                except (ET.ParseError, ValueError) as e:
                    failed_names.append(f"(XML unreadable: {e})")
            ok = r["rc"] == 0 and not failed_names and not r["timed_out"] and counts["tests"] > 0
            why = ""
            if r["timed_out"]:
                why = "timed out"
            elif not os.path.exists(xml):
                why = f"no XML (rc {r['rc']}): {r['err'].strip()[-300:]}"
            elif r["rc"] != 0 and not failed_names:
                why = f"rc {r['rc']}: {r['err'].strip()[-300:]}"
            rec = dict(step="b", kind="gtest", executable=name, ok=ok, rc=r["rc"],
                       seconds=round(r["seconds"], 2), passed=counts["tests"] - counts["failures"]
                       - counts["errors"] - counts["skipped"] - counts["disabled"], **counts,
                       failed=failed_names, skipped_tests=skipped_names, why=why)
            return rec

        recs = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            for rec in pool.map(one, tests):
                self.record(**rec)
                recs.append(rec)
        total = sum(r["tests"] for r in recs)
        passed = sum(r["passed"] for r in recs)
        failed = sum(r["failures"] + r["errors"] for r in recs)
        skipped = sum(r["skipped"] for r in recs)
        bad = [r for r in recs if not r["ok"]]
        md = [f"- {len(recs)} executables, {total} tests: **{passed} passed, {failed} failed, "
              f"{skipped} skipped**"]
        for r in bad:
            md.append(f"  - `{r['executable']}`: {', '.join(r['failed']) or r['why']}")
        for r in recs:
            if r["skipped_tests"]:
                md.append(f"  - skipped in `{r['executable']}`: {', '.join(r['skipped_tests'])}")
        self.summary["b"] = md
        self.record(step="b", kind="gtest_total", executables=len(recs), tests=total, passed=passed,
                    failed=failed, skipped=skipped)
        if bad:
            return "fail", f"{len(bad)} of {len(recs)} executables failed; {passed}/{total} tests passed"
        return "pass", f"{passed}/{total} tests passed in {len(recs)} executables ({skipped} skipped)"

    # ---- step c ---------------------------------------------------------------------------------
    def train_cmd(self, out, device, workers, method, iterations, log_every, extra=()):
        data = os.path.join(self.root, "data", "mnist")
        return [os.path.join(self.root, "bin", "terngrad"), "train", "--no-progress",
                "--config", os.path.join(self.root, "configs", "lenet_mnist.toml"),
                "--device", device,
                "--set", f"data.path={data}",
                "--set", f"train.iterations={iterations}",
                "--set", f"train.log_every={log_every}",
                "--set", "train.eval_every=0",
                "--set", "train.checkpoint_every=0",
                "--set", f"workers.count={workers}",
                "--set", f"compression.method={method}",
                *extra, "--out", out]

    CASES = (("fp32", 1, "none"), ("terngrad_n8", 8, "terngrad"))

    def start_cpu_references(self):
        """The CPU runs of step c, started early: they need cores, not the GPU."""
        self.cpu_bg = {}
        if "c" not in self.only or (self.no_gpu and not self.rehearsal):
            return
        threads = max(1, (os.cpu_count() or 2) // 2 - 1)
        env = dict(self.env, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        for name, workers, method in self.CASES:
            out = os.path.join(self.work, "runs", f"cpu_{name}")
            shutil.rmtree(out, ignore_errors=True)
            self.cpu_bg[name] = self.start_bg(
                self.train_cmd(out, "cpu", workers, method, self.iterations, 1), env, f"cpu_{name}")

    def read_run(self, out):
        s, losses = None, {}
        try:
            with open(os.path.join(out, "summary.json")) as f:
                s = json.load(f)
        except (OSError, ValueError):
            pass
        try:
            with open(os.path.join(out, "metrics.jsonl")) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec.get("type") == "train":
                        losses[int(rec["step"])] = rec["loss"]
        except (OSError, ValueError, KeyError):
            pass
        return s, losses

    def step_c(self):
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device"
        md = ["| run | device | test acc. | img/s | params_sha256 | vs CPU |", "|---|---|---|---|---|---|"]
        status, notes = "pass", []
        for name, workers, method in self.CASES:
            runs = {}
            for tag, log_every in (("cuda", 1), ("cuda_rerun", 100)):
                out = os.path.join(self.work, "runs", f"{tag}_{name}")
                shutil.rmtree(out, ignore_errors=True)
                r = self.run(self.train_cmd(out, self.dev, workers, method, self.iterations, log_every),
                             150, tag=f"{tag}_{name}")
                runs[tag] = (r,) + self.read_run(out)
            r_cpu = self.wait_bg(self.cpu_bg[name], 240) if name in self.cpu_bg else None
            runs["cpu"] = (r_cpu,) + self.read_run(os.path.join(self.work, "runs", f"cpu_{name}"))
            rec = {"step": "c", "kind": "train", "run": name, "workers": workers, "method": method,
                   "iterations": self.iterations}
            for tag, (r, s, _) in runs.items():
                if r is None or r["rc"] != 0 or s is None:
                    why = "not run" if r is None else ("timed out" if r["timed_out"] else
                                                       f"rc {r['rc']}: {r['err'].strip()[-300:]}")
                    rec[tag] = {"ok": False, "why": why}
                    status = "fail"
                    notes.append(f"{name} {tag}: {why}")
                    continue
                rec[tag] = {"ok": True, "test_accuracy": s.get("test_accuracy"),
                            "images_per_sec": s.get("images_per_sec"),
                            "train_seconds": s.get("train_seconds"),
                            "params_sha256": s.get("params_sha256"), "device": s.get("device")}
            cu, cr, cp = runs["cuda"], runs["cuda_rerun"], runs["cpu"]
            if rec.get("cuda", {}).get("ok") and rec.get("cpu", {}).get("ok"):
                same = cu[1]["params_sha256"] == cp[1]["params_sha256"]
                rec["cpu_equal"] = same
                first, worst = None, 0.0
                for k in sorted(set(cu[2]) & set(cp[2])):
                    a, b = cu[2][k], cp[2][k]
                    if a != b and first is None:
                        first = {"step": k, "cuda_loss": a, "cpu_loss": b}
                    worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
                rec["first_diverging_step"] = first
                rec["max_rel_loss_diff"] = worst
                rec["accuracy_gap_points"] = 100 * (cu[1]["test_accuracy"] - cp[1]["test_accuracy"])
                # Different summation orders give different bits; the runs must still agree as
                # training runs: the same accuracy within a quarter point.
                if abs(rec["accuracy_gap_points"]) > 0.25:
                    status = "fail"
                    notes.append(f"{name}: GPU accuracy {100 * cu[1]['test_accuracy']:.2f}% vs CPU "
                                 f"{100 * cp[1]['test_accuracy']:.2f}%")
            if rec.get("cuda", {}).get("ok") and rec.get("cuda_rerun", {}).get("ok"):
                rec["gpu_deterministic"] = cu[1]["params_sha256"] == cr[1]["params_sha256"]
                if not rec["gpu_deterministic"]:
                    status = "fail"
                    notes.append(f"{name}: two GPU runs of the same config ended with different "
                                 f"parameters")
            self.record(**rec)
            for tag in ("cuda", "cuda_rerun", "cpu"):
                x = rec.get(tag, {})
                if not x.get("ok"):
                    md.append(f"| {name} | {tag} | failed: {x.get('why', '')[:80]} | | | |")
                    continue
                vs = ""
                if tag == "cuda" and "cpu_equal" in rec:
                    fd = rec["first_diverging_step"]
                    vs = ("**equal**" if rec["cpu_equal"] else
                          f"differs; loss first differs at step {fd['step']} "
                          f"({fd['cuda_loss']:.9g} vs {fd['cpu_loss']:.9g})" if fd else
                          "differs; every logged loss equal")
                if tag == "cuda_rerun" and "gpu_deterministic" in rec:
                    vs = "same bits as the first GPU run" if rec["gpu_deterministic"] else \
                        "**differs from the first GPU run**"
                md.append(f"| {name} | {tag}{' (log_every 1)' if tag != 'cuda_rerun' else ' (log_every 100)'} | "
                          f"{100 * x['test_accuracy']:.2f}% | {x['images_per_sec']:.0f} | "
                          f"`{x['params_sha256'][:16]}` | {vs} |")
        self.summary["c"] = md
        return status, "; ".join(notes) or f"{self.iterations} iterations each; table in summary.md"

    # ---- step d ---------------------------------------------------------------------------------
    def step_d(self):
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device"
        status, notes = "pass", []
        ours = {}
        r = self.run([os.path.join(self.root, "bin", "bench_train"), "--device", self.dev,
                      "--seconds", "1" if self.rehearsal else "2"], 150)
        for rec in json_lines(r["out"]):
            if rec.get("kind") == "step":
                ours[rec["net"]] = rec
                self.record(step="d", source="bench_train", **rec)
        if r["rc"] != 0 or not ours:
            status = "fail"
            notes.append(f"bench_train rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: "
                         f"{r['err'].strip()[-300:]}")
        torch_res = {"eager": {}, "compile": {}}
        if not self.python or not self.torch_version:
            notes.append("no python3 with torch: PyTorch side skipped")
        else:
            script = os.path.join(self.root, "bench", "pytorch_step.py")
            for mode, extra, limit in (("eager", [], 120), ("compile", ["--compile"], 240)):
                env = dict(os.environ)  # torch with its own libraries, not ours
                r = self.run([self.python, script, "--device", self.dev, "--seconds", "2"] + extra,
                             limit, env=env, tag=f"pytorch {mode}")
                for rec in json_lines(r["out"]):
                    if rec.get("kind") == "pytorch_step":
                        torch_res[mode][rec["net"]] = rec
                        self.record(step="d", source="pytorch", mode=mode, **rec)
                if r["rc"] != 0:
                    why = "timed out" if r["timed_out"] else r["err"].strip().splitlines()[-1:] or [""]
                    notes.append(f"torch {mode}: {why if isinstance(why, str) else why[0]}"[:300])
                    if mode == "eager":
                        status = "fail"
        md = ["| net | batch | terngrad ms/step (H2D incl.) | − H2D | PyTorch eager | torch.compile | "
              "eager / ours |", "|---|---|---|---|---|---|---|"]
        for net in ("lenet", "cifarnet", "alexnet"):
            o = ours.get(net)
            e = torch_res["eager"].get(net)
            c = torch_res["compile"].get(net)
            if not o and not e:
                continue
            ours_ms = o["step_ms"] if o else None
            ours_net = o["step_ms"] - o.get("transfer_ms", 0) if o else None
            ratio = e["step_ms"] / ours_net if o and e else None
            self.record(step="d", kind="compare", net=net, ours_ms=ours_ms, ours_minus_h2d_ms=ours_net,
                        torch_eager_ms=e["step_ms"] if e else None,
                        torch_compile_ms=c["step_ms"] if c else None, eager_over_ours=ratio)
            fmt = lambda v: f"{v:.3f}" if v is not None else "—"
            md.append(f"| {net} | {(o or e)['batch']} | {fmt(ours_ms)} | {fmt(ours_net)} | "
                      f"{fmt(e['step_ms'] if e else None)} | {fmt(c['step_ms'] if c else None)} | "
                      f"{(f'{ratio:.2f}×' if ratio else '—')} |")
        if self.torch_version:
            md.append(f"\nPyTorch {self.torch_version}, fp32 without TF32 on both sides; "
                      f"`eager / ours` > 1 means terngrad is faster.")
        self.summary["d"] = md
        return status, "; ".join(notes) or "table in summary.md"

    # ---- step e ---------------------------------------------------------------------------------
    def step_e(self):
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device"
        r = self.run([os.path.join(self.root, "bin", "bench_ternary"), "--device", self.dev], 120)
        md = ["| op | format | n | GB/s | of device copy |", "|---|---|---|---|---|"]
        batches = ["", "| net | op | tensors | per-tensor calls ms | one batch ms | speedup | "
                   "batch of copy |", "|---|---|---|---|---|---|---|"]
        rows, notes = 0, []
        # Issue 31's targets at n = 10M, as fractions of a device-to-device copy.
        targets = {("tensor_stats", "f32"): 0.8, ("ternarize_pack", "two_bit"): 0.8,
                   ("ternarize_pack", "base3"): 0.6, ("unpack_accumulate", "two_bit"): 1.0,
                   ("unpack_accumulate", "base3"): 1.0}
        for rec in json_lines(r["out"]):
            self.record(step="e", **rec)
            if rec.get("bench") == "ternary":
                rows += 1
                frac = rec.get("frac_of_copy")
                md.append(f"| {rec['op']} | {rec['format']} | {rec['n']} | {rec['gbps']:.0f} | "
                          f"{f'{frac:.2f}' if frac is not None else '(the copy)'} |")
                want = targets.get((rec["op"], rec["format"]))
                if want is not None and rec["n"] >= 10 * (1 << 20) and frac is not None:
                    notes.append(f"{rec['op']} {rec['format']} {frac:.2f}"
                                 f"{'' if frac >= want else f' (target {want})'}")
            elif rec.get("bench") == "ternary_batch":
                rows += 1
                batches.append(f"| {rec['net']} | {rec['op']} | {rec['tensors']} | "
                               f"{rec['per_tensor_ms']:.3f} | {rec['batch_ms']:.3f} | "
                               f"{rec['speedup']:.2f}x | {rec['frac_of_copy']:.2f} |")
        self.summary["e"] = md + (batches if len(batches) > 3 else [])
        if r["rc"] != 0 or rows == 0:
            return "fail", f"bench_ternary rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: " \
                           f"{r['err'].strip()[-300:]}"
        return "pass", f"{rows} measurements; of a copy at 10M: {', '.join(notes) or 'n/a'}"

    # ---- step f ---------------------------------------------------------------------------------
    def step_f(self):
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device"
        iters = 300 if not self.rehearsal else 40
        backend = "gloo" if self.rehearsal else "nccl"
        status, notes, md = "pass", [], []

        def train(tag, workers, extra):
            out = os.path.join(self.work, "runs", tag)
            shutil.rmtree(out, ignore_errors=True)
            r = self.run(self.train_cmd(out, self.dev, workers, "terngrad", iters, 50,
                                        ["--set", f"comm.backend={backend}"] + extra
                                        if extra else []), 120, tag=tag)
            s, _ = self.read_run(out)
            return r, s

        ref_r, ref = train("nccl_reference_n2", 2, [])
        rdv = os.path.join(self.work, "rdv-one")
        shutil.rmtree(rdv, ignore_errors=True)
        one_r, one = train("nccl_one_rank_n2", 2, ["--rank", "0", "--world-size", "1",
                                                   "--rendezvous", "file://" + rdv,
                                                   "--job-id", "gpu-check"])
        cases = [("one process, 2 emulated workers (reference)", ref_r, ref),
                 ("one rank over NCCL, 2 workers", one_r, one)]
        if self.gpus >= 2:
            g = self.gpus
            multi_r, multi = train(f"nccl_{g}_ranks", 2 * g, ["--nproc", str(g)])
            mref_r, mref = train(f"nccl_reference_n{2 * g}", 2 * g, [])
            cases += [(f"one process, {2 * g} emulated workers (reference)", mref_r, mref),
                      (f"{g} ranks over NCCL (--nproc {g})", multi_r, multi)]
        for label, r, s in cases:
            ok = r["rc"] == 0 and s is not None
            rec = {"step": "f", "kind": "nccl_train", "run": label, "ok": ok, "iterations": iters}
            if ok:
                rec.update(params_sha256=s.get("params_sha256"), comm_backend=s.get("comm_backend"),
                           processes=s.get("processes"), test_accuracy=s.get("test_accuracy"),
                           images_per_sec=s.get("images_per_sec"),
                           wire_bytes_sent_per_worker_per_iter=s.get("wire_bytes_sent_per_worker_per_iter"),
                           comm_overlap=s.get("comm_overlap"), comm_buckets=s.get("comm_buckets"),
                           comm_exposed_seconds_per_iter=s.get("comm_exposed_seconds_per_iter"))
                md.append(f"- {label}: backend {s.get('comm_backend', 'none (one process)')}, "
                          f"accuracy {100 * s['test_accuracy']:.2f}%, {s['images_per_sec']:.0f} img/s, "
                          f"params_sha256 `{s['params_sha256'][:16]}`")
            else:
                status = "fail"
                why = "timed out" if r["timed_out"] else f"rc {r['rc']}: {r['err'].strip()[-300:]}"
                rec["why"] = why
                notes.append(f"{label}: {why}")
                md.append(f"- {label}: **failed**: {why}")
            self.record(**rec)
        if one and ref:
            if one.get("comm_backend") != backend:
                status = "fail"
                notes.append(f"the one-rank run used {one.get('comm_backend')}, not nccl")
            if one.get("comm_overlap") is not True:
                status = "fail"
                notes.append(f"the one-rank {backend} run did not overlap its buckets with backward")
            if one["params_sha256"] != ref["params_sha256"]:
                status = "fail"
                notes.append("one rank over NCCL ended with other parameters than one process")
            else:
                md.append("- one rank over NCCL: **the same params_sha256** as the one-process run")
        if self.gpus >= 2 and multi and mref:
            if multi["params_sha256"] != mref["params_sha256"]:
                status = "fail"
                notes.append(f"--nproc {self.gpus} over NCCL ended with other parameters than one process")
            else:
                md.append(f"- --nproc {self.gpus} over NCCL: **the same params_sha256** as one process")
        self.summary["f"] = md
        return status, "; ".join(notes) or f"{iters} iterations; NCCL runs match the one-process run"

    # ---- step g ---------------------------------------------------------------------------------
    def step_g(self):
        """Issue 32's targets on the GPU machine: the JPEG loader on every core, and AlexNet fed
        from a JPEG folder against the same run on synthetic data."""
        tg = os.path.join(self.root, "bin", "terngrad")
        folder = os.path.join(self.work, "jpeg-folder")
        classes, per_class = (4, 20) if self.rehearsal else (20, 100)
        if not os.path.isdir(folder):
            r = self.run([tg, "data", "synth-folder", folder, "--classes", str(classes),
                          "--train", str(per_class), "--val", "5"], 120, tag="synth-folder")
            if r["rc"] != 0:
                return "fail", f"synth-folder rc {r['rc']}: {r['err'].strip()[-300:]}"
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        status, notes = "pass", []
        md = ["| loader (alexnet preprocessing) | threads | img/s | per thread |", "|---|---|---|---|"]
        ips = {}
        for threads, fast in ((1, False), (cores, False), (cores, True)):
            cmd = [os.path.join(self.root, "bin", "bench_data"), "--image-folder", folder,
                   "--threads", str(threads), "--steps", "4" if self.rehearsal else "30",
                   "--batch", "16" if self.rehearsal else "128"]
            r = self.run(cmd + (["--fast-decode"] if fast else []), 120, tag="bench_data")
            got = [rec for rec in json_lines(r["out"]) if rec.get("bench") == "data_pipeline"]
            if r["rc"] != 0 or not got:
                status = "fail"
                notes.append(f"bench_data --threads {threads} rc {r['rc']}: {r['err'].strip()[-200:]}")
                continue
            rec = got[0]
            self.record(step="g", source="bench_data", **rec)
            ips[(threads, fast)] = rec["images_per_sec"]
            md.append(f"| {'fast decode' if fast else 'full decode'} | {threads} | "
                      f"{rec['images_per_sec']:.0f} | {rec['images_per_sec_per_thread']:.0f} |")
        full = ips.get((cores, False))
        if full is not None:
            met = full >= 8000
            self.record(step="g", kind="target", what="loader img/s on every core >= 8000",
                        value=full, met=met)
            md.append(f"\nEvery core ({cores}): {full:.0f} img/s, target >= 8,000: "
                      f"**{'met' if met else 'missed'}**.")
        if self.no_gpu and not self.rehearsal:
            self.summary["g"] = md
            return status, "; ".join(notes) or "loader measured; no CUDA device for AlexNet"
        iters, batch = (3, 8) if self.rehearsal else (60, 128)
        common = ["--no-progress", "--device", self.dev, "--set", "model.name=alexnet",
                  "--set", f"train.batch_size={batch}", "--set", f"train.iterations={iters}",
                  "--set", "train.log_every=10", "--set", "train.eval_every=0",
                  "--set", "train.checkpoint_every=0", "--set", "data.eval_batch_size=50"]
        runs = {}
        for tag, data in (("alexnet_jpeg", ["--set", "data.name=image-folder",
                                            "--set", f"data.path={folder}"]),
                          ("alexnet_synthetic", ["--set", "data.name=synthetic",
                                                 "--set", "data.synthetic_channels=3",
                                                 "--set", "data.image_size=224",
                                                 "--set", f"data.synthetic_classes={classes}",
                                                 "--set", "data.synthetic_size=100"])):
            out = os.path.join(self.work, "runs", tag)
            shutil.rmtree(out, ignore_errors=True)
            r = self.run([tg, "train"] + common + data + ["--out", out], 240, tag=tag)
            s, _ = self.read_run(out)
            if r["rc"] != 0 or s is None:
                status = "fail"
                notes.append(f"{tag}: rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: "
                             f"{r['err'].strip()[-300:]}")
                continue
            runs[tag] = s
            ms = 1000.0 * batch / s["images_per_sec"]
            self.record(step="g", kind="alexnet_input", run=tag, step_ms=ms,
                        images_per_sec=s["images_per_sec"], loader_threads=s.get("loader_threads"),
                        iterations=iters, batch=batch)
            md.append(f"- {tag}: {ms:.1f} ms/step ({s['images_per_sec']:.0f} img/s, "
                      f"{s.get('loader_threads')} loader threads)")
        if len(runs) == 2:
            ratio = runs["alexnet_synthetic"]["images_per_sec"] / runs["alexnet_jpeg"]["images_per_sec"]
            met = ratio <= 1.05
            self.record(step="g", kind="target", what="AlexNet step from JPEGs within 5% of synthetic",
                        value=ratio, met=met)
            md.append(f"- JPEG step / synthetic step = {ratio:.3f} (target <= 1.05: "
                      f"**{'met' if met else 'missed'}**)")
        self.summary["g"] = md
        return status, "; ".join(notes) or "tables in summary.md"

    # ---- step h ---------------------------------------------------------------------------------
    # What the Python with torch reports about building an extension against it.
    TORCH_PROBE = r"""
import glob, importlib.util, json, os, sysconfig, torch
inc = os.path.join(os.path.dirname(torch.__file__), "include")
prefix = torch.utils.cmake_prefix_path
py_inc = sysconfig.get_paths()["include"]
def first(paths):
    return next((p for p in paths if os.path.isfile(p)), None)
# torch's CMake package: in the wheel (pip), or the system's (Debian's libtorch-dev).
config = first([os.path.join(prefix, "Torch", "TorchConfig.cmake")] +
               sorted(glob.glob("/usr/lib/*/cmake/Torch/TorchConfig.cmake")) +
               ["/usr/share/cmake/Torch/TorchConfig.cmake"])
pybind = first([os.path.join(d, "pybind11", "pybind11.h") for d in (inc, py_inc, "/usr/include")])
print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                  "cuda_available": torch.cuda.is_available(),
                  "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
                  "torch_cmake_config": config, "torch_cmake_prefix": prefix, "pybind11_headers": pybind,
                  "python_h": os.path.isfile(os.path.join(py_inc, "Python.h")), "python_include": py_inc,
                  "setuptools": importlib.util.find_spec("setuptools") is not None,
                  "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
                  "gloo": torch.distributed.is_gloo_available(), "nccl": torch.distributed.is_nccl_available()}))
"""

    def build_tools(self):
        """Compilers, nvcc, cmake and the torch Python's build facts (one record)."""
        def first_line(cmd):
            r = self.run(cmd, 30)
            text = (r["out"] or r["err"]).strip()
            return text.splitlines()[0] if r["rc"] == 0 and text else None
        tools = {c: first_line([c, "--version"]) if shutil.which(c) else None
                 for c in ("gcc", "g++", "c++", "cmake")}
        nvcc = next((n for n in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc")
                     if n and os.access(n, os.X_OK)), None)
        tools["nvcc_path"] = nvcc
        tools["nvcc"] = None
        if nvcc:
            m = re.search(r"release [0-9.]+, V[0-9.]+", self.run([nvcc, "--version"], 30)["out"])
            tools["nvcc"] = m.group(0) if m else None
        tools["python"] = self.python
        if self.python and self.torch_version:
            r = self.run([self.python, "-c", self.TORCH_PROBE], 120, env=dict(os.environ))
            probe = next(json_lines(r["out"]), None)
            tools.update(probe or {"torch_probe_error": r["err"].strip()[-300:]})
        tools["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return tools

    def step_h(self):
        tools = self.build_tools()
        self.record(step="h", kind="build_tools", **tools)
        md = [f"- build tools: gcc `{tools['gcc']}`, g++ `{tools['g++']}`, c++ `{tools['c++']}`, "
              f"nvcc `{tools['nvcc']}`, cmake `{tools['cmake']}`",
              f"- Python with torch: `{self.python}`, torch {tools.get('torch')}, "
              f"torch.version.cuda {tools.get('torch_cuda')}, cuda available {tools.get('cuda_available')}; "
              f"TorchConfig.cmake {tools.get('torch_cmake_config')}, pybind11 headers "
              f"{tools.get('pybind11_headers')}, Python.h {tools.get('python_h')}, setuptools "
              f"{tools.get('setuptools')}"]
        self.summary["h"] = md
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device (build tools recorded; nothing built)"
        missing = [k for k in ("c++", "cmake") if not tools[k]]
        missing += [k for k in ("torch_cmake_config", "python_h", "setuptools") if not tools.get(k)]
        missing = [k for k in missing if k != "torch_cmake_config"]  # CMake may know more places
        if not self.python or not self.torch_version or missing:
            why = "cannot build: " + ("no python3 imports torch" if not self.torch_version
                                      else "missing " + ", ".join(missing))
            md.append(f"- **not built**: {why}")
            return "fail", why

        # The build: python/setup.py, as `pip install ./python` runs it, in the work folder. The
        # bundle's third_party/ is on CMake's search path (CMAKE_PREFIX_PATH from the
        # environment) and its lib/ on the linker's and loader's (libopenblas's libgfortran).
        src = os.path.join(self.root, "src")
        build = os.path.join(self.work, "ext-build")
        lib = os.path.join(self.root, "lib")
        ld = ":".join([lib] + ([os.environ["LD_LIBRARY_PATH"]] if os.environ.get("LD_LIBRARY_PATH") else []))
        prefix = ":".join([os.path.join(self.root, "third_party")] +
                          ([os.environ["CMAKE_PREFIX_PATH"]] if os.environ.get("CMAKE_PREFIX_PATH") else []))
        env = dict(os.environ, LD_LIBRARY_PATH=ld, CMAKE_PREFIX_PATH=prefix, TERNGRAD_BUILD_DIR=build,
                   TERNGRAD_TORCH_PYTHON=self.python, CMAKE_BUILD_PARALLEL_LEVEL=str(tools["cpus"]))
        if tools.get("cxx11_abi") is False:
            # A torch built with the old std::string ABI: the extension gets that flag from
            # TORCH_CXX_FLAGS, so the libraries it links (nn/, terngrad/) must be built with it too.
            env["CXXFLAGS"] = (env.get("CXXFLAGS", "") + " -D_GLIBCXX_USE_CXX11_ABI=0").strip()
            env["CUDAFLAGS"] = (env.get("CUDAFLAGS", "") + " -D_GLIBCXX_USE_CXX11_ABI=0").strip()
        if shutil.which("ccache") and not env.get("CMAKE_CXX_COMPILER_LAUNCHER"):
            env.update(CMAKE_CXX_COMPILER_LAUNCHER="ccache", CCACHE_BASEDIR=self.work)
        # The build gets what the hook check (at most ~100 s) does not need.
        limit = max(60.0, min(480.0, self.left() - 120))
        r = self.run([self.python, "setup.py", "build_ext", "--build-lib", os.path.join(self.work, "ext-lib")],
                     limit, env=env, cwd=os.path.join(src, "python"), tag="build terngrad_torch")
        m = re.search(r"terngrad_torch: CMake build in \S+ \(CUDA (ON|OFF)", r["out"])
        cuda = m.group(1) if m else None
        cache = {}
        try:
            with open(os.path.join(build, "CMakeCache.txt")) as f:
                for line in f:
                    k, _, v = line.strip().partition("=")
                    name = k.split(":")[0]
                    if name in ("TG_ENABLE_CUDA", "TG_OPENBLAS_OPENMP", "BLAS_openblas_LIBRARY",
                                "OPENSSL_INCLUDE_DIR", "OPENSSL_CRYPTO_LIBRARY", "nlohmann_json_DIR",
                                "Torch_DIR", "CMAKE_CUDA_COMPILER", "CMAKE_CXX_COMPILER"):
                        cache[name] = v
        except OSError:
            pass
        build_s = r["seconds"]
        built = sorted(glob.glob(os.path.join(build, "python", "terngrad_torch", "_C*.so")))
        ok = r["rc"] == 0 and len(built) == 1
        # CMake's and the compiler's own error lines, not setup.py's traceback that follows them.
        lines = (r["out"] + "\n" + r["err"]).splitlines()
        first = next((k for k, l in enumerate(lines) if "CMake Error" in l), None)
        errors = ([l.strip() for l in lines[first:first + 6] if l.strip()] if first is not None else
                  [l.strip() for l in lines if re.search(r"error:|Error [0-9]|fatal error", l)])
        why = "" if ok else ("timed out" if r["timed_out"] else
                             f"rc {r['rc']}: " + " / ".join(errors[:6] or r["err"].strip().splitlines()[-6:]))
        self.record(step="h", kind="extension_build", ok=ok, cuda=cuda, seconds=round(r["seconds"], 1),
                    limit_s=round(limit), jobs=tools["cpus"], found=cache, module=built[:1], why=why[-1500:])
        md.append(f"- build (python/setup.py, CUDA {cuda}, -j {tools['cpus']}): "
                  + (f"**built** in {r['seconds']:.0f} s" if ok else f"**failed**: {why[-400:]}"))
        md.append(f"  - CMake found: " + ", ".join(f"{k} `{v}`" for k, v in sorted(cache.items())))
        if not ok:
            return "fail", f"extension build failed: {why[-300:]}"
        if self.dev == "cuda" and cuda != "ON":
            md.append("- **the build is CPU-only**: the hook cannot run on CUDA tensors")
            return "fail", f"setup.py built without CUDA (torch.version.cuda {tools.get('torch_cuda')}, nvcc {tools['nvcc']})"

        self.ext_pythonpath = os.path.join(build, "python")
        # The hook on the device's tensors, with torch's own libraries (not the CUDA toolkit's).
        henv = dict(os.environ, LD_LIBRARY_PATH=ld, PYTHONPATH=os.path.join(build, "python"),
                    OMP_NUM_THREADS="1")
        script = os.path.join(src, "tests", "python", "gpu_hook_check.py")
        r = self.run([self.python, script, "--device", self.dev, "--timeout", "90"],
                     max(30.0, self.left() - 10), env=henv, tag="gpu_hook_check")
        status, notes = "pass", []
        cases = 0
        for rec in json_lines(r["out"]):
            self.record(step="h", **rec)
            if "case" not in rec:
                continue
            cases += 1
            if rec["status"] == "fail":
                status = "fail"
                notes.append(f"{rec['case']}: {rec['why'][:300]}")
            elif rec["status"] == "unsupported":
                notes.append(f"{rec['case']} unsupported by this torch: {rec['why'][:200]}")
            detail = (f"{rec.get('bit_identical')}/{rec.get('of')} bucket results bit-identical to "
                      f"aggregate_local, max rel. diff {rec.get('max_rel_diff')}" if "of" in rec else
                      f"hook output {rec.get('out_dtypes')}, losses {rec.get('losses')}"
                      if "out_dtypes" in rec else "")
            md.append(f"- hook `{rec['case']}` ({rec.get('backend', 'no backend')}, world {rec.get('world_size')}): "
                      f"**{rec['status']}** {detail}{(': ' + rec['why'][:300]) if rec.get('why') else ''}")
        if r["rc"] != 0 and status == "pass" or cases == 0:
            status = "fail"
            notes.append(f"gpu_hook_check.py rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: "
                         f"{r['err'].strip()[-300:]}")
        return status, "; ".join(notes) or f"built (CUDA {cuda}) in {build_s:.0f} s; hook: {cases} cases passed"

    # ---- step i ---------------------------------------------------------------------------------
    # (issue 31) Part 1: bench_conv2d --algos times every algorithm on every conv layer and pass
    # of the five nets, bench/pytorch_conv.py the same layers with cuDNN (fp32, TF32). Part 2:
    # bench_train on the five nets with cuda.conv_algo = autotune, strict fp32 and TF32, beside
    # bench/pytorch_step.py eager and torch.compile on the same precision; one line per net and
    # precision goes to gpu-compare.jsonl (the file to commit as bench/gpu-results/<date>-<gpu>.jsonl).
    # Everything is budget-aware: what does not fit is recorded as skipped. Not in the default
    # run (a-h fill the default budget): --only a,i.
    NETS_I = (("alexnet", 128), ("googlenet", 128), ("vgg_a", 64), ("lenet", 64), ("cifarnet", 128))

    def step_i(self):
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device"
        notes, status = [], "pass"
        bindir = os.path.join(self.root, "bin")
        md = []
        # Part 1: per layer (GPU only: the algorithms are CUDA kernels).
        if not self.rehearsal:
            r = self.run([os.path.join(bindir, "bench_conv2d"), "--algos", "--seconds", "0.05"],
                         min(200, self.left() * 0.35), tag="conv algos")
            layers = {}
            for rec in json_lines(r["out"]):
                self.record(step="i", source="bench_conv2d", **rec)
                if rec.get("bench") == "conv2d_layer":
                    layers[rec["layer"]] = rec
            if r["rc"] != 0 or not layers:
                status = "fail"
                notes.append(f"bench_conv2d --algos rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: "
                             f"{r['err'].strip()[-300:]}")
            cudnn = {}
            if self.python and self.torch_version:
                lst = self.run([os.path.join(bindir, "bench_conv2d"), "--list"], 30)
                path = os.path.join(self.work, "conv_layers.jsonl")
                with open(path, "w") as f:
                    f.write(lst["out"])
                r = self.run([self.python, os.path.join(self.root, "bench", "pytorch_conv.py"),
                              "--layers", path, "--seconds", "0.05"], min(150, self.left() * 0.3),
                             env=dict(os.environ), tag="pytorch conv")
                for rec in json_lines(r["out"]):
                    self.record(step="i", source="pytorch_conv", **rec)
                    cudnn[(rec["layer"], rec["pass"], rec["precision"])] = rec["median_ms"]
                if r["rc"] != 0:
                    notes.append(f"pytorch_conv rc {r['rc']}: {r['err'].strip()[-200:]}")
            md += ["| layer | batch | ours fwd+bwd ms (fastest per pass) | im2col | cuDNN fp32 | "
                   "cuDNN / ours | of SGEMM | ours TF32 (fastest per pass) | cuDNN TF32 |",
                   "|---|---|---|---|---|---|---|---|---|"]
            fmt = lambda v: f"{v:.3f}" if v else "—"
            for name, L in layers.items():
                cd = [cudnn.get((name, p, "fp32")) for p in ("fwd", "bwd_data", "bwd_weight")]
                ct = [cudnn.get((name, p, "tf32")) for p in ("fwd", "bwd_data", "bwd_weight")]
                cd_sum = sum(cd) if all(cd) else None
                ct_sum = sum(ct) if all(ct) else None
                ratio = cd_sum / L["best_fwd_bwd_ms"] if cd_sum else None
                self.record(step="i", kind="conv_compare", layer=name, batch=L["n"], ours_ms=L["best_fwd_bwd_ms"],
                            best=L["best"], im2col_ms=L["im2col_fwd_bwd_ms"], cudnn_fp32_ms=cd_sum,
                            cudnn_over_ours=ratio, frac_of_sgemm=L["best_frac_of_sgemm"],
                            ours_tf32_ms=L.get("best_tf32_fwd_bwd_ms"), best_tf32=L.get("best_tf32"),
                            cudnn_tf32_ms=ct_sum)
                md.append(f"| {name} | {L['n']} | {fmt(L['best_fwd_bwd_ms'])} ({L['best']}) | "
                          f"{fmt(L['im2col_fwd_bwd_ms'])} | {fmt(cd_sum)} | "
                          f"{f'{ratio:.2f}' if ratio else '—'} | {L['best_frac_of_sgemm']:.2f} | "
                          f"{fmt(L.get('best_tf32_fwd_bwd_ms'))} ({L.get('best_tf32', '')}) | {fmt(ct_sum)} |")
        # Part 0 (items 1-3 end to end): LeNet/MNIST trained with TF32 against strict fp32 (the
        # accuracy must agree within 0.1 point), and twice with cuda.conv_algo = igemm (the
        # implicit-GEMM path in training: the accuracy of the fp32 run within 0.25 point, the
        # same params_sha256 both times, each pass's algorithm in summary.json).
        full = self.iterations if self.rehearsal else 10000
        runs0 = {}
        for tag, iters, extra in (("fp32", full, []), ("tf32", full, ["--set", "cuda.tf32=true"]),
                                  ("tf32_igemm", full, ["--set", "cuda.tf32=true",
                                                        "--set", "cuda.conv_algo=igemm"]),
                                  ("igemm", full, ["--set", "cuda.conv_algo=igemm"]),
                                  ("igemm_rerun", full, ["--set", "cuda.conv_algo=igemm"])):
            if self.left() < 120:
                notes.append(f"budget spent before the LeNet {tag} run")
                break
            out = os.path.join(self.work, "runs", f"i_lenet_{tag}")
            shutil.rmtree(out, ignore_errors=True)
            r = self.run(self.train_cmd(out, self.dev, 1, "none", iters, 100, extra), 120,
                         tag=f"lenet {tag}")
            s_, _ = self.read_run(out)
            runs0[tag] = s_
            if r["rc"] != 0 or s_ is None:
                status = "fail"
                notes.append(f"LeNet {tag}: rc {r['rc']}: {r['err'].strip()[-200:]}")
        acc = {k: 100 * v["test_accuracy"] for k, v in runs0.items() if v}
        rec0 = {"kind": "lenet_precision", "iterations": full, "accuracy": acc,
                "sha": {k: v.get("params_sha256") for k, v in runs0.items() if v},
                "igemm_conv_algorithms": (runs0.get("igemm") or {}).get("conv_algorithms")}
        # Both TF32 paths (cuBLAS TF32 under im2col; the implicit GEMM's tensor-core twins) must
        # land within 0.1 point of strict fp32.
        for t in ("tf32", "tf32_igemm"):
            if "fp32" in acc and t in acc:
                rec0[f"{t}_minus_fp32_points"] = acc[t] - acc["fp32"]
                if abs(rec0[f"{t}_minus_fp32_points"]) > 0.1:
                    status = "fail"
                    notes.append(f"{t} {acc[t]:.2f}% vs fp32 {acc['fp32']:.2f}% (target: within 0.1)")
        tf32_algos = (runs0.get("tf32_igemm") or {}).get("conv_algorithms")
        rec0["tf32_igemm_conv_algorithms"] = tf32_algos
        if not self.rehearsal and runs0.get("tf32_igemm") and not (
                tf32_algos and all(str(a).endswith("_tf32") for a in dict(tf32_algos).values())):
            status = "fail"
            notes.append(f"the tf32_igemm run did not record TF32 twins for every pass: {tf32_algos}")
        if "fp32" in acc and "igemm" in acc and abs(acc["igemm"] - acc["fp32"]) > 0.25:
            status = "fail"
            notes.append(f"igemm {acc['igemm']:.2f}% vs im2col {acc['fp32']:.2f}%")
        if runs0.get("igemm") and runs0.get("igemm_rerun"):
            rec0["igemm_deterministic"] = runs0["igemm"]["params_sha256"] == runs0["igemm_rerun"]["params_sha256"]
            if not rec0["igemm_deterministic"]:
                status = "fail"
                notes.append("two igemm runs ended with different parameters")
            if not self.rehearsal and not rec0["igemm_conv_algorithms"]:
                status = "fail"
                notes.append("the igemm run's summary.json has no conv_algorithms")
        self.record(step="i", **rec0)
        md += ["", "LeNet/MNIST, " + f"{full} iterations: " +
               ", ".join(f"{k} {v:.2f}%" for k, v in acc.items()) +
               (f"; igemm runs {'bit-identical' if rec0.get('igemm_deterministic') else 'DIFFER'}"
                if "igemm_deterministic" in rec0 else ""), ""]
        # Part 2: the training step, five nets, fp32 and TF32.
        nets = self.NETS_I[3:4] if self.rehearsal else self.NETS_I
        secs = "0.3" if self.rehearsal else "1"
        ours, torch_res = {}, {}
        # Ours in both precisions first, then PyTorch eager, then torch.compile (slowest to start:
        # what the budget drops first).
        phases = [("ours", "fp32"), ("ours", "tf32"), ("eager", "fp32"), ("eager", "tf32"),
                  ("compile", "fp32"), ("compile", "tf32")]
        for side, precision in phases:
            if side != "ours" and not (self.python and self.torch_version):
                continue
            for net, batch in nets:
                if self.left() < (60 if side == "ours" else 40):
                    notes.append(f"budget spent before {side} {net} {precision}")
                    break
                if side == "ours":
                    sets = ["--set", "cuda.conv_algo=autotune", "--set",
                            f"cuda.tf32={'true' if precision == 'tf32' else 'false'}"]
                    r = self.run([os.path.join(bindir, "bench_train"), "--device", self.dev, "--net", net,
                                  "--batch", str(batch), "--seconds", secs] + sets,
                                 min(90, self.left() - 50), tag=f"bench_train {net} {precision}")
                    for rec in json_lines(r["out"]):
                        if rec.get("kind") == "step":
                            ours[(net, precision)] = rec
                            self.record(step="i", source="bench_train", precision=precision, **rec)
                    if r["rc"] != 0:
                        status = "fail"
                        notes.append(f"bench_train {net} {precision} rc {r['rc']}: {r['err'].strip()[-200:]}")
                    continue
                extra = (["--tf32"] if precision == "tf32" else []) + (["--compile"] if side == "compile" else [])
                r = self.run([self.python, os.path.join(self.root, "bench", "pytorch_step.py"),
                              "--device", self.dev, "--net", net, "--batch", str(batch),
                              "--seconds", secs] + extra,
                             min(150 if side == "compile" else 60, self.left() - 30),
                             env=dict(os.environ), tag=f"pytorch {side} {net} {precision}")
                for rec in json_lines(r["out"]):
                    if rec.get("kind") == "pytorch_step":
                        torch_res[(net, precision, side)] = rec
                        self.record(step="i", source="pytorch", mode=side, precision=precision, **rec)
                if r["rc"] != 0:
                    notes.append(f"torch {side} {net} {precision}: rc {r['rc']}"
                                 f"{' (timed out)' if r['timed_out'] else ''}")
        md += ["", "| net | batch | precision | terngrad ms/step | − H2D | PyTorch eager | torch.compile | "
               "eager / ours |", "|---|---|---|---|---|---|---|---|"]
        lines = []
        for precision in ("fp32", "tf32"):
            for net, batch in nets:
                o = ours.get((net, precision))
                e = torch_res.get((net, precision, "eager"))
                c = torch_res.get((net, precision, "compile"))
                if not o and not e:
                    continue
                ours_net = o["step_ms"] - o.get("transfer_ms", 0) if o else None
                line = {"net": net, "batch": batch, "precision": precision,
                        "terngrad_ms": o["step_ms"] if o else None,
                        "terngrad_minus_h2d_ms": ours_net,
                        "pytorch_eager_ms": e["step_ms"] if e else None,
                        "pytorch_compile_ms": c["step_ms"] if c else None,
                        "gpu": self.gpu_name, "commit": self.commit,
                        "conv_algo": o.get("conv_algo") if o else None,
                        "conv_algorithms": o.get("conv_algorithms") if o else None,
                        "torch": self.torch_version, "rehearsal": self.rehearsal}
                lines.append(line)
                self.record(step="i", kind="compare", **line)
                fmt = lambda v: f"{v:.3f}" if v is not None else "—"
                ratio = e["step_ms"] / ours_net if o and e else None
                md.append(f"| {net} | {batch} | {precision} | {fmt(line['terngrad_ms'])} | {fmt(ours_net)} | "
                          f"{fmt(line['pytorch_eager_ms'])} | {fmt(line['pytorch_compile_ms'])} | "
                          f"{f'{ratio:.2f}×' if ratio else '—'} |")
        with open(os.path.join(self.results, "gpu-compare.jsonl"), "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        self.summary["i"] = md
        if not lines:
            status = "fail"
            notes.append("no training-step comparison")
        return status, "; ".join(notes)[:600] or f"{len(lines)} net x precision lines in gpu-compare.jsonl"

    # ---- step j ---------------------------------------------------------------------------------
    # (issue 33 item 6) The GPU race: AlexNet, two ranks sharing the GPU, Gloo over a veth pair
    # shaped to 1 Gbit/s (bench/race.sh --device cuda): terngrad train fp32 and TernGrad, DDP
    # fp32 and its fp16 hook, and, when step h built terngrad_torch in this call, DDP with the
    # terngrad_torch hook with and without error feedback; perf-model's figure for the setting
    # from compute and encode times measured on the GPU. As root the lab is made directly; else
    # inside `unshare --net --mount --map-root-user` with a tmpfs on /run (where `ip netns`
    # keeps its names), if step a found user namespaces can shape a link.
    def step_j(self):
        if self.no_gpu and not self.rehearsal:
            return "no-gpu", "no CUDA device"
        probe = self.netns
        root = os.geteuid() == 0
        if not probe.get("ip") or not probe.get("tc"):
            return "not-possible", "no ip/tc on this machine (iproute2): the race needs them"
        if not root and not probe.get("user_netns_tbf"):
            return "not-possible", ("not root and user namespaces cannot shape a link: "
                                    f"{probe.get('user_netns_tbf_error', 'unshare failed')}")
        if not self.python or not self.torch_version:
            return "fail", "no python3 with torch: the DDP baselines cannot run"
        # The binaries with the bundle's libraries, torch with its own: wrappers carry the
        # LD_LIBRARY_PATH, the race runs with the machine's environment.
        wrap = {}
        for name in ("terngrad", "bench_train"):
            path = os.path.join(self.work, f"{name}-wrapped")
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nLD_LIBRARY_PATH='{self.env['LD_LIBRARY_PATH']}' exec "
                        f"'{os.path.join(self.root, 'bin', name)}' \"$@\"\n")
            os.chmod(path, 0o755)
            wrap[name] = path
        methods = ["none", "terngrad", "ddp", "ddp-fp16"]
        notes = []
        if self.ext_pythonpath:
            methods += ["ddp-terngrad", "ddp-terngrad-ef"]
        else:
            notes.append("terngrad_torch not built in this call (run --only a,h,j): its two methods skipped")
        net, batch, iters, warm = ("lenet", 64, 20, 10) if self.rehearsal else ("alexnet", 128, 12, 4)
        out = os.path.join(self.work, "race")
        shutil.rmtree(out, ignore_errors=True)
        cmd = ["bash", os.path.join(self.root, "bench", "race.sh"), "--device", self.dev,
               "--nets", net, "--procs", "2", "--methods", ",".join(methods),
               "--terngrad", wrap["terngrad"], "--bench-train", wrap["bench_train"],
               "--python", self.python, "--terngrad-torch", self.ext_pythonpath or "/nonexistent",
               "--batch", f"{net}={batch}", "--iterations", f"{net}={iters}", "--warmup", f"{net}={warm}",
               # AlexNet's slowest run (fp32 at 1 Gbit/s: ~2 s a step) takes ~40 s with start-up;
               # a hung run (the CPU lab's DDP fp16 flake) must not eat the call.
               "--timeout", "90", "--out", out]
        if not root:
            cmd = ["unshare", "--net", "--mount", "--map-root-user", "--propagation", "private",
                   "sh", "-c", 'mount -t tmpfs tmpfs /run && exec "$@"', "sh"] + cmd
        env = dict(os.environ, PATH=os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin")
        r = self.run(cmd, max(60.0, self.left() - 15), env=env, tag="race")
        rows = []
        try:
            with open(os.path.join(out, "results.jsonl")) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        except OSError:
            pass
        for row in rows:
            self.record(step="j", kind="race_row", **{k: v for k, v in row.items() if k != "dir"})
        table = [l for l in r["out"].splitlines() if l.startswith("|") or l.startswith("- ")]
        self.summary["j"] = [f"AlexNet b{batch} (2 ranks x {batch // 2}) on one GPU, Gloo over veths "
                             f"shaped to 1 Gbit/s, {iters} steps ({warm} warm-up)" if not self.rehearsal
                             else "rehearsal: LeNet on the CPU", ""] + table
        for v in (l[2:] for l in table if l.startswith("- ")):
            self.record(step="j", kind="race_verdict", verdict=v)
        if r["rc"] != 0 or not rows:
            why = "timed out" if r["timed_out"] else f"rc {r['rc']}: {r['err'].strip()[-400:]}"
            return "fail", "; ".join(notes + [f"race.sh {why}"])
        return "pass", "; ".join(notes) or f"{len(rows)} runs; table in summary.md"

    # ---- the whole check -------------------------------------------------------------------------
    def main(self):
        self.say(f"bundle {self.bundle}, results {self.results}, work {self.work}")
        manifest = os.path.join(self.bundle, "MANIFEST.txt")
        if os.path.exists(manifest):
            with open(manifest) as f:
                head = [next(f, "").strip() for _ in range(5)]
            self.record(step="setup", kind="bundle", manifest=head)
            for line in head:
                if line.startswith("commit: "):
                    self.commit = line[len("commit: "):]
        err = self.unpack()
        if err:
            self.record(step="setup", status="fail", why=err)
            self.say(err)
            self.finish(EXIT_BUNDLE)
            return EXIT_BUNDLE
        self.python, self.torch_version = self.find_python()
        self.record(step="setup", kind="python", python=self.python, torch=self.torch_version)
        unresolved, problems, _ = self.find_libraries()
        if unresolved or problems:
            why = "libraries not found: " + ", ".join(unresolved + problems)
            self.say(why)
            self.record(step="setup", status="fail", why=why)
            self.steps.append(("setup", "find libraries", "fail", 0.0, why))
            self.finish(EXIT_BUNDLE)
            return EXIT_BUNDLE
        self.steps.append(("setup", "unpack, find libraries", "pass", now() - self.t0,
                           f"LD_LIBRARY_PATH={self.env['LD_LIBRARY_PATH']}"))
        self.step("a", "GPU, driver and library versions, device properties", self.step_a)
        self.start_cpu_references()
        self.step("b", "CUDA test executables", self.step_b)
        self.step("c", "LeNet/MNIST training on the GPU against the CPU", self.step_c)
        for bg in getattr(self, "cpu_bg", {}).values():  # step c skipped or failed early
            if bg["p"].poll() is None:
                kill_group(bg["p"])
        self.step("d", "training step time: bench_train against PyTorch", self.step_d)
        self.step("e", "TernGrad kernels: bench_ternary", self.step_e)
        self.step("f", "NCCL training runs", self.step_f)
        self.step("g", "JPEG input: the loader on every core, AlexNet from JPEGs", self.step_g)
        self.step("h", "PyTorch extension: build from the bundle's source, the DDP hook on CUDA", self.step_h)
        self.step("i", "GPU engine sweep: conv algorithms per layer, five nets against PyTorch, "
                       "fp32 and TF32", self.step_i)
        self.step("j", "GPU race: AlexNet, two ranks on one GPU over a shaped 1 Gbit/s link",
                  self.step_j)
        code = EXIT_FAILED if self.failed else EXIT_NO_GPU if self.no_gpu else EXIT_OK
        if self.rehearsal:
            self.record(step="setup", kind="rehearsal",
                        note="steps c-h ran on the CPU (--rehearse-on-cpu): not GPU results")
        self.finish(code)
        return code

    def finish(self, code):
        # Archives: GoogleTest XML, each training run's summary and metrics.
        xml_dir = os.path.join(self.work, "xml")
        if os.path.isdir(xml_dir) and os.listdir(xml_dir):
            with tarfile.open(os.path.join(self.results, "gtest-xml.tar.gz"), "w:gz") as t:
                t.add(xml_dir, arcname="gtest-xml")
        runs = os.path.join(self.work, "runs")
        if os.path.isdir(runs) and os.listdir(runs):
            with tarfile.open(os.path.join(self.results, "runs.tar.gz"), "w:gz") as t:
                for d in sorted(os.listdir(runs)):
                    for f in ("summary.json", "metrics.jsonl", "config.toml"):
                        p = os.path.join(runs, d, f)
                        if os.path.exists(p):
                            t.add(p, arcname=f"runs/{d}/{f}")
        verdict = {EXIT_OK: "PASS: every step passed", EXIT_FAILED: "FAIL: a step failed",
                   EXIT_BUNDLE: "BROKEN BUNDLE: could not start",
                   EXIT_NO_GPU: "NO CUDA DEVICE: start-up checked, GPU steps skipped"}[code]
        gpu = next((l for l in self.summary.get("a", []) if "nvidia-smi" in l or "device 0" in l), "")
        lines = ["# terngrad GPU check" + (" (REHEARSAL ON THE CPU: no GPU results)" if self.rehearsal else ""), "",
                 f"{verdict} (exit {code}), {now() - self.t0:.0f} s.", ""]
        if gpu:
            lines += [gpu.lstrip("- "), ""]
        lines += ["| step | what | status | s | note |", "|---|---|---|---|---|"]
        for letter, title, status, secs, note in self.steps:
            note = note.replace("|", "/").replace("\n", " ")
            lines.append(f"| {letter} | {title} | {status} | {secs:.0f} | {note[:400]} |")
        titles = {"a": "a. Device", "b": "b. CUDA tests", "c": "c. Training: GPU against CPU",
                  "d": "d. Step time against PyTorch", "e": "e. TernGrad kernels", "f": "f. NCCL",
                  "g": "g. JPEG input", "h": "h. PyTorch extension",
                  "i": "i. GPU engine against PyTorch (per conv layer; per training step)",
                  "j": "j. The GPU race over a shaped link"}
        for k in "abcdefghij":
            if self.summary.get(k):
                lines += ["", f"## {titles[k]}", ""] + self.summary[k]
        lines += ["", "Every finding is a JSON line in results.jsonl; every command and its output "
                      "is in log.txt."]
        with open(os.path.join(self.results, "summary.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        self.record(step="end", exit=code, verdict=verdict, seconds=round(now() - self.t0, 1))
        print("\n".join(lines))
        self.log_f.close()
        self.jsonl.close()
        if self.own_work:
            shutil.rmtree(self.work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description="terngrad GPU check (run via gpu-check.sh)",
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=os.environ.get("OUT") or "gpu-results",
                   help="results folder (default $OUT if set, else ./gpu-results)")
    p.add_argument("--work", default=None,
                   help="scratch folder, kept (default: a fresh temp folder, removed at the end)")
    p.add_argument("--budget", type=float, default=510.0, help="seconds for all steps (default 510)")
    p.add_argument("--iterations", type=int, default=2000, help="step c's training iterations")
    p.add_argument("--only", default="",
                   help="comma-separated steps to run (default a,...,h; i and j only when named)")
    p.add_argument("--rehearse-on-cpu", action="store_true",
                   help="test this script without a GPU: steps c-h on the CPU (Gloo for NCCL); "
                        "the results say so and are no GPU results")
    args = p.parse_args()
    if args.only and not set(args.only.split(",")) <= set("abcdefghij"):
        p.error(f"--only: expected letters from a,b,c,d,e,f,g,h,i,j, got '{args.only}'")
    if args.iterations < 1 or args.budget < 30:
        p.error("--iterations must be >= 1 and --budget >= 30")
    return Check(args).main()


if __name__ == "__main__":
    sys.exit(main())
