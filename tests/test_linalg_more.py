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
