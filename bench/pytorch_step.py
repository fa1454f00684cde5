#!/usr/bin/env python3
"""PyTorch eager reference for bench_train: the time of one full training step of the paper's nets.

What it measures
----------------
The wall-clock time of one training iteration of LeNet (batch 64), CifarNet (batch 128) and the
two-column AlexNet (batch 128), built exactly as the TernGrad reference code
(github.com/wenwei202/terngrad) and as nn/nets/{lenet,cifarnet,alexnet}.cpp build them, and, with
--net, GoogLeNet (slim inception_v1, batch 128) and VGG-A (batch 64) as nn/nets/googlenet.cpp and
vgg_a.cpp build them (parameter counts asserted; weight decay on every conv (and fc) weight):

    forward (training mode: BN batch statistics, dropout 0.5 on AlexNet fc6/fc7)
    + softmax cross-entropy (mean over the batch)
    + backward
    + grad += wd * w on the decayed weight tensors (SGD weight_decay, per parameter group)
    + momentum-0.9 SGD step (torch.optim.SGD, dampening 0, not Nesterov: a = m*a + g; w -= lr*a,
      which is TF's MomentumOptimizer and our nn/optim momentum)
    + EMA of all parameters with TF's warm-up rule d = min(0.9999, (1+t)/(10+t))
    + the loss added to a device scalar (bench_train's loss_sum; no host sync).

How it matches bench_train (bench/bench_train.cpp, train/step.h)
---------------------------------------------------------------
* Same nets, same parameter counts (asserted at start-up: 1,256,080 / 1,068,298 / 60,969,321),
  NCHW, fp32. The same decayed tensors: LeNet all four weights, CifarNet fc3/fc4 weights only,
  AlexNet every conv and fc weight; the same wd (5e-4, what bench_train passes), lr 0.01.
* TF SAME padding reproduced exactly: symmetric conv padding where TF's is symmetric (5x5 and 3x3
  stride 1), F.pad with TF's asymmetric split elsewhere (AlexNet conv1 11x11/4 on 224: 3 before,
  4 after -> 56; CifarNet 3x3/2 SAME max pools on 24 and 12: 0 before, 1 after, padded with -inf
  -> 12 and 6). AlexNet pools are VALID (56->27->13->6).
* LRN: torch.nn.LocalResponseNorm with TF's (depth_radius r, bias k, alpha a, beta b) converted to
  size 2r+1, alpha a*(2r+1), beta b, k (TF does not divide alpha by the window, torch does).
  AlexNet's LRN is per column: the 2x48 (2x128) channel tensor is viewed as [2N, 48, H, W] so the
  window never crosses the column boundary.
* BN (AlexNet convs): offset (beta) only: F.batch_norm with a frozen all-ones weight buffer
  (keeps cuDNN's fused path), eps 0.001, momentum 1-0.9997, no conv bias.
* AlexNet's two columns: conv1 is one 96-filter conv (two 48-filter columns on the full image are
  the same math), conv2/conv4/conv5 are groups=2 convs (each column on its own half), conv3 is one
  384-filter conv on the 256-channel concat (each column sees the whole concat).
* Differences: the synthetic batch is already on the device (bench_train's step_ms includes the
  host->device copy of the batch; compare against its step_ms - transfer_ms, or note it);
  the optimizer runs over per-tensor parameters (torch's foreach kernels on CUDA, or --fused)
  where ours runs over one flat arena.
* Timing: 10 warm-up steps, then steps until >= --seconds have elapsed (and >= 5 steps), each
  timed with torch.cuda.synchronize() after it; median / p10 / p90 by the rule of bench_train
  (bench/harness.h percentile(): the sorted sample at index round(p (n - 1))).
* Precision: by default TF32 is OFF for both cuDNN and cuBLAS (torch enables it for cuDNN convs
  by default); our engine runs strict fp32 (CUBLAS_DEFAULT_MATH). --tf32 turns it on to show
  PyTorch's out-of-the-box numbers. torch.backends.cudnn.benchmark = True on CUDA.

Output: one JSON line per net on stdout:
  {"kind": "pytorch_step", "net": ..., "device": ..., "batch": ..., "step_ms": ..., "p10_ms": ...,
   "p90_ms": ..., "images_per_sec": ..., "steps": ..., "params": ..., "torch": ..., "gpu": ...,
   "cudnn_benchmark": ..., "tf32": ..., "threads": ..., "optimizer": ..., "compiled": ...}

How to run
----------
  CPU (same machine as bench_train --device cpu):
      python3 bench/pytorch_step.py --device cpu --threads 2 --seconds 3
  GPU machine (torch with CUDA installed), next to build/bench/bench_train --device cuda:
      python3 bench/pytorch_step.py                      # lenet, cifarnet, alexnet on cuda
      python3 bench/pytorch_step.py --net alexnet --seconds 5
      python3 bench/pytorch_step.py --tf32 --fused       # PyTorch's fastest eager settings
      python3 bench/pytorch_step.py --compile            # torch.compile'd forward+backward
"""

