"""cddp.nn.functional — torch.nn.functional's signatures over C kernels.

Losses are fused C passes (csrc/nn/loss.c); linear is one GEMM with the bias fused
(csrc/nn_linear.c); normalization layers are csrc/nn/norm/, activations csrc/nn/activation.c.
This layer only maps torch's keyword arguments onto them.
"""
import warnings

from .. import _C
from .._ops import _autocast_fp32, _autocast_lower, autocast_fp32_op
from ..autograd.grad_mode import no_grad

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


def _softmax_dim(ndim, name="softmax"):
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        dim = _softmax_dim(input.dim())
    return input.softmax(dim) if dtype is None else input.to(dtype).softmax(dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        dim = _softmax_dim(input.dim(), "log_softmax")
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


def _float_target(input, target):  # noqa: A002
    """An integer target of a regression loss, as torch promotes it: the input's dtype (the
    blitz tutorial's MSELoss over torch.arange)."""
    if input.is_floating_point() and not target.is_floating_point() and \
            target.dtype != _C.bool:
        return target.to(input.dtype)
    return target


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):  # noqa: A002
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    _warn_broadcast(input, target)
    return _C._mse_loss(input, _float_target(input, target),
                        _reduction(reduction, size_average, reduce))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    _check_tensor(input, "input")
    _check_tensor(target, "target")
    _warn_broadcast(input, target)
    return _C._l1_loss(input, _float_target(input, target),
                       _reduction(reduction, size_average, reduce))


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
    input, target = _autocast_fp32(input, target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _warn_broadcast(input, target)
    red = _reduction(reduction, size_average, reduce)
    if beta == 0.0:                  # torch: beta == 0 is exactly l1_loss
        return _C._l1_loss(input, target, red)
    return _C._pointwise_loss(_SMOOTH_L1, input, target, None, red, float(beta), 0.0, 0)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):  # noqa: A002
    _check_tensors(input=input, target=target)
    input, target = _autocast_fp32(input, target)
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
    input, target = _autocast_fp32(input, target)
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
    input, target = _autocast_fp32(input, target)
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
    input, target = _autocast_fp32(input, target)
    return _C._pointwise_loss(_HINGE, input, target, None,
                              _reduction(reduction, size_average, reduce), float(margin), 0.0, 0)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    _check_tensors(input=input, target=target)
    input, target = _autocast_fp32(input, target)
    if target.requires_grad and _C.is_grad_enabled():
        raise RuntimeError("The function 'soft_margin_loss' is not differentiable with respect "
                           "to argument 'target'. This input cannot have requires_grad True.")
    return _C._pointwise_loss(_SOFT_MARGIN, input, target, None,
                              _reduction(reduction, size_average, reduce), 0.0, 0.0, 0)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    _check_tensors(input1=input1, input2=input2, target=target)
    input1, input2, target = _autocast_fp32(input1, input2, target)
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
    input1, input2, target = _autocast_fp32(input1, input2, target)
    return _C._row_loss(_COSINE_EMBEDDING, input1, input2, target,
                        _reduction(reduction, size_average, reduce), float(margin), 2.0, 0.0, 0)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    _check_tensors(anchor=anchor, positive=positive, negative=negative)
    anchor, positive, negative = _autocast_fp32(anchor, positive, negative)
    return _C._row_loss(_TRIPLET, anchor, positive, negative,
                        _reduction(reduction, size_average, reduce), float(margin), float(p),
                        float(eps), int(bool(swap)))
# ---- float16 / bfloat16 through float32 kernels ---------------------------------------------
# The fused C kernels below (layer_norm, the norms, prelu, attention) compute float32/float64.
# For float16/bfloat16 inputs they run on float32 copies and the result is rounded once to the
# input's dtype: torch's CPU kernels accumulate these dtypes in float32 too. The casts are
# autograd ops, so gradients come back in each tensor's own dtype.

def _reduced(t):
    return isinstance(t, Tensor) and (t.dtype == _C.float16 or t.dtype == _C.bfloat16)


