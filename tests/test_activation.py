"""Activations (csrc/nn/activation.c) and channel-wise / alpha dropout: values against NumPy
formulas, gradients against finite differences, both against torch when it is installed;
in-place forms, modules, errors."""
import math
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(7)


def normal(*shape, dtype=np.float64, scale=1.0):
    return np.asarray(RNG.standard_normal(shape) * scale).astype(dtype)


def erf(v):
    return np.vectorize(math.erf)(v)


def softplus_np(x, beta=1.0, thr=20.0):
    return np.where(x * beta > thr, x, np.log1p(np.exp(np.minimum(x * beta, thr))) / beta)


SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# name -> (cddp function, NumPy reference, torch function name and kwargs)
ACTS = {
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
                   ("leaky_relu", {"negative_slope": 0.2})),
    "elu": (lambda x: F.elu(x, 1.3), lambda x: np.where(x > 0, x, 1.3 * np.expm1(x)),
            ("elu", {"alpha": 1.3})),
    "selu": (F.selu, lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)), ("selu", {})),
    "celu": (lambda x: F.celu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x / 0.5)),
             ("celu", {"alpha": 0.5})),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), ("gelu", {})),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
                  ("gelu", {"approximate": "tanh"})),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x)), ("silu", {})),
    "softplus": (lambda x: F.softplus(x, 2.0, 3.0), lambda x: softplus_np(x, 2.0, 3.0),
                 ("softplus", {"beta": 2.0, "threshold": 3.0})),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: np.clip(x, -0.5, 1.5),
                 ("hardtanh", {"min_val": -0.5, "max_val": 1.5})),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6), ("relu6", {})),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x))), ("mish", {})),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, ("hardswish", {})),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6, ("hardsigmoid", {})),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x)), ("softsign", {})),
    "tanhshrink": (F.tanhshrink, lambda x: x - np.tanh(x), ("tanhshrink", {})),
}
# kinks and thresholds where a finite difference is meaningless
KINKS = np.array([0.0, -3.0, 3.0, -0.5, 1.5, 6.0, 1.5])


def smooth_points(shape, scale=3.0):
    x = np.asarray(normal(*shape, scale=scale))
    for k in KINKS:
        x[np.abs(x - k) < 1e-3] += 0.01
    return x


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_matches_numpy(name, dtype):
    f, ref, _ = ACTS[name]
    a = np.concatenate([normal(300, scale=4), [0, -3, 3, 6, 20, 21, -20, 50, -50]]).astype(dtype)
    y = f(t(a))
    assert y.dtype == t(a).dtype
    rtol, atol = (2e-6, 2e-6) if dtype == np.float32 else (1e-12, 1e-13)
    np.testing.assert_allclose(n(y), ref(a.astype(np.float64)), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(ACTS))
def test_activation_gradcheck(name):
    gradcheck(ACTS[name][0], smooth_points((4, 5)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(ACTS))
def test_activation_matches_torch_values_and_grads(torch, name):
    f, _, (tname, kw) = ACTS[name]
    tf = getattr(torch.nn.functional, tname)
    for dtype in (np.float32, np.float64):
        base = np.concatenate([normal(6, 8, scale=4), np.array([[0, -3, 3, 6, -1, 1, 20, 30]])]).astype(dtype)
        g = normal(4, 7, dtype=dtype)
        x = t(base, True)
        xv = x.t()[1:5, :]                                  # a non-contiguous (4, 7) view
        tx = torch.tensor(base, requires_grad=True)
        y, ty = f(xv), tf(tx.t()[1:5, :], **kw)
        y.backward(t(g))
        ty.backward(torch.tensor(g))
        rtol = 1e-5 if dtype == np.float32 else 1e-12
        # torch computes celu's backward input_scale and hardsigmoid's 1/6 in float32
        if dtype == np.float64 and name in ("celu", "hardsigmoid"):
            rtol = 1e-7
        np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=rtol, atol=rtol)
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=rtol, atol=rtol)
        assert y.grad_fn.name() == type(ty.grad_fn).__name__


