"""Adafactor and Muon (cddp/optim/adafactor.py, cddp/optim/muon.py).

Oracles: a NumPy float64 re-implementation of Adafactor written from the paper's / torch's
formulas (factored row/column statistics as a broadcast outer product, not a matmul; 6 steps
agree to 1e-12); a NumPy float64 Newton–Schulz for Muon (cddp's runs in bfloat16 as torch's,
so one step agrees to bfloat16 precision, and the update's singular values are pushed into
torch's ~[0.5, 1.5] band); torch on the same problems when installed (float32 parameters to
1e-5 of their size over 8 steps, state_dict entries likewise, float64 to 1e-12, the bfloat16
Newton–Schulz to the bit). The gradients of the quadratic are computed in NumPy from the
current parameters and handed to both libraries, so only the optimizers are compared; one
test also runs a small tanh MLP through each library's autograd.
State dicts: torch's keys, order, shapes and dtypes; a save/load round trip resumes
identically; torch's state dict loaded into cddp (and cddp's into torch) continues as the
original does. Validation: torch's exception types and messages.
"""
import copy
import re

import numpy as np
import pytest

import cddp

AF_SHAPES = [(), (5,), (4, 6), (2, 3, 5)]
MUON_SHAPES = [(4, 6), (7, 3), (5, 5)]

AF_CASES = [
    {},
    dict(lr=0.05, weight_decay=0.1),
    dict(maximize=True),
    dict(d=1.5, beta2_decay=-0.5),
    dict(eps=(1e-3, 1e-2), lr=0.2),          # lr above 1/sqrt(t): rho_t = 1/sqrt(t)
    dict(eps=(3.0, 1e-3)),                   # eps1 clamps the variance estimates
    dict(foreach=True, weight_decay=0.1),    # torch's multi-tensor path: the same numbers
    dict(eps=(0.0, 0.0), lr=0.03, weight_decay=0.5, maximize=True, d=2.0),
]
MUON_CASES = [
    {},
    dict(lr=0.02, nesterov=False),
    dict(lr=0.02, adjust_lr_fn="match_rms_adamw", weight_decay=0.0),
    dict(lr=0.01, adjust_lr_fn="original", momentum=0.5, ns_steps=3),
    dict(lr=0.03, ns_coefficients=(2.0, -1.5, 0.5), eps=1e-3, weight_decay=0.3),
]


def _ids(cases):
    return ["-".join(f"{k}={v}" for k, v in kw.items()) or "defaults" for kw in cases]


# ---- the problem: sum_i c_i * (p_i - t_i)**2, gradients from NumPy --------------------------

def _problem(shapes, seed=0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s) for s in shapes]
    target = [rng.standard_normal(s) for s in shapes]
    scale = [rng.uniform(0.5, 2.0, s) for s in shapes]
    return init, target, scale


def _np_grads(params, target, scale):
    return [2.0 * c * (p - t) for p, t, c in zip(params, target, scale)]


def _numpy(x):
    return np.array(x.detach().double().numpy(), dtype=np.float64)


class _Run:
    """One library's optimizer on the quadratic (parameters of `dtype`)."""

    def __init__(self, lib, cls, kw, shapes, dtype="float32", seed=0, init=None):
        self.lib, self.dt = lib, getattr(lib, dtype)
        start, self.target, self.scale = _problem(shapes, seed)
        if init is not None:
            start = init
        self.params = [lib.tensor(np.asarray(a, dtype=np.float64)).to(self.dt)
                       .requires_grad_(True) for a in start]
        self.opt = getattr(lib.optim, cls)(self.params, **kw)

    def steps(self, k):
        for _ in range(k):
            gs = _np_grads([_numpy(p) for p in self.params], self.target, self.scale)
            for p, g in zip(self.params, gs):
                p.grad = self.lib.tensor(g).to(self.dt)
            self.opt.step()
        return self

    def values(self):
        return [_numpy(p) for p in self.params]


