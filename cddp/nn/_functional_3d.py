"""torch.nn.functional's volumetric convolution, pooling and resampling (conv3d,
conv_transpose3d, max_pool3d, avg_pool3d, adaptive_avg_pool3d, adaptive_max_pool3d, and
interpolate's 5-D modes; re-exported by cddp.nn.functional), composed of the 2-D C kernels
(csrc/nn/conv.c, pool.c, adaptive_pool.c, interpolate.c) and view/stack/gather/index_add ops,
so autograd needs no new backward.

Dimensions: N batch, C / OC input / output channels, Cg = C / groups, (D, H, W) input volume,
(KD, KH, KW) kernel, (OD, OH, OW) output volume, B = N * C pooled planes, L = OH * OW.

conv3d: the KD depth taps of every output depth are gathered next to the channels,
  x (N, C, Dp, H, W) -> (N, OD, C, KD, H, W) -> (N*OD, C*KD, H, W),
and one conv2d with weight (OC, Cg*KD, KH, KW) (the 3-D weight, reshaped) does the rest: H/W
stride, padding, dilation and groups are conv2d's, and within a group the channel order
(cg, kd) matches the weight's. The gathered input costs about KD/SD times the input's memory.

conv_transpose3d is the adjoint of that: one conv_transpose2d over the D input slices,
x (N, C, D, H, W) -> (N*D, C, H, W), with weight (C, OCg, KD, KH, KW) -> (C, KD*OCg, KH, KW)
gives every depth tap of every slice at once, (N*D, G*KD*OCg, OH, OW); index_add then sums
slice d's tap kd into full-length output depth d*SD + kd*DD (duplicates accumulate), and the
depth padding / output_padding are a slice of that axis. The taps cost KD times the output's
memory.

interpolate (5-D) is separable too. trilinear: the 2-D resampling kernel over (H, W) of
(N, C*D, H, W), and over depth of (N*C, 1, D, L) with the L = H*W axis kept (out == in there,
which the kernel takes as the identity: source index o, weight 1), so both passes use the
kernel's own index and weight arithmetic (torch's, in float for float32); depth goes first when
that pass is the smaller one. nearest / nearest-exact: one index_select per resized axis, the
source indices computed here in float32 as torch's 1-D/3-D kernels do. Note: torch's 2-D
nearest kernel (and so cddp's C kernel) maps out == in to the identity and out == 2*in to o/2
even when a scale_factor says otherwise; its 1-D/3-D kernels always apply the formula
floor(o * s), e.g. W 3 -> 6 with scale_factor 2.25 reads 0 0 0 1 1 2, not 0 0 1 1 2 2. (torch
2.13's 3-D nearest backward does take the shortcuts, so there its gradient is not its forward's;
cddp's gradient is the adjoint of the forward it computes.)

Pooling is separable: one 2-D pool over (H, W) of (B, D, H, W), then one over depth of the
result viewed as (B, 1, D, L) with a (KD, 1) window. Max, the windows' clipping (padding,
ceil_mode) and the divisors of avg pooling (count_include_pad or not) all factor per dim, and
scanning (h, w) first, then d, picks the same first maximum (or last NaN) as a (d, h, w) scan.
"""
import math
import struct

from .. import _C
from .._ops import _autocast_fp32, autocast_fp32_op
from ._functional_spatial import (_check_tensor, _conv_operands, _conv_padding,
                                  _keeps_channels_last)

Tensor = _C.Tensor


def _triple(v, name, msg=None):
    """int or 1/3-sequence -> 3-tuple of ints; other lengths raise RuntimeError(msg)."""
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an int or a tuple of ints, not bool")
    if isinstance(v, int):
        return (v,) * 3
    try:
        t = tuple(int(e) for e in v)
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of ints, not {type(v).__name__}") \
            from None
    if len(t) == 1:
        t = t * 3
    if len(t) != 3:
        raise RuntimeError(msg or f"expected {name} to be a single integer value or a list of 3 "
                                  f"values to match the convolution dimensions, but got "
                                  f"{name}={list(t)}")
    return t


