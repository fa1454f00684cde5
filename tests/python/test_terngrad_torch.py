"""terngrad_torch (python/): the TernGrad DDP communication hook against the library.

Run by ctest (python_terngrad_torch) with PYTHONPATH=build/python and the Python that imports
torch, and (python_pip_install, scripts/test-pip-install.sh) with no PYTHONPATH against the package
`pip install ./python` put in a venv. Where PyTorch or the extension is missing it prints
"SKIPPED: <why>" and exits 0 (ctest reports it skipped).

  1. Same numbers as the trainer: gradients fed to the hook's engine on P Gloo processes give the
     bit-identical average that the library's one-process aggregation (tern::aggregate_local,
     what `terngrad train` runs for emulated workers) gives for the same gradients, seed and step,
     under every collective the cost model can pick.
  2. Through DDP: two Gloo processes train a small conv net for a few steps with the hook; every
     bucket DDP handed the hook is checked against aggregate_local of all ranks' buckets, the
     ranks end with identical parameters, and the bytes on the wire are TernGrad's (about 2 bits
     per element, not 32).
  3. Bad options are refused with a message naming them.
"""

import os
import queue
import sys
import tempfile
import unittest

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # pragma: no cover
    print("SKIPPED: PyTorch is not installed (%s); terngrad_torch is not built without it" % e)
    sys.exit(0)
try:
    import terngrad_torch
    from terngrad_torch import TernGradState, terngrad_hook, TernGradError, _C
except ImportError as e:  # pragma: no cover
    print(
        "SKIPPED: terngrad_torch is not importable (%s): build it with PyTorch found "
        "(cmake -DTG_BUILD_PYTHON=ON) and set PYTHONPATH=build/python, or pip install ./python" % e
    )
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hook_records import recording_hook  # noqa: E402


def _init(rank, world, store_path):
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method="file://" + store_path, rank=rank, world_size=world
    )


