"""Convolutions (csrc/nn/conv.c, conv_engine.c, im2col.c): conv1d/conv2d/conv_transpose1d/2d
and their modules.

Oracles: a NumPy reference (tap-by-tap einsum over a zero-padded input) for values, central
finite differences in float64 for gradients (no torch needed), and torch for values and
gradients over strides, paddings ('same'/'valid' too), dilations, groups (depthwise), biases,
non-contiguous inputs, batch 1, odd sizes, float32 and float64. The engine's internal paths
(gather vs im2col spans, pointwise convs with and without im2col, several chunks per batch,
dead-tap trimming on 1x1 planes) each get a case that runs through them.
"""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(1234)


def rnd(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ---- NumPy references ------------------------------------------------------------------

def np_conv2d(x, w, b=None, stride=(1, 1), pad=((0, 0), (0, 0)), dil=(1, 1), groups=1):
    """y[n, o, oh, ow] = sum_{c,i,j} x_pad[n, g*Cg + c, oh*sh + i*dh, ow*sw + j*dw] w[o, c, i, j]"""
    N, C, H, W = x.shape
    OC, Cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), pad[0], pad[1]))
    OH = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    OW = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    OCg = OC // groups
    y = np.zeros((N, OC, OH, OW), dtype=np.float64)
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                h0, w0 = i * dil[0], j * dil[1]
                patch = xp[:, g * Cg:(g + 1) * Cg, h0:h0 + stride[0] * (OH - 1) + 1:stride[0],
                           w0:w0 + stride[1] * (OW - 1) + 1:stride[1]]
                y[:, g * OCg:(g + 1) * OCg] += np.einsum("nchw,oc->nohw", patch,
                                                         w[g * OCg:(g + 1) * OCg, :, i, j])
    if b is not None:
        y += b[None, :, None, None]
    return y


def np_conv_transpose2d(x, w, b=None, stride=(1, 1), pad=(0, 0), outpad=(0, 0), dil=(1, 1),
                        groups=1):
    """Scatter form: every x[n, c, h, w] adds x * w[c, o] at (h*s - p + i*d, w*s - p + j*d)."""
    N, C, H, W = x.shape
    _, OCg, kh, kw = w.shape
    Cg = C // groups
    FH = (H - 1) * stride[0] + dil[0] * (kh - 1) + 1 + outpad[0]
    FW = (W - 1) * stride[1] + dil[1] * (kw - 1) + 1 + outpad[1]
    full = np.zeros((N, OCg * groups, FH, FW))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                h0, w0 = i * dil[0], j * dil[1]
                full[:, g * OCg:(g + 1) * OCg, h0:h0 + stride[0] * (H - 1) + 1:stride[0],
                     w0:w0 + stride[1] * (W - 1) + 1:stride[1]] += np.einsum(
                    "nchw,co->nohw", x[:, g * Cg:(g + 1) * Cg], w[g * Cg:(g + 1) * Cg, :, i, j])
    OH = FH - 2 * pad[0]
    OW = FW - 2 * pad[1]
    y = full[:, :, pad[0]:pad[0] + OH, pad[1]:pad[1] + OW]
    if b is not None:
        y = y + b[None, :, None, None]
    return y


CONV2D = [  # x shape, w shape, keywords
    ((2, 3, 7, 7), (4, 3, 3, 3), {}),
    ((2, 3, 7, 8), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
    ((1, 4, 9, 8), (6, 2, 3, 2), {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1),
                                  "groups": 2}),
    ((3, 4, 6, 5), (4, 1, 3, 3), {"padding": 1, "groups": 4}),              # depthwise
    ((3, 4, 6, 5), (8, 1, 3, 3), {"padding": 1, "groups": 4}),              # depthwise x2
    ((2, 4, 5, 5), (5, 4, 1, 1), {}),                                        # pointwise
    ((2, 3, 5, 4), (2, 3, 5, 4), {}),                                        # 1x1 output
    ((2, 3, 1, 1), (4, 3, 3, 3), {"padding": 1}),                            # dead taps
    ((2, 3, 2, 2), (4, 3, 3, 3), {"padding": 1, "stride": 2}),              # dead taps, s2
    ((2, 2, 5, 6), (3, 2, 2, 3), {"padding": "same", "dilation": (2, 1)}),  # even kernel
    ((2, 2, 5, 6), (3, 2, 3, 3), {"padding": "valid"}),
    ((1, 3, 4, 40), (2, 3, 3, 3), {"padding": 1}),                           # im2col spans
    ((2, 3, 4, 40), (2, 3, 3, 3), {"stride": (1, 3), "padding": 2, "dilation": 2}),
]


