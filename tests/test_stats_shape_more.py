"""Order statistics and NaN-aware reductions (cddp/_stats.py: median, nanmedian, kthvalue,
msort, aminmax, quantile, nanquantile, nansum, nanmean, std_mean, var_mean, logcumsumexp, dist,
cdist, trapezoid / trapz) and the shape / product / bookkeeping functions and Tensor methods of
cddp/_shape_ops.py (cross, diff, rot90, broadcast_*, ravel, inner, vdot, tensordot, diagflat,
combinations, tril/triu_indices, range, logspace, is_nonzero, typename, asarray, deterministic
flags, unfold, new, fill_diagonal_, sum_to_size, split_with_sizes, in-place comparisons, H / mH,
nbytes / itemsize).

NumPy / itertools / finite differences are the torch-free oracles; torch (the `torch` fixture
skips without it) checks values, indices and gradients. Known divergences from torch are strict
xfails that name the bug."""
import itertools
import math
import warnings

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

INF, NAN = math.inf, math.nan
RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 6))                          # tie-free
XN = X.copy()
XN[1, 2] = NAN
XN[3, :] = NAN                                           # a row all NaN
XT = RNG.integers(0, 4, (4, 6)).astype(np.float64)       # many ties
X3 = RNG.standard_normal((3, 4, 5))


def T(torch, a):
    return torch.from_numpy(np.array(a))


def close(got, want, rtol=1e-12, atol=1e-14):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol,
                               equal_nan=True)


def lower_median(a, axis):
    """NumPy reference for torch's median: the ((n - 1) // 2)-th smallest, NaN if any NaN."""
    s = np.sort(a, axis=axis)
    k = (a.shape[axis] - 1) // 2
    v = np.take(s, k, axis=axis)
    return np.where(np.isnan(a).any(axis=axis), NAN, v)


def lower_nanmedian(a, axis):
    s = np.sort(a, axis=axis)                                # NaN last
    cnt = (~np.isnan(a)).sum(axis=axis, keepdims=True)
    k = np.clip((cnt - 1) // 2, 0, None)
    return np.take_along_axis(s, k, axis=axis).squeeze(axis)


# ---- median / nanmedian / kthvalue / msort / aminmax --------------------------------------

@pytest.mark.parametrize("arr", [X, XN, XT, X3], ids=["plain", "nan", "ties", "3d"])
def test_median_and_nanmedian(arr):
    close(n(cddp.median(t(arr))), lower_median(arr.reshape(-1), 0))
    close(n(cddp.nanmedian(t(arr))), lower_nanmedian(arr.reshape(-1), 0))
    for d in range(-arr.ndim, arr.ndim):
        for keepdim in (False, True):
            for fn, ref in ((cddp.median, lower_median), (cddp.nanmedian, lower_nanmedian)):
                r = fn(t(arr), d, keepdim)
                want = ref(arr, d)
                if keepdim:
                    want = np.expand_dims(want, d)
                close(n(r.values), want)
                assert r.indices.dtype == cddp.int64 and tuple(r.indices.shape) == want.shape
                # the index points at the value (NaN at a NaN)
                idx = n(r.indices) if keepdim else np.expand_dims(n(r.indices), d)
                close(np.take_along_axis(arr, idx, d), np.expand_dims(n(r.values), d)
                      if not keepdim else n(r.values))
                v, i = r                                         # a tuple too
                assert v is r.values or np.array_equal(n(v), n(r.values), equal_nan=True)
    np.testing.assert_array_equal(n(t(arr).median(0)[0]), n(cddp.median(t(arr), 0).values))


def test_median_nan_propagates_and_scalar_cases():
    assert math.isnan(cddp.median(cddp.tensor([1.0, NAN, 2.0])).item())
    assert cddp.nanmedian(cddp.tensor([1.0, NAN, 2.0, 5.0])).item() == 2.0
    assert math.isnan(cddp.nanmedian(cddp.tensor([NAN, NAN])).item())
    assert cddp.median(cddp.tensor([[3, 1, 2], [5, 5, 0]])).item() == 2
    r = cddp.median(cddp.tensor(3.0), 0)
    assert r.values.item() == 3.0 and r.indices.item() == 0
    with pytest.raises(IndexError, match="Dimension out of range"):
        cddp.median(t(X), 2)


@pytest.mark.parametrize("arr", [X, XT, X3], ids=["plain", "ties", "3d"])
def test_kthvalue_msort(arr):
    for d in (0, -1):
        s = np.sort(arr, axis=d)
        for k in (1, 2, arr.shape[d]):
            r = cddp.kthvalue(t(arr), k, d)
            close(n(r.values), np.take(s, k - 1, axis=d))
            idx = np.expand_dims(n(r.indices), d)
            close(np.take_along_axis(arr, idx, d).squeeze(d), n(r.values))
            rk = t(arr).kthvalue(k, d, True)
            assert tuple(rk.values.shape) == np.expand_dims(np.take(s, 0, axis=d), d).shape
    np.testing.assert_array_equal(n(cddp.msort(t(arr))), np.sort(arr, axis=0))
    np.testing.assert_array_equal(n(t(arr).msort()), np.sort(arr, axis=0))
    for k in (0, arr.shape[-1] + 1):
        with pytest.raises(RuntimeError, match="kthvalue\\(\\): selected number k out of range"):
            cddp.kthvalue(t(arr), k)


def test_order_statistics_grad():
    gradcheck(lambda x: cddp.median(x), X)
    gradcheck(lambda x: cddp.median(x, 1).values, X)
    gradcheck(lambda x: cddp.nanmedian(x, 0).values, X)
    gradcheck(lambda x: cddp.kthvalue(x, 2, 0).values, X)
    gradcheck(cddp.msort, X)


def test_aminmax():
    for arr in (X, XN, XT.astype(np.int64)):
        r = cddp.aminmax(t(arr))
        close(n(r.min), np.min(arr))
        close(n(r.max), np.max(arr))
        mn, mx = cddp.aminmax(t(arr), dim=1, keepdim=True)
        close(n(mn), np.min(arr, 1, keepdims=True))
        close(n(mx), np.max(arr, 1, keepdims=True))
        rk = t(arr).aminmax(keepdim=True)
        assert tuple(rk.max.shape) == (1, 1)
    with pytest.raises(RuntimeError, match="aminmax\\(\\): cannot compute aminmax over an empty "
                                           "dimension as the operation has no identity"):
        cddp.aminmax(cddp.tensor([]))


def test_order_statistics_vs_torch(torch):
    for arr in (X, XN, XT, X3):
        c, tt = t(arr), T(torch, arr)
        close(n(cddp.median(c)), torch.median(tt).numpy())
        close(n(cddp.nanmedian(c)), torch.nanmedian(tt).numpy())
        for d in (0, 1, -1):
            for kd in (False, True):
                for name in ("median", "nanmedian"):
                    a, b = getattr(cddp, name)(c, d, kd), getattr(torch, name)(tt, d, kd)
                    close(n(a.values), b.values.numpy())
                    if arr is X or arr is X3:                    # ties / NaN: unspecified
                        np.testing.assert_array_equal(n(a.indices), b.indices.numpy())
                for k in (1, 2, 3):
                    a, b = cddp.kthvalue(c, k, d, kd), torch.kthvalue(tt, k, d, kd)
                    close(n(a.values), b.values.numpy())
                    if arr is X or arr is X3:
                        np.testing.assert_array_equal(n(a.indices), b.indices.numpy())
        np.testing.assert_array_equal(n(cddp.msort(c)), torch.msort(tt).numpy())
        for kw in ({}, {"dim": 1, "keepdim": True}, {"keepdim": True}, {"dim": -1}):
            for x, y in zip(cddp.aminmax(c, **kw), torch.aminmax(tt, **kw)):
                close(n(x), y.numpy())
    for f in (lambda L, x: L.median(x), lambda L, x: L.median(x, 1)[0],
              lambda L, x: L.kthvalue(x, 2, 0)[0], lambda L, x: L.nanmedian(x, 0)[0]):
        a, b = t(X, requires_grad=True), T(torch, X).requires_grad_()
        w = RNG.standard_normal(tuple(f(torch, b).shape))
        f(cddp, a).backward(t(w))
        f(torch, b).backward(T(torch, w))
        close(n(a.grad), b.grad.numpy())


# ---- quantile / nanquantile ---------------------------------------------------------------

INTERP = ["linear", "lower", "higher", "midpoint", "nearest"]


@pytest.mark.parametrize("interp", INTERP)
def test_quantile_vs_numpy(interp):
    arr = X3
    for q in (0.0, 0.125, 0.3, 0.5, 1.0):
        for dim in (None, 0, 2, -1):
            for keepdim in (False, True):
                got = n(cddp.quantile(t(arr), q, dim, keepdim, interpolation=interp))
                want = np.quantile(arr, q, axis=dim, keepdims=keepdim, method=interp)
                close(got, want)
    qs = np.array([0.1, 0.5, 0.9])
    got = cddp.quantile(t(arr), t(qs), 1, True, interpolation=interp)
    want = np.quantile(arr, qs, axis=1, keepdims=True, method=interp)
    assert tuple(got.shape) == want.shape == (3, 3, 1, 5)
    close(n(got), want)
    close(n(cddp.quantile(t(arr), t(qs), interpolation=interp)),
          np.quantile(arr, qs, method=interp))
    close(n(t(arr).quantile(0.3, 0, interpolation=interp)),
          np.quantile(arr, 0.3, axis=0, method=interp))


@pytest.mark.parametrize("interp", INTERP)
def test_nanquantile_and_nan_rows(interp):
    for q in (0.0, 0.4, 1.0):
        for dim in (None, 1):
            got = n(cddp.nanquantile(t(XN), q, dim, interpolation=interp))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)      # the all-NaN row
                want = np.nanquantile(XN, q, axis=dim, method=interp)
            close(got, want)
            # quantile: a row holding NaN is NaN
            gq = n(cddp.quantile(t(XN), q, dim, interpolation=interp))
            wq = np.quantile(XN, q, axis=dim, method=interp)
            close(gq, wq)
    got = cddp.nanquantile(t(XN), t(np.array([0.25, 0.75])), 1, True, interpolation=interp)
    assert tuple(got.shape) == (2, 4, 1)
    assert tuple(t(XN).nanquantile(0.5, keepdim=True).shape) == (1, 1)


