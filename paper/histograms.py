#!/usr/bin/python3
"""Figure 2 of the paper: ridge plots of gradient histograms along training, from
`terngrad measure-bounds --histograms ...` (DIR/histograms.jsonl).

One row per tensor, four columns as in the paper: (a) the worker's original gradient, (b) the
clipped gradient (clamped to +-s, s = the shared scaler c*sigma), (c) its ternary gradient
{-s, 0, s} and (d) the averaged gradient of all N workers on the grid (s/N){-N..N}. In each panel
one curve per sampled iteration, later iterations higher up (the TensorBoard ridge plot of the
paper). Each curve is scaled to its own tallest bin (for (c) and (d): its tallest level other
than 0), so every iteration's shape shows whatever its spread; the zero level of (c) and (d),
which holds most elements, is drawn cut at that height, and its fraction is printed for the first
and the last iteration.

Usage:
    terngrad measure-bounds --config paper/configs/lenet_mnist.toml --set workers.count=2 \\
        --set compression.method=terngrad --every 500 --histograms conv2/w,fc3/w --out runs/h
    /usr/bin/python3 paper/histograms.py runs/h/histograms.jsonl -o paper/figures/figure2_lenet.svg

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import sys

from plotting import pyplot, read_jsonl  # paper/plotting.py, beside this script

plt = pyplot()

PANELS = (("original", "(a) original"), ("clipped", "(b) clipped"),
          ("ternary", "(c) ternary"), ("averaged", "(d) averaged"))
REQUIRED = ("iteration", "tensor", "panel", "numel", "scaler", "counts")


def load(path):
    rows = read_jsonl(path, "measure-bounds' histograms.jsonl", REQUIRED)
    if not rows:
        sys.exit(f"{path}: no histogram rows (run `terngrad measure-bounds --histograms ...`)")
    return rows


def curve(r):
    """(x, fraction) of one row: bin centres for binned panels, levels for grid panels."""
    n = max(r["numel"], 1)
    frac = [c / n for c in r["counts"]]
    if "levels" in r:
        return r["levels"], frac
    lo, hi, k = r["lo"], r["hi"], len(r["counts"])
    w = (hi - lo) / k
    return [lo + (i + 0.5) * w for i in range(k)], frac


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", help="histograms.jsonl of `terngrad measure-bounds --histograms` ('-': stdin)")
    ap.add_argument("-o", "--out", required=True, help="output figure (.svg or .png)")
    ap.add_argument("--tensors", help="comma-separated subset, in this order (default: all, file order)")
    ap.add_argument("--title", default=None, help="figure title")
    a = ap.parse_args()

    rows = load(a.rows)
    tensors = []
    for r in rows:
        if r["tensor"] not in tensors:
            tensors.append(r["tensor"])
    if a.tensors:
        want = a.tensors.split(",")
        unknown = [t for t in want if t not in tensors]
        if unknown:
            sys.exit(f"histograms.py: no rows for {', '.join(unknown)}; the file has {', '.join(tensors)}")
        tensors = want
    iterations = sorted({r["iteration"] for r in rows})
    workers = rows[0].get("workers", "?")

    fig, axes = plt.subplots(len(tensors), 4, figsize=(13, 2.9 * len(tensors) + 0.6), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ti, tensor in enumerate(tensors):
        for pi, (panel, label) in enumerate(PANELS):
            ax = axes[ti][pi]
            sel = sorted((r for r in rows if r["tensor"] == tensor and r["panel"] == panel),
                         key=lambda r: r["iteration"])
            if not sel:
                ax.set_axis_off()
                continue
            grid = "levels" in sel[0]
            curves = [curve(r) for r in sel]
            for k, (r, (xs, fs)) in enumerate(zip(sel, curves)):
                # Each curve on its own scale: its tallest bin (for the grids, its tallest level
                # other than 0) is 1.8 ridges high, so the shape of every iteration shows.
                tallest = max((f for x, f in zip(xs, fs) if not (grid and x == 0)), default=0.0)
                scale = 1.8 / (tallest or 1.0)
                base = iterations.index(r["iteration"])
                color = cmap(base / max(len(iterations) - 1, 1))
                if grid:
                    for x, f in zip(xs, fs):
                        h = min(f * scale, 1.8)
                        ax.vlines(x, base, base + h, color=color, lw=2)
                        if x == 0 and (k == len(sel) - 1 or k == 0):
                            ax.text(x, base + h, f" {100 * f:.1f}%", fontsize=6, va="bottom")
                    ax.plot(xs, [base] * len(xs), color=color, lw=0.5)
                else:
                    ys = [base + f * scale for f in fs]
                    ax.fill_between(xs, base, ys, color=color, alpha=0.35, lw=0)
                    ax.plot(xs, ys, color=color, lw=0.8)
            ax.set_yticks(range(0, len(iterations), max(1, len(iterations) // 5)))
            ax.set_yticklabels([str(iterations[i]) for i in ax.get_yticks()], fontsize=7)
            ax.tick_params(axis="x", labelsize=7)
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
            ax.xaxis.get_offset_text().set_fontsize(7)
            if ti == 0:
                ax.set_title(label, fontsize=10)
            if pi == 0:
                ax.set_ylabel(f"{tensor}\niteration", fontsize=9)
    fig.suptitle(a.title or f"Gradient histograms along training (worker {rows[0].get('worker', 0)} "
                 f"of {workers}; s = shared scaler)", fontsize=11)
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"histograms.py: wrote {a.out} ({len(tensors)} tensors x 4 panels, "
          f"{len(iterations)} iterations)")


if __name__ == "__main__":
    main()
