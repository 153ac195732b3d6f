#!/usr/bin/env python
"""bench/ops_extra.py — the model-code ops (the GEMMs of ResNet-18's convolutions, einsum, the
addmm family, cumprod, unique, repeat, roll, tril, K-dim and LM-head cross_entropy) in cddp beside torch
(1 thread) and NumPy.

    python bench/ops_extra.py            # full sizes
    python bench/ops_extra.py --quick    # smoke sizes, few repeats
    python bench/ops_extra.py --no-torch

Same rules as bench/ops.py (whose timing, checking and table code this reuses): one thread
per library, median per-call time, every library's result checked against NumPy's first.
The einsum rows are the point of the file: cddp plans einsum in C and runs each contraction
as one bmm (a BLAS GEMM per batch), so its GFLOP/s should sit near torch's. The "matmul
(conv ...)" rows are the weight @ columns products cddp's conv engine runs for ResNet-18 at
batch 64 (M = output channels, K = input channels x 9, N = a block of output pixels): on an
AVX-512 CPU they take cddp's own float32 kernel (ops/linalg/sgemm_avx512.c), NumPy's column
is OpenBLAS with whatever kernel OPENBLAS_CORETYPE lets it pick.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops as base  # noqa: E402  (sets the thread variables before NumPy loads)

np = base.np
cddp = base.cddp


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def row(name, label, kind, setup, work=None):
    """setup(rng) -> (arrays, numpy_fn, lib_fn(T, *tensors)); numpy_fn gives the expected
    result and is what the numpy column times."""
    def make(lib, rng):
        arrays, np_fn, lib_fn = setup(rng)
        expect = np.asarray(np_fn(*arrays))
        if lib == "numpy":
            return (lambda: np_fn(*arrays)), np.asarray, expect
        T = base.LIBS[lib]
        ts = [T.from_numpy(a.copy()) for a in arrays]
        return (lambda: lib_fn(T, *ts)), base.to_numpy, expect
    return dict(name=name, shape=label, kind=kind, make=make, work=work)


def ce_kdim_np(x, y):
    m = x.max(1, keepdims=True)
    lp = x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
    return -np.take_along_axis(lp, y[:, None], 1).mean()


def ce_rows_np(x, y):
    m = x.max(1, keepdims=True)
    lp = x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
    return -lp[np.arange(len(y)), y].mean()


def rows(quick):
    b, s = (4, 64) if quick else (16, 128)
    n = 256 if quick else 1024
    big = (1 << 16) if quick else (1 << 20)
    conv = [(64, 576, 1024, "layer1 3x3"), (128, 1152, 256, "layer2 3x3"),
            (256, 2304, 256, "layer3 3x3"), (512, 4608, 64, "layer4 3x3")]
    if quick:
        conv = conv[:1]
    return [
        row(f"matmul  (conv {name})", f"({m},{k})@({k},{nn})", "throughput",
            lambda r, m=m, k=k, nn=nn: ([_f32(r, m, k), _f32(r, k, nn)], lambda x, y: x @ y,
                                        lambda T, x, y: x @ y),
            work=(2 * m * k * nn, "GFLOP/s"))
        for m, k, nn, name in conv
    ] + [
        row("einsum  bij,bjk->bik", f"({b},{s},64)x({b},64,{s})", "throughput",
            lambda r: ([_f32(r, b, s, 64), _f32(r, b, 64, s)],
                       lambda x, y: np.matmul(x, y),
                       lambda T, x, y: T.einsum("bij,bjk->bik", x, y)),
            work=(2 * b * s * 64 * s, "GFLOP/s")),
        row("einsum  bhqd,bhkd->bhqk", f"(2,8,{s},64)x(2,8,{s},64)", "throughput",
            lambda r: ([_f32(r, 2, 8, s, 64), _f32(r, 2, 8, s, 64)],
                       lambda q, k: np.matmul(q, np.swapaxes(k, -1, -2)),
                       lambda T, q, k: T.einsum("bhqd,bhkd->bhqk", q, k)),
            work=(2 * 16 * s * 64 * s, "GFLOP/s")),
        row("einsum  ij,jk->ik", f"({n},{n})x({n},{n})", "throughput",
            lambda r: ([_f32(r, n, n), _f32(r, n, n)], lambda x, y: x @ y,
                       lambda T, x, y: T.einsum("ij,jk->ik", x, y)),
            work=(2 * n ** 3, "GFLOP/s")),
        row("einsum  i,i-> (dot)", "(8,)", "latency",
            lambda r: ([_f32(r, 8), _f32(r, 8)], lambda x, y: np.dot(x, y),
                       lambda T, x, y: T.einsum("i,i->", x, y))),
        row("baddbmm", f"({b},{s},64)x({b},64,{s})", "throughput",
            lambda r: ([_f32(r, b, s, s), _f32(r, b, s, 64), _f32(r, b, 64, s)],
                       lambda i, x, y: 0.5 * i + np.matmul(x, y),
                       lambda T, i, x, y: T.baddbmm(i, x, y, beta=0.5)),
            work=(2 * b * s * 64 * s, "GFLOP/s")),
        row("cumprod dim=1", f"({n},{n})", "throughput",
            lambda r: ([1 + 1e-3 * _f32(r, n, n)], lambda x: np.cumprod(x, 1, dtype=np.float64),
                       lambda T, x: T.cumprod(x, 1))),
        row("unique (inverse, counts)", f"{big} int64 in [0, 1000)", "throughput",
            lambda r: ([r.integers(0, 1000, big)],
                       lambda x: np.unique(x, return_counts=True)[1],
                       lambda T, x: T.unique(x, return_inverse=True, return_counts=True)[2])),
        row("repeat(2, 2)", f"({n},{n})", "throughput",
            lambda r: ([_f32(r, n, n)], lambda x: np.tile(x, (2, 2)),
                       lambda T, x: x.repeat(2, 2))),
        row("roll((3, 5), (0, 1))", f"({n},{n})", "throughput",
            lambda r: ([_f32(r, n, n)], lambda x: np.roll(x, (3, 5), (0, 1)),
                       lambda T, x: T.roll(x, (3, 5), (0, 1)))),
        row("tril", f"({n},{n})", "throughput",
            lambda r: ([_f32(r, n, n)], np.tril, lambda T, x: T.tril(x))),
        row("cross_entropy (N,C,H,W)", "(4,21,32,32)" if quick else "(8,21,64,64)", "throughput",
            lambda r: ([_f32(r, *((4, 21, 32, 32) if quick else (8, 21, 64, 64))),
                        r.integers(0, 21, (4, 32, 32) if quick else (8, 64, 64))],
                       ce_kdim_np,
                       lambda T, x, y: T.nn.functional.cross_entropy(x, y))),
        row("cross_entropy LM head", "(16,50257)" if quick else "(128,50257)", "throughput",
            lambda r: ([_f32(r, 16 if quick else 128, 50257),
                        r.integers(0, 50257, 16 if quick else 128)],
                       ce_rows_np,
                       lambda T, x, y: T.nn.functional.cross_entropy(x, y))),
    ]


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    if hasattr(cddp, "set_num_threads"):
        cddp.set_num_threads(1)
    libs = ["cddp"]
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(1)
            base.LIBS["torch"] = torch
            libs.append("torch")
        except ImportError:
            print("torch is not importable: NumPy is the only reference\n")
    libs.append("numpy")
    print("# cddp model-code ops" + (" (--quick: smoke sizes)" if args.quick else ""))
    print("one thread each; cell = median time per call; ratio = cddp time / other time "
          "(< 1: cddp is faster)\n")
    body = []
    for r in rows(args.quick):
        cells = {lib: base.measure(r, lib, args.quick) for lib in libs}
        line = [r["name"], r["shape"]] + [base.fmt_cell(r, cells[lib]) for lib in libs]
        if "torch" in cells:
            line.append(base.fmt_ratio(cells["cddp"], cells["torch"]))
        line.append(base.fmt_ratio(cells["cddp"], cells["numpy"]))
        body.append(line)
    header = ["op", "shape"] + libs + (["cddp/torch"] if "torch" in libs else []) + ["cddp/numpy"]
    print(base.table(header, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
