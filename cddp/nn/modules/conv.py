"""Convolution modules (torch.nn.Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
ConvTranspose3d): torch's constructor checks, parameter layout, initialisation and repr; the
math is cddp.nn.functional's conv*/conv_transpose* (im2col + GEMM in csrc/nn/conv_engine.c;
conv3d / conv_transpose3d are composed over conv2d / conv_transpose2d in
nn/_functional_3d.py)."""
import math
import warnings
from collections.abc import Iterable

from ... import _C
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(v, n):
    if not isinstance(v, Iterable):      # an int or a NumPy integer, repeated (torch's _ntuple)
        return (v,) * n
    t = tuple(v)
    return t * n if len(t) == 1 else t


class _ConvNd(Module):
    __constants__ = ["stride", "padding", "dilation", "groups", "padding_mode", "output_padding",
                     "in_channels", "out_channels", "kernel_size"]

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 transposed, output_padding, groups, bias, padding_mode, device=None,
                 dtype=None):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = transposed
        self.output_padding = output_padding
        self.groups = groups
        self.padding_mode = padding_mode
        # F.pad's argument for the non-zero padding modes: last dim first, (left, right) each
        nd = len(kernel_size)
        if isinstance(padding, str):
            rev = [0, 0] * nd
            if padding == "same":
                for d, k, i in zip(dilation, kernel_size, range(nd - 1, -1, -1)):
                    total = d * (k - 1)
                    rev[2 * i], rev[2 * i + 1] = total // 2, total - total // 2
            self._reversed_padding_repeated_twice = rev
        else:
            self._reversed_padding_repeated_twice = [p for p in reversed(padding) for _ in (0, 1)]
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        shape = ((in_channels, out_channels // groups) if transposed
                 else (out_channels, in_channels // groups)) + tuple(kernel_size)
        self.weight = Parameter(_C.empty(shape, dtype=dtype))
        if bias:
            self.bias = Parameter(_C.empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        # torch's defaults: kaiming_uniform(a=sqrt(5)) for the weight, U(+-1/sqrt(fan_in)) bias
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}"
        if self.padding != (0,) * len(self.kernel_size):
            s += ", padding={padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += ", dilation={dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += ", output_padding={output_padding}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode={padding_mode}"
        return s.format(**self.__dict__)


class _ConvForward(_ConvNd):
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        n = self._nd
        super().__init__(in_channels, out_channels, _tuple(kernel_size, n), _tuple(stride, n),
                         padding if isinstance(padding, str) else _tuple(padding, n),
                         _tuple(dilation, n), False, (0,) * n, groups, bias, padding_mode,
                         device, dtype)

    def _conv_forward(self, input, weight, bias):  # noqa: A002
        conv = (F.conv1d, F.conv2d, F.conv3d)[self._nd - 1]
        if self.padding_mode != "zeros":
            return conv(F.pad(input, self._reversed_padding_repeated_twice,
                              mode=self.padding_mode),
                        weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):  # noqa: A002
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_ConvForward):
    """1-D convolution over (N, C_in, L) -> (N, C_out, L_out)."""
    _nd = 1


class Conv2d(_ConvForward):
    """2-D convolution over (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
    _nd = 2


class Conv3d(_ConvForward):
    """3-D convolution over (N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)."""
    _nd = 3


class _ConvTransposeNd(_ConvNd):
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        n = self._nd
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f'{self.__class__.__name__}')
        super().__init__(in_channels, out_channels, _tuple(kernel_size, n), _tuple(stride, n),
                         _tuple(padding, n), _tuple(dilation, n), True,
                         _tuple(output_padding, n), groups, bias, padding_mode, device, dtype)

    def _output_padding(self, input, output_size, stride, padding, kernel_size,  # noqa: A002
                        num_spatial_dims, dilation=None):
        """torch's rule: the output_padding that makes the output exactly output_size."""
        if output_size is None:
            return tuple(self.output_padding)
        output_size = list(output_size)
        nsd = num_spatial_dims
        non_spatial = 2 if input.dim() == nsd + 2 else 1
        if len(output_size) == non_spatial + nsd:
            output_size = output_size[non_spatial:]
        if len(output_size) != nsd:
            raise ValueError(f"ConvTranspose{nsd}D: for {input.dim()}D input, output_size must "
                             f"have {nsd} or {non_spatial + nsd} elements (got "
                             f"{len(output_size)})")
        mins, maxs = [], []
        for d in range(nsd):
            size = ((input.shape[d + non_spatial] - 1) * stride[d] - 2 * padding[d] +
                    (dilation[d] if dilation is not None else 1) * (kernel_size[d] - 1) + 1)
            mins.append(size)
            maxs.append(size + stride[d] - 1)
        for d in range(nsd):
            if output_size[d] < mins[d] or output_size[d] > maxs[d]:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes "
                                 f"range from {mins} to {maxs} (for an input of "
                                 f"{input.shape[non_spatial:]})")
        return tuple(output_size[d] - mins[d] for d in range(nsd))

    def forward(self, input, output_size=None):  # noqa: A002
        n = self._nd
        op = self._output_padding(input, output_size, self.stride, self.padding,
                                  self.kernel_size, n, self.dilation)
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[n - 1]
        return conv(input, self.weight, self.bias, self.stride, self.padding, op, self.groups,
                    self.dilation)


class _ConvTransposeMixin(_ConvTransposeNd):
    """torch's deprecated alias base (isinstance checks in libraries); warns when made."""

    def __init__(self, *args, **kwargs):
        warnings.warn("_ConvTransposeMixin is a deprecated internal class. Please consider "
                      "using public APIs.", FutureWarning, stacklevel=2)
        super().__init__(*args, **kwargs)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution (the adjoint of Conv1d), (N, C_in, L) -> (N, C_out, L_out)."""
    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution (the adjoint of Conv2d)."""
    _nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-D convolution (the adjoint of Conv3d), (N, C_in, D, H, W) ->
    (N, C_out, D_out, H_out, W_out); composed over conv_transpose2d in nn/_functional_3d.py."""
    _nd = 3
