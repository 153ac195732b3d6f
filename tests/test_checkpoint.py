"""torch.utils.checkpoint and torch.autograd.graph.saved_tensors_hooks.

Oracles: the same model without checkpointing (gradients must be bit-identical: the
recompute reproduces every value and the graph is the same), counts of how often the segment
runs, weak references proving activations are not kept, NumPy for hook round trips, and
torch's checkpoint on the same weights when torch is installed.
"""
import gc
import weakref

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from cddp.autograd.graph import save_on_cpu, saved_tensors_hooks
from cddp.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential
from conftest import n, t


def make_model(p=0.3):
    cddp.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Dropout(p), nn.Linear(16, 16),
                         nn.ReLU(), nn.Linear(16, 3))


def grads(model):
    return [None if q.grad is None else n(q.grad) for q in model.parameters()]


def reference_grads(x, seed=5, p=0.3):
    m = make_model(p)
    cddp.manual_seed(seed)
    m(x).pow(2).sum().backward()
    return grads(m)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_gradients_equal_the_plain_model_exactly_with_dropout(use_reentrant):
    x = cddp.randn(4, 5, requires_grad=True)
    want = reference_grads(x)
    x_grad = n(x.grad)
    x.grad = None
    m, calls = make_model(), [0]

    def segment(h):
        calls[0] += 1
        return m[3](m[2](m[1](m[0](h))))
    cddp.manual_seed(5)
    out = m[5](m[4](checkpoint(segment, x, use_reentrant=use_reentrant)))
    assert calls[0] == 1
    state_after_forward = n(cddp.get_rng_state())
    out.pow(2).sum().backward()
    assert calls[0] == 2                                   # one recompute
    np.testing.assert_array_equal(n(cddp.get_rng_state()), state_after_forward)
    for g, w in zip(grads(m), want):
        np.testing.assert_array_equal(g, w)                # dropout mask recomputed equal
    np.testing.assert_array_equal(n(x.grad), x_grad)


def test_without_preserve_rng_state_the_mask_differs():
    x = cddp.randn(8, 5)
    want = reference_grads(x, p=0.5)
    m = make_model(0.5)
    cddp.manual_seed(5)
    h = checkpoint(lambda v: m[3](m[2](m[1](m[0](v)))), x, use_reentrant=False,
                   preserve_rng_state=False)
    m[5](m[4](h)).pow(2).sum().backward()
    assert not all(np.array_equal(g, w) for g, w in zip(grads(m), want))


@pytest.mark.parametrize("segments", [1, 2, 3])
def test_checkpoint_sequential(segments):
    x = cddp.randn(4, 5)
    want = reference_grads(x)
    m = make_model()
    cddp.manual_seed(5)
    checkpoint_sequential(m, segments, x, use_reentrant=False).pow(2).sum().backward()
    for g, w in zip(grads(m), want):
        np.testing.assert_array_equal(g, w)


def test_parameters_get_gradients_when_no_input_requires_grad():
    x = cddp.randn(4, 5)                                    # raw data: no grad
    want = reference_grads(x)
    m = make_model()
    cddp.manual_seed(5)
    h = checkpoint(lambda v: m[3](m[2](m[1](m[0](v)))), x, use_reentrant=False)
    assert h.requires_grad
    m[5](m[4](h)).pow(2).sum().backward()
    for g, w in zip(grads(m), want):
        np.testing.assert_array_equal(g, w)
    m2 = make_model()                                       # reentrant: torch's warning
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        h = checkpoint(lambda v: m2[1](m2[0](v)), x, use_reentrant=True)
    assert not h.requires_grad


def test_activations_are_not_kept():
    arrays = []

    def segment(x):
        a = np.full((4, 5), 2.0, dtype=np.float32)
        arrays.append(weakref.ref(a))
        return (x * cddp.from_numpy(a)).sin()                # MulBackward saves the array's tensor
    x = cddp.randn(4, 5, requires_grad=True)
    plain = segment(x)
    assert arrays[0]() is not None                           # the plain graph keeps it
    out = checkpoint(segment, x, use_reentrant=False)
    gc.collect()
    assert arrays[1]() is None                               # the checkpointed one does not
    out.sum().backward()
    plain.sum().backward()
    np.testing.assert_allclose(n(x.grad), 2 * 2 * np.cos(2 * n(x)), rtol=1e-6)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_weights_shared_inside_and_outside_the_segment(use_reentrant):
    """The leaf accumulator is pending in the outer backward while the segment is
    differentiated (reentrant: a nested engine run)."""
    cddp.manual_seed(0)
    m = nn.Linear(4, 4)
    x = cddp.randn(3, 4, requires_grad=True)

    def run(ck):
        m.zero_grad()
        x.grad = None
        y = m(x)
        h = (checkpoint(lambda v: m(v).tanh(), y, use_reentrant=ck) if ck is not None
             else m(y).tanh())
        (h.pow(2).sum() + y.sum()).backward()
        return [n(m.weight.grad), n(m.bias.grad), n(x.grad)]
    for got, want in zip(run(use_reentrant), run(None)):
        np.testing.assert_array_equal(got, want)


