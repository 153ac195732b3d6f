"""cddp.distributed API gaps: get_node_local_rank, send_object_list / recv_object_list,
new_subgroups / new_subgroups_by_enumeration, is_backend_available, DebugLevel and the
debug-level functions, get_pg_count. One two-rank job (cddp.run) checks the collective ones;
the rest run in this process, against torch where it is installed."""
import json
import os
import subprocess
import sys

import pytest

import cddp.distributed as dist
from conftest import subprocess_env
from ddp_util import run_ranks

BODY = r"""
import json, os
import cddp
import cddp.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
rec = {"local_rank": dist.get_node_local_rank(), "env_local_rank": int(os.environ["LOCAL_RANK"])}
counts = [dist.get_pg_count()]

def err(fn):
    try:
        fn()
    except Exception as e:           # noqa: BLE001
        return type(e).__name__
    return None

# -- send_object_list / recv_object_list: sizes then bytes; recv fills in place, returns src
objs = ["foo", 12, {"a": [1, 2.5]}, (1, 2), b"\x00\xff", None, "", {3: "int key"}]
if rank == 0:
    dist.send_object_list(objs, dst=1)
    dist.send_object_list(["back?"], dst=1)
    got = [None]
    rec["src_from_1"] = dist.recv_object_list(got, src=1)
    rec["from_1"] = got
else:
    got = [None] * len(objs)
    keep = got
    rec["src"] = dist.recv_object_list(got, src=0)
    rec["same_list"] = keep is got
    rec["ok"] = got == objs
    one = ["placeholder"]
    rec["src2"] = dist.recv_object_list(one, group_src=0)
    rec["one"] = one
    dist.send_object_list([{"rank": rank}], group_dst=0)
rec["self_send"] = err(lambda: dist.send_object_list([1], dst=rank))
rec["self_recv"] = err(lambda: dist.recv_object_list([None], src=rank))
rec["no_src"] = err(lambda: dist.recv_object_list([None]))
rec["not_json"] = err(lambda: dist.send_object_list([object()], dst=1 - rank))

# -- new_subgroups: consecutive blocks; all_reduce stays inside this rank's block
cur, subs = dist.new_subgroups(1)
counts.append(dist.get_pg_count())
t = cddp.tensor([float(rank + 1)])
dist.all_reduce(t, group=cur)
rec["sub1"] = {"n": len(subs), "size": cur.size(), "ranks": dist.get_process_group_ranks(cur),
               "mine": subs.index(cur), "sum": t.item(),
               "others": [s == dist.GroupMember.NON_GROUP_MEMBER for s in subs]}
cur2, subs2 = dist.new_subgroups(group_size=2)
counts.append(dist.get_pg_count())
t = cddp.tensor([float(rank + 1)])
dist.all_reduce(t, group=cur2)
rec["sub2"] = {"n": len(subs2), "size": cur2.size(), "sum": t.item()}
rec["sub_errs"] = [err(lambda: dist.new_subgroups(0)), err(lambda: dist.new_subgroups(3)),
                   err(lambda: dist.new_subgroups())]
counts.append(dist.get_pg_count())

# -- new_subgroups_by_enumeration: a rank may be in none; overlap is torch's ValueError
cur3, subs3 = dist.new_subgroups_by_enumeration([[1]])
counts.append(dist.get_pg_count())
rec["enum"] = {"n": len(subs3), "cur_none": cur3 is None,
               "size": None if cur3 is None else cur3.size()}
rec["enum_overlap"] = err(lambda: dist.new_subgroups_by_enumeration([[0, 1], [1]]))
counts.append(dist.get_pg_count())
rec["enum_empty"] = err(lambda: dist.new_subgroups_by_enumeration([]))
dist.destroy_process_group(cur)
counts.append(dist.get_pg_count())            # destroying one subgroup does not lower it
dist.barrier()
dist.destroy_process_group()
counts.append(dist.get_pg_count())
rec["counts"] = counts
with open(os.path.join(OUT, f"r{rank}.json"), "w") as f:
    json.dump(rec, f)
"""


def test_object_p2p_and_subgroups_two_ranks(tmp_path):
    r = run_ranks(tmp_path, BODY, nprocs=2, timeout=90)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads((tmp_path / f"r{k}.json").read_text()) for k in (0, 1)]
    for k, rec in enumerate(recs):
        assert rec["local_rank"] == rec["env_local_rank"] == k
        assert rec["self_send"] == rec["self_recv"] == rec["no_src"] == "ValueError"
        assert rec["not_json"] == "TypeError"       # JSON only, as the object collectives
        assert rec["sub1"] == {"n": 2, "size": 1, "ranks": [k], "mine": k, "sum": k + 1.0,
                               "others": [i != k for i in (0, 1)]}
        assert rec["sub2"] == {"n": 1, "size": 2, "sum": 3.0}
        assert rec["sub_errs"] == ["ValueError"] * 3
        assert rec["enum"] == {"n": 1, "cur_none": k == 0, "size": None if k == 0 else 1}
        assert rec["enum_overlap"] == rec["enum_empty"] == "ValueError"
        # torch's count: the default group, then every new_group call on every rank
        # (2 + 1 + 1, and the overlapping enumeration's 2 before its error); 0 after destroy
        assert rec["counts"] == [1, 3, 4, 4, 5, 7, 7, 0]
    r0, r1 = recs
    assert r1["src"] == 0 and r1["same_list"] and r1["ok"]
    assert r1["src2"] == 0 and r1["one"] == ["back?"]
    assert r0["src_from_1"] == 1 and r0["from_1"] == [{"rank": 1}]


