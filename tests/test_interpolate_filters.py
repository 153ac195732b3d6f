"""interpolate's separable filters (cddp/nn/_functional_resample.py): mode="bicubic", and
antialias=True for bilinear / bicubic / lanczos; and mode="area".

Oracles: NumPy references written from the definitions here (a 16-tap bicubic loop over
output pixels with clamped taps and Keys' A = -0.75; antialiased weights from PIL's filter
definitions, applied as the full 2-D sum), central finite differences in float64 for the
gradients, and torch (importorskip) over a grid of sizes, scale factors, align_corners and
modes, values and gradients at float32 tolerance. One torch case is excluded: an antialiased
resize to a width of 1 and a height above 1 — torch 2.13's forward then repeats its first
output row (its own backward agrees with cddp's gradient: a torch bug).
"""
import itertools
import math

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
from cddp.nn import _functional_resample as R
from conftest import gradcheck, n, t


def _keys(x, a):
    x = abs(x)
    if x < 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _bicubic_ref(x, oh, ow, align_corners):
    """torch's upsample_bicubic2d from its definition, float64, pixel by pixel."""
    N, C, H, W = x.shape
    y = np.zeros((N, C, oh, ow))

    def src(o, n_in, n_out):
        if align_corners:
            return (n_in - 1) / (n_out - 1) * o if n_out > 1 else 0.0
        return n_in / n_out * (o + 0.5) - 0.5

    for i in range(oh):
        sy = src(i, H, oh)
        y0 = math.floor(sy)
        for j in range(ow):
            sx = src(j, W, ow)
            x0 = math.floor(sx)
            acc = 0.0
            for a in range(-1, 3):
                for b in range(-1, 3):
                    wy = _keys(sy - (y0 + a), -0.75)
                    wx = _keys(sx - (x0 + b), -0.75)
                    acc = acc + wy * wx * x[:, :, min(max(y0 + a, 0), H - 1),
                                            min(max(x0 + b, 0), W - 1)]
            y[:, :, i, j] = acc
    return y


def _filters():
    def sinc(v):
        return 1.0 if v == 0 else math.sin(math.pi * v) / (math.pi * v)
    return {"bilinear": (lambda v: max(0.0, 1 - abs(v)), 1.0),
            "bicubic": (lambda v: _keys(v, -0.5), 2.0),
            "lanczos": (lambda v: sinc(v) * sinc(v / 3) if abs(v) < 3 else 0.0, 3.0)}


def _aa_weights(n_in, n_out, mode):
    """PIL's resampling weights (n_out, n_in) for one axis: the filter stretched by the scale
    when shrinking, its taps normalised to sum 1."""
    f, radius = _filters()[mode]
    s = n_in / n_out
    stretch = max(s, 1.0)
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        centre = s * (o + 0.5)
        lo = max(int(centre - radius * stretch + 0.5), 0)
        hi = min(int(centre + radius * stretch + 0.5), n_in)
        for i in range(lo, hi):
            m[o, i] = f((i - centre + 0.5) / stretch)
        m[o] /= m[o].sum()
    return m


def _aa_ref(x, oh, ow, mode):
    """The full 2-D sum y[o, p] = sum_ij Wy[o, i] Wx[p, j] x[i, j]."""
    wy, wx = _aa_weights(x.shape[2], oh, mode), _aa_weights(x.shape[3], ow, mode)
    return np.einsum("oi,pj,ncij->ncop", wy, wx, x)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape,out", [((5, 7), (9, 4)), ((4, 4), (8, 8)), ((6, 3), (1, 5)),
                                       ((1, 4), (3, 2))])
def test_bicubic_matches_numpy_definition(shape, out, align_corners):
    x = np.random.default_rng(0).standard_normal((2, 3) + shape)
    got = F.interpolate(t(x), size=out, mode="bicubic", align_corners=align_corners)
    np.testing.assert_allclose(n(got), _bicubic_ref(x, *out, align_corners), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "lanczos"])
@pytest.mark.parametrize("shape,out", [((16, 12), (5, 7)), ((9, 10), (9, 3)), ((4, 5), (9, 11)),
                                       ((7, 7), (1, 2))])
def test_antialias_matches_numpy_definition(mode, shape, out):
    x = np.random.default_rng(1).standard_normal((1, 2) + shape)
    got = F.interpolate(t(x), size=out, mode=mode, antialias=True)
    np.testing.assert_allclose(n(got), _aa_ref(x, *out, mode), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(mode="bicubic", size=(7, 3)),
                                dict(mode="bicubic", scale_factor=2, align_corners=True),
                                dict(mode="bilinear", size=(3, 4), antialias=True),
                                dict(mode="bicubic", size=(2, 7), antialias=True),
                                dict(mode="lanczos", size=(3, 3), antialias=True),
                                dict(mode="area", size=(3, 2))])
