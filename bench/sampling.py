#!/usr/bin/env python
"""bench/sampling.py — the rejection samplers (ops/random/rejection.c: torch's gamma, Dirichlet,
Poisson and binomial samplers draw for draw) in cddp beside torch, one thread each.

    python bench/sampling.py            # 200k draws per row
    python bench/sampling.py --quick    # 20k

Each row seeds both libraries alike and first checks that cddp's draws equal torch's (the
point of the kernels), then times one call (median of 7 repeats, bench/_timing.py). Without
torch the cddp column is printed alone.
"""
import sys

from _timing import fmt, per_call

import cddp


def rows(n):
    """(label, fn(T) -> draws) for a library T (cddp or torch)."""
    conc = [0.3, 2.0, 40.0]
    return [
        (f"Gamma(0.3 | 2 | 40).sample, {n} draws",
         lambda T: T.distributions.Gamma(T.tensor(conc), 1.0).sample((n // 3,))),
        (f"Dirichlet([0.5, 1, 2]).sample, {n} draws",
         lambda T: T.distributions.Dirichlet(T.tensor([0.5, 1.0, 2.0])).sample((n // 3,))),
        (f"Beta(2, 3).sample, {n} draws",
         lambda T: T.distributions.Beta(T.tensor(2.0), T.tensor(3.0)).sample((n,))),
        (f"poisson(rate 0..40), {n} draws",
         lambda T: T.poisson(T.linspace(0, 40, n))),
        (f"binomial(count 0..200, p 0.3), {n} draws",
         lambda T: T.binomial(T.linspace(0, 200, n).floor(), T.full((n,), 0.3))),
    ]


def main(argv):
    n = 20000 if "--quick" in argv else 200000
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print(f"{'draws':44s} {'cddp':>10s} {'torch':>10s} {'cddp/torch':>10s}  same draws")
    for label, fn in rows(n):
        cddp.manual_seed(0)
        mine = fn(cddp).numpy()
        same = "n/a"
        if torch is not None:
            torch.manual_seed(0)
            same = "yes" if (fn(torch).numpy() == mine).all() else "NO"
        tc = per_call(lambda: fn(cddp))
        tt = per_call(lambda: fn(torch)) if torch is not None else None
        ratio = f"{tc / tt:.2f}x" if tt else "-"
        print(f"{label:44s} {fmt(tc):>10s} {fmt(tt) if tt else '-':>10s} {ratio:>10s}  {same}")


if __name__ == "__main__":
    main(sys.argv[1:])
