"""terngrad_torch (python/): error feedback, saved and resumed hook state, fp16/bf16 buckets.

Run by ctest (python_terngrad_torch_state, and python_pip_install against the pip-installed
package) like test_terngrad_torch.py, whose process helpers it uses; prints "SKIPPED: <why>" and exits 0 where PyTorch or the extension is missing.

  1. Error feedback is the library's: two Gloo ranks train a small net through DDP with
     error_feedback=True; every step's averaged gradient of every parameter is bit-identical to
     the library's one-process aggregation (tern::aggregate_local, one compressor over the whole
     model in parameter order, error_feedback on, kept from step to step) of both ranks'
     gradients. DDP's bucket rebuild after the first step changes which bucket holds which
     parameter (checked), with and without static_graph; the residuals and random streams follow
     the parameters.
  2. Resume: k steps, save model + optimizer + hook state (torch.save), new processes with a new
     DDP and a new state load them and run to the end: the same parameters bit for bit as the
     uninterrupted run (the resumed DDP starts from its initial buckets again and rebuilds), and
     different ones when the hook's state is not loaded. A state that does not fit (parameter
     count or shapes, rank, world size, options) is refused with a message naming what differs.
  3. fp16 and bf16 buckets (fed to the hook's entry point directly: Debian's torch 1.13 runs
     neither fp16 Linear on the CPU nor bf16 over Gloo): the hook hands back the bucket's dtype,
     and its values are the f32 path's on the same (exactly widened) values, rounded once.
"""

import gc
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_terngrad_torch import _bucket_grads, _init, _spawn  # noqa: E402 (skips without torch)
from hook_records import recording_hook  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from terngrad_torch import TernGradError, TernGradState, _C, terngrad_hook  # noqa: E402

STEPS = 6  # training steps of the DDP tests
SEED = 7  # the hook's seed


class Net(torch.nn.Module):
    """Parameters registered in another order than backward produces their gradients (fc2 first),
    so DDP's rebuilt buckets (in gradient-ready order) differ from its first step's (torch 1.13:
    one bucket of all parameters, or with static_graph buckets in reverse registration order)."""

    def __init__(self):
        super().__init__()
        self.fc2 = torch.nn.Linear(64, 10)
        self.conv = torch.nn.Conv2d(1, 8, 5)
        self.fc1 = torch.nn.Linear(8 * 12 * 12, 64)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def _model():
    torch.manual_seed(0)
    return Net()


def _ddp(model, static_graph=False):
    # Small buckets, DDP's first one included: several per step, so the rebuild moves parameters.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 4 << 10
    return torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=0.02, static_graph=static_graph
    )


