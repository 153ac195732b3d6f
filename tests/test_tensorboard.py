"""cddp.utils.tensorboard.SummaryWriter: what it writes is read back by TensorBoard's own event
reader (EventAccumulator), and matches what torch's SummaryWriter writes for the same calls."""
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

import cddp
from conftest import subprocess_env

tb = pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from cddp.utils.tensorboard import SummaryWriter  # noqa: E402


def read(path):
    ea = EventAccumulator(str(path), size_guidance={"tensors": 0, "scalars": 0,
                                                    "histograms": 0, "images": 0})
    ea.Reload()
    return ea


def test_scalar_curve_reads_back(tmp_path):
    losses = [2.5, 1.75, 1.25, 0.875, 0.5]
    with SummaryWriter(log_dir=tmp_path) as w:
        for step, loss in enumerate(losses):
            w.add_scalar("loss", cddp.tensor(loss), step)        # a tensor, as training code does
        w.add_scalar("lr", 0.1, 0)
    ea = read(tmp_path)
    assert sorted(ea.Tags()["scalars"]) == ["loss", "lr"]
    got = ea.Scalars("loss")
    assert [e.step for e in got] == list(range(5))
    assert [e.value for e in got] == losses                       # exact in float32
    with pytest.raises(AssertionError, match="one element"):
        SummaryWriter(tmp_path / "x").add_scalar("bad", cddp.ones(3), 0)


def test_add_scalars_writes_one_run_per_tag(tmp_path):
    w = SummaryWriter(log_dir=tmp_path)
    for i in range(3):
        w.add_scalars("run/14h", {"a": i * 1.0, "b": -i * 2.0}, i)
    w.close()
    runs = sorted(os.listdir(tmp_path))
    assert [r for r in runs if not r.startswith("events")] == ["run_14h_a", "run_14h_b"]
    assert [e.value for e in read(tmp_path / "run_14h_b").Scalars("run/14h")] == [0.0, -2.0, -4.0]


def test_histogram_summary(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(10000).astype(np.float32)
    with SummaryWriter(log_dir=tmp_path) as w:
        w.add_histogram("w", cddp.from_numpy(x), 3)
        w.add_histogram("u", x, 4, bins=10)
    ea = read(tmp_path)
    h = ea.Histograms("w")[0]
    assert h.step == 3
    hv = h.histogram_value
    assert hv.num == x.size and hv.min == float(x.min()) and hv.max == float(x.max())
    assert np.isclose(hv.sum, x.astype(np.float64).sum()) and sum(hv.bucket) == x.size
    counts, edges = np.histogram(x.astype(np.float64), bins=10)
    u = ea.Histograms("u")[0].histogram_value
    assert list(u.bucket) == [0] + counts.tolist() and list(u.bucket_limit) == edges.tolist()


def test_text_and_image(tmp_path):
    img = np.zeros((3, 4, 5), np.float32)
    img[0, 1, 2] = 1.0                      # one red pixel at row 1, column 2
    with SummaryWriter(log_dir=tmp_path) as w:
        w.add_text("notes", "hello **world**", 1)
        w.add_image("im", cddp.from_numpy(img), 2)
    ea = read(tmp_path)
    t = ea.Tensors("notes/text_summary")[0]
    assert t.step == 1 and t.tensor_proto.string_val == [b"hello **world**"]
    im = ea.Images("im")[0]
    assert (im.height, im.width, im.step) == (4, 5, 2)
    png = im.encoded_image_string
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # decode our own PNG by hand: IHDR then one IDAT of filter-0 rows
    w_, h_ = struct.unpack(">II", png[16:24])
    idat = png.index(b"IDAT")
    n = struct.unpack(">I", png[idat - 4:idat])[0]
    raw = zlib.decompress(png[idat + 4:idat + 4 + n])
    rows = np.frombuffer(raw, np.uint8).reshape(h_, 1 + w_ * 3)[:, 1:].reshape(h_, w_, 3)
    want = np.zeros((4, 5, 3), np.uint8)
    want[1, 2, 0] = 255
    assert (w_, h_) == (5, 4) and np.array_equal(rows, want)


def test_same_histogram_as_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.tensorboard import SummaryWriter as TorchWriter
    x = np.random.default_rng(1).standard_normal(3000) * 5
    with SummaryWriter(log_dir=tmp_path / "cddp") as w:
        w.add_histogram("h", x, 0)
        w.add_histogram("m", x, 0, bins=50, max_bins=7)
    tw = TorchWriter(log_dir=str(tmp_path / "torch"))
    tw.add_histogram("h", torch.from_numpy(x), 0)
    tw.add_histogram("m", torch.from_numpy(x), 0, bins=50, max_bins=7)
    tw.close()
    a, b = read(tmp_path / "cddp"), read(tmp_path / "torch")
    for tag in ("h", "m"):
        ha, hb = a.Histograms(tag)[0].histogram_value, b.Histograms(tag)[0].histogram_value
        assert list(ha.bucket_limit) == list(hb.bucket_limit)
        assert list(ha.bucket) == list(hb.bucket)
        assert (ha.min, ha.max, ha.num) == (hb.min, hb.max, hb.num)


def test_missing_tensorboard_names_the_package():
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "try:\n    import cddp.utils.tensorboard\n"
            "except ImportError as e:\n    print('IMPORTERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True,
                         text=True, timeout=120)
    assert "IMPORTERROR" in out.stdout, out.stderr
    assert "pip install 'cddp[tensorboard]'" in out.stdout


