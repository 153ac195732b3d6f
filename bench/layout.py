#!/usr/bin/env python
"""bench/layout.py — ops on permuted and channels-last tensors (core/layout.c: results laid out
as their inputs, torch's TensorIterator rule) in cddp beside torch, one thread each.

    python bench/layout.py            # 4M-element tensors
    python bench/layout.py --quick    # 256k

Each row first checks that cddp's result has torch's strides and values, then times one call
(median of 7 repeats, bench/_timing.py). The small rows show what computing the layout costs
an op on a few elements. Without torch the cddp column is printed alone.
"""
import sys

import numpy as np
from _timing import fmt, per_call

import cddp


def rows(n):
    """(label, make(T) -> operands, op(T, *operands) -> result) for a library T."""
    side = int(round((n // 64) ** 0.5))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, side, side)).astype(np.float32)
    b = rng.standard_normal((64, side, side)).astype(np.float32)
    img = rng.standard_normal((8, side // 4, side // 4, 64)).astype(np.float32)   # NHWC
    small = rng.standard_normal((4, 5)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    t = lambda T, x: T.from_numpy(x)                                               # noqa: E731
    return [
        (f"add, contiguous, {a.size} floats", lambda T: (t(T, a), t(T, b)),
         lambda T, x, y: x + y),
        (f"add, both transposed, {a.size} floats",
         lambda T: (t(T, a).transpose(1, 2), t(T, b).transpose(1, 2)), lambda T, x, y: x + y),
        (f"add, transposed + contiguous, {a.size} floats",
         lambda T: (t(T, a).transpose(1, 2), t(T, b)), lambda T, x, y: x + y),
        (f"exp, transposed, {a.size} floats", lambda T: (t(T, a).transpose(1, 2),),
         lambda T, x: x.exp()),
        (f"clone, transposed, {a.size} floats", lambda T: (t(T, a).transpose(1, 2),),
         lambda T, x: x.clone()),
        (f"to(float64), transposed, {a.size} floats", lambda T: (t(T, a).transpose(1, 2),),
         lambda T, x: x.double()),
        (f"conv2d 3x3, channels-last in, {img.size} floats",
         lambda T: (t(T, img).permute(0, 3, 1, 2), t(T, w)),
         lambda T, x, w: T.nn.functional.conv2d(x, w, padding=1)),
        ("add, 4x5 contiguous", lambda T: (t(T, small), t(T, small)), lambda T, x, y: x + y),
        ("add, 4x5 transposed", lambda T: (t(T, small).t(), t(T, small).t()),
         lambda T, x, y: x + y),
        ("mul scalar, 4x5 transposed", lambda T: (t(T, small).t(),), lambda T, x: x * 2.0),
    ]


def main(argv):
    n = (1 << 18) if "--quick" in argv else (1 << 22)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print(f"{'op':48s} {'cddp':>10s} {'torch':>10s} {'cddp/torch':>10s}  same layout")
    for label, make, op in rows(n):
        mine_args = make(cddp)
        mine = op(cddp, *mine_args)
        same, tt = "n/a", None
        if torch is not None:
            theirs_args = make(torch)
            theirs = op(torch, *theirs_args)
            ok = mine.stride() == theirs.stride() and np.allclose(
                mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-4)
            same = "yes" if ok else f"NO {mine.stride()} vs {theirs.stride()}"
            tt = per_call(lambda: op(torch, *theirs_args))
        tc = per_call(lambda: op(cddp, *mine_args))
        ratio = f"{tc / tt:.2f}x" if tt else "-"
        print(f"{label:48s} {fmt(tc):>10s} {fmt(tt) if tt else '-':>10s} {ratio:>10s}  {same}")


if __name__ == "__main__":
    main(sys.argv[1:])
