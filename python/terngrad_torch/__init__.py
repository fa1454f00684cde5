"""TernGrad for PyTorch DDP, on the terngrad library's kernels and wire format.

    import torch.distributed as dist
    from terngrad_torch import TernGradState, terngrad_hook

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = TernGradState(process_group=None, clip=2.5, pack="two_bit", seed=0)
    ddp.register_comm_hook(state, terngrad_hook)

Per DDP bucket and step, exactly what `terngrad train` does for its own buckets (the paper's
Algorithm 1 with layer-wise scalers, Section 3.2's scaler sharing and Section 3.1's gradient
clipping): every parameter's scaler is c * sigma of its gradient, shared as the maximum over the
ranks; each rank ternarizes its gradient stochastically and packs the codes (2 bits or base 3);
the packed bytes cross the process group by the collective the library's byte cost model picks
(allgather, packed-field allreduce or parameter server); the integer code sums are exact; the
result is scaler / world_size * sum, the averaged gradient DDP hands to the optimizer. The work
is the library's C++ (terngrad/aggregate.h), reached through the process group; nothing of TernGrad is
reimplemented in Python.

The hook returns at once: a worker thread aggregates the buckets in order while backward goes
on, and DDP waits for the futures at the end of backward.
"""

import queue
import threading
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

from . import _C

__all__ = ["TernGradState", "terngrad_hook", "TernGradError"]

TernGradError = _C.TernGradError


class TernGradState:
    """State of the TernGrad communication hook on one rank.

    Args:
        process_group: the group to aggregate over (None: the default group). Gloo for CPU
            tensors, NCCL for CUDA tensors.
        clip: c of the scaler c * sigma (gradient clipping, Section 3.1 of the paper); 0 scales by
            max |g| without clipping.
        pack: "two_bit" (4 codes per byte) or "base3" (5 codes per byte, 1.6 bits).
        seed: seed of the stochastic rounding; every rank must pass the same.
        algorithm: "auto" (the byte cost model's choice), "allgather", "packed-allreduce" or "ps".
        chunk_bytes: bytes of one rank's codes per collective call (0: the whole bucket).
        min_size: parameters with fewer elements travel as fp32.

    After each step (once DDP's backward has returned):
        bytes_sent, bytes_received: what this rank put on and took off the wire in the last step
            (all buckets; payload bytes by the collectives' message-passing model);
        total_bytes_sent, total_bytes_received: since construction;
        scalers: {parameter: shared scaler} of the last step; named_scalers(model) by name;
        routes: {bucket index: how it travelled}, e.g. "ternary: ... allgather ...";
        seconds: {"encode", "comm", "reduce"}: the last step's time in each phase (all buckets).

    The tensor a bucket's future holds is reused by that bucket's next step (DDP has copied it
    into the gradients by then); clone it to keep it longer.
    """

    def __init__(
        self,
        process_group: Optional[dist.ProcessGroup] = None,
        clip: float = 2.5,
        pack: str = "two_bit",
        seed: int = 0,
        algorithm: str = "auto",
        chunk_bytes: int = 2 << 20,
        min_size: int = 1,
    ):
        if process_group is None:
            if not dist.is_initialized():
                raise TernGradError(
                    "TernGradState: torch.distributed is not initialized "
                    "(call dist.init_process_group first, or pass process_group)"
                )
            process_group = dist.distributed_c10d._get_default_group()
        self.process_group = process_group
        options = _C.HookOptions()
        options.clip = float(clip)
        options.pack = str(pack)
        options.seed = int(seed)
        options.algorithm = str(algorithm)
        options.chunk_bytes = int(chunk_bytes)
        options.min_size = int(min_size)
        self.options = options
        self._engine = _C.Engine(process_group, options)
        self.rank = self._engine.rank
        self.world_size = self._engine.size
        self.step = 0  # steps whose last bucket has been handed to the hook
        self.bytes_sent = 0
        self.bytes_received = 0
        self.total_bytes_sent = 0
        self.total_bytes_received = 0
        self.scalers: Dict[torch.Tensor, float] = {}
        self.routes: Dict[int, str] = {}
        self.seconds: Dict[str, float] = {}
        self._step_seconds = [0.0, 0.0, 0.0]
        self._step_sent = 0
        self._step_received = 0
        self._step_scalers: Dict[torch.Tensor, float] = {}
        self._queue: "queue.Queue" = queue.Queue()
        self._worker = threading.Thread(
            target=self._run, name="terngrad-hook-%d" % self.rank, daemon=True
        )
        self._worker.start()

    # DDP pickles the state when it checkpoints the hook; the engine and thread are per process.
    def __getstate__(self):
        raise TypeError("TernGradState holds a process group and a thread; it cannot be pickled")

    def named_scalers(self, model: torch.nn.Module) -> Dict[str, float]:
        """The last step's shared scaler of each of model's parameters, by name."""
        return {
            name: self.scalers[p] for name, p in model.named_parameters() if p in self.scalers
        }

    def _submit(self, bucket: dist.GradBucket, step: int) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        params = list(bucket.parameters())
        self._queue.put(
            (fut, bucket.index(), bucket.buffer(), params, step, bool(bucket.is_last()))
        )
        return fut

    def _run(self) -> None:
        while True:
            fut, index, buffer, params, step, last = self._queue.get()
            try:
                res = self._engine.reduce(index, buffer, [p.numel() for p in params], step)
            except BaseException as e:  # handed to DDP, which raises it in backward
                fut.set_exception(e)
                continue
            self._step_sent += res.sent
            self._step_received += res.received
            for p, s in zip(params, res.scalers):
                self._step_scalers[p] = s
            self.routes[index] = res.route
            self._step_seconds[0] += res.encode_s
            self._step_seconds[1] += res.comm_s
            self._step_seconds[2] += res.reduce_s
            if last:
                self.seconds = dict(zip(("encode", "comm", "reduce"), self._step_seconds))
                self._step_seconds = [0.0, 0.0, 0.0]
                self.bytes_sent, self.bytes_received = self._step_sent, self._step_received
                self.total_bytes_sent += self._step_sent
                self.total_bytes_received += self._step_received
                self.scalers = self._step_scalers
                self._step_sent = self._step_received = 0
                self._step_scalers = {}
            fut.set_result(res.out)


def terngrad_hook(
    state: TernGradState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the TernGrad average of this bucket's gradients over the group."""
    fut = state._submit(bucket, state.step)
    if bucket.is_last():
        state.step += 1
    return fut