def _close(got, want, rtol):
    """Equal to rtol of the largest magnitude (elementwise rtol too where it is looser)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1e-30))


def _dtype_name(dt):
    return str(dt).split(".")[-1]


def _check_state_dict(sd, tsd, rtol):
    """cddp's state_dict against torch's: same indices, keys in torch's order, shapes, dtypes,
    values; the same param_groups."""
    assert list(sd["state"]) == list(tsd["state"])
    for k, tstate in tsd["state"].items():
        assert list(sd["state"][k]) == list(tstate)
        for name, v in tstate.items():
            mine = sd["state"][k][name]
            assert tuple(mine.shape) == tuple(v.shape), name
            assert _dtype_name(mine.dtype) == _dtype_name(v.dtype), name
            _close(_numpy(mine), v.detach().double().numpy(), rtol)
    assert len(sd["param_groups"]) == len(tsd["param_groups"])
    for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
        assert list(g) == list(tg)
        assert g == tg


# ---- a NumPy Adafactor, written from the algorithm --------------------------------------------

def _np_adafactor_step(p, g, st, t, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                       weight_decay=0.0, maximize=False):
    """One float64 Adafactor step of parameter p; st holds "R", "C" (factored) or "V"."""
    eps1 = np.finfo(np.float64).eps if eps[0] is None else eps[0]
    g = -g if maximize else g
    new = float(t) ** beta2_decay                       # 1 - beta2_t
    rho = min(lr, 1.0 / np.sqrt(t))
    alpha = max(eps[1], np.sqrt(np.mean(p * p))) * rho
    p = p * (1.0 - lr * weight_decay)
    if g.ndim >= 2:
        st["R"] = (1 - new) * st["R"] + new * np.mean(g * g, axis=-1, keepdims=True)
        st["C"] = (1 - new) * st["C"] + new * np.mean(g * g, axis=-2, keepdims=True)
        v = st["R"] * st["C"] / np.maximum(np.mean(st["R"], axis=-2, keepdims=True), eps1)
    else:
        st["V"] = (1 - new) * st["V"] + new * g * g
        v = st["V"]
    u = g / np.maximum(np.sqrt(v), eps1)
    return p - alpha / max(1.0, np.sqrt(np.mean(u * u)) / d) * u


def _np_adafactor_state(p):
    if p.ndim >= 2:
        return {"R": np.zeros(p.shape[:-1] + (1,)),
                "C": np.zeros(p.shape[:-2] + (1,) + p.shape[-1:])}
    return {"V": np.zeros(p.shape)}


@pytest.mark.parametrize("kw", AF_CASES, ids=_ids(AF_CASES))
def test_adafactor_matches_numpy_reference(kw):
    run = _Run(cddp, "Adafactor", kw, AF_SHAPES, dtype="float64").steps(6)
    params, target, scale = _problem(AF_SHAPES)
    states = [_np_adafactor_state(p) for p in params]
    for t in range(1, 7):
        gs = _np_grads(params, target, scale)
        np_kw = {k: v for k, v in kw.items() if k != "foreach"}
        params = [_np_adafactor_step(p, g, st, t, **np_kw)
                  for p, g, st in zip(params, gs, states)]
    for got, want in zip(run.values(), params):
        _close(got, want, 1e-12)
    for i, st in enumerate(states):
        cst = run.opt.state[run.params[i]]
        assert cst["step"].item() == 6.0
        if "V" in st:
            _close(_numpy(cst["variance"]), st["V"], 1e-12)
        else:
            _close(_numpy(cst["row_var"]), st["R"], 1e-12)
            _close(_numpy(cst["col_var"]), st["C"], 1e-12)


def test_adafactor_eps1_bounds_the_row_normaliser():
    """Small gradients: mean(R) < eps1 while R C / eps1 > eps1**2, so the normaliser's clamp
    (at eps1, not eps1**2) decides the update; 3 steps against NumPy (and torch)."""
    rng = np.random.default_rng(11)
    p0, grads = rng.standard_normal((2, 5, 7)), 0.1 * rng.standard_normal((3, 2, 5, 7))
    kw = dict(eps=(0.03, 1e-3), lr=0.1)
    want, st = p0, _np_adafactor_state(p0)
    for t, g in enumerate(grads, 1):
        want = _np_adafactor_step(want, g, st, t, **kw)
    assert np.mean(st["R"], axis=-2).max() < 0.03 < (st["R"] * st["C"]).max() / 0.03 ** 3

    def run(lib):
        p = lib.tensor(p0).requires_grad_(True)
        opt = lib.optim.Adafactor([p], **kw)
        for g in grads:
            p.grad = lib.tensor(g)
            opt.step()
        return _numpy(p)

    _close(run(cddp), want, 1e-12)
    torch = pytest.importorskip("torch")
    _close(run(torch), want, 1e-12)


def test_adafactor_state_layout():
    run = _Run(cddp, "Adafactor", {}, AF_SHAPES).steps(1)
    states = [run.opt.state[p] for p in run.params]
    assert [list(s) for s in states] == [["step", "variance"], ["step", "variance"],
                                         ["step", "row_var", "col_var"],
                                         ["step", "row_var", "col_var"]]
    assert tuple(states[2]["row_var"].shape) == (4, 1)
    assert tuple(states[2]["col_var"].shape) == (1, 6)
    assert tuple(states[3]["row_var"].shape) == (2, 3, 1)
    assert tuple(states[3]["col_var"].shape) == (2, 1, 5)
    assert states[0]["variance"].dim() == 0
    assert all(s["step"].dtype == cddp.float32 and s["step"].dim() == 0 for s in states)


# ---- against torch --------------------------------------------------------------------------

@pytest.mark.parametrize("kw", AF_CASES, ids=_ids(AF_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adafactor_matches_torch(torch, kw, dtype):
    ours = _Run(cddp, "Adafactor", kw, AF_SHAPES, dtype).steps(8)
    theirs = _Run(torch, "Adafactor", kw, AF_SHAPES, dtype).steps(8)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    for got, want in zip(ours.values(), theirs.values()):
        _close(got, want, rtol)
    _check_state_dict(ours.opt.state_dict(), theirs.opt.state_dict(), rtol)


@pytest.mark.parametrize("kw", MUON_CASES, ids=_ids(MUON_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_muon_matches_torch(torch, kw, dtype):
    """The Newton–Schulz update is bfloat16 in both; float64 parameters see it exactly the
    same, float32 ones differ only by the last bits of the float32 momentum lerp."""
    ours = _Run(cddp, "Muon", kw, MUON_SHAPES, dtype).steps(8)
    theirs = _Run(torch, "Muon", kw, MUON_SHAPES, dtype).steps(8)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    for got, want in zip(ours.values(), theirs.values()):
        _close(got, want, rtol)
    _check_state_dict(ours.opt.state_dict(), theirs.opt.state_dict(), rtol)


@pytest.mark.parametrize("cls,shapes", [("Adafactor", AF_SHAPES), ("Muon", MUON_SHAPES)])
def test_tensor_lr_matches_torch(torch, cls, shapes):
    ours = _Run(cddp, cls, dict(lr=cddp.tensor(0.02), weight_decay=0.1), shapes).steps(8)
    theirs = _Run(torch, cls, dict(lr=torch.tensor(0.02), weight_decay=0.1), shapes).steps(8)
    for got, want in zip(ours.values(), theirs.values()):
        _close(got, want, 1e-5)


def test_newton_schulz_is_torchs_to_the_bit(torch):
    from cddp.optim.muon import _newton_schulz
    from torch.optim._muon import _zeropower_via_newtonschulz
    rng = np.random.default_rng(3)
    for shape in [(4, 6), (9, 5), (16, 16), (1, 7)]:
        m = rng.standard_normal(shape).astype(np.float32)
        for coeffs, steps, eps in [((3.4445, -4.7750, 2.0315), 5, 1e-7),
                                   ((2.0, -1.5, 0.5), 3, 1.0)]:
            got = _newton_schulz(cddp.tensor(m), coeffs, steps, eps)
            want = _zeropower_via_newtonschulz(torch.tensor(m), coeffs, steps, eps)
            assert got.dtype == cddp.bfloat16
            np.testing.assert_array_equal(_numpy(got), want.double().numpy())


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_bfloat16_parameters(nesterov):
    """bfloat16 parameters: state in bfloat16; with nesterov=False the iteration normalises the
    (bfloat16) momentum buffer in place, as torch's does (its bfloat16() of a bfloat16 tensor
    is the tensor itself); within a few bfloat16 units of torch's trajectory (cddp's bfloat16
    lerp rounds differently from torch's in the last bit)."""
    kw = dict(lr=0.02, nesterov=nesterov)
    ours = _Run(cddp, "Muon", kw, MUON_SHAPES, "bfloat16").steps(5)
    bufs = [ours.opt.state[p]["momentum_buffer"] for p in ours.params]
    assert all(b.dtype == cddp.bfloat16 for b in bufs)
    norms = [b.float().norm().item() for b in bufs]
    if not nesterov:
        np.testing.assert_allclose(norms, 1.0, atol=2e-2)
    else:
        assert all(nb > 1.5 for nb in norms)
    torch = pytest.importorskip("torch")
    theirs = _Run(torch, "Muon", kw, MUON_SHAPES, "bfloat16").steps(5)
    for got, want in zip(ours.values(), theirs.values()):
        assert np.abs(got - want).max() <= 3e-2 * np.abs(want).max()
    tnorms = [theirs.opt.state[p]["momentum_buffer"].float().norm().item()
              for p in theirs.params]
    np.testing.assert_allclose(norms, tnorms, rtol=3e-2)


