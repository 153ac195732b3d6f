"""Padding, resampling, pixel shuffles, unfold/fold (csrc/nn/pad.c, interpolate.c, fold.c)
and their modules.

Oracles: NumPy (np.pad's constant/reflect/edge/wrap modes, index formulas written from
torch's UpSample.h, reshape/transpose for pixel shuffles, a loop im2col), finite differences
in float64 for every gradient, and torch for values and gradients.
"""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(7)


def rnd(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ---- pad -----------------------------------------------------------------------------------

def np_pad(x, pad, mode, value=0.0):
    """torch's pad list (last dim first) through np.pad; negative entries crop."""
    k = len(pad) // 2
    widths = [(0, 0)] * (x.ndim - k) + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(k))]
    crop = tuple(slice(max(-l, 0), x.shape[d] - max(-r, 0)) for d, (l, r) in enumerate(widths))
    pos = [(max(l, 0), max(r, 0)) for l, r in widths]
    if mode == "constant":
        return np.pad(x[crop], pos, constant_values=value)
    if mode == "circular":      # torch wraps inside what the crops leave
        return np.pad(x[crop], pos, mode="wrap")
    full = np.pad(x, [(max(l, 0), max(r, 0)) for l, r in widths],
                  mode={"reflect": "reflect", "replicate": "edge"}[mode])
    sl = tuple(slice(max(-l, 0), full.shape[d] - max(-r, 0)) for d, (l, r) in enumerate(widths))
    return full[sl]


PADS = [((2, 3, 4, 5), (1, 2), "constant"), ((2, 3, 4, 5), (1, 2, 0, 3), "constant"),
        ((2, 3, 4, 5), (-1, 2, 3, -2, 1, 1, 0, 1), "constant"),
        ((2, 3, 4, 5), (-2, -2), "constant"),
        ((2, 3, 5), (2, 3), "reflect"), ((3, 5), (2, 3), "reflect"),
        ((2, 3, 4, 5), (2, 3, 1, 3), "reflect"), ((2, 3, 4, 5), (-1, 3, 2, -1), "reflect"),
        ((2, 3, 4, 5, 6), (2, 3, 1, 3, 1, 2), "reflect"),
        ((2, 3, 5), (7, 8), "replicate"), ((2, 3, 4, 5), (2, 3, 1, 3), "replicate"),
        ((3, 4, 5, 6), (2, 3, 1, 3, 1, 2), "replicate"),
        ((2, 3, 4, 5), (-1, 3, 2, -1), "replicate"),
        ((2, 3, 5), (2, 3), "circular"), ((2, 3, 4, 5), (2, 3, 1, 3), "circular"),
        ((2, 3, 4, 5), (-1, 3, 2, -1), "circular"),
        ((2, 3, 4, 5, 6), (2, 3, 1, 3, 1, 2), "circular")]


@pytest.mark.parametrize("xs,pad,mode", PADS)
def test_pad_matches_numpy(xs, pad, mode):
    x = rnd(*xs)
    value = 2.5 if mode == "constant" else None
    np.testing.assert_array_equal(n(F.pad(t(x), pad, mode, value)),
                                  np_pad(x, pad, mode, value or 0.0))


@pytest.mark.parametrize("xs,pad,mode", [PADS[i] for i in (1, 2, 4, 7, 9, 12, 15, 16)])
def test_pad_gradcheck(xs, pad, mode):
    small = tuple(min(s, 5) for s in xs[:-3]) + xs[-3:] if len(xs) > 3 else xs
    gradcheck(lambda x: F.pad(x, pad, mode), rnd(*small))


