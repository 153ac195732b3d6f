"""torch's pointwise functions that are compositions of cddp's C kernels: lerp, addcmul,
addcdiv, atan2 / arctan2, hypot, logaddexp / logaddexp2, xlogy, copysign, fmax / fmin,
float_power, logit, nan_to_num, sinc, heaviside, rsub, positive — the functions, their Tensor
methods and in-place forms. Each is a handful of C calls (no per-element Python), and autograd
comes from the composed ops' nodes; where a composition would put 0 * inf in a gradient (atan2
at the origin, xlogy at x = 0, sinc at 0) the inputs are first replaced by safe values under a
`where`, so the gradients are torch's.

In-place forms compute the result and copy it back (one extra pass); lerp_ / addcmul_ /
addcdiv_, the ones optimizers and EMA updates call per step, work in place on the tensor
(float16 / bfloat16: computed in float32 and copied back, rounding once as torch does)."""
import math
import warnings

from . import _C
from ._ops import _torch_name, signbit

Tensor = _C.Tensor


def _t(x, like):
    """x as a tensor (Python numbers become 0-dim tensors of like's dtype when it is floating,
    as torch's wrapped numbers)."""
    if isinstance(x, Tensor):
        return x
    dt = like.dtype if like.is_floating_point() else None
    return _C.tensor(x, dtype=dt) if dt is not None else _C.tensor(x)


def _floatify(x):
    return x if x.is_floating_point() else x.to(_C.get_default_dtype())


def _float_pair(a, b):
    """a and b (tensors, or one a number) in their promoted dtype, or the default float dtype
    when that is integral: torch's result dtype for a floating binary op (int with bfloat16
    is bfloat16, not float32)."""
    dt = _C.result_type(a, b)
    if not dt.is_floating_point:
        dt = _C.get_default_dtype()
    return tuple(v.to(dt) if isinstance(v, Tensor) else v for v in (a, b))


_NARROW = (_C.float16, _C.bfloat16)


def _wide(*xs):
    """float16 / bfloat16 tensors as float32, the others as they are: torch computes these
    ops in float32 for the 2-byte dtypes and rounds once (its opmath type), where a
    composition in the narrow dtype would round every intermediate."""
    return [x.float() if isinstance(x, Tensor) and x.dtype in _NARROW else x for x in xs]


def _narrow_result(input, *others):  # noqa: A002
    """The dtype to round to when input or others is float16/bfloat16, else None."""
    dt = _C.result_type(input, *others[:1]) if others else input.dtype
    for o in others[1:]:
        dt = _C.promote_types(dt, o.dtype) if isinstance(o, Tensor) else dt
    return dt if dt in _NARROW else None


def _lerp(input, end, weight):  # noqa: A002
    diff = end - input
    if isinstance(weight, Tensor):
        return _C.where(weight.abs() < 0.5, input + weight * diff, end - diff * (1 - weight))
    if abs(weight) < 0.5:
        return input + diff * weight
    return end - diff * (1 - weight)


def lerp(input, end, weight):  # noqa: A002
    """input + weight * (end - input), from the nearer end as torch's kernel (|w| >= 0.5 uses
    end - (end - input) * (1 - w)), so a weight of 1 gives end exactly; float16 / bfloat16
    through float32 with one rounding (_wide)."""
    narrow = _narrow_result(input, end, weight)
    if narrow is None:
        return _lerp(input, end, weight)
    return _lerp(*_wide(input, end, weight)).to(narrow)


def _lerp_(self, end, weight):
    if isinstance(weight, Tensor) or self.dtype in _NARROW:
        return self.copy_(lerp(self, end, weight))
    diff = end - self
    if abs(weight) < 0.5:
        return self.add_(diff, alpha=weight)
    return self.copy_(end).sub_(diff, alpha=1 - weight)


def _value_first(name, tensor1, tensor2, rest):
    """torch's deprecated (Number value, tensor1, tensor2) order, which old optimizer code
    still uses (exp_avg_sq.addcmul_(1 - beta2, grad, grad)): (tensor1, tensor2, value), with
    torch's warning."""
    if len(rest) != 1 or (isinstance(tensor1, Tensor) and tensor1.dim()):
        raise TypeError(f"{name}() takes 3 positional arguments but {3 + len(rest)} were given")
    warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number value, Tensor "
                  f"tensor1, Tensor tensor2)\nConsider using one of the following signatures "
                  f"instead:\n\t{name}(Tensor tensor1, Tensor tensor2, *, Number value = 1)",
                  UserWarning, stacklevel=3)
    return tensor2, rest[0], tensor1