INPLACE = {"leaky_relu": lambda x: F.leaky_relu(x, 0.1, inplace=True),
           "elu": lambda x: F.elu(x, 0.7, inplace=True),
           "selu": lambda x: F.selu(x, inplace=True),
           "celu": lambda x: F.celu(x, 0.5, inplace=True),
           "silu": lambda x: F.silu(x, inplace=True),
           "hardtanh": lambda x: F.hardtanh(x, -0.5, 1.5, inplace=True),
           "relu6": lambda x: F.relu6(x, inplace=True),
           "mish": lambda x: F.mish(x, inplace=True),
           "hardswish": lambda x: F.hardswish(x, inplace=True),
           "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True)}
OUTOFPLACE = {"leaky_relu": lambda x: F.leaky_relu(x, 0.1), "elu": lambda x: F.elu(x, 0.7),
              "selu": F.selu, "celu": lambda x: F.celu(x, 0.5), "silu": F.silu,
              "hardtanh": lambda x: F.hardtanh(x, -0.5, 1.5), "relu6": F.relu6, "mish": F.mish,
              "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_forms(name):
    a = smooth_points((3, 4))
    ref = n(OUTOFPLACE[name](t(a)))
    x = t(a)
    assert INPLACE[name](x) is x                        # returns self, writes through
    np.testing.assert_allclose(n(x), ref, rtol=1e-12)
    base = t(np.zeros((3, 8)))                          # through a strided view
    v = base[:, ::2]
    v.copy_(t(a))
    INPLACE[name](v)
    np.testing.assert_allclose(n(base)[:, ::2], ref, rtol=1e-12)
    assert not n(base)[:, 1::2].any()
    leaf = t(a, True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        INPLACE[name](leaf)
    # on a non-leaf: history through the in-place op, gradient as the out-of-place one's
    w = normal(3, 4)
    x1, x2 = t(a, True), t(a, True)
    z = x1 * 2
    INPLACE[name](z)
    (z * t(w)).sum().backward()
    (OUTOFPLACE[name](x2 * 2) * t(w)).sum().backward()
    np.testing.assert_allclose(n(x1.grad), n(x2.grad), rtol=1e-12)


def test_inplace_chain_matches_torch(torch):
    a, w = smooth_points((4, 6)), normal(4, 6)
    x, tx = t(a, True), torch.tensor(a, requires_grad=True)
    for L, inp, wt in ((F, x, t(w)), (torch.nn.functional, tx, torch.tensor(w))):
        z = inp * 1.5
        L.leaky_relu(z, 0.3, inplace=True)
        u = z * 2
        L.hardtanh(u, -1.0, 2.0, inplace=True)
        e = inp * 0.5
        L.silu(e, inplace=True)
        L.elu(e, 0.8, inplace=True)
        out = (u * wt).sum() + z.sum() + (e * wt).sum()
        out.backward()
        if L is F:
            assert z.grad_fn.name() == "LeakyReluBackward1" and e.grad_fn.name() == "EluBackward1"
            ours = n(u) + n(e)
        else:
            theirs = u.detach().numpy() + e.detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-12)


def test_activation_errors():
    i = t(np.array([1, -2, 3]))
    for f, kname in [(F.leaky_relu, "leaky_relu_cpu"), (F.gelu, "GeluKernelImpl"), (F.silu, "silu_cpu"),
                     (F.elu, "elu_cpu"), (F.softplus, "softplus_cpu"), (F.mish, "mish_cpu"),
                     (F.hardswish, "hardswish_cpu"), (F.hardsigmoid, "hardsigmoid_cpu")]:
        with pytest.raises(NotImplementedError, match=f'"{kname}" not implemented for \'Long\''):
            f(i)
    np.testing.assert_array_equal(n(F.hardtanh(i)), [1, -1, 1])     # integers clamp, as torch
    np.testing.assert_array_equal(n(F.relu6(t(np.array([-1, 3, 9])))), [0, 3, 6])
    with pytest.raises(RuntimeError, match="Bool inputs not supported for hardtanh"):
        F.hardtanh(t(np.array([True])))
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh."):
        F.gelu(t(normal(3)), approximate="foo")
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(t(normal(3)), 1.0, -1.0)
    with pytest.raises(AssertionError, match=r"max_val \(-1.0\) must be greater than min_val \(1.0\)"):
        nn.Hardtanh(1.0, -1.0)
    with pytest.raises(TypeError):
        F.silu([1.0, 2.0])


# ---- PReLU ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,nw", [((4, 3, 5), 3), ((4, 3), 1), ((), 1), ((5,), 1), ((2, 3, 4, 4), 3), ((6, 2), 2)])
def test_prelu_matches_numpy_and_gradcheck(shape, nw):
    a, w = smooth_points(shape), RNG.random(nw)
    wb = w.reshape((-1,) + (1,) * max(len(shape) - 2, 0)) if nw > 1 else w[0]
    np.testing.assert_allclose(n(F.prelu(t(a), t(w))), np.where(a > 0, a, wb * a), rtol=1e-12)
    gradcheck(F.prelu, a, w)


def test_prelu_matches_torch(torch):
    for shape, nw in [((4, 3, 5), 3), ((4, 3), 1), ((2, 3, 4, 4), 3)]:
        for dtype in (np.float32, np.float64):
            a, w, g = normal(*shape, dtype=dtype), RNG.random(nw).astype(dtype), normal(*shape, dtype=dtype)
            x, W = t(a, True), t(w, True)
            tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
            y, ty = F.prelu(x, W), torch.nn.functional.prelu(tx, tw)
            y.backward(t(g))
            ty.backward(torch.tensor(g))
            rtol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=rtol)
            np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=rtol)
            np.testing.assert_allclose(n(W.grad), tw.grad.numpy(), rtol=rtol, atol=1e-5)
            assert y.grad_fn.name() == "PreluKernelBackward0"


