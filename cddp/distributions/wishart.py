"""Wishart(df, covariance_matrix | precision_matrix | scale_tril): the law of X X^T for the
df columns of X drawn from N(0, Sigma), extended to real df > p - 1.

rsample is Bartlett's decomposition, as torch composes it: A lower triangular with
A_ii = sqrt(chi2(df - i)) (clamped above eps) and standard normal entries below the diagonal,
sample = (L A)(L A)^T with Sigma = L L^T. The chi-square parts come from gamma.py (implicit
reparameterization in df), so the draws differ from torch's; tests check them statistically.
A sample that is not positive definite (possible for p - 1 < df < p) is redrawn, only where
it failed, up to max_try_correction times, with a warning. (torch 2.13 flags the valid
samples instead and redraws those; cddp redraws the singular ones, on purpose.)"""
import math
import warnings

from .. import _C
from .._finfo import finfo
from .._shape_ops import broadcast_shapes
from .._size import Size
from . import constraints
from .exp_family import ExponentialFamily
from .gamma import Chi2
from .lkj_cholesky import _mvlgamma
from .utils import lazy_property, vec_to_tril_matrix

__all__ = ["Wishart"]

_log_2 = math.log(2)


def _mvdigamma(x, p):
    """d/dx log Gamma_p(x) = sum_j digamma(x - j/2)."""
    if not bool((x > (p - 1) / 2).all()):
        raise AssertionError("Wrong domain for multivariate digamma function.")
    return (x.unsqueeze(-1) - _C.arange(p, dtype=x.dtype) / 2).digamma().sum(-1)


def _clamp_above_eps(x):
    return x.clamp(min=finfo(x.dtype).eps)


def _spd_solve(L, B):
    """(L L^T)^-1 B by two triangular solves."""
    from ..linalg import solve
    return solve(L.mT, solve(L, B))


class Wishart(ExponentialFamily):
    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        from ..linalg import cholesky, inv
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or "
                                 "scale_tril may be specified.")
        param = given[0]
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if isinstance(df, _C.Tensor):
            batch_shape = Size(broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape)))
            self.df = df.expand(batch_shape)
        else:
            batch_shape = Size(tuple(param.shape[:-2]))
            self.df = _C.tensor(float(df), dtype=param.dtype)
        event_shape = Size(tuple(param.shape[-2:]))
        if bool((self.df <= event_shape[-1] - 1).any()):
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = "
                             f"{event_shape[-1] - 1}.")
        full = tuple(batch_shape) + tuple(event_shape)
        if scale_tril is not None:
            self.scale_tril = param.expand(full)
        elif covariance_matrix is not None:
            self.covariance_matrix = param.expand(full)
        else:
            self.precision_matrix = param.expand(full)
        if bool((self.df < event_shape[-1]).any()):
            warnings.warn("Low df values detected. Singular samples are highly likely to occur "
                          "for ndim - 1 < df < ndim.", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._batch_dims = [-(x + 1) for x in range(len(self._batch_shape))]
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = cholesky(inv(precision_matrix))
        self._dist_chi2 = self._chi2(self.df, batch_shape)

    def _chi2(self, df, batch_shape):
        # the Bartlett diagonal: chi2(df - i), i = 0 .. p-1
        p = self._event_shape[-1]
        offsets = _C.arange(p, dtype=self._unbroadcasted_scale_tril.dtype)
        return Chi2(df=df.unsqueeze(-1) - offsets.expand(tuple(batch_shape) + (-1,)))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = Size(batch_shape)
        cov_shape = tuple(batch_shape) + tuple(self.event_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(cov_shape)
        new.df = self.df.expand(batch_shape)
        new._batch_dims = [-(x + 1) for x in range(len(batch_shape))]
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(cov_shape))
        new._event_shape = self._event_shape
        new._dist_chi2 = new._chi2(new.df, batch_shape)
        return self._expanded(new, batch_shape, self.event_shape)

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(tuple(self._batch_shape) +
                                                     tuple(self._event_shape))

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return L.matmul(L.mT).expand(tuple(self._batch_shape) + tuple(self._event_shape))

    @lazy_property
    def precision_matrix(self):
        eye = _C.eye(self._event_shape[-1], dtype=self._unbroadcasted_scale_tril.dtype)
        return _spd_solve(self._unbroadcasted_scale_tril, eye).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def _df_matrix(self):
        return self.df.reshape(tuple(self._batch_shape) + (1, 1))

    @property
    def mean(self):
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self):
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = _C.where(factor <= 0, math.nan, factor)      # no mode for df <= p + 1
        return factor.reshape(tuple(self._batch_shape) + (1, 1)) * self.covariance_matrix

    @property
    def variance(self):
        V = self.covariance_matrix
        diag_V = V.diagonal(dim1=-2, dim2=-1)
        return self._df_matrix() * (V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape=Size()):
        p = self._event_shape[-1]
        diag = _clamp_above_eps(self._dist_chi2.rsample(sample_shape).sqrt())   # (S, B, p)
        lower = _C.randn(tuple(sample_shape) + tuple(self._batch_shape) + (p * (p - 1) // 2,),
                         dtype=diag.dtype)
        noise = vec_to_tril_matrix(lower, diag=-1) + diag.diag_embed()
        chol = self._unbroadcasted_scale_tril.matmul(noise)
        return chol.matmul(chol.mT)

    def rsample(self, sample_shape=Size(), max_try_correction=None):
        if max_try_correction is None:
            max_try_correction = 10
        sample_shape = Size(sample_shape)
        sample = self._bartlett_sampling(sample_shape)
        singular = ~self.support.check(sample)                # (S, B)
        if bool(singular.any()):
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                # redraw everything, keep the new draws where the old ones were singular
                new = self._bartlett_sampling(sample_shape)
                mask = singular.reshape(tuple(singular.shape) + (1, 1))
                sample = _C.where(mask, new, sample)
                singular = ~self.support.check(sample)
                if not bool(singular.any()):
                    break
        return sample

    def log_prob(self, value):
        self._check_value(value)
        nu, p = self.df, self._event_shape[-1]
        from ..linalg import slogdet
        L = self._unbroadcasted_scale_tril
        return -nu * (p * _log_2 / 2 + L.diagonal(dim1=-2, dim2=-1).log().sum(-1)) - \
            _mvlgamma(nu / 2, p) + (nu - p - 1) / 2 * slogdet(value)[1] - \
            _spd_solve(L, value).diagonal(dim1=-2, dim2=-1).sum(-1) / 2

    def entropy(self):
        nu, p = self.df, self._event_shape[-1]
        L = self._unbroadcasted_scale_tril
        return (p + 1) * (p * _log_2 / 2 + L.diagonal(dim1=-2, dim2=-1).log().sum(-1)) + \
            _mvlgamma(nu / 2, p) - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2

    @property
    def _natural_params(self):
        nu, p = self.df, self._event_shape[-1]
        return -self.precision_matrix / 2, (nu - p - 1) / 2

    def _log_normalizer(self, x, y):
        from ..linalg import slogdet
        p = self._event_shape[-1]
        return (y + (p + 1) / 2) * (-slogdet(-2 * x)[1] + _log_2 * p) + \
            _mvlgamma(y + (p + 1) / 2, p)
