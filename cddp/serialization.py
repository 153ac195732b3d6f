"""cddp.save / cddp.load — torch.save / torch.load over safetensors files.

Two layouts, both safetensors files (so `safetensors.numpy.load_file` reads the tensor bytes
of either, and weights move to torch through it):

    u64 little-endian N | N bytes JSON header (space-padded to 8) | tensor bytes

1. State dicts — what a JSON structure carries: dict (any JSON-able scalar keys, order kept),
   OrderedDict (a state dict's _metadata kept), Counter, list, tuple (not namedtuples), nested
   at most MAX_DEPTH deep, without
   cycles; leaves Tensor, Parameter, None, bool, int, float (incl. inf/nan), str, cddp.dtype,
   cddp.device (exact types: subclasses, and tensors with attributes, go to layout 2). The
   header maps each tensor's name — its dotted path of keys ("fc.weight", "model.fc.weight",
   "t3" where a key is not a string or an int; _Tensors) — to {"dtype", "shape",
   "data_offsets"}, so safetensors readers (torch's included) see a state dict's own keys; its
   "__metadata__" holds {"format": "cddp", "cddp_structure": JSON of the saved object} where
   tensors appear as {"__tensor__": "fc.weight", ...}. Loading runs no code and looks up nothing a file names: it
   parses JSON and copies bytes. Each tensor is stored on its own (views and
   tied weights are stored twice and load unshared, as before).
2. Whole objects — anything else picklable (torch.save(model), an ndarray, a Namespace, a set,
   a cycle ...): "__metadata__" {"format": "cddp-pickle"}, entries "data.pkl" (the pickle)
   and "data/<n>" (raw storages the pickle refers to by persistent id, as torch's zip format
   does); tensors sharing a storage stay shared, views stay views. cddp/_checkpoint_pickle.py
   has the layout. Loading it is safe by default: weights_only=True (torch >= 2.6's default)
   unpickles through _weights_only_unpickler.py, which resolves only allowlisted globals
   (tensors, containers, primitives, NumPy arrays/dtypes/scalars through checked calls, cddp
   dtypes/devices/Size, and what add_safe_globals / safe_globals allowlist) and raises
   UnpicklingError naming anything else; weights_only=False unpickles anything, for files
   from a trusted source.

A file is checked as the safetensors library checks it, before any tensor is built or any
pickle byte is read: the header length against the file's size (read first, so /dev/zero or
a 2^63 length costs nothing), the tensors covering the data section exactly (no gap, overlap
or trailing byte), each one's size = shape x itemsize, bool bytes 0 or 1, and the structure
against a fixed vocabulary (dtype names from the dtype table only). Every way a file can be
wrong raises CheckpointError with the reason (or, under weights_only, UnpicklingError for what
the unpickler refuses); nothing else escapes from a bad file.

Formats: load() sniffs the first bytes and hands the file to the reader registered for what it
sees (_FORMATS): safetensors files go to the reader their "format" names (_load_safetensors);
torch.save's zip files to cddp/_torch_zip.py (weights_only rules, torch's names mapped to
cddp's; weights_only=False builds the rest as pickle does); torch's legacy pickle format is refused by name with how to re-save it.

Writes to a path are atomic: the bytes go to an unnamed file (O_TMPFILE) in the target's
directory, fsync, then it is linked under a temporary name and renamed over the target, and
the directory is fsync'ed — a process killed mid-save leaves the previous file intact and,
with O_TMPFILE, nothing else. A symlink is followed (its target is replaced, the link stays);
an existing file the process may not write is refused as open() refuses it; a path that is
not a regular file (/dev/null, a FIFO) is written through, as torch.save writes; a file with
other hard links gets a new inode (the other names keep the old bytes: the price of the
atomic rename). Where the filesystem lacks O_TMPFILE the temporary file is named
.<target>.<pid>.<random>.tmp from the start; the writer holds a lock on it, and every later
save or load of that path removes the temporaries whose writer is dead. Tensor bytes go from
the tensors' own memory to the file (no copy); load reads the data section into one buffer
(or maps it, mmap=True) and the tensors view it.
"""
from collections import Counter, OrderedDict
import errno
import fcntl
import json
import math
import mmap as _mmap
import os
import pickle
import secrets
import stat
import struct

import numpy as np

from . import _C
from . import _checkpoint_pickle
from ._weights_only_unpickler import (UnpicklingError, add_safe_globals, get_safe_globals,  # noqa: F401
                                      clear_safe_globals, safe_globals)

Tensor = _C.Tensor

# cddp dtype -> (safetensors name, NumPy dtype of the bytes). bfloat16 has no NumPy dtype: its
# bytes travel as uint16 words and are read back through Tensor.view(bfloat16).
_DTYPES = {"float32": ("F32", np.float32), "float64": ("F64", np.float64),
           "int64": ("I64", np.int64), "int32": ("I32", np.int32), "bool": ("BOOL", np.bool_),
           "float16": ("F16", np.float16), "bfloat16": ("BF16", np.uint16),
           "uint8": ("U8", np.uint8), "int8": ("I8", np.int8), "int16": ("I16", np.int16)}
