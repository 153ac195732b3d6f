#!/usr/bin/env python
"""bench/linalg_grid.py — the torch API this change added, beside torch (1 thread each):
grid_sample forward + backward (the spatial transformer's sampler, csrc/nn/grid_sample.c),
batched linalg through LAPACK (inv, solve, cholesky, svd, eigh with a backward), and the
per-call cost of a distribution (Normal rsample + log_prob + backward).

    python bench/linalg_grid.py

Each cell is the median over 7 repeats of timeit's per-call time; ratios are within this one
run (cddp time / torch time, < 1: cddp is faster). Results are checked against torch first.
"""
from _timing import fmt, per_call  # noqa: E402  (first: one thread everywhere)

import numpy as np  # noqa: E402

import cddp  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def case(name, shape, make):
    """make(lib) -> a zero-argument callable running the work and returning a checked array."""
    fc, ft = make(cddp), make(torch)
    np.testing.assert_allclose(fc(), ft(), rtol=1e-3, atol=1e-4)
    c, t = per_call(fc), per_call(ft)
    print(f"| {name:34s} | {shape:22s} | {fmt(c):>10s} | {fmt(t):>10s} | {c / t:6.2f}x |")


def grid(lib):
    rng = np.random.default_rng(0)                   # the same inputs for both libraries
    x = lib.tensor(rng.standard_normal((8, 16, 64, 64)).astype(np.float32), requires_grad=True)
    g = lib.tensor(rng.uniform(-1.1, 1.1, (8, 64, 64, 2)).astype(np.float32),
                   requires_grad=True)

    def run():
        x.grad = g.grad = None
        y = lib.nn.functional.grid_sample(x, g, "bilinear", "zeros", align_corners=False)
        y.sum().backward()
        return g.grad.numpy()[0, :4, :4]
    return run


def linalg(op):
    def make(lib):
        rng = np.random.default_rng(0)
        a = rng.standard_normal((64, 32, 32))
        a = lib.tensor(a @ a.transpose(0, 2, 1) + 32 * np.eye(32), requires_grad=True)
        b = lib.tensor(rng.standard_normal((64, 32, 4)))

        def run():
            a.grad = None
            if op == "solve":
                out = lib.linalg.solve(a, b)
            elif op == "svd":
                out = lib.linalg.svdvals(a)
            elif op == "eigh":
                out = lib.linalg.eigvalsh(a)
            else:
                out = getattr(lib.linalg, op)(a)
            (out * out).sum().backward()
            return a.grad.numpy()[0]
        return run
    return make


def normal(lib):
    loc = lib.zeros(16, requires_grad=True)
    scale = lib.ones(16, requires_grad=True)

    def run():
        lib.manual_seed(0)
        loc.grad = scale.grad = None
        d = lib.distributions.Normal(loc, scale)
        d.log_prob(d.rsample()).sum().backward()
        return scale.grad.numpy()
    return run


def main():
    print("# cddp vs torch 2.13 (one thread each); median time per call")
    print()
    print(f"| {'op':34s} | {'shape':22s} | {'cddp':>10s} | {'torch':>10s} | ratio   |")
    print(f"|{'-' * 36}|{'-' * 24}|{'-' * 12}|{'-' * 12}|---------|")
    case("grid_sample bilinear fwd+bwd", "(8,16,64,64) float32", grid)
    for op in ("inv", "solve", "cholesky", "svd", "eigh"):
        case(f"linalg.{op} fwd+bwd", "(64,32,32) float64", linalg(op))
    case("Normal rsample+log_prob+bwd", "16 float32", normal)


if __name__ == "__main__":
    main()
