"""Indexing: t[key], t[key] = v, index_select, gather, scatter(_add), masked_fill.

Oracles: NumPy (evaluating each key the way torch does: ints/slices/None as views first, then the
advanced indices on the resulting dims), finite differences (conftest.gradcheck), and torch for
values, gradients and error types when it is installed.
"""
import sys
import zlib

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

# ---- the NumPy oracle ---------------------------------------------------------------------


def _is_int(k):
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _as_np(k):
    """Key element as NumPy sees it (cddp tensors and lists become arrays)."""
    if isinstance(k, cddp.Tensor):
        return n(k)
    if isinstance(k, list):
        a = np.array(k)
        return a.astype(np.int64) if a.size == 0 else a
    return k


def np_index(a, key):
    """a[key] with torch's order of application (equal to NumPy's except that an int separating
    advanced indices is applied first as a view, e.g. y[0, :, [0, 1]] -> (4, 2))."""
    key = key if isinstance(key, tuple) else (key,)
    key = [_as_np(k) for k in key]
    for i, k in enumerate(key):
        if isinstance(k, np.ndarray) and k.ndim == 0:
            key[i] = bool(k) if k.dtype == np.bool_ else int(k)
    consumed = 0
    for k in key:
        if isinstance(k, np.ndarray):
            consumed += k.ndim if k.dtype == np.bool_ else 1
        elif _is_int(k) or isinstance(k, slice):
            consumed += 1
    basic, adv, vd = [], {}, 0
    for k in key:
        if k is Ellipsis:
            basic += [slice(None)] * (a.ndim - consumed)
            vd += a.ndim - consumed
        elif k is None:
            basic.append(None)
            vd += 1
        elif isinstance(k, (bool, np.bool_)):
            basic.append(None)
            adv[vd] = np.zeros(1 if k else 0, dtype=np.int64)
            vd += 1
        elif _is_int(k):
            basic.append(k)
        elif isinstance(k, slice):
            basic.append(k)
            vd += 1
        elif k.dtype == np.bool_:
            for col in np.nonzero(k):
                basic.append(slice(None))
                adv[vd] = col
                vd += 1
        else:
            basic.append(slice(None))
            adv[vd] = k
            vd += 1
    v = a[tuple(basic)]
    if not adv:
        return v
    full = [slice(None)] * v.ndim
    for d, i in adv.items():
        full[d] = i
    return v[tuple(full)]


def _is_basic(key):
    """No advanced element: then torch (and cddp) return a view."""
    for k in (key if isinstance(key, tuple) else (key,)):
        k = _as_np(k)
        if isinstance(k, (bool, np.bool_)) or (isinstance(k, np.ndarray) and
                                                (k.ndim or k.dtype == np.bool_)):
            return False
    return True


def rand_key(rng, shape, allow_adv=True):
    """A random valid key for `shape`: ints, slices (steps, out-of-range bounds), None, ...,
    bools, 0-dim tensors, NumPy ints, int arrays / lists / tensors, bool masks, and mixes."""
    nd = len(shape)
    m = rng.integers(0, nd + 1)              # dims consumed explicitly
    ell = rng.random() < 0.3
    # kinds consume 1 dim each except masks (k dims)
    items, dims = [], []
    d = 0
    while d < m:
        r = rng.random()
        if allow_adv and r < 0.12 and m - d >= 2:
            k = int(rng.integers(1, m - d + 1))
            items.append(("mask", k))
            dims.append(list(range(d, d + k)))
            d += k
        else:
            kinds = ["int", "slice", "slice", "t0"] + (["arr", "list", "tarr", "mask"] if allow_adv else [])
            items.append((kinds[rng.integers(len(kinds))], 1))
            dims.append([d])
            d += 1
    # with an ellipsis, the items after it address the trailing dims
    epos = int(rng.integers(0, len(items) + 1)) if ell else len(items)
    shift = nd - m if ell else 0
    key = []
    for i, ((kind, k), ds) in enumerate(zip(items, dims)):
        if i == epos:
            key.append(Ellipsis)
        ds = [x + (shift if i >= epos else 0) for x in ds]
        size = shape[ds[0]]
        if kind == "int":
            v = int(rng.integers(-size, size)) if size else 0
            if size == 0:
                kind = "slice"
            else:
                key.append(v if rng.random() < 0.8 else np.int64(v))
                continue
        if kind == "t0":
            if size == 0:
                kind = "slice"
            else:
                key.append(cddp.tensor(int(rng.integers(-size, size))))
                continue
        if kind == "slice":
            lo = [None, int(rng.integers(-size - 3, size + 3))][rng.integers(2)]
            hi = [None, int(rng.integers(-size - 3, size + 3))][rng.integers(2)]
            st = [None, 1, 2, 3][rng.integers(4)]
            key.append(slice(lo, hi, st))
        elif kind in ("arr", "list", "tarr"):
            ishape = tuple(rng.integers(1, 3, size=rng.integers(1, 3)))
            arr = rng.integers(-size, size, size=ishape) if size else np.zeros(ishape, np.int64)
            if size == 0:
                key.append(slice(None))
            elif kind == "arr":
                key.append(arr.astype(rng.choice([np.int64, np.int32])))
            elif kind == "list":
                key.append(arr.tolist())
            else:
                key.append(t(arr.astype(np.int64)))
        else:  # mask
            mshape = tuple(shape[x] for x in ds)
            mask = rng.random(mshape) < 0.5
            key.append(mask if rng.random() < 0.5 else t(mask))
    if ell and epos == len(items):
        key.append(Ellipsis)
    # sprinkle None / bools anywhere
    for _ in range(rng.integers(0, 3)):
        pos = int(rng.integers(0, len(key) + 1))
        r = rng.random()
        key.insert(pos, None if (r < 0.7 or not allow_adv) else bool(rng.random() < 0.5))
    return key[0] if len(key) == 1 and rng.random() < 0.5 else tuple(key)


