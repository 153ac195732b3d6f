"""VonMises(loc, concentration): the circular normal on [-pi, pi).

log_prob needs log I0(kappa): torch evaluates it with the polynomial approximations of
Abramowitz & Stegun 9.8.1-9.8.4 (relative error ~1e-7), and so does cddp, so that log_prob
equals torch's (not the exact Bessel function beyond that accuracy). sample is Best &
Fisher's (1979) rejection sampler drawn as torch draws it: every round draws rand((3,) +
shape) in float64 for all entries (until every entry has been accepted once), so a seed
gives torch's numbers. No rsample (as torch)."""
import math

from .. import _C
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, lazy_property

__all__ = ["VonMises"]

# Abramowitz & Stegun 9.8.1-9.8.4: I0 / I1 for x < 3.75 in y = (x / 3.75)^2, and
# sqrt(x) e^-x I0 / I1 for x >= 3.75 in y = 3.75 / x
_I0_COEF_SMALL = [1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.360768e-1, 0.45813e-2]
_I0_COEF_LARGE = [0.39894228, 0.1328592e-1, 0.225319e-2, -0.157565e-2, 0.916281e-2,
                  -0.2057706e-1, 0.2635537e-1, -0.1647633e-1, 0.392377e-2]
_I1_COEF_SMALL = [0.5, 0.87890594, 0.51498869, 0.15084934, 0.2658733e-1, 0.301532e-2,
                  0.32411e-3]
_I1_COEF_LARGE = [0.39894228, -0.3988024e-1, -0.362018e-2, 0.163801e-2, -0.1031555e-1,
                  0.2282967e-1, -0.2895312e-1, 0.1787654e-1, -0.420059e-2]
_COEF_SMALL = [_I0_COEF_SMALL, _I1_COEF_SMALL]
_COEF_LARGE = [_I0_COEF_LARGE, _I1_COEF_LARGE]
_MAX_ROUNDS = 1000


def _eval_poly(y, coef):
    # Horner's rule
    result = coef[-1]
    for c in reversed(coef[:-1]):
        result = c + y * result
    return result


def _log_modified_bessel_fn(x, order=0):
    """log I_order(x) for order 0 or 1, x > 0."""
    if order not in (0, 1):
        raise AssertionError(f"order must be 0 or 1, got {order}")
    y = (x / 3.75) ** 2
    small = _eval_poly(y, _COEF_SMALL[order])
    if order == 1:
        small = x.abs() * small
    small = small.log()
    large = x - 0.5 * x.log() + _eval_poly(3.75 / x, _COEF_LARGE[order]).log()
    return _C.where(x < 3.75, small, large)


def _rejection_sample(loc, concentration, proposal_r, x):
    done = _C.zeros(tuple(x.shape), dtype=_C.bool)
    for _ in range(_MAX_ROUNDS):
        if bool(done.all()):
            return (x + math.pi + loc) % (2 * math.pi) - math.pi
        u = _C.rand((3,) + tuple(x.shape), dtype=loc.dtype)
        u1, u2, u3 = u.unbind()
        z = (math.pi * u1).cos()
        f = (1 + proposal_r * z) / (proposal_r + z)
        c = concentration * (proposal_r - f)
        accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
        # as torch: an entry accepted again in a later round takes the newer value (each
        # accepted value is an exact draw, so this keeps the law and torch's numbers)
        if bool(accept.any()):
            x = _C.where(accept, (u3 - 0.5).sign() * f.acos(), x)
            done = done | accept
    raise RuntimeError(f"VonMises sampling: draws still rejected after {_MAX_ROUNDS} rounds")


class VonMises(Distribution):
    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, Size(), validate_args)

    def log_prob(self, value):
        self._check_value(value)
        return self.concentration * (value - self.loc).cos() - math.log(2 * math.pi) - \
            _log_modified_bessel_fn(self.concentration, order=0)

    @lazy_property
    def _loc(self):
        return self.loc.to(_C.float64)

    @lazy_property
    def _concentration(self):
        return self.concentration.to(_C.float64)

    @lazy_property
    def _proposal_r(self):
        kappa = self._concentration
        tau = 1 + (1 + 4 * kappa ** 2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        proposal_r = (1 + rho ** 2) / (2 * rho)
        return _C.where(kappa < 1e-5, 1 / kappa + kappa, proposal_r)   # Taylor for tiny kappa

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            x = _C.empty(shape, dtype=self._loc.dtype)
            return _rejection_sample(self._loc, self._concentration, self._proposal_r,
                                     x).to(self.loc.dtype)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(VonMises, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        # circular variance 1 - I1(kappa) / I0(kappa)
        return 1 - (_log_modified_bessel_fn(self.concentration, order=1) -
                    _log_modified_bessel_fn(self.concentration, order=0)).exp()
