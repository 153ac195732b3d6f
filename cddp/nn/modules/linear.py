"""Linear and Identity (torch.nn.Linear / Identity). Linear's forward and backward are C
(csrc/nn_linear.c): one GEMM with the bias fused; dX, dW by two GEMMs, db by one reduction.
Bilinear (over F.bilinear) and LazyLinear (in_features from the first input; parameters
initialised then, drawing as Linear's reset_parameters, and the module becomes a Linear)."""
import math

from ... import _C
from ...autograd.grad_mode import no_grad
from .. import init
from ..parameter import Parameter, UninitializedParameter
from .lazy import LazyModuleMixin
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


class Bilinear(Module):
    """y = x1^T W x2 + b, W (out_features, in1_features, in2_features), b (out_features);
    torch's init: both U(+-1/sqrt(in1_features))."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        self.weight = Parameter(_C.empty((out_features, in1_features, in2_features),
                                         dtype=dtype))
        if bias:
            self.bias = Parameter(_C.empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got "
                             f"(in1_features={self.in1_features})")
        bound = 1 / math.sqrt(self.weight.size(1))
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        from .. import functional as F
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class LazyLinear(LazyModuleMixin, Linear):
    """Linear whose in_features is the last dim of its first input."""

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        # bias=False here: no tensor is made only to be replaced below (torch's comment)
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input):  # noqa: A002
        seen = input.shape[-1]
        if self.has_uninitialized_params():
            # first call: the last input dim fixes in_features; shape both params, then init
            out_f = self.out_features
            with no_grad():
                self.in_features = seen
                self.weight.materialize((out_f, seen))
                if self.bias is not None:
                    self.bias.materialize((out_f,))
                self.reset_parameters()
        if self.in_features == 0:
            expected = self.weight.shape[-1]
            if seen != expected:
                raise AssertionError(f"The in_features inferred from input: {seen} "
                                     f"is not equal to in_features from self.weight: "
                                     f"{expected}")
            self.in_features = seen