def _via_f32(fn, x):
    """fn(x) with a float16/bfloat16 x computed as one float32 copy and rounded once at the
    end (the 2-D kernels read float32/float64; two passes must not round twice)."""
    if x.dtype != _C.float16 and x.dtype != _C.bfloat16:
        return fn(x)
    r = fn(x.float())
    if isinstance(r, tuple):
        return tuple(e.to(x.dtype) if e.is_floating_point() else e for e in r)
    return r.to(x.dtype)


# ---- convolution ------------------------------------------------------------------------

def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """3-D cross-correlation over (N, C, D, H, W) or (C, D, H, W) with weight
    (OC, C/groups, KD, KH, KW); padding int/3-tuple/'same'/'valid'."""
    x, unbatched = _conv_operands(input, weight, "conv3d", 3, "out_channels, in_channels/groups")
    s = _triple(stride, "stride")
    dl = _triple(dilation, "dilation")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"conv3d(): argument 'groups' must be int, not {type(groups).__name__}")
    if isinstance(padding, str):                            # raises on bad strings / strides
        pads = tuple(p if isinstance(p, tuple) else (p, p)
                     for p in _conv_padding(padding, weight, s, dl, 3))
    else:
        pads = tuple((p, p) for p in _triple(padding, "padding"))
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(v <= 0 for v in s):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for pair in pads for p in pair):
        raise RuntimeError("negative padding is not supported")
    if any(v <= 0 for v in dl):
        raise RuntimeError("non-positive dilation is not supported")
    oc, cg, kd, kh, kw = weight.shape
    n, c, d, h, w = x.shape
    if oc % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size [{list(weight.shape)}] "
                           "instead")
    if c != cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(x.shape)} to have {cg * groups} channels, but "
                           f"got {c} channels instead")
    if bias is not None:
        _check_tensor(bias, "bias")
        if bias.dim() != 1 or bias.shape[0] != oc:
            raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be "
                               f"1-dimensional with {oc} elements, but got bias of size "
                               f"{list(bias.shape)} instead")
    padded = [size + lo + hi for size, (lo, hi) in zip((d, h, w), pads)]
    eff = [dv * (k - 1) + 1 for dv, k in zip(dl, (kd, kh, kw))]
    if any(p < e for p, e in zip(padded, eff)):
        raise RuntimeError("Calculated padded input size per channel: ("
                           f"{' x '.join(map(str, padded))}). Kernel size: ("
                           f"{' x '.join(map(str, eff))}). Kernel size can't be greater than "
                           "actual input size")
    if pads[0] != (0, 0):
        x = _C._pad(x, (0, 0, 0, 0) + pads[0], 0, 0.0)     # zeros before/after along depth
    od = (padded[0] - eff[0]) // s[0] + 1
    xt = x.transpose(1, 2)                                  # (N, Dp, C, H, W), a view
    last = (od - 1) * s[0] + 1
    taps = [xt[:, i * dl[0]:i * dl[0] + last:s[0]] for i in range(kd)]   # KD x (N, OD, C, H, W)
    cols = _C.stack(taps, 3).reshape(n * od, c * kd, h, w)  # channel order (g, cg, kd)
    w2 = weight.reshape(oc, cg * kd, kh, kw)
    y = _C._conv(cols, w2, bias, s[1:], pads[1:], dl[1:], groups)   # (N*OD, OC, OH, OW)
    oh, ow = y.shape[2], y.shape[3]
    y = y.reshape(n, od, oc, oh, ow).transpose(1, 2).contiguous()
    return y.squeeze(0) if unbatched else y


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,  # noqa: A002
                     groups=1, dilation=1):
    """Transposed 3-D convolution (conv3d's adjoint) over (N, C, D, H, W) or (C, D, H, W) with
    weight (C, OC/groups, KD, KH, KW); output size per dim (I-1)*S - 2P + D*(K-1) + 1 + OP."""
    if isinstance(padding, str):
        _check_tensor(input, "input")
        _check_tensor(weight, "weight")
        raise TypeError("conv_transpose3d(): argument 'padding' must be tuple of ints, not str")
    x, unbatched = _conv_operands(input, weight, "conv_transpose3d", 3,
                                  "in_channels, out_channels/groups")
    s = _triple(stride, "stride")
    p = _triple(padding, "padding")
    op = _triple(output_padding, "output_padding")
    dl = _triple(dilation, "dilation")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError("conv_transpose3d(): argument 'groups' must be int, not "
                        f"{type(groups).__name__}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(v <= 0 for v in s):
        raise RuntimeError("non-positive stride is not supported")
    if any(v < 0 for v in p):
        raise RuntimeError("negative padding is not supported")
    if any(v < 0 for v in op):
        raise RuntimeError("negative output_padding is not supported")
    if any(v <= 0 for v in dl):
        raise RuntimeError(f"dilation should be greater than zero, but got dilation={list(dl)}")
    if any(o >= max(sv, dv) for o, sv, dv in zip(op, s, dl)):
        raise RuntimeError(
            "output padding must be smaller than either stride or dilation, but got "
            f"output_padding_depth: {op[0]} output_padding_height: {op[1]} output_padding_width:"
            f" {op[2]} stride_depth: {s[0]} stride_height: {s[1]} stride_width: {s[2]} "
            f"dilation_depth: {dl[0]} dilation_height: {dl[1]} dilation_width: {dl[2]}")
    c_in, ocg, kd, kh, kw = weight.shape
    n, c, d, h, w = x.shape
    oc = ocg * groups
    if c_in % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size [{list(weight.shape)}] "
                           "instead")
    if c != c_in:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{list(x.shape)} to have {c_in} channels, but got {c} channels "
                           "instead")
    if bias is not None:
        _check_tensor(bias, "bias")
        if bias.dim() != 1 or bias.shape[0] != oc:
            raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, "
                               f"expected bias to be 1-dimensional with {oc} elements, but got "
                               f"bias of size {list(bias.shape)} instead")
        if bias.dtype != x.dtype:
            raise RuntimeError(f"conv_transpose3d: expected input, weight and bias of one "
                               f"floating dtype, but got {x.dtype} input and {bias.dtype} bias")
    out = [(i - 1) * sv - 2 * pv + dv * (k - 1) + 1 + o
           for i, sv, pv, dv, k, o in zip((d, h, w), s, p, dl, (kd, kh, kw), op)]
    if any(v < 1 for v in out):
        raise RuntimeError(f"Given input size per channel: ({d} x {h} x {w}). Calculated output "
                           f"size per channel: ({' x '.join(map(str, out))}). Output size is too "
                           "small")
    od = out[0]
    # every depth tap beside the output channels, in (g, kd, ocg) order
    w2 = weight.permute(0, 2, 1, 3, 4).reshape(c_in, kd * ocg, kh, kw)
    x2 = x.transpose(1, 2).reshape(n * d, c, h, w)          # (N*D, C, H, W)
    y = _C._conv_transpose(x2, w2, None, s[1:], p[1:], op[1:], groups, dl[1:])
    oh, ow = y.shape[2], y.shape[3]                          # (N*D, G*KD*OCg, OH, OW)
    y = y.reshape(n, d, groups, kd, ocg, oh, ow)
    if groups > 1:
        y = y.transpose(2, 3)                                # (N, D, KD, G, OCg, OH, OW)
    y = y.reshape(n, d * kd, oc, oh, ow)                     # row d*KD + kd
    # slice d's tap kd lands on full (unpadded) depth d*SD + kd*DD; output_padding may reach
    # past the last tap, so the axis is long enough for the slice [P, P + OD) too
    full = max((d - 1) * s[0] + dl[0] * (kd - 1) + 1, p[0] + od)
    idx = _C.tensor([i * s[0] + k * dl[0] for i in range(d) for k in range(kd)],
                    dtype=_C.int64, device=y.device)
    z = _C.zeros((n, full, oc, oh, ow), dtype=y.dtype, device=y.device).index_add(1, idx, y)
    z = z[:, p[0]:p[0] + od].transpose(1, 2)                 # (N, OC, OD, OH, OW), a view
    z = z.contiguous() if bias is None else z + bias.reshape(1, oc, 1, 1, 1)
    return z.squeeze(0) if unbatched else z


