"""FSDP2 (cddp.distributed.fsdp.fully_shard) and DTensor (cddp.distributed.tensor): real ranks
under cddp.run.

The core promise is equivalence: W ranks training a model sharded by fully_shard (one group
per block, then the root) on batch B each end with the same full weights as one process
training the plain model on the concatenated batch W*B. One job per world size (2 and 3;
at 3 ranks the 5-, 7- and 2-row parameters do not divide evenly and the 2-row head leaves
rank 2 without rows) runs every configuration — AdamW with 2-norm clipping, SGD-momentum
with inf-norm clipping, bfloat16 mixed precision, gradient accumulation with
set_requires_gradient_sync(False) — plus state-dict, optimizer-state, DCP and DTensor checks,
and saves what each rank saw; the tests compare it with single-process references computed
here, from the same initial weights (written with NumPy). torch's own fully_shard (gloo, CPU,
under torch.distributed.run) is the oracle for the AdamW and mixed-precision runs.
"""
import json
import os

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from ddp_util import run_ranks, run_torch_or_cddp

# model, data and options: shared by the rank scripts and the references here
HELPERS = """
import numpy as np
import cddp
import cddp.nn as nn
import cddp.nn.functional as F

D_IN, D, H, C = 6, 5, 7, 2      # at 3 ranks: 5 rows -> 2,2,1; 7 -> 3,3,1; 2 -> 1,1,0
B = 4                           # samples per rank per step
STEPS = 3

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, H)
        self.fc2 = nn.Linear(H, D)

    def forward(self, x):
        return x + self.fc2(self.fc1(self.norm(x)).relu())

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(D_IN, D)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(D, C)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)

def make(init):
    m = Net()
    m.load_state_dict({k: cddp.tensor(v) for k, v in init.items()})
    return m

def data(world, seed=5):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((STEPS + 1, world * B, D_IN)).astype(np.float32),
            rng.integers(0, C, (STEPS + 1, world * B)))

def make_opt(cfg, params):
    if cfg in ("sgd", "mp"):       # mp: SGD, which a wrong gradient scale would move
        return cddp.optim.SGD(params, lr=0.1, momentum=0.9)
    return cddp.optim.AdamW(params, lr=1e-2, weight_decay=0.1)

CLIP = {"adamw": (0.5, 2.0), "sgd": (0.05, "inf"), "mp": None, "accum": (1.0, 2.0)}
CONFIGS = ("adamw", "sgd", "mp", "accum")
"""

