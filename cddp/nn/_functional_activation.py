"""More of torch.nn.functional's activations: glu, logsigmoid, softmin, softshrink, hardshrink,
threshold(_), rrelu(_), gumbel_softmax — composed from cddp's differentiable tensor ops (each a
C kernel), re-exported by functional.py.

RNG: rrelu (training) and gumbel_softmax draw as torch's CPU kernels do, so a seeded run gives
torch's values: rrelu one float64 uniform(lower, upper) per element <= 0 in row-major order
(torch's serial loop draws uniform_real_distribution<double> only for those), gumbel_softmax
torch's empty_like(logits).exponential_() over the whole tensor.
"""
import warnings

from .. import _C

Tensor = _C.Tensor


def glu(input, dim=-1):  # noqa: A002
    """a * sigmoid(b), where a and b are the two halves of input along dim."""
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension "
                           f"{dim % input.dim()} is size {n}")
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def logsigmoid(input):  # noqa: A002
    """log(sigmoid(x)) = -softplus(-x): softplus's C kernel is the stable form (and its
    gradient, sigmoid(-x), is exact at every x; a min(x, 0) - log1p(exp(-|x|)) composite would
    get the wrong subgradient at 0)."""
    return _C._softplus(-input, 1.0, 20.0, False).neg()


def softmin(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    """softmax(-input, dim), in dtype when given (torch negates first, then casts)."""
    if dim is None:
        warnings.warn("Implicit dimension choice for softmin has been deprecated. Change the "
                      "call to include dim=X as an argument.", UserWarning, stacklevel=_stacklevel)
        dim = 0 if input.dim() in (0, 1, 3) else 1
    neg = -input
    return neg.softmax(dim) if dtype is None else neg.to(dtype).softmax(dim)


def softshrink(input, lambd=0.5):  # noqa: A002
    """x - lambd above lambd, x + lambd below -lambd, 0 between: x - clamp(x, -lambd, lambd),
    whose gradient is 0 on the closed band as torch's softshrink_backward."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return input - input.clamp(-lambd, lambd)


def hardshrink(input, lambd=0.5):  # noqa: A002
    """x outside the closed band [-lambd, lambd], 0 inside (NaN stays NaN, as torch's)."""
    inside = (input >= -lambd).logical_and(input <= lambd)
    return _C.where(inside, 0.0, input)


def threshold(input, threshold, value, inplace=False):  # noqa: A002
    """x where x > threshold, else value (torch tests x <= threshold, so NaN passes through)."""
    below = input <= threshold
    if inplace:
        return input.masked_fill_(below, value)
    return _C.where(below, value, input)


def threshold_(input, threshold, value):  # noqa: A002
    return input.masked_fill_(input <= threshold, value)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):  # noqa: A002
    """Randomized leaky ReLU. Training: each element <= 0 is scaled by its own draw from
    uniform(lower, upper) (the noise the gradient uses too); eval: leaky_relu with slope
    (lower + upper) / 2."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    if not training:
        return _C._leaky_relu(input, (lower + upper) / 2, inplace)
    neg = input <= 0
    # torch's loop draws uniform_real_distribution<double>(lower, upper) for each element
    # <= 0, in order, and casts to the input's dtype: one float64 uniform_ over as many
    # elements, written into the noise's negative positions in row-major order, is that stream
    draws = _C.empty(int(neg.sum().item()), dtype=_C.float64).uniform_(lower, upper)
    noise = _C.ones(tuple(input.shape), dtype=input.dtype)
    noise[neg] = draws.to(input.dtype)
    return input.mul_(noise) if inplace else input * noise


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):  # noqa: A002
    return rrelu(input, lower, upper, training, True)


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) with g ~ Gumbel(0, 1) = -log(Exp(1)); hard=True returns the
    one-hot of the argmax with the soft sample's gradient (straight-through)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    gumbels = -_C.empty(tuple(logits.shape), dtype=logits.dtype).exponential_().log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = _C.zeros(tuple(logits.shape), dtype=logits.dtype).scatter_(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft
