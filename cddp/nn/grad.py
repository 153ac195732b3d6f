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


def _input_grad(nd, input_size, weight, grad_output, stride, padding, dilation, groups):
    size = tuple(input_size)
    if len(size) != nd + 2:
        raise ValueError(f"conv{nd}d_input: input_size must have {nd + 2} elements (N, C, "
                         f"spatial), got {list(size)}")
    with enable_grad():
        x = _C.zeros(size, dtype=grad_output.dtype, requires_grad=True)
        out = _CONV[nd](x, weight.detach(), None, stride, padding, dilation, groups)
        if tuple(out.shape) != tuple(grad_output.shape):
            raise ValueError(f"conv{nd}d_input: grad_output has shape {list(grad_output.shape)}, "
                             f"the convolution gives {list(out.shape)}")
        return _autograd_grad(out, x, grad_output)[0]


def _weight_grad(nd, input, weight_size, grad_output, stride, padding, dilation, groups):  # noqa: A002
    size = tuple(weight_size)
    if len(size) != nd + 2:
        raise ValueError(f"conv{nd}d_weight: weight_size must have {nd + 2} elements, got "
                         f"{list(size)}")
    with enable_grad():
        w = _C.zeros(size, dtype=grad_output.dtype, requires_grad=True)
        out = _CONV[nd](input.detach(), w, None, stride, padding, dilation, groups)
        if tuple(out.shape) != tuple(grad_output.shape):
            raise ValueError(f"conv{nd}d_weight: grad_output has shape "
                             f"{list(grad_output.shape)}, the convolution gives "
                             f"{list(out.shape)}")
        return _autograd_grad(out, w, grad_output)[0]


def conv1d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(1, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv1d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    return _weight_grad(1, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(2, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    return _weight_grad(2, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv3d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(3, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv3d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    return _weight_grad(3, input, weight_size, grad_output, stride, padding, dilation, groups)
