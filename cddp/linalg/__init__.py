"""cddp.linalg — torch.linalg: norms, inverses, determinants, solves and factorizations of
(batches of) matrices (..., m, n), with torch's signatures, named results, errors and
gradients.

The factorizations are LAPACK through NumPy (_factor.py); everything else is composed of
them and cddp's differentiable ops, as torch composes pinv, matrix_norm('nuc') or
matrix_power. The old top-level names (torch.inverse, det, svd returning V, qr(some=...),
...) and the Tensor methods are at the end. Inside an autocast region the functions on torch's
CPU fp32 list (@autocast_fp32_op) take float16 / bfloat16 inputs as float32.
"""
import math
import warnings

import numpy as np

from .. import _C
from .._ops import _return_type, autocast_fp32_op
from .._shape_ops import cross as _cross
from ..autograd.grad_mode import no_grad
from . import _factor
from ._factor import LinAlgError, check_float, check_matrix, check_square

__all__ = ["LinAlgError", "vector_norm", "matrix_norm", "norm", "inv", "inv_ex", "det",
           "slogdet", "solve", "cholesky", "cholesky_ex", "qr", "svd", "svdvals", "eigh",
           "eigvalsh", "pinv", "matrix_power", "matrix_rank", "cross", "multi_dot", "vecdot",
           "diagonal", "matmul", "householder_product", "matrix_exp", "solve_triangular",
           "lstsq", "eig", "eigvals", "vander", "cond", "solve_ex", "lu_factor", "lu_factor_ex",
           "lu", "lu_solve"]

_slogdet_result = _return_type("linalg_slogdet", ("sign", "logabsdet"))
_qr_result = _return_type("linalg_qr", ("Q", "R"))
_svd_result = _return_type("linalg_svd", ("U", "S", "Vh"))
_eigh_result = _return_type("linalg_eigh", ("eigenvalues", "eigenvectors"))
_inv_ex_result = _return_type("linalg_inv_ex", ("inverse", "info"))
_cholesky_ex_result = _return_type("linalg_cholesky_ex", ("L", "info"))
_geqrf_result = _return_type("geqrf", ("a", "tau"))
_triangular_solve_result = _return_type("triangular_solve", ("solution", "cloned_coefficient"))
_lstsq_result = _return_type("linalg_lstsq", ("solution", "residuals", "rank", "singular_values"))
_eig_result = _return_type("linalg_eig", ("eigenvalues", "eigenvectors"))
_solve_ex_result = _return_type("linalg_solve_ex", ("result", "info"))
_lu_factor_result = _return_type("linalg_lu_factor", ("LU", "pivots"))
_lu_factor_ex_result = _return_type("linalg_lu_factor_ex", ("LU", "pivots", "info"))
_lu_result = _return_type("linalg_lu", ("P", "L", "U"))
_lu_unpack_result = _return_type("lu_unpack", ("P", "L", "U"))

matmul = _C.matmul


# ---- norms ----------------------------------------------------------------------------------

_REDUCED = (_C.float16, _C.bfloat16)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """The ord-norm of x's elements over dim (all of them when None)."""
    if dtype is not None:
        x = x.to(dtype)
    if x.dtype not in _REDUCED:               # float16 / bfloat16: as torch, in their dtype
        check_float("linalg.vector_norm", x)
    return _C.norm(x, p=ord, dim=dim, keepdim=keepdim)


