"""Double backward (create_graph=True) through the fused losses of nn/loss_extra.c, cumprod /
cummax / cummin and lgamma / digamma (cddp/autograd/_higher/nn.py, reduce.py, pointwise.py).

Each program f(T, *xs, *cs) runs with T = cddp (and T = torch as the oracle when installed);
xs want gradients, cs are constants. L = sum(f * v); g = grad(L, xs, create_graph=True) must
equal the C engine's first-order gradient; S = sum_i <g_i, u_i>; h = grad(S, xs) is checked
against central finite differences of S built from first-order gradients, and g, h against
torch. Inputs stay away from the kinks (hinge margins, max ties, the swap's choice).
"""
import numpy as np
import pytest

import cddp

try:
    import torch
except ImportError:
    torch = None

RNG = np.random.default_rng(7)


def _t(T, a, grad=False):
    t = T.from_numpy(np.array(a, dtype=np.float64))
    return t.requires_grad_(True) if grad else t


def _grads(T, f, xs, cs, v, create_graph):
    out = f(T, *xs, *cs)
    L = (out * _t(T, v)).sum()
    return T.autograd.grad(L, xs, create_graph=create_graph, allow_unused=True)


def _second(T, f, arrays, consts, v, us):
    xs = [_t(T, a, True) for a in arrays]
    cs = [_t(T, c) for c in consts]
    g = _grads(T, f, xs, cs, v, True)
    S = sum((gi * _t(T, u)).sum() for gi, u in zip(g, us) if gi is not None)
    if not isinstance(S, T.Tensor) or not S.requires_grad:   # g constant in xs (linear loss)
        return g, [None] * len(xs)
    return g, T.autograd.grad(S, xs, allow_unused=True)


def _dense(t, shape):
    if t is None:
        return np.zeros(shape)
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().numpy(force=True)          # torch's ZeroTensor (p = 1 norms)
    return t.detach().numpy()


def _S(f, arrays, consts, v, us):
    """<first-order gradients, us> at arrays, from the C engine (no create_graph)."""
    g = _grads(cddp, f, [_t(cddp, a, True) for a in arrays], [_t(cddp, c) for c in consts],
               v, False)
    return sum(float((gi.numpy() * u).sum()) for gi, u in zip(g, us) if gi is not None)


def _names(t):
    seen, todo, out = set(), [t.grad_fn], set()
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        out.add(n.name())
        todo.extend(m for m, _ in n.next_functions)
    return out


