"""Poisson(rate) on {0, 1, 2, ...}, and the sampler the count families share.

Sampling: float32 / float64 rates draw torch.poisson's numbers (its CPU sampler draw for draw,
ops/random/rejection.c). Other dtypes by composition, vectorized over the batch (these draws
are not torch's; tests check them statistically):
  * rate < 10: inversion by sequential search, one step k for every entry at once (the
    cumulative pmf is built term by term; an entry stops counting once u <= F(k));
  * rate >= 10: Hoermann's PTRS transformed rejection (1993): every pending entry draws a
    (U, V) pair per round, accepted ones are written and only the rejected are drawn again,
    for at most _MAX_ROUNDS rounds (acceptance is > 85% per round) before a clear error.
Draws are computed in float64 and returned in the rate's dtype."""

from .. import _C
from .._pointwise import xlogy as _xlogy
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Poisson"]

_MAX_ROUNDS = 100
_MAX_STEPS = 2000                  # inversion steps (rate < 10 needs < 60 in float64)


def _poisson_inversion(lam, generator=None):
    u = _C.rand(lam.numel(), dtype=_C.float64, generator=generator)
    p = (-lam).exp()                   # pmf(0)
    F = p.clone()
    k = _C.zeros_like(lam)
    for j in range(1, _MAX_STEPS + 1):
        more = u > F
        if not bool(more.any()):
            break
        k = k + more.to(k.dtype)
        p = p * lam / j
        F = F + p
        if bool((p[more] <= 1e-17 * F[more]).all()):
            break                      # the rest of the pmf is below double rounding
    return k


def _poisson_ptrs(lam, generator=None):
    smu = lam.sqrt()
    b = 0.931 + 2.53 * smu
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)
    loglam = lam.log()
    out = _C.empty_like(lam)
    pending = _C.arange(lam.numel())
    for _ in range(_MAX_ROUNDS):
        if pending.numel() == 0:
            return out
        m, ap, bp = lam[pending], a[pending], b[pending]
        U = _C.rand(pending.numel(), dtype=_C.float64, generator=generator) - 0.5
        V = _C.rand(pending.numel(), dtype=_C.float64, generator=generator)
        us = 0.5 - U.abs()
        k = ((2 * ap / us + bp) * U + m + 0.43).floor()
        quick = (us >= 0.07) & (V <= v_r[pending])
        possible = (k >= 0) & ~((us < 0.013) & (V > us))
        kk = k.clamp(min=0)
        exact = V.log() + inv_alpha[pending].log() - (ap / (us * us) + bp).log() <= \
            -m + kk * loglam[pending] - (kk + 1).lgamma()
        ok = quick | (possible & exact)
        out[pending[ok]] = k[ok]
        pending = pending[~ok]
    if pending.numel():
        raise RuntimeError(f"Poisson sampling: {pending.numel()} draws still rejected after "
                           f"{_MAX_ROUNDS} rounds of PTRS rejection")
    return out


def _poisson(rate, generator=None):
    """Poisson(rate) draws, shape and dtype of rate; no gradient. float32 / float64: torch's
    own draws for the same seed (ops/random/rejection.c); other dtypes composed below."""
    if rate.dtype in (_C.float32, _C.float64):
        return _C._poisson_draw(rate.detach(), generator)
    with no_grad():
        dtype, shape = rate.dtype, tuple(rate.shape)
        lam = rate.detach().to(_C.float64).reshape(-1)
        out = _C.zeros_like(lam)
        small = (lam > 0) & (lam < 10)
        if bool(small.any()):
            out[small] = _poisson_inversion(lam[small], generator)
        large = lam >= 10
        if bool(large.any()):
            out[large] = _poisson_ptrs(lam[large], generator)
        return out.to(dtype).reshape(shape)


class Poisson(ExponentialFamily):
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Poisson, _instance)
        batch_shape = Size(batch_shape)
        new.rate = self.rate.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        return _poisson(self.rate.expand(shape))

    def log_prob(self, value):
        self._check_value(value)
        rate, value = broadcast_all(self.rate, value)
        return _xlogy(value, rate) - rate - (value + 1).lgamma()

    @property
    def _natural_params(self):
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return x.exp()


