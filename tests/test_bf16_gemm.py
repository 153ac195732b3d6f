"""bfloat16 products: matmul / bmm / addmm / einsum, F.linear forward and backward, and bf16
convolutions (conv1d/2d, grouped, strided, 1x1, transposed; forward and backward) against
float64 products of the same bf16 values. On a CPU with AVX512-BF16 these run cddp's own
kernel (ops/linalg/bgemm_avx512.c) — the tests that say so check its call counter, so a
dispatch that silently fell back would fail them; elsewhere the same value checks cover the
float32-copy path.

Tolerance: each result is the float32-accumulated product rounded once to bf16, so it lies
within half a bf16 ulp (2^-8 relative) of the exact product plus the float32 accumulation
error (K * 2^-23 * |a| @ |b|, bounded generously). Dropping, doubling or misplacing one term
of a sum moves results by |a_ik * b_kj| ~ 0.1-1, far outside it.
"""
import subprocess
import sys

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
from conftest import subprocess_env

KERNEL = cddp._C._blas_info()["bgemm_kernel"].startswith("cddp")
needs_kernel = pytest.mark.skipif(not KERNEL, reason="this CPU has no AVX512-BF16: products "
                                  "run on float32 copies (covered by the value tests)")


def bf(a):
    """float32 values rounded to bf16 (nearest even), kept in float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def rnd(rng, *shape, scale=1.0):
    return bf(rng.standard_normal(shape) * scale)


def calls():
    return cddp._C._blas_info()["own_bgemm_calls"]


def close(got, ref, absref):
    """got (bf16 result, as float) against the exact ref, |a| @ |b| in absref."""
    got = np.asarray(got, np.float64)
    k_err = absref * 2.0 ** -16                 # float32 accumulation, generously
    bad = np.abs(got - ref) > 2.0 ** -8 * np.abs(ref) + k_err + 1e-30
    assert not bad.any(), (f"{bad.sum()} of {bad.size} off; worst "
                           f"{np.abs(got - ref)[bad].max():.3g} at ref {ref[bad][0]:.3g}")


def cd(a):
    return cddp.tensor(np.ascontiguousarray(a)).to(cddp.bfloat16)


def view(a, how):
    """a (as bf16) laid out as `how`: "n" row-major, "t" the transpose of a column-major
    copy (unit row stride), "s" every other column of a wider tensor (no unit stride)."""
    if how == "n":
        return cd(a)
    if how == "t":
        return cd(a.T).t()
    wide = np.zeros((a.shape[0], 2 * a.shape[1]), np.float32)
    wide[:, ::2] = a
    return cd(wide)[:, ::2]


SHAPES = [(1, 1, 1), (3, 5, 7), (12, 32, 2), (13, 33, 3), (25, 70, 31), (64, 100, 513),
          (37, 70, 1100), (193, 65, 1025), (200, 4100, 40)]


@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("lay", ["nn", "tn", "nt", "tt", "sn", "ns"])
def test_matmul_values(M, N, K, lay):
    rng = np.random.default_rng(M * 7 + N + K)
    a, b = rnd(rng, M, K), rnd(rng, K, N)
    c0 = calls()
    got = (view(a, lay[0]) @ view(b, lay[1])).float().numpy()
    ran = calls() - c0
    close(got, a.astype(np.float64) @ b, np.abs(a).astype(np.float64) @ np.abs(b))
    if KERNEL:
        assert ran == 1


def test_batched_broadcast_addmm_einsum():
    rng = np.random.default_rng(1)
    a, b = rnd(rng, 3, 1, 20, 33), rnd(rng, 4, 33, 18)
    ref = a.astype(np.float64) @ b
    close((cd(a) @ cd(b)).float().numpy(), ref, np.abs(a).astype(np.float64) @ np.abs(b))
    c, x, y = rnd(rng, 18), rnd(rng, 20, 33), rnd(rng, 33, 18)
    got = cddp.addmm(cd(c), cd(x), cd(y), beta=0.5, alpha=2.0).float().numpy()
    exact = 0.5 * c.astype(np.float64) + 2.0 * (x.astype(np.float64) @ y)
    close(got, exact, 2.0 * np.abs(x).astype(np.float64) @ np.abs(y) + np.abs(c))
    got = cddp.einsum("bij,jk->bik", cd(a[:, 0]), cd(b[0])).float().numpy()
    close(got, a[:, 0].astype(np.float64) @ b[0], np.abs(a[:, 0]).astype(np.float64) @ np.abs(b[0]))


def test_matmul_backward_batched_weight_gradient():
    """(B, T, K) @ (K, N) with a shared right operand: its gradient sums the batch in one
    product (bmm_sum_raw), the left one is a batched product."""
    rng = np.random.default_rng(2)
    x, w, g = rnd(rng, 3, 10, 40), rnd(rng, 40, 24), rnd(rng, 3, 10, 24)
    xt, wt = cd(x).requires_grad_(), cd(w).requires_grad_()
    (xt @ wt).backward(cd(g))
    gx = g.astype(np.float64) @ w.T
    gw = np.einsum("bti,btj->ij", x.astype(np.float64), g)
    close(xt.grad.float().numpy(), gx, np.abs(g).astype(np.float64) @ np.abs(w).T)
    close(wt.grad.float().numpy(), gw, np.einsum("bti,btj->ij", np.abs(x).astype(np.float64),
                                                 np.abs(g)))


def test_nonfinite_values_propagate():
    a, b = np.ones((4, 6), np.float32), np.ones((6, 40), np.float32)
    a[1, 2], a[2, 3], b[3, 5] = np.inf, np.nan, 0.0
    got = (cd(a) @ cd(b)).float().numpy()
    assert np.isnan(got[2]).all()                 # a NaN poisons its row
    assert np.isinf(got[1]).sum() == 40           # inf * 1 + finite
    assert np.isnan(got[3, 5]) == False and got[0, 0] == 6.0  # noqa: E712
    a[1, 3] = 0
    b2 = b.copy()
    b2[2, 7] = 0.0                                # inf * 0 -> NaN, as IEEE (and torch) say
    assert np.isnan((cd(a) @ cd(b2)).float().numpy()[1, 7])


@pytest.mark.parametrize("M,K,N", [(1, 8, 5), (64, 1024, 300), (45, 513, 33)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward_backward(M, K, N, bias):
    rng = np.random.default_rng(K + N)
    x, w, b, g = rnd(rng, M, K), rnd(rng, N, K, scale=0.05), rnd(rng, N), rnd(rng, M, N)
    xt, wt = cd(x).requires_grad_(), cd(w).requires_grad_()
    bt = cd(b).requires_grad_() if bias else None
    c0 = calls()
    y = F.linear(xt, wt, bt)
    y.backward(cd(g))
    ran = calls() - c0
    assert y.dtype == cddp.bfloat16 and xt.grad.dtype == cddp.bfloat16
    x64, w64, g64 = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
    close(y.detach().float().numpy(), x64 @ w64.T + (b if bias else 0),
          np.abs(x64) @ np.abs(w64).T + (np.abs(b) if bias else 0))
    close(xt.grad.float().numpy(), g64 @ w64, np.abs(g64) @ np.abs(w64))
    close(wt.grad.float().numpy(), g64.T @ x64, np.abs(g64).T @ np.abs(x64))
    if bias:
        close(bt.grad.float().numpy(), g64.sum(0), np.abs(g64).sum(0))
    if KERNEL:
        assert ran == 3                         # y, dX and dW


def _conv_case(rng, transposed, nd, groups, stride, pad, k, cin, cout, size, dil=1):
    xs = (2, cin) + (size,) * nd
    ws = ((cin, cout // groups) if transposed else (cout, cin // groups)) + (k,) * nd
    return rnd(rng, *xs), rnd(rng, *ws, scale=0.2), rnd(rng, cout)


CONVS = [  # transposed, nd, groups, stride, pad, k, cin, cout, size
    (False, 2, 1, 1, 1, 3, 3, 16, 9),       # K = 27: odd, the first layer of a CNN
    (False, 2, 1, 2, 1, 3, 32, 40, 12),
    (False, 2, 4, 1, 0, 3, 16, 8, 7),       # groups
    (False, 2, 1, 1, 0, 1, 48, 20, 6),      # 1x1: the pointwise path
    (False, 1, 1, 1, 2, 5, 12, 18, 30),     # conv1d
    (True, 2, 1, 2, 1, 3, 24, 10, 5),       # conv_transpose2d
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "-".join(map(str, c)))
def test_conv_forward_backward(case):
    transposed, nd, groups, stride, pad = case[:5]
    rng = np.random.default_rng(sum(case[5:]))
    x, w, b = _conv_case(rng, *case)
    fn = (F.conv_transpose1d, F.conv_transpose2d)[nd - 1] if transposed else \
        (F.conv1d, F.conv2d)[nd - 1]
    kw = dict(stride=stride, padding=pad, groups=groups)
    xt, wt, bt = (cd(v).requires_grad_() for v in (x, w, b))
    c0 = calls()
    y = fn(xt, wt, bt, **kw)
    g = rnd(rng, *y.shape)
    y.backward(cd(g))
    ran = calls() - c0
    # the reference: the same conv in float64 on the same values (cddp's float64 path runs the
    # library's dgemm, not the kernel), and |.| versions of it for the accumulation bound
    d = [cddp.tensor(v.astype(np.float64)).requires_grad_() for v in (x, w, b)]
    y64 = fn(*d, **kw)
    y64.backward(cddp.tensor(g.astype(np.float64)))
    ad = [cddp.tensor(np.abs(v).astype(np.float64)).requires_grad_() for v in (x, w, b)]
    ya = fn(*ad, **kw)
    ya.backward(cddp.tensor(np.abs(g).astype(np.float64)))
    assert y.dtype == cddp.bfloat16
    close(y.detach().float().numpy(), y64.detach().numpy(), ya.detach().numpy())
    for t, r, a in zip((xt, wt, bt), d, ad):
        assert t.grad.dtype == cddp.bfloat16
        close(t.grad.float().numpy(), r.grad.numpy(), a.grad.numpy())
    if KERNEL:
        assert ran >= 3                       # forward, dX and dW products at least


def test_autocast_linear_and_conv_use_the_kernel():
    """Under autocast("cpu") float32 weights reach the products as bf16 casts."""
    rng = np.random.default_rng(5)
    lin = cddp.nn.Linear(64, 48)
    conv = cddp.nn.Conv2d(8, 16, 3, padding=1)
    x, img = cddp.tensor(rnd(rng, 32, 64)), cddp.tensor(rnd(rng, 2, 8, 10, 10))
    c0 = calls()
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        y, z = lin(x), conv(img)
    (y.float().sum() + z.float().sum()).backward()
    assert y.dtype == z.dtype == cddp.bfloat16
    assert lin.weight.grad.dtype == cddp.float32 and conv.weight.grad.dtype == cddp.float32
    wb = bf(lin.weight.detach().numpy()).astype(np.float64)
    close(y.detach().float().numpy(), x.numpy().astype(np.float64) @ wb.T +
          bf(lin.bias.detach().numpy()), np.abs(x.numpy()).astype(np.float64) @ np.abs(wb).T + 1)
    if KERNEL:
        assert calls() - c0 >= 4               # forward and dW of each layer (x needs none)


@needs_kernel
@pytest.mark.parametrize("M,N,K", [(400, 300, 600), (60, 1200, 800)])   # rows / columns split
def test_threads_share_a_product_with_the_same_bits(M, N, K):
    """set_num_threads(n): a large product is shared by n threads, each on whole micro-tiles
    of C; every element runs the same operations in the same order, so the bits match."""
    rng = np.random.default_rng(6)
    a, b = rnd(rng, M, K), rnd(rng, K, N)
    ta, tb = cd(a), cd(b)
    old, got = cddp.get_num_threads(), {}
    try:
        for n in (1, 2, 3):
            cddp.set_num_threads(n)
            t0 = cddp._C._blas_info()["own_bgemm_threads"]
            got[n] = (ta @ tb).float().numpy()
            assert cddp._C._blas_info()["own_bgemm_threads"] - t0 == n
    finally:
        cddp.set_num_threads(old)
    assert np.array_equal(got[1], got[2]) and np.array_equal(got[1], got[3])
    close(got[3], a.astype(np.float64) @ b, np.abs(a).astype(np.float64) @ np.abs(b))


@needs_kernel
def test_cddp_gemm_blas_turns_the_kernel_off():
    code = ("import cddp\n"
            "a = cddp.ones(40, 50).bfloat16()\n"
            "r = (a @ a.t()).float()\n"
            "i = cddp._C._blas_info()\n"
            "print(i['bgemm_kernel'], '|', i['own_bgemm_calls'], '|', float(r[0, 0]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=subprocess_env(CDDP_GEMM="blas"))
    assert out.returncode == 0, out.stderr
    kernel, n, v = out.stdout.strip().split(" | ")
    assert kernel == "float32 copies" and n == "0" and float(v) == 50.0