@pytest.mark.parametrize("xs,ws,kw", CONV2D)
def test_conv2d_matches_numpy(xs, ws, kw):
    x, w = rnd(*xs), rnd(*ws)
    b = rnd(ws[0])
    st = kw.get("stride", 1)
    st = (st, st) if isinstance(st, int) else st
    dl = kw.get("dilation", 1)
    dl = (dl, dl) if isinstance(dl, int) else dl
    p = kw.get("padding", 0)
    if p == "same":
        tot = [dl[d] * (ws[2 + d] - 1) for d in range(2)]
        pads = tuple((q // 2, q - q // 2) for q in tot)
    elif p == "valid":
        pads = ((0, 0), (0, 0))
    else:
        p = (p, p) if isinstance(p, int) else p
        pads = tuple((q, q) for q in p)
    ref = np_conv2d(x, w, b, st, pads, dl, kw.get("groups", 1))
    got = n(F.conv2d(t(x), t(w), t(b), **kw))
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("xs,ws,kw", CONV2D[:10])
def test_conv2d_gradcheck(xs, ws, kw):
    """Finite differences in float64 (no torch): input, weight and bias gradients."""
    xs = (1,) + xs[1:] if xs[0] > 1 and xs[2] * xs[3] > 40 else xs
    gradcheck(lambda x, w, b: F.conv2d(x, w, b, **kw), rnd(*xs), rnd(*ws), rnd(ws[0]))


def test_conv1d_and_transposed_gradcheck():
    gradcheck(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
              rnd(2, 3, 9), rnd(4, 3, 3), rnd(4))
    gradcheck(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                                 groups=2),
              rnd(1, 4, 3, 3), rnd(4, 2, 3, 2), rnd(4))
    gradcheck(lambda x, w: F.conv_transpose1d(x, w, stride=3, dilation=2), rnd(2, 2, 4),
              rnd(2, 3, 2))


@pytest.mark.parametrize("kw", [
    {}, {"stride": 2, "padding": 1, "output_padding": 1},
    {"stride": (2, 3), "padding": (0, 1), "output_padding": (1, 0), "dilation": (1, 2)},
    {"groups": 2, "stride": 2}, {"dilation": 3, "output_padding": 2}])
def test_conv_transpose2d_matches_numpy(kw):
    x, w, b = rnd(2, 4, 4, 5), rnd(4, 3, 3, 2), rnd(3 * kw.get("groups", 1))
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    ref = np_conv_transpose2d(x, w, b, pair(kw.get("stride", 1)), pair(kw.get("padding", 0)),
                              pair(kw.get("output_padding", 0)), pair(kw.get("dilation", 1)),
                              kw.get("groups", 1))
    np.testing.assert_allclose(n(F.conv_transpose2d(t(x), t(w), t(b), **kw)), ref, rtol=1e-10,
                               atol=1e-10)


def test_conv1d_is_conv2d_with_height_one():
    x, w, b = rnd(2, 3, 11), rnd(5, 3, 4), rnd(5)
    ref = np_conv2d(x[:, :, None], w[:, :, None], b, (1, 2), ((0, 0), (1, 1)), (1, 2))[:, :, 0]
    np.testing.assert_allclose(n(F.conv1d(t(x), t(w), t(b), stride=2, padding=1, dilation=2)),
                               ref, rtol=1e-10, atol=1e-10)


def test_conv_unbatched_inputs():
    x, w = rnd(3, 6, 6), rnd(4, 3, 3, 3)
    np.testing.assert_allclose(n(F.conv2d(t(x), t(w))), np_conv2d(x[None], w)[0], rtol=1e-10)
    assert F.conv1d(t(rnd(3, 7)), t(rnd(2, 3, 3))).shape == (2, 5)
    assert F.conv_transpose2d(t(rnd(3, 4, 4)), t(rnd(3, 2, 3, 3)), stride=2).shape == (2, 9, 9)


@pytest.mark.parametrize("budget", [0, 4000])
def test_engine_chunks_and_paths(budget):
    """A tiny column budget runs these in several chunks of samples (and the last chunk
    smaller); results equal the NumPy reference either way, gradients equal finite sums."""
    old = cddp._C._conv_cols_budget(budget) if budget else None
    try:
        for xs, ws, kw, pads in [
                ((7, 3, 6, 6), (4, 3, 3, 3), {"padding": 1}, ((1, 1), (1, 1))),      # gather
                ((5, 2, 3, 34), (3, 2, 3, 3), {"padding": 1}, ((1, 1), (1, 1))),     # spans
                ((5, 4, 17, 17), (3, 4, 1, 1), {}, ((0, 0), (0, 0))),                 # pointwise
                ((9, 4, 3, 3), (3, 4, 1, 1), {}, ((0, 0), (0, 0))),                   # packed 1x1
                ((6, 8, 1, 1), (5, 8, 3, 3), {"padding": 1}, ((1, 1), (1, 1)))]:      # dead taps
            x, w = rnd(*xs), rnd(*ws)
            xt, wt = t(x, True), t(w, True)
            y = F.conv2d(xt, wt, **kw)
            np.testing.assert_allclose(n(y), np_conv2d(x, w, None, (1, 1), pads), rtol=1e-10,
                                       atol=1e-10)
            g = rnd(*y.shape)
            y.backward(t(g))
            # adjoint identities: <conv(x), g> = <x, dx>; dW[o,c,i,j] = <g[:, o], patch(c,i,j)>
            np.testing.assert_allclose(np.sum(np_conv2d(x, w, None, (1, 1), pads) * g),
                                       np.sum(x * n(xt.grad)), rtol=1e-9)
            eps = np.zeros_like(w)
            eps.flat[0] = 1.0
            np.testing.assert_allclose(n(wt.grad).flat[0],
                                       np.sum(np_conv2d(x, eps, None, (1, 1), pads) * g),
                                       rtol=1e-9)
    finally:
        if old:
            cddp._C._conv_cols_budget(old)


# ---- torch: values and gradients ---------------------------------------------------------

TORCH_CASES = [
    (2, (2, 3, 7, 7), (4, 3, 3, 3), {"stride": 2, "padding": 1}, False),
    (2, (1, 4, 9, 8), (6, 2, 3, 2), {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1),
                                     "groups": 2}, False),
    (2, (3, 6, 5, 7), (6, 1, 3, 3), {"padding": 1, "groups": 6}, True),      # depthwise
    (2, (2, 3, 8, 8), (4, 3, 4, 4), {"padding": "same"}, False),
    (2, (2, 3, 6, 9), (4, 3, 2, 3), {"padding": "same", "dilation": 2}, True),
    (2, (2, 5, 33, 3), (4, 5, 1, 1), {}, True),
    (2, (16, 64, 8, 8), (64, 64, 3, 3), {"padding": 1}, False),               # ResNet layer1
    (2, (16, 256, 2, 2), (512, 256, 3, 3), {"padding": 1, "stride": 2}, False),  # layer4
    (2, (16, 512, 1, 1), (512, 512, 3, 3), {"padding": 1}, False),
    (1, (2, 3, 17), (4, 3, 5), {"stride": 3, "padding": 2}, True),
    (1, (1, 4, 16), (4, 2, 4), {"padding": "same", "groups": 2}, False),
]


