"""torch APIs that a CPU training script calls for their side effects on accelerator or
compiler settings: on cddp they keep torch's signatures and checks, and change nothing about
how cddp computes.

    compile(model, ...)                    the model itself (decorator forms too): cddp has no
                                           graph compiler; its kernels are already C
    set_float32_matmul_precision(p)        "highest" | "high" | "medium", remembered for
    get_float32_matmul_precision()         get_...; float32 GEMMs stay float32 ("highest")
    is_autocast_cpu_enabled()              is_autocast_enabled("cpu")
    set_default_device(d) / get_default_device()   the CPU (CUDA: the device policy); also what
                                           `with cddp.device(d):` calls (_device.py)
    Tensor.pin_memory(device=None)         the tensor itself: there is no device to copy to
    Tensor.is_pinned(device=None)          False
    Tensor.unsqueeze_/squeeze_/t_/transpose_   in place: the view's geometry (no autograd)

and the legacy spellings older scripts still use:

    FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor, ShortTensor,
    CharTensor, ByteTensor, BoolTensor      constructors (sizes -> zeros, data -> a copy in the
                                           class's dtype) and isinstance checks by dtype;
                                           Tensor.type(cls) converts to the class's dtype
    strided, Tensor.layout, Tensor.is_sparse   the one layout cddp has
    spmm(a, b)                              mm: cddp's tensors are dense

and the memory formats, torch.memory_format objects:

    contiguous_format, preserve_format,     wherever torch takes memory_format= (Tensor.to /
    channels_last, channels_last_3d         contiguous / clone / *_like / empty in C, where
                                           core/layout.c gives the strides torch's would
                                           have); Module.to(memory_format=) accepts them and
                                           leaves the parameters row-major.
    Tensor.is_contiguous(memory_format=)    answered from the tensor's actual strides by
                                           torch's rule (channels_last: 4-D, strides
                                           increasing over C, W, H, N, size-1 dims skipped;
                                           channels_last_3d: 5-D over C, W, H, D, N)
"""
from . import _C
from ._size import Size

Tensor = _C.Tensor

_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = "highest"


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor",  # noqa: A001
            mode=None, options=None, disable=False):
    """torch.compile: returns `model` unchanged (or, called without one, a decorator that
    does). The keyword arguments are accepted and checked as torch does, and ignored."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if model is None:
        return lambda fn: fn
    if not callable(model):
        raise RuntimeError(f"torch.compile: expected a callable, got {type(model).__name__}")
    return model


def set_float32_matmul_precision(precision):
    global _matmul_precision
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Invalid precision: {precision!r}; expected one of "
                           f"{', '.join(map(repr, _PRECISIONS))}")
    _matmul_precision = precision


def get_float32_matmul_precision():
    return _matmul_precision


def set_default_device(device):
    """torch.set_default_device: cddp makes tensors on the CPU, or on "meta" (no values) when
    that is the default; a CUDA device goes through the device policy (one warning, or an
    error under CDDP_STRICT_DEVICE=1)."""
    from ._device import _is_meta
    meta = _is_meta(device)
    if device is not None and not meta:
        _C.zeros(0, device="cpu").to(device)
    _C._set_default_meta(meta)


def get_default_device():
    from ._device import device
    return device("meta" if _C._set_default_meta(None) else "cpu")


def is_autocast_cpu_enabled():
    return _C.is_autocast_enabled("cpu")


def _pin_memory(self, device=None):
    return self


def _is_pinned(self, device=None):
    return False


def _is_inference(self):
    return False                # (autograd/grad_mode.py: no inference tensors)


# in-place shape ops: the tensor takes the geometry of the out-of-place view (same storage)
def _unsqueeze_(self, dim):
    return _C._adopt_view(self, self.unsqueeze(dim))


def _squeeze_(self, dim=None):
    return _C._adopt_view(self, self.squeeze() if dim is None else self.squeeze(dim))


def _t_(self):
    return _C._adopt_view(self, self.t())


def _as_strided_(self, size, stride, storage_offset=None):
    return _C._adopt_view(self, self.as_strided(size, stride, storage_offset))


def _transpose_(self, dim0, dim1):
    return _C._adopt_view(self, self.transpose(dim0, dim1))


Tensor.unsqueeze_ = _unsqueeze_
Tensor.squeeze_ = _squeeze_
Tensor.t_ = _t_
Tensor.as_strided_ = _as_strided_
Tensor.transpose_ = Tensor.swapdims_ = Tensor.swapaxes_ = _transpose_
Tensor.pin_memory = _pin_memory
Tensor.is_pinned = _is_pinned
Tensor.is_inference = _is_inference
Tensor.dequantize = lambda self: self     # a float tensor dequantizes to itself (torch)


def _to_complex(name):
    def fn(self, memory_format=None):
        from . import _complex
        return self.to(getattr(_complex, name))
    fn.__name__ = name
    return fn


Tensor.cfloat = _to_complex("complex64")
Tensor.cdouble = _to_complex("complex128")


# ---- legacy tensor types --------------------------------------------------------------------

class _LegacyTensorType(type):
    """isinstance(x, cddp.FloatTensor): a cddp tensor of that dtype, as torch answers."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and \
            obj.is_cuda == (cls._device == "cuda")

    def __repr__(cls):
        return f"<class '{cls._type_name.replace('torch.', 'cddp.')}'>"


