"""F.grid_sample and F.affine_grid (the spatial transformer's pieces): an identity affine grid
reproduces the image, nearest reads exact pixels, zeros padding reads 0 outside; gradients
for the input and the grid against float64 central differences; every mode x padding x
align_corners x dtype against torch (values and both gradients) when importable; errors."""
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
from conftest import n, t

RNG = np.random.default_rng(11)
X = RNG.standard_normal((2, 3, 5, 6))
G = RNG.uniform(-1.3, 1.3, (2, 4, 7, 2))
MODES = ["bilinear", "nearest"]
PADS = ["zeros", "border", "reflection"]


def test_identity_affine_grid_reproduces_the_image():
    theta = t(np.tile(np.array([[1.0, 0, 0], [0, 1, 0]]), (2, 1, 1)))
    for align in (True, False):
        grid = F.affine_grid(theta, (2, 3, 5, 6), align_corners=align)
        for mode in MODES:
            out = F.grid_sample(t(X), grid, mode, "zeros", align_corners=align)
            np.testing.assert_allclose(n(out), X, rtol=1e-12, atol=1e-12)


def test_affine_grid_values():
    theta = np.array([[[2.0, 0.5, 0.1], [-0.3, 1.0, 0.2]]])
    for align in (True, False):
        grid = n(F.affine_grid(t(theta), (1, 1, 3, 4), align_corners=align))
        xs = np.linspace(-1, 1, 4) * (1 if align else 3 / 4)
        ys = np.linspace(-1, 1, 3) * (1 if align else 2 / 3)
        for i, y in enumerate(ys):
            for j, x in enumerate(xs):
                np.testing.assert_allclose(grid[0, i, j], theta[0] @ [x, y, 1.0], rtol=1e-12)


def test_nearest_reads_pixels_and_zeros_padding_reads_zero():
    img = np.arange(12.0).reshape(1, 1, 3, 4)
    # align_corners=True: x = -1 + 2 j / (W - 1), y likewise -> pixel (i, j) exactly
    pts = np.array([[[[-1.0, -1.0], [1.0, 1.0], [-1 + 2 / 3, 0.0], [1.5, 0.0]]]])
    out = n(F.grid_sample(t(img), t(pts), "nearest", "zeros", align_corners=True))
    np.testing.assert_array_equal(out[0, 0, 0], [0.0, 11.0, 5.0, 0.0])
    out = n(F.grid_sample(t(img), t(pts), "nearest", "border", align_corners=True))
    assert out[0, 0, 0, 3] == 7.0                     # clipped to the last column of row 1
    # bilinear halfway between pixels 0 and 1 of row 0
    mid = np.array([[[[-1 + 1 / 3, -1.0]]]])
    assert n(F.grid_sample(t(img), t(mid), "bilinear", "zeros", align_corners=True)).item() == \
        pytest.approx(0.5)


def _fd(f, arr, h=1e-6):
    out = np.zeros_like(arr)
    for idx in np.ndindex(arr.shape):
        a, b = arr.copy(), arr.copy()
        a[idx] += h
        b[idx] -= h
        out[idx] = (f(a) - f(b)) / (2 * h)
    return out


