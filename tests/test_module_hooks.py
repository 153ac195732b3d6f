"""nn.Module's backward hooks (register_full_backward_hook / _pre_hook, the deprecated
register_backward_hook), the global torch.nn.modules.module.register_module_* hooks, the
state_dict / load_state_dict hooks and forward hooks with always_call.

Each scenario is written once against a library `lib` (cddp, or torch when installed) and
records what the hooks saw as NumPy arrays / names: the torch-free tests check the records
against hand-computed values, the torch tests check that cddp's records equal torch's.
"""
import datetime
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import cddp
from cddp import nn

try:
    import torch
except ImportError:      # the torch comparisons skip; everything else runs
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def rec(x):
    """A hook argument as something comparable: arrays for tensors, None kept, tuples mapped."""
    if isinstance(x, tuple):
        return tuple(rec(v) for v in x)
    if x is None:
        return None
    return np.array(x.detach().numpy(), copy=True)


def same(a, b):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), (a, b)
        for u, v in zip(a, b):
            same(u, v)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    else:
        assert a == b, (a, b)


class TwoInTwoOut:
    """forward(x, y, k) = (x * 2, y * 3), built on lib.nn.Module."""

    def __new__(cls, lib):
        class M(lib.nn.Module):
            def forward(self, x, y, k=3):
                return x * 2, y * 3
        return M()


# ---- full backward hooks -----------------------------------------------------------------

def scenario_full(lib):
    log = []
    m = TwoInTwoOut(lib)
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", rec(go))))
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("full", rec(gi), rec(go))))
    x = lib.ones(2, requires_grad=True)
    y = lib.ones(2, requires_grad=True)
    a, b = m(x, y, 1)
    (a * lib.tensor([1.0, 5.0])).sum().backward()
    log.append(("grads", rec(x.grad), rec(y.grad)))
    return log


def test_full_hooks_numpy():
    log = scenario_full(cddp)
    zeros = np.zeros(2)
    go = (np.array([1.0, 5.0]), None)           # b got no gradient: None, as torch
    same(log, [("pre", go),
               ("full", (np.array([2.0, 10.0]), zeros, None), go),   # k is not a tensor
               ("grads", np.array([2.0, 10.0]), zeros)])


@needs_torch
def test_full_hooks_torch():
    same(scenario_full(cddp), scenario_full(torch))


def scenario_modify_and_order(lib):
    log = []
    r = lib.nn.ReLU()
    r.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 10,))
    r.register_full_backward_pre_hook(lambda mod, go: (go[0] + 1,))
    x = lib.tensor([1.0, -1.0, 2.0], requires_grad=True)
    r(x).sum().backward()
    log.append(rec(x.grad))
    lib.manual_seed(0)
    seq = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Tanh())
    for i, mm in enumerate(seq):
        mm.register_full_backward_pre_hook(lambda mod, go, i=i: log.append(f"pre {i}"))
        mm.register_full_backward_hook(lambda mod, gi, go, i=i: log.append(f"full {i}"))
    seq.register_full_backward_pre_hook(lambda mod, go: log.append("pre seq"))
    seq.register_full_backward_hook(lambda mod, gi, go: log.append("full seq"))
    # prepend puts a hook first
    seq.register_full_backward_hook(lambda mod, gi, go: log.append("full seq first"),
                                    prepend=True)
    xx = lib.ones(1, 2, requires_grad=True)
    for _ in range(2):            # once per backward
        seq(xx).sum().backward()
    return log


def test_modify_and_order_numpy():
    log = scenario_modify_and_order(cddp)
    # pre-hook adds 1 to grad_output (1 -> 2), relu passes it where x > 0, hook scales by 10
    np.testing.assert_array_equal(log[0], [20.0, 0.0, 20.0])
    one = ["pre seq", "pre 1", "full 1", "pre 0", "full 0", "full seq first", "full seq"]
    assert log[1:] == one + one


@needs_torch
def test_modify_and_order_torch():
    same(scenario_modify_and_order(cddp), scenario_modify_and_order(torch))


