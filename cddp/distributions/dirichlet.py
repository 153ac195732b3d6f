"""Dirichlet(concentration) on the simplex and Beta(concentration1, concentration0)
(a two-category Dirichlet, as torch builds it).

Samples are independent Gamma(concentration_i) draws normalised by their sum (gamma.py's
sampler; the draws differ from torch's). rsample's gradient comes through each Gamma's
implicit reparameterization and the normalisation: an exact pathwise gradient of the same
sample, though a different estimator from torch's (which differentiates the Beta marginal
CDF of each coordinate), so the two agree in expectation, not draw by draw."""
from .. import _C
from .._finfo import finfo
from .._pointwise import xlogy as _xlogy
from .._size import Size
from . import constraints
from .exp_family import ExponentialFamily
from .gamma import _rsample_standard_gamma, _standard_gamma_grad
from .utils import broadcast_all

__all__ = ["Dirichlet", "Beta"]


class Dirichlet(ExponentialFamily):
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Dirichlet, _instance)
        batch_shape = Size(batch_shape)
        new.concentration = self.concentration.expand(tuple(batch_shape) +
                                                      tuple(self.event_shape))
        return self._expanded(new, batch_shape, self.event_shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        a = self.concentration.expand(shape)
        if a.dtype in (_C.float32, _C.float64):
            # torch's values (its _sample_dirichlet: gamma draws in float64, normalized,
            # clamped); the gradient through those draws' implicit reparameterization
            x, g = _C._gamma_draw(a.detach(), None, True)
            if not a.requires_grad:
                return x
            a64 = a.to(_C.float64)
            g = g + _standard_gamma_grad(a64.detach(), g) * (a64 - a64.detach())
            xg = (g / g.sum(-1, True)).to(a.dtype)
            return x + (xg - xg.detach())
        g = _rsample_standard_gamma(a)
        tiny = finfo(g.dtype).tiny
        x = g / g.sum(-1, True)
        return x + (x.detach().clamp(min=tiny) - x.detach())    # kept >= tiny, as torch

    def log_prob(self, value):
        self._check_value(value)
        return _xlogy(self.concentration - 1.0, value).sum(-1) + \
            self.concentration.sum(-1).lgamma() - self.concentration.lgamma().sum(-1)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        # (a - 1)_+ normalised; when every a < 1 the mode is the vertex of the largest
        concentrationm1 = (self.concentration - 1).clamp(min=0.0)
        mode = concentrationm1 / concentrationm1.sum(-1, True)
        mask = (self.concentration < 1).all(-1, keepdim=True)
        from ..nn.functional import one_hot
        vertex = one_hot(mode.argmax(-1), concentrationm1.shape[-1]).to(mode.dtype)
        return _C.where(mask, vertex, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        k = self.concentration.size(-1)
        a0 = self.concentration.sum(-1)
        return self.concentration.lgamma().sum(-1) - a0.lgamma() - (k - a0) * a0.digamma() - \
            ((self.concentration - 1.0) * self.concentration.digamma()).sum(-1)

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - x.sum(-1).lgamma()


class Beta(ExponentialFamily):
    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        concentration1, concentration0 = broadcast_all(concentration1, concentration0)
        stacked = _C.stack([concentration1, concentration0], -1)             # (..., 2)
        self._dirichlet = Dirichlet(stacked, validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        batch_shape = Size(batch_shape)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def log_prob(self, value):
        self._check_value(value)
        heads_tails = _C.stack([value, 1.0 - value], -1)
        return self._dirichlet.log_prob(heads_tails)

    def entropy(self):
        return self._dirichlet.entropy()

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return x.lgamma() + y.lgamma() - (x + y).lgamma()