def base_array(rng, shape, layout, dtype=np.float64):
    """An array of `shape` whose memory layout is contiguous, transposed or strided."""
    if layout == "contig":
        return (rng.standard_normal(shape) * 10).astype(dtype)
    if layout == "transposed":
        return np.ascontiguousarray((rng.standard_normal(shape[::-1]) * 10).astype(dtype)).T
    big = (rng.standard_normal(tuple(2 * s + 1 for s in shape)) * 10).astype(dtype)
    return big[tuple(slice(1, None, 2) for _ in shape)]


SHAPES = [(5,), (4, 3), (3, 4, 2), (2, 3, 2, 3), (0, 3), (3, 1)]


def _oracle(a, key):
    try:
        return np_index(a, key), None
    except IndexError as e:
        return None, e


@pytest.mark.parametrize("layout", ["contig", "transposed", "strided"])
@pytest.mark.parametrize("shape", SHAPES)
def test_getitem_random_keys_match_numpy(shape, layout):
    rng = np.random.default_rng(zlib.crc32(repr((shape, layout)).encode()))
    a = base_array(rng, shape, layout)
    x = cddp.from_numpy(a)
    checked = 0
    for _ in range(250):
        key = rand_key(rng, shape)
        want, err = _oracle(a, key)
        if err is not None:      # e.g. index arrays that do not broadcast: both must refuse
            with pytest.raises(IndexError):
                x[key]
            continue
        got = x[key]
        assert got.shape == want.shape, (key, got.shape, want.shape)
        np.testing.assert_array_equal(n(got), want, err_msg=repr(key))
        assert got.dtype == x.dtype
        # basic keys give views of the same memory, advanced keys copies
        if got.numel():
            assert np.shares_memory(got.numpy(), a) == _is_basic(key), key
        checked += 1
    assert checked > 150


@pytest.mark.parametrize("dt", [np.float32, np.int64, np.int32, np.bool_])
def test_getitem_dtypes(dt):
    rng = np.random.default_rng(1)
    a = base_array(rng, (4, 3, 2), "strided").astype(dt)
    x = cddp.from_numpy(a)
    for _ in range(100):
        key = rand_key(rng, a.shape)
        want, err = _oracle(a, key)
        if err is None:
            got = x[key]
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(n(got), want)


def test_getitem_against_torch(torch):
    rng = np.random.default_rng(7)
    for shape in [(4, 3), (3, 4, 5), (2, 3, 2, 2)]:
        a = base_array(rng, shape, "strided")
        x, tx = cddp.from_numpy(a), torch.from_numpy(a.copy())
        for _ in range(150):
            key = rand_key(rng, shape)
            tkey = tuple(torch.from_numpy(np.asarray(_as_np(k))) if isinstance(k, (list, np.ndarray, cddp.Tensor)) else k
                         for k in (key if isinstance(key, tuple) else (key,)))
            try:
                want = tx[tkey].numpy()
            except IndexError:
                with pytest.raises(IndexError):
                    x[key]
                continue
            got = x[key]
            assert tuple(got.shape) == want.shape, key
            np.testing.assert_array_equal(n(got), want)


def test_basic_views_share_memory_and_write_through():
    a = np.arange(24.0).reshape(2, 3, 4)
    x = cddp.from_numpy(a)
    v = x[1, :, ::2]
    assert v.shape == (3, 2) and v.stride() == (4, 2) and v.storage_offset() == 12
    v.numpy()[0, 1] = -5                       # write through the view
    assert a[1, 0, 2] == -5
    w = x[None, ..., 1:3][0, -1]
    assert w.shape == (3, 2) and np.shares_memory(w.numpy(), a)
    x[1][2][3] = 100.0                          # chained views, then setitem
    assert a[1, 2, 3] == 100
    assert x[0, None].stride() == (12, 4, 1)     # torch's unsqueeze stride
    s = x[1, 2, 3]
    assert s.shape == () and s.item() == 100
    e = x[..., 5:]
    assert e.shape == (2, 3, 0)
    # 0-dim tensor / NumPy integer keys act as ints (views)
    assert np.shares_memory(x[cddp.tensor(1), np.int64(2)].numpy(), a)


