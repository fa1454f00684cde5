#!/usr/bin/env python3
"""The simulator against measurement (issue 43 item 2): bench_comm's exchange times in network
namespaces over shaped links beside `terngrad perf-model --simulate`'s for the same setting.

Measured side: `bench_comm --nets NET --procs 2,4,8 --link RATE` (root: it makes the namespaces),
every TernGrad route and fp32 (our exact path) and fp32-ring (Gloo's ring), one call of the whole
gradient. Simulated side: the same call (`--bucket-mb 0`: one bucket) on a cluster of one rank per
node, each rank's link at the link's measured TCP rate, the P ranks sharing this machine's cores
(`--shared-cores`), with the constants below, which are measured once (bench/README) and never
fitted per point.

  sudo python3 bench/sim_check.py                       # measure, simulate, compare
  python3 bench/sim_check.py --measured DIR             # reuse DIR/<link>.jsonl from a run
Prints one line per (link, P, case) and the worst error; --json FILE writes the pairs as JSON
lines. Exit status 0 whatever the errors (a benchmark, not a test).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# bench_comm's case name -> (simulated method, route)
CASES = {
    "fp32": ("fp32", "auto"),
    "fp32-ring": ("fp32", "ring"),
    "ps": ("terngrad", "ps"),
    "allgather": ("terngrad", "allgather"),
    "packed-allreduce": ("terngrad", "packed-allreduce"),
    "sharded": ("terngrad", "sharded"),
    "auto": ("terngrad", "auto"),
}
RATES = {"100mbit": 0.1, "1gbit": 1.0, "10gbit": 10.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--net", default="lenet")
    ap.add_argument("--links", default="100mbit,1gbit")
    ap.add_argument("--procs", default="2,4,8")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--measured", help="a directory of <link>.jsonl from an earlier run")
    ap.add_argument("--keep", help="save the measured JSON lines here (<link>.jsonl)")
    # The constants (bench/README, "The simulator against measurement").
    ap.add_argument("--tcp-efficiency", type=float, default=0.957,
                    help="TCP goodput / the tbf rate (measured: one stream, 1448 of 1514 bytes)")
    ap.add_argument("--latency-us", type=float, default=3.0, help="one-way, measured")
    ap.add_argument("--per-message-us", type=float, default=0.0)
    ap.add_argument("--encode-ns", type=float, default=-1,
                    help="default: measured, the encode phase at P = 2")
    ap.add_argument("--decode-ns", type=float, default=2.0)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--json", help="write the pairs here as JSON lines")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bench", "bench_comm")
    tg = os.path.join(a.build, "cmd", "terngrad")
    rows = []

    def bench_comm(link, net, methods, algos):
        out = subprocess.run(
            [bench, "--nets", net, "--procs", a.procs, "--methods", methods, "--algos", algos,
             "--link", link, "--reps", str(a.reps), "--warmup", "2"],
            check=True, capture_output=True, text=True).stdout
        return [json.loads(l) for l in out.splitlines() if l.startswith("{")]

    for link in a.links.split(","):
        if link not in RATES:
            sys.exit(f"sim_check: unknown link {link} (known: {', '.join(RATES)})")
        if a.measured:
            with open(os.path.join(a.measured, link + ".jsonl")) as f:
                measured = [json.loads(l) for l in f if l.startswith("{")]
        else:
            # The per-phase constant: one f32 tensor of 16 elements (P = 2: one phase, an
            # allgather; P > 2: two, reduce-scatter and allgather), then the net itself.
            measured = bench_comm(link, "tensor:16", "none", "auto")
            measured += bench_comm(link, a.net, "none,terngrad,ring",
                                   "ps,allgather,packed-allreduce,sharded,auto")
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                with open(os.path.join(a.keep, link + ".jsonl"), "w") as f:
                    f.writelines(json.dumps(m) + "\n" for m in measured)
        measured = [m for m in measured if m.get("bench") == "comm"]
        tiny = {m["procs"]: m for m in measured if m["net"] == "tensor:16" and m["algo"] == "fp32"}
        measured = [m for m in measured if m["net"] == a.net]
        # This machine's encode rate: the TernGrad encode phase at P = 2 (a core per rank).
        enc = [m["encode_ms"] / m["params"] for m in measured
               if m["procs"] == 2 and m["method"] == "terngrad"]
        encode_ns = a.encode_ns if a.encode_ns >= 0 else 1e6 * sorted(enc)[len(enc) // 2]
        # The platform: one rank per node; SimGrid's LV08 gives a flow 0.97 of the link, so the
        # link is the measured goodput / 0.97.
        gbit = RATES[link] * a.tcp_efficiency / 0.97
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(f'name = "netns-{link}"\ngpus_per_node = 1\n'
                    f"[intra]\nbandwidth_gbit = {gbit}\nlatency_us = {a.latency_us}\n"
                    f"[inter]\nbandwidth_gbit = {gbit}\nlatency_us = {a.latency_us}\n")
            cluster = f.name
        methods = sorted({f"{m}:{r}" for m, r in CASES.values()})
        sim = {}
        for p in sorted({m["procs"] for m in measured}):
            phase_ms = tiny[p]["median_ms"] / (1 if p == 2 else 2) if p in tiny else 0.0
            out = subprocess.run(
                [tg, "perf-model", "--simulate", "--json", "--cluster", cluster, "--networks",
                 a.net, "--batch", "1", "--compute-time", "1e-6", "--gpus", str(p), "--methods",
                 ",".join(methods), "--bucket-mb", "0", "--first-bucket-mb", "0",
                 "--per-message-us", str(a.per_message_us), "--per-phase-us",
                 str(1e3 * phase_ms), "--encode-ns", str(encode_ns), "--decode-ns",
                 str(a.decode_ns), "--shared-cores", str(a.cores)],
                check=True, capture_output=True, text=True).stdout
            for s in map(json.loads, out.splitlines()):
                sim[(s["gpus"], s["method"], s["route"])] = s
        os.unlink(cluster)
        for m in measured:
            key = CASES.get(m["algo"])
            if key is None:
                continue
            s = sim[(m["procs"], key[0], key[1])]
            rows.append({"link": link, "procs": m["procs"], "case": m["algo"],
                         "measured_ms": m["median_ms"], "p10_ms": m["p10_ms"], "p90_ms": m["p90_ms"],
                         "simulated_ms": 1e3 * s["exchange_seconds"],
                         "error": 1e3 * s["exchange_seconds"] / m["median_ms"] - 1,
                         "sent_max_measured": m["sent_max"], "sent_max_simulated": s["sent_max_bytes"],
                         "routes": s["routes"], "per_phase_ms": 1e3 * s["per_phase_s"],
                         "encode_ns": encode_ns, "decode_ns": a.decode_ns,
                         "link_gbit": gbit, "cpu": m.get("cpu", "")})
    print(f"{'link':8} {'P':>3} {'case':17} {'measured ms':>12} {'p10-p90':>15} {'simulated ms':>13}"
          f" {'error':>7} {'bytes (meas/sim)':>17}")
    for r in rows:
        band = f"{r['p10_ms']:.1f}-{r['p90_ms']:.1f}"
        print(f"{r['link']:8} {r['procs']:3d} {r['case']:17} {r['measured_ms']:12.1f} {band:>15}"
              f" {r['simulated_ms']:13.1f} {100 * r['error']:+6.1f}%"
              f" {r['sent_max_measured'] / max(1, r['sent_max_simulated']):18.3f}")
    if rows:
        worst = max(rows, key=lambda r: abs(r["error"]))
        inside = sum(abs(r["error"]) <= 0.15 for r in rows)
        print(f"within 15%: {inside} of {len(rows)}; worst {100 * worst['error']:+.1f}% "
              f"({worst['link']}, P = {worst['procs']}, {worst['case']})")
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
