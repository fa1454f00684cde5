#!/usr/bin/python3
"""Figures of TernGrad's bound quantities from `terngrad measure-bounds` (DIR/bounds.jsonl).

Two figures:
  OUT             bound_ratio = s*||h||_1 / ||h||^2 (TernGrad's second moment over the gradient's own
                  squared norm; h = the gradient clipped to [-s, s]) against the iteration: a wide
                  panel for the whole model, then one small panel per ternarized tensor; four lines
                  each: layer-wise scalers (solid) vs one model-wide scaler (dashed), clipped at
                  c*sigma (dark) vs not clipped (light). Log scale.
  OUT_clipping    layer-wise scalers: what clipping does to each tensor (fraction of elements
                  clipped, ||h||/||g||, angle between h and g) and the expected fraction of zero
                  codes with and without clipping, against the iteration.
(OUT_clipping is OUT with "_clipping" before the extension.)

Usage:
    terngrad measure-bounds --config paper/configs/lenet_mnist.toml --out runs/bounds ...
    /usr/bin/python3 paper/bounds.py runs/bounds/bounds.jsonl -o paper/figures/bounds.svg

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import math
import os
import sys

from plotting import pyplot  # paper/plotting.py, beside this script

plt = pyplot()

REQUIRED = ("iteration", "tensor", "scaling", "clip", "bound_ratio")


def load(path):
    f = sys.stdin if path == "-" else open(path)
    rows = [json.loads(line) for line in f if line.strip()]
    # Scaler-sharing rows ({"record": "sharing"}, runs of N >= 2 workers) are not bound rows.
    rows = [r for r in rows if "record" not in r]
    if not rows:
        sys.exit(f"{path}: no JSON lines (run `terngrad measure-bounds`)")
    for key in REQUIRED:
        if key not in rows[0]:
            sys.exit(f"{path}: line 1 has no '{key}'; is this measure-bounds' bounds.jsonl?")
    return rows


def finite(v):
    return v is not None and math.isfinite(v)


def series(rows, tensor, scaling, clip, key):
    r = sorted((x for x in rows if x["tensor"] == tensor and x["scaling"] == scaling
                and x["clip"] == clip and finite(x.get(key))), key=lambda x: x["iteration"])
    return [x["iteration"] for x in r], [x[key] for x in r]


def combos(rows):
    clips = sorted({x["clip"] for x in rows}, reverse=True)  # the config's c first, then 0
    out = []
    for scaling, style in (("layer", "-"), ("model", "--")):
        for i, c in enumerate(clips):
            color = ("tab:blue" if scaling == "layer" else "tab:red")
            alpha = 1.0 if (c > 0 or len(clips) == 1) else 0.45
            label = f"{scaling} scaler, " + (f"clip {c:g} sigma" if c > 0 else "no clip")
            out.append((scaling, c, style, color, alpha, label))
    return out


def tensors_of(rows):
    names = []
    for x in rows:
        if x["tensor"] not in names and x["tensor"] != "model":
            names.append(x["tensor"])
    return names


def bound_figure(rows, out, title):
    names = tensors_of(rows)
    cols = min(4, max(1, len(names)))
    nrows = 1 + math.ceil(len(names) / cols)
    fig = plt.figure(figsize=(3.4 * cols, 3.0 + 2.3 * (nrows - 1)))
    gs = fig.add_gridspec(nrows, cols, height_ratios=[1.4] + [1] * (nrows - 1))
    top = fig.add_subplot(gs[0, :])
    for scaling, c, style, color, alpha, label in combos(rows):
        it, v = series(rows, "model", scaling, c, "bound_ratio")
        top.plot(it, v, style, color=color, alpha=alpha, label=label, marker=".")
    top.set_yscale("log")
    top.set_title("whole model: sum_l s_l ||h_l||_1 / sum_l ||h_l||^2", fontsize=10)
    top.set_xlabel("iteration")
    top.set_ylabel("bound_ratio")
    top.grid(True, which="both", alpha=0.3)
    lo, hi = top.get_ylim()
    top.set_ylim(lo, hi * 4)  # room for the legend above the lines (log axis)
    top.legend(fontsize=8, ncol=4, loc="upper center")
    for k, name in enumerate(names):
        ax = fig.add_subplot(gs[1 + k // cols, k % cols])
        for scaling, c, style, color, alpha, label in combos(rows):
            it, v = series(rows, name, scaling, c, "bound_ratio")
            ax.plot(it, v, style, color=color, alpha=alpha, label=label)
        numel = next(x["numel"] for x in rows if x["tensor"] == name)
        ax.set_title(f"{name} ({numel:,} elements)", fontsize=9)
        ax.set_yscale("log")
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title + ": bound_ratio = s ||h||_1 / ||h||^2 (1 = no ternary variance)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    save(fig, out)


def clipping_figure(rows, out, title):
    clip = max(x["clip"] for x in rows)
    names = tensors_of(rows) + ["model"]
    panels = [("sparsity", "expected zero codes (solid: clipped, dotted: not)", 100.0)]
    if clip > 0:
        panels = [("clipped_fraction", f"elements clipped at {clip:g} sigma (%)", 100.0),
                  ("length_ratio", "||h|| / ||g||", 1.0),
                  ("angle_deg", "angle(h, g) (degrees)", 1.0)] + panels
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.2), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, (key, label, scale) in zip(axes[0], panels):
        for k, name in enumerate(names):
            color = "black" if name == "model" else cmap(k % 10)
            it, v = series(rows, name, "layer", clip, key)
            ax.plot(it, [scale * y for y in v], "-", color=color, label=name,
                    lw=2 if name == "model" else 1)
            if key == "sparsity" and clip > 0:
                it, v = series(rows, name, "layer", 0.0, key)
                ax.plot(it, [scale * y for y in v], ":", color=color)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title + ": clipping and sparsity with layer-wise scalers", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    save(fig, out)


def save(fig, out):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    print(f"wrote {out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", help="DIR/bounds.jsonl of `terngrad measure-bounds` ('-' for stdin)")
    ap.add_argument("-o", "--out", default="paper/figures/bounds.svg",
                    help="figure file (.svg or .png); the clipping figure gets '_clipping' added")
    ap.add_argument("--title", default="TernGrad bounds", help="figure title prefix")
    ap.add_argument("--worker", type=int, default=None,
                    help="only this worker's rows (default: all rows, as measured)")
    args = ap.parse_args()
    rows = load(args.jsonl)
    if args.worker is not None:
        rows = [x for x in rows if x.get("worker") == args.worker]
        if not rows:
            sys.exit(f"{args.jsonl}: no rows of worker {args.worker}")
    bound_figure(rows, args.out, args.title)
    stem, ext = os.path.splitext(args.out)
    clipping_figure(rows, stem + "_clipping" + (ext or ".svg"), args.title)


if __name__ == "__main__":
    main()