def test_quantile_errors_and_grad():
    with pytest.raises(RuntimeError, match="quantile\\(\\) input tensor must be either float "
                                           "or double dtype"):
        cddp.quantile(cddp.tensor([1, 2]), 0.5)
    with pytest.raises(RuntimeError, match="q must be a scalar or 1D tensor"):
        cddp.quantile(t(X), t(np.array([[0.5]])))
    with pytest.raises(RuntimeError, match="quantile\\(\\) q"):
        cddp.quantile(t(X), 1.5)
    with pytest.raises(RuntimeError, match="quantile\\(\\) q values must be in the range"):
        cddp.quantile(t(X), t(np.array([0.5, -0.1])))
    gradcheck(lambda x: cddp.quantile(x, 0.3, 1), X)
    gradcheck(lambda x: cddp.quantile(x, t(np.array([0.2, 0.75])), 0, interpolation="midpoint"),
              X)
    gradcheck(lambda x: cddp.nanquantile(x, 0.4), X)


def test_quantile_bad_interpolation_error_type():
    with pytest.raises(RuntimeError, match="interpolation must be one of linear, lower, higher, "
                                           "midpoint or nearest"):
        cddp.quantile(t(X), 0.5, interpolation="foo")


def test_quantile_vs_torch(torch):
    for arr in (X3, XN):
        c, tt = t(arr), T(torch, arr)
        for q in (0.0, 0.3, 0.5, 1.0, [0.1, 0.5, 0.9]):
            cq = q if isinstance(q, float) else t(np.array(q))
            tq = q if isinstance(q, float) else T(torch, np.array(q))
            for interp in INTERP:
                for d in (None, 0, -1):
                    for kd in (False, True):
                        for name in ("quantile", "nanquantile"):
                            close(n(getattr(cddp, name)(c, cq, d, kd, interpolation=interp)),
                                  getattr(torch, name)(tt, tq, d, kd,
                                                       interpolation=interp).numpy())
    for f in (lambda L, x: L.quantile(x, 0.3, 1),
              lambda L, x: L.nanquantile(x, 0.4),
              lambda L, x: L.quantile(x, L.tensor([0.2, 0.75], dtype=L.float64), 0,
                                      interpolation="midpoint")):
        a, b = t(X, requires_grad=True), T(torch, X).requires_grad_()
        w = RNG.standard_normal(tuple(f(torch, b).shape))
        f(cddp, a).backward(t(w))
        f(torch, b).backward(T(torch, w))
        close(n(a.grad), b.grad.numpy())


# ---- nansum / nanmean / std_mean / var_mean / logcumsumexp --------------------------------

def test_nansum_nanmean():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for dim in (None, 0, 1, (0, 1)):
            for kd in (False, True):
                if dim is None and kd:
                    continue
                args = () if dim is None else (dim, kd)
                close(n(cddp.nansum(t(XN), *args)), np.nansum(XN, axis=dim, keepdims=kd))
                close(n(cddp.nanmean(t(XN), *args)), np.nanmean(XN, axis=dim, keepdims=kd))
    close(n(t(XN).nansum()), np.nansum(XN))
    close(n(t(XN).nanmean(1)), np.nanmean(XN[:3], 1).tolist() + [NAN])
    r = cddp.nansum(cddp.tensor([1.0, NAN]), dtype=cddp.float64)
    assert r.dtype == cddp.float64 and r.item() == 1.0
    assert cddp.nansum(cddp.tensor([1, 2])).item() == 3
    with pytest.raises(RuntimeError, match="nanmean\\(\\): expected input to have floating point"):
        cddp.nanmean(cddp.tensor([1, 2]))
    g = t(np.array([1.0, NAN, 3.0]), requires_grad=True)
    cddp.nanmean(g).backward()
    close(n(g.grad), [0.5, 0.0, 0.5])


