"""ResNet-18 training throughput: cddp vs torch, one thread, same model, same data.

    python bench/resnet.py            # the full run (a few minutes on a shared 2-core machine)
    python bench/resnet.py --quick    # smoke run: tiny windows, one replay per layer
    python bench/resnet.py --bn none  # conv-only: BatchNorm2d replaced by Identity on both sides
    python bench/resnet.py --no-ddp   # skip the 2-rank DDP rows

The model is the seed's (examples' seed001_resnet.py: torchvision's resnet18 layout, 6 classes),
on a batch of 64 random 3x32x32 images, with the seed's SGD(lr=0.1, momentum=0.9,
weight_decay=5e-4) and CrossEntropyLoss. BatchNorm2d is cddp's when cddp has it; until then
(or with --bn none) both sides run without it, so the comparison stays like for like.

Throughput: median samples/s over timing windows that alternate between the libraries (a
machine whose speed drifts affects both alike); wall-clock and CPU-time (process_time) rates
from the same windows — on a shared machine the CPU-time rate is the steadier one.

Breakdown: every leaf module of one forward (and each block's residual add) is replayed alone
on the shapes it saw, forward and forward+backward, CPU time, median of repeats; rows sum per
layer type, per training step. "rest" is the step minus every row: the autograd engine,
Python, allocation. Threads: the BLAS/OpenMP thread variables are pinned to 1 before NumPy and
torch load, torch.set_num_threads(1), cddp.set_num_threads(1).

2-rank DDP: the same model wrapped in DistributedDataParallel (defaults: 25 MiB buckets,
broadcast_buffers), batch 64 per rank (each rank its own random images), ranks started as
bench/ddp.py starts them (RANK/WORLD_SIZE/MASTER_* by hand, one thread per rank, gloo for
torch), samples/s over both ranks, the slowest rank's window each time; launches alternate
between the libraries (--rounds), the figure is the median over rounds of each launch's
median window.
"""
import os

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
for _v in THREAD_VARS:
    os.environ[_v] = "1"

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import _calibrate, _libs  # noqa: E402  (bench/train.py: cddp import rule, threads)
from ddp import ddp_rate, launch_ranks  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if glob.glob(os.path.join(_ROOT, "cddp", "_C*.so")):     # the ranks import this checkout too
    os.environ["PYTHONPATH"] = _ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")


