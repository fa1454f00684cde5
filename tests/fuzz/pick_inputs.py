#!/usr/bin/python3
"""Adds to a target's checked-in corpus (tests/fuzz/corpus/<name>/) the few inputs of a fuzz run
that reach the most coverage the corpus does not, as cov_<sha1 prefix> files, so the replay test
of the normal build walks those paths too. libFuzzer's -merge=1 records each input's features in
a control file; this picks greedily from it: the input adding the most new features first (the
smaller on a tie), at most --max inputs and only those adding at least --min-gain features.

Usage: /usr/bin/python3 tests/fuzz/pick_inputs.py [--build-dir build-fuzz] [--max 25]
           [--min-gain 5] NAME RUN_DIR...
e.g. after scripts/fuzz.sh config: tests/fuzz/pick_inputs.py config build-fuzz/corpus/config
"""
import argparse
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(HERE, "..", "..", "build-fuzz"))
    ap.add_argument("--max", type=int, default=25)
    ap.add_argument("--min-gain", type=int, default=5)
    ap.add_argument("name")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    corpus = os.path.join(HERE, "corpus", a.name)
    fuzzer = os.path.join(a.build_dir, "tests", "fuzz", a.name + "_fuzz")
    with tempfile.TemporaryDirectory() as tmp:
        out, ctl = os.path.join(tmp, "out"), os.path.join(tmp, "control")
        shutil.copytree(corpus, out)  # the checked-in inputs are the initial corpus of the merge
        subprocess.run([fuzzer, "-merge=1", "-merge_control_file=" + ctl, out] + a.runs,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
        # Control file: file count, initial-corpus count, the paths, then "FT <index> <feature>..."
        lines = open(ctl).read().split("\n")
        n, n0 = int(lines[0]), int(lines[1])
        files = lines[2:2 + n]
        features = {}
        for line in lines[2 + n:]:
            p = line.split()
            if p and p[0] == "FT":
                features[int(p[1])] = set(map(int, p[2:]))
        have = set().union(*(features.get(i, set()) for i in range(n0)))
        left = {i: f for i, f in features.items() if i >= n0}
        for _ in range(a.max):
            if not left:
                break
            best = max(left, key=lambda i: (len(left[i] - have), -os.path.getsize(files[i])))
            gain = len(left[best] - have)
            if gain < a.min_gain:
                break
            have |= left.pop(best)
            dst = os.path.join(corpus, "cov_" + os.path.basename(files[best])[:12])
            shutil.copyfile(files[best], dst)
            print(f"{dst}: {gain} new features, {os.path.getsize(dst)} bytes")


if __name__ == "__main__":
    main()
