"""cddp.nn.functional — torch.nn.functional's signatures over C kernels.

Losses are fused C passes (csrc/nn/loss.c); linear is one GEMM with the bias fused
(csrc/nn_linear.c). This layer only maps torch's keyword arguments onto them.
"""
import warnings

from .. import _C

Tensor = _C.Tensor

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _reduction(reduction, size_average=None, reduce=None):
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = ("mean" if size_average else "sum") if reduce else "none"
        warnings.warn("size_average and reduce args will be deprecated, please use "
                      f"reduction='{reduction}' instead.", UserWarning, stacklevel=3)
    try:
        return _REDUCTIONS[reduction]
    except KeyError:
        raise ValueError(f"{reduction} is not a valid value for reduction") from None


def _check_tensor(x, name):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a cddp Tensor, not {type(x).__name__}")


def linear(input, weight, bias=None):  # noqa: A002 (torch's names)
    """y = input @ weight.T + bias, as one GEMM with the bias fused."""
    return _C._linear(input, weight, bias)


def relu(input, inplace=False):  # noqa: A002
    return input.relu_() if inplace else input.relu()


def sigmoid(input):  # noqa: A002
    return input.sigmoid()


def tanh(input):  # noqa: A002
    return input.tanh()


def _softmax_dim(ndim):
    warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call "
                  "to include dim=X as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        dim = _softmax_dim(input.dim())
    return input.softmax(dim) if dtype is None else input.to(dtype).softmax(dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        dim = _softmax_dim(input.dim())
    return input.log_softmax(dim) if dtype is None else input.to(dtype).log_softmax(dim)


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    # torch's CPU recipe, op for op (so a seeded run draws the same mask): a Bernoulli(1-p)
    # noise tensor scaled by 1/(1-p), multiplied in; every step is one C kernel
    if p == 1.0:
        noise = _C.zeros((), dtype=input.dtype)
    else:
        noise = _C.empty_like(input).bernoulli_(1.0 - p)
        noise.div_(1.0 - p)
    return input.mul_(noise) if inplace else input * noise


def one_hot(tensor, num_classes=-1):
    _check_tensor(tensor, "one_hot's input")
    if tensor.dtype != _C.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    out = _C.zeros(tuple(tensor.shape) + (num_classes,), dtype=_C.int64)
    if tensor.numel():
        if int(tensor.min().item()) < 0:
            raise RuntimeError("Class values must be non-negative.")
        if int(tensor.max().item()) >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
        out.scatter_(-1, tensor.unsqueeze(-1), 1)
    return out


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,  # noqa: A002
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """Log-softmax + NLL in one stable C pass; class-index or probability targets."""
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    return _C._cross_entropy(input, target, weight, int(ignore_index),
                             _reduction(reduction, size_average, reduce), float(label_smoothing))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100,  # noqa: A002
             reduce=None, reduction="mean"):
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    return _C._nll_loss(input, target, weight, int(ignore_index),
                        _reduction(reduction, size_average, reduce))


def _warn_broadcast(input, target):  # noqa: A002
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input size "
                      f"({input.shape}). This will likely lead to incorrect results due to "
                      "broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=3)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):  # noqa: A002
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    _warn_broadcast(input, target)
    return _C._mse_loss(input, target, _reduction(reduction, size_average, reduce))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    _warn_broadcast(input, target)
    return _C._l1_loss(input, target, _reduction(reduction, size_average, reduce))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                         reduction="mean"):
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    return _C._bce(input, target, weight, _reduction(reduction, size_average, reduce))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,  # noqa: A002
                                     reduce=None, reduction="mean", pos_weight=None):
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    return _C._bce_with_logits(input, target, weight, pos_weight,
                               _reduction(reduction, size_average, reduce))


# convolution, pooling, padding and resampling (csrc/nn/: conv, pool, pad, interpolate, fold)
from ._functional_spatial import (  # noqa: E402,F401
    _ntuple, conv1d, conv2d, conv_transpose1d, conv_transpose2d, max_pool1d, max_pool2d,
    max_pool1d_with_indices, max_pool2d_with_indices, avg_pool1d, avg_pool2d,
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool1d, adaptive_max_pool2d, pad,
    interpolate, upsample, upsample_nearest, upsample_bilinear, pixel_shuffle, pixel_unshuffle,
    unfold, fold)