def test_advanced_results_are_copies():
    a = np.arange(6.0)
    x = cddp.from_numpy(a)
    y = x[[0, 1]]
    y.numpy()[0] = 42
    assert a[0] == 0
    assert x[True].shape == (1, 6) and x[False].shape == (0, 6)
    assert x[cddp.tensor(True)].shape == (1, 6)
    z = cddp.tensor(3.0)
    assert z[None].shape == (1,) and z[...].shape == () and z[True].shape == (1,)
    assert x[[]].shape == (0,)


def test_numpy_placement_rules():
    y = cddp.from_numpy(np.arange(60.0).reshape(3, 4, 5))
    i2 = [[0, 1], [2, 0]]
    assert y[:, i2, [1, 2]].shape == (3, 2, 2)          # adjacent: replace in place
    assert y[i2, :, [1, 2]].shape == (2, 2, 4)          # separated: to the front
    assert y[0, :, [0, 1]].shape == (4, 2)              # torch: ints are views first
    assert y[[0, 1], None, [0, 1]].shape == (2, 1, 5)   # None separates
    lab = cddp.from_numpy(np.array([3, 0, 2]))
    logits = cddp.from_numpy(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(n(logits[cddp.from_numpy(np.arange(3)), lab]), [3, 4, 10])


# ---- errors -------------------------------------------------------------------------------


def test_index_errors():
    x = cddp.from_numpy(np.zeros((3, 4)))
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        x[5]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        x[0, -5]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[:, :, None, 0]
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        cddp.tensor(1.0)[0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        x[::0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    v = cddp.from_numpy(np.zeros(5))
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 5"):
        v[[1, 7]]
    with pytest.raises(IndexError, match="index -6 is out of bounds for dimension 0 with size 5"):
        v[cddp.from_numpy(np.array([-6]))]
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 1 with size 4"):
        x[:, [0, 4]]
    with pytest.raises(IndexError, match=r"The shape of the mask \[3\] at index 0 does not match "
                                         r"the shape of the indexed tensor \[4\] at index 0"):
        cddp.from_numpy(np.zeros(4))[cddp.from_numpy(np.ones(3, bool))]
    with pytest.raises(IndexError, match=r"mask \[3, 3\] at index 1 .* \[3, 4\] at index 1"):
        x[np.ones((3, 3), bool)]
    with pytest.raises(IndexError, match="could not be broadcast together with shapes \\[2\\], \\[3\\]"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="too many indices"):
        x[np.ones((3, 4, 1), bool)]
    msg = r"only integers, slices \(`:`\), ellipsis \(`...`\), None and long or byte Variables"
    for bad in [1.0, "a", {}, object(), [0, slice(None)], np.float64(1.0), b"x", (0, 1.5)]:
        with pytest.raises(IndexError, match=msg):
            x[bad]
    for bad in [cddp.from_numpy(np.array([1.0])), np.array([0.5]), [1.0, 2.0]]:
        with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
            x[bad]
    with pytest.raises(IndexError):
        x[(0,) * 100]
    with pytest.raises(IndexError, match="more than 12 dimensions"):
        x[(None,) * 12]
    with pytest.raises(TypeError, match="slice indices must be integers"):
        x[1.5:]
    with pytest.raises(OverflowError):
        x[2**70]


def test_error_types_match_torch(torch):
    a = np.zeros((3, 4))
    x, tx = cddp.from_numpy(a), torch.from_numpy(a)
    for key in [5, (0, 0, 0), (slice(None, None, -1),), 1.0, {},
                (slice(None), 7), (slice(None, None, 0),)]:
        with pytest.raises(Exception) as want:
            tx[key]
        with pytest.raises(type(want.value)):
            x[key]


# ---- setitem ------------------------------------------------------------------------------


def _np_setitem(a, key, value):
    """NumPy equivalent of a[key] = value under torch's order of application."""
    idx = np.arange(a.size).reshape(a.shape)
    pos = np_index(idx, key)                   # which flat elements the key addresses
    flat = a.reshape(-1)
    flat[pos.reshape(-1)] = np.broadcast_to(value, pos.shape).reshape(-1)


@pytest.mark.parametrize("layout", ["contig", "strided"])
@pytest.mark.parametrize("shape", [(5,), (4, 3), (3, 4, 2), (2, 3, 2, 3)])
def test_setitem_random_keys_match_numpy(shape, layout):
    rng = np.random.default_rng(zlib.crc32(repr((shape, layout, "set")).encode()))
    for _ in range(120):
        a = base_array(rng, shape, layout)
        key = rand_key(rng, shape)
        want, err = _oracle(a, key)
        if err is not None:
            continue
        pos = np_index(np.arange(a.size).reshape(shape), key)
        if np.unique(pos).size != pos.size:     # duplicates: last write wins, tested below
            continue
        kind = rng.integers(3)
        if kind == 0:
            value, npval = 2.5, 2.5
        elif kind == 1:                          # broadcast from a trailing shape
            vshape = want.shape[rng.integers(0, len(want.shape) + 1):]
            npval = rng.standard_normal(vshape)
            value = t(npval)
        else:                                    # other dtype, leading 1s
            npval = rng.integers(-9, 9, size=(1,) + want.shape)
            value = t(npval)
        expect = np.array(a, copy=True)
        _np_setitem(expect, key, npval[0] if kind == 2 else npval)
        x = cddp.from_numpy(a)
        v0 = x._version
        x[key] = value
        np.testing.assert_array_equal(a, expect, err_msg=repr(key))
        assert x._version > v0 or want.size == 0


def test_setitem_semantics():
    a = np.zeros(5)
    x = cddp.from_numpy(a)
    x[[0, 0, 1]] = cddp.tensor([1.0, 2.0, 3.0], dtype=cddp.float64)   # last write wins
    np.testing.assert_array_equal(a, [2, 3, 0, 0, 0])
    x[np.array([True, False, True, False, True])] = -1
    np.testing.assert_array_equal(a, [-1, 3, -1, 0, -1])
    x[cddp.from_numpy(a > 0)] = cddp.tensor(7.0)
    np.testing.assert_array_equal(a, [-1, 7, -1, 0, -1])
    x[...] = True
    np.testing.assert_array_equal(a, [1, 1, 1, 1, 1])
    b = np.arange(12).reshape(3, 4)
    y = cddp.from_numpy(b)
    y[0] = cddp.tensor([[1.9, 2.9, 3.9, 4.9]])    # leading 1 stripped, float -> int64
    y[1:, [0, 3]] = cddp.tensor([[-1], [-2]])
    y[2, 1] = np.int64(99)
    np.testing.assert_array_equal(b, [[1, 2, 3, 4], [-1, 5, 6, -1], [-2, 99, 10, -2]])
    big = cddp.from_numpy(np.zeros(2, dtype=np.int64))
    big[0] = 2**62 + 1                             # ints reach int64 targets exactly
    assert big[0].item() == 2**62 + 1
    c = np.arange(6.0)
    z = cddp.from_numpy(c)
    z[1:] = z[:-1]                                 # overlapping source is read first
    np.testing.assert_array_equal(c, [0, 0, 1, 2, 3, 4])
    z[[1, 2]] = z[[0, 0]]
    np.testing.assert_array_equal(c[:3], [0, 0, 0])


def test_setitem_errors():
    x = cddp.from_numpy(np.zeros((3, 4)))
    with pytest.raises(TypeError, match="can't assign a list"):
        x[0] = [1, 2, 3, 4]
    with pytest.raises(TypeError, match="can't assign a str"):
        x[0] = "a"
    with pytest.raises(TypeError, match="can't assign a NoneType"):
        x[0] = None
    with pytest.raises(RuntimeError, match="expanded size|must match"):
        x[0] = cddp.from_numpy(np.ones((2, 4)))
    with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \[3\] cannot "
                                           r"be broadcast to indexing result of shape \[6\]"):
        x[cddp.from_numpy(np.arange(12).reshape(3, 4) > 5)] = cddp.from_numpy(np.ones(3))
    with pytest.raises(IndexError, match="only integers"):
        x[1.0] = 1
    with pytest.raises(IndexError, match="out of bounds"):
        x[[0, 9]] = 1.0
    with pytest.raises(TypeError, match="does not support item deletion"):
        del x[0]
    w = t(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in "
                                           "an in-place operation."):
        w[0] = 2.0
    with cddp.no_grad():
        w[0] = 2.0                                # allowed without grad mode, as in torch
    assert n(w)[0] == 2.0


# ---- autograd -----------------------------------------------------------------------------


def _rng_array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("key", [
    1, -1, (slice(1, None, 2),), (None, Ellipsis, 0), (slice(None), 2), (Ellipsis, slice(0, 2)),
    (0, slice(None), None), ([1, 1, 0],), ([0, 2, 2], [1, 1, 3]), (slice(None), [3, 0, 3]),
    ([[0], [2]], slice(1, 3), [0, 0]), "mask", "mask2", (True,), (1, [0, 0, 0]),
])
def test_getitem_gradcheck(key):
    a = _rng_array((3, 4, 2))
    if key == "mask":
        key = np.array([True, False, True])
    elif key == "mask2":
        key = (slice(None), np.arange(8).reshape(4, 2) % 3 == 0)
    gradcheck(lambda x: x[key], a)


def test_duplicate_indices_accumulate():
    x = t(np.arange(4.0), requires_grad=True)
    y = x[[0, 0, 3, 0]]
    y.backward(t(np.array([1.0, 2.0, 3.0, 4.0])))
    np.testing.assert_array_equal(n(x.grad), [7, 0, 0, 3])
    assert y.grad_fn.name() == "IndexBackward0"


def test_view_backward_through_noncontiguous_input():
    base = np.arange(24.0).reshape(4, 6)
    x = cddp.from_numpy(base[:, ::2])             # a strided leaf
    x.requires_grad_(True)
    y = x[1:, 1][None]
    y.backward(t(np.array([[1.0, 2.0, 3.0]])))
    want = np.zeros((4, 3))
    want[1:, 1] = [1, 2, 3]
    np.testing.assert_array_equal(n(x.grad), want)


def test_node_names_match_torch(torch):
    a = _rng_array((3, 4))
    for key in [(0,), (slice(1, None),), (0, slice(1, None)), (None, 1), (Ellipsis,), (slice(None), 0),
                (0, Ellipsis), ([0, 1],), (True,), (cddp.tensor(1),), (slice(None),)]:
        x = t(a, requires_grad=True)
        tx = torch.tensor(a, requires_grad=True)
        tkey = tuple(torch.tensor(1) if isinstance(k, cddp.Tensor) else k for k in key)
        assert x[key].grad_fn.name() == type(tx[tkey].grad_fn).__name__, key


def test_getitem_values_and_grads_against_torch(torch):
    rng = np.random.default_rng(11)
    for shape in [(4, 3), (3, 4, 2)]:
        a = rng.standard_normal(shape).astype(np.float32)
        for _ in range(60):
            key = rand_key(rng, shape)
            if _oracle(a, key)[1] is not None:
                continue
            tkey = tuple(torch.from_numpy(np.asarray(_as_np(k))) if isinstance(k, (list, np.ndarray, cddp.Tensor)) else k
                         for k in (key if isinstance(key, tuple) else (key,)))
            x = t(a, requires_grad=True)
            tx = torch.tensor(a, requires_grad=True)
            y, ty = x[key], tx[tkey]
            w = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
            y.backward(t(w))
            ty.backward(torch.from_numpy(w))
            np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-6)
            np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def _copy(x):
    """A differentiable copy (non-leaf) from this file's own ops."""
    return x.index_select(0, cddp.from_numpy(np.arange(x.shape[0])))


@pytest.mark.parametrize("key,vshape", [
    ((1,), (4,)), ((slice(0, 2), 1), (2,)), ((Ellipsis, 0), (1, 3)), (([0, 2],), (2, 4)),
    ((slice(None), [1, 3]), (3, 2)), ("mask", (1,)),
])
# (duplicate indices are left to the torch test: like torch's index_put backward, every write
# position hands its gradient to `value`, although only the last write survives)
def test_setitem_gradcheck(key, vshape):
    a, v = _rng_array((3, 4)), _rng_array(vshape, 1)

    def op(x, val):
        y = _copy(x)
        k = cddp.from_numpy(np.arange(12).reshape(3, 4) % 5 == 0) if key == "mask" else key
        y[k] = val
        return y

    gradcheck(op, a, v)


def test_setitem_autograd_against_torch(torch):
    a = _rng_array((3, 4)).astype(np.float32)
    v = _rng_array((2,), 1).astype(np.float64)     # another dtype: grad comes back as float64
    w = _rng_array((3, 4), 2).astype(np.float32)
    for key in [(slice(None, 2), 1), ([0, 0], 2), (slice(None), [3, 3])]:
        x, val = t(a, requires_grad=True), t(v, requires_grad=True)
        y = _copy(x)
        y[key] = val
        assert y.grad_fn.name() == ("CopySlices" if isinstance(key[0], slice) and isinstance(key[1], int)
                                    else "IndexPutBackward0")
        y.backward(t(w))
        tx, tv = torch.tensor(a, requires_grad=True), torch.tensor(v, requires_grad=True)
        ty = tx.clone()
        ty[key] = tv.float()
        ty.backward(torch.from_numpy(w))
        np.testing.assert_allclose(n(y), ty.detach().numpy())
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy())
        np.testing.assert_allclose(n(val.grad), tv.grad.numpy(), rtol=1e-6)
        assert val.grad.dtype == cddp.float64


