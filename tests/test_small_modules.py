"""torch's small modules scripts import: torch.jit's eager-mode helpers (fork/wait, isinstance
on typing containers, Attribute), torch.nn.common_types, torch.types, torch.utils.model_zoo,
and checkpoint's context_fn / noop_context_fn / early-stop and device-state helpers."""
import contextlib
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

import cddp
import cddp.jit as jit
from cddp.utils.checkpoint import (checkpoint, get_device_states, noop_context_fn,
                                   set_checkpoint_early_stop, set_device_states)


def test_jit_fork_wait_and_errors():
    fut = jit.fork(lambda a, b: a * b, 6, b=7)
    assert jit.wait(fut) == 42
    bad = jit.fork(lambda: [][1])
    with pytest.raises(IndexError):
        jit.wait(bad)
    assert issubclass(jit.Error, Exception)


def test_jit_isinstance_checks_containers():
    t = cddp.ones(1)
    assert jit.isinstance([1, 2], List[int]) and not jit.isinstance([1, "a"], List[int])
    assert jit.isinstance({"a": t}, Dict[str, cddp.Tensor])
    assert not jit.isinstance({"a": 1}, Dict[str, cddp.Tensor])
    assert jit.isinstance(None, Optional[int]) and jit.isinstance(3, Optional[int])
    assert jit.isinstance((1, "x"), Tuple[int, str]) and not jit.isinstance((1,), Tuple[int, str])
    a = jit.Attribute(3, int)
    assert (a.value, a.type) == (3, int)
    m = cddp.nn.Linear(2, 2)
    assert jit.freeze(m) is m and jit.optimize_for_inference(m) is m and jit.interface(int) is int


def test_common_types_types_and_model_zoo():
    from cddp.nn.common_types import _size_2_t, _ratio_any_t
    from cddp.utils import model_zoo
    from cddp import types
    assert int in _size_2_t.__args__ and tuple[int, int] in _size_2_t.__args__
    assert float in _ratio_any_t.__args__
    assert types.Number.__args__ == (int, float, bool)
    assert model_zoo.load_url is cddp.hub.load_state_dict_from_url


def test_common_types_match_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.common_types as theirs
    import cddp.nn.common_types as ours
    import types as pytypes
    import typing

    def norm(t):                 # Union / Optional / X | Y and Tuple / tuple compare alike
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin in (typing.Union, pytypes.UnionType):
            return ("union", frozenset(norm(a) for a in args))
        if origin is not None:
            return (origin, tuple(norm(a) for a in args))
        return getattr(t, "__name__", repr(t))

    names = [n for n in dir(theirs) if n.startswith(("_size", "_ratio", "_scalar", "_maybe",
                                                     "_tensor"))]
    assert len(names) > 15
    for name in names:
        assert norm(getattr(ours, name)) == norm(getattr(theirs, name)), name


def test_checkpoint_context_fn_wraps_forward_and_recompute():
    log = []

    @contextlib.contextmanager
    def mark(name):
        log.append(name + " in")
        yield
        log.append(name + " out")

    lin = cddp.nn.Linear(3, 3)
    x = cddp.randn(4, 3, requires_grad=True)

    def seg(v):
        log.append("run")
        return lin(v).tanh()

    out = checkpoint(seg, x, use_reentrant=False,
                     context_fn=lambda: (mark("fwd"), mark("re")))
    assert log == ["fwd in", "run", "fwd out"]
    out.sum().backward()
    assert log[3:] == ["re in", "run", "re out"]
    g = x.grad.clone()
    x.grad = None
    seg(x).sum().backward()
    np.testing.assert_array_equal(g.numpy(), x.grad.numpy())
    with set_checkpoint_early_stop(False):
        out = checkpoint(seg, x, use_reentrant=False, context_fn=noop_context_fn)
    assert get_device_states(x) == ([], []) and set_device_states([], []) is None
    with pytest.raises(ValueError, match="context_fn"):
        checkpoint(seg, x, use_reentrant=True, context_fn=noop_context_fn)


# ---- torch.nn.grad, NLLLoss2d, Container, adaptive_max_pool*_with_indices --------------------

@pytest.mark.parametrize("nd", [1, 2, 3])
def test_nn_grad_is_autograd_of_the_conv(nd):
    cddp.manual_seed(nd)
    x = cddp.randn(2, 4, *([7] * nd), requires_grad=True)
    w = cddp.randn(6, 2, *([3] * nd), requires_grad=True)
    conv = getattr(cddp.nn.functional, f"conv{nd}d")
    out = conv(x, w, None, 2, 1, 1, 2)
    g = cddp.randn(*out.shape)
    out.backward(g)
    gi = getattr(cddp.nn.grad, f"conv{nd}d_input")(x.shape, w, g, 2, 1, 1, 2)
    gw = getattr(cddp.nn.grad, f"conv{nd}d_weight")(x, w.shape, g, 2, 1, 1, 2)
    np.testing.assert_allclose(gi.numpy(), x.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw.numpy(), w.grad.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="grad_output has shape"):
        getattr(cddp.nn.grad, f"conv{nd}d_input")(x.shape, w, g[:1], 2, 1, 1, 2)


def test_nn_grad_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 6, 5)), rng.standard_normal((3, 2, 2, 3))
    g = rng.standard_normal((1, 3, 5, 3))
    for name, args in (("conv2d_input", ((1, 2, 6, 5), w, g)),
                       ("conv2d_weight", (x, (3, 2, 2, 3), g))):
        ours = getattr(cddp.nn.grad, name)(*[cddp.tensor(a) if isinstance(a, np.ndarray)
                                             else a for a in args])
        theirs = getattr(torch.nn.grad, name)(*[torch.tensor(a) if isinstance(a, np.ndarray)
                                                else a for a in args])
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


