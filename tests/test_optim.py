"""Optimizers and LR schedulers against torch: identical weights after several steps from the
same start for every SGD option combination, Adam, AdamW (amsgrad too); each scheduler's lr
sequence; state_dict layout and resume equivalence."""
import itertools
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from conftest import n



def _problem(seed=0):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((3, 4)).astype(np.float32)
    B = rng.standard_normal(3).astype(np.float32)
    X = rng.standard_normal((8, 4)).astype(np.float32)
    Y = rng.standard_normal((8, 3)).astype(np.float32)
    return W, B, X, Y


def _run(lib, make_opt, steps=6, seed=0, sched=None):
    """Train Linear(4,3) with MSE on fixed data; returns final weights and per-step lrs."""
    W, B, X, Y = _problem(seed)
    w = lib.tensor(W, requires_grad=True)
    b = lib.tensor(B, requires_grad=True)
    opt = make_opt(lib, [w, b])
    sch = sched(lib, opt) if sched else None
    x, y = lib.tensor(X), lib.tensor(Y)
    lrs = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((x @ w.t() + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        if sch is not None:
            sch.step()
            lrs.append(sch.get_last_lr()[0])
    return w.detach().numpy().copy(), b.detach().numpy().copy(), lrs


SGD_COMBOS = [dict(lr=0.1, momentum=m, dampening=d, nesterov=nv, weight_decay=wd, maximize=mx)
              for m, d, nv, wd, mx in itertools.product([0.0, 0.9], [0.0, 0.3], [False, True],
                                                        [0.0, 0.05], [False, True])
              if not (nv and (m == 0 or d != 0))]


@pytest.mark.parametrize("kw", SGD_COMBOS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_sgd_matches_torch(kw):
    torch = pytest.importorskip("torch")
    ours = _run(cddp, lambda lib, ps: lib.optim.SGD(ps, **kw))
    ref = _run(torch, lambda lib, ps: lib.optim.SGD(ps, **kw))
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.1])
@pytest.mark.parametrize("maximize", [False, True])
def test_adam_family_matches_torch(cls, amsgrad, wd, maximize):
    torch = pytest.importorskip("torch")
    kw = dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=wd, amsgrad=amsgrad,
              maximize=maximize)
    ours = _run(cddp, lambda lib, ps: getattr(lib.optim, cls)(ps, **kw), steps=8)
    ref = _run(torch, lambda lib, ps: getattr(lib.optim, cls)(ps, **kw), steps=8)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5, atol=1e-6)


def test_sgd_without_torch_matches_hand_computation():
    p = cddp.tensor([1.0, -2.0], requires_grad=True)
    opt = cddp.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.5)
    g = np.array([0.2, 0.4], np.float32)
    w = np.array([1.0, -2.0], np.float32)
    buf = None
    for _ in range(3):
        p.grad = cddp.tensor(g)
        opt.step()
        d = g + np.float32(0.5) * w
        buf = d if buf is None else buf * np.float32(0.9) + d
        w = w - np.float32(0.1) * buf
    np.testing.assert_allclose(n(p), w, rtol=1e-6)


SCHEDULERS = {
    "LambdaLR": lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e),
    "StepLR": lambda lib, o: lib.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    "MultiStepLR": lambda lib, o: lib.optim.lr_scheduler.MultiStepLR(o, [2, 5, 5], gamma=0.3),
    "ExponentialLR": lambda lib, o: lib.optim.lr_scheduler.ExponentialLR(o, gamma=0.8),
    "CosineAnnealingLR": lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4, eta_min=0.01),
    "LinearLR": lambda lib, o: lib.optim.lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=4),
    "OneCycleLR": lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=12),
    "OneCycleLR3": lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.5, total_steps=12, three_phase=True, anneal_strategy="linear"),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_schedulers_match_torch(name):
    torch = pytest.importorskip("torch")
    make = SCHEDULERS[name]
    opt = lambda lib, ps: lib.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    ours = _run(cddp, opt, steps=11, sched=make)
    ref = _run(torch, opt, steps=11, sched=make)
    np.testing.assert_allclose(ours[2], ref[2], rtol=1e-9)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)


