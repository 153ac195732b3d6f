"""cddp.distributed.checkpoint (DCP): save / load / async_save and the get_/set_ state dict
helpers. Oracles: an uninterrupted training run (a resumed run must reach the same weights),
the values saved, torch's get_state_dict layout (skipped without torch), and the rank-count
changes (2 ranks -> 1 process -> 2 ranks)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.distributed.checkpoint as dcp
from cddp.distributed.checkpoint import state_dict as dsd
from conftest import subprocess_env
from ddp_util import run_ranks


def _model(seed=0):
    cddp.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))


def _train(m, o, steps, seed=1):
    g = np.random.default_rng(seed)
    for _ in range(steps):
        x = cddp.tensor(g.standard_normal((8, 3)).astype(np.float32))
        o.zero_grad()
        (m(x) ** 2).mean().backward()
        o.step()


def _weights(m):
    return [p.detach().numpy().copy() for p in m.parameters()]


def test_resume_equals_uninterrupted_training(tmp_path):
    ref, ref_o = _model(), None
    ref_o = cddp.optim.Adam(ref.parameters(), lr=0.05)
    _train(ref, ref_o, 6)

    m = _model()
    o = cddp.optim.Adam(m.parameters(), lr=0.05)
    _train(m, o, 3)
    msd, osd = dsd.get_state_dict(m, o)
    md = dcp.save({"model": msd, "optim": osd, "step": 3}, checkpoint_id=tmp_path / "c")
    assert md.state_dict_metadata["model.0.weight"].size == cddp.Size([5, 3])
    assert isinstance(md.state_dict_metadata["step"], dcp.BytesStorageMetadata)

    m2 = _model(seed=7)                  # other initial weights, another lr: all restored
    o2 = cddp.optim.Adam(m2.parameters(), lr=0.5)
    msd, osd = dsd.get_state_dict(m2, o2)      # creates o2's state so it can be filled
    state = {"model": msd, "optim": osd, "step": 0}
    dcp.load(state, checkpoint_id=tmp_path / "c")
    dsd.set_state_dict(m2, o2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    assert state["step"] == 3 and o2.param_groups[0]["lr"] == 0.05
    _train(m2, o2, 3, seed=1)
    # the data of steps 4-6 differ from the reference's (another generator position), so
    # compare against the reference continued the same way
    ref2 = _model()
    ref2_o = cddp.optim.Adam(ref2.parameters(), lr=0.05)
    _train(ref2, ref2_o, 3)
    _train(ref2, ref2_o, 3, seed=1)
    for a, b in zip(_weights(m2), _weights(ref2)):
        np.testing.assert_array_equal(a, b)


def test_stateful_values_and_in_place_fill(tmp_path):
    m = _model()
    o = cddp.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    _train(m, o, 2)
    dcp.save({"model": m, "optim": o, "meta": {"epoch": 4, "names": ("a", "b")}},
             checkpoint_id=str(tmp_path))
    m2 = _model(seed=3)
    o2 = cddp.optim.SGD(m2.parameters(), lr=0.1, momentum=0.9)
    _train(m2, o2, 1)                    # momentum buffers exist, to be overwritten
    w_obj = m2[0].weight
    buf = o2.state[m2[0].weight]["momentum_buffer"]
    sd = {"model": m2, "optim": o2, "meta": {"epoch": 0, "names": None}}
    dcp.load(sd, checkpoint_id=str(tmp_path))
    assert m2[0].weight is w_obj and sd["meta"] == {"epoch": 4, "names": ("a", "b")}
    for a, b in zip(_weights(m2), _weights(m)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(o2.state[m2[0].weight]["momentum_buffer"].numpy(),
                                  o.state[m[0].weight]["momentum_buffer"].numpy())
    assert buf is not None


def test_missing_key_size_mismatch_and_partial_load(tmp_path):
    dcp.save({"a": cddp.ones(2, 3), "b": cddp.zeros(4)}, checkpoint_id=tmp_path)
    keep = cddp.full((2, 3), 7.0)
    sd = {"a": keep, "c": cddp.zeros(1)}
    with pytest.raises(dcp.CheckpointException, match=r"Missing key in checkpoint state_dict: c\."):
        dcp.load(sd, checkpoint_id=tmp_path)
    assert float(keep.sum()) == 42.0     # nothing written: the load checks before filling
    dcp.load(sd, checkpoint_id=tmp_path, planner=dcp.DefaultLoadPlanner(allow_partial_load=True))
    assert float(keep.sum()) == 6.0 and float(sd["c"][0]) == 0.0
    with pytest.raises(dcp.CheckpointException,
                       match=r"Size mismatch between saved .*\[4\].* and current: .*\[5\].* for b"):
        dcp.load({"b": cddp.zeros(5)}, checkpoint_id=tmp_path)
    with pytest.raises(NotImplementedError, match="planner"):
        dcp.save({"a": cddp.ones(1)}, checkpoint_id=tmp_path, planner=object())


def test_key_collision_and_meta_tensor_refused(tmp_path):
    with pytest.raises(dcp.CheckpointException, match="both flatten to 'a.b'"):
        dcp.save({"a.b": cddp.ones(1), "a": {"b": cddp.ones(1)}}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="meta device"):
        dcp.save({"w": cddp.empty(3, device="meta")}, checkpoint_id=tmp_path)
    assert os.listdir(tmp_path) == []


def test_failed_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    from cddp.distributed.checkpoint import _layout
    dcp.save({"w": cddp.ones(3)}, checkpoint_id=tmp_path)
    before = sorted(os.listdir(tmp_path))

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(_layout, "write_metadata", boom)
    with pytest.raises(dcp.CheckpointException, match="committing .metadata.*No space left"):
        dcp.save({"w": cddp.full((3,), 2.0)}, checkpoint_id=tmp_path)
    assert sorted(os.listdir(tmp_path)) == before          # the new data file removed
    monkeypatch.undo()
    out = {"w": cddp.zeros(3)}
    dcp.load(out, checkpoint_id=tmp_path)
    assert out["w"].tolist() == [1.0, 1.0, 1.0]


KILLED = """
import os, sys
import cddp, cddp.distributed.checkpoint as dcp
from cddp.distributed.checkpoint import _layout
def die(*a, **k):
    os._exit(9)                          # killed after the data file, before .metadata
