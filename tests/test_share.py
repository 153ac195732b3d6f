"""Tensor.share_memory_ / is_shared and Module.share_memory across real processes (torch's
Hogwild pattern): fork children and spawn children (the tensor sent by file descriptor through
Process arguments and a Queue) update parameters in place and the parent sees it.

Oracles: exact values written by the children, and a single-process run of the same SGD steps
(the children run one after another, so the result is deterministic).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import cddp
from conftest import n, subprocess_env

SCRIPT = r'''
import os, sys, time
import numpy as np
import cddp
import cddp.multiprocessing as mp
import cddp.nn as nn
import cddp.nn.functional as F


def make_model():
    cddp.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def batches(rank):
    rng = np.random.default_rng(rank)
    return [(cddp.from_numpy(rng.standard_normal((6, 4)).astype(np.float32)),
             cddp.from_numpy(rng.integers(0, 3, 6))) for _ in range(5)]


def train(rank, model):                       # torch's mnist_hogwild train(), in miniature
    opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    for x, y in batches(rank):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def count(t, i, times):                       # concurrent writers of disjoint elements
    for _ in range(times):
        t[i] += 1.0


def add_from_queue(q, done):
    t = q.get(timeout=60)
    t.mul_(2.0)
    done.put(bool(t.is_shared()))


def run(method):
    ctx = mp.get_context(method)
    model = make_model()
    model.share_memory()
    for rank in (0, 1):                       # one after the other: deterministic
        p = ctx.Process(target=train, args=(rank, model))
        p.start()
        p.join(60)
        assert p.exitcode == 0, (method, rank, p.exitcode)
    np.savez(os.path.join(OUT, method + "_model.npz"),
             *[p.detach().numpy() for p in model.parameters()])
    counter = cddp.zeros(2).share_memory_()
    procs = [ctx.Process(target=count, args=(counter, i, 50)) for i in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    np.save(os.path.join(OUT, method + "_counter.npy"), counter.numpy())


if __name__ == "__main__":
    OUT = sys.argv[1]
    run("fork")
    run("spawn")
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    shared = cddp.arange(6.0).reshape(2, 3).share_memory_()
    view = shared[1]                          # a view: offset and strides travel too
    p = ctx.Process(target=add_from_queue, args=(q, done))
    p.start()
    q.put(view)
    child_saw_shared = done.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and child_saw_shared
    np.save(os.path.join(OUT, "queue.npy"), shared.numpy())
'''.replace("OUT = sys.argv[1]", "global OUT\n    OUT = sys.argv[1]")


def _reference_model():
    import cddp.nn as nn
    import cddp.nn.functional as F
    cddp.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    for rank in (0, 1):
        opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        rng = np.random.default_rng(rank)
        for _ in range(5):
            x = cddp.from_numpy(rng.standard_normal((6, 4)).astype(np.float32))
            y = cddp.from_numpy(rng.integers(0, 3, 6))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return [n(p) for p in model.parameters()]


def test_hogwild_fork_and_spawn_children_update_the_parents_model(tmp_path):
    script = tmp_path / "hogwild.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=240, env=subprocess_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = _reference_model()
    for method in ("fork", "spawn"):
        got = np.load(tmp_path / f"{method}_model.npz")
        for i, w in enumerate(want):
            np.testing.assert_allclose(got[f"arr_{i}"], w, rtol=1e-6, atol=1e-7,
                                       err_msg=f"{method}: parameter {i}")
        np.testing.assert_array_equal(np.load(tmp_path / f"{method}_counter.npy"), [50, 50])
    np.testing.assert_array_equal(np.load(tmp_path / "queue.npy"),
                                  [[0, 1, 2], [6, 8, 10]])


def test_share_memory_in_place_and_fork():
    x = cddp.arange(12.0).reshape(3, 4)
    arr = x.numpy()                          # a NumPy view taken before sharing stays valid
    v = x[1:, 1:]
    version = x._version
    assert not x.is_shared()
    assert x.share_memory_() is x and x.is_shared() and v.is_shared()
    assert x._version == version
    np.testing.assert_array_equal(n(x), np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(arr, np.arange(12.0).reshape(3, 4))
    pid = os.fork()
    if pid == 0:                             # child: write through a view, leave at once
        try:
            v.add_(100.0)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    want = np.arange(12.0).reshape(3, 4)
    want[1:, 1:] += 100
    np.testing.assert_array_equal(n(x), want)
    x.share_memory_()                        # again: a no-op
    np.testing.assert_array_equal(n(x), want)


def test_module_share_memory_and_small_tensors():
    import cddp.nn as nn
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)) if hasattr(nn, "BatchNorm1d") \
        else nn.Linear(3, 2)
    before = [n(t) for t in m.state_dict().values()]
    assert m.share_memory() is m
    assert all(t.is_shared() for t in m.state_dict().values())
    for b, t in zip(before, m.state_dict().values()):
        np.testing.assert_array_equal(n(t), b)
    for size in (0, 1, 5000):                # empty, inline block, separate block
        t = cddp.ones(size).share_memory_()
        assert t.is_shared() and t.numel() == size
        np.testing.assert_array_equal(n(t), np.ones(size))


def test_rebuild_checks_the_view():
    t = cddp.ones(4).share_memory_()
    fd, nbytes = cddp._C._shared_fd(t)
    for shape, strides, offset in (((5,), (1,), 0), ((4,), (1,), 1), ((-1,), (1,), 0),
                                   ((2,), (-1,), 0)):
        dup = os.dup(fd)
        with pytest.raises(ValueError, match="does not fit the storage"):
            cddp._C._from_shared_fd(dup, nbytes, cddp.float32, shape, strides, offset)
        os.close(dup)
    dup = os.dup(fd)
    u = cddp._C._from_shared_fd(dup, nbytes, cddp.float32, (2,), (2,), 1)
    u.fill_(7.0)
    np.testing.assert_array_equal(n(t), [1, 7, 1, 7])
    assert cddp._C._shared_fd(cddp.ones(2)) is None
