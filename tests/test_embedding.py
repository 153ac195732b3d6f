"""F.embedding / nn.Embedding (csrc/nn/embedding.c): lookups against NumPy, gradients against
a NumPy scatter-add and finite differences, and torch (values, gradients, padding_idx,
scale_grad_by_freq, max_norm, errors) when it is installed."""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t


def np_embedding_grad(idx, g, V, pad=None, scale=False):
    """Dense (V, D) gradient: rows of g scatter-added at idx (the oracle without torch)."""
    idx = idx.reshape(-1)
    g = g.reshape(idx.size, -1)
    out = np.zeros((V, g.shape[1]), dtype=np.float64)
    counts = np.bincount(idx, minlength=V)
    for i, r in enumerate(idx):
        if r == pad:
            continue
        out[r] += g[i] / (counts[r] if scale else 1)
    return out


@pytest.mark.parametrize("itype", [np.int64, np.int32])
@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 2, 3), ()])
def test_lookup_and_grad_against_numpy(itype, shape):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((7, 4))
    idx = rng.integers(0, 7, shape).astype(itype)
    w = t(W, requires_grad=True)
    out = F.embedding(cddp.from_numpy(idx.copy()), w)
    assert tuple(out.shape) == shape + (4,)
    np.testing.assert_array_equal(n(out), W[idx])
    g = rng.standard_normal(shape + (4,))
    out.backward(t(g))
    np.testing.assert_allclose(n(w.grad), np_embedding_grad(idx, g, 7), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pad", [0, 3, -1, -7])
@pytest.mark.parametrize("scale", [False, True])
def test_padding_and_scale_grad_by_freq_against_numpy(pad, scale):
    rng = np.random.default_rng(1)
    W = rng.standard_normal((7, 3))
    idx = np.array([[0, 3, 3, 6], [6, 6, 1, 0]])
    w = t(W, requires_grad=True)
    out = F.embedding(t(idx), w, padding_idx=pad, scale_grad_by_freq=scale)
    np.testing.assert_array_equal(n(out), W[idx])         # forward reads the padding row too
    g = rng.standard_normal((2, 4, 3))
    out.backward(t(g))
    want = np_embedding_grad(idx, g, 7, pad=pad % 7, scale=scale)
    np.testing.assert_allclose(n(w.grad), want, rtol=1e-12, atol=1e-12)
    assert not n(w.grad)[pad % 7].any()                   # the padding row gets no gradient


def test_gradcheck_float64():
    # padding_idx and scale_grad_by_freq change the gradient on purpose (torch's note: they
    # differ from finite differences), so the plain lookup is the one checked here
    idx = t(np.array([[1, 2, 4], [4, 0, 1]]))
    gradcheck(lambda w: F.embedding(idx, w), np.random.default_rng(2).standard_normal((5, 3)))


def test_non_contiguous_weight_and_indices():
    rng = np.random.default_rng(4)
    W = rng.standard_normal((4, 9))
    w = t(W, requires_grad=True)
    wt = w.t()                                            # (9, 4), column-major view
    idx = t(np.array([[8, 0, 2], [1, 8, 3]])).t()         # non-contiguous indices (3, 2)
    out = F.embedding(idx, wt)
    np.testing.assert_array_equal(n(out), W.T[n(idx)])
    out.sum().backward()
    want = np_embedding_grad(n(idx), np.ones((3, 2, 4)), 9).T
    np.testing.assert_allclose(n(w.grad), want)


@pytest.mark.parametrize("bad", [7, 100, -1, -8])
def test_out_of_range_index_raises_and_reads_nothing(bad):
    w = cddp.randn(7, 3)
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(t(np.array([0, bad, 1])), w)
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(t(np.array([bad], dtype=np.int32)), w)
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(t(np.array([bad])), w, max_norm=1.0)
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(t(np.array([0])), cddp.randn(0, 3))


def test_errors():
    w = cddp.randn(7, 3)
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar types: "
                                           "Long, Int; but got torch.FloatTensor"):
        F.embedding(cddp.tensor([1.0]), w)
    with pytest.raises(RuntimeError, match="'indices' .* but got torch.BoolTensor"):
        F.embedding(cddp.tensor([True]), w)
    with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
        F.embedding(cddp.tensor([1]), cddp.randn(7))
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        F.embedding(cddp.tensor([1]), w, padding_idx=7)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(7, 3, padding_idx=-8)
    with pytest.raises(AssertionError, match="Shape of weight does not match"):
        nn.Embedding(7, 3, _weight=cddp.randn(3, 7))
    with pytest.raises(AssertionError, match="expected to be 2-dimensional"):
        nn.Embedding.from_pretrained(cddp.randn(3))


