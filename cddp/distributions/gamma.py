"""Gamma(concentration, rate), Chi2(df) (Gamma(df/2, 1/2)) and InverseGamma(concentration,
rate) (1/X for X ~ Gamma), with sampling by composition and implicit reparameterization.

Sampling: Marsaglia & Tsang's squeeze-rejection method (2000). float32 / float64: torch's
CPU sampler, draw for draw (ops/random/rejection.c): the same values as torch after the same
manual_seed, for Gamma, Chi2, InverseGamma, Dirichlet and Beta. float16 / bfloat16 (torch's
CPU sampler has none): vectorized here — every entry still pending draws a normal and a
uniform each round, the accepted ones are written, and only the rejected entries are drawn
again (acceptance is >= 95% per round for concentration >= 1, so _MAX_ROUNDS rounds failing
is not a practical event; it raises rather than loops forever); concentration < 1 is boosted:
G(a) = G(a + 1) * U^(1/a), in float64, then cast.

rsample gradients: d x / d rate is the reparameterization x = G / rate. d G / d concentration
is the implicit reparameterization gradient (Figurnov et al. 2018)
    dG/da = -(dP(a, G)/da) / p(G; a),
P the regularized lower incomplete gamma function, computed here to float64 accuracy (~1e-14
relative against mpmath; torch's _standard_gamma_grad is a fitted approximation good to
~1e-3, ~2e-2 for concentration near 0.01, so the two agree only to that): the power series
of P for x < a + 1 and the continued fraction of Q = 1 - P for x >= a + 1 (Numerical
Recipes' split), each summed with its derivative in a, term by term over the whole batch
until every entry has converged. The same routine gives Gamma.cdf (torch:
special.gammainc) with gradients in both arguments.
The gradient is attached as x + g * (a - a.detach()) (value x, first derivative g); a
second derivative of rsample with respect to the concentration is not provided.
"""
import math

from .. import _C
from .._finfo import finfo
from .._pointwise import xlogy as _xlogy
from .._shape_ops import broadcast_shapes
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .exp_family import ExponentialFamily
from .transformed_distribution import TransformedDistribution
from .transforms import PowerTransform
from .utils import broadcast_all

__all__ = ["Gamma", "Chi2", "InverseGamma"]

_MAX_ROUNDS = 100                  # rejection rounds before _standard_gamma gives up
_MAX_TERMS = 200000                # series / continued-fraction terms before giving up
_CHECK_EVERY = 8                   # convergence is checked (one .item()) every 8 terms


def _standard_gamma(concentration, generator=None):
    """Gamma(concentration, 1) draws, shape and dtype of concentration; no gradient. float32 /
    float64: torch's own draws for the same seed (ops/random/rejection.c); the reduced dtypes
    (which torch's CPU sampler refuses) through the vectorized sampler below."""
    if concentration.dtype in (_C.float32, _C.float64):
        return _C._gamma_draw(concentration.detach(), generator)
    with no_grad():
        dtype, shape = concentration.dtype, tuple(concentration.shape)
        a = concentration.detach().to(_C.float64).reshape(-1)
        boost = a < 1
        a1 = _C.where(boost, a + 1, a)
        d = a1 - 1.0 / 3.0
        c = (9.0 * d).rsqrt()
        out = _C.empty_like(a)
        pending = _C.arange(a.numel())
        for _ in range(_MAX_ROUNDS):
            if pending.numel() == 0:
                break
            dp, cp = d[pending], c[pending]
            z = _C.randn(pending.numel(), dtype=_C.float64, generator=generator)
            u = _C.rand(pending.numel(), dtype=_C.float64, generator=generator)
            v = (1 + cp * z) ** 3
            # accept when v > 0 and log u < z^2/2 + d - d v + d log v (nan compares False)
            ok = (v > 0) & (u.log() < 0.5 * z * z + dp - dp * v + dp * v.log())
            out[pending[ok]] = (dp * v)[ok]
            pending = pending[~ok]
        else:
            if pending.numel():
                raise RuntimeError(f"Gamma sampling: {pending.numel()} draws still rejected "
                                   f"after {_MAX_ROUNDS} rounds of Marsaglia-Tsang rejection")
        # boosting, in log space (U^(1/a) underflows for small a)
        u = _C.rand(a.numel(), dtype=_C.float64, generator=generator)
        out = _C.where(boost, (out.log() + u.log() / a).exp(), out)
        out = out.to(dtype).clamp(min=finfo(dtype).tiny)   # torch clamps to tiny too
        return out.reshape(shape)