def addcmul(input, tensor1, tensor2, *rest, value=1):  # noqa: A002
    """input + value * tensor1 * tensor2 (float16 / bfloat16 through float32, _wide)."""
    if rest:
        tensor1, tensor2, value = _value_first("addcmul", tensor1, tensor2, rest)
    narrow = _narrow_result(input, tensor1, tensor2)
    if narrow is not None:
        return addcmul(*_wide(input, tensor1, tensor2), value=value).to(narrow)
    return input.add(tensor1 * tensor2, alpha=value) if value != 1 else input + tensor1 * tensor2


def _addcmul_(self, tensor1, tensor2, *rest, value=1):
    if rest:
        tensor1, tensor2, value = _value_first("addcmul_", tensor1, tensor2, rest)
    if self.dtype in _NARROW:
        return self.copy_(addcmul(self, tensor1, tensor2, value=value))
    return self.add_(tensor1 * tensor2, alpha=value)


def _check_addcdiv(tensor1, tensor2):
    if not tensor1.is_floating_point() and not tensor2.is_floating_point():
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a "
                           "future release addcdiv will perform a true division of tensor1 and "
                           "tensor2. The historic addcdiv behavior can be implemented as "
                           "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) "
                           "for integer inputs and as (input + value * tensor1 / tensor2) for "
                           "float inputs. The future addcdiv behavior is just the latter "
                           "implementation: (input + value * tensor1 / tensor2), for all dtypes.")


def addcdiv(input, tensor1, tensor2, *rest, value=1):  # noqa: A002
    """input + value * tensor1 / tensor2 (integer tensor1 and tensor2 refused, as torch)."""
    if rest:
        tensor1, tensor2, value = _value_first("addcdiv", tensor1, tensor2, rest)
    _check_addcdiv(tensor1, tensor2)
    narrow = _narrow_result(input, tensor1, tensor2)
    if narrow is not None:
        return addcdiv(*_wide(input, tensor1, tensor2), value=value).to(narrow)
    return input.add(tensor1 / tensor2, alpha=value) if value != 1 else input + tensor1 / tensor2


def _addcdiv_(self, tensor1, tensor2, *rest, value=1):
    if rest:
        tensor1, tensor2, value = _value_first("addcdiv_", tensor1, tensor2, rest)
    _check_addcdiv(tensor1, tensor2)
    if self.dtype in _NARROW:
        return self.copy_(addcdiv(self, tensor1, tensor2, value=value))
    return self.add_(tensor1 / tensor2, alpha=value)


def atan2(input, other):  # noqa: A002
    """The angle of the point (other, input) in [-pi, pi], IEEE's signed zeros included.
    atan is taken of the smaller magnitude over the larger, so no quotient divides by zero and
    the gradient, (other, -input) / (input^2 + other^2), is finite away from the origin (0
    there, where torch's is NaN)."""
    for name, v in (("input", input), ("other", other)):
        if not isinstance(v, Tensor):
            raise TypeError(f"atan2(): argument '{name}' must be Tensor, not {type(v).__name__}")
    y, x = _float_pair(input, other)
    swap = y.abs() > x.abs()
    num, den = _C.where(swap, x, y), _C.where(swap, y, x)
    origin = (den == 0) & (num == 0)                    # NaN in either operand stays NaN
    both_inf = _C.isinf(x) & _C.isinf(y)                # inf/inf: the diagonals, pi/4 or 3pi/4
    safe = origin | both_inf
    a = _C.atan(_C.where(safe, _C.zeros_like(num), num) / _C.where(safe, _C.ones_like(den), den))
    pi = _C.where(signbit(y), _C.full_like(y, -math.pi), _C.full_like(y, math.pi))  # y's sign
    res = _C.where(swap, pi * 0.5 - a, a + _C.where(x < 0, pi, pi * 0))
    res = _C.where(both_inf, _C.where(x < 0, pi * 0.75, pi * 0.25), res)
    return _C.where(origin, _C.where(signbit(x), pi, pi * 0), res)


