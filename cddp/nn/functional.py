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


def _noise_like(input):  # noqa: A002
    """An empty tensor like input in input's memory order when input is a permuted dense
    tensor (torch's empty_like keeps that layout, and bernoulli_ fills memory in order): a
    seeded dropout of a transposed view then draws the same mask as torch's."""
    if input.dim() < 2 or input.is_contiguous():
        return _C.empty_like(input)
    order = sorted(range(input.dim()), key=lambda d: -input.stride(d))
    if not input.permute(order).is_contiguous():
        return _C.empty_like(input)
    base = _C.empty(tuple(input.shape[d] for d in order), dtype=input.dtype)
    return base.permute([order.index(d) for d in range(input.dim())])


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
        noise = _noise_like(input).bernoulli_(1.0 - p)
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


# ---- the losses of csrc/nn/loss_extra.c: one pointwise and one row engine --------------------

_SMOOTH_L1, _HUBER, _KL_DIV, _POISSON_NLL, _GAUSSIAN_NLL, _HINGE, _SOFT_MARGIN, _RANKING, \
    _MULTILABEL_SOFT_MARGIN = range(9)
_COSINE_EMBEDDING, _TRIPLET = range(2)


def _check_tensors(**named):
    for name, x in named.items():
        _check_tensor(x, name)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean",  # noqa: A002
                   beta=1.0):
    _check_tensors(input=input, target=target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _warn_broadcast(input, target)
    red = _reduction(reduction, size_average, reduce)
    if beta == 0.0:                  # torch: beta == 0 is exactly l1_loss
        return _C._l1_loss(input, target, red)
    return _C._pointwise_loss(_SMOOTH_L1, input, target, None, red, float(beta), 0.0, 0)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):  # noqa: A002
    _check_tensors(input=input, target=target)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _warn_broadcast(input, target)
    if weight is not None:
        loss = _C._pointwise_loss(_HUBER, input, target, None, 0, float(delta), 0.0, 0) * weight
        return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]
    return _C._pointwise_loss(_HUBER, input, target, None, _reduction(reduction), float(delta),
                              0.0, 0)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean",  # noqa: A002
           log_target=False):
    _check_tensors(input=input, target=target)
    if reduction == "batchmean":
        red = 3
    else:
        red = _reduction(reduction, size_average, reduce)
        if red == 1:
            warnings.warn("reduction: 'mean' divides the total loss by both the batch size and "
                          "the support size.'batchmean' divides only by the batch size, and "
                          "aligns with the KL div math definition.'mean' will be changed to "
                          "behave the same as 'batchmean' in the next major release.",
                          UserWarning, stacklevel=2)
    return _C._pointwise_loss(_KL_DIV, input, target, None, red, 0.0, 0.0, int(bool(log_target)))


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None,  # noqa: A002
                     eps=1e-8, reduce=None, reduction="mean"):
    _check_tensors(input=input, target=target)
    red = _reduction(reduction, size_average, reduce)
    return _C._pointwise_loss(_POISSON_NLL, input, target, None, red, float(eps), 0.0,
                              int(bool(log_input)) | (2 if full else 0))


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):  # noqa: A002
    _check_tensors(input=input, target=target)
    if not isinstance(var, Tensor):   # a number: one variance for every element
        var = _C.full(tuple(input.shape), float(var), dtype=input.dtype)
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):      # homoscedastic: one per row
            var = var.unsqueeze(-1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    return _C._pointwise_loss(_GAUSSIAN_NLL, input, target, var, _reduction(reduction),
                              float(eps), 0.0, 2 if full else 0)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,  # noqa: A002
                         reduction="mean"):
    _check_tensors(input=input, target=target)
    return _C._pointwise_loss(_HINGE, input, target, None,
                              _reduction(reduction, size_average, reduce), float(margin), 0.0, 0)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    _check_tensors(input=input, target=target)
    if target.requires_grad and _C.is_grad_enabled():
        raise RuntimeError("The function 'soft_margin_loss' is not differentiable with respect "
                           "to argument 'target'. This input cannot have requires_grad True.")
    return _C._pointwise_loss(_SOFT_MARGIN, input, target, None,
                              _reduction(reduction, size_average, reduce), 0.0, 0.0, 0)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    _check_tensors(input1=input1, input2=input2, target=target)
    if not input1.dim() == input2.dim() == target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {input1.shape}, input2: {input2.shape}, "
                           f"target: {target.shape} ")
    return _C._pointwise_loss(_RANKING, input1, input2, target,
                              _reduction(reduction, size_average, reduce), float(margin), 0.0, 0)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None,  # noqa: A002
                                reduce=None, reduction="mean"):
    _check_tensors(input=input, target=target)
    return _C._pointwise_loss(_MULTILABEL_SOFT_MARGIN, input, target, weight,
                              _reduction(reduction, size_average, reduce), 0.0, 0.0, 0)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    _check_tensors(input1=input1, input2=input2, target=target)
    return _C._row_loss(_COSINE_EMBEDDING, input1, input2, target,
                        _reduction(reduction, size_average, reduce), float(margin), 2.0, 0.0, 0)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    _check_tensors(anchor=anchor, positive=positive, negative=negative)
    return _C._row_loss(_TRIPLET, anchor, positive, negative,
                        _reduction(reduction, size_average, reduce), float(margin), float(p),
                        float(eps), int(bool(swap)))
# ---- transformer stack: layer_norm, embedding, attention (csrc/nn/layer_norm.c, embedding.c,
# sdpa.c; multi_head_attention_forward and its mask helpers in _mha.py) --------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """Normalize over the trailing normalized_shape dims: one fused C pass per row."""
    _check_tensor(input, "input")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _C._layer_norm(input, tuple(normalized_shape), weight, bias, float(eps))


_sparse_warned = []


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,  # noqa: A002
              scale_grad_by_freq=False, sparse=False):
    """Rows of weight at input's indices; padding_idx's row gets no gradient."""
    _check_tensor(input, "input")
    _check_tensor(weight, "weight")
    if padding_idx is not None:
        if padding_idx > 0:
            if padding_idx >= weight.size(0):
                raise AssertionError("Padding_idx must be within num_embeddings")
        elif padding_idx < 0:
            if padding_idx < -weight.size(0):
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = weight.size(0) + padding_idx
    else:
        padding_idx = -1
    if sparse and not _sparse_warned:
        _sparse_warned.append(True)
        warnings.warn("cddp has no sparse tensors: embedding(sparse=True) produces a dense "
                      "gradient (same values)", UserWarning, stacklevel=2)
    if max_norm is not None:
        # torch's embedding_renorm_ under no_grad: rows used by input scaled to max_norm
        _C._embedding_renorm_(weight, input, float(max_norm), float(norm_type))
    return _C._embedding(weight, input, int(padding_idx), bool(scale_grad_by_freq))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(Q K^T * scale + mask) V with dropout on the weights: one C kernel forward and
    one backward (csrc/nn/sdpa.c)."""
    return _C._sdpa(query, key, value, attn_mask, float(dropout_p), bool(is_causal),
                    None if scale is None else float(scale), bool(enable_gqa), False)


from ._mha import (multi_head_attention_forward, _canonical_mask, _none_or_dtype,  # noqa: E402,F401
                   _mha_shape_check, _in_projection_packed, _in_projection)
