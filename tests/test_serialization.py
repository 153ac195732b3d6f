"""cddp.save / cddp.load: round trips, safetensors compatibility, atomic writes, and refusal
of truncated, corrupt and foreign files."""
from collections import Counter, OrderedDict
import io
import json
import os
import pickle
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
    assert sorted(d) == ["n", "w"]                  # a state dict's own keys
    np.testing.assert_array_equal(d["w"], [[1.0, 2.0]])


def test_entry_names_are_the_dotted_key_paths(tmp_path):
    # what safetensors readers (torch's load_file) see; a name that is taken or has no string
    # path falls back to t<i>, and the structure still restores every tensor in place
    obj = {"model": OrderedDict([("fc.weight", cddp.ones(2)), ("fc.bias", cddp.zeros(1))]),
           "opt": {"state": {0: {"buf": cddp.full((2,), 3.0)}}, "groups": [cddp.ones(1)]},
           "model.fc.weight": cddp.full((1,), 9.0), "__metadata__": cddp.full((1,), 5.0),
           7: [cddp.full((1,), 7.0)]}
    p = tmp_path / "n.pt"
    cddp.save(obj, p)
    with open(p, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        names = [k for k in json.loads(f.read(hlen)) if k != "__metadata__"]
    assert names == ["model.fc.weight", "model.fc.bias", "opt.state.0.buf", "opt.groups.0",
                     "t4", "t5", "7.0"]
    back = cddp.load(p)
    assert back["model.fc.weight"].tolist() == [9.0] and back["__metadata__"].tolist() == [5.0]
    assert back["model"]["fc.weight"].tolist() == [1.0, 1.0]
    assert back["opt"]["state"][0]["buf"].tolist() == [3.0, 3.0] and back[7][0].tolist() == [7.0]


def test_torch_reads_a_cddp_state_dict_through_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    cddp.save(net.state_dict(), tmp_path / "m.pt")
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    tnet.load_state_dict(st.load_file(str(tmp_path / "m.pt")))     # the keys match as they are
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(tnet(torch.from_numpy(x)).detach().numpy(),
                               n(net(cddp.from_numpy(x))), rtol=1e-6, atol=1e-6)


def test_plain_safetensors_file_loads_as_dict(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    st.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(tmp_path / "a.st"))
    d = cddp.load(tmp_path / "a.st")
    np.testing.assert_array_equal(n(d["a"]), np.arange(6).reshape(2, 3))


def test_unpicklable_objects_refused_as_pickle_refuses_them():
    """What the JSON structure cannot carry is pickled (cddp/_checkpoint_pickle.py): an object
    pickle cannot handle fails as it fails under torch.save, with pickle's own error."""
    with pytest.raises((AttributeError, pickle.PicklingError), match="local object"):
        cddp.save({"f": lambda: 0}, io.BytesIO())
    with pytest.raises(ValueError, match="standard pickle module"):
        cddp.save({}, io.BytesIO(), pickle_module=object())
    with pytest.raises(ValueError, match="pickle_protocol"):
        cddp.save({1}, io.BytesIO(), pickle_protocol=1)
    with pytest.raises(TypeError, match="path or a binary file"):
        cddp.save({}, 3)


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
    with pytest.raises(cddp.serialization.CheckpointError, match="not a readable zip"):
        cddp.load(io.BytesIO(b"PK\x03\x04" + b"\0" * 100))
    with pytest.raises(cddp.serialization.CheckpointError, match="pickle"):
        cddp.load(io.BytesIO(b"\x80\x04\x95" + b"\0" * 50))


def test_torch_legacy_checkpoint_refused_with_how_to_convert(tmp_path):
    """torch.save's legacy pickle (_use_new_zipfile_serialization=False) is refused by name,
    and the message says how to re-save it; its zip files load (test_torch_checkpoints.py)."""
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, tmp_path / "t.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(cddp.serialization.CheckpointError) as e:
        cddp.load(tmp_path / "t.pt")
    msg = str(e.value)
    assert "torch.save file" in msg and "legacy pickle" in msg and "zip" in msg
    torch.save({"w": torch.ones(2)}, tmp_path / "z.pt")
    assert cddp.load(tmp_path / "z.pt")["w"].tolist() == [1.0, 1.0]


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


def test_cycles_are_pickled_and_deep_nesting_refused_with_a_clear_message():
    d = {"a": 1}
    d["self"] = d
    lst = []
    lst.append(lst)
    for obj in (d, {"l": lst}):          # the JSON structure holds trees: a cycle is pickled
        buf = io.BytesIO()
        cddp.save(obj, buf)
        buf.seek(0)
        back = cddp.load(buf)            # containers only: weights_only=True reads it
        if "self" in back:
            assert back["self"] is back and back["a"] == 1
        else:
            assert back["l"][0] is back["l"]
    with pytest.raises(ValueError, match=f"deeper than {MAX_DEPTH} levels"):
        cddp.save(_nest(500), io.BytesIO())
    shared = [1, 2]                       # the same list twice is a tree, not a cycle
    buf = io.BytesIO()
    cddp.save({"a": shared, "b": shared, "deep": _nest(MAX_DEPTH - 1)}, buf)
    buf.seek(0)
    back = cddp.load(buf)
    assert back["a"] == back["b"] == [1, 2] and back["deep"] == _nest(MAX_DEPTH - 1)


# ---- whole-object checkpoints (cddp/_checkpoint_pickle.py, _weights_only_unpickler.py) -------

class Planted:
    """A payload: unpickling it runs `touch <marker>` through os.system."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class PlantedEval:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (eval, (f"open({self.marker!r}, 'w').close()",))


class UserThing:
    """A user class: loads under weights_only only once allowlisted."""

    def __init__(self, a, w):
        self.a, self.w = a, w


def _header(blob):
    (hlen,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + hlen])


def _saved(obj, **kw):
    buf = io.BytesIO()
    cddp.save(obj, buf, **kw)
    return buf.getvalue()


def _load(blob, **kw):
    return cddp.load(io.BytesIO(blob), **kw)


@pytest.mark.parametrize("payload", [Planted, PlantedEval])
def test_planted_payload_refused_without_weights_only_false_and_never_runs(tmp_path, payload):
    marker = tmp_path / "pwned"
    blob = _saved({"w": cddp.ones(2), "x": payload(marker)})
    assert _header(blob)["__metadata__"]["format"] == "cddp-pickle"
    for kw in ({}, {"weights_only": True}, {"weights_only": None}, {"map_location": "cpu"}):
        with pytest.raises(pickle.UnpicklingError) as e:
            _load(blob, **kw)
        msg = str(e.value)
        assert "weights_only" in msg and "Weights only load failed" in msg
        assert ("system" in msg and "blocked" in msg) or "eval" in msg
        assert not marker.exists()
    p = tmp_path / "evil.pt"                     # through a path and mmap too
    p.write_bytes(blob)
    with pytest.raises(pickle.UnpicklingError):
        cddp.load(p, mmap=True)
    assert not marker.exists()
    # the bare pickle (torch's legacy layout) is refused before a byte of it is unpickled
    with pytest.raises(cddp.serialization.CheckpointError):
        _load(pickle.dumps(payload(marker), protocol=2))
    assert not marker.exists()
    # only an explicit weights_only=False runs it: proof the payload was live
    _load(blob, weights_only=False)
    assert marker.exists()


def test_refusal_names_the_global_and_how_to_allow_it_as_torch_does():
    blob = _saved(UserThing(1, cddp.ones(2)))
    with pytest.raises(pickle.UnpicklingError) as e:
        _load(blob)
    ours = str(e.value)
    name = f"{UserThing.__module__}.UserThing"
    assert f"GLOBAL {name} was not an allowed global by default" in ours
    assert f"cddp.serialization.add_safe_globals([{name}])" in ours
    assert f"cddp.serialization.safe_globals([{name}])" in ours
    assert "weights_only` set to `False`" in ours
    torch = pytest.importorskip("torch")         # torch words it the same way
    buf = io.BytesIO()
    torch.save(UserThing(1, torch.ones(2)), buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError) as te:
        torch.load(buf)
    theirs = str(te.value)
    for part in ("Weights only load failed", f"GLOBAL {name} was not an allowed global by "
                 "default", f"serialization.add_safe_globals([{name}])",
                 f"serialization.safe_globals([{name}])", "weights_only` set to `False`"):
        assert part in theirs and part in ours


def test_add_safe_globals_and_safe_globals_allow_a_user_class():
    blob = _saved({"thing": UserThing(3, cddp.arange(4.0)), "n": 1})
    cddp.serialization.clear_safe_globals()
    try:
        with cddp.serialization.safe_globals([UserThing]):
            assert UserThing in cddp.serialization.get_safe_globals()
            back = _load(blob)
        assert type(back["thing"]) is UserThing and back["thing"].a == 3
        np.testing.assert_array_equal(n(back["thing"].w), np.arange(4.0))
        assert cddp.serialization.get_safe_globals() == []
        with pytest.raises(pickle.UnpicklingError):          # the block is over
            _load(blob)
        cddp.serialization.add_safe_globals([UserThing])
        assert _load(blob)["thing"].a == 3
        cddp.serialization.clear_safe_globals()
        with pytest.raises(pickle.UnpicklingError):
            _load(blob)
        with pytest.raises(TypeError):
            cddp.serialization.add_safe_globals(UserThing)   # a list, as torch
    finally:
        cddp.serialization.clear_safe_globals()


def test_weights_only_false_loads_an_arbitrary_object():
    import argparse
    import fractions
    obj = {"ns": argparse.Namespace(lr=0.1, name="x"), "frac": fractions.Fraction(1, 3),
           "thing": UserThing("a", cddp.ones(3)), "fn": os.path.join}
    back = _load(_saved(obj), weights_only=False)
    assert back["ns"] == obj["ns"] and back["frac"] == fractions.Fraction(1, 3)
    assert back["thing"].a == "a" and back["fn"] is os.path.join
    np.testing.assert_array_equal(n(back["thing"].w), np.ones(3))
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
        _load(_saved(obj["ns"]))


def _model():
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(),
                        nn.Sequential(nn.Linear(4, 2), nn.Tanh()))
    net.register_buffer("step_count", cddp.tensor(7))
    return net


def test_whole_module_and_optimizer_round_trip(tmp_path):
    cddp.manual_seed(0)
    net = _model()
    opt = cddp.optim.Adam(net.parameters(), lr=0.01)
    x = cddp.randn(5, 3)
    for _ in range(2):                         # moves BatchNorm's running stats and Adam state
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        opt.step()
    ck = {"model": net, "opt": opt.state_dict(), "epoch": 2, "args": {"lr": 0.01}}
    cddp.save(ck, tmp_path / "ck.pt")
    assert _header((tmp_path / "ck.pt").read_bytes())["__metadata__"]["format"] == \
        "cddp-pickle"
    with pytest.raises(pickle.UnpicklingError, match="Sequential"):
        cddp.load(tmp_path / "ck.pt")          # module classes are not allowlisted by default
    back = cddp.load(tmp_path / "ck.pt", weights_only=False)
    m = back["model"]
    assert type(m) is nn.Sequential and type(m[3]) is nn.Sequential and back["epoch"] == 2
    sd, sd2 = net.state_dict(), m.state_dict()
    assert list(sd) == list(sd2) and "1.running_mean" in sd2 and "step_count" in sd2
    for k in sd:
        assert sd[k].dtype == sd2[k].dtype
        np.testing.assert_array_equal(n(sd[k]), n(sd2[k]))
    for p in m.parameters():
        assert isinstance(p, nn.Parameter) and p.requires_grad
    net.eval()
    m.eval()
    np.testing.assert_array_equal(n(net(x)), n(m(x)))
    opt2 = cddp.optim.Adam(m.parameters(), lr=0.01)
    opt2.load_state_dict(back["opt"])
    _check_equal(opt.state_dict(), opt2.state_dict())
    # the loaded model trains: gradients flow to its parameters
    m.train()
    m(x).sum().backward()
    assert all(p.grad is not None for p in m.parameters())


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint16", "int64",
                                   "bool", "complex128"])
def test_numpy_arrays_round_trip_as_raw_bytes(dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    objs = [a, np.asfortranarray(a), a[:, ::2], np.array(a[0, 0]), np.zeros((0, 4), dtype)]
    blob = _saved(objs)
    header = _header(blob)
    storages = [v for k, v in header.items() if k.startswith("data/")]
    assert header["data.pkl"]["shape"][0] < 2000           # the bytes are not in the pickle
    assert sum(v["shape"][0] for v in storages) == sum(o.nbytes for o in objs)
    back = _load(blob)                                       # weights_only=True reads arrays
    for o, b in zip(objs, back):
        assert type(b) is np.ndarray and b.dtype == o.dtype and b.shape == o.shape
        np.testing.assert_array_equal(o, b)
    assert back[1].flags.f_contiguous
    b = _load(_saved(a))                                     # a bare array at the top level
    np.testing.assert_array_equal(a, b)


def test_numpy_object_arrays_and_scalars_under_weights_only():
    objs = {"obj": np.array([1, "x", None], dtype=object), "s": np.float32(2.5),
            "big": np.arange(6, dtype=">i4"), "dt": np.dtype("float16")}
    back = _load(_saved(objs))
    assert back["obj"].tolist() == [1, "x", None] and back["s"] == np.float32(2.5)
    assert back["s"].dtype == np.float32 and back["dt"] == np.dtype("float16")
    np.testing.assert_array_equal(back["big"], np.arange(6))


def test_views_share_their_storage_after_load():
    base = cddp.arange(12.0).reshape(3, 4)
    view = base[1:, ::2]
    param = nn.Parameter(cddp.ones(3))
    back = _load(_saved({"base": base, "view": view, "p": param, "p2": param, "s": {1, 2}}))
    np.testing.assert_array_equal(n(back["view"]), n(view))
    assert back["view"].stride() == view.stride()
    back["base"][1, 0] = 100.0                  # one storage: the view sees the write
    assert back["view"][0, 0].item() == 100.0
    assert back["p"] is back["p2"] and isinstance(back["p"], nn.Parameter)
    assert back["s"] == {1, 2}


def test_state_dicts_keep_the_safetensors_layout():
    net = _model()
    for obj in (net.state_dict(), {"model": net.state_dict(), "epoch": 1}):
        assert _header(_saved(obj))["__metadata__"]["format"] == "cddp"
    assert _header(_saved(net))["__metadata__"]["format"] == "cddp-pickle"


def test_map_location_and_mmap_apply_to_whole_objects(tmp_path):
    p = tmp_path / "m.pt"
    cddp.save({"w": cddp.arange(3.0), "s": {1}}, p)
    seen = []

    def loc(storage, location):
        seen.append(location)
        return None
    for ml in (None, "cpu", cddp.device("cpu"), {"cpu": "cpu"}, loc):
        back = cddp.load(p, map_location=ml, mmap=True)
        np.testing.assert_array_equal(n(back["w"]), [0.0, 1.0, 2.0])
    assert seen == ["cpu"]


def _pickle_file(pkl, storages=()):
    """A cddp-pickle file around the pickle bytes `pkl` and raw storages {key: bytes}."""
    header, data, off = {}, b"", 0
    for key, raw in storages:
        header[f"data/{key}"] = {"dtype": "U8", "shape": [len(raw)],
                                 "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    header["data.pkl"] = {"dtype": "U8", "shape": [len(pkl)], "data_offsets": [off, off + len(pkl)]}
    header["__metadata__"] = {"format": "cddp-pickle", "cddp_version": "1"}
    return _st_bytes(header, data + pkl)


class _Reduce:
    def __init__(self, *rv):
        self.rv = rv

    def __reduce__(self):
        return self.rv


class _Pid:
    def __init__(self, pid):
        self.pid = pid


def _forged_pickle(obj):
    class P(pickle.Pickler):
        def persistent_id(self, o):
            return o.pid if type(o) is _Pid else None
    buf = io.BytesIO()
    P(buf, protocol=4).dump(obj)
    return buf.getvalue()


def _forgeries():
    from cddp._checkpoint_pickle import _rebuild_ndarray, _rebuild_tensor
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    sid = lambda dt="float32", numel=4, key="0": _Pid(("storage", key, dt, "cpu", numel))  # noqa: E731
    rt = lambda *a: _Reduce(_rebuild_tensor, (sid(),) + a)                                  # noqa: E731
    return {
        "oob-size": (rt(0, (5,), (1,), False), [("0", f32)]),
        "oob-offset": (rt(4, (1,), (1,), False), [("0", f32)]),
        "oob-stride": (rt(0, (2,), (4,), False), [("0", f32)]),
        "negative-stride": (rt(0, (2,), (-1,), False), [("0", f32)]),
        "huge-stride": (rt(0, (2, 2), (2 ** 62, 1), False), [("0", f32)]),
        "too-many-dims": (rt(0, (1,) * 40, (1,) * 40, False), [("0", f32)]),
        "rank-mismatch": (rt(0, (2,), (1, 1), False), [("0", f32)]),
        "missing-storage": (_Reduce(_rebuild_tensor, (sid(key="9"), 0, (1,), (1,), False)),
                            [("0", f32)]),
        "wrong-numel": (_Reduce(_rebuild_tensor, (sid(numel=5), 0, (1,), (1,), False)),
                        [("0", f32)]),
        "unknown-dtype": (_Reduce(_rebuild_tensor, (sid(dt="object"), 0, (1,), (1,), False)),
                          [("0", f32)]),
        "bad-bool": (_Reduce(_rebuild_tensor, (sid(dt="bool"), 0, (4,), (1,), False)),
                     [("0", b"\x00\x01\x07\x00")]),
        "bad-pid": (_Pid(("storage", 0)), [("0", f32)]),
        "ndarray-shape": (_Reduce(_rebuild_ndarray, (sid(dt="numpy:<f4"), (5,), False)),
                          [("0", f32)]),
        "not-a-pickle": (None, [("0", f32)]),
    }


@pytest.mark.parametrize("case", sorted(_forgeries()))
def test_forged_whole_object_files_raise_checkpoint_error(case):
    obj, storages = _forgeries()[case]
    pkl = b"\x80\x04garbage" if obj is None else _forged_pickle(obj)
    for kw in ({}, {"weights_only": False}):
        with pytest.raises(cddp.serialization.CheckpointError):
            _load(_pickle_file(pkl, storages), **kw)


def test_forged_entries_and_versions_raise_checkpoint_error():
    pkl = pickle.dumps({1}, protocol=4)
    good = _pickle_file(pkl)
    assert _load(good) == {1}
    _refused(good.replace(b'"cddp_version":"1"', b'"cddp_version":"9"'), "version")
    _refused(_pickle_file(pkl, [("x", b"1234")]), "unexpected entry")
    h = {"data/0": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
         "__metadata__": {"format": "cddp-pickle", "cddp_version": "1"}}
    _refused(_st_bytes(h, b"1234"), "data.pkl is missing")


def test_truncated_and_bit_flipped_whole_object_files_never_crash(tmp_path):
    blob = _saved({"m": nn.Linear(2, 2), "a": np.arange(3.0), "s": {1, 2}})
    for cut in range(0, len(blob), 7):
        with pytest.raises(cddp.serialization.CheckpointError):
            _load(blob[:cut], weights_only=False)
    start = len(blob) - _header(blob)["data.pkl"]["shape"][0]
    rng = np.random.default_rng(1)
    for _ in range(300):                         # flips inside the pickle: refused or loaded
        b = bytearray(blob)
        for i in rng.integers(start, len(blob), 2):
            b[i] ^= 1 << int(rng.integers(8))
        try:
            _load(bytes(b))
        except (cddp.serialization.CheckpointError, pickle.UnpicklingError):
            pass


def test_weights_only_refuses_what_torch_refuses_by_construction():
    """Opcodes and calls the restricted unpickler refuses, each with UnpicklingError."""
    cases = [
        b"\x80\x02c__builtin__\ngetattr\nq\x00.",                       # blocked builtin
        b"\x80\x02cbuiltins\nset\n)\x81.",                               # NEWOBJ of set
        b"\x80\x02ccollections\nOrderedDict\n}X\x03\x00\x00\x00abcK\x01sb.",  # BUILD a class
        b"\x80\x02\x82\x01.",                                            # EXT1
        b"(cbuiltins\nlist\no.",                                         # OBJ
        b"\x80\x02cbuiltins\nbytearray\nJ\x00\x00\x00\x40\x85R.",        # bytearray(2**30)
        b"\x80\x02cbuiltins\nset\ncbuiltins\nint\n\x85R.",               # set(int)
    ]
    for pkl in cases:
        with pytest.raises(pickle.UnpicklingError):
            _load(_pickle_file(pkl))


def test_load_argument_rules_follow_torch(monkeypatch):
    blob = _saved({1})
    with pytest.raises(RuntimeError, match="explicit pickle_module"):
        _load(blob, pickle_module=pickle, weights_only=True)
    assert _load(blob, pickle_module=pickle) == {1}               # weights_only=None -> False
    with pytest.raises(ValueError, match="mmap"):
        _load(blob, mmap=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        _load(blob, foo=1)
    marker_blob = _saved(UserThing(1, 2))
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    assert _load(marker_blob).a == 1                              # not passed: env decides
    with pytest.raises(pickle.UnpicklingError):
        _load(marker_blob, weights_only=True)
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(RuntimeError, match="Only one of"):
        _load(marker_blob)


class TaggedTensor(cddp.Tensor):
    """A user Tensor subclass: its class and __dict__ survive a whole-object checkpoint."""


def test_tensor_subclasses_and_their_attributes_round_trip():
    t = cddp.Tensor._make_subclass(TaggedTensor, cddp.arange(3.0), False)
    t.tag = "hello"
    p = nn.Parameter(cddp.ones(2))
    p.note = 5
    blob = _saved({"t": t, "p": p})
    with pytest.raises(pickle.UnpicklingError, match="TaggedTensor"):
        _load(blob)
    with cddp.serialization.safe_globals([TaggedTensor]):
        back = _load(blob)
    assert type(back["t"]) is TaggedTensor and back["t"].tag == "hello"
    np.testing.assert_array_equal(n(back["t"]), [0.0, 1.0, 2.0])
    assert type(back["p"]) is nn.Parameter and back["p"].note == 5 and back["p"].requires_grad


def test_scalar_subclasses_keep_their_type():
    """np.float64 is a float and an IntEnum an int: the JSON layout would flatten them, so
    they are pickled (np.float64 loads under weights_only; an enum needs weights_only=False)."""
    import signal as sig
    blob = _saved({"loss": np.float64(0.25), "n": 3})
    assert _header(blob)["__metadata__"]["format"] == "cddp-pickle"
    back = _load(blob)
    assert type(back["loss"]) is np.float64 and back["loss"] == 0.25 and back["n"] == 3
    assert _load(_saved({"s": sig.SIGTERM}), weights_only=False)["s"] is sig.SIGTERM


def test_whole_object_checkpoint_keeps_every_dtype(tmp_path):
    """A pickled (whole-object) checkpoint stores each storage's bytes with its dtype: the
    narrow dtypes come back with the same bits (bfloat16 rides as its uint16 words)."""
    vals = np.array([0.0, -1.5, 3.140625, 65504.0, -2.0 ** -14], dtype=np.float32)
    tensors = {name: cddp.tensor(vals).to(getattr(cddp, name))
               for name in ("float16", "bfloat16", "float32", "float64")}
    tensors.update({name: cddp.tensor([0, 1, 7, 100]).to(getattr(cddp, name))
                    for name in ("uint8", "int8", "int16", "int32", "int64")})
    model = cddp.nn.Linear(3, 2).to(cddp.bfloat16)
    path = tmp_path / "obj.pt"
    cddp.save({"t": tensors, "model": model}, path)              # a module: the pickle layout
    back = cddp.load(path, weights_only=False)
    for name, t in tensors.items():
        got = back["t"][name]
        assert got.dtype == t.dtype, name
        np.testing.assert_array_equal(got.float().numpy(), t.float().numpy(), err_msg=name)
    assert back["model"].weight.dtype == cddp.bfloat16
    np.testing.assert_array_equal(back["model"].weight.float().detach().numpy(),
                                  model.weight.float().detach().numpy())


def test_header_lengths_that_look_like_torch_magic_still_load(tmp_path):
    # the 8-byte header length comes first: a 640-byte header starts 80 02, a pickle's magic
    # (the DDP tutorial's state dict with its "module." keys has exactly that length). Every
    # length from ~300 to ~1600 bytes must read back, the ones that collide included.
    collided = 0
    for k in range(140, 800):
        p = tmp_path / f"k{k}.pt"
        cddp.save({"w" * k: cddp.full((2,), float(k))}, p)
        with open(p, "rb") as f:
            collided += f.read(2) in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
        back = cddp.load(p)
        assert list(back) == ["w" * k] and n(back["w" * k]).tolist() == [k, k]
        os.remove(p)
    assert collided >= 4                    # the collisions were exercised


def test_map_location_table_applies_only_to_the_locations_it_names(tmp_path):
    # torch maps a saved location through the table only when a tensor was saved there: a
    # {"cuda:0": "cuda:1"} table over a CPU checkpoint does nothing, and so resolves no CUDA
    # device (under CDDP_STRICT_DEVICE=1 resolving one raises)
    p = tmp_path / "m.pt"
    cddp.save({"w": cddp.arange(3.0)}, p)
    code = textwrap.dedent(f"""
        import cddp
        back = cddp.load({str(p)!r}, map_location={{"cuda:0": "cuda:1"}})
        print(back["w"].tolist())
        try:
            cddp.load({str(p)!r}, map_location={{"cpu": "cuda:0"}})
        except Exception as e:
            print("raised", type(e).__name__)
    """)
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                       text=True, timeout=60, env=subprocess_env(CDDP_STRICT_DEVICE="1"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[0.0, 1.0, 2.0]" and lines[1].startswith("raised"), r.stdout