@pytest.mark.parametrize("cls", ["Adafactor", "Muon"])
def test_mlp_through_autograd_matches_torch(torch, cls):
    """A 4-8-3 tanh MLP fitted by MSE, gradients from each library's own autograd."""
    rng = np.random.default_rng(7)
    W1, W2 = rng.standard_normal((4, 8)) * 0.5, rng.standard_normal((8, 3)) * 0.5
    b1 = rng.standard_normal(8) * 0.1
    X, Y = rng.standard_normal((16, 4)), rng.standard_normal((16, 3))
    kw = dict(lr=0.05, weight_decay=0.01) if cls == "Adafactor" else dict(lr=0.05)

    def run(lib):
        f = lib.float32
        w1, w2 = (lib.tensor(W1).to(f).requires_grad_(True),
                  lib.tensor(W2).to(f).requires_grad_(True))
        b = lib.tensor(b1).to(f).requires_grad_(True)
        params = [w1, w2, b] if cls == "Adafactor" else [w1, w2]
        opt = getattr(lib.optim, cls)(params, **kw)
        x, y = lib.tensor(X).to(f), lib.tensor(Y).to(f)
        for _ in range(6):
            opt.zero_grad()
            loss = ((lib.tanh(x @ w1 + b) @ w2 - y) ** 2).mean()
            loss.backward()
            opt.step()
        return [_numpy(p) for p in params]

    for got, want in zip(run(cddp), run(torch)):
        _close(got, want, 1e-5)


