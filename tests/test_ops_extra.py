"""The tensor ops real training code reaches for: triangles and diagonals, repeats, rolls and
flips, running products and extrema, data-dependent selections, index writes and
scatter_reduce, einsum and the addmm family, unique / searchsorted / counting, the wiring
ops (meshgrid, stacks, splits, kron) and range / list index keys.

Oracles: NumPy for every value (np.tril, np.roll, np.nonzero, np.einsum, np.unique, ...),
central finite differences in float64 for every backward (conftest.gradcheck), torch (when
importable) for values, gradients and error kinds/messages. Inputs include non-contiguous
views (transposed, strided), empty and 0-d tensors, negative dims and out-of-range offsets.
"""
import warnings

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

RNG = np.random.default_rng(1234)


def R(*shape):
    return RNG.standard_normal(shape)


def strided(a):
    """A cddp tensor with a's values whose memory is every other element of a bigger one."""
    big = np.zeros(tuple(2 * s for s in a.shape), a.dtype)
    big[tuple(slice(0, None, 2) for _ in a.shape)] = a
    x = cddp.from_numpy(big)[tuple(slice(0, None, 2) for _ in a.shape)]
    assert not x.is_contiguous() or a.size <= 1 or x.numel() == 0
    return x


def transposed(a):
    """A cddp tensor with a's values stored transposed (a's last two dims swapped in memory)."""
    x = cddp.from_numpy(np.ascontiguousarray(np.swapaxes(a, -1, -2))).transpose(-1, -2)
    assert a.ndim < 2 or min(a.shape[-2:]) <= 1 or not x.is_contiguous()
    return x


LAYOUTS = {"contig": t, "strided": strided, "transposed": transposed}


def graph_names(out):
    """Names of every node reachable from out.grad_fn."""
    seen, stack, names = set(), [out.grad_fn], []
    while stack:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        names.append(f.name())
        stack.extend(g for g, _ in f.next_functions)
    return names


def torch_vs(torch, f, *arrays, grad=True, atol=1e-10):
    """f(lib, *tensors) in cddp and torch on the same float64 arrays: values and gradients."""
    cs = [t(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    ts = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    rc, rt = f(cddp, *cs), f(torch, *ts)
    np.testing.assert_allclose(n(rc), rt.detach().numpy(), atol=atol)
    assert tuple(rc.shape) == tuple(rt.shape)
    if grad and rt.requires_grad:
        w = RNG.standard_normal(tuple(rt.shape))
        (rc * t(w)).sum().backward()
        (rt * torch.tensor(w)).sum().backward()
        for c, tt in zip(cs, ts):
            if tt.grad is not None:
                np.testing.assert_allclose(n(c.grad), tt.grad.numpy(), atol=atol)


# ---- tril / triu ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(3, 4), (5, 2), (2, 3, 4), (0, 3), (3, 0)])
def test_tril_triu_match_numpy(shape, layout):
    a = R(*shape)
    x = LAYOUTS[layout](a)
    for k in (-5, -1, 0, 1, 2, 7):
        np.testing.assert_array_equal(n(x.tril(k)), np.tril(a, k))
        np.testing.assert_array_equal(n(cddp.triu(x, diagonal=k)), np.triu(a, k))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_])
def test_tril_triu_dtypes_and_inplace(dtype):
    a = (R(4, 5) > 0).astype(dtype) if dtype == np.bool_ else (R(4, 5) * 9).astype(dtype)
    x = t(a)
    assert x.tril(1).dtype == x.dtype
    np.testing.assert_array_equal(n(x.tril(1)), np.tril(a, 1))
    v = x[:, 1:]                    # in place on a view writes through to x
    v.triu_(-1)
    want = a.copy()
    want[:, 1:] = np.triu(a[:, 1:], -1)
    np.testing.assert_array_equal(n(x), want)


def test_tril_triu_gradients():
    gradcheck(lambda x: x.tril(-1) * 2, R(3, 4))
    gradcheck(lambda x: cddp.triu(x, 1), R(2, 3, 3))
    gradcheck(lambda x: (x * 1).tril_(0), R(3, 3))


def test_tril_errors_and_leaf_inplace():
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        cddp.tril(t(R(3)))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        t(R(2, 2), requires_grad=True).triu_()


# ---- diagonal / diag / diag_embed / trace --------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_diagonal_is_a_view_matching_numpy(layout):
    a = R(3, 4, 5)
    x = LAYOUTS[layout](a)
    for off in (-4, -1, 0, 2, 6):
        for d1, d2 in ((0, 1), (2, 0), (-1, 1)):
            got = x.diagonal(off, d1, d2)
            np.testing.assert_array_equal(n(got), np.diagonal(a, off, d1, d2))
    v = cddp.diagonal(x, 1)         # shares memory: a write shows in x
    v.fill_(7.0)
    assert (n(x).diagonal(1) == 7).all()


def test_diag_diag_embed_trace_match_numpy():
    a = R(4, 3)
    v = R(3)
    for k in (-2, 0, 1, 5):
        np.testing.assert_array_equal(n(cddp.diag(t(a), k)), np.diag(a, k))
        np.testing.assert_array_equal(n(t(v).diag(k)), np.diag(v, k))
    e = n(cddp.diag_embed(t(R(2, 3)), 1, 0, 2))
    assert e.shape == (4, 2, 4)
    b = R(2, 3)
    want = np.zeros((2, 4, 4))
    for i in range(2):
        want[i] = np.diag(b[i], -1)
    np.testing.assert_array_equal(n(t(b).diag_embed(-1)), want)
    np.testing.assert_allclose(n(cddp.trace(t(a))), np.trace(a))
    assert cddp.trace(t(np.arange(9, dtype=np.int32).reshape(3, 3))).dtype == cddp.int64
    assert n(t(R(0, 0)).diagonal()).shape == (0,)


def test_diagonal_family_gradients():
    gradcheck(lambda x: x.diagonal(1, 0, 2), R(3, 2, 4))
    gradcheck(lambda x: cddp.diag_embed(x, -1, 1, 0), R(2, 3))
    gradcheck(lambda x: cddp.diag(x, 1), R(3))
    gradcheck(lambda x: x.diag(-1), R(3, 4))
    gradcheck(lambda x: x.trace(), R(3, 4))


def test_diagonal_errors():
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, 1"):
        t(R(2, 2)).diagonal(0, 1, 1)
    with pytest.raises(RuntimeError, match=r"diag\(\): Supports 1D or 2D tensors. Got 3D"):
        cddp.diag(t(R(2, 2, 2)))
    with pytest.raises(RuntimeError, match="trace: expected a matrix, but got tensor with dim 3"):
        cddp.trace(t(R(2, 2, 2)))
    with pytest.raises(IndexError, match="Dimension out of range"):
        t(R(2, 2)).diagonal(0, 0, 2)


