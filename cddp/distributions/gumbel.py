"""Families built as torch builds them, from Uniform or Exponential draws pushed through
transforms (so a seed gives torch's numbers): Gumbel, Pareto, Weibull, Kumaraswamy."""
import math

from .. import _C
from .._finfo import finfo
from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, ExpTransform, PowerTransform
from .uniform import Exponential, Uniform
from .utils import broadcast_all, euler_constant

__all__ = ["Gumbel", "Pareto", "Weibull", "Kumaraswamy"]


class Gumbel(TransformedDistribution):
    """U ~ Uniform(tiny, 1 - eps), X = loc - scale * log(-log U)."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        fi = finfo(self.loc.dtype)
        base_dist = Uniform(_C.full_like(self.loc, fi.tiny), _C.full_like(self.loc, 1 - fi.eps),
                            validate_args=validate_args)
        transforms = [ExpTransform().inv, AffineTransform(loc=0, scale=-_C.ones_like(self.scale)),
                      ExpTransform().inv, AffineTransform(loc=loc, scale=-self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gumbel, _instance)
        new.loc, new.scale = self.loc.expand(batch_shape), self.scale.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    def log_prob(self, value):
        self._check_value(value)
        y = (self.loc - value) / self.scale
        return (y - y.exp()) - self.scale.log()

    @property
    def mean(self):
        return self.loc + self.scale * euler_constant

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def entropy(self):
        return self.scale.log() + (1 + euler_constant)


class Pareto(TransformedDistribution):
    """E ~ Exponential(alpha), X = scale * exp(E)."""
    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args=None):
        self.scale, self.alpha = broadcast_all(scale, alpha)
        base_dist = Exponential(self.alpha, validate_args=validate_args)
        transforms = [ExpTransform(), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Pareto, _instance)
        new.scale, new.alpha = self.scale.expand(batch_shape), self.alpha.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        a = self.alpha.clamp(min=1)                  # inf for alpha <= 1
        return a * self.scale / (a - 1)

    @property
    def mode(self):
        return self.scale

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)                  # inf for alpha <= 2
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.greater_than_eq(self.scale)

    def entropy(self):
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class Weibull(TransformedDistribution):
    """E ~ Exponential(1), X = scale * E ** (1 / concentration)."""
    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base_dist = Exponential(_C.ones_like(self.scale), validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration_reciprocal),
                      AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Weibull, _instance)
        new.scale = self.scale.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.concentration_reciprocal = new.concentration.reciprocal()
        base_dist = self.base_dist.expand(batch_shape)
        transforms = [PowerTransform(exponent=new.concentration_reciprocal),
                      AffineTransform(loc=0, scale=new.scale)]
        TransformedDistribution.__init__(new, base_dist, transforms, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.scale * (1 + self.concentration_reciprocal).lgamma().exp()

    @property
    def mode(self):
        return self.scale * ((self.concentration - 1) / self.concentration) ** \
            self.concentration.reciprocal()

    @property
    def variance(self):
        return self.scale.pow(2) * ((1 + 2 * self.concentration_reciprocal).lgamma().exp() -
                                    (2 * (1 + self.concentration_reciprocal).lgamma()).exp())

    def entropy(self):
        return euler_constant * (1 - self.concentration_reciprocal) + \
            (self.scale * self.concentration_reciprocal).log() + 1


def _moments(a, b, n):
    """E[X^n] for X ~ Kumaraswamy(a, b): b * B(1 + n/a, b)."""
    arg1 = 1 + n / a
    log_value = arg1.lgamma() + b.lgamma() - (arg1 + b).lgamma()
    return b * log_value.exp()


class Kumaraswamy(TransformedDistribution):
    """U ~ Uniform(0, 1), X = (1 - U ** (1 / concentration0)) ** (1 / concentration1)."""
    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base_dist = Uniform(_C.full_like(self.concentration0, 0),
                            _C.full_like(self.concentration0, 1), validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration0.reciprocal()),
                      AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=self.concentration1.reciprocal())]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(batch_shape)
        new.concentration0 = self.concentration0.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        # ((a - 1) / (a b - 1)) ** (1 / a) for a = concentration1, b = concentration0;
        # undefined (nan) when a < 1 or b < 1. (torch 2.13's formula takes log1p(-b), which is
        # nan for every b > 1; this is the textbook mode, on purpose.)
        a, b = self.concentration1, self.concentration0
        mode = ((a - 1) / (a * b - 1)).pow(a.reciprocal())
        return _C.where((b < 1) | (a < 1), math.nan, mode)

    @property
    def variance(self):
        return _moments(self.concentration1, self.concentration0, 2) - self.mean.pow(2)

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        H0 = (self.concentration0 + 1).digamma() + euler_constant
        return t0 + t1 * H0 - self.concentration1.log() - self.concentration0.log()
