"""Shape ops (views), conversions (contiguous/clone/to/...), cat/stack, iteration, device policy.

Oracles: NumPy for values (contiguous, strided and empty inputs), central finite differences
for every backward (conftest.gradcheck), torch for values, gradients and error wording.
"""
import os
import subprocess
import tempfile
import sys
import warnings

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

rng = np.random.default_rng(1234)


def arr(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def strided(a):
    """A cddp tensor over a non-contiguous NumPy view holding the values of `a`."""
    big = np.zeros(a.shape + (2,), dtype=a.dtype)
    big[..., 0] = a
    v = big[..., 0]
    x = cddp.from_numpy(v)
    assert not x.is_contiguous() or a.size <= 1
    return x


def transposed(a):
    """A cddp tensor over the transpose of a C-ordered copy of a.T (same values as a)."""
    base = np.ascontiguousarray(a.T)
    return cddp.from_numpy(base.T)


LAYOUTS = {"contig": t, "strided": strided, "transposed": transposed}


def viewable(a, shape):
    """NumPy's own no-copy reshape rule (setting .shape never copies)."""
    v = a.view()
    try:
        v.shape = shape
    except AttributeError:
        return False
    return True


def shares_memory(x, y):
    return np.shares_memory(x.detach().numpy(), y.detach().numpy())


# ---- NumPy oracle: view ops over shapes and layouts ----------------------------------------

VIEW_CASES = [
    # (name, shape, cddp op, numpy op)
    ("view", (2, 3, 4), lambda x: x.view(6, 4), lambda a: a.reshape(6, 4)),
    ("view-1", (2, 3, 4), lambda x: x.view(-1, 2), lambda a: a.reshape(-1, 2)),
    ("view_tuple", (2, 3, 4), lambda x: x.view((4, -1)), lambda a: a.reshape(4, -1)),
    ("view_0d", (), lambda x: x.view(1, 1), lambda a: a.reshape(1, 1)),
    ("view_to0d", (1, 1), lambda x: x.view(()), lambda a: a.reshape(())),
    ("view_empty", (0, 3), lambda x: x.view(3, 0, 1), lambda a: a.reshape(3, 0, 1)),
    ("reshape", (2, 3, 4), lambda x: x.reshape(4, 3, 2), lambda a: a.reshape(4, 3, 2)),
    ("reshape-1", (2, 3, 4), lambda x: x.reshape(-1), lambda a: a.reshape(-1)),
    ("reshape_fn", (2, 3, 4), lambda x: cddp.reshape(x, (3, -1)), lambda a: a.reshape(3, -1)),
    ("flatten", (2, 3, 4), lambda x: x.flatten(), lambda a: a.reshape(-1)),
    ("flatten12", (2, 3, 4), lambda x: x.flatten(1), lambda a: a.reshape(2, 12)),
    ("flatten01", (2, 3, 4), lambda x: cddp.flatten(x, 0, -2), lambda a: a.reshape(6, 4)),
    ("flatten_0d", (), lambda x: x.flatten(), lambda a: a.reshape(1)),
    ("unflatten", (2, 12), lambda x: x.unflatten(1, (3, -1)), lambda a: a.reshape(2, 3, 4)),
    ("squeeze", (1, 3, 1, 4), lambda x: x.squeeze(), lambda a: a.squeeze()),
    ("squeeze_dim", (1, 3, 1, 4), lambda x: x.squeeze(-2), lambda a: a.squeeze(-2)),
    ("squeeze_noop", (1, 3, 1, 4), lambda x: x.squeeze(1), lambda a: a),
    ("squeeze_tuple", (1, 3, 1, 4), lambda x: cddp.squeeze(x, (0, 2)), lambda a: a.squeeze((0, 2))),
    ("unsqueeze0", (3, 4), lambda x: x.unsqueeze(0), lambda a: a[None]),
    ("unsqueeze_end", (3, 4), lambda x: x.unsqueeze(-1), lambda a: a[..., None]),
    ("unsqueeze_mid", (3, 4), lambda x: cddp.unsqueeze(x, 1), lambda a: a[:, None]),
    ("unsqueeze_0d", (), lambda x: x.unsqueeze(0), lambda a: a.reshape(1)),
    ("expand", (3, 1), lambda x: x.expand(2, 3, 4), lambda a: np.broadcast_to(a, (2, 3, 4))),
    ("expand-1", (3, 1), lambda x: x.expand(-1, 5), lambda a: np.broadcast_to(a, (3, 5))),
    ("expand_as", (1, 4), lambda x: x.expand_as(t(np.zeros((3, 4)))), lambda a: np.broadcast_to(a, (3, 4))),
    ("expand_0d", (), lambda x: x.expand(2, 2), lambda a: np.broadcast_to(a, (2, 2))),
    ("transpose", (2, 3, 4), lambda x: x.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("transpose_neg", (2, 3, 4), lambda x: cddp.transpose(x, -1, -2), lambda a: a.swapaxes(-1, -2)),
    ("swapaxes", (2, 3, 4), lambda x: x.swapaxes(0, 1), lambda a: a.swapaxes(0, 1)),
    ("t", (3, 4), lambda x: x.t(), lambda a: a.T),
    ("t_fn", (3, 4), lambda x: cddp.t(x), lambda a: a.T),
    ("t_1d", (4,), lambda x: x.t(), lambda a: a),
    ("permute", (2, 3, 4), lambda x: x.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("permute_neg", (2, 3, 4), lambda x: cddp.permute(x, (-1, 1, 0)), lambda a: a.transpose(2, 1, 0)),
    ("narrow", (4, 5), lambda x: x.narrow(1, 1, 3), lambda a: a[:, 1:4]),
    ("narrow_neg", (4, 5), lambda x: cddp.narrow(x, 0, -2, 2), lambda a: a[2:4]),
    ("narrow_empty", (4, 5), lambda x: x.narrow(1, 5, 0), lambda a: a[:, 5:5]),
    ("select", (3, 4, 2), lambda x: x.select(1, 2), lambda a: a[:, 2]),
    ("select_neg", (3, 4, 2), lambda x: cddp.select(x, -1, -1), lambda a: a[..., -1]),
]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name,shape,op,ref", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_view_ops_match_numpy(name, shape, op, ref, layout):
    if layout != "contig" and len(shape) < 1:
        pytest.skip("0-d tensors have one layout")
    for dt in (np.float32, np.int64):
        a = arr(*shape).astype(dt) if dt != np.int64 else rng.integers(-9, 9, shape).astype(dt)
        x = LAYOUTS[layout](a)
        want = ref(a)
        if name.startswith("view") and not viewable(x.numpy(), want.shape):
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                op(x)
            continue
        y = op(x)
        assert tuple(y.shape) == want.shape, (name, layout)
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(n(y), want)


@pytest.mark.parametrize("name,shape,op,ref", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_views_share_storage(name, shape, op, ref):
    a = arr(*shape)
    x = t(a)
    y = op(x)
    if name == "flatten_0d" or y.numel() == 0:
        return
    if y is x:
        return
    assert y._version == x._version
    # write through the view's memory: the base sees it (expanded views are read-only in
    # NumPy, so write through the base instead and read back through the view)
    xv = x.numpy()
    xv[...] = np.arange(xv.size, dtype=xv.dtype).reshape(xv.shape) + 100
    np.testing.assert_array_equal(n(y), ref(xv))
    if name.startswith("expand"):
        return
    yv = y.numpy()
    yv[...] = -np.arange(yv.size, dtype=yv.dtype).reshape(yv.shape) - 1
    np.testing.assert_array_equal(ref(x.numpy()), yv)


def test_version_counter_shared_by_views():
    x = t(arr(2, 3, 4))
    v = x.transpose(0, 1)
    w = x.view(-1)
    before = x._version
    # cat(out=) is an in-place write into `v`: every alias sees the bump
    cddp.cat([t(arr(3, 2, 4))], out=v)
    assert v._version == x._version == w._version == before + 1


def test_reshape_copies_only_when_it_must():
    a = arr(2, 3, 4)
    x = t(a)
    assert shares_memory(x.reshape(6, 4), x)
    xt = x.transpose(0, 1)
    r = xt.reshape(-1)
    assert not shares_memory(r, x) and r.is_contiguous()
    np.testing.assert_array_equal(n(r), a.swapaxes(0, 1).reshape(-1))
    # strided but still viewable: splitting a dim of a transposed tensor
    v = xt.view(3, 2, 2, 2)
    assert shares_memory(v, x)
    np.testing.assert_array_equal(n(v), a.swapaxes(0, 1).reshape(3, 2, 2, 2))
    # size-1 dims never break viewability
    y = cddp.from_numpy(np.zeros((4, 1, 6))[:, :, ::2])
    assert shares_memory(y.view(4, 3), y)


def test_view_error_messages():
    x = t(arr(2, 3, 4))
    with pytest.raises(RuntimeError, match=r"view size is not compatible with input tensor's "
                       r"size and stride \(at least one dimension spans across two contiguous "
                       r"subspaces\). Use \.reshape\(\.\.\.\) instead\."):
        x.transpose(0, 1).view(-1)
    with pytest.raises(RuntimeError, match=r"shape '\[-1, 5\]' is invalid for input of size 24"):
        x.view(-1, 5)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        x.view(-1, -1)
    with pytest.raises(RuntimeError, match=r"invalid shape dimension -2"):
        x.reshape(-2, 12)
    with pytest.raises(RuntimeError, match="ambiguous"):
        t(np.zeros((0, 3))).view(0, -1)
    with pytest.raises(TypeError, match="float"):
        x.view(2.0, 12)
    with pytest.raises(RuntimeError, match="flatten"):
        x.flatten(2, 1)
    with pytest.raises(RuntimeError, match=r"unflatten: Provided sizes \[2, 2\]"):
        x.unflatten(1, (2, 2))


def test_shape_op_errors():
    x = t(arr(2, 3, 4))
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of "
                       r"\[-4, 3\], but got 4\)"):
        x.unsqueeze(4)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.squeeze(3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.transpose(0, 3)
    with pytest.raises(RuntimeError, match=r"t\(\) expects a tensor with <= 2 dimensions, but "
                       r"self is 3D"):
        x.t()
    with pytest.raises(RuntimeError, match=r"permute\(\): duplicate dims are not allowed\."):
        x.permute(0, 0, 1)
    with pytest.raises(RuntimeError, match="does not match the length"):
        x.permute(0, 1)
    with pytest.raises(RuntimeError, match=r"the number of sizes provided \(2\) must be greater "
                       r"or equal to the number of dimensions in the tensor \(3\)"):
        x.expand(3, 4)
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(4\) must match "
                       r"the existing size \(3\) at non-singleton dimension 1"):
        x.expand(2, 4, 4)
    with pytest.raises(RuntimeError, match="leading, non-existing dimension 0"):
        x.expand(-1, 2, 3, 4)
    with pytest.raises(IndexError, match=r"start out of range \(expected to be in range of "
                       r"\[-3, 3\], but got 4\)"):
        x.narrow(1, 4, 1)
    with pytest.raises(RuntimeError, match=r"start \(2\) \+ length \(2\) exceeds dimension "
                       r"size \(3\)\."):
        x.narrow(1, 2, 2)
    with pytest.raises(RuntimeError, match="length must be non-negative"):
        x.narrow(1, 0, -1)
    with pytest.raises(IndexError, match=r"select\(\): index 3 out of range for tensor of size "
                       r"\[2, 3, 4\] at dimension 1"):
        x.select(1, 3)
    with pytest.raises(RuntimeError, match="split_sizes to sum exactly to 4"):
        x.split([1, 2], 2)
    with pytest.raises(RuntimeError, match="chunk expects `chunks` to be greater than 0"):
        x.chunk(0)
    with pytest.raises(TypeError, match="must be Tensor"):
        cddp.reshape([1, 2], (2,))
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.flatten(start=0)
    with pytest.raises(TypeError, match="dim"):
        x.unsqueeze("a")


def test_torch_error_wording_matches(torch):
    a = arr(2, 3, 4)
    cases = [
        lambda m, x: x.transpose(0, 1).view(-1),
        lambda m, x: x.view(-1, 5),
        lambda m, x: x.view(-1, -1),
        lambda m, x: x.t(),
        lambda m, x: x.permute(0, 0, 1),
        lambda m, x: x.unsqueeze(4),
        lambda m, x: x.narrow(1, 2, 2),
        lambda m, x: x.narrow(1, 4, 1),
        lambda m, x: x.select(1, 3),
        lambda m, x: x.flatten(2, 1),
        lambda m, x: x.unflatten(1, (2, 2)),
        lambda m, x: x.split([1, 2], 2),
        lambda m, x: m.cat([x, x.select(0, 0)], 1),
        lambda m, x: m.cat([x, x.transpose(1, 2)], 0),
        lambda m, x: m.cat([m.tensor(1.0)]),
        lambda m, x: m.stack([x, x.transpose(1, 2)]),
        lambda m, x: m.stack([]),
    ]
    for i, f in enumerate(cases):
        with pytest.raises(Exception) as te:
            f(torch, torch.from_numpy(a.copy()))
        with pytest.raises(Exception) as ce:
            f(cddp, t(a))
        assert type(ce.value) is type(te.value), (i, te.value, ce.value)
        assert str(ce.value) == str(te.value), i


# ---- split / chunk / unbind / iteration ---------------------------------------------------

@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_split_chunk_unbind_match_numpy(layout):
    a = arr(4, 7)
    x = LAYOUTS[layout](a)
    parts = x.split(3, 1)
    assert [tuple(p.shape) for p in parts] == [(4, 3), (4, 3), (4, 1)]
    for p, q in zip(parts, np.split(a, [3, 6], axis=1)):
        np.testing.assert_array_equal(n(p), q)
        assert shares_memory(p, x)
    parts = cddp.split(x, [1, 0, 3], dim=0)
    for p, q in zip(parts, np.split(a, [1, 1], axis=0)):
        np.testing.assert_array_equal(n(p), q)
    parts = x.chunk(3, dim=-1)
    assert [p.shape[1] for p in parts] == [3, 3, 1]
    parts = cddp.chunk(x, 2)
    assert [p.shape[0] for p in parts] == [2, 2]
    rows = x.unbind(1)
    assert len(rows) == 7
    for k, r in enumerate(rows):
        np.testing.assert_array_equal(n(r), a[:, k])
    assert len(cddp.unbind(t(np.zeros((0, 3))), 0)) == 0
    assert [tuple(p.shape) for p in t(np.zeros((0, 3))).chunk(2)] == [(0, 3), (0, 3)]


def test_iteration_yields_views_along_dim0():
    a = arr(3, 2)
    x = t(a)
    rows = list(x)
    assert len(rows) == 3
    for k, r in enumerate(rows):
        assert tuple(r.shape) == (2,)
        np.testing.assert_array_equal(n(r), a[k])
        assert shares_memory(r, x)
    assert [r.item() for r in t(np.array([1, 2, 3]))] == [1, 2, 3]
    assert list(t(np.zeros((0, 2)))) == []
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(t(np.array(1.0)))


def test_iteration_and_select_have_autograd():
    x = t(arr(3, 2), requires_grad=True)
    rows = list(x)
    assert rows[0].grad_fn is not None and rows[0].requires_grad
    assert x.select(0, 1).grad_fn.name() == "SelectBackward0"
    gradcheck(lambda x: cddp.stack(list(x)[::-1], 0), arr(3, 2))
    gradcheck(lambda x: cddp.stack([x.select(1, 2), x.select(0, 0)], 0), arr(3, 3))


# ---- gradients: finite differences ---------------------------------------------------------

GRAD_CASES = [
    ("view", (2, 3, 4), lambda x: x.view(4, -1)),
    ("reshape_copy", (2, 3, 4), lambda x: x.transpose(0, 1).reshape(-1)),
    ("flatten", (2, 3, 4), lambda x: x.flatten(1)),
    ("unflatten", (2, 6), lambda x: x.unflatten(-1, (2, 3))),
    ("squeeze", (1, 3, 1), lambda x: x.squeeze()),
    ("squeeze_dim", (1, 3, 1), lambda x: x.squeeze(0)),
    ("unsqueeze", (3, 2), lambda x: x.unsqueeze(1)),
    ("expand", (3, 1), lambda x: x.expand(2, 3, 4)),
    ("expand_0d", (), lambda x: x.expand(3)),
    ("transpose", (2, 3, 4), lambda x: x.transpose(0, 2)),
    ("t", (2, 3), lambda x: x.t()),
    ("permute", (2, 3, 4), lambda x: x.permute(1, 2, 0)),
    ("permute_chain", (2, 3, 4), lambda x: x.permute(2, 0, 1).reshape(4, 6).t()),
    ("narrow", (4, 5), lambda x: x.narrow(1, 1, 3)),
    ("select", (4, 5), lambda x: x.select(0, -1)),
    ("split", (4, 5), lambda x: cddp.cat(x.split(2, 1)[::-1], 1)),
    ("split_sizes", (4, 5), lambda x: cddp.cat(x.split([1, 4], 1)[1:], 1)),
    ("chunk", (4, 5), lambda x: cddp.stack(x.chunk(2, 0), 2)),
    ("unbind", (3, 4), lambda x: cddp.stack(x.unbind(1), 0)),
    ("contiguous", (3, 4), lambda x: x.t().contiguous()),
    ("clone", (3, 4), lambda x: x.clone().view(-1)),
    ("to_f32_back", (3, 4), lambda x: x.to(cddp.float32).to(cddp.float64)),
    ("float_double", (3, 4), lambda x: x.float().double().t()),
]


@pytest.mark.parametrize("name,shape,op", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradcheck(name, shape, op):
    # through float32 the finite differences need a large step to rise above rounding
    tol = dict(eps=1e-2, atol=1e-4, rtol=1e-4) if "f32" in name or "float" in name else {}
    gradcheck(op, arr(*shape), **tol)


def test_gradcheck_on_strided_input():
    # backward must map to the input's shape whatever the input's layout
    a = arr(3, 4)
    x = cddp.from_numpy(np.ascontiguousarray(a.T).T.copy(order="F"))
    x.requires_grad_(True)
    w = arr(4, 3)
    y = x.permute(1, 0)
    y.backward(t(w))
    np.testing.assert_array_equal(n(x.grad), w.T)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack_gradcheck(dim):
    gradcheck(lambda a, b, c: cddp.cat([a, b, c], dim), arr(2, 3), arr(2, 3), arr(2, 3))
    gradcheck(lambda a, b: cddp.stack([a, b, a], dim), arr(2, 3), arr(2, 3))


def test_cat_uneven_and_transposed_gradcheck():
    gradcheck(lambda a, b: cddp.cat([a, b.t()], 1), arr(3, 2), arr(4, 3))
    gradcheck(lambda a, b: cddp.cat((a, b), 0), arr(1, 4), arr(3, 4))


def test_grad_fn_names_match_torch(torch):
    a = arr(2, 3, 4)
    ops = [
        lambda x: x.view(6, 4), lambda x: x.transpose(0, 1).reshape(-1),
        lambda x: x.flatten(), lambda x: x.squeeze(), lambda x: x.squeeze(0),
        lambda x: x.unsqueeze(0), lambda x: x.expand(2, 2, 3, 4), lambda x: x.transpose(0, 1),
        lambda x: x.select(0, 0).t(), lambda x: x.permute(2, 1, 0), lambda x: x.narrow(0, 0, 1),
        lambda x: x.select(1, 1), lambda x: x.split(2, 2)[1], lambda x: x.split([1, 3], 2)[0],
        lambda x: x.unbind(0)[1], lambda x: x.transpose(0, 1).contiguous(), lambda x: x.clone(),
        lambda x: x.to(x.dtype, copy=True), lambda x: x.double(),
    ]
    for i, op in enumerate(ops):
        xt = torch.from_numpy(a.astype(np.float32)).requires_grad_()
        xc = t(a.astype(np.float32), requires_grad=True)
        assert op(xc).grad_fn.name() == op(xt).grad_fn.name(), i
    xt = torch.from_numpy(a).requires_grad_()
    xc = t(a, requires_grad=True)
    assert cddp.cat([xc, xc]).grad_fn.name() == torch.cat([xt, xt]).grad_fn.name()
    assert cddp.stack([xc, xc]).grad_fn.name() == torch.stack([xt, xt]).grad_fn.name()


# ---- torch oracle: values and gradients ----------------------------------------------------

TORCH_CASES = [
    (lambda m, x: x.view(4, -1), (2, 3, 4)),
    (lambda m, x: x.transpose(0, 1).reshape(3, 8), (2, 3, 4)),
    (lambda m, x: m.flatten(x, 1), (2, 3, 4)),
    (lambda m, x: x.unflatten(0, (-1, 2)), (4, 3)),
    (lambda m, x: m.squeeze(x, (0, 2)), (1, 3, 1, 2)),
    (lambda m, x: m.unsqueeze(x, -2), (3, 2)),
    (lambda m, x: x.expand(5, -1, 3), (2, 1)),
    (lambda m, x: x.expand_as(x.detach().expand(4, 2, 3)), (2, 1)),
    (lambda m, x: m.transpose(x, 2, 0), (2, 3, 4)),
    (lambda m, x: m.t(x), (3, 4)),
    (lambda m, x: m.permute(x, (2, 0, 1)), (2, 3, 4)),
    (lambda m, x: m.narrow(x, 1, -2, 2), (2, 3, 4)),
    (lambda m, x: m.select(x, 2, 1), (2, 3, 4)),
    (lambda m, x: m.cat(x.split(2, 2)[::-1], 2), (2, 3, 5)),
    (lambda m, x: m.cat(x.chunk(3, 1)[1:], 0), (2, 6)),
    (lambda m, x: m.stack(x.unbind(1), 2), (2, 3, 4)),
    (lambda m, x: m.stack(list(x), -1), (3, 4)),
    (lambda m, x: m.cat([x, x.t(), x], 0), (3, 3)),
    (lambda m, x: m.concat([x, x.clone()], -1), (2, 2)),
    (lambda m, x: x.t().contiguous(), (3, 4)),
    (lambda m, x: x.double().t(), (3, 4)),
]


@pytest.mark.parametrize("k", range(len(TORCH_CASES)))
def test_against_torch(k, torch):
    op, shape = TORCH_CASES[k]
    a = arr(*shape, dtype=np.float32)
    xt = torch.from_numpy(a.copy()).requires_grad_()
    xc = t(a, requires_grad=True)
    yt, yc = op(torch, xt), op(cddp, xc)
    assert tuple(yc.shape) == tuple(yt.shape)
    assert str(yc.dtype).split(".")[-1] == str(yt.dtype).split(".")[-1]
    np.testing.assert_allclose(n(yc), yt.detach().numpy(), rtol=1e-6)
    w = rng.standard_normal(tuple(yt.shape)).astype(yt.detach().numpy().dtype)
    yt.backward(torch.from_numpy(w))
    yc.backward(t(w))
    np.testing.assert_allclose(n(xc.grad), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


# ---- contiguous / clone --------------------------------------------------------------------

def test_contiguous_and_clone():
    a = arr(3, 4)
    x = t(a)
    assert x.contiguous() is x
    y = x.t()
    c = y.contiguous()
    assert c is not y and c.is_contiguous() and not shares_memory(c, x)
    np.testing.assert_array_equal(n(c), a.T)
    k = x.clone()
    assert k is not x and not shares_memory(k, x) and k._version == 0
    np.testing.assert_array_equal(n(k), a)
    k2 = cddp.clone(y)
    np.testing.assert_array_equal(n(k2), a.T)
    xr = t(a, requires_grad=True)
    assert xr.clone().grad_fn.name() == "CloneBackward0"
    assert xr.contiguous() is xr
    e = t(np.zeros((0, 3))).t().contiguous()
    assert tuple(e.shape) == (3, 0)


# ---- conversions ---------------------------------------------------------------------------

DT = {cddp.float32: np.float32, cddp.float64: np.float64, cddp.int64: np.int64,
      cddp.int32: np.int32, cddp.bool: np.bool_}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dtype_conversions_match_numpy(layout):
    a = (arr(3, 4) * 3).astype(np.float64)
    x = LAYOUTS[layout](a)
    for cd, nd in DT.items():
        y = x.to(cd)
        assert y.dtype == cd
        np.testing.assert_array_equal(n(y), a.astype(nd))
        # and back from that dtype to every other
        for cd2, nd2 in DT.items():
            np.testing.assert_array_equal(n(y.to(dtype=cd2)), a.astype(nd).astype(nd2))
    np.testing.assert_array_equal(n(x.float()), a.astype(np.float32))
    np.testing.assert_array_equal(n(x.double()), a)
    np.testing.assert_array_equal(n(x.long()), a.astype(np.int64))
    np.testing.assert_array_equal(n(x.int()), a.astype(np.int32))
    np.testing.assert_array_equal(n(x.bool()), a.astype(np.bool_))
    assert x.type() == "torch.DoubleTensor" and x.float().type() == "torch.FloatTensor"
    assert x.type(cddp.int64).dtype == cddp.int64
    assert x.type("torch.IntTensor").dtype == cddp.int32


def test_to_overloads_and_identity():
    a = arr(2, 3).astype(np.float32)
    x = t(a)
    assert x.to(cddp.float32) is x
    assert x.to("cpu") is x and x.to(cddp.device("cpu")) is x and x.cpu() is x
    assert x.to(x) is x
    assert x.to(None) is x and x.to() is x
    y = x.to(cddp.float32, copy=True)
    assert y is not x and not shares_memory(x, y)
    np.testing.assert_array_equal(n(y), a)
    assert x.to("cpu", cddp.float64).dtype == cddp.float64
    assert x.to(device="cpu", dtype=cddp.int64).dtype == cddp.int64
    assert x.to(t(np.zeros(1, np.int32))).dtype == cddp.int32
    assert x.to(np.float64).dtype == cddp.float64
    assert x.to(float).dtype == cddp.float64
    assert x.to(cddp.float64, non_blocking=True).dtype == cddp.float64
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, meta device type at "
                       "start of device string: foo"):
        x.to("foo")
    with pytest.raises(RuntimeError, match=r"Invalid device string: 'cuda:x'"):
        x.to("cuda:x")
    with pytest.raises(RuntimeError, match="Device index must not be negative"):
        x.to(-1)
    with pytest.raises(TypeError, match="dtype"):
        x.to(dtype="nope")
    with pytest.raises(TypeError):
        x.to(x, cddp.float64)
    assert x.half().dtype == cddp.float16 and x.bfloat16().dtype == cddp.bfloat16


def test_to_autograd():
    x = t(arr(2, 3), requires_grad=True)
    y = x.float()
    assert y.grad_fn.name() == "ToCopyBackward0" and y.requires_grad
    y.backward(t(np.ones((2, 3), np.float32)))
    assert x.grad.dtype == cddp.float64
    np.testing.assert_array_equal(n(x.grad), np.ones((2, 3)))
    z = x.long()
    assert z.grad_fn is None and not z.requires_grad
    assert not x.bool().requires_grad
    # no_grad: no history
    with cddp.no_grad():
        assert x.float().grad_fn is None and x.t().grad_fn is None


def test_to_against_torch(torch):
    a = arr(3, 2).astype(np.float32)
    xt = torch.from_numpy(a.copy()).requires_grad_()
    xc = t(a, requires_grad=True)
    w = arr(3, 2)
    xt.to(torch.float64).backward(torch.from_numpy(w))
    xc.to(cddp.float64).backward(t(w))
    assert xc.grad.dtype == cddp.float32
    np.testing.assert_allclose(n(xc.grad), xt.grad.numpy())
    for dt in ("int64", "int32", "bool", "float64"):
        np.testing.assert_array_equal(n(xc.detach().to(getattr(cddp, dt))),
                                      xt.detach().to(getattr(torch, dt)).numpy())


# ---- device policy (fresh processes: the warning is once per process) -----------------------

def run_py(code, **env):
    from conftest import subprocess_env
    e = subprocess_env(**env)
    if "CDDP_STRICT_DEVICE" not in env:
        e.pop("CDDP_STRICT_DEVICE", None)
    # cwd outside the checkout: ./cddp must not shadow the package under test
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), env=e, timeout=60)


def test_cuda_fallback_warns_once():
    code = """
import warnings, cddp, numpy as np
x = cddp.from_numpy(np.arange(6.0).reshape(2, 3))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    y = x.to("cuda")
    z = x.cuda()
    u = x.to(cddp.device("cuda", 1), cddp.float32)
    v = x.to(0)
msgs = [str(m.message) for m in w]
cats = [m.category.__name__ for m in w]
print(repr(msgs), cats)
assert y is x and z is x and v is x and u.dtype == cddp.float32
assert msgs == ["cddp: CUDA requested (cuda:0) but no GPU is available; running on the CPU"], msgs
assert cats == ["UserWarning"]
print("OK")
"""
    r = run_py(code)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_cuda_fallback_message_names_the_device():
    r = run_py("import warnings, cddp, numpy as np\n"
               "warnings.simplefilter('error')\n"
               "x = cddp.from_numpy(np.zeros(2))\n"
               "try:\n    x.to('cuda:3')\nexcept UserWarning as e:\n    print('W', e)\n")
    assert r.returncode == 0, r.stderr
    assert "W cddp: CUDA requested (cuda:3) but no GPU is available; running on the CPU" in r.stdout


def test_strict_device_raises():
    code = """
import cddp, numpy as np
x = cddp.from_numpy(np.zeros(2))
for f in (lambda: x.to("cuda"), lambda: x.cuda(), lambda: x.to(cddp.device("cuda:0"))):
    try:
        f()
    except RuntimeError as e:
        assert "CUDA requested" in str(e) and "CDDP_STRICT_DEVICE" in str(e), e
    else:
        raise SystemExit("no error")
assert x.to("cpu") is x
print("OK")
"""
    r = run_py(code, CDDP_STRICT_DEVICE="1")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


# ---- cat / stack ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat_matches_numpy(layout, dim):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s if d != (dim % 3) else s + k for d, s in enumerate(sh))
              for k, sh in enumerate(shapes)]
    arrays = [arr(*s) for s in shapes]
    xs = [LAYOUTS[layout](a) for a in arrays]
    np.testing.assert_array_equal(n(cddp.cat(xs, dim)), np.concatenate(arrays, dim))
    np.testing.assert_array_equal(n(cddp.concatenate(tuple(xs), dim=dim)),
                                  np.concatenate(arrays, dim))
    np.testing.assert_array_equal(n(cddp.concat(xs, axis=dim)), np.concatenate(arrays, dim))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack_matches_numpy(layout, dim):
    arrays = [arr(3, 4) for _ in range(3)]
    xs = [LAYOUTS[layout](a) for a in arrays]
    np.testing.assert_array_equal(n(cddp.stack(xs, dim)), np.stack(arrays, dim))
    # 0-d inputs stack into a vector
    np.testing.assert_array_equal(n(cddp.stack([t(np.array(1.0)), t(np.array(2.0))])), [1.0, 2.0])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.int64, np.int16])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_stack_and_cat_along_the_last_dim_interleave(dtype, k):
    # one element per input and row: join.c's interleaving loops (4 and 8 bytes) or memcpy
    arrays = [(np.arange(3 * 1000) * (j + 1) % 97).astype(dtype).reshape(3, 1000)
              for j in range(k)]
    xs = [t(a) for a in arrays]
    np.testing.assert_array_equal(n(cddp.stack(xs, -1)), np.stack(arrays, -1))
    cols = [a[..., None] for a in arrays]
    np.testing.assert_array_equal(n(cddp.cat([t(c) for c in cols], -1)),
                                  np.concatenate(cols, -1))