def test_muon_matches_numpy_newton_schulz():
    """One step from zero momentum: the update is lr * ratio * NS(G) (nesterov: the momentum
    lerp of G towards (1 - mu) G), NS computed here in float64 — equal to bfloat16 precision;
    its singular values lie near 1 (Keller Jordan's coefficients give ~[0.7, 1.2])."""
    lr, mu, wd = 0.1, 0.95, 0.2
    run = _Run(cddp, "Muon", dict(lr=lr, momentum=mu, weight_decay=wd), MUON_SHAPES, "float64")
    before = run.values()
    run.steps(1)
    a, b, c = 3.4445, -4.7750, 2.0315
    for p0, p1, t, s in zip(before, run.values(), run.target, run.scale):
        g = 2.0 * s * (p0 - t)
        m = g + mu * ((1 - mu) * g - g)                 # lerp(g, buf, mu), buf = (1 - mu) g
        x = m.T if m.shape[0] > m.shape[1] else m
        x = x / max(np.linalg.norm(x), 1e-7)
        for _ in range(5):
            sq = x @ x.T
            x = a * x + (b * sq + c * sq @ sq) @ x
        ns = x.T if m.shape[0] > m.shape[1] else x
        ratio = np.sqrt(max(1.0, p0.shape[0] / p0.shape[1]))
        update = (p0 * (1 - lr * wd) - p1) / (lr * ratio)   # what cddp applied
        assert np.abs(update - ns).max() <= 4e-2 * np.abs(ns).max()
        sv = np.linalg.svd(update, compute_uv=False)
        assert 0.5 < sv.min() and sv.max() < 1.5, sv