def test_conv_float32_through_the_own_avx512_gemm():
    """One GEMM thread (a DDP rank's setting): on AVX-512 CPUs the float32 im2col GEMMs of the
    forward and both backward products run ops/linalg/sgemm_avx512.c. Values and gradients
    against the float64 convolution of the same numbers."""
    if not cddp._C._blas_info()["sgemm_kernel"].startswith("cddp avx512"):
        pytest.skip("CPU without AVX-512 (or CDDP_GEMM=blas)")
    old = cddp.get_num_threads()
    cddp.set_num_threads(1)
    try:
        x, w, b = rnd(4, 64, 8, 8), rnd(64, 64, 3, 3) * 0.05, rnd(64)
        g = rnd(4, 64, 8, 8)
        outs = {}
        calls = cddp._C._blas_info()["own_sgemm_calls"]
        for dt in (np.float32, np.float64):
            cx, cw, cb = (t(a.astype(dt)).requires_grad_(True) for a in (x, w, b))
            y = F.conv2d(cx, cw, cb, padding=1)
            y.backward(t(g.astype(dt)))
            outs[dt] = [n(v).astype(np.float64) for v in (y, cx.grad, cw.grad, cb.grad)]
        assert cddp._C._blas_info()["own_sgemm_calls"] >= calls + 3   # y, dx, dw
        for got, ref in zip(outs[np.float32], outs[np.float64]):
            assert np.abs(got - ref).max() <= 2e-5 * np.abs(ref).max()
    finally:
        cddp.set_num_threads(old)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("nd,xs,ws,kw,permuted", TORCH_CASES)