def _to_end(A, dim):
    """A with the two matrix dims `dim` moved last, and how to put reduced dims back."""
    nd = A.dim()
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {tuple(dim)}")
    d0, d1 = (d % nd if -nd <= d < nd else None for d in dim)
    if d0 is None or d1 is None:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                         f"{nd - 1}], but got {dim[0] if d0 is None else dim[1]})")
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, "
                           f"{dim[1]})")
    return A.movedim((d0, d1), (-2, -1)), sorted((d0, d1))


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: A002
    """'fro', 'nuc', inf, -inf, 1, -1, 2 or -2 norm of each matrix over the dims `dim`
    (float16 / bfloat16 take the ones without singular values, as torch)."""
    if A.dtype not in _REDUCED or ord in ("nuc", 2, -2):
        check_matrix("linalg.matrix_norm", A)
    elif A.dim() < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    if dtype is not None:
        A = A.to(dtype)
    M, dims = _to_end(A, dim)
    if ord == "fro":
        out = _C.norm(M, p=2, dim=(-2, -1))
    elif ord == "nuc":
        out = svdvals(M).sum(-1)
    elif ord in (2, -2):
        s = svdvals(M)
        out = s.amax(-1) if ord == 2 else s.amin(-1)
    elif ord in (1, -1, math.inf, -math.inf):
        sums = M.abs().sum(-2 if abs(ord) == 1 else -1)    # column sums (1) or row sums (inf)
        out = sums.amax(-1) if ord > 0 else sums.amin(-1)
    else:
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if keepdim:
        out = out.unsqueeze(dims[0]).unsqueeze(dims[1])
    return out


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: a vector norm over one dim (or all, when ord is None), a matrix norm
    over two."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is not None and dim is None:
        if A.dim() == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
        if A.dim() != 1:
            raise RuntimeError("linalg.norm: If dim is not specified but ord is, the input "
                               f"must be 1D or 2D. Got {A.dim()}D.")
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: Order {ord} not supported for vector norms.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# ---- inverse, determinants, solve -----------------------------------------------------------

@autocast_fp32_op
def inv(A):
    check_square("linalg.inv", A)
    return _factor.Inv.apply(A)


@autocast_fp32_op
def inv_ex(A, *, check_errors=False):
    """(inverse, info): info is 0 per matrix, or > 0 (the first zero pivot) where the matrix
    is singular — then that matrix's inverse is not meaningful."""
    check_square("linalg.inv_ex", A)
    try:
        return _inv_ex_result((inv(A), _C.zeros(A.shape[:-2], dtype=_C.int32)))
    except LinAlgError:
        if check_errors:
            raise
    out, info = _factor.inv_info(_factor._np(A))    # the failing path: matrix by matrix
    return _inv_ex_result((_factor._tensor(out, A.dtype), _C.from_numpy(info)))


def det(A):
    check_square("linalg.det", A)
    return _factor.Det.apply(A)


def slogdet(A):
    check_square("linalg.slogdet", A)
    return _slogdet_result(_factor.Slogdet.apply(A))


def _solve_args(name, A, B):
    """torch's checks of a solve's A (square batches) and B (floating, A's dtype)."""
    check_square(name, A)
    check_float(name, B)
    if A.dtype is not B.dtype:
        raise RuntimeError(f"{name}: Expected A and B to have the same dtype, but found "
                           f"A of type {_factor._dtype_word(A.dtype)} and B of type "
                           f"{_factor._dtype_word(B.dtype)} instead")


@autocast_fp32_op
def solve(A, B, *, left=True):
    _solve_args("linalg.solve", A, B)
    return _factor.Solve.apply(A, B, left)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with T X = B (left) or X T = B, T the upper or lower triangle of A (unit diagonal when
    unitriangular; the rest of A is not read). Solved as linalg.solve on T (np.linalg's LU:
    the same X up to rounding), so a zero on T's diagonal raises LinAlgError where torch's
    trsm returns inf / nan. The gradient flows through the triangle's mask, so A's gradient
    is zero outside it (and on the diagonal when unitriangular), as torch's."""
    _solve_args("linalg.solve_triangular", A, B)
    if B.dim() < 2:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 "
                           "dimensions.")
    if unitriangular:
        T = (A.triu(1) if upper else A.tril(-1)) + _C.eye(A.shape[-1], dtype=A.dtype)
    else:
        T = A.triu() if upper else A.tril()
    return _factor.Solve.apply(T, B, left)


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


