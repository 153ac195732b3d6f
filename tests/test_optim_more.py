"""Adadelta, Adagrad, RMSprop, Adamax, NAdam, RAdam, ASGD (csrc/optim/fused.c) and LBFGS.

Oracles: NumPy re-implementations of each update written from the papers' / torch's
formulas (float64 trajectories must agree to ~1e-12), the closed-form least-squares solution
that LBFGS must reach, and torch on the same problem when installed (float64 to ~1e-12 over
20 steps, float32 to ~1e-6 relative to the parameters' size, float16/bfloat16 within their
precision; LBFGS: see its test). State
dicts: torch's keys, round trips, and torch's own state_dict loaded and continued.
"""
import copy

import numpy as np
import pytest

import cddp
from conftest import n

CASES = [
    ("Adadelta", dict(lr=0.5, weight_decay=0.1)),
    ("Adadelta", dict(maximize=True, rho=0.8)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.9, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.02, alpha=0.3, centered=True)),      # lerp's other branch
    ("Adamax", dict(lr=0.05, weight_decay=0.1)),
    ("Adamax", dict(lr=0.05, betas=(0.3, 0.9), maximize=True)),
    ("NAdam", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, maximize=True)),
    ("RAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.05, betas=(0.9, 0.9), weight_decay=0.1)),          # rectified early
    ("ASGD", dict(lr=0.05, t0=5, lambd=0.01, weight_decay=0.1)),
    ("ASGD", dict(lr=0.05, maximize=True)),
]
IDS = [f"{c}-{i}" for i, (c, _) in enumerate(CASES)]


def _problem(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((3, 4), (3,), (8, 4), (8, 3))]


def _run(lib, cls, kw, dtype, steps=20, start=None):
    """Linear(4, 3) fitted by MSE; returns the parameters after each step's update."""
    W, B, X, Y = _problem(dtype)
    w, b = lib.tensor(W, requires_grad=True), lib.tensor(B, requires_grad=True)
    opt = getattr(lib.optim, cls)([w, b], **kw)
    if start is not None:
        start(opt)
    x, y = lib.tensor(X), lib.tensor(Y)
    for _ in range(steps):
        def closure():
            opt.zero_grad()
            loss = ((x @ w.t() + b - y) ** 2).mean()
            loss.backward()
            return loss
        opt.step(closure)
    return opt, [w.detach().numpy().copy(), b.detach().numpy().copy()]


# ---- NumPy references (float64) --------------------------------------------------------

def _grads(W, B, X, Y):
    r = 2 * (X @ W.T + B - Y) / Y.size
    return [r.T @ X, r.sum(0)]


def _lerp(a, b, w):
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


DEFAULT_LR = dict(Adadelta=1.0, Adagrad=1e-2, RMSprop=1e-2, Adamax=2e-3, NAdam=2e-3,
                  RAdam=1e-3, ASGD=1e-2)


