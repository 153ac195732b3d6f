"""Normalization layers (csrc/nn/norm/): batch norm, instance norm, group norm, normalize,
cosine_similarity — values, gradients and running stats against NumPy references and finite
differences, and against torch when it is installed."""
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(1234)


def normal(*shape, dtype=np.float64, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(dtype)


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)


# ---- NumPy references ---------------------------------------------------------------------------

def np_batch_norm(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axes), x64.var(axes)
    y = (x64 - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y, mean, x64.var(axes, ddof=1)


def np_group_norm(x, g, w, b, eps=1e-5):
    N, C = x.shape[:2]
    xg = x.astype(np.float64).reshape(N, g, -1)
    y = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)
    y = y.reshape(x.shape)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


SHAPES = [(4, 3), (5, 3, 7), (2, 3, 4, 5), (2, 2, 3, 2, 4), (3, 4, 20, 20), (6, 2, 3)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_training_matches_numpy(shape, dtype):
    C = shape[1]
    a, w, b = normal(*shape, dtype=dtype, scale=3, shift=5), normal(C, dtype=dtype), normal(C, dtype=dtype)
    rm, rv = normal(C, dtype=dtype), np.abs(normal(C, dtype=dtype)) + 0.5
    RM, RV = t(rm), t(rv)
    y = F.batch_norm(t(a), RM, RV, t(w), t(b), training=True, momentum=0.3)
    ref, mean, uvar = np_batch_norm(a, w, b)
    assert y.dtype == t(a).dtype
    np.testing.assert_allclose(n(y), ref, **tol(dtype))
    np.testing.assert_allclose(n(RM), 0.7 * rm + 0.3 * mean, **tol(dtype))
    np.testing.assert_allclose(n(RV), 0.7 * rv + 0.3 * uvar, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_eval_uses_running_stats(dtype):
    a, w, b = normal(4, 3, 5, dtype=dtype), normal(3, dtype=dtype), normal(3, dtype=dtype)
    rm, rv = normal(3, dtype=dtype), np.abs(normal(3, dtype=dtype)) + 0.5
    RM, RV = t(rm), t(rv)
    y = F.batch_norm(t(a), RM, RV, t(w), t(b), training=False, eps=1e-3)
    ref = (a - rm[:, None]) / np.sqrt(rv[:, None] + 1e-3) * w[:, None] + b[:, None]
    np.testing.assert_allclose(n(y), ref, **tol(dtype))
    np.testing.assert_array_equal(n(RM), rm)          # eval never moves the running stats
    np.testing.assert_array_equal(n(RV), rv)


def test_batch_norm_float32_stays_accurate_with_a_large_mean():
    # one pass around a sample of the channel: no cancellation when mean >> std
    a = normal(8, 2, 1000, dtype=np.float32, scale=1e-2, shift=1e4)
    y = F.batch_norm(t(a), None, None, training=True)
    ref, _, _ = np_batch_norm(a, None, None)
    np.testing.assert_allclose(n(y), ref, atol=2e-3)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradcheck(training):
    for shape in [(3, 2), (3, 2, 4), (2, 3, 2, 2), (4, 2, 17)]:
        C = shape[1]
        rm, rv = normal(C), np.abs(normal(C)) + 0.5

        def op(x, w, b):
            return F.batch_norm(x, t(rm), t(rv), w, b, training=training)
        gradcheck(op, normal(*shape, scale=2, shift=1), normal(C), normal(C), atol=1e-5, rtol=1e-4)


def test_batch_norm_gradcheck_without_affine():
    gradcheck(lambda x: F.batch_norm(x, None, None, training=True), normal(5, 3, 4), atol=1e-5)


def test_batch_norm_non_contiguous_input_and_frozen_weight():
    base = normal(6, 4, 10)
    x = t(base, True)
    xv = x.transpose(0, 2)[::2]                 # (5, 4, 6) non-contiguous view
    w = t(normal(4))                            # weight.requires_grad = False
    bias = t(normal(4), True)
    y = F.batch_norm(xv, None, None, w, bias, training=True)
    ref, _, _ = np_batch_norm(base.transpose(2, 1, 0)[::2], n(w), n(bias))
    np.testing.assert_allclose(n(y), ref, rtol=1e-10, atol=1e-12)
    y.sum().backward()
    assert w.grad is None
    np.testing.assert_allclose(n(bias.grad), np.full(4, 30.0))
    np.testing.assert_allclose(n(x.grad), 0, atol=1e-12)   # sum of normalized values is flat


def test_batch_norm_matches_torch_values_grads_and_stats(torch):
    for shape in SHAPES:
        for dtype in (np.float32, np.float64):
            for training in (True, False):
                C = shape[1]
                a, w, b = normal(*shape, dtype=dtype, scale=2, shift=1), normal(C, dtype=dtype), normal(C, dtype=dtype)
                rm, rv, g = normal(C, dtype=dtype), np.abs(normal(C, dtype=dtype)) + 0.5, normal(*shape, dtype=dtype)
                ours = [t(a, True), t(w, True), t(b, True), t(rm), t(rv)]
                ref = [torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True),
                       torch.tensor(b, requires_grad=True), torch.tensor(rm), torch.tensor(rv)]
                y = F.batch_norm(ours[0], ours[3], ours[4], ours[1], ours[2], training, 0.2, 1e-4)
                ty = torch.nn.functional.batch_norm(ref[0], ref[3], ref[4], ref[1], ref[2], training, 0.2, 1e-4)
                y.backward(t(g))
                ty.backward(torch.tensor(g))
                assert y.grad_fn is None or y.grad_fn.name() == type(ty.grad_fn).__name__
                k = tol(dtype)
                np.testing.assert_allclose(n(y), ty.detach().numpy(), **k)
                for o, r in zip(ours[:3], ref[:3]):
                    scale = max(1.0, np.abs(r.grad.numpy()).max())
                    np.testing.assert_allclose(n(o.grad) / scale, r.grad.numpy() / scale, **k)
                for o, r in zip(ours[3:], ref[3:]):
                    np.testing.assert_allclose(n(o), r.numpy(), **k)


# ---- modules: running stats, momentum, state dict ----------------------------------------------

@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm2d_running_stats_over_steps_numpy(momentum):
    bn = nn.BatchNorm2d(3, momentum=momentum).double()
    rm, rv = np.zeros(3), np.ones(3)
    for step in range(1, 5):
        a = normal(4, 3, 2, 5, scale=step, shift=step)
        bn(t(a))
        mean, uvar = a.mean((0, 2, 3)), a.var((0, 2, 3), ddof=1)
        f = momentum if momentum is not None else 1.0 / step
        rm, rv = (1 - f) * rm + f * mean, (1 - f) * rv + f * uvar
        np.testing.assert_allclose(n(bn.running_mean), rm, rtol=1e-12)
        np.testing.assert_allclose(n(bn.running_var), rv, rtol=1e-12)
        assert bn.num_batches_tracked.item() == step and bn.num_batches_tracked.dtype == cddp.int64
    bn.eval()
    a = normal(2, 3, 2, 2)
    ref = (a - rm[:, None, None]) / np.sqrt(rv[:, None, None] + 1e-5)
    np.testing.assert_allclose(n(bn(t(a))), ref, rtol=1e-10)
    assert bn.num_batches_tracked.item() == 4            # eval does not count


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (6, 4)), (nn.BatchNorm1d, (3, 4, 5)),
                                       (nn.BatchNorm2d, (2, 4, 3, 3)), (nn.BatchNorm3d, (2, 4, 2, 3, 2))])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_modules_match_torch_over_steps(torch, cls, shape, momentum):
    ours = cls(4, momentum=momentum)
    ref = getattr(torch.nn, cls.__name__)(4, momentum=momentum)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(normal(4, dtype=np.float32)))
    ours.load_state_dict({k: cddp.from_numpy(v.numpy().copy()) for k, v in ref.state_dict().items()})
    for step in range(3):
        a = normal(*shape, dtype=np.float32, scale=2, shift=step)
        y, ty = ours(t(a)), ref(torch.tensor(a))
        np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
        y.sum().backward()
        (ty.sum()).backward()
    for key, v in ref.state_dict().items():
        np.testing.assert_allclose(n(ours.state_dict()[key]), v.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n(ours.weight.grad), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    ours.eval()
    ref.eval()
    a = normal(*shape, dtype=np.float32)
    np.testing.assert_allclose(n(ours(t(a))), ref(torch.tensor(a)).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert repr(ours) == repr(ref)


def test_batchnorm_state_dict_keys_and_resets():
    bn = nn.BatchNorm2d(3)
    sd = bn.state_dict()
    assert list(sd) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert sd["num_batches_tracked"].dtype == cddp.int64 and sd["num_batches_tracked"].dim() == 0
    bn(t(normal(4, 3, 2, 2, dtype=np.float32, shift=3)))
    with cddp.no_grad():
        bn.weight.mul_(2)
    bn.reset_running_stats()
    assert n(bn.running_mean).tolist() == [0, 0, 0] and n(bn.running_var).tolist() == [1, 1, 1]
    assert bn.num_batches_tracked.item() == 0 and n(bn.weight).tolist() == [2, 2, 2]
    bn.reset_parameters()
    assert n(bn.weight).tolist() == [1, 1, 1]
    # an old checkpoint without num_batches_tracked loads (as torch: it counts from 0)
    old = {k: v for k, v in nn.BatchNorm2d(3).state_dict().items() if k != "num_batches_tracked"}
    bn.load_state_dict(old)
    assert [k for k in nn.BatchNorm2d(3, affine=False, track_running_stats=False).state_dict()] == []
    assert list(nn.BatchNorm1d(3, affine=False).state_dict()) == ["running_mean", "running_var",
                                                                 "num_batches_tracked"]
    assert list(nn.BatchNorm1d(3, bias=False).state_dict())[:2] == ["weight", "running_mean"]


def test_batchnorm_without_tracking_uses_batch_stats_in_eval():
    bn = nn.BatchNorm1d(3, track_running_stats=False).double().eval()
    a = normal(5, 3)
    ref, _, _ = np_batch_norm(a, np.ones(3), np.zeros(3))
    np.testing.assert_allclose(n(bn(t(a))), ref, rtol=1e-10)
    assert bn.running_mean is None and bn.num_batches_tracked is None


def test_batch_norm_errors():
    x = t(normal(4, 3, 5))
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        F.batch_norm(x, t(np.zeros(4)), t(np.ones(4)), training=True)
    with pytest.raises(RuntimeError, match="running_var should contain 3 elements not 4"):
        F.batch_norm(x, t(np.zeros(3)), t(np.ones(4)), training=True)
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 4"):
        F.batch_norm(x, None, None, t(np.ones(4)), training=True)
    with pytest.raises(RuntimeError, match="bias should contain 3 elements not 2"):
        F.batch_norm(x, None, None, None, t(np.ones(2)), training=True)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when training, got input size cddp.Size\(\[1, 3\]\)"):
        F.batch_norm(t(normal(1, 3)), None, None, training=True)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm2d(3)(t(normal(1, 3, 1, 1, dtype=np.float32)))
    with pytest.raises(RuntimeError, match="running_mean must be defined in evaluation mode"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(RuntimeError, match="mixed dtype"):
        F.batch_norm(x, t(np.zeros(3, np.float32)), t(np.ones(3, np.float32)), training=True)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.batch_norm(t(np.ones((2, 3), np.int64)), None, None, training=True)
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(3)(x)
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(t(normal(2, 3, 4, 5)))
    with pytest.raises(RuntimeError, match="running_mean should contain 4 elements not 3"):
        nn.BatchNorm1d(3)(t(normal(2, 4, dtype=np.float32)))
    with pytest.raises(TypeError, match="must be Tensor"):
        F.batch_norm(x, [0, 0, 0], None, training=True)


def test_batch_norm_empty_batch_and_large_inputs():
    RM = t(np.zeros(3))
    y = F.batch_norm(t(np.zeros((0, 3, 4))), RM, t(np.ones(3)), training=True)
    assert tuple(y.shape) == (0, 3, 4) and n(RM).tolist() == [0, 0, 0]
    # big enough for the GIL-free path, in both layouts (columns for S < 16, rows otherwise)
    for shape in [(40000, 2), (3, 2, 20000)]:
        a = normal(*shape, shift=2)
        x = t(a, True)
        y = F.batch_norm(x, None, None, training=True, eps=0.0)
        np.testing.assert_allclose(n(y), np_batch_norm(a, None, None, 0.0)[0], rtol=1e-9, atol=1e-10)
        (y * y).sum().backward()
        assert np.abs(n(x.grad)).max() < 1e-9        # eps = 0: sum of y^2 is M per channel


# ---- instance norm -----------------------------------------------------------------------------

def test_instance_norm_matches_numpy_and_updates_running_stats():
    a = normal(3, 2, 10, scale=2, shift=1)
    RM, RV = t(np.zeros(2)), t(np.ones(2))
    y = F.instance_norm(t(a), RM, RV, momentum=0.5)
    mean, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    np.testing.assert_allclose(n(y), (a - mean) / np.sqrt(var + 1e-5), rtol=1e-10)
    np.testing.assert_allclose(n(RM), 0.5 * a.mean(-1).mean(0), rtol=1e-12)
    np.testing.assert_allclose(n(RV), 0.5 + 0.5 * a.var(-1, ddof=1).mean(0), rtol=1e-12)
    gradcheck(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), normal(2, 3, 5),
              normal(3), normal(3), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cls,shape", [(nn.InstanceNorm1d, (3, 4, 6)), (nn.InstanceNorm1d, (4, 6)),
                                       (nn.InstanceNorm2d, (2, 4, 3, 5)), (nn.InstanceNorm3d, (2, 4, 2, 3, 2))])
@pytest.mark.parametrize("affine,track", [(False, False), (True, True)])
def test_instance_norm_modules_match_torch(torch, cls, shape, affine, track):
    ours = cls(4, affine=affine, track_running_stats=track).double()
    ref = getattr(torch.nn, cls.__name__)(4, affine=affine, track_running_stats=track).double()
    for step in range(2):
        a, g = normal(*shape, shift=step), normal(*shape)
        x, tx = t(a, True), torch.tensor(a, requires_grad=True)
        y, ty = ours(x), ref(tx)
        np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
        y.backward(t(g))
        ty.backward(torch.tensor(g))
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    for key, v in ref.state_dict().items():
        np.testing.assert_allclose(n(ours.state_dict()[key]), v.numpy(), rtol=1e-10)
    if affine:
        np.testing.assert_allclose(n(ours.weight.grad), ref.weight.grad.numpy(), rtol=1e-8)
        np.testing.assert_allclose(n(ours.bias.grad), ref.bias.grad.numpy(), rtol=1e-8)
    ours.eval()
    ref.eval()
    a = normal(*shape)
    np.testing.assert_allclose(n(ours(t(a))), ref(torch.tensor(a)).detach().numpy(), rtol=1e-10, atol=1e-12)
    assert repr(ours) == repr(ref)


def test_instance_norm_errors():
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 1D input\)"):
        nn.InstanceNorm1d(3)(t(normal(3)))
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features \(3\), but got: 4."):
        nn.InstanceNorm1d(3, affine=True)(t(normal(2, 4, 5, dtype=np.float32)))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(3)(t(normal(2, 4, 5, dtype=np.float32)))
    with pytest.raises(ValueError, match="Expected more than 1 spatial element when training"):
        F.instance_norm(t(normal(2, 3, 1)))
    with pytest.raises(RuntimeError, match="Expected running_mean and running_var to be defined"):
        F.instance_norm(t(normal(2, 3, 4)), use_input_stats=False)