def test_pad_noncontiguous_and_dtypes():
    x = rnd(3, 4, 5)
    got = F.pad(t(x).transpose(1, 2), (1, 2, 2, 1), "reflect")
    np.testing.assert_array_equal(n(got), np_pad(x.transpose(0, 2, 1), (1, 2, 2, 1), "reflect"))
    xi = np.arange(12).reshape(1, 3, 4)
    got = F.pad(t(xi), (1, 2), value=2.5)              # torch casts the value to the dtype
    assert got.dtype == cddp.int64
    np.testing.assert_array_equal(n(got), np.pad(xi, [(0, 0), (0, 0), (1, 2)],
                                                 constant_values=2))
    np.testing.assert_array_equal(n(F.pad(t(xi), (1, 1), "replicate")),
                                  np.pad(xi, [(0, 0), (0, 0), (1, 1)], mode="edge"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,pad,mode", PADS)
def test_pad_vs_torch(torch, dtype, xs, pad, mode):
    x = rnd(*xs).astype(dtype)
    cx, tx = t(x, True), torch.tensor(x, requires_grad=True)
    cy = F.pad(cx, pad, mode)
    ty = torch.nn.functional.pad(tx, pad, mode)
    g = rnd(*ty.shape).astype(dtype)
    cy.backward(t(g))
    ty.backward(torch.tensor(g))
    np.testing.assert_array_equal(n(cy), ty.detach().numpy())
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


PAD_ERRORS = [
    (lambda: F.pad(t(rnd(1, 3, 4, 4)), (1,)), RuntimeError,
     "Padding length must be divisible by 2"),
    (lambda: F.pad(t(rnd(1, 3, 4, 4)), (1,) * 10), RuntimeError,
     "Padding length should be less than or equal to two times the input dimension but got "
     "padding length 10 and input of dimension 4"),
    (lambda: F.pad(t(rnd(1, 3, 4, 4)), (4, 4), mode="reflect"), NotImplementedError,
     "Padding size 2 is not supported for 4D input tensor."),
    (lambda: F.pad(t(rnd(1, 3, 4)), (4, 4), mode="reflect"), RuntimeError,
     "Padding size should be less than the corresponding input dimension, but got: padding "
     "(4, 4) at dimension 2 of input [1, 3, 4]"),
    (lambda: F.pad(t(rnd(1, 3, 4)), (5, 5), mode="circular"), RuntimeError,
     "Padding value causes wrapping around more than once."),
    (lambda: F.pad(t(rnd(1, 3, 4, 4)), (1, 1), mode="foo"), NotImplementedError,
     "Unrecognised padding mode foo"),
    (lambda: F.pad(t(rnd(1, 3, 4)), (1, 1), mode="replicate", value=2.0), RuntimeError,
     "Padding mode \"replicate\" doesn't take in value argument"),
    (lambda: F.pad(t(rnd(2, 3, 4, 4)), (-3, -3)), RuntimeError,
     "resulted in a negative output size"),
    (lambda: F.pad(t(rnd(2, 3, 0)), (1, 1), "replicate"), RuntimeError,
     "replicate padding needs non-empty padded dimensions"),
]


@pytest.mark.parametrize("call,exc,msg", PAD_ERRORS)
def test_pad_errors(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert msg in str(info.value)


def test_padding_modules(torch):
    x = rnd(2, 3, 4, 5).astype(np.float32)
    for make in (lambda m: m.ZeroPad2d(1), lambda m: m.ZeroPad2d((1, 0, 2, 1)),
                 lambda m: m.ConstantPad2d((1, 2, 0, 1), 3.5), lambda m: m.ReflectionPad2d(2),
                 lambda m: m.ReplicationPad2d((1, 0, 2, 1)), lambda m: m.CircularPad2d(1)):
        cm, tm = make(nn), make(torch.nn)
        assert repr(cm) == repr(tm)
        np.testing.assert_array_equal(n(cm(t(x))), tm(torch.tensor(x)).numpy())
    x1 = x[:, :, 0]
    for make in (lambda m: m.ZeroPad1d(2), lambda m: m.ConstantPad1d((1, 2), -1.0),
                 lambda m: m.ReflectionPad1d((2, 1)), lambda m: m.ReplicationPad1d(3),
                 lambda m: m.CircularPad1d(2)):
        cm, tm = make(nn), make(torch.nn)
        assert repr(cm) == repr(tm)
        np.testing.assert_array_equal(n(cm(t(x1))), tm(torch.tensor(x1)).numpy())
    x3 = rnd(1, 2, 3, 4, 5).astype(np.float32)
    for make in (lambda m: m.ReflectionPad3d(1), lambda m: m.ReplicationPad3d((1, 0, 2, 1, 0, 1)),
                 lambda m: m.ConstantPad3d(1, 0.5), lambda m: m.ZeroPad3d(1)):
        cm, tm = make(nn), make(torch.nn)
        np.testing.assert_array_equal(n(cm(t(x3))), tm(torch.tensor(x3)).numpy())


# ---- interpolate -------------------------------------------------------------------------

def np_nearest_idx(out, inp, scale=None, exact=False):
    s = np.float32(1.0 / scale) if scale else np.float32(inp) / np.float32(out)
    o = np.arange(out)
    if exact:
        i = np.floor(((o + 0.5) * np.float64(s)).astype(np.float32)).astype(np.int64)
    elif out == inp:
        i = o
    elif out == 2 * inp:
        i = o >> 1
    else:
        i = np.floor(o.astype(np.float32) * s).astype(np.int64)
    return np.minimum(i, inp - 1)


@pytest.mark.parametrize("length,scale", [(4, 1.2), (4, 1.1), (9, 2.1), (6, 2.2), (5, 1.5),
                                          (7, 0.7)])
def test_nearest_1d_has_no_size_shortcuts(length, scale):
    # torch's 1-D nearest kernel computes floor(o / scale) even when the output size equals
    # the input's (or twice it), where its 2-D kernel copies (halves) the index
    x = rnd(2, 3, length)
    xt = t(x, requires_grad=True)
    y = F.interpolate(xt, scale_factor=scale, mode="nearest")
    out = int(length * scale)
    s = np.float32(1.0 / scale)
    idx = np.minimum(np.floor(np.arange(out).astype(np.float32) * s).astype(np.int64),
                     length - 1)
    np.testing.assert_array_equal(n(y), x[:, :, idx])
    w = rnd(2, 3, out)
    (y * t(w)).sum().backward()
    expected = np.zeros_like(x)
    np.add.at(expected, (slice(None), slice(None), idx), w)     # the forward's own Jacobian
    np.testing.assert_allclose(n(xt.grad), expected, rtol=1e-12, atol=1e-12)


def test_nearest_1d_values_match_torch():
    torch = pytest.importorskip("torch")
    for length in range(2, 12):
        x = rnd(1, 2, length)
        for scale in (0.7, 1.1, 1.2, 1.5, 2.0, 2.1, 2.25, 3.3):
            want = torch.nn.functional.interpolate(torch.tensor(x), scale_factor=scale,
                                                   mode="nearest").numpy()
            got = n(F.interpolate(t(x), scale_factor=scale, mode="nearest"))
            np.testing.assert_array_equal(got, want)


def np_linear_weights(out, inp, align, scale=None):
    """(i0, i1, w0, w1) per output index, in float64 (the float32 rounding of torch's float
    arithmetic is below the tolerances used with it)."""
    o = np.arange(out, dtype=np.float64)
    if out == inp:
        return o.astype(np.int64), o.astype(np.int64), np.ones(out), np.zeros(out)
    if align:
        s = (inp - 1) / (out - 1) if out > 1 else 0.0
        r = s * o
    else:
        s = 1.0 / scale if scale else inp / out
        r = np.maximum(s * (o + 0.5) - 0.5, 0.0)
    i0 = np.minimum(np.floor(r).astype(np.int64), inp - 1)
    w1 = np.clip(r - i0, 0, 1)
    return i0, i0 + (i0 < inp - 1), 1 - w1, w1


def np_bilinear(x, oh, ow, align, scales=(None, None)):
    h0, h1, a0, a1 = np_linear_weights(oh, x.shape[2], align, scales[0])
    w0, w1, b0, b1 = np_linear_weights(ow, x.shape[3], align, scales[1])
    rows = x[:, :, h0] * a0[:, None] + x[:, :, h1] * a1[:, None]
    return rows[:, :, :, w0] * b0 + rows[:, :, :, w1] * b1


@pytest.mark.parametrize("size,scale,mode", [
    ((9, 4), None, "nearest"), (None, 2, "nearest"), (None, (1.7, 0.6), "nearest"),
    ((9, 4), None, "nearest-exact"), (None, (2.5, 1.5), "nearest-exact")])
def test_nearest_matches_numpy(size, scale, mode):
    x = rnd(2, 3, 5, 7)
    y = F.interpolate(t(x), size=size, scale_factor=scale, mode=mode)
    sc = (scale, scale) if isinstance(scale, (int, float)) else (scale or (None, None))
    oh, ow = size or (int(5 * sc[0]), int(7 * sc[1]))
    ih = np_nearest_idx(oh, 5, sc[0], mode == "nearest-exact")
    iw = np_nearest_idx(ow, 7, sc[1], mode == "nearest-exact")
    np.testing.assert_array_equal(n(y), x[:, :, ih][:, :, :, iw])


@pytest.mark.parametrize("size,scale,align", [((9, 13), None, False), ((9, 13), None, True),
                                              ((3, 2), None, False), (None, (1.7, 0.45), False),
                                              ((1, 1), None, True), ((5, 7), None, False)])
def test_bilinear_matches_numpy(size, scale, align):
    x = rnd(2, 3, 5, 7)
    y = F.interpolate(t(x), size=size, scale_factor=scale, mode="bilinear", align_corners=align)
    oh, ow = size or (int(5 * scale[0]), int(7 * scale[1]))
    np.testing.assert_allclose(n(y), np_bilinear(x, oh, ow, align, scale or (None, None)),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", [
    lambda x: F.interpolate(x, size=(7, 5)),
    lambda x: F.interpolate(x, scale_factor=(1.5, 0.7), mode="nearest-exact"),
    lambda x: F.interpolate(x, size=(7, 9), mode="bilinear"),
    lambda x: F.interpolate(x, size=(3, 8), mode="bilinear", align_corners=True),
    lambda x: F.interpolate(x[:, :, 0], size=9, mode="linear"),
    lambda x: F.interpolate(x[:, :, 1], scale_factor=2.5),
])
def test_interpolate_gradcheck(op):
    gradcheck(op, rnd(2, 2, 4, 5))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,kw", [
    ((2, 3, 5, 7), dict(size=(9, 4))), ((2, 3, 5, 7), dict(scale_factor=2)),
    ((2, 3, 5, 7), dict(scale_factor=(1.7, 0.6))),
    ((2, 3, 5, 7), dict(scale_factor=(1.7, 0.6), recompute_scale_factor=True)),
    ((2, 3, 7), dict(size=13)), ((2, 3, 7), dict(scale_factor=2.5, mode="nearest-exact")),
    ((2, 3, 5, 7), dict(size=(9, 13), mode="bilinear")),
    ((2, 3, 5, 7), dict(size=(9, 13), mode="bilinear", align_corners=True)),
    ((1, 3, 5, 7), dict(size=(3, 2), mode="bilinear")),
    ((2, 3, 5, 7), dict(scale_factor=(1.7, 0.45), mode="bilinear")),
    ((2, 3, 7), dict(size=12, mode="linear")), ((2, 3, 7), dict(size=12, mode="linear",
                                                               align_corners=True)),
])
def test_interpolate_vs_torch(torch, dtype, xs, kw):
    x = rnd(*xs).astype(dtype)
    cx, tx = t(x, True), torch.tensor(x, requires_grad=True)
    cy, ty = F.interpolate(cx, **kw), torch.nn.functional.interpolate(tx, **kw)
    g = rnd(*ty.shape).astype(dtype)
    cy.backward(t(g))
    ty.backward(torch.tensor(g))
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=tol, atol=tol)


