"""The MPI backend (init_process_group("mpi"), cddp._mpi) under a real `mpirun`.

One mpirun job of 4 ranks runs every check of the backend and each rank writes what it found;
the tests here read those reports. Oracles: NumPy on the same per-rank inputs (every
collective, every dtype and reduce op, sizes 0/1/7/1000), the CPU backend's exact mismatch
messages, and single-process training on the whole batch (DDP). Skipped when cddp was built
without MPI (no cddp._mpi) or mpirun is missing; CI installs Open MPI (.ci/run).
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import subprocess_env
from netns_util import kill_session

MPIRUN = shutil.which("mpirun")


def _have_mpi_ext():
    try:
        from cddp import _mpi  # noqa: F401
        return True
    except ImportError:
        return False


needs_mpi = pytest.mark.skipif(not (_have_mpi_ext() and MPIRUN),
                               reason="cddp was built without MPI (no cddp._mpi: apt-get install "
                                      "libopenmpi-dev openmpi-bin, then rebuild) or mpirun is "
                                      "not on PATH")


def mpirun_env(**extra):
    env = subprocess_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                         OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader,tcp",
                         OMPI_MCA_btl_vader_single_copy_mechanism="none", **extra)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CDDP_TRANSPORT"):
        env.pop(k, None)
    return env


def mpirun(tmp_path, body, n, timeout=180, extra_env=None, args=()):
    """Run `body` on n ranks under mpirun; (returncode, stdout, stderr). Kills the whole job
    (its session: mpirun gives each rank a process group of its own) on timeout."""
    script = tmp_path / "mpi_job.py"
    script.write_text("OUT = %r\n" % str(tmp_path) + textwrap.dedent(body))
    cmd = [MPIRUN, "-np", str(n), *args, sys.executable, str(script)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=mpirun_env(**(extra_env or {})), cwd=tmp_path,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, err = proc.communicate()
        raise AssertionError(f"mpirun timed out after {timeout}s\n{out[-3000:]}\n{err[-3000:]}")
    finally:
        kill_session(proc.pid)          # a rank that outlived mpirun (there should be none)
    return proc.returncode, out, err


# The whole backend on 4 ranks. Each check appends (name, ok, detail) to `res`.
JOB = r"""
import datetime, json, os, sys, time
import numpy as np
import cddp, cddp.distributed as dist, cddp.nn as nn
from cddp.distributed import ReduceOp as R

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
res = []

def check(name, ok, detail=""):
    res.append([name, bool(ok), str(detail)[:400]])

def T(a):
    return cddp.from_numpy(np.ascontiguousarray(a))

DT = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
      "bool": np.bool_}

def inp(rank, size, dt, salt=0):
    v = (np.arange(size) * 7 + rank * 13 + salt) % 5 + 1
    return (v % 2).astype(bool) if dt == "bool" else v.astype(DT[dt])

def npred(op, xs, dt):
    if dt == "bool":
        f = {R.SUM: np.logical_or, R.MAX: np.logical_or, R.BOR: np.logical_or,
             R.PRODUCT: np.logical_and, R.MIN: np.logical_and, R.BAND: np.logical_and,
             R.BXOR: np.logical_xor}[op]
        out = xs[0]
        for x in xs[1:]:
            out = f(out, x)
        return out
    if op in (R.SUM, R.AVG):
        out = sum(xs[1:], xs[0].copy())
        return out / len(xs) if op == R.AVG else out
    f = {R.PRODUCT: np.multiply, R.MIN: np.minimum, R.MAX: np.maximum, R.BAND: np.bitwise_and,
         R.BOR: np.bitwise_or, R.BXOR: np.bitwise_xor}[op]
    out = xs[0]
    for x in xs[1:]:
        out = f(out, x)
    return out

check("backend", dist.get_backend() == "mpi" and dist.group.WORLD.transport == "mpi" and n == 4,
      (dist.get_backend(), dist.group.WORLD.transport, n))

# all_reduce: every dtype and reduce op, sizes 0 / 1 / 7 / 1000
for dt in DT:
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dt.startswith("float") else []) + \
          ([R.BAND, R.BOR, R.BXOR] if dt not in ("float32", "float64") else [])
    for op in ops:
        for size in (0, 1, 7, 1000):
            x = T(inp(r, size, dt))
            dist.all_reduce(x, op=op)
            want = npred(op, [inp(j, size, dt) for j in range(n)], dt)
            check(f"all_reduce {dt} {op.name} {size}", np.allclose(x.numpy(), want, rtol=1e-6),
                  (x.numpy()[:5], want[:5]))

