"""cddp.save / cddp.load of whole objects: torch.save(model)-style checkpoints.

What cddp.save writes when the JSON structure of serialization.py cannot carry the object (an
nn.Module, an argparse.Namespace, a set, a NumPy array, a cycle ...): a pickle of the object in
which every Tensor and every plain NumPy array is a persistent id naming raw bytes stored
beside the pickle — torch's zip format, laid out as a safetensors file so the existing reader
(serialization._read_safetensors: sizes, offsets, bounds, streams) checks it before anything
is unpickled:

    safetensors header {"data.pkl": U8 [n], "data/0": U8 [nbytes0], ...,
                        "__metadata__": {"format": "cddp-pickle", "cddp_version": "1"}}
    data: the storages, largest item size first (so each starts aligned to its item size,
          without gaps), then data.pkl

Persistent id = ("storage", key, dtype, "cpu", numel): key names the entry data/<key>; dtype
is a cddp dtype name (a Tensor storage: a 1-D tensor of numel elements) or "numpy:<dtype.str>"
(a NumPy array's bytes). A tensor is _rebuild_tensor(storage, offset, size, stride,
requires_grad) = a view of its storage (csrc/core/storage_view.c checks the bounds), so views
and tensors that shared a storage share it again, with its version counter; a whole storage
is written once however many tensors use it (as torch: saving a slice saves its storage).
Parameters and other Tensor subclasses wrap that view (_rebuild_parameter/_rebuild_subclass),
a tensor's __dict__ rides as BUILD state. A NumPy array (numeric, native byte order) is
_rebuild_ndarray(storage, shape, fortran). Nothing large goes through pickle bytes: the
writer hands the storages' own memory to the atomic writer, the reader views the data it read
(or mapped, mmap=True) without copying.

Loading: weights_only=True (the default) runs the pickle through _weights_only_unpickler
(allowlisted globals only); weights_only=False through pickle's own Unpickler, for files the
user trusts. Either way persistent ids are checked against the file: a known key, a known
dtype, numel x itemsize = the entry's size, bool bytes 0 or 1.
"""
import io
import pickle
import re

import numpy as np

from . import _C
from ._C import Tensor

FORMAT = "cddp-pickle"
VERSION = "1"
PICKLE_KEY = "data.pkl"
_STORAGE_KEY = re.compile(r"data/(0|[1-9][0-9]{0,8})")
DEFAULT_PROTOCOL = 4
# NumPy dtypes stored as raw bytes (numeric, native order): "numpy:" + dtype.str
_NP_OOB = {np.dtype(c).str: np.dtype(c) for c in "?bhilqpBHILQPefdgFDG"}


# ---- rebuild functions (allowlisted for weights_only: each checks its own arguments) ---------

def _rebuild_tensor(storage, storage_offset, size, stride, requires_grad):
    """A view of `storage` (a Tensor: its whole storage is used) — torch's _rebuild_tensor_v2."""
    if not isinstance(storage, Tensor):
        raise TypeError(f"_rebuild_tensor: storage is a {type(storage).__name__}, not a Tensor")
    if type(storage_offset) is not int or type(requires_grad) is not bool:
        raise TypeError("_rebuild_tensor: storage_offset must be an int, requires_grad a bool")
    t = _C._storage_view(storage, storage_offset, size, stride)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad):
    from .nn.parameter import Parameter
    complex_data = getattr(data, "_is_complex_tensor", False)      # a torch complex64 file
    if (type(data) is not Tensor and not complex_data) or type(requires_grad) is not bool:
        raise TypeError("_rebuild_parameter: expected (Tensor, bool)")
    return Parameter(data, requires_grad)


