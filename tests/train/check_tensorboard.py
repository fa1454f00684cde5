#!/usr/bin/env python3
"""Checks a run's TensorBoard event files (train/tensorboard.h) against the JSON lines they were
written from, reading them with the `tensorboard` Python package (a test-only dependency: bash
scripts/setup.sh --test-tools installs it into .venv-test/).

Usage: check_tensorboard.py DIR [--bounds]
  DIR/metrics.jsonl   every number of a record is the scalar "<type>/<key>" at its "step"
                      (strings and "step" itself are not scalars)
  --bounds            DIR/bounds.jsonl instead (terngrad measure-bounds): per row, the scalars
                      "<quantity>/<tensor>/<scaling>_c=<clip>" at its "iteration" for the
                      quantities scaler, sparsity, realized_sparsity and bound_ratio

Two readings of DIR's events.out.tfevents.* files:
  1. record by record with tensorboard's TFRecord reader, which checks both CRCs of every record
     and raises on a bad one (TensorBoard's own loader would silently stop there); each file must
     start with file_version "brain.Event:2";
  2. with EventAccumulator, the view TensorBoard shows: every file of DIR in name order, points
     orphaned by a restart (SessionLog START of a resumed run) dropped.
The scalars of reading 2 must be exactly those of the JSON lines: the same tags at the same steps,
each value the JSON number rounded to float32 (JSON null = NaN).

Exit status: 0 all match; 1 a mismatch or an unreadable file (printed); 2 usage; 77 the
tensorboard package is not installed.
"""
import glob
import json
import math
import os
import sys

BOUNDS_QUANTITIES = ("scaler", "sparsity", "realized_sparsity", "bound_ratio")


def fail(msg):
    print("check_tensorboard: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def clip_label(clip):
    # cmd/bounds_recorder.cpp clip_label: the shortest round-trip text ("2.5", "0").
    clip = float(clip)
    return str(int(clip)) if clip.is_integer() else repr(clip)


def expected_scalars(directory, bounds):
    """{(tag, step): value} from the JSON lines."""
    name = "bounds.jsonl" if bounds else "metrics.jsonl"
    path = os.path.join(directory, name)
    want = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            if bounds and "record" in rec:
                continue  # scaler-sharing rows have no TensorBoard scalars
            if bounds:
                where = "/%s/%s_c=%s" % (rec["tensor"], rec["scaling"], clip_label(rec["clip"]))
                items = [(q + where, rec[q]) for q in BOUNDS_QUANTITIES]
                step = rec["iteration"]
            else:
                items = [("%s/%s" % (rec["type"], k), v) for k, v in rec.items()
                         if k not in ("type", "step") and not isinstance(v, (str, bool))]
                step = rec["step"]
            for tag, v in items:
                if (tag, step) in want:
                    fail("%s line %d: %s at step %d appears twice" % (path, n, tag, step))
                want[(tag, step)] = math.nan if v is None else float(v)
    if not want:
        fail(path + " holds no numbers: nothing to compare")
    return want


def check_records(files):
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    total = 0
    for path in files:
        reader = pywrap_tensorflow.PyRecordReader_New(path)
        events = []
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                break
            except errors.DataLossError as e:
                fail("%s, record %d: %s" % (path, len(events), e))
            events.append(event_pb2.Event.FromString(reader.record()))
        if not events or events[0].file_version != "brain.Event:2":
            fail(path + ': the first event is not file_version "brain.Event:2"')
        total += len(events)
    return total


def main():
    args = sys.argv[1:]
    bounds = "--bounds" in args
    args = [a for a in args if a != "--bounds"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    directory = args[0]
    try:
        import numpy as np
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        print("check_tensorboard: the tensorboard Python package is not installed for %s (%s); "
              "bash scripts/setup.sh --test-tools installs it into .venv-test/"
              % (sys.executable, e), file=sys.stderr)
        return 77

    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    if not files:
        fail("no events.out.tfevents.* file in " + directory)
    records = check_records(files)

    want = expected_scalars(directory, bounds)
    acc = event_accumulator.EventAccumulator(directory,
                                             size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    have = {}
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            if (tag, ev.step) in have:
                fail("%s at step %d appears twice in the events" % (tag, ev.step))
            have[(tag, ev.step)] = ev.value

    errors = []
    for key in sorted(set(want) - set(have)):
        errors.append("missing from the events: %s at step %d" % key)
    for key in sorted(set(have) - set(want)):
        errors.append("in the events only: %s at step %d = %r" % (key + (have[key],)))
    for key in sorted(set(want) & set(have)):
        w = float(np.float32(want[key]))
        h = have[key]
        if not (w == h or (math.isnan(w) and math.isnan(h))):
            errors.append("%s at step %d: events %r, JSON %r (as float32 %r)"
                          % (key + (h, want[key], w)))
    if errors:
        fail("%d mismatch(es) in %s:\n  %s" % (len(errors), directory, "\n  ".join(errors[:50])))
    tags = len({t for t, _ in want})
    print("check_tensorboard: %s: %d scalars in %d tags match %s (%d event files, %d records)"
          % (directory, len(want), tags, "bounds.jsonl" if bounds else "metrics.jsonl",
             len(files), records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
