"""Helpers the distributions share: parameter broadcasting, probs <-> logits, cached
properties, summing the rightmost dims, lower-triangular matrix <-> row-order vector."""
import numbers

from .. import _C
from .._finfo import finfo

__all__ = ["broadcast_all", "probs_to_logits", "logits_to_probs", "clamp_probs",
           "lazy_property", "sum_rightmost", "tril_matrix_to_vec", "vec_to_tril_matrix",
           "euler_constant"]

euler_constant = 0.57721566490153286060   # Euler-Mascheroni constant


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


_sum_rightmost = sum_rightmost           # torch's private name, used by its transforms


def _tril_flat_index(n, diag):
    """Row-major positions (in the flattened n x n matrix) of the entries with
    col < row + diag + 1, in row order: the mask torch's tril helpers index with."""
    rows = _C.arange(n).reshape(-1, 1)
    mask = _C.arange(n) < rows + (diag + 1)                          # (n, n)
    return _C.arange(n * n)[mask.reshape(-1)]


def tril_matrix_to_vec(mat, diag=0):
    """The lower-triangular entries (col < row + diag + 1) of mat (..., D, D) in row order:
    (..., N)."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    flat = mat.reshape(tuple(mat.shape[:-2]) + (n * n,))
    return flat[..., _tril_flat_index(n, diag)]


def vec_to_tril_matrix(vec, diag=0):
    """The inverse of tril_matrix_to_vec: vec (..., N) laid in row order into the lower part
    of a zero (..., D, D) matrix. Built by gathering from vec padded with one zero (every
    position above the band reads that zero), so it stays differentiable."""
    # +ve root of D**2 + (1+2*diag)*D - |diag| * (diag+1) - 2*vec.shape[-1] = 0
    n = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1]
                            + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    eps = finfo(vec.dtype).eps
    if round(n) - n > eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be "
                         "expressed as the lower triangular part of a square D x D matrix.")
    n = round(n)
    where = _C.full((n * n,), vec.shape[-1], dtype=_C.int64)         # -> the padded zero
    where[_tril_flat_index(n, diag)] = _C.arange(vec.shape[-1])
    from ..nn.functional import pad
    padded = pad(vec, (0, 1))                                         # (..., N + 1)
    return padded[..., where].reshape(tuple(vec.shape[:-1]) + (n, n))


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