_ST_TO_NP = {v[0]: v[1] for v in _DTYPES.values()}
_ST_TO_NP.setdefault("U8", np.uint8)   # raw bytes: the entries of whole-object (pickle) files
_MAX_HEADER = 100 << 20          # safetensors' own limit
_MAGIC_ZIP = b"PK\x03\x04"       # torch.save's zip format
_MAGIC_PICKLE = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
MAX_DEPTH = 100                  # nesting of containers, on save and on load
_MAX_DIMS = 12                   # CDDP_MAX_DIMS


class CheckpointError(RuntimeError):
    """cddp.load could not read the file: it is truncated, corrupt, forged or of a foreign
    format. The only exception a bad file raises; `reason` says what is wrong, `name` which
    file."""

    def __init__(self, name, reason):
        self.name, self.reason = name, reason
        super().__init__(f"cddp.load: {name} is not a readable cddp checkpoint: {reason}")


def _fail(name, why):
    raise CheckpointError(name, why)


class _MissingAttribute(CheckpointError, AttributeError):
    """A pickle in the file names a class or function this process cannot find (a script's
    own dataclass, saved from __main__): an AttributeError too, as pickle's is under torch.load,
    so `except AttributeError` handlers written for torch still catch it."""

    def __init__(self, name, reason):
        CheckpointError.__init__(self, name, reason)
        self.args = (f"cddp.load: {name} names something this process cannot import "
                     f"(define or import it before loading): {reason}",)


class _NotJSON(TypeError):
    """The object is not what the JSON structure carries: save() pickles it instead."""


# ---- encoding --------------------------------------------------------------------------------

class _Tensors:
    """The tensors of a state-dict file and their entry names: the dotted path of string keys
    and indices that leads to each ("layer1.0.weight", "model.fc.bias", "opt.state.0.exp_avg"),
    so the safetensors library and torch's safetensors.torch.load_file see a state dict's own
    names; "t<i>" where a path has a non-string key or its name is taken."""

    def __init__(self):
        self.items, self.names = [], set()
        self.containers = set()       # ids of the containers written so far (sharing check)

    def add(self, t, wanted):
        name = wanted
        if not name or name in self.names or name == "__metadata__":
            name = f"t{len(self.items)}"
            while name in self.names:
                name += "_"
        self.names.add(name)
        self.items.append((name, t))
        return name


def _child(name, key):
    """The dotted name below `name` for a dict key or list index (None: no usable name)."""
    if name is None or isinstance(key, bool) or not isinstance(key, (str, int)):
        return None
    return f"{name}.{key}" if name else str(key)


def _encode(obj, tensors, where, path, name=""):
    """JSON-able structure for obj; tensors are added to `tensors` (_Tensors) and referenced by
    entry name (`name`: obj's dotted path). `path` holds the ids of the containers above obj
    (cycles, depth). Scalars and tensors by exact type: a subclass (an IntEnum, np.float64, a
    Tensor subclass) or a tensor carrying attributes is _NotJSON, so the object is pickled and
    keeps its type."""
    if obj is None or type(obj) in (bool, str, int):
        return obj
    if type(obj) is float:
        if math.isfinite(obj):
            return obj
        return {"__float__": repr(obj)}
    if isinstance(obj, Tensor):
        from .nn.parameter import Parameter
        if type(obj) not in (Tensor, Parameter) or obj.__dict__:
            raise _NotJSON(f"cddp.save: a {type(obj).__name__} with attributes at "
                           f"{where or 'the top level'}")
        enc = {"__tensor__": tensors.add(obj.detach(), name),
               "requires_grad": bool(obj.requires_grad)}
        if type(obj) is Parameter:
            enc["parameter"] = True
        return enc
    if getattr(obj, "_is_complex_tensor", False):      # cddp/_complex.py: its real view
        enc = {"__tensor__": tensors.add(obj._r.detach(), name),
               "requires_grad": bool(obj.requires_grad), "complex": True}
        if getattr(obj, "_is_complex_parameter", False):
            enc["parameter"] = True
        return enc
    if isinstance(obj, _C.dtype):
        return {"__dtype__": _dtype_name(obj, where)}
    if type(obj).__name__ == "device" and hasattr(obj, "type") and hasattr(obj, "index"):
        return {"__device__": str(obj)}
    if isinstance(obj, (dict, list)) or (isinstance(obj, tuple) and not hasattr(obj, "_fields")):
        return _encode_container(obj, tensors, where, path, name)
    raise _NotJSON(f"cddp.save: an object of type {type(obj).__name__} at "
                   f"{where or 'the top level'} is not a tensor, number, string, bool, None, "
                   "dtype, device or dict/list/tuple of them")


_SCALARS = (bool, int, float, str, type(None))


