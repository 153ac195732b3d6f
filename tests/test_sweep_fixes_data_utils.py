"""Fixes from the differential sweep of nn.utils, linalg.householder_product, DataLoader,
default_collate, containers and optimizers: each checked against a torch-free oracle (NumPy,
closed forms, values recorded from torch 2.13) and, when installed, against torch itself."""
import math
import random
import time
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import cddp
from cddp.utils.data import DataLoader, default_collate


def _np_householder_product(A, tau):
    """The first n columns of H_1 ... H_k, written out with NumPy."""
    m, n = A.shape
    Q = np.eye(m)
    for i in range(len(tau)):
        v = np.zeros(m)
        v[i] = 1.0
        v[i + 1:] = A[i + 1:, i]
        Q = Q @ (np.eye(m) - tau[i] * np.outer(v, v))
    return Q[:, :n]


def _qr_q(W):
    """Q of W = QR with R's diagonal positive (W tall)."""
    q, r = np.linalg.qr(W)
    return q * np.sign(np.diag(r))


# ---- 1. orthogonal(householder) and linalg.householder_product -------------------------------

def test_householder_product_matches_numpy_and_geqrf_gives_qr():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 3))
    tau = rng.standard_normal(2)
    out = cddp.linalg.householder_product(cddp.tensor(A), cddp.tensor(tau))
    np.testing.assert_allclose(out.numpy(), _np_householder_product(A, tau), atol=1e-12)
    a, t = cddp.geqrf(cddp.tensor(A))
    Q = cddp.linalg.householder_product(a, t).numpy()
    np.testing.assert_allclose(np.abs(Q), np.abs(np.linalg.qr(A)[0]), atol=1e-12)
    np.testing.assert_allclose(Q @ np.triu(a.numpy())[:3], A, atol=1e-12)
    with pytest.raises(RuntimeError, match="greater than or equal to tau"):
        cddp.linalg.householder_product(cddp.tensor(A), cddp.tensor(rng.standard_normal(4)))


def test_householder_product_gradients_vs_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    A, tau = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 3))
    w = rng.standard_normal((2, 4, 3))
    cA, ct = cddp.tensor(A, requires_grad=True), cddp.tensor(tau, requires_grad=True)
    (cddp.linalg.householder_product(cA, ct) * cddp.tensor(w)).sum().backward()
    tA, tt = torch.tensor(A, requires_grad=True), torch.tensor(tau, requires_grad=True)
    (torch.linalg.householder_product(tA, tt) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(cA.grad.numpy(), tA.grad.numpy(), atol=1e-9)
    np.testing.assert_allclose(ct.grad.numpy(), tt.grad.numpy(), atol=1e-9)


@pytest.mark.parametrize("shape,kwargs", [
    ((3, 4), dict(orthogonal_map="householder", use_trivialization=False)),
    ((4, 3), dict(use_trivialization=False)),              # householder: the non-square default
    ((3, 3), dict(orthogonal_map="householder", use_trivialization=False)),
    ((3, 4), dict(orthogonal_map="householder")),
])
def test_orthogonal_householder_is_orthonormal(shape, kwargs):
    from cddp.nn.utils.parametrizations import orthogonal
    cddp.manual_seed(0)
    W0 = cddp.nn.Linear(*shape).weight.detach().numpy().astype(np.float64)
    cddp.manual_seed(0)
    W = orthogonal(cddp.nn.Linear(*shape), **kwargs).weight.detach().numpy()
    tall = W if W.shape[0] >= W.shape[1] else W.T
    np.testing.assert_allclose(tall.T @ tall, np.eye(tall.shape[1]), atol=1e-5)
    if not kwargs.get("use_trivialization", True):     # the weight's own QR factor, as torch
        Q = _qr_q(W0 if W0.shape[0] >= W0.shape[1] else W0.T)
        np.testing.assert_allclose(tall, Q, atol=1e-5)


def test_orthogonal_householder_vs_torch():
    torch = pytest.importorskip("torch")
    from cddp.nn.utils.parametrizations import orthogonal
    for shape in [(3, 4), (4, 3), (3, 3)]:
        cddp.manual_seed(0)
        torch.manual_seed(0)
        c = orthogonal(cddp.nn.Linear(*shape), orthogonal_map="householder",
                       use_trivialization=False)
        t = torch.nn.utils.parametrizations.orthogonal(
            torch.nn.Linear(*shape), orthogonal_map="householder", use_trivialization=False)
        np.testing.assert_allclose(c.weight.detach().numpy(), t.weight.detach().numpy(),
                                   atol=1e-5)


# ---- 2, 7. clip_grad_norm_ / clip_grad_value_ ------------------------------------------------

def _params(grads, lib=cddp, dtypes=None):
    ps = []
    for i, g in enumerate(grads):
        dt = dtypes[i] if dtypes else lib.float32
        p = lib.zeros(len(g), dtype=dt, requires_grad=True)
        p.grad = lib.tensor(g, dtype=dt)
        ps.append(p)
    return ps


def _np_norm(g, p):
    a = np.abs(np.asarray(g, np.float64))
    if p == math.inf:
        return a.max()
    if p == -math.inf:
        return a.min()
    if p == 0:
        return float((a != 0).sum())
    with np.errstate(divide="ignore"):      # 0 ** -1 = inf, and inf ** -1 = 0, as torch
        return (a ** p).sum() ** (1 / p)


def _np_total_norm(grads, p):
    """torch's total: the p-norm of the per-tensor p-norms (for p = 0: how many tensors
    have a nonzero element, not how many elements are nonzero)."""
    return _np_norm([_np_norm(g, p) for g in grads], p)


@pytest.mark.parametrize("norm_type", [-math.inf, 0, -1, 1, 2, math.inf])
def test_clip_grad_norm_orders(norm_type):
    grads = [[0.5, -2.0, 3.0], [0.0, 1.0]]
    ps = _params(grads)
    total = cddp.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=norm_type)
    expect = _np_total_norm(grads, norm_type)
    assert total.item() == pytest.approx(expect, rel=1e-6)
    coef = min(1.0 / (expect + 1e-6), 1.0)
    for p, g in zip(ps, grads):
        np.testing.assert_allclose(p.grad.numpy(), np.float32(g) * np.float32(coef), rtol=1e-6)