# ---- repeat / tile / repeat_interleave -----------------------------------------------------


@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_repeat_and_tile_match_numpy(layout):
    a = R(2, 3)
    x = LAYOUTS[layout](a)
    for reps in [(1, 1), (2, 3), (3, 1, 2), (0, 2), (2, 1, 1, 2)]:
        np.testing.assert_array_equal(n(x.repeat(*reps)), np.tile(a, reps))
    np.testing.assert_array_equal(n(x.repeat((2, 2))), np.tile(a, (2, 2)))
    np.testing.assert_array_equal(n(cddp.tile(x, (3,))), np.tile(a, (3,)))
    np.testing.assert_array_equal(n(x.tile(2, 1, 1)), np.tile(a, (2, 1, 1)))
    np.testing.assert_array_equal(n(t(np.array(5.0)).repeat(2, 3)), np.full((2, 3), 5.0))
    b = np.array([True, False])
    np.testing.assert_array_equal(n(t(b).repeat(3)), np.tile(b, 3))


def test_repeat_interleave_matches_numpy():
    a = R(3, 4)
    x = t(a)
    np.testing.assert_array_equal(n(x.repeat_interleave(2)), np.repeat(a, 2))
    np.testing.assert_array_equal(n(cddp.repeat_interleave(x, 3, dim=1)), np.repeat(a, 3, 1))
    np.testing.assert_array_equal(n(x.repeat_interleave(0, dim=-2)), np.repeat(a, 0, 0))
    r = np.array([2, 0, 1])
    np.testing.assert_array_equal(n(x.repeat_interleave(t(r), dim=0)), np.repeat(a, r, 0))
    np.testing.assert_array_equal(n(x.repeat_interleave(t(np.array([2])), dim=1)),
                                  np.repeat(a, 2, 1))
    np.testing.assert_array_equal(n(cddp.repeat_interleave(t(np.array([1, 0, 2])))),
                                  [0, 2, 2])
    np.testing.assert_array_equal(
        n(x.repeat_interleave(t(r), dim=0, output_size=3)), np.repeat(a, r, 0))


def test_repeat_gradients():
    gradcheck(lambda x: x.repeat(2, 1, 3), R(2, 3))
    gradcheck(lambda x: cddp.tile(x, (2,)), R(3))
    gradcheck(lambda x: x.repeat_interleave(2, dim=1), R(2, 3))
    gradcheck(lambda x: x.repeat_interleave(3), R(2, 2))
    gradcheck(lambda x: x.repeat_interleave(t(np.array([0, 2, 1])), dim=0), R(3, 2))


def test_repeat_errors():
    x = t(R(2, 3))
    with pytest.raises(RuntimeError, match="can not be smaller than number of dimensions"):
        x.repeat(2)
    with pytest.raises(RuntimeError, match=r"negative dimension -2: \[-2, 6\]"):
        x.repeat(-1, 2)
    with pytest.raises(RuntimeError, match="repeats must have the same size as input along dim"):
        x.repeat_interleave(t(np.array([1, 2, 3])), dim=0)
    with pytest.raises(RuntimeError, match="Repeats must be non-negative"):
        x.repeat_interleave(-1)
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        x.repeat_interleave(t(np.array([1, -2])), dim=0)
    with pytest.raises(RuntimeError, match="allocated size does not match required size"):
        x.repeat_interleave(t(np.array([1, 2])), dim=0, output_size=4)
    with pytest.raises(RuntimeError, match="repeats must be 0-dim or 1-dim tensor"):
        x.repeat_interleave(t(np.array([[1, 2]])), dim=0)


# ---- roll / flip / movedim / narrow_copy ---------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_roll_flip_movedim_match_numpy(layout):
    a = R(3, 4, 5)
    x = LAYOUTS[layout](a)
    for shifts, dims in [(1, 0), ((1, -2), (0, 2)), ((7, 3), (1, 1)), (-13, None), (0, 1)]:
        np.testing.assert_array_equal(n(x.roll(shifts, dims)), np.roll(a, shifts, dims))
    np.testing.assert_array_equal(n(cddp.roll(x, 4)), np.roll(a, 4))
    for dims in [(0,), (2, 0), (-1,), ()]:
        np.testing.assert_array_equal(n(cddp.flip(x, dims)), np.flip(a, dims))
    np.testing.assert_array_equal(n(x.flip(0, 1)), np.flip(a, (0, 1)))
    np.testing.assert_array_equal(n(cddp.fliplr(x)), np.fliplr(a))
    np.testing.assert_array_equal(n(x.flipud()), np.flipud(a))
    np.testing.assert_array_equal(n(x.movedim(0, -1)), np.moveaxis(a, 0, -1))
    np.testing.assert_array_equal(n(cddp.moveaxis(x, (0, 1), (2, 0))),
                                  np.moveaxis(a, (0, 1), (2, 0)))
    np.testing.assert_array_equal(n(x.narrow_copy(1, 1, 2)), a[:, 1:3])
    assert x.narrow_copy(1, 1, 2).is_contiguous()


def test_roll_flip_movedim_gradients():
    gradcheck(lambda x: x.roll((1, -1), (0, 1)), R(3, 4))
    gradcheck(lambda x: cddp.roll(x, 5), R(2, 3))
    gradcheck(lambda x: x.flip(0, 2), R(2, 2, 3))
    gradcheck(lambda x: cddp.fliplr(x), R(2, 3))
    gradcheck(lambda x: x.movedim(2, 0), R(2, 3, 2))
    gradcheck(lambda x: cddp.narrow_copy(x, 0, 1, 2), R(4, 2))


def test_roll_flip_edge_cases_and_errors():
    np.testing.assert_array_equal(n(t(np.array(3.0)).roll(1)), 3.0)
    assert n(t(R(0, 3)).roll(2, 1)).shape == (0, 3)
    assert n(t(R(0, 3)).flip(0)).shape == (0, 3)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align. shifts: 2, dims:1"):
        t(R(2, 3)).roll((1, 2), 0)
    with pytest.raises(RuntimeError, match="`shifts` required"):
        cddp.roll(t(R(2, 3)), (), ())
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times in the list of dims"):
        t(R(2, 3)).flip(0, 0)
    with pytest.raises(RuntimeError, match=r"Input must be >= 2-d\."):
        cddp.fliplr(t(R(3)))
    with pytest.raises(RuntimeError, match=r"movedim: repeated dim in `source` \(\[0, 0\]\)"):
        t(R(2, 3)).movedim((0, 0), (0, 1))
    with pytest.raises(RuntimeError, match="should contain the same number of dims"):
        t(R(2, 3)).movedim((0,), (0, 1))