def _encode_container(obj, tensors, where, path, name):
    if id(obj) in path:
        raise _NotJSON(f"cddp.save: the object at {where or 'the top level'} contains itself")
    flat = isinstance(obj, tuple) and all(type(v) in _SCALARS for v in obj)
    if not flat:
        # one container reached twice: the JSON layout would write it twice (and a chain of
        # such sharing doubles per level); the pickle keeps it one object, as torch.save does.
        # A tuple of scalars (optimizer groups share their betas tuple) is copied instead:
        # immutable, and nothing nests below it
        if id(obj) in tensors.containers:
            raise _NotJSON(f"cddp.save: the container at {where or 'the top level'} appears "
                           "more than once")
        tensors.containers.add(id(obj))
    if len(path) >= MAX_DEPTH:
        raise ValueError(f"cddp.save: containers nested deeper than {MAX_DEPTH} levels at "
                         f"{where[:200]}...; checkpoints hold state dicts, not deep chains")
    path.add(id(obj))
    try:
        if isinstance(obj, dict):
            items = [[_encode_key(k, where),
                      _encode(v, tensors, f"{where}[{k!r}]", path, _child(name, k))]
                     for k, v in obj.items()]
            kind = "__counter__" if isinstance(obj, Counter) else \
                "__odict__" if isinstance(obj, OrderedDict) else "__dict__"
            meta = getattr(obj, "_metadata", None) if kind == "__odict__" else None
            if isinstance(meta, dict):
                # a state dict's per-module versions (torch pickles the OrderedDict's __dict__)
                return {"__state_dict__": [items, _encode(meta, tensors, f"{where}._metadata",
                                                          path, _child(name, "_metadata"))]}
            return {kind: items}
        enc = [_encode(v, tensors, f"{where}[{i}]", path, _child(name, i))
               for i, v in enumerate(obj)]
        return enc if isinstance(obj, list) else {"__tuple__": enc}
    finally:
        path.discard(id(obj))


def _encode_key(k, where):
    if k is None or isinstance(k, (bool, int, float, str)):
        return _encode(k, _Tensors(), where, set())
    raise _NotJSON(f"cddp.save: dict key {k!r} at {where or 'the top level'} is not a "
                   "string, number, bool or None")


def _dtype_name(dt, where):
    name = str(dt).split(".")[-1]
    if name not in _DTYPES:
        raise TypeError(f"cddp.save: dtype {dt} at {where or 'the top level'} cannot be saved")
    return name


def _serialize(obj):
    tensors = _Tensors()
    structure = _encode(obj, tensors, "", set())
    header, chunks, offset = {}, [], 0
    for key, t in tensors.items:
        if t.is_meta:
            raise RuntimeError(f"cddp.save: the tensor at {key} is on the meta device and has "
                               "no values to save; materialize it first (module.to_empty("
                               "device='cpu'), then initialize or load it)")
        if t.dtype == _C.bfloat16:          # its raw 16-bit words: NumPy has no bfloat16
            arr = t.reshape(-1).view(_C.int16).numpy().reshape(tuple(t.shape))
        else:
            arr = t.numpy()
        if not arr.flags.c_contiguous:       # (np.ascontiguousarray would make 0-d arrays 1-d)
            arr = arr.copy(order="C")
        name, _np = _DTYPES[str(t.dtype).split(".")[-1]]
        raw = arr.reshape(-1).view(np.uint8)    # the tensor's own bytes: no copy
        header[key] = {"dtype": name, "shape": list(arr.shape),
                           "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "cddp", "cddp_version": "1",
                              "cddp_structure": json.dumps(structure, allow_nan=False)}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    return [struct.pack("<Q", len(hbytes)), hbytes] + chunks


def save(obj, f, pickle_module=pickle, pickle_protocol=None,
         _use_new_zipfile_serialization=True, _disable_byteorder_record=False, *, format=None):  # noqa: A002
    """Write obj to f (a path, a pathlib.Path or a writable binary file object); atomic for
    paths. A state dict (containers of tensors, numbers, strings, dtypes, devices) is written
    as safetensors + a JSON structure; any other picklable object as a whole-object checkpoint
    (cddp/_checkpoint_pickle.py: a pickle whose tensors and arrays are stored beside it).
    pickle_protocol (2 to pickle.HIGHEST_PROTOCOL, default 4) applies to the latter.

    format="torch" (default: $CDDP_SAVE_FORMAT, else "cddp") writes a state dict in
    torch.save's zip format instead, which torch.load reads (cddp/_torch_zip_writer.py)."""
    fmt = format if format is not None else (os.environ.get("CDDP_SAVE_FORMAT") or "cddp")
    if fmt not in ("cddp", "torch"):
        raise ValueError(f"cddp.save: format must be 'cddp' or 'torch', got {fmt!r}"
                         + ("" if format is not None else " (from $CDDP_SAVE_FORMAT)"))
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("cddp.save pickles with the standard pickle module only; "
                         f"pickle_module={getattr(pickle_module, '__name__', pickle_module)!r} "
                         "is not supported")
    if not isinstance(f, (str, bytes, os.PathLike)) and not hasattr(f, "write"):
        raise TypeError(f"cddp.save: f must be a path or a binary file object, got "
                        f"{type(f).__name__}")
    if fmt == "torch":
        from . import _torch_zip_writer
        name = os.fsdecode(f) if isinstance(f, (str, bytes, os.PathLike)) else \
            getattr(f, "name", None)
        parts = _torch_zip_writer.serialize(
            obj, _torch_zip_writer.archive_prefix(name if isinstance(name, str) else None))
    else:
        try:
            parts = _serialize(obj)
        except _NotJSON:
            parts = _checkpoint_pickle.serialize(obj, pickle_protocol, _DTYPES)
    if isinstance(f, (str, bytes, os.PathLike)):
        _atomic_write(os.fsdecode(f), parts)
    else:
        for p in parts:
            f.write(p)
        if hasattr(f, "flush"):
            f.flush()


# ---- atomic writes, temporaries of dead writers ---------------------------------------------

_USE_O_TMPFILE = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")


def _temp_name(path):
    """.<target>.<pid>.<random>.tmp beside the target: the pid lets a later save or load tell
    a dead writer's leftover from a live writer's file (_sweep_temps)."""
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:              # EPERM: someone else's process, alive
        return True
    return True