def scenario_no_input_grad(lib):
    log = []
    lib.manual_seed(0)
    lin = lib.nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda mod, gi, go: log.append(("full", rec(gi), rec(go))))
    lin.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", rec(go))))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lin(lib.ones(1, 2)).sum().backward()
    log.append([str(x.message)[:60] for x in w])
    # mixed: the input that needs no grad gets torch's materialized zero
    m = TwoInTwoOut(lib)
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("mixed", rec(gi), rec(go))))
    a, b = m(lib.ones(2, requires_grad=True), lib.ones(2))
    (a.sum() + b.sum()).backward()
    # a hook that returns gradients where no input needs one
    bad = lib.nn.Linear(2, 2)
    bad.register_full_backward_hook(lambda mod, gi, go: (lib.ones(1, 2),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            bad(lib.ones(1, 2)).sum().backward()
        except RuntimeError as e:
            log.append(str(e))
    return log


def test_no_input_grad_numpy():
    log = scenario_no_input_grad(cddp)
    go = (np.ones((1, 2)),)
    same(log[0], ("pre", go))
    same(log[1], ("full", (None,), go))       # fires at the outputs, grad_input (None,)
    assert log[2] == ["Full backward hook is firing when gradients are computed wit"]
    # b = y * 3 needs no grad: its grad_output is None
    same(log[3], ("mixed", (np.full(2, 2.0), np.zeros(2)), (np.ones(2), None)))
    assert "no input requires gradient should always return None" in log[4]


@needs_torch
def test_no_input_grad_torch():
    same(scenario_no_input_grad(cddp), scenario_no_input_grad(torch))


def test_hook_errors_and_removal():
    m = nn.ReLU()
    h = m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    x = cddp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of "
                                           "grad_input, got 2, but expected 1"):
        m(x).sum().backward()
    h.remove()
    m.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number of "
                                           "grad_output, got 2, but expected 1"):
        m(x).sum().backward()
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full"):
        r = nn.ReLU()
        r.register_full_backward_hook(lambda *a: None)
        r.register_backward_hook(lambda *a: None)
    # removed hooks no longer fire; the module's output is unchanged by the hooks
    calls = []
    r = nn.Sigmoid()
    h = r.register_full_backward_hook(lambda *a: calls.append(1))
    y = r(x)
    np.testing.assert_allclose(y.detach().numpy(), 1 / (1 + np.exp(-np.ones(2))), rtol=1e-6)
    y.sum().backward()
    h.remove()
    r(x).sum().backward()
    assert calls == [1]
    # no grad mode: nothing is recorded, nothing fires
    with cddp.no_grad():
        r.register_full_backward_hook(lambda *a: calls.append(2))
        assert not r(x).requires_grad


def scenario_old_style(lib):
    """register_backward_hook: torch's FutureWarnings; the arguments for a one-op module."""
    log = []
    r = lib.nn.ReLU()
    r.register_backward_hook(lambda mod, gi, go: log.append(("old", rec(gi), rec(go))))
    x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for inp in (x * 1, x):        # a non-leaf input: one node, no warning; a leaf: warning
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = r(inp)
        log.append([str(v.message)[:60] for v in w])
        (out * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
    return log


def test_old_style_numpy():
    log = scenario_old_style(cddp)
    gi, go = (np.array([1.0, 0.0, 3.0]),), (np.array([1.0, 2.0, 3.0]),)
    same(log, [[], ("old", gi, go),
               ["Using a non-full backward hook when the forward contains mul"],
               ("old", gi, go)])


@needs_torch
def test_old_style_torch():
    same(scenario_old_style(cddp), scenario_old_style(torch))


# ---- global hooks --------------------------------------------------------------------------

def scenario_global(lib):
    mm = lib.nn.modules.module
    log = []
    handles = [
        mm.register_module_forward_pre_hook(lambda m, a: log.append("fpre " + type(m).__name__)),
        mm.register_module_forward_hook(lambda m, a, o: log.append("fwd " + type(m).__name__)),
        mm.register_module_full_backward_pre_hook(
            lambda m, go: log.append("bpre " + type(m).__name__)),
        mm.register_module_full_backward_hook(
            lambda m, gi, go: log.append("bwd " + type(m).__name__)),
    ]
    try:
        lib.manual_seed(0)
        seq = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.ReLU())
        seq.register_forward_hook(lambda m, a, o: log.append("own fwd"))
        seq.register_full_backward_hook(lambda m, gi, go: log.append("own bwd"))
        seq(lib.ones(1, 2, requires_grad=True)).sum().backward()
        try:
            mm.register_module_backward_hook(lambda *a: None)
        except RuntimeError as e:
            log.append(str(e))
    finally:
        for h in handles:
            h.remove()
    seq(lib.ones(1, 2, requires_grad=True)).sum().backward()    # only the module's own now
    return log