def seed_resnet(torch, nn):
    """The seed's model, class for class (seed001_resnet.py: "stand-in for
    torchvision.models.resnet (same layout and key names)"), over `torch`/`nn` of either
    library."""

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, layers=(2, 2, 2, 2), num_classes=1000):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(64, layers[0], 1)
            self.layer2 = self._make_layer(128, layers[1], 2)
            self.layer3 = self._make_layer(256, layers[2], 2)
            self.layer4 = self._make_layer(512, layers[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                           nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet, BasicBlock


class _NoBatchNorm:
    """nn namespace whose BatchNorm2d builds an Identity (and matches no isinstance check)."""

    def __init__(self, nn):
        self._nn = nn

    def __getattr__(self, name):
        if name != "BatchNorm2d":
            return getattr(self._nn, name)
        identity = self._nn.Identity

        class BatchNorm2d:
            def __new__(cls, *args, **kwargs):
                return identity()
        return BatchNorm2d


def build(lib, use_bn, X, Y, wrap=None):
    """(model, step, trace) for one library: step() is one SGD step on the fixed batch;
    wrap(model) (DDP) is what trains when given."""
    nn = lib.nn if use_bn else _NoBatchNorm(lib.nn)
    ResNet, BasicBlock = seed_resnet(lib, nn)
    lib.manual_seed(0)
    model = ResNet((2, 2, 2, 2), 6)
    if wrap is not None:
        model = wrap(model)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    crit = lib.nn.CrossEntropyLoss()
    x, y = lib.tensor(X), lib.tensor(Y)

    def step():
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, step, BasicBlock, opt, crit, x, y


# ---- throughput ----------------------------------------------------------------------------

def throughput(steps, batch, min_time, windows):
    """Median samples/s per library, wall and CPU time, from alternating windows."""
    counts = {k: _calibrate(f, min_time) for k, f in steps.items()}
    wall = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    for _ in range(windows):
        for k, f in steps.items():
            n = counts[k]
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                f()
            wall[k].append(n * batch / (time.perf_counter() - t0))
            cpu[k].append(n * batch / max(time.process_time() - c0, 1e-9))
    return ({k: statistics.median(v) for k, v in wall.items()},
            {k: statistics.median(v) for k, v in cpu.items()})


# ---- breakdown -----------------------------------------------------------------------------

def trace(lib, model, BasicBlock, x):
    """(category, module, input) for every leaf module and (add, None, block output) for every
    residual add, in one forward."""
    seen = []
    wrapped = []
    for m in model.modules():
        leaf = not list(m.children())
        if not leaf and not isinstance(m, BasicBlock):
            continue
        orig = m.forward

        def fwd(*args, _m=m, _orig=orig, **kw):
            out = _orig(*args, **kw)
            if isinstance(_m, BasicBlock):
                seen.append(("add (residual)", None, out.detach()))
            else:
                seen.append((type(_m).__name__, _m, args[0].detach()))
            return out
        m.forward = fwd
        wrapped.append(m)
    with lib.no_grad():
        model(x)
    for m in wrapped:
        del m.forward
    return seen


def _cpu_median(f, reps):
    f()
    ts = []
    for _ in range(reps):
        c0 = time.process_time()
        f()
        ts.append(time.process_time() - c0)
    return statistics.median(ts)


def replay(lib, seen, reps):
    """{category: [count, fwd s, fwd+bwd s]} per step (each entry replayed alone)."""
    rows = {}
    for cat, m, x in seen:
        if cat == "ReLU":                       # in place on a leaf is refused; time out of place
            m = lib.nn.ReLU()
        xi = x.clone().requires_grad_(True)
        other = x.clone()
        if cat == "add (residual)":
            def fwd(xi=xi, other=other):
                return xi + other
        else:
            def fwd(m=m, xi=xi):
                return m(xi)
        g = fwd().detach().clone().normal_()

        def both(fwd=fwd, g=g):
            fwd().backward(g)
        r = rows.setdefault(cat, [0, 0.0, 0.0])
        r[0] += 1
        r[1] += _cpu_median(fwd, reps)
        r[2] += _cpu_median(both, reps)
    return rows


def step_parts(lib, model, opt, crit, x, y, reps):
    """CPU seconds of the loss (fwd+bwd) and of opt.step() (gradients present)."""
    with lib.no_grad():
        out = model(x)
    out = out.detach().requires_grad_(True)

    def loss():
        crit(out, y).backward()

    opt.zero_grad()
    crit(model(x), y).backward()                # every parameter has a gradient now
    return _cpu_median(loss, reps), _cpu_median(opt.step, reps)


def breakdown(name, libs, built, reps):
    per = {}
    for k, lib in libs.items():
        model, step, BasicBlock, opt, crit, x, y = built[k]
        rows = replay(lib, trace(lib, model, BasicBlock, x), reps)
        rows["CrossEntropyLoss"] = [1, 0.0, 0.0]
        lo, sg = step_parts(lib, model, opt, crit, x, y, reps)
        rows["CrossEntropyLoss"][2] = lo
        rows["SGD step (momentum, weight decay)"] = [1, 0.0, sg]
        total = _cpu_median(step, reps)
        rows["rest (autograd engine, Python, allocation)"] = \
            [0, 0.0, total - sum(r[2] for r in rows.values())]
        rows["step"] = [0, 0.0, total]
        per[k] = rows
    keys = list(per["cddp"])
    print(f"\n{name}: per training step, ms of CPU time (fwd = forward, bwd = backward; "
          "time c/t = cddp's time over torch's, lower is faster)")
    head = f"{'layer type':44s} {'n':>3s}"
    for k in libs:
        head += f" {k + ' fwd':>10s} {k + ' bwd':>10s}"
    if "torch" in per:
        head += f" {'time c/t':>11s}"
    print(head)
    for key in keys:
        r = per["cddp"][key]
        line = f"{key:44s} {r[0] if r[0] else '':>3}"
        for k in libs:
            rr = per[k].get(key, [0, 0.0, 0.0])
            fwd, tot = rr[1] * 1e3, rr[2] * 1e3
            line += f" {fwd if rr[1] else float('nan'):10.2f} {tot - fwd:10.2f}"
        if "torch" in per:
            t = per["torch"].get(key, [0, 0.0, 0.0])[2]
            line += f" {r[2] / t:10.2f}x" if t > 0 and r[2] > 0 else f" {'':>11s}"
        print(line.replace("nan", "  -"), flush=True)


# ---- 2-rank DDP ----------------------------------------------------------------------------

def worker(lib_name, use_bn, batch, windows, min_time):
    if lib_name == "torch":             # a cddp rank does not load torch, nor the reverse
        import torch as lib             # (bench/train.py's cddp import stays: it is light)
    else:
        import cddp as lib
    lib.set_num_threads(1)
    dist = lib.distributed
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rng = np.random.default_rng(rank)
    X = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    Y = rng.integers(0, 6, batch)
    step = build(lib, use_bn, X, Y, wrap=lib.nn.parallel.DistributedDataParallel)[1]
    rate = ddp_rate(lib, dist, step, batch, windows, min_time)
    if rank == 0:
        print("RESULT " + json.dumps({"rate": rate}), flush=True)
    dist.destroy_process_group()


def launch(lib, use_bn, batch, nranks, windows, min_time):
    return launch_ranks(__file__, (lib, int(use_bn), batch, windows, min_time), nranks,
                        lib)["rate"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny windows")
    ap.add_argument("--bn", choices=("auto", "none"), default="auto",
                    help="auto: BatchNorm2d when cddp has it; none: both without it")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--no-breakdown", action="store_true")
    ap.add_argument("--no-ddp", action="store_true")
    ap.add_argument("--rounds", type=int, default=None,
                    help="DDP launches per library (alternating; default 3, 1 with --quick)")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        lib, bn, batch, windows, min_time = args.worker
        worker(lib, bn == "1", int(batch), int(windows), float(min_time))
        return
    min_time, windows, reps = (0.05, 2, 1) if args.quick else (1.0, 7, 5)
    libs = _libs()
    use_bn = args.bn == "auto" and hasattr(libs["cddp"].nn, "BatchNorm2d")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    Y = rng.integers(0, 6, args.batch)
    built = {k: build(lib, use_bn, X, Y) for k, lib in libs.items()}
    for k, b in built.items():                  # one step each: a broken op fails here
        loss = float(b[1]().item())
        if not np.isfinite(loss):
            raise SystemExit(f"{k}: non-finite loss {loss}")
    print(f"ResNet-18 (seed001 layout, 6 classes), batch {args.batch} of 3x32x32, "
          f"SGD(momentum=0.9, weight_decay=5e-4), 1 thread, BatchNorm2d: "
          f"{'yes' if use_bn else 'no (Identity on both sides)'}")
    wall, cpu = throughput({k: b[1] for k, b in built.items()}, args.batch, min_time, windows)
    print(f"{'':24s} " + " ".join(f"{k:>10s}" for k in libs) +
          ("   cddp/torch" if "torch" in libs else ""))
    for label, r in (("samples/s (wall)", wall), ("samples/s (CPU time)", cpu)):
        line = f"{label:24s} " + " ".join(f"{r[k]:10.1f}" for k in libs)
        if "torch" in r:
            line += f"   {r['cddp'] / r['torch']:10.2f}x"
        print(line, flush=True)
    if not args.no_ddp:
        rounds = args.rounds or (1 if args.quick else 3)
        runs = {k: [] for k in libs}
        for _ in range(rounds):         # alternating launches: drifting load hits both
            for k in libs:
                runs[k].append(launch(k, use_bn, args.batch, 2, windows, min_time))
        rates = {k: statistics.median(v) for k, v in runs.items()}
        line = f"{'2-rank DDP samples/s':24s} " + " ".join(f"{rates[k]:10.1f}" for k in libs)
        if "torch" in rates:
            line += f"   {rates['cddp'] / rates['torch']:10.2f}x"
        print(line, flush=True)
    if not args.no_breakdown:
        breakdown("Breakdown", libs, built, reps)


if __name__ == "__main__":
    main()