def _sweep_temps(path):
    """Remove the temporaries of `path` left by writers that died mid-save: named
    .<base>.<pid>.<hex>.tmp, their pid gone, and no lock held on them (a writer holds one from
    creation to rename, so a live writer in another pid namespace is spared too). Best effort:
    a directory that cannot be listed or a file that cannot be removed is left as it is."""
    d, base = os.path.split(os.path.abspath(path))
    prefix = f".{base}."
    try:
        names = os.listdir(d)
    except OSError:
        return
    for nm in names:
        if not (nm.startswith(prefix) and nm.endswith(".tmp")):
            continue
        pid, _, tag = nm[len(prefix):-4].partition(".")
        if not (pid.isdigit() and tag and all(c in "0123456789abcdef" for c in tag)):
            continue                       # not a name this module makes
        if _pid_alive(int(pid)):
            continue
        full = os.path.join(d, nm)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(full)
        except OSError:
            pass
        finally:
            os.close(fd)


def _open_temp(directory, path, mode, unnamed):
    """(fd, name or None): an unnamed O_TMPFILE file in `directory` (when `unnamed` and the
    filesystem has O_TMPFILE), else a named temporary. Locked (LOCK_EX) either way."""
    fd, tmp = -1, None
    if unnamed:
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise
    if fd < 0:
        tmp = _temp_name(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass                     # no locks here (some network filesystems): pid alone decides
    return fd, tmp


class _NoLink(Exception):
    """The unnamed file could not be given a name (no usable /proc/self/fd)."""


def _write_all(fd, parts):
    for p in parts:
        view = memoryview(p)
        while view:
            view = view[os.write(fd, view):]


def _write_into(dfd, path, parts, mode, unnamed):
    """Write parts to a temporary beside path (directory fd dfd), fsync, rename over path."""
    directory, base = os.path.split(path)
    fd, tmp = _open_temp(directory, path, mode, unnamed)
    try:
        os.fchmod(fd, mode)
        _write_all(fd, parts)
        os.fsync(fd)
        if tmp is None:          # name the unnamed file (linkat through /proc: link(2) would
            name = _temp_name(path)  # link the /proc symlink itself), then move it into place
            try:
                os.link(f"/proc/self/fd/{fd}", os.path.basename(name), src_dir_fd=dfd,
                        dst_dir_fd=dfd, follow_symlinks=True)
            except OSError as e:
                raise _NoLink() from e
            tmp = name
        os.replace(os.path.basename(tmp), base, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        os.close(fd)


def _write_through(path, parts):
    """Write parts into an existing non-regular file (a device such as /dev/null, a FIFO), as
    open(path, "wb") does: there is nothing to replace atomically. The open does not wait: a
    FIFO nobody reads raises (ENXIO) instead of blocking the save forever."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        os.set_blocking(fd, True)
        _write_all(fd, parts)
    finally:
        os.close(fd)


def _atomic_write(path, parts):
    global _USE_O_TMPFILE
    # a symlink's target is what gets the new bytes (the link stays a link, as torch.save
    # writes through it)
    path = os.path.realpath(os.path.abspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return _write_through(path, parts)
    if st is not None and not os.access(path, os.W_OK):
        # the rename would need only the directory's permission: refuse as open() would
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    _sweep_temps(path)
    if st is not None:           # the old file's mode, else what a plain open() would give
        mode = st.st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            _write_into(dfd, path, parts, mode, _USE_O_TMPFILE)
        except _NoLink:
            _USE_O_TMPFILE = False           # this process cannot name unnamed files
            _write_into(dfd, path, parts, mode, False)
        try:                     # make the rename itself durable
            os.fsync(dfd)
        except OSError:
            pass
    finally:
        os.close(dfd)


# ---- reading: a bounded source ---------------------------------------------------------------

_CHUNK = 64 << 20                # reads from a stream of unknown size grow by this much at most


class _Source:
    """What load() reads from: a path or a binary file object. `size` is the byte count when
    it is known before reading (regular files, seekable objects), else None; reads are exact,
    and on a stream of unknown size memory grows only as bytes actually arrive."""

    def __init__(self, f, mmap=False):
        self._own, self._pending, self.size, self._map, self._pos = None, b"", None, None, 0
        if mmap and not isinstance(f, (str, bytes, os.PathLike)):
            raise ValueError("f must be a file path in order to use the mmap argument")
        if isinstance(f, (str, bytes, os.PathLike)):
            self.name = os.fsdecode(f)
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below)
            fd = os.open(self.name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                _fail(self.name, f"it is {_file_kind(st.st_mode)}, not a regular file")
            self._fh = self._own = open(fd, "rb", buffering=0)
            self.size = st.st_size
            if mmap and st.st_size:      # private pages: tensors may be written, the file not
                self._map = _mmap.mmap(fd, 0, access=_mmap.ACCESS_COPY)
            _sweep_temps(self.name)
        elif hasattr(f, "read"):
            self.name = getattr(f, "name", "<file object>")
            self._fh = f
            self.size = _remaining(f)
        else:
            raise TypeError(f"cddp.load: f must be a path or a binary file object, got "
                            f"{type(f).__name__}")

    def peek(self, n):
        """Up to n first bytes (fewer when the file is shorter), read again by read()."""
        self._pending = bytes(self._read_upto(n))
        return self._pending

    def read(self, n, what):
        """Exactly n bytes (a writable buffer), else CheckpointError naming `what`."""
        head, self._pending = self._pending[:n], self._pending[n:]
        rest = self._read_upto(n - len(head))
        if len(head) + len(rest) < n:
            _fail(self.name, f"{what}: wanted {n} bytes, the file ends "
                             f"{n - len(head) - len(rest)} bytes short (truncated?)")
        return bytearray(head) + bytearray(rest) if head else rest

    def _read_upto(self, n):
        """Up to n bytes: into one uninitialised buffer when the size is known (the tensor
        data is read once, with no copy; with mmap a view of the mapped file), else grown
        chunk by chunk as bytes arrive."""
        if self._map is not None:
            k = max(0, min(n, len(self._map) - self._pos))
            buf = np.frombuffer(self._map, np.uint8, k, self._pos)
            self._pos += k
            return buf
        if self.size is not None:    # cddp's allocator: large blocks on huge pages (a cold
            buf = _C.empty(n, dtype=_C.uint8).numpy()   # 256 MiB read: 0.04 s, not 0.46)
            view, got = memoryview(buf), 0
            readinto = getattr(self._fh, "readinto", None)
            while got < n:
                if readinto is not None:
                    k = readinto(view[got:])
                else:
                    chunk = self._fh.read(n - got)
                    if not isinstance(chunk, (bytes, bytearray)):
                        _fail(self.name, f"the file object's read() returned "
                                         f"{type(chunk).__name__}")
                    view[got:got + len(chunk)] = chunk
                    k = len(chunk)
                if not k:
                    break
                got += k
            return buf[:got]
        buf = bytearray()
        while len(buf) < n:
            chunk = self._fh.read(min(n - len(buf), _CHUNK))
            if not isinstance(chunk, (bytes, bytearray)):
                _fail(self.name, f"the file object's read() returned {type(chunk).__name__}")
            if not chunk:
                break
            buf += chunk
        return buf

    def read_all(self):
        """Every remaining byte (bytes); a stream is read to its end."""
        if self.size is not None:
            return bytes(self.read(self.size, "the file"))
        return bytes(self._pending) + bytes(self._read_upto(1 << 62))

    def at_end(self):
        return not self._pending and not self._fh.read(1)

    def close(self):
        if self._own is not None:    # a mapping stays open while tensors view it
            self._own.close()


def _remaining(f):
    """Bytes left in file object f when that can be known without reading: a regular file
    behind fileno(), or a seekable object (BytesIO); else None (pipes, sockets, devices)."""
    try:
        st = os.fstat(f.fileno())
        return st.st_size - f.tell() if stat.S_ISREG(st.st_mode) else None
    except (AttributeError, OSError, ValueError):
        pass
    try:
        if f.seekable():
            pos = f.tell()
            end = f.seek(0, os.SEEK_END)
            f.seek(pos)
            return end - pos
    except (AttributeError, OSError, ValueError):
        pass
    return None


def _file_kind(mode):
    for test, what in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return what
    return "a special file"


# ---- the safetensors reader ------------------------------------------------------------------

def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _json(text, name, what):
    """Parse JSON text; any failure (encoding, syntax, duplicate keys, nesting past the
    parser's recursion limit) is a CheckpointError."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        _fail(name, f"{what} is nested too deeply")
    except (ValueError, TypeError) as e:    # JSONDecodeError, UnicodeDecodeError: ValueErrors
        _fail(name, f"{what} is not valid JSON ({e})")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _check_entry(name, key, info):
    """(st dtype, shape, begin, end) of one header entry, its form checked (unknown fields are
    ignored, as safetensors ignores them)."""
    if not isinstance(info, dict):
        _fail(name, f"entry {key!r} is not an object")
    dt, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dt, str) or dt not in _ST_TO_NP:
        _fail(name, f"tensor {key!r} has unsupported dtype {str(dt)[:40]!r}")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        _fail(name, f"tensor {key!r} has an invalid shape {str(shape)[:80]}")
    if len(shape) > _MAX_DIMS:
        _fail(name, f"tensor {key!r} has {len(shape)} dimensions; cddp tensors have at most "
                    f"{_MAX_DIMS}")
    if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) and o >= 0 for o in offs)):
        _fail(name, f"tensor {key!r} has invalid data_offsets {str(offs)[:80]}")
    return dt, shape, offs[0], offs[1]