def _rebuild_subclass(cls, data, requires_grad):
    """A Tensor subclass other than Parameter: `cls` had to pass the allowlist to get here."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)) or type(data) is not Tensor or \
            type(requires_grad) is not bool:
        raise TypeError("_rebuild_subclass: expected (Tensor subclass, Tensor, bool)")
    return Tensor._make_subclass(cls, data, requires_grad)


def _rebuild_ndarray(storage, shape, fortran):
    if type(storage) is not np.ndarray or storage.ndim != 1 or type(fortran) is not bool or \
            type(shape) is not tuple or not all(type(d) is int and d >= 0 for d in shape):
        raise TypeError("_rebuild_ndarray: expected (1-D ndarray, shape tuple, bool)")
    return storage.reshape(shape, order="F" if fortran else "C")


REBUILD_FUNCTIONS = (_rebuild_tensor, _rebuild_parameter, _rebuild_subclass, _rebuild_ndarray)


# ---- writing -------------------------------------------------------------------------------

class _StorageRef:
    """Stands for one storage in the pickle (persistent_id turns it into its id)."""
    __slots__ = ("pid",)

    def __init__(self, pid):
        self.pid = pid


class _Storages:
    """The storages a pickle refers to, each once: (ref, uint8 bytes, item size)."""

    def __init__(self, dtype_names):
        self.dtype_names = dtype_names
        self.refs, self.entries = {}, []

    def _add(self, ident, dtype, numel, raw, itemsize):
        ref = self.refs.get(ident)
        if ref is None:
            ref = _StorageRef(("storage", str(len(self.entries)), dtype, "cpu", numel))
            self.refs[ident] = ref
            self.entries.append((ref, raw, itemsize))
        return ref

    def tensor(self, t):
        """A reduce tuple for Tensor t: a view of its storage, its class, its __dict__."""
        name = str(t.dtype).split(".")[-1]
        if name not in self.dtype_names:
            raise TypeError(f"cddp.save: cannot save a tensor of dtype {t.dtype}")
        key, nbytes = _C._storage_info(t)
        isz = t.element_size()
        ident = (key, name)
        ref = self.refs.get(ident)
        if ref is None:
            whole = _C._storage_view(t, 0, (nbytes // isz,), (1,))
            if whole.dtype == _C.bfloat16:      # NumPy has no bfloat16: its words as int16
                whole = whole.view(_C.int16)
            ref = self._add(ident, name, nbytes // isz, whole.numpy().view(np.uint8), isz)
        args = (ref, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                bool(t.requires_grad))
        state = getattr(t, "__dict__", None) or None
        from .nn.parameter import Parameter
        if type(t) is Tensor:
            rv = (_rebuild_tensor, args)
        else:
            view = _C._storage_view(t, *args[1:4])
            rv = (_rebuild_parameter, (view, args[4])) if type(t) is Parameter else \
                (_rebuild_subclass, (type(t), view, args[4]))
        return rv + (dict(state),) if state else rv

    def array(self, a):
        """A reduce tuple for a plain numeric NumPy array: its bytes out of band."""
        fortran = bool(a.flags.f_contiguous and not a.flags.c_contiguous)
        flat = a.reshape(-1, order="F" if fortran else "C")      # a view when contiguous
        ref = self._add(("np", id(a)), "numpy:" + a.dtype.str, int(a.size),
                        flat.view(np.uint8), a.dtype.alignment)
        return (_rebuild_ndarray, (ref, tuple(int(d) for d in a.shape), fortran))


def _out_of_band(a):
    return type(a) in (np.ndarray, np.memmap) and a.dtype.str in _NP_OOB and \
        a.dtype == _NP_OOB[a.dtype.str]


class _Pickler(pickle.Pickler):
    def __init__(self, file, protocol, storages):
        super().__init__(file, protocol=protocol)
        self._storages = storages
        self._keep = []                   # arrays whose id() keys a storage stay alive

    def persistent_id(self, obj):
        return obj.pid if type(obj) is _StorageRef else None

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return self._storages.tensor(obj)
        if isinstance(obj, np.ndarray) and _out_of_band(obj):
            self._keep.append(obj)
            return self._storages.array(obj)
        return NotImplemented


def serialize(obj, protocol, dtype_names):
    """The parts (bytes-like, in order) of the checkpoint file for obj."""
    import json
    import struct
    if protocol is None:
        protocol = DEFAULT_PROTOCOL
    if type(protocol) is not int or not 2 <= protocol <= pickle.HIGHEST_PROTOCOL:
        raise ValueError(f"cddp.save: pickle_protocol must be 2 to {pickle.HIGHEST_PROTOCOL}, "
                         f"got {protocol!r}")
    storages = _Storages(dtype_names)
    buf = io.BytesIO()
    _Pickler(buf, protocol, storages).dump(obj)
    pkl = buf.getbuffer()
    # largest item size first: every storage starts aligned to its item size, no gaps
    order = sorted(storages.entries, key=lambda e: -e[2])
    header, chunks, offset = {}, [], 0
    for ref, raw, _ in order:
        header[f"data/{ref.pid[1]}"] = {"dtype": "U8", "shape": [raw.nbytes],
                                        "data_offsets": [offset, offset + raw.nbytes]}
        chunks.append(raw)
        offset += raw.nbytes
    header[PICKLE_KEY] = {"dtype": "U8", "shape": [len(pkl)],
                          "data_offsets": [offset, offset + len(pkl)]}
    chunks.append(pkl)
    header["__metadata__"] = {"format": FORMAT, "cddp_version": VERSION}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    return [struct.pack("<Q", len(hbytes)), hbytes] + chunks


# ---- reading -------------------------------------------------------------------------------

class _Loader:
    """persistent_load for one file: checks each id against the file's entries and builds the
    storage once (map_location applied to tensor storages)."""

    def __init__(self, name, entries, dtypes, relocate):
        self.name, self.entries, self.dtypes, self.relocate = name, entries, dtypes, relocate
        self.built = {}

    def fail(self, why):
        from .serialization import CheckpointError
        raise CheckpointError(self.name, f"data.pkl: {why}")

    def __call__(self, pid):
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage" and
                all(type(x) is str for x in pid[1:4]) and type(pid[4]) is int):
            self.fail(f"unexpected persistent id {str(pid)[:80]}")
        _, key, dtype, location, numel = pid
        raw = self.entries.get(f"data/{key}")
        if raw is None:
            self.fail(f"refers to a missing storage {key[:40]!r}")
        if key in self.built:
            if self.built[key][0] != dtype:
                self.fail(f"storage {key!r} is referred to as {self.built[key][0]} and {dtype}")
            return self.built[key][1]
        np_dtype = _NP_OOB.get(dtype[6:]) if dtype.startswith("numpy:") else \
            self.dtypes.get(dtype, (None, None))[1]
        if np_dtype is None:
            self.fail(f"storage {key!r} has unknown dtype {dtype[:40]!r}")
        arr = checked_storage(raw, np.dtype(np_dtype), numel, key, dtype, self.fail)
        obj = arr if dtype.startswith("numpy:") else \
            self.relocate(storage_tensor(arr, dtype), location)
        self.built[key] = (dtype, obj)
        return obj


def checked_storage(raw, np_dtype, numel, key, dtype, fail):
    """The elements of a storage's bytes `raw` (uint8 array) as np_dtype, element-aligned,
    after checking they are numel elements and, for bool, bytes 0 or 1; else fail(why).
    (cddp-pickle files and torch zip files.)"""
    if numel < 0 or numel * np_dtype.itemsize != raw.nbytes:
        fail(f"storage {key!r}: {numel} elements of {dtype} do not fill its {raw.nbytes} bytes")
    arr = raw.view(np_dtype)
    if not arr.flags.aligned:
        arr = arr.copy()
    if arr.dtype == np.bool_ and arr.size and int(raw.max()) > 1:
        fail(f"bool storage {key!r} holds byte values other than 0 and 1")
    return arr


def storage_tensor(arr, dtype):
    """A tensor over a checked storage array; bfloat16 arrives as its uint16 words."""
    if dtype == "bfloat16":
        return _C.from_numpy(arr.view(np.int16)).view(_C.bfloat16)
    return _C.from_numpy(arr)


class _TrustedUnpickler(pickle.Unpickler):
    """weights_only=False: pickle's own unpickler (imports and runs what the file names)."""

    def __init__(self, file, persistent_load, **kwargs):
        super().__init__(file, **kwargs)
        self._persistent_load = persistent_load

    def persistent_load(self, pid):
        return self._persistent_load(pid)


