#!/usr/bin/env python3
"""What a restart costs (issue 34 item 4): `terngrad train --nproc 2 --max-restarts 1`, rank 1
killed with SIGKILL right after rank 0 logs iteration --kill-at, on this machine's CPU.

  bench/restart.py [--terngrad BIN] [--models lenet,alexnet] [--quick]

For each model, from the moment of the kill (timestamps of the launcher's stderr lines, read as
they arrive):
  detect_s       until the launcher names the dead rank
  stop_s         until it has stopped the others and announces the restart
  resume_s       until rank 0 of the new start has restored the checkpoint ("resuming at")
  first_step_s   until the first iteration after the restart is done: the restart's cost
  redone         iterations done again: the last one logged before the kill - the checkpoint's
  caught_up_s    until the iteration killed at is done again
  step_s         one iteration's time before the kill (median), so first_step_s - step_s is what
                 the restart itself took
and, for reference, start_s: from starting the launcher to the first iteration done (what a
fresh start costs; the restart adds reading the checkpoint).
Target (LeNet): first_step_s <= 10 s (redone iterations are on top: caught_up_s).

  lenet    LeNet on MNIST (../shared/data/mnist), TernGrad, 2 workers, batch 64, a checkpoint
           every 50 iterations, killed at 75 (25 redone)
  alexnet  AlexNet on synthetic 3x224x224 images, TernGrad, 2 workers, batch 16, a checkpoint
           (732 MB) every 2 iterations, killed at 3 (1 redone)

Prints one JSON object per model on stdout and a table on stderr. Exit 0, 1 when a run fails,
2 on usage errors, 77 when the binary or MNIST is missing.
"""

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST = os.path.join(ROOT, "..", "shared", "data", "mnist")

