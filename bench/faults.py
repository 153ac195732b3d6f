"""bench/faults.py — what each fault does to a cddp job, measured: the figures of
docs/failures.md.

    python bench/faults.py              # every scenario (about a minute)
    python bench/faults.py --quick      # fewer repetitions, smaller checkpoint (smoke test)

Scenarios (real processes on this machine; every wait bounded):
  dead rank      a rank SIGKILLs itself while the others block in all_reduce: time from the
                 kill to the survivors' exception (shm and tcp transports)
  stuck rank     a live rank that never joins the collective: time to the others' error,
                 against the group's timeout (1 s here)
  mismatch       ranks call different collectives / sizes / new_group members: time from the
                 last rank's call to the error on every rank
  kill mid-save  SIGKILL cddp.save of a large state dict at random points: the target's state,
                 temporaries left, temporaries after the next save (torch.save beside it when
                 torch is installed)
  store          what the TCP store refuses, and a legitimate client's wait under 200 bare
                 connections with the server's process limited to 128 descriptors
  DataLoader     a SIGKILLed worker: time to the error; a hung worker: time to shut down
"""
import argparse
import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


# ---- ranks ------------------------------------------------------------------------------------

def worker(scenario, rank, n, d, arg):
    """One rank of a scenario; writes its result to d/result.<rank>."""
    import datetime
    import numpy as np
    import cddp
    import cddp.distributed as dist
    store = dist.FileStore(os.path.join(d, "store"), n)
    timeout = 1.0 if scenario == "stuck" else 30.0
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout))
    x = cddp.from_numpy(np.ones(1 << 16, np.float32))
    dist.all_reduce(x)
    dist.barrier()
    out = {}
    try:
        if scenario == "dead":
            if rank == 1:
                time.sleep(0.2)
                with open(os.path.join(d, "t_event"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            while True:
                dist.all_reduce(x)
        elif scenario == "stuck":
            if rank == 1:
                time.sleep(timeout + 1.5)
                return
            t0 = time.time()
            with open(os.path.join(d, "t_event"), "w") as f:
                f.write(repr(t0))
            dist.all_reduce(x)
        elif scenario == "mismatch":
            time.sleep(0.05 * rank)            # the last rank to call is rank n - 1
            with open(os.path.join(d, f"t_call.{rank}"), "w") as f:
                f.write(repr(time.time()))
            if arg == "op":
                (dist.broadcast(x, src=0) if rank == 1 else dist.all_reduce(x))
            elif arg == "size":
                dist.all_reduce(cddp.from_numpy(np.ones(1000 + rank, np.float32)))
            else:
                dist.new_group([0, 1] if rank == 0 else list(range(n)))
        out["error"] = "none"
    except Exception as e:  # noqa: BLE001 — the error is what is measured
        out["t_error"] = time.time()
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    with open(os.path.join(d, f"result.{rank}"), "w") as f:
        json.dump(out, f)
    os._exit(0)


def run_ranks(scenario, n, arg="", env=None, timeout=60):
    d = tempfile.mkdtemp(prefix="cddp-faults-")
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("CDDP_TRANSPORT", None)
    e.update(env or {})
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", scenario,
                               str(r), str(n), d, arg], env=e, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for r in range(n)]
    try:
        end = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1, end - time.monotonic()))
        res = []
        for r in range(n):
            try:
                with open(os.path.join(d, f"result.{r}")) as f:
                    res.append(json.load(f))
            except FileNotFoundError:
                res.append(None)
        files = {f: open(os.path.join(d, f)).read() for f in os.listdir(d) if f.startswith("t_")}
        return res, files
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            p.stderr.close()
        shutil.rmtree(d, ignore_errors=True)


def ms(x):
    """Seconds as a short reading: '< 0.01 ms', '0.28 ms', '8.1 ms', '164 ms', '12.0 s'."""
    if x < 1e-5:
        return "< 0.01 ms"
    if x < 10:
        return f"{x * 1e3:.{2 if x < 1e-3 else 1 if x < 1e-2 else 0}f} ms"
    return f"{x:.1f} s"


def spread(xs):
    xs = sorted(xs)
    return f"{ms(xs[len(xs) // 2])} (max {ms(xs[-1])})" if xs else "n/a"