def test_non_reentrant_kwargs_grad_retain_and_nesting():
    cddp.manual_seed(0)
    w = cddp.randn(3, 3, requires_grad=True)
    x = cddp.randn(2, 3, requires_grad=True)

    def f(v, scale=1.0):
        return (v.mm(w) * scale).tanh().mm(w)
    gx, gw = cddp.autograd.grad(f(x, scale=2.0).sum(), (x, w))
    out = checkpoint(f, x, use_reentrant=False, scale=2.0)
    cx, cw = cddp.autograd.grad(out.sum(), (x, w), retain_graph=True)
    np.testing.assert_array_equal(n(cx), n(gx))
    np.testing.assert_array_equal(n(cw), n(gw))
    out.sum().backward()                                      # the retained graph again
    np.testing.assert_array_equal(n(x.grad), n(gx))
    nested = checkpoint(lambda v: checkpoint(f, v, use_reentrant=False, scale=2.0).sin(), x,
                        use_reentrant=False)
    x.grad = None
    nested.sum().backward()
    x2 = x.detach().requires_grad_()
    f(x2, scale=2.0).sin().sum().backward()
    np.testing.assert_array_equal(n(x.grad), n(x2.grad))


def test_recompute_that_differs_is_an_error():
    calls = [0]

    def f(v):
        calls[0] += 1
        return (v * v).sum() if calls[0] == 1 else (v[:1] * v[:1]).sum()
    out = checkpoint(f, cddp.randn(3, requires_grad=True), use_reentrant=False)
    with pytest.raises(CheckpointError, match="Recomputed values for the following tensors "
                       "have different metadata"):
        out.backward()


def test_autograd_grad_through_a_checkpoint():
    # non-reentrant: autograd.grad works and writes no .grad (the parameters' stay None);
    # reentrant: its inner backward would write them, so it is refused with torch's message
    lin = nn.Linear(3, 2).double()
    x = cddp.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    (gx,) = cddp.autograd.grad(checkpoint(lin, x, use_reentrant=False).tanh().sum(), x)
    (want,) = cddp.autograd.grad(lin(x).tanh().sum(), x)
    np.testing.assert_allclose(n(gx), n(want), rtol=1e-12)
    assert lin.weight.grad is None
    with pytest.raises(RuntimeError, match="incompatible with .grad()"):
        cddp.autograd.grad(checkpoint(lin, x, use_reentrant=True).sum(), x)
    assert lin.weight.grad is None
    checkpoint(lin, x, use_reentrant=True).tanh().sum().backward()   # backward still works
    assert lin.weight.grad is not None


def test_use_reentrant_must_be_passed():
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        checkpoint(lambda v: v * 2, cddp.randn(2, requires_grad=True))
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda v, scale: v * scale, cddp.randn(2), use_reentrant=True, scale=2)


def test_against_torch(torch):
    """torch's checkpoint on the same weights gives the same gradients (float tolerance)."""
    import torch.utils.checkpoint as tck
    m = make_model(0.0)
    tm = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                             torch.nn.ReLU(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), m.parameters()):
            tp.copy_(torch.tensor(n(p)))
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    x, tx = t(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    checkpoint_sequential(m, 2, x, use_reentrant=False).pow(2).sum().backward()
    tck.checkpoint_sequential(tm, 2, tx, use_reentrant=False).pow(2).sum().backward()
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(n(p.grad), tp.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


# ---- saved_tensors_hooks ---------------------------------------------------------------

def test_saved_tensors_hooks_pack_and_unpack():
    packed, unpacked = [], []

    def pack(v):
        packed.append(n(v))
        return n(v) * 1                                     # a NumPy copy stands for it

    def unpack(arr):
        unpacked.append(arr.shape)
        return cddp.from_numpy(arr)
    a = np.array([0.5, 1.0, 2.0])
    x = t(a, requires_grad=True)
    with saved_tensors_hooks(pack, unpack):
        y = (x * x).exp()                                   # Mul saves x twice, Exp its output
    assert len(packed) == 3
    np.testing.assert_array_equal(packed[2], np.exp(a * a))
    y.sum().backward()
    assert len(unpacked) == 3
    np.testing.assert_allclose(n(x.grad), 2 * a * np.exp(a * a), rtol=1e-12)
    z = x * 2.0                                             # hooks are gone after the block
    assert len(packed) == 3 and z.requires_grad


def test_unpack_of_the_wrong_shape_or_type_is_refused():
    x = cddp.randn(3, requires_grad=True)
    with saved_tensors_hooks(lambda v: None, lambda p: cddp.zeros(4)):
        y = x.exp()
    with pytest.raises(RuntimeError, match=r"unpack_hook returned a tensor of shape \[4\]"):
        y.sum().backward()
    with saved_tensors_hooks(lambda v: None, lambda p: 7):
        y = x.exp()
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor"):
        y.sum().backward()


def test_hooks_apply_to_function_saved_tensors_and_save_on_cpu():
    class Cube(cddp.autograd.Function):
        @staticmethod
        def forward(ctx, v):
            ctx.save_for_backward(v)
            return v * v * v

        @staticmethod
        def backward(ctx, g):
            v, = ctx.saved_tensors
            return 3 * v * v * g
    seen = []
    x = cddp.randn(4, requires_grad=True)
    with saved_tensors_hooks(lambda v: seen.append(1) or v.clone(), lambda p: p):
        y = Cube.apply(x)
    assert len(seen) == 1
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), 3 * n(x) ** 2, rtol=1e-6)
    x.grad = None
    with save_on_cpu():
        y = (x.tanh() * x).sum()
    y.backward()
    np.testing.assert_allclose(n(x.grad), np.tanh(n(x)) + n(x) / np.cosh(n(x)) ** 2,
                               rtol=1e-5)