def test_setitem_on_leaf_without_grad_gets_history():
    x = t(np.zeros(3))
    v = t(np.array(2.0), requires_grad=True)
    x[1] = v
    assert not x.is_leaf and x.requires_grad
    x.backward(t(np.array([1.0, 5.0, 1.0])))
    assert v.grad.item() == 5.0


# ---- index_select / gather / scatter / masked_fill ----------------------------------------


def test_index_select_values():
    a = base_array(np.random.default_rng(0), (4, 5, 3), "strided")
    x = cddp.from_numpy(a)
    for dim in range(-3, 3):
        idx = np.array([0, -1, 2, 2])
        for i in (cddp.from_numpy(idx), cddp.from_numpy(idx.astype(np.int32))):
            np.testing.assert_array_equal(n(x.index_select(dim, i)), np.take(a, idx, axis=dim))
            np.testing.assert_array_equal(n(cddp.index_select(x, dim, i)), np.take(a, idx, axis=dim))
    assert x.index_select(1, cddp.tensor(2)).shape == (4, 1, 3)
    assert x.index_select(0, cddp.from_numpy(np.zeros(0, np.int64))).shape == (0, 5, 3)
    assert cddp.tensor(5.0).index_select(0, cddp.tensor([0])).item() == 5.0
    assert x.index_select(dim=2, index=cddp.tensor([1])).shape == (4, 5, 1)


