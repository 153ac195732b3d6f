"""cddp.load of torch.save's own files (the zip format torch writes since 1.6), under the
weights_only rules: pretrained weights and checkpoints made with torch load into cddp without
torch and without running anything the file names.

    <prefix>/data.pkl          the pickle; tensors are persistent ids
                               ("storage", torch.<Type>Storage, key, location, numel)
    <prefix>/data/<key>        each storage's raw bytes (stored, not compressed)
    <prefix>/byteorder         "little" | "big" (absent: little)
    <prefix>/version, .format_version, .storage_alignment, .data/serialization_id

The pickle runs through cddp's weights_only unpickler (_weights_only_unpickler.py) with torch's
names mapped to cddp's: torch._utils._rebuild_tensor_v2 / _rebuild_parameter (a view of the
storage, bounds checked in C by _C._storage_view), torch.<Type>Storage (the storage's dtype),
torch.Size, torch.<dtype>, torch.device. Anything else a file names is refused as in cddp's own
whole-object files. weights_only=False (the caller trusts the file) unpickles the rest as pickle
does, with torch.X.Y read as cddp.X.Y (_load_trusted). Storages are read once and shared, so
views and tied weights stay shared; map_location applies to each storage's saved location.

Every way a file can be wrong (not a zip, a compressed or missing entry, a storage whose bytes
do not match its element count, a view outside its storage, a refused global) raises
CheckpointError or UnpicklingError with the reason.
"""
import importlib
import io
import zipfile
from collections import OrderedDict

import numpy as np


# torch.<Type>Storage -> the cddp dtype name of its elements
_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
             "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
             "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
             "ComplexDoubleStorage": "complex128"}
# a complex storage is read as its real pairs: (real dtype, NumPy dtype)
_COMPLEX_PARTS = {"complex64": ("float32", np.float32), "complex128": ("float64", np.float64)}


class _ComplexStorage:
    """A complex storage as persistent_load gives it: the 1-D real tensor of its (re, im)
    pairs; _rebuild_tensor_v2 views it as complex (cddp's complex tensors are such views)."""

    def __init__(self, pairs):
        self.pairs = pairs


class _StorageType:
    """What torch.<Type>Storage resolves to inside a persistent id: only its dtype matters."""

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def __repr__(self):
        return f"torch.{self.name}"


def _no_hooks(backward_hooks, fname):
    # torch never saves backward hooks: a file naming some was not written by torch.save
    if not isinstance(backward_hooks, (dict, OrderedDict)) or backward_hooks:
        raise TypeError(f"{fname}: backward_hooks must be an empty dict")


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    from ._checkpoint_pickle import _rebuild_tensor
    _no_hooks(backward_hooks, "_rebuild_tensor_v2")
    if type(size) is not tuple or type(stride) is not tuple:
        raise TypeError("_rebuild_tensor_v2: size and stride must be tuples")
    if isinstance(storage, _ComplexStorage):
        import cddp
        if type(storage_offset) is not int or not all(type(v) is int for v in size + stride):
            raise TypeError("_rebuild_tensor_v2: offset, size and stride must be ints")
        pairs = _rebuild_tensor(storage.pairs, 2 * storage_offset, size + (2,),
                                tuple(2 * s for s in stride) + (1,), False)
        z = cddp.view_as_complex(pairs)
        return z.requires_grad_(True) if requires_grad else z
    return _rebuild_tensor(storage, storage_offset, size, stride, requires_grad)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    from ._checkpoint_pickle import _rebuild_parameter as rebuild
    _no_hooks(backward_hooks, "_rebuild_parameter")
    return rebuild(data, requires_grad)


