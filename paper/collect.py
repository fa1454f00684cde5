#!/usr/bin/env python3
"""Collect the paper's tables from runs: our numbers beside the paper's (Markdown).

Reads RUNS/<table>/<row>/summary.json (and metrics.jsonl, command.txt; bounds.jsonl for the
measure-bounds rows) as written by paper/<table>.sh, and prints per table a Markdown table with
the paper's number, ours, the TernGrad-vs-FP32 difference at the same worker count (paper and
ours), the run's iterations (flagged when they are not the paper's), wall time, device and
params_sha256. Rows not run yet, or still running, say so.

Table beyond (paper/beyond.sh, past the paper: TernGrad variants on LeNet/Fashion-MNIST, rows
fm_n<N>_s<seed>_<variant>) has no paper numbers: per run the test accuracy, its difference to the
FP32 run of the same N and seed, the final train loss (mean over the last 1,000 iterations of
metrics.jsonl), the wire bytes per worker and iteration beside TernGrad's, then a summary per N and
variant (means over the seeds) that marks the variants meeting the study's target.

Usage:
    paper/collect.py                       # every table found, to stdout
    paper/collect.py table2 figure3        # some tables
    paper/collect.py beyond                # the Fashion-MNIST TernGrad-variant study
    paper/collect.py --runs /data/runs table1
    paper/collect.py --update-pages        # also rewrite the generated block of paper/<table>.md
                                           # (refused, exit 1, where that would drop a recorded
                                           # run not in RUNS; --force drops it)
    paper/collect.py beyond --merge --update-pages
                                           # add runs to paper/beyond.md, keeping the runs it
                                           # records that RUNS lacks (run on other machines)
    paper/collect.py --csv table2          # also write runs/table2/figure4.csv (Figure 4 curves)

Python 3 standard library only. paper/figure3.py imports PAPER and the readers from here,
paper/beyond.py beyond_runs() and beyond_variants().
"""
import argparse
import datetime
import decimal
import json
import math
import os
import re
import statistics
import sys

PAPER_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(PAPER_DIR)

# ---- the paper's numbers (Figure 3, Tables 1-3) ------------------------------------------------
# Each row: (row, settings, workers, gradients, paper iterations, {metric: paper value in %}).


def _fig3_rows():
    mom_tern = {2: 99.21, 4: 99.09, 8: 99.11, 16: 99.26, 32: 99.35, 64: 99.21}
    sgd_tern = {2: 99.23, 4: 99.10, 8: 99.04, 16: 99.20, 32: 99.23, 64: 99.18}
    rows = []
    for opt, label, base, tern in (("mom", "(a) momentum 0.9, LR 0.01", 99.20, mom_tern),
                                   ("sgd", "(b) vanilla SGD, LR 0.1", 99.26, sgd_tern)):
        for n in (2, 4, 8, 16, 32, 64):
            rows.append((f"{opt}_fp32_n{n}", f"{label}, N={n}", n, "floating", 10000,
                         {"top1": base}))
            rows.append((f"{opt}_tern_n{n}", f"{label}, N={n}", n, "TernGrad", 10000,
                         {"top1": tern[n]}))
    rows.append(("mom_tern_n8_noclip", "(a) N=8, no clipping (ablation, not in the paper)", 8,
                 "TernGrad", 10000, {}))
    rows.append(("mom_tern_n8_noshare", "(a) N=8, no scaler sharing (ablation, not in the paper)",
                 8, "TernGrad", 10000, {}))
    return rows