def _f32(t):
    return t.float() if _reduced(t) else t


def _stats_f32(t):
    """Running stats the kernel updates in place: float32 ones as they are, reduced ones as
    float32 copies that _stats_back writes back (rounded) after the call."""
    return t.detach().float() if _reduced(t) else t


def _stats_back(t, t32):
    if t is not None and t32 is not t:
        with no_grad():
            t.copy_(t32)


# ---- transformer stack: layer_norm, embedding, attention (csrc/nn/layer_norm.c, embedding.c,
# sdpa.c; multi_head_attention_forward and its mask helpers in _mha.py) --------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """Normalize over the trailing normalized_shape dims: one fused C pass per row."""
    _check_tensor(input, "input")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if _reduced(input):
        return _C._layer_norm(input.float(), tuple(normalized_shape), _f32(weight), _f32(bias),
                              float(eps)).to(input.dtype)
    return _C._layer_norm(input, tuple(normalized_shape), weight, bias, float(eps))


_sparse_warned = []


def _mark_row_sparse(param):
    if param.grad is not None:
        param.grad._sparse_dim = 1


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
    if sparse and weight.requires_grad and "_sparse_rows_hook" not in weight.__dict__:
        # the dense gradient answers _indices() / _values() / _nnz() by rows, as torch's
        # sparse gradient (one sparse dim) does once coalesced (cddp/_compat.py)
        weight._sparse_rows_hook = weight.register_post_accumulate_grad_hook(_mark_row_sparse)
    if max_norm is not None:
        # torch's embedding_renorm_ under no_grad: rows used by input scaled to max_norm
        _C._embedding_renorm_(weight, input, float(max_norm), float(norm_type))
    return _C._embedding(weight, input, int(padding_idx), bool(scale_grad_by_freq))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(Q K^T * scale + mask) V with dropout on the weights: one C kernel forward and
    one backward (csrc/nn/sdpa.c). An attn_mask together with is_causal is combined with the
    causal (top-left tril) mask, as torch 2.13 does on the CPU."""
    query, key, value = _autocast_lower(query, key, value)
    if attn_mask is not None and is_causal:
        tril = _C.ones(query.shape[-2], key.shape[-2], dtype=_C.bool).tril()
        attn_mask = (attn_mask & tril if attn_mask.dtype == _C.bool
                     else attn_mask.masked_fill(~tril, float("-inf")))
        is_causal = False
    if _reduced(query):
        mask = _f32(attn_mask)
        return _C._sdpa(query.float(), _f32(key), _f32(value), mask, float(dropout_p),
                        bool(is_causal), None if scale is None else float(scale),
                        bool(enable_gqa), False).to(query.dtype)
    return _C._sdpa(query, key, value, attn_mask, float(dropout_p), bool(is_causal),
                    None if scale is None else float(scale), bool(enable_gqa), False)


from ._mha import (multi_head_attention_forward, _canonical_mask, _none_or_dtype,  # noqa: E402,F401
                   _mha_shape_check, _in_projection_packed, _in_projection)
# ---- normalization (csrc/nn/norm/: fused C passes forward and backward) --------------------

def _verify_batch_size(size):
    size_prods = size[0]
    for i in range(len(size) - 2):
        size_prods *= size[i + 2]
    if size_prods == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _verify_spatial_size(size):
    size_prods = 1
    for i in range(2, len(size)):
        size_prods *= size[i]
    if size_prods == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {size}")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,  # noqa: A002
               momentum=0.1, eps=1e-5):
    """Per-channel normalization over (N, *) with running stats updated in place (training)."""
    _check_tensor(input, "input")
    if training:
        _verify_batch_size(input.size())
    if _reduced(input):       # (torch's CPU: float16 input with float32 or float16 parameters)
        rm, rv = _stats_f32(running_mean), _stats_f32(running_var)
        out = _C._batch_norm(input.float(), _f32(weight), _f32(bias), rm, rv, bool(training),
                             float(momentum), float(eps))
        _stats_back(running_mean, rm)
        _stats_back(running_var, rv)
        return _C._keep_channels_last(out.to(input.dtype), input)
    # a channels-last input's result is channels-last, as torch's (nn/_functional_spatial.py)
    return _C._keep_channels_last(_C._batch_norm(input, weight, bias, running_mean, running_var,
                                                 bool(training), float(momentum), float(eps)),
                                  input)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,  # noqa: A002
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """torch's recipe: batch norm of the (1, N*C, *) view with per-instance parameters and
    running stats, which are then averaged back over the batch."""
    _check_tensor(input, "input")
    if use_input_stats:
        _verify_spatial_size(input.size())
    elif running_mean is None or running_var is None:
        raise RuntimeError("Expected running_mean and running_var to be defined when "
                           "use_input_stats is false")
    b, c = input.shape[0], input.shape[1]
    if _reduced(input):
        rm, rv = _stats_f32(running_mean), _stats_f32(running_var)
        out = instance_norm(input.float(), rm, rv, _f32(weight), _f32(bias), use_input_stats,
                            momentum, eps)
        _stats_back(running_mean, rm)
        _stats_back(running_var, rv)
        return out.to(input.dtype)

    def rep(t):
        return None if t is None else t.expand(b, t.numel()).reshape(-1)

    with no_grad():
        rm = None if running_mean is None else rep(running_mean).clone()
        rv = None if running_var is None else rep(running_var).clone()
    x = input.contiguous().view(1, b * c, *input.shape[2:])
    out = _C._batch_norm(x, rep(weight), rep(bias), rm, rv, bool(use_input_stats),
                         float(momentum), float(eps))
    with no_grad():
        if running_mean is not None:
            running_mean.copy_(rm.view(b, c).mean(0))
        if running_var is not None:
            running_var.copy_(rv.view(b, c).mean(0))
    return out.view(input.shape)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):  # noqa: A002
    _check_tensor(input, "input")
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    _verify_batch_size([input.size(0) * input.size(1) // num_groups, num_groups]
                       + list(input.size()[2:]))
    if _reduced(input):
        out = _C._group_norm(input.float(), int(num_groups), _f32(weight), _f32(bias),
                             float(eps)).to(input.dtype)
    else:
        out = _C._group_norm(input, int(num_groups), weight, bias, float(eps))
    return _C._keep_channels_last(out, input)          # as batch_norm


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):  # noqa: A002
    """input / max(||input||_p over dim, eps)."""
    denom = input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)
    if out is None:
        return input / denom
    return out.copy_(input / denom)


def _broadcast_shape(a, b):
    a, b = tuple(a), tuple(b)
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {i}")
        out.append(y if x == 1 else x)
    return tuple(out)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """torch's formula: sum over dim of (x1 / max(||x1||, eps)) * (x2 / max(||x2||, eps)), the
    clamp applied without autograd (the gradient flows as if unclamped, as torch's does)."""
    _check_tensor(x1, "x1")
    _check_tensor(x2, "x2")
    fl = [t.dtype for t in (x1, x2) if t.is_floating_point()]
    if not fl:
        raise RuntimeError("expected common dtype to be floating point, yet common dtype is "
                           + {_C.int64: "Long", _C.int32: "Int", _C.bool: "Bool"}.get(
                               x1.dtype if x1.dim() or not x2.dim() else x2.dtype, "Long"))
    common = _C.float64 if _C.float64 in fl else fl[0]
    x1 = x1 if x1.dtype == common else x1.to(common)
    x2 = x2 if x2.dtype == common else x2.to(common)
    shape = _broadcast_shape(x1.shape, x2.shape)
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = x1.norm(2, dim, keepdim=True).clone()
    n2 = x2.norm(2, dim, keepdim=True).clone()
    with no_grad():
        n1.clamp_(min=eps)
        n2.clamp_(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):  # noqa: A002
    """input / (k + alpha * mean of input^2 over a window of `size` channels)^beta; the window
    is [c - size//2, c + (size-1)//2], zero-padded and divided by size (torch's avg_pool)."""
    _check_tensor(input, "input")
    dim = input.dim()
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          input "
                         f"(got {dim} dimensions)")
    if input.numel() == 0:
        return input
    sq = input.mul(input)
    n, c, rest = input.shape[0], input.shape[1], tuple(input.shape[2:])
    parts = [_C.zeros((n, size // 2) + rest, dtype=input.dtype), sq,
             _C.zeros((n, (size - 1) // 2) + rest, dtype=input.dtype)]
    padded = _C.cat([p for p in parts if p.shape[1]], 1)
    win = padded[:, 0:c]
    for i in range(1, size):                 # size shifted slices: exact sums, no cumsum
        win = win + padded[:, i:i + c]
    div = win.mul(alpha / size).add(k).pow(beta)
    return input / div


# ---- activations (csrc/nn/activation.c: one C kernel each way) ------------------------------

def leaky_relu(input, negative_slope=0.01, inplace=False):  # noqa: A002
    return _C._leaky_relu(input, negative_slope, inplace)


def prelu(input, weight):  # noqa: A002
    input, weight = _autocast_lower(input, weight)
    if _reduced(input) and isinstance(weight, Tensor) and weight.dtype == input.dtype:
        return _C._prelu(input.float(), weight.float()).to(input.dtype)
    return _C._prelu(input, weight)


def gelu(input, approximate="none"):  # noqa: A002
    if approximate == "none":
        return _C._gelu(input, False)
    if approximate == "tanh":
        return _C._gelu_tanh(input, False)
    raise RuntimeError("approximate argument must be either none or tanh.")


def silu(input, inplace=False):  # noqa: A002
    return _C._silu(input, inplace)


def elu(input, alpha=1.0, inplace=False):  # noqa: A002
    return _C._elu(input, alpha, 1.0, 1.0, inplace)


def selu(input, inplace=False):  # noqa: A002
    return _C._selu(input, inplace)


def celu(input, alpha=1.0, inplace=False):  # noqa: A002
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _C._celu(input, alpha, 1.0, 1.0 / alpha, inplace)


def softplus(input, beta=1.0, threshold=20.0):  # noqa: A002
    return _C._softplus(input, beta, threshold, False)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):  # noqa: A002
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    _check_tensor(input, "input")
    if input.dtype == _C.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if not input.is_floating_point():       # torch clamps integer tensors, keeping the dtype
        lo, hi = int(min_val), int(max_val)
        return input.clamp_(lo, hi) if inplace else input.clamp(lo, hi)
    return _C._hardtanh(input, min_val, max_val, inplace)


def relu6(input, inplace=False):  # noqa: A002
    return hardtanh(input, 0.0, 6.0, inplace)


def mish(input, inplace=False):  # noqa: A002
    return _C._mish(input, inplace)


def hardswish(input, inplace=False):  # noqa: A002
    return _C._hardswish(input, inplace)


def hardsigmoid(input, inplace=False):  # noqa: A002
    return _C._hardsigmoid(input, inplace)


# in-place forms (torch.nn.functional.relu_ ...): the inplace=True paths above, so the leaf
# check, the version counter and the backward are the kernels' own

def relu_(input):  # noqa: A002
    """relu in place; returns input."""
    return relu(input, inplace=True)


def elu_(input, alpha=1.0):  # noqa: A002
    """elu in place; returns input."""
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):  # noqa: A002
    """leaky_relu in place; returns input."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):  # noqa: A002
    """hardtanh in place; returns input. Unlike hardtanh, torch's hardtanh_ takes
    min_val > max_val and then gives max_val everywhere (clamp's rule), so that case is a
    clamp_ here rather than hardtanh's ValueError."""
    if min_val > max_val:
        _check_tensor(input, "input")
        if input.dtype == _C.bool:
            raise RuntimeError("Bool inputs not supported for hardtanh")
        if not input.is_floating_point():
            min_val, max_val = int(min_val), int(max_val)
        return input.clamp_(min_val, max_val)
    return hardtanh(input, min_val, max_val, inplace=True)


def selu_(input):  # noqa: A002
    """selu in place; returns input."""
    return selu(input, inplace=True)


def celu_(input, alpha=1.0):  # noqa: A002
    """celu in place; returns input."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return celu(input, alpha, inplace=True)


def softsign(input):  # noqa: A002
    return input / (input.abs() + 1)


def tanhshrink(input):  # noqa: A002
    return input - input.tanh()


# ---- channel-wise and alpha dropout (torch's recipe: one Bernoulli draw per (N, C) plane) ---

_ALPHA = 1.7580993408473766      # selu's -scale * alpha: where alpha dropout sends dropped units


def _dropout_impl(input, p, training, inplace, feature, alpha, nbatch=2):  # noqa: A002
    """torch's _dropout_impl. feature: noise of shape input.shape[:nbatch] + (1,) * rest."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 0.0 or not training or input.numel() == 0:
        return input
    if p == 1.0:
        zero = _C.zeros((), dtype=input.dtype)
        return input.mul_(zero) if inplace else input * zero
    if feature:
        if input.dim() < 2:
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        shape = tuple(input.shape[:nbatch]) + (1,) * (input.dim() - nbatch)
        noise = _C.empty(shape, dtype=input.dtype)
    else:
        noise = _C.empty_like(input)
    noise.bernoulli_(1.0 - p)
    b = None
    if alpha:
        a = 1.0 / ((_ALPHA * _ALPHA * p + 1) * (1 - p)) ** 0.5
        b = noise.add(-1).mul_(_ALPHA * a).add_(_ALPHA * a * p)
        noise.mul_(a)
    else:
        noise.div_(1.0 - p)
    out = input.mul_(noise) if inplace else input * noise
    return out if b is None else out.add_(b)


def dropout1d(input, p=0.5, training=True, inplace=False):  # noqa: A002
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.dim() not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.dim()}D input. "
            "Note that dropout1d exists to provide channel-wise dropout on inputs with 1 "
            "spatial dimension, a channel dimension, and an optional batch dimension "
            "(i.e. 2D or 3D inputs).")
    return _dropout_impl(input, p, training, inplace, True, False, 2 if input.dim() == 3 else 1)


def dropout2d(input, p=0.5, training=True, inplace=False):  # noqa: A002
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    inp_dim = input.dim()
    if inp_dim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {inp_dim}-D input to dropout2d, which is deprecated "
            "and will result in an error in a future release. To retain the behavior "
            "and silence this warning, please use dropout instead. Note that dropout2d "
            "exists to provide channel-wise dropout on inputs with 2 spatial dimensions, "
            "a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).",
            stacklevel=2)
    if inp_dim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
            "1D dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2)
    return _dropout_impl(input, p, training, inplace, True, False)


def dropout3d(input, p=0.5, training=True, inplace=False):  # noqa: A002
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    inp_dim = input.dim()
    if inp_dim not in (4, 5):
        warnings.warn(
            f"dropout3d: Received a {inp_dim}-D input to dropout3d, which is deprecated "
            "and will result in an error in a future release. To retain the behavior "
            "and silence this warning, please use dropout instead. Note that dropout3d "
            "exists to provide channel-wise dropout on inputs with 3 spatial dimensions, "
            "a channel dimension, and an optional batch dimension (i.e. 4D or 5D inputs).",
            stacklevel=2)
    return _dropout_impl(input, p, training, inplace, True, False, 2 if inp_dim == 5 else 1)


def alpha_dropout(input, p=0.5, training=False, inplace=False):  # noqa: A002
    return _dropout_impl(input, p, training, inplace, False, True)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):  # noqa: A002
    return _dropout_impl(input, p, training, inplace, True, True)