# the narrow dtypes: float16/bfloat16 reduce through user-defined MPI_Ops (each step in float32,
# rounded; these small integers keep every grouping exact), uint8/int8/int16 wrap in their width
NARROW = {"float16": np.float16, "bfloat16": np.float32, "uint8": np.uint8, "int8": np.int8,
          "int16": np.int16}
for dt, npdt in NARROW.items():
    floating = dt in ("float16", "bfloat16")
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if floating else [R.BAND, R.BOR, R.BXOR])
    for op in ops:
        for size in (1, 1000):
            a = [((np.arange(size) * 7 + j * 13) % 5 + 1).astype(npdt) for j in range(n)]
            x = T(a[r].copy())                     # (from_numpy shares: keep a intact)
            x = x.to(cddp.bfloat16) if dt == "bfloat16" else x
            dist.all_reduce(x, op=op)
            want = npred(op, a, dt)
            got = x.float().numpy() if floating else x.numpy()
            if dt == "bfloat16":          # exact products up to 625: bfloat16 keeps 8 bits
                want = T(want.astype(np.float32)).to(cddp.bfloat16).float().numpy()
            check(f"all_reduce {dt} {op.name} {size}", str(x.dtype) == "cddp." + dt and
                  np.array_equal(got, np.asarray(want, dtype=got.dtype)), (got[:5], want[:5]))
    y = T(((np.arange(9) + r) % 5).astype(np.float16))
    y = y.to(cddp.bfloat16) if dt == "bfloat16" else (y if dt == "float16" else y.to(getattr(cddp, dt)))
    dist.broadcast(y, src=2)
    check(f"broadcast {dt}", np.array_equal(y.float().numpy(), (np.arange(9) + 2) % 5), y)

# rooted and gathering collectives, float32 and int64
for dt in ("float32", "int64"):
    for root in range(n):
        x = T(inp(r, 7, dt))
        dist.broadcast(x, src=root)
        check(f"broadcast {dt} root {root}", np.array_equal(x.numpy(), inp(root, 7, dt)))
    x = T(inp(r, 7, dt))
    dist.reduce(x, dst=2, op=R.SUM)
    want = npred(R.SUM, [inp(j, 7, dt) for j in range(n)], dt) if r == 2 else inp(r, 7, dt)
    check(f"reduce {dt}", np.array_equal(x.numpy(), want), (x.numpy(), want))
    outs = [T(np.zeros(7, DT[dt])) for _ in range(n)]
    dist.all_gather(outs, T(inp(r, 7, dt)))
    check(f"all_gather list {dt}", all(np.array_equal(o.numpy(), inp(j, 7, dt))
                                       for j, o in enumerate(outs)))
    flat = T(np.zeros(7 * n, DT[dt]))
    dist.all_gather_into_tensor(flat, T(inp(r, 7, dt)))
    check(f"all_gather_into_tensor {dt}", np.array_equal(
        flat.numpy(), np.concatenate([inp(j, 7, dt) for j in range(n)])))
    gl = [T(np.zeros(7, DT[dt])) for _ in range(n)] if r == 1 else None
    dist.gather(T(inp(r, 7, dt)), gl, dst=1)
    if r == 1:
        check(f"gather {dt}", all(np.array_equal(g.numpy(), inp(j, 7, dt))
                                  for j, g in enumerate(gl)))
    out = T(np.zeros(7, DT[dt]))
    dist.scatter(out, [T(inp(j, 7, dt, 3)) for j in range(n)] if r == 3 else None, src=3)
    check(f"scatter {dt}", np.array_equal(out.numpy(), inp(r, 7, dt, 3)))
    out = T(np.zeros(7, DT[dt]))
    dist.reduce_scatter(out, [T(inp(r, 7, dt, j)) for j in range(n)], op=R.MAX)
    check(f"reduce_scatter {dt}", np.array_equal(
        out.numpy(), npred(R.MAX, [inp(k, 7, dt, r) for k in range(n)], dt)))
    out = T(np.zeros(7, DT[dt]))
    dist.reduce_scatter_tensor(out, T(np.concatenate([inp(r, 7, dt, j) for j in range(n)])))
    check(f"reduce_scatter_tensor {dt}", np.array_equal(
        out.numpy(), npred(R.SUM, [inp(k, 7, dt, r) for k in range(n)], dt)))
    out = T(np.zeros(4 * n, DT[dt]))
    dist.all_to_all_single(out, T(np.arange(4 * n).astype(DT[dt]) + 100 * r))
    want = np.concatenate([np.arange(4 * r, 4 * r + 4) + 100 * j for j in range(n)])
    check(f"all_to_all_single {dt}", np.array_equal(out.numpy(), want), (out.numpy(), want))