def _train_step(ddp, opt, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)  # step-indexed: a resume sees the same
    x = torch.randn(8, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (8,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()


def _layouts(records):
    """(step, index, ids, ...) per bucket -> {step: [parameter ids of each bucket, in order]}."""
    out = {}
    for step, index, ids, *_ in sorted(records, key=lambda r: (r[0], r[1])):
        out.setdefault(step, []).append(ids)
    return out


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()


# ---- 1. error feedback against the library --------------------------------------------------


def _feedback_worker(rank, world, store, static_graph, q):
    _init(rank, world, store)
    model = _model()
    ddp = _ddp(model, static_graph)
    state = TernGradState(seed=SEED, error_feedback=True, parameters=model.parameters())
    records = []
    ddp.register_comm_hook(state, recording_hook(terngrad_hook, records))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        _train_step(ddp, opt, rank, step)
    gathered = [None] * world
    dist.all_gather_object(
        gathered,
        [(r["step"], r["index"], r["ids"], r["buffer"].numpy(), r["out"].numpy()) for r in records],
    )
    if rank == 0:
        q.put(dict(gathered=gathered, numels=[p.numel() for p in model.parameters()]))
    dist.barrier()
    dist.destroy_process_group()


class ErrorFeedbackIsTheLibrarys(unittest.TestCase):
    def check(self, static_graph):
        r = _spawn(_feedback_worker, 2, static_graph)
        numels = r["numels"]
        offsets = [sum(numels[:i]) for i in range(len(numels))]
        ranks = r["gathered"]
        layouts = _layouts(ranks[0])
        self.assertEqual(sorted(layouts), list(range(STEPS)))
        # One rebuild (after the first step; with static_graph after the second), which moves
        # parameters between buckets, and several buckets after it.
        rebuilds = [s for s in range(1, STEPS) if layouts[s] != layouts[s - 1]]
        self.assertEqual(len(rebuilds), 1, layouts)
        self.assertGreaterEqual(len(layouts[STEPS - 1]), 2, layouts)
        # Per rank and step: the model-order flat gradient the hook was handed, and its output.
        def per_step(records):
            grads, outs = {}, {}
            for s, _, ids, b, o in records:
                g = grads.setdefault(s, torch.full((sum(numels),), float("nan")))
                out = outs.setdefault(s, torch.full((sum(numels),), float("nan")))
                at = 0
                for i in ids:
                    g[offsets[i]:offsets[i] + numels[i]] = torch.from_numpy(b[at:at + numels[i]])
                    out[offsets[i]:offsets[i] + numels[i]] = torch.from_numpy(o[at:at + numels[i]])
                    at += numels[i]
            return grads, outs

        (g0, out0), (g1, out1) = per_step(ranks[0]), per_step(ranks[1])
        o = _C.HookOptions()
        o.seed = SEED
        o.error_feedback = True
        library = _C.LocalAggregation(o, numels)  # slot i draws parameter i's stream
        o.error_feedback = False
        plain = _C.LocalAggregation(o, numels)
        for s in range(STEPS):
            want = library.reduce([g0[s], g1[s]], s)
            self.assertFalse(torch.isnan(g0[s]).any(), "step %d: a parameter missed the hook" % s)
            self.assertTrue(out0[s].numpy().tobytes() == want.numpy().tobytes(),
                            "step %d: the hook differs from the library's error feedback" % s)
            self.assertTrue(out1[s].numpy().tobytes() == out0[s].numpy().tobytes(),
                            "step %d: the ranks got different averages" % s)
            # From the second step on the residuals are in the messages: without them the
            # average of the same gradients differs.
            if s >= 1:
                self.assertFalse(torch.equal(plain.reduce([g0[s], g1[s]], s), out0[s]),
                                 "step %d: error feedback changed nothing" % s)

    def test_through_a_bucket_rebuild(self):
        self.check(static_graph=False)

    def test_static_graph(self):
        self.check(static_graph=True)


# ---- 2. saved and resumed state ---------------------------------------------------------------


def _resume_worker(rank, world, store, mode, ckpt_dir, k, q):
    """mode "full": STEPS steps; "first": k steps, then save; "resume": load, run to STEPS, once
    with the hook's state loaded and once with a fresh one."""
    _init(rank, world, store)
    path = os.path.join(ckpt_dir, "rank%d.pt" % rank)

    def run(model, opt_state, hook_state, first):
        ddp = _ddp(model)
        state = TernGradState(seed=SEED, error_feedback=True)  # ids learned in the first step
        if hook_state is not None:
            state.load_state_dict(hook_state)
        records = []
        ddp.register_comm_hook(state, recording_hook(terngrad_hook, records))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        if opt_state is not None:
            opt.load_state_dict(opt_state)
        for step in range(first, k if mode == "first" else STEPS):
            _train_step(ddp, opt, rank, step)
        return state, opt, _layouts([(r["step"], r["index"], r["ids"]) for r in records])

    out = {}
    if mode in ("full", "first"):
        model = _model()
        state, opt, layouts = run(model, None, None, 0)
        if mode == "first":
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "hook": state.state_dict()}, path)
    else:
        for load_hook in (True, False):
            ckpt = torch.load(path)
            model = _model()
            model.load_state_dict(ckpt["model"])
            state, _, layouts = run(model, ckpt["opt"], ckpt["hook"] if load_hook else None, k)
            out[load_hook] = (_flat(model), layouts, state.step)
    if mode != "resume":
        out = {None: (_flat(model), layouts, state.step)}
    gathered = [None] * world
    dist.all_gather_object(gathered, out)
    if rank == 0:
        q.put(gathered)
    dist.barrier()
    dist.destroy_process_group()


