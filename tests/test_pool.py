"""Pooling (csrc/nn/pool.c): max_pool1d/2d (indices), avg_pool1d/2d, adaptive avg/max pooling
and their modules.

Oracles: a NumPy reference written straight from torch's definitions (window bounds,
first-maximum-wins, NaN propagation, the average's divisor rules, adaptive start/end indices),
finite differences in float64 for gradients, and torch for values, indices (ties included) and
gradients.
"""
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(99)


def rnd(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def ties(*shape):
    """Small integers: many equal values inside a window (exercises the first-max rule)."""
    return RNG.integers(-2, 3, shape).astype(np.float64)


def out_size(i, k, s, p, d, ceil):
    o = (i + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= i + p:
        o -= 1
    return o


def np_max_pool2d(x, k, s, p, d=(1, 1), ceil=False):
    *lead, H, W = x.shape
    OH, OW = out_size(H, k[0], s[0], p[0], d[0], ceil), out_size(W, k[1], s[1], p[1], d[1], ceil)
    planes = x.reshape(-1, H, W)
    y = np.empty((planes.shape[0], OH, OW))
    idx = np.empty((planes.shape[0], OH, OW), dtype=np.int64)
    for q, pl in enumerate(planes):
        for oh in range(OH):
            for ow in range(OW):
                best, m = None, -math.inf
                for i in range(k[0]):
                    for j in range(k[1]):
                        h, w = oh * s[0] - p[0] + i * d[0], ow * s[1] - p[1] + j * d[1]
                        if 0 <= h < H and 0 <= w < W:
                            v = pl[h, w]
                            if best is None:
                                best = h * W + w
                            if v > m or math.isnan(v):
                                m, best = v, h * W + w
                y[q, oh, ow], idx[q, oh, ow] = m, best
    return y.reshape(*lead, OH, OW), idx.reshape(*lead, OH, OW)


def np_avg_pool2d(x, k, s, p, ceil=False, include_pad=True, divisor=None):
    *lead, H, W = x.shape
    OH, OW = out_size(H, k[0], s[0], p[0], 1, ceil), out_size(W, k[1], s[1], p[1], 1, ceil)
    planes = x.reshape(-1, H, W)
    y = np.zeros((planes.shape[0], OH, OW))
    for oh in range(OH):
        for ow in range(OW):
            h0, w0 = oh * s[0] - p[0], ow * s[1] - p[1]
            h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            div = divisor or (size if include_pad else (h1 - h0) * (w1 - w0))
            y[:, oh, ow] = planes[:, h0:h1, w0:w1].sum(axis=(1, 2)) / div
    return y.reshape(*lead, OH, OW)


def np_adaptive(x, osize, op):
    *lead, H, W = x.shape
    planes = x.reshape(-1, H, W)
    y = np.zeros((planes.shape[0],) + tuple(osize))
    for oh in range(osize[0]):
        h0, h1 = oh * H // osize[0], -(-(oh + 1) * H // osize[0])
        for ow in range(osize[1]):
            w0, w1 = ow * W // osize[1], -(-(ow + 1) * W // osize[1])
            y[:, oh, ow] = op(planes[:, h0:h1, w0:w1].reshape(len(planes), -1), axis=1)
    return y.reshape(*lead, *osize)


# ---- values vs NumPy, gradients vs finite differences ------------------------------------

MAX_CASES = [((2, 3, 9, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),
             ((1, 2, 9, 10), (3, 2), (2, 3), (1, 1), (2, 1), True),
             ((3, 7, 8), (2, 2), (2, 2), (0, 0), (1, 1), True),           # unbatched
             ((1, 1, 5, 5), (3, 3), (1, 1), (1, 1), (2, 2), False)]


@pytest.mark.parametrize("xs,k,s,p,d,ceil", MAX_CASES)
def test_max_pool2d_matches_numpy(xs, k, s, p, d, ceil):
    x = ties(*xs)
    y, idx = F.max_pool2d(t(x), k, s, p, d, ceil, return_indices=True)
    ry, ridx = np_max_pool2d(x, k, s, p, d, ceil)
    np.testing.assert_array_equal(n(y), ry)
    np.testing.assert_array_equal(n(idx), ridx)
    assert idx.dtype == cddp.int64


def test_max_pool2d_gradient_goes_to_the_index():
    """dx is dy scattered to the saved indices (each window's first maximum)."""
    x = ties(2, 3, 7, 7)
    xt = t(x, True)
    y, idx = F.max_pool2d(xt, 3, 2, 1, return_indices=True)
    g = rnd(*y.shape)
    y.backward(t(g))
    ref = np.zeros((6, 49))
    for q, (gi, ii) in enumerate(zip(g.reshape(6, -1), n(idx).reshape(6, -1))):
        np.add.at(ref[q], ii, gi)
    np.testing.assert_allclose(n(xt.grad), ref.reshape(x.shape))


def test_max_pool_nan_and_inf():
    x = np.array([[[[1, np.nan, 3], [np.nan, 2, 5], [0, 0, 0]]]])
    y, idx = F.max_pool2d(t(x), 2, 1, return_indices=True)
    ry, ridx = np_max_pool2d(x, (2, 2), (1, 1), (0, 0))
    np.testing.assert_array_equal(n(y), ry)          # NaN == NaN in assert_array_equal
    np.testing.assert_array_equal(n(idx), ridx)
    y, idx = F.max_pool2d(t(np.full((1, 1, 3, 3), -np.inf)), 2, 1, 1, return_indices=True)
    np.testing.assert_array_equal(n(idx), np_max_pool2d(np.full((1, 1, 3, 3), -np.inf),
                                                        (2, 2), (1, 1), (1, 1))[1])


def test_max_pool1d():
    x = ties(2, 3, 11)
    y, idx = F.max_pool1d(t(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    ry, ridx = np_max_pool2d(x[:, :, None], (1, 3), (1, 2), (0, 1), ceil=True)
    np.testing.assert_array_equal(n(y), ry[:, :, 0])
    np.testing.assert_array_equal(n(idx), ridx[:, :, 0])


@pytest.mark.parametrize("kw", [dict(), dict(ceil=True, include_pad=False),
                                dict(ceil=True, divisor=5), dict(include_pad=False)])
def test_avg_pool2d_matches_numpy(kw):
    x = rnd(2, 3, 9, 10)
    ref = np_avg_pool2d(x, (3, 2), (2, 3), (1, 1), **kw)
    got = F.avg_pool2d(t(x), (3, 2), (2, 3), (1, 1), ceil_mode=kw.get("ceil", False),
                       count_include_pad=kw.get("include_pad", True),
                       divisor_override=kw.get("divisor"))
    np.testing.assert_allclose(n(got), ref, rtol=1e-12)
    ref1 = np_avg_pool2d(x[:, :, :1], (1, 3), (1, 2), (0, 1), ceil=True, include_pad=False)
    got1 = F.avg_pool1d(t(x[:, :, 0]), 3, 2, 1, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(n(got1), ref1[:, :, 0], rtol=1e-12)


@pytest.mark.parametrize("xs,osize", [((2, 3, 9, 10), (4, 3)), ((2, 3, 7, 5), (7, 5)),
                                      ((3, 5, 7), (3, 2)), ((1, 2, 5, 6), (8, 9)),
                                      ((2, 3, 1, 1), (1, 1))])
def test_adaptive_pools_match_numpy(xs, osize):
    x = ties(*xs) + 0.25 * rnd(*xs)
    np.testing.assert_allclose(n(F.adaptive_avg_pool2d(t(x), osize)),
                               np_adaptive(x, osize, np.mean), rtol=1e-12)
    y, idx = F.adaptive_max_pool2d(t(x), osize, return_indices=True)
    np.testing.assert_array_equal(n(y), np_adaptive(x, osize, np.max))
    got = np.take_along_axis(x.reshape(-1, xs[-2] * xs[-1]),
                             n(idx).reshape(-1, osize[0] * osize[1]), axis=1)
    np.testing.assert_array_equal(got.reshape(y.shape), n(y))


def test_adaptive_none_entries_and_1d():
    x = rnd(2, 3, 6, 7)
    assert F.adaptive_avg_pool2d(t(x), (None, 3)).shape == (2, 3, 6, 3)
    assert nn.AdaptiveAvgPool2d((4, None))(t(x)).shape == (2, 3, 4, 7)
    x1 = rnd(2, 3, 10)
    np.testing.assert_allclose(n(F.adaptive_avg_pool1d(t(x1), 4)),
                               np_adaptive(x1[:, :, None], (1, 4), np.mean)[:, :, 0], rtol=1e-12)
    y, idx = F.adaptive_max_pool1d(t(x1), 4, return_indices=True)
    np.testing.assert_array_equal(n(y), np_adaptive(x1[:, :, None], (1, 4), np.max)[:, :, 0])


@pytest.mark.parametrize("op", [
    lambda x: F.max_pool2d(x, 3, 2, 1),
    lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 1), (2, 1), ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1),
    lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 1), ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    lambda x: F.avg_pool1d(x[:, :, 0], 3, 2, 1),
    lambda x: F.max_pool1d(x[:, :, 1], 3, 2),
    lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    lambda x: F.adaptive_max_pool2d(x, (3, 4)),
    lambda x: F.adaptive_avg_pool1d(x[:, :, 2], 4),
])
def test_pool_gradcheck(op):
    # distinct values, so a max is never tied (finite differences need a unique argmax)
    x = RNG.permutation(2 * 2 * 6 * 7).reshape(2, 2, 6, 7) / 10.0
    gradcheck(op, x)


# ---- torch ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,xs,args,kw", [
    ("max_pool2d", (2, 3, 9, 9), (3, 2, 1), {}),
    ("max_pool2d", (64 // 8, 64 // 8, 16, 16), (3, 2, 1), {}),              # ResNet's stem
    ("max_pool2d", (2, 3, 9, 10), ((3, 2), (2, 3), (1, 1)), {"dilation": (2, 1),
                                                             "ceil_mode": True}),
    ("max_pool2d", (3, 9, 10), (2,), {"ceil_mode": True}),
    ("max_pool1d", (2, 3, 10), (3, 2, 1), {"ceil_mode": True}),
    ("avg_pool2d", (2, 3, 9, 9), (3, 2, 1), {}),
    ("avg_pool2d", (2, 3, 9, 10), ((3, 2), (2, 3), (1, 1)), {"ceil_mode": True,
                                                             "count_include_pad": False}),
    ("avg_pool2d", (1, 3, 9, 10), ((3, 2), (2, 3), (1, 1)), {"divisor_override": 5}),
    ("avg_pool1d", (2, 3, 10), (3, 2, 1), {"ceil_mode": True, "count_include_pad": False}),
    ("adaptive_avg_pool2d", (2, 3, 9, 10), ((4, 3),), {}),
    ("adaptive_avg_pool2d", (3, 5, 7), (3,), {}),
    ("adaptive_max_pool2d", (2, 3, 9, 10), ((4, 3),), {}),
    ("adaptive_avg_pool1d", (2, 3, 10), (4,), {}),
    ("adaptive_max_pool1d", (2, 3, 10), (4,), {}),
])
def test_pool_vs_torch(torch, dtype, name, xs, args, kw):
    x = (ties(*xs) + (0 if "max" in name else 0.5 * rnd(*xs))).astype(dtype)
    perm = len(xs) == 4 and xs[-1] == xs[-2]
    if perm:                 # non-contiguous input: swapped in memory, swapped back by a view
        x = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    cx, tx = t(x, True), torch.tensor(x, requires_grad=True)
    cin, tin = (cx.transpose(-1, -2), tx.transpose(-1, -2)) if perm else (cx, tx)
    if "max" in name:
        kw = dict(kw, return_indices=True)
    cy, ty = getattr(F, name)(cin, *args, **kw), getattr(torch.nn.functional, name)(tin, *args,
                                                                                  **kw)
    if "max" in name:
        np.testing.assert_array_equal(n(cy[1]), ty[1].numpy())
        cy, ty = cy[0], ty[0]
    g = rnd(*ty.shape).astype(dtype)
    cy.backward(t(g))
    ty.backward(torch.tensor(g))
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=tol, atol=tol)


def test_pool_modules_match_torch(torch):
    x = rnd(2, 3, 9, 8).astype(np.float32)
    for make in (lambda m: m.MaxPool2d(3, 2, 1), lambda m: m.MaxPool2d((2, 3), ceil_mode=True),
                 lambda m: m.AvgPool2d(3, 2, 1, count_include_pad=False),
                 lambda m: m.AdaptiveAvgPool2d((None, 3)), lambda m: m.AdaptiveMaxPool2d(4)):
        cm, tm = make(nn), make(torch.nn)
        assert repr(cm) == repr(tm)
        np.testing.assert_allclose(n(cm(t(x))), tm(torch.tensor(x)).numpy(), rtol=1e-6)
    x1 = x[:, :, 0]
    for make in (lambda m: m.MaxPool1d(3), lambda m: m.AvgPool1d(3, 2, 1),
                 lambda m: m.AdaptiveAvgPool1d(3), lambda m: m.AdaptiveMaxPool1d(3)):
        cm, tm = make(nn), make(torch.nn)
        assert repr(cm) == repr(tm)
        np.testing.assert_allclose(n(cm(t(x1))), tm(torch.tensor(x1)).numpy(), rtol=1e-6)
    y, idx = nn.MaxPool2d(2, return_indices=True)(t(x))
    assert idx.shape == y.shape == (2, 3, 4, 4)


# ---- errors ------------------------------------------------------------------------------

ERRORS = [
    (lambda: F.max_pool2d(t(rnd(1, 3, 5, 5)), 3, padding=2), RuntimeError,
     "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and "
     "dilation=1"),
    (lambda: F.max_pool2d(t(rnd(1, 3, 2, 2)), 3), RuntimeError,
     "Given input size: (3x2x2). Calculated output size: (3x0x0). Output size is too small"),
    (lambda: F.max_pool2d(t(rnd(1, 3, 5, 5)), 0, stride=1), RuntimeError,
     "kernel size should be greater than zero, but got kH: 0 kW: 0"),
    (lambda: F.max_pool2d(t(rnd(1, 3, 5, 5)), 2, stride=0), RuntimeError,
     "stride should not be zero"),
    (lambda: F.max_pool2d(t(rnd(1, 3, 5, 5)), 2, dilation=0), RuntimeError,
     "dilation should be greater than zero, but got dilationH: 0 dilationW: 0"),
    (lambda: F.max_pool2d(t(rnd(1, 3, 5, 5)), 2, padding=-1), RuntimeError,
     "pad must be non-negative, but got pad: -1"),
    (lambda: F.max_pool2d(t(rnd(1, 3, 5, 5)), (1, 2, 3)), RuntimeError,
     "max_pool2d: kernel_size must either be a single int, or a tuple of two ints"),
    (lambda: F.max_pool2d(t(rnd(3, 5)), 2), RuntimeError,
     "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input"),
    (lambda: F.max_pool1d(t(rnd(3, 5, 5, 5)), 2), RuntimeError,
     "max_pool1d: Expected 2D or 3D (batch mode) tensor"),
    (lambda: F.avg_pool2d(t(rnd(1, 3, 4, 4)), 2, divisor_override=0), RuntimeError,
     "divisor must be not zero"),
    (lambda: F.avg_pool1d(t(rnd(1, 3, 5)), 3, padding=2), RuntimeError,
     "pad should be at most half of effective kernel size"),
    (lambda: F.avg_pool1d(t(rnd(3, 5, 5, 5)), 2), RuntimeError,
     "Expected 2 to 3 dimensions, but got 4-dimensional tensor for argument #1 'self'"),
    (lambda: F.adaptive_avg_pool2d(t(rnd(1, 3, 4, 4)), (-1, 2)), RuntimeError,
     "elements of output_size must be greater than or equal to 0 but received {-1, 2}"),
    (lambda: F.adaptive_avg_pool2d(t(rnd(1, 3, 0, 4)), (2, 2)), RuntimeError,
     "Expected input to have non-zero size for non-batch dimensions, but input has sizes "
     "[1, 3, 0, 4] with dimension 2 being empty"),
    (lambda: F.adaptive_avg_pool2d(t(rnd(3, 4)), (2, 2)), ValueError,
     "Input dimension should be at least 3"),
    (lambda: F.adaptive_avg_pool2d(t(rnd(1, 3, 4, 4)), (2, 2, 2)), RuntimeError,
     "adaptive_avg_pool2d: output_size must be 2"),
    (lambda: F.adaptive_avg_pool1d(t(rnd(1, 3, 4)), (2, 2)), RuntimeError,
     "adaptive_avg_pool1d() argument 'output_size' should contain one int (got 2)"),
    (lambda: F.max_pool2d(cddp.zeros((1, 1, 4, 4), dtype=cddp.int64), 2), RuntimeError,
     "expected a floating point input"),
]


@pytest.mark.parametrize("call,exc,msg", ERRORS)
def test_pool_errors(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert msg in str(info.value)


def test_pool_empty_batch():
    assert F.max_pool2d(t(rnd(0, 3, 5, 5)), 2).shape == (0, 3, 2, 2)
    assert F.adaptive_avg_pool2d(t(rnd(0, 3, 4, 4)), 2).shape == (0, 3, 2, 2)
    assert F.adaptive_avg_pool2d(t(rnd(1, 3, 4, 4)), (0, 2)).shape == (1, 3, 0, 2)
