"""TernGrad for PyTorch DDP, on the terngrad library's kernels and wire format.

    import torch.distributed as dist
    from terngrad_torch import TernGradState, terngrad_hook

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = TernGradState(process_group=None, clip=2.5, pack="two_bit", seed=0,
                          error_feedback=False, parameters=model.parameters())
    ddp.register_comm_hook(state, terngrad_hook)

Per DDP bucket and step, exactly what `terngrad train` does for its own buckets (the paper's
Algorithm 1 with layer-wise scalers, Section 3.2's scaler sharing and Section 3.1's gradient
clipping): every parameter's scaler is c * sigma of its gradient, shared as the maximum over the
ranks; each rank ternarizes its gradient stochastically and packs the codes (2 bits or base 3);
the packed bytes cross the process group by the collective the library's byte cost model picks
(allgather, packed-field allreduce or parameter server); the integer code sums are exact; the
result is scaler / world_size * sum, the averaged gradient DDP hands to the optimizer. The work
is the library's C++ (terngrad/exchange/aggregate.h), reached through the process group; nothing of TernGrad is
reimplemented in Python.

Each parameter has a fixed id (its position in `parameters`, or in the order DDP first hands it to
the hook): its Philox stream of random numbers is (seed, step, rank, id), as a `terngrad train`
layout's slot id, and its error-feedback residual is kept under it. So DDP's bucket rebuild after
the first step (and static_graph's) changes neither; per parameter the result never depends on the
bucket it travels in. fp16 and bf16 buckets (AMP) are aggregated in f32 and handed back in their
own dtype. state_dict() / load_state_dict() save and restore what the next step depends on.

The hook returns at once: a worker thread aggregates the buckets in order while backward goes
on, and DDP waits for the futures at the end of backward.
"""

import os
import queue
import socket
import threading
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _C

__all__ = ["TernGradState", "terngrad_hook", "TernGradError"]

TernGradError = _C.TernGradError


