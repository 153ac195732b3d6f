"""The few Tensor attributes that are plain Python over C methods: transposed views as
properties, and pickling / deepcopy (cold paths: DataLoader workers, copy.deepcopy(model))."""
import sys
import weakref

import numpy as np

from . import _C
from ._C import Tensor


def _to_array(t):
    """A NumPy copy of t's values; bfloat16 (no NumPy dtype) as its int16 bit patterns."""
    t = t.detach()
    if t.dtype == _C.bfloat16:
        return t.reshape(-1).view(_C.int16).numpy().reshape(tuple(t.shape)).copy()
    return np.array(t.numpy(), copy=True)


def _from_array(array, bf16=False):
    t = _C.from_numpy(np.array(array, copy=True))
    return t.view(_C.bfloat16) if bf16 else t


def _rebuild(array, requires_grad, cls=None, bf16=False):
    return _rebuild_as(_from_array(array, bf16), requires_grad, cls)


def _rebuild_meta(shape, dtype, requires_grad, cls=None):
    return _rebuild_as(_C.empty(shape, dtype=dtype, device="meta"), requires_grad, cls)


def _rebuild_as(t, requires_grad, cls):
    if cls is not None and cls is not Tensor:
        return Tensor._make_subclass(cls, t, requires_grad)
    return t.requires_grad_(True) if requires_grad else t


def _reduce_ex(self, proto):
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                           "pickling and deepcopy; detach() it first")
    state = getattr(self, "__dict__", None) or None   # attributes set on it travel too
    if self.is_meta:          # no values: shape and dtype are all there is to keep
        func, args = _rebuild_meta, (tuple(self.shape), self.dtype, self.requires_grad,
                                     type(self))
    else:
        func, args = _rebuild, (_to_array(self), self.requires_grad, type(self),
                                self.dtype == _C.bfloat16)
    return (func, args, state) if state else (func, args)


def _deepcopy(self, memo):
    if id(self) in memo:
        return memo[id(self)]
    func, args, *state = _reduce_ex(self, 4)
    new = func(*args)
    if state:
        new.__dict__.update(__import__("copy").deepcopy(state[0], memo))
    if self.grad is not None:
        new.grad = self.grad.clone()
    memo[id(self)] = new
    return new


def _copy(self):
    """copy.copy(t): a new tensor object over the same storage (torch's rebuild from the
    storage), a leaf with t's requires_grad, its attributes copied shallowly."""
    new = self.detach()
    if type(self) is not Tensor:
        new = Tensor._make_subclass(type(self), new, self.requires_grad)
    elif self.requires_grad:
        new.requires_grad_(True)
    state = getattr(self, "__dict__", None)
    if state:
        new.__dict__.update(state)
    return new


def _contains(self, element):
    """x in t: any element equal to x (torch's (t == x).any()); tensors and numbers only."""
    if not isinstance(element, (Tensor, int, float, bool, complex, np.number)):
        raise RuntimeError("Tensor.__contains__ only supports Tensor or scalar, but you passed "
                           f"in a {type(element)}.")
    return bool((self == element).any())


def _reversed(self):
    """reversed(t): t flipped along dim 0 (a 0-d tensor is itself), as torch."""
    return self if self.dim() == 0 else self.flip(0)


def _array_wrap(self, array, context=None, return_scalar=False):
    """What a NumPy function applied to a tensor returns: a tensor again (torch's; bool
    results as uint8, as torch converts them)."""
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)
    return _C.from_numpy(np.ascontiguousarray(array))


Tensor.__reduce_ex__ = _reduce_ex
Tensor.__deepcopy__ = _deepcopy
Tensor.__copy__ = _copy
Tensor.__contains__ = _contains
Tensor.__reversed__ = _reversed
Tensor.__array_wrap__ = _array_wrap


def _T(self):
    return self.permute(*reversed(range(self.ndim))) if self.ndim > 1 else self


def _mT(self):
    return self.transpose(-2, -1)


Tensor.T = property(_T, doc="the tensor with its dimensions reversed")
Tensor.mT = property(_mT, doc="the last two dimensions transposed")
Tensor.__array_priority__ = 1000  # NumPy defers binary ops to Tensor