STD_FORMS = [((), {}), ((False,), {}), ((True,), {}), ((1,), {}), ((1, False), {}),
             ((1, True, True), {}), ((0,), {"correction": 0}), ((), {"correction": 2}),
             (((0, 1),), {"keepdim": True}), ((None,), {"keepdim": True, "correction": 0})]


def _ddof(args, kw):
    if "correction" in kw:
        return kw["correction"]
    unb = [a for a in args if isinstance(a, bool)]
    return 0 if unb and not unb[0] else 1


@pytest.mark.parametrize("args,kw", STD_FORMS)
def test_std_var_mean(args, kw):
    dim = None if not args or isinstance(args[0], bool) else args[0]
    keepdim = kw.get("keepdim", len(args) == 3 and args[2])
    ddof = _ddof(args, kw)
    s, m = cddp.std_mean(t(X), *args, **kw)
    v, m2 = cddp.var_mean(t(X), *args, **kw)
    close(n(s), np.std(X, axis=dim, ddof=ddof, keepdims=keepdim))
    close(n(v), np.var(X, axis=dim, ddof=ddof, keepdims=keepdim))
    close(n(m), np.mean(X, axis=dim, keepdims=keepdim))
    np.testing.assert_array_equal(n(m), n(m2))


def test_logcumsumexp():
    for arr in (X, np.array([[-INF, -INF, 1.0, 2.0], [3.0, -INF, INF, 0.0]]),
                np.array([[1000.0, 1000.0, -1000.0, 0.0]]), np.array([[NAN, 1.0, 2.0]])):
        for d in range(-arr.ndim, arr.ndim):
            with np.errstate(invalid="ignore"):
                want = np.logaddexp.accumulate(arr, axis=d)
            close(n(cddp.logcumsumexp(t(arr), d)), want)
    close(n(t(X).logcumsumexp(0)), np.logaddexp.accumulate(X, axis=0))
    r = cddp.logcumsumexp(cddp.tensor([-INF, -INF]), 0)
    assert n(r).tolist() == [-INF, -INF]
    gradcheck(lambda x: cddp.logcumsumexp(x, 1), X)


def test_reductions_vs_torch(torch):
    c, tt = t(XN), T(torch, XN)
    for dim in (None, 0, (0, 1)):
        for kd in (False, True):
            if dim is None and kd:
                continue
            args = () if dim is None else (dim, kd)
            close(n(cddp.nansum(c, *args)), torch.nansum(tt, *args).numpy())
            close(n(cddp.nanmean(c, *args)), torch.nanmean(tt, *args).numpy())
    for args, kw in STD_FORMS:
        for name in ("std_mean", "var_mean"):
            for x, y in zip(getattr(cddp, name)(t(X), *args, **kw),
                            getattr(torch, name)(T(torch, X), *args, **kw)):
                close(n(x), y.numpy())
    for arr in ([[-INF, -INF, 1.0, 2.0], [3.0, -INF, INF, 0.0]], [[1000.0, 1000.0, -1000.0, 0.0]],
                [[NAN, 1.0, 2.0, 3.0]]):
        a = np.array(arr)
        for d in (0, 1, -1):
            close(n(cddp.logcumsumexp(t(a), d)), torch.logcumsumexp(T(torch, a), d).numpy())
    for f in (lambda L, x: L.logcumsumexp(x, 1), lambda L, x: L.nanmean(x, 0),
              lambda L, x: L.std_mean(x, 1)[0] + L.std_mean(x, 1)[1]):
        a, b = t(X, requires_grad=True), T(torch, X).requires_grad_()
        w = RNG.standard_normal(tuple(f(torch, b).shape))
        f(cddp, a).backward(t(w))
        f(torch, b).backward(T(torch, w))
        close(n(a.grad), b.grad.numpy())


# ---- dist / cdist / trapezoid -------------------------------------------------------------

def np_cdist(a, b, p):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == 0:
        return (d != 0).sum(-1).astype(a.dtype)
    if math.isinf(p):
        return d.max(-1)
    return (d ** p).sum(-1) ** (1.0 / p)


P_VALUES = [0, 1, 2, INF, 3, 0.5]
Y1 = RNG.standard_normal((2, 30, 4))          # > 25 rows: p = 2 takes the matrix-product path
Y2 = RNG.standard_normal((2, 7, 4))


@pytest.mark.parametrize("p", P_VALUES)
def test_dist_cdist_values(p):
    d = X * 0.5 + 1
    flat = (X - d).reshape(-1)
    want = np.count_nonzero(flat) if p == 0 else np.linalg.norm(flat, ord=p)
    close(n(cddp.dist(t(X), t(d), p)), want)
    close(n(t(X).dist(t(d), p)), want)
    for a, b in ((X[:, :4], Y2[0]), (Y1, Y2), (Y1[:, :5], Y2)):
        close(n(cddp.cdist(t(a), t(b), p)), np_cdist(a, b, p), rtol=1e-9, atol=1e-9)
    for mode in ("use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        close(n(cddp.cdist(t(Y1[:, :5]), t(Y2), compute_mode=mode)), np_cdist(Y1[:, :5], Y2, 2),
              rtol=1e-9, atol=1e-9)


def test_cdist_grad_and_errors():
    a = Y1[0, :4].copy()
    b = Y2[0, :3].copy()
    for p in (1, 2, 3, INF):
        gradcheck(lambda x, y: cddp.cdist(x, y, p), a, b, atol=1e-5)
    gradcheck(lambda x, y: cddp.cdist(x, y), Y1[0], b, atol=1e-5)                 # mm path
    # the mm path at a zero distance: finite
    z = t(Y1[0], requires_grad=True)
    cddp.cdist(z, t(Y1[0, :2])).sum().backward()
    assert np.isfinite(n(z.grad)).all()
    with pytest.raises(RuntimeError, match="cdist only supports at least 2D tensors"):
        cddp.cdist(cddp.ones(3), cddp.ones(3))
    with pytest.raises(RuntimeError, match="X1 and X2 must have the same number of columns"):
        cddp.cdist(cddp.ones(2, 3), cddp.ones(2, 4))
    with pytest.raises(RuntimeError, match="cdist only supports non-negative p values"):
        cddp.cdist(cddp.ones(2, 3), cddp.ones(2, 3), p=-1)
    gradcheck(lambda x, y: cddp.dist(x, y, 3), X, X * 0.3)


