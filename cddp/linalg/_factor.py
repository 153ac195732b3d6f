"""The factorizations and solves of cddp.linalg: LAPACK through NumPy's np.linalg (one LAPACK
call per matrix of a batch, in the input's precision: s* routines for float32, d* for
float64, the same getrf/potrf/geqrf/gesdd/syevd torch calls, so factors come out with torch's
sign conventions), each an autograd Function whose backward is torch's derivative formula in
NumPy.

Second derivatives (create_graph=True, torch.func.hessian / jvp / jacfwd, forward-mode AD):
inv, det, slogdet and solve run their backward in cddp's own differentiable ops when the graph
is being built, so they can be differentiated again; every other backward here is NumPy, and
its results then carry _RaiseOnBackward, which raises on a second differentiation instead
of letting the second derivative come out silently zero.

Shapes: A (..., m, n) with any batch dims "..."; square ops need m == n. Backward formulas
are written for real matrices (cddp has no complex dtype), so ^H is ^T throughout.
"""
import functools

import numpy as np

from .. import _C
from ..autograd.function import Function, _raise_on_backward

_FLOATS = (_C.float32, _C.float64)


class LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: the matrix was singular / not positive-definite."""


# ---- conversions and checks -----------------------------------------------------------------

def _np(x):
    return x.detach().numpy()


def _tensor(a, dtype):
    """A NumPy result as a cddp tensor of `dtype` (np.linalg keeps float32 as float32)."""
    return _C.from_numpy(np.asarray(a, dtype=np.float32 if dtype is _C.float32 else np.float64,
                                    order="C"))             # (ascontiguousarray makes 0-d 1-d)


def check_float(name, A):
    if A.dtype not in _FLOATS:
        if A.dtype in (_C.float16, _C.bfloat16):
            raise RuntimeError(f"{name}: Low precision dtypes not supported. Got "
                               f"{_dtype_word(A.dtype)}")
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. "
                           f"Got {_dtype_word(A.dtype)}")


def _dtype_word(dt):
    return {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
            "bool": "Bool", "float16": "Half", "bfloat16": "BFloat16"}.get(str(dt)[5:],
                                                                             str(dt)[5:])


def check_square(name, A, what="A"):
    check_matrix(name, A, what)
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: {what} must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")


def check_matrix(name, A, what="A"):
    if A.dim() < 2:
        raise RuntimeError(f"{name}: The input tensor {what} must have at least 2 dimensions.")
    check_float(name, A)


def eps(dtype):
    return float(np.finfo(np.float32 if dtype is _C.float32 else np.float64).eps)


def _mT(a):
    return np.swapaxes(a, -1, -2)


def _sum_to(g, shape):
    """g summed over the dims broadcasting added or stretched, back to `shape`."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _batch_index(shape, flat):
    """torch's "(Batch element k): " prefix, k the flat index of the failing matrix."""
    return f"(Batch element {flat}): " if len(shape) > 2 else ""


def _first_zero_pivot(a):
    """1-based index of LU's first exactly-zero pivot (partial pivoting, as getrf), or n."""
    u = np.array(a, dtype=np.float64)
    n = u.shape[0]
    for k in range(n):
        p = k + int(np.argmax(np.abs(u[k:, k])))
        if u[p, k] == 0:
            return k + 1
        u[[k, p]] = u[[p, k]]
        u[k + 1:, k:] -= np.outer(u[k + 1:, k] / u[k, k], u[k, k:])
    return n


def per_matrix(a, factor, diagnose, fill):
    """factor (np.linalg.inv / cholesky) applied to each matrix of a (..., n, n) on its own:
    (results, with `fill` where it failed; int32 info (..., ): 0, or diagnose(matrix) > 0)."""
    flat = a.reshape((-1,) + a.shape[-2:])
    out = np.full_like(flat, fill)
    info = np.zeros(len(flat), np.int32)
    for i, m in enumerate(flat):
        try:
            out[i] = factor(m)
        except np.linalg.LinAlgError:
            info[i] = diagnose(m)
    return out.reshape(a.shape), info.reshape(a.shape[:-2])