@autocast_fp32_op
def lstsq(A, B, rcond=None, *, driver=None):
    """Least squares (minimum norm when A is rank-deficient or wide): solution = pinv(A) B
    with singular values below rcond * s_max dropped (rcond defaults to eps * max(m, n)), so
    the solution is differentiable with pinv's derivative. The other fields follow the
    driver as torch's: rank unless "gels"; singular_values for "gelsd" / "gelss"; residuals
    (squared column norms of A X - B) for every driver but the default "gelsy", when A is
    tall (m > n) and of full rank. Results equal LAPACK's to rounding for full-rank problems;
    for rank-deficient ones gelsy's basic solution may differ from this minimum-norm one
    (gelsd / gelss give the minimum-norm one too)."""
    check_matrix("linalg.lstsq", A)
    check_float("linalg.lstsq", B)
    if A.dtype is not B.dtype:
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same "
                           f"dtype, but got input's dtype {_factor._dtype_word(A.dtype)} and "
                           f"other's dtype {_factor._dtype_word(B.dtype)}")
    driver = "gelsy" if driver is None else driver
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of "
                           "(gels, gelsy, gelsd, gelss)")
    m, n = A.shape[-2], A.shape[-1]
    vec = B.dim() == A.dim() - 1
    if (B.shape[-1] if vec else B.shape[-2]) != m:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    if rcond is None:
        rcond = _factor.eps(A.dtype) * max(m, n)
    Bm = B.unsqueeze(-1) if vec else B
    X = pinv(A, rtol=rcond) @ Bm
    empty = _C.empty((0,), dtype=A.dtype)
    with no_grad():
        sv = svdvals(A) if driver in ("gelsd", "gelss") else empty
        rank = (matrix_rank(A, rtol=rcond) if driver != "gels"
                else _C.empty((0,), dtype=_C.int64))
    full = driver == "gels" or bool((rank == min(m, n)).all())
    residuals = empty
    if driver != "gelsy" and m > n and full:
        residuals = ((A @ X - Bm) ** 2).sum(-2)
        residuals = residuals.squeeze(-1) if vec else residuals
    return _lstsq_result((X.squeeze(-1) if vec else X, residuals, rank, sv))


@autocast_fp32_op
def eig(A):
    """Eigenvalues and eigenvectors of a general square matrix: complex tensors (LAPACK's geev
    through NumPy: unit columns, each unique up to a complex factor, which torch's LAPACK may
    choose differently). Not differentiable here (torch's is)."""
    check_square("linalg.eig", A)
    _no_grad_guard("linalg.eig", A)
    w, v = np.linalg.eig(_factor._np(A))
    return _eig_result((_complex_of(w, A.dtype), _complex_of(v, A.dtype)))


@autocast_fp32_op
def eigvals(A):
    """The eigenvalues of eig(A), complex."""
    check_square("linalg.eigvals", A)
    _no_grad_guard("linalg.eigvals", A)
    return _complex_of(np.linalg.eigvals(_factor._np(A)), A.dtype)


def _no_grad_guard(name, A):
    if A.requires_grad and _C.is_grad_enabled():
        raise NotImplementedError(f"{name}: cddp computes eigen-decompositions of general "
                                  "matrices without a derivative; detach the input (eigh has "
                                  "one for symmetric matrices)")


def _complex_of(a, dtype):
    from .._complex import view_as_complex
    real = np.float32 if dtype is _C.float32 else np.float64
    return view_as_complex(_C.from_numpy(np.ascontiguousarray(
        np.stack([a.real, a.imag], -1).astype(real))))


def vander(x, *, N=None):  # noqa: N803 (torch's argument name)
    """(..., n) -> (..., n, N) with columns x^0, x^1, ..., x^(N-1) (increasing powers)."""
    if x.dim() < 1:
        raise RuntimeError("linalg.vander: x must have at least one dimension")
    N = x.shape[-1] if N is None else int(N)
    if N < 1:
        raise RuntimeError("N must be greater than 1.")
    # one allocation of the result, then a running product along it: the same products as
    # x^0, x^0*x, ... column by column, with cumprod's gradient (which handles zeros)
    ones = _C.ones_like(x).unsqueeze(-1)
    return _C.cat([ones, x.unsqueeze(-1).expand(*x.shape, N - 1)], -1).cumprod(-1)