@pytest.mark.parametrize("p", [2, 3])
def test_cdist_zero_distance_grad(p):
    a = t(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    cddp.cdist(a, t(np.array([[1.0, 2.0]])), p).sum().backward()
    assert np.isfinite(n(a.grad)).all()
    close(n(a.grad)[0], [0.0, 0.0])


def test_cdist_p0_backward():
    a = t(Y2[0], requires_grad=True)
    out = cddp.cdist(a, t(Y2[1]), 0)
    assert out.requires_grad
    out.sum().backward()
    close(n(a.grad), np.zeros_like(Y2[0]))


def test_cdist_inf_tie_grad():
    """torch sends the full gradient to each coordinate tied for the maximum (amax splits
    it); the sign follows x1 - x2, and an untied coordinate gets none."""
    a = t(np.array([[3.0, 4.0], [0.0, 5.0]]), requires_grad=True)
    out = cddp.cdist(a, t(np.array([[1.0, 2.0]])), INF)
    close(n(out), [[2.0], [3.0]])
    out.sum().backward()
    close(n(a.grad), [[1.0, 1.0], [0.0, 1.0]])
    b = t(np.array([[1.0, 2.0]]), requires_grad=True)
    cddp.cdist(t(np.array([[3.0, 0.0]])), b, INF).sum().backward()
    close(n(b.grad), [[-1.0, 1.0]])


def test_trapezoid():
    z = RNG.standard_normal((3, 5))
    xs = np.cumsum(RNG.uniform(0.1, 1, 5))
    x2 = np.cumsum(RNG.uniform(0.1, 1, (3, 5)), 1)
    for fn in (cddp.trapezoid, cddp.trapz):
        close(n(fn(t(z))), np.trapezoid(z))
        close(n(fn(t(z), dx=0.3)), np.trapezoid(z, dx=0.3))
        close(n(fn(t(z), dim=0)), np.trapezoid(z, axis=0))
        close(n(fn(t(z), dx=2.0, dim=0)), np.trapezoid(z, dx=2.0, axis=0))
        close(n(fn(t(z), t(xs))), np.trapezoid(z, xs))
        close(n(fn(t(z), t(x2))), np.trapezoid(z, x2))
        close(n(fn(t(z), t(xs[:3]), dim=0)), np.trapezoid(z, xs[:3], axis=0))
        close(n(fn(t(z), t(np.cumsum(x2, 0)), dim=0)), np.trapezoid(z, np.cumsum(x2, 0), axis=0))
    assert cddp.trapezoid(cddp.tensor([1.0, 2.0, 4.0])).item() == 4.5
    gradcheck(lambda y: cddp.trapezoid(y, dx=0.5), z)
    gradcheck(lambda y, x: cddp.trapezoid(y, x), z[0], xs)


def test_dist_cdist_trapezoid_vs_torch(torch):
    for p in P_VALUES:
        close(n(cddp.dist(t(X), t(X * 0.5 + 1), p)),
              torch.dist(T(torch, X), T(torch, X * 0.5 + 1), p).numpy())
        for a, b in ((X[:, :4], Y2[0]), (Y1, Y2), (Y1[:, :5], Y2)):
            close(n(cddp.cdist(t(a), t(b), p)), torch.cdist(T(torch, a), T(torch, b), p).numpy(),
                  rtol=1e-9, atol=1e-9)
    for p in (1, 2, 3, INF):
        for a_, b_ in ((Y1[:, :5], Y2), (Y1, Y2)):
            ca, cb = t(a_, requires_grad=True), t(b_, requires_grad=True)
            ta, tb = T(torch, a_).requires_grad_(), T(torch, b_).requires_grad_()
            cddp.cdist(ca, cb, p).sum().backward()
            torch.cdist(ta, tb, p).sum().backward()
            close(n(ca.grad), ta.grad.numpy(), rtol=1e-7, atol=1e-9)
            close(n(cb.grad), tb.grad.numpy(), rtol=1e-7, atol=1e-9)
    z = RNG.standard_normal((3, 5))
    xs = np.cumsum(RNG.uniform(0.1, 1, 5))
    for kw in ({}, {"dx": 0.3}, {"dim": 0}):
        close(n(cddp.trapezoid(t(z), **kw)), torch.trapezoid(T(torch, z), **kw).numpy())
        close(n(cddp.trapz(t(z), **kw)), torch.trapz(T(torch, z), **kw).numpy())
    close(n(cddp.trapezoid(t(z), t(xs))), torch.trapezoid(T(torch, z), T(torch, xs)).numpy())


# ---- cross / diff / rot90 -----------------------------------------------------------------

A3 = RNG.standard_normal((2, 3, 4))
B3 = RNG.standard_normal((2, 3, 4))


def test_cross():
    close(n(cddp.cross(t(A3), t(B3), dim=1)), np.cross(A3, B3, axis=1))
    close(n(cddp.cross(t(A3), t(B3), dim=-2)), np.cross(A3, B3, axis=1))
    close(n(t(A3).cross(t(B3), 1)), np.cross(A3, B3, axis=1))
    a, b = A3[:, :, :3], B3[:, :, :3]
    close(n(cddp.cross(t(a), t(b), dim=2)), np.cross(a, b, axis=2))
    with pytest.warns(UserWarning, match="Using torch.cross without specifying the dim arg is "
                                         "deprecated"):
        r = cddp.cross(t(A3), t(B3))                 # the first dim of size 3: dim 1
    close(n(r), np.cross(A3, B3, axis=1))
    assert cddp.cross(cddp.tensor([1, 0, 0]), cddp.tensor([0, 1, 0]), dim=0).tolist() == [0, 0, 1]
    with pytest.raises(RuntimeError, match="linalg.cross: inputs dimension 0 must have length 3. "
                                           "Got 2 and 2"):
        cddp.cross(t(A3), t(B3), dim=0)
    gradcheck(lambda x, y: cddp.cross(x, y, dim=0), A3[0], B3[0])


@pytest.mark.parametrize("nth", [0, 1, 2, 3, 5])
def test_diff(nth):
    for d in (-1, 0, 1):
        close(n(cddp.diff(t(A3), n=nth, dim=d)), np.diff(A3, n=nth, axis=d))
    close(n(cddp.diff(t(A3), nth, 0, prepend=t(B3[:1]), append=t(B3))),
          np.diff(A3, n=nth, axis=0, prepend=B3[:1], append=B3))
    ints = RNG.integers(-5, 5, (3, 4))
    app = ints[:, :2] if nth else None
    r = cddp.diff(t(ints), nth, append=None if app is None else t(app))
    assert r.dtype == cddp.int64
    np.testing.assert_array_equal(n(r), np.diff(ints, nth) if app is None else
                                  np.diff(ints, nth, append=app))
    bools = np.array([True, False, False, True, True])
    r = cddp.diff(t(bools), nth)
    assert r.dtype == cddp.bool
    np.testing.assert_array_equal(n(r), np.diff(bools, nth))


def test_diff_n0_ignores_prepend_append():
    r = cddp.diff(t(A3), 0, 0, prepend=t(B3[:1]), append=t(B3))
    assert tuple(r.shape) == A3.shape


def test_diff_method_errors_grad():
    close(n(t(A3).diff()), np.diff(A3))
    with pytest.raises(RuntimeError, match="diff expects input to be at least one-dimensional"):
        cddp.diff(cddp.tensor(1.0))
    gradcheck(lambda x: cddp.diff(x, n=2, dim=1), A3[0])


@pytest.mark.parametrize("k", range(-5, 6))
def test_rot90(k):
    for dims in ((0, 1), (2, 0), (-1, -2)):
        np.testing.assert_array_equal(n(cddp.rot90(t(A3), k, dims)), np.rot90(A3, k, dims))
    np.testing.assert_array_equal(n(t(A3).rot90(k)), np.rot90(A3, k))


def test_rot90_errors_grad():
    with pytest.raises(RuntimeError, match="expected rotation dims to be different"):
        cddp.rot90(t(A3), 1, (0, 0))
    with pytest.raises(RuntimeError, match="expected total dims >= 2, but got total dims = 1"):
        cddp.rot90(cddp.ones(3))
    with pytest.raises(RuntimeError, match="expected total rotation dims == 2"):
        cddp.rot90(t(A3), 1, (0, 1, 2))
    gradcheck(lambda x: cddp.rot90(x, 3, (1, 2)), A3[:1, :2])


def test_cross_diff_rot90_vs_torch(torch):
    ca, cb, ta, tb = t(A3), t(B3), T(torch, A3), T(torch, B3)
    close(n(cddp.cross(ca, cb, dim=1)), torch.cross(ta, tb, dim=1).numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        close(n(cddp.cross(ca, cb)), torch.cross(ta, tb).numpy())
    for k in (-3, 1, 2, 7):
        np.testing.assert_array_equal(n(cddp.rot90(ca, k, (2, 0))),
                                      torch.rot90(ta, k, (2, 0)).numpy())
    for nth in (1, 2):
        close(n(cddp.diff(ca, nth, 0, prepend=cb[:1], append=cb)),
              torch.diff(ta, nth, 0, prepend=tb[:1], append=tb).numpy())
    b = np.array([True, False, False, True])
    np.testing.assert_array_equal(n(cddp.diff(t(b))), torch.diff(T(torch, b)).numpy())
    for f in (lambda L, x: L.rot90(x, 3, (1, 2)), lambda L, x: L.diff(x, n=2, dim=1),
              lambda L, x: L.cross(x, x * x, dim=1)):
        a, b_ = t(A3, requires_grad=True), T(torch, A3).requires_grad_()
        w = RNG.standard_normal(tuple(f(torch, b_).shape))
        f(cddp, a).backward(t(w))
        f(torch, b_).backward(T(torch, w))
        close(n(a.grad), b_.grad.numpy())


# ---- broadcast / ravel / inner / vdot / tensordot / diagflat ------------------------------

def test_broadcast():
    row = A3[0, :1]                                          # (1, 4)
    np.testing.assert_array_equal(n(cddp.broadcast_to(t(row), (2, 3, 4))),
                                  np.broadcast_to(row, (2, 3, 4)))
    np.testing.assert_array_equal(n(t(row).broadcast_to((5, 1, 4))),
                                  np.broadcast_to(row, (5, 1, 4)))
    np.testing.assert_array_equal(n(cddp.broadcast_to(t(row), (-1, 4))), row)
    with pytest.raises(RuntimeError):
        cddp.broadcast_to(t(A3), (3, 4))
    outs = cddp.broadcast_tensors(t(row), t(A3[:, :, :1]), cddp.tensor(1.0, dtype=cddp.float64))
    for o, w in zip(outs, np.broadcast_arrays(row, A3[:, :, :1], np.float64(1.0))):
        np.testing.assert_array_equal(n(o), w)
    assert len(cddp.broadcast_tensors([t(row), t(A3)])) == 2
    assert tuple(cddp.broadcast_shapes((2, 1, 4), (3, 1), 1)) == \
        np.broadcast_shapes((2, 1, 4), (3, 1), 1)
    assert tuple(cddp.broadcast_shapes()) == ()
    with pytest.raises(RuntimeError):
        cddp.broadcast_shapes((2, 3), (4, 3))
    with pytest.raises(RuntimeError):
        cddp.broadcast_tensors(t(A3[0, :2]), t(A3))
    gradcheck(lambda x: cddp.broadcast_to(x, (3, 2, 4)), A3[:1, :2])


def test_broadcast_shapes_is_size():
    assert isinstance(cddp.broadcast_shapes((2, 1), (3,)), cddp.Size)


def test_ravel_inner_vdot():
    tr = t(A3).transpose(0, 2)
    np.testing.assert_array_equal(n(cddp.ravel(tr)), A3.transpose(2, 1, 0).ravel())
    np.testing.assert_array_equal(n(tr.ravel()), A3.transpose(2, 1, 0).ravel())
    close(n(cddp.inner(t(A3), t(B3[0]))), np.inner(A3, B3[0]))
    close(n(t(A3[0, 0]).inner(t(B3[0, 0]))), np.inner(A3[0, 0], B3[0, 0]))
    close(n(cddp.inner(cddp.tensor(2.0, dtype=cddp.float64), t(B3))), 2 * B3)
    with pytest.raises(RuntimeError, match="inner\\(\\) the last dimension must match on both "
                                           "input tensors but got shapes \\[2, 3, 4\\] and "
                                           "\\[3, 3\\]"):
        cddp.inner(t(A3), t(B3[0, :, :3]))
    close(n(cddp.vdot(t(A3[0, 0]), t(B3[0, 0]))), np.vdot(A3[0, 0], B3[0, 0]))
    close(n(t(A3[0, 0]).vdot(t(B3[0, 0]))), np.vdot(A3[0, 0], B3[0, 0]))
    with pytest.raises(RuntimeError, match="1D tensors expected, but got 2D and 2D tensors"):
        cddp.vdot(t(A3[0]), t(B3[0]))
    gradcheck(lambda x, y: cddp.inner(x, y), A3[0], B3[1])
    gradcheck(cddp.vdot, A3[0, 0], B3[0, 0])


def test_tensordot_diagflat():
    bt = B3.transpose(1, 2, 0).copy()                         # (3, 4, 2)
    close(n(cddp.tensordot(t(A3), t(bt), dims=([1, 2], [0, 1]))),
          np.tensordot(A3, bt, axes=([1, 2], [0, 1])))
    close(n(cddp.tensordot(t(A3), t(bt), dims=2)), np.tensordot(A3, bt, axes=2))
    close(n(cddp.tensordot(t(A3), t(B3[0].T.copy()), dims=1)), np.tensordot(A3, B3[0].T, axes=1))
    close(n(cddp.tensordot(t(A3), t(B3), dims=0)), np.tensordot(A3, B3, axes=0))
    close(n(cddp.tensordot(t(A3), t(B3[0]), dims=([1], [0]))),
          np.tensordot(A3, B3[0], axes=([1], [0])))
    close(n(cddp.tensordot(t(A3), t(B3[0]), dims=cddp.tensor([[1], [0]]))),
          np.tensordot(A3, B3[0], axes=([1], [0])))
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        cddp.tensordot(t(A3), t(B3), dims=([1], [2]))
    gradcheck(lambda x, y: cddp.tensordot(x, y, dims=([1, 2], [1, 0])), A3,
              np.ascontiguousarray(B3[0].T))
    for v, off in ((A3[0, :2], 0), (A3[0, 0], 1), (A3[0, 0], -2)):
        np.testing.assert_array_equal(n(cddp.diagflat(t(v), off)), np.diagflat(v, off))
    np.testing.assert_array_equal(n(t(A3[0, 0]).diagflat()), np.diagflat(A3[0, 0]))


def test_products_vs_torch(torch):
    bt = B3.transpose(1, 2, 0).copy()
    close(n(cddp.tensordot(t(A3), t(bt), dims=([1, 2], [0, 1]))),
          torch.tensordot(T(torch, A3), T(torch, bt), dims=([1, 2], [0, 1])).numpy())
    close(n(cddp.tensordot(t(A3), t(bt), dims=2)),
          torch.tensordot(T(torch, A3), T(torch, bt), dims=2).numpy())
    close(n(cddp.inner(t(A3), t(B3[0]))), torch.inner(T(torch, A3), T(torch, B3[0])).numpy())
    close(n(cddp.vdot(t(A3[0, 0]), t(B3[0, 0]))),
          torch.vdot(T(torch, A3[0, 0]), T(torch, B3[0, 0])).numpy())
    np.testing.assert_array_equal(n(cddp.diagflat(t(A3[0, :2]), -1)),
                                  torch.diagflat(T(torch, A3[0, :2]), -1).numpy())
    assert tuple(cddp.broadcast_shapes((2, 1, 4), (3, 1), 1)) == \
        tuple(torch.broadcast_shapes((2, 1, 4), (3, 1), 1))
    for f in (lambda L, x: L.inner(x, x[0]), lambda L, x: L.tensordot(x, x, dims=([1, 2], [1, 2])),
              lambda L, x: L.diagflat(x[0, :2], 1), lambda L, x: L.broadcast_to(x[:1], (3, 3, 4))):
        a, b = t(A3, requires_grad=True), T(torch, A3).requires_grad_()
        w = RNG.standard_normal(tuple(f(torch, b).shape))
        f(cddp, a).backward(t(w))
        f(torch, b).backward(T(torch, w))
        close(n(a.grad), b.grad.numpy())


# ---- combinations / tri indices / range / logspace ----------------------------------------

@pytest.mark.parametrize("r", [0, 2, 3, 5])
@pytest.mark.parametrize("wr", [False, True])
def test_combinations(r, wr):
    v = np.array([1.0, 2.0, 3.0, 4.0])
    gen = itertools.combinations_with_replacement if wr else itertools.combinations
    got = cddp.combinations(t(v), r, with_replacement=wr)
    if r == 0:
        assert tuple(got.shape) == (0,)
    else:
        want = np.array([[v[i] for i in c] for c in gen(range(4), r)]).reshape(-1, r)
        np.testing.assert_array_equal(n(got), want)
    assert got.dtype == cddp.float64


def test_combinations_errors_grad():
    assert cddp.combinations(cddp.tensor([1, 2, 3])).tolist() == [[1, 2], [1, 3], [2, 3]]
    with pytest.raises(RuntimeError, match="Expect a 1D vector, but got shape \\[2, 2\\]"):
        cddp.combinations(cddp.ones(2, 2))
    gradcheck(lambda x: cddp.combinations(x, 3), A3[0, 0])


def test_combinations_r1_shape():
    assert tuple(cddp.combinations(cddp.tensor([1.0, 2.0, 3.0]), 1).shape) == (3, 1)


@pytest.mark.parametrize("rc", [(3, 3), (4, 2), (2, 5), (0, 3)])
def test_tri_indices(rc):
    for off in (-5, -1, 0, 1, 3, 7):
        np.testing.assert_array_equal(n(cddp.tril_indices(*rc, off)),
                                      np.stack(np.tril_indices(rc[0], off, rc[1])))
        np.testing.assert_array_equal(n(cddp.triu_indices(*rc, off)),
                                      np.stack(np.triu_indices(rc[0], off, rc[1])))
    assert cddp.tril_indices(*rc).dtype == cddp.int64
    assert cddp.triu_indices(*rc, dtype=cddp.int32).dtype == cddp.int32


def test_range_and_logspace():
    with pytest.warns(UserWarning, match="torch.range is deprecated"):
        r = cddp.range(1, 4)
    assert r.dtype == cddp.float32 and r.tolist() == [1.0, 2.0, 3.0, 4.0]   # end included
    with pytest.warns(UserWarning):
        close(n(cddp.range(0, 1, 0.25)), [0, 0.25, 0.5, 0.75, 1.0])
        close(n(cddp.range(0, 1, 0.3)), [0, 0.3, 0.6, 0.9], rtol=1e-6)
        assert cddp.range(4, 1, -1).tolist() == [4.0, 3.0, 2.0, 1.0]
        assert cddp.range(1, 3, dtype=cddp.int64).tolist() == [1, 2, 3]
        assert cddp.range(1, 3, requires_grad=True).requires_grad
        with pytest.raises(RuntimeError, match="step must be nonzero"):
            cddp.range(0, 1, 0)
    close(n(cddp.logspace(0, 3, 4)), np.logspace(0, 3, 4), rtol=1e-6)
    close(n(cddp.logspace(-1, 2, 5, base=2)), np.logspace(-1, 2, 5, base=2), rtol=1e-6)
    r = cddp.logspace(0, 3, 4, dtype=cddp.float64)
    assert r.dtype == cddp.float64
    close(n(r), [1, 10, 100, 1000], rtol=1e-15)
    assert cddp.logspace(2, 3, 1).tolist() == [100.0]
    assert cddp.logspace(0, 2, 3).dtype == cddp.float32


def test_creation_vs_torch(torch):
    for rc in ((3, 3), (4, 2), (2, 5)):
        for off in (-1, 0, 2):
            np.testing.assert_array_equal(n(cddp.tril_indices(*rc, off)),
                                          torch.tril_indices(*rc, off).numpy())
            np.testing.assert_array_equal(n(cddp.triu_indices(*rc, off)),
                                          torch.triu_indices(*rc, off).numpy())
    for r in (2, 3):
        for wr in (False, True):
            np.testing.assert_array_equal(
                n(cddp.combinations(cddp.tensor([1.0, 2.0, 3.0, 4.0]), r, wr)),
                torch.combinations(torch.tensor([1.0, 2.0, 3.0, 4.0]), r, wr).numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for args in ((1, 4), (0, 1, 0.25), (0, 1, 0.3), (4, 1, -1)):
            np.testing.assert_array_equal(n(cddp.range(*args)), torch.range(*args).numpy())
    for args, kw in (((0, 3, 4), {}), ((-1, 2, 5), {"base": 2}), ((0, 3, 4), {"dtype": "float64"})):
        kc = {k: getattr(cddp, v) if k == "dtype" else v for k, v in kw.items()}
        kt = {k: getattr(torch, v) if k == "dtype" else v for k, v in kw.items()}
        close(n(cddp.logspace(*args, **kc)), torch.logspace(*args, **kt).numpy(), rtol=1e-6)


# ---- is_nonzero / typename / asarray / deterministic flags --------------------------------

def test_is_nonzero_typename_asarray():
    assert cddp.is_nonzero(cddp.tensor([1.5])) is True
    assert cddp.is_nonzero(cddp.tensor(0.0)) is False
    assert cddp.is_nonzero(cddp.tensor([False])) is False
    assert cddp.tensor([3]).is_nonzero() is True
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with no values is ambiguous"):
        cddp.is_nonzero(cddp.tensor([]))
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is "
                                           "ambiguous"):
        cddp.is_nonzero(cddp.tensor([1, 2]))
    assert cddp.typename(cddp.ones(2)) == "torch.FloatTensor"
    assert cddp.typename(cddp.ones(2, dtype=cddp.int64)) == "torch.LongTensor"
    assert cddp.typename(cddp.ones(2, dtype=cddp.float64)) == "torch.DoubleTensor"
    assert cddp.typename(cddp.ones(2, dtype=cddp.bool)) == "torch.BoolTensor"
    assert cddp.typename(3) == "int"
    assert cddp.typename(np.ones(2)) == "numpy.ndarray"
    a = cddp.asarray([1, 2, 3])
    assert a.dtype == cddp.int64 and a.tolist() == [1, 2, 3]
    assert cddp.asarray([1.0, 2.0]).dtype == cddp.float32
    arr = np.arange(3.0)
    b = cddp.asarray(arr)
    assert b.dtype == cddp.float64
    arr[0] = 7.0                                              # NumPy memory is shared
    assert b.tolist()[0] == 7.0
    c = cddp.asarray(arr, copy=True)
    arr[0] = 9.0
    assert c.tolist()[0] == 7.0
    assert cddp.asarray([1, 2], dtype=cddp.float64).dtype == cddp.float64
    assert cddp.asarray(3.5).shape == ()
    assert cddp.asarray([1.0, 2.0], requires_grad=True).requires_grad
    x = cddp.ones(2)
    assert cddp.asarray(x) is x
    assert cddp.asarray(x, copy=True) is not x
    with pytest.raises(ValueError):
        cddp.asarray([1.0, 2.0], copy=False)


def test_deterministic_flags():
    saved = (cddp.are_deterministic_algorithms_enabled(),
             cddp.is_deterministic_algorithms_warn_only_enabled())
    try:
        cddp.use_deterministic_algorithms(True)
        assert cddp.are_deterministic_algorithms_enabled() is True
        assert cddp.is_deterministic_algorithms_warn_only_enabled() is False
        assert cddp.get_deterministic_debug_mode() == 2
        cddp.use_deterministic_algorithms(True, warn_only=True)
        assert cddp.is_deterministic_algorithms_warn_only_enabled() is True
        assert cddp.get_deterministic_debug_mode() == 1
        cddp.set_deterministic_debug_mode("default")
        assert cddp.are_deterministic_algorithms_enabled() is False
        cddp.set_deterministic_debug_mode("error")
        assert cddp.get_deterministic_debug_mode() == 2
        cddp.use_deterministic_algorithms(False)
        assert cddp.are_deterministic_algorithms_enabled() is False
        assert cddp.get_deterministic_debug_mode() == 0
        with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
            cddp.set_deterministic_debug_mode("foo")
        with pytest.raises((TypeError, RuntimeError)):
            cddp.use_deterministic_algorithms(1)
    finally:
        cddp.use_deterministic_algorithms(saved[0], warn_only=saved[1])


# ---- Tensor methods: unfold / new / fill_diagonal_ / sum_to_size / split_with_sizes --------

U = RNG.standard_normal((2, 7, 4))
UNFOLD = [(1, 3, 1), (1, 3, 2), (1, 7, 1), (1, 1, 3), (-1, 2, 2), (0, 2, 1), (2, 4, 3)]


@pytest.mark.parametrize("d,size,step", UNFOLD)
def test_unfold_vs_sliding_window(d, size, step):
    dd = d % U.ndim
    win = np.lib.stride_tricks.sliding_window_view(U, size, axis=dd)
    want = np.take(win, np.arange(0, U.shape[dd] - size + 1, step), axis=dd)
    got = t(U).unfold(d, size, step)
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(n(got), want)


def test_unfold_errors_grad():
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 1 is 7 but size "
                                           "is 8"):
        t(U).unfold(1, 8, 1)
    with pytest.raises(RuntimeError, match="step is 0 but must be > 0"):
        t(U).unfold(1, 2, 0)
    assert cddp.tensor(3.0).unfold(0, 1, 1).tolist() == [3.0]
    gradcheck(lambda x: x.unfold(1, 4, 1), U[:1, :, :2])      # overlapping windows add up
    gradcheck(lambda x: x.unfold(0, 2, 2), U[0, :5, 0])


def test_new_fill_diagonal():
    x = t(U)
    r = x.new([1, 2])
    assert r.dtype == cddp.float64 and r.tolist() == [1.0, 2.0]
    assert tuple(x.new(2, 3).shape) == (2, 3) and x.new(2, 3).dtype == cddp.float64
    assert tuple(x.new(cddp.Size([2, 3])).shape) == (2, 3)
    i = cddp.tensor([1, 2])
    assert i.new((2, 3)).dtype == cddp.int64 and i.new((2, 3)).tolist() == [2, 3]
    for shp in ((3, 3), (5, 3), (3, 5), (7, 3), (8, 2), (2, 2, 2)):
        for wrap in (False, True):
            z = cddp.zeros(*shp)
            assert z.fill_diagonal_(5.0, wrap) is z
            want = np.zeros(shp, np.float32)
            np.fill_diagonal(want, 5.0, wrap=wrap)
            np.testing.assert_array_equal(n(z), want)
    with pytest.raises(RuntimeError, match="all dimensions of input must be of equal length"):
        cddp.zeros(2, 3, 2).fill_diagonal_(1.0)
    with pytest.raises(RuntimeError, match="dimensions must larger than 1"):
        cddp.zeros(3).fill_diagonal_(1.0)


def test_new_no_args_is_empty():
    assert tuple(cddp.ones(2).new().shape) == (0,)


@pytest.mark.parametrize("size", [(7, 4), (1, 4), (7, 1), (1, 1), (2, 1, 4), (2, 7, 4),
                                  (1, 7, 1), (4,)])
def test_sum_to_size(size):
    lead = U.ndim - len(size)
    want = U.sum(axis=tuple(range(lead))) if lead else U
    want = want.sum(axis=tuple(k for k, s in enumerate(size) if s == 1), keepdims=True)
    close(n(t(U).sum_to_size(*size)), want)
    close(n(t(U).sum_to_size(size)), want)


def test_sum_to_size_grad():
    gradcheck(lambda x: x.sum_to_size(1, 3, 1), U[:, :3, :2])
    gradcheck(lambda x: x.sum_to_size(2), U[:, :1, :2])


def test_sum_to_size_error():
    with pytest.raises(RuntimeError, match="is not expandable to size"):
        t(U).sum_to_size(5, 2, 7, 4)


def test_sum_to_size_not_expandable():
    with pytest.raises(RuntimeError, match="is not expandable to size"):
        t(U).sum_to_size(3, 7, 4)


def test_split_with_sizes():
    parts = t(U).split_with_sizes([3, 4], 1)
    assert len(parts) == 2
    np.testing.assert_array_equal(n(parts[0]), U[:, :3])
    np.testing.assert_array_equal(n(parts[1]), U[:, 3:])
    assert [tuple(p.shape) for p in t(U).split_with_sizes([1, 1])] == [(1, 7, 4)] * 2
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly "
                                           "to 7"):
        t(U).split_with_sizes([3, 3], 1)


