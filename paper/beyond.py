#!/usr/bin/python3
"""Past the paper: TernGrad variants on LeNet/Fashion-MNIST, test accuracy and train loss vs N.

Two panels side by side, (left) test accuracy (%) and (right) final train loss (mean over the last
1,000 iterations) against the number of workers N (2, 4, 8; total batch 64), one colour per
variant: FP32 grey, TernGrad red, TernGrad + error feedback blue, TernGrad with each worker's own
scaler green, any other variant from the tab palette. Each seed is a small marker, the mean over
the seeds a line with a larger marker. The runs are RUNS/beyond/fm_n<N>_s<seed>_<variant>/ written
by paper/beyond.sh (its MNIST rows, mn_*, are not plotted); only finished full-length (10,000
iterations) runs are plotted, the others are listed on stderr. The numbers are
paper/collect.py beyond.

Usage:
    /usr/bin/python3 paper/beyond.py                               # paper/figures/beyond.{svg,png}
    /usr/bin/python3 paper/beyond.py --runs /data/runs -o beyond.png
    /usr/bin/python3 paper/beyond.py --merge     # also the runs paper/beyond.md records that
                                                 # RUNS lacks (run on other machines)

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import os
import statistics
import sys

from plotting import pyplot  # paper/plotting.py, beside this script

plt = pyplot()

sys.dont_write_bytecode = True  # no paper/__pycache__ from importing collect
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collect  # noqa: E402

NS = [2, 4, 8]
STYLE = {  # variant -> (label, colour, marker)
    "fp32": ("FP32 baseline", "0.35", "o"),
    "tern": ("TernGrad", "tab:red", "^"),
    "ef": ("TernGrad + error feedback", "tab:blue", "s"),
    "own": ("TernGrad, own scalers", "tab:green", "D"),
    "q4": ("4-level grid", "tab:orange", "v"),
    "q4ef": ("4-level grid + error feedback", "tab:purple", "P"),
    "q5": ("5-level grid", "tab:brown", "X"),
    "rs": ("TernGrad + rescale", "tab:pink", "<"),
}
OTHER_COLOURS = ["tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
OTHER_MARKERS = ["v", "P", "X", "<", ">", "h"]


def styles(variants):
    out, k = {}, 0
    for v in variants:
        if v in STYLE:
            out[v] = STYLE[v]
        else:
            out[v] = (v, OTHER_COLOURS[k % len(OTHER_COLOURS)],
                      OTHER_MARKERS[k % len(OTHER_MARKERS)])
            k += 1
    return out


def finished(runs, merge_page=None):
    """{variant: {N: [(seed, accuracy %, final train loss or None)]}} of the finished
    10,000-iteration runs (with `merge_page`, also those that page records and runs/ lacks), and
    the rows left out (with why)."""
    got, left_out = {}, []
    for r in collect.beyond_rows(runs, merge_page)[0]:
        s = r["summary"]
        if r["data"] != "fm":
            continue  # the MNIST rows (N = 8 only) are in the tables of paper/beyond.md
        if r["state"] != "done":
            left_out.append(f"{r['row']} ({r['state']}{', ' + r['detail'] if r['detail'] else ''})")
        elif s.get("iterations") != collect.BEYOND_ITERS:
            left_out.append(f"{r['row']} ({s.get('iterations')} iterations)")
        elif s.get("test_accuracy") is None:
            left_out.append(f"{r['row']} (no test accuracy)")
        else:
            got.setdefault(r["variant"], {}).setdefault(r["n"], []).append(
                (r["seed"], 100.0 * s["test_accuracy"], r["loss"]))
    return got, left_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=os.environ.get("RUNS", os.path.join(collect.REPO_DIR, "runs")),
                    help="the runs directory paper/beyond.sh wrote (default: $RUNS or runs/)")
    ap.add_argument("--merge", action="store_true",
                    help="also draw the runs paper/beyond.md records and the runs directory "
                         "lacks (as paper/collect.py beyond --merge)")
    ap.add_argument("-o", "--out", action="append",
                    help="figure file(s), .svg or .png (repeatable; default: "
                         "paper/figures/beyond.svg and .png)")
    args = ap.parse_args()
    outs = args.out or [os.path.join(collect.PAPER_DIR, "figures", "beyond.svg"),
                        os.path.join(collect.PAPER_DIR, "figures", "beyond.png")]

    got, left_out = finished(args.runs, collect.PAGES["beyond"] if args.merge else None)
    if left_out:
        print("beyond.py: left out (not a finished 10,000-iteration run): " + ", ".join(left_out),
              file=sys.stderr)
    if not got:
        print(f"beyond.py: no finished 10,000-iteration run in {os.path.join(args.runs, 'beyond')} "
              "(run paper/beyond.sh)", file=sys.stderr)
        return 1
    variants = collect.beyond_variants(got)
    style = styles(variants)
    ns = sorted(set(NS) | {n for v in got.values() for n in v})

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    panels = [(axes[0], 1, "test accuracy (%), EMA weights"),
              (axes[1], 2, "final train loss (last 1,000 iterations)")]
    for ax, idx, ylabel in panels:
        for i, v in enumerate(variants):
            label, colour, marker = style[v]
            # A small sideways shift per variant (in log2 units) keeps equal values apart.
            shift = 2 ** (0.035 * (i - (len(variants) - 1) / 2))
            seeds_x, seeds_y, mean_x, mean_y = [], [], [], []
            for n in sorted(got[v]):
                ys = [p[idx] for p in got[v][n] if p[idx] is not None]
                if not ys:
                    continue
                seeds_x += [n * shift] * len(ys)
                seeds_y += ys
                mean_x.append(n * shift)
                mean_y.append(statistics.mean(ys))
            if not mean_x:
                continue
            ax.plot(seeds_x, seeds_y, ls="none", marker=marker, ms=4, alpha=0.55, color=colour)
            ax.plot(mean_x, mean_y, ls="-", lw=2, marker=marker, ms=8, color=colour, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.minorticks_off()
        ax.set_xlim(min(ns) / 2 ** 0.3, max(ns) * 2 ** 0.3)
        ax.set_xlabel("workers N (total batch 64)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    axes[0].set_title("test accuracy (small markers: seeds; line: mean)", fontsize=10)
    axes[1].set_title("final train loss (small markers: seeds; line: mean)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    for h, lab in zip(*axes[1].get_legend_handles_labels()):
        if lab not in labels:
            handles.append(h)
            labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8,
               frameon=False)
    n_runs = sum(len(p) for v in got.values() for p in v.values())
    fig.suptitle("Past the paper: TernGrad variants, LeNet on Fashion-MNIST, 10K iterations "
                 f"({n_runs} runs)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.94))
    for out in outs:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        fig.savefig(out, dpi=110)
        print(f"beyond.py: wrote {out}", file=sys.stderr)
    for v in variants:
        for n in sorted(got[v]):
            pts = got[v][n]
            accs = [p[1] for p in pts]
            losses = [p[2] for p in pts if p[2] is not None]
            loss = f"{statistics.mean(losses):.4f}" if losses else "  —   "
            print(f"N={n:<2d} {v:8s} accuracy {statistics.mean(accs):.2f}%  final train loss "
                  f"{loss}  (seeds {', '.join(str(p[0]) for p in pts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
