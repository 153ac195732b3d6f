"""Several nodes for real: launchers that meet, fail and watch each other, and jobs that cross a
network interface between two "hosts".

Part 1 (any user): two launchers of a `--nnodes=2` job on loopback — the token, a node that
never comes, a node whose workers fail, a launcher killed, coordinated restarts, SLURM's
variables.

Part 2 (root, `ip`, `unshare`): two network namespaces joined by a veth pair, each a host with
its own address and host name (a UTS namespace). A DDP job with 2 ranks per host under
`python -m cddp.run --nnodes=2` (hierarchical transport: shared memory inside a host, TCP over
the veth between) and under `mpirun` with the MPI backend must end with the weights of the same
job on 4 ranks of one host; killing every process of one host, or taking its link down, must
make the other host's ranks raise naming that host and its launcher exit non-zero, leaving no
process behind. Namespaces and processes are removed in finalizers, whatever happens; every run
is bounded by a timeout; traffic stays on the veth pair.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import subprocess_env
from ddp_util import free_port
from netns_util import Hosts, kill_session, netns_unavailable

PY = sys.executable
TIMEOUT = 90


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def base_env(tmp_path, **extra):
    env = subprocess_env(HOME=str(tmp_path), CDDP_LAUNCH_GRACE="2", **extra)
    for k in ("CDDP_TOKEN", "CDDP_TOKEN_FILE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
              "MASTER_ADDR", "MASTER_PORT", "CDDP_TRANSPORT", "CDDP_HOST_ID", "SLURM_JOB_ID",
              "SLURM_PROCID", "SLURM_NTASKS"):
        if k not in extra:
            env.pop(k, None)
    return env


class Proc:
    """One launcher (or mpirun) in its own session; killed as a group at cleanup."""

    def __init__(self, argv, env, cwd):
        self.p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out = self.err = ""

    def finish(self, timeout=TIMEOUT):
        try:
            self.out, self.err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.out, self.err = self.p.communicate()
            raise AssertionError(f"timed out after {timeout}s\n{self.out[-2000:]}\n"
                                 f"{self.err[-3000:]}")
        return self.p.returncode

    def kill(self):
        kill_session(self.p.pid)        # the launcher or mpirun and whatever it started


@pytest.fixture
def procs():
    started = []

    def start(argv, env, cwd):
        started.append(Proc(argv, env, cwd))
        return started[-1]

    yield start
    for p in started:
        p.kill()
        try:
            p.p.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass


def write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("OUT = %r\n" % str(tmp_path) + textwrap.dedent(body))
    return str(path)


# =============================================================================================
# Part 1: two launchers on loopback
# =============================================================================================

SLEEPER = """
import os, sys, time
rank = int(os.environ["RANK"])
open(os.path.join(OUT, f"pid{rank}-{os.getpid()}"), "w").close()
if rank == int(os.environ.get("FAIL_RANK", "-1")) and \\
        os.environ["TORCHELASTIC_RESTART_COUNT"] == os.environ.get("FAIL_ATTEMPT", "0"):
    time.sleep(1)
    sys.exit(5)
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
time.sleep(float(os.environ.get("SLEEP", "60")) if attempt == "0" else 0.2)
print("attempt", attempt, "world", os.environ["WORLD_SIZE"])
"""


def worker_pids(tmp_path):
    return [int(f.split("-")[1]) for f in os.listdir(tmp_path) if f.startswith("pid")]


def two_nodes(procs, tmp_path, script, env0, env1, extra=(), node1=True):
    port = free_port()
    common = [PY, "-m", "cddp.run", "--nnodes=2", "--nproc-per-node=2",
              "--master-addr=127.0.0.1", f"--master-port={port}", *extra]
    a = procs([*common, "--node-rank=0", script], env0, tmp_path)
    b = procs([*common, "--node-rank=1", script], env1, tmp_path) if node1 else None
    return a, b


RANKS = """
import json, os
import cddp, cddp.distributed as dist
dist.init_process_group("gloo")
t = cddp.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
with open(os.path.join(OUT, f"r{dist.get_rank()}.json"), "w") as f:
    json.dump({"group_rank": os.environ["GROUP_RANK"], "sum": t.item()}, f)
