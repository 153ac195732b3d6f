"""Volumetric convolution and pooling (cddp/nn/_functional_3d.py): conv3d, max_pool3d,
avg_pool3d, adaptive_avg_pool3d, adaptive_max_pool3d and their modules.

Oracles: NumPy float64 references written from the definitions (a loop over kernel taps for
conv3d, a loop over output positions for the pools) and central finite differences, neither
needing torch; then torch for values, gradients and indices over strides, paddings
('same'/'valid'), dilations, groups, ceil_mode, count_include_pad, divisor_override, ties and
NaN, float32/float64, unbatched inputs; modules' parameter shapes, state_dict keys, repr and
outputs with torch's weights loaded; and the error cases' exception types and messages.
"""
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(3)

# torch warns that its own 'same' padding with even kernels copies the input
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")


def rnd(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def _t3(v):
    return (v,) * 3 if isinstance(v, int) else tuple(v)


# ---- NumPy references ------------------------------------------------------------------

def np_conv3d(x, w, b=None, stride=1, pad=0, dil=1, groups=1):
    """y[n, o, z, y, x] = sum_{c,i,j,k} xp[n, g*Cg + c, z*sd + i*dd, y*sh + j*dh, x*sw + k*dw]
    * w[o, c, i, j, k]; pad: int, 3-tuple or 3 (left, right) pairs."""
    stride, dil = _t3(stride), _t3(dil)
    pad = [(p, p) if isinstance(p, int) else tuple(p) for p in _t3(pad)]
    N, C, D, H, W = x.shape
    OC, Cg, KD, KH, KW = w.shape
    xp = np.pad(x, [(0, 0), (0, 0)] + pad)
    out = [(xp.shape[2 + a] - dil[a] * (k - 1) - 1) // stride[a] + 1
           for a, k in enumerate((KD, KH, KW))]
    y = np.zeros((N, OC) + tuple(out))
    OCg = OC // groups
    for g in range(groups):
        for i in range(KD):
            for j in range(KH):
                for k in range(KW):
                    sl = [slice(o * dil[a], o * dil[a] + stride[a] * (out[a] - 1) + 1, stride[a])
                          for a, o in enumerate((i, j, k))]
                    patch = xp[(slice(None), slice(g * Cg, (g + 1) * Cg)) + tuple(sl)]
                    y[:, g * OCg:(g + 1) * OCg] += np.einsum(
                        "ncdhw,oc->nodhw", patch, w[g * OCg:(g + 1) * OCg, :, i, j, k])
    if b is not None:
        y += b[None, :, None, None, None]
    return y


def _np_out(size, k, s, p, d, ceil):
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    o = num // s + 1
    if ceil and (o - 1) * s >= size + p:
        o -= 1
    return o


def np_pool3d(x, k, s=None, p=0, d=1, ceil=False, mode="max", cip=True, div=None):
    """Max or mean over each output position's window, one position at a time."""
    k = _t3(k)
    s, p, d = _t3(k if s is None else s), _t3(p), _t3(d)
    size = x.shape[-3:]
    out = [_np_out(size[a], k[a], s[a], p[a], d[a], ceil) for a in range(3)]
    y = np.zeros(x.shape[:-3] + tuple(out))
    for o in np.ndindex(*out):
        idx, ext, ext_in = [], 1, 1
        for a in range(3):
            start = o[a] * s[a] - p[a]
            taps = start + d[a] * np.arange(k[a])
            valid = taps[(taps >= 0) & (taps < size[a])]
            idx.append(valid)
            # avg: window clipped to the padded input (count_include_pad) or to the input
            ext *= min(start + k[a], size[a] + p[a]) - start
            ext_in *= len(valid)
        win = x[..., idx[0][:, None, None], idx[1][None, :, None], idx[2][None, None, :]]
        win = win.reshape(x.shape[:-3] + (-1,))
        if mode == "max":
            y[(Ellipsis,) + o] = win.max(-1)
        else:
            divisor = div if div is not None else (ext if cip else ext_in)
            y[(Ellipsis,) + o] = win.sum(-1) / divisor
    return y


def np_adaptive3d(x, out, mode):
    size = x.shape[-3:]
    y = np.zeros(x.shape[:-3] + tuple(out))
    for o in np.ndindex(*out):
        sl = tuple(slice(math.floor(o[a] * size[a] / out[a]),
                         math.ceil((o[a] + 1) * size[a] / out[a])) for a in range(3))
        win = x[(Ellipsis,) + sl].reshape(x.shape[:-3] + (-1,))
        y[(Ellipsis,) + o] = win.max(-1) if mode == "max" else win.mean(-1)
    return y


# ---- torch-free: values ----------------------------------------------------------------

CONV_CASES = [  # (x shape, w shape, kwargs)
    ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), {}),
    ((1, 2, 6, 5, 7), (3, 2, 2, 3, 1), dict(stride=2, padding=1)),
    ((2, 4, 7, 6, 5), (6, 2, 3, 2, 3), dict(stride=(2, 1, 3), padding=(1, 0, 2),
                                            dilation=(2, 1, 1), groups=2)),
    ((1, 4, 6, 6, 6), (4, 1, 3, 3, 3), dict(padding=2, dilation=2, groups=4)),  # depthwise
    ((2, 3, 4, 5, 6), (2, 3, 1, 1, 1), dict(stride=(1, 2, 2))),               # pointwise
    ((1, 2, 5, 5, 5), (3, 2, 2, 3, 4), dict(padding="same", dilation=(3, 1, 2))),  # odd pads
    ((1, 2, 5, 4, 5), (3, 2, 3, 2, 3), dict(padding="valid")),
]