_layout.write_metadata = die
dcp.save({"w": cddp.full((3,), 2.0)}, checkpoint_id=sys.argv[1])
"""


def test_killed_save_leaves_previous_checkpoint_and_next_save_cleans(tmp_path):
    dcp.save({"w": cddp.ones(3)}, checkpoint_id=tmp_path)
    r = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], env=subprocess_env(),
                       timeout=60, capture_output=True)
    assert r.returncode == 9, r.stderr[-2000:]
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".distcp")]) == 2
    out = {"w": cddp.zeros(3)}
    dcp.load(out, checkpoint_id=tmp_path)
    assert out["w"].tolist() == [1.0, 1.0, 1.0]
    dcp.save({"w": cddp.full((3,), 5.0)}, checkpoint_id=tmp_path)
    files = os.listdir(tmp_path)
    assert len([f for f in files if f.endswith(".distcp")]) == 1 and ".metadata" in files
    dcp.load(out, checkpoint_id=tmp_path)
    assert out["w"].tolist() == [5.0, 5.0, 5.0]


def test_forged_and_foreign_checkpoints_raise(tmp_path):
    dcp.save({"w": cddp.ones(3), "n": 1}, checkpoint_id=tmp_path)
    meta = tmp_path / ".metadata"
    doc = json.loads(meta.read_text())
    out = {"w": cddp.zeros(3)}
    doc["items"]["w"]["shape"] = [4]     # .metadata disagrees with the data file
    meta.write_text(json.dumps(doc))
    with pytest.raises(dcp.CheckpointException, match="not the float32 tensor of shape"):
        dcp.load({"w": cddp.zeros(4)}, checkpoint_id=tmp_path)
    doc["items"]["w"]["file"] = "../../etc/passwd"
    meta.write_text(json.dumps(doc))
    with pytest.raises(dcp.CheckpointException, match="item 'w' malformed"):
        dcp.load(out, checkpoint_id=tmp_path)
    meta.write_bytes(b"\x80\x04\x95")    # a torn pickled (torch-format) .metadata
    with pytest.raises(dcp.CheckpointException, match="not a readable torch DCP checkpoint"):
        dcp.load(out, checkpoint_id=tmp_path)
    for junk in (b"", b"{", b'{"format": "cddp-dcp", "version": 99}'):
        meta.write_bytes(junk)
        with pytest.raises(dcp.CheckpointException):
            dcp.load(out, checkpoint_id=tmp_path)
    assert out["w"].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(dcp.CheckpointException, match="No such file"):
        dcp.load(out, checkpoint_id=tmp_path / "absent")
    with pytest.raises(RuntimeError, match="checkpoint_id"):
        dcp.save({"w": cddp.ones(1)})


def test_overwrite_false_refuses_existing(tmp_path):
    dcp.save({"w": cddp.ones(1)}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="overwrite=False"):
        dcp.save({"w": cddp.ones(1)}, storage_writer=dcp.FileSystemWriter(tmp_path, overwrite=False))


def test_flattened_optimizer_form_and_format_utils(tmp_path):
    from cddp.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp
    m = _model()
    o = cddp.optim.AdamW(m.parameters(), lr=0.01)
    _train(m, o, 2)
    opts = dsd.StateDictOptions(flatten_optimizer_state_dict=True)
    flat = dsd.get_optimizer_state_dict(m, o, options=opts)
    assert "state.0.weight.exp_avg" in flat and flat["param_groups.2.bias.lr"] == 0.01
    m2 = _model(seed=4)
    o2 = cddp.optim.AdamW(m2.parameters(), lr=0.3)
    dsd.set_optimizer_state_dict(m2, o2, flat, options=opts)
    assert o2.param_groups[0]["lr"] == 0.01
    np.testing.assert_array_equal(o2.state[m2[2].bias]["exp_avg"].numpy(),
                                  o.state[m[2].bias]["exp_avg"].numpy())
    dcp.save({"model": m.state_dict(), "extra": {"k": [1, 2]}}, checkpoint_id=tmp_path / "d")
    dcp_to_torch_save(tmp_path / "d", tmp_path / "one.pt")
    whole = cddp.load(tmp_path / "one.pt")
    assert whole["extra"] == {"k": [1, 2]}
    np.testing.assert_array_equal(whole["model"]["2.weight"].numpy(), m[2].weight.detach().numpy())
    torch_save_to_dcp(tmp_path / "one.pt", tmp_path / "e")
    out = {"model": {"2.weight": cddp.zeros(2, 5)}}
    dcp.load(out, checkpoint_id=tmp_path / "e")
    np.testing.assert_array_equal(out["model"]["2.weight"].numpy(), m[2].weight.detach().numpy())


def test_state_dict_layout_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.distributed.checkpoint import state_dict as tdsd

    def build(lib):
        lib.manual_seed(0)
        m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.ReLU(), lib.nn.Linear(4, 2))
        m[0].bias.requires_grad_(False)
        o = lib.optim.Adam([{"params": [m[0].weight]}, {"params": m[2].parameters(), "lr": 0.1}])
        return m, o
    cm, co = build(cddp)
    tm, to = build(torch)
    for opts in ({}, {"ignore_frozen_params": True}, {"flatten_optimizer_state_dict": True}):
        c_m, c_o = dsd.get_state_dict(cm, co, options=dsd.StateDictOptions(**opts))
        t_m, t_o = tdsd.get_state_dict(tm, to, options=tdsd.StateDictOptions(**opts))
        assert list(c_m) == list(t_m)
        for k in t_m:
            np.testing.assert_array_equal(c_m[k].numpy(), t_m[k].numpy())
        if "state" in t_o:
            assert list(c_o["state"]) == list(t_o["state"])
            for k in t_o["state"]:
                assert sorted(c_o["state"][k]) == sorted(t_o["state"][k])
            common = set(t_o["param_groups"][0]) & set(c_o["param_groups"][0])
            assert {"params", "lr", "betas", "eps", "weight_decay"} <= common
            for cg, tg in zip(c_o["param_groups"], t_o["param_groups"]):
                assert {k: cg[k] for k in common} == {k: tg[k] for k in common}
        else:
            assert {k for k in t_o if not k.startswith("param_groups")} == \
                   {k for k in c_o if not k.startswith("param_groups")}
            assert {k for k in t_o if k.endswith(".lr")} == {k for k in c_o if k.endswith(".lr")}
    # the zero step at lr 0 did not move the parameters
    for cp, tp in zip(cm.parameters(), tm.parameters()):
        np.testing.assert_array_equal(cp.detach().numpy(), tp.detach().numpy())


DIST = """
import json, os, sys
import numpy as np
import cddp, cddp.nn as nn, cddp.distributed as dist
import cddp.distributed.checkpoint as dcp
from cddp.distributed.checkpoint.state_dict import get_state_dict, set_state_dict, \\
    set_model_state_dict, StateDictOptions