def test_upsample_modules(torch):
    x = rnd(2, 3, 4, 5).astype(np.float32)
    for make in (lambda m: m.Upsample(scale_factor=2), lambda m: m.Upsample(size=(3, 7)),
                 lambda m: m.Upsample(scale_factor=1.5, mode="bilinear"),
                 lambda m: m.UpsamplingNearest2d(size=(6, 6)),
                 lambda m: m.UpsamplingBilinear2d(scale_factor=2)):
        cm, tm = make(nn), make(torch.nn)
        assert repr(cm) == repr(tm)
        np.testing.assert_allclose(n(cm(t(x))), tm(torch.tensor(x)).numpy(), rtol=2e-6,
                                   atol=2e-6)


INTERP_ERRORS = [
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4)), size=(2, 2), scale_factor=2), ValueError,
     "only one of size or scale_factor should be defined"),
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4))), ValueError,
     "either size or scale_factor should be defined"),
    (lambda: F.interpolate(t(rnd(1, 3, 4)), size=2, mode="bilinear"), NotImplementedError,
     "Got 3D input, but bilinear mode needs 4D input"),
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4)), size=2, align_corners=True), ValueError,
     "align_corners option can only be set with the interpolating modes"),
    (lambda: F.interpolate(t(rnd(1, 3, 4)), size=2, mode="bicubic"), NotImplementedError,
     "Got 3D input, but bicubic mode needs 4D input"),
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4)), size=2, antialias=True), ValueError,
     "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D"),
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4)), size=0, mode="bicubic"), RuntimeError,
     "Input and output sizes should be greater than 0, but got input (H: 4, W: 4) output "
     "(H: 0, W: 0)"),
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4)), size=(2, 2, 2)), ValueError,
     "Input and output must have the same number of spatial dimensions"),
    (lambda: F.interpolate(t(rnd(1, 3, 4, 4)), size=0), RuntimeError,
     "Input and output sizes should be greater than 0, but got input (H: 4, W: 4) output "
     "(H: 0, W: 0)"),
]


