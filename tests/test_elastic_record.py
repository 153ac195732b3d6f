"""torch.distributed.elastic.multiprocessing.errors.record: the error file a worker writes
(torch's format, compared with torch's own decorator) and cddp.run's root-cause report."""
import json
import os

import pytest

from cddp.distributed.elastic.multiprocessing.errors import record
from ddp_util import run_ranks


def _boom():
    raise ValueError("bad batch 7")


def _error_file(tmp_path, monkeypatch, rec, name):
    path = tmp_path / name
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    with pytest.raises(ValueError, match="bad batch 7"):
        rec(_boom)()
    return json.loads(path.read_text())


def test_error_file_is_torchs(tmp_path, monkeypatch):
    ours = _error_file(tmp_path, monkeypatch, record, "c.json")
    assert ours["message"]["message"] == "ValueError: bad batch 7"
    assert "in _boom" in ours["message"]["extraInfo"]["py_callstack"]
    assert int(ours["message"]["extraInfo"]["timestamp"]) > 0
    torch = pytest.importorskip("torch")
    from torch.distributed.elastic.multiprocessing.errors import record as trecord
    theirs = _error_file(tmp_path, monkeypatch, trecord, "t.json")
    assert theirs["message"]["message"] == ours["message"]["message"]
    assert set(theirs["message"]["extraInfo"]) == set(ours["message"]["extraInfo"])
    assert torch is not None


def test_exits_and_no_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)

    @record
    def ok_exit():
        raise SystemExit(0)

    @record
    def bad_exit():
        raise SystemExit(3)
    assert ok_exit() is None
    with pytest.raises(SystemExit) as e:
        bad_exit()
    assert e.value.code == 3
    with pytest.raises(ValueError):
        record(_boom)()                 # no file named: only re-raised
    assert record(lambda x: x + 1)(2) == 3
    assert record(error_handler=None)(lambda: 5)() == 5


BODY = """
import os
import cddp, cddp.distributed as dist
from cddp.distributed.elastic.multiprocessing.errors import record

@record
def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("bad batch 7 on " + os.environ["RANK"])
    dist.barrier()

if __name__ == "__main__":
    main()
"""


def test_launcher_prints_root_cause_and_cleans_up(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = run_ranks(tmp_path, BODY, nprocs=2, timeout=90, extra_env={"TMPDIR": str(tmp)})
    assert r.returncode != 0
    assert "root cause (first observed failure, rank 1): ValueError: bad batch 7 on 1" in r.stderr, \
        r.stderr[-3000:]
    assert [p for p in os.listdir(tmp) if p.startswith("cddp-run-errors-")] == []


def test_killed_launchers_error_dir_is_swept_by_the_next(tmp_path):
    import subprocess
    import sys
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                       # a pid that is gone
    stale = tmp / f"cddp-run-errors-{dead.pid}-abc123"
    stale.mkdir()
    (stale / "attempt1_rank0.json").write_text("{}")
    alive = tmp / f"cddp-run-errors-{os.getpid()}-def456"   # a live launcher's: kept
    alive.mkdir()
    r = run_ranks(tmp_path, "print('ok')\n", nprocs=1, timeout=90, extra_env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in tmp.iterdir()) == [alive.name]
