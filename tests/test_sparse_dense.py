"""cddp.sparse and the sparse constructors over dense tensors (cddp/sparse.py): the dense
value of every constructor against NumPy (duplicates summed) and torch's to_dense(), the
checks torch makes under check_sparse_tensor_invariants, gradients to `values`, and a
pygcn-style graph convolution (legacy torch.sparse.FloatTensor adjacency + torch.spmm)
against torch's sparse run."""
import re
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn

IDX = [[0, 1, 1, 2, 0], [2, 0, 0, 1, 2]]
VAL = [1.0, 2.0, 3.0, 4.0, 0.5]


def dense_ref(idx, val, shape):
    out = np.zeros(shape, dtype=np.float64)
    np.add.at(out, tuple(np.asarray(idx)), np.asarray(val, dtype=np.float64))
    return out


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_coo_dense_value_sums_duplicates():
    got = cddp.sparse_coo_tensor(IDX, VAL, (3, 4))
    assert got.shape == (3, 4) and got.dtype == cddp.float32
    np.testing.assert_array_equal(got.numpy(), dense_ref(IDX, VAL, (3, 4)))


def test_coo_size_inferred_hybrid_and_empty():
    assert cddp.sparse_coo_tensor(IDX, VAL).shape == (3, 3)
    vals = np.arange(10.0).reshape(5, 2)
    got = cddp.sparse_coo_tensor(cddp.tensor(IDX), cddp.from_numpy(vals))
    ref = np.zeros((3, 3, 2))
    np.add.at(ref, tuple(np.asarray(IDX)), vals)
    assert got.shape == (3, 3, 2)
    np.testing.assert_array_equal(got.numpy(), ref)
    empty = cddp.sparse_coo_tensor(cddp.zeros(2, 0, dtype=cddp.int64), cddp.zeros(0), (2, 2))
    np.testing.assert_array_equal(empty.numpy(), np.zeros((2, 2)))
    one_d = cddp.sparse_coo_tensor([1, 3], [5.0, 6.0], (4,))
    np.testing.assert_array_equal(one_d.numpy(), [0, 5, 0, 6])


def test_coo_dtype_and_requires_grad_leaf():
    got = cddp.sparse_coo_tensor(IDX, VAL, (3, 3), dtype=cddp.float64, requires_grad=True)
    assert got.dtype == cddp.float64 and got.requires_grad and got.is_leaf


