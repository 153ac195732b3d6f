"""torch.nn.grad: the gradient of a convolution with respect to its input or its weight, for
code that writes its own conv backward. Each is the adjoint of the conv op: a conv is linear in
each argument, so the gradient at a zero point (the sizes are all that matter) through
autograd.grad is the exact answer, computed by the conv kernels' own backward."""
from .. import _C
from ..autograd.grad_mode import enable_grad
from ..autograd import grad as _autograd_grad
from . import functional as F

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input",
           "conv3d_weight"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _conv_grad(nd, wrt, size, fixed, grad_output, stride, padding, dilation, groups):
    """The gradient of conv{nd}d's output, weighted by grad_output, with respect to its input
    (wrt "input": fixed is the weight) or its weight (wrt "weight": fixed is the input), of
    shape `size`."""
    fn = f"conv{nd}d_{wrt}"
    size = tuple(size)
    if len(size) != nd + 2:
        raise ValueError(f"{fn}: {wrt}_size must have {nd + 2} elements, got {list(size)}")
    with enable_grad():
        free = _C.zeros(size, dtype=grad_output.dtype, requires_grad=True)
        x, w = (free, fixed.detach()) if wrt == "input" else (fixed.detach(), free)
        out = _CONV[nd](x, w, None, stride, padding, dilation, groups)
        if tuple(out.shape) != tuple(grad_output.shape):
            raise ValueError(f"{fn}: grad_output has shape {list(grad_output.shape)}, the "
                             f"convolution gives {list(out.shape)}")
        return _autograd_grad(out, free, grad_output)[0]


def conv1d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _conv_grad(1, "input", input_size, weight, grad_output, stride, padding,
                      dilation, groups)


def conv1d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    return _conv_grad(1, "weight", weight_size, input, grad_output, stride, padding,
                      dilation, groups)


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _conv_grad(2, "input", input_size, weight, grad_output, stride, padding,
                      dilation, groups)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    return _conv_grad(2, "weight", weight_size, input, grad_output, stride, padding,
                      dilation, groups)


def conv3d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _conv_grad(3, "input", input_size, weight, grad_output, stride, padding,
                      dilation, groups)


def conv3d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    return _conv_grad(3, "weight", weight_size, input, grad_output, stride, padding,
                      dilation, groups)