def test_conv_vs_torch(torch, dtype, nd, xs, ws, kw, permuted):
    x, w, b = rnd(*xs), rnd(*ws), rnd(ws[0])
    if permuted:            # a non-contiguous input: the last two dims swapped in memory
        x = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    cx, cw, cb = (t(a.astype(dtype), True) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a.astype(dtype), requires_grad=True) for a in (x, w, b))
    cin, tin = (cx.transpose(-1, -2), tx.transpose(-1, -2)) if permuted else (cx, tx)
    cf, tf = (F.conv2d, torch.nn.functional.conv2d) if nd == 2 else \
        (F.conv1d, torch.nn.functional.conv1d)
    y, ty = cf(cin, cw, cb, **kw), tf(tin, tw, tb, **kw)
    g = rnd(*ty.shape).astype(dtype)
    y.backward(t(g))
    ty.backward(torch.tensor(g))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(n(y), ty.detach().numpy(), **tol)
    for c, tt in ((cx, tx), (cw, tw), (cb, tb)):
        np.testing.assert_allclose(n(c.grad), tt.grad.numpy(), **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("nd,xs,ws,kw", [
    (2, (2, 3, 5, 5), (3, 2, 3, 3), {}),
    (2, (1, 4, 5, 6), (4, 3, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1,
                                     "groups": 2}),
    (2, (2, 4, 5, 6), (4, 3, 3, 2), {"stride": (2, 3), "padding": (0, 1),
                                     "output_padding": (1, 0), "dilation": (1, 2)}),
    (2, (2, 4, 5, 6), (4, 3, 3, 2), {"dilation": 3, "output_padding": 2}),
    (1, (2, 4, 7), (4, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
])
def test_conv_transpose_vs_torch(torch, dtype, nd, xs, ws, kw):
    x, w = rnd(*xs).astype(dtype), rnd(*ws).astype(dtype)
    b = rnd(ws[1] * kw.get("groups", 1)).astype(dtype)
    cx, cw, cb = (t(a, True) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    cf = F.conv_transpose2d if nd == 2 else F.conv_transpose1d
    tf = torch.nn.functional.conv_transpose2d if nd == 2 else torch.nn.functional.conv_transpose1d
    y, ty = cf(cx, cw, cb, **kw), tf(tx, tw, tb, **kw)
    g = rnd(*ty.shape).astype(dtype)
    y.backward(t(g))
    ty.backward(torch.tensor(g))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(n(y), ty.detach().numpy(), **tol)
    for c, tt in ((cx, tx), (cw, tw), (cb, tb)):
        np.testing.assert_allclose(n(c.grad), tt.grad.numpy(), **tol)


# ---- modules -----------------------------------------------------------------------------

def test_conv_modules_match_torch(torch):
    mods = [
        (lambda m: m.Conv2d(3, 8, 3, 2, 1, bias=False), (2, 3, 9, 9)),
        (lambda m: m.Conv2d(4, 6, (3, 2), padding="same", dilation=2, groups=2), (2, 4, 7, 6)),
        (lambda m: m.Conv2d(3, 4, 3, padding=2, padding_mode="reflect"), (2, 3, 6, 6)),
        (lambda m: m.Conv2d(3, 4, 3, padding=(1, 2), padding_mode="replicate"), (2, 3, 6, 6)),
        (lambda m: m.Conv2d(3, 4, 3, padding=1, padding_mode="circular"), (2, 3, 6, 6)),
        (lambda m: m.Conv1d(3, 6, 5, stride=2, groups=3), (2, 3, 11)),
        (lambda m: m.ConvTranspose2d(4, 2, 3, 2, 1, 1), (2, 4, 5, 5)),
        (lambda m: m.ConvTranspose1d(4, 6, 3, 2, groups=2), (2, 4, 5)),
    ]
    for make, xs in mods:
        cm, tm = make(nn), make(torch.nn)
        assert repr(cm) == repr(tm)
        assert {k: tuple(v.shape) for k, v in cm.state_dict().items()} == \
               {k: tuple(v.shape) for k, v in tm.state_dict().items()}
        cm.load_state_dict({k: t(v.detach().numpy()) for k, v in tm.state_dict().items()})
        x = rnd(*xs).astype(np.float32)
        np.testing.assert_allclose(n(cm(t(x))), tm(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_conv_module_defaults_and_init():
    cddp.manual_seed(0)
    m = nn.Conv2d(4, 8, 3)
    assert m.weight.shape == (8, 4, 3, 3) and m.bias.shape == (8,)
    assert m.stride == (1, 1) and m.padding == (0, 0) and m.dilation == (1, 1)
    bound = 1 / np.sqrt(4 * 9)     # kaiming_uniform(a=sqrt(5)) and the bias rule: 1/sqrt(fan_in)
    assert np.abs(n(m.weight)).max() <= bound + 1e-7 and np.abs(n(m.bias)).max() <= bound
    mt = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert mt.weight.shape == (4, 3, 3, 3)
    x = t(rnd(1, 2, 4, 4).astype(np.float32))
    assert nn.ConvTranspose2d(2, 3, 3, stride=2)(x, output_size=(10, 10)).shape \
        == (1, 3, 10, 10)


def test_conv_trains_a_small_model():
    """A conv net fits a fixed batch: the loss falls (forward, backward and SGD wired up)."""
    cddp.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = t(rnd(16, 1, 8, 8).astype(np.float32))
    y = t(RNG.integers(0, 3, 16))
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


# ---- errors ------------------------------------------------------------------------------

ERRORS = [
    (lambda: F.conv2d(t(rnd(1, 4, 5, 5)), t(rnd(6, 3, 3, 3))), RuntimeError,
     "Given groups=1, weight of size [6, 3, 3, 3], expected input[1, 4, 5, 5] to have 3 "
     "channels, but got 4 channels instead"),
    (lambda: F.conv2d(t(rnd(1, 3, 2, 2)), t(rnd(6, 3, 3, 3))), RuntimeError,
     "Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size "
     "can't be greater than actual input size"),
    (lambda: F.conv1d(t(rnd(1, 3, 5)), t(rnd(6, 3, 7))), RuntimeError,
     "Calculated padded input size per channel: (5). Kernel size: (7)."),
    (lambda: F.conv2d(t(rnd(1, 4, 5, 5)), t(rnd(3, 2, 3, 3)), groups=2), RuntimeError,
     "Given groups=2, expected weight to be divisible by 2 at dimension 0"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 1, 3, 3)), groups=2), RuntimeError,
     "expected input[1, 3, 5, 5] to have 2 channels, but got 3 channels instead"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), stride=2, padding="same"),
     RuntimeError, "padding='same' is not supported for strided convolutions"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), padding="foo"), RuntimeError,
     "Invalid padding string: 'foo'"),
    (lambda: F.conv2d(t(rnd(3, 5)), t(rnd(4, 3, 3, 3))), RuntimeError,
     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [3, 5]"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), stride=0), RuntimeError,
     "non-positive stride is not supported"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), padding=-1), RuntimeError,
     "negative padding is not supported"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), dilation=0), RuntimeError,
     "dilation should be greater than zero"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), groups=0), RuntimeError,
     "non-positive groups is not supported"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), t(rnd(5))), RuntimeError,
     "expected bias to be 1-dimensional with 4 elements, but got bias of size [5] instead"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3).astype(np.float32))),
     RuntimeError, "expected input, weight and bias of one floating dtype"),
    (lambda: F.conv2d(t(rnd(1, 3, 5, 5)), t(rnd(4, 3, 3, 3)), stride=(1, 2, 3)), RuntimeError,
     "expected stride to be a single integer value or a list of 2 values"),
    (lambda: F.conv_transpose2d(t(rnd(1, 4, 5, 5)), t(rnd(3, 2, 3, 3))), RuntimeError,
     "Given transposed=1, weight of size [3, 2, 3, 3], expected input[1, 4, 5, 5] to have 3 "
     "channels, but got 4 channels instead"),
    (lambda: F.conv_transpose2d(t(rnd(1, 3, 5, 5)), t(rnd(3, 2, 3, 3)), stride=2,
                                output_padding=2), RuntimeError,
     "output padding must be smaller than either stride or dilation"),
    (lambda: F.conv_transpose2d(t(rnd(1, 3, 5, 5)), t(rnd(3, 2, 3, 3)), padding="same"),
     TypeError, "argument 'padding' must be tuple of ints, not str"),
    (lambda: F.conv2d(rnd(1, 3, 5, 5), t(rnd(4, 3, 3, 3))), TypeError, "must be a cddp Tensor"),
    (lambda: nn.Conv2d(3, 6, 3, padding="same", stride=2), ValueError,
     "padding='same' is not supported for strided convolutions"),
    (lambda: nn.Conv2d(3, 6, 3, groups=2), ValueError, "in_channels must be divisible by groups"),
    (lambda: nn.Conv2d(4, 6, 3, groups=4), ValueError, "out_channels must be divisible by groups"),
    (lambda: nn.Conv2d(4, 6, 3, padding_mode="foo"), ValueError, "padding_mode must be one of"),
    (lambda: nn.Conv2d(4, 6, 3, padding="foo"), ValueError, "Invalid padding string 'foo'"),
    (lambda: nn.Conv2d(4, 6, 3)(t(rnd(1, 3, 5, 5))), RuntimeError,
     "expected input[1, 3, 5, 5] to have 4 channels, but got 3 channels instead"),
    (lambda: nn.ConvTranspose2d(2, 3, 3, stride=2)(t(rnd(1, 2, 4, 4).astype(np.float32)),
                                                   output_size=(12, 12)),
     ValueError, "requested an output size of [12, 12], but valid sizes range from [9, 9] to "
     "[10, 10]"),
]


