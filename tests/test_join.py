"""torch.distributed.algorithms.join: the tutorial's custom Joinable (a counter with uneven
inputs), DDP through Join([model]), throw_on_early_termination on every rank, and an exception
inside the block. Closed-form expectations; the tutorial's numbers also against torch."""

import numpy as np
import pytest

from ddp_util import run_torch_or_cddp

TUTORIAL = """
import json, os, sys
if os.environ["LIB"] == "torch":
    import torch as T, torch.distributed as dist
    from torch.distributed.algorithms.join import Join, Joinable, JoinHook
else:
    import cddp as T, cddp.distributed as dist
    from cddp.distributed.algorithms.join import Join, Joinable, JoinHook

class CounterJoinHook(JoinHook):
    def __init__(self, counter, sync_max_count):
        self.counter, self.sync_max_count = counter, sync_max_count
    def main_hook(self):
        dist.all_reduce(T.zeros(1))
    def post_hook(self, is_last_joiner):
        if not self.sync_max_count:
            return
        rank = dist.get_rank(self.counter.process_group)
        common = T.tensor([rank if is_last_joiner else -1])
        dist.all_reduce(common, op=dist.ReduceOp.MAX, group=self.counter.process_group)
        if rank == int(common.item()):
            self.counter.max_count = self.counter.count.detach().clone()
        dist.broadcast(self.counter.max_count, src=int(common.item()))

class Counter(Joinable):
    def __init__(self, process_group):
        super().__init__()
        self.process_group = process_group
        self.count = T.tensor([0]).float()
        self.max_count = T.tensor([0]).float()
    def __call__(self):
        Join.notify_join_context(self)
        t = T.ones(1).float()
        dist.all_reduce(t)
        self.count += t
    def join_hook(self, **kwargs):
        return CounterJoinHook(self, kwargs.get("sync_max_count", False))
    @property
    def join_device(self):
        return T.device("cpu")
    @property
    def join_process_group(self):
        return self.process_group

dist.init_process_group("gloo")
rank = dist.get_rank()
rec = {}
counter = Counter(dist.group.WORLD)
with Join([counter], sync_max_count=True):
    for _ in range(5 + 2 * rank):
        counter()
rec["counter"] = [int(counter.count.item()), int(counter.max_count.item())]

# DDP through the generic Join, uneven data: same as model.join()
T.manual_seed(0)
model = T.nn.parallel.DistributedDataParallel(T.nn.Linear(3, 2))
opt = T.optim.SGD(model.parameters(), lr=0.1)
with Join([model]):
    for s in range(2 + 3 * rank):
        opt.zero_grad()
        model(T.ones(4, 3) * (s + 1)).sum().backward()
        opt.step()
rec["weight"] = model.module.weight.detach().tolist()

# the tutorial's ZeRO example: Join([model, optimizer]) with uneven inputs
if os.environ["LIB"] == "torch":
    from torch.distributed.optim import ZeroRedundancyOptimizer
else:
    from cddp.distributed.optim import ZeroRedundancyOptimizer
for kind in ("zero", "plain"):            # plain: every rank steps Adam on all parameters
    T.manual_seed(1)
    zmodel = T.nn.parallel.DistributedDataParallel(T.nn.Sequential(T.nn.Linear(4, 6),
                                                                   T.nn.Linear(6, 2)))
    zopt = (ZeroRedundancyOptimizer(zmodel.parameters(), optimizer_class=T.optim.Adam, lr=0.01)
            if kind == "zero" else T.optim.Adam(zmodel.parameters(), lr=0.01))
    with Join([zmodel, zopt] if kind == "zero" else [zmodel]):
        for s in range(3 + 2 * rank):
            zopt.zero_grad()
            zmodel(T.ones(5, 4) * (s + rank + 1)).pow(2).sum().backward()
            zopt.step()
    rec[kind] = [p.detach().tolist() for p in zmodel.parameters()]

# throw_on_early_termination: every rank raises
try:
    with Join([counter], throw_on_early_termination=True):
        for _ in range(3 + 3 * rank):
            counter()
    rec["throw"] = None
except RuntimeError as e:
    rec["throw"] = str(e)
dist.barrier()
with open(os.path.join(sys.argv[1], os.environ["LIB"] + str(rank) + ".json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def _launch(tmp_path, lib):
    return run_torch_or_cddp(tmp_path, TUTORIAL, lib)


def test_tutorial_counter_ddp_and_throw(tmp_path):
    r0, r1 = _launch(tmp_path, "cddp")
    # rank 0 counted its 5 iterations (each all-reduced ones over 2 ranks: +2), then shadowed;
    # the max count is rank 1's: 5 joint iterations (+2 each) and 2 alone (+1 each)
    assert r0["counter"] == [10, 12] and r1["counter"] == [12, 12]
    assert r0["weight"] == r1["weight"]
    assert r0["zero"] == r1["zero"]          # ZeRO's shards met again after the join
    # and equal plain Adam under Join: the joined rank stepped its shard on the averaged
    # gradients (torch's joined rank steps on its last, stale ones: see test below)
    for a, b in zip(r0["zero"], r0["plain"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)
    assert "exhausted all inputs" in r0["throw"]
    assert "Detected at least one rank that exhausted inputs" in r1["throw"]


def test_tutorial_matches_torch(tmp_path):
    pytest.importorskip("torch")
    ours, theirs = _launch(tmp_path, "cddp"), _launch(tmp_path, "torch")
    for k in (0, 1):
        assert ours[k]["counter"] == theirs[k]["counter"]
        assert ours[k]["throw"] == theirs[k]["throw"]
        for a, b in zip(ours[k]["weight"], theirs[k]["weight"]):
            assert a == pytest.approx(b, rel=1e-5)
        for a, b in zip(ours[k]["plain"], theirs[k]["plain"]):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)
        # ZeRO under Join differs from torch by design: torch's joined rank shadows the
        # all-reduces but discards their results, so its shard steps on stale gradients


# DDP under Join with find_unused_parameters=True: layer `b` is used by some ranks in some
# steps (rank r uses it when (s + r) is even); at step 2 no active rank uses it, so it keeps
# .grad None and SGD leaves it. Rank r runs 2 + 2r steps; with divide_by_initial_world_size
# False the gradients are divided by the number of ranks still in their loop (also without
# find_unused_parameters, where every step uses b).
UNUSED = """
import json, os, sys
if os.environ["LIB"] == "torch":
    import torch as T, torch.distributed as dist
    from torch.distributed.algorithms.join import Join