def _check_layout(name, entries, data_len):
    """safetensors' rule: sorted by offsets, the tensors tile [0, data_len) exactly — each
    starts where the previous one ended, ends at or after its start, and holds shape x
    itemsize bytes; the last one ends where the file ends."""
    pos = 0
    for key, (dt, shape, begin, end) in sorted(entries.items(), key=lambda kv: kv[1][2:]):
        if begin != pos or end < begin:
            what = ("overlaps the tensor before it" if begin < pos else
                    "leaves a gap after the tensor before it" if begin > pos else
                    "ends before it starts")
            _fail(name, f"tensor {key!r} spans bytes [{begin}, {end}) of the data section, "
                        f"which {what} (invalid offsets)")
        need = math.prod(shape) * np.dtype(_ST_TO_NP[dt]).itemsize
        if end - begin != need:
            _fail(name, f"tensor {key!r}: shape {shape} of {dt} needs {need} bytes, the file "
                        f"gives {end - begin}")
        pos = end
    if pos > data_len:
        _fail(name, f"the tensors need {pos} bytes of data but the file has {data_len} after "
                    "the header (truncated?)")
    if pos < data_len:
        _fail(name, f"file not fully covered: the tensors end at byte {pos} of the data "
                    f"section but it has {data_len} bytes (a wrong header length, or bytes "
                    "appended)")


