"""cddp.load of torch.save's zip files (cddp/_torch_zip.py): a file torch 2.13 wrote (shipped
in tests/data, so this runs without torch; its values are arange/full constants), files torch
writes now (models, optimizers, views; behind importorskip), and forged archives built here
by hand, which must raise CheckpointError / UnpicklingError and never run what they name.
"""
import io
import os
import struct
import zipfile

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from cddp.serialization import CheckpointError
from conftest import n

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "data", "torch_2_13_checkpoint.pt")


def test_a_file_torch_wrote_loads_with_its_values_and_sharing():
    # written by torch 2.13: base = arange(12).view(3, 4); col = base[:, 1]; long = arange(5);
    # bf16 [1.5, -2.25, 3]; half [0.5, -1]; bool [T, F, T]; param = Parameter(full(2, 7));
    # size Size([2, 3]); dtype int32; epoch 3; name "fixture"; nested [{"lr": 0.1}, (1, 2)]
    obj = cddp.load(FIXTURE)
    np.testing.assert_array_equal(n(obj["base"]), np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(n(obj["col"]), [1.0, 5.0, 9.0])
    assert obj["long"].dtype == cddp.int64 and n(obj["long"]).tolist() == [0, 1, 2, 3, 4]
    assert obj["bf16"].dtype == cddp.bfloat16
    assert obj["bf16"].float().tolist() == [1.5, -2.25, 3.0]
    assert obj["half"].dtype == cddp.float16 and obj["half"].float().tolist() == [0.5, -1.0]
    assert obj["bool"].tolist() == [True, False, True]
    assert isinstance(obj["param"], nn.Parameter) and obj["param"].requires_grad
    assert obj["param"].tolist() == [7.0, 7.0]
    assert obj["size"] == cddp.Size([2, 3]) and isinstance(obj["size"], cddp.Size)
    assert obj["dtype"] is cddp.int32
    assert (obj["epoch"], obj["name"], obj["nested"]) == (3, "fixture", [{"lr": 0.1}, (1, 2)])
    obj["base"][2, 1] = -1.0                       # col is a view of base's storage, as in torch
    assert obj["col"].tolist() == [1.0, 5.0, -1.0]


def test_map_location_applies_to_torch_files():
    seen = []

    def loc(storage, location):
        seen.append(location)
        return None
    obj = cddp.load(FIXTURE, map_location=loc)
    assert obj["long"].tolist() == [0, 1, 2, 3, 4] and set(seen) == {"cpu"}
    with open(FIXTURE, "rb") as f:              # a file object, and a stream of unknown size
        assert cddp.load(io.BytesIO(f.read()))["epoch"] == 3


# ---- files torch writes now ------------------------------------------------------------------

def test_torch_model_weights_load_into_the_same_cddp_model(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
    tnet(torch.randn(4, 3, 8, 8))                  # moves the batch-norm running stats
    tnet.eval()
    torch.save(tnet.state_dict(), tmp_path / "m.pt")
    cnet = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 5))
    cnet.load_state_dict(cddp.load(tmp_path / "m.pt"))
    cnet.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    want = tnet(torch.from_numpy(x)).detach().numpy()
    got = n(cnet(cddp.from_numpy(x)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_whole_torch_model_loads_when_its_cddp_classes_are_allowlisted(tmp_path):
    # pytorch/examples' generate.py: torch.save(model), then torch.load inside safe_globals of
    # the layer classes; ported, the allowlist names cddp's classes for torch's names
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Dropout(0.1)).eval()
    torch.save(tnet, tmp_path / "m.pt")
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    with cddp.serialization.safe_globals([nn.Sequential, nn.Linear, nn.Dropout]):
        cnet = cddp.load(tmp_path / "m.pt")
    assert type(cnet) is nn.Sequential and type(cnet[1]) is nn.Dropout and not cnet.training
    np.testing.assert_allclose(n(cnet(cddp.from_numpy(x))), tnet(torch.from_numpy(x)).detach(),
                               rtol=1e-6, atol=1e-7)
    # a class left out is refused, naming the cddp class to allowlist; and nothing by default
    with cddp.serialization.safe_globals([nn.Sequential, nn.Linear]):
        with pytest.raises(cddp.serialization.pickle.UnpicklingError,
                           match=r"cddp\.nn\.modules\.dropout\.Dropout"):
            cddp.load(tmp_path / "m.pt")
    with pytest.raises(cddp.serialization.pickle.UnpicklingError, match="Sequential"):
        cddp.load(tmp_path / "m.pt")


def test_torch_optimizer_state_resumes_in_cddp(tmp_path):
    torch = pytest.importorskip("torch")
    w0 = np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3)
    tw = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    for _ in range(3):
        topt.zero_grad()
        (tw ** 2).sum().backward()
        topt.step()
    torch.save({"w": tw.detach(), "opt": topt.state_dict()}, tmp_path / "ck.pt")
    topt.zero_grad()
    (tw ** 2).sum().backward()
    topt.step()                                     # torch's 4th step: the value to reach

    ck = cddp.load(tmp_path / "ck.pt")
    cw = nn.Parameter(ck["w"].clone())
    copt = cddp.optim.SGD([cw], lr=0.1, momentum=0.9)
    copt.load_state_dict(ck["opt"])
    copt.zero_grad()
    (cw ** 2).sum().backward()
    copt.step()
    np.testing.assert_allclose(n(cw), tw.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_torch_views_dtypes_and_non_contiguous_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    base = torch.arange(24, dtype=torch.float64).view(2, 3, 4)
    obj = {"t": base.transpose(0, 2), "s": base[1, ::2, 1:], "i8": torch.arange(-3, 3,
                                                                               dtype=torch.int8),
           "u8": torch.arange(250, 256, dtype=torch.uint8), "i16": torch.tensor([-7, 9],
                                                                            dtype=torch.int16),
           "i32": torch.tensor([1 << 30], dtype=torch.int32), "0d": torch.tensor(2.5),
           "empty": torch.zeros(0, 3), "dev": torch.device("cpu")}
    torch.save(obj, tmp_path / "v.pt")
    back = cddp.load(tmp_path / "v.pt")
    for k, v in obj.items():
        if k == "dev":
            assert str(back[k]) == "cpu"
            continue
        np.testing.assert_array_equal(n(back[k]), v.numpy(), err_msg=k)
        assert str(back[k].dtype).split(".")[1] == str(v.dtype).split(".")[1], k
    back["t"][0, 0, 0] = 100.0                      # both views share the one storage
    assert back["s"].tolist()[0][0] == n(back["t"])[1, 0, 1]


# ---- forged archives: built here, byte by byte ------------------------------------------------

def _str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(i):
    return b"J" + struct.pack("<i", i)


def _tuple(*items):
    return b"(" + b"".join(items) + b"t"


def _tensor(key, numel, offset, size, stride, storage="FloatStorage"):
    """The pickle bytes of torch._utils._rebuild_tensor_v2 over storage `key`."""
    pid = _tuple(_str("storage"), f"ctorch\n{storage}\n".encode(), _str(key), _str("cpu"),
                 _int(numel))
    return (b"ctorch._utils\n_rebuild_tensor_v2\n" +
            _tuple(pid + b"Q", _int(offset), _tuple(*map(_int, size)),
                   _tuple(*map(_int, stride)), b"\x89", b"ccollections\nOrderedDict\n)R") +
            b"R")


def _archive(path, pkl, entries=None, compress=None):
    """A torch-style zip: archive/data.pkl = pkl + archive/data/<key> entries."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + pkl + b".")
        z.writestr("archive/byteorder", b"little")
        for key, raw in (entries or {}).items():
            z.writestr(f"archive/data/{key}", raw, compress_type=compress)
    return path


def test_a_hand_built_archive_loads(tmp_path):
    # the forgeries below differ from this one in one thing each
    p = _archive(tmp_path / "ok.pt", _tensor("0", 6, 1, (2, 2), (3, 1)),
                 {"0": np.arange(6, dtype=np.float32).tobytes()})
    assert cddp.load(p).tolist() == [[1.0, 2.0], [4.0, 5.0]]


@pytest.mark.parametrize("weights_only", [True, None])
def test_a_global_outside_the_allowlist_is_refused_and_never_runs(tmp_path, weights_only):
    # weights_only=False is the caller's statement of trust (pickle runs what the file names,
    # as torch's does): only True and the default protect
    marker = tmp_path / "ran"
    pkl = b"cos\nsystem\n" + _tuple(_str(f"touch {marker}")) + b"R"
    p = _archive(tmp_path / "evil.pt", pkl)
    with pytest.raises(cddp.serialization.pickle.UnpicklingError, match="os"):
        cddp.load(p, weights_only=weights_only)
    assert not marker.exists()


@pytest.mark.parametrize("case,match", [
    ("numel", "do not fill"),
    ("outside", "reaches past the end"),
    ("missing", "no entry"),
    ("compressed", "compressed"),
    ("bool", "other than 0 and 1"),
    ("dtype_twice", "referred to as"),
    ("two_pickles", "one <prefix>/data.pkl"),
    ("truncated", "zip"),
])
def test_forged_archives_raise_checkpoint_error(tmp_path, case, match):
    raw = np.arange(6, dtype=np.float32).tobytes()
    p = tmp_path / f"{case}.pt"
    if case == "numel":                 # 7 elements claimed over 6 elements' bytes
        _archive(p, _tensor("0", 7, 0, (7,), (1,)), {"0": raw})
    elif case == "outside":             # a view reaching past its storage
        _archive(p, _tensor("0", 6, 4, (2, 2), (3, 1)), {"0": raw})
    elif case == "missing":
        _archive(p, _tensor("1", 6, 0, (6,), (1,)), {"0": raw})
    elif case == "compressed":
        _archive(p, _tensor("0", 6, 0, (6,), (1,)), {"0": raw}, zipfile.ZIP_DEFLATED)
    elif case == "bool":
        _archive(p, _tensor("0", 2, 0, (2,), (1,), "BoolStorage"), {"0": b"\x01\x07"})
    elif case == "dtype_twice":
        _archive(p, _tuple(_tensor("0", 6, 0, (6,), (1,)),
                           _tensor("0", 3, 0, (3,), (1,), "DoubleStorage")), {"0": raw})
    elif case == "two_pickles":
        _archive(p, _tensor("0", 6, 0, (6,), (1,)), {"0": raw})
        with zipfile.ZipFile(p, "a") as z:
            z.writestr("other/data.pkl", b"\x80\x02N.")
    elif case == "truncated":
        _archive(p, _tensor("0", 6, 0, (6,), (1,)), {"0": raw})
        data = p.read_bytes()
        p.write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointError, match=match):
        cddp.load(p)


def test_legacy_torch_pickles_are_still_refused_saying_how_to_convert(tmp_path):
    p = tmp_path / "legacy.pt"
    p.write_bytes(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")    # torch's legacy magic number
    with pytest.raises(CheckpointError, match="legacy pickle format"):
        cddp.load(p)