# ---- group norm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,g", [((4, 6, 5), 3), ((8, 4), 2), ((2, 6, 4, 5), 6), ((2, 4, 20, 20), 1),
                                     ((3, 8, 2, 2), 4), ((2, 4, 2, 3, 2), 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_group_norm_matches_numpy(shape, g, dtype):
    C = shape[1]
    a, w, b = normal(*shape, dtype=dtype, scale=3, shift=2), normal(C, dtype=dtype), normal(C, dtype=dtype)
    y = F.group_norm(t(a), g, t(w), t(b))
    np.testing.assert_allclose(n(y), np_group_norm(a, g, w, b), **tol(dtype))


def test_group_norm_gradcheck():
    for shape, g in [((2, 4, 3), 2), ((3, 6), 3), ((2, 4, 2, 3), 1), ((2, 2, 17), 2)]:
        C = shape[1]
        gradcheck(lambda x, w, b: F.group_norm(x, g, w, b), normal(*shape, scale=2, shift=1),
                  normal(C), normal(C), atol=1e-5, rtol=1e-4)
    gradcheck(lambda x: F.group_norm(x, 2), normal(3, 4, 5), atol=1e-5)


def test_group_norm_matches_torch(torch):
    for shape, g in [((4, 6, 5), 3), ((2, 6, 4, 5), 2), ((3, 8, 2, 2), 8), ((5, 4), 2)]:
        for dtype in (np.float32, np.float64):
            C = shape[1]
            a, w, b, gy = normal(*shape, dtype=dtype), normal(C, dtype=dtype), normal(C, dtype=dtype), normal(*shape, dtype=dtype)
            base = t(np.ascontiguousarray(np.swapaxes(a, 0, 1)), True)
            x = base.transpose(0, 1)                          # non-contiguous input
            W, B = t(w, True), t(b, True)
            tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (a, w, b))
            y = nn.GroupNorm(g, C).to(x.dtype)
            with cddp.no_grad():
                y.weight.copy_(W)
                y.bias.copy_(B)
            out = F.group_norm(x, g, W, B, 1e-4)
            ref = torch.nn.functional.group_norm(tx, g, tw, tb, 1e-4)
            out.backward(t(gy))
            ref.backward(torch.tensor(gy))
            assert out.grad_fn is None or out.grad_fn.name() == "NativeGroupNormBackward0"
            k = tol(dtype)
            np.testing.assert_allclose(n(out), ref.detach().numpy(), **k)
            np.testing.assert_allclose(n(base.grad).swapaxes(0, 1), tx.grad.numpy(), rtol=k["rtol"], atol=1e-4 if dtype == np.float32 else 1e-9)
            np.testing.assert_allclose(n(W.grad), tw.grad.numpy(), **k)
            np.testing.assert_allclose(n(B.grad), tb.grad.numpy(), **k)
            assert repr(y) == repr(torch.nn.GroupNorm(g, C))


