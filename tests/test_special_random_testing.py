"""cddp.special (closed forms from Python's math module and NumPy, finite-difference
gradients, torch.special when importable), cddp.random.fork_rng (the outer stream is left
as it was), and cddp.testing.assert_close (tolerances, structure, messages; torch's own
messages when importable)."""
import math

import numpy as np
import pytest

import cddp
import cddp.special as S
from cddp.testing import assert_close
from conftest import n, t

X = np.linspace(-3.0, 3.0, 13)
P = np.linspace(0.02, 0.98, 13)
VEC = np.vectorize


CLOSED = {
    "expit": (X, lambda x: 1 / (1 + np.exp(-x))),
    "ndtr": (X, VEC(lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2))))),
    "log_ndtr": (np.array([-30.0, -10.0, -1.0, 0.0, 2.0]),
                 VEC(lambda x: math.log(0.5 * math.erfc(-x / math.sqrt(2))))),
    "erfcx": (np.array([-2.0, 0.0, 1.0, 5.0, 20.0, 25.0]),
              VEC(lambda x: math.exp(x * x) * math.erfc(x))),
    "gammaln": (np.abs(X) + 0.1, VEC(math.lgamma)),
    "entr": (np.array([0.0, 0.5, 1.0, 2.5]), lambda x: np.where(x > 0, -x * np.log(
        np.where(x > 0, x, 1)), 0.0)),
    "i0": (np.array([0.5, 3.0, 20.0, 60.0]),
           VEC(lambda x: math.fsum(math.exp(2 * (k * math.log(x / 2) - math.lgamma(k + 1)))
                                   for k in range(300)))),
    "exp2": (X, lambda x: 2.0 ** x),
    "sinc": (X, np.sinc),
}


@pytest.mark.parametrize("name", sorted(CLOSED))
def test_special_closed_forms(name):
    x, ref = CLOSED[name]
    np.testing.assert_allclose(n(getattr(S, name)(t(x))), ref(x), rtol=1e-12, atol=1e-300)


def test_ndtri_inverts_ndtr_and_entr_below_zero():
    np.testing.assert_allclose(n(S.ndtr(S.ndtri(t(P)))), P, rtol=1e-12)
    assert n(S.entr(t(np.array([-1.0]))))[0] == -math.inf
    assert S.psi is S.digamma and n(S.logit(t(np.array([0.25]))))[0] == pytest.approx(
        math.log(1 / 3))


def test_xlog1py_zero_times_anything_finite_is_zero():
    out = n(S.xlog1py(t(np.array([0.0, 0.0, 2.0, 0.0])), t(np.array([-1.0, 3.0, 1.0, np.nan]))))
    assert out[0] == 0 and out[1] == 0 and out[2] == pytest.approx(2 * math.log(2))
    assert math.isnan(out[3])


@pytest.mark.parametrize("name", ["expit", "ndtr", "ndtri", "log_ndtr", "erfcx", "entr",
                                  "gammaln"])
def test_special_gradients_by_finite_differences(name):
    x = (P if name == "ndtri" else np.abs(X) + 0.2 if name in ("entr", "gammaln") else X)
    a = t(x, requires_grad=True)
    getattr(S, name)(a).sum().backward()
    h = 1e-6
    num = (n(getattr(S, name)(t(x + h))) - n(getattr(S, name)(t(x - h)))) / (2 * h)
    np.testing.assert_allclose(n(a.grad), num, rtol=1e-6, atol=1e-8)


def test_special_against_torch():
    torch = pytest.importorskip("torch")
    for name in ("expit", "ndtr", "ndtri", "log_ndtr", "erfcx", "entr", "gammaln", "digamma",
                 "i0", "erfinv", "expm1", "log1p", "sinc"):
        x = P if name in ("ndtri", "erfinv") else X
        np.testing.assert_allclose(n(getattr(S, name)(t(x))),
                                   getattr(torch.special, name)(torch.tensor(x)).numpy(),
                                   rtol=1e-12, atol=1e-14, err_msg=name)
    big = np.array([26.0, 30.0, 100.0, 1e4])          # erfcx's asymptotic branch
    np.testing.assert_allclose(n(S.erfcx(t(big))), torch.special.erfcx(torch.tensor(big)).numpy(),
                               rtol=1e-12)
    y = t(X.astype(np.float32))
    np.testing.assert_allclose(n(S.log_softmax(y, 0)),
                               torch.special.log_softmax(torch.tensor(X.astype(np.float32)),
                                                         0).numpy(), rtol=1e-6)


