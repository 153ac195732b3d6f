"""torch's shape, product and bookkeeping functions that wire cddp's C ops together: cross,
diff, rot90, broadcast_to / broadcast_tensors / broadcast_shapes, ravel, inner, vdot,
tensordot, diagflat, combinations, tril_indices / triu_indices, range, logspace, is_nonzero,
typename, asarray, numel, is_floating_point, is_complex / conj / real / imag on real tensors,
use_deterministic_algorithms and its queries, set/get_num_interop_threads; and the Tensor
methods torch scripts call that are one or two C ops each (unfold, new, fill_diagonal_,
sum_to_size, split_with_sizes, in-place comparisons and bitwise ops, H / mH / adjoint, ...).

Decisions: Tensor.unfold is a view (as_strided), as torch's; an input with negative strides
gets a copy gathered by index instead (values and gradients the same, writes do not reach it).
torch.range is range_ here (exported
as cddp.range) so this module's own loops keep Python's range. use_deterministic_algorithms
only records the flag: cddp's CPU kernels and its collectives
already give the same bits on every run for the same inputs and thread count."""
import functools
import itertools
import math
import sys
import warnings

import numpy as np

from . import _C
from ._ops import _dim, _return_type, numpy_names
from ._pointwise import _inplace

Tensor = _C.Tensor


def cross(input, other, dim=None):  # noqa: A002
    """The 3-vector cross product along dim (None: the first dim of size 3, as torch warns)."""
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    if dim is None:
        dims = [k for k in range(input.dim()) if input.shape[k] == 3 and other.shape[k] == 3]
        if not dims:
            raise RuntimeError("no dimension of size 3 in input")
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\n"
                      "Please either pass the dim explicitly or simply use torch.linalg.cross.\n"
                      "The default value of dim will change to agree with that of "
                      "linalg.cross in a future release.", UserWarning, stacklevel=2)
        dim = dims[0]
    d = _dim(dim, input.dim())
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{input.shape[d]} and {other.shape[d]}")
    a = [input.narrow(d, k, 1) for k in range(3)]
    b = [other.narrow(d, k, 1) for k in range(3)]
    return _C.cat([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                   a[0] * b[1] - a[1] * b[0]], d)


def diff(input, n=1, dim=-1, prepend=None, append=None):  # noqa: A002
    """The n-th forward difference along dim (bool: !=), after prepend / append."""
    if input.dim() == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = _dim(dim, input.dim())
    if n == 0:
        return input
    parts = [t for t in (prepend, input, append) if t is not None]
    x = _C.cat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = (hi != lo) if x.dtype == _C.bool else hi - lo
    return x


def rot90(input, k=1, dims=(0, 1)):  # noqa: A002
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.dim() < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.dim()}")
    d0, d1 = _dim(dims[0], input.dim()), _dim(dims[1], input.dim())
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and "
                           f"dim1 = {d1}")
    k %= 4
    if k == 1:
        return input.flip(d1).transpose(d0, d1)
    if k == 2:
        return input.flip(d0, d1)
    if k == 3:
        return input.flip(d0).transpose(d0, d1)
    return input.clone()


def broadcast_shapes(*shapes):
    out = []
    for shape in shapes:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        for k, s in enumerate(reversed(shape)):
            if k == len(out):
                out.append(s)
            elif out[k] == 1 or s == out[k]:
                out[k] = s
            elif s != 1:
                raise RuntimeError(f"Shape mismatch: objects cannot be broadcast to a single "
                                   f"shape.  Mismatch is between {tuple(out[::-1])} and "
                                   f"{shape}.")
    from ._size import Size
    return Size(reversed(out))


def broadcast_to(input, size):  # noqa: A002
    return input.expand(*size)


def broadcast_tensors(*tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = tuple(broadcast_shapes(*(t.shape for t in tensors)))
    return tuple(t.expand(*shape) for t in tensors)


def ravel(input):  # noqa: A002
    return input.reshape(-1)


def inner(input, other):  # noqa: A002
    """Sum over the last dims of both: shape input.shape[:-1] + other.shape[:-1]."""
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(input.shape)} and {list(other.shape)}")
    k = input.shape[-1]
    r = input.reshape(-1, k).matmul(other.reshape(-1, k).t())
    return r.reshape(*input.shape[:-1], *other.shape[:-1])