@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("align", [False, True])
def test_bilinear_gradients_by_finite_differences(pad, align):
    x, g = X[:1, :2, :4, :5].copy(), G[:1, :2, :3].copy()
    w = RNG.standard_normal((1, 2, 2, 3))

    def loss(xa, ga):
        return float((n(F.grid_sample(t(xa), t(ga), "bilinear", pad, align_corners=align)) *
                      w).sum())
    xt, gt = t(x, requires_grad=True), t(g, requires_grad=True)
    (F.grid_sample(xt, gt, "bilinear", pad, align_corners=align) * t(w)).sum().backward()
    np.testing.assert_allclose(n(xt.grad), _fd(lambda a: loss(a, g), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(n(gt.grad), _fd(lambda a: loss(x, a), g), rtol=1e-5, atol=1e-7)


def test_affine_grid_gradient_flows_to_theta():
    theta = np.array([[[0.9, 0.1, 0.05], [-0.2, 1.1, 0.0]]])
    w = RNG.standard_normal((1, 3, 4, 5))

    def loss(th):
        grid = F.affine_grid(t(th), (1, 3, 4, 5), align_corners=False)
        return float((n(F.grid_sample(t(X[:1, :, :4, :5]), grid, align_corners=False)) *
                      w).sum())
    th = t(theta, requires_grad=True)
    grid = F.affine_grid(th, (1, 3, 4, 5), align_corners=False)
    (F.grid_sample(t(X[:1, :, :4, :5]), grid, align_corners=False) * t(w)).sum().backward()
    np.testing.assert_allclose(n(th.grad), _fd(loss, theta), rtol=1e-5, atol=1e-7)


def test_errors_warnings_and_reduced_precision():
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.grid_sample(t(X), t(G))
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.affine_grid(t(np.zeros((2, 2, 3))), (2, 3, 4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="same batch size"):
            F.grid_sample(t(X), t(G[:1]), align_corners=False)
        with pytest.raises(RuntimeError, match="size 2 in last dimension"):
            F.grid_sample(t(X), t(np.zeros((2, 4, 7, 3))), align_corners=False)
        with pytest.raises(RuntimeError, match="same dtype"):
            F.grid_sample(t(X), t(G.astype(np.float32)), align_corners=False)
        with pytest.raises(ValueError, match="padding_mode"):
            F.grid_sample(t(X), t(G), padding_mode="wrap", align_corners=False)
        with pytest.raises(ValueError, match="expected mode"):
            F.grid_sample(t(X), t(G), mode="trilinear", align_corners=False)
        with pytest.raises(ValueError, match="Nx2x3"):
            F.affine_grid(t(np.zeros((2, 3, 3))), (2, 3, 4, 4), align_corners=False)
        x16 = t(X.astype(np.float32)).to(cddp.bfloat16)
        out = F.grid_sample(x16, t(G.astype(np.float32)).to(cddp.bfloat16), align_corners=False)
        ref = F.grid_sample(x16.float(), t(G.astype(np.float32)).to(cddp.bfloat16).float(),
                            align_corners=False)
        assert out.dtype == cddp.bfloat16
        np.testing.assert_array_equal(n(out.float()), n(ref.to(cddp.bfloat16).float()))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("align", [False, True])
def test_against_torch(mode, pad, align):
    torch = pytest.importorskip("torch")
    for dt, tol in (("float64", 1e-12), ("float32", 2e-5)):
        w = RNG.standard_normal((2, 3, 4, 7)).astype(dt)
        xc, gc = t(X.astype(dt), requires_grad=True), t(G.astype(dt), requires_grad=True)
        xt = torch.tensor(X.astype(dt), requires_grad=True)
        gt = torch.tensor(G.astype(dt), requires_grad=True)
        yc = F.grid_sample(xc, gc, mode, pad, align_corners=align)
        yt = torch.nn.functional.grid_sample(xt, gt, mode, pad, align_corners=align)
        (yc * t(w)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(n(yc), yt.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(n(xc.grad), xt.grad.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(n(gc.grad), gt.grad.numpy(), rtol=tol, atol=10 * tol)
        assert yc.grad_fn.name() == yt.grad_fn.name()


def test_nan_and_huge_coordinates_are_defined():
    """Coordinates far outside the image read zeros padding's 0; NaN stays NaN under
    bilinear (its weights are NaN) and reads nothing under nearest — and neither reaches an
    out-of-range index (the sanitizer build checks the casts)."""
    img = t(np.ones((1, 1, 3, 3)))
    pts = t(np.array([[[[1e30, 0.0], [-1e30, 1e30], [np.nan, 0.0]]]]))
    for pad in PADS:
        b = n(F.grid_sample(img, pts, "bilinear", pad, align_corners=False))[0, 0, 0]
        nn_ = n(F.grid_sample(img, pts, "nearest", pad, align_corners=False))[0, 0, 0]
        assert np.isnan(b[2]) and not np.isnan(nn_[2])
        if pad == "zeros":
            assert b[0] == 0 and b[1] == 0 and nn_[0] == 0 and nn_[1] == 0
        else:
            assert b[0] == 1 and b[1] == 1