def test_fork_rng_restores_the_stream():
    cddp.manual_seed(7)
    first = n(cddp.randn(4))
    cddp.manual_seed(7)
    with cddp.random.fork_rng():
        inside = n(cddp.randn(4))
        cddp.randn(100)
    after = n(cddp.randn(4))
    np.testing.assert_array_equal(inside, first)
    np.testing.assert_array_equal(after, first)        # the block's draws were undone
    with cddp.random.fork_rng(enabled=False):
        cddp.randn(4)
    assert not np.array_equal(n(cddp.randn(4)), first)
    assert cddp.random.manual_seed is cddp.manual_seed


def test_assert_close_tolerances_by_dtype():
    assert_close(t(np.float32([1.0, 2.0])), t(np.float32([1.0, 2.0 + 2e-6])))   # 1.3e-6 rel
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        assert_close(t(np.float32([1.0, 2.0])), t(np.float32([1.0, 2.0 + 1e-4])))
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        assert_close(t(np.array([1.0])), t(np.array([1.0 + 1e-6])))             # float64: 1e-7
    assert_close(t(np.array([1.0])), t(np.array([1.1])), rtol=0.2, atol=0.0)
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        assert_close(t(np.array([1.0])), t(np.array([1.0])), rtol=0.1)
    with pytest.raises(AssertionError, match="Tensor-likes are not equal"):
        assert_close(t(np.array([1, 2])), t(np.array([1, 3])))
    with pytest.raises(AssertionError):
        assert_close(t(np.array([np.nan])), t(np.array([np.nan])))
    assert_close(t(np.array([np.nan])), t(np.array([np.nan])), equal_nan=True)


def test_assert_close_structure_dtype_shape_and_msg():
    with pytest.raises(AssertionError, match="attribute 'dtype' do not match: torch.float32 != "
                                             "torch.float64"):
        assert_close(t(np.float32([1.0])), t(np.array([1.0])))
    assert_close(t(np.float32([1.0])), t(np.array([1.0])), check_dtype=False)
    with pytest.raises(AssertionError, match=r"attribute 'shape' do not match"):
        assert_close(t(np.zeros(2)), t(np.zeros(3)))
    with pytest.raises(AssertionError, match=r"item \['a'\]\[1\]"):
        assert_close({"a": [t(np.zeros(1)), t(np.zeros(1))]},
                     {"a": [t(np.zeros(1)), t(np.ones(1))]})
    with pytest.raises(AssertionError, match="length of the sequences"):
        assert_close([1, 2], [1, 2, 3])
    with pytest.raises(AssertionError, match="^custom$"):
        assert_close(t(np.zeros(1)), t(np.ones(1)), msg="custom")
    with pytest.raises(AssertionError, match="^wrapped: Tensor-likes"):
        assert_close(t(np.zeros(2)), t(np.ones(2)), msg=lambda m: "wrapped: " + m)


def test_assert_close_messages_match_torch():
    torch = pytest.importorskip("torch")
    cases = [lambda L: (L.tensor([1., 2., 3.]), L.tensor([1., 2.5, 3.])),
             lambda L: (L.tensor([[1, 2], [3, 4]]), L.tensor([[1, 2], [3, 5]])),
             lambda L: ([L.tensor(1.)], [L.tensor(2.)]),
             lambda L: (1.0, 1.1),
             lambda L: (1, 2),
             lambda L: ({"a": L.tensor(1.)}, {"a": L.tensor(2.)}),
             lambda L: (L.tensor([True, False]), L.tensor([True, True])),
             lambda L: (L.tensor([1., 2.]), L.tensor([1., 2.], dtype=L.float64))]
    for case in cases:
        got = []
        for lib, fn in ((cddp, assert_close), (torch, torch.testing.assert_close)):
            with pytest.raises(AssertionError) as e:
                fn(*case(lib))
            got.append(str(e.value))
        assert got[0] == got[1]
