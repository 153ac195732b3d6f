"""Reductions: sum/mean/prod/var/std/cumsum/all/any, max/min/amax/amin/argmax/argmin,
softmax/log_softmax/logsumexp, norm.

Oracles: NumPy for forward values over shapes (0-dim, empty, non-contiguous NumPy views,
negative and tuple dims, keepdim) and dtypes; finite differences (conftest.gradcheck) for
every backward; torch (when importable) for values, indices and gradients, ties included.
"""
import itertools
import warnings

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

RNG = np.random.default_rng(1234)


def arr(shape, dtype=np.float64, rng=RNG):
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(-5, 6, shape).astype(dtype)


def layouts(shape, dtype=np.float64):
    """(name, ndarray) views of `shape`: contiguous, transposed-memory, strided slice."""
    yield "contig", arr(shape, dtype)
    if len(shape) >= 2:
        yield "fortran", np.asfortranarray(arr(shape, dtype))
    if len(shape) >= 1:
        big = arr(tuple(shape[:-1]) + (2 * shape[-1] + 1,), dtype)
        yield "strided", big[..., 1::2]


def dim_choices(ndim):
    out = [None]
    for d in range(-ndim, ndim) if ndim else [0, -1]:
        out.append(d)
    if ndim >= 2:
        out += [(0, -1), [ndim - 1, 0]]
    if ndim >= 3:
        out += [(0, 2), (1, 2), ()]
    return out


def np_axis(dim, ndim):
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    if ndim == 0:
        return None
    return tuple(dim) if isinstance(dim, (tuple, list)) else dim


SHAPES = [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4), (1, 3, 1, 2)]


def close(got, want, rtol=1e-6, atol=1e-9):
    got = n(got) if isinstance(got, cddp.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ---- sum / mean ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.bool_])
