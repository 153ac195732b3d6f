#!/usr/bin/env python
"""bench/double_backward.py — higher-order gradients beside torch (1 thread each): what
create_graph=True costs with cddp's Python walk over double-backward formulas
(cddp/autograd/_higher) against torch's C++ engine, on the programs people run:

    wgan-gp mlp      a WGAN-GP critic step (gradient penalty), MLP critic 64-256-256-1, batch 64
    wgan-gp conv     the same with a conv critic (3x32x32 -> 3 convs + linear), batch 16
    maml mlp         one MAML meta-gradient: inner SGD step with create_graph, outer loss
    hvp mlp          a Hessian-vector product of an MLP loss (autograd.functional.hvp)

    python bench/double_backward.py

Each cell is the median over 7 repeats of timeit's per-call time; ratios are within this one
run (cddp time / torch time, < 1: cddp is faster). Results are checked against torch first.
"""
from _timing import fmt, per_call  # noqa: E402  (first: one thread everywhere)

import numpy as np  # noqa: E402

import cddp  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def params(rng, sizes):
    out = []
    for a, b in zip(sizes, sizes[1:]):
        out += [(rng.standard_normal((b, a)) / np.sqrt(a)).astype(np.float32),
                np.zeros(b, np.float32)]
    return out


def mlp(F, p, x, act):
    for k in range(0, len(p), 2):
        x = F.linear(x, p[k], p[k + 1])
        if k + 2 < len(p):
            x = act(x)
    return x


def gp_step(lib, critic, p, real, fake, alpha):
    """One WGAN-GP critic step on parameters p: the penalty's gradient with create_graph,
    then backward of the penalised loss; the run returns a slice of the first gradient."""
    def run():
        for t in p:
            t.grad = None
        xh = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        d = critic(xh)
        (g,) = lib.autograd.grad(d, xh, lib.ones_like(d), create_graph=True)
        gp = ((g.reshape(g.shape[0], -1).norm(2, dim=1) - 1) ** 2).mean()
        (critic(fake).mean() - critic(real).mean() + 10 * gp).backward()
        return p[0].grad.numpy().ravel()[:64]
    return run


def wgan_mlp(lib):
    rng = np.random.default_rng(0)
    F = lib.nn.functional
    p = [lib.tensor(a, requires_grad=True) for a in params(rng, [64, 256, 256, 1])]
    real = lib.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    fake = lib.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    alpha = lib.tensor(rng.uniform(size=(64, 1)).astype(np.float32))

    return gp_step(lib, lambda x: mlp(F, p, x, lambda h: F.leaky_relu(h, 0.2)), p, real,
                   fake, alpha)


def wgan_conv(lib):
    rng = np.random.default_rng(1)
    F = lib.nn.functional
    shapes = [(16, 3, 3, 3), (16,), (32, 16, 3, 3), (32,), (32, 32, 3, 3), (32,), (1, 32 * 16),
              (1,)]
    p = [lib.tensor((rng.standard_normal(s) * 0.1).astype(np.float32), requires_grad=True)
         for s in shapes]
    real = lib.tensor(rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    fake = lib.tensor(rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    alpha = lib.tensor(rng.uniform(size=(16, 1, 1, 1)).astype(np.float32))

    def critic(x):
        x = F.leaky_relu(F.conv2d(x, p[0], p[1], stride=2, padding=1), 0.2)
        x = F.leaky_relu(F.conv2d(x, p[2], p[3], stride=2, padding=1), 0.2)
        x = F.leaky_relu(F.conv2d(x, p[4], p[5], stride=2, padding=1), 0.2)
        return F.linear(x.reshape(x.shape[0], -1), p[6], p[7])

    return gp_step(lib, critic, p, real, fake, alpha)


def maml(lib):
    rng = np.random.default_rng(2)
    F = lib.nn.functional
    p = [lib.tensor(a, requires_grad=True) for a in params(rng, [32, 128, 128, 8])]
    xs = lib.tensor(rng.standard_normal((20, 32)).astype(np.float32))
    ys = lib.tensor(rng.integers(0, 8, 20))
    xq = lib.tensor(rng.standard_normal((40, 32)).astype(np.float32))
    yq = lib.tensor(rng.integers(0, 8, 40))

    def run():
        for t in p:
            t.grad = None
        inner = F.cross_entropy(mlp(F, p, xs, F.relu), ys)
        gs = lib.autograd.grad(inner, p, create_graph=True)
        fast = [w - 0.1 * g for w, g in zip(p, gs)]
        F.cross_entropy(mlp(F, fast, xq, F.relu), yq).backward()
        return p[0].grad.numpy().ravel()[:64]
    return run


def hvp(lib):
    rng = np.random.default_rng(3)
    F = lib.nn.functional
    p0 = params(rng, [32, 64, 10])
    x = lib.tensor(rng.standard_normal((50, 32)).astype(np.float32))
    y = lib.tensor(rng.integers(0, 10, 50))
    ps = tuple(lib.tensor(a) for a in p0)
    vs = tuple(lib.tensor(rng.standard_normal(a.shape).astype(np.float32)) for a in p0)

    def loss(*q):
        return F.cross_entropy(mlp(F, list(q), x, lib.tanh), y)

    def run():
        _, hv = lib.autograd.functional.hvp(loss, ps, vs)
        return hv[0].numpy().ravel()[:64]
    return run


def main():
    print("| program | cddp | torch | cddp / torch |")
    print("|---|---|---|---|")
    for name, make in [("wgan-gp mlp", wgan_mlp), ("wgan-gp conv", wgan_conv),
                       ("maml mlp", maml), ("hvp mlp", hvp)]:
        fc, ft = make(cddp), make(torch)
        np.testing.assert_allclose(fc(), ft(), rtol=2e-3, atol=2e-4)
        c, t = per_call(fc), per_call(ft)
        print(f"| {name:14s} | {fmt(c):>10s} | {fmt(t):>10s} | {c / t:6.2f}x |")


if __name__ == "__main__":
    main()
