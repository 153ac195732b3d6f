"""nn.Module machinery, layers, losses, init and clipping — against torch (when installed),
NumPy and finite differences."""
from collections import OrderedDict
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 3)
        self.register_buffer("running", cddp.zeros(3))
        self.register_buffer("scratch", cddp.ones(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


# ---- Module machinery ------------------------------------------------------------------------

def test_registration_and_traversal():
    net = Net()
    names = [k for k, _ in net.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [k for k, _ in net.named_buffers()] == ["running", "scratch"]
    # own tensors first, then children's (torch's order)
    assert list(net.state_dict().keys()) == ["running", "fc1.weight", "fc1.bias",
                                             "fc2.weight", "fc2.bias"]
    assert [k for k, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [k for k, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert isinstance(net.fc1.weight, nn.Parameter) and net.fc1.weight.requires_grad


def test_shared_parameters_listed_once():
    lin = nn.Linear(3, 3)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    assert [k for k, _ in seq.named_parameters()] == ["0.weight", "0.bias"]


def test_state_dict_keys_match_torch(torch):
    ours = Net()

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 8)
            self.act = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(8, 3)
            self.register_buffer("running", torch.zeros(3))
            self.register_buffer("scratch", torch.ones(2), persistent=False)

    assert list(ours.state_dict().keys()) == list(TNet().state_dict().keys())
    assert repr(ours.fc1) == repr(TNet().fc1)
    seq_ours = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    seq_t = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    assert repr(seq_ours) == repr(seq_t)


def test_load_state_dict_strict_errors_and_non_strict_result():
    net = Net()
    sd = net.state_dict()
    sd2 = OrderedDict((k, v) for k, v in sd.items() if k != "fc2.bias")
    sd2["extra.weight"] = cddp.zeros(1)
    with pytest.raises(RuntimeError) as e:
        Net().load_state_dict(sd2)
    msg = str(e.value)
    assert 'Missing key(s) in state_dict: "fc2.bias"' in msg
    assert 'Unexpected key(s) in state_dict: "extra.weight"' in msg
    res = Net().load_state_dict(sd2, strict=False)
    assert res.missing_keys == ["fc2.bias"] and res.unexpected_keys == ["extra.weight"]


def test_load_state_dict_size_mismatch():
    sd = Net().state_dict()
    sd["fc1.weight"] = cddp.zeros(5, 4)
    with pytest.raises(RuntimeError, match="size mismatch for fc1.weight"):
        Net().load_state_dict(sd)


def test_load_state_dict_takes_one_element_for_a_0_dim_entry():
    """torch's backward compatibility: a [1]-shaped checkpoint entry fills a 0-dim buffer
    (old checkpoints' num_batches_tracked; NumPy round trips); other shapes still refuse."""
    bn = cddp.nn.BatchNorm1d(3)
    sd = bn.state_dict()
    sd["num_batches_tracked"] = cddp.tensor([7])
    bn.load_state_dict(sd)
    assert bn.num_batches_tracked.dim() == 0 and int(bn.num_batches_tracked) == 7
    sd["num_batches_tracked"] = cddp.tensor([7, 8])
    with pytest.raises(RuntimeError, match="size mismatch for num_batches_tracked"):
        bn.load_state_dict(sd)


def test_load_state_dict_copies_values():
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        np.testing.assert_array_equal(n(va), n(vb))


def test_module_prefix_both_ways():
    net = Net()
    prefixed = OrderedDict(("module." + k, v) for k, v in net.state_dict().items())
    fresh = Net()
    res = fresh.load_state_dict(prefixed)
    assert res.missing_keys == [] and res.unexpected_keys == []
    np.testing.assert_array_equal(n(fresh.fc1.weight), n(net.fc1.weight))

    class Wrapper(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.module = m
    w = Wrapper(Net())
    w.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(n(w.module.fc2.weight), n(net.fc2.weight))
    # a partial match is not silently "fixed"
    bad = OrderedDict(("module." + k, v) for k, v in list(net.state_dict().items())[:2])
    with pytest.raises(RuntimeError, match="Missing key"):
        Net().load_state_dict(bad)


def test_train_eval_zero_grad_apply_requires_grad():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    net.eval()
    assert not net.training and not net[1].training
    net.train()
    assert net[1].training
    out = net[0](cddp.ones(1, 2)).sum()
    out.backward()
    assert net[0].weight.grad is not None
    net.zero_grad()
    assert net[0].weight.grad is None
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Dropout", "Sequential"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_setattr_rules():
    m = nn.Module()
    m.w = nn.Parameter(cddp.zeros(2))
    assert "w" in m._parameters
    with pytest.raises(TypeError, match="cannot assign"):
        m.w = cddp.zeros(2)
    m.register_buffer("b", cddp.zeros(1))
    m.b = cddp.ones(1)
    assert m._buffers["b"].item() == 1.0
    m.child = nn.Linear(1, 1)
    assert "child" in m._modules
    del m.child
    assert "child" not in m._modules
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        m.nope


def test_forward_hooks_and_removal():
    lin = nn.Linear(2, 2)
    calls = []
    h1 = lin.register_forward_pre_hook(lambda mod, args: calls.append("pre"))
    h2 = lin.register_forward_hook(lambda mod, args, out: out * 0)
    out = lin(cddp.ones(1, 2))
    assert calls == ["pre"] and float(out.abs().sum()) == 0.0
    h1.remove()
    h2.remove()
    with cddp.no_grad():
        lin.weight.fill_(1.0)
        lin.bias.fill_(0.0)
    assert float(lin(cddp.ones(1, 2)).sum()) == 4.0
    assert calls == ["pre"]


def test_module_to_dtype():
    net = Net().double()
    assert net.fc1.weight.dtype == cddp.float64
    out = net(cddp.ones(2, 4, dtype=cddp.float64))
    assert out.dtype == cddp.float64
    net.float()
    assert net.fc2.bias.dtype == cddp.float32


def test_containers():
    seq = nn.Sequential(nn.Linear(1, 2), nn.ReLU())
    seq.append(nn.Linear(2, 3))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and isinstance(seq[1:], nn.Sequential)
    assert [type(m).__name__ for m in seq] == ["Linear", "ReLU", "Linear"]
    ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    ml.append(nn.Sigmoid())
    assert len(ml) == 3 and len(list(nn.Sequential(*ml).children())) == 3
    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    assert "a" in md and len(list(md.parameters())) == 2
    od = nn.Sequential(OrderedDict([("first", nn.Linear(1, 1))]))
    assert list(od.state_dict().keys()) == ["first.weight", "first.bias"]


# ---- Linear ------------------------------------------------------------------------------------

def test_linear_default_init_bounds():
    lin = nn.Linear(50, 40)
    w = n(lin.weight)
    bound = 1 / math.sqrt(50)
    assert np.all(np.abs(w) <= bound + 1e-7) and w.std() > bound / 3
    assert np.all(np.abs(n(lin.bias)) <= bound + 1e-7)


@pytest.mark.parametrize("shape", [(5, 3), (3,), (2, 4, 3)])
def test_linear_matches_torch(torch, shape):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4, 3)).astype(np.float32)
    B = rng.standard_normal(4).astype(np.float32)
    X = rng.standard_normal(shape).astype(np.float32)
    lin = nn.Linear(3, 4)
    with cddp.no_grad():
        lin.weight.copy_(cddp.tensor(W))
        lin.bias.copy_(cddp.tensor(B))
    tl = torch.nn.Linear(3, 4)
    with torch.no_grad():
        tl.weight.copy_(torch.tensor(W))
        tl.bias.copy_(torch.tensor(B))
    x, tx = cddp.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    y, ty = lin(x), tl(tx)
    np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for a, b in [(x.grad, tx.grad), (lin.weight.grad, tl.weight.grad), (lin.bias.grad, tl.bias.grad)]:
        np.testing.assert_allclose(n(a), b.numpy(), rtol=1e-4, atol=1e-5)


def test_linear_gradcheck():
    rng = np.random.default_rng(1)
    gradcheck(lambda x, w, b: F.linear(x, w, b), rng.standard_normal((3, 4)),
              rng.standard_normal((2, 4)), rng.standard_normal(2))
    gradcheck(lambda x, w: F.linear(x, w), rng.standard_normal((2, 3, 4)),
              rng.standard_normal((5, 4)))


def test_linear_errors():
    lin = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        lin(cddp.ones(2, 4))
    with pytest.raises(RuntimeError, match="dtype"):
        lin(cddp.ones(2, 3, dtype=cddp.float64))
    with pytest.raises(TypeError):
        F.linear([1, 2, 3], lin.weight)


# ---- losses ------------------------------------------------------------------------------------

def _pair(torch, arr, rg=True):
    return cddp.tensor(arr, requires_grad=rg), torch.tensor(arr, requires_grad=rg)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_targets_match_torch(torch, reduction, smoothing, weighted):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((7, 5)).astype(np.float32)
    Y = rng.integers(0, 5, 7)
    Y[3] = -100
    Wt = rng.random(5).astype(np.float32) if weighted else None
    x, tx = _pair(torch, X)
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    out = nn.CrossEntropyLoss(weight=None if Wt is None else cddp.tensor(Wt), **kw)(x, cddp.tensor(Y))
    tout = torch.nn.CrossEntropyLoss(weight=None if Wt is None else torch.tensor(Wt), **kw)(tx, torch.tensor(Y))
    np.testing.assert_allclose(n(out), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(cddp.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert out.grad_fn.name() == tout.grad_fn.name()


def test_cross_entropy_probability_targets_match_torch(torch):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 4)).astype(np.float32)
    P = rng.random((6, 4)).astype(np.float32)
    P /= P.sum(1, keepdims=True)
    x, tx = _pair(torch, X)
    out = F.cross_entropy(x, cddp.tensor(P), label_smoothing=0.1)
    tout = torch.nn.functional.cross_entropy(tx, torch.tensor(P), label_smoothing=0.1)
    np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-5)
    out.backward()
    tout.backward()
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-4, atol=1e-7)
    # seed 002's pattern: (N, 1) logits and (N, 1) float targets
    z = cddp.zeros(4, 1, requires_grad=True)
    loss = F.cross_entropy(z, cddp.ones(4, 1))
    assert loss.item() == 0.0


def test_nll_mse_l1_bce_match_torch(torch):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((5, 3)).astype(np.float32)
    Y = rng.standard_normal((5, 3)).astype(np.float32)
    logp = np.log(np.exp(X) / np.exp(X).sum(1, keepdims=True)).astype(np.float32)
    cls = rng.integers(0, 3, 5)
    P = rng.random((5, 3)).astype(np.float32) * 0.98 + 0.01
    T = rng.random((5, 3)).astype(np.float32)
    cases = [
        (lambda m, a, b: m.nn.functional.nll_loss(a, m.tensor(cls)), logp, None),
        (lambda m, a, b: m.nn.functional.mse_loss(a, b), X, Y),
        (lambda m, a, b: m.nn.functional.l1_loss(a, b, reduction="sum"), X, Y),
        (lambda m, a, b: m.nn.functional.binary_cross_entropy(a, b), P, T),
        (lambda m, a, b: m.nn.functional.binary_cross_entropy_with_logits(
            a, b, pos_weight=m.tensor(np.array([1.0, 2.0, 0.5], np.float32))), X, T),
    ]
    for fn, A, B in cases:
        a, ta = _pair(torch, A)
        b, tb = (None, None) if B is None else _pair(torch, B, rg=False)
        out, tout = fn(cddp, a, b), fn(torch, ta, tb)
        np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-5, atol=1e-6)
        out.backward()
        tout.backward()
        np.testing.assert_allclose(n(a.grad), ta.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_losses_gradcheck_float64():
    rng = np.random.default_rng(5)
    cls = cddp.tensor(rng.integers(0, 4, 3))
    gradcheck(lambda x: F.cross_entropy(x, cls, label_smoothing=0.1), rng.standard_normal((3, 4)))
    gradcheck(lambda x, y: F.mse_loss(x, y), rng.standard_normal((2, 3)), rng.standard_normal((2, 3)))
    gradcheck(lambda x, y: F.binary_cross_entropy_with_logits(x, y),
              rng.standard_normal((4,)), rng.random(4))
    target = cddp.tensor(rng.random(4))
    gradcheck(lambda x: F.binary_cross_entropy(x, target), rng.random(4) * 0.8 + 0.1)


def test_loss_errors():
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(cddp.zeros(2, 3), cddp.tensor([0, 3]))
    with pytest.raises(ValueError, match="batch_size"):
        F.cross_entropy(cddp.zeros(2, 3), cddp.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(cddp.zeros(2), cddp.zeros(2), reduction="avg")
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(cddp.tensor([1.5]), cddp.tensor([1.0]))


# ---- dropout, activations, init ------------------------------------------------------------------

def test_dropout_train_and_eval():
    cddp.manual_seed(0)
    d = nn.Dropout(0.25)
    x = cddp.ones(20000, requires_grad=True)
    y = d(x)
    v = n(y)
    kept = v != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(v[kept], 1 / 0.75, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), v)          # grad = mask / (1 - p)
    d.eval()
    assert d(x) is x


def test_activation_modules_match_functions():
    x = cddp.tensor([[-1.0, 0.5, 2.0]])
    np.testing.assert_allclose(n(nn.ReLU()(x)), [[0, 0.5, 2]])
    np.testing.assert_allclose(n(nn.Tanh()(x)), np.tanh([[-1, 0.5, 2]]), rtol=1e-6)
    np.testing.assert_allclose(n(nn.Sigmoid()(x)), 1 / (1 + np.exp(-np.array([[-1, 0.5, 2]]))), rtol=1e-6)
    e = np.exp([-1, 0.5, 2])
    np.testing.assert_allclose(n(nn.Softmax(dim=1)(x)), [e / e.sum()], rtol=1e-6)
    np.testing.assert_allclose(n(nn.LogSoftmax(dim=1)(x)), [np.log(e / e.sum())], rtol=1e-6)
    assert n(nn.Flatten()(cddp.zeros(2, 3, 4))).shape == (2, 12)
    assert nn.Identity()(x) is x


def test_init_functions_statistics():
    cddp.manual_seed(1)
    w = cddp.empty(400, 300)
    nn.init.xavier_uniform_(w)
    a = math.sqrt(6 / 700)
    assert np.abs(n(w)).max() <= a + 1e-6
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(n(w).std() - math.sqrt(2 / 300)) < 0.005
    nn.init.xavier_normal_(w)
    assert abs(n(w).std() - math.sqrt(2 / 700)) < 0.003
    nn.init.constant_(w, 0.5)
    assert np.all(n(w) == 0.5)
    nn.init.zeros_(w)
    assert not n(w).any()
    nn.init.ones_(w)
    assert np.all(n(w) == 1)
    nn.init.normal_(w, 2.0, 0.1)
    assert abs(n(w).mean() - 2.0) < 0.01
    nn.init.uniform_(w, -2, -1)
    assert n(w).min() >= -2 and n(w).max() < -1
    with pytest.raises(ValueError, match="Fan in"):
        nn.init.xavier_uniform_(cddp.empty(3))


# ---- clipping ------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(torch, norm_type, max_norm):
    rng = np.random.default_rng(6)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4,), (2, 2)]]
    ours = [cddp.zeros(g.shape, requires_grad=True) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, tp, g in zip(ours, theirs, grads):
        p.grad = cddp.tensor(g)
        tp.grad = torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-5)
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(n(p.grad), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clip_grad_value_and_vector_roundtrip():
    p = nn.Parameter(cddp.zeros(4))
    p.grad = cddp.tensor([-3.0, -0.5, 0.5, 3.0])
    nn.utils.clip_grad_value_([p], 1.0)
    np.testing.assert_array_equal(n(p.grad), [-1, -0.5, 0.5, 1])
    net = Net()
    vec = nn.utils.parameters_to_vector(net.parameters())
    assert vec.numel() == sum(q.numel() for q in net.parameters())
    other = Net()
    nn.utils.vector_to_parameters(vec, other.parameters())
    for a, b in zip(net.parameters(), other.parameters()):
        np.testing.assert_array_equal(n(a), n(b))


@pytest.mark.parametrize("M,K,N", [(16, 64, 128), (200, 64, 128), (64, 300, 96)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_large_shapes_against_numpy(M, K, N, dtype):
    """Both forward strategies (transposed product + bias-carrying copy when the batch is
    narrower than the output, bias rows + beta=1 GEMM otherwise) against NumPy."""
    rng = np.random.default_rng(M + K + N)
    X = rng.standard_normal((M, K)).astype(dtype)
    W = rng.standard_normal((N, K)).astype(dtype)
    B = rng.standard_normal(N).astype(dtype)
    want = X @ W.T + B
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(n(F.linear(t(X), t(W), t(B))), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(n(F.linear(t(X), t(W))), X @ W.T, rtol=tol, atol=tol)
    Wt = np.asfortranarray(W)          # a weight with transposed strides
    np.testing.assert_allclose(n(F.linear(t(X), cddp.from_numpy(Wt), t(B))), want, rtol=tol, atol=tol)


def test_clip_grad_norm_nonfinite_message_names_the_order_as_torch():
    torch = pytest.importorskip("torch")
    msgs = []
    for lib in (torch, cddp):
        p = lib.nn.Parameter(lib.ones(3))
        p.grad = lib.tensor([1.0, float("inf"), 0.0])
        with pytest.raises(RuntimeError) as e:
            lib.nn.utils.clip_grad_norm_([p], 1.0, norm_type=2.0, error_if_nonfinite=True)
        msgs.append(str(e.value))
    assert msgs[1] == msgs[0] and "order 2.0 for" in msgs[1]