import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECTED_PARAMS = {"lenet": 1_256_080, "cifarnet": 1_068_298, "alexnet": 60_969_321,
                   "googlenet": 6_618_649, "vgg_a": 132_863_336}
DEFAULT_BATCH = {"lenet": 64, "cifarnet": 128, "alexnet": 128, "googlenet": 128, "vgg_a": 64}


def tf_same_pad(size, k, s):
    """TF SAME padding (before, after) for one spatial dim of `size` with kernel k, stride s."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def tf_lrn(depth_radius, bias, alpha, beta):
    """torch LocalResponseNorm computing TF's in / (bias + alpha * sum_{|d'-d|<=r} in^2)^beta."""
    size = 2 * depth_radius + 1
    return nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=bias)


def trunc_normal_(t, std):
    nn.init.trunc_normal_(t, mean=0.0, std=std, a=-2 * std, b=2 * std)


def conv(in_c, out_c, k, std, bias=0.0, padding=0, stride=1, groups=1, with_bias=True):
    c = nn.Conv2d(in_c, out_c, k, stride=stride, padding=padding, groups=groups, bias=with_bias)
    trunc_normal_(c.weight, std)
    if with_bias:
        nn.init.constant_(c.bias, bias)
    return c


def dense(in_f, out_f, std, bias=0.0):
    d = nn.Linear(in_f, out_f)
    trunc_normal_(d.weight, std)
    nn.init.constant_(d.bias, bias)
    return d


class SameMaxPool(nn.Module):
    """TF SAME max pool: pads with -inf by TF's (before, after) split, then a VALID max pool."""

    def __init__(self, k, s):
        super().__init__()
        self.k, self.s = k, s

    def forward(self, x):
        ph = tf_same_pad(x.shape[2], self.k, self.s)
        pw = tf_same_pad(x.shape[3], self.k, self.s)
        if any(ph) or any(pw):
            x = F.pad(x, (pw[0], pw[1], ph[0], ph[1]), value=-math.inf)
        return F.max_pool2d(x, self.k, self.s)


class BNOffset(nn.Module):
    """Batch norm with a learnable offset (beta) only: TF slim batch_norm(scale=False)."""

    def __init__(self, channels, decay=0.9997, eps=1e-3):
        super().__init__()
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("gamma", torch.ones(channels))  # frozen: keeps cuDNN's fused BN
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.momentum, self.eps = 1.0 - decay, eps

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.gamma, self.beta,
                            training=self.training, momentum=self.momentum, eps=self.eps)