@autocast_fp32_op
def cond(A, p=None):
    """The condition number: sigma_max / sigma_min for p None / 2, sigma_min / sigma_max for
    -2 (from svdvals), else norm(A, p) * norm(inv(A), p) (square matrices)."""
    check_matrix("linalg.cond", A)
    if p is None or p in (2, -2):
        s = svdvals(A)
        ratio = s[..., 0] / s[..., -1]
        return ratio.reciprocal() if p == -2 else ratio
    check_square("linalg.cond", A)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def solve_ex(A, B, *, left=True, check_errors=False):
    """(result, info): info per system from the LU factorization (lu_factor_ex: 0, or the
    first zero pivot's column); the result is linalg.solve's when every system is regular,
    else NaN (not meaningful there), and check_errors raises."""
    _solve_args("linalg.solve_ex", A, B)
    with no_grad():
        info = _C.from_numpy(_factor.lu_np(_factor._np(A))[2])
    if not bool((info > 0).any()):
        return _solve_ex_result((solve(A, B, left=left), info))
    if check_errors:
        raise LinAlgError("linalg.solve_ex: The solver failed because the input matrix is "
                          "singular.")
    with no_grad():
        X = _C.full_like(B, math.nan)
    return _solve_ex_result((X, info))


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """(LU, pivots, info): partial pivoting as LAPACK's getrf (cddp/linalg/_factor.py, the
    unblocked algorithm in NumPy over the batch: the same pivots, factors to rounding);
    pivots 1-based int32; info the first zero pivot's column (1-based), 0 when none.
    Differentiable for square matrices (torch's formula)."""
    check_matrix("linalg.lu_factor_ex", A)
    if not pivot:
        raise NotImplementedError("linalg.lu_factor: LU without pivoting is not implemented "
                                  "on the CPU")            # torch's CPU says the same
    LU, piv, info = _factor.LUFactor.apply(A)
    if check_errors and bool((info > 0).any()):
        raise LinAlgError("torch.linalg.lu_factor_ex: the factorization could not be completed "
                          "because the input is not full rank")
    return _lu_factor_ex_result((LU, piv, info))


def lu_factor(A, *, pivot=True):
    LU, piv, info = lu_factor_ex(A, pivot=pivot)
    bad = (info > 0).reshape(-1)
    if bool(bad.any()):
        k = int(info.reshape(-1)[bad][0])
        raise RuntimeError(f"torch.linalg.lu_factor: U[{k},{k}] is zero and using it on lu_solve "
                           "would result in a division by zero. If you still want to perform "
                           "the factorization, consider calling linalg.lu(A, pivot) or "
                           "linalg.lu_factor_ex(A, pivot)")
    return _lu_factor_result((LU, piv))


def _check_pivots(pivots, m, fn):
    """torch's pivot checks (a forged or foreign pivots tensor must not index out of range):
    integers in [1, m] — RuntimeError in torch's words otherwise."""
    if pivots.dtype not in (_C.int32, _C.int64):
        raise RuntimeError(f"{fn}: pivots must be an int32 tensor, got {pivots.dtype}")
    if pivots.numel():
        lo, hi = int(pivots.min()), int(pivots.max())
        if fn == "lu_unpack" and (lo < 1 or hi > m):
            raise RuntimeError("pivots passed to lu_unpack must be between 1 and LU.size(-2) "
                               "inclusive.Did you properly pass the result of lu_factor?")
        if lo < 1:
            raise RuntimeError(f"Pivots given to {fn} must all be greater or equal to 1. Did "
                               "you properly pass the result of lu_factor?")
        if hi > m:
            raise RuntimeError(f"Pivots given to {fn} must all be smaller or equal to "
                               "LU.size(-2). Did you properly pass the result of lu_factor?")


def _lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, _fn="lu_unpack"):
    """torch.lu_unpack: (P, L, U) with A = P L U; L unit lower (m, k), U upper (k, n)."""
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    if unpack_pivots:
        _check_pivots(LU_pivots, m, _fn)
    k = min(m, n)
    empty = _C.empty((0,), dtype=LU_data.dtype)
    L = U = P = empty
    if unpack_data:
        L = LU_data[..., :, :k].tril(-1) + _C.eye(m, k, dtype=LU_data.dtype)
        U = LU_data[..., :k, :].triu()
    if unpack_pivots:
        perm = _factor.perm_from_pivots(LU_pivots.numpy(), m)          # A[perm] = L U
        eye = np.eye(m, dtype=np.float32 if LU_data.dtype is _C.float32 else np.float64)
        P = _C.from_numpy(np.ascontiguousarray(np.swapaxes(eye[perm], -1, -2)))
    return _lu_unpack_result((P, L, U))


