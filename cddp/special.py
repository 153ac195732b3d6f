"""cddp.special — torch.special: the special functions under their SciPy-style names, each
an alias of (or a one-line composition of) cddp's C kernels, differentiable as they are."""
import math

from . import _C
from ._pointwise import logit, sinc, xlogy  # noqa: F401 (torch.special's names)

__all__ = ["expit", "logit", "erf", "erfc", "erfinv", "erfcx", "exp2", "expm1", "log1p",
           "gammaln", "digamma", "psi", "xlogy", "xlog1py", "entr", "ndtr", "ndtri",
           "log_ndtr", "sinc", "round", "log_softmax", "softmax", "logsumexp", "i0"]


def expit(input):  # noqa: A002
    return input.sigmoid()


def erf(input):  # noqa: A002
    return input.erf()


def erfc(input):  # noqa: A002
    return input.erfc()


def erfinv(input):  # noqa: A002
    return input.erfinv()


def erfcx(input):  # noqa: A002
    """exp(x^2) erfc(x), in float64: directly up to x = 25 (exp(x^2) still finite), by the
    asymptotic series 1/(x sqrt(pi)) (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8))
    beyond (relative error below 1e-12 there)."""
    x = input.to(_C.float64)
    big = x > 25
    near = _C.where(big, _C.zeros_like(x), x)
    direct = (near * near).exp() * near.erfc()
    far = _C.where(big, x, _C.full_like(x, 25.0))
    u = 1 / (2 * far * far)
    series = (1 - u * (1 - 3 * u * (1 - 5 * u * (1 - 7 * u)))) / (far * math.sqrt(math.pi))
    out = _C.where(big, series, direct)
    return out.to(input.dtype) if input.is_floating_point() else out.to(_C.get_default_dtype())


def exp2(input):  # noqa: A002
    return input.exp2()


def expm1(input):  # noqa: A002
    return input.expm1()


def log1p(input):  # noqa: A002
    return input.log1p()


def gammaln(input):  # noqa: A002
    return input.lgamma()


def digamma(input):  # noqa: A002
    return input.digamma()


psi = digamma


def xlog1py(input, other):  # noqa: A002
    """input * log1p(other), 0 where input is 0 (NaN other stays NaN)."""
    if not isinstance(input, _C.Tensor):
        input = _C.tensor(float(input))
    if not isinstance(other, _C.Tensor):
        other = _C.tensor(float(other), dtype=input.dtype)
    out = input * other.log1p()
    return _C.where((input == 0) & (other == other), _C.zeros_like(out), out)


def entr(input):  # noqa: A002
    """-x log x for x > 0, 0 at 0, -inf below."""
    safe = _C.where(input > 0, input, _C.ones_like(input))
    out = -input * safe.log()
    out = _C.where(input == 0, _C.zeros_like(out), out)
    return _C.where(input < 0, _C.full_like(out, -math.inf), out)


def ndtr(input):  # noqa: A002
    """The standard normal CDF."""
    return 0.5 * (1 + (input * (1 / math.sqrt(2))).erf())


def ndtri(input):  # noqa: A002
    """The standard normal quantile function (ndtr's inverse)."""
    return math.sqrt(2) * (2 * input - 1).erfinv()


def log_ndtr(input):  # noqa: A002
    """log of ndtr, kept accurate in the left tail through log(erfc)."""
    return (0.5 * (-input * (1 / math.sqrt(2))).erfc()).log()


def round(input, decimals=0):  # noqa: A001,A002
    return input.round(decimals=decimals) if decimals else input.round()


def log_softmax(input, dim, *, dtype=None):  # noqa: A002
    return (input if dtype is None else input.to(dtype)).log_softmax(dim)


def softmax(input, dim, *, dtype=None):  # noqa: A002
    return (input if dtype is None else input.to(dtype)).softmax(dim)


def logsumexp(input, dim, keepdim=False):  # noqa: A002
    return input.logsumexp(dim, keepdim)


def i0(input):  # noqa: A002
    """The modified Bessel function of the first kind, order 0: its power series
    sum_k ((x/2)^k / k!)^2 in float64. The terms peak near k = |x|/2 and then fall faster
    than geometrically; 30 + 1.5 |x| of them reach float64 precision."""
    x2 = (input.to(_C.float64) / 2) ** 2
    term = _C.ones_like(x2)
    total = _C.ones_like(x2)
    top = float(x2.max().sqrt()) * 2 if x2.numel() else 0.0
    for k in range(1, 30 + int(1.5 * min(top, 800.0))):
        term = term * x2 / (k * k)
        total = total + term
    return total.to(input.dtype) if input.is_floating_point() else total.to(
        _C.get_default_dtype())
