"""Transposed 3-D convolution and 5-D resampling (cddp/nn/_functional_3d.py): conv_transpose3d,
nn.ConvTranspose3d, interpolate's nearest / nearest-exact / trilinear modes on 5-D input and
nn.Upsample over them.

Oracles: NumPy float64 references written from the definitions (a scatter over input positions
and kernel taps for conv_transpose3d; per-axis source index / weight formulas and the 8-corner
sum for trilinear; per-axis floor rules for nearest) and central finite differences, neither
needing torch; then torch for values and gradients over strides, paddings, output_paddings,
dilations, groups, bias, sizes, scale factors, recompute_scale_factor, align_corners, dtypes and
unbatched inputs; the module's parameter shapes, state_dict keys, repr, output_size and outputs
with torch's weights loaded; and the error cases' exception types and messages.
"""
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(5)


def rnd(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def _t3(v):
    return (v,) * 3 if isinstance(v, int) else tuple(v)


# ---- NumPy references ------------------------------------------------------------------

def np_conv_transpose3d(x, w, b=None, stride=1, pad=0, out_pad=0, groups=1, dil=1):
    """Scatter: input x[n, g*Cg + c, i] adds x * w[g*Cg + c, o, k] at full position
    i*s + k*d (per dim); the output is the full volume's slice [p, p + O)."""
    s, p, op, d = _t3(stride), _t3(pad), _t3(out_pad), _t3(dil)
    N, C, *size = x.shape
    _, OCg, *ks = w.shape
    Cg = C // groups
    out = [(size[a] - 1) * s[a] - 2 * p[a] + d[a] * (ks[a] - 1) + 1 + op[a] for a in range(3)]
    full = [max((size[a] - 1) * s[a] + d[a] * (ks[a] - 1) + 1, p[a] + out[a]) for a in range(3)]
    y = np.zeros((N, OCg * groups) + tuple(full))
    for g in range(groups):
        xs = x[:, g * Cg:(g + 1) * Cg]
        for k in np.ndindex(*ks):
            contrib = np.einsum("ncdhw,co->nodhw", xs, w[g * Cg:(g + 1) * Cg, :, k[0], k[1],
                                                         k[2]])
            sl = tuple(slice(k[a] * d[a], k[a] * d[a] + (size[a] - 1) * s[a] + 1, s[a])
                       for a in range(3))
            y[(slice(None), slice(g * OCg, (g + 1) * OCg)) + sl] += contrib
    y = y[(slice(None), slice(None)) + tuple(slice(p[a], p[a] + out[a]) for a in range(3))]
    if b is not None:
        y = y + b[None, :, None, None, None]
    return y


def np_linear_axis(i, o, align, scale=None):
    """Source indices (i0, i1) and weights (w0, w1) of linear resampling i -> o along one axis
    (float64; scale the user's factor or None)."""
    idx = np.arange(o, dtype=np.float64)
    if align:
        r = idx * ((i - 1) / (o - 1) if o > 1 else 0.0)
    else:
        r = np.maximum((idx + 0.5) * (1.0 / scale if scale else i / o) - 0.5, 0.0)
    i0 = np.minimum(np.floor(r).astype(np.int64), i - 1)
    i1 = np.minimum(i0 + 1, i - 1)
    w1 = np.clip(r - i0, 0.0, 1.0)
    return i0, i1, 1.0 - w1, w1


def np_trilinear(x, out, align, scales=(None, None, None)):
    """y = sum over the 8 corners of x[i_d, i_h, i_w] * w_d * w_h * w_w."""
    axes = [np_linear_axis(x.shape[2 + a], out[a], align, scales[a]) for a in range(3)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for cd in (0, 1):
        for ch in (0, 1):
            for cw in (0, 1):
                (id_, wd), (ih, wh), (iw, ww) = [
                    (ax[c], ax[2 + c]) for ax, c in zip(axes, (cd, ch, cw))]
                g = x[:, :, id_][:, :, :, ih][:, :, :, :, iw]
                y += g * (wd[:, None, None] * wh[None, :, None] * ww[None, None, :])
    return y


def np_nearest(x, out, exact, scales=(None, None, None)):
    """src = min(floor(dst * s), in - 1) (nearest) or min(floor((dst + 0.5) * s), in - 1)
    (nearest-exact), s = 1/scale or in/out per axis."""
    idx = []
    for a in range(3):
        i, o = x.shape[2 + a], out[a]
        s = 1.0 / scales[a] if scales[a] else i / o
        src = np.floor((np.arange(o) + (0.5 if exact else 0.0)) * s).astype(np.int64)
        idx.append(np.minimum(src, i - 1))
    return x[:, :, idx[0]][:, :, :, idx[1]][:, :, :, :, idx[2]]


# ---- torch-free: conv_transpose3d --------------------------------------------------------

CT_CASES = [
    dict(),
    dict(stride=2),
    dict(stride=(2, 1, 3), padding=(1, 0, 1), output_padding=(1, 0, 2)),
    dict(stride=1, dilation=(2, 1, 2), padding=1, output_padding=(1, 0, 1)),
    dict(stride=2, padding=1, output_padding=1, groups=2),
    dict(stride=(1, 2, 2), groups=4, dilation=(1, 1, 2)),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("kw", CT_CASES)
def test_conv_transpose3d_matches_numpy(kw, bias):
    g = kw.get("groups", 1)
    x, w = rnd(2, 4, 3, 4, 3), rnd(4, 6 // g if g != 4 else 1, 2, 3, 2)
    b = rnd(w.shape[1] * g) if bias else None
    y = F.conv_transpose3d(t(x), t(w), None if b is None else t(b), **kw)
    ref = np_conv_transpose3d(x, w, b, kw.get("stride", 1), kw.get("padding", 0),
                              kw.get("output_padding", 0), g, kw.get("dilation", 1))
    assert tuple(y.shape) == ref.shape
    np.testing.assert_allclose(n(y), ref, rtol=1e-10, atol=1e-10)


def test_conv_transpose3d_float32_and_unbatched():
    x, w, b = rnd(3, 2, 3, 4, dtype=np.float32), rnd(3, 2, 2, 2, 3, dtype=np.float32), \
        rnd(2, dtype=np.float32)
    y = F.conv_transpose3d(t(x), t(w), t(b), stride=2, padding=(0, 1, 1))
    assert y.dtype == cddp.float32 and y.dim() == 4
    ref = np_conv_transpose3d(x[None].astype(np.float64), w.astype(np.float64),
                              b.astype(np.float64), 2, (0, 1, 1))[0]
    np.testing.assert_allclose(n(y), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(1, 2, 1), dilation=2, groups=2, padding=(1, 0, 1))])
def test_conv_transpose3d_finite_differences(kw):
    x, w, b = rnd(1, 2, 2, 3, 2), rnd(2, 2 // kw.get("groups", 1), 2, 2, 2), rnd(2 // kw.get(
        "groups", 1) * kw.get("groups", 1))
    gradcheck(lambda x, w, b: F.conv_transpose3d(x, w, b, **kw), x, w, b)


def test_conv_transpose3d_is_conv3d_adjoint():
    # <conv3d(x, w), y> == <x, conv_transpose3d(y, w)> for matching geometry
    x, w = rnd(2, 4, 5, 6, 7), rnd(6, 2, 3, 2, 3)
    kw = dict(stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2)
    cx = F.conv3d(t(x), t(w), **kw)
    y = rnd(*cx.shape)
    op = tuple(x.shape[2 + a] - (cx.shape[2 + a] - 1) * kw["stride"][a] + 2 * kw["padding"][a]
               - kw["dilation"][a] * (w.shape[2 + a] - 1) - 1 for a in range(3))
    ty = F.conv_transpose3d(t(y), t(w), output_padding=op, **kw)
    assert tuple(ty.shape) == x.shape
    np.testing.assert_allclose(np.sum(n(cx) * y), np.sum(x * n(ty)), rtol=1e-10)


def test_conv_transpose3d_empty_batch():
    y = F.conv_transpose3d(cddp.zeros(0, 2, 2, 2, 2, dtype=cddp.float64),
                           t(rnd(2, 3, 2, 2, 2)), stride=2)
    assert tuple(y.shape) == (0, 3, 4, 4, 4)


# ---- torch-free: interpolate 5-D ---------------------------------------------------------

INTERP_CASES = [
    dict(size=(6, 3, 7)),
    dict(size=5),
    dict(size=(2, 8, 4)),
    dict(scale_factor=2),
    dict(scale_factor=(1.5, 0.5, 2.25)),
    dict(scale_factor=(1.7, 0.6, 2.3), recompute_scale_factor=True),
    dict(size=(1, 1, 1)),
]


def _scales(kw):
    sf = kw.get("scale_factor")
    if sf is None or kw.get("recompute_scale_factor"):
        return (None, None, None)
    return _t3(sf) if not isinstance(sf, float) else (sf,) * 3


def _out_size(shape, kw):
    if "size" in kw:
        return _t3(kw["size"])
    sf = kw["scale_factor"]
    sf = (sf,) * 3 if isinstance(sf, (int, float)) else sf
    return tuple(int(math.floor(shape[2 + a] * sf[a])) for a in range(3))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", INTERP_CASES)
def test_trilinear_matches_numpy(kw, align):
    x = rnd(2, 3, 4, 5, 3)
    y = F.interpolate(t(x), mode="trilinear", align_corners=align, **kw)
    ref = np_trilinear(x, _out_size(x.shape, kw), align, _scales(kw))
    assert tuple(y.shape) == ref.shape
    np.testing.assert_allclose(n(y), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("kw", INTERP_CASES)
def test_nearest_5d_matches_numpy(kw, mode):
    x = rnd(2, 3, 4, 5, 3)
    y = F.interpolate(t(x), mode=mode, **kw)
    ref = np_nearest(x, _out_size(x.shape, kw), mode == "nearest-exact", _scales(kw))
    np.testing.assert_array_equal(n(y), ref)


@pytest.mark.parametrize("mode,align", [("trilinear", False), ("trilinear", True),
                                        ("nearest", None), ("nearest-exact", None)])
def test_interpolate_5d_finite_differences(mode, align):
    x = rnd(1, 2, 2, 3, 2)
    gradcheck(lambda x: F.interpolate(x, size=(3, 2, 5), mode=mode, align_corners=align), x)
    gradcheck(lambda x: F.interpolate(x, scale_factor=(1.5, 2, 0.5), mode=mode,
                                      align_corners=align), x)


def test_upsample_module_5d():
    x = rnd(1, 2, 3, 2, 4)
    up = nn.Upsample(scale_factor=(2, 1, 1.5), mode="trilinear")
    assert repr(up) == "Upsample(scale_factor=(2.0, 1.0, 1.5), mode='trilinear')"
    np.testing.assert_allclose(n(up(t(x))), np_trilinear(x, (6, 2, 6), False, (2.0, 1.0, 1.5)),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(n(nn.Upsample(size=(4, 4, 4))(t(x))),
                                  np_nearest(x, (4, 4, 4), False))


# ---- torch oracle: conv_transpose3d ------------------------------------------------------

TORCH_CT = [
    dict(),
    dict(stride=2),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(3, 2, 1), padding=(2, 1, 0), output_padding=(2, 1, 0)),
    dict(stride=1, padding=(0, 2, 1), dilation=(2, 3, 1), output_padding=(1, 2, 0)),
    dict(stride=(2, 2, 3), dilation=2, output_padding=(1, 1, 2), groups=2),
    dict(groups=4, stride=(1, 1, 2), padding=1),
    dict(stride=[2], padding=[1], output_padding=[1], dilation=[1]),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kw", TORCH_CT)
def test_conv_transpose3d_vs_torch(torch, kw, bias, dtype):
    g = kw.get("groups", 1)
    npd = np.dtype(dtype)
    x, w = rnd(2, 4, 3, 4, 5, dtype=npd), rnd(4, 8 // g, 3, 2, 3, dtype=npd)
    b = rnd(8, dtype=npd) if bias else None
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True) if bias else None
    cx, cw = t(x, True), t(w, True)
    cb = t(b, True) if bias else None
    ty = torch.nn.functional.conv_transpose3d(tx, tw, tb, **kw)
    cy = F.conv_transpose3d(cx, cw, cb, **kw)
    assert tuple(cy.shape) == tuple(ty.shape)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), **tol)
    gout = rnd(*ty.shape, dtype=npd)
    ty.backward(torch.tensor(gout))
    cy.backward(t(gout))
    for c, tt in [(cx, tx), (cw, tw)] + ([(cb, tb)] if bias else []):
        np.testing.assert_allclose(n(c.grad), tt.grad.numpy(), **tol)


def test_conv_transpose3d_unbatched_vs_torch(torch):
    x, w, b = rnd(2, 3, 2, 4), rnd(2, 3, 2, 3, 2), rnd(3)
    ty = torch.nn.functional.conv_transpose3d(torch.tensor(x), torch.tensor(w), torch.tensor(b),
                                              stride=2, output_padding=1)
    cy = F.conv_transpose3d(t(x), t(w), t(b), stride=2, output_padding=1)
    np.testing.assert_allclose(n(cy), ty.numpy(), rtol=1e-10, atol=1e-10)


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type and message are what is compared
        return type(e), str(e)
    return None, None


CT_ERRORS = [
    ("groups=3", dict(groups=3)),
    ("groups=0", dict(groups=0)),
    ("stride=0", dict(stride=0)),
    ("padding=-1", dict(padding=-1)),
    ("output_padding>=stride", dict(stride=2, output_padding=2)),
    ("output_padding>=stride,dilation", dict(output_padding=1)),
    ("output_padding<0", dict(output_padding=-1)),
    ("padding str", dict(padding="same")),
    ("stride of 2", dict(stride=(1, 2))),
    ("bias size", dict(bias=3)),
    ("channels", dict(channels=3)),
    ("input dim", dict(input_dim=3)),
]


@pytest.mark.parametrize("name,kw", CT_ERRORS, ids=[c[0] for c in CT_ERRORS])
def test_conv_transpose3d_errors_vs_torch(torch, name, kw):
    kw = dict(kw)
    x, w = rnd(2, 4, 3, 5, 5), rnd(4, 2, 2, 3, 3)
    if "channels" in kw:
        x = x[:, :kw.pop("channels")]
    if "input_dim" in kw:
        x = x[(0,) * (5 - kw.pop("input_dim"))]
    b = rnd(kw.pop("bias")) if "bias" in kw else None

    def run(mod, F_, tensor):
        return lambda: F_.conv_transpose3d(tensor(x), tensor(w),
                                           None if b is None else tensor(b), **kw)

    te, tm = _err(run(torch, torch.nn.functional, torch.tensor))
    ce, cm = _err(run(cddp, F, t))
    assert te is not None and ce is te, (te, tm, ce, cm)
    assert cm == tm


def test_conv_transpose3d_other_errors():
    x, w = t(rnd(1, 2, 2, 2, 2)), t(rnd(2, 2, 2, 2, 2))
    with pytest.raises(RuntimeError, match="dilation should be greater than zero"):
        F.conv_transpose3d(x, w, dilation=0)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv_transpose3d(x, w, padding=3)
    with pytest.raises(RuntimeError, match="expected a 5D weight"):
        F.conv_transpose3d(x, t(rnd(2, 2, 2, 2)))
    with pytest.raises(TypeError):
        F.conv_transpose3d(x, w, stride=1.5)
    with pytest.raises(TypeError):
        F.conv_transpose3d(x, w, groups=1.0)


# ---- torch oracle: nn.ConvTranspose3d ----------------------------------------------------

MOD_ARGS = [
    (4, 6, 3, {}),
    (4, 6, (2, 3, 1), dict(stride=2, padding=(1, 0, 0), output_padding=(1, 0, 0), groups=2,
                           bias=False, dilation=(1, 2, 1))),
    (2, 3, 2, dict(stride=(1, 2, 3), output_padding=(0, 1, 2))),
]


@pytest.mark.parametrize("cin,cout,k,kw", MOD_ARGS)
def test_conv_transpose3d_module_vs_torch(torch, cin, cout, k, kw):
    tm = torch.nn.ConvTranspose3d(cin, cout, k, **kw).double()
    cm = nn.ConvTranspose3d(cin, cout, k, dtype=cddp.float64, **kw)
    assert repr(cm) == repr(tm)
    tsd, csd = tm.state_dict(), cm.state_dict()
    assert list(csd) == list(tsd)
    assert {k: tuple(v.shape) for k, v in csd.items()} == {k: tuple(v.shape)
                                                           for k, v in tsd.items()}
    cm.load_state_dict({k: t(v.numpy()) for k, v in tsd.items()})
    x = rnd(2, cin, 3, 2, 4)
    tx, cx = torch.tensor(x, requires_grad=True), t(x, True)
    ty, cy = tm(tx), cm(cx)
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    gout = rnd(*ty.shape)
    ty.backward(torch.tensor(gout))
    cy.backward(t(gout))
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(n(cm.weight.grad), tm.weight.grad.numpy(), rtol=1e-10,
                               atol=1e-10)


def test_conv_transpose3d_module_output_size(torch):
    tm = torch.nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1).double()
    cm = nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1, dtype=cddp.float64)
    cm.load_state_dict({k: t(v.numpy()) for k, v in tm.state_dict().items()})
    x = rnd(1, 2, 3, 4, 2)
    for size in [(5, 7, 3), (6, 8, 4), [1, 3, 6, 7, 4]]:
        ty, cy = tm(torch.tensor(x), output_size=size), cm(t(x), output_size=size)
        assert tuple(cy.shape) == tuple(ty.shape)
        np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for size in [(1, 2), (9, 7, 3)]:
        te, tmsg = _err(lambda: tm(torch.tensor(x), output_size=size))
        ce, cmsg = _err(lambda: cm(t(x), output_size=size))
        assert ce is te is ValueError
        if len(size) == 2:
            assert cmsg == tmsg