def _small(term, total, tol):
    return term.abs() <= tol * total.abs()


def _lower_series(a, x):
    """x < a + 1: S1 = sum_n w_n, S2 = sum_n w_n (log x - psi(a + n + 1)) with
    w_n = x^n / (a (a+1) ... (a+n)); then P = f x S1 and dP/da = f x S2, f the density."""
    logx = x.log()
    w = a.reciprocal()
    psi = (a + 1).digamma()
    s1 = w.clone()
    s2 = w * (logx - psi)
    s2abs = s2.abs()
    # the terms decrease (x < a + 1), so an entry whose term is below 1e-17 of its sum stays
    # converged; done collects them
    done = _C.zeros_like(x, dtype=_C.bool)
    for n in range(1, _MAX_TERMS + 1):
        w = w * x / (a + n)
        psi = psi + 1.0 / (a + n)
        t2 = w * (logx - psi)
        s1, s2, s2abs = s1 + w, s2 + t2, s2abs + t2.abs()
        if n % _CHECK_EVERY == 0:
            done = done | (_small(w, s1, 1e-17) & _small(t2, s2abs, 1e-17))
            if bool(done.all().item()):
                return s1, s2
    raise RuntimeError("incomplete gamma series did not converge in "
                       f"{_MAX_TERMS} terms")


def _upper_continued_fraction(a, x):
    """x >= a + 1: Q = f x h with h Legendre's continued fraction (modified Lentz, as in
    Numerical Recipes' gcf) and dh/da carried along; dQ/da = f x ((log x - psi(a)) h + h')."""
    tiny = 1e-300
    b = x + 1 - a                      # db/da = -1
    c = _C.full_like(x, 1.0 / tiny)
    dc = _C.zeros_like(x)
    d = b.reciprocal()
    dd = d * d                         # d(1/b)/da = 1/b^2
    h, dh = d.clone(), dd.clone()
    one = _C.ones_like(x)
    done = _C.zeros_like(x, dtype=_C.bool)
    for i in range(1, _MAX_TERMS + 1):
        an, dan = -i * (i - a), float(i)
        b = b + 2
        dn = an * d + b
        ddn = dan * d + an * dd - 1
        dn = _C.where(dn.abs() < tiny, _C.full_like(dn, tiny), dn)
        cn = b + an / c
        dcn = -1 + (dan * c - an * dc) / (c * c)
        cn = _C.where(cn.abs() < tiny, _C.full_like(cn, tiny), cn)
        d, dd = dn.reciprocal(), -ddn / (dn * dn)
        c, dc = cn, dcn
        delta, ddelta = d * c, dd * c + d * dc
        h, dh = h * delta, dh * delta + h * ddelta
        # converged: the factor is 1 and the derivative's increment negligible, to double
        # rounding (an entry past convergence keeps multiplying by ~1, harmlessly)
        done = done | (_small(delta - 1, one, 1e-15) & _small(dh * (delta - 1) + h * ddelta,
                                                              dh, 1e-15))
        if i % _CHECK_EVERY == 0 and bool(done.all().item()):
            return h, dh
    raise RuntimeError("incomplete gamma continued fraction did not converge in "
                       f"{_MAX_TERMS} terms")


_LARGE_A = 1e7      # from here P comes from Wilson-Hilferty (the series would need ~sqrt(a) terms)


