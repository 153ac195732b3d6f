"""torch APIs that a CPU training script calls for their side effects on accelerator or
compiler settings: on cddp they keep torch's signatures and checks, and change nothing about
how cddp computes.

    compile(model, ...)                    the model itself (decorator forms too): cddp has no
                                           graph compiler; its kernels are already C
    set_float32_matmul_precision(p)        "highest" | "high" | "medium", remembered for
    get_float32_matmul_precision()         get_...; float32 GEMMs stay float32 ("highest")
    is_autocast_cpu_enabled()              is_autocast_enabled("cpu")
    set_default_device(d) / get_default_device()   the CPU (CUDA: the device policy); also what
                                           `with cddp.device(d):` calls (_device.py)
    Tensor.pin_memory(device=None)         the tensor itself: there is no device to copy to
    Tensor.is_pinned(device=None)          False
    Tensor.unsqueeze_/squeeze_/t_/transpose_   in place: the view's geometry (no autograd)

and the legacy spellings older scripts still use:

    FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor, ShortTensor,
    CharTensor, ByteTensor, BoolTensor      constructors (sizes -> zeros, data -> a copy in the
                                           class's dtype) and isinstance checks by dtype;
                                           Tensor.type(cls) converts to the class's dtype
    strided, Tensor.layout, Tensor.is_sparse   the one layout cddp has
    spmm(a, b)                              mm: cddp's tensors are dense
"""
from . import _C
from ._size import Size

Tensor = _C.Tensor

_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = "highest"


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor",  # noqa: A001
            mode=None, options=None, disable=False):
    """torch.compile: returns `model` unchanged (or, called without one, a decorator that
    does). The keyword arguments are accepted and checked as torch does, and ignored."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if model is None:
        return lambda fn: fn
    if not callable(model):
        raise RuntimeError(f"torch.compile: expected a callable, got {type(model).__name__}")
    return model


def set_float32_matmul_precision(precision):
    global _matmul_precision
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Invalid precision: {precision!r}; expected one of "
                           f"{', '.join(map(repr, _PRECISIONS))}")
    _matmul_precision = precision


def get_float32_matmul_precision():
    return _matmul_precision


def set_default_device(device):
    """torch.set_default_device: cddp makes every tensor on the CPU; a CUDA device goes
    through the device policy (one warning, or an error under CDDP_STRICT_DEVICE=1)."""
    if device is not None:
        _C.zeros(0).to(device)


def get_default_device():
    from ._device import device
    return device("cpu")


def is_autocast_cpu_enabled():
    return _C.is_autocast_enabled("cpu")


def _pin_memory(self, device=None):
    return self


def _is_pinned(self, device=None):
    return False


def _is_inference(self):
    return False                # (autograd/grad_mode.py: no inference tensors)


# in-place shape ops: the tensor takes the geometry of the out-of-place view (same storage)
def _unsqueeze_(self, dim):
    return _C._adopt_view(self, self.unsqueeze(dim))


def _squeeze_(self, dim=None):
    return _C._adopt_view(self, self.squeeze() if dim is None else self.squeeze(dim))


def _t_(self):
    return _C._adopt_view(self, self.t())


def _transpose_(self, dim0, dim1):
    return _C._adopt_view(self, self.transpose(dim0, dim1))


Tensor.unsqueeze_ = _unsqueeze_
Tensor.squeeze_ = _squeeze_
Tensor.t_ = _t_
Tensor.transpose_ = Tensor.swapdims_ = Tensor.swapaxes_ = _transpose_
Tensor.pin_memory = _pin_memory
Tensor.is_pinned = _is_pinned
Tensor.is_inference = _is_inference


# ---- legacy tensor types --------------------------------------------------------------------

class _LegacyTensorType(type):
    """isinstance(x, cddp.FloatTensor): a cddp tensor of that dtype, as torch answers."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __repr__(cls):
        return f"<class 'cddp.{cls.__name__}'>"


def _legacy_new(cls, args, device):
    t = _legacy_data(cls, args)
    return t if device is None else t.to(device)     # CUDA: the device policy, as .to()


def _legacy_data(cls, args):
    if not args:
        return _C.zeros(0, dtype=cls.dtype)
    if len(args) == 1 and isinstance(args[0], Tensor):
        if args[0].dtype != cls.dtype:
            raise TypeError(f"expected {cls.dtype} (got {args[0].dtype})")
        return args[0]
    sizes = args[0] if len(args) == 1 and isinstance(args[0], Size) else args
    if all(isinstance(a, int) and not isinstance(a, bool) for a in sizes):
        return _C.zeros(*sizes, dtype=cls.dtype)
    if len(args) > 1:
        raise TypeError(f"{cls.__name__}(): expected sizes (ints) or one sequence of data")
    return _C.tensor(args[0], dtype=cls.dtype)


def _legacy_type(name, dtype):
    def __new__(cls, *args, device=None):
        return _legacy_new(cls, args, device)
    return _LegacyTensorType(name, (), {"__new__": __new__, "dtype": dtype,
                                        "__doc__": f"torch.{name}: {dtype} tensors"})


LEGACY_TYPES = {name: _legacy_type(name, getattr(_C, dt)) for name, dt in (
    ("FloatTensor", "float32"), ("DoubleTensor", "float64"), ("HalfTensor", "float16"),
    ("BFloat16Tensor", "bfloat16"), ("LongTensor", "int64"), ("IntTensor", "int32"),
    ("ShortTensor", "int16"), ("CharTensor", "int8"), ("ByteTensor", "uint8"),
    ("BoolTensor", "bool"))}

_c_type = Tensor.type


def _type(self, dtype=None, *args, **kwargs):
    if isinstance(dtype, _LegacyTensorType):
        dtype = f"torch.{dtype.__name__}"
    return _c_type(self) if dtype is None else _c_type(self, dtype, *args, **kwargs)


Tensor.type = _type


# ---- layout ---------------------------------------------------------------------------------

class layout:
    """torch.layout: cddp's tensors are all strided."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"cddp.{self.name}"

    def __reduce__(self):
        return (layout, (self.name,))


strided = layout("strided")
Tensor.layout = property(lambda self: strided, doc="torch.strided: cddp's only layout")
Tensor.is_sparse = property(lambda self: False, doc="False: cddp's tensors are dense")


def spmm(input, mat2):  # noqa: A002
    """torch.spmm: the matrix product (cddp's tensors are dense)."""
    return _C.mm(input, mat2)