# ---- pooling ----------------------------------------------------------------------------

def _pool_out(size, k, s, p, d, ceil_mode):
    """Output length along one dim (torch's rule: with ceil_mode the last window must start
    inside the input or its left padding)."""
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool3d_args(fn, input, kernel_size, stride, padding, dilation, ceil_mode):  # noqa: A002
    """Checks shared by max/avg_pool3d (torch's order and messages); returns k, s, p, d as
    3-tuples and the output volume (OD, OH, OW)."""
    _check_tensor(input, "input")
    either = "either " if fn == "max_pool3d" else ""
    k = _triple(kernel_size, "kernel_size",
                f"{fn}: kernel_size must {either}be a single int, or a tuple of three ints")
    if stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0):
        s = k
    else:
        s = _triple(stride, "stride", f"{fn}: stride must {either}be omitted, a single int, or "
                                      "a tuple of three ints")
    p = _triple(padding, "padding",
                f"{fn}: padding must {either}be a single int, or a tuple of three ints")
    d = _triple(dilation, "dilation",
                f"{fn}: dilation must be either a single int, or a tuple of three ints")
    if input.dim() not in (4, 5) or any(v == 0 for v in input.shape[-4:]):
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    if any(v <= 0 for v in s):
        raise RuntimeError("stride should not be zero")
    if any(v <= 0 for v in k):
        raise RuntimeError(f"kernel size should be greater than zero, but got kT: {k[0]} "
                           f"kH: {k[1]} kW: {k[2]}")
    if any(v <= 0 for v in d):
        raise RuntimeError(f"dilation should be greater than zero, but got dilationT: {d[0]} "
                           f"dilationH: {d[1]} dilationW: {d[2]}")
    for pi, ki, di in zip(p, k, d):
        if pi < 0 or pi > ((ki - 1) * di + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                               f"pad={pi}, kernel_size={ki} and dilation={di}")
    size = tuple(input.shape[-3:])
    out = tuple(_pool_out(size[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(3))
    if any(o < 1 for o in out):
        c = input.shape[-4]
        raise RuntimeError(f"Given input size: ({c}x{'x'.join(map(str, size))}). Calculated "
                           f"output size: ({c}x{'x'.join(map(str, out))}). Output size is too "
                           "small")
    return k, s, p, d


def _planes(input):  # noqa: A002
    """(N, C, D, H, W) or (C, D, H, W) -> (B, D, H, W) and the leading shape to restore."""
    lead = tuple(input.shape[:-3])
    d, h, w = input.shape[-3:]
    b = 1
    for v in lead:
        b *= v
    return input.reshape(b, d, h, w), lead


def _compose_indices(i1, i2, b, h, w, od, oh, ow):
    """Flat d*H*W + h*W + w indices from the (H, W) pass's i1 (B, D, OH, OW; h*W + w) and the
    depth pass's i2 (B, 1, OD, L; d*L + l)."""
    plane = oh * ow
    dsel = (i2 // max(plane, 1)).reshape(b, od, plane)
    hw = i1.reshape(b, i1.shape[1], plane).gather(1, dsel)
    return dsel * (h * w) + hw


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode=False, return_indices=False):
    """Max over windows of (N, C, D, H, W) or (C, D, H, W); indices are flat d*H*W + h*W + w
    per volume, the first maximum in (d, h, w) order wins, NaN propagates."""
    k, s, p, d = _pool3d_args("max_pool3d", input, kernel_size, stride, padding, dilation,
                              ceil_mode)
    input, = _autocast_fp32(input)
    ceil_mode = bool(ceil_mode)
    x, lead = _planes(input)
    b, _, h, w = x.shape

    def run(x):
        y, i1 = _C._max_pool2d(x, k[1:], s[1:], p[1:], d[1:], ceil_mode)    # (B, D, OH, OW)
        oh, ow = y.shape[2], y.shape[3]
        z, i2 = _C._max_pool2d(y.reshape(b, 1, y.shape[1], oh * ow), (k[0], 1), (s[0], 1),
                               (p[0], 0), (d[0], 1), ceil_mode)            # (B, 1, OD, L)
        od = z.shape[2]
        z = z.reshape(lead + (od, oh, ow))
        if not return_indices:
            return z
        return z, _compose_indices(i1, i2, b, h, w, od, oh, ow).reshape(lead + (od, oh, ow))

    return _via_f32(run, x)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False, return_indices=True):
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True, divisor_override=None):
    """Mean over windows of (N, C, D, H, W) or (C, D, H, W); ceil_mode, count_include_pad and
    divisor_override as torch (the divisor of each window is the product of its per-dim
    extents, so two separable passes give the same result)."""
    k, s, p, _ = _pool3d_args("avg_pool3d", input, kernel_size, stride, padding, 1, ceil_mode)
    input, = _autocast_fp32(input)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    ceil_mode, cip = bool(ceil_mode), bool(count_include_pad)
    # with an override the passes sum (divisor 1) and the total is divided once at the end
    div = None if divisor_override is None else 1
    x, lead = _planes(input)
    b = x.shape[0]

    def run(x):
        y = _C._avg_pool2d(x, k[1:], s[1:], p[1:], ceil_mode, cip, div)    # (B, D, OH, OW)
        oh, ow = y.shape[2], y.shape[3]
        z = _C._avg_pool2d(y.reshape(b, 1, y.shape[1], oh * ow), (k[0], 1), (s[0], 1),
                           (p[0], 0), ceil_mode, cip, div)                 # (B, 1, OD, L)
        z = z.reshape(lead + (z.shape[2], oh, ow))
        return z if divisor_override is None else z / divisor_override

    return _via_f32(run, x)


