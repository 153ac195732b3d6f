"""torch.nn.Fold and Unfold over cddp.nn.functional.fold / unfold (csrc/nn/fold.c)."""
from .. import functional as F
from .module import Module


class Fold(Module):
    __constants__ = ["output_size", "kernel_size", "dilation", "padding", "stride"]

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input):  # noqa: A002
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self):
        return "output_size={output_size}, kernel_size={kernel_size}, dilation={dilation}, " \
               "padding={padding}, stride={stride}".format(**self.__dict__)


class Unfold(Module):
    __constants__ = ["kernel_size", "dilation", "padding", "stride"]

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input):  # noqa: A002
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return "kernel_size={kernel_size}, dilation={dilation}, padding={padding}, " \
               "stride={stride}".format(**self.__dict__)