def vdot(input, other):  # noqa: A002
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.dim()}D and {other.dim()}D "
                           "tensors")
    return _C.dot(input, other)


def tensordot(a, b, dims=2, out=None):
    """Contract dims of a with dims of b (int n: a's last n with b's first n)."""
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    elif isinstance(dims, Tensor):
        dims = dims.tolist()
        if isinstance(dims, int):
            return tensordot(a, b, dims)
        da, db = ([dims[0]] if isinstance(dims[0], int) else list(dims[0]),
                  [dims[1]] if isinstance(dims[1], int) else list(dims[1]))
    else:
        da, db = ([dims[0]] if isinstance(dims[0], int) else list(dims[0]),
                  [dims[1]] if isinstance(dims[1], int) else list(dims[1]))
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    da = [_dim(d, a.dim()) for d in da]
    db = [_dim(d, b.dim()) for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a.shape[x]} in dim {x} and second has size {b.shape[y]} in "
                               f"dim {y}")
    fa = [d for d in range(a.dim()) if d not in da]
    fb = [d for d in range(b.dim()) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    # the free sizes are explicit: -1 cannot be inferred when k is 0
    am = a.permute(*fa, *da).reshape(math.prod(a.shape[d] for d in fa), k)
    bm = b.permute(*db, *fb).reshape(k, math.prod(b.shape[d] for d in fb))
    r = am.matmul(bm).reshape(*[a.shape[d] for d in fa], *[b.shape[d] for d in fb])
    if out is not None:
        return out.copy_(r)
    return r


def diagflat(input, offset=0):  # noqa: A002
    return _C.diag(input.reshape(-1), offset)


def combinations(input, r=2, with_replacement=False):  # noqa: A002
    """The length-r combinations of a 1-D tensor's elements, one row each (r, n tiny: the
    index table is built on the host, the values gathered in C)."""
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return _C.empty((0,), dtype=input.dtype)
    gen = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    idx = np.array(list(gen(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if idx.shape[0] == 0:
        return _C.empty((0, r) if r > 1 else (0,), dtype=input.dtype)
    return input.index_select(0, _C.from_numpy(idx.reshape(-1))).reshape(-1, r)


def _tri_indices(np_fn, row, col, offset, dtype):
    rr, cc = np_fn(row, offset, col)
    return _C.from_numpy(np.stack([rr, cc]).astype(np.int64)).to(dtype)


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(np.tril_indices, row, col, offset, dtype or _C.int64)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(np.triu_indices, row, col, offset, dtype or _C.int64)


def range_(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False,
             **_):
    """torch.range: like arange but end included, and floating by default (deprecated)."""
    warnings.warn("torch.range is deprecated and will be removed in a future release because "
                  "its behavior is inconsistent with Python's range builtin. Instead, use "
                  "torch.arange, which produces values in [start, end).", UserWarning,
                  stacklevel=2)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    n = int(math.floor((end - start) / step)) + 1
    dtype = dtype or _C.get_default_dtype()
    t = (_C.arange(max(n, 0), dtype=_C.float64) * step + start).to(dtype)
    return t.requires_grad_(True) if requires_grad else t


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False,
             **_):
    dtype = dtype or _C.get_default_dtype()
    exps = _C.linspace(start, end, steps, dtype=_C.float64)
    t = _C.pow(float(base), exps).to(dtype)
    return t.requires_grad_(True) if requires_grad else t


def is_nonzero(input):  # noqa: A002
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item() != 0)


def typename(obj):
    if isinstance(obj, Tensor):
        return obj.type()
    module = type(obj).__module__
    name = type(obj).__qualname__
    return name if module in (None, "builtins") else f"{module}.{name}"


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    if isinstance(obj, Tensor):
        t = obj if dtype is None else obj.to(dtype)
        if copy and t is obj:
            t = obj.clone()
    elif copy is False and not isinstance(obj, np.ndarray):
        raise ValueError("can't alias the given object without copying it")
    else:
        t = _C.as_tensor(np.array(obj, copy=True) if copy else obj, dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t



def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """torch.frombuffer: a 1-D tensor over the bytes of an object with the buffer protocol,
    sharing its memory (writes through the tensor reach the buffer). Torch's argument
    checks and messages. Differs from torch: a read-only buffer (bytes) is copied, with a
    warning, instead of being shared and writable through the tensor."""
    view = memoryview(buffer).cast("B")
    n = view.nbytes
    size = dtype.itemsize
    if n == 0 or count == 0:
        raise ValueError(f"both buffer length ({n}) and count ({count}) must not be 0")
    if not 0 <= offset < n:
        raise ValueError(f"offset ({offset} bytes) must be non-negative and no greater than "
                         f"buffer length ({n} bytes) minus 1")
    if count < 0:
        if (n - offset) % size:
            raise ValueError(f"buffer length ({n - offset} bytes) after offset ({offset} bytes) "
                             f"must be a multiple of element size ({size})")
        count = (n - offset) // size
    elif count * size > n - offset:
        raise ValueError(f"requested buffer length ({count} * {size} bytes) after offset "
                         f"({offset} bytes) must not be greater than actual buffer length "
                         f"({n} bytes)")
    raw = np.frombuffer(view, dtype=np.uint8, count=count * size, offset=offset)
    if view.readonly:
        warnings.warn("The given buffer is not writable; cddp copies it (torch would share "
                      "it and let the tensor write into it)", UserWarning, stacklevel=2)
        raw = raw.copy()
    t = _C.from_numpy(raw).view(dtype)
    return t.requires_grad_(True) if requires_grad else t

def numel(input):  # noqa: A002
    return input.numel()


def is_floating_point(input):  # noqa: A002
    return input.is_floating_point()


def is_complex(input):  # noqa: A002
    # a complex tensor (cddp/_complex.py) carries the marker; cddp's tensors are real
    return getattr(input, "_is_complex_tensor", False)


def _real_views(tensors):
    """tensors with each complex one (cddp/_complex.py) as its real (..., 2) view: what
    cddp's optimizers step, DDP broadcasts and reduces and clipping scales. The list itself
    while no complex tensor can exist (the module was never loaded): nothing to look at."""
    if "cddp._complex" not in sys.modules:
        return tensors
    return [t._r if getattr(t, "_is_complex_tensor", False) else t for t in tensors]


def conj(input):  # noqa: A002
    return input.conj()


def real(input):  # noqa: A002
    return input.real


def imag(input):  # noqa: A002
    if getattr(input, "_is_complex_tensor", False):
        return input.imag
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


_DETERMINISTIC = {"on": False, "warn_only": False}
_INTEROP_THREADS = [1]


def use_deterministic_algorithms(mode, *, warn_only=False):
    if not isinstance(mode, bool):
        raise RuntimeError(f"use_deterministic_algorithms expects a bool, but got "
                           f"{type(mode).__name__}")
    _DETERMINISTIC["on"], _DETERMINISTIC["warn_only"] = mode, bool(warn_only)


def are_deterministic_algorithms_enabled():
    return _DETERMINISTIC["on"]


def is_deterministic_algorithms_warn_only_enabled():
    return _DETERMINISTIC["warn_only"]


def set_deterministic_debug_mode(debug_mode):
    modes = {"default": 0, "warn": 1, "error": 2}
    mode = modes.get(debug_mode, debug_mode)
    if mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, "
                           f"`error`, but got {debug_mode}")
    use_deterministic_algorithms(mode > 0, warn_only=mode == 1)


def get_deterministic_debug_mode():
    if not _DETERMINISTIC["on"]:
        return 0
    return 1 if _DETERMINISTIC["warn_only"] else 2


def set_num_interop_threads(n):
    if not isinstance(n, int) or n <= 0:
        raise RuntimeError("Expected positive number of threads")
    _INTEROP_THREADS[0] = n


def get_num_interop_threads():
    return _INTEROP_THREADS[0]


# ---- Tensor methods --------------------------------------------------------------------------

def _unfold(self, dimension, size, step):
    """Windows of `size` every `step` along dimension, the window as a new last dim: a view
    (as_strided over self's storage, as torch's), or a gathered copy for an input with
    negative strides (which as_strided cannot express)."""
    d = _dim(dimension, self.dim())
    n = self.shape[d] if self.dim() else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if self.dim() == 0:                  # torch: the one element as a window of `size` (0 or 1)
        return self.reshape(1)[:size]
    count = (n - size) // step + 1
    st = self.stride()
    if min(st) >= 0:
        shape = tuple(self.shape[:d]) + (count,) + tuple(self.shape[d + 1:]) + (size,)
        strides = st[:d] + (st[d] * step,) + st[d + 1:] + (st[d],)
        return self.as_strided(shape, strides)
    idx = (_C.arange(count).unsqueeze(1) * step + _C.arange(size)).reshape(-1)
    x = self.index_select(d, idx)                            # (..., count * size, ...)
    x = x.reshape(*self.shape[:d], count, size, *self.shape[d + 1:])
    return x.movedim(d + 1, -1)


def _new(self, *args, **kwargs):
    """Tensor.new: a tensor of self's dtype from data, or uninitialised of the given sizes."""
    dtype = kwargs.pop("dtype", self.dtype)
    kwargs.pop("device", None)
    if not args:
        return _C.empty((0,), dtype=dtype)
    if len(args) == 1 and not isinstance(args[0], int):
        a = args[0]
        if type(a).__name__ == "Size":                  # x.new(torch.Size([2, 3])): sizes
            return _C.empty(tuple(a), dtype=dtype)
        return _C.tensor(a, dtype=dtype)                # x.new([1, 2]): data
    return _C.empty(args, dtype=dtype)


def _fill_diagonal_(self, fill_value, wrap=False):
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len(set(self.shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    n, m = self.shape[0], self.shape[1]
    if self.dim() == 2:
        rows = np.arange(n if (wrap and n > m) else min(n, m))
        if wrap and n > m:                      # numpy's wrap: restart every m + 1 rows
            rows = rows[rows % (m + 1) != m]
            cols = rows % (m + 1)
        else:
            cols = rows
        self[_C.from_numpy(rows.astype(np.int64)), _C.from_numpy(cols.astype(np.int64))] = \
            fill_value
        return self
    k = _C.arange(n)
    self[(k,) * self.dim()] = fill_value
    return self


def _sum_to_size(self, *size):
    if len(size) == 1 and not isinstance(size[0], int):
        size = tuple(size[0])
    lead = self.dim() - len(size)
    if lead < 0 or any(s not in (1, t) for s, t in zip(size, self.shape[lead:])):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size "
                           f"{{{list(self.shape)}}}.")
    x = self.sum(dim=tuple(range(lead))) if lead else self
    keep = tuple(k for k, s in enumerate(size) if s == 1 and x.shape[k] != 1)
    if keep:
        x = x.sum(dim=keep, keepdim=True)
    return x


def _is_same_size(self, other):
    return tuple(self.shape) == tuple(other.shape)


def _split_with_sizes(self, split_sizes, dim=0):
    return self.split(list(split_sizes), dim)


def _cumsum_(self, dim, *, dtype=None):
    return self.copy_(self.cumsum(dim))


def _zero_grad_through(out, inputs):
    """A sample `out` drawn from `inputs`: under grad mode, those that require grad get a zero
    gradient through it (torch's NormalBackward / BernoulliBackward0 / PoissonBackward0:
    samples are not reparameterized); otherwise `out` as it is."""
    if _C.is_grad_enabled():
        for a in inputs:
            if isinstance(a, _C.Tensor) and a.requires_grad:
                out = out + (a - a.detach()) * 0
    return out


def _zero_grad_sampler(fn):
    """fn (torch.normal, torch.bernoulli) with _zero_grad_through on its tensor arguments."""
    @functools.wraps(fn)
    def sample(*args, **kwargs):
        out = fn(*args, **kwargs)
        if kwargs.get("out") is not None:
            return out
        return _zero_grad_through(out, itertools.chain(args, kwargs.values()))
    return sample


def _bernoulli(self, p=None, *, generator=None):
    if p is None:
        out = _C.bernoulli(self, generator=generator)
    elif isinstance(p, (int, float)):   # torch's scalar-p kernel: bernoulli(self, p)'s numbers
        out = _C.empty_like(self).bernoulli_(p, generator=generator)
    else:
        out = _C.bernoulli(_C.full_like(self, p), generator=generator).to(self.dtype)
    return _zero_grad_through(out, (self,))


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    return _C.multinomial(self, num_samples, replacement, generator=generator)


def _addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    return self.copy_(_C.addmm(self, mat1, mat2, beta=beta, alpha=alpha))


def _addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    return self.copy_(_C.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)) \
        if hasattr(_C, "addbmm") else NotImplemented


_INPLACE = ("eq", "ne", "lt", "le", "gt", "ge", "not_equal", "less", "less_equal", "greater",
            "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
            "bitwise_or", "bitwise_xor", "fmod", "remainder", "floor_divide")
for _n in _INPLACE:
    if not hasattr(Tensor, _n + "_"):
        setattr(Tensor, _n + "_", _inplace(getattr(_C, _n)))

diff = numpy_names(diff)
for _n in ("cross", "diff", "rot90", "broadcast_to", "ravel", "inner", "vdot", "diagflat",
           "is_nonzero", "is_complex"):
    setattr(Tensor, _n, globals()[_n])
Tensor.unfold = _unfold
Tensor.new = _new
Tensor.fill_diagonal_ = _fill_diagonal_
Tensor.sum_to_size = _sum_to_size
Tensor.is_same_size = _is_same_size
Tensor.split_with_sizes = _split_with_sizes
Tensor.cumsum_ = _cumsum_
Tensor.bernoulli = _bernoulli
Tensor.multinomial = _multinomial
Tensor.addmm_ = _addmm_
Tensor.conj = Tensor.resolve_conj = Tensor.resolve_neg = Tensor.conj_physical = \
    lambda self: self
Tensor.is_conj = Tensor.is_neg = lambda self: False
Tensor.is_signed = lambda self: self.dtype not in (_C.bool, _C.uint8)
Tensor.adjoint = lambda self: self.transpose(-2, -1)
Tensor.H = property(lambda self: self.t() if self.dim() == 2 else _raise_H(self),
                    doc="the conjugate transpose of a matrix (real tensors: the transpose)")
Tensor.mH = property(lambda self: self.transpose(-2, -1), doc="the last two dims transposed")
Tensor.real = property(lambda self: self, doc="a real tensor's real part: itself")
Tensor.is_cpu = property(lambda self: self.device.type == "cpu")
Tensor.nbytes = property(lambda self: self.numel() * self.element_size())
Tensor.itemsize = property(lambda self: self.element_size())
del _n


def _raise_H(self):
    hint = " For batches of matrices, consider using tensor.mH" if self.dim() > 2 else ""
    raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                       f"{self.dim()}-D tensor.{hint}")


__all__ = ["cross", "diff", "rot90", "broadcast_shapes", "broadcast_to", "broadcast_tensors",
           "ravel", "inner", "vdot", "tensordot", "diagflat", "combinations", "tril_indices",
           "triu_indices", "range_", "logspace", "is_nonzero", "typename", "asarray", "numel",
           "is_floating_point", "is_complex", "conj", "real", "imag",
           "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
           "get_deterministic_debug_mode", "set_num_interop_threads", "get_num_interop_threads"]


# ---- scatter-into-a-copy forms and index helpers --------------------------------------------

def select_scatter(input, src, dim, index):  # noqa: A002
    """A copy of input with input.select(dim, index) replaced by src (differentiable in
    both)."""
    out = input.clone()
    d = _dim(dim, input.dim())
    key = [slice(None)] * input.dim()
    key[d] = index
    out[tuple(key)] = src              # setitem on out itself: CopySlices keeps both histories
    return out


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):  # noqa: A002
    """A copy of input with the slice start:end:step along dim replaced by src."""
    out = input.clone()
    d = _dim(dim, input.dim())
    idx = [slice(None)] * input.dim()
    idx[d] = slice(start, end, step)
    out[tuple(idx)] = src
    return out


