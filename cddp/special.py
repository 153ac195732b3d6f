"""cddp.special — torch.special: the special functions under their SciPy-style names, each
an alias of (or a one-line composition of) cddp's C kernels, differentiable as they are."""
import math
from fractions import Fraction

from . import _C
from ._pointwise import logit, sinc, xlogy  # noqa: F401 (torch.special's names)

__all__ = ["expit", "logit", "erf", "erfc", "erfinv", "erfcx", "exp2", "expm1", "log1p",
           "gammaln", "digamma", "psi", "xlogy", "xlog1py", "entr", "ndtr", "ndtri",
           "log_ndtr", "sinc", "round", "log_softmax", "softmax", "logsumexp", "i0", "i0e",
           "i1", "i1e", "zeta", "polygamma", "multigammaln", "gammainc", "gammaincc"]


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


# ---- Bessel I0 / I1 scaled, Hurwitz zeta, polygamma, multivariate lgamma, incomplete gamma ----
# Composed of cddp's ops in float64 (differentiable as they are), results cast back to the
# input's floating dtype (the default dtype for integers), as i0 above.

def _f64(x):
    return x.to(_C.float64) if isinstance(x, _C.Tensor) else _C.tensor(float(x),
                                                                       dtype=_C.float64)


def _back(r, like):
    return r.to(like.dtype) if like.is_floating_point() else r.to(_C.get_default_dtype())


_BESSEL_SPLIT = 30.0     # |x| <= this: power series; above: the asymptotic expansion


def _bessel_scaled(x, order):
    """I_order(x) exp(-|x|) for order 0 or 1, float64. Series sum_k (x/2)^(2k+order) /
    (k! (k+order)!) up to |x| = 30 (~75 terms reach float64 precision), Hankel's asymptotic
    expansion exp(x) / sqrt(2 pi x) sum_k (-1)^k prod_{j<=k} (4 order^2 - (2j-1)^2) /
    (k! (8x)^k) beyond (25 terms: the smallest is below 1e-17 there). Each branch runs on
    clamped inputs so the one torch.where drops stays finite (its gradient is zeroed, not
    NaN)."""
    ax = x.abs()
    xs = x.clamp(-_BESSEL_SPLIT, _BESSEL_SPLIT)
    h2 = (xs / 2) ** 2
    term = (xs / 2) if order else _C.ones_like(xs)
    total = term
    for k in range(1, 76):
        term = term * h2 / (k * (k + order))
        total = total + term
    series = total * (-xs.abs()).exp()
    xl = ax.clamp(min=_BESSEL_SPLIT)
    mu = 4.0 * order * order
    coef, acc = _C.ones_like(xl), _C.ones_like(xl)
    for k in range(1, 26):
        coef = coef * (-(mu - (2 * k - 1) ** 2) / (k * 8.0)) / xl
        acc = acc + coef
    asym = acc / (2 * math.pi * xl).sqrt()
    if order:                                  # I1 is odd
        asym = asym * x.sign()
    return _C.where(ax <= _BESSEL_SPLIT, series, asym)


def i0e(input):  # noqa: A002
    """exp(-|x|) I0(x), the exponentially scaled modified Bessel function of order 0."""
    return _back(_bessel_scaled(_f64(input), 0), input)


def i1(input):  # noqa: A002
    """The modified Bessel function of the first kind, order 1."""
    x = _f64(input)
    return _back(_bessel_scaled(x, 1) * x.abs().exp(), input)


def i1e(input):  # noqa: A002
    """exp(-|x|) I1(x)."""
    return _back(_bessel_scaled(_f64(input), 1), input)


# B_2j / (2j)! for j = 1..12 (Euler-Maclaurin's tail, as Cephes' zeta)
_EM = [float(Fraction(b) / math.factorial(2 * j)) for j, b in enumerate(
    ["1/6", "-1/30", "1/42", "-1/30", "5/66", "-691/2730", "7/6", "-3617/510", "43867/798",
     "-174611/330", "854513/138", "-236364091/2730"], start=1)]


def _hurwitz(s, q):
    """zeta(s, q) = sum_k (q + k)^-s for float64 tensors (broadcast): the first N terms with
    q + N > 9 directly, then Euler-Maclaurin's integral, half term and 12 Bernoulli terms
    (Cephes' zeta). torch's domain: s == 1 -> inf, s < 1 -> nan; q a non-positive integer ->
    inf; q < 0 with a non-integer s -> nan."""
    from ._shape_ops import broadcast_tensors
    s, q = broadcast_tensors(s, q)
    qmin = float(q.min()) if q.numel() else 0.0
    N = max(9, int(math.ceil(9.0 - qmin)) + 1) if math.isfinite(qmin) else 9
    total = _C.zeros_like(q)
    for k in range(N):
        total = total + (q + k) ** (-s)
    w = q + N
    tail = w ** (1 - s) / (s - 1) + 0.5 * w ** (-s)
    rising, wp = _C.ones_like(s), w ** (-s - 1)
    for j, c in enumerate(_EM):
        rising = rising * (s + 2 * j) if j == 0 else rising * (s + 2 * j - 1) * (s + 2 * j)
        tail = tail + c * rising * wp
        wp = wp / (w * w)
    out = total + tail
    nan, inf = _C.full_like(out, math.nan), _C.full_like(out, math.inf)
    out = _C.where((q <= 0) & (q == q.floor()), inf, out)
    out = _C.where((q < 0) & (s != s.floor()), nan, out)
    out = _C.where(s < 1, nan, out)
    return _C.where(s == 1, inf, out)


def zeta(input, other):  # noqa: A002
    """The Hurwitz zeta function zeta(x, q) (torch.special.zeta); either may be a number."""
    like = input if isinstance(input, _C.Tensor) else other
    return _back(_hurwitz(_f64(input), _f64(other)), like)


def polygamma(n, input):  # noqa: A002
    """The n-th derivative of digamma: (-1)^(n+1) n! zeta(n + 1, x) for n >= 1."""
    n = int(n)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if n == 0:
        return input.digamma()
    x = _f64(input)
    # n! as a float: past 170 it is inf in float64 anyway (math.factorial of a huge n would
    # run unbounded), and the result is then +-inf or NaN, as torch's
    fact = float(math.factorial(n)) if n <= 170 else math.inf
    r = (-1.0 if n % 2 == 0 else 1.0) * fact * _hurwitz(_C.full_like(x, n + 1.0), x)
    return _back(r, input)


def multigammaln(input, p):  # noqa: A002
    """log of the multivariate gamma function of dimension p:
    p (p - 1) / 4 log(pi) + sum_{j < p} lgamma(x - j / 2); every x must exceed (p - 1) / 2."""
    p = int(p)
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    if bool((input <= (p - 1) / 2).any()):
        raise RuntimeError(f"All elements must be greater than (p-1)/2")
    out = p * (p - 1) / 4 * math.log(math.pi)
    for j in range(p):
        out = out + (input - j / 2).lgamma()
    return out


def gammainc(input, other):  # noqa: A002
    """The regularized lower incomplete gamma function P(a, x) (distributions/gamma.py's
    series and continued fraction, float64; differentiable in both)."""
    from .distributions.gamma import _gammainc
    return _gammainc(input, other)


def gammaincc(input, other):  # noqa: A002
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x), from the
    continued fraction where that converges (a tiny Q keeps its digits)."""
    from .distributions.gamma import _gammainc
    return _gammainc(input, other, upper_tail=True)
