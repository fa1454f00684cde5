#!/usr/bin/python3
"""Figure 5 of the TernGrad paper from `terngrad perf-model --json`.

Reads the JSON lines (a file, or stdin with "-"), draws one panel per cluster (ethernet,
infiniband): images/s against GPUs (log-log) for AlexNet, GoogLeNet and VGG-A, fp32 (solid) and
TernGrad (dashed) as the model predicts them, with the paper's readings (Figure 5 by eye, carried
in the JSON as paper_*_images_per_sec) as markers: circles fp32, triangles TernGrad.

Usage:
    terngrad perf-model --json > fig5.jsonl
    /usr/bin/python3 paper/figure5.py fig5.jsonl -o paper/figures/figure5.svg

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import os
import sys

from plotting import pyplot  # paper/plotting.py, beside this script

plt = pyplot()

NETS = [("alexnet", "AlexNet", "tab:blue"), ("googlenet", "GoogLeNet", "tab:green"),
        ("vgg_a", "VGG-A", "tab:red")]
PANELS = [("ethernet", "(a) 1 Gbit/s Ethernet, 4 GTX 1080 per node (PCIe switch)"),
          ("infiniband", "(b) 100 Gbit/s InfiniBand, 4 P100 per node (NVLink)")]


def load(path):
    f = sys.stdin if path == "-" else open(path)
    rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        sys.exit(f"{path}: no JSON lines (run `terngrad perf-model --json`)")
    for key in ("network", "cluster", "gpus", "fp32_images_per_sec", "terngrad_images_per_sec"):
        if key not in rows[0]:
            sys.exit(f"{path}: line 1 has no '{key}'; is this `terngrad perf-model --json`?")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", help="output of `terngrad perf-model --json` ('-' for stdin)")
    ap.add_argument("-o", "--out", default="paper/figures/figure5.svg",
                    help="figure file (.svg or .png)")
    args = ap.parse_args()
    rows = load(args.jsonl)

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, (cluster, title) in zip(axes, PANELS):
        for net, label, color in NETS:
            r = sorted((x for x in rows if x["cluster"] == cluster and x["network"] == net),
                       key=lambda x: x["gpus"])
            if not r:
                continue
            n = [x["gpus"] for x in r]
            ax.plot(n, [x["fp32_images_per_sec"] for x in r], "-", color=color,
                    label=f"{label} fp32 (model)")
            ax.plot(n, [x["terngrad_images_per_sec"] for x in r], "--", color=color,
                    label=f"{label} TernGrad (model)")
            p = [x for x in r if "paper_fp32_images_per_sec" in x]
            ax.plot([x["gpus"] for x in p], [x["paper_fp32_images_per_sec"] for x in p], "o",
                    color=color, mfc="none", label=f"{label} fp32 (paper)")
            ax.plot([x["gpus"] for x in p], [x["paper_terngrad_images_per_sec"] for x in p], "^",
                    color=color, label=f"{label} TernGrad (paper)")
        ax.set_xscale("log", base=2)
        gpus = sorted({x["gpus"] for x in rows if x["cluster"] == cluster})
        ax.set_xticks(gpus)
        ax.set_xticklabels([str(g) for g in gpus])
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_ylabel("training throughput (images/s)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, frameon=False)
    topo = rows[0].get("topology", "ps")
    fig.suptitle(f"TernGrad Figure 5: performance model ({topo}; lines) vs the paper's readings "
                 "(markers)", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
