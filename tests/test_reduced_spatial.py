"""float16 / bfloat16 through pooling, interpolate, unfold and fold: computed as float32 and
rounded once (nn/_functional_spatial.py), never read by the float32 kernels as wider elements
(csrc/nn/pool.c, interpolate.c, fold.c refuse them). Before, these returned garbage and
corrupted the heap. Oracle: the float32 result rounded to the dtype (NumPy-free and
torch-free), and torch's own reduced-precision kernels when installed."""
import numpy as np
import pytest

import cddp
import cddp.nn.functional as F

CASES = [
    ("max_pool2d", lambda F, x: F.max_pool2d(x, 2)),
    ("max_pool2d_idx", lambda F, x: F.max_pool2d(x, 3, 1, 1, return_indices=True)[1]),
    ("avg_pool2d", lambda F, x: F.avg_pool2d(x, 3, 2, 1)),
    ("adaptive_avg_pool2d", lambda F, x: F.adaptive_avg_pool2d(x, (2, 3))),
    ("adaptive_max_pool2d", lambda F, x: F.adaptive_max_pool2d(x, 2)),
    ("max_pool1d", lambda F, x: F.max_pool1d(x[0], 2)),
    ("avg_pool1d", lambda F, x: F.avg_pool1d(x[0], 3)),
    ("nearest", lambda F, x: F.interpolate(x, scale_factor=2)),
    ("bilinear", lambda F, x: F.interpolate(x, size=(7, 5), mode="bilinear",
                                            align_corners=False)),
    ("unfold", lambda F, x: F.unfold(x, 2, stride=2)),
    ("fold", lambda F, x: F.fold(x.reshape(2, 3 * 4, 9), (4, 4), 2, stride=1)),
]
X = (np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6) * 0.37) % 11 - 5


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn", CASES)
def test_reduced_equals_float32_rounded(name, fn, dt):
    dtype = getattr(cddp, dt)
    x = cddp.tensor(X).to(dtype)
    got = fn(F, x)
    ref = fn(F, x.float())
    if ref.is_floating_point():
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.float().numpy(), ref.to(dtype).float().numpy())
    else:
        np.testing.assert_array_equal(got.numpy(), ref.numpy())


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_reduced_pool_gradient_is_the_float32_one_rounded(dt):
    dtype = getattr(cddp, dt)
    x = cddp.tensor(X).to(dtype).requires_grad_()
    F.avg_pool2d(x, 2).sum().backward()
    assert x.grad.dtype == dtype
    np.testing.assert_array_equal(x.grad.float().numpy(), np.full(X.shape, 0.25, np.float32))


def test_kernels_refuse_narrow_inputs():
    x = cddp.ones(1, 1, 4, 4).bfloat16()
    with pytest.raises(TypeError, match="bfloat16"):
        cddp._C._avg_pool2d(x, (2, 2), (2, 2), (0, 0), False, True, None)
    with pytest.raises(TypeError, match="float16"):
        cddp._C._unfold(x.half(), (2, 2), (1, 1), (0, 0), (1, 1))


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn", CASES)
def test_reduced_matches_torch(name, fn, dt):
    torch = pytest.importorskip("torch")
    got = fn(F, cddp.tensor(X).to(getattr(cddp, dt)))
    want = fn(torch.nn.functional, torch.tensor(X).to(getattr(torch, dt)))
    g = got.float().numpy() if got.is_floating_point() else got.numpy()
    w = want.float().numpy() if want.is_floating_point() else want.numpy()
    # torch's bilinear float16 kernel rounds its weights in float16 (one ulp apart at most);
    # its fold adds the up-to-4 overlapping patches in the reduced dtype, rounding each sum,
    # where cddp adds in float32 and rounds once (cddp's is the float32 result rounded, above)
    rtol = {"bilinear": 1e-3 if dt == "float16" else 8e-3,
            "fold": 5e-3 if dt == "float16" else 4e-2}.get(name, 0)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=0)