# ---- state dicts ----------------------------------------------------------------------------

@pytest.mark.parametrize("cls,kw,shapes", [
    ("Adafactor", dict(lr=0.05, weight_decay=0.1), AF_SHAPES),
    ("Adafactor", dict(maximize=True, eps=(1e-3, 1e-3)), AF_SHAPES),
    ("Muon", dict(lr=0.02), MUON_SHAPES),
    ("Muon", dict(lr=0.02, nesterov=False, adjust_lr_fn="match_rms_adamw"), MUON_SHAPES),
])
def test_state_dict_round_trip_resumes_identically(cls, kw, shapes):
    straight = _Run(cddp, cls, kw, shapes).steps(8)
    first = _Run(cddp, cls, kw, shapes).steps(4)
    saved, at = copy.deepcopy(first.opt.state_dict()), first.values()
    first.steps(1)                  # the saved copy does not move with the live optimizer
    resumed = _Run(cddp, cls, kw, shapes, init=at)
    resumed.opt.load_state_dict(saved)
    resumed.steps(4)
    for got, want in zip(resumed.values(), straight.values()):
        np.testing.assert_array_equal(got, want)
    assert resumed.opt.state_dict()["param_groups"] == straight.opt.state_dict()["param_groups"]
    if cls == "Adafactor":
        assert all(s["step"].item() == 8.0 for s in resumed.opt.state.values())