def test_clip_grad_norm_neg_inf_leaves_grads():
    (p,) = _params([[0.5, -2.0, 3.0]])
    assert cddp.nn.utils.clip_grad_norm_([p], 1.0, norm_type=-float("inf")).item() == 0.5
    assert p.grad.tolist() == [0.5, -2.0, 3.0]


@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0])
def test_clip_grad_norm_nan_makes_grads_nan(norm_type):
    ps = _params([[0.5, math.nan, 3.0], [1.0]])
    assert math.isnan(cddp.nn.utils.clip_grad_norm_(ps, 1.0, norm_type).item())
    assert all(np.isnan(p.grad.numpy()).all() for p in ps)
    ps = _params([[0.5, math.nan, 3.0]])
    with pytest.raises(RuntimeError, match="non-finite"):
        cddp.nn.utils.clip_grad_norm_(ps, 1.0, norm_type, error_if_nonfinite=True)


@pytest.mark.parametrize("first", ["float32", "float64"])
def test_clip_grad_norm_mixed_dtypes_total_is_float64(first):
    other = "float64" if first == "float32" else "float32"
    dts = [getattr(cddp, first), getattr(cddp, other)]
    ps = _params([[0.5, -2.0, 3.0], [1.0, 2.0]], dtypes=dts)
    total = cddp.nn.utils.clip_grad_norm_(ps, 1.0)
    assert total.dtype == cddp.float64
    assert total.item() == pytest.approx(math.sqrt(0.25 + 4 + 9 + 1 + 4), rel=1e-7)


