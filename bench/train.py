"""Single-process training throughput: cddp vs torch (one thread), same models, same data.

    python bench/train.py [--quick]

Rows: an MLP 784-1024-1024-10 at batch 64 with SGD(momentum=0.9) (samples/s), and the
tutorials' model Linear(20, 1) + MSELoss at batch 32 (steps/s, where per-step overhead
dominates). Each figure is the median of several timed windows; ratios are cddp / torch from
the same run, their timing windows interleaved. Threads are pinned to one (OpenBLAS for cddp, torch.set_num_threads(1)).
"""
import argparse
import statistics
import time

import glob
import os
import sys

import numpy as np

# An in-place build of this checkout wins over an installed cddp (as in bench/ops.py)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)

import cddp  # noqa: E402


def _libs():
    libs = {"cddp": cddp}
    try:
        import torch
        torch.set_num_threads(1)
        libs["torch"] = torch
    except ImportError:
        pass
    if hasattr(cddp, "set_num_threads"):
        cddp.set_num_threads(1)
    return libs


def _make(lib, sizes, X, Y, lr, momentum, loss):
    lib.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(lib.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(lib.nn.ReLU())
    model = lib.nn.Sequential(*layers)
    opt = lib.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    crit = lib.nn.CrossEntropyLoss() if loss == "ce" else lib.nn.MSELoss()
    x, y = lib.tensor(X), lib.tensor(Y)

    def step():
        opt.zero_grad()
        out = crit(model(x), y)
        out.backward()
        opt.step()
    return step


def _calibrate(step, min_time):
    """Steps per window so that a window lasts at least min_time."""
    step()                                       # warm up
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if time.perf_counter() - t0 >= min_time:
            return n
        n *= 2


def _interleaved(steps, min_time, windows):
    """Median steps/s per library, windows alternating between libraries so that a machine
    whose speed drifts (shared cores, frequency) affects both sides alike."""
    counts = {k: _calibrate(f, min_time) for k, f in steps.items()}
    rates = {k: [] for k in steps}
    for _ in range(windows):
        for k, f in steps.items():
            n = counts[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            rates[k].append(n / (time.perf_counter() - t0))
    return {k: statistics.median(v) for k, v in rates.items()}


def _windows():
    """(min_time, windows) from the command line: --quick is a smoke run (tiny windows)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny windows")
    return (0.05, 3) if ap.parse_args().quick else (0.5, 7)


def _header(title, libs, width, col=12):
    """The first line of a cddp-vs-torch table (the benches that import this module)."""
    return f"{title:{width}s} " + " ".join(f"{k:>{col}s}" for k in libs) + \
        ("   cddp/torch" if "torch" in libs else "")


def _row(name, rates, libs, width, col=12):
    """One row: each library's rate, then cddp / torch from the same run."""
    line = f"{name:{width}s} " + " ".join(f"{rates[k]:{col}.1f}" for k in libs)
    if "torch" in rates:
        line += f"   {rates['cddp'] / rates['torch']:10.2f}x"
    return line


def _table(cases, width, title="case (steps/s)"):
    """Time cases [(name, make(lib) -> step function)] for every library (one thread each,
    windows interleaved) and print the table."""
    min_time, windows = _windows()
    libs = _libs()
    print(_header(title, libs, width, 10))
    for name, make in cases:
        steps = {k: make(lib) for k, lib in libs.items()}
        print(_row(name, _interleaved(steps, min_time, windows), libs, width, 10), flush=True)


def main():
    min_time, windows = _windows()
    libs = _libs()
    rng = np.random.default_rng(0)
    cases = [
        ("MLP 784-1024-1024-10, batch 64 (samples/s)", [784, 1024, 1024, 10], 64,
         rng.standard_normal((64, 784)).astype(np.float32), rng.integers(0, 10, 64), "ce", 64),
        ("Linear(20,1)+MSE, batch 32 (steps/s)", [20, 1], 32,
         rng.standard_normal((32, 20)).astype(np.float32),
         rng.standard_normal((32, 1)).astype(np.float32), "mse", 1),
    ]
    print(_header("case", libs, 46))
    for name, sizes, _, X, Y, loss, per_step in cases:
        steps = {k: _make(lib, sizes, X, Y, 0.01, 0.9, loss) for k, lib in libs.items()}
        rates = {k: r * per_step for k, r in _interleaved(steps, min_time, windows).items()}
        print(_row(name, rates, libs, 46), flush=True)


if __name__ == "__main__":
    main()
