"""The process-group engine's behaviour beyond values: failures (a SIGKILLed peer, mismatched
ops, a stuck peer, shutdown with work in flight), Work handles, subgroups, init errors, and a
smoke run of bench/collectives.py. Real processes on one host; every launch has a timeout.
"""
import datetime
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from _teststore import DirStore, ROOT, init_group, run_ranks

TRANSPORTS = [{}, {"CDDP_TRANSPORT": "tcp"}]
TIDS = ["shm", "tcp"]


def _err(res, r):
    assert "error" in res[r], f"rank {r} did not raise: {res[r]}"
    return res[r]["error"]


# ---- a peer dies ------------------------------------------------------------------------------

ATTEMPTS = 20


def _kill_child(rank, n, d, mode, victim, ranks_per_host=0):
    """Everyone but `victim` blocks in all_reduce; the victim SIGKILLs itself, either before
    entering it ("idle") or in the middle of a large one ("mid")."""
    if ranks_per_host:
        os.environ["CDDP_HOST_ID"] = f"host{rank // ranks_per_host}"
    import cddp
    dist = init_group(rank, n, d, timeout=30)
    x = cddp.from_numpy(np.ones(1 << 24, np.float32) if mode == "mid" else np.ones(4, np.float32))
    dist.all_reduce(x)             # everyone healthy first
    # a rank leaving an all_reduce does not mean every rank has left it: the victim waits
    # until all have, so that no survivor is aborted inside the healthy op
    open(os.path.join(d, f"healthy.{rank}"), "w").close()
    if rank == victim:
        deadline = time.monotonic() + 30
        while sum(os.path.exists(os.path.join(d, f"healthy.{r}")) for r in range(n)) < n:
            assert time.monotonic() < deadline, "the other ranks never left the healthy all_reduce"
            time.sleep(0.001)
        if mode == "mid":
            # 64 MiB takes tens of ms, but a loaded machine can stretch a short sleep past
            # that: start ops until one is still running when the victim dies
            for _ in range(ATTEMPTS):
                w = dist.all_reduce(x, async_op=True)
                time.sleep(0.002)
                if not w.is_completed():
                    break
        else:
            time.sleep(0.3)
        with open(os.path.join(d, "killed"), "w") as f:
            f.write(repr(time.time()))
            f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(ATTEMPTS):  # the survivors match the victim's ops until one fails
            dist.all_reduce(x)
        return "no error"
    except RuntimeError as e:
        t = time.time()
        time.sleep(0.5)            # like a real program reporting: do not vanish at once
        with open(os.path.join(d, "killed")) as f:
            return {"msg": str(e), "latency": t - float(f.read())}


@pytest.mark.parametrize("env", TRANSPORTS, ids=TIDS)
@pytest.mark.parametrize("n,mode", [(2, "idle"), (3, "idle"), (4, "mid"), (2, "mid")])
def test_sigkilled_peer_fails_every_survivor_fast(n, mode, env):
    victim = 1
    res = run_ranks(n, "test_pg:_kill_child", args=(mode, victim), env=env, timeout=60)
    assert "died" in res[victim]
    lat = []
    for r in range(n):
        if r == victim:
            continue
        out = res[r].get("ok")
        assert isinstance(out, dict), f"rank {r}: {res[r]}"
        assert "rank 1" in out["msg"] and "exited" in out["msg"], out["msg"]
        assert "all_reduce #" in out["msg"]
        lat.append(out["latency"])
    print(f"\n[{n} ranks, {mode}, {env or 'shm'}] detection latency: "
          + ", ".join(f"{x * 1e3:.1f} ms" for x in lat))
    # the issue asks for 0.5 s; allow CI noise on a 2-core machine
    assert max(lat) < 1.0, lat


@pytest.mark.parametrize("victim", [1, 2])
def test_sigkilled_peer_hierarchical(victim):
    """Two simulated hosts of two ranks: a non-leader (1) or a leader (2) dies mid all_reduce;
    its host-mates learn through shared memory, the other host through TCP."""
    res = run_ranks(4, "test_pg:_kill_child", args=("mid", victim, 2), timeout=60)
    assert "died" in res[victim]
    lat = []
    for r in range(4):
        if r == victim:
            continue
        out = res[r].get("ok")
        assert isinstance(out, dict), f"rank {r}: {res[r]}"
        # across (simulated) hosts there is no pidfd: a vanished peer "closed its connection"
        assert f"rank {victim}" in out["msg"] and any(
            w in out["msg"] for w in ("exited", "failed", "closed its connection")), out["msg"]
        lat.append(out["latency"])
    print(f"\n[hier, victim {victim}] detection latency: " + ", ".join(f"{x * 1e3:.1f} ms" for x in lat))
    assert max(lat) < 1.0, lat