# ---- in-place comparisons / bitwise, H / mH / adjoint, nbytes / itemsize ------------------

I1 = RNG.integers(-5, 5, (3, 4))
I2 = RNG.integers(-5, 5, (3, 4))
CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal, "not_equal": np.not_equal, "less": np.less,
       "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal}
LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or,
         "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and,
         "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "fmod": np.fmod,
         "remainder": np.remainder, "floor_divide": np.floor_divide}


@pytest.mark.parametrize("name", list(CMP) + list(LOGIC))
def test_inplace_compare_bitwise(name):
    ref = {**CMP, **LOGIC}[name]
    other = I2 + 10 if name in LOGIC else I2                 # no division by zero
    x = t(I1)
    assert getattr(x, name + "_")(t(other)) is x
    assert x.dtype == cddp.int64                              # keeps self's dtype
    np.testing.assert_array_equal(n(x), ref(I1, other).astype(np.int64))
    if name in CMP:
        f = t(I1.astype(np.float32))
        getattr(f, name + "_")(1)
        assert f.dtype == cddp.float32
        np.testing.assert_array_equal(n(f), ref(I1, 1).astype(np.float32))
    elif name.startswith(("logical", "bitwise")):
        b = t(I1 > 0)
        getattr(b, name + "_")(t(I2 > 0))
        np.testing.assert_array_equal(n(b), ref(I1 > 0, I2 > 0))


