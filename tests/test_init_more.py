"""nn.init.trunc_normal_, orthogonal_, dirac_, sparse_.

Oracles: without torch, the defining property of each (values inside [a, b] and the first
round's draws being normal_'s own; Q^T Q = gain^2 I and Q equal to NumPy's QR of the same
normal_ draw; a dirac kernel's convolution returning its input; ceil(sparsity * rows) zeros per
column over normal_'s draws). With torch: the same seed gives torch's values (orthogonal_ to
QR rounding, the rest exactly) and leaves the generator where torch's leaves it.
"""
import math
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
import cddp.nn.init as init
from conftest import n, t

DTYPES = ("float32", "float64")


def cd(name):
    return getattr(cddp, name)


# ---- trunc_normal_ -------------------------------------------------------------------------

def test_trunc_normal_torch_free():
    # wide interval: normal_ draws, the out-of-range ones redrawn
    cddp.manual_seed(0)
    w = init.trunc_normal_(cddp.empty(200, 50, dtype=cddp.float64), 0.0, 1.0, -1.0, 1.5)
    v = n(w)
    assert v.min() >= -1.0 and v.max() <= 1.5
    cddp.manual_seed(0)
    first = n(cddp.empty(200, 50, dtype=cddp.float64).normal_(0.0, 1.0))
    ok = (first >= -1.0) & (first <= 1.5)
    np.testing.assert_array_equal(v[ok], first[ok])           # accepted at the first round
    # narrow interval far in the tail: uniform proposals with rejection
    cddp.manual_seed(1)
    v = n(init.trunc_normal_(cddp.empty(20000, dtype=cddp.float64), 0.0, 1.0, 1.0, 3.0))
    assert v.min() >= 1.0 and v.max() <= 3.0

    def pdf(x):
        return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)

    def cdf(x):
        return (1 + math.erf(x / math.sqrt(2))) / 2

    mass = cdf(3.0) - cdf(1.0)
    mean = (pdf(1.0) - pdf(3.0)) / mass                       # truncated normal's mean
    assert abs(v.mean() - mean) < 0.02
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        init.trunc_normal_(cddp.empty(3), mean=10.0)
    assert any("mean is more than 2 std" in str(r.message) for r in rec)


@pytest.mark.parametrize("dt", DTYPES)
def test_trunc_normal_matches_torch(torch, dt):
    for args in ((0.0, 1.0, -2.0, 2.0), (0.5, 2.0, -1.0, 3.0), (0.0, 1.0, 1.0, 1.5),
                 (2.0, 0.5, 0.0, 1.0), (0.0, 0.02, -0.04, 0.04)):
        cddp.manual_seed(3)
        torch.manual_seed(3)
        a = init.trunc_normal_(cddp.empty(37, 21, dtype=cd(dt)), *args)
        b = torch.nn.init.trunc_normal_(torch.empty(37, 21, dtype=getattr(torch, dt)), *args)
        np.testing.assert_array_equal(n(a), b.numpy(), err_msg=str(args))
        assert float(cddp.rand(())) == float(torch.rand(()))   # the same draws consumed
    g, tg = cddp.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = init.trunc_normal_(cddp.empty(9, dtype=cd(dt)), 0.0, 1.0, 0.5, 0.6, generator=g)
    b = torch.nn.init.trunc_normal_(torch.empty(9, dtype=getattr(torch, dt)), 0.0, 1.0, 0.5,
                                    0.6, generator=tg)
    np.testing.assert_array_equal(n(a), b.numpy())


# ---- orthogonal_ ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(6, 4), (3, 7), (5, 2, 3), (4, 4)])
def test_orthogonal_torch_free(shape):
    cddp.manual_seed(2)
    w = n(init.orthogonal_(cddp.empty(*shape, dtype=cddp.float64), gain=2.0))
    m = w.reshape(shape[0], -1)
    rows, cols = m.shape
    gram = m.T @ m if rows >= cols else m @ m.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-12)
    cddp.manual_seed(2)
    draw = n(cddp.empty(rows, cols, dtype=cddp.float64).normal_())
    a = draw if rows >= cols else draw.T
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    np.testing.assert_allclose(m, 2.0 * (q if rows >= cols else q.T), atol=1e-12)