def _special_p(a, x):
    """P(a, x) where the series do not apply, as torch's igamma: NaN for a NaN, a < 0 or
    x < 0; a == 0: 1 for x > 0; x == 0: 0; infinite a: 0 (NaN when x is infinite too);
    infinite x: 1."""
    nan = _C.full_like(x, float("nan"))
    P = _C.where(_C.isinf(x), _C.ones_like(x), nan)
    P = _C.where(_C.isinf(a), _C.where(_C.isinf(x), nan, _C.zeros_like(x)), P)
    P = _C.where((x == 0) & (a > 0), _C.zeros_like(x), P)
    P = _C.where((a == 0) & (x > 0), _C.ones_like(x), P)
    bad = _C.isnan(a) | _C.isnan(x) | (a < 0) | (x < 0) | ((a == 0) & (x == 0))
    return _C.where(bad, nan, P)


def _wilson_hilferty(a, x):
    """(P, dP/da) for large a: P = Phi(z), z = (t - 1 + 1/(9a)) 3 sqrt(a), t = (x/a)^(1/3)
    (the cube root of a Gamma(a) / a is nearly normal; error O(1/a))."""
    t = (x / a) ** (1.0 / 3.0)
    r = 3 * a.sqrt()
    z = (t - 1 + 1 / (9 * a)) * r
    dz = r * (-t / (3 * a) - 1 / (9 * a * a)) + (t - 1 + 1 / (9 * a)) * 1.5 / a.sqrt()
    P = 0.5 * (-z / 2 ** 0.5).erfc()
    phi = (-0.5 * z * z).exp() / (2 * math.pi) ** 0.5
    return P, phi * dz


def _gamma_p_parts(a, x, upper_tail=False):
    """For float64 a, x (same shape, no grad): (log f(x), P(a, x), dP/da / f(x)), f the
    Gamma(a, 1) density. Series and fraction run only on the entries they serve: finite a > 0
    below _LARGE_A and finite x > 0; larger a takes Wilson-Hilferty, the rest torch's special
    values (_special_p; derivative 0). With upper_tail, Q = 1 - P instead of P, taken from the
    continued fraction where that is the branch (so a tiny Q keeps its digits), and the
    derivative's sign flipped."""
    logf = (a - 1) * x.log() - x - a.lgamma()
    P = _C.zeros_like(x)
    G = _C.zeros_like(x)
    finite = _C.isfinite(a) & _C.isfinite(x) & (a > 0) & (x > 0)
    large = finite & (a >= _LARGE_A)
    odd = ~finite
    if bool(odd.any()):
        P[odd] = _special_p(a[odd], x[odd])
    if bool(large.any()):
        pl, dpl = _wilson_hilferty(a[large], x[large])
        P[large] = pl
        G[large] = dpl / logf[large].exp()
    regular = finite & ~large
    lower = regular & (x < a + 1)
    if bool(lower.any()):
        al, xl = a[lower], x[lower]
        s1, s2 = _lower_series(al, xl)
        P[lower] = ((al - 1) * xl.log() - xl - al.lgamma()).exp() * xl * s1
        G[lower] = xl * s2
    upper = regular & ~lower
    if bool(upper.any()):
        au, xu = a[upper], x[upper]
        h, dh = _upper_continued_fraction(au, xu)
        Q = ((au - 1) * xu.log() - xu - au.lgamma()).exp() * xu * h
        P[upper] = Q if upper_tail else 1 - Q
        G[upper] = -xu * ((xu.log() - au.digamma()) * h + dh)
    if upper_tail:
        flip = ~upper
        P[flip] = 1 - P[flip]
        G = -G
    return logf, P.clamp(min=0, max=1), G


