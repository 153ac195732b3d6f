"""ShardedGradScaler: an inf/NaN in one rank's gradient shard makes every rank skip the step
and back off the scale (a plain GradScaler lets the other ranks step: their weights part)."""
import json

from ddp_util import run_ranks

BODY = """
import json, os
import cddp, cddp.distributed as dist
from cddp.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
dist.init_process_group("gloo")
r = dist.get_rank()
rec = {}
for kind in ("sharded", "plain"):
    w = cddp.nn.Parameter(cddp.ones(3))
    o = cddp.optim.SGD([w], lr=0.5)
    s = (ShardedGradScaler("cpu", init_scale=4.0) if kind == "sharded"
         else cddp.amp.GradScaler("cpu", init_scale=4.0))
    for step in range(2):
        o.zero_grad()
        s.scale((w * 2).sum()).backward()
        if step == 0 and r == 1:
            w.grad[1] = float("inf")           # only rank 1's shard overflows
        s.step(o)
        s.update()
        rec[kind + str(step)] = [w.detach().tolist(), s.get_scale()]
with open(os.path.join(OUT, f"s{r}.json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def test_inf_on_one_rank_skips_everywhere(tmp_path):
    r = run_ranks(tmp_path, BODY, nprocs=2, timeout=90)
    assert r.returncode == 0, r.stderr[-3000:]
    r0, r1 = [json.loads((tmp_path / f"s{k}.json").read_text()) for k in (0, 1)]
    for rec in (r0, r1):
        assert rec["sharded0"] == [[1.0, 1.0, 1.0], 2.0]     # skipped, scale backed off
        assert rec["sharded1"] == [[0.0, 0.0, 0.0], 2.0]     # then w -= 0.5 * 2
    assert r0["plain0"] == [[0.0, 0.0, 0.0], 4.0]            # rank 0 stepped alone
    assert r1["plain0"] == [[1.0, 1.0, 1.0], 2.0]