def test_broadcast_error_names_the_last_mismatching_dim():
    # torch compares from the last dim: (16, 16, 64) vs (17, 16) fails at dim 2 (64 vs 16)
    with pytest.raises(RuntimeError, match=r"tensor a \(64\) must match the size of tensor b "
                       r"\(16\) at non-singleton dimension 2"):
        cddp.zeros(16, 16, 64) + cddp.zeros(17, 16)


def test_cat_dtype_promotion_and_empty():
    i32 = t(np.array([[1, 2]], np.int32))
    f32 = t(np.array([[0.5, 1.5]], np.float32))
    b = t(np.array([[True, False]]))
    i64 = t(np.array([[7, 8]], np.int64))
    f64 = t(np.array([[2.5, 3.5]], np.float64))
    assert cddp.cat([i32, b]).dtype == cddp.int32
    assert cddp.cat([b, i64, i32]).dtype == cddp.int64
    assert cddp.cat([i64, f32]).dtype == cddp.float32
    assert cddp.stack([f32, f64]).dtype == cddp.float64
    np.testing.assert_array_equal(n(cddp.cat([i32, f32, b], 0)),
                                  np.array([[1, 2], [0.5, 1.5], [1, 0]], np.float32))
    # legacy rule: 1-D empty tensors are skipped whatever the others' shape
    e = t(np.zeros(0, np.float64))
    y = cddp.cat([f32, e, f32], 1)
    assert y.dtype == cddp.float64 and tuple(y.shape) == (1, 4)
    # empty results and empty inputs
    assert tuple(cddp.cat([t(np.zeros((0, 3))), t(np.zeros((0, 3)))]).shape) == (0, 3)
    assert tuple(cddp.cat([t(np.zeros((2, 0))), t(np.ones((2, 1)))], 1).shape) == (2, 1)
    assert tuple(cddp.stack([t(np.zeros((0, 3)))] * 2, 1).shape) == (0, 2, 3)