def test_conv_transpose3d_module_init_and_ctor_errors(torch):
    m = nn.ConvTranspose3d(4, 8, 3)
    bound = 1 / math.sqrt(8 * 27)         # fan_in = weight.size(1) * receptive field
    assert tuple(m.weight.shape) == (4, 8, 3, 3, 3)
    assert np.abs(n(m.weight)).max() <= bound + 1e-7
    assert np.abs(n(m.bias)).max() <= bound + 1e-7
    assert n(m.weight).std() > bound / 4
    for kw in [dict(padding_mode="reflect"), dict(groups=3)]:
        te, tmsg = _err(lambda: torch.nn.ConvTranspose3d(4, 6, 3, **kw))
        ce, cmsg = _err(lambda: nn.ConvTranspose3d(4, 6, 3, **kw))
        assert ce is te is ValueError and cmsg == tmsg


# ---- torch oracle: interpolate 5-D -------------------------------------------------------

TORCH_INTERP = [
    dict(size=(7, 3, 9)),
    dict(size=4),
    dict(size=(3, 5, 2)),
    dict(scale_factor=2),
    dict(scale_factor=0.5),
    dict(scale_factor=(1.7, 0.6, 2.3)),
    dict(scale_factor=(1.7, 0.6, 2.3), recompute_scale_factor=True),
    dict(scale_factor=(3, 1, 1.25), recompute_scale_factor=False),
    dict(scale_factor=(1.1, 2.1, 1.2)),   # out == in and out == 2*in despite the scale
    dict(size=(1, 1, 1)),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode,align", [("trilinear", False), ("trilinear", True),
                                        ("nearest", None), ("nearest-exact", None)])