def _torch_names():
    """{"torch.x": cddp object} for the unpickler, {callable: argument check} for REDUCE."""
    from . import serialization as ser
    import cddp
    names = {"torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
             "torch._utils._rebuild_parameter": _rebuild_parameter,
             "torch.Size": cddp.Size, "torch.device": cddp.device}
    names.update({f"torch.{s}": _StorageType(s, dt) for s, dt in _STORAGES.items()})
    names.update({f"torch.{dt}": getattr(cddp, dt) for dt in (*ser._DTYPES, *_COMPLEX_PARTS)})
    # REDUCE may call these (each checks its own arguments)
    return names, (_rebuild_tensor_v2, _rebuild_parameter, cddp.device)


class _Storages:
    """persistent_load: ("storage", storage type, key, location, numel) -> a 1-D tensor over
    the entry's bytes, built once per key."""

    def __init__(self, name, zf, prefix, big_endian, relocate):
        self.name, self.zf, self.prefix, self.big = name, zf, prefix, big_endian
        self.relocate, self.built = relocate, {}

    def fail(self, why):
        from .serialization import CheckpointError
        raise CheckpointError(self.name, f"data.pkl: {why}")

    def __call__(self, pid):
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage" and
                isinstance(pid[1], _StorageType) and type(pid[2]) is str and
                type(pid[3]) is str and type(pid[4]) is int):
            self.fail(f"unexpected persistent id {str(pid)[:80]}")
        _, stype, key, location, numel = pid
        if key in self.built:
            if self.built[key][0] != stype.dtype:
                self.fail(f"storage {key!r} is referred to as {self.built[key][0]} and "
                          f"{stype.dtype}")
            return self.built[key][1]
        from ._checkpoint_pickle import checked_storage, storage_tensor
        from .serialization import _DTYPES
        dtype, parts = stype.dtype, 1
        if dtype in _COMPLEX_PARTS:               # read as its (re, im) pairs
            dtype, parts = _COMPLEX_PARTS[dtype][0], 2
        np_dtype = np.dtype(_DTYPES[dtype][1])
        # a writable copy of the entry: the tensor owns its memory, as torch's does
        raw = np.frombuffer(_entry(self.zf, f"{self.prefix}data/{key}", self.fail),
                            np.uint8).copy()
        arr = checked_storage(raw, np_dtype.newbyteorder(">") if self.big else np_dtype,
                              parts * numel, key, dtype, self.fail)
        t = self.relocate(storage_tensor(arr.astype(np_dtype, copy=False), dtype), location)
        if parts == 2:
            t = _ComplexStorage(t)
        self.built[key] = (stype.dtype, t)
        return t


def _entry(zf, path, fail):
    try:
        info = zf.getinfo(path)
    except KeyError:
        fail(f"the archive has no entry {path[:80]!r}")
    if info.compress_type != zipfile.ZIP_STORED:
        fail(f"entry {path[:80]!r} is compressed (torch stores its entries uncompressed)")
    if info.flag_bits & 0x1:               # zipfile would ask for a password (RuntimeError)
        fail(f"entry {path[:80]!r} is encrypted (torch never encrypts its entries)")
    return zf.read(info)


def _prefix(zf, name):
    from .serialization import _fail
    pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkls) != 1:
        _fail(name, f"a torch zip archive holds one <prefix>/data.pkl; this one has "
                    f"{len(pkls)}")
    return pkls[0][:-len("data.pkl")]


def read(src, opts):
    """The object of a torch.save zip file (src: serialization._Source at its first byte)."""
    from .serialization import _fail
    name = src.name
    try:
        return _read_archive(src, opts)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError,
            OSError) as e:
        _fail(name, f"it starts like a torch.save zip file but is not a readable zip: "
                    f"{type(e).__name__}: {str(e)[:200]}")