def _np_step(cls, kw, p, g, st, t):   # noqa: C901  (one branch per optimizer)
    lr, wd, mx = kw.get("lr", DEFAULT_LR[cls]), kw.get("weight_decay", 0), kw.get("maximize", False)
    g = -g if mx else g
    decoupled = kw.get("decoupled_weight_decay", False)
    if wd and not decoupled:
        g = g + wd * p
    if cls == "Adadelta":
        rho, eps = kw.get("rho", 0.9), kw.get("eps", 1e-6)
        st["sa"] = st.get("sa", 0) * rho + (1 - rho) * g * g
        delta = np.sqrt(st.get("ad", 0) + eps) / np.sqrt(st["sa"] + eps) * g
        st["ad"] = st.get("ad", 0) * rho + (1 - rho) * delta * delta
        return p - lr * delta
    if cls == "Adagrad":
        st["sum"] = st.get("sum", kw["initial_accumulator_value"]) + g * g
        clr = lr / (1 + (t - 1) * kw["lr_decay"])
        return p - clr * g / (np.sqrt(st["sum"]) + 1e-10)
    if cls == "RMSprop":
        alpha, eps, mom = kw.get("alpha", 0.99), 1e-8, kw.get("momentum", 0)
        st["sa"] = st.get("sa", 0) * alpha + (1 - alpha) * g * g
        if kw.get("centered"):
            st["ga"] = _lerp(st.get("ga", np.zeros_like(g)), g, 1 - alpha)
            avg = np.sqrt(st["sa"] - st["ga"] ** 2) + eps
        else:
            avg = np.sqrt(st["sa"]) + eps
        if mom:
            st["buf"] = st.get("buf", 0) * mom + g / avg
            return p - lr * st["buf"]
        return p - lr * g / avg
    b1, b2 = kw.get("betas", (0.9, 0.999))
    if cls == "Adamax":
        st["m"] = _lerp(st.get("m", np.zeros_like(g)), g, 1 - b1)
        st["u"] = np.maximum(st.get("u", 0) * b2, np.abs(g) + 1e-8)
        return p - lr / (1 - b1 ** t) * st["m"] / st["u"]
    if wd and decoupled:
        p = p * (1 - lr * wd)
    st["m"] = _lerp(st.get("m", np.zeros_like(g)), g, 1 - b1)
    st["v"] = st.get("v", 0) * b2 + (1 - b2) * g * g
    if cls == "NAdam":
        md = kw.get("momentum_decay", 4e-3)
        mu = b1 * (1 - 0.5 * 0.96 ** (t * md))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * md))
        st["mp"] = float(np.float32(np.float32(st.get("mp", 1.0)) * np.float32(mu)))
        den = np.sqrt(st["v"] / (1 - b2 ** t)) + 1e-8
        return (p - lr * (1 - mu) / (1 - st["mp"]) * g / den
                - lr * mu_next / (1 - st["mp"] * mu_next) * st["m"] / den)
    if cls == "RAdam":
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        m_hat = st["m"] / (1 - b1 ** t)
        if rho_t <= 5:
            return p - lr * m_hat
        rect = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        return p - lr * m_hat * np.sqrt(1 - b2 ** t) / (np.sqrt(st["v"]) + 1e-8) * rect
    raise AssertionError(cls)


def _np_asgd(kw, p, g, st, t):
    lr, lambd, alpha, t0 = kw.get("lr", 1e-2), kw.get("lambd", 1e-4), kw.get("alpha", 0.75), kw.get("t0", 1e6)
    g = -g if kw.get("maximize") else g
    if kw.get("weight_decay"):
        g = g + kw["weight_decay"] * p
    eta, mu = st.get("eta", float(np.float32(lr))), st.get("mu", 1.0)
    p = p * (1 - lambd * eta) - eta * g
    st["ax"] = st.get("ax", 0) + (p - st.get("ax", 0)) * mu if mu != 1 else p.copy()
    st["eta"] = float(np.float32(lr / (1 + lambd * lr * t) ** alpha))
    st["mu"] = float(np.float32(1 / max(1, t - t0)))
    return p


def _np_run(cls, kw, steps=20):
    W, B, X, Y = _problem("float64")
    params, states = [W, B], [{}, {}]
    for t in range(1, steps + 1):
        gs = _grads(params[0], params[1], X, Y)
        step = _np_asgd if cls == "ASGD" else (lambda *a: _np_step(cls, *a))
        params = [step(kw, p, g, st, t) for p, g, st in zip(params, gs, states)]
    return params


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_trajectory_matches_numpy_reference(cls, kw):
    _, got = _run(cddp, cls, kw, "float64")
    for g, w in zip(got, _np_run(cls, kw)):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trajectory_matches_torch(torch, cls, kw, dtype):
    """float32: 1e-6 of the parameters' size, except centered RMSprop with alpha=0.3, whose
    square_avg - grad_avg**2 cancels to a few bits and so amplifies the last-bit differences
    of torch's vectorised kernels (which fuse multiply-adds) to ~5e-5."""
    _, got = _run(cddp, cls, kw, dtype)
    _, want = _run(torch, cls, kw, dtype)
    tol = 1e-12 if dtype == "float64" else 1e-4 if kw.get("alpha") == 0.3 else 1e-6
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert np.max(np.abs(g - w)) <= tol * np.max(np.abs(w)), (g, w)


