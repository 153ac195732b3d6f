"""Jobs started by a real SLURM (Debian's slurmctld + slurmd + munge, one node, in the test's
directory; tests/slurm_util.py): `srun -n2 python train.py` with init_process_group() taking
everything from SLURM's variables, the MPI backend under `srun --mpi=pmix`, the launcher inside
an srun step, and a task killed mid-job. Skips, saying why, without root or without SLURM.
Every srun is bounded by a timeout; the cluster and every task it started are removed at the
end whatever happens.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import subprocess_env
from netns_util import Hosts, netns_unavailable
from slurm_util import Cluster, slurm_unavailable

PY = sys.executable
_NO_SLURM = slurm_unavailable()
pytestmark = pytest.mark.skipif(_NO_SLURM is not None, reason=str(_NO_SLURM))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
    assert not c.tasks(), "processes of the SLURM test cluster left behind"


def env(tmp_path, **extra):
    e = subprocess_env(HOME=str(tmp_path), OUT=str(tmp_path), OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "CDDP_TOKEN", "CDDP_TOKEN_FILE", "CDDP_TRANSPORT"):
        e.pop(k, None)
    e.update(extra)
    return e


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


# Every task reports what it was told and what the group computed.
INFO_JOB = """
import json, os, sys
import cddp, cddp.distributed as dist
dist.init_process_group(*sys.argv[1:2])
r, n = dist.get_rank(), dist.get_world_size()
x = cddp.full((5,), float(r + 1))
dist.all_reduce(x)
g = [None] * n
dist.all_gather_object(g, os.getpid())
with open(os.path.join(os.environ["OUT"], f"info{r}.json"), "w") as f:
    json.dump({"rank": r, "world": n, "sum": x.tolist(), "backend": dist.get_backend(),
               "local": os.environ.get("LOCAL_RANK"), "addr": os.environ.get("MASTER_ADDR"),
               "port": os.environ.get("MASTER_PORT"), "pids": g,
               "job": os.environ.get("SLURM_JOB_ID")}, f)
dist.destroy_process_group()
"""


def infos(tmp_path, n):
    return [json.loads((tmp_path / f"info{r}.json").read_text()) for r in range(n)]


def test_srun_init_from_slurm_variables(cluster, tmp_path):
    from cddp.distributed._slurm import default_port
    script = write(tmp_path, "info.py", INFO_JOB)
    r = cluster.srun(["-n3", PY, script], env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr + cluster.log()
    got = infos(tmp_path, 3)
    assert [i["rank"] for i in got] == [0, 1, 2] and {i["world"] for i in got} == {3}
    assert all(i["sum"] == [6.0] * 5 for i in got)                 # 1 + 2 + 3
    assert [i["local"] for i in got] == ["0", "1", "2"]             # SLURM_LOCALID
    # the store is on the first host of SLURM_JOB_NODELIST, on the job's port
    assert {i["addr"] for i in got} == {"localhost"}
    assert {i["port"] for i in got} == {str(default_port(got[0]["job"]))}
    assert len({p for i in got for p in i["pids"]}) == 3            # three processes


def test_srun_mpi_backend(cluster, tmp_path):
    try:
        from cddp import _mpi  # noqa: F401
    except ImportError:
        pytest.skip("cddp was built without MPI (no cddp._mpi)")
    plugins = subprocess.run(["srun", "--mpi=list"], env=cluster.env, capture_output=True,
                             text=True, timeout=30)
    if "pmix" not in plugins.stdout + plugins.stderr:
        pytest.skip("this SLURM has no PMIx plugin (srun --mpi=list)")
    script = write(tmp_path, "info.py", INFO_JOB)
    r = cluster.srun(["-n2", "--mpi=pmix", PY, script, "mpi"], env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr + cluster.log()
    got = infos(tmp_path, 2)
    assert [i["rank"] for i in got] == [0, 1]
    assert {i["backend"] for i in got} == {"mpi"} and all(i["sum"] == [3.0] * 5 for i in got)


# DDP over SLURM's ranks: 2 ranks x 8 samples, 5 SGD steps, weights saved per rank.
DDP_JOB = """
import json, os, socket, sys
import numpy as np
import cddp, cddp.distributed as dist, cddp.nn as nn
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
cddp.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 3)).double()
ddp = nn.parallel.DistributedDataParallel(net)
flat = lambda: np.concatenate([p.detach().numpy().ravel() for p in net.parameters()])
np.save(os.path.join(os.environ["OUT"], f"init{r}.npy"), flat())
rng = np.random.default_rng(5)
X, Y = rng.standard_normal((16, 16)), rng.integers(0, 3, 16)
opt = cddp.optim.SGD(ddp.parameters(), lr=0.3, momentum=0.9)
b = 16 // n
for step in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(ddp(cddp.from_numpy(X[r * b:(r + 1) * b].copy())),
                                       cddp.from_numpy(Y[r * b:(r + 1) * b].copy()))
    loss.backward()
    opt.step()
np.save(os.path.join(os.environ["OUT"], f"w{r}.npy"), flat())
with open(os.path.join(os.environ["OUT"], f"where{r}.json"), "w") as f:
    json.dump([socket.gethostname(), dist.group.WORLD.transport], f)
