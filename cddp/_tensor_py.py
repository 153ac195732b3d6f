"""The few Tensor attributes that are plain Python properties over C methods."""
from ._C import Tensor


def _T(self):
    return self.permute(*reversed(range(self.ndim))) if self.ndim > 1 else self


def _mT(self):
    return self.transpose(-2, -1)


Tensor.T = property(_T, doc="the tensor with its dimensions reversed")
Tensor.mT = property(_mT, doc="the last two dimensions transposed")
Tensor.retains_grad = property(lambda self: (not self.is_leaf) and getattr(self, "_retains", False))
Tensor.__array_priority__ = 1000  # NumPy defers binary ops to Tensor