def lu(A, *, pivot=True):
    """(P, L, U) with A = P L U."""
    LU, piv, _ = lu_factor_ex(A, pivot=pivot)
    return _lu_result(tuple(_lu_unpack(LU, piv)))


def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """X with A X = B (A^T X = B when adjoint; X A = B / X A^T = B when not left), A = P L U
    from lu_factor: the permutation, then the two triangular solves (differentiable in LU and
    B through them)."""
    P, L, U = _lu_unpack(LU, pivots, _fn="lu_solve")
    if not left:                       # X A = B  <=>  A^T X^T = B^T
        return lu_solve(LU, pivots, B.mT, left=True, adjoint=not adjoint).mT
    if adjoint:                        # U^T L^T P^T X = B
        Y = solve_triangular(U.mT, B, upper=False)
        Z = solve_triangular(L.mT, Y, upper=True, unitriangular=True)
        return P @ Z
    Y = solve_triangular(L, P.mT @ B, upper=False, unitriangular=True)
    return solve_triangular(U, Y, upper=True)


@autocast_fp32_op
def _lu_top(A, pivot=True, get_infos=False):
    """torch.lu / Tensor.lu (deprecated there): (LU, pivots[, infos])."""
    warnings.warn("torch.lu is deprecated in favor of torch.linalg.lu_factor / "
                  "torch.linalg.lu_factor_ex and will be removed in a future PyTorch release.",
                  UserWarning, stacklevel=2)
    r = lu_factor_ex(A, pivot=pivot)
    if get_infos:
        return tuple(r)
    if bool((r.info > 0).any()):
        raise RuntimeError("torch.linalg.lu_factor: the factorization could not be completed "
                           "because the input is singular")
    return r.LU, r.pivots


@autocast_fp32_op
def _lu_solve_top(input, LU_data, LU_pivots):  # noqa: A002,N803
    """torch.lu_solve(b, LU_data, LU_pivots) (deprecated there)."""
    return lu_solve(LU_data, LU_pivots, input)


@autocast_fp32_op
def _triangular_solve(input, A, upper=True, transpose=False, unitriangular=False):  # noqa: A002
    """torch.triangular_solve (deprecated there): (solution, cloned_coefficient) for
    op(A) X = b, op(A) = A^T when transpose."""
    warnings.warn("torch.triangular_solve is deprecated in favor of "
                  "torch.linalg.solve_triangular and will be removed in a future PyTorch "
                  "release. X = torch.triangular_solve(B, A).solution should be replaced with "
                  "X = torch.linalg.solve_triangular(A, B).", UserWarning, stacklevel=2)
    T = A.mT if transpose else A
    X = solve_triangular(T, input, upper=upper != bool(transpose), unitriangular=unitriangular)
    return _triangular_solve_result((X, A.clone()))


@autocast_fp32_op
def _cholesky_solve(input, input2, upper=False):  # noqa: A002
    """torch.cholesky_solve(B, L): X with (L L^T) X = B (U^T U when upper), two triangular
    solves."""
    B, L = input, input2
    if upper:
        return solve_triangular(L, solve_triangular(L.mT, B, upper=False), upper=True)
    return solve_triangular(L.mT, solve_triangular(L, B, upper=False), upper=True)


@autocast_fp32_op
def _cholesky_inverse(input, upper=False):  # noqa: A002
    """torch.cholesky_inverse(L): (L L^T)^-1 (U^T U when upper)."""
    L = input
    eye = _C.eye(L.shape[-1], dtype=L.dtype).expand(*L.shape)
    return _cholesky_solve(eye, L, upper)


# ---- factorizations -------------------------------------------------------------------------

@autocast_fp32_op
def cholesky(A, *, upper=False):
    check_square("linalg.cholesky", A)
    return _factor.Cholesky.apply(A, upper)


