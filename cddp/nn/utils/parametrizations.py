"""cddp.nn.utils.parametrizations — torch.nn.utils.parametrizations: weight_norm,
spectral_norm, orthogonal, registered through parametrize.register_parametrization, so the
parameter names and state dict keys are torch's:

    weight_norm    parametrizations.<name>.original0 = g, .original1 = v (a checkpoint of the
                   hook-based weight_norm, <name>_g / <name>_v, is renamed on load, as torch)
    spectral_norm  parametrizations.<name>.original, power-iteration buffers
                   parametrizations.<name>.0._u / ._v (15 iterations at registration, then
                   n_power_iterations per training-mode evaluation; eval mode reads them)
    orthogonal     parametrizations.<name>.original, and .0.base with use_trivialization

orthogonal's three maps are composed of cddp ops, so autograd differentiates them as
written: matrix_exp is cddp.linalg.matrix_exp (scaling and squaring with Padé(13), matmul and
solve); cddp.linalg.householder_product applies the k reflectors one column at a time; cayley solves with
cddp.linalg.solve. The QR that right_inverse uses (no gradient) is NumPy's, with
torch's sign convention (R's diagonal positive), which makes it equal to torch's.
"""
from enum import Enum

import numpy as np

from ... import _C
from ...autograd.grad_mode import no_grad
from ...linalg import geqrf, householder_product, matrix_exp, solve
from .. import functional as F
from ..modules.module import Module
from . import parametrize
from .spectral_norm import _default_dim
from .weight_norm import _weight_norm, norm_except_dim

Tensor = _C.Tensor

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


# ---- orthogonal ------------------------------------------------------------------------------

def _eye_like(A):
    """The identity of A's last two dims (n x k), in A's dtype."""
    return _C.eye(A.size(-2), A.size(-1), dtype=A.dtype)


def _is_orthogonal(Q):
    from ... import allclose
    n, k = Q.size(-2), Q.size(-1)
    Id = _C.eye(k, dtype=Q.dtype)
    eps = 10.0 * n * np.finfo(np.float64 if Q.dtype == _C.float64 else np.float32).eps
    return allclose(Q.transpose(-2, -1) @ Q, Id, atol=eps)


def _make_orthogonal(A):
    """Q of A = QR, with R's diagonal made non-negative (torch's choice), without gradient."""
    q, r = np.linalg.qr(A.detach().numpy())
    sign = np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    return _C.from_numpy(np.ascontiguousarray(q * sign)).to(A.dtype)


# the maps from skew / lower-triangular matrices to orthogonal ones (values 1, 2, 3 as torch's)
_OrthMaps = Enum("_OrthMaps", ("matrix_exp", "cayley", "householder"))


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.size(-2), X.size(-1)
        transposed = n < k
        if transposed:
            X = X.transpose(-2, -1)
            n, k = k, n
        # X is tall (n >= k) from here
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            # the n*k - k(k-1)/2 free entries: the lower triangle, embedded in an n x n
            # skew-symmetric matrix
            X = X.tril()
            if n != k:
                X = _C.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.transpose(-2, -1)
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = matrix_exp(A)
            else:   # the Cayley retraction (I + A/2)(I - A/2)^{-1}, as torch writes it
                Id = _C.eye(n, dtype=A.dtype)
                Q = solve(Id - 0.5 * A, Id + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = householder_product(A, tau)
            # X's diagonal holds the signs (+-1); torch casts it to int so no gradient flows
            Q = Q * X.diagonal(dim1=-2, dim2=-1).detach().to(_C.int32).to(Q.dtype).unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        if transposed:
            Q = Q.transpose(-2, -1)
        return Q

    def right_inverse(self, Q):
        with no_grad():
            if Q.shape != self.shape:
                raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                                 f"Got a tensor of shape {Q.shape}.")
            Q_init = Q
            n, k = Q.size(-2), Q.size(-1)
            transpose = n < k
            if transpose:
                Q = Q.transpose(-2, -1)
                n, k = k, n
            if not hasattr(self, "base"):
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError(
                        "It is not possible to assign to the matrix exponential "
                        "or the Cayley parametrizations when use_trivialization=False.")
                # Q's QR as geqrf's reflectors; R's diagonal signs go on A's diagonal (the
                # forward's sign column), so the forward reproduces Q when Q is orthogonal.
                # tau == 0 means LAPACK skipped that reflector: its sign is flipped, as torch's
                A, tau = geqrf(Q)
                diag = A.diagonal(dim1=-2, dim2=-1)
                signs = diag.sign()
                diag.copy_(_C.where(tau == 0.0, -signs, signs))
                return A.transpose(-2, -1) if transpose else A
            if n == k:
                Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
            else:
                # complete Q to an n x n orthogonal matrix with random columns, as torch
                N = _C.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype)
                Q = _make_orthogonal(_C.cat([Q, N], dim=-1))
            self.base = Q
            # -Id: householder(zeros) is then eye(n, k), and the diagonal carries the signs
            neg_Id = _C.zeros_like(Q_init)
            neg_Id.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
            return neg_Id


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Constrain module.<name> (a matrix or batch of matrices) to be orthogonal: by default
    "matrix_exp" for square matrices and "householder" otherwise, as torch chooses."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError("Expected a matrix or batch of matrices. "
                         f"Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.size(-2) == weight.size(-1) else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


# ---- weight_norm -----------------------------------------------------------------------------

class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim     # None: norm over the whole tensor

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """w = g * v / ||v|| as a parametrization: original0 = g, original1 = v."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(state_dict, prefix, local_metadata, strict, missing_keys,
                                 unexpected_keys, error_msgs):
        # checkpoints of the hook-based weight_norm load into this one
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


# ---- spectral_norm ---------------------------------------------------------------------------

class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError("Dimension out of range (expected to be in range of "
                             f"[-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but "
                             f"got n_power_iterations={n_power_iterations}")
        self.dim = dim % ndim     # in range, checked above
        self.eps = eps
        if ndim == 1:
            return      # a 1-D weight is only normalized: no power iteration, no buffers
        self.n_power_iterations = n_power_iterations
        matrix = self._reshape_weight_to_matrix(weight)
        # random unit starting vectors, left (rows) then right (cols): torch's draw order
        for buffer_name, size in zip(("_u", "_v"), matrix.size()):
            start = matrix.new_empty(size).normal_(0, 1)
            self.register_buffer(buffer_name, F.normalize(start, dim=0, eps=eps))
        # start from a good estimate of the top singular vectors
        self._power_method(matrix, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.dim()) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations):
        # in place into the buffers, out of autograd: they are state, not part of the graph
        with no_grad():
            for _ in range(n_power_iterations):
                F.normalize(_C.mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u)
                F.normalize(_C.mv(weight_mat.t(), self._u), dim=0, eps=self.eps, out=self._v)

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # clones: the buffers change in place at the next evaluation, the graph keeps these
        u = self._u.clone()
        v = self._v.clone()
        sigma = _C.dot(u, _C.mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value):
        # any weight is a valid original: forward divides it by its own sigma
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """w / sigma(w) as a parametrization, sigma the top singular value estimated by power
    iteration (dim: 1 for transposed convolutions, else 0, by default)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, _default_dim(module, dim), eps))
    return module
