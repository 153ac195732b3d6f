"""cddp.save(..., format="torch") / CDDP_SAVE_FORMAT=torch: torch.save's zip format, read by
torch.load (weights_only, its default; mmap too) and by cddp.load. Without torch: the archive
is a valid zip (CRC-checked by zipfile), its data 64-byte aligned, and cddp.load's reader of
torch's format gives the saved values back; ZIP64 records are exercised by lowering the
threshold."""
import io
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import cddp
from cddp import _torch_zip_writer


def _sample():
    cddp.manual_seed(0)
    m = cddp.nn.Sequential(cddp.nn.Linear(3, 4), cddp.nn.BatchNorm1d(4), cddp.nn.Linear(4, 2))
    return m, {"model": m.state_dict(), "epoch": 3, "lr": 0.125, "name": "run-1",
               "misc": [1.5, None, True, (1, 2, 3, 4), -7, 2 ** 70],
               "dtype": cddp.float16, "device": cddp.device("cpu"),
               "bf16": cddp.tensor([1.0, -2.5, 3.0], dtype=cddp.bfloat16),
               "mask": cddp.tensor([True, False]), "i8": cddp.tensor([-3, 4], dtype=cddp.int8),
               "param": cddp.nn.Parameter(cddp.tensor([0.5, 1.5])),
               "transposed": cddp.arange(6.0).view(2, 3).t(), "scalar": cddp.tensor(2.5),
               "empty": cddp.zeros(0, 3)}


def _same(a, b):
    assert type(a) is type(b) or (isinstance(a, dict) and isinstance(b, dict)), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, cddp.Tensor):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        assert a.float().tolist() == b.float().tolist()
    else:
        assert a == b


def _aligned(path):
    raw = open(path, "rb").read()
    z = zipfile.ZipFile(path)
    assert z.testzip() is None                         # every CRC matches
    for info in z.infolist():
        at = info.header_offset
        start = at + 30 + int.from_bytes(raw[at + 26:at + 28], "little") + \
            int.from_bytes(raw[at + 28:at + 30], "little")
        assert start % 64 == 0, info.filename
    return [i.filename for i in z.infolist()]


def test_written_archive_reads_back_in_cddp(tmp_path):
    _, obj = _sample()
    path = tmp_path / "ckpt.pt"
    cddp.save(obj, path, format="torch")
    names = _aligned(path)
    assert names[0] == "ckpt/data.pkl" and "ckpt/version" in names and "ckpt/data/0" in names
    back = cddp.load(path)
    _same(obj, back)
    assert type(back["model"]) is OrderedDict and type(back["param"]) is cddp.nn.Parameter


def test_env_variable_selects_the_format(tmp_path, monkeypatch):
    monkeypatch.setenv("CDDP_SAVE_FORMAT", "torch")
    cddp.save({"w": cddp.ones(2)}, tmp_path / "a.pt")
    assert zipfile.is_zipfile(tmp_path / "a.pt")
    monkeypatch.setenv("CDDP_SAVE_FORMAT", "pickle")
    with pytest.raises(ValueError, match="CDDP_SAVE_FORMAT"):
        cddp.save({"w": cddp.ones(2)}, tmp_path / "b.pt")
    cddp.save({"w": cddp.ones(2)}, tmp_path / "c.pt", format="cddp")   # the keyword wins
    assert not zipfile.is_zipfile(tmp_path / "c.pt")


def test_unsupported_objects_raise(tmp_path):
    with pytest.raises(TypeError, match="torch's format"):
        cddp.save(cddp.nn.Linear(2, 2), tmp_path / "m.pt", format="torch")
    cyc = []
    cyc.append(cyc)
    with pytest.raises(ValueError, match="contains itself"):
        cddp.save(cyc, tmp_path / "c.pt", format="torch")
    assert not (tmp_path / "m.pt").exists() and not (tmp_path / "c.pt").exists()


def test_zip64_records(tmp_path, monkeypatch):
    monkeypatch.setattr(_torch_zip_writer, "_ZIP64_AT", 100)   # every later record is ZIP64
    obj = {"w": cddp.arange(300.0), "b": cddp.ones(5)}
    cddp.save(obj, tmp_path / "z.pt", format="torch")
    _aligned(tmp_path / "z.pt")
    _same(obj, cddp.load(tmp_path / "z.pt"))


def test_torch_loads_it():
    torch = pytest.importorskip("torch")
    m, obj = _sample()
    buf = io.BytesIO()
    cddp.save(obj, buf, format="torch")
    buf.seek(0)
    got = torch.load(buf)                               # weights_only=True: torch's default
    assert got["epoch"] == 3 and got["misc"] == [1.5, None, True, (1, 2, 3, 4), -7, 2 ** 70]
    assert got["dtype"] is torch.float16 and got["device"] == torch.device("cpu")
    assert isinstance(got["param"], torch.nn.Parameter) and got["param"].requires_grad
    for key in ("bf16", "mask", "i8", "transposed", "scalar", "empty"):
        assert str(got[key].dtype).split(".")[-1] == str(obj[key].dtype).split(".")[-1]
        np.testing.assert_array_equal(got[key].float().numpy(), obj[key].float().numpy())
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                              torch.nn.Linear(4, 2))
    net.load_state_dict(got["model"])
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    m.eval()
    net.eval()
    np.testing.assert_allclose(net(torch.tensor(x)).detach().numpy(),
                               m(cddp.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_torch_mmap_and_zip64(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_torch_zip_writer, "_ZIP64_AT", 100)
    obj = {"w": cddp.arange(300.0).view(30, 10), "b": cddp.ones(5, dtype=cddp.float64)}
    cddp.save(obj, tmp_path / "z.pt", format="torch")
    got = torch.load(tmp_path / "z.pt", mmap=True)
    np.testing.assert_array_equal(got["w"].numpy(), obj["w"].numpy())
    assert got["b"].dtype == torch.float64
