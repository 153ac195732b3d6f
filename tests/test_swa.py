"""torch.optim.swa_utils (AveragedModel, SWALR, update_bn, the avg_fn factories) and
torch.optim.Rprop.

Oracles: NumPy (the running mean and EMA of recorded weights, the SWALR schedule written out
from its formula, BatchNorm statistics of the whole data set, an Rprop step by hand), and
torch when installed (same inputs: weights, state dicts, lrs and Rprop trajectories).
"""
import numpy as np
import pytest

import cddp
from cddp import nn
from cddp.optim import swa_utils
from conftest import n, t


def _net():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()


def _train_steps(model, steps, seed=0):
    """SGD steps; yields after each one."""
    rng = np.random.default_rng(seed)
    opt = cddp.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        (model(t(rng.standard_normal((8, 3)))) ** 2).mean().backward()
        opt.step()
        yield


@pytest.mark.parametrize("kind", ["swa", "ema_multi", "ema_avg", "swa_buffers"])
def test_averaged_model_numpy(kind):
    model = _net()
    kw = {"swa": {}, "ema_multi": {"multi_avg_fn": swa_utils.get_ema_multi_avg_fn(0.9)},
          "ema_avg": {"avg_fn": swa_utils.get_ema_avg_fn(0.9)},
          "swa_buffers": {"use_buffers": True}}[kind]
    avg = swa_utils.AveragedModel(model, **kw)
    keys = ["n_averaged"] + ["module." + k for k in model.state_dict()]
    assert sorted(avg.state_dict()) == sorted(keys)
    seen = []
    for _ in _train_steps(model, 4):
        avg.update_parameters(model)
        seen.append({k: n(v) for k, v in model.state_dict().items()})
    assert int(avg.n_averaged) == 4 and avg.n_averaged.dtype == cddp.int64
    for k, v in avg.module.state_dict().items():
        hist = np.stack([s[k] for s in seen])
        if k.endswith("num_batches_tracked"):
            if kind != "swa_buffers":
                want = hist[-1]
            else:       # torch's integer running mean truncates each update
                want = hist[0]
                for i, h in enumerate(hist[1:], 1):
                    want = want + (h - want) // (i + 1)
        elif "running" in k and kind != "swa_buffers":
            want = hist[-1]                      # buffers copied, not averaged
        elif kind.startswith("ema"):
            want = hist[0]
            for h in hist[1:]:
                want = 0.9 * want + 0.1 * h
        else:
            want = hist.mean(0)
        np.testing.assert_allclose(n(v), want, rtol=1e-12, atol=1e-14, err_msg=k)
    x = t(np.ones((2, 3)))
    avg.eval()
    avg.module.eval()
    np.testing.assert_array_equal(n(avg(x)), n(avg.module(x)))


def test_avg_fn_checks():
    with pytest.raises(ValueError, match="Invalid decay value"):
        swa_utils.get_ema_avg_fn(1.5)
    with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
        swa_utils.AveragedModel(_net(), avg_fn=swa_utils.get_swa_avg_fn(),
                                multi_avg_fn=swa_utils.get_swa_multi_avg_fn())


def test_update_bn_numpy():
    model = _net()
    for _ in _train_steps(model, 2):
        pass
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((5, 3)) for _ in range(4)]
    model.eval()
    swa_utils.update_bn([(t(b), 0) for b in batches], model)
    assert not model.training and model[1].momentum == 0.1
    h = np.concatenate([n(model[0](t(b))) for b in batches])
    # momentum=None: the cumulative average of the per-batch statistics (equal batch sizes:
    # the data set's mean; variance: the mean of the unbiased per-batch variances)
    np.testing.assert_allclose(n(model[1].running_mean), h.mean(0), rtol=1e-10)
    per_batch_var = np.mean([np.var(n(model[0](t(b))), axis=0, ddof=1) for b in batches], 0)
    np.testing.assert_allclose(n(model[1].running_var), per_batch_var, rtol=1e-10)


def _swalr_lrs(lib, strategy, anneal_epochs, steps=8):
    p = lib.zeros(1, requires_grad=True)
    opt = lib.optim.SGD([p], lr=1.0)
    sched = lib.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=anneal_epochs,
                                      anneal_strategy=strategy)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs, sched


