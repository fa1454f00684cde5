"""Shared by the paper/ figure scripts: matplotlib (headless) with a clear message when it is
missing, and JSON-lines input with errors that name the file and line. Not run on its own."""
import json
import os
import sys


def pyplot():
    """matplotlib.pyplot on the Agg backend; exits naming the script and the package if missing."""
    script = os.path.basename(sys.argv[0]) or "paper script"
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"{script}: needs matplotlib: apt-get install python3-matplotlib, and run it "
                 f"with Debian's /usr/bin/python3 ({sys.executable} has none)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_jsonl(path, what, required=()):
    """The JSON objects of a JSON-lines file ('-': stdin), skipping blank lines. Exits naming the
    file (and line) when it cannot be read, a line is not JSON, or lacks a `required` key."""
    script = os.path.basename(sys.argv[0]) or "paper script"
    try:
        f = sys.stdin if path == "-" else open(path)
    except OSError as e:
        sys.exit(f"{script}: cannot read {what} {path}: {e.strerror}")
    rows = []
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e.msg})")
            missing = [k for k in required if k not in r]
            if missing:
                sys.exit(f"{path}:{n}: no {', '.join(missing)}; is this {what}?")
            rows.append(r)
    return rows