def _to_lib(lib, obj):
    """A state_dict with its tensors rebuilt in lib (same values and dtypes)."""
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):
        return lib.from_numpy(obj.detach().numpy().copy())
    if isinstance(obj, dict):
        return {k: _to_lib(lib, v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_lib(lib, v) for v in obj]
    return obj


@pytest.mark.parametrize("cls,kw,shapes", [
    ("Adafactor", dict(lr=0.05, weight_decay=0.1, d=1.2), AF_SHAPES),
    ("Muon", dict(lr=0.02, momentum=0.9), MUON_SHAPES),
])
def test_state_dicts_move_between_torch_and_cddp(torch, cls, kw, shapes):
    """torch's state after 4 steps, loaded into cddp (parameters copied too), continues as
    torch does; and cddp's loaded into torch continues as cddp does."""
    for src_lib, dst_lib in ((torch, cddp), (cddp, torch)):
        src = _Run(src_lib, cls, kw, shapes, "float64").steps(4)
        dst = _Run(dst_lib, cls, kw, shapes, "float64", init=src.values())
        dst.opt.load_state_dict(_to_lib(dst_lib, src.opt.state_dict()))
        src.steps(4)
        dst.steps(4)
        for got, want in zip(dst.values(), src.values()):
            _close(got, want, 1e-12)


def test_adafactor_step_number_in_old_state_becomes_a_tensor():
    run = _Run(cddp, "Adafactor", {}, AF_SHAPES).steps(2)
    sd = run.opt.state_dict()
    for st in sd["state"].values():
        st["step"] = 2                      # a plain number, as older checkpoints hold
    other = _Run(cddp, "Adafactor", {}, AF_SHAPES)
    other.opt.load_state_dict(sd)
    other.opt.__setstate__(other.opt.__getstate__())
    assert all(isinstance(s["step"], cddp.Tensor) and s["step"].item() == 2.0
               for s in other.opt.state.values())
    other.steps(1)
    assert all(s["step"].item() == 3.0 for s in other.opt.state.values())


def test_step_dtype_follows_the_default_dtype():
    """torch keeps "step" in float64 under a float64 default dtype, else float32."""
    old = cddp.get_default_dtype()
    try:
        cddp.set_default_dtype(cddp.float64)
        p = cddp.zeros(3, requires_grad=True)
        p.grad = cddp.ones(3)
        opt = cddp.optim.Adafactor([p])
        opt.step()
        assert opt.state[p]["step"].dtype == cddp.float64
    finally:
        cddp.set_default_dtype(old)


def test_groups_and_parameters_without_gradients():
    a = cddp.ones(3, 4, requires_grad=True)
    b = cddp.ones(2, 2, requires_grad=True)
    opt = cddp.optim.Adafactor([{"params": [a]}, {"params": [b], "lr": 0.5, "maximize": True}])
    a.grad = cddp.ones(3, 4)
    opt.step()
    assert b not in opt.state and "row_var" in opt.state[a]
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[0]["lr"] == 1e-2
    m = cddp.optim.Muon([a, b])
    a.grad = cddp.ones(3, 4)
    m.step()
    assert list(m.state[a]) == ["momentum_buffer"] and b not in m.state


def test_defaults_are_torchs():
    p = cddp.zeros(2, 2, requires_grad=True)
    assert cddp.optim.Adafactor([p]).defaults == dict(
        lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, foreach=None,
        maximize=False)
    assert cddp.optim.Muon([p]).defaults == dict(
        lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
        ns_coefficients=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None)
    assert "Adafactor" in cddp.optim.__all__ and "Muon" in cddp.optim.__all__


# ---- validation -----------------------------------------------------------------------------

AF_BAD = [
    (dict(lr=-0.1), "Learning rate should be >= 0 but is: -0.1"),
    (dict(beta2_decay=0.5), "beta2_decay should be <= 0 but is: 0.5"),
    (dict(eps=(-1.0, 1e-3)), "epsilon1 should be >= 0 but is: -1.0"),
    (dict(eps=(None, -1e-3)), "epsilon2 should be >= 0 but is: -0.001"),
    (dict(d=0.5), "Clipping threshold d should be >= 1 but is: 0.5"),
    (dict(weight_decay=-1.0), "weight_decay should be >= 0 but is: -1.0"),
]
MUON_BAD = [
    (dict(lr=-0.1), "Learning rate should be >= 0 but is: -0.1"),
    (dict(momentum=-0.5), "momentum should be >= 0 but is: -0.5"),
    (dict(weight_decay=-1.0), "weight decay should be >= 0 but is: -1.0"),
    (dict(adjust_lr_fn="spectral"), "Adjust learning rate function spectral is not supported"),
]


def _message(lib, cls, kw, shape=(2, 3)):
    with pytest.raises(ValueError) as info:
        getattr(lib.optim, cls)([lib.zeros(*shape, requires_grad=True)], **kw)
    return str(info.value)


@pytest.mark.parametrize("cls,kw,msg", [("Adafactor", k, m) for k, m in AF_BAD]
                         + [("Muon", k, m) for k, m in MUON_BAD])
def test_bad_hyperparameters(cls, kw, msg):
    assert _message(cddp, cls, kw) == msg
    torch = pytest.importorskip("torch")
    assert _message(torch, cls, kw) == msg


def test_tensor_lr_must_have_one_element():
    for cls in ("Adafactor", "Muon"):
        with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
            getattr(cddp.optim, cls)([cddp.zeros(2, 2, requires_grad=True)],
                                     lr=cddp.tensor([0.1, 0.2]))


@pytest.mark.parametrize("shape", [(), (3,), (2, 3, 4)])
def test_muon_refuses_parameters_that_are_not_matrices(shape):
    msg = _message(cddp, "Muon", {}, shape)
    assert msg.startswith("Muon only supports 2D parameters whereas we found a parameter "
                          "with size: ")
    assert re.search(r"Size\(\[" + ", ".join(map(str, shape)) + r"\]\)$", msg)


def test_muon_zero_gradient_gives_a_zero_update():
    """eps keeps the Frobenius normalisation finite: a zero gradient leaves only the decay."""
    p = cddp.ones(3, 4, requires_grad=True)
    opt = cddp.optim.Muon([p], lr=0.1, weight_decay=0.5)
    p.grad = cddp.zeros(3, 4)
    opt.step()
    np.testing.assert_array_equal(_numpy(p), np.full((3, 4), np.float32(1 - 0.1 * 0.5)))


def test_muon_newton_schulz_settings_are_checked_at_step():
    for kw, msg in [(dict(ns_steps=100), "Number of steps must be less than 100"),
                    (dict(ns_coefficients=(1.0, 2.0)),
                     "Coefficients must be a tuple of exactly 3")]:
        p = cddp.zeros(2, 3, requires_grad=True)
        opt = cddp.optim.Muon([p], **kw)            # accepted here, as torch does
        p.grad = cddp.ones(2, 3)
        with pytest.raises(ValueError, match=msg):
            opt.step()
