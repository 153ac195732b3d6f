"""torch.special's i0e / i1 / i1e, zeta, polygamma, multigammaln, gammainc / gammaincc and the
top-level polygamma / mvlgamma / igamma / igammac (cddp/special.py, cddp/_pointwise.py).

Oracles: closed forms (zeta(2) = pi^2/6, polygamma(1, 1/2) = pi^2/2, P(1, x) = 1 - e^-x,
Q(1/2, x) = erfc(sqrt x)), identities (zeta(s, q) - zeta(s, q + 1) = q^-s, P + Q = 1,
d I0/dx = I1, d polygamma(n)/dx = polygamma(n + 1), continuity where the Bessel functions
switch from series to asymptotic expansion), mpmath (importorskip) on grids, and torch
(importorskip) on the same grids.
"""
import math

import numpy as np
import pytest

import cddp
import cddp.special as S
from conftest import n, t

X = np.concatenate([np.linspace(-60, 60, 121), [0.0, 1e-8, -1e-3, 29.999, 30.001, 300.0]])


def test_closed_forms():
    one = t(np.array([1.0]))
    assert abs(S.zeta(t(np.array([2.0])), one).item() - math.pi ** 2 / 6) < 1e-15
    assert abs(S.zeta(t(np.array([4.0])), one).item() - math.pi ** 4 / 90) < 1e-15
    assert abs(S.polygamma(1, t(np.array([0.5]))).item() - math.pi ** 2 / 2) < 1e-14
    assert abs(S.polygamma(3, one).item() - math.pi ** 4 / 15) < 1e-13
    x = np.array([0.01, 0.7, 3.0, 40.0])
    np.testing.assert_allclose(n(S.gammainc(t(np.ones(4)), t(x))), 1 - np.exp(-x), rtol=1e-14)
    np.testing.assert_allclose(n(S.gammaincc(t(np.full(4, 0.5)), t(x))),
                               [math.erfc(math.sqrt(v)) for v in x], rtol=1e-12)
    a = t(np.array([0.7, 3.0, 12.5]))
    np.testing.assert_allclose(n(S.multigammaln(a, 1)), n(a.lgamma()), rtol=1e-15)
    assert S.i0e(t(np.array([0.0]))).item() == 1.0 and S.i1(t(np.array([0.0]))).item() == 0.0


def test_identities():
    rng = np.random.default_rng(0)
    s, q = rng.uniform(1.2, 8, 50), rng.uniform(0.05, 20, 50)
    np.testing.assert_allclose(n(S.zeta(t(s), t(q)) - S.zeta(t(s), t(q + 1))), q ** -s,
                               rtol=1e-10)
    a, x = rng.uniform(0.1, 30, 50), rng.uniform(0, 60, 50)
    np.testing.assert_allclose(n(S.gammainc(t(a), t(x)) + S.gammaincc(t(a), t(x))), 1,
                               rtol=1e-13)
    # the Bessel functions across the series / asymptotic switch at |x| = 30
    for f in (S.i0e, S.i1e):
        lo, hi = n(f(t(np.array([29.9999999, -29.9999999])))), n(f(t(np.array([30.0000001,
                                                                             -30.0000001]))))
        np.testing.assert_allclose(lo, hi, rtol=1e-8)


def test_gradients():
    x = t(X[np.abs(X) < 200], requires_grad=True)
    S.i0(x).sum().backward()
    np.testing.assert_allclose(n(x.grad), n(S.i1(x.detach())), rtol=1e-10, atol=1e-300)
    y = t(np.array([0.3, 1.7, 9.0, 55.0]), requires_grad=True)
    for k in (1, 2, 4):
        y.grad = None
        S.polygamma(k, y).sum().backward()
        np.testing.assert_allclose(n(y.grad), n(S.polygamma(k + 1, y.detach())), rtol=1e-9)
    z = t(np.array([-40.0, -3.0, 0.5, 31.0]), requires_grad=True)
    S.i0e(z).sum().backward()
    want = n(S.i1e(z.detach())) - np.sign(n(z)) * n(S.i0e(z.detach()))
    np.testing.assert_allclose(n(z.grad), want, rtol=1e-10)