def masked_scatter(input, mask, source):  # noqa: A002
    """A copy of input whose positions where mask is True take source's first elements, in
    row-major order."""
    if mask.dtype != _C.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {mask.dtype}")
    out = input.clone()
    m = mask.expand(input.shape) if tuple(mask.shape) != tuple(input.shape) else mask
    k = int(m.sum())
    if k > source.numel():
        raise RuntimeError("masked_scatter: expected source to have at least as many elements "
                           f"as ones in mask ({k}), got {source.numel()}")
    out[m] = source.reshape(-1)[:k]
    return out


def unravel_index(indices, shape):
    """The coordinates (a tuple of int64 tensors) of flat indices into a row-major `shape`."""
    if isinstance(indices, int):
        indices = _C.tensor(indices)
    if indices.is_floating_point() or indices.dtype == _C.bool:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got " + str(shape))
    total = math.prod(shape)
    idx = indices.long()
    if bool(((idx < -total) | (idx >= total)).any()):
        raise ValueError("'indices' must be in range [-" + str(total) + ", " + str(total - 1)
                         + "]")
    idx = _C.where(idx < 0, idx + total, idx)
    coords = []
    for s in reversed(shape):
        coords.append(idx % s)
        idx = idx // s
    return tuple(reversed(coords))


def vander(x, N=None, increasing=False):  # noqa: N803 (torch's argument name)
    """The Vandermonde matrix of the 1-D x: columns x^(N-1) ... x^0 (or increasing)."""
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    if n == 0:
        return _C.zeros((x.shape[0], 0), dtype=x.dtype if x.is_floating_point() else _C.int64)
    base = x if x.is_floating_point() else x.long()
    # columns 1, x, x*x, ...: a running product along the rows of [1, x, x, ...]  (L, n)
    rows = _C.cat([_C.ones_like(base).unsqueeze(1), base.unsqueeze(1).expand(-1, n - 1)], 1)
    out = rows.cumprod(1)
    return out if increasing else out.flip(-1)