def check(node, f, arrays, consts=(), eps=1e-6, tol=1e-6, fd_max=40, rtol=1e-10, fd=True):
    """f's graph holds `node`; create_graph's g equals the C engine's; the second derivatives
    match finite differences (unless not fd) and torch (to rtol)."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    consts = [np.asarray(c, dtype=np.float64) for c in consts]
    xs = [_t(cddp, a, True) for a in arrays]
    out = f(cddp, *xs, *[_t(cddp, c) for c in consts])
    assert node in _names(out), (node, _names(out))
    v = RNG.standard_normal(tuple(out.shape))
    us = [RNG.standard_normal(a.shape) for a in arrays]
    g, h = _second(cddp, f, arrays, consts, v, us)
    g1 = _grads(cddp, f, [_t(cddp, a, True) for a in arrays], [_t(cddp, c) for c in consts], v,
                False)
    for a, b, x in zip(g, g1, arrays):
        np.testing.assert_allclose(_dense(a, x.shape), _dense(b, x.shape), rtol=1e-12,
                                   atol=1e-13)
    for j, a in enumerate(arrays if fd else ()):
        hj = _dense(h[j], a.shape)
        idx = list(np.ndindex(a.shape))
        if len(idx) > fd_max:
            idx = [idx[k] for k in RNG.choice(len(idx), fd_max, replace=False)]
        for k in idx:
            pa, ma = list(arrays), list(arrays)
            pa[j], ma[j] = a.copy(), a.copy()
            pa[j][k] += eps
            ma[j][k] -= eps
            fd = (_S(f, pa, consts, v, us) - _S(f, ma, consts, v, us)) / (2 * eps)
            assert abs(fd - hj[k]) <= tol * max(1.0, abs(fd)), (j, k, fd, hj[k])
    if torch is None:
        return g, h
    tg, th = _second(torch, f, arrays, consts, v, us)
    for a, b, x in list(zip(g, tg, arrays)) + list(zip(h, th, arrays)):
        b = _dense(b, x.shape)
        np.testing.assert_allclose(_dense(a, x.shape), b, rtol=rtol,
                                   atol=rtol / 10 * max(1.0, float(np.abs(b).max(initial=0))))
    return g, h


def rn(*shape):
    return RNG.standard_normal(shape)


def signs(*shape):
    return RNG.choice([-1.0, 1.0], size=shape)


def both(node, loss, arrays, consts=()):
    """The loss alone, and times a function of its first input (its incoming gradient then
    has a history of its own)."""
    check(node, loss, arrays, consts)
    check(node, lambda T, *a: loss(T, *a) * (a[0] * a[0]).sum(), arrays, consts)


RED = ["none", "mean", "sum"]


# ---- nn/loss_extra.c pointwise losses -------------------------------------------------------

@pytest.mark.parametrize("red", RED)
@pytest.mark.parametrize("log_input,full", [(True, False), (False, False), (True, True),
                                            (False, True)])
def test_poisson_nll(red, log_input, full):
    x = rn(3, 4) * 0.5 if log_input else RNG.uniform(0.5, 2.0, (3, 4))
    y = RNG.uniform(0.2, 3.0, (3, 4))                    # both sides of full's y > 1
    both("PoissonNllLossBackward0",
         lambda T, x, y: T.nn.functional.poisson_nll_loss(x, y, log_input=log_input, full=full,
                                                          reduction=red), [x, y])


@pytest.mark.parametrize("red", RED)
@pytest.mark.parametrize("vshape,full", [((3, 4), False), ((3, 4), True), ((3,), False),
                                         ((3, 1), False)])
def test_gaussian_nll(red, vshape, full):
    var = RNG.uniform(0.3, 2.0, vshape)
    both("GaussianNllLossBackward0",
         lambda T, x, y, v: T.nn.functional.gaussian_nll_loss(x, y, v, full=full,
                                                              reduction=red),
         [rn(3, 4), rn(3, 4), var])


@pytest.mark.parametrize("red", RED)
def test_hinge_embedding(red):
    x = RNG.uniform(0.1, 0.8, (3, 4)) * signs(3, 4) + 1.0   # margin - x away from 0
    both("HingeEmbeddingLossBackward0",
         lambda T, x, y: T.nn.functional.hinge_embedding_loss(x.tanh() * 2, y, margin=1.5,
                                                              reduction=red),
         [x], [signs(3, 4)])


@pytest.mark.parametrize("red", RED)
def test_soft_margin(red):
    both("SoftMarginLossBackward0",
         lambda T, x, y: T.nn.functional.soft_margin_loss(x, y, reduction=red),
         [rn(3, 4)], [signs(3, 4)])


@pytest.mark.parametrize("red", RED)
def test_margin_ranking(red):
    a, b = rn(6), rn(6)
    y = np.where(a > b, 1.0, -1.0)
    y[:3] *= -1                                          # three active, three clamped
    m = np.abs(a - b).min() / 2                          # no element on the kink
    F = "MarginRankingLossBackward0"
    both(F, lambda T, a, b, y: T.nn.functional.margin_ranking_loss(a, b, y, margin=m,
                                                                   reduction=red), [a, b], [y])
    both(F, lambda T, a, b, y: T.nn.functional.margin_ranking_loss(a, b, y, margin=m,
                                                                   reduction=red), [a, b, y])


@pytest.mark.parametrize("red", RED)
@pytest.mark.parametrize("weighted", [False, True])
def test_multilabel_soft_margin(red, weighted):
    x, y = rn(3, 5), RNG.uniform(0, 1, (3, 5))
    F = "MultilabelSoftMarginLossBackward0"
    if weighted:
        both(F, lambda T, x, y, w: T.nn.functional.multilabel_soft_margin_loss(
            x, y, weight=w, reduction=red), [x, y, RNG.uniform(0.5, 2, 5)])
    else:
        both(F, lambda T, x, y: T.nn.functional.multilabel_soft_margin_loss(x, y, reduction=red),
             [x, y])


def test_gaussian_nll_clamped_var():
    # var below eps: torch clamps a copy under no_grad (slope 1 in var at the clamped value),
    # which finite differences of the clamped loss cannot see; torch is the oracle here
    if torch is None:
        pytest.skip("torch is the oracle")
    var = np.array([[1e-8, 0.5, 2e-7], [0.3, 1e-9, 1.0]])
    check("GaussianNllLossBackward0",
          lambda T, x, y, v: T.nn.functional.gaussian_nll_loss(x, y, v, eps=1e-6,
                                                               reduction="sum") * x.sum(),
          [rn(2, 3), rn(2, 3), var], fd=False)


def test_multilabel_soft_margin_unbatched():
    for red in RED:
        check("MultilabelSoftMarginLossBackward0",
              lambda T, x, y: T.nn.functional.multilabel_soft_margin_loss(x, y, reduction=red)
              * x.sum(), [rn(5), RNG.uniform(0, 1, 5)])


def test_losses_float32():
    # float32 inputs: the create_graph gradients keep the dtype and equal the C engine's
    F = cddp.nn.functional
    programs = [
        lambda x, y: F.poisson_nll_loss(x, y.abs()),
        lambda x, y: F.gaussian_nll_loss(x, y, (x * x + 1).detach()),
        lambda x, y: F.multilabel_soft_margin_loss(x, y.sigmoid()),
        lambda x, y: F.triplet_margin_loss(x, y, x * 0.5 + 1.0),
        lambda x, y: F.cosine_embedding_loss(x, y, cddp.tensor([1.0, -1.0, 1.0])),
        lambda x, y: F.grid_sample(x.reshape(1, 1, 3, 4), (y.reshape(1, 2, 3, 2)).tanh(),
                                   align_corners=False).sum(),
        lambda x, y: cddp.cumprod(x, 1).sum() + cddp.digamma(y.abs() + 0.5).sum(),
    ]
    for f in programs:
        x = cddp.from_numpy(rn(3, 4).astype(np.float32)).requires_grad_(True)
        y = cddp.from_numpy(rn(3, 4).astype(np.float32)).requires_grad_(True)
        g = cddp.autograd.grad(f(x, y), (x, y), create_graph=True, allow_unused=True)
        g1 = cddp.autograd.grad(f(x, y), (x, y), allow_unused=True)
        for a, b in zip(g, g1):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.dtype == cddp.float32 and a.requires_grad
                np.testing.assert_allclose(a.detach().numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
        S = sum(a.sum() for a in g if a is not None)
        h = cddp.autograd.grad(S, (x, y), allow_unused=True)
        assert all(t is None or t.dtype == cddp.float32 for t in h)


def test_pointwise_losses_broadcast_and_nonleaf():
    # a target broadcast against the input, inputs that are not leaves
    check("SoftMarginLossBackward0",
          lambda T, x, y: T.nn.functional.soft_margin_loss(x.sin() * 2, y, reduction="sum"),
          [rn(3, 4)], [signs(3, 4)])
    check("GaussianNllLossBackward0",
          lambda T, x, y, v: T.nn.functional.gaussian_nll_loss(x * 3, y.expand(3, 4), v.exp(),
                                                               reduction="none"),
          [rn(3, 4), rn(1, 4), rn(3, 4) * 0.3])


# ---- nn/loss_extra.c row losses -------------------------------------------------------------

@pytest.mark.parametrize("red", RED)
@pytest.mark.parametrize("batched", [True, False])
def test_cosine_embedding(red, batched):
    shape = (5, 4) if batched else (4,)
    a, b = rn(*shape), rn(*shape)
    y = signs(5) if batched else np.array(-1.0)
    cos = (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    m = float(np.sort(np.abs(cos).ravel())[0]) * np.sign(cos.ravel()[0]) * 0.5   # off the kink
    both("CosineEmbeddingLossBackward0",
         lambda T, a, b, y: T.nn.functional.cosine_embedding_loss(a, b, y, margin=m,
                                                                  reduction=red), [a, b], [y])


@pytest.mark.parametrize("red", RED)
@pytest.mark.parametrize("p,swap", [(2, False), (2, True), (1, False), (3, True), (1.5, False)])
def test_triplet_margin(red, p, swap):
    a, b, c = rn(4, 3), rn(4, 3), rn(4, 3)
    both("TripletMarginLossBackward0",
         lambda T, a, b, c: T.nn.functional.triplet_margin_loss(a, b, c, margin=1.0, p=p,
                                                                swap=swap, reduction=red),
         [a, b, c])


def test_triplet_margin_unbatched():
    check("TripletMarginLossBackward0",
          lambda T, a, b, c: T.nn.functional.triplet_margin_loss(a, b, c, margin=2.0,
                                                                 reduction="none"),
          [rn(3), rn(3), rn(3)])


# ---- cumprod / cummax / cummin ------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod(dim):
    x = RNG.uniform(0.5, 1.5, (3, 4)) * signs(3, 4)
    check("CumprodBackward0", lambda T, x: T.cumprod(x, dim), [x])
    check("CumprodBackward0", lambda T, x: x.cumprod(dim) * x.sum(), [x])


@pytest.mark.parametrize("dim", [0, 1])
def test_cumprod_with_zeros(dim):
    x = rn(4, 5)
    x[1, 2] = 0.0
    x[2, 2] = 0.0                                        # two zeros in one lane
    x[0, 0] = 0.0
    x[3, 4] = 0.0
    check("CumprodBackward0", lambda T, x: T.cumprod(x, dim), [x])
    check("CumprodBackward0", lambda T, x: T.cumprod(x * x, dim) * x.sum(), [x])


def test_cumprod_inplace_and_3d():
    check("CumprodBackward0", lambda T, x: (x * 1.0).cumprod_(1), [rn(3, 4)])
    check("CumprodBackward0", lambda T, x: T.cumprod(x.tanh(), 1), [rn(2, 3, 4)])


@pytest.mark.parametrize("fn", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1])
def test_cummax_cummin(fn, dim):
    x = rn(4, 5)
    node = "CummaxBackward0" if fn == "cummax" else "CumminBackward0"
    check(node, lambda T, x: getattr(T, fn)(x * x, dim).values * x, [x])
    check(node, lambda T, x: getattr(T, fn)(x.sin(), dim).values.exp(), [x])


# ---- lgamma / digamma -----------------------------------------------------------------------

def _gamma_points():
    return np.array([[0.1, 0.7, 1.0, 2.5, 9.7], [11.0, 30.0, -0.3, -2.6, 4.2]])


# torch's trigamma is good to about 5e-10 relative (scipy's polygamma is the sharper oracle,
# test_trigamma_against_scipy): its second derivatives are compared to 1e-8

def test_lgamma():
    check("LgammaBackward0", lambda T, x: T.lgamma(x), [_gamma_points()], rtol=1e-8)
    check("LgammaBackward0", lambda T, x: T.lgamma(x * 0.5 + 3.0) * x.sin(), [_gamma_points()],
          rtol=1e-8)


def test_digamma():
    check("DigammaBackward0", lambda T, x: T.digamma(x), [_gamma_points()], rtol=1e-8)
    check("DigammaBackward0", lambda T, x: T.digamma(x) * T.digamma(x).sum(), [_gamma_points()],
          rtol=1e-8)


def test_trigamma_against_scipy():
    special = pytest.importorskip("scipy.special")
    from cddp.autograd._higher.pointwise import _trigamma
    x = np.array([-3.7, -0.5, 0.1, 0.49, 0.5, 0.51, 1.0, 2.5, 9.99, 10.0, 10.5, 30.0, 1e3])
    xt = _t(cddp, x, True)
    t = _trigamma(xt)
    np.testing.assert_allclose(t.detach().numpy(), special.polygamma(1, x), rtol=1e-13)
    d, = cddp.autograd.grad(t.sum(), xt)                 # the series' own derivative
    np.testing.assert_allclose(d.numpy(), special.polygamma(2, x), rtol=1e-12)


# ---- grid_sample ----------------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample(mode, padding, align):
    x = rn(2, 2, 3, 4)
    grid = RNG.uniform(-1.4, 1.4, (2, 3, 2, 2))          # some points outside the image

    def f(T, x, grid):
        y = T.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding,
                                        align_corners=align)
        return y * y
    check("GridSampler2DBackward0", f, [x, grid])
    check("GridSampler2DBackward0",
          lambda T, x, grid: T.nn.functional.grid_sample(
              x.tanh(), grid.sin(), mode=mode, padding_mode=padding, align_corners=align)
          * x.sum(), [x, grid])


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_grid_sample_one_input(padding):
    x, grid = rn(1, 2, 4, 3), RNG.uniform(-1.2, 1.2, (1, 2, 3, 2))

    def f(T, a, b):
        return T.nn.functional.grid_sample(a, b, padding_mode=padding, align_corners=False) ** 2
    check("GridSampler2DBackward0", lambda T, x, grid: f(T, x, grid), [x], [grid])
    check("GridSampler2DBackward0", lambda T, grid, x: f(T, x, grid), [grid], [x])


def test_cumprod_with_zeros_third_order():
    # the zero path's own graph (cumprod of the masked products) differentiated again
    if torch is None:
        pytest.skip("torch is the oracle")
    a = np.array([[0.0, 2.0, 0.4, 1.1], [1.5, 0.0, 0.0, -0.7], [1.0, 2.0, -2.0, 0.5]])

    def third(T):
        x = _t(T, a, True)
        g, = T.autograd.grad((T.cumprod(x, 1) * _t(T, a + 1)).sum(), x, create_graph=True)
        h, = T.autograd.grad((g * g).sum(), x, create_graph=True)
        k, = T.autograd.grad((h * h).sum(), x)
        return [t.detach().numpy() for t in (g, h, k)]
    for got, want in zip(third(cddp), third(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-11)