# uneven all_to_all (paired send/recv), non-contiguous tensors, barrier
isz = [j + 1 for j in range(n)]
osz = [r + 1] * n
out = T(np.zeros(sum(osz), np.float32))
dist.all_to_all_single(out, T(np.concatenate([np.full(j + 1, r * 10 + j, np.float32)
                                              for j in range(n)])), osz, isz)
check("all_to_all_single uneven", np.array_equal(
    out.numpy(), np.concatenate([np.full(r + 1, j * 10 + r, np.float32) for j in range(n)])))
x = T(np.arange(12, dtype=np.float64).reshape(3, 4) * (r + 1)).t()
dist.all_reduce(x)
check("all_reduce non-contiguous", np.array_equal(
    x.numpy(), (np.arange(12.0).reshape(3, 4) * sum(range(1, n + 1))).T))
dist.barrier()

# async work: several in flight, then waited; futures
xs = [T(np.full(1000, r + k, np.float32)) for k in range(5)]
ws = [dist.all_reduce(x, async_op=True) for x in xs]
fut = ws[-1].get_future()
for w in ws:
    w.wait()
check("async all_reduce", all(np.all(x.numpy() == sum(j + k for j in range(n)))
                              for k, x in enumerate(xs)) and ws[0].is_completed())
check("future", np.all(fut.wait()[0].numpy() == sum(j + 4 for j in range(n))))

# point to point: tags, out-of-order receives, batch_isend_irecv
nxt, prv = (r + 1) % n, (r - 1) % n
a1, a2 = T(np.full(3, r, np.int32)), T(np.full(5, r * 2.0, np.float64))
b1, b2 = T(np.zeros(3, np.int32)), T(np.zeros(5, np.float64))
s1 = dist.isend(a1, nxt, tag=1)
s2 = dist.isend(a2, nxt, tag=2)
q2 = dist.irecv(b2, prv, tag=2)      # tag 2 first, though sent second
q1 = dist.irecv(b1, prv, tag=1)
for w in (s1, s2, q1, q2):
    w.wait()