def _put(self, index, source, accumulate=False):
    """A copy of self with source written (or added) at flat row-major positions index
    (negative from the end), as torch's Tensor.put."""
    n = self.numel()
    if index.numel() != source.numel():
        raise IndexError("put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.numel()}, "
                         f"index.numel() = {index.numel()}")
    idx = index.reshape(-1).long()
    if idx.numel() and bool(((idx < -n) | (idx >= n)).any()):
        bad = int(idx[(idx < -n) | (idx >= n)][0])
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} "
                         "elements.")
    flat = self.reshape(-1).index_put((_C.where(idx < 0, idx + n, idx),), source.reshape(-1),
                                      accumulate)
    return flat.view(tuple(self.shape))


def _put_(self, index, source, accumulate=False):
    return self.copy_(_put(self, index, source, accumulate))


_INDEX_REDUCE = ("prod", "mean", "amax", "amin")


def _index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """A copy of self whose slices index[i] along dim are reduced with source's slice i
    (torch's index_reduce: scatter_reduce with the index spread over source's shape)."""
    if reduce not in _INDEX_REDUCE:
        raise RuntimeError("index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    d = _dim(dim, max(self.dim(), 1))
    if index.dim() > 1 or index.numel() != (source.shape[d] if source.dim() else 1):
        raise IndexError("index_reduce_(): Index should have dimension 1 and as many elements "
                         "as source has along dim")
    shape = [1] * source.dim()
    if shape:
        shape[d] = index.numel()
    spread = index.long().view(shape).expand(tuple(source.shape))
    return self.scatter_reduce(d, spread, source, reduce, include_self=include_self)


def _index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return self.copy_(_index_reduce(self, dim, index, source, reduce,
                                    include_self=include_self))


def _python_elementwise(name, self, others, fn):
    """self[i] = fn(self[i], other[i], ...) through Python numbers (torch's CPU-only apply_ /
    map_ / map2_: a Python call per element either way)."""
    if self.requires_grad:
        raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use "
                           f"var.detach().{name}() instead.")
    cols = [self.reshape(-1).tolist()] + [o.expand(tuple(self.shape)).reshape(-1).tolist()
                                         for o in others]
    out = [fn(*vals) for vals in zip(*cols)]
    return self.copy_(_C.tensor(out, dtype=self.dtype).view(tuple(self.shape)))


