"""The shared-memory transport's zero-copy all_reduce (distributed/pg/shm.c, run_allreduce_zc)
and the shared arena behind it (core/arena.c): tensors allocated while
cddp._C._arena_scope(True) — as DDP's reducer does around a backward — are all-reduced in
place in every rank's arena, each rank reducing its slice straight from the others' memory.

Oracles: NumPy folds of every rank's input (tests/test_collectives.py's inputs and folds),
a single-process training run over the whole batch (DDP), and the path counter
_C._shm_zero_copy_ops(), which says whether the in-place path or the copy path ran.
"""
import os

import numpy as np
import pytest

from _teststore import init_group, run_ranks

from test_collectives import AVG, MAX, MIN, PRODUCT, SUM, f as _values, fold

# past the one-step path's 16 KiB, odd tails; 4097 elements stay under the block cache's
# 64 KiB (core/storage.c): private memory whatever the scope, so the copy path
SIZES = [4097, 100003, (1 << 20) + 13]


def _fold(n, count, dt, op):
    return fold([_values(r, count, dt, op) for r in range(n)], dt, op, n)


def _results(res):
    """Each rank's returned dict (run_ranks wraps it as {"ok": ...})."""
    return [r.get("ok", r) for r in res]


def _arena_tensor(cddp, arr):
    prev = cddp._C._arena_scope(True)
    try:
        t = cddp.empty(arr.shape, dtype=getattr(cddp, str(arr.dtype)))
    finally:
        cddp._C._arena_scope(prev)
    t.copy_(cddp.from_numpy(arr))
    return t


def values_sweep(rank, size, d):
    import cddp
    dist = init_group(rank, size, d)
    ops = [SUM, AVG, PRODUCT, MIN, MAX]
    red = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
           dist.ReduceOp.MAX]
    bad, runs, arena_runs = [], 0, 0
    start = cddp._C._shm_zero_copy_ops()
    for dt in ("float32", "float64", "int64", "int32"):
        for count in SIZES:
            for op in ops:
                if op == AVG and not dt.startswith("float"):
                    continue
                t = _arena_tensor(cddp, _values(rank, count, dt, op))
                dist.all_reduce(t, op=red[op])
                runs += 1
                arena_runs += cddp._C._alloc_stats()["cache_min"] <= t.numel() * t.element_size()
                want = _fold(size, count, dt, op)
                got = t.numpy()
                if not np.allclose(got, want, rtol=1e-6, atol=0):
                    bad.append((dt, count, op, int(np.argmax(got != want))))
    zc = cddp._C._shm_zero_copy_ops() - start
    dist.destroy_process_group()
    return {"bad": bad, "runs": runs, "arena_runs": arena_runs, "zc": zc}


@pytest.mark.parametrize("n", [2, 3])
def test_in_place_all_reduce_values(n):
    res = run_ranks(n, "test_shm_zero_copy:values_sweep", timeout=120)
    for r in _results(res):
        assert "bad" in r, r
        assert r["bad"] == [], r["bad"]
        assert r["arena_runs"] >= 36
        assert r["zc"] == r["arena_runs"], "every arena all_reduce should run in place"


def mixed(rank, size, d):
    """Rank 0's buffer in its arena, rank 1's private: the copy path, right values; then both
    in the arena: the in-place path."""
    import cddp
    dist = init_group(rank, size, d)
    n = 50000
    a = _values(rank, n, "float32", SUM)
    t = _arena_tensor(cddp, a) if rank == 0 else cddp.from_numpy(a.copy())
    c0 = cddp._C._shm_zero_copy_ops()
    dist.all_reduce(t)
    c1 = cddp._C._shm_zero_copy_ops()
    ok1 = bool(np.array_equal(t.numpy(), _fold(size, n, "float32", SUM)))
    t2 = _arena_tensor(cddp, a)
    dist.all_reduce(t2)
    c2 = cddp._C._shm_zero_copy_ops()
    ok2 = bool(np.array_equal(t2.numpy(), _fold(size, n, "float32", SUM)))
    dist.destroy_process_group()
    return {"ok": [ok1, ok2], "zc": [c1 - c0, c2 - c1]}