def test_sum_matches_numpy(shape, dtype):
    for name, a in layouts(shape, dtype):
        x = cddp.from_numpy(a)
        for dim, keep in itertools.product(dim_choices(len(shape)), [False, True]):
            kw = {} if dim is None else {"dim": dim}
            got = x.sum(**kw, keepdim=keep)
            want = np.sum(a, axis=np_axis(dim, a.ndim), keepdims=keep,
                          dtype=np.float64 if np.issubdtype(dtype, np.floating) else np.int64)
            if a.ndim == 0:
                want = np.asarray(want).reshape(())
            exp_dt = {np.float32: cddp.float32, np.float64: cddp.float64}.get(dtype, cddp.int64)
            assert got.dtype == exp_dt, (name, dim)
            close(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
            close(cddp.sum(x, **kw, keepdim=keep), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
def test_mean_matches_numpy(shape):
    for name, a in layouts(shape, np.float64):
        x = cddp.from_numpy(a)
        for dim, keep in itertools.product(dim_choices(len(shape)), [False, True]):
            kw = {} if dim is None else {"dim": dim}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = np.mean(a, axis=np_axis(dim, a.ndim), keepdims=keep)
            close(x.mean(**kw, keepdim=keep), np.asarray(want).reshape(
                np.asarray(want).shape if a.ndim else ()), rtol=1e-12)


def test_sum_dtypes_and_special_cases():
    assert cddp.tensor([True, True, False]).sum().item() == 2
    s = cddp.tensor([1, 2, 3], dtype=cddp.int32).sum()
    assert s.dtype == cddp.int64 and s.item() == 6
    s = cddp.tensor([1, 2, 3], dtype=cddp.int32).sum(dtype=cddp.float32)
    assert s.dtype == cddp.float32 and s.item() == 6.0
    s = t(np.ones(3, np.float32)).sum(dtype=cddp.float64)
    assert s.dtype == cddp.float64
    assert t(np.zeros(0, np.float32)).sum().item() == 0.0
    assert t(np.zeros((0, 3))).sum(0).shape == (3,)
    assert np.isnan(t(np.zeros((0, 3))).mean(0).numpy()).all()
    assert cddp.tensor(2.5).sum(0).item() == 2.5 and cddp.tensor(2.5).sum(-1).shape == ()
    assert cddp.tensor([1, 2], dtype=cddp.int64).mean(dtype=cddp.float32).item() == 1.5
    # axis= spelling and input= keyword, as torch accepts
    x = t(np.arange(6.0).reshape(2, 3))
    close(x.sum(axis=1), [3, 12])
    close(cddp.sum(input=x, dim=0), [3, 5, 7])
    close(cddp.mean(x, 1, True), [[1], [4]])


def test_large_float32_sum_is_accurate(torch):
    a = RNG.standard_normal(1_000_000).astype(np.float32) + 0.1
    want = torch.from_numpy(a).sum().item()
    got = t(a).sum().item()
    assert abs(got - want) <= 1e-6 * abs(want)
    exact = a.astype(np.float64).sum()
    assert abs(got - exact) <= 1e-6 * abs(exact)
    b = a.reshape(1000, 1000)
    for d in (0, 1):
        close(t(b).sum(d), torch.from_numpy(b).sum(d).numpy(), rtol=1e-5, atol=1e-5)
        close(t(b).mean(d), b.astype(np.float64).mean(d), rtol=1e-5, atol=1e-6)


# ---- prod / var / std / cumsum / all / any -----------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_prod_var_std_cumsum_match_numpy(shape):
    for name, a in layouts(shape, np.float64):
        x = cddp.from_numpy(a)
        for d in [None] + list(range(-len(shape), len(shape))):
            for keep in (False, True):
                kw = {} if d is None else {"dim": d}
                ax = None if (d is None or a.ndim == 0) else d
                want = np.prod(a, axis=ax, keepdims=keep and d is not None)
                if d is None and keep:
                    continue
                close(x.prod(**kw, keepdim=keep), np.asarray(want), rtol=1e-12)
        if a.size > 1 and a.ndim >= 1:
            for d in range(a.ndim):
                if a.shape[d] > 1:
                    close(x.var(d), np.var(a, axis=d, ddof=1), rtol=1e-10)
                    close(x.std(d, keepdim=True), np.std(a, axis=d, ddof=1, keepdims=True),
                          rtol=1e-10)
                    close(x.var(d, correction=0), np.var(a, axis=d), rtol=1e-10)
            close(x.var(), np.var(a, ddof=1), rtol=1e-10)
            close(x.std(unbiased=False), np.std(a), rtol=1e-10)
            close(x.var(False), np.var(a), rtol=1e-10)
        for d in range(-max(a.ndim, 1), max(a.ndim, 1)):
            want = np.cumsum(a, axis=d) if a.ndim else a
            close(x.cumsum(d), want, rtol=1e-12)


def test_prod_cumsum_int_and_all_any():
    x = cddp.tensor([[1, 2, 3], [4, 5, 6]], dtype=cddp.int32)
    p = x.prod(1)
    assert p.dtype == cddp.int64 and p.numpy().tolist() == [6, 120]
    c = x.cumsum(1)
    assert c.dtype == cddp.int64 and c.numpy().tolist() == [[1, 3, 6], [4, 9, 15]]
    assert x.cumsum(0, dtype=cddp.float64).dtype == cddp.float64
    for shape in SHAPES:
        for name, a in layouts(shape, np.float64):
            a = np.where(np.abs(a) < 0.5, 0.0, a)
            x = cddp.from_numpy(a)
            for dim in dim_choices(len(shape)):
                kw = {} if dim is None else {"dim": dim}
                for fn, nf in (("all", np.all), ("any", np.any)):
                    got = getattr(x, fn)(**kw)
                    assert got.dtype == cddp.bool
                    want = nf(a, axis=np_axis(dim, a.ndim))
                    np.testing.assert_array_equal(n(got), want)
    assert cddp.tensor([1.0, float("nan")]).all().item() is True
    assert t(np.zeros((2, 0))).all().item() is True and not t(np.zeros((2, 0))).any().item()
    assert cddp.any(t(np.array([[0, 1], [0, 0]])), 1, keepdim=True).shape == (2, 1)


# ---- max / min / argmax / argmin / amax / amin ------------------------------------------


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (1, 3, 1, 2), (2, 0, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.bool_])
def test_max_min_match_numpy(shape, dtype):
    for name, a in layouts(shape, dtype):
        x = cddp.from_numpy(a)
        if a.size:
            assert n(x.max()) == a.max() and n(x.min()) == a.min()
            assert x.max().shape == () and x.max().dtype == x.dtype
            assert n(x.argmax()) == np.argmax(a) and n(x.argmin()) == np.argmin(a)
            assert x.argmax(keepdim=True).shape == (1,) * a.ndim
        for d in range(-max(a.ndim, 1), max(a.ndim, 1)):
            if a.ndim and a.shape[d] == 0:
                continue
            ax = d if a.ndim else None
            for keep in (False, True):
                v, i = x.max(d, keep)
                r = x.min(dim=d, keepdim=keep)
                want_shape = np.max(a, axis=ax, keepdims=keep).shape
                np.testing.assert_array_equal(n(v), np.max(a, axis=ax, keepdims=keep))
                np.testing.assert_array_equal(n(i), np.argmax(a, axis=ax, keepdims=keep)
                                              if a.ndim else np.zeros(()))
                np.testing.assert_array_equal(n(r.values), np.min(a, axis=ax, keepdims=keep))
                np.testing.assert_array_equal(n(r.indices), np.argmin(a, axis=ax, keepdims=keep)
                                              if a.ndim else np.zeros(()))
                assert v.shape == want_shape and i.dtype == cddp.int64
                np.testing.assert_array_equal(n(x.argmax(d, keepdim=keep)), n(i))
                np.testing.assert_array_equal(n(cddp.argmin(x, d, keep)), n(r.indices))
        for dim in dim_choices(a.ndim):
            ax = np_axis(dim, a.ndim)
            if a.size == 0:
                continue
            np.testing.assert_array_equal(n(x.amax(() if dim is None else dim)), np.max(a, axis=ax))
            np.testing.assert_array_equal(n(cddp.amin(x, () if dim is None else dim, True)),
                                          np.min(a, axis=ax, keepdims=True))


def test_max_ties_nan_and_return_type():
    x = t(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]))
    r = x.max(1)
    assert r[0].numpy().tolist() == [3.0, 2.0] and r[1].numpy().tolist() == [1, 0]
    values, indices = r
    assert r.values is values and r.indices is indices and len(r) == 2 and isinstance(r, tuple)
    assert type(r).__name__ == "max" and type(x.min(0)).__name__ == "min"
    assert x.argmin(1).numpy().tolist() == [0, 2]
    y = t(np.array([1.0, np.nan, 3.0, np.nan]))
    assert np.isnan(y.max().item()) and np.isnan(y.min().item())
    assert y.max(0).indices.item() == 1 and y.argmax().item() == 1 and y.argmin().item() == 1
    assert np.isnan(y.amax(0).item())
    b = cddp.tensor([True, False, True])
    assert b.max().item() is True and b.argmin().item() == 1


