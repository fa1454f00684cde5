#!/usr/bin/python3
"""Figure 4 of the paper: FP32 against TernGrad along training, three panels:
  (a) test accuracy (top-1) against the iteration, from each run's `eval` records,
  (b) training loss against the iteration, from each run's `train` records,
  (c) the fraction of zero ternary codes of one tensor against the iteration, from a
      `terngrad measure-bounds` run: histograms.jsonl (--histograms: the real codes with the
      scaler shared over the workers, as in the paper's run) or else bounds.jsonl (layer scaling,
      the config's clip, the worker's own scaler; realized where drawn, else expected).

The paper's figure is AlexNet/ImageNet at 4 workers and batch 512 with fc6 in (c): the table2.sh rows
fp32_4w, tern_4w and fig4c, which is what the default --runs layout reads. Any pair of
`terngrad train` runs works, e.g. LeNet/MNIST from figure3.sh.

Usage:
    /usr/bin/python3 paper/figure4.py --runs runs/table2 -o paper/figures/figure4.svg
    /usr/bin/python3 paper/figure4.py --fp32 runs/figure3/mom_fp32_n4/metrics.jsonl \\
        --terngrad runs/figure3/mom_tern_n4/metrics.jsonl \\
        --sparsity runs/bounds/bounds.jsonl --tensor fc3/w -o figure4_lenet.svg

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import math
import os
import sys

from plotting import pyplot, read_jsonl  # paper/plotting.py, beside this script

plt = pyplot()


def finite(v):
    return isinstance(v, (int, float)) and math.isfinite(v)


def curves(path):
    """(eval iterations, accuracies in %), (train iterations, losses) of one metrics.jsonl."""
    rows = read_jsonl(path, "metrics")
    ev = [(r["step"], 100 * r["test_accuracy"]) for r in rows
          if r.get("type") == "eval" and finite(r.get("test_accuracy"))]
    tr = [(r["step"], r["loss"]) for r in rows if r.get("type") == "train" and finite(r.get("loss"))]
    if not ev and not tr:
        sys.exit(f"{path}: no train or eval records; is this a `terngrad train` metrics.jsonl?")
    return ev, tr


def sparsity(path, tensor):
    """(iteration, % zero codes) of `tensor`: from histograms.jsonl (the ternary panel: the real
    codes under the scaler shared by all workers, as the paper's run) or bounds.jsonl (worker's
    own scaler: realized where drawn, else expected)."""
    rows = read_jsonl(path, "bounds or histograms")
    if rows and "panel" in rows[0]:
        sel = sorted((r for r in rows if r["tensor"] == tensor and r["panel"] == "ternary"),
                     key=lambda r: r["iteration"])
        if not sel:
            names = sorted({r["tensor"] for r in rows})
            sys.exit(f"{path}: no ternary rows for tensor '{tensor}'; it has {', '.join(names)}")
        return [(r["iteration"], 100 * r["counts"][r["kmax"]] / r["numel"]) for r in sel], None
    clips = sorted({r["clip"] for r in rows if r.get("scaling") == "layer"})
    if not clips:
        sys.exit(f"{path}: no layer-scaling rows; is this measure-bounds' bounds.jsonl?")
    clip = max(clips)  # the config's clip (0 when it has none)
    sel = sorted((r for r in rows if r.get("tensor") == tensor and r.get("scaling") == "layer"
                  and r.get("clip") == clip), key=lambda r: r["iteration"])
    if not sel:
        names = sorted({r["tensor"] for r in rows} - {"model"})
        sys.exit(f"{path}: no rows for tensor '{tensor}'; it has {', '.join(names)}")
    pts = []
    for r in sel:
        v = r.get("realized_sparsity")
        v = v if finite(v) else r.get("sparsity")
        if finite(v):
            pts.append((r["iteration"], 100 * v))
    return pts, clip


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", help="table2.sh's run folder: reads fp32_4w/, tern_4w/ and "
                    "fig4c/bounds.jsonl in it (explicit paths below override)")
    ap.add_argument("--fp32", help="metrics.jsonl of the FP32 run")
    ap.add_argument("--terngrad", help="metrics.jsonl of the TernGrad run")
    ap.add_argument("--sparsity", help="histograms.jsonl (preferred: shared scaler) or bounds.jsonl "
                    "of measure-bounds for panel (c) (optional)")
    ap.add_argument("--tensor", default="fc6/w", help="tensor of panel (c) (default: fc6/w)")
    ap.add_argument("-o", "--out", required=True, help="output figure (.svg or .png)")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()

    if a.runs:
        a.fp32 = a.fp32 or os.path.join(a.runs, "fp32_4w", "metrics.jsonl")
        a.terngrad = a.terngrad or os.path.join(a.runs, "tern_4w", "metrics.jsonl")
        for name in ("histograms.jsonl", "bounds.jsonl"):
            fig4c = os.path.join(a.runs, "fig4c", name)
            if not a.sparsity and os.path.exists(fig4c):
                a.sparsity = fig4c
    if not a.fp32 or not a.terngrad:
        ap.error("give --runs DIR, or both --fp32 and --terngrad")

    runs = [("FP32", a.fp32, "tab:blue"), ("TernGrad", a.terngrad, "tab:red")]
    data = [(label, curves(path), color) for label, path, color in runs]
    panels = 3 if a.sparsity else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.3 * panels, 3.6))
    for label, (ev, tr), color in data:
        if ev:
            axes[0].plot(*zip(*ev), marker="o", ms=3, color=color, label=label)
        if tr:
            axes[1].plot(*zip(*tr), color=color, lw=1, label=label)
    axes[0].set_title("(a) test accuracy")
    axes[0].set_ylabel("top-1 accuracy (%)")
    axes[1].set_title("(b) training loss")
    axes[1].set_ylabel("loss")
    for ax in axes[:2]:
        ax.set_xlabel("iteration")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    summary = []
    if a.sparsity:
        pts, clip = sparsity(a.sparsity, a.tensor)
        axes[2].plot(*zip(*pts), marker="o", ms=3, color="tab:red")
        axes[2].set_title(f"(c) sparsity of {a.tensor}'s ternary codes")
        axes[2].set_ylabel("zero codes (%)")
        axes[2].set_xlabel("iteration")
        axes[2].set_ylim(0, 100)
        axes[2].grid(alpha=0.3)
        mean = sum(v for _, v in pts) / len(pts)
        axes[2].axhline(mean, color="gray", ls="--", lw=0.8)
        how = "shared scaler" if clip is None else f"own scaler, c = {clip:g}"
        axes[2].text(0.02, 0.04, f"mean {mean:.1f}% ({how})", transform=axes[2].transAxes,
                     fontsize=8)
        summary.append(f"(c) mean sparsity {mean:.1f}%")
    for label, (ev, tr), _ in data:
        if ev:
            summary.append(f"{label}: final accuracy {ev[-1][1]:.2f}% at {ev[-1][0]}")
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"figure4.py: wrote {a.out}; " + "; ".join(summary))


if __name__ == "__main__":
    main()