def test_group_norm_errors():
    x = t(normal(4, 3, 5))
    with pytest.raises(RuntimeError, match=r"Expected number of channels in input to be divisible by num_groups, but got input of shape \[4, 3, 5\] and num_groups=2"):
        F.group_norm(x, 2)
    with pytest.raises(RuntimeError, match=r"Expected weight to be a vector of size equal to the number of channels in input, but got weight of shape \[4\] and input of shape \[4, 3, 5\]"):
        F.group_norm(x, 3, t(np.ones(4)))
    with pytest.raises(ValueError, match=r"num_channels \(3\) must be divisible by num_groups \(2\)"):
        nn.GroupNorm(2, 3)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        F.group_norm(t(normal(1, 3, 1)), 3)
    with pytest.raises(RuntimeError, match="Expected at least 2 dimensions"):
        F.group_norm(t(normal(3)), 1)


# ---- normalize, cosine_similarity -----------------------------------------------------------------

def test_normalize_matches_numpy_and_gradcheck():
    a = normal(3, 4, 5)
    for p, dim in [(2.0, 1), (1.0, -1), (3.0, 0)]:
        ref = a / np.maximum((np.abs(a) ** p).sum(dim, keepdims=True) ** (1 / p), 1e-12)
        np.testing.assert_allclose(n(F.normalize(t(a), p, dim)), ref, rtol=1e-10)
    z = np.zeros((2, 3))
    np.testing.assert_array_equal(n(F.normalize(t(z))), z)          # eps keeps 0/0 away
    gradcheck(lambda x: F.normalize(x, dim=-1), normal(3, 4))
    out = cddp.empty(3, 4, 5, dtype=cddp.float64)
    assert F.normalize(t(a), out=out) is out