arctan2 = atan2


def hypot(input, other):  # noqa: A002
    """sqrt(input^2 + other^2), scaled by the larger magnitude so large inputs don't overflow;
    computed in the promoted floating dtype (bool with float32 is float32)."""
    input, other = _float_pair(input, other)  # noqa: A001
    a, b = input.abs(), other.abs()
    m = _C.maximum(a, b)
    ms = _C.where(m == 0, _C.ones_like(m), m)
    r = ms * ((a / ms) ** 2 + (b / ms) ** 2).sqrt()
    inf = _C.isinf(a) | _C.isinf(b)                     # IEEE: hypot(inf, NaN) = inf
    return _C.where(inf, _C.full_like(r, math.inf), _C.where(m == 0, m * 0, r))


def logaddexp(input, other):  # noqa: A002
    """log(exp(input) + exp(other)) without overflow: max + log1p(exp(-|input - other|))."""
    input, other = _float_pair(input, other)  # noqa: A001
    m = _C.maximum(input, other)
    d = (input - other).abs()
    same_inf = _C.isinf(m) & (input == other)          # -inf + -inf, inf + inf: m itself
    d = _C.where(same_inf, _C.zeros_like(d), d)
    return _C.where(same_inf, m, m + _C.log1p(_C.exp(-d)))


def logaddexp2(input, other):  # noqa: A002
    """log2(2^input + 2^other) without overflow."""
    input, other = _float_pair(input, other)  # noqa: A001
    m = _C.maximum(input, other)
    d = (input - other).abs()
    same_inf = _C.isinf(m) & (input == other)
    d = _C.where(same_inf, _C.zeros_like(d), d)
    return _C.where(same_inf, m, m + _C.log1p(_C.exp2(-d)) / math.log(2))


def xlogy(input, other):  # noqa: A002
    """input * log(other), 0 where input is 0 (unless other is NaN); either may be a number.
    The gradient with respect to input at input = 0 is log(other) (0 where other <= 0)."""
    if not isinstance(input, Tensor):
        input = _t(input, other)  # noqa: A001
    if not isinstance(other, Tensor):
        other = _t(other, input)
    x, y = _float_pair(input, other)
    # x = 0 makes the value 0 whatever y is (but NaN): y is replaced by 1 where log(y) would be
    # -inf, NaN or inf, so x * log(y) is 0 there and d/dx is log(y) where y > 0 (torch's
    # derivative) and 0 elsewhere; d/dy is x / y = 0 at x = 0
    bad = (x == 0) & ((y <= 0) | _C.isinf(y))
    r = x * _C.log(_C.where(bad, _C.ones_like(y), y))
    # torch returns +0 at x = 0 where x * log(y) can be -0: add -r there (r + -r is +0), and
    # -0 elsewhere (an identity, even for a -0 result); detached, so gradients are untouched
    return r + _C.where(x == 0, -r.detach(), _C.full_like(r, -0.0))


def _xlogy_(self, other):
    return _write_back(self, xlogy(self.clone() if self.requires_grad else self, other))


def copysign(input, other):  # noqa: A002
    """|input| with other's sign bit (other may be a number); in the promoted floating dtype
    (int with float16 is float16, as torch's)."""
    x, _ = _float_pair(input, other)
    neg = signbit(other) if isinstance(other, Tensor) else math.copysign(1.0, other) < 0
    if isinstance(neg, bool):
        return -x.abs() if neg else x.abs()
    return _C.where(neg, -x.abs(), x.abs())


def fmax(input, other):  # noqa: A002
    """maximum that ignores a NaN operand (NaN only where both are); a tie takes input's side,
    so the gradient goes to input there, as torch's."""
    return _C.where(_C.isnan(other) | (input >= other), input, other)


def fmin(input, other):  # noqa: A002
    """minimum that ignores a NaN operand (NaN only where both are); a tie takes input's."""
    return _C.where(_C.isnan(other) | (input <= other), input, other)


def float_power(input, exponent):  # noqa: A002
    """pow in float64 whatever the operands' dtypes."""
    base = input.to(_C.float64) if isinstance(input, Tensor) else float(input)
    exp = exponent.to(_C.float64) if isinstance(exponent, Tensor) else float(exponent)
    if not isinstance(base, Tensor):
        return _C.pow(base, exp)
    return base.pow(exp)