def _standard_gamma_grad(concentration, x):
    """d x / d concentration for x ~ Gamma(concentration, 1) held at its CDF level:
    -(dP/da) / f(x). 0 where x underflowed to 0 (as torch)."""
    with no_grad():
        a = concentration.detach().to(_C.float64)
        xx = x.detach().to(_C.float64)
        shape = tuple(broadcast_shapes(tuple(a.shape), tuple(xx.shape)))
        a, xx = a.expand(shape).reshape(-1), xx.expand(shape).reshape(-1)
        _, _, G = _gamma_p_parts(a, xx)
        g = -G
        g = _C.where(_C.isfinite(g) & (xx > 0), g, _C.zeros_like(g))
        return g.reshape(shape).to(x.dtype)


def _gammainc(a, x, upper_tail=False):
    """Regularized lower incomplete gamma P(a, x) (torch.special.gammainc; with upper_tail
    the upper one Q = 1 - P, special.gammaincc), differentiable in x (dP/dx = f(x)) and in a
    (dP/da from the same series / fraction)."""
    a, x = broadcast_all(a, x)
    with no_grad():
        a64 = a.detach().to(_C.float64).reshape(-1)
        x64 = x.detach().to(_C.float64).reshape(-1)
        logf, P, G = _gamma_p_parts(a64, x64, upper_tail)
        f = _C.where(x64 > 0, logf.exp(), _C.zeros_like(logf))
        dPda = _C.where(_C.isfinite(G), G * f, _C.zeros_like(G))      # G: sign already Q's
        if upper_tail:
            f = -f                                                      # dQ/dx = -f
        shape = tuple(a.shape)
        P = P.reshape(shape).to(x.dtype)
        f = f.reshape(shape).to(x.dtype)
        dPda = dPda.reshape(shape).to(x.dtype)
    out = P
    if x.requires_grad:
        out = out + f * (x - x.detach())
    if a.requires_grad:
        out = out + dPda * (a - a.detach())
    return out


def _rsample_standard_gamma(concentration, generator=None):
    """_standard_gamma draws carrying d/d concentration (implicit reparameterization)."""
    x = _standard_gamma(concentration, generator)
    if concentration.requires_grad:
        g = _standard_gamma_grad(concentration, x)
        x = x + g * (concentration - concentration.detach())
    return x


class Gamma(ExponentialFamily):
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = Size(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.rate = self.rate.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        value = _rsample_standard_gamma(self.concentration.expand(shape)) / \
            self.rate.expand(shape)
        # kept >= tiny (the division can underflow), without recording the clamp
        return value + (value.detach().clamp(min=finfo(value.dtype).tiny) - value.detach())

    def log_prob(self, value):
        value = _C.as_tensor(value, dtype=self.rate.dtype)
        self._check_value(value)
        return _xlogy(self.concentration, self.rate) + \
            _xlogy(self.concentration - 1, value) - self.rate * value - \
            self.concentration.lgamma()

    def entropy(self):
        return self.concentration - self.rate.log() + self.concentration.lgamma() + \
            (1.0 - self.concentration) * self.concentration.digamma()

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return (x + 1).lgamma() + (x + 1) * (-y.reciprocal()).log()

    def cdf(self, value):
        self._check_value(value)
        return _gammainc(self.concentration, self.rate * value)


class Chi2(Gamma):
    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Chi2, _instance)
        return super().expand(batch_shape, new)

    @property
    def df(self):
        return self.concentration * 2


class InverseGamma(TransformedDistribution):
    """X ~ Gamma(concentration, rate), Y = 1 / X."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base_dist = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = -base_dist.rate.new_ones(())
        super().__init__(base_dist, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        result = self.rate / (self.concentration - 1)
        return _C.where(self.concentration > 1, result, math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        result = self.rate.square() / ((self.concentration - 1).square() *
                                       (self.concentration - 2))
        return _C.where(self.concentration > 2, result, math.inf)

    def entropy(self):
        return self.concentration + self.rate.log() + self.concentration.lgamma() - \
            (1 + self.concentration) * self.concentration.digamma()
