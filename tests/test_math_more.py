"""The special / hyperbolic unary kernels (asinh, acosh, atanh, erfc, erfinv, exp2, lgamma,
digamma, frac, deg2rad, rad2deg and the aliases arcsinh, arccosh, arctanh, sgn, fix) and the
pointwise compositions of cddp/_pointwise.py (lerp, addcmul, addcdiv, atan2, hypot, logaddexp,
xlogy, copysign, fmax / fmin, float_power, logit, nan_to_num, sinc, heaviside, rsub, positive).

Values against NumPy / math / hand values and gradients against central finite differences
(torch-free), then values and gradients against torch (the `torch` fixture skips without it).
Known divergences from torch are strict xfails that name the bug."""
import math

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

INF, NAN = math.inf, math.nan
RNG = np.random.default_rng(2024)
FLOATS = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-6, atol=1e-7), np.float64: dict(rtol=1e-12, atol=1e-14)}
EULER = 0.5772156649015329


def T(torch, a):
    return torch.from_numpy(np.array(a))


def same(got, want, **tol):
    """values equal within tol, NaN where want is NaN, infinities and signed zeros exact."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    z = want == 0
    np.testing.assert_array_equal(np.signbit(got[z]), np.signbit(want[z]), err_msg="signed zero")


# ---- the C unary kernels ------------------------------------------------------------------

def _digamma_ref(x):
    """digamma as the central difference of math.lgamma (error ~1e-9 at h = 1e-5)."""
    h = 1e-5
    return np.array([(math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h) for v in x])


def _erfinv_ref(y):
    """Newton on math.erf from 0 (no SciPy needed)."""
    out = []
    for v in y:
        x = 0.0
        for _ in range(60):
            x -= (math.erf(x) - v) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
        out.append(x)
    return np.array(out)


# name -> (torch-free reference on float64 arrays, interior sample points, grad sample points)
UNARY = {
    "asinh": (np.arcsinh, [-3.0, -0.4, 0.0, 0.6, 20.0], [-2.0, -0.3, 0.2, 3.0]),
    "acosh": (np.arccosh, [1.0, 1.1, 2.0, 30.0], [1.2, 2.0, 5.0]),
    "atanh": (np.arctanh, [-0.99, -0.5, 0.0, 0.3, 0.9], [-0.9, -0.2, 0.4]),
    "erfc": (np.vectorize(math.erfc), [-3.0, -0.5, 0.0, 0.5, 2.0, 6.0], [-2.0, -0.3, 0.7, 2.0]),
    "erfinv": (_erfinv_ref, [-0.999, -0.5, 0.0, 0.1, 0.7, 0.99], [-0.9, -0.3, 0.2, 0.8]),
    "exp2": (np.exp2, [-10.0, -1.5, 0.0, 0.5, 3.0, 20.0], [-2.0, 0.0, 0.5, 3.0]),
    "lgamma": (np.vectorize(math.lgamma), [-2.5, -0.5, 0.1, 1.0, 2.0, 4.5, 30.0],
               [-2.5, -0.5, 0.3, 2.5, 10.0]),
    "digamma": (_digamma_ref, [-2.5, -0.5, 0.25, 1.0, 3.7, 12.0], [-2.5, -0.5, 0.3, 2.5, 10.0]),
    "frac": (lambda x: x - np.trunc(x), [-2.75, -0.5, 0.0, 0.25, 3.5], [-2.5, -0.3, 0.7, 3.2]),
    "deg2rad": (np.deg2rad, [-180.0, -45.0, 0.0, 90.0, 720.0], [-90.0, 10.0, 45.0]),
    "rad2deg": (np.rad2deg, [-3.0, 0.0, 0.5, math.pi], [-1.0, 0.5, 2.0]),
}
ALIASES = {"arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh"}
ALL_UNARY = list(UNARY) + list(ALIASES) + ["sgn", "fix"]
# the float-result kernels: integer and bool inputs give the default float dtype
U_FLOAT = ["asinh", "acosh", "atanh", "erfc", "erfinv", "exp2", "lgamma", "digamma", "deg2rad",
           "rad2deg", "arcsinh", "arccosh", "arctanh"]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", list(UNARY) + list(ALIASES))
def test_unary_values_vs_reference(name, dt):
    ref, pts, _ = UNARY[ALIASES.get(name, name)]
    x = np.array(pts, dtype=dt)
    got = getattr(cddp, name)(t(x))
    assert got.dtype == (cddp.float32 if dt == np.float32 else cddp.float64)
    tol = dict(rtol=1e-9, atol=1e-9) if name == "digamma" and dt == np.float64 else TOL[dt]
    if name == "erfinv" and dt == np.float32:
        tol = dict(rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(n(got), ref(x.astype(np.float64)), **tol)


DIGAMMA_HAND = ([1.0, 0.5, 2.0, -0.5],
                [-EULER, -EULER - 2 * math.log(2), 1 - EULER, -EULER - 2 * math.log(2) + 2])


def test_unary_hand_values():
    d = cddp.float64
    np.testing.assert_allclose(n(cddp.digamma(cddp.tensor(DIGAMMA_HAND[0], dtype=d))),
                               DIGAMMA_HAND[1], rtol=1e-9)
    np.testing.assert_allclose(n(cddp.erfinv(cddp.tensor([0.5, -0.5], dtype=d))),
                               [0.4769362762044699, -0.4769362762044699], rtol=1e-14)
    np.testing.assert_allclose(n(cddp.lgamma(cddp.tensor([5.0, 0.5], dtype=d))),
                               [math.log(24), 0.5 * math.log(math.pi)], rtol=1e-14)
    assert cddp.exp2(cddp.tensor([10.0])).tolist() == [1024.0]
    assert cddp.frac(cddp.tensor([-2.5, 3.25])).tolist() == [-0.5, 0.25]
    assert cddp.sgn(cddp.tensor([-3.0, 0.0, 2.0])).tolist() == [-1.0, 0.0, 1.0]
    assert cddp.fix(cddp.tensor([-2.7, 2.7])).tolist() == [-2.0, 2.0]


@pytest.mark.parametrize("dt", FLOATS)
def test_unary_domain_edges(dt):
    def f(name, vals):
        return n(getattr(cddp, name)(t(np.array(vals, dtype=dt))))
    same(f("erfinv", [1.0, -1.0, 1.5, -2.0, NAN]), [INF, -INF, NAN, NAN, NAN])
    same(f("digamma", [0.0, -1.0, -2.0, -7.0, INF]), [-INF, NAN, NAN, NAN, INF])
    same(f("lgamma", [0.0, -1.0, -2.0, 1.0, 2.0, INF, -INF]), [INF, INF, INF, 0, 0, INF, INF])
    same(f("atanh", [1.0, -1.0, 2.0, -0.0]), [INF, -INF, NAN, -0.0])
    same(f("acosh", [1.0, 0.5, INF]), [0.0, NAN, INF])
    same(f("asinh", [-INF, INF, -0.0]), [-INF, INF, -0.0])
    same(f("erfc", [INF, -INF, NAN]), [0.0, 2.0, NAN])
    same(f("exp2", [-INF, INF, 0.0]), [0.0, INF, 1.0])
    same(f("frac", [INF, -0.0, NAN, -2.0]), [NAN, 0.0, NAN, 0.0])


def test_digamma_float64_accuracy():
    np.testing.assert_allclose(
        n(cddp.digamma(cddp.tensor(DIGAMMA_HAND[0], dtype=cddp.float64))), DIGAMMA_HAND[1],
        rtol=1e-14)


def test_digamma_negative_zero():
    assert cddp.digamma(cddp.tensor([-0.0])).tolist() == [INF]


@pytest.mark.parametrize("name", ALL_UNARY)
def test_unary_method_inplace_and_function_inplace(name):
    x = t(np.array(UNARY.get(ALIASES.get(name, name), (0, [0.3, -0.6, 0.8, 1.5]))[1]))
    want = n(getattr(cddp, name)(x))
    np.testing.assert_array_equal(n(getattr(x, name)()), want)
    y = x.clone()
    assert getattr(y, name + "_")() is y
    np.testing.assert_array_equal(n(y), want)
    z = x.clone()
    getattr(cddp, name + "_")(z)
    np.testing.assert_array_equal(n(z), want)
    if name in ALIASES:
        np.testing.assert_array_equal(want, n(getattr(cddp, ALIASES[name])(x)))


@pytest.mark.parametrize("name", list(UNARY) + list(ALIASES))
def test_unary_grad_finite_differences(name):
    pts = UNARY[ALIASES.get(name, name)][2]
    gradcheck(getattr(cddp, name), np.array(pts), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["sgn", "fix"])
def test_sgn_fix_grad_zero(name):
    x = cddp.tensor([-2.5, 0.5, 3.0], dtype=cddp.float64, requires_grad=True)
    getattr(cddp, name)(x).sum().backward()
    assert n(x.grad).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dt", [cddp.int64, cddp.int32, cddp.int8, cddp.bool])
def test_unary_dtype_rules(dt):
    x = cddp.tensor([1, 0, 1], dtype=dt)
    for name in U_FLOAT:
        assert getattr(cddp, name)(x).dtype == cddp.float32, name
    assert cddp.sgn(x).dtype == dt
    np.testing.assert_allclose(n(cddp.exp2(x)), [2.0, 1.0, 2.0])
    np.testing.assert_allclose(n(cddp.deg2rad(x)), np.deg2rad([1.0, 0.0, 1.0]), rtol=1e-6)
    if dt != cddp.bool:
        assert cddp.fix(x).dtype == dt
    tname = {cddp.int64: "Long", cddp.int32: "Int", cddp.int8: "Char", cddp.bool: "Bool"}[dt]
    with pytest.raises(NotImplementedError, match=f'"frac_cpu" not implemented for \'{tname}\''):
        cddp.frac(x)
    with pytest.raises(NotImplementedError):
        x.clone().frac_()
    assert cddp.asinh(cddp.tensor([1.0], dtype=cddp.float64)).dtype == cddp.float64


def test_unary_inplace_int_refuses_float_result():
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        cddp.tensor([1, 2]).asinh_()


@pytest.mark.parametrize("name", ["fix", "trunc", "floor", "ceil", "round"])
def test_rounding_bool_refused(name):
    """torch's rounding kernels have no bool case: NotImplementedError naming the kernel
    (fix is trunc's alias); integers pass through unchanged."""
    kernel = "trunc" if name == "fix" else name
    with pytest.raises(NotImplementedError, match=f'"{kernel}_vml_cpu" not implemented for '
                                                  "'Bool'"):
        getattr(cddp, name)(cddp.tensor([True, False]))
    with pytest.raises(NotImplementedError):
        getattr(cddp.tensor([True]), name)()
    assert getattr(cddp, name)(cddp.tensor([3, -2])).tolist() == [3, -2]


@pytest.mark.parametrize("name", ALL_UNARY)
def test_unary_inplace_on_leaf_requiring_grad_raises(name):
    x = cddp.tensor([0.3, 0.5], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in "
                                           "an in-place operation"):
        getattr(x, name + "_")()


@pytest.mark.parametrize("name", ["erfinv", "lgamma", "digamma", "asinh", "exp2"])
def test_unary_inplace_in_graph_grad(name):
    pts = np.array(UNARY[name][2][:3])
    x = t(pts, requires_grad=True)
    y = x * 1
    getattr(y, name + "_")()
    y.sum().backward()
    x2 = t(pts, requires_grad=True)
    getattr(cddp, name)(x2).sum().backward()
    np.testing.assert_allclose(n(x.grad), n(x2.grad), rtol=1e-14)


EDGE_PTS = [-3.5, -2.0, -1.0, -0.999, -0.5, -0.0, 0.0, 0.3, 0.999, 1.0, 1.5, 2.0, 3.0, 10.0,
            50.0, INF, -INF, NAN, 1e-8, 171.5, -2.5, 200.0]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", [nm for nm in ALL_UNARY])
def test_unary_vs_torch(torch, name, dt):
    x = np.array(EDGE_PTS, dtype=dt)
    got, want = n(getattr(cddp, name)(t(x))), getattr(torch, name)(T(torch, x)).numpy()
    tol = dict(rtol=1e-5, atol=1e-30) if dt == np.float32 else dict(rtol=1e-12, atol=1e-300)
    same(got, want, **tol)
    assert str(getattr(cddp, name)(t(x)).dtype)[5:] == \
        str(getattr(torch, name)(T(torch, x)).dtype)[6:]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", list(UNARY) + ["sgn", "fix"])
def test_unary_grad_vs_torch(torch, name, dt):
    pts = np.array(UNARY[name][2] if name in UNARY else [-2.5, 0.5, 1.7], dtype=dt)
    w = np.linspace(0.5, 1.5, len(pts)).astype(dt)
    a, b = t(pts, requires_grad=True), T(torch, pts).requires_grad_()
    ya, yb = getattr(cddp, name)(a), getattr(torch, name)(b)
    ya.backward(t(w))
    yb.backward(T(torch, w))
    np.testing.assert_allclose(n(a.grad), b.grad.numpy(force=True),
                               rtol=5e-6 if dt == np.float32 else 1e-9, atol=1e-12)
    if name not in ("sgn", "fix"):
        assert ya.grad_fn.name() == yb.grad_fn.name()


def test_unary_pole_grads_vs_torch(torch):
    for name, pts in [("lgamma", [0.0, -1.0]), ("erfinv", [1.0, -1.0]), ("atanh", [1.0, -1.0]),
                      ("acosh", [1.0]), ("digamma", [0.0])]:
        a = cddp.tensor(pts, dtype=cddp.float64, requires_grad=True)
        b = torch.tensor(pts, dtype=torch.float64, requires_grad=True)
        getattr(cddp, name)(a).sum().backward()
        getattr(torch, name)(b).sum().backward()
        same(n(a.grad), b.grad.numpy())


def test_unary_int_dtype_vs_torch(torch):
    for name in U_FLOAT + ["sgn", "fix"]:
        for v in ([0, 1, 2, 3], [True, False]):
            if name == "fix" and isinstance(v[0], bool):
                continue                             # test_rounding_bool_refused
            a, b = getattr(cddp, name)(cddp.tensor(v)), getattr(torch, name)(torch.tensor(v))
            assert str(a.dtype)[5:] == str(b.dtype)[6:], name
            same(n(a).astype(float), b.numpy().astype(float), rtol=1e-6)


# ---- lerp / addcmul / addcdiv -------------------------------------------------------------

A = RNG.standard_normal(12)
B = RNG.standard_normal(12)
W = RNG.uniform(-0.5, 1.5, 12)


@pytest.mark.parametrize("w", [0.3, 0.7, -0.2, 0.5, 1.0, 1.5])
def test_lerp_scalar_weight(w):
    got = n(cddp.lerp(t(A), t(B), w))
    np.testing.assert_allclose(got, A + w * (B - A), rtol=1e-12, atol=1e-14)
    if w == 1.0:                                     # computed from the end: exactly end
        np.testing.assert_array_equal(got, B)
    x = t(A)
    assert x.lerp_(t(B), w) is x
    np.testing.assert_array_equal(n(x), got)
    np.testing.assert_array_equal(n(t(A).lerp(t(B), w)), got)


def test_lerp_tensor_weight_and_grad():
    np.testing.assert_allclose(n(cddp.lerp(t(A), t(B), t(W))), A + W * (B - A), rtol=1e-12,
                               atol=1e-14)
    x = t(A)
    assert x.lerp_(t(B), t(W)) is x
    np.testing.assert_allclose(n(x), A + W * (B - A), rtol=1e-12, atol=1e-14)
    gradcheck(cddp.lerp, A[:5], B[:5], W[:5])
    gradcheck(lambda a, b: cddp.lerp(a, b, 0.3), A[:4], B[:4])
    gradcheck(lambda a, b: cddp.lerp(a, b, 0.8), A[:4], B[:4])


def test_lerp_inplace_leaf_raises():
    x = cddp.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.lerp_(cddp.zeros(3), 0.3)


@pytest.mark.parametrize("value", [1, 0.5, -2])
def test_addcmul_addcdiv(value):
    c = np.abs(W) + 0.1
    np.testing.assert_allclose(n(cddp.addcmul(t(A), t(B), t(c), value=value)), A + value * B * c,
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(n(cddp.addcdiv(t(A), t(B), t(c), value=value)), A + value * B / c,
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(n(t(A).addcmul(t(B), t(c), value=value)), A + value * B * c,
                               rtol=1e-12, atol=1e-14)
    x = t(A)
    assert x.addcmul_(t(B), t(c), value=value) is x
    assert x.addcdiv_(t(B), t(c), value=value) is x
    np.testing.assert_allclose(n(x), A + value * B * c + value * B / c, rtol=1e-12, atol=1e-13)
    gradcheck(lambda a, b, d: cddp.addcdiv(a, b, d, value=value), A[:4], B[:4], c[:4])
    gradcheck(lambda a, b, d: cddp.addcmul(a, b, d, value=value), A[:4], B[:4], c[:4])


def test_addcdiv_integer_refused():
    for f in (lambda: cddp.addcdiv(cddp.zeros(2), cddp.tensor([1, 2]), cddp.tensor([1, 2])),
              lambda: cddp.zeros(2).addcdiv_(cddp.tensor([1, 2]), cddp.tensor([1, 2]))):
        with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer "
                                               "supported"):
            f()
    # a floating divisor is fine
    assert cddp.addcdiv(cddp.zeros(2), cddp.tensor([1, 2]), cddp.tensor([2.0, 4.0])).tolist() \
        == [0.5, 0.5]


def test_lerp_addc_vs_torch(torch):
    for w in (0.3, 0.7, -0.2, 1.0, 1.5):
        ca, cb = t(A, requires_grad=True), t(B, requires_grad=True)
        ta, tb = T(torch, A).requires_grad_(), T(torch, B).requires_grad_()
        same(n(cddp.lerp(ca, cb, w)), torch.lerp(ta, tb, w).detach().numpy(), rtol=1e-14)
        cddp.lerp(ca, cb, w).sum().backward()
        torch.lerp(ta, tb, w).sum().backward()
        np.testing.assert_allclose(n(ca.grad), ta.grad.numpy())
        np.testing.assert_allclose(n(cb.grad), tb.grad.numpy())
    cs = [t(v, requires_grad=True) for v in (A, B, W)]
    ts = [T(torch, v).requires_grad_() for v in (A, B, W)]
    same(n(cddp.lerp(*cs)), torch.lerp(*ts).detach().numpy(), rtol=1e-14)
    cddp.lerp(*cs).sum().backward()
    torch.lerp(*ts).sum().backward()
    for c_, t_ in zip(cs, ts):
        np.testing.assert_allclose(n(c_.grad), t_.grad.numpy(), rtol=1e-12)
    x, y = t(A.astype(np.float32)), T(torch, A.astype(np.float32))
    x.lerp_(t(B.astype(np.float32)), 0.7)
    y.lerp_(T(torch, B.astype(np.float32)), 0.7)
    np.testing.assert_allclose(n(x), y.numpy(), rtol=1e-6)
    c = np.abs(W) + 0.1
    for v in (1, -0.5):
        same(n(cddp.addcmul(t(A), t(B), t(c), value=v)),
             torch.addcmul(T(torch, A), T(torch, B), T(torch, c), value=v).numpy(), rtol=1e-14)
        same(n(cddp.addcdiv(t(A), t(B), t(c), value=v)),
             torch.addcdiv(T(torch, A), T(torch, B), T(torch, c), value=v).numpy(), rtol=1e-14)


# ---- atan2 / hypot / logaddexp ------------------------------------------------------------

FIN = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e-300, -7e5]
NONFIN = [INF, -INF, NAN]


def _grid(vals):
    y, x = np.meshgrid(vals, vals)
    return y.ravel(), x.ravel()


def test_atan2_quadrants_and_signed_zeros():
    y, x = _grid(FIN)
    for f in (cddp.atan2, cddp.arctan2, lambda a, b: a.atan2(b), lambda a, b: a.arctan2(b)):
        same(n(f(t(y), t(x))), np.arctan2(y, x), rtol=1e-15, atol=0)
    # the four quadrants and the axes by hand
    pts = [(1, 1, math.pi / 4), (1, -1, 3 * math.pi / 4), (-1, -1, -3 * math.pi / 4),
           (-1, 1, -math.pi / 4), (1, 0, math.pi / 2), (-1, 0, -math.pi / 2),
           (0.0, -1, math.pi), (-0.0, -1, -math.pi), (0.0, -0.0, math.pi),
           (-0.0, -0.0, -math.pi), (0.0, 0.0, 0.0), (-0.0, 0.0, -0.0)]
    got = n(cddp.atan2(cddp.tensor([p[0] for p in pts]), cddp.tensor([p[1] for p in pts])))
    same(got, np.array([p[2] for p in pts], dtype=np.float32), rtol=1e-7)
    # integers promote to float32
    assert cddp.atan2(cddp.tensor([1]), cddp.tensor([1])).dtype == cddp.float32
    x = t(y[:6])
    assert x.atan2_(t(np.ones(6))) is x
    np.testing.assert_allclose(n(x), np.arctan2(y[:6], 1.0), rtol=1e-15)


def test_atan2_nonfinite():
    y, x = _grid(FIN[:3] + NONFIN)
    same(n(cddp.atan2(t(y), t(x))), np.arctan2(y, x), rtol=1e-15)


def test_atan2_grad():
    y = np.array([0.3, -1.2, 2.0, 1.0, -0.5, 0.7, -2.0])
    x = np.array([1.0, 0.4, -0.8, 0.0, 0.0, -3.0, 2.0])     # x = 0 axis included
    gradcheck(cddp.atan2, y, x)
    # off the origin the gradient is (x, -y) / (x^2 + y^2)
    a, b = t(y, requires_grad=True), t(x, requires_grad=True)
    cddp.atan2(a, b).sum().backward()
    r2 = x * x + y * y
    np.testing.assert_allclose(n(a.grad), x / r2, rtol=1e-14)
    np.testing.assert_allclose(n(b.grad), -y / r2, rtol=1e-14)
    # at the origin: finite
    a, b = t([0.0, -0.0], requires_grad=True), t([0.0, -0.0], requires_grad=True)
    cddp.atan2(a, b).sum().backward()
    assert np.isfinite(n(a.grad)).all() and np.isfinite(n(b.grad)).all()


def test_hypot():
    y, x = _grid(FIN)
    same(n(cddp.hypot(t(y), t(x))), np.hypot(y, x), rtol=1e-15, atol=0)
    big = cddp.tensor([1e200, 3.0, 1e-200], dtype=cddp.float64)
    np.testing.assert_allclose(n(cddp.hypot(big, big)), np.hypot([1e200, 3.0, 1e-200],
                                                                  [1e200, 3.0, 1e-200]),
                               rtol=1e-15)
    assert cddp.hypot(cddp.tensor([3.0]), cddp.tensor([4.0])).tolist() == [5.0]
    gradcheck(cddp.hypot, A[:6], B[:6])
    x = t(A[:4])
    assert x.hypot_(t(B[:4])) is x
    np.testing.assert_allclose(n(x), np.hypot(A[:4], B[:4]), rtol=1e-15)


def test_hypot_inf_beats_nan():
    same(n(cddp.hypot(cddp.tensor([INF, NAN, -INF]), cddp.tensor([NAN, INF, NAN]))),
         np.array([INF, INF, INF], dtype=np.float32))


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp(name):
    ref = getattr(np, name)
    y, x = _grid(FIN[:6] + [INF, -INF, 1000.0, -1000.0])
    np.testing.assert_allclose(n(getattr(cddp, name)(t(y), t(x))), ref(y, x), rtol=1e-14,
                               atol=1e-15)
    got = n(getattr(cddp, name)(cddp.tensor([-INF, INF, INF, -INF, 800.0]),
                                cddp.tensor([-INF, INF, -INF, 1.0, 800.0])))
    same(got, ref(np.float32([-INF, INF, INF, -INF, 800]), np.float32([-INF, INF, -INF, 1, 800])),
         rtol=1e-6)
    gradcheck(getattr(cddp, name), A[:6], B[:6])
    assert getattr(t(A), name)(t(B)).shape == (12,)


def test_atan2_hypot_logaddexp_vs_torch(torch):
    y, x = _grid(FIN)
    for name in ("atan2", "arctan2", "hypot", "logaddexp", "logaddexp2"):
        for dt in FLOATS:
            yy, xx = y.astype(dt), x.astype(dt)
            got = n(getattr(cddp, name)(t(yy), t(xx)))
            want = getattr(torch, name)(T(torch, yy), T(torch, xx)).numpy()
            same(got, want, rtol=2e-7 if dt == np.float32 else 1e-14,
                 atol=1e-7 if dt == np.float32 else 1e-15)
    a_ = A.copy()
    b_ = B.copy()
    b_[:3] = 0
    a_[3:5] = 0
    for name in ("atan2", "hypot", "logaddexp", "logaddexp2"):
        ca, cb = t(a_, requires_grad=True), t(b_, requires_grad=True)
        ta, tb = T(torch, a_).requires_grad_(), T(torch, b_).requires_grad_()
        getattr(cddp, name)(ca, cb).backward(t(W))
        getattr(torch, name)(ta, tb).backward(T(torch, W))
        np.testing.assert_allclose(n(ca.grad), ta.grad.numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(n(cb.grad), tb.grad.numpy(), rtol=1e-12, atol=1e-15)


# ---- xlogy / copysign / fmax / fmin / float_power -----------------------------------------

def test_xlogy_values():
    x = np.array([0.0, 0.0, 0.0, 1.5, -2.0, 3.0, 0.0])
    y = np.array([0.0, 2.0, -1.0, 2.0, 0.5, 0.0, NAN])
    with np.errstate(all="ignore"):
        want = np.where(x == 0, 0.0, x * np.log(y))
    want[-1] = NAN                                   # x = 0, y = NaN: NaN
    same(n(cddp.xlogy(t(x), t(y))), want, rtol=1e-15)
    # a number on either side
    np.testing.assert_allclose(n(cddp.xlogy(2.0, t(np.array([1.0, 3.0])))), 2 * np.log([1, 3.0]))
    np.testing.assert_allclose(n(cddp.xlogy(t(np.array([0.0, 3.0])), 2.0)), [0, 3 * np.log(2)])
    assert cddp.xlogy(cddp.tensor([0, 2]), cddp.tensor([0, 3])).dtype == cddp.float32
    x1 = t(np.array([1.0, 0.0]))
    assert x1.xlogy_(t(np.array([4.0, 0.0]))) is x1
    np.testing.assert_allclose(n(x1), [math.log(4), 0.0])


def test_xlogy_grads():
    x0 = t(np.array([0.0]), requires_grad=True)
    y0 = t(np.array([0.0]), requires_grad=True)
    out = cddp.xlogy(x0, y0)
    out.sum().backward()
    assert n(out).tolist() == [0.0]
    assert np.isfinite(n(x0.grad)).all() and np.isfinite(n(y0.grad)).all()
    gradcheck(cddp.xlogy, np.array([0.5, -1.5, 2.0]), np.array([0.7, 2.0, 3.0]))
    gradcheck(lambda y: cddp.xlogy(2.5, y), np.array([0.7, 2.0]))
    gradcheck(lambda x: cddp.xlogy(x, 3.0), np.array([0.7, -2.0]))


def test_xlogy_grad_x_at_zero():
    x = t(np.array([0.0, 0.0]), requires_grad=True)
    cddp.xlogy(x, t(np.array([2.0, 5.0]))).sum().backward()
    np.testing.assert_allclose(n(x.grad), np.log([2.0, 5.0]), rtol=1e-14)


def test_copysign():
    y, x = _grid(FIN)
    same(n(cddp.copysign(t(y), t(x))), np.copysign(y, x), rtol=0)
    for s in (2.0, -3.0, 0.0, -0.0, -INF):
        same(n(cddp.copysign(t(A), s)), np.copysign(A, s), rtol=0)
    assert cddp.copysign(cddp.tensor([3, 1]), -2).dtype == cddp.float32
    assert cddp.copysign(cddp.tensor([3, 1]), -2).tolist() == [-3.0, -1.0]
    # grad: sign(input) * sign(other) away from zeros
    gradcheck(cddp.copysign, A[:6], B[:6])
    x = t(A[:4])
    assert x.copysign_(t(-np.ones(4))) is x
    np.testing.assert_array_equal(n(x), -np.abs(A[:4]))


def test_copysign_promotes():
    assert cddp.copysign(cddp.ones(2), cddp.ones(2, dtype=cddp.float64)).dtype == cddp.float64


@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_fmax_fmin(name):
    y, x = _grid([1.0, -2.0, 0.5, NAN, INF, -INF])
    same(n(getattr(cddp, name)(t(y), t(x))), getattr(np, name)(y, x), rtol=0)
    same(n(getattr(t(y), name)(t(x))), getattr(np, name)(y, x), rtol=0)
    # a tie sends the gradient to input
    a = t(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    b = t(np.array([1.0, 1.0, 5.0]), requires_grad=True)
    getattr(cddp, name)(a, b).sum().backward()
    want_a = [1.0, 1.0, 0.0] if name == "fmax" else [1.0, 0.0, 1.0]
    assert n(a.grad).tolist() == want_a
    assert n(b.grad).tolist() == [1.0 - v for v in want_a]
    # NaN side: the gradient goes to the number
    a = t(np.array([NAN, 2.0]), requires_grad=True)
    b = t(np.array([3.0, NAN]), requires_grad=True)
    getattr(cddp, name)(a, b).sum().backward()
    assert n(a.grad).tolist() == [0.0, 1.0] and n(b.grad).tolist() == [1.0, 0.0]


def test_float_power():
    for base, exp in [(t(np.array([2, 3])), 2), (t(np.array([2.0, 3.0], np.float32)), 0.5),
                      (t(np.array([2.0, 4.0], np.float32)), t(np.array([3, -1])))]:
        r = cddp.float_power(base, exp)
        assert r.dtype == cddp.float64
        e = n(exp) if isinstance(exp, cddp.Tensor) else exp
        np.testing.assert_allclose(n(r), np.power(n(base).astype(np.float64),
                                                  np.asarray(e, np.float64)), rtol=1e-15)
    r = cddp.float_power(2, t(np.array([1.0, 0.5], np.float32)))
    assert r.dtype == cddp.float64
    np.testing.assert_allclose(n(r), [2.0, math.sqrt(2)], rtol=1e-15)
    x = t(np.array([2.0, 3.0]))
    assert x.float_power_(2) is x and n(x).tolist() == [4.0, 9.0]
    with pytest.raises(RuntimeError, match="the base given to float_power_ has dtype Float but "
                                           "the operation's result requires dtype Double"):
        cddp.ones(2).float_power_(2)
    gradcheck(cddp.float_power, np.abs(A[:5]) + 0.1, B[:5])


def test_binary_vs_torch(torch):
    y, x = _grid(FIN[:6] + [INF, -INF, NAN])
    for name in ("copysign", "fmax", "fmin", "xlogy", "heaviside", "float_power"):
        same(n(getattr(cddp, name)(t(y), t(x))),
             getattr(torch, name)(T(torch, y), T(torch, x)).numpy(), rtol=1e-15)
    for s in (2.0, -0.0, 0.0, -3):
        for name in ("copysign", "xlogy", "float_power"):
            same(n(getattr(cddp, name)(t(y), s)), getattr(torch, name)(T(torch, y), s).numpy(),
                 rtol=1e-15)
        for name in ("xlogy", "float_power"):
            same(n(getattr(cddp, name)(s, t(x))), getattr(torch, name)(s, T(torch, x)).numpy(),
                 rtol=1e-15)
    a_, b_ = A.copy(), B.copy()
    a_[6] = b_[6]                                      # a fmax / fmin tie
    for name, args in [("xlogy", (a_, np.abs(b_) + 0.1)), ("fmax", (a_, b_)), ("fmin", (a_, b_)),
                       ("copysign", (a_, b_)), ("float_power", (np.abs(a_) + 0.1, b_))]:
        cs = [t(v, requires_grad=True) for v in args]
        ts = [T(torch, v).requires_grad_() for v in args]
        getattr(cddp, name)(*cs).backward(t(W))
        getattr(torch, name)(*ts).backward(T(torch, W))
        for c_, t_ in zip(cs, ts):         # copysign's other gets no gradient (torch: zeros)
            got = np.zeros(12) if c_.grad is None else n(c_.grad)
            np.testing.assert_allclose(got, t_.grad.numpy(), rtol=1e-12, atol=1e-15)
    for v in ([1, 2, 0, -3], [1.0, 2.0, 0.0]):
        for name in ("float_power", "xlogy", "copysign"):
            a, b = getattr(cddp, name)(cddp.tensor(v), cddp.tensor(v)), \
                getattr(torch, name)(torch.tensor(v), torch.tensor(v))
            assert str(a.dtype)[5:] == str(b.dtype)[6:], name


# ---- logit / nan_to_num / sinc / heaviside / rsub / positive ------------------------------

P = RNG.uniform(0.05, 0.95, 8)


def test_logit():
    np.testing.assert_allclose(n(cddp.logit(t(P))), np.log(P / (1 - P)), rtol=1e-13)
    same(n(cddp.logit(t(np.array([0.0, 1.0, 0.5])))), [-INF, INF, 0.0])
    eps = 1e-6
    np.testing.assert_allclose(n(cddp.logit(t(np.array([0.0, 1.0, 1e-9, 0.3])), eps=eps)),
                               [math.log(eps / (1 - eps)), math.log((1 - eps) / eps),
                                math.log(eps / (1 - eps)), math.log(0.3 / 0.7)], rtol=1e-10)
    np.testing.assert_allclose(n(t(P).logit(0.25)), np.log(np.clip(P, .25, .75) /
                                                           (1 - np.clip(P, .25, .75))), rtol=1e-13)
    assert cddp.logit(cddp.tensor([0, 1])).dtype == cddp.float32
    x = t(P.copy())
    assert x.logit_() is x
    np.testing.assert_allclose(n(x), np.log(P / (1 - P)), rtol=1e-13)
    gradcheck(cddp.logit, P)
    gradcheck(lambda p: cddp.logit(p, eps=0.1), np.array([0.02, 0.3, 0.5, 0.97]))


@pytest.mark.parametrize("dt", FLOATS)
def test_nan_to_num(dt):
    x = np.array([NAN, INF, -INF, 1.5, -0.0], dtype=dt)
    fi = np.finfo(dt)
    same(n(cddp.nan_to_num(t(x))), np.array([0.0, fi.max, fi.min, 1.5, -0.0], dtype=dt))
    same(n(cddp.nan_to_num(t(x), nan=2.0, posinf=5.0, neginf=-7.0)),
         np.array([2.0, 5.0, -7.0, 1.5, -0.0], dtype=dt))
    same(n(t(x).nan_to_num(posinf=1.0)), np.array([0.0, 1.0, fi.min, 1.5, -0.0], dtype=dt))
    y = t(x)
    assert y.nan_to_num_() is y
    same(n(y), np.nan_to_num(x))
    i = cddp.tensor([1, 2])
    r = cddp.nan_to_num(i)
    assert r.dtype == cddp.int64 and r.tolist() == [1, 2] and r is not i
    # NaN / inf positions get no gradient, finite ones pass it through
    g = t(np.array([NAN, 2.0, INF]), requires_grad=True)
    cddp.nan_to_num(g).sum().backward()
    assert n(g.grad).tolist() == [0.0, 1.0, 0.0]


def test_sinc():
    x = np.array([0.0, -0.0, 0.5, 1.0, -2.3, 1e-3])
    np.testing.assert_allclose(n(cddp.sinc(t(x))), np.sinc(x), rtol=1e-14, atol=1e-16)
    assert cddp.sinc(cddp.tensor([0.0])).tolist() == [1.0]
    a = t(np.array([0.0]), requires_grad=True)
    cddp.sinc(a).backward(t(np.array([1.0])))
    assert n(a.grad).tolist() == [0.0]
    gradcheck(cddp.sinc, np.array([0.3, -1.7, 2.5]))
    assert cddp.sinc(cddp.tensor([1, 0])).dtype == cddp.float32
    y = t(x.copy())
    assert y.sinc_() is y


def test_heaviside_rsub_positive():
    x = np.array([-1.5, 0.0, -0.0, 2.0, INF, -INF])
    v = np.array([0.5, 0.25, 0.75, 0.1, 0.2, 0.3])
    same(n(cddp.heaviside(t(x), t(v))), np.heaviside(x, v))
    assert cddp.heaviside(cddp.tensor([-1, 0, 2]), cddp.tensor([5, 5, 5])).tolist() == [0, 5, 1]
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for tensors with "
                                           "different dtypes"):
        cddp.heaviside(cddp.tensor([1.0]), cddp.tensor([1.0], dtype=cddp.float64))
    y = t(x)
    assert y.heaviside_(t(v)) is y
    np.testing.assert_allclose(n(cddp.rsub(t(A), t(B))), B - A, rtol=1e-15)
    np.testing.assert_allclose(n(cddp.rsub(t(A), t(B), alpha=2)), B - 2 * A, rtol=1e-15)
    np.testing.assert_allclose(n(cddp.rsub(t(A), 3.0)), 3.0 - A, rtol=1e-15)
    assert cddp.rsub(cddp.tensor([1, 2]), cddp.tensor([5, 5]), alpha=2).tolist() == [3, 1]
    p = t(A)
    assert cddp.positive(p) is p and p.positive() is p
    with pytest.raises(RuntimeError, match="The `\\+` operator, on a bool tensor is not "
                                           "supported."):
        cddp.positive(cddp.tensor([True]))


def test_unary_plus_operator():
    x = cddp.tensor([1.0, -2.0])
    assert (+x).tolist() == [1.0, -2.0]


@pytest.mark.parametrize("name,args", [("atan2_", lambda: (t(B[:5]),)),
                                       ("xlogy_", lambda: (t(np.abs(B[:5]) + 0.1),)),
                                       ("sinc_", lambda: ()), ("nan_to_num_", lambda: ()),
                                       ("lerp_", lambda: (t(B[:5]), t(W[:5]))),
                                       ("lerp_", lambda: (t(B[:5]), 0.8)),
                                       ("addcmul_", lambda: (t(B[:5]), t(W[:5]))),
                                       ("addcdiv_", lambda: (t(B[:5]), t(W[:5] + 2)))])
def test_pointwise_inplace_in_graph_grad(name, args):
    """x * 1 then an in-place op: the gradient equals the out-of-place op's."""
    x = t(A[:5], requires_grad=True)
    y = x * 1
    getattr(y, name)(*args())
    y.backward(t(W[:5]))
    x2 = t(A[:5], requires_grad=True)
    getattr(x2, name[:-1])(*args()).backward(t(W[:5]))
    np.testing.assert_allclose(n(x.grad), n(x2.grad), rtol=1e-14)


@pytest.mark.parametrize("name,args", [("hypot_", (B[:5],)), ("copysign_", (B[:5],)),
                                       ("logit_", ()), ("float_power_", (2.0,))])
def test_pointwise_inplace_copyback_in_graph(name, args):
    base = P[:5] if name == "logit_" else A[:5]
    x = t(base, requires_grad=True)
    y = x * 1
    getattr(y, name)(*[t(a) if isinstance(a, np.ndarray) else a for a in args])
    y.sum().backward()
    x2 = t(base, requires_grad=True)
    getattr(x2, name[:-1])(*[t(a) if isinstance(a, np.ndarray) else a for a in args]).sum() \
        .backward()
    np.testing.assert_allclose(n(x.grad), n(x2.grad), rtol=1e-14)


@pytest.mark.parametrize("name", ["lerp_", "addcmul_", "addcdiv_", "xlogy_", "atan2_",
                                  "copysign_", "hypot_"])
def test_pointwise_inplace_leaf_raises(name):
    x = cddp.ones(5, requires_grad=True)
    args = (cddp.zeros(5), 0.3) if name == "lerp_" else \
        (cddp.ones(5), cddp.ones(5)) if name.startswith("addc") else (cddp.ones(5),)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        getattr(x, name)(*args)


def test_unary_pointwise_vs_torch(torch):
    for name, v, kw in [("logit", P, {}), ("logit", [0.0, 1.0, 0.5, 1e-9], {"eps": 1e-6}),
                        ("logit", [0.0, 1.0, 0.5], {}),
                        ("sinc", [0.0, -0.0, 0.5, 1.0, -2.3, INF, NAN], {}),
                        ("nan_to_num", [NAN, INF, -INF, 1.0], {}),
                        ("nan_to_num", [NAN, INF, -INF, 1.0], {"nan": 2.0, "posinf": 5.0,
                                                               "neginf": -7.0})]:
        for dt in FLOATS:
            x = np.array(v, dtype=dt)
            same(n(getattr(cddp, name)(t(x), **kw)),
                 getattr(torch, name)(T(torch, x), **kw).numpy(),
                 rtol=2e-7 if dt == np.float32 else 1e-14)
    for name, v, kw in [("logit", P, {}), ("logit", [0.02, 0.5, 0.3, 0.97], {"eps": 0.1}),
                        ("sinc", [0.0, 0.5, 1.0, -2.3], {})]:
        x = np.array(v)
        a, b = t(x, requires_grad=True), T(torch, x).requires_grad_()
        getattr(cddp, name)(a, **kw).sum().backward()
        getattr(torch, name)(b, **kw).sum().backward()
        np.testing.assert_allclose(n(a.grad), b.grad.numpy(), rtol=1e-12, atol=1e-15)
    x = np.array([-1.5, 0.0, 2.0])
    same(n(cddp.rsub(t(x), 2, alpha=3)), torch.rsub(T(torch, x), 2, alpha=3).numpy())
    for name in ("logit", "sinc", "nan_to_num"):
        for v in ([1, 0], [True, False]):
            a, b = getattr(cddp, name)(cddp.tensor(v)), getattr(torch, name)(torch.tensor(v))
            assert str(a.dtype)[5:] == str(b.dtype)[6:], name


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_lerp_addcmul_addcdiv_round_once_in_narrow_dtypes(dt):
    # torch computes these in float32 for 2-byte dtypes; rounding (end - input) to the narrow
    # dtype first put ~28% of bfloat16 lerps one unit off
    a, b = 0.640625, -1.6015625                     # exact in both; the midpoint is exact too
    x = cddp.tensor([a]).to(getattr(cddp, dt))
    y = cddp.tensor([b]).to(getattr(cddp, dt))
    assert x.lerp(y, 0.5).item() == (a + b) / 2
    x.lerp_(y, 0.5)
    assert x.item() == (a + b) / 2
    rng = np.random.default_rng(1)
    xs, ys, zs = (rng.standard_normal(4000).astype(np.float32) for _ in range(3))
    zs += 3
    narrow = [cddp.tensor(v).to(getattr(cddp, dt)) for v in (xs, ys, zs)]
    wide = [t.float().numpy().astype(np.float64) for t in narrow]      # the exact inputs
    ulp = 2.0 ** -7 if dt == "bfloat16" else 2.0 ** -10
    for w in (0.05, 0.5, 0.7):
        got = {"lerp": cddp.lerp(narrow[0], narrow[1], w),
               "addcmul": cddp.addcmul(narrow[0], narrow[1], narrow[2], value=w),
               "addcdiv": cddp.addcdiv(narrow[0], narrow[1], narrow[2], value=w)}
        want = {"lerp": wide[0] + w * (wide[1] - wide[0]),
                "addcmul": wide[0] + w * wide[1] * wide[2],
                "addcdiv": wide[0] + w * wide[1] / wide[2]}
        for k in got:
            g = got[k].float().numpy().astype(np.float64)
            assert got[k].dtype == narrow[0].dtype
            # one rounding of the exact value: within half a unit of its binade (+ float32 slack)
            scale = 2.0 ** np.floor(np.log2(np.maximum(np.abs(want[k]), 1e-30)))
            assert np.all(np.abs(g - want[k]) <= 0.5 * ulp * scale * (1 + 1e-3) + 1e-7), (k, w)