def _read_safetensors(src):
    """(metadata, {key: ndarray}) of a safetensors file, checked as the safetensors library
    checks it (plus bool bytes in {0, 1}) before any tensor is built. The header length is
    checked against the file's size before the header is read, the header before the data."""
    name = src.name
    (hlen,) = struct.unpack("<Q", bytes(src.read(8, "the header length")))
    if hlen > _MAX_HEADER:
        _fail(name, f"header length {hlen} exceeds the {_MAX_HEADER}-byte limit (corrupt or "
                    "foreign file)")
    if src.size is not None and 8 + hlen > src.size:
        _fail(name, f"header claims {hlen} bytes but the file has {src.size - 8} after the "
                    "length field (truncated?)")
    hbytes = bytes(src.read(hlen, "the header"))
    if not hbytes.startswith(b"{"):
        _fail(name, "header does not start with '{' (corrupt or foreign file)")
    header = _json(hbytes, name, "header")
    if not isinstance(header, dict):
        _fail(name, "header is not a JSON object")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        _fail(name, "__metadata__ is not an object of strings")
    entries = {k: _check_entry(name, k, v) for k, v in header.items() if k != "__metadata__"}
    data_len = max((e[3] for e in entries.values()), default=0)
    _check_layout(name, entries, data_len if src.size is None else src.size - 8 - hlen)
    data = src.read(data_len, "the tensor data")
    if src.size is None and not src.at_end():
        _fail(name, "file not fully covered: bytes follow the last tensor")
    arrays = {}
    for key, (dt, shape, begin, end) in entries.items():
        arr = np.frombuffer(data, dtype=_ST_TO_NP[dt], count=math.prod(shape), offset=begin)
        if dt == "BOOL" and arr.size and int(arr.view(np.uint8).max()) > 1:
            _fail(name, f"bool tensor {key!r} holds byte values other than 0 and 1")
        if not arr.flags.aligned:        # safetensors packs tensors back to back: C kernels
            arr = arr.copy()             # need element-aligned data, so copy the odd ones
        arrays[key] = arr.reshape(shape)
    return meta, arrays


def _array_tensor(arr):
    """The tensor over a read array; uint16 arrays hold BF16 words (the only uint16 entries)."""
    if arr.dtype == np.uint16:
        arr = arr if arr.flags.c_contiguous else arr.copy()     # (0-d stays 0-d)
        return _C.from_numpy(arr.view(np.int16)).view(_C.bfloat16)
    return _C.from_numpy(arr)


# ---- the structure ---------------------------------------------------------------------------

_CONTAINERS = (("__dict__", dict), ("__odict__", OrderedDict), ("__counter__", Counter))


class _Decoder:
    """Rebuilds the saved object from its JSON structure. Only this vocabulary is understood;
    every other shape of node is a CheckpointError (nothing a file says is looked up)."""

    def __init__(self, name, arrays):
        self.name, self.arrays, self.used = name, arrays, set()

    def fail(self, why):
        _fail(self.name, f"structure: {why}")

    def node(self, v, depth):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if depth >= MAX_DEPTH:
            self.fail(f"containers nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, list):
            return [self.node(x, depth + 1) for x in v]
        if not isinstance(v, dict) or len(v) == 0:
            self.fail(f"unknown value of type {type(v).__name__}")
        if "__tensor__" in v:
            return self.tensor(v)
        if len(v) != 1:
            self.fail(f"unknown object with keys {sorted(v)[:4]}")
        (tag, x), = v.items()
        if tag == "__float__":
            if x not in ("inf", "-inf", "nan"):
                self.fail(f"__float__ holds {str(x)[:40]!r}, not inf, -inf or nan")
            return float(x)
        if tag == "__dtype__":
            if not isinstance(x, str) or x not in _DTYPES:
                self.fail(f"__dtype__ names {str(x)[:40]!r}, not one of {sorted(_DTYPES)}")
            return getattr(_C, x)
        if tag == "__device__":
            return self.device(x)
        if tag == "__tuple__":
            if not isinstance(x, list):
                self.fail("__tuple__ does not hold a list")
            return tuple(self.node(e, depth + 1) for e in x)
        for kind, cls in _CONTAINERS:
            if tag == kind:
                return self.mapping(cls, kind, x, depth)
        if tag == "__state_dict__":       # an OrderedDict and its _metadata
            if not isinstance(x, list) or len(x) != 2:
                self.fail("malformed __state_dict__ entry")
            out = self.mapping(OrderedDict, tag, x[0], depth)
            meta = self.node(x[1], depth + 1)
            if not isinstance(meta, dict):
                self.fail("__state_dict__ metadata is not a dict")
            out._metadata = meta
            return out
        self.fail(f"unknown object {tag[:40]!r}")

    def tensor(self, v):
        key = v["__tensor__"]
        if set(v) - {"__tensor__", "requires_grad", "parameter", "complex"}:
            self.fail(f"tensor reference with unknown keys {sorted(v)[:4]}")
        rg, param = v.get("requires_grad", False), v.get("parameter", False)
        cplx = v.get("complex", False)
        if not isinstance(cplx, bool):
            self.fail(f"tensor {key!r}: complex must be true or false")
        if not isinstance(key, str) or key not in self.arrays:
            self.fail(f"refers to a missing tensor {str(key)[:40]!r}")
        if not isinstance(rg, bool) or not isinstance(param, bool):
            self.fail(f"tensor {key!r}: requires_grad and parameter must be true or false")
        if key in self.used:
            self.fail(f"tensor {key!r} is referred to twice")
        self.used.add(key)
        arr = self.arrays[key]
        if rg and arr.dtype.kind != "f" and arr.dtype != np.uint16:     # (uint16: BF16)
            self.fail(f"tensor {key!r} of {arr.dtype} cannot require a gradient")
        if cplx and (arr.dtype not in (np.float32, np.float64) or arr.ndim == 0 or
                     arr.shape[-1] != 2):
            self.fail(f"complex tensor {key!r} must be stored as float32/float64 (..., 2), "
                      f"not {arr.dtype} {list(arr.shape)}")
        t = _array_tensor(arr)
        if cplx:
            from ._complex import view_as_complex
            t = view_as_complex(t)
        if param:
            from .nn.parameter import Parameter
            return Parameter(t, requires_grad=rg)
        if rg:
            t.requires_grad_(True)
        return t

    def device(self, x):
        from ._device import device
        if not isinstance(x, str) or len(x) > 64:
            self.fail("__device__ does not hold a device name")
        try:
            return device(x)
        except (RuntimeError, ValueError, TypeError) as e:
            self.fail(f"__device__ {x!r}: {e}")

    def mapping(self, cls, kind, items, depth):
        if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2
                                                  for p in items):
            self.fail(f"malformed {kind} entry")
        out = cls()
        for k, v in items:
            key = self.node(k, depth + 1)
            if not (key is None or isinstance(key, (bool, int, float, str))):
                self.fail(f"{kind} key of type {type(key).__name__} (keys are scalars)")
            out[key] = self.node(v, depth + 1)
        return out


