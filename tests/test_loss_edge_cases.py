"""Loss and activation gradients a differential sweep against torch found wrong (each test
failed before its fix): BCEWithLogits' target gradient with pos_weight, BCE's target gradient
at p = 0, cross_entropy's probability targets (no gradient at all), cross_entropy /
nll_loss with every target ignored, NaN through relu and
huber / smooth_l1, hardtanh / relu6 on integer tensors.

Oracles: the losses' formulas differentiated by hand and central finite differences in float64;
torch where installed.
"""
import math

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F


def fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (f(hi) - f(lo)) / (2 * eps)
    return g


def test_bce_with_logits_pos_weight_target_gradient():
    x = np.array([0.5, -1.0, 2.0])
    t0 = np.array([0.3, 0.8, 0.1])
    pw = np.array([2.0, 3.0, 0.5])

    def loss(t, grad=False):
        tt = cddp.tensor(t, requires_grad=grad)
        out = F.binary_cross_entropy_with_logits(cddp.tensor(x), tt, pos_weight=cddp.tensor(pw),
                                                 reduction="sum")
        return out, tt

    out, tt = loss(t0, True)
    out.backward()
    np.testing.assert_allclose(tt.grad.tolist(), fd(lambda t: loss(t)[0].item(), t0),
                               rtol=1e-6, atol=1e-8)
    # by hand: d/dt of (1 - t) x + (1 + (pw - 1) t) softplus(-x)
    sp = np.log1p(np.exp(-x))
    np.testing.assert_allclose(tt.grad.tolist(), (pw - 1) * sp - x, rtol=1e-12)


@pytest.mark.parametrize("kw", [{}, {"weight": [0.5, 2.0, 1.0]},
                                {"label_smoothing": 0.2, "reduction": "sum"}])
def test_cross_entropy_probability_target_gets_its_gradient(kw):
    # soft targets with a history (a teacher's softmax not detached): d loss / d t_ic =
    # -(1 - eps) w_c log_softmax(x)_ic / N (mean); cddp gave the target no gradient
    x = np.array([[0.2, -1.0, 0.7], [1.5, 0.1, -0.3]])
    t0 = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    k = {a: cddp.tensor(b) if a == "weight" else b for a, b in kw.items()}

    def loss(t, grad=False):
        tt = cddp.tensor(t, requires_grad=grad)
        return F.cross_entropy(cddp.tensor(x), tt, **k), tt

    out, tt = loss(t0, True)
    out.backward()
    np.testing.assert_allclose(tt.grad.numpy(), fd(lambda t: loss(t)[0].item(), t0),
                               rtol=1e-6, atol=1e-8)
    lsm = x - np.log(np.exp(x).sum(1, keepdims=True))
    w = np.array(kw.get("weight", [1.0, 1.0, 1.0]))
    scale = 1.0 if kw.get("reduction") == "sum" else 1.0 / len(x)
    want = -(1 - kw.get("label_smoothing", 0.0)) * w * lsm * scale
    np.testing.assert_allclose(tt.grad.numpy(), want, rtol=1e-12)


def test_bce_target_gradient_is_not_clamped():
    p = cddp.tensor([0.0, 0.5], dtype=cddp.float64)
    t = cddp.tensor([1.0, 0.3], dtype=cddp.float64, requires_grad=True)
    F.binary_cross_entropy(p, t, reduction="sum").backward()
    g = t.grad.tolist()
    assert g[0] == math.inf                      # -(log 0 - log 1)
    assert g[1] == pytest.approx(0.0)            # -(log .5 - log .5)


@pytest.mark.parametrize("fn,kw", [
    ("cross_entropy", {}), ("cross_entropy", {"weight": [1.0, 2.0, 3.0]}),
    ("cross_entropy", {"label_smoothing": 0.1}), ("nll_loss", {}),
    ("nll_loss", {"weight": [1.0, 2.0, 3.0]})])
def test_every_target_ignored_gives_zero_gradient(fn, kw):
    kw = {k: cddp.tensor(v) if isinstance(v, list) else v for k, v in kw.items()}
    x = cddp.tensor([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0]], requires_grad=True)
    loss = getattr(F, fn)(x, cddp.tensor([1, 1]), ignore_index=1, **kw)
    assert math.isnan(loss.item())               # 0 / 0, as torch
    loss.backward()
    assert x.grad.tolist() == [[0.0] * 3, [0.0] * 3]


def test_partly_ignored_rows_still_get_their_gradient():
    x0 = np.array([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0]])

    def loss(x, grad=False):
        xt = cddp.tensor(x, requires_grad=grad)
        return F.cross_entropy(xt, cddp.tensor([2, 1]), ignore_index=1), xt

    out, xt = loss(x0, True)
    out.backward()
    np.testing.assert_allclose(xt.grad.tolist(), fd(lambda x: loss(x)[0].item(), x0),
                               rtol=1e-6, atol=1e-8)
    assert xt.grad.tolist()[1] == [0.0, 0.0, 0.0]


def test_relu_passes_gradient_at_nan():
    x = cddp.tensor([float("nan"), -1.0, 2.0], requires_grad=True)
    cddp.relu(x).sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("fn", ["huber_loss", "smooth_l1_loss"])
def test_nan_target_gives_nan_gradient(fn):
    a = cddp.tensor([1.0, 5.0], requires_grad=True)
    getattr(F, fn)(a, cddp.tensor([float("nan"), 0.0]), reduction="sum").backward()
    g = a.grad.tolist()
    assert math.isnan(g[0]) and g[1] == 1.0


def test_hardtanh_relu6_keep_integer_dtypes():
    y = F.hardtanh(cddp.tensor([-2, 0, 3]))
    assert y.dtype == cddp.int64 and y.tolist() == [-1, 0, 1]
    z = F.relu6(cddp.tensor([-2, 0, 9], dtype=cddp.int32))
    assert z.dtype == cddp.int32 and z.tolist() == [0, 0, 6]


def test_against_torch():
    torch = pytest.importorskip("torch")
    out = {}
    for L in (torch, cddp):
        r = []
        x = L.tensor([0.5, -1.0], dtype=L.float64)
        t = L.tensor([0.3, 0.8], dtype=L.float64, requires_grad=True)
        L.nn.functional.binary_cross_entropy_with_logits(
            x, t, pos_weight=L.tensor([2.0, 3.0], dtype=L.float64), reduction="sum").backward()
        r.append(t.grad.tolist())
        x = L.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
        L.nn.functional.cross_entropy(x, L.tensor([1]), ignore_index=1).backward()
        r.append(x.grad.tolist())
        x = L.tensor([float("nan")], requires_grad=True)
        L.relu(x).sum().backward()
        r.append(x.grad.tolist())
        r.append(L.nn.functional.hardtanh(L.tensor([-2, 0, 3])).tolist())
        out[L.__name__] = r
    np.testing.assert_allclose(out["cddp"][0], out["torch"][0], rtol=1e-12)
    assert out["cddp"][1:] == out["torch"][1:]