def test_gradients_match_finite_differences(kw):
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 6))
    gradcheck(lambda v: F.interpolate(v, **kw), x)


def test_gather_path_equals_dense_path(monkeypatch):
    """Above _DENSE_MAX table entries an axis is resampled by gathers: same values and
    gradients as the dense GEMM path (summation order aside)."""
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 11))
    runs = []
    for dense_max in (R._DENSE_MAX, 0):
        monkeypatch.setattr(R, "_DENSE_MAX", dense_max)
        for kw in (dict(mode="bicubic", size=(13, 6)),
                   dict(mode="bicubic", size=(4, 20), antialias=True)):
            v = t(x, requires_grad=True)
            y = F.interpolate(v, **kw)
            (y * y).sum().backward()
            runs.append((n(y), n(v.grad)))
    for (a, ga), (b, gb) in zip(runs[:2], runs[2:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ga, gb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_dtypes_are_float32_rounded_once(dtype):
    dt = getattr(cddp, dtype)
    x = t(np.random.default_rng(4).standard_normal((1, 2, 8, 8)).astype(np.float32)).to(dt)
    for kw in (dict(mode="bicubic", scale_factor=2), dict(mode="lanczos", size=(3, 5),
                                                         antialias=True)):
        got = F.interpolate(x, **kw)
        assert got.dtype == dt
        want = F.interpolate(x.float(), **kw).to(dt)
        assert np.array_equal(n(got.float()), n(want.float()))


def test_area_is_adaptive_average_pooling():
    rng = np.random.default_rng(5)
    for shape, out, pool in (((2, 3, 10), (4,), F.adaptive_avg_pool1d),
                             ((2, 3, 10, 7), (4, 3), F.adaptive_avg_pool2d),
                             ((1, 2, 5, 6, 7), (2, 3, 4), F.adaptive_avg_pool3d)):
        x = t(rng.standard_normal(shape))
        np.testing.assert_array_equal(n(F.interpolate(x, size=out, mode="area")), n(pool(x, out)))


def _torch_cases():
    sizes = [(8, 8), (7, 10), (16, 5), (1, 6)]
    specs = [dict(size=(5, 6)), dict(size=(16, 20)), dict(size=(1, 1)), dict(size=(3, 17)),
             dict(scale_factor=2.0), dict(scale_factor=0.5), dict(scale_factor=(1.7, 0.3)),
             dict(scale_factor=0.37, recompute_scale_factor=True), dict(scale_factor=3)]
    modes = [("bicubic", False), ("bicubic", True), ("bilinear", True), ("lanczos", True)]
    for (H, W), spec, (mode, aa), ac in itertools.product(sizes, specs, modes, [False, True]):
        yield (H, W), dict(mode=mode, antialias=aa, align_corners=ac, **spec)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_match_torch(torch, dtype):
    rng = np.random.default_rng(6)
    checked = 0
    for (H, W), kw in _torch_cases():
        x = rng.standard_normal((2, 3, H, W)).astype(dtype)
        tx = torch.tensor(x, requires_grad=True)
        try:
            ty = torch.nn.functional.interpolate(tx, **kw)
        except (RuntimeError, ValueError):
            continue                               # torch refuses (e.g. an empty output)
        if kw["antialias"] and ty.shape[3] == 1 and ty.shape[2] > 1:
            continue                               # the torch bug of the module docstring
        gy = rng.standard_normal(tuple(ty.shape)).astype(dtype)
        ty.backward(torch.tensor(gy))
        cx = t(x, requires_grad=True)
        cy = F.interpolate(cx, **kw)
        cy.backward(t(gy))
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(n(cy), ty.detach().numpy(), **tol, err_msg=str((H, W, kw)))
        np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), **tol, err_msg=str((H, W, kw)))
        checked += 1
    assert checked > 200


def test_area_and_errors_match_torch(torch):
    x = np.random.default_rng(7).standard_normal((2, 3, 9, 7)).astype(np.float32)
    np.testing.assert_allclose(
        n(F.interpolate(t(x), size=(4, 5), mode="area")),
        torch.nn.functional.interpolate(torch.tensor(x), size=(4, 5), mode="area").numpy(),
        rtol=1e-6, atol=1e-6)
    for kw in (dict(size=2, antialias=True), dict(size=2, mode="lanczos"),
               dict(size=2, mode="bicubic", antialias=True, align_corners=None)):
        msgs = []
        for lib, conv in ((torch, torch.tensor), (cddp, t)):
            try:
                lib.nn.functional.interpolate(conv(x), **kw)
                msgs.append(None)
            except Exception as e:                 # noqa: BLE001 - compared below
                msgs.append((type(e).__name__, str(e)))
        assert msgs[0] == msgs[1], kw
