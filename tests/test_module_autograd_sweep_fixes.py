"""Differences from torch found by the nn.Module-API and autograd-semantics sweeps: each case
runs on cddp and, where torch is installed, on torch with the same code, and compares."""
import copy
import pickle
import warnings

import pytest

import cddp


# ---- load_state_dict: each module reports its own unexpected keys -------------------------

def _legacy_model(lib):
    nn = lib.nn

    class Scale(nn.Module):           # drops an obsolete checkpoint key, adds a note
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lib.ones(2))
            self.register_buffer("b", None)

        def _load_from_state_dict(self, sd, prefix, md, strict, missing, unexpected, errs):
            super()._load_from_state_dict(sd, prefix, md, strict, missing, unexpected, errs)
            if prefix + "old_scale" in unexpected:
                unexpected.remove(prefix + "old_scale")
            unexpected.append("note")
    return nn.Sequential(Scale(), nn.Linear(2, 2), nn.BatchNorm1d(2))


def test_load_from_state_dict_override_edits_unexpected_keys(lib):
    m = _legacy_model(lib)
    sd = m.state_dict()
    for k in ("0.old_scale", "x.y", "1.zz", "0.b", "9.k.q"):
        sd[k] = lib.ones(1)
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == []
    assert res.unexpected_keys == ["x.y", "9.k.q", "0.b", "note", "1.zz"]     # torch's order
    del sd["2.running_mean"]
    with pytest.raises(RuntimeError, match='Missing key.*"2.running_mean"(.|\n)*Unexpected '
                                           'key.*"x.y", "9.k.q", "0.b", "note", "1.zz"'):
        m.load_state_dict(sd)


# ---- containers -----------------------------------------------------------------------------

def test_failed_insert_keeps_the_container(lib):
    nn = lib.nn
    s = nn.Sequential(nn.Linear(1, 1), nn.ReLU(), nn.Tanh())
    with pytest.raises(AssertionError):
        s.insert(1, 3)
    assert [type(m).__name__ for m in s] == ["Linear", "ReLU", "Tanh"]
    s.insert(-1, nn.Sigmoid())
    assert [type(m).__name__ for m in s] == ["Linear", "ReLU", "Sigmoid", "Tanh"]
    assert list(s._modules) == ["0", "1", "2", "3"]
    if lib is cddp:                  # torch stores the int and breaks later; cddp refuses it
        ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
        with pytest.raises(TypeError):
            ml.insert(1, 3)
        assert [type(m).__name__ for m in ml] == ["ReLU", "Tanh"]
    ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    ml.insert(1, nn.Sigmoid())
    assert [type(m).__name__ for m in ml] == ["ReLU", "Sigmoid", "Tanh"]


def test_sequential_iadd_is_in_place_and_add_wants_a_sequential(lib):
    nn = lib.nn
    body = nn.Sequential(nn.ReLU())
    alias = body
    body += nn.Sequential(nn.Tanh(), nn.Sigmoid())
    assert alias is body and len(alias) == 3
    with pytest.raises(ValueError):
        body + nn.ModuleList([nn.ReLU()])
    with pytest.raises(ValueError):
        body += nn.ModuleList([nn.ReLU()])


def test_module_forward_stub(lib):
    nn = lib.nn

    class NoForward(nn.Module):
        pass
    with pytest.raises(NotImplementedError, match="missing the required \"forward\""):
        NoForward()(lib.ones(1))
    with pytest.raises(NotImplementedError):
        nn.ModuleList().forward(lib.ones(1))
    assert callable(nn.Module.forward)


def test_module_type_casts_every_tensor(lib):
    m = lib.nn.BatchNorm1d(2)
    m.type(lib.float64)
    assert m.weight.dtype == lib.float64 and m.num_batches_tracked.dtype == lib.float64
    m.type("torch.FloatTensor")
    assert m.running_mean.dtype == lib.float32


# ---- copies -------------------------------------------------------------------------------