def test_max_gradients_ties():
    a = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    x = t(a, requires_grad=True)
    x.max().backward()
    close(x.grad, [[0, 0.5, 0.5], [0, 0, 0]])
    x = t(a, requires_grad=True)
    v, i = x.max(1)
    assert v.grad_fn.name() == "MaxBackward0" and i.grad_fn is None and not i.requires_grad
    v.backward(t([10.0, 20.0]))
    close(x.grad, [[0, 10, 0], [20, 0, 0]])
    x = t(a, requires_grad=True)
    x.amax(1).backward(t([6.0, 4.0]))
    close(x.grad, [[0, 3, 3], [2, 2, 0]])
    x = t(a, requires_grad=True)
    x.min(0).values.backward(t([1.0, 2.0, 3.0]))
    close(x.grad, [[1, 0, 0], [0, 2, 3]])


@pytest.mark.parametrize("length", [1, 7, 8, 31, 63, 64, 65, 100, 257, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_rows_take_the_vector_paths(length, dtype):
    """Rows long enough for the 32-wide max, the 8-wide search and the 128-element pairwise
    blocks, with ties, NaNs and infinities placed at varied positions."""
    rng = np.random.default_rng(length)
    a = rng.integers(-50, 50, (6, length)).astype(dtype)     # many ties
    a[1, rng.integers(0, length)] = np.nan                    # one NaN
    a[2, -1] = np.nan                                         # NaN last
    a[3, :] = -np.inf
    a[4, rng.integers(0, length)] = np.inf
    a[5, 0] = np.nan if length > 1 else 1.0
    if length > 1:
        a[5, -1] = np.nan
    x = t(a)
    for fn, nf, af in (("max", np.max, np.argmax), ("min", np.min, np.argmin)):
        v, i = getattr(x, fn)(1)
        np.testing.assert_array_equal(n(v), nf(a, axis=1))
        np.testing.assert_array_equal(n(i), af(a, axis=1))
        np.testing.assert_array_equal(n(getattr(x, "a" + fn)(1)), nf(a, axis=1))
        xt = cddp.from_numpy(np.ascontiguousarray(a.T))        # the column (lanes) path
        np.testing.assert_array_equal(n(getattr(xt, fn)(0)[1]), af(a, axis=1))
        np.testing.assert_array_equal(n(getattr(xt, fn)(0)[0]), nf(a, axis=1))
    np.testing.assert_array_equal(n(x.argmax()), np.argmax(a))
    assert np.isnan(x.max().item()) and np.isnan(x.min().item())
    b = a[[0, 3, 4]]                                           # no NaN rows
    y = t(b)
    assert y.max().item() == np.max(b) and y.min().item() == np.min(b)
    with np.errstate(all="ignore"):
        sm = np.exp(b - b.max(1, keepdims=True))
        sm = sm / sm.sum(1, keepdims=True)
    close(y.softmax(1), sm, rtol=2e-6, atol=1e-7)
    c = rng.standard_normal((3, length)).astype(dtype) * 30
    z = t(c)
    m = c.max(1, keepdims=True)
    e = np.exp(c.astype(np.float64) - m)
    close(z.softmax(-1), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)
    close(z.log_softmax(-1), (c - m) - np.log(e.sum(1, keepdims=True)), rtol=2e-6, atol=2e-6)
    close(z.logsumexp(1), (np.log(e.sum(1)) + m[:, 0]), rtol=2e-6)
    close(z.sum(1), c.astype(np.float64).sum(1), rtol=1e-6, atol=1e-4)
    close(z.norm(dim=1), np.sqrt((c.astype(np.float64) ** 2).sum(1)), rtol=1e-6)


def test_exp_accuracy_float32():
    """softmax([0, v]) = [1, e^v] / (1 + e^v) over v in [-110, 0]: checks the float32 exp over
    its whole range (into the subnormals) to a few ulps."""
    v = np.linspace(-110, 0, 40001).astype(np.float32)
    a = np.stack([np.zeros_like(v), v], 1)
    got = n(t(a).softmax(1))
    e = np.exp(v.astype(np.float64))
    np.testing.assert_allclose(got[:, 1], e / (1 + e), rtol=4e-7, atol=3e-45)
    np.testing.assert_allclose(got[:, 0], 1 / (1 + e), rtol=4e-7)
    np.testing.assert_allclose(n(t(a).log_softmax(1))[:, 1], v - np.log1p(e), rtol=4e-7,
                               atol=1e-6)


# ---- softmax / log_softmax / logsumexp ---------------------------------------------------


def np_softmax(a, d):
    if a.size == 0:
        return a.copy()
    e = np.exp(a - a.max(axis=d, keepdims=True))
    return e / e.sum(axis=d, keepdims=True)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 0, 3), (1, 3, 1, 2)])