def test_gather_values():
    rng = np.random.default_rng(3)
    a = base_array(rng, (4, 5, 3), "transposed")
    x = cddp.from_numpy(a)
    for dim in range(3):
        ishape = list(a.shape)
        ishape[dim] = 6
        ishape = [min(s, 2) if d != dim else s for d, s in enumerate(ishape)]
        idx = rng.integers(-a.shape[dim], a.shape[dim], size=ishape)
        want = np.take_along_axis(a[tuple(slice(0, s) if d != dim else slice(None)
                                          for d, s in enumerate(ishape))], idx % a.shape[dim], dim)
        np.testing.assert_array_equal(n(x.gather(dim, t(idx))), want)
        np.testing.assert_array_equal(n(cddp.gather(x, dim, t(idx.astype(np.int32)))), want)


def test_scatter_values():
    a = np.zeros((3, 4))
    idx = np.array([[0, 1, 2, 0], [2, 0, 0, 1]])
    src = np.arange(1.0, 13.0).reshape(3, 4)
    x = cddp.from_numpy(a)
    got = x.scatter(0, t(idx), t(src))
    want = np.zeros((3, 4))
    for i in range(2):
        for j in range(4):
            want[idx[i, j], j] = src[i, j]
    np.testing.assert_array_equal(n(got), want)
    assert not a.any()
    got = cddp.scatter_add(x, 0, t(idx), t(src))
    want = np.zeros((3, 4))
    np.add.at(want, (idx, np.arange(4)[None].repeat(2, 0)), src[:2])
    np.testing.assert_array_equal(n(got), want)
    x.scatter_(1, t(np.array([[3], [0], [1]])), 9.0)
    np.testing.assert_array_equal(a, [[0, 0, 0, 9], [9, 0, 0, 0], [0, 9, 0, 0]])
    x.scatter_add_(1, t(np.array([[3, 3]])), t(np.array([[1.0, 2.0]])))
    assert a[0, 3] == 12
    x.scatter_(0, t(np.array([[1]])), value=-1.0)
    assert a[1, 0] == -1