def _np_pad(kw, w):
    pad = kw.get("padding", 0)
    if pad == "valid":
        return 0
    if pad == "same":
        dil = _t3(kw.get("dilation", 1))
        tot = [dil[a] * (w.shape[2 + a] - 1) for a in range(3)]
        return [(v // 2, v - v // 2) for v in tot]
    return pad


@pytest.mark.parametrize("xs,ws,kw", CONV_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv3d_matches_numpy(xs, ws, kw, with_bias):
    x, w = rnd(*xs), rnd(*ws)
    b = rnd(ws[0]) if with_bias else None
    got = F.conv3d(t(x), t(w), None if b is None else t(b), **kw)
    want = np_conv3d(x, w, b, kw.get("stride", 1), _np_pad(kw, w), kw.get("dilation", 1),
                     kw.get("groups", 1))
    assert tuple(got.shape) == want.shape
    assert got.is_contiguous()
    np.testing.assert_allclose(n(got), want, rtol=1e-10, atol=1e-10)


def test_conv3d_unbatched_float32_and_top_level_name():
    x, w, b = rnd(3, 4, 5, 6), rnd(2, 3, 2, 2, 3), rnd(2)
    got = F.conv3d(t(x.astype(np.float32)), t(w.astype(np.float32)), t(b.astype(np.float32)),
                   padding=1)
    assert got.dtype == cddp.float32 and tuple(got.shape) == (2, 5, 6, 6)
    np.testing.assert_allclose(n(got), np_conv3d(x[None], w, b, pad=1)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(n(cddp.conv3d(t(x), t(w), t(b))), n(F.conv3d(t(x), t(w), t(b))))


def test_conv3d_zero_batch():
    y = F.conv3d(t(np.zeros((0, 2, 4, 4, 4))), t(rnd(3, 2, 2, 2, 2)), stride=2)
    assert tuple(y.shape) == (0, 3, 2, 2, 2)


POOL_CASES = [  # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, True),
    ((2, 3, 2), (1, 2, 3), (1, 1, 0), (2, 1, 3), False),
    ((3, 1, 2), (2, 1, 2), (1, 0, 1), 1, True),
    ((1, 2, 3), 1, 0, (1, 2, 1), False),
]


@pytest.mark.parametrize("k,s,p,d,ceil", POOL_CASES)
def test_max_pool3d_matches_numpy(k, s, p, d, ceil):
    x = rnd(2, 3, 7, 6, 9)
    got = F.max_pool3d(t(x), k, s, p, d, ceil)
    want = np_pool3d(x, k, s, p, d, ceil, "max")
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(n(got), want)


@pytest.mark.parametrize("k,s,p,_d,ceil", POOL_CASES)
@pytest.mark.parametrize("cip,div", [(True, None), (False, None), (True, 7), (False, 2)])
def test_avg_pool3d_matches_numpy(k, s, p, _d, ceil, cip, div):
    x = rnd(2, 7, 6, 9)                                        # unbatched (C, D, H, W)
    got = F.avg_pool3d(t(x), k, s, p, ceil, cip, div)
    want = np_pool3d(x, k, s, p, 1, ceil, "avg", cip, div)
    assert tuple(got.shape) == want.shape
    np.testing.assert_allclose(n(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("out", [(3, 4, 5), (2, 1, 7), 1, (5, 6, 7)])
def test_adaptive_pool3d_matches_numpy(out):
    x = rnd(2, 3, 5, 6, 7)
    o = _t3(out)
    np.testing.assert_allclose(n(F.adaptive_avg_pool3d(t(x), out)), np_adaptive3d(x, o, "avg"),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(n(F.adaptive_max_pool3d(t(x), out)),
                                  np_adaptive3d(x, o, "max"))
    # None keeps the input's size
    assert tuple(F.adaptive_avg_pool3d(t(x), (2, None, 3)).shape) == (2, 3, 2, 6, 3)


def test_max_pool3d_indices_point_at_the_values():
    x = rnd(2, 3, 6, 5, 7)
    y, idx = F.max_pool3d(t(x), (2, 3, 2), (2, 1, 2), (1, 1, 0), ceil_mode=True,
                          return_indices=True)
    assert idx.dtype == cddp.int64
    flat = x.reshape(2, 3, -1)
    picked = np.take_along_axis(flat, n(idx).reshape(2, 3, -1), -1).reshape(n(y).shape)
    np.testing.assert_array_equal(picked, n(y))
    y2, idx2 = F.max_pool3d_with_indices(t(x), (2, 3, 2), (2, 1, 2), (1, 1, 0), ceil_mode=True)
    np.testing.assert_array_equal(n(idx2), n(idx))
    ya, ia = F.adaptive_max_pool3d(t(x), (4, 3, 5), return_indices=True)
    picked = np.take_along_axis(flat, n(ia).reshape(2, 3, -1), -1).reshape(n(ya).shape)
    np.testing.assert_array_equal(picked, n(ya))


# ---- torch-free: gradients (central differences, float64) ------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(stride=(2, 1, 2), padding=(1, 0, 1)),
                                dict(dilation=(2, 1, 1), groups=2, padding="same")])
def test_conv3d_gradients_finite_differences(kw):
    x, w, b = rnd(1, 2, 4, 3, 4), rnd(2, 2 // kw.get("groups", 1), 2, 2, 2), rnd(2)
    gradcheck(lambda a, c, e: F.conv3d(a, c, e, **kw), x, w, b)


def test_pool3d_gradients_finite_differences():
    x = rnd(1, 2, 4, 5, 4)                  # distinct values: max is differentiable there
    gradcheck(lambda a: F.max_pool3d(a, 2, (1, 2, 1), 1, (1, 1, 2), True), x)
    gradcheck(lambda a: F.avg_pool3d(a, (2, 3, 2), 2, 1, True, False), x)
    gradcheck(lambda a: F.avg_pool3d(a, 2, 1, 0, False, True, 3), x)
    gradcheck(lambda a: F.adaptive_avg_pool3d(a, (3, 2, 3)), x)
    gradcheck(lambda a: F.adaptive_max_pool3d(a, (3, 2, 3)), x)


# ---- vs torch ----------------------------------------------------------------------------

def _pair(torch, a, requires_grad=True):
    """The same NumPy array as a cddp and a torch tensor (leaves)."""
    c = t(a, requires_grad)
    tt = torch.from_numpy(a.copy())
    if requires_grad:
        tt.requires_grad_(True)
    return c, tt


def _close(got, want, dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(n(got), want.detach().numpy(), **tol)


TORCH_CONV_CASES = CONV_CASES + [
    ((2, 6, 5, 7, 6), (6, 2, 3, 3, 2), dict(stride=(1, 3, 2), padding=(0, 2, 1), groups=3)),
    ((3, 4, 3, 4, 5), (8, 4, 3, 3, 3), dict(padding=(1, 1, 1), dilation=(1, 2, 2))),
]


@pytest.mark.parametrize("xs,ws,kw", TORCH_CONV_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv3d_vs_torch(torch, xs, ws, kw, dtype):
    x, w, b = rnd(*xs, dtype=dtype), rnd(*ws, dtype=dtype), rnd(ws[0], dtype=dtype)
    (xc, xt), (wc, wt), (bc, bt) = _pair(torch, x), _pair(torch, w), _pair(torch, b)
    yc = F.conv3d(xc, wc, bc, **kw)
    yt = torch.nn.functional.conv3d(xt, wt, bt, **kw)
    _close(yc, yt, dtype)
    g = rnd(*yt.shape, dtype=dtype)
    yc.backward(t(g))
    yt.backward(torch.from_numpy(g))
    for c, tt in ((xc, xt), (wc, wt), (bc, bt)):
        _close(c.grad, tt.grad, dtype)


def test_conv3d_non_contiguous_input_vs_torch(torch):
    w = rnd(4, 3, 2, 2, 2)
    xc = t(rnd(2, 5, 6, 3, 7)).permute(0, 3, 1, 2, 4)        # (2, 3, 5, 6, 7), strided
    xt = torch.from_numpy(n(xc))
    assert not xc.is_contiguous()
    _close(F.conv3d(xc, t(w), stride=(2, 1, 1)),
           torch.nn.functional.conv3d(xt, torch.from_numpy(w), stride=(2, 1, 1)), np.float64)


TORCH_POOL_CASES = POOL_CASES + [((2, 2, 2), (3, 2, 1), (1, 0, 1), (2, 3, 1), True)]


@pytest.mark.parametrize("k,s,p,d,ceil", TORCH_POOL_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool3d_vs_torch(torch, k, s, p, d, ceil, dtype):
    x = rnd(2, 3, 7, 6, 9, dtype=dtype)
    xc, xt = _pair(torch, x)
    yc, ic = F.max_pool3d(xc, k, s, p, d, ceil, return_indices=True)
    yt, it = torch.nn.functional.max_pool3d(xt, k, s, p, d, ceil, return_indices=True)
    _close(yc, yt, dtype)
    np.testing.assert_array_equal(n(ic), it.numpy())
    g = rnd(*yt.shape, dtype=dtype)
    yc.backward(t(g))
    yt.backward(torch.from_numpy(g))
    _close(xc.grad, xt.grad, dtype)


def test_max_pool3d_ties_nan_and_inf_vs_torch(torch):
    x = RNG.integers(0, 3, size=(2, 2, 5, 6, 5)).astype(np.float32)   # many ties
    x[0, 0, 1, 2, 3] = np.nan
    x[0, 0, 2, 2, 2] = np.nan
    x[1, 1] = -np.inf
    xc, xt = _pair(torch, x)
    for args in [(2, 1, 1, 1, False), ((3, 2, 2), (2, 2, 1), (1, 0, 1), (1, 2, 1), True)]:
        yc, ic = F.max_pool3d(xc, *args, return_indices=True)
        yt, it = torch.nn.functional.max_pool3d(xt, *args, return_indices=True)
        np.testing.assert_array_equal(n(yc), yt.detach().numpy())
        np.testing.assert_array_equal(n(ic), it.numpy())
    # gradients of ties go to the first maximum, as torch's
    x2 = RNG.integers(0, 2, size=(1, 2, 4, 4, 4)).astype(np.float64)
    xc, xt = _pair(torch, x2)
    F.max_pool3d(xc, 2, 1).sum().backward()
    torch.nn.functional.max_pool3d(xt, 2, 1).sum().backward()
    np.testing.assert_array_equal(n(xc.grad), xt.grad.numpy())


@pytest.mark.parametrize("k,s,p,_d,ceil", TORCH_POOL_CASES)
@pytest.mark.parametrize("cip,div", [(True, None), (False, None), (False, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_avg_pool3d_vs_torch(torch, k, s, p, _d, ceil, cip, div, dtype):
    x = rnd(2, 3, 7, 6, 9, dtype=dtype)
    xc, xt = _pair(torch, x)
    yc = F.avg_pool3d(xc, k, s, p, ceil, cip, div)
    yt = torch.nn.functional.avg_pool3d(xt, k, s, p, ceil, cip, div)
    _close(yc, yt, dtype)
    g = rnd(*yt.shape, dtype=dtype)
    yc.backward(t(g))
    yt.backward(torch.from_numpy(g))
    _close(xc.grad, xt.grad, dtype)


@pytest.mark.parametrize("out", [(3, 4, 5), (2, None, 3), 1, (6, 7, 8), (4, 1, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adaptive_pool3d_vs_torch(torch, out, dtype):
    x = rnd(2, 3, 5, 7, 9, dtype=dtype)
    for fn in ("adaptive_avg_pool3d", "adaptive_max_pool3d"):
        xc, xt = _pair(torch, x)
        yc = getattr(F, fn)(xc, out)
        yt = getattr(torch.nn.functional, fn)(xt, out)
        _close(yc, yt, dtype)
        g = rnd(*yt.shape, dtype=dtype)
        yc.backward(t(g))
        yt.backward(torch.from_numpy(g))
        _close(xc.grad, xt.grad, dtype)
    _, ic = F.adaptive_max_pool3d(t(x), out, return_indices=True)
    _, it = torch.nn.functional.adaptive_max_pool3d(torch.from_numpy(x), out,
                                                    return_indices=True)
    np.testing.assert_array_equal(n(ic), it.numpy())


def test_pools_unbatched_zero_batch_and_half_vs_torch(torch):
    TF = torch.nn.functional
    x = rnd(3, 6, 5, 7, dtype=np.float32)
    _close(F.max_pool3d(t(x), 2, 1, 1), TF.max_pool3d(torch.from_numpy(x), 2, 1, 1), np.float32)
    _close(F.avg_pool3d(t(x), 3, 2, 1, True, False), TF.avg_pool3d(torch.from_numpy(x), 3, 2, 1,
                                                                   True, False), np.float32)
    _close(cddp.max_pool3d(t(x), 2), torch.max_pool3d(torch.from_numpy(x), 2), np.float32)
    z = np.zeros((0, 2, 4, 4, 4), np.float32)
    assert tuple(F.max_pool3d(t(z), 2).shape) == tuple(TF.max_pool3d(torch.from_numpy(z), 2).shape)
    assert tuple(F.avg_pool3d(t(z), 2).shape) == (0, 2, 2, 2, 2)
    # float16: both passes in float32, rounded once
    xh = rnd(2, 2, 5, 6, 7).astype(np.float16)
    for fn, args in (("avg_pool3d", (3, 2, 1)), ("max_pool3d", (2,)),
                     ("adaptive_avg_pool3d", ((2, 3, 4),))):
        got = getattr(F, fn)(t(xh), *args)
        # torch's CPU kernels lack float16 here: its float32 result, rounded once
        want = getattr(TF, fn)(torch.from_numpy(xh).float(), *args).half()
        assert got.dtype == cddp.float16
        np.testing.assert_array_equal(n(got), want.numpy())


# ---- modules -----------------------------------------------------------------------------

def _load_from_torch(cm, tm):
    cm.load_state_dict({k: t(v.detach().numpy()) for k, v in tm.state_dict().items()})


CONV3D_MODULES = [
    ((4, 6, 3), {}),
    ((4, 6, (3, 2, 1)), dict(stride=(2, 1, 1), padding=(1, 1, 0), groups=2, bias=False)),
    ((2, 4, 2), dict(padding="same", dilation=(2, 1, 2))),
    ((2, 3, 3), dict(padding=(1, 2, 1), padding_mode="reflect")),
    ((2, 3, 3), dict(padding=1, padding_mode="replicate", stride=2)),
    ((2, 3, (2, 3, 3)), dict(padding="same", padding_mode="circular")),
]


@pytest.mark.parametrize("args,kw", CONV3D_MODULES)
def test_conv3d_module_vs_torch(torch, args, kw):
    tm = torch.nn.Conv3d(*args, **kw)
    cm = nn.Conv3d(*args, **kw)
    assert repr(cm) == repr(tm)
    assert list(cm.state_dict()) == list(tm.state_dict())
    for (cn, cp), (tn, tp) in zip(cm.named_parameters(), tm.named_parameters()):
        assert cn == tn and tuple(cp.shape) == tuple(tp.shape)
    _load_from_torch(cm, tm)
    x = rnd(2, args[0], 5, 6, 7, dtype=np.float32)
    xc, xt = _pair(torch, x)
    yc, yt = cm(xc), tm(xt)
    _close(yc, yt, np.float32)
    g = rnd(*yt.shape, dtype=np.float32)
    yc.backward(t(g))
    yt.backward(torch.from_numpy(g))
    _close(xc.grad, xt.grad, np.float32)
    _close(cm.weight.grad, tm.weight.grad, np.float32)
    # unbatched
    _close(cm(t(x[0])), tm(torch.from_numpy(x[0])), np.float32)


def test_conv3d_module_default_init():
    cddp.manual_seed(0)
    m = nn.Conv3d(4, 64, (3, 2, 3), groups=2)
    fan_in = 2 * 3 * 2 * 3
    bound = 1 / math.sqrt(fan_in)          # kaiming_uniform(a=sqrt(5)) and the bias rule agree
    w, b = n(m.weight), n(m.bias)
    assert w.shape == (64, 2, 3, 2, 3) and b.shape == (64,)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.8 * bound
    assert abs(w.mean()) < 0.1 * bound and abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv3d(3, 6, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' is not supported"):
        nn.Conv3d(3, 6, 3, stride=2, padding="same")


def test_pool3d_modules_vs_torch(torch):
    x = rnd(2, 3, 6, 7, 8, dtype=np.float32)
    pairs = [
        (nn.MaxPool3d(2), torch.nn.MaxPool3d(2)),
        (nn.MaxPool3d((2, 1, 2), stride=1, padding=(1, 0, 1), dilation=2, ceil_mode=True),
         torch.nn.MaxPool3d((2, 1, 2), stride=1, padding=(1, 0, 1), dilation=2,
                            ceil_mode=True)),
        (nn.AvgPool3d(3, 2, 1), torch.nn.AvgPool3d(3, 2, 1)),
        (nn.AvgPool3d((2, 1, 2), 1, (1, 0, 1), True, False, 3),
         torch.nn.AvgPool3d((2, 1, 2), 1, (1, 0, 1), True, False, 3)),
        (nn.AdaptiveAvgPool3d((2, None, 3)), torch.nn.AdaptiveAvgPool3d((2, None, 3))),
        (nn.AdaptiveMaxPool3d(2), torch.nn.AdaptiveMaxPool3d(2)),
    ]
    for cm, tm in pairs:
        assert repr(cm) == repr(tm)
        _close(cm(t(x)), tm(torch.from_numpy(x)), np.float32)
    yc, ic = nn.MaxPool3d(2, return_indices=True)(t(x))
    yt, it = torch.nn.MaxPool3d(2, return_indices=True)(torch.from_numpy(x))
    np.testing.assert_array_equal(n(ic), it.numpy())
    yc, ic = nn.AdaptiveMaxPool3d((3, 2, 4), return_indices=True)(t(x))
    yt, it = torch.nn.AdaptiveMaxPool3d((3, 2, 4), return_indices=True)(torch.from_numpy(x))
    np.testing.assert_array_equal(n(ic), it.numpy())


def test_small_3d_net_train_step_vs_torch(torch):
    """Conv3d -> BatchNorm3d -> ReLU -> MaxPool3d -> Conv3d -> AdaptiveAvgPool3d -> Linear:
    the loss and every parameter's gradient equal torch's with the same weights."""
    def build(m):
        return m.Sequential(m.Conv3d(2, 4, 3, padding=1), m.BatchNorm3d(4), m.ReLU(),
                            m.MaxPool3d(2), m.Conv3d(4, 6, (2, 3, 3), groups=2, padding="same"),
                            m.AvgPool3d(2, ceil_mode=True), m.AdaptiveAvgPool3d(1),
                            m.Flatten(), m.Linear(6, 3))
    tm, cm = build(torch.nn), build(nn)
    assert list(cm.state_dict()) == list(tm.state_dict())
    _load_from_torch(cm, tm)
    x = rnd(3, 2, 6, 7, 8)
    y = RNG.integers(0, 3, 3)
    tm.double()
    cm.double()
    lc = nn.functional.cross_entropy(cm(t(x)), t(y))
    lt = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
    lc.backward()
    lt.backward()
    np.testing.assert_allclose(n(lc), lt.item(), rtol=1e-10)
    for (name, cp), (_, tp) in zip(cm.named_parameters(), tm.named_parameters()):
        np.testing.assert_allclose(n(cp.grad), tp.grad.numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=name)


def test_existing_3d_modules_are_there():
    assert nn.BatchNorm3d and nn.Dropout3d and nn.InstanceNorm3d
    x = t(rnd(2, 3, 2, 2, 2, dtype=np.float32))
    assert tuple(nn.BatchNorm3d(3)(x).shape) == (2, 3, 2, 2, 2)


# ---- errors ------------------------------------------------------------------------------

def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None, None


def _same_error(torch, cfn, tfn, exact=True):
    ct, cm = _err(cfn)
    tt, tmsg = _err(tfn)
    assert tt is not None, "torch did not raise"
    assert ct is tt, (ct, cm, tt, tmsg)
    if exact:
        assert cm == tmsg, (cm, tmsg)


X = rnd(2, 4, 5, 5, 5, dtype=np.float32)


@pytest.mark.parametrize("xs,ws,kw,exact", [
    ((4, 5, 5, 5, 5, 5), (6, 4, 3, 3, 3), {}, True),        # 6-D input
    ((4, 5, 5), (6, 4, 3, 3, 3), {}, True),                 # 3-D input
    ((2, 4, 5, 5, 5), (6, 2, 3, 3, 3), dict(groups=3), True),  # groups do not divide
    ((2, 4, 5, 5, 5), (5, 2, 3, 3, 3), dict(groups=2), True),  # out channels vs groups
    ((2, 4, 5, 5, 5), (6, 3, 3, 3, 3), {}, True),           # channel mismatch
    ((2, 4, 5, 5, 5), (6, 4, 7, 3, 3), {}, True),           # kernel larger than input
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(stride=0), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(padding=-1), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(dilation=0), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(groups=0), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(stride=(1, 2)), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(padding="same", stride=2), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), dict(padding="foo"), True),
    ((2, 4, 5, 5, 5), (6, 4, 3, 3), {}, False),             # 4-D weight
])
def test_conv3d_errors_like_torch(torch, xs, ws, kw, exact):
    x, w = rnd(*xs, dtype=np.float32), rnd(*ws, dtype=np.float32)
    _same_error(torch, lambda: F.conv3d(t(x), t(w), **kw),
                lambda: torch.nn.functional.conv3d(torch.from_numpy(x), torch.from_numpy(w),
                                                   **kw), exact)


def test_conv3d_bias_error_like_torch(torch):
    w, b = rnd(6, 4, 3, 3, 3, dtype=np.float32), rnd(5, dtype=np.float32)
    _same_error(torch, lambda: F.conv3d(t(X), t(w), t(b)),
                lambda: torch.nn.functional.conv3d(torch.from_numpy(X), torch.from_numpy(w),
                                                   torch.from_numpy(b)))


@pytest.mark.parametrize("fn,x,args,kw", [
    ("max_pool3d", (5, 5, 5), (2,), {}),
    ("max_pool3d", X.shape, (2,), dict(padding=2)),
    ("max_pool3d", X.shape, ((2, 2),), {}),
    ("max_pool3d", X.shape, ((2, 1, 2),), dict(padding=1, dilation=2)),
    ("max_pool3d", X.shape, (2,), dict(stride=0)),
    ("max_pool3d", X.shape, (2,), dict(dilation=0)),
    ("max_pool3d", X.shape, (7,), {}),
    ("avg_pool3d", (5, 5, 5), (2,), {}),
    ("avg_pool3d", X.shape, (2,), dict(padding=2)),
    ("avg_pool3d", X.shape, ((2, 2),), {}),
    ("avg_pool3d", X.shape, (2,), dict(divisor_override=0)),
    ("adaptive_avg_pool3d", (5, 5, 5), (2,), {}),
    ("adaptive_avg_pool3d", X.shape, ((2, 2),), {}),
    ("adaptive_max_pool3d", (5, 5, 5), (2,), {}),
    ("adaptive_max_pool3d", X.shape, ((2, 2),), {}),
])
def test_pool3d_errors_like_torch(torch, fn, x, args, kw):
    a = rnd(*x, dtype=np.float32)
    _same_error(torch, lambda: getattr(F, fn)(t(a), *args, **kw),
                lambda: getattr(torch.nn.functional, fn)(torch.from_numpy(a), *args, **kw))


def test_avg_pool3d_kernel_larger_than_input_raises():
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool3d(t(X), 7)
