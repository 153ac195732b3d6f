"""cross_entropy / nll_loss on float32 with class indices run nn/ce_rows.c's kernels (no
float64 copy; log-softmax rows saved). Their losses and input gradients equal the float64
path's (the same call on the input cast to float64) for every option — weights, ignore_index,
label smoothing, reductions, K-dimensional inputs, non-contiguous inputs, 1-D inputs — and
torch's where installed; an in-place change of the input after the forward does not disturb
the backward (the input is not what is saved)."""
import itertools

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F

rng = np.random.default_rng(0)


def _case(shape, C):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    t_shape = (shape[0],) + tuple(shape[2:]) if len(shape) >= 2 else ()
    y = rng.integers(0, C, t_shape)
    if y.size > 1:
        y.reshape(-1)[1] = -100 if y.size > 2 else y.reshape(-1)[1]
    return x, y


OPTIONS = list(itertools.product(["mean", "sum", "none"], [False, True], [0.0, 0.1]))


@pytest.mark.parametrize("shape", [(7, 11), (3, 5, 4, 2), (6,)])
@pytest.mark.parametrize("reduction,weighted,eps", OPTIONS)
def test_float32_rows_equal_the_float64_path(shape, reduction, weighted, eps):
    C = shape[1] if len(shape) >= 2 else shape[0]
    x, y = _case(shape, C)
    w = cddp.tensor(rng.random(C) + 0.5) if weighted else None
    out = {}
    for dt in (cddp.float32, cddp.float64):
        xt = cddp.tensor(x).to(dt).requires_grad_()
        loss = F.cross_entropy(xt, cddp.tensor(y), weight=None if w is None else w.to(dt),
                               reduction=reduction, label_smoothing=eps)
        loss.sum().backward()
        out[dt] = (loss.detach().double().numpy(), xt.grad.double().numpy())
    np.testing.assert_allclose(out[cddp.float32][0], out[cddp.float64][0], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out[cddp.float32][1], out[cddp.float64][1], rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_rows_equal_the_float64_path(reduction):
    x, y = _case((5, 9, 3), 9)
    res = []
    for dt in (cddp.float32, cddp.float64):
        xt = cddp.tensor(x).to(dt).requires_grad_()
        loss = F.nll_loss(F.log_softmax(xt, 1), cddp.tensor(y), reduction=reduction)
        loss.sum().backward()
        res.append((loss.detach().double().numpy(), xt.grad.double().numpy()))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-4, atol=1e-6)


def test_noncontiguous_nan_and_inplace_after_forward():
    x = cddp.tensor(rng.standard_normal((6, 4)).astype(np.float32)).t().contiguous().t()
    xt = cddp.tensor(rng.standard_normal((4, 6)).astype(np.float32)).t().requires_grad_()
    y = cddp.tensor([0, 1, 2, 3, 0, 1])
    a = F.cross_entropy(xt, y)
    b = F.cross_entropy(xt.detach().double(), y)
    assert a.item() == pytest.approx(b.item(), rel=1e-6)
    bad = x.clone()
    bad[2, 1] = float("nan")
    assert np.isnan(F.cross_entropy(bad, y, reduction="none").numpy()[2])
    z = cddp.randn(3, 5, requires_grad=True)
    h = z * 1.0
    loss = F.cross_entropy(h, cddp.tensor([1, 2, 3]))
    want = F.cross_entropy(h.detach().double(), cddp.tensor([1, 2, 3]))
    with cddp.no_grad():
        h.add_(100.0)                 # torch saves the log-softmax, not the input: still fine
    loss.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert z.grad is not None and abs(z.grad.sum().item()) < 1e-5    # rows of softmax - onehot


def test_large_vocabulary_matches_torch():
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((16, 50257)).astype(np.float32)
    y = rng.integers(0, 50257, 16)
    y[3] = -100
    for eps in (0.0, 0.1):
        ours = cddp.tensor(x, requires_grad=True)
        theirs = torch.tensor(x, requires_grad=True)
        lo = F.cross_entropy(ours, cddp.tensor(y), label_smoothing=eps)
        lt = torch.nn.functional.cross_entropy(theirs, torch.tensor(y), label_smoothing=eps)
        lo.backward()
        lt.backward()
        assert lo.item() == pytest.approx(lt.item(), rel=1e-5)
        # entries p - eps/V cancel to ~1e-8: the libraries' float32 exp (torch's Sleef, cddp's
        # own, which differs between AVX2 and AVX-512 builds) round them apart by ~1e-8; a
        # wrong smoothing share (eps/V/16 = 1.2e-7) is still far outside
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4,
                                   atol=2e-8)


@pytest.mark.parametrize("eps,weighted,leaf", [(0.0, False, True), (0.1, True, False),
                                               (0.2, False, False)])
def test_double_backward_equals_the_float64_path(eps, weighted, leaf):
    x, y = _case((4, 6, 3), 6)
    w = cddp.tensor(rng.random(6) + 0.5) if weighted else None
    res = []
    for dt in (cddp.float32, cddp.float64):
        base = cddp.tensor(x).to(dt).requires_grad_()
        xt = base if leaf else base * 2.0
        loss = F.cross_entropy(xt, cddp.tensor(y), weight=None if w is None else w.to(dt),
                               label_smoothing=eps)
        (g,) = cddp.autograd.grad(loss, base, create_graph=True)
        g.pow(2).sum().backward()            # a gradient penalty through the loss's backward
        res.append((g.detach().double().numpy(), base.grad.double().numpy()))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-3, atol=1e-6)
