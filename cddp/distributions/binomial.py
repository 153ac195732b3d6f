"""Binomial(total_count, probs | logits), NegativeBinomial(total_count, probs | logits) and
Multinomial(total_count, probs | logits).

Sampling: float32 / float64 draw torch's numbers for a seed — Binomial through torch's CPU
sampler draw for draw (ops/random/rejection.c), NegativeBinomial as torch composes it (Poisson of
Gamma(total_count, rate=exp(-logits)), both torch's samplers), Multinomial as torch does
(total_count Categorical draws counted with scatter_add). Other dtypes by composition,
vectorized over the batch (the draws differ from torch's; tests check them statistically):
with q = min(p, 1 - p) (p > 1/2 by symmetry), n q < 10 by inversion (sequential search over
k, every entry at once), otherwise Hoermann's BTRS transformed rejection (1993) with its exact
acceptance test, rejected entries redrawn for at most _MAX_ROUNDS rounds before a clear error.
"""
import math

from .. import _C
from .._shape_ops import broadcast_tensors
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .bernoulli import _BinaryParams
from .categorical import Categorical
from .distribution import Distribution
from .gamma import Gamma
from .poisson import _poisson
from .utils import lazy_property

__all__ = ["Binomial", "NegativeBinomial", "Multinomial"]

_MAX_ROUNDS = 100


def _binomial_inversion(n, q, generator=None):
    """n q < 10: k = #{j : u > F(j - 1)}, F the cdf built from pmf(0) = (1 - q)^n."""
    u = _C.rand(n.numel(), dtype=_C.float64, generator=generator)
    r = q / (1 - q)
    p = (n * (-q).log1p()).exp()
    F = p.clone()
    k = _C.zeros_like(n)
    j = 0
    while True:
        more = (u > F) & (k < n)
        if not bool(more.any()):
            return k
        k = k + more.to(k.dtype)
        p = p * r * (n - j) / (j + 1)
        j += 1
        F = F + p
        if bool((p[more] <= 1e-17 * F[more]).all()) and j > 1:
            return k                   # the rest of the pmf is below double rounding


def _binomial_btrs(n, q, generator=None):
    spq = (n * q * (1 - q)).sqrt()
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * q
    c = n * q + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    lpq = (q / (1 - q)).log()
    m = ((n + 1) * q).floor()
    h = (m + 1).lgamma() + (n - m + 1).lgamma()
    out = _C.empty_like(n)
    pending = _C.arange(n.numel())
    for _ in range(_MAX_ROUNDS):
        if pending.numel() == 0:
            return out
        nn, ap, bp = n[pending], a[pending], b[pending]
        U = _C.rand(pending.numel(), dtype=_C.float64, generator=generator) - 0.5
        V = _C.rand(pending.numel(), dtype=_C.float64, generator=generator)
        us = 0.5 - U.abs()
        k = ((2 * ap / us + bp) * U + c[pending]).floor()
        inside = (k >= 0) & (k <= nn)
        quick = (us >= 0.07) & (V <= v_r[pending])
        kk = k.clamp(min=0)
        kk = _C.where(kk > nn, nn, kk)
        logv = (V * alpha[pending] / (ap / (us * us) + bp)).log()
        exact = logv <= h[pending] - (kk + 1).lgamma() - (nn - kk + 1).lgamma() + \
            (kk - m[pending]) * lpq[pending]
        ok = inside & (quick | exact)
        out[pending[ok]] = k[ok]
        pending = pending[~ok]
    if pending.numel():
        raise RuntimeError(f"Binomial sampling: {pending.numel()} draws still rejected after "
                           f"{_MAX_ROUNDS} rounds of BTRS rejection")
    return out


def _binomial(total_count, probs, generator=None):
    """Binomial(total_count, probs) draws (one broadcast shape, float); no gradient. float32 /
    float64: torch's own draws for the same seed (ops/random/rejection.c); other dtypes composed
    below."""
    if probs.dtype in (_C.float32, _C.float64) and total_count.dtype == probs.dtype:
        return _C._binomial_draw(total_count.detach(), probs.detach(), generator)
    with no_grad():
        dtype, shape = probs.dtype, tuple(probs.shape)
        n = total_count.detach().to(_C.float64).reshape(-1)
        p = probs.detach().to(_C.float64).reshape(-1)
        flip = p > 0.5
        q = _C.where(flip, 1 - p, p)
        k = _C.zeros_like(n)
        live = (n > 0) & (q > 0)
        small = live & (n * q < 10)
        if bool(small.any()):
            k[small] = _binomial_inversion(n[small], q[small], generator)
        large = live & (n * q >= 10)
        if bool(large.any()):
            k[large] = _binomial_btrs(n[large], q[large], generator)
        k = _C.where(flip, n - k, k)
        return k.to(dtype).reshape(shape)