def test_cat_with_skipped_input_backward():
    a = t(arr(2, 3), requires_grad=True)
    e = t(np.zeros(0), requires_grad=True)
    y = cddp.cat([e, a, e], 0)
    w = arr(2, 3)
    y.backward(t(w))
    np.testing.assert_array_equal(n(a.grad), w)
    assert tuple(e.grad.shape) == (0,)


def test_cat_mixed_dtype_grads_are_cast_back():
    a = t(arr(2, 2).astype(np.float32), requires_grad=True)
    b = t(arr(1, 2), requires_grad=True)
    i = t(np.ones((1, 2), np.int64))
    y = cddp.cat([a, i, b])
    assert y.dtype == cddp.float64
    w = arr(4, 2)
    y.backward(t(w))
    assert a.grad.dtype == cddp.float32 and b.grad.dtype == cddp.float64
    np.testing.assert_allclose(n(a.grad), w[:2].astype(np.float32))
    np.testing.assert_array_equal(n(b.grad), w[3:])


def test_cat_fast_path_large_and_out():
    a = np.arange(200000, dtype=np.float32).reshape(1000, 200)
    b = -a[:300]
    y = cddp.cat([t(a), t(b)])
    np.testing.assert_array_equal(n(y), np.concatenate([a, b]))
    y = cddp.cat([t(a), t(a)], 1)
    np.testing.assert_array_equal(n(y), np.concatenate([a, a], 1))
    out = t(np.zeros((2, 3)))
    r = cddp.cat([t(np.ones((1, 3))), t(np.full((1, 3), 2.0))], out=out)
    assert r is out
    np.testing.assert_array_equal(n(out), [[1, 1, 1], [2, 2, 2]])
    with pytest.raises(RuntimeError, match="out="):
        cddp.cat([t(np.ones((1, 3)))], out=t(np.zeros((2, 3))))


