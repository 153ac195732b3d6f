"""What porting pytorch/examples turned up (dcgan, super_resolution, vision_transformer):
cddp.hub (weights by URL into torch's cache, atomic downloads, hash checks, local hubconf),
torch's module paths for layer classes (nn.modules.pixelshuffle / flatten / utils), and the
other backends' Tensor flags scripts test."""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import cddp
from conftest import n, subprocess_env


def saved(tmp_path, name="weights"):
    """A state dict saved under <name>-<first 8 hex of its SHA-256>.pt, as hub files are."""
    sd = {"fc.weight": cddp.arange(6.).reshape(2, 3), "fc.bias": cddp.tensor([1.0, -1.0])}
    raw = tmp_path / "raw.pt"
    cddp.save(sd, raw)
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    path = tmp_path / f"{name}-{digest[:8]}.pt"
    raw.rename(path)
    return sd, path, digest


def test_load_state_dict_from_url_caches_and_checks_the_hash(tmp_path, monkeypatch):
    sd, path, _ = saved(tmp_path)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cddp.hub, "_hub_dir", None)
    assert cddp.hub.get_dir() == str(tmp_path / "home" / "hub")
    got = cddp.hub.load_state_dict_from_url(path.as_uri(), check_hash=True, progress=False)
    cached = tmp_path / "home" / "hub" / "checkpoints" / path.name
    assert cached.read_bytes() == path.read_bytes()
    for k in sd:
        np.testing.assert_array_equal(n(got[k]), n(sd[k]))
    path.unlink()                       # the second call reads the cache, not the URL
    again = cddp.hub.load_state_dict_from_url(path.as_uri(), progress=False)
    np.testing.assert_array_equal(n(again["fc.bias"]), [1.0, -1.0])
    cddp.hub.set_dir(tmp_path / "other")
    assert cddp.hub.get_dir() == str(tmp_path / "other")


