"""DDP's reducer in one process: the units it launches, where the reduced gradients live, and
world size 1 doing no collective work.

A fake process group stands for the other ranks: its all_reduce (ReduceOp.AVG, in place)
halves the tensor it is given, as if a second rank had contributed zeros — applied only when
the Work is waited for, so a reducer that read its results before waiting would fail. The
oracle is a plain copy of the model trained on the same data (NumPy arrays compared)."""
import datetime
from functools import partial

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from cddp import _C
from cddp.nn.parallel.distributed import _bucket_assignment


class FakeWork:
    def __init__(self, t, calls):
        self.t, self.calls, self.done = t, calls, False

    def wait(self):
        if not self.done:
            self.t.mul_(0.5)
            self.done = True
        return True


class FakePG:
    """all_reduce(t, op, sync): records (tensor, op, sync); AVG with a rank of zeros."""

    def __init__(self):
        self.calls = []

    def allreduce(self, t, op=0, sync=False):
        self.calls.append((t, op, sync))
        w = FakeWork(t, self.calls)
        if sync:
            w.wait()
            return None
        return w


def mlp(seed=0):
    cddp.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def batch(step):
    rng = np.random.default_rng(100 + step)
    return (cddp.tensor(rng.standard_normal((8, 6)).astype(np.float32)),
            cddp.tensor(rng.integers(0, 3, 8)))


def wrap(model, world=2, as_view=True, inplace_min=0, cap=None, pg=None):
    """A reducer over model's parameters wired as DistributedDataParallel wires it."""
    params = list(model.parameters())
    cap = cap if cap is not None else 25 * 2 ** 20
    buckets = _bucket_assignment(params, [min(2 ** 20, cap), cap])
    pg = pg or FakePG()
    r = _C.Reducer(params, buckets, pg, world, as_view, inplace_min)
    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(partial(r.mark_ready, i))
    return r, pg, buckets


def grads(model):
    return [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]


def reference_grads(step, scale=0.5):
    ref = mlp()
    x, y = batch(step)
    nn.functional.cross_entropy(ref(x), y).backward()
    return [p.grad.numpy() * scale for p in ref.parameters()]


def inside(t, buf):
    lo = buf.data_ptr()
    return lo <= t.data_ptr() and t.data_ptr() + 4 * t.numel() <= lo + 4 * buf.numel()


@pytest.mark.parametrize("inplace_min", [0, 10 ** 9, 200])
def test_units_reduce_where_the_gradients_are(inplace_min):
    model = mlp()
    r, pg, buckets = wrap(model, inplace_min=inplace_min)
    params = list(model.parameters())
    big = [i for i, p in enumerate(params) if 4 * p.numel() >= inplace_min]
    units = r.units()
    assert len(units) == len(big) + len(r.buckets)
    x, y = batch(0)
    r.prepare_for_backward(None)
    nn.functional.cross_entropy(model(x), y).backward()
    # one AVG all_reduce per unit, the last one synchronous
    assert [c[1] for c in pg.calls] == [1] * len(units)
    assert [c[2] for c in pg.calls] == [False] * (len(units) - 1) + [True]
    assert [c[0].numel() for c in pg.calls] == [u[0] for u in units]
    reduced = [c[0] for c in pg.calls]
    for i, p in enumerate(params):
        if i in big:     # reduced in place: .grad is the very tensor the all_reduce got
            assert any(p.grad is t for t in reduced)
        else:            # a view of its bucket (gradient_as_bucket_view)
            assert any(inside(p.grad, b) for b in r.buckets)
    for got, want in zip(grads(model), reference_grads(0)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    st = r.stats()
    assert st["iterations"] == 1 and st["launches"] == len(units)
    assert st["copy_bytes"] == sum(4 * p.numel() for i, p in enumerate(params) if i not in big)


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("as_view", [True, False])
def test_grads_stay_right_across_steps_and_zero_grad(set_to_none, as_view):
    """Three SGD steps through the reducer (mixed in-place and flat units) equal three steps of
    a plain model on the averaged gradients; with views and zero_grad(set_to_none=False)
    nothing is copied after the first step (the gradients live in their buckets)."""
    model, ref = mlp(), mlp()
    r, pg, _ = wrap(model, as_view=as_view, inplace_min=200)
    opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_ref = cddp.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    small = sum(4 * p.numel() for p in model.parameters() if 4 * p.numel() < 200)
    for step in range(3):
        x, y = batch(step)
        opt.zero_grad(set_to_none=set_to_none)
        opt_ref.zero_grad(set_to_none=set_to_none)
        r.reset_stats()
        r.prepare_for_backward(None)
        nn.functional.cross_entropy(model(x), y).backward()
        (nn.functional.cross_entropy(ref(x), y) * 0.5).backward()
        for got, want in zip(grads(model), grads(ref)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        if step > 0 and as_view and not set_to_none:
            assert r.stats()["copy_bytes"] == 0
        elif step > 0:
            assert r.stats()["copy_bytes"] == small
        opt.step()
        opt_ref.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
    for p in model.parameters():
        if 4 * p.numel() < 200:
            assert any(inside(p.grad, b) for b in r.buckets) == as_view


def test_units_launch_in_order_whatever_order_grads_arrive():
    """Gradients arriving in registration order (the reverse of the bucket order): no unit
    may launch before unit 0 — whose parameters come last — even when its own are ready."""
    model = mlp()
    r, pg, _ = wrap(model, inplace_min=200, cap=200)
    params = list(model.parameters())
    units = r.units()
    assert len(units) > 2
    r.prepare_for_backward(None)
    for i in range(len(params)):
        params[i].grad = cddp.ones_like(params[i]) * (i + 1)
        r.mark_ready(i)
        if i < len(params) - 1:
            assert pg.calls == []
    assert [c[0].numel() for c in pg.calls] == [u[0] for u in units]
    for i, p in enumerate(params):
        np.testing.assert_array_equal(p.grad.numpy(), np.full(p.shape, (i + 1) * 0.5, np.float32))


def test_first_bucket_is_small():
    """torch's rule: the first bucket (the last layers, whose grads come first) holds at most
    1 MiB so communication starts early; the rest fill up to bucket_cap_mb."""
    cddp.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, 10))
    params = list(net.parameters())
    buckets = _bucket_assignment(params, [2 ** 20, 25 * 2 ** 20])
    size = [sum(4 * params[i].numel() for i in b) for b in buckets]
    assert buckets[0] == [5, 4, 3] and size[0] <= 2 ** 20
    assert buckets[1] == [2, 1, 0] and size[1] <= 25 * 2 ** 20
    r = _C.Reducer(params, buckets, FakePG(), 2, True, 256 * 1024)
    f32 = cddp.float32
    # the 4 MiB and 3 MiB weights are reduced in place, each as soon as it is ready
    assert r.units() == [(10 + 10240 + 1024, f32, 0), (1024 * 1024, f32, 1),
                         (1024 * 784, f32, 1), (1024, f32, 1)]
    small = _bucket_assignment(params, [2 ** 20, 2 ** 20])
    assert all(sum(4 * params[i].numel() for i in b) <= 2 ** 20 or len(b) == 1 for b in small)