def _run_reduced(lib, cls, kw, dtype, steps=5):
    """_run with float16/bfloat16 parameters (made from the float64 problem by a cast)."""
    W, B, X, Y = _problem("float64")
    dt = getattr(lib, dtype)
    w = lib.tensor(W).to(dt).requires_grad_(True)
    b = lib.tensor(B).to(dt).requires_grad_(True)
    opt = getattr(lib.optim, cls)([w, b], **kw)
    x, y = lib.tensor(X).to(dt), lib.tensor(Y).to(dt)
    for _ in range(steps):
        opt.zero_grad()
        ((x @ w.t() + b - y) ** 2).mean().backward()
        opt.step()
    states = [v for st in opt.state.values() for v in st.values() if hasattr(v, "dtype")
              and v.dim() > 0]
    return states, [w.detach().float().numpy(), b.detach().float().numpy()]


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_parameters(cls, kw, dtype):
    """float16/bfloat16 parameters (torch supports them): state kept in the parameter's dtype,
    5 steps within the dtype's precision of the float64 NumPy trajectory (the forward and
    backward run in that dtype too, so the tolerance is a few units of its epsilon relative
    to the parameters' size), and of torch's when installed."""
    states, got = _run_reduced(cddp, cls, kw, dtype)
    assert states and all(str(s.dtype).endswith(dtype) for s in states)
    tol = 2e-2 if dtype == "float16" else 1.5e-1
    for g, w in zip(got, _np_run(cls, kw, steps=5)):
        assert np.max(np.abs(g - w)) <= tol * np.max(np.abs(w)), (g, w)
    torch = pytest.importorskip("torch")
    _, want = _run_reduced(torch, cls, kw, dtype)
    for g, w in zip(got, want):
        assert np.max(np.abs(g - w)) <= tol * np.max(np.abs(w)), (g, w)


# ---- state dicts -----------------------------------------------------------------------

