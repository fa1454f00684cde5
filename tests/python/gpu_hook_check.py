"""terngrad_torch on CUDA tensors: step h of the GPU check (scripts/gpu_check.py) runs this against
the extension it built from the bundle's source (PYTHONPATH=<build>/python). With --device cpu it
runs the same cases on CPU tensors, so the check can be rehearsed on a machine without a GPU.

Usage: python gpu_hook_check.py --device cuda|cpu [--cases one_rank,two_ranks_gloo,bf16_autocast]
                                [--timeout SECONDS]

Cases, each in processes of its own (a crash or hang in one cannot take the others), each printed
as one JSON line {"case", "status": pass|fail|unsupported, "why", ...}:
  one_rank        world size 1 over NCCL (Gloo on the CPU): a small conv net under DDP with
                  terngrad_hook, 4 SGD steps; every bucket the hook handed back must equal the
                  library's one-process aggregation (_C.aggregate_local, what the CPU tests compare
                  against: tests/python/test_terngrad_torch.py) of the same bucket moved to the
                  CPU, bit for bit, or within kRelTol (a GPU's sigma may round differently).
  two_ranks_gloo  two processes on the same device over Gloo (CUDA tensors on a GPU): every bucket
                  against aggregate_local of both ranks' buckets, and both ranks end with the same
                  parameters. "unsupported" when this torch's Gloo refuses CUDA tensors.
  bf16_autocast   the net in bf16 under DDP + torch.autocast(bfloat16), world size 1, 3 steps: the
                  hook hands back bf16 buckets, all finite, and the loss stays finite.
Exit 0 when no case failed, 1 otherwise.
"""

import argparse
import json
import os
import queue
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The hook's output against aggregate_local on the CPU: a GPU's per-tensor sigma (a reduction)
# may differ from the CPU's in the last bits, which scales every element of that tensor alike.
kRelTol = 1e-5
# ... and a scaler that differs in its last bits may flip a stochastic-rounding decision whose
# uniform fell exactly between the two thresholds: tolerated for this fraction of elements.
kFlipFraction = 1e-4
kClip, kSeed = 2.5, 5
CASES = ("one_rank", "two_ranks_gloo", "bf16_autocast")


def _net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
    )


def _worker(rank, world, store, case, device, q):
    """One rank of a case: DDP with the hook; puts (rank, result) on q."""
    try:
        from terngrad_torch import TernGradState, terngrad_hook
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from hook_records import recording_hook

        torch.set_num_threads(1)
        backend = "nccl" if device == "cuda" and case != "two_ranks_gloo" else "gloo"
        if device == "cuda":
            torch.cuda.set_device(0)
        dist.init_process_group(backend, init_method="file://" + store, rank=rank,
                                world_size=world)
        dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        bf16 = case == "bf16_autocast"
        torch.manual_seed(0)
        model = _net().to(dev, torch.bfloat16 if bf16 else torch.float32)
        # Small buckets: several per step, so bucket order and indices matter.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 16 << 10
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[0] if device == "cuda" else None, bucket_cap_mb=0.02)
        state = TernGradState(clip=kClip, seed=kSeed)
        records = []

        ddp.register_comm_hook(state, recording_hook(terngrad_hook, records))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(100 + rank)
        losses = []
        for _ in range(3 if bf16 else 4):
            x = torch.randn(16, 1, 28, 28, generator=g).to(dev)
            y = torch.randint(0, 10, (16,), generator=g).to(dev)
            opt.zero_grad()
            if bf16:
                with torch.autocast(device_type=device, dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(ddp(x.bfloat16()), y)
            else:
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        if device == "cuda":
            torch.cuda.synchronize()
        flat = torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])
        q.put((rank, {"records": [{k: (v.numpy() if torch.is_tensor(v) else v)
                                   for k, v in r.items()} for r in records],
                      "params": flat.numpy(), "losses": losses, "routes": dict(state.routes),
                      "bytes_sent": state.bytes_sent, "backend": backend,
                      "param_dtype": str(next(model.parameters()).dtype).replace("torch.", "")}))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # reported to the parent, which names the case
        q.put((rank, {"error": f"{type(e).__name__}: {e}",
                      "trace": traceback.format_exc()[-1500:]}))
        sys.exit(1)