def test_world_size_one_does_no_collective_and_copies_nothing():
    model, ref = mlp(), mlp()
    r, pg, _ = wrap(model, world=1)
    assert r.units() == [] and r.buckets == [] and r.stats()["bypass"] == 1
    opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_ref = cddp.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = batch(step)
        for o in (opt, opt_ref):
            o.zero_grad(set_to_none=step % 2 == 0)
        r.prepare_for_backward(None)
        nn.functional.cross_entropy(model(x), y).backward()
        nn.functional.cross_entropy(ref(x), y).backward()
        opt.step()
        opt_ref.step()
    assert pg.calls == []
    st = r.stats()
    assert st["launches"] == 0 and st["copy_bytes"] == 0 and st["iterations"] == 3
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    # torch's errors still come at world size 1
    r.prepare_for_backward(None)
    params = list(model.parameters())
    params[0].grad = cddp.zeros_like(params[0])
    r.mark_ready(0)
    assert r.unready() == list(range(1, len(params)))
    with pytest.raises(RuntimeError, match="mark a variable ready only once"):
        r.mark_ready(0)


def test_unused_and_skipped_parameters_in_place():
    """find_unused_parameters: an unused parameter contributes zeros (its .grad becomes the
    reduced value); one unused on every rank keeps its .grad, yet its collective is issued
    (every rank issues the same sequence)."""
    model = mlp()
    r, pg, _ = wrap(model, inplace_min=0)
    params = list(model.parameters())
    params[0].grad = cddp.ones_like(params[0])          # stale: must become the reduced zeros
    r.prepare_for_backward([0, 1], [1])
    x, y = batch(0)
    with cddp.no_grad():
        h = model[1](model[0](x))
    out = model[4](model[3](model[2](h)))
    nn.functional.cross_entropy(out, y).backward()
    assert len(pg.calls) == len(params)
    np.testing.assert_array_equal(params[0].grad.numpy(), np.zeros((16, 6), np.float32))
    assert params[1].grad is None
    assert r.unready() == []


def test_comm_hook_gets_whole_buckets_and_may_return_another_tensor():
    model = mlp()
    r, pg, buckets = wrap(model, inplace_min=0)
    seen = []

    class Fut:
        def __init__(self, t):
            self.t = t

        def wait(self):
            return self.t * 0.5                       # a new tensor: copied back

    def hook(index, buf):
        seen.append((index, buf.numel()))
        return Fut(buf)
    r.set_comm_hook(hook)
    assert len(r.units()) == len(buckets)          # a hook is handed whole flat buckets
    r.prepare_for_backward(None)
    x, y = batch(0)
    nn.functional.cross_entropy(model(x), y).backward()
    assert pg.calls == [] and [i for i, _ in seen] == list(range(len(buckets)))
    for got, want in zip(grads(model), reference_grads(0)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_ddp_at_world_size_one_matches_plain_training(tmp_path, monkeypatch):
    """The real DistributedDataParallel on a one-rank group: bit-identical to plain training,
    no collective launched, and torch's unused-parameter error still raised."""
    import cddp.distributed as dist
    from cddp.nn.parallel import DistributedDataParallel as DDP
    from _teststore import DirStore
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    dist.init_process_group("gloo", store=DirStore(str(tmp_path)), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        model, ref = DDP(mlp()), mlp()
        opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt_ref = cddp.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for step in range(3):
            x, y = batch(step)
            for m, o in ((model, opt), (ref, opt_ref)):
                o.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
                o.step()
        st = model.reducer.stats()
        assert st["bypass"] == 1 and st["launches"] == 0 and st["copy_bytes"] == 0
        for p, q in zip(model.module.parameters(), ref.parameters()):
            np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())

        class Branchy(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear(6, 3), nn.Linear(6, 3)

            def forward(self, x):
                return self.a(x)
        m = DDP(Branchy())
        x, y = batch(0)
        nn.functional.cross_entropy(m(x), y).backward()
        with pytest.raises(RuntimeError, match="Expected to have finished reduction"):
            m(x)
    finally:
        dist.destroy_process_group()
