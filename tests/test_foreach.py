"""torch._foreach_*: each op equals the per-tensor op (NumPy) for every overload — scalar,
list of scalars, list of tensors (with alpha), one tensor — in and out of place; gradients
flow through the out-of-place forms; the EMA idiom (_foreach_lerp_) equals a loop; the forms
torch has, value for value, where torch is installed."""
import numpy as np
import pytest

import cddp

rng = np.random.default_rng(0)
SHAPES = [(3,), (2, 4), ()]


def _lists():
    a = [rng.random(s) + 0.5 for s in SHAPES]
    b = [rng.random(s) + 0.5 for s in SHAPES]
    return a, b


def _t(arrs):
    return [cddp.tensor(x) for x in arrs]


UNARY = {"abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "neg": np.negative,
         "reciprocal": np.reciprocal, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
         "tanh": np.tanh, "floor": np.floor, "sign": np.sign, "sin": np.sin}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    a, _ = _lists()
    out = getattr(cddp, f"_foreach_{name}")(_t(a))
    ts = _t(a)
    assert getattr(cddp, f"_foreach_{name}_")(ts) is None
    for x, o, t in zip(a, out, ts):
        np.testing.assert_allclose(o.numpy(), UNARY[name](x), rtol=1e-12)
        np.testing.assert_allclose(t.numpy(), UNARY[name](x), rtol=1e-12)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
          "clamp_max": np.minimum, "clamp_min": np.maximum}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_overloads(name):
    a, b = _lists()
    f, f_ = getattr(cddp, f"_foreach_{name}"), getattr(cddp, f"_foreach_{name}_")
    tensor_ok = name not in ("clamp_max", "clamp_min")
    overloads = [(0.7, [0.7] * 3), ([0.5, 1.5, 2.0], [0.5, 1.5, 2.0])]
    if tensor_ok:
        overloads += [(_t(b), b), (cddp.tensor(1.25), [1.25] * 3)]
    for other, per in overloads:
        for x, o, p in zip(a, f(_t(a), other), per):
            np.testing.assert_allclose(o.numpy(), BINARY[name](x, p), rtol=1e-12)
        ts = _t(a)
        assert f_(ts, other) is None
        for x, t, p in zip(a, ts, per):
            np.testing.assert_allclose(t.numpy(), BINARY[name](x, p), rtol=1e-12)
    if name in ("add", "sub"):
        for x, y, o in zip(a, b, f(_t(a), _t(b), alpha=3)):
            np.testing.assert_allclose(o.numpy(), BINARY[name](x, 3 * y), rtol=1e-12)


def test_lerp_addcmul_addcdiv_norm_max_copy_zero():
    a, b = _lists()
    ema, params = _t(a), _t(b)
    cddp._foreach_lerp_(ema, params, 0.1)                    # the EMA idiom
    for e, x, y in zip(ema, a, b):
        np.testing.assert_allclose(e.numpy(), x + 0.1 * (y - x), rtol=1e-12)
    out = cddp._foreach_addcmul(_t(a), _t(b), _t(b), cddp.tensor([1.0, 2.0, 3.0]))
    for o, x, y, v in zip(out, a, b, (1.0, 2.0, 3.0)):
        np.testing.assert_allclose(o.numpy(), x + v * y * y, rtol=1e-12)
    out = cddp._foreach_addcdiv(_t(a), _t(b), _t(a), 0.5)
    for o, x, y in zip(out, a, b):
        np.testing.assert_allclose(o.numpy(), x + 0.5 * y / x, rtol=1e-12)
    for n, x in zip(cddp._foreach_norm(_t(a)), a):
        assert n.item() == pytest.approx(np.linalg.norm(x.ravel()))
    for m, x in zip(cddp._foreach_max(_t(a)), a):
        assert m.item() == x.max()
    dst = _t(b)
    cddp._foreach_copy_(dst, _t(a))
    cddp._foreach_zero_(dst[:1])
    assert dst[0].abs().sum().item() == 0 and dst[1].tolist() == a[1].tolist()
    with pytest.raises(RuntimeError, match="at least one tensor"):
        cddp._foreach_add_([], 1)
    with pytest.raises(RuntimeError, match="same number of tensors"):
        cddp._foreach_mul(_t(a), _t(b)[:2])


def test_gradients_flow_out_of_place():
    w = [cddp.tensor([1.0, 2.0], requires_grad=True), cddp.tensor(3.0, requires_grad=True)]
    out = cddp._foreach_mul(cddp._foreach_exp(w), 2.0)
    (out[0].sum() + out[1]).backward()
    np.testing.assert_allclose(w[0].grad.numpy(), 2 * np.exp([1.0, 2.0]), rtol=1e-6)
    assert w[1].grad.item() == pytest.approx(2 * np.exp(3.0), rel=1e-6)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    a, b = _lists()
    for name, args in [("_foreach_add", (b,)), ("_foreach_mul", (0.3,)),
                       ("_foreach_lerp", (b, 0.25)), ("_foreach_addcdiv", (b, a, [1, 2, 3])),
                       ("_foreach_norm", ()), ("_foreach_pow", (2,)), ("_foreach_sqrt", ())]:
        def conv(lib, v):
            if isinstance(v, list) and v and isinstance(v[0], np.ndarray):
                return [lib.tensor(x) for x in v]
            return v
        ours = getattr(cddp, name)(conv(cddp, a), *[conv(cddp, x) for x in args])
        theirs = getattr(torch, name)(conv(torch, a), *[conv(torch, x) for x in args])
        assert type(ours) is type(theirs) is tuple
        for o, t in zip(ours, theirs):
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-12)
