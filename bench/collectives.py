"""bench/collectives.py — cddp's CPU process group against torch's gloo and Open MPI, same
machine, same run.

all_reduce, broadcast and all_gather from 4 B to 256 MiB on 2 and 4 ranks: median time per op,
algbw = S / t and busbw as nccl-tests define it (all_reduce: algbw * 2(n-1)/n; all_gather:
algbw * (n-1)/n with S the gathered output; broadcast: algbw). Columns ("transports"):

    shm        cddp, ranks on this host: shared memory
    tcp        cddp, CDDP_TRANSPORT=tcp on loopback
    mpi        cddp's MPI backend (init_process_group("mpi") under mpirun); its all_reduce rows
               also time Open MPI's own MPI_Allreduce loop (osu_allreduce's: in place, on a
               buffer of ones) in the same processes, alternating with cddp's, as "osu"
    hosts      cddp across two hosts: network namespaces joined by a veth pair (tests/
               netns_util.py; root only), half the ranks on each, `cddp.run --nnodes=2`:
               shared memory inside a host, TCP between (the hierarchical transport)
    mpi-hosts  the MPI backend across the same two hosts (mpirun, Open MPI's TCP between)
    gloo       torch's gloo when torch is installed

beside the single-thread memcpy bandwidth measured here (the ceiling for shared memory), and
barrier latency. Unavailable columns (no MPI, not root) are left out with the reason.

    python bench/collectives.py                 # full table (several minutes)
    python bench/collectives.py --quick         # small sizes, 2 ranks, cddp only (smoke test)
    python bench/collectives.py --ranks 2 --ops all_reduce --max-size 16M --transports shm mpi
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def fmt_size(b):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m:
            return f"{b / m:g} {unit}"
    return f"{b} B"


def schedule(size, first=None):
    """(iterations per repetition, repetitions): about 20-60 ms per repetition; `first` (the
    slowest rank's time of a warm-up call, seconds) caps the iterations of slow columns."""
    iters = max(2, min(300, (48 << 20) // max(size, 1) // 8 + 1))
    if first:
        iters = max(2, min(iters, int(0.06 / first)))
    return iters, (5 if size < (64 << 20) else 3)


def memcpy_bw(nbytes=64 << 20, reps=5):
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best.append(time.perf_counter() - t0)
    return nbytes / float(np.median(best))


# ---- worker (one rank) ----------------------------------------------------------------------

def _cddp_init(dist, backend, rank, n, d):
    """The cddp group of this worker: a file store (local), env:// (under cddp.run across
    hosts) or MPI (under mpirun)."""
    if backend in ("mpi", "mpi-hosts"):
        dist.init_process_group("mpi")
    elif backend == "hosts":
        dist.init_process_group("gloo")
    else:
        try:
            from cddp.distributed import FileStore
            store = FileStore(os.path.join(d, "cddpstore"), n)
        except ImportError:                      # before the store classes are merged
            from _teststore import DirStore
            store = DirStore(os.path.join(d, "cddpstore"))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=n)


def timed(fn, iters, nrep, barrier, osu=None):
    """Median seconds per call of fn over nrep repetitions of iters calls; with osu (a
    function of iters returning seconds per op), the same for it, alternating with fn."""
    times, otimes = [], []
    for _ in range(nrep):
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t0) / iters)
        if osu is not None:
            otimes.append(osu(iters))
    return float(np.median(times)), (float(np.median(otimes)) if otimes else None)