PAPER = {
    "figure3": {
        "title": "Figure 3: LeNet on MNIST, test accuracy vs workers N (readings ±0.02)",
        "metrics": [("top1", "test_accuracy", "accuracy")],
        "rows": _fig3_rows(),
    },
    "table1": {
        "title": "Table 1: CifarNet on CIFAR-10, Adam 0.0002",
        "metrics": [("top1", "test_accuracy", "accuracy")],
        "rows": [
            ("fp32_2w", "batch 128, 300K", 2, "floating", 300000, {"top1": 86.56}),
            ("tern_2w", "batch 128, 300K", 2, "TernGrad", 300000, {"top1": 85.64}),
            ("fp32_16w", "batch 2048, 18.75K", 16, "floating", 18750, {"top1": 83.19}),
            ("tern_16w", "batch 2048, 18.75K", 16, "TernGrad", 18750, {"top1": 82.80}),
        ],
    },
    "table2": {
        "title": "Table 2: AlexNet on ImageNet",
        "metrics": [("top1", "test_accuracy", "top-1"), ("top5", "test_top5_accuracy", "top-5")],
        "rows": [
            ("fp32_2w", "LR 0.01, batch 256, 370K, DR 0.5", 2, "floating", 370000,
             {"top1": 57.33, "top5": 80.56}),
            ("tern_2w", "LR 0.01, batch 256, 370K, DR 0.2", 2, "TernGrad", 370000,
             {"top1": 57.61, "top5": 80.47}),
            ("tern_noclip_2w", "LR 0.01, batch 256, 370K, DR 0.2", 2, "TernGrad-noclip", 370000,
             {"top1": 54.63, "top5": 78.16}),
            ("fp32_4w", "LR 0.02, batch 512, 185K, DR 0.5", 4, "floating", 185000,
             {"top1": 57.32, "top5": 80.73}),
            ("tern_4w", "LR 0.02, batch 512, 185K, DR 0.2", 4, "TernGrad", 185000,
             {"top1": 57.28, "top5": 80.23}),
            ("fp32_8w", "LR 0.04, batch 1024, 92.5K, DR 0.5", 8, "floating", 92500,
             {"top1": 56.62, "top5": 80.28}),
            ("tern_8w", "LR 0.04, batch 1024, 92.5K, DR 0.2", 8, "TernGrad", 92500,
             {"top1": 57.54, "top5": 80.25}),
        ],
    },
    "table3": {
        "title": "Table 3: GoogLeNet on ImageNet",
        "metrics": [("top5", "test_top5_accuracy", "top-5"), ("top1", "test_accuracy", "top-1")],
        "rows": [
            ("fp32_2w", "LR 0.04, batch 128, 600K, wd 4e-5, DR 0.2", 2, "floating", 600000,
             {"top5": 88.30}),
            ("tern_2w", "LR 0.04, batch 128, 600K, wd 1e-5, DR 0.08", 2, "TernGrad", 600000,
             {"top5": 86.77}),
            ("fp32_4w", "LR 0.08, batch 256, 300K, wd 4e-5, DR 0.2", 4, "floating", 300000,
             {"top5": 87.82}),
            ("tern_4w", "LR 0.08, batch 256, 300K, wd 1e-5, DR 0.08", 4, "TernGrad", 300000,
             {"top5": 85.96}),
            ("fp32_8w", "LR 0.10, batch 512, 300K, wd 4e-5, DR 0.2", 8, "floating", 300000,
             {"top5": 89.00}),
            ("tern_8w", "LR 0.10, batch 512, 300K, wd 2e-5, DR 0.08", 8, "TernGrad", 300000,
             {"top5": 86.47}),
        ],
    },
}
TABLES = ["figure3", "table1", "table2", "table3", "figure2", "beyond"]
PAGES = {t: os.path.join(PAPER_DIR, t + ".md") for t in TABLES}
BEGIN, END = "<!-- collect.py:begin -->", "<!-- collect.py:end -->"


# ---- readers ------------------------------------------------------------------------------------

def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a torn last line of a running or interrupted run
    except OSError:
        pass
    return out


def portable_command(line):
    """A recorded command as a reader can run it from a checkout: the binary as ./build/cmd/terngrad
    (whichever build made the run), paths inside the checkout relative, and an MNIST folder
    anywhere else as data/mnist (where `terngrad data fetch mnist` puts it)."""
    words = line.strip().split(" ")
    if words and (words[0].endswith("/terngrad") or os.path.basename(words[0]).startswith("terngrad")):
        words[0] = "./build/cmd/terngrad"
    out = []
    for w in words:
        w = w.replace(REPO_DIR + "/", "")
        m = re.match(r"^(data\.path=)(/\S+)$", w)
        if m and os.path.basename(m.group(2).rstrip("/")) == "mnist":
            w = m.group(1) + "data/mnist"
        out.append(w)
    return " ".join(out)


def read_command(run_dir):
    """The last command line of command.txt (what produced the run), made portable, and the
    commit it was built at ("" if not recorded); None when there is no command.txt."""
    try:
        with open(os.path.join(run_dir, "command.txt")) as f:
            raw = [ln.rstrip("\n") for ln in f if ln.strip()]
    except OSError:
        return None
    lines = [ln for ln in raw if not ln.startswith("#")]
    commits = [ln.split("commit:", 1)[1].strip() for ln in raw if ln.startswith("# commit:")]
    if not lines:
        return None
    return portable_command(lines[-1]), commits[-1] if commits else ""


def command_note(name, recorded):
    """One line of a page's command list: - `name` (built at C): `command`."""
    cmd, commit = recorded
    return f"- `{name}`" + (f" (built at {commit})" if commit else "") + f": `{cmd}`"


def run_status(run_dir):
    """(state, summary, detail): state done | running | none."""
    summary = read_json(os.path.join(run_dir, "summary.json"))
    if summary is not None and not summary.get("interrupted"):
        return "done", summary, ""
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    steps = [m.get("step", 0) for m in metrics if m.get("type") == "train"]
    if steps:
        total = None
        try:
            with open(os.path.join(run_dir, "config.toml")) as f:
                m = re.search(r"^iterations\s*=\s*(\d+)", f.read(), re.M)
                total = int(m.group(1)) if m else None
        except OSError:
            pass
        return "running", None, f"at step {max(steps)}" + (f" of {total}" if total else "")
    if os.path.isdir(run_dir):
        return "running", None, "started"
    return "none", None, ""


