"""cov / corrcoef / mode / histogram, select_scatter / slice_scatter / masked_scatter,
unravel_index / vander, gcd / lcm / ldexp / renorm / isreal: NumPy's np.cov, np.corrcoef,
np.histogram, np.unravel_index, np.vander, np.gcd, np.lcm as oracles (plus a brute-force
mode), gradients of the scatter forms checked by hand, torch when importable."""
import numpy as np
import pytest

import cddp
from conftest import n, t

RNG = np.random.default_rng(3)
Y = RNG.standard_normal((3, 10))
FW = np.array([1, 2, 1, 3, 1, 1, 2, 1, 1, 4])
AW = RNG.uniform(0.1, 1, 10)


def test_cov_corrcoef_vs_numpy():
    np.testing.assert_allclose(n(cddp.cov(t(Y))), np.cov(Y), rtol=1e-12)
    np.testing.assert_allclose(n(cddp.cov(t(Y), correction=0)), np.cov(Y, ddof=0), rtol=1e-12)
    np.testing.assert_allclose(n(cddp.cov(t(Y), fweights=t(FW), aweights=t(AW))),
                               np.cov(Y, fweights=FW, aweights=AW), rtol=1e-12)
    np.testing.assert_allclose(n(cddp.cov(t(Y[0]))), np.cov(Y[0]), rtol=1e-12)
    assert cddp.cov(t(Y[0])).dim() == 0
    np.testing.assert_allclose(n(cddp.corrcoef(t(Y))), np.corrcoef(Y), rtol=1e-12)
    np.testing.assert_allclose(n(t(Y).cov()), np.cov(Y), rtol=1e-12)
    with pytest.raises(RuntimeError, match="negative"):
        cddp.cov(t(Y), fweights=t(-FW))


def _brute_mode(row):
    vals, counts = np.unique(row, return_counts=True)
    v = vals[np.argmax(counts)]                  # unique sorts: the smallest of the most frequent
    return v, np.nonzero(row == v)[0].max()


def test_mode_vs_brute_force():
    x = RNG.integers(0, 4, (5, 9))
    for dim in (0, 1, -1):
        res = cddp.mode(t(x), dim)
        xs = np.moveaxis(x, dim, -1)
        want = [_brute_mode(r) for r in xs.reshape(-1, xs.shape[-1])]
        np.testing.assert_array_equal(n(res.values).reshape(-1), [w[0] for w in want])
        np.testing.assert_array_equal(n(res.indices).reshape(-1), [w[1] for w in want])
    assert tuple(cddp.mode(t(x), 1, keepdim=True).values.shape) == (5, 1)
    r = cddp.mode(t(np.array([1.0, 2.0, 2.0, 1.0, 3.0])))
    assert r.values.item() == 1.0 and r.indices.item() == 3


def test_histogram_vs_numpy():
    x = RNG.standard_normal(200)
    for bins, rng in ((7, None), (5, (-1.0, 1.0))):
        h = cddp.histogram(t(x), bins, range=rng)
        hn, en = np.histogram(x, bins, range=rng)
        np.testing.assert_array_equal(n(h.hist), hn)
        np.testing.assert_allclose(n(h.bin_edges), en, rtol=1e-12)
    w = RNG.uniform(size=200)
    np.testing.assert_allclose(n(cddp.histogram(t(x), 4, weight=t(w), density=True).hist),
                               np.histogram(x, 4, weights=w, density=True)[0], rtol=1e-12)


