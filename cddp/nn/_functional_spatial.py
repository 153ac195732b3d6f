"""torch.nn.functional's convolution, pooling, padding and resampling functions (re-exported
by cddp.nn.functional): torch's signatures, defaults and argument errors over the C kernels in
csrc/nn/ (conv.c, pool.c, adaptive_pool.c, pad.c, interpolate.c, fold.c).

This layer only normalises arguments: unbatched inputs gain and lose their batch dim here,
padding strings become numbers, sizes and scale factors become output sizes.

A channels-last input (strides like x.contiguous(memory_format=channels_last)) gets a
channels-last result from the functions torch's CPU kernels give one (convolutions, pools,
padding, resampling, pixel shuffles; _keeps_channels_last): the kernels here write row-major,
and the result is then laid out as torch's is, so a seeded dropout after it draws torch's mask.
"""
import functools
import math
import operator

from .. import _C
from .._ops import _autocast_fp32
from . import _grid_sample_composed as _composed

Tensor = _C.Tensor



def _in_f32(cfn, x, *args):
    """cfn(x, *args); a float16/bfloat16 x is pooled / resampled as a float32 copy and the
    floating results rounded once back to its dtype (indices stay int64): the C kernels read
    float32/float64 only, and torch's CPU kernels accumulate these dtypes in float32 too."""
    if x.dtype != _C.float16 and x.dtype != _C.bfloat16:
        return cfn(x, *args)
    # tensor arguments of x's dtype (grid_sample's grid) go through float32 with it
    args = [a.float() if isinstance(a, Tensor) and a.dtype == x.dtype else a for a in args]
    r = cfn(x.float(), *args)
    if isinstance(r, tuple):
        return tuple(t.to(x.dtype) if t.is_floating_point() else t for t in r)
    return r.to(x.dtype)

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
    """padding=int/tuple/'valid'/'same' -> what _C._conv takes: ints per dim, or for 'same' a
    (left, right) pair per dim (an even effective kernel needs one more on the right)."""
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
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def _conv_operands(input, weight, name, nd, weight_dims):  # noqa: A002
    """Checks shared by the convolutions; returns (input with a batch dimension, whether the
    caller passed an unbatched input)."""
    _check_tensor(input, "input")
    _check_tensor(weight, "weight")
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                           f"{name}, but got input of size: {list(input.shape)}")
    if weight.dim() != nd + 2:
        raise RuntimeError(f"{name}: expected a {nd + 2}D weight ({weight_dims}, "
                           f"kernel...), but got weight of size: {list(weight.shape)}")
    unbatched = input.dim() == nd + 1
    return (input.unsqueeze(0) if unbatched else input), unbatched


