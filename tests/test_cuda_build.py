"""The CUDA extension without a GPU (issue 11, deliverables 1 and the CPU-testable part of 2):
cddp._cuda is built when nvcc is present, imports silently and reports no device; the loader of
cuBLAS/NCCL searches its override, the NVIDIA wheels' folders and the system in that order and
names what it searched when nothing is found (checked with fake libraries compiled here); the
caching allocator's logic (size classes, per-stream reuse, record_stream, empty_cache, stats,
OOM retry and message) runs over a fake host device and is checked against a Python model."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import cddp
from conftest import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nvcc_path():
    for cand in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand):
            return cand
    return None


@pytest.fixture(scope="module")
def ext():
    if cddp.version.cuda is None:
        pytest.skip("cddp._cuda not built (no nvcc at build time, or CDDP_CUDA=0)")
    from cddp import _cuda
    return _cuda


# ---- the build -------------------------------------------------------------------------------

def test_extension_built_when_nvcc_present():
    nvcc = nvcc_path()
    if nvcc is None or os.environ.get("CDDP_CUDA") == "0":
        assert cddp.version.cuda is None or nvcc is not None
        pytest.skip("no nvcc here: the CPU-only build is what is expected")
    assert cddp.version.cuda is not None, "nvcc is present but cddp._cuda was not built"
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    release = re.search(r"release (\d+\.\d+)", out).group(1)
    assert cddp.version.cuda == release                  # built by this toolkit
    for arch in ("code=sm_80", "code=sm_90", "code=compute_90"):   # both SASS targets + PTX
        assert arch in cddp.version.cuda_archs


def test_setup_cuda_switch():
    # CDDP_CUDA=1 fails loudly when nvcc is missing; CDDP_CUDA=0 builds the CPU package only
    env = subprocess_env(CDDP_CUDA="1", CUDACXX="/nonexistent/nvcc")
    r = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "CDDP_CUDA=1 but nvcc was not found" in r.stderr
    no_nvcc = subprocess_env(CUDACXX="/nonexistent/nvcc")
    no_nvcc.pop("CDDP_CUDA", None)
    for env in (subprocess_env(CDDP_CUDA="0"), no_nvcc):
        # forced off, or left to the build on a machine without nvcc: the CPU package builds
        r = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "nvcc not used" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=subprocess_env(CDDP_CUDA="yes"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "CDDP_CUDA must be 0 or 1" in r.stderr


def test_import_silent_and_no_device(ext):
    code = ("import cddp, cddp.cuda as c; from cddp import _cuda;"
            "print(c.is_available(), c.device_count(), _cuda.device_count(), c.memory_allocated())")
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], env=subprocess_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    gpus = ext.device_count()
    assert r.stdout.split() == ["False", "0", str(gpus), "0"]
    if gpus == 0:
        assert ext._build_info()["device_count_error"] != 0   # cudaGetDeviceCount failed -> 0
    assert issubclass(cddp.cuda.OutOfMemoryError, RuntimeError)
    assert cddp.cuda.max_memory_allocated() == 0 and cddp.cuda.memory_reserved() == 0
    cddp.cuda.empty_cache()
    cddp.cuda.reset_peak_memory_stats()


# ---- the library loader ----------------------------------------------------------------------

NCCL_SYMS = ["ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort",
             "ncclCommGetAsyncError", "ncclGetErrorString", "ncclCommCount", "ncclCommUserRank",
             "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
             "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"]


def fake_nccl(path, version, skip=()):
    """Compile a library exporting NCCL's symbol names; ncclGetVersion reports `version`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    src = path + ".c"
    body = [f"int {s}(void) {{ return 0; }}" for s in NCCL_SYMS if s not in skip]
    body.append(f"int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}")
    with open(src, "w") as f:
        f.write("\n".join(body) + "\n")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-o", path, src], check=True, timeout=120)
    os.remove(src)
    return path


@pytest.fixture(scope="module")
def libs(tmp_path_factory, ext):
    if not (shutil.which(os.environ.get("CC", "cc"))):
        pytest.skip("no C compiler to build fake libraries")
    root = tmp_path_factory.mktemp("libs")
    d = {
        "site1": str(root / "site1"), "site2": str(root / "site2"), "env": str(root / "env"),
        "empty": str(root / "empty"), "broken": str(root / "broken"),
    }
    fake_nccl(os.path.join(d["site1"], "nvidia/nccl/lib/libnccl.so.2"), 23203)
    fake_nccl(os.path.join(d["site2"], "nvidia/nccl/lib/libnccl.so.2"), 22905)
    fake_nccl(os.path.join(d["env"], "libnccl.so.2"), 22704)
    fake_nccl(os.path.join(d["broken"], "nvidia/nccl/lib/libnccl.so.2"), 23000, skip=("ncclAllReduce",))
    os.makedirs(d["empty"])
    with open(os.path.join(d["empty"], "not-a-lib.so"), "w") as f:
        f.write("text\n")
    return d


