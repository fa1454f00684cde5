#!/usr/bin/env python3
"""One rank of PyTorch DistributedDataParallel (Gloo; CPU, or --device cuda): the baseline of bench/race.sh.

What it runs
------------
The same training step as `terngrad train` and bench/pytorch_step.py (whose nets, optimizer and
EMA it imports, so the layer shapes and parameter counts are those asserted there: LeNet
1,256,080, AlexNet 60,969,321): forward, softmax cross-entropy, backward with DDP's bucketed
allreduce of the gradients (Gloo, over the interface --ifname), weight decay + momentum-0.9 SGD,
EMA of the parameters. One synthetic batch per rank, built once (terngrad's synthetic data set
is as arbitrary; the timing does not depend on the pixels).

  --hook none   DDP's default: fp32 gradients, allreduced in ~25 MB buckets
  --hook fp16   DDP's fp16_compress_hook: each bucket cast to fp16, allreduced, cast back / P
  --hook terngrad  terngrad_torch's TernGrad hook (python/: the library's shared scalers, 2-bit
                packed codes, exact integer sums, the cost model's collective); --terngrad-torch
                DIR is where the package is (default: on PYTHONPATH)
  --hook grace  TernGrad as GRACE implements it, in pure PyTorch (bench/grace_terngrad_hook.py:
                int8 codes, per-worker scalers, allgather)
  --error-feedback  with --hook terngrad: TernGradState(error_feedback=True)
  --ranks-per-node G  with --hook terngrad: TernGradState(ranks_per_node=G) (race.sh's nodes)
  --device cuda  the model and batch on GPU 0 (every rank the same GPU: the GPU race of issue
                33), still over Gloo (NCCL refuses two ranks on one GPU); the step is timed after
                a device synchronisation

DDP is built with broadcast_buffers=False: terngrad does not synchronise AlexNet's BN moving
averages either (LeNet has no buffers).

Timing and bytes
----------------
Steps 1..--warmup are warm-up. Rank 0 appends a record {"type": "train", "step": s,
"wall_seconds": t} to --log after step --warmup, every --warmup steps, and after the last step,
the same record shape terngrad's metrics.jsonl has, so bench/race_report.py measures both
systems alike (seconds per step between the first and last record, and the wire bytes of every
rank's namespace over the same window). Each rank also counts its own bytes: the tx bytes of
its non-loopback interfaces (/proc/self/net/dev, which is per network namespace) over the timed
window, divided by the timed steps.

Output: one JSON line per rank on stdout:
  {"kind": "ddp_train", "rank": r, "world_size": P, "net": ..., "hook": ..., "batch_per_rank":
   ..., "threads": ..., "params": ..., "step_ms": ..., "images_per_sec": (global),
   "timed_steps": ..., "tx_bytes_per_step": ..., "rx_bytes_per_step": ..., "torch": ...}

Run (normally started by bench/race.sh, one per network namespace):
  python3 bench/ddp_train.py --rank 0 --world-size 2 --store /tmp/s/ddp --net lenet --batch 32
"""

import argparse
import datetime
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def usage_error(parser, msg):
    parser.print_usage(sys.stderr)
    print(f"ddp_train.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def net_bytes():
    """(tx, rx) bytes summed over this network namespace's interfaces other than lo."""
    tx = rx = 0
    with open("/proc/self/net/dev") as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() == "lo":
                continue
            v = data.split()
            rx += int(v[0])
            tx += int(v[8])
    return tx, rx


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--store", required=True,
                   help="FileStore path, shared by all ranks (a fresh file per run)")
    p.add_argument("--ifname", default="", help="GLOO_SOCKET_IFNAME (e.g. tg0); empty: Gloo's choice")
    p.add_argument("--net", default="lenet", help="lenet | cifarnet | alexnet (bench/pytorch_step.py)")
    p.add_argument("--batch", type=int, default=32, help="batch per rank")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--iterations", type=int, default=60, help="all steps, warm-up included")
    p.add_argument("--warmup", type=int, default=10, help="steps before the timed window")
    p.add_argument("--hook", choices=["none", "fp16", "terngrad", "grace"], default="none")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="with --hook terngrad: TernGradState(ranks_per_node=G) (default: learned)")
    p.add_argument("--error-feedback", action="store_true",
                   help="--hook terngrad: keep what ternarization drops and add it next step")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--terngrad-torch", default="",
                   help="directory holding the terngrad_torch package (e.g. build/python)")
    p.add_argument("--log", default="", help="rank 0: append train records here")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a collective waits for a missing rank before failing")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--wd", type=float, default=5e-4)
    args = p.parse_args()
    if args.world_size < 1 or not 0 <= args.rank < args.world_size:
        usage_error(p, f"--rank {args.rank} is not in 0 .. --world-size {args.world_size} - 1")
    if args.batch < 1 or args.threads < 1:
        usage_error(p, "--batch and --threads must be >= 1")
    if not 1 <= args.warmup < args.iterations:
        usage_error(p, f"need 1 <= --warmup ({args.warmup}) < --iterations ({args.iterations})")
    if args.error_feedback and args.hook != "terngrad":
        usage_error(p, "--error-feedback needs --hook terngrad")
    return p, args


