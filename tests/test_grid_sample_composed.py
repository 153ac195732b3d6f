"""grid_sample on 5-D inputs (trilinear, nearest), 4-D bicubic, and affine_grid for 5-D sizes
(cddp/nn/_grid_sample_composed.py).

Oracles: an identity affine grid reproduces the input; a NumPy loop of torch's trilinear
formula; finite differences for the grid's gradient; torch 2.13 (importorskip) for values and
both gradients in every mode / padding / align_corners."""
import itertools

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F


def _trilinear_reference(x, g, align_corners):
    """torch's formula, zeros padding, one loop per output point (x (N,C,D,H,W), g (N,...,3))."""
    n, c, d, h, w = x.shape
    out = np.zeros((n, c) + g.shape[1:4])
    for b in range(n):
        for idx in np.ndindex(*g.shape[1:4]):
            src = []
            for coord, size in zip(g[(b,) + idx], (w, h, d)):
                src.append((coord + 1) / 2 * (size - 1) if align_corners
                           else ((coord + 1) * size - 1) / 2)
            ix, iy, iz = src
            x0, y0, z0 = int(np.floor(ix)), int(np.floor(iy)), int(np.floor(iz))
            for dz, dy, dx in itertools.product((0, 1), repeat=3):
                zz, yy, xx = z0 + dz, y0 + dy, x0 + dx
                if not (0 <= zz < d and 0 <= yy < h and 0 <= xx < w):
                    continue
                wgt = ((iz - z0) if dz else 1 - (iz - z0)) * ((iy - y0) if dy else
                                                              1 - (iy - y0)) * \
                    ((ix - x0) if dx else 1 - (ix - x0))
                out[(b, slice(None)) + idx] += wgt * x[b, :, zz, yy, xx]
    return out


@pytest.mark.parametrize("align_corners", [False, True])
def test_trilinear_matches_a_numpy_loop(align_corners):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 3, 4, 5))
    g = rng.uniform(-1.2, 1.2, (2, 2, 3, 2, 3))
    got = F.grid_sample(cddp.tensor(x), cddp.tensor(g), align_corners=align_corners)
    np.testing.assert_allclose(got.numpy(), _trilinear_reference(x, g, align_corners),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_identity_affine_grid_reproduces_the_volume(mode, align_corners):
    x = cddp.tensor(np.random.default_rng(1).standard_normal((2, 3, 4, 5, 6)))
    theta = cddp.tensor(np.tile(np.eye(3, 4), (2, 1, 1)))
    grid = F.affine_grid(theta, (2, 3, 4, 5, 6), align_corners=align_corners)
    assert tuple(grid.shape) == (2, 4, 5, 6, 3)
    y = F.grid_sample(x, grid, mode=mode, align_corners=align_corners)
    np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_gradient_matches_finite_differences(padding_mode):
    rng = np.random.default_rng(2)
    x = cddp.tensor(rng.standard_normal((1, 2, 3, 4, 4)))
    g0 = rng.uniform(-1.1, 1.1, (1, 2, 2, 1, 3))
    w = cddp.tensor(rng.standard_normal((1, 2, 2, 2, 1)))

    def f(gv):
        return (F.grid_sample(x, cddp.tensor(gv), padding_mode=padding_mode,
                              align_corners=False) * w).sum().item()
    g = cddp.tensor(g0, requires_grad=True)
    (F.grid_sample(x, g, padding_mode=padding_mode, align_corners=False) * w).sum().backward()
    num = np.zeros_like(g0)
    for i in np.ndindex(*g0.shape):
        e = np.zeros_like(g0)
        e[i] = 1e-6
        num[i] = (f(g0 + e) - f(g0 - e)) / 2e-6
    np.testing.assert_allclose(g.grad.numpy(), num, rtol=1e-5, atol=1e-7)


def test_argument_errors():
    x = cddp.zeros(1, 1, 2, 2, 2)
    with pytest.raises(RuntimeError, match="bicubic interpolation only supports 4D"):
        F.grid_sample(x, cddp.zeros(1, 1, 1, 1, 3), mode="bicubic", align_corners=False)
    with pytest.raises(RuntimeError, match="size 3 in last dimension"):
        F.grid_sample(x, cddp.zeros(1, 1, 1, 1, 2), align_corners=False)
    with pytest.raises(ValueError, match="Nx3x4"):
        F.affine_grid(cddp.zeros(1, 2, 3), (1, 1, 2, 2, 2), align_corners=False)


def test_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    cases = [(m, p, a, 5) for m, p, a in itertools.product(
        ["bilinear", "nearest"], ["zeros", "border", "reflection"], [False, True])]
    cases += [("bicubic", p, a, 4) for p, a in itertools.product(
        ["zeros", "border", "reflection"], [False, True])]
    for mode, pm, ac, nd in cases:
        shape = (2, 3, 4, 5, 6) if nd == 5 else (2, 3, 5, 6)
        gshape = (2, 3, 2, 2, 3) if nd == 5 else (2, 4, 3, 2)
        x = rng.standard_normal(shape).astype(np.float32)
        g = rng.uniform(-1.3, 1.3, gshape).astype(np.float32)
        res = []
        for lib in (torch, cddp):
            xi = lib.tensor(x, requires_grad=True)
            gi = lib.tensor(g, requires_grad=True)
            y = lib.nn.functional.grid_sample(xi, gi, mode=mode, padding_mode=pm,
                                              align_corners=ac)
            wt = lib.tensor(np.linspace(-1, 1, y.numel(), dtype=np.float32).reshape(
                tuple(y.shape)))
            (y * wt).sum().backward()
            res.append((y.detach().numpy(), xi.grad.numpy(), gi.grad.numpy()))
        for a, b in zip(*res):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=f"{mode} {pm} {ac}")
    th = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for ac in (False, True):
        a = torch.nn.functional.affine_grid(torch.tensor(th), (2, 3, 4, 5, 6), align_corners=ac)
        b = F.affine_grid(cddp.tensor(th), (2, 3, 4, 5, 6), align_corners=ac)
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)