@pytest.mark.parametrize("call,exc,msg", INTERP_ERRORS)
def test_interpolate_errors(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert msg in str(info.value)


# ---- pixel shuffle -----------------------------------------------------------------------

def test_pixel_shuffle_matches_numpy_and_inverts():
    x = rnd(2, 12, 3, 4)
    ref = x.reshape(2, 3, 2, 2, 3, 4).transpose(0, 1, 4, 2, 5, 3).reshape(2, 3, 6, 8)
    y = F.pixel_shuffle(t(x), 2)
    np.testing.assert_array_equal(n(y), ref)
    np.testing.assert_array_equal(n(F.pixel_unshuffle(y, 2)), x)
    np.testing.assert_array_equal(n(nn.PixelShuffle(2)(t(x[0]))), ref[0])    # unbatched
    np.testing.assert_array_equal(n(nn.PixelUnshuffle(2)(t(ref))), x)
    gradcheck(lambda a: F.pixel_shuffle(a, 2), rnd(1, 8, 2, 3))
    gradcheck(lambda a: F.pixel_unshuffle(a, 3), rnd(2, 1, 3, 6))


def test_pixel_shuffle_vs_torch(torch):
    x = rnd(2, 3, 18, 4, 6)
    np.testing.assert_array_equal(n(F.pixel_shuffle(t(x), 3)),
                                  torch.nn.functional.pixel_shuffle(torch.tensor(x), 3).numpy())
    np.testing.assert_array_equal(n(F.pixel_unshuffle(t(x), 2)),
                                  torch.nn.functional.pixel_unshuffle(torch.tensor(x), 2).numpy())
    assert repr(nn.PixelShuffle(3)) == repr(torch.nn.PixelShuffle(3))


@pytest.mark.parametrize("call,msg", [
    (lambda: F.pixel_shuffle(t(rnd(1, 3, 4, 4)), 2),
     "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
     "upscale_factor, but input.size(-3)=3 is not divisible by 4"),
    (lambda: F.pixel_shuffle(t(rnd(3, 4)), 2),
     "pixel_shuffle expects input to have at least 3 dimensions, but got input with 2 "
     "dimension(s)"),
    (lambda: F.pixel_unshuffle(t(rnd(1, 3, 5, 4)), 2),
     "pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)=5 "
     "is not divisible by 2"),
    (lambda: F.pixel_unshuffle(t(rnd(1, 3, 4, 5)), 2), "expects width to be divisible"),
])
def test_pixel_shuffle_errors(call, msg):
    with pytest.raises(RuntimeError) as info:
        call()
    assert msg in str(info.value)


# ---- unfold / fold -----------------------------------------------------------------------

def np_unfold(x, k, d, p, s):
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    OH = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    OW = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.zeros((N, C, k[0], k[1], OH, OW))
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i, j] = xp[:, :, i * d[0]:i * d[0] + s[0] * (OH - 1) + 1:s[0],
                                 j * d[1]:j * d[1] + s[1] * (OW - 1) + 1:s[1]]
    return out.reshape(N, C * k[0] * k[1], OH * OW)