class LeNet(nn.Module):
    num_classes, in_channels, image_size = 10, 1, 28

    def __init__(self):
        super().__init__()
        self.conv1 = conv(1, 20, 5, 0.05, padding=2)
        self.conv2 = conv(20, 50, 5, 0.05, padding=2)
        self.fc3 = dense(7 * 7 * 50, 500, 0.048)
        self.logits = dense(500, 10, 0.0767)
        self.pool = SameMaxPool(2, 2)  # 28 -> 14 -> 7, no padding needed
        self.decayed = [self.conv1.weight, self.conv2.weight, self.fc3.weight, self.logits.weight]

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = F.relu(self.fc3(torch.flatten(x, 1)))
        return self.logits(x)


class CifarNet(nn.Module):
    num_classes, in_channels, image_size = 10, 3, 24

    def __init__(self):
        super().__init__()
        self.conv1 = conv(3, 64, 5, 0.05, bias=0.0, padding=2)
        self.conv2 = conv(64, 64, 5, 0.05, bias=0.1, padding=2)
        self.fc3 = dense(6 * 6 * 64, 384, 0.04, bias=0.1)
        self.fc4 = dense(384, 192, 0.04, bias=0.1)
        self.logits = dense(192, 10, 1.0 / 192, bias=0.0)
        self.pool = SameMaxPool(3, 2)  # 24 -> 12 -> 6, pads 0 before / 1 after
        self.lrn = tf_lrn(4, 1.0, 0.001 / 9.0, 0.75)
        self.decayed = [self.fc3.weight, self.fc4.weight]

    def forward(self, x):
        x = self.lrn(self.pool(F.relu(self.conv1(x))))  # conv1 -> pool1 -> lrn1
        x = self.pool(self.lrn(F.relu(self.conv2(x))))  # conv2 -> lrn2 -> pool2
        x = F.relu(self.fc3(torch.flatten(x, 1)))
        x = F.relu(self.fc4(x))
        return self.logits(x)