def _legacy_new(cls, args, device):
    t = _legacy_data(cls, args)
    return t if device is None else t.to(device)     # CUDA: the device policy, as .to()


def _legacy_data(cls, args):
    if not args:
        return _C.zeros(0, dtype=cls.dtype)
    if len(args) == 1 and isinstance(args[0], Tensor):
        if args[0].dtype != cls.dtype:
            raise TypeError(f"expected {cls.dtype} (got {args[0].dtype})")
        return args[0]
    from ._tensor_py import TypedStorage
    if len(args) == 1 and isinstance(args[0], TypedStorage):
        # torch.ByteTensor(storage): a 1-D tensor over the whole storage (DETR's all_gather)
        st = args[0]
        if st.dtype != cls.dtype:
            raise TypeError(f"expected {cls.dtype} storage (got {st.dtype})")
        return _C._storage_view(st._t, 0, (st.size(),), (1,))
    sizes = args[0] if len(args) == 1 and isinstance(args[0], Size) else args
    if all(isinstance(a, int) and not isinstance(a, bool) for a in sizes):
        return _C.zeros(*sizes, dtype=cls.dtype)
    if len(args) > 1:
        raise TypeError(f"{cls.__name__}(): expected sizes (ints) or one sequence of data")
    return _C.tensor(args[0], dtype=cls.dtype)


def _legacy_type(name, dtype, on=None):
    """torch.<name> (on None) or torch.cuda.<name> (on "cuda": made through the device policy,
    as .cuda())."""
    def __new__(cls, *args, device=None):
        return _legacy_new(cls, args, on if device is None else device)
    prefix = "torch." if on is None else f"torch.{on}."
    return _LegacyTensorType(name, (), {"__new__": __new__, "dtype": dtype, "_device": on,
                                        "_type_name": prefix + name,
                                        "__doc__": f"{prefix}{name}: {dtype} tensors"})


_LEGACY_NAMES = (
    ("FloatTensor", "float32"), ("DoubleTensor", "float64"), ("HalfTensor", "float16"),
    ("BFloat16Tensor", "bfloat16"), ("LongTensor", "int64"), ("IntTensor", "int32"),
    ("ShortTensor", "int16"), ("CharTensor", "int8"), ("ByteTensor", "uint8"),
    ("BoolTensor", "bool"))
LEGACY_TYPES = {name: _legacy_type(name, getattr(_C, dt)) for name, dt in _LEGACY_NAMES}
CUDA_LEGACY_TYPES = {name: _legacy_type(name, getattr(_C, dt), "cuda")
                     for name, dt in _LEGACY_NAMES}