def _hparams_plugin(run_dir):
    """{tag: HParamsPluginData} and the scalars of one add_hparams run, read back by
    TensorBoard's own reader."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    ea = read(run_dir)
    plugin = {tag: plugin_data_pb2.HParamsPluginData.FromString(content)
              for tag, content in ea.PluginTagToContent("hparams").items()}
    scalars = {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}
    return plugin, scalars


HP = {"lr": 0.01, "bsize": 64, "opt": "adam", "nesterov": True, "skip": None}
DOMAINS = {"opt": ["adam", "sgd"], "bsize": [32, 64]}


def test_add_hparams_run_reads_back(tmp_path):
    with SummaryWriter(log_dir=tmp_path) as w:
        w.add_hparams(dict(HP, t=cddp.tensor([0.5])), {"hparam/acc": 0.75, "hparam/loss": 0.25},
                      hparam_domain_discrete=DOMAINS, run_name="r1", global_step=3)
    plugin, scalars = _hparams_plugin(tmp_path / "r1")
    start = plugin["_hparams_/session_start_info"].session_start_info.hparams
    assert (start["lr"].number_value, start["bsize"].number_value, start["opt"].string_value,
            start["nesterov"].number_value, start["t"].number_value) == (0.01, 64, "adam", 1.0,
                                                                        0.5)
    assert "skip" not in start
    exp = plugin["_hparams_/experiment"].experiment
    assert [h.name for h in exp.hparam_infos] == ["lr", "bsize", "opt", "nesterov", "t"]
    opt = next(h for h in exp.hparam_infos if h.name == "opt")
    assert [v.string_value for v in opt.domain_discrete.values] == ["adam", "sgd"]
    assert [m.name.tag for m in exp.metric_infos] == ["hparam/acc", "hparam/loss"]
    assert plugin["_hparams_/session_end_info"].session_end_info.status == 1   # SUCCESS
    assert scalars == {"hparam/acc": [(3, 0.75)], "hparam/loss": [(3, 0.25)]}
    with pytest.raises(TypeError, match="dictionary"):
        SummaryWriter(tmp_path / "x").add_hparams([("lr", 1)], {})
    with pytest.raises(TypeError, match="same type"):
        SummaryWriter(tmp_path / "y").add_hparams({"lr": 0.1}, {}, {"lr": ["a"]})


def test_add_hparams_same_as_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.tensorboard import SummaryWriter as TorchWriter
    metrics = {"hparam/acc": 0.75}
    with SummaryWriter(log_dir=tmp_path / "cddp") as w:
        w.add_hparams(dict(HP), metrics, hparam_domain_discrete=DOMAINS, run_name="r",
                      global_step=2)
    with TorchWriter(log_dir=str(tmp_path / "torch")) as tw:
        tw.add_hparams(dict(HP), metrics, hparam_domain_discrete=DOMAINS, run_name="r",
                       global_step=2)
    assert _hparams_plugin(tmp_path / "cddp" / "r") == _hparams_plugin(tmp_path / "torch" / "r")
