#!/usr/bin/env python
"""bench/norm.py — normalization layers and activations, cddp beside torch (1 thread each).

    python bench/norm.py            # ResNet-18's batch-norm shapes (batch 32) and the rest
    python bench/norm.py --quick    # small shapes, few repeats (a smoke run)

Rows: F.batch_norm in training mode (forward alone under no_grad, and forward + backward with
gradients for input, weight and bias) at the activation shapes of ResNet-18's four stages, a
BatchNorm1d (N, C) input, F.group_norm, and activations, exp and (log_)softmax forward +
backward. Each cell is
the median of 9 timeit windows (autorange picks the loop count), cddp's and torch's windows
interleaved; the ratio is torch's time over
cddp's, so > 1 means cddp is faster. Before timing, each row's cddp output is checked against
torch's, so a fast wrong kernel fails loudly. On a shared machine compare ratios, not times.
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import glob  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)

import cddp  # noqa: E402


def seconds_pair(fa, fb, quick):
    """Median per-call times of fa and fb, their timing windows interleaved (a, b, a, b, ...)
    so that load from other processes falls on both alike."""
    ta, tb = timeit.Timer(fa), timeit.Timer(fb)
    na = 1 if quick else ta.autorange()[0]
    nb = 1 if quick else tb.autorange()[0]
    sa, sb = [], []
    for _ in range(3 if quick else 9):
        sa.append(ta.timeit(na) / na)
        sb.append(tb.timeit(nb) / nb)
    return statistics.median(sa), statistics.median(sb)


def batch_norm_row(L, F, shape, backward):
    """A callable running one batch norm step in library L, and its output for the check."""
    rng = np.random.default_rng(0)
    C = shape[1]
    x = L.from_numpy(rng.standard_normal(shape).astype(np.float32))
    w, b = L.ones(C, requires_grad=True), L.zeros(C, requires_grad=True)
    rm, rv = L.zeros(C), L.ones(C)
    g = L.from_numpy(rng.standard_normal(shape).astype(np.float32))
    if backward:
        x.requires_grad_(True)

        def step():
            x.grad = w.grad = b.grad = None
            F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).backward(g)
            return x.grad
        return step

    def fwd():
        with L.no_grad():
            return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    return fwd


def group_norm_row(L, F, shape, groups):
    rng = np.random.default_rng(1)
    x = L.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_(True)
    w, b = L.ones(shape[1], requires_grad=True), L.zeros(shape[1], requires_grad=True)
    g = L.from_numpy(rng.standard_normal(shape).astype(np.float32))

    def step():
        x.grad = None
        F.group_norm(x, groups, w, b).backward(g)
        return x.grad
    return step


# pointwise rows beyond F's activations: the exp family the FMA clone speeds up
ACTS = {"exp": lambda L, F: L.exp, "softmax": lambda L, F: lambda x: F.softmax(x, -1),
        "log_softmax": lambda L, F: lambda x: F.log_softmax(x, -1)}


def act_row(L, F, name, shape):
    rng = np.random.default_rng(2)
    x = L.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_(True)
    g = L.from_numpy(rng.standard_normal(shape).astype(np.float32))
    fn = ACTS[name](L, F) if name in ACTS else getattr(F, name)

    def step():
        x.grad = None
        fn(x).backward(g)
        return x.grad
    return step


def rows(quick):
    n = 4 if quick else 32
    resnet = [(n, 64, 56, 56), (n, 128, 28, 28), (n, 256, 14, 14), (n, 512, 7, 7)]
    if quick:
        resnet = [(n, 64, 16, 16), (n, 512, 7, 7)]
    out = []
    for s in resnet:
        out.append((f"batch_norm fwd {s}", lambda L, F, s=s: batch_norm_row(L, F, s, False)))
        out.append((f"batch_norm fwd+bwd {s}", lambda L, F, s=s: batch_norm_row(L, F, s, True)))
    out.append(("batch_norm fwd+bwd (256, 512)", lambda L, F: batch_norm_row(L, F, (256, 512), True)))
    gs = (n, 64, 28, 28) if not quick else (n, 32, 8, 8)
    out.append((f"group_norm(32) fwd+bwd {gs}", lambda L, F: group_norm_row(L, F, gs, 32)))
    acts = (n, 1 << 14) if not quick else (n, 1 << 10)
    for name in ("gelu", "silu", "leaky_relu", "hardswish", "exp", "sigmoid", "tanh", "softmax",
                 "log_softmax"):
        out.append((f"{name} fwd+bwd {acts}", lambda L, F, name=name: act_row(L, F, name, acts)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch
        import torch.nn.functional as TF
        torch.set_num_threads(1)
    except ImportError:
        print("torch is not installed: nothing to compare with")
        return 0
    import cddp.nn.functional as CF
    body = []
    for label, make in rows(args.quick):
        fc, ft = make(cddp, CF), make(torch, TF)
        got, ref = fc(), ft()
        got = np.asarray(got.detach().numpy())
        if not np.allclose(got, ref.detach().numpy(), rtol=1e-3, atol=1e-3):
            raise SystemExit(f"cddp gives a wrong result for {label}")
        tc, tt = seconds_pair(fc, ft, args.quick)
        body.append((label, f"{tc * 1e3:.3f} ms", f"{tt * 1e3:.3f} ms", f"{tt / tc:.2f}x"))
    header = ("op (float32)", "cddp", "torch", "torch/cddp")
    widths = [max(len(r[i]) for r in [header] + body) for i in range(4)]
    for r in [header, tuple("-" * w for w in widths)] + body:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