def test_masked_fill_values():
    a = base_array(np.random.default_rng(4), (3, 4), "strided")
    m = np.random.default_rng(5).random((3, 4)) < 0.5
    x = cddp.from_numpy(a)
    np.testing.assert_array_equal(n(x.masked_fill(t(m), -1.0)), np.where(m, -1.0, a))
    np.testing.assert_array_equal(n(cddp.masked_fill(x, t(m[0]), cddp.tensor(2))), np.where(m[0], 2.0, a))
    got = x.masked_fill(t(np.ones((2, 3, 4), bool)), 0.0)        # broadcasts to (2, 3, 4)
    assert got.shape == (2, 3, 4)
    i = cddp.from_numpy(np.arange(4))
    np.testing.assert_array_equal(n(i.masked_fill(t(np.array([True, False] * 2)), 1.7)), [1, 1, 1, 3])
    assert x.masked_fill_(t(m), 5.0) is x
    np.testing.assert_array_equal(a[m], 5.0)


def test_named_op_errors():
    x = cddp.from_numpy(np.zeros((3, 4)))
    i = cddp.tensor([1])
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, cddp.tensor([5]))
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        x.index_select(0, cddp.tensor([[1]]))
    with pytest.raises(RuntimeError, match="Expected dtype int32 or int64 for index"):
        x.index_select(0, cddp.tensor([1.0]))
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.index_select(2, i)
    with pytest.raises(TypeError, match="must be Tensor"):
        x.index_select(0, [1])
    with pytest.raises(TypeError, match="missing required argument 'index'"):
        x.index_select(0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        x.gather(0, i, foo=1)
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 0 with size 3"):
        x.gather(0, cddp.tensor([[5]]))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(0, i)
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        x.gather(0, cddp.tensor([[1.0]]))
    with pytest.raises(RuntimeError, match=r"Size does not match at dimension 1 expected index \[1, 5\]"):
        x.gather(0, cddp.from_numpy(np.zeros((1, 5), np.int64)))
    with pytest.raises(RuntimeError, match="no larger size than src"):
        x.scatter(0, cddp.from_numpy(np.zeros((2, 2), np.int64)), cddp.from_numpy(np.ones((1, 2))))
    with pytest.raises(RuntimeError, match="self.dtype to be equal to src.dtype"):
        x.scatter(0, cddp.tensor([[0]]), cddp.tensor([[1.0]]))
    with pytest.raises(RuntimeError, match="index 3 is out of bounds"):
        x.scatter_(0, cddp.tensor([[3]]), 1.0)
    with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
        x.scatter_(0, cddp.tensor([[0]]), 1.0, reduce="mean")
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        x.masked_fill(cddp.from_numpy(np.ones(4)), 1.0)
    with pytest.raises(RuntimeError, match="only supports a 0-dimensional value tensor"):
        x.masked_fill(cddp.tensor([True] * 4), cddp.from_numpy(np.ones(1)))
    with pytest.raises(TypeError, match="must be Number or Tensor"):
        x.masked_fill(cddp.tensor([True] * 4), "a")
    with pytest.raises(RuntimeError, match=r"output with shape \[3, 4\] doesn't match the broadcast"):
        x.masked_fill_(cddp.from_numpy(np.ones((2, 3, 4), bool)), 1.0)
    w = t(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w.masked_fill_(cddp.tensor([True, False, True]), 0.0)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w.scatter_(0, cddp.tensor([0]), 0.0)


def test_named_ops_gradcheck():
    a = _rng_array((3, 4))
    idx = t(np.array([2, 0, 2, 2]))
    gradcheck(lambda x: x.index_select(0, idx), a)
    gradcheck(lambda x: cddp.index_select(x, 1, idx), a)
    gi = t(np.array([[0, 0, 2, 1], [2, 2, 2, 0]]))
    gradcheck(lambda x: x.gather(0, gi), a)
    gradcheck(lambda x: cddp.gather(x, 1, t(np.array([[3, 3], [0, 0], [1, 3]]))), a)
    m = t(np.random.default_rng(0).random((3, 4)) < 0.5)
    gradcheck(lambda x: x.masked_fill(m, 0.5), a)
    gradcheck(lambda x: x.masked_fill(m[0], 0.5), _rng_array((2, 3, 4)))
    gradcheck(lambda x: x.masked_fill(t(np.ones((2, 1, 4), bool)), 0.5), _rng_array((3, 1)))
    gradcheck(lambda x, v: x.masked_fill(m, v), a, np.array(0.3))
    si = t(np.array([[0, 1, 2, 0], [1, 0, 0, 2]]))
    gradcheck(lambda x, s: x.scatter(0, si, s), a, _rng_array((3, 4), 1))
    gradcheck(lambda x, s: x.scatter_add(0, si, s), a, _rng_array((2, 5), 1))
    gradcheck(lambda x: x.scatter(0, si, 2.0), a)

    def inplace(x, v):
        y = _copy(x)
        y.masked_fill_(m, v)
        return y

    gradcheck(inplace, a, np.array(1.5))


def test_named_ops_against_torch(torch):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    gi = np.array([[0, 0, 2, 1], [2, 2, 2, 0], [1, 1, 1, 1]])
    mask = rng.random((3, 4)) < 0.5
    cases = [
        (lambda x, T: x.gather(0, T(gi)), "GatherBackward0"),
        (lambda x, T: x.index_select(1, T(np.array([3, 3, 0, 1]))), "IndexSelectBackward0"),
        (lambda x, T: x.masked_fill(T(mask), 2.0), "MaskedFillBackward0"),
        (lambda x, T: x.scatter(1, T(gi[:, :2] + 1), 3.0), "ScatterBackward1"),
    ]
    for f, name in cases:
        x = t(a, requires_grad=True)
        tx = torch.tensor(a, requires_grad=True)
        y, ty = f(x, t), f(tx, torch.from_numpy)
        assert y.grad_fn.name() == name == type(ty.grad_fn).__name__
        y.backward(t(w))
        ty.backward(torch.from_numpy(w))
        np.testing.assert_allclose(n(y), ty.detach().numpy())
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-6)
    # scatter_add with a src that requires grad
    x, s = t(a, requires_grad=True), t(w[:2], requires_grad=True)
    tx, ts = torch.tensor(a, requires_grad=True), torch.tensor(w[:2], requires_grad=True)
    y, ty = x.scatter_add(0, t(gi[:2]), s), tx.scatter_add(0, torch.from_numpy(gi[:2]), ts)
    y.backward(t(w))
    ty.backward(torch.from_numpy(w))
    np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy())
    np.testing.assert_allclose(n(s.grad), ts.grad.numpy())


