#!/usr/bin/env python3
"""paper/collect.py beyond --merge: a page's recorded runs (run on other machines, their runs/
folders absent) and the runs directory's runs make one table, as if all were in runs/. Checks the
round trip (a page regenerated from its own records alone is the page), that a run in runs/
replaces the page's row, and that means and Δ vs FP32 come out the same from records as from
runs. Usage: collect_beyond_merge_test.py REPO_DIR"""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(sys.argv.pop(1) if len(sys.argv) > 1 else ".", "paper"))
import collect  # noqa: E402

# (row, test accuracy, final loss, payload bytes, wall seconds, params_sha256)
FIRST = [("fm_n4_s123_fp32", 0.9270, 0.09754, 5024320, 746, "9baba581" + "0" * 56),
         ("fm_n4_s123_tern", 0.9172, 0.16001, 314053, 762, "b7ad75e5" + "1" * 56),
         ("fm_n4_s7_fp32", 0.9239, 0.10171, 5024320, 624, "b5dee239" + "2" * 56),
         ("fm_n4_s7_tern", 0.9135, 0.16962, 314053, 4000, "c293c98a" + "3" * 56),
         ("mn_n8_s123_fp32", 0.9923, 0.00441, 5024320, 651, "0717534b" + "4" * 56)]
SECOND = [("fm_n4_s123_ef", 0.9262, 0.09889, 314053, 1305, "69846f22" + "5" * 56),
          ("fm_n4_s7_ef", 0.9226, 0.10311, 314053, 1315, "a33225ea" + "6" * 56),
          ("fm_n4_s7_tern", 0.9140, 0.16500, 314053, 640, "deadbeef" + "7" * 56)]  # a rerun


def make_runs(root, runs, device_name):
    for row, acc, loss, payload, wall, sha in runs:
        d = os.path.join(root, "beyond", row)
        os.makedirs(d)
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({"test_accuracy": acc, "iterations": 10000, "wall_seconds": wall,
                       "params_sha256": sha, "payload_bytes_per_worker_per_iter": payload,
                       "device": "cpu", "device_name": device_name}, f)
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            for step in (9500, 10000):
                f.write(json.dumps({"type": "train", "step": step, "loss": loss}) + "\n")
        with open(os.path.join(d, "command.txt"), "w") as f:
            f.write(f"# beyond row {row}\nterngrad train --out runs/beyond/{row} # {device_name}\n")


class BeyondMerge(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.first, self.second, self.empty = (os.path.join(self.dir, x)
                                               for x in ("first", "second", "empty"))
        make_runs(self.first, FIRST, "Machine A")
        make_runs(self.second, SECOND, "Machine B")
        os.makedirs(os.path.join(self.empty, "beyond"))
        self.recorded, _ = collect.beyond_markdown(self.first)
        self.page = os.path.join(self.dir, "beyond.md")
        with open(self.page, "w") as f:
            f.write(f"# Page\n\n{collect.BEGIN}\n_Generated._\n\n{self.recorded}\n{collect.END}\n")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def rows(self, text):
        """{row cells 0-3 joined: the whole line} of a per-run or summary table."""
        out = {}
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| ") and cells[0] in ("Fashion-MNIST", "MNIST"):
                out[" ".join(cells[:4 if len(cells) == 12 else 3])] = line
        return out

    def test_records_alone_give_the_page_back(self):
        merged, found = collect.beyond_markdown(self.empty, merge_page=self.page)
        self.assertTrue(found)
        self.assertIn("5 of these runs are kept from", merged)
        note = [ln for ln in merged.splitlines() if ln.startswith("5 of these runs")][0]
        expected = self.recorded.splitlines()
        got = [ln for ln in merged.splitlines() if ln != note]
        # The note and the blank line after it are the only additions; the runs directory named
        # in the title is the one given.
        got.remove("")
        self.assertEqual(got[1:], expected[1:])

    def test_runs_are_added_and_a_rerun_replaces_the_record(self):
        merged, _ = collect.beyond_markdown(self.second, merge_page=self.page)
        rows = self.rows(merged)
        self.assertIn("4 of these runs are kept from", merged)  # 5 recorded, 1 rerun
        # Recorded rows as they were; the new runs' Δ against the recorded FP32 of their seed.
        old = self.rows(self.recorded)
        for key in ("Fashion-MNIST 4 123 `fp32`", "Fashion-MNIST 4 123 `tern`",
                    "Fashion-MNIST 4 7 `fp32`", "MNIST 8 123 `fp32`"):
            self.assertEqual(rows[key], old[key])
        self.assertIn("| 92.62% | -0.08 |", rows["Fashion-MNIST 4 123 `ef`"])
        self.assertIn("| 92.26% | -0.13 |", rows["Fashion-MNIST 4 7 `ef`"])
        self.assertIn("| 91.40% | -0.99 |", rows["Fashion-MNIST 4 7 `tern`"])
        self.assertIn("`deadbeef…`", rows["Fashion-MNIST 4 7 `tern`"])
        self.assertNotIn("c293c98a", merged)
        # Means over a record and a run: TernGrad (91.72 + 91.40) / 2, Δ (-0.98 - 0.99) / 2.
        self.assertIn("| 91.560% (2) | -0.985 (2) | 0.1625 (2) |", rows["Fashion-MNIST 4 `tern`"])
        self.assertIn("| 92.440% (2) | -0.105 (2) | 0.1010 (2) |", rows["Fashion-MNIST 4 **`ef`**"])
        # Both machines named, and the recorded commands kept (as a reader runs them from a
        # checkout: paper/collect.py portable_command).
        self.assertIn("Device: cpu (Machine A), cpu (Machine B).", merged)
        self.assertIn("- `fm_n4_s123_fp32`: `./build/cmd/terngrad train --out runs/beyond/fm_n4_s123_fp32 "
                      "# Machine A`", merged)
        self.assertIn("- `fm_n4_s7_tern`: `./build/cmd/terngrad train --out runs/beyond/fm_n4_s7_tern "
                      "# Machine B`", merged)

    def test_without_merge_only_the_runs_directory(self):
        text, _ = collect.beyond_markdown(self.second)
        self.assertNotIn("fp32", "".join(self.rows(text)))
        self.assertNotIn("kept from", text)

    def test_merge_is_for_beyond_only(self):
        saved = sys.argv
        sys.argv = ["collect.py", "table1", "--merge", "--runs", self.second]
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()) as err, \
                    self.assertRaises(SystemExit) as cm:
                collect.main()
        finally:
            sys.argv = saved
        self.assertEqual(cm.exception.code, 2)
        self.assertIn("--merge is for the table beyond only", err.getvalue())


if __name__ == "__main__":
    unittest.main()
