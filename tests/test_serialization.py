"""cddp.save / cddp.load: round trips, safetensors compatibility, atomic writes, and refusal
of truncated, corrupt and foreign files."""
from collections import Counter, OrderedDict
import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from conftest import CDDP_PATH, ROOT, n, subprocess_env


def _sample():
    return {
        "epoch": 3, "lr": 0.1, "nan": float("nan"), "inf": float("-inf"), "name": "run",
        "flag": True, "none": None, "tup": (1, 2.5, "x"), "lst": [1, [2, 3]],
        "int_keys": {0: "a", 1: "b"}, "od": OrderedDict([("b", 1), ("a", 2)]),
        "cnt": Counter({5: 2}), "dt": cddp.float64,
        "t32": cddp.tensor([[1.5, -2.0]]), "t64": cddp.tensor([1.0, 2.0], dtype=cddp.float64),
        "i64": cddp.tensor([1, 2, 3]), "i32": cddp.tensor([7], dtype=cddp.int32),
        "b": cddp.tensor([True, False]), "empty": cddp.zeros(0, 3), "scalar": cddp.tensor(4.0),
    }


def _check_equal(a, b):
    assert type(a) is type(b) or (isinstance(a, cddp.Tensor) and isinstance(b, cddp.Tensor))
    if isinstance(a, cddp.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(n(a), n(b))
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys())
        for k in a:
            _check_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _check_equal(x, y)
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b


def test_round_trip_path_and_bytesio(tmp_path):
    obj = _sample()
    p = tmp_path / "x.pt"
    cddp.save(obj, p)
    _check_equal(obj, cddp.load(p))
    buf = io.BytesIO()
    cddp.save(obj, buf)
    buf.seek(0)
    _check_equal(obj, cddp.load(buf))
    cddp.save(obj, str(p))
    _check_equal(obj, cddp.load(str(p), map_location="cpu", weights_only=True))