dist.destroy_process_group()
"""


def test_same_command_twice_with_c10d_gives_node_ranks_by_arrival(procs, tmp_path):
    script = write(tmp_path, "ranks.py", RANKS)
    env = base_env(tmp_path, CDDP_TOKEN_FILE=str(tmp_path / "token"))
    cmd = [PY, "-m", "cddp.run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-conf=join_timeout=20", script]
    a, b = procs(cmd, env, tmp_path), procs(cmd, env, tmp_path)
    assert a.finish() == 0 and b.finish() == 0, a.err + b.err
    got = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(4)]
    assert [g["group_rank"] for g in got] == ["0", "0", "1", "1"]
    assert {g["sum"] for g in got} == {10.0}


def test_token_file_is_shared_and_a_wrong_token_stops_both_nodes(procs, tmp_path):
    script = write(tmp_path, "job.py", SLEEPER)
    # a shared token file (here: the default, ~/.cddp/token under the same HOME) just works
    env = base_env(tmp_path, SLEEP="0")
    a, b = two_nodes(procs, tmp_path, script, env, env)
    assert a.finish() == 0 and b.finish() == 0, a.err + b.err
    assert (tmp_path / ".cddp" / "token").stat().st_mode & 0o777 == 0o600
    assert "export CDDP_TOKEN=" in a.err
    assert sorted(a.out.split("\n")[:2] + b.out.split("\n")[:2]) == \
        [f"[rank{r}]: attempt 0 world 4" for r in range(4)]
    # node 1 with another secret: refused at once, told how to fix it; node 0 names it
    a, b = two_nodes(procs, tmp_path, script, env, base_env(tmp_path, CDDP_TOKEN="other"))
    assert b.finish() == 1 and a.finish() == 1
    assert "refused this node's CDDP_TOKEN (taken from $CDDP_TOKEN)" in b.err
    assert "export CDDP_TOKEN" in b.err and "--token-file" in b.err
    assert "the node at 127.0.0.1 came with a different CDDP_TOKEN" in a.err
    assert worker_pids(tmp_path) and not any(alive(p) for p in worker_pids(tmp_path))


def test_node_that_never_comes(procs, tmp_path):
    script = write(tmp_path, "job.py", SLEEPER)
    a, _ = two_nodes(procs, tmp_path, script, base_env(tmp_path), None,
                     extra=["--rdzv-conf", "join_timeout=2"], node1=False)
    assert a.finish() == 1
    assert "node(s) 1 did not join within 2 s" in a.err
    assert worker_pids(tmp_path) == []                 # nothing started


def test_failed_node_stops_the_other(procs, tmp_path):
    # rank 3 (node 1) fails while node 0's ranks sleep outside any collective: only the
    # launchers can tell node 0
    script = write(tmp_path, "job.py", SLEEPER)
    env = base_env(tmp_path, FAIL_RANK="3")
    a, b = two_nodes(procs, tmp_path, script, env, env)
    assert b.finish() == 5 and a.finish() == 1, a.err + b.err
    assert "rank 3 (local_rank 1" in b.err and "failed with exit code 5" in b.err
    assert "node 1 (" in a.err and "rank 3 failed with exit code 5; stopping this node's " \
                                   "workers" in a.err
    time.sleep(0.5)
    assert len(worker_pids(tmp_path)) == 4
    assert not any(alive(p) for p in worker_pids(tmp_path))


@pytest.mark.parametrize("victim", [0, 1])
def test_killed_launcher_is_noticed(procs, tmp_path, victim):
    script = write(tmp_path, "job.py", SLEEPER)
    env = base_env(tmp_path, CDDP_HEARTBEAT_S="1")     # a node is lost after 1 + 3 s
    nodes = two_nodes(procs, tmp_path, script, env, env)
    end = time.monotonic() + 30
    while len(worker_pids(tmp_path)) < 4 and time.monotonic() < end:
        time.sleep(0.05)
    assert len(worker_pids(tmp_path)) == 4
    nodes[victim].kill()                        # the launcher and its workers: SIGKILL
    other = nodes[1 - victim]
    assert other.finish() == 1
    if victim == 1:
        assert "node 1 (" in other.err and "stopped answering: no heartbeat" in other.err
    else:
        assert "lost contact with node 0" in other.err
    end = time.monotonic() + 5
    while any(alive(p) for p in worker_pids(tmp_path)) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(alive(p) for p in worker_pids(tmp_path))


def test_nodes_restart_together(procs, tmp_path):
    script = write(tmp_path, "job.py", SLEEPER)
    env = base_env(tmp_path, FAIL_RANK="2", SLEEP="3")
    a, b = two_nodes(procs, tmp_path, script, env, env, extra=["--max-restarts=1"])
    assert a.finish() == 0 and b.finish() == 0, a.err + b.err
    assert "restart 1 of 1" in a.err and "restart 1 of 1" in b.err
    lines = sorted(a.out.splitlines() + b.out.splitlines())
    assert lines == [f"[rank{r}]: attempt 1 world 4" for r in range(4)]


def test_a_node_whose_workers_finished_restarts_with_the_failed_one(procs, tmp_path):
    # node 0's workers are done (its launcher waits for the others) when rank 2 fails: with a
    # restart left, node 0 runs the next round too instead of closing the store under node 1
    script = write(tmp_path, "job.py", SLEEPER)
    env = base_env(tmp_path, FAIL_RANK="2", SLEEP="0")
    a, b = two_nodes(procs, tmp_path, script, env, env, extra=["--max-restarts=1"])
    assert a.finish() == 0 and b.finish() == 0, a.err + b.err
    assert "restart 1 of 1" in a.err and "restart 1 of 1" in b.err
    second = sorted(ln for ln in a.out.splitlines() + b.out.splitlines() if "attempt 1" in ln)
    assert second == [f"[rank{r}]: attempt 1 world 4" for r in range(4)]


def test_slurm_first_host():
    from cddp.distributed._slurm import default_port, first_host
    assert first_host("node[01-04,07],gpu3") == "node01"
    assert first_host("gpu3,node[01-04]") == "gpu3"
    assert first_host("rack[2-3]-n[009-010]") == "rack2-n009"
    assert first_host("a[5]") == "a5"
    assert first_host("") is None and first_host("bad[") is None
    assert default_port("123456") == 15000 + 3456 and default_port("x") == 29500


def test_init_process_group_under_srun(tmp_path):
    # a one-task srun step: everything from SLURM's variables, written back to os.environ
    code = textwrap.dedent("""
    import os, cddp, cddp.distributed as dist
    dist.init_process_group()
    x = cddp.ones(3)
    dist.all_reduce(x)
    print(dist.get_rank(), dist.get_world_size(), os.environ["LOCAL_RANK"],
          os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], x.tolist())
    """)
    env = base_env(tmp_path, SLURM_JOB_ID="4242", SLURM_PROCID="0", SLURM_NTASKS="1",
                   SLURM_LOCALID="0", SLURM_JOB_NODELIST="localhost,other[1-3]")
    out = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "0", "localhost", str(15000 + 4242), "[1.0,",
                                  "1.0,", "1.0]"]


def test_launcher_defaults_under_slurm(monkeypatch):
    from cddp.distributed.launcher_core import config_from_args, get_args_parser
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "cn[12-13]")
    cfg = config_from_args(get_args_parser().parse_args(["--nnodes=2", "s.py"]), "cddp.run",
                           False)
    assert (cfg.node_rank, cfg.master_addr) == (1, "cn12")
    cfg = config_from_args(get_args_parser().parse_args(
        ["--nnodes=2", "--node-rank=0", "--master-addr=h", "s.py"]), "cddp.run", False)
    assert (cfg.node_rank, cfg.master_addr) == (0, "h")          # flags win
    cfg = config_from_args(get_args_parser().parse_args(["s.py"]), "cddp.run", False)
    assert (cfg.node_rank, cfg.master_addr) == (0, "127.0.0.1")  # one node: SLURM unused


# =============================================================================================
# Part 2: two hosts in network namespaces
# =============================================================================================

_NO_NETNS = netns_unavailable()
needs_netns = pytest.mark.skipif(_NO_NETNS is not None, reason=str(_NO_NETNS))


@pytest.fixture
def hosts():
    h = Hosts()
    try:
        h.create()
        yield h
    finally:
        h.destroy()


# The DDP job: 4 ranks x 8 samples, 5 SGD steps; every rank saves its weights and says which
# transport and host it ran on. argv[1]: the backend.
DDP_JOB = """
import json, os, socket, sys
import numpy as np
import cddp, cddp.distributed as dist, cddp.nn as nn
dist.init_process_group(sys.argv[1])
r, n = dist.get_rank(), dist.get_world_size()
cddp.manual_seed(0)
net = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                    nn.Linear(256, 4))
ddp = nn.parallel.DistributedDataParallel(net)
rng = np.random.default_rng(3)
X = rng.standard_normal((32, 32)).astype(np.float32)
Y = rng.integers(0, 4, 32)
opt = cddp.optim.SGD(ddp.parameters(), lr=0.2, momentum=0.9)
for step in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(ddp(cddp.from_numpy(X[r * 8:(r + 1) * 8].copy())),
                                       cddp.from_numpy(Y[r * 8:(r + 1) * 8].copy()))
    loss.backward()
    opt.step()
