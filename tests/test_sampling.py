"""torch.poisson / binomial / _standard_gamma / _sample_dirichlet at the top level (cddp/_sampling.py).

Oracles: the laws' moments (mean and variance of 20000 draws against the closed forms, at
6 standard errors), torch's _standard_gamma_grad for the reparameterized gradient, torch's
error behaviour for wrong dtypes."""
import numpy as np
import pytest

import cddp

N = 20000


def _moments_ok(draws, mean, var):
    d = draws.double()
    m, v = float(d.mean()), float(d.var())
    se_m = (var / N) ** 0.5
    assert abs(m - mean) < 6 * se_m + 1e-9, (m, mean)
    assert abs(v - var) < 0.1 * var + 1e-9, (v, var)


@pytest.mark.parametrize("rate", [0.3, 4.0, 25.0, 400.0])
def test_poisson_moments_dtype_and_integrality(rate):
    y = cddp.poisson(cddp.full((N,), rate))
    assert y.dtype == cddp.float32 and y.shape == (N,)
    assert bool((y == y.floor()).all()) and bool((y >= 0).all())
    _moments_ok(y, rate, rate)


def test_poisson_generator_reproduces_and_zero_rate_is_zero():
    g = cddp.Generator().manual_seed(7)
    a = cddp.poisson(cddp.full((50,), 3.0), generator=g)
    g.manual_seed(7)
    b = cddp.poisson(cddp.full((50,), 3.0), generator=g)
    assert cddp.equal(a, b)
    assert cddp.poisson(cddp.zeros(5)).tolist() == [0.0] * 5
    assert cddp.poisson(cddp.zeros(2, 0)).shape == (2, 0)
    assert cddp.poisson(cddp.full((3,), 2.0, dtype=cddp.float16)).dtype == cddp.float16


def test_poisson_gradient_is_zero_as_torch():
    x = cddp.tensor([1.0, 5.0, 20.0], requires_grad=True)
    y = cddp.poisson(x)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("bad", [[-1.0], [float("nan")], [float("inf")]])
def test_poisson_refuses_invalid_rates(bad):
    with pytest.raises(RuntimeError, match="invalid Poisson rate"):
        cddp.poisson(cddp.tensor(bad))


def test_poisson_integer_input_raises_torch_error():
    with pytest.raises(NotImplementedError, match="'Long'"):
        cddp.poisson(cddp.tensor([1, 2]))


@pytest.mark.parametrize("n,p", [(10.0, 0.3), (200.0, 0.5), (1000.0, 0.9)])
def test_binomial_moments(n, p):
    y = cddp.binomial(cddp.full((N,), n), cddp.full((N,), p))
    assert bool((y >= 0).all()) and bool((y <= n).all())
    _moments_ok(y, n * p, n * p * (1 - p))


def test_binomial_broadcasts_and_checks():
    y = cddp.binomial(cddp.tensor([10.0, 20.0]), cddp.tensor(0.0))
    assert y.tolist() == [0.0, 0.0]
    assert cddp.binomial(cddp.tensor([7.0]), cddp.tensor([1.0])).tolist() == [7.0]
    with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
        cddp.binomial(cddp.tensor([1.0]), cddp.tensor([0.5], dtype=cddp.float64))
    with pytest.raises(RuntimeError, match="count"):
        cddp.binomial(cddp.tensor([-1.0]), cddp.tensor([0.5]))


@pytest.mark.parametrize("a", [0.3, 1.0, 7.5])
def test_standard_gamma_moments(a):
    y = cddp._standard_gamma(cddp.full((N,), a))
    assert bool((y > 0).all())
    _moments_ok(y, a, a)


def test_standard_gamma_gradient_matches_torch_implicit_gradient():
    torch = pytest.importorskip("torch")
    a = cddp.tensor([0.5, 2.0, 9.0], dtype=cddp.float64, requires_grad=True)
    x = cddp._standard_gamma(a)
    x.sum().backward()
    ref = torch._standard_gamma_grad(torch.tensor(a.detach().numpy()),
                                     torch.tensor(x.detach().numpy()))
    # torch's gradient is an approximation (series / saddle point / rational fit)
    np.testing.assert_allclose(a.grad.numpy(), ref.numpy(), rtol=1e-3)


def test_standard_gamma_gradient_is_the_implicit_derivative_of_the_cdf():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    a = cddp.tensor([0.5, 2.0, 9.0], dtype=cddp.float64, requires_grad=True)
    x = cddp._standard_gamma(a)
    x.sum().backward()
    for ai, xi, gi in zip(a.detach().tolist(), x.detach().tolist(), a.grad.tolist()):
        cdf = lambda aa, xx: mpmath.gammainc(aa, 0, xx, regularized=True)  # noqa: E731
        want = -mpmath.diff(lambda aa: cdf(aa, xi), ai) / mpmath.diff(lambda xx: cdf(ai, xx), xi)
        assert abs(gi - float(want)) <= 1e-8 * abs(float(want)), (ai, xi, gi, want)


def test_sample_dirichlet_rows_are_on_the_simplex_with_the_right_mean():
    alpha = cddp.tensor([1.0, 2.0, 3.0]).expand(N, 3).contiguous()
    y = cddp._sample_dirichlet(alpha)
    np.testing.assert_allclose(y.sum(-1).numpy(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(y.double().mean(0).numpy(), [1 / 6, 2 / 6, 3 / 6], atol=0.01)
    assert not y.requires_grad
