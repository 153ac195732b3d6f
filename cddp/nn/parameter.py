"""cddp.nn.Parameter — a Tensor subclass that Modules register as a parameter (torch's)."""
from .._C import Tensor


class Parameter(Tensor):
    """Parameter(data=None, requires_grad=True): shares `data`'s storage, is a leaf."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from .. import empty
            data = empty(0)
        elif getattr(data, "_is_complex_tensor", False):   # a complex parameter (cddp/_complex.py)
            from .._complex import ComplexParameter
            return ComplexParameter(Tensor._make_subclass(Parameter, data._r, requires_grad))
        elif getattr(data, "_is_dtensor", False):        # torch's Parameter(DTensor): a DTensor
            return data._as_parameter(requires_grad)     # parameter (distributed/tensor/_api.py)
        return Tensor._make_subclass(cls, data, requires_grad)

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        body = Tensor.__repr__(self.detach())
        if self.requires_grad:      # as torch prints it: the flag inside the tensor's parens
            body = body[:-1] + ", requires_grad=True)"
        return "Parameter containing:\n" + body

    def __deepcopy__(self, memo):
        """torch's: the same class, values cloned; .grad and attributes are not copied (an EMA
        or teacher copy of a model holds no gradients)."""
        if id(self) in memo:
            return memo[id(self)]
        new = type(self)(self.detach().clone(), self.requires_grad)
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, proto):
        from .._tensor_py import _to_array
        from .._C import bfloat16
        state = getattr(self, "__dict__", None) or None
        if self.is_meta:          # no values: shape and dtype are all there is to keep
            from .._tensor_py import _rebuild_meta
            args = (_rebuild_meta, (tuple(self.shape), self.dtype, self.requires_grad,
                                    Parameter))
        else:
            args = (_rebuild_parameter, (_to_array(self), self.requires_grad,
                                         self.dtype == bfloat16))
        return args + (state,) if state else args


def _rebuild_parameter(array, requires_grad, bf16=False):
    from .._tensor_py import _from_array
    return Parameter(_from_array(array, bf16), requires_grad)


class Buffer(Tensor):
    """torch.nn.Buffer(data, persistent=True): a tensor sharing data's storage (usable as one)
    that Module.__setattr__ registers as a buffer with that persistence."""

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            from .. import empty
            data = empty(0)
        if getattr(data, "_is_complex_tensor", False):     # no Tensor subclass of a complex
            return _ComplexBuffer(data, persistent)
        t = Tensor._make_subclass(cls, data.detach(), data.requires_grad)
        t.persistent = persistent
        return t

    def __init__(self, data=None, *, persistent=True):
        pass

    def __repr__(self):          # torch prints a Buffer as the tensor it is
        body = Tensor.__repr__(self.detach())
        return body[:-1] + ", requires_grad=True)" if self.requires_grad else body


class _ComplexBuffer:
    """Buffer(complex tensor): the marker Module.__setattr__ unwraps."""

    def __init__(self, data, persistent):
        self.data = data
        self.persistent = persistent


class UninitializedParameter(Parameter):
    """torch.nn.UninitializedParameter: a lazy module's parameter before its shape is known.
    materialize(shape) gives it storage of that shape (uninitialized values, as torch.empty)
    and turns it into a plain Parameter in place, so references to it stay valid."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        from .. import empty, get_default_dtype
        return Tensor._make_subclass(cls, empty(0, dtype=dtype or get_default_dtype()),
                                     requires_grad)

    def __init__(self, requires_grad=True, device=None, dtype=None):
        pass

    def materialize(self, shape, device=None, dtype=None):
        from .. import empty
        self.data = empty(tuple(shape), dtype=dtype if dtype is not None else self.dtype)
        self.__class__ = self.cls_to_become

    def __repr__(self):
        return "<UninitializedParameter>"

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, None, self.dtype)
        return memo[id(self)]

    def __reduce_ex__(self, proto):
        return (UninitializedParameter, (self.requires_grad, None, self.dtype))


def is_lazy(param):
    """True for a parameter a lazy module has not materialized yet."""
    return isinstance(param, UninitializedParameter)


def __getattr__(name):
    # torch.nn.parameter.UninitializedBuffer lives with the lazy modules (they import this file)
    if name == "UninitializedBuffer":
        from .modules.lazy import UninitializedBuffer
        return UninitializedBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