def test_cosine_similarity_matches_numpy_broadcasts_and_gradcheck():
    a, b = normal(4, 5), normal(1, 5)
    ref = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(n(F.cosine_similarity(t(a), t(b))), ref, rtol=1e-10)
    a3, b3 = normal(2, 3, 4), normal(3, 1)
    ref = (a3 * b3).sum(-2) / (np.linalg.norm(a3, axis=-2) * np.linalg.norm(np.broadcast_to(b3, a3.shape), axis=-2))
    np.testing.assert_allclose(n(F.cosine_similarity(t(a3), t(b3), dim=-2)), ref, rtol=1e-10)
    z = F.cosine_similarity(t(np.zeros((2, 3))), t(normal(2, 3)))
    np.testing.assert_array_equal(n(z), [0, 0])
    gradcheck(lambda x, y: F.cosine_similarity(x, y, dim=0), normal(4, 3), normal(4, 3))
    with pytest.raises(RuntimeError, match="expected common dtype to be floating point"):
        F.cosine_similarity(t(np.ones((2, 3), np.int64)), t(np.ones((2, 3), np.int64)))


def test_normalize_and_cosine_similarity_match_torch(torch):
    for dtype in (np.float32, np.float64):
        a, b = normal(3, 4, 2, dtype=dtype), normal(4, 1, dtype=dtype)
        b[1] = 0                                    # a zero row: the eps clamp path
        x, y = t(a, True), t(b, True)
        tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        out = F.cosine_similarity(x, y, 1, 1e-6) + F.normalize(x, 2.0, 1).sum(1)
        ref = torch.nn.functional.cosine_similarity(tx, ty, 1, 1e-6) + \
            torch.nn.functional.normalize(tx, 2.0, 1).sum(1)
        g = normal(*ref.shape, dtype=dtype)
        out.backward(t(g))
        ref.backward(torch.tensor(g))
        k = tol(dtype)
        np.testing.assert_allclose(n(out), ref.detach().numpy(), **k)
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), **k)
        np.testing.assert_allclose(n(y.grad), ty.grad.numpy(), rtol=k["rtol"], atol=1e-3 if dtype == np.float32 else 1e-9)


