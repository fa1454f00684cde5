#!/usr/bin/env python3
"""Instruction counts of the implicit-GEMM kernels' main loops, read from their SASS.

Usage: bench/sass_loops.py [OBJECT] [--cuobjdump PATH] [--nvdisasm PATH] [--filter TEXT]

OBJECT defaults to the CUDA build's build/nn/CMakeFiles/tg_nn.dir/ops/conv2d_cuda.cu.o. Prints one
JSON line per main loop of each igemm kernel (numbered by address; backward data has a second
one, for strides): its instructions per thread and BK step, how many are FFMA / HMMA (the
multiply), shared and global loads and stores, and local-memory (spill) accesses, with the
kernel's registers. No GPU is needed: a count, not a time, but the kernels are issue-bound where
their index math outweighs the multiply, so it is the figure to watch between GPU runs
(bench/README.md records the counts before and after the kd cursor).

Needs cuobjdump and nvdisasm. Where the CUDA toolkit lacks them (the CPU machines' toolkit
does), PyPI's wheels carry them: pip install --target D1 nvidia-cuda-cuobjdump and
pip install --target D2 nvidia-cuda-nvdisasm, then pass --cuobjdump D1/nvidia/cu13/bin/cuobjdump
--nvdisasm D2/nvidia/cu13/bin/nvdisasm.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys

KERNEL = re.compile(r"igemm_kernelINS_5igemm\d+(Tiling|MmaTiling)ILi(\d+)ELi(\d+)ELi\d+ELi\d+"
                    r"EEENS\d+_\d+(\w+?)EEEv")
INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
TARGET = re.compile(r"BRA\b.*?0x([0-9a-f]+)")


def fail(msg):
    print(f"sass_loops: {msg}", file=sys.stderr)
    sys.exit(1)


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def loops(instrs):
    """(start, end) index pairs of backward branches spanning more than 100 instructions."""
    at = {addr: i for i, (addr, _) in enumerate(instrs)}
    found = set()
    for i, (addr, text) in enumerate(instrs):
        m = TARGET.search(text)
        if m:
            tgt = int(m.group(1), 16)
            if tgt < addr and tgt in at and i - at[tgt] > 100:
                found.add((at[tgt], i))
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("object", nargs="?",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                         "nn", "CMakeFiles", "tg_nn.dir", "ops",
                                         "conv2d_cuda.cu.o"))
    ap.add_argument("--cuobjdump",
                    default=shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump")
    ap.add_argument("--nvdisasm", help="nvdisasm, where it is not beside cuobjdump or on PATH")
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    a = ap.parse_args()
    if not os.path.isfile(a.object):
        fail(f"no object file {a.object} (build the CUDA tree first)")
    if not os.access(a.cuobjdump, os.X_OK):
        fail(f"no cuobjdump at {a.cuobjdump} (see --help for PyPI's wheels)")
    env = dict(os.environ)
    dirs = [os.path.dirname(a.cuobjdump)] + ([os.path.dirname(a.nvdisasm)] if a.nvdisasm else [])
    env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "")])
    sass = subprocess.run([a.cuobjdump, "-sass", a.object], capture_output=True, text=True, env=env)
    if sass.returncode != 0:
        fail(f"cuobjdump -sass failed: {sass.stderr.strip().splitlines()[-1:]}")
    res = subprocess.run([a.cuobjdump, "-res-usage", a.object], capture_output=True, text=True,
                         env=env)
    regs = {}
    name = None
    for line in res.stdout.splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            name = m.group(1)
        m = re.search(r"REG:(\d+)", line)
        if m and name:
            regs[name] = int(m.group(1))
    count = 0
    for chunk in re.split(r"\n\s*Function : ", sass.stdout)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        k = KERNEL.search(name)
        if not k or a.filter not in name:
            continue
        instrs = [(int(m.group(1), 16), m.group(2))
                  for m in map(INSTR.match, chunk.split("\n")) if m]
        for n, (s, e) in enumerate(loops(instrs)):
            ops = collections.Counter(opcode(t) for _, t in instrs[s:e + 1])
            print(json.dumps({
                "kernel": ("tf32" if k.group(1) == "MmaTiling" else "fp32") +
                          f" {k.group(2)}x{k.group(3)}",
                "pass": k.group(4), "loop": n, "instructions": e - s + 1,
                "ffma": ops["FFMA"], "hmma": ops["HMMA"], "lds": ops["LDS"], "ldg": ops["LDG"],
                "sts": ops["STS"], "spill": ops["LDL"] + ops["STL"], "registers": regs.get(name)}))
            count += 1
    if count == 0:
        fail(f"no igemm kernel loops in {a.object}")


if __name__ == "__main__":
    main()