def test_mixed_buffers_take_the_copy_path():
    res = run_ranks(2, "test_shm_zero_copy:mixed", timeout=60)
    for r in _results(res):
        assert r.get("ok") == [True, True], r
        assert r["zc"] == [0, 1], r


def no_arena_on_one_rank(rank, size, d):
    """Rank 1 turns the path off (CDDP_SHM_ZEROCOPY=0): the group must agree to copy."""
    if rank == 1:
        os.environ["CDDP_SHM_ZEROCOPY"] = "0"
    import cddp
    dist = init_group(rank, size, d)
    n = 70001
    c0 = cddp._C._shm_zero_copy_ops()
    oks = []
    for k in range(3):
        t = _arena_tensor(cddp, _values(rank, n, "float64", AVG) + k)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        oks.append(bool(np.allclose(t.numpy(), _fold(size, n, "float64", AVG) + k)))
    zc = cddp._C._shm_zero_copy_ops() - c0
    dist.destroy_process_group()
    return {"ok": oks, "zc": zc}


def test_rank_without_arena_turns_the_path_off():
    res = run_ranks(2, "test_shm_zero_copy:no_arena_on_one_rank", timeout=60)
    for r in _results(res):
        assert r.get("ok") == [True] * 3, r
        assert r["zc"] == 0, r


def ddp_vs_single(rank, size, d, small=False):
    """2-rank DDP (gradients in the arena, reduced in place) against one process training the
    same model on the whole batch. small: one flat bucket of ~49 KiB (over the one-step
    path's 16 KiB, under the block cache's 64 KiB: the reducer pads its storage to 64 KiB so
    it still comes from the arena)."""
    import cddp
    import cddp.nn as nn
    from cddp.nn.parallel import DistributedDataParallel as DDP
    dist = init_group(rank, size, d)

    def make():
        cddp.manual_seed(0)
        if small:
            return nn.Sequential(nn.Linear(64, 160), nn.ReLU(), nn.Linear(160, 10))
        # 512x256 is reduced in place on .grad, the rest share one flat bucket (141 KiB)
        return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))

    g = cddp.Generator().manual_seed(1)
    X = cddp.randn(8, 32, 64, generator=g)
    Y = cddp.randint(0, 10, (8, 32), generator=g)
    ref = make()
    opt_r = cddp.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    model = DDP(make())
    opt = cddp.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    c0 = cddp._C._shm_zero_copy_ops()
    half = 32 // size
    for s in range(8):
        opt_r.zero_grad()
        nn.functional.cross_entropy(ref(X[s]), Y[s]).backward()
        opt_r.step()
        opt.zero_grad()
        x, y = X[s, rank * half:(rank + 1) * half], Y[s, rank * half:(rank + 1) * half]
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    zc = cddp._C._shm_zero_copy_ops() - c0
    units = len(model.reducer.units())
    diff = max(float((p - q).abs().max()) for p, q in zip(model.module.parameters(),
                                                           ref.parameters()))
    dist.destroy_process_group()
    return {"diff": diff, "zc": zc, "units": units}


@pytest.mark.parametrize("small", [False, True])
def test_ddp_reduces_in_place_and_matches_one_process(small):
    res = run_ranks(2, "test_shm_zero_copy:ddp_vs_single", args=(small,), timeout=120)
    for r in _results(res):
        assert "diff" in r, r
        assert r["diff"] < 1e-5, r
        assert r["units"] == (1 if small else 2)
        assert r["zc"] == 8 * r["units"], "every unit of every step should reduce in place"


def dead_peer(rank, size, d):
    import cddp
    dist = init_group(rank, size, d, timeout=30.0)
    t = _arena_tensor(cddp, _values(rank, 300000, "float32", SUM))
    dist.all_reduce(t)                      # both alive: in place
    dist.barrier()
    if rank == 1:
        os._exit(0)
    import time
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
    except Exception as e:                  # noqa: BLE001 - the message is the result
        return {"error": f"{type(e).__name__}: {e}", "s": time.monotonic() - t0}
    return {"error": None}