def read(src, meta, arrays, opts):
    """The object of a cddp-pickle file whose safetensors layout _read_safetensors checked."""
    from . import _weights_only_unpickler as wo
    from .serialization import CheckpointError, _DTYPES, _fail
    name = src.name
    if meta.get("cddp_version") != VERSION:
        _fail(name, f"cddp-pickle version {str(meta.get('cddp_version'))[:20]!r} is not "
                    f"{VERSION} (written by a newer cddp?)")
    for key, arr in arrays.items():
        if arr.dtype != np.uint8 or arr.ndim != 1 or \
                not (key == PICKLE_KEY or _STORAGE_KEY.fullmatch(key)):
            _fail(name, f"unexpected entry {key[:40]!r} (a cddp-pickle file holds data.pkl "
                        "and data/<n> byte entries)")
    if PICKLE_KEY not in arrays:
        _fail(name, "data.pkl is missing")
    pkl = io.BytesIO(arrays[PICKLE_KEY])
    loader = _Loader(name, arrays, _DTYPES, opts.relocate)
    if not opts.weights_only:
        try:
            return _TrustedUnpickler(pkl, loader, **opts.pickle_load_args).load()
        except (EOFError, pickle.UnpicklingError) as e:
            raise CheckpointError(name, f"data.pkl: {type(e).__name__}: {e}") from e
    return load_weights_only(wo.WeightsUnpickler(pkl, loader, **opts.pickle_load_args), name)


def load_weights_only(unpickler, name):
    """unpickler.load() for file `name` under weights_only: a refusal is UnpicklingError with
    torch's message around it, anything else a forged pickle provokes is CheckpointError, and
    the object may nest containers at most MAX_DEPTH deep. (cddp-pickle and torch zip files.)"""
    from . import _weights_only_unpickler as wo
    from .serialization import CheckpointError, MAX_DEPTH
    try:
        obj = unpickler.load()
    except wo.UnpicklingError as e:
        raise wo.UnpicklingError(wo.weights_only_message(str(e), name)) from None
    except CheckpointError:
        raise
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 — a forged pickle has exactly one way to fail
        raise CheckpointError(name, f"data.pkl: {type(e).__name__}: {str(e)[:300]}") from e
    if wo.nesting_height(obj, MAX_DEPTH) > MAX_DEPTH:
        raise wo.UnpicklingError(wo.weights_only_message(
            f"the loaded object nests containers deeper than {MAX_DEPTH} levels", name))
    return obj