def first_bad_minor(m):
    """The order of m's first leading minor that is not positive-definite (potrf's info)."""
    for k in range(1, m.shape[0] + 1):
        try:
            np.linalg.cholesky(m[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return m.shape[0]


def inv_info(a):
    return per_matrix(a, np.linalg.inv, _first_zero_pivot, np.nan)


def cholesky_info(a):
    return per_matrix(a, np.linalg.cholesky, first_bad_minor, 0.0)


def _first_failure(a, info):
    """(torch's "(Batch element k): " prefix, info) of the first failed matrix."""
    flat = info.reshape(-1)
    i = int(np.flatnonzero(flat)[0])
    return _batch_index(a.shape, i), int(flat[i])


def _singular(name, a):
    """LinAlgError for the first singular matrix of batch a (..., n, n)."""
    where, k = _first_failure(a, inv_info(a)[1])
    return LinAlgError(f"{name}: {where}The diagonal element {k} is zero, the inversion could "
                       "not be completed because the input matrix is singular.")


def _not_pd(name, a):
    """LinAlgError for the first matrix of a (..., n, n) that is not positive-definite."""
    where, k = _first_failure(a, cholesky_info(a)[1])
    return LinAlgError(f"{name}: {where}The factorization could not be completed because the "
                       f"input is not positive-definite (the leading minor of order {k} is not "
                       "positive-definite).")


# ---- second derivatives ------------------------------------------------------------------------

def _building_graph(*tensors):
    """Whether a backward runs under create_graph with some input of it carrying history."""
    return _C.is_grad_enabled() and any(
        isinstance(t, _C.Tensor) and (t.requires_grad or t.grad_fn is not None) for t in tensors)


def _numpy_backward(name):
    """Decorator for a backward computed in NumPy: under create_graph, when its gradients or
    saved tensors carry history, its floating results (NumPy's: no grad_fn) are wrapped in
    _RaiseOnBackward."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(ctx, *grads):
            out = fn(ctx, *grads)
            if not _C.is_grad_enabled():
                return out
            outs = out if isinstance(out, tuple) else (out,)
            if any(isinstance(o, _C.Tensor) and o.grad_fn is not None for o in outs):
                return out             # computed in differentiable ops after all
            deps = [t for t in (*grads, *ctx.saved_tensors) if isinstance(t, _C.Tensor)
                    and t.is_floating_point() and (t.requires_grad or t.grad_fn is not None)]
            return _raise_on_backward(
                f"linalg.{name}: cddp computes this derivative in NumPy and cannot "
                "differentiate it again (a second derivative: create_graph=True, "
                "torch.func.hessian / jvp / jacfwd, forward-mode AD through it); torch can",
                out, deps)
        return wrapper
    return deco


# ---- inverse, determinants, solve -------------------------------------------------------------

class Inv(Function):
    @staticmethod
    def forward(ctx, A):
        a = _np(A)
        try:
            inv = np.linalg.inv(a)
        except np.linalg.LinAlgError:
            raise _singular("linalg.inv", a) from None
        out = _tensor(inv, A.dtype)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        B = ctx.saved_tensors[0]
        if _building_graph(g, B):      # in cddp ops: differentiable again (B is Inv's output)
            return -(B.mT @ g @ B.mT)
        bt = _mT(_np(B))
        return _tensor(-(bt @ _np(g) @ bt), g.dtype)


def _det_grad(a, det):
    """d det(A) / dA = adj(A)^T, through the inverse where det != 0 and through the SVD
    (adj(A) = V diag(prod_{j!=i} s_j) U^T det(U V^T)) where A is singular."""
    out = np.empty_like(a)
    ok = det != 0
    if ok.any():
        out[ok] = det[ok][..., None, None] * _mT(np.linalg.inv(a[ok]))
    if (~ok).any():
        u, s, vh = np.linalg.svd(a[~ok])
        n = s.shape[-1]
        prods = np.stack([np.prod(np.delete(s, i, axis=-1), axis=-1) for i in range(n)], -1) \
            if n else s
        sign = np.linalg.det(u) * np.linalg.det(vh)
        adj = (_mT(vh) * prods[..., None, :]) @ _mT(u) * sign[..., None, None]
        out[~ok] = _mT(adj)
    return out


class Det(Function):
    @staticmethod
    def forward(ctx, A):
        a = _np(A)
        det = np.linalg.det(a)
        ctx.save_for_backward(A)
        ctx.det = det
        return _tensor(det, A.dtype)

    @staticmethod
    @_numpy_backward("det")
    def backward(ctx, g):
        A = ctx.saved_tensors[0]
        if _building_graph(g, A) and np.all(np.asarray(ctx.det) != 0):
            # adj(A)^T = det(A) A^-T, in differentiable ops (a singular A stays in NumPy)
            return (g * Det.apply(A))[..., None, None] * Inv.apply(A).mT
        a = _np(A)
        return _tensor(np.asarray(_np(g))[..., None, None] * _det_grad(a, np.asarray(ctx.det)),
                       g.dtype)


class Slogdet(Function):
    @staticmethod
    def forward(ctx, A):
        sign, logabs = np.linalg.slogdet(_np(A))
        ctx.save_for_backward(A)
        s = _tensor(sign, A.dtype)
        ctx.mark_non_differentiable(s)
        return s, _tensor(logabs, A.dtype)

    @staticmethod
    @_numpy_backward("slogdet")
    def backward(ctx, g_sign, g_logabs):
        A = ctx.saved_tensors[0]
        a = _np(A)
        if _building_graph(g_logabs, A) and np.all(np.linalg.slogdet(a)[0] != 0):
            return g_logabs[..., None, None] * Inv.apply(A).mT
        with np.errstate(divide="ignore", invalid="ignore"):
            try:
                inv_t = _mT(np.linalg.inv(a))
            except np.linalg.LinAlgError:            # singular: the gradient is infinite
                inv_t = np.full_like(a, np.inf)
        return _tensor(_np(g_logabs)[..., None, None] * inv_t, g_logabs.dtype)


def _is_vector_rhs(A, B):
    """torch's rule: B is a (batch of) vector(s) when B.ndim == 1, or when it has one dim
    fewer than A and matches A's shape without its last dim."""
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


class Solve(Function):
    """X with A X = B (left) or X A = B; B a matrix (..., n, k) or a vector (..., n)."""

    @staticmethod
    def forward(ctx, A, B, left):
        a, b = _np(A), _np(B)
        vec = _is_vector_rhs(A, B)
        if vec:
            b = b[..., None]
        if not left:                   # X A = B  <=>  A^T X^T = B^T
            a, b = _mT(a), _mT(b)
        try:
            x = np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            raise _singular("linalg.solve", np.broadcast_to(_np(A), a.shape)) from None
        except ValueError as e:
            raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                               f"{'AX = B' if left else 'XA = B'} ({tuple(A.shape)} and "
                               f"{tuple(B.shape)}): {e}") from None
        if not left:
            x = _mT(x)
        if vec:
            x = x[..., 0]
        ctx.vec, ctx.left = vec, left
        ctx.a_shape, ctx.b_shape = tuple(A.shape), tuple(B.shape)
        out = _tensor(x, A.dtype)
        ctx.save_for_backward(A, out)
        return out

    @staticmethod
    def backward(ctx, g):
        A, X = ctx.saved_tensors
        if _building_graph(g, A, X):   # the same formulas in differentiable ops
            gx = g.unsqueeze(-1) if ctx.vec else g
            if ctx.vec:
                X = X.unsqueeze(-1)
            if ctx.left:
                gb = Solve.apply(A.mT, gx, True)
                ga = -(gb @ X.mT)
            else:
                gb = Solve.apply(A, gx.mT, True).mT
                ga = -(X.mT @ gb)
            if ctx.vec:
                gb = gb.squeeze(-1)
            return ga.sum_to_size(ctx.a_shape), gb.sum_to_size(ctx.b_shape), None
        a, x, gx = _np(A), _np(X), _np(g)
        if ctx.vec:
            x, gx = x[..., None], gx[..., None]
        if ctx.left:                   # gB = A^-T gX, gA = -gB X^T
            gb = np.linalg.solve(_mT(a), gx)
            ga = -(gb @ _mT(x))
        else:                          # X = B A^-1: gB = gX A^-T, gA = -X^T gB
            gb = _mT(np.linalg.solve(a, _mT(gx)))
            ga = -(_mT(x) @ gb)
        if ctx.vec:
            gb = gb[..., 0]
        return (_tensor(_sum_to(ga, ctx.a_shape), g.dtype),
                _tensor(_sum_to(gb, ctx.b_shape), g.dtype), None)


# ---- Cholesky, QR ---------------------------------------------------------------------------

class Cholesky(Function):
    @staticmethod
    def forward(ctx, A, upper):
        a = _np(A)
        try:
            low = np.linalg.cholesky(a)      # reads the lower triangle, as torch's default
        except np.linalg.LinAlgError:
            raise _not_pd("linalg.cholesky", a) from None
        L = _tensor(low, A.dtype)
        ctx.save_for_backward(L)
        ctx.upper = upper
        return L.mT.contiguous() if upper else L

    @staticmethod
    @_numpy_backward("cholesky")
    def backward(ctx, g):
        # A = L L^T: gA = sym(L^-T Phi(L^T gL) L^-1), Phi = the lower triangle, diagonal halved
        low = _np(ctx.saved_tensors[0])
        gl = _np(g)
        if ctx.upper:
            gl = _mT(gl)
        phi = np.tril(_mT(low) @ gl)
        d = np.einsum("...ii->...i", phi)
        d *= 0.5
        inv = np.linalg.inv(low)
        s = _mT(inv) @ phi @ inv
        return _tensor(0.5 * (s + _mT(s)), g.dtype), None


def _copyltu(m):
    """The symmetric matrix with m's lower triangle (its diagonal kept once)."""
    low = np.tril(m, -1)
    return low + _mT(low) + np.einsum("...ii->...i", m)[..., None] * np.eye(m.shape[-1])


def _qr_grad_tall(q, r, gq, gr):
    """gA for A = QR, A (m, n) with m >= n, reduced: (gQ + Q copyltu(M)) R^-T with
    M = R gR^T - gQ^T Q."""
    m = r @ _mT(gr) - _mT(gq) @ q
    b = gq + q @ _copyltu(m)
    return _mT(np.linalg.solve(r, _mT(b)))          # b R^-T


class QR(Function):
    @staticmethod
    def forward(ctx, A, mode):
        a = _np(A)
        if mode == "r":
            r = np.linalg.qr(a, mode="r")
            q = np.zeros((0,), a.dtype)     # torch's Q is empty, whatever the batch
        else:
            q, r = np.linalg.qr(a, mode=mode)
        Q, R = _tensor(q, A.dtype), _tensor(r, A.dtype)
        ctx.mode = mode
        ctx.save_for_backward(A, Q, R)
        return Q, R

    @staticmethod
    @_numpy_backward("qr")
    def backward(ctx, gQ, gR):
        A, Q, R = ctx.saved_tensors
        m, n = A.shape[-2], A.shape[-1]
        if ctx.mode == "r":
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed "
                               "when mode='r'. Please use linalg.qr(A, mode='reduced') if you "
                               "are going to differentiate through linalg.qr.")
        if ctx.mode == "complete" and m > n:
            raise RuntimeError("The QR decomposition is not differentiable when mode='complete' "
                               "and nrows > ncols.")
        q, r, gq, gr = _np(Q), _np(R), _np(gQ), _np(gR)
        if m >= n:
            ga = _qr_grad_tall(q, r, gq, gr)
        else:
            # A = [X | Y], R = [U | V] with X = Q U (square): Y = Q V adds Y gV^T to gQ
            y, u, gu, gv = _np(A)[..., m:], r[..., :m], gr[..., :m], gr[..., m:]
            gx = _qr_grad_tall(q, u, gq + y @ _mT(gv), gu)
            ga = np.concatenate([gx, q @ gv], -1)
        return _tensor(ga, gQ.dtype), None