check("isend/irecv tags", np.all(b1.numpy() == prv) and np.all(b2.numpy() == prv * 2.0))
c = T(np.zeros(4, np.float32))
ops = [dist.P2POp(dist.isend, T(np.full(4, r, np.float32)), nxt, tag=3),
       dist.P2POp(dist.irecv, c, prv, tag=3)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
check("batch_isend_irecv", np.all(c.numpy() == prv))
if r == 0:
    dist.send(T(np.arange(6, dtype=np.float32)), 1)
elif r == 1:
    z = T(np.zeros(6, np.float32))
    check("send/recv", dist.recv(z, 0) == 0 and np.array_equal(z.numpy(), np.arange(6)))
# recv without src (MPI_ANY_SOURCE through MPI_Iprobe): rank 0 hears from every other rank
if r == 0:
    heard = {}
    for _ in range(n - 1):
        z = T(np.zeros(2, np.float32))
        s_ = dist.recv(z, tag=11)
        heard[s_] = z.numpy().tolist()
    check("send/recv any source", heard == {j: [j, j] for j in range(1, n)}, heard)
else:
    dist.send(T(np.full(2, r, np.float32)), 0, tag=11)

# subgroups (MPI_Comm_split): every rank calls new_group, in the same order
ge, go = dist.new_group([0, 2]), dist.new_group([1, 3])
mine = ge if r % 2 == 0 else go
other = go if r % 2 == 0 else ge
check("new_group membership", mine != dist.GroupMember.NON_GROUP_MEMBER and
      other == dist.GroupMember.NON_GROUP_MEMBER and dist.get_world_size(mine) == 2)
x = T(np.full(4, float(r), np.float32))
dist.all_reduce(x, group=mine)
check("subgroup all_reduce", np.all(x.numpy() == (2.0 if r % 2 == 0 else 4.0)), x.numpy())
y = T(np.full(2, float(r), np.float32))
dist.broadcast(y, src=3 if r % 2 else 2, group=mine)
check("subgroup broadcast (global src)", np.all(y.numpy() == (3.0 if r % 2 else 2.0)))
objs = [None] * n
dist.all_gather_object(objs, {"rank": r, "t": (r, "x")})
check("all_gather_object", objs == [{"rank": j, "t": (j, "x")} for j in range(n)], objs)

# mismatches: the CPU backend's messages, and the group stays usable afterwards
def err_of(fn):
    try:
        fn()
    except Exception as e:        # noqa: BLE001
        return type(e).__name__, str(e)
    return None, ""

e = err_of(lambda: dist.all_reduce(T(np.zeros(3 + (r == 2), np.float32))))
check("mismatch count", e[0] == "DistBackendError" and
      "rank 2 passed 4 float32 elements, rank 0 passed 3" in e[1], e)
e = err_of(lambda: dist.all_reduce(T(np.zeros(3, np.float64 if r == 1 else np.float32))))
check("mismatch dtype", "rank 1 passed float64 tensors, rank 0 passed float32" in e[1], e)
e = err_of(lambda: dist.broadcast(T(np.zeros(3, np.float32)), src=0) if r != 3 else
           dist.all_reduce(T(np.zeros(3, np.float32))))
check("mismatch op", "rank 3 called all_reduce, rank 0 called broadcast" in e[1], e)
e = err_of(lambda: dist.broadcast(T(np.zeros(3, np.float32)), src=1 if r == 3 else 0))
check("mismatch root", "rank 3 passed root rank 1, rank 0 passed 0" in e[1], e)
e = err_of(lambda: dist.all_reduce(T(np.zeros(3, np.float32)), op=R.MAX if r == 1 else R.SUM))
check("mismatch reduce op", "rank 1 passed op=ReduceOp.MAX, rank 0 passed op=ReduceOp.SUM"
      in e[1], e)
x = T(np.ones(3, np.float32))
dist.all_reduce(x)
check("usable after mismatches", np.all(x.numpy() == n))
if r in (0, 1):
    if r == 0:
        dist.send(T(np.zeros(5, np.float32)), 1, tag=9)
    else:
        e = err_of(lambda: dist.recv(T(np.zeros(4, np.float32)), 0, tag=9))
        check("recv size mismatch", "rank 0 sent more than the 4 float32 elements" in e[1], e)
e = err_of(lambda: dist.send(T(np.zeros(1, np.float32)), (r + 1) % n, tag=-1))
check("negative tag", "Tag must be nonnegative" in e[1], e)     # torch's check, before MPI

# DDP on the MPI backend: 4 ranks x 8 samples == one process on the 32 samples
cddp.manual_seed(0)
net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
ref = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
ref.load_state_dict(net.state_dict())
ddp = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.0001)
rng = np.random.default_rng(1)
X = rng.standard_normal((32, 6)).astype(np.float32)
Y = rng.integers(0, 3, 32)
opt = cddp.optim.SGD(ddp.parameters(), lr=0.5)
opt_ref = cddp.optim.SGD(ref.parameters(), lr=0.5)
for step in range(4):
    opt.zero_grad()
    nn.functional.cross_entropy(ddp(T(X[r * 8:(r + 1) * 8])), T(Y[r * 8:(r + 1) * 8])).backward()
    opt.step()
    opt_ref.zero_grad()
    nn.functional.cross_entropy(ref(T(X)), T(Y)).backward()
    opt_ref.step()
w = np.concatenate([p.detach().numpy().ravel() for p in net.parameters()])
wr = np.concatenate([p.detach().numpy().ravel() for p in ref.parameters()])
check("DDP == full batch", np.allclose(w, wr, rtol=1e-5, atol=1e-6), np.abs(w - wr).max())
ws_all = [None] * n
dist.all_gather_object(ws_all, [float(v) for v in w])
check("DDP weights identical on every rank", all(v == ws_all[0] for v in ws_all))

# a rank that never arrives: a timeout on the waiting rank, not a hang
g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=1))
if r == 0:
    t0 = time.monotonic()
    e = err_of(lambda: dist.all_reduce(T(np.ones(3, np.float32)), group=g))
    check("timeout", e[0] == "DistTimeoutError" and "rank 0 timed out after 1.0 s waiting for "
          "the other ranks to call it" in e[1], e)
    e = err_of(lambda: dist.all_reduce(T(np.ones(3, np.float32)), group=g))
    check("broken after timeout", "the process group failed earlier" in e[1], e)