def _read_archive(src, opts):
    from ._checkpoint_pickle import load_weights_only
    from .serialization import _fail
    name = src.name
    with zipfile.ZipFile(io.BytesIO(src.read_all())) as zf:
        prefix = _prefix(zf, name)

        def fail(why):
            _fail(name, why)
        order = b"little"
        if f"{prefix}byteorder" in zf.namelist():
            order = _entry(zf, f"{prefix}byteorder", fail).strip()
            if order not in (b"little", b"big"):
                _fail(name, f"byteorder {order[:20]!r} is neither little nor big")
        pkl = io.BytesIO(_entry(zf, f"{prefix}data.pkl", fail))
        storages = _Storages(name, zf, prefix, order == b"big", opts.relocate)
        if not opts.weights_only:
            return _load_trusted(pkl, storages, opts, name)
        return load_weights_only(_unpickler(pkl, storages, **opts.pickle_load_args), name)


def _load_trusted(pkl, storages, opts, name):
    """weights_only=False: pickle's own unpickler, so the file's other globals (a script's
    argparse.Namespace, its own classes, NumPy scalars) are imported and built as torch
    would; torch's names go to cddp's (the tensor rebuilders above, then torch.X.Y ->
    cddp.X.Y where cddp has it: a whole torch.save(model) of torch.nn layers comes back as
    cddp modules). A torch name cddp lacks raises UnpicklingError naming it."""
    import pickle
    from .serialization import CheckpointError
    torch_names, _ = _torch_names()

    class TrustedTorchUnpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            return storages(pid)

        def find_class(self, module, attr):
            full = f"{module}.{attr}"
            if full in torch_names:
                return torch_names[full]
            if module == "torch" or module.startswith("torch."):
                obj = _cddp_object(module, attr)
                if obj is None:
                    raise pickle.UnpicklingError(
                        f"{name}: the pickle names {full}, which cddp does not have (it "
                        "cannot build torch's own objects of that kind)")
                return obj
            return super().find_class(module, attr)
    try:
        return TrustedTorchUnpickler(pkl, **opts.pickle_load_args).load()
    except (EOFError, pickle.UnpicklingError) as e:
        raise CheckpointError(name, f"data.pkl: {type(e).__name__}: {e}") from e


def _cddp_object(module, attr):
    """cddp's object for torch's module.attr (torch.nn.modules.linear.Linear ->
    cddp.nn.modules.linear.Linear), or None where cddp has none."""
    try:
        obj = importlib.import_module("cddp" + module[len("torch"):])
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    except (ImportError, AttributeError):
        return None


_UNPICKLER = None


def _unpickler(file, persistent_load, **kwargs):
    """cddp's weights_only unpickler that also knows torch's names (module docstring); the
    class is made on first use, when the weights_only module is imported."""
    global _UNPICKLER
    if _UNPICKLER is None:
        from . import _weights_only_unpickler as wo

        class TorchUnpickler(wo.WeightsUnpickler):
            def __init__(self, file, persistent_load, **kwargs):
                super().__init__(file, persistent_load, **kwargs)
                self._torch, checks = _torch_names()
                self._checks = dict(self._checks)
                self._checks.update({f: (lambda func, args: None) for f in checks})

            def find_class(self, module, name):
                full = f"{module}.{name}"
                if full in self._torch:
                    return self._torch[full]
                if module == "torch" or module.startswith("torch."):
                    # torch's class (a whole torch.save(model)): its cddp counterpart, when the
                    # user allowlisted that (safe_globals([cddp.nn.Linear]), as torch's
                    # generate.py scripts allowlist torch.nn.Linear)
                    obj = _cddp_object(module, name)
                    if obj is not None and self._is_user(obj):
                        return obj
                    if obj is not None:
                        shown = f"{obj.__module__}.{getattr(obj, '__qualname__', name)}"
                        raise wo.UnpicklingError(
                            f"Unsupported global: GLOBAL {full} (cddp's {shown}) was not an "
                            f"allowed global by default. Please use `cddp.serialization."
                            f"add_safe_globals([{shown}])` or the `cddp.serialization."
                            f"safe_globals([{shown}])` context manager to allowlist this global "
                            "if you trust this class/function, or load with "
                            "weights_only=False if you trust the file.")
                return super().find_class(module, name)
        _UNPICKLER = TorchUnpickler
    return _UNPICKLER(file, persistent_load, **kwargs)