def test_clip_grad_norm_vs_torch():
    torch = pytest.importorskip("torch")
    cases = [([[0.5, -2, 3]], -math.inf), ([[0.5, 0, 3], [0, 1.0]], 0), ([[0.5, -2, 3]], -2),
             ([[0.5, math.nan, 3]], 2), ([[0.5, math.inf, 3]], 2), ([[0.5, -2, 3]], 1)]
    for grads, nt in cases:
        c, t = _params(grads), _params(grads, torch, [torch.float32] * len(grads))
        ct = cddp.nn.utils.clip_grad_norm_(c, 1.0, nt)
        tt = torch.nn.utils.clip_grad_norm_(t, 1.0, nt)
        np.testing.assert_allclose(ct.item(), tt.item(), rtol=1e-6)
        for a, b in zip(c, t):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6)
    for dts in [("float32", "float64"), ("float64", "float32")]:
        c = _params([[0.5, -2, 3], [1.0, 2.0]], dtypes=[getattr(cddp, d) for d in dts])
        t = _params([[0.5, -2, 3], [1.0, 2.0]], torch, [getattr(torch, d) for d in dts])
        ct, tt = cddp.nn.utils.clip_grad_norm_(c, 1.0), torch.nn.utils.clip_grad_norm_(t, 1.0)
        assert str(ct.dtype)[5:] == str(tt.dtype)[6:]
        assert ct.item() == pytest.approx(tt.item(), rel=1e-12)


def test_clip_grad_value_negative_clamps_to_minus_clip():
    (p,) = _params([[0.5, -2.0, 3.0, math.nan]])
    cddp.nn.utils.clip_grad_value_([p], -1.0)
    np.testing.assert_array_equal(p.grad.numpy(), [-1.0, -1.0, -1.0, np.nan])
    (p,) = _params([[0.5, -2.0, 3.0]])
    cddp.nn.utils.clip_grad_value_(p, 1.0)
    assert p.grad.tolist() == [0.5, -1.0, 1.0]
    torch = pytest.importorskip("torch")
    (t,) = _params([[0.5, -2.0, 3.0, math.nan]], torch, [torch.float32])
    torch.nn.utils.clip_grad_value_([t], -1.0)
    np.testing.assert_array_equal(t.grad.numpy(), [-1.0, -1.0, -1.0, np.nan])


# ---- 3. default_collate of Python / NumPy numbers ---------------------------------------------

_COLLATE = [([1, 2.5], [1.0, 2.5], "float32"), ([2.5, 1], [2.5, 1.0], "float64"),
            ([1, 2], [1, 2], "int64"), ([True, 2], [1, 2], "int64"),
            ([True, False], [True, False], "bool"), ([1, 3.0], [1.0, 3.0], "float32"),
            ([np.int64(1), 2.5], [1.0, 2.5], "float32"),
            ([np.float64(1), 2.5], [1.0, 2.5], "float64"),
            ([np.float32(1), np.float32(2)], [1.0, 2.0], "float32")]


@pytest.mark.parametrize("batch,values,dtype", _COLLATE)
def test_default_collate_numbers(batch, values, dtype):
    out = default_collate(batch)        # expected: torch 2.13's results
    assert out.dtype == getattr(cddp, dtype)
    assert out.tolist() == values
    assert default_collate([{"a": 1}, {"a": 2.5}])["a"].dtype == cddp.float32


def test_default_collate_numbers_vs_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate
    for batch, _, _ in _COLLATE:
        c, t = default_collate(batch), torch_collate(batch)
        assert str(c.dtype)[5:] == str(t.dtype)[6:] and c.tolist() == t.tolist()


# ---- 4-6. DataLoader: worker seeding, ordered errors, len(iter) -------------------------------

class _RandomDataset:
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return [random.random(), float(np.random.rand())]


# torch 2.13, torch.manual_seed(0), DataLoader(_RandomDataset(), batch_size=None,
# num_workers=2): worker w draws from random.seed(base + w) and NumPy seeded with
# _generate_state(base, w); base = 900450186894289455
_TORCH_SEED0 = [(0.21315340548154382, 0.8371640508861415),
                (0.7733861492043289, 0.6702704958690073),
                (0.2764485855185723, 0.38757835109739946),
                (0.1634220007200502, 0.07589687641367027)]


def _seeded_run(lib):
    lib.manual_seed(0)
    loader = lib.utils.data.DataLoader(_RandomDataset(), batch_size=None, num_workers=2)
    return [tuple(float(v) for v in b) for b in loader]


