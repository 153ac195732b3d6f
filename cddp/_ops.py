"""torch functions that only wire cddp's C ops together (no per-element work in Python):
cummax/cummin's named result, take_along_dim, meshgrid / cartesian_prod, atleast_1d/2d/3d,
block_diag, tensor_split / hsplit / vsplit / dsplit, hstack / vstack / dstack / column_stack,
kron, and count_nonzero / isposinf / isneginf / signbit. Every value comes from a C kernel (gather, expand, narrow, cat, mul, reshape), so
autograd comes from those ops' nodes. Signatures, defaults and messages are torch's."""
import functools
import warnings

from . import _C

Tensor = _C.Tensor


def numpy_names(fn):
    """fn accepting torch's NumPy spellings of two keywords, as every torch function does
    (its argument parser maps them): axis= for dim=, keepdims= for keepdim=. For the
    reductions written in Python; the C ones map them in their parsers."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for np_name, name in (("axis", "dim"), ("keepdims", "keepdim")):
            if np_name in kwargs:
                if name in kwargs:
                    raise TypeError(f"{fn.__name__}() got multiple values for argument "
                                    f"'{name}'")
                kwargs[name] = kwargs.pop(np_name)
        return fn(*args, **kwargs)
    return wrapper


def _autocast_lower(*ts):
    """torch's lower_precision_fp autocast rule for the ops written in Python (prelu,
    scaled_dot_product_attention; the C ops call amp/amp.h's gate, whose dtype rule this asks
    for): inside an autocast region float32 tensors are cast to its dtype; anything else, and
    everything outside a region, passes unchanged."""
    dt = _C._autocast_lower_dtype()
    if dt is None:
        return ts
    return tuple(t.to(dt) if isinstance(t, Tensor) and t.dtype == _C.float32 else t for t in ts)


def _autocast_fp32(*ts):
    """torch's fp32 autocast rule for the ops written in Python (the losses, cdist, 3-D
    pooling, reflect / replicate padding, grid_sample: torch's CPU fp32 list; the C ops call
    amp/amp.h's gate): inside an autocast region float16 / bfloat16 tensors are cast to
    float32; anything else, and everything outside a region, passes unchanged."""
    if _C._autocast_lower_dtype() is None:
        return ts
    return tuple(t.float() if isinstance(t, Tensor) and (t.dtype == _C.float16 or
                                                          t.dtype == _C.bfloat16) else t
                 for t in ts)


def autocast_fp32_op(fn):
    """fn on torch's CPU autocast fp32 list (linear algebra, quantile, some pooling, polar):
    inside an autocast region its float16 / bfloat16 tensor arguments (not out=) arrive as
    float32 and its body runs outside the region, as torch's kernel runs below the autocast
    dispatch (a composite's own matmuls stay float32); outside one the call goes straight
    through."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _C._autocast_lower_dtype() is None:
            return fn(*args, **kwargs)
        args = _autocast_fp32(*args)
        kwargs = {k: v if k == "out" else _autocast_fp32(v)[0] for k, v in kwargs.items()}
        with autocast_suspended():
            return fn(*args, **kwargs)
    return wrapper


class autocast_suspended:
    """A block whose C ops see no autocast region: for ops written in Python whose inner
    GEMMs are an implementation detail (interpolate's bicubic / antialias tables), which torch
    runs in the input's dtype whatever the region. Restores both device types' flags."""

    def __enter__(self):
        self.prev = [(d, _C.is_autocast_enabled(d)) for d in ("cpu", "cuda")]
        for d, _ in self.prev:
            _C.set_autocast_enabled(d, False)
        return self

    def __exit__(self, *exc):
        for d, on in self.prev:
            _C.set_autocast_enabled(d, on)
        return False


# tensor-tensor promotion of cddp's dtypes is a chain: bool < int32 < int64 < float32 < float64
def promote_types(type1, type2):
    """torch.promote_types, complex dtypes included (complex64 with float64 -> complex128,
    with any integer or 16-bit float -> complex64)."""
    c1, c2 = getattr(type1, "_cddp_complex", False), getattr(type2, "_cddp_complex", False)
    if not (c1 or c2):
        return _C.promote_types(type1, type2)
    from ._complex import _OF_REAL
    return _OF_REAL[_C.promote_types(type1.to_real() if c1 else type1,
                                     type2.to_real() if c2 else type2)]


def _promoted(tensors):
    """torch's promotion over the tensors' dtypes (every dtype: bfloat16 + float16 ->
    float32, uint8 + int8 -> int16, complex)."""
    return functools.reduce(promote_types, (t.dtype for t in tensors))


def _is_tensor(t):
    """A Tensor, or a complex tensor (cddp/_complex.py's wrapper)."""
    return isinstance(t, Tensor) or getattr(t, "_is_complex_tensor", False)


def _tensors(args, fn):
    """torch's *tensors arguments: f(a, b) or f([a, b]) / f((a, b))."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    for t in args:
        if not _is_tensor(t):
            raise TypeError(f"{fn}(): expected Tensor as element of argument 'tensors', but got "
                            f"{type(t).__name__}")
    return tuple(args)


class _ReturnTuple(tuple):
    """torch.return_types.<name>: a tuple with named fields, built from one iterable as torch's
    structseqs are (so pickling, which rebuilds from the items, works)."""
    __slots__ = ()
    _name = "pair"
    _fields = ("values", "indices")

    def __new__(cls, items):
        return tuple.__new__(cls, items)

    def __getattr__(self, name):
        try:
            return self[type(self)._fields.index(name)]
        except ValueError:
            raise AttributeError(name) from None

    def __repr__(self):
        body = ",\n".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
        return f"torch.return_types.{self._name}(\n{body})"


def _return_type(name, fields=("values", "indices"), module=__name__):
    """The result type of torch function `name` (class <name>_result in `module`)."""
    return type(f"{name}_result", (_ReturnTuple,),
                {"__slots__": (), "_name": name, "_fields": fields, "__module__": module})


cummax_result = _return_type("cummax")
cummin_result = _return_type("cummin")


def _dim(d, nd):
    """d as a non-negative dim of an nd-dim tensor (a 0-dim tensor takes -1 and 0), else
    torch's IndexError."""
    n = max(nd, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return d + n if d < 0 else d


def cummax(input, dim):  # noqa: A002
    return cummax_result(_C._cummax(input, dim))


def cummin(input, dim):  # noqa: A002
    return cummin_result(_C._cummin(input, dim))


def take_along_dim(input, indices, dim=None):  # noqa: A002
    """input gathered at indices along dim, the other dims broadcast (dim None: flattened)."""
    if not isinstance(indices, Tensor):
        raise TypeError(f"take_along_dim(): argument 'indices' must be Tensor, not "
                        f"{type(indices).__name__}")
    if indices.dtype != _C.int64:
        raise RuntimeError("torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{_torch_name(indices.dtype)}")
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    if input.dim() != indices.dim():
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {input.dim()} dimensions for input, "
                           f"and {indices.dim()} dimensions for indices")
    nd = input.dim()
    d = dim + nd if dim < 0 else dim
    if not 0 <= d < max(nd, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(nd, 1)}, "
                         f"{max(nd, 1) - 1}], but got {dim})")
    # broadcast every dim but `dim`, each side keeping its own size there
    shape = _broadcast(_dims_but(input.shape, d), _dims_but(indices.shape, d))
    ishape, xshape = list(shape), list(shape)
    if nd:
        ishape[d], xshape[d] = indices.shape[d], input.shape[d]
    return input.expand(*xshape).gather(d, indices.expand(*ishape))