dist.barrier()
dist.destroy_process_group()
with open(os.path.join(OUT, f"res{r}.json"), "w") as f:
    json.dump(res, f)
print(f"rank {r} wrote {len(res)} checks", flush=True)
"""


# the data ops as the library's blocking calls on the worker thread (the default), and as
# non-blocking ones driven under the group's deadline (CDDP_MPI_BLOCKING=0)
@pytest.fixture(scope="module", params=["blocking", "nonblocking"])
def backend_run(tmp_path_factory, request):
    if not (_have_mpi_ext() and MPIRUN):
        pytest.skip("no MPI")
    d = tmp_path_factory.mktemp("mpi")
    rc, out, err = mpirun(d, JOB, 4, extra_env={
        "CDDP_MPI_BLOCKING": "1" if request.param == "blocking" else "0"})
    assert rc == 0, f"mpirun exited {rc}\n{out[-3000:]}\n{err[-5000:]}"
    res = {}
    for r in range(4):
        with open(d / f"res{r}.json") as f:
            res[r] = json.load(f)
    return res


@needs_mpi
@pytest.mark.parametrize("group", ["all_reduce", "broadcast", "reduce", "gather", "scatter",
                                   "all_to_all", "async", "future", "isend", "batch_isend",
                                   "send/recv", "new_group", "subgroup", "all_gather_object",
                                   "mismatch", "usable", "recv size", "negative tag", "DDP",
                                   "timeout", "broken", "backend"])
def test_backend_checks(backend_run, group):
    seen = 0
    for r, res in backend_run.items():
        for name, ok, detail in res:
            if name.startswith(group):
                seen += 1
                assert ok, f"rank {r}: {name}: {detail}"
    assert seen, f"no check named {group}* ran"


@needs_mpi
def test_every_check_passed_on_every_rank(backend_run):
    counts = {r: len(v) for r, v in backend_run.items()}
    bad = [(r, n, d) for r, res in backend_run.items() for n, ok, d in res if not ok]
    assert not bad, bad[:10]
    assert min(counts.values()) > 150, counts


@needs_mpi
def test_uncaught_exception_ends_the_job(tmp_path):
    # rank 1 raises while rank 0 waits in a collective with a long timeout: the rank exits
    # non-zero without MPI_Finalize, so mpirun stops the job instead of leaving rank 0 waiting
    rc, out, err = mpirun(tmp_path, """
    import datetime, time, cddp, cddp.distributed as dist
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=600))
    if dist.get_rank() == 1:
        raise ValueError("boom on rank 1")
    dist.all_reduce(cddp.ones(3))
    """, 2, timeout=120)
    assert rc != 0
    assert "ValueError: boom on rank 1" in err


@needs_mpi
def test_finalize_at_exit_and_second_init(tmp_path):
    rc, out, err = mpirun(tmp_path, """
    import sys, cddp, cddp.distributed as dist
    dist.init_process_group("mpi")
    dist.destroy_process_group()
    dist.init_process_group("mpi", world_size=7)      # warns: MPI decides
    x = cddp.ones(2)
    dist.all_reduce(x)
    # one write per rank: mpirun forwards each rank's chunks as they come, so print's
    # separate writes of two ranks can interleave
    sys.stdout.write(f"sum {x.tolist()} {dist.is_mpi_available()}\\n")
    sys.stdout.flush()
    """, 2, timeout=120)
    assert rc == 0, err
    assert out.count("sum [2.0, 2.0] True") == 2
    assert "world_size (7) and rank (-1) are ignored" in err


def test_missing_extension_says_how_to_get_it(monkeypatch):
    import cddp.distributed.distributed_c10d as c10d
    monkeypatch.setattr(c10d, "_mpi_module", lambda: None)
    assert c10d.is_mpi_available() is False
    with pytest.raises(RuntimeError, match="apt-get install libopenmpi-dev"):
        c10d.init_process_group("mpi")
    assert not c10d.is_initialized()


def test_backend_names():
    import cddp.distributed as dist
    assert dist.Backend("MPI") == dist.Backend.MPI == "mpi"
    assert dist.is_mpi_available() == _have_mpi_ext()
