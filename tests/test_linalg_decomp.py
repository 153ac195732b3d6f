"""cddp.linalg decompositions, solvers and norms, plus the matching top-level functions and
Tensor methods (inverse/det/logdet/slogdet/matrix_power/pinverse/cholesky/qr/svd/chain_matmul).

Oracles:
  * NumPy (np.linalg) for every forward value, in float64 and (rounded inputs, looser tolerance)
    float32, which must also keep its dtype;
  * central finite differences of the NumPy forward in float64 for every backward (so neither the
    value nor the gradient oracle goes through cddp);
  * torch, when importable, for values and gradients on the same inputs (float64) and values in
    float32, for named results, ex-variants' info, and error classes.
Factors with a sign ambiguity (Q/R of qr, U/Vh of svd, eigenvectors of eigh) are compared through
sign-invariant quantities (Q*Q, R*R, U*U, V*V, reconstructions, orthogonality), never raw.
Inputs are well conditioned: X@X^T + n*I for SPD, randn + n*I for invertible, (X + X^T)/2 for
symmetric (distinct eigenvalues for the seeds used).
"""
import math

import numpy as np
import pytest

import cddp
from conftest import n, numeric_grad, t

INF = math.inf


# ---- inputs -----------------------------------------------------------------------------

def randn(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def invertible(shape, seed):
    return randn(shape, seed) + shape[-1] * np.eye(shape[-1])


def spd(shape, seed):
    x = randn(shape, seed)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


# ---- helpers that work on cddp and torch tensors alike (L is the module) ----------------

def S(x):
    """Symmetric part: every element perturbation keeps the input symmetric."""
    return (x + x.transpose(-2, -1)) / 2


def flat(L, *xs):
    return L.cat([x.reshape(-1) for x in xs])


def qr_inv(L, qr):
    Q, R = qr
    return flat(L, Q * Q, R * R)


def eigh_inv(L, res):
    w, V = res
    return flat(L, w, V * V)


def svd_inv(L, res):
    U, s, Vh = res
    return flat(L, U * U, s, Vh * Vh)


# NumPy counterparts
def nT(a):
    return np.swapaxes(a, -1, -2)


def nS(a):
    return (a + nT(a)) / 2


def nflat(*xs):
    return np.concatenate([np.asarray(x).reshape(-1) for x in xs])


def np_qr_inv(a):
    Q, R = np.linalg.qr(a)
    return nflat(Q * Q, R * R)


def np_eigh_inv(a):
    w, V = np.linalg.eigh(a)
    return nflat(w, V * V)


def np_svd_inv(a):
    U, s, Vh = np.linalg.svd(a, full_matrices=False)
    return nflat(U * U, s, Vh * Vh)


def np_vector_norm(x, ord, dim=None, keepdim=False):
    a = np.abs(x)
    if ord == INF:
        return a.max(axis=dim, keepdims=keepdim)
    if ord == -INF:
        return a.min(axis=dim, keepdims=keepdim)
    if ord == 0:
        return (a != 0).sum(axis=dim, keepdims=keepdim).astype(x.dtype)
    return (a ** ord).sum(axis=dim, keepdims=keepdim) ** (1.0 / ord)


def np_matrix_power(a, k):
    if k < 0:
        return np.linalg.matrix_power(np.linalg.inv(a), -k)
    return np.linalg.matrix_power(a, k)


# ---- the case table: (id, op(L, *tensors) -> tensor, numpy ref(*arrays), inputs) --------

def C(id, op, ref, inputs, family):
    return pytest.param(op, ref, inputs, id=id), family


# grouped so that one case checks several orders (values and gradients of each)
MATRIX_NORM_ORDS = [("fro", "nuc"), (2, -2), (1, -1, INF, -INF)]
VECTOR_NORM_ARGS = [[(2, None, False), (1, -1, False), (INF, 0, False)],
                    [(-INF, 1, True), (3, (0, 2), True), (0.5, None, False)],
                    [(-1, 1, False), (0, -1, False), (1.5, (-1, 0), False)]]

_CASES = [
    # inverse / determinants
    C("inv", lambda L, a: L.linalg.inv(a), np.linalg.inv, [invertible((2, 3, 3), 1)], "inv"),
    C("inv_5x5", lambda L, a: L.linalg.inv(a), np.linalg.inv, [invertible((5, 5), 2)], "inv"),
    C("inv_ex", lambda L, a: L.linalg.inv_ex(a).inverse, np.linalg.inv,
      [invertible((2, 3, 4, 4), 3)], "inv"),
    C("inverse+Tensor.inverse", lambda L, a: flat(L, L.inverse(a), a.inverse()),
      lambda a: nflat(np.linalg.inv(a), np.linalg.inv(a)), [invertible((2, 2, 2), 5)], "inv"),
    C("det", lambda L, a: L.linalg.det(a), np.linalg.det, [randn((3, 4, 4), 6)], "det"),
    C("det_batch2x3", lambda L, a: L.linalg.det(a), np.linalg.det, [randn((2, 3, 2, 2), 7)],
      "det"),
    C("det+Tensor.det", lambda L, a: flat(L, L.det(a), a.det()),
      lambda a: nflat(np.linalg.det(a), np.linalg.det(a)), [invertible((5, 5), 8)], "det"),
    C("slogdet", lambda L, a: L.linalg.slogdet(a).logabsdet, lambda a: np.linalg.slogdet(a)[1],
      [randn((2, 3, 3), 10)], "det"),
    C("slogdet+Tensor.slogdet", lambda L, a: flat(L, L.slogdet(a)[1], a.slogdet()[1]),
      lambda a: nflat(np.linalg.slogdet(a)[1], np.linalg.slogdet(a)[1]),
      [randn((2, 4, 4), 11)], "det"),
    C("logdet+Tensor.logdet", lambda L, a: flat(L, L.logdet(a), a.logdet()),
      lambda a: nflat(np.linalg.slogdet(a)[1], np.linalg.slogdet(a)[1]),
      [spd((2, 3, 3), 13)], "det"),
    # solve
    C("solve", lambda L, a, b: L.linalg.solve(a, b), np.linalg.solve,
      [invertible((2, 3, 3), 15), randn((2, 3, 2), 16)], "solve"),
    C("solve_vector", lambda L, a, b: L.linalg.solve(a, b), np.linalg.solve,
      [invertible((4, 4), 17), randn((4,), 18)], "solve"),
    C("solve_broadcast", lambda L, a, b: L.linalg.solve(a, b), np.linalg.solve,
      [invertible((3, 3), 19), randn((2, 3, 2), 20)], "solve"),
    C("solve_batched_vectors", lambda L, a, b: L.linalg.solve(a, b),    # B.shape == A.shape[:-1]
      lambda a, b: np.linalg.solve(a, b[..., None])[..., 0],
      [invertible((2, 3, 3), 14), randn((2, 3), 140)], "solve"),
    C("solve_left_false", lambda L, a, b: L.linalg.solve(a, b, left=False),
      lambda a, b: nT(np.linalg.solve(nT(a), nT(b))),
      [invertible((2, 3, 3), 21), randn((2, 4, 3), 22)], "solve"),
    # cholesky
    C("cholesky", lambda L, a: L.linalg.cholesky(S(a)), lambda a: np.linalg.cholesky(nS(a)),
      [spd((2, 3, 3), 23)], "cholesky"),
    C("cholesky_upper", lambda L, a: L.linalg.cholesky(S(a), upper=True),
      lambda a: nT(np.linalg.cholesky(nS(a))), [spd((4, 4), 24)], "cholesky"),
    C("cholesky_ex", lambda L, a: L.linalg.cholesky_ex(S(a)).L,
      lambda a: np.linalg.cholesky(nS(a)), [spd((2, 3, 3, 3), 25)], "cholesky"),
    C("cholesky+Tensor.cholesky",
      lambda L, a: flat(L, L.cholesky(S(a), upper=True), L.cholesky(S(a)), S(a).cholesky()),
      lambda a: (lambda c: nflat(nT(c), c, c))(np.linalg.cholesky(nS(a))),
      [spd((2, 5, 5), 26)], "cholesky"),
    # qr (reduced, m >= n), sign-invariant
    C("qr_tall", lambda L, a: qr_inv(L, L.linalg.qr(a)), np_qr_inv, [randn((2, 5, 3), 28)], "qr"),
    C("qr_square", lambda L, a: qr_inv(L, L.linalg.qr(a)), np_qr_inv, [randn((4, 4), 29)], "qr"),
    C("qr+Tensor.qr", lambda L, a: flat(L, qr_inv(L, L.qr(a)), qr_inv(L, a.qr())),
      lambda a: nflat(np_qr_inv(a), np_qr_inv(a)), [randn((2, 4, 2), 30)], "qr"),
    # eigh, sign-invariant
    C("eigh", lambda L, a: eigh_inv(L, L.linalg.eigh(S(a))), lambda a: np_eigh_inv(nS(a)),
      [randn((2, 3, 3), 32)], "eigh"),
    C("eigh_UPLO_U", lambda L, a: eigh_inv(L, L.linalg.eigh(S(a), UPLO="U")),
      lambda a: np_eigh_inv(nS(a)), [randn((5, 5), 33)], "eigh"),
    C("eigvalsh", lambda L, a: L.linalg.eigvalsh(S(a)), lambda a: np.linalg.eigvalsh(nS(a)),
      [randn((2, 4, 4), 34)], "eigh"),
    # svd (full_matrices=False), sign-invariant
    C("svd_tall", lambda L, a: svd_inv(L, L.linalg.svd(a, full_matrices=False)), np_svd_inv,
      [randn((2, 4, 3), 35)], "svd"),
    C("svd_wide", lambda L, a: svd_inv(L, L.linalg.svd(a, full_matrices=False)), np_svd_inv,
      [randn((3, 5), 36)], "svd"),
    C("svd_square", lambda L, a: svd_inv(L, L.linalg.svd(a, full_matrices=False)), np_svd_inv,
      [randn((2, 3, 3), 37)], "svd"),
    C("svdvals", lambda L, a: L.linalg.svdvals(a), lambda a: np.linalg.svd(a, compute_uv=False),
      [randn((2, 3, 4), 38)], "svd"),
    # old API: V, not Vh
    C("svd+Tensor.svd",
      lambda L, a: flat(L, *[(lambda U, s, V: flat(L, U * U, s, V * V))(*r)
                             for r in (L.svd(a), a.svd())]),
      lambda a: (lambda U, s, Vh: nflat(*[nflat(U * U, s, nT(Vh) * nT(Vh))] * 2))(
          *np.linalg.svd(a, full_matrices=False)),
      [randn((2, 4, 3), 39)], "svd"),
    # pinv
    C("pinv_tall", lambda L, a: L.linalg.pinv(a), np.linalg.pinv, [randn((4, 3), 41)], "pinv"),
    C("pinv_wide_batched", lambda L, a: L.linalg.pinv(a), np.linalg.pinv,
      [randn((2, 2, 4), 42)], "pinv"),
    C("pinv_hermitian", lambda L, a: L.linalg.pinv(S(a), hermitian=True),
      lambda a: np.linalg.pinv(nS(a), hermitian=True), [randn((4, 4), 43)], "pinv"),
    C("pinverse+Tensor.pinverse", lambda L, a: flat(L, L.pinverse(a), a.pinverse()),
      lambda a: nflat(np.linalg.pinv(a), np.linalg.pinv(a)), [randn((2, 3, 5), 44)], "pinv"),
    # matrix_power (negative: of the inverse)
    *[C(f"matrix_power_{ks}", lambda L, a, ks=ks: flat(L, *[L.linalg.matrix_power(a, k)
                                                            for k in ks]),
        lambda a, ks=ks: nflat(*[np_matrix_power(a, k) for k in ks]),
        [invertible((2, 3, 3), 46 + i)], "matrix_power")
      for i, ks in enumerate([(0, 1, 2, 3), (-1, -3), (5,)])],
    C("matrix_power+Tensor.matrix_power",
      lambda L, a: flat(L, L.matrix_power(a, 2), a.matrix_power(-2)),
      lambda a: nflat(np_matrix_power(a, 2), np_matrix_power(a, -2)),
      [invertible((2, 2, 2, 2), 52)], "matrix_power"),
    # matrix / vector norms
    *[C(f"matrix_norm_{os}", lambda L, a, os=os: flat(L, *[L.linalg.matrix_norm(a, o)
                                                           for o in os]),
        lambda a, os=os: nflat(*[np.linalg.norm(a, o, axis=(-2, -1)) for o in os]),
        [randn((2, 3, 4), 53 + i)], "matrix_norm") for i, os in enumerate(MATRIX_NORM_ORDS)],
    C("matrix_norm_nuc_dim_keepdim",
      lambda L, a: L.linalg.matrix_norm(a, "nuc", dim=(2, 0), keepdim=True),
      lambda a: np.linalg.norm(a, "nuc", axis=(2, 0), keepdims=True), [randn((3, 2, 4), 61)],
      "matrix_norm"),
    *[C(f"vector_norm_{i}", lambda L, a, g=g: flat(L, *[L.linalg.vector_norm(a, o, d, k)
                                                         for o, d, k in g]),
        lambda a, g=g: nflat(*[np_vector_norm(a, o, d, k) for o, d, k in g]),
        [randn((2, 3, 4), 62 + i)], "vector_norm") for i, g in enumerate(VECTOR_NORM_ARGS)],
    C("norm_default_3d", lambda L, a: L.linalg.norm(a), lambda a: np.sqrt((a * a).sum()),
      [randn((2, 3, 4), 70)], "norm"),
    C("norm_matrix_inf", lambda L, a: L.linalg.norm(a, INF), lambda a: np.linalg.norm(a, INF),
      [randn((3, 4), 71)], "norm"),
    C("norm_vector_3", lambda L, a: L.linalg.norm(a, 3), lambda a: np_vector_norm(a, 3),
      [randn((5,), 72)], "norm"),
    C("norm_nuc_dim", lambda L, a: L.linalg.norm(a, "nuc", dim=(1, 2)),
      lambda a: np.linalg.norm(a, "nuc", axis=(1, 2)), [randn((2, 3, 4), 73)], "norm"),
    C("norm_dim_int_keepdim", lambda L, a: L.linalg.norm(a, dim=1, keepdim=True),
      lambda a: np_vector_norm(a, 2, 1, True), [randn((2, 3, 4), 74)], "norm"),
    # products and small helpers
    C("cross", lambda L, a, b: L.linalg.cross(a, b), lambda a, b: np.cross(a, b),  # dim=-1
      [randn((3, 3), 75), randn((3, 3), 76)], "products"),
    C("cross_dim0", lambda L, a, b: L.linalg.cross(a, b, dim=0),
      lambda a, b: np.cross(a, b, axis=0), [randn((3, 4), 77), randn((3, 4), 78)], "products"),
    C("cross_broadcast", lambda L, a, b: L.linalg.cross(a, b), lambda a, b: np.cross(a, b),
      [randn((1, 3), 79), randn((2, 3), 80)], "products"),
    C("vecdot", lambda L, a, b: L.linalg.vecdot(a, b), lambda a, b: (a * b).sum(-1),
      [randn((2, 3, 4), 81), randn((4,), 82)], "products"),
    C("vecdot_dim0", lambda L, a, b: L.linalg.vecdot(a, b, dim=0), lambda a, b: (a * b).sum(0),
      [randn((3, 2), 83), randn((3, 2), 84)], "products"),
    C("diagonal", lambda L, a: L.linalg.diagonal(a, offset=1, dim1=0, dim2=2),
      lambda a: np.diagonal(a, offset=1, axis1=0, axis2=2), [randn((3, 4, 5), 85)], "products"),
    C("diagonal_neg", lambda L, a: L.linalg.diagonal(a, offset=-1),
      lambda a: np.diagonal(a, offset=-1, axis1=-2, axis2=-1), [randn((2, 4, 4), 86)],
      "products"),
    C("multi_dot", lambda L, a, b, c: L.linalg.multi_dot([a, b, c]),
      lambda a, b, c: np.linalg.multi_dot([a, b, c]),
      [randn((2, 3), 87), randn((3, 4), 88), randn((4, 2), 89)], "products"),
    C("multi_dot_vectors", lambda L, a, b, c, d: L.linalg.multi_dot([a, b, c, d]),
      lambda a, b, c, d: np.asarray(np.linalg.multi_dot([a, b, c, d])),
      [randn((3,), 90), randn((3, 4), 91), randn((4, 5), 92), randn((5,), 93)], "products"),
    C("chain_matmul", lambda L, a, b, c: L.chain_matmul(a, b, c),
      lambda a, b, c: a @ b @ c, [randn((2, 3), 94), randn((3, 4), 95), randn((4, 2), 96)],
      "products"),
]
CASES = [c for c, _ in _CASES]
FAMILIES = {}
for (p, fam) in _CASES:
    FAMILIES.setdefault(fam, []).append(p)


def check_grad(op, ref, arrays, atol=1e-6, rtol=1e-5):
    """cddp's backward of op (float64) against central differences (eps 1e-6) of the NumPy ref."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    w, num = numeric_grad(lambda *xs: np.asarray(ref(*xs)), arrays, eps=1e-6)
    xs = [t(a, requires_grad=True) for a in arrays]
    out = op(cddp, *xs)
    out.backward(t(np.asarray(w)))
    for i, (x, g) in enumerate(zip(xs, num)):
        got = np.zeros_like(g) if x.grad is None else n(x.grad)   # None only where g is 0
        np.testing.assert_allclose(got, g, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {i} vs finite differences")


# ---- forward + backward against NumPy ---------------------------------------------------

@pytest.mark.parametrize("op,ref,inputs", CASES)
def test_values_and_gradients_match_numpy(op, ref, inputs):
    # float64 values
    want = np.asarray(ref(*inputs))
    with cddp.no_grad():
        got = op(cddp, *[t(a) for a in inputs])
    assert got.dtype == cddp.float64
    assert tuple(got.shape) == want.shape
    np.testing.assert_allclose(n(got), want, rtol=1e-8, atol=1e-10)
    # float32 keeps its dtype; compared with the float64 result of the rounded inputs
    a32 = [a.astype(np.float32) for a in inputs]
    want32 = np.asarray(ref(*[a.astype(np.float64) for a in a32]))
    with cddp.no_grad():
        got32 = op(cddp, *[t(a) for a in a32])
    assert got32.dtype == cddp.float32
    np.testing.assert_allclose(n(got32), want32, rtol=1e-4, atol=1e-4)
    # gradients (float64) against finite differences
    check_grad(op, ref, inputs)


# ---- against torch -----------------------------------------------------------------------

@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_values_and_gradients_match_torch(torch, family):
    for p in FAMILIES[family]:
        op, _, inputs = p.values
        w = np.random.default_rng(7).standard_normal(np.shape(op(torch, *[torch.from_numpy(a)
                                                                         for a in inputs])))
        # float64 values and gradients
        cx = [t(a, requires_grad=True) for a in inputs]
        tx = [torch.from_numpy(a.copy()).requires_grad_(True) for a in inputs]
        cy, ty = op(cddp, *cx), op(torch, *tx)
        np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=f"{p.id}: values")
        cy.backward(t(w))
        ty.backward(torch.from_numpy(w))
        for i, (c, tt) in enumerate(zip(cx, tx)):
            cg = np.zeros(c.shape) if c.grad is None else n(c.grad)
            tg = np.zeros(tt.shape) if tt.grad is None else tt.grad.numpy()
            np.testing.assert_allclose(cg, tg, rtol=1e-7, atol=1e-9,
                                       err_msg=f"{p.id}: gradient of input {i}")
        # float32 values
        a32 = [a.astype(np.float32) for a in inputs]
        with cddp.no_grad():
            c32 = op(cddp, *[t(a) for a in a32])
        t32 = op(torch, *[torch.from_numpy(a) for a in a32])
        assert c32.dtype == cddp.float32 and t32.dtype == torch.float32
        np.testing.assert_allclose(n(c32), t32.detach().numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"{p.id}: float32 values")


# ---- decomposition structure (sign-free checks) ------------------------------------------

QR_SHAPES = [(4, 3), (3, 5), (2, 3, 3, 3), (2, 5, 2)]


@pytest.mark.parametrize("shape", QR_SHAPES, ids=str)
def test_qr_modes_shapes_orthogonality_reconstruction(shape):
    a = randn(shape, 100)
    m, k = shape[-2], min(shape[-2:])
    eye = lambda j: np.broadcast_to(np.eye(j), shape[:-2] + (j, j))
    for mode in ("reduced", "complete"):
        Q, R = cddp.linalg.qr(t(a), mode=mode)
        Q, R = n(Q), n(R)
        qc = k if mode == "reduced" else m
        assert Q.shape == shape[:-2] + (m, qc), (mode, Q.shape)
        assert R.shape == shape[:-2] + (qc, shape[-1]), (mode, R.shape)
        np.testing.assert_allclose(nT(Q) @ Q, eye(qc), atol=1e-12, err_msg=mode)
        np.testing.assert_allclose(Q @ R, a, atol=1e-12, err_msg=mode)
        np.testing.assert_array_equal(np.tril(R, -1), 0 * R, err_msg=f"{mode}: R upper")
        # R is unique up to row signs: |R| matches NumPy's
        Rn = np.linalg.qr(a, mode=mode)[1]
        np.testing.assert_allclose(np.abs(R), np.abs(Rn), atol=1e-12, err_msg=mode)
    Q, R = cddp.linalg.qr(t(a), mode="r")
    assert Q.numel() == 0
    np.testing.assert_allclose(np.abs(n(R)), np.abs(np.linalg.qr(a, mode="r")), atol=1e-12)


SVD_SHAPES = [(4, 3), (3, 5), (2, 3, 4, 4), (2, 1, 3)]


@pytest.mark.parametrize("shape", SVD_SHAPES, ids=str)
def test_svd_shapes_orthogonality_reconstruction(shape):
    a = randn(shape, 101)
    m, nn = shape[-2:]
    k = min(m, nn)
    batch = shape[:-2]
    for full in (True, False):
        U, s, Vh = (n(x) for x in cddp.linalg.svd(t(a), full_matrices=full))
        um, vn = (m, nn) if full else (k, k)
        assert U.shape == batch + (m, um) and s.shape == batch + (k,)
        assert Vh.shape == batch + (vn, nn)
        np.testing.assert_allclose(nT(U) @ U, np.broadcast_to(np.eye(um), batch + (um, um)),
                                   atol=1e-12)
        np.testing.assert_allclose(Vh @ nT(Vh), np.broadcast_to(np.eye(vn), batch + (vn, vn)),
                                   atol=1e-12)
        assert np.all(s >= 0) and np.all(np.diff(s, axis=-1) <= 0), "descending, >= 0"
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
        rec = (U[..., :, :k] * s[..., None, :]) @ Vh[..., :k, :]
        np.testing.assert_allclose(rec, a, atol=1e-12)
    np.testing.assert_allclose(n(cddp.linalg.svdvals(t(a))), np.linalg.svd(a, compute_uv=False),
                               rtol=1e-12)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_reads_only_its_triangle(uplo):
    a = randn((2, 3, 4, 4), 102)                     # not symmetric: only one triangle counts
    w, V = (n(x) for x in cddp.linalg.eigh(t(a), UPLO=uplo))
    wn = np.linalg.eigvalsh(a, UPLO=uplo)
    np.testing.assert_allclose(w, wn, rtol=1e-10, atol=1e-12)
    assert np.all(np.diff(w, axis=-1) >= 0), "ascending"
    tri = np.tril(a) if uplo == "L" else np.triu(a)
    sym = tri + nT(tri) - tri * np.eye(4)
    np.testing.assert_allclose((V * w[..., None, :]) @ nT(V), sym, atol=1e-12)
    np.testing.assert_allclose(nT(V) @ V, np.broadcast_to(np.eye(4), a.shape), atol=1e-12)
    np.testing.assert_allclose(n(cddp.linalg.eigvalsh(t(a), UPLO=uplo)), wn, rtol=1e-10,
                               atol=1e-12)
    # float32 keeps its dtype
    w32 = cddp.linalg.eigvalsh(t(a.astype(np.float32)), uplo)
    assert w32.dtype == cddp.float32
    np.testing.assert_allclose(n(w32), np.linalg.eigvalsh(a.astype(np.float32).astype(np.float64),
                                                         UPLO=uplo), rtol=1e-4, atol=1e-4)


def test_cholesky_lower_upper_and_ex():
    a = spd((2, 3, 5, 5), 103)
    L = n(cddp.linalg.cholesky(t(a)))
    np.testing.assert_array_equal(np.triu(L, 1), 0 * L)
    assert np.all(np.diagonal(L, axis1=-2, axis2=-1) > 0)
    np.testing.assert_allclose(L, np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)
    U = n(cddp.linalg.cholesky(t(a), upper=True))
    np.testing.assert_allclose(U, nT(L), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(n(cddp.cholesky(t(a))), L, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(n(cddp.cholesky(t(a), upper=True)), nT(L), rtol=1e-12, atol=1e-12)
    # cholesky_ex: info = order of the first non-positive leading minor, per matrix
    b = np.stack([spd((3, 3), 104), np.diag([1.0, -1.0, 1.0]), np.diag([2.0, 3.0, 0.0])])
    res = cddp.linalg.cholesky_ex(t(b))
    assert res.info.dtype == cddp.int32 and tuple(res.info.shape) == (3,)
    np.testing.assert_array_equal(n(res.info), [0, 2, 3])
    np.testing.assert_allclose(n(res.L)[0], np.linalg.cholesky(b[0]), rtol=1e-12)


def test_inv_ex_info_and_solve_identity():
    good = invertible((3, 3), 105)
    b = np.stack([good, np.zeros((3, 3)), good])
    res = cddp.linalg.inv_ex(t(b))
    assert res.info.dtype == cddp.int32 and tuple(res.info.shape) == (3,)
    info = n(res.info)
    assert info[0] == 0 and info[2] == 0 and info[1] > 0, info
    np.testing.assert_allclose(n(res.inverse)[0], np.linalg.inv(good), rtol=1e-10)
    # solve with B = I is the inverse; A @ solve(A, B) == B
    a = invertible((2, 4, 4), 106)
    x = n(cddp.linalg.solve(t(a), t(np.broadcast_to(np.eye(4), a.shape).copy())))
    np.testing.assert_allclose(x, np.linalg.inv(a), rtol=1e-10, atol=1e-12)


def test_slogdet_sign_logdet_nan_and_singular():
    a = randn((8, 3, 3), 107)                      # both signs of det occur
    sign, logabs = cddp.linalg.slogdet(t(a))
    sn, ln = np.linalg.slogdet(a)
    assert set(sn.tolist()) == {-1.0, 1.0}
    np.testing.assert_array_equal(n(sign), sn)
    np.testing.assert_allclose(n(logabs), ln, rtol=1e-10)
    sign2, logabs2 = cddp.slogdet(t(a))
    np.testing.assert_array_equal(n(sign2), sn)
    # logdet: nan where det < 0, log(det) where det > 0
    ld = n(cddp.logdet(t(a)))
    np.testing.assert_array_equal(np.isnan(ld), sn < 0)
    np.testing.assert_allclose(ld[sn > 0], ln[sn > 0], rtol=1e-10)
    # exactly singular (zero row): det 0, sign 0, logabsdet -inf, logdet -inf
    z = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [0.0, 0.0, 0.0]])
    assert n(cddp.linalg.det(t(z))) == 0.0
    s0, l0 = cddp.linalg.slogdet(t(z))
    assert n(s0) == 0.0 and n(l0) == -INF
    assert n(cddp.logdet(t(z))) == -INF


def test_pinv_rank_deficient_penrose_conditions():
    a = randn((5, 4), 108)
    a[:, 2] = 0.0                                   # rank 3
    p = n(cddp.linalg.pinv(t(a)))
    assert p.shape == (4, 5)
    np.testing.assert_allclose(a @ p @ a, a, atol=1e-12)
    np.testing.assert_allclose(p @ a @ p, p, atol=1e-12)
    np.testing.assert_allclose(nT(a @ p), a @ p, atol=1e-12)
    np.testing.assert_allclose(nT(p @ a), p @ a, atol=1e-12)
    np.testing.assert_allclose(p, np.linalg.pinv(a), atol=1e-12)


def test_matrix_rank():
    rng = np.random.default_rng(109)
    mats = np.stack([rng.standard_normal((4, 5)),                                  # 4
                     rng.standard_normal((4, 1)) @ rng.standard_normal((1, 5)),   # 1
                     np.zeros((4, 5)),                                            # 0
                     np.pad(np.diag([3.0, 2.0, 1.0]), ((0, 1), (0, 2)))])          # 3
    r = cddp.linalg.matrix_rank(t(mats))
    assert r.dtype == cddp.int64 and tuple(r.shape) == (4,)
    np.testing.assert_array_equal(n(r), [4, 1, 0, 3])
    np.testing.assert_array_equal(n(r), np.linalg.matrix_rank(mats))
    assert n(cddp.linalg.matrix_rank(t(mats[0].T.astype(np.float32)))) == 4


def test_rank_and_pinv_tolerances():
    d = np.diag([1.0, 1e-3, 1e-20])
    rank = lambda **kw: int(n(cddp.linalg.matrix_rank(t(d), **kw)))
    assert rank() == 2                        # default rtol = eps * max(m, n)
    assert rank(rtol=1e-2) == 1
    assert rank(atol=0.5) == 1                # atol alone: rtol = 0
    assert rank(atol=1e-4, rtol=1e-2) == 1    # tol = max(atol, rtol * smax)
    assert rank(atol=1e-4) == 2
    h = np.diag([-1.0, 1e-3, 0.0])
    assert int(n(cddp.linalg.matrix_rank(t(h), hermitian=True))) == 2
    np.testing.assert_allclose(n(cddp.linalg.pinv(t(d), rtol=1e-2)), np.diag([1.0, 0.0, 0.0]))
    np.testing.assert_allclose(n(cddp.linalg.pinv(t(d), atol=1e-4)), np.diag([1.0, 1e3, 0.0]),
                               rtol=1e-12)
    np.testing.assert_allclose(n(cddp.linalg.pinv(t(h), hermitian=True)),
                               np.diag([-1.0, 1e3, 0.0]), rtol=1e-12)


def test_non_contiguous_and_expanded_inputs():
    """Transposed, strided and stride-0 (expanded) views give the same results as copies."""
    base = invertible((3, 4, 4), 120)
    views = {
        "transposed": (t(base).transpose(-2, -1), nT(base)),
        "strided": (t(np.repeat(base, 2, axis=-1))[..., ::2], base),
        "expanded": (t(base[0]).expand(3, 4, 4), np.broadcast_to(base[0], (3, 4, 4))),
    }
    for name, (x, a) in views.items():
        np.testing.assert_allclose(n(cddp.linalg.inv(x)), np.linalg.inv(a), rtol=1e-10,
                                   atol=1e-12, err_msg=name)
        np.testing.assert_allclose(n(cddp.linalg.det(x)), np.linalg.det(a), rtol=1e-10,
                                   err_msg=name)
        np.testing.assert_allclose(n(cddp.linalg.solve(x, x.transpose(-2, -1))),
                                   np.linalg.solve(a, nT(a)), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
        g = x @ x.transpose(-2, -1)
        np.testing.assert_allclose(n(cddp.linalg.cholesky(g)), np.linalg.cholesky(a @ nT(a)),
                                   rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(n(cddp.linalg.eigvalsh(x)), np.linalg.eigvalsh(a),
                                   rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(n(cddp.linalg.svdvals(x)), np.linalg.svd(a, compute_uv=False),
                                   rtol=1e-10, err_msg=name)
        Q, R = cddp.linalg.qr(x)
        np.testing.assert_allclose(n(Q @ R), a, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(np.abs(n(R)), np.abs(np.linalg.qr(a)[1]), atol=1e-12,
                                   err_msg=name)


def test_top_level_svd_returns_V_and_compute_uv_false():
    a = randn((2, 5, 3), 110)
    U, s, V = (n(x) for x in cddp.svd(t(a)))
    assert U.shape == (2, 5, 3) and s.shape == (2, 3) and V.shape == (2, 3, 3)
    np.testing.assert_allclose((U * s[..., None, :]) @ nT(V), a, atol=1e-12)
    U, s, V = (n(x) for x in cddp.svd(t(a), some=False))
    assert U.shape == (2, 5, 5) and V.shape == (2, 3, 3)
    np.testing.assert_allclose((U[..., :3] * s[..., None, :]) @ nT(V), a, atol=1e-12)
    U, s, V = (n(x) for x in cddp.svd(t(a), compute_uv=False))
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    assert U.shape == (2, 5, 5) and V.shape == (2, 3, 3)         # zero-filled, as torch
    assert not U.any() and not V.any()
    # top-level qr(some=False) is the complete mode
    Q, R = (n(x) for x in cddp.qr(t(a), some=False))
    assert Q.shape == (2, 5, 5) and R.shape == (2, 5, 3)
    np.testing.assert_allclose(Q @ R, a, atol=1e-12)


def test_named_results():
    a = spd((2, 3, 3), 111)
    r = cddp.linalg.slogdet(t(a))
    assert r.sign is r[0] and r.logabsdet is r[1]
    r = cddp.linalg.qr(t(a))
    assert r.Q is r[0] and r.R is r[1]
    r = cddp.linalg.svd(t(a))
    assert r.U is r[0] and r.S is r[1] and r.Vh is r[2]
    r = cddp.linalg.eigh(t(a))
    assert r.eigenvalues is r[0] and r.eigenvectors is r[1]
    r = cddp.linalg.inv_ex(t(a))
    assert r.inverse is r[0] and r.info is r[1]
    r = cddp.linalg.cholesky_ex(t(a))
    assert r.L is r[0] and r.info is r[1]
    assert len(cddp.svd(t(a))) == 3 and len(cddp.linalg.slogdet(t(a))) == 2


def test_empty_matrices():
    d = cddp.linalg.det(t(np.zeros((2, 0, 0))))
    np.testing.assert_array_equal(n(d), [1.0, 1.0])
    i = cddp.linalg.inv(t(np.zeros((0, 3, 3))))
    assert tuple(i.shape) == (0, 3, 3)


def test_vector_norm_dtype_argument():
    x = randn((3, 4), 112).astype(np.float32)
    r = cddp.linalg.vector_norm(t(x), dtype=cddp.float64)
    assert r.dtype == cddp.float64
    np.testing.assert_allclose(n(r), np.sqrt((x.astype(np.float64) ** 2).sum()), rtol=1e-12)
    r = cddp.linalg.vector_norm(t(x), 1, dim=0, dtype=cddp.float64)
    assert r.dtype == cddp.float64 and tuple(r.shape) == (4,)
    np.testing.assert_allclose(n(r), np.abs(x.astype(np.float64)).sum(0), rtol=1e-12)


# ---- errors ------------------------------------------------------------------------------

def test_linalg_error_is_runtime_error():
    assert issubclass(cddp.linalg.LinAlgError, RuntimeError)


SINGULAR_OPS = {
    "linalg.inv": lambda a: cddp.linalg.inv(a),
    "inverse": lambda a: cddp.inverse(a),
    "Tensor.inverse": lambda a: a.inverse(),
    "linalg.solve": lambda a: cddp.linalg.solve(a, t(np.ones((3, 1)))),
    "matrix_power_neg": lambda a: cddp.linalg.matrix_power(a, -1),
}


@pytest.mark.parametrize("name", sorted(SINGULAR_OPS))
def test_singular_raises_linalg_error(name):
    with pytest.raises(cddp.linalg.LinAlgError, match="singular"):
        SINGULAR_OPS[name](t(np.zeros((3, 3))))
    with pytest.raises(cddp.linalg.LinAlgError, match="singular"):
        SINGULAR_OPS[name](t(np.stack([np.eye(3), np.zeros((3, 3))])))   # one bad in a batch


@pytest.mark.parametrize("op", [lambda a: cddp.linalg.cholesky(a), lambda a: cddp.cholesky(a),
                                lambda a: cddp.linalg.cholesky(a, upper=True)],
                         ids=["linalg.cholesky", "cholesky", "upper"])
def test_not_positive_definite_raises(op):
    with pytest.raises(cddp.linalg.LinAlgError, match="positive-definite"):
        op(t(np.diag([1.0, -1.0, 2.0])))
    with pytest.raises(cddp.linalg.LinAlgError, match="positive-definite"):
        op(t(np.stack([np.eye(2), -np.eye(2)])))


NON_SQUARE_OPS = {
    "inv": lambda a: cddp.linalg.inv(a),
    "det": lambda a: cddp.linalg.det(a),
    "slogdet": lambda a: cddp.linalg.slogdet(a),
    "cholesky": lambda a: cddp.linalg.cholesky(a),
    "eigh": lambda a: cddp.linalg.eigh(a),
    "solve": lambda a: cddp.linalg.solve(a, t(np.ones((2, 1)))),
    "matrix_power": lambda a: cddp.linalg.matrix_power(a, 2),
}


@pytest.mark.parametrize("name", sorted(NON_SQUARE_OPS))
def test_non_square_raises(name):
    with pytest.raises(RuntimeError, match="square matri"):
        NON_SQUARE_OPS[name](t(np.ones((2, 3))))


def test_other_errors():
    with pytest.raises(RuntimeError, match="length 3"):
        cddp.linalg.cross(t(np.ones((2, 2))), t(np.ones((2, 2))))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        cddp.linalg.matrix_norm(t(np.ones(3)))


# ---- torch: structure of qr/svd/eigh and errors on the same inputs -----------------------

def test_qr_svd_eigh_match_torch_up_to_sign(torch):
    for shape in QR_SHAPES:
        check_factors_match_torch(torch, shape)


def check_factors_match_torch(torch, shape):
    a = randn(shape, 113)
    k = min(shape[-2:])
    for mode in ("reduced", "complete", "r"):
        cq, cr = cddp.linalg.qr(t(a), mode=mode)
        tq, tr = torch.linalg.qr(torch.from_numpy(a), mode=mode)
        assert tuple(cq.shape) == tuple(tq.shape) and tuple(cr.shape) == tuple(tr.shape), mode
        np.testing.assert_allclose(np.abs(n(cr)), tr.abs().numpy(), atol=1e-12, err_msg=mode)
        if mode != "r":   # the first k columns are unique up to sign
            np.testing.assert_allclose(np.abs(n(cq)[..., :k]), tq[..., :k].abs().numpy(),
                                       atol=1e-12, err_msg=mode)
    for full in (True, False):
        cu, cs, cv = cddp.linalg.svd(t(a), full_matrices=full)
        tu, ts, tv = torch.linalg.svd(torch.from_numpy(a), full_matrices=full)
        assert [tuple(x.shape) for x in (cu, cs, cv)] == [tuple(x.shape) for x in (tu, ts, tv)]
        np.testing.assert_allclose(n(cs), ts.numpy(), rtol=1e-12)
        np.testing.assert_allclose(np.abs(n(cu)[..., :k]), tu[..., :k].abs().numpy(), atol=1e-10)
        np.testing.assert_allclose(np.abs(n(cv)[..., :k, :]), tv[..., :k, :].abs().numpy(),
                                   atol=1e-10)
    if shape[-1] == shape[-2]:
        for uplo in ("L", "U"):
            cw, cV = cddp.linalg.eigh(t(a), UPLO=uplo)
            tw, tV = torch.linalg.eigh(torch.from_numpy(a), UPLO=uplo)
            np.testing.assert_allclose(n(cw), tw.numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(np.abs(n(cV)), tV.abs().numpy(), atol=1e-10)


def test_info_ranks_and_old_api_match_torch(torch):
    b = np.stack([spd((3, 3), 114), np.diag([1.0, -1.0, 1.0]), np.diag([2.0, 3.0, 0.0])])
    np.testing.assert_array_equal(n(cddp.linalg.cholesky_ex(t(b)).info),
                                  torch.linalg.cholesky_ex(torch.from_numpy(b)).info.numpy())
    c = np.stack([invertible((3, 3), 115), np.zeros((3, 3))])
    ci = n(cddp.linalg.inv_ex(t(c)).info)
    ti = torch.linalg.inv_ex(torch.from_numpy(c)).info.numpy()
    np.testing.assert_array_equal(ci == 0, ti == 0)
    r = np.stack([randn((4, 5), 116), randn((4, 2), 117) @ randn((2, 5), 118)])
    np.testing.assert_array_equal(n(cddp.linalg.matrix_rank(t(r))),
                                  torch.linalg.matrix_rank(torch.from_numpy(r)).numpy())
    a = randn((5, 3), 119)
    cu, cs, cv = cddp.svd(t(a), compute_uv=False)
    tu, ts, tv = torch.svd(torch.from_numpy(a), compute_uv=False)
    assert tuple(cu.shape) == tuple(tu.shape) and tuple(cv.shape) == tuple(tv.shape)
    np.testing.assert_allclose(n(cs), ts.numpy(), rtol=1e-12)
    for some in (True, False):
        cu, cs, cv = cddp.svd(t(a), some=some)
        tu, ts, tv = torch.svd(torch.from_numpy(a), some=some)
        assert [tuple(x.shape) for x in (cu, cs, cv)] == [tuple(x.shape) for x in (tu, ts, tv)]
        np.testing.assert_allclose(np.abs(n(cv)), tv.abs().numpy(), atol=1e-10)
    z = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [0.0, 0.0, 0.0]])
    for f in ("det", "logdet"):
        np.testing.assert_array_equal(n(getattr(cddp, f)(t(z))),
                                      getattr(torch, f)(torch.from_numpy(z)).numpy())
    np.testing.assert_array_equal(n(cddp.logdet(t(-np.eye(3)))),
                                  torch.logdet(torch.from_numpy(-np.eye(3))).numpy())


ERROR_INPUTS = [
    ("inv singular", lambda L, a: L.linalg.inv(a), np.zeros((3, 3))),
    ("solve singular", lambda L, a: L.linalg.solve(a, a[..., :1] * 0 + 1), np.zeros((3, 3))),
    ("cholesky not PD", lambda L, a: L.linalg.cholesky(a), -np.eye(3)),
    ("inv non-square", lambda L, a: L.linalg.inv(a), np.ones((2, 3))),
    ("det non-square", lambda L, a: L.linalg.det(a), np.ones((2, 3))),
    ("eigh non-square", lambda L, a: L.linalg.eigh(a), np.ones((2, 3))),
    ("cholesky non-square", lambda L, a: L.linalg.cholesky(a), np.ones((2, 3))),
]


def test_error_classes_match_torch(torch):
    for name, op, a in ERROR_INPUTS:
        with pytest.raises(RuntimeError) as te:
            op(torch, torch.from_numpy(a))
        with pytest.raises(RuntimeError) as ce:
            op(cddp, t(a))
        assert isinstance(ce.value, cddp.linalg.LinAlgError) == \
            isinstance(te.value, torch.linalg.LinAlgError), name


def test_deprecated_top_level_names_warn_as_torch():
    """torch.cholesky, torch.qr and torch.chain_matmul warn that they are deprecated (and
    still compute); torch.svd, inverse, det do not."""
    import warnings
    A = t(spd((3, 3), 0))
    for call, name in ((lambda: cddp.cholesky(A), "torch.cholesky is deprecated"),
                       (lambda: cddp.qr(A), "torch.qr is deprecated"),
                       (lambda: cddp.chain_matmul(A, A), "torch.chain_matmul is deprecated")):
        with pytest.warns(UserWarning, match=name):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cddp.svd(A), cddp.inverse(A), cddp.det(A), cddp.linalg.cholesky(A)