def test_softmax_matches_numpy(shape):
    for name, a in layouts(shape, np.float64):
        x = cddp.from_numpy(a)
        for d in range(-len(shape), len(shape)):
            sm = np_softmax(a, d)
            close(x.softmax(d), sm, rtol=1e-12)
            close(cddp.log_softmax(x, dim=d), np.log(sm), rtol=1e-12, atol=1e-12)
            if a.size:
                m = a.max(axis=d, keepdims=True)
                lse = np.log(np.exp(a - m).sum(axis=d, keepdims=True)) + m
                close(x.logsumexp(d, keepdim=True), lse, rtol=1e-12)
    a32 = arr((4, 7), np.float32)
    close(t(a32).softmax(1), np_softmax(a32.astype(np.float64), 1), rtol=1e-5, atol=1e-7)
    close(t(a32).softmax(0, dtype=cddp.float64), np_softmax(a32.astype(np.float64), 0),
          rtol=1e-12)


def test_softmax_stability_and_edge_cases():
    close(cddp.tensor([1000.0, 1000.0]).softmax(0), [0.5, 0.5])
    close(cddp.tensor([-1000.0, 0.0]).log_softmax(0), [-1000.0, 0.0])
    close(cddp.tensor([1e4, 0.0], dtype=cddp.float32).softmax(0), [1.0, 0.0])
    assert cddp.tensor(3.0).softmax(0).item() == 1.0
    assert cddp.tensor(3.0).log_softmax(-1).item() == 0.0
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = cddp.softmax(t(np.zeros((2, 4))))           # legacy: dim=1 for 2-D
    close(out, np.full((2, 4), 0.25))
    with pytest.warns(UserWarning, match="Implicit dimension choice for log_softmax"):
        cddp.nn.functional.log_softmax(t(np.zeros((2, 4))))
    close(cddp.softmax(t(np.zeros((2, 2))), 0, cddp.float32), np.full((2, 2), 0.5))
    assert cddp.softmax(t(np.zeros(3)), 0, 3).dtype == cddp.float64   # _stacklevel slot
    close(cddp.logsumexp(cddp.tensor([-np.inf, -np.inf]), 0), -np.inf)
    close(cddp.logsumexp(t(np.array([[1.0, 2.0], [3.0, 4.0]])), (0, 1)),
          np.log(np.exp([1, 2, 3, 4]).sum()))
    with pytest.raises(NotImplementedError, match="Long"):
        cddp.tensor([1, 2]).softmax(0)
    assert cddp.tensor([1, 2]).softmax(0, dtype=cddp.float32).dtype == cddp.float32