from cddp.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
rec = {}
C = os.path.join(OUT, "ckpt")

def model(seed):
    cddp.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))

def train(ddp, o, steps):
    g = np.random.default_rng(10 + rank)
    for _ in range(steps):
        x = cddp.tensor(g.standard_normal((8, 3)).astype(np.float32))
        o.zero_grad(); (ddp(x) ** 2).mean().backward(); o.step()

ddp = DDP(model(0))
o = cddp.optim.Adam(ddp.parameters(), lr=0.05)
train(ddp, o, 3)
msd, osd = get_state_dict(ddp, o)
rec["keys"] = list(msd)[:2]
dcp.save({"model": msd, "optim": osd, "rank_" + str(rank): rank}, checkpoint_id=C)
rec["files"] = sorted(f for f in os.listdir(C) if f.endswith(".distcp"))
rec["w"] = [p.detach().numpy().tolist() for p in ddp.module.parameters()]
train(ddp, o, 2)
rec["w5"] = [p.detach().numpy().tolist() for p in ddp.module.parameters()]

# resume on 2 ranks into fresh objects, then train the same 2 steps: same weights
d2 = DDP(model(5))
o2 = cddp.optim.Adam(d2.parameters(), lr=0.9)
m2, os2 = get_state_dict(d2, o2)
st = {"model": m2, "optim": os2}
dcp.load(st, checkpoint_id=C)
set_state_dict(d2, o2, model_state_dict=st["model"], optim_state_dict=st["optim"])
train(d2, o2, 2)
rec["resumed5"] = [p.detach().numpy().tolist() for p in d2.module.parameters()]