@autocast_fp32_op
def cholesky_ex(A, *, upper=False, check_errors=False):
    """(L, info): info 0 per matrix, or the order of the first leading minor that is not
    positive-definite (L is then not meaningful for that matrix)."""
    check_square("linalg.cholesky_ex", A)
    try:
        return _cholesky_ex_result((cholesky(A, upper=upper),
                                    _C.zeros(A.shape[:-2], dtype=_C.int32)))
    except LinAlgError:
        if check_errors:
            raise
    out, info = _factor.cholesky_info(_factor._np(A))
    L = _factor._tensor(out.swapaxes(-1, -2) if upper else out, A.dtype)
    return _cholesky_ex_result((L, _C.from_numpy(info)))


@autocast_fp32_op
def qr(A, mode="reduced"):
    check_matrix("linalg.qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    return _qr_result(_factor.QR.apply(A, mode))


@autocast_fp32_op
def householder_product(A, tau):
    """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T, v_i = column i of A
    below the diagonal with 1 on it (LAPACK's orgqr); A (..., m, n), tau (..., k), k <= n <= m.
    Composed of cddp ops, so autograd differentiates it in A and tau."""
    name = "torch.linalg.householder_product"
    if A.dim() < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    m, n, k = A.size(-2), A.size(-1), tau.size(-1) if tau.dim() else 1
    if m < n:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    if n < k:
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    if tau.dim() != A.dim() - 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but "
                           f"got tau.ndim equal to {tau.dim()} and input.ndim is equal to "
                           f"{A.dim()}")
    if tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{name}: Expected batch dimensions of tau to be equal to "
                           f"input.shape[:-2], but got {list(tau.shape[:-1])}")
    check_float(name, A)
    if tau.dtype is not A.dtype:
        raise RuntimeError(f"{name}: tau dtype {_factor._dtype_word(tau.dtype)} does not match "
                           f"input dtype {_factor._dtype_word(A.dtype)}")
    eye = _C.eye(m, n, dtype=A.dtype)
    V = A.tril(-1) + eye                               # (..., m, n): v_i is column i
    Q = eye.expand(*A.shape[:-2], m, n) if A.dim() > 2 else eye
    for i in range(k - 1, -1, -1):                     # Q = H_i Q, innermost reflector first
        v = V[..., :, i:i + 1]                         # (..., m, 1)
        t = tau[..., i:i + 1].unsqueeze(-1)            # (..., 1, 1)
        Q = Q - (t * v) @ (v.transpose(-2, -1) @ Q)
    return Q


@autocast_fp32_op
def geqrf(A):
    """(a, tau) of LAPACK's geqrf: R on and above a's diagonal, the Householder vectors below
    it, so householder_product(a, tau) is QR's Q. No gradient (torch has none either)."""
    check_matrix("geqrf", A)
    import numpy as np
    a = _factor._np(A)
    if a.size == 0:
        k = min(a.shape[-2], a.shape[-1])
        return _geqrf_result((A.detach().clone(),
                              _C.zeros(tuple(A.shape[:-2]) + (k,), dtype=A.dtype)))
    h, tau = np.linalg.qr(a, mode="raw")               # h is geqrf's a transposed
    return _geqrf_result((_factor._tensor(np.swapaxes(h, -1, -2), A.dtype),
                          _factor._tensor(tau, A.dtype)))


@autocast_fp32_op
def svd(A, full_matrices=True, *, driver=None):
    check_matrix("linalg.svd", A)
    return _svd_result(_factor.SVD.apply(A, full_matrices))


@autocast_fp32_op
def svdvals(A, *, driver=None):
    check_matrix("linalg.svdvals", A)
    return _factor.SVD.apply(A, False)[1]


@autocast_fp32_op
def eigh(A, UPLO="L"):  # noqa: N803 (torch's argument name)
    check_square("linalg.eigh", A)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return _eigh_result(_factor.Eigh.apply(A, UPLO))


@autocast_fp32_op
def eigvalsh(A, UPLO="L"):  # noqa: N803
    return eigh(A, UPLO)[0]


def _tol_of(shape, dtype, atol, rtol):
    """s_max (NumPy, (..., 1)) -> the cut-off max(atol, rtol * s_max); torch's default rtol is
    eps * max(m, n) when neither is given, 0 when only atol is."""
    import numpy as np
    if rtol is None:
        rtol = _factor.eps(dtype) * max(shape[-2], shape[-1]) if atol is None or (
            not isinstance(atol, _C.Tensor) and atol <= 0) else 0.0
    rt = rtol.detach().numpy()[..., None] if isinstance(rtol, _C.Tensor) else rtol
    at = 0.0 if atol is None else (atol.detach().numpy()[..., None]
                                   if isinstance(atol, _C.Tensor) else atol)
    return lambda s_max: np.maximum(at, rt * s_max)