# ---- cumprod / cummax / cummin -------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cumprod_matches_numpy(layout):
    a = R(3, 4, 5)
    x = LAYOUTS[layout](a)
    for d in (0, 1, -1):
        np.testing.assert_allclose(n(x.cumprod(d)), np.cumprod(a, d), rtol=1e-12)
    i = np.array([[1, 2, 3], [4, -1, 2]], np.int32)
    got = cddp.cumprod(t(i), 1)
    assert got.dtype == cddp.int64
    np.testing.assert_array_equal(n(got), np.cumprod(i, 1))
    np.testing.assert_allclose(n(t(i).cumprod(0, dtype=cddp.float64)), np.cumprod(i, 0))
    assert n(t(np.array(2.5)).cumprod(0)) == 2.5


def test_cumprod_inplace():
    a = R(3, 4)
    a[1, 2] = 0.0
    x = t(a)
    assert x.cumprod_(1) is x
    np.testing.assert_allclose(n(x), np.cumprod(a, 1), rtol=1e-12)
    gradcheck(lambda z: (z * 1).cumprod_(0), a)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        t(a, requires_grad=True).cumprod_(0)


@pytest.mark.parametrize("zeros", [[], [2], [0], [1, 3], [4]])
def test_cumprod_gradient_with_zeros(zeros):
    a = R(2, 5)
    a[:, zeros] = 0.0
    gradcheck(lambda x: x.cumprod(1), a)
    gradcheck(lambda x: x.cumprod(0), a.T.copy())


def test_cummax_cummin_match_numpy():
    a = R(4, 6)
    a[1, 3] = a[1, 1]                # a tie: the later index wins, as torch
    for f, ufunc in ((cddp.cummax, np.maximum), (cddp.cummin, np.minimum)):
        for d in (0, 1):
            r = f(t(a), d)
            np.testing.assert_array_equal(n(r.values), ufunc.accumulate(a, d))
            picked = np.take_along_axis(a, n(r.indices), d)
            np.testing.assert_array_equal(picked, n(r.values))
    assert n(t(np.array([1, 3, 3, 2])).cummax(0).indices).tolist() == [0, 1, 2, 2]
    nan = t(np.array([1.0, np.nan, 5.0]))
    assert np.isnan(n(cddp.cummax(nan, 0)[0])[1:]).all()
    assert n(cddp.cummax(nan, 0)[1]).tolist() == [0, 1, 1]
    gradcheck(lambda x: cddp.cummax(x, 1)[0], R(3, 4))
    gradcheck(lambda x: x.cummin(0).values, R(3, 4))


# ---- nonzero / argwhere / where(cond) / masked_select / take -------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_nonzero_family_matches_numpy(layout):
    a = np.round(R(3, 4, 2))
    x = LAYOUTS[layout](a)
    np.testing.assert_array_equal(n(x.nonzero()), np.argwhere(a))
    np.testing.assert_array_equal(n(cddp.argwhere(x)), np.argwhere(a))
    for got, want in zip(cddp.nonzero(x, as_tuple=True), np.nonzero(a)):
        np.testing.assert_array_equal(n(got), want)
    for got, want in zip(cddp.where(x > 0), np.nonzero(a > 0)):
        np.testing.assert_array_equal(n(got), want)
    assert n(cddp.nonzero(t(np.zeros((2, 3))))).shape == (0, 2)
    assert n(t(np.array(5)).nonzero()).shape == (1, 0)
    assert n(cddp.nonzero(t(np.array(0.0)), as_tuple=True)[0]).tolist() == []
    assert n(t(np.array([np.nan, 0.0])).nonzero()).tolist() == [[0]]


def test_masked_select_and_take_match_numpy():
    a = R(3, 4)
    m = a > 0
    np.testing.assert_array_equal(n(cddp.masked_select(strided(a), t(m))), a[m])
    row = np.array([True, False, True, True])          # broadcast over rows
    np.testing.assert_array_equal(n(t(a).masked_select(t(row))), a[:, row].reshape(-1))
    assert n(t(a).masked_select(t(np.zeros_like(m)))).shape == (0,)
    idx = np.array([[0, -1], [5, 11]])
    np.testing.assert_array_equal(n(cddp.take(transposed(a), t(idx))), np.take(a, idx))
    gradcheck(lambda x: x.masked_select(t(m)), a)
    gradcheck(lambda x: cddp.masked_select(x, t(row)), a)
    gradcheck(lambda x: cddp.take(x, t(np.array([0, 0, 7, -1]))), a)


def test_selection_errors():
    x = t(R(2, 3))
    with pytest.raises(RuntimeError, match="masked_select: expected BoolTensor for mask"):
        x.masked_select(t(np.ones((2, 3))))
    with pytest.raises(IndexError, match="out of range: tried to access index 6 on a tensor of 6"):
        cddp.take(x, t(np.array([6])))
    with pytest.raises(RuntimeError, match="take\\(\\): Expected a long tensor for index"):
        cddp.take(x, t(np.array([1.0])))


def test_take_along_dim_matches_numpy():
    a = R(3, 4)
    i = RNG.integers(0, 4, (3, 2))
    np.testing.assert_array_equal(n(cddp.take_along_dim(t(a), t(i), 1)),
                                  np.take_along_axis(a, i, 1))
    j = RNG.integers(0, 3, (1, 4))
    np.testing.assert_array_equal(n(t(a).take_along_dim(t(j), dim=0)),
                                  np.take_along_axis(a, j, 0))
    np.testing.assert_array_equal(n(cddp.take_along_dim(t(a), t(np.array([1, 5])))),
                                  a.reshape(-1)[[1, 5]])
    gradcheck(lambda x: cddp.take_along_dim(x, t(i), 1), a)
    with pytest.raises(RuntimeError, match="should have the same number of dimensions"):
        cddp.take_along_dim(t(a), t(np.array([1])), 0)
    with pytest.raises(RuntimeError, match="dtype of indices should be Long but got Float"):
        cddp.take_along_dim(t(a), t(np.array([[1.0]], np.float32)), 0)


# ---- index_add / index_copy / index_fill / scatter_reduce ----------------------------------