def test_scheduler_state_dict_round_trip():
    p = cddp.zeros(1, requires_grad=True)
    opt = cddp.optim.SGD([p], lr=1.0)
    s = cddp.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(3):
        opt.step()
        s.step()
    state = s.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 3
    opt2 = cddp.optim.SGD([cddp.zeros(1, requires_grad=True)], lr=1.0)
    s2 = cddp.optim.lr_scheduler.StepLR(opt2, step_size=2, gamma=0.5)
    s2.load_state_dict(state)
    assert s2.last_epoch == 3 and s2.get_last_lr() == s.get_last_lr()


def test_scheduler_before_optimizer_warns():
    p = cddp.zeros(1, requires_grad=True)
    opt = cddp.optim.SGD([p], lr=1.0)
    s = cddp.optim.lr_scheduler.StepLR(opt, step_size=1)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        s.step()
    opt2 = cddp.optim.SGD([p], lr=1.0)
    s2 = cddp.optim.lr_scheduler.StepLR(opt2, step_size=1)
    opt2.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s2.step()


def test_param_groups_and_state_dict_layout():
    a = nn.Parameter(cddp.zeros(2))
    b = nn.Parameter(cddp.zeros(3))
    c = nn.Parameter(cddp.zeros(1))
    opt = cddp.optim.SGD([{"params": [a, b]}, {"params": [c], "lr": 0.5}], lr=0.1, momentum=0.9)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[1]["lr"] == 0.5
    for p in (a, b, c):
        p.grad = cddp.ones(p.shape)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert sorted(sd["state"]) == [0, 1, 2]
    assert set(sd["state"][0]) == {"momentum_buffer"}
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    d = nn.Parameter(cddp.zeros(1))
    opt.add_param_group({"params": d, "momentum": 0.0})
    assert opt.param_groups[2]["lr"] == 0.1 and opt.param_groups[2]["momentum"] == 0.0


def test_state_dict_layout_matches_torch():
    torch = pytest.importorskip("torch")
    for cls in ("SGD", "Adam"):
        layouts = []
        for lib in (cddp, torch):
            ps = [lib.zeros(2, requires_grad=True), lib.zeros(3, requires_grad=True)]
            kw = {"lr": 0.1, "momentum": 0.9} if cls == "SGD" else {"lr": 0.1}
            opt = getattr(lib.optim, cls)(ps, **kw)
            for p in ps:
                p.grad = lib.ones(p.shape)
            opt.step()
            sd = opt.state_dict()
            layouts.append((sorted(sd["state"]), sorted(sd["state"][0]),
                            sorted(sd["param_groups"][0]), sd["param_groups"][0]["params"]))
        assert layouts[0][0] == layouts[1][0] and layouts[0][1] == layouts[1][1]
        assert layouts[0][3] == layouts[1][3]
        assert set(layouts[1][2]) <= set(layouts[0][2]) | {"differentiable", "fused", "foreach",
                                                         "capturable", "decoupled_weight_decay"}


@pytest.mark.parametrize("cls,kw", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                    ("Adam", dict(lr=0.01, amsgrad=True))])
def test_resume_equivalence_through_checkpoint(tmp_path, cls, kw):
    """2N steps straight == N steps, save, load into fresh objects, N more steps."""
    def make():
        cddp.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = getattr(cddp.optim, cls)(net.parameters(), **kw)
        sch = cddp.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.7)
        return net, opt, sch

    rng = np.random.default_rng(0)
    data = [(cddp.tensor(rng.standard_normal((5, 4)).astype(np.float32)),
             cddp.tensor(rng.integers(0, 2, 5))) for _ in range(8)]

    def train(net, opt, sch, batches):
        for x, y in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            sch.step()

    net, opt, sch = make()
    train(net, opt, sch, data)
    straight = [n(p) for p in net.parameters()]

    net, opt, sch = make()
    train(net, opt, sch, data[:4])
    path = tmp_path / "ck.pt"
    cddp.save({"model": net.state_dict(), "opt": opt.state_dict(), "sched": sch.state_dict(),
               "epoch": 4}, path)
    net2, opt2, sch2 = make()
    ck = cddp.load(path)
    net2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    sch2.load_state_dict(ck["sched"])
    assert ck["epoch"] == 4
    train(net2, opt2, sch2, data[4:])
    for a, b in zip(straight, net2.parameters()):
        np.testing.assert_array_equal(a, n(b))
