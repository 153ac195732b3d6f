"""cddp.multiprocessing.spawn under faults the sixteenth session's fault-injection sweep
tried: the parent SIGTERMed or SIGKILLed while children shut down badly (no error file may be
left in the temporary directory, no child may survive), and a stopped (SIGSTOP) child when a
sibling fails (stopped by SIGTERM + SIGCONT at once, not after the 30 s grace period).

Oracles: the temporary directory's listing before and after, /proc (which pids still live),
and wall-clock bounds far below the grace period.
"""
import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from test_spawn import _env, _pids, _wait_marks, alive, piddir, wait_dead  # noqa: F401

CHILD = textwrap.dedent('''
    import os, sys, time
    sys.path.insert(0, {tests!r})
    import cddp.multiprocessing as mp

    def work(rank, piddir):
        open(os.path.join(piddir, f"pid-{{os.getpid()}}"), "w").close()
        try:
            while True:
                time.sleep(0.01)
        except KeyboardInterrupt:          # shutdown code that fails while Ctrl-C unwinds
            raise RuntimeError(f"rank {{rank}}: cleanup after Ctrl-C failed")

    if __name__ == "__main__":
        mp.spawn(work, args=(sys.argv[1],), nprocs=2)
''')


def _errorfiles():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "cddp-errorfile-*")))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_parent_leaves_no_error_file_and_no_child(tmp_path, piddir, sig):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=os.path.dirname(__file__)))
    before = _errorfiles()
    p = subprocess.Popen([sys.executable, str(script), str(piddir)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        _wait_marks(piddir, 2, timeout=30)
        assert len(_pids(piddir)) == 2
        t0 = time.monotonic()
        p.send_signal(sig)
        p.wait(timeout=30)
        assert wait_dead(_pids(piddir), timeout=10) == []
        assert time.monotonic() - t0 < 10
        if sig == signal.SIGTERM:
            assert p.returncode == 143, p.stderr.read()
        time.sleep(0.2)
        assert _errorfiles() - before == set()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _fn_fail_after_sibling_stops(i, piddir):
    open(os.path.join(piddir, f"pid-{os.getpid()}"), "w").close()
    if i == 1:
        _wait_marks(piddir, 2)
        time.sleep(0.3)
        raise ValueError("rank 1 failed")
    time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGSTOP)   # rank 0 hangs, stopped
    time.sleep(60)


def test_stopped_child_is_stopped_without_the_grace_period(piddir):
    import cddp.multiprocessing as mp
    t0 = time.monotonic()
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed"):
        mp.spawn(_fn_fail_after_sibling_stops, args=(str(piddir),), nprocs=2)
    assert time.monotonic() - t0 < 15              # the grace period alone is 30 s
    assert wait_dead(_pids(piddir)) == []