JOB = HELPERS + """
import copy, json, os
import cddp.distributed as dist
import cddp.distributed.checkpoint as dcp
from cddp.distributed.fsdp import fully_shard, FSDPModule, MixedPrecisionPolicy
from cddp.distributed.tensor import (DTensor, Shard, Replicate, Partial, distribute_tensor,
                                     init_device_mesh)
from cddp.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict,
    set_optimizer_state_dict)

dist.init_process_group("gloo")
rank, W = dist.get_rank(), dist.get_world_size()
init = dict(np.load(os.path.join(OUT, "init.npz")))
X, Y = data(W)
FULL = StateDictOptions(full_state_dict=True)
info, arrays = {}, {}

def shard(model, **kw):
    for layer in model.layers:
        fully_shard(layer, **kw)
    return fully_shard(model, **kw)

def batch(s, lo=0, hi=B):
    return (cddp.tensor(X[s, rank * B + lo:rank * B + hi]),
            cddp.tensor(Y[s, rank * B + lo:rank * B + hi]))

def step(cfg, model, opt, s):
    if cfg == "accum":      # two micro-batches, the first without gradient sync
        h = B // 2
        model.set_requires_gradient_sync(False)
        x, y = batch(s, 0, h)
        F.cross_entropy(model(x), y).backward()
        info.setdefault("nosync_grads_none", []).append(
            all(p.grad is None for p in model.parameters()))
        model.set_requires_gradient_sync(True)
        x, y = batch(s, h, B)
    else:
        x, y = batch(s)
    loss = F.cross_entropy(model(x).float(), y)
    loss.backward()
    norm = None
    if CLIP[cfg]:
        norm = float(nn.utils.clip_grad_norm_(model.parameters(), CLIP[cfg][0],
                                              norm_type=CLIP[cfg][1]))
    opt.step()
    opt.zero_grad()
    return float(loss), norm

def save_full(tag, model):
    for k, v in get_model_state_dict(model, options=FULL).items():
        arrays[tag + "|" + k] = v.float().numpy()

models, opts = {}, {}
for cfg in CONFIGS:
    kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=cddp.bfloat16)} if cfg == "mp" else {}
    model = shard(make(init), **kw)
    if cfg == "mp":
        seen = []
        model.layers[0].fc1.register_forward_pre_hook(
            lambda m, a: seen.append([str(m.weight.dtype), str(a[0].dtype)]))
    opt = make_opt(cfg, model.parameters())
    losses, norms = [], []
    for s in range(STEPS):
        loss, norm = step(cfg, model, opt, s)
        losses.append(loss)
        norms.append(norm)
    info[cfg] = {"losses": losses, "norms": norms}
    if cfg == "mp":
        info["mp_seen"] = seen
    save_full(cfg, model)
    models[cfg], opts[cfg] = model, opt

# ---- structure ---------------------------------------------------------------------------
m, opt = models["adamw"], opts["adamw"]
info["class"] = [type(m).__name__, type(m.layers[0]).__name__, isinstance(m, FSDPModule),
                 isinstance(m.layers[1], FSDPModule), isinstance(m.inp, FSDPModule)]
info["params"] = {n: [type(p).__name__, isinstance(p, DTensor), isinstance(p, nn.Parameter),
                      list(p.shape), list(p._spec.shape), repr(p.placements)]
                  for n, p in m.named_parameters()}
info["grad_type"] = None
x, y = batch(STEPS)
F.cross_entropy(m(x), y).backward()
info["grad_type"] = [isinstance(p.grad, DTensor) and list(p.grad.shape) == list(p.shape)
                     for p in m.parameters()]
opt.zero_grad()
try:
    fully_shard(m)
    info["twice"] = "no error"
except AssertionError as e:
    info["twice"] = str(e)[:60]
if W == 2:
    mesh2 = init_device_mesh("cpu", (1, 2))       # HSDP needs named dimensions, as torch
    try:
        fully_shard(make(init), mesh=mesh2)
        info["hsdp"] = "no error"
    except AssertionError as e:
        info["hsdp"] = str(e)

# ---- unshard / reshard -------------------------------------------------------------------
m.layers[0].unshard()
w = m.layers[0].fc1.weight
info["unshard"] = [type(w).__name__, list(w.shape)]
arrays["unshard|fc1"] = w.detach().numpy()
m.layers[0].reshard()
info["reshard"] = type(m.layers[0].fc1.weight).__name__

# ---- state dicts -------------------------------------------------------------------------
sd = m.state_dict()
info["sd_types"] = sorted({type(v).__name__ for v in sd.values()})
for k, v in sd.items():
    arrays["sd_full|" + k] = v.full_tensor().numpy()
    arrays["sd_local|" + k] = v.to_local().numpy().copy()   # it aliases the parameter
osd = get_optimizer_state_dict(m, opt)
info["osd_types"] = sorted({type(v).__name__ for st in osd["state"].values() for v in st.values()})
full_osd = get_optimizer_state_dict(m, opt, options=FULL)
for name, st in full_osd["state"].items():
    for k, v in st.items():
        arrays[f"osd|{name}|{k}"] = v.numpy()
info["cpu_offload_keys"] = len(get_model_state_dict(
    m, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))

# load a DTensor state dict into a fresh sharded model
fresh = shard(make(init))
fresh.load_state_dict(sd)
save_full("load_dtensor", fresh)
# load full plain tensors (model and optimizer), then both take one more identical step
plain_sd = get_model_state_dict(m, options=FULL)
fresh2 = shard(make(init))
opt2 = make_opt("adamw", fresh2.parameters())
set_model_state_dict(fresh2, plain_sd, options=FULL)
set_optimizer_state_dict(fresh2, opt2, full_osd, options=FULL)
save_full("load_full", fresh2)
# a model built on the meta device, sharded, then loaded with assign=True (pytorch/examples
# FSDP2's resume): DTensor Parameters of the full values, or the full plain tensors; then one
# more training step, beside the original's
resumed = {}
for tag in ("assign_dtensor", "assign_plain"):
    with cddp.device("meta"):
        meta = shard(Net())
    meta_sd = meta.state_dict()
    load = {k: nn.Parameter(distribute_tensor(v, meta_sd[k].device_mesh, meta_sd[k].placements))
            if tag == "assign_dtensor" else v for k, v in plain_sd.items()}
    meta.load_state_dict(load, strict=False, assign=True)
    info[tag] = sorted({type(p).__name__ for p in meta.parameters()})
    save_full(tag, meta)
    resumed[tag] = (meta, make_opt("adamw", meta.parameters()))
    # a checkpoint's copy of the state: load_state_dict shares what it is given, as torch's
    resumed[tag][1].load_state_dict(copy.deepcopy(opt.state_dict()))
step("adamw", m, opt, STEPS)
step("adamw", fresh2, opt2, STEPS)
for tag, (meta, meta_opt) in resumed.items():
    step("adamw", meta, meta_opt, STEPS)
    save_full(tag + "_stepped", meta)
save_full("resumed_orig", m)
save_full("resumed_loaded", fresh2)

# DCP: save the sharded state dict, load it into a fresh sharded model
ckpt = os.path.join(OUT, "ckpt")
dcp.save({"model": m.state_dict()}, checkpoint_id=ckpt)
fresh3 = shard(make(init))
target = {"model": fresh3.state_dict()}
dcp.load(target, checkpoint_id=ckpt)
info["dcp_types"] = sorted({type(v).__name__ for v in target["model"].values()})
save_full("dcp", fresh3)

# ---- DTensor -----------------------------------------------------------------------------
mesh = init_device_mesh("cpu", (W,))
t = cddp.arange(21).reshape(7, 3).float()
d0 = distribute_tensor(t + rank, mesh, [Shard(0)])         # rank 0's value is the source
d1 = distribute_tensor(t, mesh, [Shard(1)])
rep = d0.redistribute(mesh, [Replicate()])
back = rep.redistribute(mesh, [Shard(0)])
loc = DTensor.from_local(cddp.ones(2, 3) * rank, mesh, [Shard(0)])
part = DTensor.from_local(cddp.ones(3) * (rank + 1), mesh, [Partial()])
info["dtensor"] = {
    "d0_local": d0.to_local().tolist(), "d0_full": d0.full_tensor().tolist(),
    "d0_spec": [list(d0._spec.shape), repr(d0.placements), repr(d0.device_mesh)],
    "d1_local": d1.to_local().tolist(), "d1_full": d1.full_tensor().tolist(),
    "rep": [rep.to_local().tolist(), repr(rep.placements)],
    "back": back.to_local().tolist(),
    "from_local": [list(loc._spec.shape), loc.full_tensor().tolist()],
    "partial": [part.full_tensor().tolist(),
                part.redistribute(mesh, [Replicate()]).to_local().tolist()],
    "repr": repr(d0)[:60],
}
np.savez(os.path.join(OUT, f"rank{rank}.npz"), **arrays)
with open(os.path.join(OUT, f"rank{rank}.json"), "w") as f:
    json.dump(info, f)
dist.destroy_process_group()
"""