def pg_rows(reps):
    rows = []
    for name, env in (("shm", {}), ("tcp", {"CDDP_TRANSPORT": "tcp"})):
        lat = []
        for _ in range(reps):
            res, files = run_ranks("dead", 3, env=env)
            t = float(files["t_event"])
            lat += [r["t_error"] - t for r in (res[0], res[2]) if r and "t_error" in r]
        rows.append((f"dead rank (SIGKILL mid-collective), {name}, 3 ranks",
                     f"{spread(lat)} to the survivors' DistBackendError naming the rank"))
    for name, env in (("shm", {}), ("tcp", {"CDDP_TRANSPORT": "tcp"})):
        res, files = run_ranks("stuck", 2, env=env)
        t = res[0]["t_error"] - float(files["t_event"]) if res[0] and "t_error" in res[0] else None
        rows.append((f"stuck rank (alive, never calls), {name}, timeout 1 s",
                     f"{ms(t) if t else 'no error'} to DistTimeoutError on the waiting rank"))
    for arg, what in (("op", "all_reduce vs broadcast"), ("size", "1000 vs 1001 elements"),
                      ("members", "new_group([0, 1]) vs new_group([0, 1, 2])")):
        lat, msgs = [], set()
        for _ in range(reps):
            res, files = run_ranks("mismatch", 3, arg)
            last = max(float(v) for k, v in files.items() if k.startswith("t_call"))
            lat += [r["t_error"] - last for r in res if r and "t_error" in r]
            msgs |= {r["error"].split(":")[0] for r in res if r}
        rows.append((f"mismatch: {what}, 3 ranks",
                     f"{spread(lat)} from the last call to {'/'.join(sorted(msgs))} on "
                     f"{len([r for r in res if r and 't_error' in r])} of 3 ranks"))
    return rows


# ---- checkpoints ------------------------------------------------------------------------------

SAVER = """
import sys, time
sys.path.insert(0, {root!r})
lib = {lib!r}
if lib == "torch":
    import torch as m
    big = {{"w%d" % i: m.ones({elems} // 8) for i in range(8)}}
else:
    import cddp as m
    import cddp.serialization
    cddp.serialization._USE_O_TMPFILE = lib == "cddp"     # "cddp-named": the fallback
    big = {{"w%d" % i: m.ones({elems} // 8) for i in range(8)}}
print("ready", flush=True)
while True:
    m.save(big, {target!r})
"""


def save_rows(kills, mb):
    import random
    import cddp
    rows = []
    rng = random.Random(0)
    libs = ["cddp", "cddp-named"]
    try:
        import torch  # noqa: F401
        libs.append("torch")
    except ImportError:
        pass
    for lib in libs:
        d = tempfile.mkdtemp(prefix="cddp-faults-save-")
        target = os.path.join(d, "ck.pt")
        try:
            intact, left = 0, 0
            code = SAVER.format(root=ROOT, lib=lib, elems=mb << 18, target=target)
            for _ in range(kills):
                p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
                p.stdout.readline()
                time.sleep(rng.uniform(0.05, 1.0))
                p.kill()
                p.wait()
                p.stdout.close()
                try:
                    if lib == "torch":
                        import torch
                        torch.load(target, weights_only=True)
                    else:
                        cddp.load(target)
                    intact += 1
                except FileNotFoundError:
                    intact += 1                 # nothing written yet: nothing damaged
                except Exception:  # noqa: BLE001 — a damaged target is what is counted
                    pass
                left = max(left, len([f for f in os.listdir(d) if f != "ck.pt"]))
            after = "n/a"
            if lib != "torch":
                cddp.save({"x": 1}, target)
                after = str(len([f for f in os.listdir(d) if f != "ck.pt"]))
            how = {"cddp": "cddp.save (O_TMPFILE)",
                   "cddp-named": "cddp.save (no O_TMPFILE: named temporaries)"}.get(lib, "torch.save")
            rows.append((f"kill mid-save, {how} of {mb} MB, {kills} kills",
                         f"target loadable {intact}/{kills}; most temporaries beside it "
                         f"after a kill: {left}; after the next save: {after}"))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return rows


def forged_rows():
    import cddp
    from cddp.serialization import CheckpointError
    sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", "checkpoint")
    kinds = {}
    for f in sorted(os.listdir(corpus)):
        try:
            cddp.load(os.path.join(corpus, f))
            kinds["loaded"] = kinds.get("loaded", 0) + 1
        except CheckpointError:
            kinds["CheckpointError"] = kinds.get("CheckpointError", 0) + 1
        except Exception as e:  # noqa: BLE001 — counted: must stay 0
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
    t0 = time.perf_counter()
    try:
        cddp.load("/dev/zero")
    except CheckpointError:
        pass
    return [("forged / corrupt checkpoint files (the fuzz corpus)",
             ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))),
            ("cddp.load('/dev/zero')", f"CheckpointError after {ms(time.perf_counter() - t0)}")]


