"""Differences from torch found by the random-number and printing sweeps. Bit-for-bit cases
need torch (the oracle); the rest hold on their own: laws of the samplers, errors, types."""
import numpy as np
import pytest

import cddp


def _torch():
    return pytest.importorskip("torch")


# ---- random streams -----------------------------------------------------------------------

def _draws(lib):
    out = {}
    lib.manual_seed(0)
    out["randint 2^28"] = lib.randint(0, 2 ** 28, (6,)).tolist()
    out["randint 2^30 int32"] = lib.randint(0, 2 ** 30, (6,), dtype=lib.int32).tolist()
    out["rand after"] = lib.rand(3).tolist()              # the stream stays in step
    out["random_ int32"] = lib.empty(4, dtype=lib.int32).random_(3, 2 ** 31 - 1).tolist()
    lib.manual_seed(1)
    out["exponential f64"] = lib.empty(8, dtype=lib.float64).exponential_().tolist()
    for dt in ("float32", "float16", "bfloat16", "float64"):
        d = getattr(lib, dt)
        lib.manual_seed(3)
        out[f"cauchy {dt}"] = lib.empty(6, dtype=d).cauchy_().double().tolist()
        lib.manual_seed(3)
        out[f"geometric {dt}"] = lib.empty(6, dtype=d).geometric_(0.3).double().tolist()
    lib.manual_seed(0)
    x = lib.rand(8)
    lib.manual_seed(5)
    out["x.bernoulli(p)"] = x.bernoulli(0.3).tolist()
    return out


def test_random_streams_equal_torchs():
    torch = _torch()
    ours, theirs = _draws(cddp), _draws(torch)
    for key in theirs:
        assert ours[key] == theirs[key], key


def test_tensor_bernoulli_p_is_the_scalar_kernel():
    cddp.manual_seed(0)
    x = cddp.rand(16)
    cddp.manual_seed(5)
    a = x.bernoulli(0.3)
    cddp.manual_seed(5)
    b = cddp.bernoulli(x, 0.3)
    assert a.tolist() == b.tolist()


def test_low_precision_samplers_keep_their_tails():
    cddp.manual_seed(0)
    g = cddp.empty(200_000, dtype=cddp.bfloat16).geometric_(0.999)
    # P(k > 1) = 0.001: ~200 of them; a bfloat16 uniform (no values in (0.996, 1)) gives none
    assert 120 < int((g > 1).sum()) < 300
    c = cddp.empty(200_000, dtype=cddp.float16).cauchy_()
    assert float(c.float().abs().max()) > 1e3      # P(|X| > 1e3) * n ~ 127


def test_normal_and_bernoulli_pass_a_zero_gradient():
    m = cddp.zeros(3, requires_grad=True)
    s = cddp.ones(3, requires_grad=True)
    y = cddp.normal(m, s)
    assert y.requires_grad
    y.sum().backward()
    assert m.grad.tolist() == [0.0] * 3 and s.grad.tolist() == [0.0] * 3
    p = cddp.full((3,), 0.5, requires_grad=True)
    b = cddp.bernoulli(p)
    b.sum().backward()
    assert b.requires_grad and p.grad.tolist() == [0.0] * 3
    assert not cddp.normal(0.0, 1.0, size=(2,)).requires_grad


@pytest.mark.parametrize("lo,hi,dtype,msg", [
    (0, float("inf"), "float32", "to is out of bounds for float"),
    (-float("inf"), 0, "float32", "from is out of bounds for float"),
    (-1e5, 1e5, "float16", "from is out of bounds for c10::Half"),
    (-3e38, 3e38, "float32", "to-from <= std::numeric_limits<Float>::max()"),
])
def test_uniform_bounds_the_dtype_cannot_hold(lo, hi, dtype, msg):
    with pytest.raises(RuntimeError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        cddp.empty(2, dtype=getattr(cddp, dtype)).uniform_(lo, hi)
    assert cddp.empty(2, dtype=cddp.float64).uniform_(-3e38, 3e38).isfinite().all()


def test_default_generator_in_torch_random():
    import cddp.random
    assert cddp.random.default_generator is cddp.default_generator


# ---- constructors, Size, printing -----------------------------------------------------------

def test_empty_tensor_constructor_starts_a_cat_buffer():
    t = cddp.Tensor()
    assert tuple(t.shape) == (0,) and t.numel() == 0 and t.dtype == cddp.float32
    buf = cddp.Tensor()
    for k in range(3):
        buf = cddp.cat([buf, cddp.full((2,), float(k))])
    assert buf.tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


def test_size_arithmetic_and_items():
    s = cddp.ones(2, 3).shape
    for v in ((4,) + s, s + (1,), s * 2, 2 * s):
        assert type(v) is cddp.Size
    assert (4,) + s == (4, 2, 3) and s * 2 == (2, 3, 2, 3)
    z = cddp.Size([cddp.tensor(2), np.int64(3)])
    assert z == (2, 3) and all(type(v) is int for v in z)
    with pytest.raises(TypeError, match="item 0 is 'float'"):
        cddp.Size([2.0])


def test_optimizer_repr_separates_groups_as_torch():
    a, b = cddp.nn.Parameter(cddp.ones(1)), cddp.nn.Parameter(cddp.ones(1))
    text = repr(cddp.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1))
    assert "    weight_decay: 0\n\nParameter Group 1\n" in text and text.startswith(
        "SGD (\nParameter Group 0\n")
    try:
        import torch
    except ImportError:
        return
    ta, tb = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
    assert text == repr(torch.optim.SGD([{"params": [ta]}, {"params": [tb], "lr": 0.5}], lr=0.1))


def test_buffer_is_a_tensor():
    nn = cddp.nn
    b = nn.Buffer(cddp.ones(2), persistent=False)
    assert isinstance(b, cddp.Tensor) and (b + 1).tolist() == [2.0, 2.0] and not b.persistent
    assert repr(b) == "tensor([1., 1.])"
    m = nn.Module()
    m.b = nn.Buffer(cddp.ones(2))
    m.c = nn.Buffer(cddp.zeros(1), persistent=False)
    assert list(m.state_dict()) == ["b"] and [n for n, _ in m.named_buffers()] == ["b", "c"]
