"""CyclicLR, ReduceLROnPlateau, SequentialLR, ChainedScheduler, PolynomialLR,
CosineAnnealingWarmRestarts, ConstantLR, MultiplicativeLR and user subclasses of LRScheduler.

Oracles: each schedule's closed form (or a hand-worked metric sequence for ReduceLROnPlateau)
computed here in plain Python, and torch's schedulers stepping the same optimizer when torch
is installed (the lr sequences, momentum/betas included, agree to 1e-12).
"""
import math

import numpy as np
import pytest

import cddp

SCHEDULERS = {
    "ConstantLR": lambda lib, o: lib.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=4),
    "MultiplicativeLR": lambda lib, o: lib.optim.lr_scheduler.MultiplicativeLR(
        o, lambda e: 0.95 if e % 2 else 0.9),
    "PolynomialLR": lambda lib, o: lib.optim.lr_scheduler.PolynomialLR(o, total_iters=8, power=2.0),
    "CosineAnnealingWarmRestarts": lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.01),
    "CosineAnnealingWarmRestarts1": lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=4),
    "CyclicLR-triangular": lambda lib, o: lib.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=2),
    "CyclicLR-triangular2": lambda lib, o: lib.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=2, mode="triangular2"),
    "CyclicLR-exp_range": lambda lib, o: lib.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=2, mode="exp_range", gamma=0.9,
        cycle_momentum=False),
    "CyclicLR-scale_fn": lambda lib, o: lib.optim.lr_scheduler.CyclicLR(
        o, base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=2, scale_fn=lambda x: 0.5 ** x,
        scale_mode="iterations"),
    "SequentialLR": lambda lib, o: lib.optim.lr_scheduler.SequentialLR(
        o, [lib.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3),
            lib.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
            lib.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)], milestones=[3, 7]),
    "ChainedScheduler": lambda lib, o: lib.optim.lr_scheduler.ChainedScheduler(
        [lib.optim.lr_scheduler.ConstantLR(o, factor=0.1, total_iters=2),
         lib.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
}


class _PolyScheduler:
    """seed000_arcface.py's PolyScheduler, for either library."""

    @staticmethod
    def make(lib, o):
        class PolyScheduler(lib.optim.lr_scheduler.LRScheduler):
            def __init__(self, optimizer, base_lr, max_steps, warmup_steps, last_epoch=-1):
                self.base_lr, self.max_steps = base_lr, max_steps
                self.warmup_steps, self.power = warmup_steps, 2
                self.warmup_lr_init = 0.0001
                super().__init__(optimizer, -1)
                self.last_epoch = last_epoch

            def get_lr(self):
                step = max(self.last_epoch, 0)
                if step < self.warmup_steps:
                    lr = self.warmup_lr_init + (self.base_lr - self.warmup_lr_init) * step \
                        / self.warmup_steps
                else:
                    alpha = (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps)
                    lr = self.base_lr * max(0.0, 1 - alpha) ** self.power
                return [lr for _ in self.optimizer.param_groups]
        return PolyScheduler(o, base_lr=0.1, max_steps=10, warmup_steps=3)


SCHEDULERS["PolyScheduler(seed000)"] = _PolyScheduler.make


def _trace(lib, name, steps=14, two_groups=True):
    """lr (and momentum) of every group after construction and after each step."""
    ps = [lib.zeros(2, requires_grad=True), lib.zeros(2, requires_grad=True)]
    groups = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.05}] if two_groups \
        else [{"params": ps}]
    opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9)
    sch = SCHEDULERS[name](lib, opt)
    out = []
    for _ in range(steps):
        out.append([(g["lr"], g["momentum"]) for g in opt.param_groups] + [sch.get_last_lr()])
        opt.step()
        sch.step()
    out.append([(g["lr"], g["momentum"]) for g in opt.param_groups] + [sch.get_last_lr()])
    return out


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_lr_sequences_match_torch(torch, name):
    ours, theirs = _trace(cddp, name), _trace(torch, name)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.array(a, dtype=float), np.array(b, dtype=float),
                                   rtol=1e-12, atol=1e-15)