def test_download_with_a_wrong_hash_leaves_nothing(tmp_path):
    _, path, digest = saved(tmp_path)
    dst = tmp_path / "dl" / "copy.pt"
    dst.parent.mkdir()
    with pytest.raises(RuntimeError, match=f'invalid hash value \\(expected "deadbeef", got '
                                           f'"{digest}"\\)'):
        cddp.hub.download_url_to_file(path.as_uri(), str(dst), hash_prefix="deadbeef",
                                      progress=False)
    assert os.listdir(dst.parent) == []                     # no file, no temporary
    dst.write_bytes(b"previous")                            # an earlier good file survives
    with pytest.raises(RuntimeError, match="invalid hash value"):
        cddp.hub.download_url_to_file(path.as_uri(), str(dst), hash_prefix="0" * 8,
                                      progress=False)
    assert dst.read_bytes() == b"previous" and os.listdir(dst.parent) == ["copy.pt"]
    cddp.hub.download_url_to_file(path.as_uri(), str(dst), hash_prefix=digest[:10],
                                  progress=False)
    assert dst.read_bytes() == path.read_bytes()
    with pytest.raises(OSError):                            # a missing URL: nothing written
        cddp.hub.download_url_to_file((tmp_path / "absent.pt").as_uri(), str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_torch_checkpoint_through_the_hub(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(cddp.hub, "_hub_dir", str(tmp_path / "hub"))
    w = torch.randn(3, 4)
    torch.save({"w": w}, tmp_path / "t.pth")
    got = cddp.hub.load_state_dict_from_url((tmp_path / "t.pth").as_uri(), progress=False,
                                            map_location="cpu")
    np.testing.assert_array_equal(n(got["w"]), w.numpy())


HUBCONF = '''
dependencies = []
from helper_mod import WIDTH
import cddp


def tiny(out_features=2):
    """A tiny linear model."""
    return cddp.nn.Linear(WIDTH, out_features)


_private = 1
'''


def test_local_hubconf(tmp_path):
    (tmp_path / "hubconf.py").write_text(HUBCONF)
    (tmp_path / "helper_mod.py").write_text("WIDTH = 5\n")
    assert cddp.hub.list(str(tmp_path), source="local") == ["tiny"]
    assert cddp.hub.help(str(tmp_path), "tiny", source="local").strip() == "A tiny linear model."
    m = cddp.hub.load(str(tmp_path), "tiny", out_features=3, source="local")
    assert isinstance(m, cddp.nn.Linear) and tuple(m.weight.shape) == (3, 5)
    with pytest.raises(RuntimeError, match="Cannot find callable nope in hubconf"):
        cddp.hub.load(str(tmp_path), "nope", source="local")
    with pytest.raises(NotImplementedError, match="source='local'"):
        cddp.hub.load("owner/repo", "tiny")
    with pytest.raises(ValueError, match="Unknown source"):
        cddp.hub.load(str(tmp_path), "tiny", source="ftp")
    with pytest.raises(FileNotFoundError):
        cddp.hub.load(str(tmp_path / "nowhere"), "tiny", source="local")


def test_hub_tqdm_and_attribute():
    code = ("import cddp\n"
            "from cddp.hub import tqdm\n"
            "assert list(tqdm([1, 2, 3], disable=True)) == [1, 2, 3]\n"
            "with tqdm(total=4, disable=True) as bar:\n"
            "    bar.update(4)\n"
            "assert cddp.hub.get_dir().endswith('hub')\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=subprocess_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_torch_module_paths_of_layer_classes():
    code = ("import cddp as torch\n"           # attributes, as super_resolve.py reaches them
            "m = torch.nn.modules\n"
            "assert m.pixelshuffle.PixelShuffle is torch.nn.PixelShuffle\n"
            "assert m.pixelshuffle.PixelUnshuffle is torch.nn.PixelUnshuffle\n"
            "assert m.flatten.Flatten is torch.nn.Flatten\n"
            "assert m.flatten.Unflatten is torch.nn.Unflatten\n"
            "assert m.utils._pair(2) == (2, 2)\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=subprocess_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    from cddp.nn.modules import utils
    assert utils._pair(3) == (3, 3) and utils._triple((1, 2, 3)) == (1, 2, 3)
    assert utils._single(4) == (4,) and utils._quadruple(0) == (0, 0, 0, 0)
    assert utils._reverse_repeat_tuple((1, 2), 2) == (2, 2, 1, 1)
    assert utils._list_with_default([None, 4], [8, 3, 7, 9]) == [7, 4]


def test_consume_prefix_in_state_dict_if_present():
    from collections import OrderedDict
    from cddp.nn.modules.utils import consume_prefix_in_state_dict_if_present
    model = cddp.nn.Sequential(cddp.nn.Linear(2, 2))
    wrapped = cddp.nn.Sequential(OrderedDict(module=model))
    sd = wrapped.state_dict()
    assert list(sd) == ["module.0.weight", "module.0.bias"]
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert list(sd) == ["0.weight", "0.bias"]
    if hasattr(sd, "_metadata"):
        assert "module" not in sd._metadata and "module.0" not in sd._metadata
    fresh = cddp.nn.Sequential(cddp.nn.Linear(2, 2))
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(n(fresh[0].weight), n(model[0].weight))
    other = {"a.w": 1, "b": 2}
    consume_prefix_in_state_dict_if_present(other, "module.")  # nothing to strip
    assert other == {"a.w": 1, "b": 2}


def test_other_backend_flags_and_is_set_to():
    x = cddp.zeros(4)
    for flag in ("is_xpu", "is_mps", "is_meta", "is_xla", "is_ipu", "is_mtia", "is_maia",
                 "is_vulkan", "is_mkldnn", "is_quantized", "is_nested", "is_sparse_csr",
                 "is_sparse", "is_cuda"):
        assert getattr(x, flag) is False, flag
    assert x.is_cpu and x.is_distributed() is False
    assert x.is_set_to(x) and x.is_set_to(x.view(4))
    assert not x.is_set_to(x.clone()) and not x.is_set_to(x[1:]) and not x.is_set_to(x[:2])
    assert not x.is_set_to(x.view(2, 2))
    assert x.is_coalesced() and x.coalesce() is x     # dense stand-ins (cddp/sparse.py)