def test_deepcopy_and_pickle_keep_tensor_attributes(lib):
    t = lib.ones(3)
    t.tag = "a"
    assert copy.deepcopy(t).tag == "a" and pickle.loads(pickle.dumps(t)).tag == "a"
    p = lib.nn.Parameter(lib.ones(2))
    p.tp = 1
    assert pickle.loads(pickle.dumps(p)).tp == 1


def test_parameter_deepcopy_keeps_class_drops_grad(lib):
    nn = lib.nn

    class MyP(nn.Parameter):
        pass
    m = nn.Linear(2, 2)
    m.weight = MyP(lib.ones(2, 2))
    m.weight.grad = lib.ones(2, 2)
    m2 = copy.deepcopy(m)
    assert type(m2.weight).__name__ == "MyP" and m2.weight.grad is None
    assert m2.weight is not m.weight and m2.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    x = lib.ones(2, requires_grad=True)
    x.grad = lib.full((2,), 3.0)
    assert copy.deepcopy(x).grad.tolist() == [3.0, 3.0]          # plain tensors keep it


# ---- autograd semantics -------------------------------------------------------------------

def test_inference_mode_false_turns_grad_on(lib):
    x = lib.ones(2, requires_grad=True)
    with lib.no_grad():
        with lib.inference_mode(False):
            assert lib.is_grad_enabled() and (x * 2).requires_grad
        assert not lib.is_grad_enabled()
    with lib.inference_mode():
        with lib.inference_mode(False):
            assert lib.is_grad_enabled() and not lib.is_inference_mode_enabled()
        assert lib.is_inference_mode_enabled()
    assert lib.is_grad_enabled()


def test_pack_hook_runs_without_grad(lib):
    seen = []

    def pack(t):
        seen.append((lib.is_grad_enabled(), (t * 1).requires_grad))
        return t
    x = lib.ones(2, requires_grad=True)
    with lib.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = (x * x).sum()
    y.backward()
    assert seen and all(s == (False, False) for s in seen)
    assert x.grad.tolist() == [2.0, 2.0]


def test_reading_grad_of_a_non_leaf_warns(lib):
    x = lib.ones(2, requires_grad=True)
    y = x * 2
    with pytest.warns(UserWarning, match="not a leaf Tensor is being accessed"):
        assert y.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad is None           # a leaf: no warning
        y.retain_grad()
        assert y.grad is None           # retain_grad(): no warning
        y.sum().backward()
        assert y.grad.tolist() == [1.0, 1.0]


def test_autograd_names_old_and_new_scripts_use(lib):
    from importlib import import_module
    ag = lib.autograd
    assert import_module(f"{lib.__name__}.autograd.variable").Variable is ag.Variable
    with ag.set_multithreading_enabled(False):
        pass
    with ag.graph.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="no hooks here"):
            with ag.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with ag.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        pass
    x = lib.ones(2, requires_grad=True)
    y = x * 3
    edge = ag.graph.get_gradient_edge(y)
    assert edge.node is y.grad_fn and edge.output_nr == 0
    assert ag.graph.get_gradient_edge(x).node.name().endswith("AccumulateGrad")
    g = lib.set_grad_enabled(False)
    assert not lib.is_grad_enabled()
    g.clone()
    g.__exit__(None, None, None)
    lib.set_grad_enabled(True)


def test_nn_names_scripts_reach_without_importing_them(lib):
    nn = lib.nn
    assert str(nn.attention.SDPBackend.MATH) == "SDPBackend.MATH"
    assert nn.common_types is not None
    assert nn.parameter.UninitializedBuffer is not None
    from importlib import import_module
    conv = import_module(f"{lib.__name__}.nn.utils.convert_parameters")
    m = nn.Linear(2, 3)
    v = conv.parameters_to_vector(m.parameters())
    conv.vector_to_parameters(v * 0 + 1, m.parameters())
    assert v.shape == (9,) and float(m.weight.detach().sum()) == 6.0
    assert nn.Module.dump_patches is False and nn.Module.T_destination is not None
    assert m._wrapped_call_impl(lib.ones(2)).shape == (3,)