# ---- eigh, SVD ------------------------------------------------------------------------------

class Eigh(Function):
    @staticmethod
    def forward(ctx, A, uplo):
        w, v = np.linalg.eigh(_np(A), UPLO=uplo)
        W, V = _tensor(w, A.dtype), _tensor(v, A.dtype)
        ctx.save_for_backward(W, V)
        return W, V

    @staticmethod
    @_numpy_backward("eigh")
    def backward(ctx, gW, gV):
        # gA = V (skew(V^T gV) / E + diag(gW)) V^T, E_ij = w_j - w_i (torch's formula: the
        # skew part of V^T gV is the one the orthonormality of V lets through)
        w, v = (_np(t) for t in ctx.saved_tensors)
        gw, gv = _np(gW), _np(gV)
        vtgv = _mT(v) @ gv
        vtgv = 0.5 * (vtgv - _mT(vtgv))
        e = w[..., None, :] - w[..., :, None]
        idx = np.arange(w.shape[-1])
        e[..., idx, idx] = 1
        with np.errstate(divide="ignore", invalid="ignore"):
            inner = vtgv / e
        inner[..., idx, idx] = gw
        return _tensor(v @ inner @ _mT(v), gW.dtype), None


class SVD(Function):
    """U, S, Vh of A (..., m, n); k = min(m, n)."""

    @staticmethod
    def forward(ctx, A, full_matrices):
        u, s, vh = np.linalg.svd(_np(A), full_matrices=full_matrices)
        U, S, Vh = (_tensor(x, A.dtype) for x in (u, s, vh))
        ctx.full = full_matrices
        ctx.save_for_backward(U, S, Vh)
        return U, S, Vh

    @staticmethod
    @_numpy_backward("svd")
    def backward(ctx, gU, gS, gVh):
        U, S, Vh = ctx.saved_tensors
        u, s, vh = _np(U), _np(S), _np(Vh)
        gu, gs, gvh = _np(gU), _np(gS), _np(gVh)
        k = s.shape[-1]
        u, vh = u[..., :k], vh[..., :k, :]
        uses_vectors = bool(np.any(gu) or np.any(gvh))
        if ctx.full and uses_vectors and (gu.shape[-1] > k or gvh.shape[-2] > k):
            raise RuntimeError("linalg_svd_backward: The singular vectors in the complete "
                               "case (full_matrices=True) are not unique when m != n; "
                               "use full_matrices=False")
        if not uses_vectors:
            return _tensor((u * gs[..., None, :]) @ vh, gS.dtype), None
        gu, gvh = gu[..., :k], gvh[..., :k, :]
        v, gv = _mT(vh), _mT(gvh)
        utgu, vtgv = _mT(u) @ gu, _mT(v) @ gv
        e = s[..., None, :] ** 2 - s[..., :, None] ** 2
        idx = np.arange(k)
        e[..., idx, idx] = 1
        with np.errstate(divide="ignore", invalid="ignore"):
            inner = ((utgu - _mT(utgu)) / e) * s[..., None, :] + \
                s[..., :, None] * ((vtgv - _mT(vtgv)) / e)
            inner[..., idx, idx] += gs
            ga = u @ inner @ vh
            m, n = u.shape[-2], v.shape[-2]
            if m > k:                  # (I - U U^T) gU S^-1 V^T
                ga = ga + ((gu - u @ utgu) / s[..., None, :]) @ vh
            if n > k:                  # U S^-1 gV^T (I - V V^T)
                ga = ga + u @ _mT((gv - v @ vtgv) / s[..., None, :])
        return _tensor(ga, gU.dtype), None


