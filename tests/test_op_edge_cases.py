"""Edge cases a differential sweep against torch found wrong (each test failed before its fix):
narrow-dtype nonzero and trace, stable descending sort of bools, 0-d sort/topk, in-place ops
whose result the tensor cannot hold, logit's gradient outside [0, 1], median()'s gradient over
ties, float16 sinc, promotion of int with float16/bfloat16, empty logcumsumexp and tensordot,
the shift operators, angle, nextafter, scalar_tensor, i0.

Oracles: NumPy and hand-worked values; torch where installed.
"""
import math

import numpy as np
import pytest

import cddp


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "int16", "int8", "uint8"])
def test_nonzero_narrow_dtypes(dt):
    vals = [1, 0, 1, 0, 2, 2, 0]
    x = cddp.tensor(vals).to(getattr(cddp, dt))
    assert cddp.nonzero(x).flatten().tolist() == [0, 2, 4, 5]
    assert cddp.argwhere(x).flatten().tolist() == [0, 2, 4, 5]


def test_nonzero_negative_zero_is_zero():
    x = cddp.tensor([-0.0, 0.0, -1.0]).to(cddp.float16)
    assert cddp.nonzero(x).flatten().tolist() == [2]


@pytest.mark.parametrize("dt,expect", [("int8", 15), ("uint8", 15), ("int16", 15),
                                       ("float16", 15.0), ("bfloat16", 15.0)])
def test_trace_narrow_dtypes(dt, expect):
    x = cddp.tensor(np.arange(12).reshape(3, 4)).to(getattr(cddp, dt))
    assert cddp.trace(x).item() == expect          # 0 + 5 + 10


def test_trace_bfloat16_fraction():
    x = cddp.tensor([[0.5, 1.0], [1.0, 2.0]]).to(cddp.bfloat16)
    assert cddp.trace(x).item() == 2.5


def test_stable_descending_sort_of_bools():
    x = cddp.tensor([1, 0, 1, 0, 2, 2, 0]).bool()
    v, i = cddp.sort(x, descending=True, stable=True)
    assert i.tolist() == [0, 2, 4, 5, 1, 3, 6]
    assert v.tolist() == [True] * 4 + [False] * 3
    assert cddp.argsort(x, descending=True).tolist() == [0, 2, 4, 5, 1, 3, 6]


def test_sort_and_topk_of_0d():
    x = cddp.tensor(3.0)
    v, i = cddp.sort(x)
    assert v.shape == () and i.shape == () and i.item() == 0 and v.item() == 3.0
    assert cddp.argsort(x).shape == ()
    for k in (0, 1):
        v, i = cddp.topk(x, k)
        assert v.shape == () and i.shape == ()
    with pytest.raises(IndexError):
        cddp.sort(x, dim=1)


@pytest.mark.parametrize("code", [
    "cddp.tensor([1, 2, 3], dtype=cddp.int32).remainder_(cddp.tensor([0.7]))",
    "cddp.tensor([1, 2, 3], dtype=cddp.int8).atan2_(cddp.tensor(1.5))",
    "cddp.tensor([1, 2, 3], dtype=cddp.int32).copysign_(cddp.tensor([-1.0]))",
    "cddp.tensor([1, 2, 3], dtype=cddp.int64).xlogy_(cddp.tensor([2.0]))",
    "cddp.tensor([True, False]).fmod_(cddp.tensor(2))",
    "cddp.tensor([1, 2], dtype=cddp.int32).floor_divide_(cddp.tensor([0.5]))",
])
def test_inplace_result_that_does_not_fit_is_refused(code):
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        eval(code, {"cddp": cddp})


def test_inplace_result_that_fits_is_written():
    a = cddp.tensor([1.0, 2.0, 3.0])
    a.remainder_(cddp.tensor([2]))
    assert a.tolist() == [1.0, 0.0, 1.0]
    b = cddp.tensor([5, 7], dtype=cddp.int64)
    b.remainder_(3)
    assert b.tolist() == [2, 1]


def test_logit_gradient_is_nan_outside_unit_interval():
    x = cddp.tensor([0.3, 1.2, -0.5], dtype=cddp.float64, requires_grad=True)
    y = cddp.logit(x)
    y.sum().backward()
    g = x.grad.tolist()
    assert g[0] == pytest.approx(1 / (0.3 * 0.7))
    assert math.isnan(g[1]) and math.isnan(g[2])
    assert math.isnan(y.tolist()[1]) and math.isnan(y.tolist()[2])
    # with eps the input is clamped: finite values, zero gradient outside [eps, 1 - eps]
    x.grad = None
    cddp.logit(x, eps=0.1).sum().backward()
    assert x.grad.tolist()[1:] == [0.0, 0.0]


@pytest.mark.parametrize("fn", ["median", "nanmedian"])
def test_median_gradient_spreads_over_ties(fn):
    x = cddp.tensor([1.0, 2.0, 2.0, 2.0, 3.0, 0.0], requires_grad=True)
    m = getattr(cddp, fn)(x)
    assert m.item() == 2.0
    m.backward()
    np.testing.assert_allclose(x.grad.tolist(), [0, 1 / 3, 1 / 3, 1 / 3, 0, 0])
    # along a dim the gradient goes to the returned index (torch's too)
    y = cddp.tensor([[1.0, 2.0, 2.0, 3.0]], requires_grad=True)
    r = getattr(cddp, fn)(y, 1)
    r.values.sum().backward()
    g = y.grad.tolist()[0]
    assert sum(g) == 1.0 and g[r.indices.item()] == 1.0