def _load_safetensors(src):
    meta, arrays = _read_safetensors(src)
    fmt = meta.get("format")
    if fmt == _checkpoint_pickle.FORMAT:        # a whole-object checkpoint
        return _checkpoint_pickle.read(src, meta, arrays, src.options)
    if fmt != "cddp" or "cddp_structure" not in meta:
        # a plain safetensors file: its tensors by name, in file order
        return _relocate_tree(OrderedDict((k, _array_tensor(a)) for k, a in arrays.items()),
                              src.options.relocate)
    structure = _json(meta["cddp_structure"], src.name, "structure")
    obj = _Decoder(src.name, arrays).node(structure, 0)
    return _relocate_tree(obj, src.options.relocate)


def _refuse_pickle(src):
    _fail(src.name, "it is a torch.save file in torch's legacy pickle format (torch < 1.6, or "
                    "_use_new_zipfile_serialization=False), which cddp does not read. Re-save "
                    "it where torch is installed with torch.save's default (zip) format, which "
                    "cddp.load reads, or convert a state dict: "
                    "`safetensors.torch.save_file(torch.load(path), out)`")


def _load_torch_zip(src):
    from . import _torch_zip
    return _torch_zip.read(src, src.options)        # map_location: storage by storage


def _is_zip(first):
    return first[:4] == _MAGIC_ZIP


def _is_safetensors(first):
    # an 8-byte little-endian header length, then the JSON header. The length alone can look
    # like a pickle's or a zip's magic (a 640-byte header starts 80 02: 0x0280), the "{" after
    # it cannot: a legacy torch file has its magic number there, a zip its local header.
    return first[8:9] == b"{"


def _is_pickle(first):
    return first[:2] in _MAGIC_PICKLE


# The formats load() reads: (test on the file's first 9 bytes, reader). The first row whose
# test passes reads the file: safetensors files, whose __metadata__ "format" says which of
# cddp's layouts it is (_load_safetensors: "cddp", the JSON structure; "cddp-pickle", whole
# objects — cddp/_checkpoint_pickle.py), then torch's zip files (cddp/_torch_zip.py, under
# the weights_only rules), torch's legacy pickles, refused; the last row takes the rest (to
# say why it is not a readable file).
_FORMATS = [
    (_is_safetensors, _load_safetensors),
    (_is_zip, _load_torch_zip),
    (_is_pickle, _refuse_pickle),
    (lambda first: True, _load_safetensors),
]


class _Options:
    """How load() was asked to read: weights_only, pickle's keyword arguments, and relocate
    (tensor, saved location) -> tensor, which applies map_location."""

    def __init__(self, weights_only, pickle_load_args, relocate):
        self.weights_only, self.pickle_load_args = weights_only, pickle_load_args
        self.relocate = relocate


_TRUE = ("1", "y", "yes", "true")


def _resolve_weights_only(weights_only, pickle_module):
    """torch.load's rule: None means True unless a pickle_module is given; the environment
    variables TORCH_FORCE_WEIGHTS_ONLY_LOAD / TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (the second
    only where weights_only was not passed) override, as in torch."""
    force = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    force_no = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    if force and force_no:
        raise RuntimeError("Only one of `TORCH_FORCE_WEIGHTS_ONLY_LOAD` or "
                           "`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` should be set, but both were set.")
    if force:
        return True
    if weights_only is None:
        return not force_no and pickle_module is None
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is "
                           "specified")
    return bool(weights_only)


