"""cddp.sparse — torch.sparse and the sparse constructors, over DENSE tensors.

    adj = cddp.sparse_coo_tensor(indices, values, (n, n))   # a dense (n, n) tensor
    h = cddp.sparse.mm(adj, x)                               # = adj @ x
    cddp.sparse.FloatTensor(indices, values, cddp.Size([n, n]))   # the legacy form (pygcn)

Contract:
- cddp has no sparse layout. sparse_coo_tensor / sparse_csr_tensor / the legacy
  sparse.FloatTensor(indices, values, size) family and Tensor.to_sparse return the dense
  tensor with the same values (duplicate coordinates summed, as torch's coalesce sums them),
  so the scripts that build a graph's adjacency as a sparse matrix and multiply with
  torch.sparse.mm / torch.spmm run, with the same numbers. The first call per process warns
  once that the memory is the full size's. Gradients flow to `values` (an index_put with
  accumulate) when it requires grad; requires_grad=True makes the result a leaf.
- Coordinates are checked (torch checks them only under check_sparse_tensor_invariants):
  indices an integer tensor of shape (sparse_dim, nnz), values (nnz, *dense_dims), size
  len = sparse_dim + dense_dim, every index in [0, size); each violation raises RuntimeError
  with torch's wording. is_coalesced=True is believed, as torch believes it.
- A stand-in made with requires_grad=True is a leaf whose gradient is zero off its entries
  (torch's is a sparse tensor over them), so a step keeps the sparsity pattern.
- mm / addmm / sum are the dense operations (an unspecified entry is a zero in all three, so
  the results are torch's). sparse.softmax / log_softmax run over the specified entries (a
  stand-in's description, else the nonzero entries), unspecified ones counting as -inf and
  staying 0, as torch's.

- The result keeps its description (`_coo`: indices, values, coalesced?), so _indices() /
  _values() / _nnz() give the entries as given — duplicates and explicit zeros included, as
  torch's uncoalesced tensor lists them (pyGAT's custom spmm backward indexes with them) —
  and coalesce() gives them sorted and summed (cddp/_compat.py). Any other tensor answers
  these from its nonzero entries (it is its own coalesced form). crow_indices() /
  col_indices() (2-D) and sparse_dim() / dense_dim() read the same description.

Differences from torch: results are dense (is_sparse False, layout strided; to_dense()
returns the tensor itself, as torch does for a strided tensor); memory and time grow with
the full size, not with nnz; an operation on a stand-in gives a plain dense tensor.
"""
import warnings

from . import _C
from ._compat import _NoOpContextDecorator
from .autograd.grad_mode import no_grad

__all__ = ["mm", "addmm", "sum", "softmax", "log_softmax", "FloatTensor", "DoubleTensor",
           "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
           "CharTensor", "ByteTensor", "BoolTensor", "check_sparse_tensor_invariants"]

_warned = []


def _warn_dense(what, stacklevel):
    """Once per process; stacklevel as warnings.warn counts it from here: the user's line."""
    if not _warned:
        _warned.append(True)
        warnings.warn(f"{what}: cddp has no sparse tensors; the result is the equivalent dense "
                      "tensor (memory grows with its full size, not with the number of "
                      "entries)", UserWarning, stacklevel=stacklevel)


def _as_tensor(x, dtype=None):
    return x if isinstance(x, _C.Tensor) else _C.tensor(x, dtype=dtype)