def _float_power_(self, exponent):
    if self.dtype != _C.float64:
        raise RuntimeError(f"the base given to float_power_ has dtype {_torch_name(self.dtype)} but "
                           "the operation's result requires dtype Double")
    return self.copy_(float_power(self.clone() if self.requires_grad else self, exponent))


def logit(input, eps=None):  # noqa: A002
    """log(p / (1 - p)), p clamped to [eps, 1 - eps] first when eps is given."""
    x = _floatify(input)
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    else:       # outside [0, 1] the value is NaN and so is the gradient (torch's), not finite
        x = x * _C.where((x < 0) | (x > 1), _C.full_like(x, math.nan), _C.ones_like(x))
    return _C.log(x / (1 - x))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):  # noqa: A002
    """NaN, +inf, -inf replaced by nan, posinf (default: the dtype's largest finite value) and
    neginf (its lowest); integer and bool tensors come back unchanged (a copy)."""
    if not input.is_floating_point():
        return input.clone()
    from ._finfo import finfo
    fi = finfo(input.dtype)
    posinf = fi.max if posinf is None else posinf
    neginf = fi.min if neginf is None else neginf
    x = _C.where(_C.isnan(input), _C.full_like(input, nan), input)
    x = _C.where(x == math.inf, _C.full_like(input, posinf), x)
    return _C.where(x == -math.inf, _C.full_like(input, neginf), x)


def sinc(input):  # noqa: A002
    """sin(pi x) / (pi x), 1 at 0."""
    x = _floatify(input)
    if x.dtype in (_C.float16, _C.bfloat16):     # in float32, rounded once (torch's opmath)
        return sinc(x.float()).to(x.dtype)
    zero = x == 0
    xs = _C.where(zero, _C.ones_like(x), x) * math.pi
    return _C.where(zero, _C.ones_like(x), _C.sin(xs) / xs)


def heaviside(input, values):  # noqa: A002
    """0 where input < 0, values where input == 0, 1 where input > 0 (same dtypes, as torch)."""
    if input.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    return _C.where(input == 0, values, (input > 0).to(input.dtype))


def rsub(input, other, alpha=1):  # noqa: A002
    """other - alpha * input."""
    return (other - input) if alpha == 1 else (other - input * alpha)


def positive(input):  # noqa: A002
    if input.dtype == _C.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def _write_back(self, r):
    """self.copy_(r) for an in-place op whose result is r, refusing (as torch) a result dtype
    that self cannot hold instead of truncating it."""
    if not _C.can_cast(r.dtype, self.dtype):
        raise RuntimeError(f"result type {_torch_name(r.dtype)} can't be cast to the desired "
                           f"output type {_torch_name(self.dtype)}")
    return self.copy_(r)


def _inplace(fn):
    # the composition saves its input for backward; under autograd it reads a copy, so
    # writing the result back does not invalidate what the graph saved
    def method(self, *args, **kwargs):
        src = self.clone() if self.requires_grad else self
        return _write_back(self, fn(src, *args, **kwargs))
    method.__name__ = fn.__name__ + "_"
    return method


_FUNCS = ("lerp", "addcmul", "addcdiv", "atan2", "arctan2", "hypot", "logaddexp", "logaddexp2",
          "xlogy", "copysign", "fmax", "fmin", "float_power", "logit", "nan_to_num", "sinc",
          "heaviside", "positive")
for _n in _FUNCS:
    setattr(Tensor, _n, globals()[_n])
Tensor.lerp_ = _lerp_
Tensor.addcmul_ = _addcmul_
Tensor.addcdiv_ = _addcdiv_
Tensor.xlogy_ = _xlogy_
Tensor.float_power_ = _float_power_
Tensor.__pos__ = positive
for _n in ("atan2", "arctan2", "hypot", "copysign", "logit", "nan_to_num", "sinc", "heaviside"):
    setattr(Tensor, _n + "_", _inplace(globals()[_n]))
del _n
__all__ = list(_FUNCS) + ["rsub"]


# ---- integer and bookkeeping functions ---------------------------------------------------------

