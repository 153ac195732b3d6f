"""The losses of csrc/nn/loss_extra.c and cross_entropy / nll_loss's extensions (K-dim
inputs, label smoothing with weights and ignore_index, probability targets).

Oracles: a NumPy formula per loss (written from torch's documentation, independent of the C
code), central finite differences in float64 for every differentiable input (gradcheck),
and torch, when importable, for values and gradients over every reduction, and for error
kinds and messages.
"""
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(99)


def R(*shape):
    return RNG.standard_normal(shape)


def pm1(*shape):
    return RNG.choice([-1.0, 1.0], shape)


def reduce_np(l, reduction):
    return {"none": l, "mean": l.mean(), "sum": l.sum()}[reduction]


def softplus(z):
    return np.logaddexp(0, z)


# ---- NumPy references ----------------------------------------------------------------------


def ref_smooth_l1(x, y, beta):
    d = np.abs(x - y)
    return np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)


def ref_huber(x, y, delta):
    d = np.abs(x - y)
    return np.where(d <= delta, 0.5 * d * d, delta * (d - 0.5 * delta))


def ref_kl(x, y, log_target):
    if log_target:
        return np.exp(y) * (y - x)
    return np.where(y > 0, y * np.log(np.where(y > 0, y, 1)), 0) - y * x


def ref_poisson(x, y, log_input, full, eps=1e-8):
    l = np.exp(x) - y * x if log_input else x - y * np.log(x + eps)
    if full:
        ys = np.where(y > 1, y, 2)
        l = l + np.where(y > 1, ys * np.log(ys) - ys + 0.5 * np.log(2 * np.pi * ys), 0)
    return l


def ref_gauss(x, y, v, full, eps=1e-6):
    v = np.maximum(v, eps)
    return 0.5 * (np.log(v) + (x - y) ** 2 / v) + (0.5 * np.log(2 * np.pi) if full else 0)


def ref_hinge(x, y, m):
    return np.where(y == 1, x, 0) + np.where(y == -1, np.maximum(0, m - x), 0)


def ref_cosine(a, b, y, m):
    cos = (a * b).sum(-1) / np.sqrt(((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12))
    return np.where(y == 1, 1 - cos, np.where(y == -1, np.maximum(0, cos - m), 0))


def ref_triplet(a, p, q, m, pn, eps, swap):
    def dist(u, v):
        return (np.abs(u - v + eps) ** pn).sum(-1) ** (1 / pn)
    dn = dist(a, q)
    if swap:
        dn = np.minimum(dn, dist(p, q))
    return np.maximum(0, m + dist(a, p) - dn)


def ref_mlsm(x, y, w):
    l = -(y * -softplus(-x) + (1 - y) * -softplus(x)) * w
    return l.mean(-1)


def ref_log_softmax(x, axis):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_pointwise_losses_match_numpy(reduction):
    x, y, v = R(3, 4), R(3, 4), np.abs(R(3, 4))
    cases = [
        (F.smooth_l1_loss(t(x), t(y), reduction=reduction, beta=0.6), ref_smooth_l1(x, y, 0.6)),
        (F.huber_loss(t(x), t(y), reduction=reduction, delta=0.8), ref_huber(x, y, 0.8)),
        (F.kl_div(t(x), t(v), reduction=reduction) if reduction != "mean" else None,
         ref_kl(x, v, False)),
        (F.kl_div(t(x), t(y), reduction=reduction, log_target=True) if reduction != "mean"
         else None, ref_kl(x, y, True)),
        (F.poisson_nll_loss(t(x), t(3 * v), reduction=reduction), ref_poisson(x, 3 * v, 1, 0)),
        (F.poisson_nll_loss(t(v), t(3 * v), log_input=False, full=True, reduction=reduction),
         ref_poisson(v, 3 * v, 0, 1)),
        (F.gaussian_nll_loss(t(x), t(y), t(v), full=True, reduction=reduction),
         ref_gauss(x, y, v, True)),
        (F.hinge_embedding_loss(t(x), t(pm1(3, 4)), margin=0.5, reduction=reduction), None),
        (F.soft_margin_loss(t(x), t(v > 0.5) * 2.0 - 1.0, reduction=reduction),
         softplus(-np.where(v > 0.5, 1, -1) * x)),
        (F.margin_ranking_loss(t(x), t(y), t(pm1(3, 4)), margin=0.2, reduction=reduction), None),
    ]
    for got, want in cases:
        if got is None or want is None:
            continue
        np.testing.assert_allclose(n(got), reduce_np(want, reduction), rtol=1e-12, atol=1e-12)
    yy = pm1(3, 4)
    np.testing.assert_allclose(n(F.hinge_embedding_loss(t(x), t(yy), 0.5, reduction=reduction)),
                               reduce_np(ref_hinge(x, yy, 0.5), reduction), atol=1e-12)
    np.testing.assert_allclose(
        n(F.margin_ranking_loss(t(x), t(y), t(yy), margin=0.2, reduction=reduction)),
        reduce_np(np.maximum(0, -yy * (x - y) + 0.2), reduction), atol=1e-12)
    w = np.abs(R(4))
    lab = (v > 0.5).astype(np.float64)
    np.testing.assert_allclose(
        n(F.multilabel_soft_margin_loss(t(x), t(lab), weight=t(w), reduction=reduction)),
        reduce_np(ref_mlsm(x, lab, w), reduction), atol=1e-12)


def test_kl_div_batchmean_and_mean_warning():
    x, y = R(4, 3), np.abs(R(4, 3))
    np.testing.assert_allclose(n(F.kl_div(t(x), t(y), reduction="batchmean")),
                               ref_kl(x, y, False).sum() / 4, atol=1e-12)
    with pytest.warns(UserWarning, match="'mean' divides the total loss by both"):
        got = F.kl_div(t(x), t(y))
    np.testing.assert_allclose(n(got), ref_kl(x, y, False).mean(), atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_row_losses_match_numpy(reduction):
    a, b, c, y = R(5, 3), R(5, 3), R(5, 3), pm1(5)
    np.testing.assert_allclose(
        n(F.cosine_embedding_loss(t(a), t(b), t(y), margin=0.1, reduction=reduction)),
        reduce_np(ref_cosine(a, b, y, 0.1), reduction), atol=1e-12)
    for pn, swap in ((2, False), (1, True), (3, False)):
        np.testing.assert_allclose(
            n(F.triplet_margin_loss(t(a), t(b), t(c), margin=1.5, p=pn, swap=swap,
                                    reduction=reduction)),
            reduce_np(ref_triplet(a, b, c, 1.5, pn, 1e-6, swap), reduction), atol=1e-10)
    one = n(F.cosine_embedding_loss(t(a[0]), t(b[0]), t(np.array(-1.0)), reduction=reduction))
    np.testing.assert_allclose(one, ref_cosine(a[:1], b[:1], np.array([-1.0]), 0)[0], atol=1e-12)


# ---- gradients by finite differences -------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_loss_gradients_finite_differences(reduction):
    r = reduction
    x, y = R(2, 3), R(2, 3)
    v = np.abs(R(2, 3)) + 0.1
    y01 = (np.abs(R(2, 3)) > 0.6).astype(float)
    s = pm1(2, 3)
    gradcheck(lambda p, q: F.smooth_l1_loss(p, q, reduction=r, beta=0.7), x, y)
    gradcheck(lambda p, q: F.huber_loss(p, q, reduction=r, delta=0.5), x, y)
    gradcheck(lambda p, q: F.kl_div(p, q, reduction=r if r != "mean" else "batchmean"), x, v)
    gradcheck(lambda p, q: F.kl_div(p, q, reduction=r, log_target=True) if r != "mean" else
              F.kl_div(p, q, reduction="batchmean", log_target=True), x, y)
    gradcheck(lambda p, q: F.poisson_nll_loss(p, q, reduction=r), x, 3 * v)
    gradcheck(lambda p, q: F.poisson_nll_loss(p, q, log_input=False, full=True, reduction=r),
              v, 3 * v)
    gradcheck(lambda p, q, w: F.gaussian_nll_loss(p, q, w, reduction=r), x, y, v)
    gradcheck(lambda p, q, w: F.gaussian_nll_loss(p, q, w, full=True, reduction=r), x, y,
              np.abs(R(2)) + 0.1)
    gradcheck(lambda p: F.hinge_embedding_loss(p, t(s), margin=0.3, reduction=r), x)
    gradcheck(lambda p: F.soft_margin_loss(p, t(s), reduction=r), x)
    gradcheck(lambda p, q, z: F.margin_ranking_loss(p, q, z, margin=0.1, reduction=r), x, y, s)
    gradcheck(lambda p, q, w: F.multilabel_soft_margin_loss(p, q, weight=w, reduction=r), x,
              y01, np.abs(R(3)))
    s2 = t(pm1(2))
    gradcheck(lambda p, q: F.cosine_embedding_loss(p, q, s2, margin=-0.5, reduction=r), x, y)
    for pn, swap in ((2, False), (1.5, True)):
        gradcheck(lambda p, q, z: F.triplet_margin_loss(p, q, z, margin=3.0, p=pn, swap=swap,
                                                        reduction=r), x, y, R(2, 3))


# ---- cross_entropy / nll_loss extensions ---------------------------------------------------


def ref_cross_entropy(x, y, w=None, ignore=-100, eps=0.0, reduction="mean"):
    """torch's documented formula for class-index targets, any (N, C, d...) input."""
    lp = ref_log_softmax(x, 1)
    C = x.shape[1]
    w = np.ones(C) if w is None else w
    lp = np.moveaxis(lp, 1, -1).reshape(-1, C)
    yy = y.reshape(-1)
    keep = yy != ignore
    ys = np.where(keep, yy, 0)
    nll = -lp[np.arange(len(yy)), ys] * w[ys] * keep
    smooth = -(lp * w).sum(-1) / C * keep
    l = (1 - eps) * nll + eps * smooth
    if reduction == "none":
        return l.reshape(y.shape)
    if reduction == "sum":
        return l.sum()
    return l.sum() / (w[ys] * keep).sum()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4), (2, 3, 2, 2)])