def test_model_optimizer_scheduler_round_trip(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = cddp.optim.Adam(net.parameters(), lr=0.01)
    sch = cddp.optim.lr_scheduler.MultiStepLR(opt, [1, 2])
    net(cddp.ones(2, 3)).sum().backward()
    opt.step()
    sch.step()
    state = {"model": net.state_dict(), "opt": opt.state_dict(), "sched": sch.state_dict()}
    cddp.save(state, tmp_path / "c.pt")
    back = cddp.load(tmp_path / "c.pt")
    _check_equal(state["model"], back["model"])
    assert back["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert back["sched"]["milestones"] == Counter({1: 1, 2: 1})
    fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(back["model"])
    opt2 = cddp.optim.Adam(fresh.parameters(), lr=0.01)
    opt2.load_state_dict(back["opt"])
    assert opt2.state_dict()["state"][0]["step"].item() == 1.0


def test_parameters_and_requires_grad_survive(tmp_path):
    p = nn.Parameter(cddp.ones(2))
    cddp.save({"p": p, "g": cddp.ones(1, requires_grad=True)}, tmp_path / "p.pt")
    back = cddp.load(tmp_path / "p.pt")
    assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
    assert back["g"].requires_grad


def test_safetensors_package_reads_our_file(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    cddp.save({"w": cddp.tensor([[1.0, 2.0]]), "n": cddp.tensor([3, 4])}, tmp_path / "s.pt")
    d = st.load_file(str(tmp_path / "s.pt"))
    assert sorted(d) == ["t0", "t1"]
    np.testing.assert_array_equal(d["t0"], [[1.0, 2.0]])


def test_plain_safetensors_file_loads_as_dict(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    st.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(tmp_path / "a.st"))
    d = cddp.load(tmp_path / "a.st")
    np.testing.assert_array_equal(n(d["a"]), np.arange(6).reshape(2, 3))


def test_unsupported_objects_refused():
    with pytest.raises(TypeError, match="cannot save an object of type function"):
        cddp.save({"f": lambda: 0}, io.BytesIO())
    with pytest.raises(TypeError, match="dict key"):
        cddp.save({(1, 2): 3}, io.BytesIO())
    with pytest.raises(ValueError, match="never"):
        cddp.save({}, io.BytesIO(), pickle_module=object())


def test_truncated_files_raise_at_every_cut(tmp_path):
    buf = io.BytesIO()
    cddp.save({"w": cddp.ones(10, 10), "k": [1, 2]}, buf)
    data = buf.getvalue()
    for cut in list(range(0, 40)) + list(range(40, len(data), 97)):
        with pytest.raises(cddp.serialization.CheckpointError):
            cddp.load(io.BytesIO(data[:cut]))


def test_corrupt_and_foreign_files(tmp_path):
    with pytest.raises(cddp.serialization.CheckpointError, match="limit"):
        cddp.load(io.BytesIO(struct.pack("<Q", 2 ** 63) + b"{}"))
    with pytest.raises(cddp.serialization.CheckpointError, match="JSON"):
        cddp.load(io.BytesIO(struct.pack("<Q", 4) + b"{{{{"))
    bad = b'{"t0":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}}'
    with pytest.raises(cddp.serialization.CheckpointError, match="truncated"):
        cddp.load(io.BytesIO(struct.pack("<Q", len(bad)) + bad))
    bad2 = b'{"t0":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}'
    with pytest.raises(cddp.serialization.CheckpointError, match="needs 12 bytes"):
        cddp.load(io.BytesIO(struct.pack("<Q", len(bad2)) + bad2 + b"\0" * 8))
    with pytest.raises(cddp.serialization.CheckpointError, match="pickle"):
        cddp.load(io.BytesIO(b"PK\x03\x04" + b"\0" * 100))
    with pytest.raises(cddp.serialization.CheckpointError, match="pickle"):
        cddp.load(io.BytesIO(b"\x80\x04\x95" + b"\0" * 50))


def test_torch_checkpoint_refused(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, tmp_path / "t.pt")
    with pytest.raises(cddp.serialization.CheckpointError, match="never unpickles"):
        cddp.load(tmp_path / "t.pt")


def test_writer_killed_mid_save_leaves_old_file_intact(tmp_path):
    target = tmp_path / "ck.pt"
    cddp.save({"gen": 0, "w": cddp.zeros(4)}, target)
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {CDDP_PATH!r})
        import cddp
        big = cddp.ones(4_000_000)
        print("ready", flush=True)
        i = 1
        while True:
            cddp.save({{"gen": i, "w": big}}, {str(target)!r})
            i += 1
    """)
    for delay in (0.05, 0.13, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        back = cddp.load(target)          # never half-written: old or new, complete
        assert back["gen"] >= 0 and back["w"].numel() in (4, 4_000_000)
    cddp.load(target)                     # a later load of the path sweeps what was left
    assert os.listdir(tmp_path) == ["ck.pt"]


def test_saved_file_has_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        cddp.save({"a": 1}, tmp_path / "m.pt")
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "m.pt").st_mode & 0o777) == 0o644


# ---- hardening: temporaries, forged files, bounded reads -----------------------------------------

_KILL_SCRIPT = """
import sys; sys.path.insert(0, {path!r})
import cddp, cddp.serialization as ser
ser._USE_O_TMPFILE = {tmpfile!r}
big = cddp.ones(4_000_000)
print("ready", flush=True)
i = 1
while True:
    cddp.save({{"gen": i, "w": big}}, {target!r})
    i += 1
"""


@pytest.mark.parametrize("tmpfile", [True, False], ids=["O_TMPFILE", "named"])
def test_killed_writers_leave_no_temporary_after_the_next_save(tmp_path, tmpfile):
    """SIGKILL a writer mid-save 6 times: the target stays intact, and after the next save to
    that path no temporary file is left (with O_TMPFILE none exists in the first place; named
    temporaries of dead writers are swept)."""
    target = tmp_path / "ck.pt"
    cddp.save({"gen": 0, "w": cddp.zeros(4)}, target)
    script = _KILL_SCRIPT.format(path=CDDP_PATH, tmpfile=tmpfile, target=str(target))
    for delay in (0.02, 0.05, 0.09, 0.13, 0.21, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(delay)
            proc.kill()
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
        assert cddp.load(target)["gen"] >= 0
    cddp.save({"gen": -1}, target)
    assert os.listdir(tmp_path) == ["ck.pt"]
    assert cddp.load(target) == {"gen": -1}


def test_save_without_a_usable_proc_falls_back_to_named_temporaries(tmp_path, monkeypatch):
    """O_TMPFILE works but the unnamed file cannot be linked (no /proc/self/fd): the save
    still succeeds, through a named temporary, and leaves nothing else behind."""
    ser = cddp.serialization
    real_link = os.link

    def no_proc(src, *a, **kw):
        if str(src).startswith("/proc/self/fd/"):
            raise FileNotFoundError(src)
        return real_link(src, *a, **kw)

    monkeypatch.setattr(ser, "_USE_O_TMPFILE", True)
    monkeypatch.setattr(os, "link", no_proc)
    cddp.save({"w": cddp.arange(3)}, tmp_path / "ck.pt")
    assert ser._USE_O_TMPFILE is False           # decided once for the process
    assert cddp.load(tmp_path / "ck.pt")["w"].tolist() == [0, 1, 2]
    assert os.listdir(tmp_path) == ["ck.pt"]


def test_dead_writers_temporary_is_swept_and_a_live_ones_kept(tmp_path):
    """Deterministic version of the above: a writer that died holding a named temporary
    (fallback mode) leaves .ck.pt.<pid>.<hex>.tmp; a load of ck.pt removes it. A temporary
    whose writer is alive — here: named after a dead pid but locked, as a writer in another pid
    namespace would hold it — is left alone."""
    import fcntl
    target = tmp_path / "ck.pt"
    cddp.save({"a": 1}, target)
    code = (f"import sys, os; sys.path.insert(0, {CDDP_PATH!r}); import cddp.serialization as s;"
            f"fd, name = s._open_temp({str(tmp_path)!r}, {str(target)!r}, 0o600, False); "
            f"os.write(fd, b'x' * 100); print(name); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    stale = out.stdout.strip()
    assert os.path.basename(stale).startswith(".ck.pt.") and os.path.exists(stale), out.stderr
    # a live writer in another pid namespace: dead pid in the name, lock held
    dead_pid = int(os.path.basename(stale).split(".")[3])
    held = tmp_path / f".ck.pt.{dead_pid}.00ff00ff.tmp"
    fd = os.open(held, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert cddp.load(target) == {"a": 1}
        assert not os.path.exists(stale)
        assert os.path.exists(held)
    finally:
        os.close(fd)
    cddp.save({"a": 2}, target)          # unlocked now: the next save takes it
    assert os.listdir(tmp_path) == ["ck.pt"]


def _st_bytes(header, data=b"", hlen_delta=0):
    """A safetensors file from a header dict (padded with spaces to 8, as writers do)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) + hlen_delta) + h + data


