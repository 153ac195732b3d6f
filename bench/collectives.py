"""bench/collectives.py — cddp's CPU process group against torch's gloo, same machine, same run.

all_reduce, broadcast and all_gather from 4 B to 256 MiB on 2 and 4 local ranks: median time
per op, algbw = S / t and busbw as nccl-tests define it (all_reduce: algbw * 2(n-1)/n;
all_gather: algbw * (n-1)/n with S the gathered output; broadcast: algbw), for cddp over
shared memory, cddp over TCP (CDDP_TRANSPORT=tcp) and torch gloo when torch is installed;
beside the single-thread memcpy bandwidth measured here (the ceiling for shared memory), and
barrier latency.

    python bench/collectives.py                 # full table (a few minutes)
    python bench/collectives.py --quick         # small sizes, 2 ranks, cddp only (smoke test)
    python bench/collectives.py --ranks 2 --ops all_reduce --max-size 16M --transports shm
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


def schedule(size):
    """(iterations per repetition, repetitions): about 20-60 ms per repetition."""
    iters = max(2, min(300, (48 << 20) // max(size, 1) // 8 + 1))
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

def worker(backend, rank, n, d, cfg):
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
        try:
            from cddp.distributed import FileStore
            store = FileStore(os.path.join(d, "cddpstore"), n)
        except ImportError:                      # before the store classes are merged
            from _teststore import DirStore
            store = DirStore(os.path.join(d, "cddpstore"))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=n)
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
            iters, nrep = schedule(size)
            if cfg["quick"]:
                iters, nrep = min(iters, 20), 3
            fn()
            fn()
            times = []
            for _ in range(nrep):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                times.append((time.perf_counter() - t0) / iters)
            out["rows"].append({"op": op, "size": size, "t": float(np.median(times))})
            del x, fn
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump(out, f)


# ---- driver ---------------------------------------------------------------------------------

def run(backend, n, cfg, timeout):
    d = tempfile.mkdtemp(prefix="cddp-bench-")
    env = dict(os.environ)
    env.pop("CDDP_TRANSPORT", None)
    if backend == "tcp":
        env["CDDP_TRANSPORT"] = "tcp"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", backend,
                               str(r), str(n), d, json.dumps(cfg)], env=env,
                              start_new_session=True) for r in range(n)]
    try:
        end = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1, end - time.monotonic()))
        with open(os.path.join(d, "result.json")) as f:
            return json.load(f)
    except (subprocess.TimeoutExpired, FileNotFoundError) as e:
        print(f"  [{backend} x{n}] failed: {type(e).__name__}", file=sys.stderr)
        return None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


def busbw_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--ops", nargs="+", default=["all_reduce", "broadcast", "all_gather"])
    ap.add_argument("--min-size", default="4")
    ap.add_argument("--max-size", default="256M")
    ap.add_argument("--step", type=int, default=4, help="size multiplier between rows")
    ap.add_argument("--transports", nargs="+", default=["shm", "tcp"])
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
    backends = list(transports) + (["gloo"] if torch_ok else [])
    names = {"shm": "cddp shm", "tcp": "cddp tcp", "gloo": "torch gloo"}
    for n in ranks:
        res = {b: run(b, n, cfg, a.timeout) for b in backends}
        print(f"\n== {n} ranks ==")
        print("barrier latency: " + ", ".join(
            f"{names[b]} {res[b]['barrier'] * 1e6:.1f} us" for b in backends if res[b]))
        for op in a.ops:
            print(f"\n{op} ({n} ranks, float32) — time / algbw / busbw (GB/s)")
            hdr = f"{'size':>10} |" + "|".join(f"{names[b]:^28}" for b in backends)
            if "gloo" in backends:
                hdr += "| speedup vs gloo"
            print(hdr)
            for size in sizes:
                cells, tt = [], {}
                for b in backends:
                    row = None
                    if res[b]:
                        row = next((r for r in res[b]["rows"] if r["op"] == op and r["size"] == size), None)
                    if row is None:
                        cells.append(f"{'-':^28}")
                        continue
                    t = row["t"]
                    tt[b] = t
                    alg = size / t / 1e9
                    cells.append(f"{t * 1e3:9.3f} ms {alg:6.2f} {alg * busbw_factor(op, n):6.2f} ")
                line = f"{fmt_size(size):>10} |" + "|".join(cells)
                if "gloo" in tt:
                    line += "| " + "  ".join(f"{names[b].split()[1]} {tt['gloo'] / tt[b]:.2f}x"
                                             for b in transports if b in tt)
                print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