class _HookHandle:
    """What Tensor.register_hook returns (torch.utils.hooks.RemovableHandle): remove()."""
    __slots__ = ("_list", "_fn")

    def __init__(self, pair):
        self._list, self._fn = pair

    def remove(self):
        for i, h in enumerate(self._list):
            if h is self._fn:
                del self._list[i]
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_c_register_hook = Tensor.register_hook
_c_register_post = Tensor.register_post_accumulate_grad_hook


def _register_hook(self, hook):
    """hook(grad) -> Tensor | None runs when this tensor's gradient is computed."""
    return _HookHandle(_c_register_hook(self, hook))


def _register_post_accumulate_grad_hook(self, hook):
    """hook(tensor) runs after a leaf's .grad has been accumulated."""
    return _HookHandle(_c_register_post(self, hook))


Tensor.register_hook = _register_hook
Tensor.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook


# ---- shared memory (Hogwild): the C method moves the storage; the first call registers the
# file-descriptor reducers (cddp/multiprocessing/reductions.py) so the tensor crosses
# multiprocessing boundaries by fd, not by value
_c_share_memory_ = Tensor.share_memory_


def _share_memory_(self):
    """Move the storage into shared memory (in place); fork children and processes it is sent
    to through (cddp.)multiprocessing see and update the same memory."""
    from .multiprocessing.reductions import init_reductions
    init_reductions()
    return _c_share_memory_(self)


Tensor.share_memory_ = _share_memory_


# ---- in-place samplers composed over uniform_ (inverse CDFs; torch's transformations, not
# its bit streams) and normal_
def _check_in_place(self):
    if self.requires_grad and self.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def _fill_from(self, values):
    from .autograd.grad_mode import no_grad
    with no_grad():
        self.copy_(values)
    return self


def _uniform_f64(self, generator):
    """U[0, 1) of self's shape in float64: torch draws these three distributions in double
    and casts once (a float16 / bfloat16 uniform would cut their tails off)."""
    return self.new_empty(tuple(self.shape), dtype=_C.float64).uniform_(generator=generator)


def _cauchy_(self, median=0, sigma=1, *, generator=None):
    """Cauchy(median, sigma) samples: median + sigma * tan(pi * (U - 1/2)), in float64."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    if not self.is_floating_point():
        raise RuntimeError("Cauchy distribution is a continuous probability distribution. "
                           f"dtype must be a floating point but you specified {self.dtype}")
    _check_in_place(self)
    u = _uniform_f64(self, generator)
    return _fill_from(self, (((u - 0.5) * np.pi).tan() * sigma + median).to(self.dtype))


def _log_normal_(self, mean=1, std=2, *, generator=None):
    """exp of Normal(mean, std) samples."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    if not self.is_floating_point():
        raise NotImplementedError(f"log_normal_ not implemented for '{self.dtype}'")
    _check_in_place(self)
    z = self.new_empty(tuple(self.shape), dtype=_C.float64).normal_(mean, std,
                                                                    generator=generator)
    return _fill_from(self, z.exp().to(self.dtype))


