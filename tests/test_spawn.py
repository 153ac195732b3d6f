"""cddp.multiprocessing.spawn / start_processes (torch.multiprocessing's) and
cddp.distributed.notebook.notebook_launch (functions defined in a notebook or `python -c`).
Every child records its pid; the tests check that none survives a failure."""
import os
import re
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import cddp.multiprocessing as mp
from cddp.multiprocessing import ProcessExitedException, ProcessRaisedException

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
TIMEOUT = 60


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def wait_dead(pids, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def _pids(d):
    return [int(f.split("-")[1]) for f in os.listdir(d) if f.startswith("pid-")]


@pytest.fixture
def piddir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    yield d
    for pid in _pids(d):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    for k in ("CDDP_TOKEN", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        env.pop(k, None)
    return env


def run_python(code, cwd, timeout=TIMEOUT, path=None):
    """Run `code` as a script file (path given) or through `python -c` (non-file __main__)."""
    code = textwrap.dedent(code)
    if path is not None:
        Path(path).write_text(code)
        argv = [PY, str(path)]
    else:
        argv = [PY, "-c", code]
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


# --- child functions (module level: spawn pickles them by reference) ---------------------------

def _mark(piddir):
    open(os.path.join(piddir, f"pid-{os.getpid()}"), "w").close()


def _wait_marks(piddir, n, timeout=10):
    end = time.time() + timeout
    while time.time() < end and len(_pids(piddir)) < n:
        time.sleep(0.01)


def _fn_raise(i, piddir):
    _mark(piddir)
    if i == 1:
        _wait_marks(piddir, 2)
        raise ValueError(f"bad index {i}")
    time.sleep(60)                     # must be terminated by the parent


def _fn_exit(i, how):
    if i == 1:
        if how == "exit7":
            os._exit(7)
        os.kill(os.getpid(), signal.SIGKILL)


def _fn_sleep(i, secs):
    time.sleep(secs)


# --- spawn ------------------------------------------------------------------------------------

def test_spawn_from_script_main(tmp_path):
    # the seed scripts' pattern: fn defined in the script's __main__, spawn under __main__ guard
    out = tmp_path / "out"
    r = run_python(f"""
        import os
        import cddp.multiprocessing as mp

        def work(rank, world, tag):
            with open(os.path.join({str(out)!r}, str(rank)), "w") as f:
                f.write(f"{{rank}}/{{world}} {{tag}}")

        if __name__ == "__main__":
            os.mkdir({str(out)!r})
            assert mp.spawn(work, args=(3, "ok"), nprocs=3, join=True) is None
            print("joined")
        """, tmp_path, path=tmp_path / "script.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "joined"
    assert sorted(p.read_text() for p in out.iterdir()) == [f"{i}/3 ok" for i in range(3)]


def _errorfiles():
    import tempfile
    return {f for f in os.listdir(tempfile.gettempdir()) if f.startswith("cddp-errorfile-")}


def test_raised_exception_carries_child_traceback(piddir):
    before = _errorfiles()
    t0 = time.monotonic()
    with pytest.raises(ProcessRaisedException) as ei:
        mp.spawn(_fn_raise, args=(str(piddir),), nprocs=2)
    e = ei.value
    assert e.error_index == 1 and isinstance(e.error_pid, int)
    msg = str(e)
    assert "-- Process 1 terminated with the following error:" in msg
    assert "Traceback (most recent call last):" in msg
    assert "in _fn_raise" in msg and "ValueError: bad index 1" in msg
    assert time.monotonic() - t0 < 15
    pids = _pids(piddir)
    assert len(pids) == 2 and wait_dead(pids, 1.0) == []      # rank 0 (sleeping) was stopped
    assert _errorfiles() == before                                # temporary files removed


@pytest.mark.parametrize("how, code, name, text", [
    ("exit7", 7, None, "process 1 terminated with exit code 7"),
    ("kill", -signal.SIGKILL, "SIGKILL", "process 1 terminated with signal SIGKILL"),
])
def test_exited_exception(how, code, name, text):
    with pytest.raises(ProcessExitedException) as ei:
        mp.spawn(_fn_exit, args=(how,), nprocs=2)
    e = ei.value
    assert (e.error_index, e.exit_code, e.signal_name) == (1, code, name)
    assert str(e) == text
    e2 = pickle.loads(pickle.dumps(e))        # torch's exceptions pickle (__reduce__)
    assert (type(e2), e2.exit_code, e2.signal_name, str(e2)) == (type(e), code, name, text)


def test_join_false_returns_context():
    ctx = mp.start_processes(_fn_sleep, args=(1.0,), nprocs=2, join=False)
    try:
        assert isinstance(ctx, mp.ProcessContext) and len(ctx.pids()) == 2
        assert ctx.join(timeout=0.05) is False          # still running
        end = time.monotonic() + 20
        while not ctx.join(timeout=1) and time.monotonic() < end:
            pass
        assert ctx.join() is True
        assert [p.exitcode for p in ctx.processes] == [0, 0]
    finally:
        ctx.terminate(1)


def test_start_processes_fork_accepts_local_function(tmp_path):
    def local(i, d):                      # not picklable by reference: fork needs no pickling
        (Path(d) / str(i)).write_text("x")
    mp.start_processes(local, args=(str(tmp_path),), nprocs=2, start_method="fork")
    assert sorted(os.listdir(tmp_path)) == ["0", "1"]


def test_stdlib_reexports():
    import multiprocessing
    for name in ("Process", "Queue", "Pipe", "get_context", "set_start_method", "cpu_count",
                 "Event", "Lock", "Manager", "Pool"):
        assert getattr(mp, name) is getattr(multiprocessing, name), name
    assert mp.get_sharing_strategy() in mp.get_all_sharing_strategies()
    mp.set_sharing_strategy("file_system")
    assert mp.get_sharing_strategy() == "file_system"
    mp.set_sharing_strategy("file_descriptor")
    with pytest.raises(ValueError, match="invalid sharing strategy"):
        mp.set_sharing_strategy("nope")
    with pytest.raises(ValueError, match="nprocs"):
        mp.spawn(_fn_sleep, args=(0,), nprocs=0)


# --- notebook_launch ---------------------------------------------------------------------------

def test_notebook_launch_function_from_non_file_main(tmp_path):
    # `python -c`: __main__ has no file, as in a notebook. The same function fails under
    # spawn (the child cannot find it) and works under notebook_launch.
    r = run_python(f"""
        import os, json
        import cddp.multiprocessing as mp
        from cddp.distributed.notebook import notebook_launch

        class Scale:                                    # a class defined in the "cell"
            def __init__(self, k): self.k = k

        def train(k, out):
            env = {{v: os.environ[v] for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                               "MASTER_PORT", "CDDP_TOKEN")}}
            with open(os.path.join(out, env["RANK"]), "w") as f:
                json.dump(env, f)
            return {{"rank": int(env["RANK"]), "value": Scale(k).k * 10}}

        def spawn_target(i):
            pass

        try:
            mp.spawn(spawn_target, nprocs=1)
            print("spawn: ok")
        except mp.ProcessExitedException as e:
            print("spawn: failed", e.exit_code)

        print("result", json.dumps(notebook_launch(train, args=(4, {str(tmp_path)!r}), nprocs=3)))
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "spawn: failed 1" in r.stdout
    assert "Can't get attribute 'spawn_target'" in r.stderr        # torch's failure mode
    assert '\nresult {"rank": 0, "value": 40}' in r.stdout
    import json
    envs = [json.loads((tmp_path / str(i)).read_text()) for i in range(3)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"] == [e["LOCAL_RANK"] for e in envs]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0
    assert len({e["CDDP_TOKEN"] for e in envs}) == 1


def test_notebook_launch_reraises_child_error_and_stops_others(tmp_path, piddir):
    r = run_python(f"""
        import os, time
        from cddp.distributed.notebook import notebook_launch
        from cddp.multiprocessing import ProcessRaisedException

        def train():
            open(os.path.join({str(piddir)!r}, "pid-%d" % os.getpid()), "w").close()
            if os.environ["RANK"] == "1":
                while len(os.listdir({str(piddir)!r})) < 2:
                    time.sleep(0.01)
                raise KeyError("missing shard 1")
            time.sleep(60)

        t0 = time.monotonic()
        try:
            notebook_launch(train, nprocs=2, grace_period=2)
        except ProcessRaisedException as e:
            print("index", e.error_index, "exception", repr(e.exception))
            print(str(e))
        print("seconds %.1f" % (time.monotonic() - t0))
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "index 1 exception KeyError('missing shard 1')" in r.stdout
    assert "-- Process 1 terminated with the following error:" in r.stdout
    assert re.search(r'File "<string>", line \d+, in train', r.stdout)
    assert "KeyError: 'missing shard 1'" in r.stdout
    assert float(r.stdout.rsplit("seconds ", 1)[1]) < 2 + 2
    pids = _pids(piddir)
    assert len(pids) == 2 and wait_dead(pids, 1.0) == []


def test_notebook_launch_exit_and_timeout(tmp_path, piddir):
    r = run_python(f"""
        import os, time
        from cddp.distributed.notebook import notebook_launch
        from cddp.multiprocessing import ProcessExitedException

        def dies():
            if os.environ["RANK"] == "1":
                os._exit(9)
            time.sleep(60)

        def slow():
            open(os.path.join({str(piddir)!r}, "pid-%d" % os.getpid()), "w").close()
            time.sleep(60)

        try:
            notebook_launch(dies, nprocs=2, grace_period=1)
        except ProcessExitedException as e:
            print("exited", e.error_index, e.exit_code)
        try:
            notebook_launch(slow, nprocs=2, timeout=1, grace_period=1)
        except TimeoutError as e:
            print("timeout", e)
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "exited 1 9" in r.stdout
    assert "timeout notebook_launch: ranks [0, 1] still running after 1 s" in r.stdout
    pids = _pids(piddir)
    assert len(pids) == 2 and wait_dead(pids, 1.0) == []


def test_notebook_launch_interrupted_stops_children(tmp_path, piddir):
    # interrupting the kernel = SIGINT to the parent only (forked children do not get it)
    code = textwrap.dedent(f"""
        import os, time
        from cddp.distributed.notebook import notebook_launch

        def train():
            open(os.path.join({str(piddir)!r}, "pid-%d" % os.getpid()), "w").close()
            time.sleep(60)

        try:
            notebook_launch(train, nprocs=2, grace_period=1)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        time.sleep(60)                   # the kernel lives on: no atexit cleanup to rely on
        """)
    p = subprocess.Popen([PY, "-c", code], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        _wait_marks(piddir, 1)        # the parent may still be starting rank 1: that window too
        os.kill(p.pid, signal.SIGINT)
        assert p.stdout.readline() == "interrupted\n"
        time.sleep(0.3)               # a child missed by the cleanup would mark itself by now
        assert _pids(piddir) and wait_dead(_pids(piddir), 0.5) == []
        assert p.poll() is None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_notebook_launch_in_jupyter_kernel(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(REPO / "tests" / "data" / "notebook_launch.ipynb", as_version=4)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), old]))
    try:
        nbclient.NotebookClient(nb, timeout=60, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "result 0 2 42" in text
    assert "raised ProcessRaisedException ZeroDivisionError" in text


def test_example_notebook_trains_with_ddp(tmp_path):
    """examples/notebook.ipynb: DDP training defined in a cell, launched on 2 ranks."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(REPO / "examples" / "notebook.ipynb", as_version=4)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), old]))
    try:
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "'rank': 0" in text and "'accuracy'" in text