@pytest.mark.parametrize("k,d,p,s", [((3, 2), (1, 2), (1, 0), (2, 1)), ((3, 3), (1, 1), (1, 1),
                                                                        (1, 1)),
                                     ((2, 2), (2, 2), (0, 1), (3, 2))])
def test_unfold_fold_match_numpy(k, d, p, s):
    x = rnd(2, 3, 7, 6)
    cols = F.unfold(t(x), k, d, p, s)
    ref = np_unfold(x, k, d, p, s)
    np.testing.assert_array_equal(n(cols), ref)
    # fold is unfold's adjoint: <unfold(x), c> = <x, fold(c)>
    c = rnd(*ref.shape)
    back = n(F.fold(t(c), (7, 6), k, d, p, s))
    np.testing.assert_allclose(np.sum(ref * c), np.sum(x * back), rtol=1e-10)
    gradcheck(lambda a: F.unfold(a, k, d, p, s), rnd(1, 2, 7, 6))
    gradcheck(lambda a: F.fold(a, (7, 6), k, d, p, s), rnd(1, *ref.shape[1:]))


def test_unfold_fold_vs_torch(torch):
    x = rnd(2, 3, 7, 6)
    for kw in (dict(kernel_size=(3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1)),
               dict(kernel_size=3)):
        cx, tx = t(x, True), torch.tensor(x, requires_grad=True)
        cy, ty = F.unfold(cx, **kw), torch.nn.functional.unfold(tx, **kw)
        np.testing.assert_array_equal(n(cy), ty.detach().numpy())
        g = rnd(*ty.shape)
        cy.backward(t(g))
        ty.backward(torch.tensor(g))
        np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=1e-12)
        c = rnd(*ty.shape)
        np.testing.assert_allclose(n(F.fold(t(c), (7, 6), **kw)),
                                   torch.nn.functional.fold(torch.tensor(c), (7, 6),
                                                            **kw).numpy(), rtol=1e-12)
    cm, tm = nn.Fold((4, 4), 2), torch.nn.Fold((4, 4), 2)
    assert repr(cm) == repr(tm)
    c = rnd(12, 9)                                      # unbatched
    np.testing.assert_allclose(n(cm(t(c))), tm(torch.tensor(c)).numpy())
    assert repr(nn.Unfold(3, padding=1)) == repr(torch.nn.Unfold(3, padding=1))