def _coo_dense(indices, values, size, dtype, requires_grad, what, coalesced=False):
    """The dense tensor of a COO description (see the module docstring)."""
    indices = _as_tensor(indices, _C.int64)
    values = _as_tensor(values)
    if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype == _C.bool:
        raise RuntimeError(f"indices must be an int64 tensor (got {indices.dtype})")
    if indices.dim() == 1:     # torch reads a 1-D index tensor as (1, nnz)
        indices = indices.unsqueeze(0)
    if indices.dim() != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(indices.shape)}")
    sparse_dim, nnz = indices.shape
    if values.dim() == 0 or values.shape[0] != nnz:
        got = values.shape[0] if values.dim() else 0
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from "
                           f"indices: {nnz}, nnz from values: {got}")
    dense_shape = tuple(values.shape[1:])
    idx = indices.to(_C.int64)
    if size is None:
        if nnz == 0:
            size = (0,) * sparse_dim + dense_shape
        else:
            size = tuple(int(m) + 1 for m in idx.amax(1).tolist()) + dense_shape
    size = tuple(int(s) for s in size)
    if len(size) != sparse_dim + len(dense_shape):
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) "
                           f"= {len(size)}, sparse_dim = {sparse_dim}, dense_dim = "
                           f"{len(dense_shape)}")
    if tuple(size[sparse_dim:]) != dense_shape:
        raise RuntimeError(f"values has incorrect size, expected {[nnz, *size[sparse_dim:]]}, "
                           f"got {list(values.shape)}")
    if nnz:
        lo, hi = idx.amin(1).tolist(), idx.amax(1).tolist()
        for d in range(sparse_dim):
            if lo[d] < 0:
                raise RuntimeError(f"found negative index {lo[d]} for dim {d}")
            if hi[d] >= size[d]:
                raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is "
                                   f"{size[d]} but found index {hi[d]}")
    _warn_dense(what, 4)          # _coo_dense <- the constructor <- the user
    if dtype is not None and values.dtype != dtype:
        values = values.to(dtype)
    out = _C.zeros(size, dtype=values.dtype)
    if requires_grad:
        with no_grad():
            out = out.index_put(tuple(idx.unbind(0)), values, accumulate=True)
        out.requires_grad_(True)
        # torch's gradient of a sparse leaf is sparse over its entries: zero elsewhere here,
        # so an optimizer step keeps the pattern
        held = _C.zeros(size[:sparse_dim], dtype=_C.bool)
        held[tuple(idx.unbind(0))] = True
        held = held.reshape(tuple(held.shape) + (1,) * (len(size) - sparse_dim))
        out.register_hook(lambda g: g.masked_fill(~held, 0))
    else:
        out = out.index_put(tuple(idx.unbind(0)), values, accumulate=True)
    out._coo = (idx, values, bool(coalesced))   # the description, for _indices() / _values()
    return out


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, pin_memory=False,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """torch.sparse_coo_tensor, as the dense tensor it describes (module docstring)."""
    return _coo_dense(indices, values, size, dtype, requires_grad, "sparse_coo_tensor",
                      bool(is_coalesced))


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory=False, requires_grad=False, check_invariants=None):
    """torch.sparse_csr_tensor (2-D, compressed rows), as the dense tensor it describes."""
    crow = _as_tensor(crow_indices, _C.int64).to(_C.int64)
    col = _as_tensor(col_indices, _C.int64).to(_C.int64)
    if crow.dim() != 1 or col.dim() != 1:
        raise RuntimeError("crow_indices and col_indices must be 1-D (batched CSR is not "
                           "supported by cddp)")
    counts = crow[1:] - crow[:-1]
    if crow.numel() == 0 or int(crow[0]) != 0 or bool((counts < 0).any()) \
            or int(crow[-1]) != col.numel():
        raise RuntimeError("crow_indices must start at 0, be nondecreasing and end at "
                           "the number of entries (col_indices.numel())")
    rows = _C.repeat_interleave(_C.arange(crow.numel() - 1), counts)
    if size is None:
        size = (crow.numel() - 1, int(col.max()) + 1 if col.numel() else 0)
    return _coo_dense(_C.stack([rows, col]), values, size, dtype, requires_grad,
                      "sparse_csr_tensor")


