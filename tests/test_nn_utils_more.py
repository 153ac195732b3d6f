"""torch.nn.utils: the hook-based weight_norm / spectral_norm, fuse_conv_bn / fuse_linear_bn,
get_total_norm / clip_grads_with_norm_, skip_init, stateless.functional_call and
torch.func.functional_call.

Oracles: NumPy (g * v / ||v||, norms, the unfused BatchNorm of cddp's own modules, the
linear map with swapped weights), and torch when installed (same seeds and inputs: names,
values and a few SGD steps).
"""
import warnings

import numpy as np
import pytest

import cddp
from cddp import nn
from conftest import n, t


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return fn(*a, **k)


# ---- hook-based weight_norm / spectral_norm --------------------------------------------------

def test_weight_norm_hook_numpy():
    m = nn.Linear(4, 3).double()
    W0 = n(m.weight)
    with pytest.warns(FutureWarning, match="deprecated"):
        nn.utils.weight_norm(m)
    assert sorted(dict(m.named_parameters())) == ["bias", "weight_g", "weight_v"]
    np.testing.assert_allclose(n(m.weight_g), np.linalg.norm(W0, axis=1, keepdims=True))
    x = np.random.default_rng(0).standard_normal((2, 4))
    with cddp.no_grad():
        m.weight_g.mul_(3.0)
    y = m(t(x))          # the pre-hook recomputes weight
    np.testing.assert_allclose(n(y), x @ (3 * W0).T + n(m.bias), rtol=1e-12)
    y.sum().backward()
    assert m.weight_g.grad is not None and m.weight_v.grad is not None
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"):
        _quiet(nn.utils.weight_norm, m)
    nn.utils.remove_weight_norm(m)
    assert sorted(dict(m.named_parameters())) == ["bias", "weight"]
    np.testing.assert_allclose(n(m.weight), 3 * W0, rtol=1e-12)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        nn.utils.remove_weight_norm(m)


