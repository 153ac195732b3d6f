"""as_strided (csrc/ops/shape/strided.c): a view of the input's storage with any sizes,
strides and storage offset.

Oracles: NumPy's stride_tricks.as_strided over the same buffer (values, and that the result
shares memory), central finite differences in float64 for the gradient (overlapping windows,
zero strides, offsets, views and transposed inputs), hand-computed gradients for an input that
overlaps itself, and torch (importorskip) for values, gradients and error messages.
"""
import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided as np_as_strided

import cddp
from conftest import gradcheck, n, t

CASES = [((10,), (3, 4), (2, 1), None),          # overlapping sliding windows
         ((10,), (4, 3), (2, 1), 1),
         ((4, 5), (5, 4), (1, 5), 0),             # a transpose
         ((4, 5), (2, 2), (10, 1), 3),
         ((4, 5), (3, 3, 2), (4, 1, 0), 2),       # a zero stride
         ((3, 4), (12,), (1,), 0),
         ((6,), (0, 3), (3, 1), 0)]               # empty


@pytest.mark.parametrize("xs,size,stride,off", CASES)
def test_values_match_numpy_and_share_memory(xs, size, stride, off):
    a = np.arange(int(np.prod(xs)), dtype=np.float64).reshape(xs)
    x = t(a)
    y = x.as_strided(size, stride) if off is None else x.as_strided(size, stride, off)
    start = 0 if off is None else off
    want = np_as_strided(a.ravel()[start:], size, [s * 8 for s in stride])
    assert tuple(y.shape) == tuple(size) and tuple(y.stride()) == tuple(stride)
    assert y.storage_offset() == start
    np.testing.assert_array_equal(n(y), want)
    if y.numel():
        x.view(-1)[start] = -1.0                  # the view sees writes to its storage
        assert n(y).ravel()[0] == -1.0


@pytest.mark.parametrize("xs,size,stride,off", CASES[:6])
def test_gradient_matches_finite_differences(xs, size, stride, off):
    a = np.random.default_rng(0).standard_normal(xs)
    kw = {} if off is None else {"storage_offset": off}
    gradcheck(lambda v: cddp.as_strided(v * v, size, stride, **kw), a)


def test_views_and_transposed_inputs():
    """Strides address the storage, whatever the input's own layout."""
    a = np.random.default_rng(1).standard_normal((4, 5))
    gradcheck(lambda v: v[1:].as_strided((2, 3), (1, 2)) * 3, a)
    gradcheck(lambda v: (v * 1).t().as_strided((3, 2), (2, 1), 1), a)
    x = t(a)
    # storage_offset defaults to the input's (5 here), strides still count storage elements
    np.testing.assert_array_equal(n(x[1:].as_strided((2, 3), (1, 2))),
                                  np_as_strided(a.ravel()[5:], (2, 3), (8, 16)))


def test_input_that_overlaps_itself_divides_by_the_sharing_count():
    """x (5,) expanded to (3, 5): every storage position is shared by 3 input elements, so
    each gets a third of what lands there (torch's rule); positions of the output that the
    input does not cover get nothing."""
    x = t(np.arange(5.0), requires_grad=True)
    e = x.expand(3, 5)
    y = e.as_strided((2, 2), (1, 1))              # storage positions [[0, 1], [1, 2]]
    (y * t(np.array([[1.0, 2.0], [3.0, 4.0]]))).sum().backward()
    # position 0 <- 1, 1 <- 2 + 3, 2 <- 4; the expand's backward sums the three rows back
    np.testing.assert_allclose(n(x.grad), [1.0, 5.0, 4.0, 0.0, 0.0])


def test_reduced_dtypes_and_inplace_writes():
    x = cddp.arange(6.0).bfloat16().requires_grad_()
    y = x.as_strided((2, 3), (1, 1))
    y.float().sum().backward()
    assert x.grad.dtype == cddp.bfloat16
    np.testing.assert_array_equal(n(x.grad.float()), [1, 2, 2, 1, 0, 0])
    z = cddp.zeros(6)
    z.as_strided((2, 2), (2, 1)).fill_(1.0)
    np.testing.assert_array_equal(n(z), [1, 1, 1, 1, 0, 0])


@pytest.mark.parametrize("args,msg", [
    (((2, 2), (1, -1)), "as_strided: Negative strides are not supported at the moment, got "
                        "strides: [1, -1]"),
    (((2, -2), (1, 1)), "Storage size calculation overflowed with sizes=[2, -2] and "
                        "strides=[1, 1]"),
    (((4, 4), (4, 1)), "setStorage: sizes [4, 4], strides [4, 1], storage offset 0, and "
                       "itemsize 4 requiring a storage size of 64 are out of bounds for "
                       "storage of size 24"),
    (((2,), (1, 1)), "mismatch in length of strides and shape"),
])
def test_errors(args, msg):
    with pytest.raises(RuntimeError) as info:
        cddp.as_strided(cddp.zeros(6), *args)
    assert msg in str(info.value)
    with pytest.raises(TypeError):
        cddp.zeros(6).as_strided(3, (1,))


