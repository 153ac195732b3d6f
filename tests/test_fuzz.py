"""The fuzz targets (tests/fuzz/): their committed corpora replayed on every run — each input
must meet the target's property (fuzz_checkpoint: loads and round-trips, or CheckpointError;
fuzz_store_frames: well-formed replies, no crash) — and, under CI=true, each fuzzer run for a
bounded time with a fixed seed (atheris: an optional test dependency; skipped with the reason
when it is missing)."""
import importlib.util
import os
import signal
import subprocess
import sys

import pytest

from conftest import CDDP_PATH, subprocess_env

FUZZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz")
TARGETS = ["checkpoint", "store"]
SCRIPTS = {"checkpoint": "fuzz_checkpoint.py", "store": "fuzz_store_frames.py"}
FUZZ_SECONDS = 15
# libFuzzer's per-input timeout. atheris arms a periodic SIGALRM every TIMEOUT/2 + 1 seconds
# from the first input on; at 20 s that was 11 s, inside the 15 s run, and one CI run died of
# that SIGALRM (rc -14, no "ALARM" or traceback printed). At 60 s no alarm fires during a
# bounded run, a unit stuck for a minute is still reported as a timeout, and the subprocess
# timeout below is the backstop for a hang anywhere else.
UNIT_TIMEOUT = 60


def _target(name):
    path = os.path.join(FUZZ, SCRIPTS[name])
    spec = importlib.util.spec_from_file_location(f"_fuzz_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _corpus(name):
    d = os.path.join(FUZZ, "corpus", name)
    return sorted(os.path.join(d, f) for f in os.listdir(d))


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_replays_clean(name):
    files = _corpus(name)
    assert len(files) >= 20, f"the {name} corpus is missing (python tests/fuzz/make_corpus.py)"
    one_input = _target(name).one_input
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        try:
            one_input(data)
        except Exception as e:  # noqa: BLE001 — reported with the input that caused it
            pytest.fail(f"{os.path.relpath(f, FUZZ)}: {type(e).__name__}: {e}")


def test_store_feed_hook_sees_what_a_client_sees():
    """The hook itself: a HELLO, a SET and a GET give three replies; a bad frame closes."""
    import struct
    from cddp import _C

    def frame(op, payload):
        return struct.pack("<IB", 1 + len(payload), op) + payload

    hello = frame(1, struct.pack("<II", 0x54534443, 1))
    s = lambda b: struct.pack("<I", len(b)) + b          # noqa: E731
    ok = hello + frame(2, s(b"k") + b"v") + frame(3, struct.pack("<Q", 0) + s(b"k"))
    for step in (0, 1, 3):
        assert _C._store_feed(ok, step) == (3, len(ok), 0)
    assert _C._store_feed(hello + frame(99, b""), 0)[2] == 1          # unknown op: dropped
    assert _C._store_feed(frame(2, s(b"k") + b"v"), 0) == (0, 11, 1)  # no HELLO first
    assert _C._store_feed(hello, 0, b"secret")[0] == 1                # refused, answered


@pytest.mark.slow
@pytest.mark.skipif(not (os.environ.get("CI") == "true" or os.environ.get("CDDP_SLOW_TESTS") == "1"),
                    reason="slow: runs when CDDP_SLOW_TESTS=1 or CI=true")
@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_for_a_bounded_time(name, tmp_path):
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed (pip install atheris): the fuzzers cannot run")
    new = tmp_path / "new"
    new.mkdir()
    cmd = [sys.executable, os.path.join(FUZZ, SCRIPTS[name]), "-seed=1",
           f"-max_total_time={FUZZ_SECONDS}", f"-timeout={UNIT_TIMEOUT}", "-rss_limit_mb=3072",
           "-max_len=4096", "-print_final_stats=1", f"-artifact_prefix={tmp_path}/"]
    if os.path.exists(os.path.join(FUZZ, f"{name}.dict")):
        cmd.append(f"-dict={os.path.join(FUZZ, f'{name}.dict')}")
    cmd += [str(new), os.path.join(FUZZ, "corpus", name)]   # new inputs go to the first
    out = subprocess.run(cmd, capture_output=True, text=True,
                         timeout=FUZZ_SECONDS + 2 * UNIT_TIMEOUT + 30,
                         env=subprocess_env(PYTHONPATH=CDDP_PATH), cwd=str(tmp_path))
    crashes = [f for f in os.listdir(tmp_path) if f.startswith(("crash-", "timeout-", "oom-"))]
    how = (f"killed by {signal.Signals(-out.returncode).name}" if out.returncode < 0
           else f"exit status {out.returncode}")
    assert out.returncode == 0 and not crashes, \
        f"fuzzer found {crashes}, {how} (inputs in {tmp_path}):\nstdout: " \
        f"{out.stdout[-1500:]}\nstderr: {out.stderr[-4000:]}"
    runs = [l for l in out.stderr.splitlines() if "stat::number_of_executed_units" in l]
    print(f"\n[{name}] {runs[-1].split(':')[-1].strip() if runs else '?'} inputs in "
          f"{FUZZ_SECONDS} s")