def test_deprecated_names_and_with_indices_forms():
    with pytest.warns(FutureWarning, match="NLLLoss2d"):
        loss = cddp.nn.NLLLoss2d(ignore_index=1)
    logp = cddp.log_softmax(cddp.randn(2, 3, 2, 2), 1)
    tgt = cddp.tensor([[[0, 1], [2, 0]], [[1, 1], [2, 2]]])
    assert loss(logp, tgt).item() == pytest.approx(
        cddp.nn.functional.nll_loss(logp, tgt, ignore_index=1).item())
    with pytest.warns(FutureWarning, match="Container"):
        c = cddp.nn.Container(a=cddp.nn.Linear(2, 2))
    assert [n for n, _ in c.named_children()] == ["a"]
    x = cddp.randn(1, 2, 7)
    out, idx = cddp.nn.functional.adaptive_max_pool1d_with_indices(x, 3)
    want, widx = cddp.nn.functional.adaptive_max_pool1d(x, 3, return_indices=True)
    assert out.tolist() == want.tolist() and idx.tolist() == widx.tolist()
    out, idx = cddp.nn.functional.adaptive_max_pool2d_with_indices(cddp.randn(1, 2, 5, 5), 2)
    assert tuple(out.shape) == (1, 2, 2, 2) and idx.dtype == cddp.int64


# ---- torch.compiler, torch._dynamo / torch._inductor config -----------------------------------

def test_compiler_controls_and_config_knobs():
    import cddp._dynamo
    import cddp._inductor.config as inductor
    assert not cddp.compiler.is_compiling() and not cddp._dynamo.is_compiling()

    @cddp.compiler.disable
    def f(x):
        return x + 1

    @cddp.compiler.disable(recursive=False)
    def g(x):
        return x + 2
    assert f(1) == 2 and g(1) == 3
    with cddp.compiler.set_stance("force_eager"):
        pass
    with pytest.raises(RuntimeError, match="stance"):
        cddp.compiler.set_stance("sometimes")
    cddp._dynamo.config.suppress_errors = True
    assert cddp._dynamo.config.suppress_errors is True
    with cddp._dynamo.config.patch(cache_size_limit=64):
        assert cddp._dynamo.config.cache_size_limit == 64
    assert cddp._dynamo.config.cache_size_limit == 8
    inductor.coordinate_descent_tuning = True
    inductor.triton.unique_kernel_names = False
    assert inductor.coordinate_descent_tuning and not inductor.triton.unique_kernel_names
    with pytest.raises(AttributeError, match="does not exist"):
        cddp._dynamo.config.no_such_knob = 1
    with pytest.raises(AttributeError, match="does not exist"):
        inductor.triton = 3                          # a section is not a value
    cddp._dynamo.config.suppress_errors = False
    inductor.coordinate_descent_tuning = False
    inductor.triton.unique_kernel_names = True


def test_config_defaults_match_torch():
    torch = pytest.importorskip("torch")
    import torch._dynamo.config as tdc
    import torch._inductor.config as tic
    import cddp._dynamo.config as cdc
    import cddp._inductor.config as cic
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ours, theirs in ((cdc, tdc), (cic, tic)):
            for name, value in ours.get_config_copy().items():
                if isinstance(value, dict):
                    for sub, v in value.items():
                        assert getattr(getattr(theirs, name), sub) == v, (name, sub)
                else:
                    assert getattr(theirs, name) == value, name


# ---- optimizer state-dict hooks, Module.compile, Tensor.i0, Generator.clone_state ------------

def test_optimizer_state_dict_hooks():
    p = cddp.nn.Parameter(cddp.ones(2))
    opt = cddp.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = cddp.ones(2)
    opt.step()
    calls = []
    opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    h = opt.register_state_dict_post_hook(lambda o, sd: calls.append("first"), prepend=True)
    sd = opt.state_dict()
    assert calls == ["pre", "first"] and sd["extra"] == 1
    h.remove()
    calls.clear()
    opt.state_dict()
    assert calls == ["pre"]
    seen = []
    opt.register_load_state_dict_pre_hook(
        lambda o, sd: {k: v for k, v in sd.items() if k != "extra"})
    opt.register_load_state_dict_post_hook(lambda o: seen.append(o.state_dict()["extra"]))
    opt.load_state_dict(sd)                    # "extra" dropped before loading
    assert seen == [1]


def test_module_compile_tensor_i0_generator_clone_state():
    m = cddp.nn.Linear(2, 2)
    assert m.compile() is None and m.compile(mode="reduce-overhead") is None
    with pytest.raises(RuntimeError, match="mode or options"):
        m.compile(mode="default", options={})
    x = cddp.tensor([0.0, 1.0, 2.5])
    np.testing.assert_allclose(x.i0().numpy(), [1.0, 1.2660658777520082, 3.2898391440501231],
                               rtol=1e-6)
    y = x.clone()
    assert cddp.i0_(y) is y                      # torch.i0_: in place, returns the tensor
    np.testing.assert_allclose(y.numpy(), x.i0().numpy())
    with pytest.raises(RuntimeError, match="Long"):
        cddp.tensor([1, 2]).i0_()
    g = cddp.Generator().manual_seed(7)
    h = g.clone_state()
    assert cddp.rand(3, generator=g).tolist() == cddp.rand(3, generator=h).tolist()
