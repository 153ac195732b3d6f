"""Arguments by name, as torch takes them (found by a sweep of public model code: DiT's
`x.reshape(shape=...)`), and the import-time names of torch.fx and torch.overrides that model
libraries touch (timm's `@torch.fx.wrap`).

Oracles: the positional call of the same cddp function (same result), torch (importorskip)
for which functions take input= by name, and torch's errors for misuse.
"""
import warnings

import numpy as np
import pytest

import cddp
from conftest import n


def test_shape_methods_take_torch_keywords():
    x = cddp.arange(24.0).reshape(2, 3, 4)
    same = [(x.view(size=(6, 4)), x.view(6, 4)), (x.reshape(shape=(4, 6)), x.reshape(4, 6)),
            (cddp.reshape(x, shape=(24,)), cddp.reshape(x, (24,))),
            (x.permute(dims=(2, 0, 1)), x.permute(2, 0, 1)),
            (cddp.permute(x, dims=(1, 0, 2)), cddp.permute(x, (1, 0, 2))),
            (cddp.permute(input=x, dims=(1, 0, 2)), cddp.permute(x, (1, 0, 2))),
            (cddp.zeros(24).view_as(other=x), cddp.zeros(24).view_as(x)),
            (cddp.zeros(24).reshape_as(other=x), cddp.zeros(24).reshape_as(x)),
            (cddp.ones(1, 4).expand_as(other=x), cddp.ones(1, 4).expand_as(x)),
            (cddp.ones(1, 4).expand(size=(3, 4)), cddp.ones(1, 4).expand(3, 4)),
            (cddp.arange(2.0).repeat(repeats=(2, 2)), cddp.arange(2.0).repeat(2, 2)),
            (cddp.zeros(2).fill_(value=3.0), cddp.full((2,), 3.0))]
    for a, b in same:
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(n(a), n(b))
    assert x.view(dtype=cddp.int32).dtype == cddp.int32
    parts = cddp.split(x, split_size_or_sections=[1, 3], dim=2)
    assert [tuple(p.shape) for p in parts] == [(2, 3, 1), (2, 3, 3)]
    assert x.expand(2, 3, 4, implicit=True).shape == x.shape


@pytest.mark.parametrize("call,exc", [
    (lambda x: x.view(size=(6, 4), shape=(1,)), TypeError),
    (lambda x: x.reshape((4, 6), shape=(4, 6)), TypeError),
    (lambda x: x.permute(dim=(0, 1, 2)), TypeError),
    (lambda x: x.fill_(1.0, value=2.0), TypeError),
    (lambda x: cddp.split(x, 2, split_size_or_sections=2), TypeError),
    (lambda x: x.view_as(), TypeError),
])
def test_keyword_misuse_raises(call, exc):
    with pytest.raises(exc):
        call(cddp.arange(24.0).reshape(2, 3, 4))


def test_every_function_torch_calls_with_input_keyword(torch):
    """For each top-level function both libraries have: if torch accepts f(input=x), cddp's
    f(input=x) gives what f(x) gives."""
    checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sorted(dir(cddp)):
            f = getattr(cddp, name, None)
            if name.startswith("_") or not callable(f) or isinstance(f, type) or \
                    not hasattr(torch, name):
                continue
            try:
                getattr(torch, name)(input=torch.eye(2) * 2 + 0.5)
            except Exception:               # noqa: BLE001 - torch does not take input= here
                continue
            try:
                cddp.manual_seed(0)                # the same draws for random functions
                want = f(cddp.eye(2) * 2 + 0.5)
            except Exception:               # noqa: BLE001 - positional call refused too
                continue
            cddp.manual_seed(0)
            got = f(input=cddp.eye(2) * 2 + 0.5)
            if isinstance(want, cddp.Tensor) and not name.startswith("empty"):
                np.testing.assert_array_equal(n(got), n(want), err_msg=name)
            checked += 1
    assert checked > 150


def test_input_keyword_keeps_out_rules():
    x, y = cddp.zeros(3), cddp.empty(3)
    assert cddp.exp(input=x, out=y) is y
    np.testing.assert_array_equal(n(y), [1, 1, 1])
    with pytest.raises(TypeError):             # torch.relu has no out=
        cddp.relu(input=x, out=y)
    with pytest.raises(TypeError):
        cddp.exp(x, input=x)


def test_fx_names_for_eager_code():
    @cddp.fx.wrap
    def f(v):
        return v + 1
    assert f(cddp.ones(1)).item() == 2.0
    assert cddp.fx.wrap("name") == "name"
    assert not isinstance(cddp.ones(1), cddp.fx.Proxy)
    assert cddp.fx._symbolic_trace.is_fx_tracing() is False

    class MyTracer(cddp.fx.Tracer):           # subclassing at import works
        pass
    with pytest.raises(NotImplementedError, match="graph capture"):
        MyTracer()
    with pytest.raises(NotImplementedError, match="graph capture"):
        cddp.fx.symbolic_trace(cddp.nn.Linear(2, 2))