# ---- norm --------------------------------------------------------------------------------


def np_norm(a, p, axis=None, keepdims=False):
    b = np.abs(a)
    if p == np.inf:
        return b.max(axis=axis, keepdims=keepdims)
    if p == -np.inf:
        return b.min(axis=axis, keepdims=keepdims)
    if p == 0:
        return (b != 0).sum(axis=axis, keepdims=keepdims).astype(a.dtype)
    return (b ** p).sum(axis=axis, keepdims=keepdims) ** (1.0 / p)


@pytest.mark.parametrize("p", ["fro", 2, 1, 3.5, 0.5, 0, float("inf"), -float("inf")])
def test_norm_matches_numpy(p):
    pn = 2 if p == "fro" else p
    for shape in [(5,), (3, 4), (2, 3, 4), ()]:
        for name, a in layouts(shape, np.float64):
            x = cddp.from_numpy(a)
            close(x.norm(p), np_norm(a, pn), rtol=1e-12)
            for dim in dim_choices(len(shape))[1:]:
                if dim == () or not a.ndim:
                    continue
                ax = np_axis(dim, a.ndim)
                close(x.norm(p, dim, True), np_norm(a, pn, ax, True), rtol=1e-12)
                close(cddp.norm(x, p=p, dim=dim), np_norm(a, pn, ax), rtol=1e-12)
    assert t(np.zeros(0)).norm().item() == 0.0
    a = arr((3, 4), np.float32)
    assert t(a).norm().dtype == cddp.float32
    assert t(a).norm(dtype=cddp.float64).dtype == cddp.float64
    close(cddp._C._linalg_vector_norm(t(a), 1, dim=1), np.abs(a).sum(1), rtol=1e-6)


# ---- gradients: finite differences --------------------------------------------------------


def distinct(shape, seed=0):
    """Values far apart (no ties within 1e-3), so max/min/norm-inf are differentiable."""
    rng = np.random.default_rng(seed)
    k = int(np.prod(shape))
    return (rng.permutation(k) * 0.37 - k * 0.15 + rng.uniform(-1e-2, 1e-2, k)).reshape(shape)


