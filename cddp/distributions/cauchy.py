"""Cauchy(loc, scale) and HalfCauchy(scale) (|X| for X ~ Cauchy(0, scale)).

Draws are torch's for the same seed: torch's cauchy_ kernel draws its uniform in double
precision for every dtype and casts tan(pi (u - 1/2)) at the end, so the standard draw here
is computed in float64 from a float64 uniform and cast likewise."""
import math

from .. import _C
from .._size import Size
from . import constraints
from .distribution import Distribution
from .transformed_distribution import TransformedDistribution
from .transforms import AbsTransform
from .utils import broadcast_all

__all__ = ["Cauchy", "HalfCauchy"]


class Cauchy(Distribution):
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Cauchy, _instance)
        batch_shape = Size(batch_shape)
        new.loc, new.scale = self.loc.expand(batch_shape), self.scale.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return _C.full(self._extended_shape(), math.nan, dtype=self.loc.dtype)

    @property
    def mode(self):
        return self.loc

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


class HalfCauchy(TransformedDistribution):
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        base_dist = Cauchy(0, scale, validate_args=False)
        super().__init__(base_dist, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HalfCauchy, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mean(self):
        return _C.full(self._extended_shape(), math.inf, dtype=self.scale.dtype)

    @property
    def mode(self):
        return _C.zeros_like(self.scale)

    @property
    def variance(self):
        return self.base_dist.variance

    def log_prob(self, value):
        self._check_value(value)
        value = _C.as_tensor(value, dtype=self.base_dist.scale.dtype)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return _C.where(value >= 0, log_prob, -math.inf)

    def cdf(self, value):
        self._check_value(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)