@pytest.mark.parametrize("call,exc,msg", ERRORS)
def test_conv_errors(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert msg in str(info.value)


def test_conv_integer_input_is_refused():
    with pytest.raises(RuntimeError, match="floating dtype"):
        F.conv2d(cddp.zeros((1, 1, 3, 3), dtype=cddp.int64),
                 cddp.zeros((1, 1, 2, 2), dtype=cddp.int64))


def test_conv_error_types_match_torch(torch):
    """The same bad calls raise the same exception types in torch (messages checked above)."""
    tf = torch.nn.functional
    cases = [
        (lambda m, f: f.conv2d(m.zeros(1, 4, 5, 5), m.zeros(6, 3, 3, 3))),
        (lambda m, f: f.conv2d(m.zeros(1, 3, 2, 2), m.zeros(6, 3, 3, 3))),
        (lambda m, f: f.conv2d(m.zeros(1, 3, 5, 5), m.zeros(4, 3, 3, 3), stride=2,
                               padding="same")),
        (lambda m, f: f.conv2d(m.zeros(3, 5), m.zeros(4, 3, 3, 3))),
        (lambda m, f: m.nn.Conv2d(3, 6, 3, groups=2)),
        (lambda m, f: f.conv_transpose2d(m.zeros(1, 3, 5, 5), m.zeros(3, 2, 3, 3), stride=2,
                                         output_padding=2)),
    ]
    for case in cases:
        with pytest.raises(Exception) as ours:
            case(cddp, F)
        with pytest.raises(Exception) as theirs:
            case(torch, tf)
        assert type(ours.value) is type(theirs.value), (ours.value, theirs.value)