def _int_binary(name):
    """The elementwise integer function `name` computed by NumPy's ufunc of that name (C),
    broadcast, no grad."""
    def op(input, other):  # noqa: A002
        import numpy as np
        a = input if isinstance(input, _C.Tensor) else _C.tensor(input)
        b = other if isinstance(other, _C.Tensor) else _C.tensor(other)
        if a.is_floating_point() or b.is_floating_point():
            raise RuntimeError(f'"{name}_cpu" not implemented for '
                               f"'{_torch_name(a.dtype if a.is_floating_point() else b.dtype)}'")
        r = getattr(np, name)(a.detach().numpy(), b.detach().numpy())
        return _C.from_numpy(np.asarray(r, order="C"))
    op.__name__ = name
    return op


def _shift(left):
    """bitwise_left_shift / bitwise_right_shift in torch's result dtype, by NumPy's ufuncs (C):
    a shift by a negative amount or by the type's width or more gives 0 (right shifts of a
    signed type: the sign fill)."""
    kernel = "lshift_cpu" if left else "rshift_cpu"

    def op(input, other):  # noqa: A002
        import numpy as np
        dt = _C.result_type(input, other)
        if dt.is_floating_point:
            raise NotImplementedError(f'"{kernel}" not implemented for \'{_torch_name(dt)}\'')
        a, b = ((v if isinstance(v, Tensor) else _C.tensor(v)).to(dt).detach().numpy()
                for v in (input, other))
        work = np.uint8 if dt == _C.bool else a.dtype
        a, b = a.astype(work), b.astype(work)
        bits = np.dtype(work).itemsize * 8
        s = np.clip(b, 0, bits - 1)
        out_of_range = (b < 0) | (b >= bits)
        if left:
            r = np.where(out_of_range, 0, np.left_shift(a, s))
        else:
            fill = np.right_shift(a, bits - 1) if np.dtype(work).kind == "i" else 0
            r = np.where(out_of_range, fill, np.right_shift(a, s))
        return _C.from_numpy(np.asarray(r.astype(work), order="C")).to(dt)
    op.__name__ = "bitwise_left_shift" if left else "bitwise_right_shift"
    return op


bitwise_left_shift = _shift(True)
bitwise_right_shift = _shift(False)


def angle(input):  # noqa: A002
    """The argument of a real number: pi for negatives, 0 otherwise, NaN for NaN (floating)."""
    x = _floatify(input)
    const = _C.where(x < 0, _C.full_like(x, math.pi), _C.zeros_like(x))
    return _C.where(_C.isnan(x), x, const)


def nextafter(input, other):  # noqa: A002
    """The next representable value after input towards other (NumPy's ufunc; no gradient)."""
    import numpy as np
    a, b = _float_pair(input, other)
    return _C.from_numpy(np.asarray(
        np.nextafter(a.detach().numpy(), b.detach().numpy()), order="C"))