def test_cross_entropy_kdim_smoothing_weights_ignore(shape, reduction):
    x = R(*shape)
    C = shape[1]
    y = RNG.integers(0, C, (shape[0],) + shape[2:])
    y.reshape(-1)[0] = -1                               # one ignored position
    w = np.abs(R(C)) + 0.1
    for eps, wt in ((0.0, None), (0.2, w)):
        got = F.cross_entropy(t(x), t(y), weight=None if wt is None else t(wt), ignore_index=-1,
                              reduction=reduction, label_smoothing=eps)
        np.testing.assert_allclose(n(got), ref_cross_entropy(x, y, wt, -1, eps, reduction),
                                   rtol=1e-10, atol=1e-12)
        gradcheck(lambda p: F.cross_entropy(p, t(y), weight=None if wt is None else t(wt),
                                            ignore_index=-1, reduction=reduction,
                                            label_smoothing=eps), x)
    got = F.nll_loss(t(ref_log_softmax(x, 1)), t(y), weight=t(w), ignore_index=-1,
                     reduction=reduction)
    np.testing.assert_allclose(n(got), ref_cross_entropy(x, y, w, -1, 0, reduction), rtol=1e-10)


def test_cross_entropy_probability_targets_kdim():
    x = R(2, 3, 4)
    p = np.abs(R(2, 3, 4))
    p /= p.sum(1, keepdims=True)
    for eps in (0.0, 0.3):
        q = p * (1 - eps) + eps / 3
        want = -(ref_log_softmax(x, 1) * q).sum(1)
        got = F.cross_entropy(t(x), t(p), reduction="none", label_smoothing=eps)
        np.testing.assert_allclose(n(got), want, rtol=1e-10)
        np.testing.assert_allclose(n(F.cross_entropy(t(x), t(p), label_smoothing=eps)),
                                   want.mean(), rtol=1e-10)
        gradcheck(lambda z: F.cross_entropy(z, t(p), label_smoothing=eps), x)


def test_cross_entropy_all_ignored_and_float32():
    y = np.full(3, -100)
    assert np.isnan(n(F.cross_entropy(t(R(3, 4)), t(y))))   # 0 / 0, as torch
    x32 = R(2, 5, 3).astype(np.float32)
    y = RNG.integers(0, 5, (2, 3))
    got = F.cross_entropy(t(x32), t(y))
    assert got.dtype == cddp.float32
    np.testing.assert_allclose(n(got), ref_cross_entropy(x32.astype(np.float64), y), rtol=1e-6)


def test_cross_entropy_kdim_errors():
    x = t(R(2, 3, 4))
    with pytest.raises(RuntimeError, match=r"Expected target size \[2, 4\], got \[2, 3\]"):
        F.cross_entropy(x, t(np.zeros((2, 3), np.int64)))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(2\) to match target"):
        F.nll_loss(x, t(np.zeros((3, 4), np.int64)))
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        F.cross_entropy(x, t(np.full((2, 4), 3)))


