#!/usr/bin/env python
"""bench/ops.py — per-op latency and throughput of cddp beside torch (1 thread) and NumPy.

    python bench/ops.py            # full run, a few minutes at most on 2 cores
    python bench/ops.py --quick    # smoke run: small sizes, few repeats (tests run this)
    python bench/ops.py --no-torch # NumPy as the only reference

Rows: the per-call overhead on tiny tensors (4-element add; a (32,20)@(20,1) matmul forward +
backward — the step of the seeds' Linear(20, 1) model) and the throughput on large ones
(1024x1024 float32 matmul; 16M-element float32 add, mul, in-place add, clone; a 16M-element
float16 add). Each cell is the median over repeats of
timeit's per-call time (autorange picks the loop count); ratios are taken within this one run,
so on a noisy machine compare the ratios, not the absolute times of two runs. Every library
runs single-threaded (BLAS thread variables are pinned below before NumPy loads;
torch.set_num_threads(1); cddp.set_num_threads(1) when cddp has it). Before timing, each
library's result is checked against NumPy's, so a fast wrong kernel fails loudly.

A cddp op that raises NotImplementedError is shown as "n/i" and listed at the end (the exit
status stays 0); any other error, or a wrong result, exits non-zero.
"""
import os

# Before NumPy / torch load their BLAS and OpenMP runtimes: the comparison is one thread each.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
for _v in THREAD_VARS:
    os.environ[_v] = "1"

import argparse  # noqa: E402
import glob  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Same rule as the test suite (./conftest.py): an in-place build of this checkout wins,
# otherwise the installed package is measured.
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)

import cddp  # noqa: E402


class NotImplementedOp(Exception):
    """cddp raised NotImplementedError for this row."""


# ---- the rows ------------------------------------------------------------------------------
# Each row builds, per library, a zero-argument callable (what is timed) and a `result`
# function turning its return value into a NumPy array for the check against `expect`.

def _arr(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def row_add(n, label, kind, dtype=np.float32):
    def make(lib, rng):
        a, b = _arr(rng, n).astype(dtype), _arr(rng, n).astype(dtype)
        expect = a + b
        if lib == "numpy":
            return (lambda: a + b), np.asarray, expect
        T = LIBS[lib]
        x, y = T.from_numpy(a.copy()), T.from_numpy(b.copy())
        return (lambda: x + y), to_numpy, expect
    return dict(name="add  a + b", shape=label, kind=kind, make=make,
                work=(3 * np.dtype(dtype).itemsize * n, "GB/s"))  # read a, read b, write out


# Large elementwise rows beside the add: (name, NumPy call, cddp/torch call, arrays read +
# written). The in-place add writes into its first operand (NumPy: out=a), so no fresh output
# block is involved: against the out-of-place add it separates the kernel from the allocation.
EW_ROWS = [("mul  a * b", lambda a, b: a * b, lambda x, y: x * y, 3),
           ("add_  a += b (in place)", lambda a, b: np.add(a, b, out=a), lambda x, y: x.add_(y), 3),
           ("clone  a.copy()", lambda a, b: a.copy(), lambda x, y: x.clone(), 2)]


def row_ew(spec, n, label):
    name, np_fn, t_fn, arrays = spec

    def make(lib, rng):
        a, b = _arr(rng, n), _arr(rng, n)
        expect = np_fn(a.copy(), b)
        if lib == "numpy":
            return (lambda: np_fn(a, b)), np.asarray, expect
        T = LIBS[lib]
        x, y = T.from_numpy(a.copy()), T.from_numpy(b.copy())
        return (lambda: t_fn(x, y)), to_numpy, expect
    return dict(name=name, shape=label, kind="throughput", make=make, work=(arrays * 4 * n, "GB/s"))


def row_matmul(m, k, n, label, kind, backward=False):
    def make(lib, rng):
        a, b = _arr(rng, m, k), _arr(rng, k, n)
        if backward:
            # d(sum(a @ b))/db = a.T @ ones(m, n): the gradient is what is checked
            expect = a.T @ np.ones((m, n), np.float32)
            if lib == "numpy":
                def step():
                    y = a @ b
                    y.sum()
                    return a.T @ np.ones_like(y)
                return step, np.asarray, expect
            T = LIBS[lib]
            x, w = T.from_numpy(a.copy()), T.from_numpy(b.copy()).requires_grad_(True)

            def step():
                w.grad = None
                (x @ w).sum().backward()
                return w.grad
            return step, to_numpy, expect
        expect = a @ b
        if lib == "numpy":
            return (lambda: a @ b), np.asarray, expect
        T = LIBS[lib]
        x, y = T.from_numpy(a.copy()), T.from_numpy(b.copy())
        return (lambda: x @ y), to_numpy, expect
    name = "matmul  (x @ w).sum().backward()" if backward else "matmul  a @ b"
    return dict(name=name, shape=label, kind=kind, make=make,
                work=None if backward else (2 * m * k * n, "GFLOP/s"))


def rows(quick):
    big = 256 if quick else 1024
    nadd = (1 << 20) if quick else (1 << 24)
    return [
        row_add(4, "4 float32", "latency"),
        row_matmul(32, 20, 1, "(32,20)@(20,1) fwd+bwd", "latency", backward=True),
        row_matmul(big, big, big, f"({big},{big})@({big},{big})", "throughput"),
        row_add(nadd, f"{nadd >> 20}M float32", "throughput"),
        # float16: the elementwise runner's narrow path (blocks widened to float32 and back)
        row_add(nadd, f"{nadd >> 20}M float16", "throughput", np.float16),
    ] + [row_ew(spec, nadd, f"{nadd >> 20}M float32") for spec in EW_ROWS]


def to_numpy(x):
    return np.array(x.detach().numpy(), copy=True)


# ---- timing --------------------------------------------------------------------------------

def per_call_seconds(fn, quick):
    """Median per-call time of fn(): timeit's autorange picks the loop count (about 0.2 s per
    measurement, 0.02 s with --quick), then the median over repeats."""
    timer = timeit.Timer(fn)
    if quick:
        number = 1
        while timer.timeit(number) < 0.02 and number < 1 << 20:
            number *= 4
        repeats = 3
    else:
        number, _ = timer.autorange()
        repeats = 7
    return statistics.median(t / number for t in timer.repeat(repeats, number))


def measure(row, lib, quick):
    """Seconds per call of `row` in `lib`; raises NotImplementedOp for a cddp stub, and
    RuntimeError when the library computes something other than NumPy's result."""
    rng = np.random.default_rng(0)
    try:
        fn, result, expect = row["make"](lib, rng)
        got = result(fn())
    except NotImplementedError as e:
        if lib != "cddp":
            raise
        raise NotImplementedOp(str(e)) from None
    tol = 1e-3 if expect.size > 1000 else 1e-4   # float32 sums over 1024 terms round more
    if got.shape != expect.shape or not np.allclose(got, expect, rtol=tol, atol=tol):
        raise RuntimeError(f"{lib}: {row['name']} {row['shape']} gives a wrong result")
    return per_call_seconds(fn, quick)


def import_seconds(module, runs, env):
    """Median time of `import module` in fresh interpreters (the import alone, without the
    interpreter's own start-up)."""
    code = ("import time; t = time.perf_counter(); import %s; "
            "print(time.perf_counter() - t)" % module)
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


# ---- formatting ----------------------------------------------------------------------------

def fmt_time(s):
    if s < 1e-3:
        return f"{s * 1e6:.2f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_cell(row, s):
    if isinstance(s, str):
        return s
    if row["kind"] == "throughput" and row["work"]:
        amount, unit = row["work"]
        return f"{fmt_time(s)} ({amount / s / 1e9:.1f} {unit})"
    return fmt_time(s)


def fmt_ratio(a, b):
    return f"{a / b:.2f}x" if isinstance(a, float) and isinstance(b, float) else "—"


def table(header, body):
    widths = [max(len(str(r[i])) for r in [header] + body) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in body])