def _cddp_bytes(structure, tensors=(), data=b""):
    header = dict(tensors)
    header["__metadata__"] = {"format": "cddp", "cddp_version": "1",
                              "cddp_structure": json.dumps(structure)}
    return _st_bytes(header, data)


def _refused(blob, match=None):
    with pytest.raises(cddp.serialization.CheckpointError, match=match) as e:
        cddp.load(io.BytesIO(blob))
    return str(e.value)


F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("case", ["hlen-1", "overlap", "gap", "trailing", "backwards",
                                  "past-end", "size"])
def test_layout_checked_as_safetensors_checks_it(case):
    """Every tensor byte accounted for exactly once: the loader refuses what the safetensors
    library refuses (a header length one short used to load with shifted data)."""
    data = np.arange(4, dtype=np.float32).tobytes()
    a, b = dict(F32x2), {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    hlen_delta = 0
    if case == "hlen-1":
        blob = _st_bytes({"a": a, "b": b, "__metadata__": {"k": "vvv"}}, data)
        assert blob[8 + struct.unpack("<Q", blob[:8])[0] - 1] == ord(" ")   # cut a pad byte
        hlen_delta, match = -1, "not fully covered"
    elif case == "overlap":
        b["data_offsets"], match = [4, 12], "overlaps"
    elif case == "gap":
        b["data_offsets"], match = [12, 20], "gap"
        data += b"\0" * 4
    elif case == "trailing":
        data, match = data + b"\0" * 8, "not fully covered"
    elif case == "backwards":
        b["data_offsets"], match = [8, 4], "ends before it starts|invalid offsets"
    elif case == "past-end":
        b["data_offsets"], b["shape"], match = [8, 24], [4], "need 24 bytes|truncated"
    else:
        b["shape"], match = [3], "needs 12 bytes"
    hdr = {"a": a, "b": b, "__metadata__": {"k": "vvv"}}
    blob = _st_bytes(hdr, data, hlen_delta)
    _refused(blob, match)
    st = pytest.importorskip("safetensors.numpy")
    with pytest.raises(Exception):       # the reference implementation refuses it too
        st.load(blob)


def test_a_valid_file_still_loads_like_safetensors():
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "e": np.zeros((0, 4), np.int64),
              "b": np.array([True, False, True]), "d": np.array(2.5)}
    blob = st.save(arrays)
    back = cddp.load(io.BytesIO(blob))
    for k, v in arrays.items():
        np.testing.assert_array_equal(n(back[k]), v)