def test_median_value_is_exact():
    x = cddp.tensor([0.1, 0.1, 0.1, 0.7], requires_grad=True)
    assert cddp.median(x).item() == cddp.tensor(0.1).item()


def test_sinc_float16_rounds_once():
    x = cddp.tensor([2.0, 0.3]).half()
    want = np.sinc(np.array([2.0, 0.3], np.float16).astype(np.float32)).astype(np.float16)
    got = np.array(cddp.sinc(x).float().tolist(), np.float16)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn,args,want", [
    ("atan2", ("int", "bfloat16"), "bfloat16"),
    ("atan2", ("float16", "int"), "float16"),
    ("xlogy", ("float16", "int"), "float16"),
    ("ldexp", ("int32", "float64"), "float64"),
    ("ldexp", ("int32", "int"), "float32"),
])
def test_promotion_with_narrow_floats(fn, args, want):
    def make(d):
        dt = {"int": cddp.int64}.get(d) or getattr(cddp, d)
        return cddp.tensor([1, 2]).to(dt)
    out = getattr(cddp, fn)(make(args[0]), make(args[1]))
    assert out.dtype == getattr(cddp, want)


def test_atan2_refuses_a_number():
    with pytest.raises(TypeError):
        cddp.atan2(cddp.tensor([1.0]), 2.0)


def test_empty_logcumsumexp_and_tensordot():
    assert cddp.logcumsumexp(cddp.zeros(3, 0), 1).shape == (3, 0)
    r = cddp.tensordot(cddp.zeros(3, 0), cddp.zeros(0, 3), dims=1)
    assert r.shape == (3, 3) and r.tolist() == [[0.0] * 3] * 3


def test_shifts():
    a = cddp.tensor([1, 2, -8], dtype=cddp.int32)
    assert (a << 2).tolist() == [4, 8, -32]
    assert (a >> 1).tolist() == [0, 1, -4]
    assert (a << 40).tolist() == [0, 0, 0]              # past the width: 0
    assert (a >> 40).tolist() == [0, 0, -1]             # arithmetic: the sign
    assert cddp.bitwise_left_shift(a, cddp.tensor([1, 2, 3], dtype=cddp.int32)).tolist() == \
        [2, 8, -64]
    assert (a << 1).dtype == cddp.int32
    i8 = cddp.tensor([1, 2], dtype=cddp.int8)
    assert (i8 << 7).tolist() == [-128, 0]
    b = cddp.tensor([3], dtype=cddp.int64)
    b <<= 2
    assert b.tolist() == [12]
    b.bitwise_right_shift_(1)
    assert b.tolist() == [6]
    assert (1 << cddp.tensor([3])).tolist() == [8]
    with pytest.raises(NotImplementedError, match="lshift_cpu"):
        cddp.tensor([1.0]) << 1


def test_angle_nextafter_scalar_tensor_i0():
    x = cddp.tensor([-1.0, 0.0, 2.0, float("nan")])
    a = cddp.angle(x).tolist()
    assert a[:3] == [pytest.approx(math.pi), 0.0, 0.0] and math.isnan(a[3])
    assert cddp.angle(cddp.tensor([-1, 2])).dtype == cddp.float32
    n = cddp.nextafter(cddp.tensor([1.0]), cddp.tensor([2.0]))
    assert n.item() == float(np.nextafter(np.float32(1), np.float32(2)))
    s = cddp.scalar_tensor(3)
    assert s.shape == () and s.dtype == cddp.float32 and s.item() == 3.0
    assert cddp.scalar_tensor(3, dtype=cddp.int64).dtype == cddp.int64
    assert cddp.i0(cddp.tensor([0.0])).item() == 1.0


def test_against_torch():
    torch = pytest.importorskip("torch")
    for T in (torch, cddp):
        pass
    cases = [
        lambda L: L.nonzero(L.tensor([1, 0, 1, 0, 2, 2, 0]).to(L.bfloat16)).flatten().tolist(),
        lambda L: L.trace(L.tensor(np.arange(12).reshape(3, 4)).to(L.int8)).item(),
        lambda L: L.sort(L.tensor([1, 0, 1, 1, 0]).bool(), descending=True, stable=True)[1]
        .tolist(),
        lambda L: str(L.atan2(L.tensor([1, 2]), L.tensor([1.0]).to(L.bfloat16)).dtype)
        .split(".")[-1],
        lambda L: (L.tensor([5, -9], dtype=L.int16) >> 2).tolist(),
        lambda L: (L.tensor([5, -9], dtype=L.int16) << 3).tolist(),
    ]
    for case in cases:
        assert case(cddp) == case(torch)
    x = np.array([1.0, 2.0, 2.0, 2.0, 3.0, 0.0])
    grads = []
    for L in (torch, cddp):
        t = L.tensor(x, requires_grad=True)
        L.median(t).backward()
        grads.append(np.array(t.grad.tolist()))
    np.testing.assert_allclose(grads[0], grads[1])