def load_runs(runs, table):
    out = {}
    for row in PAPER[table]["rows"]:
        d = os.path.join(runs, table, row[0])
        out[row[0]] = (d,) + run_status(d)
    return out


# ---- formatting ---------------------------------------------------------------------------------

def pct(x):
    return "—" if x is None else f"{x:.2f}%"


def delta(x):
    return "" if x is None else f"{x:+.2f}"


def hms(s):
    if s is None:
        return ""
    s = int(round(s))
    if s >= 86400:
        return f"{s // 86400} d {s % 86400 // 3600} h"
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s"


def our_value(summary, key):
    if summary is None or summary.get(key) is None:
        return None
    return 100.0 * summary[key]


def table_markdown(table, runs):
    spec = PAPER[table]
    got = load_runs(runs, table)
    metrics = spec["metrics"]
    lines = [f"**{spec['title']}** — runs in `{os.path.relpath(os.path.join(runs, table), REPO_DIR)}/`", ""]
    head = ["row", "settings", "workers", "gradients"]
    for _, _, label in metrics:
        head += [f"paper {label}", f"ours {label}"]
    m0 = metrics[0][2]
    head += [f"paper Δ {m0}", f"our Δ {m0}", "iterations", "wall time", "device", "params_sha256"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    base = {}  # (settings prefix, workers) -> (paper, ours) of the FP32 row, for Δ
    any_run = False
    notes = []
    for name, settings, workers, grads, iters, paper in spec["rows"]:
        d, state, summary, detail = got[name]
        if state == "none" and not paper:
            continue  # an opt-in ablation that was not run
        cells = [f"`{name}`", settings, str(workers), grads]
        for _, key, _ in metrics:
            p = paper.get(_metric_id(metrics, key))
            ours = our_value(summary, key)
            cells += [pct(p) if p is not None else "—",
                      (f"**{pct(ours)}**" if ours is not None else
                       ("running, " + detail if state == "running" else "not run"))]
        key0 = metrics[0][1]
        p0, o0 = paper.get(metrics[0][0]), our_value(summary, key0)
        group = (settings.split(",")[0] if table == "figure3" else "", workers)
        if grads == "floating":
            base[group] = (p0, o0)
            cells += ["", ""]
        else:
            bp, bo = base.get(group, (None, None))
            cells += [delta(p0 - bp) if p0 is not None and bp is not None else "",
                      delta(o0 - bo) if o0 is not None and bo is not None else ""]
        if summary is not None:
            any_run = True
            it = summary.get("iterations")
            flag = "" if it == iters else f" ⚠ paper {iters:,}"
            cells += [f"{it:,}{flag}" if isinstance(it, int) else str(it),
                      hms(summary.get("wall_seconds")) + (
                          f" (resumed at {summary['start_iteration']:,})"
                          if summary.get("start_iteration") else ""),
                      f"{summary.get('device', '')} ({summary.get('device_name', '')})",
                      f"`{summary.get('params_sha256', '')[:8]}…`"]
            cmd = read_command(d)
            if cmd:
                notes.append(command_note(name, cmd))
        else:
            cells += [f"({iters:,})", "", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Commands (from each run's `command.txt`; machine and commit there too):", ""]
        lines += notes
    return "\n".join(lines), any_run


def _metric_id(metrics, key):
    for mid, k, _ in metrics:
        if k == key:
            return mid
    return None


# ---- measure-bounds rows: Figure 2 clipping statistics, Figure 4 (c) -----------------------------

def bounds_rows(path, tensor=None, clip=None):
    rows = [r for r in read_jsonl(path) if r.get("scaling") == "layer"]
    if clip is not None:
        rows = [r for r in rows if abs(r.get("clip", -1) - clip) < 1e-9]
    if tensor is not None:
        rows = [r for r in rows if r.get("tensor") == tensor]
    return rows


def med(rows, key):
    v = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
    return statistics.median(v) if v else None


def figure2_markdown(runs):
    d = os.path.join(runs, "figure2", "clipstats")
    path = os.path.join(d, "bounds.jsonl")
    lines = [f"**Figure 2 clipping statistics** — `{os.path.relpath(d, REPO_DIR)}/bounds.jsonl`", ""]
    allrows = bounds_rows(path)
    if not allrows:
        lines.append("Not run (`ROWS=clipstats paper/figure2.sh`; needs ImageNet and a GPU).")
        return "\n".join(lines), False
    clips = sorted({r["clip"] for r in allrows if r.get("clip", 0) > 0})
    c = clips[0] if clips else 2.5
    tensors = []
    for r in allrows:
        if r["tensor"] not in tensors and r["tensor"] != "model":
            tensors.append(r["tensor"])
    its = sorted({r["iteration"] for r in allrows})
    lines.append(f"Medians over {len(its)} sampled iterations ({its[0]}…{its[-1]}), one worker's "
                 f"raw gradient, layer-wise scaler, c = {c}. Paper: clipping changes the length by "
                 "1–1.5% and the direction by 2–3°.")
    lines.append("")
    lines.append("| tensor | elements | clipped fraction | length ratio | angle (°) | code sparsity |")
    lines.append("|---|---|---|---|---|---|")
    for t in tensors + ["model"]:
        rows = bounds_rows(path, t, c)
        if not rows:
            continue
        cf, lr, an, sp = (med(rows, k) for k in ("clipped_fraction", "length_ratio", "angle_deg",
                                                 "sparsity"))
        f = (lambda x, fmt: "" if x is None else fmt.format(x))
        lines.append(f"| `{t}` | {rows[0].get('numel', ''):,} | {f(cf and 100 * cf, '{:.2f}%')} | "
                     f"{f(lr, '{:.4f}')} | {f(an, '{:.2f}')} | {f(sp and 100 * sp, '{:.1f}%')} |")
    cmd = read_command(d)
    if cmd:
        lines += ["", f"Command{f' (built at {cmd[1]})' if cmd[1] else ''}: `{cmd[0]}`"]
    return "\n".join(lines), True


def figure4(runs, write_csv):
    """Figure 4 (a, b) from the 4-worker rows' metrics, (c) from fig4c's bounds.jsonl."""
    t = os.path.join(runs, "table2")
    evals, losses = {}, {}
    for row in ("fp32_4w", "tern_4w"):
        m = read_jsonl(os.path.join(t, row, "metrics.jsonl"))
        evals[row] = {r["step"]: r for r in m if r.get("type") == "eval"}
        losses[row] = {r["step"]: r.get("loss") for r in m if r.get("type") == "train"}
    sp = {r["iteration"]: r for r in bounds_rows(os.path.join(t, "fig4c", "bounds.jsonl"),
                                                 "fc6/w", 2.5)}
    lines = ["**Figure 4** (AlexNet, 4 workers, batch 512): (a) top-1 and (b) training loss from "
             "`fp32_4w`/`tern_4w` metrics.jsonl, (c) fc6 code sparsity from `fig4c/bounds.jsonl`.", ""]
    if not any(evals.values()) and not any(losses.values()) and not sp:
        lines.append("Not run (`paper/table2.sh`, rows fp32_4w, tern_4w, fig4c).")
        return "\n".join(lines), False
    steps = sorted(set(evals["fp32_4w"]) | set(evals["tern_4w"]))
    if steps:
        lines += ["| iteration | FP32 top-1 | TernGrad top-1 | FP32 loss | TernGrad loss |",
                  "|---|---|---|---|---|"]
        for s in steps:
            def acc(row):
                r = evals[row].get(s)
                return pct(100 * r["test_accuracy"]) if r else ""

            def loss(row):
                v = losses[row].get(s)
                return f"{v:.3f}" if isinstance(v, (int, float)) else ""
            lines.append(f"| {s:,} | {acc('fp32_4w')} | {acc('tern_4w')} | {loss('fp32_4w')} | "
                         f"{loss('tern_4w')} |")
        lines.append("")
    if sp:
        vals = [r.get("realized_sparsity") for r in sp.values()]
        vals = [v for v in vals if isinstance(v, (int, float)) and not math.isnan(v)]
        if vals:
            lines.append(f"fc6 ternary-code sparsity: mean {100 * statistics.mean(vals):.1f}% over "
                         f"{len(vals)} samples (min {100 * min(vals):.1f}%, max "
                         f"{100 * max(vals):.1f}%); paper: ≈70% throughout (71.32% mean [S]).")
    if write_csv:
        path = os.path.join(t, "figure4.csv")
        allsteps = sorted(set(steps) | set(losses["fp32_4w"]) | set(losses["tern_4w"]) | set(sp))
        with open(path, "w") as f:
            f.write("iteration,fp32_top1,tern_top1,fp32_loss,tern_loss,fc6_sparsity\n")
            for s in allsteps:
                def g(dct, key=None):
                    v = dct.get(s)
                    if key and v is not None:
                        v = v.get(key)
                    return "" if v is None else f"{v:.6g}"
                f.write(",".join([str(s), g(evals["fp32_4w"], "test_accuracy"),
                                  g(evals["tern_4w"], "test_accuracy"), g(losses["fp32_4w"]),
                                  g(losses["tern_4w"]), g(sp, "realized_sparsity")]) + "\n")
        print(f"collect.py: wrote {path}", file=sys.stderr)
    return "\n".join(lines), True


# ---- beyond: TernGrad variants on LeNet/Fashion-MNIST (paper/beyond.sh; not in the paper) ------

BEYOND_ITERS = 10000
BEYOND_ORDER = ["fp32", "tern", "ef", "own", "q4", "q4ef", "q5", "rs"]  # then others, alphabetically
BEYOND_NAMES = {
    "fp32": "FP32 baseline",
    "tern": "TernGrad (c = 2.5, shared scaler)",
    "ef": "TernGrad + error feedback",
    "own": "TernGrad, each worker its own scaler",
    "q4": "4-level grid {-3, -1, 1, 3} s/3 (2 bits)",
    "q4ef": "4-level grid + error feedback",
    "q5": "5-level grid {-2..2} s/2 (2.67 bits)",
    "rs": "TernGrad + norm-preserving rescale",
}
BEYOND_ROW = re.compile(r"^(fm|mn)_n(\d+)_s(\d+)_([A-Za-z0-9_]+)$")
BEYOND_DATA = {"fm": "Fashion-MNIST", "mn": "MNIST"}  # row prefix -> dataset
BEYOND_DATA_ORDER = list(BEYOND_DATA)                  # the tables' order of the datasets
BEYOND_TARGET_DELTA = -0.30   # mean Δ vs FP32 (points) at least this ...
BEYOND_TARGET_BYTES = 1.10    # ... at no more than this many times TernGrad's wire bytes


def beyond_variants(variants):
    """The variants present, in the study's order: fp32, tern, ef, own, then others
    alphabetically."""
    present = set(variants)
    return ([v for v in BEYOND_ORDER if v in present] +
            sorted(present - set(BEYOND_ORDER)))


def final_train_loss(run_dir, iterations, window=1000):
    """Mean train loss of metrics.jsonl over the last `window` iterations (steps > iterations -
    window; a resumed run's repeated steps count once, the last logged), or None."""
    if not isinstance(iterations, int):
        return None
    by_step = {}
    for m in read_jsonl(os.path.join(run_dir, "metrics.jsonl")):
        if m.get("type") == "train" and isinstance(m.get("loss"), (int, float)) \
                and isinstance(m.get("step"), int) and m["step"] > iterations - window:
            by_step[m["step"]] = m["loss"]
    return statistics.mean(by_step.values()) if by_step else None


def beyond_runs(runs):
    """The rows of RUNS/beyond present, sorted by dataset (Fashion-MNIST, then MNIST), N, seed
    (123 first, then the others ascending) and variant: dicts with row, dir, data (the row's
    prefix: fm | mn), n, seed, variant, state (done | running | interrupted), summary (finished
    runs only), detail, loss (final train loss, finished runs only)."""
    base = os.path.join(runs, "beyond")
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    out = []
    for name in names:
        m = BEYOND_ROW.match(name)
        d = os.path.join(base, name)
        if not m or not os.path.isdir(d):
            continue
        state, summary, detail = run_status(d)
        if state == "none":
            continue
        if state == "running":
            s = read_json(os.path.join(d, "summary.json"))
            if s is not None and s.get("interrupted"):
                state = "interrupted"
        loss = final_train_loss(d, summary.get("iterations")) if summary else None
        out.append({"row": name, "dir": d, "data": m.group(1), "n": int(m.group(2)),
                    "seed": int(m.group(3)), "variant": m.group(4), "state": state,
                    "summary": summary,
                    "detail": detail, "loss": loss})
    return _sort_beyond(out)


def _sort_beyond(rows):
    order = beyond_variants(r["variant"] for r in rows)
    rows.sort(key=lambda r: (BEYOND_DATA_ORDER.index(r["data"]), r["n"], r["seed"] != 123,
                             r["seed"], order.index(r["variant"])))
    return rows


def _seconds(cell):
    """hms()'s text back to seconds (to its precision), or None."""
    for pattern, scale in ((r"(\d+) d (\d+) h", (86400, 3600)), (r"(\d+) h (\d+) min", (3600, 60)),
                           (r"(\d+) min (\d+) s", (60, 1))):
        m = re.match(pattern, cell)
        if m:
            return int(m.group(1)) * scale[0] + int(m.group(2)) * scale[1]
    return None


def _generated_block(page):
    """(the page's text, its generated block from BEGIN up to END): (None, None) when the page
    cannot be read, (text, None) when it has no such block."""
    try:
        with open(page) as f:
            content = f.read()
    except OSError:
        return None, None
    if BEGIN not in content or END not in content:
        return content, None
    return content, content[content.index(BEGIN):content.index(END)]


def recorded_beyond_runs(page):
    """The finished runs that the generated block of `page` (paper/beyond.md) records, as
    beyond_runs() gives them (with dir None, `recorded` True and the command from the page's
    list), and the page's device strings: ([rows], [devices]); ([], []) without a page or block.
    Accuracy and loss come back at the page's precision (0.01 point, 1e-4)."""
    _, block = _generated_block(page)
    if block is None:
        return [], []
    data_of = {name: key for key, name in BEYOND_DATA.items()}
    commands = {name: (cmd, commit) for name, commit, cmd in
                re.findall(r"^- `([^`]+)`(?: \(built at ([^)]*)\))?: `(.+)`$", block, re.M)}
    m = re.search(r"^Device: (.*)\.$", block, re.M)
    devices = re.split(r"(?<=\)), ", m.group(1)) if m else []
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 12 or cells[0] not in data_of or not cells[4].endswith("%"):
            continue  # not a finished run's row of the per-run table
        v = re.fullmatch(r"`([A-Za-z0-9_]+)`", cells[3])
        h = re.fullmatch(r"`([0-9a-f]{8})…`", cells[11])
        it = re.match(r"[\d,]+", cells[9])
        if not (v and h and it and cells[1].isdigit() and cells[2].isdigit()):
            continue
        row = f"{data_of[cells[0]]}_n{cells[1]}_s{cells[2]}_{v.group(1)}"
        summary = {"test_accuracy": float(cells[4][:-1]) / 100.0,
                   "iterations": int(it.group(0).replace(",", "")),
                   "wall_seconds": _seconds(cells[10]), "params_sha256": h.group(1)}
        if cells[7]:
            summary["payload_bytes_per_worker_per_iter"] = int(cells[7].replace(",", ""))
        resumed = re.search(r"resumed at ([\d,]+)", cells[10])
        if resumed:
            summary["start_iteration"] = int(resumed.group(1).replace(",", ""))
        rows.append({"row": row, "dir": None, "data": data_of[cells[0]], "n": int(cells[1]),
                     "seed": int(cells[2]), "variant": v.group(1), "state": "done",
                     "summary": summary, "detail": "",
                     "loss": float(cells[6]) if cells[6] else None,
                     "recorded": True, "command": commands.get(row)})
    return rows, devices


def beyond_rows(runs, merge_page=None):
    """beyond_runs(runs), plus, with `merge_page`, the finished runs that page records whose row
    is not in runs/ (a row in runs/ replaces the page's); and the recorded device strings."""
    rows = beyond_runs(runs)
    if not merge_page:
        return rows, []
    recorded, devices = recorded_beyond_runs(merge_page)
    present = {r["row"] for r in rows}
    return _sort_beyond(rows + [r for r in recorded if r["row"] not in present]), devices


def _accuracy(r):
    """Test accuracy in %, of a finished run, or None."""
    return our_value(r["summary"], "test_accuracy")


def _payload(r):
    s = r["summary"]
    v = s.get("payload_bytes_per_worker_per_iter") if s else None
    return v if isinstance(v, (int, float)) and v > 0 else None


def _ratio(r):
    """x times, with as many decimals as it takes to tell it from 1 (up to 6)."""
    if r is None:
        return ""
    if r >= 10:
        return f"{r:.1f}×"
    digits = 3 if r < 1.1 else 2
    while r != 1 and digits < 6 and f"{r:.{digits}f}" == f"{1:.{digits}f}":
        digits += 1
    return f"{r:.{digits}f}×"


def _shown_mean(values, digits, mean_digits):
    """(mean, how many) of the values as the tables show them (`digits` decimals), in decimal
    arithmetic, rounded half away from zero to `mean_digits` decimals (one more than `digits`
    makes the mean of two seeds exact): a reader can check it by hand, and it comes out the same
    from runs/ and from a page's recorded rows (--merge); (None, 0) without values."""
    shown = [decimal.Decimal(f"{v:.{digits}f}") for v in values if v is not None]
    if not shown:
        return None, 0
    mean = sum(shown) / len(shown)
    return mean.quantize(decimal.Decimal(1).scaleb(-mean_digits),
                         rounding=decimal.ROUND_HALF_UP), len(shown)


def beyond_markdown(runs, merge_page=None):
    d = os.path.join(runs, "beyond")
    lines = ["**Beyond the paper: TernGrad variants, LeNet on Fashion-MNIST (and MNIST at N = 8), "
             "10K iterations** — "
             f"runs in `{os.path.relpath(d, REPO_DIR)}/`", ""]
    rows, recorded_devices = beyond_rows(runs, merge_page)
    kept = sum(1 for r in rows if r.get("recorded"))
    if kept:
        lines += [f"{kept} of these runs are kept from `{os.path.relpath(merge_page, REPO_DIR)}` "
                  "as it recorded them (`--merge`; their folders are not in this runs "
                  "directory): accuracy and loss at the page's precision, command as recorded.",
                  ""]
    if not rows:
        lines.append("Not run (`paper/beyond.sh`; needs Fashion-MNIST: "
                     "apt-get install dataset-fashion-mnist).")
        return "\n".join(lines), False
    variants = beyond_variants(r["variant"] for r in rows)
    done = [r for r in rows if r["state"] == "done"]
    full = [r for r in done if r["summary"].get("iterations") == BEYOND_ITERS]
    by_key = {(r["data"], r["n"], r["seed"], r["variant"]): r for r in done}
    # TernGrad's wire bytes per dataset and N (the same at every seed; the first finished seed's).
    tern_bytes = {}
    for r in done:
        if r["variant"] == "tern" and _payload(r) and (r["data"], r["n"]) not in tern_bytes:
            tern_bytes[(r["data"], r["n"])] = _payload(r)

    def vs_fp32(r):
        """The difference of the two accuracies as shown (0.01 points), or None."""
        base = by_key.get((r["data"], r["n"], r["seed"], "fp32"))
        a, b = _accuracy(r), (_accuracy(base) if base else None)
        if a is None or b is None or r["variant"] == "fp32":
            return None
        return decimal.Decimal(f"{a:.2f}") - decimal.Decimal(f"{b:.2f}")

    def vs_tern(r):
        p, t = _payload(r), tern_bytes.get((r["data"], r["n"]))
        return p / t if p and t else None

    lines.append("Variants: " + "; ".join(f"`{v}` {BEYOND_NAMES[v]}" if v in BEYOND_NAMES
                                          else f"`{v}`" for v in variants) + ".")
    devices = sorted({f"{r['summary'].get('device', '')} ({r['summary'].get('device_name', '')})"
                      for r in done if not r.get("recorded")} | set(recorded_devices))
    if devices:
        lines.append("Device: " + ", ".join(devices) + ".")
    lines += ["", "| data | N | seed | variant | test accuracy | Δ vs FP32 (same data, N and "
              "seed) | final train loss | wire bytes / worker / iteration | vs TernGrad | "
              "iterations | wall time | params_sha256 |", "|" + "---|" * 12]
    notes = []
    for r in rows:
        cells = [BEYOND_DATA[r["data"]], str(r["n"]), str(r["seed"]), f"`{r['variant']}`"]
        s = r["summary"]
        if s is None:
            what = "interrupted" if r["state"] == "interrupted" else "running"
            cells += [f"{what}, {r['detail']}"] + [""] * 7
            lines.append("| " + " | ".join(cells) + " |")
            continue
        acc, p, it = _accuracy(r), _payload(r), s.get("iterations")
        flag = "" if it == BEYOND_ITERS else f" ⚠ study {BEYOND_ITERS:,}"
        cells += [pct(acc), delta(vs_fp32(r)),
                  f"{r['loss']:.4f}" if r["loss"] is not None else "",
                  f"{p:,}" if p else "", _ratio(vs_tern(r)),
                  (f"{it:,}" if isinstance(it, int) else str(it)) + flag,
                  hms(s.get("wall_seconds")) + (f" (resumed at {s['start_iteration']:,})"
                                                if s.get("start_iteration") else ""),
                  f"`{s.get('params_sha256', '')[:8]}…`"]
        lines.append("| " + " | ".join(cells) + " |")
        cmd = r.get("command") if r.get("recorded") else read_command(r["dir"])
        if cmd:
            notes.append(command_note(r["row"], cmd))

    if full:
        lines += ["", f"Summary per dataset, N and variant: means over the seeds that finished "
                  f"{BEYOND_ITERS:,} iterations (how many in parentheses); Δ over the seeds where "
                  "both the variant and FP32 finished. Means of the values shown above: accuracy "
                  "and Δ to one more decimal (exact for two seeds), loss to as many; rounded half "
                  "away from zero.",
                  "",
                  "| data | N | variant | mean test accuracy | mean Δ vs FP32 | "
                  "mean final train loss | wire bytes / worker / iteration | vs TernGrad |",
                  "|" + "---|" * 8]
        met = []
        for data, n in sorted({(r["data"], r["n"]) for r in full},
                              key=lambda k: (BEYOND_DATA_ORDER.index(k[0]), k[1])):
            fn = {(r["seed"], r["variant"]): r for r in full if (r["data"], r["n"]) == (data, n)}
            for v in variants:
                rs = [r for (_, rv), r in sorted(fn.items()) if rv == v]
                if not rs:
                    continue
                acc, k = _shown_mean((_accuracy(r) for r in rs), 2, 3)
                dl, kd = _shown_mean((vs_fp32(r) for r in rs), 2, 3)
                loss, kl = _shown_mean((r["loss"] for r in rs), 4, 4)
                sizes = sorted({_payload(r) for r in rs if _payload(r)})
                tb = tern_bytes.get((data, n))
                ratio = max(sizes) / tb if sizes and tb else None
                ok = (dl is not None and dl >= decimal.Decimal(str(BEYOND_TARGET_DELTA))
                      and ratio is not None
                      and ratio <= BEYOND_TARGET_BYTES)
                if ok:
                    met.append(f"`{v}` at N = {n}" + (f" ({BEYOND_DATA[data]})"
                                                        if data != "fm" else ""))
                name = f"**`{v}`**" if ok else f"`{v}`"
                lines.append("| " + " | ".join([
                    BEYOND_DATA[data], str(n), name,
                    f"{acc}% ({k})" if acc is not None else "—",
                    f"{dl:+} ({kd})" if dl is not None else "",
                    f"{loss:.4f} ({kl})" if loss is not None else "",
                    "–".join(f"{b:,}" for b in sizes), _ratio(ratio)]) + " |")
        lines += ["", f"In **bold**: the study's target, a mean Δ vs FP32 of at least "
                  f"{BEYOND_TARGET_DELTA:+.2f} points at no more than {BEYOND_TARGET_BYTES:.2f}× "
                  "TernGrad's wire bytes — met by " + (", ".join(met) if met else "none yet") + "."]
        short = [r["row"] for r in done if r not in full]
        if short:
            lines.append(f"Left out of the summary (not {BEYOND_ITERS:,} iterations): "
                         + ", ".join(f"`{x}`" for x in short) + ".")
    if notes:
        lines += ["", "Commands (from each run's `command.txt`; machine and commit there too):", ""]
        lines += notes
    return "\n".join(lines), bool(done)


# ---- main ---------------------------------------------------------------------------------------

def section(table, runs, write_csv, merge=False):
    if table == "figure2":
        return figure2_markdown(runs)
    if table == "beyond":
        return beyond_markdown(runs, PAGES[table] if merge else None)
    text, found = table_markdown(table, runs)
    if table == "table2":
        f4, found4 = figure4(runs, write_csv)
        text += "\n\n" + f4
        found = found or found4
    return text, found


HASH_CELL = re.compile(r"`([0-9a-f]{8})…`")


def dropped_runs(old_block, text):
    """The params_sha256 prefixes (a finished run each) in a page's generated block that `text`
    no longer has: the runs/ tree is not in git, so regenerating on a checkout without some of
    the runs would silently erase rows that were recorded."""
    new = set(HASH_CELL.findall(text))
    return [h for h in dict.fromkeys(HASH_CELL.findall(old_block)) if h not in new]


def update_page(table, text, page=None, force=False):
    """Rewrite the generated block of the table's page with `text`: True when rewritten, None when
    the page or its block is missing, False (the page as it was) when `text` would drop a
    recorded run and not `force`."""
    page = page or PAGES[table]
    content, old_block = _generated_block(page)
    if content is None:
        print(f"collect.py: {page} does not exist; not updated", file=sys.stderr)
        return None
    if old_block is None:
        print(f"collect.py: {page} has no {BEGIN} ... {END} block; not updated", file=sys.stderr)
        return None
    lost = dropped_runs(old_block, text)
    if lost and not force:
        named = ", ".join(h + "…" for h in lost[:4]) + (f" and {len(lost) - 4} more"
                                                        if len(lost) > 4 else "")
        print(f"collect.py: {page} not updated: {len(lost)} recorded run(s) ({named}) are not "
              "in the runs directory (--force to drop them)", file=sys.stderr)
        return False
    stamp = datetime.date.today().isoformat()
    block = f"{BEGIN}\n_Generated by `paper/collect.py --update-pages` on {stamp}._\n\n{text}\n{END}"
    content = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, content,
                     flags=re.S)
    with open(page, "w") as f:
        f.write(content)
    print(f"collect.py: updated {page}", file=sys.stderr)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("tables", nargs="*", metavar="TABLE",
                    help=f"tables to collect: {', '.join(TABLES)} (default: all)")
    ap.add_argument("--runs", default=os.environ.get("RUNS", os.path.join(REPO_DIR, "runs")),
                    help="the runs directory the scripts wrote (default: $RUNS or runs/)")
    ap.add_argument("--update-pages", action="store_true",
                    help="rewrite the generated block of paper/<table>.md with the result")
    ap.add_argument("--force", action="store_true",
                    help="with --update-pages: rewrite a page even if that drops recorded runs "
                         "whose directories are not in the runs directory")
    ap.add_argument("--merge", action="store_true",
                    help="beyond only: also take the finished runs that paper/beyond.md records "
                         "and the runs directory lacks (runs recorded on other machines); a run "
                         "in the runs directory replaces the page's row")
    ap.add_argument("--csv", action="store_true",
                    help="write runs/table2/figure4.csv with Figure 4's curves")
    args = ap.parse_args()
    tables = args.tables or TABLES
    status = 0
    for t in tables:
        if t not in TABLES:
            ap.error(f"unknown table '{t}' (expected one of {', '.join(TABLES)})")
    if args.merge and tables != ["beyond"]:
        ap.error("--merge is for the table beyond only (name it alone: collect.py beyond --merge)")
    if not os.path.isdir(args.runs):
        print(f"collect.py: no runs directory {args.runs} (run paper/<table>.sh first); "
              "printing the paper's numbers only", file=sys.stderr)
    for t in tables:
        text, found = section(t, args.runs, args.csv, args.merge)
        print(text)
        print()
        if args.update_pages and update_page(t, text, force=args.force) is False:
            status = 1
        if not found:
            print(f"collect.py: {t}: no finished run in {os.path.join(args.runs, t)}",
                  file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