GRAD_OPS = [
    ("sum", lambda x: x.sum()),
    ("sum_dim", lambda x: x.sum(1)),
    ("sum_tuple_keep", lambda x: x.sum((0, 2), keepdim=True)),
    ("sum_f64_dtype", lambda x: x.sum(-1, dtype=cddp.float64)),
    ("mean", lambda x: x.mean()),
    ("mean_dims", lambda x: cddp.mean(x, [2, 0])),
    ("max", lambda x: x.max()),
    ("max_dim", lambda x: x.max(1)[0]),
    ("min_dim_keep", lambda x: x.min(-1, keepdim=True).values),
    ("min", lambda x: cddp.min(x)),
    ("amax", lambda x: x.amax((0, 2))),
    ("amin", lambda x: x.amin(1)),
    ("softmax0", lambda x: x.softmax(0)),
    ("softmax1", lambda x: cddp.softmax(x, 1)),
    ("softmax_last", lambda x: x.softmax(-1)),
    ("log_softmax1", lambda x: x.log_softmax(1)),
    ("log_softmax_last", lambda x: cddp.log_softmax(x, dim=-1)),
    ("logsumexp", lambda x: x.logsumexp((0, 2))),
    ("norm", lambda x: x.norm()),
    ("norm1", lambda x: x.norm(1, dim=1)),
    ("norm3", lambda x: x.norm(3, dim=(0, 2))),
    ("norm_half", lambda x: x.norm(0.5)),
    ("norm_inf", lambda x: x.norm(float("inf"), 2)),
    ("prod", lambda x: x.prod()),
    ("prod_dim", lambda x: x.prod(1)),
    ("var", lambda x: x.var(1)),
    ("std", lambda x: x.std((0, 2), keepdim=True)),
    ("var_all", lambda x: x.var(correction=0)),
    ("cumsum", lambda x: x.cumsum(1)),
]


@pytest.mark.parametrize("name,op", GRAD_OPS, ids=[g[0] for g in GRAD_OPS])
def test_gradcheck(name, op):
    a = distinct((2, 3, 4))
    if name.startswith("prod"):
        a = a / 4.0
    if name.startswith(("softmax", "log_softmax", "logsumexp")):
        a = a / 3.0
    gradcheck(op, a, atol=1e-5, rtol=1e-5)


def test_gradcheck_zeros_and_0dim():
    gradcheck(lambda x: x.prod(1), np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 1.5], [1.0, 2.0, 4.0]]))
    gradcheck(lambda x: x.sum(), np.array(2.0))
    gradcheck(lambda x: x.softmax(0), np.array(2.0))
    x = t(np.zeros(3), requires_grad=True)
    x.norm().backward()
    close(x.grad, np.zeros(3))                    # torch: 0, not NaN, at the origin


def test_backward_through_noncontiguous_views():
    base = distinct((4, 3, 5))
    view = base.transpose(2, 0, 1)                   # (5, 4, 3), non-contiguous
    for op in (lambda x: x.sum((0, 2)), lambda x: x.softmax(1), lambda x: x.max(2)[0],
               lambda x: x.norm(2, (0, 2)), lambda x: x.var(0)):
        x = cddp.from_numpy(view.copy(order="K"))
        xv = cddp.from_numpy(np.ascontiguousarray(view))
        x.requires_grad_(True)
        xv.requires_grad_(True)
        w = RNG.standard_normal(op(xv).shape)
        op(x).backward(t(w))
        op(xv).backward(t(w))
        close(x.grad, n(xv.grad), rtol=1e-12)