# the same training written once for torch and cddp: LIB picks the library
ORACLE = """
import importlib, json, os, signal, sys
import numpy as np
signal.alarm(150)                     # torchrun starts workers in their own sessions: bound them
LIB = os.environ["LIB"]
OUT = sys.argv[1]
torch = importlib.import_module(LIB)
dist = importlib.import_module(LIB + ".distributed")
fsdp = importlib.import_module(LIB + ".distributed.fsdp")
dsd = importlib.import_module(LIB + ".distributed.checkpoint.state_dict")
nn, F = torch.nn, torch.nn.functional
""" + HELPERS.split("class Block")[0].split("import cddp.nn.functional as F")[1] + \
    "class Block" + HELPERS.split("class Block")[1].split("def make(init)")[0] + """
dist.init_process_group("gloo")
rank, W = dist.get_rank(), dist.get_world_size()
init = dict(np.load(os.path.join(OUT, "init.npz")))
rng = np.random.default_rng(5)
X = rng.standard_normal((STEPS + 1, W * B, D_IN)).astype(np.float32)
Y = rng.integers(0, C, (STEPS + 1, W * B))
rec = {}
for cfg in ("adamw", "mp"):
    m = Net()
    m.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    kw = {"mp_policy": fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16)} if cfg == "mp" else {}
    for layer in m.layers:
        fsdp.fully_shard(layer, **kw)
    fsdp.fully_shard(m, **kw)
    opt = (torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) if cfg == "adamw"
           else torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    losses, norms = [], []
    for s in range(STEPS):
        x = torch.from_numpy(X[s, rank * B:(rank + 1) * B])
        y = torch.from_numpy(Y[s, rank * B:(rank + 1) * B])
        loss = F.cross_entropy(m(x).float(), y)
        loss.backward()
        if cfg == "adamw":
            n = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            norms.append(float(n.full_tensor() if hasattr(n, "full_tensor") else n))
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    sd = dsd.get_model_state_dict(m, options=dsd.StateDictOptions(full_state_dict=True))
    rec[cfg] = {"losses": losses, "norms": norms,
                "weights": {k: v.float().numpy().tolist() for k, v in sd.items()}}
with open(os.path.join(OUT, f"{LIB}{rank}.json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""

ns = {}
exec(HELPERS, ns)          # noqa: S102 (the test's own helper code)


def _init_weights():
    cddp.manual_seed(0)
    return {k: v.detach().numpy().copy() for k, v in ns["Net"]().state_dict().items()}


def _reference(cfg, world, init, steps=None, fp32=False):
    """One process on the concatenated batch: (state dict arrays, losses, norms, optimizer,
    model); fp32: the "mp" configuration without bfloat16."""
    steps = ns["STEPS"] if steps is None else steps
    B, CLIP, F = ns["B"], ns["CLIP"], nn.functional
    X, Y = ns["data"](world)
    m = ns["make"](init)
    opt = ns["make_opt"](cfg, m.parameters())
    losses, norms = [], []
    for s in range(steps):
        if cfg == "accum":
            h = B // 2
            for lo, hi in ((0, h), (h, B)):
                idx = np.concatenate([np.arange(r * B + lo, r * B + hi) for r in range(world)])
                loss = F.cross_entropy(m(cddp.tensor(X[s, idx])), cddp.tensor(Y[s, idx]))
                loss.backward()
        elif cfg == "mp" and not fp32:
            loss = _mp_backward(m, X[s], Y[s], world, B)
        else:
            loss = F.cross_entropy(m(cddp.tensor(X[s])), cddp.tensor(Y[s]))
            loss.backward()
        norm = None
        if CLIP[cfg]:
            norm = float(nn.utils.clip_grad_norm_(m.parameters(), CLIP[cfg][0],
                                                  norm_type=CLIP[cfg][1]))
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        norms.append(norm)
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}, losses, norms, opt, m


def _mp_backward(master, X, Y, world, B):
    """bfloat16 emulation: each rank's forward/backward with bfloat16 copies of the weights
    and inputs; gradients averaged over ranks in bfloat16 (float32 sum, one rounding)."""
    F = nn.functional
    names = [n for n, _ in master.named_parameters()]
    acc = {n: None for n in names}
    losses = []
    for r in range(world):
        m16 = ns["Net"]().to(cddp.bfloat16)
        m16.load_state_dict({k: v.detach().to(cddp.bfloat16)
                             for k, v in master.state_dict().items()})
        x = cddp.tensor(X[r * B:(r + 1) * B]).to(cddp.bfloat16)
        loss = F.cross_entropy(m16(x).float(), cddp.tensor(Y[r * B:(r + 1) * B]))
        loss.backward()
        losses.append(loss.item())
        for n, p in m16.named_parameters():
            g = p.grad.float()
            acc[n] = g if acc[n] is None else acc[n] + g
    for n, p in master.named_parameters():
        p.grad = (acc[n] / world).to(cddp.bfloat16).float()
    return cddp.tensor(float(np.mean(losses)))


# HSDP: 4 ranks on a (replicate 2, shard 2) mesh train as one process on the 4 batches
HSDP_JOB = HELPERS + """
import copy, json, os
import cddp.distributed as dist
from cddp.distributed.fsdp import fully_shard
from cddp.distributed.device_mesh import init_device_mesh
from cddp.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