MODELS = {
    "lenet": dict(
        kill_at=75,
        iterations=100,
        args=["--set", "data.path=" + MNIST, "--set", "train.batch_size=64",
              "--set", "train.checkpoint_every=50", "--set", "data.eval_limit=1000"],
    ),
    "alexnet": dict(
        kill_at=3,
        iterations=5,
        args=["--set", "model.name=alexnet", "--set", "data.name=synthetic",
              "--set", "data.synthetic_channels=3", "--set", "data.image_size=224",
              "--set", "data.synthetic_size=64", "--set", "data.eval_limit=16",
              "--set", "data.eval_batch_size=16", "--set", "train.batch_size=16",
              "--set", "train.checkpoint_every=2"],
    ),
}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def rank_pid(launcher, rank):
    """The child of `launcher` whose environment has TG_RANK=rank."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != launcher:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if f"TG_RANK={rank}".encode() in env:
                return int(name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def step_of(line):
    """N of a '[rank 0] step N/M ...' line, else None."""
    prefix = "[rank 0] step "
    if not line.startswith(prefix):
        return None
    try:
        return int(line[len(prefix):].split("/", 1)[0])
    except ValueError:
        return None


def measure(binary, name, spec, workdir):
    out = os.path.join(workdir, name)
    cmd = [binary, "train", "--nproc", "2", "--max-restarts", "1", "--no-progress",
           "--set", "workers.count=2", "--set", "compression.method=terngrad",
           "--set", f"train.iterations={spec['iterations']}", "--set", "train.log_every=1",
           *spec["args"], "--out", out]
    t_start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []  # (seconds, line)
    t_kill = None
    steps_before = []  # (seconds, step) before the kill
    killed_at_step = None
    for raw in proc.stderr:
        now = time.monotonic()
        line = raw.rstrip("\n")
        lines.append((now, line))
        s = step_of(line)
        if t_kill is None and s is not None:
            steps_before.append((now, s))
            if s >= spec["kill_at"]:
                victim = rank_pid(proc.pid, 1)
                if victim is None:
                    proc.kill()
                    raise RuntimeError(f"{name}: rank 1's process not found")
                os.kill(victim, signal.SIGKILL)
                t_kill = time.monotonic()
                killed_at_step = s
    code = proc.wait()
    log = "\n".join(l for _, l in lines)
    if code != 0 or t_kill is None:
        raise RuntimeError(f"{name}: the run failed (exit {code}); its stderr:\n{log}")

    def first_after(pred, since):
        for t, l in lines:
            if t >= since and pred(l):
                return t, l
        raise RuntimeError(f"{name}: no line after the kill matched; stderr:\n{log}")

    t_detect, _ = first_after(lambda l: l.startswith("[launch] rank 1 was killed"), t_kill)
    t_stop, _ = first_after(lambda l: l.startswith("[launch] restart 1 of 1"), t_kill)
    t_resume, resume_line = first_after(lambda l: l.startswith("[rank 0] resuming at iteration"),
                                        t_stop)
    resumed = int(resume_line.rsplit(" ", 1)[1])
    t_first, _ = first_after(lambda l: step_of(l) is not None, t_resume)
    t_caught, _ = first_after(lambda l: (step_of(l) or -1) >= killed_at_step, t_resume)
    gaps = [b[0] - a[0] for a, b in zip(steps_before, steps_before[1:])]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    ckpt = os.path.join(out, "checkpoint.tgckpt")
    return {
        "bench": "restart",
        "model": name,
        "processes": 2,
        "machine": f"{cpu_name()}, {os.cpu_count()} CPUs",
        "checkpoint_mb": round(os.path.getsize(ckpt) / 1e6, 1),
        "killed_after_iteration": killed_at_step,
        "resumed_at_iteration": resumed,
        "redone": killed_at_step - resumed,
        "step_s": round(statistics.median(gaps), 3) if gaps else None,
        "start_s": round(steps_before[0][0] - t_start, 3),
        "detect_s": round(t_detect - t_kill, 3),
        "stop_s": round(t_stop - t_kill, 3),
        "resume_s": round(t_resume - t_kill, 3),
        "first_step_s": round(t_first - t_kill, 3),
        "caught_up_s": round(t_caught - t_kill, 3),
        "restarts": summary.get("restarts"),
        "params_sha256": summary.get("params_sha256"),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--terngrad", default=os.path.join(ROOT, "build", "cmd", "terngrad"))
    p.add_argument("--models", default="lenet,alexnet")
    p.add_argument("--quick", action="store_true", help="LeNet only")
    a = p.parse_args()
    models = ["lenet"] if a.quick else [m for m in a.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            print(f"restart.py: unknown model '{m}' (expected lenet, alexnet)", file=sys.stderr)
            return 2
    if not os.access(a.terngrad, os.X_OK):
        print(f"restart.py: skipped: {a.terngrad} is not an executable", file=sys.stderr)
        return 77
    if "lenet" in models and not os.path.isdir(MNIST):
        print(f"restart.py: skipped: MNIST is missing at {MNIST}", file=sys.stderr)
        return 77
    rows = []
    with tempfile.TemporaryDirectory(prefix="tg-restart-") as work:
        for m in models:
            try:
                r = measure(os.path.abspath(a.terngrad), m, MODELS[m], work)
            except RuntimeError as e:
                print(f"restart.py: {e}", file=sys.stderr)
                return 1
            print(json.dumps(r), flush=True)
            rows.append(r)
    print(f"\nrestart after SIGKILL of rank 1 of 2, {rows[0]['machine']}", file=sys.stderr)
    print("| model | checkpoint MB | step s | start s | detect s | stop s | resume s | first step s "
          "| redone | caught up s |", file=sys.stderr)
    print("|---|---|---|---|---|---|---|---|---|---|", file=sys.stderr)
    for r in rows:
        print(f"| {r['model']} | {r['checkpoint_mb']} | {r['step_s']} | {r['start_s']} | "
              f"{r['detect_s']} | "
              f"{r['stop_s']} | {r['resume_s']} | {r['first_step_s']} | {r['redone']} | "
              f"{r['caught_up_s']} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