@pytest.mark.parametrize("args, message", [
    ((IDX, VAL, (2, 3)), "size is inconsistent with indices: for dim 0, size is 2 but found "
                         "index 2"),
    (([[0, -1]], [1.0, 2.0], (3,)), "found negative index -1 for dim 0"),
    ((IDX, VAL[:2], (3, 3)), "indices and values must have same nnz"),
    ((IDX, VAL, (3, 3, 2)), "'len(size) == sparse_dim + dense_dim' is not satisfied"),
])
def test_coo_checks(args, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        cddp.sparse_coo_tensor(*args)


def test_float_indices_refused():
    with pytest.raises(RuntimeError, match="indices must be an int64 tensor"):
        cddp.sparse_coo_tensor(cddp.tensor(IDX, dtype=cddp.float32), VAL, (3, 3))


def test_gradient_reaches_values():
    v = cddp.tensor(VAL, requires_grad=True)
    w = np.arange(9.0).reshape(3, 3)
    (cddp.sparse_coo_tensor(IDX, v, (3, 3)) * cddp.from_numpy(w).float()).sum().backward()
    # d/dv_k = w[idx_k]: duplicates each get the weight of their coordinate
    np.testing.assert_array_equal(v.grad.numpy(), w[tuple(np.asarray(IDX))])


def test_csr_and_legacy_forms():
    csr = cddp.sparse_csr_tensor(cddp.tensor([0, 1, 1, 3]), cddp.tensor([2, 0, 1]),
                                 cddp.tensor([5.0, 6.0, 7.0]), (3, 3))
    np.testing.assert_array_equal(csr.numpy(), [[0, 0, 5], [0, 0, 0], [6, 7, 0]])
    with pytest.raises(RuntimeError, match="crow_indices must start at 0"):
        cddp.sparse_csr_tensor(cddp.tensor([0, 2, 1]), cddp.tensor([0, 1]),
                               cddp.tensor([1.0, 2.0]), (2, 2))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        leg = cddp.sparse.FloatTensor(cddp.tensor(IDX), cddp.tensor(VAL), cddp.Size([3, 3]))
    assert any("torch.sparse.SparseTensor(indices, values, shape" in str(w.message)
               for w in seen)
    np.testing.assert_array_equal(leg.numpy(), dense_ref(IDX, VAL, (3, 3)))
    assert cddp.sparse.DoubleTensor(cddp.tensor(IDX), cddp.tensor(VAL), (3, 3)).dtype \
        == cddp.float64


def test_sparse_ops_and_methods():
    a = cddp.sparse_coo_tensor(IDX, VAL, (3, 3))
    x = cddp.from_numpy(np.arange(6.0, dtype=np.float32).reshape(3, 2))
    ref = dense_ref(IDX, VAL, (3, 3)) @ np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(cddp.sparse.mm(a, x).numpy(), ref)
    np.testing.assert_allclose(cddp.spmm(a, x).numpy(), ref)
    np.testing.assert_allclose(cddp.sparse.addmm(x, a, x, beta=0.5, alpha=2.0).numpy(),
                               0.5 * np.arange(6.0).reshape(3, 2) + 2 * ref)
    assert float(cddp.sparse.sum(a)) == sum(VAL)
    np.testing.assert_allclose(cddp.sparse.sum(a, 0).numpy(),
                               dense_ref(IDX, VAL, (3, 3)).sum(0))
    # softmax over the specified entries only: (0,2) -> 1.5 alone in row 0, (1,0) -> 5.0 alone
    # in row 1, (2,1) -> 4.0 alone in row 2: each is 1, every unspecified entry stays 0
    np.testing.assert_allclose(cddp.sparse.softmax(a, 1).numpy(), (dense_ref(IDX, VAL, (3, 3))
                                                                   != 0).astype(np.float32))
    assert x.to_dense() is x and x.to_sparse() is x
    # pygcn-style accessors: a coalesced COO tensor's indices / values (no explicit zeros)
    b = cddp.sparse_coo_tensor(IDX, VAL, (3, 3), requires_grad=True)
    c = b.coalesce()
    dense = dense_ref(IDX, VAL, (3, 3))
    rows, cols = np.nonzero(dense)
    assert c.is_coalesced() and c._nnz() == len(rows) == 3
    assert np.array_equal(c.indices().numpy(), np.stack([rows, cols]))
    assert np.array_equal(c._indices().numpy(), c.indices().numpy())
    np.testing.assert_allclose(c.values().detach().numpy(), dense[rows, cols])
    (c.values() * cddp.tensor([1.0, 2.0, 3.0])).sum().backward()
    want = np.zeros((3, 3))
    want[rows, cols] = [1.0, 2.0, 3.0]
    np.testing.assert_allclose(b.grad.numpy(), want)
    assert x.to_dense(cddp.float64).dtype == cddp.float64
    with cddp.sparse.check_sparse_tensor_invariants():
        cddp.sparse_coo_tensor(IDX, VAL, (3, 3))


def test_dense_warning_once_at_the_callers_line():
    import cddp.sparse as sp
    saved = list(sp._warned)
    sp._warned.clear()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            cddp.sparse_coo_tensor(IDX, VAL, (3, 3))
            cddp.sparse_coo_tensor(IDX, VAL, (3, 3))
        dense = [w for w in seen if "cddp has no sparse tensors" in str(w.message)]
        assert len(dense) == 1 and dense[0].filename == __file__
    finally:
        sp._warned[:] = saved


def test_matches_torch_sparse_and_a_gcn_layer():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    n, f, h = 12, 5, 4
    idx = rng.integers(0, n, size=(2, 40))
    val = rng.random(40).astype(np.float32)
    ta = torch.sparse_coo_tensor(torch.from_numpy(idx), torch.from_numpy(val), (n, n))
    ca = cddp.sparse.FloatTensor(cddp.from_numpy(idx), cddp.from_numpy(val), cddp.Size([n, n]))
    np.testing.assert_allclose(ca.numpy(), ta.to_dense().numpy(), rtol=1e-6)
    feats = rng.standard_normal((n, f)).astype(np.float32)
    w0 = rng.standard_normal((f, h)).astype(np.float32)

    def gcn(lib, adj, mod):   # pygcn's GraphConvolution: adj @ (x @ W), then relu, mean
        x = lib.from_numpy(feats)
        w = mod(lib.from_numpy(w0.copy()))
        out = lib.spmm(adj, lib.mm(x, w)).relu().mean()
        out.backward()
        return out.item(), w.grad.numpy()

    lt, gt = gcn(torch, ta, lambda t: torch.nn.Parameter(t))
    lc, gc = gcn(cddp, ca, lambda t: nn.Parameter(t))
    assert abs(lt - lc) <= 1e-5 * max(1.0, abs(lt))
    np.testing.assert_allclose(gc, gt, rtol=1e-4, atol=1e-6)