def test_cat_stack_errors():
    z = t(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"expected a non-empty list of Tensors"):
        cddp.cat([])
    with pytest.raises(RuntimeError, match="stack expects a non-empty TensorList"):
        cddp.stack([])
    with pytest.raises(RuntimeError, match=r"Sizes of tensors must match except in dimension 1\. "
                       r"Expected size 2 but got size 3 for tensor number 1 in the list\."):
        cddp.cat([z, t(np.zeros((3, 3)))], 1)
    with pytest.raises(RuntimeError, match=r"zero-dimensional tensor \(at position 0\) cannot "
                       r"be concatenated"):
        cddp.cat([t(np.array(1.0))])
    with pytest.raises(RuntimeError, match="Tensors must have same number of dimensions: got 2 and 3"):
        cddp.cat([z, t(np.zeros((2, 3, 1)))])
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, but got "
                       r"\[2, 3\] at entry 0 and \[2, 4\] at entry 1"):
        cddp.stack([z, t(np.zeros((2, 4)))])
    with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 0, but got int"):
        cddp.cat([z, 1])
    with pytest.raises(TypeError, match="tuple of Tensors"):
        cddp.cat(z)
    with pytest.raises(IndexError, match="Dimension out of range"):
        cddp.cat([z, z], 2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        cddp.stack([z, z], 3)


def test_torch_cat_stack_values(torch):
    arrays = [arr(2, 3).astype(np.float32), arr(2, 3), rng.integers(0, 5, (2, 3))]
    for dim in (0, 1, -1):
        yt = torch.cat([torch.from_numpy(a) for a in arrays], dim)
        yc = cddp.cat([t(a) for a in arrays], dim)
        assert str(yc.dtype).split(".")[-1] == str(yt.dtype).split(".")[-1]
        np.testing.assert_array_equal(n(yc), yt.numpy())
        yt = torch.stack([torch.from_numpy(a) for a in arrays], dim)
        yc = cddp.stack([t(a) for a in arrays], dim)
        np.testing.assert_array_equal(n(yc), yt.numpy())


def test_int_tensors_never_record_history():
    x = t(np.arange(6).reshape(2, 3))
    for y in (x.view(-1), x.t(), x.expand(2, 2, 3), x.select(0, 0), x.clone(),
              cddp.cat([x, x]), cddp.stack([x, x])):
        assert y.grad_fn is None and not y.requires_grad


def test_views_of_leaf_requiring_grad_are_nonleaf():
    x = t(arr(2, 3), requires_grad=True)
    v = x.view(3, 2)
    assert not v.is_leaf and v.requires_grad and v.grad_fn.name() == "ViewBackward0"
    assert v.grad_fn.next_functions[0][0].name() == "AccumulateGrad"
    d = x.detach().view(-1)
    assert d.grad_fn is None


def test_aliases_keywords_and_module_forms():
    a = arr(2, 3, 4)
    x = t(a)
    np.testing.assert_array_equal(n(x.view_as(t(np.zeros((6, 4))))), a.reshape(6, 4))
    np.testing.assert_array_equal(n(x.transpose(0, 1).reshape_as(t(np.zeros(24)))),
                                  a.swapaxes(0, 1).reshape(24))
    np.testing.assert_array_equal(n(x.swapdims(dim0=2, dim1=0)), a.swapaxes(0, 2))
    np.testing.assert_array_equal(n(cddp.swapaxes(x, 0, 1)), a.swapaxes(0, 1))
    np.testing.assert_array_equal(n(cddp.flatten(x, start_dim=1)), a.reshape(2, 12))
    np.testing.assert_array_equal(n(x.flatten(end_dim=1)), a.reshape(6, 4))
    np.testing.assert_array_equal(n(x.unsqueeze(dim=0)), a[None])
    np.testing.assert_array_equal(n(x.narrow(dim=2, start=1, length=2)), a[:, :, 1:3])
    np.testing.assert_array_equal(n(x.select(dim=0, index=1)), a[1])
    np.testing.assert_array_equal(n(x.unflatten(-1, (2, 2))), a.reshape(2, 3, 2, 2))
    np.testing.assert_array_equal(n(x.reshape(cddp.Size([4, 6]))), a.reshape(4, 6))
    np.testing.assert_array_equal(n(x.permute([1, 2, 0])), a.transpose(1, 2, 0))
    np.testing.assert_array_equal(n(x.expand((3, 2, 3, 4)).select(0, 2)), a)
    assert [tuple(p.shape) for p in cddp.split(x, 2, dim=2)] == [(2, 3, 2), (2, 3, 2)]
    assert len(cddp.chunk(x, chunks=3, dim=1)) == 3
    assert x.flatten(1, 1) is x
    with pytest.raises(RuntimeError, match="must be cuda device"):
        x.cuda("cpu")
    with pytest.raises(TypeError, match="missing"):
        cddp.transpose(x, 0)
