"""Pooling modules (torch.nn.MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d,
AdaptiveMaxPool1d/2d/3d) over cddp.nn.functional's pooling (csrc/nn/pool.c; the 3-D ones are
two 2-D passes, nn/_functional_3d.py); MaxUnpool1d/2d/3d over F.max_unpool1d/2d/3d (a scatter
into zeros); LPPool1d/2d/3d over F.lp_pool1d/2d/3d (average pooling of x ** p)."""
from .. import functional as F
from .module import Module


class _MaxPoolNd(Module):
    __constants__ = ["kernel_size", "stride", "padding", "dilation", "return_indices",
                     "ceil_mode"]

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self):
        return "kernel_size={kernel_size}, stride={stride}, padding={padding}, " \
               "dilation={dilation}, ceil_mode={ceil_mode}".format(**self.__dict__)


class MaxPool1d(_MaxPoolNd):
    def forward(self, input):  # noqa: A002
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class MaxPool2d(_MaxPoolNd):
    def forward(self, input):  # noqa: A002
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class MaxPool3d(_MaxPoolNd):
    def forward(self, input):  # noqa: A002
        return F.max_pool3d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class _AvgPoolNd(Module):
    """torch's common base of AvgPool1d / 2d / 3d (the 2-D / 3-D constructor; AvgPool1d has
    its own)."""
    __constants__ = ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                     "divisor_override"]

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    __constants__ = ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"]

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        Module.__init__(self)           # its tuples, not _AvgPoolNd's 2-D / 3-D fields
        self.kernel_size = F._ntuple(kernel_size, 1, "kernel_size")
        self.stride = F._ntuple(stride if stride is not None else kernel_size, 1, "stride")
        self.padding = F._ntuple(padding, 1, "padding")
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):  # noqa: A002
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AvgPool2d(_AvgPoolNd):
    def forward(self, input):  # noqa: A002
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AvgPool3d(_AvgPoolNd):
    def forward(self, input):  # noqa: A002
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class _AdaptivePoolNd(Module):
    __constants__ = ["output_size"]

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        if return_indices is not None and self._max:
            self.return_indices = return_indices

    def extra_repr(self):
        return f"output_size={self.output_size}"


class _AdaptiveAvgPoolNd(_AdaptivePoolNd):
    _max = False


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    _max = True


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    def forward(self, input):  # noqa: A002
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Average over windows chosen so the output is output_size (int, tuple, None entries keep
    the input's size)."""

    def forward(self, input):  # noqa: A002
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    def forward(self, input):  # noqa: A002
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    def forward(self, input):  # noqa: A002
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    def forward(self, input):  # noqa: A002
        return F.adaptive_avg_pool3d(input, self.output_size)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    def forward(self, input):  # noqa: A002
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


class _MaxUnpoolNd(Module):
    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = F._ntuple(kernel_size, 1, "kernel_size")
        self.stride = F._ntuple(stride if stride is not None else kernel_size, 1, "stride")
        self.padding = F._ntuple(padding, 1, "padding")

    def forward(self, input, indices, output_size=None):  # noqa: A002
        return F.max_unpool1d(input, indices, self.kernel_size, self.stride, self.padding,
                              output_size)


class MaxUnpool2d(_MaxUnpoolNd):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = F._ntuple(kernel_size, 2, "kernel_size")
        self.stride = F._ntuple(stride if stride is not None else kernel_size, 2, "stride")
        self.padding = F._ntuple(padding, 2, "padding")

    def forward(self, input, indices, output_size=None):  # noqa: A002
        return F.max_unpool2d(input, indices, self.kernel_size, self.stride, self.padding,
                              output_size)


class MaxUnpool3d(_MaxUnpoolNd):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = F._ntuple(kernel_size, 3, "kernel_size")
        self.stride = F._ntuple(stride if stride is not None else kernel_size, 3, "stride")
        self.padding = F._ntuple(padding, 3, "padding")

    def forward(self, input, indices, output_size=None):  # noqa: A002
        return F.max_unpool3d(input, indices, self.kernel_size, self.stride, self.padding,
                              output_size)


class _LPPoolNd(Module):
    """Power-average pooling: the arguments are kept as given (torch's), the forward passes
    norm_type as a float."""
    __constants__ = ["norm_type", "kernel_size", "stride", "ceil_mode"]
    _nd = 2

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def extra_repr(self):
        return "norm_type={norm_type}, kernel_size={kernel_size}, stride={stride}, " \
               "ceil_mode={ceil_mode}".format(**self.__dict__)

    def forward(self, input):  # noqa: A002
        fn = (F.lp_pool1d, F.lp_pool2d, F.lp_pool3d)[self._nd - 1]
        return fn(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class LPPool1d(_LPPoolNd):
    """Over (N, C, L) or (C, L)."""
    _nd = 1


class LPPool2d(_LPPoolNd):
    """Over (N, C, H, W) or (C, H, W)."""
    _nd = 2


class LPPool3d(_LPPoolNd):
    """Over (N, C, D, H, W) or (C, D, H, W)."""
    _nd = 3