def _node_layout(group: dist.ProcessGroup, ranks_per_node: Optional[int]) -> List[int]:
    """The node of each rank of `group`, nodes numbered 0, 1, ... in order of their lowest rank."""
    world = dist.get_world_size(group)
    if ranks_per_node is not None:
        if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or ranks_per_node < 1:
            raise TernGradError(
                "TernGradState: ranks_per_node must be a positive integer, got %r" % (ranks_per_node,)
            )
        return [r // ranks_per_node for r in range(world)]
    if world == 1:
        return [0]
    env = os.environ
    if env.get("SLURM_NODEID") is not None:
        key = "slurm:%s:%s" % (env.get("SLURM_JOB_ID", ""), env["SLURM_NODEID"])
    elif env.get("GROUP_RANK") is not None:
        key = "torchrun:" + env["GROUP_RANK"]
    else:
        key = "host:" + socket.gethostname()
    keys: List[Any] = [None] * world
    dist.all_gather_object(keys, key, group=group)
    number: Dict[str, int] = {}
    return [number.setdefault(k, len(number)) for k in keys]


class TernGradState:
    """State of the TernGrad communication hook on one rank.

    Args:
        process_group: the group to aggregate over (None: the default group). Gloo for CPU
            tensors, NCCL for CUDA tensors.
        clip: c of the scaler c * sigma (gradient clipping, Section 3.1 of the paper); 0 scales by
            max |g| without clipping.
        pack: "two_bit" (4 codes per byte) or "base3" (5 codes per byte, 1.6 bits).
        seed: seed of the stochastic rounding; every rank must pass the same.
        algorithm: "auto" (the byte cost model's choice, per bucket), "allgather", "sharded",
            "hierarchical", "packed-allreduce" or "ps".
        chunk_bytes: bytes of one rank's codes per collective call (0: the whole bucket).
        min_size: parameters with fewer elements travel as fp32.
        error_feedback: each rank ternarizes its gradient plus its residual and keeps, per
            parameter, what its message lost (the library's compression.error_feedback).
        parameters: the model's parameters (model.parameters()); a parameter's position is its
            id. None: ids in the order DDP first hands parameters to the hook (its first step's
            buckets), the same in every process for the same model and bucket sizes.
        ranks_per_node: G puts rank r on node r // G (for labs and hosts that share a name).
            None: learned, as `terngrad train` learns it, from one key per rank gathered over
            the group: Slurm's node (SLURM_JOB_ID, SLURM_NODEID), else torchrun's node
            (GROUP_RANK), else the host name. The hierarchical route sums codes inside a node
            first, and the cost model weighs the links between nodes; `nodes` holds the layout
            (node of each rank). The numbers never depend on it.

    After each step (once DDP's backward has returned):
        bytes_sent, bytes_received: what this rank put on and took off the wire in the last step
            (all buckets; payload bytes by the collectives' message-passing model);
        total_bytes_sent, total_bytes_received: since construction;
        scalers: {parameter: shared scaler} of the last step; named_scalers(model) by name;
        routes: {bucket index: how it travelled}, e.g. "ternary: ... allgather ...";
        seconds: {"encode", "comm", "reduce"}: the last step's time in each phase (all buckets).

    The tensor a bucket's future holds is reused by that bucket's next step (DDP has copied it
    into the gradients by then); clone it to keep it longer.

    state_dict() / load_state_dict(d): this rank's step counter and residuals (between steps),
    to save beside the model and the optimizer; each rank saves and loads its own.
    """

    _FORMAT = "terngrad_torch.TernGradState"
    _VERSION = 1
    # Options the numbers depend on: a resumed run must use the saved ones (algorithm and
    # chunk_bytes choose a route, every one exact).
    _NUMERIC_OPTIONS = ("clip", "pack", "seed", "min_size", "error_feedback")

    def __init__(
        self,
        process_group: Optional[dist.ProcessGroup] = None,
        clip: float = 2.5,
        pack: str = "two_bit",
        seed: int = 0,
        algorithm: str = "auto",
        chunk_bytes: int = 2 << 20,
        min_size: int = 1,
        error_feedback: bool = False,
        parameters: Optional[Iterable[torch.Tensor]] = None,
        ranks_per_node: Optional[int] = None,
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
        options.error_feedback = bool(error_feedback)
        self.nodes = _node_layout(process_group, ranks_per_node)
        options.node_of = self.nodes
        self.options = options
        self.error_feedback = bool(error_feedback)
        # Parameter -> id, and id -> shape. Fixed by `parameters`, else learned in the first step.
        self._ids: Dict[torch.Tensor, int] = {}
        self._shapes: List[torch.Size] = []
        self._fixed_ids = parameters is not None
        if parameters is not None:
            for p in parameters:
                if p not in self._ids:
                    self._ids[p] = len(self._shapes)
                    self._shapes.append(p.shape)
        # A loaded state's (parameter count, {id: residual shape}), until the ids are known.
        self._unchecked: Optional[Tuple[int, Dict[int, torch.Size]]] = None
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

    def _id(self, p: torch.Tensor) -> int:
        i = self._ids.get(p)
        if i is None:
            if self._fixed_ids:
                raise TernGradError(
                    "TernGradState: DDP handed the hook a parameter of shape %s that is not in "
                    "`parameters` (pass the model's parameters, model.parameters())"
                    % list(p.shape)
                )
            i = self._ids[p] = len(self._shapes)
            self._shapes.append(p.shape)
        return i

    def _submit(self, bucket: dist.GradBucket, step: int) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        params = list(bucket.parameters())
        ids = [self._id(p) for p in params]
        last = bool(bucket.is_last())
        if last and self._unchecked is not None:  # a loaded state, checked once ids are known
            (n, shapes), self._unchecked = self._unchecked, None
            self._check_residuals(n, shapes)
        self._queue.put((fut, bucket.index(), bucket.buffer(), params, ids, step, last))
        return fut

    def state_dict(self) -> Dict[str, Any]:
        """This rank's state, in plain numbers and CPU tensors (torch.save stores it): the step
        counter (the random streams' position: they are keyed by seed, step, rank and parameter
        id), the options the numbers depend on, and with error feedback every parameter's
        residual, {id: tensor of the parameter's shape}. Call it between steps."""
        residuals = {}
        for i, r in self._engine.residuals().items():
            residuals[int(i)] = r.reshape(self._shapes[i]) if i < len(self._shapes) else r
        if self.error_feedback:  # a parameter no bucket has held yet (frozen): residual zero
            for i, shape in enumerate(self._shapes):
                residuals.setdefault(i, torch.zeros(shape))
        return {
            "format": self._FORMAT,
            "version": self._VERSION,
            "step": self.step,
            "rank": self.rank,
            "world_size": self.world_size,
            "options": {k: getattr(self.options, k) for k in self._NUMERIC_OPTIONS},
            "num_parameters": len(self._shapes),
            "residuals": residuals,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a state_dict() saved by the same rank of a run with the same world size and
        options, between steps (before the first one of a resumed run). Raises TernGradError
        naming what does not match (the state is then unchanged)."""
        where = "TernGradState.load_state_dict"
        if not isinstance(state, dict) or state.get("format") != self._FORMAT:
            raise TernGradError("%s: not a TernGradState state_dict" % where)
        if state.get("version") != self._VERSION:
            raise TernGradError(
                "%s: version %r, expected %d" % (where, state.get("version"), self._VERSION)
            )
        if state["world_size"] != self.world_size or state["rank"] != self.rank:
            raise TernGradError(
                "%s: the state is rank %d's of %d ranks, this is rank %d of %d (each rank loads "
                "its own, with the same world size)"
                % (where, state["rank"], state["world_size"], self.rank, self.world_size)
            )
        wrong = [
            "%s: saved %r, this state has %r" % (k, v, getattr(self.options, k))
            for k, v in state["options"].items()
            if getattr(self.options, k) != v
        ]
        if wrong:
            raise TernGradError("%s: options differ: %s" % (where, "; ".join(wrong)))
        residuals = state["residuals"]
        n = state["num_parameters"]
        if self.error_feedback and sorted(residuals) != list(range(n)):
            raise TernGradError(
                "%s: residuals of parameter ids %s, expected 0..%d"
                % (where, sorted(residuals), n - 1)
            )
        shapes = {int(i): torch.Size(r.shape) for i, r in residuals.items()}
        if self._shapes:
            self._check_residuals(n, shapes)
        self._engine.load_residuals(residuals if self.error_feedback else {})
        self._unchecked = None if self._shapes else (n, shapes)
        self.step = int(state["step"])

    def _check_residuals(self, n: int, shapes: Dict[int, torch.Size]) -> None:
        """Raises unless a loaded state fits this model's parameters (count and shapes)."""
        where = "TernGradState.load_state_dict"
        if n != len(self._shapes):
            raise TernGradError(
                "%s: the state has %d parameters, the model %d" % (where, n, len(self._shapes))
            )
        for i, shape in sorted(shapes.items()):
            if shape != self._shapes[i]:
                raise TernGradError(
                    "%s: parameter %d: the saved residual has shape %s, the parameter %s"
                    % (where, i, list(shape), list(self._shapes[i]))
                )

    def _run(self) -> None:
        while True:
            fut, index, buffer, params, ids, step, last = self._queue.get()
            try:
                res = self._engine.reduce(index, buffer, [p.numel() for p in params], ids, step)
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