def worker(backend, rank, n, d, cfg):
    osu = None
    if backend == "gloo":
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "torchstore"),
                                rank=rank, world_size=n)
        mk = lambda elems: torch.ones(elems, dtype=torch.float32)  # noqa: E731
        empty = lambda elems: torch.empty(elems, dtype=torch.float32)  # noqa: E731
    else:
        sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
        import cddp
        import cddp.distributed as dist
        _cddp_init(dist, backend, rank, n, d)
        rank = dist.get_rank()
        if backend in ("mpi", "mpi-hosts"):
            from cddp import _mpi
            osu = _mpi.osu_allreduce
        mk = lambda elems: cddp.from_numpy(np.ones(elems, dtype=np.float32))  # noqa: E731
        empty = lambda elems: cddp.from_numpy(np.empty(elems, dtype=np.float32))  # noqa: E731
    out = {"rows": []}
    dist.barrier()
    # barrier latency
    k = 300 if not cfg["quick"] else 50
    for _ in range(20):
        dist.barrier()
    reps = []
    for _ in range(5):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            dist.barrier()
        reps.append((time.perf_counter() - t0) / k)
    out["barrier"] = float(np.median(reps))
    for op in cfg["ops"]:
        for size in cfg["sizes"]:
            elems = max(1, size // 4)
            if op == "all_gather":               # S = gathered output
                elems = max(1, elems // n)
                x = mk(elems)
                outl = [empty(elems) for _ in range(n)]
                fn = lambda: dist.all_gather(outl, x)  # noqa: E731
            elif op == "broadcast":
                x = mk(elems)
                fn = lambda: dist.broadcast(x, 0)  # noqa: E731
            else:
                x = mk(elems)
                fn = lambda: dist.all_reduce(x)  # noqa: E731
            fn()
            t0 = time.perf_counter()
            fn()
            first = mk(1)                # the slowest rank's warm-up time sets the count
            first.fill_(time.perf_counter() - t0)
            dist.all_reduce(first, op=dist.ReduceOp.MAX)
            iters, nrep = schedule(size, float(first[0]))
            if cfg["quick"]:
                iters, nrep = min(iters, 20), 3
            o = (lambda k, b=max(4, size): osu(b, k)) if osu and op == "all_reduce" else None
            t, t_osu = timed(fn, iters, nrep, dist.barrier, o)
            out["rows"].append({"op": op, "size": size, "t": t, "t_osu": t_osu})
            del x, fn
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump(out, f)


# ---- driver ---------------------------------------------------------------------------------

def _cmd(backend, rank, n, d, cfg):
    return [sys.executable, os.path.abspath(__file__), "--worker", backend, str(rank), str(n), d,
            json.dumps(cfg)]


def _launch(backend, n, d, cfg, env, hosts):
    """The processes of one column: (popen objects, namespaces to clean)."""
    if backend in ("shm", "tcp", "gloo"):
        return [subprocess.Popen(_cmd(backend, r, n, d, cfg), env=env, start_new_session=True)
                for r in range(n)]
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if backend == "mpi":
        return [subprocess.Popen(["mpirun", "-np", str(n), "--bind-to", "none",
                                  *_cmd(backend, -1, n, d, cfg)], env=env,
                                 start_new_session=True)]
    if backend == "mpi-hosts":
        return [subprocess.Popen(hosts.cmd("A", ["mpirun", *hosts.mpirun_args(
            os.path.join(d, "agent.sh"), n), "--bind-to", "none", "-x", "PYTHONPATH",
            *_cmd(backend, -1, n, d, cfg)]), env=env, start_new_session=True)]
    common = [sys.executable, "-m", "cddp.run", "--nnodes=2", f"--nproc-per-node={n // 2}",
              f"--master-addr={hosts.addr['A']}", "--master-port=29455"]
    env.setdefault("CDDP_TOKEN", os.urandom(16).hex())
    return [subprocess.Popen(hosts.cmd(h, [*common, f"--node-rank={k}",
                                           *_cmd(backend, -1, n, d, cfg)[1:]]),
                             env=env, start_new_session=True) for k, h in enumerate("AB")]


def run(backend, n, cfg, timeout):
    d = tempfile.mkdtemp(prefix="cddp-bench-")
    env = dict(os.environ)
    env.pop("CDDP_TRANSPORT", None)
    if backend == "tcp":
        env["CDDP_TRANSPORT"] = "tcp"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    hosts = None
    if backend in ("hosts", "mpi-hosts"):
        from netns_util import Hosts
        hosts = Hosts()
        hosts.create()
    procs = []
    try:
        procs = _launch(backend, n, d, cfg, env, hosts)
        end = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1, end - time.monotonic()))
        with open(os.path.join(d, "result.json")) as f:
            return json.load(f)
    except (subprocess.TimeoutExpired, FileNotFoundError, RuntimeError) as e:
        print(f"  [{backend} x{n}] failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        if hosts is not None:
            hosts.destroy()
        shutil.rmtree(d, ignore_errors=True)


def available(transports, torch_ok):
    """The columns this machine can run, and why the others are left out."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    sys.path.insert(0, ROOT)
    why = {}
    try:
        from cddp import _mpi  # noqa: F401
        if not shutil.which("mpirun"):
            raise ImportError("mpirun is not on PATH")
    except ImportError as e:
        why["mpi"] = why["mpi-hosts"] = f"no MPI ({e})"
    from netns_util import netns_unavailable
    no_ns = netns_unavailable()
    if no_ns:
        why["hosts"] = why["mpi-hosts"] = no_ns
    cols = [t for t in transports if t not in why]
    for t in transports:
        if t in why:
            print(f"column {t} left out: {why[t]}")
    return cols + (["gloo"] if torch_ok else [])


def busbw_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--ops", nargs="+", default=["all_reduce", "broadcast", "all_gather"])
    ap.add_argument("--min-size", default="4")
    ap.add_argument("--max-size", default="256M")
    ap.add_argument("--step", type=int, default=4, help="size multiplier between rows")
    ap.add_argument("--transports", nargs="+", default=["shm", "tcp", "mpi", "hosts"],
                    choices=["shm", "tcp", "mpi", "hosts", "mpi-hosts"])
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--quick", action="store_true", help="4 B / 64 KiB / 1 MiB, 2 ranks, cddp shm only")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        backend, rank, n, d, cfg = a.worker
        worker(backend, int(rank), int(n), d, json.loads(cfg))
        return
    if a.quick:
        sizes, ranks, transports, torch_ok = [4, 64 << 10, 1 << 20], [2], ["shm"], False
        a.ops = ["all_reduce", "broadcast", "all_gather"]
    else:
        sizes, s, top = [], parse_size(a.min_size), parse_size(a.max_size)
        while s <= top:
            sizes.append(s)
            s *= a.step
        ranks, transports = a.ranks, a.transports
        torch_ok = not a.no_torch
        if torch_ok:
            try:
                import importlib.util
                torch_ok = importlib.util.find_spec("torch") is not None
            except Exception:  # noqa: BLE001
                torch_ok = False
    cfg = {"ops": a.ops, "sizes": sizes, "quick": a.quick}
    mc = memcpy_bw()
    print(f"single-thread memcpy (64 MiB, NumPy copyto): {mc / 1e9:.2f} GB/s  "
          f"(the ceiling for shared memory); {os.cpu_count()} CPUs")
    backends = available(transports, torch_ok) if not a.quick else ["shm"]
    names = {"shm": "cddp shm", "tcp": "cddp tcp", "mpi": "cddp mpi", "hosts": "cddp 2 hosts",
             "mpi-hosts": "cddp mpi 2 hosts", "gloo": "torch gloo", "osu": "Open MPI (osu)",
             "osu-hosts": "Open MPI 2 hosts"}
    for n in ranks:
        res = {b: run(b, n, cfg, a.timeout) for b in backends}
        print(f"\n== {n} ranks ==")
        print("barrier latency: " + ", ".join(
            f"{names[b]} {res[b]['barrier'] * 1e6:.1f} us" for b in backends if res[b]))
        for op in a.ops:
            print_op(op, n, sizes, backends, res, names)
    sys.stdout.flush()


def columns(op, backends, res):
    """(column name, {size: seconds}) in print order: Open MPI's own loop right after each
    MPI column (all_reduce only)."""
    out = []
    for b in backends:
        rows = [r for r in (res[b] or {}).get("rows", []) if r["op"] == op]
        out.append((b, {r["size"]: r["t"] for r in rows}))
        if b.startswith("mpi") and any(r.get("t_osu") for r in rows):
            out.append(("osu" + b[3:], {r["size"]: r["t_osu"] for r in rows if r.get("t_osu")}))
    return out


def print_op(op, n, sizes, backends, res, names):
    cols = columns(op, backends, res)
    print(f"\n{op} ({n} ranks, float32) — time / algbw / busbw (GB/s)")
    hdr = f"{'size':>10} |" + "|".join(f"{names[c]:^28}" for c, _ in cols)
    print(hdr + "| cddp vs gloo (time ratio); mpi vs osu (busbw)")
    for size in sizes:
        cells, tt = [], {}
        for c, ts in cols:
            if size not in ts:
                cells.append(f"{'-':^28}")
                continue
            t = tt[c] = ts[size]
            alg = size / t / 1e9
            cells.append(f"{t * 1e3:9.3f} ms {alg:6.2f} {alg * busbw_factor(op, n):6.2f} ")
        notes = [f"{c} {tt['gloo'] / tt[c]:.2f}x" for c in tt
                 if "gloo" in tt and c not in ("gloo", "osu", "osu-hosts")]
        notes += [f"{m} {tt['osu' + m[3:]] / tt[m]:.0%}" for m in ("mpi", "mpi-hosts")
                  if m in tt and "osu" + m[3:] in tt]
        print(f"{fmt_size(size):>10} |" + "|".join(cells) + "| " + "  ".join(notes))


    sys.stdout.flush()


if __name__ == "__main__":
    main()
