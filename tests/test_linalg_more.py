"""linalg.lstsq, eig / eigvals, vander, cond and solve_ex (cddp/linalg/__init__.py).

Oracles: NumPy (np.linalg.lstsq's minimum-norm solution, residuals, rank and singular values;
the eigen-equation A v = lambda v in complex NumPy arithmetic; np.vander; np.linalg.cond),
central finite differences in float64 for lstsq's solution, and torch (importorskip).
"""
import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("shape", [((5, 3), (5, 2)), ((2, 6, 4), (2, 6, 3)), ((3, 5), (3, 2))])
@pytest.mark.parametrize("driver", ["gelsy", "gelsd", "gelss", "gels"])
def test_lstsq_matches_numpy(shape, driver):
    A, B = RNG.standard_normal(shape[0]), RNG.standard_normal(shape[1])
    m, k = A.shape[-2], A.shape[-1]
    if driver == "gels" and m < k:
        pytest.skip("gels assumes a full-rank tall or square A")
    r = cddp.linalg.lstsq(t(A), t(B), driver=driver)
    for i in np.ndindex(A.shape[:-2]):
        x, res, rank, sv = np.linalg.lstsq(A[i], B[i], rcond=None)
        np.testing.assert_allclose(n(r.solution)[i], x, rtol=1e-10, atol=1e-12)
        if driver != "gels":
            assert int(n(r.rank)[i]) == rank
        if driver in ("gelsd", "gelss"):
            np.testing.assert_allclose(n(r.singular_values)[i], sv, rtol=1e-12)
        if driver != "gelsy" and m > k:
            np.testing.assert_allclose(n(r.residuals)[i], res, rtol=1e-10)
    if driver == "gelsy" or m <= k:
        assert r.residuals.numel() == 0
    if driver not in ("gelsd", "gelss"):
        assert r.singular_values.numel() == 0


def test_lstsq_gradient_and_rank_deficiency():
    A, B = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))
    gradcheck(lambda a, b: cddp.linalg.lstsq(a, b).solution, A, B)
    D = A.copy()
    D[:, 2] = D[:, 0] + D[:, 1]                       # rank 2: the minimum-norm solution
    r = cddp.linalg.lstsq(t(D), t(B), driver="gelsd")
    np.testing.assert_allclose(n(r.solution), np.linalg.lstsq(D, B, rcond=None)[0], rtol=1e-9,
                               atol=1e-12)
    assert int(r.rank) == 2 and r.residuals.numel() == 0
    with pytest.raises(RuntimeError, match="driver"):
        cddp.linalg.lstsq(t(A), t(B), driver="xyz")


def test_eig_vander_cond_solve_ex():
    A = RNG.standard_normal((2, 4, 4))
    w, v = cddp.linalg.eig(t(A))
    wn = n(cddp.view_as_real(w))
    vn = n(cddp.view_as_real(v))
    wc, vc = wn[..., 0] + 1j * wn[..., 1], vn[..., 0] + 1j * vn[..., 1]
    np.testing.assert_allclose(A @ vc, vc * wc[..., None, :], atol=1e-12)
    np.testing.assert_allclose(np.sort_complex(n(cddp.view_as_real(cddp.linalg.eigvals(t(A))))
                                               [..., 0] + 0j), np.sort_complex(wc.real + 0j),
                               atol=1e-12)
    with pytest.raises(NotImplementedError, match="without a derivative"):
        cddp.linalg.eig(t(A, requires_grad=True))
    x = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(n(cddp.linalg.vander(t(x), N=5)),
                               np.stack([np.vander(r, 5, increasing=True) for r in x]))
    for p in (None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf):
        np.testing.assert_allclose(n(cddp.linalg.cond(t(A), p)), np.linalg.cond(A, p),
                                   rtol=1e-10)
    S = A.copy()
    S[1] = 0.0                                        # singular second system
    r = cddp.linalg.solve_ex(t(S), t(x.T[:, :1].repeat(2, 0)[None].repeat(2, 0)[:, :4]))
    assert n(r.info).tolist()[0] == 0 and n(r.info).tolist()[1] > 0
    with pytest.raises(cddp.linalg.LinAlgError):
        cddp.linalg.solve_ex(t(S), t(np.ones((2, 4, 1))), check_errors=True)


def test_match_torch(torch):
    A, B = RNG.standard_normal((2, 6, 4)), RNG.standard_normal((2, 6, 3))
    for driver in (None, "gelsd", "gels"):
        ca, ta = t(A, requires_grad=True), torch.tensor(A, requires_grad=True)
        cr = cddp.linalg.lstsq(ca, t(B), driver=driver)
        tr = torch.linalg.lstsq(ta, torch.tensor(B), driver=driver)
        cr.solution.sum().backward()
        tr.solution.sum().backward()
        np.testing.assert_allclose(n(cr.solution), tr.solution.detach().numpy(), rtol=1e-10)
        np.testing.assert_allclose(n(ca.grad), ta.grad.numpy(), rtol=1e-9, atol=1e-12)
        assert tuple(cr.residuals.shape) == tuple(tr.residuals.shape)
        assert tuple(cr.rank.shape) == tuple(tr.rank.shape)
    S = RNG.standard_normal((3, 4, 4))
    np.testing.assert_allclose(n(cddp.view_as_real(cddp.linalg.eigvals(t(S)))),
                               torch.view_as_real(torch.linalg.eigvals(torch.tensor(S))).numpy(),
                               atol=1e-12)
    # eigenvectors are unique up to a complex factor per column (torch's LAPACK and NumPy's
    # choose different signs): compare their moduli
    cv = n(cddp.view_as_real(cddp.linalg.eig(t(S)).eigenvectors))
    tv = torch.view_as_real(torch.linalg.eig(torch.tensor(S)).eigenvectors).numpy()
    np.testing.assert_allclose(np.hypot(cv[..., 0], cv[..., 1]), np.hypot(tv[..., 0], tv[..., 1]),
                               atol=1e-12)
    for p in (None, "fro", 1):
        np.testing.assert_allclose(n(cddp.linalg.cond(t(S), p)),
                                   torch.linalg.cond(torch.tensor(S), p).numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 3), (3, 5)])