def _lrs(name, steps=14):
    return [row[0][0] for row in _trace(cddp, name, steps, two_groups=False)]


def test_closed_forms():
    np.testing.assert_allclose(_lrs("ConstantLR", 6), [0.05] * 4 + [0.1] * 3, rtol=1e-12)
    np.testing.assert_allclose(_lrs("PolynomialLR", 10),
                               [0.1 * (1 - min(e, 8) / 8) ** 2 for e in range(11)], atol=1e-15)
    want, lr = [0.1], 0.1
    for e in range(1, 8):
        lr *= 0.95 if e % 2 else 0.9
        want.append(lr)
    np.testing.assert_allclose(_lrs("MultiplicativeLR", 7), want, rtol=1e-12)
    # SGDR, T_0=3, T_mult=2: restarts at 3 and 9
    t_cur = [0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1]
    t_i = [3] * 3 + [6] * 6 + [12] * 2
    np.testing.assert_allclose(
        _lrs("CosineAnnealingWarmRestarts", 10),
        [0.01 + 0.09 * (1 + math.cos(math.pi * c / i)) / 2 for c, i in zip(t_cur, t_i)],
        rtol=1e-12)
    # triangular, up 3 down 2: 0.01 -> 0.1 over 3 steps, back over 2
    tri = [0.01 + 0.09 * f for f in (0, 1 / 3, 2 / 3, 1, 0.5, 0, 1 / 3, 2 / 3, 1)]
    np.testing.assert_allclose(_lrs("CyclicLR-triangular", 8), tri, rtol=1e-12)
    tri2 = [0.01 + 0.09 * f * s for f, s in zip((0, .5, 1, .5, 0, .5, 1, .5, 0),
                                               (1, 1, 1, 1, .5, .5, .5, .5, .25))]
    np.testing.assert_allclose(_lrs("CyclicLR-triangular2", 8), tri2, rtol=1e-12, atol=1e-15)
    # LinearLR 0.1->1 over 3 steps, ExponentialLR from its own epoch 0 at 3, StepLR at 7
    seq = [0.1 * (0.1 + 0.9 * e / 3) for e in range(3)] + [0.1 * 0.9 ** k for k in range(4)] \
        + [0.1 * 0.5 ** (k // 2) for k in range(4)]
    np.testing.assert_allclose(_lrs("SequentialLR", 10), seq, rtol=1e-12)
    np.testing.assert_allclose(_lrs("ChainedScheduler", 5),
                               [0.1 * 0.1 * 0.9 ** 0, 0.1 * 0.1 * 0.9, 0.1 * 0.9 ** 2,
                                0.1 * 0.9 ** 3, 0.1 * 0.9 ** 4, 0.1 * 0.9 ** 5], rtol=1e-12)


def test_cyclic_momentum_is_inverse_to_lr():
    rows = _trace(cddp, "CyclicLR-triangular", 8, two_groups=False)
    for (lr, mom), _ in rows:
        f = (lr - 0.01) / 0.09
        assert abs(mom - (0.9 - 0.1 * f)) < 1e-12
    p = cddp.zeros(1, requires_grad=True)
    adam = cddp.optim.Adam([p], lr=0.1)
    s = cddp.optim.lr_scheduler.CyclicLR(adam, 0.01, 0.1, step_size_up=2)
    adam.step()
    s.step()
    assert adam.param_groups[0]["betas"] == (pytest.approx(0.85), 0.999)
    with pytest.raises(ValueError, match="optimizer must support momentum"):
        cddp.optim.lr_scheduler.CyclicLR(cddp.optim.Adagrad([p]), 0.01, 0.1)


def test_reduce_lr_on_plateau_by_hand():
    p = cddp.zeros(1, requires_grad=True)
    opt = cddp.optim.SGD([p], lr=1.0)
    s = cddp.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1, cooldown=1,
                                                  threshold=0.1, min_lr=0.2)
    lrs = []
    for metric in (10, 9.5, 9.5, 9.5, 9.5, 9.5, 9.5, 9.5, 1, 1, 1, 1):
        s.step(metric)
        lrs.append(opt.param_groups[0]["lr"])
    # 9.5 is not 10% better than 10: two bad epochs -> halve; cooldown 1; never below 0.2
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25, 0.2, 0.2]
    assert s.get_last_lr() == [0.2]
    sd = s.state_dict()
    s2 = cddp.optim.lr_scheduler.ReduceLROnPlateau(cddp.optim.SGD([p], lr=1.0))
    s2.load_state_dict(sd)
    assert (s2.best, s2.num_bad_epochs, s2.patience, s2.mode) == (1, s.num_bad_epochs, 1, "min")
    with pytest.raises(ValueError, match="Factor should be < 1.0."):
        cddp.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode avg is unknown!"):
        cddp.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="avg")


