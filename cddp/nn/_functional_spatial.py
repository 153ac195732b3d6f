"""torch.nn.functional's convolution, pooling, padding and resampling functions (re-exported
by cddp.nn.functional): torch's signatures, defaults and argument errors over the C kernels in
csrc/nn/ (conv.c, pool.c, adaptive_pool.c, pad.c, interpolate.c, fold.c).

This layer only normalises arguments: unbatched inputs gain and lose their batch dim here,
padding strings become numbers, sizes and scale factors become output sizes.
"""
import math

from .. import _C

Tensor = _C.Tensor


def _check_tensor(x, name):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a cddp Tensor, not {type(x).__name__}")


def _ntuple(v, n, name):
    """int -> (v,)*n; a sequence of n ints is kept (torch's _single/_pair)."""
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an int or a tuple of ints, not bool")
    if isinstance(v, int):
        return (v,) * n
    try:
        t = tuple(v)
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of ints, not {type(v).__name__}") \
            from None
    if len(t) == 1 and n > 1:
        t = t * n
    return t


# ---- convolutions -----------------------------------------------------------------------

def _conv_padding(padding, weight, stride, dilation, nd):
    """padding=int/tuple/'valid'/'same' -> what _C._conv takes (per dim, or (left, right)
    pairs when 'same' needs more on the right for an even effective kernel)."""
    if not isinstance(padding, str):
        return padding
    if padding == "valid":
        return (0,) * nd
    if padding != "same":
        raise RuntimeError(f"Invalid padding string: '{padding}'")
    if any(s != 1 for s in _ntuple(stride, nd, "stride")):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    dil = _ntuple(dilation, nd, "dilation")
    if weight.dim() != nd + 2:
        return (0,) * nd                      # _C._conv reports the weight's shape
    pads = []
    for d in range(nd):
        total = dil[d] * (weight.shape[2 + d] - 1)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def _conv_nd(input, weight, bias, stride, padding, dilation, groups, nd):  # noqa: A002
    _check_tensor(input, "input")
    _check_tensor(weight, "weight")
    name = f"conv{nd}d"
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                           f"{name}, but got input of size: {list(input.shape)}")
    if weight.dim() != nd + 2:
        raise RuntimeError(f"{name}: expected a {nd + 2}D weight (out_channels, "
                           f"in_channels/groups, kernel...), but got weight of size: "
                           f"{list(weight.shape)}")
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    padding = _conv_padding(padding, weight, stride, dilation, nd)
    out = _C._conv(input, weight, bias, stride, padding, dilation, groups)
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """1-D cross-correlation over (N, C, L) or (C, L); im2col + GEMM in C."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """2-D cross-correlation over (N, C, H, W) or (C, H, W); im2col + GEMM in C."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 2)


def _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,  # noqa: A002
                       dilation, nd):
    _check_tensor(input, "input")
    _check_tensor(weight, "weight")
    name = f"conv_transpose{nd}d"
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                           f"{name}, but got input of size: {list(input.shape)}")
    if weight.dim() != nd + 2:
        raise RuntimeError(f"{name}: expected a {nd + 2}D weight (in_channels, "
                           f"out_channels/groups, kernel...), but got weight of size: "
                           f"{list(weight.shape)}")
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    out = _C._conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                             dilation)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,  # noqa: A002
                     groups=1, dilation=1):
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                              dilation, 1)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,  # noqa: A002
                     groups=1, dilation=1):
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                              dilation, 2)


# ---- pooling ----------------------------------------------------------------------------

def _pool_tuple(v, n, fn, what):
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * n
    t = tuple(v)
    if len(t) == 1:
        return t * n
    if len(t) != n:
        kind = "a single int, or a tuple of two ints" if n == 2 else "a single int"
        raise RuntimeError(f"{fn}: {what} must either be {kind}")
    return t


def _pool_args(fn, kernel_size, stride, padding, dilation, n=2):
    k = _pool_tuple(kernel_size, n, fn, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0) \
        else _pool_tuple(stride, n, fn, "stride")
    return k, s, _pool_tuple(padding, n, fn, "padding"), _pool_tuple(dilation, n, fn, "dilation")