class Resume(unittest.TestCase):
    def test_resumed_run_has_the_same_parameters(self):
        k = 3
        with tempfile.TemporaryDirectory() as d:
            full = _spawn(_resume_worker, 2, "full", d, k)
            first = _spawn(_resume_worker, 2, "first", d, k)
            resumed = _spawn(_resume_worker, 2, "resume", d, k)
        want, full_layouts, full_step = full[0][None]
        self.assertEqual(full_step, STEPS)
        self.assertEqual(first[0][None][2], k)
        self.assertNotEqual(full_layouts[0], full_layouts[1], "no bucket rebuild")
        for rank in range(2):
            self.assertEqual(full[rank][None][0], want, "ranks differ in the full run")
            params, layouts, step = resumed[rank][True]
            self.assertEqual(step, STEPS)
            # The resumed DDP starts from its initial buckets (the full run's step 0) and rebuilds.
            self.assertEqual(layouts[k], full_layouts[0])
            self.assertEqual(layouts[k + 1], full_layouts[1])
            self.assertTrue(params == want, "rank %d: resumed parameters differ" % rank)
            self.assertFalse(resumed[rank][False][0] == want,
                             "rank %d: resuming without the hook state changed nothing" % rank)


class MismatchedState(unittest.TestCase):
    def test_refused_with_a_message(self):
        with tempfile.TemporaryDirectory() as d:
            dist.init_process_group(
                "gloo", init_method="file://" + os.path.join(d, "s"), rank=0, world_size=1
            )
            try:
                model = _model()
                st = TernGradState(seed=SEED, error_feedback=True, parameters=model.parameters())
                st.step = 4
                saved = st.state_dict()
                self.assertEqual(sorted(saved["residuals"]), list(range(6)))
                self.assertEqual(saved["residuals"][1].shape, model.fc2.bias.shape)

                def refused(pattern, target=None, **edit):
                    target = target or TernGradState(
                        seed=SEED, error_feedback=True, parameters=_model().parameters()
                    )
                    with self.assertRaisesRegex(TernGradError, pattern):
                        target.load_state_dict(dict(saved, **edit))
                    self.assertEqual(target.step, 0, "a refused state was half loaded")

                refused("the state has 6 parameters, the model 2",
                        TernGradState(seed=SEED, error_feedback=True,
                                      parameters=torch.nn.Linear(3, 2).parameters()))
                swapped = Net()
                swapped.fc1 = torch.nn.Linear(8 * 12 * 12, 65)  # same count, other shapes
                refused(r"parameter 4: the saved residual has shape \[64, 1152\], the parameter "
                        r"\[65, 1152\]",
                        TernGradState(seed=SEED, error_feedback=True,
                                      parameters=swapped.parameters()))
                refused("rank 0's of 2 ranks, this is rank 0 of 1", world_size=2)
                refused("rank 1's of 1 ranks, this is rank 0 of 1", rank=1)
                refused("seed: saved 8, this state has 7", options=dict(saved["options"], seed=8))
                refused("error_feedback: saved True, this state has False",
                        TernGradState(seed=SEED, parameters=_model().parameters()))
                refused(r"residuals of parameter ids \[0, 1\], expected 0..5",
                        residuals={0: saved["residuals"][0], 1: saved["residuals"][1]})
                refused("not a TernGradState state_dict", format="other")
                ok = TernGradState(seed=SEED, error_feedback=True, parameters=_model().parameters())
                ok.load_state_dict(saved)
                self.assertEqual(ok.step, 4)
                # Ids learned in the first step: the check waits for them, and fails backward.
                other = TernGradState(seed=SEED, error_feedback=True,
                                      parameters=torch.nn.Linear(3, 2).parameters())
                late = TernGradState(seed=SEED, error_feedback=True)
                late.load_state_dict(other.state_dict())
                ddp = _ddp(_model())
                ddp.register_comm_hook(late, terngrad_hook)
                with self.assertRaisesRegex(RuntimeError, "residual of parameter|the state has"):
                    ddp(torch.zeros(2, 1, 28, 28)).sum().backward()
            finally:
                dist.destroy_process_group()


