"""MultivariateNormal(loc, covariance_matrix | precision_matrix | scale_tril): loc (..., n),
matrices (..., n, n); everything goes through the lower Cholesky factor L (Sigma = L L^T)."""
import math

from .. import _C
from .._shape_ops import broadcast_shapes
from .._size import Size
from . import constraints
from .distribution import Distribution
from .utils import lazy_property

__all__ = ["MultivariateNormal"]


def _solve_lower(L, x):
    """L^-1 x for x (..., n): (..., n), broadcasting L's batch dims against x's."""
    from ..linalg import solve
    return solve(L, x.unsqueeze(-1)).squeeze(-1)


def _mahalanobis(L, x):
    """|| L^-1 x ||^2 over the last dim."""
    return _solve_lower(L, x).pow(2).sum(-1)


def _half_log_det(L):
    return L.diagonal(dim1=-2, dim2=-1).log().sum(-1)


class MultivariateNormal(Distribution):
    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        from ..linalg import cholesky, inv
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        M = given[0]
        if M.dim() < 2:
            raise ValueError("scale_tril matrix must be at least two-dimensional, with "
                             "optional leading batch dimensions"
                             if scale_tril is not None else
                             f"{'covariance' if covariance_matrix is not None else 'precision'}"
                             "_matrix must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        batch = tuple(broadcast_shapes(tuple(M.shape[:-2]), tuple(loc.shape[:-1])))
        n = loc.shape[-1]
        if scale_tril is not None:
            self.scale_tril = scale_tril.expand(batch + (n, n))
        elif covariance_matrix is not None:
            self.covariance_matrix = covariance_matrix.expand(batch + (n, n))
        else:
            self.precision_matrix = precision_matrix.expand(batch + (n, n))
        self.loc = loc.expand(batch + (n,))
        super().__init__(batch, (n,), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = cholesky(inv(precision_matrix))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = Size(batch_shape)
        shape = tuple(batch_shape) + tuple(self.event_shape)
        new.loc = self.loc.expand(shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(shape + self.event_shape[-1:]))
        return self._expanded(new, batch_shape, self.event_shape)

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(
            tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return L.matmul(L.mT).expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def precision_matrix(self):
        from ..linalg import inv
        return inv(self.covariance_matrix)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=Size()):
        eps = _C.empty(self._extended_shape(sample_shape), dtype=self.loc.dtype).normal_()
        return self.loc + self._unbroadcasted_scale_tril.matmul(eps.unsqueeze(-1)).squeeze(-1)

    def log_prob(self, value):
        self._check_value(value)
        L = self._unbroadcasted_scale_tril
        m = _mahalanobis(L, value - self.loc)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + m) - _half_log_det(L)

    def entropy(self):
        h = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + \
            _half_log_det(self._unbroadcasted_scale_tril)
        return h.expand(self._batch_shape) if len(self._batch_shape) else h
