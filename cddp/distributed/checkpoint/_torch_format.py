"""cddp.distributed.checkpoint._torch_format — reading a checkpoint directory that torch's DCP
wrote (FileSystemWriter, torch.save or raw serialization), without torch and without running
code from it.

Torch's layout: `.metadata` is a pickle of its Metadata dataclasses (state_dict_metadata:
{fqn: TensorStorageMetadata(properties, size, chunks) | BytesStorageMetadata}, storage_data:
{MetadataIndex(fqn, chunk offsets): _StorageInfo(relative_path, offset, length,
transform_descriptors)}); each item is a byte range of a data file: a tensor chunk as a
torch.save file, an object as a torch.save file of it. With serialization_format=SAFETENSORS
a tensor's range starts at a safetensors blob holding the rank's tensors by fqn.

The pickle is read by an unpickler whose find_class knows only those classes (each mapped to
a plain record here), torch.Size, torch's dtypes, torch.strided / contiguous_format and
pathlib paths; anything else raises naming the global. Items are read through cddp.load
(weights_only) from the byte range, which must lie inside its file under the checkpoint
directory. A tensor saved in chunks (a sharded tensor) is assembled from its chunks.
"""
import io
import os
import pickle

from ... import _C
from ... import serialization as _ser

Tensor = _C.Tensor


class _Record:
    """A plain record standing in for one of torch's metadata dataclasses."""

    def __init__(self, **kwargs):             # the pickle builds records through __setstate__
        self.__dict__.update(kwargs)

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and all(
                s is None or isinstance(s, dict) for s in state):       # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"unexpected state for DCP's {type(self).__name__}")
        self.__dict__.update(state)


class _TensorProperties(_Record):
    """torch pickles TensorProperties as a tuple: (dtype, layout, requires_grad, memory
    format, pin_memory)."""

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 5):
            raise pickle.UnpicklingError("unexpected state for DCP's TensorProperties")
        self.dtype = state[0]


_RECORDS = {name: type(name, (_Record,), {}) for name in (
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
    "MetadataIndex", "StorageMeta", "_StorageInfo")}
_RECORDS["TensorProperties"] = _TensorProperties
_DTYPES = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
           "uint8", "bool"}


def _size(*args):
    return tuple(args[0]) if args else ()