class Pinv(Function):
    """The pseudo-inverse P (..., n, m) of A (..., m, n): V diag(1/s) U^T over the singular
    values above tol (..., 1, 1) (eigenvalues by magnitude when hermitian)."""

    @staticmethod
    def forward(ctx, A, tol_of, hermitian):
        a = _np(A)
        if hermitian:
            w, v = np.linalg.eigh(a)
            keep = np.abs(w) > tol_of(np.abs(w).max(-1, initial=0)[..., None])
            with np.errstate(divide="ignore"):
                winv = np.where(keep, 1 / np.where(keep, w, 1), 0)
            p = (v * winv[..., None, :]) @ _mT(v)
        else:
            u, s, vh = np.linalg.svd(a, full_matrices=False)
            keep = s > tol_of(s.max(-1, initial=0)[..., None])
            sinv = np.where(keep, 1 / np.where(keep, s, 1), 0)
            p = (_mT(vh) * sinv[..., None, :]) @ _mT(u)
        out = _tensor(p, A.dtype)
        ctx.save_for_backward(A, out)
        return out

    @staticmethod
    @_numpy_backward("pinv")
    def backward(ctx, g):
        # from dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P (Golub & Pereyra):
        # gA = -P^T gP P^T + (I - A P) gP^T P P^T + P^T P gP^T (I - P A)
        A, P = ctx.saved_tensors
        a, p, gp = _np(A), _np(P), _np(g)
        pt, gpt = _mT(p), _mT(gp)
        ga = -(pt @ gp @ pt) + (gpt @ p @ pt - a @ (p @ (gpt @ p @ pt))) + \
            (pt @ p @ gpt - ((pt @ p @ gpt) @ p) @ a)
        return _tensor(ga, g.dtype), None, None