def test_prelu_module_and_errors():
    m = nn.PReLU(3, init=0.1)
    assert n(m.weight).tolist() == pytest.approx([0.1] * 3) and list(m.state_dict()) == ["weight"]
    x = t(normal(2, 3, 4, dtype=np.float32), True)
    m(x).sum().backward()
    assert tuple(m.weight.grad.shape) == (3,)
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size. Found parameter numbers = 4 and channel size = 3."):
        F.prelu(t(normal(2, 3)), t(normal(4)))
    with pytest.raises(RuntimeError, match="Expected `weight` to be a scalar or 1D tensor, but got: ndim = 2"):
        F.prelu(t(normal(2, 3)), t(normal(3, 1)))
    with pytest.raises(RuntimeError, match="prelu: Type promoting not supported. Got Long and Double"):
        F.prelu(t(np.array([1, 2])), t(normal(1)))


# ---- modules -------------------------------------------------------------------------------------

def test_modules_reprs_and_forward_match_torch(torch):
    pairs = [("LeakyReLU", (0.2, True)), ("PReLU", (3, 0.1)), ("GELU", ("tanh",)), ("SiLU", (True,)),
             ("ELU", (0.5,)), ("SELU", ()), ("CELU", (0.7,)), ("Softplus", (2.0, 5.0)),
             ("Hardtanh", (-2.0, 2.0)), ("ReLU6", (True,)), ("Mish", ()), ("Hardswish", ()),
             ("Hardsigmoid", ()), ("Softsign", ()), ("Tanhshrink", ()), ("Softmax2d", ())]
    for name, args in pairs:
        ours, ref = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(ours) == repr(ref), name
        a = normal(2, 3, 4, 5, dtype=np.float32)
        np.testing.assert_allclose(n(ours(t(a))), ref(torch.tensor(a)).detach().numpy(), rtol=2e-6, atol=2e-6,
                                   err_msg=name)