def test_orthogonal_errors():
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(cddp.empty(3))
    assert init.orthogonal_(cddp.empty(0, 3)).shape == (0, 3)


@pytest.mark.parametrize("dt", DTYPES)
def test_orthogonal_matches_torch(torch, dt):
    tol = 1e-5 if dt == "float32" else 1e-12
    for shape in ((6, 4), (3, 7), (5, 2, 3)):
        cddp.manual_seed(4)
        torch.manual_seed(4)
        a = init.orthogonal_(cddp.empty(*shape, dtype=cd(dt)), 0.5)
        b = torch.nn.init.orthogonal_(torch.empty(*shape, dtype=getattr(torch, dt)), 0.5)
        assert a.dtype == cd(dt)
        np.testing.assert_allclose(n(a), b.numpy(), atol=tol, err_msg=str(shape))
        assert float(cddp.rand(())) == float(torch.rand(()))


# ---- dirac_ --------------------------------------------------------------------------------

def test_dirac_keeps_channels_torch_free():
    w = init.dirac_(cddp.empty(4, 4, 3, 3, dtype=cddp.float64))
    x = np.random.default_rng(0).standard_normal((2, 4, 5, 5))
    np.testing.assert_allclose(n(F.conv2d(t(x), w, padding=1)), x, atol=1e-12)
    w = n(init.dirac_(cddp.empty(6, 2, 3)))                  # 3 of the 6 outputs see inputs
    assert w.sum() == 2 and w[0, 0, 1] == 1 and w[1, 1, 1] == 1
    w = n(init.dirac_(cddp.empty(4, 3, 1, 2, 3), groups=2))   # 2 groups of 2 outputs each
    idx = sorted(zip(*np.nonzero(w)))
    assert idx == [(0, 0, 0, 1, 1), (1, 1, 0, 1, 1), (2, 0, 0, 1, 1), (3, 1, 0, 1, 1)]
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions"):
        init.dirac_(cddp.empty(3, 3))
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(cddp.empty(3, 3, 3), groups=2)


def test_dirac_matches_torch(torch):
    for shape, groups in (((6, 4, 3, 3), 2), ((5, 3, 4), 1), ((4, 6, 2, 3, 3), 4),
                          ((3, 3, 2, 2), 3)):
        a = init.dirac_(cddp.empty(*shape), groups)
        b = torch.nn.init.dirac_(torch.empty(*shape), groups)
        np.testing.assert_array_equal(n(a), b.numpy())


# ---- sparse_ -------------------------------------------------------------------------------

def test_sparse_torch_free():
    cddp.manual_seed(6)
    w = n(init.sparse_(cddp.empty(10, 7, dtype=cddp.float64), 0.25, std=0.5))
    assert ((w == 0).sum(0) == math.ceil(0.25 * 10)).all()
    cddp.manual_seed(6)
    draw = n(cddp.empty(10, 7, dtype=cddp.float64).normal_(0, 0.5))
    np.testing.assert_array_equal(w[w != 0], draw[w != 0])
    cddp.manual_seed(6)
    cddp.empty(10, 7, dtype=cddp.float64).normal_(0, 0.5)
    for col in range(7):                                      # one randperm per column
        zero_rows = n(cddp.randperm(10))[:3]
        assert (w[zero_rows, col] == 0).all()
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        init.sparse_(cddp.empty(3), 0.1)


@pytest.mark.parametrize("dt", DTYPES)
def test_sparse_matches_torch(torch, dt):
    cddp.manual_seed(7)
    torch.manual_seed(7)
    a = init.sparse_(cddp.empty(9, 5, dtype=cd(dt)), 0.4)
    b = torch.nn.init.sparse_(torch.empty(9, 5, dtype=getattr(torch, dt)), 0.4)
    np.testing.assert_array_equal(n(a), b.numpy())
    assert float(cddp.rand(())) == float(torch.rand(()))