def test_spectral_norm_hook_numpy():
    cddp.manual_seed(0)
    m = nn.Linear(5, 4).double()
    W = n(m.weight)
    nn.utils.spectral_norm(m, n_power_iterations=5)
    assert list(m.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    x = t(np.zeros((1, 5)))
    for _ in range(10):
        m(x)
    sigma = np.linalg.svd(W, compute_uv=False)[0]
    np.testing.assert_allclose(n(m.weight), W / sigma, rtol=1e-8)
    m.eval()
    u = n(m.weight_u)
    m(x)
    np.testing.assert_array_equal(n(m.weight_u), u)
    nn.utils.remove_spectral_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(n(m.weight), W / sigma, rtol=1e-8)


@pytest.mark.parametrize("which", ["weight_norm", "spectral_norm"])
def test_hook_based_against_torch(which):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    a = torch.nn.Conv1d(3, 4, 3).double()
    cddp.manual_seed(0)
    b = nn.Conv1d(3, 4, 3).double()
    _quiet(getattr(torch.nn.utils, which), a)
    _quiet(getattr(nn.utils, which), b)
    assert list(a.state_dict()) == list(b.state_dict())
    for k, v in a.state_dict().items():
        np.testing.assert_allclose(n(b.state_dict()[k]), v.numpy(), atol=1e-12, err_msg=k)
    x = np.random.default_rng(0).standard_normal((2, 3, 8))
    oa = torch.optim.SGD(a.parameters(), lr=0.05)
    ob = cddp.optim.SGD(b.parameters(), lr=0.05)
    for _ in range(3):
        for m, opt, lib in ((a, oa, torch), (b, ob, cddp)):
            opt.zero_grad()
            (m(lib.from_numpy(x)) ** 2).sum().backward()
            opt.step()
    for k, v in a.state_dict().items():
        np.testing.assert_allclose(n(b.state_dict()[k]), v.numpy(), atol=1e-10, err_msg=k)
    # a torch checkpoint loads
    cddp.manual_seed(1)
    c = nn.Conv1d(3, 4, 3).double()
    _quiet(getattr(nn.utils, which), c)
    c.load_state_dict({k: cddp.from_numpy(v.numpy().copy()) for k, v in a.state_dict().items()})
    a.eval()
    c.eval()
    np.testing.assert_allclose(n(c(cddp.from_numpy(x))), a(torch.from_numpy(x)).detach().numpy(),
                               atol=1e-10)


# ---- fusion ----------------------------------------------------------------------------------

def _trained_bn(bn, shape):
    bn.train()
    rng = np.random.default_rng(3)
    for _ in range(3):
        bn(t(rng.standard_normal(shape) * 2 + 1))
    with cddp.no_grad():
        bn.weight.copy_(t(rng.standard_normal(bn.num_features)))
        bn.bias.copy_(t(rng.standard_normal(bn.num_features)))
    return bn.eval()


@pytest.mark.parametrize("bias", [True, False])
def test_fuse_conv_bn_eval(bias):
    conv = nn.Conv2d(2, 3, 3, bias=bias).double().eval()
    bn = _trained_bn(nn.BatchNorm2d(3).double(), (4, 3, 5, 5))
    fused = nn.utils.fuse_conv_bn_eval(conv, bn)
    assert isinstance(fused.weight, nn.Parameter) and fused.bias is not None
    x = t(np.random.default_rng(0).standard_normal((2, 2, 6, 6)))
    np.testing.assert_allclose(n(fused(x)), n(bn(conv(x))), atol=1e-12)
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        nn.utils.fuse_conv_bn_eval(conv.train(), bn)


def test_fuse_conv_transpose_bn_eval():
    conv = nn.ConvTranspose2d(2, 3, 3).double().eval()
    bn = _trained_bn(nn.BatchNorm2d(3).double(), (4, 3, 5, 5))
    fused = nn.utils.fuse_conv_bn_eval(conv, bn, transpose=True)
    x = t(np.random.default_rng(0).standard_normal((2, 2, 4, 4)))
    np.testing.assert_allclose(n(fused(x)), n(bn(conv(x))), atol=1e-12)


def test_fuse_linear_bn_eval():
    lin = nn.Linear(4, 3).double().eval()
    bn = _trained_bn(nn.BatchNorm1d(3).double(), (8, 3))
    fused = nn.utils.fuse_linear_bn_eval(lin, bn)
    x = t(np.random.default_rng(0).standard_normal((5, 4)))
    np.testing.assert_allclose(n(fused(x)), n(bn(lin(x))), atol=1e-12)
    with pytest.raises(AssertionError, match="To fuse"):
        nn.utils.fuse_linear_bn_eval(lin, _trained_bn(nn.BatchNorm1d(2).double(), (4, 2)))


def test_fuse_weights_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    rm, rv = rng.standard_normal(3), rng.random(3) + 0.5
    bw, bb = rng.standard_normal(3), rng.standard_normal(3)
    tw = torch.nn.utils.fuse_conv_bn_weights(*(torch.from_numpy(a) for a in (w, b, rm, rv)),
                                             1e-5, torch.from_numpy(bw), torch.from_numpy(bb))
    cw = nn.utils.fuse_conv_bn_weights(*(t(a) for a in (w, b, rm, rv)), 1e-5, t(bw), t(bb))
    for x, y in zip(cw, tw):
        np.testing.assert_allclose(n(x), y.detach().numpy(), rtol=1e-14)
    tl = torch.nn.utils.fuse_linear_bn_weights(torch.from_numpy(w[:, :, 0, 0]), None,
                                               *(torch.from_numpy(a) for a in (rm, rv)), 1e-5,
                                               torch.from_numpy(bw), torch.from_numpy(bb))
    cl = nn.utils.fuse_linear_bn_weights(t(w[:, :, 0, 0]), None, t(rm), t(rv), 1e-5, t(bw),
                                         t(bb))
    for x, y in zip(cl, tl):
        np.testing.assert_allclose(n(x), y.detach().numpy(), rtol=1e-14)


# ---- get_total_norm / clip_grads_with_norm_ --------------------------------------------------

@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
def test_total_norm_and_clip(norm_type):
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal(s) for s in [(3, 4), (5,), (2, 2, 2)]]
    flat = np.concatenate([g.ravel() for g in gs])
    want = np.abs(flat).max() if norm_type == float("inf") else \
        (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.utils.get_total_norm([t(g) for g in gs], norm_type)
    np.testing.assert_allclose(float(total), want, rtol=1e-12)
    ps = [t(np.zeros_like(g), requires_grad=True) for g in gs]
    for p, g in zip(ps, gs):
        p.grad = t(g)
    nn.utils.clip_grads_with_norm_(ps, 1.0, total)
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(n(p.grad), g * min(1.0, 1.0 / (want + 1e-6)), rtol=1e-12)
    # max_norm above the norm leaves the gradients as they are
    nn.utils.clip_grads_with_norm_(ps[0], 1e9, total)
    np.testing.assert_allclose(n(ps[0].grad), gs[0] / (want + 1e-6), rtol=1e-12)
    assert float(nn.utils.get_total_norm([])) == 0.0


def test_total_norm_nonfinite_and_torch():
    with pytest.raises(RuntimeError, match="is non-finite"):
        nn.utils.get_total_norm([t([1.0, float("inf")])], error_if_nonfinite=True)
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    gs = [rng.standard_normal(s).astype(np.float32) for s in [(7, 3), (11,)]]
    a = torch.nn.utils.get_total_norm([torch.from_numpy(g) for g in gs])
    b = nn.utils.get_total_norm([t(g) for g in gs])
    np.testing.assert_allclose(float(b), float(a), rtol=1e-6)


# ---- skip_init -------------------------------------------------------------------------------

def test_skip_init_leaves_rng_alone():
    cddp.manual_seed(5)
    m = nn.utils.skip_init(nn.Linear, 4, 3, bias=False)
    after = n(cddp.randn(3))
    cddp.manual_seed(5)
    np.testing.assert_array_equal(after, n(cddp.randn(3)))
    assert tuple(m.weight.shape) == (3, 4) and m.bias is None
    with pytest.raises(RuntimeError, match="Expected a Module"):
        nn.utils.skip_init(int)

    class NoDevice(nn.Module):
        def __init__(self, k):
            super().__init__()

    with pytest.raises(RuntimeError, match="support a 'device' arg"):
        nn.utils.skip_init(NoDevice, 1)


# ---- functional_call -------------------------------------------------------------------------

class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3, bias=False).double()
        self.b = nn.Linear(3, 3, bias=False).double()
        self.b.weight = self.a.weight
        self.register_buffer("shift", cddp.zeros(3, dtype=cddp.float64))

    def forward(self, x):
        return self.b(self.a(x)) + self.shift


