"""recv / irecv without src (torch: "receive from any process"): the sender's rank comes back,
on every transport; a sender that dies or never sends fails the receive instead of hanging."""
import time

import numpy as np
import pytest

from _teststore import init_group, run_ranks

TRANSPORTS = {"shm": {}, "tcp": {"CDDP_TRANSPORT": "tcp"}}


def _gather_child(rank, n, d):
    dist = init_group(rank, n, d)
    import cddp
    if rank != 0:
        time.sleep(0.05 * rank)                 # arrival order differs from rank order
        dist.send(cddp.full((4,), float(rank * 10)), 0, tag=3)
        w = dist.isend(cddp.arange(3, dtype=cddp.int64) + rank, 0)
        w.wait()
        dist.barrier()
        return {}
    got = {}
    for _ in range(n - 1):
        t = cddp.zeros(4)
        src = dist.recv(t, tag=3)
        got[src] = t.numpy().tolist()
    works = []
    for _ in range(n - 1):
        t = cddp.zeros(3, dtype=cddp.int64)
        works.append((dist.irecv(t), t))
    late = {}
    for w, t in works:
        w.wait()
        late[w._source_rank()] = t.numpy().tolist()
    dist.barrier()
    return {"got": got, "late": late}


@pytest.mark.parametrize("transport", ["shm", "tcp", "hier"])
def test_recv_from_any_sender_returns_the_sender(transport):
    n, child = (4, "_hier_child") if transport == "hier" else (3, "_gather_child")
    res = run_ranks(n, f"test_recv_any_source:{child}", env=TRANSPORTS.get(transport),
                    timeout=120)
    for r, x in enumerate(res):
        assert "ok" in x, f"rank {r}: {x}"
    got = {int(k): v for k, v in res[0]["ok"]["got"].items()}
    assert got == {s: [s * 10.0] * 4 for s in range(1, n)}
    late = {int(k): v for k, v in res[0]["ok"]["late"].items()}
    assert late == {s: list(np.arange(3) + s) for s in range(1, n)}


def _hier_child(rank, n, d):
    """Two simulated hosts of two ranks: send/recv go over the hierarchical TCP mesh."""
    import os
    os.environ["CDDP_HOST_ID"] = f"host{rank // 2}"
    return _gather_child(rank, n, d)


def _silent_child(rank, n, d, how):
    dist = init_group(rank, n, d, timeout=3.0)
    import cddp
    if rank == 1:
        if how == "exit":
            import os
            os._exit(0)
        time.sleep(6)
        return {}
    t0 = time.monotonic()
    try:
        dist.recv(cddp.zeros(2))
    except Exception as e:   # noqa: BLE001 - the message is what the test checks
        return {"raised": f"{type(e).__name__}: {e}", "secs": time.monotonic() - t0}
    return {"received": True}


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("how", ["exit", "silent"])
def test_recv_from_any_sender_fails_instead_of_hanging(transport, how):
    res = run_ranks(2, "test_recv_any_source:_silent_child", args=(how,),
                    env=TRANSPORTS[transport], timeout=60)
    out = res[0].get("ok", res[0])
    msg = out.get("raised", "")
    assert msg, out
    if how == "exit":
        assert "rank 1" in msg and out["secs"] < 3.0, out
    else:
        assert "recv from any rank" in msg and "timed out" in msg, msg
