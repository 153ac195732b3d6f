"""Collectives and DDP on the five storage dtypes, on two real processes, over the shared-memory
and the TCP transports (small chunk knobs push 1000 elements through the pipelines).

Expectations are closed forms in NumPy: float16/bfloat16 reductions round each step in float,
as gloo's float16 operators (two ranks: SUM = round(x0 + x1), AVG = round(SUM / 2),
PRODUCT = round(x0 * x1)); small integers wrap in their own width; data movement keeps every
bit. DDP with float16 parameters must give round(round(g0 / 2) + round(g1 / 2)) per gradient
element (torch's div-then-sum), and the bf16 compress hook its documented sequence.
"""
import numpy as np
import pytest

from _teststore import init_group, run_ranks
from dtype_util import FLOATS, SMALL_INTS, round_to

FLOAT_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]
INT_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
COUNT = 1000


def inputs(name, rank, salt=0):
    rng = np.random.default_rng(100 * rank + salt)
    if name in FLOATS:
        return round_to(name, rng.standard_normal(COUNT) * 30).astype(np.float64)
    info = np.iinfo(name)
    return rng.integers(info.min, info.max + 1, COUNT).astype(name)


def expected(name, op, a, b):
    if name in FLOATS:
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        r = {"SUM": a32 + b32, "PRODUCT": a32 * b32, "MIN": np.minimum(a32, b32),
             "MAX": np.maximum(a32, b32)}.get(op)
        if op == "AVG":
            r = round_to(name, a32 + b32) / np.float32(2)
        return round_to(name, r).astype(np.float64)
    with np.errstate(over="ignore"):
        return {"SUM": a + b, "PRODUCT": a * b, "MIN": np.minimum(a, b), "MAX": np.maximum(a, b),
                "BAND": a & b, "BOR": a | b, "BXOR": a ^ b}[op]


def _collectives_child(rank, n, d):
    import cddp
    from dtype_util import bits, make, vals
    dist = init_group(rank, n, d, timeout=60)
    out = {"transport": dist.distributed_c10d._world.default.transport}
    for name in FLOATS + SMALL_INTS:
        for op in (FLOAT_OPS if name in FLOATS else INT_OPS):
            x = make(name, inputs(name, rank))
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            out[f"all_reduce {name} {op}"] = vals(x).tolist()
        mine = make(name, inputs(name, rank, salt=1))
        b = mine.clone()
        dist.broadcast(b, src=1)
        out[f"broadcast {name}"] = bits(b).tolist()
        outs = [cddp.zeros(2 * COUNT, dtype=mine.dtype)[::2] for _ in range(n)]   # strided
        dist.all_gather(outs, mine)
        out[f"all_gather {name}"] = [bits(o).tolist() for o in outs]
        a2a = cddp.zeros(COUNT, dtype=mine.dtype)
        dist.all_to_all_single(a2a, mine, [COUNT // 2] * 2, [COUNT // 2] * 2)
        out[f"all_to_all {name}"] = bits(a2a).tolist()
        got = cddp.zeros(COUNT, dtype=mine.dtype)
        ws = [dist.isend(mine, 1 - rank), dist.irecv(got, 1 - rank)]
        for w in ws:
            w.wait()
        out[f"send_recv {name}"] = bits(got).tolist()
    return out


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_collectives_of_new_dtypes(transport):
    env = {"CDDP_TRANSPORT": transport, "CDDP_SHM_CHUNK": "512", "CDDP_TCP_CHUNK": "512",
           "CDDP_SHM_SMALL": "64", "CDDP_TCP_SMALL": "64"}
    res = run_ranks(2, "test_dtypes_dist:_collectives_child", env=env, timeout=120)
    for r in res:
        assert "ok" in r, r
    outs = [r["ok"] for r in res]
    assert all(o["transport"] == transport for o in outs)
    for name in FLOATS + SMALL_INTS:
        a, b = inputs(name, 0), inputs(name, 1)
        for op in (FLOAT_OPS if name in FLOATS else INT_OPS):
            want = expected(name, op, a, b)
            for r in range(2):
                got = np.array(outs[r][f"all_reduce {name} {op}"])
                assert np.array_equal(got, want.astype(np.float64)), (transport, name, op, r)
        sent = [expect_bits(name, inputs(name, r, salt=1)) for r in range(2)]
        half = COUNT // 2
        for r in range(2):
            assert outs[r][f"broadcast {name}"] == sent[1], (transport, name, r)
            assert outs[r][f"all_gather {name}"] == sent, (transport, name, r)
            assert outs[r][f"send_recv {name}"] == sent[1 - r], (transport, name, r)
            assert outs[r][f"all_to_all {name}"] == \
                sent[0][r * half:(r + 1) * half] + sent[1][r * half:(r + 1) * half]


def expect_bits(name, values):
    """The element bits a tensor of dtype `name` holding `values` has (dtype_util.bits)."""
    if name == "float16":
        return values.astype(np.float16).view(np.int16).tolist()
    if name == "bfloat16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(
            np.int16).tolist()
    return values.astype(name).tolist()


def _ddp_child(rank, n, d):
    import copy

    import cddp
    from cddp.distributed.algorithms.ddp_comm_hooks import default_hooks
    from cddp.nn.parallel import DistributedDataParallel as DDP
    from dtype_util import vals
    dist = init_group(rank, n, d, timeout=60)
    res = {}
    for dtype, hook in (("float16", None), ("bfloat16", None), ("float32", "bf16")):
        cddp.manual_seed(0)
        net = cddp.nn.Sequential(cddp.nn.Linear(6, 5), cddp.nn.Tanh(), cddp.nn.Linear(5, 3))
        net.to(getattr(cddp, dtype))
        local = copy.deepcopy(net)
        model = DDP(net)
        if hook:
            model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        cddp.manual_seed(10 + rank)
        x = cddp.randn(4, 6).to(getattr(cddp, dtype))
        model(x).square().sum().backward()
        local(x).square().sum().backward()
        ddp_grads = [vals(p.grad).tolist() for p in model.parameters()]
        local_grads = []
        for p in local.parameters():          # every rank's local gradient, to check the sum
            parts = [cddp.zeros_like(p.grad) for _ in range(n)]
            dist.all_gather(parts, p.grad.contiguous())
            local_grads.append([vals(t).tolist() for t in parts])
        res[dtype] = {"ddp": ddp_grads, "local": local_grads,
                      "dtypes": [str(p.grad.dtype) for p in model.parameters()]}
    return res


def test_ddp_with_float16_parameters_and_bf16_hook():
    res = run_ranks(2, "test_dtypes_dist:_ddp_child", timeout=120)
    for r in res:
        assert "ok" in r, r
    for dtype in ("float16", "bfloat16", "float32"):
        a, b = res[0]["ok"][dtype], res[1]["ok"][dtype]
        assert a["ddp"] == b["ddp"]                       # every rank holds the same average
        assert all(s.endswith(dtype) for s in a["dtypes"])
        for got, (g0, g1) in zip(a["ddp"], a["local"]):
            g0, g1 = np.array(g0, np.float32), np.array(g1, np.float32)
            if dtype == "float32":                        # bf16 hook: cast, / 2, sum in bf16
                h0, h1 = round_to("bfloat16", g0), round_to("bfloat16", g1)
                want = round_to("bfloat16", round_to("bfloat16", h0 / 2) + round_to("bfloat16", h1 / 2))
            else:
                want = round_to(dtype, round_to(dtype, g0 / 2) + round_to(dtype, g1 / 2))
            assert np.array_equal(np.array(got, np.float32).reshape(-1),
                                  want.reshape(-1)), dtype
