"""Helpers the distributions share: parameter broadcasting, probs <-> logits, cached
properties, summing the rightmost dims."""
import numbers

from .. import _C
from .._finfo import finfo

__all__ = ["broadcast_all", "probs_to_logits", "logits_to_probs", "clamp_probs",
           "lazy_property", "sum_rightmost"]


def broadcast_all(*values):
    """The values as tensors of one broadcast shape; Python numbers take the dtype of the
    first tensor among them (the default dtype when there is none)."""
    if not all(isinstance(v, (_C.Tensor, numbers.Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, "
                         "torch.Tensor or objects implementing __torch_function__.")
    like = next((v for v in values if isinstance(v, _C.Tensor)), None)
    dtype = like.dtype if like is not None else _C.get_default_dtype()
    tensors = [v if isinstance(v, _C.Tensor) else _C.tensor(float(v), dtype=dtype)
               for v in values]
    from .._shape_ops import broadcast_tensors
    return broadcast_tensors(*tensors)


def clamp_probs(probs):
    """probs kept inside (eps, 1 - eps), so their logits stay finite."""
    eps = finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    """log-odds for a Bernoulli (is_binary), log-probabilities for a categorical."""
    p = clamp_probs(probs)
    return p.log() - (-p).log1p() if is_binary else p.log()


def logits_to_probs(logits, is_binary=False):
    return logits.sigmoid() if is_binary else logits.softmax(-1)


def sum_rightmost(value, dim):
    """value summed over its `dim` rightmost dims (dim == 0: unchanged)."""
    return value.reshape(tuple(value.shape[:value.dim() - dim]) + (-1,)).sum(-1) if dim else value


class lazy_property:
    """A property computed on first access and then stored on the instance (so a
    distribution built from logits computes probs once, and only when asked)."""

    def __init__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        from ..autograd.grad_mode import enable_grad
        with enable_grad():
            value = self.fn(instance)
        instance.__dict__[self.fn.__name__] = value
        return value
