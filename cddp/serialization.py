"""cddp.save / cddp.load — checkpoints without pickle.

File layout = a safetensors file (so `safetensors.numpy.load_file` reads the weights, and
weights move to torch through it):

    u64 little-endian N | N bytes JSON header (space-padded to 8) | tensor bytes

The header maps "t0", "t1", ... to {"dtype", "shape", "data_offsets"}, and its "__metadata__"
holds {"format": "cddp", "cddp_structure": JSON of the saved object} where tensors appear as
{"__tensor__": "t3", ...}. Containers supported: dict (any JSON-able scalar keys, order kept),
OrderedDict, Counter, list, tuple, namedtuple-free tuples; leaves: Tensor, Parameter, None,
bool, int, float (incl. inf/nan), str, cddp.dtype, cddp.device. Loading runs no code: it parses
JSON and copies bytes, and checks every length and offset first, so a truncated, corrupt or
foreign file raises ValueError/RuntimeError saying so (never a crash or a huge allocation).

Writes to a path are atomic: a temporary file beside the target, fsync, rename, fsync of the
directory — a process killed mid-save leaves the previous file intact.
"""
from collections import Counter, OrderedDict
import json
import math
import os
import struct
import tempfile

import numpy as np

from . import _C

Tensor = _C.Tensor

# cddp dtype -> (safetensors name, NumPy dtype of the bytes). bfloat16 has no NumPy dtype: its
# bytes travel as uint16 words and are read back through Tensor.view(bfloat16).
_DTYPES = {"float32": ("F32", np.float32), "float64": ("F64", np.float64),
           "int64": ("I64", np.int64), "int32": ("I32", np.int32), "bool": ("BOOL", np.bool_),
           "float16": ("F16", np.float16), "bfloat16": ("BF16", np.uint16),
           "uint8": ("U8", np.uint8), "int8": ("I8", np.int8), "int16": ("I16", np.int16)}
_ST_TO_NP = {v[0]: v[1] for v in _DTYPES.values()}
_MAX_HEADER = 100 << 20          # safetensors' own limit
_MAGIC_ZIP = b"PK\x03\x04"       # torch.save's zip format
_MAGIC_PICKLE = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


class CheckpointError(RuntimeError):
    """A file that is not a readable cddp checkpoint (truncated, corrupt or foreign)."""


# ---- encoding --------------------------------------------------------------------------------

def _encode(obj, tensors, where):
    """JSON-able structure for obj; tensors are appended to `tensors` and referenced by name."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {"__float__": repr(obj)}
    if isinstance(obj, Tensor):
        name = f"t{len(tensors)}"
        tensors.append(obj.detach())
        enc = {"__tensor__": name, "requires_grad": bool(obj.requires_grad)}
        from .nn.parameter import Parameter
        if isinstance(obj, Parameter):
            enc["parameter"] = True
        return enc
    if isinstance(obj, _C.dtype):
        return {"__dtype__": str(obj).split(".")[-1]}
    if type(obj).__name__ == "device" and hasattr(obj, "type") and hasattr(obj, "index"):
        return {"__device__": str(obj)}
    if isinstance(obj, dict):
        items = [[_encode_key(k, where), _encode(v, tensors, f"{where}[{k!r}]")]
                 for k, v in obj.items()]
        kind = "__counter__" if isinstance(obj, Counter) else \
            "__odict__" if isinstance(obj, OrderedDict) else "__dict__"
        return {kind: items}
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return {"__tuple__": [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]
    raise TypeError(f"cddp.save: cannot save an object of type {type(obj).__name__} at "
                    f"{where or 'the top level'}; checkpoints hold tensors, numbers, strings, "
                    "bools, None, dtypes, devices and dicts/lists/tuples of them (no pickle)")


def _encode_key(k, where):
    if k is None or isinstance(k, (bool, int, float, str)):
        return _encode(k, [], where)
    raise TypeError(f"cddp.save: dict key {k!r} at {where or 'the top level'} is not a "
                    "string, number, bool or None")


def _serialize(obj):
    tensors = []
    structure = _encode(obj, tensors, "")
    header, chunks, offset = {}, [], 0
    for i, t in enumerate(tensors):
        if t.dtype == _C.bfloat16:          # its raw 16-bit words: NumPy has no bfloat16
            arr = t.reshape(-1).view(_C.int16).numpy().reshape(tuple(t.shape))
        else:
            arr = t.numpy()
        if not arr.flags.c_contiguous:       # (np.ascontiguousarray would make 0-d arrays 1-d)
            arr = arr.copy(order="C")
        name, _np = _DTYPES[str(t.dtype).split(".")[-1]]
        raw = arr.tobytes()
        header[f"t{i}"] = {"dtype": name, "shape": list(arr.shape),
                           "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "cddp", "cddp_version": "1",
                              "cddp_structure": json.dumps(structure, allow_nan=False)}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    return [struct.pack("<Q", len(hbytes)), hbytes] + chunks


def save(obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Write obj to f (a path or a writable binary file object); atomic for paths."""
    if pickle_module is not None:
        raise ValueError("cddp.save never pickles; pickle_module is not supported")
    parts = _serialize(obj)
    if isinstance(f, (str, bytes, os.PathLike)):
        _atomic_write(os.fsdecode(f), parts)
    elif hasattr(f, "write"):
        for p in parts:
            f.write(p)
        if hasattr(f, "flush"):
            f.flush()
    else:
        raise TypeError(f"cddp.save: f must be a path or a binary file object, got "
                        f"{type(f).__name__}")


