"""Elementwise ops: forward values against NumPy over dtypes / broadcast / strided / 0-dim /
empty inputs, gradients against finite differences (gradcheck), values and gradients against
torch (the `torch` fixture skips without it), torch's promotion rules, in-place semantics and
bad inputs."""
import math
import operator
import timeit

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

RNG = np.random.default_rng(1234)
DTYPES = [np.float32, np.float64, np.int64, np.int32, np.bool_]
CDDP_DT = {np.float32: cddp.float32, np.float64: cddp.float64, np.int64: cddp.int64,
           np.int32: cddp.int32, np.bool_: cddp.bool}


def rand(shape, dt, lo=-4, hi=5, nonzero=False):
    """Random array of NumPy dtype dt: small ints, normals for floats."""
    if dt == np.bool_:
        return RNG.random(shape) > 0.5
    if np.issubdtype(dt, np.integer):
        a = RNG.integers(lo, hi, size=shape).astype(dt)
        if nonzero:
            a[a == 0] = 1
        return a
    a = RNG.standard_normal(shape).astype(dt)
    if nonzero:
        a[np.abs(a) < 0.1] = 0.5
    return a


def ref_promote(a, b):
    """torch's promotion between two dimensioned tensors: a floating dtype beats any
    integer/bool one (int32 + float32 is float32, not NumPy's float64); otherwise as NumPy."""
    fa, fb = np.issubdtype(a, np.floating), np.issubdtype(b, np.floating)
    if fa and not fb:
        return np.dtype(a)
    if fb and not fa:
        return np.dtype(b)
    return np.promote_types(a, b)


def check(x, expected, rtol=1e-6, atol=1e-6):
    """cddp tensor x equals the NumPy array expected in dtype, shape and values."""
    expected = np.asarray(expected)
    assert x.dtype == CDDP_DT[expected.dtype.type], (x.dtype, expected.dtype)
    got = n(x)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


# ---- forward against NumPy ------------------------------------------------------------------

SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 3), ()), ((0, 3), (1, 3)),
               ((2, 3, 4), (4,)), ((4,), (2, 3, 4)), ((5,), (1,)), ((2, 1, 3), (4, 1))]

ARITH = {
    "add": (operator.add, np.add),
    "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply),
    "maximum": (cddp.maximum, np.maximum),
    "minimum": (cddp.minimum, np.minimum),
}
COMPARE = {
    "eq": (operator.eq, np.equal), "ne": (operator.ne, np.not_equal),
    "lt": (operator.lt, np.less), "le": (operator.le, np.less_equal),
    "gt": (operator.gt, np.greater), "ge": (operator.ge, np.greater_equal),
}


@pytest.mark.parametrize("name", list(ARITH))
@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", DTYPES)
def test_arith_dtypes_against_numpy(name, da, db):
    op, ref = ARITH[name]
    a, b = rand((3, 4), da), rand((1, 4), db)
    res = ref_promote(a.dtype, b.dtype)
    if name == "sub" and np.bool_ in (da, db):       # torch refuses any bool operand
        with pytest.raises(RuntimeError, match="Subtraction.*bool"):
            op(t(a), t(b))
        return
    check(op(t(a), t(b)), ref(a.astype(res), b.astype(res)))


@pytest.mark.parametrize("name", list(ARITH) + list(COMPARE))
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_binary_shapes_against_numpy(name, sa, sb):
    op, ref = {**ARITH, **COMPARE}[name]
    a, b = rand(sa, np.float32), rand(sb, np.float32)
    if sa and sb:          # 0-dim operands are covered by the promotion tests
        check(op(t(a), t(b)), ref(a, b))
    else:
        got = op(t(a), t(b))
        np.testing.assert_allclose(n(got), ref(a, b), rtol=1e-6)


@pytest.mark.parametrize("name", list(COMPARE))
@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", [np.float32, np.int64, np.bool_])
def test_compare_dtypes_against_numpy(name, da, db):
    op, ref = COMPARE[name]
    a, b = rand((4, 3), da, -2, 3), rand((4, 3), db, -2, 3)
    res = ref_promote(a.dtype, b.dtype)
    check(op(t(a), t(b)), ref(a.astype(res), b.astype(res)))
    check(getattr(t(a), name)(t(b)), ref(a.astype(res), b.astype(res)))
    check(getattr(cddp, name)(t(a), t(b)), ref(a.astype(res), b.astype(res)))


def strided_pair():
    """Non-contiguous views: a transposed block and a step-2 slice (zero-copy through
    from_numpy), plus their contiguous copies for the expected values."""
    base = RNG.standard_normal((6, 8))
    a = base.T[::2]                     # (4, 6), strides (8, 16) elements: transposed + step
    b = RNG.standard_normal((6, 12))[:, ::2].T   # (6, 6) -> (6, 6) transposed view
    return a, b[:4]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "eq", "lt"])
def test_strided_inputs(name):
    op, ref = {**ARITH, **COMPARE}[name]
    a, b = strided_pair()
    x, y = cddp.from_numpy(a), cddp.from_numpy(b)
    assert not x.is_contiguous() and not y.is_contiguous()
    check(op(x, y), ref(a, b))
    # strided against a broadcast row
    r = RNG.standard_normal(6)
    check(op(x, t(r)), ref(a, r))


