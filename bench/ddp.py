"""DDP training throughput and scaling: cddp vs torch DDP (gloo), 1, 2 and 4 ranks, same models.

    python bench/ddp.py [--quick] [--ranks 1,2,4] [--models mlp,linear] [--no-torch]
                        [--plot docs/ddp_throughput.png]

Models: MLP 784-1024-1024-10 at per-rank batch 64 (samples/s over all ranks) and the
tutorials' Linear(20, 1) + MSELoss at batch 32 (steps/s summed over ranks, where per-step
overhead dominates). SGD with momentum 0.9; one BLAS/OpenMP thread per rank.

Scaling is measured against plain training in the same processes: every rank holds a plain
copy of the model (no DDP) and a DDP-wrapped one, and timed windows alternate between the
two — N ranks each training its plain model side by side, then the same N ranks training
DDP — so machine load drifts into both alike. "DDP/plain" is the median over windows of
(DDP rate / plain rate of the N ranks side by side); at one rank it is the cost of wrapping a
model in DDP. "vs 1 proc" divides the DDP rate by N times the plain rate of the one-rank run
(a separate run: noisier). Rates are summed over ranks.

Per-phase profile (cddp, median per step over a window of instrumented steps, ms): forward,
backward, of which the reducer's bucket copies, launches (the last unit runs inline: its
all_reduce is included) and the final wait, then the optimizer; "comm alone" is the same
collectives run back to back outside backward (on buffers in the shared arena, where DDP's
gradients are), and "hidden" is the share of it that backward hides: 1 - (backward with sync -
backward under no_sync) / comm alone. "in place": the units per step the shared-memory
transport all-reduced in place in the ranks' arenas (zero-copy; the rest went through the
transport's slots); CDDP_SHM_ZEROCOPY=0 turns that path off for a comparison.

Ranks are started by this script (RANK/WORLD_SIZE/MASTER_* set by hand, a free port each
run); every rank reports JSON; ratios come from one run. The machine is shared: read the
ratios, and the load average printed at the top.
"""
import argparse
import contextlib
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