@pytest.mark.parametrize("kw", TORCH_INTERP)
def test_interpolate_5d_vs_torch(torch, kw, mode, align, dtype):
    npd = np.dtype(dtype)
    x = rnd(2, 3, 3, 5, 4, dtype=npd)
    tx, cx = torch.tensor(x, requires_grad=True), t(x, True)
    ty = torch.nn.functional.interpolate(tx, mode=mode, align_corners=align, **kw)
    cy = F.interpolate(cx, mode=mode, align_corners=align, **kw)
    assert tuple(cy.shape) == tuple(ty.shape)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), **tol)
    gout = rnd(*ty.shape, dtype=npd)
    ty.backward(torch.tensor(gout))
    cy.backward(t(gout))
    if mode == "nearest" and kw.get("scale_factor") == (1.1, 2.1, 1.2):
        # torch's 3-D nearest backward takes the out == in / out == 2*in shortcuts its forward
        # does not, so its gradient is not its forward's; cddp's is (the forward's adjoint)
        ref = np.zeros_like(x)
        src = [np.minimum(np.floor(np.arange(o, dtype=np.float32) * np.float32(1 / sf)
                                   ).astype(int), i - 1)
               for i, o, sf in zip(x.shape[2:], ty.shape[2:], kw["scale_factor"])]
        np.add.at(ref, (slice(None), slice(None)) + np.ix_(*src), gout)
        np.testing.assert_allclose(n(cx.grad), ref, **tol)
        assert not np.allclose(ref, tx.grad.numpy())
        return
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), **tol)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_5d_indices_sweep_vs_torch(torch, mode):
    # the float32 source-index arithmetic over many sizes and scale factors, one axis each
    rng = np.random.default_rng(11)
    for _ in range(60):
        i = int(rng.integers(1, 12))
        sf = float(rng.choice([rng.uniform(0.3, 4.0), 2.0, 1.0, 0.5, 1.1, 1.9, 3.0]))
        if math.floor(i * sf) < 1:
            continue
        for axis in range(3):
            shape = [1, 1, 1, 1, 1]
            shape[2 + axis] = i
            scales = [1.0, 1.0, 1.0]
            scales[axis] = sf
            x = np.arange(i, dtype=np.float32).reshape(shape)
            ty = torch.nn.functional.interpolate(torch.tensor(x), scale_factor=scales, mode=mode)
            cy = F.interpolate(t(x), scale_factor=scales, mode=mode)
            np.testing.assert_array_equal(n(cy), ty.numpy(), err_msg=f"i={i} scale={sf}")