def test_saved_mask_modified_in_place_is_detected():
    x = t(np.ones(3), requires_grad=True)
    m = t(np.array([True, False, True]))
    y = x.masked_fill(m, 0.0)
    m[0] = False
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(t(np.ones(3)))


def test_no_reference_leaks():
    x = cddp.from_numpy(np.zeros((4, 5)))
    key_list = [0, 1, 3]
    key_t = cddp.from_numpy(np.array([1, 2]))
    mask = cddp.from_numpy(np.ones(5, bool))
    before = [sys.getrefcount(o) for o in (key_list, key_t, mask, x)]
    for _ in range(50):
        x[key_list, 1:]
        x[:, key_t]
        x[1, mask]
        x[key_list] = 1.0
        try:
            x[key_list, [0, 1]]
        except IndexError:
            pass
    assert [sys.getrefcount(o) for o in (key_list, key_t, mask, x)] == before


def test_index_put():
    a = np.zeros((3, 4))
    x = cddp.from_numpy(a)
    i = t(np.array([0, 2, 0]))
    v = t(np.array([1.0, 2.0, 3.0]))
    assert x.index_put_((i, t(np.array([1, 1, 1]))), v, accumulate=True) is x
    want = np.zeros((3, 4))
    np.add.at(want, (np.array([0, 2, 0]), 1), [1, 2, 3])
    np.testing.assert_array_equal(a, want)
    y = cddp.index_put(x, [i], t(np.array([5.0])))          # list of indices, broadcast value
    assert y is not x and not np.shares_memory(y.numpy(), a)
    np.testing.assert_array_equal(n(y)[[0, 2]], 5.0)
    x.index_put_((None, t(np.array([3]))), t(np.array([-1.0])))   # None: the whole dim
    np.testing.assert_array_equal(a[:, 3], -1)
    x.index_put_((t(np.array([True, False, True])),), t(np.array(9.0)), accumulate=True)
    np.testing.assert_array_equal(a[1], [0, 0, 0, -1])
    assert (a[0] >= 8).all()
    with pytest.raises(RuntimeError, match="source and destination dtypes match"):
        x.index_put_((i,), t(np.array([1.0], np.float32)))
    with pytest.raises(TypeError, match="must be tuple of Tensors"):
        x.index_put_(i, v)
    with pytest.raises(TypeError, match="expected Tensor as element 0"):
        x.index_put_(([0],), v)
    with pytest.raises(TypeError, match="'values' must be Tensor"):
        x.index_put_((i,), 1.0)