@pytest.mark.parametrize("mode,threshold_mode", [("min", "abs"), ("max", "rel"), ("max", "abs")])
def test_reduce_lr_on_plateau_matches_torch(torch, mode, threshold_mode):
    metrics = [5, 4, 4.05, 3.99, 4.2, 4.3, 4.1, 3, 3.01, 3.02, 3.03, 2.9, 2.95, 3.1]
    metrics = metrics if mode == "min" else [-m for m in metrics]
    out = []
    for lib in (cddp, torch):
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0)
        s = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, factor=0.3, patience=2,
                                                     threshold=0.02, threshold_mode=threshold_mode,
                                                     cooldown=2, min_lr=0.05, eps=1e-3)
        lrs = []
        for m in metrics:
            s.step(m)
            lrs.append(opt.param_groups[0]["lr"])
        out.append(lrs)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-12)


@pytest.mark.parametrize("name", ["SequentialLR", "ChainedScheduler", "CyclicLR-triangular2",
                                  "CosineAnnealingWarmRestarts", "PolynomialLR"])
def test_state_dict_round_trip(name):
    """k steps, state_dict into a fresh scheduler on a fresh optimizer, the rest: the same
    lrs as without the interruption."""
    straight = _lrs(name, 10)
    p = cddp.zeros(2, requires_grad=True)
    opt = cddp.optim.SGD([p], lr=0.1, momentum=0.9)
    sch = SCHEDULERS[name](cddp, opt)
    for _ in range(4):
        opt.step()
        sch.step()
    sd, osd = sch.state_dict(), opt.state_dict()
    assert "optimizer" not in sd
    opt2 = cddp.optim.SGD([cddp.zeros(2, requires_grad=True)], lr=0.1, momentum=0.9)
    sch2 = SCHEDULERS[name](cddp, opt2)
    opt2.load_state_dict(osd)
    sch2.load_state_dict(sd)
    got = [opt2.param_groups[0]["lr"]]
    for _ in range(6):
        opt2.step()
        sch2.step()
        got.append(opt2.param_groups[0]["lr"])
    np.testing.assert_allclose(got, straight[4:], rtol=1e-12)


def test_lr_scheduler_base_class_and_errors():
    p = cddp.zeros(1, requires_grad=True)
    opt = cddp.optim.SGD([p], lr=0.1)
    assert cddp.optim.lr_scheduler.LRScheduler is cddp.optim.lr_scheduler._LRScheduler
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        cddp.optim.lr_scheduler.PolynomialLR(opt).get_lr()
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        cddp.optim.lr_scheduler.SequentialLR(opt, [], [])
    other = cddp.optim.SGD([cddp.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="expects all schedulers to belong to the same optimizer"):
        cddp.optim.lr_scheduler.ChainedScheduler(
            [cddp.optim.lr_scheduler.StepLR(opt, 2), cddp.optim.lr_scheduler.StepLR(other, 2)])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        cddp.optim.lr_scheduler.SequentialLR(
            opt, [cddp.optim.lr_scheduler.ReduceLROnPlateau(opt),
                  cddp.optim.lr_scheduler.StepLR(opt, 2)], [2])
    with pytest.raises(ValueError, match="Expected positive integer T_0, but got 0"):
        cddp.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=0)
