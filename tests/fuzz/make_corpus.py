"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/<sha1>): valid
checkpoints of several shapes, plain safetensors files and the forged files the tests name,
for fuzz_checkpoint.py; op programs covering every request, auth mode and framing fault, for
fuzz_store_frames.py. Deterministic; re-run after changing the formats:

    python tests/fuzz/make_corpus.py
"""
import hashlib
import io
import json
import os
import random
import struct
import sys
from collections import Counter, OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def _write(kind, blobs):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    for b in blobs:
        with open(os.path.join(d, hashlib.sha1(b).hexdigest()), "wb") as f:
            f.write(b)
    return len(blobs)


def _st(header, data=b"", delta=0):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) + delta) + h + data


def checkpoint_seeds():
    import cddp
    import cddp.nn as nn
    cddp.manual_seed(0)                  # Linear's init: the same seeds every run
    objs = [
        {}, [], {"a": 1}, cddp.tensor([1.0, 2.0]),
        {"epoch": 3, "lr": 0.1, "nan": float("nan"), "inf": float("-inf"), "flag": True,
         "none": None, "tup": (1, 2.5, "x"), "lst": [1, [2, 3]], "int_keys": {0: "a"},
         "od": OrderedDict([("b", 1)]), "cnt": Counter({5: 2}), "dt": cddp.float64,
         "dev": cddp.device("cpu"), "b": cddp.tensor([True, False]),
         "i32": cddp.tensor([7], dtype=cddp.int32), "empty": cddp.zeros(0, 3),
         "scalar": cddp.tensor(4.0)},
        nn.Linear(3, 2).state_dict(),
        {"p": nn.Parameter(cddp.ones(2)), "g": cddp.ones(1, requires_grad=True)},
    ]
    # whole-object checkpoints (the cddp-pickle layout): what weights_only loads, and a module
    # it refuses (the fuzzer mutates both into the unpickler's paths)
    import numpy as np
    base = cddp.arange(12.0).reshape(3, 4)
    cyc = [1]
    cyc.append(cyc)
    objs += [
        np.arange(6.0).reshape(2, 3), {"a": np.asfortranarray(np.ones((2, 2), np.float32)),
                                       "b": np.array([True, False]), "s": np.float32(2.5),
                                       "o": np.array([1, "x"], dtype=object)},
        {"base": base, "view": base[1:, ::2], "set": {1, 2}, "fs": frozenset([3]),
         "p": nn.Parameter(cddp.ones(3)), "c": 1 + 2j, "ba": bytearray(b"xy")},
        cyc, nn.Linear(2, 2),
    ]
    blobs = []
    for o in objs:
        buf = io.BytesIO()
        cddp.save(o, buf)
        blobs.append(buf.getvalue())
    f32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    data = struct.pack("<4f", 1, 2, 3, 4)
    blobs += [
        _st({"a": f32, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, data),
        _st({"a": f32, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, data),
        _st({"a": f32, "__metadata__": {"k": "vvv"}}, data[:8], -1),
        _st({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}, b"\x01\x02\x00"),
        _st({"__metadata__": {"format": "cddp", "cddp_structure": '{"__dtype__": "from_numpy"}'}}),
        b"PK\x03\x04" + b"\0" * 28, b"\x80\x04\x95" + b"\0" * 13, b"", b"\0" * 8,
    ]
    # forged cddp-pickle files: an out-of-bounds view, a planted os.system, a blocked builtin
    import pickle
    from cddp._checkpoint_pickle import _rebuild_tensor

    def pfile(pkl, storage=b""):
        h = {"data/0": {"dtype": "U8", "shape": [len(storage)],
                        "data_offsets": [0, len(storage)]},
             "data.pkl": {"dtype": "U8", "shape": [len(pkl)],
                          "data_offsets": [len(storage), len(storage) + len(pkl)]},
             "__metadata__": {"format": "cddp-pickle", "cddp_version": "1"}}
        return _st(h, storage + pkl)

    class Pid:
        def __init__(self, pid):
            self.pid = pid

    class Red:
        def __init__(self, *rv):
            self.rv = rv

        def __reduce__(self):
            return self.rv

    class P(pickle.Pickler):
        def persistent_id(self, o):
            return o.pid if type(o) is Pid else None

    def pkl(obj):
        buf = io.BytesIO()
        P(buf, protocol=4).dump(obj)
        return buf.getvalue()
    sid = Pid(("storage", "0", "float32", "cpu", 2))
    blobs += [
        pfile(pkl(Red(_rebuild_tensor, (sid, 1, (2,), (1,), False))), data[:8]),
        pfile(pkl(Red(_rebuild_tensor, (sid, 0, (2,), (1,), True))), data[:8]),
        pfile(pkl(Red(os.system, ("true",)))),
        pfile(b"\x80\x02c__builtin__\ngetattr\nq\x00."),
        pfile(b"\x80\x02ccollections\nOrderedDict\n}X\x03\x00\x00\x00abcK\x01sb."),
    ]
    # a zip torch 2.13 wrote (cddp/_torch_zip.py reads it): tests/data's fixture
    with open(os.path.join(os.path.dirname(HERE), "data", "torch_2_13_checkpoint.pt"), "rb") as f:
        blobs.append(f.read())
    return blobs


def store_seeds():
    # fuzz_store_frames.py's input language: flags, step, then (kind, fields...) records
    blobs = []
    for flags in (0, 1, 2, 3):
        for kind in range(16):
            blobs.append(bytes([flags, 0, kind, 1, 2, 3, 4, 5, 6, 7, 8]))
    rng = random.Random(1)
    for _ in range(24):
        blobs.append(bytes([2 | rng.randrange(2), rng.randrange(17)]) +
                     bytes(rng.randrange(256) for _ in range(rng.randrange(8, 200))))
    return blobs


if __name__ == "__main__":
    print("checkpoint:", _write("checkpoint", checkpoint_seeds()))
    print("store:", _write("store", store_seeds()))