def _check_pool1d_dims(input, fn):  # noqa: A002
    _check_tensor(input, "input")
    if input.dim() not in (2, 3):
        if fn == "max_pool1d":
            raise RuntimeError("max_pool1d: Expected 2D or 3D (batch mode) tensor with optional "
                               f"0 dim batch size for input, but got:{list(input.shape)}")
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.dim()}-dimensional "
                           f"tensor for argument #1 'self' (while checking arguments for {fn})")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False):
    """Max over windows of (N, C, H, W) or (C, H, W); indices are flat h*W + w per plane."""
    _check_tensor(input, "input")
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    out, idx = _C._max_pool2d(input, k, s, p, d, bool(ceil_mode))
    return (out, idx) if return_indices else out


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False):
    _check_pool1d_dims(input, "max_pool1d")
    k, s, p, d = _pool_args("max_pool1d", kernel_size, stride, padding, dilation, 1)
    out, idx = _C._max_pool2d(input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, (1,) + d,
                              bool(ceil_mode))
    out, idx = out.squeeze(-2), idx.squeeze(-2)
    return (out, idx) if return_indices else out


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False, return_indices=True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False, return_indices=True):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True, divisor_override=None):
    _check_tensor(input, "input")
    k, s, p, _ = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    return _C._avg_pool2d(input, k, s, p, bool(ceil_mode), bool(count_include_pad),
                          divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True):
    _check_pool1d_dims(input, "avg_pool1d")
    k, s, p, _ = _pool_args("avg_pool1d", kernel_size, stride, padding, 1, 1)
    return _C._avg_pool2d(input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, bool(ceil_mode),
                          bool(count_include_pad), None).squeeze(-2)


def _adaptive_size(input, output_size, n, fn):  # noqa: A002
    if isinstance(output_size, int) and not isinstance(output_size, bool):
        sizes = (output_size,) * n
    else:
        sizes = tuple(output_size)
        if len(sizes) != n:
            if n == 1:
                raise RuntimeError(f"{fn}() argument 'output_size' should contain one int "
                                   f"(got {len(sizes)})")
            raise RuntimeError(f"{fn}: output_size must be 2")
    # None keeps the input's size along that dim (torch's _list_with_default)
    return tuple(input.shape[input.dim() - n + i] if v is None else int(v)
                 for i, v in enumerate(sizes))


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    _check_tensor(input, "input")
    if input.dim() < 3:
        raise ValueError("Input dimension should be at least 3")
    return _C._adaptive_avg_pool2d(input, _adaptive_size(input, output_size, 2,
                                                         "adaptive_avg_pool2d"))


def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    _check_tensor(input, "input")
    if input.dim() < 3:
        raise ValueError("Input dimension should be at least 3")
    out, idx = _C._adaptive_max_pool2d(input, _adaptive_size(input, output_size, 2,
                                                             "adaptive_max_pool2d"))
    return (out, idx) if return_indices else out


def _check_adaptive1d(input, fn):  # noqa: A002
    _check_tensor(input, "input")
    if input.dim() not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.dim()}-dimensional "
                           f"tensor for argument #1 'self' (while checking arguments for {fn})")


def adaptive_avg_pool1d(input, output_size):  # noqa: A002
    _check_adaptive1d(input, "adaptive_avg_pool1d")
    o = _adaptive_size(input, output_size, 1, "adaptive_avg_pool1d")
    return _C._adaptive_avg_pool2d(input.unsqueeze(-2), (1,) + o).squeeze(-2)


def adaptive_max_pool1d(input, output_size, return_indices=False):  # noqa: A002
    _check_adaptive1d(input, "adaptive_max_pool1d")
    o = _adaptive_size(input, output_size, 1, "adaptive_max_pool1d")
    out, idx = _C._adaptive_max_pool2d(input.unsqueeze(-2), (1,) + o)
    out, idx = out.squeeze(-2), idx.squeeze(-2)
    return (out, idx) if return_indices else out