# ---- LU with partial pivoting -----------------------------------------------------------------

def lu_np(a):
    """getrf's unblocked algorithm (getf2) over a batch (..., m, n) of NumPy arrays: the
    pivot of column j is the first largest |a[i, j]|, i >= j (LAPACK's idamax); rows swapped,
    the column below scaled by the pivot unless it is zero, the trailing block updated.
    Returns (LU, pivots (..., k) int32 1-based, info (...) int32: the first zero pivot's
    1-based column, 0 when none), k = min(m, n)."""
    a = np.array(a, copy=True)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    batch = a.shape[:-2]
    piv = np.zeros(batch + (k,), dtype=np.int32)
    info = np.zeros(batch, dtype=np.int32)
    for j in range(k):
        p = np.argmax(np.abs(a[..., j:, j]), axis=-1) + j          # (...)
        piv[..., j] = p + 1
        rows_j = a[..., j, :].copy()
        pidx = np.broadcast_to(p[..., None, None], batch + (1, n))
        a[..., j, :] = np.take_along_axis(a, pidx, axis=-2)[..., 0, :]
        np.put_along_axis(a, pidx, rows_j[..., None, :], axis=-2)
        d = a[..., j, j]
        zero = d == 0
        info = np.where(zero & (info == 0), j + 1, info).astype(np.int32)
        if j + 1 < m:
            safe = np.where(zero, 1, d)
            a[..., j + 1:, j] = np.where(zero[..., None], a[..., j + 1:, j],
                                         a[..., j + 1:, j] / safe[..., None])
            a[..., j + 1:, j + 1:] -= a[..., j + 1:, j:j + 1] * a[..., j:j + 1, j + 1:]
    return a, piv, info


