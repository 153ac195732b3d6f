"""DistributedDataParallel in the less common usages the DDP sweep compared with torch: outputs
left out of the loss and dataclass outputs under find_unused_parameters, static_graph with an
unused parameter, the buffer options of torch 2.13 (broadcast_buffers vs forward_sync_buffers,
init_sync), buffers under Join, and the new keyword arguments. One job per library; each rank
also computes what DDP should give by hand (a plain copy of the model, gradients averaged with
all_reduce), and where torch is installed its records must equal cddp's."""
import json

import numpy as np
import pytest

from ddp_util import run_torch_or_cddp

SCRIPT = r'''
import dataclasses, json, os, sys, warnings
warnings.simplefilter("ignore", FutureWarning)
if os.environ["LIB"] == "torch":
    import torch as T
else:
    import cddp as T
import copy
nn, dist = T.nn, T.distributed
DDP = T.nn.parallel.DistributedDataParallel
dist.init_process_group("gloo")
r = dist.get_rank()
rec = {}

def avg_grads(model):
    out = []
    for p in model.parameters():
        g = p.grad.clone() if p.grad is not None else T.zeros_like(p)
        dist.all_reduce(g)
        out.append((g / 2).tolist())
    return out

def gap(a, b):
    return max(float(abs(T.tensor(x) - T.tensor(y)).max()) for x, y in zip(a, b))

@dataclasses.dataclass
class Out:
    main: object
    aux: object

class Two(nn.Module):
    def __init__(self, dc=False):
        super().__init__()
        T.manual_seed(0)
        self.body, self.head, self.aux, self.dc = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 3), dc
    def forward(self, x):
        h = self.body(x).relu()
        return Out(self.head(h), self.aux(h)) if self.dc else (self.head(h), self.aux(h))

x = T.arange(8, dtype=T.float32).reshape(2, 4) / 7 + r

# A. a dataclass output under find_unused_parameters: reduced like any other
m = Two(dc=True); ref = copy.deepcopy(m)
o = DDP(m, find_unused_parameters=True)(x)
(o.main.sum() + o.aux.pow(2).sum()).backward()
o2 = ref(x); (o2.main.sum() + o2.aux.pow(2).sum()).backward()
rec["dataclass"] = [[p.grad.tolist() for p in m.parameters()], gap([p.grad.tolist() for p in m.parameters()], avg_grads(ref))]

# B. an output left out of the loss: trains, and its head keeps .grad None on every rank
m = Two(); ref = copy.deepcopy(m)
d = DDP(m, find_unused_parameters=True)
opt, ropt = T.optim.SGD(m.parameters(), lr=0.1), T.optim.SGD(ref.parameters(), lr=0.1)
for s in range(3):
    opt.zero_grad(); ropt.zero_grad()
    d(x * (s + 1))[0].sum().backward(); opt.step()
    ref(x * (s + 1))[0].sum().backward()
    for p, g in zip(ref.parameters(), avg_grads(ref)):
        if p.grad is not None:
            p.grad.copy_(T.tensor(g))
    ropt.step()
rec["unused_output"] = [m.aux.weight.grad is None, [p.tolist() for p in m.parameters()],
                        gap([p.tolist() for p in m.parameters()], [p.tolist() for p in ref.parameters()])]

# C. static_graph with a parameter no forward uses
class WithSpare(nn.Module):
    def __init__(self):
        super().__init__()
        T.manual_seed(1)
        self.a, self.spare = nn.Linear(4, 2), nn.Linear(4, 2)
    def forward(self, x):
        return self.a(x)
m = WithSpare(); ref = copy.deepcopy(m)
d = DDP(m, static_graph=True)
for s in range(3):
    m.zero_grad(); d(x * (s + 1)).sum().backward()
ref(x * 3).sum().backward()
rec["static_unused"] = [m.a.weight.grad.tolist(), m.spare.weight.grad is None,
                        gap([m.a.weight.grad.tolist()], avg_grads(ref)[:1])]

# D / E. buffers at construction: broadcast_buffers=False keeps them rank-local,
# forward_sync_buffers=False still takes rank 0's
for name, kw in (("bcast_false", {"broadcast_buffers": False}),
                 ("fsync_false", {"forward_sync_buffers": False})):
    bn = nn.BatchNorm1d(3)
    bn.running_mean.fill_(float(r + 1))
    DDP(nn.Sequential(nn.Linear(3, 3), bn), **kw)
    rec[name] = bn.running_mean.tolist()

# F. Join: buffers come from the rank still training (rank 0 stops after 2 steps, rank 1 runs 5)
T.manual_seed(2)
net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
d = DDP(net)
with d.join():
    for s in range(2 if r == 0 else 5):
        d(T.arange(12, dtype=T.float32).reshape(4, 3) * (s + 1) + r).sum().backward()
rec["join_buffers"] = [int(net[1].num_batches_tracked), net[1].running_mean.tolist()]

# G. torch 2.13's keyword arguments
T.manual_seed(3 + r)                          # different weights per rank
lin = nn.Linear(3, 2)
DDP(lin, init_sync=False, bucket_cap_mb_list=[1, 2], skip_all_reduce_unused_params=True,
    batched_grad_copy=True)
w = lin.weight.detach().clone(); dist.all_reduce(w)
rec["init_sync_false"] = bool(abs(w / 2 - lin.weight.detach()).max() > 1e-3)   # still per rank
try:
    DDP(nn.Linear(3, 2), delay_all_reduce_named_params=[])
    rec["delay_alone"] = "accepted"
except ValueError:
    rec["delay_alone"] = "ValueError"

with open(os.path.join(sys.argv[1], f"{os.environ['LIB']}{r}.json"), "w") as fh:
    json.dump(rec, fh)
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = {"cddp": run_torch_or_cddp(tmp_path_factory.mktemp("cddp"), SCRIPT, "cddp",
                                     timeout=180)}
    try:
        import torch  # noqa: F401
        out["torch"] = run_torch_or_cddp(tmp_path_factory.mktemp("torch"), SCRIPT, "torch",
                                         timeout=240)
    except ImportError:
        pass
    return out


def test_against_hand_averaged_gradients(records):
    for r, rec in enumerate(records["cddp"]):
        assert rec["dataclass"][1] < 1e-5, (r, rec["dataclass"])
        assert rec["unused_output"][0] is True
        assert rec["unused_output"][2] < 1e-5, (r, rec["unused_output"])
        assert rec["static_unused"][1] is True and rec["static_unused"][2] < 1e-5, rec
    a, b = records["cddp"]
    np.testing.assert_allclose(_numbers(a["dataclass"][0]), _numbers(b["dataclass"][0]))
    np.testing.assert_allclose(_numbers(a["unused_output"][1]), _numbers(b["unused_output"][1]))


def test_buffer_options_and_keywords(records):
    for r, rec in enumerate(records["cddp"]):
        assert rec["bcast_false"] == [float(r + 1)] * 3          # rank-local
        assert rec["fsync_false"] == [1.0] * 3                   # rank 0's
        assert rec["init_sync_false"] is True
        assert rec["delay_alone"] == "ValueError"
    a, b = records["cddp"]
    assert a["join_buffers"][0] == b["join_buffers"][0] == 5
    np.testing.assert_allclose(a["join_buffers"][1], b["join_buffers"][1])


def test_records_equal_torchs(records):
    if "torch" not in records:
        pytest.skip("torch not installed (the oracle)")
    for ours, theirs in zip(records["cddp"], records["torch"]):
        assert set(ours) == set(theirs)
        # torch 2.13 keeps a dataclass output out of its DDPSink: in this job its two ranks
        # end with different, unreduced gradients (its own gap to the hand average is ~1.9);
        # cddp reduces them (test_against_hand_averaged_gradients)
        for key in set(ours) - {"dataclass"}:
            np.testing.assert_allclose(np.array(_numbers(ours[key]), dtype=float),
                                       np.array(_numbers(theirs[key]), dtype=float),
                                       rtol=1e-5, atol=1e-6, err_msg=key)


def _numbers(v):
    """The record flattened to numbers (booleans and the ValueError text as 0/1 flags; the
    hand-averaging gaps, which are round-off, as 0)."""
    if isinstance(v, list):
        return [x for item in v for x in _numbers(item)]
    if isinstance(v, bool):
        return [float(v)]
    if isinstance(v, str):
        return [float(v == "ValueError")]
    return [v if abs(v) > 1e-4 or v == 0 else 0.0]