# ---- ranks disagree ---------------------------------------------------------------------------

def _mismatch_child(rank, n, d):
    import cddp
    dist = init_group(rank, n, d, timeout=20)
    T = cddp.from_numpy
    out = {}
    dist.barrier()
    try:                                            # sizes (collective #2)
        dist.all_reduce(T(np.ones(1000 if rank == 0 else 2000, np.float32)))
        out["size"] = "no error"
    except RuntimeError as e:
        out["size"] = str(e)
    x = T(np.full(5, rank + 1.0, np.float32))       # the group still works afterwards
    dist.all_reduce(x)
    out["after"] = x.numpy().tolist()
    try:                                            # op kinds
        if rank == 0:
            dist.broadcast(T(np.ones(10, np.float32)), src=0)
        else:
            dist.all_reduce(T(np.ones(10, np.float32)))
        out["op"] = "no error"
    except RuntimeError as e:
        out["op"] = str(e)
    try:                                            # dtypes
        dist.all_reduce(T(np.ones(10, np.float32 if rank == 0 else np.float64)))
        out["dtype"] = "no error"
    except RuntimeError as e:
        out["dtype"] = str(e)
    try:                                            # roots
        dist.broadcast(T(np.ones(3, np.float32)), src=rank)
        out["root"] = "no error"
    except RuntimeError as e:
        out["root"] = str(e)
    w = dist.all_reduce(T(np.ones(7 if rank == 0 else 8, np.int64)), async_op=True)
    try:
        w.wait()
    except RuntimeError:
        pass
    out["async_exc"] = repr(w.exception())
    x = T(np.full(5, rank + 1.0, np.float32))
    dist.all_reduce(x)
    out["after2"] = x.numpy().tolist()
    return out


@pytest.mark.parametrize("env", TRANSPORTS, ids=TIDS)
@pytest.mark.parametrize("n", [2, 3])
def test_mismatch_raises_on_every_rank(n, env):
    res = run_ranks(n, "test_pg:_mismatch_child", env=env, timeout=60)
    for r in range(n):
        out = res[r].get("ok")
        assert out, f"rank {r}: {res[r]}"
        assert out["size"] == ("all_reduce #2: rank 1 passed 2000 float32 elements, rank 0 "
                               "passed 1000"), out["size"]
        want = float(sum(range(1, n + 1)))
        assert out["after"] == [want] * 5 and out["after2"] == [want] * 5
        assert out["op"] == "collective #4: rank 1 called all_reduce, rank 0 called broadcast"
        assert out["dtype"] == "all_reduce #5: rank 1 passed float64 tensors, rank 0 passed float32"
        assert out["root"] == "broadcast #6: rank 1 passed root rank 1, rank 0 passed 0"
        assert "rank 1 passed 8 int64 elements, rank 0 passed 7" in out["async_exc"]


# ---- a live but stuck peer; shutdown with work in flight ---------------------------------------

def _stuck_child(rank, n, d):
    import cddp
    dist = init_group(rank, n, d, timeout=1.0)
    x = cddp.from_numpy(np.ones(4, np.float32))
    dist.all_reduce(x)
    if rank == 1:
        time.sleep(1.6)            # not calling the collective, but alive
        t0 = time.monotonic()
        try:
            dist.all_reduce(x)
            return "no error"
        except RuntimeError as e:
            return {"msg": str(e), "t": time.monotonic() - t0}
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        return "no error"
    except RuntimeError as e:
        return {"msg": str(e), "t": time.monotonic() - t0, "timeout": isinstance(e, TimeoutError)}


@pytest.mark.parametrize("env", TRANSPORTS, ids=TIDS)
def test_stuck_peer_raises_at_group_timeout(env):
    res = run_ranks(2, "test_pg:_stuck_child", env=env, timeout=60)
    r0, r1 = res[0].get("ok"), res[1].get("ok")
    assert isinstance(r0, dict), res[0]
    assert "timed out after 1.0 s waiting for rank 1" in r0["msg"], r0
    assert r0["timeout"] and 0.95 < r0["t"] < 2.5, r0
    assert isinstance(r1, dict), res[1]
    assert r1["t"] < 1.0, r1           # the late rank learns at once, not after its own timeout