dist.init_process_group("gloo")
rank, W = dist.get_rank(), dist.get_world_size()
init = dict(np.load(os.path.join(OUT, "init.npz")))
X, Y = data(W)
mesh = init_device_mesh("cpu", (2, W // 2), mesh_dim_names=("replicate", "shard"))
info, arrays = {}, {}
for cfg in ("adamw", "sgd"):
    m = make(init)
    for layer in m.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = make_opt(cfg, m.parameters())
    losses, norms = [], []
    for s in range(STEPS):
        loss = F.cross_entropy(m(cddp.tensor(X[s, rank * B:(rank + 1) * B])),
                               cddp.tensor(Y[s, rank * B:(rank + 1) * B]))
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(m.parameters(), CLIP[cfg][0],
                                                    norm_type=CLIP[cfg][1])))
        opt.step()
        opt.zero_grad()
        t = loss.detach().reshape(1)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        losses.append(float(t))
    info[cfg] = {"losses": losses, "norms": norms,
                 "placements": repr(m.head.weight.placements),
                 "local": {n: list(p.shape) for n, p in m.named_parameters()}}
    for k, v in get_model_state_dict(m, options=StateDictOptions(full_state_dict=True)).items():
        arrays[cfg + "|" + k] = v.numpy()
with open(os.path.join(OUT, f"rank{rank}.json"), "w") as f:
    json.dump(info, f)
