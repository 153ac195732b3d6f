"""LayerNorm (torch.nn.LayerNorm): the fused C kernel of csrc/nn/layer_norm.c; RMSNorm
(torch.nn.RMSNorm) over F.rms_norm's composite."""
import numbers

from ... import _C
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


def _affine_parameters(module, affine, shape, dtype, bias):
    """weight (ones) and bias (zeros; None when bias=False) of `shape`, or both None when not
    affine: LayerNorm's and GroupNorm's parameters, registered as torch registers them."""
    dtype = dtype if dtype is not None else _C.get_default_dtype()
    if affine:
        module.weight = Parameter(_C.empty(shape, dtype=dtype))
        if bias:
            module.bias = Parameter(_C.empty(shape, dtype=dtype))
        else:
            module.register_parameter("bias", None)
    else:
        module.register_parameter("weight", None)
        module.register_parameter("bias", None)
    module.reset_parameters()


def _reset_affine(module):
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, elementwise_affine, self.normalized_shape, dtype, bias)
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        _reset_affine(self)

    def forward(self, input):  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """y = x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape; eps=None is
    finfo(input.dtype).eps at each call, weight starts at ones."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            dtype = dtype if dtype is not None else _C.get_default_dtype()
            self.weight = Parameter(_C.empty(self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