def test_fx_node_structure_walkers():
    # `from torch.fx.node import map_arg` (pytorch/examples' fx scripts); values hand-derived
    import collections
    from cddp.fx.node import Node, map_aggregate, map_arg
    P = collections.namedtuple("P", "a b")
    x = [1, (2, {"k": 3}), P(4, 5), slice(1, 6, 2), "s"]
    times10 = lambda v: v * 10 if isinstance(v, int) else v      # noqa: E731
    assert map_aggregate(x, times10) == [10, (20, {"k": 30}), P(40, 50), slice(10, 60, 20), "s"]
    assert type(map_aggregate(x, times10)[2]) is P
    assert map_arg(x, lambda v: 0) == x          # no Node in it: unchanged
    assert cddp.fx.map_arg is map_arg and cddp.fx.Node is Node


def test_overrides_protocol():
    ov = cddp.overrides
    assert not ov.has_torch_function((cddp.ones(1), 1.0))
    assert ov.is_tensor_like(cddp.ones(1)) and not ov.is_tensor_like(1.0)

    class Base:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return ("base", func.__name__, len(types))

    class Sub(Base):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return ("sub", func.__name__, len(types))

    @ov.wrap_torch_function(lambda a, b: (a, b))
    def combine(a, b):
        return "plain"

    assert ov.has_torch_function_variadic(1, Base())
    assert combine(1, 2) == "plain"
    assert combine(Base(), Sub()) == ("sub", "combine", 2)     # subclasses first, as torch


def test_import_time_names_of_model_libraries():
    """What timm imports at module level: generic data classes (Sampler[int] in a base-class
    list), torch.hub's urlparse, torch.jit.annotations' typing names."""
    from cddp.hub import urlparse
    from cddp.jit.annotations import List
    from cddp.utils.data import DataLoader, Dataset, IterableDataset, Sampler

    class Every(Sampler[int]):
        def __iter__(self):
            return iter([2, 0])

    class Squares(Dataset[int]):
        def __getitem__(self, i):
            return i * i

        def __len__(self):
            return 3

    assert [int(v) for v in DataLoader(Squares(), sampler=Every())] == [4, 0]
    assert IterableDataset[int] is not None and DataLoader[int] is not None
    import typing
    assert urlparse("https://h/a/b.pt").path == "/a/b.pt" and List is typing.List


def test_torch_utils_helpers():
    """torch._utils' buffer helpers (guided-diffusion's fp16_util imports them)."""
    from cddp._utils import (_flatten_dense_tensors, _reorder_tensors_as, _take_tensors,
                             _unflatten_dense_tensors)
    a = cddp.arange(6.0, requires_grad=True)
    b = cddp.arange(4.0).reshape(2, 2)
    flat = _flatten_dense_tensors([a.reshape(2, 3), b])
    np.testing.assert_array_equal(n(flat), np.r_[np.arange(6.0), np.arange(4.0)])
    parts = _unflatten_dense_tensors(flat, [a.reshape(2, 3), b])
    assert [tuple(p.shape) for p in parts] == [(2, 3), (2, 2)]
    (flat * 2).sum().backward()
    assert a.grad.tolist() == [2.0] * 6
    ts = [cddp.ones(3), cddp.ones(3, dtype=cddp.float64), cddp.ones(5), cddp.ones(1)]
    # float32: 12 + 20 > 16 bytes, then 20 + 4 > 16: each in its own chunk; float64 apart
    chunks = list(_take_tensors(ts, 16))
    assert [[tuple(t.shape) for t in c] for c in chunks] == [[(3,)], [(5,)], [(1,)], [(3,)]]
    assert [[tuple(t.shape) for t in c] for c in _take_tensors(ts, 40)] == [[(3,), (5,), (1,)],
                                                                           [(3,)]]
    back = _reorder_tensors_as([t for c in chunks for t in c], ts)
    assert all(x is y for x, y in zip(back, ts))
    assert cddp._utils.is_compiling() is False


def test_bce_size_mismatch_messages_match_torch(torch):
    for name in ("binary_cross_entropy_with_logits", "binary_cross_entropy"):
        msgs = []
        for lib in (torch, cddp):
            with pytest.raises(ValueError) as info:
                getattr(lib.nn.functional, name)(lib.zeros(2, 3), lib.zeros(3, 2))
            msgs.append(str(info.value))
        assert msgs[0] == msgs[1]
