"""TernGrad as a pure-PyTorch DDP communication hook, the way GRACE implements it: the race's
second reference beside terngrad_torch (bench/race.sh, method ddp-grace).

GRACE (Xu et al., "GRACE: A Compressed Communication Framework for Distributed Machine
Learning", ICDCS 2021; github.com/sands-lab/grace) compresses each tensor on its own with
TernGrad's rule and moves the result with its Allgather communicator. Written here from that
description, not from its code:

  per parameter tensor g of the bucket (its own scaler, no sharing across workers):
    c = 2.5 * std(g); g = clamp(g, -c, c); s = max |g|
    code = sign(g) where a uniform draw in [0, s) is below |g|, else 0    (an int8 per element)
  allgather every rank's int8 codes of the bucket and its float scalers;
  average = (1 / P) * sum over ranks r of code_r * s_r                    (a float sum)

What it lacks next to terngrad_torch, and what the race measures: 8 bits per element on the wire
instead of 2 (or 1.6), a scaler per worker instead of a shared one (so the sum is a float sum of
differently scaled codes, not an exact integer sum), and no choice of collective.

The scalers' allgather is synchronous (a few floats); the codes' allgather runs asynchronously
and the decode is chained on its future, as DDP's own hooks do.
"""

import torch
import torch.distributed as dist


class GraceTernGradState:
    def __init__(self, process_group=None, clip=2.5, seed=0):
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.clip = clip
        self.generator = torch.Generator().manual_seed(seed + dist.get_rank(process_group))


def _compress(g, clip, generator):
    std = torch.sqrt(torch.mean((g - g.mean()) ** 2))
    c = clip * float(std)
    g = torch.clamp(g, -c, c)
    s = g.abs().max()
    draw = torch.rand(g.shape, generator=generator) * s
    code = torch.where(draw < g.abs(), torch.sign(g), torch.zeros_like(g))
    return code.to(torch.int8), s.reshape(1)


def grace_terngrad_hook(
    state: GraceTernGradState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    numels = [p.numel() for p in bucket.parameters()]
    codes, scalers, offset = [], [], 0
    for n in numels:
        code, s = _compress(buf[offset:offset + n], state.clip, state.generator)
        codes.append(code)
        scalers.append(s)
        offset += n
    codes = torch.cat(codes)
    scalers = torch.cat(scalers)
    p = state.world_size
    all_scalers = [torch.empty_like(scalers) for _ in range(p)]
    dist.all_gather(all_scalers, scalers, group=state.process_group)
    all_codes = [torch.empty_like(codes) for _ in range(p)]
    work = dist.all_gather(all_codes, codes, group=state.process_group, async_op=True)

    def decode(fut):
        out = torch.zeros_like(buf)
        for r in range(p):
            start = 0
            for i, n in enumerate(numels):
                out[start:start + n] += all_codes[r][start:start + n].to(buf.dtype) * all_scalers[r][i]
                start += n
        return out.div_(p)

    return work.get_future().then(decode)
