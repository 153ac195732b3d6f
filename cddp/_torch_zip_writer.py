"""cddp.save(obj, f, format="torch") (or CDDP_SAVE_FORMAT=torch): write torch.save's zip
format, so torch.load — weights_only=True, its default — reads cddp's checkpoints as its own.
The layout is the one cddp/_torch_zip.py reads:

    <prefix>/data.pkl               pickle protocol 2; each tensor a call of
                                    torch._utils._rebuild_tensor_v2 on a persistent id
                                    ("storage", torch.<Type>Storage, key, "cpu", numel)
    <prefix>/.format_version        "1"           <prefix>/.storage_alignment   "64"
    <prefix>/byteorder              "little"      <prefix>/version              "3"
    <prefix>/data/<key>             a storage's bytes, stored (not compressed), 64-byte aligned
    <prefix>/.data/serialization_id

What it writes: the state-dict vocabulary of cddp's own format — dict, OrderedDict, list,
tuple, None, bool, int, float, str, tensors, parameters, dtypes, devices, Size (and NumPy
scalars, written as the Python numbers they hold) — as the exact
pickle opcodes torch's own save emits for them (written here, opcode by opcode: no object is
pickled by reference, so nothing names a cddp class and torch's weights_only unpickler accepts
every global). Anything else raises TypeError: torch cannot build cddp's classes anyway, so a
whole model belongs in cddp's default format. Each tensor is its own storage (contiguous from
offset 0): views and tied weights load unshared, as in cddp's default format. Tensor bytes go
from the tensors' memory to the file; the CRC-32 each zip entry needs is one pass over them.
"""
import os
import secrets
import struct
import sys
import zlib
from collections import OrderedDict

from . import _C

__all__ = ["serialize", "archive_prefix"]

_STORAGE = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
            "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
            "int16": "ShortStorage", "int8": "CharStorage", "uint8": "ByteStorage",
            "bool": "BoolStorage"}
_ALIGN = 64
_MAX_DEPTH = 100
_ZIP64_AT = 0xFFFFFFFF            # sizes and offsets from here on take ZIP64 fields


# ---- the pickle ------------------------------------------------------------------------------

def _global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


_ODICT = _global("collections", "OrderedDict") + b")R"          # OrderedDict()