def _broadcast(a, b):
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) "
                               "at non-singleton dimension")
        out.append(y if x == 1 else x)
    return out


def _dims_but(shape, d):
    return tuple(1 if k == d else s for k, s in enumerate(shape))


def _torch_name(dtype):
    return {_C.float32: "Float", _C.float64: "Double", _C.int64: "Long", _C.int32: "Int",
            _C.bool: "Bool", _C.float16: "Half", _C.bfloat16: "BFloat16", _C.uint8: "Byte",
            _C.int8: "Char", _C.int16: "Short"}[dtype]


_MESHGRID_WARNED = [False]


def meshgrid(*tensors, indexing=None):
    tensors = _tensors(tensors, "meshgrid")
    if indexing is None:
        from ._variable_functions import is_warn_always_enabled
        if not _MESHGRID_WARNED[0] or is_warn_always_enabled():   # once per process (torch's
            _MESHGRID_WARNED[0] = True                             # TORCH_WARN_ONCE)
            warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass "
                          "the indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError('torch.meshgrid: indexing must be one of "xy" or "ij", but received: '
                           f"{indexing}")
    for t in tensors:
        if t.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but "
                               f"got: {t.dim()}D")
    if len(tensors) == 0:
        return ()
    flat = [t.reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(flat) >= 2
    if swap:                         # xy: the first two grids are transposed (Cartesian)
        flat[0], flat[1] = flat[1], flat[0]
    shape = [t.shape[0] for t in flat]
    grids = []
    for k, t in enumerate(flat):
        view = [1] * len(flat)
        view[k] = shape[k]
        grids.append(t.reshape(*view).expand(*shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors):
    tensors = _tensors(tensors, "cartesian_prod")
    for t in tensors:
        if t.dim() != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return _C.stack([g.reshape(-1) for g in grids], dim=1)


def _atleast(tensors, k, fn):
    one = len(tensors) == 1 and _is_tensor(tensors[0])
    tensors = _tensors(tensors, fn)
    out = []
    for t in tensors:
        if t.dim() < k:
            # torch's layouts: 0-d -> (1,)*k; (n,) -> (1, n) / (1, n, 1); (m, n) -> (m, n, 1)
            shape = {0: (1,) * k, 1: ((t.numel(),), (1, t.numel()), (1, t.numel(), 1))[k - 1],
                     2: tuple(t.shape) + (1,)}[t.dim()]
            t = t.reshape(*shape)
        out.append(t)
    return out[0] if one else tuple(out)


def atleast_1d(*tensors):
    return _atleast(tensors, 1, "atleast_1d")


def atleast_2d(*tensors):
    return _atleast(tensors, 2, "atleast_2d")


def atleast_3d(*tensors):
    return _atleast(tensors, 3, "atleast_3d")


def block_diag(*tensors):
    """The tensors (0-D, 1-D as a row, 2-D) on the diagonal of a zero matrix, built by cat."""
    for i, t in enumerate(tensors):
        if not _is_tensor(t):
            raise TypeError(f"block_diag(): argument 'tensors' must be tuple of Tensors, but "
                            f"found element of type {type(t).__name__} at pos {i}")
        if t.dim() > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.dim()} dimensions")
    if not tensors:
        return _C.empty((1, 0))
    from . import zeros                  # the factory that also makes complex tensors
    dt = _promoted(tensors)
    mats = [t.to(dt).reshape(1, -1) if t.dim() < 2 else t.to(dt) for t in tensors]
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        r, c = m.shape
        parts = [zeros((r, left), dtype=dt), m, zeros((r, cols - left - c), dtype=dt)]
        rows.append(_C.cat(parts, dim=1))
        left += c
    return _C.cat(rows, dim=0)


_MAX_SECTIONS = 1 << 31


def tensor_split(input, indices_or_sections=None, dim=0, *,  # noqa: A002
                 sections=None, indices=None, tensor_indices_or_sections=None):
    """Views of input along dim: n nearly equal sections, or cut at the given indices. The
    second argument also goes by torch's overloads' keywords (sections=, indices=,
    tensor_indices_or_sections=)."""
    given = [v for v in (indices_or_sections, sections, indices, tensor_indices_or_sections)
             if v is not None]
    if len(given) != 1:
        raise TypeError("tensor_split() expects exactly one of indices_or_sections, sections, "
                        "indices or tensor_indices_or_sections")
    indices_or_sections = given[0]
    nd = input.dim()
    d = dim + nd if dim < 0 else dim
    if nd == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    if not 0 <= d < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                         f"but got {dim})")
    size = input.shape[d]
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if ios.dtype != _C.int64 or ios.dim() > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to have type "
                               "long and be a 0-D or 1-D tensor")
        ios = ios.item() if ios.dim() == 0 else ios.tolist()
    if isinstance(ios, int) and not isinstance(ios, bool):
        if ios <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {ios}")
        if ios > _MAX_SECTIONS:      # one tensor object each: this many cannot be made
            raise RuntimeError(f"tensor_split: cannot create {ios} sections (at most "
                               f"{_MAX_SECTIONS})")
        q, r = divmod(size, ios)
        cuts, at = [], 0
        for k in range(ios - 1):
            at += q + (1 if k < r else 0)
            cuts.append(at)
    else:
        cuts = [int(i) for i in ios]
    pieces, start = [], 0
    for c in cuts + [size]:
        c = min(max(c + size if c < 0 else c, 0), size)
        stop = max(c, start)
        pieces.append(input.narrow(d, start, stop - start))
        start = stop
    return tuple(pieces)