def _to_cddp(obj):
    """A torch state_dict with its tensors turned into cddp tensors (same values, dtypes)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return cddp.from_numpy(obj.detach().numpy().copy())
    if isinstance(obj, dict):
        return {k: _to_cddp(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cddp(v) for v in obj]
    return obj


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_state_dict_layout_and_loading_torchs(torch, cls, kw):
    ours, _ = _run(cddp, cls, kw, "float64", steps=3)
    theirs, _ = _run(torch, cls, kw, "float64", steps=3)
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd["state"]) == list(tsd["state"])
    for k in tsd["state"]:
        assert list(sd["state"][k]) == list(tsd["state"][k])          # keys, in torch's order
        for name, v in tsd["state"][k].items():
            mine = sd["state"][k][name]
            assert tuple(mine.shape) == tuple(v.shape)
            assert str(mine.dtype).split(".")[-1] == str(v.dtype).split(".")[-1], name
            np.testing.assert_allclose(n(mine), v.numpy(), rtol=1e-12, atol=1e-14)
    assert set(tsd["param_groups"][0]) == set(sd["param_groups"][0])
    # torch's state dict loaded into a fresh cddp optimizer continues as torch's own does
    # (both restart from the problem's parameters with the loaded state)
    _, cont = _run(cddp, cls, kw, "float64", steps=4,
                   start=lambda o: o.load_state_dict(_to_cddp(tsd)))
    _, want = _run(torch, cls, kw, "float64", steps=4, start=lambda o: o.load_state_dict(tsd))
    for g, w in zip(cont, want):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_state_dict_round_trip_resumes_exactly(cls, kw):
    # a checkpoint's copy: load_state_dict shares the given tensors, as torch's does
    ref, _ = _run(cddp, cls, kw, "float32", steps=3)
    _, resumed = _run(cddp, cls, kw, "float32", steps=5,
                      start=lambda o: o.load_state_dict(copy.deepcopy(ref.state_dict())))
    _, again = _run(cddp, cls, kw, "float32", steps=5,
                    start=lambda o: o.load_state_dict(copy.deepcopy(ref.state_dict())))
    for a, b in zip(resumed, again):
        np.testing.assert_array_equal(a, b)
    state = ref.state_dict()["state"][0]
    assert state["step"].item() == 3.0 and state["step"].dtype == cddp.float32


def test_bad_state_is_refused_and_options_are_checked():
    p = cddp.zeros(3, requires_grad=True)
    opt = cddp.optim.RMSprop([p], lr=0.1)
    p.grad = cddp.ones(3)
    opt.step()
    opt.state[p]["square_avg"] = cddp.zeros(2)
    with pytest.raises(RuntimeError, match="square_avg for parameter 0 must be a tensor of "
                                           "the parameter's dtype, size and memory layout"):
        opt.step()
    with pytest.raises(ValueError, match="Invalid rho value: 1.5"):
        cddp.optim.Adadelta([p], rho=1.5)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        cddp.optim.NAdam([p], betas=(0.9, 1.0))
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        cddp.optim.RAdam([p], differentiable=True)
    with pytest.raises(ValueError, match="_fused_step: unknown optimizer kind 9"):
        cddp._C._fused_step(9, [p], [p.grad], (), (), None)


# ---- LBFGS -----------------------------------------------------------------------------

@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_reaches_the_least_squares_solution(line_search_fn):
    W, B, X, Y = _problem("float64")
    opt, (w, b) = _run(cddp, "LBFGS", dict(lr=1, history_size=10, max_iter=20,
                                           tolerance_grad=1e-12, tolerance_change=1e-15,
                                           line_search_fn=line_search_fn), "float64", steps=5)
    A = np.hstack([X, np.ones((8, 1))])
    sol = np.linalg.lstsq(A, Y, rcond=None)[0]
    np.testing.assert_allclose(w, sol[:4].T, atol=1e-9)
    np.testing.assert_allclose(b, sol[4], atol=1e-9)
    state = opt.state_dict()["state"][0]
    assert {"func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag",
            "prev_flat_grad", "prev_loss"} <= set(state)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(torch, line_search_fn):
    """float64: 20 steps of 4 iterations agree to 1e-9 (LBFGS amplifies rounding: the
    gradients' summation order differs from torch's BLAS). float32: one step, 1e-5."""
    kw = dict(lr=0.5 if line_search_fn is None else 1, history_size=5, max_iter=4,
              line_search_fn=line_search_fn)
    for dtype, steps, tol in (("float64", 20, 1e-9), ("float32", 1, 1e-5)):
        ours, got = _run(cddp, "LBFGS", kw, dtype, steps=steps)
        theirs, want = _run(torch, "LBFGS", kw, dtype, steps=steps)
        for g, w in zip(got, want):
            assert np.max(np.abs(g - w)) <= tol * np.max(np.abs(w)), (dtype, g, w)
        assert ours.state[ours._params[0]]["func_evals"] == \
            theirs.state[theirs._params[0]]["func_evals"]
        assert ours.state[ours._params[0]]["n_iter"] == theirs.state[theirs._params[0]]["n_iter"]


def test_lbfgs_requires_one_group_and_a_closure():
    a, b = cddp.zeros(2, requires_grad=True), cddp.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="doesn't support per-parameter options"):
        cddp.optim.LBFGS([{"params": [a]}, {"params": [b]}])
    with pytest.raises(RuntimeError, match="LBFGS requires a closure"):
        cddp.optim.LBFGS([a]).step(None)