def _atomic_write(path, parts):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        # mkstemp makes the file 0600; give it the mode a plain open() would (or the old file's)
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            for p in parts:
                fh.write(p)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:                      # make the rename itself durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# ---- decoding --------------------------------------------------------------------------------

def _read_all(f):
    if isinstance(f, (str, bytes, os.PathLike)):
        name = os.fsdecode(f)
        with open(name, "rb") as fh:
            return bytearray(fh.read()), name
    if hasattr(f, "read"):
        return bytearray(f.read()), getattr(f, "name", "<file object>")
    raise TypeError(f"cddp.load: f must be a path or a binary file object, got {type(f).__name__}")


def _fail(name, why):
    raise CheckpointError(f"cddp.load: {name} is not a readable cddp checkpoint: {why}")


def _parse(buf, name):
    if len(buf) < 8:
        if buf[:2] in _MAGIC_PICKLE or buf[:4] == _MAGIC_ZIP:
            _fail(name, "it is a torch.save (pickle) file; cddp never unpickles")
        _fail(name, f"file is {len(buf)} bytes, too short for a header (truncated?)")
    if bytes(buf[:4]) == _MAGIC_ZIP or bytes(buf[:2]) in _MAGIC_PICKLE:
        _fail(name, "it is a torch.save (pickle/zip) file; cddp never unpickles. Convert it "
                    "with torch + safetensors, or save it with cddp.save")
    (hlen,) = struct.unpack("<Q", bytes(buf[:8]))
    if hlen > _MAX_HEADER:
        _fail(name, f"header length {hlen} exceeds the {_MAX_HEADER}-byte limit (corrupt or "
                    "foreign file)")
    if 8 + hlen > len(buf):
        _fail(name, f"header claims {hlen} bytes but the file has {len(buf) - 8} after the "
                    "length field (truncated?)")
    try:
        header = json.loads(bytes(buf[8:8 + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        _fail(name, f"header is not valid JSON ({e})")
    if not isinstance(header, dict):
        _fail(name, "header is not a JSON object")
    data_start = 8 + hlen
    data_len = len(buf) - data_start
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        _fail(name, "__metadata__ is not an object")
    arrays = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(info, dict):
            _fail(name, f"entry {key!r} is not an object")
        dt = info.get("dtype")
        shape = info.get("shape")
        offs = info.get("data_offsets")
        if dt not in _ST_TO_NP:
            _fail(name, f"tensor {key!r} has unsupported dtype {dt!r}")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                  and s >= 0 for s in shape):
            _fail(name, f"tensor {key!r} has an invalid shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and
                all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
            _fail(name, f"tensor {key!r} has invalid data_offsets {offs!r}")
        begin, end = offs
        npdt = np.dtype(_ST_TO_NP[dt])
        count = 1
        for s in shape:
            count *= s
        if not 0 <= begin <= end <= data_len:
            _fail(name, f"tensor {key!r} spans bytes [{begin}, {end}) but the data section has "
                        f"{data_len} bytes (truncated?)")
        if end - begin != count * npdt.itemsize:
            _fail(name, f"tensor {key!r}: shape {shape} of {dt} needs {count * npdt.itemsize} "
                        f"bytes, the file gives {end - begin}")
        arr = np.frombuffer(buf, dtype=npdt, count=count, offset=data_start + begin)
        if not arr.flags.aligned:        # safetensors packs tensors back to back: C kernels
            arr = arr.copy()             # need element-aligned data, so copy the odd ones
        arrays[key] = arr.reshape(shape)
    return header, meta, arrays


def _decode(node, arrays, name):
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, arrays, name) for v in node]
    if not isinstance(node, dict) or len(node) == 0:
        _fail(name, "structure holds an unknown value")
    if "__tensor__" in node:
        key = node["__tensor__"]
        if key not in arrays:
            _fail(name, f"structure refers to a missing tensor {key!r}")
        arr = arrays[key]
        if arr.dtype == np.uint16:        # BF16 words
            arr = arr if arr.flags.c_contiguous else arr.copy()     # (0-d stays 0-d)
            t = _C.from_numpy(arr.view(np.int16)).view(_C.bfloat16)
        else:
            t = _C.from_numpy(arr)
        if node.get("parameter"):
            from .nn.parameter import Parameter
            return Parameter(t, requires_grad=bool(node.get("requires_grad", True)))
        if node.get("requires_grad"):
            t.requires_grad_(True)
        return t
    if "__float__" in node:
        return float(node["__float__"])
    if "__dtype__" in node:
        return getattr(_C, node["__dtype__"])
    if "__device__" in node:
        from ._device import device
        return device(node["__device__"])
    if "__tuple__" in node:
        return tuple(_decode(v, arrays, name) for v in node["__tuple__"])
    for kind, cls in (("__dict__", dict), ("__odict__", OrderedDict), ("__counter__", Counter)):
        if kind in node:
            items = node[kind]
            if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2
                                                      for p in items):
                _fail(name, f"malformed {kind} entry")
            out = cls()
            for k, v in items:
                out[_decode(k, arrays, name)] = _decode(v, arrays, name)
            return out
    _fail(name, f"structure holds an unknown object {sorted(node)[:3]}")


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None,
         **pickle_load_args):
    """Read what cddp.save wrote (or any safetensors file: a dict of its tensors). No code
    runs. map_location is accepted for torch compatibility: tensors load on the CPU."""
    if pickle_module is not None:
        raise ValueError("cddp.load never unpickles; pickle_module is not supported")
    buf, name = _read_all(f)
    header, meta, arrays = _parse(buf, name)
    if meta.get("format") != "cddp" or "cddp_structure" not in meta:
        # a plain safetensors file: its tensors by name, in file order
        return OrderedDict((k, _C.from_numpy(a)) for k, a in arrays.items())
    try:
        structure = json.loads(meta["cddp_structure"])
    except (TypeError, json.JSONDecodeError) as e:
        _fail(name, f"structure is not valid JSON ({e})")
    obj = _decode(structure, arrays, name)
    if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
        if str(map_location).startswith("cuda"):
            obj = _map_cuda(obj, map_location)
    return obj


def _map_cuda(obj, loc):
    """Tensors asked onto CUDA go through Tensor.to (the no-GPU fallback policy applies)."""
    if isinstance(obj, Tensor):
        return obj.to(loc)
    if isinstance(obj, dict):
        for k in list(obj):
            obj[k] = _map_cuda(obj[k], loc)
        return obj
    if isinstance(obj, list):
        return [_map_cuda(v, loc) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_map_cuda(v, loc) for v in obj)
    return obj


__all__ = ["save", "load", "CheckpointError"]