def _bucket_grads(rank, numels, step, bucket):
    """Rank `rank`'s gradient of a bucket: layer-like tensors of different scales, some with
    outliers (so clipping at 2.5 sigma bites) and one all zero (scaler 0)."""
    g = torch.Generator().manual_seed(1000 * step + 10 * bucket + rank)
    parts = []
    for i, n in enumerate(numels):
        if i == 2:
            parts.append(torch.zeros(n))
            continue
        x = torch.randn(n, generator=g) * (0.1 ** i) * (1 + rank)
        x[:: max(1, n // 7)] *= 8.0
        parts.append(x)
    return torch.cat(parts).contiguous()


# Two buckets: parameter sizes and ids.
_BUCKETS = {0: ([301, 64, 17, 5000], [0, 1, 2, 3]), 1: ([1, 2049, 33], [4, 5, 6])}


def _engine_worker(rank, world, store_path, algorithm, pack, ranks_per_node, q):
    _init(rank, world, store_path)
    state = TernGradState(clip=2.5, pack=pack, seed=11, algorithm=algorithm,
                          ranks_per_node=ranks_per_node)
    out = {"nodes": state.nodes}
    for step in range(3):
        for b, (numels, ids) in _BUCKETS.items():
            res = state._engine.reduce(b, _bucket_grads(rank, numels, step, b), numels, ids, step)
            out[(step, b)] = (res.out.clone(), res.route, res.sent, res.scalers)
    if rank == 0:
        q.put({k: v if k == "nodes" else (v[0].numpy().tobytes(), v[1], v[2], v[3])
               for k, v in out.items()})
    dist.barrier()
    dist.destroy_process_group()


def _ddp_worker(rank, world, store_path, q):
    _init(rank, world, store_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
    )
    before = [p.detach().clone() for p in model.parameters()]
    # Small buckets (DDP's first one included): several per step, so bucket order and indices
    # matter.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 16 << 10
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.02)
    state = TernGradState(clip=2.5, seed=5)
    records = []

    ddp.register_comm_hook(state, recording_hook(terngrad_hook, records))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    steps = 4
    for _ in range(steps):
        x = torch.randn(16, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    # Every rank's buckets, to rank 0.
    gathered = [None] * world
    # DDP waited for every future before backward returned: all are done.
    dist.all_gather_object(
        gathered,
        [(r["index"], r["step"], r["numels"], r["ids"], r["buffer"].numpy(), r["out"].numpy())
         for r in records],
    )
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    params = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(params, flat)
    if rank == 0:
        changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        q.put(
            dict(
                gathered=gathered,
                params=[p.numpy().tobytes() for p in params],
                changed=changed,
                step=state.step,
                sent=state.bytes_sent,
                received=state.bytes_received,
                total_sent=state.total_bytes_sent,
                numel=sum(p.numel() for p in model.parameters()),
                scalers=state.named_scalers(model),
                names=[n for n, _ in model.named_parameters()],
                routes=dict(state.routes),
                seconds=dict(state.seconds),
            )
        )
    dist.barrier()
    dist.destroy_process_group()


def _spawn(fn, world, *args):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        procs = [ctx.Process(target=fn, args=(r, world, store) + args + (q,)) for r in range(world)]
        for p in procs:
            p.start()
        result = None
        for _ in range(240):  # a rank that fails ends the wait at once
            try:
                result = q.get(timeout=1)
                break
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    break
        for p in procs:
            if result is None:
                p.terminate()
            p.join(timeout=120)
        for p in procs:
            if p.exitcode != 0:
                raise AssertionError("a rank process exited with %s" % p.exitcode)
        if result is None:
            raise AssertionError("no result from rank 0 within 240 s")
    return result


def _options(pack="two_bit", seed=11):
    o = _C.HookOptions()
    o.clip = 2.5
    o.pack = pack
    o.seed = seed
    return o


class SameNumbersAsTheLibrary(unittest.TestCase):
    def check(self, world, algorithm, pack="two_bit", expect_route=None, ranks_per_node=None,
              expect_nodes=None):
        got = _spawn(_engine_worker, world, algorithm, pack, ranks_per_node)
        # Learned from the host name when not given: every rank of this test on one node.
        self.assertEqual(got["nodes"], expect_nodes or [0] * world)
        for step in range(3):
            for b, (numels, ids) in _BUCKETS.items():
                grads = [_bucket_grads(r, numels, step, b) for r in range(world)]
                want = _C.aggregate_local(grads, numels, ids, _options(pack), step)
                out, route, sent, scalers = got[(step, b)]
                self.assertTrue(
                    out == want.numpy().tobytes(),
                    "P=%d %s step %d bucket %d: hook differs from aggregate_local"
                    % (world, algorithm, step, b),
                )
                if expect_route:
                    self.assertIn(expect_route, route)
                self.assertGreater(sent, 0)
                # Shared scaler = max over ranks of 2.5 sigma; the all-zero tensor's is 0.
                self.assertEqual(len(scalers), len(numels))
                for i, n in enumerate(numels):
                    sig = max(float(g[sum(numels[:i]):sum(numels[:i]) + n].std(unbiased=False))
                              for g in grads)
                    if i == 2:
                        self.assertEqual(scalers[i], 0.0)
                    else:
                        self.assertAlmostEqual(scalers[i], 2.5 * sig, delta=1e-5 * 2.5 * sig)

    def test_two_ranks_auto_is_allgather(self):
        self.check(2, "auto", expect_route="allgather")

    def test_three_ranks_every_algorithm(self):
        self.check(3, "allgather", expect_route="allgather")
        self.check(3, "packed-allreduce", expect_route="packed-allreduce")
        self.check(3, "ps", expect_route="ps")
        self.check(3, "sharded", expect_route="sharded")
        self.check(3, "hierarchical", expect_route="hierarchical")

    def test_nodes_from_ranks_per_node_take_the_hierarchical_route(self):
        # Two nodes of two: auto sums inside the nodes first (the fewest bytes between them),
        # with the numbers of one process.
        self.check(4, "auto", expect_route="hierarchical", ranks_per_node=2,
                   expect_nodes=[0, 0, 1, 1])

    def test_base3_packing(self):
        self.check(2, "auto", pack="base3")


class ThroughDDP(unittest.TestCase):
    def test_two_gloo_ranks_train_to_identical_parameters(self):
        r = _spawn(_ddp_worker, 2)
        self.assertTrue(r["changed"], "training did not move the parameters")
        self.assertTrue(r["params"][0] == r["params"][1], "ranks hold different parameters")
        self.assertEqual(r["step"], 4)
        # Every bucket of every step: the hook's average is the library's aggregation of both
        # ranks' buckets, and both ranks got the same bits.
        rank0, rank1 = r["gathered"]
        self.assertEqual(len(rank0), len(rank1))
        per_step = [sum(1 for rec in rank0 if rec[1] == s) for s in range(4)]
        self.assertTrue(all(c >= 1 for c in per_step), per_step)
        self.assertGreaterEqual(max(per_step), 2, "expected several buckets in a step")
        for (i, s, n, ids, b0, o0), (i1, s1, n1, ids1, b1, o1) in zip(rank0, rank1):
            self.assertEqual((i, s, n, ids), (i1, s1, n1, ids1))
            want = _C.aggregate_local(
                [torch.from_numpy(b0), torch.from_numpy(b1)], n, ids, _options(seed=5), s
            )
            self.assertTrue(
                o0.tobytes() == want.numpy().tobytes(),
                "bucket %d step %d: hook differs from aggregate_local" % (i, s),
            )
            self.assertTrue(o1.tobytes() == o0.tobytes(), "ranks got different averages")
        # Wire: P = 2 allgathers one rank's 2-bit codes (+ 4-byte-aligned scalers): about n / 4
        # bytes each way, against 4n for an fp32 ring allreduce at P = 2.
        n = r["numel"]
        self.assertGreater(r["sent"], n // 4)
        self.assertLess(r["sent"], n // 4 + 64 * 16)
        self.assertEqual(r["sent"], r["received"])
        self.assertEqual(r["total_sent"], 4 * r["sent"])
        self.assertEqual(sorted(r["scalers"]), sorted(r["names"]))
        self.assertTrue(all(v > 0 for v in r["scalers"].values()))
        self.assertTrue(all("allgather" in v for v in r["routes"].values()))
        self.assertEqual(sorted(r["seconds"]), ["comm", "encode", "reduce"])
        self.assertTrue(all(v >= 0 for v in r["seconds"].values()))


class BadOptions(unittest.TestCase):
    def test_refused_with_a_message(self):
        with self.assertRaisesRegex(TernGradError, "not initialized"):
            TernGradState()
        with tempfile.TemporaryDirectory() as d:
            dist.init_process_group(
                "gloo", init_method="file://" + os.path.join(d, "s"), rank=0, world_size=1
            )
            try:
                with self.assertRaisesRegex(TernGradError, "pack.*three_bit"):
                    TernGradState(pack="three_bit")
                with self.assertRaisesRegex(TernGradError, "clip"):
                    TernGradState(clip=-1)
                with self.assertRaisesRegex(TernGradError, "algorithm|ring"):
                    TernGradState(algorithm="ring")
                with self.assertRaisesRegex(TernGradError, "ranks_per_node.*0"):
                    TernGradState(ranks_per_node=0)
                self.assertEqual(TernGradState(ranks_per_node=4).nodes, [0])
                st = TernGradState()
                with self.assertRaisesRegex(TernGradError, "holds 3 elements"):
                    st._engine.reduce(0, torch.zeros(3), [1, 1], [0, 1], 0)
                with self.assertRaisesRegex(TernGradError, "float32, float16 or bfloat16"):
                    st._engine.reduce(0, torch.zeros(2, dtype=torch.float64), [1, 1], [0, 1], 0)
                with self.assertRaisesRegex(TernGradError, "2 parameter sizes but 1 parameter id"):
                    st._engine.reduce(0, torch.zeros(2), [1, 1], [0], 0)
            finally:
                dist.destroy_process_group()


if __name__ == "__main__":
    unittest.main(verbosity=2)