def test_global_hooks_numpy():
    log = scenario_global(cddp)
    assert log == ["fpre Sequential", "fpre Linear", "fwd Linear", "fpre ReLU", "fwd ReLU",
                   "fwd Sequential", "own fwd",
                   "bpre Sequential", "bpre ReLU", "bwd ReLU", "bpre Linear", "bwd Linear",
                   "bwd Sequential", "own bwd",
                   "Cannot use both regular backward hooks and full backward hooks as a "
                   "global Module hook. Please use only one of them.",
                   "own fwd", "own bwd"]
    from cddp.nn.modules.module import register_module_forward_hook  # noqa: F401 (torch's path)


@needs_torch
def test_global_hooks_torch():
    same(scenario_global(cddp), scenario_global(torch))


def test_forward_hook_always_call():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    m = Boom()
    seen = []
    m.register_forward_hook(lambda mod, a, o: seen.append("always"), always_call=True)
    m.register_forward_hook(lambda mod, a, o: seen.append("normal"))
    with pytest.raises(ValueError, match="boom"):
        m(cddp.ones(1))
    assert seen == ["always"]


# ---- DDP -------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_hooks_under_ddp(tmp_path, monkeypatch):
    """Hooks on the wrapped module and on the DDP wrapper fire once per backward, and the
    gradients are those of the plain model."""
    import cddp.distributed as dist
    from cddp.nn.parallel import DistributedDataParallel as DDP
    from _teststore import DirStore
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    dist.init_process_group("gloo", store=DirStore(str(tmp_path)), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        def model():
            cddp.manual_seed(1)
            return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        ref = model()
        ddp = DDP(model())
        log = []
        ddp.module[0].register_full_backward_hook(
            lambda m, gi, go: log.append(("inner", rec(gi), rec(go))))
        ddp.register_full_backward_pre_hook(lambda m, go: log.append(("outer pre", rec(go))))
        x = cddp.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
        for step in range(2):
            ddp.zero_grad()
            ref.zero_grad()
            ddp(x).pow(2).sum().backward()
            ref(x).pow(2).sum().backward()
        for p, q in zip(ddp.module.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)
        assert [e[0] for e in log] == ["outer pre", "inner"] * 2
        inner = log[1]
        assert inner[1] == (None,)           # x needs no grad
        np.testing.assert_allclose(inner[2][0].shape, (2, 4))
        np.testing.assert_allclose(log[0][1][0], 2 * ref(x).detach().numpy(), rtol=1e-6)
    finally:
        dist.destroy_process_group()


# ---- state_dict hooks ---------------------------------------------------------------------------

def scenario_state_dict(lib):
    log = []
    lib.manual_seed(0)
    outer = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 1))
    inner = outer[1]
    inner.register_state_dict_pre_hook(lambda m, prefix, keep: log.append(("pre", prefix, keep)))

    def post(m, sd, prefix, meta):
        log.append(("post", prefix, sorted(sd), meta.get("version")))
        sd[prefix + "extra"] = lib.zeros(1)
    inner.register_state_dict_post_hook(post)
    sd = outer.state_dict()
    log.append(sorted(sd))
    # the private hook's returned dict is kept at the root
    h = outer._register_state_dict_hook(lambda m, sd, prefix, meta: OrderedDict(only=lib.ones(1)))
    log.append(sorted(outer.state_dict()))
    h.remove()
    try:
        outer._register_state_dict_hook(post)
    except RuntimeError as e:
        log.append(str(e)[:50])
    bad = lib.nn.Linear(1, 1)
    bad.register_state_dict_post_hook(lambda m, sd, prefix, meta: sd)
    try:
        bad.state_dict()
    except RuntimeError as e:
        log.append(str(e))

    # load: a pre-hook renames a legacy key; a post-hook sees and edits the incompatible keys
    def load_pre(m, sd, prefix, meta, strict, missing, unexpected, errors):
        log.append(("load pre", type(m).__name__, prefix, strict))
        if prefix + "w_old" in sd:
            sd[prefix + "weight"] = sd.pop(prefix + "w_old")
    inner.register_load_state_dict_pre_hook(load_pre)

    def load_post(m, keys):
        log.append(("load post", type(m).__name__, sorted(keys.missing_keys),
                    sorted(keys.unexpected_keys)))
        keys.missing_keys.clear()
    outer.register_load_state_dict_post_hook(load_post)
    sd = outer.state_dict()
    sd["1.w_old"] = sd.pop("1.weight") * 0 + 7
    del sd["0.bias"]
    res = outer.load_state_dict(sd, strict=False)
    log.append((sorted(res.missing_keys), sorted(res.unexpected_keys)))
    log.append(rec(inner.weight))
    sd = outer.state_dict()
    del sd["0.bias"], sd["1.extra"]
    outer.load_state_dict(sd)           # strict: the post-hook cleared the missing key
    sd["junk"] = lib.zeros(1)
    try:
        outer.load_state_dict(sd)
    except RuntimeError as e:
        log.append(str(e).splitlines()[1].strip())
    return log


