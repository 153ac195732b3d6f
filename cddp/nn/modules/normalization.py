"""LayerNorm (torch.nn.LayerNorm): the fused C kernel of csrc/nn/layer_norm.c."""
import numbers

from ... import _C
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


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
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        if self.elementwise_affine:
            self.weight = Parameter(_C.empty(self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(_C.empty(self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")