def test_division_modes_against_numpy():
    a = rand((5, 4), np.float64) * 10
    b = rand((5, 4), np.float64, nonzero=True)
    check(t(a) / t(b), a / b)
    check(cddp.div(t(a), t(b), rounding_mode="trunc"), np.trunc(a / b))
    check(t(a).div(t(b), rounding_mode="floor"), np.floor_divide(a, b))
    check(cddp.true_divide(t(a), t(b)), a / b)
    check(cddp.floor_divide(t(a), t(b)), np.floor_divide(a, b))
    ia, ib = rand((50,), np.int64, -20, 20), rand((50,), np.int64, -6, 7, nonzero=True)
    check(t(ia) / t(ib), (ia / ib).astype(np.float32))          # true division -> default float
    check(cddp.div(t(ia), t(ib), rounding_mode="floor"), ia // ib)
    check(cddp.div(t(ia), t(ib), rounding_mode="trunc"), np.trunc(ia / ib).astype(np.int64))
    check(cddp.remainder(t(a), t(b)), np.mod(a, b))
    check(t(a).fmod(t(b)), np.fmod(a, b))
    check(cddp.remainder(t(ia), t(ib)), np.mod(ia, ib))
    check(cddp.fmod(t(ia), 4), np.fmod(ia, 4))
    check(cddp.remainder(t(ia), -1), np.zeros_like(ia))
    i32 = ia.astype(np.int32)
    check(cddp.div(t(i32), 3, rounding_mode="floor"), (i32 // 3).astype(np.int32))


def test_pow_against_numpy():
    a = np.abs(rand((3, 4), np.float32)) + 0.1
    e = rand((3, 4), np.float32)
    check(t(a) ** t(e), a ** e, rtol=1e-5)
    for s in [2, 3, 0.5, -0.5, -1, -2, 1.7, 0, 1]:
        check(t(a) ** s, (a.astype(np.float64) ** s).astype(np.float32), rtol=1e-5)
    check(2 ** t(e), (2.0 ** e.astype(np.float64)).astype(np.float32), rtol=1e-5)
    check(t(a).pow(2), a * a)
    ia = rand((10,), np.int64, -3, 4)
    check(t(ia) ** 3, ia ** 3)
    check(t(ia) ** t(np.abs(ia)), ia ** np.abs(ia))
    check(2 ** t(np.abs(ia)), 2 ** np.abs(ia))
    # negative integer exponents elementwise: 1, -1 or 0 as torch
    check(t(np.array([1, -1, -1, 2, 0])) ** t(np.array([-3, -3, -2, -1, 2])),
          np.array([1, -1, 1, 0, 0]))
    check(t(np.array([True, False])) ** 2, np.array([1, 0]))


UNARY_FLOAT = {
    "exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": lambda a: 1 / np.sqrt(a), "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
    "erf": np.vectorize(math.erf, otypes=[np.float64]), "reciprocal": lambda a: 1 / a,
}
UNARY_SAME = {
    "neg": np.negative, "abs": np.abs, "relu": lambda a: np.maximum(a, 0).astype(a.dtype),
    "sign": np.sign, "square": np.square, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "trunc": np.trunc,
}
POSITIVE_DOMAIN = {"log", "log2", "log10", "sqrt", "rsqrt", "log1p", "reciprocal"}


def unary_input(name, shape, dt):
    a = rand(shape, dt, 1 if name in POSITIVE_DOMAIN else -4, 5)
    if np.issubdtype(dt, np.floating) and name in POSITIVE_DOMAIN:
        a = np.abs(a) + np.asarray(0.2, dtype=dt)
    return a


@pytest.mark.parametrize("name", list(UNARY_FLOAT))
@pytest.mark.parametrize("dt", DTYPES)
def test_unary_float_ops_against_numpy(name, dt):
    a = unary_input(name, (3, 5), dt)
    res = a.dtype if np.issubdtype(dt, np.floating) else np.dtype(np.float32)  # ints -> default
    with np.errstate(divide="ignore"):
        want = UNARY_FLOAT[name](a.astype(np.float64)).astype(res)
    rtol = 1e-5 if res == np.float32 else 1e-12
    check(getattr(t(a), name)(), want, rtol=rtol)
    check(getattr(cddp, name)(t(a)), want, rtol=rtol)


@pytest.mark.parametrize("name", list(UNARY_SAME))
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64, np.int32])
def test_unary_same_dtype_ops_against_numpy(name, dt):
    a = rand((4, 5), dt) * (np.asarray(2.5, dt) if np.issubdtype(dt, np.floating) else 1)
    if np.issubdtype(dt, np.floating):
        a[0, :3] = [0.5, -1.5, 2.5]             # round half to even, as torch
    check(getattr(t(a), name)(), UNARY_SAME[name](a))
    check(getattr(cddp, name)(t(a)), UNARY_SAME[name](a))


@pytest.mark.parametrize("name,ref", [("exp", np.exp), ("tanh", np.tanh),
                                      ("sigmoid", lambda a: 1 / (1 + np.exp(-a)))])
def test_float32_exp_tanh_sigmoid_accuracy(name, ref):
    """float32 exp/tanh/sigmoid use branch-free polynomials (not libm): within 3 ulp of the
    float64 result over the whole range (exp and tanh: 2), NaN / infinities / denormals as
    libm."""
    x = np.concatenate([np.linspace(-110, 100, 400001, dtype=np.float32),
                        np.array([0.0, -0.0, 1e-30, -1e-30, 0.6249, 0.625, 0.6251, -0.625,
                                  88.72, -87.3, -103.9], np.float32),
                        RNG.standard_normal(10000).astype(np.float32) * 3])
    got = n(getattr(cddp.from_numpy(x), name)()).astype(np.float64)
    with np.errstate(over="ignore"):
        want = ref(x.astype(np.float64))
        want32 = want.astype(np.float32)
    normal_range = np.isfinite(want32) & (np.abs(want32) >= np.finfo(np.float32).tiny)
    ulps = np.abs(got - want)[normal_range] / np.spacing(np.abs(want32[normal_range]))
    assert ulps.max() <= 3.0, (x[normal_range][np.argmax(ulps)], ulps.max())
    tiny = ~normal_range & np.isfinite(want32)
    # below float32's normal range: exp within 2 denormal steps; sigmoid's 1 / (1 + exp(-x))
    # is 0 once exp(-x) overflows, as torch's and libm's
    close = np.abs(got[tiny] - want[tiny]) <= 2 * 1.4e-45
    assert np.all(close | ((name == "sigmoid") & (got[tiny] == 0)))
    special = np.array([np.nan, np.inf, -np.inf, 200.0, -200.0], np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(n(getattr(t(special), name)()),
                                      ref(special.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (7,), (2, 3, 4)])
def test_unary_shapes_including_empty_and_0dim(shape):
    a = rand(shape, np.float64)
    check(t(a).exp(), np.exp(a))
    check(-t(a), -a)
    check(cddp.sigmoid(t(a)), 1 / (1 + np.exp(-a)))
    check(t(a).clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5))


def test_unary_on_strided_input():
    a = RNG.standard_normal((6, 8)).T[1::2]
    x = cddp.from_numpy(a)
    assert not x.is_contiguous()
    check(x.exp(), np.exp(a))
    check(x.relu(), np.maximum(a, 0))
    check(x.abs(), np.abs(a))


def test_bool_unary_rules():
    b = np.array([True, False, True])
    check(cddp.sign(t(b)), b)
    check(cddp.square(t(b)), b.astype(np.int64))                      # pow(bool, 2) -> int64
    check(cddp.exp(t(b)), np.exp(b.astype(np.float32)))
    check(cddp.logical_not(t(b)), ~b)
    check(~t(b), ~b)
    check(~t(np.array([1, -2, 0])), np.array([-2, 1, -1]))
    check(cddp.bitwise_not(t(np.array([5], dtype=np.int32))), np.array([-6], dtype=np.int32))
    with pytest.raises(RuntimeError, match="Negation"):
        -t(b)
    with pytest.raises(RuntimeError, match="abs_cpu"):
        abs(t(b))
    with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
        t(b).relu()


def test_predicates_and_logical_ops():
    a = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype=np.float32)
    check(cddp.isnan(t(a)), np.isnan(a))
    check(t(a).isinf(), np.isinf(a))
    check(t(a).isfinite(), np.isfinite(a))
    check(cddp.isnan(t(np.array([1, 2]))), np.array([False, False]))
    check(cddp.isfinite(t(np.array([1, 2]))), np.array([True, True]))
    b = np.array([2, 0, 0, 3, 1])
    check(cddp.logical_and(t(a), t(b)), np.logical_and(a, b))
    check(t(a).logical_or(t(b)), np.logical_or(a, b))
    check(cddp.logical_xor(t(a), t(b)), np.logical_xor(a, b))
    check(cddp.logical_not(t(a)), np.logical_not(a))
    check(cddp.logical_and(t(b), 0.0), np.zeros(5, dtype=bool))


