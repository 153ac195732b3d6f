"""More of torch.nn.functional's layers: rms_norm, pairwise_distance, pdist, bilinear,
channel_shuffle, max_unpool1d/2d, embedding_bag — composed from cddp's differentiable tensor ops
(each a C kernel), re-exported by functional.py.

Decisions: max_unpool scatters into a zero output (scatter's backward gathers the gradient back,
as torch's); embedding_bag lays the bags out dense as (bags, longest bag, dim) with a validity
mask and reduces over the middle dim, so sum, mean and max share one gather and their backwards
are the gather's index_add.
"""
import math

from .. import _C
from .._ops import autocast_fp32_op
from ..autograd.grad_mode import no_grad

Tensor = _C.Tensor


_TORCH_TYPE_NAMES = {"cddp.int64": "Long", "cddp.int32": "Int", "cddp.int16": "Short",
                     "cddp.int8": "Char", "cddp.uint8": "Byte", "cddp.bool": "Bool"}


def _reduced(t):
    return t.dtype == _C.float16 or t.dtype == _C.bfloat16


def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    """x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight; eps=None
    means finfo(input.dtype).eps, as torch's. float16/bfloat16 compute in float32."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    shape = tuple(normalized_shape)
    nd = len(shape)
    if input.dim() < nd or tuple(input.shape[input.dim() - nd:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(str(s) for s in shape)}], but got input of size"
                           f"{list(input.shape)}")
    if not input.is_floating_point():
        raise NotImplementedError(f'"rms_norm" not implemented for '
                                  f"'{_TORCH_TYPE_NAMES.get(str(input.dtype), input.dtype)}'")
    x = input.float() if _reduced(input) else input
    if eps is None:              # the eps of the dtype computed in (float32 for half types)
        from .._finfo import finfo
        eps = finfo(x.dtype).eps
    dims = tuple(range(-nd, 0))
    out = x * x.mul(x).mean(dims, keepdim=True).add(eps).rsqrt()
    if weight is not None:
        out = out * (weight.float() if _reduced(weight) else weight)
    return out.to(input.dtype) if _reduced(input) else out


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last dim (torch adds eps before the norm)."""
    return (x1 - x2 + eps).norm(p, -1, keepdim=keepdim)


def pdist(input, p=2):  # noqa: A002
    """||x_i - x_j||_p for every row pair i < j, in row-major order: (N * (N - 1) / 2,)."""
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.shape[0]
    r = _C.arange(n)
    rows, cols = r.unsqueeze(1).expand(n, n), r.unsqueeze(0).expand(n, n)
    upper = cols > rows
    i, j = rows[upper], cols[upper]
    return (input.index_select(0, i) - input.index_select(0, j)).norm(p, 1)


def bilinear(input1, input2, weight, bias=None):
    """y_o = x1 . W_o . x2 + b_o over the leading (batch) dims: x1 @ W viewed (in1, out*in2),
    then a product with x2 summed over in2 — one GEMM and one reduction."""
    if input1.dim() != input2.dim():
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.dim()} "
                           f"and {input2.dim()}")
    if tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise RuntimeError(f"bilinear(): input batch dimensions do not match: got "
                           f"{list(input1.shape)} and {list(input2.shape)}")
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got "
                           f"{input1.shape[-1]} but expected {in1}")
    if input2.shape[-1] != in2:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got "
                           f"{input2.shape[-1]} but expected {in2}")
    lead = tuple(input1.shape[:-1])
    x1, x2 = input1.reshape(-1, in1), input2.reshape(-1, in2)
    t = x1.matmul(weight.permute(1, 0, 2).reshape(in1, out_f * in2))      # (N, out*in2)
    y = (t.view(-1, out_f, in2) * x2.unsqueeze(1)).sum(-1)                 # (N, out)
    if bias is not None:
        y = y + bias
    return y.reshape(lead + (out_f,))