def _adaptive3d_size(input, output_size, fn):  # noqa: A002
    _check_tensor(input, "input")
    if isinstance(output_size, int) and not isinstance(output_size, bool):
        sizes = (output_size,) * 3
    else:
        sizes = tuple(output_size)
    if None in sizes and input.dim() <= len(sizes):
        raise ValueError(f"Input dimension should be at least {len(sizes) + 1}")
    if input.dim() not in (4, 5):
        colon = ":" if fn == "adaptive_max_pool3d" else ""
        raise RuntimeError(f"{fn}(): Expected 4D or 5D tensor, but got{colon} "
                           f"{list(input.shape)}")
    if len(sizes) != 3:
        if fn == "adaptive_max_pool3d":
            raise RuntimeError("adaptive_max_pool3d(): internal error: output_size.size() "
                               "must be 3")
        raise RuntimeError(f"{fn}: output_size must be 3")
    # None keeps the input's size along that dim
    return tuple(input.shape[input.dim() - 3 + i] if v is None else int(v)
                 for i, v in enumerate(sizes))


def adaptive_avg_pool3d(input, output_size):  # noqa: A002
    """Mean over windows [floor(o*I/O), ceil((o+1)*I/O)) per dim; output_size int, 3-tuple,
    None entries keep the input's size."""
    od, oh, ow = _adaptive3d_size(input, output_size, "adaptive_avg_pool3d")
    input, = _autocast_fp32(input)
    x, lead = _planes(input)
    b = x.shape[0]

    def run(x):
        y = _C._adaptive_avg_pool2d(x, (oh, ow))                          # (B, D, OH, OW)
        z = _C._adaptive_avg_pool2d(y.reshape(b, 1, y.shape[1], oh * ow), (od, oh * ow))
        return z.reshape(lead + (od, oh, ow))

    return _via_f32(run, x)


