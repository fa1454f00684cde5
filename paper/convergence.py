#!/usr/bin/python3
"""The convergence check (the paper's Theorem 1) from `terngrad convergence-check --json`.

Left: E||w_t - w*||^2 against t (log-log) for SGD and TernGrad on ridge regression, with a 1/t
reference line through the last SGD point. Right: the z-scores of the moment tests on the real
network's gradients (one marker per tensor and sampled iteration) with the critical values.

Usage:
    terngrad convergence-check --json > conv.jsonl
    /usr/bin/python3 paper/convergence.py conv.jsonl -o paper/figures/convergence.svg

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import os
import sys

from plotting import pyplot  # paper/plotting.py, beside this script

plt = pyplot()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jsonl", help="output of `terngrad convergence-check --json` ('-' = stdin)")
    ap.add_argument("-o", "--out", default="convergence.svg", help="figure file (.svg or .png)")
    args = ap.parse_args()
    f = sys.stdin if args.jsonl == "-" else open(args.jsonl)
    checks = [json.loads(line) for line in f if line.strip()]
    ridge = [c for c in checks if c["check"].startswith("ridge-")]
    moments = [c for c in checks if c.get("kind") in ("unbiased", "variance")]
    if not ridge and not moments:
        sys.exit("convergence.py: no checks in " + args.jsonl)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    for c, color in zip(ridge, ["tab:blue", "tab:red"]):
        pts = [(t, e) for t, e in zip(c["t"], c["error"]) if t > 0 and e is not None]
        label = "%s (rate %.2f, %s)" % ("SGD" if c["method"] == "sgd" else "TernGrad",
                                        c["rate"], "PASS" if c["pass"] else "FAIL")
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, color=color, label=label)
    if ridge:
        c = ridge[0]
        t_end, e_end = c["t"][-1], c["error"][-1]
        ts = [t for t in c["t"] if t >= c["fit_from"]]
        ax.loglog(ts, [e_end * t_end / t for t in ts], "k--", lw=1, label="1/t")
        ax.axvline(c["fit_from"], color="gray", lw=0.5)
        ax.set_title("ridge regression, d = %d, %d workers, %d repeats" %
                     (c["d"], c["workers"], c["repeats"]), fontsize=10)
    ax.set_xlabel("iteration t")
    ax.set_ylabel("E ||w_t - w*||^2")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", lw=0.3)

    ax = axes[1]
    markers = {"z_proj": ("o", "tab:blue"), "z_sq": ("s", "tab:green"),
               "z_var": ("^", "tab:red")}
    names = []
    for c in moments:
        for t in c["tensors"]:
            if t["tested"] and t["name"] not in names:
                names.append(t["name"])
    seen = set()
    zcrit = None
    for c in moments:
        zcrit = c["z_crit"]
        for t in c["tensors"]:
            if not t["tested"]:
                continue
            x = names.index(t["name"])
            for key in (["z_proj", "z_sq"] if c["kind"] == "unbiased" else ["z_var"]):
                m, color = markers[key]
                ax.plot(x + 0.1 * (c["step"] % 3 - 1), t[key], m, color=color, ms=4,
                        label=None if key in seen else key)
                seen.add(key)
    if zcrit is not None:
        ax.axhline(zcrit, color="k", lw=0.8, ls="--", label="critical |z| (Bonferroni)")
        ax.axhline(-zcrit, color="k", lw=0.8, ls="--")
        steps = sorted({c["step"] for c in moments})
        ax.set_title("%s: ternarizer moments at iterations %s, %d draws" %
                     (moments[0]["model"], ", ".join(map(str, steps)), moments[0]["draws"]),
                     fontsize=10)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, fontsize=8)
    ax.set_ylabel("z-score")
    ax.legend(fontsize=8)
    ax.grid(True, lw=0.3)

    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out)
    print("wrote " + args.out)


if __name__ == "__main__":
    main()