Tensor.put = _put
Tensor.put_ = _put_
Tensor.index_reduce = _index_reduce
Tensor.index_reduce_ = _index_reduce_
Tensor.apply_ = lambda self, callable: _python_elementwise("apply_", self, (), callable)
Tensor.map_ = lambda self, tensor, callable: _python_elementwise("map_", self, (tensor,),
                                                                 callable)
Tensor.map2_ = lambda self, x, y, callable: _python_elementwise("map2_", self, (x, y), callable)
Tensor.hardshrink = lambda self, lambd=0.5: _functional().hardshrink(self, lambd)
Tensor.prelu = lambda self, weight: _functional().prelu(self, weight)


def _functional():
    from .nn import functional
    return functional


def put(input, index, source, accumulate=False):  # noqa: A002
    return _put(input, index, source, accumulate)


def index_reduce(input, dim, index, source, reduce, *, include_self=True):  # noqa: A002
    return _index_reduce(input, dim, index, source, reduce, include_self=include_self)


Tensor.select_scatter = select_scatter
Tensor.slice_scatter = slice_scatter
Tensor.masked_scatter = masked_scatter
Tensor.masked_scatter_ = lambda self, mask, source: self.copy_(masked_scatter(self, mask, source))
__all__ += ["select_scatter", "slice_scatter", "masked_scatter", "unravel_index", "vander",
            "frombuffer", "put", "index_reduce"]


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):  # noqa: A002
    """A copy of input with input.diagonal(offset, dim1, dim2) replaced by src."""
    out = input.clone()
    out.diagonal(offset, dim1, dim2).copy_(src)      # an in-place op on a view: CopySlices
    return out


