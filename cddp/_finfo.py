"""cddp.finfo / cddp.iinfo — the numerical properties of a dtype, as torch.finfo / torch.iinfo.

    finfo(dtype=None)   bits, eps, max, min, tiny (= smallest_normal), resolution, dtype (a str);
                        None means the default dtype
    iinfo(dtype)        bits, min, max, dtype

Values are Python numbers equal to torch's (float16/float32/float64 from NumPy's finfo,
bfloat16 from its bit layout: 8 exponent bits like float32, 8 significand bits); repr and the
TypeErrors use torch's text. Pure Python: these are constants, not per-element work.
"""
import numpy as np

from . import _C

# bfloat16: float32's exponent range, 7 stored mantissa bits
_BF16 = {"bits": 16, "eps": 2.0 ** -7, "max": float(np.float32(2.0 ** 127 * (2 - 2.0 ** -7))),
         "tiny": 2.0 ** -126, "resolution": 0.01}
_NP_FLOAT = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
_NP_INT = {"uint8": np.uint8, "int8": np.int8, "int16": np.int16, "int32": np.int32,
           "int64": np.int64}


def _name(dtype):
    return str(dtype).split(".")[-1]


def _fmt(v):
    return format(v, "g")


class finfo:
    """finfo(type=None): machine limits of a floating dtype (torch.finfo)."""
    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")
    __hash__ = None

    def __init__(self, type=None):  # noqa: A002  (torch's parameter name)
        if type is None:
            type = _C.get_default_dtype()
        if not isinstance(type, _C.dtype) or not type.is_floating_point:
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        name = _name(type)
        if name == "bfloat16":
            bits, eps, mx, tiny, res = (_BF16[k] for k in ("bits", "eps", "max", "tiny",
                                                          "resolution"))
        else:
            info = np.finfo(_NP_FLOAT[name])
            bits, eps, mx = info.bits, float(info.eps), float(info.max)
            tiny, res = float(info.smallest_normal), 10.0 ** -int(info.precision)
        self.bits, self.eps, self.max, self.min = int(bits), eps, mx, -mx
        self.tiny = self.smallest_normal = tiny
        self.resolution, self.dtype = res, name

    def __eq__(self, other):
        return isinstance(other, finfo) and other.dtype == self.dtype

    def __repr__(self):
        return (f"finfo(resolution={_fmt(self.resolution)}, min={_fmt(self.min)}, "
                f"max={_fmt(self.max)}, eps={_fmt(self.eps)}, "
                f"smallest_normal={_fmt(self.smallest_normal)}, tiny={_fmt(self.tiny)}, "
                f"dtype={self.dtype})")

    __str__ = __repr__


class iinfo:
    """iinfo(type): limits of an integer dtype (torch.iinfo)."""
    __slots__ = ("bits", "min", "max", "dtype")
    __hash__ = None

    def __init__(self, type):  # noqa: A002
        if not isinstance(type, _C.dtype) or type.is_floating_point:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to "
                            "handle 'torch.iinfo'")
        name = _name(type)
        if name == "bool":
            raise TypeError("torch.bool is not supported by torch.iinfo")
        info = np.iinfo(_NP_INT[name])
        self.bits, self.min, self.max, self.dtype = int(info.bits), int(info.min), \
            int(info.max), name

    def __eq__(self, other):
        return isinstance(other, iinfo) and other.dtype == self.dtype

    def __repr__(self):
        return f"iinfo(min={_fmt(float(self.min))}, max={_fmt(float(self.max))}, dtype={self.dtype})"

    __str__ = __repr__
