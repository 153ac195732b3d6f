"""HierarchicalModelAverager on 4 ranks: {2: 2, 4: 4} averages pairs every 2 steps and all 4
ranks every 4 (only the widest group when both periods divide the step), after warmup. Each
rank's parameter trajectory equals a NumPy simulation, and torch's where installed."""
import numpy as np
import pytest

from ddp_util import run_torch_or_cddp

SCRIPT = """
import json, os, sys
if os.environ["LIB"] == "torch":
    import torch as T, torch.distributed as dist
    from torch.distributed.algorithms.model_averaging.hierarchical_model_averager import (
        HierarchicalModelAverager)
else:
    import cddp as T, cddp.distributed as dist
    from cddp.distributed.algorithms.model_averaging.hierarchical_model_averager import (
        HierarchicalModelAverager)
from collections import OrderedDict
dist.init_process_group("gloo")
r = dist.get_rank()
p = T.nn.Parameter(T.tensor([float(r)], dtype=T.float64))
p.grad = T.zeros_like(p)          # the averagers average parameters that have a gradient
avg = HierarchicalModelAverager(OrderedDict([(2, 2), (4, 4)]), warmup_steps=1)
trace = []
for s in range(9):
    with T.no_grad():
        p += (r + 1) * 0.1 * (s + 1)
    avg.average_parameters([p])
    trace.append(p.item())
errors = []
for bad in ({}, {2: 2, 4: 3}, {0: 2, 4: 4}):
    try:
        HierarchicalModelAverager(bad)
        errors.append(None)
    except ValueError as e:
        errors.append(str(e)[:40])
with open(os.path.join(sys.argv[1], os.environ["LIB"] + str(r) + ".json"), "w") as f:
    json.dump({"trace": trace, "errors": errors}, f)
dist.destroy_process_group()
"""


def _simulate():
    v = np.arange(4, dtype=np.float64)
    out = []
    for s in range(9):
        v = v + (np.arange(4) + 1) * 0.1 * (s + 1)
        if s >= 1:                                   # warmup_steps=1
            if s % 4 == 0:
                v[:] = v.mean()
            elif s % 2 == 0:
                v[:2], v[2:] = v[:2].mean(), v[2:].mean()
        out.append(v.copy())
    return np.array(out)                             # (step, rank)


def test_hierarchical_averaging_matches_simulation(tmp_path):
    recs = run_torch_or_cddp(tmp_path, SCRIPT, "cddp", nprocs=4, timeout=180)
    want = _simulate()
    for r, rec in enumerate(recs):
        np.testing.assert_allclose(rec["trace"], want[:, r], rtol=1e-12)
        assert all(e is not None for e in rec["errors"])


def test_hierarchical_averaging_matches_torch(tmp_path):
    pytest.importorskip("torch")
    ours = run_torch_or_cddp(tmp_path, SCRIPT, "cddp", nprocs=4, timeout=180)
    theirs = run_torch_or_cddp(tmp_path, SCRIPT, "torch", nprocs=4, timeout=180)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a["trace"], b["trace"], rtol=1e-12)
        assert a["errors"] == b["errors"]