@pytest.mark.parametrize("acc", [False, True])
def test_index_put_autograd_against_torch(torch, acc):
    a = _rng_array((4, 3)).astype(np.float32)
    v = _rng_array((3, 3), 1).astype(np.float32)
    w = _rng_array((4, 3), 2).astype(np.float32)
    idx = np.array([1, 3, 1])
    x, val = t(a, requires_grad=True), t(v, requires_grad=True)
    y = x.index_put((t(idx),), val, accumulate=acc)
    tx, tv = torch.tensor(a, requires_grad=True), torch.tensor(v, requires_grad=True)
    ty = tx.index_put((torch.from_numpy(idx),), tv, accumulate=acc)
    assert y.grad_fn.name() == type(ty.grad_fn).__name__ == "IndexPutBackward0"
    y.backward(t(w))
    ty.backward(torch.from_numpy(w))
    if acc:                                       # without accumulate duplicates are unordered
        np.testing.assert_allclose(n(y), ty.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy())
    np.testing.assert_allclose(n(val.grad), tv.grad.numpy())
    if acc:
        gradcheck(lambda x, v: x.index_put((t(idx),), v, accumulate=True), a, v)


def test_backward_on_noncontiguous_leaves_against_torch(torch):
    rng = np.random.default_rng(21)
    base = rng.standard_normal((5, 8))
    gi = t(np.array([[0, 3], [2, 2], [1, 0]]))
    cases = [
        lambda x, T: x[T(np.array([2, 2, 0])), 1:],
        lambda x, T: x[:, T(np.array([1, 3]))],
        lambda x, T: x[T(np.array([[True, False, True, True]] * 4))],
        lambda x, T: x.gather(1, T(n(gi))),
        lambda x, T: x.index_select(1, T(np.array([3, 0, 3]))),
        lambda x, T: x.masked_fill(T(np.arange(4) % 2 == 0), 1.0),
    ]
    for f in cases:
        view = base[:4, ::2].T                       # (4, 4), strided and transposed
        x = cddp.from_numpy(view).requires_grad_()
        tx = torch.from_numpy(view.copy()).requires_grad_()
        y, ty = f(x, t), f(tx, torch.from_numpy)
        w = rng.standard_normal(tuple(ty.shape))
        y.backward(t(w))
        ty.backward(torch.from_numpy(w))
        np.testing.assert_allclose(n(y), ty.detach().numpy())
        np.testing.assert_allclose(n(x.grad), tx.grad.numpy())
