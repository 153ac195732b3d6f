"""cddp.distributed.checkpoint._layout — what a checkpoint directory holds, and the flat view of
a state dict that save and load agree on.

A checkpoint is a directory:

    .metadata                    JSON, written last, atomically, by the coordinator (rank 0):
                                 {"format": "cddp-dcp", "version": 1, "save_id": "<hex>",
                                  "world_size": n, "items": {fqn: item}}, item being
                                 {"file": name, "kind": "tensor", "dtype": "float32",
                                  "shape": [4, 3], "path": ["model", "fc", "weight"]} or
                                 {"file": name, "kind": "object", "path": [...]} (path: the
                                 keys that led to the leaf, for rebuilding the nesting)
    __<rank>_<save_id>.distcp    one per rank that wrote items: a cddp.save file (safetensors
                                 plus a JSON structure; no pickle unless an object needs one,
                                 and then read with weights_only) of {fqn: value}

The data files carry the save's id, so a save never writes over a file the current .metadata
names: a save killed at any point leaves the previous checkpoint whole and readable. After
committing, the coordinator removes the data files the new .metadata does not name (those of
the previous save and of saves that died).

The flat view (torch's flatten_state_dict, so the fqns are torch's): dicts are walked, and
lists that hold a tensor or a dict (at any depth through lists); every other value, tuples
included, is a leaf. A leaf's fqn is its path's keys joined by "." ("model.fc.weight",
"optim.state.fc.weight.exp_avg", "optim.param_groups.0.lr"). Empty dicts hold nothing to
save or load and are left out.
"""
import copy
import json
import os
import re

from ... import _C
from ... import serialization as _ser

Tensor = _C.Tensor

METADATA = ".metadata"
FORMAT = "cddp-dcp"
VERSION = 1
_DATA = re.compile(r"__(\d+)_([0-9a-f]+)\.distcp\Z")


def data_file(rank, save_id):
    return f"__{rank}_{save_id}.distcp"


def fqn(path):
    return ".".join(str(k) for k in path)


def _terminal(lst):
    """A list is a leaf unless it holds a tensor, a dict, or such a list (torch's rule)."""
    for v in lst:
        if isinstance(v, (Tensor, dict)) or (isinstance(v, list) and not _terminal(v)):
            return False
    return True


def copy_containers(obj):
    """obj with its dicts (shallow copies, so OrderedDict stays one) and lists copied, leaves
    shared: what walk() may then update without touching the caller's containers."""
    if isinstance(obj, dict):
        out = copy.copy(obj)
        for k in out:
            out[k] = copy_containers(out[k])
        return out
    if isinstance(obj, list):
        return [copy_containers(v) for v in obj]
    return obj


def walk(obj, leaf, path=()):
    """obj with every leaf replaced by leaf(path, value), containers updated in place (the
    caller's dicts and lists are the ones the result holds)."""
    if isinstance(obj, dict):
        for k in list(obj):
            new = walk(obj[k], leaf, path + (k,))
            if new is not obj[k]:
                obj[k] = new
        return obj
    if isinstance(obj, list) and not _terminal(obj):
        for i, v in enumerate(obj):
            new = walk(v, leaf, path + (i,))
            if new is not v:
                obj[i] = new
        return obj
    return leaf(path, obj)


def flatten(state_dict, what, paths=None):
    """{fqn: value} of state_dict's leaves, in order (paths, a dict, receives {fqn: path});
    two paths with one fqn raise."""
    flat = {}
    paths = {} if paths is None else paths

    def leaf(path, value):
        name = fqn(path)
        if name in flat:
            raise ValueError(f"{what}: the keys {paths[name]!r} and {path!r} both flatten to "
                             f"{name!r}; rename one")
        flat[name], paths[name] = value, path
        return value
    walk(state_dict, leaf)
    return flat


def dtype_name(t):
    return str(t.dtype).split(".")[-1]