@pytest.mark.parametrize("strategy,anneal", [("cos", 3), ("linear", 4), ("cos", 0)])
def test_swalr_formula_and_torch(strategy, anneal):
    lrs, sched = _swalr_lrs(cddp, strategy, anneal)
    f = (lambda s: (1 - np.cos(np.pi * s)) / 2) if strategy == "cos" else (lambda s: s)
    want = []
    for step in range(len(lrs)):      # closed form: lr_t = swa + (lr0 - swa) * (1 - f(t))
        tt = min(1.0, max(step, 1 if anneal == 0 else 0) / max(1, anneal))
        want.append(0.05 * f(tt) + 1.0 * (1 - f(tt)))
    np.testing.assert_allclose(lrs, want, rtol=1e-12)
    sd = sched.state_dict()
    assert "anneal_func" not in sd and sd["_anneal_strategy"] == strategy
    torch = pytest.importorskip("torch")
    tl, _ = _swalr_lrs(torch, strategy, anneal)
    np.testing.assert_allclose(lrs, tl, rtol=1e-12)


def test_swalr_checks():
    opt = cddp.optim.SGD([cddp.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy must be one of"):
        swa_utils.SWALR(opt, 0.01, anneal_strategy="exp")
    with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0"):
        swa_utils.SWALR(opt, 0.01, anneal_epochs=-1)


def test_averaged_model_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(5)]
    out = []
    for lib in (torch, cddp):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.Linear(4, 2))
        swa = lib.optim.swa_utils.AveragedModel(model)
        ema = lib.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=lib.optim.swa_utils.get_ema_multi_avg_fn(0.8))
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        for x in xs:
            opt.zero_grad()
            (model(lib.from_numpy(x)) ** 2).mean().backward()
            opt.step()
            swa.update_parameters(model)
            ema.update_parameters(model)
        lib.optim.swa_utils.update_bn([lib.from_numpy(x) for x in xs], swa)
        out.append((swa.state_dict(), ema.state_dict()))
    for a, b in zip(*out):
        assert list(a) == list(b)
        for k in a:
            np.testing.assert_allclose(n(b[k]), a[k].numpy(), rtol=2e-6, atol=1e-7, err_msg=k)


# ---- Rprop -----------------------------------------------------------------------------------

def test_rprop_by_hand():
    p = t(np.array([1.0, 1.0, 1.0, 1.0]), requires_grad=True)
    opt = cddp.optim.Rprop([p], lr=0.1, etas=(0.5, 2.0), step_sizes=(0.01, 0.3))
    grads = [[1.0, -1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0], [1.0, -1.0, 1.0, 1.0],
             [2.0, 3.0, 1.0, 1.0]]
    # per element: step size grows x2 (cap 0.3) while the sign repeats, halves (floor 0.01)
    # on a flip, where the element does not move and its memory resets to 0
    x, prev, step = np.ones(4), np.zeros(4), np.full(4, 0.1)
    for g in grads:
        g = np.array(g)
        s = np.sign(g * prev)
        step = np.clip(step * np.where(s > 0, 2.0, np.where(s < 0, 0.5, 1.0)), 0.01, 0.3)
        g = np.where(s < 0, 0.0, g)
        x = x - np.sign(g) * step
        prev = g
    # run the optimizer on the same gradients
    for g in grads:
        p.grad = t(np.array(g))
        opt.step()
    np.testing.assert_allclose(n(p), x, rtol=1e-12)
    st = opt.state[p]
    assert sorted(st) == ["prev", "step", "step_size"]
    assert float(st["step"]) == 4.0
    np.testing.assert_allclose(n(st["step_size"]), step, rtol=1e-12)
    np.testing.assert_allclose(n(st["prev"]), prev)
    with pytest.raises(ValueError, match="Invalid eta values"):
        cddp.optim.Rprop([p], etas=(1.5, 2.0))


@pytest.mark.parametrize("dtype,kw", [("float64", {}), ("float32", {"maximize": True}),
                                      ("float32", {"lr": 0.05, "etas": (0.3, 1.5),
                                                   "step_sizes": (1e-3, 0.2)})])
def test_rprop_against_torch(dtype, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 5)).astype(dtype)
    Y = rng.standard_normal((16, 2)).astype(dtype)
    W0 = rng.standard_normal((2, 5)).astype(dtype)
    res = []
    for lib in (torch, cddp):
        W = lib.from_numpy(W0.copy()).requires_grad_()
        opt = lib.optim.Rprop([W], **kw)
        losses = []
        for _ in range(12):
            opt.zero_grad()
            loss = ((lib.from_numpy(X) @ W.t() - lib.from_numpy(Y)) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        res.append((W.detach().numpy().copy(), losses,
                    {k: v.numpy() for k, v in opt.state_dict()["state"][0].items()}))
    (wa, la, sa), (wb, lb, sb) = res
    tol = 1e-12 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(wb, wa, rtol=tol, atol=tol)
    np.testing.assert_allclose(lb, la, rtol=tol)
    assert sorted(sa) == sorted(sb)
    for k in sa:
        np.testing.assert_allclose(sb[k], sa[k], rtol=tol, atol=tol, err_msg=k)