@pytest.mark.parametrize("call,msg", [
    (lambda: F.unfold(t(rnd(1, 3, 4, 4)), 5),
     "Given input with spatial size (4, 4), kernel_size=(5, 5), dilation=(1, 1), padding=(0, "
     "0), calculated shape of the array of sliding blocks as (0, 0), but its components must "
     "be at least one."),
    (lambda: F.fold(t(rnd(1, 13, 9)), (4, 4), 2),
     "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
     "got input.size(1)=13 and kernel_size=(2, 2)."),
    (lambda: F.fold(t(rnd(1, 12, 8)), (4, 4), 2),
     "expected size of input's dimension 2 to match the calculated number of sliding blocks "
     "3 * 3 = 9, but got input.size(2)=8."),
    (lambda: F.unfold(t(rnd(1, 3, 4, 4)), 2, stride=0), "stride should be greater than zero"),
    (lambda: F.unfold(t(rnd(1, 3, 4, 4)), 2, padding=-1), "padding should be non-negative"),
])
def test_fold_errors(call, msg):
    with pytest.raises(RuntimeError) as info:
        call()
    assert msg in str(info.value)


def test_torch_namespace_spellings():
    x = rnd(1, 3, 6, 6)
    w = rnd(2, 3, 3, 3)
    np.testing.assert_allclose(n(cddp.conv2d(t(x), t(w), None, 1, 1)),
                               n(F.conv2d(t(x), t(w), padding=1)))
    assert cddp.max_pool2d(t(x), 2).shape == (1, 3, 3, 3)
    assert cddp.constant_pad_nd(t(x), (1, 1), 2.0).shape == (1, 3, 6, 8)
    vals, idx = cddp.adaptive_max_pool1d(t(x[:, :, 0]), 2)
    assert idx.dtype == cddp.int64
    assert cddp.pixel_shuffle(t(rnd(1, 4, 2, 2)), 2).shape == (1, 1, 4, 4)