def test_empty_indices_and_integer_weight():
    w = cddp.randn(5, 2, requires_grad=True)
    out = F.embedding(cddp.zeros((2, 0), dtype=cddp.int64), w)
    assert tuple(out.shape) == (2, 0, 2)
    out.sum().backward()
    assert not n(w.grad).any()
    wi = cddp.tensor([[1, 2], [3, 4]])
    np.testing.assert_array_equal(n(F.embedding(cddp.tensor([1, 0]), wi)), [[3, 4], [1, 2]])


def test_module_init_padding_from_pretrained_and_repr():
    cddp.manual_seed(0)
    e = nn.Embedding(10, 4, padding_idx=-2)
    assert e.padding_idx == 8
    W = n(e.weight)
    assert not W[8].any() and W.std() > 0.5              # N(0, 1) with the padding row zeroed
    assert list(e.state_dict()) == ["weight"]
    assert repr(e) == "Embedding(10, 4, padding_idx=8)"
    pre = cddp.randn(6, 3)
    f = nn.Embedding.from_pretrained(pre)
    assert not f.weight.requires_grad and f.weight.data_ptr() == pre.data_ptr()
    g = nn.Embedding.from_pretrained(pre, freeze=False, padding_idx=1)
    assert g.weight.requires_grad
    out = g(cddp.tensor([1, 2]))
    out.sum().backward()
    np.testing.assert_array_equal(n(g.weight.grad)[1], 0)
    np.testing.assert_array_equal(n(g.weight.grad)[2], 1)


def test_max_norm_renormalises_used_rows_in_place():
    W = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0], [1.0, 0.0]])
    e = nn.Embedding(4, 2, max_norm=1.0, _weight=t(W))
    out = e(t(np.array([0, 1, 0])))
    norms = np.linalg.norm(n(e.weight), axis=1)
    np.testing.assert_allclose(norms[0], 1.0, rtol=1e-6)          # renormed
    np.testing.assert_allclose(norms[1:], [0.5, 10.0, 1.0])       # small or unused: untouched
    np.testing.assert_allclose(n(out)[0], W[0] / (5 + 1e-7), rtol=1e-12)
    e2 = nn.Embedding(4, 2, max_norm=2.0, norm_type=1.0, _weight=t(W))
    e2(t(np.array([2])))
    np.testing.assert_allclose(np.abs(n(e2.weight)[2]).sum(), 2.0, rtol=1e-6)


# ---- torch as the oracle -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kw", [{}, {"padding_idx": 2},
                                {"padding_idx": -1, "scale_grad_by_freq": True},
                                {"max_norm": 1.5}, {"max_norm": 0.5, "norm_type": 3.0}])
def test_against_torch(torch, dtype, kw):
    rng = np.random.default_rng(5)
    W = rng.standard_normal((6, 5)).astype(dtype)
    idx = rng.integers(0, 6, (3, 4))
    g = rng.standard_normal((3, 4, 5)).astype(dtype)
    tw = torch.tensor(W, requires_grad=True)
    cw = t(W, requires_grad=True)
    tout = torch.nn.functional.embedding(torch.tensor(idx), tw, **kw)
    cout = F.embedding(t(idx), cw, **kw)
    tout.backward(torch.tensor(g))
    cout.backward(t(g))
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(n(cout), tout.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(n(cw), tw.detach().numpy(), rtol=tol, atol=tol)  # max_norm
    np.testing.assert_allclose(n(cw.grad), tw.grad.numpy(), rtol=tol, atol=tol)


def test_module_state_dict_from_torch(torch):
    te = torch.nn.Embedding(9, 4, padding_idx=0)
    ce = nn.Embedding(9, 4, padding_idx=0)
    ce.load_state_dict({k: cddp.from_numpy(v.numpy().copy()) for k, v in te.state_dict().items()})
    idx = np.array([[0, 8, 3], [3, 3, 1]])
    np.testing.assert_array_equal(n(ce(t(idx))), te(torch.tensor(idx)).detach().numpy())
    with pytest.raises(IndexError) as ce_err:
        ce(t(np.array([9])))
    with pytest.raises(IndexError) as te_err:
        te(torch.tensor([9]))
    assert str(ce_err.value) == str(te_err.value)


def test_sparse_true_gives_a_dense_gradient_with_a_warning(monkeypatch):
    monkeypatch.setattr(F, "_sparse_warned", [])
    w = cddp.randn(5, 2, requires_grad=True)
    with pytest.warns(UserWarning, match="dense gradient"):
        out = F.embedding(cddp.tensor([4, 4, 0]), w, sparse=True)
    out.sum().backward()
    np.testing.assert_array_equal(n(w.grad), [[1, 1], [0, 0], [0, 0], [0, 0], [2, 2]])