def _geometric_(self, p, *, generator=None):
    """The number of Bernoulli(p) trials up to the first success (>= 1):
    ceil(log(U) / log1p(-p)) in float64 (torch's formula), any dtype."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    _check_in_place(self)
    u = _uniform_f64(self, generator)
    k = (u.log() / float(np.log1p(-p))).ceil().clamp(min=1)
    return _fill_from(self, k.to(self.dtype))


Tensor.cauchy_ = _cauchy_
Tensor.log_normal_ = _log_normal_
Tensor.geometric_ = _geometric_


# ---- storages: Tensor.untyped_storage() / storage() as read-only descriptions of the memory a
# tensor views (what scripts ask of them: its base address and size, to tell whether two
# tensors share memory). They hold a detached alias of the tensor, which keeps the memory
# alive; the base address and byte count come from the C storage (_C._storage_info /
# _storage_view). Resizing, filling or copying a storage is not offered: that needs C.

class UntypedStorage:
    """A tensor's storage as bytes (torch.UntypedStorage): data_ptr() is the storage's first
    byte (0 when it holds none, as torch), size() == len() == nbytes(), element_size() 1."""

    def __init__(self, tensor):
        self._t = tensor.detach()

    @property
    def _cdata(self):
        """The storage's identity while it is alive (equal for all views of one storage)."""
        return _C._storage_info(self._t)[0]

    def nbytes(self):
        return _C._storage_info(self._t)[1]

    def data_ptr(self):
        nbytes = self.nbytes()
        if nbytes == 0:
            return 0
        t = self._t
        if t.numel() == 0 and nbytes >= t.element_size():
            # an empty view's data_ptr() is 0 (torch's); the storage still has an address
            return _C._storage_view(t, 0, (nbytes // t.element_size(),), (1,)).data_ptr()
        return t.data_ptr() - t.storage_offset() * t.element_size()

    def size(self):
        return self.nbytes()

    def __len__(self):
        return self.size()

    def element_size(self):
        return 1

    @property
    def device(self):
        return self._t.device

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def get_device(self):
        """The device index; -1 on the CPU."""
        return self._t.get_device() if self.is_cuda else -1

    def is_shared(self):
        return self._t.is_shared()

    def _whole(self):
        """The whole storage as a flat tensor of the tensor's dtype (a view, no history)."""
        t = self._t
        return _C._storage_view(t, 0, (self.nbytes() // t.element_size(),), (1,))

    def tolist(self):
        """The storage's bytes as ints."""
        if self.nbytes() == 0:
            return []
        return _to_array(self._whole()).view(np.uint8).reshape(-1).tolist()

    def type(self):
        return f"{__name__}.UntypedStorage"

    @classmethod
    def from_buffer(cls, buffer, byte_order="native", count=-1, offset=0, dtype=None):
        """A new storage holding a copy of buffer's bytes (from offset, count elements of
        dtype or all of them): what torch.UntypedStorage.from_buffer gives."""
        return cls(_buffer_tensor(buffer, _C.uint8 if dtype is None else dtype, byte_order,
                                  count, offset))

    def __repr__(self):
        vals = "".join(f" {v}\n" for v in self.tolist())
        return f"{vals}[{__name__}.UntypedStorage(device={self.device}) of size {self.size()}]"


class TypedStorage:
    """A tensor's storage in units of its dtype (torch.TypedStorage, what Tensor.storage()
    gives): size() == len() is the element count, dtype and element_size() the tensor's;
    untyped() is the UntypedStorage."""

    def __init__(self, tensor):
        self._untyped_storage = tensor.untyped_storage()
        self._t = tensor.detach()
        self.dtype = tensor.dtype

    def untyped(self):
        return self._untyped_storage

    @classmethod
    def from_buffer(cls, buffer, byte_order="native", count=-1, offset=0, dtype=None):
        """torch.TypedStorage.from_buffer / ByteStorage.from_buffer ...: a copy of buffer's
        bytes read as dtype (a legacy storage class's own)."""
        dtype = getattr(cls, "_legacy_dtype", None) or dtype
        if dtype is None:
            raise RuntimeError("from_buffer: needs dtype= (or a typed storage class such as "
                               "ByteStorage)")
        return cls(_buffer_tensor(buffer, dtype, byte_order, count, offset))

    @property
    def _cdata(self):
        return self._untyped_storage._cdata

    def data_ptr(self):
        return self._untyped_storage.data_ptr()

    def nbytes(self):
        return self._untyped_storage.nbytes()

    def element_size(self):
        return self._t.element_size()

    def size(self):
        return self.nbytes() // self.element_size()

    def __len__(self):
        return self.size()

    @property
    def device(self):
        return self._untyped_storage.device

    @property
    def is_cuda(self):
        return self._untyped_storage.is_cuda

    def get_device(self):
        return self._untyped_storage.get_device()

    def is_shared(self):
        return self._untyped_storage.is_shared()

    def tolist(self):
        """The storage's elements as Python numbers."""
        if self.nbytes() == 0:
            return []
        return _C._storage_view(self._t, 0, (self.size(),), (1,)).tolist()

    def __repr__(self):
        vals = "".join(f" {v}\n" for v in self.tolist())
        return (f"{vals}[{__name__}.TypedStorage(dtype={self.dtype}, device={self.device}) of "
                f"size {self.size()}]")


def _buffer_tensor(buffer, dtype, byte_order, count, offset):
    """A fresh 1-D tensor of dtype holding a copy of buffer's bytes (torch's from_buffer):
    frombuffer over a copy, its elements byte-swapped when byte_order is not this machine's."""
    from ._shape_ops import frombuffer
    if byte_order not in ("native", "little", "big"):
        raise ValueError(f"invalid byte_order {byte_order!r} (native, little or big)")
    t = frombuffer(bytearray(buffer), dtype=dtype, count=count, offset=offset)
    if byte_order not in ("native", sys.byteorder) and dtype.itemsize > 1:
        t = t.view(_C.uint8).view(-1, dtype.itemsize).flip(1).reshape(-1).view(dtype)
    return t


def _legacy_storage(name, dtype):
    """torch.<name> (ByteStorage, FloatStorage, ...): a TypedStorage class of one dtype;
    ByteStorage(n) / ByteStorage(sequence) make one, from_buffer reads bytes."""
    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], Tensor):
            t = args[0]
        elif len(args) == 1 and isinstance(args[0], int):
            t = _C.zeros(args[0], dtype=dtype)
        elif len(args) == 1:
            t = _C.tensor(list(args[0]), dtype=dtype)
        else:
            t = _C.zeros(0, dtype=dtype)
        TypedStorage.__init__(self, t.reshape(-1))
    return type(name, (TypedStorage,), {"__init__": __init__, "_legacy_dtype": dtype,
                                         "__doc__": f"torch.{name}: {dtype} storages"})


def _legacy_storages():
    """ByteStorage ... for each legacy tensor type of _compat.py (ByteTensor ...)."""
    from ._compat import _LEGACY_NAMES
    return {n.replace("Tensor", "Storage"): _legacy_storage(n.replace("Tensor", "Storage"),
                                                            getattr(_C, dt))
            for n, dt in _LEGACY_NAMES}


LEGACY_STORAGES = _legacy_storages()


# one UntypedStorage object per live storage, as torch keeps one Python object per storage
# (`a.untyped_storage() is b.untyped_storage()` for views of one tensor); an entry is only
# reused while its tensor still has that storage
_storages = weakref.WeakValueDictionary()


def _untyped_storage(self):
    """The storage this tensor views, as an UntypedStorage (data_ptr, nbytes, size, ...)."""
    key = _C._storage_info(self)[0]
    s = _storages.get(key)
    if s is None or _C._storage_info(s._t)[0] != key:
        s = UntypedStorage(self)
        _storages[key] = s
    return s


_typed_storage_warned = [False]


def _storage(self):
    """The storage this tensor views, typed by its dtype (torch's deprecated TypedStorage;
    warns once per process, as torch does)."""
    if not _typed_storage_warned[0]:
        _typed_storage_warned[0] = True
        import warnings
        warnings.warn("TypedStorage is deprecated (as in torch): use tensor.untyped_storage() "
                      "instead of tensor.storage()", UserWarning, stacklevel=2)
    return TypedStorage(self)


Tensor.untyped_storage = _untyped_storage
Tensor.storage = _storage


# DLPack export (torch's Tensor.__dlpack__): NumPy's capsule of the view (cddp/utils/dlpack.py)
def _dlpack(self, **kwargs):
    from .utils.dlpack import _tensor_dlpack
    return _tensor_dlpack(self, **kwargs)


def _dlpack_device(self):
    return (1, 0)                      # kDLCPU, device 0


Tensor.__dlpack__ = _dlpack
Tensor.__dlpack_device__ = _dlpack_device


def _i0(self):
    from .special import i0
    return i0(self)


def _i0_(self):
    if not self.is_floating_point():
        names = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
                 "uint8": "Byte", "bool": "Bool"}
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{names.get(str(self.dtype).split('.')[-1], self.dtype)}")
    return self.copy_(_i0(self))


Tensor.i0 = _i0                        # torch.special.i0 as a method (cddp/special.py)
Tensor.i0_ = _i0_


def _clone_state(self):
    """torch.Generator.clone_state(): a new generator at this one's state."""
    g = _C.Generator()
    g.set_state(self.get_state())
    return g


_C.Generator.clone_state = _clone_state