def test_inplace_bitwise_float_refused():
    with pytest.raises(NotImplementedError, match="\"bitwise_and_cpu\" not implemented for "
                                                  "'Float'"):
        cddp.ones(2).bitwise_and_(cddp.tensor([1, 2]))


def test_H_mH_adjoint_nbytes():
    m = t(U[0])
    np.testing.assert_array_equal(n(m.H), U[0].T)
    np.testing.assert_array_equal(n(t(U).mH), U.transpose(0, 2, 1))
    np.testing.assert_array_equal(n(t(U).adjoint()), U.transpose(0, 2, 1))
    with pytest.raises(RuntimeError, match="tensor.H is only supported on matrices \\(2-D "
                                           "tensors\\). Got 3-D tensor."):
        t(U).H
    for dt, npdt in ((cddp.float32, np.float32), (cddp.float64, np.float64),
                     (cddp.int64, np.int64), (cddp.int32, np.int32), (cddp.bool, np.bool_),
                     (cddp.int8, np.int8), (cddp.uint8, np.uint8), (cddp.float16, np.float16),
                     (cddp.int16, np.int16)):
        z = cddp.zeros(3, 5, dtype=dt)
        assert z.itemsize == np.dtype(npdt).itemsize
        assert z.nbytes == np.zeros((3, 5), npdt).nbytes
        assert z[:, ::2].nbytes == np.zeros((3, 5), npdt)[:, ::2].nbytes