def test_worker_seeds_random_and_numpy_as_torch():
    base = 900450186894289455
    assert random.Random(base).random() == _TORCH_SEED0[0][0]      # closed form: random.seed
    assert random.Random(base + 1).random() == _TORCH_SEED0[1][0]
    assert _seeded_run(cddp) == _TORCH_SEED0


def test_worker_seeds_vs_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data._utils.worker import _generate_state as torch_state
    from cddp.utils.data.dataloader import _generate_state
    rng = random.Random(0)
    for _ in range(50):
        seed, wid = rng.getrandbits(63), rng.randrange(8)
        assert _generate_state(seed, wid) == torch_state(seed, wid)
    assert _seeded_run(cddp) == _seeded_run(torch)


class _FailsAt5:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("bad index 5")
        if i in (2, 3):
            time.sleep(0.2)     # the batch before the failing one arrives after the failure
        return i


def test_worker_error_raised_in_batch_order():
    for _ in range(2):
        got = []
        with pytest.raises(ValueError, match="bad index 5"):
            for b in DataLoader(_FailsAt5(), batch_size=2, num_workers=2):
                got.append(b.tolist())
        assert got == [[0, 1], [2, 3]]          # torch's, every time


def test_len_of_dataloader_iterator():
    assert len(iter(DataLoader(range(4), batch_size=2))) == 2
    assert len(iter(DataLoader(range(5), batch_size=None))) == 5
    it = iter(DataLoader(range(5), batch_size=2, num_workers=1))
    assert len(it) == 3 and [b.tolist() for b in it] == [[0, 1], [2, 3], [4]]
    torch = pytest.importorskip("torch")
    assert len(iter(torch.utils.data.DataLoader(range(4), batch_size=2))) == 2


# ---- 8, 9. containers, set_submodule, init aliases, samplers ----------------------------------

def test_parameter_dict_methods():
    nn = cddp.nn
    d = nn.ParameterDict({"b": cddp.randn(2), "a": cddp.randn(1), "c": 1})
    assert list(d) == ["a", "b", "c"]                       # a plain dict: sorted, as torch
    assert isinstance(d["a"], nn.Parameter) and d["c"] == 1
    assert [k for k, _ in d.named_parameters()] == ["a", "b"]
    assert d.get("z", 5) == 5 and d.get("a") is d["a"]
    q = d.setdefault("q", cddp.ones(1))
    assert isinstance(q, nn.Parameter) and d.setdefault("q", None) is q
    assert d.popitem()[0] == "q"
    assert list(d.copy()) == ["a", "b", "c"] and d.copy()["a"] is d["a"]
    assert list(d.fromkeys(["x", "y"], 3).items()) == [("x", 3), ("y", 3)]
    d.update([("z", cddp.zeros(1)), ("y", cddp.zeros(2))])   # pairs: their own order
    assert list(d) == ["a", "b", "c", "z", "y"]
    d.update(OrderedDict([("k", cddp.zeros(1)), ("j", cddp.zeros(1))]))
    assert list(d)[-2:] == ["k", "j"]
    assert d.pop("a").shape == (1,) and "a" not in d
    d.clear()
    assert len(d) == 0 and list(d.parameters()) == []
    with pytest.raises(KeyError):
        d.popitem()


def test_sequential_pop_and_set_submodule():
    nn = cddp.nn
    s = nn.Sequential(nn.ReLU(), nn.Tanh(), nn.Sigmoid())
    assert isinstance(s.pop(1), nn.Tanh) and list(s._modules) == ["0", "1"]
    assert isinstance(s[1], nn.Sigmoid)
    m = nn.Sequential(nn.Sequential(nn.ReLU()))
    m.set_submodule("0.0", nn.Tanh())
    m.set_submodule("0.1", nn.Linear(1, 1))
    assert isinstance(m[0][0], nn.Tanh) and isinstance(m[0][1], nn.Linear)
    with pytest.raises(AttributeError, match="has no attribute `2`"):
        m.set_submodule("0.2", nn.ReLU(), strict=True)
    with pytest.raises(ValueError):
        m.set_submodule("", nn.ReLU())
    with pytest.raises(ValueError):
        m.set_submodule("0.0", 3)