def _conv_nd(input, weight, bias, stride, padding, dilation, groups, nd):  # noqa: A002
    input, unbatched = _conv_operands(input, weight, f"conv{nd}d", nd,
                                      "out_channels, in_channels/groups")
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
    name = f"conv_transpose{nd}d"
    if isinstance(padding, str):
        _check_tensor(input, "input")
        _check_tensor(weight, "weight")
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    input, unbatched = _conv_operands(input, weight, name, nd, "in_channels, out_channels/groups")
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
    if hasattr(v, "__index__") and not isinstance(v, (bool, Tensor)):   # int, NumPy integer
        return (operator.index(v),) * n
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


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode=False, return_indices=False):
    """Max over windows of (N, C, H, W) or (C, H, W); indices are flat h*W + w per plane."""
    _check_tensor(input, "input")
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    out, idx = _in_f32(_C._max_pool2d, input, k, s, p, d, bool(ceil_mode))
    return (out, idx) if return_indices else out


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode=False, return_indices=False):
    _check_pool1d_dims(input, "max_pool1d")
    k, s, p, d = _pool_args("max_pool1d", kernel_size, stride, padding, dilation, 1)
    out, idx = _in_f32(_C._max_pool2d, input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, (1,) + d,
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
    return _in_f32(_C._avg_pool2d, input, k, s, p, bool(ceil_mode), bool(count_include_pad),
                          divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True):
    _check_pool1d_dims(input, "avg_pool1d")
    k, s, p, _ = _pool_args("avg_pool1d", kernel_size, stride, padding, 1, 1)
    return _in_f32(_C._avg_pool2d, input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, bool(ceil_mode),
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
    return _in_f32(_C._adaptive_avg_pool2d, input, _adaptive_size(input, output_size, 2,
                                                         "adaptive_avg_pool2d"))


def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    _check_tensor(input, "input")
    if input.dim() < 3:
        raise ValueError("Input dimension should be at least 3")
    out, idx = _in_f32(_C._adaptive_max_pool2d, input, _adaptive_size(input, output_size, 2,
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
    return _in_f32(_C._adaptive_avg_pool2d, input.unsqueeze(-2), (1,) + o).squeeze(-2)


def adaptive_max_pool1d(input, output_size, return_indices=False):  # noqa: A002
    _check_adaptive1d(input, "adaptive_max_pool1d")
    o = _adaptive_size(input, output_size, 1, "adaptive_max_pool1d")
    out, idx = _in_f32(_C._adaptive_max_pool2d, input.unsqueeze(-2), (1,) + o)
    out, idx = out.squeeze(-2), idx.squeeze(-2)
    return (out, idx) if return_indices else out


# ---- padding ----------------------------------------------------------------------------

_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}


def _int_elem(p):
    """An int of an int list: ints, NumPy integers and 0-d integer tensors (torch's int-list
    parser takes all three; pads often come from a tensor's .ceil().to(int32))."""
    if not isinstance(p, (bool, float)) and not (isinstance(p, Tensor) and
                                                 (p.dim() or p.is_floating_point())):
        try:
            return operator.index(p)
        except TypeError:
            pass
    raise TypeError(f"pad(): argument 'pad' must be tuple of ints, but found element of type "
                    f"{type(p).__name__}")


def pad(input, pad, mode="constant", value=None):  # noqa: A002
    """Pad the last len(pad)//2 dims (pad lists (left, right) pairs, last dim first).
    constant: any number of dims, negative values crop; reflect/replicate/circular: the last
    1, 2 or 3 dims of a (batched or not) tensor."""
    _check_tensor(input, "input")
    pad = tuple(pad)
    if any(type(p) is not int for p in pad):
        pad = tuple(_int_elem(p) for p in pad)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.dim():
        raise RuntimeError("Padding length should be less than or equal to two times the input "
                           f"dimension but got padding length {len(pad)} and input of dimension "
                           f"{input.dim()}")
    if mode == "constant":
        return _C._pad(input, pad, 0, 0.0 if value is None else float(value))
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "circular":                 # torch's autocast: reflection / replication in fp32
        input, = _autocast_fp32(input)
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    k = len(pad) // 2
    if k not in (1, 2, 3) or input.dim() not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {input.dim()}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    return _C._pad(input, pad, _PAD_MODES[mode], 0.0)


# ---- resampling -------------------------------------------------------------------------

_UP_MODES = {"nearest": 0, "nearest-exact": 1, "linear": 2, "bilinear": 2}


def interpolate(input, size=None, scale_factor=None, mode="nearest",  # noqa: A002
                align_corners=None, recompute_scale_factor=None, antialias=False):
    """torch's interpolate: modes nearest / nearest-exact / area (3-D, 4-D and 5-D inputs),
    linear (3-D), bilinear and bicubic (4-D, both also with antialias=True), lanczos (4-D,
    antialias=True only; nn/_functional_resample.py) and trilinear (5-D,
    nn/_functional_3d.py)."""
    _check_tensor(input, "input")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.dim() - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scales = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError("Input and output must have the same number of spatial "
                                 "dimensions, but got input with spatial dimensions of "
                                 f"{list(input.shape[2:])} and output size of {size}. Please "
                                 "provide input tensor in (N, C, d1, d2, ...,dK) format and "
                                 "output size in (o1, o2, ...,oK) format.")
            out = [int(s) for s in size]
        else:
            out = [int(size)] * dim
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError("Input and scale_factor must have the same number of spatial "
                                 "dimensions, but got input with spatial dimensions of "
                                 f"{list(input.shape[2:])} and scale_factor of shape "
                                 f"{scale_factor}. Please provide input tensor in (N, C, d1, "
                                 "d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) "
                                 "format.")
            scales = [float(s) for s in scale_factor]
        else:
            scales = [float(scale_factor)] * dim
        out = [int(input.shape[2 + i] * scales[i]) for i in range(dim)]
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if recompute_scale_factor:
        out = [math.floor(float(input.shape[i + 2]) * scales[i]) for i in range(dim)]
        scales = None
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.dim() == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos "
                         "modes and requires a 4-D tensor as input")
    if mode == "area":
        if input.dim() not in (3, 4, 5):
            raise NotImplementedError("Input Error: Only 3D, 4D and 5D input Tensors supported "
                                      f"(got {input.dim()}D) for the modes: nearest | linear | "
                                      "bilinear | bicubic | trilinear | lanczos | area | "
                                      f"nearest-exact (got {mode})")
        from . import functional as F          # functional imports this module
        pool = (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[dim - 1]
        return pool(input, out)
    if mode in ("bicubic", "lanczos") and input.dim() in (3, 5):
        raise NotImplementedError(f"Got {input.dim()}D input, but {mode} mode needs 4D input")
    if mode == "lanczos" and not antialias:
        raise ValueError("Lanczos mode requires antialias=True")
    if mode in ("bicubic", "lanczos") or antialias:
        from ._functional_resample import resample2d
        return resample2d(input, out, scales, mode, bool(align_corners), antialias)
    if mode == "bilinear" and input.dim() == 3:
        raise NotImplementedError("Got 3D input, but bilinear mode needs 4D input")
    if mode == "linear" and input.dim() in (4, 5):
        raise NotImplementedError(f"Got {input.dim()}D input, but linear mode needs 3D input")
    if mode == "bilinear" and input.dim() == 5:
        raise NotImplementedError("Got 5D input, but bilinear mode needs 4D input")
    if mode == "trilinear" and input.dim() in (3, 4):
        raise NotImplementedError(f"Got {input.dim()}D input, but trilinear mode needs 5D input")
    if input.dim() == 5 and mode in ("nearest", "nearest-exact", "trilinear"):
        from ._functional_3d import _interpolate3d    # _functional_3d imports this module
        return _interpolate3d(input, out, scales, mode, align_corners)
    if mode not in _UP_MODES or input.dim() not in (3, 4):
        raise NotImplementedError(
            f"cddp: interpolate supports 3-D, 4-D and 5-D inputs in modes nearest, "
            f"nearest-exact, area, linear (3-D), bilinear, bicubic and lanczos (4-D) and "
            f"trilinear (5-D); got {input.dim()}-D input and mode '{mode}'")
    sc = [0.0] * (2 - dim) + ([0.0] * dim if scales is None else scales)
    oh, ow = ([1] + out) if dim == 1 else out
    x = input.unsqueeze(2) if dim == 1 else input
    m = 3 if dim == 1 and mode == "nearest" else _UP_MODES[mode]   # 3: torch's 1-D indices
    y = _in_f32(_C._upsample, x, oh, ow, sc[0], sc[1], m, bool(align_corners))
    return y.squeeze(2) if dim == 1 else y


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):  # noqa: A002
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):  # noqa: A002
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):  # noqa: A002
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input, upscale_factor):  # noqa: A002
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): a reshape, a permute and one C copy."""
    _check_tensor(input, "input")
    r = int(upscale_factor)
    if input.dim() < 3:
        raise RuntimeError("pixel_shuffle expects input to have at least 3 dimensions, but got "
                           f"input with {input.dim()} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    c, h, w = input.shape[-3:]
    if c % (r * r):
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    lead = tuple(input.shape[:-3])
    n = len(lead)
    x = input.reshape(lead + (c // (r * r), r, r, h, w))
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(lead + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):  # noqa: A002
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), the inverse of pixel_shuffle."""
    _check_tensor(input, "input")
    r = int(downscale_factor)
    if input.dim() < 3:
        raise RuntimeError("pixel_unshuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.dim()} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    c, h, w = input.shape[-3:]
    if h % r:
        raise RuntimeError("pixel_unshuffle expects height to be divisible by downscale_factor, "
                           f"but input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError("pixel_unshuffle expects width to be divisible by downscale_factor, "
                           f"but input.size(-1)={w} is not divisible by {r}")
    lead = tuple(input.shape[:-3])
    n = len(lead)
    x = input.reshape(lead + (c, h // r, r, w // r, r))
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(lead + (c * r * r, h // r, w // r))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Sliding blocks of (N, C, H, W) or (C, H, W) as columns (N, C*kh*kw, L) (im2col)."""
    _check_tensor(input, "input")
    if input.dim() not in (3, 4):
        raise RuntimeError("Input Error: Only 3D or 4D input Tensors are supported (got "
                           f"{input.dim()}D)")
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
    y = _in_f32(_C._unfold, x, kernel_size, dilation, padding, stride)
    return y.squeeze(0) if unbatched else y


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Columns (N, C*kh*kw, L) or (C*kh*kw, L) summed back into (N, C, H, W) (col2im)."""
    _check_tensor(input, "input")
    if input.dim() not in (2, 3):
        raise RuntimeError("Input Error: Only unbatched (2D) or batched (3D) input Tensors are "
                           f"supported (got {input.dim()}D)")
    unbatched = input.dim() == 2
    x = input.unsqueeze(0) if unbatched else input
    y = _in_f32(_C._fold, x, output_size, kernel_size, dilation, padding, stride)
    return y.squeeze(0) if unbatched else y


# ---- torch.* spellings (cddp/__init__.py exports these under torch's top-level names) -----

def _torch_max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
                      ceil_mode=False):
    """torch.max_pool1d: the values only."""
    return max_pool1d(input, kernel_size, stride or None, padding, dilation, ceil_mode)


def _torch_max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
                      ceil_mode=False):
    """torch.max_pool2d: the values only."""
    return max_pool2d(input, kernel_size, stride or None, padding, dilation, ceil_mode)


def _torch_adaptive_max_pool1d(input, output_size):  # noqa: A002
    """torch.adaptive_max_pool1d: (values, indices)."""
    return adaptive_max_pool1d(input, output_size, return_indices=True)


def _constant_pad_nd(input, pad, value=0):  # noqa: A002
    """torch.constant_pad_nd."""
    return globals()["pad"](input, pad, "constant", value)


_GS_MODES = {"bilinear": 0, "nearest": 1}
_GS_PADDING = {"zeros": 0, "border": 1, "reflection": 2}
_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to "
                  "align_corners=False since 1.3.0. Please specify align_corners=True if the "
                  "old behavior is desired. See the documentation of grid_sample for details.")


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros",  # noqa: A002
                align_corners=None):
    """Samples input (N, C, H, W) at grid (N, Ho, Wo, 2)'s points (x, y in [-1, 1]):
    (N, C, Ho, Wo), differentiable in both (csrc/nn/grid_sample.c)."""
    _check_tensor(input, "input")
    _check_tensor(grid, "grid")
    input, grid = _autocast_fp32(input, grid)
    if mode not in _GS_MODES and mode != "bicubic":
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in _GS_PADDING:
        raise ValueError("nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        import warnings
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    if input.dim() not in (4, 5) or grid.dim() != input.dim():
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number "
                           f"of dimensions, but got input with sizes {list(input.shape)} and "
                           f"grid with sizes {list(grid.shape)}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got input with sizes {list(input.shape)} and grid with sizes "
                           f"{list(grid.shape)}")
    if grid.shape[-1] != input.dim() - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.dim() - 2} in "
                           f"last dimension, but got grid with sizes {list(grid.shape)}")
    if input.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but "
                           f"input has {input.dtype} and grid has {grid.dtype}")
    if input.dim() == 5:
        if mode == "bicubic":
            raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
        return _in_f32(_composed.grid_sample_3d, input, grid, mode, padding_mode,
                       bool(align_corners))
    if mode == "bicubic":
        return _in_f32(_composed.grid_sample_bicubic, input, grid, padding_mode,
                       bool(align_corners))
    return _in_f32(_C._grid_sample, input, grid, _GS_MODES[mode], _GS_PADDING[padding_mode],
                   bool(align_corners))


def _grid_axis(size, align_corners, dtype):
    """The normalised pixel centres along one dim: -1..1 (align_corners) or shrunk by
    (size - 1) / size so that -1 and 1 are the outer edges — times size - 1, then divided by
    size, torch's two roundings: at the identity map the points then fall on the pixel centres
    exactly where torch's do, and grid_sample's floor() agrees."""
    if size <= 1:
        return _C.zeros(max(size, 0), dtype=dtype)
    a = _C.linspace(-1, 1, size, dtype=dtype)
    return a if align_corners else a * (size - 1) / size


def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, H, W, 2) of the affine maps theta (N, 2, 3) for an output of
    size (N, C, H, W): grid[n, i, j] = theta[n] @ (x_j, y_i, 1); differentiable in theta."""
    _check_tensor(theta, "theta")
    if align_corners is None:
        import warnings
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = tuple(size)
    if len(size) == 5:
        if theta.dim() != 3 or tuple(theta.shape[-2:]) != (3, 4) or theta.shape[0] != size[0]:
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size "
                             f"torch.Size({list(size)}). Got torch.Size({list(theta.shape)}).")
        if min(size) <= 0:
            raise ValueError(f"Expected non-zero, positive output size. Got {size}")
        return _composed.affine_grid_3d(theta, size, bool(align_corners), _grid_axis)
    if len(size) != 4:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    if theta.dim() != 3 or tuple(theta.shape[-2:]) != (2, 3):
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                         f"torch.Size({list(size)}). Got torch.Size({list(theta.shape)}).")
    n, _, h, w = size
    if theta.shape[0] != n:
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                         f"torch.Size({list(size)}). Got torch.Size({list(theta.shape)}).")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    xs = _grid_axis(w, align_corners, theta.dtype)
    ys = _grid_axis(h, align_corners, theta.dtype)
    base = _C.stack([xs.reshape(1, w).expand(h, w), ys.reshape(h, 1).expand(h, w),
                     _C.ones(h, w, dtype=theta.dtype)], -1)             # (H, W, 3)
    grid = base.reshape(1, h * w, 3).matmul(theta.transpose(1, 2))        # (N, H*W, 2)
    return grid.reshape(n, h, w, 2)


def _keeps_channels_last(fn):
    """fn with torch's result layout for a channels-last input (module docstring): the result
    (each of a tuple's) passed through _C._keep_channels_last, a no-op otherwise."""
    keep = _C._keep_channels_last

    @functools.wraps(fn)
    def wrapper(input, *args, **kwargs):  # noqa: A002
        out = fn(input, *args, **kwargs)
        if isinstance(out, tuple):
            return tuple(keep(o, input) for o in out)
        return keep(out, input)
    return wrapper


(conv2d, conv_transpose2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d,
 pad, interpolate, pixel_shuffle, pixel_unshuffle) = map(_keeps_channels_last, (
    conv2d, conv_transpose2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d,
    pad, interpolate, pixel_shuffle, pixel_unshuffle))