@autocast_fp32_op
def adaptive_max_pool3d(input, output_size, return_indices=False):  # noqa: A002
    """Max over adaptive_avg_pool3d's windows; indices flat d*H*W + h*W + w."""
    od, oh, ow = _adaptive3d_size(input, output_size, "adaptive_max_pool3d")
    x, lead = _planes(input)
    b, _, h, w = x.shape

    def run(x):
        y, i1 = _C._adaptive_max_pool2d(x, (oh, ow))
        z, i2 = _C._adaptive_max_pool2d(y.reshape(b, 1, y.shape[1], oh * ow), (od, oh * ow))
        z = z.reshape(lead + (od, oh, ow))
        if not return_indices:
            return z
        return z, _compose_indices(i1, i2, b, h, w, od, oh, ow).reshape(lead + (od, oh, ow))

    return _via_f32(run, x)


@autocast_fp32_op
def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):  # noqa: A002
    return adaptive_max_pool3d(input, output_size, True)


# ---- resampling -------------------------------------------------------------------------

def _f32(v):
    """v rounded to float32 (one float op done in double then rounded equals the float op)."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _nearest_src(i, o, scale, exact):
    """Source index of each of o outputs along an axis of i inputs: min(floor(o' * s), i - 1),
    or floor((o' + 0.5) * s) for nearest-exact, s = 1/scale or i/o in float32."""
    s = _f32(1.0 / scale) if scale > 0 else _f32(_f32(i) / _f32(o))
    if exact:
        src = [math.floor(_f32((k + 0.5) * s)) for k in range(o)]
    else:
        src = [math.floor(_f32(k * s)) for k in range(o)]
    return [min(v, i - 1) for v in src]


def _interpolate3d(input, size, scales, mode, align_corners):  # noqa: A002
    """interpolate's 5-D path, called by _functional_spatial.interpolate once the arguments are
    normalised: size the output volume (OD, OH, OW), scales the user's scale factors or None
    (the kernel then uses in/out)."""
    n, c, d, h, w = input.shape
    od, oh, ow = size
    if min(d, h, w, od, oh, ow) <= 0:
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"(D: {d}, H: {h}, W: {w}) output (D: {od}, H: {oh}, W: {ow})")
    sd, sh, sw = (0.0, 0.0, 0.0) if scales is None else (float(v) for v in scales)
    if mode != "trilinear":                                  # gathers: exact in any dtype
        y = input
        for axis, (i, o, sc) in enumerate(zip((d, h, w), size, (sd, sh, sw)), 2):
            src = _nearest_src(i, o, sc, mode == "nearest-exact")
            if src != list(range(i)):
                y = y.index_select(axis, _C.tensor(src, dtype=_C.int64, device=input.device))
        return y if y is not input else input.clone()
    m, ac = 2, bool(align_corners)                           # _C._upsample: 2 = (bi)linear

    def plane(x, dd):            # (H, W) pass: (N, C, dd, H, W) -> (N, C, dd, OH, OW)
        y = _C._upsample(x.reshape(n, c * dd, h, w), oh, ow, sh, sw, m, ac)
        return y.reshape(n, c, dd, oh, ow)

    def depth(x, hw):            # depth pass over (N*C, 1, D, L), L = hw kept as is
        y = _C._upsample(x.reshape(n * c, 1, d, hw), od, hw, sd, 0.0, m, ac)
        return y.reshape(n, c, od, hw)

    def run(x):
        if od * h * w <= d * oh * ow:                         # the smaller pass first
            return plane(depth(x, h * w), od)
        return depth(plane(x, d), oh * ow).reshape(n, c, od, oh, ow)

    return _via_f32(run, input)


# ---- torch.* spellings (cddp/__init__.py exports these under torch's top-level names) -----

def _torch_max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
                      ceil_mode=False):
    """torch.max_pool3d: the values only."""
    return max_pool3d(input, kernel_size, stride or None, padding, dilation, ceil_mode)


# channels_last_3d inputs give channels_last_3d results, as torch's (_functional_spatial.py)
(conv3d, conv_transpose3d, max_pool3d, avg_pool3d, adaptive_avg_pool3d,
 adaptive_max_pool3d) = map(_keeps_channels_last, (
    conv3d, conv_transpose3d, max_pool3d, avg_pool3d, adaptive_avg_pool3d,
    adaptive_max_pool3d))