def _name_of(name):
    return lambda *a: name


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module in ("torch.distributed.checkpoint.metadata",
                      "torch.distributed.checkpoint.filesystem") and name in _RECORDS:
            return _RECORDS[name]
        if module == "torch" and name == "Size":
            return _size
        if module == "torch" and (name in _DTYPES or name in ("strided", "contiguous_format")):
            return _DtypeName(name)
        if module == "torch" and name in ("complex64", "complex128", "float8_e4m3fn",
                                          "float8_e5m2", "uint16", "uint32", "uint64"):
            return _DtypeName(name)
        if (module, name) in (("torch.serialization", "_get_layout"),
                              ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING")):
            return _name_of(name)
        if module == "pathlib" and name in ("PosixPath", "PurePosixPath", "Path",
                                            "WindowsPath", "PureWindowsPath"):
            return lambda *parts: "/".join(map(str, parts))
        if module == "collections" and name == "OrderedDict":
            import collections
            return collections.OrderedDict
        raise pickle.UnpicklingError(f"{module}.{name} is not part of torch's DCP metadata; "
                                     "refusing to load it")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("DCP metadata has no persistent ids")


class _DtypeName(str):
    """torch.<dtype> in the pickle: its name (a global, not a call)."""


def _bad(path, why):
    return ValueError(f"{path} is not a readable torch DCP checkpoint: {why}")


class TorchCheckpoint:
    """items: {fqn: {"kind", "dtype", "shape"}} as _layout's; read(names) -> {fqn: value}."""

    def __init__(self, directory, raw):
        self.dir = os.fspath(directory)
        path = os.path.join(self.dir, ".metadata")
        try:
            md = _Unpickler(io.BytesIO(raw)).load()
        except Exception as e:          # noqa: BLE001 (any pickle fault is a bad file)
            raise _bad(path, f"{type(e).__name__}: {e}") from None
        sdm, storage = getattr(md, "state_dict_metadata", None), getattr(md, "storage_data", None)
        if not isinstance(sdm, dict) or not isinstance(storage, dict):
            raise _bad(path, "no state_dict_metadata / storage_data")
        self.where = {}
        for key, info in storage.items():
            fqn, offsets = getattr(key, "fqn", None), getattr(key, "offset", None)
            rel = getattr(info, "relative_path", None)
            off, length = getattr(info, "offset", None), getattr(info, "length", None)
            if not (isinstance(fqn, str) and isinstance(rel, str) and type(off) is int
                    and type(length) is int and off >= 0 and length >= 0):
                raise _bad(path, f"storage entry {key!r} malformed")
            if os.path.basename(rel) != rel or rel in ("", ".", ".."):
                raise _bad(path, f"storage entry {fqn!r} names {rel!r}, outside the directory")
            if getattr(info, "transform_descriptors", None):
                raise _bad(path, f"{fqn!r} was written through a stream transform "
                           f"{info.transform_descriptors} (e.g. compression), which cddp "
                           "does not read")
            self.where[(fqn, tuple(offsets) if offsets is not None else None)] = (rel, off, length)
        planner = getattr(md, "planner_data", None)
        self.paths = planner if isinstance(planner, dict) else {}
        self.items, self.chunks = {}, {}
        for fqn, m in sdm.items():
            if type(m).__name__ == "BytesStorageMetadata":
                self.items[fqn] = {"kind": "object"}
                continue
            props = getattr(m, "properties", None)
            dtype = str(getattr(props, "dtype", ""))
            if dtype not in _DTYPES:
                raise _bad(path, f"{fqn!r} has dtype torch.{dtype}, which cddp does not have")
            shape = list(getattr(m, "size", ()))
            chunks = [(tuple(c.offsets), tuple(c.sizes)) for c in getattr(m, "chunks", [])]
            self.items[fqn] = {"kind": "tensor", "dtype": dtype, "shape": shape}
            self.chunks[fqn] = chunks

    def path(self, name):
        p = self.paths.get(name)
        return list(p) if isinstance(p, (tuple, list)) and p else [name]

    def _range(self, rel, off, length, what):
        with open(os.path.join(self.dir, rel), "rb") as f:
            f.seek(off)
            data = f.read(length)
        if len(data) != length:
            raise _bad(self.dir, f"{rel} ends before {what} ({length} bytes at {off})")
        return data

    def _bytes(self, fqn, offsets):
        rel, off, length = self.where.get((fqn, offsets), (None, 0, 0))
        if rel is None:
            raise _bad(self.dir, f"no storage entry for {fqn!r} at {offsets}")
        return rel, off, self._range(rel, off, length, repr(fqn))

    def _safetensors_entry(self, fqn, rel, off, dtype, sizes):
        """The raw bytes of fqn in the safetensors blob torch's SAFETENSORS format writes at
        off (its header names each tensor by fqn)."""
        import json
        import struct
        n = struct.unpack("<Q", self._range(rel, off, 8, repr(fqn)))[0]
        if n > 64 << 20:
            raise _bad(self.dir, f"{rel}: a safetensors header of {n} bytes")
        try:
            header = json.loads(self._range(rel, off + 8, n, repr(fqn)).decode("utf-8"))
            entry = header[fqn]
            start, end = entry["data_offsets"]
            ok = (entry["dtype"] == _ser._DTYPES[dtype][0] and list(entry["shape"]) == list(sizes)
                  and type(start) is int and type(end) is int and 0 <= start <= end)
        except (ValueError, KeyError, TypeError) as e:
            raise _bad(self.dir, f"{rel}: no usable safetensors entry for {fqn!r} ({e})") from None
        if not ok:
            raise _bad(self.dir, f"{rel}: the safetensors entry of {fqn!r} is not a {dtype} "
                       f"tensor of shape {list(sizes)}")
        return self._range(rel, off + 8 + n + start, end - start, repr(fqn))

    def _tensor_chunk(self, fqn, offsets, sizes, dtype):
        import cddp
        rel, off, data = self._bytes(fqn, offsets)
        if data[:4] == b"PK\x03\x04":       # torch.save of the chunk
            t = _ser.load(io.BytesIO(data), weights_only=True)
        else:                               # serialization_format=SAFETENSORS
            raw = self._safetensors_entry(fqn, rel, off, dtype, sizes)
            t = (cddp.frombuffer(bytearray(raw), dtype=getattr(cddp, dtype)) if raw else
                 cddp.empty(0, dtype=getattr(cddp, dtype)))
            if t.numel() != _numel(sizes):
                raise _bad(self.dir, f"{fqn!r}: {len(raw)} bytes for a chunk of {list(sizes)}")
            t = t.reshape(sizes)
        if not isinstance(t, Tensor) or tuple(t.shape) != tuple(sizes):
            raise _bad(self.dir, f"{fqn!r}: a chunk is not a tensor of shape {list(sizes)}")
        return t

    def read(self, names):
        import cddp
        out = {}
        for fqn in names:
            it = self.items[fqn]
            if it["kind"] == "object":
                out[fqn] = _ser.load(io.BytesIO(self._bytes(fqn, None)[2]), weights_only=True)
                continue
            chunks = self.chunks[fqn]
            shape, dtype = it["shape"], it["dtype"]
            if len(chunks) == 1 and all(o == 0 for o in chunks[0][0]) and list(chunks[0][1]) == shape:
                out[fqn] = self._tensor_chunk(fqn, chunks[0][0], chunks[0][1], dtype)
                continue
            full = cddp.zeros(shape, dtype=getattr(cddp, dtype))
            covered = 0
            for offsets, sizes in chunks:
                if len(offsets) != len(shape) or any(o < 0 or o + s > n for o, s, n in
                                                     zip(offsets, sizes, shape)):
                    raise _bad(self.dir, f"{fqn!r}: chunk {offsets}+{sizes} outside {shape}")
                view = full
                for d, (o, s) in enumerate(zip(offsets, sizes)):
                    view = view.narrow(d, o, s)
                view.copy_(self._tensor_chunk(fqn, offsets, sizes, dtype))
                covered += _numel(sizes)
            if covered != _numel(shape):
                raise _bad(self.dir, f"{fqn!r}: its chunks cover {covered} of {_numel(shape)} "
                           "elements")
            out[fqn] = full
        return out


def _numel(sizes):
    n = 1
    for s in sizes:
        n *= s
    return n