w = np.concatenate([p.detach().numpy().ravel() for p in net.parameters()])
tag = sys.argv[2]
np.save(os.path.join(OUT, f"w_{tag}_{r}.npy"), w)
with open(os.path.join(OUT, f"info_{tag}_{r}.json"), "w") as f:
    json.dump({"transport": dist.group.WORLD.transport, "host": socket.gethostname(), "n": n}, f)
dist.destroy_process_group()
"""


def weights(tmp_path, tag):
    ws = [np.load(tmp_path / f"w_{tag}_{r}.npy") for r in range(4)]
    info = [json.loads((tmp_path / f"info_{tag}_{r}.json").read_text()) for r in range(4)]
    for w in ws[1:]:
        assert np.array_equal(w, ws[0]), f"{tag}: ranks disagree"      # DDP: bit-identical
    return ws[0], info


@pytest.fixture
def one_host_reference(tmp_path):
    """The DDP job on 4 ranks of this host (shared memory): the weights to reach."""
    script = write(tmp_path, "ddp.py", DDP_JOB)
    r = subprocess.run([PY, "-m", "cddp.run", "--nproc-per-node=4",
                        f"--master-port={free_port()}", script, "gloo", "ref"],
                       env=base_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    w, info = weights(tmp_path, "ref")
    assert {i["transport"] for i in info} == {"shm"}
    return w


@needs_netns
def test_ddp_across_two_hosts(hosts, tmp_path, procs, one_host_reference):
    script = str(tmp_path / "ddp.py")
    env = base_env(tmp_path)
    common = [PY, "-m", "cddp.run", "--nnodes=2", "--nproc-per-node=2",
              f"--master-addr={hosts.addr['A']}", "--master-port=29400"]
    tx0 = hosts.tx_bytes("A") + hosts.tx_bytes("B")
    a = procs(hosts.cmd("A", [*common, "--node-rank=0", script, "gloo", "hosts"]), env, tmp_path)
    b = procs(hosts.cmd("B", [*common, "--node-rank=1", script, "gloo", "hosts"]), env, tmp_path)
    assert a.finish() == 0 and b.finish() == 0, a.err + b.err
    w, info = weights(tmp_path, "hosts")
    assert [i["host"] for i in info] == ["hostA", "hostA", "hostB", "hostB"]
    assert {i["transport"] for i in info} == {"hier"}
    # the gradients crossed the veth: 5 steps of a ~80k-parameter model, at least once each way
    assert hosts.tx_bytes("A") + hosts.tx_bytes("B") - tx0 > 2 * 5 * 4 * w.size
    # the summation order differs from one host's (per host, then between hosts): float32
    # rounding only, a few ulps after 5 steps
    np.testing.assert_allclose(w, one_host_reference, rtol=1e-5, atol=1e-6)
    assert not hosts.pids("A") and not hosts.pids("B")


@needs_netns
def test_same_command_on_every_host_with_c10d(hosts, tmp_path, procs, one_host_reference):
    # torchrun's recipe: no --node-rank; the launcher on the endpoint's host is node 0 even
    # when the other host's launcher starts first, the others take 1, 2, ... as they join
    script = str(tmp_path / "ddp.py")
    env = base_env(tmp_path)
    common = [PY, "-m", "cddp.run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
              f"--rdzv-endpoint={hosts.addr['A']}:29400", "--rdzv-id=job1", script, "gloo",
              "c10d"]
    b = procs(hosts.cmd("B", common), env, tmp_path)
    time.sleep(1.0)
    a = procs(hosts.cmd("A", common), env, tmp_path)
    assert a.finish() == 0 and b.finish() == 0, a.err + b.err
    w, info = weights(tmp_path, "c10d")
    assert [i["host"] for i in info] == ["hostA", "hostA", "hostB", "hostB"]
    np.testing.assert_allclose(w, one_host_reference, rtol=1e-5, atol=1e-6)


@needs_netns
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_ddp_across_two_hosts_under_mpirun(hosts, tmp_path, procs, one_host_reference):
    try:
        from cddp import _mpi  # noqa: F401
    except ImportError:
        pytest.skip("cddp was built without MPI (no cddp._mpi)")
    env = base_env(tmp_path, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    tx0 = hosts.tx_bytes("A") + hosts.tx_bytes("B")
    m = procs(hosts.cmd("A", ["mpirun", *hosts.mpirun_args(tmp_path / "agent.sh", 4),
                              "-x", "PYTHONPATH", "-x", "HOME",
                              PY, str(tmp_path / "ddp.py"), "mpi", "mpi"]), env, tmp_path)
    assert m.finish() == 0, m.out + m.err
    w, info = weights(tmp_path, "mpi")
    assert [i["host"] for i in info] == ["hostA", "hostA", "hostB", "hostB"]
    assert {i["transport"] for i in info} == {"mpi"}
    assert hosts.tx_bytes("A") + hosts.tx_bytes("B") - tx0 > 2 * 5 * 4 * w.size
    np.testing.assert_allclose(w, one_host_reference, rtol=1e-5, atol=1e-6)
    assert not hosts.pids("A") and not hosts.pids("B")


# A job that all-reduces until stopped; each rank marks itself once the loop runs, and prints
# the exception that ends it.
LOOP_JOB = """
import datetime, os, sys, time
import numpy as np
import cddp, cddp.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
r = dist.get_rank()
x = cddp.from_numpy(np.ones(1 << 16, dtype=np.float32))
try:
    for i in range(1000000):
        dist.all_reduce(x)
        x.fill_(1.0)
        if i == 20:
            open(os.path.join(OUT, f"looping{r}"), "w").close()