def test_dead_peer_fails_the_in_place_all_reduce():
    res = run_ranks(2, "test_shm_zero_copy:dead_peer", timeout=60)
    r0 = _results(res)[0]
    assert r0.get("error"), r0
    assert "rank 1" in r0["error"], r0["error"]
    assert r0["s"] < 10, r0


def fork_child(rank, size, d):
    """A fork child neither takes arena blocks nor reuses the parent's cached ones."""
    import cddp
    dist = init_group(rank, size, d)
    t = _arena_tensor(cddp, np.ones(100000, np.float32))
    del t                                    # back on the parent's arena free list
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            before = cddp._C._alloc_stats()["arena_live_bytes"]
            prev = cddp._C._arena_scope(True)
            u = cddp.ones(100000)
            u.add_(1)
            cddp._C._arena_scope(prev)
            after = cddp._C._alloc_stats()["arena_live_bytes"]
            os.write(wfd, str(after - before).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    got = os.read(rfd, 64).decode()
    os.waitpid(pid, 0)
    os.close(rfd)
    # the parent's arena still serves it, and the child's write did not land there
    t2 = _arena_tensor(cddp, np.ones(100000, np.float32))
    same = bool((t2 == 1).all())
    dist.destroy_process_group()
    return {"child_arena_bytes": got, "same": same}


def test_fork_child_keeps_off_the_arena():
    res = run_ranks(2, "test_shm_zero_copy:fork_child", timeout=60)
    for r in _results(res):
        assert r.get("child_arena_bytes") == "0", r
        assert r["same"], r


def mismatch(rank, size, d):
    import cddp
    dist = init_group(rank, size, d, timeout=20.0)
    t = _arena_tensor(cddp, _values(rank, 200000, "float32", SUM))
    try:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.reduce(t, dst=0)
    except Exception as e:                  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}
    return {"error": None}


def test_mismatched_collective_is_reported():
    res = run_ranks(2, "test_shm_zero_copy:mismatch", timeout=60)
    for r in _results(res):
        assert r.get("error"), r
        assert "all_reduce" in r["error"] and "reduce" in r["error"], r["error"]


def accumulate(rank, size, d):
    """Gradient accumulation (no_sync, then a synchronised step): the accumulated gradients
    live in the arena too, so the synchronised step reduces in place; the weights equal one
    process's over the same samples."""
    import cddp
    import cddp.nn as nn
    from cddp.nn.parallel import DistributedDataParallel as DDP
    dist = init_group(rank, size, d)

    def make():
        cddp.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 256))

    g = cddp.Generator().manual_seed(3)
    X = cddp.randn(3, 2, 16, 64, generator=g)
    ref, model = make(), DDP(make())
    opt_r = cddp.optim.SGD(ref.parameters(), lr=0.1)
    opt = cddp.optim.SGD(model.parameters(), lr=0.1)
    c0 = cddp._C._shm_zero_copy_ops()
    for s in range(3):
        opt_r.zero_grad()
        opt.zero_grad()
        for micro in range(2):
            (ref(X[s, micro]).pow(2).mean() / 2).backward()
            x = X[s, micro, rank * 8:(rank + 1) * 8]
            if micro == 0:
                with model.no_sync():
                    (model(x).pow(2).mean() / 2).backward()
            else:
                (model(x).pow(2).mean() / 2).backward()
        opt_r.step()
        opt.step()
    zc = cddp._C._shm_zero_copy_ops() - c0
    diff = max(float((p - q).abs().max()) for p, q in zip(model.module.parameters(),
                                                           ref.parameters()))
    dist.destroy_process_group()
    return {"diff": diff, "zc": zc, "units": len(model.reducer.units())}


def test_no_sync_accumulation_reduces_in_place():
    res = run_ranks(2, "test_shm_zero_copy:accumulate", timeout=120)
    for r in _results(res):
        assert "diff" in r, r
        assert r["diff"] < 1e-5, r
        assert r["zc"] == 3 * r["units"], r