def _split_dir(input, ios, dim, fn, need):  # noqa: A002
    if input.dim() < need:
        raise RuntimeError(f"torch.{fn} requires a tensor with at least {need} dimension, but got "
                           f"a tensor with {input.dim()} dimensions!")
    if isinstance(ios, int) and not isinstance(ios, bool):
        size = input.shape[dim]
        if ios != 0 and size % ios:
            raise RuntimeError(f"torch.{fn} attempted to split along dimension {dim}, but the "
                               f"size of the dimension {size} is not divisible by the split_size "
                               f"{ios}!")
    return tensor_split(input, ios, dim)


def hsplit(input, indices_or_sections):  # noqa: A002
    return _split_dir(input, indices_or_sections, 1 if input.dim() > 1 else 0, "hsplit", 1)


def vsplit(input, indices_or_sections):  # noqa: A002
    return _split_dir(input, indices_or_sections, 0, "vsplit", 2)


def dsplit(input, indices_or_sections):  # noqa: A002
    return _split_dir(input, indices_or_sections, 2, "dsplit", 3)


def hstack(tensors):
    tensors = _tensors((tensors,), "hstack")
    tensors = atleast_1d(*tensors) if len(tensors) > 1 else (atleast_1d(tensors[0]),)
    return _C.cat(tensors, 0 if tensors[0].dim() == 1 else 1)