# ---- modules and errors --------------------------------------------------------------------


def test_loss_modules_forward_their_options():
    x, y, v = R(3, 4), R(3, 4), np.abs(R(3, 4))
    s = pm1(3)
    np.testing.assert_allclose(n(nn.SmoothL1Loss(beta=0.5)(t(x), t(y))),
                               ref_smooth_l1(x, y, 0.5).mean())
    np.testing.assert_allclose(n(nn.HuberLoss(reduction="sum", delta=2.0)(t(x), t(y))),
                               ref_huber(x, y, 2.0).sum())
    np.testing.assert_allclose(n(nn.KLDivLoss(reduction="batchmean")(t(x), t(v))),
                               ref_kl(x, v, False).sum() / 3)
    np.testing.assert_allclose(n(nn.PoissonNLLLoss()(t(x), t(v))), ref_poisson(x, v, 1, 0).mean())
    np.testing.assert_allclose(n(nn.GaussianNLLLoss(eps=1e-3)(t(x), t(y), t(v))),
                               ref_gauss(x, y, v, False, 1e-3).mean())
    np.testing.assert_allclose(n(nn.HingeEmbeddingLoss(margin=2.0)(t(x), t(pm1(3, 4) * 0 + 1))),
                               x.mean())
    np.testing.assert_allclose(n(nn.SoftMarginLoss(reduction="none")(t(x), t(np.ones((3, 4))))),
                               softplus(-x))
    np.testing.assert_allclose(n(nn.MultiLabelSoftMarginLoss()(t(x), t(v > 0.5) * 1.0)),
                               ref_mlsm(x, (v > 0.5) * 1.0, 1).mean())
    np.testing.assert_allclose(n(nn.MarginRankingLoss(margin=0.5)(t(x[:, 0]), t(y[:, 0]), t(s))),
                               np.maximum(0, -s * (x[:, 0] - y[:, 0]) + 0.5).mean())
    np.testing.assert_allclose(n(nn.CosineEmbeddingLoss()(t(x), t(y), t(s))),
                               ref_cosine(x, y, s, 0).mean())
    np.testing.assert_allclose(n(nn.TripletMarginLoss(margin=0.5, swap=True)(t(x), t(y), t(v))),
                               ref_triplet(x, y, v, 0.5, 2, 1e-6, True).mean())


def test_loss_errors():
    x = t(R(2, 3))
    with pytest.raises(RuntimeError, match="smooth_l1_loss does not support negative values"):
        F.smooth_l1_loss(x, x, beta=-1)
    with pytest.raises(RuntimeError, match="huber_loss does not support non-positive values"):
        F.huber_loss(x, x, delta=0)
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, -t(np.ones((2, 3))))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(x, x, t(np.ones((3, 2))))
    with pytest.raises(RuntimeError, match="All input tensors should have same dimension"):
        F.margin_ranking_loss(x, x[0], x)
    with pytest.raises(RuntimeError, match="expected to have the same number of dimensions"):
        F.triplet_margin_loss(x, x[0], x)
    with pytest.raises(RuntimeError, match="1D target tensor expects 2D input tensors"):
        F.cosine_embedding_loss(t(R(2, 3, 4)), t(R(2, 3, 4)), t(np.ones(2)))
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'target'"):
        F.soft_margin_loss(x, t(R(2, 3), requires_grad=True))
    with pytest.raises(ValueError, match="foo is not a valid value for reduction"):
        F.huber_loss(x, x, reduction="foo")


# ---- torch as the oracle -------------------------------------------------------------------


