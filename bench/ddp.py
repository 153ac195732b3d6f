"""DDP training throughput: cddp vs torch DDP (gloo), 1 and 2 ranks, same models, same run.

    python bench/ddp.py [--quick] [--plot docs/ddp_throughput.png]

Models: MLP 784-1024-1024-10 at per-rank batch 64 (samples/s over all ranks) and the
tutorials' Linear(20, 1) + MSELoss at batch 32 (steps/s, where per-step overhead dominates).
Each rank runs one BLAS/OpenMP thread. For cddp it also reports the fraction of all_reduce
time hidden under backward: 1 - (backward with sync - backward under no_sync) / all_reduce
time of the same buckets measured alone.

Ranks are started by this script (RANK/WORLD_SIZE/MASTER_* set by hand, a free port each
run), every rank reports JSON on stdout, the table takes medians; ratios come from one run.
"""
import argparse
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# An in-place build of this checkout wins over an installed cddp (as in bench/ops.py); the
# ranks this script starts inherit the choice through PYTHONPATH.
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- worker ------------------------------------------------------------------------------------

def worker(lib_name, model_name, windows, min_time):
    import numpy as np
    if lib_name == "torch":
        import torch as lib
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        lib.set_num_threads(1)
    else:
        import cddp as lib
        import cddp.distributed as dist
        from cddp.nn.parallel import DistributedDataParallel as DDP
        lib.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(rank)
    lib.manual_seed(0)
    if model_name == "mlp":
        net = lib.nn.Sequential(lib.nn.Linear(784, 1024), lib.nn.ReLU(), lib.nn.Linear(1024, 1024),
                                lib.nn.ReLU(), lib.nn.Linear(1024, 10))
        x = lib.tensor(rng.standard_normal((64, 784)).astype(np.float32))
        y = lib.tensor(rng.integers(0, 10, 64))
        crit, per_step = lib.nn.CrossEntropyLoss(), 64
    else:
        net = lib.nn.Linear(20, 1)
        x = lib.tensor(rng.standard_normal((32, 20)).astype(np.float32))
        y = lib.tensor(rng.standard_normal((32, 1)).astype(np.float32))
        crit, per_step = lib.nn.MSELoss(), 1
    model = DDP(net)
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    n = 1
    while True:                       # all ranks must run the same number of steps
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        dt = lib.tensor([time.perf_counter() - t0], dtype=lib.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if dt.item() >= min_time:
            break
        n *= 2
    rates = []
    for _ in range(windows):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        dt = lib.tensor([time.perf_counter() - t0], dtype=lib.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)      # the slowest rank sets the pace
        rates.append(world * per_step * n / dt.item())
    result = {"rate": statistics.median(rates)}
    if lib_name == "cddp" and world > 1:
        result["hidden"] = hidden_fraction(lib, dist, model, crit, x, y, n)
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def hidden_fraction(lib, dist, model, crit, x, y, n):
    """Share of all_reduce time that backward hid: compare backward with and without sync."""
    def timed(fn, reps):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    def synced():
        model.zero_grad()
        crit(model(x), y).backward()

    def unsynced():
        model.zero_grad()
        with model.no_sync():
            crit(model(x), y).backward()

    def comm_only():
        for b in model.reducer.buckets:
            dist.all_reduce(b)

    reps = max(3, n)
    t_sync = statistics.median(timed(synced, reps) for _ in range(3))
    t_local = statistics.median(timed(unsynced, reps) for _ in range(3))
    t_comm = statistics.median(timed(comm_only, reps) for _ in range(3))
    if t_comm <= 0:
        return None
    return max(0.0, min(1.0, 1.0 - (t_sync - t_local) / t_comm))


# ---- driver -------------------------------------------------------------------------------------

def launch(lib, model, nranks, windows, min_time):
    port = free_port()
    procs = []
    for r in range(nranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nranks),
                   LOCAL_WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        env.pop("CDDP_TOKEN", None)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", lib,
                                       model, str(windows), str(min_time)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    result = None
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{lib} {model} x{nranks} rank failed:\n{err[-2000:]}")
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plot", help="write a PNG bar chart of samples/s (needs matplotlib)")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        lib, model, windows, min_time = args.worker
        worker(lib, model, int(windows), float(min_time))
        return
    windows, min_time = (2, 0.05) if args.quick else (5, 0.5)
    try:
        import torch  # noqa: F401
        libs = ["cddp", "torch"]
    except ImportError:
        libs = ["cddp"]
    rows = []
    for model, unit in (("mlp", "samples/s"), ("linear", "steps/s")):
        for nranks in (1, 2):
            res = {lib: launch(lib, model, nranks, windows, min_time) for lib in libs}
            rows.append((model, unit, nranks, res))
    print(f"{'model':8s} {'ranks':>5s} {'unit':>10s} " + " ".join(f"{lib:>12s}" for lib in libs) +
          ("  cddp/torch" if "torch" in libs else "") + "  hidden all_reduce")
    for model, unit, nranks, res in rows:
        line = f"{model:8s} {nranks:5d} {unit:>10s} " + " ".join(f"{res[lib]['rate']:12.1f}" for lib in libs)
        if "torch" in libs:
            line += f"  {res['cddp']['rate'] / res['torch']['rate']:9.2f}x"
        h = res["cddp"].get("hidden")
        line += f"  {h:6.0%}" if h is not None else "       -"
        print(line)
    by = {(m, n): r for m, _, n, r in rows}
    print(f"\ncddp 2-rank / 1-rank MLP throughput: "
          f"{by[('mlp', 2)]['cddp']['rate'] / by[('mlp', 1)]['cddp']['rate']:.2f}x")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, model, unit in ((axes[0], "mlp", "samples/s"), (axes[1], "linear", "steps/s")):
            labels, values, colors = [], [], []
            for nranks in (1, 2):
                for lib in libs:
                    labels.append(f"{lib}\n{nranks} rank{'s' if nranks > 1 else ''}")
                    values.append(by[(model, nranks)][lib]["rate"])
                    colors.append("#2a7ab9" if lib == "cddp" else "#e07b39")
            ax.bar(labels, values, color=colors)
            ax.set_title(f"{'MLP 784-1024-1024-10, b=64' if model == 'mlp' else 'Linear(20,1)+MSE, b=32'}")
            ax.set_ylabel(unit)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