def as_strided_scatter(input, src, size, stride, storage_offset=None):  # noqa: A002
    """A copy of input (contiguous) with its as_strided(size, stride, storage_offset) view
    replaced by src; the strides address the copy's elements in row-major order."""
    out = input.contiguous().clone()
    out.as_strided(size, stride, 0 if storage_offset is None else storage_offset).copy_(src)
    return out


def frexp(input):  # noqa: A002
    """(mantissa, exponent) with input = mantissa * 2**exponent, |mantissa| in [0.5, 1)
    (0 for 0): NumPy's frexp; the exponent int32, as torch's. No gradient."""
    import numpy as np
    if not input.is_floating_point():
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    m, e = np.frexp(input.detach().float().numpy() if input.dtype in (_C.float16, _C.bfloat16)
                    else input.detach().numpy())
    return _frexp_result((_C.from_numpy(np.asarray(m, order="C")).to(input.dtype),
                          _C.from_numpy(np.asarray(e.astype(np.int32), order="C"))))


def ger(input, vec2):  # noqa: A002
    """torch.ger: the outer product (torch.outer's old name)."""
    return _C.outer(input, vec2)


def nonzero_static(input, *, size, fill_value=-1):  # noqa: A002
    """torch.nonzero_static: nonzero's (n, ndim) indices cut or padded (with fill_value) to
    exactly `size` rows."""
    idx = input.nonzero()
    n = idx.shape[0]
    if n >= size:
        return idx[:size]
    pad = _C.full((size - n, input.dim()), fill_value, dtype=idx.dtype)
    return _C.cat([idx, pad])


_frexp_result = _return_type("frexp", ("mantissa", "exponent"))
for _n in ("diagonal_scatter", "as_strided_scatter", "frexp", "ger", "nonzero_static"):
    setattr(Tensor, _n, globals()[_n])
Tensor.unsafe_chunk = lambda self, chunks, dim=0: self.chunk(chunks, dim)
Tensor.unsafe_split = lambda self, split_size, dim=0: self.split(split_size, dim)
Tensor.unsafe_split_with_sizes = lambda self, split_sizes, dim=0: self.split(list(split_sizes),
                                                                            dim)
del _n
__all__ += ["diagonal_scatter", "as_strided_scatter", "frexp", "ger", "nonzero_static"]