def vstack(tensors):
    tensors = _tensors((tensors,), "vstack")
    tensors = atleast_2d(*tensors) if len(tensors) > 1 else (atleast_2d(tensors[0]),)
    return _C.cat(tensors, 0)


def dstack(tensors):
    tensors = _tensors((tensors,), "dstack")
    tensors = atleast_3d(*tensors) if len(tensors) > 1 else (atleast_3d(tensors[0]),)
    return _C.cat(tensors, 2)


def column_stack(tensors):
    tensors = _tensors((tensors,), "column_stack")
    cols = [t.reshape(-1, 1) if t.dim() <= 1 else t for t in tensors]
    return _C.cat(cols, 1)


def kron(input, other):  # noqa: A002
    """Kronecker product: (a_0 b_0, a_1 b_1, ...) blocks, one broadcast mul and a reshape."""
    nd = max(input.dim(), other.dim())
    a = input.reshape(*([1] * (nd - input.dim()) + list(input.shape)))
    b = other.reshape(*([1] * (nd - other.dim()) + list(other.shape)))
    sa = [s for k in range(nd) for s in (a.shape[k], 1)]
    sb = [s for k in range(nd) for s in (1, b.shape[k])]
    out = a.reshape(*sa) * b.reshape(*sb)
    return out.reshape(*[a.shape[k] * b.shape[k] for k in range(nd)])


row_stack = vstack


# ---- element tests ---------------------------------------------------------------------------

def count_nonzero(input, dim=None):  # noqa: A002
    """The number of non-zero elements (int64), over `dim` (an int or a tuple) or all."""
    nz = (input != 0).to(_C.int64)
    if dim is None:
        return nz.sum()
    return nz.sum(dim=tuple(dim) if isinstance(dim, (tuple, list)) else dim)


def isposinf(input):  # noqa: A002
    return input == float("inf") if input.is_floating_point() else _C.zeros_like(input, dtype=_C.bool)


def isneginf(input):  # noqa: A002
    return input == float("-inf") if input.is_floating_point() else _C.zeros_like(input, dtype=_C.bool)


_SIGN_WORDS = {"float32": "int32", "float64": "int64", "float16": "int16", "bfloat16": "int16"}


def signbit(input):  # noqa: A002
    """The sign bit (-0.0 and -nan included): a float's bits read as a signed int are < 0."""
    name = str(input.dtype).split(".")[-1]
    if name in _SIGN_WORDS:
        return input.contiguous().view(getattr(_C, _SIGN_WORDS[name])) < 0
    if input.dtype == _C.bool:
        return _C.zeros_like(input, dtype=_C.bool)
    return input < 0


count_nonzero = numpy_names(count_nonzero)
for _name in ("cummax", "cummin", "take_along_dim", "tensor_split", "hsplit", "vsplit",
              "dsplit", "kron", "count_nonzero", "isposinf", "isneginf", "signbit"):
    setattr(Tensor, _name, globals()[_name])
del _name


def __getattr__(name):
    # `from torch._ops import ops` (torch.ops, the custom-op namespace: cddp/ops.py), loaded on
    # first use as cddp.ops is
    if name == "ops":
        import importlib
        return importlib.import_module("cddp.ops")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