@pytest.mark.parametrize("xs,size,stride,off", CASES)
def test_match_torch(torch, xs, size, stride, off):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(xs)
    g = rng.standard_normal(size)
    kw = {} if off is None else {"storage_offset": off}
    tx, cx = torch.tensor(a, requires_grad=True), t(a, requires_grad=True)
    ty, cy = torch.as_strided(tx, size, stride, **kw), cddp.as_strided(cx, size, stride, **kw)
    (ty * torch.tensor(g)).sum().backward()
    (cy * t(g)).sum().backward()
    np.testing.assert_array_equal(n(cy), ty.detach().numpy())
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=1e-15, atol=1e-15)
    assert cy.storage_offset() == ty.storage_offset()


def test_twice_differentiable():
    """The higher-order engine rebuilds the backward from the op's positions
    (_C._as_strided_positions): d/dx of sum(grad) for y = as_strided(x)**2 with overlapping
    windows is 2 * (how many windows read each element), as torch's."""
    x = cddp.arange(6.0, requires_grad=True)
    y = cddp.as_strided(x, (4, 3), (1, 1))
    g, = cddp.autograd.grad((y ** 2).sum(), x, create_graph=True)
    np.testing.assert_allclose(n(g), 2 * np.arange(6.0) * [1, 2, 3, 3, 2, 1])
    g.sum().backward()
    np.testing.assert_allclose(n(x.grad), [2, 4, 6, 6, 4, 2])
    e = cddp.arange(3.0, requires_grad=True)
    z = e.expand(2, 3).as_strided((2,), (1,))
    h, = cddp.autograd.grad((z ** 2).sum(), e, create_graph=True)
    h.sum().backward()                            # positions 0, 1 each shared by 2 elements
    np.testing.assert_allclose(n(e.grad), [2, 2, 0])


def test_unfold_is_a_view(torch):
    a = np.arange(24.0).reshape(2, 12)
    cx, tx = t(a), torch.tensor(a)
    cu, tu = cx.unfold(1, 4, 3), tx.unfold(1, 4, 3)
    assert cu.stride() == tu.stride() and tuple(cu.shape) == tuple(tu.shape)
    cu[0, 1, 0] = -5.0
    assert n(cx)[0, 3] == -5.0


def test_scatter_variants_frexp_ger_nonzero_static():
    """diagonal_scatter / as_strided_scatter (copies with a view replaced), frexp, ger and
    nonzero_static, against NumPy."""
    a = np.arange(12.0).reshape(3, 4)
    for src, off in ((np.ones(3), 0), (np.full(3, 7.0), 1), (np.ones(2), -1)):
        want = a.copy()
        r = np.arange(len(src))
        want[r - min(off, 0), r + max(off, 0)] = src
        np.testing.assert_array_equal(n(cddp.diagonal_scatter(t(a), t(src), off)), want)
    x = t(a, requires_grad=True)
    s = t(np.ones(3), requires_grad=True)
    cddp.diagonal_scatter(x, s).sum().backward()
    np.testing.assert_array_equal(n(x.grad), 1 - np.eye(3, 4))
    assert s.grad.tolist() == [1.0, 1.0, 1.0]
    want = a.copy()
    want.ravel()[[1, 2, 5, 6]] = 1.0
    np.testing.assert_array_equal(n(cddp.as_strided_scatter(t(a), t(np.ones((2, 2))), (2, 2),
                                                            (4, 1), 1)), want)
    v = np.array([0.0, 1.5, -3.0, 1e-300, 7e10])
    m, e = cddp.frexp(t(v))
    nm, ne = np.frexp(v)
    np.testing.assert_array_equal(n(m), nm)
    np.testing.assert_array_equal(n(e), ne)
    assert e.dtype == cddp.int32
    np.testing.assert_array_equal(n(cddp.ger(t(np.array([1.0, 2.0])), t(np.arange(3.0)))),
                                  np.outer([1.0, 2.0], np.arange(3.0)))
    mask = t(np.array([[0, 1], [1, 0], [1, 1]]))
    assert cddp.nonzero_static(mask, size=5).tolist() == [[0, 1], [1, 0], [2, 0], [2, 1],
                                                          [-1, -1]]
    assert mask.nonzero_static(size=2, fill_value=9).tolist() == [[0, 1], [1, 0]]
    assert [tuple(c.shape) for c in t(a).unsafe_chunk(2)] == [(2, 4), (1, 4)]