# a replicated key that disagrees across ranks
try:
    dcp.save({"x": cddp.zeros(2 + rank)}, checkpoint_id=os.path.join(OUT, "bad"))
except BaseException as e:
    rec["disagree"] = [type(e).__name__, str(e)]

# rank 1 fails to write: both ranks raise, naming rank 1; the checkpoint C is untouched
import cddp.serialization as ser
real = ser.save
if rank == 1:
    def broken(obj, f, *a, **k):
        raise OSError(28, "No space left on device")
    ser.save = broken
try:
    dcp.save({"model": d2.module.state_dict()}, checkpoint_id=C)
except BaseException as e:
    rec["failed"] = [type(e).__name__, str(e), sorted(e.failures)]
ser.save = real
dist.barrier()                           # each rank has removed its own file of the failed save
rec["files_after"] = sorted(f for f in os.listdir(C) if f.endswith(".distcp"))

# async: the values at the call are saved even if training moves on before result()
fut = dcp.async_save({"w": d2.module[0].weight}, checkpoint_id=os.path.join(OUT, "async"))
snap = d2.module[0].weight.detach().numpy().copy()
train(d2, o2, 1)                         # collectives on the default group meanwhile
md = fut.result(timeout=60)
back = {"w": cddp.zeros(5, 3)}
dcp.load(back, checkpoint_id=os.path.join(OUT, "async"))
rec["async_equal"] = bool(np.array_equal(back["w"].numpy(), snap))
rec["async_moved"] = not np.array_equal(d2.module[0].weight.detach().numpy(), snap)

# broadcast_from_rank0: only rank 0 passes the weights
d3 = model(9)
sd = model(0).state_dict() if rank == 0 else {}
set_model_state_dict(d3, sd, options=StateDictOptions(full_state_dict=True,
                                                      broadcast_from_rank0=True))
