#!/usr/bin/python3
"""Figure 3 of the TernGrad paper: LeNet/MNIST test accuracy vs workers N, ours beside the paper's.

Two panels, (a) momentum 0.9 with LR 0.01 and (b) vanilla SGD with LR 0.1: the paper's readings
(read from Figure 3, +-0.02) as open markers with thin lines, FP32 grey circles, TernGrad red
triangles; ours as filled markers with thick lines. Ours are the finished full-length (10,000
iterations) runs in RUNS/figure3/<row>/summary.json written by paper/figure3.sh, and, for points
with no such run, the runs recorded in paper/README.md and paper/figure3.md (RECORDED). Shortened runs
(other iteration counts) are left out and listed on stderr.

Usage:
    /usr/bin/python3 paper/figure3.py                              # paper/figures/figure3.{svg,png}
    /usr/bin/python3 paper/figure3.py --runs /data/runs -o fig3.png
    /usr/bin/python3 paper/figure3.py --no-recorded                # runs only

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import os
import sys

from plotting import pyplot  # paper/plotting.py, beside this script

plt = pyplot()

sys.dont_write_bytecode = True  # no paper/__pycache__ from importing collect
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collect  # noqa: E402

NS = [2, 4, 8, 16, 32, 64]
# Recorded in paper/README.md ("LeNet on MNIST, TernGrad vs FP32 with N emulated workers"):
# 2026-11-21, 2-core AMD EPYC (Zen 4) VM, Debian 12, no GPU, OMP_NUM_THREADS=1; N = 2 and 8
# TernGrad rows at commit df178a2, N = 4 by paper/figure3.sh. Test accuracy (%) with EMA weights
# after 10,000 iterations.
RECORDED = {
    "mom_fp32_n2": 99.21,
    "mom_tern_n2": 99.26,   # params_sha256 01e840a5...
    "mom_fp32_n4": 99.24,   # params_sha256 f825f4f0...
    "mom_tern_n4": 99.21,   # params_sha256 ac00a810...
    "mom_fp32_n8": 99.23,
    "mom_tern_n8": 99.25,   # params_sha256 d02b723f...
    # paper/figure3.md's table: momentum N = 16 (commit a14499b, AMD EPYC), vanilla SGD N = 2, 4,
    # 8 (commit 9d9dd9c, AMD EPYC), 16 and 32 (commit 29f3799, 2026-11-26, Intel Xeon).
    "mom_fp32_n16": 99.27,  # params_sha256 9b816ec3...
    "mom_tern_n16": 99.21,  # params_sha256 7bc0e2f8...
    "sgd_fp32_n2": 99.33,   # params_sha256 197864d3...
    "sgd_tern_n2": 99.24,   # params_sha256 8fdb06d0...
    "sgd_fp32_n4": 99.35,   # params_sha256 0723031f...
    "sgd_tern_n4": 99.26,   # params_sha256 957480af...
    "sgd_fp32_n8": 99.33,   # params_sha256 f673517a...
    "sgd_tern_n8": 99.20,   # params_sha256 cf6bef65...
    "sgd_fp32_n16": 99.32,  # params_sha256 702edd9e...
    "sgd_tern_n16": 99.23,  # params_sha256 ab89767e...
    "sgd_fp32_n32": 99.26,  # params_sha256 38de84f3...
    "sgd_tern_n32": 99.20,  # params_sha256 9487ec9a...
    # momentum N = 32 and 64 (commit 29f3799, 2026-11-26, Intel Xeon)
    "mom_fp32_n32": 99.28,  # params_sha256 cda42637...
    "mom_tern_n32": 99.24,  # params_sha256 a1c7c6fd...
    "mom_fp32_n64": 99.25,  # params_sha256 342be420...
    "mom_tern_n64": 99.23,  # params_sha256 aee6e1e7...
    # vanilla N = 64 (binary of commit 54218eb, 2026-11-27, AMD EPYC)
    "sgd_fp32_n64": 99.31,  # params_sha256 a5f9f4a2...
    "sgd_tern_n64": 99.24,  # params_sha256 2a13dd7c...
}
PANELS = [("mom", "(a) momentum 0.9, base LR 0.01"), ("sgd", "(b) vanilla SGD, base LR 0.1")]


def paper_values():
    return {row[0]: row[5]["top1"] for row in collect.PAPER["figure3"]["rows"] if row[5]}


def our_values(runs, use_recorded):
    ours, source, skipped = {}, {}, []
    for row in collect.PAPER["figure3"]["rows"]:
        name = row[0]
        summary = collect.read_json(os.path.join(runs, "figure3", name, "summary.json"))
        if summary and not summary.get("interrupted") and summary.get("test_accuracy") is not None:
            if summary.get("iterations") == 10000:
                ours[name] = 100.0 * summary["test_accuracy"]
                source[name] = "run"
                continue
            skipped.append(f"{name} ({summary.get('iterations')} iterations)")
        if use_recorded and name in RECORDED:
            ours[name] = RECORDED[name]
            source[name] = "recorded"
    return ours, source, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=os.environ.get("RUNS", os.path.join(collect.REPO_DIR, "runs")),
                    help="the runs directory paper/figure3.sh wrote (default: $RUNS or runs/)")
    ap.add_argument("--no-recorded", action="store_true",
                    help="leave out the recorded runs (RECORDED)")
    ap.add_argument("-o", "--out", action="append",
                    help="figure file(s), .svg or .png (repeatable; default: "
                         "paper/figures/figure3.svg and .png)")
    args = ap.parse_args()
    outs = args.out or [os.path.join(collect.PAPER_DIR, "figures", "figure3.svg"),
                        os.path.join(collect.PAPER_DIR, "figures", "figure3.png")]

    paper = paper_values()
    ours, source, skipped = our_values(args.runs, not args.no_recorded)
    if skipped:
        print("figure3.py: left out (not 10,000 iterations): " + ", ".join(skipped),
              file=sys.stderr)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    for ax, (opt, title) in zip(axes, PANELS):
        for grad, label, color, marker in (("fp32", "FP32 baseline", "0.35", "o"),
                                           ("tern", "TernGrad", "tab:red", "^")):
            names = [f"{opt}_{grad}_n{n}" for n in NS]
            ax.plot(NS, [paper[k] for k in names], marker=marker, mfc="none", ls=":", lw=1,
                    color=color, label=f"{label} (paper)")
            pts = [(n, ours[k]) for n, k in zip(NS, names) if k in ours]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ls="-", lw=2,
                        color=color, label=f"{label} (ours)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(NS)
        ax.set_xticklabels([str(n) for n in NS])
        ax.set_xlabel("workers N (total batch 64)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("test accuracy (%), EMA weights")
    plotted = [v for k, v in ours.items() if k in paper]
    lo = min(list(paper.values()) + plotted)
    hi = max(list(paper.values()) + plotted)
    axes[0].set_ylim(min(98.8, lo - 0.1), max(99.6, hi + 0.1))
    handles, labels = axes[0].get_legend_handles_labels()
    for h, lab in zip(*axes[1].get_legend_handles_labels()):
        if lab not in labels:
            handles.append(h)
            labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    n_run = sum(1 for v in source.values() if v == "run")
    n_rec = sum(1 for v in source.values() if v == "recorded")
    counts = " + ".join(f"{k} {what}" for k, what in ((n_run, "runs"), (n_rec, "recorded")) if k)
    fig.suptitle("TernGrad Figure 3: LeNet on MNIST, 10K iterations — paper's readings (dotted) "
                 f"vs ours (solid; {counts or 'none yet'})",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.94))
    for out in outs:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        fig.savefig(out, dpi=110)
        print(f"figure3.py: wrote {out}", file=sys.stderr)
    for name in sorted(ours, key=lambda k: (k[:3], int(k.split("_n")[1].split("_")[0]), k)):
        p = f"{paper[name]:.2f}%" if name in paper else "  —   "
        print(f"{name:20s} paper {p}  ours {ours[name]:.2f}% ({source[name]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
