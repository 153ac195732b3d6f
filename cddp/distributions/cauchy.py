"""Cauchy(loc, scale) and HalfCauchy(scale) (|X| for X ~ Cauchy(0, scale)).

Draws are torch's for the same seed: torch's cauchy_ kernel draws its uniform in double
precision for every dtype and casts tan(pi (u - 1/2)) at the end, so the standard draw here
is computed in float64 from a float64 uniform and cast likewise."""
import math

from .. import _C
from .._size import Size
from .normal import _LocScale
from .transformed_distribution import FoldedAtZero

__all__ = ["Cauchy", "HalfCauchy"]


class Cauchy(_LocScale):
    """loc, scale, expand and the mode are normal.py's location-scale base's."""

    @property
    def mean(self):
        return _C.full(self._extended_shape(), math.nan, dtype=self.loc.dtype)

    @property
    def variance(self):
        return _C.full(self._extended_shape(), math.inf, dtype=self.loc.dtype)

    def rsample(self, sample_shape=Size()):
        u = _C.rand(self._extended_shape(sample_shape), dtype=_C.float64)
        eps = (math.pi * (u - 0.5)).tan().to(self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        self._check_value(value)
        return -math.log(math.pi) - self.scale.log() - \
            (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        self._check_value(value)
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value):
        return (math.pi * (value - 0.5)).tan() * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()


class HalfCauchy(FoldedAtZero):
    _base = Cauchy

    @property
    def mean(self):
        return _C.full(self._extended_shape(), math.inf, dtype=self.scale.dtype)

    @property
    def variance(self):
        return self.base_dist.variance

    def log_prob(self, value):
        return super().log_prob(_C.as_tensor(value, dtype=self.base_dist.scale.dtype))
