"""API gaps filled in nn / nn.functional / Tensor: the in-place activations (F.relu_ ...),
LPPool1d/2d/3d and F.lp_pool*, the lazy convolutions and norms (and UninitializedBuffer),
MaxUnpool3d / F.max_unpool3d, and Tensor.untyped_storage() / storage().

Each item is checked against closed forms / NumPy (so the tests mean something without torch)
and, where torch is installed, against torch's values, gradients and error types."""
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import n, t


def _rand(shape, seed=0, lo=None):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(np.float32)
    return np.abs(a) + lo if lo is not None else a


# ---- in-place activations -------------------------------------------------------------------

def _np_elu(x, a):
    return np.where(x > 0, x, a * np.expm1(x))


_SELU_A, _SELU_S = 1.6732632423543772, 1.0507009873554805

# name, kwargs, the out-of-place call, a NumPy closed form
ACTS = [
    ("relu_", {}, lambda x: F.relu(x), lambda x: np.maximum(x, 0)),
    ("elu_", {"alpha": 0.7}, lambda x: F.elu(x, 0.7), lambda x: _np_elu(x, 0.7)),
    ("leaky_relu_", {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2),
     lambda x: np.where(x > 0, x, 0.2 * x)),
    ("hardtanh_", {"min_val": -0.5, "max_val": 0.8}, lambda x: F.hardtanh(x, -0.5, 0.8),
     lambda x: np.clip(x, -0.5, 0.8)),
    ("selu_", {}, lambda x: F.selu(x), lambda x: _SELU_S * _np_elu(x, _SELU_A)),
    ("celu_", {"alpha": 1.3}, lambda x: F.celu(x, 1.3),
     lambda x: np.where(x > 0, x, 1.3 * np.expm1(x / 1.3))),
    ("rrelu_", {"lower": 0.1, "upper": 0.3}, lambda x: F.rrelu(x, 0.1, 0.3),
     lambda x: np.where(x >= 0, x, 0.2 * x)),
]