def test_softmax2d_and_negative_dims():
    a = normal(2, 3, 4, 5)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(n(nn.Softmax2d()(t(a))), e / e.sum(1, keepdims=True), rtol=1e-12)
    e3 = np.exp(a[0] - a[0].max(0, keepdims=True))
    np.testing.assert_allclose(n(nn.Softmax2d()(t(a[0]))), e3 / e3.sum(0, keepdims=True), rtol=1e-12)
    for dim in (-1, -2, -4):
        ref = a - a.max(dim, keepdims=True)
        ref = ref - np.log(np.exp(ref).sum(dim, keepdims=True))
        np.testing.assert_allclose(n(F.log_softmax(t(a), dim)), ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(n(nn.Softmax(dim)(t(a))), np.exp(ref), rtol=1e-12)
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D instead"):
        nn.Softmax2d()(t(normal(2, 3)))


# ---- channel-wise and alpha dropout -----------------------------------------------------------

@pytest.mark.parametrize("fn,shape,nbatch", [(F.dropout1d, (4, 8, 30), 2), (F.dropout1d, (8, 30), 1),
                                             (F.dropout2d, (4, 8, 5, 6), 2), (F.dropout3d, (3, 6, 2, 3, 4), 2),
                                             (F.dropout3d, (6, 2, 3, 4), 1)])
def test_channel_dropout_zeroes_whole_channels(fn, shape, nbatch):
    cddp.manual_seed(3)
    x = t(np.ones(shape), True)
    y = fn(x, 0.4)
    v = n(y).reshape(int(np.prod(shape[:nbatch])), -1)
    planes = v[:, 0]
    assert set(np.unique(v)) <= {0.0, 1 / 0.6} and (v == planes[:, None]).all()
    assert 0 < (planes == 0).sum() < len(planes)
    y.sum().backward()
    np.testing.assert_array_equal(n(x.grad), n(y))
    x2 = t(np.ones(shape))
    assert fn(x2, 0.4, inplace=True) is x2
    assert fn(x2, 0.4, training=False) is x2
    np.testing.assert_array_equal(n(fn(t(np.ones(shape)), 1.0)), 0)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        fn(x2, 1.5)


def test_channel_dropout_modules_and_errors():
    d = nn.Dropout2d(0.5)
    x = t(np.ones((2, 3, 4, 4)))
    d.eval()
    assert d(x) is x
    assert repr(nn.Dropout1d(0.3, True)) == "Dropout1d(p=0.3, inplace=True)"
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input, but received a 4D input"):
        F.dropout1d(x)
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        F.dropout2d(t(np.ones((2, 3, 4))))
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout3d(-0.1)


def test_alpha_dropout_keeps_selu_statistics():
    cddp.manual_seed(5)
    a, p, alpha = normal(200000), 0.2, 1.7580993408473766
    y = n(F.alpha_dropout(t(a), p, training=True))
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02      # mean 0, variance 1 kept
    scale = 1 / math.sqrt((alpha ** 2 * p + 1) * (1 - p))
    kept = np.isclose(y, scale * a + alpha * scale * p, rtol=1e-12, atol=1e-12)
    assert abs(kept.mean() - (1 - p)) < 0.01
    np.testing.assert_allclose(y[~kept], alpha * scale * (p - 1), rtol=1e-12)
    x = t(a[:10])
    assert F.alpha_dropout(x, 0.2) is x                  # training defaults to False
    assert nn.AlphaDropout(0.2).eval()(x) is x
    cddp.manual_seed(5)
    z = n(F.feature_alpha_dropout(t(np.zeros((50, 40, 3))), p, training=True))
    assert (z == z[:, :, :1]).all()                      # one draw per (n, c) plane


@pytest.mark.parametrize("name,shape", [("dropout1d", (3, 5, 7)), ("dropout2d", (2, 4, 3, 3)),
                                        ("dropout3d", (4, 2, 2, 2)), ("alpha_dropout", (4, 9)),
                                        ("feature_alpha_dropout", (3, 5, 4))])
def test_dropout_masks_match_torch_with_same_seed(torch, name, shape):
    a = normal(*shape, dtype=np.float32)
    for seed in (0, 11):
        cddp.manual_seed(seed)
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = getattr(F, name)(t(a), 0.3, training=True)
            ref = getattr(torch.nn.functional, name)(torch.tensor(a), 0.3, training=True)
        np.testing.assert_allclose(n(ours), ref.numpy(), rtol=1e-6, atol=1e-6)


def test_celu_zero_alpha_message_is_torchs():
    with pytest.raises(RuntimeError, match="^ZeroDivisionError: alpha cannot be 0 for CELU$"):
        cddp.nn.functional.celu(cddp.ones(2), 0.0)