def _device_of(spec):
    """A cddp.device from what map_location may name (str, cddp/torch device): RuntimeError
    for a malformed one; CUDA goes through the device policy now (one warning, or an error
    under CDDP_STRICT_DEVICE=1), before the file is read."""
    from ._device import device
    if not isinstance(spec, (str, device)) and hasattr(spec, "type"):
        spec = str(spec)                             # a torch.device
    if not isinstance(spec, (str, device)):
        raise TypeError(f"map_location: expected a device, got {type(spec).__name__}")
    dev = device(spec)
    if dev.type == "cuda":
        _C.zeros(0).to(dev)
    return dev


def _relocator(map_location):
    """relocate(tensor, saved location) -> tensor for torch's forms of map_location: None, a
    device (str, cddp.device), a dict {saved location: device}, or a callable(storage,
    location) returning a tensor of the same dtype and size, or None to keep it. Tensors stay
    on the CPU; a CUDA target only passes the device policy (Tensor.to returns them as they
    are)."""
    if map_location is None:
        return lambda t, loc: t
    if isinstance(map_location, dict):
        # a target is resolved (and passes the device policy) when a tensor saved at its key
        # is read, as torch applies the table: {"cuda:0": "cuda:1"} over a CPU checkpoint
        # does nothing and says nothing
        table, targets = {str(k): v for k, v in map_location.items()}, {}

        def by_table(t, loc):
            if loc not in table:
                return t
            if loc not in targets:
                targets[loc] = _device_of(table[loc])
            return t.to(targets[loc])
        return by_table
    if callable(map_location) and not isinstance(map_location, str):
        def call(t, loc):
            r = map_location(t, loc)
            if r is None:
                return t
            if not isinstance(r, Tensor) or r.dtype != t.dtype or r.numel() != t.numel():
                raise TypeError(f"map_location returned {type(r).__name__}; expected a tensor "
                                f"of {t.dtype} with {t.numel()} elements, or None")
            return r
        return call
    dev = _device_of(map_location)
    return lambda t, loc: t.to(dev)


_PICKLE_LOAD_ARGS = ("encoding", "errors", "fix_imports")


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Read what cddp.save wrote (or any safetensors file: a dict of its tensors) from f, a
    path, a pathlib.Path or a binary file object.

    weights_only (default True, as torch >= 2.6): a whole-object checkpoint is unpickled by
    the restricted unpickler (_weights_only_unpickler.py): tensors, containers, primitives,
    NumPy arrays/dtypes, cddp dtypes/devices/Size and what add_safe_globals allowlisted;
    anything else raises UnpicklingError naming it. weights_only=False unpickles anything — a
    file from a trusted source only. State-dict files (safetensors + JSON) never run code.
    map_location: None, "cpu", a device, a dict or a callable, as torch; tensors stay on the
    CPU (CUDA targets pass the device policy: one warning). mmap=True maps the file (private
    pages) instead of reading it; f must be a path. A file that cannot be read raises
    CheckpointError saying why (a missing path: FileNotFoundError, as torch)."""
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("cddp.load unpickles with the standard pickle module only; "
                         f"pickle_module={getattr(pickle_module, '__name__', pickle_module)!r} "
                         "is not supported")
    unknown = set(pickle_load_args) - set(_PICKLE_LOAD_ARGS)
    if unknown:
        raise TypeError(f"cddp.load() got unexpected keyword arguments {sorted(unknown)}")
    pickle_load_args.setdefault("encoding", "utf-8")
    opts = _Options(_resolve_weights_only(weights_only, pickle_module), pickle_load_args,
                    _relocator(map_location))
    src = _Source(f, mmap=bool(mmap))
    src.options = opts
    try:
        return _read(src)
    finally:
        src.close()


def _read(src):
    """The reader for the file's first bytes reads it. An exception other than CheckpointError
    (or UnpicklingError: weights_only refused something) that a forged file could still
    provoke in a reader is reported as a CheckpointError too, with its type and text: a bad
    file has one way to fail (an AttributeError — a pickled class this process lacks — is one
    that is also an AttributeError, as torch.load's is)."""
    try:
        first = src.peek(9)
        reader = next(read for test, read in _FORMATS if test(first))
        return reader(src)
    except CheckpointError:
        raise
    except AttributeError as e:
        raise _MissingAttribute(src.name, f"AttributeError: {e}") from e
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError,
            UnicodeError) as e:
        _fail(src.name, f"{type(e).__name__}: {e}")


def _relocate_tree(obj, relocate):
    """map_location over the tensors of a decoded JSON structure (every one saved on "cpu")."""
    if isinstance(obj, Tensor):
        return relocate(obj, "cpu")
    if isinstance(obj, dict):
        for k in list(obj):
            obj[k] = _relocate_tree(obj[k], relocate)
        return obj
    if isinstance(obj, list):
        return [_relocate_tree(v, relocate) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_relocate_tree(v, relocate) for v in obj)
    return obj


__all__ = ["save", "load", "CheckpointError", "UnpicklingError", "add_safe_globals",
           "get_safe_globals", "clear_safe_globals", "safe_globals"]
