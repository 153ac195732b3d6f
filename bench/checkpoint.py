#!/usr/bin/env python
"""bench/checkpoint.py — writing and reading checkpoints, cddp beside torch (one process).

    python bench/checkpoint.py            # a 256 MiB state dict (64 tensors of 4 MiB)
    python bench/checkpoint.py --quick    # 16 MiB (a smoke run)

Rows: save(state_dict, path) / load(path) (cddp: safetensors + JSON, atomic; torch: its zip
format), and torch.distributed.checkpoint's save / load into an existing state dict (cddp's
format against torch's, no process group). Each cell is the median of 5 runs, cddp's and
torch's runs interleaved, the page cache warm, the files on the same filesystem (TMPDIR);
"peak +MiB" is how far the operation pushed the process's peak RSS above the peak it had
(the state dict, and for dcp_load the touched target, already in memory); each cell runs in
a fresh child process, so one library's caches do not help the other. The ratio is torch's time over cddp's: > 1 means cddp is faster. Before timing,
what cddp loads is checked against what was saved.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, resource, shutil, sys, time
lib, op, mib, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
T = __import__(lib)
import numpy as np
rng = np.random.default_rng(0)
n = mib * (1 << 20) // 4 // 64                      # 64 float32 tensors
sd = {f"layer{i}.weight": T.tensor(rng.standard_normal(n).astype(np.float32)) for i in range(64)}
if lib == "cddp":
    import cddp.distributed.checkpoint as dcp
else:
    import warnings; warnings.simplefilter("ignore")
    import torch.distributed.checkpoint as dcp
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if op in ("load", "dcp_load"):                       # the file to read, made first
    if op == "load":
        T.save(sd, path)
    else:
        shutil.rmtree(path, ignore_errors=True)
        dcp.save(sd, checkpoint_id=path, no_dist=True) if lib == "torch" else dcp.save(sd, checkpoint_id=path)
before = rss()
t = time.perf_counter()
if op == "save":
    T.save(sd, path)
elif op == "load":
    back = T.load(path, weights_only=True)
elif op == "dcp_save":
    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    dcp.save(sd, checkpoint_id=path, no_dist=True) if lib == "torch" else dcp.save(sd, checkpoint_id=path)
else:
    target = {k: T.zeros_like(v).fill_(1.0) for k, v in sd.items()}   # touched, as a model's
    before, t = rss(), time.perf_counter()
    dcp.load(target, checkpoint_id=path, no_dist=True) if lib == "torch" else dcp.load(target, checkpoint_id=path)
    back = target
elapsed = time.perf_counter() - t
ok = True
if op in ("load", "dcp_load"):
    ok = all(np.array_equal(back[k].numpy(), sd[k].numpy()) for k in sd)
print(json.dumps({"s": elapsed, "rss": rss() - before, "ok": ok}))
"""


def run(lib, op, mib, path):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", CHILD, lib, op, str(mib), path], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{lib} {op} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    mib, reps = (16, 3) if args.quick else (256, 5)
    try:
        import torch  # noqa: F401
        libs = ("cddp", "torch")
    except ImportError:
        libs = ("cddp",)
    print(f"state dict: 64 float32 tensors, {mib} MiB in all; median of {reps} runs; "
          f"TMPDIR={tempfile.gettempdir()}")
    print(f"{'op':>10} | {'cddp':>9} {'peak +MiB':>9} | {'torch':>9} {'peak +MiB':>9} | torch/cddp")
    with tempfile.TemporaryDirectory() as d:
        for op in ("save", "load", "dcp_save", "dcp_load"):
            times = {lib: [] for lib in libs}
            peaks = {lib: [] for lib in libs}
            for _ in range(reps):
                for lib in libs:
                    res = run(lib, op, mib, os.path.join(d, f"{lib}_{op}"))
                    if not res["ok"]:
                        raise SystemExit(f"{lib} {op}: the loaded values differ from the saved")
                    times[lib].append(res["s"])
                    peaks[lib].append(res["rss"] / (1 << 20))
            med = {lib: statistics.median(times[lib]) for lib in libs}
            pk = {lib: statistics.median(peaks[lib]) for lib in libs}
            row = f"{op:>10} | {med['cddp'] * 1e3:7.1f}ms {pk['cddp']:9.0f} |"
            if "torch" in libs:
                row += (f" {med['torch'] * 1e3:7.1f}ms {pk['torch']:9.0f} | "
                        f"{med['torch'] / med['cddp']:.2f}x")
            print(row)


if __name__ == "__main__":
    main()
