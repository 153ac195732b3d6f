"""Post-local SGD: DDP with post_localSGD_hook (each rank its own subgroup after the start
iteration) and PostLocalSGDOptimizer + PeriodicModelAverager. 2-rank weights equal torch's,
and (without torch) the ranks differ between averagings and agree right after one."""

import numpy as np
import pytest

from ddp_util import run_torch_or_cddp

SCRIPT = """
import os, sys, json
import numpy as np
if os.environ["LIB"] == "torch":
    import torch as T, torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
        PostLocalSGDState, post_localSGD_hook)
    import torch.distributed.algorithms.model_averaging.averagers as averagers
    from torch.distributed.optim import PostLocalSGDOptimizer
else:
    import cddp as T, cddp.distributed as dist
    from cddp.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
        PostLocalSGDState, post_localSGD_hook)
    import cddp.distributed.algorithms.model_averaging.averagers as averagers
    from cddp.distributed.optim import PostLocalSGDOptimizer
dist.init_process_group("gloo")
r = dist.get_rank()
alone, _ = dist.new_subgroups(group_size=1)
T.manual_seed(0)
model = T.nn.Sequential(T.nn.Linear(4, 8), T.nn.Tanh(), T.nn.Linear(8, 2))
ddp = T.nn.parallel.DistributedDataParallel(model)
ddp.register_comm_hook(PostLocalSGDState(process_group=None, subgroup=alone,
                                         start_localSGD_iter=2), post_localSGD_hook)
opt = PostLocalSGDOptimizer(T.optim.SGD(ddp.parameters(), lr=0.1),
                            averagers.PeriodicModelAverager(period=3, warmup_steps=2))
g = np.random.default_rng(5 + r)
ws = []
for s in range(8):
    x = T.tensor(g.standard_normal((6, 4)).astype(np.float32))
    opt.zero_grad()
    ddp(x).pow(2).mean().backward()
    opt.step()
    ws.append(model[0].weight.detach().numpy().tolist())
sd = opt.state_dict()
with open(os.path.join(sys.argv[1], os.environ["LIB"] + str(r) + ".json"), "w") as f:
    json.dump({"ws": ws, "step": sd["step"]}, f)
dist.destroy_process_group()
"""


def _launch(tmp_path, lib):
    return run_torch_or_cddp(tmp_path, SCRIPT, lib)


def test_ranks_drift_and_meet_at_averaging(tmp_path):
    r0, r1 = _launch(tmp_path, "cddp")
    assert r0["step"] == r1["step"] == 8
    same = [np.array_equal(a, b) for a, b in zip(r0["ws"], r1["ws"])]
    # steps 0-1: global gradient averaging; the averager runs after steps 2, 5 (warmup 2,
    # period 3); steps 3, 4, 6, 7: local only
    assert same == [True, True, True, False, False, True, False, False]


def test_matches_torch(tmp_path):
    pytest.importorskip("torch")
    ours, theirs = _launch(tmp_path, "cddp"), _launch(tmp_path, "torch")
    for k in (0, 1):
        np.testing.assert_allclose(np.array(ours[k]["ws"]), np.array(theirs[k]["ws"]),
                                   rtol=1e-5, atol=1e-6)