# convolution, pooling, padding and resampling (csrc/nn/: conv, pool, pad, interpolate, fold)
from ._functional_spatial import (  # noqa: E402,F401
    _ntuple, conv1d, conv2d, conv_transpose1d, conv_transpose2d, max_pool1d, max_pool2d,
    max_pool1d_with_indices, max_pool2d_with_indices, avg_pool1d, avg_pool2d,
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool1d, adaptive_max_pool2d, pad,
    interpolate, upsample, upsample_nearest, upsample_bilinear, pixel_shuffle, pixel_unshuffle,
    unfold, fold, grid_sample, affine_grid)
# volumetric conv, transposed conv and pooling: composites of the 2-D kernels
from ._functional_3d import (  # noqa: E402,F401
    conv3d, conv_transpose3d, max_pool3d, max_pool3d_with_indices, avg_pool3d, adaptive_avg_pool3d,
    adaptive_max_pool3d, adaptive_max_pool3d_with_indices)
from ._functional_spatial import _keeps_channels_last  # noqa: E402

# torch's CPU prelu keeps a channels-last input's layout too (batch_norm and group_norm
# above call _C._keep_channels_last themselves: they run once per layer and step)
prelu = _keeps_channels_last(prelu)

# activations, layers and losses composed from tensor ops (one file each)
from ._functional_activation import (  # noqa: E402,F401
    glu, logsigmoid, softmin, softshrink, hardshrink, threshold, threshold_, rrelu, rrelu_,
    gumbel_softmax)