def test_state_dict_hooks_numpy():
    log = scenario_state_dict(cddp)
    sd_hooks = [("pre", "1.", False),
                ("post", "1.", ["0.bias", "0.weight", "1.bias", "1.weight"], 1)]
    assert log[0:2] == sd_hooks
    assert log[2] == ["0.bias", "0.weight", "1.bias", "1.extra", "1.weight"]
    assert log[5] == ["only"]           # the private hook's dict, from the root
    assert log[6] == "Cannot register the same function as the state dic"
    assert log[7] == "state_dict post-hook must return None"
    # load_state_dict runs no state_dict hooks of its own: each pair is the test's call
    assert log[8:10] == sd_hooks
    assert log[10] == ("load pre", "Linear", "1.", True)
    assert log[11] == ("load post", "Sequential", ["0.bias"], ["1.extra"])
    assert log[12] == ([], ["1.extra"])     # the post-hook cleared the missing key
    np.testing.assert_array_equal(log[13], [[7.0, 7.0]])    # the renamed key was loaded
    assert log[16:18] == [("load pre", "Linear", "1.", True),
                          ("load post", "Sequential", ["0.bias"], [])]
    assert log[19] == ("load post", "Sequential", ["0.bias"], ["junk"])
    assert log[20] == 'Unexpected key(s) in state_dict: "junk".'
    assert len(log) == 21


@needs_torch
def test_state_dict_hooks_torch():
    same(scenario_state_dict(cddp), scenario_state_dict(torch))


def test_private_load_pre_hook_with_module_consistent():
    m = nn.Linear(2, 2)
    seen = []
    m._register_load_state_dict_pre_hook(lambda *a: seen.append(len(a)))
    m._register_load_state_dict_pre_hook(lambda mod, *a: seen.append(mod is m), with_module=True)
    m.register_load_state_dict_pre_hook(lambda mod, *a: seen.append(len(a)))
    m.load_state_dict(m.state_dict())
    assert seen == [7, True, 7]
    with pytest.raises(AssertionError, match="not"):
        m.register_load_state_dict_post_hook(lambda mod, keys: keys)
        m.load_state_dict(m.state_dict())
