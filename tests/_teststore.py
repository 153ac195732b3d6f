"""A small file-backed store for the process-group tests (test-only; the real stores live in
cddp.distributed.store). Same surface the process group uses: set/get/add/wait/check, with
get() blocking up to `timeout` seconds and never hanging."""
import datetime
import fcntl
import os
import time


class DirStore:
    def __init__(self, path, timeout=30.0):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.timeout = datetime.timedelta(seconds=timeout)

    def _file(self, key):
        return os.path.join(self.path, key.encode().hex())

    def set(self, key, value):
        if isinstance(value, str):
            value = value.encode()
        tmp = self._file(key) + f".tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(value)
        os.replace(tmp, self._file(key))

    def get(self, key):
        end = time.monotonic() + self.timeout.total_seconds()
        delay = 0.0005
        while True:
            try:
                with open(self._file(key), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                if time.monotonic() > end:
                    raise TimeoutError(f"timed out after {self.timeout.total_seconds()} s "
                                       f"waiting for key {key}")
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    def add(self, key, amount):
        with open(os.path.join(self.path, "lock"), "a+b") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                with open(self._file(key), "rb") as f:
                    v = int(f.read() or b"0")
            except FileNotFoundError:
                v = 0
            v += amount
            self.set(key, str(v))
            return v

    def check(self, keys):
        return all(os.path.exists(self._file(k)) for k in keys)

    def wait(self, keys, timeout=None):
        for k in keys:
            self.get(k)


# ---- multi-process harness ------------------------------------------------------------------
# run_ranks(n, "test_module:function", ...) starts n real processes, each calling
# function(rank, size, store_dir, *args) and returning a JSON-able result (or raising). Every
# launch is bounded by `timeout` and kills its process groups on the way out.
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
_CHILD = ("import sys; sys.path[:0] = [{root!r}, {tests!r}]; import _teststore; "
          "_teststore._child_main()")


def run_ranks(n, target, args=(), env=None, timeout=60.0, expect_exit=None):
    """Run `target` on n ranks; returns the list of per-rank results. A rank that raised
    shows up as {"error": "<Type>: message", "traceback": ...}; one that died as
    {"died": returncode}. Raises AssertionError when the launch exceeds `timeout`."""
    d = tempfile.mkdtemp(prefix="cddp-pgtest-")
    e = dict(os.environ)
    e.pop("CDDP_TRANSPORT", None)
    e.update(env or {})
    e["PYTHONPATH"] = ROOT
    procs = []
    try:
        for r in range(n):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _CHILD.format(root=ROOT, tests=TESTS), target, str(r),
                 str(n), d, json.dumps(list(args))],
                env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
        end = time.monotonic() + timeout
        outs = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{target} on {n} ranks did not finish within {timeout} s")
            outs.append((p.returncode, out.decode(errors="replace"), err.decode(errors="replace")))
        results = []
        for r, (rc, out, err) in enumerate(outs):
            f = os.path.join(d, f"result.{r}")
            if os.path.exists(f):
                with open(f) as fh:
                    results.append(json.load(fh))
            else:
                results.append({"died": rc, "stderr": err[-2000:]})
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


def _child_main():
    target, rank, size, d, args = sys.argv[1:6]
    rank, size = int(rank), int(size)
    mod, fn = target.split(":")
    try:
        m = __import__(mod)
        res = {"ok": getattr(m, fn)(rank, size, d, *json.loads(args))}
    except BaseException as ex:  # noqa: BLE001 — reported to the parent
        res = {"error": f"{type(ex).__name__}: {ex}", "type": type(ex).__name__,
               "traceback": traceback.format_exc()[-3000:], "t": time.time()}
    tmp = os.path.join(d, f"result.{rank}.tmp")
    with open(tmp, "w") as fh:
        json.dump(res, fh)
    os.replace(tmp, os.path.join(d, f"result.{rank}"))
    sys.stdout.flush()
    os._exit(0)       # skip interpreter teardown: results are written, nothing else matters


def init_group(rank, size, d, timeout=20.0, backend="gloo"):
    """init_process_group over a DirStore in d (what the children call first)."""
    import datetime as _dt
    import cddp.distributed as dist
    dist.init_process_group(backend, store=DirStore(d), rank=rank, world_size=size,
                            timeout=_dt.timedelta(seconds=timeout))
    return dist