from ._functional_layers import (  # noqa: E402,F401
    rms_norm, pairwise_distance, pdist, bilinear, channel_shuffle, max_unpool1d, max_unpool2d,
    embedding_bag)
from ._functional_losses import (  # noqa: E402,F401
    multi_margin_loss, multilabel_margin_loss, triplet_margin_with_distance_loss)
from ._functional_ctc import ctc_loss  # noqa: E402,F401  (csrc/nn/ctc.c)
def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):  # noqa: A002
    """(output, indices) of adaptive_max_pool1d, whatever return_indices says (torch's)."""
    return adaptive_max_pool1d(input, output_size, return_indices=True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):  # noqa: A002
    """(output, indices) of adaptive_max_pool2d, whatever return_indices says (torch's)."""
    return adaptive_max_pool2d(input, output_size, return_indices=True)


from ._functional_fractional import (  # noqa: E402,F401  (gathers of the input)
    fractional_max_pool2d, fractional_max_pool2d_with_indices, fractional_max_pool3d,
    fractional_max_pool3d_with_indices)


# ---- power-average pooling and 3-D unpooling, composed from the pooling ops above -------------

def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nd):  # noqa: A002
    """torch's definition: s = avg_pool(x ** p); (sign(s) * relu(|s|) * kernel volume) ** (1/p).
    The sign * relu keeps a window whose p-th powers sum to zero at zero with a zero gradient;
    p = +-inf is the max (min) of |x| over each window."""
    avg = (avg_pool1d, avg_pool2d, avg_pool3d)[nd - 1]
    if isinstance(norm_type, (int, float)) and abs(norm_type) == float("inf"):
        mx = (max_pool1d, max_pool2d, max_pool3d)[nd - 1]
        if norm_type > 0:
            return mx(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
        return -mx(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    k = _ntuple(kernel_size, nd, "kernel_size")
    if len(k) != nd:
        raise ValueError(f"lp_pool{nd}d: kernel_size must be an int or a tuple of {nd} ints, "
                         f"got {kernel_size!r}")
    volume = 1
    for v in k:
        volume *= v
    if stride is not None:
        out = avg(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    else:
        out = avg(input.pow(norm_type), kernel_size, padding=0, ceil_mode=ceil_mode)
    return (out.sign() * relu(out.abs())).mul(volume).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """Power-average pooling over (N, C, L) or (C, L): (sum over the window of x ** p) ** (1/p)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """Power-average pooling over (N, C, H, W) or (C, H, W)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """Power-average pooling over (N, C, D, H, W) or (C, D, H, W)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


@autocast_fp32_op
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None):
    """The inverse of max_pool3d(return_indices=True): (N, C, D, H, W) or (C, D, H, W);
    indices are flat d*H*W + h*W + w per volume, as max_pool3d gives them."""
    from ._functional_layers import _max_unpool_nd
    return _max_unpool_nd(input, indices, kernel_size, stride, padding, output_size, 3)