def cycles(rank, size, d):
    """init -> DDP -> backward -> del -> destroy_process_group, with the garbage collector off
    (DDP's hooks and reducer form a cycle that holds the group): destroy must release the
    transport, its pidfds and the peer's mapped arena at once."""
    import gc
    import cddp
    import cddp.nn as nn
    from cddp.nn.parallel import DistributedDataParallel as DDP

    def counts():
        with open("/proc/self/maps") as fh:
            arenas = sum("cddp-arena" in ln for ln in fh)
        return len(os.listdir("/proc/self/fd")), arenas

    gc.disable()
    seen = []
    try:
        for c in range(4):
            sub = os.path.join(d, f"cycle{c}")
            os.makedirs(sub, exist_ok=True)
            dist = init_group(rank, size, sub)
            model = DDP(nn.Linear(256, 512))
            model(cddp.randn(8, 256)).sum().backward()
            del model
            dist.destroy_process_group()
            seen.append(counts())
    finally:
        gc.enable()
    return {"seen": seen}


def test_destroy_releases_the_transport_despite_a_ddp_cycle():
    res = run_ranks(2, "test_shm_zero_copy:cycles", timeout=120)
    for r in _results(res):
        seen = [tuple(x) for x in r["seen"]]
        assert len(set(seen)) == 1, seen            # fds and arena mappings stay flat
        assert seen[0][1] == 1, seen                # this process's own arena only


def scope(rank, size, d):
    """Only the backward DDP reduces allocates in the arena: not tensors made between forward
    and backward, nor after a forward whose backward never comes."""
    import cddp
    import cddp.nn as nn
    from cddp.nn.parallel import DistributedDataParallel as DDP
    dist = init_group(rank, size, d)
    model = DDP(nn.Linear(256, 512))
    live = lambda: cddp._C._alloc_stats()["arena_live_bytes"]   # noqa: E731
    out = model(cddp.randn(8, 256))
    a0 = live()
    side = cddp.zeros(1 << 18)                       # 1 MiB, between forward and backward
    a1 = live()
    out.sum().backward()
    a2 = live()                                      # the weight's gradient: in the arena
    model(cddp.randn(8, 256))                        # a forward never backpropagated
    side2 = cddp.zeros(1 << 18)
    a3 = live()
    del side, side2
    dist.destroy_process_group()
    return {"side": a1 - a0, "grads": a2 - a1, "after": a3 - a2}


def test_only_the_reduced_backward_allocates_in_the_arena():
    res = run_ranks(2, "test_shm_zero_copy:scope", timeout=60)
    for r in _results(res):
        assert r.get("side") == 0 and r["after"] == 0, r
        assert r["grads"] >= 256 * 512 * 4, r


def kept_grads(rank, size, d):
    """A .grad kept across zero_grad(set_to_none=True) keeps its values through the next
    backward (torch's behaviour), although the small gradients are views of a flat bucket."""
    import cddp
    import cddp.nn as nn
    from cddp.nn.parallel import DistributedDataParallel as DDP
    dist = init_group(rank, size, d)
    cddp.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4)))
    opt = cddp.optim.SGD(model.parameters(), lr=0.1)
    model(cddp.randn(8, 32)).pow(2).sum().backward()
    kept = [p.grad for p in model.parameters()]
    snap = [g.clone() for g in kept]
    opt.step()
    opt.zero_grad(set_to_none=True)
    model(cddp.randn(8, 32) * 3).pow(2).sum().backward()
    changed = max(float((k - s).abs().max()) for k, s in zip(kept, snap))
    moved = max(float((p.grad - s).abs().max()) for p, s in zip(model.parameters(), snap))
    dist.destroy_process_group()
    return {"changed": changed, "moved": moved}


def test_kept_grad_survives_set_to_none_and_the_next_backward():
    res = run_ranks(2, "test_shm_zero_copy:kept_grads", timeout=60)
    for r in _results(res):
        assert r.get("changed") == 0.0, r
        assert r["moved"] > 0, r                     # the new gradients did differ