@pytest.mark.parametrize("name,kw,outplace,ref", ACTS, ids=[a[0] for a in ACTS])
def test_inplace_activation_values_and_identity(name, kw, outplace, ref):
    a = _rand((3, 5), 1)
    x = t(a)
    out = getattr(F, name)(x, **kw)
    assert out is x                                  # written in place, input returned
    np.testing.assert_allclose(n(x), ref(a.astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n(x), n(outplace(t(a))), rtol=0, atol=0)


@pytest.mark.parametrize("name,kw,outplace,ref", ACTS, ids=[a[0] for a in ACTS])
def test_inplace_activation_autograd(name, kw, outplace, ref):
    a = _rand((4, 3), 2)
    leaf = t(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        getattr(F, name)(leaf, **kw)
    # on a non-leaf the gradient flows, equal to the out-of-place op's
    w = t(_rand((4, 3), 3))
    x1 = t(a, requires_grad=True)
    y = x1 * 1.0
    getattr(F, name)(y, **kw)
    (y * w).sum().backward()
    x2 = t(a, requires_grad=True)
    (outplace(x2) * w).sum().backward()
    np.testing.assert_allclose(n(x1.grad), n(x2.grad), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name,kw,outplace,ref", ACTS, ids=[a[0] for a in ACTS])
def test_inplace_activation_vs_torch(torch, name, kw, outplace, ref):
    a = _rand((4, 3), 4)
    w = _rand((4, 3), 5)
    x = t(a, requires_grad=True)
    y = x * 1.0
    getattr(F, name)(y, **kw)
    (y * t(w)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = tx * 1.0
    getattr(torch.nn.functional, name)(ty, **kw)
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, name)(torch.tensor(a, requires_grad=True), **kw)


def test_hardtanh_inplace_min_above_max_and_ints(torch):
    """hardtanh_ takes min_val > max_val (max_val everywhere, clamp's rule) where hardtanh
    raises; integer tensors are clamped in their dtype."""
    a = _rand((6,), 6)
    x = t(a)
    F.hardtanh_(x, 2.0, 1.0)
    np.testing.assert_array_equal(n(x), np.full(6, 1.0, np.float32))
    tx = torch.tensor(a)
    torch.nn.functional.hardtanh_(tx, 2.0, 1.0)
    np.testing.assert_array_equal(n(x), tx.numpy())
    with pytest.raises(ValueError):
        F.hardtanh(t(a), 2.0, 1.0)
    xi = cddp.tensor([-3, 0, 5])
    F.hardtanh_(xi, -1, 2)
    assert xi.dtype == cddp.int64 and xi.tolist() == [-1, 0, 2]
    ti = torch.tensor([-3, 0, 5])
    torch.nn.functional.hardtanh_(ti, -1, 2)
    assert ti.tolist() == xi.tolist()


def test_celu_inplace_alpha_zero(torch):
    with pytest.raises(RuntimeError, match="alpha cannot be 0"):
        F.celu_(t(_rand((3,))), 0.0)
    with pytest.raises(RuntimeError, match="alpha cannot be 0"):
        torch.nn.functional.celu_(torch.ones(3), 0.0)


# ---- LPPool ---------------------------------------------------------------------------------

def _np_lp_pool2d(x, p, k, s):
    """(sum over each k x k window, stride s, of x ** p) ** (1/p) for (N, C, H, W)."""
    N, C, H, W = x.shape
    oh, ow = (H - k) // s + 1, (W - k) // s + 1
    out = np.zeros((N, C, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = (x[:, :, i * s:i * s + k, j * s:j * s + k] ** p).sum((2, 3))
    return out ** (1.0 / p)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
def test_lp_pool2d_closed_form(p):
    a = _rand((2, 3, 7, 6), 7, lo=0.1)
    got = F.lp_pool2d(t(a), p, 2, 2)
    np.testing.assert_allclose(n(got), _np_lp_pool2d(a.astype(np.float64), p, 2, 2), rtol=1e-5)
    got = nn.LPPool2d(p, 3, stride=1)(t(a))
    np.testing.assert_allclose(n(got), _np_lp_pool2d(a.astype(np.float64), p, 3, 1), rtol=1e-5)


def test_lp_pool_zero_window_has_zero_gradient():
    x = cddp.zeros(1, 1, 4, requires_grad=True)
    y = F.lp_pool1d(x, 2, 2)
    y.sum().backward()
    assert n(y).tolist() == [[[0.0, 0.0]]]
    assert n(x.grad).tolist() == [[[0.0, 0.0, 0.0, 0.0]]]


def test_lp_pool_inf_norm_is_max_abs():
    a = _rand((2, 2, 6), 8)
    got = F.lp_pool1d(t(a), float("inf"), 3)
    np.testing.assert_array_equal(n(got), np.abs(a).reshape(2, 2, 2, 3).max(-1))
    got = F.lp_pool1d(t(a), -float("inf"), 3)
    np.testing.assert_array_equal(n(got), np.abs(a).reshape(2, 2, 2, 3).min(-1))


LP_CASES = [
    (1, (2, 3, 9), 2.0, 3, None, False),
    (1, (3, 10), 3.0, 4, 3, True),
    (1, (2, 3, 9), 1.5, 2, 1, False),
    (2, (2, 3, 7, 8), 2.0, 3, None, False),
    (2, (2, 3, 7, 8), 3.0, (2, 3), (2, 1), True),
    (2, (3, 6, 5), 1.0, 2, None, True),
    (3, (1, 2, 5, 6, 7), 2.0, 2, None, False),
    (3, (1, 2, 5, 6, 7), 1.5, (2, 3, 2), (1, 2, 2), True),
    (3, (2, 4, 5, 6), 2.0, 3, 2, False),
    (2, (2, 3, 7, 8), float("inf"), 2, 2, False),
]


@pytest.mark.parametrize("nd,shape,p,k,s,ceil", LP_CASES)
def test_lp_pool_vs_torch(torch, nd, shape, p, k, s, ceil):
    a = _rand(shape, 9, lo=0.05)
    x = t(a, requires_grad=True)
    y = getattr(F, f"lp_pool{nd}d")(x, p, k, s, ceil)
    tx = torch.tensor(a, requires_grad=True)
    ty = getattr(torch.nn.functional, f"lp_pool{nd}d")(tx, p, k, s, ceil)
    assert tuple(y.shape) == tuple(ty.shape)
    np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = _rand(tuple(ty.shape), 10)
    (y * t(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    # the module: same values, torch's repr
    mod = getattr(nn, f"LPPool{nd}d")(p, k, s, ceil)
    tmod = getattr(torch.nn, f"LPPool{nd}d")(p, k, s, ceil)
    np.testing.assert_allclose(n(mod(t(a))), tmod(torch.tensor(a)).numpy(), rtol=1e-5,
                               atol=1e-6)
    assert repr(mod) == repr(tmod)


# ---- MaxUnpool3d ----------------------------------------------------------------------------

def test_max_unpool3d_places_maxima_closed_form():
    a = _rand((2, 3, 4, 6, 4), 11)
    y, idx = F.max_pool3d(t(a), 2, return_indices=True)
    up = F.max_unpool3d(y, idx, 2)
    assert tuple(up.shape) == a.shape
    u = n(up).reshape(2, 3, -1)
    flat = n(idx).reshape(2, 3, -1).astype(np.int64)
    want = np.zeros_like(u)
    np.put_along_axis(want, flat, n(y).reshape(2, 3, -1), axis=2)
    np.testing.assert_array_equal(u, want)
    # every window's max survives at its own place, the rest is zero
    blocks = a.reshape(2, 3, 2, 2, 3, 2, 2, 2).max((3, 5, 7))
    np.testing.assert_array_equal(n(y), blocks)
    assert (u != 0).sum() == y.numel()


def test_max_unpool3d_module_output_size_and_errors():
    a = _rand((3, 5, 5, 5), 12)                     # unbatched (C, D, H, W)
    pool = nn.MaxPool3d(2, stride=2, return_indices=True)
    unpool = nn.MaxUnpool3d(2, stride=2)
    assert unpool.kernel_size == (2, 2, 2) and unpool.stride == (2, 2, 2)
    y, idx = pool(t(a))
    assert tuple(unpool(y, idx, output_size=(5, 5, 5)).shape) == (3, 5, 5, 5)
    with pytest.raises(RuntimeError, match="invalid max index"):
        unpool(y, idx)                              # 5-cube indices do not fit the 4-cube
    y4, idx4 = pool(t(a[:, :4, :4, :4].copy()))
    assert tuple(unpool(y4, idx4).shape) == (3, 4, 4, 4)
    with pytest.raises(ValueError):
        unpool(y, idx, output_size=(9, 5, 5))
    with pytest.raises(RuntimeError, match="4d or 5d"):
        F.max_unpool3d(cddp.zeros(2, 2, 2), cddp.zeros(2, 2, 2, dtype=cddp.int64), 2)


@pytest.mark.parametrize("k,s,p,out,shape", [
    (2, None, 0, None, (2, 2, 8, 6, 4)), (3, 2, 1, None, (1, 3, 9, 7, 5)),
    ((2, 3, 2), (2, 2, 1), 0, (8, 9, 7), (2, 2, 8, 9, 7)), (2, 2, 0, None, (2, 6, 4, 4))])
def test_max_unpool3d_vs_torch(torch, k, s, p, out, shape):
    a = _rand(shape, 13)
    ty, tidx = torch.nn.functional.max_pool3d(torch.tensor(a), k, s, p, return_indices=True)
    yv = ty.numpy()
    x = t(yv, requires_grad=True)
    idx = t(tidx.numpy())
    got = F.max_unpool3d(x, idx, k, s, p, out)
    tx = torch.tensor(yv, requires_grad=True)
    want = torch.nn.functional.max_unpool3d(tx, tidx, k, s, p, out)
    np.testing.assert_array_equal(n(got), want.detach().numpy())
    w = _rand(tuple(want.shape), 14)
    (got * t(w)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(n(x.grad), tx.grad.numpy())
    m, tm = nn.MaxUnpool3d(k, s, p), torch.nn.MaxUnpool3d(k, s, p)
    assert repr(m) == repr(tm)
    np.testing.assert_array_equal(n(m(t(yv), idx, out)), tm(torch.tensor(yv), tidx, out).numpy())


# ---- lazy modules ---------------------------------------------------------------------------

LAZY_CONV = [
    ("LazyConv1d", "Conv1d", (8, 3), {"stride": 2, "padding": 1}, (2, 5, 11)),
    ("LazyConv2d", "Conv2d", (6, 3), {"groups": 2, "dilation": 2}, (2, 4, 9, 9)),
    ("LazyConv3d", "Conv3d", (4, 2), {"bias": False}, (1, 3, 5, 4, 6)),
    ("LazyConv2d", "Conv2d", (5, 3), {"padding": "same", "padding_mode": "reflect"},
     (4, 7, 6)),                                    # unbatched: in_channels from dim 0
    ("LazyConvTranspose1d", "ConvTranspose1d", (6, 3), {"stride": 2, "output_padding": 1},
     (2, 4, 7)),
    ("LazyConvTranspose2d", "ConvTranspose2d", (4, 2), {"groups": 2}, (2, 6, 5, 4)),
    ("LazyConvTranspose3d", "ConvTranspose3d", (3, 2), {"stride": 2}, (1, 2, 3, 4, 3)),
]


@pytest.mark.parametrize("lazy,regular,args,kw,shape", LAZY_CONV,
                         ids=[c[0] + str(i) for i, c in enumerate(LAZY_CONV)])
def test_lazy_conv_becomes_regular_with_regular_init(lazy, regular, args, kw, shape):
    a = _rand(shape, 15)
    batched = len(shape) == int(regular[-2]) + 2
    in_ch = shape[1] if batched else shape[0]
    cddp.manual_seed(3)
    m = getattr(nn, lazy)(*args, **kw)
    assert m.has_uninitialized_params() and m.in_channels == 0
    assert isinstance(m.weight, nn.UninitializedParameter)
    y = m(t(a))
    assert type(m) is getattr(nn, regular)
    assert not hasattr(m, "_initialize_hook")
    cddp.manual_seed(3)
    ref = getattr(nn, regular)(in_ch, *args, **kw)
    assert m.in_channels == in_ch
    assert repr(m) == repr(ref)
    for (name, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        assert type(p) is nn.Parameter and tuple(p.shape) == tuple(q.shape), name
        np.testing.assert_array_equal(n(p), n(q), err_msg=name)
    np.testing.assert_array_equal(n(y), n(ref(t(a))))
    assert (m.bias is None) == (kw.get("bias", True) is False)


@pytest.mark.parametrize("lazy,regular,args,kw,shape", LAZY_CONV,
                         ids=[c[0] + str(i) for i, c in enumerate(LAZY_CONV)])
def test_lazy_conv_vs_torch(torch, lazy, regular, args, kw, shape):
    """Same seed, same draws as torch's lazy module: parameters and outputs match torch."""
    a = _rand(shape, 16)
    cddp.manual_seed(5)
    m = getattr(nn, lazy)(*args, **kw)
    torch.manual_seed(5)
    tm = getattr(torch.nn, lazy)(*args, **kw)
    assert repr(m) == repr(tm)
    y = m(t(a))
    ty = tm(torch.tensor(a))
    assert type(m).__name__ == type(tm).__name__ == regular
    for (name, p), (_, q) in zip(m.named_parameters(), tm.named_parameters()):
        np.testing.assert_array_equal(n(p), q.detach().numpy(), err_msg=name)
    np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert repr(m) == repr(tm)


def test_lazy_conv_errors(torch):
    m = nn.LazyConv1d(4, 3)
    with pytest.raises(RuntimeError, match="Expected 2D \\(unbatched\\) or 3D \\(batched\\)"):
        m(cddp.zeros(2, 3, 4, 5))
    m = nn.LazyConv1d(4, 3, groups=2)
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        m(cddp.zeros(2, 3, 8))
    assert type(m) is nn.LazyConv1d and m.has_uninitialized_params()
    tm = torch.nn.LazyConv1d(4, 3, groups=2)
    with pytest.raises(ValueError):
        tm(torch.zeros(2, 3, 8))


def test_lazy_conv_transpose_output_size_on_first_call():
    m = nn.LazyConvTranspose2d(3, 3, stride=2)
    y = m(cddp.zeros(1, 2, 4, 4), output_size=(10, 10))
    assert type(m) is nn.ConvTranspose2d and tuple(y.shape) == (1, 3, 10, 10)
    assert tuple(m.weight.shape) == (2, 3, 3, 3)


LAZY_NORM = [
    ("LazyBatchNorm1d", "BatchNorm1d", {}, (6, 4)),
    ("LazyBatchNorm1d", "BatchNorm1d", {"momentum": None}, (5, 3, 7)),
    ("LazyBatchNorm2d", "BatchNorm2d", {"affine": False}, (3, 4, 5, 5)),
    ("LazyBatchNorm3d", "BatchNorm3d", {"bias": False}, (2, 3, 4, 3, 3)),
    ("LazyInstanceNorm1d", "InstanceNorm1d", {}, (3, 4, 9)),
    ("LazyInstanceNorm2d", "InstanceNorm2d", {"track_running_stats": False}, (2, 3, 5, 6)),
    ("LazyInstanceNorm3d", "InstanceNorm3d", {"eps": 1e-3}, (2, 2, 4, 3, 5)),
]


def _norm_state(m):
    return {k: n(v) for k, v in m.state_dict().items()}


@pytest.mark.parametrize("lazy,regular,kw,shape", LAZY_NORM,
                         ids=[c[0] + str(i) for i, c in enumerate(LAZY_NORM)])
def test_lazy_norm_becomes_regular(lazy, regular, kw, shape):
    a = _rand(shape, 17) * 2 + 0.5
    m = getattr(nn, lazy)(**kw)
    tracked = kw.get("track_running_stats", True)
    affine = kw.get("affine", True)
    assert m.has_uninitialized_params() == (tracked or affine)
    if tracked:
        assert isinstance(m.running_mean, nn.UninitializedBuffer)
        assert m.num_batches_tracked.dtype == cddp.int64
    y = m(t(a))
    assert type(m) is getattr(nn, regular)
    assert m.num_features == shape[1]
    if tracked:
        assert type(m.running_mean) is cddp.Tensor
    # a regular module with the same options, run on the same batch: same everything
    ref = getattr(nn, regular)(shape[1], **{"affine": True, "track_running_stats": True,
                                             **kw})
    np.testing.assert_allclose(n(y), n(ref(t(a))), rtol=1e-6, atol=1e-6)
    assert repr(m) == repr(ref)
    got, want = _norm_state(m), _norm_state(ref)
    assert list(got) == list(want)
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7, err_msg=k)


@pytest.mark.parametrize("lazy,regular,kw,shape", LAZY_NORM,
                         ids=[c[0] + str(i) for i, c in enumerate(LAZY_NORM)])
def test_lazy_norm_vs_torch(torch, lazy, regular, kw, shape):
    a = _rand(shape, 18) * 2 + 0.5
    m, tm = getattr(nn, lazy)(**kw), getattr(torch.nn, lazy)(**kw)
    assert repr(m) == repr(tm)
    assert [k for k in m.state_dict()] == [k for k in tm.state_dict()]
    for step in range(2):
        y, ty = m(t(a + step)), tm(torch.tensor(a + step))
        np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert repr(m) == repr(tm)
    tstate = {k: v.numpy() for k, v in tm.state_dict().items()}
    for k, v in _norm_state(m).items():
        np.testing.assert_allclose(v, tstate[k], rtol=1e-5, atol=1e-6, err_msg=k)
    m.eval()
    tm.eval()
    np.testing.assert_allclose(n(m(t(a))), tm(torch.tensor(a)).detach().numpy(), rtol=1e-5,
                               atol=1e-5)


def test_lazy_state_dict_round_trip():
    """An uninitialized module saves its uninitialized tensors as themselves; loading a
    trained state into one materializes parameters and buffers to the saved shapes."""
    lazy = nn.LazyBatchNorm2d()
    sd = lazy.state_dict()
    assert repr(sd["weight"]) == "<UninitializedParameter>"
    assert repr(sd["running_var"]) == "<UninitializedBuffer>"
    trained = nn.BatchNorm2d(3)
    trained(t(_rand((4, 3, 2, 2), 19)))
    fresh = nn.LazyBatchNorm2d()
    fresh.load_state_dict(trained.state_dict())
    assert not fresh.has_uninitialized_params()
    for k, v in trained.state_dict().items():
        np.testing.assert_array_equal(n(fresh.state_dict()[k]), n(v), err_msg=k)
    conv = nn.LazyConv2d(2, 3)
    conv.load_state_dict(nn.Conv2d(4, 2, 3).state_dict())
    assert tuple(conv.weight.shape) == (2, 4, 3, 3)


def test_lazy_module_dtype_before_first_forward():
    """.double() before the dry run: the uninitialized tensors stay uninitialized and are
    materialized in float64."""
    m = nn.LazyBatchNorm1d()
    m.double()
    assert isinstance(m.running_mean, nn.UninitializedBuffer)
    assert m.running_mean.dtype == cddp.float64 and m.weight.dtype == cddp.float64
    m(cddp.randn(4, 3, dtype=cddp.float64))
    assert m.running_mean.dtype == cddp.float64 and m.weight.dtype == cddp.float64
    c = nn.LazyConv1d(2, 2, dtype=cddp.float64)
    c(cddp.randn(1, 3, 5, dtype=cddp.float64))
    assert c.weight.dtype == cddp.float64 and tuple(c.weight.shape) == (2, 3, 2)


def test_uninitialized_buffer_basics(torch):
    b = nn.UninitializedBuffer()
    assert repr(b) == repr(torch.nn.UninitializedBuffer()) == "<UninitializedBuffer>"
    assert b.requires_grad is False and b.persistent is True
    import copy
    import pickle
    assert isinstance(copy.deepcopy(b), nn.UninitializedBuffer)
    assert isinstance(pickle.loads(pickle.dumps(b)), nn.UninitializedBuffer)
    b.materialize((2, 3))
    assert type(b) is cddp.Tensor and tuple(b.shape) == (2, 3)


# ---- storages -------------------------------------------------------------------------------

def test_untyped_storage_shares_across_views():
    a = cddp.arange(12.0).reshape(3, 4)
    views = [a[1:], a.t(), a.view(-1)[5:], a.view(cddp.int32), a.select(1, 2)]
    base = a.untyped_storage()
    for v in views:
        s = v.untyped_storage()
        assert s.data_ptr() == base.data_ptr() and s.nbytes() == 48
        assert s is base                           # one object per storage, as torch
    assert a.clone().untyped_storage().data_ptr() != base.data_ptr()
    assert base.data_ptr() == a.data_ptr()
    assert a[2:].data_ptr() - a[2:].untyped_storage().data_ptr() == 8 * 4
    assert base.size() == len(base) == 48 and base.element_size() == 1
    assert str(base.device) == "cpu"
    assert base.tolist() == list(np.arange(12, dtype=np.float32).view(np.uint8))


def test_typed_storage_counts_elements():
    a = cddp.arange(10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = a[3:].storage()
        w = a.view(cddp.int16).storage()
    assert s.size() == len(s) == 10 and s.nbytes() == 40 and s.element_size() == 4
    assert s.dtype == cddp.float32 and s.tolist() == list(range(10))
    assert s.data_ptr() == a.untyped_storage().data_ptr()
    assert s.untyped() is a.untyped_storage()
    assert w.size() == 20 and w.dtype == cddp.int16 and w.element_size() == 2
    e = cddp.empty(0).untyped_storage()
    assert e.data_ptr() == 0 and e.nbytes() == 0 and e.tolist() == []


def test_storage_vs_torch(torch):
    cases = [((3, 4), "float32", lambda x: x[1:]), ((5,), "float64", lambda x: x[::2]),
             ((2, 3), "int16", lambda x: x.t()), ((4,), "bfloat16", lambda x: x[1:3]),
             ((0,), "float32", lambda x: x)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape, dt, view in cases:
            c = cddp.zeros(shape, dtype=getattr(cddp, dt))
            tt = torch.zeros(shape, dtype=getattr(torch, dt))
            cv, tv = view(c), view(tt)
            for get in (lambda x: x.untyped_storage(), lambda x: x.storage()):
                cs, ts = get(cv), get(tv)
                assert (cs.nbytes(), cs.size(), len(cs), cs.element_size()) == \
                    (ts.nbytes(), ts.size(), len(ts), ts.element_size()), (shape, dt)
                assert (cs.data_ptr() == get(c).data_ptr()) == \
                    (ts.data_ptr() == get(tt).data_ptr())
                assert cv.data_ptr() - cs.data_ptr() == tv.data_ptr() - ts.data_ptr()
            assert str(cv.storage().dtype).split(".")[-1] == str(tv.storage().dtype).split(".")[-1]
