"""cddp.autograd.functional: jacobian and vjp against central finite differences of the
same function evaluated in NumPy, shapes for tuple inputs/outputs as torch's, strict-mode
errors, and torch's results when importable; the second-order functions (through double
backward) against closed forms."""
import numpy as np
import pytest

import cddp
from cddp.autograd import functional as AF
from conftest import fd_jacobian, n, t

RNG = np.random.default_rng(5)
XS, YS = RNG.standard_normal(3), RNG.standard_normal((2, 2))


def f_np(x, y):
    return np.sin(x) * y.sum(), (x * x).sum()


def f_cddp(x, y):
    return x.sin() * y.sum(), (x * x).sum()


def test_jacobian_tuple_in_tuple_out_matches_finite_differences():
    jac = AF.jacobian(f_cddp, (t(XS), t(YS)))
    assert len(jac) == 2 and all(len(row) == 2 for row in jac)
    for i in range(2):
        for j, arg in enumerate((XS, YS)):
            want = fd_jacobian(f_np, [XS.copy(), YS.copy()], j, i)
            assert tuple(jac[i][j].shape) == want.shape
            np.testing.assert_allclose(n(jac[i][j]), want, rtol=1e-6, atol=1e-8)


def test_jacobian_single_tensor_shapes_and_values():
    x = RNG.standard_normal((2, 3))
    jac = AF.jacobian(lambda a: a.exp().sum(0), t(x))
    assert tuple(jac.shape) == (3, 2, 3)
    want = np.zeros((3, 2, 3))
    for r in range(2):
        for c in range(3):
            want[c, r, c] = np.exp(x[r, c])
    np.testing.assert_allclose(n(jac), want, rtol=1e-12)


def test_jacobian_leaves_the_inputs_untouched_and_handles_unused_inputs():
    x = t(XS, requires_grad=True)
    y = t(YS)
    jac = AF.jacobian(lambda a, b: a * 3, (x, y))
    assert x.grad is None
    np.testing.assert_allclose(n(jac[0]), 3 * np.eye(3))
    assert np.all(n(jac[1]) == 0) and tuple(jac[1].shape) == (3, 2, 2)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda a, b: a * 3, (x, y), strict=True)


def test_vjp_values_and_checks():
    out, g = AF.vjp(lambda a: a ** 3, t(XS), t(np.ones(3)))
    np.testing.assert_allclose(n(out), XS ** 3)
    np.testing.assert_allclose(n(g), 3 * XS ** 2, rtol=1e-12)
    _, g = AF.vjp(lambda a: (a * a).sum(), t(XS))
    np.testing.assert_allclose(n(g), 2 * XS)
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(lambda a: a * 2, t(XS))
    with pytest.raises(RuntimeError, match="invalid size"):
        AF.vjp(lambda a: a * 2, t(XS), t(np.ones(2)))


def test_second_order_functions_closed_forms():
    # f(a) = sum(a^3): gradient 3a^2, Hessian diag(6a); g(a) = a^2: J = diag(2a)
    v = np.array([0.5, -1.0, 2.0])
    H = AF.hessian(lambda a: (a * a * a).sum(), t(XS))
    np.testing.assert_allclose(n(H), np.diag(6 * XS), rtol=1e-12)
    _, hv = AF.hvp(lambda a: (a * a * a).sum(), t(XS), t(v))
    np.testing.assert_allclose(n(hv), 6 * XS * v, rtol=1e-12)
    _, jv = AF.jvp(lambda a: a * a, t(XS), t(v))
    np.testing.assert_allclose(n(jv), 2 * XS * v, rtol=1e-12)
    J = AF.jacobian(lambda a: a * a, t(XS), create_graph=True)
    assert J.grad_fn is not None
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda a: a * a, t(XS))


def test_jacobian_and_vjp_match_torch():
    torch = pytest.importorskip("torch")
    jc = AF.jacobian(f_cddp, (t(XS), t(YS)))
    jt = torch.autograd.functional.jacobian(lambda x, y: (x.sin() * y.sum(), (x * x).sum()),
                                            (torch.tensor(XS), torch.tensor(YS)))
    for rc, rt in zip(jc, jt):
        for a, b in zip(rc, rt):
            np.testing.assert_allclose(n(a), b.numpy(), rtol=1e-12)
    v = RNG.standard_normal(3)
    _, gc = AF.vjp(lambda a: a.tanh() * a, t(XS), t(v))
    _, gt = torch.autograd.functional.vjp(lambda a: a.tanh() * a, torch.tensor(XS),
                                          torch.tensor(v))
    np.testing.assert_allclose(n(gc), gt.numpy(), rtol=1e-12)