rec["bcast"] = d3[0].weight.detach().numpy().tolist()
with open(os.path.join(OUT, f"r{rank}.json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def test_two_ranks_save_share_resume_fail_async_broadcast(tmp_path):
    r = run_ranks(tmp_path, DIST, nprocs=2, timeout=150)
    assert r.returncode == 0, r.stderr[-4000:]
    r0, r1 = [json.loads((tmp_path / f"r{k}.json").read_text()) for k in (0, 1)]
    assert r0["keys"] == ["0.weight", "0.bias"]          # no "module." prefix
    assert len(r0["files"]) == 2 and r0["files"] == r1["files"]   # both ranks wrote
    for rec in (r0, r1):
        assert rec["resumed5"] == r0["w5"]               # resume == uninterrupted
        assert rec["disagree"][0] == "ValueError" and "rank 0" in rec["disagree"][1] \
            and "rank 1" in rec["disagree"][1]
        name, msg, failed = rec["failed"]
        assert name == "CheckpointException" and failed == [1]
        assert "writing its data file on rank 1" in msg and "No space left" in msg
        assert rec["files_after"] == r0["files"]
        assert rec["async_equal"] and rec["async_moved"]
    assert r0["w"] == r1["w"] and r0["bcast"] == r1["bcast"]
    ref = _model(0)
    np.testing.assert_array_equal(np.array(r1["bcast"], dtype=np.float32),
                                  ref[0].weight.detach().numpy())

    # the 2-rank checkpoint in one process (no group), every key including each rank's own
    from cddp.distributed.checkpoint import _layout
    items = _layout.read_metadata(tmp_path / "ckpt")["items"]
    assert {"rank_0", "rank_1"} <= set(items)
    m = _model(8)
    sd = {"model": m.state_dict(), "rank_1": None}
    dcp.load(sd, checkpoint_id=tmp_path / "ckpt")
    assert sd["rank_1"] == 1
    for p, w in zip(m.parameters(), r0["w"]):
        np.testing.assert_array_equal(p.detach().numpy(), np.array(w, dtype=np.float32))


FSDP = """
import json, os
import numpy as np
import cddp, cddp.nn as nn, cddp.distributed as dist
import cddp.distributed.checkpoint as dcp
from cddp.distributed.checkpoint.stateful import Stateful
from cddp.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from cddp.distributed.fsdp import FullyShardedDataParallel as FSDP
dist.init_process_group("gloo")
rank = dist.get_rank()
C = os.path.join(OUT, "fsdp")

class AppState(Stateful):                  # torch's DCP tutorial
    def __init__(self, model, optimizer=None):
        self.model, self.optimizer = model, optimizer
    def state_dict(self):
        m, o = get_state_dict(self.model, self.optimizer)
        return {"model": m, "optim": o}
    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])

def build(seed):
    cddp.manual_seed(seed)
    m = FSDP(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)))
    return m, cddp.optim.Adam(m.parameters(), lr=0.02)

def train(m, o, steps):
    g = np.random.default_rng(3 + rank)
    for _ in range(steps):
        x = cddp.tensor(g.standard_normal((4, 4)).astype(np.float32))
        o.zero_grad(); m(x).pow(2).mean().backward(); o.step()

m, o = build(0)
train(m, o, 2)
dcp.save({"app": AppState(m, o)}, checkpoint_id=C)
full = {k: v.numpy().tolist() for k, v in m.state_dict().items()}
train(m, o, 2)
after = {k: v.numpy().tolist() for k, v in m.state_dict().items()}
m2, o2 = build(4)
dcp.load({"app": AppState(m2, o2)}, checkpoint_id=C)
train(m2, o2, 2)
resumed = {k: v.numpy().tolist() for k, v in m2.state_dict().items()}

# the older recipe: SHARDED_STATE_DICT + FSDP.optim_state_dict straight into dcp
from cddp.distributed.fsdp import StateDictType
S = os.path.join(OUT, "fsdp_sharded")
with FSDP.state_dict_type(m, StateDictType.SHARDED_STATE_DICT):
    dcp.save({"model": m.state_dict(), "optim": FSDP.optim_state_dict(m, o)}, checkpoint_id=S)
m3, o3 = build(6)
with FSDP.state_dict_type(m3, StateDictType.SHARDED_STATE_DICT):
    sd = {"model": m3.state_dict()}
    dcp.load(sd, checkpoint_id=S)
    m3.load_state_dict(sd["model"])
    osd = dcp.load_sharded_optimizer_state_dict(sd["model"], optimizer_key="optim",
                                                storage_reader=dcp.FileSystemReader(S))
    o3.load_state_dict(FSDP.optim_state_dict_to_load(m3, o3, osd["optim"]))
train(m, o, 1)
train(m3, o3, 1)
sharded_same = all(np.array_equal(a.numpy(), b.numpy())
                   for a, b in zip(m.state_dict().values(), m3.state_dict().values()))
with open(os.path.join(OUT, f"f{rank}.json"), "w") as f:
    json.dump({"full": full, "after": after, "resumed": resumed, "sharded": sharded_same}, f)
dist.destroy_process_group()
"""


def test_fsdp_tutorial_appstate_resumes(tmp_path):
    r = run_ranks(tmp_path, FSDP, nprocs=2, timeout=150)
    assert r.returncode == 0, r.stderr[-4000:]
    recs = [json.loads((tmp_path / f"f{k}.json").read_text()) for k in (0, 1)]
    for rec in recs:
        assert rec["resumed"] == recs[0]["after"]
        assert rec["sharded"]              # SHARDED_STATE_DICT round trip, then one step alike
    # one process reads the 2-rank FSDP checkpoint into a plain model
    cddp.manual_seed(11)
    plain = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    sd = {"app": {"model": plain.state_dict()}}
    dcp.load(sd, checkpoint_id=tmp_path / "fsdp")
    for k, v in plain.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), np.array(recs[0]["full"][k], dtype=np.float32))