# ---- main ----------------------------------------------------------------------------------

LIBS = {"cddp": cddp}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes, few repeats")
    ap.add_argument("--no-torch", action="store_true", help="do not compare with torch")
    args = ap.parse_args(argv)

    if hasattr(cddp, "set_num_threads"):
        cddp.set_num_threads(1)
    libs = ["cddp"]
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(1)
            LIBS["torch"] = torch
            libs.append("torch")
        except ImportError:
            print("torch is not importable: NumPy is the only reference\n")
    libs.append("numpy")

    print(f"# cddp op benchmark{' (--quick: smoke sizes, not for the record)' if args.quick else ''}")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus; "
          f"numpy {np.__version__}" + (f"; torch {LIBS['torch'].__version__}" if "torch" in LIBS else "")
          + f"; cddp {getattr(cddp, '__version__', '?')} from {os.path.dirname(cddp.__file__)}")
    print("one thread each; cell = median time per call; ratio = cddp time / other time "
          "(< 1: cddp is faster)\n")

    missing = []
    body = []
    for row in rows(args.quick):
        cells = {}
        for lib in libs:
            try:
                cells[lib] = measure(row, lib, args.quick)
            except NotImplementedOp as e:
                cells[lib] = "n/i"
                missing.append(f"{row['name']} {row['shape']}: {e}")
        r = [row["name"], row["shape"]] + [fmt_cell(row, cells[lib]) for lib in libs]
        if "torch" in cells:
            r.append(fmt_ratio(cells["cddp"], cells["torch"]))
        r.append(fmt_ratio(cells["cddp"], cells["numpy"]))
        body.append(r)
    header = ["op", "shape"] + libs + (["cddp/torch"] if "torch" in libs else []) + ["cddp/numpy"]
    print(table(header, body))

    # import cost, each in fresh interpreters that import the same cddp as this process
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(cddp.__file__)))]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    runs = 1 if args.quick else 5
    imp = {m: import_seconds(m, runs, env) for m in ["cddp"] + (["torch"] if "torch" in libs else []) + ["numpy"]}
    print()
    ihead = ["import (fresh interpreter, median of %d)" % runs] + list(imp) \
        + (["cddp/torch"] if "torch" in imp else [])
    ibody = [["time"] + [fmt_time(s) for s in imp.values()]
             + ([fmt_ratio(imp["cddp"], imp["torch"])] if "torch" in imp else [])]
    print(table(ihead, ibody))

    if missing:
        print("\nNOT IMPLEMENTED in cddp (shown as n/i):")
        for m in missing:
            print("  " + m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
