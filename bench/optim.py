#!/usr/bin/env python
"""bench/optim.py — one optimizer step of cddp beside torch (1 thread each), per optimizer.

    python bench/optim.py           # 4 parameters of 1M float32 elements, 20 steps per timing
    python bench/optim.py --quick   # small sizes, few repeats (a smoke run)
    python bench/optim.py --no-torch

Each optimizer runs from the same start in both libraries; the cell is the median per-step
time over repeats (ms) and the ratio is cddp / torch within this run (on a loaded machine,
compare ratios, not absolute times of two runs). After timing, the parameters of the two
libraries are compared (1e-4 relative), so a fast wrong update fails loudly.
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import glob  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)

import cddp  # noqa: E402

OPTIMIZERS = [
    ("SGD", dict(lr=0.01, momentum=0.9)), ("Adam", dict(lr=1e-3)),
    ("Adadelta", dict()), ("Adagrad", dict()), ("RMSprop", dict(momentum=0.9, centered=True)),
    ("Adamax", dict()), ("NAdam", dict()), ("RAdam", dict()), ("ASGD", dict()),
]


def setup(lib, cls, kw, arrays, grads):
    ps = [lib.tensor(a, requires_grad=True) for a in arrays]
    for p, g in zip(ps, grads):
        p.grad = lib.tensor(g)
    return ps, getattr(lib.optim, cls)(ps, **kw)


def time_steps(opt, steps, repeats):
    opt.step()                                   # state created outside the timing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.step()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(1)
        except ImportError:
            pass
    numel, steps, repeats = (4096, 3, 2) if args.quick else (1 << 20, 20, 5)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(numel).astype(np.float32) for _ in range(4)]
    grads = [rng.standard_normal(numel).astype(np.float32) for _ in range(4)]
    print(f"4 parameters x {numel} float32, ms per step (median of {repeats} x {steps})")
    print(f"{'optimizer':10s} {'cddp':>9s} {'torch':>9s} {'ratio':>7s}")
    for cls, kw in OPTIMIZERS:
        ps, opt = setup(cddp, cls, kw, arrays, grads)
        ours = time_steps(opt, steps, repeats)
        if torch is None:
            print(f"{cls:10s} {ours:9.3f}")
            continue
        tps, topt = setup(torch, cls, kw, arrays, grads)
        theirs = time_steps(topt, steps, repeats)
        for p, tp in zip(ps, tps):
            a, b = p.detach().numpy(), tp.detach().numpy()
            if np.max(np.abs(a - b)) > 1e-4 * max(1.0, np.max(np.abs(b))):
                sys.exit(f"{cls}: cddp and torch parameters differ after the same steps")
        print(f"{cls:10s} {ours:9.3f} {theirs:9.3f} {ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