def probe(ext, dirs):
    return ext._probe_library("nccl", list(dirs))


def test_loader_wheel_dirs_in_sys_path_order(ext, libs, monkeypatch):
    monkeypatch.delenv("CDDP_NCCL_LIB", raising=False)
    r = probe(ext, [libs["empty"], libs["site1"], libs["site2"]])
    assert r["path"] == os.path.join(libs["site1"], "nvidia/nccl/lib/libnccl.so.2")
    assert r["version"] == "2.32.3"                        # ncclGetVersion's 23203 decoded
    r = probe(ext, [libs["site2"], libs["site1"]])
    assert r["path"].startswith(libs["site2"]) and r["version"] == "2.29.5"


def test_loader_skips_library_lacking_symbols(ext, libs, monkeypatch):
    monkeypatch.delenv("CDDP_NCCL_LIB", raising=False)
    r = probe(ext, [libs["broken"], libs["site2"]])
    assert r["path"].startswith(libs["site2"])
    assert "lacks ncclAllReduce" in r["report"]


def test_loader_env_override_wins(ext, libs, monkeypatch):
    monkeypatch.setenv("CDDP_NCCL_LIB", libs["env"])                 # a directory
    r = probe(ext, [libs["site1"]])
    assert r["path"] == os.path.join(libs["env"], "libnccl.so.2") and r["version"] == "2.27.4"
    monkeypatch.setenv("CDDP_NCCL_LIB", os.path.join(libs["site2"], "nvidia/nccl/lib/libnccl.so.2"))
    assert probe(ext, [libs["site1"]])["version"] == "2.29.5"          # a file


def test_loader_bad_override_is_an_error(ext, libs, monkeypatch):
    # authoritative: a bad override is reported, never silently replaced by another copy
    monkeypatch.setenv("CDDP_NCCL_LIB", "/nonexistent/libnccl.so.2")
    with pytest.raises(RuntimeError, match=r"CDDP_NCCL_LIB=/nonexistent/libnccl.so.2: no such file"):
        probe(ext, [libs["site1"]])
    monkeypatch.setenv("CDDP_NCCL_LIB", os.path.join(libs["empty"], "not-a-lib.so"))
    with pytest.raises(RuntimeError, match="is not a usable NCCL library"):
        probe(ext, [libs["site1"]])
    monkeypatch.setenv("CDDP_NCCL_LIB", libs["empty"])
    with pytest.raises(RuntimeError, match="no usable NCCL in that directory"):
        probe(ext, [libs["site1"]])


def test_loader_missing_names_what_it_searched(ext, libs, monkeypatch):
    monkeypatch.delenv("CDDP_NCCL_LIB", raising=False)
    try:
        r = probe(ext, [libs["empty"]])
        pytest.skip(f"this machine has a system NCCL ({r['path']})")
    except RuntimeError as e:
        msg = str(e)
    assert msg.startswith("NCCL not found: pip install 'cddp[cuda]'")
    for part in ("CDDP_NCCL_LIB unset", "nvidia/nccl/lib", "under 1 sys.path entries", "libnccl.so.2"):
        assert part in msg
    with pytest.raises(ValueError, match="unknown library 'cudnn'"):
        ext._probe_library("cudnn", [])
    with pytest.raises(TypeError):
        ext._probe_library("nccl", "not a list")


