"""Launchers: `python -m cddp.launch` / `cddp.distributed.launch` (legacy torch.distributed.launch)
and `python -m cddp.run` (torchrun). Real processes; worker scripts are tiny (no cddp import) and
record their pids so every test can check — and in `finally` ensure — that nothing survives."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
TIMEOUT = 30


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PET_") and k not in (
               "CDDP_TOKEN", "OMP_NUM_THREADS", "CDDP_LAUNCH_GRACE", "RANK", "LOCAL_RANK",
               "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


def alive(pid):
    """True while `pid` runs (a zombie counts as dead: nobody may reap it in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_dead(pids, timeout=5.0):
    """The pids still alive after up to `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


# Preamble of every worker script. Each process drops a file "<name>-<pid>" into PIDS.
PRELUDE = """\
import os, sys, time, signal, json, subprocess
PIDS = {pids!r}
RANK = int(os.environ["RANK"])
def mark(name=None, pid=None):
    open(os.path.join(PIDS, f"{{name or 'rank%d' % RANK}}-{{pid or os.getpid()}}"), "w").close()
def wait_for(prefix, n=1, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if sum(f.startswith(prefix) for f in os.listdir(PIDS)) >= n:
            return
        time.sleep(0.01)
mark()
"""


class Job:
    """One launcher run in its own directory; `cleanup` kills every recorded pid."""

    def __init__(self, root, body):
        self.dir = Path(root)
        self.pids_dir = self.dir / "pids"
        self.pids_dir.mkdir(parents=True)
        self.script = self.dir / "worker.py"
        self.script.write_text(PRELUDE.format(pids=str(self.pids_dir)) + textwrap.dedent(body))
        self.proc = None

    def pids(self, prefix=""):
        return [int(f.rsplit("-", 1)[1]) for f in os.listdir(self.pids_dir)
                if f.startswith(prefix)]

    def start(self, argv, env=None):
        self.proc = subprocess.Popen([PY, "-m", *argv], cwd=self.dir, env=env or _env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        return self.proc

    def finish(self, timeout=TIMEOUT):
        t0 = time.monotonic()
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err, time.monotonic() - t0

    def run(self, *launcher, args=(), env=None, timeout=TIMEOUT):
        """Run `python -m LAUNCHER... worker.py ARGS`; (returncode, stdout, stderr, seconds)."""
        self.start([*launcher, str(self.script), *args], env)
        return self.finish(timeout)

    def wait_marks(self, prefix, n, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end and len(self.pids(prefix)) < n:
            time.sleep(0.01)
        assert len(self.pids(prefix)) >= n, f"workers did not start: {os.listdir(self.pids_dir)}"

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        for pid in self.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def job(tmp_path):
    jobs = []

    def make(body=""):
        jobs.append(Job(tmp_path / f"job{len(jobs)}", body))
        return jobs[-1]

    yield make
    for j in jobs:
        j.cleanup()


_OMP_BANNER = ("*****************************************",
               "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default")


def prefixed(text, what):
    """[(rank, payload)] from '[rankN]: payload' lines; every line must carry the prefix (but
    the launcher's own OMP_NUM_THREADS banner, torchrun's, printed before any worker runs)."""
    out = []
    for ln in text.splitlines():
        if ln.startswith(_OMP_BANNER):
            continue
        m = re.fullmatch(r"\[rank(\d+)\]: (.*)", ln)
        assert m, f"unprefixed {what} line: {ln!r}"
        out.append((int(m.group(1)), m.group(2)))
    return out


ENV_DUMP = """
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "CDDP_TOKEN", "OMP_NUM_THREADS", "PYTHONUNBUFFERED",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "ROLE_NAME"]
print(json.dumps(dict({k: os.environ.get(k) for k in keys}, argv=sys.argv[1:])))
"""


def env_dumps(out):
    got = {}
    for rank, payload in prefixed(out, "stdout"):
        d = json.loads(payload)
        assert int(d["RANK"]) == rank        # the prefix names the global rank
        got[rank] = d
    return got


# ---------------------------------------------------------------------------------------------
# environment and command line
# ---------------------------------------------------------------------------------------------

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_legacy_env_two_ranks_on_second_node(job, tmp_path):
    # two nodes on loopback: node 1's launcher meets node 0's before its workers start
    port = str(free_port())
    env = _env(CDDP_TOKEN_FILE=str(tmp_path / "token"))
    common = ["cddp.launch", "--nproc_per_node=2", "--nnodes=2", "--master_addr=127.0.0.1",
              f"--master_port={port}"]
    j0, j1 = job(ENV_DUMP), job(ENV_DUMP)
    j0.start([*common, "--node_rank=0", str(j0.script)], env)
    rc, out, err, _ = j1.run(*common, "--node_rank=1", args=("a", "--flag"), env=env)
    rc0, out0, err0, _ = j0.finish()
    assert rc == 0 and rc0 == 0, err + err0
    got = env_dumps(out)
    assert sorted(got) == [2, 3] and sorted(env_dumps(out0)) == [0, 1]
    for rank, d in got.items():
        lr = rank - 2
        assert d["LOCAL_RANK"] == str(lr) and d["WORLD_SIZE"] == "4"
        assert d["LOCAL_WORLD_SIZE"] == "2" and d["GROUP_RANK"] == "1"
        assert d["GROUP_WORLD_SIZE"] == "2"
        assert d["MASTER_ADDR"] == "127.0.0.1" and d["MASTER_PORT"] == port
        assert d["OMP_NUM_THREADS"] == "1" and d["PYTHONUNBUFFERED"] == "1"
        assert d["TORCHELASTIC_RESTART_COUNT"] == "0"
        # the legacy launcher passes the spelling the seed scripts parse, before script args
        assert d["argv"] == [f"--local_rank={lr}", "a", "--flag"]
    # both nodes took the job's secret from the token file node 0 (or node 1) created
    tokens = {d["CDDP_TOKEN"] for d in [*got.values(), *env_dumps(out0).values()]}
    assert tokens == {(tmp_path / "token").read_text().strip()}
    assert re.fullmatch(r"[0-9a-f]{32}", tokens.pop())
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600


def test_use_env_and_alias_module(job):
    rc, out, err, _ = job(ENV_DUMP).run("cddp.distributed.launch", "--use_env",
                                        "--nproc_per_node", "2", args=("x",))
    assert rc == 0, err
    got = env_dumps(out)
    assert sorted(got) == [0, 1]
    assert all(d["argv"] == ["x"] for d in got.values())
    assert [got[r]["LOCAL_RANK"] for r in (0, 1)] == ["0", "1"]
    assert got[0]["WORLD_SIZE"] == got[1]["WORLD_SIZE"] == "2"
    # single node without --master_port: a free port, the same for every rank (torch 2.x)
    assert got[0]["MASTER_PORT"] == got[1]["MASTER_PORT"] and int(got[0]["MASTER_PORT"]) > 0


def test_token_and_omp_from_environment_are_kept(job):
    rc, out, err, _ = job(ENV_DUMP).run("cddp.launch", "--use-env", "--nproc-per-node=2",
                                        env=_env(CDDP_TOKEN="feedbeef", OMP_NUM_THREADS="3"))
    assert rc == 0, err
    got = env_dumps(out)
    assert {d["CDDP_TOKEN"] for d in got.values()} == {"feedbeef"}
    assert {d["OMP_NUM_THREADS"] for d in got.values()} == {"3"}
    j = job(ENV_DUMP)     # otherwise a fresh token per launch
    tokens = [env_dumps(j.run("cddp.run")[1])[0]["CDDP_TOKEN"] for _ in range(2)]
    assert tokens[0] != tokens[1]


def test_torchrun_module_mode_and_elastic_vars(job):
    j = job()
    (j.dir / "mypkg").mkdir()
    (j.dir / "mypkg" / "__init__.py").write_text("")
    (j.dir / "mypkg" / "worker.py").write_text("import os, sys, json\n" + ENV_DUMP)
    j.start(["cddp.run", "--nproc-per-node=2", "--max-restarts=2", "--rdzv-id=job7",
             "-m", "mypkg.worker", "--lr", "0.1"])
    rc, out, err, _ = j.finish()
    assert rc == 0, err
    got = env_dumps(out)
    assert sorted(got) == [0, 1]
    for d in got.values():
        assert d["argv"] == ["--lr", "0.1"]           # torchrun never adds --local_rank
        assert d["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert d["TORCHELASTIC_MAX_RESTARTS"] == "2"
        assert d["TORCHELASTIC_RUN_ID"] == "job7"
        assert d["ROLE_NAME"] == "default"


def test_nproc_auto_standalone_and_ports(job):
    j = job(ENV_DUMP)
    rc, out, err, _ = j.run("cddp.run", "--standalone", "--nproc_per_node=auto")
    assert rc == 0, err
    got = env_dumps(out)
    assert sorted(got) == list(range(os.cpu_count()))
    assert {d["WORLD_SIZE"] for d in got.values()} == {str(os.cpu_count())}
    run_id = got[0]["TORCHELASTIC_RUN_ID"]
    assert re.fullmatch(r"[0-9a-f-]{36}", run_id)            # a fresh uuid
    assert len({d["MASTER_PORT"] for d in got.values()}) == 1

    # several nodes without a port: torch's fixed default; a rendezvous endpoint gives it
    # (checked on the configuration: a lone node of a multi-node job waits for the others)
    from cddp.distributed.launcher_core import config_from_args, get_args_parser
    cfg = config_from_args(get_args_parser().parse_args(["--nnodes=2", "--node-rank=0", "s.py"]),
                           "cddp.run", False)
    assert (cfg.master_addr, cfg.master_port, cfg.nnodes * cfg.nproc) == ("127.0.0.1", 29500, 2)
    cfg = config_from_args(get_args_parser().parse_args(
        ["--nnodes=2:2", "--rdzv-endpoint=10.1.2.3:4321", "s.py"]), "cddp.run", False)
    assert (cfg.master_addr, cfg.master_port, cfg.nnodes * cfg.nproc) == ("10.1.2.3", 4321, 2)


def test_pet_environment_defaults(job):
    # torchrun reads option defaults from PET_<OPTION>
    rc, out, err, _ = job(ENV_DUMP).run("cddp.run", env=_env(PET_NPROC_PER_NODE="2"))
    assert rc == 0, err
    assert sorted(env_dumps(out)) == [0, 1]


@pytest.mark.parametrize("argv, message", [
    (["cddp.run", "--nproc-per-node=abc"], "Unsupported nproc_per_node value: abc"),
    (["cddp.run", "--nnodes=1:2"], "elastic node ranges are not supported"),
    (["cddp.run", "--nnodes=2", "--node-rank=2"], "--node-rank=2 is outside [0, 2)"),
    (["cddp.launch", "--no-python"], "you must also set the '--use-env' flag"),
    (["cddp.run", "--redirects=4"], "--redirects=4 is neither a digit 0-3"),
    (["cddp.run", "--tee=0:1,x"], "--tee=0:1,x is neither a digit 0-3"),
    (["cddp.run", "--no-python", "-m"], "Don't use both"),
])
def test_bad_arguments(job, argv, message):
    rc, out, err, _ = job(ENV_DUMP).run(*argv)
    assert rc == 2 and message in err, err


def test_parse_args_api(monkeypatch):
    from cddp.distributed import launch, run
    a = run.parse_args(["--nproc_per_node=3", "--master-port", "1234", "s.py", "--x", "1"])
    assert (a.nproc_per_node, a.master_port, a.training_script) == ("3", 1234, "s.py")
    assert a.training_script_args == ["--x", "1"]
    a = launch.parse_args(["--use_env", "s.py"])
    assert a.use_env is True
    monkeypatch.setenv("PET_MAX_RESTARTS", "4")
    assert run.parse_args(["s.py"]).max_restarts == 4


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------

OUTPUT = """
for i in range(3):
    print(f"out {RANK} {i}")
    print(f"err {RANK} {i}", file=sys.stderr)
sys.stdout.write(f"no newline {RANK}")
"""


def test_rank_prefixes_on_stdout_and_stderr(job):
    rc, out, err, _ = job(OUTPUT).run("cddp.run", "--nproc-per-node=2")
    assert rc == 0, err
    o, e = prefixed(out, "stdout"), prefixed(err, "stderr")
    for r in (0, 1):
        assert [p for rank, p in o if rank == r] == [f"out {r} {i}" for i in range(3)] + [
            f"no newline {r}"]
        assert [p for rank, p in e if rank == r] == [f"err {r} {i}" for i in range(3)]


def test_heavy_output_keeps_every_line_whole(job):
    n = 4000
    rc, out, err, _ = job(f"""
    for i in range({n}):
        print(f"line {{RANK}} {{i}} " + "x" * 100)
        if i % 4 == 0:
            print(f"eline {{RANK}} {{i}}", file=sys.stderr)
    """).run("cddp.run", "--nproc-per-node=2")
    assert rc == 0, err
    o = prefixed(out, "stdout")
    for r in (0, 1):
        assert [p for rank, p in o if rank == r] == [f"line {r} {i} " + "x" * 100
                                                      for i in range(n)]
    assert len(prefixed(err, "stderr")) == 2 * n // 4


def test_a_line_still_being_written_reaches_the_console(job, tmp_path):
    # a progress bar redraws with "\r" and no newline; a prompt waits for a long step: both
    # must show before the line ends (line buffering held them back: tqdm looked frozen). The
    # worker goes on only once the test has seen each piece on the launcher's stdout.
    import select
    go = tmp_path / "go"
    j = job(f"""
    def wait_go(k):
        end = time.monotonic() + 20
        while not os.path.exists({str(go)!r} + str(k)):
            if time.monotonic() > end:
                sys.exit(7)                 # the launcher never showed piece k
            time.sleep(0.02)
    sys.stdout.write("\\r step 1/2"); sys.stdout.flush(); wait_go(1)
    sys.stdout.write("\\r step 2/2\\n"); sys.stdout.write("Epoch 1: "); sys.stdout.flush()
    wait_go(2)
    print("done")
    """)
    proc = j.start(["cddp.run", "--nproc-per-node=1", str(j.script)])
    seen, deadline = "", time.monotonic() + TIMEOUT
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    for k, want in ((1, "[rank0]:  step 1/2"), (2, "[rank0]: Epoch 1: ")):
        while want not in seen and time.monotonic() < deadline:
            select.select([fd], [], [], 0.5)
            seen += os.read(fd, 65536).decode() if select.select([fd], [], [], 0)[0] else ""
        assert want in seen, f"piece {k} not shown while its line was open: {seen!r}"
        (tmp_path / f"go{k}").touch()
    os.set_blocking(fd, True)
    rc, out, err, _ = j.finish()
    seen += out
    assert rc == 0, err
    # the redraws keep the prefix; the finished lines are whole, each with one prefix
    assert seen.replace("\r", "|") == ("[rank0]: |[rank0]:  step 1/2|[rank0]:  step 2/2\n"
                                        "[rank0]: Epoch 1: done\n")


def test_local_ranks_filter(job):
    rc, out, err, _ = job(OUTPUT).run("cddp.run", "--nproc-per-node=2",
                                      "--local-ranks-filter=1")
    assert rc == 0, err
    assert {r for r, _ in prefixed(out, "stdout")} == {1}


LOGGED = """
print(f"out {RANK}")
print(f"err {RANK}", file=sys.stderr)
"""


def log_files(root):
    """{relative path under the run directory: content} of a --log-dir tree holding one run."""
    (run_dir,) = Path(root).iterdir()
    return {str(p.relative_to(run_dir)): p.read_text() for p in sorted(run_dir.rglob("*"))
            if p.is_file()}


def test_redirects_send_output_to_files_only(job, tmp_path):
    rc, out, err, _ = job(LOGGED).run("cddp.run", "--nproc-per-node=2",
                                      f"--log-dir={tmp_path / 'logs'}", "-r", "3")
    assert rc == 0, err
    assert prefixed(out, "stdout") == []
    assert [ln for ln in err.splitlines() if ln.startswith("[rank")] == []
    run_dir = next((tmp_path / "logs").iterdir())
    assert f"log directory set to: {run_dir}" in err and run_dir.name.startswith("none_")
    assert log_files(tmp_path / "logs") == {
        f"attempt_0/{r}/{s}.log": f"{s[3:]} {r}\n" for r in (0, 1) for s in ("stdout", "stderr")}


def test_tee_per_local_rank_and_filter(job, tmp_path):
    rc, out, err, _ = job(LOGGED).run("cddp.run", "--nproc-per-node=2",
                                      f"--log-dir={tmp_path / 'logs'}", "--tee=0:1,1:2",
                                      "--redirects=1:1", "--local-ranks-filter=0")
    assert rc == 0, err
    # teed and untouched streams of rank 0 reach the console; rank 1 is filtered out
    assert prefixed(out, "stdout") == [(0, "out 0")]
    assert [ln for ln in err.splitlines() if ln.startswith("[rank")] == ["[rank0]: err 0"]
    # rank 0: stdout teed; rank 1: stdout redirected, stderr teed (still written, not shown)
    assert log_files(tmp_path / "logs") == {"attempt_0/0/stdout.log": "out 0\n",
                                           "attempt_0/1/stdout.log": "out 1\n",
                                           "attempt_0/1/stderr.log": "err 1\n"}


def test_log_layout_matches_torchrun(job, tmp_path):
    pytest.importorskip("torch")
    trees = {}
    for launcher in ("cddp.run", "torch.distributed.run"):
        logs = tmp_path / launcher
        rc, _, err, _ = job(LOGGED).run(launcher, "--nproc-per-node=2", f"--log-dir={logs}",
                                        "-r", "0:3,1:1", "-t", "1:2", timeout=120)
        assert rc == 0, err
        trees[launcher] = log_files(logs)
    assert trees["cddp.run"] == trees["torch.distributed.run"]


def test_failure_with_redirects_keeps_report_and_error_file(job, tmp_path):
    j = job("""
    if RANK == 1:
        print("last words of rank 1", file=sys.stderr)
        sys.path.insert(0, os.environ["CDDP_REPO"])
        from cddp.distributed.elastic.multiprocessing.errors import record
        @record
        def main():
            raise ValueError("bad batch 7")
        main()
    time.sleep(60)
    """)
    rc, out, err, _ = j.run("cddp.run", "--nproc-per-node=2", f"--log-dir={tmp_path / 'logs'}",
                            "-r", "3", env=_env(CDDP_REPO=str(REPO), CDDP_LAUNCH_GRACE="2"))
    assert rc == 1, err
    assert "root cause (first observed failure, rank 1): ValueError: bad batch 7" in err
    assert "[rank1]: last words of rank 1" in err.split("failed with exit code 1", 1)[1]
    files = log_files(tmp_path / "logs")
    assert json.loads(files["attempt_0/1/error.json"])["message"]["message"].endswith(
        "bad batch 7")
    assert files["attempt_0/1/stderr.log"].startswith("last words of rank 1\n")
    assert wait_dead(j.pids(), 0.5) == []


# ---------------------------------------------------------------------------------------------
# failures, signals, orphans
# ---------------------------------------------------------------------------------------------

FAIL_RANK1 = """
if RANK == 1:
    wait_for("rank0")                     # rank 0 is up and sleeping
    print("working ...")
    print("last words of rank 1", file=sys.stderr)
    sys.exit(3)
time.sleep(60)
"""


def test_failure_stops_others_and_reports(job):
    j = job(FAIL_RANK1)
    rc, out, err, secs = j.run("cddp.launch", "--nproc_per_node=2",
                               env=_env(CDDP_LAUNCH_GRACE="2"))
    assert rc == 3, err
    (pid1,) = j.pids("rank1")
    assert f"rank 1 (local_rank 1, pid {pid1}) failed with exit code 3" in err
    tail = err.split("failed with exit code 3", 1)[1]
    assert "[rank1]: last words of rank 1" in tail and "[rank1]: working ..." in tail
    assert secs < 2 + 2
    assert wait_dead(j.pids(), 0.5) == []


def test_worker_ignoring_sigterm_is_killed_after_grace(job):
    j = job("""
    if RANK == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        mark("ready")
        time.sleep(60)
    wait_for("ready")
    sys.exit(4)
    """)
    rc, out, err, secs = j.run("cddp.run", "--nproc-per-node=2", "--shutdown-timeout=1")
    assert rc == 4, err
    assert 1.0 <= secs < 1 + 3          # the grace was waited, then SIGKILL
    assert wait_dead(j.pids("rank"), 0.5) == []


def test_stopped_worker_is_stopped_without_the_grace(job):
    """A worker hung by SIGSTOP gets SIGCONT with its SIGTERM: no grace period to wait."""
    j = job("""
    if RANK == 0:
        mark("ready")
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)
    wait_for("ready")
    time.sleep(0.3)
    sys.exit(4)
    """)
    rc, out, err, secs = j.run("cddp.run", "--nproc-per-node=2", "--shutdown-timeout=20")
    assert rc == 4, err
    assert secs < 10, secs              # not the 20 s grace
    assert wait_dead(j.pids("rank"), 0.5) == []


def test_no_orphans_grandchildren_die_too(job):
    j = job("""
    if RANK == 0:
        # a grandchild (think DataLoader worker) that even ignores SIGTERM; it marks itself
        # once SIGTERM is ignored
        subprocess.Popen([sys.executable, "-c",
            "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open(os.path.join({PIDS!r}, 'grandchild-%d' % os.getpid()), 'w').close(); "
            "time.sleep(60)"])
        time.sleep(60)
    wait_for("grandchild")
    sys.exit(5)
    """)
    rc, out, err, secs = j.run("cddp.run", "--nproc-per-node=2", "--shutdown-timeout=1")
    assert rc == 5, err
    assert len(j.pids()) == 3
    assert wait_dead(j.pids(), 1.0) == []


def test_leftover_grandchild_of_successful_run_is_killed(job):
    j = job("""
    g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    mark("grandchild", g.pid)
    """)
    rc, out, err, secs = j.run("cddp.run", "--nproc-per-node=2")
    assert rc == 0, err
    assert len(j.pids("grandchild")) == 2
    assert wait_dead(j.pids(), 1.0) == []


def test_child_killed_by_signal(job):
    j = job("""
    if RANK == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    """)
    rc, out, err, _ = j.run("cddp.run", "--nproc-per-node=2")
    assert rc == 128 + signal.SIGKILL, err
    assert "rank 1 (local_rank 1, pid" in err and "failed with signal SIGKILL" in err
    assert wait_dead(j.pids(), 0.5) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_launcher_stops_everything(job, sig):
    j = job("""
    def on_signal(signum, frame):          # the launcher forwards the signal it received
        mark(f"got{signum}")
        sys.exit(0)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    mark("grandchild", g.pid)
    time.sleep(60)
    """)
    j.start(["cddp.launch", "--nproc_per_node=2", str(j.script)],
            env=_env(CDDP_LAUNCH_GRACE="2"))
    j.wait_marks("grandchild", 2)
    os.kill(j.proc.pid, sig)
    rc, out, err, secs = j.finish()
    assert rc == 128 + sig, err
    assert f"received {signal.Signals(sig).name}" in err
    assert len(j.pids(f"got{int(sig)}")) == 2            # every worker saw the signal
    assert secs < 2 + 2
    assert wait_dead(j.pids(), 1.0) == []


def test_launcher_killed_takes_workers_down(job):
    j = job("time.sleep(60)\n")
    j.start(["cddp.run", "--nproc-per-node=2", str(j.script)])
    j.wait_marks("rank", 2)
    os.kill(j.proc.pid, signal.SIGKILL)     # no chance to clean up: PDEATHSIG does it
    j.proc.wait(5)
    assert wait_dead(j.pids(), 3.0) == []


def test_worker_keeps_death_signal_after_importing_cddp(job):
    # PR_GET_PDEATHSIG (2): the launcher asks for SIGKILL; importing cddp must not undo it
    rc, out, err, _ = job("""
    import ctypes
    import cddp.multiprocessing
    v = ctypes.c_int(-1)
    ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0)
    print(v.value)
    """).run("cddp.run")
    assert rc == 0, err
    assert prefixed(out, "stdout") == [(0, str(int(signal.SIGKILL)))]


def test_max_restarts(job):
    j = job("""
    count = os.environ["TORCHELASTIC_RESTART_COUNT"]
    if RANK == 1 and count == "0":
        sys.exit(6)
    if RANK == 0 and count == "0":
        time.sleep(60)                    # stopped when rank 1 fails
    print(f"attempt {count}")
    """)
    rc, out, err, _ = j.run("cddp.run", "--nproc-per-node=2", "--max-restarts=2")
    assert rc == 0, err
    assert sorted(prefixed(out, "stdout")) == [(0, "attempt 1"), (1, "attempt 1")]
    assert "failed with exit code 6" in err and "restart 1 of 2" in err
    assert "restart 2 of 2" not in err
    rc, out, err, _ = j.run("cddp.run", "--nproc-per-node=2", "--max_restarts=0")
    assert rc == 6 and "restart" not in err
    assert wait_dead(j.pids(), 0.5) == []


def test_omp_threads_capped_only_for_several_workers(job):
    # torchrun's rule and message: one worker keeps the machine's default thread count
    j = job(ENV_DUMP)
    rc, out, err, _ = j.run("cddp.run", "--nproc-per-node=1", env=_env())
    assert rc == 0, err
    assert env_dumps(out)[0]["OMP_NUM_THREADS"] is None and "OMP_NUM_THREADS" not in err
    rc, out, err, _ = j.run("cddp.run", "--nproc-per-node=2", env=_env())
    assert rc == 0, err
    assert {d["OMP_NUM_THREADS"] for d in env_dumps(out).values()} == {"1"}
    assert "Setting OMP_NUM_THREADS environment variable for each process to be 1" in err


def test_rdzv_endpoint_without_port_and_the_static_timeout_key(job):
    from cddp.distributed import launcher_core, launcher_rdzv
    args = launcher_core.get_args_parser("cddp.run").parse_args(
        ["--nproc-per-node=1", "--rdzv-endpoint=127.0.0.1", "x.py"])
    cfg = launcher_core.config_from_args(args, "cddp.run", False)
    assert (cfg.master_addr, cfg.master_port) == ("127.0.0.1", 29400)
    assert launcher_rdzv.join_timeout("timeout=5") == 5.0
    assert launcher_rdzv.join_timeout("join_timeout=7,other=1") == 7.0
    with pytest.raises(ValueError, match="timeout='x'"):
        launcher_rdzv.join_timeout("timeout=x")