def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """The pseudo-inverse, with torch's derivative (that of the pseudo-inverse itself, not of
    the SVD it is computed from)."""
    check_matrix("linalg.pinv", A)
    return _factor.Pinv.apply(A, _tol_of(A.shape, A.dtype, atol, rtol), hermitian)


@autocast_fp32_op
def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None):
    check_matrix("linalg.matrix_rank", A)
    if tol is not None:
        atol, rtol = tol, 0.0
    with no_grad():
        s = eigvalsh(A).abs() if hermitian else svdvals(A)
        tol = _tol_of(A.shape, A.dtype, atol, rtol)(s.numpy().max(-1, initial=0)[..., None])
        return (s > _factor._tensor(tol, A.dtype)).sum(-1)


def matrix_power(A, n):
    """A^n by repeated squaring (n < 0: of the inverse; n == 0: the identity)."""
    _check_square_any(A)
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"matrix_power(): argument 'n' must be int, not {type(n).__name__}")
    if n == 0:
        eye = _C.eye(A.shape[-1], dtype=A.dtype)
        return eye.expand(A.shape).clone()
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else result.matmul(base)
        n >>= 1
        if n:
            base = base.matmul(base)
    return result


# Padé(13) coefficients and the 1-norm below which it is accurate to double precision
# (Higham, "The scaling and squaring method for the matrix exponential revisited", 2005)
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
           129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
           40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152


def matrix_exp(A):
    """exp(A) of (batches of) square matrices by scaling and squaring with the Padé(13)
    approximant: A / 2^s has 1-norm at most theta_13 (s from the largest norm of the batch),
    exp ~ (V - U)^-1 (V + U), then s squarings. Built from matmul and solve, so autograd
    differentiates the approximant itself (exact to its accuracy)."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError("linalg.matrix_exp: A must be batches of square matrices, but they "
                           f"are {A.shape[-2] if A.dim() > 1 else 1} by {A.shape[-1]} matrices")
    if not A.is_floating_point():
        raise RuntimeError("linalg.matrix_exp: Expected a floating point or complex tensor as "
                           f"input. Got {str(A.dtype).split('.')[-1].capitalize()}")
    if A.numel() == 0:
        return A.clone()
    narrow = A.dtype in (_C.float16, _C.bfloat16)
    X = A.float() if narrow else A
    norm = float(X.detach().abs().sum(-2).amax())
    s = max(0, math.ceil(math.log2(norm / _THETA13))) if norm > _THETA13 else 0
    if s:
        X = X / (2.0 ** s)
    b = _PADE13
    eye = _C.eye(X.shape[-1], dtype=X.dtype)
    X2 = X.matmul(X)
    X4 = X2.matmul(X2)
    X6 = X4.matmul(X2)
    U = X.matmul(X6.matmul(b[13] * X6 + b[11] * X4 + b[9] * X2) + b[7] * X6 + b[5] * X4 +
                 b[3] * X2 + b[1] * eye)
    V = X6.matmul(b[12] * X6 + b[10] * X4 + b[8] * X2) + b[6] * X6 + b[4] * X4 + b[2] * X2 + \
        b[0] * eye
    R = solve(V - U, V + U)
    for _ in range(s):
        R = R.matmul(R)
    return R.to(A.dtype) if narrow else R


def _check_square_any(A):
    """matrix_power's check: any dtype (positive powers are matmuls; inv checks the rest)."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError("linalg.matrix_power: A must be batches of square matrices, but "
                           f"they are {A.shape[-2] if A.dim() > 1 else 1} by {A.shape[-1]} "
                           "matrices")


def cross(input, other, *, dim=-1):  # noqa: A002
    return _cross(input, other, dim=dim)