def test_scatter_forms_values_and_gradients():
    W = np.arange(12.0).reshape(3, 4)
    a, s = t(np.zeros((3, 4)), requires_grad=True), t(np.ones(4), requires_grad=True)
    out = cddp.select_scatter(a, s * 2, 0, 1)
    np.testing.assert_array_equal(n(out), [[0] * 4, [2] * 4, [0] * 4])
    (out * t(W)).sum().backward()
    np.testing.assert_array_equal(n(a.grad), np.where(np.arange(3)[:, None] == 1, 0, W))
    np.testing.assert_array_equal(n(s.grad), 2 * W[1])
    a, s = t(np.zeros((3, 4)), requires_grad=True), t(np.ones((3, 2)), requires_grad=True)
    out = cddp.slice_scatter(a, s, 1, 0, 4, 2)
    np.testing.assert_array_equal(n(out), np.tile([1.0, 0.0], (3, 2)))
    (out * t(W)).sum().backward()
    np.testing.assert_array_equal(n(a.grad), W * np.tile([0.0, 1.0], (3, 2)))
    np.testing.assert_array_equal(n(s.grad), W[:, ::2])
    m = np.array([[True, False], [False, True]])
    a, s = t(np.zeros((2, 2)), requires_grad=True), t(np.array([5.0, 6, 7]), requires_grad=True)
    out = a.masked_scatter(t(m), s)
    np.testing.assert_array_equal(n(out), [[5.0, 0], [0, 6.0]])
    (out * t(np.arange(4.0).reshape(2, 2))).sum().backward()
    np.testing.assert_array_equal(n(a.grad), [[0.0, 1], [2, 0]])
    np.testing.assert_array_equal(n(s.grad), [0.0, 3, 0])
    with pytest.raises(RuntimeError, match="at least as many"):
        cddp.masked_scatter(t(np.zeros((2, 2))), t(m), t(np.ones(1)))


def test_unravel_index_vander_and_integer_ops_vs_numpy():
    idx = np.array([5, 7, 0, 23])
    got = cddp.unravel_index(t(idx), (2, 3, 4))
    for g, w in zip(got, np.unravel_index(idx, (2, 3, 4))):
        np.testing.assert_array_equal(n(g), w)
    np.testing.assert_array_equal(n(cddp.unravel_index(t(np.array([-1])), (2, 3))[1]), [2])
    with pytest.raises(ValueError):
        cddp.unravel_index(t(np.array([6])), (2, 3))
    x = np.array([1.5, -2.0, 3.0])
    np.testing.assert_allclose(n(cddp.vander(t(x))), np.vander(x), rtol=1e-12)
    np.testing.assert_allclose(n(cddp.vander(t(x), 5, increasing=True)),
                               np.vander(x, 5, increasing=True), rtol=1e-12)
    a, b = RNG.integers(-50, 50, 20), RNG.integers(-50, 50, 20)
    np.testing.assert_array_equal(n(cddp.gcd(t(a), t(b))), np.gcd(a, b))
    np.testing.assert_array_equal(n(cddp.lcm(t(a), t(b))), np.lcm(a, b))
    with pytest.raises(RuntimeError, match="gcd_cpu"):
        cddp.gcd(t(np.ones(2)), t(np.ones(2)))
    np.testing.assert_array_equal(n(cddp.ldexp(t(np.array([1.0, 3.0])), t(np.array([3, -1])))),
                                  np.ldexp([1.0, 3.0], [3, -1]))
    assert bool(cddp.isreal(t(x)).all())


def test_renorm_vs_numpy():
    x = RNG.standard_normal((3, 4))
    for p, dim, mx in ((2, 0, 1.0), (1, 1, 0.5)):
        norms = np.linalg.norm(np.moveaxis(x, dim, 0).reshape(x.shape[dim], -1), ord=p, axis=1)
        scale = np.where(norms > mx, mx / (norms + 1e-7), 1.0)
        shape = [1, 1]
        shape[dim] = -1
        np.testing.assert_allclose(n(cddp.renorm(t(x), p, dim, mx)), x * scale.reshape(shape),
                                   rtol=1e-12)


def test_against_torch():
    torch = pytest.importorskip("torch")
    x = RNG.integers(0, 5, (4, 11))
    for dim in (0, 1):
        a, b = cddp.mode(t(x), dim), torch.mode(torch.tensor(x), dim)
        np.testing.assert_array_equal(n(a.values), b.values.numpy())
        np.testing.assert_array_equal(n(a.indices), b.indices.numpy())
    np.testing.assert_allclose(n(cddp.cov(t(Y), fweights=t(FW), aweights=t(AW))),
                               torch.cov(torch.tensor(Y), fweights=torch.tensor(FW),
                                         aweights=torch.tensor(AW)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(n(cddp.renorm(t(Y), 2, 0, 1.0)),
                               torch.renorm(torch.tensor(Y), 2, 0, 1.0).numpy(), rtol=1e-12)
    np.testing.assert_array_equal(n(cddp.vander(t(np.array([1, 2, 3])), 4)),
                                  torch.vander(torch.tensor([1, 2, 3]), 4).numpy())
