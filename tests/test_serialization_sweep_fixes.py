"""What a checkpoint interoperability / safety sweep against torch 2.13 found (fifteenth
session): saving through symlinks, onto devices and FIFOs, over read-only files; containers
shared inside a checkpoint; torch's complex tensors; the message for dtypes cddp lacks.

Oracles: the file system's own state (links, modes, inodes), the loaded values, torch 2.13
(importorskip) as the writer of complex checkpoints."""
import io
import os
import stat
import time

import numpy as np
import pytest

import cddp


def test_save_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "ep10.pt", tmp_path / "latest.pt"
    cddp.save({"w": cddp.zeros(2)}, target)
    os.symlink(target, link)
    cddp.save({"w": cddp.ones(2)}, link)
    assert os.path.islink(link)
    assert cddp.load(target)["w"].tolist() == [1.0, 1.0]
    assert sorted(os.listdir(tmp_path)) == ["ep10.pt", "latest.pt"]     # no temporaries


def test_save_to_a_device_node_writes_through_it(tmp_path):
    # a node of its own with /dev/null's numbers (never the system's: a regression here would
    # replace it); needs root's mknod
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"mknod not permitted here: {e}")
    before = os.lstat(node)
    cddp.save({"w": cddp.ones(3)}, node)
    after = os.lstat(node)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_save_to_a_fifo_nobody_reads_raises_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(OSError):
        cddp.save({"w": cddp.ones(1)}, fifo)
    assert time.monotonic() - t0 < 5 and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_save_refuses_a_file_it_may_not_write(tmp_path, monkeypatch):
    path = tmp_path / "ro.pt"
    cddp.save({"w": cddp.zeros(1)}, path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if os.fspath(p) ==
                        os.fspath(path) and mode == os.W_OK else real_access(p, mode, *a, **k))
    with pytest.raises(PermissionError):
        cddp.save({"w": cddp.ones(1)}, path)
    monkeypatch.undo()
    assert cddp.load(path)["w"].tolist() == [0.0]


def test_save_onto_a_directory_raises(tmp_path):
    with pytest.raises(IsADirectoryError):
        cddp.save({"w": cddp.ones(1)}, tmp_path)


def test_shared_containers_stay_shared_and_small():
    a = []
    for _ in range(24):                  # each level holds the one below twice
        a = [a, a]
    buf = io.BytesIO()
    t0 = time.monotonic()
    cddp.save(a, buf)
    assert time.monotonic() - t0 < 5 and len(buf.getvalue()) < 100_000
    buf.seek(0)
    r = cddp.load(buf, weights_only=False)
    assert r[0] is r[1]
    d = {"x": cddp.ones(2)}
    buf = io.BytesIO()
    cddp.save({"a": d, "b": d}, buf)
    buf.seek(0)
    r = cddp.load(buf, weights_only=False)
    assert r["a"] is r["b"] and r["a"]["x"].tolist() == [1.0, 1.0]


def test_optimizer_groups_sharing_their_betas_keep_the_state_dict_format():
    m = cddp.nn.Linear(2, 2)
    opt = cddp.optim.Adam([{"params": [m.weight]}, {"params": [m.bias]}])
    m(cddp.ones(1, 2)).sum().backward()
    opt.step()
    buf = io.BytesIO()
    cddp.save({"model": m.state_dict(), "opt": opt.state_dict()}, buf)
    raw = buf.getvalue()
    assert raw[8:9] == b"{"             # a safetensors header, not the pickle fallback
    buf.seek(0)
    r = cddp.load(buf)
    assert r["opt"]["param_groups"][1]["betas"] == (0.9, 0.999)


def test_torch_complex_checkpoints_load():
    torch = pytest.importorskip("torch")
    z = torch.randn(3, 4, dtype=torch.complex64)
    p = torch.nn.Parameter(torch.randn(2, dtype=torch.complex128))
    buf = io.BytesIO()
    torch.save({"z": z, "v": z[:, 1::2], "p": p, "dt": torch.complex64}, buf)
    for weights_only in (True, False):
        buf.seek(0)
        r = cddp.load(buf, weights_only=weights_only)
        np.testing.assert_array_equal(r["z"].numpy(), z.numpy())
        np.testing.assert_array_equal(r["v"].numpy(), z[:, 1::2].numpy())
        np.testing.assert_array_equal(r["p"].detach().numpy(), p.detach().numpy())
        assert r["p"].requires_grad and r["dt"] == cddp.complex64


def test_dtypes_cddp_lacks_are_named_in_the_error():
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"u": torch.ones(3, dtype=torch.uint16)}, buf)
    buf.seek(0)
    with pytest.raises(Exception, match="cddp cannot build .*uint16"):
        cddp.load(buf)