@pytest.mark.parametrize("name", ["from_numpy", "Tensor", "__class__", "float16x", "", 3])
def test_dtype_names_come_from_the_dtype_table_only(name):
    msg = _refused(_cddp_bytes({"__dict__": [["d", {"__dtype__": name}]]}), "__dtype__")
    assert "not one of" in msg
    assert cddp.load(io.BytesIO(_cddp_bytes({"__dtype__": "int32"}))) is cddp.int32


def test_bool_bytes_other_than_0_and_1_are_refused():
    blob = _st_bytes({"m": {"dtype": "BOOL", "shape": [7], "data_offsets": [0, 7]}},
                     bytes([1, 2, 0, 255, 1, 110, 3]))
    _refused(blob, "byte values other than 0 and 1")
    ok = _st_bytes({"m": {"dtype": "BOOL", "shape": [7], "data_offsets": [0, 7]}},
                   bytes([1, 1, 0, 1, 1, 1, 1]))
    assert cddp.load(io.BytesIO(ok))["m"].sum().item() == 6


def test_special_files_refused_at_once(tmp_path):
    with pytest.raises(cddp.serialization.CheckpointError, match="character device"):
        cddp.load("/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                       # opening must not wait for a writer
    with pytest.raises(cddp.serialization.CheckpointError, match="pipe"):
        cddp.load(fifo)
    with pytest.raises(cddp.serialization.CheckpointError, match="directory"):
        cddp.load(tmp_path)
    with open("/dev/zero", "rb") as f:    # a stream: the header is read and checked first
        with pytest.raises(cddp.serialization.CheckpointError, match="start with"):
            cddp.load(f)


class _Stream:
    """A non-seekable reader (a pipe, a socket): its size is unknown up front."""

    def __init__(self, data):
        self._b = io.BytesIO(data)

    def read(self, n=-1):
        return self._b.read(n)


def test_stream_reads_are_bounded_by_what_arrives():
    # the header claims 2^40 bytes of data; 16 arrive: truncated, and no 1 TiB allocation
    hdr = {"x": {"dtype": "F32", "shape": [1 << 38], "data_offsets": [0, 1 << 40]}}
    with pytest.raises(cddp.serialization.CheckpointError, match="truncated"):
        cddp.load(_Stream(_st_bytes(hdr, b"\0" * 16)))
    good = io.BytesIO()
    cddp.save({"w": cddp.arange(5)}, good)
    assert cddp.load(_Stream(good.getvalue()))["w"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(cddp.serialization.CheckpointError, match="not fully covered"):
        cddp.load(_Stream(good.getvalue() + b"\0"))


T0 = {"t0": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}
FORGED_STRUCTURES = [
    {"__float__": "abc"}, {"__float__": 5}, {"__dict__": [[[1], 2]]}, {"__dict__": [[{}, 1]]},
    {"__dict__": 5}, {"__dict__": [[1]]}, {"__odict__": [[{"__tuple__": [1]}, 2]]},
    {"__tuple__": 5}, {"__device__": 5}, {"__device__": "warp:9"}, {"__device__": "x" * 100},
    {"__tensor__": ["t0"]}, {"__tensor__": "t9"}, {"__tensor__": "t0", "requires_grad": "yes"},
    {"__tensor__": "t0", "requires_grad": True}, {"__tensor__": "t0", "extra": 1},
    {"__tensor__": "t0", "parameter": True, "requires_grad": True},
    [{"__tensor__": "t0"}, {"__tensor__": "t0"}], {"__set__": [1]}, {"a": 1, "b": 2}, {},
    {"__dtype__": None}, {"__counter__": [[1, "x"]], "__dict__": []},
]


@pytest.mark.parametrize("i", range(len(FORGED_STRUCTURES)))
def test_forged_structures_raise_checkpoint_error(i):
    _refused(_cddp_bytes(FORGED_STRUCTURES[i], T0, b"\0" * 8), "structure")


def test_forged_headers_raise_checkpoint_error():
    blobs = [
        _st_bytes([1, 2]), _st_bytes({"x": 5}), _st_bytes({"x": {"dtype": 5}}),
        _st_bytes({"x": {"dtype": "F32", "shape": "ab", "data_offsets": [0, 0]}}),
        _st_bytes({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 0]}}),
        _st_bytes({"x": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4),
        _st_bytes({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}),
        _st_bytes({"x": {"dtype": "F32", "shape": [1] * 13, "data_offsets": [0, 4]}}, b"\0" * 4),
        _st_bytes({"x": {"dtype": "F32", "shape": [2 ** 70], "data_offsets": [0, 2 ** 72]}}),
        _st_bytes({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}),
        _st_bytes({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}),
        _st_bytes({"__metadata__": {"format": 5}}), _st_bytes({"__metadata__": []}),
        _st_bytes({"__metadata__": {"format": "cddp", "cddp_structure": "{{"}}),
        _st_bytes({"__metadata__": {"format": "cddp", "cddp_structure": "[" * 100000}}),
        _st_bytes({"__metadata__": {"format": "cddp",
                                    "cddp_structure": json.dumps(_nest(MAX_DEPTH + 5))}}),
        struct.pack("<Q", 16) + b'{"a":1,"a":2}   ',                  # duplicate keys
        struct.pack("<Q", 8) + b"\xff\xfe{}    ", struct.pack("<Q", 8) + b"[]      ",
        struct.pack("<Q", 8) + b"{}\xff     ", b"\x00" * 3, b"",
    ]
    for blob in blobs:
        _refused(blob)


MAX_DEPTH = cddp.serialization.MAX_DEPTH


def _nest(depth):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


def test_save_refuses_cycles_and_deep_nesting_with_a_clear_message():
    d = {"a": 1}
    d["self"] = d
    with pytest.raises(ValueError, match="contains itself"):
        cddp.save(d, io.BytesIO())
    lst = []
    lst.append(lst)
    with pytest.raises(ValueError, match="contains itself"):
        cddp.save({"l": lst}, io.BytesIO())
    with pytest.raises(ValueError, match=f"deeper than {MAX_DEPTH} levels"):
        cddp.save(_nest(500), io.BytesIO())
    shared = [1, 2]                       # the same list twice is a tree, not a cycle
    buf = io.BytesIO()
    cddp.save({"a": shared, "b": shared, "deep": _nest(MAX_DEPTH - 1)}, buf)
    buf.seek(0)
    back = cddp.load(buf)
    assert back["a"] == back["b"] == [1, 2] and back["deep"] == _nest(MAX_DEPTH - 1)