class AlexNet(nn.Module):
    num_classes, in_channels, image_size = 1001, 3, 224

    def __init__(self, dropout=0.5):
        super().__init__()
        s = 0.01
        self.conv1 = conv(3, 96, 11, s, stride=4, with_bias=False)  # 2 columns x 48, full image
        self.bn1 = BNOffset(96)
        self.conv2 = conv(96, 256, 5, s, padding=2, groups=2, with_bias=False)
        self.bn2 = BNOffset(256)
        self.conv3 = conv(256, 384, 3, s, padding=1, with_bias=False)  # each column on the concat
        self.bn3 = BNOffset(384)
        self.conv4 = conv(384, 384, 3, s, padding=1, groups=2, with_bias=False)
        self.bn4 = BNOffset(384)
        self.conv5 = conv(384, 256, 3, s, padding=1, groups=2, with_bias=False)
        self.bn5 = BNOffset(256)
        self.fc6 = dense(6 * 6 * 256, 4096, 0.005, bias=0.1)
        self.fc7 = dense(4096, 4096, 0.005, bias=0.1)
        self.logits = dense(4096, 1001, 0.01, bias=0.0)
        self.lrn = tf_lrn(2, 2.0, 1e-4, 0.75)
        self.dropout = dropout
        self.conv1_pad = tf_same_pad(224, 11, 4)  # (3, 4): 224 -> 56
        self.decayed = [m.weight for m in (self.conv1, self.conv2, self.conv3, self.conv4,
                                           self.conv5, self.fc6, self.fc7, self.logits)]

    def column_lrn(self, x):
        # LRN within each column: [N, 2C, H, W] viewed as [2N, C, H, W] (no copy).
        n, c, h, w = x.shape
        return self.lrn(x.view(n * 2, c // 2, h, w)).view(n, c, h, w)

    def forward(self, x):
        b, a = self.conv1_pad
        x = F.pad(x, (b, a, b, a))
        x = F.max_pool2d(self.column_lrn(F.relu(self.bn1(self.conv1(x)))), 3, 2)  # 56 -> 27
        x = F.max_pool2d(self.column_lrn(F.relu(self.bn2(self.conv2(x)))), 3, 2)  # 27 -> 13
        x = F.relu(self.bn3(self.conv3(x)))
        x = F.relu(self.bn4(self.conv4(x)))
        x = F.max_pool2d(F.relu(self.bn5(self.conv5(x))), 3, 2)  # 13 -> 6
        x = torch.flatten(x, 1)
        x = F.dropout(F.relu(self.fc6(x)), self.dropout, self.training)
        x = F.dropout(F.relu(self.fc7(x)), self.dropout, self.training)
        return self.logits(x)


class ConvBN(nn.Module):
    """slim conv2d in inception_arg_scope: no bias, BN offset only, ReLU; TF SAME padding."""

    def __init__(self, in_c, out_c, k, stride=1):
        super().__init__()
        self.k, self.stride = k, stride
        self.conv = conv(in_c, out_c, k, 0.01, stride=stride, with_bias=False)
        self.bn = BNOffset(out_c)

    def forward(self, x):
        ph = tf_same_pad(x.shape[2], self.k, self.stride)
        pw = tf_same_pad(x.shape[3], self.k, self.stride)
        if ph[0] == ph[1] and pw[0] == pw[1]:
            y = F.conv2d(x, self.conv.weight, None, self.stride, (ph[0], pw[0]))
        else:
            y = F.conv2d(F.pad(x, (pw[0], pw[1], ph[0], ph[1])), self.conv.weight, None, self.stride)
        return F.relu(self.bn(y))


class Mixed(nn.Module):
    """Inception v1 block: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 | max 3x3/1 -> 1x1, concatenated."""

    def __init__(self, in_c, b0, b1r, b1, b2r, b2, b3):
        super().__init__()
        self.b0 = ConvBN(in_c, b0, 1)
        self.b1 = nn.Sequential(ConvBN(in_c, b1r, 1), ConvBN(b1r, b1, 3))
        self.b2 = nn.Sequential(ConvBN(in_c, b2r, 1), ConvBN(b2r, b2, 3))
        self.b3 = ConvBN(in_c, b3, 1)
        self.pool = SameMaxPool(3, 1)
        self.out = b0 + b1 + b2 + b3

    def forward(self, x):
        return torch.cat([self.b0(x), self.b1(x), self.b2(x), self.b3(self.pool(x))], 1)


class GoogLeNet(nn.Module):
    """slim inception_v1 (nn/nets/googlenet.cpp): BN convs, no auxiliary heads, 1001 classes."""

    num_classes, in_channels, image_size = 1001, 3, 224
    MIXED = [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64),
             (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64),
             (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
             (256, 160, 320, 32, 128, 128), (256, 160, 320, 32, 128, 128),
             (384, 192, 384, 48, 128, 128)]

    def __init__(self, dropout=0.2):
        super().__init__()
        self.conv1a = ConvBN(3, 64, 7, 2)
        self.conv2b = ConvBN(64, 64, 1)
        self.conv2c = ConvBN(64, 192, 3)
        blocks, c = [], 192
        for spec in self.MIXED:
            blocks.append(Mixed(c, *spec))
            c = blocks[-1].out
        self.mixed = nn.ModuleList(blocks)
        self.logits = nn.Conv2d(c, 1001, 1)
        trunc_normal_(self.logits.weight, math.sqrt(1.3 * 2.0 / c))
        nn.init.zeros_(self.logits.bias)
        self.pool3, self.pool2 = SameMaxPool(3, 2), SameMaxPool(2, 2)
        self.dropout = dropout
        self.decayed = [m.weight for m in self.modules() if isinstance(m, nn.Conv2d)]

    def forward(self, x):
        x = self.pool3(self.conv1a(x))
        x = self.pool3(self.conv2c(self.conv2b(x)))
        for i, block in enumerate(self.mixed):
            if i == 2:
                x = self.pool3(x)
            if i == 7:
                x = self.pool2(x)
            x = block(x)
        x = F.dropout(F.avg_pool2d(x, x.shape[-1]), self.dropout, self.training)
        return torch.flatten(self.logits(x), 1)


class VggA(nn.Module):
    """VGG-A as slim's vgg_a without BN (nn/nets/vgg_a.cpp): 3x3 convs with bias, 1000 classes."""

    num_classes, in_channels, image_size = 1000, 3, 224

    def __init__(self, dropout=0.5):
        super().__init__()
        plan = [[64], [128], [256, 256], [512, 512], [512, 512]]
        stages, c = [], 3
        for widths in plan:
            layers = []
            for w in widths:
                cv = nn.Conv2d(c, w, 3, padding=1)
                nn.init.xavier_uniform_(cv.weight)
                nn.init.zeros_(cv.bias)
                layers += [cv, nn.ReLU(inplace=True)]
                c = w
            layers.append(nn.MaxPool2d(2, 2))
            stages.append(nn.Sequential(*layers))
        self.features = nn.Sequential(*stages)
        self.fcs = nn.ModuleList([nn.Linear(512 * 7 * 7, 4096), nn.Linear(4096, 4096),
                                  nn.Linear(4096, 1000)])
        for f in self.fcs:
            nn.init.xavier_uniform_(f.weight)
            nn.init.zeros_(f.bias)
        self.dropout = dropout
        self.decayed = [m.weight for m in self.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]

    def forward(self, x):
        x = torch.flatten(self.features(x), 1)
        x = F.dropout(F.relu(self.fcs[0](x)), self.dropout, self.training)
        x = F.dropout(F.relu(self.fcs[1](x)), self.dropout, self.training)
        return self.fcs[2](x)


NETS = {"lenet": LeNet, "cifarnet": CifarNet, "alexnet": AlexNet, "googlenet": GoogLeNet,
        "vgg_a": VggA}


def count_params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def check_param_counts(names):
    """Asserts the nets have our nets' parameter counts (built on CPU)."""
    for name in names:
        n = count_params(NETS[name]())
        assert n == EXPECTED_PARAMS[name], f"{name}: {n} parameters, expected {EXPECTED_PARAMS[name]}"


def check_shapes():
    """The spatial sizes TF SAME/VALID give: CifarNet 24->12->6, AlexNet 56->27->13->6."""
    x = torch.zeros(1, 64, 24, 24)
    pool = SameMaxPool(3, 2)
    assert pool(x).shape[-1] == 12 and pool(pool(x)).shape[-1] == 6
    x = torch.zeros(1, 32, 28, 28)
    pool = SameMaxPool(2, 2)
    assert pool(x).shape[-1] == 14 and pool(pool(x)).shape[-1] == 7
    b, a = tf_same_pad(224, 11, 4)
    assert (b, a) == (3, 4) and (224 + b + a - 11) // 4 + 1 == 56


class Ema:
    """shadow <- d*shadow + (1-d)*param, d = min(decay, (1+t)/(10+t)) (TF's num_updates rule)."""

    def __init__(self, params, decay=0.9999):
        self.params = list(params)
        self.shadow = [p.detach().clone() for p in self.params]
        self.decay = decay

    @torch.no_grad()
    def update(self, t):
        d = min(self.decay, (1.0 + t) / (10.0 + t))
        params = [p.detach() for p in self.params]
        if hasattr(torch, "_foreach_lerp_"):
            torch._foreach_lerp_(self.shadow, params, 1.0 - d)
        else:
            torch._foreach_mul_(self.shadow, d)
            torch._foreach_add_(self.shadow, params, alpha=1.0 - d)


def make_optimizer(model, lr, wd, fused):
    decayed_ids = {id(p) for p in model.decayed}
    decayed = [p for p in model.parameters() if id(p) in decayed_ids]
    rest = [p for p in model.parameters() if id(p) not in decayed_ids]
    groups = [{"params": decayed, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
    kwargs = {"lr": lr, "momentum": 0.9, "dampening": 0.0, "nesterov": False}
    if fused:
        kwargs["fused"] = True
    return torch.optim.SGD(groups, **kwargs), ("sgd-fused" if fused else "sgd-default")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_net(name, device, batch, seconds, args):
    torch.manual_seed(123)
    model = NETS[name]().to(device)
    model.train()
    params = count_params(model)
    opt, opt_name = make_optimizer(model, args.lr, args.wd, args.fused)
    ema = Ema(model.parameters(), 0.9999)
    # Compiled forward (and its backward graph); parameters are shared with `model`, so the
    # optimizer and EMA above act on the same tensors.
    forward = torch.compile(model) if args.compile else model

    # One synthetic batch, already on the device (as bench_train's single reused batch).
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(batch, model.in_channels, model.image_size, model.image_size, generator=gen)
    x = x.to(device)
    y = (torch.arange(batch) % model.num_classes).to(device)
    loss_sum = torch.zeros((), device=device)

    it = 0

    def step():
        nonlocal it
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()  # grad += wd*w (decayed group), a = 0.9*a + g, w -= lr*a
        ema.update(it)
        loss_sum.add_(loss.detach())
        it += 1

    for _ in range(10):  # warm-up: allocator, cuDNN autotuning, thread pools, compilation
        step()
    sync(device)

    times = []
    elapsed = 0.0
    while elapsed < seconds or len(times) < 5:
        t0 = time.perf_counter()
        step()
        sync(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        elapsed += dt
    loss_final = float(loss_sum)  # one host sync at the end; also checks the run stayed finite
    assert math.isfinite(loss_final), f"{name}: non-finite loss"

    s = sorted(times)
    n = len(s)

    def pct(p):  # bench/harness.h percentile(): nearest rank, index round(p (n - 1))
        return s[int(p * (n - 1) + 0.5)]

    step_s = pct(0.5)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    rec = {
        "kind": "pytorch_step", "net": name, "device": str(device), "batch": batch,
        "step_ms": step_s * 1e3, "p10_ms": pct(0.1) * 1e3, "p90_ms": pct(0.9) * 1e3,
        "images_per_sec": batch / step_s, "steps": n, "params": params,
        "torch": torch.__version__, "gpu": gpu,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if device.type == "cuda" else False,
        "tf32": bool(args.tf32) if device.type == "cuda" else False,
        "threads": torch.get_num_threads(), "optimizer": opt_name,
        "compiled": bool(args.compile),
        "mean_loss": loss_final / it,
    }
    print(json.dumps(rec), flush=True)
    print(f"{name} batch {batch} on {device}: {step_s * 1e3:.2f} ms/step "
          f"(p10 {rec['p10_ms']:.2f}, p90 {rec['p90_ms']:.2f}), {batch / step_s:.0f} img/s, "
          f"{n} steps", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--net", choices=sorted(NETS), action="append",
                   help="repeatable; default lenet+cifarnet+alexnet on cuda, lenet+cifarnet on cpu "
                        "(googlenet, vgg_a only when named)")
    p.add_argument("--batch", type=int, default=0, help="override the per-net default batch")
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per net (>= 5 steps)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch default)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--wd", type=float, default=5e-4, help="bench_train's weight decay")
    p.add_argument("--tf32", action="store_true", help="allow TF32 in cuDNN/cuBLAS (default off)")
    p.add_argument("--fused", action="store_true", help="torch.optim.SGD(fused=True)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (forward+backward); the optimizer stays eager")
    args = p.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32

    nets = args.net or (["lenet", "cifarnet", "alexnet"] if device.type == "cuda"
                        else ["lenet", "cifarnet"])
    check_param_counts(nets)
    check_shapes()
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
          + f", threads {torch.get_num_threads()}", file=sys.stderr)
    for name in nets:
        run_net(name, device, args.batch or DEFAULT_BATCH[name], args.seconds, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