def describe(value, path):
    """The plan entry of one leaf, JSON-able: [kind, dtype, shape, bytes, path as a list of
    str / int keys]; ranks holding one fqn must agree on the first three."""
    keys = [k if type(k) in (str, int) else str(k) for k in path]
    if isinstance(value, Tensor):
        return ["tensor", dtype_name(value), list(value.shape),
                value.numel() * value.element_size(), keys]
    return ["object", None, None, 0, keys]


def write_metadata(directory, save_id, world_size, items):
    doc = {"format": FORMAT, "version": VERSION, "save_id": save_id,
           "world_size": world_size, "items": items}
    _ser._atomic_write(os.path.join(directory, METADATA),
                       [json.dumps(doc, separators=(",", ":")).encode()])


def _bad(path, why):
    return ValueError(f"{path} is not a readable cddp checkpoint: {why}")


def _read_raw(directory):
    path = os.path.join(os.fspath(directory), METADATA)
    with open(path, "rb") as f:
        return path, f.read(64 << 20)


def read_metadata(directory):
    """The .metadata document, checked: every item names a data file of this save and a
    tensor's dtype and shape are well formed (a forged or torn file raises ValueError)."""
    path, raw = _read_raw(directory)
    return _parse(path, raw)


def _parse(path, raw):
    if raw[:1] != b"{":
        raise _bad(path, "not JSON")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(path, f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(path, f"format is not {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise _bad(path, f"version {doc.get('version')!r} (this cddp reads {VERSION})")
    sid, items = doc.get("save_id"), doc.get("items")
    if not isinstance(sid, str) or not re.fullmatch(r"[0-9a-f]+", sid) or not isinstance(items, dict):
        raise _bad(path, "save_id or items malformed")
    for name, it in items.items():
        ok = (isinstance(it, dict) and it.get("kind") in ("tensor", "object")
              and isinstance(it.get("path"), list)
              and all(type(k) in (str, int) for k in it["path"]))
        m = _DATA.match(it.get("file", "")) if ok and isinstance(it.get("file"), str) else None
        ok = ok and m is not None and m.group(2) == sid
        if ok and it["kind"] == "tensor":
            shape = it.get("shape")
            ok = (it.get("dtype") in _ser._DTYPES and isinstance(shape, list)
                  and all(type(s) is int and s >= 0 for s in shape))
        if not ok:
            raise _bad(path, f"item {name!r} malformed: {it!r}")
    return doc


class Checkpoint:
    """A cddp checkpoint directory: items ({fqn: {"kind", "dtype", "shape", ...}} from
    .metadata) and read(names) -> {fqn: value}, each value checked against .metadata."""

    def __init__(self, directory, doc):
        self.dir, self.items = os.fspath(directory), doc["items"]

    def path(self, name):
        return self.items[name]["path"]

    def read(self, names):
        by_file = {}
        for n in names:
            by_file.setdefault(self.items[n]["file"], []).append(n)
        out = {}
        for fname, group in by_file.items():
            data = _ser.load(os.path.join(self.dir, fname), mmap=True, weights_only=True)
            if not isinstance(data, dict):
                raise _bad(fname, "a data file holds a dict")
            for n in group:
                it = self.items[n]
                if n not in data:
                    raise _bad(fname, f"it lacks {n!r}, which .metadata places there")
                v = data[n]
                if it["kind"] == "tensor" and not (
                        isinstance(v, Tensor) and dtype_name(v) == it["dtype"]
                        and list(v.shape) == it["shape"]):
                    raise _bad(fname, f"{n!r} is not the {it['dtype']} tensor of shape "
                               f"{it['shape']} that .metadata records")
                out[n] = v
        return out


def open_checkpoint(directory):
    """The checkpoint in directory: cddp's own (JSON .metadata) or torch's DCP (pickled
    .metadata, read by _torch_format without running code)."""
    path, raw = _read_raw(directory)
    if raw[:1] == b"\x80":
        from ._torch_format import TorchCheckpoint
        return TorchCheckpoint(directory, raw)
    return Checkpoint(directory, _parse(path, raw))


def remove_stale(directory, keep):
    """Remove the data files in directory that are not in keep (earlier or failed saves)."""
    for name in os.listdir(directory):
        if _DATA.match(name) and name not in keep:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