# ---- store ------------------------------------------------------------------------------------

STORE_SERVER = """
import sys, os, time, json, datetime, resource
sys.path.insert(0, {root!r})
from cddp.distributed import TCPStore
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
m = TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30))
print(m.port, flush=True)
sys.stdin.readline()
time.sleep(0.5)
try:
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(40)]
    ok = "yes"
except OSError as e:
    ok = str(e)
print(json.dumps([ok] + list(m._server.server.stats())), flush=True)
m.wait(["legit"], datetime.timedelta(seconds=30))
"""


def store_rows():
    import datetime
    from cddp.distributed import TCPStore
    rows = []
    p = subprocess.Popen([sys.executable, "-c", STORE_SERVER.format(root=ROOT)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    bare = []
    try:
        port = int(p.stdout.readline())
        bare = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        p.stdin.write("go\n")
        p.stdin.flush()
        opened, clients, dropped, evicted = json.loads(p.stdout.readline())
        t0 = time.perf_counter()
        c = TCPStore("127.0.0.1", port, timeout=datetime.timedelta(seconds=30))
        c.set("legit", "1")
        wait = time.perf_counter() - t0
        rows.append(("store: 200 bare connections, server limited to 128 fds",
                     f"kept {clients - 1} (cap 128/4), closed {evicted}; the process's own "
                     f"open() works: {opened}; a legitimate client served in {ms(wait)}"))
    finally:
        for b in bare:
            b.close()
        p.kill()
        p.wait()
    m = TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=5))
    refused = []
    for what, data in (("a frame before HELLO", struct.pack("<IB", 1, 9)),
                       ("a HELLO over 1040 bytes", struct.pack("<IB", 5000, 1)),
                       ("a frame length of 0", struct.pack("<I", 0)),
                       ("a frame over 128 MiB", struct.pack("<IB", 9, 1) +
                        struct.pack("<II", 0x54534443, 1) + struct.pack("<IB", 1 << 30, 2))):
        with socket.create_connection(("127.0.0.1", m.port), timeout=5) as s:
            s.sendall(data)
            t0 = time.perf_counter()
            try:
                while s.recv(4096):
                    pass
                refused.append(f"{what}: closed in {ms(time.perf_counter() - t0)}")
            except ConnectionResetError:
                refused.append(f"{what}: reset in {ms(time.perf_counter() - t0)}")
            except OSError:
                refused.append(f"{what}: NOT closed within 5 s")
    rows.append(("store: protocol violations (each closes only that client)", "; ".join(refused)))
    rows.append(("store: a client without HELLO", "closed after 10 s, or when 1/4 of the fd "
                 "limit wait for HELLO (oldest first)"))
    return rows


# ---- DataLoader -------------------------------------------------------------------------------

class _DS:
    def __init__(self, d, at=None, hang=None):
        self.d, self.at, self.hang = d, at, hang

    def __len__(self):
        return 64

    def __getitem__(self, i):
        import cddp
        if i == self.at:
            with open(os.path.join(self.d, "died"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        if i == self.hang:
            time.sleep(60)
        return cddp.tensor([float(i)])


def loader_rows():
    from cddp.utils.data import DataLoader
    d = tempfile.mkdtemp(prefix="cddp-faults-dl-")
    try:
        try:
            list(DataLoader(_DS(d, at=9), batch_size=2, num_workers=2))
        except RuntimeError:
            t = time.time() - float(open(os.path.join(d, "died")).read())
        it = iter(DataLoader(_DS(d, hang=8), batch_size=2, num_workers=2))
        next(it)
        next(it)
        t0 = time.perf_counter()
        it.shutdown()
        sd = time.perf_counter() - t0
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return [("DataLoader: a worker SIGKILLed", f"RuntimeError naming its pid and signal "
             f"{ms(t)} after the kill (the other workers' shutdown included)"), ("DataLoader: leaving the loop with a hung worker",
                           f"shutdown in {ms(sd)} (the hung worker is terminated)")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", nargs=5, metavar=("SCENARIO", "RANK", "N", "DIR", "ARG"))
    a = ap.parse_args()
    if a.worker:
        scenario, rank, n, d, arg = a.worker
        return worker(scenario, int(rank), int(n), d, arg)
    reps = 1 if a.quick else 3
    rows = []
    for part in (lambda: pg_rows(reps),
                 lambda: save_rows(3 if a.quick else 10, 16 if a.quick else 200),
                 forged_rows, store_rows, loader_rows):
        rows += part()
    print(f"\n## cddp faults ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)\n")
    print("| fault | what happens |\n| --- | --- |")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
