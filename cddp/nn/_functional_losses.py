"""More of torch.nn.functional's losses: multi_margin_loss, multilabel_margin_loss,
triplet_margin_with_distance_loss — composed from cddp's differentiable tensor ops (each a C
kernel), re-exported by functional.py.

The hinge max(0, z) is relu(z): its gradient at z == 0 is 0, as torch's kernels count only
z > 0.
"""
from .. import _C
from .._ops import _autocast_fp32

Tensor = _C.Tensor


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _legacy(reduction, size_average, reduce):
    from .functional import _reduction
    return ("none", "mean", "sum")[_reduction(reduction, size_average, reduce)]


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,  # noqa: A002
                      reduce=None, reduction="mean"):
    """sum over i != y of max(0, margin - x[y] + x[i])^p * weight[y], divided by C."""
    reduction = _legacy(reduction, size_average, reduce)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    if input.dim() > 2 or input.numel() == 0:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch "
                           f"size, but got: {list(input.shape)}")
    c = input.shape[-1] if input.dim() else 1
    input, weight = _autocast_fp32(input, weight)
    x = input.reshape(-1, c)
    n = x.shape[0]
    if target.numel() != n or target.dim() > 1:
        raise RuntimeError(f"inconsistent target size, expected {n} but got "
                           f"{list(target.shape)}")
    t = target.reshape(n, 1)
    if t.numel() and (int(t.min().item()) < 0 or int(t.max().item()) >= c):
        raise RuntimeError("target out of range")
    z = (x - x.gather(1, t) + margin).relu()
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight.index_select(0, t.reshape(-1)).unsqueeze(1)
    z = z.masked_fill(_C.arange(c).unsqueeze(0) == t, 0.0)     # the i == y term is not summed
    loss = z.sum(1) / c
    if reduction == "none":
        return loss if target.dim() > 0 else loss.reshape(())
    return _reduce(loss, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None,  # noqa: A002
                           reduction="mean"):
    """sum over target classes j (the entries of target before its first -1) and non-target
    classes i of max(0, 1 - (x[j] - x[i])), divided by C; one (N, C, C) pass."""
    reduction = _legacy(reduction, size_average, reduce)
    if input.dim() > 2 or tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    c = input.shape[-1] if input.dim() else 1
    input, = _autocast_fp32(input)
    x, t = input.reshape(-1, c), target.reshape(-1, c)
    if t.numel() and (int(t.min().item()) < -1 or int(t.max().item()) >= c):
        raise RuntimeError("target out of range")
    listed = (t >= 0).to(_C.int64).cumprod(1)                      # (N, C): before the first -1
    tc = t.clamp(min=0)
    is_target = _C.zeros(tuple(t.shape), dtype=_C.int64).scatter_add(1, tc, listed) > 0
    z = (1.0 - x.gather(1, tc).unsqueeze(2) + x.unsqueeze(1)).relu()   # (N, j, i)
    pairs = (listed > 0).unsqueeze(2).logical_and(is_target.logical_not().unsqueeze(1))
    loss = _C.where(pairs, z, 0.0).sum((1, 2)) / c
    if reduction == "none":
        return loss if input.dim() > 1 else loss.reshape(())
    return _reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """max(0, margin + d(a, p) - d(a, n)), d pairwise_distance unless given; swap uses
    min(d(a, n), d(p, n))."""
    from .functional import pairwise_distance
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a_dim, p_dim, n_dim = anchor.dim(), positive.dim(), negative.dim()
    if not (a_dim == p_dim and p_dim == n_dim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {a_dim}D, "
                           f"positive {p_dim}D, and negative {n_dim}D inputs")
    if distance_function is None:
        distance_function = pairwise_distance
    dist_pos = distance_function(anchor, positive)
    dist_neg = distance_function(anchor, negative)
    if swap:
        dist_neg = _C.minimum(dist_neg, distance_function(positive, negative))
    loss = (margin + dist_pos - dist_neg).clamp_min(0)
    return _reduce(loss, reduction)
