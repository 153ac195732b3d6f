"""LowRankMultivariateNormal(loc, cov_factor, cov_diag): covariance W W^T + diag(D) with W
(..., n, m), D (..., n). log_prob and entropy go through the m x m capacitance matrix
K = I + W^T D^-1 W (Woodbury identity and the matrix determinant lemma), so nothing n x n is
factorised. rsample draws eps_W (..., m) then eps_D (..., n) as torch does, so a seed gives
torch's numbers."""
import math

from .. import _C
from .._shape_ops import broadcast_tensors
from .._size import Size
from . import constraints
from .distribution import Distribution
from .multivariate_normal import _mahalanobis
from .utils import lazy_property

__all__ = ["LowRankMultivariateNormal"]


def _batch_mv(bmat, bvec):
    """bmat (..., n, m) @ bvec (..., m) -> (..., n), broadcasting the batch dims."""
    return bmat.matmul(bvec.unsqueeze(-1)).squeeze(-1)


def _batch_capacitance_tril(W, D):
    """Cholesky factor of K = I + W^T D^-1 W: (..., m, m)."""
    m = W.size(-1)
    Wt_Dinv = W.mT / D.unsqueeze(-2)
    K = Wt_Dinv.matmul(W) + _C.eye(m, dtype=W.dtype)
    from ..linalg import cholesky
    return cholesky(K)


def _batch_lowrank_logdet(W, D, capacitance_tril):
    """log det(W W^T + D) = log det K + sum log D (matrix determinant lemma)."""
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def _batch_lowrank_mahalanobis(W, D, x, capacitance_tril):
    """x^T (W W^T + D)^-1 x = x^T D^-1 x - |L_K^-1 W^T D^-1 x|^2 (Woodbury)."""
    Wt_Dinv = W.mT / D.unsqueeze(-2)
    Wt_Dinv_x = _batch_mv(Wt_Dinv, x)
    return (x.pow(2) / D).sum(-1) - _mahalanobis(capacitance_tril, Wt_Dinv_x)


class LowRankMultivariateNormal(Distribution):
    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = Size(tuple(loc.shape[-1:]))
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if tuple(cov_factor.shape[-2:-1]) != tuple(event_shape):
            raise ValueError(f"cov_factor must be a batch of matrices with shape "
                             f"{event_shape[0]} x m")
        if tuple(cov_diag.shape[-1:]) != tuple(event_shape):
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        try:
            loc_, self.cov_factor, cov_diag_ = broadcast_tensors(
                loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1))
        except RuntimeError as e:
            raise ValueError(f"Incompatible batch shapes: loc {loc.shape}, cov_factor "
                             f"{cov_factor.shape}, cov_diag {cov_diag.shape}") from e
        self.loc, self.cov_diag = loc_[..., 0], cov_diag_[..., 0]
        batch_shape = self.loc.shape[:-1]
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        batch_shape = Size(batch_shape)
        loc_shape = tuple(batch_shape) + tuple(self.event_shape)
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + tuple(self.cov_factor.shape[-1:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        return self._expanded(new, batch_shape, self.event_shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        return (self._unbroadcasted_cov_factor.pow(2).sum(-1) +
                self._unbroadcasted_cov_diag).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    @lazy_property
    def scale_tril(self):
        # D^1/2 chol(I + D^-1/2 W W^T D^-1/2): fewer cancellations than chol(W W^T + D)
        from ..linalg import cholesky
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / d_sqrt
        K = Dinvsqrt_W.matmul(Dinvsqrt_W.mT) + _C.eye(n, dtype=d_sqrt.dtype)
        return (d_sqrt * cholesky(K)).expand(tuple(self._batch_shape) +
                                             tuple(self._event_shape) * 2)

    @lazy_property
    def covariance_matrix(self):
        W = self._unbroadcasted_cov_factor
        cov = W.matmul(W.mT) + self._unbroadcasted_cov_diag.diag_embed()
        return cov.expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def precision_matrix(self):
        # Woodbury: D^-1 - A^T A with A = L_K^-1 W^T D^-1
        from ..linalg import solve
        Wt_Dinv = self._unbroadcasted_cov_factor.mT / \
            self._unbroadcasted_cov_diag.unsqueeze(-2)
        A = solve(self._capacitance_tril, Wt_Dinv)
        prec = self._unbroadcasted_cov_diag.reciprocal().diag_embed() - A.mT.matmul(A)
        return prec.expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        W_shape = tuple(shape[:-1]) + tuple(self.cov_factor.shape[-1:])
        eps_W = _C.empty(W_shape, dtype=self.loc.dtype).normal_()
        eps_D = _C.empty(shape, dtype=self.loc.dtype).normal_()
        return self.loc + _batch_mv(self._unbroadcasted_cov_factor, eps_W) + \
            self._unbroadcasted_cov_diag.sqrt() * eps_D

    def log_prob(self, value):
        self._check_value(value)
        diff = value - self.loc
        M = _batch_lowrank_mahalanobis(self._unbroadcasted_cov_factor,
                                       self._unbroadcasted_cov_diag, diff,
                                       self._capacitance_tril)
        log_det = _batch_lowrank_logdet(self._unbroadcasted_cov_factor,
                                        self._unbroadcasted_cov_diag, self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + log_det + M)

    def entropy(self):
        log_det = _batch_lowrank_logdet(self._unbroadcasted_cov_factor,
                                        self._unbroadcasted_cov_diag, self._capacitance_tril)
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + log_det)
        return H.expand(self._batch_shape) if len(self._batch_shape) else H
