"""bench/_timing.py — what the single-thread comparison scripts share (bench/linalg_grid.py,
bench/spatial3d.py): one thread for every library, imported before NumPy so the BLAS pools
start with one thread; the repo root on sys.path; timeit's per-call time as the median of 7
repeats; times printed in ms or µs."""
import os
import statistics
import sys
import timeit

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_call(fn):
    t = timeit.Timer(fn)
    n, _ = t.autorange()
    return statistics.median(t.repeat(7, n)) / n


def fmt(s):
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.2f} µs"