def scalar_tensor(s, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor holding number s, in dtype or the default float dtype (torch's)."""
    return _C.tensor(s, dtype=dtype or _C.get_default_dtype(), requires_grad=requires_grad)


gcd = _int_binary("gcd")
lcm = _int_binary("lcm")


def ldexp(input, other):  # noqa: A002
    """input * 2 ** other (a floating result)."""
    x, e = _float_pair(input, other)
    return x * _C.pow(2.0, e)


def isreal(input):  # noqa: A002
    """True everywhere: cddp has no complex dtypes."""
    return _C.ones_like(input, dtype=_C.bool)


def resolve_conj(input):  # noqa: A002
    return input


def resolve_neg(input):  # noqa: A002
    return input


def renorm(input, p, dim, maxnorm):  # noqa: A002
    """Each slice along dim rescaled so its p-norm is at most maxnorm (torch's 1e-7 guard)."""
    d = dim % input.dim()
    others = tuple(i for i in range(input.dim()) if i != d)
    norms = _C.norm(input, p=p, dim=others, keepdim=True)
    return input * _C.where(norms > maxnorm, maxnorm / (norms + 1e-7), _C.ones_like(norms))


for _n in ("gcd", "lcm", "ldexp", "isreal", "resolve_conj", "resolve_neg", "renorm"):
    setattr(Tensor, _n, globals()[_n])
for _n in ("bitwise_left_shift", "bitwise_right_shift", "angle", "nextafter"):
    setattr(Tensor, _n, globals()[_n])
Tensor.bitwise_left_shift_ = lambda self, other: _write_back(self, bitwise_left_shift(self, other))
Tensor.bitwise_right_shift_ = lambda self, other: _write_back(self, bitwise_right_shift(self, other))
Tensor.ldexp_ = lambda self, other: _write_back(self, ldexp(self, other))
Tensor.__lshift__ = lambda self, other: bitwise_left_shift(self, other)
Tensor.__rshift__ = lambda self, other: bitwise_right_shift(self, other)
Tensor.__rlshift__ = lambda self, other: bitwise_left_shift(other, self)
Tensor.__rrshift__ = lambda self, other: bitwise_right_shift(other, self)
Tensor.__ilshift__ = Tensor.bitwise_left_shift_
Tensor.__irshift__ = Tensor.bitwise_right_shift_
# the other augmented assignments torch defines in place (without them Python rebinds the name
# to a new, promoted tensor and aliases keep the old values)
Tensor.__ifloordiv__ = lambda self, other: self.floor_divide_(other)
Tensor.__imod__ = lambda self, other: self.remainder_(other)
Tensor.__ipow__ = lambda self, other: self.pow_(other)
Tensor.__iand__ = lambda self, other: self.bitwise_and_(other)
Tensor.__ior__ = lambda self, other: self.bitwise_or_(other)
Tensor.__ixor__ = lambda self, other: self.bitwise_xor_(other)
Tensor.gcd_ = lambda self, other: self.copy_(gcd(self, other))
Tensor.lcm_ = lambda self, other: self.copy_(lcm(self, other))
Tensor.renorm_ = lambda self, p, dim, maxnorm: self.copy_(renorm(self, p, dim, maxnorm))
del _n
__all__ += ["gcd", "lcm", "ldexp", "isreal", "resolve_conj", "resolve_neg", "renorm",
            "bitwise_left_shift", "bitwise_right_shift", "angle", "nextafter", "scalar_tensor"]


# torch.polygamma / mvlgamma / igamma / igammac and their Tensor methods: cddp/special.py's
# functions (loaded on first call), under torch's top-level argument orders
def polygamma(n, input):  # noqa: A002
    from .special import polygamma as f
    return f(n, input)


def mvlgamma(input, p):  # noqa: A002
    from .special import multigammaln
    return multigammaln(input, p)


def igamma(input, other):  # noqa: A002
    from .special import gammainc
    return gammainc(input, other)


def igammac(input, other):  # noqa: A002
    from .special import gammaincc
    return gammaincc(input, other)


Tensor.polygamma = lambda self, n: polygamma(n, self)
Tensor.mvlgamma = lambda self, p: mvlgamma(self, p)
Tensor.igamma = lambda self, other: igamma(self, other)
Tensor.igammac = lambda self, other: igammac(self, other)
Tensor.polygamma_ = lambda self, n: self.copy_(polygamma(n, self))
Tensor.mvlgamma_ = lambda self, p: self.copy_(mvlgamma(self, p))
Tensor.igamma_ = lambda self, other: self.copy_(igamma(self, other))
Tensor.igammac_ = lambda self, other: self.copy_(igammac(self, other))
__all__ += ["polygamma", "mvlgamma", "igamma", "igammac"]


_round_half_even = _C.round          # the C kernel (RoundBackward0: zero gradient)
_Tensor_round_ = Tensor.round_


def round(input, *, decimals=0):  # noqa: A001,A002 (torch's name)
    """Round half to even; with decimals, to that many decimal places (negative: tens,
    hundreds, ...), computed as torch's kernel: in float32 for float16 / bfloat16, x * 10^d
    rounded then divided (d > 0), or x / 10^-d rounded then multiplied (d < 0)."""
    if decimals == 0:
        return _round_half_even(input)
    x = input.float() if input.dtype in _NARROW else input
    p = float(10 ** abs(decimals))
    r = _round_half_even(x * p) / p if decimals > 0 else _round_half_even(x / p) * p
    return r.to(input.dtype)


Tensor.round = lambda self, *, decimals=0: round(self, decimals=decimals)
Tensor.round_ = lambda self, *, decimals=0: (_Tensor_round_(self) if decimals == 0 else
                                             self.copy_(round(self, decimals=decimals)))
__all__ += ["round"]