def _spawn(case, world, device, timeout):
    """Runs a case's ranks; returns ({rank: result}, why-not-all)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    got = {}
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=_worker, args=(r, world, os.path.join(d, "store"), case,
                                                   device, q)) for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while len(got) < world and time.monotonic() < deadline:
            try:
                rank, res = q.get(timeout=1)
                got[rank] = res
                if "error" in res:
                    break
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs) and q.empty():
                    break
        for p in procs:
            p.join(timeout=30 if len(got) == world else 1)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [f"rank {r}: {res['error']}" for r, res in sorted(got.items()) if "error" in res]
    if errors:
        return got, "; ".join(errors)
    if len(got) < world:
        codes = [p.exitcode for p in procs]
        return got, f"only {len(got)} of {world} ranks reported within {timeout:.0f} s (exit codes {codes})"
    return got, None


def _compare(got, world):
    """Every bucket of every step against aggregate_local of all ranks' copies of it."""
    from terngrad_torch import _C

    o = _C.HookOptions()
    o.clip, o.pack, o.seed = kClip, "two_bit", kSeed
    by_rank = [{(r["step"], r["index"]): r for r in got[k]["records"]} for k in range(world)]
    keys = sorted(by_rank[0])
    if any(sorted(b) != keys for b in by_rank):
        return {"buckets": 0}, "the ranks handed the hook different buckets"
    exact, worst, flips, total = 0, 0.0, 0, 0
    for key in keys:
        r0 = by_rank[0][key]
        want = _C.aggregate_local([torch.from_numpy(b[key]["buffer"]) for b in by_rank],
                                  r0["numels"], r0["ids"], o, key[0])
        for b in by_rank:
            out = torch.from_numpy(b[key]["out"])
            if out.shape != want.shape:
                return {"buckets": len(keys)}, f"bucket {key}: {tuple(out.shape)} vs {tuple(want.shape)}"
            total += out.numel()
            if torch.equal(out, want):
                exact += 1
                continue
            scale = float(want.abs().max()) or 1.0
            diff = (out - want).abs() / scale
            flips += int((diff > kRelTol).sum())
            worst = max(worst, float(diff[diff <= kRelTol].max()) if (diff <= kRelTol).any() else 0.0)
    n = len(keys) * world
    rec = {"buckets": len(keys), "bit_identical": exact, "of": n, "max_rel_diff": worst,
           "elements_beyond_tol": flips, "elements": total}
    if flips > kFlipFraction * total:
        return rec, f"{flips} of {total} elements differ from aggregate_local by more than {kRelTol} of the bucket's max"
    return rec, None


def run_case(case, device, timeout):
    world = 2 if case == "two_ranks_gloo" else 1
    t = time.monotonic()
    got, why = _spawn(case, world, device, timeout)
    rec = {"case": case, "device": device, "world_size": world}
    if why:
        low = why.lower()
        # Gloo without CUDA tensors (a torch built so), or without bf16 (torch < 2.0's Gloo:
        # "Invalid scalar type" in DDP's first broadcast): the torch's limit, not the hook's.
        unsupported = (case == "two_ranks_gloo" and device == "cuda" and any(
            s in low for s in ("not supported", "unsupported", "only supports cpu", "no support"))
        ) or (case == "bf16_autocast" and device == "cpu" and "invalid scalar type" in low)
        rec.update(status="unsupported" if unsupported else "fail", why=why[-1200:],
                   trace=next((r["trace"] for r in got.values() if "trace" in r), "")[-1200:])
    else:
        r0 = got[0]
        rec.update(backend=r0["backend"], losses=r0["losses"], routes=r0["routes"],
                   bytes_sent=r0["bytes_sent"], param_dtype=r0["param_dtype"])
        if case == "bf16_autocast":
            dtypes = sorted({r.get("dtype") for r in r0["records"]})
            finite = all(bool(torch.isfinite(torch.from_numpy(r["out"])).all()) for r in r0["records"])
            rec.update(out_dtypes=dtypes, buckets=len(r0["records"]), finite=finite)
            if dtypes != ["bfloat16"]:
                why = f"the hook handed back {dtypes}, not bfloat16"
            elif not finite or not all(abs(l) < float("inf") for l in r0["losses"]):
                why = "non-finite hook output or loss"
        else:
            cmp, why = _compare(got, world)
            rec.update(cmp)
            if not why and world == 2:
                same = all((got[0]["params"] == got[k]["params"]).all() for k in range(world))
                rec["ranks_identical_params"] = bool(same)
                if not same:
                    why = "the two ranks ended with different parameters"
            devs = sorted({r.get("device") for r in r0["records"]})
            rec["out_devices"] = devs
            if not why and device == "cuda" and not all(d.startswith("cuda") for d in devs):
                why = f"the hook handed back tensors on {devs}, not on the GPU"
        rec.update(status="fail" if why else "pass", why=why or "")
    rec["seconds"] = round(time.monotonic() - t, 1)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per case")
    args = ap.parse_args()
    cases = args.cases.split(",")
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"--cases: unknown {bad}; known: {', '.join(CASES)}")
    print(json.dumps({"kind": "hook_env", "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                      "cuda_available": torch.cuda.is_available(),
                      "device_name": torch.cuda.get_device_name(0) if args.device == "cuda"
                      and torch.cuda.is_available() else "cpu",
                      "nccl": str(torch.cuda.nccl.version())  # a tuple, or an int in older torch
                      if args.device == "cuda" and torch.cuda.is_available() else None}), flush=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        for c in cases:
            print(json.dumps({"case": c, "status": "fail", "why": "torch.cuda.is_available() is False"}))
        return 1
    failed = False
    for c in cases:
        rec = run_case(c, args.device, args.timeout)
        failed |= rec["status"] == "fail"
        print(json.dumps(rec), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