def test_index_writes_match_numpy():
    a = R(4, 3)
    src = R(4, 2)
    idx = np.array([2, 0])
    want = a.copy()
    np.add.at(want.T, idx, 2.5 * src.T)
    np.testing.assert_allclose(n(t(a).index_add(1, t(idx), t(src), alpha=2.5)), want)
    want = a.copy()
    want[:, idx] = src
    np.testing.assert_array_equal(n(cddp.index_copy(t(a), 1, t(idx), t(src))), want)
    want = a.copy()
    want[[1, 3], :] = -7
    np.testing.assert_array_equal(n(t(a).index_fill(0, t(np.array([1, -1])), -7.0)), want)
    dup = np.array([1, 1, 0])        # duplicates accumulate in index_add
    want = a.copy()
    np.add.at(want, dup, np.ones((3, 3)))
    np.testing.assert_allclose(n(t(a).index_add(0, t(dup), t(np.ones((3, 3))))), want)
    x = t(a)                         # in place: returns self, writes through views
    assert x.index_fill_(1, t(np.array([0])), 1.0) is x
    assert (n(x)[:, 0] == 1).all()
    v = t(np.arange(6)).index_add(0, t(np.array([0, 0], np.int32)), t(np.array([5, 6])))
    assert n(v).tolist() == [11, 1, 2, 3, 4, 5]


def test_index_writes_gradients():
    idx = t(np.array([2, 0]))
    src = R(4, 2)
    gradcheck(lambda x, s: x.index_add(1, idx, s, alpha=-1.5), R(4, 3), src)
    gradcheck(lambda x, s: x.index_copy(1, idx, s), R(4, 3), src)
    gradcheck(lambda x: x.index_fill(1, idx, 3.0), R(4, 3))
    gradcheck(lambda x, v: x.index_fill(0, t(np.array([1])), v), R(3, 2), np.array(0.5))
    gradcheck(lambda x, s: (x * 1).index_add_(0, t(np.array([1, 1])), s), R(3, 2), R(2, 2))


def test_index_write_errors():
    x = t(np.zeros((3, 4)))
    s = t(np.ones((2, 4)))
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 0 with size 3"):
        x.index_add(0, t(np.array([0, 5])), s)
    with pytest.raises(IndexError, match="index_copy_\\(\\): index -1 is out of bounds"):
        x.index_copy(0, t(np.array([-1, 0])), s)
    with pytest.raises(RuntimeError, match="Number of indices \\(3\\) should be equal to source"):
        x.index_add(0, t(np.array([0, 1, 2])), s)
    with pytest.raises(RuntimeError, match="source tensor shape must match self tensor shape"):
        x.index_add(0, t(np.array([0, 1])), t(np.ones((2, 3))))
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index but got: Double"):
        x.index_add(0, t(np.array([0.0, 1.0])), s)
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        x.index_add(0, t(np.array([[0, 1]])), s)
    with pytest.raises(RuntimeError, match="self \\(Double\\) and source \\(Float\\)"):
        x.index_add(0, t(np.array([0, 1])), s.float())
    with pytest.raises(RuntimeError, match="only supports a 0-dimensional value tensor"):
        x.index_fill(0, t(np.array([0])), t(np.ones(2)))


def _scatter_reduce_ref(a, dim, idx, src, red, incl):
    """NumPy reference: per output position, the list of reduced values."""
    out = a.copy()
    groups = {}
    for r in np.ndindex(*idx.shape):
        p = list(r)
        p[dim] = idx[r]
        groups.setdefault(tuple(p), []).append(src[r])
    for p, vals in groups.items():
        vals = ([a[p]] if incl else []) + vals
        f = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}
        out[p] = f[red](vals)
    return out


