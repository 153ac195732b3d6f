"""Fractional max pooling modules (torch.nn.FractionalMaxPool2d / FractionalMaxPool3d) over
F.fractional_max_pool2d/3d (nn/_functional_fractional.py: gathers of the input, so the backward
is gather's). As torch's: exactly one of output_size / output_ratio, a ratio in (0, 1), and
_random_samples kept as a buffer (None unless given, so it is in the state_dict only then)."""
from .. import functional as F
from .module import Module


def _ntuple(x, n):
    """torch.nn.modules.utils._pair/_triple: an iterable is kept as a tuple, anything else
    repeated n times."""
    try:
        return tuple(x)
    except TypeError:
        return (x,) * n


class FractionalMaxPool2d(Module):
    """Over (N, C, H, W) or (C, H, W) -> (N, C, oH, oW) or (C, oH, oW); windows kH x kW at
    random fractional steps (one draw per plane and call unless _random_samples is given)."""
    __constants__ = ["kernel_size", "return_indices", "output_size", "output_ratio"]

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, 2)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, 2) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, 2) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError("FractionalMaxPool2d requires specifying either an output size, or "
                             "a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None:
            if not (0 < self.output_ratio[0] < 1 and 0 < self.output_ratio[1] < 1):
                raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):  # noqa: A002
        return F.fractional_max_pool2d(input, self.kernel_size, self.output_size,
                                       self.output_ratio, self.return_indices,
                                       _random_samples=self._random_samples)


class FractionalMaxPool3d(Module):
    """Over (N, C, T, H, W) or (C, T, H, W); windows kT x kH x kW, kernel sizes > 0."""
    __constants__ = ["kernel_size", "return_indices", "output_size", "output_ratio"]

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        if (isinstance(kernel_size, int) and kernel_size <= 0) or (
                isinstance(kernel_size, (tuple, list)) and not all(k > 0 for k in kernel_size)):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = _ntuple(kernel_size, 3)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, 3) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, 3) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError("FractionalMaxPool3d requires specifying either an output size, or "
                             "a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None:
            if not (0 < self.output_ratio[0] < 1 and 0 < self.output_ratio[1] < 1
                    and 0 < self.output_ratio[2] < 1):
                raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):  # noqa: A002
        return F.fractional_max_pool3d(input, self.kernel_size, self.output_size,
                                       self.output_ratio, self.return_indices,
                                       _random_samples=self._random_samples)
