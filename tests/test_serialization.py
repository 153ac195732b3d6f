"""cddp.save / cddp.load: round trips, safetensors compatibility, atomic writes, and refusal
of truncated, corrupt and foreign files."""
from collections import Counter, OrderedDict
import io
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
    leftovers = [f for f in os.listdir(tmp_path) if f != "ck.pt"]
    # temporaries of a killed writer may remain, but never in place of the target
    assert all(f.startswith(".ck.pt.") for f in leftovers)


def test_saved_file_has_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        cddp.save({"a": 1}, tmp_path / "m.pt")
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "m.pt").st_mode & 0o777) == 0o644
