"""Linear and Identity (torch.nn.Linear / Identity). Linear's forward and backward are C
(csrc/nn_linear.c): one GEMM with the bias fused; dX, dW by two GEMMs, db by one reduction."""
import math

from ... import _C
from .. import init
from ..parameter import Parameter
from .module import Module


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):  # noqa: A002
        return input


class Linear(Module):
    """y = x @ W.T + b, W (out_features, in_features), b (out_features)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        self.weight = Parameter(_C.empty((out_features, in_features), dtype=dtype))
        if bias:
            self.bias = Parameter(_C.empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        # torch's defaults: kaiming_uniform(a=sqrt(5)) for W, U(+-1/sqrt(fan_in)) for b
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):  # noqa: A002
        return _C._linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """torch's class for MultiheadAttention.out_proj (a Linear; the name is kept so module
    trees print alike)."""