def test_H_on_vector_raises():
    with pytest.raises(RuntimeError, match="Got 1-D tensor"):
        cddp.ones(3).H


def test_tensor_methods_vs_torch(torch):
    cu, tu = t(U), T(torch, U)
    for d, size, step in UNFOLD:
        np.testing.assert_array_equal(n(cu.unfold(d, size, step)),
                                      tu.unfold(d, size, step).numpy())
    for size in ((7, 4), (1, 7, 1), (2, 1, 4)):
        close(n(cu.sum_to_size(*size)), tu.sum_to_size(*size).numpy())
    for shp in ((3, 3), (7, 3), (3, 5), (2, 2, 2)):
        for wrap in (False, True):
            np.testing.assert_array_equal(n(cddp.zeros(*shp).fill_diagonal_(5.0, wrap)),
                                          torch.zeros(*shp).fill_diagonal_(5.0, wrap).numpy())
    for name in list(CMP) + list(LOGIC):
        other = I2 + 10 if name in LOGIC else I2
        x, y = t(I1), T(torch, I1)
        getattr(x, name + "_")(t(other))
        getattr(y, name + "_")(T(torch, other))
        np.testing.assert_array_equal(n(x), y.numpy())
    np.testing.assert_array_equal(n(t(U).mH), tu.mH.numpy())
    np.testing.assert_array_equal(n(t(U[0]).H), tu[0].H.numpy())
    for dt in ("float32", "int64", "bool", "float16"):
        c = cddp.zeros(3, 5, dtype=getattr(cddp, dt))
        tt = torch.zeros(3, 5, dtype=getattr(torch, dt))
        assert (c.nbytes, c.itemsize) == (tt.nbytes, tt.itemsize)
    for f in (lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 4, 1),
              lambda x: x.sum_to_size(1, 7, 1)):
        a, b = t(U, requires_grad=True), T(torch, U).requires_grad_()
        w = RNG.standard_normal(tuple(f(b).shape))
        f(a).backward(t(w))
        f(b).backward(T(torch, w))
        close(n(a.grad), b.grad.numpy())
    assert cddp.typename(cddp.ones(2)) == torch.typename(torch.ones(2))
    assert tuple(cu.new(2, 3).shape) == tuple(tu.new(2, 3).shape)
    assert cu.new([1, 2]).tolist() == tu.new([1, 2]).tolist()