except Exception as e:
    print(f"rank {r} raised {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
"""


def start_loop(hosts, tmp_path, procs, env):
    script = write(tmp_path, "loop.py", LOOP_JOB)
    common = [PY, "-m", "cddp.run", "--nnodes=2", "--nproc-per-node=2",
              f"--master-addr={hosts.addr['A']}", "--master-port=29401"]
    a = procs(hosts.cmd("A", [*common, "--node-rank=0", script]), env, tmp_path)
    b = procs(hosts.cmd("B", [*common, "--node-rank=1", script]), env, tmp_path)
    end = time.monotonic() + 60
    while sum(f.startswith("looping") for f in os.listdir(tmp_path)) < 4:
        assert time.monotonic() < end, "the job did not start looping"
        assert a.p.poll() is None and b.p.poll() is None, "a launcher ended early"
        time.sleep(0.05)
    return a, b


@needs_netns
def test_killed_host_is_named_by_the_other(hosts, tmp_path, procs):
    a, b = start_loop(hosts, tmp_path, procs, base_env(tmp_path, CDDP_HEARTBEAT_S="3"))
    hosts.kill_all("B")                     # every process of host B, SIGKILL
    rc = a.finish()
    assert rc != 0
    for r in (0, 1):                        # both ranks of host A raised, naming host B
        line = next(ln for ln in a.out.splitlines() if ln.startswith(f"[rank{r}]: rank {r} "
                                                                     f"raised"))
        assert "DistBackendError" in line and "hostB" in line, line
    end = time.monotonic() + 10
    while hosts.pids("A") and time.monotonic() < end:
        time.sleep(0.05)
    assert not hosts.pids("A"), "processes left on host A"


@needs_netns
def test_cut_link_is_noticed_by_heartbeats(hosts, tmp_path, procs):
    # no FIN, no RST: only the heartbeat (2 s here) can tell; the group timeout is 300 s
    a, b = start_loop(hosts, tmp_path, procs, base_env(tmp_path, CDDP_HEARTBEAT_S="2"))
    hosts.sh("ip", "-n", hosts.ns["B"], "link", "set", hosts.dev["B"], "down")
    assert a.finish(timeout=60) != 0 and b.finish(timeout=60) != 0
    for side, p, other in (("A", a, "hostB"), ("B", b, "hostA")):
        raised = [ln for ln in p.out.splitlines() if " raised " in ln]
        assert len(raised) == 2, p.out + p.err
        assert all(other in ln for ln in raised), raised
        assert any("stopped answering: no reply to TCP heartbeats for 2 s" in ln
                   for ln in raised), raised
        assert "timed out" not in " ".join(raised)
    end = time.monotonic() + 10
    while (hosts.pids("A") or hosts.pids("B")) and time.monotonic() < end:
        time.sleep(0.05)
    assert not hosts.pids("A") and not hosts.pids("B"), "processes left behind"


@needs_netns
def test_token_refused_across_hosts(hosts, tmp_path, procs):
    # each host with its own token file (a home that is not shared): node 1 is refused at
    # once and says how to fix it; node 0 names the address it came from
    script = write(tmp_path, "job.py", SLEEPER)
    common = [PY, "-m", "cddp.run", "--nnodes=2", "--nproc-per-node=1",
              f"--master-addr={hosts.addr['A']}", "--master-port=29402"]
    a = procs(hosts.cmd("A", [*common, "--node-rank=0", script]),
              base_env(tmp_path, CDDP_TOKEN_FILE=str(tmp_path / "tokA")), tmp_path)
    b = procs(hosts.cmd("B", [*common, "--node-rank=1", "--token-file", str(tmp_path / "tokB"),
                              script]), base_env(tmp_path), tmp_path)
    assert b.finish() == 1 and a.finish() == 1
    assert f"the token file {tmp_path / 'tokB'}" in b.err and "export CDDP_TOKEN" in b.err
    assert f"the node at {hosts.addr['B']} came with a different CDDP_TOKEN" in a.err
