"""GeneralizedPareto(loc, scale, concentration): P(X > x) = (1 + c z)^(-1/c) with
z = (x - loc) / scale (exp(-z) at c = 0); support [loc, loc - scale / c] for c < 0, else
[loc, inf). rsample is icdf(U) with U = torch.rand, so a seed gives torch's numbers."""
import math

from .. import _C
from .._size import Size
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["GeneralizedPareto"]


def _is_zero(c):
    # torch.isclose(c, 0): |c| <= atol (1e-8)
    return c.abs() <= 1e-8


class GeneralizedPareto(Distribution):
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(self.loc.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(GeneralizedPareto, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        return self._expanded(new, batch_shape)

    def rsample(self, sample_shape=Size()):
        u = _C.rand(self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.icdf(u)

    def _z(self, x):
        return (x - self.loc) / self.scale

    def _safe_conc(self):
        eq_zero = _is_zero(self.concentration)
        return eq_zero, _C.where(eq_zero, _C.ones_like(self.concentration), self.concentration)

    def log_prob(self, value):
        self._check_value(value)
        z = self._z(value)
        eq_zero, safe_conc = self._safe_conc()
        y = 1 / safe_conc + _C.ones_like(z)
        where_nonzero = _C.where(y == 0, y, y * (safe_conc * z).log1p())
        return -self.scale.log() - _C.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        self._check_value(value)
        z = self._z(value)
        eq_zero, safe_conc = self._safe_conc()
        return _C.where(eq_zero, -z, -(safe_conc * z).log1p() / safe_conc)

    def log_cdf(self, value):
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value):
        return self.log_cdf(value).exp()

    def icdf(self, value):
        eq_zero, safe_conc = self._safe_conc()
        logu = (-value).log1p()
        where_nonzero = self.loc + self.scale / safe_conc * (-safe_conc * logu).expm1()
        return _C.where(eq_zero, self.loc - self.scale * logu, where_nonzero)

    @property
    def mean(self):
        valid = self.concentration < 1                     # no mean for c >= 1
        safe_conc = _C.where(valid, self.concentration, 0.5)
        return _C.where(valid, self.loc + self.scale / (1 - safe_conc), math.nan)

    @property
    def variance(self):
        valid = self.concentration < 0.5                   # no variance for c >= 1/2
        safe_conc = _C.where(valid, self.concentration, 0.25)
        result = self.scale ** 2 / ((1 - safe_conc) ** 2 * (1 - 2 * safe_conc))
        return _C.where(valid, result, math.nan)

    def entropy(self):
        ans = self.scale.log() + self.concentration + 1
        return ans.expand(self._batch_shape)

    @property
    def mode(self):
        return self.loc

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        lower = self.loc
        upper = _C.where(self.concentration < 0, lower - self.scale / self.concentration,
                         math.inf)
        return constraints.interval(lower, upper)
