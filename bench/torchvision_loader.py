#!/usr/bin/python3
"""torchvision's DataLoader on an image folder, the reference for bench_data --image-folder.

  /usr/bin/python3 bench/torchvision_loader.py DIR [--workers W] [--batch B] [--steps S]
                                               [--preprocess alexnet|inception]

The train split of DIR (an ImageNet-layout folder, e.g. `terngrad data synth-folder`) through
torchvision.datasets.ImageFolder and torch.utils.data.DataLoader, shuffled, with the transforms
closest to terngrad's recipes:
  alexnet    Resize((256, 256)), RandomCrop(224), RandomHorizontalFlip, ToTensor,
             Normalize (the reference code's mean subtraction in [0, 1] units)
  inception  RandomResizedCrop(224, scale=(0.05, 1), ratio=(3/4, 4/3)), RandomHorizontalFlip,
             ColorJitter(32/255, 0.5, 0.5, 0.2), ToTensor, Normalize to [-1, 1]
W workers (0: the main process decodes, as terngrad with one thread does not: compare W = T for
T terngrad threads, and W = 0 for one), S batches of B after one of warm-up, consumed as fast as
they come. One JSON line on stdout: images_per_sec, images_per_sec_per_worker. Debian's
python3-torchvision is a bench-only dependency.
"""

import argparse
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--preprocess", choices=["alexnet", "inception"], default="alexnet")
    a = p.parse_args()
    try:
        import torch
        import torchvision
        from torchvision import transforms as T
    except ImportError as e:
        print(f"torchvision_loader.py: skipped: {e} (apt-get install python3-torchvision)",
              file=sys.stderr)
        return 77
    torch.set_num_threads(1)
    if a.preprocess == "alexnet":
        tf = T.Compose([T.Resize((256, 256)), T.RandomCrop(224), T.RandomHorizontalFlip(),
                        T.ToTensor(), T.Normalize([0.485, 0.457, 0.408], [1.0, 1.0, 1.0])])
    else:
        tf = T.Compose([T.RandomResizedCrop(224, scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3)),
                        T.RandomHorizontalFlip(), T.ColorJitter(32 / 255, 0.5, 0.5, 0.2),
                        T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    ds = torchvision.datasets.ImageFolder(os.path.join(a.dir, "train"), transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, drop_last=True,
                                         persistent_workers=a.workers > 0)
    needed = (a.steps + 1) * a.batch
    if len(ds) < needed:
        print(f"torchvision_loader.py: {a.dir}/train has {len(ds)} images; {needed} needed "
              f"({a.steps} + 1 batches of {a.batch}): write more or pass fewer --steps",
              file=sys.stderr)
        return 2
    it = iter(loader)
    next(it)  # warm-up: workers started, first batch decoded
    t0 = time.monotonic()
    for _ in range(a.steps):
        next(it)
    secs = time.monotonic() - t0
    ips = a.steps * a.batch / secs
    per = ips / max(a.workers, 1)
    print(json.dumps({"bench": "torchvision_loader", "path": a.dir, "preprocess": a.preprocess,
                      "batch": a.batch, "steps": a.steps, "workers": a.workers,
                      "torchvision": torchvision.__version__, "seconds": secs,
                      "images_per_sec": ips, "images_per_sec_per_worker": per}))
    print(f"torchvision {torchvision.__version__} DataLoader ({a.preprocess}), "
          f"{a.workers} workers: {ips:.0f} img/s ({per:.0f} per worker)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