else:
    import cddp as T, cddp.distributed as dist
    from cddp.distributed.algorithms.join import Join

class Net(T.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = T.nn.Linear(3, 2), T.nn.Linear(3, 2)
    def forward(self, x, use_b):
        return self.a(x) + self.b(x) if use_b else self.a(x)

dist.init_process_group("gloo")
rank = dist.get_rank()
rec = {}
for unused, divide in ((True, True), (True, False), (False, False)):
    T.manual_seed(0)
    model = T.nn.parallel.DistributedDataParallel(Net(), find_unused_parameters=unused)
    key = f"{unused}{divide}"
    rec["init" + key] = [p.detach().tolist() for p in model.module.parameters()]
    opt = T.optim.SGD(model.parameters(), lr=0.1)
    with model.join(divide_by_initial_world_size=divide):
        for s in range(2 + 2 * rank):
            opt.zero_grad()
            use_b = (s + rank) % 2 == 0 or not unused
            model(T.ones(4, 3) * (s + 1 + rank), use_b).sum().backward()
            opt.step()
    rec["final" + key] = [p.detach().tolist() for p in model.module.parameters()]
dist.barrier()
with open(os.path.join(sys.argv[1], os.environ["LIB"] + str(rank) + ".json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def _unused_expected(init, unused, divide):
    """The closed form: sum(x @ W.T + b) over a 4x3 batch of value v has dW = 4v everywhere
    and db = 4; rank 1 (4 steps) holds the final model, rank 0 is active in steps 0-1."""
    wa, ba, wb, bb = (np.array(p, dtype=np.float64) for p in init)
    for s in range(4):
        active = [r for r in (0, 1) if s < 2 + 2 * r]
        users = [r for r in active if (s + r) % 2 == 0 or not unused]
        d = 2 if divide else len(active)
        wa -= 0.1 * sum(4.0 * (s + 1 + r) for r in active) / d
        ba -= 0.1 * 4.0 * len(active) / d
        if users:                              # no user anywhere: .grad None, no step
            wb -= 0.1 * sum(4.0 * (s + 1 + r) for r in users) / d
            bb -= 0.1 * 4.0 * len(users) / d
    return [wa, ba, wb, bb]


def test_join_find_unused_parameters_and_divide_factor(tmp_path):
    recs = run_torch_or_cddp(tmp_path, UNUSED, "cddp")
    for unused, divide in ((True, True), (True, False), (False, False)):
        key = f"{unused}{divide}"
        want = _unused_expected(recs[0]["init" + key], unused, divide)
        for rec in recs:                         # every rank ends with rank 1's model
            for got, w in zip(rec["final" + key], want):
                np.testing.assert_allclose(np.array(got), w, rtol=1e-6, atol=1e-6)


def test_join_find_unused_parameters_matches_torch(tmp_path):
    pytest.importorskip("torch")
    ours = run_torch_or_cddp(tmp_path, UNUSED, "cddp")
    theirs = run_torch_or_cddp(tmp_path, UNUSED, "torch")
    for k in (0, 1):
        for key in ("finalTrueTrue", "finalTrueFalse", "finalFalseFalse"):
            for a, b in zip(ours[k][key], theirs[k][key]):
                np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-6)