def test_autograd_bookkeeping():
    x = t(distinct((2, 3)), requires_grad=True)
    names = {
        "SumBackward0": x.sum(), "SumBackward1": x.sum(0), "MeanBackward0": x.mean(),
        "MeanBackward1": x.mean(1), "MaxBackward1": x.max(), "MinBackward0": x.min(0)[0],
        "AmaxBackward0": x.amax(0), "SoftmaxBackward0": x.softmax(0),
        "LogSoftmaxBackward0": x.log_softmax(1), "LinalgVectorNormBackward0": x.norm(),
        "ProdBackward0": x.prod(), "ProdBackward1": x.prod(0), "VarBackward0": x.var(),
        "StdBackward0": x.std(0), "CumsumBackward0": x.cumsum(0),
        "LogsumexpBackward0": x.logsumexp(1),
    }
    for name, out in names.items():
        assert out.grad_fn.name() == name
    assert x.argmax().grad_fn is None and x.any().grad_fn is None
    with cddp.no_grad():
        assert x.sum().grad_fn is None
    xi = cddp.tensor([1, 2, 3])
    assert xi.sum().grad_fn is None and not xi.max().requires_grad
    x32 = t(np.ones((2, 2), np.float32), requires_grad=True)
    x32.sum(dtype=cddp.float64).backward()
    assert x32.grad.dtype == cddp.float32
    x32 = t(np.ones((2, 2), np.float32), requires_grad=True)
    x32.softmax(0, dtype=cddp.float64).backward(t(np.ones((2, 2))))
    assert x32.grad.dtype == cddp.float32


# ---- torch oracle -------------------------------------------------------------------------


TORCH_OPS = [
    ("sum", lambda m, x: x.sum((0, 2))), ("mean", lambda m, x: m.mean(x, 1, True)),
    ("max", lambda m, x: x.max()), ("max_dim", lambda m, x: x.max(1)[0]),
    ("min_dim", lambda m, x: m.min(x, 2).values), ("amax", lambda m, x: x.amax((1, 2))),
    ("amin", lambda m, x: x.amin(0)), ("softmax", lambda m, x: m.softmax(x, 1)),
    ("log_softmax", lambda m, x: x.log_softmax(-1)), ("norm", lambda m, x: x.norm()),
    ("norm_dim", lambda m, x: m.norm(x, p=1, dim=(0, 1))),
    ("norm_inf", lambda m, x: x.norm(float("inf"), dim=2)),
    ("prod", lambda m, x: x.prod(2)), ("var", lambda m, x: x.var(1)),
    ("std", lambda m, x: x.std()), ("cumsum", lambda m, x: x.cumsum(-1)),
    ("logsumexp", lambda m, x: x.logsumexp(1)),
]


@pytest.mark.parametrize("name,op", TORCH_OPS, ids=[o[0] for o in TORCH_OPS])
@pytest.mark.parametrize("ties", [False, True])
def test_against_torch(torch, name, op, ties):
    rng = np.random.default_rng(7)
    if ties:   # small integers: many ties for the value-selecting ops
        a = rng.integers(-2, 3, (3, 4, 5)).astype(np.float32)
        if name == "prod":
            a[a == 0] = 1.5
            a[0, 0, :2] = 0.0
    else:
        a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x = t(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    out = op(cddp, x)
    tout = op(torch, tx)
    assert out.shape == tuple(tout.shape) and out.dtype == cddp.float32
    np.testing.assert_allclose(n(out), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = rng.standard_normal(tout.shape).astype(np.float32)
    out.backward(t(w))
    tout.backward(torch.from_numpy(w))
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,op", TORCH_OPS, ids=[o[0] for o in TORCH_OPS])
def test_long_rows_against_torch(torch, name, op):
    """The same ops on (3, 40, 300): rows long enough for every vector path, both ways."""
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((3, 40, 300)) * 3).astype(np.float32)
    if name == "prod":
        a = (1 + 0.001 * a).astype(np.float32)
    x = t(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    out, tout = op(cddp, x), op(torch, tx)
    np.testing.assert_allclose(n(out), tout.detach().numpy(), rtol=2e-5, atol=1e-5)
    w = rng.standard_normal(tout.shape).astype(np.float32)
    out.backward(t(w))
    tout.backward(torch.from_numpy(w))
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=2e-5, atol=1e-5)


def test_indices_against_torch(torch):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, (4, 5, 6)).astype(np.float32)
    a[1, 2, 3] = np.nan
    x, tx = t(a), torch.from_numpy(a)
    for d in range(3):
        for fn in ("max", "min"):
            v, i = getattr(x, fn)(d)
            tv, ti = getattr(tx, fn)(d)
            np.testing.assert_array_equal(n(i), ti.numpy())
            np.testing.assert_array_equal(n(v), tv.numpy())
        np.testing.assert_array_equal(n(x.argmax(d)), tx.argmax(d).numpy())
        np.testing.assert_array_equal(n(x.argmin(d, True)), tx.argmin(d, True).numpy())
    assert x.argmax().item() == tx.argmax().item()
    assert x.max(0, keepdim=True).values.shape == tuple(tx.max(0, keepdim=True).values.shape)