np.savez(os.path.join(OUT, f"rank{rank}.npz"), **arrays)
"""


def _run(tmp_path, world, job=JOB):
    init = _init_weights()
    np.savez(tmp_path / "init.npz", **init)
    proc = run_ranks(tmp_path, job, nprocs=world, timeout=120)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = []
    for r in range(world):
        with open(tmp_path / f"rank{r}.json") as f:
            info = json.load(f)
        with np.load(tmp_path / f"rank{r}.npz") as z:
            arrays = {k: z[k] for k in z.files}
        out.append((info, arrays))
    return init, out


@pytest.fixture(scope="module")
def job2(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("fs2"), 2)


@pytest.fixture(scope="module")
def job3(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("fs3"), 3)


def test_hsdp_equals_one_process(tmp_path):
    """fully_shard over a (replicate, shard) = (2, 2) mesh: 4 ranks = one process on the 4
    batches (weights, mean losses, clip norms); parameters sharded over the shard dimension
    only and replicated over the other."""
    init, ranks = _run(tmp_path, 4, HSDP_JOB)
    for cfg in ("adamw", "sgd"):
        want, losses, norms, _, _ = _reference(cfg, 4, init)
        for r, (info, arrays) in enumerate(ranks):
            got = info[cfg]
            assert got["placements"] == "(Replicate(), Shard(dim=0))"
            shard_rank = r % 2                          # mesh [[0, 1], [2, 3]]
            for name, shape in got["local"].items():
                n = want[name].shape[0]
                c = -(-n // 2)
                rows = max(0, min(n, (shard_rank + 1) * c) - min(n, shard_rank * c))
                assert shape == [rows, *want[name].shape[1:]], (cfg, r, name)
            np.testing.assert_allclose(got["losses"], losses, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got["norms"], norms, rtol=1e-5, atol=1e-6)
            for k in want:
                _close(arrays[cfg + "|" + k], want[k], 1e-5, f"HSDP {cfg} rank {r} {k}")


def _close(got, want, atol, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    err = np.abs(got - want)
    if err.size and err.max() > atol:
        i = np.unravel_index(err.argmax(), err.shape)
        raise AssertionError(f"{what}: max error {err.max():.3g} at {i} (got {got[i]}, "
                             f"want {want[i]})")


def _full(arrays, tag):
    pre = tag + "|"
    return {k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)}


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("cfg", ["adamw", "sgd", "accum"])
def test_ranks_equal_one_process(job2, job3, world, cfg):
    """W ranks on B samples each = one process on W*B: weights, losses, clip norms."""
    init, ranks = job2 if world == 2 else job3
    want, losses, norms, _, _ = _reference(cfg, world, init)
    for r, (info, arrays) in enumerate(ranks):
        got = _full(arrays, cfg)
        assert sorted(got) == sorted(want)
        for k in want:
            _close(got[k], want[k], 1e-5, f"{cfg}, {world} ranks, rank {r}, {k}")
        if norms[0] is not None:
            np.testing.assert_allclose(info[cfg]["norms"], norms, rtol=1e-5)
    if cfg != "accum":         # the mean of the ranks' losses is the global batch's loss
        mean = np.mean([info[cfg]["losses"] for info, _ in ranks], axis=0)
        np.testing.assert_allclose(mean, losses, rtol=1e-5)
    # the training moved the weights (a no-op would not pass the comparison above anyway)
    assert any(np.abs(want[k] - init[k]).max() > 1e-3 for k in want)


def test_gradient_sync_off_leaves_grads_until_synced_backward(job2, job3):
    for _, ranks in (job2, job3):
        for info, _ in ranks:
            assert info["nosync_grads_none"] == [True] * 3


@pytest.mark.parametrize("world", [2, 3])
def test_mixed_precision_bfloat16(job2, job3, world):
    init, ranks = job2 if world == 2 else job3
    want, _, _, _, _ = _reference("mp", world, init)
    fp32, _, _, _, _ = _reference("mp", world, init, fp32=True)
    for info, arrays in ranks:
        # the forward saw bfloat16 parameters and inputs
        assert info["mp_seen"] and all(s == ["cddp.bfloat16", "cddp.bfloat16"]
                                       for s in info["mp_seen"]), info["mp_seen"]
        got = _full(arrays, "mp")
        for k in want:
            assert got[k].dtype == np.float32          # master weights stay float32
            # 2 ranks match exactly; at 3 the ring's bfloat16 partial sums round once more
            # than the emulation's float32 sum (one bfloat16 ulp of a gradient, times lr)
            _close(got[k], want[k], 2e-3, f"mixed precision, {world} ranks, {k}")
    # and bfloat16 made a difference (the policy was applied)
    assert max(np.abs(_full(ranks[0][1], "mp")[k] - fp32[k]).max() for k in fp32) > 1e-4


def test_structure_and_errors(job2, job3):
    for world, (_, ranks) in ((2, job2), (3, job3)):
        for r, (info, _) in enumerate(ranks):
            assert info["class"] == ["FSDPNet", "FSDPBlock", True, True, False]
            for name, (tname, is_dt, is_param, local, glob, placements) in \
                    info["params"].items():
                assert is_dt and is_param and placements == "(Shard(dim=0),)", name
                n = glob[0]
                c = -(-n // world)
                rows = max(0, min(n, (r + 1) * c) - min(n, r * c))
                assert local == [rows] + glob[1:], (name, r, local)
            assert all(info["grad_type"])
            assert info["twice"].startswith("Each distinct composable distributed API")
    assert job3[1][2][0]["params"]["head.weight"][3] == [0, 5]     # fewer rows than ranks
    assert job2[1][0][0]["hsdp"] == "Please init the 2D mesh for HSDP with mesh_dim_names " \
                                    "specified"


def test_unshard_reshard(job2):
    init, ranks = job2
    want, _, _, _, _ = _reference("adamw", 2, init)
    for info, arrays in ranks:
        assert info["unshard"] == ["Tensor", [7, 5]]
        assert info["reshard"] == "_DTensorParameter"
        _close(arrays["unshard|fc1"], want["layers.0.fc1.weight"], 1e-5, "unshard")


@pytest.mark.parametrize("world", [2, 3])
def test_state_dicts(job2, job3, world):
    init, ranks = job2 if world == 2 else job3
    want, _, _, opt, m = _reference("adamw", world, init)
    ref_osd = opt.state_dict()["state"]
    names = [n for n, _ in m.named_parameters()]
    for r, (info, arrays) in enumerate(ranks):
        assert info["sd_types"] == ["DTensor"]
        assert info["osd_types"] == ["DTensor", "Tensor"]      # exp_avg(_sq); step
        assert info["dcp_types"] == ["DTensor"]
        assert info["assign_dtensor"] == info["assign_plain"] == ["_DTensorParameter"]
        assert info["cpu_offload_keys"] == (len(want) if r == 0 else 0)
        for k in want:
            _close(arrays["sd_full|" + k], want[k], 1e-5, f"state_dict full_tensor {k}")
            n = want[k].shape[0]
            c = -(-n // world)
            _close(arrays["sd_local|" + k], want[k][min(n, r * c):min(n, (r + 1) * c)],
                   1e-5, f"state_dict local part {k}")
            for tag in ("load_dtensor", "load_full", "assign_dtensor", "assign_plain"):
                _close(_full(arrays, tag)[k], want[k], 1e-5, f"{tag} {k}")
            for tag in ("assign_dtensor_stepped", "assign_plain_stepped"):
                _close(_full(arrays, tag)[k], _full(arrays, "resumed_orig")[k], 1e-6,
                       f"{tag}: the meta-built model loaded with assign=True trains as the "
                       f"original {k}")
            # DCP saved the original model after its extra step
            _close(_full(arrays, "dcp")[k], _full(arrays, "resumed_orig")[k], 1e-6,
                   f"DCP round trip {k}")
            _close(_full(arrays, "resumed_loaded")[k], _full(arrays, "resumed_orig")[k],
                   1e-6, f"resumed from the full state dicts {k}")
        for i, name in enumerate(names):
            for key in ("exp_avg", "exp_avg_sq"):
                _close(arrays[f"osd|{name}|{key}"], ref_osd[i][key].numpy(), 1e-5,
                       f"optimizer state {name} {key}")


def test_dtensor(job2, job3):
    t = np.arange(21, dtype=np.float32).reshape(7, 3)
    for world, (_, ranks) in ((2, job2), (3, job3)):
        c = -(-7 // world)
        for r, (info, _) in enumerate(ranks):
            d = info["dtensor"]
            lo, hi = min(7, r * c), min(7, (r + 1) * c)
            assert np.array_equal(np.array(d["d0_local"]).reshape(-1, 3), t[lo:hi])
            assert np.array_equal(d["d0_full"], t)       # rank 0's value everywhere
            assert d["d0_spec"] == [[7, 3], "(Shard(dim=0),)",
                                    f"DeviceMesh(({world},), 'cpu', stride=(1,))"]
            c1 = -(-3 // world)
            lo1, hi1 = min(3, r * c1), min(3, (r + 1) * c1)
            assert np.array_equal(np.array(d["d1_local"]).reshape(7, -1), t[:, lo1:hi1])
            assert np.array_equal(d["d1_full"], t)
            assert np.array_equal(d["rep"][0], t) and d["rep"][1] == "(Replicate(),)"
            assert np.array_equal(np.array(d["back"]).reshape(-1, 3), t[lo:hi])
            assert d["from_local"][0] == [2 * world, 3]
            assert np.array_equal(d["from_local"][1],
                                  np.repeat(np.arange(world, dtype=np.float32), 2)[:, None]
                                  * np.ones((1, 3)))
            total = world * (world + 1) / 2
            assert d["partial"] == [[total] * 3, [total] * 3]
            assert d["repr"].startswith("DTensor(local_tensor=tensor(")


def test_placements():
    from cddp.distributed.tensor import Partial, Replicate, Shard
    assert Shard(0) == Shard(dim=0) and Shard(0) != Shard(1) and Shard(0) != Replicate()
    assert len({Shard(0), Shard(dim=0), Replicate(), Replicate(), Partial(), Partial("sum")}) == 3
    assert [repr(p) for p in (Shard(1), Replicate(), Partial(), Partial("avg"))] == \
        ["Shard(dim=1)", "Replicate()", "Partial(sum)", "Partial(avg)"]
    assert [str(p) for p in (Shard(1), Replicate(), Partial())] == ["S(1)", "R", "P(sum)"]
    assert Shard(0).is_shard() and Shard(0).is_shard(0) and not Shard(0).is_shard(1)
    assert Replicate().is_replicate() and Partial().is_partial() and not Shard(0).is_partial()
    with pytest.raises(AttributeError):
        Shard(0).dim = 1
    import cddp.distributed._tensor as alias
    import cddp.distributed.tensor as tensor
    assert alias.DTensor is tensor.DTensor and alias.Shard is Shard
    from cddp.distributed._tensor.placement_types import Shard as S2
    from cddp.distributed._composable.fsdp import fully_shard as f1
    from cddp.distributed.fsdp import fully_shard as f2
    assert S2 is Shard and f1 is f2
    torch = pytest.importorskip("torch")
    from torch.distributed.tensor import Partial as TP, Replicate as TR, Shard as TS
    assert [repr(p) for p in (TS(1), TR(), TP(), TP("avg"))] == \
        [repr(p) for p in (Shard(1), Replicate(), Partial(), Partial("avg"))]
    assert [str(p) for p in (TS(1), TR(), TP())] == [str(p) for p in (Shard(1), Replicate(),
                                                                      Partial())]


def test_matches_torch_fully_shard(job2, tmp_path):
    """torch's fully_shard on CPU (gloo, torch.distributed.run) from the same initial
    weights and data: final weights, losses and clip norms."""
    pytest.importorskip("torch")
    init, ranks = job2
    np.savez(tmp_path / "init.npz", **init)
    recs = run_torch_or_cddp(tmp_path, ORACLE, "torch", nprocs=2, timeout=150)
    for r, rec in enumerate(recs):
        info, arrays = ranks[r]
        for cfg, atol in (("adamw", 1e-5), ("mp", 1e-3)):
            got = _full(arrays, cfg)
            for k, v in rec[cfg]["weights"].items():
                _close(got[k], np.array(v, dtype=np.float32), atol,
                       f"torch oracle {cfg} rank {r} {k}")
            np.testing.assert_allclose(info[cfg]["losses"], rec[cfg]["losses"],
                                       rtol=1e-5 if cfg == "adamw" else 1e-3)
        np.testing.assert_allclose(info["adamw"]["norms"], rec["adamw"]["norms"], rtol=1e-5)
