"""bench/sharded.py — sharded data parallelism against torch: the MLP of bench/ddp.py
(784-1024-1024-10, per-rank batch 64, Adam, one thread per rank) trained by 2 ranks as
DDP + Adam, DDP + ZeroRedundancyOptimizer(Adam) and FullyShardedDataParallel (one unit per
Linear, FULL_SHARD) + Adam, in cddp and in torch (gloo); samples/s summed over ranks, medians
of timing windows, ratios from one run.

    python bench/sharded.py [--ranks 2] [--windows 7] [--min-time 0.3] [--no-torch]

It also times per-sample gradients (torch.func.vmap(grad(loss)) over a batch of 64 for a
small MLP) in one process: cddp's vmap is a loop over the batch (cddp/func/_vmap.py), torch's
a batched transform, so that row says what the loop costs.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ddp import ddp_rate, launch_ranks  # noqa: E402  (also puts the in-place build first)
from _timing import fmt, per_call  # noqa: E402

MODES = ("ddp", "zero", "fsdp")


def _setup(lib_name):
    if lib_name == "torch":
        import torch as lib
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.optim import ZeroRedundancyOptimizer as ZeRO
        from torch.nn.parallel import DistributedDataParallel as DDP
    else:
        import cddp as lib
        import cddp.distributed as dist
        from cddp.distributed.fsdp import FullyShardedDataParallel as FSDP
        from cddp.distributed.optim import ZeroRedundancyOptimizer as ZeRO
        from cddp.nn.parallel import DistributedDataParallel as DDP
    lib.set_num_threads(1)
    return lib, dist, DDP, ZeRO, FSDP


def worker(lib_name, mode, windows, min_time):
    lib, dist, DDP, ZeRO, FSDP = _setup(lib_name)
    dist.init_process_group("gloo")
    lib.manual_seed(0)
    nn = lib.nn
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, 10))
    if mode == "fsdp":
        kw = {"device_id": lib.device("cpu")} if lib_name == "torch" else {}
        for i in (0, 2, 4):
            net[i] = FSDP(net[i], **kw)
        model = FSDP(net, **kw)
        opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    else:
        model = DDP(net)
        opt = (ZeRO(model.parameters(), optimizer_class=lib.optim.Adam, lr=1e-3)
               if mode == "zero" else lib.optim.Adam(model.parameters(), lr=1e-3))
    crit = nn.CrossEntropyLoss()
    g = lib.Generator().manual_seed(1 + dist.get_rank())
    x = lib.randn(64, 784, generator=g)
    y = lib.randint(0, 10, (64,), generator=g)

    def step():
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()

    rate = ddp_rate(lib, dist, step, 64, windows, min_time)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(rate), flush=True)
    dist.destroy_process_group()


def per_sample_grads(lib_name):
    """Seconds per vmap(grad(loss)) over 64 samples of a 32-64-10 MLP, one process."""
    lib = __import__(lib_name)
    lib.set_num_threads(1)
    func = __import__(f"{lib_name}.func", fromlist=["func"])
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(32, 64), lib.nn.Tanh(), lib.nn.Linear(64, 10))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = lib.randn(64, 32)
    y = lib.randint(0, 10, (64,))

    def loss(p, xi, yi):
        out = func.functional_call(model, p, (xi.unsqueeze(0),))
        return lib.nn.functional.cross_entropy(out, yi.unsqueeze(0))

    grads = func.vmap(func.grad(loss), in_dims=(None, 0, 0))
    return per_call(lambda: grads(params, x, y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", nargs=4, metavar=("LIB", "MODE", "WINDOWS", "MIN_TIME"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--windows", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    if args.worker:
        lib, mode, windows, min_time = args.worker
        return worker(lib, mode, int(windows), float(min_time))
    libs = ["cddp"] + ([] if args.no_torch else ["torch"])
    load = os.getloadavg()[0]
    print(f"# sharded data parallel: {args.ranks} ranks, load average {load:.1f} on "
          f"{os.cpu_count()} cpus; {args.windows} windows of >= {args.min_time} s")
    print(f"{'setting':<36} | {'cddp samples/s':>15} | {'torch samples/s':>15} | cddp/torch")
    for mode in MODES:
        rates = {}
        for lib in libs:
            t0 = time.time()
            rates[lib] = launch_ranks(__file__, [lib, mode, args.windows, args.min_time],
                                      args.ranks, f"{lib} {mode}")
            if time.time() - t0 > 600:
                print(f"# {lib} {mode} took {time.time() - t0:.0f} s", file=sys.stderr)
        name = {"ddp": "DDP + Adam", "zero": "DDP + ZeroRedundancyOptimizer(Adam)",
                "fsdp": "FSDP FULL_SHARD (3 units) + Adam"}[mode]
        t = rates.get("torch")
        print(f"{name:<36} | {rates['cddp']:>15.1f} | "
              f"{(f'{t:.1f}' if t else '-'):>15} | " +
              (f"{rates['cddp'] / t:.2f}x" if t else "-"))
    ps = {lib: per_sample_grads(lib) for lib in libs}
    t = ps.get("torch")
    print(f"{'per-sample grads vmap(grad), 64':<36} | {fmt(ps['cddp']):>15} | "
          f"{(fmt(t) if t else '-'):>15} | " + (f"{ps['cddp'] / t:.2f}x time" if t else "-"))


if __name__ == "__main__":
    main()