def channel_shuffle(input, groups):  # noqa: A002
    """(N, g * k, *) -> (N, k * g, *): channel c = i * k + j moves to j * g + i."""
    if input.dim() <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                           f"sizes {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{groups}")
    c = input.shape[1]
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {groups} groups.")
    n, rest = input.shape[0], tuple(input.shape[2:])
    return input.reshape((n, groups, c // groups) + rest).transpose(1, 2).reshape(
        (n, c) + rest)


# ---- max_unpool ------------------------------------------------------------------------------

def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _unpool_output_size(input, kernel_size, stride, padding, output_size):  # noqa: A002
    """torch's rule: the pooled size inverted, or output_size checked within one stride."""
    nk = len(kernel_size)
    default = [(input.shape[input.dim() - nk + d] - 1) * stride[d] + kernel_size[d]
               - 2 * padding[d] for d in range(nk)]
    if output_size is None:
        return default
    output_size = list(output_size)
    if len(output_size) == nk + 2:
        output_size = output_size[2:]
    if len(output_size) != nk:
        raise ValueError(f"output_size should be a sequence containing {nk} or {nk + 2} "
                         f"elements, but it has a length of '{len(output_size)}'")
    for d in range(nk):
        lo, hi = default[d] - stride[d], default[d] + stride[d]
        if not lo < output_size[d] < hi:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between '
                             f"{lo} and {hi})")
    return output_size


def _max_unpool(input, indices, size, nbatch_dims):  # noqa: A002
    """Scatter input's values to their flat spatial indices of a zero (N, C, *size) output."""
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({list(input.shape)}) but got indices tensor with shape: "
                           f"{list(indices.shape)}")
    lead = tuple(input.shape[:nbatch_dims])
    plane = math.prod(size)
    x = input.reshape(lead + (-1,))
    idx = indices.reshape(lead + (-1,))
    if idx.numel():
        lo, hi = int(idx.min().item()), int(idx.max().item())
        if lo < 0 or hi >= plane:
            bad = lo if lo < 0 else hi
            raise RuntimeError(f"Found an invalid max index: {bad} (output volumes are of size "
                               f"{'x'.join(str(s) for s in size)}")
    out = _C.zeros(lead + (plane,), dtype=input.dtype).scatter(-1, idx, x)
    return out.view(lead + tuple(size))


def _max_unpool_nd(input, indices, kernel_size, stride, padding, output_size, nd):  # noqa: A002
    """max_unpool1d / 2d: the spatial output size from the pooling geometry, then the scatter."""
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Input to max_unpooling{nd}d should be a {nd + 1}d or {nd + 2}d "
                           f"Tensor, but got a tensor with {input.dim()} dimensions.")
    kernel_size = _tuple(kernel_size, nd)
    stride = _tuple(stride, nd) if stride is not None else kernel_size
    padding = _tuple(padding, nd)
    size = _unpool_output_size(input, kernel_size, stride, padding, output_size)
    return _max_unpool(input, indices, size, input.dim() - nd)


@autocast_fp32_op
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None):
    """The inverse of max_pool2d(return_indices=True): (N, C, H, W) or (C, H, W)."""
    return _max_unpool_nd(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None):
    """The inverse of max_pool1d(return_indices=True): (N, C, L) or (C, L)."""
    return _max_unpool_nd(input, indices, kernel_size, stride, padding, output_size, 1)


# ---- embedding_bag ---------------------------------------------------------------------------