def _clamp_by_zero(x):
    # max(x, 0) with gradient 1/2 at 0 (torch's form)
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(_BinaryParams, Distribution):
    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval, "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        (total_count,) = self._set_params(probs, logits, total_count)
        self.total_count = total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Binomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        self._expand_params(new, batch_shape)
        return self._expanded(new, batch_shape)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)


    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        return _binomial(self.total_count.expand(shape), self.probs.expand(shape))

    def log_prob(self, value):
        self._check_value(value)
        log_factorial_n = (self.total_count + 1).lgamma()
        log_factorial_k = (value + 1).lgamma()
        log_factorial_nmk = (self.total_count - value + 1).lgamma()
        # n log(1 + e^l) computed stably as n (max(l, 0) + log1p(e^-|l|))
        normalize_term = self.total_count * _clamp_by_zero(self.logits) + \
            self.total_count * (-self.logits.abs()).exp().log1p() - log_factorial_n
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        total_count = int(self.total_count.max())
        if not self.total_count.min() == total_count:
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        total_count = int(self.total_count.max())
        if not self.total_count.min() == total_count:
            raise NotImplementedError("Inhomogeneous total count not supported by "
                                      "`enumerate_support`.")
        values = _C.arange(1 + total_count, dtype=self._param.dtype)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values


class NegativeBinomial(_BinaryParams, Distribution):
    """Failures before total_count successes, success probability 1 - probs (torch's
    convention: probs is the probability of the counted event)."""
    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        (total_count,) = self._set_params(probs, logits, total_count)
        self.total_count = total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(NegativeBinomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        self._expand_params(new, batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return self.total_count * self.logits.exp()

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / (-self.logits).sigmoid()


    @lazy_property
    def _gamma(self):
        return Gamma(concentration=self.total_count, rate=(-self.logits).exp(),
                     validate_args=False)

    def sample(self, sample_shape=Size()):
        with no_grad():
            return _poisson(self._gamma.sample(sample_shape=sample_shape))

    def log_prob(self, value):
        self._check_value(value)
        from ..nn.functional import logsigmoid
        log_unnormalized_prob = self.total_count * logsigmoid(-self.logits) + \
            value * logsigmoid(self.logits)
        log_normalization = -(self.total_count + value).lgamma() + (1.0 + value).lgamma() + \
            self.total_count.lgamma()
        # total_count + value == 0: the pmf is 1 (lgamma(0) would be inf)
        log_normalization = log_normalization.masked_fill(self.total_count + value == 0.0, 0.0)
        return log_unnormalized_prob - log_normalization


class Multinomial(Distribution):
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        return self._expanded(new, batch_shape, self.event_shape)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=Size()):
        sample_shape = Size(sample_shape)
        with no_grad():
            samples = self._categorical.sample(Size((self.total_count,) + tuple(sample_shape)))
            # (total_count, S, B) -> (S, B, total_count), then counted per category
            order = list(range(samples.dim()))
            order.append(order.pop(0))
            samples = samples.permute(*order)
            counts = _C.zeros(self._extended_shape(sample_shape), dtype=samples.dtype)
            counts.scatter_add_(-1, samples, _C.ones_like(samples))
            return counts.type_as(self.probs)

    def entropy(self):
        # n H(cat) - log n! + sum_i E[log x_i!], x_i ~ Binomial(n, p_i). log n! in double
        # (torch takes lgamma of an int64 tensor, i.e. in float32: ~1e-8 off)
        n = self.total_count
        cat_entropy = self._categorical.entropy()
        term1 = n * cat_entropy - math.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = (support + 1).lgamma()
        term2 = (binomial_probs * weights).sum([0, -1])
        return term1 + term2

    def log_prob(self, value):
        self._check_value(value)
        logits, value = broadcast_tensors(self.logits, value)
        log_factorial_n = (value.sum(-1) + 1).lgamma()
        log_factorial_xs = (value + 1).lgamma().sum(-1)
        # 0 * log 0 = 0 for categories of probability 0 that were not drawn
        logits = logits.masked_fill((value == 0) & (logits == -float("inf")), 0.0)
        log_powers = (logits * value).sum(-1)
        return log_factorial_n - log_factorial_xs + log_powers