def perm_from_pivots(piv, m):
    """Row order perm (..., m) with A[perm] = L U: the pivots' swaps applied to arange(m)."""
    perm = np.broadcast_to(np.arange(m), piv.shape[:-1] + (m,)).copy()
    for j in range(piv.shape[-1]):
        p = piv[..., j].astype(np.int64) - 1
        pj = perm[..., j].copy()
        pp = np.take_along_axis(perm, p[..., None], -1)[..., 0]
        perm[..., j] = pp
        np.put_along_axis(perm, p[..., None], pj[..., None], -1)
    return perm


class LUFactor(Function):
    """(LU, pivots, info) of A; the gradient is torch's for square matrices of full rank:
    gA = P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T with gL, gU the strict lower and
    upper parts of LU's gradient."""

    @staticmethod
    def forward(ctx, A):
        lu, piv, info = lu_np(_np(A))
        out = _tensor(lu, A.dtype)
        ctx.save_for_backward(out)
        ctx.piv = piv
        return out, _C.from_numpy(piv), _C.from_numpy(info)

    @staticmethod
    @_numpy_backward("lu_factor")
    def backward(ctx, g, _gp=None, _gi=None):
        LU, = ctx.saved_tensors
        lu, gl = _np(LU), _np(g)
        m, n = lu.shape[-2], lu.shape[-1]
        if m != n:
            raise NotImplementedError("the gradient of lu_factor is implemented for square "
                                      "matrices only")
        L = np.tril(lu, -1) + np.eye(n)
        U = np.triu(lu)
        inner = np.tril(_mT(L) @ np.tril(gl, -1), -1) + np.triu(np.triu(gl) @ _mT(U))
        x = np.linalg.solve(_mT(L), inner)                       # L^-T (...)
        x = _mT(np.linalg.solve(U, _mT(x)))                      # (...) U^-T
        perm = perm_from_pivots(ctx.piv, m)                      # A[perm] = L U
        ga = np.empty_like(x)
        np.put_along_axis(ga, np.broadcast_to(perm[..., :, None], x.shape), x, axis=-2)
        return _tensor(ga, g.dtype)