# ---- 3. fp16 and bf16 buckets -----------------------------------------------------------------


class _Bucket:
    """What the hook reads of a dist.GradBucket."""

    def __init__(self, index, buffer, params):
        self._index, self._buffer, self._params = index, buffer, params

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def is_last(self):
        return True


# Relative rounding of one f32 -> dtype conversion (round to nearest: half an ulp, 2^-p for a
# p-bit significand with the hidden bit): the only difference allowed from the f32 path.
ROUNDING = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
NUMELS = [301, 64, 17, 5000]


def _dtype_worker(rank, world, store, q):
    _init(rank, world, store)
    params = [torch.empty(n) for n in NUMELS]
    out = {}
    for dtype in ROUNDING:
        low = TernGradState(seed=SEED, error_feedback=True, parameters=params)
        ref = TernGradState(seed=SEED, error_feedback=True, parameters=params)
        for step in range(3):
            g = _bucket_grads(rank, NUMELS, step, 0).to(dtype)
            got = terngrad_hook(low, _Bucket(0, g, params)).wait().clone()
            want = terngrad_hook(ref, _Bucket(0, g.float(), params)).wait().clone()
            # (f32 copies: numpy has no bf16; widening is exact)
            out[(str(dtype), step)] = (str(got.dtype), got.float().numpy(), want.numpy())
        res_low, res_ref = low.state_dict()["residuals"], ref.state_dict()["residuals"]
        out[(str(dtype), "residuals")] = all(
            torch.equal(res_low[i], res_ref[i]) for i in range(len(NUMELS))
        ) and any(bool(res_low[i].abs().sum() > 0) for i in range(len(NUMELS)))
    if rank == 0:
        q.put(out)
    # The hook states (each holds the process group and its engine's thread) go before the group
    # does, while the interpreter is whole: left to the interpreter's exit, a rank aborted once in
    # CI with "terminate called without an active exception" (PyTorch's Gloo threads at teardown).
    del low, ref
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


class LowPrecisionBuckets(unittest.TestCase):
    def test_fp16_and_bf16_are_the_f32_path_rounded_once(self):
        r = _spawn(_dtype_worker, 2)
        for dtype, rel in ROUNDING.items():
            for step in range(3):
                got_dtype, got, want = r[(str(dtype), step)]
                self.assertEqual(got_dtype, str(dtype))
                got, want = torch.from_numpy(got).to(dtype), torch.from_numpy(want)
                # Widening fp16/bf16 to f32 is exact, so the f32 path ternarized the same values
                # with the same scalers and random numbers: the results are its, rounded once.
                self.assertTrue(torch.equal(got, want.to(dtype)), "%s step %d" % (dtype, step))
                err = (got.float() - want).abs()
                self.assertTrue(bool((err <= rel * want.abs()).all()), "%s step %d" % (dtype, step))
                self.assertTrue(bool((want != 0).any()))
            # The residuals (f32) of both paths are the same, and not all zero.
            self.assertTrue(r[(str(dtype), "residuals")], "%s: residuals differ" % dtype)


if __name__ == "__main__":
    unittest.main(verbosity=2)
