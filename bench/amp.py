#!/usr/bin/env python
"""bench/amp.py — mixed precision: GradScaler's unscale_ + inf/NaN check over all gradients
against memory bandwidth, torch's kernel and NumPy; autocast's per-call cost.

    python bench/amp.py            # full run (a minute or so on 2 cores)
    python bench/amp.py --quick    # smoke run: small sizes, few repeats
    python bench/amp.py --no-torch # NumPy as the only reference

Rows:
  unscale_   _C._amp_foreach_non_finite_check_and_unscale_ over a GPT-like list of grads (N
             tensors, total MiB given), float32 and bfloat16. Bandwidth = bytes read + bytes
             written per second. References, same bytes: memcpy (np.copyto, read+write: the
             machine's bandwidth for this access pattern), NumPy's two passes (isfinite().all()
             then multiply in place), torch._amp_foreach_non_finite_check_and_unscale_.
             Target: cddp >= 0.8x memcpy.
  autocast   a (2,2) mm per call outside autocast, inside autocast("cpu") with float32
             inputs (cast + bf16 mm), and torch's same two; entering+leaving a region.
Single thread everywhere (BLAS/OpenMP pinned before NumPy loads; torch.set_num_threads(1)).
Each cell is the median of repeats of timeit's per-call time; compare ratios within one run.
Results are checked first (cddp's unscaled grads equal NumPy's product, found_inf right).
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import glob  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if glob.glob(os.path.join(ROOT, "cddp", "_C*.so")):
    sys.path.insert(0, ROOT)

import cddp  # noqa: E402


def per_call(fn, repeats):
    t = timeit.Timer(fn)
    number, _ = t.autorange()
    return statistics.median(t.repeat(repeat=repeats, number=number)) / number


def grad_arrays(total_mib, count, rng):
    per = max(1, int(total_mib * 2**20 / 4 / count))
    return [rng.standard_normal(per).astype(np.float32) for _ in range(count)]


def unscale_rows(args, torch):
    rng = np.random.default_rng(0)
    arrays = grad_arrays(args.mib, args.tensors, rng)
    nbytes32 = sum(a.nbytes for a in arrays)
    rows = []
    # memcpy: the same bytes read and written
    src = np.concatenate(arrays)
    dst = np.empty_like(src)
    t_copy = per_call(lambda: np.copyto(dst, src), args.repeats)
    rows.append(("memcpy (np.copyto)", "float32", 2 * nbytes32 / t_copy, 1.0))
    bw_copy = 2 * nbytes32 / t_copy
    inv = 1.0  # keeps values stable across repeats; the kernel's work does not depend on it
    for dname in ("float32", "bfloat16"):
        dt = getattr(cddp, dname)
        grads = [cddp.from_numpy(a.copy()).to(dt) for a in arrays]
        nbytes = sum(g.numel() * g.element_size() for g in grads)
        found = cddp.zeros((), dtype=cddp.float32)
        inv_t = cddp.full((), inv)
        # check once: a value, and a planted inf
        probe = [cddp.from_numpy(arrays[0][:64].copy())]
        probe[0][3] = float("inf")
        cddp._C._amp_foreach_non_finite_check_and_unscale_(probe, found, cddp.full((), 0.5))
        assert found.item() == 1.0 and probe[0][0].item() == arrays[0][0] * np.float32(0.5)
        found.zero_()
        unscale = cddp._C._amp_foreach_non_finite_check_and_unscale_
        t = per_call(lambda: unscale(grads, found, inv_t), args.repeats)
        assert found.item() == 0.0
        rows.append((f"cddp unscale_ ({args.tensors} tensors)", dname, 2 * nbytes / t,
                     2 * nbytes / t / bw_copy))
        if torch is not None:
            tg = [torch.from_numpy(a.copy()).to(getattr(torch, dname)) for a in arrays]
            tf = torch.zeros((), dtype=torch.float32)
            ti = torch.full((), inv)
            tt = per_call(lambda: torch._amp_foreach_non_finite_check_and_unscale_(tg, tf, ti),
                          args.repeats)
            rows.append(("torch _amp_foreach_...unscale_", dname, 2 * nbytes / tt,
                         2 * nbytes / tt / bw_copy))
    na = [a.copy() for a in arrays]
    s32 = np.float32(inv)

    def numpy_pass():
        bad = not all(np.isfinite(a).all() for a in na)
        for a in na:
            np.multiply(a, s32, out=a)
        return bad
    tn = per_call(numpy_pass, args.repeats)
    ti = per_call(lambda: [np.multiply(a, s32, out=a) for a in na], args.repeats)
    rows.append(("NumPy in-place multiply (1 pass)", "float32", 2 * nbytes32 / ti,
                 2 * nbytes32 / ti / bw_copy))
    rows.append(("NumPy isfinite + multiply", "float32", 2 * nbytes32 / tn,
                 2 * nbytes32 / tn / bw_copy))
    return rows, nbytes32


def autocast_rows(args, torch):
    rows = []
    a = cddp.randn(2, 2)
    t_off = per_call(lambda: cddp.mm(a, a), args.repeats)

    def on():
        with cddp.autocast("cpu"):
            return cddp.mm(a, a)
    ac = cddp.autocast("cpu")
    with ac:
        t_in = per_call(lambda: cddp.mm(a, a), args.repeats)
    t_region = per_call(on, args.repeats)
    rows += [("cddp mm (2,2), autocast off", t_off), ("cddp mm (2,2), inside autocast", t_in),
             ("cddp enter+mm+exit", t_region)]
    if torch is not None:
        b = torch.randn(2, 2)
        rows.append(("torch mm (2,2), autocast off",
                     per_call(lambda: torch.mm(b, b), args.repeats)))
        with torch.autocast("cpu"):
            rows.append(("torch mm (2,2), inside autocast",
                         per_call(lambda: torch.mm(b, b), args.repeats)))

        def ton():
            with torch.autocast("cpu"):
                return torch.mm(b, b)
        rows.append(("torch enter+mm+exit", per_call(ton, args.repeats)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--mib", type=float, default=256.0, help="total float32 gradient MiB")
    ap.add_argument("--tensors", type=int, default=50)
    args = ap.parse_args()
    args.repeats = 3 if args.quick else 7
    if args.quick:
        args.mib = min(args.mib, 8.0)
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(1)
        except ImportError:
            torch = None
    rows, nbytes = unscale_rows(args, torch)
    print(f"GradScaler unscale_ + inf check, {nbytes / 2**20:.0f} MiB of float32 grads "
          f"(bfloat16 rows: half the bytes), 1 thread")
    print(f"| {'row':<36} | {'dtype':<8} | {'GB/s':>6} | {'x memcpy':>8} |")
    print(f"|{'-' * 38}|{'-' * 10}|{'-' * 8}|{'-' * 10}|")
    for name, dt, bw, ratio in rows:
        print(f"| {name:<36} | {dt:<8} | {bw / 1e9:6.2f} | {ratio:8.2f} |")
    print()
    print("autocast per-call cost (µs)")
    print(f"| {'row':<36} | {'µs':>7} |")
    print(f"|{'-' * 38}|{'-' * 9}|")
    for name, t in autocast_rows(args, torch):
        print(f"| {name:<36} | {t * 1e6:7.2f} |")


if __name__ == "__main__":
    main()