# ---- torch's DCP directories ------------------------------------------------------------------

def _torch_dcp():
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as tdcp
    return torch, tdcp


def test_resume_from_torch_dcp_checkpoint(tmp_path):
    torch, tdcp = _torch_dcp()
    from torch.distributed.checkpoint.state_dict import get_state_dict as t_get
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(6)]

    def run(lib, m, o, batch):
        for x in batch:
            o.zero_grad()
            (m(lib.tensor(x)) ** 2).mean().backward()
            o.step()

    def build(lib):
        lib.manual_seed(0)
        m = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.ReLU(), lib.nn.Linear(5, 2))
        return m, lib.optim.Adam(m.parameters(), lr=0.05)
    tm, to = build(torch)
    run(torch, tm, to, xs[:3])
    msd, osd = t_get(tm, to)
    tdcp.save({"model": msd, "optim": osd, "step": 3, "hist": [1.5, torch.ones(2)]},
              checkpoint_id=tmp_path, no_dist=True)
    run(torch, tm, to, xs[3:])

    cm, co = _model(seed=9), None
    co = cddp.optim.Adam(cm.parameters(), lr=0.7)
    m_sd, o_sd = dsd.get_state_dict(cm, co)
    state = {"model": m_sd, "optim": o_sd, "step": 0, "hist": [None, cddp.zeros(2)]}
    dcp.load(state, checkpoint_id=tmp_path)
    dsd.set_state_dict(cm, co, model_state_dict=state["model"], optim_state_dict=state["optim"])
    assert state["step"] == 3 and state["hist"][0] == 1.5 and state["hist"][1].tolist() == [1, 1]
    assert co.param_groups[0]["lr"] == 0.05
    run(cddp, cm, co, xs[3:])
    for c, t in zip(cm.parameters(), tm.parameters()):
        np.testing.assert_allclose(c.detach().numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6)
    # and torch's converter and cddp's agree on the whole state dict
    from cddp.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(tmp_path, tmp_path / "whole.pt")
    whole = cddp.load(tmp_path / "whole.pt")
    assert whole["optim"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert sorted(whole["optim"]["state"]) == sorted(osd["state"])


def test_torch_dcp_chunks_and_safetensors_format(tmp_path):
    torch, tdcp = _torch_dcp()
    from torch.distributed.checkpoint import metadata as tmd
    full = torch.arange(12.0).reshape(4, 3)
    tdcp.save({"w0": full[:2].clone(), "w1": full[2:].clone()}, checkpoint_id=tmp_path / "c",
              no_dist=True)
    # rewrite the metadata so the two saved pieces are the chunks of one 4x3 tensor "w"
    md = tdcp.FileSystemReader(tmp_path / "c").read_metadata()
    props = md.state_dict_metadata["w0"].properties
    md.state_dict_metadata = {"w": tmd.TensorStorageMetadata(props, torch.Size([4, 3]), [
        tmd.ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([2, 3])),
        tmd.ChunkStorageMetadata(torch.Size([2, 0]), torch.Size([2, 3]))])}
    md.storage_data = {tmd.MetadataIndex("w", torch.Size([r, 0])): info
                       for (k, info) in md.storage_data.items()
                       for r in ([0] if k.fqn == "w0" else [2])}
    md.planner_data = {"w": ("w",)}
    import pickle
    (tmp_path / "c" / ".metadata").write_bytes(pickle.dumps(md))
    t_out = {"w": torch.zeros(4, 3)}
    tdcp.load(t_out, checkpoint_id=tmp_path / "c", no_dist=True)     # torch reads it so
    out = {"w": cddp.zeros(4, 3)}
    dcp.load(out, checkpoint_id=tmp_path / "c")
    np.testing.assert_array_equal(out["w"].numpy(), t_out["w"].numpy())
    np.testing.assert_array_equal(out["w"].numpy(), full.numpy())

    pytest.importorskip("safetensors")
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    tdcp.save({"a": full, "b": torch.ones(2, dtype=torch.bfloat16), "o": {"x": (1, "b")}},
              storage_writer=tdcp.FileSystemWriter(
                  tmp_path / "s", serialization_format=SerializationFormat.SAFETENSORS),
              no_dist=True)
    out = {"a": cddp.zeros(4, 3), "b": cddp.zeros(2, dtype=cddp.bfloat16), "o": {"x": None}}
    dcp.load(out, checkpoint_id=tmp_path / "s")
    np.testing.assert_array_equal(out["a"].numpy(), full.numpy())
    assert out["b"].float().tolist() == [1.0, 1.0] and out["o"]["x"] == (1, "b")


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch " + _Evil.marker,))