def test_lu_reconstructs_and_solves(shape):
    A = RNG.standard_normal(shape)
    P, L, U = (n(v) for v in cddp.linalg.lu(t(A)))
    np.testing.assert_allclose(P @ L @ U, A, rtol=1e-12, atol=1e-12)
    k = min(shape[-2:])
    assert np.allclose(np.tril(L), L) and np.allclose(np.diagonal(L, axis1=-2, axis2=-1)[..., :k], 1)
    assert np.allclose(np.triu(U), U)
    # partial pivoting: every multiplier is at most 1 in magnitude
    assert np.abs(np.tril(L, -1)).max() <= 1.0 + 1e-12
    if shape[-1] == shape[-2]:
        LU, piv = cddp.linalg.lu_factor(t(A))
        B = RNG.standard_normal(shape[:-1] + (2,))
        np.testing.assert_allclose(n(cddp.linalg.lu_solve(LU, piv, t(B))), np.linalg.solve(A, B),
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(n(cddp.linalg.lu_solve(LU, piv, t(B), adjoint=True)),
                                   np.linalg.solve(np.swapaxes(A, -1, -2), B), rtol=1e-10,
                                   atol=1e-12)


def test_lu_gradients_and_singular_inputs():
    A = RNG.standard_normal((3, 3))
    gradcheck(lambda a: cddp.linalg.lu_factor(a).LU, A)
    gradcheck(lambda a: cddp.linalg.lu(a).U * 2 + cddp.linalg.lu(a).L, A)
    LU, piv = cddp.linalg.lu_factor(t(A))
    gradcheck(lambda lu, b: cddp.linalg.lu_solve(lu, piv, b), n(LU), RNG.standard_normal((3, 2)))
    S = t(np.array([[1.0, 2.0], [2.0, 4.0]]))
    r = cddp.linalg.lu_factor_ex(S)
    assert int(r.info) == 2 and r.pivots.tolist() == [2, 2]
    with pytest.raises(RuntimeError, match=r"U\[2,2\] is zero"):
        cddp.linalg.lu_factor(S)
    with pytest.warns(UserWarning, match="torch.lu is deprecated"):
        LU2, piv2 = t(A).lu()
    np.testing.assert_array_equal(n(LU2), n(LU))
    P, L, U = cddp.lu_unpack(LU2, piv2)
    np.testing.assert_allclose(n(P @ L @ U), A, rtol=1e-12)


def test_data_has_its_own_version_counter():
    """Writes through t.data do not count as modifications of t (torch gives .data a fresh
    version counter; torchdiffeq's adaptive solvers write their scratch that way), while writes
    through the .data tensor itself still count for what was saved from it."""
    w = cddp.ones(3, requires_grad=True)
    k = cddp.zeros(3)
    y = w * k
    k.data[0] = 5.0
    assert k._version == 0
    y.sum().backward()
    assert w.grad.tolist() == [5.0, 0.0, 0.0]          # the value at backward time, as torch
    d = cddp.zeros(3).data
    y = w * d
    d.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    k2 = cddp.zeros(3)
    k2.add_(1)
    assert k2._version == 1 and k2.detach()._version == 1        # detach shares the counter


def test_lu_matches_torch(torch):
    import warnings
    A = RNG.standard_normal((2, 4, 4))
    for shape in ((4, 4), (5, 3), (3, 5)):
        X = RNG.standard_normal(shape)
        c, tt = cddp.linalg.lu_factor_ex(t(X)), torch.linalg.lu_factor_ex(torch.tensor(X))
        np.testing.assert_allclose(n(c.LU), tt.LU.numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(n(c.pivots), tt.pivots.numpy())
    ca, ta = t(A, requires_grad=True), torch.tensor(A, requires_grad=True)
    g = RNG.standard_normal(A.shape)
    (cddp.linalg.lu_factor(ca).LU * t(g)).sum().backward()
    (torch.linalg.lu_factor(ta).LU * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(n(ca.grad), ta.grad.numpy(), rtol=1e-10, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        P, L, U = cddp.lu_unpack(*t(A[0]).lu())
        tP, tL, tU = torch.lu_unpack(*torch.tensor(A[0]).lu())
    for a, b in ((P, tP), (L, tL), (U, tU)):
        np.testing.assert_allclose(n(a), b.numpy(), rtol=1e-12, atol=1e-14)