def test_init_eye_dirac_aliases_warn():
    w = cddp.empty(3, 3)
    with pytest.warns(FutureWarning, match="nn.init.eye"):
        cddp.nn.init.eye(w)
    np.testing.assert_array_equal(w.numpy(), np.eye(3))
    w = cddp.empty(2, 2, 3)
    with pytest.warns(FutureWarning, match="nn.init.dirac"):
        cddp.nn.init.dirac(w)
    assert w.numpy()[:, :, 1].tolist() == np.eye(2).tolist()


def test_cauchy_log_normal_geometric_sample_statistics():
    cddp.manual_seed(0)
    c = cddp.empty(100000).cauchy_(1.0, 2.0).numpy()
    assert np.median(c) == pytest.approx(1.0, abs=0.05)                  # median
    assert np.percentile(c, 75) - np.percentile(c, 25) == pytest.approx(4.0, abs=0.1)
    z = np.log(cddp.empty(100000, dtype=cddp.float64).log_normal_(0.5, 0.3).numpy())
    assert z.mean() == pytest.approx(0.5, abs=0.01) and z.std() == pytest.approx(0.3, abs=0.01)
    g = cddp.empty(100000, dtype=cddp.int64).geometric_(0.25)
    assert g.dtype == cddp.int64 and g.min().item() >= 1
    g = g.numpy().astype(np.float64)
    assert g.mean() == pytest.approx(4.0, rel=0.02)                      # 1 / p
    assert g.var() == pytest.approx(12.0, rel=0.05)                      # (1 - p) / p^2
    with pytest.raises(RuntimeError, match="geometric_ expects p"):
        cddp.empty(2).geometric_(1.0)
    with pytest.raises(RuntimeError, match="sigma > 0.0"):
        cddp.empty(2).cauchy_(0.0, 0.0)


def _container_reprs(lib):
    nn = lib.nn
    lib.manual_seed(0)
    return [repr(nn.ParameterList([nn.Parameter(lib.randn(2, 3)),
                                   lib.randn(3, dtype=lib.float64), "x"])),
            repr(nn.ParameterDict({"b": nn.Parameter(lib.randn(2, 3)),
                                   "a": lib.randn(3, dtype=lib.float64), "c": 1})),
            repr(nn.ParameterList([lib.randn(1)])),
            repr(nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU()] * 2
                               + [nn.Linear(2, 2)]))]


def test_container_reprs():
    plist, pdict, one, mlist = _container_reprs(cddp)
    assert plist == ("ParameterList(\n"
                     "    (0): Parameter containing: [cddp.float32 of size 2x3]\n"
                     "    (1): Parameter containing: [cddp.float64 of size 3]\n"
                     "    (2): Object of type: str\n)")
    assert pdict == ("ParameterDict(\n"
                     "    (a): Parameter containing: [torch.DoubleTensor of size 3]\n"
                     "    (b): Parameter containing: [torch.FloatTensor of size 2x3]\n"
                     "    (c): Object of type: int\n)")
    assert one == "ParameterList(  (0): Parameter containing: [cddp.float32 of size 1])"
    lin = "Linear(in_features=2, out_features=2, bias=True)"
    assert mlist == f"ModuleList(\n  (0-2): 3 x {lin}\n  (3-4): 2 x ReLU()\n  (5): {lin}\n)"
    assert repr(cddp.nn.ModuleList()) == "ModuleList()"


def test_container_reprs_vs_torch():
    torch = pytest.importorskip("torch")
    theirs = [r.replace("torch.float", "cddp.float") for r in _container_reprs(torch)]
    assert _container_reprs(cddp) == theirs


# ---- 10. a tensor lr must have one element ---------------------------------------------------

@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Rprop", "LBFGS"])
def test_optimizer_multi_element_tensor_lr(name):
    p = cddp.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        getattr(cddp.optim, name)([p], lr=cddp.tensor([0.1, 0.2]))
    getattr(cddp.optim, name)([p], lr=cddp.tensor(0.1))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        getattr(cddp.optim, name)([p], lr=-1.0)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)],
                                   lr=torch.tensor([0.1, 0.2]))


def test_no_warning_on_plain_use():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cddp.nn.ParameterList([cddp.zeros(1)])
        cddp.nn.ParameterDict({"a": cddp.zeros(1)})