def test_interpolate_5d_half_and_unbatched_module(torch):
    x = rnd(1, 2, 3, 4, 5, dtype=np.float32)
    for dt in ("float16", "bfloat16"):
        ty = torch.nn.functional.interpolate(torch.tensor(x).to(getattr(torch, dt)),
                                             scale_factor=(2, 1.5, 0.5), mode="trilinear")
        cy = F.interpolate(t(x).to(getattr(cddp, dt)), scale_factor=(2, 1.5, 0.5),
                           mode="trilinear")
        assert cy.dtype == getattr(cddp, dt)
        np.testing.assert_allclose(n(cy.float()), ty.float().numpy(), rtol=1e-2, atol=1e-2)
    tu = torch.nn.Upsample(size=(5, 2, 7), mode="trilinear", align_corners=True)
    cu = nn.Upsample(size=(5, 2, 7), mode="trilinear", align_corners=True)
    np.testing.assert_allclose(n(cu(t(x))), tu(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


INTERP_ERRORS = [
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="bilinear")),
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="linear")),
    ((2, 3, 4, 5), dict(scale_factor=2, mode="trilinear")),
    ((1, 3, 4), dict(scale_factor=2, mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(size=(2, 3), mode="nearest")),
    ((1, 2, 3, 4, 5), dict(scale_factor=(2, 3), mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(size=(0, 3, 3), mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(scale_factor=0.1, mode="nearest")),
    ((1, 2, 3, 4, 5), dict(size=2, mode="nearest", align_corners=True)),
    ((1, 2, 3, 4, 5), dict(size=2, scale_factor=2, mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(size=2, mode="trilinear", recompute_scale_factor=True)),
]


@pytest.mark.parametrize("shape,kw", INTERP_ERRORS)
def test_interpolate_5d_errors_vs_torch(torch, shape, kw):
    x = rnd(*shape)
    te, tm = _err(lambda: torch.nn.functional.interpolate(torch.tensor(x), **kw))
    ce, cm = _err(lambda: F.interpolate(t(x), **kw))
    assert te is not None and ce is te, (te, tm, ce, cm)
    assert cm == tm


def test_interpolate_5d_modes():
    """bicubic is 4-D only (torch's NotImplementedError); area on 5-D is adaptive average
    pooling to the output size, as torch's."""
    x = t(rnd(1, 1, 2, 2, 2))
    with pytest.raises(NotImplementedError, match="bicubic mode needs 4D input"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    y = t(rnd(1, 2, 4, 6, 5))
    np.testing.assert_array_equal(n(F.interpolate(y, size=(2, 3, 2), mode="area")),
                                  n(F.adaptive_avg_pool3d(y, (2, 3, 2))))