_c_type = Tensor.type


def _type(self, dtype=None, *args, **kwargs):
    if isinstance(dtype, _LegacyTensorType):
        dtype = dtype._type_name
    elif dtype is Tensor:          # torch.Tensor is the default dtype's tensor type
        dtype = _C.get_default_dtype()
    return _c_type(self) if dtype is None else _c_type(self, dtype, *args, **kwargs)


Tensor.type = _type


# ---- layout ---------------------------------------------------------------------------------

class _NamedConstant:
    """A torch constant object (torch.strided, torch.channels_last, ...): a name, printed as
    cddp.<name>."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"cddp.{self.name}"


class layout(_NamedConstant):
    """torch.layout: cddp's tensors are all strided."""
    __slots__ = ()

    def __reduce__(self):
        return (layout, (self.name,))


strided = layout("strided")
Tensor.layout = property(lambda self: strided, doc="torch.strided: cddp's only layout")
Tensor.is_sparse = property(lambda self: False, doc="False: cddp's tensors are dense")
# the other backends' and layouts' flags scripts test (`x.is_cuda or x.is_xpu`): cddp's
# tensors are dense, unquantized CPU (or meta: Tensor.is_meta, in C) tensors
for _flag in ("is_xpu", "is_mps", "is_xla", "is_ipu", "is_mtia", "is_maia",
              "is_vulkan", "is_mkldnn", "is_quantized", "is_nested", "is_sparse_csr"):
    setattr(Tensor, _flag, property(lambda self: False))
del _flag
Tensor.is_distributed = lambda self: False


def _is_set_to(self, tensor):
    """torch's Tensor.is_set_to: the same memory seen with the same geometry."""
    return (self.data_ptr() == tensor.data_ptr() and self.dtype == tensor.dtype and
            tuple(self.shape) == tuple(tensor.shape) and self.stride() == tensor.stride())


