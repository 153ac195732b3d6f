#!/usr/bin/env python
"""bench/spatial3d.py — the volumetric layers and CTC loss beside torch (1 thread each):
conv3d, conv_transpose3d and trilinear interpolate (composed of the 2-D kernels,
cddp/nn/_functional_3d.py), a 3-D max pool, and ctc_loss (csrc/nn/ctc.c), each forward +
backward; and the cost of a view op, which now remembers its base (csrc/autograd/view.c).
Then interpolate's 2-D separable modes (cddp/nn/_functional_resample.py): bicubic up,
antialiased bilinear / bicubic down, and area (adaptive average pooling).

    python bench/spatial3d.py

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
    np.testing.assert_allclose(fc(), ft(), rtol=1e-3, atol=1e-3)
    c, t = per_call(fc), per_call(ft)
    print(f"| {name:30s} | {shape:30s} | {fmt(c):>10s} | {fmt(t):>10s} | {c / t:6.2f}x |")


def arr(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def fwd_bwd(f, *shapes):
    """f(lib, *tensors) -> output; the run returns the first input's gradient."""
    def make(lib):
        rng = np.random.default_rng(0)                # the same inputs for both libraries
        ts = [lib.tensor(arr(rng, *s), requires_grad=True) for s in shapes]

        def run():
            for t in ts:
                t.grad = None
            f(lib, *ts).square().sum().backward()
            return ts[0].grad.numpy().ravel()[:64]
        return run
    return make


def ctc(lib):
    rng = np.random.default_rng(0)
    T, N, C, S = 50, 16, 20, 12
    x = lib.tensor(arr(rng, T, N, C), requires_grad=True)
    tg = lib.tensor(rng.integers(1, C, (N, S)))
    il = lib.tensor(np.full(N, T))
    tl = lib.tensor(rng.integers(S // 2, S + 1, N))

    def run():
        x.grad = None
        lp = x.log_softmax(2)
        lib.nn.functional.ctc_loss(lp, tg, il, tl).backward()
        return x.grad.numpy().ravel()[:64]
    return run


def view_op(lib):
    x = lib.ones(64, 64)

    def run():
        for _ in range(100):
            x[3]
        return np.zeros(1)
    return run


def main():
    F = "nn.functional"
    print(f"cddp {cddp.__version__}, torch {torch.__version__}, 1 thread each\n")
    print(f"| {'op (forward + backward)':30s} | {'shape':30s} | {'cddp':>10s} | {'torch':>10s} "
          f"| {'ratio':>7s} |")
    print(f"|{'-' * 32}|{'-' * 32}|{'-' * 12}|{'-' * 12}|{'-' * 9}|")
    case("conv3d 3x3x3, padding 1", "(4,16,16,32,32)x(32,16,3,3,3)",
         fwd_bwd(lambda L, x, w: getattr(L, "nn").functional.conv3d(x, w, padding=1),
                 (4, 16, 16, 32, 32), (32, 16, 3, 3, 3)))
    case("conv_transpose3d k2 s2", "(2,32,8,16,16)x(32,16,2,2,2)",
         fwd_bwd(lambda L, x, w: L.nn.functional.conv_transpose3d(x, w, stride=2),
                 (2, 32, 8, 16, 16), (32, 16, 2, 2, 2)))
    case("interpolate trilinear x2", "(2,16,8,16,16)",
         fwd_bwd(lambda L, x: L.nn.functional.interpolate(x, scale_factor=2, mode="trilinear"),
                 (2, 16, 8, 16, 16)))
    case("max_pool3d 2", "(4,16,16,32,32)",
         fwd_bwd(lambda L, x: L.nn.functional.max_pool3d(x, 2), (4, 16, 16, 32, 32)))
    case("ctc_loss (log_softmax input)", "T50 N16 C20 S<=12", ctc)
    for name, kw in (("interpolate bicubic x2", dict(scale_factor=2, mode="bicubic")),
                     ("interpolate bilinear x0.5 aa", dict(scale_factor=0.5, mode="bilinear",
                                                           antialias=True)),
                     ("interpolate bicubic x0.5 aa", dict(scale_factor=0.5, mode="bicubic",
                                                          antialias=True)),
                     ("interpolate area to 24x24", dict(size=(24, 24), mode="area"))):
        case(name, "(8,32,64,64)",
             fwd_bwd(lambda L, x, kw=kw: L.nn.functional.interpolate(x, **kw), (8, 32, 64, 64)))
    case("100 x[3] (view op, no grad)", "(64,64)", view_op)
    del F


if __name__ == "__main__":
    main()
