"""Devices on a machine without a GPU (DESIGN.md, "Devices"): cddp.cuda tells the truth, and
scripts that ask for CUDA run on the CPU after one warning per process, or fail with
CDDP_STRICT_DEVICE=1. Each policy check runs in a fresh subprocess (the warning is per process)."""
import subprocess
import sys
import tempfile

import pytest

import cddp
from conftest import subprocess_env


def test_cuda_module_api():
    assert cddp.cuda.is_available() is False
    assert cddp.cuda.device_count() == 0
    cddp.cuda.set_device(0)
    cddp.cuda.manual_seed(3)
    cddp.cuda.manual_seed_all(3)
    a = cddp.rand(3)
    cddp.manual_seed(3)
    assert cddp.rand(3).tolist() == a.tolist()        # the CPU generator was seeded
    with pytest.raises(TypeError):
        cddp.cuda.set_device([0])
    # CUDA generator state, as torch's CPU-only build answers it: no devices, no states
    state = cddp.get_rng_state()
    cddp.cuda.seed()
    cddp.cuda.seed_all()
    assert cddp.equal(cddp.get_rng_state(), state)     # the CPU stream is untouched
    assert cddp.cuda.get_rng_state_all() == []
    cddp.cuda.set_rng_state_all([])
    with pytest.raises(RuntimeError, match="2 CUDA generator states given"):
        cddp.cuda.set_rng_state_all([state, state])
    for call in (cddp.cuda.get_rng_state, cddp.cuda.initial_seed,
                 lambda: cddp.cuda.set_rng_state(state)):
        with pytest.raises(RuntimeError, match="no CUDA generator"):
            call()
    cddp.backends.cudnn.benchmark = True
    assert cddp.backends.cudnn.benchmark is True


def test_cuda_streams_events_nvtx_and_memory_history(tmp_path):
    import pickle
    import time
    start = cddp.cuda.Event(enable_timing=True)
    end = cddp.cuda.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="must be recorded"):
        start.elapsed_time(end)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert 15 <= start.elapsed_time(end) < 2000          # host milliseconds between records
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        cddp.cuda.Event().elapsed_time(end)
    s = cddp.cuda.Stream()
    with cddp.cuda.stream(s) as got:
        assert got is s
    assert cddp.cuda.current_stream() is cddp.cuda.default_stream()
    assert s.query() and isinstance(s.record_event(), cddp.cuda.Event)
    assert cddp.cuda.nvtx.range_push("a") == 0 and cddp.cuda.nvtx.range_pop() == 0
    with cddp.cuda.nvtx.range("step {}", 3):
        pass
    assert cddp.cuda.is_bf16_supported() is False
    cddp.cuda.memory._record_memory_history(max_entries=100)
    path = tmp_path / "snap.pickle"
    cddp.cuda.memory._dump_snapshot(str(path))
    assert pickle.loads(path.read_bytes()) == {"segments": [], "device_traces": []}
    cddp.cuda.memory._record_memory_history(enabled=None)
    assert cddp.cuda.memory.memory_allocated() == cddp.cuda.memory_allocated()
    assert "allocated" in cddp.cuda.memory_summary()


def test_device_objects():
    d = cddp.device("cuda:1")
    assert d.type == "cuda" and d.index == 1 and str(d) == "cuda:1"
    assert cddp.device("cuda", 0) == cddp.device("cuda:0")
    # never equal to a string, and no error for names cddp does not know (torch's answers)
    assert cddp.device("cuda:0") != "cuda:0" and not (cddp.device("cpu") == "cpu")
    assert cddp.device("cpu") != "npu" and not (cddp.device("cpu") == "xpu")
    assert cddp.device(2) == cddp.device("cuda:2")
    assert str(cddp.device("cpu")) == "cpu" and cddp.zeros(1).device == cddp.device("cpu")
    with pytest.raises(RuntimeError):
        cddp.device("tpu")


PROBE = """
import warnings, cddp, cddp.nn as nn
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    m = nn.Linear(2, 2).cuda()
    m.to("cuda:1")
    m.to(0)
    x = cddp.ones(2, 2).cuda()
    y = x.to(cddp.device("cuda", 0))
    out = m(y)
print(len([i for i in w if "CUDA requested" in str(i.message)]), out.device, m.weight.device)
"""


def test_module_and_tensor_cuda_fall_back_with_one_warning():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=subprocess_env(), cwd=tempfile.gettempdir(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "cpu", "cpu"]


def test_strict_device_raises():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=subprocess_env(CDDP_STRICT_DEVICE=1), cwd=tempfile.gettempdir(),
                       timeout=60)
    assert r.returncode != 0 and "CUDA" in r.stderr and "RuntimeError" in r.stderr