def main():
    parser, args = parse_args()
    if args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, HERE)
    import pytorch_step as ref

    if args.net not in ref.NETS:
        usage_error(parser, f"unknown --net '{args.net}'; known: {', '.join(sorted(ref.NETS))}")
    torch.set_num_threads(args.threads)

    store = dist.FileStore(args.store, args.world_size)
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))

    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise SystemExit("ddp_train.py: --device cuda but torch sees no CUDA device")
        torch.cuda.set_device(0)
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    torch.manual_seed(123)  # same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = ref.NETS[args.net]()
    model.train()
    params = ref.count_params(model)
    expected = ref.EXPECTED_PARAMS[args.net]
    if params != expected:
        raise SystemExit(f"ddp_train.py: {args.net} has {params} parameters, terngrad's has {expected}")
    model = model.to(dev)
    ddp = DDP(model, device_ids=[0] if cuda else None, broadcast_buffers=False)
    hook_state = None
    if args.hook == "fp16":
        ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    elif args.hook == "terngrad":
        if args.terngrad_torch:
            sys.path.insert(0, args.terngrad_torch)
        from terngrad_torch import TernGradState, terngrad_hook
        hook_state = TernGradState(clip=2.5, seed=123, error_feedback=args.error_feedback,
                                   ranks_per_node=args.ranks_per_node)
        ddp.register_comm_hook(hook_state, terngrad_hook)
    elif args.hook == "grace":
        from grace_terngrad_hook import GraceTernGradState, grace_terngrad_hook
        ddp.register_comm_hook(GraceTernGradState(clip=2.5, seed=123), grace_terngrad_hook)
    opt, _ = ref.make_optimizer(model, args.lr, args.wd, fused=False)
    ema = ref.Ema(model.parameters(), 0.9999)

    gen = torch.Generator().manual_seed(7 + args.rank)
    x = torch.randn(args.batch, model.in_channels, model.image_size, model.image_size,
                    generator=gen).to(dev)
    y = ((torch.arange(args.batch) + args.rank) % model.num_classes).to(dev)

    log = open(args.log, "a", buffering=1) if args.log and args.rank == 0 else None
    t_start = time.perf_counter()

    def record(step):
        if log:
            log.write(json.dumps({"type": "train", "step": step,
                                  "wall_seconds": time.perf_counter() - t_start}) + "\n")

    loss_acc = torch.zeros((), device=dev)  # summed on the device: no host sync per step
    t0 = b0 = None
    for step in range(1, args.iterations + 1):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()  # DDP's allreduce of the gradient buckets overlaps the backward pass
        opt.step()
        ema.update(step - 1)
        loss_acc += loss.detach()
        if step == args.warmup:
            sync()
            t0, b0 = time.perf_counter(), net_bytes()
        if step % args.warmup == 0 or step == args.iterations:
            sync()
            record(step)
    sync()
    t1, b1 = time.perf_counter(), net_bytes()
    loss_sum = float(loss_acc)
    if not math.isfinite(loss_sum):
        raise SystemExit(f"ddp_train.py: rank {args.rank}: non-finite loss")

    steps = args.iterations - args.warmup
    step_s = (t1 - t0) / steps
    print(json.dumps({
        "kind": "ddp_train", "rank": args.rank, "world_size": args.world_size, "net": args.net,
        "hook": args.hook, "error_feedback": args.error_feedback, "device": args.device,
        "batch_per_rank": args.batch, "threads": torch.get_num_threads(),
        "params": params, "params_terngrad": expected, "step_ms": step_s * 1e3,
        "images_per_sec": args.batch * args.world_size / step_s, "timed_steps": steps,
        "tx_bytes_per_step": (b1[0] - b0[0]) / steps, "rx_bytes_per_step": (b1[1] - b0[1]) / steps,
        "mean_loss": loss_sum / args.iterations, "torch": torch.__version__,
        # terngrad_torch's own count (payload bytes by the collectives' model) of the last step
        "hook_bytes_sent_per_step": hook_state.bytes_sent if hook_state else None,
        "hook_route": next(iter(hook_state.routes.values()), None) if hook_state else None,
        "hook_seconds": hook_state.seconds if hook_state else None}),
        flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