class _NoOpContextDecorator:
    """A torch setting cddp has nothing to change for, used as torch allows: `with x:` or as
    a decorator (the function itself is returned). torch.compiler.set_stance and
    torch.sparse.check_sparse_tensor_invariants."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


# The COO accessors over cddp's dense stand-ins for sparse tensors (cddp/sparse.py: the
# constructors sum duplicates into a dense tensor): a dense tensor is its own coalesced form,
# and its specified entries are its nonzero ones, in row-major order — what torch's coalesced
# tensor lists when it holds no explicit zeros. torch raises on these for strided tensors;
# cddp cannot tell a stand-in from any other tensor, so pygcn-style code
# (`adj.coalesce()`, `adj.indices()`, `adj.values()`) runs on both.
# A sparse constructor's result also keeps its description, _coo = (indices, values,
# coalesced): its accessors give the entries as given, duplicates and explicit zeros included
# (torch's uncoalesced tensor), and coalesce() sorts and sums them.
def _is_coalesced(self):
    coo = self.__dict__.get("_coo")
    return True if coo is None else coo[2]


def _coalesce(self):
    coo = self.__dict__.get("_coo")
    if coo is None or coo[2]:
        return self
    idx, vals, _ = coo
    sizes = list(self.shape[:idx.shape[0]])
    lin = _C.zeros(idx.shape[1], dtype=_C.int64)
    for d, n in enumerate(sizes):
        lin = lin * n + idx[d]
    keys, inverse = lin.unique(sorted=True, return_inverse=True)
    summed = _C.zeros((keys.shape[0],) + tuple(vals.shape[1:]), dtype=vals.dtype)
    summed = summed.index_add(0, inverse, vals)
    from ._shape_ops import unravel_index
    out = self.view_as(self)
    out._coo = (_C.stack(unravel_index(keys, sizes)) if sizes else idx[:, :0], summed, True)
    return out


def _rows(self):
    """A row-sparse stand-in (an embedding(sparse=True) gradient: _sparse_dim 1, as torch's
    sparse gradient has one sparse dim): the rows holding a nonzero, else None."""
    sd = self.__dict__.get("_sparse_dim")
    if sd is None or sd >= self.dim():
        return None
    return self.detach().ne(0).flatten(sd).any(-1).nonzero().t()      # (sd, nnz rows)


def _indices(self):
    """(sparse_dim, nnz) int64: a stand-in's given coordinates, else the nonzero entries' (a
    row-sparse gradient's: its nonzero rows)."""
    coo = self.__dict__.get("_coo")
    if coo is not None:
        return coo[0]
    rows = _rows(self)
    return rows if rows is not None else self.detach().nonzero().t()


def _values(self):
    """(nnz, ...): a stand-in's given values, else the nonzero entries in _indices order; with
    autograd to the tensor either way (a stand-in's: its values, their gradient through the
    dense entries they were summed into, as torch's sparse gradient)."""
    coo = self.__dict__.get("_coo")
    if coo is None:
        rows = _rows(self)
        if rows is not None:
            return self[tuple(rows.unbind(0))]
        return self[self.detach().nonzero(as_tuple=True)]
    vals = coo[1]
    if vals.requires_grad or not (self.requires_grad and _C.is_grad_enabled()):
        return vals                    # its own path to the values the caller gave
    g = self[tuple(coo[0].unbind(0))]  # a leaf stand-in: the gradient lands in its entries
    return vals.detach() + (g - g.detach())


def _coo_of(self):
    """(indices, values) in coalesced order: a stand-in's description, else its nonzeros."""
    coo = self.coalesce().__dict__.get("_coo")
    if coo is not None:
        return coo[0], coo[1]
    return _indices(self), None


def _sparse_dim(self):
    coo = self.__dict__.get("_coo")
    if coo is not None:
        return int(coo[0].shape[0])
    return self.__dict__.get("_sparse_dim", self.dim())


def _dense_dim(self):
    return self.dim() - _sparse_dim(self)


def _crow_indices(self):
    """A 2-D tensor's compressed row pointers over its entries (torch's CSR crow_indices)."""
    if self.dim() != 2 or _sparse_dim(self) != 2:
        raise RuntimeError("crow_indices: expected a 2-D tensor with 2 sparse dims "
                           "(cddp's CSR stand-ins are not batched)")
    rows = _coo_of(self)[0][0]
    crow = _C.zeros(self.shape[0] + 1, dtype=_C.int64)
    crow[1:] = _C.bincount(rows, minlength=self.shape[0]).cumsum(0)
    return crow


def _col_indices(self):
    if self.dim() != 2 or _sparse_dim(self) != 2:
        raise RuntimeError("col_indices: expected a 2-D tensor with 2 sparse dims")
    return _coo_of(self)[0][1]


def _nnz(self):
    coo = self.__dict__.get("_coo")
    if coo is not None:
        return int(coo[0].shape[1])
    rows = _rows(self)
    return int(rows.shape[1]) if rows is not None else int(self.count_nonzero())


def _to_dense(self, dtype=None, *, masked_grad=None):
    """Tensor.to_dense: a strided tensor is its own dense form (torch returns self)."""
    return self if dtype is None or dtype == self.dtype else self.to(dtype)


def _to_sparse(self, *args, **kwargs):
    """Tensor.to_sparse and its layout forms: cddp/sparse.py (no sparse layout: the tensor
    itself, with the one dense warning), loaded on first use."""
    from .sparse import to_sparse
    return to_sparse(self, *args, **kwargs)


def _stft(self, *args, **kwargs):
    """Tensor.stft / istft: cddp/_spectral.py, loaded on first use."""
    from ._spectral import stft
    return stft(self, *args, **kwargs)


def _istft(self, *args, **kwargs):
    from ._spectral import istft
    return istft(self, *args, **kwargs)


Tensor.stft = _stft
Tensor.istft = _istft
Tensor.is_set_to = _is_set_to
Tensor.is_coalesced = _is_coalesced
Tensor.coalesce = _coalesce
Tensor.indices = Tensor._indices = _indices
Tensor.values = Tensor._values = _values
Tensor._nnz = _nnz
Tensor.sparse_dim = _sparse_dim
Tensor.dense_dim = _dense_dim
Tensor.crow_indices = _crow_indices
Tensor.col_indices = _col_indices
Tensor.to_dense = _to_dense
for _name in ("to_sparse", "to_sparse_coo", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr",
              "to_sparse_bsc"):
    setattr(Tensor, _name, _to_sparse)
del _name


def spmm(input, mat2):  # noqa: A002
    """torch.spmm: the matrix product (cddp's tensors are dense)."""
    return _C.mm(input, mat2)


# ---- memory formats -------------------------------------------------------------------------

class memory_format(_NamedConstant):
    """torch.memory_format: cddp.contiguous_format, preserve_format, channels_last,
    channels_last_3d."""
    __slots__ = ()

    def __reduce__(self):
        return self.name        # pickles by reference: the module-level object


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")

# the order in which a channels-last tensor's strides grow: C, then the spatial dims
# innermost first, then N (torch's _compute_channels_last_contiguous_2d / _3d)
_CHANNELS_LAST_ORDER = {channels_last: (4, (1, 3, 2, 0)),
                        channels_last_3d: (5, (1, 4, 3, 2, 0))}

_c_is_contiguous = Tensor.is_contiguous


def _is_contiguous(self, memory_format=contiguous_format):
    if memory_format is contiguous_format or memory_format is preserve_format:
        # torch: a tensor with no elements is contiguous whatever its strides
        return _c_is_contiguous(self) or self.numel() == 0
    plan = _CHANNELS_LAST_ORDER.get(memory_format)
    if plan is None:
        raise TypeError("is_contiguous(): argument 'memory_format' must be "
                        f"torch.memory_format, not {type(memory_format).__name__}")
    ndim, order = plan
    if self.dim() != ndim:
        return False
    sizes, strides = self.shape, self.stride()
    expected = 1
    for d in order:                 # over dims, not elements
        if sizes[d] != 1:
            if strides[d] != expected:
                return False
            expected *= sizes[d]
    return True


Tensor.is_contiguous = _is_contiguous


# ---- torch._C's TorchScript fuser switches --------------------------------------------------
# timm, speechbrain and safari flip these before training. cddp has no TorchScript (cddp.jit),
# so each switch records its flag; the setters that return the previous value in torch do so.

_JIT_FLAGS = {"profiling_executor": True, "profiling_mode": True, "fuse_cpu": False,
              "fuse_gpu": False, "texpr": True, "nvfuser": False}


def _jit_setter(key, returns_previous):
    def fn(flag):
        prev, _JIT_FLAGS[key] = _JIT_FLAGS[key], bool(flag)
        return prev if returns_previous else None
    return fn


for _name, _key, _prev in (("_jit_set_profiling_executor", "profiling_executor", True),
                           ("_jit_set_profiling_mode", "profiling_mode", True),
                           ("_jit_override_can_fuse_on_cpu", "fuse_cpu", False),
                           ("_jit_override_can_fuse_on_gpu", "fuse_gpu", False),
                           ("_jit_set_texpr_fuser_enabled", "texpr", False),
                           ("_jit_set_nvfuser_enabled", "nvfuser", True)):
    setattr(_C, _name, _jit_setter(_key, _prev))
_C._jit_can_fuse_on_cpu = lambda: _JIT_FLAGS["fuse_cpu"]
_C._jit_can_fuse_on_gpu = lambda: _JIT_FLAGS["fuse_gpu"]
_C._jit_texpr_fuser_enabled = lambda: _JIT_FLAGS["texpr"]
_C._jit_set_nvfuser_guard_mode = lambda flag: None
_C._get_privateuse1_backend_name = lambda: "privateuseone"
_C._log_api_usage_once = lambda event: None     # torch's usage logging, off unless configured
_C._get_tracing_state = lambda: None            # never inside torch.jit.trace here
del _name, _key, _prev
