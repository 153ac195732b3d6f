"""GradScaler (cddp.amp.GradScaler, cddp.cuda.amp.grad_scaler.GradScaler): the one-pass C
unscale + inf/NaN check against NumPy (float32/float64/float16/bfloat16, non-contiguous), the
scale's growth and backoff against a hand-computed float32 reference and torch's GradScaler fed
the same inf/NaN gradient sequence, step skipping, state_dict, errors, and the CUDA fallback."""
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import cddp
from cddp import _C
from conftest import n, subprocess_env, t


def _bf16_round(x32):
    """float32 array -> float32 values rounded to bfloat16 (round to nearest even), NumPy only."""
    u = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    out = r.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x32), np.float32(np.nan), out)


def _sample(rng, shape, bad=None):
    a = (rng.standard_normal(shape) * 1000).astype(np.float32)
    if bad is not None:
        a.flat[rng.integers(0, a.size)] = bad
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
def test_unscale_values_and_found_inf_vs_numpy(dtype, bad):
    rng = np.random.default_rng(0)
    inv = np.float32(1 / 1024.0 * 3)                     # not a power of two: rounding matters
    arrays = [_sample(rng, (37,)), _sample(rng, (5, 7), bad), _sample(rng, (1000,))]
    dt = getattr(cddp, dtype)
    grads = [t(a).to(dt) for a in arrays]
    found = cddp.zeros((), dtype=cddp.float32)
    _C._amp_foreach_non_finite_check_and_unscale_(grads, found, cddp.full((), float(inv)))
    assert found.item() == (0.0 if bad is None else 1.0)
    for g, a in zip(grads, arrays):
        if dtype == "float32":
            want = a * inv
        elif dtype == "float64":
            want = a.astype(np.float64) * np.float64(inv)
        elif dtype == "float16":
            want = (a.astype(np.float16).astype(np.float32) * inv).astype(np.float16)
        else:
            want = _bf16_round(_bf16_round(a) * inv)
        got = n(g.float()) if dtype in ("float16", "bfloat16") else n(g)
        np.testing.assert_array_equal(got, np.asarray(want, dtype=got.dtype))


def test_unscale_mixed_list_noncontiguous_and_found_inf_sticks():
    rng = np.random.default_rng(1)
    a = _sample(rng, (6, 8))
    base = t(a)
    view = base.t()                                       # non-contiguous, written through
    other = t(_sample(rng, (4,))).bfloat16()
    found = cddp.full((), 1.0)                            # a previous hit stays recorded
    _C._amp_foreach_non_finite_check_and_unscale_([view, other], found, cddp.full((), 0.5))
    np.testing.assert_array_equal(n(base), a * np.float32(0.5))
    assert found.item() == 1.0
    _C._amp_foreach_non_finite_check_and_unscale_([], found, cddp.full((), 0.5))


def test_unscale_and_update_argument_errors():
    g = [cddp.ones(3)]
    with pytest.raises(RuntimeError, match="found_inf must be a 1-element float tensor"):
        _C._amp_foreach_non_finite_check_and_unscale_(g, cddp.zeros(2), cddp.ones(()))
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element float tensor"):
        _C._amp_foreach_non_finite_check_and_unscale_(g, cddp.zeros(()),
                                                      cddp.ones((), dtype=cddp.float64))
    with pytest.raises(RuntimeError, match="not a floating point Tensor"):
        _C._amp_foreach_non_finite_check_and_unscale_([cddp.ones(3, dtype=cddp.int64)],
                                                      cddp.zeros(()), cddp.ones(()))
    with pytest.raises(TypeError):
        _C._amp_foreach_non_finite_check_and_unscale_(5, cddp.zeros(()), cddp.ones(()))
    tracker = cddp.zeros((), dtype=cddp.int32)
    with pytest.raises(RuntimeError, match="growth_tracker must be a single-element int tensor"):
        _C._amp_update_scale_(cddp.ones(()), cddp.zeros(()), cddp.zeros(()), 2.0, 0.5, 3)
    with pytest.raises(RuntimeError, match="current_scale must be a single-element float tensor"):
        _C._amp_update_scale_(cddp.ones(2), tracker, cddp.zeros(()), 2.0, 0.5, 3)


def _ref_update(scale, tracker, found, growth, backoff, interval):
    """torch's _amp_update_scale_ CPU kernel, by hand: float32 scale, products in double."""
    if found:
        return np.float32(np.float64(scale) * backoff), 0
    if tracker + 1 == interval:
        new = np.float32(np.float64(scale) * growth)
        return (new if np.isfinite(new) else scale), 0
    return scale, tracker + 1


SEQ = [None, None, np.inf, None, None, None, None, np.nan, None, -np.inf, None, None, None,
       None, None, None, None]


def _train(lib, seq, init_scale=2.0**16, growth_interval=3, growth_factor=2.0, backoff=0.5):
    """One parameter, SGD; iteration i's gradient holds seq[i] (None: all finite)."""
    p = lib.tensor([1.0, -2.0, 3.0, 0.5], requires_grad=True)
    opt = lib.optim.SGD([p], lr=0.01)
    scaler = lib.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                                backoff_factor=backoff, growth_interval=growth_interval)
    scales, params, rets = [], [], []
    for bad in seq:
        opt.zero_grad()
        c = lib.tensor([0.5, 1.0, -1.5, 2.0 if bad is None else float(bad)])
        loss = (p * c).sum()
        scaler.scale(loss).backward()
        rets.append(scaler.step(opt))
        scaler.update()
        scales.append(scaler.get_scale())
        params.append(p.detach().numpy().copy() if lib is not cddp else n(p))
    return scales, params, rets, scaler