def _shutdown_child(rank, n, d):
    import cddp
    dist = init_group(rank, n, d, timeout=30)
    x = cddp.from_numpy(np.ones(4, np.float32))
    dist.barrier()
    if rank == 0:
        w = dist.all_reduce(x, async_op=True)        # rank 1 never joins
        time.sleep(0.2)
        t0 = time.monotonic()
        dist.distributed_c10d._world.default._c.shutdown(0.1)
        dt = time.monotonic() - t0
        try:
            w.wait()
            return "no error"
        except RuntimeError as e:
            return {"msg": str(e), "t": dt}
    time.sleep(1.0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        return "no error"
    except RuntimeError as e:
        return {"msg": str(e), "t": time.monotonic() - t0}


@pytest.mark.parametrize("env", TRANSPORTS, ids=TIDS)
def test_shutdown_aborts_inflight_work(env):
    res = run_ranks(2, "test_pg:_shutdown_child", env=env, timeout=60)
    r0, r1 = res[0].get("ok"), res[1].get("ok")
    assert isinstance(r0, dict) and "shut down" in r0["msg"] and r0["t"] < 2.0, res[0]
    assert isinstance(r1, dict) and r1["t"] < 2.0, res[1]


def _interrupt_child(rank, n, d):
    import threading
    import cddp
    dist = init_group(rank, n, d, timeout=30)
    x = cddp.from_numpy(np.ones(4, np.float32))
    dist.barrier()
    if rank == 0:                  # blocked in a sync all_reduce rank 1 never joins; Ctrl-C
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            dist.all_reduce(x)
            return "no error"
        except KeyboardInterrupt:
            return {"t": time.monotonic() - t0}
    time.sleep(1.0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        return "no error"
    except RuntimeError as e:
        return {"msg": str(e), "t": time.monotonic() - t0}


@pytest.mark.parametrize("env", TRANSPORTS, ids=TIDS)
def test_ctrl_c_interrupts_a_blocked_collective(env):
    res = run_ranks(2, "test_pg:_interrupt_child", env=env, timeout=60)
    r0, r1 = res[0].get("ok"), res[1].get("ok")
    assert isinstance(r0, dict) and 0.25 < r0["t"] < 1.5, res[0]
    assert isinstance(r1, dict) and "rank 0 aborted" in r1["msg"] and r1["t"] < 1.0, res[1]


# ---- Work handles -----------------------------------------------------------------------------

def _work_child(rank, n, d):
    import cddp
    dist = init_group(rank, n, d, timeout=20)
    out = {}
    x = cddp.from_numpy(np.full(100, rank + 1.0, np.float32))
    if rank == 1:
        time.sleep(0.5)
    w = dist.all_reduce(x, async_op=True)
    if rank == 0:
        out["early_completed"] = w.is_completed()
        try:
            w.wait(timeout=0.05)
            out["wait_timeout"] = "no error"
        except TimeoutError as e:
            out["wait_timeout"] = str(e)
        w.wait(datetime.timedelta(seconds=10))
    out["wait"] = w.wait()
    out["completed"] = w.is_completed() and w.is_success()
    out["exception"] = w.exception()
    out["value"] = x.numpy()[0].item()
    out["result_is_x"] = w.result()[0] is x
    # a dropped Work keeps its tensor alive until the op ends
    y = cddp.from_numpy(np.full(1 << 16, 1.0, np.float32))
    dist.all_reduce(y, async_op=True)
    ref = y.numpy()
    del y
    dist.barrier()
    out["dropped"] = float(ref[0])
    # torch.futures-style chaining, as DDP comm hooks use it
    z = cddp.from_numpy(np.full(4, rank + 1.0, np.float32))
    fut = dist.all_reduce(z, async_op=True).get_future()
    halved = fut.then(lambda f: [float(v) / 2 for v in f.value()[0].numpy()])
    seen = []
    fut.add_done_callback(lambda f: seen.append(f.done()))
    out["future"] = halved.wait()
    out["future_done"] = fut.done() and halved.done() and seen == [True]
    ws = [dist.broadcast(cddp.from_numpy(np.full(10, float(rank), np.float32)), src=k % n,
                         async_op=True) for k in range(20)]
    out["many"] = [w.result()[0].numpy()[0].item() for w in ws if w.wait()]
    return out


def test_async_work_handles():
    res = run_ranks(2, "test_pg:_work_child", timeout=60)
    r0 = res[0].get("ok")
    assert r0, res[0]
    assert r0["early_completed"] is False
    assert "still running after 0.050 s" in r0["wait_timeout"]
    for r in range(2):
        out = res[r]["ok"]
        assert out["wait"] is True and out["completed"] and out["exception"] is None
        assert out["value"] == 3.0 and out["result_is_x"]
        assert out["dropped"] == 2.0
        assert out["many"] == [float(k % 2) for k in range(20)]
        assert out["future"] == [1.5] * 4 and out["future_done"]


# ---- subgroups ----------------------------------------------------------------------------------

def _subgroup_child(rank, n, d):
    import cddp
    dist = init_group(rank, n, d, timeout=20)
    T = cddp.from_numpy
    evens = dist.new_group([0, 2])
    odds = dist.new_group([1, 3])
    everyone = dist.new_group()
    mine = evens if rank % 2 == 0 else odds
    other = odds if rank % 2 == 0 else evens
    out = {"other_is_nonmember": other == dist.GroupMember.NON_GROUP_MEMBER,
           "sub_rank": dist.get_rank(mine), "sub_size": dist.get_world_size(mine),
           "other_rank": dist.get_rank(other), "ranks": dist.get_process_group_ranks(mine)}
    x = T(np.full(3, float(rank), np.float32))
    dist.all_reduce(x, group=mine)
    out["sum"] = x.numpy().tolist()
    y = T(np.full(2, float(rank), np.float32))
    dist.broadcast(y, src=3 if rank % 2 else 2, group=mine)      # global rank, as torch
    out["bcast"] = y.numpy().tolist()
    z = T(np.full(2, float(rank), np.float32))
    dist.broadcast(z, group_src=0, group=mine)
    out["bcast_group_src"] = z.numpy().tolist()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out["nonmember_call"] = dist.all_reduce(T(np.ones(1, np.float32)), group=other)
        out["warned"] = any("does not belong" in str(w.message) for w in rec)
    try:
        dist.broadcast(T(np.ones(1, np.float32)), src=1 - rank % 2 + 2 * 0, group=mine)
        out["bad_src"] = "no error"
    except ValueError as e:
        out["bad_src"] = str(e)
    a = T(np.full(2, 1.0, np.float32))
    dist.all_reduce(a, group=everyone)
    out["everyone"] = a.numpy().tolist()
    b = T(np.full(2, float(rank), np.float32))
    dist.all_reduce(b)                 # the default group is unaffected
    out["world"] = b.numpy().tolist()
    dist.destroy_process_group(mine)
    dist.barrier()
    return out


def test_subgroups():
    res = run_ranks(4, "test_pg:_subgroup_child", timeout=90)
    for r in range(4):
        out = res[r].get("ok")
        assert out, f"rank {r}: {res[r]}"
        assert out["other_is_nonmember"] and out["other_rank"] == -1
        assert out["sub_rank"] == r // 2 and out["sub_size"] == 2
        assert out["ranks"] == ([0, 2] if r % 2 == 0 else [1, 3])
        assert out["sum"] == [2.0] * 3 if r % 2 == 0 else out["sum"] == [4.0] * 3
        assert out["bcast"] == [2.0 if r % 2 == 0 else 3.0] * 2
        assert out["bcast_group_src"] == [0.0 if r % 2 == 0 else 1.0] * 2
        assert out["nonmember_call"] is None and out["warned"]
        assert "is not part of group" in out["bad_src"]
        assert out["everyone"] == [4.0, 4.0] and out["world"] == [6.0, 6.0]


# ---- ranks that disagree on a group's members ------------------------------------------------

DISAGREE_ROUNDS = 8


def _disagree_child(rank, n, d, rounds):
    """Rank 0 asks for [0, 1], the others for [0, 1, 2], `rounds` times: each round must raise
    DistBackendError on every rank naming both lists (it used to SIGSEGV ranks 1 and 2 in about
    half the rounds: the shm attach read the segment header after unmapping it)."""
    dist = init_group(rank, n, d, timeout=5)
    msgs = []
    for _ in range(rounds):
        try:
            dist.new_group([0, 1] if rank == 0 else [0, 1, 2])
            msgs.append("no error")
        except dist.DistBackendError as e:
            msgs.append(str(e))
    dist.barrier()                 # the world group still works after the refusals
    return msgs


@pytest.mark.parametrize("env", TRANSPORTS, ids=TIDS)
def test_new_group_member_disagreement_raises_on_every_rank(env):
    res = run_ranks(3, "test_pg:_disagree_child", args=(DISAGREE_ROUNDS,), env=env, timeout=90)
    for r in range(3):
        msgs = res[r].get("ok")
        assert msgs is not None, f"rank {r}: {res[r]}"
        assert len(msgs) == DISAGREE_ROUNDS
        for m in msgs:
            assert "disagree on the group's members" in m, m
            assert "rank 0 passed [0, 1]" in m and "ranks 1, 2 passed [0, 1, 2]" in m, m


def _size_mismatch_child(rank, n, d):
    """The same disagreement one level down: ProcessGroupCPU itself (no new_group check) with
    rank 0 in a group of 2 and ranks 1, 2 in a group of 3 under one name. Every rank must get
    an exception (the rendezvous's size check, or the store's timeout when the two sizes make
    the ranks count generations differently), never a crash."""
    import cddp.distributed  # noqa: F401 — the exception classes
    from cddp.distributed.distributed_c10d import ProcessGroupCPU
    size = 2 if rank == 0 else 3
    try:
        ProcessGroupCPU(DirStore(d, timeout=3), rank, size, 3.0, "mismatch")
        return "no error"
    except Exception as e:         # noqa: BLE001 — which one depends on the arrival order
        return f"{type(e).__name__}: {e}"


def test_process_group_size_disagreement_never_crashes():
    for _ in range(3):
        res = run_ranks(3, "test_pg:_size_mismatch_child", timeout=60)
        for r in range(3):
            assert "ok" in res[r], f"rank {r}: {res[r]}"
            assert res[r]["ok"] != "no error", res[r]


def _forged_segment_child(rank, n, d):
    """Rank 1 of 2 attaches to a segment whose header describes a group of 3 (a forged or
    stale segment): a clear error naming both sizes, not a read of the unmapped header."""
    import socket
    import struct
    import cddp.distributed  # noqa: F401 — the exception classes
    from cddp.distributed.distributed_c10d import ProcessGroupCPU
    pid, nonce = os.getpid(), 0x5eed0000 + os.getpid()
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    host = socket.gethostname().replace(" ", "_")
    store = DirStore(d, timeout=5)
    store.set("cddp/pg/forged/0/info/0", f"{pid} {host} {boot} 127.0.0.1 0 {nonce:016x} 2")
    path = f"/dev/shm/cddp-{pid}-{nonce:016x}"
    hdr = struct.pack("<QQqQ", 0x3170646463, 0, 3, 4096)     # magic, nonce, size 3, total
    with open(path, "wb") as f:
        f.write(hdr.ljust(4096, b"\0"))
    try:
        ProcessGroupCPU(store, 1, 2, 5.0, "forged")
        return "no error"
    except RuntimeError as e:
        return str(e)
    finally:
        os.unlink(path)


def test_forged_segment_of_another_size_is_refused():
    res = run_ranks(1, "test_pg:_forged_segment_child", timeout=60)
    msg = res[0].get("ok")
    assert msg is not None, res[0]
    assert "describes a group of 3 ranks" in msg and "expects 2 ranks" in msg, msg


# ---- /dev/shm: segments of killed creators ---------------------------------------------------

def _creator_script(d, name):
    """A rank 0 of 2 whose rank 1 (a fake entry: this test's pid, alive) never attaches: it
    creates the segment and waits in group creation until killed."""
    return f"""
import os, socket, sys
sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'tests')!r}]
import cddp.distributed
from cddp.distributed.distributed_c10d import ProcessGroupCPU
from _teststore import DirStore
with open("/proc/sys/kernel/random/boot_id") as f:
    boot = f.read().strip()
host = socket.gethostname().replace(" ", "_")
st = DirStore({d!r}, timeout=60)
st.set("cddp/pg/{name}/0/info/1", f"{{os.getppid()}} {{host}} {{boot}} 127.0.0.1 0 {{1:016x}} 2")
ProcessGroupCPU(st, 0, 2, 60.0, {name!r})
"""


def _wait_segment(pid, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        segs = [f for f in os.listdir("/dev/shm") if f.startswith(f"cddp-{pid}-")]
        if segs:
            return segs
        time.sleep(0.02)
    raise AssertionError(f"no /dev/shm/cddp-{pid}-* segment appeared within {timeout} s")


def test_killed_creators_segment_is_swept_at_next_init(tmp_path):
    """SIGKILL rank 0 while it waits for the others to attach: its cddp-<pid>-<nonce> segment
    survives the kill, and the next group creation on this machine removes it. A segment whose
    creator is alive (a second, waiting creator) is left alone."""
    procs = []
    try:
        for name in ("victim", "alive"):
            procs.append(subprocess.Popen([sys.executable, "-c", _creator_script(str(tmp_path), name)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        victim, alive = procs
        dead_segs, live_segs = _wait_segment(victim.pid), _wait_segment(alive.pid)
        victim.kill()
        victim.wait()
        assert all(os.path.exists(f"/dev/shm/{f}") for f in dead_segs)   # the leak itself
        # next init: any group whose rank 0 creates a segment (here a single-rank one)
        from cddp.distributed.distributed_c10d import ProcessGroupCPU
        pg = ProcessGroupCPU(DirStore(str(tmp_path / "next")), 0, 1, 10.0, "next")
        pg.shutdown()
        assert not any(os.path.exists(f"/dev/shm/{f}") for f in dead_segs)
        assert all(os.path.exists(f"/dev/shm/{f}") for f in live_segs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    # the live creator was killed too: the next init takes its segment as well
    from cddp.distributed.distributed_c10d import ProcessGroupCPU
    ProcessGroupCPU(DirStore(str(tmp_path / "again")), 0, 1, 10.0, "again").shutdown()
    assert not any(os.path.exists(f"/dev/shm/{f}") for f in live_segs)


# ---- p2p, monitored barrier -----------------------------------------------------------------------

def _p2p_child(rank, n, d):
    import cddp
    dist = init_group(rank, n, d, timeout=20)
    T = cddp.from_numpy
    out = {}
    big = 1 << 20                  # both directions at once, larger than any buffer
    s, r_ = T(np.full(big, float(rank), np.float32)), T(np.zeros(big, np.float32))
    ws = [dist.isend(s, 1 - rank), dist.irecv(r_, 1 - rank)]
    for w in ws:
        w.wait()
    out["exchange"] = float(r_.numpy().mean())
    ops = [dist.P2POp(dist.isend, T(np.full(3, rank + 10.0, np.float32)), 1 - rank),
           dist.P2POp(dist.irecv, T(np.zeros(3, np.float32)), 1 - rank)]
    reqs = dist.batch_isend_irecv(ops)
    for q in reqs:
        q.wait()
    out["batch"] = ops[1].tensor.numpy().tolist()
    # several messages in flight to one peer arrive in order; zero-length ones too
    sizes = [0, 5, 1 << 15, 3]
    if rank == 0:
        ws = [dist.isend(T(np.arange(m, dtype=np.int64) + k), 1, tag=k) for k, m in enumerate(sizes)]
    else:
        outs = [T(np.zeros(m, np.int64)) for m in sizes]
        ws = [dist.irecv(o, 0, tag=k) for k, o in enumerate(outs)]
    for w in ws:
        w.wait()
    if rank == 1:
        out["fifo"] = all(np.array_equal(o.numpy(), np.arange(m) + k)
                          for k, (o, m) in enumerate(zip(outs, sizes)))
    try:
        if rank == 0:
            dist.send(T(np.ones(4, np.float32)), 1, tag=1)
        else:
            dist.recv(T(np.ones(4, np.float32)), 0, tag=2)
        out["tag"] = "no error"
    except RuntimeError as e:
        out["tag"] = str(e)
    return out


@pytest.mark.parametrize("env", [{"CDDP_SHM_P2P": "4096"}, {"CDDP_TRANSPORT": "tcp"}], ids=TIDS)
def test_send_recv(env):
    res = run_ranks(2, "test_pg:_p2p_child", env=env, timeout=60)
    for r in range(2):
        out = res[r].get("ok")
        assert out, res[r]
        assert out["exchange"] == float(1 - r)
        assert out["batch"] == [11.0 - r] * 3
    assert res[1]["ok"]["fifo"] is True
    assert res[1]["ok"]["tag"] == ("recv from rank 0: rank 0 sent 4 float32 elements with tag 1, "
                                   "rank 1 expected 4 float32 elements with tag 2")


def _monitored_child(rank, n, d):
    dist = init_group(rank, n, d, timeout=20)
    dist.monitored_barrier(timeout=5)
    if rank == 2:
        time.sleep(1.5)
        return "late"
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=0.5), wait_all_ranks=True)
        return "no error"
    except RuntimeError as e:
        return str(e)


def test_monitored_barrier_names_missing_ranks():
    res = run_ranks(3, "test_pg:_monitored_child", timeout=60)
    assert res[0]["ok"] == "[Rank 0]: Ranks 2 failed to pass monitoredBarrier in 500 ms"
    assert "rank 0 did not confirm" in res[1]["ok"]


# ---- init / API surface (in this process: world of one) --------------------------------------------

@pytest.fixture
def dist(tmp_path, monkeypatch):
    import cddp.distributed as dist
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    yield dist
    if dist.is_initialized():
        dist.destroy_process_group()


def test_use_before_init(dist):
    import cddp
    assert not dist.is_initialized() and dist.is_available() and dist.is_gloo_available()
    with pytest.raises(RuntimeError, match="Default process group has not been initialized, "
                                           "please make sure to call init_process_group."):
        dist.all_reduce(cddp.from_numpy(np.ones(2, np.float32)))
    with pytest.raises(RuntimeError, match="has not been initialized"):
        dist.get_rank()
    # torch's exception names for store and network failures, reachable from the package
    from cddp.distributed import store
    assert dist.DistError is store.DistError and dist.DistStoreError is store.DistStoreError
    assert dist.DistNetworkError is store.DistNetworkError
    assert issubclass(dist.DistBackendError, dist.DistError)
    # torch >= 2 raises ValueError, torch 1.x RuntimeError: scripts catch either
    for call in (dist.get_rank, dist.get_world_size, dist.barrier, dist.get_backend,
                 lambda: dist.new_group([0])):
        with pytest.raises(ValueError, match="has not been initialized"):
            call()


def _noop_child(rank, n, d):
    return rank


def test_run_ranks_leaves_no_folder_behind(tmp_path, monkeypatch):
    """The harness's store folder goes away with the launch (every run of the suite used to
    leave ~35 cddp-pgtest-* folders in $TMPDIR)."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert run_ranks(2, "test_pg:_noop_child", timeout=60) == [{"ok": 0}, {"ok": 1}]
    assert os.listdir(tmp_path) == []


def test_env_errors(dist, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="Error initializing torch.distributed using env:// "
                                         "rendezvous: environment variable RANK expected, but not set"):
        dist.init_process_group("gloo")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="environment variable WORLD_SIZE expected"):
        dist.init_process_group("gloo")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match="environment variable MASTER_ADDR expected"):
        dist.init_process_group("gloo")
    with pytest.raises(ValueError, match="Invalid rank 3"):
        dist.init_process_group("gloo", store=DirStore(str(tmp_path)), rank=3, world_size=2)
    with pytest.raises(ValueError, match="Invalid backend"):
        dist.init_process_group("ucc", store=DirStore(str(tmp_path)), rank=0, world_size=1)
    assert not dist.is_initialized()


def test_init_argument_messages(dist, tmp_path):
    """Bad arguments say what is wrong: a negative world size is not "missing", a timeout must
    be a positive timedelta (torch's TypeError for an int; never a handshake timeout)."""
    st = DirStore(str(tmp_path))
    for method in ("tcp://127.0.0.1:1", f"file://{tmp_path}/f"):
        with pytest.raises(ValueError, match="world_size must be positive, got -2"):
            dist.init_process_group("gloo", init_method=method, world_size=-2, rank=0)
        with pytest.raises(ValueError, match="Invalid rank -3"):
            dist.init_process_group("gloo", init_method=method, world_size=2, rank=-3)
        with pytest.raises(ValueError, match="rank and world_size must be given"):
            dist.init_process_group("gloo", init_method=method)
    with pytest.raises(TypeError, match="Expected timeout argument to be of type "
                                        "datetime.timedelta, got 5"):
        dist.init_process_group("gloo", store=st, rank=0, world_size=1, timeout=5)
    for bad in (datetime.timedelta(seconds=-1), datetime.timedelta(0)):
        with pytest.raises(ValueError, match="timeout must be a positive duration"):
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:1", world_size=1,
                                    rank=0, timeout=bad)
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=st, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=10))
    try:
        with pytest.raises(TypeError, match="datetime.timedelta, got 3.5"):
            dist.new_group([0], timeout=3.5)
    finally:
        dist.destroy_process_group()


def test_single_rank_world(dist, tmp_path):
    import cddp
    dist.init_process_group("cpu", store=DirStore(str(tmp_path)), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=10))
    with pytest.raises(ValueError, match="trying to initialize the default process group twice!"):
        dist.init_process_group("gloo", store=DirStore(str(tmp_path)), rank=0, world_size=1)
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    assert dist.get_backend() == "gloo" and dist.group.WORLD is dist.GroupMember.WORLD
    assert str(dist.ReduceOp.SUM) == "RedOpType.SUM" and dist.ReduceOp.RedOpType.MAX == dist.ReduceOp.MAX
    x = cddp.from_numpy(np.arange(5, dtype=np.float32))
    assert dist.all_reduce(x, op=dist.ReduceOp.AVG) is None
    assert x.numpy().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="Cannot use ReduceOp.BAND with non-integral dtype float32"):
        dist.all_reduce(x, op=dist.ReduceOp.BAND)
    with pytest.raises(ValueError, match="AVG needs a floating-point"):
        dist.all_reduce(cddp.from_numpy(np.ones(2, np.int64)), op=dist.ReduceOp.AVG)
    with pytest.raises(TypeError, match="Expected parameter `tensor` of type torch.Tensor"):
        dist.all_reduce([1.0])
    with pytest.raises(ValueError, match="out of range"):
        dist.broadcast(x, src=1)
    with pytest.raises(ValueError, match="Must specify global_rank or group_rank"):
        dist.broadcast(x)
    gl = [cddp.from_numpy(np.zeros(5, np.float32))]
    dist.gather(x, gl)                 # gather / scatter default to rank 0, as torch
    assert gl[0].numpy().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="must hold world_size"):
        dist.all_gather_into_tensor(cddp.from_numpy(np.zeros(3, np.float32)), x)
    with pytest.raises(TypeError, match="does not pickle"):
        dist.broadcast_object_list([object()], src=0)
    dist.destroy_process_group()
    assert not dist.is_initialized()
    # re-initialising on the same store works (fresh keys per generation)
    dist.init_process_group("gloo", store=DirStore(str(tmp_path)), rank=0, world_size=1)
    dist.barrier()