# ---- local response norm -------------------------------------------------------------------------

def np_lrn(x, size, alpha, beta, k):
    C = x.shape[1]
    sq = x * x
    div = np.zeros_like(x)
    for c in range(C):
        lo, hi = max(0, c - size // 2), min(C, c + (size - 1) // 2 + 1)
        div[:, c] = sq[:, lo:hi].sum(1)
    return x / (k + alpha * div / size) ** beta


@pytest.mark.parametrize("shape,size", [((2, 6, 5), 3), ((2, 7, 3, 4), 5), ((1, 4, 2, 2, 3), 2), ((2, 3, 4), 1)])
def test_local_response_norm_matches_numpy_and_gradcheck(shape, size):
    a = normal(*shape)
    m = nn.LocalResponseNorm(size, alpha=0.1, beta=0.6, k=1.5)
    np.testing.assert_allclose(n(m(t(a))), np_lrn(a, size, 0.1, 0.6, 1.5), rtol=1e-12)
    gradcheck(lambda x: F.local_response_norm(x, size, 0.1, 0.6, 1.5), a)
    with pytest.raises(ValueError, match=r"Expected 3D or higher dimensionality .*input \(got 2 dimensions\)"):
        F.local_response_norm(t(normal(2, 3)), 2)


def test_local_response_norm_matches_torch(torch):
    a, g = normal(2, 7, 3, 4, dtype=np.float32), normal(2, 7, 3, 4, dtype=np.float32)
    x, tx = t(a, True), torch.tensor(a, requires_grad=True)
    y, ty = nn.LocalResponseNorm(5)(x), torch.nn.LocalResponseNorm(5)(tx)
    y.backward(t(g))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert repr(nn.LocalResponseNorm(5)) == repr(torch.nn.LocalResponseNorm(5))
