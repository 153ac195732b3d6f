"""ContinuousBernoulli(probs | logits) on [0, 1] (Loaiza-Ganem & Cunningham 2019):
p(x) = C(lambda) lambda^x (1 - lambda)^(1 - x). Near lambda = 1/2 the closed forms of the
normaliser, mean and variance cancel catastrophically, so inside lims (default
(0.499, 0.501)) torch's Taylor expansions are used, as here. rsample is icdf(U) with
U = torch.rand, so a seed gives torch's numbers."""
import math

from .. import _C
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .bernoulli import _BinaryParams, _bce_with_logits
from .exp_family import ExponentialFamily
from .utils import broadcast_all, clamp_probs, lazy_property, logits_to_probs

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(_BinaryParams, ExponentialFamily):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        self._set_params(probs, logits)
        if probs is not None:
            if validate_args is not None:
                if not bool(self.arg_constraints["probs"].check(self.probs).all()):
                    raise ValueError("The parameter probs has invalid values")
            self.probs = self._param = clamp_probs(self.probs)
        self._lims = lims
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ContinuousBernoulli, _instance)
        new._lims = self._lims
        batch_shape = Size(batch_shape)
        self._expand_params(new, batch_shape)
        return self._expanded(new, batch_shape)

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        # probs inside the unstable region replaced by lims[0] (a finite stand-in the
        # closed forms can take; where() then picks the Taylor branch there)
        return _C.where(self._outside_unstable_region(), self.probs,
                        self._lims[0] * _C.ones_like(self.probs))

    def _cont_bern_log_norm(self):
        """log C(lambda) = log(|log(1 - l) - log l| / |1 - 2 l|)."""
        cut_probs = self._cut_probs()
        below = _C.where(cut_probs <= 0.5, cut_probs, _C.zeros_like(cut_probs))
        above = _C.where(cut_probs >= 0.5, cut_probs, _C.ones_like(cut_probs))
        log_norm = ((-cut_probs).log1p() - cut_probs.log()).abs().log() - \
            _C.where(cut_probs <= 0.5, (-2.0 * below).log1p(), (2.0 * above - 1.0).log())
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return _C.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut_probs = self._cut_probs()
        mus = cut_probs / (2.0 * cut_probs - 1.0) + \
            1.0 / ((-cut_probs).log1p() - cut_probs.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return _C.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        return self.variance.sqrt()

    @property
    def variance(self):
        cut_probs = self._cut_probs()
        vars_ = cut_probs * (cut_probs - 1.0) / (1.0 - 2.0 * cut_probs).pow(2) + \
            1.0 / ((-cut_probs).log1p() - cut_probs.log()).pow(2)
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return _C.where(self._outside_unstable_region(), vars_, taylor)

    @lazy_property
    def probs(self):                      # clamped: the density is unstable at 0 and 1
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    def sample(self, sample_shape=Size()):
        u = _C.rand(self._extended_shape(sample_shape), dtype=self.probs.dtype)
        with no_grad():
            return self.icdf(u)

    def rsample(self, sample_shape=Size()):
        u = _C.rand(self._extended_shape(sample_shape), dtype=self.probs.dtype)
        return self.icdf(u)

    def log_prob(self, value):
        self._check_value(value)
        logits, value = broadcast_all(self.logits, value)
        return -_bce_with_logits(logits, value) + self._cont_bern_log_norm()

    def cdf(self, value):
        self._check_value(value)
        cut_probs = self._cut_probs()
        cdfs = (cut_probs.pow(value) * (1.0 - cut_probs).pow(1.0 - value) + cut_probs - 1.0) / \
            (2.0 * cut_probs - 1.0)
        unbounded = _C.where(self._outside_unstable_region(), cdfs, value)
        return _C.where(value <= 0.0, _C.zeros_like(value),
                        _C.where(value >= 1.0, _C.ones_like(value), unbounded))

    def icdf(self, value):
        cut_probs = self._cut_probs()
        return _C.where(self._outside_unstable_region(),
                        ((-cut_probs + value * (2.0 * cut_probs - 1.0)).log1p() -
                         (-cut_probs).log1p()) / (cut_probs.log() - (-cut_probs).log1p()),
                        value)

    def entropy(self):
        log_probs0 = (-self.probs).log1p()
        log_probs1 = self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """log((e^x - 1) / x), by its Taylor series near x = 0."""
        out_unst_reg = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut_nat_params = _C.where(out_unst_reg, x, (self._lims[0] - 0.5) * _C.ones_like(x))
        log_norm = cut_nat_params.expm1().abs().log() - cut_nat_params.abs().log()
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return _C.where(out_unst_reg, log_norm, taylor)