def test_functional_call_numpy():
    m = Tied()
    W0 = n(m.a.weight)
    rng = np.random.default_rng(0)
    x, W, s = rng.standard_normal((2, 3)), rng.standard_normal((3, 3)), rng.standard_normal(3)
    Wt = t(W, requires_grad=True)
    y = cddp.func.functional_call(m, {"a.weight": Wt, "shift": t(s)}, (t(x),))
    np.testing.assert_allclose(n(y), x @ W.T @ W.T + s, rtol=1e-12)     # b tied: W too
    y.sum().backward()
    assert Wt.grad is not None and m.a.weight.grad is None
    # the module's own tensors are back
    assert m.b.weight is m.a.weight and isinstance(m.a.weight, nn.Parameter)
    np.testing.assert_array_equal(n(m.a.weight), W0)
    assert float(m.shift.abs().sum()) == 0.0
    y2 = cddp.func.functional_call(m, {"a.weight": Wt}, t(x), tie_weights=False)
    np.testing.assert_allclose(n(y2), x @ W.T @ W0.T, rtol=1e-12)
    # a sequence of dicts; strict
    y3 = cddp.func.functional_call(m, ({"a.weight": Wt}, {"shift": t(s)}), (t(x),))
    np.testing.assert_allclose(n(y3), n(y), rtol=1e-12)
    with pytest.raises(RuntimeError, match="Missing key\\(s\\): 'shift'"):
        cddp.func.functional_call(m, {"a.weight": Wt, "b.weight": Wt}, (t(x),), strict=True)
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        cddp.func.functional_call(m, ({"shift": t(s)}, {"shift": t(s)}), (t(x),))
    with pytest.raises(ValueError, match="which are tied"):
        cddp.func.functional_call(m, {"a.weight": Wt, "b.weight": t(W)}, (t(x),))
    with pytest.warns(FutureWarning, match="deprecated"):
        y4 = nn.utils.stateless.functional_call(m, {"a.weight": Wt}, (t(x),))
    np.testing.assert_allclose(n(y4), x @ W.T @ W.T, rtol=1e-12)


def test_functional_call_restores_after_error():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            raise ValueError("boom")

    m = Boom()
    w = m.lin.weight
    with pytest.raises(ValueError, match="boom"):
        cddp.func.functional_call(m, {"lin.weight": cddp.zeros(2, 2)}, (cddp.zeros(1, 2),))
    assert m.lin.weight is w


def test_functional_call_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3))
    params = {"0.weight": rng.standard_normal((5, 3)), "0.bias": rng.standard_normal(5),
              "2.weight": rng.standard_normal((2, 5)), "2.bias": rng.standard_normal(2)}
    outs = []
    for lib in (torch, cddp):
        m = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2)).double()
        p = {k: lib.from_numpy(v.copy()).requires_grad_() for k, v in params.items()}
        y = lib.func.functional_call(m, p, (lib.from_numpy(x),))
        (y ** 2).sum().backward()
        outs.append([y.detach().numpy()] + [p[k].grad.numpy() for k in params])
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=1e-12)