@pytest.mark.parametrize("da", [np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("db", [np.int64, np.int32, np.bool_])
def test_bitwise_against_numpy(da, db):
    a, b = rand((3, 4), da, -8, 8), rand((4,), db, -8, 8)
    res = np.promote_types(a.dtype, b.dtype)
    check(t(a) & t(b), a.astype(res) & b.astype(res))
    check(t(a) | t(b), a.astype(res) | b.astype(res))
    check(t(a) ^ t(b), a.astype(res) ^ b.astype(res))
    check(cddp.bitwise_and(t(a), t(b)), a.astype(res) & b.astype(res))
    check(t(a).bitwise_xor(t(b)), a.astype(res) ^ b.astype(res))


def test_integer_arithmetic_wraps_instead_of_overflowing():
    big = np.array([2**62, -2**63, 2**31], dtype=np.int64)
    with np.errstate(over="ignore"):
        check(t(big) * 4, big * 4)
        check(t(big) + t(big), big + big)
        check(-t(big), -big)
        check(abs(t(big)), np.abs(big))
    i32 = np.array([2**31 - 1, -2**31], dtype=np.int32)
    with np.errstate(over="ignore"):
        check(t(i32) + 1, i32 + np.int32(1))
    check(cddp.div(t(np.array([-2**63])), -1, rounding_mode="trunc"), np.array([-2**63]))


def test_maximum_minimum_propagate_nan():
    a = np.array([1.0, np.nan, 3.0, np.nan], dtype=np.float32)
    b = np.array([np.nan, 2.0, 1.0, np.nan], dtype=np.float32)
    check(cddp.maximum(t(a), t(b)), np.maximum(a, b))
    check(cddp.minimum(t(a), t(b)), np.minimum(a, b))


def test_clamp_forms():
    a = rand((4, 5), np.float32) * 3
    check(t(a).clamp(-1, 1), np.clip(a, -1, 1))
    check(t(a).clamp(min=0.5), np.maximum(a, 0.5))
    check(cddp.clamp(t(a), max=0.5), np.minimum(a, 0.5))
    check(cddp.clip(t(a), -1, 1), np.clip(a, -1, 1))
    lo, hi = rand((5,), np.float32) - 1, rand((4, 1), np.float32) + 1
    check(t(a).clamp(t(lo), t(hi)), np.minimum(np.maximum(a, lo), hi))
    check(t(a).clamp(2, 1), np.full_like(a, 1))                   # min > max gives max
    check(t(np.array([np.nan], dtype=np.float32)).clamp(0, 1), np.array([np.nan], np.float32))
    ia = np.arange(-3, 4)
    check(t(ia).clamp(-1, 2), np.clip(ia, -1, 2))
    check(t(ia).clamp(min=1.5), np.maximum(ia, 1.5).astype(np.float32))   # promotes


def test_where_forms():
    c = RNG.random((3, 4)) > 0.5
    a, b = rand((3, 4), np.float32), rand((4,), np.float32)
    check(cddp.where(t(c), t(a), t(b)), np.where(c, a, b))
    check(t(a).where(t(c), t(b)), np.where(c, a, b))
    check(cddp.where(t(c), t(a), 0.0), np.where(c, a, 0).astype(np.float32))
    check(cddp.where(t(c), 1, 2), np.where(c, 1, 2).astype(np.int64))
    check(cddp.where(t(c), 1, 2.0), np.where(c, 1, 2).astype(np.float32))
    check(cddp.where(t(c[:, :1]), t(a.astype(np.int32)), 7), np.where(c[:, :1], a.astype(np.int32), 7))


def test_large_tensors_take_the_nogil_path():
    a, b = rand((300, 400), np.float32), rand((400,), np.float32)
    check(t(a) + t(b), a + b)
    check(t(a).sigmoid(), (1 / (1 + np.exp(-a.astype(np.float64)))).astype(np.float32),
          rtol=1e-5)
    v = a.T[::2]                                   # strided: the iterator path, GIL released
    check(cddp.from_numpy(v) * 2 - t(np.ones(300, np.float32)), v * 2 - 1)
    x = t(a)
    x.mul_(0.5)
    check(x, a * 0.5)


def test_numpy_operands_and_scalars():
    a = rand((3,), np.float32)
    check(t(a) + np.ones(3, np.float32), a + 1)
    check(t(a) * np.float64(2), a * 2)
    check(t(a) + np.int64(1), a + 1)
    check(cddp.add(1, 2), np.array(3))
    check(cddp.add(1.5, 2), np.array(3.5, np.float32))


# ---- promotion against torch ------------------------------------------------------------------

SCALARS = [True, 3, 2.5]


def _tdt(torch, d):
    return {np.float32: torch.float32, np.float64: torch.float64, np.int64: torch.int64,
            np.int32: torch.int32, np.bool_: torch.bool}[d]


def _same_dtype(cx, tx):
    assert str(cx.dtype).split(".")[-1] == str(tx.dtype).split(".")[-1], (cx.dtype, tx.dtype)


@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", DTYPES)
@pytest.mark.parametrize("kind", ["dim-dim", "dim-0dim", "0dim-dim", "0dim-0dim"])
def test_promotion_tensor_tensor_matches_torch(torch, da, db, kind):
    sa = () if kind.startswith("0dim") else (2,)
    sb = () if kind.endswith("-0dim") else (2,)
    a, b = rand(sa, da, 1, 3), rand(sb, db, 1, 3)
    ta, tb = torch.from_numpy(np.array(a)), torch.from_numpy(np.array(b))
    assert torch.result_type(ta, tb) == (ta + tb).dtype or da == db == np.bool_
    for name, op in [("add", operator.add), ("mul", operator.mul), ("div", operator.truediv),
                     ("lt", operator.lt), ("eq", operator.eq),
                     ("max", cddp.maximum)]:
        if name == "max":
            got, ref = cddp.maximum(t(a), t(b)), torch.maximum(ta, tb)
        else:
            got, ref = op(t(a), t(b)), op(ta, tb)
        _same_dtype(got, ref)
        np.testing.assert_allclose(n(got).astype(np.float64), ref.numpy().astype(np.float64),
                                   rtol=1e-6)


@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("s", SCALARS)
@pytest.mark.parametrize("zero_dim", [False, True])
def test_promotion_tensor_scalar_matches_torch(torch, da, s, zero_dim):
    a = rand(() if zero_dim else (3,), da, 1, 4)
    ta = torch.from_numpy(np.array(a))
    for op in [operator.add, operator.mul, operator.truediv, operator.pow, operator.ge,
               lambda x, y: x - y, lambda x, y: y - x, lambda x, y: y / x, lambda x, y: y * x]:
        try:
            ref = op(ta, s)
        except RuntimeError as e:
            with pytest.raises(RuntimeError):
                op(t(a), s)
            assert "bool" in str(e).lower() or "pow" in str(e)
            continue
        got = op(t(a), s)
        _same_dtype(got, ref)
        np.testing.assert_allclose(n(got).astype(np.float64), ref.numpy().astype(np.float64),
                                   rtol=1e-6)


def test_promotion_follows_default_dtype(torch):
    x = t(np.array([1, 2]))
    assert (x * 1.5).dtype == cddp.float32 and (x / 2).dtype == cddp.float32
    cddp.set_default_dtype(cddp.float64)
    try:
        assert (x * 1.5).dtype == cddp.float64 and (x / 2).dtype == cddp.float64
        assert cddp.exp(x).dtype == cddp.float64
        assert (t(np.array([1.0], np.float32)) * 1.5).dtype == cddp.float32
    finally:
        cddp.set_default_dtype(cddp.float32)


# ---- gradients: finite differences --------------------------------------------------------

def pos(*shape):
    return np.abs(RNG.standard_normal(shape)) + 0.5


def normal(*shape):
    return RNG.standard_normal(shape)


def away(*shape):
    """normals kept away from 0 (and from each other, for kinks)"""
    a = RNG.standard_normal(shape)
    return np.where(np.abs(a) < 0.1, 0.3, a)


GRADCHECKS = {
    "add": (lambda a, b: a + b, [normal(3, 4), normal(4)]),
    "add_alpha": (lambda a, b: cddp.add(a, b, alpha=-2.5), [normal(3, 1), normal(1, 4)]),
    "sub": (lambda a, b: a - b, [normal(2, 3), normal(3)]),
    "sub_alpha": (lambda a, b: a.sub(b, alpha=3), [normal(3), normal(2, 3)]),
    "rsub": (lambda a: 2 - a, [normal(4)]),
    "mul": (lambda a, b: a * b, [normal(3, 4), normal(3, 1)]),
    "mul_scalar": (lambda a: 3 * a * 0.5, [normal(5)]),
    "div": (lambda a, b: a / b, [normal(3, 4), away(4)]),
    "rdiv": (lambda a: 2 / a, [away(5)]),
    "div_scalar": (lambda a: a / 4, [normal(5)]),
    "pow_tt": (lambda a, b: a ** b, [pos(3, 2), normal(2)]),
    "pow_ts": (lambda a: a ** 2.5, [pos(4)]),
    "pow_ts2": (lambda a: a ** 2, [normal(4)]),
    "pow_ts_neg": (lambda a: a.pow(-1.5), [pos(4)]),
    "pow_st": (lambda a: 1.7 ** a, [normal(2, 3)]),
    "remainder": (cddp.remainder, [normal(3, 4) * 3, away(4)]),
    "fmod": (lambda a, b: a.fmod(b), [normal(3, 4) * 3, away(3, 1)]),
    "maximum": (cddp.maximum, [away(3, 4), away(4)]),
    "minimum": (cddp.minimum, [away(3, 4), away(3, 1)]),
    "where": (lambda a, b: cddp.where(t(np.arange(12).reshape(3, 4) % 3 == 0), a, b),
              [normal(3, 4), normal(4)]),
    "where_scalar": (lambda a: cddp.where(t(np.array([True, False, True])), 0.5, a), [normal(3)]),
    "clamp": (lambda a: a.clamp(-0.5, 0.7), [away(4, 3)]),
    "clamp_min": (lambda a: cddp.clamp(a, min=0.2), [away(6)]),
    "clamp_tensor": (lambda a, lo, hi: a.clamp(lo, hi), [normal(3, 4), normal(4) - 0.8, normal(3, 1) + 0.8]),
    "neg": (lambda a: -a, [normal(3)]),
    "abs": (abs, [away(2, 3)]),
    "relu": (lambda a: a.relu(), [away(6)]),
    "square": (cddp.square, [normal(5)]),
}
for _name in UNARY_FLOAT:
    GRADCHECKS[_name] = (getattr(cddp, _name),
                         [pos(2, 3) if _name in POSITIVE_DOMAIN else normal(2, 3) * 0.7])


@pytest.mark.parametrize("name", list(GRADCHECKS))
def test_gradcheck(name):
    op, arrays = GRADCHECKS[name]
    gradcheck(op, *[np.array(a) for a in arrays])


def test_gradient_of_shared_input_accumulates():
    gradcheck(lambda a: a * a + a.exp() * a - a / (a * a + 1), normal(4))


def test_zero_gradient_ops_record_nodes():
    x = t(normal(4), requires_grad=True)
    for f in [cddp.sign, cddp.floor, cddp.ceil, cddp.round, cddp.trunc,
              lambda a: cddp.div(a, 2, rounding_mode="floor")]:
        x.grad = None
        y = f(x)
        assert y.grad_fn is not None
        y.backward(t(np.ones(4)))
        np.testing.assert_array_equal(n(x.grad), np.zeros(4))


def test_integer_and_comparison_results_have_no_history():
    x = t(normal(3), requires_grad=True)
    assert (x > 0).grad_fn is None and not (x > 0).requires_grad
    assert cddp.isnan(x).grad_fn is None
    i = t(np.array([1, 2, 3]))
    assert (i * 2).grad_fn is None
    with cddp.no_grad():
        assert (x * 2).grad_fn is None


def test_node_names():
    x, y = t(pos(3), True), t(pos(3), True)
    names = {
        "AddBackward0": x + y, "SubBackward0": x - y, "MulBackward0": x * y,
        "DivBackward0": x / y, "PowBackward0": x ** 2, "PowBackward1": x ** y,
        "PowBackward2": 2 ** x, "MaximumBackward0": cddp.maximum(x, y),
        "ExpBackward0": x.exp(), "SigmoidBackward0": x.sigmoid(), "ReluBackward0": x.relu(),
        "ClampBackward1": x.clamp(0, 1), "ClampBackward0": x.clamp(y),
        "WhereBackward0": cddp.where(x > 1, x, y), "NegBackward0": -x,
    }
    for name, out in names.items():
        assert out.grad_fn.name() == name


# ---- values and gradients against torch ----------------------------------------------------------

KINKS = np.array([-2.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 2.0, 3.0], dtype=np.float32)

TORCH_CASES = {
    # name: (fn(lib, *xs), inputs)
    "add_alpha": (lambda L, a, b: L.add(a, b, alpha=0.5), [normal(3, 4), normal(4)]),
    "sub": (lambda L, a, b: L.sub(a, b, alpha=2), [normal(3, 1), normal(4)]),
    "rsub": (lambda L, a: 1.5 - a, [normal(5)]),
    "mul": (lambda L, a, b: a * b, [normal(2, 3), normal(2, 1)]),
    "div": (lambda L, a, b: a / b, [normal(3, 4), away(3, 1)]),
    "rdiv": (lambda L, a: 3 / a, [away(5)]),
    "pow_tt": (lambda L, a, b: a ** b, [np.array([0.0, 0.0, 0.5, 2.0, 1.5]),
                                        np.array([0.0, 2.0, -1.0, 0.5, 3.0])]),
    "pow_ts": (lambda L, a: a ** 3, [KINKS]),
    "pow_ts0": (lambda L, a: a ** 0, [KINKS]),
    "pow_ts_half": (lambda L, a: a.pow(0.5), [pos(5)]),
    "pow_st": (lambda L, a: 2.5 ** a, [KINKS]),
    "pow_st0": (lambda L, a: 0.0 ** a, [np.array([0.0, 1.0, 2.0])]),
    "remainder": (lambda L, a, b: L.remainder(a, b), [normal(3, 4) * 3, away(4)]),
    "fmod": (lambda L, a, b: L.fmod(a, b), [normal(3, 4) * 3, away(3, 1)]),
    "div_floor": (lambda L, a, b: L.div(a, b, rounding_mode="floor") * a,
                  [normal(5) * 3, away(5)]),
    "div_trunc": (lambda L, a, b: a.div(b, rounding_mode="trunc") + b, [normal(5) * 3, away(5)]),
    "maximum_ties": (lambda L, a, b: L.maximum(a, b), [KINKS, KINKS[::-1].copy()]),
    "minimum_ties": (lambda L, a, b: L.minimum(a, b), [KINKS, np.zeros_like(KINKS)]),
    "abs_kink": (lambda L, a: a.abs(), [KINKS]),
    "relu_kink": (lambda L, a: L.relu(a), [KINKS]),
    "clamp_kink": (lambda L, a: a.clamp(-1.0, 1.0), [KINKS]),
    "clamp_min": (lambda L, a: L.clamp(a, min=0.0), [KINKS]),
    "clamp_max": (lambda L, a: L.clamp(a, max=0.5), [KINKS]),
    "clamp_tensors": (lambda L, a, lo, hi: a.clamp(lo, hi),
                      [KINKS, np.full(9, -0.5), np.array([1.0] * 7 + [-1.0, -1.0])]),
    "clamp_tensor_min": (lambda L, a, lo: L.clamp(a, min=lo), [KINKS, np.full(9, 0.5)]),
    "clamp_inverted": (lambda L, a: a.clamp(1.0, -1.0), [KINKS]),
    "where": (lambda L, a, b: L.where(a > b, a, b), [normal(3, 4), normal(4)]),
    "where_method": (lambda L, a, b: a.where(b > 0, 2.0), [normal(2, 3), normal(3)]),
    "sqrt": (lambda L, a: a.sqrt(), [pos(4)]),
    "rsqrt": (lambda L, a: a.rsqrt(), [pos(4)]),
    "sigmoid": (lambda L, a: L.sigmoid(a), [normal(5) * 3]),
    "tanh": (lambda L, a: L.tanh(a), [normal(5) * 2]),
    "sign": (lambda L, a: a.sign() * a, [KINKS]),
    "square": (lambda L, a: L.square(a), [KINKS]),
    "neg": (lambda L, a: -a, [KINKS]),
    "chain": (lambda L, a, b: (a * b + a.exp() / (1 + b * b)).tanh() - L.sigmoid(a) ** 2,
              [normal(3, 4), normal(4)]),
}
for _name in UNARY_FLOAT:
    TORCH_CASES["u_" + _name] = ((lambda name: lambda L, a: getattr(L, name)(a))(_name),
                                 [pos(2, 5) if _name in POSITIVE_DOMAIN else normal(2, 5)])


@pytest.mark.parametrize("name", list(TORCH_CASES))
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_values_and_grads_match_torch(torch, name, dt):
    fn, inputs = TORCH_CASES[name]
    inputs = [np.asarray(a, dtype=dt) for a in inputs]
    xs = [t(a, requires_grad=True) for a in inputs]
    txs = [torch.tensor(a, requires_grad=True) for a in inputs]
    out, tout = fn(cddp, *xs), fn(torch, *txs)
    rtol = 2e-5 if dt == np.float32 else 1e-10
    _same_dtype(out, tout)
    np.testing.assert_allclose(n(out), tout.detach().numpy(), rtol=rtol, atol=rtol)
    w = RNG.standard_normal(tout.shape).astype(dt)
    out.backward(t(w))
    tout.backward(torch.from_numpy(w))
    for x, tx in zip(xs, txs):
        tg = np.zeros_like(tx.detach().numpy()) if tx.grad is None else tx.grad.numpy()
        g = np.zeros_like(tg) if x.grad is None else n(x.grad)
        np.testing.assert_allclose(g, tg, rtol=rtol, atol=rtol, equal_nan=True)


def test_mixed_precision_grads_match_torch(torch):
    a, b = normal(3, 4).astype(np.float32), normal(4)
    x, y = t(a, True), t(b, True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, tout = x * y / (y * y + 1), tx * ty / (ty * ty + 1)
    _same_dtype(out, tout)
    w = normal(3, 4)
    out.backward(t(w))
    tout.backward(torch.from_numpy(w))
    assert x.grad.dtype == cddp.float32 and y.grad.dtype == cddp.float64
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(n(y.grad), ty.grad.numpy(), rtol=1e-5)


# ---- in place ---------------------------------------------------------------------------------

def test_iadd_is_in_place_and_bumps_version():
    a = normal(3, 4).astype(np.float32)
    x = t(a)
    xid, v = id(x), x._version
    x += t(np.ones(4, np.float32))
    assert id(x) == xid and x._version == v + 1
    x -= 1
    x *= 2
    x /= 4
    one = np.float32(1)
    np.testing.assert_array_equal(n(x), ((a + one) - one) * np.float32(2) / np.float32(4))
    assert x._version == v + 4


def test_in_place_methods_return_self():
    a = normal(5)
    x = t(a)
    assert x.add_(t(a), alpha=2) is x
    np.testing.assert_allclose(n(x), 3 * a)
    assert x.sub_(1) is x and x.mul_(t(a)) is x and x.div_(2) is x
    np.testing.assert_allclose(n(x), (3 * a - 1) * a / 2)
    x = t(a)
    assert x.clamp_(-0.5, 0.5) is x and x.relu_() is x and x.neg_() is x
    np.testing.assert_allclose(n(x), -np.maximum(np.clip(a, -0.5, 0.5), 0))
    x = t(np.abs(a))
    assert x.pow_(2) is x and x.sqrt_() is x and x.exp_() is x
    np.testing.assert_allclose(n(x), np.exp(np.abs(a)), rtol=1e-12)
    x = t(np.array([7, -7]))
    x.div_(2, rounding_mode="floor")
    np.testing.assert_array_equal(n(x), [3, -4])


def test_module_level_in_place_functions():
    a = normal(4)
    x = t(a)
    assert cddp.relu_(x) is x and cddp.sigmoid_(x) is x and cddp.clamp_(x, max=0.6) is x
    np.testing.assert_allclose(n(x), np.minimum(1 / (1 + np.exp(-np.maximum(a, 0))), 0.6))


def test_in_place_writes_through_views_and_strides():
    base = np.zeros((4, 6))
    x = cddp.from_numpy(base[:, ::2])
    x += 1.5
    np.testing.assert_array_equal(base[:, ::2], 1.5)
    np.testing.assert_array_equal(base[:, 1::2], 0)


def test_in_place_casts_into_self_dtype():
    x = t(np.array([1.0, 2.0], np.float32))
    x += t(np.array([0.5, 0.5]))                       # float64 result written into float32
    assert x.dtype == cddp.float32
    np.testing.assert_array_equal(n(x), [1.5, 2.5])
    i = t(np.array([1, 2], np.int32))
    i += t(np.array([2**33 + 1]))                      # int64 result, wraps into int32
    assert i.dtype == cddp.int32 and n(i).tolist() == [2, 3]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        j = t(np.array([1, 2]))
        j += 1.5
    with pytest.raises(RuntimeError, match="result type Long can't be cast to the desired output type Bool"):
        t(np.array([True])).add_(1)
    with pytest.raises(RuntimeError, match="can't be cast"):
        t(np.array([1, 2])).exp_()
    with pytest.raises(RuntimeError, match="output with shape \\[1\\] doesn't match the broadcast shape \\[3\\]"):
        t(np.ones(1)).add_(t(np.ones(3)))


def test_in_place_refuses_leaf_requiring_grad():
    x = t(normal(3), requires_grad=True)
    for f in [lambda: x.add_(1), lambda: x.mul_(2), lambda: x.exp_(), lambda: x.clamp_(0, 1)]:
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
            f()
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x += 1
    with cddp.no_grad():           # optimizer-style update is fine
        x -= 0.5
        x.mul_(2)
    assert x.grad_fn is None and x.requires_grad


def test_in_place_on_non_leaf_records_history_like_torch(torch):
    a, b = normal(3), normal(3)
    x, y = t(a, True), t(b, True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    for L, p, q in [(cddp, x, y), (torch, tx, ty)]:
        z = p * 2
        z.mul_(q)
        z.add_(q, alpha=3)
        z.clamp_(-1.0, 1.0)
        z += p
        z.pow_(2)
        z.div_(q)
        z.sigmoid_()
        out = z
        if L is cddp:
            cout = out
            assert out.grad_fn.name() == "SigmoidBackward0" and not out.is_leaf
        else:
            tout = out
    np.testing.assert_allclose(n(cout), tout.detach().numpy(), rtol=1e-10)
    w = normal(3)
    cout.backward(t(w))
    tout.backward(torch.from_numpy(w))
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(n(y.grad), ty.grad.numpy(), rtol=1e-10)


def test_in_place_saved_output_is_checked_like_torch(torch):
    for L in (cddp, torch):
        x = L.tensor([0.5, -1.0], requires_grad=True)
        z = x * 1
        z.sigmoid_()                     # saves its output: z itself
        z.mul_(3)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward(L.tensor([1.0, 1.0]))


def test_in_place_on_plain_tensor_with_grad_operand_gets_history():
    y = t(normal(3), True)
    z = t(np.zeros(3))
    z.add_(y, alpha=2)
    assert z.grad_fn is not None
    z.backward(t(np.ones(3)))
    np.testing.assert_allclose(n(y.grad), [2, 2, 2])


def test_in_place_after_save_is_detected():
    x = t(normal(3), True)
    y = x * 1
    z = y.exp()                     # saves its output
    w = y * y                       # saves y
    y.add_(1)
    z.backward(t(np.ones(3)))       # exp's saved output is another tensor: fine
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.backward(t(np.ones(3)))


def test_in_place_refuses_expanded_output():
    x = t(np.ones(3)) if not hasattr(cddp.Tensor, "expand") else t(np.ones(1)).expand(3)
    if hasattr(cddp.Tensor, "expand"):
        with pytest.raises(RuntimeError, match="single memory location"):
            x.add_(1)
    base = np.zeros(3)
    v = cddp.from_numpy(np.lib.stride_tricks.as_strided(base, (3,), (0,)))
    with pytest.raises(RuntimeError, match="single memory location"):
        v.add_(1)


# ---- bad inputs ---------------------------------------------------------------------------------

def test_bad_operands_raise_type_error():
    x = t(normal(3))
    with pytest.raises(TypeError, match="unsupported operand"):
        x + "a"
    with pytest.raises(TypeError):
        None * x
    with pytest.raises(TypeError, match="unsupported operand"):
        x += [1, 2, 3]
    with pytest.raises(TypeError, match="argument 'other' must be Tensor or Number, not str"):
        x.add("a")
    with pytest.raises(TypeError, match="argument 'other'"):
        cddp.mul(x, object())
    with pytest.raises(TypeError, match="argument 'alpha' must be Number"):
        x.add(x, alpha=x)
    with pytest.raises(TypeError, match="must be Tensor, not int"):
        cddp.maximum(x, 2)
    with pytest.raises(TypeError, match="must be Tensor"):
        cddp.exp(2.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.add(x, beta=2)
    with pytest.raises(TypeError, match="positional"):
        x.mul(x, x)
    with pytest.raises(TypeError, match="missing required argument 'other'"):
        x.add()
    assert (x == "a") is False and (x != None) is True  # noqa: E711
    with pytest.raises(TypeError, match="not supported between"):
        x < None


def test_shape_mismatch_raises_runtime_error():
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        t(np.ones(3)) + t(np.ones(4))
    with pytest.raises(RuntimeError, match="must match"):
        cddp.where(t(np.ones(2, bool)), t(np.ones(3)), 0.0)


def test_op_specific_errors():
    f, i = t(normal(3)), t(np.array([1, 2, 3]))
    with pytest.raises(RuntimeError, match="bitwise_and_cpu\" not implemented for 'Double'"):
        f & f
    with pytest.raises(RuntimeError, match="not implemented for 'Double'"):
        cddp.bitwise_or(f, i)
    with pytest.raises(TypeError, match="only implemented on integer and Boolean"):
        ~f
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        cddp.where(i, f, f)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        f.clamp()
    with pytest.raises(RuntimeError, match="rounding_mode"):
        f.div(f, rounding_mode="round")
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        i.add(i, alpha=0.5)
    with pytest.raises(RuntimeError, match="Boolean alpha"):
        f.sub(f, alpha=True)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        i ** -1
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cddp.div(i, t(np.array([1, 0, 1])), rounding_mode="floor")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cddp.floor_divide(i, 0)
    with pytest.raises(RuntimeError, match="Overflow"):
        i + 2**70
    with pytest.raises(RuntimeError, match="pow"):
        t(np.array([True])) ** t(np.array([True]))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(n(f / 0.0), n(f) / 0.0)


def test_errors_match_torch_types(torch):
    cases = [lambda L, T: T([1.5]) & T([1.0]), lambda L, T: -T([True]),
             lambda L, T: T([1, 2]).add_(1.5), lambda L, T: T([1.0, 2.0]) + T([1.0, 2.0, 3.0]),
             lambda L, T: L.where(T([1, 0]), 1.0, 2.0), lambda L, T: T([1]) ** -1,
             lambda L, T: T([True]) - T([True]), lambda L, T: T([1.0]) + "x"]
    for case in cases:
        with pytest.raises(Exception) as ce:
            case(cddp, cddp.tensor)
        with pytest.raises(Exception) as te:
            case(torch, torch.tensor)
        assert issubclass(ce.type, te.type) or issubclass(te.type, ce.type), (ce.type, te.type)


# ---- speed ----------------------------------------------------------------------------------------

def test_small_add_is_cheaper_than_torch(torch):
    a, b = cddp.tensor([1.0, 2.0, 3.0, 4.0]), cddp.tensor([2.0, 3.0, 4.0, 5.0])
    ta, tb = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2.0, 3.0, 4.0, 5.0])
    ours = min(timeit.repeat(lambda: a + b, number=20000, repeat=5))
    theirs = min(timeit.repeat(lambda: ta + tb, number=20000, repeat=5))
    assert ours < theirs, (ours, theirs)


# ---- inverse and hyperbolic trigonometry (ArcFace's margin: cos(acos(x) + m)) -------------

TRIG = [("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan), ("sinh", np.sinh),
        ("cosh", np.cosh), ("arcsin", np.arcsin), ("arccos", np.arccos), ("arctan", np.arctan)]


@pytest.mark.parametrize("name,ref", TRIG)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig_values_against_numpy(name, ref, dtype):
    a = np.random.default_rng(3).uniform(-0.95, 0.95, (7, 5)).astype(dtype)
    got = getattr(cddp, name)(t(a))
    assert got.dtype == getattr(cddp, np.dtype(dtype).name)
    np.testing.assert_allclose(n(got), ref(a), rtol=3e-7 if dtype == np.float32 else 1e-15)
    np.testing.assert_allclose(n(getattr(t(a), name)()), ref(a), rtol=1e-6)
    x = t(a)
    getattr(x, name + "_")()                                   # in place
    np.testing.assert_allclose(n(x), ref(a), rtol=3e-7 if dtype == np.float32 else 1e-15)
    # integer input promotes to float32, as torch's unary float ops do
    assert getattr(cddp, name)(cddp.tensor([0, 1])).dtype == cddp.float32


@pytest.mark.parametrize("name", ["asin", "acos", "atan", "sinh", "cosh"])
def test_trig_gradcheck(name):
    a = np.random.default_rng(4).uniform(-0.9, 0.9, (4, 3))
    gradcheck(lambda x: getattr(cddp, name)(x), a)


def test_trig_float16_against_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(5).uniform(-0.9, 0.9, 64).astype(np.float32)
    for name in ("asin", "acos", "atan", "sinh", "cosh"):
        for dt in ("float16", "bfloat16"):
            c = getattr(cddp, name)(cddp.tensor(a).to(getattr(cddp, dt)))
            r = getattr(torch, name)(torch.tensor(a).to(getattr(torch, dt)))
            np.testing.assert_array_equal(n(c.float()), r.float().numpy(), err_msg=name + dt)


# ---- element tests: bool bytes, isclose with infinities, sign bits ---------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_isinf_isfinite_store_true_as_one(dtype):
    # glibc's isinf() is -1 for -inf: a stored 255 made sum() 510 and `m == True` False
    a = np.array([-np.inf, 1.0, -np.inf, np.inf, np.nan], dtype=np.float64)
    x = cddp.from_numpy(a).to(getattr(cddp, dtype))
    for fn in ("isinf", "isfinite", "isnan"):
        m = getattr(cddp, fn)(x)
        want = getattr(np, fn)(a)
        assert m.tolist() == want.tolist(), fn
        assert m.sum().item() == int(want.sum()), fn
        assert m.int().tolist() == want.astype(int).tolist(), fn
        assert (m == True).tolist() == want.tolist(), fn          # noqa: E712


def test_isclose_with_infinities_is_numpys():
    a = np.array([2.5, -3.0, np.inf, 1.0, np.nan, -np.inf, 5.0], dtype=np.float32)
    b = np.array([np.inf, -np.inf, np.inf, 1.0 + 1e-6, np.nan, -np.inf, -np.inf],
                 dtype=np.float32)
    for equal_nan in (False, True):
        got = cddp.isclose(t(a), t(b), equal_nan=equal_nan).tolist()
        assert got == np.isclose(a, b, equal_nan=equal_nan).tolist()
        got = cddp.isclose(t(b), t(a), equal_nan=equal_nan).tolist()
        assert got == np.isclose(b, a, equal_nan=equal_nan).tolist()
    assert not cddp.allclose(t(np.float32([1.0])), t(np.float32([np.inf])))


def test_count_nonzero_signbit_and_infinity_tests_are_numpys():
    a = np.array([[1, 0, 2], [0, 0, 3]], dtype=np.int64)
    assert cddp.count_nonzero(t(a)).item() == np.count_nonzero(a)
    for dim in (0, 1, (0, 1)):
        assert cddp.count_nonzero(t(a), dim=dim).tolist() == \
            np.count_nonzero(a, axis=dim).tolist()
    assert t(a).count_nonzero(dim=1).dtype == cddp.int64
    f = np.array([-0.0, 0.0, -1.0, np.nan, -np.nan, -np.inf, np.inf, 3.0], dtype=np.float32)
    for dt, npdt in (("float32", np.float32), ("float64", np.float64), ("float16", np.float16)):
        x = t(f.astype(npdt))
        assert cddp.signbit(x).tolist() == np.signbit(f.astype(npdt)).tolist(), dt
        assert cddp.isneginf(x).tolist() == np.isneginf(f).tolist(), dt
        assert x.isposinf().tolist() == np.isposinf(f).tolist(), dt
    assert cddp.signbit(t(np.array([-2, 0, 5]))).tolist() == [True, False, False]
    assert cddp.isneginf(t(np.array([-2, 0]))).tolist() == [False, False]