_BAG_MODES = ("sum", "mean", "max")


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,  # noqa: A002
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """Sums, means or maxes of bags of embedding rows. input (B, L): B bags of L indices;
    input (n,) with offsets (B,) (or (B + 1,) with include_last_offset): bag b is
    input[offsets[b]:offsets[b + 1]]. Indices equal to padding_idx are left out of their bag
    (not counted by mean); an empty bag gives zeros. per_sample_weights (mode 'sum') scale each
    row before the sum."""
    from .functional import embedding
    if weight.dtype == _C.int64 and input.is_floating_point():
        import warnings
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage "
                      "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
                      "`embedding_bag(input, weight, ...)`.", stacklevel=2)
        weight, input = input, weight
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is "
                         f"not None, then it must have the same shape as the input "
                         f"({input.shape})")
    if weight.dim() != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.dim()}")
    in_ndim = input.dim()
    if in_ndim not in (1, 2):
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{in_ndim}")
    if in_ndim == 1:
        # flat indices: the bag boundaries must come from a 1-D offsets tensor
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        offsets_ndim = offsets.dim()
        if offsets_ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        # (B, L) indices: every row is one bag of equal length; flatten and synthesise offsets
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated "
                             "is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets)}")
        bag_len = max(input.shape[1], 1)
        offsets = _C.arange(0, input.numel(), bag_len, dtype=input.dtype)
        include_last_offset = False
        input = input.flatten()
        per_sample_weights = (None if per_sample_weights is None
                              else per_sample_weights.flatten())
    if mode not in _BAG_MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max":
        if scale_grad_by_freq:
            raise ValueError("max mode does not support scaling the gradient by the frequency")
        if sparse:
            raise ValueError("max mode does not support sparse weights")
    if max_norm is not None:
        with no_grad():
            _C._embedding_renorm_(weight, input, float(max_norm), float(norm_type))
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. "
                                  "per_sample_weights is only supported for mode='sum' "
                                  f"(got mode='{mode}'). Please open a feature request on "
                                  "GitHub.")
    num = weight.shape[0]
    if padding_idx is not None:
        if padding_idx > 0 and padding_idx >= num or padding_idx < -num:
            raise RuntimeError("padding_idx must be within the number of embeddings, -"
                               f"{num} through {num - 1}, but got {padding_idx}")
        padding_idx %= num
    offsets = offsets.to(_C.int64)
    n = input.numel()
    if offsets.numel() and int(offsets[0].item()) != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           f"has to start from position 0. However, got {int(offsets[0].item())}")
    if include_last_offset:
        starts, ends = offsets[:-1], offsets[1:]
    else:
        starts = offsets
        ends = _C.cat([offsets[1:], _C.tensor([n], dtype=_C.int64)])
    lengths = (ends.clamp(max=n) - starts).clamp(min=0)
    bags, dim = starts.numel(), weight.shape[1]
    longest = int(lengths.max().item()) if bags else 0
    if n == 0 or longest == 0:
        return _C.zeros((bags, dim), dtype=weight.dtype)
    # the (bags, longest) positions into input; padded slots point at a real position and
    # are masked out (where() passes no gradient to them)
    slot = _C.arange(longest).unsqueeze(0)                                   # (1, L)
    valid = slot < lengths.unsqueeze(1)                                      # (B, L)
    pos = (starts.unsqueeze(1) + slot).clamp(max=n - 1).reshape(-1)          # (B*L,)
    if padding_idx is not None:
        valid = valid.logical_and(input.index_select(0, pos).view(bags, longest) != padding_idx)
    try:
        rows = embedding(input, weight, None, None, 2.0, scale_grad_by_freq, sparse)  # (n, D)
    except IndexError:                  # embedding's error; torch's bag raises RuntimeError
        bad = ((input < 0) | (input >= num)).nonzero()[0, 0]
        raise RuntimeError(f"Index {int(bad)} of input takes value {int(input[bad])} which is "
                           f"not in the valid range [0, {num})") from None
    rows = rows.index_select(0, pos).view(bags, longest, dim)                     # (B, L, D)
    mask = valid.unsqueeze(2)
    if mode == "max":
        best = _C.where(mask, rows, float("-inf")).max(1)[0]
        return _C.where(valid.any(1, keepdim=True), best, 0.0)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.index_select(0, pos).view(bags, longest, 1)
    total = _C.where(mask, rows, 0.0).sum(1)
    if mode == "sum":
        return total
    count = valid.sum(1, keepdim=True).clamp(min=1).to(total.dtype)
    return total / count