def test_load_library_registry(ext, libs):
    # the process-wide registry: loaded once, then reported by _library_status. In a child
    # process, so this process's registry never holds a fake library
    code = ("import sys, cddp; from cddp import _cuda; sys.path.insert(0, sys.argv[1]);"
            "assert _cuda._library_status('nccl') is None;"
            "first = cddp.cuda._load_library('nccl'); print(*first);"
            "assert cddp.cuda._load_library('nccl') == first == _cuda._library_status('nccl');"
            "assert _cuda._library_status('cublas') is None")
    r = subprocess.run([sys.executable, "-c", code, libs["site1"]], capture_output=True, text=True,
                       env=subprocess_env(CDDP_NCCL_LIB=libs["env"]), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [os.path.join(libs["env"], "libnccl.so.2"), "2.27.4"]   # the override won


# ---- the caching allocator over a fake device --------------------------------------------------

KiB, MiB = 1024, 1 << 20


def test_size_classes(ext):
    cases = {0: 0, 1: 512, 512: 512, 513: 1024, MiB - 1: MiB, MiB: MiB, MiB + 1: 2 * MiB,
             3 * MiB: 4 * MiB, 4 * MiB: 4 * MiB}
    for n, want in cases.items():
        assert ext._alloc_round(n) == want, n
    assert ext._alloc_round(2 ** 64 - 1) == 0            # would overflow: no class


def test_reuse_per_stream_and_stats(ext):
    a = ext._fake_allocator(64 * MiB)
    p = ext._fa_malloc(a, 1000, 0)
    s = ext._fa_stats(a)
    assert (s["allocated"], s["requested"], s["reserved"], s["n_raw_alloc"]) == (1024, 1000, 1024, 1)
    ext._fa_free(a, p)
    assert ext._fa_stats(a)["allocated"] == 0 and ext._fa_stats(a)["reserved"] == 1024   # cached
    assert ext._fa_malloc(a, 900, 0) == p                # same class, same stream: reused
    q = ext._fa_malloc(a, 1000, 5)                      # another stream: never that block
    assert q != p
    s = ext._fa_stats(a)
    assert s["n_cache_hits"] == 1 and s["n_raw_alloc"] == 2 and s["peak_allocated"] == 2048
    ext._fa_free(a, p)
    ext._fa_free(a, q)
    assert ext._fa_malloc(a, 1000, 5) == q and ext._fa_malloc(a, 2000, 5) not in (p, q)
    ext._fa_reset_peak(a)
    s = ext._fa_stats(a)
    assert s["peak_allocated"] == s["allocated"] == 1024 + 2048
    assert ext._fa_malloc(a, 0, 0) == 0 and ext._fa_stats(a)["n_raw_alloc"] == 3   # size 0: nothing


def test_empty_cache_keeps_live_blocks(ext):
    a = ext._fake_allocator(64 * MiB)
    live = ext._fa_malloc(a, 3 * MiB, 0)
    for _ in range(3):
        ext._fa_free(a, ext._fa_malloc(a, 5000, 0))
    ext._fa_free(a, ext._fa_malloc(a, 2 * MiB, 0))
    s = ext._fa_stats(a)
    assert s["reserved"] == 4 * MiB + 5120 + 2 * MiB == s["held"]
    ext._fa_empty_cache(a)
    s = ext._fa_stats(a)
    assert s["reserved"] == s["held"] == s["allocated"] == 4 * MiB and s["n_sync"] == 1
    assert s["peak_reserved"] == 6 * MiB + 5120
    ext._fa_free(a, live)
    ext._fa_empty_cache(a)
    assert ext._fa_stats(a)["held"] == 0


def test_record_stream_delays_reuse(ext):
    a = ext._fake_allocator(64 * MiB)
    p = ext._fa_malloc(a, 4096, 0)
    ext._fa_record_stream(a, p, 7)
    ext._fa_record_stream(a, p, 7)                    # twice: one event
    ext._fa_record_stream(a, p, 0)                    # its own stream: nothing to wait for
    ext._fa_free(a, p)
    assert ext._fa_stats(a)["n_pending"] == 1
    q = ext._fa_malloc(a, 4096, 0)                    # stream 7 may still use p
    assert q != p
    ext._fa_complete(a, 3)                            # another stream's work: still pending
    assert ext._fa_malloc(a, 4096, 0) not in (p, q)
    ext._fa_complete(a, 7)
    assert ext._fa_malloc(a, 4096, 0) == p            # stream 7 finished: p is reusable
    r = ext._fa_malloc(a, 512, 0)
    ext._fa_record_stream(a, r, 9)
    ext._fa_free(a, r)
    ext._fa_empty_cache(a)                            # synchronizes: the pending block goes too
    s = ext._fa_stats(a)
    assert s["n_pending"] == 0 and s["held"] == s["allocated"] == 3 * 4096


def test_oom_frees_cache_and_retries(ext):
    a = ext._fake_allocator(8 * KiB)
    p = ext._fa_malloc(a, 4 * KiB, 0)
    ext._fa_free(a, p)                                 # 4 KiB cached
    q = ext._fa_malloc(a, 6 * KiB, 0)                 # 4 + 6 > 8: release the cache, retry
    s = ext._fa_stats(a)
    assert q != 0 and s["n_oom_retries"] == 1 and s["n_sync"] == 1 and s["reserved"] == 6 * KiB
    ext._fa_fail_next(a, 1)                            # an injected failure: the retry succeeds
    r = ext._fa_malloc(a, 1 * KiB, 0)
    assert r != 0 and ext._fa_stats(a)["n_oom_retries"] == 2


def test_oom_error_names_the_size(ext):
    a = ext._fake_allocator(8 * KiB)
    keep = ext._fa_malloc(a, 3 * KiB, 0)
    with pytest.raises(cddp.cuda.OutOfMemoryError,
                       match=r"CUDA out of memory. Tried to allocate 20.00 KiB \(20480 bytes, size "
                             r"class 20480\) on device 0; 3.00 KiB is allocated by cddp") as e:
        ext._fa_malloc(a, 20 * KiB, 0)
    assert isinstance(e.value, RuntimeError)
    ext._fa_fail_next(a, 2)                            # fails twice: the retry fails too
    with pytest.raises(cddp.cuda.OutOfMemoryError, match="injected out-of-memory"):
        ext._fa_malloc(a, 512, 0)
    s = ext._fa_stats(a)
    assert s["n_ooms"] == 2 and s["allocated"] == 3 * KiB
    ext._fa_free(a, keep)                              # the allocator is still consistent
    assert ext._fa_malloc(a, 8 * KiB, 0) != 0


def test_bad_pointers_raise(ext):
    a = ext._fake_allocator(MiB)
    p = ext._fa_malloc(a, 100, 0)
    ext._fa_free(a, p)
    with pytest.raises(ValueError, match="not a live block"):
        ext._fa_free(a, p)                             # double free: reported, cache intact
    with pytest.raises(ValueError, match="record_stream of"):
        ext._fa_record_stream(a, p, 3)
    with pytest.raises(ValueError):
        ext._fa_malloc(a, -1, 0)
    ext._fa_free(a, 0)                                 # NULL: nothing
    assert ext._fa_malloc(a, 100, 0) == p and ext._fa_stats(a)["n_raw_alloc"] == 1


def test_random_ops_match_a_model(ext):
    # random malloc / free / record_stream / complete / empty_cache against a Python model of
    # the invariants: live pointers are distinct, allocated = sum of live classes, reserved =
    # what the fake device holds, and a freed block is only reused on its stream once no
    # recorded stream may still use it
    rng = np.random.default_rng(11)
    a = ext._fake_allocator(48 * MiB)
    live = {}          # ptr -> (class, stream, recorded streams)
    cached = {}        # ptr -> (class, stream) of freed blocks still held by the allocator
    blocked = {}       # ptr -> streams still to complete before reuse
    for step in range(1500):
        op = rng.integers(0, 10)
        if op < 4 or not live:
            size = int(rng.choice([1, 100, 512, 513, 4000, 70000, MiB + 1, 3 * MiB]))
            stream = int(rng.integers(0, 3))
            retries = ext._fa_stats(a)["n_oom_retries"]
            try:
                p = ext._fa_malloc(a, size, stream)
            except cddp.cuda.OutOfMemoryError:
                p = None
            if ext._fa_stats(a)["n_oom_retries"] != retries:   # the cache was released
                cached.clear()
                blocked.clear()
            if p is None:
                continue
            assert p not in live
            if p in cached:                                      # a reuse
                assert cached.pop(p) == (ext._alloc_round(size), stream)
                assert not blocked.get(p), f"step {step}: reused while stream(s) {blocked[p]} may use it"
            live[p] = (ext._alloc_round(size), stream, set())
        elif op < 7:
            p = list(live)[int(rng.integers(0, len(live)))]
            cls, stream, rec = live.pop(p)
            ext._fa_free(a, p)
            cached[p] = (cls, stream)
            blocked[p] = set(rec)
        elif op < 8:
            p = list(live)[int(rng.integers(0, len(live)))]
            s = int(rng.integers(0, 4))
            ext._fa_record_stream(a, p, s)
            if s != live[p][1]:
                live[p][2].add(s)
        elif op < 9:
            s = int(rng.integers(0, 4))
            ext._fa_complete(a, s)
            for p in blocked:
                blocked[p].discard(s)
        else:
            ext._fa_empty_cache(a)
            cached.clear()
            blocked.clear()
        st = ext._fa_stats(a)
        assert st["allocated"] == sum(c for c, _, _ in live.values())
        assert st["reserved"] == st["held"] >= st["allocated"]
        assert st["peak_allocated"] >= st["allocated"] and st["peak_reserved"] >= st["reserved"]