def test_torch_format_metadata_runs_no_code(tmp_path):
    import pickle
    _Evil.marker = str(tmp_path / "pwned")
    (tmp_path / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": _Evil()}))
    with pytest.raises(dcp.CheckpointException, match="system is not part of torch's DCP"):
        dcp.load({"w": cddp.zeros(1)}, checkpoint_id=tmp_path)
    assert not (tmp_path / "pwned").exists()


DEAD = """
import json, os, sys, time
import cddp, cddp.distributed as dist
import cddp.distributed.checkpoint as dcp
import cddp.serialization as ser
out, ckpt = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
rank = dist.get_rank()
dcp.save({"w": cddp.ones(3)}, checkpoint_id=ckpt)
if rank == 1:
    real = ser.save
    def die(*a, **k):
        os._exit(3)                      # rank 1 dies while writing the second save
    ser.save = die
t0 = time.monotonic()
try:
    dcp.save({"w": cddp.full((3,), 2.0), "v": cddp.ones(100)}, checkpoint_id=ckpt)
    rec = {"raised": None}
except BaseException as e:
    rec = {"raised": type(e).__name__, "msg": str(e)}
rec["after_s"] = time.monotonic() - t0
with open(os.path.join(out, f"dead{rank}.json"), "w") as f:
    json.dump(rec, f)
os._exit(0)
"""


def test_rank_dying_mid_save_raises_on_survivor_and_keeps_checkpoint(tmp_path):
    from ddp_util import free_port
    port = free_port()
    procs = []
    for r in (0, 1):
        env = subprocess_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-c", DEAD, str(tmp_path),
                                       str(tmp_path / "ckpt")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[1].returncode == 3, outs[1][1][-2000:]
    rec = json.loads((tmp_path / "dead0.json").read_text())
    assert rec["raised"] is not None and "rank 1" in rec["msg"], rec
    assert rec["after_s"] < 30, rec          # the peer's death, not the 60 s group timeout
    # the first save's one data file (one 3-float key: one writer); the survivor removed its
    # file of the failed save
    assert len([f for f in os.listdir(tmp_path / "ckpt") if f.endswith(".distcp")]) == 1
    out = {"w": cddp.zeros(3)}
    dcp.load(out, checkpoint_id=tmp_path / "ckpt")
    assert out["w"].tolist() == [1.0, 1.0, 1.0]


def test_frombuffer_shares_memory_and_checks_like_torch():
    b = bytearray(range(16))
    t = cddp.frombuffer(b, dtype=cddp.float32, offset=8)
    np.testing.assert_array_equal(t.numpy(), np.frombuffer(bytes(b[8:]), dtype=np.float32))
    u = cddp.frombuffer(b, dtype=cddp.uint8, count=3)
    u[0] = 200
    assert b[0] == 200 and u.shape == (3,)
    h = cddp.frombuffer(b, dtype=cddp.bfloat16)
    assert h.dtype == cddp.bfloat16 and h.shape == (8,)
    for kw, msg in ((dict(dtype=cddp.float32, offset=2, count=4), "must not be greater"),
                    (dict(dtype=cddp.float32, offset=3), "multiple of element size"),
                    (dict(dtype=cddp.int16, offset=16), "no greater than buffer length"),
                    (dict(dtype=cddp.int16, count=0), "must not be 0")):
        with pytest.raises(ValueError, match=msg):
            cddp.frombuffer(b, **kw)
    with pytest.warns(UserWarning, match="not writable"):
        r = cddp.frombuffer(b"\x01\x02", dtype=cddp.uint8)
    r[0] = 9                                  # a copy: the bytes object is untouched
    assert r.tolist() == [9, 2]
    torch = pytest.importorskip("torch")
    for kw in (dict(offset=4), dict(count=2), dict(offset=2, count=1)):
        assert cddp.frombuffer(b, dtype=cddp.int16, **kw).tolist() == \
            torch.frombuffer(b, dtype=torch.int16, **kw).tolist()


def test_flat_keys_are_torchs(tmp_path):
    torch, tdcp = _torch_dcp()

    def sd(lib):
        return {"m": {"fc.weight": lib.ones(2, 2)}, "groups": [{"lr": 0.1, "params": ["a", "b"]}],
                "mixed": [lib.zeros(1), 3, [lib.ones(1)]], "plain": [1, 2], "tup": (1, 2),
                "empty": {}, "none": None}
    c = dcp.save(sd(cddp), checkpoint_id=tmp_path / "c")
    t = tdcp.save(sd(torch), checkpoint_id=tmp_path / "t", no_dist=True)
    assert sorted(c.state_dict_metadata) == sorted(t.state_dict_metadata)
    for k, v in t.state_dict_metadata.items():
        assert type(c.state_dict_metadata[k]).__name__ == type(v).__name__


def test_planner_and_storage_interfaces():
    """torch's interfaces import, subclass abstractly, and cddp's classes stand for them."""
    import cddp.distributed.checkpoint as dcp
    from cddp.distributed.checkpoint.metadata import MetadataIndex
    from cddp.distributed.checkpoint.planner import LoadItemType, WriteItemType
    assert isinstance(dcp.FileSystemWriter("x"), dcp.StorageWriter)
    assert isinstance(dcp.FileSystemReader("x"), dcp.StorageReader)
    assert isinstance(dcp.DefaultSavePlanner(), dcp.SavePlanner)
    assert isinstance(dcp.DefaultLoadPlanner(), dcp.LoadPlanner)

    class Half(dcp.StorageWriter):
        def reset(self, checkpoint_id=None):
            pass
    with pytest.raises(TypeError, match="abstract"):
        Half()
    item = dcp.WriteItem(MetadataIndex("model.w"), WriteItemType.TENSOR)
    plan = dcp.SavePlan([item])
    assert plan.items[0].index.fqn == "model.w" and plan.usable
    read = dcp.ReadItem(LoadItemType.BYTE_IO, MetadataIndex("a"), (0,), MetadataIndex("a"),
                        (0,), (1,))
    assert dcp.LoadPlan([read]).items[0].type is LoadItemType.BYTE_IO