def test_nccl_falls_back_with_one_warning(tmp_path):
    code = f"""
import sys, warnings, numpy as np
sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'tests')!r}]
import cddp, cddp.distributed as dist
from _teststore import DirStore
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as rec:
    dist.init_process_group("nccl", store=DirStore({str(tmp_path)!r}), rank=0, world_size=1)
    t = cddp.from_numpy(np.ones(2, np.float32)).cuda()
    dist.all_reduce(t)
print(dist.get_backend(), sum("no GPU is available" in str(w.message) for w in rec))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["nccl", "1"]
    env = dict(os.environ, CDDP_STRICT_DEVICE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=env)
    assert out.returncode != 0 and "CDDP_STRICT_DEVICE" in out.stderr


def test_no_segment_left_behind():
    res = run_ranks(2, "test_pg:_segments_child", timeout=60)
    for r in range(2):
        assert res[r].get("ok") == [], res[r]


def _segments_child(rank, n, d):
    dist = init_group(rank, n, d, timeout=20)
    dist.barrier()                     # every rank has mapped the segment: it is unlinked
    # the segment is /cddp-<rank 0's pid>-<rank 0's nonce> (fields 0 and 5 of its entry)
    info = DirStore(d).get("cddp/pg/default/0/info/0").decode().split()
    return [f for f in os.listdir("/dev/shm") if f.startswith(f"cddp-{info[0]}-{info[5]}")]


def test_bench_quick_runs():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "collectives.py"), "--quick"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "single-thread memcpy" in out.stdout and "all_reduce (2 ranks" in out.stdout
    assert "1 MiB" in out.stdout and "barrier latency" in out.stdout


def test_exit_with_unfinished_async_work_does_not_hang(tmp_path):
    """A script that leaves an async all_reduce its peer never joins and just exits: the atexit
    hook gives the work a short drain, then aborts it; the process ends promptly."""
    code = f"""
import sys, time, datetime, numpy as np
sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'tests')!r}]
import cddp, cddp.distributed as dist
from _teststore import DirStore
rank = int(sys.argv[1])
dist.init_process_group("gloo", store=DirStore({str(tmp_path)!r}), rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=20))
dist.barrier()
if rank == 0:
    dist.all_reduce(cddp.from_numpy(np.ones(8, np.float32)), async_op=True)
    print("leaving", flush=True)
else:
    time.sleep(8)
"""
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
             for r in range(2)]
    try:
        t0 = time.monotonic()
        out, err = procs[0].communicate(timeout=30)
        dt = time.monotonic() - t0
        assert procs[0].returncode == 0, err[-2000:]
        assert "leaving" in out
        assert dt < 7.0, dt            # atexit drains for at most 3 s, not the 20 s timeout
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