class _Pickle:
    """Protocol-2 opcodes for the state-dict vocabulary; tensors become storage records."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.storages = []                  # (key, storage class name, bytes memoryview)
        self._path = set()

    def dump(self, obj):
        self._save(obj, "", 0)
        self.out += b"."
        return bytes(self.out)

    def _int(self, v):
        if 0 <= v < 256:
            self.out += b"K" + bytes([v])
        elif 0 <= v < 65536:
            self.out += b"M" + struct.pack("<H", v)
        elif -2 ** 31 <= v < 2 ** 31:
            self.out += b"J" + struct.pack("<i", v)
        else:
            raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
            if len(raw) > 255:
                raise OverflowError(f"cddp.save(format='torch'): integer {v} is too large")
            self.out += b"\x8a" + bytes([len(raw)]) + raw

    def _str(self, s):
        raw = s.encode("utf-8", "surrogatepass")
        self.out += b"X" + struct.pack("<I", len(raw)) + raw

    def _tuple(self, items, where, depth):
        if not items:
            self.out += b")"
            return
        if len(items) > 3:
            self.out += b"("
        for i, v in enumerate(items):
            self._save(v, f"{where}[{i}]", depth)
        self.out += b"t" if len(items) > 3 else (b"\x85", b"\x86", b"\x87")[len(items) - 1]

    def _save(self, obj, where, depth):
        t = type(obj)
        if obj is None:
            self.out += b"N"
        elif t is bool:
            self.out += b"\x88" if obj else b"\x89"
        elif t is int:
            self._int(obj)
        elif t is float:
            self.out += b"G" + struct.pack(">d", obj)
        elif t is str:
            self._str(obj)
        elif isinstance(obj, _C.Tensor):
            self._tensor(obj, where)
        elif isinstance(obj, _C.dtype):
            self.out += _global("torch", str(obj).split(".")[-1])
        elif t.__name__ == "device" and hasattr(obj, "type") and hasattr(obj, "index"):
            self.out += _global("torch", "device")
            self._tuple([obj.type] if obj.index is None else [obj.type, obj.index], where,
                        depth)
            self.out += b"R"
        elif t.__name__ == "Size" and isinstance(obj, tuple):
            self.out += _global("torch", "Size")
            self._tuple([tuple(obj)], where, depth)
            self.out += b"R"
        elif t in (dict, OrderedDict, list, tuple):
            self._container(obj, where, depth)
        elif t.__module__ == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
            # a NumPy scalar (a cosine schedule's lr written into param_groups) is written as
            # the Python number it holds: torch's weights_only load refuses numpy's globals
            self._save(obj.item(), where, depth)
        else:
            raise TypeError(f"cddp.save(format='torch'): cannot write a {t.__name__} (at "
                            f"{where or 'the top level'}) in torch's format, which cddp writes "
                            "for state dicts: containers of tensors, numbers, strings, dtypes "
                            "and devices. Save other objects in cddp's default format.")

    def _container(self, obj, where, depth):
        if id(obj) in self._path:
            raise ValueError(f"cddp.save(format='torch'): the object at "
                             f"{where or 'the top level'} contains itself")
        if depth >= _MAX_DEPTH:
            raise ValueError(f"cddp.save(format='torch'): containers nested deeper than "
                             f"{_MAX_DEPTH} levels at {where[:200]}")
        self._path.add(id(obj))
        try:
            if isinstance(obj, dict):
                self.out += _ODICT if type(obj) is OrderedDict else b"}"
                if obj:
                    self.out += b"("
                    for k, v in obj.items():
                        if not (k is None or type(k) in (bool, int, float, str)):
                            raise TypeError(f"cddp.save(format='torch'): dict key {k!r} at "
                                            f"{where or 'the top level'} is not a string, "
                                            "number, bool or None")
                        self._save(k, where, depth + 1)
                        self._save(v, f"{where}[{k!r}]", depth + 1)
                    self.out += b"u"
                meta = getattr(obj, "_metadata", None) if type(obj) is OrderedDict else None
                if isinstance(meta, dict):
                    # a state dict's per-module versions: pickle's BUILD of the OrderedDict's
                    # __dict__, as torch.save writes it
                    self._save({"_metadata": meta}, f"{where}._metadata", depth + 1)
                    self.out += b"b"
            elif isinstance(obj, list):
                self.out += b"]"
                if obj:
                    self.out += b"("
                    for i, v in enumerate(obj):
                        self._save(v, f"{where}[{i}]", depth + 1)
                    self.out += b"e"
            else:
                self._tuple(list(obj), where, depth + 1)
        finally:
            self._path.discard(id(obj))

    def _tensor(self, obj, where):
        from .nn.parameter import Parameter
        if type(obj) not in (_C.Tensor, Parameter) or obj.__dict__:
            raise TypeError(f"cddp.save(format='torch'): a {type(obj).__name__} with "
                            f"attributes at {where or 'the top level'} has no torch form")
        if obj.is_meta:
            raise RuntimeError(f"cddp.save: the tensor at {where or 'the top level'} is on the "
                               "meta device and has no values to save; materialize it first")
        t = obj.detach().contiguous()
        dname = str(t.dtype).split(".")[-1]
        words = t.reshape(-1).view(_C.int16) if t.dtype == _C.bfloat16 else t.reshape(-1)
        raw = memoryview(words.numpy()).cast("B")     # the tensor's own bytes: no copy
        key = str(len(self.storages))
        self.storages.append((key, raw))
        if type(obj) is Parameter:
            self.out += _global("torch._utils", "_rebuild_parameter") + b"("
        self.out += _global("torch._utils", "_rebuild_tensor_v2") + b"("
        # the persistent id: ("storage", torch.<Type>Storage, key, "cpu", numel)
        self.out += b"("
        self._str("storage")
        self.out += _global("torch", _STORAGE[dname])
        self._str(key)
        self._str("cpu")
        self._int(t.numel())
        self.out += b"tQ"
        self._int(0)                                       # storage offset
        self._tuple(list(t.shape), where, 0)
        self._tuple(list(t.stride()), where, 0)
        self.out += (b"\x88" if obj.requires_grad and type(obj) is not Parameter else b"\x89")
        self.out += _ODICT + b"tR"                          # backward hooks: OrderedDict()
        if type(obj) is Parameter:
            self.out += (b"\x88" if obj.requires_grad else b"\x89") + _ODICT + b"tR"


# ---- the zip ---------------------------------------------------------------------------------

_DOS_DATE = (0 << 9) | (1 << 5) | 1                         # 1980-01-01, time 00:00


def _crc(data):
    if isinstance(data, (bytes, bytearray)):
        return zlib.crc32(data)
    crc, step = 0, 1 << 26
    for at in range(0, len(data), step):                    # bounded chunks of the view
        crc = zlib.crc32(data[at:at + step], crc)
    return crc


class _Zip:
    """Stored entries, each one's data aligned to 64 bytes (torch's mmap loads need it), ZIP64
    where a size or offset passes 32 bits; parts to write, in order, and the central
    directory."""

    def __init__(self, prefix):
        self.prefix, self.parts, self.offset, self.central, self.count = prefix, [], 0, [], 0

    def add(self, name, data):
        name = f"{self.prefix}/{name}".encode()
        size, crc = len(data), _crc(data)
        big = size >= _ZIP64_AT or self.offset >= _ZIP64_AT
        z64 = struct.pack("<HHQQ", 1, 16, size, size) if big else b""
        pad = -(self.offset + 30 + len(name) + len(z64)) % _ALIGN
        if 0 < pad < 4:                                     # an extra field needs 4 bytes
            pad += _ALIGN
        extra = z64 + (struct.pack("<HH", 0x4246, pad - 4) + b"Z" * (pad - 4) if pad else b"")
        need = 45 if big else 20
        lsize = 0xFFFFFFFF if big else size
        header = struct.pack("<IHHHHHIIIHH", 0x04034B50, need, 0, 0, 0, _DOS_DATE, crc, lsize,
                             lsize, len(name), len(extra)) + name + extra
        at = self.offset
        self.parts += [header, data]
        self.offset += len(header) + size
        # central directory record: ZIP64 sizes and offset in its own extra field
        c64 = (struct.pack("<QQ", size, size) if big else b"") + \
            (struct.pack("<Q", at) if at >= _ZIP64_AT else b"")
        cext = struct.pack("<HH", 1, len(c64)) + c64 if c64 else b""
        lat = 0xFFFFFFFF if at >= _ZIP64_AT else at
        self.central.append(struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, need, need, 0, 0, 0, _DOS_DATE, crc, lsize, lsize,
            len(name), len(cext), 0, 0, 0, 0, lat) + name + cext)
        self.count += 1

    def finish(self):
        cd = b"".join(self.central)
        cd_at, n = self.offset, self.count
        tail = b""
        if cd_at + len(cd) >= _ZIP64_AT or n >= 0xFFFF:
            z64_at = cd_at + len(cd)
            tail = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(cd),
                               cd_at) + struct.pack("<IIQI", 0x07064B50, 0, z64_at, 1)
            tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                                0xFFFFFFFF, 0)
        else:
            tail = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(cd), cd_at, 0)
        return self.parts + [cd, tail]


def serialize(obj, prefix="archive"):
    """The parts (bytes and memoryviews of tensor memory) of obj as a torch.save zip file."""
    pickle = _Pickle()
    data = pickle.dump(obj)
    z = _Zip(prefix)
    z.add("data.pkl", data)
    z.add(".format_version", b"1")
    z.add(".storage_alignment", str(_ALIGN).encode())
    z.add("byteorder", sys.byteorder.encode())
    for key, raw in pickle.storages:
        z.add(f"data/{key}", raw)
    z.add("version", b"3\n")
    z.add(".data/serialization_id", str(secrets.randbits(128)).zfill(40).encode()[:40])
    return z.finish()


def archive_prefix(path):
    """torch's record prefix: the file's base name without its extension."""
    base = os.path.splitext(os.path.basename(path))[0] if path else ""
    keep = "".join(c if c.isalnum() or c in "_-." else "_" for c in base)
    return keep or "archive"

