"""torch._foreach_*: an op applied to each tensor of a list (EMA updates, hand-written
optimizers and gradient utilities call them: torch._foreach_lerp_(ema, params, 1 - decay)).
Each call runs the C op once per tensor; the loop is over tensors, never over elements.

Overloads, as torch's: the second operand of a binary op is a Python scalar (the same for
every tensor), a list of scalars or of tensors (one per tensor; add/sub take alpha with the
latter), or one tensor (broadcast to each). In-place forms (name_) return None; out-of-place
ones a tuple, as torch's. Lists must be non-empty and of equal lengths (RuntimeError otherwise).
"""
import numbers

from . import _C

Tensor = _C.Tensor

_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
          "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
          "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "clamp_max": "clamp_max",
           "clamp_min": "clamp_min", "maximum": "maximum", "minimum": "minimum", "pow": "pow"}


def _check(self, *others):
    if not isinstance(self, (list, tuple)):
        raise TypeError(f"foreach ops take a list of tensors, got {type(self).__name__}")
    if not self:
        raise RuntimeError("Tensor list must have at least one tensor.")
    for o in others:
        if isinstance(o, (list, tuple)) and len(o) != len(self):
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got "
                               f"{len(self)} and {len(o)}")


def _per_tensor(other, n):
    """The second operand for each of n tensors: a list's items, else other itself n times."""
    if isinstance(other, (list, tuple)):
        return list(other)
    return [other] * n


def _operand(t, other, method):
    """maximum / minimum take tensors only: a scalar becomes one in t's dtype."""
    if method in ("maximum", "minimum") and not isinstance(other, Tensor):
        return _C.tensor(other, dtype=t.dtype)
    return other


def _binary(name, method):
    def out_of_place(self, other, *, alpha=None):
        _check(self, other)
        vals = _per_tensor(other, len(self))
        if alpha is not None:
            return tuple(getattr(t, method)(o, alpha=alpha) for t, o in zip(self, vals))
        return tuple(getattr(t, method)(_operand(t, o, method)) for t, o in zip(self, vals))

    def in_place(self, other, *, alpha=None):
        _check(self, other)
        vals = _per_tensor(other, len(self))
        for t, o in zip(self, vals):
            if alpha is not None:
                getattr(t, method + "_")(o, alpha=alpha)
            elif hasattr(t, method + "_"):
                getattr(t, method + "_")(_operand(t, o, method))
            else:                       # maximum / minimum: no in-place method to call
                t.copy_(getattr(t, method)(_operand(t, o, method)))
    out_of_place.__name__, in_place.__name__ = f"_foreach_{name}", f"_foreach_{name}_"
    return out_of_place, in_place


def _unary(name):
    def out_of_place(self):
        _check(self)
        return tuple(getattr(t, name)() for t in self)

    def in_place(self):
        _check(self)
        for t in self:
            getattr(t, name + "_")()
    out_of_place.__name__, in_place.__name__ = f"_foreach_{name}", f"_foreach_{name}_"
    return out_of_place, in_place


def _foreach_lerp(self, tensors1, weight):
    _check(self, tensors1, weight)
    return tuple(s.lerp(e, w) for s, e, w in zip(self, tensors1, _per_tensor(weight, len(self))))


def _foreach_lerp_(self, tensors1, weight):
    _check(self, tensors1, weight)
    for s, e, w in zip(self, tensors1, _per_tensor(weight, len(self))):
        s.lerp_(e, w)


def _values(value, n):
    """addcmul/addcdiv's value: a scalar, a list of scalars, or a 1-D tensor of n scalars."""
    if isinstance(value, Tensor):
        if value.dim() != 1 or value.numel() != n:
            raise RuntimeError(f"Expected scalars to be a 1-D tensor of {n} values, got shape "
                               f"{list(value.shape)}")
        return value.tolist()
    return _per_tensor(value, n)


def _addc(method):
    def out_of_place(self, tensor1, tensor2, value=1):
        _check(self, tensor1, tensor2, value)
        return tuple(getattr(s, method)(a, b, value=v) for s, a, b, v in
                     zip(self, tensor1, tensor2, _values(value, len(self))))

    def in_place(self, tensor1, tensor2, value=1):
        _check(self, tensor1, tensor2, value)
        for s, a, b, v in zip(self, tensor1, tensor2, _values(value, len(self))):
            getattr(s, method + "_")(a, b, value=v)
    out_of_place.__name__, in_place.__name__ = f"_foreach_{method}", f"_foreach_{method}_"
    return out_of_place, in_place


def _foreach_norm(self, ord=2, dtype=None):  # noqa: A002
    _check(self)
    from . import linalg
    return tuple(linalg.vector_norm(t, ord, dtype=dtype) for t in self)


def _foreach_max(self):
    _check(self)
    return tuple(t.max() for t in self)


def _foreach_copy_(self, src, non_blocking=False):
    _check(self, src)
    for d, s in zip(self, src):
        d.copy_(s)


def _foreach_zero_(self):
    _check(self)
    for t in self:
        t.zero_()


def _foreach_clone(self):
    _check(self)
    return tuple(t.clone() for t in self)


FUNCTIONS = {"_foreach_lerp": _foreach_lerp, "_foreach_lerp_": _foreach_lerp_,
             "_foreach_norm": _foreach_norm, "_foreach_max": _foreach_max,
             "_foreach_copy_": _foreach_copy_, "_foreach_zero_": _foreach_zero_,
             "_foreach_clone": _foreach_clone}
for _n in _UNARY:
    FUNCTIONS[f"_foreach_{_n}"], FUNCTIONS[f"_foreach_{_n}_"] = _unary(_n)
for _n, _m in _BINARY.items():
    FUNCTIONS[f"_foreach_{_n}"], FUNCTIONS[f"_foreach_{_n}_"] = _binary(_n, _m)
for _m in ("addcmul", "addcdiv"):
    FUNCTIONS[f"_foreach_{_m}"], FUNCTIONS[f"_foreach_{_m}_"] = _addc(_m)
del _n, _m


_pow_list = FUNCTIONS["_foreach_pow"]


def _foreach_pow(self, exponent):
    """Also _foreach_pow(scalar, tensors): the scalar raised to each tensor."""
    if isinstance(self, numbers.Number):
        _check(exponent)
        return tuple(_C.pow(self, t) for t in exponent)
    return _pow_list(self, exponent)


FUNCTIONS["_foreach_pow"] = _foreach_pow
__all__ = sorted(FUNCTIONS)