def multi_dot(tensors):
    """The chained product; a 1-D first (last) tensor is a row (column) vector, dropped from
    the result's shape as torch does."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first_vec, last_vec = tensors[0].dim() == 1, tensors[-1].dim() == 1
    for i, t in enumerate(tensors):
        end = i in (0, len(tensors) - 1)
        if t.dim() != 2 and not (end and t.dim() == 1):
            which = "first" if i == 0 else "last" if i == len(tensors) - 1 else None
            raise RuntimeError(f"multi_dot(): the {which} tensor must be 1D or 2D but got "
                               f"{t.dim()}D" if which else
                               f"multi_dot(): tensor {i} must be 2D but got {t.dim()}D")
    if first_vec:
        tensors[0] = tensors[0].unsqueeze(0)
    if last_vec:
        tensors[-1] = tensors[-1].unsqueeze(-1)
    out = tensors[0]
    for t in tensors[1:]:
        out = out.matmul(t)
    if first_vec:
        out = out.squeeze(0)
    if last_vec:
        out = out.squeeze(-1)
    return out


def vecdot(x, y, *, dim=-1):
    return (x * y).sum(dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return A.diagonal(offset, dim1, dim2)


# ---- torch's older top-level names and the Tensor methods ------------------------------------

_svd_old = _return_type("svd", ("U", "S", "V"))
_qr_old = _return_type("qr", ("Q", "R"))
_slogdet_old = _return_type("slogdet", ("sign", "logabsdet"))


def logdet(A):
    """log(det(A)): nan for a negative determinant, -inf for a zero one."""
    sign, logabs = slogdet(A)
    return _C.where(sign < 0, _C.full_like(logabs, math.nan), logabs)


def _slogdet_top(A):
    return _slogdet_old(slogdet(A))


@autocast_fp32_op
def pinverse(A, rcond=1e-15):
    return pinv(A, rtol=rcond)


def _deprecated(old, new):
    warnings.warn(f"torch.{old} is deprecated in favor of torch.linalg.{new} and will be "
                  "removed in a future PyTorch release.", UserWarning, stacklevel=3)


@autocast_fp32_op
def _cholesky_top(A, upper=False):
    _deprecated("cholesky", "cholesky")
    return cholesky(A, upper=upper)


@autocast_fp32_op
def _qr_top(A, some=True):
    _deprecated("qr", "qr")
    return _qr_old(qr(A, "reduced" if some else "complete"))


@autocast_fp32_op
def _svd_top(A, some=True, compute_uv=True):
    """torch.svd: (U, S, V) with V (not V^T); compute_uv=False gives zero U and V."""
    if not compute_uv:                 # `some` has no effect here: square zero U and V
        m, n = A.shape[-2], A.shape[-1]
        batch = tuple(A.shape[:-2])
        return _svd_old((_C.zeros(batch + (m, m), dtype=A.dtype), svdvals(A),
                         _C.zeros(batch + (n, n), dtype=A.dtype)))
    U, S, Vh = svd(A, full_matrices=not some)
    return _svd_old((U, S, Vh.mT))


def chain_matmul(*matrices):
    warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch "
                  "release. Use torch.linalg.multi_dot instead, which accepts a list of two or "
                  "more tensors rather than multiple parameters.", UserWarning, stacklevel=2)
    return multi_dot(matrices)


TOP_LEVEL = {"inverse": inv, "det": det, "logdet": logdet, "slogdet": _slogdet_top,
             "matrix_power": matrix_power, "pinverse": pinverse, "cholesky": _cholesky_top,
             "qr": _qr_top, "svd": _svd_top, "chain_matmul": chain_matmul, "geqrf": geqrf,
             "orgqr": householder_product, "matrix_exp": matrix_exp,
             "triangular_solve": _triangular_solve, "cholesky_solve": _cholesky_solve,
             "cholesky_inverse": _cholesky_inverse, "lu_unpack": _lu_unpack, "lu": _lu_top,
             "lu_solve": _lu_solve_top}
for _name in ("inverse", "det", "logdet", "slogdet", "matrix_power", "pinverse", "cholesky",
              "qr", "svd", "matrix_exp", "triangular_solve", "cholesky_solve",
              "cholesky_inverse", "lu", "lu_solve"):
    setattr(_C.Tensor, _name, TOP_LEVEL[_name])
del _name