def test_full_max_grad_ties_against_torch(torch):
    a = np.array([[1.0, 3.0, 3.0], [3.0, 2.0, 0.0]], np.float32)
    for fn in ("max", "min"):
        x, tx = t(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        getattr(x, fn)().backward()
        getattr(tx, fn)().backward()
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy())


# ---- bad input ----------------------------------------------------------------------------


def test_bad_inputs():
    x = t(np.zeros((2, 3)))
    with pytest.raises(IndexError,
                       match=r"Dimension out of range \(expected to be in range of \[-2, 1\], "
                             r"but got 2\)"):
        x.sum(2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.max(-3)
    with pytest.raises(IndexError, match=r"\[-1, 0\], but got 1"):
        cddp.tensor(1.0).softmax(1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.sum((0, 5))
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        x.sum((0, -2))
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        t(np.zeros(0)).max()
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        t(np.zeros((0, 3))).max(0)
    with pytest.raises(IndexError, match="numel"):
        t(np.zeros(0)).argmax()
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype.*Long"):
        cddp.tensor([1, 2]).mean()
    with pytest.raises(RuntimeError, match="floating point"):
        cddp.tensor([1, 2]).norm()
    with pytest.raises(RuntimeError, match="inf norm on an empty tensor"):
        t(np.zeros(0)).norm(float("inf"))
    with pytest.raises(RuntimeError, match="std and var only support floating"):
        cddp.tensor([1, 2]).var()
    with pytest.raises(TypeError, match="dim"):
        x.sum("a")
    with pytest.raises(TypeError, match="dim"):
        x.sum(1.5)
    with pytest.raises(TypeError, match="dim"):
        x.sum((0, 1.0))
    with pytest.raises(TypeError, match="keepdim.*must be bool"):
        x.sum(0, 1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.sum(dims=0)
    with pytest.raises(TypeError, match="positional"):
        x.sum(0, True, cddp.float32)
    with pytest.raises(TypeError, match="multiple values"):
        x.sum(0, dim=1)
    with pytest.raises(TypeError, match="dim"):
        x.prod((0, 1))
    with pytest.raises(TypeError, match="dtype"):
        x.sum(dtype="nonsense")
    with pytest.raises(TypeError, match="must be Tensor"):
        cddp.sum([1, 2])
    with pytest.raises(TypeError, match="missing required argument 'input'"):
        cddp.sum()
    with pytest.raises(TypeError, match="missing required argument 'dim'"):
        x.softmax()
    with pytest.raises(TypeError, match="missing required argument 'dim'"):
        x.cumsum()
    with pytest.raises(NotImplementedError, match="nuclear"):
        x.norm("nuc")
    with pytest.raises(RuntimeError, match="Order abc not supported"):
        x.norm("abc")
    with pytest.raises(TypeError):
        x.norm([1])


def test_saved_tensor_checks():
    x = t(distinct((2, 3)), requires_grad=True)
    y = x.softmax(1)
    y.backward(t(np.ones((2, 3))), retain_graph=True)
    y.backward(t(np.ones((2, 3))))
    with pytest.raises(RuntimeError, match="second time"):
        y.backward(t(np.ones((2, 3))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_over_short_last_dims(dtype):
    # rows of 1..9 elements (sum.c's short-row loop below 8, the pairwise one from 8): the
    # float64 sum of the row, rounded once
    rng = np.random.default_rng(4)
    for R in range(1, 10):
        x = (rng.standard_normal((300, R)) * 1e3).astype(dtype)
        want = x.astype(np.float64).sum(-1)
        np.testing.assert_allclose(cddp.tensor(x).sum(-1).numpy(), want.astype(dtype),
                                   rtol=1e-7 if dtype == np.float32 else 1e-13)
        np.testing.assert_allclose(cddp.tensor(x).mean(-1).numpy(), (want / R).astype(dtype),
                                   rtol=1e-7 if dtype == np.float32 else 1e-13)