def test_domains_and_top_level_forms():
    s = t(np.array([1.0, 0.5, 2.0, 2.5]))
    q = t(np.array([1.0, 1.0, -2.0, -1.5]))
    got = n(S.zeta(s, q))
    assert math.isinf(got[0]) and math.isnan(got[1]) and math.isinf(got[2]) and math.isnan(got[3])
    with pytest.raises(RuntimeError, match="negative n"):
        S.polygamma(-1, s)
    with pytest.raises(RuntimeError, match=r"greater than \(p-1\)/2"):
        cddp.mvlgamma(t(np.array([0.4])), 2)
    x = t(np.array([1.5, 2.0])).float()
    assert cddp.polygamma(1, x).dtype == cddp.float32
    np.testing.assert_allclose(n(x.polygamma(2)), n(S.polygamma(2, x)))
    np.testing.assert_allclose(n(x.igamma(x)), n(S.gammainc(x, x)))
    np.testing.assert_allclose(n(cddp.igammac(x, x)), n(S.gammaincc(x, x)))
    np.testing.assert_allclose(n(x.mvlgamma(1)), n(x.lgamma()))


def test_match_mpmath():
    mp = pytest.importorskip("mpmath")
    for f, ref in ((S.i0e, lambda v: mp.besseli(0, v) * mp.exp(-abs(v))),
                   (S.i1, lambda v: mp.besseli(1, v)),
                   (S.i1e, lambda v: mp.besseli(1, v) * mp.exp(-abs(v)))):
        want = np.array([float(ref(v)) for v in X])
        np.testing.assert_allclose(n(f(t(X))), want, rtol=1e-13, atol=1e-300)
    xs = np.array([0.1, 0.5, 3.3, 10.0, 100.0, -0.5, -2.5])
    for k in (1, 2, 5):
        np.testing.assert_allclose(n(S.polygamma(k, t(xs))),
                                   [float(mp.polygamma(k, v)) for v in xs], rtol=1e-13)
    a, x = np.array([0.5, 2.5, 10.0, 50.0, 3.0]), np.array([0.1, 2.0, 30.0, 10.0, 60.0])
    np.testing.assert_allclose(n(S.gammaincc(t(a), t(x))),
                               [float(mp.gammainc(u, v, mp.inf, regularized=True))
                                for u, v in zip(a, x)], rtol=1e-12)


def test_match_torch(torch):
    for name in ("i0e", "i1", "i1e"):
        np.testing.assert_allclose(n(getattr(S, name)(t(X))),
                                   getattr(torch.special, name)(torch.tensor(X)).numpy(),
                                   rtol=1e-13, atol=1e-300)
    s, q = np.array([1.5, 2, 3, 4.5, 10, 2.5]), np.array([0.5, 1, 2.5, 10, 0.1, 1e9])
    np.testing.assert_allclose(n(S.zeta(t(s), t(q))),
                               torch.special.zeta(torch.tensor(s), torch.tensor(q)).numpy(),
                               rtol=1e-12)
    xs = np.array([0.1, 0.5, 3.3, 10.0, -0.5])
    for k in (1, 2, 3):                        # torch's trigamma is good to ~5e-10
        np.testing.assert_allclose(n(cddp.polygamma(k, t(xs))),
                                   torch.polygamma(k, torch.tensor(xs)).numpy(), rtol=1e-9)
    a, x = np.array([0.5, 1, 2.5, 10, 50]), np.array([0.1, 3, 2, 30, 10])
    for f in ("gammainc", "gammaincc"):
        np.testing.assert_allclose(n(getattr(S, f)(t(a), t(x))),
                                   getattr(torch.special, f)(torch.tensor(a),
                                                             torch.tensor(x)).numpy(),
                                   rtol=1e-12)
    np.testing.assert_allclose(n(cddp.mvlgamma(t(np.array([2.5, 4.0])), 3)),
                               torch.mvlgamma(torch.tensor([2.5, 4.0]), 3).numpy(), rtol=1e-6)