def launch_ranks(script, worker_args, nranks, what):
    """Run `script --worker *worker_args` on nranks processes as one job (RANK, WORLD_SIZE,
    MASTER_* set by hand on a free port, one BLAS/OpenMP thread per rank) and return the JSON
    a rank printed after "RESULT ". A rank that fails before any RESULT was read raises with
    its stderr (`what` names the job); a launch past 900 s kills every rank."""
    port = free_port()
    procs = []
    for r in range(nranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nranks),
                   LOCAL_WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.pop("CDDP_TOKEN", None)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(script), "--worker",
                                       *map(str, worker_args)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    result = None
    try:
        for p in procs:
            out, err = p.communicate(timeout=900)
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    result = json.loads(line[7:])
            if p.returncode != 0 and result is None:
                raise RuntimeError(f"{what} x{nranks} rank failed:\n{err[-2000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return result


def ddp_rate(lib, dist, step, samples, windows, min_time):
    """Median samples/s of `step` (one DDP training step of `samples` samples per rank) over
    `windows` timing windows. Every rank runs the same number of steps per window (doubled
    until the slowest rank's window lasts min_time), and the slowest rank sets each window's
    pace; every rank returns the same figure."""
    def slowest(v):
        t = lib.tensor([v], dtype=lib.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    world = dist.get_world_size()
    for _ in range(2):
        step()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if slowest(time.perf_counter() - t0) >= min_time:
            break
        n *= 2
    rates = []
    for _ in range(windows):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        rates.append(world * samples * n / slowest(time.perf_counter() - t0))
    return statistics.median(rates)


# ---- worker ------------------------------------------------------------------------------------

def _setup(lib_name):
    if lib_name == "torch":
        import torch as lib
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
    else:
        import cddp as lib
        import cddp.distributed as dist
        from cddp.nn.parallel import DistributedDataParallel as DDP
    lib.set_num_threads(1)
    return lib, dist, DDP


def _model(lib, model_name, rng):
    lib.manual_seed(0)
    if model_name == "mlp":
        net = lib.nn.Sequential(lib.nn.Linear(784, 1024), lib.nn.ReLU(), lib.nn.Linear(1024, 1024),
                                lib.nn.ReLU(), lib.nn.Linear(1024, 10))
        return net, lib.nn.CrossEntropyLoss(), 64
    return lib.nn.Linear(20, 1), lib.nn.MSELoss(), 1


def worker(lib_name, model_name, windows, min_time):
    import numpy as np
    lib, dist, DDP = _setup(lib_name)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rng = np.random.default_rng(rank)
    if model_name == "mlp":
        x = lib.tensor(rng.standard_normal((64, 784)).astype(np.float32))
        y = lib.tensor(rng.integers(0, 10, 64))
    else:
        x = lib.tensor(rng.standard_normal((32, 20)).astype(np.float32))
        y = lib.tensor(rng.standard_normal((32, 1)).astype(np.float32))
    plain, crit, per_step = _model(lib, model_name, rng)
    net, _, _ = _model(lib, model_name, rng)
    model = DDP(net)
    opt_plain = lib.optim.SGD(plain.parameters(), lr=0.01, momentum=0.9)
    opt_ddp = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def make_step(m, opt):
        def step():
            opt.zero_grad()
            crit(m(x), y).backward()
            opt.step()
        return step
    steps = {"plain": make_step(plain, opt_plain), "ddp": make_step(model, opt_ddp)}

    def total(v):                      # sum over ranks (float64 all_reduce)
        t = lib.tensor([v], dtype=lib.float64)
        dist.all_reduce(t)
        return t.item()

    def slowest(v):
        t = lib.tensor([v], dtype=lib.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    for f in steps.values():
        for _ in range(3):
            f()
    n = 1
    while True:                       # all ranks must run the same number of steps
        t0 = time.perf_counter()
        for _ in range(n):
            steps["ddp"]()
        if slowest(time.perf_counter() - t0) >= min_time:
            break
        n *= 2
    rates = {"plain": [], "ddp": []}
    cpu = {"plain": [], "ddp": []}
    for w in range(windows):
        order = ("plain", "ddp") if w % 2 == 0 else ("ddp", "plain")
        for name in order:
            dist.barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                steps[name]()
            t1, c1 = time.perf_counter(), time.process_time()
            rates[name].append(total(per_step * n / (t1 - t0)))
            cpu[name].append(total(c1 - c0))
    ratios = [d / p for d, p in zip(rates["ddp"], rates["plain"])]
    cpu_ratios = [p / d for d, p in zip(cpu["ddp"], cpu["plain"])]
    result = {"plain": statistics.median(rates["plain"]), "ddp": statistics.median(rates["ddp"]),
              "ratio": statistics.median(ratios), "cpu_ratio": statistics.median(cpu_ratios)}
    if lib_name == "cddp":
        result["phases"] = profile(lib, dist, model, plain, opt_ddp, opt_plain, crit, x, y,
                                   max(8, n), slowest)
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def profile(lib, dist, model, plain, opt, opt_plain, crit, x, y, reps, slowest):
    """Per-phase medians (ms per step) of DDP and plain steps, the reducer's own split of
    backward, the collectives alone, and the share of them backward hides."""
    def phased(m, o, nosync=False):
        # no_sync must cover the forward too: DDP decides at forward time whether the backward
        # that follows reduces (torch's require_backward_grad_sync), so a no_sync() around the
        # backward alone still communicates
        with model.no_sync() if nosync else contextlib.nullcontext():
            t0 = time.perf_counter()
            o.zero_grad()
            out = crit(m(x), y)
            t1 = time.perf_counter()
            out.backward()
            t2 = time.perf_counter()
        o.step()
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2

    res = {}
    for name, m, o, nosync in (("plain", plain, opt_plain, False), ("ddp", model, opt, False),
                               ("nosync", model, opt, True)):
        dist.barrier()
        model.reducer.reset_stats()
        zc0 = lib._C._shm_zero_copy_ops()
        rows = [phased(m, o, nosync) for _ in range(reps)]
        if name == "ddp":       # all_reduces run in place in the shared arenas, per step
            res["in_place"] = (lib._C._shm_zero_copy_ops() - zc0) / reps
        res[name] = [1e3 * statistics.median(r[k] for r in rows) for k in range(3)]
        if name == "ddp":
            st = model.reducer.stats()
            it = max(1, st["iterations"])
            res["reducer"] = {k: 1e3 * st[k] / it for k in ("copy_s", "launch_s", "wait_s",
                                                            "write_s")}
            res["units"], res["bypass"] = st["units"], st["bypass"]
            res["copy_mb"] = st["copy_bytes"] / it / 2 ** 20
    units = model.reducer.units()
    # in the shared arena, where DDP's gradients and buckets are (the zero-copy path)
    prev = lib._C._arena_scope(True)
    bufs = [lib.zeros(numel, dtype=dtype) for numel, dtype, _ in units]
    lib._C._arena_scope(prev)
    comm = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        for b in bufs:
            dist.all_reduce(b, op=dist.ReduceOp.AVG)
        comm.append(time.perf_counter() - t0)
    res["comm"] = 1e3 * statistics.median(comm) if bufs else 0.0
    extra = res["ddp"][1] - res["nosync"][1]
    res["hidden"] = (max(0.0, min(1.0, 1.0 - extra / res["comm"]))
                     if res["comm"] > 0 else None)
    return res


# ---- driver -------------------------------------------------------------------------------------

def launch(lib, model, nranks, windows, min_time):
    return launch_ranks(__file__, (lib, model, windows, min_time), nranks, f"{lib} {model}")


def print_tables(rows, libs):
    print(f"{'model':7s} {'ranks':>5s} {'unit':>9s} | {'cddp plain':>11s} {'cddp DDP':>10s} "
          f"{'DDP/plain':>9s} {'(CPU)':>6s} {'vs 1 proc':>9s}" +
          (f" | {'torch plain':>11s} {'torch DDP':>10s} {'DDP/plain':>9s} | {'cddp/torch DDP':>14s}"
           if "torch" in libs else ""))
    one = {(m, lib): r[lib]["plain"] for m, n, _, r in rows if n == 1 for lib in libs}
    for model, nranks, unit, res in rows:
        c = res["cddp"]
        base = one.get((model, "cddp"))
        vs1 = f"{c['ddp'] / (nranks * base):8.2f}x" if base else "        -"
        line = (f"{model:7s} {nranks:5d} {unit:>9s} | {c['plain']:11.1f} {c['ddp']:10.1f} "
                f"{c['ratio']:8.2f}x {c['cpu_ratio']:5.2f}x {vs1}")
        if "torch" in libs:
            t = res["torch"]
            line += (f" | {t['plain']:11.1f} {t['ddp']:10.1f} {t['ratio']:8.2f}x | "
                     f"{c['ddp'] / t['ddp']:13.2f}x")
        print(line)
    print("\nper-phase profile, cddp (ms per step, medians; reducer columns are part of backward)")
    print(f"{'model':7s} {'ranks':>5s} | {'plain fwd':>9s} {'bwd':>7s} {'opt':>6s} | "
          f"{'DDP fwd':>8s} {'bwd':>7s} {'copies':>7s} {'launch':>7s} {'wait':>6s} "
          f"{'write':>6s} {'opt':>6s} | {'no_sync bwd':>11s} {'comm alone':>10s} {'hidden':>6s}"
          f" {'units':>5s} {'in place':>8s} {'copied MiB':>10s}")
    for model, nranks, unit, res in rows:
        ph = res["cddp"]["phases"]
        r = ph["reducer"]
        hid = f"{ph['hidden']:6.0%}" if ph["hidden"] is not None else "     -"
        print(f"{model:7s} {nranks:5d} | {ph['plain'][0]:9.3f} {ph['plain'][1]:7.3f} "
              f"{ph['plain'][2]:6.3f} | {ph['ddp'][0]:8.3f} {ph['ddp'][1]:7.3f} "
              f"{r['copy_s']:7.3f} {r['launch_s']:7.3f} {r['wait_s']:6.3f} {r['write_s']:6.3f} "
              f"{ph['ddp'][2]:6.3f} | {ph['nosync'][1]:11.3f} {ph['comm']:10.3f} {hid} "
              f"{ph['units']:5d} {ph.get('in_place', 0):8.1f} {ph['copy_mb']:10.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--models", default="mlp,linear")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--plot", help="write a PNG bar chart of samples/s (needs matplotlib)")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        lib, model, windows, min_time = args.worker
        worker(lib, model, int(windows), float(min_time))
        return
    windows, min_time = (2, 0.05) if args.quick else (7, 0.3)
    libs = ["cddp"]
    if not args.no_torch:
        try:
            import torch  # noqa: F401
            libs.append("torch")
        except ImportError:
            pass
    print(f"# DDP scaling: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus; "
          f"{windows} windows of >= {min_time} s each, plain and DDP interleaved", flush=True)
    rows = []
    for model in args.models.split(","):
        unit = "samples/s" if model == "mlp" else "steps/s"
        for nranks in (int(v) for v in args.ranks.split(",")):
            res = {lib: launch(lib, model, nranks, windows, min_time) for lib in libs}
            rows.append((model, nranks, unit, res))
    print_tables(rows, libs)
    if args.plot:
        plot(rows, libs, args.plot)


def plot(rows, libs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({m for m, _, _, _ in rows}, key=["mlp", "linear"].index)
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        labels, values, colors = [], [], []
        for m, nranks, unit, res in rows:
            if m != model:
                continue
            for lib in libs:
                for kind in ("plain", "ddp"):
                    labels.append(f"{lib}\n{kind}\n{nranks}r")
                    values.append(res[lib][kind])
                    colors.append({("cddp", "plain"): "#9cc3e4", ("cddp", "ddp"): "#2a7ab9",
                                   ("torch", "plain"): "#f2bf9b", ("torch", "ddp"): "#e07b39"}
                                  [(lib, kind)])
            ylab = unit
        ax.bar(labels, values, color=colors)
        ax.tick_params(axis="x", labelsize=6)
        ax.set_title("MLP 784-1024-1024-10, b=64" if model == "mlp" else "Linear(20,1)+MSE, b=32")
        ax.set_ylabel(ylab)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
