#!/usr/bin/env python3
"""PyTorch (cuDNN) reference for bench_conv2d --algos: each conv layer's passes, timed alone.

Reads the layers as JSON lines (bench_conv2d --list: N, C, H, W, K, R, S, stride, groups and TF's
SAME padding resolved into top/bottom/left/right), builds x, w and dy on the GPU, and times
  fwd         F.conv2d (after F.pad where TF's SAME padding is asymmetric, as bench/pytorch_step.py)
  bwd_data    aten.convolution_backward with output_mask (True, False, False)
  bwd_weight  aten.convolution_backward with output_mask (False, True, False)
with torch.backends.cudnn.benchmark = True (cuDNN picks its fastest algorithm per shape, the
yardstick issue 31 names), in strict fp32 (allow_tf32 False) and in TF32. The padding of an
asymmetric layer is timed as part of its forward (what a PyTorch model of the net pays).

One JSON line per layer, pass and precision: {"bench": "pytorch_conv", "layer", "pass",
"precision": "fp32"|"tf32", "median_ms", "gflops"}; FLOPs as bench_conv2d's (2 N K C/g R S P Q).

Usage: bench_conv2d --list | python3 pytorch_conv.py [--device cuda] [--seconds S]
"""

import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=0.2, help="per measurement (default 0.2)")
    ap.add_argument("--layers", default="-", help="JSON lines file of layers, '-' = stdin")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"pytorch_conv: PyTorch is not installed ({e})", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("pytorch_conv: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cudnn.benchmark = True
    src = sys.stdin if a.layers == "-" else open(a.layers)
    layers = [json.loads(line) for line in src if line.strip().startswith("{")]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def time_ms(fn):
        for _ in range(3):
            fn()
        sync()
        samples = []
        t_end = time.perf_counter() + a.seconds
        while time.perf_counter() < t_end or len(samples) < 5:
            t = time.perf_counter()
            fn()
            sync()
            samples.append((time.perf_counter() - t) * 1e3)
        samples.sort()
        return samples[len(samples) // 2]

    for L in layers:
        n, c, h, w, k, r, s = (L[x] for x in ("n", "c", "h", "w", "k", "r", "s"))
        g, st = L["groups"], L["stride"]
        pt, pb, pl, pr = L["pad_top"], L["pad_bottom"], L["pad_left"], L["pad_right"]
        sym = pt == pb and pl == pr
        flops = 2.0 * n * k * (c // g) * r * s * L["p"] * L["q"]
        gen = torch.Generator(device="cpu").manual_seed(1)
        x = (torch.rand(n, c, h, w, generator=gen) * 2 - 1).to(dev)
        wt = (torch.rand(k, c // g, r, s, generator=gen) * 2 - 1).to(dev)
        dy = (torch.rand(n, k, L["p"], L["q"], generator=gen) * 2 - 1).to(dev)
        xin = x if sym else F.pad(x, (pl, pr, pt, pb))
        pad = (pt, pl) if sym else (0, 0)

        def fwd():
            xi = x if sym else F.pad(x, (pl, pr, pt, pb))
            return F.conv2d(xi, wt, None, st, pad, 1, g)

        def bwd(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, xin, wt, None, (st, st), pad, (1, 1), False, (0, 0), g, mask)

        for precision in ("fp32", "tf32"):
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            for name, fn in (("fwd", fwd), ("bwd_data", bwd((True, False, False))),
                             ("bwd_weight", bwd((False, True, False)))):
                ms = time_ms(fn)
                print(json.dumps({"bench": "pytorch_conv", "layer": L["layer"], "pass": name,
                                  "precision": precision, "n": n, "median_ms": round(ms, 4),
                                  "gflops": round(flops / (ms * 1e6), 1),
                                  "torch": torch.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
