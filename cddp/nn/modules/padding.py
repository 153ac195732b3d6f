"""Padding modules (torch.nn.ZeroPad1d/2d/3d, ConstantPad1d/2d/3d, ReflectionPad1d/2d/3d,
ReplicationPad1d/2d/3d, CircularPad1d/2d/3d) over cddp.nn.functional.pad (csrc/nn/pad.c)."""
from .. import functional as F
from .module import Module


def _pad_tuple(padding, n):
    """int -> (p,)*2n; else a tuple of 2n ints (torch's _pair/_quadruple/_ntuple(6))."""
    if isinstance(padding, int):
        return (padding,) * (2 * n)
    t = tuple(padding)
    if len(t) != 2 * n:
        raise ValueError(f"expected padding to be an int or a tuple of {2 * n} ints, got {t}")
    return t


class _PadNd(Module):
    __constants__ = ["padding", "mode"]
    _n = 2
    _mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _pad_tuple(padding, self._n)

    def forward(self, input):  # noqa: A002
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    __constants__ = ["padding", "value"]

    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):  # noqa: A002
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    _n = 1


class ConstantPad2d(_ConstantPadNd):
    _n = 2


class ConstantPad3d(_ConstantPadNd):
    _n = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    _n = 1


class ZeroPad2d(_ZeroPadNd):
    _n = 2


class ZeroPad3d(_ZeroPadNd):
    _n = 3


class ReflectionPad1d(_PadNd):
    _n, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    _n, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    _n, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    _n, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    _n, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    _n, _mode = 3, "replicate"


class CircularPad1d(_PadNd):
    _n, _mode = 1, "circular"


class CircularPad2d(_PadNd):
    _n, _mode = 2, "circular"


class CircularPad3d(_PadNd):
    _n, _mode = 3, "circular"
