"""torch.distributed.device_mesh on 4 ranks: a (2, 2) mesh's coordinates, per-dimension groups
(collectives over them), slices, flattening and from_group against the rank arithmetic and
against torch's DeviceMesh on gloo; DDP(device_mesh=) reduces over the mesh's group only;
FSDP HYBRID_SHARD on a 2-D mesh trains to the one-process result on the global batch."""
import numpy as np
import pytest

from ddp_util import run_torch_or_cddp

SCRIPT = r"""
import json, os, sys
if os.environ["LIB"] == "torch":
    import torch as T, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh, DeviceMesh
else:
    import cddp as T, cddp.distributed as dist
    from cddp.distributed.device_mesh import init_device_mesh, DeviceMesh

dist.init_process_group("gloo")
rank = dist.get_rank()
rec = {}
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
rec["coord"] = list(mesh.get_coordinate())
rec["local"] = [mesh.get_local_rank("dp"), mesh.get_local_rank("tp")]
rec["groups"] = [dist.get_process_group_ranks(mesh.get_group(d)) for d in ("dp", "tp")]
rec["slices"] = [mesh["dp"].mesh.tolist(), mesh["tp"].mesh.tolist(),
                 mesh["dp", "tp"].mesh.tolist()]
rec["shape"] = [list(mesh.shape), mesh.ndim, mesh.size(), mesh.size(1)]
rec["repr"] = [repr(mesh), repr(mesh["dp"]), repr(mesh["tp"])]
t = T.tensor([float(rank + 1)])
dist.all_reduce(t, group=mesh.get_group("tp"))
rec["tp_sum"] = t.item()
flat = mesh._flatten("dp_tp")
rec["flat"] = [flat.mesh.tolist(), dist.get_process_group_ranks(mesh.get_group("dp_tp")),
               mesh["dp_tp"].mesh.tolist()]
one = init_device_mesh("cpu", (4,))
rec["one"] = [one.mesh.tolist(), dist.get_process_group_ranks(one.get_group())]
wrapped = DeviceMesh.from_group(mesh.get_group("tp"), "cpu")
rec["from_group"] = [wrapped.mesh.tolist(), wrapped.get_local_rank()]
errors = []
for bad in (lambda: mesh.get_group(), lambda: mesh["nope"],
            lambda: mesh["tp", "dp"],
            lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "a")),
            lambda: init_device_mesh("cuda:0", (4,))):
    try:
        bad()
        errors.append(None)
    except Exception as e:
        errors.append(type(e).__name__)
rec["errors"] = errors

if os.environ["LIB"] == "cddp":
    # DDP over the dp group only: rank r's gradient x_r averages with its dp partner's
    T.manual_seed(0)
    lin = T.nn.Linear(3, 1, bias=False)
    ddp = T.nn.parallel.DistributedDataParallel(lin, device_mesh=mesh["dp"])
    w0 = lin.weight.detach().clone()
    x = T.arange(3.0).view(1, 3) + rank
    ddp(x).sum().backward()
    rec["ddp_grad"] = lin.weight.grad.tolist()
    # FSDP HYBRID_SHARD over the mesh (dim 1 shards, dim 0 replicates) = one process on the
    # global batch of the 4 ranks
    from cddp.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

    def build():
        T.manual_seed(1)
        return T.nn.Sequential(T.nn.Linear(4, 8), T.nn.Tanh(), T.nn.Linear(8, 2))

    def batch(r, s):
        g = T.Generator().manual_seed(100 * s + r)
        return T.randn(5, 4, generator=g), T.randn(5, 2, generator=g)

    model = FSDP(build(), device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD)
    opt = T.optim.SGD(model.parameters(), lr=0.1)
    ref = build()
    ropt = T.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(3):
        x, y = batch(rank, s)
        opt.zero_grad()
        T.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        ropt.zero_grad()
        xs, ys = zip(*(batch(r, s) for r in range(4)))
        T.nn.functional.mse_loss(ref(T.cat(xs)), T.cat(ys)).backward()
        ropt.step()
    with FSDP.summon_full_params(model):
        rec["fsdp"] = [p.detach().tolist() for p in model.module.parameters()]
    rec["ref"] = [p.detach().tolist() for p in ref.parameters()]
    try:
        FSDP(build(), device_mesh=mesh, process_group=mesh.get_group("dp"))
        rec["both"] = None
    except ValueError as e:
        rec["both"] = str(e)
dist.barrier()
with open(os.path.join(sys.argv[1], os.environ["LIB"] + str(rank) + ".json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def test_mesh_groups_slices_ddp_and_hybrid_fsdp(tmp_path):
    recs = run_torch_or_cddp(tmp_path, SCRIPT, "cddp", nprocs=4, timeout=240)
    for r, rec in enumerate(recs):
        dp, tp = divmod(r, 2)                              # row-major (2, 2) layout
        assert rec["coord"] == [dp, tp] and rec["local"] == [dp, tp]
        assert rec["groups"] == [[tp, 2 + tp], [2 * dp, 2 * dp + 1]]
        assert rec["slices"] == [[tp, 2 + tp], [2 * dp, 2 * dp + 1], [[0, 1], [2, 3]]]
        assert rec["shape"] == [[2, 2], 2, 4, 2]
        assert rec["repr"] == ["DeviceMesh((dp=2, tp=2), 'cpu', stride=(2, 1))",
                               "DeviceMesh((dp=2), 'cpu', stride=(2,))",
                               "DeviceMesh((tp=2), 'cpu', stride=(1,))"]
        assert rec["tp_sum"] == (2 * dp + 1) + (2 * dp + 2)
        assert rec["flat"] == [[0, 1, 2, 3]] * 3
        assert rec["one"] == [[0, 1, 2, 3]] * 2
        assert rec["from_group"] == [[2 * dp, 2 * dp + 1], tp]
        assert rec["errors"] == ["RuntimeError", "KeyError", "KeyError", "RuntimeError",
                                 "RuntimeError"]
        # the gradient of sum(w . x_r) is x_r = [0, 1, 2] + r: averaged with the dp partner
        partner = 2 + tp if dp == 0 else tp
        np.testing.assert_allclose(rec["ddp_grad"],
                                   [[(2 * k + r + partner) / 2 for k in range(3)]])
        for got, want in zip(rec["fsdp"], rec["ref"]):
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-6)
        assert "Cannot pass both process_group and device_mesh" in rec["both"]


def test_mesh_bookkeeping_matches_torch(tmp_path):
    pytest.importorskip("torch")
    ours = run_torch_or_cddp(tmp_path, SCRIPT, "cddp", nprocs=4, timeout=240)
    theirs = run_torch_or_cddp(tmp_path, SCRIPT, "torch", nprocs=4, timeout=240)
    for a, b in zip(ours, theirs):
        for key in ("coord", "local", "groups", "slices", "shape", "tp_sum", "flat", "one",
                    "from_group", "errors", "repr"):
            assert a[key] == b[key], key