def _legacy(dtype, name):
    def make(*args, size=None, device=None):
        """torch.sparse.<T>Tensor(indices, values, size) (deprecated in torch)."""
        warnings.warn(f"torch.sparse.SparseTensor(indices, values, shape, *, device=) is "
                      f"deprecated.  Please use torch.sparse_coo_tensor(indices, values, "
                      f"shape, dtype=, device=).", UserWarning, stacklevel=2)
        if len(args) == 3 or (len(args) == 2 and size is not None):
            indices, values = args[0], args[1]
            shape = args[2] if len(args) == 3 else size
            return _coo_dense(indices, values, shape, dtype, False, f"torch.sparse.{name}")
        if len(args) == 1 and not isinstance(args[0], _C.Tensor):   # a size: all zeros
            return _coo_dense(_C.zeros((len(args[0]), 0), dtype=_C.int64),
                              _C.zeros(0, dtype=dtype), tuple(args[0]), dtype, False,
                              f"torch.sparse.{name}")
        raise TypeError(f"torch.sparse.{name}(): takes (indices, values, size) or (size) in "
                        "cddp")
    make.__name__ = make.__qualname__ = name
    return make


FloatTensor = _legacy(_C.float32, "FloatTensor")
DoubleTensor = _legacy(_C.float64, "DoubleTensor")
HalfTensor = _legacy(_C.float16, "HalfTensor")
BFloat16Tensor = _legacy(_C.bfloat16, "BFloat16Tensor")
LongTensor = _legacy(_C.int64, "LongTensor")
IntTensor = _legacy(_C.int32, "IntTensor")
ShortTensor = _legacy(_C.int16, "ShortTensor")
CharTensor = _legacy(_C.int8, "CharTensor")
ByteTensor = _legacy(_C.uint8, "ByteTensor")
BoolTensor = _legacy(_C.bool, "BoolTensor")


def mm(mat1, mat2, reduce="sum"):
    """torch.sparse.mm: mat1 @ mat2 (dense here; reduce other than "sum" is for CSR)."""
    if reduce != "sum":
        raise NotImplementedError(f"torch.sparse.mm(reduce={reduce!r}) needs a CSR tensor; "
                                  "cddp has no sparse tensors")
    return _C.mm(mat1, mat2)


def addmm(mat, mat1, mat2, *, beta=1.0, alpha=1.0):
    """torch.sparse.addmm: beta * mat + alpha * (mat1 @ mat2)."""
    return _C.addmm(mat, mat1, mat2, beta=beta, alpha=alpha)


def sum(input, dim=None, dtype=None):  # noqa: A001 (torch's name)
    """torch.sparse.sum: the sum over dim (all dims when None) of the dense values."""
    if dim is None:
        return input.sum(dtype=dtype)
    return input.sum(dim, dtype=dtype)


def _entries_softmax(name):
    def fn(input, dim, dtype=None):  # noqa: A002
        """torch.sparse.<name> over the specified entries (a stand-in's description, else the
        nonzero entries): unspecified ones count as -inf and stay unspecified (0 here)."""
        from ._compat import _coo_of
        idx = _coo_of(input)[0]
        if idx.shape[0] != input.dim():
            raise NotImplementedError(f"cddp: sparse.{name} of a hybrid tensor (dense value "
                                      f"dims) is not supported")
        held = _C.zeros(input.shape, dtype=_C.bool)
        held[tuple(idx.unbind(0))] = True
        x = input if dtype is None else input.to(dtype)
        y = getattr(_C, name)(x.masked_fill(~held, float("-inf")), dim)
        out = y.masked_fill(~held, 0.0)
        out._coo = (idx, out[tuple(idx.unbind(0))], True)
        return out
    fn.__name__ = fn.__qualname__ = name
    return fn


softmax = _entries_softmax("softmax")
log_softmax = _entries_softmax("log_softmax")


class check_sparse_tensor_invariants(_NoOpContextDecorator):
    """torch.sparse.check_sparse_tensor_invariants: cddp always checks (a context manager
    and decorator that changes nothing)."""

    def __init__(self, enable=True):
        self._requested = enable

    @staticmethod
    def is_enabled():
        return True

    @staticmethod
    def enable():
        pass

    @staticmethod
    def disable():
        pass


def to_sparse(self, *args, **kwargs):
    """Tensor.to_sparse / to_sparse_coo / to_sparse_csr (installed by _compat.py): the tensor
    itself (module docstring)."""
    _warn_dense("Tensor.to_sparse", 4)       # <- _compat's method <- the user
    return self