dist.destroy_process_group()
"""


def one_process_weights(tmp_path):
    """The DDP job as one process over the whole batch of 16: the weights to reach."""
    script = write(tmp_path, "ddp.py", DDP_JOB)
    one = subprocess.run([PY, script], env=env(tmp_path, RANK="0", WORLD_SIZE="1",
                                               MASTER_ADDR="127.0.0.1", MASTER_PORT="0"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    ref = np.load(tmp_path / "w0.npy")
    assert not np.allclose(ref, np.load(tmp_path / "init0.npy"), atol=1e-3)   # it trained
    os.remove(tmp_path / "w0.npy")
    return script, ref


def ddp_weights(tmp_path, n):
    ws = [np.load(tmp_path / f"w{r}.npy") for r in range(n)]
    assert all(np.array_equal(w, ws[0]) for w in ws)                # DDP: ranks agree exactly
    return ws[0], [json.loads((tmp_path / f"where{r}.json").read_text()) for r in range(n)]


def test_srun_ddp_matches_one_process(cluster, tmp_path):
    script, ref = one_process_weights(tmp_path)
    r = cluster.srun(["-n2", PY, script], env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr + cluster.log()
    w, where = ddp_weights(tmp_path, 2)
    assert {t for _, t in where} == {"shm"}
    np.testing.assert_allclose(w, ref, rtol=1e-10, atol=1e-12)      # = one process, batch 16


def test_launcher_inside_an_srun_step(cluster, tmp_path):
    # sbatch's usual shape: one srun task per node runs the launcher, which starts the workers;
    # the workers take RANK / WORLD_SIZE from the launcher, not the step's SLURM_PROCID = 0 of 1
    script = write(tmp_path, "info.py", INFO_JOB)
    r = cluster.srun(["-n1", PY, "-m", "cddp.run", "--nproc-per-node=2", script],
                     env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr + cluster.log()
    got = infos(tmp_path, 2)
    assert [i["rank"] for i in got] == [0, 1] and {i["world"] for i in got} == {2}
    assert all(i["sum"] == [3.0] * 5 for i in got)


# Rank 1 kills itself (SIGKILL) in the middle of the loop; rank 0 must raise naming it.
KILL_JOB = """
import datetime, os, signal, sys, time
import cddp, cddp.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
r = dist.get_rank()
x = cddp.ones(1 << 14)
out = os.environ["OUT"]
try:
    for i in range(100000):
        dist.all_reduce(x)
        x.fill_(1.0)
        if r == 1 and i == 50:
            with open(os.path.join(out, "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
except Exception as e:
    with open(os.path.join(out, f"raised{r}"), "w") as f:
        f.write(f"{time.time()!r}\\n{type(e).__name__}: {e}")
    sys.exit(3)
"""


def test_killed_task_makes_the_other_raise(cluster, tmp_path):
    script = write(tmp_path, "kill.py", KILL_JOB)
    r = cluster.srun(["-n2", PY, script], env=env(tmp_path), cwd=tmp_path, timeout=90)
    assert r.returncode != 0
    killed = float((tmp_path / "killed_at").read_text())
    when, what = (tmp_path / "raised0").read_text().split("\n", 1)
    assert float(when) - killed < 10, f"rank 0 raised {float(when) - killed:.1f}s after the kill"
    assert re.search(r"\brank 1\b", what), what                      # names the dead rank
    assert not cluster.tasks(), "tasks left behind"


# ---- two nodes: a slurmd in each of two network namespaces ---------------------------------

_NO_NETNS = None if _NO_SLURM else netns_unavailable()


@pytest.mark.skipif(_NO_NETNS is not None, reason=str(_NO_NETNS))
def test_srun_ddp_across_two_nodes(tmp_path, tmp_path_factory):
    # `srun -N2 -n4`: SLURM_JOB_NODELIST names hostA and hostB; every task puts the store on
    # hostA (resolved through the nodes' hosts file) and the group runs hierarchical:
    # shared memory inside a node, TCP over the veth between them
    script, ref = one_process_weights(tmp_path)
    hosts = Hosts()
    c = Cluster(tmp_path_factory.mktemp("slurm2"), hosts)
    try:
        hosts.create()
        c.start()
        tx0 = hosts.tx_bytes("A") + hosts.tx_bytes("B")
        r = c.srun(["-N2", "-n4", "--ntasks-per-node=2", PY, script], env=env(tmp_path),
                   cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr + c.log()
        w, where = ddp_weights(tmp_path, 4)
        assert [h for h, _ in where] == ["hostA", "hostA", "hostB", "hostB"]
        assert {t for _, t in where} == {"hier"}
        assert hosts.tx_bytes("A") + hosts.tx_bytes("B") - tx0 > 2 * 5 * 8 * w.size
        # per node, then between nodes: another summation order than one process's
        np.testing.assert_allclose(w, ref, rtol=1e-10, atol=1e-12)
    finally:
        c.stop()
        hosts.destroy()
    assert not c.tasks(), "processes of the SLURM test cluster left behind"
