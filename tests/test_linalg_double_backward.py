"""Second derivatives through cddp.linalg (cddp/linalg/_factor.py): inv, det, slogdet and
solve differentiate again (torch.func.hessian / jvp, create_graph=True); the factorizations
whose backward is NumPy raise on a second differentiation instead of returning a silent zero.

Oracles: central finite differences of the first derivative (float64), and torch where it is
installed.
"""
import numpy as np
import pytest

import cddp
from cddp import func

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 3)) + 3 * np.eye(3)
B = RNG.standard_normal((3, 2))



def _funcs(L):
    """The functions differentiated, for the library L (cddp or torch)."""
    return {
        "det": lambda x: L.linalg.det(x),
        "inv": lambda x: (L.linalg.inv(x) ** 2).sum(),
        "slogdet": lambda x: L.linalg.slogdet(x)[1],
        "logdet_gram": lambda x: L.logdet(x @ x.T),
        "solve": lambda x: (L.linalg.solve(x, L.tensor(B)) ** 2).sum(),
        "solve_vector": lambda x: (L.linalg.solve(x, L.tensor(B[:, 0])) ** 3).sum(),
        "solve_right": lambda x: (L.linalg.solve(x, L.tensor(B.T), left=False) ** 2).sum(),
    }


FUNCS = _funcs(cddp)


def _grad(f, a):
    x = cddp.tensor(a, requires_grad=True)
    g, = cddp.autograd.grad(f(x), x)
    return g.numpy()


def _fd_hessian(f, a, h=1e-5):
    n = a.size
    H = np.empty((n, n))
    for j in range(n):
        e = np.zeros(n)
        e[j] = h
        e = e.reshape(a.shape)
        H[:, j] = ((_grad(f, a + e) - _grad(f, a - e)) / (2 * h)).reshape(-1)
    return H


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_hessian_matches_finite_differences(name):
    f = FUNCS[name]
    H = func.hessian(f)(cddp.tensor(A)).numpy().reshape(A.size, A.size)
    np.testing.assert_allclose(H, _fd_hessian(f, A), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_jvp_matches_directional_derivative(name):
    f = FUNCS[name]
    v = RNG.standard_normal(A.shape)
    _, t = func.jvp(f, (cddp.tensor(A),), (cddp.tensor(v),))
    want = float((_grad(f, A) * v).sum())
    assert abs(float(t) - want) < 1e-9 * max(1.0, abs(want))


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_hessian_matches_torch(name):
    torch = pytest.importorskip("torch")
    tf = _funcs(torch)[name]
    want = torch.func.hessian(tf)(torch.tensor(A)).numpy()
    got = func.hessian(FUNCS[name])(cddp.tensor(A)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


NUMPY_ONLY = {
    "cholesky": lambda x: cddp.linalg.cholesky(x @ x.T).sum(),
    "svd": lambda x: cddp.linalg.svdvals(x).sum(),
    "eigh": lambda x: cddp.linalg.eigh(x @ x.T)[0].sum(),
    "qr": lambda x: cddp.linalg.qr(x)[1].sum(),
    "pinv": lambda x: cddp.linalg.pinv(x).sum(),
}


@pytest.mark.parametrize("name", sorted(NUMPY_ONLY))
def test_numpy_backward_refuses_second_derivative(name):
    f = NUMPY_ONLY[name]
    with pytest.raises(RuntimeError, match="cannot differentiate it again"):
        func.hessian(f)(cddp.tensor(A))
    # first order under create_graph still works, and equals the plain gradient
    x = cddp.tensor(A, requires_grad=True)
    g, = cddp.autograd.grad(f(x), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), _grad(f, A), rtol=1e-12, atol=1e-12)


def test_singular_det_first_derivative_under_create_graph():
    """A singular matrix keeps the NumPy (adjugate through the SVD) formula."""
    s = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    x = cddp.tensor(s, requires_grad=True)
    g, = cddp.autograd.grad(cddp.linalg.det(x), x, create_graph=True)
    adj_t = np.array([[4 * 1 - 6 * 0, -(2 * 1 - 6 * 1), 2 * 0 - 4 * 1],
                      [-(2 * 1 - 3 * 0), 1 * 1 - 3 * 1, -(1 * 0 - 2 * 1)],
                      [2 * 6 - 3 * 4, -(1 * 6 - 3 * 2), 1 * 4 - 2 * 2]], dtype=float)
    np.testing.assert_allclose(g.detach().numpy(), adj_t, atol=1e-10)
