"""linalg.solve_triangular and the triangular helpers built on it (torch.triangular_solve,
cholesky_solve, cholesky_inverse; cddp/linalg/__init__.py).

Oracles: the defining equations in NumPy (T X = B with T the chosen triangle of A, unit
diagonal when asked; (L L^T) X = B), central finite differences in float64 (A's gradient lives
on the triangle only), and torch (importorskip) for values and gradients.
"""
import itertools

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 4, 4)) + 4 * np.eye(4)
B = RNG.standard_normal((2, 4, 3))


def _triangle(a, upper, unit):
    T = np.triu(a) if upper else np.tril(a)
    if unit:
        T = T - np.einsum("...ii->...i", T)[..., None] * np.eye(a.shape[-1]) + np.eye(a.shape[-1])
    return T


@pytest.mark.parametrize("upper,left,unit", itertools.product([True, False], repeat=3))
def test_solves_the_triangular_system(upper, left, unit):
    b = B if left else B.swapaxes(-1, -2)
    X = n(cddp.linalg.solve_triangular(t(A), t(b), upper=upper, left=left, unitriangular=unit))
    T = _triangle(A, upper, unit)
    np.testing.assert_allclose(T @ X if left else X @ T, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("upper,left,unit", itertools.product([True, False], repeat=3))
def test_gradients_match_finite_differences(upper, left, unit):
    a, b = A[0], np.ascontiguousarray(B[0] if left else B[0].T)
    gradcheck(lambda x, y: cddp.linalg.solve_triangular(x, y, upper=upper, left=left,
                                                         unitriangular=unit), a, b)


def test_cholesky_helpers_and_triangular_solve():
    S = A @ A.swapaxes(-1, -2)
    L = np.linalg.cholesky(S)
    for upper, F in ((False, L), (True, L.swapaxes(-1, -2))):
        X = n(cddp.cholesky_solve(t(B), t(F), upper=upper))
        np.testing.assert_allclose(S @ X, B, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(n(cddp.cholesky_inverse(t(F[0]), upper=upper)),
                                   np.linalg.inv(S[0]), rtol=1e-10, atol=1e-10)
    with pytest.warns(UserWarning, match="triangular_solve is deprecated"):
        r = cddp.triangular_solve(t(B), t(A), upper=False, transpose=True)
    np.testing.assert_allclose(np.tril(A).swapaxes(-1, -2) @ n(r.solution), B, rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_array_equal(n(r.cloned_coefficient), A)
    assert type(r).__name__.startswith("triangular_solve")
    np.testing.assert_allclose(n(t(B).cholesky_solve(t(L))), n(cddp.cholesky_solve(t(B), t(L))))


def test_errors():
    with pytest.raises(RuntimeError, match="must have at least 2 dimensions"):
        cddp.linalg.solve_triangular(t(A[0]), t(B[0, :, 0]), upper=True)
    with pytest.raises(TypeError):
        cddp.linalg.solve_triangular(t(A[0]), t(B[0]))          # upper= is required
    with pytest.raises(RuntimeError, match="same dtype"):
        cddp.linalg.solve_triangular(t(A[0]), t(B[0]).float(), upper=True)


@pytest.mark.parametrize("upper,left,unit", itertools.product([True, False], repeat=3))
def test_match_torch(torch, upper, left, unit):
    b = B if left else B.swapaxes(-1, -2)
    ta, tb = torch.tensor(A, requires_grad=True), torch.tensor(b, requires_grad=True)
    ca, cb = t(A, requires_grad=True), t(b, requires_grad=True)
    tx = torch.linalg.solve_triangular(ta, tb, upper=upper, left=left, unitriangular=unit)
    cx = cddp.linalg.solve_triangular(ca, cb, upper=upper, left=left, unitriangular=unit)
    g = RNG.standard_normal(tuple(tx.shape))
    (tx * torch.tensor(g)).sum().backward()
    (cx * t(g)).sum().backward()
    np.testing.assert_allclose(n(cx), tx.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(n(ca.grad), ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(n(cb.grad), tb.grad.numpy(), rtol=1e-12, atol=1e-12)