def test_scale_sequence_matches_hand_reference():
    for kw in ({}, {"init_scale": 3.0e38, "growth_interval": 2},
               {"backoff": 0.3, "growth_factor": 1.7}):
        scales, params, rets, scaler = _train(cddp, SEQ, **kw)
        s, tr = np.float32(kw.get("init_scale", 2.0**16)), 0
        want = []
        for bad in SEQ:
            c = np.array([0.5, 1.0, -1.5, 2.0 if bad is None else bad], np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                found = not np.isfinite(c * s).all()        # the scaled gradient may overflow
                s, tr = _ref_update(s, tr, found, kw.get("growth_factor", 2.0),
                                    kw.get("backoff", 0.5), kw.get("growth_interval", 3))
            want.append(float(s))
        assert scales == want
        assert scaler._get_growth_tracker() == tr
    # skipped steps leave the parameter alone; finite ones move it (SGD's return: None)
    for i, bad in enumerate(SEQ[1:], 1):
        assert np.array_equal(params[i], params[i - 1]) == (bad is not None)
    assert rets == [None] * len(SEQ)


@pytest.mark.parametrize("kw", [{}, {"init_scale": 3.0e38, "growth_interval": 2},
                                {"backoff": 0.3, "growth_factor": 1.7, "init_scale": 1000.0}])
def test_scale_sequence_and_params_match_torch(torch, kw):
    sc, pc, _, _ = _train(cddp, SEQ, **kw)
    st, pt, _, _ = _train(torch, SEQ, **kw)
    assert sc == st
    for a, b in zip(pc, pt):
        np.testing.assert_array_equal(a, b)


class _Opt:
    """An optimizer whose step returns a value, to check step() passes it through."""

    def __init__(self, params):
        self.param_groups = [{"params": params}]
        self.calls = 0

    def step(self, *args, **kwargs):
        self.calls += 1
        return ("stepped", args, kwargs)


def test_step_returns_optimizer_value_and_stage_errors():
    p = cddp.ones(3, requires_grad=True)
    opt = _Opt([p])
    scaler = cddp.amp.GradScaler("cpu", init_scale=8.0)
    scaler.scale((p * 2).sum()).backward()
    assert p.grad.tolist() == [16.0] * 3
    scaler.unscale_(opt)
    assert p.grad.tolist() == [2.0] * 3
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    assert scaler.step(opt, 1, k=2) == ("stepped", (1,), {"k": 2})
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step"):
        scaler.unscale_(opt)
    scaler.update()
    p.grad = cddp.tensor([1.0, float("nan"), 1.0])
    assert scaler.step(opt) is None and opt.calls == 1
    scaler.update()
    assert scaler.get_scale() == 4.0
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: 0)
    h = cddp.ones(3, dtype=cddp.float16, requires_grad=True)
    h.grad = cddp.ones(3, dtype=cddp.float16)
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(_Opt([h]))


def test_update_new_scale_state_dict_pickle_and_disabled():
    scaler = cddp.amp.GradScaler("cpu", init_scale=16.0, growth_interval=7)
    with pytest.raises(AssertionError, match="Attempted update but _scale is None"):
        scaler.update()
    out = scaler.scale([cddp.ones(2), (cddp.ones(1) * 2,)])
    assert out[0].tolist() == [16.0, 16.0] and out[1][0].tolist() == [32.0]
    scaler.update(new_scale=2.0)
    assert scaler.get_scale() == 2.0
    scaler.update(new_scale=cddp.full((), 5.0))
    sd = scaler.state_dict()
    assert sd == {"scale": 5.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                  "growth_interval": 7, "_growth_tracker": 0}
    other = cddp.amp.GradScaler("cpu")
    other.load_state_dict(sd)
    assert other.state_dict() == sd and other.get_growth_interval() == 7
    clone = pickle.loads(pickle.dumps(scaler))
    assert clone.get_scale() == 5.0 and clone._scale is None
    off = cddp.amp.GradScaler("cpu", enabled=False)
    x = cddp.ones(2)
    assert off.scale(x) is x and off.get_scale() == 1.0 and off.state_dict() == {}
    assert not off.is_enabled() and scaler.is_enabled()
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        other.load_state_dict({})
    with pytest.raises(AssertionError, match="growth factor must be > 1.0"):
        cddp.amp.GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(AssertionError, match="backoff factor must be < 1.0"):
        cddp.amp.GradScaler("cpu", backoff_factor=1.0)
    with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable"):
        scaler.scale(3)


def test_state_dict_matches_torch(torch):
    _, _, _, sc = _train(cddp, SEQ[:5])
    _, _, _, st = _train(torch, SEQ[:5])
    assert sc.state_dict() == st.state_dict()


PROBE = """
import warnings, cddp
from cddp.cuda.amp.grad_scaler import GradScaler
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    s = GradScaler(growth_interval=100)
    s2 = cddp.amp.GradScaler()
    p = cddp.ones(2, requires_grad=True)
    opt = cddp.optim.SGD([p], lr=0.1)
    s.scale(p.sum()).backward()
    s.step(opt)
    s.update()
msgs = [str(i.message) for i in w]
print(sum("CUDA requested" in m for m in msgs), sum("deprecated" in m for m in msgs),
      s.is_enabled(), s2.is_enabled(), p.tolist())
"""


def test_cuda_grad_scaler_falls_back_with_one_warning():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=subprocess_env(), cwd=tempfile.gettempdir(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1", "True", "True", "[0.8999999761581421,",
                                "0.8999999761581421]"]


def test_cuda_grad_scaler_strict_refuses():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=subprocess_env(CDDP_STRICT_DEVICE=1), cwd=tempfile.gettempdir(),
                       timeout=60)
    assert r.returncode != 0 and "CDDP_STRICT_DEVICE" in r.stderr and "RuntimeError" in r.stderr