def _vs_torch(torch, f, arrays, grads):
    cs = [t(a, requires_grad=g) for a, g in zip(arrays, grads)]
    ts = [torch.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    rc, rt = f(F, cs), f(torch.nn.functional, ts)
    np.testing.assert_allclose(n(rc), rt.detach().numpy(), rtol=1e-10, atol=1e-12)
    w = RNG.standard_normal(tuple(rt.shape))
    (rc * t(w)).sum().backward()
    (rt * torch.tensor(w)).sum().backward()
    for c, tt in zip(cs, ts):
        if tt.grad is not None:
            np.testing.assert_allclose(n(c.grad), tt.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_losses_vs_torch(torch, reduction):
    r = reduction
    x, y, v = R(3, 4), R(3, 4), np.abs(R(3, 4))
    s, lab = pm1(3, 4), RNG.integers(0, 4, (3, 5, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [
            (lambda M, a: M.smooth_l1_loss(*a, reduction=r, beta=0.4), [x, y], [1, 1]),
            (lambda M, a: M.huber_loss(*a, reduction=r, delta=0.7), [x, y[0]], [1, 1]),
            (lambda M, a: M.kl_div(*a, reduction=r), [x, v], [1, 1]),
            (lambda M, a: M.kl_div(*a, reduction=r, log_target=True), [x, y], [1, 1]),
            (lambda M, a: M.poisson_nll_loss(*a, reduction=r), [x, 3 * v], [1, 1]),
            (lambda M, a: M.poisson_nll_loss(*a, log_input=False, full=True, reduction=r),
             [v, 3 * v], [1, 1]),
            (lambda M, a: M.gaussian_nll_loss(*a, reduction=r, full=True), [x, y, v], [1, 1, 1]),
            (lambda M, a: M.gaussian_nll_loss(*a, reduction=r), [x, y, v[:, 0]], [1, 1, 1]),
            (lambda M, a: M.hinge_embedding_loss(*a, margin=0.4, reduction=r), [x, s], [1, 0]),
            (lambda M, a: M.soft_margin_loss(*a, reduction=r), [x, s], [1, 0]),
            (lambda M, a: M.margin_ranking_loss(*a, margin=0.3, reduction=r), [x, y, s],
             [1, 1, 1]),
            (lambda M, a: M.multilabel_soft_margin_loss(*a, reduction=r), [x, (v > .5) * 1.0],
             [1, 1]),
            (lambda M, a: M.cosine_embedding_loss(*a, margin=0.1, reduction=r),
             [x, y, s[:, 0]], [1, 1, 0]),
            (lambda M, a: M.triplet_margin_loss(*a, margin=2.0, p=1, swap=True, reduction=r),
             [x, y, v], [1, 1, 1]),
            (lambda M, a: M.cross_entropy(*a, ignore_index=2, reduction=r, label_smoothing=0.1),
             [R(3, 4, 5, 2), lab], [1, 0]),
            (lambda M, a: M.cross_entropy(a[0], a[1], weight=a[2], reduction=r,
                                          label_smoothing=0.3), [R(3, 4, 5), v[:, :, None] *
                                                                 np.ones(5), np.abs(R(4))],
             [1, 0, 0]),
            (lambda M, a: M.nll_loss(*a, weight=None, ignore_index=1, reduction=r),
             [R(3, 4, 5, 2), lab], [1, 0]),
        ]
        for f, arrays, grads in cases:
            _vs_torch(torch, f, arrays, [bool(g) for g in grads])


def test_float32_and_noncontiguous_inputs():
    x, y = R(4, 6), R(4, 6)
    xt = t(np.ascontiguousarray(x.T)).t()              # a transposed view
    assert not xt.is_contiguous()
    for f, want in [
        (lambda a, b: F.huber_loss(a, b, delta=0.5), ref_huber(x, y, 0.5).mean()),
        (lambda a, b: F.triplet_margin_loss(a, b, b * 2), ref_triplet(x, y, 2 * y, 1.0, 2, 1e-6,
                                                                       False).mean()),
        (lambda a, b: F.cosine_embedding_loss(a, b, t(np.ones(4))),
         ref_cosine(x, y, np.ones(4), 0).mean()),
        (lambda a, b: F.kl_div(a, b.abs(), reduction="batchmean"),
         ref_kl(x, np.abs(y), False).sum() / 4),
    ]:
        np.testing.assert_allclose(n(f(xt, t(y))), want, rtol=1e-12)
        got = f(t(x.astype(np.float32)), t(y.astype(np.float32)))
        assert got.dtype == cddp.float32
        np.testing.assert_allclose(n(got), want, rtol=1e-5)
    g = t(np.ascontiguousarray(x.T), requires_grad=True)
    F.smooth_l1_loss(g.t(), t(y), beta=0.3).backward()
    want = np.where(np.abs(x - y) < 0.3, (x - y) / 0.3, np.sign(x - y)) / x.size
    np.testing.assert_allclose(n(g.grad), want.T, rtol=1e-12)