# ---- single-process: no group needed -----------------------------------------------------------

def test_get_node_local_rank(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(RuntimeError, match="LOCAL_RANK is not in the environment"):
        dist.get_node_local_rank()
    assert dist.get_node_local_rank(fallback_rank=3) == 3
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert dist.get_node_local_rank() == 5 and dist.get_node_local_rank(1) == 5


def test_get_node_local_rank_vs_torch(torch, monkeypatch):
    import torch.distributed as tdist
    for env in (None, "2"):
        if env is None:
            monkeypatch.delenv("LOCAL_RANK", raising=False)
        else:
            monkeypatch.setenv("LOCAL_RANK", env)
        for fb in (None, 7):
            try:
                want = tdist.get_node_local_rank(fb)
            except RuntimeError:
                with pytest.raises(RuntimeError):
                    dist.get_node_local_rank(fb)
                continue
            assert dist.get_node_local_rank(fb) == want


def test_pg_count_without_group():
    assert not dist.is_initialized()
    assert dist.get_pg_count() == 0


def test_is_backend_available():
    assert dist.is_backend_available("gloo") and dist.is_backend_available("GLOO")
    assert dist.is_backend_available("nccl")          # cddp's CPU stand-in for NCCL
    assert dist.is_backend_available("cpu")
    assert dist.is_backend_available("cpu:gloo,cuda:nccl")
    assert dist.is_backend_available("mpi") == dist.is_mpi_available()
    assert not dist.is_backend_available("ucc")
    assert not dist.is_backend_available("bogus")
    assert not dist.is_backend_available("cpu:gloo,cuda:ucc")


def test_is_backend_available_agrees_with_torch_where_builds_agree(torch):
    import torch.distributed as tdist
    for name in ("gloo", "ucc", "bogus", "Gloo"):
        assert dist.is_backend_available(name) == tdist.is_backend_available(name), name


def test_debug_level_set_and_get():
    old = dist.get_debug_level()
    try:
        for lvl in (dist.DebugLevel.INFO, dist.DebugLevel.DETAIL, dist.DebugLevel.OFF):
            dist.set_debug_level(lvl)
            assert dist.get_debug_level() is lvl
        with pytest.raises(TypeError):
            dist.set_debug_level(1)
        with pytest.raises(TypeError):
            dist.set_debug_level("INFO")
    finally:
        dist.set_debug_level(old)
    assert [int(v) for v in dist.DebugLevel] == [0, 1, 2]
    assert str(dist.DebugLevel.INFO) == "DebugLevel.INFO"
    assert dist.DebugLevel(2) is dist.DebugLevel.DETAIL


def test_debug_level_from_env(monkeypatch):
    old = dist.get_debug_level()
    try:
        for value, want in (("INFO", "INFO"), ("detail", "DETAIL"), ("OFF", "OFF")):
            monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", value)
            dist.set_debug_level_from_env()
            assert dist.get_debug_level().name == want
        monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG")
        dist.set_debug_level(dist.DebugLevel.INFO)
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() is dist.DebugLevel.OFF
        for bad in ("", "verbose"):
            monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", bad)
            with pytest.raises(ValueError, match="must be OFF, INFO, or DETAIL"):
                dist.set_debug_level_from_env()
    finally:
        dist.set_debug_level(old)


def test_debug_level_read_at_import():
    """As torch, the level comes from TORCH_DISTRIBUTED_DEBUG when the package is imported; a
    bad value warns there (torch's import raises) and leaves OFF."""
    code = ("import warnings; warnings.simplefilter('always')\n"
            "import cddp.distributed as d; print(d.get_debug_level().name)")
    for value, want in (("DETAIL", "DETAIL"), ("nonsense", "OFF")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, env=subprocess_env(TORCH_DISTRIBUTED_DEBUG=value))
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[-1] == want
        assert ("must be OFF, INFO, or DETAIL" in r.stderr) == (value == "nonsense")


def test_debug_level_names_vs_torch(torch):
    import torch.distributed as tdist
    assert [m.name for m in dist.DebugLevel] == list(tdist.DebugLevel.__members__)
    assert [int(m) for m in dist.DebugLevel] == [int(v) for v in
                                                  tdist.DebugLevel.__members__.values()]
    assert str(dist.DebugLevel.DETAIL) == str(tdist.DebugLevel.DETAIL)


def test_new_names_exported():
    names = ("get_node_local_rank", "send_object_list", "recv_object_list", "new_subgroups",
             "new_subgroups_by_enumeration", "is_backend_available", "DebugLevel",
             "get_debug_level", "set_debug_level", "set_debug_level_from_env", "get_pg_count")
    for name in names:
        assert hasattr(dist, name), name
    assert os.path.basename(dist.send_object_list.__code__.co_filename) == "distributed_c10d.py"


def test_reduce_op_is_the_deprecated_reduceop():
    import cddp.distributed as dist
    with pytest.warns(FutureWarning, match="reduce_op` is deprecated"):
        assert dist.reduce_op.SUM is dist.ReduceOp.SUM
    with pytest.warns(FutureWarning):
        assert dist.reduce_op.MAX == dist.ReduceOp.MAX