@pytest.mark.parametrize("red", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("incl", [True, False])
def test_scatter_reduce_matches_numpy_and_gradcheck(red, incl):
    a = R(3, 4)
    src = R(2, 4)
    idx = np.array([[0, 1, 0, 2], [0, 0, 1, 2]])
    got = t(a).scatter_reduce(0, t(idx), t(src), red, include_self=incl)
    np.testing.assert_allclose(n(got), _scatter_reduce_ref(a, 0, idx, src, red, incl), rtol=1e-12)
    gradcheck(lambda x, s: x.scatter_reduce(0, t(idx), s, red, include_self=incl), a, src)


def test_scatter_reduce_zeros_ints_inplace():
    a = np.array([[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]])
    src = np.array([[0.0, 2.0, 0.0]])
    idx = np.array([[0, 0, 1]])
    gradcheck(lambda x, s: x.scatter_reduce(0, t(idx), s, "prod"), a, src)
    i = np.array([[1, -2], [3, 4]])
    got = cddp.scatter_reduce(t(i), 0, t(np.array([[0, 0]])), t(np.array([[2, -5]])), "mean")
    assert n(got).tolist() == [[1, -4], [3, 4]]           # integer mean floors, as torch
    x = t(a)
    assert x.scatter_reduce_(1, t(np.array([[2]])), t(np.array([[10.0]])), "amax") is x
    assert n(x)[0, 2] == 10.0
    with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean"):
        x.scatter_reduce(0, t(idx), t(src), "max2")


# ---- einsum --------------------------------------------------------------------------------


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("iij->j", [(3, 3, 2)]), ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]), ("i,i->", [(3,), (3,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("i...->...", [(2, 3, 4)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]), ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]), ("ij,kj->ik", [(3, 4), (5, 4)]), ("Ab,ba", [(2, 3), (3, 2)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]), ("ij,jk->", [(3, 4), (4, 5)]), (" i j , j k ", [(2, 3), (3, 2)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum_matches_numpy(eq, shapes):
    arrays = [R(*s) for s in shapes]
    got = cddp.einsum(eq, *[t(a) for a in arrays])
    np.testing.assert_allclose(n(got), np.einsum(eq.replace(" ", ""), *arrays), atol=1e-12)
    got = cddp.einsum(eq, [strided(a) for a in arrays])       # list form, strided operands
    np.testing.assert_allclose(n(got), np.einsum(eq.replace(" ", ""), *arrays), atol=1e-12)


@pytest.mark.parametrize("eq,shapes", [c for c in EINSUM_CASES if "..." not in c[0]][::3])
def test_einsum_gradients(eq, shapes):
    gradcheck(lambda *xs: cddp.einsum(eq, *xs), *[R(*s) for s in shapes])


def test_einsum_contractions_run_through_bmm():
    a, b = t(R(3, 4), requires_grad=True), t(R(4, 5), requires_grad=True)
    for eq in ("ij,jk->ik", "ij,kj->ik", "bhqd,bhkd->bhqk"):
        xs = (a, b) if eq[0] == "i" and "kj" not in eq else None
        if eq == "ij,kj->ik":
            xs = (a, t(R(5, 4), requires_grad=True))
        if eq.startswith("bh"):
            xs = (t(R(2, 3, 4, 5), requires_grad=True), t(R(2, 3, 6, 5), requires_grad=True))
        names = graph_names(cddp.einsum(eq, *xs))
        assert "BmmBackward0" in names and "MulBackward0" not in names, names
    assert "BmmBackward0" not in graph_names(cddp.einsum("ij,ij->ij", a, a))   # no contraction


def test_einsum_broadcasts_size_one_dims():
    a, b = R(1, 3, 4), R(2, 4, 5)
    np.testing.assert_allclose(n(cddp.einsum("bij,bjk->bik", t(a), t(b))), np.matmul(a, b))
    np.testing.assert_allclose(n(cddp.einsum("i,i->i", t(R(3)), t(np.ones(1)))).shape, (3,))


def test_einsum_errors():
    x, y = t(R(3, 4)), t(R(4, 5))
    for eq, ops, msg in [
        ("ij,jk->ikl", (x, y), "output subscript l does not appear in the equation"),
        ("i$,jk", (x, y), "invalid subscript given at index 1"),
        ("ij,jk->ii", (x, y), "output subscript i appears more than once in the output"),
        ("ii->i", (x,), "subscript i is repeated for operand 0 but the sizes don't match, 4 != 3"),
        ("ij,jk->ik", (x,), "fewer operands were provided than specified"),
        ("ij->ij", (x, y), "more operands were provided than specified"),
        ("ijk->i", (x,), "does not match the number of dimensions \\(2\\) for operand 0"),
        ("ij,ij->ij", (x, y), "subscript i has size 4 for operand 1 which does not broadcast"),
    ]:
        with pytest.raises(RuntimeError, match=msg):
            cddp.einsum(eq, *ops)


# ---- baddbmm / addbmm / addmv / addr -------------------------------------------------------


def test_addmm_family_matches_numpy():
    i3, b1, b2 = R(1, 3, 5), R(2, 3, 4), R(2, 4, 5)
    np.testing.assert_allclose(n(cddp.baddbmm(t(i3), t(b1), t(b2), beta=0.5, alpha=2)),
                               0.5 * i3 + 2 * b1 @ b2, atol=1e-12)
    i2 = R(3, 5)
    np.testing.assert_allclose(n(t(i2).addbmm(transposed(b1), t(b2), alpha=-1)),
                               i2 - (b1 @ b2).sum(0), atol=1e-12)
    m, v, iv = R(3, 4), R(4), R(3)
    np.testing.assert_allclose(n(cddp.addmv(t(iv), transposed(m), t(v), beta=2)),
                               2 * iv + m @ v, atol=1e-12)
    v1, v2 = R(3), R(5)
    np.testing.assert_allclose(n(cddp.addr(t(i2), t(v1), strided(v2), alpha=3)),
                               i2 + 3 * np.outer(v1, v2), atol=1e-12)
    nan = t(np.full((3, 5), np.nan))   # beta == 0 ignores input, NaN included
    assert not np.isnan(n(cddp.addr(nan, t(v1), t(v2), beta=0))).any()
    x = t(i2)
    assert x.addr_(t(v1), t(v2)) is x
    np.testing.assert_allclose(n(x), i2 + np.outer(v1, v2), atol=1e-12)
    im = np.arange(6).reshape(2, 3)
    got = cddp.addmv(t(np.ones(2, np.int64)), t(im), t(np.array([1, 2, 3])), alpha=2)
    assert got.dtype == cddp.int64 and n(got).tolist() == [17, 53]


def test_addmm_family_gradients():
    gradcheck(lambda i, a, b: cddp.baddbmm(i, a, b, beta=0.5, alpha=2), R(3, 1), R(2, 3, 2),
              R(2, 2, 1))
    gradcheck(lambda i, a, b: cddp.addbmm(i, a, b, alpha=-1.5), R(3, 2), R(2, 3, 2), R(2, 2, 2))
    gradcheck(lambda i, m, v: cddp.addmv(i, m, v, beta=3), R(1), R(3, 2), R(2))
    gradcheck(lambda i, a, b: cddp.addr(i, a, b, beta=0.5, alpha=2), R(3, 2), R(3), R(2))
    gradcheck(lambda i, a, b: (i * 1).addmv_(a, b), R(3), R(3, 2), R(2))
    gradcheck(lambda i, a, b: cddp.addmv_(i * 1, a, b, alpha=2), R(3), R(3, 2), R(2))


def test_addmm_family_errors():
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        cddp.baddbmm(t(R(3, 5)), t(R(3, 4)), t(R(2, 4, 5)))
    with pytest.raises(RuntimeError, match="Expected size for first two dimensions of batch2"):
        cddp.baddbmm(t(R(2, 3, 5)), t(R(2, 3, 4)), t(R(2, 5, 5)))
    with pytest.raises(RuntimeError, match="batch1 and batch2 must have same number of batches"):
        cddp.addbmm(t(R(3, 5)), t(R(2, 3, 4)), t(R(3, 4, 5)))
    with pytest.raises(RuntimeError, match=r"size mismatch, got input \(3\), mat \(3x4\), vec \(5\)"):
        cddp.addmv(t(R(3)), t(R(3, 4)), t(R(5)))
    with pytest.raises(RuntimeError, match="addr: Expected 1-D argument vec1, but got 2-D"):
        cddp.addr(t(R(3, 4)), t(R(3, 1)), t(R(4)))
    with pytest.raises(RuntimeError):
        t(R(1, 4)).addr_(t(R(3)), t(R(4)))               # in place cannot broadcast self


# ---- unique / searchsorted / bucketize / isin / bincount / histc ---------------------------


def test_unique_matches_numpy():
    a = RNG.integers(-3, 4, (4, 5))
    vals, inv, cnt = cddp.unique(t(a), return_inverse=True, return_counts=True)
    wv, wi, wc = np.unique(a, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(n(vals), wv)
    np.testing.assert_array_equal(n(inv), wi.reshape(a.shape))
    np.testing.assert_array_equal(n(cnt), wc)
    assert n(vals)[n(inv)].tolist() == a.tolist()
    f = R(10).round(1).astype(np.float32)
    got = strided(f).unique()
    assert got.dtype == cddp.float32 and n(got).tolist() == np.unique(f).tolist()
    rows = np.array([[1, 2], [1, 2], [0, 5], [1, 0]])
    for dim in (0, 1):
        v, i, c = cddp.unique(t(rows), dim=dim, return_inverse=True, return_counts=True)
        wv, wi, wc = np.unique(rows, axis=dim, return_inverse=True, return_counts=True)
        np.testing.assert_array_equal(n(v), wv)
        np.testing.assert_array_equal(n(i), wi.reshape(-1))
        np.testing.assert_array_equal(n(c), wc)
    assert n(cddp.unique(t(np.array([True, False, True])))).tolist() == [False, True]
    assert n(cddp.unique(t(np.zeros(0)))).shape == (0,)
    nan = n(cddp.unique(t(np.array([2.0, np.nan, 1.0, np.nan]))))
    assert nan[:2].tolist() == [1.0, 2.0] and np.isnan(nan[2:]).all()   # NaNs stay distinct


def test_unique_consecutive():
    a = np.array([1, 1, 2, 2, 3, 1, 1, 2])
    v, i, c = cddp.unique_consecutive(t(a), return_inverse=True, return_counts=True)
    assert n(v).tolist() == [1, 2, 3, 1, 2]
    assert n(i).tolist() == [0, 0, 1, 1, 2, 3, 3, 4]
    assert n(c).tolist() == [2, 2, 1, 2, 1]
    rows = np.array([[1, 2], [1, 2], [3, 4], [1, 2]])
    v, c = t(rows).unique_consecutive(dim=0, return_counts=True)
    assert n(v).tolist() == [[1, 2], [3, 4], [1, 2]] and n(c).tolist() == [2, 1, 1]
    nan = n(cddp.unique_consecutive(t(np.array([np.nan, np.nan, 1.0]))))
    assert nan.shape == (3,)                           # NaN != NaN: no run


def test_searchsorted_bucketize_isin_match_numpy():
    seq = np.sort(R(8))
    v = R(3, 4)
    for side in ("left", "right"):
        np.testing.assert_array_equal(n(cddp.searchsorted(t(seq), t(v), side=side)),
                                      np.searchsorted(seq, v, side=side))
    np.testing.assert_array_equal(n(cddp.searchsorted(t(seq), t(seq), right=True)),
                                  np.searchsorted(seq, seq, side="right"))
    got = cddp.searchsorted(t(seq), 0.1, out_int32=True)
    assert got.dtype == cddp.int32 and got.dim() == 0
    rows = np.sort(R(2, 6), axis=1)
    q = R(2, 3)
    np.testing.assert_array_equal(n(cddp.searchsorted(t(rows), t(q))),
                                  [np.searchsorted(rows[k], q[k]) for k in range(2)])
    perm = RNG.permutation(8)
    unsorted = seq[perm]
    sorter = np.argsort(unsorted)
    np.testing.assert_array_equal(n(cddp.searchsorted(t(unsorted), t(v), sorter=t(sorter))),
                                  np.searchsorted(unsorted, v, sorter=sorter))
    b = np.array([1, 3, 5, 7])
    x = np.array([[0, 3, 6], [7, 8, 1]])
    np.testing.assert_array_equal(n(cddp.bucketize(t(x), t(b))), np.searchsorted(b, x, "left"))
    np.testing.assert_array_equal(n(cddp.bucketize(t(x), t(b), right=True)),
                                  np.searchsorted(b, x, "right"))
    e = RNG.integers(0, 6, (3, 4))
    np.testing.assert_array_equal(n(cddp.isin(t(e), t(np.array([1, 4])))), np.isin(e, [1, 4]))
    np.testing.assert_array_equal(n(cddp.isin(t(e), 2, invert=True)), ~np.isin(e, 2))
    assert n(cddp.isin(3.0, t(np.array([1.0, 3.0])))).tolist() is True


def test_bincount_histc_match_numpy():
    x = RNG.integers(0, 6, 20)
    w = R(20)
    np.testing.assert_array_equal(n(cddp.bincount(t(x))), np.bincount(x))
    np.testing.assert_allclose(n(t(x).bincount(t(w), minlength=9)),
                               np.bincount(x, w, minlength=9))
    assert cddp.bincount(t(x), t(w.astype(np.float32))).dtype == cddp.float32
    assert n(cddp.bincount(t(np.zeros(0, np.int64)))).shape == (0,)
    h = R(50)
    np.testing.assert_array_equal(n(cddp.histc(t(h), bins=7, min=-1, max=1)),
                                  np.histogram(h, 7, (-1, 1))[0])
    np.testing.assert_array_equal(n(t(h).histc(5)), np.histogram(h, 5)[0])
    assert n(cddp.histc(t(np.ones(3)), bins=2)).tolist() == [0.0, 3.0]


def test_search_and_count_errors():
    with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative integral"):
        cddp.bincount(t(np.array([-1])))
    with pytest.raises(NotImplementedError, match="\"bincount_cpu\" not implemented for 'Double'"):
        cddp.bincount(t(np.array([1.0])))
    with pytest.raises(RuntimeError, match="weights should be 1-d and have the same length"):
        cddp.bincount(t(np.array([1, 2])), t(np.ones(3)))
    with pytest.raises(NotImplementedError, match="\"histogram_cpu\" not implemented for 'Long'"):
        cddp.histc(t(np.array([1, 2])))
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        cddp.histc(t(np.ones(2)), min=3, max=1)
    with pytest.raises(RuntimeError, match="boundaries tensor should be 1 dimension or the first"):
        cddp.searchsorted(t(np.array([[1, 3]])), t(np.array([1, 2, 3])))
    with pytest.raises(RuntimeError, match="side and right can't be set to opposites"):
        cddp.searchsorted(t(np.array([1, 3])), t(np.array([1])), side="left", right=True)


# ---- wiring ops ----------------------------------------------------------------------------


def test_meshgrid_cartesian_prod_match_numpy():
    a, b, c = R(2), R(3), R(4)
    for indexing in ("ij", "xy"):
        got = cddp.meshgrid(t(a), t(b), t(c), indexing=indexing)
        for g, w in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
            np.testing.assert_array_equal(n(g), w)
    with pytest.warns(UserWarning, match="it will be required to pass the indexing argument"):
        cddp.meshgrid(t(a), t(b))
    cp = n(cddp.cartesian_prod(t(a), t(b)))
    np.testing.assert_array_equal(cp, np.array([[x, y] for x in a for y in b]))
    gradcheck(lambda x, y: cddp.meshgrid(x, y, indexing="xy")[1], a, b)


def test_atleast_stack_split_kron_block_diag_match_numpy():
    s, v, m = np.array(2.0), R(3), R(2, 3)
    for f, g in ((cddp.atleast_1d, np.atleast_1d), (cddp.atleast_2d, np.atleast_2d),
                 (cddp.atleast_3d, np.atleast_3d)):
        for x in (s, v, m):
            np.testing.assert_array_equal(n(f(t(x))), g(x))
        assert isinstance(f(t(s), t(v)), tuple)
    for f, g in ((cddp.hstack, np.hstack), (cddp.vstack, np.vstack), (cddp.dstack, np.dstack),
                 (cddp.column_stack, np.column_stack)):
        np.testing.assert_array_equal(n(f([t(v), t(v)])), g([v, v]))
    np.testing.assert_array_equal(n(cddp.hstack([t(m), t(R(2, 1)) * 0])), np.hstack([m, np.zeros((2, 1))]))
    x = R(7, 4)
    for ios in (3, [1, 5], [2, -1], [0, 9]):
        for got, want in zip(cddp.tensor_split(t(x), ios), np.array_split(x, ios)):
            np.testing.assert_array_equal(n(got), want)
    for got, want in zip(t(x).hsplit(2), np.hsplit(x, 2)):
        np.testing.assert_array_equal(n(got), want)
    for got, want in zip(cddp.vsplit(t(x), [3]), np.vsplit(x, [3])):
        np.testing.assert_array_equal(n(got), want)
    a, b = R(2, 3), R(3, 2)
    np.testing.assert_allclose(n(cddp.kron(t(a), t(b))), np.kron(a, b))
    np.testing.assert_allclose(n(t(v).kron(t(m))), np.kron(v, m))
    bd = n(cddp.block_diag(t(a), t(np.array(5.0)), t(np.array([1, 2]))))
    want = np.zeros((4, 6))
    want[:2, :3], want[2, 3], want[3, 4:] = a, 5, [1, 2]
    np.testing.assert_array_equal(bd, want)
    gradcheck(lambda p, q: cddp.kron(p, q), R(2, 2), R(2, 1))
    gradcheck(lambda p, q: cddp.block_diag(p, q), R(2, 2), R(1, 3))
    gradcheck(lambda p: cddp.tensor_split(p, 3, dim=1)[1], R(2, 5))
    with pytest.raises(RuntimeError, match="not divisible by the split_size 3"):
        cddp.hsplit(t(R(7)), 3)
    with pytest.raises(RuntimeError, match="Input tensors must have 2 or fewer dimensions"):
        cddp.block_diag(t(R(2, 2, 2)))


def test_clamp_min_max():
    a = R(3, 4)
    np.testing.assert_array_equal(n(t(a).clamp_min(0.2)), np.maximum(a, 0.2))
    np.testing.assert_array_equal(n(cddp.clamp_max(t(a), t(np.zeros(4)))), np.minimum(a, 0))
    x = t(a)
    assert x.clamp_min_(0.0) is x and (n(x) >= 0).all()
    gradcheck(lambda z: z.clamp_max(0.1), a)


# ---- index keys: range objects and lists ---------------------------------------------------


KEYS = [range(1, 3), [0, 2], (slice(None), [1, 3]), [True, False, True, False],
        (range(1, 3), range(0, 2)), (slice(None), range(1, 5, 2)), [], range(0), [[0, 1], [2, 0]],
        (0, [1, 2]), (slice(None), [True, False, True, False, False, False])]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_range_and_list_keys_get_and_set(key):
    a = np.arange(24.0).reshape(4, 6)
    np_key = tuple(list(k) if isinstance(k, range) else k for k in key) \
        if isinstance(key, tuple) else (list(key) if isinstance(key, range) else key)
    np.testing.assert_array_equal(n(t(a)[key]), a[np_key])
    x, want = t(a), a.copy()
    x[key] = -1.0
    want[np_key] = -1.0
    np.testing.assert_array_equal(n(x), want)


def test_range_key_gradient():
    gradcheck(lambda x: x[range(1, 3)], R(4, 2))
    gradcheck(lambda x: x[:, range(0, 3, 2)], R(2, 4))


# ---- torch as the oracle: values, gradients, error kinds ----------------------------------


def test_vs_torch_values_and_gradients(torch):
    cases = [
        (lambda m, x: x.tril(1) + m.triu(x, -1), [R(3, 4)]),
        (lambda m, x: x.diagonal(1, 0, 2).sum(-1) + m.diag_embed(x[0], 1).sum(), [R(3, 2, 4)]),
        (lambda m, x: m.diag(x, -1) * 2 + x.trace(), [R(3, 3)]),
        (lambda m, x: x.repeat(2, 1, 3) + 0, [R(2, 3)]),
        (lambda m, x: x.repeat_interleave(m.tensor([1, 0, 2]), dim=0), [R(3, 2)]),
        (lambda m, x: x.roll((1, -2), (0, 1)).flip(0).movedim(0, 1), [R(3, 4)]),
        (lambda m, x: x.cumprod(1) + m.cummax(x, 0)[0], [np.where(R(3, 4) > 0.8, 0, R(3, 4))]),
        (lambda m, x: m.masked_select(x, x > 0) * 3, [R(3, 4)]),
        (lambda m, x: m.take(x, m.tensor([[0, -1], [5, 7]])), [R(3, 4)]),
        (lambda m, x, s: x.index_add(1, m.tensor([0, 2]), s, alpha=3), [R(3, 4), R(3, 2)]),
        (lambda m, x, s: x.index_copy(0, m.tensor([2, 0]), s), [R(3, 4), R(2, 4)]),
        (lambda m, x: x.index_fill(1, m.tensor([1, -1]), 7.0), [R(3, 4)]),
        (lambda m, x, s: x.scatter_reduce(1, m.tensor([[0, 0], [2, 2]]), s, "amax"),
         [R(2, 3), R(2, 2)]),
        (lambda m, a, b: m.einsum("bij,bkj->bik", a, b), [R(2, 3, 4), R(2, 5, 4)]),
        (lambda m, i, a, b: m.baddbmm(i, a, b, beta=0.5, alpha=2), [R(3, 5), R(2, 3, 4), R(2, 4, 5)]),
        (lambda m, i, a, b: m.addbmm(i, a, b), [R(3, 5), R(2, 3, 4), R(2, 4, 5)]),
        (lambda m, i, a, b: m.addmv(i, a, b, alpha=2), [R(3), R(3, 4), R(4)]),
        (lambda m, i, a, b: m.addr(i, a, b, beta=2), [R(3, 4), R(3), R(4)]),
        (lambda m, a, b: m.kron(a, b) + 0, [R(2, 2), R(3, 2)]),
        (lambda m, x: m.take_along_dim(x, m.tensor([[0], [2]]), 1), [R(2, 3)]),
    ]
    for f, arrays in cases:
        torch_vs(torch, f, *arrays)


def test_vs_torch_index_results(torch):
    a = RNG.integers(-2, 3, (4, 5))
    for f in (lambda m, x: m.nonzero(x), lambda m, x: m.unique(x, return_inverse=True)[1],
              lambda m, x: m.unique(x, dim=1, return_counts=True)[1],
              lambda m, x: m.searchsorted(m.tensor([-1, 0, 2]), x, right=True),
              lambda m, x: m.bucketize(x, m.tensor([-1, 0, 2])),
              lambda m, x: m.isin(x, m.tensor([0, 2])),
              lambda m, x: m.bincount(x.reshape(-1) + 2, minlength=7),
              lambda m, x: m.cummin(x, 1).indices,
              lambda m, x: m.unique_consecutive(x.reshape(-1), return_counts=True)[1]):
        got, want = f(cddp, t(a)), f(torch, torch.tensor(a))
        np.testing.assert_array_equal(n(got), want.numpy())


def test_vs_torch_error_kinds(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [
            lambda m: m.tril(m.ones(3)),
            lambda m: m.ones(2, 3).repeat(2),
            lambda m: m.ones(2, 3).roll((1, 2), 0),
            lambda m: m.masked_select(m.ones(2, 3), m.ones(2, 3)),
            lambda m: m.take(m.ones(2, 3), m.tensor([6])),
            lambda m: m.zeros(3, 4).index_copy(0, m.tensor([0, 5]), m.ones(2, 4)),
            lambda m: m.einsum("ij,jk->ik", m.ones(3, 4), m.ones(5, 5)),
            lambda m: m.addmv(m.zeros(3), m.ones(3, 4), m.ones(5)),
            lambda m: m.bincount(m.tensor([-1])),
            lambda m: m.ones(2, 3).movedim((0, 0), (0, 1)),
        ]
        for f in cases:
            with pytest.raises(Exception) as ce:
                f(cddp)
            with pytest.raises(Exception) as te:
                f(torch)
            assert ce.type is te.type, (ce.value, te.value)
            assert str(ce.value)[:40] == str(te.value)[:40], (ce.value, te.value)


# ---- degenerate inputs: a result or a Python exception, never a crash ----------------------


def _edge_cases():
    E, Z, B = cddp.zeros(0, 3), cddp.tensor(2.5), cddp.ones(*([1] * 12))
    i64 = cddp.int64
    return [
        (lambda: E.tril(), (0, 3)), (lambda: E.diagonal(), (0,)), (lambda: cddp.diag_embed(E), (0, 3, 3)),
        (lambda: E.repeat(2, 2), (0, 6)), (lambda: E.repeat_interleave(3, dim=0), (0, 3)),
        (lambda: E.roll(1, 0), (0, 3)), (lambda: E.flip(0), (0, 3)), (lambda: E.cumprod(1), (0, 3)),
        (lambda: cddp.cummax(E, 0)[0], (0, 3)), (lambda: E.nonzero(), (0, 2)),
        (lambda: E.masked_select(E > 0), (0,)), (lambda: cddp.take(E, cddp.zeros(0, dtype=i64)), (0,)),
        (lambda: E.index_add(1, cddp.zeros(0, dtype=i64), cddp.zeros(0, 0)), (0, 3)),
        (lambda: E.scatter_reduce(0, cddp.zeros(0, 3, dtype=i64), E, "prod"), (0, 3)),
        (lambda: cddp.einsum("ij,jk->ik", E, cddp.zeros(3, 0)), (0, 0)),
        (lambda: cddp.unique(E, dim=1, return_inverse=True)[1], (3,)),
        (lambda: cddp.searchsorted(cddp.zeros(0), cddp.ones(3)), (3,)),
        (lambda: cddp.addbmm(cddp.zeros(2, 3), cddp.zeros(0, 2, 4), cddp.zeros(0, 4, 3)), (2, 3)),
        (lambda: Z.repeat_interleave(3), (3,)), (lambda: Z.roll(2), ()), (lambda: Z.cumprod(0), ()),
        (lambda: Z.nonzero(as_tuple=True)[0], (1,)), (lambda: cddp.take(Z, cddp.tensor([0, -1])), (2,)),
        (lambda: Z.index_add(0, cddp.tensor([0]), cddp.tensor(1.0)), ()),
        (lambda: Z.scatter_reduce(0, cddp.tensor([0]), cddp.tensor([3.0]), "sum"), ()),
        (lambda: cddp.einsum(",->", Z, Z), ()), (lambda: cddp.unique(Z), (1,)),
        (lambda: B.movedim(0, -1), (1,) * 12), (lambda: B.flip(tuple(range(12))), (1,) * 12),
        (lambda: F_ce(cddp.ones(2, 3, 0), cddp.zeros(2, 0, dtype=i64)), ()),
        (lambda: B.repeat_interleave(2, dim=0), ValueError), (lambda: cddp.diag_embed(B), ValueError),
        (lambda: B.repeat(*([1] * 13)), ValueError),
        (lambda: cddp.einsum("abcdefghijkl,m->abcdefghijklm", B, cddp.ones(2)), ValueError),
        (lambda: cddp.einsum("i", 3), TypeError), (lambda: cddp.einsum("i"), ValueError),
        (lambda: cddp.einsum("i" * 20, cddp.ones(2)), RuntimeError),
        (lambda: cddp.einsum(".i", cddp.ones(2)), RuntimeError),
        (lambda: cddp.histc(cddp.tensor([1.0, float("inf")])), RuntimeError),
        (lambda: cddp.searchsorted(cddp.tensor([1, 2]), cddp.tensor([1]), sorter=cddp.tensor([5, 0])),
         RuntimeError),
        (lambda: cddp.tensor([1.0]).scatter_reduce(0, cddp.tensor([3]), cddp.tensor([1.0]), "sum"),
         RuntimeError),
        (lambda: cddp.tensor([[1.0, 2.0]])[range(5)], IndexError),
    ]


def F_ce(x, y):
    return cddp.nn.functional.cross_entropy(x, y)


def test_edge_inputs_give_results_or_exceptions():
    for k, (f, want) in enumerate(_edge_cases()):
        if isinstance(want, type):
            with pytest.raises(want):
                f()
        else:
            assert tuple(f().shape) == want, k
