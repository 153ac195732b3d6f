"""PowerSGD comm hooks: 2-rank DDP training equals torch's powerSGD_hook (three settings), and
one compressed step of each hook equals a NumPy computation of PowerSGD from the ranks'
buckets (so the math is checked without torch too)."""
import json

import numpy as np
import pytest

from ddp_util import run_ranks, run_torch_or_cddp

TRAIN = """
import os, sys, json
import numpy as np
if os.environ["LIB"] == "torch":
    import torch as T, torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
else:
    import cddp as T, cddp.distributed as dist
    from cddp.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
dist.init_process_group("gloo")
r = dist.get_rank()
out = {}
for name, kw in (("rank1", {}), ("rank3_qr", {"matrix_approximation_rank": 3}),
                 ("cold", {"warm_start": False, "use_error_feedback": False,
                           "start_powerSGD_iter": 1})):
    T.manual_seed(0)
    model = T.nn.Sequential(T.nn.Linear(8, 16), T.nn.ReLU(), T.nn.Linear(16, 8), T.nn.ReLU(),
                            T.nn.Linear(8, 4))
    ddp = T.nn.parallel.DistributedDataParallel(model)
    kw.setdefault("start_powerSGD_iter", 2)
    ddp.register_comm_hook(powerSGD.PowerSGDState(process_group=None, **kw),
                           powerSGD.powerSGD_hook)
    opt = T.optim.SGD(ddp.parameters(), lr=0.1)
    g = np.random.default_rng(7 + r)
    for s in range(5):
        x = T.tensor(g.standard_normal((6, 8)).astype(np.float32))
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
    out[name] = [p.detach().numpy().tolist() for p in model.parameters()]
with open(os.path.join(sys.argv[1], os.environ["LIB"] + str(r) + ".json"), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
"""


def _launch(tmp_path, lib):
    return run_torch_or_cddp(tmp_path, TRAIN, lib)


def test_training_equals_torchs_powersgd(tmp_path):
    pytest.importorskip("torch")
    ours, theirs = _launch(tmp_path, "cddp"), _launch(tmp_path, "torch")
    for k in (0, 1):
        for name in theirs[k]:
            for a, b in zip(ours[k][name], theirs[k][name]):
                np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)


STEP = """
import json, os
import numpy as np
import cddp, cddp.distributed as dist
from cddp.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
dist.init_process_group("gloo")
r = dist.get_rank()
rec = {}
for kind in ("powerSGD_hook", "batched_powerSGD_hook"):
    cddp.manual_seed(0)
    model = cddp.nn.Sequential(cddp.nn.Linear(12, 40), cddp.nn.Linear(40, 30))
    ddp = cddp.nn.parallel.DistributedDataParallel(model)
    state = powerSGD.PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=2)
    seen = []
    def hook(st, bucket, kind=kind):
        entered = bucket.buffer().numpy().copy()
        out = getattr(powerSGD, kind)(st, bucket).wait()
        seen.append([entered.tolist(), out.numpy().tolist(),
                     [list(g.shape) for g in bucket.gradients()]])
        return powerSGD._done(out)
    ddp.register_comm_hook(state, hook)
    x = cddp.tensor(np.random.default_rng(3 + r).standard_normal((5, 12)).astype(np.float32))
    for s in range(3):
        ddp.zero_grad()
        ddp(x * (s + 1)).pow(2).sum().backward()
    rec[kind] = seen[2]                # the first compressed step (iter 2)
with open(os.path.join(OUT, f"p{r}.json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def _orth(m):
    """Gram-Schmidt on the columns (the hook's rule for rank <= 2)."""
    m = m.copy()
    for i in range(m.shape[1]):
        m[:, i] /= np.linalg.norm(m[:, i])
        for j in range(i + 1, m.shape[1]):
            m[:, j] -= (m[:, i] @ m[:, j]) * m[:, i]
    return m


def _draws(shapes):
    import cddp
    seed = np.random.RandomState(0).randint(1_000_000_000)
    cddp.manual_seed(seed)
    return [cddp.randn(*s).numpy().astype(np.float64) for s in shapes]


def test_one_compressed_step_equals_numpy(tmp_path):
    r = run_ranks(tmp_path, STEP, nprocs=2, timeout=90)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads((tmp_path / f"p{k}.json").read_text()) for k in (0, 1)]
    # batched: the bucket as one padded (s, s) matrix, rank 2
    ins = [np.array(rec["batched_powerSGD_hook"][0], dtype=np.float64) for rec in recs]
    total = ins[0].size
    side = int(np.ceil(np.sqrt(total)))
    ms = [np.concatenate([v, np.zeros(side * side - total)]).reshape(side, side) for v in ins]
    q = _orth(_draws([(side, 2)])[0])
    p = _orth(sum(m @ q for m in ms))
    q = sum(m.T @ p for m in ms) / 2
    want = (p @ q.T).reshape(-1)[:total]
    for rec in recs:
        np.testing.assert_allclose(rec["batched_powerSGD_hook"][1], want, rtol=1e-4, atol=1e-5)
    # per tensor: the weights (40x12, 30x40) compressed at rank 2, the biases averaged
    entered = [np.array(rec["powerSGD_hook"][0], dtype=np.float64) for rec in recs]
    shapes = recs[0]["powerSGD_hook"][2]
    want, at, compressed = [], 0, []
    for shape in shapes:
        n = int(np.prod(shape))
        parts = [e[at:at + n].reshape(shape[0], -1) for e in entered]
        rows, cols = parts[0].shape
        if (rows + cols) * min(rows, cols, 2) * 2 < rows * cols:
            compressed.append((len(want), parts))
            want.append(None)
        else:
            want.append(sum(parts).reshape(-1) / 2)
        at += n
    qs = [_orth(d) for d in _draws([(parts[0].shape[1], 2) for _, parts in compressed])]
    for (slot, parts), q in zip(compressed, qs):
        p = _orth(sum(m @ q for m in parts))
        qq = sum(m.T @ p for m in parts) / 2
        want[slot] = (p @ qq.T).reshape(-1)
    for rec in recs:
        np.testing.assert_allclose(rec["powerSGD_hook"][1], np.concatenate(want),
                                   rtol=1e-4, atol=1e-5)
    assert compressed, "no tensor was compressed: the test would not test PowerSGD"
