"""torch.distributed.algorithms.join: the tutorial's custom Joinable (a counter with uneven
inputs), DDP through Join([model]), throw_on_early_termination on every rank, and an exception
inside the block. Closed-form expectations; the tutorial's numbers also against torch."""

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
